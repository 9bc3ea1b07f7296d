/* Adam's update in vectors of doubles: see adam_update.h.
 *
 * Per element, exactly as the reference kernel:
 *   m' = (float)(beta1 * m + (1 - beta1) * g)
 *   v' = (float)(beta2 * v + ((1 - beta2) * g) * g)
 *   p' = (float)(p - (lr * (m' / bias1)) / (sqrt(v' / bias2) + eps))
 * in double, each operation rounded on its own (no fused multiply-add: the build passes
 * -ffp-contract=off, and the intrinsics below are separate multiplies and adds). Division
 * and square root are correctly rounded in both IEEE widths, so the vector lanes give the
 * scalar bits. */
#include "adam_update.h"

#include <immintrin.h>
#include <math.h>

/* elements per work item of the parallel loop: a few hundred KiB of the five streams */
#define ADAM_BLOCK 16384

static void adam_scalar(float *p, const float *g, float *m, float *v, int64_t n, double lr,
                        double beta1, double beta2, double eps, double bias1, double bias2)
{
    for (int64_t k = 0; k < n; k++) {
        const double gk = g[k];
        const float mk = (float)(beta1 * m[k] + (1.0 - beta1) * gk);
        const float vk = (float)(beta2 * v[k] + (1.0 - beta2) * gk * gk);
        m[k] = mk;
        v[k] = vk;
        p[k] = (float)(p[k] - lr * (mk / bias1) / (sqrt(vk / bias2) + eps));
    }
}

__attribute__((target("avx512f")))
static void adam_avx512(float *p, const float *g, float *m, float *v, int64_t n, double lr,
                        double beta1, double beta2, double eps, double bias1, double bias2)
{
    const __m512d b1 = _mm512_set1_pd(beta1), b2 = _mm512_set1_pd(beta2);
    const __m512d c1 = _mm512_set1_pd(1.0 - beta1), c2 = _mm512_set1_pd(1.0 - beta2);
    const __m512d rate = _mm512_set1_pd(lr), e = _mm512_set1_pd(eps);
    const __m512d d1 = _mm512_set1_pd(bias1), d2 = _mm512_set1_pd(bias2);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const __m512d gk = _mm512_cvtps_pd(_mm256_loadu_ps(g + k));
        const __m256 mk = _mm512_cvtpd_ps(_mm512_add_pd(
            _mm512_mul_pd(b1, _mm512_cvtps_pd(_mm256_loadu_ps(m + k))), _mm512_mul_pd(c1, gk)));
        const __m256 vk = _mm512_cvtpd_ps(_mm512_add_pd(
            _mm512_mul_pd(b2, _mm512_cvtps_pd(_mm256_loadu_ps(v + k))),
            _mm512_mul_pd(_mm512_mul_pd(c2, gk), gk)));
        _mm256_storeu_ps(m + k, mk);
        _mm256_storeu_ps(v + k, vk);
        const __m512d step = _mm512_div_pd(
            _mm512_mul_pd(rate, _mm512_div_pd(_mm512_cvtps_pd(mk), d1)),
            _mm512_add_pd(_mm512_sqrt_pd(_mm512_div_pd(_mm512_cvtps_pd(vk), d2)), e));
        _mm256_storeu_ps(p + k, _mm512_cvtpd_ps(
            _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(p + k)), step)));
    }
    adam_scalar(p + k, g + k, m + k, v + k, n - k, lr, beta1, beta2, eps, bias1, bias2);
}

__attribute__((target("avx2")))
static void adam_avx2(float *p, const float *g, float *m, float *v, int64_t n, double lr,
                      double beta1, double beta2, double eps, double bias1, double bias2)
{
    const __m256d b1 = _mm256_set1_pd(beta1), b2 = _mm256_set1_pd(beta2);
    const __m256d c1 = _mm256_set1_pd(1.0 - beta1), c2 = _mm256_set1_pd(1.0 - beta2);
    const __m256d rate = _mm256_set1_pd(lr), e = _mm256_set1_pd(eps);
    const __m256d d1 = _mm256_set1_pd(bias1), d2 = _mm256_set1_pd(bias2);
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        const __m256d gk = _mm256_cvtps_pd(_mm_loadu_ps(g + k));
        const __m128 mk = _mm256_cvtpd_ps(_mm256_add_pd(
            _mm256_mul_pd(b1, _mm256_cvtps_pd(_mm_loadu_ps(m + k))), _mm256_mul_pd(c1, gk)));
        const __m128 vk = _mm256_cvtpd_ps(_mm256_add_pd(
            _mm256_mul_pd(b2, _mm256_cvtps_pd(_mm_loadu_ps(v + k))),
            _mm256_mul_pd(_mm256_mul_pd(c2, gk), gk)));
        _mm_storeu_ps(m + k, mk);
        _mm_storeu_ps(v + k, vk);
        const __m256d step = _mm256_div_pd(
            _mm256_mul_pd(rate, _mm256_div_pd(_mm256_cvtps_pd(mk), d1)),
            _mm256_add_pd(_mm256_sqrt_pd(_mm256_div_pd(_mm256_cvtps_pd(vk), d2)), e));
        _mm_storeu_ps(p + k, _mm256_cvtpd_ps(
            _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(p + k)), step)));
    }
    adam_scalar(p + k, g + k, m + k, v + k, n - k, lr, beta1, beta2, eps, bias1, bias2);
}

void refseg_adam_update_f(int backend, int threads, float *param, const float *grad,
                          float *m, float *v, int64_t n, double lr, double beta1,
                          double beta2, double eps, double bias1, double bias2)
{
    void (*run)(float *, const float *, float *, float *, int64_t, double, double, double,
                double, double, double) =
        backend == 2 ? adam_avx512 : backend == 1 ? adam_avx2 : adam_scalar;
    const int64_t blocks = (n + ADAM_BLOCK - 1) / ADAM_BLOCK;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t start = b * ADAM_BLOCK;
        const int64_t count = n - start < ADAM_BLOCK ? n - start : ADAM_BLOCK;
        run(param + start, grad + start, m + start, v + start, count, lr, beta1, beta2, eps,
            bias1, bias2);
    }
}
