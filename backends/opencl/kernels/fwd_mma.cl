/*
 * Forward of the OpenCL backend on matrix instructions (the matrix layer:
 * cl_mma.h, NVIDIA mma.sync m16n8k16 through inline PTX, or its portable
 * emulation for tests; 16-bit inputs).
 * The algorithm and the epilogue are fwd_tiled.cl's: Split-D over Dqk in
 * 64-column chunks, online softmax in base 2, every option through
 * cl_score.h's score() (masks, softcap, bias, ALiBi) and common/philox.h
 * (dropout after the row sums), the paged KV cache as in fwd.cl.
 *
 * Geometry (common/plan.c, ffpa_plan_matrix_forward; build options WM, WN,
 * DC, VC, OC): a work-group is WM x WN warps and owns BR = 16 WM query rows.
 * Warp (i, j):
 *   S = Q K^T   its 16 rows x keys [j KW, (j + 1) KW) of each 64-key tile,
 *               over all of Dqk: Q and K chunks (DC columns) staged in local
 *               memory, fragments by ldmatrix;
 *   softmax     each row's max over the WN warps of its rows through local
 *               memory (red), the sum kept per warp and added up at the end;
 *   O += P V    its 16 rows x columns [j OC, (j + 1) OC) in VC-column V
 *               chunks (ldmatrix.trans), P from registers (WN = 1) or, for
 *               the whole key tile, from local memory (WN > 1).
 * Data moves by cp.async through two ring slots: the copy of step n + 1
 * (a Q/K chunk or the V chunks) runs under the MMAs of step n, one barrier
 * a step. Slabs are 16-bit, 64 or 32 columns wide, their 16-byte pieces
 * XOR-swizzled by row (slab_at) so that ldmatrix's eight rows hit eight
 * bank groups.
 *
 * The host (fwd_launch_cl.c) sends here only what the copies allow: unit
 * column strides, row strides and offsets in multiples of 8 elements, Dqk
 * and Dv multiples of 8. Packed heads (kernels/cl_kv.h) as fwd.cl: each
 * lane's two rows take their own head and query row.
 */
#include "cl_kv.h"
#include "cl_mma.h"
#include "cl_score.h"
#include "philox.h"

#define WG (32 * WM * WN)
#define BR (16 * WM)
#define BC 64
#define KW (BC / WN)   /* keys of a tile per warp in S */
#define KNT (KW / 8)   /* S n8 tiles per warp */
#define ONT (VC / 8)   /* O n8 tiles per warp and V chunk */
#define OCH (OC / VC)  /* V chunks per warp */
#define QK_HALFS ((BR + BC) * DC)

/* Diagnostic builds only (FFPA_OPENCL_BUILD_OPTIONS=-DFFPA_CL_DIAG=N; wrong
 * results, timing only, docs/notes/opencl.md): 1 no copies, 2 no MMAs,
 * 3 no per-element score() (the raw scaled dot products), 4 no Q copies
 * (K and V only: what re-staging Q for every key tile costs). What each removes
 * from the time says what bounds the kernel, which no profiler shows for
 * OpenCL kernels. */
#ifndef FFPA_CL_DIAG
#define FFPA_CL_DIAG 0
#endif
#if FFPA_CL_DIAG == 2
#define MMA(c, a, b0, b1) ((c) + (float4)(as_float((b0) ^ (a).x) * 0.0f))
#else
#define MMA(c, a, b0, b1) mma_16816(c, a, b0, b1)
#endif
#if FFPA_CL_DIAG == 3
#define SCORE(x, i, h, slope, j) ((x) * p.scale)
#else
#define SCORE(x, i, h, slope, j) score(p, x, w.b, h, i, j, w.sg, biasb, slope, 0)
#endif
#ifndef FFPA_CL_PLAIN_TILES
#define FFPA_CL_PLAIN_TILES 1
#endif
#define V_HALFS (BC * VC * WN)
#define SLOT (QK_HALFS > V_HALFS ? QK_HALFS : V_HALFS)

/* Element (r, c) of a 16-bit slab of `cols` (64 or 32) columns. */
static int slab_at(int r, int c, int cols)
{
    const int pieces = cols >> 3, shift = cols == 64 ? 0 : 1;
    return r * cols + ((((c >> 3) ^ (r >> shift)) & (pieces - 1)) << 3) + (c & 7);
}

/* In rounds of WG copies: work-item tid takes piece tid % pieces of rows
 * tid / pieces + k WG / pieces, so its column, the column's bounds test and
 * the row step are the same in every round, and the rounds are a
 * compile-time count the compiler unrolls (a loop over e = tid, tid + WG,
 * ... that re-derived row and column per 16-byte copy cost 25% at D = 512:
 * the copies' instructions bound this kernel, docs/notes/opencl.md). The
 * last round is partial only where the slab has fewer pieces than the
 * work-group has work-items. */
#define STAGE_ROUNDS(rows, cols) (((rows) * ((cols) >> 3) + WG - 1) / WG)
#define STAGE_ROUND_OFF(rows, cols, k, tid) ((rows) * ((cols) >> 3) % WG != 0 && (k) * WG + (tid) >= (rows) * ((cols) >> 3))

/* rows x cols of rows laid out densely (row r0 + rr at element
 * base + (r0 + rr) sn) into a slab: one source pointer walked by a fixed
 * byte step (per-copy 64-bit row arithmetic was two thirds of the kernel's
 * instructions at D = 512: ncu of the replayed kernel, tools/cl_ptx_replay.c);
 * zeros past `valid` rows or past column `dim`. */
static void stage16_rows(__local ushort *slab, int rows, int cols, __global const uchar *src, long base, long sn, int r0,
                         int valid, int d0, int dim, int tid)
{
    const int pieces = cols >> 3, step = WG / pieces;
    const int rr0 = tid / pieces, col = d0 + (tid % pieces) * 8, col_ok = col < dim;
    __global const uchar *from = src + (base + (long)(r0 + rr0) * sn + col) * 2;
    const long from_step = (long)step * sn * 2;
FFPA_UNROLL
    for (int k = 0; k < STAGE_ROUNDS(rows, cols); ++k) {
        if (STAGE_ROUND_OFF(rows, cols, k, tid))
            break;
        const int rr = rr0 + k * step, ok = col_ok && r0 + rr < valid;
        copy16_async(lds_addr(slab + slab_at(rr, col - d0, cols)), ok ? from : src, ok ? 16u : 0u);
        from += from_step;
    }
}

/* rows x cols of a 16-bit tensor into a slab by cp.async, 16 bytes a copy:
 * row r0 + rr from dense_base + (r0 + rr) sn, or (paged) through the pages
 * of the pool (off, sp, sh, sn) of head h; zeros past `valid` rows, past
 * column `dim` or for a page outside the pool. */
static void stage16(__local ushort *slab, int rows, int cols, __global const uchar *src, int paged,
                    const ffpa_cl_kv_params kv, __global const int *btb, long dense_base, long off, long sp, long sh,
                    long sn, int b, int h, int r0, int valid, int d0, int dim, int tid)
{
    if (!paged) {
        stage16_rows(slab, rows, cols, src, dense_base, sn, r0, valid, d0, dim, tid);
        return;
    }
#ifdef FFPA_CL_TILES_IN_PAGES
    /* Pages hold whole key tiles (the host's build option: page size a
     * multiple of BC, and the slabs are key tiles): one block-table read for
     * the slab's rows, then the dense copies; a page outside the pool reads
     * as zeros. A build option, not a test in the kernel: with both paths
     * compiled in, decode on pages of 16 ran 5-11% slower (H200). */
    const long first = kv_row(kv, btb, off, sp, sh, sn, b, h, r0);
    stage16_rows(slab, rows, cols, src, first - (long)r0 * sn, sn, r0, first >= 0 ? valid : r0, d0, dim, tid);
#else
    const int pieces = cols >> 3, step = WG / pieces;
    const int rr0 = tid / pieces, col = d0 + (tid % pieces) * 8;
FFPA_UNROLL
    for (int k = 0; k < STAGE_ROUNDS(rows, cols); ++k) {
        if (STAGE_ROUND_OFF(rows, cols, k, tid))
            break;
        const int rr = rr0 + k * step;
        const long row = r0 + rr < valid && col < dim ? kv_row(kv, btb, off, sp, sh, sn, b, h, r0 + rr) : -1;
        copy16_async(lds_addr(slab + slab_at(rr, col - d0, cols)), src + (row >= 0 ? (row + col) * 2 : 0),
                     row >= 0 ? 16u : 0u);
    }
#endif
}

/* The block's Q rows (stage16 of rows x cols from column d0), through the
 * packed rows' heads where p.pack > 1 (kernels/cl_kv.h). */
static void stage16_q(__local ushort *slab, int rows, int cols, __global const uchar *src, const ffpa_cl_fwd_params p,
                      const fwd_group w, int d0, int tid)
{
    /* One head's rows (every call but packed decode): stage16's row arithmetic,
     * no division by the pack per copy (those cost the forward 6-13%: H200,
     * D = 128-1024, docs/notes/opencl.md). */
    if (p.pack == 1) {
        stage16_rows(slab, rows, cols, src, w.q_base, p.q_sn, w.q0, w.sg.seqlen_q, d0, p.dqk, tid);
        return;
    }
    const int pieces = cols >> 3, valid = w.sg.seqlen_q * p.pack;
    for (int e = tid; e < rows * pieces; e += WG) {
        const int rr = e / pieces, col = d0 + (e % pieces) * 8, r = w.q0 + rr;
        const long row = r < valid && col < p.dqk
                             ? w.q_base + (long)(r % p.pack) * p.q_sh + (long)(r / p.pack) * p.q_sn
                             : -1;
        copy16_async(lds_addr(slab + slab_at(rr, col - d0, cols)), src + (row >= 0 ? (row + col) * 2 : 0),
                     row >= 0 ? 16u : 0u);
    }
}

/* Step c of key tile `tile` into a ring slot: Q and K chunk c (c < nqk), or
 * every warp's V chunk c - nqk. */
static void issue_step(__local ushort *slot, int tile, int c, int nqk, const ffpa_cl_fwd_params p,
                       const ffpa_cl_kv_params kv, __global const int *btb, const fwd_group w,
                       __global const uchar *qb, __global const uchar *kb, __global const uchar *vb, int tid)
{
    const int kv0 = tile * BC;
    if (FFPA_CL_DIAG == 1)
        return;
    if (c < nqk) {
        if (FFPA_CL_DIAG != 4)
            stage16_q(slot, BR, DC, qb, p, w, c * DC, tid);
        stage16(slot + BR * DC, BC, DC, kb, kv.paged, kv, btb, w.k_base, p.k_off, p.k_sb, p.k_sh, p.k_sn, w.b, w.kvh,
                kv0, w.sg.seqlen_k, c * DC, p.dqk, tid);
        return;
    }
    const int v = c - nqk;
    for (int j = 0; j < WN; ++j)
        stage16(slot + j * BC * VC, BC, VC, vb, kv.paged, kv, btb, w.v_base, p.v_off, p.v_sb, p.v_sh, p.v_sn, w.b,
                w.kvh, kv0, w.sg.seqlen_k, j * OC + v * VC, p.dv, tid);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ffpa_fwd_mma(const ffpa_cl_fwd_params p, __global const uchar *qb, __global const uchar *kb, __global const uchar *vb,
             __global uchar *ob, __global float *lseb, __global const uchar *biasb, __global const float *alibib,
             __global const int *cub, const ffpa_cl_kv_params kv, __global const int *btb,
             __global const int *lensb)
{
    __local ushort ring[2 * SLOT] __attribute__((aligned(128)));
#if WN > 1
    __local ushort pbuf[BR * BC] __attribute__((aligned(128))); /* P of the tile, a 64-column slab */
#endif
    __local float red[BR * WN]; /* per (row, warp column): the row's max over the warp's keys, at the end its sum */
    FFPA_MMA_SCRATCH;           /* the emulated matrix layer's (cl_mma.h); nothing on NVIDIA */

    const int tid = (int)get_local_id(0), lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN, g = lane >> 2, t4 = lane & 3;
    const int row0 = 16 * wm + g; /* this lane's rows in the block: row0 and row0 + 8 */
    const fwd_group w = fwd_group_of(p, kv, cub, lensb, BR);
    if (w.rows <= 0)
        return; /* the whole work-group */

    int tile_begin;
    const int tile_end = fwd_key_tiles(p, w, BC, &tile_begin);
    const int nqk = (p.dqk + DC - 1) / DC;
    /* This lane's two rows: query rows i0, i1 of heads h0, h1 (packed heads: kernels/cl_kv.h). */
    const int i0 = fwd_row_query(p, w.q0 + row0), i1 = fwd_row_query(p, w.q0 + row0 + 8);
    const int h0 = fwd_row_head(p, w, w.q0 + row0), h1 = fwd_row_head(p, w, w.q0 + row0 + 8);
    const float slope0 = alibi_slope(p, alibib, w.b, h0), slope1 = alibi_slope(p, alibib, w.b, h1);
    const int q_first = fwd_row_query(p, w.q0), q_last = fwd_row_query(p, w.q0 + BR - 1);
    /* score() is the scale alone (FFPA_CL_PLAIN_TILES=0: score() everywhere, for A/B runs) */
    const int plain = FFPA_CL_PLAIN_TILES && !p.has_bias && !(p.softcap > 0.0f) && !p.has_alibi;
    const float scale_log2 = p.scale * M_LOG2E_F;

    float4 o[OCH][ONT];
FFPA_UNROLL
    for (int v = 0; v < OCH; ++v)
FFPA_UNROLL
        for (int n = 0; n < ONT; ++n)
            o[v][n] = (float4)(0.0f);
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* running max (log2 units), lane's partial sums */

    if (tile_begin < tile_end)
        issue_step(ring, tile_begin, 0, nqk, p, kv, btb, w, qb, kb, vb, tid);
    copy_async_commit();
    int slot = 0;
    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const int kv0 = tile * BC;
        float4 s[KNT];
FFPA_UNROLL
        for (int n = 0; n < KNT; ++n)
            s[n] = (float4)(0.0f);

        for (int c = 0; c < nqk; ++c) {
            copy_async_wait_all();
            barrier(CLK_LOCAL_MEM_FENCE); /* step c landed; every warp is done with the other slot */
            issue_step(ring + (slot ^ 1) * SLOT, tile, c + 1, nqk, p, kv, btb, w, qb, kb, vb, tid);
            copy_async_commit();
            __local ushort *qs = ring + slot * SLOT, *ks = qs + BR * DC;
FFPA_UNROLL
            for (int kk = 0; kk < DC / 16; ++kk) {
                const uint4 a = ldsm_x4(lds_addr(qs + slab_at(16 * wm + (lane & 15), 16 * kk + (lane >> 4) * 8, DC)));
FFPA_UNROLL
                for (int np = 0; np < KNT / 2; ++np) {
                    const uint4 bk = ldsm_x4(lds_addr(ks + slab_at(wn * KW + np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                                   16 * kk + ((lane >> 3) & 1) * 8, DC)));
                    s[2 * np] = MMA(s[2 * np], a, bk.x, bk.y);
                    s[2 * np + 1] = MMA(s[2 * np + 1], a, bk.z, bk.w);
                }
            }
            slot ^= 1;
        }

        /* Scores (log2 units) and this warp's share of each row's max. A
         * tile every row sees whole, in a call without bias, softcap or
         * ALiBi, needs only the scale (one multiply); the others go through
         * score() element by element. */
        float mx0 = -INFINITY, mx1 = -INFINITY;
        const int interior = plain && kv0 + BC <= w.sg.seqlen_k && w.q0 + BR <= w.sg.seqlen_q * p.pack &&
                             kv0 >= first_col(p, q_last, w.diag) && kv0 + BC - 1 <= last_col(p, q_first, w.diag);
        if (interior) {
FFPA_UNROLL
            for (int n = 0; n < KNT; ++n) {
                s[n] *= scale_log2;
                mx0 = fmax(mx0, fmax(s[n].x, s[n].y));
                mx1 = fmax(mx1, fmax(s[n].z, s[n].w));
            }
        } else {
FFPA_UNROLL
            for (int n = 0; n < KNT; ++n) {
                const int j = kv0 + wn * KW + n * 8 + 2 * t4;
                s[n].x = SCORE(s[n].x, i0, h0, slope0, j) * M_LOG2E_F;
                s[n].y = SCORE(s[n].y, i0, h0, slope0, j + 1) * M_LOG2E_F;
                s[n].z = SCORE(s[n].z, i1, h1, slope1, j) * M_LOG2E_F;
                s[n].w = SCORE(s[n].w, i1, h1, slope1, j + 1) * M_LOG2E_F;
                mx0 = fmax(mx0, fmax(s[n].x, s[n].y));
                mx1 = fmax(mx1, fmax(s[n].z, s[n].w));
            }
        }
        mx0 = fmax(mx0, shfl_xor(mx0, 1));
        mx0 = fmax(mx0, shfl_xor(mx0, 2));
        mx1 = fmax(mx1, shfl_xor(mx1, 1));
        mx1 = fmax(mx1, shfl_xor(mx1, 2));
#if WN > 1
        if (t4 == 0) {
            red[row0 * WN + wn] = mx0;
            red[(row0 + 8) * WN + wn] = mx1;
        }
#endif
        uint4 pa[BC / 16]; /* P as A fragments, one per 16 keys */

FFPA_UNROLL
        for (int v = 0; v < OCH; ++v) {
            copy_async_wait_all();
            barrier(CLK_LOCAL_MEM_FENCE); /* V chunk v landed (and, at v = 0, every warp's row maxima) */
            {
                const int c = nqk + v + 1, more = v + 1 < OCH;
                if (more || tile + 1 < tile_end)
                    issue_step(ring + (slot ^ 1) * SLOT, more ? tile : tile + 1, more ? c : 0, nqk, p, kv, btb, w,
                               qb, kb, vb, tid);
                copy_async_commit();
            }
            if (v == 0) {
#if WN > 1
                for (int x = 0; x < WN; ++x) {
                    mx0 = fmax(mx0, red[row0 * WN + x]);
                    mx1 = fmax(mx1, red[(row0 + 8) * WN + x]);
                }
#endif
                const float new0 = fmax(m0, mx0), new1 = fmax(m1, mx1);
                const float ref0 = new0 == -INFINITY ? 0.0f : new0, ref1 = new1 == -INFINITY ? 0.0f : new1;
                const float alpha0 = exp2(m0 - ref0), alpha1 = exp2(m1 - ref1);
                m0 = new0;
                m1 = new1;
                float sum0 = 0.0f, sum1 = 0.0f;
FFPA_UNROLL
                for (int n = 0; n < KNT; ++n) {
                    s[n].x = exp2(s[n].x - ref0);
                    s[n].y = exp2(s[n].y - ref0);
                    s[n].z = exp2(s[n].z - ref1);
                    s[n].w = exp2(s[n].w - ref1);
                    sum0 += s[n].x + s[n].y; /* before dropout: the LSE is that of the scores */
                    sum1 += s[n].z + s[n].w;
                    if (p.has_dropout) {
                        const int j = kv0 + wn * KW + n * 8 + 2 * t4;
#define FFPA_KEEP(h, i, jj) ffpa_dropout_keep(p.dropout_seed, p.dropout_offset, p.dropout_threshold, p.hq, w.b, h, i, jj)
                        s[n].x = FFPA_KEEP(h0, i0, j) ? s[n].x * p.dropout_scale : 0.0f;
                        s[n].y = FFPA_KEEP(h0, i0, j + 1) ? s[n].y * p.dropout_scale : 0.0f;
                        s[n].z = FFPA_KEEP(h1, i1, j) ? s[n].z * p.dropout_scale : 0.0f;
                        s[n].w = FFPA_KEEP(h1, i1, j + 1) ? s[n].w * p.dropout_scale : 0.0f;
#undef FFPA_KEEP
                    }
                }
                l0 = l0 * alpha0 + sum0;
                l1 = l1 * alpha1 + sum1;
FFPA_UNROLL
                for (int vv = 0; vv < OCH; ++vv)
FFPA_UNROLL
                    for (int n = 0; n < ONT; ++n)
                        o[vv][n] *= (float4)(alpha0, alpha0, alpha1, alpha1);
#if WN == 1
FFPA_UNROLL
                for (int kk = 0; kk < BC / 16; ++kk)
                    pa[kk] = (uint4)(pack_pair(s[2 * kk].x, s[2 * kk].y), pack_pair(s[2 * kk].z, s[2 * kk].w),
                                     pack_pair(s[2 * kk + 1].x, s[2 * kk + 1].y),
                                     pack_pair(s[2 * kk + 1].z, s[2 * kk + 1].w));
#else
FFPA_UNROLL
                for (int n = 0; n < KNT; ++n) {
                    const int col = wn * KW + n * 8 + 2 * t4;
                    *(__local uint *)(pbuf + slab_at(row0, col, BC)) = pack_pair(s[n].x, s[n].y);
                    *(__local uint *)(pbuf + slab_at(row0 + 8, col, BC)) = pack_pair(s[n].z, s[n].w);
                }
                barrier(CLK_LOCAL_MEM_FENCE); /* the whole tile's P */
FFPA_UNROLL
                for (int kk = 0; kk < BC / 16; ++kk)
                    pa[kk] = ldsm_x4(lds_addr(pbuf + slab_at(16 * wm + (lane & 15), 16 * kk + (lane >> 4) * 8, BC)));
#endif
            }
            __local ushort *vs = ring + slot * SLOT + wn * BC * VC;
FFPA_UNROLL
            for (int kk = 0; kk < BC / 16; ++kk)
FFPA_UNROLL
                for (int np = 0; np < ONT / 2; ++np) {
                    const uint4 bv = ldsm_x4_trans(lds_addr(
                        vs + slab_at(16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8, np * 16 + (lane >> 4) * 8, VC)));
                    o[v][2 * np] = MMA(o[v][2 * np], pa[kk], bv.x, bv.y);
                    o[v][2 * np + 1] = MMA(o[v][2 * np + 1], pa[kk], bv.z, bv.w);
                }
            slot ^= 1;
        }
    }

    /* Each row's sum over its four lanes and WN warps; O / l and the LSE.
     * Rows that saw no key give O = 0 and LSE = -inf. */
    l0 += shfl_xor(l0, 1);
    l0 += shfl_xor(l0, 2);
    l1 += shfl_xor(l1, 1);
    l1 += shfl_xor(l1, 2);
#if WN > 1
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp has read the last tile's maxima */
    if (t4 == 0) {
        red[row0 * WN + wn] = l0;
        red[(row0 + 8) * WN + wn] = l1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    l0 = l1 = 0.0f;
    for (int x = 0; x < WN; ++x) {
        l0 += red[row0 * WN + x];
        l1 += red[(row0 + 8) * WN + x];
    }
#endif
    for (int upper = 0; upper < 2; ++upper) {
        const int i = upper ? i1 : i0, h = upper ? h1 : h0;
        const float total = upper ? l1 : l0, inv = total > 0.0f ? 1.0f / total : 0.0f;
        if (row0 + 8 * upper >= w.rows)
            break;
        const long o_row = fwd_o_row(p, w, h, i);
FFPA_UNROLL
        for (int v = 0; v < OCH; ++v)
FFPA_UNROLL
            for (int n = 0; n < ONT; ++n) {
                const int col = wn * OC + v * VC + n * 8 + 2 * t4;
                const float a = upper ? o[v][n].z : o[v][n].x, b = upper ? o[v][n].w : o[v][n].y;
                if (col < p.dv)
                    store_elem(ob, o_row + (long)col * p.o_sd, a * inv, p.o_dt);
                if (col + 1 < p.dv)
                    store_elem(ob, o_row + (long)(col + 1) * p.o_sd, b * inv, p.o_dt);
            }
        if (p.has_lse && wn == 0 && t4 == 0)
            lseb[fwd_lse_at(p, w, h, i)] = total > 0.0f ? (upper ? m1 : m0) * M_LN2_F + log(total) : -INFINITY;
    }
}
