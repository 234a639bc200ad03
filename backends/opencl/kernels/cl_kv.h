/*
 * The paged KV cache in OpenCL C (ffpa_forward_kvcache): a sequence's key
 * count, where key row j of a sequence lives, the staging of key rows into
 * local memory through the pages, and the append of the new tokens. The
 * rules are every backend's (common/kv_sched.h's ffpa_kv_seq_len,
 * backends/cpu/cpu_forward.c's key_row_offset): a page outside the pool (a
 * table the caller vouched for) reads as zeros and is never written.
 */
#ifndef FFPA_OPENCL_CL_KV_H
#define FFPA_OPENCL_CL_KV_H

#include "cl_score.h"

/* Keys sequence b attends to: cached (+ appended), clipped to [0, capacity]. */
static int kv_seqlen(const ffpa_cl_kv_params kv, __global const int *lensb, int b)
{
    const long len = (kv.uniform_len >= 0 ? kv.uniform_len : (long)lensb[kv.lens_off + b]) + kv.added;
    return (int)clamp(len, 0L, (long)kv.capacity);
}

/* Element offset of key row j of (sequence b, kv head h) in a pool (off, page
 * stride sp, head stride sh, row stride sn); -1 for a page outside the pool. */
static long kv_row(const ffpa_cl_kv_params kv, __global const int *btb, long off, long sp, long sh, long sn, int b,
                   int h, int j)
{
    /* Every 16-byte copy of a paged key row comes here: a power-of-two page
     * size (the usual one) takes shifts instead of a division. */
    const int in_table = kv.page_shift >= 0 ? j >> kv.page_shift : j / kv.page_size;
    const int in_page = kv.page_shift >= 0 ? j & (kv.page_size - 1) : j % kv.page_size;
    const long page = kv.has_table ? (long)btb[kv.bt_off + (long)b * kv.bt_stride + in_table] : (long)b;
    if (page < 0 || page >= kv.num_pages)
        return -1;
    return off + page * sp + (long)h * sh + (long)in_page * sn;
}

/* The forward kernels' loops over Dv chunks: unrolled on GPUs
 * (FFPA_CL_UNROLL), so that O stays in registers; a loop elsewhere (CPU
 * compilers such as pocl's take minutes over an unrolled loop of barriers). */
#ifdef FFPA_CL_UNROLL
#define DV_LOOP _Pragma("unroll")
#else
#define DV_LOOP _Pragma("unroll 1")
#endif

/* A forward work-group's share (kernels/fwd.cl, fwd_tiled.cl): its
 * (sequence, query head, first query row), the sequence geometry (with a
 * paged cache, the cache length is the key count), where its Q, K and V
 * rows start. Work-group g runs query block g % q_blocks
 * of br rows.
 * Packed heads (p.pack > 1, every forward kernel, for a few query rows
 * with GQA / MQA / MLA: decode): the rows are those of the p.pack query
 * heads that share KV head kvh, row R of the sequence's packed rows being
 * query row R / pack of head h + R % pack (fwd_row_query, fwd_row_head), so
 * a KV head's keys are read once for all its query heads and a decode tile
 * holds pack rows instead of one. h is then the group's first head and q0
 * and rows count packed rows.
 * Split (p.splits > 1, the KV cache's decode): work-group g's split g /
 * (the groups of one split) takes an equal share of its rows' visible key
 * tiles and writes its partial O (fp32) and LSE at split x p.o_split and
 * p.lse_split in the workspace; ffpa_merge joins them (kv_launch_cl.c). */
typedef struct fwd_group {
    int b, h, kvh, q0, split;
    int rows; /* rows of the block in the sequence (<= 0: none, the work-group has nothing to do) */
    int diag; /* seqlen_k - seqlen_q: where the causal diagonal is */
    seq_geom sg;
    long q_base, k_base, v_base;
} fwd_group;

static fwd_group fwd_group_of(const ffpa_cl_fwd_params p, const ffpa_cl_kv_params kv, __global const int *cub,
                              __global const int *lensb, int br)
{
    fwd_group w;
    const int heads = p.hq / p.pack; /* head slots: query heads, or KV heads packed */
    const int per_split = p.q_blocks * heads * p.batch, g = (int)get_group_id(0) % per_split;
    w.split = (int)get_group_id(0) / per_split;
    w.h = (g / p.q_blocks) % heads * p.pack;
    w.b = g / (p.q_blocks * heads);
    w.kvh = w.h / p.group;
    w.q0 = (g % p.q_blocks) * br;
    w.sg = seq_of(p, cub, w.b);
    if (kv.paged)
        w.sg.seqlen_k = kv_seqlen(kv, lensb, w.b);
    w.rows = min(br, w.sg.seqlen_q * p.pack - w.q0);
    w.diag = w.sg.seqlen_k - w.sg.seqlen_q;
    w.q_base = p.q_off + (p.varlen ? w.sg.q_start * p.q_sn : (long)w.b * p.q_sb) + (long)w.h * p.q_sh;
    w.k_base = p.k_off + (p.varlen ? w.sg.k_start * p.k_sn : (long)w.b * p.k_sb) + (long)w.kvh * p.k_sh;
    w.v_base = p.v_off + (p.varlen ? w.sg.k_start * p.v_sn : (long)w.b * p.v_sb) + (long)w.kvh * p.v_sh;
    return w;
}

/* Query row and head of the sequence's (packed) row R. */
static int fwd_row_query(const ffpa_cl_fwd_params p, int R)
{
    return p.pack == 1 ? R : R / p.pack;
}

static int fwd_row_head(const ffpa_cl_fwd_params p, fwd_group w, int R)
{
    return p.pack == 1 ? w.h : w.h + R % p.pack;
}

/* Where the output row (column 0) and the LSE of query row i of head h live. */
static long fwd_o_row(const ffpa_cl_fwd_params p, fwd_group w, int h, int i)
{
    return p.o_off + (p.varlen ? (w.sg.q_start + i) * p.o_sn : (long)w.b * p.o_sb + (long)i * p.o_sn) +
           (long)h * p.o_sh + (long)w.split * p.o_split;
}

static long fwd_lse_at(const ffpa_cl_fwd_params p, fwd_group w, int h, int i)
{
    return p.lse_off + (p.varlen ? (w.sg.q_start + i) * p.lse_sn : (long)w.b * p.lse_sb + (long)i * p.lse_sn) +
           (long)h * p.lse_sh + (long)w.split * p.lse_split;
}

/* Key tiles of bc keys the block's rows may see (key_tiles over their query
 * rows), of them the work-group's split's share: [*begin, end). */
static int fwd_key_tiles(const ffpa_cl_fwd_params p, fwd_group w, int bc, int *begin)
{
    int end = key_tiles(p, fwd_row_query(p, w.q0), fwd_row_query(p, w.q0 + w.rows - 1), w.diag, w.sg.seqlen_k, bc,
                        begin);
    if (p.splits > 1) {
        const int share = (end - *begin + p.splits - 1) / p.splits;
        *begin = min(end, *begin + w.split * share);
        end = min(end, *begin + share);
    }
    return end;
}

/* stage() of the block's Q rows, through the packed rows' heads where
 * p.pack > 1. */
static void stage_q(__local float *dst, int ld, int layout, int rows, int cols, __global const uchar *src,
                    const ffpa_cl_fwd_params p, fwd_group w, int d0, int dt, int tid, int nthreads)
{
    if (p.pack == 1) {
        stage(dst, ld, layout, rows, cols, src, w.q_base, p.q_sn, p.q_sd, w.q0, w.sg.seqlen_q, d0, p.dqk, dt, tid,
              nthreads);
        return;
    }
    const int valid = w.sg.seqlen_q * p.pack;
    for (int e = tid; e < rows * cols; e += nthreads) {
        const int rr = e / cols, cc = e % cols, R = w.q0 + rr;
        dst[local_at(rr, cc, ld, layout)] =
            R < valid && d0 + cc < p.dqk
                ? load_elem(src, w.q_base + (long)(R % p.pack) * p.q_sh + (long)(R / p.pack) * p.q_sn +
                                     (long)(d0 + cc) * p.q_sd,
                            dt)
                : 0.0f;
    }
}

/* stage() for key rows: dense rows from dense_base, or (kv.paged) rows
 * through the pages of the pool (off, sp, sh, sn) of kv head h. */
static void stage_keys(__local float *dst, int ld, int layout, int rows, int cols, __global const uchar *src,
                       const ffpa_cl_kv_params kv, __global const int *btb, long dense_base, long off, long sp,
                       long sh, long sn, long sd, int b, int h, int r0, int valid, int d0, int dim, int dt, int tid,
                       int nthreads)
{
    if (!kv.paged) {
        stage(dst, ld, layout, rows, cols, src, dense_base, sn, sd, r0, valid, d0, dim, dt, tid, nthreads);
        return;
    }
    if (quads_fit(layout, ld, sd, cols, d0, dim)) {
        const int quads = cols >> 2;
        for (int e = tid; e < rows * quads; e += nthreads) {
            const int rr = e / quads, cc = (e % quads) << 2;
            float4 x = (float4)(0.0f);
            if (r0 + rr < valid) {
                const long row = kv_row(kv, btb, off, sp, sh, sn, b, h, r0 + rr);
                if (row >= 0)
                    x = load_quad(src, row + d0 + cc, dt);
            }
            local_quad_store(dst + local_at(rr, cc, ld, layout), x);
        }
        return;
    }
    for (int e = tid; e < rows * cols; e += nthreads) {
        const int rr = e / cols, cc = e % cols;
        float x = 0.0f;
        if (r0 + rr < valid && d0 + cc < dim) {
            const long row = kv_row(kv, btb, off, sp, sh, sn, b, h, r0 + rr);
            if (row >= 0)
                x = load_elem(src, row + (long)(d0 + cc) * sd, dt);
        }
        dst[local_at(rr, cc, ld, layout)] = x;
    }
}

/* The new tokens (kv.src_*: [batch, hkv, nq, kv.dim]) into the pool
 * (kv.dst_*) at positions cache_seqlens[b] + n, bit for bit: one work-item
 * per element. Positions outside [0, capacity) or pages outside the pool
 * are not written. */
__kernel void ffpa_kv_append(const ffpa_cl_kv_params kv, int batch, int hkv, int nq, __global const int *btb,
                             __global const int *lensb, __global const uchar *srcb, __global uchar *dstb)
{
    const long t = (long)get_global_id(0);
    if (t >= (long)batch * hkv * nq * kv.dim)
        return;
    const int c = (int)(t % kv.dim), n = (int)(t / kv.dim % nq), h = (int)(t / ((long)kv.dim * nq) % hkv),
              b = (int)(t / ((long)kv.dim * nq * hkv));
    const long pos = (kv.uniform_len >= 0 ? kv.uniform_len : (long)lensb[kv.lens_off + b]) + n;
    if (pos < 0 || pos >= kv.capacity)
        return;
    const long to = kv_row(kv, btb, kv.dst_off, kv.dst_sp, kv.dst_sh, kv.dst_sn, b, h, (int)pos);
    if (to < 0)
        return;
    const long from = kv.src_off + (long)b * kv.src_sb + (long)h * kv.src_sh + (long)n * kv.src_sn + (long)c * kv.src_sd;
    const long at = to + (long)c * kv.dst_sd;
    if (DT == 2)
        ((__global uint *)dstb)[at] = ((__global const uint *)srcb)[from];
    else
        ((__global ushort *)dstb)[at] = ((__global const ushort *)srcb)[from];
}

#endif
