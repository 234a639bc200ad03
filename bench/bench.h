/* What the bench driver's two pieces share: ffpa-bench.c (forward and
 * backward rows, main) and kv_bench.c (the --decode rows on a paged KV
 * cache): small helpers, and the entry of the decode rows. */
#ifndef FFPA_BENCH_H
#define FFPA_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dtype.h"
#include "ffpa.h"

/* Monotonic wall clock, seconds. */
static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* qsort comparison of doubles (for medians). */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One fixed-seed xorshift stream of uniform values in [-1, 1) per source
 * file (each file's inputs are reproducible on their own). */
static uint64_t bench_rng_state = 0x9E3779B97F4A7C15ull;

static inline float bench_rand_unit(void)
{
    bench_rng_state ^= bench_rng_state << 13;
    bench_rng_state ^= bench_rng_state >> 7;
    bench_rng_state ^= bench_rng_state << 17;
    return (float)((bench_rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* Sets the stream's state, returns the previous one (to draw a side stream
 * without moving the main one). */
static inline uint64_t bench_rng_reseed(uint64_t state)
{
    uint64_t old = bench_rng_state;
    bench_rng_state = state;
    return old;
}

/* n values of the stream, rounded to dt (f16 or bf16). */
static inline void bench_fill_random_scaled(uint16_t *h, size_t n, ffpa_dtype dt, float scale)
{
    for (size_t i = 0; i < n; ++i) {
        float x = scale * bench_rand_unit();
        h[i] = dt == FFPA_BF16 ? ffpa_f32_to_bf16(x) : ffpa_f32_to_f16(x);
    }
}

static inline void bench_fill_random(uint16_t *h, size_t n, ffpa_dtype dt)
{
    bench_fill_random_scaled(h, n, dt, 1.0f);
}

/* Times every decode SHAPE (see kv_bench.c) on ctx beside the copy ceiling;
 * with do_check also compares O with the cpu backend. Returns 0 when every
 * shape ran (and passed). */
int kv_bench_run(ffpa_context *ctx, ffpa_dtype dt, int reps, int do_check, const char *csv_path, char **shapes,
                 int n_shapes);

#endif
