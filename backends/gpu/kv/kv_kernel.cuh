/*
 * Attention over a paged KV cache, vendor-neutral device code (the CUDA and
 * HIP backends instantiate it over their arch layer):
 *
 *   kv_schedule_body  one block: the split-KV schedule of common/kv_sched.h
 *                     from the device-side cache lengths (no host round trip)
 *   kv_append_body    the step's new K/V rows into their pages
 *   kv_attn_body      one block = (sequence, kv head, split, q tile): the
 *                     query rows of every head that shares the kv head
 *                     (packed heads) against the split's key tiles, read
 *                     from the pages through the block table; the key tile
 *                     loop is the forward's (fwd_key_tile, Split-D over
 *                     D chunks, online softmax)
 *   kv_merge_body     one block per packed row: the splits' partial O/LSE
 *                     merged by LSE (flash-decoding)
 *
 * Requires the arch layer (ffpa::arch) to be included first.
 */
#ifndef FFPA_GPU_KV_KERNEL_CUH
#define FFPA_GPU_KV_KERNEL_CUH

#include "../fwd_kernel.cuh"
#include "kv_params.h"
#include "kv_sched.h"
#include "lse_merge.h"

namespace ffpa {

constexpr int kKvScheduleThreads = 256;

/* The schedule (kv_sched.h, ffpa_kv_sched_make) computed by one block. */
__device__ __forceinline__ void kv_schedule_body(const ffpa_gpu_kv_params &p)
{
    __shared__ unsigned long long total_work;
    __shared__ unsigned int longest;
    __shared__ int32_t partial[kKvScheduleThreads];
    const int tid = threadIdx.x, n = p.batch;
    if (tid == 0) {
        total_work = 0;
        longest = 0;
    }
    __syncthreads();
    unsigned long long work = 0;
    unsigned int most = 0;
    for (int b = tid; b < n; b += kKvScheduleThreads) {
        const int64_t len = ffpa_kv_seq_len(p.seqlens, p.uniform_len, b, p.added, p.capacity);
        p.sched_len[b] = len;
        const int64_t tiles = ffpa_kv_key_tiles(len, p.bc);
        work += (unsigned long long)(tiles * p.hkv * p.q_tiles);
        most = max(most, (unsigned int)tiles);
    }
    atomicAdd(&total_work, work);
    atomicMax(&longest, most);
    __syncthreads(); /* also publishes sched_len to the block */
    const int64_t tps = ffpa_kv_tiles_per_split((int64_t)total_work, p.target_blocks, (int64_t)longest);
    for (int b = tid; b < n; b += kKvScheduleThreads) {
        const int64_t rank = ffpa_kv_rank(p.sched_len, n, b);
        p.sched_seq[rank] = b;
        p.sched_rank[b] = (int32_t)rank;
    }
    __syncthreads();
    /* Exclusive scan of the blocks per rank: each thread a contiguous run. */
    const int per = (n + kKvScheduleThreads - 1) / kKvScheduleThreads;
    const int k0 = tid * per, k1 = min(n, k0 + per);
    int32_t run = 0;
    for (int k = k0; k < k1; ++k)
        run += (int32_t)(ffpa_kv_splits(ffpa_kv_key_tiles(p.sched_len[p.sched_seq[k]], p.bc), tps) * p.hkv *
                         p.q_tiles);
    partial[tid] = run;
    __syncthreads();
    if (tid == 0) {
        int32_t acc = 0;
        for (int t = 0; t < kKvScheduleThreads; ++t) {
            int32_t x = partial[t];
            partial[t] = acc;
            acc += x;
        }
        p.sched_first[n] = acc;
        p.sched_tps[0] = (int32_t)tps;
    }
    __syncthreads();
    int32_t acc = partial[tid];
    for (int k = k0; k < k1; ++k) {
        p.sched_first[k] = acc;
        acc += (int32_t)(ffpa_kv_splits(ffpa_kv_key_tiles(p.sched_len[p.sched_seq[k]], p.bc), tps) * p.hkv *
                         p.q_tiles);
    }
}

/* Page of key j of sequence b, or -1 outside the pool (never dereferenced). */
__device__ __forceinline__ int kv_page(const ffpa_gpu_kv_params &p, int b, int j)
{
    if (!p.block_table)
        return b;
    const int page = p.block_table[(int64_t)b * p.bt_stride + j / p.page_size];
    return page >= 0 && page < p.num_pages ? page : -1;
}

/* One block per (new token, kv head, sequence): copies its K (and V) row. */
template <typename T> __device__ __forceinline__ void kv_append_body(const ffpa_gpu_kv_params &p)
{
    const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int pos = p.seqlens[b] + t;
    if (pos < 0 || pos >= p.capacity)
        return;
    const int page = kv_page(p, b, pos), row = pos % p.page_size;
    if (page < 0)
        return;
    T *kd = static_cast<T *>(const_cast<void *>(p.k)) + (int64_t)page * p.k_sp + (int64_t)h * p.k_sh +
            (int64_t)row * p.k_sn;
    const T *ks = static_cast<const T *>(p.k_new) + (int64_t)b * p.kn_sb + (int64_t)h * p.kn_sh + (int64_t)t * p.kn_sn;
    for (int c = threadIdx.x * 8; c < p.dqk; c += blockDim.x * 8)
        *reinterpret_cast<uint4 *>(kd + c) = *reinterpret_cast<const uint4 *>(ks + c);
    if (!p.v_new)
        return;
    T *vd = static_cast<T *>(const_cast<void *>(p.v)) + (int64_t)page * p.v_sp + (int64_t)h * p.v_sh +
            (int64_t)row * p.v_sn;
    const T *vs = static_cast<const T *>(p.v_new) + (int64_t)b * p.vn_sb + (int64_t)h * p.vn_sh + (int64_t)t * p.vn_sn;
    for (int c = threadIdx.x * 8; c < p.dv; c += blockDim.x * 8)
        *reinterpret_cast<uint4 *>(vd + c) = *reinterpret_cast<const uint4 *>(vs + c);
}

/* What a block of the attention kernel works on. */
struct KvWork {
    int b, kvh, split, splits, m;
    int len;          /* keys of the sequence */
    int tile_begin, tile_end;
    int rank;
};

/* Block blk of the schedule; false for blocks past the last. */
__device__ __forceinline__ bool kv_work(const ffpa_gpu_kv_params &p, int blk, KvWork &w)
{
    if (blk >= p.sched_first[p.batch])
        return false;
    int lo = 0, hi = p.batch - 1; /* last rank whose first block <= blk */
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (p.sched_first[mid] <= blk)
            lo = mid;
        else
            hi = mid - 1;
    }
    w.rank = lo;
    w.b = p.sched_seq[lo];
    w.len = (int)p.sched_len[w.b];
    const int tps = p.sched_tps[0];
    const int tiles = (int)ffpa_kv_key_tiles(w.len, p.bc);
    w.splits = (int)ffpa_kv_splits(tiles, tps);
    int local = blk - p.sched_first[lo];
    w.m = local % p.q_tiles;
    local /= p.q_tiles;
    w.split = local % w.splits;
    w.kvh = local / w.splits;
    w.tile_begin = w.split * tps;
    w.tile_end = min(tiles, w.tile_begin + tps);
    return true;
}

/* Element offset, in a q-side view with head / row strides sh, sn, of packed
 * row rr of kv head kvh: token rr / group of query head kvh * group + rr % group. */
__device__ __forceinline__ int64_t kv_row_offset(const ffpa_gpu_kv_params &p, int64_t sh, int64_t sn, int kvh,
                                                 int rr)
{
    return (int64_t)(kvh * p.group + rr % p.group) * sh + (int64_t)(rr / p.group) * sn;
}

template <class Cfg> __device__ __forceinline__ void kv_attn_body(const ffpa_gpu_kv_params &p)
{
    using T = typename Cfg::T;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    KvWork w;
    if (!kv_work(p, blockIdx.x, w))
        return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / Cfg::kWN, wn = warp % Cfg::kWN;
    const int rr0 = w.m * Cfg::kBr;
    const int rows_valid = min(Cfg::kBr, p.rows - rr0);
    const int shift = w.len - p.nq; /* token i sees keys j <= i + shift (causal) */
    /* Keys token t sees: [first_col(t), last_col(t)] (causal, window; both
     * grow with t), bottom-right aligned like the other kernels' masks. */
    const int wl = p.window ? p.window_left : -1, wr = p.window ? p.window_right : -1;
    auto first_col = [&](int t) { return wl >= 0 ? t + shift - wl : -(1 << 30); };
    auto last_col = [&](int t) {
        int last = w.len - 1;
        if (p.causal)
            last = min(last, t + shift);
        if (wr >= 0)
            last = min(last, t + shift + wr);
        return last;
    };

    /* The block's first token bounds where its keys start, its last token
     * where they end: the tiles outside are skipped, not masked. */
    const int t_first = rr0 / p.group, t_last = (rr0 + rows_valid - 1) / p.group;
    int tile_end = w.tile_end;
    const int block_end_col = last_col(t_last);
    tile_end = min(tile_end, block_end_col < 0 ? 0 : block_end_col / Cfg::kBc + 1);
    const int tile_begin = max(w.tile_begin, max(0, first_col(t_first)) / Cfg::kBc);
    tile_end = max(tile_end, tile_begin);

    const FwdRegions<Cfg> sh = fwd_regions<Cfg>(smem_raw, 1, p.qk_chunks, p.stages);
    T *q_region = sh.q_region, *ring = sh.ring;
    const int slot_elems = sh.slot_elems;

    /* Q: the packed rows of every D chunk, resident for the whole loop. */
    {
        constexpr int pieces = Cfg::kCols / 8;
        const T *qb = static_cast<const T *>(p.q) + (int64_t)w.b * p.q_sb;
        const int n = Cfg::kBr * pieces * p.qk_chunks;
        for (int i = tid; i < n; i += Cfg::kThreads) {
            const int c = i / (Cfg::kBr * pieces), rem = i % (Cfg::kBr * pieces);
            const int r = rem / pieces, col = (rem % pieces) * 8;
            const bool ok = r < rows_valid && c * Cfg::kCols + col < p.dqk;
            const T *src = ok ? qb + kv_row_offset(p, p.q_sh, p.q_sn, w.kvh, rr0 + r) + c * Cfg::kCols + col : qb;
            arch::cp_async_16(arch::smem_u32(q_region + c * Cfg::kBr * Cfg::kCols + swz<Cfg::kCols>(r, col)), src,
                              ok ? 16 : 0);
        }
    }

    /* Producer: K slabs then V slabs of each key tile. A thread copies one
     * 16-byte column piece of rows r0, r0 + kRowStep, ... Pages hold a
     * multiple of 16 tokens (a dense cache's rows never wrap), so the 16
     * keys of a group share a page: the table is read once per group and
     * tile, and the group of row r0 + it * kRowStep is a constant. */
    constexpr int kPieces = Cfg::kCols / 8;
    constexpr int kRowStep = Cfg::kThreads / kPieces;
    constexpr int kIters = (Cfg::kBc + kRowStep - 1) / kRowStep;
    constexpr int kGroups = Cfg::kBc / 16;
    static_assert(Cfg::kThreads % kPieces == 0, "a thread keeps its column");
    static_assert(16 % kRowStep == 0 && Cfg::kBc % 16 == 0, "a thread's rows keep their 16-key group");
    const int r0 = tid / kPieces, pc = (tid % kPieces) * 8;
    int group_page[kGroups], group_row[kGroups]; /* page (-1: none) and row in it of each group's first key */
    const T *kbase = static_cast<const T *>(p.k) + (int64_t)w.kvh * p.k_sh;
    const T *vbase = static_cast<const T *>(p.v) + (int64_t)w.kvh * p.v_sh;
    const int slabs_per_tile = p.qk_chunks + p.v_chunks;
    int ld_left = (tile_end - tile_begin) * slabs_per_tile, ld_s = 0, ld_slot = 0, ld_tile = tile_begin;
    auto load_next = [&]() {
        if (ld_left <= 0)
            return;
        if (ld_s == 0) {
#pragma unroll
            for (int g = 0; g < kGroups; ++g) {
                const int j = ld_tile * Cfg::kBc + 16 * g;
                group_page[g] = j < w.len ? kv_page(p, w.b, j) : -1;
                group_row[g] = j % p.page_size;
            }
        }
        const int keys_left = w.len - ld_tile * Cfg::kBc;
        T *slot = ring + ld_slot * slot_elems;
        const bool is_k = ld_s < p.qk_chunks;
        const int col = (is_k ? ld_s : ld_s - p.qk_chunks) * Cfg::kCols + pc;
        const bool col_ok = col < (is_k ? p.dqk : p.dv);
        const T *base = is_k ? kbase : vbase;
        const int64_t sp = is_k ? p.k_sp : p.v_sp, sn = is_k ? p.k_sn : p.v_sn;
#pragma unroll
        for (int it = 0; it < kIters; ++it) {
            const int r = r0 + it * kRowStep, g = it * kRowStep / 16;
            if (Cfg::kBc % kRowStep == 0 || r < Cfg::kBc) {
                const bool ok = col_ok && r < keys_left && group_page[g] >= 0;
                const T *src =
                    ok ? base + (int64_t)group_page[g] * sp + (int64_t)(group_row[g] + (r & 15)) * sn + col : base;
                arch::cp_async_16(arch::smem_u32(slot + swz<Cfg::kCols>(r, pc)), src, ok ? 16 : 0);
            }
        }
        --ld_left;
        if (++ld_s == slabs_per_tile) {
            ld_s = 0;
            ++ld_tile;
        }
        if (++ld_slot == p.stages)
            ld_slot = 0;
    };
    /* Q joins the first group. */
    ring_prologue(p.stages, load_next);
    int cur_slot = 0;
    auto next_slab = slab_ring(ring, slot_elems, p.stages, cur_slot, load_next);

    arch::FragC o[Cfg::kVSlabs][Cfg::kONT];
    zero_o<Cfg>(o);
    OnlineSoftmax sm;
    sm.init();

    /* Keys each of this lane's two rows sees, their token's diagonal and
     * their head's ALiBi slope (log2 domain). */
    int first_key[2], last_key[2], diag_col[2];
    float slope[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int rr = rr0 + wm * 16 + arch::frag_c_row(lane, 2 * half);
        first_key[half] = first_col(rr / p.group);
        last_key[half] = last_col(rr / p.group);
        diag_col[half] = rr / p.group + shift;
        const int h = w.kvh * p.group + rr % p.group;
        slope[half] = p.alibi ? p.alibi[(int64_t)w.b * p.alibi_sb + (int64_t)h * p.alibi_sh] * 1.4426950408889634f
                              : 0.0f;
    }
    /* A tile needs the per-element mask where it reaches past the block's
     * first row's last key or before its last row's first key. */
    const int block_last_key = last_col(t_first), block_first_key = first_col(t_last);

    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const int col0 = tile * Cfg::kBc;
        const bool need_mask = col0 + Cfg::kBc - 1 > block_last_key || col0 < block_first_key;
        fwd_key_tile<Cfg>(
            o, sm, sh.spart, p.qk_chunks, p.v_chunks, p.dqk, p.dv, wm, wn, lane, next_slab,
            [&](int c, const T *) { return q_region + c * Cfg::kBr * Cfg::kCols; },
            [&](arch::FragC(&s)[Cfg::kNT]) {
#pragma unroll
                for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        s[nt].r[e] *= p.scale_log2;
                if (p.softcap_out > 0.0f) {
#pragma unroll
                    for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            s[nt].r[e] = p.softcap_out * arch::tanh_fast(s[nt].r[e] * p.softcap_in);
                }
                if (p.alibi) {
#pragma unroll
                    for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            s[nt].r[e] -= slope[e >> 1] *
                                          (float)abs(diag_col[e >> 1] - (col0 + nt * 8 + arch::frag_c_col(lane, e)));
                }
                if (need_mask) {
#pragma unroll
                    for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int j = col0 + nt * 8 + arch::frag_c_col(lane, e);
                            if (j > last_key[e >> 1] || j < first_key[e >> 1])
                                s[nt].r[e] = -INFINITY;
                        }
                }
            },
            [](arch::FragC(&)[Cfg::kNT]) {});
    }

    float inv_l[2], lse[2];
    sm.finish(inv_l, lse);
    arch::cp_async_wait<0>();
    __syncthreads(); /* every warp is done with the ring: reuse it for O */

    const int64_t blk = blockIdx.x;
    if (w.splits > 1) {
        store_partial<Cfg>(o, inv_l, lse, p.part_o + blk * Cfg::kBr * p.dv, p.part_lse + blk * Cfg::kBr, wm * 16,
                           rows_valid, p.dv, wn, lane);
        return;
    }
    if (p.lse && wn == 0 && (lane & 3) == 0) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = wm * 16 + arch::frag_c_row(lane, 2 * half);
            if (r < rows_valid)
                p.lse[(int64_t)w.b * p.lse_sb + kv_row_offset(p, p.lse_sh, p.lse_sn, w.kvh, rr0 + r)] = lse[half];
        }
    }
    T *ob = static_cast<T *>(p.o) + (int64_t)w.b * p.o_sb;
    store_o_tile<Cfg, T>(o, inv_l, reinterpret_cast<T *>(smem_raw),
                         [&](int r) { return ob + kv_row_offset(p, p.o_sh, p.o_sn, w.kvh, rr0 + r); }, rows_valid,
                         p.dv, wm, wn, lane, tid);
}

/* One block per (packed row, kv head, sequence): merges the row's splits. */
template <typename T> __device__ __forceinline__ void kv_merge_body(const ffpa_gpu_kv_params &p)
{
    const int rr = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int len = (int)p.sched_len[b];
    const int splits = (int)ffpa_kv_splits(ffpa_kv_key_tiles(len, p.bc), p.sched_tps[0]);
    if (splits == 1)
        return; /* the attention block wrote the row */
    const int m = rr / p.tile_rows, r = rr % p.tile_rows;
    const int64_t first = p.sched_first[p.sched_rank[b]] + (int64_t)kvh * splits * p.q_tiles + m;
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s)
        mx = fmaxf(mx, p.part_lse[(first + (int64_t)s * p.q_tiles) * p.tile_rows + r]);
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s)
        sum += ffpa_lse_term(p.part_lse[(first + (int64_t)s * p.q_tiles) * p.tile_rows + r], mx);
    const float lse = ffpa_lse_total(mx, sum); /* common/lse_merge.h, as ffpa_merge_partials */
    T *og = static_cast<T *>(p.o) + (int64_t)b * p.o_sb + kv_row_offset(p, p.o_sh, p.o_sn, kvh, rr);
    for (int c = threadIdx.x; c < p.dv; c += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const int64_t blk = first + (int64_t)s * p.q_tiles;
            const float w = ffpa_lse_weight(p.part_lse[blk * p.tile_rows + r], lse);
            if (w != 0.0f)
                acc += w * p.part_o[(blk * p.tile_rows + r) * p.dv + c];
        }
        og[c] = arch::from_f32<T>(acc);
    }
    if (p.lse && threadIdx.x == 0)
        p.lse[(int64_t)b * p.lse_sb + kv_row_offset(p, p.lse_sh, p.lse_sn, kvh, rr)] = lse;
}

} /* namespace ffpa */

#endif
