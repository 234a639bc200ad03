/*
 * Softmax gradient of a Hopper backward tile, in the transposed frame the
 * dK/dV GEMMs want (keys are the rows of the wgmma accumulators):
 *   P^T  = exp2(cap(S^T * scale_log2) + bias * log2e + ALiBi - lse2[row])
 *          masked to 0 outside the sequence, above the causal diagonal and
 *          outside the window (cap: the logit softcap, tanh kept for its
 *          derivative),
 *   Z    = keep * dropout_scale (the mask of common/philox.h, as the forward
 *          and the cpu backend draw it; 1 without dropout),
 *   P^T Z  -> the dV GEMM,
 *   dS^T = P^T * (dP^T Z - Delta[row]) * scale * (1 - tanh^2)  (scale folded
 *          in here: it multiplies both dK = dS^T Q and dQ = dS K).
 * Both leave as 16-bit tiles in shared memory in the TMA 128-byte swizzle
 * (rows of 64 query rows = 128 bytes), the layout the wgmma descriptors of
 * the second GEMM phase read (softmax_grad); the key-split kernel keeps
 * them in registers as wgmma A fragments and stores only dS^T, for dQ
 * (grad_probs, grad_dscores). P and dS stay fp32 until that rounding.
 */
#ifndef FFPA_CUDA_SM90_BWD_SOFTMAX_CUH
#define FFPA_CUDA_SM90_BWD_SOFTMAX_CUH

#include <math.h>

#include "bwd/bwd_params.h"
#include "masking.cuh" /* kLog2e, the window bounds; philox.h */
#include "sm90_arch.cuh"
#include "sm90_bwd_dbias.cuh"
#include "sm90_bwd_mainloop.cuh"

namespace ffpa {
namespace sm90 {

/* The query rows' lse2 (base-2 LSE; +inf past the sequence or for a row
 * with no keys, so P = 0 there) and Delta: this thread's value of
 * rows[0..127] (rows[0..63] the lse2, rows[64..127] Delta), one per thread
 * of consumer 0. The kernel loads it a tile ahead (fetch_row: the global
 * value as it is) and stores it at the tile's start (row_value: converted
 * there, so nothing waits on the load until then). */
FFPA_DEV float fetch_row(const ffpa_bwd_params &p, const BwdWork &w, int h, int q0, int ctid)
{
    const int r = q0 + (ctid & 63);
    if (ctid < 64) {
        const float *lse =
            p.lse + (int64_t)h * p.lse_sh + (p.cu_q ? w.q_start * p.lse_sn : (int64_t)w.b * p.lse_sb);
        return r < w.seqlen_q ? lse[(int64_t)r * p.lse_sn] : -INFINITY;
    }
    const float *dl = p.delta + (int64_t)h * p.total_q + (p.cu_q ? w.q_start : (int64_t)w.b * p.nq);
    return r < w.seqlen_q ? dl[r] : 0.0f;
}

FFPA_DEV float row_value(float fetched, int ctid)
{
    return ctid >= 64 ? fetched : fetched == -INFINITY ? INFINITY : fetched * 1.4426950408889634f;
}

/* Byte offset of element (row, 2 * quad .. +1 of column chunk j) in a
 * swizzled 64 x 64 16-bit tile. */
FFPA_DEV uint32_t swizzled_pair(int row, int j, int quad)
{
    return (uint32_t)row * 128 + ((uint32_t)(j ^ (row & 7)) << 4) + (uint32_t)quad * 4;
}

/* The n8-blocks [first, first + count) of the tile a consumer (part)
 * finishes: its part of the CTA's block (all 8 without a cluster, block
 * `rank` with one), at most kCount; part 0 the first ones. Element arrays
 * sized kCount hold block j at j % kCount: distinct within a part's
 * consecutive blocks, and j stays a compile-time index. */
template <class Cfg> struct GradBlocks {
    static constexpr int kCount = Cfg::kPartNT;
    static FFPA_DEV int first(uint32_t rank, int part) { return (int)rank * Cfg::kBlockNT + part * kCount; }
    static FFPA_DEV int count(uint32_t rank, int part)
    {
        const int n = Cfg::blocks_of((int)rank) - part * kCount;
        return Cfg::kEvenBlocks ? kCount : n < 0 ? 0 : n < kCount ? n : kCount;
    }
};

/* Dropout keep bits of this thread's elements of blocks [j0, j0 + count)
 * (bit 4j + i). A Philox block covers 4 consecutive keys of one query row
 * (common/philox.h), and in the m64 fragment those 4 keys sit in the 4
 * lanes 16c + 4g + quad, g = 0..3, which hold the same 2 query rows and 2
 * key halves: 4 blocks between them per n8-block. So lane g draws the one
 * block of its element i = g (query 2 quad + (g & 1), key half g >> 1) and
 * the 4 keep bits go round by shuffles: one Philox block per thread and
 * n8-block instead of four, each of whose words but one went unused. */
template <class Cfg>
FFPA_DEV uint32_t keep_bits(const ffpa_gpu_fwd_params &m, const BwdWork &w, int h, int q0, int ctid, int j0,
                           int count)
{
    constexpr int kCount = GradBlocks<Cfg>::kCount;
    const int warp = ctid >> 5, lane = ctid & 31, quad = lane & 3, g = (lane >> 2) & 3;
    const int key0 = w.kb0 + warp * 16 + 8 * (g >> 1) + 4 * (lane >> 4); /* a multiple of 4 */
    uint32_t drawn = 0; /* bit 4 jj + k: key key0 + k of block j0 + jj */
#pragma unroll 1
    for (int jj = 0; jj < count; ++jj) {
        const int q = q0 + 8 * (j0 + jj) + 2 * quad + (g & 1);
        const ffpa_u32x4 v = ffpa_dropout_words(m.dropout_seed, m.dropout_offset, m.hq, w.b, h, q, key0);
        const uint32_t t = m.dropout_threshold;
        drawn |= ((uint32_t)(v.x >= t) | (uint32_t)(v.y >= t) << 1 | (uint32_t)(v.z >= t) << 2 |
                  (uint32_t)(v.w >= t) << 3)
                 << (4 * jj);
    }
    uint32_t bits = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t got = __shfl_sync(0xFFFFFFFFu, drawn, (lane & 0x13) | (i << 2));
#pragma unroll
        for (int jj = 0; jj < kCount; ++jj)
            if (jj < count)
                bits |= ((got >> (4 * jj + g)) & 1u) << (4 * (j0 + jj) + i);
    }
    return bits;
}

/* With a bias: this thread's bias elements of the n8-blocks [j0, j0 +
 * count) it finishes (element 4 (j % kCount) + i, GradBlocks), 0 outside
 * the sequences and above the causal diagonal. Loaded
 * before the tile's phase-1 GEMMs are issued and kept raw (fp32 bits, or
 * the 16-bit value) until softmax_grad converts them: no load result is
 * used before all are issued, so their latency overlaps each other and the
 * GEMMs. (Loaded inside softmax_grad, each load met its use at once and the
 * loads ran one after another: D=512 lost 40% of its speed to a bias.) */
template <class Cfg> struct BwdBiasTile {
    static constexpr int kValues = 4 * GradBlocks<Cfg>::kCount;
    uint32_t raw[kValues];

    FFPA_DEV void load(const ffpa_bwd_params &p, const BwdWork &w, int h, int q0, int ctid, int j0, int count)
    {
        constexpr int kCount = GradBlocks<Cfg>::kCount;
        const ffpa_gpu_fwd_params &m = p.mask;
        const int warp = ctid >> 5, lane = ctid & 31, quad = lane & 3;
        const int64_t plane = (int64_t)w.b * m.bias_sb + (int64_t)h * m.bias_sh;
        int64_t at[kValues];
        bool ok[kValues];
#pragma unroll
        for (int k = 0; k < kValues; ++k) {
            /* block j0 + jj sits at (j0 + jj) % kCount = k / 4 (j0 a multiple of kCount unless a cluster of three) */
            const int jj = Cfg::kEvenBlocks ? k / 4 : (k / 4 - j0 % kCount + kCount) % kCount;
            const int key = w.kb0 + warp * 16 + (lane >> 2) + 8 * ((k & 3) >> 1);
            const int q = q0 + 8 * (j0 + jj) + 2 * quad + (k & 1);
            ok[k] = jj < count && key < w.seqlen_k && q < w.seqlen_q && (!p.causal || key <= q + w.diag);
            at[k] = plane + (int64_t)q * m.bias_sn + (int64_t)key * m.bias_sd;
        }
        if (m.bias_dtype == FFPA_F32) {
            const uint32_t *src = static_cast<const uint32_t *>(m.bias);
#pragma unroll
            for (int k = 0; k < kValues; ++k)
                raw[k] = ok[k] ? src[at[k]] : 0u; /* fp32 bits of 0 */
        } else {
            const uint16_t *src = static_cast<const uint16_t *>(m.bias);
#pragma unroll
            for (int k = 0; k < kValues; ++k)
                raw[k] = ok[k] ? src[at[k]] : 0u; /* 16-bit 0 */
        }
    }

    /* Element k in log2 units. */
    FFPA_DEV float log2_at(int k, int dtype) const
    {
        float v;
        if (dtype == FFPA_F32)
            v = __uint_as_float(raw[k]);
        else if (dtype == FFPA_BF16)
            v = __uint_as_float(raw[k] << 16);
        else
            v = __half2float(__ushort_as_half((unsigned short)raw[k]));
        return v * kLog2e;
    }
};

/* Where a consumer finds S^T and dP^T of n8-block j (4 values each, wgmma
 * m64n64 fragment order): its own accumulator `mine` (S^T for part 0,
 * dP^T for part 1) and the other one's values of the blocks this part
 * finishes, in fragment order in shared memory (float4 q of thread t at
 * (q * 128 + t) * 16, q counted from the CTA's first n8-block). */
template <class Cfg> struct SharedScores {
    const float (&mine)[32];
    const float *other;
    int part, ctid;
    FFPA_DEV void operator()(int j, float (&sraw)[4], float (&dpv)[4]) const
    {
        const float4 o4 = reinterpret_cast<const float4 *>(other)[(j % Cfg::kBlockNT) * 128 + ctid];
        const float ov[4] = {o4.x, o4.y, o4.z, o4.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            dpv[i] = part == 1 ? mine[4 * j + i] : ov[i];
            sraw[i] = part == 1 ? ov[i] : mine[4 * j + i];
        }
    }
};

/* This thread's 4 elements of n8-block j of the tile (query row q0 on,
 * w.kb0's 64 keys), from their raw scores: sv the logits in log2 units
 * before the row's LSE, the variants applied (bias: where `bias` is given
 * and the problem has one); live inside the sequence, the causal triangle
 * and the window (all, unchecked, without kMask: a tile inside all three);
 * th tanh of the capped logit (0 without a softcap), whose
 * 1 - th^2 the gradient needs. The tests are once per n8-block (uniform),
 * not per element, so each step is straight-line code over 4 values. */
template <class Cfg, bool kExtras, bool kMask = true>
FFPA_DEV void grad_logits(const float (&sraw)[4], const ffpa_bwd_params &p, const BwdWork &w, int q0, int ctid,
                          int j, float slope, const BwdBiasTile<Cfg> *bias, float (&sv)[4], bool (&live)[4],
                          float (&th)[4])
{
    const int warp = ctid >> 5, lane = ctid & 31, quad = lane & 3;
    const ffpa_gpu_fwd_params &m = p.mask;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int key = w.kb0 + warp * 16 + (lane >> 2) + 8 * (i >> 1), q = q0 + 8 * j + 2 * quad + (i & 1);
        live[i] = !kMask || (key < w.seqlen_k && (!p.causal || key <= q + w.diag));
        sv[i] = sraw[i] * m.scale_log2;
        th[i] = 0.0f;
    }
    if constexpr (kExtras) {
        if (kMask && m.window)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int key = w.kb0 + warp * 16 + (lane >> 2) + 8 * (i >> 1), q = q0 + 8 * j + 2 * quad + (i & 1);
                live[i] = live[i] && key >= first_visible_col(m, q, w.diag) && key <= last_visible_col(m, q, w.diag);
            }
        if (m.softcap_out > 0.0f)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                th[i] = arch::tanh_fast(sv[i] * m.softcap_in);
                sv[i] = m.softcap_out * th[i];
            }
        if (bias && m.bias) /* (a dead element's value never reaches P) */
#pragma unroll
            for (int i = 0; i < 4; ++i)
                sv[i] += bias->log2_at(4 * (j % GradBlocks<Cfg>::kCount) + i, m.bias_dtype);
        if (m.alibi)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int key = w.kb0 + warp * 16 + (lane >> 2) + 8 * (i >> 1), q = q0 + 8 * j + 2 * quad + (i & 1);
                sv[i] -= slope * (float)abs(q + w.diag - key);
            }
    }
}

/* The ALiBi slope of head h in log2 units (0 without ALiBi). */
template <bool kExtras> FFPA_DEV float alibi_slope_log2(const ffpa_bwd_params &p, const BwdWork &w, int h)
{
    const ffpa_gpu_fwd_params &m = p.mask;
    return kExtras && m.alibi ? m.alibi[(int64_t)w.b * m.alibi_sb + (int64_t)h * m.alibi_sh] * kLog2e : 0.0f;
}

/* What a kept element is scaled by: dropout_scale with dropout, else 1. */
template <bool kExtras> FFPA_DEV float dropout_kept_scale(const ffpa_bwd_params &p)
{
    return kExtras && p.mask.has_dropout ? p.mask.dropout_scale : 1.0f;
}

/* Dropout's factor Z of element i of n8-block j: dropout_scale where kept,
 * 0 where dropped (keep: keep_bits' word, all ones without dropout). */
FFPA_DEV float keep_factor(uint32_t keep, int j, int i, float z_kept)
{
    return (keep >> ((4 * j + i) & 31)) & 1 ? z_kept : 0.0f;
}

/* P^T and dS^T of n8-blocks [j0, j0 + count) of the tile (query head h,
 * first row q0) of the 64 keys from w.kb0, S^T and dP^T from `src`
 * (SharedScores). In a cluster the pairs written also go
 * to every peer's tiles (the all-gather, completing on the peers' ag_full);
 * bias: the tile's bias elements (BwdBiasTile, loaded with a bias). kExtras: bias,
 * dropout, window, softcap or ALiBi (a separate kernel instantiation: in the same kernel their
 * registers and code cost the plain path ~10%), and with them dbias where
 * add_dbias (the CTA's first pass: later ones recompute the same dS). */
template <class Cfg, bool kExtras, class Src>
FFPA_DEV void softmax_grad(const Src &src, const float *rows, uint8_t *pt, uint8_t *dst, const ffpa_bwd_params &p,
                           const BwdWork &w, int h, int q0, int ctid, uint32_t rank, int j0, int count,
                           uint64_t *ag_full, bool add_dbias, const BwdBiasTile<Cfg> &bias)
{
    using T = typename Cfg::T;
    const int warp = ctid >> 5, lane = ctid & 31, quad = lane & 3;
    const float scale = p.scale;
    const ffpa_gpu_fwd_params &m = p.mask;
    const uint32_t keep = kExtras && m.has_dropout ? keep_bits<Cfg>(m, w, h, q0, ctid, j0, count) : 0xFFFFFFFFu;
    const float z_kept = dropout_kept_scale<kExtras>(p);
    BwdDbias db{};
    if constexpr (kExtras)
        db = BwdDbias::of(p, w, h, ctid);
    const bool dbias = kExtras && add_dbias && db.plane;
    const float slope = alibi_slope_log2<kExtras>(p, w, h);
    /* Every exp2 taken, dead elements dropped after it, and the rows'
     * values read whatever the mask: a load or an exp under each element's
     * mask ran one after another (v2.18). */
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if (j < j0 || j >= j0 + count)
            continue; /* j stays a compile-time register index */
        float dpv[4], sraw[4];
        src(j, sraw, dpv);
        float pv[4], g[4], dsv[4], sv[4], th[4];
        bool live[4];
        grad_logits<Cfg, kExtras>(sraw, p, w, q0, ctid, j, slope, &bias, sv, live, th);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = 8 * j + 2 * quad + (i & 1);
            const float e = arch::exp2_fast(sv[i] - rows[row]);
            const float pr = live[i] ? e : 0.0f;
            const float z = keep_factor(keep, j, i, z_kept);
            pv[i] = pr * z;
            g[i] = pr * (dpv[i] * z - rows[64 + row]); /* d(score) = dbias */
            /* d(capped)/d(raw) = 1 - tanh^2 (th = 0 without softcap). */
            dsv[i] = g[i] * scale * (1.0f - th[i] * th[i]);
        }
        if (dbias)
            db.add(q0 + 8 * j + 2 * quad, g, lane);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const uint32_t off = swizzled_pair(warp * 16 + (lane >> 2) + 8 * half, j, quad);
            const uint32_t pw = arch::pack_f32x2<T>(pv[2 * half], pv[2 * half + 1]);
            const uint32_t dw = arch::pack_f32x2<T>(dsv[2 * half], dsv[2 * half + 1]);
            *reinterpret_cast<uint32_t *>(pt + off) = pw;
            *reinterpret_cast<uint32_t *>(dst + off) = dw;
#pragma unroll
            for (int r = 1; r < Cfg::kCluster; ++r) {
                const uint32_t to = (rank + (uint32_t)r) % Cfg::kCluster;
                st_async_remote_b32(pt + off, ag_full, to, pw);
                st_async_remote_b32(dst + off, ag_full, to, dw);
            }
        }
    }
    if (dbias)
        db.flush(lane);
}

/* The key-split kernel's softmax gradient, in two halves around its GEMMs
 * (all 8 n8-blocks of the consumer's 64 keys, S^T and dP^T in its own
 * registers; no bias: sm90_bwd_launch.cu keeps a bias off that kernel).
 * grad_probs, once S^T is done and while dP^T is still in flight: s becomes
 * P^T scale (1 - tanh^2) in place (what dS^T needs of it), pf the A
 * fragments of P^T Z for the dV GEMM from registers (wgmma RS; the m64n64
 * accumulator's pairs packed to 16 bits, as the forward's P). The rows'
 * lse2 are read first, as pairs, and every exp2 is taken, dead elements'
 * dropped after: a load or an exp under each element's mask ran one after
 * another. In the plain build a tile that no key bound or causal diagonal
 * cuts (uniform) skips the masks. */
template <class Cfg, bool kExtras, bool kMask>
FFPA_DEV void grad_probs_blocks(float (&s)[32], uint32_t (&pf)[4][4], const float *rows, uint32_t keep,
                                const ffpa_bwd_params &p, const BwdWork &w, int h, int q0, int ctid)
{
    using T = typename Cfg::T;
    const int quad = ctid & 3;
    const float z_kept = dropout_kept_scale<kExtras>(p);
    const float slope = alibi_slope_log2<kExtras>(p, w, h), scale = p.scale;
    float2 lse[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
        lse[j] = reinterpret_cast<const float2 *>(rows)[4 * j + quad];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float sraw[4] = {s[4 * j], s[4 * j + 1], s[4 * j + 2], s[4 * j + 3]};
        float sv[4], th[4], pz[4];
        bool live[4];
        grad_logits<Cfg, kExtras, kMask>(sraw, p, w, q0, ctid, j, slope, nullptr, sv, live, th);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float e = arch::exp2_fast(sv[i] - (i & 1 ? lse[j].y : lse[j].x));
            const float pr = live[i] ? e : 0.0f;
            pz[i] = pr * keep_factor(keep, j, i, z_kept);
            s[4 * j + i] = pr * scale * (1.0f - th[i] * th[i]);
        }
        pf[j >> 1][2 * (j & 1)] = arch::pack_f32x2<T>(pz[0], pz[1]);
        pf[j >> 1][2 * (j & 1) + 1] = arch::pack_f32x2<T>(pz[2], pz[3]);
    }
}

template <class Cfg, bool kExtras>
FFPA_DEV void grad_probs(float (&s)[32], uint32_t (&pf)[4][4], const float *rows, uint32_t keep,
                         const ffpa_bwd_params &p, const BwdWork &w, int h, int q0, int ctid)
{
    /* (Not in the extras build: two copies of its longer code spill there.) */
    const bool inside = !kExtras && w.kb0 + 64 <= w.seqlen_k && (!p.causal || w.kb0 + 63 <= q0 + w.diag);
    if (inside)
        grad_probs_blocks<Cfg, kExtras, false>(s, pf, rows, keep, p, w, h, q0, ctid);
    else
        grad_probs_blocks<Cfg, kExtras, true>(s, pf, rows, keep, p, w, h, q0, ctid);
}

/* grad_dscores, once dP^T is done: dS^T = (grad_probs' s) (dP^T Z - Delta)
 * into dst (the swizzled 16-bit tile the dQ GEMMs read) and df (the dK
 * GEMM's A fragments); the rows' Delta read first, as pairs. */
template <class Cfg, bool kExtras>
FFPA_DEV void grad_dscores(const float (&ps)[32], const float (&dp)[32], uint32_t (&df)[4][4], uint8_t *dst,
                           const float *rows, uint32_t keep, const ffpa_bwd_params &p, int ctid)
{
    using T = typename Cfg::T;
    const int warp = ctid >> 5, lane = ctid & 31, quad = lane & 3;
    const float z_kept = dropout_kept_scale<kExtras>(p);
    float2 delta[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
        delta[j] = reinterpret_cast<const float2 *>(rows + 64)[4 * j + quad];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        float dsv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            dsv[i] = ps[4 * j + i] * (dp[4 * j + i] * keep_factor(keep, j, i, z_kept) -
                                      (i & 1 ? delta[j].y : delta[j].x));
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const uint32_t dw = arch::pack_f32x2<T>(dsv[2 * half], dsv[2 * half + 1]);
            df[j >> 1][2 * (j & 1) + half] = dw;
            *reinterpret_cast<uint32_t *>(dst + swizzled_pair(warp * 16 + (lane >> 2) + 8 * half, j, quad)) = dw;
        }
    }
}

/* Without a cluster the consumers exchange the halves the other finishes
 * through the fragment-order buffer: consumer 1 its dP^T of blocks 0-3,
 * consumer 0 its S^T of blocks 4-7 (slot j at float4 j * 128 + thread). */
FFPA_DEV void store_half(const float (&acc)[32], float *buf, int consumer, int ctid)
{
#pragma unroll
    for (int j = 0; j < 8; ++j)
        if ((j >= 4) == (consumer == 0))
            reinterpret_cast<float4 *>(buf)[j * 128 + ctid] =
                make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
