/* What the bench driver's pieces (ffpa-bench.c, kv_bench.c) share: the
 * clock, the median's comparison, random 16-bit inputs. */
#ifndef FFPA_BENCH_UTIL_H
#define FFPA_BENCH_UTIL_H

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

#endif
