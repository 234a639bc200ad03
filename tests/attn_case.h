/*
 * One attention test case: a description of shapes and options, and runners
 * that build random inputs on the backend under test, call the library,
 * and compare every output with the float64 oracle (see harness.h for what a
 * comparison checks). Used by test_forward.c and test_backward.c.
 */
#ifndef FFPA_TESTS_ATTN_CASE_H
#define FFPA_TESTS_ATTN_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "ffpa.h"
#include "harness.h"

#define ATTN_MAX_SEQS 8

typedef struct attn_case {
    ffpa_dtype dtype;
    th_layout layout;     /* of q, o, lse (and dq, dout) */
    th_layout kv_layout;  /* of k, v (and dk, dv) */
    int64_t batch, hq, hkv, nq, nkv, dqk, dv;

    /* Varlen when nseq > 0: sequence s has lens_q[s] query and lens_k[s] key
     * rows; batch, nq and nkv are then ignored. */
    int nseq;
    int32_t lens_q[ATTN_MAX_SEQS], lens_k[ATTN_MAX_SEQS];
    /* Varlen offsets in backend memory (opt.cu_seqlens_on_device) with
     * max_seqlen_* the longest sequences (1) or 3 rows more, within the
     * packed rows (2); 0: host arrays. */
    int cu_on_device;

    float scale; /* 0: default 1/sqrt(Dqk) */
    int causal;
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;

    /* Bias [B|1, Hq|1, Nq|1, Nkv|1] (N dims: the longest sequences). */
    int bias;
    ffpa_dtype bias_dtype;
    int bias_size1[4];   /* dimension stored with size 1 */
    int bias_stride0[4]; /* dimension of full size but stride 0 */
    int bias_inf_rows;   /* every third bias row all -inf, plus scattered -inf entries */
    int bias_inf_cols;   /* the first 60% of the key columns -inf in every row (whole
                            KV blocks / splits masked), and row 0 entirely */

    /* Variants: sliding window (bounds -1 = unbounded), logit softcap,
     * ALiBi slopes ([B|1, Hq, 1, 1], random in [0, 0.5]). */
    int window;
    int64_t window_left, window_right;
    float softcap;
    int alibi;
    int alibi_batch;     /* slopes per sequence ([B, Hq]) instead of [1, Hq] */

    double qk_range;     /* q, k uniform in [-qk_range, qk_range] */
    double v_range;      /* v, dout uniform in [-v_range, v_range] */
    int integer_qk;      /* q, k rounded to integers (scores exact in fp32) */
    int with_lse;        /* forward: pass an LSE tensor (backward always does) */

    /* Backward. */
    ffpa_grad_accum grad_accum;
    int deterministic;   /* also run twice and require identical bytes */
    int dbias;
    ffpa_dtype dbias_dtype;
    int finite_differences; /* also check gradients against central differences of
                               the oracle's loss sum(O * dout) (keep shapes tiny) */
    double max_abs_dv;   /* > 0: also require max |dV - dV_ref| <= this, and print
                            the largest absolute errors of dQ, dK, dV */

    double tol_factor;   /* 1 unless the test says why */
    uint64_t seed;       /* input RNG seed */
} attn_case;

/* B=1, Hq=Hkv=2, Nq=Nkv=n, Dqk=Dv=d, BHND, no options, q/k in [-2, 2]
 * (scores of standard deviation ~1.3, so the softmax is far from uniform). */
attn_case attn_case_default(ffpa_dtype dtype, int64_t n, int64_t d);

/* A random combination of dtype, layouts, shapes and options (small shapes;
 * D up to 512 forward, 320 backward). */
attn_case attn_case_random(uint64_t seed, int for_backward);
/* The variants' cases, shared by the forward and backward suites (head dim
 * d, seeds fixed): window i < ATTN_WINDOW_CASES (narrower than a tile, wider
 * than N, one-sided, causal, cross, rows that see nothing), softcap i < 4
 * (strong and mild, with bias, dropout, causal), ALiBi i < 4 (per head and
 * per sequence, causal, cross with GQA, varlen), and all at once. */
#define ATTN_WINDOW_CASES 10
attn_case attn_case_window(ffpa_dtype dtype, int i, int64_t d);
attn_case attn_case_softcap(ffpa_dtype dtype, int i, int64_t d);
attn_case attn_case_alibi(ffpa_dtype dtype, int i, int64_t d);
attn_case attn_case_variants_combined(ffpa_dtype dtype, int64_t d);

/* One line describing a case, for failure messages. */
void attn_case_describe(const attn_case *c, char *buf, size_t len);

void attn_run_forward(const attn_case *c);
void attn_run_backward(const attn_case *c);

/* One accumulation mode's run of a backward case, and how it is checked. */
typedef struct attn_accum_check {
    ffpa_grad_accum grad_accum;
    double tol_factor;
    double max_abs_dv; /* as attn_case's */
} attn_accum_check;
/* The case's backward once per check, on the same inputs and dout against one
 * oracle computation (the case's grad_accum, tol_factor, max_abs_dv unused). */
void attn_run_backward_accums(const attn_case *c, const attn_accum_check *checks, int n_checks);

#endif
