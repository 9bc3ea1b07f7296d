/* The engine's micro-kernels (refseg/engine/engine_kernels.c); see that file. */
#ifndef REFSEG_ENGINE_KERNELS_H
#define REFSEG_ENGINE_KERNELS_H
#include <stddef.h>
#include <stdint.h>

/* output channels per packed weight panel, the same for every backend */
#define ENGINE_PANEL 16
/* the most taps (kernel rows x columns) a convolution may have */
#define ENGINE_MAX_TAPS 64

/* the most output channels of the dot-product kernel */
#define ENGINE_DOT_MAX 8

enum { ENGINE_PORTABLE = 0, ENGINE_AVX2 = 1, ENGINE_AVX512 = 2 };
enum { ENGINE_PIXELS_OUTER = 0, ENGINE_PANELS_OUTER = 1 };

int engine_cpu_backend(void);

void engine_conv_c(int backend, int threads, int order, int batch,
                   const float *x, int64_t x_image, const int32_t *in_off,
                   int pixels, int taps, int cin,
                   const float *w, const float *bias, int cout,
                   float *y, int64_t y_image, const int32_t *out_off,
                   const float *r, int64_t r_image, const int32_t *res_off,
                   float lo, float hi, float *y2, const float *scale2, const float *shift2,
                   float lo2, float hi2);

/* c (m x n) = a (m x k) @ b (k x n) (+ c), one thread, on the panel micro-kernels; 0, or -1
 * where its packing buffers could not be allocated (c untouched) */
int engine_gemm_c(int backend, int m, int n, int k, const float *a, int64_t lda, int a_trans,
                  const float *b, int64_t ldb, int b_trans, float *c, int64_t ldc,
                  int accumulate);

void engine_dot_c(int backend, int threads, int batch,
                  const float *x, int64_t x_image, const int32_t *in_off,
                  int pixels, int taps, int cin, const float *w, const float *bias, int cout,
                  float *y, int64_t y_image, const int32_t *out_off,
                  const float *r, int64_t r_image, const int32_t *res_off,
                  float lo, float hi, int softmax);

/* out[p, o] = clamp(bias[o] + sum over t of cols[g_off[p, t] + o]) (+ residual), a
 * transposed convolution's taps gathered from its columns (see engine_kernels.c) */
void engine_gather_c(int threads, int batch, const float *cols, int64_t cols_image,
                     const int32_t *g_off, int pixels, int taps, const float *bias, int cout,
                     float *y, int64_t y_image, const int32_t *out_off,
                     const float *r, int64_t r_image, const int32_t *res_off,
                     float lo, float hi, int softmax);

void engine_depthwise_c(int backend, int threads, const float *x, int n, int h, int w, int c,
                        const float *k, int kh, int kw, int stride, int pad_top, int pad_left,
                        const float *bias, float lo, float hi, float *y, int ho, int wo);

void engine_affine_c(int threads, const float *x, int64_t pixels, int c, const float *scale,
                     const float *shift, float lo, float hi, float *y);

void engine_max_pool_c(int backend, int threads, const float *x, int n, int h, int w, int c,
                       int pool, int stride, int pad_top, int pad_left, float *y, int ho,
                       int wo);

/* the multiply-adds of a convolution's tiles a thread takes at once, at least */
#define ENGINE_ITEM_MACS (1 << 20)

/* the bytes of a Winograd call's scratch at most (its chunk of tiles' transformed inputs and
 * products), unless one row of micro-kernel tiles alone needs more */
#define ENGINE_WINOGRAD_SCRATCH (4u << 20)
/* the fewest tiles in one thread's own chunk for the barrier-free schedule */
#define ENGINE_WINOGRAD_OWN_MIN 48

size_t engine_winograd_chunk(int batch, int ho, int wo, int cin, int cout, int tile);

void engine_winograd_c(int backend, int threads, int batch, const float *x, int h, int w,
                       int cin, int pad_top, int pad_left, const float *u, const float *bias,
                       int cout, float *y, int ho, int wo, const float *r, float lo, float hi,
                       float *scratch, int64_t chunk, int tile);

void engine_winograd_weights_c(int backend, int threads, const float *packed, int cin,
                               int first, int count, int tile, float *u);
#endif
