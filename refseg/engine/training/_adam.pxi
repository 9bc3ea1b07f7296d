# Adam's elementwise update for float32 parameters in vectors of doubles (adam_update.c),
# included by refseg/_kernels.pyx. Same arithmetic as the reference's adam_update
# (autograd/_optim.pxi), bit for bit; NumPy twin: engine/training/_twins.py
# (vector_adam_update). The Python side: engine/training/optim.py.
from libc.stdint cimport int64_t

cdef extern from "adam_update.h" nogil:
    void refseg_adam_update_f(int backend, int threads, float *param, const float *grad,
                              float *m, float *v, int64_t n, double lr, double beta1,
                              double beta2, double eps, double bias1, double bias2)


def vector_adam_update(float[::1] param, const float[::1] grad, float[::1] m, float[::1] v,
                       double lr, double beta1, double beta2, double eps, double bias1,
                       double bias2, int backend):
    """The reference's ``adam_update`` on float32 arrays of one length, in place, on the
    vector unit ``backend`` names (2 AVX-512F, 1 AVX2, 0 plain C; the caller checks the
    CPU)."""
    cdef Py_ssize_t n = param.shape[0]
    if grad.shape[0] != n or m.shape[0] != n or v.shape[0] != n:
        raise ValueError("vector_adam_update: arrays of different lengths")
    if backend not in (0, 1, 2):
        raise ValueError("vector_adam_update: backend must be 0, 1 or 2")
    if n == 0:
        return
    with nogil:
        refseg_adam_update_f(backend, _array_threads(n * _ADAM_WORK_PER_ELEMENT), &param[0],
                             &grad[0], &m[0], &v[0], n, lr, beta1, beta2, eps, bias1, bias2)
