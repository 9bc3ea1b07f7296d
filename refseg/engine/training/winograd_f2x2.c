/* The per-tile loops of Winograd F(2x2, 3x3) and of its adjoints (the matrices and the layout of
   the transformed arrays are in engine/training/_winograd.pxi), one body for float and double through
   a macro: every source and destination row is a restrict pointer, which Cython cannot
   declare, and without it the compiler does not vectorise a loop over channels that reads 16
   rows and writes 16 (it would need run-time overlap checks between all of them). Only adds,
   subtractions and exact halvings: vector width and contraction (off, setup.py) change no bit.
   The input transform is in winograd_f2x2.h (see there why); the macros below are private to
   this file. */
#include <string.h>

#include "winograd_f2x2.h"

/* A^T (4 -> 2) and G (3 -> 4): the order of operations is the twins' */
#define REFSEG_AT(m0, m1, m2, m3, y) do { \
    (y)[0] = ((m0) + (m1)) + (m2); (y)[1] = ((m1) - (m2)) - (m3); \
} while (0)
#define REFSEG_G(g0, g1, g2, t, half) do { \
    (t)[0] = (g0); (t)[1] = (((g0) + (g1)) + (g2)) * (half); \
    (t)[2] = (((g0) - (g1)) + (g2)) * (half); (t)[3] = (g2); \
} while (0)

/* channels of a partial output tile computed at a time, on the stack */
#define REFSEG_PART_LANES 64

#define REFSEG_WINOGRAD(T, SUFFIX) \
/* y_{2u + v}[o] = (A^T M A)[u][v] + bias[o], M[k] = m_k[o], o in [o0, o1) */ \
static inline void refseg_winograd_ama_##SUFFIX( \
        const T *restrict m, ptrdiff_t stride, const T *restrict bias, \
        T *restrict y00, T *restrict y01, T *restrict y10, T *restrict y11, ptrdiff_t cout) \
{ \
    const T *restrict m0 = m, *restrict m1 = m + stride, *restrict m2 = m + 2 * stride; \
    const T *restrict m3 = m + 3 * stride, *restrict m4 = m + 4 * stride; \
    const T *restrict m5 = m + 5 * stride, *restrict m6 = m + 6 * stride; \
    const T *restrict m7 = m + 7 * stride, *restrict m8 = m + 8 * stride; \
    const T *restrict m9 = m + 9 * stride, *restrict m10 = m + 10 * stride; \
    const T *restrict m11 = m + 11 * stride, *restrict m12 = m + 12 * stride; \
    const T *restrict m13 = m + 13 * stride, *restrict m14 = m + 14 * stride; \
    const T *restrict m15 = m + 15 * stride; \
    for (ptrdiff_t o = 0; o < cout; o++) { \
        T t0[2], t1[2], t2[2], t3[2], y0[2], y1[2]; \
        /* A^T M down each column nu: t_nu[u] */ \
        REFSEG_AT(m0[o], m4[o], m8[o], m12[o], t0); \
        REFSEG_AT(m1[o], m5[o], m9[o], m13[o], t1); \
        REFSEG_AT(m2[o], m6[o], m10[o], m14[o], t2); \
        REFSEG_AT(m3[o], m7[o], m11[o], m15[o], t3); \
        /* (A^T M) A along each row u: y_u[v] */ \
        REFSEG_AT(t0[0], t1[0], t2[0], t3[0], y0); \
        REFSEG_AT(t0[1], t1[1], t2[1], t3[1], y1); \
        y00[o] = y0[0] + bias[o]; y01[o] = y0[1] + bias[o]; \
        y10[o] = y1[0] + bias[o]; y11[o] = y1[1] + bias[o]; \
    } \
} \
/* dst[2u + v][o] = (A^T M A)[u][v] + bias[o], M[k] = m[k*stride + o], o < cout; a tile \
   with a NULL dst (past the output's edge) goes through a scratch tile on the stack, \
   REFSEG_PART_LANES channels at a time, and only its pixels inside the output are copied */ \
void refseg_winograd_output_##SUFFIX(const T *m, ptrdiff_t stride, \
                                     const T *bias, T *const *dst, \
                                     ptrdiff_t cout) \
{ \
    if (dst[0] && dst[1] && dst[2] && dst[3]) { \
        refseg_winograd_ama_##SUFFIX(m, stride, bias, dst[0], dst[1], dst[2], dst[3], \
                                      cout); \
        return; \
    } \
    T part[4][REFSEG_PART_LANES]; \
    for (ptrdiff_t o0 = 0; o0 < cout; o0 += REFSEG_PART_LANES) { \
        ptrdiff_t n = cout - o0 < REFSEG_PART_LANES ? cout - o0 : REFSEG_PART_LANES; \
        refseg_winograd_ama_##SUFFIX(m + o0, stride, bias + o0, part[0], part[1], \
                                      part[2], part[3], n); \
        for (int k = 0; k < 4; k++) \
            if (dst[k]) memcpy(dst[k] + o0, part[k], n * sizeof(T)); \
    } \
} \
/* the (G g G^T) of kernel entries e0 <= e < e1: o_k[e], k = 4 xi + nu, from \
   g[a][b] = g_{3a + b}[e] */ \
static inline void refseg_winograd_ggg_##SUFFIX( \
        const T *restrict g0, const T *restrict g1, const T *restrict g2, \
        const T *restrict g3, const T *restrict g4, const T *restrict g5, \
        const T *restrict g6, const T *restrict g7, const T *restrict g8, \
        T *restrict o0, T *restrict o1, T *restrict o2, T *restrict o3, T *restrict o4, \
        T *restrict o5, T *restrict o6, T *restrict o7, T *restrict o8, T *restrict o9, \
        T *restrict o10, T *restrict o11, T *restrict o12, T *restrict o13, \
        T *restrict o14, T *restrict o15, ptrdiff_t e0, ptrdiff_t e1) \
{ \
    const T half = (T)0.5; \
    for (ptrdiff_t e = e0; e < e1; e++) { \
        T c0[4], c1[4], c2[4], v0[4], v1[4], v2[4], v3[4]; \
        /* G g down each column b: c_b[xi] */ \
        REFSEG_G(g0[e], g3[e], g6[e], c0, half); \
        REFSEG_G(g1[e], g4[e], g7[e], c1, half); \
        REFSEG_G(g2[e], g5[e], g8[e], c2, half); \
        /* (G g) G^T along each row xi: v_xi[nu] */ \
        REFSEG_G(c0[0], c1[0], c2[0], v0, half); \
        REFSEG_G(c0[1], c1[1], c2[1], v1, half); \
        REFSEG_G(c0[2], c1[2], c2[2], v2, half); \
        REFSEG_G(c0[3], c1[3], c2[3], v3, half); \
        o0[e] = v0[0]; o1[e] = v0[1]; o2[e] = v0[2]; o3[e] = v0[3]; \
        o4[e] = v1[0]; o5[e] = v1[1]; o6[e] = v1[2]; o7[e] = v1[3]; \
        o8[e] = v2[0]; o9[e] = v2[1]; o10[e] = v2[2]; o11[e] = v2[3]; \
        o12[e] = v3[0]; o13[e] = v3[1]; o14[e] = v3[2]; o15[e] = v3[3]; \
    } \
} \
/* u[k*stride + e] = (G g G^T)[k / 4][k % 4], g[a][b] = w[(3a + b)*size + e], \
   e0 <= e < e1 */ \
void refseg_winograd_kernel_##SUFFIX(const T *w, ptrdiff_t size, T *u, \
                                     ptrdiff_t stride, ptrdiff_t e0, \
                                     ptrdiff_t e1) \
{ \
    refseg_winograd_ggg_##SUFFIX( \
        w, w + size, w + 2 * size, w + 3 * size, w + 4 * size, w + 5 * size, \
        w + 6 * size, w + 7 * size, w + 8 * size, u, u + stride, u + 2 * stride, \
        u + 3 * stride, u + 4 * stride, u + 5 * stride, u + 6 * stride, u + 7 * stride, \
        u + 8 * stride, u + 9 * stride, u + 10 * stride, u + 11 * stride, \
        u + 12 * stride, u + 13 * stride, u + 14 * stride, u + 15 * stride, e0, e1); \
}

/* A (4 x 2) applied to two values: (d0, d0 + d1, d0 - d1, -d1); G^T (3 x 4) applied to four: \
   (u0 + (u1 + u2) / 2, (u1 - u2) / 2, (u1 + u2) / 2 + u3) */
#define REFSEG_A(d0, d1, t) do { \
    (t)[0] = (d0); (t)[1] = (d0) + (d1); (t)[2] = (d0) - (d1); (t)[3] = -(d1); \
} while (0)
#define REFSEG_GT(u0, u1, u2, u3, t, half) do { \
    (t)[0] = (u0) + ((u1) + (u2)) * (half); (t)[1] = ((u1) - (u2)) * (half); \
    (t)[2] = ((u1) + (u2)) * (half) + (u3); \
} while (0)

#define REFSEG_WINOGRAD_ADJOINT(T, SUFFIX) \
/* o_k[c] = (A dy A^T)[k / 4][k % 4], dy[u][v] = s_{2u + v}[c], c < ch */ \
static inline void refseg_winograd_ada_##SUFFIX( \
        const T *restrict s0, const T *restrict s1, const T *restrict s2, \
        const T *restrict s3, T *restrict o0, T *restrict o1, T *restrict o2, \
        T *restrict o3, T *restrict o4, T *restrict o5, T *restrict o6, T *restrict o7, \
        T *restrict o8, T *restrict o9, T *restrict o10, T *restrict o11, \
        T *restrict o12, T *restrict o13, T *restrict o14, T *restrict o15, ptrdiff_t ch) \
{ \
    for (ptrdiff_t c = 0; c < ch; c++) { \
        T c0[4], c1[4], v0[4], v1[4], v2[4], v3[4]; \
        /* A dy down each column v: c_v[xi] */ \
        REFSEG_A(s0[c], s2[c], c0); \
        REFSEG_A(s1[c], s3[c], c1); \
        /* (A dy) A^T along each row xi: v_xi[nu] */ \
        REFSEG_A(c0[0], c1[0], v0); \
        REFSEG_A(c0[1], c1[1], v1); \
        REFSEG_A(c0[2], c1[2], v2); \
        REFSEG_A(c0[3], c1[3], v3); \
        o0[c] = v0[0]; o1[c] = v0[1]; o2[c] = v0[2]; o3[c] = v0[3]; \
        o4[c] = v1[0]; o5[c] = v1[1]; o6[c] = v1[2]; o7[c] = v1[3]; \
        o8[c] = v2[0]; o9[c] = v2[1]; o10[c] = v2[2]; o11[c] = v2[3]; \
        o12[c] = v3[0]; o13[c] = v3[1]; o14[c] = v3[2]; o15[c] = v3[3]; \
    } \
} \
/* dst[k*stride + c] = (A dy A^T)[k / 4][k % 4], dy[u][v] = src[2u + v][c], c < ch */ \
void refseg_winograd_output_adjoint_##SUFFIX(const T *const *src, T *dst, \
                                             ptrdiff_t stride, ptrdiff_t ch) \
{ \
    refseg_winograd_ada_##SUFFIX( \
        src[0], src[1], src[2], src[3], dst, dst + stride, dst + 2 * stride, \
        dst + 3 * stride, dst + 4 * stride, dst + 5 * stride, dst + 6 * stride, \
        dst + 7 * stride, dst + 8 * stride, dst + 9 * stride, dst + 10 * stride, \
        dst + 11 * stride, dst + 12 * stride, dst + 13 * stride, dst + 14 * stride, \
        dst + 15 * stride, ch); \
} \
/* g_{3a + b}[e] = (G^T dU G)[a][b], dU[xi][nu] = u_{4 xi + nu}[e], e0 <= e < e1 */ \
static inline void refseg_winograd_gug_##SUFFIX( \
        const T *restrict u0, const T *restrict u1, const T *restrict u2, \
        const T *restrict u3, const T *restrict u4, const T *restrict u5, \
        const T *restrict u6, const T *restrict u7, const T *restrict u8, \
        const T *restrict u9, const T *restrict u10, const T *restrict u11, \
        const T *restrict u12, const T *restrict u13, const T *restrict u14, \
        const T *restrict u15, T *restrict g0, T *restrict g1, T *restrict g2, \
        T *restrict g3, T *restrict g4, T *restrict g5, T *restrict g6, T *restrict g7, \
        T *restrict g8, ptrdiff_t e0, ptrdiff_t e1) \
{ \
    const T half = (T)0.5; \
    for (ptrdiff_t e = e0; e < e1; e++) { \
        T c0[3], c1[3], c2[3], c3[3], r0[3], r1[3], r2[3]; \
        /* G^T dU down each column nu: c_nu[a] */ \
        REFSEG_GT(u0[e], u4[e], u8[e], u12[e], c0, half); \
        REFSEG_GT(u1[e], u5[e], u9[e], u13[e], c1, half); \
        REFSEG_GT(u2[e], u6[e], u10[e], u14[e], c2, half); \
        REFSEG_GT(u3[e], u7[e], u11[e], u15[e], c3, half); \
        /* (G^T dU) G along each row a: r_a[b] */ \
        REFSEG_GT(c0[0], c1[0], c2[0], c3[0], r0, half); \
        REFSEG_GT(c0[1], c1[1], c2[1], c3[1], r1, half); \
        REFSEG_GT(c0[2], c1[2], c2[2], c3[2], r2, half); \
        g0[e] = r0[0]; g1[e] = r0[1]; g2[e] = r0[2]; \
        g3[e] = r1[0]; g4[e] = r1[1]; g5[e] = r1[2]; \
        g6[e] = r2[0]; g7[e] = r2[1]; g8[e] = r2[2]; \
    } \
} \
/* w[(3a + b)*size + e] = (G^T dU G)[a][b], dU[xi][nu] = u[(4 xi + nu)*stride + e] */ \
void refseg_winograd_kernel_adjoint_##SUFFIX(const T *u, ptrdiff_t stride, T *w, \
                                             ptrdiff_t size) \
{ \
    refseg_winograd_gug_##SUFFIX( \
        u, u + stride, u + 2 * stride, u + 3 * stride, u + 4 * stride, u + 5 * stride, \
        u + 6 * stride, u + 7 * stride, u + 8 * stride, u + 9 * stride, \
        u + 10 * stride, u + 11 * stride, u + 12 * stride, u + 13 * stride, \
        u + 14 * stride, u + 15 * stride, w, w + size, w + 2 * size, w + 3 * size, \
        w + 4 * size, w + 5 * size, w + 6 * size, w + 7 * size, w + 8 * size, 0, size); \
}

REFSEG_WINOGRAD(float, f)
REFSEG_WINOGRAD(double, d)
REFSEG_WINOGRAD_ADJOINT(float, f)
REFSEG_WINOGRAD_ADJOINT(double, d)
