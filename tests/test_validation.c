/*
 * Bad input, one test per validation rule. Each checks (a) the status,
 * (b) that ffpa_last_error(ctx) starts with "<argument>:" naming the culprit
 * and (c) that every output buffer (o, lse, dq, dk, dv, dbias) is byte for
 * byte untouched. Runs on FFPA_TEST_BACKEND (default cpu).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define UNTOUCHED_BYTE 0xA5

enum { B = 2, HQ = 4, HKV = 2, N = 8, D = 16, TOTAL = B * N };

/* A valid f32 problem; tests break one thing in the descriptors. */
typedef struct fixture {
    th_tensor tq, tk, tv, to, tlse, tdout, tdq, tdk, tdv, tbias, tdbias;
    ffpa_tensor q, k, v, o, lse, dout, dq, dk, dv, bias, dbias;
    const ffpa_tensor *qp, *kp, *vp, *op, *lsep, *doutp, *dqp, *dkp, *dvp;
    ffpa_options opt;
    int32_t cu_q[4], cu_k[4];
} fixture;

static void make(fixture *fx)
{
    memset(fx, 0, sizeof *fx);
    th_rng rng = th_rng_seeded(77);
    th_tensor *inputs[] = {&fx->tq, &fx->tk, &fx->tv, &fx->tdout, &fx->tbias};
    th_tensor_make(&fx->tq, th_fixture_dtype(), TH_BHND, B, HQ, N, D);
    th_tensor_make(&fx->tk, th_fixture_dtype(), TH_BHND, B, HKV, N, D);
    th_tensor_make(&fx->tv, th_fixture_dtype(), TH_BHND, B, HKV, N, D);
    th_tensor_make(&fx->tdout, th_fixture_dtype(), TH_BHND, B, HQ, N, D);
    th_tensor_make(&fx->tbias, FFPA_F32, TH_BHND, B, HQ, N, N);
    for (int i = 0; i < 5; ++i)
        th_tensor_random(inputs[i], &rng, -1.0, 1.0, 0);
    th_tensor_make(&fx->to, th_fixture_dtype(), TH_BHND, B, HQ, N, D);
    th_tensor_lse(&fx->tlse, TH_BHND, B, HQ, N);
    th_tensor_make(&fx->tdq, th_fixture_dtype(), TH_BHND, B, HQ, N, D);
    th_tensor_make(&fx->tdk, th_fixture_dtype(), TH_BHND, B, HKV, N, D);
    th_tensor_make(&fx->tdv, th_fixture_dtype(), TH_BHND, B, HKV, N, D);
    th_tensor_make(&fx->tdbias, FFPA_F32, TH_BHND, B, HQ, N, N);
    th_tensor *outputs[] = {&fx->to, &fx->tlse, &fx->tdq, &fx->tdk, &fx->tdv, &fx->tdbias};
    for (int i = 0; i < 6; ++i)
        th_tensor_fill_bytes(outputs[i], UNTOUCHED_BYTE);
    fx->q = fx->tq.dev;
    fx->k = fx->tk.dev;
    fx->v = fx->tv.dev;
    fx->o = fx->to.dev;
    fx->lse = fx->tlse.dev;
    fx->dout = fx->tdout.dev;
    fx->dq = fx->tdq.dev;
    fx->dk = fx->tdk.dev;
    fx->dv = fx->tdv.dev;
    fx->bias = fx->tbias.dev;
    fx->dbias = fx->tdbias.dev;
    fx->qp = &fx->q;
    fx->kp = &fx->k;
    fx->vp = &fx->v;
    fx->op = &fx->o;
    fx->lsep = &fx->lse;
    fx->doutp = &fx->dout;
    fx->dqp = &fx->dq;
    fx->dkp = &fx->dk;
    fx->dvp = &fx->dv;
    fx->opt = ffpa_options_default();
}

/* Re-describes the same buffers as a varlen batch of [1, H, TOTAL, D] with
 * two sequences of 5 and 11 rows. */
static void make_varlen(fixture *fx)
{
    make(fx);
    ffpa_tensor *q_side[] = {&fx->q, &fx->o, &fx->dout, &fx->dq};
    ffpa_tensor *k_side[] = {&fx->k, &fx->v, &fx->dk, &fx->dv};
    for (int i = 0; i < 4; ++i) {
        *q_side[i] = ffpa_tensor_bhnd(q_side[i]->data, q_side[i]->dtype, 1, HQ, TOTAL, D);
        *k_side[i] = ffpa_tensor_bhnd(k_side[i]->data, k_side[i]->dtype, 1, HKV, TOTAL, D);
    }
    fx->lse = ffpa_tensor_bhnd(fx->lse.data, FFPA_F32, 1, HQ, TOTAL, 1);
    const int32_t cu[] = {0, 5, TOTAL};
    memcpy(fx->cu_q, cu, sizeof cu);
    memcpy(fx->cu_k, cu, sizeof cu);
    fx->opt.cu_seqlens_q = fx->cu_q;
    fx->opt.cu_seqlens_k = fx->cu_k;
    fx->opt.varlen_batch = 2;
}

static void release(fixture *fx)
{
    th_tensor *all[] = {&fx->tq,  &fx->tk,  &fx->tv,  &fx->to,    &fx->tlse,  &fx->tdout,
                        &fx->tdq, &fx->tdk, &fx->tdv, &fx->tbias, &fx->tdbias};
    for (int i = 0; i < 11; ++i)
        th_tensor_free(all[i]);
}

static void expect_outputs_untouched(fixture *fx)
{
    th_tensor *outputs[] = {&fx->to, &fx->tlse, &fx->tdq, &fx->tdk, &fx->tdv, &fx->tdbias};
    const char *names[] = {"o", "lse", "dq", "dk", "dv", "dbias"};
    for (int i = 0; i < 6; ++i) {
        unsigned char *pattern = malloc(outputs[i]->bytes);
        assert_non_null(pattern);
        memset(pattern, UNTOUCHED_BYTE, outputs[i]->bytes);
        th_expect_unchanged(names[i], outputs[i], pattern);
        free(pattern);
    }
}

static void expect_rejected(fixture *fx, ffpa_status got, ffpa_status want,
                            const char *const *names)
{
    const char *message = ffpa_last_error(th_ctx());
    if (got != want)
        fail_msg("status %d (%s), expected %d (%s); message: '%s'", (int)got,
                 ffpa_status_string(got), (int)want, ffpa_status_string(want), message);
    if (!th_message_names(message, names))
        fail_msg("ffpa_last_error is '%s'; expected it to start with '%s:'", message, names[0]);
    expect_outputs_untouched(fx);
    release(fx);
}

static ffpa_status forward(fixture *fx)
{
    return ffpa_forward(th_ctx(), fx->qp, fx->kp, fx->vp, fx->op, fx->lsep, &fx->opt);
}

static ffpa_status backward(fixture *fx)
{
    return ffpa_backward(th_ctx(), fx->doutp, fx->qp, fx->kp, fx->vp, fx->op, fx->lsep, fx->dqp,
                         fx->dkp, fx->dvp, &fx->opt);
}

static void expect_forward_rejected(fixture *fx, const char *const *names)
{
    expect_rejected(fx, forward(fx), FFPA_ERR_INVALID_ARGUMENT, names);
}

static void expect_backward_rejected(fixture *fx, const char *const *names)
{
    expect_rejected(fx, backward(fx), FFPA_ERR_INVALID_ARGUMENT, names);
}

/* ------------------------------------------------------------ controls */

/* The unbroken fixtures are accepted: the rejections below are caused by the
 * one thing each test breaks. */
static void test_valid_fixtures_accepted(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    th_expect_ok(th_ctx(), forward(&fx), "ffpa_forward (valid fixture)");
    fx.opt.bias = &fx.bias;
    fx.opt.dbias = &fx.dbias;
    th_expect_backward_ok(th_ctx(), backward(&fx), "ffpa_backward (valid fixture)");
    release(&fx);
    make_varlen(&fx);
    th_expect_ok(th_ctx(), forward(&fx), "ffpa_forward (valid varlen fixture)");
    th_expect_backward_ok(th_ctx(), backward(&fx), "ffpa_backward (valid varlen fixture)");
    release(&fx);
}

/* ------------------------------------------------------------ null arguments */

static void test_null_ctx(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    /* No context to hold a message: only the status and untouched outputs. */
    ffpa_status status = ffpa_forward(NULL, fx.qp, fx.kp, fx.vp, fx.op, fx.lsep, &fx.opt);
    assert_int_equal(status, FFPA_ERR_INVALID_ARGUMENT);
    status = ffpa_backward(NULL, fx.doutp, fx.qp, fx.kp, fx.vp, fx.op, fx.lsep, fx.dqp, fx.dkp,
                           fx.dvp, &fx.opt);
    assert_int_equal(status, FFPA_ERR_INVALID_ARGUMENT);
    expect_outputs_untouched(&fx);
    release(&fx);
}

static void test_null_q(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.qp = NULL;
    expect_forward_rejected(&fx, NAMES("q"));
}

static void test_null_k(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.kp = NULL;
    expect_forward_rejected(&fx, NAMES("k"));
}

static void test_null_v(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.vp = NULL;
    expect_forward_rejected(&fx, NAMES("v"));
}

static void test_null_o(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.op = NULL;
    expect_forward_rejected(&fx, NAMES("o"));
}

static void test_null_data_q(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.q.data = NULL;
    expect_forward_rejected(&fx, NAMES("q"));
}

static void test_null_data_o(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.o.data = NULL;
    expect_forward_rejected(&fx, NAMES("o"));
}

static void test_null_data_lse(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.lse.data = NULL;
    expect_forward_rejected(&fx, NAMES("lse"));
}

/* ------------------------------------------------------------ dtypes */

static void test_dtype_mismatch_k(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.k.dtype = FFPA_F16;
    expect_forward_rejected(&fx, NAMES("k"));
}

static void test_dtype_mismatch_v(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.v.dtype = FFPA_F16;
    expect_forward_rejected(&fx, NAMES("v"));
}

static void test_dtype_mismatch_o(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.o.dtype = FFPA_F16;
    expect_forward_rejected(&fx, NAMES("o"));
}

static void test_dtype_unknown(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.q.dtype = (ffpa_dtype)7;
    fx.k.dtype = fx.v.dtype = fx.o.dtype = (ffpa_dtype)7;
    expect_forward_rejected(&fx, NAMES("q"));
}

static void test_lse_not_f32(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.lse.dtype = FFPA_F16;
    expect_forward_rejected(&fx, NAMES("lse"));
}

/* ------------------------------------------------------------ shapes */

static void test_batch_mismatch_k(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.k.shape[0] = 1;
    expect_forward_rejected(&fx, NAMES("k"));
}

static void test_batch_mismatch_o(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.o.shape[0] = 1;
    expect_forward_rejected(&fx, NAMES("o"));
}

static void test_heads_mismatch_v(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.v.shape[1] = 1; /* k has 2 heads */
    expect_forward_rejected(&fx, NAMES("v"));
}

static void test_heads_mismatch_o(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.o.shape[1] = 2; /* q has 4 heads */
    expect_forward_rejected(&fx, NAMES("o"));
}

static void test_seqlen_mismatch_v(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.v.shape[2] = N - 1; /* k has N rows */
    expect_forward_rejected(&fx, NAMES("v"));
}

static void test_seqlen_mismatch_o(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.o.shape[2] = N - 1; /* q has N rows */
    expect_forward_rejected(&fx, NAMES("o"));
}

static void test_head_dim_mismatch_qk(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.k.shape[3] = D - 1;
    expect_forward_rejected(&fx, NAMES("k", "q"));
}

static void test_o_head_dim_vs_v(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.v.shape[3] = D / 2; /* legal Dv != Dqk, but o still has D */
    expect_forward_rejected(&fx, NAMES("o"));
}

static void test_lse_shape(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.lse.shape[2] = N + 1;
    expect_forward_rejected(&fx, NAMES("lse"));
    make(&fx);
    fx.lse.shape[1] = HKV;
    expect_forward_rejected(&fx, NAMES("lse"));
    make(&fx);
    fx.lse.shape[3] = 2;
    expect_forward_rejected(&fx, NAMES("lse"));
}

static void test_heads_not_multiple(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.k.shape[1] = fx.v.shape[1] = 3; /* Hq = 4 */
    expect_forward_rejected(&fx, NAMES("k", "q"));
    make(&fx);
    fx.k.shape[1] = fx.v.shape[1] = 0;
    expect_forward_rejected(&fx, NAMES("k", "q"));
}

static void test_shape_negative(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.q.shape[3] = fx.k.shape[3] = -1;
    expect_forward_rejected(&fx, NAMES("q"));
    make(&fx);
    fx.dk.shape[2] = -3;
    expect_backward_rejected(&fx, NAMES("dk"));
}

static void test_head_dim_too_large(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.q.shape[3] = fx.k.shape[3] = FFPA_MAX_HEAD_DIM + 1;
    expect_forward_rejected(&fx, NAMES("q"));
    make(&fx);
    fx.v.shape[3] = fx.o.shape[3] = FFPA_MAX_HEAD_DIM + 1;
    expect_forward_rejected(&fx, NAMES("v"));
}

static void test_kv_heads_zero_with_query_heads(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.k.shape[1] = fx.v.shape[1] = 0;
    expect_forward_rejected(&fx, NAMES("k"));
}

/* Zero-size dimensions are valid (test_empty.c checks the results); here:
 * the strides of an empty tensor never count as overlapping, and a NULL
 * pointer is fine where there is no element. dK/dV of [B, Hkv, 0, D] with
 * PyTorch's strides for an empty contiguous tensor, (0, 0, D, 1), once
 * refused as "strides make elements overlap". */
static void test_empty_tensor_any_strides(void **state)
{
    (void)state;
    fixture fx;
    make_varlen(&fx);
    const int32_t cu_k[] = {0, 0, 0};
    memcpy(fx.cu_k, cu_k, sizeof cu_k);
    ffpa_tensor *k_side[] = {&fx.k, &fx.v, &fx.dk, &fx.dv};
    for (int i = 0; i < 4; ++i) {
        k_side[i]->shape[2] = 0;
        k_side[i]->stride[0] = k_side[i]->stride[1] = 0;
        k_side[i]->stride[2] = D;
        k_side[i]->stride[3] = 1;
    }
    fx.dk.data = fx.dv.data = NULL;
    th_expect_ok(th_ctx(), forward(&fx), "ffpa_forward (varlen, every key length 0)");
    th_expect_backward_ok(th_ctx(), backward(&fx), "ffpa_backward (varlen, every key length 0, dk/dv strides 0,0,D,1)");
    release(&fx);
}

/* Element counts and byte extents past int64 are refused naming the
 * tensor, not caught by accident as overlapping strides. */
static void test_size_overflow(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.q.shape[2] = fx.o.shape[2] = fx.lse.shape[2] = (int64_t)1 << 62; /* 2^62 x 4 heads x ... */
    expect_forward_rejected(&fx, NAMES("q"));
    make(&fx);
    fx.q = ffpa_tensor_bhnd(fx.q.data, fx.q.dtype, 1, 1, 4611686018427387904LL, 1);
    expect_forward_rejected(&fx, NAMES("q"));
    make(&fx);
    fx.o.stride[0] = INT64_MAX / 2; /* B = 2: the extent alone overflows */
    expect_forward_rejected(&fx, NAMES("o"));
    make(&fx);
    fx.v.stride[2] = INT64_MAX / 4; /* an input: bytes = (last + 1) x 4 overflow */
    expect_forward_rejected(&fx, NAMES("v"));
}

/* ffpa_options.struct_size: a caller built against an older, smaller
 * struct (no dbias) runs with the fields it has, the rest at their
 * defaults, and nothing past its struct is read (an exact-size heap block:
 * ASan in CI); a newer caller's unknown options are refused unless 0. */
static void test_options_struct_size(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.opt.causal = 1;
    th_expect_ok(th_ctx(), forward(&fx), "ffpa_forward (this header's options)");
    th_tensor_download(&fx.to);
    unsigned char *full = th_tensor_snapshot(&fx.to);

    const size_t older = offsetof(ffpa_options, dbias);
    const uint32_t older_size = (uint32_t)older;
    unsigned char *old_opt = malloc(older);
    assert_non_null(old_opt);
    memcpy(old_opt, &fx.opt, older);
    memcpy(old_opt + offsetof(ffpa_options, struct_size), &older_size, sizeof older_size);
    th_tensor_fill_bytes(&fx.to, UNTOUCHED_BYTE);
    th_expect_ok(th_ctx(),
                 ffpa_forward(th_ctx(), fx.qp, fx.kp, fx.vp, fx.op, fx.lsep, (const ffpa_options *)(void *)old_opt),
                 "ffpa_forward (an older caller's smaller options)");
    th_expect_unchanged("o (older options give the same result)", &fx.to, full);
    free(old_opt);

    const size_t newer = sizeof(ffpa_options) + 16;
    unsigned char *new_opt = calloc(1, newer);
    assert_non_null(new_opt);
    memcpy(new_opt, &fx.opt, sizeof fx.opt);
    ((ffpa_options *)(void *)new_opt)->struct_size = (uint32_t)newer;
    th_expect_ok(th_ctx(), ffpa_forward(th_ctx(), fx.qp, fx.kp, fx.vp, fx.op, fx.lsep, (ffpa_options *)(void *)new_opt),
                 "ffpa_forward (a newer caller's options left at 0)");
    new_opt[sizeof(ffpa_options) + 3] = 1; /* an option this library does not know */
    th_tensor_fill_bytes(&fx.to, UNTOUCHED_BYTE);
    ffpa_status st = ffpa_forward(th_ctx(), fx.qp, fx.kp, fx.vp, fx.op, fx.lsep, (ffpa_options *)(void *)new_opt);
    assert_int_equal(st, FFPA_ERR_UNSUPPORTED);
    assert_true(th_message_names(ffpa_last_error(th_ctx()), NAMES("opt")));
    free(new_opt);
    free(full);

    release(&fx);
    make(&fx);
    fx.opt.struct_size = 2;
    expect_forward_rejected(&fx, NAMES("opt.struct_size"));
}

/* ------------------------------------------------------------ strides, pointers */

static void test_negative_stride(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.q.stride[2] = -D;
    expect_forward_rejected(&fx, NAMES("q"));
    make(&fx);
    fx.v.stride[3] = -1;
    expect_forward_rejected(&fx, NAMES("v"));
    make(&fx);
    fx.o.stride[0] = -1;
    expect_forward_rejected(&fx, NAMES("o"));
}

/* Stride 0 is only for size-1 dims (and bias broadcast): an output with a zero
 * stride would have many elements written to one address. */
static void test_zero_stride(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.o.stride[2] = 0;
    expect_forward_rejected(&fx, NAMES("o"));
    /* Inputs may broadcast with stride 0 (an expanded view): accepted, or
     * refused as unsupported by a backend that needs unit-stride rows. */
    make(&fx);
    fx.q.stride[3] = 0;
    ffpa_status status = forward(&fx);
    if (status != FFPA_OK && status != FFPA_ERR_UNSUPPORTED)
        fail_msg("stride-0 q: status %s; expected ok (broadcast input): %s",
                 ffpa_status_string(status), ffpa_last_error(th_ctx()));
    if (strcmp(th_backend(), "cpu") == 0)
        assert_int_equal(status, FFPA_OK);
    release(&fx);
}

static void test_misaligned_pointer(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.q.data = (char *)fx.q.data + ffpa_dtype_size(fx.q.dtype) / 2; /* inside an element */
    expect_forward_rejected(&fx, NAMES("q"));
    make(&fx);
    fx.o.data = (char *)fx.o.data + ffpa_dtype_size(fx.o.dtype) / 2;
    expect_forward_rejected(&fx, NAMES("o"));
    make(&fx);
    fx.lse.data = (char *)fx.lse.data + 1;
    expect_forward_rejected(&fx, NAMES("lse"));
}

/* Outputs must not share memory with inputs or with each other. */
static void test_output_aliases_input(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.o.data = fx.q.data;
    expect_forward_rejected(&fx, NAMES("o"));
    make(&fx);
    fx.dk.data = fx.dq.data; /* two outputs sharing memory */
    expect_backward_rejected(&fx, NAMES("dk", "dq"));
}

/* ------------------------------------------------------------ options */

static void test_dropout_out_of_range(void **state)
{
    (void)state;
    const float bad[] = {-0.1f, 1.0f, 1.5f, NAN, INFINITY};
    for (int i = 0; i < 5; ++i) {
        fixture fx;
        make(&fx);
        fx.opt.dropout_p = bad[i];
        expect_forward_rejected(&fx, NAMES("opt.dropout_p"));
    }
}

static void test_scale_not_finite(void **state)
{
    (void)state;
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; ++i) {
        fixture fx;
        make(&fx);
        fx.opt.scale = bad[i];
        expect_forward_rejected(&fx, NAMES("opt.scale"));
    }
}

static void test_bias_not_broadcastable(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.bias.shape[3] = N + 1;
    fx.opt.bias = &fx.bias;
    expect_forward_rejected(&fx, NAMES("bias", "opt.bias"));
    make(&fx);
    fx.bias.shape[0] = 3; /* neither 1 nor B */
    fx.opt.bias = &fx.bias;
    expect_forward_rejected(&fx, NAMES("bias", "opt.bias"));
    make(&fx);
    fx.bias.shape[1] = HKV; /* neither 1 nor Hq */
    fx.opt.bias = &fx.bias;
    expect_forward_rejected(&fx, NAMES("bias", "opt.bias"));
    make(&fx);
    fx.bias.stride[2] = -1;
    fx.opt.bias = &fx.bias;
    expect_forward_rejected(&fx, NAMES("bias", "opt.bias"));
    make(&fx);
    fx.bias.data = NULL;
    fx.opt.bias = &fx.bias;
    expect_forward_rejected(&fx, NAMES("bias", "opt.bias"));
}

/* Window bounds, softcap and ALiBi slopes: each bad value refused by name,
 * forward and backward, nothing written. */
static void test_variants_rejected(void **state)
{
    (void)state;
    fixture fx;
    const int64_t bad_bounds[][2] = {{-2, 0}, {0, -5}, {INT64_MIN, 3}};
    for (int i = 0; i < 3; ++i) {
        make(&fx);
        fx.opt.window = 1;
        fx.opt.window_left = bad_bounds[i][0];
        fx.opt.window_right = bad_bounds[i][1];
        expect_forward_rejected(&fx, NAMES(i == 1 ? "opt.window_right" : "opt.window_left"));
    }
    make(&fx);
    fx.opt.window = 2;
    expect_backward_rejected(&fx, NAMES("opt.window"));
    const float bad_caps[] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; ++i) {
        make(&fx);
        fx.opt.softcap = bad_caps[i];
        expect_forward_rejected(&fx, NAMES("opt.softcap"));
    }
    make(&fx);
    fx.opt.softcap = -0.5f;
    expect_backward_rejected(&fx, NAMES("opt.softcap"));

    /* Slopes over the bias buffer ([B, Hq, 1, 1] f32 is valid). */
    struct {
        int64_t shape[4];
        ffpa_dtype dtype;
    } bad_slopes[] = {{{B, HKV, 1, 1}, FFPA_F32}, {{3, HQ, 1, 1}, FFPA_F32}, {{B, HQ, 2, 1}, FFPA_F32},
                      {{B, HQ, 1, 1}, FFPA_F16},  {{1, HQ, 1, N}, FFPA_F32}};
    for (int i = 0; i < 5; ++i) {
        make(&fx);
        ffpa_tensor slopes = ffpa_tensor_bhnd(fx.bias.data, bad_slopes[i].dtype, bad_slopes[i].shape[0],
                                              bad_slopes[i].shape[1], bad_slopes[i].shape[2],
                                              bad_slopes[i].shape[3]);
        fx.opt.alibi_slopes = &slopes;
        if (i % 2)
            expect_forward_rejected(&fx, NAMES("opt.alibi_slopes"));
        else
            expect_backward_rejected(&fx, NAMES("opt.alibi_slopes"));
    }
    make(&fx);
    ffpa_tensor slopes = ffpa_tensor_bhnd(fx.bias.data, FFPA_F32, B, HQ, 1, 1);
    slopes.data = NULL;
    fx.opt.alibi_slopes = &slopes;
    expect_forward_rejected(&fx, NAMES("opt.alibi_slopes"));
    /* Slopes in the output's memory. */
    make(&fx);
    slopes = ffpa_tensor_bhnd(fx.o.data, FFPA_F32, 1, HQ, 1, 1);
    slopes.data = fx.o.data;
    fx.opt.alibi_slopes = &slopes;
    expect_forward_rejected(&fx, NAMES("o", "opt.alibi_slopes"));
}

/* Valid variants: the cpu backend runs them; a backend without them refuses
 * with FFPA_ERR_UNSUPPORTED naming the option, and writes nothing. */
static void test_variants_accepted_or_refused_by_name(void **state)
{
    (void)state;
    for (int v = 0; v < 3; ++v) {
        fixture fx;
        make(&fx);
        ffpa_tensor slopes = ffpa_tensor_bhnd(fx.bias.data, FFPA_F32, 1, HQ, 1, 1);
        const char *name = v == 0 ? "opt.window" : v == 1 ? "opt.softcap" : "opt.alibi_slopes";
        if (v == 0) {
            fx.opt.window = 1;
            fx.opt.window_left = 2;
            fx.opt.window_right = -1;
        } else if (v == 1) {
            fx.opt.softcap = 5.0f;
        } else {
            fx.opt.alibi_slopes = &slopes;
        }
        ffpa_status st = forward(&fx);
        if (strcmp(th_backend(), "cpu") == 0) {
            th_expect_ok(th_ctx(), st, name);
            release(&fx);
        } else if (st != FFPA_OK) {
            expect_rejected(&fx, st, FFPA_ERR_UNSUPPORTED, NAMES(name));
        } else {
            release(&fx);
        }
    }
}

static void test_cu_seqlens_non_monotonic(void **state)
{
    (void)state;
    fixture fx;
    make_varlen(&fx);
    const int32_t cu[] = {0, 10, 5, TOTAL};
    memcpy(fx.cu_q, cu, sizeof cu);
    fx.cu_k[0] = 0;
    fx.cu_k[1] = 4;
    fx.cu_k[2] = 9;
    fx.cu_k[3] = TOTAL;
    fx.opt.varlen_batch = 3;
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_q"));
    make_varlen(&fx);
    memcpy(fx.cu_k, cu, sizeof cu);
    fx.cu_q[0] = 0;
    fx.cu_q[1] = 4;
    fx.cu_q[2] = 9;
    fx.cu_q[3] = TOTAL;
    fx.opt.varlen_batch = 3;
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_k"));
}

/* Offsets in backend memory: the flag is 0 or 1 and needs offsets; the
 * caller's maxima lie in [0, packed rows]. (The offsets' values are the
 * caller's promise then: they are never read on the host.) */
/* The varlen fixture with its offsets declared in backend memory and the
 * given maxima. */
static void make_on_device(fixture *fx, int flag, int64_t max_q, int64_t max_k)
{
    make_varlen(fx);
    fx->opt.cu_seqlens_on_device = flag;
    fx->opt.max_seqlen_q = max_q;
    fx->opt.max_seqlen_k = max_k;
}

static void test_cu_seqlens_on_device_checks(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.opt.cu_seqlens_on_device = 1;
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_on_device"));
    make(&fx);
    fx.opt.cu_seqlens_on_device = 1;
    expect_backward_rejected(&fx, NAMES("opt.cu_seqlens_on_device"));
    make_on_device(&fx, 2, TOTAL, TOTAL);
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_on_device"));
    const int64_t bad[] = {-1, TOTAL + 1};
    for (int i = 0; i < 2; ++i) {
        make_on_device(&fx, 1, bad[i], TOTAL);
        expect_forward_rejected(&fx, NAMES("opt.max_seqlen_q"));
        make_on_device(&fx, 1, bad[i], TOTAL);
        expect_backward_rejected(&fx, NAMES("opt.max_seqlen_q"));
        make_on_device(&fx, 1, TOTAL, bad[i]);
        expect_forward_rejected(&fx, NAMES("opt.max_seqlen_k"));
    }
    /* The cpu backend reads its memory directly: there the offsets are checked too. */
    if (strcmp(th_backend(), "cpu") == 0) {
        make_on_device(&fx, 1, TOTAL, TOTAL);
        fx.cu_q[1] = TOTAL + 3;
        expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_q"));
        make_on_device(&fx, 1, TOTAL, TOTAL);
        fx.cu_q[1] = TOTAL + 3;
        expect_backward_rejected(&fx, NAMES("opt.cu_seqlens_q"));
        make_on_device(&fx, 1, TOTAL, 10); /* the sequences hold 5 and 11 keys */
        expect_forward_rejected(&fx, NAMES("opt.max_seqlen_k"));
    }
    /* Valid: the maxima size the launch; the offsets are read where they are. */
    make_on_device(&fx, 1, TOTAL - 5, TOTAL - 5);
    ffpa_context *ctx = th_ctx();
    void *cu_dev = NULL;
    th_expect_ok(ctx, ffpa_malloc(ctx, &cu_dev, 3 * sizeof(int32_t)), "ffpa_malloc");
    th_expect_ok(ctx, ffpa_memcpy(ctx, cu_dev, fx.cu_q, 3 * sizeof(int32_t), FFPA_COPY_HOST_TO_DEVICE),
                 "ffpa_memcpy");
    fx.opt.cu_seqlens_q = fx.opt.cu_seqlens_k = cu_dev;
    th_expect_ok(ctx, forward(&fx), "ffpa_forward (varlen, offsets on the device)");
    th_expect_backward_ok(ctx, backward(&fx), "ffpa_backward (varlen, offsets on the device)");
    th_expect_ok(ctx, ffpa_free(ctx, cu_dev), "ffpa_free");
    release(&fx);
}

static void test_cu_seqlens_bad_ends(void **state)
{
    (void)state;
    fixture fx;
    make_varlen(&fx);
    fx.cu_q[2] = TOTAL - 1; /* last != total rows */
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_q"));
    make_varlen(&fx);
    fx.cu_k[2] = TOTAL + 1;
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_k"));
    make_varlen(&fx);
    fx.cu_q[0] = 1; /* first != 0 */
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_q"));
}

static void test_cu_seqlens_only_one(void **state)
{
    (void)state;
    fixture fx;
    make_varlen(&fx);
    fx.opt.cu_seqlens_k = NULL;
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_k", "opt.cu_seqlens_q"));
    make_varlen(&fx);
    fx.opt.cu_seqlens_q = NULL;
    expect_forward_rejected(&fx, NAMES("opt.cu_seqlens_q", "opt.cu_seqlens_k"));
}

static void test_varlen_batch_not_one(void **state)
{
    (void)state;
    fixture fx;
    make(&fx); /* dense [2, H, 8, D] tensors with offsets over 16 rows */
    const int32_t cu[] = {0, 3, N};
    memcpy(fx.cu_q, cu, sizeof cu);
    memcpy(fx.cu_k, cu, sizeof cu);
    fx.opt.cu_seqlens_q = fx.cu_q;
    fx.opt.cu_seqlens_k = fx.cu_k;
    fx.opt.varlen_batch = 2;
    expect_forward_rejected(&fx, NAMES("q", "opt.cu_seqlens_q"));
}

static void test_varlen_batch_count(void **state)
{
    (void)state;
    fixture fx;
    make_varlen(&fx);
    fx.opt.varlen_batch = 0;
    expect_forward_rejected(&fx, NAMES("opt.varlen_batch", "opt.cu_seqlens_q"));
    make_varlen(&fx);
    fx.opt.varlen_batch = -1;
    expect_forward_rejected(&fx, NAMES("opt.varlen_batch", "opt.cu_seqlens_q"));
}

static void test_grad_accum_unknown(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.opt.grad_accum = (ffpa_grad_accum)9;
    expect_backward_rejected(&fx, NAMES("opt.grad_accum"));
}

/* ------------------------------------------------------------ backward */

static void test_backward_lse_missing(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.lsep = NULL;
    expect_backward_rejected(&fx, NAMES("lse"));
}

static void test_backward_null_tensors(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.doutp = NULL;
    expect_backward_rejected(&fx, NAMES("dout"));
    make(&fx);
    fx.op = NULL;
    expect_backward_rejected(&fx, NAMES("out"));
    make(&fx);
    fx.dqp = NULL;
    expect_backward_rejected(&fx, NAMES("dq"));
    make(&fx);
    fx.dvp = NULL;
    expect_backward_rejected(&fx, NAMES("dv"));
}

static void test_backward_dq_shape(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.dq.shape[2] = N - 1;
    expect_backward_rejected(&fx, NAMES("dq"));
    make(&fx);
    fx.dk.shape[1] = HQ;
    expect_backward_rejected(&fx, NAMES("dk"));
    make(&fx);
    fx.dv.shape[3] = D + 1;
    expect_backward_rejected(&fx, NAMES("dv"));
}

static void test_backward_dtype(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.dq.dtype = FFPA_F16;
    expect_backward_rejected(&fx, NAMES("dq"));
    make(&fx);
    fx.dout.dtype = FFPA_F16;
    expect_backward_rejected(&fx, NAMES("dout"));
    make(&fx);
    fx.lse.dtype = FFPA_BF16;
    expect_backward_rejected(&fx, NAMES("lse"));
}

static void test_backward_dout_shape(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.dout.shape[2] = N + 1;
    expect_backward_rejected(&fx, NAMES("dout"));
    make(&fx);
    fx.o.shape[1] = HKV;
    expect_backward_rejected(&fx, NAMES("out"));
}

static void test_backward_dbias_without_bias(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.opt.dbias = &fx.dbias;
    expect_backward_rejected(&fx, NAMES("dbias", "opt.dbias"));
}

static void test_backward_dbias_shape(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.opt.bias = &fx.bias;
    fx.dbias.shape[2] = 1; /* bias does not broadcast over Nq */
    fx.opt.dbias = &fx.dbias;
    expect_backward_rejected(&fx, NAMES("dbias", "opt.dbias"));
    make(&fx);
    fx.opt.bias = &fx.bias;
    fx.dbias.dtype = FFPA_F16; /* neither f32 nor the bias dtype */
    fx.opt.dbias = &fx.dbias;
    expect_backward_rejected(&fx, NAMES("dbias", "opt.dbias"));
}

static void test_backward_output_stride_zero(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    fx.dk.stride[2] = 0;
    expect_backward_rejected(&fx, NAMES("dk"));
}

/* ------------------------------------------------------------ workspace query */

static void test_workspace_query_validates(void **state)
{
    (void)state;
    fixture fx;
    make(&fx);
    size_t bytes = 12345;
    fx.k.shape[0] = 1;
    ffpa_status status =
        ffpa_forward_workspace_size(th_ctx(), fx.qp, fx.kp, fx.vp, &fx.opt, &bytes);
    expect_rejected(&fx, status, FFPA_ERR_INVALID_ARGUMENT, NAMES("k"));
    make(&fx);
    fx.opt.dropout_p = 2.0f;
    status = ffpa_backward_workspace_size(th_ctx(), fx.qp, fx.kp, fx.vp, &fx.opt, &bytes);
    expect_rejected(&fx, status, FFPA_ERR_INVALID_ARGUMENT, NAMES("opt.dropout_p"));
    /* The backward query sizes a dbias scratch: dbias is validated there too
     * (a fuzzer finding: an unchecked dbias with huge empty q/k sizes
     * overflowed the scratch count). */
    make(&fx);
    fx.opt.bias = &fx.bias;
    fx.opt.dbias = &fx.dbias;
    fx.dbias.shape[3] = N + 1;
    status = ffpa_backward_workspace_size(th_ctx(), fx.qp, fx.kp, fx.vp, &fx.opt, &bytes);
    expect_rejected(&fx, status, FFPA_ERR_INVALID_ARGUMENT, NAMES("opt.dbias"));
    make(&fx);
    fx.opt.dbias = &fx.dbias; /* without a bias */
    status = ffpa_backward_workspace_size(th_ctx(), fx.qp, fx.kp, fx.vp, &fx.opt, &bytes);
    expect_rejected(&fx, status, FFPA_ERR_INVALID_ARGUMENT, NAMES("opt.dbias"));
}

/* ------------------------------------------------------------ backend name */

static void test_unknown_backend(void **state)
{
    (void)state;
    ffpa_context *ctx = NULL;
    ffpa_status status = ffpa_create(&ctx, "bogus");
    assert_int_equal(status, FFPA_ERR_NO_BACKEND);
    assert_null(ctx);
    const char *message = ffpa_last_error(NULL);
    if (!th_message_names(message, NAMES("backend")))
        fail_msg("ffpa_last_error(NULL) is '%s'; expected it to start with 'backend:'", message);
    if (!strstr(message, "bogus") || !strstr(message, "cpu"))
        fail_msg("message '%s' should name 'bogus' and list the known backends (cpu)", message);
}

int main(void)
{
    int unavailable = th_backend_unavailable_exit();
    if (unavailable >= 0)
        return unavailable;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_fixtures_accepted),
        cmocka_unit_test(test_null_ctx),
        cmocka_unit_test(test_null_q),
        cmocka_unit_test(test_null_k),
        cmocka_unit_test(test_null_v),
        cmocka_unit_test(test_null_o),
        cmocka_unit_test(test_null_data_q),
        cmocka_unit_test(test_null_data_o),
        cmocka_unit_test(test_null_data_lse),
        cmocka_unit_test(test_dtype_mismatch_k),
        cmocka_unit_test(test_dtype_mismatch_v),
        cmocka_unit_test(test_dtype_mismatch_o),
        cmocka_unit_test(test_dtype_unknown),
        cmocka_unit_test(test_lse_not_f32),
        cmocka_unit_test(test_batch_mismatch_k),
        cmocka_unit_test(test_batch_mismatch_o),
        cmocka_unit_test(test_heads_mismatch_v),
        cmocka_unit_test(test_heads_mismatch_o),
        cmocka_unit_test(test_seqlen_mismatch_v),
        cmocka_unit_test(test_seqlen_mismatch_o),
        cmocka_unit_test(test_head_dim_mismatch_qk),
        cmocka_unit_test(test_o_head_dim_vs_v),
        cmocka_unit_test(test_lse_shape),
        cmocka_unit_test(test_heads_not_multiple),
        cmocka_unit_test(test_shape_negative),
        cmocka_unit_test(test_head_dim_too_large),
        cmocka_unit_test(test_kv_heads_zero_with_query_heads),
        cmocka_unit_test(test_empty_tensor_any_strides),
        cmocka_unit_test(test_size_overflow),
        cmocka_unit_test(test_options_struct_size),
        cmocka_unit_test(test_negative_stride),
        cmocka_unit_test(test_zero_stride),
        cmocka_unit_test(test_misaligned_pointer),
        cmocka_unit_test(test_output_aliases_input),
        cmocka_unit_test(test_dropout_out_of_range),
        cmocka_unit_test(test_scale_not_finite),
        cmocka_unit_test(test_bias_not_broadcastable),
        cmocka_unit_test(test_variants_rejected),
        cmocka_unit_test(test_variants_accepted_or_refused_by_name),
        cmocka_unit_test(test_cu_seqlens_non_monotonic),
        cmocka_unit_test(test_cu_seqlens_on_device_checks),
        cmocka_unit_test(test_cu_seqlens_bad_ends),
        cmocka_unit_test(test_cu_seqlens_only_one),
        cmocka_unit_test(test_varlen_batch_not_one),
        cmocka_unit_test(test_varlen_batch_count),
        cmocka_unit_test(test_grad_accum_unknown),
        cmocka_unit_test(test_backward_lse_missing),
        cmocka_unit_test(test_backward_null_tensors),
        cmocka_unit_test(test_backward_dq_shape),
        cmocka_unit_test(test_backward_dtype),
        cmocka_unit_test(test_backward_dout_shape),
        cmocka_unit_test(test_backward_dbias_without_bias),
        cmocka_unit_test(test_backward_dbias_shape),
        cmocka_unit_test(test_backward_output_stride_zero),
        cmocka_unit_test(test_workspace_query_validates),
        cmocka_unit_test(test_unknown_backend),
    };
    return th_exit_code(cmocka_run_group_tests_name("validation", tests, NULL, NULL),
                        (int)(sizeof tests / sizeof tests[0]));
}
