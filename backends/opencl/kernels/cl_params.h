/*
 * Parameters of the OpenCL forward kernel, passed by value; shared by the
 * host launcher (C11) and the kernel source (OpenCL C), so both lay it out
 * alike: 8-byte fields first, then 4-byte ones. Element offsets locate each
 * tensor's (0, 0, 0, 0) inside its buffer (cl_memory.h); strides are in
 * elements; batch-side strides are 0 for varlen (rows from the offsets).
 */
#ifndef FFPA_OPENCL_CL_PARAMS_H
#define FFPA_OPENCL_CL_PARAMS_H

#ifdef __OPENCL_VERSION__
#define FFPA_CL_I64 long
#define FFPA_CL_U64 ulong
#define FFPA_CL_U32 uint
#else
#include <stdint.h>
#define FFPA_CL_I64 int64_t
#define FFPA_CL_U64 uint64_t
#define FFPA_CL_U32 uint32_t
#endif

typedef struct ffpa_cl_fwd_params {
    FFPA_CL_I64 q_off, k_off, v_off, o_off, lse_off, bias_off, alibi_off, cu_off;
    FFPA_CL_I64 q_sb, q_sh, q_sn;
    FFPA_CL_I64 k_sb, k_sh, k_sn;
    FFPA_CL_I64 v_sb, v_sh, v_sn;
    FFPA_CL_I64 o_sb, o_sh, o_sn;
    FFPA_CL_I64 q_sd, k_sd, v_sd, o_sd; /* head-dim strides (any, 0 included for inputs) */
    FFPA_CL_I64 lse_sb, lse_sh, lse_sn;
    FFPA_CL_I64 bias_sb, bias_sh, bias_sn, bias_sd;
    FFPA_CL_I64 alibi_sb, alibi_sh;
    FFPA_CL_I64 o_split, lse_split; /* splits > 1: elements between split s's partial O and LSE (cl_kv.h) */
    FFPA_CL_U64 dropout_seed, dropout_offset;
    int batch, hq, group, nq, nkv, dqk, dv, q_blocks;
    int splits; /* work-groups per query block, each an equal share of its key tiles (the KV cache's split) */
    int o_dt;   /* dtype of the O written: DT, or 2 (fp32) for a split's partial */
    int pack; /* query heads per work-group's rows: 1, or group (packed heads: kernels/cl_kv.h) */
    int causal, has_lse, has_bias, bias_dtype, has_alibi, has_dropout, varlen;
    int window, window_left, window_right; /* bounds < 0: unbounded */
    FFPA_CL_U32 dropout_threshold;
    float scale, softcap, dropout_scale;
} ffpa_cl_fwd_params;

/* The backward's additions. A gradient accumulator ("acc": the fp32
 * workspace buffers, or with FFPA_GRAD_ACCUM_OUTPUT the outputs themselves,
 * acc_dt their dtype) has element (b, h, n, d) at
 * off + h * sh + (varlen ? (start + n) * sn : b * sb + n * sn) + d * sd.
 * Delta is fp32 [hq][total_q]; dbias an fp32 buffer [gb][gh][gn][gk] (1
 * where it broadcasts), whose sharing dims (member_*) one work-group runs
 * in a fixed order: no atomics, the same bytes every run. */
typedef struct ffpa_cl_bwd_params {
    FFPA_CL_I64 do_off, delta_off, dbias_off;
    FFPA_CL_I64 do_sb, do_sh, do_sn, do_sd;
    FFPA_CL_I64 dq_off, dq_sb, dq_sh, dq_sn, dq_sd;
    FFPA_CL_I64 dk_off, dk_sb, dk_sh, dk_sn, dk_sd;
    FFPA_CL_I64 dv_off, dv_sb, dv_sh, dv_sn, dv_sd;
    FFPA_CL_I64 dbias_gb, dbias_gh, dbias_gn, dbias_gk;
    FFPA_CL_I64 total_q;
    int acc_dt, hkv, kv_blocks, has_dbias, member_h, member_b, member_qb, pad;
} ffpa_cl_bwd_params;

/* One dense fp32 array [n0][n1][n2][n3] -> a strided view (s0..s3 in the
 * same dim order) of dtype dt: the backward's final conversions. */
typedef struct ffpa_cl_convert {
    FFPA_CL_I64 src_off, dst_off;
    FFPA_CL_I64 n0, n1, n2, n3;
    FFPA_CL_I64 s0, s1, s2, s3;
    int dt, pad;
} ffpa_cl_convert;

/* A paged KV cache (ffpa_forward_kvcache; kernels/cl_kv.h): what the
 * forward kernel needs to find key row j of sequence b, and what the append
 * kernel needs to write the new tokens. Key row j lives in page
 * block_table[b][j / page_size] (page b without a table), row j % page_size;
 * the pool's strides are the forward's k_sb (between pages), k_sh, k_sn. */
typedef struct ffpa_cl_kv_params {
    FFPA_CL_I64 bt_off, bt_stride, lens_off;
    FFPA_CL_I64 uniform_len;              /* >= 0: every sequence's cached length (no lengths array) */
    FFPA_CL_I64 src_off, src_sb, src_sh, src_sn, src_sd; /* append: k_new or v_new [B, Hkv, Nq, dim] */
    FFPA_CL_I64 dst_off, dst_sp, dst_sh, dst_sn, dst_sd; /* append: the pool it goes into */
    int paged, has_table, page_size, num_pages;
    int capacity, added, dim;       /* keys a sequence can hold; keys this call appends; append's columns */
    int page_shift; /* log2(page_size) where it is a power of two (shifts, not divisions, per copy), else -1 */
} ffpa_cl_kv_params;

/* ffpa_merge_partials (kernels/merge.cl): the output's offsets and strides
 * by value, the parts' in a small read-only buffer (16 parts would pass
 * OpenCL's 1 KiB minimum for a kernel's arguments). */
typedef struct ffpa_cl_merge_part {
    FFPA_CL_I64 o_off, o_sb, o_sh, o_sn, o_sd;
    FFPA_CL_I64 lse_off, lse_sb, lse_sh, lse_sn;
    int dt, pad;
} ffpa_cl_merge_part;

typedef struct ffpa_cl_merge_params {
    FFPA_CL_I64 o_off, o_sb, o_sh, o_sn, o_sd;
    FFPA_CL_I64 lse_off, lse_sb, lse_sh, lse_sn;
    FFPA_CL_I64 h, n, rows;
    int dv, parts, dt, has_lse;
} ffpa_cl_merge_params;

#endif
