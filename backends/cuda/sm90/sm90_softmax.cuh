/*
 * Softmax of one consumer's 64 x kBc score tile in the Hopper forward:
 * scores -> P in the A-fragment layout of the PV wgmma, with the running
 * max/sum (the shared OnlineSoftmax state), masking, bias and dropout of
 * ../../gpu (the wgmma accumulator of each warp has the mma.sync FragC
 * layout, so they apply unchanged).
 *   whole_tile: one CTA holds the full S (cluster of 1);
 *   cluster:    Split-D across the cluster (sm90_exchange.cuh): this CTA
 *               masks and exponentiates only its own column block, relative
 *               to the running max while the scores do not outgrow it by
 *               much (FlashAttention-4's conditional rescaling: no rescale,
 *               no max shuffles), else to the block's row max; the peers'
 *               blocks arrive likewise, rounded to T; only blocks whose
 *               reference differs are rescaled to the common max here.
 * The plain single-CTA kernels take the running max as their reference the
 * same way.
 */
#ifndef FFPA_CUDA_SM90_SOFTMAX_CUH
#define FFPA_CUDA_SM90_SOFTMAX_CUH

#include "sm90_arch.cuh"
#include "sm90_exchange.cuh"
#include "sm90_fwd_config.cuh"

#include "fwd_params.h"
#include "masking.cuh"
#include "softmax.cuh"

namespace ffpa {
namespace sm90 {

template <class Cfg> struct TileSoftmax {
    using T = typename Cfg::T;
    static constexpr int kC = Cfg::kCluster;
    static constexpr int kBlockNT = Cfg::kBlockNT;
    MaskCtx mc;
    int diag;
    int tile0; /* key tile of the loop's tile 0 (the first one a window leaves visible) */
    OnlineSoftmax sm;
    /* Masks the n8-blocks [nt0, nt0 + kN) of loop tile t's scores, at key
     * column col0 of that tile. */
    template <int kN, bool kScale = true>
    FFPA_DEV void mask(float (&s)[Cfg::kSAcc], int nt0, int t, int col0, const ffpa_gpu_fwd_params &p, int lane)
    {
        arch::FragC(&sf)[kN] = *reinterpret_cast<arch::FragC(*)[kN]>(&s[4 * nt0]);
        mc.col0 = (tile0 + t) * Cfg::kBc + col0;
        mc.need_bounds = mc.col0 + 8 * kN > mc.seqlen_k;
        mc.need_diag = crosses_diag(p, mc.row0, mc.row0 + 15, mc.col0, mc.col0 + 8 * kN - 1, diag);
        mask_scores<kN, !Cfg::kPlain, kScale>(sf, p, mc, lane);
    }

    /* O *= alpha (kRescale), dropout over the whole tile, P -> A fragments. */
    template <bool kRescale = true>
    FFPA_DEV void finish_tile(float (&s)[Cfg::kSAcc], float (&o)[Cfg::kOAcc], uint32_t (&pf)[Cfg::kPSteps][4],
                              const float (&alpha)[2], const ffpa_gpu_fwd_params &p, int lane, int t)
    {
        if constexpr (kRescale)
            OnlineSoftmax::rescale(reinterpret_cast<arch::FragC(&)[Cfg::kOAcc / 4]>(o), alpha);
        if constexpr (!Cfg::kPlain) {
            if (p.has_dropout) {
                mc.col0 = (tile0 + t) * Cfg::kBc;
                apply_dropout<Cfg::kNT>(reinterpret_cast<arch::FragC(&)[Cfg::kNT]>(s), p, mc, lane);
            }
        }
#pragma unroll
        for (int kk = 0; kk < Cfg::kPSteps; ++kk) {
            pf[kk][0] = arch::pack_f32x2<T>(s[8 * kk + 0], s[8 * kk + 1]);
            pf[kk][1] = arch::pack_f32x2<T>(s[8 * kk + 2], s[8 * kk + 3]);
            pf[kk][2] = arch::pack_f32x2<T>(s[8 * kk + 4], s[8 * kk + 5]);
            pf[kk][3] = arch::pack_f32x2<T>(s[8 * kk + 6], s[8 * kk + 7]);
        }
    }

    /* The full S of key tile t is in s; before_finish runs before O or P
     * is written (the caller's wait for the PV GEMM still reading them).
     * The plain kernels leave the scores unscaled (the launch gives them
     * scale_log2 > 0 only): the row max of the raw scores times the scale
     * is the scaled max, and the scale rides in the exp2's FFMA; once the
     * maxima settle, the exp2s take the running max as their reference and
     * O keeps its scale (FlashAttention-3's folded scale and -4's
     * conditional rescaling: 96 FMUL and 64 FMUL a thread fewer per
     * 192-key tile at d128). */
    template <class BeforeFinish>
    FFPA_DEV void whole_tile(float (&s)[Cfg::kSAcc], float (&o)[Cfg::kOAcc], uint32_t (&pf)[Cfg::kPSteps][4],
                             const ffpa_gpu_fwd_params &p, int lane, int t, BeforeFinish before_finish)
    {
        constexpr bool kFold = Cfg::kPlain;
        mask<Cfg::kNT, !kFold>(s, 0, t, 0, p, lane);
        arch::FragC(&sf)[Cfg::kNT] = reinterpret_cast<arch::FragC(&)[Cfg::kNT]>(s);
        const float scale = kFold ? p.scale_log2 : 1.0f;
        float alpha[2] = {1.0f, 1.0f};
        float mx[2];
#pragma unroll
        for (int half = 0; half < 2; ++half)
            mx[half] = OnlineSoftmax::lane_max<Cfg::kNT>(sf, half, -INFINITY) * scale;
        /* The variants' kernels always take the new max: with the extra
         * branch ptxas spills the d128 one (0 -> 328 bytes). */
        if (!Cfg::kPlain || arch::warp_any(mx[0] > sm.m[0] + kGrowLog2 || mx[1] > sm.m[1] + kGrowLog2)) {
#pragma unroll
            for (int half = 0; half < 2; ++half)
                sm.advance<Cfg::kNT>(sf, alpha, half, arch::quad_max(fmaxf(sm.m[half], mx[half])), scale);
            before_finish();
            finish_tile(s, o, pf, alpha, p, lane, t);
        } else {
            /* Relative to the running max: no max shuffles, no rescale. */
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float ref = sm.m[half] == -INFINITY ? 0.0f : sm.m[half];
                float sum[2] = {0.0f, 0.0f};
#pragma unroll
                for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        float &v = s[4 * nt + 2 * half + e];
                        v = arch::exp2_fast(fmaf(v, scale, -ref));
                        sum[e] += v;
                    }
                sm.l[half] += sum[0] + sum[1];
            }
            before_finish();
            finish_tile<false>(s, o, pf, alpha, p, lane, t);
        }
    }

    /* How far (log2 domain) a score may exceed the running max before a
     * tile (or a cluster's block) stops using it as its reference: P then
     * reaches at most 2^8 (fp16 and bf16 hold it; FlashAttention-4's
     * threshold). The cost: a row's largest P is no longer exactly 1, so
     * peaked rows round one more large term (docs/notes/forward.md). */
    static constexpr float kGrowLog2 = 8.0f;
    /* Clusters of three keep the block-max reference on every tile: with
     * the two extra branches ptxas spills d256x3's consumer (16 -> 68
     * bytes of spill stores; docs/notes/forward.md). */
    static constexpr bool kRunningRef = kC != 3;
    /* The row sums: of the fp32 probabilities where the call asks for the
     * LSE (its error bound), else of P as rounded (the denominator that
     * matches O's rounded numerator). Only the MLA pair (kSliceV < kSlice)
     * carries both forms: +3.4% there without the LSE; in the square kernels
     * the second form cost d256x2 four spill registers and 1.8%, so they
     * always sum the fp32 values (docs/notes/forward.md). */
    static constexpr bool kExactAlways = Cfg::kSliceV == Cfg::kSlice;
    FFPA_DEV static bool exact_sums(const ffpa_gpu_fwd_params &p) { return kExactAlways || p.lse != nullptr; }

    /* Our block b (compile-time) of s holds its full S: mask it, pick the
     * rows' reference r and exponentiate relative to it, rounded to T: the
     * words ph (what the peers receive) and their values in s; l, the rows'
     * sums of the probabilities before the rounding (whole rows). r is the
     * running max (the same in every CTA, so the blocks need no rescale)
     * unless a score of the warp's rows exceeds it by more than kGrowLog2;
     * then the block's row max, as a first tile needs. */
    template <int b>
    FFPA_DEV void own_block(float (&s)[Cfg::kSAcc], uint32_t (&ph)[2 * kBlockNT], float (&r)[2], float (&l)[2],
                            const ffpa_gpu_fwd_params &p, int lane, int t, int key_block = b)
    {
        const bool exact = exact_sums(p);
        constexpr int kNb = Cfg::blocks_of(b);
        mask<kNb>(s, b * kBlockNT, t, key_block * 8 * kBlockNT, p, lane);
        float mx[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            mx[half] = -INFINITY;
#pragma unroll
            for (int j = 0; j < kNb; ++j)
                mx[half] = fmaxf(mx[half], fmaxf(s[4 * (b * kBlockNT + j) + 2 * half],
                                                 s[4 * (b * kBlockNT + j) + 2 * half + 1]));
        }
        /* m + 8 is -inf before any visible key: a first visible score grows. */
        if (!kRunningRef || arch::warp_any(mx[0] > sm.m[0] + kGrowLog2 || mx[1] > sm.m[1] + kGrowLog2)) {
            r[0] = arch::quad_max(fmaxf(sm.m[0], mx[0]));
            r[1] = arch::quad_max(fmaxf(sm.m[1], mx[1]));
        } else {
            r[0] = sm.m[0];
            r[1] = sm.m[1];
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            /* A row with only masked keys so far: reference 0, exp2(-inf) = 0. */
            const float ref = r[half] == -INFINITY ? 0.0f : r[half];
            float sum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < kNb; ++j) {
                float &a = s[4 * (b * kBlockNT + j) + 2 * half];
                float &c = s[4 * (b * kBlockNT + j) + 2 * half + 1];
                const float pa = arch::exp2_fast(a - ref), pc = arch::exp2_fast(c - ref);
                sum[0] += pa;
                sum[1] += pc;
                const uint32_t w = arch::pack_f32x2<T>(pa, pc);
                ph[2 * j + half] = w;
                const float2 f = arch::unpack_f32x2<T>(w);
                a = f.x;
                c = f.y;
            }
            /* Whole rows for the peers where the sums are exact. */
            l[half] = kExactAlways ? arch::quad_sum(sum[0] + sum[1]) : sum[0] + sum[1];
        }
        /* The MLA pair adds its quads after the loop (H200 against main:
         * +3.4% without the LSE, +1.3% with it; in the loop +2.8%, -1.8%). */
        if (!kExactAlways && exact) {
            l[0] = arch::quad_sum(l[0]);
            l[1] = arch::quad_sum(l[1]);
        }
    }

    /* own_block<rank> and its all-gather send: the block index must be a
     * compile-time constant (no run-time register indexing), so one branch
     * per rank, uniform across the CTA. */
    template <int b>
    FFPA_DEV void own_block_of_rank(float (&s)[Cfg::kSAcc], float (&mb)[kC][2], float (&l)[2],
                                    const ClusterExchange<Cfg> &x, const ffpa_gpu_fwd_params &p, int lane, int t)
    {
        if (b == (int)x.rank) {
            uint32_t ph[2 * kBlockNT];
            own_block<b>(s, ph, mb[b], l, p, lane, t);
            x.template gather_send<Cfg::blocks_of(b)>(ph, mb[b], l);
        }
        if constexpr (b + 1 < kC)
            own_block_of_rank<b + 1>(s, mb, l, x, p, lane, t);
    }

    /* Split-D across the cluster: our block of s holds its full S of tile t
     * (after ClusterExchange::reduce), the other blocks are free. Every CTA
     * runs the same arithmetic on the same values and references, so all
     * hold the same P, row sums and maxima. kOwnFirst: the blocks in
     * ClusterExchange::own_first's order (ours is block 0), and the
     * caller's PV wait before the all-gather, not after: P's registers are
     * free while the peers' blocks arrive (the QK^T-two-ahead loop holds a
     * second S then; d256x2 spills 36 -> 12 bytes, d256x4 28 -> 0). The
     * row sums then add the blocks in a rank-dependent order: the CTAs'
     * sums may differ in the last bit; P and the maxima stay identical.
     * The row sums come whole from the blocks' owners (own_block's l, of
     * the probabilities before rounding) and live in the first lane of
     * each quad (OnlineSoftmax::finish sums the quad). Once the maxima
     * settle, O keeps its scale (no rescale by alpha = 1). */
    template <bool kOwnFirst, class BeforeFinish>
    FFPA_DEV void cluster(float (&s)[Cfg::kSAcc], float (&o)[Cfg::kOAcc], uint32_t (&pf)[Cfg::kPSteps][4],
                          const ClusterExchange<Cfg> &x, const ffpa_gpu_fwd_params &p, int lane, int t,
                          BeforeFinish before_finish)
    {
        float mb[kC][2], own_l[2];
        if constexpr (kOwnFirst) {
            /* Blocks in ClusterExchange::own_first's order: ours is block 0. */
            static_assert(Cfg::kPlain, "dropout's keep bits follow the key order");
            uint32_t ph[2 * kBlockNT];
            own_block<0>(s, ph, mb[0], own_l, p, lane, t, (int)x.rank);
            x.template gather_send<kBlockNT>(ph, mb[0], own_l);
            before_finish();
            x.template gather<true>(s, mb, t);
        } else {
            own_block_of_rank<0>(s, mb, own_l, x, p, lane, t);
            x.gather(s, mb, t);
        }
        const bool exact = exact_sums(p);
        const int own = kOwnFirst ? 0 : (int)x.rank;
        /* Block b's row sum (whole rows; the quad's first lane adds it). */
        auto block_sum = [&](int b, int half) {
            return b == own ? own_l[half] : x.template peer_sum<kOwnFirst>(b, half);
        };
        const bool quad_lead = (lane & 3) == 0;
        bool settled = true; /* every block of the warp's rows relative to the running max */
#pragma unroll
        for (int b = 0; b < kC; ++b)
            settled = settled && mb[b][0] == sm.m[0] && mb[b][1] == sm.m[1];
        float alpha[2] = {1.0f, 1.0f};
        const bool rescale = !kRunningRef || arch::warp_any(!settled);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            if (!rescale) {
                /* The common case once the maxima settle: P stands as it
                 * arrived; only the row sums. */
                if (exact) {
                    float sum = block_sum(0, half);
#pragma unroll
                    for (int b = 1; b < kC; ++b)
                        sum += block_sum(b, half);
                    sm.l[half] += quad_lead ? sum : 0.0f;
                } else {
                    float sum[2] = {0.0f, 0.0f};
#pragma unroll
                    for (int nt = 0; nt < Cfg::kNT; ++nt) {
                        sum[0] += s[4 * nt + 2 * half];
                        sum[1] += s[4 * nt + 2 * half + 1];
                    }
                    sm.l[half] += sum[0] + sum[1];
                }
                continue;
            }
            /* Common max; every block rescaled from its reference to it. */
            float mx = mb[0][half];
#pragma unroll
            for (int b = 1; b < kC; ++b)
                mx = fmaxf(mx, mb[b][half]);
            const float ref = mx == -INFINITY ? 0.0f : mx;
            alpha[half] = arch::exp2_fast(sm.m[half] - ref);
            float sum = 0.0f, sum_p[2] = {0.0f, 0.0f};
#pragma unroll
            for (int b = 0; b < kC; ++b) {
                const float f = mb[b][half] == -INFINITY ? 0.0f : arch::exp2_fast(mb[b][half] - ref);
#pragma unroll
                for (int j = 0; j < kBlockNT; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        if (j >= Cfg::blocks_of(b))
                            continue;
                        float &v = s[4 * (b * kBlockNT + j) + 2 * half + e];
                        v *= f;
                        sum_p[e] += v;
                    }
                sum = fmaf(f, block_sum(b, half), sum);
            }
            sm.l[half] = sm.l[half] * alpha[half] + (exact ? (quad_lead ? sum : 0.0f) : sum_p[0] + sum_p[1]);
            sm.m[half] = mx;
        }
        if constexpr (!kOwnFirst)
            before_finish();
        /* The variants' kernels rescale by alpha = 1 too: a second copy of
         * their dropout code spilled d256x4's (28 -> 320 bytes of loads). */
        if (!Cfg::kPlain || rescale)
            finish_tile(s, o, pf, alpha, p, lane, t);
        else
            finish_tile<false>(s, o, pf, alpha, p, lane, t);
    }

    /* before_finish: called before O or P is written (the caller's wait
     * for the PV GEMM still reading them; kOwnFirst: before the
     * all-gather). */
    template <bool kOwnFirst = false, class BeforeFinish>
    FFPA_DEV void run(float (&s)[Cfg::kSAcc], float (&o)[Cfg::kOAcc], uint32_t (&pf)[Cfg::kPSteps][4],
                      const ClusterExchange<Cfg> &x, const ffpa_gpu_fwd_params &p, int lane, int t,
                      BeforeFinish before_finish)
    {
        if constexpr (kC > 1) {
            cluster<kOwnFirst>(s, o, pf, x, p, lane, t, before_finish);
        } else {
            whole_tile(s, o, pf, p, lane, t, before_finish);
        }
    }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
