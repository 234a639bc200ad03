/* Attention test cases against the oracle. See attn_case.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "attn_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

attn_case attn_case_default(ffpa_dtype dtype, int64_t n, int64_t d)
{
    attn_case c;
    memset(&c, 0, sizeof c);
    c.dtype = dtype;
    c.layout = c.kv_layout = TH_BHND;
    c.batch = 1;
    c.hq = c.hkv = 2;
    c.nq = c.nkv = n;
    c.dqk = c.dv = d;
    c.dropout_seed = 0x5EED5EEDull;
    c.dropout_offset = 3;
    c.bias_dtype = dtype;
    c.qk_range = 2.0;
    c.v_range = 1.0;
    c.with_lse = 1;
    c.grad_accum = FFPA_GRAD_ACCUM_F32;
    c.dbias_dtype = FFPA_F32;
    c.tol_factor = 1.0;
    c.seed = 1234;
    return c;
}

static uint64_t pick(th_rng *rng, uint64_t n)
{
    return th_rng_next(rng) % n;
}

attn_case attn_case_random(uint64_t seed, int for_backward)
{
    th_rng rng = th_rng_seeded(seed * 7919 + 17);
    const ffpa_dtype dtypes[] = {FFPA_F16, FFPA_BF16, FFPA_F32};
    const th_layout layouts[] = {TH_BHND, TH_BNHD, TH_PADDED};
    const int64_t dims[] = {1, 8, 16, 40, 64, 72, 128, 136, 256, 264, 320, 512};
    const int64_t lengths[] = {1, 2, 7, 16, 17, 63, 64, 65, 100};
    int n_dims = for_backward ? 11 : 12;
    attn_case c = attn_case_default(dtypes[pick(&rng, 3)], 1, dims[pick(&rng, (uint64_t)n_dims)]);
    c.seed = seed;
    c.layout = layouts[pick(&rng, 3)];
    c.kv_layout = layouts[pick(&rng, 3)];
    c.hkv = 1 + (int64_t)pick(&rng, 2);
    c.hq = c.hkv * (int64_t[]){1, 2, 4}[pick(&rng, 3)];
    if (pick(&rng, 5) == 0)
        c.dv = dims[pick(&rng, (uint64_t)n_dims)];
    if (pick(&rng, 10) < 3) {
        c.nseq = 1 + (int)pick(&rng, 4);
        int32_t total_q = 0, total_k = 0;
        for (int s = 0; s < c.nseq; ++s) {
            c.lens_q[s] = (int32_t)pick(&rng, 41);
            c.lens_k[s] = (int32_t)pick(&rng, 41);
            total_q += c.lens_q[s];
            total_k += c.lens_k[s];
        }
        if (total_q == 0)
            c.lens_q[0] = 3;
        if (total_k == 0)
            c.lens_k[c.nseq - 1] = 5;
        c.cu_on_device = (int)((seed >> 3) % 3); /* from the seed: the other draws stay as they were */
    } else {
        c.batch = 1 + (int64_t)pick(&rng, 3);
        c.nq = lengths[pick(&rng, 9)];
        c.nkv = lengths[pick(&rng, 9)];
    }
    c.causal = (int)pick(&rng, 2);
    if (pick(&rng, 5) < 2) {
        c.bias = 1;
        c.bias_dtype = dtypes[pick(&rng, 3)];
        for (int d = 0; d < 4; ++d) {
            uint64_t mode = pick(&rng, 4);
            c.bias_size1[d] = mode == 1;
            c.bias_stride0[d] = mode == 2;
        }
        c.bias_inf_rows = pick(&rng, 5) == 0;
        if (for_backward && pick(&rng, 2)) {
            c.dbias = 1;
            c.dbias_dtype = pick(&rng, 2) ? FFPA_F32 : c.bias_dtype;
        }
    }
    if (pick(&rng, 10) < 3) {
        c.dropout_p = pick(&rng, 2) ? 0.1f : 0.5f;
        c.dropout_seed = th_rng_next(&rng);
        c.dropout_offset = pick(&rng, 1000);
    }
    if (pick(&rng, 2))
        c.scale = (float)th_rng_uniform(&rng, 0.05, 0.5);
    if (for_backward) {
        if (pick(&rng, 3) == 0) {
            c.grad_accum = FFPA_GRAD_ACCUM_OUTPUT;
            c.tol_factor = 2.5; /* see test_grad_accum in test_backward.c */
        }
        c.deterministic = pick(&rng, 3) == 0;
    }
    /* Variants, drawn after everything else so older seeds keep their cases. */
    if (pick(&rng, 4) == 0) {
        c.window = 1;
        c.window_left = (int64_t)pick(&rng, 40) - 1;
        c.window_right = (int64_t)pick(&rng, 40) - 1;
    }
    if (pick(&rng, 5) == 0)
        c.softcap = pick(&rng, 2) ? 1.0f : 30.0f;
    if (pick(&rng, 5) == 0) {
        c.alibi = 1;
        c.alibi_batch = (int)pick(&rng, 2);
    }
    return c;
}

/* Sliding windows narrower than a tile and wider than N, one-sided, with
 * causal, bottom-right aligned for cross-attention, rows that see nothing. */
static const struct {
    int64_t nq, nkv, left, right;
    int causal;
} windows[ATTN_WINDOW_CASES] = {{130, 130, 5, 3, 0},  {130, 130, 500, 500, 0}, {130, 130, -1, 4, 0}, {130, 130, 17, -1, 1},
               {100, 100, 0, 0, 0},  {33, 200, 10, 0, 0},     {65, 7, 2, 1, 0},     {1, 300, 40, -1, 0},
               {200, 64, 20, 20, 1}, {129, 129, 64, 64, 1}};

attn_case attn_case_window(ffpa_dtype dtype, int i, int64_t d)
{
    attn_case c = attn_case_default(dtype, windows[i].nq, d);
    c.nkv = windows[i].nkv;
    c.window = 1;
    c.window_left = windows[i].left;
    c.window_right = windows[i].right;
    c.causal = windows[i].causal;
    c.seed = 500 + (uint64_t)i;
    return c;
}

/* Softcap strong (1: most scores saturate) and mild (30), with bias,
 * dropout and causal. */
attn_case attn_case_softcap(ffpa_dtype dtype, int i, int64_t d)
{
    attn_case c = attn_case_default(dtype, 70 + 13 * i, d);
    c.nkv = 90 - 7 * i;
    c.softcap = i % 2 ? 30.0f : 1.0f;
    c.causal = i == 1;
    c.bias = i >= 2;
    c.dropout_p = i == 3 ? 0.2f : 0.0f;
    c.dropout_seed = 99;
    c.seed = 600 + (uint64_t)i;
    return c;
}

/* ALiBi slopes per head and per sequence, causal and cross, GQA, varlen. */
attn_case attn_case_alibi(ffpa_dtype dtype, int i, int64_t d)
{
    attn_case c = attn_case_default(dtype, 80, d);
    c.alibi = 1;
    c.alibi_batch = i % 2;
    c.batch = 2;
    c.causal = i == 1 || i == 3;
    if (i == 2) {
        c.nq = 20;
        c.nkv = 150;
        c.hq = 4;
        c.hkv = 1;
    }
    if (i == 3) {
        c.nseq = 3;
        const int32_t lq[] = {30, 0, 70}, lk[] = {50, 20, 70};
        for (int s = 0; s < 3; ++s) {
            c.lens_q[s] = lq[s];
            c.lens_k[s] = lk[s];
        }
    }
    c.seed = 700 + (uint64_t)i;
    return c;
}

/* All of them at once, with bias, dropout, GQA and varlen. */
attn_case attn_case_variants_combined(ffpa_dtype dtype, int64_t d)
{
    attn_case c = attn_case_alibi(dtype, 3, d);
    c.hq = 4;
    c.hkv = 2;
    c.window = 1;
    c.window_left = 9;
    c.window_right = 30;
    c.softcap = 3.0f;
    c.bias = 1;
    c.bias_size1[0] = 1;
    c.dropout_p = 0.1f;
    c.dropout_seed = 5;
    c.seed = 800;
    return c;
}

void attn_case_describe(const attn_case *c, char *buf, size_t len)
{
    int n = snprintf(buf, len,
                     "seed %llu %s q/o %s k/v %s Hq %lld Hkv %lld Dqk %lld Dv %lld causal %d "
                     "scale %g dropout %g bias %d",
                     (unsigned long long)c->seed, ffpa_dtype_name(c->dtype),
                     th_layout_name(c->layout), th_layout_name(c->kv_layout), (long long)c->hq,
                     (long long)c->hkv, (long long)c->dqk, (long long)c->dv, c->causal,
                     (double)c->scale, (double)c->dropout_p, c->bias);
    if (n < 0 || (size_t)n >= len)
        return;
    if (c->bias)
        n += snprintf(buf + n, len - (size_t)n, " (%s size1 %d%d%d%d stride0 %d%d%d%d inf %d)",
                      ffpa_dtype_name(c->bias_dtype), c->bias_size1[0], c->bias_size1[1],
                      c->bias_size1[2], c->bias_size1[3], c->bias_stride0[0], c->bias_stride0[1],
                      c->bias_stride0[2], c->bias_stride0[3], c->bias_inf_rows);
    if ((size_t)n >= len)
        return;
    if (c->nseq > 0) {
        n += snprintf(buf + n, len - (size_t)n, " varlen q/k:");
        for (int s = 0; s < c->nseq && (size_t)n < len; ++s)
            n += snprintf(buf + n, len - (size_t)n, " %d/%d", c->lens_q[s], c->lens_k[s]);
        if (c->cu_on_device && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, " (offsets on device%s)",
                          c->cu_on_device == 2 ? ", maxima +3" : "");
    } else {
        n += snprintf(buf + n, len - (size_t)n, " B %lld Nq %lld Nkv %lld", (long long)c->batch,
                      (long long)c->nq, (long long)c->nkv);
    }
    if ((size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " dbias %d accum %d deterministic %d", c->dbias,
                      (int)c->grad_accum, c->deterministic);
    if ((size_t)n < len && (c->window || c->softcap > 0.0f || c->alibi))
        snprintf(buf + n, len - (size_t)n, " window %d (%lld, %lld) softcap %g alibi %d%s", c->window,
                 (long long)c->window_left, (long long)c->window_right, (double)c->softcap, c->alibi,
                 c->alibi_batch ? " per sequence" : "");
}

/* Everything a run builds. */
typedef struct attn_run {
    int64_t shape0, rows_q, rows_k, nseq, max_q, max_k;
    int32_t cu_q[ATTN_MAX_SEQS + 1], cu_k[ATTN_MAX_SEQS + 1];
    void *cu_dev_q, *cu_dev_k; /* the offsets in backend memory (cu_on_device) */
    th_tensor q, k, v, o, lse, bias, alibi;
    ffpa_options opt;      /* backend tensors */
    ffpa_options opt_host; /* same options over host tensors, for the oracle */
    oracle_problem oracle;
    th_rng rng;
} attn_run;

static void build_bias(const attn_case *c, attn_run *r)
{
    int64_t full[4] = {r->nseq, c->hq, r->max_q, r->max_k};
    int64_t stored[4], shape[4], stride[4];
    for (int d = 0; d < 4; ++d) {
        stored[d] = c->bias_size1[d] || c->bias_stride0[d] ? 1 : full[d];
        shape[d] = c->bias_size1[d] ? 1 : full[d];
    }
    /* Padded layouts also pad bias rows, to exercise its strides. */
    stride[3] = 1;
    stride[2] = stored[3] + (c->layout == TH_PADDED ? 2 : 0);
    stride[1] = stored[2] * stride[2];
    stride[0] = stored[1] * stride[1];
    for (int d = 0; d < 4; ++d)
        if (c->bias_stride0[d])
            stride[d] = 0;
    th_tensor_strided(&r->bias, c->bias_dtype, shape, stride);
    th_tensor_random(&r->bias, &r->rng, -1.0, 1.0, 0);
    if (c->bias_inf_rows) {
        for (int64_t a = 0; a < stored[0]; ++a)
            for (int64_t b = 0; b < stored[1]; ++b)
                for (int64_t i = 0; i < stored[2]; ++i)
                    for (int64_t j = 0; j < stored[3]; ++j)
                        if (i % 3 == 1 || (i % 3 == 0 && j % 5 == 2))
                            th_tensor_set(&r->bias, a, b, i, j, -INFINITY);
        th_tensor_upload(&r->bias);
    }
    if (c->bias_inf_cols) {
        for (int64_t a = 0; a < stored[0]; ++a)
            for (int64_t b = 0; b < stored[1]; ++b)
                for (int64_t i = 0; i < stored[2]; ++i)
                    for (int64_t j = 0; j < stored[3]; ++j)
                        if (i == 0 || j < (stored[3] * 6) / 10)
                            th_tensor_set(&r->bias, a, b, i, j, -INFINITY);
        th_tensor_upload(&r->bias);
    }
}

/* The offsets into backend memory; the oracle keeps the host arrays. */
static void put_offsets_on_device(const attn_case *c, attn_run *r)
{
    ffpa_context *ctx = th_ctx();
    const size_t bytes = (size_t)(c->nseq + 1) * sizeof(int32_t);
    th_expect_ok(ctx, ffpa_malloc(ctx, &r->cu_dev_q, bytes), "ffpa_malloc (cu_seqlens_q)");
    th_expect_ok(ctx, ffpa_malloc(ctx, &r->cu_dev_k, bytes), "ffpa_malloc (cu_seqlens_k)");
    th_expect_ok(ctx, ffpa_memcpy(ctx, r->cu_dev_q, r->cu_q, bytes, FFPA_COPY_HOST_TO_DEVICE), "ffpa_memcpy");
    th_expect_ok(ctx, ffpa_memcpy(ctx, r->cu_dev_k, r->cu_k, bytes, FFPA_COPY_HOST_TO_DEVICE), "ffpa_memcpy");
    r->opt.cu_seqlens_q = r->cu_dev_q;
    r->opt.cu_seqlens_k = r->cu_dev_k;
    r->opt.cu_seqlens_on_device = 1;
    r->opt.max_seqlen_q = r->max_q;
    r->opt.max_seqlen_k = r->max_k;
}

static void build(const attn_case *c, attn_run *r)
{
    memset(r, 0, sizeof *r);
    r->rng = th_rng_seeded(c->seed);
    if (c->nseq > 0) {
        assert_true(c->nseq <= ATTN_MAX_SEQS);
        r->nseq = c->nseq;
        r->shape0 = 1;
        for (int s = 0; s < c->nseq; ++s) {
            r->cu_q[s + 1] = r->cu_q[s] + c->lens_q[s];
            r->cu_k[s + 1] = r->cu_k[s] + c->lens_k[s];
            if (c->lens_q[s] > r->max_q)
                r->max_q = c->lens_q[s];
            if (c->lens_k[s] > r->max_k)
                r->max_k = c->lens_k[s];
        }
        r->rows_q = r->cu_q[c->nseq];
        r->rows_k = r->cu_k[c->nseq];
        if (c->cu_on_device == 2) {
            /* Caller's maxima above the longest sequences (the bias's N dims follow them). */
            r->max_q = r->max_q + 3 < r->rows_q ? r->max_q + 3 : r->rows_q;
            r->max_k = r->max_k + 3 < r->rows_k ? r->max_k + 3 : r->rows_k;
        }
    } else {
        r->nseq = r->shape0 = c->batch;
        r->rows_q = r->max_q = c->nq;
        r->rows_k = r->max_k = c->nkv;
    }
    th_tensor_make(&r->q, c->dtype, c->layout, r->shape0, c->hq, r->rows_q, c->dqk);
    th_tensor_make(&r->k, c->dtype, c->kv_layout, r->shape0, c->hkv, r->rows_k, c->dqk);
    th_tensor_make(&r->v, c->dtype, c->kv_layout, r->shape0, c->hkv, r->rows_k, c->dv);
    th_tensor_make(&r->o, c->dtype, c->layout, r->shape0, c->hq, r->rows_q, c->dv);
    th_tensor_lse(&r->lse, c->layout, r->shape0, c->hq, r->rows_q);
    th_tensor_random(&r->q, &r->rng, -c->qk_range, c->qk_range, c->integer_qk);
    th_tensor_random(&r->k, &r->rng, -c->qk_range, c->qk_range, c->integer_qk);
    th_tensor_random(&r->v, &r->rng, -c->v_range, c->v_range, 0);

    ffpa_options opt = ffpa_options_default();
    opt.scale = c->scale;
    opt.causal = c->causal;
    opt.dropout_p = c->dropout_p;
    opt.dropout_seed = c->dropout_seed;
    opt.dropout_offset = c->dropout_offset;
    opt.grad_accum = c->grad_accum;
    opt.deterministic = c->deterministic;
    if (c->nseq > 0) {
        opt.cu_seqlens_q = r->cu_q;
        opt.cu_seqlens_k = r->cu_k;
        opt.varlen_batch = c->nseq;
    }
    r->opt = r->opt_host = opt;
    if (c->nseq > 0 && c->cu_on_device)
        put_offsets_on_device(c, r);
    if (c->bias) {
        build_bias(c, r);
        r->opt.bias = &r->bias.dev;
        r->opt_host.bias = &r->bias.host;
    }
    r->opt.window = r->opt_host.window = c->window;
    r->opt.window_left = r->opt_host.window_left = c->window_left;
    r->opt.window_right = r->opt_host.window_right = c->window_right;
    r->opt.softcap = r->opt_host.softcap = c->softcap;
    if (c->alibi) {
        th_tensor_make(&r->alibi, FFPA_F32, TH_BHND, c->alibi_batch ? r->nseq : 1, c->hq, 1, 1);
        th_tensor_random(&r->alibi, &r->rng, 0.0, 0.5, 0);
        r->opt.alibi_slopes = &r->alibi.dev;
        r->opt_host.alibi_slopes = &r->alibi.host;
    }
    assert_int_equal(oracle_problem_init(&r->oracle, &r->q.host, &r->k.host, &r->v.host,
                                         &r->opt_host),
                     0);
}

static void release(attn_run *r)
{
    oracle_problem_free(&r->oracle);
    if (r->cu_dev_q || r->cu_dev_k) {
        th_expect_ok(th_ctx(), ffpa_free(th_ctx(), r->cu_dev_q), "ffpa_free");
        th_expect_ok(th_ctx(), ffpa_free(th_ctx(), r->cu_dev_k), "ffpa_free");
    }
    th_tensor_free(&r->q);
    th_tensor_free(&r->k);
    th_tensor_free(&r->v);
    th_tensor_free(&r->o);
    th_tensor_free(&r->lse);
    if (r->bias.host_base)
        th_tensor_free(&r->bias);
    if (r->alibi.host_base)
        th_tensor_free(&r->alibi);
}

static double *alloc_doubles(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(p);
    return p;
}

static unsigned char *host_copy(const th_tensor *t)
{
    unsigned char *copy = malloc(t->bytes);
    assert_non_null(copy);
    memcpy(copy, t->host_base, t->bytes);
    return copy;
}

/* LSE is stored in f32 but computed from the test dtype's inputs. tol_factor
 * is not applied: it widens O for ill-conditioned softmaxes, not the LSE. */
static double lse_factor(const attn_case *c)
{
    return th_tolerance(c->dtype, TH_LSE) / th_tolerance(FFPA_F32, TH_LSE);
}

/* Runs the forward on r (outputs poisoned first) and checks O and LSE.
 * Returns 0 when a GPU backend refused the case (see th_refused). */
static int forward_and_check(const attn_case *c, attn_run *r, int with_lse)
{
    ffpa_context *ctx = th_ctx();
    th_tensor_poison(&r->o);
    th_tensor_poison(&r->lse);
    ffpa_status status = ffpa_forward(ctx, &r->q.dev, &r->k.dev, &r->v.dev, &r->o.dev,
                                      with_lse ? &r->lse.dev : NULL, &r->opt);
    if (th_refused(ctx, status, "ffpa_forward"))
        return 0;
    th_expect_ok(ctx, status, "ffpa_forward");
    double *o_ref = alloc_doubles(oracle_o_elems(&r->oracle));
    double *lse_ref = alloc_doubles(oracle_lse_elems(&r->oracle));
    oracle_forward(&r->oracle, o_ref, lse_ref);
    th_check("o", &r->o, o_ref, NULL, NULL, TH_OUTPUT, c->tol_factor);
    if (with_lse) {
        th_check("lse", &r->lse, lse_ref, NULL, NULL, TH_LSE, lse_factor(c));
    } else {
        unsigned char *poison = host_copy(&r->lse);
        memset(poison, 0xFF, r->lse.bytes);
        th_expect_unchanged("lse (not passed)", &r->lse, poison);
        free(poison);
    }
    free(o_ref);
    free(lse_ref);
    return 1;
}

void attn_run_forward(const attn_case *c)
{
    attn_run r;
    build(c, &r);
    unsigned char *q0 = host_copy(&r.q), *k0 = host_copy(&r.k), *v0 = host_copy(&r.v);
    unsigned char *b0 = c->bias ? host_copy(&r.bias) : NULL;
    if (forward_and_check(c, &r, c->with_lse)) {
        th_expect_unchanged("q (input)", &r.q, q0);
        th_expect_unchanged("k (input)", &r.k, k0);
        th_expect_unchanged("v (input)", &r.v, v0);
        if (b0)
            th_expect_unchanged("bias (input)", &r.bias, b0);
    }
    free(q0);
    free(k0);
    free(v0);
    free(b0);
    release(&r);
}

/*
 * Central finite differences of the oracle's loss L = sum(O * g) with respect
 * to every element of one input (x, the oracle's own float64 copy, perturbed
 * in place). Checks the oracle's analytic gradient (1e-6) and the library's
 * (th_check, the dtype's gradient tolerance) against them.
 */
static void check_finite_differences(oracle_problem *p, const double *g, const double *analytic,
                                     const double *mag,
                                     th_tensor *library, const int64_t *ref_shape, double *x, int64_t n,
                                     const char *what)
{
    const double h = 1e-5;
    double *fd = alloc_doubles(n);
    double max_fd = 0.0;
    for (int64_t e = 0; e < n; ++e) {
        double saved = x[e];
        x[e] = saved + h;
        double plus = oracle_loss(p, g);
        x[e] = saved - h;
        double minus = oracle_loss(p, g);
        x[e] = saved;
        fd[e] = (plus - minus) / (2.0 * h);
        if (fabs(fd[e]) > max_fd)
            max_fd = fabs(fd[e]);
    }
    for (int64_t e = 0; e < n; ++e)
        if (fabs(analytic[e] - fd[e]) > 1e-6 * fmax(max_fd, 1e-3))
            fail_msg("oracle %s[%lld] = %.12g but finite differences give %.12g", what,
                     (long long)e, analytic[e], fd[e]);
    char label[64];
    snprintf(label, sizeof label, "%s vs finite differences", what);
    th_check(label, library, fd, mag, ref_shape,
             TH_GRAD, 1.0);
    free(fd);
}

/* The float64 gradients and their magnitudes (oracle_backward_and_magnitude) for one dout. */
typedef struct grad_refs {
    double *g;
    oracle_grads ref, mag;
} grad_refs;

static void grad_refs_compute(const attn_case *c, oracle_problem *p, const th_tensor *dout, grad_refs *out)
{
    out->g = alloc_doubles(oracle_o_elems(p));
    oracle_read_tensor(&dout->host, out->g);
    out->ref = (oracle_grads){alloc_doubles(oracle_q_elems(p)), alloc_doubles(oracle_k_elems(p)),
                              alloc_doubles(oracle_v_elems(p)), c->dbias ? alloc_doubles(oracle_bias_elems(p)) : NULL};
    out->mag = (oracle_grads){alloc_doubles(oracle_q_elems(p)), alloc_doubles(oracle_k_elems(p)),
                              alloc_doubles(oracle_v_elems(p)), c->dbias ? alloc_doubles(oracle_bias_elems(p)) : NULL};
    oracle_backward_and_magnitude(p, out->g, &out->ref, &out->mag);
}

static void grad_refs_free(grad_refs *refs)
{
    free(refs->g);
    double *arrays[] = {refs->ref.dq, refs->ref.dk, refs->ref.dv, refs->ref.dbias,
                        refs->mag.dq, refs->mag.dk, refs->mag.dv, refs->mag.dbias};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; ++i)
        free(arrays[i]);
}

/*
 * One ffpa_backward on the run's inputs with accumulation `check`, every
 * gradient compared with refs (computed on the first call that the backend
 * does not refuse: the runs of one case share them), the inputs unchanged,
 * and the deterministic second run where the case asks. Returns 0 when the
 * backend refused the call.
 */
static int backward_and_check(const attn_case *c, attn_run *r, th_tensor *dout, const attn_accum_check *check,
                              grad_refs *refs)
{
    ffpa_context *ctx = th_ctx();
    th_tensor dq, dk, dv, dbias;
    memset(&dbias, 0, sizeof dbias);
    th_tensor_make(&dq, c->dtype, c->layout, r->shape0, c->hq, r->rows_q, c->dqk);
    th_tensor_make(&dk, c->dtype, c->kv_layout, r->shape0, c->hkv, r->rows_k, c->dqk);
    th_tensor_make(&dv, c->dtype, c->kv_layout, r->shape0, c->hkv, r->rows_k, c->dv);
    ffpa_options opt = r->opt;
    opt.grad_accum = check->grad_accum;
    if (c->dbias) {
        assert_true(c->bias);
        th_tensor_strided(&dbias, c->dbias_dtype, r->bias.host.shape, r->bias.host.stride);
        opt.dbias = &dbias.dev;
    }
    th_tensor *inputs[] = {dout, &r->q, &r->k, &r->v, &r->o, &r->lse};
    const char *input_names[] = {"dout (input)", "q (input)", "k (input)",
                                 "v (input)",    "out (input)", "lse (input)"};
    unsigned char *before[6];
    for (int i = 0; i < 6; ++i)
        before[i] = th_tensor_snapshot(inputs[i]);

    ffpa_status status = ffpa_backward(ctx, &dout->dev, &r->q.dev, &r->k.dev, &r->v.dev, &r->o.dev,
                                       &r->lse.dev, &dq.dev, &dk.dev, &dv.dev, &opt);
    const int refused = th_refused(ctx, status, "ffpa_backward");
    if (!refused) {
        th_expect_ok(ctx, status, "ffpa_backward");
        oracle_problem *p = &r->oracle;
        if (!refs->g)
            grad_refs_compute(c, p, dout, refs);
        const oracle_grads *ref = &refs->ref, *mag = &refs->mag;
        const double dq_err = th_check("dq", &dq, ref->dq, mag->dq, NULL, TH_GRAD, check->tol_factor);
        const double dk_err = th_check("dk", &dk, ref->dk, mag->dk, NULL, TH_GRAD, check->tol_factor);
        const double dv_err = th_check("dv", &dv, ref->dv, mag->dv, NULL, TH_GRAD, check->tol_factor);
        if (check->max_abs_dv > 0) {
            print_message("# %s backward, backend %s, accum %s: max abs error dQ %.3g, dK %.3g, dV %.3g "
                          "(dV bound %.3g)\n",
                          ffpa_dtype_name(c->dtype), th_backend(),
                          check->grad_accum == FFPA_GRAD_ACCUM_F32 ? "fp32 buffer" : "output dtype", dq_err,
                          dk_err, dv_err, check->max_abs_dv);
            if (!(dv_err <= check->max_abs_dv))
                fail_msg("dv: largest absolute error %.3g above the bound %.3g", dv_err, check->max_abs_dv);
        }
        if (c->dbias) {
            /* dbias may be f32 while the inputs are 16-bit (the inputs' rounding
             * dominates), or 16-bit while they are f32 (its own rounding does):
             * the looser of the two tolerances. */
            double factor = check->tol_factor *
                            fmax(th_tolerance(c->dtype, TH_GRAD), th_tolerance(c->dbias_dtype, TH_GRAD)) /
                            th_tolerance(c->dbias_dtype, TH_GRAD);
            th_check("dbias", &dbias, ref->dbias, mag->dbias, p->bias_shape, TH_GRAD, factor);
        }
        if (c->finite_differences) {
            check_finite_differences(p, refs->g, ref->dq, mag->dq, &dq, NULL, p->q, oracle_q_elems(p), "dq");
            check_finite_differences(p, refs->g, ref->dk, mag->dk, &dk, NULL, p->k, oracle_k_elems(p), "dk");
            check_finite_differences(p, refs->g, ref->dv, mag->dv, &dv, NULL, p->v, oracle_v_elems(p), "dv");
            if (c->dbias)
                check_finite_differences(p, refs->g, ref->dbias, mag->dbias, &dbias, p->bias_shape, p->bias,
                                         oracle_bias_elems(p), "dbias");
        }
        for (int i = 0; i < 6; ++i)
            th_expect_unchanged(input_names[i], inputs[i], before[i]);
    }
    for (int i = 0; i < 6; ++i)
        free(before[i]);

    if (!refused && c->deterministic) {
        th_tensor *grads[] = {&dq, &dk, &dv, &dbias};
        const char *names[] = {"dq (second deterministic run)", "dk (second deterministic run)",
                               "dv (second deterministic run)",
                               "dbias (second deterministic run)"};
        int n_grads = c->dbias ? 4 : 3;
        unsigned char *first[4];
        for (int i = 0; i < n_grads; ++i) {
            first[i] = th_tensor_snapshot(grads[i]);
            th_tensor_poison(grads[i]);
        }
        th_expect_ok(ctx,
                     ffpa_backward(ctx, &dout->dev, &r->q.dev, &r->k.dev, &r->v.dev, &r->o.dev,
                                   &r->lse.dev, &dq.dev, &dk.dev, &dv.dev, &opt),
                     "ffpa_backward (second run)");
        for (int i = 0; i < n_grads; ++i) {
            th_expect_unchanged(names[i], grads[i], first[i]);
            free(first[i]);
        }
    }
    th_tensor_free(&dq);
    th_tensor_free(&dk);
    th_tensor_free(&dv);
    if (c->dbias)
        th_tensor_free(&dbias);
    return !refused;
}

void attn_run_backward_accums(const attn_case *c, const attn_accum_check *checks, int n_checks)
{
    attn_run r;
    build(c, &r);
    if (!forward_and_check(c, &r, 1)) {
        release(&r);
        return;
    }
    th_tensor dout;
    th_tensor_make(&dout, c->dtype, c->layout, r.shape0, c->hq, r.rows_q, c->dv);
    th_tensor_random(&dout, &r.rng, -c->v_range, c->v_range, 0);
    grad_refs refs = {0};
    for (int i = 0; i < n_checks; ++i)
        if (!backward_and_check(c, &r, &dout, &checks[i], &refs))
            break;
    grad_refs_free(&refs);
    th_tensor_free(&dout);
    release(&r);
}

void attn_run_backward(const attn_case *c)
{
    const attn_accum_check check = {c->grad_accum, c->tol_factor, c->max_abs_dv};
    attn_run_backward_accums(c, &check, 1);
}
