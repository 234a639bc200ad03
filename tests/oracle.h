/*
 * Naive float64 reference for attention forward and backward.
 *
 * Lives only in tests/ and shares nothing with the library except the public
 * descriptors (ffpa_tensor, ffpa_options), the dropout mask definition
 * (common/philox.h, shared by design) and fp16/bf16 decoding (common/dtype.h).
 * It does its own indexing: every input is first copied into a dense float64
 * array over its logical shape, then the textbook formulas run row by row.
 *
 * Dense arrays use the logical shape of the tensor they mirror: q-side arrays
 * are [shape0, Hq, rows_q, D] and k-side arrays [shape0, Hkv, rows_k, D], where
 * shape0 = B and rows = N for dense batches, shape0 = 1 and rows = total rows
 * for varlen batches. LSE is [shape0, Hq, rows_q]. The bias copy and dbias are
 * dense over the *reduced* bias shape: a dimension broadcast by size 1 or by
 * stride 0 has extent 1 there.
 */
#ifndef FFPA_TESTS_ORACLE_H
#define FFPA_TESTS_ORACLE_H

#include <stdint.h>

#include "ffpa.h"

typedef struct oracle_problem {
    int64_t nseq;             /* sequences: B, or varlen_batch */
    int64_t shape0;           /* shape[0] of q/k/v (1 for varlen) */
    int64_t hq, hkv, dqk, dv;
    int64_t rows_q, rows_k;   /* shape[2] of q and of k */
    double *q, *k, *v;        /* dense float64 copies (see above) */
    double *bias;             /* dense over bias_shape, or NULL */
    int64_t bias_shape[4];    /* reduced bias shape */
    double scale;
    int causal;
    int dropout;              /* dropout_p > 0 */
    uint32_t dropout_threshold;
    double dropout_scale;
    uint64_t dropout_seed, dropout_offset;
    int window;               /* opt.window, with its bounds (-1: unbounded) */
    int64_t window_left, window_right;
    double softcap;           /* > 0: scores s -> softcap * tanh(s / softcap) */
    double *alibi;            /* slopes [alibi_b][hq] (alibi_b = 1 or nseq), or NULL */
    int64_t alibi_b;
    int32_t *cu_q, *cu_k;     /* own copies of the offsets, or NULL */
    double o_quantum;         /* rounding of an output element near 0 in the problem's dtype (f16: 2^-25,
                                 half its subnormal step; else 0): backends form Delta from the rounded O */
} oracle_problem;

/* Reads host tensors q, k, v and opt (opt->bias and opt->alibi_slopes, when
 * set, must also be host tensors; cu_seqlens are host arrays as in the API).
 * Returns 0 on success. */
int oracle_problem_init(oracle_problem *p, const ffpa_tensor *q, const ffpa_tensor *k,
                        const ffpa_tensor *v, const ffpa_options *opt);
void oracle_problem_free(oracle_problem *p);

/* Element counts of the dense arrays. */
int64_t oracle_q_elems(const oracle_problem *p);   /* q and dq */
int64_t oracle_k_elems(const oracle_problem *p);   /* k and dk */
int64_t oracle_v_elems(const oracle_problem *p);   /* v and dv */
int64_t oracle_o_elems(const oracle_problem *p);   /* o and dout */
int64_t oracle_lse_elems(const oracle_problem *p);
int64_t oracle_bias_elems(const oracle_problem *p); /* 0 without bias */

/* O [shape0, Hq, rows_q, Dv] and LSE [shape0, Hq, rows_q] (either may be NULL).
 * Fully masked rows: O = 0, LSE = -inf. */
void oracle_forward(const oracle_problem *p, double *o, double *lse);

/* Gradients of L = sum(O * dout). Any output may be NULL. dbias is over the
 * reduced bias shape. */
void oracle_backward(const oracle_problem *p, const double *dout, double *dq, double *dk,
                     double *dv, double *dbias);

/* Gradient arrays (any may be NULL; dbias over the reduced bias shape). */
typedef struct oracle_grads {
    double *dq, *dk, *dv, *dbias;
} oracle_grads;

/*
 * The gradients (ref, as oracle_backward) and, in the same pass, the scale of
 * each gradient element for tolerances (mag): the same sums over the absolute
 * values of their terms, with dS replaced by P * (|dP * keep| + |Delta|). A
 * gradient that cancels to ~0 (a row that sees one key, dbias summed over all
 * keys) still has a rounding-error scale there; a magnitude of exactly 0 means
 * no term contributes (masked, unseen, dropped) and the gradient must be
 * exactly 0.
 */
void oracle_backward_and_magnitude(const oracle_problem *p, const double *dout, const oracle_grads *ref,
                                   const oracle_grads *mag);

/* L = sum(O * g), for finite differences. */
double oracle_loss(const oracle_problem *p, const double *g);

/* Copies a host tensor's logical elements into a dense [s0, s1, s2, s3] array. */
void oracle_read_tensor(const ffpa_tensor *t, double *out);

/* 1 if dimension dim of a bias tensor broadcasts (size 1 or stride 0). */
int oracle_bias_dim_broadcast(const ffpa_tensor *bias, int dim);

#endif
