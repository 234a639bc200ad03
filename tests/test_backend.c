/*
 * Backend selection, the backend list, status strings, option defaults,
 * memory helpers and caller-provided workspaces.
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

#include "attn_case.h"
#include "harness.h"

/* ------------------------------------------------------------ selection */

static void test_env_selects_cpu(void **state)
{
    (void)state;
    const char *saved = getenv("FFPA_BACKEND");
    char *copy = saved ? strdup(saved) : NULL;
    setenv("FFPA_BACKEND", "cpu", 1);
    ffpa_context *ctx = NULL;
    ffpa_status status = ffpa_create(&ctx, NULL);
    if (status != FFPA_OK)
        fail_msg("FFPA_BACKEND=cpu, ffpa_create(NULL) = %s: %s", ffpa_status_string(status),
                 ffpa_last_error(NULL));
    assert_string_equal(ffpa_backend_name(ctx), "cpu");
    const char *device = ffpa_device_name(ctx);
    assert_non_null(device);
    assert_true(strlen(device) > 0);
    assert_string_equal(ffpa_last_error(ctx), ""); /* no failed call yet */
    ffpa_destroy(ctx);

    /* A named backend that does not exist never falls back to another. */
    setenv("FFPA_BACKEND", "bogus", 1);
    ctx = NULL;
    assert_int_equal(ffpa_create(&ctx, NULL), FFPA_ERR_NO_BACKEND);
    assert_null(ctx);
    assert_non_null(strstr(ffpa_last_error(NULL), "cpu"));

    if (copy) {
        setenv("FFPA_BACKEND", copy, 1);
        free(copy);
    } else {
        unsetenv("FFPA_BACKEND");
    }
}

static void test_explicit_cpu_and_auto(void **state)
{
    (void)state;
    ffpa_context *ctx = NULL;
    assert_int_equal(ffpa_create(&ctx, "cpu"), FFPA_OK);
    assert_string_equal(ffpa_backend_name(ctx), "cpu");
    ffpa_destroy(ctx);
    ctx = NULL;
    assert_int_equal(ffpa_create(&ctx, "auto"), FFPA_OK);
    const char *name = ffpa_backend_name(ctx);
    /* auto: the first available backend on a GPU, else cpu (an OpenCL CPU
     * device, pocl's, which names itself "(<platform>, CPU)", is not taken). */
    int gpu_available = 0;
    for (int i = 0; i < ffpa_backend_count(); ++i) {
        ffpa_backend_info info;
        assert_int_equal(ffpa_backend_get_info(i, &info), FFPA_OK);
        const int cpu_device = strcmp(info.name, "opencl") == 0 && strstr(info.detail, ", CPU)") != NULL;
        if (strcmp(info.name, "cpu") != 0 && info.available && !cpu_device)
            gpu_available = 1;
    }
    if (!gpu_available)
        assert_string_equal(name, "cpu");
    else
        assert_string_not_equal(name, "cpu");
    ffpa_destroy(ctx);
    ffpa_destroy(NULL); /* harmless */
}

static void test_bogus_backend(void **state)
{
    (void)state;
    ffpa_context *ctx = NULL;
    assert_int_equal(ffpa_create(&ctx, "bogus"), FFPA_ERR_NO_BACKEND);
    assert_null(ctx);
    const char *message = ffpa_last_error(NULL);
    if (!strstr(message, "bogus") || !strstr(message, "cpu"))
        fail_msg("message '%s' should name 'bogus' and list the backends (cpu)", message);
}

static int find_backend(const char *name, ffpa_backend_info *out)
{
    for (int i = 0; i < ffpa_backend_count(); ++i) {
        ffpa_backend_info info;
        if (ffpa_backend_get_info(i, &info) == FFPA_OK && strcmp(info.name, name) == 0) {
            *out = info;
            return 1;
        }
    }
    return 0;
}

/* A GPU backend that is available starts; otherwise asking for it fails with
 * FFPA_ERR_NO_BACKEND and a message that names it. */
static void check_gpu_backend(const char *name)
{
    ffpa_backend_info info;
    int listed = find_backend(name, &info);
    ffpa_context *ctx = NULL;
    ffpa_status status = ffpa_create(&ctx, name);
    if (listed && info.available) {
        if (status != FFPA_OK)
            fail_msg("%s is listed as available (%s) but ffpa_create failed: %s", name,
                     info.detail, ffpa_last_error(NULL));
        assert_string_equal(ffpa_backend_name(ctx), name);
        ffpa_destroy(ctx);
        return;
    }
    if (status != FFPA_ERR_NO_BACKEND)
        fail_msg("ffpa_create(\"%s\") without a usable device returned %s", name,
                 ffpa_status_string(status));
    assert_null(ctx);
    const char *message = ffpa_last_error(NULL);
    if (!strstr(message, name))
        fail_msg("the message for an unavailable %s does not name it: '%s'", name, message);
    if (listed)
        print_message("# %s unavailable here: %s\n", name, info.detail);
}

static void test_cuda_backend(void **state)
{
    (void)state;
    check_gpu_backend("cuda");
}

static void test_hip_backend(void **state)
{
    (void)state;
    check_gpu_backend("hip");
}

static void test_backend_list(void **state)
{
    (void)state;
    int count = ffpa_backend_count();
    assert_true(count >= 1);
    int cpu_seen = 0;
    for (int i = 0; i < count; ++i) {
        ffpa_backend_info info;
        memset(&info, 0xCD, sizeof info);
        assert_int_equal(ffpa_backend_get_info(i, &info), FFPA_OK);
        assert_non_null(info.name);
        assert_true(strlen(info.name) > 0);
        assert_non_null(memchr(info.detail, '\0', sizeof info.detail));
        assert_true(info.available == 0 || info.available == 1);
        if (!info.available)
            assert_true(strlen(info.detail) > 0); /* says why not */
        if (strcmp(info.name, "cpu") == 0) {
            cpu_seen = 1;
            assert_int_equal(info.available, 1);
        }
        print_message("# backend %d: %s available=%d (%s)\n", i, info.name, info.available,
                      info.detail);
    }
    assert_true(cpu_seen);
    ffpa_backend_info info;
    assert_int_equal(ffpa_backend_get_info(-1, &info), FFPA_ERR_INVALID_ARGUMENT);
    assert_int_equal(ffpa_backend_get_info(count, &info), FFPA_ERR_INVALID_ARGUMENT);
    assert_int_equal(ffpa_backend_get_info(0, NULL), FFPA_ERR_INVALID_ARGUMENT);
}

static void test_create_null_out(void **state)
{
    (void)state;
    assert_int_equal(ffpa_create(NULL, "cpu"), FFPA_ERR_INVALID_ARGUMENT);
}

/* ------------------------------------------------------------ strings, defaults */

static void test_status_strings(void **state)
{
    (void)state;
    const ffpa_status all[] = {FFPA_OK,
                               FFPA_ERR_INVALID_ARGUMENT,
                               FFPA_ERR_UNSUPPORTED,
                               FFPA_ERR_NO_BACKEND,
                               FFPA_ERR_OUT_OF_MEMORY,
                               FFPA_ERR_DEVICE,
                               FFPA_ERR_INTERNAL};
    for (int i = 0; i < 7; ++i) {
        const char *s = ffpa_status_string(all[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (int j = 0; j < i; ++j)
            assert_string_not_equal(s, ffpa_status_string(all[j]));
    }
    assert_non_null(ffpa_status_string((ffpa_status)99));
    assert_non_null(ffpa_status_string((ffpa_status)-1));
}

static void test_dtype_helpers(void **state)
{
    (void)state;
    assert_int_equal(ffpa_dtype_size(FFPA_F16), 2);
    assert_int_equal(ffpa_dtype_size(FFPA_BF16), 2);
    assert_int_equal(ffpa_dtype_size(FFPA_F32), 4);
    assert_int_equal(ffpa_dtype_size((ffpa_dtype)9), 0);
    assert_string_not_equal(ffpa_dtype_name(FFPA_F16), ffpa_dtype_name(FFPA_BF16));
    assert_non_null(ffpa_dtype_name((ffpa_dtype)9));

    int x;
    ffpa_tensor t = ffpa_tensor_bhnd(&x, FFPA_BF16, 2, 3, 5, 7);
    const int64_t bhnd[4] = {3 * 5 * 7, 5 * 7, 7, 1};
    const int64_t bnhd[4] = {5 * 3 * 7, 7, 3 * 7, 1};
    assert_ptr_equal(t.data, &x);
    assert_int_equal(t.dtype, FFPA_BF16);
    for (int i = 0; i < 4; ++i)
        assert_int_equal(t.stride[i], bhnd[i]);
    assert_int_equal(t.shape[0], 2);
    assert_int_equal(t.shape[3], 7);
    t = ffpa_tensor_bnhd(&x, FFPA_F16, 2, 3, 5, 7);
    for (int i = 0; i < 4; ++i)
        assert_int_equal(t.stride[i], bnhd[i]);
    assert_int_equal(t.shape[1], 3);
    assert_int_equal(t.shape[2], 5);
}

static void test_options_default(void **state)
{
    (void)state;
    ffpa_options opt = ffpa_options_default();
    assert_true(opt.scale == 0.0f);
    assert_int_equal(opt.causal, 0);
    assert_null(opt.bias);
    assert_true(opt.dropout_p == 0.0f);
    assert_int_equal(opt.dropout_offset, 0);
    assert_null(opt.cu_seqlens_q);
    assert_null(opt.cu_seqlens_k);
    assert_int_equal(opt.varlen_batch, 0);
    assert_int_equal(opt.grad_accum, FFPA_GRAD_ACCUM_F32);
    assert_int_equal(opt.deterministic, 0);
    assert_null(opt.dbias);
}

/* ------------------------------------------------------------ memory, streams */

static void test_memory_round_trip(void **state)
{
    (void)state;
    ffpa_context *ctx = th_ctx();
    enum { BYTES = 4099 };
    unsigned char host[BYTES], back[BYTES];
    for (int i = 0; i < BYTES; ++i)
        host[i] = (unsigned char)(i * 37 + 11);
    void *a = NULL, *b = NULL;
    th_expect_ok(ctx, ffpa_malloc(ctx, &a, BYTES), "ffpa_malloc");
    th_expect_ok(ctx, ffpa_malloc(ctx, &b, BYTES), "ffpa_malloc");
    assert_non_null(a);
    th_expect_ok(ctx, ffpa_memcpy(ctx, a, host, BYTES, FFPA_COPY_HOST_TO_DEVICE), "h2d");
    th_expect_ok(ctx, ffpa_memcpy(ctx, b, a, BYTES, FFPA_COPY_DEVICE_TO_DEVICE), "d2d");
    memset(back, 0, sizeof back);
    th_expect_ok(ctx, ffpa_memcpy(ctx, back, b, BYTES, FFPA_COPY_DEVICE_TO_HOST), "d2h");
    assert_memory_equal(host, back, BYTES);
    th_expect_ok(ctx, ffpa_free(ctx, a), "ffpa_free");
    th_expect_ok(ctx, ffpa_free(ctx, b), "ffpa_free");
    th_expect_ok(ctx, ffpa_set_stream(ctx, NULL), "ffpa_set_stream(NULL)");
    th_expect_ok(ctx, ffpa_synchronize(ctx), "ffpa_synchronize");
    assert_int_not_equal(ffpa_malloc(ctx, NULL, 16), FFPA_OK);
}

static void test_contexts_independent(void **state)
{
    (void)state;
    ffpa_context *a = NULL, *b = NULL;
    assert_int_equal(ffpa_create(&a, "cpu"), FFPA_OK);
    assert_int_equal(ffpa_create(&b, "cpu"), FFPA_OK);
    ffpa_tensor q = ffpa_tensor_bhnd(NULL, FFPA_F16, 1, 1, 1, 8);
    assert_int_equal(ffpa_forward(a, &q, &q, &q, &q, NULL, NULL), FFPA_ERR_INVALID_ARGUMENT);
    assert_true(strlen(ffpa_last_error(a)) > 0);
    assert_string_equal(ffpa_last_error(b), "");
    ffpa_destroy(a);
    ffpa_destroy(b);
}

/* ------------------------------------------------------------ workspace */

/* Random q, k, v (fp16, BHND) and o, lse views of a small GQA problem. */
static void make_small_problem(th_tensor *q, th_tensor *k, th_tensor *v, th_tensor *o, th_tensor *lse,
                               ffpa_dtype dt, int64_t hq, int64_t hkv, int64_t n, int64_t d, uint64_t seed)
{
    th_tensor_make(q, dt, TH_BHND, 1, hq, n, d);
    th_tensor_make(k, dt, TH_BHND, 1, hkv, n, d);
    th_tensor_make(v, dt, TH_BHND, 1, hkv, n, d);
    th_tensor_make(o, dt, TH_BHND, 1, hq, n, d);
    th_tensor_lse(lse, TH_BHND, 1, hq, n);
    th_rng rng = th_rng_seeded(seed);
    th_tensor_random(q, &rng, -1, 1, 0);
    th_tensor_random(k, &rng, -1, 1, 0);
    th_tensor_random(v, &rng, -1, 1, 0);
}

static void test_caller_workspace(void **state)
{
    (void)state;
    ffpa_context *ctx = th_ctx();
    attn_case c = attn_case_default(FFPA_F16, 65, 512);
    c.causal = 1;
    c.hq = 4;
    c.hkv = 2;

    th_tensor q, k, v, o, lse;
    make_small_problem(&q, &k, &v, &o, &lse, c.dtype, c.hq, c.hkv, c.nq, c.dqk, 5);
    ffpa_options opt = ffpa_options_default();
    opt.causal = 1;

    size_t fwd_bytes = 1, bwd_bytes = 1;
    th_expect_ok(ctx, ffpa_forward_workspace_size(ctx, &q.dev, &k.dev, &v.dev, &opt, &fwd_bytes),
                 "ffpa_forward_workspace_size");
    th_expect_ok(ctx, ffpa_backward_workspace_size(ctx, &q.dev, &k.dev, &v.dev, &opt, &bwd_bytes),
                 "ffpa_backward_workspace_size");
    print_message("# workspace on %s: forward %zu bytes, backward %zu bytes\n", th_backend(),
                  fwd_bytes, bwd_bytes);

    if (fwd_bytes > 0) {
        /* Too small: rejected, outputs untouched. */
        void *small = NULL;
        th_expect_ok(ctx, ffpa_malloc(ctx, &small, fwd_bytes - 1 > 0 ? fwd_bytes - 1 : 1),
                     "ffpa_malloc");
        th_expect_ok(ctx, ffpa_set_workspace(ctx, small, fwd_bytes - 1), "ffpa_set_workspace");
        th_tensor_fill_bytes(&o, 0xA5);
        ffpa_status status = ffpa_forward(ctx, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &opt);
        assert_int_equal(status, FFPA_ERR_INVALID_ARGUMENT);
        assert_true(strlen(ffpa_last_error(ctx)) > 0);
        unsigned char *pattern = malloc(o.bytes);
        assert_non_null(pattern);
        memset(pattern, 0xA5, o.bytes);
        th_expect_unchanged("o (workspace too small)", &o, pattern);
        free(pattern);
        th_expect_ok(ctx, ffpa_set_workspace(ctx, NULL, 0), "ffpa_set_workspace(NULL, 0)");
        th_expect_ok(ctx, ffpa_free(ctx, small), "ffpa_free");
    } else {
        print_message("# forward needs no workspace: the too-small case cannot be exercised\n");
    }
    th_tensor *all[] = {&q, &k, &v, &o, &lse};
    for (int i = 0; i < 5; ++i)
        th_tensor_free(all[i]);

    /* Enough caller memory: forward and backward on it match the oracle. */
    size_t bytes = fwd_bytes > bwd_bytes ? fwd_bytes : bwd_bytes;
    void *ws = NULL;
    th_expect_ok(ctx, ffpa_malloc(ctx, &ws, bytes ? bytes : 1), "ffpa_malloc");
    th_expect_ok(ctx, ffpa_set_workspace(ctx, ws, bytes), "ffpa_set_workspace");
    attn_run_forward(&c);
    attn_run_backward(&c);
    th_expect_ok(ctx, ffpa_set_workspace(ctx, NULL, 0), "ffpa_set_workspace(NULL, 0)");
    th_expect_ok(ctx, ffpa_free(ctx, ws), "ffpa_free");
    /* Back on context-owned memory. */
    attn_run_forward(&c);
}

/* A refused allocation leaves the context working: the next forward and
 * backward match the oracle. (On cuda a refused cudaMalloc once left its
 * error as the thread's last error, and the next launch check reported it
 * as that launch's failure.) */
static void test_failed_alloc_then_work(void **state)
{
    (void)state;
    ffpa_context *ctx = th_ctx();
    void *p = &p;
    assert_int_equal(ffpa_malloc(ctx, &p, (size_t)1 << 62), FFPA_ERR_OUT_OF_MEMORY);
    assert_null(p);
    print_message("# 2^62 bytes on %s: %s\n", th_backend(), ffpa_last_error(ctx));
    assert_true(strlen(ffpa_last_error(ctx)) > 0);
    attn_case c = attn_case_default(th_fixture_dtype(), 33, 96);
    c.hq = 4;
    c.hkv = 2;
    attn_run_forward(&c);
    attn_run_backward(&c);
}

/* ffpa_last_kernel: "" before any pass, the kernel after a forward; on cuda,
 * FFPA_CUDA_KERNEL picks the family and a bogus value is refused, writing nothing. */
static void test_last_kernel(void **state)
{
    (void)state;
    assert_string_equal(ffpa_last_kernel(NULL), "");
    ffpa_context *fresh = NULL;
    assert_int_equal(ffpa_create(&fresh, th_backend()), FFPA_OK);
    assert_string_equal(ffpa_last_kernel(fresh), "");
    ffpa_destroy(fresh);

    ffpa_context *ctx = th_ctx();
    th_tensor q, k, v, o, lse;
    make_small_problem(&q, &k, &v, &o, &lse, FFPA_F16, 4, 2, 70, 128, 11);
    ffpa_options opt = ffpa_options_default();
    opt.causal = 1;

    th_expect_ok(ctx, ffpa_forward(ctx, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &opt), "ffpa_forward");
    const char *kernel = ffpa_last_kernel(ctx);
    print_message("# last kernel on %s: %s\n", th_backend(), kernel);
    if (strcmp(th_backend(), "cuda") == 0) {
        if (strncmp(kernel, "sm90", 4) != 0 && strncmp(kernel, "generic", 7) != 0)
            fail_msg("unexpected cuda kernel name '%s'", kernel);
        setenv("FFPA_CUDA_KERNEL", "generic", 1);
        th_expect_ok(ctx, ffpa_forward(ctx, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &opt), "ffpa_forward");
        assert_int_equal(strncmp(ffpa_last_kernel(ctx), "generic", 7), 0);
        setenv("FFPA_CUDA_KERNEL", "bogus", 1);
        th_tensor_fill_bytes(&o, 0xA5);
        ffpa_status status = ffpa_forward(ctx, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &opt);
        unsetenv("FFPA_CUDA_KERNEL");
        assert_int_equal(status, FFPA_ERR_INVALID_ARGUMENT);
        if (!strstr(ffpa_last_error(ctx), "FFPA_CUDA_KERNEL"))
            fail_msg("the message does not name FFPA_CUDA_KERNEL: '%s'", ffpa_last_error(ctx));
        unsigned char *pattern = malloc(o.bytes);
        assert_non_null(pattern);
        memset(pattern, 0xA5, o.bytes);
        th_expect_unchanged("o (bogus FFPA_CUDA_KERNEL)", &o, pattern);
        free(pattern);
    } else {
        assert_string_equal(kernel, th_backend()); /* cpu, hip: one kernel family */
    }
    th_tensor *all[] = {&q, &k, &v, &o, &lse};
    for (int i = 0; i < 5; ++i)
        th_tensor_free(all[i]);
}

/* dbias and FFPA_GRAD_ACCUM_OUTPUT run on the Hopper kernel, deterministic
 * mode with them too, except a deterministic dbias that sums several
 * contributions per element (bias broadcast over heads here): the generic
 * kernels order those. (Their values: the oracle suites and bench/gpu.sh.) */
static void check_hopper_backward_options(ffpa_context *ctx, th_tensor *dout, th_tensor *q, th_tensor *k,
                                          th_tensor *v, th_tensor *o, th_tensor *lse, th_tensor *dq, th_tensor *dk,
                                          th_tensor *dv, th_rng *rng)
{
    th_tensor bias, dbias, bias_h, dbias_h; /* [1, Hq, N, N] and [1, 1, N, N] */
    const int64_t hq = q->host.shape[1], n = q->host.shape[2], nk = k->host.shape[2];
    th_tensor_make(&bias, FFPA_F32, TH_BHND, 1, hq, n, nk);
    th_tensor_make(&dbias, FFPA_F32, TH_BHND, 1, hq, n, nk);
    th_tensor_make(&bias_h, FFPA_F32, TH_BHND, 1, 1, n, nk);
    th_tensor_make(&dbias_h, FFPA_F32, TH_BHND, 1, 1, n, nk);
    th_tensor_random(&bias, rng, -1, 1, 0);
    th_tensor_random(&bias_h, rng, -1, 1, 0);
    const struct {
        th_tensor *bias, *dbias;
        int deterministic, accum_output;
        const char *want;
    } runs[] = {{NULL, NULL, 0, 1, "sm90 wgmma bwd"},     {NULL, NULL, 1, 1, "sm90 wgmma bwd"},
                {&bias, &dbias, 0, 0, "sm90 wgmma bwd"},  {&bias, &dbias, 1, 1, "sm90 wgmma bwd"},
                {&bias_h, &dbias_h, 0, 0, "sm90 wgmma bwd"}, {&bias_h, &dbias_h, 1, 0, "bwd dkdv"}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; ++i) {
        ffpa_options opt = ffpa_options_default();
        opt.causal = 1;
        opt.bias = runs[i].bias ? &runs[i].bias->dev : NULL;
        opt.dbias = runs[i].dbias ? &runs[i].dbias->dev : NULL;
        opt.deterministic = runs[i].deterministic;
        opt.grad_accum = runs[i].accum_output ? FFPA_GRAD_ACCUM_OUTPUT : FFPA_GRAD_ACCUM_F32;
        char what[96];
        snprintf(what, sizeof what, "ffpa_backward (run %zu: dbias %d deterministic %d accum output %d)", i,
                 opt.dbias != NULL, opt.deterministic, runs[i].accum_output);
        th_expect_ok(ctx,
                     ffpa_backward(ctx, &dout->dev, &q->dev, &k->dev, &v->dev, &o->dev, &lse->dev, &dq->dev, &dk->dev,
                                   &dv->dev, &opt),
                     what);
        if (strncmp(ffpa_last_kernel(ctx), runs[i].want, strlen(runs[i].want)) != 0)
            fail_msg("%s ran on '%s'; expected '%s'", what, ffpa_last_kernel(ctx), runs[i].want);
    }
    th_tensor *all[] = {&bias, &dbias, &bias_h, &dbias_h};
    for (int i = 0; i < 4; ++i)
        th_tensor_free(all[i]);
}

/* The backward's kernel choice on cuda: the Hopper kernel where it covers
 * the problem (sm_90, deterministic mode included), the generic kernels with
 * FFPA_CUDA_KERNEL=generic, and a bogus FFPA_CUDA_KERNEL refused with the
 * gradients untouched. Other backends: their one kernel family. */
static void test_last_kernel_backward(void **state)
{
    (void)state;
    ffpa_context *ctx = th_ctx();
    th_tensor q, k, v, o, lse, dout, dq, dk, dv;
    make_small_problem(&q, &k, &v, &o, &lse, FFPA_BF16, 4, 2, 70, 320, 12);
    th_tensor_make(&dout, FFPA_BF16, TH_BHND, 1, 4, 70, 320);
    th_tensor_make(&dq, FFPA_BF16, TH_BHND, 1, 4, 70, 320);
    th_tensor_make(&dk, FFPA_BF16, TH_BHND, 1, 2, 70, 320);
    th_tensor_make(&dv, FFPA_BF16, TH_BHND, 1, 2, 70, 320);
    th_rng rng = th_rng_seeded(13);
    th_tensor_random(&dout, &rng, -1, 1, 0);
    ffpa_options opt = ffpa_options_default();
    opt.causal = 1;
    th_expect_ok(ctx, ffpa_forward(ctx, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &opt), "ffpa_forward");
#define RUN_BWD() ffpa_backward(ctx, &dout.dev, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &dq.dev, &dk.dev, &dv.dev, &opt)
    th_expect_ok(ctx, RUN_BWD(), "ffpa_backward");
    char kernel[128];
    snprintf(kernel, sizeof kernel, "%s", ffpa_last_kernel(ctx));
    print_message("# last backward kernel on %s: %s\n", th_backend(), kernel);
    /* A context whose only pass is a backward names it too (the tuner's case). */
    ffpa_context *fresh = NULL;
    assert_int_equal(ffpa_create(&fresh, th_backend()), FFPA_OK);
    assert_int_equal(ffpa_backward(fresh, &dout.dev, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &dq.dev, &dk.dev,
                                   &dv.dev, &opt),
                     FFPA_OK);
    assert_string_equal(ffpa_last_kernel(fresh), kernel);
    ffpa_destroy(fresh);
    if (strcmp(th_backend(), "cuda") == 0) {
        const int hopper = strncmp(kernel, "sm90 wgmma bwd", 14) == 0;
        if (!hopper && strncmp(kernel, "bwd dkdv", 8) != 0)
            fail_msg("unexpected cuda backward kernel name '%s'", kernel);
        opt.deterministic = 1; /* the Hopper kernel orders its dQ reductions */
        th_expect_ok(ctx, RUN_BWD(), "ffpa_backward (deterministic)");
        assert_int_equal(strncmp(ffpa_last_kernel(ctx), hopper ? "sm90 wgmma bwd" : "bwd dkdv", hopper ? 14 : 8), 0);
        opt.deterministic = 0;
        setenv("FFPA_CUDA_KERNEL", "generic", 1);
        th_expect_ok(ctx, RUN_BWD(), "ffpa_backward (FFPA_CUDA_KERNEL=generic)");
        assert_int_equal(strncmp(ffpa_last_kernel(ctx), "bwd dkdv", 8), 0);
        if (hopper) {
            setenv("FFPA_CUDA_KERNEL", "sm90", 1);
            th_expect_ok(ctx, RUN_BWD(), "ffpa_backward (FFPA_CUDA_KERNEL=sm90)");
            assert_int_equal(strncmp(ffpa_last_kernel(ctx), "sm90 wgmma bwd", 14), 0);
            unsetenv("FFPA_CUDA_KERNEL");
            check_hopper_backward_options(ctx, &dout, &q, &k, &v, &o, &lse, &dq, &dk, &dv, &rng);
        }
        setenv("FFPA_CUDA_KERNEL", "bogus", 1);
        th_tensor *grads[] = {&dq, &dk, &dv};
        unsigned char *pattern = malloc(dq.bytes > dk.bytes ? dq.bytes : dk.bytes);
        assert_non_null(pattern);
        memset(pattern, 0xA5, dq.bytes > dk.bytes ? dq.bytes : dk.bytes);
        for (int i = 0; i < 3; ++i)
            th_tensor_fill_bytes(grads[i], 0xA5);
        ffpa_status status = RUN_BWD();
        unsetenv("FFPA_CUDA_KERNEL");
        assert_int_equal(status, FFPA_ERR_INVALID_ARGUMENT);
        if (!strstr(ffpa_last_error(ctx), "FFPA_CUDA_KERNEL"))
            fail_msg("the message does not name FFPA_CUDA_KERNEL: '%s'", ffpa_last_error(ctx));
        th_expect_unchanged("dq (bogus FFPA_CUDA_KERNEL)", &dq, pattern);
        th_expect_unchanged("dk (bogus FFPA_CUDA_KERNEL)", &dk, pattern);
        th_expect_unchanged("dv (bogus FFPA_CUDA_KERNEL)", &dv, pattern);
        free(pattern);
    } else {
        assert_string_equal(kernel, th_backend()); /* cpu, hip: one kernel family */
    }
#undef RUN_BWD
    th_tensor *all[] = {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv};
    for (int i = 0; i < 9; ++i)
        th_tensor_free(all[i]);
}

int main(void)
{
    int unavailable = th_backend_unavailable_exit();
    if (unavailable >= 0)
        return unavailable;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_selects_cpu),
        cmocka_unit_test(test_explicit_cpu_and_auto),
        cmocka_unit_test(test_bogus_backend),
        cmocka_unit_test(test_cuda_backend),
        cmocka_unit_test(test_hip_backend),
        cmocka_unit_test(test_backend_list),
        cmocka_unit_test(test_create_null_out),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_dtype_helpers),
        cmocka_unit_test(test_options_default),
        cmocka_unit_test(test_memory_round_trip),
        cmocka_unit_test(test_contexts_independent),
        cmocka_unit_test(test_caller_workspace),
        cmocka_unit_test(test_failed_alloc_then_work),
        cmocka_unit_test(test_last_kernel),
        cmocka_unit_test(test_last_kernel_backward),
    };
    return th_exit_code(cmocka_run_group_tests_name("backend", tests, NULL, NULL),
                        (int)(sizeof tests / sizeof tests[0]));
}
