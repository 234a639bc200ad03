/*
 * The normalised attention problem every backend receives.
 *
 * The front end (api/) validates the user's tensors and options once and
 * turns them into this plain C struct, so backends never re-check arguments
 * and never see the public descriptors. Usable from C and CUDA/HIP C++.
 */
#ifndef FFPA_COMMON_PROBLEM_H
#define FFPA_COMMON_PROBLEM_H

#include <stdint.h>

#include "ffpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A strided 4-D view [b, h, n, d] (element strides). For varlen problems sb
 * is 0 and row n of sequence b is row (cu[b] + n) of the packed tensor: use
 * ffpa_row_offset(). For LSE, sd is unused; for bias and dbias broadcast
 * dimensions have stride 0.
 */
typedef struct ffpa_view {
    void *data;
    int64_t sb, sh, sn, sd;
} ffpa_view;

/*
 * A paged KV cache call (ffpa_forward_kvcache). The problem's k and v views
 * are the page pools with sb = the stride between pages and sn the row
 * stride inside a page; nkv is a sequence's capacity (pages x page_size).
 */
typedef struct ffpa_kv_problem {
    const int32_t *block_table; /* backend memory [batch, bt_stride]; NULL: page b is sequence b */
    int64_t bt_stride;          /* elements between block_table rows */
    int64_t max_pages;          /* pages a sequence may use */
    int64_t num_pages;          /* pages in the pool */
    int64_t page_size;          /* tokens per page */
    const int32_t *cache_seqlens; /* backend memory [batch]; NULL: every sequence uniform_len */
    int64_t uniform_len;        /* with cache_seqlens NULL (dense forward decode), else -1 */
    int append;                 /* k_new (and v_new) go in at cache_seqlens[b] first */
    int v_in_k;                 /* v is a view of k's pages: appending k_new appends v */
    ffpa_view k_new, v_new;     /* [b, hkv, nq, d] (v_new unused with v_in_k) */
} ffpa_kv_problem;

typedef struct ffpa_problem {
    ffpa_dtype dtype;        /* of q, k, v, o (and dout, dq, dk, dv) */
    int64_t batch;           /* B, or varlen_batch */
    int64_t hq, hkv;         /* hq % hkv == 0 */
    int64_t nq, nkv;         /* dense: sequence lengths; varlen: longest sequences */
    int64_t dqk, dv;         /* head dims of q/k and of v/o */
    float scale;             /* resolved softmax scale */
    int causal;              /* bottom-right aligned */

    /* Dropout: keep iff philox word >= dropout_threshold; kept values are
     * multiplied by dropout_scale = 1/(1-p). p == 0 means no dropout. */
    float dropout_p;
    uint32_t dropout_threshold;
    float dropout_scale;
    uint64_t dropout_seed, dropout_offset;

    /* Varlen: arrays of batch+1 offsets, or NULL for dense batches; in host
     * memory, or in the backend's memory when cu_on_device (then no host
     * code may read them: GPU backends hand them to the kernels as they are,
     * the cpu backend's memory is host memory). */
    const int32_t *cu_q;
    const int32_t *cu_k;
    int cu_on_device;
    int64_t total_q, total_k; /* rows in the packed tensors (dense: batch*n) */

    ffpa_view q, k, v, o;
    ffpa_view lse;           /* float32; data may be NULL in forward */

    int has_bias;
    ffpa_dtype bias_dtype;
    ffpa_view bias;          /* [b, h, i, j]; sd is the key-column stride */

    /* Variants (ffpa_options; off at 0). Window: row i sees columns j with
     * i + shift - window_left <= j <= i + shift + window_right, shift =
     * seqlen_k - seqlen_q, a bound < 0 unbounded; causal applies on top
     * (ffpa_first/last_visible_col below). */
    int window;
    int64_t window_left, window_right;
    float softcap;           /* > 0: s -> softcap * tanh(s / softcap) */
    const float *alibi;      /* fp32 slopes, element (b, h) at b * alibi_sb + h * alibi_sh; NULL: none */
    int64_t alibi_sb, alibi_sh;

    /* Backward only. */
    ffpa_view dout;                 /* dO, shaped like o */
    ffpa_view grad_q, grad_k, grad_v; /* dQ, dK, dV outputs, shaped like q, k, v */
    int has_dbias;
    ffpa_dtype dbias_dtype;
    ffpa_view dbias;         /* same broadcast as bias; zero strides are summed */
    ffpa_grad_accum grad_accum;
    int deterministic;

    /* Tuned tile configurations for this device (common/tuning.h), loaded
     * by the core per context; NULL: the planner's heuristics alone. */
    const struct ffpa_tuning_table *tuning;

    /* Paged KV cache call, or NULL. */
    const ffpa_kv_problem *kv;
} ffpa_problem;

/* A merge of partial results by LSE (ffpa_merge_partials), validated:
 * parts >= 1 views [b, h, n, dv] of O (each its own dtype) and of the
 * float32 LSE (sd unused); o may be o_part[i] and lse lse_part[j] (in place),
 * lse.data NULL: not written. rows = b * h * n >= 1. */
typedef struct ffpa_merge_problem {
    int parts;
    int64_t b, h, n, dv;
    ffpa_view o_part[FFPA_MERGE_MAX_PARTS];
    ffpa_dtype o_part_dtype[FFPA_MERGE_MAX_PARTS];
    ffpa_view lse_part[FFPA_MERGE_MAX_PARTS];
    ffpa_view o;
    ffpa_dtype o_dtype;
    ffpa_view lse;
} ffpa_merge_problem;

/* The fp32 dbias accumulation grid every backend uses: a dense
 * [g[0], g[1], g[2], g[3]] array over (batch, query head, query row, key),
 * each dimension 1 where dbias broadcasts (stride 0), full otherwise. */
static inline void ffpa_dbias_grid(const ffpa_problem *p, int64_t g[4])
{
    g[0] = p->dbias.sb ? p->batch : 1;
    g[1] = p->dbias.sh ? p->hq : 1;
    g[2] = p->dbias.sn ? p->nq : 1;
    g[3] = p->dbias.sd ? p->nkv : 1;
}

/* A window bound (pb->window_left or _right) for 32-bit kernel arguments:
 * -1 when unbounded, also past INT32_MAX (no sequence is that long). */
static inline int ffpa_window_bound32(const ffpa_problem *p, int64_t bound)
{
    return p->window && bound >= 0 && bound <= INT32_MAX ? (int)bound : -1;
}

/* Logit softcap in the kernels' base-2 domain: s_log2 -> out * tanh(s_log2 * in)
 * with in = 1 / (log2(e) * softcap), out = log2(e) * softcap; both 0 without. */
static inline void ffpa_softcap_log2(const ffpa_problem *p, float *in, float *out)
{
    const double log2e = 1.4426950408889634;
    *in = p->softcap > 0.0f ? (float)(1.0 / (log2e * p->softcap)) : 0.0f;
    *out = p->softcap > 0.0f ? (float)(log2e * p->softcap) : 0.0f;
}

/* Whether the scores take a variant beyond the masks: bias, dropout,
 * softcap or ALiBi (the problem-level form of backends/gpu/fwd_params.h's
 * ffpa_gpu_fwd_no_variants; the kernels' plain twins run the others). */
static inline int ffpa_problem_has_variants(const ffpa_problem *p)
{
    return p->has_bias || p->dropout_p > 0.0f || p->softcap > 0.0f || p->alibi != NULL;
}

/* Query heads per KV head (GQA / MQA group; validation makes hq a multiple
 * of hkv); 1 where there is no KV head (zero-size problems). */
static inline int64_t ffpa_query_group(const ffpa_problem *p)
{
    return p->hkv > 0 ? p->hq / p->hkv : 1;
}

/* Query / key rows of sequence b (host offsets, or the cpu backend's own memory). */
static inline int64_t ffpa_seqlen_q(const ffpa_problem *p, int64_t b)
{
    return p->cu_q ? (int64_t)p->cu_q[b + 1] - p->cu_q[b] : p->nq;
}
static inline int64_t ffpa_seqlen_k(const ffpa_problem *p, int64_t b)
{
    return p->cu_k ? (int64_t)p->cu_k[b + 1] - p->cu_k[b] : p->nkv;
}

/* Element offset of (b, h, row 0) in a q-side (cu = cu_q) or k-side view. */
static inline int64_t ffpa_row_offset(const ffpa_view *v, const int32_t *cu, int64_t b, int64_t h)
{
    return h * v->sh + (cu ? (int64_t)cu[b] * v->sn : b * v->sb);
}

/* Last key column query row i may see under bottom-right causal masking
 * (may be negative: the row sees nothing). */
static inline int64_t ffpa_causal_last_col(int64_t i, int64_t seqlen_q, int64_t seqlen_k)
{
    return i + (seqlen_k - seqlen_q);
}

/* Key columns [first, last] query row i may see under causal masking and
 * the window (shift = seqlen_k - seqlen_q); unbounded sides give INT64_MIN /
 * INT64_MAX halves, so callers clip to [0, seqlen_k). Empty when last < first. */
static inline int64_t ffpa_first_visible_col(const ffpa_problem *p, int64_t i, int64_t shift)
{
    return p->window && p->window_left >= 0 ? i + shift - p->window_left : INT64_MIN / 2;
}
static inline int64_t ffpa_last_visible_col(const ffpa_problem *p, int64_t i, int64_t shift)
{
    int64_t last = INT64_MAX / 2;
    if (p->causal)
        last = i + shift;
    if (p->window && p->window_right >= 0 && i + shift + p->window_right < last)
        last = i + shift + p->window_right;
    return last;
}

#ifdef __cplusplus
}
#endif

#endif
