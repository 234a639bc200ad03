/*
 * dQ kernel (paper Algorithm 2, dQ half, split launch) and d(bias). A block
 * owns B::kBr query rows of one query head and walks the key tiles it sees
 * (causal: up to the diagonal), streaming per key tile through the ring:
 *   (Q, K) chunks    S = Q K^T                      -> P from the saved LSE
 *   (dO, V) chunks   dP = dO V^T                    -> dS in registers
 *   K chunks         dQ_c += scale * dS K_c          (dS is the A operand)
 * dQ rows belong to this block alone: no atomics. Where one chunk covers
 * Dqk (kResident, dq_resident()), dQ stays in the warps' registers across
 * the key tiles and is written once (else read-modify-written per key
 * tile: 2 x kBr x kChunk fp32 per tile, the tile's GEMMs' worth of L2
 * traffic at D = 128). d(bias) (unscaled dS,
 * summed over the broadcast dimensions) goes through a shared-memory tile
 * into the fp32 dbias buffer, with atomicAdd, or, in deterministic mode, as
 * plain read-modify-writes: the work items that share dbias elements then
 * run inside one block in a fixed order (ffpa_bwd_params.member_*).
 */
#ifndef FFPA_GPU_BWD_DQ_CUH
#define FFPA_GPU_BWD_DQ_CUH

#include "bwd_common.cuh"

namespace ffpa {
namespace bwd {

constexpr int kDqBc = 64;
constexpr int kDqNT = kDqBc / 8;
constexpr int kDbLd = kDqBc + 4; /* fp32 dS tile row (dbias) */

/* dQ of a block's rows fits the warps' registers for the whole key loop
 * (BigCfg: Dqk <= 128, 64 fp32 registers a thread; SmallCfg: <= 64). */
template <class B> __host__ __device__ constexpr bool dq_resident(int dqk)
{
    return dqk <= B::kChunk;
}

/* Shared memory of the dQ kernel: [ring of (kBr + kDqBc) x kChunk slots][dbias tile]. */
template <class B> inline size_t dq_smem_bytes(int stages, int has_dbias, size_t elt)
{
    size_t ring = (size_t)stages * (B::kBr + kDqBc) * B::kChunk * elt;
    size_t db = has_dbias ? ((size_t)B::kBr * kDbLd + B::kBr) * sizeof(float) : 0;
    return ring + db;
}

__device__ __forceinline__ void dbias_add(float *ptr, float v, bool atomic)
{
    if (atomic)
        atomicAdd(ptr, v);
    else
        *ptr += v;
}

/* Adds the block's unscaled dS tile (in dst, rows x cols valid) to dbias. */
template <class B>
__device__ __forceinline__ void dbias_tile(const ffpa_bwd_params &p, const float *dst, float *rowsum, int b, int h,
                                           int q0, int kv0, int rows, int cols, int tid)
{
    const bool atomic = p.dbias_atomic != 0;
    const int64_t gb = p.dbias_gb > 1 ? b : 0, gh = p.dbias_gh > 1 ? h : 0;
    float *base = p.dbias + (gb * p.dbias_gh + gh) * p.dbias_gn * p.dbias_gk;
    if (p.dbias_gn > 1 && p.dbias_gk > 1) {
        for (int e = tid; e < B::kBr * kDqBc; e += B::kThreads) {
            const int r = e / kDqBc, c = e % kDqBc;
            if (r < rows && c < cols)
                dbias_add(base + (int64_t)(q0 + r) * p.dbias_gk + kv0 + c, dst[r * kDbLd + c], atomic);
        }
    } else if (p.dbias_gk > 1) { /* summed over query rows */
        for (int c = tid; c < cols; c += B::kThreads) {
            float sum = 0.f;
            for (int r = 0; r < rows; ++r)
                sum += dst[r * kDbLd + c];
            dbias_add(base + kv0 + c, sum, atomic);
        }
    } else { /* summed over key columns (and over rows when gn == 1) */
        for (int r = tid; r < rows; r += B::kThreads) {
            float sum = 0.f;
            for (int c = 0; c < cols; ++c)
                sum += dst[r * kDbLd + c];
            if (p.dbias_gn > 1)
                dbias_add(base + q0 + r, sum, atomic);
            else
                rowsum[r] = sum;
        }
        if (p.dbias_gn == 1) {
            __syncthreads();
            if (tid == 0) {
                float sum = 0.f;
                for (int r = 0; r < rows; ++r)
                    sum += rowsum[r];
                dbias_add(base, sum, atomic);
            }
        }
    }
}

template <typename T, class B, bool kResident>
__device__ __forceinline__ void dq_item(const ffpa_bwd_params &p, int b, int h, int qb, unsigned char *smem_raw)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const SeqGeom g = seq_geom(p, b);
    const int q0 = qb * B::kBr;
    if (q0 >= g.seqlen_q)
        return;
    const int rows_valid = min(B::kBr, g.seqlen_q - q0);
    const bool varlen = p.cu_q != nullptr;
    const int kvh = h / p.group;
    const int nq2 = (p.dqk + B::kChunk - 1) / B::kChunk, nv2 = (p.dv + B::kChunk - 1) / B::kChunk;
    const int diag = g.seqlen_k - g.seqlen_q;
    const int64_t dq_base = acc_row0(p.dq, p.cu_q, b, h) + (int64_t)q0 * p.dq.sn;

    /* Key tiles the rows may see (causal, window); the rest are skipped. */
    int tile_begin;
    const int tile_end = visible_key_tiles(p.mask, q0, q0 + rows_valid - 1, diag, g.seqlen_k, kDqBc, &tile_begin);
    if (tile_end <= tile_begin) { /* these rows see no key: dQ = 0 (dS = 0: no dbias) */
        for (int i = tid; i < rows_valid * (p.dqk / 2); i += B::kThreads)
            AccPair<T>::store(p.dq, dq_base + (int64_t)(i / (p.dqk / 2)) * p.dq.sn + 2 * (i % (p.dqk / 2)), 0.f, 0.f);
        return;
    }

    const T *qg = static_cast<const T *>(p.q) + row0_offset(p.q_sb, p.q_sh, p.q_sn, g.q_start, varlen, b, h) +
                  (int64_t)q0 * p.q_sn;
    const T *dog = static_cast<const T *>(p.dout) +
                   row0_offset(p.do_sb, p.do_sh, p.do_sn, g.q_start, varlen, b, h) + (int64_t)q0 * p.do_sn;
    const T *kg = static_cast<const T *>(p.k) + row0_offset(p.k_sb, p.k_sh, p.k_sn, g.k_start, varlen, b, kvh);
    const T *vg = static_cast<const T *>(p.v) + row0_offset(p.v_sb, p.v_sh, p.v_sn, g.k_start, varlen, b, kvh);

    T *ring = reinterpret_cast<T *>(smem_raw);
    constexpr int kSlotElems = (B::kBr + kDqBc) * B::kChunk;
    float *dst = reinterpret_cast<float *>(smem_raw + (size_t)p.stages * kSlotElems * sizeof(T));
    float *rowsum = dst + B::kBr * kDbLd;

    const int items_per_tile = 2 * nq2 + nv2;
    const int total_items = (tile_end - tile_begin) * items_per_tile;

    /* Slot = [query-side chunk: kBr x kChunk][key-side chunk: kDqBc x kChunk]. */
    auto load_item = [&](int t) {
        const int tile = tile_begin + t / items_per_tile, it = t % items_per_tile;
        const int kv0 = tile * kDqBc;
        T *slot = ring + (t % p.stages) * kSlotElems;
        T *kslot = slot + B::kBr * B::kChunk;
        const bool is_v = it >= nq2 && it < nq2 + nv2;
        const int chunk = it < nq2 ? it : is_v ? it - nq2 : it - nq2 - nv2;
        const int dim = is_v ? p.dv : p.dqk;
#pragma unroll
        for (int sl = 0; sl < B::kSlabs; ++sl) {
            const int col0 = chunk * B::kChunk + sl * kSlab;
            if (col0 >= dim)
                break;
            if (it < nq2 + nv2) {
                if (is_v)
                    load_tile_async<T, B::kBr, kSlab, B::kThreads>(slot + sl * B::kBr * kSlab, dog, p.do_sn,
                                                                   rows_valid, col0, dim, tid);
                else
                    load_tile_async<T, B::kBr, kSlab, B::kThreads>(slot + sl * B::kBr * kSlab, qg, p.q_sn,
                                                                   rows_valid, col0, dim, tid);
            }
            if (is_v)
                load_tile_async<T, kDqBc, kSlab, B::kThreads>(kslot + sl * kDqBc * kSlab,
                                                              vg + (int64_t)kv0 * p.v_sn, p.v_sn, g.seqlen_k - kv0,
                                                              col0, dim, tid);
            else
                load_tile_async<T, kDqBc, kSlab, B::kThreads>(kslot + sl * kDqBc * kSlab,
                                                              kg + (int64_t)kv0 * p.k_sn, p.k_sn, g.seqlen_k - kv0,
                                                              col0, dim, tid);
        }
    };

    for (int i = 0; i < p.stages - 1; ++i) {
        if (i < total_items)
            load_item(i);
        arch::cp_async_commit();
    }
    auto item_begin = [&](int t) {
        arch::cp_async_wait_dyn(p.stages - 2);
        __syncthreads();
        if (t + p.stages - 1 < total_items)
            load_item(t + p.stages - 1);
        arch::cp_async_commit();
    };

    MaskCtx mc;
    mc.row0 = q0 + warp * 16;
    mc.seqlen_q = g.seqlen_q;
    mc.seqlen_k = g.seqlen_k;
    mc.set_head(p.mask, b, h);
    float lse2[2], delta[2];
    row_stats(p, g, b, h, mc.row0, lane, lse2, delta);

    /* kResident: the block's dQ, [slab][n-tile] of the warp's 16 rows. */
    arch::FragC dq_res[kResident ? B::kSlabs : 1][kResident ? kSlab / 8 : 1] = {};
    int t = 0;
    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const int kv0 = tile * kDqBc;
        arch::FragC s[kDqNT];
#pragma unroll
        for (int nt = 0; nt < kDqNT; ++nt)
            s[nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
        for (int c = 0; c < nq2; ++c, ++t) {
            item_begin(t);
            const T *slot = ring + (t % p.stages) * kSlotElems;
#pragma unroll
            for (int sl = 0; sl < B::kSlabs; ++sl) {
                const int slab = B::kSlabs * c + sl;
                if (slab * kSlab >= p.dqk)
                    break;
                warp_abt<T, kDqNT>(s, slot + sl * B::kBr * kSlab, warp * 16,
                                   slot + B::kBr * B::kChunk + sl * kDqBc * kSlab, p.dqk - slab * kSlab, lane);
            }
        }
        mc.col0 = kv0;
        mc.need_bounds = kv0 + kDqBc > g.seqlen_k;
        mc.need_diag = crosses_diag(p.mask, mc.row0, mc.row0 + 15, kv0, kv0 + kDqBc - 1, diag);
        mask_scores<kDqNT>(s, p.mask, mc, lane);
        recompute_p<kDqNT>(s, lse2);

        arch::FragC dp[kDqNT];
#pragma unroll
        for (int nt = 0; nt < kDqNT; ++nt)
            dp[nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
        for (int c = 0; c < nv2; ++c, ++t) {
            item_begin(t);
            const T *slot = ring + (t % p.stages) * kSlotElems;
#pragma unroll
            for (int sl = 0; sl < B::kSlabs; ++sl) {
                const int slab = B::kSlabs * c + sl;
                if (slab * kSlab >= p.dv)
                    break;
                warp_abt<T, kDqNT>(dp, slot + sl * B::kBr * kSlab, warp * 16,
                                   slot + B::kBr * B::kChunk + sl * kDqBc * kSlab, p.dv - slab * kSlab, lane);
            }
        }

        /* dS = P (dP Z - Delta), in place in dp. */
        if (p.has_dropout) {
            arch::FragC z[kDqNT];
#pragma unroll
            for (int nt = 0; nt < kDqNT; ++nt)
                z[nt] = arch::FragC{{1.f, 1.f, 1.f, 1.f}};
            apply_dropout<kDqNT>(z, p.mask, mc, lane); /* z = keep * dropout_scale */
#pragma unroll
            for (int nt = 0; nt < kDqNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    dp[nt].r[e] = s[nt].r[e] * (dp[nt].r[e] * z[nt].r[e] - delta[e >> 1]);
        } else {
#pragma unroll
            for (int nt = 0; nt < kDqNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    dp[nt].r[e] = s[nt].r[e] * (dp[nt].r[e] - delta[e >> 1]);
        }

        if (p.dbias) {
#pragma unroll
            for (int nt = 0; nt < kDqNT; ++nt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int r = warp * 16 + arch::frag_c_row(lane, 2 * half);
                    const int c = nt * 8 + arch::frag_c_col(lane, 0);
                    *reinterpret_cast<float2 *>(dst + r * kDbLd + c) =
                        make_float2(dp[nt].r[2 * half], dp[nt].r[2 * half + 1]);
                }
            __syncthreads();
            dbias_tile<B>(p, dst, rowsum, b, h, q0, kv0, rows_valid, min(kDqBc, g.seqlen_k - kv0), tid);
            /* The next writes of dst follow at least one item barrier. */
        }

        if (p.mask.softcap_out > 0.0f) /* dS of the capped score -> of the scaled one */
            softcap_grad<kDqNT>(dp, s, lse2, p.mask, mc, lane);

        /* scale * dS as A fragments (FragC pairs = FragA). */
        uint32_t af[kDqBc / 16][4];
        ds_afrags<T, kDqBc>(dp, p.scale, af);

        for (int c = 0; c < nq2; ++c, ++t) {
            item_begin(t);
            const T *kslot = ring + (t % p.stages) * kSlotElems + B::kBr * B::kChunk;
#pragma unroll
            for (int sl = 0; sl < B::kSlabs; ++sl) {
                const int col0 = c * B::kChunk + sl * kSlab;
                if (col0 >= p.dqk)
                    break;
                if constexpr (kResident) {
                    warp_ab_reg<T, kDqBc>(dq_res[sl], af, kslot + sl * kDqBc * kSlab, 0, lane);
                    continue;
                }
                AccTile<T, 1, kSlab / 8> at;
                at.prefetch(p.dq, dq_base, warp * 16, rows_valid, col0, p.dqk, tile == tile_begin, lane);
                arch::FragC o[1][kSlab / 8];
#pragma unroll
                for (int nt = 0; nt < kSlab / 8; ++nt)
                    o[0][nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
                warp_ab_reg<T, kDqBc>(o[0], af, kslot + sl * kDqBc * kSlab, 0, lane);
                at.commit(o, p.dq, dq_base, warp * 16, rows_valid, col0, p.dqk, lane);
            }
        }
    }
    arch::cp_async_wait<0>();
    if constexpr (kResident) { /* the one write of dQ */
#pragma unroll
        for (int sl = 0; sl < B::kSlabs; ++sl) {
            const int col0 = sl * kSlab;
            if (col0 >= p.dqk)
                break;
            AccTile<T, 1, kSlab / 8> zero;
            zero.prefetch(p.dq, dq_base, warp * 16, rows_valid, col0, p.dqk, true, lane);
            zero.commit(reinterpret_cast<const arch::FragC(&)[1][kSlab / 8]>(dq_res[sl]), p.dq, dq_base, warp * 16,
                        rows_valid, col0, p.dqk, lane);
        }
    }
}

/* A block runs the work items of one dbias group in a fixed order. */
template <typename T, class B, bool kResident = false> __device__ __forceinline__ void dq_body(const ffpa_bwd_params &p)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int64_t dims[3] = {p.hq, p.batch, p.q_blocks};
    const int member[3] = {p.member_h, p.member_b, p.member_qb};
    int64_t members = 1;
    for (int x = 0; x < 3; ++x)
        members *= member[x] ? dims[x] : 1;
    for (int64_t m = 0; m < members; ++m) {
        int64_t idx[3], gg = blockIdx.x, mm = m;
        for (int x = 0; x < 3; ++x) {
            int64_t *rest = member[x] ? &mm : &gg;
            idx[x] = *rest % dims[x];
            *rest /= dims[x];
        }
        /* Causal: the longest query blocks (last) first. */
        const int qb = p.causal ? p.q_blocks - 1 - (int)idx[2] : (int)idx[2];
        if (m > 0)
            __syncthreads(); /* shared memory of the previous item is free */
        dq_item<T, B, kResident>(p, (int)idx[1], (int)idx[0], qb, smem_raw);
    }
}

} /* namespace bwd */
} /* namespace ffpa */

#endif
