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

/* the loop above in vectors of W doubles: D is the prefix of the double vector's intrinsics
   (DV its type), F that of the float vector of W lanes (FV) */
#define ADAM_VECTORS(NAME, TARGET, DV, FV, W, D, F)                                           \
TARGET static void NAME(float *p, const float *g, float *m, float *v, int64_t n, double lr,  \
                        double beta1, double beta2, double eps, double bias1, double bias2)  \
{                                                                                            \
    const DV b1 = D##set1_pd(beta1), b2 = D##set1_pd(beta2);                                 \
    const DV c1 = D##set1_pd(1.0 - beta1), c2 = D##set1_pd(1.0 - beta2);                     \
    const DV rate = D##set1_pd(lr), e = D##set1_pd(eps);                                     \
    const DV d1 = D##set1_pd(bias1), d2 = D##set1_pd(bias2);                                 \
    int64_t k = 0;                                                                           \
    for (; k + W <= n; k += W) {                                                             \
        const DV gk = D##cvtps_pd(F##loadu_ps(g + k));                                       \
        const FV mk = D##cvtpd_ps(D##add_pd(                                                 \
            D##mul_pd(b1, D##cvtps_pd(F##loadu_ps(m + k))), D##mul_pd(c1, gk)));             \
        const FV vk = D##cvtpd_ps(D##add_pd(                                                 \
            D##mul_pd(b2, D##cvtps_pd(F##loadu_ps(v + k))), D##mul_pd(D##mul_pd(c2, gk), gk)));\
        F##storeu_ps(m + k, mk);                                                             \
        F##storeu_ps(v + k, vk);                                                             \
        const DV step = D##div_pd(D##mul_pd(rate, D##div_pd(D##cvtps_pd(mk), d1)),           \
                                  D##add_pd(D##sqrt_pd(D##div_pd(D##cvtps_pd(vk), d2)), e)); \
        F##storeu_ps(p + k, D##cvtpd_ps(D##sub_pd(D##cvtps_pd(F##loadu_ps(p + k)), step)));  \
    }                                                                                        \
    adam_scalar(p + k, g + k, m + k, v + k, n - k, lr, beta1, beta2, eps, bias1, bias2);    \
}
ADAM_VECTORS(adam_avx512, __attribute__((target("avx512f"))), __m512d, __m256, 8, _mm512_,
             _mm256_)
ADAM_VECTORS(adam_avx2, __attribute__((target("avx2"))), __m256d, __m128, 4, _mm256_, _mm_)

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
