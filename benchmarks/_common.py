"""What the benchmark scripts share (they run as ``python benchmarks/<script>.py``)."""
import os


def all_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
