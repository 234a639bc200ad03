/*
 * Backward of the OpenCL backend (OpenCL C 1.2 and later), the split launch
 * of the cpu backend (backends/cpu/cpu_backward.c) in portable form:
 *   ffpa_bwd_delta    Delta = rowsum(dO * O), fp32;
 *   ffpa_bwd_dkdv     a work-group owns a key block of one kv head and sweeps
 *                     the query tiles of every query head that reads it (the
 *                     ones causal and window leave visible): S and dP over
 *                     Dqk / Dv chunks, P and dS, then dV += (P Z)^T dO and
 *                     dK += scale dS^T Q chunk by chunk, read-modify-written
 *                     in its own rows of the accumulators;
 *   ffpa_bwd_dq       a work-group owns a query block (and the blocks, heads
 *                     and sequences that share its dbias elements, in a fixed
 *                     order): the same tiles, dbias from dS, dQ += scale dS K;
 *   ffpa_bwd_convert  the fp32 accumulators into the outputs.
 * Every element is written by one work-item in a fixed order: the results
 * are the same bytes every run (deterministic mode costs nothing here).
 * Build option DT: the dtype of q, k, v, o, dout.
 */
#include "cl_score.h"
#include "philox.h"

/* Tiles: build options from common/plan.c's ffpa_plan_portable, these
 * defaults otherwise. */
#ifndef WG
#define WG 128
#define BR 16
#define BC 32
#define DC 32
#endif
#define TPR (WG / BR)
#define KPT (BC / TPR)  /* scores per work-item */
#define UPARTS (WG / BC) /* dK/dV update: work-items per key, each DC / UPARTS columns */

static long acc_at(long off, long sb, long sh, long sn, long sd, int varlen, long start, int b, int h, int n, int d)
{
    return off + (long)h * sh + (varlen ? (start + n) * sn : (long)b * sb + (long)n * sn) + (long)d * sd;
}

static void acc_add(__global uchar *acc, long idx, float v, int dt)
{
    store_elem(acc, idx, load_elem(acc, idx, dt) + v, dt);
}

__kernel void ffpa_bwd_delta(const ffpa_cl_fwd_params p, const ffpa_cl_bwd_params bp, __global const uchar *ob,
                             __global const uchar *dob, __global float *deltab)
{
    const long t = (long)get_global_id(0);
    if (t >= (long)p.hq * bp.total_q)
        return;
    const int h = (int)(t / bp.total_q);
    const long row = t % bp.total_q;
    const int b = p.varlen ? 0 : (int)(row / p.nq), n = p.varlen ? (int)row : (int)(row % p.nq);
    const long o_at = p.o_off + (long)b * p.o_sb + (long)h * p.o_sh + (long)n * p.o_sn;
    const long do_at = bp.do_off + (long)b * bp.do_sb + (long)h * bp.do_sh + (long)n * bp.do_sn;
    float sum = 0.0f;
    for (int d = 0; d < p.dv; ++d)
        sum += load_elem(ob, o_at + d * p.o_sd, DT) * load_elem(dob, do_at + d * bp.do_sd, DT);
    deltab[bp.delta_off + t] = sum;
}

/* The tile's S (via qs, ks) and dP (via dos, vs) for rows q0.. of head h and
 * keys kv0..; per work-item (row r, keys tc + TPR k): P * Z into pz and the
 * unscaled dS into ds, d(score)/d(scale x) into cap. */
static void tile_grads(const ffpa_cl_fwd_params p, const ffpa_cl_bwd_params bp, seq_geom g, int b, int h, int kvh,
                       int q0, int kv0, __global const uchar *qb, __global const uchar *kb, __global const uchar *vb,
                       __global const uchar *dob, __global const float *lseb, __global const uchar *biasb,
                       __global const float *alibib, __global const float *deltab, __local float (*qs)[DC],
                       __local float (*ks)[DC + 1], float *pz, float *ds, float *cap)
{
    const int tid = (int)get_local_id(0), r = tid / TPR, tc = tid % TPR;
    const int i = q0 + r;
    const long q_base = p.q_off + (p.varlen ? g.q_start * p.q_sn : (long)b * p.q_sb) + (long)h * p.q_sh;
    const long do_base = bp.do_off + (p.varlen ? g.q_start * bp.do_sn : (long)b * bp.do_sb) + (long)h * bp.do_sh;
    const long k_base = p.k_off + (p.varlen ? g.k_start * p.k_sn : (long)b * p.k_sb) + (long)kvh * p.k_sh;
    const long v_base = p.v_off + (p.varlen ? g.k_start * p.v_sn : (long)b * p.v_sb) + (long)kvh * p.v_sh;
    float sacc[KPT], dpacc[KPT];
    for (int k = 0; k < KPT; ++k)
        sacc[k] = dpacc[k] = 0.0f;
    /* S over Dqk (pass 0), dP over Dv (pass 1): the same staging. */
    for (int pass = 0; pass < 2; ++pass) {
        const int dim = pass ? p.dv : p.dqk;
        __global const uchar *lhs = pass ? dob : qb, *rhs = pass ? vb : kb;
        const long lbase = pass ? do_base : q_base, rbase = pass ? v_base : k_base;
        const long lsn = pass ? bp.do_sn : p.q_sn, rsn = pass ? p.v_sn : p.k_sn;
        const long lsd = pass ? bp.do_sd : p.q_sd, rsd = pass ? p.v_sd : p.k_sd;
        for (int d0 = 0; d0 < dim; d0 += DC) {
            stage(&qs[0][0], DC, 0, BR, DC, lhs, lbase, lsn, lsd, q0, g.seqlen_q, d0, dim, DT, tid, WG);
            stage(&ks[0][0], DC + 1, 0, BC, DC, rhs, rbase, rsn, rsd, kv0, g.seqlen_k, d0, dim, DT, tid, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int cc = 0; cc < DC; ++cc) {
                const float lv = qs[r][cc];
                for (int k = 0; k < KPT; ++k) {
                    const float prod = lv * ks[tc + TPR * k][cc];
                    if (pass)
                        dpacc[k] += prod;
                    else
                        sacc[k] += prod;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    const float slope = alibi_slope(p, alibib, b, h);
    float lse = -INFINITY, delta = 0.0f;
    if (i < g.seqlen_q) {
        lse = lseb[p.lse_off + (p.varlen ? (g.q_start + i) * p.lse_sn : (long)b * p.lse_sb + (long)i * p.lse_sn) +
                   (long)h * p.lse_sh];
        delta = deltab[bp.delta_off + (long)h * bp.total_q + (p.varlen ? g.q_start : (long)b * p.nq) + i];
    }
    for (int k = 0; k < KPT; ++k) {
        const int j = kv0 + tc + TPR * k;
        const float s = score(p, sacc[k], b, h, i, j, g, biasb, slope, &cap[k]);
        const float pr = s == -INFINITY || lse == -INFINITY ? 0.0f : exp(s - lse);
        float z = 1.0f;
        if (p.has_dropout && pr != 0.0f)
            z = ffpa_dropout_keep(p.dropout_seed, p.dropout_offset, p.dropout_threshold, p.hq, b, h, i, j)
                    ? p.dropout_scale
                    : 0.0f;
        pz[k] = pr * z;
        ds[k] = pr * (dpacc[k] * z - delta);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ffpa_bwd_dkdv(const ffpa_cl_fwd_params p, const ffpa_cl_bwd_params bp, __global const uchar *qb,
              __global const uchar *kb, __global const uchar *vb, __global const uchar *dob,
              __global const float *lseb, __global const uchar *biasb, __global const float *alibib,
              __global const int *cub, __global const float *deltab, __global uchar *dkb, __global uchar *dvb)
{
    __local float qs[BR][DC];
    __local float ks[BC][DC + 1];
    __local float pzl[BR][BC + 1], dsl[BR][BC + 1];
    const int tid = (int)get_local_id(0), r = tid / TPR, tc = tid % TPR;
    const int g_id = (int)get_group_id(0);
    const int kb_i = g_id % bp.kv_blocks, kvh = (g_id / bp.kv_blocks) % bp.hkv, b = g_id / (bp.kv_blocks * bp.hkv);
    const seq_geom g = seq_of(p, cub, b);
    const int kv0 = kb_i * BC;
    if (kv0 >= g.seqlen_k)
        return;
    const int kv_valid = min(BC, g.seqlen_k - kv0), diag = g.seqlen_k - g.seqlen_q;

    /* Our rows of dK and dV start at 0 (also when no query sees them). */
    for (int e = tid; e < kv_valid * p.dqk; e += WG)
        store_elem(dkb, acc_at(bp.dk_off, bp.dk_sb, bp.dk_sh, bp.dk_sn, bp.dk_sd, p.varlen, g.k_start, b, kvh,
                               kv0 + e / p.dqk, e % p.dqk),
                   0.0f, bp.acc_dt);
    for (int e = tid; e < kv_valid * p.dv; e += WG)
        store_elem(dvb, acc_at(bp.dv_off, bp.dv_sb, bp.dv_sh, bp.dv_sn, bp.dv_sd, p.varlen, g.k_start, b, kvh,
                               kv0 + e / p.dv, e % p.dv),
                   0.0f, bp.acc_dt);
    barrier(CLK_GLOBAL_MEM_FENCE);

    int row_begin;
    const int row_end = seeing_rows(p, kv0, kv0 + kv_valid - 1, diag, g.seqlen_q, &row_begin);
    /* dV/dK update mapping: key uc of the block, part upart of each chunk's columns. */
    const int uc = tid % BC, upart = tid / BC;
    for (int hh = 0; hh < p.group; ++hh) {
        const int h = kvh * p.group + hh;
        for (int q0 = row_begin - row_begin % BR; q0 < row_end; q0 += BR) {
            float pz[KPT], ds[KPT], cap[KPT];
            tile_grads(p, bp, g, b, h, kvh, q0, kv0, qb, kb, vb, dob, lseb, biasb, alibib, deltab, qs, ks, pz, ds, cap);
            for (int k = 0; k < KPT; ++k) {
                pzl[r][tc + TPR * k] = pz[k];
                dsl[r][tc + TPR * k] = ds[k] * cap[k] * p.scale;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* dV += (P Z)^T dO (pass 0), dK += (scale dS)^T Q (pass 1), chunk by chunk. */
            for (int pass = 0; pass < 2; ++pass) {
                const int dim = pass ? p.dqk : p.dv;
                __global const uchar *src = pass ? qb : dob;
                const long base = pass ? p.q_off + (p.varlen ? g.q_start * p.q_sn : (long)b * p.q_sb) + (long)h * p.q_sh
                                       : bp.do_off + (p.varlen ? g.q_start * bp.do_sn : (long)b * bp.do_sb) +
                                             (long)h * bp.do_sh;
                const long sn = pass ? p.q_sn : bp.do_sn, sd = pass ? p.q_sd : bp.do_sd;
                __local float(*w)[BC + 1] = pass ? dsl : pzl;
                for (int d0 = 0; d0 < dim; d0 += DC) {
                    stage(&qs[0][0], DC, 0, BR, DC, src, base, sn, sd, q0, g.seqlen_q, d0, dim, DT, tid, WG);
                    barrier(CLK_LOCAL_MEM_FENCE);
                    for (int x = 0; x < DC / UPARTS; ++x) {
                        const int cc = upart * (DC / UPARTS) + x, col = d0 + cc;
                        float acc = 0.0f;
                        for (int rr = 0; rr < BR; ++rr)
                            acc += w[rr][uc] * qs[rr][cc];
                        if (uc < kv_valid && col < dim) {
                            if (pass)
                                acc_add(dkb, acc_at(bp.dk_off, bp.dk_sb, bp.dk_sh, bp.dk_sn, bp.dk_sd, p.varlen,
                                                    g.k_start, b, kvh, kv0 + uc, col),
                                        acc, bp.acc_dt);
                            else
                                acc_add(dvb, acc_at(bp.dv_off, bp.dv_sb, bp.dv_sh, bp.dv_sn, bp.dv_sd, p.varlen,
                                                    g.k_start, b, kvh, kv0 + uc, col),
                                        acc, bp.acc_dt);
                        }
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
            }
        }
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ffpa_bwd_dq(const ffpa_cl_fwd_params p, const ffpa_cl_bwd_params bp, __global const uchar *qb,
            __global const uchar *kb, __global const uchar *vb, __global const uchar *dob, __global const float *lseb,
            __global const uchar *biasb, __global const float *alibib, __global const int *cub,
            __global const float *deltab, __global uchar *dqb, __global float *dbiasb)
{
    __local float qs[BR][DC];
    __local float ks[BC][DC + 1];
    __local float dsl[BR][BC + 1], dbl[BR][BC + 1];
    const int tid = (int)get_local_id(0), r = tid / TPR, tc = tid % TPR;
    /* Work item: (query block, head, sequence), the member dims run here in order. */
    int rest = (int)get_group_id(0);
    const int nh = bp.member_h ? 1 : p.hq, nb = bp.member_b ? 1 : p.batch;
    const int h_item = rest % nh;
    rest /= nh;
    const int b_item = rest % nb;
    const int qb_item = rest / nb;
    for (int qb_i = bp.member_qb ? 0 : qb_item; qb_i < (bp.member_qb ? p.q_blocks : qb_item + 1); ++qb_i)
        for (int b = bp.member_b ? 0 : b_item; b < (bp.member_b ? p.batch : b_item + 1); ++b)
            for (int h = bp.member_h ? 0 : h_item; h < (bp.member_h ? p.hq : h_item + 1); ++h) {
                const seq_geom g = seq_of(p, cub, b);
                const int q0 = qb_i * BR;
                if (q0 >= g.seqlen_q)
                    continue; /* uniform over the work-group */
                const int rows = min(BR, g.seqlen_q - q0), diag = g.seqlen_k - g.seqlen_q;
                const int kvh = h / p.group;
                for (int e = tid; e < rows * p.dqk; e += WG)
                    store_elem(dqb, acc_at(bp.dq_off, bp.dq_sb, bp.dq_sh, bp.dq_sn, bp.dq_sd, p.varlen, g.q_start, b, h,
                                           q0 + e / p.dqk, e % p.dqk),
                               0.0f, bp.acc_dt);
                barrier(CLK_GLOBAL_MEM_FENCE);
                int tile_begin;
                const int tile_end = key_tiles(p, q0, q0 + rows - 1, diag, g.seqlen_k, BC, &tile_begin);
                for (int tile = tile_begin; tile < tile_end; ++tile) {
                    const int kv0 = tile * BC;
                    float pz[KPT], ds[KPT], cap[KPT];
                    tile_grads(p, bp, g, b, h, kvh, q0, kv0, qb, kb, vb, dob, lseb, biasb, alibib, deltab, qs, ks, pz,
                               ds, cap);
                    for (int k = 0; k < KPT; ++k) {
                        dsl[r][tc + TPR * k] = ds[k] * cap[k] * p.scale;
                        dbl[r][tc + TPR * k] = ds[k];
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                    if (bp.has_dbias) {
                        /* Summed over the dims where dbias broadcasts; one work-item per element. */
                        const long gb = bp.dbias_gb > 1 ? b : 0, gh = bp.dbias_gh > 1 ? h : 0;
                        __global float *plane = dbiasb + bp.dbias_off + (gb * bp.dbias_gh + gh) * bp.dbias_gn * bp.dbias_gk;
                        const int kv_valid = min(BC, g.seqlen_k - kv0);
                        if (bp.dbias_gn > 1 && bp.dbias_gk > 1) {
                            for (int e = tid; e < rows * kv_valid; e += WG)
                                plane[(long)(q0 + e / kv_valid) * bp.dbias_gk + kv0 + e % kv_valid] +=
                                    dbl[e / kv_valid][e % kv_valid];
                        } else if (bp.dbias_gn > 1) { /* per query row */
                            if (tid < rows) {
                                float sum = 0.0f;
                                for (int c = 0; c < kv_valid; ++c)
                                    sum += dbl[tid][c];
                                plane[q0 + tid] += sum;
                            }
                        } else if (bp.dbias_gk > 1) { /* per key */
                            if (tid < kv_valid) {
                                float sum = 0.0f;
                                for (int rr = 0; rr < rows; ++rr)
                                    sum += dbl[rr][tid];
                                plane[kv0 + tid] += sum;
                            }
                        } else if (tid == 0) {
                            float sum = 0.0f;
                            for (int rr = 0; rr < rows; ++rr)
                                for (int c = 0; c < kv_valid; ++c)
                                    sum += dbl[rr][c];
                            plane[0] += sum;
                        }
                    }
                    /* dQ += scale dS K, chunk by chunk (K staged again). */
                    const long k_base = p.k_off + (p.varlen ? g.k_start * p.k_sn : (long)b * p.k_sb) + (long)kvh * p.k_sh;
                    for (int d0 = 0; d0 < p.dqk; d0 += DC) {
                        stage(&ks[0][0], DC + 1, 0, BC, DC, kb, k_base, p.k_sn, p.k_sd, kv0, g.seqlen_k, d0, p.dqk, DT,
                              tid, WG);
                        barrier(CLK_LOCAL_MEM_FENCE);
                        for (int x = 0; x < DC / TPR; ++x) {
                            const int cc = tc + TPR * x, col = d0 + cc;
                            float acc = 0.0f;
                            for (int c = 0; c < BC; ++c)
                                acc += dsl[r][c] * ks[c][cc];
                            if (r < rows && col < p.dqk)
                                acc_add(dqb, acc_at(bp.dq_off, bp.dq_sb, bp.dq_sh, bp.dq_sn, bp.dq_sd, p.varlen,
                                                    g.q_start, b, h, q0 + r, col),
                                        acc, bp.acc_dt);
                        }
                        barrier(CLK_LOCAL_MEM_FENCE);
                    }
                }
            }
}

__kernel void ffpa_bwd_convert(const ffpa_cl_convert cv, __global const float *src, __global uchar *dst)
{
    const long t = (long)get_global_id(0);
    if (t >= cv.n0 * cv.n1 * cv.n2 * cv.n3)
        return;
    const long i3 = t % cv.n3, i2 = (t / cv.n3) % cv.n2, i1 = (t / (cv.n3 * cv.n2)) % cv.n1,
               i0 = t / (cv.n3 * cv.n2 * cv.n1);
    store_elem(dst, cv.dst_off + i0 * cv.s0 + i1 * cv.s1 + i2 * cv.s2 + i3 * cv.s3, src[cv.src_off + t], cv.dt);
}
