/*
 * Forward of the OpenCL backend (OpenCL C 1.2 and later): the Split-D
 * algorithm in its portable form. A work-group owns BR query rows of one
 * (sequence, query head), or with packed heads (decode with GQA) BR rows of
 * the query heads sharing one KV head (kernels/cl_kv.h), and streams the key
 * tiles it can see (causal and window bounds skip the rest):
 *   S = Q K^T         over Dqk in DC-column chunks (Q and K chunks in local
 *                     memory), BC/TPR scores per work-item;
 *   score epilogue    scale, softcap, bias, ALiBi, masks (the order of
 *                     backends/cpu/cpu_tiles.c, docs/notes/variants.md);
 *   online softmax    the TPR work-items of a row each track its max and
 *                     sum (the same values, computed alike: no leader, no
 *                     divergent region between barriers); dropout
 *                     (common/philox.h, the very mask of every backend)
 *                     after the sum;
 *   O = alpha O + P V over Dv in DC-column chunks, O in registers: row r's
 *                     columns tc, tc + TPR, ... of work-item (r, tc).
 * A paged KV cache (ffpa_forward_kvcache, kv.paged) is the same kernel with
 * key rows found through the pages and each sequence's key count from the
 * cache lengths (kernels/cl_kv.h); ffpa_kv_append writes the new tokens first.
 * Build options: WG, BR, BC, DC (the tiles, below), DT (the dtype of q, k,
 * v, o: 0 f16, 1 bf16, 2 f32), DVB
 * (a multiple of DC >= Dv: O's register count), FFPA_CL_UNROLL (GPUs: the
 * Dv chunk loop unrolled, so O stays in registers; CPU compilers such as
 * pocl's take minutes over an unrolled loop of barriers, and keep O in
 * memory anyway, so there it stays a loop and DVB is 1024 for every Dv).
 */
#include "cl_kv.h"
#include "cl_score.h"
#include "philox.h"

/* Tiles: build options from common/plan.c's ffpa_plan_portable (the device's
 * local memory and work-group limits), these defaults otherwise. */
#ifndef WG
#define WG 128
#define BR 16
#define BC 32
#define DC 32
#endif
#define TPR (WG / BR)
#define OCOLS (DVB / TPR)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ffpa_fwd(const ffpa_cl_fwd_params p, __global const uchar *qb, __global const uchar *kb, __global const uchar *vb,
         __global uchar *ob, __global float *lseb, __global const uchar *biasb, __global const float *alibib,
         __global const int *cub, const ffpa_cl_kv_params kv, __global const int *btb, __global const int *lensb)
{
    __local float qs[BR][DC];
    __local float ks[BC][DC + 1];
    __local float vs[BC][DC];
    __local float ss[BR][BC + 1]; /* scores */
    __local float ps[BR][BC + 1]; /* P */
    /* P after dropout, in the K tile's memory (free once S is done) */
    __local float(*pd)[BC + 1] = (__local float(*)[BC + 1])ks;

    const int tid = (int)get_local_id(0);
    const int r = tid / TPR, tc = tid % TPR;
    const fwd_group w = fwd_group_of(p, kv, cub, lensb, BR);
    if (w.rows <= 0)
        return; /* the whole work-group: no barrier is left waiting */
    const int b = w.b, kvh = w.kvh, rows = w.rows;
    const seq_geom sg = w.sg;
    const int seqlen_k = sg.seqlen_k;
    /* This work-item's row: query row i of head h. */
    const int i = fwd_row_query(p, w.q0 + r), h = fwd_row_head(p, w, w.q0 + r);
    const float slope = alibi_slope(p, alibib, b, h);

    /* Key tiles the rows may see (the others are skipped). */
    int tile_begin;
    const int tile_end = fwd_key_tiles(p, w, BC, &tile_begin);

    float o[OCOLS];
    for (int x = 0; x < OCOLS; ++x)
        o[x] = 0.0f;
    float m = -INFINITY, l = 0.0f; /* row r's running max and sum */

    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const int kv0 = tile * BC;
        float sacc[BC / TPR];
        for (int k = 0; k < BC / TPR; ++k)
            sacc[k] = 0.0f;
        for (int d0 = 0; d0 < p.dqk; d0 += DC) {
            stage_q(&qs[0][0], DC, 0, BR, DC, qb, p, w, d0, DT, tid, WG);
            stage_keys(&ks[0][0], DC + 1, 0, BC, DC, kb, kv, btb, w.k_base, p.k_off, p.k_sb, p.k_sh, p.k_sn, p.k_sd, b,
                       kvh, kv0, seqlen_k, d0, p.dqk, DT, tid, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int cc = 0; cc < DC; ++cc) {
                const float qv = qs[r][cc];
                for (int k = 0; k < BC / TPR; ++k)
                    sacc[k] += qv * ks[tc + TPR * k][cc];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }

        /* Score epilogue (natural-log units). */
        for (int k = 0; k < BC / TPR; ++k) {
            const int c = tc + TPR * k;
            ss[r][c] = score(p, sacc[k], b, h, i, kv0 + c, sg, biasb, slope, 0);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Online softmax of row r (rows past the end stay at -inf: P = 0). */
        float mx = m;
        for (int c = 0; c < BC; ++c)
            mx = fmax(mx, ss[r][c]);
        const float ref = mx == -INFINITY ? 0.0f : mx;
        const float alpha = exp(m - ref);
        for (int k = 0; k < BC / TPR; ++k) {
            const int c = tc + TPR * k;
            const float pr = exp(ss[r][c] - ref);
            ps[r][c] = pr;
            if (p.has_dropout) /* the sum below takes P before dropout: LSE is that of the scores */
                pd[r][c] = ffpa_dropout_keep(p.dropout_seed, p.dropout_offset, p.dropout_threshold, p.hq, b, h, i,
                                             kv0 + c)
                               ? pr * p.dropout_scale
                               : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float sum = 0.0f;
        for (int c = 0; c < BC; ++c)
            sum += ps[r][c];
        l = l * alpha + sum;
        m = mx;
        __local float(*pv)[BC + 1] = p.has_dropout ? pd : ps;

        for (int x = 0; x < OCOLS; ++x)
            o[x] *= alpha;
        DV_LOOP
        for (int chunk = 0; chunk < DVB / DC; ++chunk) {
            const int d0 = chunk * DC;
            if (d0 >= p.dv)
                break; /* uniform: every work-item leaves at the same chunk */
            stage_keys(&vs[0][0], DC, 0, BC, DC, vb, kv, btb, w.v_base, p.v_off, p.v_sb, p.v_sh, p.v_sn, p.v_sd, b, kvh,
                       kv0, seqlen_k, d0, p.dv, DT, tid, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
            for (int x = 0; x < DC / TPR; ++x) {
                float acc = 0.0f;
                for (int jj = 0; jj < BC; ++jj)
                    acc += pv[r][jj] * vs[jj][tc + TPR * x];
                o[chunk * (DC / TPR) + x] += acc;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    /* Normalise and store; rows that saw no key give O = 0 and LSE = -inf. */
    if (r >= rows)
        return;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const long o_row = fwd_o_row(p, w, h, i);
    DV_LOOP
    for (int chunk = 0; chunk < DVB / DC && chunk * DC < p.dv; ++chunk)
#pragma unroll
        for (int x = 0; x < DC / TPR; ++x) {
            const int col = chunk * DC + tc + TPR * x;
            if (col < p.dv)
                store_elem(ob, o_row + (long)col * p.o_sd, l > 0.0f ? o[chunk * (DC / TPR) + x] * inv : 0.0f, p.o_dt);
        }
    if (p.has_lse && tc == 0) {
        lseb[fwd_lse_at(p, w, h, i)] = l > 0.0f ? m + log(l) : -INFINITY;
    }
}
