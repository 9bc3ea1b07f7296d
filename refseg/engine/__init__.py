"""refseg's engine: the fast routes, apart from the reference.

The reference (``refseg.autograd``, ``refseg.claim1``, ``refseg.golden``, the walkthrough and
the spec) computes every op by one obvious algorithm and never imports this package. The engine
computes the same ops faster, with results equal to the reference's within stated tolerances
rather than bit for bit.

- ``refseg.engine.training``: training's convolutions (Winograd, direct kernels, products tiled
  over the threads), its thread sizing and allocator settings, installed into the autograd
  through ``refseg.autograd.seam``.
- ``use_engine(False)``: the one switch; inside it every op takes the reference route.
"""
from refseg.engine.switch import engine_enabled, use_engine

__all__ = ["engine_enabled", "use_engine"]
