/*
 * The Hopper MLA decode kernel (sm_90a), composed from its pieces:
 *   sm90_mla_mainloop.cuh      paged TMA producer + the three GEMMs
 *   ../../gpu/softmax.cuh      online softmax (base 2)
 *   ../../gpu/kv/kv_kernel.cuh the split-KV work of a block (kv_work, the
 *                              schedule of common/kv_sched.h) and the packed
 *                              row addressing; the splits' merge runs after
 *
 * Warpgroup 1 (softmax) pipelines across key tiles: QK^T of tile i+1 is
 * issued before the softmax of tile i, so the tensor cores work on it (and
 * on warpgroup 2's PV of tile i-1) while warpgroup 1 exponentiates. P and
 * the per-row rescale factors go to warpgroup 2 through shared memory
 * (named barriers: P_FULL warpgroup 1 -> 2, P_EMPTY 2 -> 1). Both sides
 * wait (the waiting side has nothing else to do) with the unaligned
 * barrier.sync, as the two warpgroups reach it from different instructions.
 */
#ifndef FFPA_CUDA_SM90_MLA_KERNEL_CUH
#define FFPA_CUDA_SM90_MLA_KERNEL_CUH

#include "sm90_arch.cuh"
#include "sm90_mla_config.cuh"
#include "sm90_mla_mainloop.cuh"

#include "softmax.cuh"

namespace ffpa {
namespace sm90 {

/* Diagnostic builds only (-DFFPA_SM90_MLA_DIAG): mean cycles per tile of
 * each step of warpgroup 1's loop, printed by block 0. */
#if defined(FFPA_SM90_MLA_DIAG) && defined(__CUDA_ARCH__)
struct MlaDiag {
    long long acc[6] = {0, 0, 0, 0, 0, 0}, t;
    FFPA_DEV MlaDiag() : t(clock64()) {}
    FFPA_DEV void mark(int i)
    {
        const long long now = clock64();
        acc[i] += now - t;
        t = now;
    }
    FFPA_DEV void print(const char *who, int n) const
    {
        if (blockIdx.x == 0 && threadIdx.x % 128 == 0 && n > 1)
            printf("mla diag %s tiles %d cycles/tile: %lld %lld %lld %lld %lld %lld\n", who, n, acc[0] / n,
                   acc[1] / n, acc[2] / n, acc[3] / n, acc[4] / n, acc[5] / n);
    }
};
#define FFPA_MLA_MARK(d, i) (d).mark(i)
#else
struct MlaDiag {
    FFPA_DEV void print(const char *, int) const {}
};
#define FFPA_MLA_MARK(d, i) ((void)0)
#endif

enum MlaNamedBarrier { kBarQ = 1, kBarPFull = 2, kBarPEmpty = 3, kBarFinal = 4 };
constexpr int kMlaProducerRegs = 24;
constexpr int kMlaConsumerRegs = 240; /* 128 x 24 + 256 x 240 <= 64K registers */
/* setmaxnreg's increase is paid from what the decrease returns (sm90_fwd_config.cuh);
 * registers a thread at launch, __launch_bounds__(kThreads, 1) (the same for every T). */
constexpr int kMlaLaunchRegs = 65536 / MlaConfig<arch::bf16>::kThreads / 8 * 8;
static_assert(128 * (kMlaLaunchRegs - kMlaProducerRegs) >= 256 * (kMlaConsumerRegs - kMlaLaunchRegs),
              "setmaxnreg: the consumers' increase fits what the producer returns");

/* What a CTA works on: the split's key tiles and its 64 packed rows. */
struct MlaWork {
    KvWork w;
    int rr0, rows_valid, shift, tile_begin, n_tiles;
};

FFPA_DEV bool mla_work(const ffpa_gpu_kv_params &p, int blk, MlaWork &mw)
{
    if (!kv_work(p, blk, mw.w))
        return false;
    mw.rr0 = mw.w.m * 64;
    mw.rows_valid = min(64, p.rows - mw.rr0);
    mw.shift = mw.w.len - p.nq; /* token i sees keys j <= i + shift (causal) */
    int tile_end = mw.w.tile_end;
    if (p.causal) {
        const int last_col = (mw.rr0 + mw.rows_valid - 1) / p.group + mw.shift;
        tile_end = min(tile_end, last_col < 0 ? 0 : last_col / 64 + 1);
    }
    mw.tile_begin = mw.w.tile_begin;
    mw.n_tiles = max(0, tile_end - mw.tile_begin);
    return true;
}

/* Q's packed rows into the 9 swizzled boxes (cp.async by both consumer
 * warpgroups; rows past the valid ones are zeros). */
template <class Cfg>
FFPA_DEV void mla_load_q(const ffpa_gpu_kv_params &p, const MlaWork &mw, uint8_t *smem, int ctid)
{
    using T = typename Cfg::T;
    constexpr int kPieces = Cfg::kDqk / 8; /* 16-byte pieces per row */
    const T *qb = static_cast<const T *>(p.q) + (int64_t)mw.w.b * p.q_sb;
    for (int i = ctid; i < Cfg::kBr * kPieces; i += 256) {
        const int r = i / kPieces, col = (i % kPieces) * 8;
        const bool ok = r < mw.rows_valid;
        const T *src = ok ? qb + kv_row_offset(p, p.q_sh, p.q_sn, mw.w.kvh, mw.rr0 + r) + col : qb;
        T *dst = reinterpret_cast<T *>(smem + Cfg::kQ + (size_t)(col / kBoxCols) * kBoxBytes) +
                 swz<kBoxCols>(r, col % kBoxCols);
        arch::cp_async_16(arch::smem_u32(dst), src, ok ? 16 : 0);
    }
    arch::cp_async_commit();
    arch::cp_async_wait<0>();
    fence_proxy_async_shared(); /* generic-proxy writes, read by wgmma */
}

/* Per-row facts of the two rows a lane holds in the accumulator layout. */
struct MlaRows {
    int r[2];        /* rows in the tile */
    int last_key[2]; /* last key each row sees */
};

FFPA_DEV MlaRows mla_rows(const ffpa_gpu_kv_params &p, const MlaWork &mw, int warp, int lane)
{
    MlaRows rows;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        rows.r[half] = warp * 16 + arch::frag_c_row(lane, 2 * half);
        const int rr = mw.rr0 + rows.r[half];
        rows.last_key[half] = p.causal ? min(mw.w.len - 1, rr / p.group + mw.shift) : mw.w.len - 1;
    }
    return rows;
}

/* O (64 x kAcc/2 columns from col0, one consumer's part) normalised: the
 * final rows, or the split's fp32 partial for the merge. */
template <class Cfg, int kAcc>
FFPA_DEV void mla_store_o(const ffpa_gpu_kv_params &p, const MlaWork &mw, const float (&o)[kAcc],
                          const float (&inv_l)[2], const MlaRows &rows, int col0, int lane)
{
    using T = typename Cfg::T;
    const int64_t blk = blockIdx.x;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = rows.r[half];
        if (r >= mw.rows_valid)
            continue;
        if (mw.w.splits > 1) {
            float *dst = p.part_o + (blk * Cfg::kBr + r) * p.dv + col0 + 2 * (lane & 3);
#pragma unroll
            for (int j = 0; j < kAcc / 4; ++j)
                *reinterpret_cast<float2 *>(dst + 8 * j) =
                    make_float2(o[4 * j + 2 * half] * inv_l[half], o[4 * j + 2 * half + 1] * inv_l[half]);
        } else {
            T *dst = static_cast<T *>(p.o) + (int64_t)mw.w.b * p.o_sb +
                     kv_row_offset(p, p.o_sh, p.o_sn, mw.w.kvh, mw.rr0 + r) + col0 + 2 * (lane & 3);
#pragma unroll
            for (int j = 0; j < kAcc / 4; ++j)
                *reinterpret_cast<uint32_t *>(dst + 8 * j) =
                    arch::pack_f32x2<T>(o[4 * j + 2 * half] * inv_l[half], o[4 * j + 2 * half + 1] * inv_l[half]);
        }
    }
}

/* Zeroes the V columns of the keys past the sequence in the slot of its
 * last, partial tile: P is 0 there, but 0 x (stale NaN) is not. */
template <class Cfg> FFPA_DEV void mla_zero_tail(uint8_t *slot, int keys_valid, int ctid)
{
    const int rows = Cfg::kBc - keys_valid;
    for (int i = ctid; i < rows * Cfg::kVBoxes * 8; i += 128) {
        const int r = keys_valid + i / (Cfg::kVBoxes * 8), box = (i / 8) % Cfg::kVBoxes, piece = i % 8;
        *reinterpret_cast<uint4 *>(slot + (size_t)box * kBoxBytes + (size_t)r * 128 + piece * 16) =
            make_uint4(0, 0, 0, 0);
    }
    __syncwarp(); /* the loop's trip count differs across lanes; bar.sync needs the warp converged */
    fence_proxy_async_shared();
}

/*
 * Warpgroup 1: per key tile i (S(i) complete in s, its rope part freed):
 *   softmax(i) -> [zero the tail] -> P(i) to shared memory, P_FULL ->
 *   issue PV(i) on O[:, 0:192], then QK^T(i+1) part by part ->
 *   wait PV(i), free part 1 of slot i -> wait QK^T(i+1), free its rope part.
 * Warpgroup 2's PV(i) runs beside PV(i) here. Each part of a slot is
 * refilled as soon as its last reader is done, so the load of tile i+1 has
 * all of tile i to land. The softmax does not overlap tensor work: that
 * would need QK^T(i+1) issued before it, i.e. tile i+1 loaded while tile
 * i-1 is still being read, a third key tile that does not fit beside Q
 * (72 KiB each); see docs/notes/decode.md for the measured cost.
 */
template <class Cfg> struct MlaSoftmaxWarpgroup {
    using T = typename Cfg::T;
    using R = MlaRing<Cfg>;
    const ffpa_gpu_kv_params &p;
    const MlaWork &mw;
    uint8_t *smem;
    MlaBarriers *bars;
    int ctid, warp, lane;
    MlaRows rows;
    OnlineSoftmax sm;
    float o[Cfg::kO1Acc];
    uint32_t pf[4][4];
    MlaDiag diag;

    FFPA_DEV MlaSoftmaxWarpgroup(const ffpa_gpu_kv_params &p_, const MlaWork &mw_, uint8_t *smem_,
                                 MlaBarriers *bars_, int ctid_)
        : p(p_), mw(mw_), smem(smem_), bars(bars_), ctid(ctid_), warp(ctid_ / 32), lane(ctid_ & 31)
    {
        rows = mla_rows(p, mw, warp, lane);
        sm.init();
#pragma unroll
        for (int i = 0; i < Cfg::kO1Acc; ++i)
            o[i] = 0.0f;
    }

    FFPA_DEV uint32_t q_addr() const { return smem_u32(smem + Cfg::kQ); }

    FFPA_DEV void release(int i, int part)
    {
        __syncwarp();
        if (lane == 0)
            mbar_arrive(&bars->empty[R::slot(i)][part]);
    }

    /* Issues QK^T of tile i into s (the caller commits). */
    FFPA_DEV void issue_qk(float (&s)[32], int i)
    {
        fence_operands(s);
        wgmma_fence();
        MlaGemms<Cfg>::qk(s, q_addr(), smem_u32(R::ptr(smem, i)), bars->full[R::slot(i)], R::parity(i));
    }

    /* Scale to the log2 domain and mask keys past each row's last. */
    FFPA_DEV void scale_mask(float (&s)[32], int tile)
    {
        const int col0 = tile * Cfg::kBc;
#pragma unroll
        for (int e = 0; e < 32; ++e)
            s[e] *= p.scale_log2;
        if (col0 + Cfg::kBc - 1 > min(rows.last_key[0], rows.last_key[1])) {
#pragma unroll
            for (int nt = 0; nt < Cfg::kNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (col0 + nt * 8 + arch::frag_c_col(lane, e) > rows.last_key[e >> 1])
                        s[4 * nt + e] = -INFINITY;
        }
    }

    /* Keeps the P fragments where the PV in flight reads them until the
     * wait that completes it (the compiler does not see wgmma read them). */
    FFPA_DEV void fence_p()
    {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                asm volatile("" : "+r"(pf[kk][e])::"memory");
    }

    /* P(i) into registers (A fragments) and into shared memory for
     * warpgroup 2, with the rows' rescale factors (published by the
     * caller's P_FULL arrive). */
    FFPA_DEV void write_p(const float (&s)[32], const float (&alpha)[2])
    {
        named_barrier_sync_unaligned(kBarPEmpty, 256); /* warpgroup 2 is done with P(i-1) */
        float *alpha_s = reinterpret_cast<float *>(smem + Cfg::kStats);
        if ((lane & 3) == 0) {
            alpha_s[rows.r[0]] = alpha[0];
            alpha_s[rows.r[1]] = alpha[1];
        }
        T *ps = reinterpret_cast<T *>(smem + Cfg::kP);
        const int c = 2 * (lane & 3);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            pf[kk][0] = arch::pack_f32x2<T>(s[8 * kk + 0], s[8 * kk + 1]);
            pf[kk][1] = arch::pack_f32x2<T>(s[8 * kk + 2], s[8 * kk + 3]);
            pf[kk][2] = arch::pack_f32x2<T>(s[8 * kk + 4], s[8 * kk + 5]);
            pf[kk][3] = arch::pack_f32x2<T>(s[8 * kk + 6], s[8 * kk + 7]);
            *reinterpret_cast<uint32_t *>(ps + swz<64>(rows.r[0], 16 * kk + c)) = pf[kk][0];
            *reinterpret_cast<uint32_t *>(ps + swz<64>(rows.r[1], 16 * kk + c)) = pf[kk][1];
            *reinterpret_cast<uint32_t *>(ps + swz<64>(rows.r[0], 16 * kk + 8 + c)) = pf[kk][2];
            *reinterpret_cast<uint32_t *>(ps + swz<64>(rows.r[1], 16 * kk + 8 + c)) = pf[kk][3];
        }
        fence_proxy_async_shared();
    }

    /* Tile i of the split; kNext: QK^T(i+1) is issued behind PV(i). */
    template <bool kNext> FFPA_DEV void step(float (&s)[32], int i)
    {
        const int tile = mw.tile_begin + i;
        scale_mask(s, tile);
        float alpha[2];
        sm.update<Cfg::kNT>(reinterpret_cast<arch::FragC(&)[Cfg::kNT]>(s), alpha);
        FFPA_MLA_MARK(diag, 0); /* softmax */
        if (!kNext) {
            const int keys_valid = mw.w.len - tile * Cfg::kBc;
            if (keys_valid < Cfg::kBc) {
                mla_zero_tail<Cfg>(R::ptr(smem, i), keys_valid, ctid); /* ordered before both PVs by P_FULL */
            }
        }
        OnlineSoftmax::rescale(reinterpret_cast<arch::FragC(&)[Cfg::kO1Acc / 4]>(o), alpha);
        write_p(s, alpha);
        named_barrier_sync_unaligned(kBarPFull, 256);
        FFPA_MLA_MARK(diag, 1); /* rescale, P_EMPTY, P stores */
        fence_operands(o);
        wgmma_fence();
        MlaGemms<Cfg>::pv_regs(o, pf, smem_u32(R::ptr(smem, i)));
        wgmma_commit();
        fence_p();
        FFPA_MLA_MARK(diag, 2); /* PV issue */
        if constexpr (kNext) {
            issue_qk(s, i + 1);
            wgmma_commit();
        }
        FFPA_MLA_MARK(diag, 3); /* QK^T issue, waits for the parts included */
        if constexpr (kNext) {
            wgmma_wait<1>(); /* groups complete in order: PV(i) */
            fence_operands(o);
            fence_p();
            release(i, 1);
            FFPA_MLA_MARK(diag, 4); /* PV wait */
            wgmma_wait<0>(); /* QK^T(i+1) */
            fence_operands(s);
            release(i + 1, 0);
            FFPA_MLA_MARK(diag, 5); /* QK^T wait */
        }
    }

    FFPA_DEV void run()
    {
        const int n = mw.n_tiles;
        if (n > 0) {
            float s[32];
            issue_qk(s, 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands(s);
            release(0, 0);
            for (int i = 0; i + 1 < n; ++i)
                step<true>(s, i);
            step<false>(s, n - 1);
            wgmma_wait<0>();
            fence_operands(o);
            release(n - 1, 1);
            diag.print("wg1 softmax|rescale+P|PV-issue|QK-issue|PV-wait|QK-wait", n);
        }
        float inv_l[2], lse[2];
        sm.finish(inv_l, lse);
        float *stats = reinterpret_cast<float *>(smem + Cfg::kStats);
        if ((lane & 3) == 0)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                stats[Cfg::kBr + rows.r[half]] = inv_l[half];
                stats[2 * Cfg::kBr + rows.r[half]] = lse[half];
            }
        named_barrier_sync_unaligned(kBarFinal, 256);
        mla_store_o<Cfg>(p, mw, o, inv_l, rows, 0, lane);
        if ((lane & 3) == 0)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = rows.r[half];
                if (r >= mw.rows_valid)
                    continue;
                if (mw.w.splits > 1)
                    p.part_lse[(int64_t)blockIdx.x * Cfg::kBr + r] = lse[half];
                else if (p.lse)
                    p.lse[(int64_t)mw.w.b * p.lse_sb + kv_row_offset(p, p.lse_sh, p.lse_sn, mw.w.kvh, mw.rr0 + r)] =
                        lse[half];
            }
    }
};

/* Warpgroup 2: O[:, 192:512] += P(i) V[:, 192:512] per tile, P from
 * shared memory, rescaled by warpgroup 1's factors first. */
template <class Cfg>
FFPA_DEV void mla_second_half(const ffpa_gpu_kv_params &p, const MlaWork &mw, uint8_t *smem, MlaBarriers *bars,
                              int ctid)
{
    using R = MlaRing<Cfg>;
    const int warp = ctid / 32, lane = ctid & 31;
    const MlaRows rows = mla_rows(p, mw, warp, lane);
    const float *stats = reinterpret_cast<const float *>(smem + Cfg::kStats);
    float o[Cfg::kO2Acc];
#pragma unroll
    for (int i = 0; i < Cfg::kO2Acc; ++i)
        o[i] = 0.0f;
    const int n = mw.n_tiles;
    const uint32_t p_addr = smem_u32(smem + Cfg::kP);
    MlaDiag diag;
    if (n > 0)
        named_barrier_sync_unaligned(kBarPEmpty, 256); /* P starts free */
    for (int i = 0; i < n; ++i) {
        mbar_wait(&bars->full[R::slot(i)][2], R::parity(i));
        FFPA_MLA_MARK(diag, 0); /* data */
        named_barrier_sync_unaligned(kBarPFull, 256);
        FFPA_MLA_MARK(diag, 1); /* P_FULL */
        const float alpha[2] = {stats[rows.r[0]], stats[rows.r[1]]};
        OnlineSoftmax::rescale(reinterpret_cast<arch::FragC(&)[Cfg::kO2Acc / 4]>(o), alpha);
        fence_operands(o);
        FFPA_MLA_MARK(diag, 4); /* rescale */
        wgmma_fence();
        MlaGemms<Cfg>::pv_smem(o, p_addr, smem_u32(R::ptr(smem, i) + Cfg::kO1Boxes * kBoxBytes));
        wgmma_commit();
        FFPA_MLA_MARK(diag, 2); /* rescale + issue */
        wgmma_wait<0>();
        fence_operands(o);
        FFPA_MLA_MARK(diag, 3); /* PV wait */
        __syncwarp();
        if (lane == 0)
            mbar_arrive(&bars->empty[R::slot(i)][2]);
        if (i + 1 < n)
            named_barrier_sync_unaligned(kBarPEmpty, 256);
    }
    diag.print("wg2 data|P_FULL|issue|PV-wait|rescale", n);
    named_barrier_sync_unaligned(kBarFinal, 256);
    const float inv_l[2] = {stats[Cfg::kBr + rows.r[0]], stats[Cfg::kBr + rows.r[1]]};
    mla_store_o<Cfg>(p, mw, o, inv_l, rows, Cfg::kO1Boxes * kBoxCols, lane);
}

template <class Cfg> FFPA_DEV void mla_body(const MlaMaps &maps, const ffpa_gpu_kv_params &p)
{
    extern __shared__ uint8_t smem_dyn[];
    uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_dyn) + 1023) & ~(uintptr_t)1023);
    MlaBarriers *bars = reinterpret_cast<MlaBarriers *>(smem + Cfg::kBars);
    MlaWork mw;
    if (!mla_work(p, blockIdx.x, mw))
        return; /* past the schedule's last block */
    const int tid = threadIdx.x;
    if (tid == 0) {
        for (int s = 0; s < Cfg::kStages; ++s)
            for (int part = 0; part < Cfg::kParts; ++part) {
                mbar_init(&bars->full[s][part], 1);
                mbar_init(&bars->empty[s][part], 4);
            }
        fence_barrier_init();
    }
    __syncthreads();
    const int wg = tid / 128;
    if (wg == 0) {
        setmaxnreg_dec<kMlaProducerRegs>();
        if (tid < 32 && mw.n_tiles > 0) {
            if (tid == 0)
                prefetch_tensormap(&maps.kv);
            MlaProducer<Cfg>::run(maps, p, smem, bars, mw.w.b, mw.w.kvh, mw.w.len, mw.tile_begin, mw.n_tiles, tid);
        }
    } else {
        setmaxnreg_inc<kMlaConsumerRegs>();
        const int ctid = tid - 128 * wg;
        mla_load_q<Cfg>(p, mw, smem, tid - 128);
        named_barrier_sync(kBarQ, 256);
        if (wg == 1) {
            MlaSoftmaxWarpgroup<Cfg> sw(p, mw, smem, bars, ctid);
            sw.run();
        } else {
            mla_second_half<Cfg>(p, mw, smem, bars, ctid);
        }
    }
}

} /* namespace sm90 */
} /* namespace ffpa */

#endif
