"""Training's engine: the speed code of the autograd's convolutions and of Adam's update,
apart from the reference.

- ``conv``: ``FastConv2D`` and ``FastConv2DTranspose``, subclasses of the reference ops that
  choose among four algorithms (``conv_routes``): im2col with products tiled over refseg's
  threads (``conv_im2col``, ``products``, ``workspace``), Winograd F(2x2, 3x3) and F(4x4, 3x3)
  (``conv_winograd``, its C loops in ``winograd_f2x2.c``, ``winograd_f4x4.c``) and the direct
  kernels (``conv_direct``, with AVX-512 row loops in ``direct_conv_avx512.c``);
- ``threads``: the native libraries' thread counts, each step sized to the machine's load, and
  products cut for one count whatever count runs them;
- ``optim``: ``FastAdamUpdate``, Adam's elementwise update in vector loops, bit for bit the
  reference's (``adam_update.c``).

glibc's thresholds (``refseg.engine.allocator``), so that freed arrays' memory serves the next
ones, are set when training's engine or a plan first runs.

``training_engine`` installs the convolutions and Adam's update for the length of a ``with``
block, through ``refseg.autograd.seam``; the reference never imports this package.
"""
from __future__ import annotations

import contextlib

INFRASTRUCTURE = "training's engine: speed only, no claim element"


@contextlib.contextmanager
def training_engine():
    """Within the block, the autograd's convolutions take the engine's routes and Adam's
    update its vector loops (``replacements``), and glibc keeps freed memory for the next
    arrays (``allocator.keep_freed_memory``, once per process). Under
    ``refseg.engine.use_engine(False)`` it changes nothing: the reference route runs.
    Yields whether the engine runs."""
    from refseg.autograd.seam import ops_replaced
    from refseg.engine.switch import engine_enabled

    if not engine_enabled():
        yield False
        return
    from refseg.engine import allocator

    if not allocator.considered:
        allocator.keep_freed_memory()
    with ops_replaced(replacements()):
        yield True


def replacements() -> dict:
    """{reference op class: the engine's subclass}: the convolutions (``conv``) and Adam's
    update (``optim``)."""
    from refseg.autograd.optim import AdamUpdate
    from refseg.engine.training.conv import CONV_REPLACEMENTS
    from refseg.engine.training.optim import FastAdamUpdate

    return {**CONV_REPLACEMENTS, AdamUpdate: FastAdamUpdate}
