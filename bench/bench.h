/* What the bench driver's two pieces share: ffpa-bench.c (forward and
 * backward rows, main; defines the helpers below) and kv_bench.c (the
 * --decode rows on a paged KV cache). */
#ifndef FFPA_BENCH_H
#define FFPA_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "ffpa.h"

/* Monotonic wall clock, seconds. */
double bench_now_s(void);
/* qsort comparison of doubles (for medians). */
int bench_cmp_double(const void *a, const void *b);
/* One fixed-seed stream of uniform values in [-1, 1). */
float bench_rand_unit(void);
/* Sets the stream's state, returns the previous one (to draw a side stream
 * without moving the main one). */
uint64_t bench_rng_reseed(uint64_t state);
/* n values of the stream, rounded to dt (f16 or bf16). */
void bench_fill_random(uint16_t *h, size_t n, ffpa_dtype dt);

/* Times every decode SHAPE (see kv_bench.c) on ctx beside the copy ceiling;
 * with do_check also compares O with the cpu backend. Returns 0 when every
 * shape ran (and passed). */
int kv_bench_run(ffpa_context *ctx, ffpa_dtype dt, int reps, int do_check, const char *csv_path, char **shapes,
                 int n_shapes);

#endif
