/* ffpa-bench --decode (kv_bench.c): the KV-cache rows of the one bench driver. */
#ifndef FFPA_BENCH_KV_BENCH_H
#define FFPA_BENCH_KV_BENCH_H

#include "ffpa.h"

/* Times every decode SHAPE (see kv_bench.c) on ctx beside the copy ceiling;
 * with do_check also compares O with the cpu backend. Returns 0 when every
 * shape ran (and passed). */
int kv_bench_run(ffpa_context *ctx, ffpa_dtype dt, int reps, int do_check, const char *csv_path, char **shapes,
                 int n_shapes);

#endif
