"""The engine: refseg's fast routes, beside the reference that reads like the claims.

The reference (``refseg.autograd``, ``refseg.claim1``, ``refseg.golden``, the walkthrough and
the spec) computes every op by one obvious algorithm and never imports this package. The engine
computes the same ops faster, with results equal to the reference's within stated tolerances
rather than bit for bit. ``use_engine(False)`` is the one switch: inside it every op and every
prediction takes the reference route.

Inference. A *plan* is made once from a model and its weights (:func:`plan`): it walks the
layer graph, folds every inference batch norm that follows a convolution into that
convolution's kernel and bias, has the others (ResNet50V2's pre-activation batch norms, which
a ReLU separates from the next convolution) written with their ReLU as a second output of the
convolution that computes their input, folds zero paddings into the convolution or pooling
that reads them, fuses each ReLU / ReLU6 and each residual Add into the epilogue of the
convolution whose output it reads, packs every kernel once into panels of 16 output channels
(the layout of the engine's own micro-kernels) and chooses, per convolution, its algorithm
(the loop order of its tiles, dot products for few outputs, Winograd F(2x2, 3x3) for a
stride-1 3x3 convolution) by timing them on this machine (or by a fixed rule,
``"estimate"``), recording the choice so that a plan made from the same choices replays
them.

At run time (:meth:`Plan.predict`) the activations stay NHWC from layer to layer; the
convolutions run as indirect convolutions (a table of input offsets per output pixel and tap,
built once per input size; zero padding and the transposed convolutions' missing taps read a
row of zeros) in C micro-kernels vectorised for AVX-512 or AVX2 + FMA, chosen at run time, with
a portable fallback (:func:`portable_kernels` forces it), and split over one OpenMP pool; the
engine calls no BLAS. Its results are held to the reference's within the tolerances of
:mod:`refseg.engine.runtime`.

Training. ``refseg.engine.training`` holds training's convolutions (Winograd, direct kernels,
products tiled over the threads), its thread sizing and allocator settings, installed into the
autograd through ``refseg.autograd.seam``.
"""
from refseg.engine.switch import engine_enabled, use_engine
from refseg.vocabulary import DEFAULT_ROUTE, ROUTES

INFRASTRUCTURE = "the choice between the engine and the reference route"


# Imported on first use, not here: the planner imports the models and the autograd.
_LAZY = {"Plan": "refseg.engine.planner", "plan": "refseg.engine.planner",
         "portable_kernels": "refseg.engine.runtime", "engine_threads": "refseg.engine.runtime"}

__all__ = sorted([*_LAZY, "engine_enabled", "use_engine", "predictor", "ROUTES",
                  "DEFAULT_ROUTE"])


#: Plans for at least this many images measure their algorithms; for fewer, the few calls
#: that measuring costs (about six predictions of one image) would outweigh what they save,
#: and the plan estimates them.
MEASURED_FROM = 32


def predictor(model, route: str = DEFAULT_ROUTE, images: int = MEASURED_FROM):
    """What predicts with ``model`` on ``route``: the model itself ("reference", or any route
    inside ``use_engine(False)``) or a plan of it made here ("engine"; its algorithms measured
    when it will predict at least ``MEASURED_FROM`` images, else estimated); both have
    ``predict(x, batch_size)``."""
    if route not in ROUTES:
        from refseg.errors import InputError

        raise InputError(f"route must be one of {ROUTES}, got {route!r}")
    if route == "reference" or not engine_enabled():
        return model
    from refseg.engine.planner import plan

    return plan(model, mode="measure" if images >= MEASURED_FROM else "estimate")


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'refseg.engine' has no attribute {name!r}")
