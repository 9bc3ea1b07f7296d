/* Winograd F(2x2, 3x3): the per-tile transforms and their adjoints, for float (_f) and double
   (_d), called by autograd/_winograd.pxi. A transformed array is 16 planes, entry k of a tile
   in plane k (k*stride + c). Counts and strides are ptrdiff_t, the width of the Py_ssize_t
   values the Cython side passes, so that this C needs no Python header. */
#ifndef REFSEG_WINOGRAD_F2X2_H
#define REFSEG_WINOGRAD_F2X2_H

#include <stddef.h>

/* dst[k*stride + c] = (B^T d B)[k / 4][k % 4], d[r][s] = src[4r + s][c], c < ch */
void refseg_winograd_input_f(const float *const *src, float *dst, ptrdiff_t stride,
                             ptrdiff_t ch);
void refseg_winograd_input_d(const double *const *src, double *dst, ptrdiff_t stride,
                             ptrdiff_t ch);

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
