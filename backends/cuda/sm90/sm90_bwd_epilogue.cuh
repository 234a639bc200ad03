/*
 * Epilogue pieces of the Hopper backward:
 *   store_grad: a consumer's dK or dV columns of one pass (64 keys x 128
 *               or 64 columns, fp32 registers) into the output view,
 *               rounded once;
 *   reduce_dq:  its dQ = dS K columns of one query tile into the dQ
 *               accumulator, the fp32 buffer or the output itself (every
 *               key block of the head adds into the same rows; in
 *               deterministic mode in a fixed order, through turn counters);
 *   stage_dq / tma_add_dq_boxes: the same into the fp32 buffer through TMA
 *               reductions, staged by the consumer and issued by a
 *               producer thread (the kernels' dQ reducers);
 *   add_dq_bulk: staged and issued by the consumer (the 3-slot cluster
 *               kernels, BwdConfig::kDqByProducer).
 * Accumulators are wgmma m64n128 (or m64n64: kRegs = 32) fragments: value
 * 4j + 2h + e of a thread is row 16 * warp + lane / 4 + 8h, column
 * 8j + 2 * (lane % 4) + e.
 */
#ifndef FFPA_CUDA_SM90_BWD_EPILOGUE_CUH
#define FFPA_CUDA_SM90_BWD_EPILOGUE_CUH

#include "bwd/bwd_params.h"
#include "sm90_arch.cuh"

namespace ffpa {
namespace sm90 {

/* The dK and dV output views (the kernel writes them directly: one CTA owns
 * each key row of each kv head). Element (b, h, n, d) of a view is at
 * h*sh + (varlen ? (cu_k[b] + n) * sn : b*sb + n*sn) + d*sd. */
struct BwdOutViews {
    void *dk, *dv;
    int64_t dk_sb, dk_sh, dk_sn, dk_sd;
    int64_t dv_sb, dv_sh, dv_sn, dv_sd;
};

/* f(r, c, a, b) for each of this thread's value pairs (columns c, c + 1 of
 * row r) with r < rows_valid and c < dim (dim a multiple of 8, so c + 1 <
 * dim as well). */
template <int kRegs, class F>
FFPA_DEV void for_each_pair(const float (&acc)[kRegs], int rows_valid, int col0, int dim, int ctid, F &&f)
{
    const int warp = ctid >> 5, lane = ctid & 31;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = warp * 16 + (lane >> 2) + 8 * half;
        if (r >= rows_valid)
            continue;
#pragma unroll
        for (int j = 0; j < kRegs / 4; ++j) {
            const int c = col0 + 8 * j + 2 * (lane & 3);
            if (c < dim)
                f(r, c, acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
        }
    }
}

/* out points at (key 0 of the block, column 0); element (r, c) at
 * r * sn + c * sd. Rows >= rows_valid and columns >= dim are not written. */
template <typename T, int kRegs>
FFPA_DEV void store_grad(const float (&acc)[kRegs], T *out, int64_t sn, int64_t sd, int rows_valid, int col0, int dim,
                         int ctid)
{
    for_each_pair(acc, rows_valid, col0, dim, ctid, [&](int r, int c, float a, float b) {
        T *row = out + (int64_t)r * sn;
        row[(int64_t)c * sd] = arch::from_f32<T>(a);
        row[(int64_t)(c + 1) * sd] = arch::from_f32<T>(b);
    });
}

/* The tile's dQ columns added into the dQ accumulator: the fp32 buffer
 * (8-byte vector reductions) or, with FFPA_GRAD_ACCUM_OUTPUT, the output
 * view of dtype T itself (16-bit pair reductions, each partial sum rounded).
 * row0: element offset of (row 0 of the tile, column 0); rows at stride
 * dq.sn (even), columns contiguous. */
template <typename T, int kRegs>
FFPA_DEV void reduce_dq(const float (&acc)[kRegs], const ffpa_bwd_acc &dq, int64_t row0, int rows_valid, int col0,
                        int dim, int ctid)
{
    if (dq.is_f32) {
        float *base = static_cast<float *>(dq.data) + row0;
        for_each_pair(acc, rows_valid, col0, dim, ctid,
                      [&](int r, int c, float a, float b) { red_add_v2(base + (int64_t)r * dq.sn + c, a, b); });
    } else {
        T *base = static_cast<T *>(dq.data) + row0;
        for_each_pair(acc, rows_valid, col0, dim, ctid,
                      [&](int r, int c, float a, float b) { red_add_pair<T>(base + (int64_t)r * dq.sn + c, a, b); });
    }
}

/* A consumer's dQ columns (64 rows x 128 fp32, a wgmma fragment; 64 columns:
 * kRegs = 32, lo only) into two freed 16 KiB ring slots, as the four 64-row x 32-column boxes of the
 * fp32 dQ tensor map in its 128-byte swizzle: box k (columns [32k, 32k+32))
 * at lo + 8 KiB k for k < 2, hi + 8 KiB (k - 2) after. Each quarter-warp
 * store covers 8 rows whose swizzled 16-byte chunks fall on distinct banks.
 * Rows >= rows_valid are written as zeros: the TMA reduction adds whole
 * boxes, and in a packed (varlen) buffer those rows are the next sequence's. */
template <int kRegs>
FFPA_DEV void stage_dq(const float (&acc)[kRegs], uint8_t *lo, uint8_t *hi, int rows_valid, int ctid)
{
    const int warp = ctid >> 5, lane = ctid & 31, quad = lane & 3;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = warp * 16 + (lane >> 2) + 8 * half;
        const bool live = r < rows_valid;
#pragma unroll
        for (int j = 0; j < kRegs / 4; ++j) {
            uint8_t *box = (j < 8 ? lo : hi) + ((j >> 2) & 1) * 8192;
            const int chunk = 2 * (j & 3) + (quad >> 1);
            const float2 v = live ? make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]) : make_float2(0, 0);
            *reinterpret_cast<float2 *>(box + r * 128 + ((chunk ^ (r & 7)) << 4) + 8 * (quad & 1)) = v;
        }
    }
}

#ifdef FFPA_SM90_BWD_DIAG_SKIP_DQ /* diagnostic builds (gpu.sh diag, DIAG=3): timing without dQ */
constexpr bool kDiagSkipDq = true;
#else
constexpr bool kDiagSkipDq = false;
#endif

/* Deterministic dQ: the key blocks of a (batch, kv head) add into each dQ
 * tile in descending order, the last one that sees the tile first. Their
 * CTAs are launched in that order (bwd_work), so a CTA only ever waits for
 * CTAs launched before it, which are resident or done: no deadlock. With
 * causal masking a block's first tile is the one its predecessor in the
 * order reached one tile earlier, so the waits pipeline instead of
 * serialising. The counters and turns: BwdWork::dq_turn. */

FFPA_DEV int ld_acquire_gpu(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

FFPA_DEV void st_release_gpu(int *p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

FFPA_DEV void dq_turn_spin(const int *turn, int mine)
{
    while (ld_acquire_gpu(turn) != mine)
        __nanosleep(32);
}

/* One thread of the 128 waits for the turn; the named barrier `bar` holds
 * the others until it comes. */
FFPA_DEV void dq_turn_wait(const int *turn, int mine, int bar, int ctid)
{
    if (ctid == 0)
        dq_turn_spin(turn, mine);
    named_barrier_sync(bar, 128);
}

/* Every thread's reductions are performed before the turn passes on. */
FFPA_DEV void dq_turn_pass(int *turn, int mine, int bar, int ctid)
{
    __threadfence();
    named_barrier_sync(bar, 128);
    if (ctid == 0)
        st_release_gpu(turn, mine + 1);
}

/* One thread adds kBoxes (4, or 2: lo and lo + 8 KiB only) staged 64 x 32
 * fp32 boxes (lo, lo + 8 KiB, hi, hi + 8 KiB) into `map` at columns col,
 * col + 32, ... of (row, h, b) by TMA
 * reductions and returns once the TMA has read them. In deterministic mode
 * (turn) it adds at this key block's turn and passes the turn once the
 * reductions are performed; the proxy fence keeps them (async proxy) after
 * the acquire. Used by the producer threads' dQ reducers (bwd_dq_reducer,
 * bwd_dq_bulk_reducer, bwd_grads_dq_reducer) and by add_dq_bulk. */
template <int kBoxes = 4>
FFPA_DEV void tma_add_dq_boxes(uint8_t *lo, uint8_t *hi, const CUtensorMap *map, int col, int row, int h, int b,
                               int *turn, int mine)
{
    if (turn) {
        dq_turn_spin(turn, mine);
        asm volatile("fence.proxy.async.global;\n" ::: "memory");
    }
    if constexpr (!kDiagSkipDq) {
#pragma unroll
        for (int k = 0; k < kBoxes; ++k)
            tma_reduce_add_4d((k < 2 ? lo : hi) + (k & 1) * 8192, map, col + 32 * k, row, h, b);
    }
    bulk_commit();
    if (turn) {
        bulk_wait_all();
        st_release_gpu(turn, mine + 1);
    } else {
        bulk_wait_read();
    }
}

/* A consumer's dQ columns added into the fp32 buffer by TMA reductions:
 * staged in lo and hi (its two own ring slots, which it still holds), then
 * thread 0 adds them (tma_add_dq_boxes) and frees the slots (4 warp
 * arrivals on each empty barrier) once the TMA has read them. `bar`: the
 * consumer's named barrier. */
FFPA_DEV void add_dq_bulk(const float (&acc)[64], uint8_t *lo, uint8_t *hi, uint64_t *lo_empty, uint64_t *hi_empty,
                          const CUtensorMap *map, int col, int row, int h, int b, int rows_valid, int *turn, int mine,
                          int bar, int ctid)
{
    stage_dq(acc, lo, hi, rows_valid, ctid);
    fence_proxy_async_shared();
    named_barrier_sync(bar, 128);
    if (ctid == 0) {
        tma_add_dq_boxes(lo, hi, map, col, row, h, b, turn, mine);
        mbar_arrive_n(lo_empty, 4);
        mbar_arrive_n(hi_empty, 4);
    }
    /* Warp 0 goes on converged (lane 0 alone waited for the TMA's read). */
    __syncwarp();
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
