/*
 * Parameters of the backward kernels (plain C; filled by bwd_host.h for the
 * CUDA and HIP launchers).
 *
 * Gradient accumulators are "acc views": either the fp32 workspace buffers
 * (FFPA_GRAD_ACCUM_F32; converted into dq/dk/dv once at the end) or the
 * output tensors themselves (FFPA_GRAD_ACCUM_OUTPUT; every partial update is
 * rounded to the output dtype, as the cpu backend does). Element (b, h, n, d)
 * of an acc view is at h*sh + (cu ? cu[b]*sn : b*sb) + n*sn + d.
 */
#ifndef FFPA_GPU_BWD_PARAMS_H
#define FFPA_GPU_BWD_PARAMS_H

#include <stdint.h>

#include "fwd_params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ffpa_bwd_acc {
    void *data;
    int64_t sb, sh, sn;
    int is_f32; /* 1: float buffer; 0: the output dtype of q */
} ffpa_bwd_acc;

/* 64-column parts of a head dimension up to 1024: dQ turn counters per tile
 * (a consumer's dQ is 128 or 64 columns, counted at its first part). */
#define FFPA_BWD_DQ_TURN_PARTS 16

typedef struct ffpa_bwd_params {
    /* Masking, bias and dropout fields (scale_log2, bias*, dropout*, hq) in
     * the forward's layout, so backends/gpu/masking.cuh applies the very same
     * score epilogue and dropout mask. Only those fields are read. */
    ffpa_gpu_fwd_params mask;

    const void *q, *k, *v, *o, *dout;
    int64_t q_sb, q_sh, q_sn;
    int64_t k_sb, k_sh, k_sn;
    int64_t v_sb, v_sh, v_sn;
    int64_t o_sb, o_sh, o_sn;
    int64_t do_sb, do_sh, do_sn;
    const float *lse;
    int64_t lse_sb, lse_sh, lse_sn;
    float *delta; /* [hq][total_q] fp32 rowsum(dO * O) */
    int64_t total_q;

    int batch, hq, hkv, group;
    int nq, nkv;       /* dense lengths or longest sequences (varlen) */
    int dqk, dv;       /* multiples of 8 */
    const int32_t *cu_q, *cu_k; /* device copies, or NULL */
    float scale;       /* softmax scale (dK, dQ factor) */
    int causal;
    int has_dropout;

    ffpa_bwd_acc dq, dk, dv_acc;

    /* d(bias): fp32 buffer [gb][gh][gn][gk] (1 where dbias broadcasts). */
    float *dbias;
    int64_t dbias_gb, dbias_gh, dbias_gn, dbias_gk;
    int dbias_atomic;  /* 1: atomicAdd (fast, order varies); 0: owned, ordered */

    /* Schedule. */
    int stages;        /* cp.async ring depth, 2..4 */
    int dkdv_hold_q;   /* resident dK/dV kernels: Q's ring slot kept for the dK phase (bwd_dkdv.cuh) */
    int q_blocks;      /* ceil(nq / br) */
    int kv_blocks;     /* ceil(nkv / bc) */
    /* dQ grid: work item = (q block, h, b); the dims flagged in member_* run
     * inside one block in a fixed order (deterministic dbias), the others
     * across blocks. Order of dims: h (fastest), b, q block (slowest). */
    int member_h, member_b, member_qb;

    /* Deterministic dQ of the fused Hopper backward (NULL elsewhere): a turn
     * counter per (b, h, query tile, 64-column part)
     * [batch][hq][dq_turn_tiles][FFPA_BWD_DQ_TURN_PARTS],
     * zeroed per call, so the key blocks add into a dQ tile in one fixed
     * order (cuda/sm90/sm90_bwd_epilogue.cuh). */
    int *dq_turn;
    int dq_turn_tiles; /* ceil(nq / 64) */
} ffpa_bwd_params;

#ifdef __cplusplus
}

namespace ffpa {
namespace bwd {

/* The dK/dV and dQ kernels a launcher instantiates (bwd_host.h picks; the
 * CUDA plugin's kernel_attributes takes the same numbers). *Small: the
 * small-shared-memory configuration (SmallCfg of bwd_common.cuh).
 * *Resident: the same kernels with the gradients in registers, which
 * choose_tiles takes for kDkdv64 / kDkdvSmall / kDq / kDqSmall where one
 * chunk covers D (bwd_dkdv.cuh, bwd_dq.cuh). *DqAtomic: the dK/dV kernels
 * adding dQ into the zeroed fp32 buffer themselves (no dQ kernel;
 * choose_tiles, outside deterministic mode). kDkdv64ResidentDqAtomicPlain:
 * that kernel without the softcap, bias, ALiBi and dropout code, for calls
 * that have none (+5% at D <= 128 on the H100, docs/notes/backward.md).
 * kDkdv128PlainDqAtomic: the same at D <= 64 on 128-key blocks (Big64Cfg);
 * kDkdv128WidePlainDqAtomic: at D in (64, 128] (Wide128Cfg, 2-D S tiling);
 * kDkdv64WidePlainDqAtomic: at D in (128, 256] on 64-key blocks (Wide256Cfg);
 * kDkdv64DqAtomicPlain: the 64-key dQ-adding kernel with dK/dV in memory
 * (D above 256), without the variant code. */
enum Kernel {
    kDkdv64 = 0,
    kDkdv32 = 1,
    kDq = 2,
    kDkdvSmall = 3,
    kDqSmall = 4,
    kDkdv64Resident = 5,
    kDkdvSmallResident = 6,
    kDqResident = 7,
    kDqSmallResident = 8,
    kDkdv64DqAtomic = 9,
    kDkdv64ResidentDqAtomic = 10,
    kDkdv32DqAtomic = 11,
    kDkdvSmallDqAtomic = 12,
    kDkdvSmallResidentDqAtomic = 13,
    kDkdvStream = 14,
    kDkdvStreamDqAtomic = 15,
    kDkdv64ResidentDqAtomicPlain = 16,
    kDkdv128PlainDqAtomic = 17,
    kDkdv128WidePlainDqAtomic = 18,
    kDkdv64WidePlainDqAtomic = 19,
    kDkdv64DqAtomicPlain = 20
};

/* fp32 gradient buffer [heads][rows_total][dim] -> strided output view.
 * nlen: rows per sequence of a dense batch (row r is (r / nlen, r % nlen)),
 * 0 for varlen (views then have sb = 0 and packed row r is row r). */
struct ConvertJob {
    const float *acc;
    void *out;
    int64_t sb, sh, sn, sd;
    int64_t heads, rows_total, nlen;
    int dim;
};

} /* namespace bwd */
} /* namespace ffpa */
#endif

#endif
