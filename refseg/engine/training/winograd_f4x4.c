/* The per-tile loops of Winograd F(4x4, 3x3) (the matrices are in engine/training/_winograd.pxi), one
   body for float and double through a macro. Each transform works on a block of channels at a
   time: the first pass reads the tile's rows (or planes) and writes into arrays on the stack,
   the second reads those and writes the result, both through helpers whose restrict parameters
   let the compiler vectorise over the channels without checking for overlap (without them the
   second pass ran scalar, 1.6 times F(2x2, 3x3)'s time for the input transform). The macros
   below are private to this file. */
#include <string.h>

#include "winograd_f4x4.h"

/* channels of one tile transformed at a time */
#define REFSEG_W4_LANES 32
/* B^T (6 values), A^T (6 -> 4) and G (3 -> 6): the order of operations is the twins' */
#define REFSEG_BT4(d0, d1, d2, d3, d4, d5, t, four, five, two) do { \
    (t)[0] = ((d0) * (four) - (d2) * (five)) + (d4); \
    (t)[1] = ((d3) + (d4)) - ((d1) + (d2)) * (four); \
    (t)[2] = ((d4) - (d3)) + ((d1) - (d2)) * (four); \
    (t)[3] = ((d4) - (d2)) + ((d3) - (d1)) * (two); \
    (t)[4] = ((d4) - (d2)) - ((d3) - (d1)) * (two); \
    (t)[5] = ((d1) * (four) - (d3) * (five)) + (d5); \
} while (0)
#define REFSEG_AT4(m0, m1, m2, m3, m4, m5, y, two, four, eight) do { \
    (y)[0] = ((m0) + ((m1) + (m2))) + ((m3) + (m4)); \
    (y)[1] = ((m1) - (m2)) + ((m3) - (m4)) * (two); \
    (y)[2] = ((m1) + (m2)) + ((m3) + (m4)) * (four); \
    (y)[3] = (((m1) - (m2)) + ((m3) - (m4)) * (eight)) + (m5); \
} while (0)
#define REFSEG_G4(g0, g1, g2, t, quarter, sixth, twelfth, twentyfourth) do { \
    (t)[0] = (g0) * (quarter); \
    (t)[1] = (((g0) + (g1)) + (g2)) * -(sixth); \
    (t)[2] = (((g0) - (g1)) + (g2)) * -(sixth); \
    (t)[3] = ((g0) * (twentyfourth) + (g1) * (twelfth)) + (g2) * (sixth); \
    (t)[4] = ((g0) * (twentyfourth) - (g1) * (twelfth)) + (g2) * (sixth); \
    (t)[5] = (g2); \
} while (0)

#define REFSEG_WINOGRAD4(T, SUFFIX) \
/* the transforms applied to n-vectors: out_i[c] = sum_j M[i][j] in_j[c]; restrict \
   parameters let the compiler vectorise over c without checking for overlap */ \
static inline void refseg_bt4_##SUFFIX( \
        const T *restrict d0, const T *restrict d1, const T *restrict d2, \
        const T *restrict d3, const T *restrict d4, const T *restrict d5, \
        T *restrict o0, T *restrict o1, T *restrict o2, T *restrict o3, \
        T *restrict o4, T *restrict o5, ptrdiff_t n) \
{ \
    const T four = (T)4, five = (T)5, two = (T)2; \
    for (ptrdiff_t c = 0; c < n; c++) { \
        T t[6]; \
        REFSEG_BT4(d0[c], d1[c], d2[c], d3[c], d4[c], d5[c], t, four, five, two); \
        o0[c] = t[0]; o1[c] = t[1]; o2[c] = t[2]; o3[c] = t[3]; o4[c] = t[4]; o5[c] = t[5]; \
    } \
} \
static inline void refseg_at4_##SUFFIX( \
        const T *restrict m0, const T *restrict m1, const T *restrict m2, \
        const T *restrict m3, const T *restrict m4, const T *restrict m5, \
        const T *restrict bias, T *restrict y0, T *restrict y1, T *restrict y2, \
        T *restrict y3, ptrdiff_t n) \
{ \
    const T two = (T)2, four = (T)4, eight = (T)8; \
    if (bias) { \
        for (ptrdiff_t c = 0; c < n; c++) { \
            T t[4]; \
            REFSEG_AT4(m0[c], m1[c], m2[c], m3[c], m4[c], m5[c], t, two, four, eight); \
            y0[c] = t[0] + bias[c]; y1[c] = t[1] + bias[c]; \
            y2[c] = t[2] + bias[c]; y3[c] = t[3] + bias[c]; \
        } \
    } else { \
        for (ptrdiff_t c = 0; c < n; c++) { \
            T t[4]; \
            REFSEG_AT4(m0[c], m1[c], m2[c], m3[c], m4[c], m5[c], t, two, four, eight); \
            y0[c] = t[0]; y1[c] = t[1]; y2[c] = t[2]; y3[c] = t[3]; \
        } \
    } \
} \
static inline void refseg_g4_##SUFFIX( \
        const T *restrict g0, const T *restrict g1, const T *restrict g2, \
        T *restrict o0, T *restrict o1, T *restrict o2, T *restrict o3, \
        T *restrict o4, T *restrict o5, ptrdiff_t n) \
{ \
    const T quarter = (T)0.25, sixth = (T)(1.0 / 6), twelfth = (T)(1.0 / 12); \
    const T twentyfourth = (T)(1.0 / 24); \
    for (ptrdiff_t e = 0; e < n; e++) { \
        T t[6]; \
        REFSEG_G4(g0[e], g1[e], g2[e], t, quarter, sixth, twelfth, twentyfourth); \
        o0[e] = t[0]; o1[e] = t[1]; o2[e] = t[2]; o3[e] = t[3]; o4[e] = t[4]; o5[e] = t[5]; \
    } \
} \
/* dst[k*stride + c] = (B^T d B)[k / 6][k % 6], d[r][s] = src[6r + s][c], c < ch */ \
void refseg_winograd4_input_##SUFFIX(const T *const *src, T *dst, \
                                     ptrdiff_t stride, ptrdiff_t ch) \
{ \
    T t[36][REFSEG_W4_LANES]; \
    for (ptrdiff_t c0 = 0; c0 < ch; c0 += REFSEG_W4_LANES) { \
        ptrdiff_t n = ch - c0 < REFSEG_W4_LANES ? ch - c0 : REFSEG_W4_LANES; \
        /* B^T d down each column s: t[6 xi + s] */ \
        for (int s = 0; s < 6; s++) \
            refseg_bt4_##SUFFIX(src[s] + c0, src[6 + s] + c0, src[12 + s] + c0, \
                                src[18 + s] + c0, src[24 + s] + c0, src[30 + s] + c0, \
                                t[s], t[6 + s], t[12 + s], t[18 + s], t[24 + s], \
                                t[30 + s], n); \
        /* (B^T d) B along each row xi */ \
        for (int xi = 0; xi < 6; xi++) { \
            T *o = dst + 6 * xi * stride + c0; \
            refseg_bt4_##SUFFIX(t[6 * xi], t[6 * xi + 1], t[6 * xi + 2], t[6 * xi + 3], \
                                t[6 * xi + 4], t[6 * xi + 5], o, o + stride, \
                                o + 2 * stride, o + 3 * stride, o + 4 * stride, \
                                o + 5 * stride, n); \
        } \
    } \
} \
/* dst[4u + v][o] = (A^T M A)[u][v] + bias[o], M[k] = m[k*stride + o], o < cout; \
   pixels with a NULL dst (past the output's edge) are not written */ \
void refseg_winograd4_output_##SUFFIX(const T *m, ptrdiff_t stride, \
                                      const T *bias, T *const *dst, \
                                      ptrdiff_t cout) \
{ \
    T t[24][REFSEG_W4_LANES], y[4][REFSEG_W4_LANES]; \
    for (ptrdiff_t o0 = 0; o0 < cout; o0 += REFSEG_W4_LANES) { \
        ptrdiff_t n = cout - o0 < REFSEG_W4_LANES ? cout - o0 : REFSEG_W4_LANES; \
        /* A^T M down each column nu: t[6u + nu] */ \
        for (int nu = 0; nu < 6; nu++) { \
            const T *c = m + nu * stride + o0; \
            refseg_at4_##SUFFIX(c, c + 6 * stride, c + 12 * stride, c + 18 * stride, \
                                c + 24 * stride, c + 30 * stride, NULL, t[nu], \
                                t[6 + nu], t[12 + nu], t[18 + nu], n); \
        } \
        /* (A^T M) A along each row u, plus the bias */ \
        for (int u = 0; u < 4; u++) { \
            refseg_at4_##SUFFIX(t[6 * u], t[6 * u + 1], t[6 * u + 2], t[6 * u + 3], \
                                t[6 * u + 4], t[6 * u + 5], bias + o0, y[0], y[1], \
                                y[2], y[3], n); \
            for (int v = 0; v < 4; v++) \
                if (dst[4 * u + v]) memcpy(dst[4 * u + v] + o0, y[v], n * sizeof(T)); \
        } \
    } \
} \
/* u[k*stride + e] = (G g G^T)[k / 6][k % 6], g[a][b] = w[(3a + b)*size + e], e < size */ \
void refseg_winograd4_kernel_##SUFFIX(const T *w, ptrdiff_t size, T *u, \
                                      ptrdiff_t stride) \
{ \
    T t[18][REFSEG_W4_LANES]; \
    for (ptrdiff_t e0 = 0; e0 < size; e0 += REFSEG_W4_LANES) { \
        ptrdiff_t n = size - e0 < REFSEG_W4_LANES ? size - e0 : REFSEG_W4_LANES; \
        /* G g down each column b: t[3 xi + b] */ \
        for (int b = 0; b < 3; b++) \
            refseg_g4_##SUFFIX(w + b * size + e0, w + (3 + b) * size + e0, \
                               w + (6 + b) * size + e0, t[b], t[3 + b], t[6 + b], \
                               t[9 + b], t[12 + b], t[15 + b], n); \
        /* (G g) G^T along each row xi */ \
        for (int xi = 0; xi < 6; xi++) { \
            T *o = u + 6 * xi * stride + e0; \
            refseg_g4_##SUFFIX(t[3 * xi], t[3 * xi + 1], t[3 * xi + 2], o, o + stride, \
                               o + 2 * stride, o + 3 * stride, o + 4 * stride, \
                               o + 5 * stride, n); \
        } \
    } \
}

REFSEG_WINOGRAD4(float, f)
REFSEG_WINOGRAD4(double, d)

/* The float transforms compiled for AVX-512 and for AVX2, for the engine's inference: the same
   operations in the same order with contraction off, so the same bits as the baseline build,
   on 16 or 8 channels at a time instead of 4. */
#pragma GCC push_options
#pragma GCC target("avx512f")
REFSEG_WINOGRAD4(float, f_avx512)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2")
REFSEG_WINOGRAD4(float, f_avx2)
#pragma GCC pop_options
