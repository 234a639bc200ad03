/*
 * The opencl backend's own failure paths (its oracle and validation runs are
 * the shared suites with FFPA_TEST_BACKEND=opencl): a kernel compile failure
 * is a clear error that writes nothing, and the next call recovers; memory
 * that is not the backend's is refused by the copies and the launches; the
 * tiled forward's GPU-only vector loads match the loads CI's pocl uses.
 * Skips (77) where the opencl backend is unavailable. The process-wide
 * choices (no platform, a device that does not exist) are in
 * opencl_errors.sh, one process each.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffpa.h"

enum { N = 40, D = 72 };

static ffpa_context *ctx;

typedef struct problem {
    void *q, *o;
    ffpa_tensor tq, to;
    size_t bytes;
} problem;

static void make(problem *p)
{
    p->bytes = (size_t)N * D * sizeof(float);
    float *h = malloc(p->bytes);
    assert_non_null(h);
    for (int i = 0; i < N * D; ++i)
        h[i] = sinf(0.37f * (float)i);
    assert_int_equal(ffpa_malloc(ctx, &p->q, p->bytes), FFPA_OK);
    assert_int_equal(ffpa_malloc(ctx, &p->o, p->bytes), FFPA_OK);
    assert_int_equal(ffpa_memcpy(ctx, p->q, h, p->bytes, FFPA_COPY_HOST_TO_DEVICE), FFPA_OK);
    memset(h, 0xA5, p->bytes);
    assert_int_equal(ffpa_memcpy(ctx, p->o, h, p->bytes, FFPA_COPY_HOST_TO_DEVICE), FFPA_OK);
    free(h);
    p->tq = ffpa_tensor_bhnd(p->q, FFPA_F32, 1, 1, N, D);
    p->to = ffpa_tensor_bhnd(p->o, FFPA_F32, 1, 1, N, D);
}

static void release(problem *p)
{
    ffpa_free(ctx, p->q);
    ffpa_free(ctx, p->o);
}

static int o_is_untouched(problem *p)
{
    unsigned char *h = malloc(p->bytes);
    assert_non_null(h);
    assert_int_equal(ffpa_memcpy(ctx, h, p->o, p->bytes, FFPA_COPY_DEVICE_TO_HOST), FFPA_OK);
    int same = 1;
    for (size_t i = 0; i < p->bytes; ++i)
        same &= h[i] == 0xA5;
    free(h);
    return same;
}

static void test_compile_failure_is_clear_and_writes_nothing(void **state)
{
    (void)state;
    problem p;
    make(&p);
    /* A build option the kernel sources turn into #error (kernels/cl_score.h). */
    setenv("FFPA_OPENCL_BUILD_OPTIONS", "-DFFPA_CL_TEST_COMPILE_ERROR", 1);
    ffpa_status s = ffpa_forward(ctx, &p.tq, &p.tq, &p.tq, &p.to, NULL, NULL);
    unsetenv("FFPA_OPENCL_BUILD_OPTIONS");
    assert_int_equal(s, FFPA_ERR_DEVICE);
    const char *msg = ffpa_last_error(ctx);
    if (!strstr(msg, "building the kernels") || !strstr(msg, "build log") ||
        !strstr(msg, "FFPA_CL_TEST_COMPILE_ERROR"))
        fail_msg("the message does not give the build and its log: '%s'", msg);
    assert_true(o_is_untouched(&p));
    /* The context still works. */
    assert_int_equal(ffpa_forward(ctx, &p.tq, &p.tq, &p.tq, &p.to, NULL, NULL), FFPA_OK);
    assert_int_equal(ffpa_synchronize(ctx), FFPA_OK);
    assert_false(o_is_untouched(&p));
    release(&p);
}

static void test_memory_not_from_the_backend_is_refused(void **state)
{
    (void)state;
    problem p;
    make(&p);
    float host[4] = {0};
    /* A copy from a host pointer that claims to be device memory. */
    ffpa_status s = ffpa_memcpy(ctx, host, host + 2, sizeof(float), FFPA_COPY_DEVICE_TO_HOST);
    assert_int_not_equal(s, FFPA_OK);
    if (!strstr(ffpa_last_error(ctx), "not from ffpa_malloc"))
        fail_msg("unclear message: '%s'", ffpa_last_error(ctx));
    /* A launch over a host tensor, outputs untouched. */
    ffpa_tensor hq = p.tq;
    float *big = calloc((size_t)N * D, sizeof(float));
    assert_non_null(big);
    hq.data = big;
    s = ffpa_forward(ctx, &hq, &p.tq, &p.tq, &p.to, NULL, NULL);
    assert_int_equal(s, FFPA_ERR_INVALID_ARGUMENT);
    if (!strstr(ffpa_last_error(ctx), "not from ffpa_malloc"))
        fail_msg("unclear message: '%s'", ffpa_last_error(ctx));
    assert_true(o_is_untouched(&p));
    free(big);
    release(&p);
}

/* 16-bit values of magnitude 1/8..2 with either sign, spelt in the dtype's
 * bits (f16: exponent 12..15 of 5 bits; bf16: 124..127 of 8). */
static uint16_t sample16(ffpa_dtype dt, unsigned i)
{
    const unsigned h = i * 2654435761u;
    return dt == FFPA_F16 ? (uint16_t)((h >> 31) << 15 | (12 + (h >> 8) % 4) << 10 | (h >> 12) % 1024)
                          : (uint16_t)((h >> 31) << 15 | (124 + (h >> 8) % 4) << 7 | (h >> 12) % 128);
}

/* The tiled forward's vector loads (FFPA_CL_ALIGNED_QUADS, which the host
 * sets on GPUs only, where every row is 4-element aligned: cl_score.h) give
 * the same bits as the loads pocl's programs use, for the 16-bit dtypes'
 * loads (f32's is a plain float4 read; each program costs CI ~8 s of pocl). */
static void test_aligned_quads_give_the_same_bits(void **state)
{
    (void)state;
    enum { H = 2, NQ = 70, DD = 64 };
    const ffpa_dtype dts[] = {FFPA_F16, FFPA_BF16};
    setenv("FFPA_OPENCL_FORWARD", "tiled", 1);
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; ++k) {
        const ffpa_dtype dt = dts[k];
        const size_t bytes = (size_t)H * NQ * DD * 2;
        unsigned char *h = malloc(bytes), *got[2] = {malloc(bytes), malloc(bytes)};
        assert_true(h && got[0] && got[1]);
        void *qkv, *o;
        assert_int_equal(ffpa_malloc(ctx, &qkv, bytes), FFPA_OK);
        assert_int_equal(ffpa_malloc(ctx, &o, bytes), FFPA_OK);
        for (size_t i = 0; i < bytes / 2; ++i) {
            const uint16_t x = sample16(dt, (unsigned)i);
            memcpy(h + 2 * i, &x, 2);
        }
        assert_int_equal(ffpa_memcpy(ctx, qkv, h, bytes, FFPA_COPY_HOST_TO_DEVICE), FFPA_OK);
        ffpa_tensor t = ffpa_tensor_bhnd(qkv, dt, 1, H, NQ, DD), to = ffpa_tensor_bhnd(o, dt, 1, H, NQ, DD);
        for (int aligned = 0; aligned < 2; ++aligned) {
            memset(h, 0xA5, bytes); /* poison, so that an unwritten output cannot match */
            assert_int_equal(ffpa_memcpy(ctx, o, h, bytes, FFPA_COPY_HOST_TO_DEVICE), FFPA_OK);
            if (aligned)
                setenv("FFPA_OPENCL_BUILD_OPTIONS", "-DFFPA_CL_ALIGNED_QUADS", 1);
            const ffpa_status s = ffpa_forward(ctx, &t, &t, &t, &to, NULL, NULL);
            unsetenv("FFPA_OPENCL_BUILD_OPTIONS");
            assert_int_equal(s, FFPA_OK);
            assert_int_equal(ffpa_memcpy(ctx, got[aligned], o, bytes, FFPA_COPY_DEVICE_TO_HOST), FFPA_OK);
        }
        memset(h, 0xA5, bytes);
        if (memcmp(got[0], h, bytes) == 0 || memcmp(got[0], got[1], bytes) != 0)
            fail_msg("dtype %d: the aligned loads' output differs (or nothing was written)", (int)dt);
        ffpa_free(ctx, qkv);
        ffpa_free(ctx, o);
        free(h);
        free(got[0]);
        free(got[1]);
    }
    unsetenv("FFPA_OPENCL_FORWARD");
}

static void test_device_is_named(void **state)
{
    (void)state;
    const char *name = ffpa_device_name(ctx);
    if (!strchr(name, '(') || !(strstr(name, "CPU") || strstr(name, "GPU") || strstr(name, "other")))
        fail_msg("device name '%s' lacks its platform and type", name);
}

int main(void)
{
    if (ffpa_create(&ctx, "opencl") != FFPA_OK) {
        fprintf(stderr, "# skipped: %s\n", ffpa_last_error(NULL));
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compile_failure_is_clear_and_writes_nothing),
        cmocka_unit_test(test_memory_not_from_the_backend_is_refused),
        cmocka_unit_test(test_device_is_named),
        cmocka_unit_test(test_aligned_quads_give_the_same_bits),
    };
    /* The run that forces a kernel (opencl-tiled) leaves out the last test,
     * which forces its own: its 4 programs cost pocl ~30 s, once is enough
     * (cmocka's skip() reads as a failure to meson's TAP parser). */
    const size_t n = sizeof tests / sizeof tests[0] - (getenv("FFPA_OPENCL_FORWARD") ? 1 : 0);
    int failures = _cmocka_run_group_tests("test_opencl", tests, n, NULL, NULL);
    ffpa_destroy(ctx);
    return failures;
}
