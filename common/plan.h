/*
 * The Split-D planner: a pure function from (problem shape, dtype, options,
 * device limits) to tile sizes, head-dimension chunks, pipeline depth,
 * warps, grid and work order. Shared by every backend so that the tiling
 * the CPU reference runs is the tiling the GPU kernels run.
 */
#ifndef FFPA_COMMON_PLAN_H
#define FFPA_COMMON_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "ffpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the planner needs to know about the device. */
typedef struct ffpa_device_limits {
    int is_gpu;                  /* 0 for the cpu backend */
    int arch;                    /* sm version (80, 86, 89, 90, 100, 120), gfx id, or 0 */
    int sm_count;                /* multiprocessors / compute units / cpu threads */
    int warp_size;               /* 32, 64; 1 on cpu */
    size_t smem_per_block;       /* opt-in shared memory per block, bytes */
    size_t smem_per_sm;          /* shared memory per multiprocessor, bytes */
    int regs_per_sm;             /* 32-bit registers per multiprocessor */
    int max_threads_per_block;
} ffpa_device_limits;

/* The limits of an NVIDIA part the generic kernels are planned and tuned
 * for without one at hand (FFPA_CUDA_AS_ARCH, docs/notes/tuning.md): lim
 * takes sm_<arch>'s arch and shared memory per block and per SM, and keeps
 * the running device's SM count, registers and threads. Known: 80 (A100:
 * 163 KiB a block, 164 an SM), 86 and 89 (99 / 100 KiB). Returns 0 and
 * leaves lim as it is for another arch or one above lim's own (the
 * device must have at least that part's shared memory). */
int ffpa_limits_as_arch(ffpa_device_limits *lim, int arch);

/* The shape facts the planner reads (a subset of ffpa_problem). */
typedef struct ffpa_plan_input {
    ffpa_dtype dtype;
    int64_t batch, hq, hkv, nq, nkv, dqk, dv;
    int causal;
    int has_bias, has_dropout, varlen;
    int backward;
    int stream_q; /* forward GPU: Split-D streams Q with every K chunk even where it fits
                   * resident (A/B knob FFPA_GENERIC_Q_RESIDENT=0) */
    const struct ffpa_tuning_table *tuning; /* optional per-device table */
} ffpa_plan_input;

typedef enum ffpa_kernel_path {
    FFPA_PATH_SMALL_D = 0,  /* D <= 256: coarse FA-2 tiling, whole D per tile */
    FFPA_PATH_SPLIT_D = 1,  /* D > 256: fine-grained Split-D tiling over D chunks */
    FFPA_PATH_DECODE = 2    /* few query rows: KV split across blocks, LSE merge */
} ffpa_kernel_path;

typedef enum ffpa_work_order {
    FFPA_ORDER_LINEAR = 0,        /* query blocks in index order */
    FFPA_ORDER_LONGEST_FIRST = 1  /* causal: blocks with the most key columns first */
} ffpa_work_order;

/* Tuned choices (common/tuning.c) beyond the tile: each 0 means "the
 * heuristics / the launcher's default". */
typedef enum ffpa_fwd_family {
    FFPA_FAMILY_AUTO = 0,    /* the launcher's default (sm_90: Hopper where it covers the call) */
    FFPA_FAMILY_GENERIC = 1, /* the mma.sync Split-D kernels (backends/gpu) */
    FFPA_FAMILY_HOPPER = 2   /* the sm_90a WGMMA/TMA kernels (backends/cuda/sm90) */
} ffpa_fwd_family;

typedef enum ffpa_bwd_dkdv_kernel { /* backends/gpu/bwd/bwd_host.h, choose_tiles */
    FFPA_BWD_DKDV_AUTO = 0,
    FFPA_BWD_DKDV_KV64 = 1,  /* K/V resident, 64-row key tiles */
    FFPA_BWD_DKDV_KV32 = 2,  /* K/V resident, 32-row key tiles */
    FFPA_BWD_DKDV_SMALL = 3, /* K/V streamed (the small-shared-memory configuration) */
    FFPA_BWD_DKDV_STREAM = 4 /* K/V streamed beside 128-row query tiles (where 64 keys do not fit resident) */
} ffpa_bwd_dkdv_kernel;

typedef enum ffpa_bwd_dq_kernel {
    FFPA_BWD_DQ_AUTO = 0,
    FFPA_BWD_DQ_BIG = 1,     /* 128-row query tiles, 128-column chunks */
    FFPA_BWD_DQ_SMALL = 2    /* 64-row query tiles, 64-column chunks */
} ffpa_bwd_dq_kernel;

/* (A new member joins tests/test_tuning.c assert_same_plan too.) */
typedef struct ffpa_plan {
    ffpa_kernel_path path;
    int br, bc;              /* query rows / key rows per tile */
    int dqk_chunk, dv_chunk; /* head-dimension chunk of QK^T and of PV */
    int n_qk_chunks, n_v_chunks;
    int dqk_padded, dv_padded; /* chunk multiples covering dqk / dv */
    int stages;              /* shared-memory pipeline depth */
    int warps;               /* warps per block (threads on cpu) */
    int kv_splits;           /* > 1: split-KV (flash-decoding) */
    int q_resident;          /* forward GPU: Q loaded once, kept in shared memory over the key loop */
    size_t smem_bytes;       /* shared memory per block the kernel needs */
    int64_t q_blocks;        /* ceil(nq / br) */
    int64_t grid[3];         /* x: q blocks (x kv splits), y: hq, z: batch */
    ffpa_work_order order;
    /* Tuned kernel choices, set only by a tuning table (0: default). The
     * launchers honour them where they can run the call, else fall back. */
    ffpa_fwd_family family;  /* CUDA kernel family (forward; backward too) */
    int cluster;             /* Hopper: CTAs per cluster (forward 1, 2, 4; backward 1, 2) */
    int bwd_boxes;           /* Hopper backward: 64-column boxes per CTA (2, 4, 6, 8) */
    ffpa_bwd_dkdv_kernel bwd_dkdv;
    ffpa_bwd_dq_kernel bwd_dq;
    int bwd_stages;          /* ring depth of both backward kernels (2, 3) */
} ffpa_plan;

struct ffpa_problem;

/* The planner's view of a validated problem. Empty varlen batches plan for
 * one row so passes still run (writing O = 0, LSE = -inf, zero gradients). */
ffpa_plan_input ffpa_plan_input_of(const struct ffpa_problem *pb, int backward);

/* Fills *plan; FFPA_ERR_UNSUPPORTED when no legal configuration fits. */
ffpa_status ffpa_plan_make(const ffpa_plan_input *in, const ffpa_device_limits *lim,
                           ffpa_plan *plan);

/* Shared memory bytes a plan needs (the model the kernels follow). */
size_t ffpa_plan_smem_bytes(const ffpa_plan *plan, ffpa_dtype dtype, int backward);

/* Recomputes what follows from a plan's choices (tile, chunks, stages,
 * kv_splits): padded head dims, chunk counts, shared memory, query blocks,
 * grid. ffpa_plan_make and the tuning table's apply share it. */
void ffpa_plan_derive(const ffpa_plan_input *in, const ffpa_device_limits *lim, ffpa_plan *plan);

/* Forward GPU kernels: Q stays in shared memory for the whole key loop
 * (loaded once) instead of streaming with every K chunk. Decided once by
 * the planner (ffpa_plan_derive: always below D = 256, on the Split-D path
 * wherever it fits the block at the plan's ring depth); the kernels, the
 * launchers and the shared-memory model all read it here. */
static inline int ffpa_plan_q_resident(const ffpa_plan *plan)
{
    return plan->q_resident;
}

/* One instantiation of the generic forward kernels (CUDA and HIP): the
 * largest Dv it covers and its tile. */
typedef struct ffpa_fwd_tile {
    int dv, br, bc, chunk, warps;
} ffpa_fwd_tile;

/* The distinct tiles of the instantiations that cover Dv (any of them may
 * run the problem: the kernels mask the padding), smallest Dv first; writes
 * at most max, returns how many there are. */
int ffpa_plan_fwd_tiles(int64_t dv, ffpa_fwd_tile *out, int max);

/* Gives *plan the tile (br, bc, chunk, warps) of the smallest instantiation
 * covering in->dv that has it (the one the launchers pick), with padded dims
 * and chunk counts; returns 0 and leaves *plan alone when none has it. */
int ffpa_plan_use_fwd_tile(const ffpa_plan_input *in, int br, int bc, int chunk, int warps,
                           ffpa_plan *plan);

/* The sm_90a forward's shapes, smallest cover first (the launcher takes the
 * first that covers Dqk and Dv): X(slice, slice_v, cluster, label), Q/K
 * columns and V/O columns per CTA. The instantiation tables
 * (sm90_fwd_inst_*.cu) and ffpa_plan_sm90_covers both expand it, so a shape
 * is added in one place. */
#define FFPA_SM90_FWD_SHAPES(X)                                                                                   \
    X(64, 64, 1, "d64") X(128, 128, 1, "d128") X(192, 128, 1, "d192/128") X(256, 256, 1, "d256")                \
    X(320, 320, 1, "d320")                                                                                        \
    X(192, 192, 2, "d192x2 cluster") X(256, 256, 2, "d256x2 cluster") X(320, 256, 2, "d320/256x2 cluster")     \
    X(256, 256, 3, "d256x3 cluster") X(192, 192, 4, "d192x4 cluster") X(256, 256, 4, "d256x4 cluster")

/* Whether an sm_90a forward instantiation with `cluster` CTAs per cluster
 * covers Dqk and Dv (FFPA_SM90_FWD_SHAPES). */
int ffpa_plan_sm90_covers(int64_t dqk, int64_t dv, int cluster);

/* The sm_90a backward's widths in the launcher's order of preference
 * (backends/cuda/sm90/sm90_bwd_kernels.cuh says why):
 * X(boxes, cluster, label, f32_dq_only). The instantiation tables
 * (sm90_bwd_inst_*.cu) and ffpa_plan_sm90_bwd_covers both expand it, so a
 * width is added in one place. */
#define FFPA_SM90_BWD_WIDTHS(X)                                                                                  \
    X(2, 1, "d128", 0) X(4, 1, "d256", 0) X(6, 1, "d384", 0) X(4, 2, "d256x2 cluster", 1) X(8, 1, "d512", 0)    \
    X(4, 3, "d256x3 cluster", 1) X(6, 2, "d384x2 cluster", 0) X(4, 4, "d256x4 cluster", 1)                    \
    X(8, 2, "d512x2 cluster", 0)

/* Whether the sm_90a backward has an instantiation of `boxes` 64-column
 * boxes per CTA in clusters of `cluster` and it covers Dqk and Dv
 * (backends/cuda/sm90/sm90_bwd_inst_*.cu: the width table). */
int ffpa_plan_sm90_bwd_covers(int64_t dqk, int64_t dv, int boxes, int cluster);

/* Tiles of the portable kernels (the OpenCL backend's kernels/fwd.cl and
 * bwd.cl): wg work-items per work-group, br query rows (wg / br work-items
 * per row), bc keys per tile, dc head-dim columns per staged chunk, all in
 * fp32 local memory; local_bytes is the most any of the kernels needs. */
typedef struct ffpa_portable_tiles {
    int wg, br, bc, dc;
    size_t local_bytes;
    int tr; /* forward only: rows per work-item of the register-tiled kernel (kernels/fwd_tiled.cl), 0: fwd.cl */
} ffpa_portable_tiles;

/* The first tile set, largest first (the default 128 x 16 x 32 x 32 where it
 * fits), whose local memory and work-group fit the device's
 * (lim->smem_per_block, lim->max_threads_per_block); FFPA_ERR_UNSUPPORTED
 * when none does, with *out the smallest set (what the device lacks). */
ffpa_status ffpa_plan_portable(const ffpa_device_limits *lim, ffpa_portable_tiles *out);

/* The register-tiled forward's tiles (kernels/fwd_tiled.cl: 128 work-items,
 * 64 keys, Q/K chunks of dc = 64 columns on GPUs and 32 on CPUs, 64-column
 * V chunks): tr = 4 rows per
 * work-item (32 per work-group) for Dv <= 512, 2 (16) above, so that O's
 * registers stay at 128 per work-item, and 2 where a query head (or, with
 * packed heads, a KV head's query heads together) has at most 16 rows
 * (rows: decode, speculative decode), which would leave half of a 32-row
 * tile or more idle; FFPA_ERR_UNSUPPORTED where its local memory or
 * work-group does not fit the device (*out filled either way). */
ffpa_status ffpa_plan_portable_tiled(const ffpa_device_limits *lim, int64_t dv, int64_t rows,
                                     ffpa_portable_tiles *out);

/* The OpenCL KV cache's static split (kernels/cl_kv.h): work-groups per
 * query block, each walking an equal share of its rows' visible key tiles,
 * their partials merged by ffpa_merge. Enough to give the device's compute
 * units two work-groups each, at most FFPA_MERGE_MAX_PARTS, and none
 * shorter than FFPA_KV_MIN_TILES_PER_SPLIT of key_tiles (the longest
 * sequence's). forced > 0 (a knob) replaces the choice, capped at
 * FFPA_MERGE_MAX_PARTS. 1: no split. */
int ffpa_plan_static_kv_splits(const ffpa_device_limits *lim, int64_t work_groups, int64_t key_tiles, int forced);

/* Packed heads (the OpenCL forward, kernels/cl_kv.h): whether a forward of
 * nq <= 16 query rows with GQA / MQA / MLA gives each work-group the rows
 * of all hq / hkv query heads of a KV head (br_packed rows a work-group)
 * instead of one query head's (br_unpacked), on the same kernel. A
 * work-group walks its share of key_tiles, so the call takes about (its
 * work-groups' waves over lim->sm_count) x (one work-group's tiles);
 * packing divides the work-groups by up to the group size and reads a KV
 * head once. With `splittable` (the KV cache) either side splits its key
 * tiles as ffpa_plan_static_kv_splits would. Packs where its estimate is
 * below the unpacked one, or equal with the packed grid still covering
 * every compute unit (within one wave the unpacked grid's extra
 * work-groups pull from more multiprocessors: H200, dense GQA 32/8 D = 128
 * B = 4, 0.97 ms unpacked against 1.11 packed; docs/notes/opencl.md).
 * Returns the query heads per work-group: hq / hkv, or 1. */
int ffpa_plan_packed_heads(const ffpa_device_limits *lim, int64_t batch, int64_t hq, int64_t hkv, int64_t nq,
                           int br_packed, int br_unpacked, int64_t key_tiles, int splittable);

/* The matrix-instruction forward's geometry (the OpenCL backend's
 * kernels/fwd_mma.cl: NVIDIA mma.sync m16n8k16 through inline PTX). A
 * work-group is wm x wn warps of 32 and owns br = 16 wm query rows; key
 * tiles of bc = 64 and dc-column Q/K chunks (64, 32 at wm = 8), 16-bit,
 * through a ring of two local-memory slots. Warp (i, j) computes S for its
 * 16 rows and keys [j bc / wn, (j + 1) bc / wn) over all of Dqk (no partial
 * S to add up), and O for its 16 rows and columns [j oc, (j + 1) oc) in
 * vc-column V chunks; with wn > 1 P goes through local memory (p_bytes).
 * O's fp32 registers, oc / 2 per work-item, stay at 128 or fewer: wn = 1
 * up to Dv = 256, 2 up to 512, 4 (br = 32) above. dvb = wn oc >= Dv. */
typedef struct ffpa_matrix_tiles {
    int wm, wn, br, bc, dc, vc, oc, dvb;
    size_t slot_bytes, p_bytes, local_bytes;
} ffpa_matrix_tiles;

/* The geometry for Dv (1..FFPA_MAX_HEAD_DIM): the rule above where wm and wn
 * are 0, else that many warps (a tuning knob; wm 1, 2, 4 or 8, wn 1, 2 or
 * 4, else FFPA_ERR_INVALID_ARGUMENT). FFPA_ERR_UNSUPPORTED where its local
 * memory or work-group does not fit the device (*out filled either way, for
 * the message). */
ffpa_status ffpa_plan_matrix_forward(const ffpa_device_limits *lim, int64_t dv, int wm, int wn,
                                     ffpa_matrix_tiles *out);

/* The matrix forward's warps for a call whose work-groups each hold one KV
 * head's packed rows of a few new tokens (decode with GQA / MQA / MLA:
 * group x nq <= 16 rows): one warp row (16-row work-groups, at least two
 * warp columns sharing each key tile), where the call's work-groups of that
 * size, `work_groups` before the KV cache's split (`splittable`, over
 * key_tiles as ffpa_plan_static_kv_splits), still give every compute unit
 * two; the rule's 4-warp rows otherwise, whose extra warps keep more loads
 * in flight when the work-groups are few. rule_wn is the rule's warp
 * columns for Dv. Measured, H200 through NVIDIA's OpenCL: GQA decode D =
 * 128 / 256 9-29% faster on 16-row groups; with 8 work-groups of 16 splits
 * (B = 1, 8 KV heads) 37% slower (docs/notes/opencl.md). Returns 1 and sets
 * *wm, *wn, or 0 for the rule. */
int ffpa_plan_matrix_few_rows(const ffpa_device_limits *lim, int64_t rows, int64_t work_groups, int64_t key_tiles,
                              int splittable, int rule_wn, int *wm, int *wn);

/* Query block that work item w of a causal-aware schedule runs: with
 * FFPA_ORDER_LONGEST_FIRST, item 0 is the last (longest) query block. */
static inline int64_t ffpa_plan_q_block(const ffpa_plan *plan, int64_t w)
{
    return plan->order == FFPA_ORDER_LONGEST_FIRST ? plan->q_blocks - 1 - w : w;
}

/* ------------------------------------------------------- the tuning hook */
/*
 * The planner applies a per-device tuning table (common/tuning.h) through
 * this hook, without knowing the table's format: the planner is compiled
 * into every backend plugin, the JSON loader only into the core, so a table
 * carries its own apply function and plugins need neither cJSON nor
 * tuning.c. tuning.c fills it in; the planner only calls it.
 */
typedef struct ffpa_tuning_table ffpa_tuning_table; /* opaque */
typedef void (*ffpa_tuning_apply_fn)(const ffpa_tuning_table *table, const ffpa_plan_input *in,
                                     const ffpa_device_limits *lim, ffpa_plan *plan);
typedef struct ffpa_tuning_table_head {
    ffpa_tuning_apply_fn apply; /* first member of every ffpa_tuning_table */
} ffpa_tuning_table_head;

/*
 * Overrides the tunable fields of *plan (made by the heuristics for *in) with
 * the entry of the same (pass, dtype, heuristic path, causal, GQA) nearest in
 * (log2 D, log2 Nq, log2 Nkv), then recomputes what follows (ffpa_plan_derive).
 * Values illegal for the problem are ignored (stages outside 2..4, or 2..3
 * backward; kv_splits < 1; a tile no instantiation covering Dv has; the
 * Hopper family or a cluster off sm_90, on split-KV calls, or a cluster
 * covering less than D; a Hopper backward width with no instantiation or
 * covering less than D) or clamped (kv_splits above the key blocks); an
 * entry whose plan would not fit the block's shared memory is not applied.
 * No-op for a NULL table, a CPU device or no matching entry.
 */
static inline void ffpa_tuning_apply(const ffpa_tuning_table *table, const ffpa_plan_input *in,
                                     const ffpa_device_limits *lim, ffpa_plan *plan)
{
    if (table)
        ((const ffpa_tuning_table_head *)(const void *)table)->apply(table, in, lim, plan);
}

#ifdef __cplusplus
}
#endif

#endif
