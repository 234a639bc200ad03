/* Naive float64 attention reference. See oracle.h. */
#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "philox.h"

static int64_t elems4(const int64_t shape[4])
{
    return shape[0] * shape[1] * shape[2] * shape[3];
}

/* Dot product in four running sums: breaks the add chain (the oracle's time goes
 * to these loops; float64 keeps its error far below any tolerance it checks). */
static double dot(const double *restrict a, const double *restrict b, int64_t n)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t d = 0;
    for (; d + 4 <= n; d += 4) {
        s0 += a[d] * b[d];
        s1 += a[d + 1] * b[d + 1];
        s2 += a[d + 2] * b[d + 2];
        s3 += a[d + 3] * b[d + 3];
    }
    for (; d < n; ++d)
        s0 += a[d] * b[d];
    return (s0 + s1) + (s2 + s3);
}

/* y += a * x (y and x never overlap: gradients and inputs are separate arrays). */
static void axpy(double *restrict y, double a, const double *restrict x, int64_t n)
{
    for (int64_t d = 0; d < n; ++d)
        y[d] += a * x[d];
}

/* y += a * |x|. */
static void axpy_abs(double *restrict y, double a, const double *restrict x, int64_t n)
{
    for (int64_t d = 0; d < n; ++d)
        y[d] += a * fabs(x[d]);
}

void oracle_read_tensor(const ffpa_tensor *t, double *out)
{
    int64_t n = 0;
    for (int64_t a = 0; a < t->shape[0]; ++a)
        for (int64_t b = 0; b < t->shape[1]; ++b)
            for (int64_t c = 0; c < t->shape[2]; ++c)
                for (int64_t d = 0; d < t->shape[3]; ++d) {
                    int64_t off = a * t->stride[0] + b * t->stride[1] + c * t->stride[2] +
                                  d * t->stride[3];
                    out[n++] = ffpa_load_f32(t->data, t->dtype, off);
                }
}

int oracle_bias_dim_broadcast(const ffpa_tensor *bias, int dim)
{
    return bias->shape[dim] == 1 || bias->stride[dim] == 0;
}

static double *read_dense(const ffpa_tensor *t)
{
    double *out = malloc(sizeof(double) * (size_t)(elems4(t->shape) ? elems4(t->shape) : 1));
    if (out)
        oracle_read_tensor(t, out);
    return out;
}

static int32_t *copy_offsets(const int32_t *cu, int64_t nseq)
{
    if (!cu)
        return NULL;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(nseq + 1));
    if (out)
        memcpy(out, cu, sizeof(int32_t) * (size_t)(nseq + 1));
    return out;
}

static int64_t seqlen_q(const oracle_problem *p, int64_t s)
{
    return p->cu_q ? (int64_t)p->cu_q[s + 1] - p->cu_q[s] : p->rows_q;
}

static int64_t seqlen_k(const oracle_problem *p, int64_t s)
{
    return p->cu_k ? (int64_t)p->cu_k[s + 1] - p->cu_k[s] : p->rows_k;
}

/* Index of row i of sequence s, head h in a dense q-side / k-side array. */
static int64_t q_row(const oracle_problem *p, int64_t s, int64_t h, int64_t i)
{
    int64_t tb = p->cu_q ? 0 : s;
    int64_t row = p->cu_q ? p->cu_q[s] + i : i;
    return (tb * p->hq + h) * p->rows_q + row;
}

static int64_t k_row(const oracle_problem *p, int64_t s, int64_t h, int64_t j)
{
    int64_t tb = p->cu_k ? 0 : s;
    int64_t row = p->cu_k ? p->cu_k[s] + j : j;
    return (tb * p->hkv + h) * p->rows_k + row;
}

static int64_t bias_index(const oracle_problem *p, int64_t s, int64_t h, int64_t i, int64_t j)
{
    const int64_t *e = p->bias_shape;
    int64_t a = e[0] == 1 ? 0 : s, b = e[1] == 1 ? 0 : h, c = e[2] == 1 ? 0 : i,
            d = e[3] == 1 ? 0 : j;
    return ((a * e[1] + b) * e[2] + c) * e[3] + d;
}

int oracle_problem_init(oracle_problem *p, const ffpa_tensor *q, const ffpa_tensor *k,
                        const ffpa_tensor *v, const ffpa_options *opt)
{
    ffpa_options defaults;
    memset(&defaults, 0, sizeof defaults);
    if (!opt)
        opt = &defaults;
    memset(p, 0, sizeof *p);
    int varlen = opt->cu_seqlens_q != NULL;
    p->nseq = varlen ? opt->varlen_batch : q->shape[0];
    p->shape0 = q->shape[0];
    p->hq = q->shape[1];
    p->hkv = k->shape[1];
    p->rows_q = q->shape[2];
    p->rows_k = k->shape[2];
    p->dqk = q->shape[3];
    p->o_quantum = q->dtype == FFPA_F16 ? ldexp(1.0, -25) : 0.0;
    p->dv = v->shape[3];
    if ((p->hkv < 1 && p->hq != 0) || (p->hkv && p->hq % p->hkv != 0) || k->shape[3] != p->dqk ||
        v->shape[2] != p->rows_k)
        return -1;
    /* Dqk = 0: every score is an empty dot product, 0 (the library takes scale 1). */
    p->scale = opt->scale != 0.0f ? (double)opt->scale : p->dqk ? 1.0 / sqrt((double)p->dqk) : 1.0;
    p->causal = opt->causal;
    p->dropout = opt->dropout_p > 0.0f;
    p->dropout_threshold = ffpa_dropout_threshold((double)opt->dropout_p);
    p->dropout_scale = 1.0 / (1.0 - (double)opt->dropout_p);
    p->dropout_seed = opt->dropout_seed;
    p->dropout_offset = opt->dropout_offset;
    p->window = opt->window;
    p->window_left = opt->window_left;
    p->window_right = opt->window_right;
    p->softcap = opt->softcap;
    if (opt->alibi_slopes) {
        const ffpa_tensor *a = opt->alibi_slopes;
        p->alibi_b = oracle_bias_dim_broadcast(a, 0) ? 1 : a->shape[0];
        p->alibi = malloc(sizeof(double) * (size_t)(p->alibi_b * p->hq + 1));
        if (!p->alibi || a->shape[1] != p->hq)
            return -1;
        for (int64_t b = 0; b < p->alibi_b; ++b)
            for (int64_t h = 0; h < p->hq; ++h)
                p->alibi[b * p->hq + h] = ffpa_load_f32(a->data, a->dtype, b * a->stride[0] + h * a->stride[1]);
    }
    if (varlen) {
        if (!opt->cu_seqlens_k || p->shape0 != 1)
            return -1;
        p->cu_q = copy_offsets(opt->cu_seqlens_q, p->nseq);
        p->cu_k = copy_offsets(opt->cu_seqlens_k, p->nseq);
        if (!p->cu_q || !p->cu_k)
            return -1;
        if (p->cu_q[p->nseq] != p->rows_q || p->cu_k[p->nseq] != p->rows_k)
            return -1;
    }
    p->q = read_dense(q);
    p->k = read_dense(k);
    p->v = read_dense(v);
    if (!p->q || !p->k || !p->v)
        return -1;
    if (opt->bias) {
        const ffpa_tensor *bias = opt->bias;
        for (int d = 0; d < 4; ++d)
            p->bias_shape[d] = oracle_bias_dim_broadcast(bias, d) ? 1 : bias->shape[d];
        if ((p->bias_shape[0] != 1 && p->bias_shape[0] != p->nseq) ||
            (p->bias_shape[1] != 1 && p->bias_shape[1] != p->hq))
            return -1;
        for (int64_t s = 0; s < p->nseq; ++s)
            if ((p->bias_shape[2] != 1 && seqlen_q(p, s) > p->bias_shape[2]) ||
                (p->bias_shape[3] != 1 && seqlen_k(p, s) > p->bias_shape[3]))
                return -1;
        p->bias = malloc(sizeof(double) * (size_t)elems4(p->bias_shape));
        if (!p->bias)
            return -1;
        int64_t n = 0;
        for (int64_t a = 0; a < p->bias_shape[0]; ++a)
            for (int64_t b = 0; b < p->bias_shape[1]; ++b)
                for (int64_t c = 0; c < p->bias_shape[2]; ++c)
                    for (int64_t d = 0; d < p->bias_shape[3]; ++d)
                        p->bias[n++] = ffpa_load_f32(
                            bias->data, bias->dtype,
                            a * bias->stride[0] + b * bias->stride[1] + c * bias->stride[2] +
                                d * bias->stride[3]);
    }
    return 0;
}

void oracle_problem_free(oracle_problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->bias);
    free(p->alibi);
    free(p->cu_q);
    free(p->cu_k);
    memset(p, 0, sizeof *p);
}

int64_t oracle_q_elems(const oracle_problem *p)
{
    return p->shape0 * p->hq * p->rows_q * p->dqk;
}
int64_t oracle_k_elems(const oracle_problem *p)
{
    return p->shape0 * p->hkv * p->rows_k * p->dqk;
}
int64_t oracle_v_elems(const oracle_problem *p)
{
    return p->shape0 * p->hkv * p->rows_k * p->dv;
}
int64_t oracle_o_elems(const oracle_problem *p)
{
    return p->shape0 * p->hq * p->rows_q * p->dv;
}
int64_t oracle_lse_elems(const oracle_problem *p)
{
    return p->shape0 * p->hq * p->rows_q;
}
int64_t oracle_bias_elems(const oracle_problem *p)
{
    return p->bias ? elems4(p->bias_shape) : 0;
}

/* Does query row i see key column j (causal, window; diag = i + lk - lq)? */
static int visible(const oracle_problem *p, int64_t diag, int64_t j)
{
    if (p->causal && j > diag)
        return 0;
    if (p->window && p->window_left >= 0 && j < diag - p->window_left)
        return 0;
    if (p->window && p->window_right >= 0 && j > diag + p->window_right)
        return 0;
    return 1;
}

/*
 * Softmax row of (sequence s, head h, row i): prob[j] = P (before dropout),
 * mult[j] = dropout multiplier (0 or 1/(1-p); 1 without dropout), cap[j] (when
 * not NULL) = d(score)/d(scale * dot): softcap's 1 - tanh^2, else 1. Returns
 * the LSE (-inf when the row sees no key). The score: scale * dot, capped,
 * plus bias and ALiBi, -inf outside the causal diagonal and the window.
 */
static double softmax_row(const oracle_problem *p, int64_t s, int64_t h, int64_t i, int64_t lq,
                          int64_t lk, double *prob, double *mult, double *cap)
{
    int64_t group = p->hkv ? p->hq / p->hkv : 1;
    const double *qi = p->q + q_row(p, s, h, i) * p->dqk;
    const int64_t diag = i + (lk - lq);
    const double slope = p->alibi ? p->alibi[(p->alibi_b == 1 ? 0 : s) * p->hq + h] : 0.0;
    double row_max = -INFINITY;
    for (int64_t j = 0; j < lk; ++j) {
        double score;
        if (cap)
            cap[j] = 1.0;
        if (!visible(p, diag, j)) {
            score = -INFINITY;
        } else {
            const double *kj = p->k + k_row(p, s, h / group, j) * p->dqk;
            score = p->scale * dot(qi, kj, p->dqk);
            if (p->softcap > 0.0) {
                const double t = tanh(score / p->softcap);
                score = p->softcap * t;
                if (cap)
                    cap[j] = 1.0 - t * t;
            }
            if (p->bias)
                score += p->bias[bias_index(p, s, h, i, j)];
            if (p->alibi)
                score -= slope * fabs((double)(diag - j));
        }
        prob[j] = score;
        if (score > row_max)
            row_max = score;
    }
    if (row_max == -INFINITY) {
        for (int64_t j = 0; j < lk; ++j)
            prob[j] = mult[j] = 0.0;
        return -INFINITY;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < lk; ++j) {
        prob[j] = exp(prob[j] - row_max);
        sum += prob[j];
    }
    for (int64_t j = 0; j < lk; ++j) {
        prob[j] /= sum;
        mult[j] = 1.0;
        if (p->dropout)
            mult[j] = ffpa_dropout_keep(p->dropout_seed, p->dropout_offset, p->dropout_threshold,
                                        p->hq, s, h, i, j)
                          ? p->dropout_scale
                          : 0.0;
    }
    return row_max + log(sum);
}

static int64_t max_seqlen_k(const oracle_problem *p)
{
    int64_t m = 1;
    for (int64_t s = 0; s < p->nseq; ++s)
        if (seqlen_k(p, s) > m)
            m = seqlen_k(p, s);
    return m;
}

void oracle_forward(const oracle_problem *p, double *o, double *lse)
{
    int64_t group = p->hkv ? p->hq / p->hkv : 1;
    int64_t width = max_seqlen_k(p);
    double *prob = malloc(sizeof(double) * (size_t)width);
    double *mult = malloc(sizeof(double) * (size_t)width);
    if (o)
        memset(o, 0, sizeof(double) * (size_t)oracle_o_elems(p));
    for (int64_t s = 0; s < p->nseq; ++s) {
        int64_t lq = seqlen_q(p, s), lk = seqlen_k(p, s);
        for (int64_t h = 0; h < p->hq; ++h)
            for (int64_t i = 0; i < lq; ++i) {
                int64_t row = q_row(p, s, h, i);
                double row_lse = softmax_row(p, s, h, i, lq, lk, prob, mult, NULL);
                if (lse)
                    lse[row] = row_lse;
                if (!o)
                    continue;
                double *oi = o + row * p->dv;
                for (int64_t j = 0; j < lk; ++j) {
                    double w = prob[j] * mult[j];
                    if (w == 0.0)
                        continue;
                    axpy(oi, w, p->v + k_row(p, s, h / group, j) * p->dv, p->dv);
                }
            }
    }
    free(prob);
    free(mult);
}

static void zero_grads(const oracle_problem *p, const oracle_grads *g)
{
    if (g->dq)
        memset(g->dq, 0, sizeof(double) * (size_t)oracle_q_elems(p));
    if (g->dk)
        memset(g->dk, 0, sizeof(double) * (size_t)oracle_k_elems(p));
    if (g->dv)
        memset(g->dv, 0, sizeof(double) * (size_t)oracle_v_elems(p));
    if (g->dbias && p->bias)
        memset(g->dbias, 0, sizeof(double) * (size_t)oracle_bias_elems(p));
}

/* The gradients (ref) and, when mag is not NULL, their magnitudes in the same
 * pass (one softmax row, O row and dP per key serve both): the same sums over
 * absolute values of their terms, with dS replaced by P * (|dP * keep| + |Delta|). */
static void backward_sums(const oracle_problem *p, const double *dout, const oracle_grads *ref,
                          const oracle_grads *mag)
{
    int64_t group = p->hkv ? p->hq / p->hkv : 1;
    int64_t width = max_seqlen_k(p);
    double *prob = malloc(sizeof(double) * (size_t)width);
    double *mult = malloc(sizeof(double) * (size_t)width);
    double *cap = malloc(sizeof(double) * (size_t)width);
    double *orow = malloc(sizeof(double) * (size_t)p->dv);
    double *gabs = malloc(sizeof(double) * (size_t)p->dv);
    double *qabs = malloc(sizeof(double) * (size_t)p->dqk);
    const double abs_scale = fabs(p->scale);
    zero_grads(p, ref);
    if (mag)
        zero_grads(p, mag);
    for (int64_t s = 0; s < p->nseq; ++s) {
        int64_t lq = seqlen_q(p, s), lk = seqlen_k(p, s);
        for (int64_t h = 0; h < p->hq; ++h)
            for (int64_t i = 0; i < lq; ++i) {
                int64_t row = q_row(p, s, h, i);
                softmax_row(p, s, h, i, lq, lk, prob, mult, cap);
                const double *gi = dout + row * p->dv;
                const double *qi = p->q + row * p->dqk;
                /* O row and Delta = rowsum(dO * O). */
                memset(orow, 0, sizeof(double) * (size_t)p->dv);
                for (int64_t j = 0; j < lk; ++j)
                    if (prob[j] * mult[j] != 0.0)
                        axpy(orow, prob[j] * mult[j], p->v + k_row(p, s, h / group, j) * p->dv, p->dv);
                double delta = dot(gi, orow, p->dv), delta_mag = 0.0;
                for (int64_t d = 0; d < p->dv; ++d) {
                    gabs[d] = fabs(gi[d]);
                    /* Backends form Delta from O rounded to the output dtype:
                     * its error scales with sum |dO * O| (Delta itself may
                     * cancel to ~0, e.g. one key: dS = P (dP - Delta) = 0),
                     * plus, in f16, the absolute rounding of O near 0. */
                    delta_mag += gabs[d] * (fabs(orow[d]) + p->o_quantum);
                }
                for (int64_t d = 0; d < p->dqk; ++d)
                    qabs[d] = fabs(qi[d]);
                for (int64_t j = 0; j < lk; ++j) {
                    if (prob[j] == 0.0)
                        continue;
                    int64_t kr = k_row(p, s, h / group, j);
                    const double *vj = p->v + kr * p->dv;
                    const double *kj = p->k + kr * p->dqk;
                    const double dp = dot(gi, vj, p->dv);
                    const double pd = prob[j] * mult[j];
                    const double ds = prob[j] * (dp * mult[j] - delta);
                    const double dsq = p->scale * ds * cap[j]; /* d(scale * dot): through softcap */
                    if (ref->dv)
                        axpy(ref->dv + kr * p->dv, pd, gi, p->dv);
                    if (ref->dq)
                        axpy(ref->dq + row * p->dqk, dsq, kj, p->dqk);
                    if (ref->dk)
                        axpy(ref->dk + kr * p->dqk, dsq, qi, p->dqk);
                    if (ref->dbias && p->bias)
                        ref->dbias[bias_index(p, s, h, i, j)] += ds;
                    if (!mag)
                        continue;
                    const double ds_mag = prob[j] * (fabs(dp * mult[j]) + delta_mag);
                    const double dsq_mag = abs_scale * ds_mag * cap[j];
                    if (mag->dv)
                        axpy(mag->dv + kr * p->dv, pd, gabs, p->dv);
                    if (mag->dq)
                        axpy_abs(mag->dq + row * p->dqk, dsq_mag, kj, p->dqk);
                    if (mag->dk)
                        axpy(mag->dk + kr * p->dqk, dsq_mag, qabs, p->dqk);
                    if (mag->dbias && p->bias)
                        mag->dbias[bias_index(p, s, h, i, j)] += ds_mag;
                }
            }
    }
    free(prob);
    free(mult);
    free(cap);
    free(orow);
    free(gabs);
    free(qabs);
}

void oracle_backward(const oracle_problem *p, const double *dout, double *dq, double *dk,
                     double *dv, double *dbias)
{
    const oracle_grads ref = {dq, dk, dv, dbias};
    backward_sums(p, dout, &ref, NULL);
}

void oracle_backward_and_magnitude(const oracle_problem *p, const double *dout, const oracle_grads *ref,
                                   const oracle_grads *mag)
{
    backward_sums(p, dout, ref, mag);
}

double oracle_loss(const oracle_problem *p, const double *g)
{
    int64_t n = oracle_o_elems(p);
    double *o = malloc(sizeof(double) * (size_t)(n ? n : 1));
    oracle_forward(p, o, NULL);
    double loss = 0.0;
    for (int64_t e = 0; e < n; ++e)
        loss += o[e] * g[e];
    free(o);
    return loss;
}
