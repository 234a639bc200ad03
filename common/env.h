/*
 * Environment variables libffpa reads, parsed in one place:
 *   FFPA_BACKEND        cpu | cuda | hip | auto (default auto)
 *   FFPA_BACKEND_PATH   colon-separated folders searched for backend plugins first
 *   FFPA_CUDA_KERNEL    CUDA kernel path override (generic | sm90 | auto), read by the CUDA plugin
 *   FFPA_CUDA_AS_ARCH   80 | 86 | 89: plan and tune as on that part (its shared memory, generic kernels)
 *   FFPA_SM90_PLAIN     0: the sm90 forward keeps its table's kernels over the plain ones (A/B knob)
 *   FFPA_GENERIC_PLAIN  0: the generic forward keeps every call on its variant path (A/B knob)
 *   FFPA_GENERIC_Q_RESIDENT 0: the generic Split-D forward streams Q with every K chunk (A/B knob)
 *   FFPA_BWD_SMEM_LIMIT cap on the backward's shared memory per block (bytes), read by the GPU plugins
 *   FFPA_TUNING         0 disables tuning tables; FFPA_TUNING_FILE names one
 *   FFPA_OPENCL_DEVICE  the OpenCL device (P:D, N or a name substring), read by the OpenCL plugin
 *   FFPA_OPENCL_FORWARD tiled | portable: the OpenCL forward kernel (default: tiled on GPUs)
 *   FFPA_OPENCL_LOCAL_MEM, FFPA_OPENCL_CACHE: local-memory cap for its tile planner, program cache folder
 */
#ifndef FFPA_COMMON_ENV_H
#define FFPA_COMMON_ENV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The variable's value, or NULL when unset or empty. */
const char *ffpa_env_string(const char *name);

/* Boolean: 1/0, true/false, yes/no, on/off (case-insensitive). Unset: fallback.
 * Anything else: fallback, and *bad (if not NULL) is set to 1. */
int ffpa_env_bool(const char *name, int fallback, int *bad);

/* Integer in [lo, hi]; unset, malformed or out of range: fallback (*bad = 1 for the last two). */
long ffpa_env_long(const char *name, long fallback, long lo, long hi, int *bad);

/* Splits a colon-separated list: copies entry `index` into buf (NUL-terminated)
 * and returns 1, or returns 0 past the last entry. Empty entries are skipped. */
int ffpa_path_list_entry(const char *list, int index, char *buf, size_t buf_len);

#ifdef __cplusplus
}
#endif

#endif
