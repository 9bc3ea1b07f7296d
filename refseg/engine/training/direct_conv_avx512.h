/* The float32 row loops of the direct kernels (engine/training/_direct_conv.pxi), also compiled for
   AVX-512 (GCC target attribute and vector types) and chosen at run time where the CPU has it:
   64 pixels per block in four 16-wide accumulators (a last block of at most 32 pixels in two).
   The plain build targets x86-64 (SSE2), where 16 pixels in four 4-wide accumulators already
   cover the latency of the adds but each instruction does a quarter of the work. Forward: the
   same multiplies and adds in the same order per output (no FMA: -ffp-contract=off), so the
   same results bit for bit. Kernel gradient: 64 partial sums per row instead of 16, so float32
   results differ between AVX-512 and other machines by rounding (as BLAS results do); each
   machine's results still do not depend on the thread count.

   Without GCC on x86-64 the functions are empty and refseg_has_avx512 returns 0, so they are
   never called. Counts and offsets are ptrdiff_t, the width of the Py_ssize_t values the
   Cython side passes, so that this C needs no Python header. */
#ifndef REFSEG_DIRECT_CONV_AVX512_H
#define REFSEG_DIRECT_CONV_AVX512_H

#include <stddef.h>

/* output pixels per block of the AVX-512 loops: the planar rows are padded to a multiple */
#define REFSEG_WIDE_LANES 64

/* out[j*cout + o] = (sum over t < taps of rows[offsets[t] + j] * wt[o*taps + t]) + bias[o],
   j < wo, each sum from 0 in tap order */
void refseg_small_row_avx512(const float *rows, const ptrdiff_t *offsets, const float *wt,
                             const float *bias, ptrdiff_t taps, ptrdiff_t cout, ptrdiff_t wo,
                             float *out);

/* adds one output row of conv_small_weight: to lanes[(t*cout + o)*8 ..] the dot of the row's
   tap-t input (rows + offsets[t]) with output channel o of g (g_row + o*width), to
   lanes[(taps*cout + o)*8 ..] the sum of that channel; wo pixels, zero up to width */
void refseg_small_weight_row_avx512(const float *rows, const ptrdiff_t *offsets,
                                    ptrdiff_t taps, const float *g_row, ptrdiff_t cout,
                                    ptrdiff_t width, ptrdiff_t wo, double *lanes);

/* d0[u], d1[u], d2[u] = src[3u], src[3u + 1], src[3u + 2] for u < count: a row of three
   channels into three planes */
void refseg_planes3_avx512(const float *src, ptrdiff_t count, float *d0, float *d1,
                           float *d2);

/* nonzero where the loops above may run: GCC on x86-64 and a CPU with AVX-512F */
int refseg_has_avx512(void);

#endif
