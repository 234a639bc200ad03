/*
 * Main loop pieces of the Hopper backward: the work of a CTA, the
 * producer's TMA loads, and the consumers' warpgroup GEMMs.
 *
 * Two rings of 128-column slabs, one per consumer, each fed by its own
 * producer thread (slab n of ring c in slot n % kRingSlots, use
 * n / kRingSlots). Per query tile, ring 0 carries the kSlabs Q slabs (for
 * consumer 0's S^T), ring 1 the dO slabs (consumer 1's dP^T), in the order
 * col_of(): the pass's own column slabs (2 * pass + c, consumer c's dK/dV
 * columns) last. Those stay in the rings after phase 1 and are read again
 * in phase 2 (dV_c needs dO of slab 2 * pass + c, dK_c its Q slab): no slab
 * is loaded twice. empty[r][slot] takes 4 warps: the consumer that reads a
 * slab last releases it (consumer c, for the two own slabs 2 * pass + c in
 * both rings).
 *
 * Why not one shared ring: a consumer waits on full[slot] with a phase
 * parity, and a consumer that runs a lap ahead of the other would wait on
 * the parity of a phase two uses away and pass on the old one. Here a
 * consumer waits only on slabs of its own ring, or (phase 2) on the other
 * ring's own slabs, whose phase its peer has already waited for and which
 * cannot be refilled before this consumer releases them. */
#ifndef FFPA_CUDA_SM90_BWD_MAINLOOP_CUH
#define FFPA_CUDA_SM90_BWD_MAINLOOP_CUH

#ifdef FFPA_SM90_BWD_WATCHDOG
#include <stdio.h>
#endif

#include "bwd/bwd_params.h"
#include "sm90_arch.cuh"
#include "masking.cuh" /* visible_rows, last_visible_col */
#include "sm90_bwd_config.cuh"
#include "wgmma_ops.cuh"

namespace ffpa {
namespace sm90 {

/* mbarrier wait of the backward. Diagnostic builds
 * (-DFFPA_SM90_BWD_WATCHDOG) report a wait that spins for seconds (the
 * barrier, a tag and a counter) and trap, so a hang names its barrier. */
FFPA_DEV void bwd_wait(uint64_t *bar, uint32_t parity, bool cluster_scope, int tag, int x)
{
#ifdef FFPA_SM90_BWD_WATCHDOG
    long long n = 0;
    for (;;) {
        uint32_t ok;
        if (cluster_scope)
            asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(ok)
                         : "r"(smem_u32(bar)), "r"(parity)
                         : "memory");
        else
            asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(ok)
                         : "r"(smem_u32(bar)), "r"(parity)
                         : "memory");
        if (ok)
            return;
        if (++n == (1ll << 25) && (threadIdx.x & 31) == 0)
            printf("watchdog block %u thread %u tag %d x %d parity %u\n", blockIdx.x, threadIdx.x, tag, x, parity);
        if (n == (1ll << 27))
            __trap();
    }
#else
    (void)tag, (void)x;
    if (cluster_scope)
        mbar_wait_cluster(bar, parity);
    else
        mbar_wait(bar, parity);
#endif
}

/* [D, rows, heads, batch] views of Q, K, V and dO (16-bit, 64-column boxes)
 * and of the fp32 dQ buffer (32-column boxes; BwdConfig::kDqBulk). */
struct BwdMaps {
    CUtensorMap q, k, v, dout, dq;
};

struct BwdBarriers {
    uint64_t kv_full;
    uint64_t full[2][4], empty[2][4]; /* [consumer's ring][slot] (kMaxSlots / 2) */
    uint64_t rs_full[2], ag_full; /* cluster exchange [consumer] (sm90_bwd_exchange.cuh) */
    /* Staged dQ for a producer thread's TMA reductions: the key-split
     * kernel's tile ([0] only, sm90_bwd_keys.cuh), the gradient split's
     * boxes per consumer (sm90_bwd_grads.cuh). */
    uint64_t dq_full[2], dq_empty[2];
};
static_assert(sizeof(BwdBarriers) <= 256, "BwdConfig::kBarBytes");

/* Named barriers between the two consumers (ids; 0 is __syncthreads). */
enum BwdNamedBarrier {
    kBarDpFull = 1,  /* consumer 1's dP^T (and without a cluster consumer 0's S^T half) is in shared memory */
    kBarPdsFull = 2, /* P^T and dS^T are; the exchange buffer is free */
    kBarDq = 5,      /* + consumer: its 4 warps, around its dQ reduction (a deterministic turn, or the
                        tile staged for the TMA) */
};

/* One CTA's work: key block kb0..kb0+63 of (batch b, kv head kvh), against
 * query tiles [t_first, n_qt) of each of the group's query heads. */
struct BwdWork {
    int b, kvh, kb0;
    int64_t q_start, k_start; /* packed row of the sequence's first query / key (varlen), else 0 */
    int seqlen_q, seqlen_k, diag;
    int t_first, n_qt, group;
    int tma_b; /* batch coordinate of the tensor maps (0 for varlen) */
    int col0;  /* first head-dim column of this CTA (cluster rank * kCols) */
    int rot;   /* each head's tiles run from tile t_first + rot, wrapping around (see bwd_work) */

    FFPA_DEV int tiles_per_head() const { return n_qt - t_first; }
    FFPA_DEV int items() const { return group * tiles_per_head(); }
    /* The query head and tile of a step of a pass: the group's heads one
     * after the other, so the CTAs in flight share one head's dQ in L2.
     * head() / q0() of step n divide; the small-D kernel's consumers, where
     * that sat on the critical path at every tile's head, advance a Step
     * instead (+2.5% at D = 128). Elsewhere the division stays: a cursor's
     * registers spilled there (the producers' 24 registers, up to 88 bytes
     * in d256x4) for tiles many times longer. */
    FFPA_DEV int head(int step) const { return kvh * group + step / tiles_per_head(); }
    FFPA_DEV int q0(int step) const { return q0_of(Step{0, step % tiles_per_head()}); }
    struct Step {
        int h, t; /* query head; position in its run of tiles (0 .. tiles_per_head() - 1) */
    };
    FFPA_DEV Step first_step() const { return Step{kvh * group, 0}; }
    FFPA_DEV void advance(Step &s) const
    {
        if (++s.t == tiles_per_head()) {
            s.t = 0;
            ++s.h;
        }
    }
    /* The step's first query row: each head's tiles from t_first + rot, wrapping around. */
    FFPA_DEV int q0_of(const Step &s) const
    {
        const int tiles = tiles_per_head(), t = s.t + rot;
        return (t_first + (t < tiles ? t : t - tiles)) * 64;
    }
    /* The highest key block (of bc keys) that adds into query tile t: the
     * one holding the last key the tile's last row sees (causal, window).
     * Only asked for tiles this block adds into (so that key is >= 0). */
    FFPA_DEV int last_kb(int t, const ffpa_gpu_fwd_params &m, int bc = 64) const
    {
        const int row_last = min(seqlen_q, (t + 1) * 64) - 1;
        return min((seqlen_k + bc - 1) / bc - 1, last_visible_col(m, row_last, diag) / bc);
    }
    /* Deterministic mode: the turn counter of query tile t (head h) for the
     * dQ columns from col, and this key block's (of bc keys) turn there. */
    FFPA_DEV int *dq_turn(const ffpa_bwd_params &p, int h, int t, int col, int bc, int &mine) const
    {
        mine = last_kb(t, p.mask, bc) - kb0 / bc; /* the last block that adds into the tile goes first */
        return p.dq_turn + (((int64_t)b * p.hq + h) * p.dq_turn_tiles + t) * FFPA_BWD_DQ_TURN_PARTS + col / 64;
    }
    /* Offset of (query head h, query row q0, column 0) in the fp32 dQ buffer. */
    FFPA_DEV int64_t dq_row(const ffpa_bwd_params &p, int h, int q0) const
    {
        return (int64_t)h * p.dq.sh + (p.cu_q ? (q_start + q0) * p.dq.sn : (int64_t)b * p.dq.sb + (int64_t)q0 * p.dq.sn);
    }
    /* (this block's first key, column 0) of an output [B, Hkv, Nk, D] view
     * (dK, dV) with strides sb, sh, sn; packed rows with varlen. */
    template <class T> FFPA_DEV T *key_block(void *data, int64_t sb, int64_t sh, int64_t sn, bool varlen) const
    {
        const int64_t krow = varlen ? k_start + kb0 : kb0;
        return static_cast<T *>(data) + (int64_t)kvh * sh + (varlen ? 0 : (int64_t)b * sb) + krow * sn;
    }
};

template <class Cfg> FFPA_DEV bool bwd_work(const ffpa_bwd_params &p, uint32_t rank, BwdWork &w)
{
    const int kv_blocks = p.kv_blocks;
    const unsigned work = blockIdx.x / Cfg::kCluster; /* the same for both CTAs of a cluster */
    /* Deterministic dQ: the last key blocks launch first (sm90_bwd_epilogue.cuh). */
    const int j0 = (int)(work % (unsigned)kv_blocks);
    const int j = p.dq_turn ? kv_blocks - 1 - j0 : j0;
    const int rest = (int)(work / (unsigned)kv_blocks);
    w.col0 = (int)rank * Cfg::kCols;
    w.kvh = rest % p.hkv;
    w.b = rest / p.hkv;
    w.kb0 = j * Cfg::kBc;
    w.q_start = w.k_start = 0;
    w.seqlen_q = p.nq;
    w.seqlen_k = p.nkv;
    if (p.cu_q) {
        w.q_start = p.cu_q[w.b];
        w.seqlen_q = p.cu_q[w.b + 1] - p.cu_q[w.b];
        w.k_start = p.cu_k[w.b];
        w.seqlen_k = p.cu_k[w.b + 1] - p.cu_k[w.b];
    }
    if (w.kb0 >= w.seqlen_k)
        return false; /* a varlen sequence shorter than the longest: nothing here */
    w.diag = w.seqlen_k - w.seqlen_q;
    w.n_qt = (w.seqlen_q + Cfg::kBr - 1) / Cfg::kBr;
    /* Only the query tiles whose rows may see the block (causal, window):
     * a window's cost scales with the window, not with seqlen_q. */
    int q_first;
    const int q_end = visible_rows(p.mask, w.kb0, min(w.kb0 + Cfg::kBc, w.seqlen_k) - 1, w.diag, w.seqlen_q, &q_first);
    w.t_first = min(q_first / Cfg::kBr, w.n_qt);
    w.n_qt = max(w.t_first, (q_end + Cfg::kBr - 1) / Cfg::kBr);
    w.group = p.group;
    w.tma_b = p.cu_q ? 0 : w.b;
    /* Without a causal or window bound every key block of a head runs the
     * same tiles; started in step they would all reduce into the same dQ
     * tile at the same moment, and the L2 serialises reductions to one
     * address. Block j starts at its own tile instead. Deterministic mode
     * keeps the launch order its turns rely on. */
    const int tiles = w.tiles_per_head();
    w.rot = p.dq_turn || tiles == 0 ? 0 : j % tiles;
    return true;
}

template <class Cfg> struct BwdRing {
    static constexpr int kN = Cfg::kRingSlots;
    static FFPA_DEV uint32_t slot(int n) { return (uint32_t)n % kN; }
    static FFPA_DEV uint32_t parity(int n) { return ((uint32_t)n / kN) & 1; }
    static FFPA_DEV uint8_t *ptr(uint8_t *smem, int ring, int n)
    {
        return smem + BwdSmemLayout<Cfg>::ring + (size_t)(ring * kN + (int)slot(n)) * Cfg::kSlabBytes;
    }
    static FFPA_DEV uint64_t *full(BwdBarriers *bars, int ring, int n) { return &bars->full[ring][slot(n)]; }
    static FFPA_DEV uint64_t *empty(BwdBarriers *bars, int ring, int n) { return &bars->empty[ring][slot(n)]; }
    /* Consumers with columns in pass `pass` (1 or 2; consumer c has slab 2 * pass + c). */
    static FFPA_DEV constexpr int n_own(int pass) { return Cfg::kSlabs - 2 * pass < 2 ? Cfg::kSlabs - 2 * pass : 2; }
    static FFPA_DEV constexpr bool owns(int pass, int c) { return c < n_own(pass); }
    /* The column slab at stream position pos: the others in order, the own ones last. */
    static FFPA_DEV int col_of(int pass, int pos)
    {
        if (Cfg::kGradSplit)
            return pos; /* one pass; every slab is held for phase 2 (sm90_bwd_grads.cuh) */
        const int first_own = Cfg::kSlabs - n_own(pass);
        return pos >= first_own ? 2 * pass + (pos - first_own) : pos < 2 * pass ? pos : pos + n_own(pass);
    }
    /* Stream position of consumer c's own slab; positions from there on stay for phase 2. */
    static FFPA_DEV int own_pos(int pass, int c) { return Cfg::kSlabs - n_own(pass) + c; }
    static FFPA_DEV bool held(int pass, int pos) { return pos >= Cfg::kSlabs - n_own(pass); }
};

/* What each consumer kernel (sm90_bwd_kernel.cuh, _keys.cuh, _grads.cuh)
 * starts from: its lane, the resident K and V, the stored P^T / dS^T
 * tiles, the rows' LSE / Delta, and the ring release (a consumer that
 * reads a slab last: its 4 warps arrive on the slab's empty barrier). */
template <class Cfg> struct BwdConsumerBase {
    uint8_t *smem;
    BwdBarriers *bars;
    int lane;
    uint32_t k_addr, v_addr, pt_addr, dst_addr;
    float *rows;

    FFPA_DEV BwdConsumerBase(uint8_t *smem_, BwdBarriers *bars_, int ctid)
        : smem(smem_), bars(bars_), lane(ctid & 31), k_addr(smem_u32(smem_ + BwdSmemLayout<Cfg>::k)),
          v_addr(smem_u32(smem_ + BwdSmemLayout<Cfg>::v)), pt_addr(smem_u32(smem_ + BwdSmemLayout<Cfg>::pt)),
          dst_addr(smem_u32(smem_ + BwdSmemLayout<Cfg>::dst)),
          rows(reinterpret_cast<float *>(smem_ + BwdSmemLayout<Cfg>::rows))
    {
    }
    FFPA_DEV void release(int ring, int n) const
    {
        __syncwarp();
        if (lane == 0)
            mbar_arrive(BwdRing<Cfg>::empty(bars, ring, n));
    }
    /* K and V of the block have landed (nothing to wait for without work). */
    FFPA_DEV void wait_kv(int items) const
    {
        if (items > 0)
            bwd_wait(&bars->kv_full, 0, false, 1, 0);
    }
};

template <class Cfg> struct BwdProducer {
    using R = BwdRing<Cfg>;

    static FFPA_DEV void load_slab(const CUtensorMap *map, uint8_t *smem, BwdBarriers *bars, int ring, int n,
                                   int col0, int col_slab, int row, int h, int b)
    {
        if (n >= R::kN)
            bwd_wait(R::empty(bars, ring, n), R::parity(n) ^ 1, false, 5, n);
        uint64_t *full = R::full(bars, ring, n);
        mbar_arrive_expect_tx(full, (uint32_t)Cfg::kSlabBytes);
        uint8_t *dst = R::ptr(smem, ring, n);
        for (int bb = 0; bb < 2; ++bb)
            tma_load_4d(dst + (size_t)bb * kBoxBytes, map, full, col0 + (2 * col_slab + bb) * kBoxCols, row, h, b);
    }

    /* K and V of the block, once (one producer thread): box b of key rows
     * [64 r, 64 r + 64) at (r * kKVBoxes + b) * kBoxBytes. */
    static FFPA_DEV void load_kv(const BwdMaps &maps, uint8_t *smem, BwdBarriers *bars, const BwdWork &w)
    {
        using L = BwdSmemLayout<Cfg>;
        mbar_arrive_expect_tx(&bars->kv_full, (uint32_t)(2 * Cfg::kKVBytes));
        for (int r = 0; r < Cfg::kBc / 64; ++r) {
            const int krow = (int)w.k_start + w.kb0 + 64 * r;
            for (int box = 0; box < Cfg::kKVBoxes; ++box) {
                const int col = w.col0 + box * kBoxCols;
                const size_t at = (size_t)(r * Cfg::kKVBoxes + box) * kBoxBytes;
                tma_load_4d(smem + L::k + at, &maps.k, &bars->kv_full, col, krow, w.kvh, w.tma_b);
                tma_load_4d(smem + L::v + at, &maps.v, &bars->kv_full, col, krow, w.kvh, w.tma_b);
            }
        }
    }

    /* Ring `ring`'s slabs (Q for ring 0, dO for ring 1) of every (pass,
     * query tile). Boxes past D are zero-filled by TMA and counted in the bytes. */
    static FFPA_DEV void run(const BwdMaps &maps, uint8_t *smem, BwdBarriers *bars, const BwdWork &w, int ring)
    {
        const CUtensorMap *map = ring == 0 ? &maps.q : &maps.dout;
        int n = 0;
        const int items = w.items();
        for (int pass = 0; pass < Cfg::kPasses; ++pass)
            for (int it = 0; it < items; ++it) {
                const int h = w.head(it), row = (int)w.q_start + w.q0(it);
                for (int pos = 0; pos < Cfg::kSlabs; ++pos)
                    load_slab(map, smem, bars, ring, n++, w.col0, R::col_of(pass, pos), row, h, w.tma_b);
            }
    }
};

template <class Cfg> struct BwdGemms {
    using T = typename Cfg::T;

    /* acc(64 keys x 64 rows) (+)= X_box Y_slab^T over one slab's two boxes
     * (or its first kNBoxes), X = K (S^T) or V (dP^T) resident, Y = Q or dO;
     * both K-major. */
    template <int kNBoxes = 2>
    static FFPA_DEV void scores_slab(float (&acc)[32], uint32_t kv_addr, uint32_t slab_addr, int slab_cols,
                                     bool first)
    {
#pragma unroll
        for (int bb = 0; bb < kNBoxes; ++bb)
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const uint32_t a = kv_addr + (uint32_t)(2 * slab_cols + bb) * kBoxBytes + kk * 32;
                const uint32_t b = slab_addr + (uint32_t)bb * kBoxBytes + kk * 32;
                wgmma_ss<T, 64>(acc, make_desc_sw128(a, 16, 1024), make_desc_sw128(b, 16, 1024),
                                !(first && bb == 0 && kk == 0));
            }
    }

    /* acc(64 keys x N columns) += A Y_slab, A = P^T or dS^T (64 keys x 64
     * rows, K-major), Y = the dO or Q slab (rows x 128 columns, MN-major;
     * N = 64: its first box). */
    template <int N = 128>
    static FFPA_DEV void grad_slab(float (&acc)[N / 2], uint32_t a_addr, uint32_t slab_addr)
    {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            wgmma_ss_bt<T, N>(acc, make_desc_sw128(a_addr + kk * 32, 16, 1024),
                              make_desc_sw128(slab_addr + kk * 2048, kBoxBytes, 1024), 1);
    }

    /* The same with A from this consumer's registers (wgmma RS): the A
     * fragments of each k16 step of the 64 rows (the key-split kernel's
     * P^T Z and dS^T, grad_probs / grad_dscores). */
    static FFPA_DEV void grad_slab_regs(float (&acc)[64], const uint32_t (&a)[4][4], uint32_t slab_addr)
    {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            wgmma_rs<T, 128>(acc, a[kk], make_desc_sw128(slab_addr + kk * 2048, kBoxBytes, 1024), 1);
    }

    /* acc(64 rows x N columns) = dS K_cols: dS read MN-major from the
     * stored dS^T (keys x rows), K's N / 64 boxes of the columns MN-major. */
    template <int N>
    static FFPA_DEV void dq_gemm(float (&acc)[N / 2], uint32_t dst_addr, uint32_t k_cols_addr, bool accumulate = false)
    {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            wgmma_ss_abt<T, N>(acc, make_desc_sw128(dst_addr + kk * 2048, kBoxBytes, 1024),
                               make_desc_sw128(k_cols_addr + kk * 2048, kBoxBytes, 1024), accumulate || kk > 0);
    }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
