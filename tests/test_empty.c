/*
 * Zero-size dimensions, each in turn, forward and backward, on the backend
 * under test against the float64 oracle: every dimension of every tensor
 * may be 0 (PyTorch's rules: O = 0 and LSE = -inf for rows that see no key,
 * zero gradients where nothing flows, uniform attention at Dqk = 0; empty
 * outputs untouched). Outputs are poisoned before each call and every
 * element is checked (attn_case.c), with varied strides and layouts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "attn_case.h"
#include "harness.h"

enum { ZERO_B, ZERO_H, ZERO_NQ, ZERO_NKV, ZERO_DQK, ZERO_DV, ZERO_DIMS };
static const char *const ZERO_NAME[ZERO_DIMS] = {"B", "H", "Nq", "Nkv", "Dqk", "Dv"};

/* A small GQA case with one dimension set to 0. */
static attn_case zero_case(int which, ffpa_dtype dtype, th_layout layout, uint64_t seed)
{
    attn_case c = attn_case_default(dtype, 19, 24);
    c.batch = 2, c.hq = 4, c.hkv = 2, c.nq = 13, c.nkv = 21, c.dqk = 24, c.dv = 40;
    c.layout = layout;
    c.kv_layout = layout == TH_BHND ? TH_BNHD : TH_BHND;
    c.with_lse = 1;
    c.seed = seed;
    switch (which) {
    case ZERO_B: c.batch = 0; break;
    case ZERO_H: c.hq = c.hkv = 0; break;
    case ZERO_NQ: c.nq = 0; break;
    case ZERO_NKV: c.nkv = 0; break;
    case ZERO_DQK: c.dqk = 0; break;
    default: c.dv = 0; break;
    }
    return c;
}

static void test_forward_each_zero_dim(void **state)
{
    (void)state;
    for (int which = 0; which < ZERO_DIMS; ++which)
        for (int causal = 0; causal < 2; ++causal) {
            print_message("# forward, %s = 0, causal %d\n", ZERO_NAME[which], causal);
            attn_case c = zero_case(which, th_fixture_dtype(), causal ? TH_BNHD : TH_BHND, 100 + which);
            c.causal = causal;
            attn_run_forward(&c);
            c.with_lse = 0;
            attn_run_forward(&c);
        }
}

static void test_backward_each_zero_dim(void **state)
{
    (void)state;
    for (int which = 0; which < ZERO_DIMS; ++which)
        for (int causal = 0; causal < 2; ++causal) {
            print_message("# backward, %s = 0, causal %d\n", ZERO_NAME[which], causal);
            attn_case c = zero_case(which, th_fixture_dtype(), causal ? TH_BHND : TH_BNHD, 200 + which);
            c.causal = causal;
            attn_run_backward(&c);
        }
}

/* With options: bias + dbias, dropout, fp32 / bf16 / f16. */
static void test_zero_dims_with_options(void **state)
{
    (void)state;
    const ffpa_dtype dtypes[] = {FFPA_F32, FFPA_BF16, FFPA_F16};
    for (int which = 0; which < ZERO_DIMS; ++which) {
        attn_case c = zero_case(which, dtypes[which % 3], TH_BHND, 300 + which);
        c.bias = 1;
        c.bias_dtype = c.dtype;
        c.dbias = 1;
        c.dbias_dtype = FFPA_F32;
        attn_run_forward(&c);
        attn_run_backward(&c);
        c.bias = c.dbias = 0;
        c.dropout_p = 0.25f;
        c.dropout_seed = 7;
        attn_run_forward(&c);
        attn_run_backward(&c);
    }
}

/* Varlen whose every key (or query) length is 0: the shapes PyTorch gives
 * empty packed tensors, [1, H, 0, D] with strides of a contiguous tensor. */
static void test_varlen_all_lengths_zero(void **state)
{
    (void)state;
    for (int side = 0; side < 2; ++side) {
        attn_case c = zero_case(-1, th_fixture_dtype(), TH_BHND, 400 + side);
        c.dv = c.dqk;
        c.nseq = 3;
        for (int s = 0; s < 3; ++s) {
            c.lens_q[s] = side == 0 ? 5 + s : 0;
            c.lens_k[s] = side == 0 ? 0 : 7 + s;
        }
        attn_run_forward(&c);
        attn_run_backward(&c);
    }
}

int main(void)
{
    int unavailable = th_backend_unavailable_exit();
    if (unavailable >= 0)
        return unavailable;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_each_zero_dim),
        cmocka_unit_test(test_backward_each_zero_dim),
        cmocka_unit_test(test_zero_dims_with_options),
        cmocka_unit_test(test_varlen_all_lengths_zero),
    };
    return th_exit_code(cmocka_run_group_tests_name("empty", tests, NULL, NULL),
                        (int)(sizeof tests / sizeof tests[0]));
}
