/*
 * Host side of the backward, written once for the CUDA and HIP launchers:
 * what the kernels support, the workspace layout, the configuration, tile
 * sizes and ring depths that fit the device's shared memory (a tuning
 * table's choice where it fits), the kernel
 * parameters, and the launch sequence
 *   delta -> dK/dV -> dQ (+ dbias) -> [fp32 buffers -> dq, dk, dv, dbias],
 * or, where the dK/dV kernel adds dQ itself (Tiles::dq_atomic),
 *   zero the dQ buffer -> delta -> dK/dV + dQ -> [fp32 buffers -> ...].
 *
 * The runtime is a template argument Rt: BwdRt (bwd_entry.h), gpu_rt.h's
 * calls and the kernel launches
 *   delta(dtype, p, s), dkdv(dtype, kernel, p, smem, s), dq(dtype, kernel, p, blocks, smem, s),
 *   convert(dtype, job, s), dbias_convert(acc, grid, out, dtype, stride, s).
 * (kernel: a bwd::Kernel of bwd_params.h). Every call is asynchronous on the stream.
 *
 * Requires the arch layer (ffpa::arch) to be included first: the shared
 * memory sizes come from the kernel headers.
 */
#ifndef FFPA_GPU_BWD_HOST_H
#define FFPA_GPU_BWD_HOST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "plan.h"
#include "problem.h"

#include "bwd_dkdv.cuh"
#include "bwd_dq.cuh"

namespace ffpa {
namespace bwd {
namespace host {

constexpr size_t kAlign = 256;

inline size_t align_up(size_t x)
{
    return (x + kAlign - 1) / kAlign * kAlign;
}

/* Elements of the fp32 dbias buffer per dimension (common/problem.h). */
inline void dbias_grid(const ffpa_problem *pb, int64_t (&g)[4])
{
    ffpa_dbias_grid(pb, g);
}

/* Workspace: varlen offsets, Delta, the fp32 gradient buffers
 * (FFPA_GRAD_ACCUM_F32) and the fp32 dbias buffer, 256-byte aligned. */
struct Layout {
    size_t cu_q, cu_k, delta, dq, dk, dv, dbias, dq_turn, total;
};

/* Bytes of the fp32 dQ buffer [hq][total_q][dqk] (FFPA_GRAD_ACCUM_F32). */
inline size_t dq_buffer_bytes(const ffpa_problem *pb)
{
    return (size_t)(pb->hq * pb->total_q * pb->dqk) * sizeof(float);
}

/* Query tiles of 64 rows per (batch, head) the dQ turn counters cover, and
 * the counters' bytes (deterministic mode; bwd_params.h). */
inline int64_t dq_turn_tiles(const ffpa_problem *pb) { return (pb->nq + 63) / 64; }
inline size_t dq_turn_bytes(const ffpa_problem *pb)
{
    return (size_t)(pb->batch * pb->hq * dq_turn_tiles(pb) * FFPA_BWD_DQ_TURN_PARTS) * sizeof(int32_t);
}

/* From shapes and options alone: a size query has no output views to check
 * (ffpa_backward_workspace_size), and a call the backend later refuses
 * costs nothing but the reserved bytes. */
inline Layout layout_of(const ffpa_problem *pb)
{
    Layout l;
    memset(&l, 0, sizeof l);
    size_t off = 0;
    auto take = [&](size_t bytes) {
        size_t at = off;
        off += align_up(bytes);
        return at;
    };
    if (pb->cu_q) {
        l.cu_q = take((size_t)(pb->batch + 1) * sizeof(int32_t));
        l.cu_k = take((size_t)(pb->batch + 1) * sizeof(int32_t));
    }
    l.delta = take((size_t)(pb->hq * pb->total_q) * sizeof(float));
    if (pb->grad_accum == FFPA_GRAD_ACCUM_F32) {
        l.dq = take(dq_buffer_bytes(pb));
        l.dk = take((size_t)(pb->hkv * pb->total_k * pb->dqk) * sizeof(float));
        l.dv = take((size_t)(pb->hkv * pb->total_k * pb->dv) * sizeof(float));
    }
    if (pb->has_dbias) {
        int64_t g[4];
        dbias_grid(pb, g);
        l.dbias = take((size_t)(g[0] * g[1] * g[2] * g[3]) * sizeof(float));
    }
    if (pb->deterministic) /* the Hopper kernel's dQ turn counters (bwd_params.h) */
        l.dq_turn = take(dq_turn_bytes(pb));
    l.total = off;
    return l;
}

/* The workspace the caller gave against what pb needs (lay). */
inline ffpa_status check_workspace(const Layout &lay, const void *ws, size_t ws_bytes, const char *who, char *err,
                                   size_t err_len)
{
    if (lay.total > 0 && (ws == nullptr || ws_bytes < lay.total)) {
        snprintf(err, err_len, "workspace: %zu bytes given to the %s backward; expected >= %zu", ws_bytes, who,
                 lay.total);
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    return FFPA_OK;
}

/* The conversion of one fp32 gradient buffer [heads][rows][dim] into its
 * output view (nlen: rows per sequence of a dense batch, 0 for varlen). */
inline ConvertJob convert_job(const float *acc, const ffpa_view &out, int64_t heads, int64_t rows, int64_t nlen,
                              int64_t dim)
{
    ConvertJob cj;
    cj.acc = acc;
    cj.out = out.data;
    cj.sb = out.sb;
    cj.sh = out.sh;
    cj.sn = out.sn;
    cj.sd = out.sd;
    cj.heads = heads;
    cj.rows_total = rows;
    cj.nlen = nlen;
    cj.dim = (int)dim;
    return cj;
}

/* q/k/v/o/dout feed 16-byte async copies / vector loads. */
inline bool view_vectorizable(const ffpa_view &v, int64_t sd)
{
    return sd == 1 && ((v.sb | v.sh | v.sn) & 7) == 0 && ((uintptr_t)v.data & 15) == 0;
}

/* What the kernels take; `who` names the backend in the messages. */
inline ffpa_status check(const ffpa_problem *pb, const char *who, char *err, size_t err_len)
{
    if (pb->dtype != FFPA_F16 && pb->dtype != FFPA_BF16) {
        snprintf(err, err_len, "q: dtype %s is not supported by the %s backward; expected f16 or bf16",
                 ffpa_dtype_name(pb->dtype), who);
        return FFPA_ERR_UNSUPPORTED;
    }
    if (pb->dqk % 8 || pb->dv % 8 || pb->dqk > FFPA_MAX_HEAD_DIM || pb->dv > FFPA_MAX_HEAD_DIM) {
        snprintf(err, err_len,
                 "q: head dims Dqk=%lld, Dv=%lld are not supported by the %s backward; expected multiples of 8 "
                 "up to %d",
                 (long long)pb->dqk, (long long)pb->dv, who, FFPA_MAX_HEAD_DIM);
        return FFPA_ERR_UNSUPPORTED;
    }
    const struct {
        const char *name;
        const ffpa_view *v;
    } inputs[] = {{"q", &pb->q}, {"k", &pb->k}, {"v", &pb->v}, {"out", &pb->o}, {"dout", &pb->dout}};
    for (const auto &in : inputs)
        if (!view_vectorizable(*in.v, in.v->sd)) {
            snprintf(err, err_len,
                     "%s: layout not supported by the %s backward; expected last-dimension stride 1, other strides "
                     "multiples of 8 elements and a 16-byte aligned pointer",
                     in.name, who);
            return FFPA_ERR_UNSUPPORTED;
        }
    if (pb->grad_accum == FFPA_GRAD_ACCUM_OUTPUT) {
        const struct {
            const char *name;
            const ffpa_view *v;
        } outs[] = {{"dq", &pb->grad_q}, {"dk", &pb->grad_k}, {"dv", &pb->grad_v}};
        for (const auto &o : outs)
            if (o.v->sd != 1 || ((o.v->sb | o.v->sh | o.v->sn) & 1) || ((uintptr_t)o.v->data & 3)) {
                snprintf(err, err_len,
                         "%s: layout not supported with opt.grad_accum = FFPA_GRAD_ACCUM_OUTPUT; expected "
                         "last-dimension stride 1 and even strides (or use FFPA_GRAD_ACCUM_F32)",
                         o.name);
                return FFPA_ERR_UNSUPPORTED;
            }
    }
    return FFPA_OK;
}

/* FFPA_BWD_SMEM_LIMIT=<bytes> caps the shared memory per block the
 * planner believes the device has (FFPA_BWD_SMEM_LIMIT=65536 runs the
 * small-shared-memory configuration on any GPU, as on a 64 KiB-LDS AMD
 * part). Unset, malformed or above the device's limit: the device's limit. */
inline size_t smem_limit_of(size_t device_limit)
{
    return (size_t)ffpa_env_long("FFPA_BWD_SMEM_LIMIT", (long)device_limit, 0, (long)device_limit - 1, nullptr);
}

/* The kernels (bwd::Kernel), tiles and ring depths of one backward, and the
 * shared memory each launch gets. */
struct Tiles {
    int dkdv, bc, dkdv_stages; /* dK/dV kernel, its key tile, ring depth */
    int dq, br, dq_stages;     /* dQ kernel, its query tile, ring depth */
    size_t dkdv_smem, dq_smem;
    /* What the launchers run: dkdv / dq, or their *Resident twins where the
     * gradients stay in registers (decided once, in choose_tiles). */
    int dkdv_launch, dq_launch;
    /* 1: dkdv_launch adds dQ into the zeroed fp32 buffer (a *DqAtomic
     * kernel) and no dQ kernel runs. */
    int dq_atomic;
    /* 1: the resident dK/dV kernel keeps Q's ring slot for the dK phase
     * (one more slot than the plan's ring depth; ffpa_bwd_params.dkdv_hold_q). */
    int dkdv_hold_q;
};

/* The dK/dV kernel adds dQ with reductions (FlashAttention-2's five GEMMs
 * instead of the split launch's seven) where the order of the additions may
 * vary (not deterministic), they go to the fp32 buffer (not the output
 * dtype) and no dbias needs the dQ kernel's dS tile. FFPA_BWD_DQ_ATOMIC=0
 * keeps the dQ kernel (A/B in one build). */
inline bool dq_atomic_fits(const ffpa_problem *pb)
{
    return pb->grad_accum == FFPA_GRAD_ACCUM_F32 && !pb->deterministic && !pb->has_dbias &&
           ffpa_env_long("FFPA_BWD_DQ_ATOMIC", 1, 0, 1, nullptr) != 0;
}

/* The *DqAtomic twin of a dK/dV launch. */
inline int with_dq_atomic(int launch)
{
    switch (launch) {
    case kDkdv64Resident: return kDkdv64ResidentDqAtomic;
    case kDkdvSmallResident: return kDkdvSmallResidentDqAtomic;
    case kDkdv32: return kDkdv32DqAtomic;
    case kDkdvSmall: return kDkdvSmallDqAtomic;
    case kDkdvStream: return kDkdvStreamDqAtomic;
    default: return kDkdv64DqAtomic;
    }
}

/* One kernel configuration choose_tiles may take: the kernel, its tile
 * (key rows for dK/dV, query rows for dQ), its name in tuning tables
 * (ffpa_bwd_dkdv_kernel / ffpa_bwd_dq_kernel) and its shared memory at
 * 3 and 2 stages. */
struct TileOption {
    int kernel, tile, choice;
    size_t bytes[2];
};

/* Cfg's kernel on bc-key blocks at the deepest ring that fits smem_limit:
 * the held Q slot first where allowed (hold_ok), then without it; ring
 * depths without that slot from deepest down to shallowest, at most
 * kMaxStages slots in all. On a fit t launches `kernel` with it. */
template <class Cfg>
inline bool take_deepest_ring(Tiles &t, int kernel, int bc, int dqk, int dv, int deepest, int shallowest,
                              int hold_ok, size_t smem_limit)
{
    for (int hold = hold_ok; hold >= 0; --hold)
        for (int r = deepest; r >= shallowest; --r) {
            const int s = r + hold;
            const size_t bytes = dkdv_smem_bytes<Cfg>(bc, dqk, dv, s, 2); /* 16-bit elements */
            if (s <= kMaxStages && bytes <= smem_limit) {
                t.dkdv_launch = kernel;
                t.bc = bc;
                t.dkdv_stages = s;
                t.dkdv_smem = bytes;
                t.dkdv_hold_q = hold;
                return true;
            }
        }
    return false;
}

/* The first option, deepest ring first, that fits smem_limit; where the
 * tuned choice (want_kernel, want_stages; 0: any) fits, the first of those.
 * Returns the option (stages, bytes set) or NULL (bytes: the last need). */
inline const TileOption *first_fit(const TileOption *opts, int n, int want_kernel, int want_stages,
                                   size_t smem_limit, int &stages, size_t &bytes)
{
    for (int pass = want_kernel || want_stages ? 0 : 1; pass < 2; ++pass)
        for (int i = 0; i < n; ++i)
            for (int s = 3; s >= 2; --s) {
                const bool wanted =
                    (!want_kernel || opts[i].choice == want_kernel) && (!want_stages || s == want_stages);
                if (pass == 0 && !wanted)
                    continue;
                bytes = opts[i].bytes[3 - s];
                if (bytes <= smem_limit) {
                    stages = s;
                    return &opts[i];
                }
            }
    return nullptr;
}

/*
 * Per kernel, the tuned choice of plan (ffpa_plan.bwd_dkdv, bwd_dq,
 * bwd_stages) where it fits smem_limit, else the first candidate (deepest
 * ring first) that fits: dK/dV with resident K/V tiles of 64 rows (BigCfg),
 * then BigCfg's tile with K/V streamed (StreamCfg), then resident tiles of
 * 32 rows (before StreamCfg for causal masks), then SmallCfg (K/V streamed,
 * at most 64 KiB for every D); dQ
 * with BigCfg, then SmallCfg. Where BigCfg fits (H100: 227 KB) the default
 * is the one made before SmallCfg existed. smem_per_sm: the multiprocessor's
 * shared memory (small_first).
 */
inline ffpa_status choose_tiles(const ffpa_problem *pb, size_t smem_limit, size_t smem_per_sm, const ffpa_plan &plan,
                                const char *who, Tiles &t, char *err, size_t err_len)
{
    const size_t elt = 2;
    const int dqk = (int)pb->dqk, dv = (int)pb->dv, bias = pb->has_dbias;
    memset(&t, 0, sizeof t);
    /* StreamCfg against the 32-key kernel at D = 1024 (H100, N = 4096,
     * session-2026-11-27f): 112.7 vs 84.6 TFLOP/s, causal 77.3 vs 80.8 (the
     * causal blocks' short query ranges pay the streamed K/V chunks more).
     * FFPA_BWD_STREAM=0: never StreamCfg without a tuned choice (A/B). */
    auto dkdv_option = [&](auto cfg, int kernel, int bc, int choice) {
        using Cfg = decltype(cfg);
        return TileOption{kernel, bc, choice,
                          {dkdv_smem_bytes<Cfg>(bc, dqk, dv, 3, elt), dkdv_smem_bytes<Cfg>(bc, dqk, dv, 2, elt)}};
    };
    const TileOption kv64 = dkdv_option(BigCfg{}, kDkdv64, 64, FFPA_BWD_DKDV_KV64),
                     stream = dkdv_option(StreamCfg{}, kDkdvStream, 64, FFPA_BWD_DKDV_STREAM),
                     kv32 = dkdv_option(BigCfg{}, kDkdv32, 32, FFPA_BWD_DKDV_KV32),
                     small = dkdv_option(SmallCfg{}, kDkdvSmall, 64, FFPA_BWD_DKDV_SMALL);
    const bool stream_ok = plan.bwd_dkdv == FFPA_BWD_DKDV_STREAM ||
                           ffpa_env_long("FFPA_BWD_STREAM", 1, 0, 1, nullptr) != 0;
    TileOption dkdv[4];
    int n_dkdv = 0;
    dkdv[n_dkdv++] = kv64;
    if (stream_ok && !pb->causal)
        dkdv[n_dkdv++] = stream;
    dkdv[n_dkdv++] = kv32;
    if (stream_ok && pb->causal)
        dkdv[n_dkdv++] = stream;
    dkdv[n_dkdv++] = small;
    const TileOption dq[] = {
        {kDq, BigCfg::kBr, FFPA_BWD_DQ_BIG, {dq_smem_bytes<BigCfg>(3, bias, elt), dq_smem_bytes<BigCfg>(2, bias, elt)}},
        {kDqSmall, SmallCfg::kBr, FFPA_BWD_DQ_SMALL,
         {dq_smem_bytes<SmallCfg>(3, bias, elt), dq_smem_bytes<SmallCfg>(2, bias, elt)}}};
    /* small_first: without a tuned choice, a part that cannot hold the
     * 64-key kernel even at D = 128 (~100 KiB a block: sm_86 / 89 / 120)
     * runs SmallCfg at the deepest ring of which two blocks share a
     * multiprocessor. That is the sm_86 / 89 tables' choice at every D they
     * hold (2 stages), 1.7x the 32-key kernel the order above would take
     * (as sm_86 on an H100, bench/results/h100/session-2026-11-27e). */
    int want_dkdv = plan.bwd_dkdv, want_stages = plan.bwd_stages;
    const bool small_first = !want_dkdv && !want_stages && smem_limit < dkdv_smem_bytes<BigCfg>(64, 128, 128, 2, elt);
    for (int s = 3; small_first && s >= 2; --s)
        if (2 * dkdv_smem_bytes<SmallCfg>(64, dqk, dv, s, elt) <= smem_per_sm) {
            want_dkdv = FFPA_BWD_DKDV_SMALL;
            want_stages = s;
            break;
        }
    const TileOption *kv = first_fit(dkdv, n_dkdv, want_dkdv, want_stages, smem_limit, t.dkdv_stages, t.dkdv_smem);
    const TileOption *q = first_fit(dq, 2, plan.bwd_dq, plan.bwd_stages, smem_limit, t.dq_stages, t.dq_smem);
    /* Left: devices with less than the small configuration's 2-stage ring
     * (or an FFPA_BWD_SMEM_LIMIT below it); t.*_smem holds that need. */
    if (!kv || !q) {
        snprintf(err, err_len,
                 "q: the %s backward's %s kernel needs %zu bytes of shared memory per block%s; this device has %zu; "
                 "expected a device with more shared memory per block",
                 who, q ? "dK/dV" : "dQ", q ? t.dkdv_smem : t.dq_smem, !q && pb->has_dbias ? " (with dbias)" : "",
                 smem_limit);
        return FFPA_ERR_UNSUPPORTED;
    }
    t.dkdv = kv->kernel;
    t.bc = kv->tile;
    t.dq = q->kernel;
    t.br = q->tile;
    /* The gradients stay in registers where one chunk covers D
     * (FFPA_BWD_RESIDENT=0: never; the per-tile kernels at every D). */
    const bool regs = ffpa_env_long("FFPA_BWD_RESIDENT", 1, 0, 1, nullptr) != 0;
    /* The A/B knobs of the choices below, read once: the held Q slot
     * (FFPA_BWD_HOLD_Q=0: never) and the plain twins for calls without
     * softcap, bias, ALiBi or dropout (FFPA_BWD_PLAIN=0: never). */
    const int hold_ok = ffpa_env_long("FFPA_BWD_HOLD_Q", 1, 0, 1, nullptr) != 0;
    const bool plain = !ffpa_problem_has_variants(pb) && ffpa_env_long("FFPA_BWD_PLAIN", 1, 0, 1, nullptr) != 0;
    const bool big_regs = regs && dkdv_resident<BigCfg>(dqk, dv);
    const bool small_regs = regs && dkdv_resident<SmallCfg>(dqk, dv);
    t.dkdv_launch = t.dkdv == kDkdv64 && big_regs        ? kDkdv64Resident
                    : t.dkdv == kDkdvSmall && small_regs ? kDkdvSmallResident
                                                         : t.dkdv;
    t.dq_launch = t.dq == kDq ? (regs && dq_resident<BigCfg>(dqk) ? kDqResident : kDq)
                              : (regs && dq_resident<SmallCfg>(dqk) ? kDqSmallResident : kDqSmall);
    /* Resident dK/dV: one slot more holds the tile's Q chunk for the dK
     * phase (two items a tile instead of three, the same loads in flight),
     * where it fits. FFPA_BWD_HOLD_Q=0 streams Q again (A/B in one build). */
    if (t.dkdv_launch == kDkdv64Resident && hold_ok) {
        const size_t bytes = dkdv_smem_bytes<BigCfg>(t.bc, dqk, dv, t.dkdv_stages + 1, elt);
        if (bytes <= smem_limit) {
            t.dkdv_stages += 1;
            t.dkdv_smem = bytes;
            t.dkdv_hold_q = 1;
        }
    }
    t.dq_atomic = dq_atomic_fits(pb);
    if (t.dq_atomic)
        t.dkdv_launch = with_dq_atomic(t.dkdv_launch);
    /* Calls without softcap, bias, ALiBi or dropout: the plain twin
     * (FFPA_BWD_PLAIN=0: never, A/B in one build). */
    if (t.dkdv_launch == kDkdv64ResidentDqAtomic && plain)
        t.dkdv_launch = kDkdv64ResidentDqAtomicPlain;
    /* D <= 64: 128-key blocks (half the Q / dO loads and dQ reductions per
     * key; FFPA_BWD_KV128=0: never). */
    /* D in (64, 128]: 128-key blocks of 64-row query tiles, the 2-D S
     * tiling (Wide128Cfg; FFPA_BWD_KV128_WIDE=0: never). */
    const bool narrow_d = dqk <= kSlab && dv <= kSlab;
    const bool wide_ok = !narrow_d && ffpa_env_long("FFPA_BWD_KV128_WIDE", 1, 0, 1, nullptr) != 0;
    if (t.dkdv_launch == kDkdv64ResidentDqAtomicPlain && (narrow_d || wide_ok) && !want_dkdv &&
        ffpa_env_long("FFPA_BWD_KV128", 1, 0, 1, nullptr) != 0) {
        /* The 64-key kernel's ring depth, plus the held Q slot where it fits
         * (FFPA_BWD_HOLD_Q=0: never), else without it. */
        const int ring = t.dkdv_stages - t.dkdv_hold_q;
        if (narrow_d)
            take_deepest_ring<Big64Cfg>(t, kDkdv128PlainDqAtomic, 128, dqk, dv, ring, ring, hold_ok, smem_limit);
        else
            take_deepest_ring<Wide128Cfg>(t, kDkdv128WidePlainDqAtomic, 128, dqk, dv, ring, ring, hold_ok,
                                          smem_limit);
    }
    /* D in (128, 256]: 64-key blocks of 64-row query tiles with dK / dV in
     * registers (Wide256Cfg, the 2-D S tiling), where the 64-key kernel
     * reads and writes them every query tile; plain calls adding dQ, not
     * under a tuned dK/dV choice (FFPA_BWD_KV64_WIDE=0, FFPA_BWD_PLAIN=0 or
     * FFPA_BWD_RESIDENT=0: never). The deepest ring that fits: four slots
     * with Q held (the H100), else three, else without the held slot. */
    const bool wide256 = t.dkdv_launch == kDkdv64DqAtomic && (dqk > 2 * kSlab || dv > 2 * kSlab) &&
                         dkdv_resident<Wide256Cfg>(dqk, dv) && regs && plain && !want_dkdv &&
                         ffpa_env_long("FFPA_BWD_KV64_WIDE", 1, 0, 1, nullptr) != 0;
    if (wide256)
        take_deepest_ring<Wide256Cfg>(t, kDkdv64WidePlainDqAtomic, 64, dqk, dv, kMaxStages, 2, hold_ok, smem_limit);
    /* Above 256 (dK / dV in memory): the 64-key kernel's plain twin
     * (FFPA_BWD_PLAIN=0: never). */
    if (t.dkdv_launch == kDkdv64DqAtomic && plain)
        t.dkdv_launch = kDkdv64DqAtomicPlain;
    return FFPA_OK;
}

/* The backward's tuned choices for pb: the planner's plan with the
 * context's tuning table (all choices 0, the defaults, without a table or
 * where the planner has no plan). */
inline ffpa_plan tuned_plan(const ffpa_problem *pb, const ffpa_device_limits &lim)
{
    ffpa_plan plan;
    const ffpa_plan_input in = ffpa_plan_input_of(pb, 1);
    if (ffpa_plan_make(&in, &lim, &plan) != FFPA_OK)
        memset(&plan, 0, sizeof plan);
    return plan;
}

/* "bwd dkdv kv64 s3, dq big s2": the kernels that ran, in the tuning
 * tables' words (ffpa_last_kernel; the tuner tells configurations apart by
 * it); " regs" after a kernel that kept its gradients in registers,
 * " q-held" after one that kept Q for the dK phase; "dq atomic" where the
 * dK/dV kernel added dQ. */
inline void tiles_label(const Tiles &t, char *buf, size_t len)
{
    const char *kv = t.dkdv_launch == kDkdv128WidePlainDqAtomic ? "kv128 2d"
                     : t.dkdv_launch == kDkdv64WidePlainDqAtomic ? "kv64 2d"
                     : t.bc == 128                          ? "kv128"
                     : t.dkdv == kDkdv64     ? "kv64"
                     : t.dkdv == kDkdv32     ? "kv32"
                     : t.dkdv == kDkdvStream ? "stream"
                                             : "small";
    const bool plain = t.dkdv_launch == kDkdv64ResidentDqAtomicPlain || t.dkdv_launch == kDkdv128PlainDqAtomic ||
                       t.dkdv_launch == kDkdv128WidePlainDqAtomic || t.dkdv_launch == kDkdv64WidePlainDqAtomic ||
                       t.dkdv_launch == kDkdv64DqAtomicPlain;
    /* Neither the kernel itself nor its dQ-adding twin (or that twin's
     * plain one): a resident one. */
    const bool regs = t.dkdv_launch != t.dkdv && t.dkdv_launch != with_dq_atomic(t.dkdv) &&
                      t.dkdv_launch != kDkdv64DqAtomicPlain,
               dq_regs = t.dq_launch != t.dq;
    const char *held = t.dkdv_hold_q ? " q-held" : "";
    if (t.dq_atomic)
        snprintf(buf, len, "bwd dkdv %s%s%s s%d%s, dq atomic", kv, regs ? " regs" : "", plain ? " plain" : "",
                 t.dkdv_stages, held);
    else
        snprintf(buf, len, "bwd dkdv %s%s s%d%s, dq %s%s s%d", kv, regs ? " regs" : "", t.dkdv_stages, held,
                 t.dq == kDq ? "big" : "small", dq_regs ? " regs" : "", t.dq_stages);
}

inline ffpa_bwd_acc acc_of_buffer(void *data, int64_t rows_total, int64_t rows_per_seq, int64_t dim, bool varlen)
{
    ffpa_bwd_acc a;
    a.data = data;
    a.sn = dim;
    a.sh = rows_total * dim;
    a.sb = varlen ? 0 : rows_per_seq * dim;
    a.is_f32 = 1;
    return a;
}

inline ffpa_bwd_acc acc_of_view(const ffpa_view &v)
{
    ffpa_bwd_acc a;
    a.data = v.data;
    a.sb = v.sb;
    a.sh = v.sh;
    a.sn = v.sn;
    a.is_f32 = 0;
    return a;
}

/* Kernel parameters of pb over the workspace at base (laid out as lay).
 * dq_blocks: blocks of the dQ grid; g: the dbias buffer's grid. */
inline void fill_params(const ffpa_problem *pb, unsigned char *base, const Layout &lay, const Tiles &t,
                        ffpa_bwd_params &p, int64_t (&g)[4], int64_t &dq_blocks)
{
    const bool varlen = pb->cu_q != nullptr;
    memset(&p, 0, sizeof p);
    p.mask.scale_log2 = pb->scale * 1.4426950408889634f;
    p.mask.hq = (int)pb->hq;
    p.mask.causal = pb->causal; /* the visible tiles and rows (masking.cuh) */
    if (pb->has_bias) {
        p.mask.bias = pb->bias.data;
        p.mask.bias_dtype = (int)pb->bias_dtype;
        p.mask.bias_sb = pb->bias.sb;
        p.mask.bias_sh = pb->bias.sh;
        p.mask.bias_sn = pb->bias.sn;
        p.mask.bias_sd = pb->bias.sd;
    }
    ffpa_gpu_fill_variants(&p.mask, pb);
    p.has_dropout = pb->dropout_p > 0.0f;
    p.mask.has_dropout = p.has_dropout;
    p.mask.dropout_threshold = pb->dropout_threshold;
    p.mask.dropout_scale = pb->dropout_scale;
    p.mask.dropout_seed = pb->dropout_seed;
    p.mask.dropout_offset = pb->dropout_offset;

    p.q = pb->q.data;
    p.k = pb->k.data;
    p.v = pb->v.data;
    p.o = pb->o.data;
    p.dout = pb->dout.data;
    p.q_sb = pb->q.sb, p.q_sh = pb->q.sh, p.q_sn = pb->q.sn;
    p.k_sb = pb->k.sb, p.k_sh = pb->k.sh, p.k_sn = pb->k.sn;
    p.v_sb = pb->v.sb, p.v_sh = pb->v.sh, p.v_sn = pb->v.sn;
    p.o_sb = pb->o.sb, p.o_sh = pb->o.sh, p.o_sn = pb->o.sn;
    p.do_sb = pb->dout.sb, p.do_sh = pb->dout.sh, p.do_sn = pb->dout.sn;
    p.lse = static_cast<const float *>(pb->lse.data);
    p.lse_sb = pb->lse.sb, p.lse_sh = pb->lse.sh, p.lse_sn = pb->lse.sn;
    p.delta = reinterpret_cast<float *>(base + lay.delta);
    p.total_q = pb->total_q;
    p.batch = (int)pb->batch;
    p.hq = (int)pb->hq;
    p.hkv = (int)pb->hkv;
    p.group = (int)ffpa_query_group(pb);
    p.nq = (int)pb->nq;
    p.nkv = (int)pb->nkv;
    p.dqk = (int)pb->dqk;
    p.dv = (int)pb->dv;
    p.scale = pb->scale;
    p.causal = pb->causal;
    if (varlen && pb->cu_on_device) { /* the caller's device offsets, as they are */
        p.cu_q = pb->cu_q;
        p.cu_k = pb->cu_k;
    } else if (varlen) {
        p.cu_q = reinterpret_cast<const int32_t *>(base + lay.cu_q);
        p.cu_k = reinterpret_cast<const int32_t *>(base + lay.cu_k);
    }

    if (pb->grad_accum == FFPA_GRAD_ACCUM_F32) {
        p.dq = acc_of_buffer(base + lay.dq, pb->total_q, pb->nq, pb->dqk, varlen);
        p.dk = acc_of_buffer(base + lay.dk, pb->total_k, pb->nkv, pb->dqk, varlen);
        p.dv_acc = acc_of_buffer(base + lay.dv, pb->total_k, pb->nkv, pb->dv, varlen);
    } else {
        p.dq = acc_of_view(pb->grad_q);
        p.dk = acc_of_view(pb->grad_k);
        p.dv_acc = acc_of_view(pb->grad_v);
    }

    p.q_blocks = (int)((pb->nq + t.br - 1) / t.br);
    p.kv_blocks = (int)((pb->nkv + t.bc - 1) / t.bc);
    p.stages = t.dkdv_stages;
    p.dkdv_hold_q = t.dkdv_hold_q;

    /* dQ work items sharing dbias elements: one block, fixed order, in
     * deterministic mode; atomics on the fp32 buffer otherwise. */
    g[0] = g[1] = g[2] = g[3] = 1;
    if (pb->has_dbias) {
        dbias_grid(pb, g);
        p.dbias = reinterpret_cast<float *>(base + lay.dbias);
        p.dbias_gb = g[0];
        p.dbias_gh = g[1];
        p.dbias_gn = g[2];
        p.dbias_gk = g[3];
        const bool shared_dbias = pb->dbias.sh == 0 || pb->dbias.sb == 0 || pb->dbias.sn == 0;
        if (pb->deterministic) {
            p.member_h = pb->dbias.sh == 0;
            p.member_b = pb->dbias.sb == 0;
            p.member_qb = pb->dbias.sn == 0;
        } else {
            p.dbias_atomic = shared_dbias;
        }
    }
    dq_blocks = 1;
    const int64_t dims[3] = {pb->hq, pb->batch, p.q_blocks};
    const int member[3] = {p.member_h, p.member_b, p.member_qb};
    for (int x = 0; x < 3; ++x)
        dq_blocks *= member[x] ? 1 : dims[x];
}

template <class Rt>
ffpa_status device_error(typename Rt::Error e, const char *who, const char *what, char *err, size_t err_len)
{
    (void)Rt::last_error(); /* consumed: not the next launch's failure */
    snprintf(err, err_len, "%s backward: %s: %s", who, what, Rt::error_string(e));
    return Rt::out_of_memory(e) ? FFPA_ERR_OUT_OF_MEMORY : FFPA_ERR_DEVICE;
}

/* The whole backward of pb on `stream` (asynchronous) on a device with
 * these limits (the planner's; smem_per_block: what one block may use).
 * ran (optional): the kernels and tiles it launched. */
template <class Rt>
ffpa_status run(typename Rt::Stream stream, const ffpa_device_limits &lim, const char *who, const ffpa_problem *pb,
                void *ws, size_t ws_bytes, char *err, size_t err_len, Tiles *ran = nullptr)
{
    const size_t smem_limit = lim.smem_per_block;
    ffpa_status status = check(pb, who, err, err_len);
    if (status != FFPA_OK)
        return status;
    const Layout lay = layout_of(pb);
    if ((status = check_workspace(lay, ws, ws_bytes, who, err, err_len)) != FFPA_OK)
        return status;
    Tiles t;
    const size_t limit = smem_limit_of(smem_limit);
    if ((status = choose_tiles(pb, limit, lim.smem_per_sm, tuned_plan(pb, lim), who, t, err, err_len)) != FFPA_OK) {
        const size_t n = err ? strnlen(err, err_len) : err_len;
        if (limit < smem_limit && n + 1 < err_len)
            snprintf(err + n, err_len - n, " (capped by FFPA_BWD_SMEM_LIMIT; the device has %zu)", smem_limit);
        return status;
    }

    unsigned char *base = static_cast<unsigned char *>(ws);
    const bool varlen = pb->cu_q != nullptr;
    ffpa_bwd_params p;
    int64_t g[4];
    int64_t dq_blocks;
    fill_params(pb, base, lay, t, p, g, dq_blocks);

    typename Rt::Error e;
    if (varlen && !pb->cu_on_device) {
        const size_t bytes = (size_t)(pb->batch + 1) * sizeof(int32_t);
        if (!Rt::ok(e = Rt::copy_to_device(base + lay.cu_q, pb->cu_q, bytes, stream)) ||
            !Rt::ok(e = Rt::copy_to_device(base + lay.cu_k, pb->cu_k, bytes, stream)))
            return device_error<Rt>(e, who, "uploading cu_seqlens", err, err_len);
    }
    if (pb->has_dbias &&
        !Rt::ok(e = Rt::zero(p.dbias, (size_t)(g[0] * g[1] * g[2] * g[3]) * sizeof(float), stream)))
        return device_error<Rt>(e, who, "clearing the dbias buffer", err, err_len);

    /* dq_atomic: every key block adds into the buffer; rows no key reaches stay 0. */
    if (t.dq_atomic && pb->nq > 0 &&
        !Rt::ok(e = Rt::zero(p.dq.data, dq_buffer_bytes(pb), stream)))
        return device_error<Rt>(e, who, "clearing the dQ buffer", err, err_len);

    const int dtype = (int)pb->dtype;
    if (pb->nq > 0 && !Rt::ok(e = Rt::delta(dtype, p, stream)))
        return device_error<Rt>(e, who, "delta kernel", err, err_len);
    if (pb->nkv > 0 && !Rt::ok(e = Rt::dkdv(dtype, t.dkdv_launch, p, t.dkdv_smem, stream)))
        return device_error<Rt>(e, who, "dK/dV kernel", err, err_len);
    ffpa_bwd_params pq = p;
    pq.stages = t.dq_stages;
    if (!t.dq_atomic && pb->nq > 0 && dq_blocks > 0 &&
        !Rt::ok(e = Rt::dq(dtype, t.dq_launch, pq, dq_blocks, t.dq_smem, stream)))
        return device_error<Rt>(e, who, "dQ kernel", err, err_len);

    if (pb->grad_accum == FFPA_GRAD_ACCUM_F32) {
        const struct {
            const float *acc;
            const ffpa_view *out;
            int64_t heads, rows, nlen, dim;
        } jobs[] = {{static_cast<const float *>(p.dq.data), &pb->grad_q, pb->hq, pb->total_q, pb->nq, pb->dqk},
                    {static_cast<const float *>(p.dk.data), &pb->grad_k, pb->hkv, pb->total_k, pb->nkv, pb->dqk},
                    {static_cast<const float *>(p.dv_acc.data), &pb->grad_v, pb->hkv, pb->total_k, pb->nkv, pb->dv}};
        for (const auto &j : jobs) {
            const ConvertJob cj = convert_job(j.acc, *j.out, j.heads, j.rows, varlen ? 0 : j.nlen, j.dim);
            if (!Rt::ok(e = Rt::convert(dtype, cj, stream)))
                return device_error<Rt>(e, who, "gradient conversion kernel", err, err_len);
        }
    }
    if (pb->has_dbias) {
        const int64_t stride[4] = {pb->dbias.sb, pb->dbias.sh, pb->dbias.sn, pb->dbias.sd};
        if (!Rt::ok(e = Rt::dbias_convert(p.dbias, g, pb->dbias.data, (int)pb->dbias_dtype, stride, stream)))
            return device_error<Rt>(e, who, "dbias conversion kernel", err, err_len);
    }
    if (ran)
        *ran = t;
    return FFPA_OK;
}

} /* namespace host */
} /* namespace bwd */
} /* namespace ffpa */

#endif
