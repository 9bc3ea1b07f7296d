# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Hot loops of refseg, compiled into one module from this file, the ``.pxi`` files it includes
(one per topic, beside the Python that calls those kernels: ``claim1/``, ``autograd/``,
``engine/training/``) and the C loops in ``engine/training/*.c``. Each kernel has an obvious
NumPy twin of the same name and signature: the reference's in ``_twins.py`` (which gathers
``claim1/_twins.py``, ``autograd/_twins.py`` and ``autograd/_twins_training.py``), the
training engine's in ``engine/training/_twins.py``.

The kernels trust their inputs: shapes, dtypes, contiguity and parameter ranges are checked
by the Python functions that call them. They release the GIL and split rows over OpenMP
threads; every output element is computed by one thread in a fixed arithmetic order, so results
do not depend on the thread count, and the build uses ``-ffp-contract=off`` (setup.py, for the
C files too) so that they match the twins bit for bit.

Border rule of the image kernels (claim 1): reflect-101 (``dcb|abcd|cba``; OpenCV
``BORDER_REFLECT_101``, NumPy ``np.pad(mode="reflect")``, SciPy ``mode="mirror"``). See spec
``R-border``. The autograd kernels work on NHWC arrays; output pixel (i, j) of a window op
reads input rows i * stride - pad_top + a, a = 0..kh-1 (columns likewise), and reads outside
the input are zero.
"""
cimport openmp
from cython.parallel cimport prange
from libc.math cimport INFINITY, fabs, sqrt
from libc.stdlib cimport calloc, malloc, free
from libc.string cimport memcpy, memset


# Images with fewer pixels run on one thread: below this, starting and joining threads costs
# more than it saves, and on a loaded machine a parallel loop waits for descheduled threads.
cdef Py_ssize_t _PARALLEL_MIN_PIXELS = 262144
PARALLEL_MIN_PIXELS = _PARALLEL_MIN_PIXELS


cdef inline int _threads(Py_ssize_t pixels) noexcept nogil:
    return openmp.omp_get_max_threads() if pixels >= _PARALLEL_MIN_PIXELS else 1


# The network's kernels (autograd/) run on one thread below this many elements (or units of
# work), where starting and joining the threads costs more than it saves. At batch 1 most of
# the network's batch norms, sums and paddings hold 0.2-1 M elements: split over both threads
# from this bound on, a 224x224 prediction on 2 threads took 0.86-0.90 of its time at a bound
# of 1 M, 0.97 with torch's calls between refseg's (the lab log in docs/performance.md's git
# history). Beside a busy neighbour, where a parallel loop can wait at its end for a
# descheduled thread, refseg.engine.training.threads.sized_to_load runs the call on fewer threads.
cdef Py_ssize_t _PARALLEL_MIN_ELEMENTS = 262144
PARALLEL_MIN_ELEMENTS = _PARALLEL_MIN_ELEMENTS


cdef inline int _array_threads(Py_ssize_t elements) noexcept nogil:
    return openmp.omp_get_max_threads() if elements >= _PARALLEL_MIN_ELEMENTS else 1


# The kernels' parallel loops hand out work in chunks of about this many elements (dynamic
# schedule; 8 rows of a 1920-pixel image): a thread that the system deschedules while holding a
# chunk (a busy neighbour on its core) then holds up the end of the loop by one chunk only,
# where a guided schedule's first chunk is half the loop. Which thread computes an element
# never changes its value.
cdef Py_ssize_t _CHUNK_ELEMENTS = 16384


cdef inline Py_ssize_t _chunk(Py_ssize_t elements_per_item) noexcept nogil:
    """Loop items per chunk for items of ``elements_per_item`` elements (at least 1)."""
    return max(1, _CHUNK_ELEMENTS // max(1, elements_per_item))


# The element type of the autograd kernels: each is compiled for float32 and for float64.
ctypedef fused real:
    float
    double


include "claim1/_kernels.pxi"
include "autograd/_im2col.pxi"
include "autograd/_window.pxi"
include "autograd/_norm.pxi"
include "autograd/_optim.pxi"
include "autograd/_elementwise.pxi"
include "autograd/_matmul.pxi"
include "engine/training/_direct_conv.pxi"
include "engine/training/_winograd.pxi"
include "engine/training/_gemm.pxi"
include "engine/training/_adam.pxi"
include "engine/_engine.pxi"
