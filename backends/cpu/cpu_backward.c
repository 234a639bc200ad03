/*
 * Backward pass of the cpu backend (paper Algorithm 2, split launch):
 *   1. Delta = rowsum(dO * O) in fp32 from the stored O;
 *   2. dK/dV pass: one task owns a key block of one kv head and sweeps the
 *      query blocks of every query head that reads it (GQA), so dK/dV are
 *      written by exactly one task, in a fixed order;
 *   3. dQ pass: one task owns a query block and sweeps the key blocks; dbias
 *      is accumulated here (see dq_pass for how it stays race-free).
 * P and dS are recomputed from the saved LSE with the forward's very score
 * epilogue and dropout tiles, so masks and dropout match bit for bit. Every
 * sum runs in a fixed order: results do not depend on the thread count.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_backward.h"
#include "cpu_workspace.h"
#include "cpu_tiles.h"

/* Per-thread scratch of both passes, carved from one workspace slot. */
typedef struct bwd_scratch {
    float *kt;    /* dqk x bc key block, transposed (for S = Q K^T) */
    float *vt;    /* dv x bc value block, transposed (for dP = dO V^T) */
    float *kf;    /* bc x dqk key block (dQ pass: dQ += dS K) */
    float *dk;    /* bc x dqk dK accumulator (dK/dV pass) */
    float *dv;    /* bc x dv dV accumulator (dK/dV pass) */
    float *q;     /* br x dqk query block */
    float *dout;  /* br x dv output-gradient block */
    float *dq;    /* br x dqk dQ accumulator (dQ pass) */
    float *s;     /* br x bc: scores, then P (dropped) */
    float *ds;    /* br x bc: dP, then dS */
    float *z;     /* br x bc dropout multipliers */
    float *t;     /* bc x br: transposed P or dS */
    float *cap;   /* br x bc: softcap's d(capped score)/d(score) */
    float *lse, *delta; /* br */
} bwd_scratch;

#define BWD_FIELDS 15

static size_t bwd_scratch_layout(const ffpa_problem *pb, const ffpa_plan *pl, char *base,
                                 bwd_scratch *bs)
{
    const size_t br = (size_t)pl->br, bc = (size_t)pl->bc;
    const size_t dqk = (size_t)pb->dqk, dv = (size_t)pb->dv;
    const size_t counts[BWD_FIELDS] = {dqk * bc, dv * bc, bc * dqk, bc * dqk, bc * dv,
                                       br * dqk, br * dv, br * dqk, br * bc, br * bc,
                                       br * bc, bc * br, pb->softcap > 0.0f ? br * bc : 0, br, br};
    bwd_scratch unused;
    if (!bs)
        bs = &unused;
    float **ptrs[BWD_FIELDS] = {&bs->kt, &bs->vt, &bs->kf, &bs->dk, &bs->dv, &bs->q, &bs->dout,
                                &bs->dq, &bs->s, &bs->ds, &bs->z, &bs->t, &bs->cap, &bs->lse, &bs->delta};
    size_t offset = 0;
    /* Always assigned (integer arithmetic, so a NULL base that only
     * measures is well defined); the pointers are used only with a real base. */
    for (int i = 0; i < BWD_FIELDS; ++i) {
        *ptrs[i] = (float *)((uintptr_t)base + offset);
        offset += cpu_align64(counts[i] * sizeof(float));
    }
    return offset;
}

/* Global row of (sequence b, row i) in the packed q-side layout: Delta index. */
static int64_t q_row_index(const ffpa_problem *pb, int64_t b, int64_t i)
{
    return pb->cu_q ? (int64_t)pb->cu_q[b] + i : b * pb->nq + i;
}

static int64_t q_rows_total(const ffpa_problem *pb)
{
    return pb->cu_q ? (int64_t)pb->cu_q[pb->batch] : pb->batch * pb->nq;
}

/* Layout of the fp32 dbias scratch: a dense [Gb, Gh, Gn, Gk] array whose
 * dimensions are 1 where dbias broadcasts (stride 0), full otherwise. */
typedef struct dbias_grid {
    int64_t nb, nh, nn, nk;
} dbias_grid;

static dbias_grid dbias_grid_of(const ffpa_problem *pb)
{
    dbias_grid g = {1, 1, 1, 1};
    if (pb->has_dbias) {
        int64_t n[4];
        ffpa_dbias_grid(pb, n);
        g.nb = n[0], g.nh = n[1], g.nn = n[2], g.nk = n[3];
    }
    return g;
}

static size_t dbias_scratch_count(const ffpa_problem *pb)
{
    if (!pb->has_dbias)
        return 0;
    dbias_grid g = dbias_grid_of(pb);
    int64_t n; /* bounded by the validated dbias's element count; saturate all the same */
    if (__builtin_mul_overflow(g.nb, g.nh, &n) || __builtin_mul_overflow(n, g.nn, &n) ||
        __builtin_mul_overflow(n, g.nk, &n))
        return SIZE_MAX / 8;
    return (size_t)n;
}

/* Loads the query-side tiles of (b, h, rows i0..): Q, dO, LSE, Delta. */
static void load_query_side(const ffpa_problem *pb, const bwd_scratch *bs, const float *delta_all,
                            int64_t b, int64_t h, int64_t i0, int rows)
{
    const int dqk = (int)pb->dqk, dv = (int)pb->dv;
    cpu_load_tile(bs->q, dqk, pb->q.data, pb->dtype,
                  ffpa_row_offset(&pb->q, pb->cu_q, b, h) + i0 * pb->q.sn, pb->q.sn, pb->q.sd,
                  rows, dqk);
    cpu_load_tile(bs->dout, dv, pb->dout.data, pb->dtype,
                  ffpa_row_offset(&pb->dout, pb->cu_q, b, h) + i0 * pb->dout.sn, pb->dout.sn,
                  pb->dout.sd, rows, dv);
    const float *lse = (const float *)pb->lse.data;
    const int64_t lse_base = ffpa_row_offset(&pb->lse, pb->cu_q, b, h);
    const int64_t delta_base = h * q_rows_total(pb) + q_row_index(pb, b, i0);
    for (int r = 0; r < rows; ++r) {
        bs->lse[r] = lse[lse_base + (i0 + r) * pb->lse.sn];
        bs->delta[r] = delta_all[delta_base + r];
    }
}

/*
 * Recomputes one (query block, key block) tile from bs->q, bs->dout, bs->kt,
 * bs->vt, bs->lse and bs->delta. On return bs->s holds the dropped
 * probabilities P * Z and bs->ds holds dS = P * (dP * Z - Delta), unscaled
 * (the gradient of the score bias adds to: dbias); with softcap, bs->cap
 * the factor score_grad applies for dQ and dK. Rows with LSE = -inf (saw
 * no key) get P = 0, hence dS = 0.
 */
static void recompute_tile(const ffpa_problem *pb, const ffpa_plan *pl, const bwd_scratch *bs,
                           const cpu_score_ctx *sc, int64_t b, int64_t h, int64_t i0, int64_t j0,
                           int rows, int cols)
{
    const int bc = pl->bc, dqk = (int)pb->dqk, dv = (int)pb->dv;
    const int dropout = pb->dropout_p > 0.0f;

    for (int r = 0; r < rows; ++r) {
        memset(bs->s + (size_t)r * bc, 0, (size_t)cols * sizeof(float));
        memset(bs->ds + (size_t)r * bc, 0, (size_t)cols * sizeof(float));
    }
    for (int d0 = 0; d0 < dqk; d0 += pl->dqk_chunk) {
        const int dc = dqk - d0 < pl->dqk_chunk ? dqk - d0 : pl->dqk_chunk;
        cpu_gemm_acc(rows, cols, dc, bs->q + d0, dqk, bs->kt + (size_t)d0 * bc, bc, bs->s, bc);
    }
    cpu_score_epilogue(bs->s, bc, rows, cols, i0, j0, sc, bs->cap);
    for (int r = 0; r < rows; ++r) {
        float *row = bs->s + (size_t)r * bc;
        const float lse = bs->lse[r];
        if (lse == -INFINITY) {
            memset(row, 0, (size_t)cols * sizeof(float));
            continue;
        }
        for (int c = 0; c < cols; ++c)
            row[c] = expf(row[c] - lse);
    }

    /* dP = dO V^T accumulated over Dv chunks. */
    for (int d0 = 0; d0 < dv; d0 += pl->dv_chunk) {
        const int dc = dv - d0 < pl->dv_chunk ? dv - d0 : pl->dv_chunk;
        cpu_gemm_acc(rows, cols, dc, bs->dout + d0, dv, bs->vt + (size_t)d0 * bc, bc, bs->ds, bc);
    }
    if (dropout)
        cpu_dropout_tile(bs->z, bc, rows, cols, pb, b, h, i0, j0);
    for (int r = 0; r < rows; ++r) {
        float *p = bs->s + (size_t)r * bc;
        float *ds = bs->ds + (size_t)r * bc;
        const float delta = bs->delta[r];
        if (dropout) {
            const float *z = bs->z + (size_t)r * bc;
            for (int c = 0; c < cols; ++c) {
                ds[c] = p[c] * (ds[c] * z[c] - delta);
                p[c] *= z[c];
            }
        } else {
            for (int c = 0; c < cols; ++c)
                ds[c] = p[c] * (ds[c] - delta);
        }
    }
}

/* dS of the score -> scale * d(raw dot product): times scale and, with
 * softcap, its derivative; element (r, c) of src (ld bc) lands in dst at
 * r * dst_rs + c * dst_cs (dst may be src, or a transposed tile). */
static void score_grad(const ffpa_problem *pb, const bwd_scratch *bs, int bc, float *dst, int64_t dst_rs,
                       int64_t dst_cs, int rows, int cols)
{
    const int capped = pb->softcap > 0.0f;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const float g = bs->ds[(size_t)r * bc + c] * pb->scale;
            dst[r * dst_rs + c * dst_cs] = capped ? g * bs->cap[(size_t)r * bc + c] : g;
        }
}

/* ---------------------------------------------------------------- Delta */

static void delta_pass(const ffpa_problem *pb, float *delta_all, const cpu_workspace *ws)
{
    const int64_t heads = pb->batch * pb->hq;
    const int64_t rows_total = q_rows_total(pb);
    const int dv = (int)pb->dv;
#ifdef _OPENMP
#pragma omp parallel for num_threads(ws->threads) schedule(dynamic, 1)
#endif
    for (int64_t t = 0; t < heads; ++t) {
        const int64_t b = t / pb->hq, h = t % pb->hq;
        float *o_row = (float *)cpu_workspace_slot(ws, cpu_thread_index());
        float *do_row = o_row + dv;
        const int64_t seq_q = ffpa_seqlen_q(pb, b);
        const int64_t o_base = ffpa_row_offset(&pb->o, pb->cu_q, b, h);
        const int64_t do_base = ffpa_row_offset(&pb->dout, pb->cu_q, b, h);
        for (int64_t i = 0; i < seq_q; ++i) {
            cpu_load_tile(o_row, dv, pb->o.data, pb->dtype, o_base + i * pb->o.sn, 0, pb->o.sd, 1,
                          dv);
            cpu_load_tile(do_row, dv, pb->dout.data, pb->dtype, do_base + i * pb->dout.sn, 0,
                          pb->dout.sd, 1, dv);
            float sum = 0.0f;
            for (int d = 0; d < dv; ++d)
                sum += o_row[d] * do_row[d];
            delta_all[h * rows_total + q_row_index(pb, b, i)] = sum;
        }
    }
}

/* ---------------------------------------------------------------- dK / dV */

static void dkdv_block(const ffpa_problem *pb, const ffpa_plan *pl, const bwd_scratch *bs,
                       const float *delta_all, int64_t b, int64_t hk, int64_t k_block)
{
    const int64_t seq_q = ffpa_seqlen_q(pb, b), seq_k = ffpa_seqlen_k(pb, b);
    const int64_t j0 = k_block * pl->bc;
    if (j0 >= seq_k)
        return; /* varlen: this sequence is shorter */
    const int cols = (int)(seq_k - j0 < pl->bc ? seq_k - j0 : pl->bc);
    const int br = pl->br, bc = pl->bc, dqk = (int)pb->dqk, dv = (int)pb->dv;
    const int64_t group = ffpa_query_group(pb);
    const int round_each = pb->grad_accum == FFPA_GRAD_ACCUM_OUTPUT;

    const int64_t k_off = ffpa_row_offset(&pb->k, pb->cu_k, b, hk) + j0 * pb->k.sn;
    const int64_t v_off = ffpa_row_offset(&pb->v, pb->cu_k, b, hk) + j0 * pb->v.sn;
    cpu_load_tile_t(bs->kt, bc, pb->k.data, pb->dtype, k_off, pb->k.sn, pb->k.sd, cols, dqk);
    cpu_load_tile_t(bs->vt, bc, pb->v.data, pb->dtype, v_off, pb->v.sn, pb->v.sd, cols, dv);
    memset(bs->dk, 0, (size_t)cols * (size_t)dqk * sizeof(float));
    memset(bs->dv, 0, (size_t)cols * (size_t)dv * sizeof(float));

    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        cpu_score_ctx sc;
        cpu_score_ctx_init(&sc, pb, b, h, seq_q, seq_k);
        /* Query blocks outside this key block's causal diagonal and window never see it. */
        int64_t row_begin;
        const int64_t row_end = cpu_row_range(&sc, j0, cols, seq_q, br, &row_begin);
        for (int64_t i0 = row_begin; i0 < row_end; i0 += br) {
            const int rows = (int)(row_end - i0 < br ? row_end - i0 : br);
            load_query_side(pb, bs, delta_all, b, h, i0, rows);
            recompute_tile(pb, pl, bs, &sc, b, h, i0, j0, rows, cols);

            /* dV += (P Z)^T dO and dK += scale * dS^T Q, chunk by chunk. */
            cpu_transpose(bs->t, br, bs->s, bc, rows, cols);
            for (int d0 = 0; d0 < dv; d0 += pl->dv_chunk) {
                const int dc = dv - d0 < pl->dv_chunk ? dv - d0 : pl->dv_chunk;
                cpu_gemm_acc(cols, dc, rows, bs->t, br, bs->dout + d0, dv, bs->dv + d0, dv);
            }
            score_grad(pb, bs, bc, bs->t, 1, br, rows, cols);
            for (int d0 = 0; d0 < dqk; d0 += pl->dqk_chunk) {
                const int dc = dqk - d0 < pl->dqk_chunk ? dqk - d0 : pl->dqk_chunk;
                cpu_gemm_acc(cols, dc, rows, bs->t, br, bs->q + d0, dqk, bs->dk + d0, dqk);
            }
            if (round_each) {
                cpu_round_tile(bs->dk, dqk, cols, dqk, pb->dtype);
                cpu_round_tile(bs->dv, dv, cols, dv, pb->dtype);
            }
        }
    }
    const ffpa_view *gk = &pb->grad_k, *gv = &pb->grad_v;
    cpu_store_tile(gk->data, pb->dtype, ffpa_row_offset(gk, pb->cu_k, b, hk) + j0 * gk->sn, gk->sn,
                   gk->sd, bs->dk, dqk, cols, dqk);
    cpu_store_tile(gv->data, pb->dtype, ffpa_row_offset(gv, pb->cu_k, b, hk) + j0 * gv->sn, gv->sn,
                   gv->sd, bs->dv, dv, cols, dv);
}

/* ---------------------------------------------------------------- dQ (+ dbias) */

/* Adds an unscaled dS tile of (b, h, i0.., j0..) into the fp32 dbias scratch,
 * summing over the dimensions where dbias broadcasts. */
static void dbias_accumulate(const ffpa_problem *pb, const dbias_grid *g, float *acc,
                             const float *ds, int64_t ld, int64_t b, int64_t h, int64_t i0,
                             int64_t j0, int rows, int cols)
{
    const int64_t gb = g->nb > 1 ? b : 0, gh = g->nh > 1 ? h : 0;
    for (int r = 0; r < rows; ++r) {
        const int64_t gn = pb->dbias.sn ? i0 + r : 0;
        float *dst = acc + ((gb * g->nh + gh) * g->nn + gn) * g->nk;
        const float *src = ds + r * ld;
        if (pb->dbias.sd) {
            for (int c = 0; c < cols; ++c)
                dst[j0 + c] += src[c];
        } else {
            float sum = dst[0];
            for (int c = 0; c < cols; ++c)
                sum += src[c];
            dst[0] = sum;
        }
    }
}

static void dq_block(const ffpa_problem *pb, const ffpa_plan *pl, const bwd_scratch *bs,
                     const float *delta_all, float *dbias_acc, int64_t b, int64_t h,
                     int64_t q_block)
{
    const int64_t seq_q = ffpa_seqlen_q(pb, b), seq_k = ffpa_seqlen_k(pb, b);
    const int64_t i0 = q_block * pl->br;
    if (i0 >= seq_q)
        return;
    const int rows = (int)(seq_q - i0 < pl->br ? seq_q - i0 : pl->br);
    const int bc = pl->bc, dqk = (int)pb->dqk, dv = (int)pb->dv;
    const int64_t hk = h / ffpa_query_group(pb);
    const int64_t k_base = ffpa_row_offset(&pb->k, pb->cu_k, b, hk);
    const int64_t v_base = ffpa_row_offset(&pb->v, pb->cu_k, b, hk);
    const int round_each = pb->grad_accum == FFPA_GRAD_ACCUM_OUTPUT;
    const dbias_grid grid = dbias_grid_of(pb);

    load_query_side(pb, bs, delta_all, b, h, i0, rows);
    memset(bs->dq, 0, (size_t)rows * (size_t)dqk * sizeof(float));

    cpu_score_ctx sc;
    cpu_score_ctx_init(&sc, pb, b, h, seq_q, seq_k);
    int64_t key_begin;
    const int64_t key_end = cpu_key_range(&sc, i0, rows, seq_k, bc, &key_begin);
    for (int64_t j0 = key_begin; j0 < key_end; j0 += bc) {
        const int cols = (int)(key_end - j0 < bc ? key_end - j0 : bc);
        cpu_load_tile(bs->kf, dqk, pb->k.data, pb->dtype, k_base + j0 * pb->k.sn, pb->k.sn,
                      pb->k.sd, cols, dqk);
        cpu_transpose(bs->kt, bc, bs->kf, dqk, cols, dqk);
        cpu_load_tile_t(bs->vt, bc, pb->v.data, pb->dtype, v_base + j0 * pb->v.sn, pb->v.sn,
                        pb->v.sd, cols, dv);
        recompute_tile(pb, pl, bs, &sc, b, h, i0, j0, rows, cols);
        if (dbias_acc)
            dbias_accumulate(pb, &grid, dbias_acc, bs->ds, bc, b, h, i0, j0, rows, cols);

        /* dQ += scale * dS K, chunk by chunk. */
        score_grad(pb, bs, bc, bs->ds, bc, 1, rows, cols);
        for (int d0 = 0; d0 < dqk; d0 += pl->dqk_chunk) {
            const int dc = dqk - d0 < pl->dqk_chunk ? dqk - d0 : pl->dqk_chunk;
            cpu_gemm_acc(rows, dc, cols, bs->ds, bc, bs->kf + d0, dqk, bs->dq + d0, dqk);
        }
        if (round_each)
            cpu_round_tile(bs->dq, dqk, rows, dqk, pb->dtype);
    }
    const ffpa_view *gq = &pb->grad_q;
    cpu_store_tile(gq->data, pb->dtype, ffpa_row_offset(gq, pb->cu_q, b, h) + i0 * gq->sn, gq->sn,
                   gq->sd, bs->dq, dqk, rows, dqk);
}

/*
 * The dQ pass runs over (batch, head, query block) tasks. With dbias, tasks
 * whose dS land on the same dbias elements (those differing only along a
 * broadcast dimension of dbias) form one group, run by one thread in a fixed
 * order; groups touch disjoint elements. Without dbias every task is its
 * own group.
 */
static void dq_pass(const ffpa_problem *pb, const ffpa_plan *pl, const cpu_workspace *ws,
                    const float *delta_all, float *dbias_acc)
{
    /* Dimensions h (fastest), b, query block (slowest: longest first). */
    const int64_t dims[3] = {pb->hq, pb->batch, pl->q_blocks};
    const int split[3] = {!dbias_acc || pb->dbias.sh != 0, !dbias_acc || pb->dbias.sb != 0,
                          !dbias_acc || pb->dbias.sn != 0};
    int64_t groups = 1, members = 1;
    for (int x = 0; x < 3; ++x) {
        groups *= split[x] ? dims[x] : 1;
        members *= split[x] ? 1 : dims[x];
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(ws->threads) schedule(dynamic, 1)
#endif
    for (int64_t g = 0; g < groups; ++g) {
        bwd_scratch bs;
        bwd_scratch_layout(pb, pl, cpu_workspace_slot(ws, cpu_thread_index()), &bs);
        for (int64_t m = 0; m < members; ++m) {
            int64_t idx[3], gg = g, mm = m;
            for (int x = 0; x < 3; ++x) {
                int64_t *rest = split[x] ? &gg : &mm;
                idx[x] = *rest % dims[x];
                *rest /= dims[x];
            }
            dq_block(pb, pl, &bs, delta_all, dbias_acc, idx[1], idx[0],
                     ffpa_plan_q_block(pl, idx[2]));
        }
    }
}

/* Writes the fp32 dbias scratch into the dbias view (f32 or the bias dtype). */
static void dbias_store(const ffpa_problem *pb, const cpu_workspace *ws, const float *acc)
{
    (void)ws; /* only the thread count, with OpenMP */
    const dbias_grid g = dbias_grid_of(pb);
    const int64_t lines = g.nb * g.nh * g.nn;
#ifdef _OPENMP
#pragma omp parallel for num_threads(ws->threads) schedule(static)
#endif
    for (int64_t line = 0; line < lines; ++line) {
        const int64_t n = line % g.nn, h = (line / g.nn) % g.nh, b = line / (g.nn * g.nh);
        const int64_t off = b * pb->dbias.sb + h * pb->dbias.sh + n * pb->dbias.sn;
        cpu_store_tile(pb->dbias.data, pb->dbias_dtype, off, 0, pb->dbias.sd, acc + line * g.nk,
                       g.nk, 1, (int)g.nk);
    }
}

/* ---------------------------------------------------------------- entry */

static size_t bwd_shared_bytes(const ffpa_problem *pb)
{
    return cpu_align64((size_t)(pb->hq * q_rows_total(pb)) * sizeof(float)) +
           cpu_align64(dbias_scratch_count(pb) * sizeof(float));
}

static size_t bwd_slot_bytes(const ffpa_problem *pb, const ffpa_plan *pl)
{
    return bwd_scratch_layout(pb, pl, NULL, NULL);
}

size_t cpu_backward_workspace_size(const ffpa_problem *pb)
{
    ffpa_plan pl;
    if (cpu_plan(pb, 1, &pl, NULL, 0) != FFPA_OK)
        return 0;
    return cpu_workspace_bytes(bwd_shared_bytes(pb), bwd_slot_bytes(pb, &pl));
}

ffpa_status cpu_backward(const ffpa_problem *pb, void *workspace, size_t workspace_bytes,
                         char *err, size_t err_len)
{
    ffpa_plan pl;
    ffpa_status st = cpu_plan(pb, 1, &pl, err, err_len);
    if (st != FFPA_OK)
        return st;
    cpu_workspace ws;
    st = cpu_workspace_carve(&ws, workspace, workspace_bytes, bwd_shared_bytes(pb),
                             bwd_slot_bytes(pb, &pl), err, err_len);
    if (st != FFPA_OK)
        return st;
    float *delta_all = (float *)ws.shared;
    float *dbias_acc = NULL;
    if (pb->has_dbias) {
        dbias_acc = (float *)(ws.shared +
                              cpu_align64((size_t)(pb->hq * q_rows_total(pb)) * sizeof(float)));
        memset(dbias_acc, 0, dbias_scratch_count(pb) * sizeof(float));
    }

    delta_pass(pb, delta_all, &ws);

    const int64_t k_blocks = (pb->nkv + pl.bc - 1) / pl.bc;
    const int64_t kv_heads = pb->batch * pb->hkv;
    const int64_t tasks = k_blocks * kv_heads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(ws.threads) schedule(dynamic, 1)
#endif
    for (int64_t t = 0; t < tasks; ++t) {
        bwd_scratch bs;
        bwd_scratch_layout(pb, &pl, cpu_workspace_slot(&ws, cpu_thread_index()), &bs);
        const int64_t bh = t % kv_heads;
        dkdv_block(pb, &pl, &bs, delta_all, bh / pb->hkv, bh % pb->hkv, t / kv_heads);
    }

    dq_pass(pb, &pl, &ws, delta_all, dbias_acc);
    if (dbias_acc)
        dbias_store(pb, &ws, dbias_acc);
    return FFPA_OK;
}
