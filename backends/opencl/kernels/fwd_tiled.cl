/*
 * Forward of the OpenCL backend, register-tiled (GPUs): kernels/fwd.cl's
 * Split-D algorithm and epilogue with each work-item holding a block of the
 * scores and of O in registers, so that each value read from local memory
 * feeds several FMAs (fwd.cl reads one or two per FMA and runs at the
 * local-memory rate; docs/notes/opencl.md).
 *
 * A work-group of 128 work-items = RG (8) row groups x CG (16) column
 * groups owns BR = 8 TR query rows of one (sequence, query head), or of the
 * query heads sharing one KV head (packed heads, kernels/cl_kv.h); work-item
 * (rg, cg) holds rows rg TR.. and, of each key tile of BC = 64, keys
 * 4 cg..4 cg + 3:
 *   S = Q K^T       over Dqk in DC = 32-column chunks, Q and K row-major in
 *                   local memory (K's 4-column groups swizzled, local_at), a
 *                   work-item's row or key read 4 columns at a time (vload4):
 *                   TR + 4 reads per 16 TR FMAs;
 *   score epilogue  cl_score.h's score(), the masks and variants as fwd.cl;
 *   online softmax  each row's max over the 16 column groups through local
 *                   memory (each group's partial max), the same value in
 *                   every work-item of the row; each work-item keeps its own
 *                   partial row sum, added up once at the end; dropout after
 *                   the sum (common/philox.h), as every backend;
 *   O = alpha O + P V  P^T in local memory (a work-item's TR rows of a key:
 *                   one read), V in 64-column chunks (its 4 columns: one
 *                   vload4): 2 reads per 4 TR FMAs; O's registers: TR rows x
 *                   4 columns of each 64-column chunk up to DVB.
 * Build options: TR (2 or 4), DT (dtype), DVB (a multiple of 64 >= Dv),
 * FFPA_CL_UNROLL (the Dv chunk loop unrolled so O stays in registers; GPUs).
 * The paged KV cache (kv.paged) as in fwd.cl.
 */
#include "cl_kv.h"
#include "cl_score.h"
#include "philox.h"

#ifndef TR
#define TR 4
#endif
#define WG 128
#define CG 16
#define RG (WG / CG)
#define BR (RG * TR)
#define BC (4 * CG)
#define DC 32
#define DCV (4 * CG)
#define OCH (DVB / DCV)

#if TR == 4
#define LOAD_ROWS(at) vload4(0, at)
typedef float4 rowvec;
#else
#define LOAD_ROWS(at) vload2(0, at)
typedef float2 rowvec;
#endif

static float rv(rowvec v, int t)
{
#if TR == 4
    return t == 0 ? v.s0 : t == 1 ? v.s1 : t == 2 ? v.s2 : v.s3;
#else
    return t == 0 ? v.s0 : v.s1;
#endif
}

static float f4(float4 v, int u)
{
    return u == 0 ? v.s0 : u == 1 ? v.s1 : u == 2 ? v.s2 : v.s3;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ffpa_fwd_tiled(const ffpa_cl_fwd_params p, __global const uchar *qb, __global const uchar *kb,
               __global const uchar *vb, __global uchar *ob, __global float *lseb, __global const uchar *biasb,
               __global const float *alibib, __global const int *cub, const ffpa_cl_kv_params kv,
               __global const int *btb, __global const int *lensb)
{
    __local float qs[BR * DC];   /* Q chunk, row-major */
    __local float ks[BC * DC];   /* K chunk, row-major, swizzled */
    __local float pt[BC * BR];   /* P^T of the tile */
    __local float vs[BC * DCV];  /* V chunk, row-major */
    __local float red[BR * CG];  /* per column group: a row's partial max, at the end its partial sum */

    const int tid = (int)get_local_id(0);
    const int cg = tid % CG, rg = tid / CG;
    const int r0 = rg * TR, c0 = cg * 4; /* this work-item's rows and keys (or O columns) */
    const fwd_group w = fwd_group_of(p, kv, cub, lensb, BR);
    if (w.rows <= 0)
        return; /* the whole work-group: no barrier is left waiting */

    int tile_begin;
    const int tile_end = fwd_key_tiles(p, w, BC, &tile_begin);

    float o[TR][OCH * 4];
    float m[TR], l[TR]; /* each row's running max (shared), this work-item's partial sum */
    int qi[TR], qh[TR]; /* each row's query row and head */
    float slope[TR];
    for (int t = 0; t < TR; ++t) {
        qi[t] = fwd_row_query(p, w.q0 + r0 + t);
        qh[t] = fwd_row_head(p, w, w.q0 + r0 + t);
        slope[t] = alibi_slope(p, alibib, w.b, qh[t]);
        m[t] = -INFINITY;
        l[t] = 0.0f;
        for (int x = 0; x < OCH * 4; ++x)
            o[t][x] = 0.0f;
    }

    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const int kv0 = tile * BC;
        float s[TR][4];
        for (int t = 0; t < TR; ++t)
            for (int u = 0; u < 4; ++u)
                s[t][u] = 0.0f;
        for (int d0 = 0; d0 < p.dqk; d0 += DC) {
            stage_q(qs, DC, STAGE_QUADS, BR, DC, qb, p, w, d0, DT, tid, WG);
            stage_keys(ks, DC, STAGE_SWIZZLE | STAGE_QUADS, BC, DC, kb, kv, btb, w.k_base, p.k_off, p.k_sb, p.k_sh,
                       p.k_sn, p.k_sd, w.b, w.kvh, kv0, w.sg.seqlen_k, d0, p.dqk, DT, tid, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
            for (int cc = 0; cc < DC; cc += 4) {
                float4 kc[4], qc[TR];
                for (int u = 0; u < 4; ++u)
                    kc[u] = vload4(0, ks + local_at(c0 + u, cc, DC, STAGE_SWIZZLE));
                for (int t = 0; t < TR; ++t)
                    qc[t] = vload4(0, qs + (r0 + t) * DC + cc);
                for (int t = 0; t < TR; ++t)
                    for (int u = 0; u < 4; ++u)
                        s[t][u] += dot(qc[t], kc[u]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }

        /* Scores, then each row's max over the tile: partial maxima of the
         * 16 column groups through local memory. */
        for (int t = 0; t < TR; ++t) {
            float mx = -INFINITY;
            for (int u = 0; u < 4; ++u) {
                s[t][u] = score(p, s[t][u], w.b, qh[t], qi[t], kv0 + c0 + u, w.sg, biasb, slope[t], 0);
                mx = fmax(mx, s[t][u]);
            }
            red[(r0 + t) * CG + cg] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int t = 0; t < TR; ++t) {
            float mx = m[t];
            for (int x = 0; x < CG; ++x)
                mx = fmax(mx, red[(r0 + t) * CG + x]);
            const float ref = mx == -INFINITY ? 0.0f : mx;
            const float alpha = exp(m[t] - ref);
            m[t] = mx;
            float sum = 0.0f;
            for (int u = 0; u < 4; ++u) {
                const float pr = exp(s[t][u] - ref);
                sum += pr; /* before dropout: the LSE is that of the scores */
                const int i = qi[t], j = kv0 + c0 + u;
                pt[(c0 + u) * BR + r0 + t] =
                    p.has_dropout ? (ffpa_dropout_keep(p.dropout_seed, p.dropout_offset, p.dropout_threshold, p.hq,
                                                       w.b, qh[t], i, j)
                                         ? pr * p.dropout_scale
                                         : 0.0f)
                                  : pr;
            }
            l[t] = l[t] * alpha + sum;
            if (alpha != 1.0f)
                for (int x = 0; x < OCH * 4; ++x)
                    o[t][x] *= alpha;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        DV_LOOP
        for (int ch = 0; ch < OCH; ++ch) {
            const int d0 = ch * DCV;
            if (d0 >= p.dv)
                break; /* uniform: every work-item leaves at the same chunk */
            stage_keys(vs, DCV, STAGE_QUADS, BC, DCV, vb, kv, btb, w.v_base, p.v_off, p.v_sb, p.v_sh, p.v_sn, p.v_sd,
                       w.b, w.kvh, kv0, w.sg.seqlen_k, d0, p.dv, DT, tid, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
            float acc[TR][4];
            for (int t = 0; t < TR; ++t)
                for (int u = 0; u < 4; ++u)
                    acc[t][u] = 0.0f;
#pragma unroll 8
            for (int j = 0; j < BC; ++j) {
                const float4 vj = vload4(0, vs + j * DCV + c0);
                const rowvec pj = LOAD_ROWS(pt + j * BR + r0);
                for (int t = 0; t < TR; ++t)
                    for (int u = 0; u < 4; ++u)
                        acc[t][u] = fma(rv(pj, t), f4(vj, u), acc[t][u]);
            }
            for (int t = 0; t < TR; ++t)
                for (int u = 0; u < 4; ++u)
                    o[t][ch * 4 + u] += acc[t][u];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    /* Each row's sum over the column groups, then normalise and store; rows
     * that saw no key give O = 0 and LSE = -inf. */
    for (int t = 0; t < TR; ++t)
        red[(r0 + t) * CG + cg] = l[t];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = 0; t < TR; ++t) {
        const int i = qi[t];
        if (r0 + t >= w.rows)
            break;
        float total = 0.0f;
        for (int x = 0; x < CG; ++x)
            total += red[(r0 + t) * CG + x];
        const float inv = total > 0.0f ? 1.0f / total : 0.0f;
        const long o_row = fwd_o_row(p, w, qh[t], i);
        DV_LOOP
        for (int ch = 0; ch < OCH && ch * DCV < p.dv; ++ch)
            for (int u = 0; u < 4; ++u) {
                const int col = ch * DCV + c0 + u;
                if (col < p.dv)
                    store_elem(ob, o_row + (long)col * p.o_sd, o[t][ch * 4 + u] * inv, p.o_dt);
            }
        if (p.has_lse && cg == 0) {
            lseb[fwd_lse_at(p, w, qh[t], i)] = total > 0.0f ? m[t] + log(total) : -INFINITY;
        }
    }
}
