# The Adam step, included by refseg/_kernels.pyx, which holds the cimports, _array_threads and the
# fused type real. NumPy twins: autograd/_twins_training.py.

# An Adam update costs about 7 times an elementwise sum per element (three double-precision
# divisions and a square root: 5.7 ns per element on one Zen 1 core, against 0.8 for a float32
# sum), so each element counts as 8 units of work and the loop is split across the threads from
# PARALLEL_MIN_ELEMENTS / 8 elements on: 73 of the network's 359 trainable tensors, 99 % of its
# parameters, but only one of them (x1's kernel, 13.3 M elements) holds 4 M or more.
cdef Py_ssize_t _ADAM_WORK_PER_ELEMENT = 8


def adam_update(real[::1] param, const real[::1] grad, real[::1] m, real[::1] v, double lr,
                double beta1, double beta2, double eps, double bias1, double bias2):
    """m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * (m / bias1) / (sqrt(v / bias2) + eps),
    with bias_k = 1 - beta_k^t; elementwise, in the parameter's precision."""
    cdef Py_ssize_t n = param.shape[0], k
    cdef real g, mk, vk
    with nogil:
        for k in prange(n, schedule="dynamic", chunksize=_CHUNK_ELEMENTS,
                         num_threads=_array_threads(n * _ADAM_WORK_PER_ELEMENT)):
            g = grad[k]
            mk = <real> (beta1 * m[k] + (1.0 - beta1) * g)
            vk = <real> (beta2 * v[k] + (1.0 - beta2) * g * g)
            m[k] = mk
            v[k] = vk
            param[k] = <real> (param[k] - lr * (mk / bias1) / (sqrt(vk / bias2) + eps))


def nonfinite_count(const real[::1] x, long long[::1] count):
    """count[0] = how many values of x are NaN or infinite (Adam checks every gradient before
    it moves any parameter); split across the threads as a sum of 0/1 per element."""
    cdef Py_ssize_t n = x.shape[0], k
    cdef long long bad = 0
    cdef real d
    with nogil:
        for k in prange(n, schedule="static", num_threads=_array_threads(n)):
            d = x[k] - x[k]  # 0 for a finite value, NaN for NaN and the infinities
            bad += d != 0
    count[0] = bad
