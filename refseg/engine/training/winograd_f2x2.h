/* Winograd F(2x2, 3x3): the per-tile transforms and their adjoints, for float (_f) and double
   (_d), called by engine/training/_winograd.pxi. A transformed array is 16 planes, entry k of a tile
   in plane k (k*stride + c). Counts and strides are ptrdiff_t, the width of the Py_ssize_t
   values the Cython side passes, so that this C needs no Python header. */
#ifndef REFSEG_WINOGRAD_F2X2_H
#define REFSEG_WINOGRAD_F2X2_H

#include <stddef.h>

/* The input transform is defined here, static inline, so that it is compiled into its caller
   in _winograd.pxi: it runs once per tile, and a call per tile across files costs
   winograd_input 2-5 % (measured at 16 and 64 channels); the other transforms lose nothing
   measurable to the call. Its body follows the rules of winograd_f2x2.c (restrict rows, the
   twins' order of operations). */

/* B^T (4 values): the order of operations is the twins' */
#define REFSEG_BT(d0, d1, d2, d3, t) do { \
    (t)[0] = (d0) - (d2); (t)[1] = (d1) + (d2); (t)[2] = (d2) - (d1); (t)[3] = (d1) - (d3); \
} while (0)

#define REFSEG_WINOGRAD_INPUT(T, SUFFIX) \
/* the (B^T d B) of one tile: o_k[c], k = 4 xi + nu, from d[r][s] = s_{4r + s}[c] */ \
static inline void refseg_winograd_bdb_##SUFFIX( \
        const T *restrict s0, const T *restrict s1, const T *restrict s2, \
        const T *restrict s3, const T *restrict s4, const T *restrict s5, \
        const T *restrict s6, const T *restrict s7, const T *restrict s8, \
        const T *restrict s9, const T *restrict s10, const T *restrict s11, \
        const T *restrict s12, const T *restrict s13, const T *restrict s14, \
        const T *restrict s15, T *restrict o0, T *restrict o1, T *restrict o2, \
        T *restrict o3, T *restrict o4, T *restrict o5, T *restrict o6, T *restrict o7, \
        T *restrict o8, T *restrict o9, T *restrict o10, T *restrict o11, \
        T *restrict o12, T *restrict o13, T *restrict o14, T *restrict o15, ptrdiff_t ch) \
{ \
    for (ptrdiff_t c = 0; c < ch; c++) { \
        T c0[4], c1[4], c2[4], c3[4], v0[4], v1[4], v2[4], v3[4]; \
        /* B^T d down each column s: c_s[xi] */ \
        REFSEG_BT(s0[c], s4[c], s8[c], s12[c], c0); \
        REFSEG_BT(s1[c], s5[c], s9[c], s13[c], c1); \
        REFSEG_BT(s2[c], s6[c], s10[c], s14[c], c2); \
        REFSEG_BT(s3[c], s7[c], s11[c], s15[c], c3); \
        /* (B^T d) B along each row xi: v_xi[nu] */ \
        REFSEG_BT(c0[0], c1[0], c2[0], c3[0], v0); \
        REFSEG_BT(c0[1], c1[1], c2[1], c3[1], v1); \
        REFSEG_BT(c0[2], c1[2], c2[2], c3[2], v2); \
        REFSEG_BT(c0[3], c1[3], c2[3], c3[3], v3); \
        o0[c] = v0[0]; o1[c] = v0[1]; o2[c] = v0[2]; o3[c] = v0[3]; \
        o4[c] = v1[0]; o5[c] = v1[1]; o6[c] = v1[2]; o7[c] = v1[3]; \
        o8[c] = v2[0]; o9[c] = v2[1]; o10[c] = v2[2]; o11[c] = v2[3]; \
        o12[c] = v3[0]; o13[c] = v3[1]; o14[c] = v3[2]; o15[c] = v3[3]; \
    } \
} \
/* dst[k*stride + c] = (B^T d B)[k / 4][k % 4], d[r][s] = src[4r + s][c], c < ch */ \
static inline void refseg_winograd_input_##SUFFIX(const T *const *src, T *dst, \
                                                  ptrdiff_t stride, ptrdiff_t ch) \
{ \
    refseg_winograd_bdb_##SUFFIX( \
        src[0], src[1], src[2], src[3], src[4], src[5], src[6], src[7], src[8], src[9], \
        src[10], src[11], src[12], src[13], src[14], src[15], dst, dst + stride, \
        dst + 2 * stride, dst + 3 * stride, dst + 4 * stride, dst + 5 * stride, \
        dst + 6 * stride, dst + 7 * stride, dst + 8 * stride, dst + 9 * stride, \
        dst + 10 * stride, dst + 11 * stride, dst + 12 * stride, dst + 13 * stride, \
        dst + 14 * stride, dst + 15 * stride, ch); \
}

REFSEG_WINOGRAD_INPUT(float, f)
REFSEG_WINOGRAD_INPUT(double, d)

/* dst[2u + v][o] = (A^T M A)[u][v] + bias[o], M[k] = m[k*stride + o], o < cout; a NULL
   dst[2u + v] (past the output's edge) is not written */
void refseg_winograd_output_f(const float *m, ptrdiff_t stride, const float *bias,
                              float *const *dst, ptrdiff_t cout);
void refseg_winograd_output_d(const double *m, ptrdiff_t stride, const double *bias,
                              double *const *dst, ptrdiff_t cout);

/* u[k*stride + e] = (G g G^T)[k / 4][k % 4], g[a][b] = w[(3a + b)*size + e], e0 <= e < e1 */
void refseg_winograd_kernel_f(const float *w, ptrdiff_t size, float *u, ptrdiff_t stride,
                              ptrdiff_t e0, ptrdiff_t e1);
void refseg_winograd_kernel_d(const double *w, ptrdiff_t size, double *u, ptrdiff_t stride,
                              ptrdiff_t e0, ptrdiff_t e1);

/* dst[k*stride + c] = (A dy A^T)[k / 4][k % 4], dy[u][v] = src[2u + v][c], c < ch */
void refseg_winograd_output_adjoint_f(const float *const *src, float *dst, ptrdiff_t stride,
                                      ptrdiff_t ch);
void refseg_winograd_output_adjoint_d(const double *const *src, double *dst,
                                      ptrdiff_t stride, ptrdiff_t ch);

/* w[(3a + b)*size + e] = (G^T dU G)[a][b], dU[xi][nu] = u[(4 xi + nu)*stride + e], e < size */
void refseg_winograd_kernel_adjoint_f(const float *u, ptrdiff_t stride, float *w,
                                      ptrdiff_t size);
void refseg_winograd_kernel_adjoint_d(const double *u, ptrdiff_t stride, double *w,
                                      ptrdiff_t size);

#endif
