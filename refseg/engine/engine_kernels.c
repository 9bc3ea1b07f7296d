/* The engine's micro-kernels: the convolution of NHWC activations with weights packed once
 * into panels of ENGINE_PANEL output channels (and, for stride-1 3x3, by Winograd F(2x2, 3x3)
 * on the same panels), the depthwise 3x3 convolution, max pooling and the per-channel affine
 * map (an inference batch norm that cannot be folded), each with its epilogue (bias, ReLU /
 * ReLU6 clamp, residual add; for the panel kernels also a second, affine-mapped and clamped
 * copy of the output) applied as the output tile is written.
 *
 * Convolution (indirect): output pixel p of an image reads, for each tap t, the `cin`
 * contiguous channels at x + in_off[p * taps + t] (in floats from the image's start), or zeros
 * where that offset is -1 (zero padding, or a transposed convolution's missing tap); with
 * in_off NULL, pixel p reads x + p * cin (a 1x1 stride-1 convolution: taps == 1). The packed
 * weights are w[panel][tap][cin][ENGINE_PANEL]; the panel's outputs are written at
 * y + out_off[p] + 16 * panel (out_off NULL: p * cout). The epilogue computes
 *   v = clamp(sum + bias, lo, hi) (+ r at res_off[p], or at the output's offset when NULL).
 * A tile is MR pixels x one panel; the tiles are handed out to OpenMP threads one at a time
 * (a dynamic schedule: a thread that the system deschedules, beside a busy neighbour, holds up
 * the end of the loop by one tile only), each tile computed by one thread in a fixed order, so
 * the result depends neither on the thread count nor on which thread took it. `order` chooses whether consecutive tiles of a
 * thread walk the panels of one pixel tile (the activations stay in L1) or the pixel tiles of
 * one panel (the weight panel stays in L2): the plan measures both.
 *
 * Three backends compute the same sums in the same order: AVX-512F (MR 12, one 16-float
 * register per pixel), AVX2 + FMA (MR 6, two 8-float registers), and portable C (MR 4, no
 * fused multiply-add; the reference's rounding of each product), chosen at run time
 * (engine_cpu_backend, __builtin_cpu_supports). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include <omp.h>

#include "engine_kernels.h"
#include "winograd_f4x4.h"

#define MAX_MR 12

int engine_cpu_backend(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return ENGINE_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return ENGINE_AVX2;
    return ENGINE_PORTABLE;
}

/* where a tile's outputs go: row m writes ncols floats at out[m], adds res[m] when given;
 * with `second`, also clamp(v * scale2 + shift2, lo2, hi2) at out2[m] (a batch norm and ReLU
 * that read the step's output and no convolution can take in: ResNet50V2's pre-activations) */
typedef struct {
    int rows, ncols;
    float *out[MAX_MR];
    const float *res[MAX_MR];
    float lo, hi;
    int second;
    float *out2[MAX_MR];
    const float *scale2, *shift2;
    float lo2, hi2;
} Epilogue;

/* v below lo -> lo, above hi -> hi (lo <= hi), NaN kept. Two selects, not one nested one:
 * each compiles to a max or min instruction, where the nested form branched, and a ReLU's
 * signs are a coin toss to the branch predictor (the few-output gather took 55 cycles a
 * pixel, most of them mispredictions, against 9 with the selects). */
static inline float clampf(float v, float lo, float hi)
{
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

/* the finished sums of one row (16 floats, bias not yet added) written through the epilogue */
static inline void write_row(const float *sum, const float *bias, const Epilogue *e, int m)
{
    for (int j = 0; j < e->ncols; j++) {
        float v = clampf(sum[j] + bias[j], e->lo, e->hi);
        if (e->res[m])
            v += e->res[m][j];
        e->out[m][j] = v;
        if (e->second)
            e->out2[m][j] = clampf(v * e->scale2[j] + e->shift2[j], e->lo2, e->hi2);
    }
}

typedef void (*TileKernel)(int taps, int cin, const float *const *a, const float *w,
                           const float *bias, const Epilogue *e);

/* ---- portable C: MR 4 ------------------------------------------------------------------ */
#define MR_PORTABLE 4
static void tile_portable(int taps, int cin, const float *const *a, const float *w,
                          const float *bias, const Epilogue *e)
{
    float acc[MR_PORTABLE][ENGINE_PANEL];
    memset(acc, 0, sizeof acc);
    for (int t = 0; t < taps; t++) {
        const float *wt = w + (size_t)t * cin * ENGINE_PANEL;
        for (int m = 0; m < MR_PORTABLE; m++) {
            const float *am = a[m * taps + t];
            for (int c = 0; c < cin; c++) {
                const float v = am[c];
                const float *wc = wt + (size_t)c * ENGINE_PANEL;
                for (int j = 0; j < ENGINE_PANEL; j++)
                    acc[m][j] += v * wc[j];
            }
        }
    }
    for (int m = 0; m < e->rows; m++)
        write_row(acc[m], bias, e, m);
}

/* ---- AVX2 + FMA: MR 6 ------------------------------------------------------------------ */
#define MR_AVX2 6
__attribute__((target("avx2,fma")))
static void tile_avx2(int taps, int cin, const float *const *a, const float *w,
                      const float *bias, const Epilogue *e)
{
    __m256 acc0[MR_AVX2], acc1[MR_AVX2];
    for (int m = 0; m < MR_AVX2; m++) {
        acc0[m] = _mm256_setzero_ps();
        acc1[m] = _mm256_setzero_ps();
    }
    for (int t = 0; t < taps; t++) {
        const float *wt = w + (size_t)t * cin * ENGINE_PANEL;
        const float *a0 = a[0 * taps + t], *a1 = a[1 * taps + t], *a2 = a[2 * taps + t];
        const float *a3 = a[3 * taps + t], *a4 = a[4 * taps + t], *a5 = a[5 * taps + t];
        for (int c = 0; c < cin; c++) {
            const __m256 b0 = _mm256_loadu_ps(wt + (size_t)c * ENGINE_PANEL);
            const __m256 b1 = _mm256_loadu_ps(wt + (size_t)c * ENGINE_PANEL + 8);
            __m256 v;
            v = _mm256_broadcast_ss(a0 + c);
            acc0[0] = _mm256_fmadd_ps(v, b0, acc0[0]); acc1[0] = _mm256_fmadd_ps(v, b1, acc1[0]);
            v = _mm256_broadcast_ss(a1 + c);
            acc0[1] = _mm256_fmadd_ps(v, b0, acc0[1]); acc1[1] = _mm256_fmadd_ps(v, b1, acc1[1]);
            v = _mm256_broadcast_ss(a2 + c);
            acc0[2] = _mm256_fmadd_ps(v, b0, acc0[2]); acc1[2] = _mm256_fmadd_ps(v, b1, acc1[2]);
            v = _mm256_broadcast_ss(a3 + c);
            acc0[3] = _mm256_fmadd_ps(v, b0, acc0[3]); acc1[3] = _mm256_fmadd_ps(v, b1, acc1[3]);
            v = _mm256_broadcast_ss(a4 + c);
            acc0[4] = _mm256_fmadd_ps(v, b0, acc0[4]); acc1[4] = _mm256_fmadd_ps(v, b1, acc1[4]);
            v = _mm256_broadcast_ss(a5 + c);
            acc0[5] = _mm256_fmadd_ps(v, b0, acc0[5]); acc1[5] = _mm256_fmadd_ps(v, b1, acc1[5]);
        }
    }
    const __m256 bias0 = _mm256_loadu_ps(bias), bias1 = _mm256_loadu_ps(bias + 8);
    const __m256 lo = _mm256_set1_ps(e->lo), hi = _mm256_set1_ps(e->hi);
    for (int m = 0; m < e->rows; m++) {
        __m256 v0 = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(acc0[m], bias0), lo), hi);
        __m256 v1 = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(acc1[m], bias1), lo), hi);
        if (e->ncols == ENGINE_PANEL) {
            if (e->res[m]) {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(e->res[m]));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(e->res[m] + 8));
            }
            _mm256_storeu_ps(e->out[m], v0);
            _mm256_storeu_ps(e->out[m] + 8, v1);
            if (e->second) {
                const __m256 lo2 = _mm256_set1_ps(e->lo2), hi2 = _mm256_set1_ps(e->hi2);
                v0 = _mm256_add_ps(_mm256_mul_ps(v0, _mm256_loadu_ps(e->scale2)),
                                   _mm256_loadu_ps(e->shift2));
                v1 = _mm256_add_ps(_mm256_mul_ps(v1, _mm256_loadu_ps(e->scale2 + 8)),
                                   _mm256_loadu_ps(e->shift2 + 8));
                _mm256_storeu_ps(e->out2[m], _mm256_min_ps(_mm256_max_ps(v0, lo2), hi2));
                _mm256_storeu_ps(e->out2[m] + 8, _mm256_min_ps(_mm256_max_ps(v1, lo2), hi2));
            }
        } else {
            float row[ENGINE_PANEL];
            _mm256_storeu_ps(row, v0);
            _mm256_storeu_ps(row + 8, v1);
            for (int j = 0; j < e->ncols; j++) {
                const float v = e->res[m] ? row[j] + e->res[m][j] : row[j];
                e->out[m][j] = v;
                if (e->second)
                    e->out2[m][j] = clampf(v * e->scale2[j] + e->shift2[j], e->lo2, e->hi2);
            }
        }
    }
}

/* ---- AVX-512F: MR 12 ------------------------------------------------------------------- */
#define MR_AVX512 12
/* The AVX-512 bodies are compiled for every row count R (rows_avx512 below): the last, short
 * tile of a small map (7x7 is 4 tiles of 12 and one of 1) computes its rows only. */
__attribute__((target("avx512f"), always_inline))
static inline void tile_avx512_rows(int taps, int cin, const float *const *a, const float *w,
                                    const float *bias, const Epilogue *e, const int R)
{
    __m512 acc[MR_AVX512];
    for (int m = 0; m < R; m++)
        acc[m] = _mm512_setzero_ps();
    for (int t = 0; t < taps; t++) {
        const float *wt = w + (size_t)t * cin * ENGINE_PANEL;
        const float *ap[MR_AVX512];
        for (int m = 0; m < R; m++)
            ap[m] = a[m * taps + t];
        for (int c = 0; c < cin; c++) {
            const __m512 b = _mm512_loadu_ps(wt + (size_t)c * ENGINE_PANEL);
#pragma GCC unroll 12
            for (int m = 0; m < R; m++)
                acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(ap[m][c]), b, acc[m]);
        }
    }
    const __m512 bv = _mm512_loadu_ps(bias);
    const __m512 lo = _mm512_set1_ps(e->lo), hi = _mm512_set1_ps(e->hi);
    const __mmask16 mask = (__mmask16)((1u << e->ncols) - 1u);
    for (int m = 0; m < R; m++) {
        __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(acc[m], bv), lo), hi);
        if (e->res[m])
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e->res[m]));
        _mm512_mask_storeu_ps(e->out[m], mask, v);
        if (e->second) {
            v = _mm512_add_ps(_mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, e->scale2)),
                              _mm512_maskz_loadu_ps(mask, e->shift2));
            v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(e->lo2)), _mm512_set1_ps(e->hi2));
            _mm512_mask_storeu_ps(e->out2[m], mask, v);
        }
    }
}

/* two neighbouring panels at once (32 output channels, 24 accumulators): a broadcast of the
 * input feeds two fused multiply-adds, so the loads do not hold back the FMA units. The
 * epilogue's ncols counts both panels' columns (17..32). */
__attribute__((target("avx512f"), always_inline))
static inline void tile_avx512_pair_rows(int taps, int cin, const float *const *a,
                                         const float *w, const float *bias, const Epilogue *e,
                                         const int R)
{
    __m512 acc0[MR_AVX512], acc1[MR_AVX512];
    const size_t panel = (size_t)taps * cin * ENGINE_PANEL;
    for (int m = 0; m < R; m++) {
        acc0[m] = _mm512_setzero_ps();
        acc1[m] = _mm512_setzero_ps();
    }
    for (int t = 0; t < taps; t++) {
        const float *wt = w + (size_t)t * cin * ENGINE_PANEL;
        const float *ap[MR_AVX512];
        for (int m = 0; m < R; m++)
            ap[m] = a[m * taps + t];
        for (int c = 0; c < cin; c++) {
            const __m512 b0 = _mm512_loadu_ps(wt + (size_t)c * ENGINE_PANEL);
            const __m512 b1 = _mm512_loadu_ps(wt + panel + (size_t)c * ENGINE_PANEL);
#pragma GCC unroll 12
            for (int m = 0; m < R; m++) {
                const __m512 v = _mm512_set1_ps(ap[m][c]);
                acc0[m] = _mm512_fmadd_ps(v, b0, acc0[m]);
                acc1[m] = _mm512_fmadd_ps(v, b1, acc1[m]);
            }
        }
    }
    const __m512 bv0 = _mm512_loadu_ps(bias), bv1 = _mm512_loadu_ps(bias + ENGINE_PANEL);
    const __m512 lo = _mm512_set1_ps(e->lo), hi = _mm512_set1_ps(e->hi);
    const __mmask16 mask = (__mmask16)((1u << (e->ncols - ENGINE_PANEL)) - 1u);
    for (int m = 0; m < R; m++) {
        __m512 v0 = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(acc0[m], bv0), lo), hi);
        __m512 v1 = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(acc1[m], bv1), lo), hi);
        if (e->res[m]) {
            v0 = _mm512_add_ps(v0, _mm512_loadu_ps(e->res[m]));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(mask, e->res[m] + ENGINE_PANEL));
        }
        _mm512_storeu_ps(e->out[m], v0);
        _mm512_mask_storeu_ps(e->out[m] + ENGINE_PANEL, mask, v1);
        if (e->second) {
            const __m512 lo2 = _mm512_set1_ps(e->lo2), hi2 = _mm512_set1_ps(e->hi2);
            v0 = _mm512_add_ps(_mm512_mul_ps(v0, _mm512_loadu_ps(e->scale2)),
                               _mm512_loadu_ps(e->shift2));
            v1 = _mm512_add_ps(
                _mm512_mul_ps(v1, _mm512_maskz_loadu_ps(mask, e->scale2 + ENGINE_PANEL)),
                _mm512_maskz_loadu_ps(mask, e->shift2 + ENGINE_PANEL));
            _mm512_storeu_ps(e->out2[m], _mm512_min_ps(_mm512_max_ps(v0, lo2), hi2));
            _mm512_mask_storeu_ps(e->out2[m] + ENGINE_PANEL, mask,
                                  _mm512_min_ps(_mm512_max_ps(v1, lo2), hi2));
        }
    }
}

#define ROWS_AVX512(R)                                                                        \
__attribute__((target("avx512f")))                                                           \
static void tile_avx512_##R(int taps, int cin, const float *const *a, const float *w,        \
                            const float *bias, const Epilogue *e)                            \
{                                                                                            \
    tile_avx512_rows(taps, cin, a, w, bias, e, R);                                           \
}                                                                                            \
__attribute__((target("avx512f")))                                                           \
static void tile_avx512_pair_##R(int taps, int cin, const float *const *a, const float *w,   \
                                 const float *bias, const Epilogue *e)                       \
{                                                                                            \
    tile_avx512_pair_rows(taps, cin, a, w, bias, e, R);                                      \
}
/* a kernel body instantiated for each row count 1..12, and the table of them by count */
#define FOR_EACH_ROW_COUNT(M) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12)
#define ROW_COUNT_TABLE(P) {P##1, P##2, P##3, P##4, P##5, P##6, P##7, P##8, P##9, P##10,     \
                            P##11, P##12}
FOR_EACH_ROW_COUNT(ROWS_AVX512)
static const TileKernel ROWS_SINGLE[MR_AVX512] = ROW_COUNT_TABLE(tile_avx512_);
static const TileKernel ROWS_PAIR[MR_AVX512] = ROW_COUNT_TABLE(tile_avx512_pair_);

static void tile_avx512(int taps, int cin, const float *const *a, const float *w,
                        const float *bias, const Epilogue *e)
{
    ROWS_SINGLE[e->rows - 1](taps, cin, a, w, bias, e);
}

static void tile_avx512_pair(int taps, int cin, const float *const *a, const float *w,
                             const float *bias, const Epilogue *e)
{
    ROWS_PAIR[e->rows - 1](taps, cin, a, w, bias, e);
}

/* the micro-kernels of a backend: one panel, two panels at once (NULL where the backend has
 * none), and the rows of a tile */
typedef struct {
    TileKernel single, pair;
    int mr;
} TileKernels;

static TileKernels tile_kernels(int backend)
{
    if (backend == ENGINE_AVX512)
        return (TileKernels){tile_avx512, tile_avx512_pair, MR_AVX512};
    if (backend == ENGINE_AVX2)
        return (TileKernels){tile_avx2, NULL, MR_AVX2};
    return (TileKernels){tile_portable, NULL, MR_PORTABLE};
}

/* ---- the tiled loop --------------------------------------------------------------------- */
/* the pixels of tile `tile`: mr, or fewer for the last tile of an image */
static inline int tile_rows(int pixels, int64_t tile, int mr)
{
    const int p0 = (int)tile * mr;
    return pixels - p0 < mr ? pixels - p0 : mr;
}

/* The input pointers (zeros where a tap falls outside the input, and for the rows past the
 * last pixel) and the output and residual offsets of tile `tile` of image n; returns its
 * rows. */
static int tile_setup(int64_t n, int64_t tile, int mr, int taps, int cin, int pixels, int cout,
                      const float *x, int64_t x_image, const int32_t *in_off,
                      const float *zeros, int64_t y_image, const int32_t *out_off,
                      int64_t r_image, const int32_t *res_off, const float **a,
                      int64_t *out_at, int64_t *res_at)
{
    const float *xn = x + n * x_image;
    const int p0 = (int)tile * mr;
    const int rows = tile_rows(pixels, tile, mr);
    for (int m = 0; m < mr; m++) {
        const int p = p0 + (m < rows ? m : 0);
        for (int t = 0; t < taps; t++) {
            if (m >= rows) {
                a[m * taps + t] = zeros;
            } else if (!in_off) {
                a[m * taps + t] = xn + (int64_t)p * cin;
            } else {
                const int32_t off = in_off[(int64_t)p * taps + t];
                a[m * taps + t] = off < 0 ? zeros : xn + off;
            }
        }
        if (m < rows) {
            const int64_t o = out_off ? out_off[p] : (int64_t)p * cout;
            out_at[m] = n * y_image + o;
            res_at[m] = n * r_image + (res_off ? res_off[p] : o);
        }
    }
    return rows;
}

/* the most bytes of tile tables (pointers and offsets of every tile of the batch) that a
 * panels-outer convolution builds once per call, where each item would otherwise build its
 * tile's again for every panel */
#define ENGINE_TILE_TABLE_MAX (4 << 20)

void engine_conv_c(int backend, int threads, int order, int batch,
                   const float *x, int64_t x_image, const int32_t *in_off,
                   int pixels, int taps, int cin,
                   const float *w, const float *bias, int cout,
                   float *y, int64_t y_image, const int32_t *out_off,
                   const float *r, int64_t r_image, const int32_t *res_off,
                   float lo, float hi, float *y2, const float *scale2, const float *shift2,
                   float lo2, float hi2)
{
    const TileKernels tk = tile_kernels(backend);
    const TileKernel kernel = tk.single, pair_kernel = tk.pair;
    const int mr = tk.mr;
    /* a work item covers `width` panels: two where the pair kernel runs */
    const int width = pair_kernel ? 2 : 1;
    const int all_panels = (cout + ENGINE_PANEL - 1) / ENGINE_PANEL;
    const int panels = (all_panels + width - 1) / width;
    const int tiles = (pixels + mr - 1) / mr;
    const int64_t per_image = (int64_t)tiles * panels;
    const int64_t items = per_image * batch;
    float *zeros = calloc((size_t)cin, sizeof(float));
    if (!zeros)
        abort();
    /* the items a thread takes at a time: each costs the team a shared counter's cache line,
     * which outweighs a small item (a 1x1 convolution of 16 input channels is 6 K
     * multiply-adds). With about ENGINE_ITEM_MACS per dispatch, on 2 threads of a Zen 5 at
     * batch 8, 224x224: ResNet50V2's 56x56 64 -> 256 1x1 convolutions 7.4-14 -> 5.7-6.7 ms,
     * the whole prediction 498-589 -> 447-487 ms (medians, three alternating runs). */
    const int64_t per_item = (int64_t)mr * width * ENGINE_PANEL * taps * cin;
    const int grain = per_item >= ENGINE_ITEM_MACS ? 1 : (int)(ENGINE_ITEM_MACS / per_item);
    /* panels outer: every tile's pointers and offsets built once, before the items, where
     * they fit in ENGINE_TILE_TABLE_MAX; pixels outer: a thread keeps a tile's while its next
     * items are the other panels of the same tile. Building them read the offset table once
     * per tap and row, about 4 % of a prediction when done for every panel. */
    const int64_t all_tiles = (int64_t)batch * tiles;
    const size_t per_tile = (size_t)mr * taps * sizeof(float *) + 2 * (size_t)mr * sizeof(int64_t);
    const int tabled = order == ENGINE_PANELS_OUTER && panels > 1 &&
                       all_tiles * per_tile <= ENGINE_TILE_TABLE_MAX;
    const float **table_a = tabled ? malloc(all_tiles * mr * taps * sizeof(float *)) : NULL;
    int64_t *table_at = tabled ? malloc(all_tiles * 2 * mr * sizeof(int64_t)) : NULL;
    if (tabled && (!table_a || !table_at))
        abort();
    #pragma omp parallel num_threads(threads)
    {
        const float *own_a[MAX_MR * ENGINE_MAX_TAPS];
        int64_t own_at[2 * MAX_MR];
        int64_t have_n = -1, have_tile = -1;
        int rows = 0;
        if (tabled) {
            #pragma omp for schedule(static)
            for (int64_t k = 0; k < all_tiles; k++)
                tile_setup(k / tiles, k % tiles, mr, taps, cin, pixels, cout, x, x_image, in_off,
                           zeros, y_image, out_off, r_image, res_off,
                           table_a + k * mr * taps, table_at + k * 2 * mr,
                           table_at + k * 2 * mr + mr);
        }
        #pragma omp for schedule(dynamic, grain)
        for (int64_t item = 0; item < items; item++) {
            int64_t n, tile, panel;
            if (order == ENGINE_PANELS_OUTER) {
                panel = item / all_tiles;
                int64_t rest = item % all_tiles;
                n = rest / tiles;
                tile = rest % tiles;
            } else {
                n = item / per_image;
                int64_t rest = item % per_image;
                tile = rest / panels;
                panel = rest % panels;
            }
            const float *const *a;
            const int64_t *out_at, *res_at;
            if (tabled) {
                const int64_t k = n * tiles + tile;
                a = table_a + k * mr * taps;
                out_at = table_at + k * 2 * mr;
                res_at = out_at + mr;
                rows = tile_rows(pixels, tile, mr);
            } else {
                if (n != have_n || tile != have_tile) {
                    rows = tile_setup(n, tile, mr, taps, cin, pixels, cout, x, x_image, in_off,
                                      zeros, y_image, out_off, r_image, res_off, own_a, own_at,
                                      own_at + MAX_MR);
                    have_n = n;
                    have_tile = tile;
                }
                a = own_a;
                out_at = own_at;
                res_at = own_at + MAX_MR;
            }
            Epilogue e;
            panel *= width;  /* the first panel of the item */
            const int covered = all_panels - (int)panel < width ? all_panels - (int)panel
                                                                : width;
            const int left = cout - (int)panel * ENGINE_PANEL;
            e.rows = rows;
            e.ncols = left < covered * ENGINE_PANEL ? left : covered * ENGINE_PANEL;
            e.lo = lo;
            e.hi = hi;
            e.second = y2 != NULL;
            e.scale2 = y2 ? scale2 + panel * ENGINE_PANEL : NULL;
            e.shift2 = y2 ? shift2 + panel * ENGINE_PANEL : NULL;
            e.lo2 = lo2;
            e.hi2 = hi2;
            for (int m = 0; m < rows; m++) {
                e.out[m] = y + out_at[m] + panel * ENGINE_PANEL;
                e.out2[m] = y2 ? y2 + out_at[m] + panel * ENGINE_PANEL : NULL;
                e.res[m] = r ? r + res_at[m] + panel * ENGINE_PANEL : NULL;
            }
            (covered == 2 ? pair_kernel : kernel)(
                taps, cin, a, w + panel * (int64_t)taps * cin * ENGINE_PANEL,
                bias + panel * ENGINE_PANEL, &e);
        }
    }
    free(table_a);
    free((void *)table_at);
    free(zeros);
}

/* ---- a matrix product on the panel micro-kernels -----------------------------------------
 * c (m x n) = a (m x k) @ b (k x n), plus c where `accumulate`, for training's products on one
 * thread (its caller hands out the tiles): the same micro-kernels as the convolution, with one
 * tap. b is packed, a block of ENGINE_GEMM_KC rows at a time, into panels of 16 columns; a's
 * rows are read in place where they are contiguous; a transposed view of a is read in place
 * too by gemm_kmajor on AVX-512 where b is row-major, else a block of ENGINE_GEMM_MC of its
 * rows is copied. Each block's sums start from zero in registers and are added to
 * c by the epilogue's residual (bias 0, no clamp), so every element of c is the same sum of
 * the same blocks in the same order whatever tile it lies in: the result depends on the
 * shapes and the backend alone, not on how a caller cuts the output.
 * Element (i, j) of a is a[i * lda + j] (a_trans: a[j * lda + i]); likewise b.
 * Blocks of 1024 rather than 256: each block's sums go out to c and come back, and its b is
 * packed again per tile; with 1024 the 2-thread rate of training's products went 357 -> 412
 * GFLOP/s (7168 x 864 @ 864 x 256), 340 -> 391 (36 planes 436 x 576 @ 576 x 256), about 7 %
 * off the --train-backbone step's products (Zen 5); only products with few rows and very
 * long columns lost (112 x 6480 @ 6480 x 2048: 296 -> 277). */
#define ENGINE_GEMM_KC 1024
#define ENGINE_GEMM_MC 240
/* the most bytes of packed b that the strips of a walk whole (see engine_gemm_c) */
#define ENGINE_GEMM_L1_B (40 << 10)

/* rows i0..i0+mc of a transposed view of a, columns k0..k0+kc, copied row-major (mc x kc), in
 * blocks of 16 x 16 so that both the reads and the writes stay within a few cache lines; with
 * AVX-512, each whole block is transposed in registers */
__attribute__((target("avx512f")))
static void transpose16_avx512(const float *src, int64_t lds, float *dst, size_t ldd)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(src + (int64_t)i * lds);
    /* 2x2 blocks of single floats, then of pairs, then 4x4 blocks of 128-bit lanes */
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]),
                                                   _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]),
                                                       _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]),
                                                       _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]),
                                                       _mm512_castps_pd(t[i + 3])));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
    /* r[j] now holds column j of the block: row j of its transpose */
    for (int j = 0; j < 16; j++)
        _mm512_storeu_ps(dst + (size_t)j * ldd, r[j]);
}

static void gemm_pack_a_transposed(int backend, const float *a, int64_t lda, int i0, int mc,
                                   int k0, int kc, float *restrict packed)
{
    for (int kb = 0; kb < kc; kb += 16) {
        const int kend = kc - kb < 16 ? kc : kb + 16;
        for (int rb = 0; rb < mc; rb += 16) {
            const int rend = mc - rb < 16 ? mc : rb + 16;
            if (backend == ENGINE_AVX512 && kend - kb == 16 && rend - rb == 16) {
                transpose16_avx512(a + (int64_t)(k0 + kb) * lda + i0 + rb, lda,
                                   packed + (size_t)rb * kc + kb, (size_t)kc);
                continue;
            }
            for (int kk = kb; kk < kend; kk++) {
                const float *src = a + (int64_t)(k0 + kk) * lda + i0;
                for (int r = rb; r < rend; r++)
                    packed[(size_t)r * kc + kk] = src[r];
            }
        }
    }
}

/* rows k0..k0+kc of a row-major b into panels, a row of 16 floats per register (a call of
 * memcpy per 64 bytes cost more than the products of a 96-column b) */
__attribute__((target("avx512f")))
static void gemm_pack_b_rows_avx512(const float *b, int64_t ldb, int k0, int kc, int n,
                                    int first, int count, float *restrict packed)
{
    const int panels = (n + ENGINE_PANEL - 1) / ENGINE_PANEL;
    const int last = n - (panels - 1) * ENGINE_PANEL;
    const __mmask16 tail = (__mmask16)(last >= ENGINE_PANEL ? 0xffffu : (1u << last) - 1u);
    /* panel by panel: each panel's rows are written one after another (row by row, the 64
     * bytes of each panel fall kc * 64 bytes apart, into the same sets of L1) */
    for (int p = first; p < first + count; p++) {
        const __mmask16 mask = p == panels - 1 ? tail : (__mmask16)0xffffu;
        const float *src = b + (int64_t)k0 * ldb + p * ENGINE_PANEL;
        float *dst = packed + (size_t)(p - first) * kc * ENGINE_PANEL;
        for (int kk = 0; kk < kc; kk++)
            _mm512_storeu_ps(dst + (size_t)kk * ENGINE_PANEL,
                             _mm512_maskz_loadu_ps(mask, src + (int64_t)kk * ldb));
    }
}

/* panels first .. first + count - 1 of rows k0..k0+kc of b, the first of them at packed */
static void gemm_pack_b(int backend, const float *b, int64_t ldb, int b_trans, int k0, int kc,
                        int n, int first, int count, float *restrict packed)
{
    if (backend == ENGINE_AVX512 && !b_trans) {
        gemm_pack_b_rows_avx512(b, ldb, k0, kc, n, first, count, packed);
        return;
    }
    for (int p = first; p < first + count; p++) {
        float *dst = packed + (size_t)(p - first) * kc * ENGINE_PANEL;
        const int j0 = p * ENGINE_PANEL;
        const int cols = n - j0 < ENGINE_PANEL ? n - j0 : ENGINE_PANEL;
        if (cols < ENGINE_PANEL)
            memset(dst, 0, (size_t)kc * ENGINE_PANEL * sizeof(float));
        if (!b_trans) {
            for (int kk = 0; kk < kc; kk++)
                memcpy(dst + (size_t)kk * ENGINE_PANEL, b + (int64_t)(k0 + kk) * ldb + j0,
                       (size_t)cols * sizeof(float));
        } else {
            int kk0 = 0;
            if (backend == ENGINE_AVX512 && cols == ENGINE_PANEL) {
                /* whole 16 x 16 blocks transposed in registers (the panel's rows are 16
                 * floats: a block is one 16-column, 16-row square of b) */
                for (; kk0 + 16 <= kc; kk0 += 16)
                    transpose16_avx512(b + (int64_t)j0 * ldb + k0 + kk0, ldb,
                                       dst + (size_t)kk0 * ENGINE_PANEL, ENGINE_PANEL);
            }
            for (int jj = 0; jj < cols; jj++) {
                const float *src = b + (int64_t)(j0 + jj) * ldb + k0;
                for (int kk = kk0; kk < kc; kk++)
                    dst[(size_t)kk * ENGINE_PANEL + jj] = src[kk];
            }
        }
    }
}

/* A product whose a lies k-major (a transposed view: element (i, kk) at a[kk * lda + i]) and
 * whose b is row-major, as a kernel gradient's operands lie (c = a^T b summed over pixels or
 * tiles): the micro-kernel broadcasts a's R values of row kk straight from a[kk * lda + i], with
 * no transposed copy of a; b is packed into panels as for the other products. Transposing a
 * cost about as much as the products where the output is small and the inner dimension long
 * (96 x 96 outputs over 1792 tiles: 211 GFLOP/s with it, 280 without, Zen 5, 2 threads).
 * The same blocks of ENGINE_GEMM_KC, each summed from zero by fused multiply-adds in the
 * order of kk and added to c by the same epilogue as the packed path: the same bits. */
__attribute__((target("avx512f"), always_inline))
static inline void gemm_kmajor_rows(int kc, const float *a, int64_t lda, const float *b,
                                    int ncols, const float *zeros, const Epilogue *e,
                                    const int R, const int PAIR)
{
    __m512 acc0[MR_AVX512], acc1[MR_AVX512];
    const __mmask16 first = (__mmask16)(ncols >= ENGINE_PANEL ? 0xffffu
                                        : (1u << ncols) - 1u);
    const __mmask16 second = (__mmask16)(!PAIR ? 0u : ncols >= 2 * ENGINE_PANEL ? 0xffffu
                                         : (1u << (ncols - ENGINE_PANEL)) - 1u);
    for (int q = 0; q < R; q++) {
        acc0[q] = _mm512_setzero_ps();
        acc1[q] = _mm512_setzero_ps();
    }
    for (int kk = 0; kk < kc; kk++) {
        const float *ak = a + (int64_t)kk * lda, *bk = b + (size_t)kk * ENGINE_PANEL;
        const __m512 b0 = _mm512_loadu_ps(bk);
        const __m512 b1 = PAIR ? _mm512_loadu_ps(bk + (size_t)kc * ENGINE_PANEL)
                               : _mm512_setzero_ps();
#pragma GCC unroll 12
        for (int q = 0; q < R; q++) {
            const __m512 v = _mm512_set1_ps(ak[q]);
            acc0[q] = _mm512_fmadd_ps(v, b0, acc0[q]);
            if (PAIR)
                acc1[q] = _mm512_fmadd_ps(v, b1, acc1[q]);
        }
    }
    /* the packed path's epilogue with a bias of zeros and no clamp, value for value */
    const __m512 bv = _mm512_loadu_ps(zeros);
    const __m512 lo = _mm512_set1_ps(e->lo), hi = _mm512_set1_ps(e->hi);
    for (int q = 0; q < R; q++) {
        __m512 v0 = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(acc0[q], bv), lo), hi);
        if (e->res[q])
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(first, e->res[q]));
        _mm512_mask_storeu_ps(e->out[q], first, v0);
        if (PAIR) {
            __m512 v1 = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(acc1[q], bv), lo), hi);
            if (e->res[q])
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(second, e->res[q] + ENGINE_PANEL));
            _mm512_mask_storeu_ps(e->out[q] + ENGINE_PANEL, second, v1);
        }
    }
}

typedef void (*KmajorKernel)(int kc, const float *a, int64_t lda, const float *b, int ncols,
                             const float *zeros, const Epilogue *e);
#define KMAJOR_AVX512(R)                                                                      \
__attribute__((target("avx512f")))                                                           \
static void gemm_kmajor_##R(int kc, const float *a, int64_t lda, const float *b, int ncols,    \
                            const float *zeros, const Epilogue *e)                           \
{                                                                                            \
    gemm_kmajor_rows(kc, a, lda, b, ncols, zeros, e, R, 0);                                   \
}                                                                                            \
__attribute__((target("avx512f")))                                                           \
static void gemm_kmajor_pair_##R(int kc, const float *a, int64_t lda, const float *b,         \
                                 int ncols, const float *zeros, const Epilogue *e)           \
{                                                                                            \
    gemm_kmajor_rows(kc, a, lda, b, ncols, zeros, e, R, 1);                                   \
}
FOR_EACH_ROW_COUNT(KMAJOR_AVX512)
static const KmajorKernel KMAJOR_SINGLE[MR_AVX512] = ROW_COUNT_TABLE(gemm_kmajor_);
static const KmajorKernel KMAJOR_PAIR[MR_AVX512] = ROW_COUNT_TABLE(gemm_kmajor_pair_);

static void gemm_kmajor(int m, int n, int k, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int accumulate, const float *zeros,
                        float *packed_b)
{
    const int panels = (n + ENGINE_PANEL - 1) / ENGINE_PANEL;
    for (int k0 = 0; k0 < k; k0 += ENGINE_GEMM_KC) {
        const int kc = k - k0 < ENGINE_GEMM_KC ? k - k0 : ENGINE_GEMM_KC;
        const int add = accumulate || k0 > 0;
        /* one block of rows: each pair of panels packed as its turn comes (the block walks
         * the pairs once), so that it goes to the kernel from L2, not through memory */
        const int late = m <= ENGINE_GEMM_MC;
        if (!late)
            gemm_pack_b(ENGINE_AVX512, b, ldb, 0, k0, kc, n, 0, panels, packed_b);
        /* a block of ENGINE_GEMM_MC rows at a time (its kc x mc values stay in L2), each pair
         * of packed panels walking the block's strips of rows: the pair stays in L1 */
        for (int i0 = 0; i0 < m; i0 += ENGINE_GEMM_MC) {
            const int mc = m - i0 < ENGINE_GEMM_MC ? m - i0 : ENGINE_GEMM_MC;
            for (int p = 0; p < panels; p += 2) {
                const int left = n - p * ENGINE_PANEL;
                const int ncols = left < 2 * ENGINE_PANEL ? left : 2 * ENGINE_PANEL;
                const float *pair = packed_b + (late ? 0 : (size_t)p * kc * ENGINE_PANEL);
                if (late)
                    gemm_pack_b(ENGINE_AVX512, b, ldb, 0, k0, kc, n, p,
                                panels - p < 2 ? panels - p : 2, packed_b);
                for (int r0 = i0; r0 < i0 + mc; r0 += MR_AVX512) {
                    Epilogue e;
                    e.rows = i0 + mc - r0 < MR_AVX512 ? i0 + mc - r0 : MR_AVX512;
                    e.ncols = ncols;
                    e.lo = -INFINITY;
                    e.hi = INFINITY;
                    e.second = 0;
                    for (int q = 0; q < e.rows; q++) {
                        e.out[q] = c + (int64_t)(r0 + q) * ldc + p * ENGINE_PANEL;
                        e.res[q] = add ? e.out[q] : NULL;
                    }
                    (ncols > ENGINE_PANEL ? KMAJOR_PAIR : KMAJOR_SINGLE)[e.rows - 1](
                        kc, a + (int64_t)k0 * lda + r0, lda, pair, ncols, zeros, &e);
                }
            }
        }
    }
}

/* floats of packed b that a product needs at once: with one block of rows (late packing, or
 * a block small enough for the strips to walk it whole) a pair of panels or ENGINE_GEMM_L1_B,
 * else every panel of a block of ENGINE_GEMM_KC rows */
static size_t gemm_packed_b_floats(int m, int panels, int kc_most, int width)
{
    const size_t all = (size_t)panels * kc_most * ENGINE_PANEL;
    if (m > ENGINE_GEMM_MC)
        return all;
    size_t most = (size_t)width * kc_most * ENGINE_PANEL;
    if (most < ENGINE_GEMM_L1_B / sizeof(float))
        most = ENGINE_GEMM_L1_B / sizeof(float);
    return most < all ? most : all;
}

int engine_gemm_c(int backend, int m, int n, int k, const float *a, int64_t lda, int a_trans,
                  const float *b, int64_t ldb, int b_trans, float *c, int64_t ldc,
                  int accumulate)
{
    const int panels = (n + ENGINE_PANEL - 1) / ENGINE_PANEL;
    const int kc_most = k < ENGINE_GEMM_KC ? k : ENGINE_GEMM_KC;
    if (backend == ENGINE_AVX512 && a_trans && !b_trans) {
        static const float zeros[ENGINE_PANEL] = {0};
        float *packed = malloc(gemm_packed_b_floats(m, panels, kc_most, 2) * sizeof(float));
        if (!packed)
            return -1;
        gemm_kmajor(m, n, k, a, lda, b, ldb, c, ldc, accumulate, zeros, packed);
        free(packed);
        return 0;
    }
    const TileKernels tk = tile_kernels(backend);
    const TileKernel kernel = tk.single, pair_kernel = tk.pair;
    const int mr = tk.mr;
    const int width = pair_kernel ? 2 : 1;
    float *packed_b = malloc(gemm_packed_b_floats(m, panels, kc_most, width) * sizeof(float));
    float *packed_a = a_trans ? malloc((size_t)ENGINE_GEMM_MC * kc_most * sizeof(float)) : NULL;
    float *zeros = calloc((size_t)(kc_most > 2 * ENGINE_PANEL ? kc_most : 2 * ENGINE_PANEL),
                          sizeof(float));
    if (!packed_b || !zeros || (a_trans && !packed_a)) {
        free(packed_b);
        free(packed_a);
        free(zeros);
        return -1;
    }
    for (int k0 = 0; k0 < k; k0 += ENGINE_GEMM_KC) {
        const int kc = k - k0 < ENGINE_GEMM_KC ? k - k0 : ENGINE_GEMM_KC;
        const int add = accumulate || k0 > 0;
        /* the packed block of b small enough to stay in L1 with a strip of a: each strip of
         * rows walks the panels (a's strip read once); else each pair of panels walks the
         * strips (the panels stay in L1, a's block comes from L2), and with one block of rows
         * each pair is packed as its turn comes, so that it reaches the kernel from L2 */
        const int strips_outer = (size_t)kc * panels * ENGINE_PANEL * sizeof(float)
                                 <= ENGINE_GEMM_L1_B;
        const int late = !strips_outer && m <= ENGINE_GEMM_MC;
        if (!late)
            gemm_pack_b(backend, b, ldb, b_trans, k0, kc, n, 0, panels, packed_b);
        for (int i0 = 0; i0 < m; i0 += ENGINE_GEMM_MC) {
            const int mc = m - i0 < ENGINE_GEMM_MC ? m - i0 : ENGINE_GEMM_MC;
            if (a_trans)
                gemm_pack_a_transposed(backend, a, lda, i0, mc, k0, kc, packed_a);
            const int outer = strips_outer ? (mc + mr - 1) / mr : (panels + width - 1) / width;
            const int inner = strips_outer ? (panels + width - 1) / width : (mc + mr - 1) / mr;
            for (int o = 0; o < outer; o++) {
                if (late)
                    gemm_pack_b(backend, b, ldb, b_trans, k0, kc, n, o * width,
                                panels - o * width < width ? panels - o * width : width,
                                packed_b);
                for (int in = 0; in < inner; in++) {
                    const int p = (strips_outer ? in : o) * width;
                    const int r0 = (strips_outer ? o : in) * mr;
                    const int covered = panels - p < width ? panels - p : width;
                    const int left = n - p * ENGINE_PANEL;
                    const float *rows[MAX_MR];
                    Epilogue e;
                    e.rows = mc - r0 < mr ? mc - r0 : mr;
                    e.ncols = left < covered * ENGINE_PANEL ? left : covered * ENGINE_PANEL;
                    e.lo = -INFINITY;
                    e.hi = INFINITY;
                    e.second = 0;
                    for (int q = 0; q < mr; q++) {
                        if (q >= e.rows) {
                            rows[q] = zeros;
                            continue;
                        }
                        const int i = i0 + r0 + q;
                        rows[q] = a_trans ? packed_a + (size_t)(r0 + q) * kc
                                          : a + (int64_t)i * lda + k0;
                        e.out[q] = c + (int64_t)i * ldc + p * ENGINE_PANEL;
                        e.res[q] = add ? e.out[q] : NULL;
                    }
                    (covered == 2 ? pair_kernel : kernel)(
                        1, kc, rows, packed_b + (late ? 0 : (size_t)p * kc * ENGINE_PANEL),
                        zeros, &e);
                }
            }
        }
    }
    free(packed_b);
    free(packed_a);
    free(zeros);
    return 0;
}

/* ---- few output channels: dot products --------------------------------------------------
 * For cout <= ENGINE_DOT_MAX (the decoder's 3-class layers) a panel of 16 would compute mostly
 * padding: each output is instead a dot product over the input channels, vectorised along
 * them, with weights w[tap][o][cin]. Same offsets and epilogue as engine_conv_c, and with
 * `softmax` the softmax over the pixel's outputs last (the prediction layer's activation). The
 * per-pixel loops are compiled for each output count (COUT a constant), so that the
 * accumulators stay in registers. */
static inline void dot_write(float *sums, const float *bias, int cout, float *out,
                             const float *res, float lo, float hi, int softmax)
{
    if (!softmax) {  /* straight to the output: no pass through sums */
        for (int o = 0; o < cout; o++) {
            const float v = clampf(sums[o] + bias[o], lo, hi);
            out[o] = res ? v + res[o] : v;
        }
        return;
    }
    float top = -INFINITY, total = 0.0f;
    for (int o = 0; o < cout; o++) {
        float v = clampf(sums[o] + bias[o], lo, hi);
        sums[o] = res ? v + res[o] : v;
        top = sums[o] > top ? sums[o] : top;
    }
    for (int o = 0; o < cout; o++) {
        sums[o] = expf(sums[o] - top);
        total += sums[o];
    }
    for (int o = 0; o < cout; o++)
        out[o] = sums[o] / total;
}

#define DOT_PIXEL_AVX512(COUT)                                                                \
__attribute__((target("avx512f")))                                                           \
static void dot_pixel_avx512_##COUT(const float *const *a, int taps, int cin,                \
                                    const float *w, float *sums)                             \
{                                                                                            \
    __m512 acc[COUT];                                                                        \
    for (int o = 0; o < COUT; o++)                                                           \
        acc[o] = _mm512_setzero_ps();                                                        \
    for (int t = 0; t < taps; t++) {                                                         \
        const float *wt = w + (size_t)t * COUT * cin;                                        \
        for (int c0 = 0; c0 < cin; c0 += 16) {                                               \
            const int n = cin - c0 < 16 ? cin - c0 : 16;                                     \
            const __mmask16 mask = (__mmask16)((1u << n) - 1u);                              \
            const __m512 xv = _mm512_maskz_loadu_ps(mask, a[t] + c0);                        \
            for (int o = 0; o < COUT; o++)                                                   \
                acc[o] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(mask, wt + o * cin + c0), \
                                         acc[o]);                                            \
        }                                                                                    \
    }                                                                                        \
    for (int o = 0; o < COUT; o++)                                                           \
        sums[o] = _mm512_reduce_add_ps(acc[o]);                                              \
}

#define DOT_PIXEL_AVX2(COUT)                                                                  \
__attribute__((target("avx2,fma")))                                                          \
static void dot_pixel_avx2_##COUT(const float *const *a, int taps, int cin,                  \
                                  const float *w, float *sums)                               \
{                                                                                            \
    __m256 acc[COUT];                                                                        \
    float tail[COUT];                                                                        \
    for (int o = 0; o < COUT; o++) {                                                         \
        acc[o] = _mm256_setzero_ps();                                                        \
        tail[o] = 0.0f;                                                                      \
    }                                                                                        \
    const int vec = cin / 8 * 8;                                                             \
    for (int t = 0; t < taps; t++) {                                                         \
        const float *wt = w + (size_t)t * COUT * cin;                                        \
        for (int c0 = 0; c0 < vec; c0 += 8) {                                                \
            const __m256 xv = _mm256_loadu_ps(a[t] + c0);                                    \
            for (int o = 0; o < COUT; o++)                                                   \
                acc[o] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wt + o * cin + c0), acc[o]);    \
        }                                                                                    \
        for (int c = vec; c < cin; c++)                                                      \
            for (int o = 0; o < COUT; o++)                                                   \
                tail[o] = fmaf(a[t][c], wt[o * cin + c], tail[o]);                           \
    }                                                                                        \
    for (int o = 0; o < COUT; o++) {                                                         \
        float lanes[8];                                                                      \
        _mm256_storeu_ps(lanes, acc[o]);                                                     \
        sums[o] = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +                          \
                  ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail[o];                 \
    }                                                                                        \
}

#define DOT_PIXEL_PORTABLE(COUT)                                                              \
static void dot_pixel_portable_##COUT(const float *const *a, int taps, int cin,              \
                                      const float *w, float *sums)                           \
{                                                                                            \
    float acc[COUT];                                                                         \
    for (int o = 0; o < COUT; o++)                                                           \
        acc[o] = 0.0f;                                                                       \
    for (int t = 0; t < taps; t++) {                                                         \
        const float *wt = w + (size_t)t * COUT * cin;                                        \
        for (int c = 0; c < cin; c++) {                                                      \
            const float v = a[t][c];                                                         \
            for (int o = 0; o < COUT; o++)                                                   \
                acc[o] += v * wt[o * cin + c];                                               \
        }                                                                                    \
    }                                                                                        \
    for (int o = 0; o < COUT; o++)                                                           \
        sums[o] = acc[o];                                                                    \
}

#define DOT_PIXEL_ALL(COUT) DOT_PIXEL_AVX512(COUT) DOT_PIXEL_AVX2(COUT) DOT_PIXEL_PORTABLE(COUT)
DOT_PIXEL_ALL(1) DOT_PIXEL_ALL(2) DOT_PIXEL_ALL(3) DOT_PIXEL_ALL(4)
DOT_PIXEL_ALL(5) DOT_PIXEL_ALL(6) DOT_PIXEL_ALL(7) DOT_PIXEL_ALL(8)

typedef void (*DotPixel)(const float *const *, int, int, const float *, float *);
#define DOT_TABLE(KIND) {dot_pixel_##KIND##_1, dot_pixel_##KIND##_2, dot_pixel_##KIND##_3,     \
                         dot_pixel_##KIND##_4, dot_pixel_##KIND##_5, dot_pixel_##KIND##_6,     \
                         dot_pixel_##KIND##_7, dot_pixel_##KIND##_8}
static const DotPixel DOT_PORTABLE[ENGINE_DOT_MAX] = DOT_TABLE(portable);
static const DotPixel DOT_AVX2[ENGINE_DOT_MAX] = DOT_TABLE(avx2);
static const DotPixel DOT_AVX512[ENGINE_DOT_MAX] = DOT_TABLE(avx512);

/* four pixels at once for the fewest outputs (the 3-class layers): each weight vector loaded
 * feeds four fused multiply-adds instead of one. Every pixel's sums are formed in the same
 * order as by dot_pixel_avx512, so the grouping changes no bit. */
#define DOT_QUAD_MAX 4
#define DOT_QUAD_AVX512(COUT)                                                                 \
__attribute__((target("avx512f")))                                                           \
static void dot_quad_avx512_##COUT(const float *const *a, int taps, int cin,                 \
                                   const float *w, float *sums)                              \
{                                                                                            \
    __m512 acc[4][COUT];                                                                     \
    for (int q = 0; q < 4; q++)                                                              \
        for (int o = 0; o < COUT; o++)                                                       \
            acc[q][o] = _mm512_setzero_ps();                                                 \
    for (int t = 0; t < taps; t++) {                                                         \
        const float *wt = w + (size_t)t * COUT * cin;                                        \
        const float *a0 = a[t], *a1 = a[taps + t], *a2 = a[2 * taps + t];                    \
        const float *a3 = a[3 * taps + t];                                                   \
        for (int c0 = 0; c0 < cin; c0 += 16) {                                               \
            const int n = cin - c0 < 16 ? cin - c0 : 16;                                     \
            const __mmask16 mask = (__mmask16)((1u << n) - 1u);                              \
            const __m512 x0 = _mm512_maskz_loadu_ps(mask, a0 + c0);                          \
            const __m512 x1 = _mm512_maskz_loadu_ps(mask, a1 + c0);                          \
            const __m512 x2 = _mm512_maskz_loadu_ps(mask, a2 + c0);                          \
            const __m512 x3 = _mm512_maskz_loadu_ps(mask, a3 + c0);                          \
            for (int o = 0; o < COUT; o++) {                                                 \
                const __m512 wv = _mm512_maskz_loadu_ps(mask, wt + o * cin + c0);            \
                acc[0][o] = _mm512_fmadd_ps(x0, wv, acc[0][o]);                              \
                acc[1][o] = _mm512_fmadd_ps(x1, wv, acc[1][o]);                              \
                acc[2][o] = _mm512_fmadd_ps(x2, wv, acc[2][o]);                              \
                acc[3][o] = _mm512_fmadd_ps(x3, wv, acc[3][o]);                              \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    for (int q = 0; q < 4; q++)                                                              \
        for (int o = 0; o < COUT; o++)                                                       \
            sums[q * ENGINE_DOT_MAX + o] = _mm512_reduce_add_ps(acc[q][o]);                  \
}
DOT_QUAD_AVX512(1) DOT_QUAD_AVX512(2) DOT_QUAD_AVX512(3) DOT_QUAD_AVX512(4)
static const DotPixel DOT_QUAD_AVX512[DOT_QUAD_MAX] = {
    dot_quad_avx512_1, dot_quad_avx512_2, dot_quad_avx512_3, dot_quad_avx512_4};

#define DOT_CHUNK 64
void engine_dot_c(int backend, int threads, int batch,
                  const float *x, int64_t x_image, const int32_t *in_off,
                  int pixels, int taps, int cin, const float *w, const float *bias, int cout,
                  float *y, int64_t y_image, const int32_t *out_off,
                  const float *r, int64_t r_image, const int32_t *res_off,
                  float lo, float hi, int softmax)
{
    /* below one vector of input channels the vector loads are mostly masked and the
     * horizontal sums cost more than the products: plain loops */
    const DotPixel dot = (cin < 8 || backend == ENGINE_PORTABLE ? DOT_PORTABLE :
                          backend == ENGINE_AVX512 ? DOT_AVX512 : DOT_AVX2)[cout - 1];
    const DotPixel quad = cin >= 8 && backend == ENGINE_AVX512 && cout <= DOT_QUAD_MAX ?
                          DOT_QUAD_AVX512[cout - 1] : NULL;
    const int64_t chunks = (pixels + DOT_CHUNK - 1) / DOT_CHUNK;
    float *zeros = calloc((size_t)cin, sizeof(float));
    if (!zeros)
        abort();
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t item = 0; item < chunks * batch; item++) {
        const int64_t n = item / chunks;
        const int p0 = (int)(item % chunks) * DOT_CHUNK;
        const int p1 = p0 + DOT_CHUNK < pixels ? p0 + DOT_CHUNK : pixels;
        const float *xn = x + n * x_image;
        const float *a[4 * ENGINE_MAX_TAPS];
        float sums[4 * ENGINE_DOT_MAX];
        for (int p = p0; p < p1;) {
            const int group = quad && p1 - p >= 4 ? 4 : 1;
            for (int q = 0; q < group; q++) {
                for (int t = 0; t < taps; t++) {
                    if (!in_off) {
                        a[q * taps + t] = xn + (int64_t)(p + q) * cin;
                    } else {
                        const int32_t off = in_off[(int64_t)(p + q) * taps + t];
                        a[q * taps + t] = off < 0 ? zeros : xn + off;
                    }
                }
            }
            (group == 4 ? quad : dot)(a, taps, cin, w, sums);
            for (int q = 0; q < group; q++, p++) {
                const int64_t o = out_off ? out_off[p] : (int64_t)p * cout;
                dot_write(sums + q * ENGINE_DOT_MAX, bias, cout, y + n * y_image + o,
                          r ? r + n * r_image + (res_off ? res_off[p] : o) : NULL, lo, hi,
                          softmax);
            }
        }
    }
    free(zeros);
}

/* ---- few output channels: the columns' gather -------------------------------------------
 * A transposed convolution with few output channels as a 1x1 convolution and a gather: the
 * caller computes every tap's products at once, cols[n, i, tap * cout + o] = sum_c x[n, i, c]
 * w[tap, c, o] (engine_conv_c on a 1x1 kernel of taps * cout output channels, whose panels
 * are then mostly full), and this kernel forms each output as the sum of its taps' columns,
 * out = clamp(bias + sum_t cols[g_off[p, t] + o]) (+ residual), the taps in table order
 * (g_off -1: none), each sum started from 0 in float32; then dot_write's epilogue (softmax
 * included). */
#define GATHER_CHUNK 256
/* one chunk of pixels, the output count a constant (the loops unrolled, the sums in
 * registers, dot_write inlined with it) */
#define GATHER_PIXELS(COUT)                                                                   \
static void gather_pixels_##COUT(const float *cn, const int32_t *g_off, int p0, int p1,       \
                                 int taps, const float *bias, float *yn,                     \
                                 const int32_t *out_off, const float *rn,                    \
                                 const int32_t *res_off, float lo, float hi, int softmax)    \
{                                                                                            \
    for (int p = p0; p < p1; p++) {                                                          \
        const int32_t *offs = g_off + (int64_t)p * taps;                                     \
        float sums[COUT];                                                                    \
        for (int o = 0; o < COUT; o++)                                                       \
            sums[o] = 0.0f;                                                                  \
        for (int t = 0; t < taps; t++) {                                                     \
            if (offs[t] < 0)                                                                 \
                continue;                                                                    \
            const float *c = cn + offs[t];                                                   \
            for (int o = 0; o < COUT; o++)                                                   \
                sums[o] += c[o];                                                             \
        }                                                                                    \
        const int64_t at = out_off ? out_off[p] : (int64_t)p * COUT;                         \
        dot_write(sums, bias, COUT, yn + at, rn ? rn + (res_off ? res_off[p] : at) : NULL,     \
                  lo, hi, softmax);                                                          \
    }                                                                                        \
}
GATHER_PIXELS(1) GATHER_PIXELS(2) GATHER_PIXELS(3) GATHER_PIXELS(4)
GATHER_PIXELS(5) GATHER_PIXELS(6) GATHER_PIXELS(7) GATHER_PIXELS(8)
typedef void (*GatherPixels)(const float *, const int32_t *, int, int, int, const float *,
                             float *, const int32_t *, const float *, const int32_t *, float,
                             float, int);
static const GatherPixels GATHER[ENGINE_DOT_MAX] = {
    gather_pixels_1, gather_pixels_2, gather_pixels_3, gather_pixels_4,
    gather_pixels_5, gather_pixels_6, gather_pixels_7, gather_pixels_8};

void engine_gather_c(int threads, int batch, const float *cols, int64_t cols_image,
                     const int32_t *g_off, int pixels, int taps, const float *bias, int cout,
                     float *y, int64_t y_image, const int32_t *out_off,
                     const float *r, int64_t r_image, const int32_t *res_off,
                     float lo, float hi, int softmax)
{
    const GatherPixels run = GATHER[cout - 1];
    const int64_t chunks = (pixels + GATHER_CHUNK - 1) / GATHER_CHUNK;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t item = 0; item < chunks * batch; item++) {
        const int64_t n = item / chunks;
        const int p0 = (int)(item % chunks) * GATHER_CHUNK;
        const int p1 = p0 + GATHER_CHUNK < pixels ? p0 + GATHER_CHUNK : pixels;
        run(cols + n * cols_image, g_off, p0, p1, taps, bias, y + n * y_image, out_off,
            r ? r + n * r_image : NULL, res_off, lo, hi, softmax);
    }
}

/* ---- depthwise ------------------------------------------------------------------------- */
/* out[n, i, j, c] = clamp(bias[c] + sum_{a, b} x[n, i*s - pt + a, j*s - pl + b, c] k[a, b, c]),
 * reads outside x being zero; the taps summed in the order a, b. One output row per job. */
__attribute__((target("avx512f")))
static void depthwise_row_avx512(const float *xn, int h, int w, int c, const float *k, int kh,
                                 int kw, int stride, int pt, int pl, const float *bias,
                                 float lo, float hi, float *yrow, int i, int wo)
{
    const __m512 lov = _mm512_set1_ps(lo), hiv = _mm512_set1_ps(hi);
    for (int j = 0; j < wo; j++) {
        for (int c0 = 0; c0 < c; c0 += 16) {
            const int n = c - c0 < 16 ? c - c0 : 16;
            const __mmask16 mask = (__mmask16)((1u << n) - 1u);
            __m512 acc = _mm512_setzero_ps();
            for (int a = 0; a < kh; a++) {
                const int r = i * stride - pt + a;
                if (r < 0 || r >= h)
                    continue;
                for (int b = 0; b < kw; b++) {
                    const int q = j * stride - pl + b;
                    if (q < 0 || q >= w)
                        continue;
                    acc = _mm512_fmadd_ps(
                        _mm512_maskz_loadu_ps(mask, xn + ((int64_t)r * w + q) * c + c0),
                        _mm512_maskz_loadu_ps(mask, k + (a * kw + b) * c + c0), acc);
                }
            }
            acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mask, bias + c0));
            acc = _mm512_min_ps(_mm512_max_ps(acc, lov), hiv);
            _mm512_mask_storeu_ps(yrow + (int64_t)j * c + c0, mask, acc);
        }
    }
}

__attribute__((target("avx2,fma")))
static void depthwise_row_avx2(const float *xn, int h, int w, int c, const float *k, int kh,
                               int kw, int stride, int pt, int pl, const float *bias,
                               float lo, float hi, float *yrow, int i, int wo)
{
    const __m256 lov = _mm256_set1_ps(lo), hiv = _mm256_set1_ps(hi);
    const int vec = c / 8 * 8;
    for (int j = 0; j < wo; j++) {
        for (int c0 = 0; c0 < vec; c0 += 8) {
            __m256 acc = _mm256_setzero_ps();
            for (int a = 0; a < kh; a++) {
                const int r = i * stride - pt + a;
                if (r < 0 || r >= h)
                    continue;
                for (int b = 0; b < kw; b++) {
                    const int q = j * stride - pl + b;
                    if (q < 0 || q >= w)
                        continue;
                    acc = _mm256_fmadd_ps(_mm256_loadu_ps(xn + ((int64_t)r * w + q) * c + c0),
                                          _mm256_loadu_ps(k + (a * kw + b) * c + c0), acc);
                }
            }
            acc = _mm256_add_ps(acc, _mm256_loadu_ps(bias + c0));
            acc = _mm256_min_ps(_mm256_max_ps(acc, lov), hiv);
            _mm256_storeu_ps(yrow + (int64_t)j * c + c0, acc);
        }
        for (int ch = vec; ch < c; ch++) {
            float acc = 0.0f;
            for (int a = 0; a < kh; a++) {
                const int r = i * stride - pt + a;
                if (r < 0 || r >= h)
                    continue;
                for (int b = 0; b < kw; b++) {
                    const int q = j * stride - pl + b;
                    if (q >= 0 && q < w)
                        acc = fmaf(xn[((int64_t)r * w + q) * c + ch], k[(a * kw + b) * c + ch],
                                   acc);
                }
            }
            yrow[(int64_t)j * c + ch] = clampf(acc + bias[ch], lo, hi);
        }
    }
}

static void depthwise_row_portable(const float *xn, int h, int w, int c, const float *k,
                                   int kh, int kw, int stride, int pt, int pl,
                                   const float *bias, float lo, float hi, float *yrow, int i,
                                   int wo)
{
    for (int j = 0; j < wo; j++) {
        float *out = yrow + (int64_t)j * c;
        for (int ch = 0; ch < c; ch++)
            out[ch] = 0.0f;
        for (int a = 0; a < kh; a++) {
            const int r = i * stride - pt + a;
            if (r < 0 || r >= h)
                continue;
            for (int b = 0; b < kw; b++) {
                const int q = j * stride - pl + b;
                if (q < 0 || q >= w)
                    continue;
                const float *xp = xn + ((int64_t)r * w + q) * c, *kp = k + (a * kw + b) * c;
                for (int ch = 0; ch < c; ch++)
                    out[ch] += xp[ch] * kp[ch];
            }
        }
        for (int ch = 0; ch < c; ch++)
            out[ch] = clampf(out[ch] + bias[ch], lo, hi);
    }
}

void engine_depthwise_c(int backend, int threads, const float *x, int n, int h, int w, int c,
                        const float *k, int kh, int kw, int stride, int pad_top, int pad_left,
                        const float *bias, float lo, float hi, float *y, int ho, int wo)
{
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t job = 0; job < (int64_t)n * ho; job++) {
        const int64_t img = job / ho;
        const int i = (int)(job % ho);
        const float *xn = x + img * h * w * (int64_t)c;
        float *yrow = y + (img * ho + i) * wo * (int64_t)c;
        if (backend == ENGINE_AVX512)
            depthwise_row_avx512(xn, h, w, c, k, kh, kw, stride, pad_top, pad_left, bias, lo,
                                 hi, yrow, i, wo);
        else if (backend == ENGINE_AVX2)
            depthwise_row_avx2(xn, h, w, c, k, kh, kw, stride, pad_top, pad_left, bias, lo, hi,
                               yrow, i, wo);
        else
            depthwise_row_portable(xn, h, w, c, k, kh, kw, stride, pad_top, pad_left, bias, lo,
                                   hi, yrow, i, wo);
    }
}

/* ---- per-channel affine map with clamp --------------------------------------------------- */
void engine_affine_c(int threads, const float *x, int64_t pixels, int c, const float *scale,
                     const float *shift, float lo, float hi, float *y)
{
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t p = 0; p < pixels; p++) {
        const float *xp = x + p * c;
        float *yp = y + p * c;
        for (int ch = 0; ch < c; ch++)
            yp[ch] = clampf(xp[ch] * scale[ch] + shift[ch], lo, hi);
    }
}

/* ---- Winograd F(2x2, 3x3) and F(4x4, 3x3) ---------------------------------------------
 * A stride-1 3x3 convolution computes each 2x2 block of outputs (a tile) from the 4x4 block of
 * inputs under it with 16 products per channel pair instead of 36: the input block d goes to
 * V = B^T d B, the kernel g (transformed once, at plan time: U = G g G^T) to U, the 16
 * positions xi multiply as 16 independent products M[xi] = V[xi] U[xi] summed over the input
 * channels, and the tile's outputs are A^T M A, then the epilogue. With
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], A^T = [1 1 1 0; 0 1 -1 -1]
 * both transforms are additions only. The 16 products run on the panel micro-kernels above
 * (one tap, the tiles as pixels), so the product's speed is that of a 1x1 convolution.
 *
 * F(4x4, 3x3) (`tile` 4) computes 4x4 outputs from 6x6 inputs with 36 products per channel
 * pair instead of 144, with the transforms of training's F(4x4) (engine/training/
 * winograd_f4x4.c: B^T and A^T hold 2, 4, 5 and 8, so they round, and its error grows faster
 * with the magnitudes than F(2x2)'s; the planner takes it on large maps only).
 *
 * The tiles of the whole batch are taken `chunk` at a time: the chunk's transformed inputs
 * V[P][chunk][cin] and products M[P][chunk][panels * 16] (P positions: 16, or 36 for F(4x4))
 * live in `scratch` (the caller's); the three passes (input transform, products, output
 * transform) compute every value on one thread in a fixed order (schedules:
 * engine_winograd_c). U is P packed weight sets, u[xi][panel][cin][16]. */
/* the input transform of the channels [c0, c0 + lanes) of one tile, on any vector type */
#define WINOGRAD_INPUT_BODY(LOAD, STORE, ADD, SUB)                                            \
    {                                                                                        \
        VEC t[4][4];                                                                         \
        for (int j = 0; j < 4; j++) {                                                        \
            const VEC d0 = LOAD(d[j] + c), d1 = LOAD(d[4 + j] + c);                          \
            const VEC d2 = LOAD(d[8 + j] + c), d3 = LOAD(d[12 + j] + c);                     \
            t[0][j] = SUB(d0, d2);                                                           \
            t[1][j] = ADD(d1, d2);                                                           \
            t[2][j] = SUB(d2, d1);                                                           \
            t[3][j] = SUB(d1, d3);                                                           \
        }                                                                                    \
        for (int i = 0; i < 4; i++) {                                                        \
            STORE(v + (size_t)(4 * i + 0) * stride + c, SUB(t[i][0], t[i][2]));              \
            STORE(v + (size_t)(4 * i + 1) * stride + c, ADD(t[i][1], t[i][2]));              \
            STORE(v + (size_t)(4 * i + 2) * stride + c, SUB(t[i][2], t[i][1]));              \
            STORE(v + (size_t)(4 * i + 3) * stride + c, SUB(t[i][1], t[i][3]));              \
        }                                                                                    \
    }

#define VEC __m512
#define LOAD512(ptr) _mm512_maskz_loadu_ps(mask, (ptr))
#define STORE512(ptr, val) _mm512_mask_storeu_ps((ptr), mask, (val))
__attribute__((target("avx512f")))
static void winograd_input_avx512(const float *const *d, int cin, float *restrict v,
                                  size_t stride)
{
    for (int c = 0; c < cin; c += 16) {
        const __mmask16 mask = (__mmask16)(cin - c >= 16 ? 0xFFFFu : (1u << (cin - c)) - 1u);
        WINOGRAD_INPUT_BODY(LOAD512, STORE512, _mm512_add_ps, _mm512_sub_ps)
    }
}
#undef VEC
#define VEC __m256
__attribute__((target("avx2,fma")))
static void winograd_input_avx2(const float *const *d, int cin, float *restrict v,
                                size_t stride)
{
    int c = 0;
    for (; c + 8 <= cin; c += 8)
        WINOGRAD_INPUT_BODY(_mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps, _mm256_sub_ps)
    if (c < cin) {
        const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(cin - c), lanes);
#define LOADM(ptr) _mm256_maskload_ps((ptr), mask)
#define STOREM(ptr, val) _mm256_maskstore_ps((ptr), mask, (val))
        WINOGRAD_INPUT_BODY(LOADM, STOREM, _mm256_add_ps, _mm256_sub_ps)
#undef LOADM
#undef STOREM
    }
}
#undef VEC
#define VEC float
#define LOADS(ptr) (*(ptr))
#define STORES(ptr, val) (*(ptr) = (val))
#define ADDS(a, b) ((a) + (b))
#define SUBS(a, b) ((a) - (b))
static void winograd_input_portable(const float *const *d, int cin, float *restrict v,
                                    size_t stride)
{
    for (int c = 0; c < cin; c++)
        WINOGRAD_INPUT_BODY(LOADS, STORES, ADDS, SUBS)
}
#undef VEC

#define WINOGRAD_TRANSFORMS(SUFFIX, TARGET)                                                   \
TARGET static void winograd_output_##SUFFIX(const float *m, size_t stride, int cout,          \
                                            const float *bias, float lo, float hi,            \
                                            float *const *out, const float *const *res,       \
                                            float *restrict tile)                             \
{                                                                                            \
    for (int c = 0; c < cout; c++) {                                                         \
        float s[2][4];                                                                       \
        for (int j = 0; j < 4; j++) {                                                        \
            const float m0 = m[(size_t)j * stride + c], m1 = m[(size_t)(4 + j) * stride + c];\
            const float m2 = m[(size_t)(8 + j) * stride + c];                                \
            const float m3 = m[(size_t)(12 + j) * stride + c];                               \
            s[0][j] = (m0 + m1) + m2;                                                        \
            s[1][j] = (m1 - m2) - m3;                                                        \
        }                                                                                    \
        for (int i = 0; i < 2; i++) {                                                        \
            tile[(size_t)(2 * i) * cout + c] = (s[i][0] + s[i][1]) + s[i][2];                \
            tile[(size_t)(2 * i + 1) * cout + c] = (s[i][1] - s[i][2]) - s[i][3];            \
        }                                                                                    \
    }                                                                                        \
    for (int q = 0; q < 4; q++) {                                                            \
        float *restrict o = out[q];                                                          \
        const float *t = tile + (size_t)q * cout;                                            \
        if (!o)                                                                              \
            continue;                                                                        \
        if (res[q]) {                                                                        \
            const float *rq = res[q];                                                        \
            for (int c = 0; c < cout; c++)                                                   \
                o[c] = clampf(t[c] + bias[c], lo, hi) + rq[c];                               \
        } else {                                                                             \
            for (int c = 0; c < cout; c++)                                                   \
                o[c] = clampf(t[c] + bias[c], lo, hi);                                       \
        }                                                                                    \
    }                                                                                        \
}
WINOGRAD_TRANSFORMS(avx512, __attribute__((target("avx512f"))))
WINOGRAD_TRANSFORMS(avx2, __attribute__((target("avx2,fma"))))
WINOGRAD_TRANSFORMS(portable, )

size_t engine_winograd_chunk(int batch, int ho, int wo, int cin, int cout, int tile)
{
    const size_t side = (size_t)tile + 2;
    const size_t tiles = (size_t)batch * ((ho + tile - 1) / tile) * ((wo + tile - 1) / tile);
    const size_t per_tile = side * side * (cin + (cout + ENGINE_PANEL - 1) / ENGINE_PANEL
                                                 * ENGINE_PANEL) * sizeof(float);
    size_t chunk = ENGINE_WINOGRAD_SCRATCH / per_tile / MAX_MR * MAX_MR;
    if (chunk < MAX_MR)
        chunk = MAX_MR;
    const size_t whole = (tiles + MAX_MR - 1) / MAX_MR * MAX_MR;
    return chunk < whole ? chunk : whole;
}

/* what one Winograd call shares between its three passes */
typedef struct {
    TileKernel kernel, pair_kernel;
    int tile, side, positions;
    int mr, width, all_panels, coutp, groups, tiles_w, cin, cout, h, w, ho, wo;
    int pad_top, pad_left;
    int64_t per_image;
    const float *x, *u, *bias, *r, *zeros;
    float *y, lo, hi;
    void (*input)(const float *const *, int, float *, size_t);
    void (*output)(const float *, size_t, int, const float *, float, float, float *const *,
                   const float *const *, float *);
    /* F(4x4)'s transforms (engine/training/winograd_f4x4.c), of the backend */
    void (*input4)(const float *const *, float *, ptrdiff_t, ptrdiff_t);
    void (*output4)(const float *, ptrdiff_t, const float *, float *const *, ptrdiff_t);
} Winograd;

/* the input transform of tile `tile` of the batch into v (its positions `stride` apart) */
static inline void winograd_input_tile(const Winograd *g, int64_t tile, float *v,
                                       size_t stride)
{
    const int64_t n = tile / g->per_image;
    const int ty = (int)(tile % g->per_image) / g->tiles_w;
    const int tx = (int)(tile % g->per_image) % g->tiles_w;
    const float *xn = g->x + n * (int64_t)g->h * g->w * g->cin;
    const float *d[36];
    for (int i = 0; i < g->side; i++) {
        const int row = g->tile * ty - g->pad_top + i;
        for (int j = 0; j < g->side; j++) {
            const int col = g->tile * tx - g->pad_left + j;
            d[g->side * i + j] = row < 0 || row >= g->h || col < 0 || col >= g->w ? g->zeros :
                                 xn + ((int64_t)row * g->w + col) * g->cin;
        }
    }
    if (g->tile == 4)
        g->input4(d, v, (ptrdiff_t)stride, g->cin);
    else
        g->input(d, g->cin, v, stride);
}

/* one micro-kernel tile of the products: position xi, panels group * width.., the chunk's
 * tiles rows * mr.. (of count), from v (V[P][chunk][cin]) into m (M[P][chunk][coutp]) */
static inline void winograd_product(const Winograd *g, int xi, int group, int rows,
                                    int count, size_t chunk, const float *v, float *m)
{
    const int panel = group * g->width;
    const int covered = g->all_panels - panel < g->width ? g->all_panels - panel : g->width;
    const float *a[MAX_MR];
    Epilogue e;
    e.rows = count - rows * g->mr < g->mr ? count - rows * g->mr : g->mr;
    e.ncols = covered * ENGINE_PANEL;
    e.lo = -INFINITY;
    e.hi = INFINITY;
    e.second = 0;
    for (int q = 0; q < g->mr; q++) {
        const int k = rows * g->mr + (q < e.rows ? q : 0);
        a[q] = q < e.rows ? v + ((size_t)xi * chunk + k) * g->cin : g->zeros;
        e.out[q] = m + ((size_t)xi * chunk + k) * g->coutp + (size_t)panel * ENGINE_PANEL;
        e.res[q] = NULL;
    }
    const float *wp = g->u + ((size_t)xi * g->all_panels + panel) * g->cin * ENGINE_PANEL;
    if (covered == 2)
        g->pair_kernel(1, g->cin, a, wp, g->zeros, &e);
    else
        g->kernel(1, g->cin, a, wp, g->zeros, &e);
}

/* F(4x4, 3x3)'s output transform (engine/training/winograd_f4x4.c, bias added there) into
 * the thread's tile, then the clamp and residual of the outputs inside the map */
static inline void winograd4_output_tile(const Winograd *g, int64_t n, int ty, int tx,
                                         const float *m, size_t stride, float *tile_out)
{
    float *dst[16];
    for (int q = 0; q < 16; q++)
        dst[q] = tile_out + (size_t)q * g->coutp;
    g->output4(m, (ptrdiff_t)stride, g->bias, dst, g->cout);
    for (int q = 0; q < 16; q++) {
        const int row = 4 * ty + q / 4, col = 4 * tx + q % 4;
        if (row >= g->ho || col >= g->wo)
            continue;
        const int64_t at = ((n * g->ho + row) * (int64_t)g->wo + col) * g->cout;
        float *restrict o = g->y + at;
        const float *t = dst[q];
        if (g->r) {
            const float *rq = g->r + at;
            for (int c = 0; c < g->cout; c++)
                o[c] = clampf(t[c], g->lo, g->hi) + rq[c];
        } else {
            for (int c = 0; c < g->cout; c++)
                o[c] = clampf(t[c], g->lo, g->hi);
        }
    }
}

/* the output transform and epilogue of tile `tile` of the batch, from m (its positions
 * `stride` apart) */
static inline void winograd_output_tile(const Winograd *g, int64_t tile, const float *m,
                                        size_t stride, float *tile_out)
{
    const int64_t n = tile / g->per_image;
    const int ty = (int)(tile % g->per_image) / g->tiles_w;
    const int tx = (int)(tile % g->per_image) % g->tiles_w;
    if (g->tile == 4) {
        winograd4_output_tile(g, n, ty, tx, m, stride, tile_out);
        return;
    }
    float *out[4];
    const float *res[4];
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 2; j++) {
            const int row = 2 * ty + i, col = 2 * tx + j;
            const int64_t at = ((n * g->ho + row) * (int64_t)g->wo + col) * g->cout;
            const int inside = row < g->ho && col < g->wo;
            out[2 * i + j] = inside ? g->y + at : NULL;
            res[2 * i + j] = inside && g->r ? g->r + at : NULL;
        }
    }
    g->output(m, stride, g->cout, g->bias, g->lo, g->hi, out, res, tile_out);
}

/* Two schedules, the same arithmetic for every value (so the same bits on any thread count):
 * "private", each thread taking whole chunks of its own (half the scratch each, on two
 * threads) through all three passes without a barrier, where the batch has at least two such
 * chunks per thread of at least ENGINE_WINOGRAD_OWN_MIN tiles (the chunk's products read all
 * weight sets once: fewer tiles would make them a stream); else "shared", each of a
 * chunk's passes split over the threads, three barriers per chunk. On 2 threads of a Zen 5
 * (AMD EPYC, family 26 model 2; a VM, where a barrier costs tens of microseconds when the
 * host is busy) at batch 8, 224x224: the decoder's 112x112 96 -> 96 layer 61-66 -> 24-25 ms,
 * 56x56 144 -> 256 40-44 -> 20-21 ms; the batch-8 prediction 479-494 -> 449-467 ms. */
void engine_winograd_c(int backend, int threads, int batch, const float *x, int h, int w,
                       int cin, int pad_top, int pad_left, const float *u, const float *bias,
                       int cout, float *y, int ho, int wo, const float *r, float lo, float hi,
                       float *scratch, int64_t chunk, int tile)
{
    const TileKernels tk = tile_kernels(backend);
    Winograd g;
    g.tile = tile;
    g.side = tile + 2;
    g.positions = g.side * g.side;
    g.kernel = tk.single;
    g.pair_kernel = tk.pair;
    g.mr = tk.mr;
    g.input = winograd_input_portable;
    g.output = winograd_output_portable;
    g.input4 = refseg_winograd4_input_f;
    g.output4 = refseg_winograd4_output_f;
    if (backend == ENGINE_AVX512) {
        g.input = winograd_input_avx512;
        g.output = winograd_output_avx512;
        g.input4 = refseg_winograd4_input_f_avx512;
        g.output4 = refseg_winograd4_output_f_avx512;
    } else if (backend == ENGINE_AVX2) {
        g.input = winograd_input_avx2;
        g.output = winograd_output_avx2;
        g.input4 = refseg_winograd4_input_f_avx2;
        g.output4 = refseg_winograd4_output_f_avx2;
    }
    g.width = tk.pair ? 2 : 1;
    g.all_panels = (cout + ENGINE_PANEL - 1) / ENGINE_PANEL;
    g.coutp = g.all_panels * ENGINE_PANEL;
    g.groups = (g.all_panels + g.width - 1) / g.width;
    g.tiles_w = (wo + tile - 1) / tile;
    g.per_image = (int64_t)((ho + tile - 1) / tile) * g.tiles_w;
    g.cin = cin;
    g.cout = cout;
    g.h = h;
    g.w = w;
    g.ho = ho;
    g.wo = wo;
    g.pad_top = pad_top;
    g.pad_left = pad_left;
    g.x = x;
    g.u = u;
    g.bias = bias;
    g.r = r;
    g.y = y;
    g.lo = lo;
    g.hi = hi;
    const int64_t total = g.per_image * batch;
    /* the output transform's tile before the epilogue, one per thread */
    const size_t tile_floats = (size_t)tile * tile * g.coutp;
    float *tiles_out = malloc((size_t)threads * tile_floats * sizeof(float));
    float *zeros = calloc((size_t)(cin > 2 * ENGINE_PANEL ? cin : 2 * ENGINE_PANEL),
                          sizeof(float));
    if (!zeros || !tiles_out)
        abort();
    g.zeros = zeros;
    const size_t per_tile = (size_t)g.positions * (cin + g.coutp);
    /* each thread's whole chunks share the caller's scratch */
    const int64_t own = chunk / threads / MAX_MR * MAX_MR;
    if (threads > 1 && own >= ENGINE_WINOGRAD_OWN_MIN && total >= 2 * threads * own) {
        const int64_t chunks = (total + own - 1) / own;
        #pragma omp parallel num_threads(threads)
        {
            const int t = omp_get_thread_num();
            float *v = scratch + (size_t)t * own * per_tile;
            float *m = v + (size_t)g.positions * own * cin;
            float *tile_out = tiles_out + (size_t)t * tile_floats;
            #pragma omp for schedule(dynamic, 1)
            for (int64_t c = 0; c < chunks; c++) {
                const int64_t first = c * own;
                const int count = (int)(total - first < own ? total - first : own);
                const int row_tiles = (count + g.mr - 1) / g.mr;
                for (int k = 0; k < count; k++)
                    winograd_input_tile(&g, first + k, v + (size_t)k * cin, (size_t)own * cin);
                for (int xi = 0; xi < g.positions; xi++)
                    for (int group = 0; group < g.groups; group++)
                        for (int rows = 0; rows < row_tiles; rows++)
                            winograd_product(&g, xi, group, rows, count, (size_t)own, v, m);
                for (int k = 0; k < count; k++)
                    winograd_output_tile(&g, first + k, m + (size_t)k * g.coutp,
                                         (size_t)own * g.coutp, tile_out);
            }
        }
    } else {
        float *v = scratch, *m = scratch + (size_t)g.positions * chunk * cin;
        for (int64_t first = 0; first < total; first += chunk) {
            const int count = (int)(total - first < chunk ? total - first : chunk);
            const int row_tiles = (count + g.mr - 1) / g.mr;
            const int64_t products = (int64_t)g.positions * g.groups * row_tiles;
            #pragma omp parallel num_threads(threads)
            {
                #pragma omp for schedule(static)
                for (int k = 0; k < count; k++)
                    winograd_input_tile(&g, first + k, v + (size_t)k * cin, (size_t)chunk * cin);
                #pragma omp for schedule(dynamic, 1)
                for (int64_t item = 0; item < products; item++) {
                    const int xi = (int)(item / ((int64_t)g.groups * row_tiles));
                    const int rest = (int)(item % ((int64_t)g.groups * row_tiles));
                    winograd_product(&g, xi, rest / row_tiles, rest % row_tiles, count,
                                     (size_t)chunk, v, m);
                }
                #pragma omp for schedule(static)
                for (int k = 0; k < count; k++)
                    winograd_output_tile(&g, first + k, m + (size_t)k * g.coutp,
                                         (size_t)chunk * g.coutp,
                                         tiles_out + (size_t)omp_get_thread_num() * tile_floats);
            }
        }
    }
    free(zeros);
    free(tiles_out);
}

/* Winograd F(tile x tile, 3x3)'s weights of `count` panels of a packed 3x3 kernel, from panel
 * `first` (packed[panel][9][cin][16], a direct convolution's), into u[xi][count][cin][16]:
 * U = G g G^T for every channel pair, in double and rounded once, with the sums in the order of
 * panels.winograd_weights (each of the two products' three terms left to right), so that the
 * weights a call makes are those a plan stores, to the bit. One (panel, input channel) a job. */
static const double WINOGRAD_G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5},
                                         {0, 0, 1}};
static const double WINOGRAD_G4[6][3] = {{1.0 / 4, 0, 0}, {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                         {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                         {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                         {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};

/* one (panel, input channel): its 16 output channels' 3x3 taps g (tap_stride apart) into the
 * side x side positions of u (xi_stride apart); `side` a constant where it is inlined */
static inline __attribute__((always_inline)) void
winograd_weights_job(const float *g, size_t tap_stride, const double (*G)[3], const int side,
                     float *u, size_t xi_stride)
{
    double t[3][6][ENGINE_PANEL];
    for (int a = 0; a < 3; a++)
        for (int j = 0; j < side; j++)
            for (int l = 0; l < ENGINE_PANEL; l++)
                t[a][j][l] = ((double)g[(3 * a) * tap_stride + l] * G[j][0] +
                              (double)g[(3 * a + 1) * tap_stride + l] * G[j][1]) +
                             (double)g[(3 * a + 2) * tap_stride + l] * G[j][2];
    for (int i = 0; i < side; i++)
        for (int j = 0; j < side; j++) {
            float *restrict dst = u + (size_t)(side * i + j) * xi_stride;
            for (int l = 0; l < ENGINE_PANEL; l++)
                dst[l] = (float)((G[i][0] * t[0][j][l] + G[i][1] * t[1][j][l]) +
                                 G[i][2] * t[2][j][l]);
        }
}

#define WINOGRAD_WEIGHTS(SUFFIX, TARGET)                                                       \
TARGET static void winograd_weights_##SUFFIX(int threads, const float *packed, int cin,       \
                                             int first, int count, int tile, float *u)        \
{                                                                                            \
    const int64_t jobs = (int64_t)count * cin;                                               \
    const size_t tap_stride = (size_t)cin * ENGINE_PANEL;                                    \
    const size_t xi_stride = (size_t)count * cin * ENGINE_PANEL;                             \
    _Pragma("omp parallel for num_threads(threads) schedule(static)")                        \
    for (int64_t job = 0; job < jobs; job++) {                                               \
        const int p = (int)(job / cin), c = (int)(job % cin);                                \
        const float *g = packed + (size_t)(first + p) * 9 * tap_stride +                     \
                         (size_t)c * ENGINE_PANEL;                                           \
        float *at = u + ((size_t)p * cin + c) * ENGINE_PANEL;                                \
        if (tile == 4)                                                                       \
            winograd_weights_job(g, tap_stride, WINOGRAD_G4, 6, at, xi_stride);              \
        else                                                                                 \
            winograd_weights_job(g, tap_stride, WINOGRAD_G2, 4, at, xi_stride);              \
    }                                                                                        \
}
WINOGRAD_WEIGHTS(avx512, __attribute__((target("avx512f"))))
WINOGRAD_WEIGHTS(avx2, __attribute__((target("avx2,fma"))))
WINOGRAD_WEIGHTS(portable, )

void engine_winograd_weights_c(int backend, int threads, const float *packed, int cin,
                               int first, int count, int tile, float *u)
{
    if (backend == ENGINE_AVX512)
        winograd_weights_avx512(threads, packed, cin, first, count, tile, u);
    else if (backend == ENGINE_AVX2)
        winograd_weights_avx2(threads, packed, cin, first, count, tile, u);
    else
        winograd_weights_portable(threads, packed, cin, first, count, tile, u);
}

/* ---- max pooling ------------------------------------------------------------------------
 * out[n, i, j, c] = max over the pool x pool window at (i * stride - pad_top, j * stride -
 * pad_left) of x, a read outside x being 0 (the zero padding of a ZeroPadding2D folded into
 * the pool). Exact: the order of the comparisons changes no bit. One output row per job. */
#define MAX_POOL_ROW(SUFFIX, TARGET)                                                           \
TARGET static void max_pool_row_##SUFFIX(const float *xn, int h, int w, int c, int pool,      \
                                         int stride, int pt, int pl, float *restrict yrow,    \
                                         int i, int wo)                                       \
{                                                                                            \
    for (int j = 0; j < wo; j++) {                                                           \
        float *restrict out = yrow + (int64_t)j * c;                                         \
        int first = 1;                                                                       \
        for (int a = 0; a < pool; a++) {                                                     \
            const int r = i * stride - pt + a;                                               \
            for (int b = 0; b < pool; b++) {                                                 \
                const int q = j * stride - pl + b;                                           \
                if (r < 0 || r >= h || q < 0 || q >= w) {                                    \
                    for (int ch = 0; ch < c; ch++)                                           \
                        out[ch] = first || out[ch] < 0.0f ? 0.0f : out[ch];                  \
                } else {                                                                     \
                    const float *restrict xp = xn + ((int64_t)r * w + q) * c;                \
                    if (first)                                                               \
                        memcpy(out, xp, (size_t)c * sizeof(float));                          \
                    else                                                                     \
                        for (int ch = 0; ch < c; ch++)                                       \
                            out[ch] = xp[ch] > out[ch] ? xp[ch] : out[ch];                   \
                }                                                                            \
                first = 0;                                                                   \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
}
MAX_POOL_ROW(avx512, __attribute__((target("avx512f"))))
MAX_POOL_ROW(avx2, __attribute__((target("avx2,fma"))))
MAX_POOL_ROW(portable, )

void engine_max_pool_c(int backend, int threads, const float *x, int n, int h, int w, int c,
                       int pool, int stride, int pad_top, int pad_left, float *y, int ho,
                       int wo)
{
    #pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t job = 0; job < (int64_t)n * ho; job++) {
        const int64_t img = job / ho;
        const int i = (int)(job % ho);
        const float *xn = x + img * h * w * (int64_t)c;
        float *yrow = y + (img * ho + i) * wo * (int64_t)c;
        if (backend == ENGINE_AVX512)
            max_pool_row_avx512(xn, h, w, c, pool, stride, pad_top, pad_left, yrow, i, wo);
        else if (backend == ENGINE_AVX2)
            max_pool_row_avx2(xn, h, w, c, pool, stride, pad_top, pad_left, yrow, i, wo);
        else
            max_pool_row_portable(xn, h, w, c, pool, stride, pad_top, pad_left, yrow, i, wo);
    }
}
