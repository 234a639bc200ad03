/* See bench_util.h. */
#include "bench_util.h"

#include <time.h>

#include "dtype.h"

double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
float bench_rand_unit(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

uint64_t bench_rng_reseed(uint64_t state)
{
    uint64_t old = rng_state;
    rng_state = state;
    return old;
}

void bench_fill_random(uint16_t *h, size_t n, ffpa_dtype dt)
{
    for (size_t i = 0; i < n; ++i) {
        float x = bench_rand_unit();
        h[i] = dt == FFPA_BF16 ? ffpa_f32_to_bf16(x) : ffpa_f32_to_f16(x);
    }
}
