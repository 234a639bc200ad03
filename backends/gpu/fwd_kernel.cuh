/*
 * The forward kernel body, vendor-neutral: Split-D tiling of Algorithm 1
 * (FFPA paper) over an async-copy ring of shared-memory slabs.
 *
 * A block owns kBr query rows of one (batch, head) and, for split-KV, a
 * range of key tiles. Its warps form a kWM x kWN grid: warp (wm, wn) owns
 * kMT m16 tiles of query rows, [16 kMT wm, 16 kMT (wm + 1)), and, within
 * every slab, the columns [wn kWC, (wn + 1) kWC). Each K or V fragment a
 * warp loads from shared memory feeds its kMT tiles' MMAs (FlashAttention-2
 * gives a warp 32 or more rows for that reuse). The key loop streams, per
 * key tile of kBc rows:
 *   qk_chunks K slabs (with the matching Q slab unless Q is resident),
 *   v_chunks  V slabs,
 * each kCols wide, through a ring of `stages` slots (prefetch stages-1
 * ahead). S = sum over chunks of Q_c K_c^T accumulates in registers; with
 * kWN > 1 each warp either sums a disjoint set of D-columns and the partial
 * S tiles are added through shared memory (Split-D across warps), or (key
 * split) scores its own share of the keys over every column and the warps
 * swap P. P stays in registers as the A operand of PV; O accumulates in
 * fp32 registers across the whole Dv (each warp its kDv / kWN columns).
 *
 * Requires the arch layer (ffpa::arch) to be included first.
 */
#ifndef FFPA_GPU_FWD_KERNEL_CUH
#define FFPA_GPU_FWD_KERNEL_CUH

#include "epilogue.cuh"
#include "fwd_params.h"
#include "masking.cuh"
#include "smem_tile.cuh"
#include "softmax.cuh"
#include "tile_scheduler.cuh"

namespace ffpa {

/* Compile-time shape of one forward instantiation. */
template <typename T_, int kDv_, int kWM_, int kWN_, int kBc_, int kCols_, int kMinBlocks_, int kMT_ = 1,
          bool kKeySplit_ = false>
struct FwdConfig {
    using T = T_;
    static constexpr int kDv = kDv_;       /* Dv this instantiation covers (padded) */
    static constexpr int kWM = kWM_;       /* warps along query rows, 16 kMT rows each */
    static constexpr int kWN = kWN_;       /* warps splitting each slab's columns */
    static constexpr int kMT = kMT_;       /* m16 tiles of query rows per warp */
    static constexpr int kRG = kWM * kMT;  /* 16-row groups of the block */
    static constexpr int kBr = 16 * kRG;
    static constexpr int kBc = kBc_;
    static constexpr int kCols = kCols_;   /* columns of a slab (the D chunk) */
    static constexpr int kWC = kCols / kWN;
    static constexpr int kThreads = arch::kWarpSize * kWM * kWN;
    static constexpr int kNT = kBc / 8;    /* S n-tiles per warp */
    static constexpr int kVSlabs = kDv / kCols;
    static constexpr int kONT = kWC / 8;   /* O n-tiles per warp and slab */
    static constexpr int kMinBlocks = kMinBlocks_;
    /* Key split (kWN > 1): the kWN warps of a row group share QK^T by keys,
     * not by D: warp wn scores keys [wn kKW, (wn + 1) kKW) over every column
     * of the slab, so no partial S crosses shared memory and each warp runs
     * the softmax of its own keys; the warps then swap P (fwd_key_tile_ks).
     * Without it every warp scores all kBc keys over its kWC columns. */
    static constexpr bool kKeySplit = kKeySplit_;
    static constexpr int kKW = kKeySplit ? kBc / kWN : kBc; /* keys a warp scores */
    static constexpr int kSNT = kKW / 8;                    /* its S n-tiles */
    static_assert(!kKeySplit || (kWN > 1 && kKW % 16 == 0), "key split: whole k16 steps of P per warp");
    static_assert(kDv % kCols == 0, "Dv is a whole number of slabs");
    /* A warp's columns start on a 128-byte boundary: the swizzle of
     * smem_tile.cuh then addresses them like column 0 (qk_slab, pv_slab). */
    static_assert(kCols % 64 == 0 && kWC % 64 == 0, "slab columns: whole 64-column groups per warp");
    static_assert(kBc % 16 == 0, "key tile");
    /* load_tile_async's kSpaced: a 4-warp tile of one m-tile a warp whose
     * slab rows take fewer than 8 row steps (Fwd256): its ldmatrix and
     * copies share the shared-memory port (docs/notes/forward.md). */
    static constexpr bool kSpacedCopies = kMT == 1 && kWN == 1 && kThreads / (kCols / 8) < 8;
    /* The softmax of a key tile takes every m-tile's row maxima before any
     * m-tile's exp2s (fwd_key_tile_mt): a warp of two m-tiles over 128 keys
     * (Fwd64x2: 16 n-tiles a row, the longest max chains) then overlaps two
     * tiles' chains, D = 64 +10% and 88 -> 16 bytes of spill. Elsewhere
     * measured flat or a loss (the 64-key two-m-tile tile -2.6%, spill up
     * in the one-m-tile 1024-column tiles; docs/notes/forward.md), so they
     * keep one m-tile at a time. */
    static constexpr bool kMaxesFirst = kMT > 1 && kNT >= 16;
};

/* A warp's O accumulators: per m-tile, per V slab, per n-tile. */
template <class Cfg> using OAcc = arch::FragC[Cfg::kMT][Cfg::kVSlabs][Cfg::kONT];

/* Shared memory of the key split's swap, inside the partial-S region:
 * P parts (uint4 [kWN][kRG][kKK][32], a lane's A fragments of one k16 step),
 * the references (float2 [kWN][kRG][32]) and, in the epilogue, the row
 * sums (the same shape; apart from the others, so a warp may write its sum
 * while a slower one still reads the last tile's P). */
template <class Cfg> struct KeySplitSmem {
    static constexpr int kKK = Cfg::kKW / 16; /* P k16 steps a warp owns */
    static constexpr int kPElems = Cfg::kWN * Cfg::kRG * kKK * 32;
    static constexpr int kRefElems = Cfg::kWN * Cfg::kRG * 32;
    /* P in 16 bits (Br x Bc), a reference and a row sum per lane and row
     * group: plan.c's model writes the same sum (test_fwd_arch_bodies). */
    static constexpr size_t kBytes = (size_t)kPElems * 16 + 2 * (size_t)kRefElems * 8;
    static __device__ __forceinline__ uint4 *p(float4 *spart) { return reinterpret_cast<uint4 *>(spart); }
    static __device__ __forceinline__ float2 *ref(float4 *spart)
    {
        return reinterpret_cast<float2 *>(spart + kPElems);
    }
    static __device__ __forceinline__ float2 *sum(float4 *spart) { return ref(spart) + kRefElems; }
    static __device__ __forceinline__ int at(int n, int rg, int lane) { return (n * Cfg::kRG + rg) * 32 + lane; }
    static __device__ __forceinline__ int p_at(int n, int rg, int kk, int lane)
    {
        return ((n * Cfg::kRG + rg) * kKK + kk) * 32 + lane;
    }
};

/* Shared-memory layout (bytes), the model plan.c's ffpa_plan_smem_bytes follows. */
struct FwdSmem {
    size_t q_region, slot, ring, spart, epilogue, total;
};

template <class Cfg>
constexpr __host__ __device__ inline FwdSmem fwd_smem_layout(int q_resident, int qk_chunks, int stages)
{
    const size_t elt = sizeof(typename Cfg::T);
    FwdSmem s{};
    s.q_region = q_resident ? (size_t)Cfg::kBr * Cfg::kCols * qk_chunks * elt : 0;
    s.slot = ((size_t)Cfg::kBc + (q_resident ? 0 : Cfg::kBr)) * Cfg::kCols * elt;
    s.ring = (size_t)stages * s.slot;
    /* Split-D partial S in fp32, or the key split's swap. */
    s.spart = Cfg::kKeySplit ? KeySplitSmem<Cfg>::kBytes
              : Cfg::kWN > 1 ? (size_t)Cfg::kWN * Cfg::kBr * Cfg::kBc * sizeof(float)
                             : 0;
    s.epilogue = (size_t)Cfg::kBr * Cfg::kDv * elt;
    size_t main = s.q_region + s.ring;
    s.total = (main > s.epilogue ? main : s.epilogue) + s.spart;
    return s;
}

/* The least shared memory a tile runs in (Q resident in one chunk, 2
 * stages). An architecture whose blocks get less never runs the tile (the
 * planner's fit), so the entry points compile no body for it there. */
template <class Cfg> constexpr size_t fwd_min_smem()
{
    return fwd_smem_layout<Cfg>(1, 1, 2).total;
}

/*
 * ldmatrix addresses without per-load swizzle arithmetic: a lane's row has
 * (row & 7) fixed across the loop, and the 16-byte piece it reads is an even
 * compile-time piece plus a lane bit, so the swizzled piece is
 * (pc & ~7) + ((pc & 7) ^ x) with x = lane bit ^ (row & 7) computed once.
 */
__device__ __forceinline__ uint32_t piece_off(int x, int pc)
{
    return (uint32_t)(((pc & ~7) + ((pc & 7) ^ x)) << 4);
}

/*
 * Calls f(Steps<k>{}) with k, the 16-column steps (of kMax) a slab loop
 * from col0 runs for the valid columns below cols_valid (warp-uniform).
 * Wide loops (kMax > 8: 256- and 512-column slabs): k covers the valid
 * columns rounded up to whole groups of 64 columns (128 in 512), at most
 * four loops, each straight-line; the steps past the valid columns multiply
 * the zeros the slab copies leave there (load_tile_async zero-fills them).
 * A run-time "skip the padding" test between steps splits the unrolled loop
 * into basic blocks the SASS scheduler cannot hoist the next step's
 * ldmatrix across (v2 -> v3 in docs/notes/forward.md): at D = 192 the
 * 256-column tile took longer than at D = 256. Narrow loops (kMax <= 8)
 * keep that test for a partial slab, k = 0 (stop at the first step past
 * cols_valid): straight-line variants spilled there (the D = 128 two-m-tile
 * twin 20 -> 96 bytes, ptxas sm_90a).
 */
template <int k> struct Steps {
    static constexpr int value = k;
};

template <int kMax, int kGroup, class F>
__host__ __device__ __forceinline__ void covering_groups(int cols, F &&f)
{
    static_assert(kMax % kGroup == 0, "whole groups");
    if (cols > (kMax - kGroup) * 16)
        f(Steps<kMax>{});
    else if constexpr (kMax > kGroup)
        covering_groups<kMax - kGroup, kGroup>(cols, f);
}

template <int kMax, class F>
__host__ __device__ __forceinline__ void with_covering_steps(int col0, int cols_valid, F &&f)
{
    if constexpr (kMax <= 8) {
        if (col0 + kMax * 16 <= cols_valid)
            f(Steps<kMax>{});
        else
            f(Steps<0>{});
    } else {
        covering_groups<kMax, (kMax / 4 > 4 ? kMax / 4 : 4)>(cols_valid - col0, f);
    }
}

/*
 * S += Q_slab K_slab^T over the first kSteps 16-column steps of the kQCols
 * from col0 (with_covering_steps picks kSteps; 0: those < cols_valid) of
 * the kSN x 8 keys from key0: a warp's kWC columns of all kBc keys, or (key
 * split) every column of its kKW keys.
 */
template <class Cfg, int kSteps, int kQCols, int kSN>
__device__ __forceinline__ void qk_slab(arch::FragC (&s)[Cfg::kMT][kSN], const typename Cfg::T *qs,
                                        const typename Cfg::T *ks, int wm, int col0, int key0, int cols_valid,
                                        int lane)
{
    using T = typename Cfg::T;
    static_assert(kSN % 2 == 0, "K fragments load 16 keys at a time");
    static_assert(kSteps <= kQCols / 16, "steps within the columns");
    constexpr uint32_t row_bytes = Cfg::kCols * sizeof(T);
    const uint32_t col_bytes = (uint32_t)col0 * sizeof(T); /* multiple of 128: swizzle-neutral */
    /* The warp's m-tiles are 16 rows apart: (row & 7), hence the swizzle, is
     * the same; key0 is a multiple of 8 for the same reason. */
    const uint32_t q_base =
        arch::smem_u32(qs) + (uint32_t)(wm * Cfg::kMT * 16 + (lane & 15)) * row_bytes + col_bytes;
    const int qx = (lane >> 4) ^ (lane & 7);
    const uint32_t k_base = arch::smem_u32(ks) +
                            (uint32_t)(key0 + (lane & 7) + ((lane >> 4) << 3)) * row_bytes + col_bytes;
    const int kx = ((lane >> 3) & 1) ^ (lane & 7);
#pragma unroll
    for (int kk = 0; kk < (kSteps ? kSteps : kQCols / 16); ++kk) {
        if (!kSteps && col0 + kk * 16 >= cols_valid) /* zero padding of D: skip */
            break;
        arch::FragA a[Cfg::kMT];
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
            arch::ldmatrix_x4(a[mt].r, q_base + (uint32_t)(mt * 16) * row_bytes + piece_off(qx, 2 * kk));
        const uint32_t k_addr = k_base + piece_off(kx, 2 * kk);
#pragma unroll
        for (int np = 0; np < kSN / 2; ++np) {
            uint32_t b[4];
            arch::ldmatrix_x4(b, k_addr + (uint32_t)(np * 16) * row_bytes);
            arch::FragB b0 = {{b[0], b[1]}}, b1 = {{b[2], b[3]}};
#pragma unroll
            for (int mt = 0; mt < Cfg::kMT; ++mt) {
                arch::mma_m16n8k16<T>(s[mt][2 * np], a[mt], b0);
                arch::mma_m16n8k16<T>(s[mt][2 * np + 1], a[mt], b1);
            }
        }
    }
}

/* S = Q K^T of one key tile: zeroed, then every Q/K slab pair of the tile
 * (next_slab() hands each ready K slab, q_slab(c, k_slab) its Q slab),
 * over the columns and keys qk_slab takes. */
template <class Cfg, int kQCols, int kSN, class NextSlab, class QSlab>
__device__ __forceinline__ void qk_tile(arch::FragC (&s)[Cfg::kMT][kSN], int qk_chunks, int dqk, int wm, int col0,
                                        int key0, int lane, NextSlab &next_slab, QSlab &q_slab)
{
    using T = typename Cfg::T;
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kSN; ++nt)
            s[mt][nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
    for (int c = 0; c < qk_chunks; ++c) {
        const T *ks = next_slab();
        const T *qs = q_slab(c, ks);
        const int cols_valid = dqk - c * Cfg::kCols;
        with_covering_steps<kQCols / 16>(col0, cols_valid, [&](auto steps) {
            qk_slab<Cfg, decltype(steps)::value, kQCols, kSN>(s, qs, ks, wm, col0, key0, cols_valid, lane);
        });
    }
}

/* O_slab += P V_slab (V slab vi) over the first kSteps 16-column steps of
 * this warp's kWC columns (with_covering_steps, as in qk_slab; 0: those <
 * cols_valid). */
template <class Cfg, int kSteps>
__device__ __forceinline__ void pv_slab(OAcc<Cfg> &o, int vi,
                                        const uint32_t (&pf)[Cfg::kMT][Cfg::kBc / 16][4],
                                        const typename Cfg::T *vs, int wn, int cols_valid, int lane)
{
    using T = typename Cfg::T;
    constexpr uint32_t row_bytes = Cfg::kCols * sizeof(T);
    const int col0 = wn * Cfg::kWC;
    const uint32_t v_base = arch::smem_u32(vs) +
                            (uint32_t)((lane & 7) + (((lane >> 3) & 1) << 3)) * row_bytes +
                            (uint32_t)col0 * sizeof(T);
    const int vx = (lane >> 4) ^ (lane & 7);
#pragma unroll
    for (int kk = 0; kk < Cfg::kBc / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < (kSteps ? kSteps : Cfg::kONT / 2); ++np) {
            if (!kSteps && col0 + np * 16 >= cols_valid)
                break;
            uint32_t b[4];
            arch::ldmatrix_x4_trans(b, v_base + (uint32_t)(kk * 16) * row_bytes + piece_off(vx, 2 * np));
            arch::FragB b0 = {{b[0], b[1]}}, b1 = {{b[2], b[3]}};
#pragma unroll
            for (int mt = 0; mt < Cfg::kMT; ++mt) {
                const arch::FragA a = {{pf[mt][kk][0], pf[mt][kk][1], pf[mt][kk][2], pf[mt][kk][3]}};
                arch::mma_m16n8k16<T>(o[mt][vi][2 * np], a, b0);
                arch::mma_m16n8k16<T>(o[mt][vi][2 * np + 1], a, b1);
            }
        }
    }
}

/* The same, the steps for V slab vi from dv (warp-uniform). */
template <class Cfg>
__device__ __forceinline__ void pv_slab_of(OAcc<Cfg> &o, int vi, const uint32_t (&pf)[Cfg::kMT][Cfg::kBc / 16][4],
                                           const typename Cfg::T *vs, int wn, int dv, int lane)
{
    const int cols_valid = dv - vi * Cfg::kCols;
    with_covering_steps<Cfg::kONT / 2>(wn * Cfg::kWC, cols_valid, [&](auto steps) {
        pv_slab<Cfg, decltype(steps)::value>(o, vi, pf, vs, wn, cols_valid, lane);
    });
}

/* One k16 step of P (S n-tiles a and b, probabilities) as the PV MMA's A
 * fragment: four registers of two T. */
template <typename T>
__device__ __forceinline__ void pack_p_step(const arch::FragC &a, const arch::FragC &b, uint32_t (&w)[4])
{
    w[0] = arch::pack_f32x2<T>(a.r[0], a.r[1]);
    w[1] = arch::pack_f32x2<T>(a.r[2], a.r[3]);
    w[2] = arch::pack_f32x2<T>(b.r[0], b.r[1]);
    w[3] = arch::pack_f32x2<T>(b.r[2], b.r[3]);
}

/* The regions of a forward block's shared memory (fwd_smem_layout):
 * [resident Q][ring of slots][partial S]; O reuses the front at the end. */
template <class Cfg> struct FwdRegions {
    typename Cfg::T *q_region, *ring;
    float4 *spart;
    int slot_elems;
};

template <class Cfg>
__device__ __forceinline__ FwdRegions<Cfg> fwd_regions(unsigned char *smem, int q_resident, int qk_chunks, int stages)
{
    using T = typename Cfg::T;
    const FwdSmem lay = fwd_smem_layout<Cfg>(q_resident, qk_chunks, stages);
    FwdRegions<Cfg> r;
    r.q_region = reinterpret_cast<T *>(smem);
    r.ring = reinterpret_cast<T *>(smem + lay.q_region);
    r.spart = reinterpret_cast<float4 *>(
        smem + (lay.q_region + lay.ring > lay.epilogue ? lay.q_region + lay.ring : lay.epilogue));
    r.slot_elems = (int)(lay.slot / sizeof(T));
    return r;
}

/*
 * The cp.async slab ring's consumer side. load_next() issues the next slab
 * into the next slot (the producer's cursor, kernel-specific: dense rows, or
 * rows through a block table). ring_prologue puts stages-1 slabs in flight
 * (with whatever the caller issued before, e.g. a resident Q, in the first
 * group). The function slab_ring returns, called once per slab, waits for
 * the current slab, refills the slot consumed last (every warp is past the
 * barrier) and returns the slab. Its state stays the caller's (references
 * to its locals and parameters): a struct holding copies of it cost
 * registers, a spill in the 1024-column KV tile.
 */
template <class LoadNext> __device__ __forceinline__ void ring_prologue(int stages, LoadNext &load_next)
{
    for (int i = 0; i < stages - 1; ++i) {
        load_next();
        arch::cp_async_commit();
    }
}

template <typename T, class LoadNext>
__device__ __forceinline__ auto slab_ring(T *const &ring, const int &slot_elems, const int &stages, int &cur,
                                          LoadNext &load_next)
{
    return [&ring, &slot_elems, &stages, &cur, &load_next]() -> const T * {
        arch::cp_async_wait_dyn(stages - 2);
        __syncthreads();
        load_next();
        arch::cp_async_commit();
        const T *slab = ring + cur * slot_elems;
        if (++cur == stages)
            cur = 0;
        return slab;
    };
}

/* O accumulators at zero. */
template <class Cfg> __device__ __forceinline__ void zero_o(arch::FragC (&o)[Cfg::kVSlabs][Cfg::kONT])
{
#pragma unroll
    for (int vs = 0; vs < Cfg::kVSlabs; ++vs)
#pragma unroll
        for (int nt = 0; nt < Cfg::kONT; ++nt)
            o[vs][nt] = arch::FragC{{0.f, 0.f, 0.f, 0.f}};
}


/*
 * One key tile of the main loop, shared by the forward kernels: S = Q K^T
 * over the tile's qk_chunks slabs (next_slab() hands each ready slab,
 * q_slab(c, k_slab) the matching Q slab), the Split-D partial-S sum when
 * warps split D, mask(s, mt) (scale, softcap, bias, ALiBi, bounds, causal,
 * window) of m-tile mt, returning the scale the softmax folds into its exp2
 * (1 where mask applied it), the online softmax,
 * after_softmax(s, mt) (dropout), P packed into registers, and
 * O = alpha O + P V over the v_chunks V slabs.
 */
template <class Cfg, class NextSlab, class QSlab, class Mask, class AfterSoftmax>
__device__ __forceinline__ void fwd_key_tile_mt(OAcc<Cfg> &o, OnlineSoftmax (&sm)[Cfg::kMT], float4 *spart,
                                                int qk_chunks, int v_chunks, int dqk, int dv, int wm, int wn,
                                                int lane, NextSlab &next_slab, QSlab &&q_slab, Mask &&mask,
                                                AfterSoftmax &&after_softmax)
{
    using T = typename Cfg::T;
    arch::FragC s[Cfg::kMT][Cfg::kNT];
    qk_tile<Cfg, Cfg::kWC, Cfg::kNT>(s, qk_chunks, dqk, wm, wn * Cfg::kWC, 0, lane, next_slab, q_slab);
    /* Partial S of this warp's D columns, per 16-row group rg; summed after
     * the next barrier. */
    auto spart_at = [&](int n, int rg, int nt) -> float4 & {
        return spart[((n * Cfg::kRG + rg) * Cfg::kNT + nt) * 32 + lane];
    };
    if (Cfg::kWN > 1) {
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < Cfg::kNT; ++nt)
                spart_at(wn, wm * Cfg::kMT + mt, nt) =
                    make_float4(s[mt][nt].r[0], s[mt][nt].r[1], s[mt][nt].r[2], s[mt][nt].r[3]);
    }

    uint32_t pf[Cfg::kMT][Cfg::kBc / 16][4];
#pragma unroll
    for (int vs = 0; vs < Cfg::kVSlabs; ++vs) {
        if (vs >= v_chunks)
            break;
        const T *vsl = next_slab();
        if (vs == 0) {
            /* m-tile mt's scores: the Split-D partial sums, then the mask. */
            auto scores = [&](int mt) -> float {
                if (Cfg::kWN > 1) {
                    /* Same summation order in every warp: identical P. */
#pragma unroll
                    for (int nt = 0; nt < Cfg::kNT; ++nt) {
                        float4 acc = spart_at(0, wm * Cfg::kMT + mt, nt);
#pragma unroll
                        for (int n = 1; n < Cfg::kWN; ++n) {
                            const float4 x = spart_at(n, wm * Cfg::kMT + mt, nt);
                            acc.x += x.x;
                            acc.y += x.y;
                            acc.z += x.z;
                            acc.w += x.w;
                        }
                        s[mt][nt] = arch::FragC{{acc.x, acc.y, acc.z, acc.w}};
                    }
                }
                return mask(s[mt], mt);
            };
            /* m-tile mt's softmax given alpha, then P packed. */
            auto to_p = [&](int mt, float (&alpha)[2]) {
                OnlineSoftmax::rescale(reinterpret_cast<arch::FragC(&)[Cfg::kVSlabs * Cfg::kONT]>(o[mt]), alpha);
                after_softmax(s[mt], mt);
#pragma unroll
                for (int kk = 0; kk < Cfg::kBc / 16; ++kk)
                    pack_p_step<T>(s[mt][2 * kk], s[mt][2 * kk + 1], pf[mt][kk]);
            };
            if constexpr (Cfg::kMaxesFirst) {
                float fold[Cfg::kMT], mx[Cfg::kMT][2];
#pragma unroll
                for (int mt = 0; mt < Cfg::kMT; ++mt) {
                    fold[mt] = scores(mt);
                    sm[mt].template row_max_scaled<Cfg::kNT>(s[mt], mx[mt], fold[mt]);
                }
#pragma unroll
                for (int mt = 0; mt < Cfg::kMT; ++mt) {
                    float alpha[2];
#pragma unroll
                    for (int half = 0; half < 2; ++half)
                        sm[mt].template advance<Cfg::kNT>(s[mt], alpha, half, mx[mt][half], fold[mt]);
                    to_p(mt, alpha);
                }
            } else {
#pragma unroll
                for (int mt = 0; mt < Cfg::kMT; ++mt) {
                    float alpha[2];
                    sm[mt].template update_scaled<Cfg::kNT>(s[mt], alpha, scores(mt));
                    to_p(mt, alpha);
                }
            }
        }
        pv_slab_of<Cfg>(o, vs, pf, vsl, wn, dv, lane);
    }
}

/* Packed P (two T) times f, for a part whose reference was below the row max. */
template <typename T> __device__ __forceinline__ uint32_t scale_packed(uint32_t w, float f)
{
    const float2 v = arch::unpack_f32x2<T>(w);
    return arch::pack_f32x2<T>(v.x * f, v.y * f);
}

/*
 * One key tile with the key split (Cfg::kKeySplit): warp (wm, wn) scores
 * keys [wn kKW, (wn + 1) kKW) of the tile over every Q/K column (no partial
 * S to add), masks them, exponentiates them against its own reference
 * (OnlineSoftmax::own_keys) and leaves P, in T, and the reference in shared
 * memory. After the first V slab's barrier every warp of the row group reads
 * all kWN parts in the same order: the row max is the largest reference, a
 * part whose reference is below it is rescaled by exp2(ref - max) (none once
 * the row maxima settle: every reference is then the running max), so the
 * warps hold bit-identical P and row maxima. Each warp keeps the row sum of
 * its own keys; the shares meet once, in the epilogue.
 */
template <class Cfg, class NextSlab, class QSlab, class Mask, class AfterSoftmax>
__device__ __forceinline__ void fwd_key_tile_ks(OAcc<Cfg> &o, OnlineSoftmax (&sm)[Cfg::kMT], float4 *spart,
                                                int qk_chunks, int v_chunks, int dqk, int dv, int wm, int wn,
                                                int lane, NextSlab &next_slab, QSlab &&q_slab, Mask &&mask,
                                                AfterSoftmax &&after_softmax)
{
    using T = typename Cfg::T;
    using X = KeySplitSmem<Cfg>;
    constexpr int kKK = X::kKK, kPK = Cfg::kBc / 16;
    arch::FragC s[Cfg::kMT][Cfg::kSNT];
    qk_tile<Cfg, Cfg::kCols, Cfg::kSNT>(s, qk_chunks, dqk, wm, 0, wn * Cfg::kKW, lane, next_slab, q_slab);

    float ref[Cfg::kMT][2], sum[Cfg::kMT][2];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt) {
        const int rg = wm * Cfg::kMT + mt;
        const float fold = mask(s[mt], mt);
        sm[mt].template own_keys<Cfg::kSNT>(s[mt], ref[mt], sum[mt], fold);
        after_softmax(s[mt], mt);
#pragma unroll
        for (int kk = 0; kk < kKK; ++kk) {
            uint32_t w[4];
            pack_p_step<T>(s[mt][2 * kk], s[mt][2 * kk + 1], w);
            X::p(spart)[X::p_at(wn, rg, kk, lane)] = make_uint4(w[0], w[1], w[2], w[3]);
        }
        X::ref(spart)[X::at(wn, rg, lane)] = make_float2(ref[mt][0], ref[mt][1]);
    }

    uint32_t pf[Cfg::kMT][kPK][4];
#pragma unroll
    for (int vs = 0; vs < Cfg::kVSlabs; ++vs) {
        if (vs >= v_chunks)
            break;
        const T *vsl = next_slab(); /* its barrier publishes every warp's part */
        if (vs == 0) {
#pragma unroll
            for (int mt = 0; mt < Cfg::kMT; ++mt) {
                const int rg = wm * Cfg::kMT + mt;
                float rn[Cfg::kWN][2], mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < Cfg::kWN; ++n) {
                    const float2 r = X::ref(spart)[X::at(n, rg, lane)];
                    rn[n][0] = r.x;
                    rn[n][1] = r.y;
                    mx[0] = fmaxf(mx[0], r.x);
                    mx[1] = fmaxf(mx[1], r.y);
                }
                float alpha[2];
                sm[mt].merge(mx, ref[mt], sum[mt], alpha);
                OnlineSoftmax::rescale(reinterpret_cast<arch::FragC(&)[Cfg::kVSlabs * Cfg::kONT]>(o[mt]), alpha);
                float f[Cfg::kWN][2];
                bool moved = false;
#pragma unroll
                for (int n = 0; n < Cfg::kWN; ++n)
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        f[n][half] = OnlineSoftmax::part_factor(rn[n][half], mx[half]);
                        moved |= f[n][half] != 1.0f;
                    }
#pragma unroll
                for (int kk = 0; kk < kPK; ++kk) {
                    const int n = kk / kKK;
                    const uint4 w = X::p(spart)[X::p_at(n, rg, kk % kKK, lane)];
                    pf[mt][kk][0] = w.x;
                    pf[mt][kk][1] = w.y;
                    pf[mt][kk][2] = w.z;
                    pf[mt][kk][3] = w.w;
                }
                if (arch::warp_any(moved)) {
#pragma unroll
                    for (int kk = 0; kk < kPK; ++kk)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            pf[mt][kk][e] = scale_packed<T>(pf[mt][kk][e], f[kk / kKK][e & 1]);
                }
            }
        }
        pv_slab_of<Cfg>(o, vs, pf, vsl, wn, dv, lane);
    }
}

/* The same for warps of one m-tile (the KV-cache kernels): o and sm as one
 * m-tile's, mask(s) and after_softmax(s) without the tile index. */
template <class Cfg, class NextSlab, class QSlab, class Mask, class AfterSoftmax>
__device__ __forceinline__ void fwd_key_tile(arch::FragC (&o)[Cfg::kVSlabs][Cfg::kONT], OnlineSoftmax &sm,
                                             float4 *spart, int qk_chunks, int v_chunks, int dqk, int dv,
                                             int wm, int wn, int lane, NextSlab &next_slab, QSlab &&q_slab,
                                             Mask &&mask, AfterSoftmax &&after_softmax)
{
    static_assert(Cfg::kMT == 1, "one m-tile per warp");
    fwd_key_tile_mt<Cfg>(
        reinterpret_cast<OAcc<Cfg> &>(o), reinterpret_cast<OnlineSoftmax(&)[1]>(sm), spart, qk_chunks, v_chunks,
        dqk, dv, wm, wn, lane, next_slab, q_slab,
        [&](arch::FragC(&s)[Cfg::kNT], int) {
            mask(s);
            return 1.0f;
        },
        [&](arch::FragC(&s)[Cfg::kNT], int) { after_softmax(s); });
}

/* kPlainOnly: the twin for plain calls without dropout (p.plain and
 * !p.has_dropout, chosen by the host): the variant code (softcap, bias,
 * ALiBi, dropout) is not compiled in, so its registers are free for the
 * tile (Fwd128x2: 124 -> 28 bytes of spill). */
template <class Cfg, bool kPlainOnly = false> __device__ __forceinline__ void fwd_body(const ffpa_gpu_fwd_params &p)
{
    using T = typename Cfg::T;
    extern __shared__ __align__(128) unsigned char smem_raw[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / Cfg::kWN, wn = warp % Cfg::kWN;
    const FwdWork w = fwd_work(p, blockIdx.x);

    /* Sequence geometry (varlen: offsets from the device copy). */
    int64_t q_start = 0, k_start = 0;
    int seqlen_q = p.nq, seqlen_k = p.nkv;
    if (p.cu_q) {
        q_start = p.cu_q[w.b];
        seqlen_q = p.cu_q[w.b + 1] - p.cu_q[w.b];
        k_start = p.cu_k[w.b];
        seqlen_k = p.cu_k[w.b + 1] - p.cu_k[w.b];
    }
    const int q0 = w.q_block * Cfg::kBr;
    if (q0 >= seqlen_q)
        return;
    const int rows_valid = min(Cfg::kBr, seqlen_q - q0);
    const int kvh = w.h / p.group;
    const T *qg = static_cast<const T *>(p.q) + (p.cu_q ? q_start * p.q_sn : (int64_t)w.b * p.q_sb) +
                  (int64_t)w.h * p.q_sh + (int64_t)q0 * p.q_sn;
    const T *kg = static_cast<const T *>(p.k) + (p.cu_k ? k_start * p.k_sn : (int64_t)w.b * p.k_sb) +
                  (int64_t)kvh * p.k_sh;
    const T *vg = static_cast<const T *>(p.v) + (p.cu_k ? k_start * p.v_sn : (int64_t)w.b * p.v_sb) +
                  (int64_t)kvh * p.v_sh;

    /* Key tiles this block visits: from the window's first key of its first
     * row to the causal diagonal / window end of its last valid row (the
     * others are skipped, not masked); split-KV takes its share. */
    const int diag = seqlen_k - seqlen_q;
    int tile_begin;
    int tile_end = visible_key_tiles(p, q0, q0 + rows_valid - 1, diag, seqlen_k, Cfg::kBc, &tile_begin);
    if (p.kv_splits > 1) {
        tile_begin = max(tile_begin, w.split * p.kv_tiles_per_split);
        tile_end = min(tile_end, w.split * p.kv_tiles_per_split + p.kv_tiles_per_split);
    }
    tile_end = max(tile_end, tile_begin);
    const int n_tiles = tile_end - tile_begin;

    const FwdRegions<Cfg> sh = fwd_regions<Cfg>(smem_raw, p.q_resident, p.qk_chunks, p.stages);
    T *q_region = sh.q_region, *ring = sh.ring;
    const int slot_elems = sh.slot_elems;
    const int slabs_per_tile = p.qk_chunks + p.v_chunks;
    const int total_slabs = n_tiles * slabs_per_tile;

    /* Producer cursor: the next slab to load (its key tile, slab within the
     * tile, ring slot), advanced by one per load: no integer division per
     * slab (a run-time / and % cost ~60 instructions each in SASS). */
    int ld_left = total_slabs, ld_s = 0, ld_slot = 0, ld_kv0 = tile_begin * Cfg::kBc;
    auto load_next = [&]() {
        if (ld_left <= 0)
            return;
        T *slot = ring + ld_slot * slot_elems;
        if (ld_s < p.qk_chunks) {
            load_tile_async<T, Cfg::kBc, Cfg::kCols, Cfg::kThreads, Cfg::kSpacedCopies>(
                slot, kg + (int64_t)ld_kv0 * p.k_sn, p.k_sn, seqlen_k - ld_kv0, ld_s * Cfg::kCols, p.dqk, tid);
            if (!p.q_resident)
                load_tile_async<T, Cfg::kBr, Cfg::kCols, Cfg::kThreads, Cfg::kSpacedCopies>(
                    slot + Cfg::kBc * Cfg::kCols, qg, p.q_sn, rows_valid, ld_s * Cfg::kCols, p.dqk, tid);
        } else {
            load_tile_async<T, Cfg::kBc, Cfg::kCols, Cfg::kThreads, Cfg::kSpacedCopies>(
                slot, vg + (int64_t)ld_kv0 * p.v_sn, p.v_sn, seqlen_k - ld_kv0,
                (ld_s - p.qk_chunks) * Cfg::kCols, p.dv, tid);
        }
        --ld_left;
        if (++ld_s == slabs_per_tile) {
            ld_s = 0;
            ld_kv0 += Cfg::kBc;
        }
        if (++ld_slot == p.stages)
            ld_slot = 0;
    };

    /* Prologue: resident Q joins the first group; stages-1 slabs in flight. */
    if (p.q_resident)
        for (int c = 0; c < p.qk_chunks; ++c)
            load_tile_async<T, Cfg::kBr, Cfg::kCols, Cfg::kThreads, Cfg::kSpacedCopies>(
                q_region + c * Cfg::kBr * Cfg::kCols, qg, p.q_sn, rows_valid, c * Cfg::kCols, p.dqk,
                tid);
    ring_prologue(p.stages, load_next);
    int cur_slot = 0;
    auto next_slab = slab_ring(ring, slot_elems, p.stages, cur_slot, load_next);

    OAcc<Cfg> o;
    OnlineSoftmax sm[Cfg::kMT];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt) {
        zero_o<Cfg>(o[mt]);
        sm[mt].init();
    }

    /* One mask context; its rows are m-tile mt's while that tile is masked. */
    const int row_base = q0 + wm * Cfg::kMT * 16; /* the warp's first row */
    MaskCtx mc;
    mc.seqlen_q = seqlen_q;
    mc.seqlen_k = seqlen_k;
    mc.set_head(p, w.b, w.h);
    bool need_diag[Cfg::kMT];

    /* The keys this warp scores: the tile's, or its share under the key split. */
    const int key0 = Cfg::kKeySplit ? wn * Cfg::kKW : 0;
    for (int tile = tile_begin; tile < tile_end; ++tile) {
        mc.col0 = tile * Cfg::kBc + key0;
        mc.need_bounds = mc.col0 + Cfg::kKW > seqlen_k;
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
            need_diag[mt] = crosses_diag(p, row_base + 16 * mt, row_base + 16 * mt + 15, mc.col0,
                                         mc.col0 + Cfg::kKW - 1, diag);
        auto q_slab = [&](int c, const T *ks) {
            return p.q_resident ? q_region + c * Cfg::kBr * Cfg::kCols : ks + Cfg::kBc * Cfg::kCols;
        };
        auto mask = [&](arch::FragC(&s)[Cfg::kSNT], int mt) {
            mc.row0 = row_base + 16 * mt;
            mc.need_diag = need_diag[mt];
            /* Plain calls: the masks alone, on raw scores; the softmax
             * folds the scale into its exp2. A branch of its own, so the
             * common case runs no softcap, bias or ALiBi code. */
            if (kPlainOnly || p.plain) {
                mask_scores<Cfg::kSNT, false, false>(s, p, mc, lane);
                return p.scale_log2;
            }
            mask_scores<Cfg::kSNT>(s, p, mc, lane);
            return 1.0f;
        };
        auto after_softmax = [&](arch::FragC(&s)[Cfg::kSNT], int mt) {
            mc.row0 = row_base + 16 * mt;
            if (!kPlainOnly && p.has_dropout)
                apply_dropout<Cfg::kSNT>(s, p, mc, lane);
        };
        if constexpr (Cfg::kKeySplit)
            fwd_key_tile_ks<Cfg>(o, sm, sh.spart, p.qk_chunks, p.v_chunks, p.dqk, p.dv, wm, wn, lane, next_slab,
                                 q_slab, mask, after_softmax);
        else
            fwd_key_tile_mt<Cfg>(o, sm, sh.spart, p.qk_chunks, p.v_chunks, p.dqk, p.dv, wm, wn, lane, next_slab,
                                 q_slab, mask, after_softmax);
    }

    /* Key split: each warp's share of the row sums, added after the barrier
     * in the same order in every warp. */
    if constexpr (Cfg::kKeySplit) {
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
            KeySplitSmem<Cfg>::sum(sh.spart)[KeySplitSmem<Cfg>::at(wn, wm * Cfg::kMT + mt, lane)] =
                make_float2(arch::quad_sum(sm[mt].l[0]), arch::quad_sum(sm[mt].l[1]));
    }

    arch::cp_async_wait<0>();
    __syncthreads(); /* every warp is done with the ring: reuse it for O */

    float inv_l[Cfg::kMT][2], lse[Cfg::kMT][2];
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt) {
        if constexpr (Cfg::kKeySplit) {
            float total[2] = {0.0f, 0.0f};
#pragma unroll
            for (int n = 0; n < Cfg::kWN; ++n) {
                const float2 part = KeySplitSmem<Cfg>::sum(sh.spart)[KeySplitSmem<Cfg>::at(n, wm * Cfg::kMT + mt, lane)];
                total[0] += part.x;
                total[1] += part.y;
            }
            sm[mt].finish_sums(total, inv_l[mt], lse[mt]);
        } else {
            sm[mt].finish(inv_l[mt], lse[mt]);
        }
    }

    const int64_t seq_row = q0; /* position of the block's first row in its sequence */
    if (p.kv_splits > 1) {
        int64_t rows = (int64_t)p.nq;
        int64_t base = (((int64_t)w.split * p.batch + w.b) * p.hq + w.h) * rows;
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
            store_partial<Cfg>(o[mt], inv_l[mt], lse[mt], p.part_o + base * p.dv, p.part_lse + base,
                               (int)seq_row + (wm * Cfg::kMT + mt) * 16, seqlen_q, p.dv, wn, lane);
        return;
    }
    if (p.lse && wn == 0 && (lane & 3) == 0) {
        float *lg = p.lse + (p.cu_q ? q_start * p.lse_sn : (int64_t)w.b * p.lse_sb) +
                    (int64_t)w.h * p.lse_sh;
#pragma unroll
        for (int mt = 0; mt < Cfg::kMT; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                int r = row_base + 16 * mt + arch::frag_c_row(lane, 2 * half);
                if (r < seqlen_q)
                    lg[(int64_t)r * p.lse_sn] = lse[mt][half];
            }
    }
    T *og = static_cast<T *>(p.o) + (p.cu_q ? q_start * p.o_sn : (int64_t)w.b * p.o_sb) +
            (int64_t)w.h * p.o_sh + (int64_t)q0 * p.o_sn;
    T *stile = reinterpret_cast<T *>(smem_raw);
#pragma unroll
    for (int mt = 0; mt < Cfg::kMT; ++mt)
        stage_o_rows<Cfg, T>(o[mt], inv_l[mt], stile, wm * Cfg::kMT + mt, wn, lane);
    __syncthreads();
    copy_o_tile<Cfg, T>(stile, [&](int r) { return og + (int64_t)r * p.o_sn; }, rows_valid, p.dv, tid);
}

/* An entry point's body on an architecture whose blocks get at most
 * kBlockSmem bytes of shared memory: the tile, or, for a tile that needs
 * more (never planned there), no body (build time) and a trap should it be
 * launched all the same. */
template <class Cfg, size_t kBlockSmem, bool kPlainOnly = false>
__device__ __forceinline__ void fwd_entry(const ffpa_gpu_fwd_params &p)
{
    if constexpr (fwd_min_smem<Cfg>() <= kBlockSmem)
        fwd_body<Cfg, kPlainOnly>(p);
    else
        arch::trap();
}

/*
 * Split-KV merge (flash-decoding): O = sum_s exp(LSE_s - LSE) O_s with
 * LSE = log sum_s exp(LSE_s). One block per (row, head, batch).
 */
template <typename T> __device__ __forceinline__ void combine_body(const ffpa_gpu_fwd_params &p)
{
    const int row = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int64_t q_start = 0;
    int seqlen_q = p.nq;
    if (p.cu_q) {
        q_start = p.cu_q[b];
        seqlen_q = p.cu_q[b + 1] - p.cu_q[b];
    }
    if (row >= seqlen_q)
        return;
    const int64_t split_stride = (int64_t)p.batch * p.hq * p.nq;
    const int64_t idx = ((int64_t)b * p.hq + h) * p.nq + row;
    float mx = -INFINITY;
    for (int s = 0; s < p.kv_splits; ++s)
        mx = fmaxf(mx, p.part_lse[s * split_stride + idx]);
    float sum = 0.0f;
    if (mx != -INFINITY)
        for (int s = 0; s < p.kv_splits; ++s)
            sum += __expf(p.part_lse[s * split_stride + idx] - mx);
    const float lse = sum > 0.0f ? mx + __logf(sum) : -INFINITY;
    T *og = static_cast<T *>(p.o) + (p.cu_q ? q_start * p.o_sn : (int64_t)b * p.o_sb) +
            (int64_t)h * p.o_sh + (int64_t)row * p.o_sn;
    for (int c = threadIdx.x; c < p.dv; c += blockDim.x) {
        float acc = 0.0f;
        if (sum > 0.0f)
            for (int s = 0; s < p.kv_splits; ++s) {
                float ls = p.part_lse[s * split_stride + idx];
                if (ls != -INFINITY)
                    acc += __expf(ls - lse) * p.part_o[(s * split_stride + idx) * p.dv + c];
            }
        og[c] = arch::from_f32<T>(acc);
    }
    if (p.lse && threadIdx.x == 0)
        p.lse[(p.cu_q ? q_start * p.lse_sn : (int64_t)b * p.lse_sb) + (int64_t)h * p.lse_sh +
              (int64_t)row * p.lse_sn] = lse;
}

} /* namespace ffpa */

#endif
