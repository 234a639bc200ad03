/*
 * The opencl backend's own failure paths (its oracle and validation runs are
 * the shared suites with FFPA_TEST_BACKEND=opencl): a kernel compile failure
 * is a clear error that writes nothing, and the next call recovers; memory
 * that is not the backend's is refused by the copies and the launches.
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
    };
    int failures = cmocka_run_group_tests(tests, NULL, NULL);
    ffpa_destroy(ctx);
    return failures;
}
