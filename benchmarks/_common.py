"""What the benchmark scripts share (they run as ``python benchmarks/<script>.py``)."""
import os


def all_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def pin_threads(threads: int) -> None:
    """Set every thread-count variable. OpenMP and OpenBLAS read them once, when they load:
    call this before NumPy, refseg or torch is imported."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    # the waiting policies refseg sets when it is imported first (refseg/__init__.py), here for
    # the whole process whatever loads first; torch, in the same process, runs under them too
    import refseg  # noqa: F401
