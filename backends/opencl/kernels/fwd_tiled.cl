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
 * cg + 16 u (u < 4):
 *   S = Q K^T       over Dqk in DC-column chunks (64 on GPUs, 32 on CPUs: the
 *                   plan's), Q row-major and K in
 *                   planes of 4 columns (STAGE_PLANES: a work-item's 4 keys
 *                   at fixed offsets from one address, the 16 column groups'
 *                   reads consecutive), rows and keys read 4 columns at a
 *                   time (16-byte reads): TR + 4 reads per 16 TR FMAs, the FMAs
 *                   spelt out (dot() compiled to a multiply, 3 FMAs and an
 *                   add);
 *   score epilogue  cl_score.h's score(), the masks and variants as fwd.cl;
 *   online softmax  each row's max over the 16 column groups through local
 *                   memory (each group's partial max), the same value in
 *                   every work-item of the row; each work-item keeps its own
 *                   partial row sum, added up once at the end; dropout after
 *                   the sum (common/philox.h), as every backend;
 *   O = alpha O + P V  P^T in local memory (a work-item's TR rows of a key:
 *                   one read), V in 64-column chunks (its 4 columns: one
 *                   16-byte read): 2 reads per 4 TR FMAs; O's registers: TR rows x
 *                   4 columns of each 64-column chunk up to DVB.
 * O's registers are an array the compiler keeps in memory (a 640-byte stack
 * frame at TR 4, Dv 512: the loops over rows it leaves rolled index it), in L1:
 * 128 registers, 4 work-groups a multiprocessor by the CUDA driver's
 * occupancy; with every row loop unrolled it is in 255 registers and 2
 * work-groups run, slower (H200: 21.5 against 26.7 TFLOP/s replayed, 14.0
 * against 14.5 through NVIDIA's OpenCL at D = 512; docs/notes/opencl.md).
 * Q and K chunks share their local memory with the V chunk (other phases,
 * barriers between); common/plan.c's ffpa_plan_portable_tiled counts the
 * same bytes. Dense chunks are copied in compile-time rounds (stage_dense).
 * Build options: TR (2 or 4), DT (dtype), DVB (a multiple of 64 >= Dv),
 * FFPA_CL_UNROLL (the Dv chunk loop unrolled; GPUs),
 * FFPA_CL_ALIGNED_QUADS (cl_score.h's load_quad_at).
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
#ifndef DC
#define DC 32 /* Dqk columns a chunk: the host passes its plan's (64 on GPUs) */
#endif
#define DCV (4 * CG)
#define OCH (DVB / DCV)
/* K's plane pitch: BC 16-byte rows and a spare one, so that the planes a
 * copy round writes start on different banks. */
#define KLD ((BC + 1) * 4)
/* P^T's row pitch: the 16 column groups' stores of one row fall on 8 banks,
 * not 1. */
#define PTLD (BR + 4)
#define QK_FLOATS (BR * DC + DC / 4 * KLD)
#define V_FLOATS (BC * DCV)

/* Local quads as 16-byte accesses (cl_score.h's local_quad_load / store):
 * every quad here starts at a multiple of 4 floats of a 16-byte aligned
 * array (K's plane pitch 260, P^T's 36, the Q / V rows DC / 64). */
#if TR == 4
#define LOAD_ROWS(at) local_quad_load(at)
typedef float4 rowvec;
#else
#define LOAD_ROWS(at) (*(__local const float2 *)(at))
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

/* rows x cols (cols / 4 dividing WG, rows x cols / 4 a multiple of WG) of
 * dense rows (row r0 + rr at element base + (r0 + rr) sn, unit column
 * stride, columns d0.. all below the head dim) into local memory at
 * local_at(ld, layout), zeros past `valid` rows: work-item tid copies
 * columns 4 (tid % quads) of rows tid / quads + k WG / quads in
 * compile-time rounds, its source pointer walked by a fixed byte step (a
 * copy loop re-deriving row, column and 64-bit index per copy was a sixth
 * of the kernel's instructions: ncu of the replayed kernel, H200). */
static void stage_dense(__local float *dst, int ld, int layout, int rows, int cols, __global const uchar *src,
                        long base, long sn, int r0, int valid, int d0, int dt, int tid)
{
    const int quads = cols >> 2, step = WG / quads, rr0 = tid / quads, c = (tid % quads) << 2;
    const long esize = dt == 2 ? 4 : 2;
    __global const uchar *from = src + (base + (long)(r0 + rr0) * sn + d0 + c) * esize;
    const long from_step = (long)step * sn * esize;
#pragma unroll
    for (int k = 0; k < rows * (cols >> 2) / WG; ++k) {
        const int rr = rr0 + k * step;
        local_quad_store(dst + local_at(rr, c, ld, layout), r0 + rr < valid ? load_quad_at(from, dt) : (float4)(0.0f));
        from += from_step;
    }
}

/* The block's Q chunk from column d0: stage_dense where it can, else
 * cl_kv.h's stage_q (packed heads, strided or partial chunks). */
static void stage_q_chunk(__local float *dst, __global const uchar *src, const ffpa_cl_fwd_params p, fwd_group w,
                          int d0, int tid)
{
    if (p.pack == 1 && quads_fit(STAGE_QUADS, DC, p.q_sd, DC, d0, p.dqk))
        stage_dense(dst, DC, STAGE_QUADS, BR, DC, src, w.q_base, p.q_sn, w.q0, w.sg.seqlen_q, d0, DT, tid);
    else
        stage_q(dst, DC, STAGE_QUADS, BR, DC, src, p, w, d0, DT, tid, WG);
}

/* A K or V chunk (BC keys from key kv0, cols columns from d0, pool or
 * tensor (off, sp, sh, sn, sd)): stage_dense where it can, else cl_kv.h's
 * stage_keys (pages, strided or partial chunks). */
static void stage_kv_chunk(__local float *dst, int ld, int layout, int cols, __global const uchar *src,
                           const ffpa_cl_kv_params kv, __global const int *btb, long dense_base, long off, long sp,
                           long sh, long sn, long sd, fwd_group w, int kv0, int d0, int dim, int tid)
{
    if (!kv.paged && quads_fit(layout, ld, sd, cols, d0, dim))
        stage_dense(dst, ld, layout, BC, cols, src, dense_base, sn, kv0, w.sg.seqlen_k, d0, DT, tid);
    else
        stage_keys(dst, ld, layout, BC, cols, src, kv, btb, dense_base, off, sp, sh, sn, sd, w.b, w.kvh, kv0,
                   w.sg.seqlen_k, d0, dim, DT, tid, WG);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ffpa_fwd_tiled(const ffpa_cl_fwd_params p, __global const uchar *qb, __global const uchar *kb,
               __global const uchar *vb, __global uchar *ob, __global float *lseb, __global const uchar *biasb,
               __global const float *alibib, __global const int *cub, const ffpa_cl_kv_params kv,
               __global const int *btb, __global const int *lensb)
{
    __local float slab[QK_FLOATS > V_FLOATS ? QK_FLOATS : V_FLOATS] __attribute__((aligned(16)));
    __local float *const qs = slab;           /* Q chunk, row-major */
    __local float *const ks = slab + BR * DC; /* K chunk in planes of 4 columns */
    __local float *const vs = slab;           /* V chunk, row-major */
    __local float pt[BC * PTLD] __attribute__((aligned(16))); /* P^T of the tile */
    __local float red[BR * CG]; /* per column group: a row's partial max, at the end its partial sum */

    const int tid = (int)get_local_id(0);
    const int cg = tid % CG, rg = tid / CG;
    const int r0 = rg * TR, c0 = cg * 4; /* this work-item's rows and O columns (keys: cg + 16 u) */
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
            stage_q_chunk(qs, qb, p, w, d0, tid);
            stage_kv_chunk(ks, KLD, STAGE_PLANES | STAGE_QUADS, DC, kb, kv, btb, w.k_base, p.k_off, p.k_sb, p.k_sh,
                           p.k_sn, p.k_sd, w, kv0, d0, p.dqk, tid);
            barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
            for (int cc = 0; cc < DC; cc += 4) {
                float4 kc[4], qc[TR];
                for (int u = 0; u < 4; ++u)
                    kc[u] = local_quad_load(ks + local_at(cg + 16 * u, cc, KLD, STAGE_PLANES));
                for (int t = 0; t < TR; ++t)
                    qc[t] = local_quad_load(qs + (r0 + t) * DC + cc);
                for (int t = 0; t < TR; ++t)
                    for (int u = 0; u < 4; ++u) {
                        s[t][u] = fma(qc[t].s0, kc[u].s0, s[t][u]);
                        s[t][u] = fma(qc[t].s1, kc[u].s1, s[t][u]);
                        s[t][u] = fma(qc[t].s2, kc[u].s2, s[t][u]);
                        s[t][u] = fma(qc[t].s3, kc[u].s3, s[t][u]);
                    }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }

        /* Scores, then each row's max over the tile: partial maxima of the
         * 16 column groups through local memory. */
        for (int t = 0; t < TR; ++t) {
            float mx = -INFINITY;
            for (int u = 0; u < 4; ++u) {
                s[t][u] = score(p, s[t][u], w.b, qh[t], qi[t], kv0 + cg + 16 * u, w.sg, biasb, slope[t], 0);
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
                const int i = qi[t], j = kv0 + cg + 16 * u;
                pt[(cg + 16 * u) * PTLD + r0 + t] =
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
            stage_kv_chunk(vs, DCV, STAGE_QUADS, DCV, vb, kv, btb, w.v_base, p.v_off, p.v_sb, p.v_sh, p.v_sn, p.v_sd,
                           w, kv0, d0, p.dv, tid);
            barrier(CLK_LOCAL_MEM_FENCE);
            float acc[TR][4];
            for (int t = 0; t < TR; ++t)
                for (int u = 0; u < 4; ++u)
                    acc[t][u] = 0.0f;
#pragma unroll 8
            for (int j = 0; j < BC; ++j) {
                const float4 vj = local_quad_load(vs + j * DCV + c0);
                const rowvec pj = LOAD_ROWS(pt + j * PTLD + r0);
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
