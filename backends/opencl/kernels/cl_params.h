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
    FFPA_CL_I64 lse_sb, lse_sh, lse_sn;
    FFPA_CL_I64 bias_sb, bias_sh, bias_sn, bias_sd;
    FFPA_CL_I64 alibi_sb, alibi_sh;
    FFPA_CL_U64 dropout_seed, dropout_offset;
    int batch, hq, group, nq, nkv, dqk, dv, q_blocks;
    int causal, has_lse, has_bias, bias_dtype, has_alibi, has_dropout, varlen;
    int window, window_left, window_right; /* bounds < 0: unbounded */
    FFPA_CL_U32 dropout_threshold;
    float scale, softcap, dropout_scale;
} ffpa_cl_fwd_params;

#endif
