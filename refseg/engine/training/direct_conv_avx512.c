/* The AVX-512 float32 row loops of the direct kernels; what they compute, and how their results
   compare with the plain loops' of engine/training/_direct_conv.pxi, is in direct_conv_avx512.h. Only
   these functions carry the avx512f target: the rest of the extension stays plain x86-64, and
   the Cython side calls them only where refseg_has_avx512() says the CPU can run them. */
#include <string.h>

#include "direct_conv_avx512.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* GCC vector types: 16 floats, 8 floats, 8 doubles, and the first and last with 4- and
   8-byte alignment for unaligned loads and stores */
typedef float refseg_v16 __attribute__((vector_size(64)));
typedef float refseg_v16u __attribute__((vector_size(64), aligned(4)));
typedef float refseg_v8f __attribute__((vector_size(32)));
typedef double refseg_v8d __attribute__((vector_size(64)));
typedef double refseg_v8du __attribute__((vector_size(64), aligned(8)));

__attribute__((target("avx512f")))
void refseg_small_row_avx512(const float *rows, const ptrdiff_t *offsets, const float *wt,
                             const float *bias, ptrdiff_t taps, ptrdiff_t cout, ptrdiff_t wo,
                             float *out)
{
    float acc[REFSEG_WIDE_LANES];
    for (ptrdiff_t o = 0; o < cout; o++) {
        const float *w_o = wt + o * taps;
        for (ptrdiff_t j0 = 0; j0 < wo; j0 += REFSEG_WIDE_LANES) {
            refseg_v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            if (wo - j0 > 32) {
                for (ptrdiff_t t = 0; t < taps; t++) {
                    const float wv = w_o[t];  /* vector * scalar: wv in every lane */
                    const refseg_v16u *src = (const refseg_v16u *)(rows + offsets[t] + j0);
                    a0 = a0 + src[0] * wv;
                    a1 = a1 + src[1] * wv;
                    a2 = a2 + src[2] * wv;
                    a3 = a3 + src[3] * wv;
                }
            } else {
                for (ptrdiff_t t = 0; t < taps; t++) {
                    const float wv = w_o[t];
                    const refseg_v16u *src = (const refseg_v16u *)(rows + offsets[t] + j0);
                    a0 = a0 + src[0] * wv;
                    a1 = a1 + src[1] * wv;
                }
            }
            memcpy(acc, &a0, sizeof a0);
            memcpy(acc + 16, &a1, sizeof a1);
            memcpy(acc + 32, &a2, sizeof a2);
            memcpy(acc + 48, &a3, sizeof a3);
            ptrdiff_t n = wo - j0 < REFSEG_WIDE_LANES ? wo - j0 : REFSEG_WIDE_LANES;
            for (ptrdiff_t l = 0; l < n; l++) out[(j0 + l) * cout + o] = acc[l] + bias[o];
        }
    }
}

/* adds the sum of a[u] * b[u] (of a[u] if b is NULL), u < count, to lanes[0..7]: 64
   partial sums over the row in float32 (only the first 32 in a last block of at most 32
   pixels), added pairwise into 16, then partial sums l and l + 8 in float64 into lane l */
__attribute__((target("avx512f")))
static inline void refseg_small_dot_avx512(const float *a, const float *b, ptrdiff_t count,
                                           double *lanes)
{
    refseg_v16 p0 = {0}, p1 = {0}, p2 = {0}, p3 = {0};
    refseg_v8f low, high;
    ptrdiff_t u = 0;
    for (; count - u > 32; u += REFSEG_WIDE_LANES) {
        const refseg_v16u *x = (const refseg_v16u *)(a + u);
        if (b) {
            const refseg_v16u *y = (const refseg_v16u *)(b + u);
            p0 = p0 + x[0] * y[0];
            p1 = p1 + x[1] * y[1];
            p2 = p2 + x[2] * y[2];
            p3 = p3 + x[3] * y[3];
        } else {
            p0 = p0 + x[0];
            p1 = p1 + x[1];
            p2 = p2 + x[2];
            p3 = p3 + x[3];
        }
    }
    if (u < count) {
        const refseg_v16u *x = (const refseg_v16u *)(a + u);
        if (b) {
            const refseg_v16u *y = (const refseg_v16u *)(b + u);
            p0 = p0 + x[0] * y[0];
            p1 = p1 + x[1] * y[1];
        } else {
            p0 = p0 + x[0];
            p1 = p1 + x[1];
        }
    }
    p0 = (p0 + p1) + (p2 + p3);
    memcpy(&low, &p0, sizeof low);
    memcpy(&high, (const float *)&p0 + 8, sizeof high);
    *(refseg_v8du *)lanes = *(refseg_v8du *)lanes
        + (__builtin_convertvector(low, refseg_v8d) + __builtin_convertvector(high, refseg_v8d));
}

__attribute__((target("avx512f")))
void refseg_small_weight_row_avx512(const float *rows, const ptrdiff_t *offsets,
                                    ptrdiff_t taps, const float *g_row, ptrdiff_t cout,
                                    ptrdiff_t width, ptrdiff_t wo, double *lanes)
{
    for (ptrdiff_t t = 0; t < taps; t++)
        for (ptrdiff_t o = 0; o < cout; o++)
            refseg_small_dot_avx512(rows + offsets[t], g_row + o * width, wo,
                                    lanes + (t * cout + o) * 8);
    for (ptrdiff_t o = 0; o < cout; o++)
        refseg_small_dot_avx512(g_row + o * width, NULL, wo, lanes + (taps * cout + o) * 8);
}

/* 16 pixels at a time: two two-vector permutations per plane (the pixels in the first two
   loaded vectors, then those in the third) */
__attribute__((target("avx512f")))
void refseg_planes3_avx512(const float *src, ptrdiff_t count, float *d0, float *d1,
                           float *d2)
{
    typedef int refseg_i16 __attribute__((vector_size(64)));
    static const refseg_i16 first[3] = {
        {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 0, 0, 0, 0, 0},
        {1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 0, 0, 0, 0, 0},
        {2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 0, 0, 0, 0, 0, 0}};
    static const refseg_i16 second[3] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 17, 20, 23, 26, 29},
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 18, 21, 24, 27, 30},
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 19, 22, 25, 28, 31}};
    float *dst[3] = {d0, d1, d2};
    ptrdiff_t u = 0;
    for (; u + 16 <= count; u += 16) {
        const refseg_v16u *in = (const refseg_v16u *)(src + 3 * u);
        const refseg_v16 a = in[0], b = in[1], c = in[2];
        for (int p = 0; p < 3; p++)
            *(refseg_v16u *)(dst[p] + u) =
                __builtin_shuffle(__builtin_shuffle(a, b, first[p]), c, second[p]);
    }
    for (; u < count; u++) {
        d0[u] = src[3 * u];
        d1[u] = src[3 * u + 1];
        d2[u] = src[3 * u + 2];
    }
}

int refseg_has_avx512(void) { return __builtin_cpu_supports("avx512f"); }

#else

void refseg_small_row_avx512(const float *rows, const ptrdiff_t *offsets, const float *wt,
                             const float *bias, ptrdiff_t taps, ptrdiff_t cout, ptrdiff_t wo,
                             float *out) {}

void refseg_small_weight_row_avx512(const float *rows, const ptrdiff_t *offsets,
                                    ptrdiff_t taps, const float *g_row, ptrdiff_t cout,
                                    ptrdiff_t width, ptrdiff_t wo, double *lanes) {}

void refseg_planes3_avx512(const float *src, ptrdiff_t count, float *d0, float *d1,
                           float *d2) {}

int refseg_has_avx512(void) { return 0; }

#endif
