/*
 * Host allocation failures (built with -Dalloc-failure-injection=true; CI
 * runs it in the AddressSanitizer build, whose leak check sees anything a
 * failure path forgets): for every N, the N-th host allocation of a call
 * sequence fails, and each call must return FFPA_ERR_OUT_OF_MEMORY with a
 * message (or succeed where it did not need that allocation), write no
 * output when it fails, and leave the context usable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ffpa.h"
#include "host_alloc.h"

enum { B = 2, HQ = 4, HKV = 2, NQ = 9, NKV = 13, D = 24, POISON = 0x5A };

typedef struct buffers {
    float q[B * HQ * NQ * D], k[B * HKV * NKV * D], v[B * HKV * NKV * D], dout[B * HQ * NQ * D];
    float o[B * HQ * NQ * D], lse[B * HQ * NQ], dq[B * HQ * NQ * D], dk[B * HKV * NKV * D],
        dv[B * HKV * NKV * D];
} buffers;

static buffers bufs, snapshot;

static void arm(long n)
{
    char v[32];
    snprintf(v, sizeof v, "%ld", n);
    setenv("FFPA_FAIL_ALLOC", v, 1);
}

static void disarm(void)
{
    setenv("FFPA_FAIL_ALLOC", "", 1);
}

static void reset_buffers(void)
{
    for (size_t i = 0; i < sizeof bufs.q / sizeof(float); ++i)
        bufs.q[i] = bufs.dout[i] = (float)((i * 7919) % 13) * 0.25f - 1.5f;
    for (size_t i = 0; i < sizeof bufs.k / sizeof(float); ++i)
        bufs.k[i] = bufs.v[i] = (float)((i * 104729) % 11) * 0.25f - 1.25f;
    memset(bufs.o, POISON, sizeof bufs.o);
    memset(bufs.lse, POISON, sizeof bufs.lse);
    memset(bufs.dq, POISON, sizeof bufs.dq);
    memset(bufs.dk, POISON, sizeof bufs.dk);
    memset(bufs.dv, POISON, sizeof bufs.dv);
    snapshot = bufs;
}

/* A call that failed: out of memory, said so, wrote nothing. */
static void expect_clean_failure(ffpa_context *ctx, ffpa_status st, const char *call, long n)
{
    if (st != FFPA_ERR_OUT_OF_MEMORY)
        fail_msg("%s with allocation %ld failing: status %d (%s), expected out of memory; '%s'", call, n,
                 (int)st, ffpa_status_string(st), ffpa_last_error(ctx));
    if (!ffpa_last_error(ctx)[0])
        fail_msg("%s: out of memory without a message", call);
    if (memcmp(&bufs, &snapshot, sizeof bufs) != 0)
        fail_msg("%s with allocation %ld failing wrote an output", call, n);
}

/* One sequence of calls; returns 1 when the armed failure hit (and was
 * handled), 0 when the sequence never reached allocation n. */
static int run_sequence(long n, int64_t dqk, int64_t nkv)
{
    reset_buffers();
    const long before = ffpa_alloc_failures_injected();
    arm(n);
    ffpa_context *ctx = NULL;
    ffpa_status st = ffpa_create(&ctx, "cpu");
    if (st != FFPA_OK) {
        disarm();
        if (st != FFPA_ERR_OUT_OF_MEMORY || !ffpa_last_error(NULL)[0])
            fail_msg("ffpa_create with allocation %ld failing: status %d, '%s'", n, (int)st,
                     ffpa_last_error(NULL));
        return 1;
    }
    ffpa_tensor q = ffpa_tensor_bhnd(bufs.q, FFPA_F32, B, HQ, NQ, dqk);
    ffpa_tensor k = ffpa_tensor_bhnd(bufs.k, FFPA_F32, B, HKV, nkv, dqk);
    ffpa_tensor v = ffpa_tensor_bhnd(bufs.v, FFPA_F32, B, HKV, nkv, D);
    ffpa_tensor o = ffpa_tensor_bhnd(bufs.o, FFPA_F32, B, HQ, NQ, D);
    ffpa_tensor lse = ffpa_tensor_bhnd(bufs.lse, FFPA_F32, B, HQ, NQ, 1);
    ffpa_tensor dout = ffpa_tensor_bhnd(bufs.dout, FFPA_F32, B, HQ, NQ, D);
    ffpa_tensor dq = ffpa_tensor_bhnd(bufs.dq, FFPA_F32, B, HQ, NQ, dqk);
    ffpa_tensor dk = ffpa_tensor_bhnd(bufs.dk, FFPA_F32, B, HKV, nkv, dqk);
    ffpa_tensor dv = ffpa_tensor_bhnd(bufs.dv, FFPA_F32, B, HKV, nkv, D);
    ffpa_options opt = ffpa_options_default();
    opt.causal = 1;
    opt.dropout_p = 0.25f;
    int hit = 0;
    st = ffpa_forward(ctx, &q, &k, &v, &o, &lse, &opt);
    if (ffpa_alloc_failures_injected() != before) {
        if (st != FFPA_OK)
            expect_clean_failure(ctx, st, "ffpa_forward", n);
        hit = 1;
    } else {
        assert_int_equal(st, FFPA_OK);
        snapshot = bufs; /* the forward's outputs are the backward's inputs */
        st = ffpa_backward(ctx, &dout, &q, &k, &v, &o, &lse, &dq, &dk, &dv, &opt);
        if (ffpa_alloc_failures_injected() != before) {
            if (st != FFPA_OK)
                expect_clean_failure(ctx, st, "ffpa_backward", n);
            hit = 1;
        } else {
            assert_int_equal(st, FFPA_OK);
        }
    }
    disarm();
    if (hit) { /* the context still works */
        reset_buffers();
        st = ffpa_forward(ctx, &q, &k, &v, &o, &lse, &opt);
        if (st != FFPA_OK)
            fail_msg("the context after a failed allocation: %s", ffpa_last_error(ctx));
    }
    ffpa_destroy(ctx);
    return hit;
}

static void every_allocation(int64_t dqk, int64_t nkv, const char *what)
{
    long n = 1;
    while (run_sequence(n, dqk, nkv))
        ++n;
    print_message("# %s: %ld host allocations, each failed in turn\n", what, n - 1);
    assert_true(n > 1); /* at least ffpa_create's */
}

static void test_plain(void **state)
{
    (void)state;
    every_allocation(D, NKV, "create + forward + backward");
}

static void test_zero_width_head(void **state)
{
    (void)state;
    every_allocation(0, NKV, "Dqk = 0 (one-column pads)");
}

static void test_no_keys(void **state)
{
    (void)state;
    every_allocation(D, 0, "Nkv = 0 (filled outputs)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_zero_width_head),
        cmocka_unit_test(test_no_keys),
    };
    return cmocka_run_group_tests_name("alloc_failures", tests, NULL, NULL);
}
