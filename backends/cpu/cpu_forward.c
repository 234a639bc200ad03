/*
 * Forward pass of the cpu backend: the Split-D algorithm (paper Algorithm 1)
 * in scalar C. One task owns one (batch, query head, query block); it keeps
 * the fp32 query block and the fp32 output accumulator over the whole head
 * dimension, and streams each key block through Dqk-chunks (QK^T) and
 * Dv-chunks (PV) with an online softmax in between.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_forward.h"
#include "cpu_workspace.h"
#include "cpu_tiles.h"
#include "kv_sched.h"

/* Per-thread scratch of the forward, carved from one workspace slot. */
typedef struct fwd_scratch {
    float *q;      /* br x dqk query block */
    float *kt;     /* dqk_chunk x bc: one chunk of the key block, transposed */
    float *s;      /* br x bc scores, then probabilities */
    float *z;      /* br x bc dropout multipliers */
    float *vc;     /* bc x dv_chunk: one chunk of the value block */
    float *o;      /* br x dv output accumulator */
    float *m, *l, *alpha; /* br: running max, running sum, rescale factor */
} fwd_scratch;

static size_t fwd_scratch_layout(const ffpa_problem *pb, const ffpa_plan *pl, char *base,
                                 fwd_scratch *fs)
{
    const size_t br = (size_t)pl->br, bc = (size_t)pl->bc;
    const size_t counts[9] = {br * (size_t)pb->dqk, (size_t)pl->dqk_chunk * bc, br * bc, br * bc,
                              bc * (size_t)pl->dv_chunk, br * (size_t)pb->dv, br, br, br};
    fwd_scratch unused;
    if (!fs)
        fs = &unused;
    float **ptrs[9] = {&fs->q, &fs->kt, &fs->s, &fs->z, &fs->vc, &fs->o, &fs->m, &fs->l,
                       &fs->alpha};
    size_t offset = 0;
    /* Always assigned (integer arithmetic, so a NULL base that only
     * measures is well defined); the pointers are used only with a real base. */
    for (int i = 0; i < 9; ++i) {
        *ptrs[i] = (float *)((uintptr_t)base + offset);
        offset += cpu_align64(counts[i] * sizeof(float));
    }
    return offset;
}

/* Online softmax over one score tile: updates the running max m and sum l
 * (before dropout), turns s into exp(s - m_new) and records alpha, the factor
 * that rescales what was accumulated so far. Rows whose max is still -inf
 * (everything masked so far) use 0 as the reference so no NaN appears. */
static void online_softmax(float *s, int64_t ld, int rows, int cols, float *m, float *l,
                           float *alpha)
{
    for (int r = 0; r < rows; ++r) {
        float *row = s + r * ld;
        float row_max = m[r];
        for (int c = 0; c < cols; ++c)
            row_max = row[c] > row_max ? row[c] : row_max;
        float ref = row_max == -INFINITY ? 0.0f : row_max;
        float sum = 0.0f;
        for (int c = 0; c < cols; ++c) {
            row[c] = expf(row[c] - ref);
            sum += row[c];
        }
        alpha[r] = expf(m[r] - ref);
        l[r] = l[r] * alpha[r] + sum;
        m[r] = row_max;
    }
}

/* Keys sequence b attends to: all of its rows, or for a KV-cache call its
 * cached tokens (plus the appended ones). */
static int64_t key_len(const ffpa_problem *pb, int64_t b)
{
    const ffpa_kv_problem *kv = pb->kv;
    if (!kv)
        return ffpa_seqlen_k(pb, b);
    return ffpa_kv_seq_len(kv->cache_seqlens, kv->uniform_len, b, kv->append ? pb->nq : 0, pb->nkv);
}

/* Element offset of key row j of (b, kv head hk) in a k-side view: packed
 * rows, or the row inside its page of a KV cache; -1 for a page outside the
 * pool (only tables the caller vouched for get here unchecked: such rows
 * read as zeros and are never written, as on the GPU backends). */
static int64_t key_row_offset(const ffpa_problem *pb, const ffpa_view *view, int64_t b, int64_t hk, int64_t j)
{
    const ffpa_kv_problem *kv = pb->kv;
    if (!kv)
        return ffpa_row_offset(view, pb->cu_k, b, hk) + j * view->sn;
    const int64_t page = kv->block_table ? kv->block_table[b * kv->bt_stride + j / kv->page_size] : b;
    if (page < 0 || page >= kv->num_pages)
        return -1;
    return page * view->sb + hk * view->sh + (j % kv->page_size) * view->sn;
}

/* Key rows j0 .. j0+cols-1, columns d0 .. d0+dc-1 of a k-side view as fp32
 * (transposed: element (r, c) at dst[c * ld + r]), one load per run of rows
 * that are contiguous in memory (one page, or the whole block). */
static void load_key_rows(float *dst, int64_t ld, int transposed, const ffpa_problem *pb,
                          const ffpa_view *view, int64_t b, int64_t hk, int64_t j0, int cols, int d0, int dc)
{
    const int64_t run_max = pb->kv ? pb->kv->page_size : cols;
    for (int r = 0; r < cols;) {
        const int64_t j = j0 + r;
        int run = (int)(run_max - (pb->kv ? j % run_max : 0));
        if (run > cols - r)
            run = cols - r;
        const int64_t row = key_row_offset(pb, view, b, hk, j), off = row + d0 * view->sd;
        if (row < 0) {
            for (int x = 0; x < run; ++x)
                for (int c = 0; c < dc; ++c)
                    dst[transposed ? (int64_t)c * ld + r + x : (int64_t)(r + x) * ld + c] = 0.0f;
        } else if (transposed)
            cpu_load_tile_t(dst + r, ld, view->data, pb->dtype, off, view->sn, view->sd, run, dc);
        else
            cpu_load_tile(dst + (int64_t)r * ld, ld, view->data, pb->dtype, off, view->sn, view->sd, run, dc);
        r += run;
    }
}

static void forward_block(const ffpa_problem *pb, const ffpa_plan *pl, const fwd_scratch *fs,
                          int64_t b, int64_t h, int64_t q_block)
{
    const int64_t seq_q = ffpa_seqlen_q(pb, b), seq_k = key_len(pb, b);
    const int64_t i0 = q_block * pl->br;
    if (i0 >= seq_q)
        return; /* varlen: this sequence is shorter */
    const int rows = (int)(seq_q - i0 < pl->br ? seq_q - i0 : pl->br);
    const int bc = pl->bc, dqk = (int)pb->dqk, dv = (int)pb->dv;
    const int64_t hk = h / ffpa_query_group(pb);
    const int dropout = pb->dropout_p > 0.0f;

    cpu_load_tile(fs->q, dqk, pb->q.data, pb->dtype,
                  ffpa_row_offset(&pb->q, pb->cu_q, b, h) + i0 * pb->q.sn, pb->q.sn, pb->q.sd,
                  rows, dqk);
    memset(fs->o, 0, (size_t)rows * (size_t)dv * sizeof(float));
    for (int r = 0; r < rows; ++r) {
        fs->m[r] = -INFINITY;
        fs->l[r] = 0.0f;
    }

    cpu_score_ctx sc;
    cpu_score_ctx_init(&sc, pb, b, h, seq_q, seq_k);
    /* Key blocks outside every row's causal diagonal and window are skipped. */
    int64_t key_begin;
    const int64_t key_end = cpu_key_range(&sc, i0, rows, seq_k, bc, &key_begin);
    for (int64_t j0 = key_begin; j0 < key_end; j0 += bc) {
        const int cols = (int)(key_end - j0 < bc ? key_end - j0 : bc);

        /* Phase 1: S = Q K^T accumulated over Dqk chunks. */
        for (int r = 0; r < rows; ++r)
            memset(fs->s + (size_t)r * bc, 0, (size_t)cols * sizeof(float));
        for (int d0 = 0; d0 < dqk; d0 += pl->dqk_chunk) {
            const int dc = dqk - d0 < pl->dqk_chunk ? dqk - d0 : pl->dqk_chunk;
            load_key_rows(fs->kt, bc, 1, pb, &pb->k, b, hk, j0, cols, d0, dc);
            cpu_gemm_acc(rows, cols, dc, fs->q + d0, dqk, fs->kt, bc, fs->s, bc);
        }
        cpu_score_epilogue(fs->s, bc, rows, cols, i0, j0, &sc, NULL);

        /* Phase 2: online softmax, then dropout on P (the sum l is taken
         * before dropout, so LSE is that of the undropped scores). */
        online_softmax(fs->s, bc, rows, cols, fs->m, fs->l, fs->alpha);
        if (dropout) {
            cpu_dropout_tile(fs->z, bc, rows, cols, pb, b, h, i0, j0);
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < cols; ++c)
                    fs->s[r * bc + c] *= fs->z[r * bc + c];
        }

        /* Phase 3: O = alpha O + P V accumulated over Dv chunks. */
        for (int r = 0; r < rows; ++r) {
            float *o_row = fs->o + (size_t)r * dv;
            const float a = fs->alpha[r];
            for (int d = 0; d < dv; ++d)
                o_row[d] *= a;
        }
        for (int d0 = 0; d0 < dv; d0 += pl->dv_chunk) {
            const int dc = dv - d0 < pl->dv_chunk ? dv - d0 : pl->dv_chunk;
            load_key_rows(fs->vc, pl->dv_chunk, 0, pb, &pb->v, b, hk, j0, cols, d0, dc);
            cpu_gemm_acc(rows, dc, cols, fs->s, bc, fs->vc, pl->dv_chunk, fs->o + d0, dv);
        }
    }

    /* Phase 4: normalise and write back. Rows that saw nothing (l = 0) give
     * O = 0 and LSE = -inf. */
    float *lse = (float *)pb->lse.data;
    const int64_t lse_base = lse ? ffpa_row_offset(&pb->lse, pb->cu_q, b, h) : 0;
    for (int r = 0; r < rows; ++r) {
        float *o_row = fs->o + (size_t)r * dv;
        const int seen = fs->l[r] > 0.0f;
        const float inv = seen ? 1.0f / fs->l[r] : 0.0f;
        for (int d = 0; d < dv; ++d)
            o_row[d] *= inv;
        if (!seen) /* also clears NaN from inf * 0 */
            memset(o_row, 0, (size_t)dv * sizeof(float));
        if (lse)
            lse[lse_base + (i0 + r) * pb->lse.sn] = seen ? fs->m[r] + logf(fs->l[r]) : -INFINITY;
    }
    cpu_store_tile(pb->o.data, pb->dtype, ffpa_row_offset(&pb->o, pb->cu_q, b, h) + i0 * pb->o.sn,
                   pb->o.sn, pb->o.sd, fs->o, dv, rows, dv);
}

size_t cpu_forward_workspace_size(const ffpa_problem *pb)
{
    ffpa_plan pl;
    if (cpu_plan(pb, 0, &pl, NULL, 0) != FFPA_OK)
        return 0;
    return cpu_workspace_bytes(0, fwd_scratch_layout(pb, &pl, NULL, NULL));
}

ffpa_status cpu_forward(const ffpa_problem *pb, void *workspace, size_t workspace_bytes,
                        char *err, size_t err_len)
{
    ffpa_plan pl;
    ffpa_status st = cpu_plan(pb, 0, &pl, err, err_len);
    if (st != FFPA_OK)
        return st;
    const size_t slot = fwd_scratch_layout(pb, &pl, NULL, NULL);
    cpu_workspace ws;
    st = cpu_workspace_carve(&ws, workspace, workspace_bytes, 0, slot, err, err_len);
    if (st != FFPA_OK)
        return st;

    /* Work item t: the query block index is the slowest, so with the
     * longest-first order the long causal blocks of every head start first. */
    const int64_t heads = pb->batch * pb->hq;
    const int64_t tasks = pl.q_blocks * heads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(ws.threads) schedule(dynamic, 1)
#endif
    for (int64_t t = 0; t < tasks; ++t) {
        fwd_scratch fs;
        fwd_scratch_layout(pb, &pl, cpu_workspace_slot(&ws, cpu_thread_index()), &fs);
        const int64_t bh = t % heads;
        forward_block(pb, &pl, &fs, bh / pb->hq, bh % pb->hq, ffpa_plan_q_block(&pl, t / heads));
    }
    return FFPA_OK;
}

/* Writes the call's new tokens into their pages (row by row, in the cache's
 * dtype; the values are copied bit for bit). */
static void append_rows(const ffpa_problem *pb, const ffpa_view *dst, const ffpa_view *src, int64_t d)
{
    const ffpa_kv_problem *kv = pb->kv;
    const size_t elt = ffpa_dtype_size(pb->dtype);
    for (int64_t b = 0; b < pb->batch; ++b)
        for (int64_t h = 0; h < pb->hkv; ++h)
            for (int64_t t = 0; t < pb->nq; ++t) {
                const int64_t pos = (int64_t)kv->cache_seqlens[b] + t;
                const int64_t to = pos >= 0 && pos < pb->nkv ? key_row_offset(pb, dst, b, h, pos) : -1;
                if (to < 0)
                    continue; /* outside the sequence's pages: never written */
                const int64_t from = b * src->sb + h * src->sh + t * src->sn;
                for (int64_t c = 0; c < d; ++c)
                    memcpy((char *)dst->data + (size_t)(to + c * dst->sd) * elt,
                           (const char *)src->data + (size_t)(from + c * src->sd) * elt, elt);
            }
}

ffpa_status cpu_forward_kvcache(const ffpa_problem *pb, void *workspace, size_t workspace_bytes,
                                char *err, size_t err_len)
{
    if (pb->kv->append) {
        append_rows(pb, &pb->k, &pb->kv->k_new, pb->dqk);
        if (!pb->kv->v_in_k)
            append_rows(pb, &pb->v, &pb->kv->v_new, pb->dv);
    }
    return cpu_forward(pb, workspace, workspace_bytes, err, err_len);
}
