/* Winograd F(4x4, 3x3): the per-tile transforms, for float (_f) and double (_d), called by
   engine/training/_winograd.pxi. A transformed array is 36 planes, entry k of a tile in plane k
   (k*stride + c). Counts and strides are ptrdiff_t, the width of the Py_ssize_t values the
   Cython side passes, so that this C needs no Python header. */
#ifndef REFSEG_WINOGRAD_F4X4_H
#define REFSEG_WINOGRAD_F4X4_H

#include <stddef.h>

/* dst[k*stride + c] = (B^T d B)[k / 6][k % 6], d[r][s] = src[6r + s][c], c < ch */
void refseg_winograd4_input_f(const float *const *src, float *dst, ptrdiff_t stride,
                              ptrdiff_t ch);
void refseg_winograd4_input_d(const double *const *src, double *dst, ptrdiff_t stride,
                              ptrdiff_t ch);

/* dst[4u + v][o] = (A^T M A)[u][v] + bias[o], M[k] = m[k*stride + o], o < cout; a NULL
   dst[4u + v] (past the output's edge) is not written */
void refseg_winograd4_output_f(const float *m, ptrdiff_t stride, const float *bias,
                               float *const *dst, ptrdiff_t cout);
void refseg_winograd4_output_d(const double *m, ptrdiff_t stride, const double *bias,
                               double *const *dst, ptrdiff_t cout);

/* u[k*stride + e] = (G g G^T)[k / 6][k % 6], g[a][b] = w[(3a + b)*size + e], e < size */
void refseg_winograd4_kernel_f(const float *w, ptrdiff_t size, float *u, ptrdiff_t stride);
void refseg_winograd4_kernel_d(const double *w, ptrdiff_t size, double *u, ptrdiff_t stride);

/* the float transforms above compiled for AVX-512 and for AVX2 (the same bits) */
void refseg_winograd4_input_f_avx512(const float *const *src, float *dst, ptrdiff_t stride,
                                     ptrdiff_t ch);
void refseg_winograd4_output_f_avx512(const float *m, ptrdiff_t stride, const float *bias,
                                      float *const *dst, ptrdiff_t cout);
void refseg_winograd4_input_f_avx2(const float *const *src, float *dst, ptrdiff_t stride,
                                   ptrdiff_t ch);
void refseg_winograd4_output_f_avx2(const float *m, ptrdiff_t stride, const float *bias,
                                    float *const *dst, ptrdiff_t cout);

#endif
