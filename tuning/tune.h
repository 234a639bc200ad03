/*
 * Pieces of ffpa-tune (tuning/ffpa-tune.c): the candidate configurations
 * and shapes it sweeps, the checked and timed runs (tune_runs.c) and the
 * JSON table it writes (tune_table.c).
 */
#ifndef FFPA_TUNE_H
#define FFPA_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ffpa.h"
#include "plan.h"

typedef struct tune_shape {
    int64_t b, hq, hkv, nq, nkv, d;
    int causal;
} tune_shape;

/* One candidate: what a one-entry table's "config" sets (0: not set, the
 * heuristic's; for bwd entries dkdv/dq 0 are written as "auto"). */
typedef struct tune_cfg {
    int stages, kv_splits;
    ffpa_fwd_family family;
    int cluster;
    int boxes;                /* Hopper backward width: boxes x cluster */
    int br, bc, chunk, warps; /* generic forward tile */
    ffpa_bwd_dkdv_kernel dkdv;
    ffpa_bwd_dq_kernel dq;
} tune_cfg;

/* ------------------------------------------------------------ runs (tune_runs.c) */

/* One output a run writes and the check compares. */
typedef struct tune_out {
    const char *name;
    void *dev;
    size_t bytes;
    int is_f32;          /* LSE; else bf16 */
    void *ref, *host;    /* the heuristic plan's result, the latest run's */
} tune_out;

/* Device buffers of one shape and pass, shared by every context of the process. */
typedef struct tune_bufs {
    int backward;
    void *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
    ffpa_tensor tq, tk, tv, to, tl, tdo, tdq, tdk, tdv;
    ffpa_options opt;
    tune_out out[3];
    int n_out;
} tune_bufs;

/* Random bf16 inputs on ctx's device; for the backward also O and LSE of
 * the forward (run on ctx) and a random dO. 0 on failure (bufs freed). */
int tune_setup_bufs(ffpa_context *ctx, const tune_shape *s, int backward, tune_bufs *r);
void tune_free_bufs(ffpa_context *ctx, tune_bufs *r);

/* One checked call: outputs poisoned with NaN, the pass, outputs copied to
 * out[].host. 0 and the library's message in why on failure. */
int tune_run_once(ffpa_context *ctx, tune_bufs *r, char *why, size_t why_len);

/* Keeps the latest run as the reference; 0 (why says where) if it holds a NaN. */
int tune_keep_reference(tune_bufs *r, char *why, size_t why_len);

/* The latest run against the reference: elementwise within bf16 rounding
 * of a differently ordered sum; NaN never passes. */
int tune_matches_reference(const tune_bufs *r, char *why, size_t why_len);

/* Monotonic seconds. */
double tune_now_s(void);

/* Median seconds per call of `reps` repetitions (each long enough to time);
 * NAN on failure. */
double tune_time_calls(ffpa_context *ctx, tune_bufs *r, int reps);

/* ------------------------------------------------------------ tables (tune_table.c) */

/* Path names of the table format. */
const char *tune_path_name(ffpa_kernel_path p);

/* {"pass", "dtype", "path", "causal", "gqa", "d", "nq", "nkv", "config"} of s. */
cJSON *tune_entry_json(const tune_shape *s, int backward, ffpa_kernel_path path, const tune_cfg *c);

/* The members of c a table's config holds, added to obj. */
void tune_cfg_to_json(cJSON *obj, const tune_cfg *c, int backward);

/* A version 2 table head for device (key) on backend, without entries. */
cJSON *tune_table_json(const char *device, const char *detail, const char *backend);

/* One top-level member per line, one entry per line: diff-friendly. */
int tune_write_json(const char *path, const cJSON *root);

#endif
