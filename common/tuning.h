/*
 * Per-device tuning tables: tuned overrides of the planner's heuristics,
 * measured by tuning/ffpa-tune on one device and stored as JSON
 * (tuning/<device>.json, format described in docs/notes/tuning.md).
 *
 * The core loads a table per context (ffpa_tuning_load_for_device) and hands
 * it to the backend in ffpa_problem.tuning; the planner (ffpa_plan_make)
 * applies it through the hook in plan.h (ffpa_tuning_apply). Only tunable fields change (forward: stages, kv_splits, the
 * generic tile, the CUDA kernel family and Hopper cluster size; backward:
 * the dK/dV and dQ kernels and their ring depth, the CUDA kernel family and
 * the Hopper width), and only to values the
 * kernels accept for the problem and the device's shared memory holds, so a
 * tuned plan satisfies every invariant an untuned one does.
 */
#ifndef FFPA_COMMON_TUNING_H
#define FFPA_COMMON_TUNING_H

#include <stddef.h>

#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Parses the table at `path` for the device `device_name` (a backend's caps
 * device name; only the part before " (" is compared) of architecture
 * `arch` (its limits' arch; 0: none) and the backend named `backend`
 * ("cuda", "hip"; NULL: any). A device's table names the device; an
 * architecture's names "arch" instead (tables measured for parts without
 * one at hand, FFPA_CUDA_AS_ARCH) and must equal `arch`. Returns NULL and a
 * one-line message in warn (if warn_len > 0) when the file cannot be read,
 * is not JSON, is not an ffpa tuning table of a known version, belongs to
 * another device or arch, has no entries or has a malformed entry; NULL
 * and warn "" (nothing to report) when it names another backend. Never
 * crashes on any input.
 */
ffpa_tuning_table *ffpa_tuning_load(const char *path, const char *device_name, int arch, const char *backend,
                                    char *warn, size_t warn_len);

/*
 * The table the core uses for a context of `backend` on `device_name` (arch
 * `arch`), or NULL:
 *   FFPA_TUNING=0          no table;
 *   FFPA_TUNING_FILE=PATH  that file (missing or bad: NULL and a warning);
 *   otherwise the first of <lib_dir>/ffpa/tuning/<file>, <data_dir>/ffpa/tuning/<file>
 *   that exists, <file> being ffpa_tuning_file_name(device_name), then the same
 *   for ffpa_tuning_arch_file_name(backend, arch). None existing is not worth a
 *   warning (an untuned device); a bad one is. warn is "" when all is well.
 * lib_dir and data_dir may be NULL.
 */
ffpa_tuning_table *ffpa_tuning_load_for_device(const char *device_name, int arch, const char *backend,
                                               const char *lib_dir, const char *data_dir, char *warn,
                                               size_t warn_len);

/* The architecture table's file name: "cuda-sm_80.json" for backend cuda
 * and arch 80; 0 and "" for other backends (their kernels have no such
 * tables) or arch <= 0. */
int ffpa_tuning_arch_file_name(const char *backend, int arch, char *buf, size_t buf_len);

/* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" -> "NVIDIA_H100_80GB_HBM3.json"
 * (name up to " (", characters other than [A-Za-z0-9._-] -> '_'). */
void ffpa_tuning_file_name(const char *device_name, char *buf, size_t buf_len);

/* Number of entries (0 for NULL). */
int ffpa_tuning_entry_count(const ffpa_tuning_table *table);

void ffpa_tuning_free(ffpa_tuning_table *table);

#ifdef __cplusplus
}
#endif

#endif
