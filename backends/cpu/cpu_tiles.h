/*
 * Tile helpers of the cpu backend, shared by the forward and backward
 * passes: strided loads into contiguous fp32 tiles, the one small GEMM
 * kernel every product goes through, the score epilogue (scale, bias,
 * causal mask) and the dropout multiplier tile. Keeping each of these in
 * one place is what makes the backward recompute exactly the forward's
 * scores and masks.
 */
#ifndef FFPA_CPU_TILES_H
#define FFPA_CPU_TILES_H

#include <stddef.h>
#include <stdint.h>

#include "ffpa.h"
#include "problem.h"

/* Threads the backend may use for one call (1 without OpenMP). */
int cpu_max_threads(void);

/* Rounds a byte count up to a 64-byte multiple (scratch carving). */
static inline size_t cpu_align64(size_t bytes)
{
    return (bytes + 63u) & ~(size_t)63u;
}

/*
 * Loads rows x cols elements of a strided tensor as fp32: element (r, c) is
 * base[off + r * row_stride + c * col_stride] and lands in dst[r * ld + c].
 */
void cpu_load_tile(float *dst, int64_t ld, const void *base, ffpa_dtype dtype, int64_t off,
                   int64_t row_stride, int64_t col_stride, int rows, int cols);

/* Same source, transposed destination: element (r, c) lands in dst[c * ld + r]. */
void cpu_load_tile_t(float *dst, int64_t ld, const void *base, ffpa_dtype dtype, int64_t off,
                     int64_t row_stride, int64_t col_stride, int rows, int cols);

/* Stores src[r * ld + c] into base[off + r * row_stride + c * col_stride],
 * rounding to nearest even for 16-bit dtypes. */
void cpu_store_tile(void *base, ffpa_dtype dtype, int64_t off, int64_t row_stride,
                    int64_t col_stride, const float *src, int64_t ld, int rows, int cols);

/* dst[c * ld_dst + r] = src[r * ld_src + c] for a rows x cols tile. */
void cpu_transpose(float *dst, int64_t ld_dst, const float *src, int64_t ld_src, int rows,
                   int cols);

/*
 * C[m x n] += A[m x k] * B[k x n], all row-major fp32 with leading
 * dimensions lda, ldb, ldc. Each C element sums its k products in index
 * order, so results do not depend on blocking or thread count.
 */
void cpu_gemm_acc(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float *c, int64_t ldc);

/* Rounds every element of a rows x cols tile to dtype and back (emulates an
 * accumulation buffer held in the output dtype). No-op for FFPA_F32. */
void cpu_round_tile(float *tile, int64_t ld, int rows, int cols, ffpa_dtype dtype);

/* What the score epilogue needs to know about one (batch, query head). */
typedef struct cpu_score_ctx {
    const ffpa_problem *pb; /* causal and window bounds (ffpa_first/last_visible_col) */
    float scale;
    int64_t shift;          /* seqlen_k - seqlen_q: the diagonal of row i is column i + shift */
    int masked;             /* causal or a window */
    float softcap;          /* > 0: s -> softcap * tanh(s / softcap) */
    int alibi;              /* adds -alibi_slope * |i + shift - j| */
    float alibi_slope;
    const void *bias;       /* NULL: no bias */
    ffpa_dtype bias_dtype;
    int64_t bias_off;       /* element offset of (b, h) in the bias view */
    int64_t bias_sn, bias_sd;
} cpu_score_ctx;

void cpu_score_ctx_init(cpu_score_ctx *sc, const ffpa_problem *pb, int64_t b, int64_t h,
                        int64_t seqlen_q, int64_t seqlen_k);

/* Key columns [*begin, end) that rows [i0, i0 + rows) may see under causal
 * masking and the window, clipped to [0, seqlen_k) with *begin rounded down
 * to a multiple of align (key tiles stay aligned); returns end (<= *begin:
 * the rows see nothing). Tiles outside are skipped, never computed. */
int64_t cpu_key_range(const cpu_score_ctx *sc, int64_t i0, int rows, int64_t seqlen_k, int align,
                      int64_t *begin);

/* The same from the key side: query rows [*begin, end) that may see any of
 * columns [j0, j0 + cols), clipped to [0, seqlen_q), *begin rounded down to
 * a multiple of align. */
int64_t cpu_row_range(const cpu_score_ctx *sc, int64_t j0, int cols, int64_t seqlen_q, int align,
                      int64_t *begin);

/*
 * Turns raw dot products S[r * ld + c] of query rows i0.. and key columns
 * j0.. into scores: s = scale * S, softcapped, plus bias and ALiBi, and -inf
 * where causality or the window masks. With softcap, cap (when not NULL)
 * gets d(capped)/d(s) = 1 - tanh^2(s / softcap) per element (same ld), the
 * factor the backward applies to dS before dQ and dK.
 */
void cpu_score_epilogue(float *s, int64_t ld, int rows, int cols, int64_t i0, int64_t j0,
                        const cpu_score_ctx *sc, float *cap);

/* z[r * ld + c] = dropout_scale if element (b, h, i0 + r, j0 + c) is kept,
 * else 0 (ffpa_dropout_keep). */
void cpu_dropout_tile(float *z, int64_t ld, int rows, int cols, const ffpa_problem *pb, int64_t b,
                      int64_t h, int64_t i0, int64_t j0);

#endif
