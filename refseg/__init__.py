"""refseg: a reference implementation of the image semantic segmentation method of patent
CN114419081B, written from scratch in NumPy and Cython.

The wings, in the order of the claims:

- :mod:`refseg.claim1`: grayscale, Gaussian, the four edge operators, the coefficient-of-variation
  weights and the vote, the feature-region image (claim 1, step 2);
- :mod:`refseg.autograd`: tensors, the ops of the network with their gradients, layers, Adam
  (claim 4);
- :mod:`refseg.models`: ResNet50V2, MobileNetV2, the fusion decoder, weight files (claims 2-3);
- :mod:`refseg.data`: the label schema, data set folders, synthetic welds, network inputs;
- :mod:`refseg.run`: training, prediction and evaluation, training curves, the demo (claims 1
  and 5);
- :mod:`refseg.golden`: golden-file bundles for checking other implementations;
- :mod:`refseg.engine`: the fast routes (training's convolutions, threads and allocator), which
  the reference never imports; ``refseg.engine.use_engine(False)`` turns them off.

The names below are the public API; each is imported when first used, so that
``import refseg`` stays light.
"""
import os
import sys

from refseg._version import __version__
from refseg.lazy import lazy_names

# OpenBLAS's idle worker threads spin for a long time after each matrix product and then
# compete with refseg's OpenMP loops on the same cores (measured: an im2col after a GEMM took
# 9-12 ms instead of 4.6 ms on 2 cores). A short timeout removes that without slowing the GEMM.
# It only takes effect if refseg is imported before NumPy loads OpenBLAS.
_SET_HERE = [] if "OPENBLAS_THREAD_TIMEOUT" in os.environ else ["OPENBLAS_THREAD_TIMEOUT"]
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
# The other direction: libgomp's idle threads spin for about a millisecond by default after
# each parallel region and then take the cores from the OpenBLAS threads of the next product,
# or from a neighbour's; sleeping at once (OMP_WAIT_POLICY=PASSIVE) made every region start
# with a wake-up instead, 43-48 us on a 2-core VM (Zen 5) against 1.5-2 us while the workers
# still spin. A short spin, 20-50 us there, covers the gaps between the engine's steps and
# wastes little beside other processes: Zen 5, 2 threads, a batch-1 prediction at 224x224,
# medians 57.3 and 58.6 ms passive, 53.0 and 53.5 with this spin; a spin ten times as long was
# no faster (53-69 ms). The user's own
# OMP_WAIT_POLICY or GOMP_SPINCOUNT stands. Like the line above it only takes effect if refseg
# loads libgomp first (before torch, say).
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    _SET_HERE.append("GOMP_SPINCOUNT")
    os.environ["GOMP_SPINCOUNT"] = "1000"


def _read_too_early(names) -> list[str]:
    """Of ``names`` (variables refseg set), those a library read before refseg set them, each
    with the library: NumPy's OpenBLAS reads its own when NumPy is imported, libgomp its own
    when any library (torch, say) loads it."""
    late = []
    if "OPENBLAS_THREAD_TIMEOUT" in names and "numpy" in sys.modules:
        late.append("NumPy's OpenBLAS (OPENBLAS_THREAD_TIMEOUT)")
    if "GOMP_SPINCOUNT" in names:
        try:
            with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
                if "libgomp" in maps.read():
                    late.append("OpenMP's libgomp (GOMP_SPINCOUNT)")
        except OSError:  # not Linux: nothing to tell
            pass
    return late


_LATE = _read_too_early(_SET_HERE)
if _LATE:
    import warnings

    from refseg.errors import ImportOrderWarning

    # stacklevel 2: the user's import line (warnings skips importlib's frames)
    warnings.warn(f"refseg was imported after {' and '.join(_LATE)} had loaded, so its "
                  "settings for idle threads do not apply and on few cores refseg may run "
                  "slower: import refseg first, or set the variable yourself to silence this",
                  ImportOrderWarning, stacklevel=2)

#: public name -> the module that defines it
_PUBLIC = {
    "InputError": "refseg.errors",
    "read_image": "refseg.images",
    "to_gray": "refseg.claim1.preprocess",
    "gaussian_kernel": "refseg.claim1.preprocess",
    "gaussian_blur": "refseg.claim1.preprocess",
    "canny": "refseg.claim1.operators",
    "sobel": "refseg.claim1.operators",
    "prewitt": "refseg.claim1.operators",
    "sobel_gradient": "refseg.claim1.operators",
    "prewitt_gradient": "refseg.claim1.operators",
    "laplacian_of_gaussian": "refseg.claim1.operators",
    "operator_weights": "refseg.claim1.weighting",
    "extract": "refseg.claim1.features",
    "FeatureResult": "refseg.claim1.features",
    "write_edge_outputs": "refseg.claim1.outputs",
    "Tensor": "refseg.autograd",
    "Adam": "refseg.autograd.optim",
    "ResMobileNet": "refseg.models",
    "weld_image": "refseg.data.synthetic",
    "write_synthetic_dataset": "refseg.data.synthetic",
    "load_dataset": "refseg.data.dataset",
    "network_input": "refseg.data.inputs",
    "TrainConfig": "refseg.run.config",
    "train": "refseg.run.training",
    "load_run": "refseg.run.training",
    "predict_image": "refseg.run.evaluation",
    "evaluate_runs": "refseg.run.evaluation",
    "DemoSettings": "refseg.run.config",
    "run_demo": "refseg.run.demo",
    "write_bundle": "refseg.golden",
    "check_bundle": "refseg.golden",
}

__all__ = ["__version__", *sorted(_PUBLIC)]


__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)
