/*
 * The thread model of api/ffpa.h, tested: many threads creating the first
 * contexts of the process at once (backend probing and plugin loading,
 * tuning tables, environment parsing), and many threads each running
 * forward and backward on its own context at once, every result
 * bit-identical to the same call made alone (deterministic mode). CI runs
 * this program under ThreadSanitizer too (tools/test.sh).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtype.h"
#include "harness.h"

enum { THREADS = 8, REPEATS = 4, B = 1, HQ = 4, HKV = 2, NQ = 29, NKV = 37, D = 40 };

static pthread_barrier_t start_line;

typedef struct create_result {
    ffpa_status status;
    char backend[16];
    char error[256];
} create_result;

static void *create_first(void *arg)
{
    create_result *r = arg;
    pthread_barrier_wait(&start_line);
    ffpa_context *ctx = NULL;
    r->status = ffpa_create(&ctx, th_backend());
    if (r->status == FFPA_OK) {
        snprintf(r->backend, sizeof r->backend, "%s", ffpa_backend_name(ctx));
        ffpa_destroy(ctx);
    } else {
        snprintf(r->error, sizeof r->error, "%s", ffpa_last_error(NULL));
    }
    ffpa_backend_info info;
    for (int i = 0; i < ffpa_backend_count(); ++i)
        (void)ffpa_backend_get_info(i, &info);
    return NULL;
}

/* Runs first in the process: no context exists before it. */
static void test_first_contexts_at_once(void **state)
{
    (void)state;
    pthread_t threads[THREADS];
    create_result results[THREADS];
    memset(results, 0, sizeof results);
    pthread_barrier_init(&start_line, NULL, THREADS);
    for (int i = 0; i < THREADS; ++i)
        assert_int_equal(pthread_create(&threads[i], NULL, create_first, &results[i]), 0);
    for (int i = 0; i < THREADS; ++i)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start_line);
    for (int i = 0; i < THREADS; ++i) {
        if (results[i].status != FFPA_OK)
            fail_msg("thread %d: ffpa_create(\"%s\"): %s", i, th_backend(), results[i].error);
        assert_string_equal(results[i].backend, results[0].backend);
    }
}

/* One thread's problem: its own inputs (seeded by the thread), outputs
 * from a call made alone, and buffers for the calls made together. */
typedef struct job {
    int seed;
    ffpa_context *ctx;
    void *host_in[4];    /* q, k, v, dout, in dtype_of(i) */
    void *dev[9];        /* q, k, v, dout, o, lse, dq, dk, dv */
    size_t bytes[9];
    unsigned char *alone[5]; /* o, lse, dq, dk, dv from the lone call */
    char failure[512];
} job;

static const int64_t SHAPES[9][4] = {
    {B, HQ, NQ, D}, {B, HKV, NKV, D}, {B, HKV, NKV, D}, {B, HQ, NQ, D}, {B, HQ, NQ, D},
    {B, HQ, NQ, 1}, {B, HQ, NQ, D},   {B, HKV, NKV, D}, {B, HKV, NKV, D}};

static ffpa_dtype dtype_of(int i)
{
    return i == 5 ? FFPA_F32 : th_fixture_dtype();
}

static ffpa_tensor tensor_of(job *j, int i)
{
    /* LSE is float32 always; the rest in the backend's fixture dtype (GPU backends refuse f32). */
    return ffpa_tensor_bhnd(j->dev[i], dtype_of(i), SHAPES[i][0], SHAPES[i][1], SHAPES[i][2], SHAPES[i][3]);
}

static ffpa_status run_job(job *j)
{
    ffpa_tensor t[9];
    for (int i = 0; i < 9; ++i)
        t[i] = tensor_of(j, i);
    ffpa_options opt = ffpa_options_default();
    opt.causal = j->seed & 1;
    opt.dropout_p = 0.125f;
    opt.dropout_seed = 1000u + (unsigned)j->seed;
    opt.deterministic = 1;
    ffpa_status st = ffpa_forward(j->ctx, &t[0], &t[1], &t[2], &t[4], &t[5], &opt);
    if (st == FFPA_OK)
        st = ffpa_backward(j->ctx, &t[3], &t[0], &t[1], &t[2], &t[4], &t[5], &t[6], &t[7], &t[8], &opt);
    if (st == FFPA_OK)
        st = ffpa_synchronize(j->ctx);
    return st;
}

static int job_setup(job *j, int seed)
{
    memset(j, 0, sizeof *j);
    j->seed = seed;
    if (ffpa_create(&j->ctx, th_backend()) != FFPA_OK)
        return -1;
    th_rng rng = th_rng_seeded(4242u + (unsigned)seed);
    for (int i = 0; i < 9; ++i) {
        size_t elems = (size_t)(SHAPES[i][0] * SHAPES[i][1] * SHAPES[i][2] * SHAPES[i][3]);
        j->bytes[i] = ffpa_dtype_size(dtype_of(i)) * elems;
        if (ffpa_malloc(j->ctx, &j->dev[i], j->bytes[i]) != FFPA_OK)
            return -1;
        if (i < 4) {
            if (!(j->host_in[i] = malloc(j->bytes[i])))
                return -1;
            for (size_t e = 0; e < elems; ++e)
                ffpa_store_f32(j->host_in[i], dtype_of(i), (int64_t)e, (float)th_rng_uniform(&rng, -2.0, 2.0));
            if (ffpa_memcpy(j->ctx, j->dev[i], j->host_in[i], j->bytes[i], FFPA_COPY_HOST_TO_DEVICE) != FFPA_OK)
                return -1;
        }
    }
    return 0;
}

/* Output i (4..8) in host memory. */
static unsigned char *download(job *j, int i)
{
    unsigned char *h = malloc(j->bytes[i]);
    if (h && ffpa_memcpy(j->ctx, h, j->dev[i], j->bytes[i], FFPA_COPY_DEVICE_TO_HOST) != FFPA_OK) {
        free(h);
        return NULL;
    }
    return h;
}

static void *run_repeatedly(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(&start_line);
    for (int rep = 0; rep < REPEATS && !j->failure[0]; ++rep) {
        ffpa_status st = run_job(j);
        if (st != FFPA_OK) {
            snprintf(j->failure, sizeof j->failure, "%s", ffpa_last_error(j->ctx));
            break;
        }
        static const char *const names[5] = {"o", "lse", "dq", "dk", "dv"};
        for (int i = 4; i < 9; ++i) {
            unsigned char *now = download(j, i);
            if (!now || memcmp(now, j->alone[i - 4], j->bytes[i]) != 0)
                snprintf(j->failure, sizeof j->failure, "%s differs from the call made alone (repeat %d)",
                         names[i - 4], rep);
            free(now);
        }
    }
    return NULL;
}

static void test_contexts_in_parallel(void **state)
{
    (void)state;
    job jobs[THREADS];
    for (int t = 0; t < THREADS; ++t) {
        if (job_setup(&jobs[t], t) != 0)
            fail_msg("thread %d setup: %s", t, ffpa_last_error(jobs[t].ctx));
        if (run_job(&jobs[t]) != FFPA_OK) /* alone */
            fail_msg("thread %d alone: %s", t, ffpa_last_error(jobs[t].ctx));
        for (int i = 4; i < 9; ++i)
            assert_non_null(jobs[t].alone[i - 4] = download(&jobs[t], i));
    }
    pthread_t threads[THREADS];
    pthread_barrier_init(&start_line, NULL, THREADS);
    for (int t = 0; t < THREADS; ++t)
        assert_int_equal(pthread_create(&threads[t], NULL, run_repeatedly, &jobs[t]), 0);
    for (int t = 0; t < THREADS; ++t)
        pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&start_line);
    int failures = 0;
    for (int t = 0; t < THREADS; ++t) {
        if (jobs[t].failure[0]) {
            print_message("# thread %d: %s\n", t, jobs[t].failure);
            ++failures;
        }
        for (int i = 0; i < 9; ++i)
            ffpa_free(jobs[t].ctx, jobs[t].dev[i]);
        for (int i = 0; i < 4; ++i)
            free(jobs[t].host_in[i]);
        for (int i = 0; i < 5; ++i)
            free(jobs[t].alone[i]);
        ffpa_destroy(jobs[t].ctx);
    }
    assert_int_equal(failures, 0);
}

int main(void)
{
    /* No th_backend_unavailable_exit(): it would create the first context.
     * A GPU backend that cannot start here skips, as in the other programs
     * (asking probes the backends, so on the cpu, the default, it is not
     * asked: the first test then races the probing too). */
    for (int i = 0; strcmp(th_backend(), "cpu") != 0 && i < ffpa_backend_count(); ++i) {
        ffpa_backend_info info;
        if (ffpa_backend_get_info(i, &info) == FFPA_OK && strcmp(info.name, th_backend()) == 0 &&
            !info.available && strcmp(info.name, "cpu") != 0) {
            printf("1..0 # SKIP backend '%s' is not available here: %s\n", info.name, info.detail);
            return 0;
        }
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_contexts_at_once),
        cmocka_unit_test(test_contexts_in_parallel),
    };
    return th_exit_code(cmocka_run_group_tests_name("threads", tests, NULL, NULL),
                        (int)(sizeof tests / sizeof tests[0]));
}
