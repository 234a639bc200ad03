/*
 * ffpa-bench: forward (and with --backward, backward) latency and TFLOP/s of
 * libffpa on one backend, through the public API only, plus an optional check
 * against the cpu backend.
 *
 *   ffpa-bench [options] SHAPE...      or   ffpa-bench [options] -f FILE
 *
 * SHAPE: B,Hq,Hkv,Nq,Nkv,Dqk,Dv[,flags]   flags: c causal, b bias (fp32,
 * broadcast over batch), d dropout 0.1, v varlen (random lengths <= N),
 * l LSE output, r deterministic backward (with --check: five more runs must
 * give the same bytes), g dbias (fp32, the bias's shape; implies b),
 * o gradients accumulated in the output dtype (FFPA_GRAD_ACCUM_OUTPUT),
 * wL or wL.R sliding window of L keys before the diagonal (R after; -1 or
 * absent: unbounded), sC logit softcap C (s alone: 30), a ALiBi slopes
 * 0.5 / 2^h per query head. Example: 1,32,32,8192,8192,512,512,c
 *
 * Options: --backend NAME (default: FFPA_BACKEND / auto), --dtype bf16|f16,
 * --iters N (iterations per timed repetition, default auto), --reps N
 * (repetitions, median taken, >= 10), --warmup N, --csv FILE,
 * --check (run every shape on the cpu backend too and compare all elements;
 * outputs are poisoned with NaN first), --no-time, --backward (also time
 * ffpa_backward on every shape: a "bwd" row after each forward row, and with
 * --check dQ/dK/dV compared with the cpu backend's).
 *
 * Timing: ffpa_synchronize before and after each repetition of `iters`
 * calls, wall clock in between; the median over repetitions. FLOPs:
 * 4 * sum_b(Nq_b * Nkv_b) * Hq * (Dqk + Dv) / 2 (= 4 B Hq Nq Nkv D), half for causal.
 * Backward FLOPs: 2.5x the forward's (as FlashAttention counts them). The
 * backward reads O and LSE of one untimed forward with LSE output, a random
 * dO, and the forward's options (bias, dropout seed and offset, varlen).
 *
 * CSV columns: shape,backend,device,dtype,path,ms,tflops,check; with
 * --backward a last column pass (fwd|bwd) is added. Without --backward the
 * table and the CSV are exactly those of a forward-only run.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "ffpa.h"
#include "cli.h"
#include "bench.h"

typedef struct shape {
    int64_t b, hq, hkv, nq, nkv, dqk, dv;
    int causal, bias, dropout, varlen, lse, deterministic, dbias, accum_out;
    int window, alibi;
    long window_left, window_right;
    float softcap;
    float q_scale; /* Q drawn from [-q_scale, q_scale): peaked softmax rows at large values */
    char text[128];
} shape;

typedef struct bench_opts {
    const char *backend;
    ffpa_dtype dtype;
    int iters, reps, warmup, check, time;
    const char *csv;
    int backward;
} bench_opts;

static int parse_shape(const char *s, shape *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->text, sizeof out->text, "%s", s);
    long long v[7];
    char flags[32] = "";
    int n = sscanf(s, "%lld,%lld,%lld,%lld,%lld,%lld,%lld,%31s", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], flags);
    if (n < 7)
        return 0;
    out->b = v[0], out->hq = v[1], out->hkv = v[2], out->nq = v[3], out->nkv = v[4], out->dqk = v[5],
    out->dv = v[6];
    out->causal = strchr(flags, 'c') != NULL;
    out->bias = strchr(flags, 'b') != NULL;
    out->dropout = strchr(flags, 'd') != NULL;
    out->varlen = strchr(flags, 'v') != NULL;
    out->lse = strchr(flags, 'l') != NULL;
    out->deterministic = strchr(flags, 'r') != NULL;
    out->dbias = strchr(flags, 'g') != NULL;
    out->bias |= out->dbias;
    out->accum_out = strchr(flags, 'o') != NULL;
    const char *w = strchr(flags, 'w'), *sc = strchr(flags, 's');
    if (w) {
        char *end;
        out->window = 1;
        out->window_left = strtol(w + 1, &end, 10);
        out->window_right = *end == '.' ? strtol(end + 1, &end, 10) : -1;
        if (end == w + 1)
            return 0; /* w needs its L */
    }
    if (sc) {
        char *end;
        out->softcap = strtof(sc + 1, &end);
        if (end == sc + 1)
            out->softcap = 30.0f;
    }
    out->alibi = strchr(flags, 'a') != NULL;
    const char *t = strchr(flags, 't');
    out->q_scale = 1.0f;
    if (t) {
        char *end;
        out->q_scale = strtof(t + 1, &end);
        if (end == t + 1 || !(out->q_scale > 0.0f))
            return 0; /* t needs its scale */
    }
    return out->b > 0 && out->hq > 0 && out->hkv > 0 && out->nq > 0 && out->nkv > 0 && out->dqk > 0 &&
           out->dv > 0;
}

static const char *path_label(const shape *s)
{
    int64_t d = s->dqk > s->dv ? s->dqk : s->dv;
    if (s->nq <= 16 && !s->varlen)
        return d > 256 ? "decode/split-d" : "decode/small-d";
    return d > 256 ? "split-d" : "small-d";
}

/* The kernel that ran (GPU backends report it), else the shape's path. */
static const char *kernel_label(const ffpa_context *ctx, const shape *s)
{
    const char *k = ffpa_last_kernel(ctx);
    return k[0] && strcmp(k, ffpa_backend_name(ctx)) != 0 ? k : path_label(s);
}

/* Everything one run of a shape needs on one context. */
typedef struct run_bufs {
    void *q, *k, *v, *o, *lse, *bias, *alibi;
    size_t q_bytes, k_bytes, v_bytes, o_bytes, lse_bytes, bias_bytes;
    ffpa_tensor tq, tk, tv, to, tl, tb, ta;
    ffpa_options opt;
    int32_t *cu_q, *cu_k;
    int64_t total_q, total_k;
    double pairs; /* sum over sequences of visible (query, key) pairs, full square */
    /* Backward only (setup_backward). Its LSE is a buffer of its own so the
     * timed forward keeps writing LSE only when the shape asks for it (l). */
    void *dout, *dq, *dk, *dv, *blse, *dbias;
    ffpa_tensor tdo, tdq, tdk, tdv, tbl, tdb;
    ffpa_options bopt; /* opt plus dbias and the accumulation mode */
} run_bufs;

/* Host-side inputs shared by both contexts. */
typedef struct host_inputs {
    uint16_t *q, *k, *v, *dout;
    float *bias, *alibi;
    int32_t *cu_q, *cu_k;
    int64_t nseq, total_q, total_k;
    int dbias, accum_out; /* the shape's backward options (setup_backward) */
} host_inputs;

static int make_inputs(const shape *s, ffpa_dtype dt, host_inputs *hi)
{
    memset(hi, 0, sizeof *hi);
    hi->nseq = s->b;
    hi->dbias = s->dbias;
    hi->accum_out = s->accum_out;
    if (s->varlen) {
        hi->cu_q = malloc(sizeof(int32_t) * (size_t)(s->b + 1));
        hi->cu_k = malloc(sizeof(int32_t) * (size_t)(s->b + 1));
        hi->cu_q[0] = hi->cu_k[0] = 0;
        for (int64_t i = 0; i < s->b; ++i) {
            /* lengths in [1, N]; the first sequence is the longest */
            int64_t lq = i == 0 ? s->nq : 1 + (int64_t)((bench_rand_unit() + 1.0f) * 0.5f * (float)(s->nq - 1));
            int64_t lk = i == 0 ? s->nkv : 1 + (int64_t)((bench_rand_unit() + 1.0f) * 0.5f * (float)(s->nkv - 1));
            hi->cu_q[i + 1] = hi->cu_q[i] + (int32_t)lq;
            hi->cu_k[i + 1] = hi->cu_k[i] + (int32_t)lk;
        }
        hi->total_q = hi->cu_q[s->b];
        hi->total_k = hi->cu_k[s->b];
    } else {
        hi->total_q = s->b * s->nq;
        hi->total_k = s->b * s->nkv;
    }
    size_t nq = (size_t)(hi->total_q * s->hq * s->dqk), nk = (size_t)(hi->total_k * s->hkv * s->dqk),
           nv = (size_t)(hi->total_k * s->hkv * s->dv);
    hi->q = malloc(nq * 2);
    hi->k = malloc(nk * 2);
    hi->v = malloc(nv * 2);
    if (!hi->q || !hi->k || !hi->v)
        return 0;
    bench_fill_random_scaled(hi->q, nq, dt, s->q_scale);
    bench_fill_random(hi->k, nk, dt);
    bench_fill_random(hi->v, nv, dt);
    if (s->alibi) { /* the ALiBi paper's geometric slopes */
        hi->alibi = malloc((size_t)s->hq * sizeof(float));
        if (!hi->alibi)
            return 0;
        for (int64_t h = 0; h < s->hq; ++h)
            hi->alibi[h] = 0.5f / (float)(1u << (h % 16));
    }
    if (s->bias) {
        size_t nb = (size_t)(s->hq * s->nq * s->nkv);
        hi->bias = malloc(nb * sizeof(float));
        for (size_t i = 0; i < nb; ++i)
            hi->bias[i] = bench_rand_unit() < -0.9f ? -INFINITY : bench_rand_unit();
    }
    return 1;
}

/* dO for the backward, from a random stream of its own: the inputs of later
 * shapes stay those of a forward-only run, so --backward moves no forward row. */
static int make_dout(const shape *s, ffpa_dtype dt, host_inputs *hi)
{
    size_t n = (size_t)(hi->total_q * s->hq * s->dv);
    hi->dout = malloc(n * 2);
    if (!hi->dout)
        return 0;
    uint64_t saved = bench_rng_reseed(0xD1B54A32D192ED03ull);
    bench_fill_random(hi->dout, n, dt);
    bench_rng_reseed(saved);
    return 1;
}

static void free_inputs(host_inputs *hi)
{
    free(hi->q), free(hi->k), free(hi->v), free(hi->dout), free(hi->bias), free(hi->alibi), free(hi->cu_q),
        free(hi->cu_k);
}

static void *dev_upload(ffpa_context *ctx, const void *host, size_t bytes)
{
    void *p = NULL;
    if (ffpa_malloc(ctx, &p, bytes ? bytes : 1) != FFPA_OK)
        return NULL;
    if (host && ffpa_memcpy(ctx, p, host, bytes, FFPA_COPY_HOST_TO_DEVICE) != FFPA_OK)
        return NULL;
    return p;
}

static int setup_run(ffpa_context *ctx, const shape *s, ffpa_dtype dt, const host_inputs *hi, run_bufs *r)
{
    memset(r, 0, sizeof *r);
    int64_t bq = s->varlen ? 1 : s->b, nq = s->varlen ? hi->total_q : s->nq,
            nk = s->varlen ? hi->total_k : s->nkv;
    r->q_bytes = (size_t)(hi->total_q * s->hq * s->dqk * 2);
    r->k_bytes = (size_t)(hi->total_k * s->hkv * s->dqk * 2);
    r->v_bytes = (size_t)(hi->total_k * s->hkv * s->dv * 2);
    r->o_bytes = (size_t)(hi->total_q * s->hq * s->dv * 2);
    r->lse_bytes = (size_t)(hi->total_q * s->hq * 4);
    r->q = dev_upload(ctx, hi->q, r->q_bytes);
    r->k = dev_upload(ctx, hi->k, r->k_bytes);
    r->v = dev_upload(ctx, hi->v, r->v_bytes);
    r->o = dev_upload(ctx, NULL, r->o_bytes);
    r->lse = s->lse ? dev_upload(ctx, NULL, r->lse_bytes) : NULL;
    if (!r->q || !r->k || !r->v || !r->o || (s->lse && !r->lse))
        return 0;
    r->tq = ffpa_tensor_bhnd(r->q, dt, bq, s->hq, nq, s->dqk);
    r->tk = ffpa_tensor_bhnd(r->k, dt, bq, s->hkv, nk, s->dqk);
    r->tv = ffpa_tensor_bhnd(r->v, dt, bq, s->hkv, nk, s->dv);
    r->to = ffpa_tensor_bhnd(r->o, dt, bq, s->hq, nq, s->dv);
    r->tl = ffpa_tensor_bhnd(r->lse, FFPA_F32, bq, s->hq, nq, 1);
    r->opt = ffpa_options_default();
    r->opt.causal = s->causal;
    r->opt.deterministic = s->deterministic;
    if (s->bias) {
        r->bias_bytes = (size_t)(s->hq * s->nq * s->nkv) * sizeof(float);
        r->bias = dev_upload(ctx, hi->bias, r->bias_bytes);
        if (!r->bias)
            return 0;
        /* [B(broadcast), Hq, Nq, Nkv] */
        r->tb = ffpa_tensor_bhnd(r->bias, FFPA_F32, s->varlen ? 1 : s->b, s->hq, s->nq, s->nkv);
        r->tb.stride[0] = 0;
        r->opt.bias = &r->tb;
    }
    r->opt.window = s->window;
    r->opt.window_left = s->window_left;
    r->opt.window_right = s->window_right;
    r->opt.softcap = s->softcap;
    if (s->alibi) {
        r->alibi = dev_upload(ctx, hi->alibi, (size_t)s->hq * sizeof(float));
        if (!r->alibi)
            return 0;
        r->ta = ffpa_tensor_bhnd(r->alibi, FFPA_F32, 1, s->hq, 1, 1);
        r->opt.alibi_slopes = &r->ta;
    }
    if (s->dropout) {
        r->opt.dropout_p = 0.1f;
        r->opt.dropout_seed = 1234;
        r->opt.dropout_offset = 7;
    }
    if (s->varlen) {
        r->opt.cu_seqlens_q = hi->cu_q;
        r->opt.cu_seqlens_k = hi->cu_k;
        r->opt.varlen_batch = (int32_t)s->b;
    }
    r->pairs = 0;
    for (int64_t i = 0; i < s->b; ++i) {
        int64_t lq = s->varlen ? hi->cu_q[i + 1] - hi->cu_q[i] : s->nq;
        int64_t lk = s->varlen ? hi->cu_k[i + 1] - hi->cu_k[i] : s->nkv;
        if (!s->window) {
            r->pairs += (double)lq * (double)lk;
            continue;
        }
        /* The window's visible pairs, exactly (the causal half is applied later). */
        for (int64_t row = 0; row < lq; ++row) {
            int64_t diag = row + lk - lq;
            int64_t first = s->window_left >= 0 ? diag - s->window_left : 0;
            int64_t last = s->window_right >= 0 && !s->causal ? diag + s->window_right : s->causal ? diag : lk - 1;
            first = first < 0 ? 0 : first;
            last = last > lk - 1 ? lk - 1 : last;
            r->pairs += last >= first ? (double)(last - first + 1) * (s->causal ? 2.0 : 1.0) : 0.0;
        }
    }
    return 1;
}

/* Gradient buffers of the shapes of Q, K, V, and dO / LSE for the backward,
 * on top of setup_run's. */
static int setup_backward(ffpa_context *ctx, const host_inputs *hi, run_bufs *r)
{
    r->dout = dev_upload(ctx, hi->dout, r->o_bytes);
    r->dq = dev_upload(ctx, NULL, r->q_bytes);
    r->dk = dev_upload(ctx, NULL, r->k_bytes);
    r->dv = dev_upload(ctx, NULL, r->v_bytes);
    r->blse = dev_upload(ctx, NULL, r->lse_bytes);
    r->dbias = r->bias_bytes && hi->dbias ? dev_upload(ctx, NULL, r->bias_bytes) : NULL;
    if (!r->dout || !r->dq || !r->dk || !r->dv || !r->blse || (hi->dbias && !r->dbias))
        return 0;
    r->bopt = r->opt;
    r->bopt.grad_accum = hi->accum_out ? FFPA_GRAD_ACCUM_OUTPUT : FFPA_GRAD_ACCUM_F32;
    if (r->dbias) {
        r->tdb = r->tb, r->tdb.data = r->dbias; /* dbias broadcasts where the bias does */
        r->bopt.dbias = &r->tdb;
    }
    r->tdo = r->to, r->tdo.data = r->dout;
    r->tdq = r->tq, r->tdq.data = r->dq;
    r->tdk = r->tk, r->tdk.data = r->dk;
    r->tdv = r->tv, r->tdv.data = r->dv;
    r->tbl = r->tl, r->tbl.data = r->blse;
    return 1;
}

static void free_run(ffpa_context *ctx, run_bufs *r)
{
    void *bufs[] = {r->q,  r->k,  r->v,  r->o,    r->lse,  r->bias, r->alibi,
                    r->dout, r->dq, r->dk, r->dv, r->blse, r->dbias};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        if (bufs[i])
            ffpa_free(ctx, bufs[i]);
}

static ffpa_status run_forward(ffpa_context *ctx, run_bufs *r)
{
    return ffpa_forward(ctx, &r->tq, &r->tk, &r->tv, &r->to, r->lse ? &r->tl : NULL, &r->opt);
}

/* The forward the backward differentiates: O and its LSE (required). */
static ffpa_status run_backward_prep(ffpa_context *ctx, run_bufs *r)
{
    return ffpa_forward(ctx, &r->tq, &r->tk, &r->tv, &r->to, &r->tbl, &r->opt);
}

/* Same options as the forward (bias, dropout seed and offset, varlen),
 * with dbias and the accumulation mode. */
static ffpa_status run_backward(ffpa_context *ctx, run_bufs *r)
{
    return ffpa_backward(ctx, &r->tdo, &r->tq, &r->tk, &r->tv, &r->to, &r->tbl, &r->tdq, &r->tdk, &r->tdv,
                         &r->bopt);
}

/* Fill n device buffers with 0xFF bytes (a NaN bit pattern in every dtype):
 * an element the run under test leaves unwritten shows as non-finite. */
static int poison_buffers(ffpa_context *ctx, void *const *bufs, const size_t *bytes, int n)
{
    size_t most = 0;
    for (int i = 0; i < n; ++i)
        most = bytes[i] > most ? bytes[i] : most;
    void *h = malloc(most);
    if (!h)
        return 0;
    memset(h, 0xFF, most);
    int ok = 1;
    for (int i = 0; i < n && ok; ++i)
        ok = !bufs[i] || ffpa_memcpy(ctx, bufs[i], h, bytes[i], FFPA_COPY_HOST_TO_DEVICE) == FFPA_OK;
    free(h);
    return ok;
}

/* Poison O and LSE on the device. */
static int poison(ffpa_context *ctx, run_bufs *r)
{
    void *bufs[] = {r->o, r->lse};
    size_t bytes[] = {r->o_bytes, r->lse_bytes};
    return poison_buffers(ctx, bufs, bytes, 2);
}

static float to_f32(uint16_t x, ffpa_dtype dt)
{
    return dt == FFPA_BF16 ? ffpa_bf16_to_f32(x) : ffpa_f16_to_f32(x);
}

/* Compare O (and LSE) of the backend with the cpu backend. Returns 1 if ok. */
static int check_against_cpu(ffpa_context *ctx, const shape *s, ffpa_dtype dt, const host_inputs *hi,
                             run_bufs *r, char *msg, size_t msg_len)
{
    ffpa_context *cpu = NULL;
    if (ffpa_create(&cpu, "cpu") != FFPA_OK) {
        snprintf(msg, msg_len, "cpu backend: %s", ffpa_last_error(NULL));
        return 0;
    }
    run_bufs rc;
    int ok = setup_run(cpu, s, dt, hi, &rc);
    if (ok && run_forward(cpu, &rc) != FFPA_OK) {
        snprintf(msg, msg_len, "cpu forward: %s", ffpa_last_error(cpu));
        ok = 0;
    }
    ok = ok && poison(ctx, r);
    if (ok && run_forward(ctx, r) != FFPA_OK) {
        snprintf(msg, msg_len, "forward: %s", ffpa_last_error(ctx));
        ok = 0;
    }
    ok = ok && ffpa_synchronize(ctx) == FFPA_OK;
    size_t no = r->o_bytes / 2, nl = r->lse_bytes / 4;
    uint16_t *og = malloc(r->o_bytes), *oc = malloc(r->o_bytes);
    float *lg = malloc(r->lse_bytes), *lc = malloc(r->lse_bytes);
    if (ok) {
        ok = ffpa_memcpy(ctx, og, r->o, r->o_bytes, FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK &&
             ffpa_memcpy(cpu, oc, rc.o, r->o_bytes, FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK;
        if (s->lse)
            ok = ok && ffpa_memcpy(ctx, lg, r->lse, r->lse_bytes, FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK &&
                 ffpa_memcpy(cpu, lc, rc.lse, r->lse_bytes, FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK;
        if (!ok)
            snprintf(msg, msg_len, "copy back failed");
    }
    if (ok) {
        double num = 0, den = 0, max_abs = 0;
        size_t bad = 0, first_bad = 0;
        for (size_t i = 0; i < no; ++i) {
            double a = to_f32(og[i], dt), b = to_f32(oc[i], dt);
            if (!isfinite(a) || !isfinite(b)) {
                if (!bad++)
                    first_bad = i;
                continue;
            }
            double d = fabs(a - b);
            num += d * d;
            den += b * b;
            if (d > max_abs)
                max_abs = d;
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        /* LSE: the oracle tests' bound, |error| <= tol x max(1, |lse|) (1e-3 for
         * 16-bit inputs, 1e-4 for fp32): a bound of 1e-2 absolute let a 2^-9
         * relative error of the Hopper cluster kernels pass (docs/notes/forward.md). */
        double lse_max = 0, lse_rel = 0;
        size_t lse_bad = 0;
        if (s->lse)
            for (size_t i = 0; i < nl; ++i) {
                if (isinf(lc[i]) && lc[i] < 0) {
                    if (!(isinf(lg[i]) && lg[i] < 0))
                        ++lse_bad;
                    continue;
                }
                if (!isfinite(lg[i])) {
                    ++lse_bad;
                    continue;
                }
                double d = fabs((double)lg[i] - lc[i]);
                if (d > lse_max)
                    lse_max = d;
                lse_rel = fmax(lse_rel, d / fmax(1.0, fabs((double)lc[i])));
            }
        double tol = dt == FFPA_BF16 ? 2e-2 : 4e-3;
        double lse_tol = dt == FFPA_F32 ? 1e-4 : 1e-3;
        ok = bad == 0 && lse_bad == 0 && rel < tol && lse_rel <= lse_tol;
        snprintf(msg, msg_len, "rel %.2e max %.2e nonfinite %zu%s lse_max %.2e lse_rel %.2e lse_bad %zu", rel,
                 max_abs, bad, bad ? " (first at element)" : "", lse_max, lse_rel, lse_bad);
        (void)first_bad;
    }
    free(og), free(oc), free(lg), free(lc);
    free_run(cpu, &rc);
    ffpa_destroy(cpu);
    return ok;
}

static const char *const grad_names[4] = {"dQ", "dK", "dV", "dbias"};

/* The backward's outputs of r: dQ, dK, dV and, with dbias, dbias (fp32).
 * Returns how many. */
static int grads_of(const run_bufs *r, void *dev[4], size_t bytes[4])
{
    dev[0] = r->dq, dev[1] = r->dk, dev[2] = r->dv, dev[3] = r->dbias;
    bytes[0] = r->q_bytes, bytes[1] = r->k_bytes, bytes[2] = r->v_bytes, bytes[3] = r->bias_bytes;
    return r->dbias ? 4 : 3;
}

/* Poison the backward's outputs on the device. */
static int poison_grads(ffpa_context *ctx, run_bufs *r)
{
    void *bufs[4];
    size_t bytes[4];
    const int n = grads_of(r, bufs, bytes);
    return poison_buffers(ctx, bufs, bytes, n);
}

typedef struct grad_err {
    double max_abs, max_ref; /* over the finite pairs */
    size_t nonfinite;        /* elements non-finite on either side */
} grad_err;

static double element_of(const void *buf, size_t i, ffpa_dtype dt)
{
    return dt == FFPA_F32 ? ((const float *)buf)[i] : to_f32(((const uint16_t *)buf)[i], dt);
}

/* Every element of one gradient of the backend (dg on ctx) against the cpu
 * backend's (dc on cpu), elements of dtype dt. Returns 0 if the copies back
 * failed. */
static int compare_grad(ffpa_context *ctx, ffpa_context *cpu, const void *dg, const void *dc, size_t bytes,
                        ffpa_dtype dt, grad_err *e)
{
    memset(e, 0, sizeof *e);
    void *g = malloc(bytes), *c = malloc(bytes);
    int ok = g && c && ffpa_memcpy(ctx, g, dg, bytes, FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK &&
             ffpa_memcpy(cpu, c, dc, bytes, FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK;
    const size_t n = bytes / (dt == FFPA_F32 ? 4 : 2);
    for (size_t i = 0; ok && i < n; ++i) {
        double a = element_of(g, i, dt), b = element_of(c, i, dt);
        if (!isfinite(a) || !isfinite(b)) {
            ++e->nonfinite;
            continue;
        }
        e->max_abs = fmax(e->max_abs, fabs(a - b));
        e->max_ref = fmax(e->max_ref, fabs(b));
    }
    free(g), free(c);
    return ok;
}

/* Deterministic mode: five more backward runs (gradients poisoned before
 * each) give the bytes of the first. Appends the verdict to msg. */
static int check_repeatable(ffpa_context *ctx, run_bufs *r, char *msg, size_t msg_len)
{
    void *dev[4];
    size_t bytes[4];
    const int n_grads = grads_of(r, dev, bytes);
    size_t most = 0;
    for (int i = 0; i < n_grads; ++i)
        most = bytes[i] > most ? bytes[i] : most;
    unsigned char *first[4] = {NULL, NULL, NULL, NULL}, *again = malloc(most);
    int ok = again != NULL, differs = -1; /* differs: the first gradient that changed */
    for (int i = 0; ok && i < n_grads; ++i)
        ok = (first[i] = malloc(bytes[i])) != NULL &&
             ffpa_memcpy(ctx, first[i], dev[i], bytes[i], FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK;
    for (int rep = 0; ok && differs < 0 && rep < 5; ++rep) {
        ok = poison_grads(ctx, r) && run_backward(ctx, r) == FFPA_OK && ffpa_synchronize(ctx) == FFPA_OK;
        for (int i = 0; ok && differs < 0 && i < n_grads; ++i) {
            ok = ffpa_memcpy(ctx, again, dev[i], bytes[i], FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK;
            if (ok && memcmp(again, first[i], bytes[i]) != 0)
                differs = i;
        }
    }
    const size_t n = strlen(msg);
    if (!ok)
        snprintf(msg + n, msg_len - n, "; a repeat run failed");
    else if (differs >= 0)
        snprintf(msg + n, msg_len - n, "; %s NOT repeatable", grad_names[differs]);
    else
        snprintf(msg + n, msg_len - n, "; 5 repeats identical");
    for (int i = 0; i < 4; ++i)
        free(first[i]);
    free(again);
    return ok && differs < 0;
}

/*
 * Compare dQ, dK, dV (and dbias) of the backend with the cpu backend's, each
 * run on its own forward's O and LSE (run_backward_prep must have run on
 * ctx). Returns 1 if ok. Tolerance: |err| <= 2e-2 * max|ref| per tensor, the
 * test suite's gradient tolerance for 16-bit dtypes (tests/harness.c,
 * TH_GRAD), 2.5x that with o (FFPA_GRAD_ACCUM_OUTPUT, as tests/attn_case.c):
 * the cpu backend accumulates in fp32 and rounds once here, so it sits well
 * inside that of the float64 oracle. A gradient that cancels to zero (one
 * key: dQ = dK = 0 exactly, the kernels' rounding leaves ~1e-7) is held to
 * 1e-3 of the largest gradient's scale instead of its own.
 */
static int check_backward_against_cpu(ffpa_context *ctx, const shape *s, ffpa_dtype dt, const host_inputs *hi,
                                      run_bufs *r, char *msg, size_t msg_len)
{
    ffpa_context *cpu = NULL;
    if (ffpa_create(&cpu, "cpu") != FFPA_OK) {
        snprintf(msg, msg_len, "cpu backend: %s", ffpa_last_error(NULL));
        return 0;
    }
    run_bufs rc;
    int ok = setup_run(cpu, s, dt, hi, &rc) && setup_backward(cpu, hi, &rc);
    rc.bopt.grad_accum = FFPA_GRAD_ACCUM_F32; /* the reference rounds once */
    if (ok && (run_backward_prep(cpu, &rc) != FFPA_OK || run_backward(cpu, &rc) != FFPA_OK)) {
        snprintf(msg, msg_len, "cpu backward: %s", ffpa_last_error(cpu));
        ok = 0;
    }
    ok = ok && poison_grads(ctx, r);
    if (ok && run_backward(ctx, r) != FFPA_OK) {
        snprintf(msg, msg_len, "backward: %s", ffpa_last_error(ctx));
        ok = 0;
    }
    ok = ok && ffpa_synchronize(ctx) == FFPA_OK;
    void *dev[4], *ref[4];
    size_t bytes[4];
    const int n_grads = grads_of(r, dev, bytes);
    grads_of(&rc, ref, bytes);
    grad_err e[4];
    for (int i = 0; ok && i < n_grads; ++i)
        if (!compare_grad(ctx, cpu, dev[i], ref[i], bytes[i], i == 3 ? FFPA_F32 : dt, &e[i])) {
            snprintf(msg, msg_len, "copy back failed");
            ok = 0;
        }
    if (ok) {
        const double tol = s->accum_out ? 5e-2 : 2e-2;
        double scale = 0.0;
        for (int i = 0; i < n_grads; ++i)
            scale = fmax(scale, e[i].max_ref);
        size_t nonfinite = 0;
        int n = snprintf(msg, msg_len, "tol %.0e", tol);
        for (int i = 0; i < n_grads; ++i) {
            ok = ok && e[i].nonfinite == 0 && e[i].max_abs <= tol * fmax(e[i].max_ref, 1e-3 * scale);
            nonfinite += e[i].nonfinite;
            if (n >= 0 && (size_t)n < msg_len)
                n += snprintf(msg + n, msg_len - (size_t)n, " %s max %.2e (%.1e /max|ref|)", grad_names[i],
                              e[i].max_abs, e[i].max_abs / fmax(e[i].max_ref, 1e-30));
        }
        if (n >= 0 && (size_t)n < msg_len)
            snprintf(msg + n, msg_len - (size_t)n, " nonfinite %zu", nonfinite);
    }
    if (ok && s->deterministic)
        ok = check_repeatable(ctx, r, msg, msg_len);
    free_run(cpu, &rc);
    ffpa_destroy(cpu);
    return ok;
}

/* Median seconds per call of op: o->warmup calls, then o->reps repetitions
 * of `iters` calls (auto: about 20 ms per repetition), ffpa_synchronize
 * before and after each, wall clock in between. */
static ffpa_status time_op(ffpa_context *ctx, run_bufs *r, ffpa_status (*op)(ffpa_context *, run_bufs *),
                           const bench_opts *o, double *med)
{
    ffpa_status st = FFPA_OK;
    for (int w = 0; w < o->warmup && st == FFPA_OK; ++w)
        st = op(ctx, r);
    if (st == FFPA_OK)
        st = ffpa_synchronize(ctx);
    int iters = o->iters;
    if (iters <= 0 && st == FFPA_OK) { /* aim for ~20 ms per repetition */
        double t0 = bench_now_s();
        st = op(ctx, r);
        ffpa_synchronize(ctx);
        double one = bench_now_s() - t0;
        iters = one > 0.02 ? 1 : (int)(0.02 / (one > 1e-6 ? one : 1e-6));
        if (iters > 1000)
            iters = 1000;
    }
    double *times = calloc((size_t)o->reps, sizeof(double));
    for (int rep = 0; rep < o->reps && st == FFPA_OK; ++rep) {
        ffpa_synchronize(ctx);
        double t0 = bench_now_s();
        for (int it = 0; it < iters && st == FFPA_OK; ++it)
            st = op(ctx, r);
        if (st == FFPA_OK)
            st = ffpa_synchronize(ctx);
        times[rep] = (bench_now_s() - t0) / iters;
    }
    if (st == FFPA_OK) {
        qsort(times, (size_t)o->reps, sizeof(double), bench_cmp_double);
        *med = times[o->reps / 2];
    }
    free(times);
    return st;
}

/* One row of the table and the CSV; the pass column only with --backward,
 * so that forward-only output stays as it always was. */
static void print_row(const bench_opts *o, FILE *csv, const ffpa_context *ctx, const shape *s,
                      const char *pass, const char *kernel, double ms, double tflops, int ok, const char *msg)
{
    const char *verdict = o->check ? (ok ? "ok " : "FAIL ") : "";
    if (o->backward)
        printf("%-36s %-4s %-26s %10.3f %9.1f  %s%s\n", s->text, pass, kernel, ms, tflops, verdict, msg);
    else
        printf("%-36s %-26s %10.3f %9.1f  %s%s\n", s->text, kernel, ms, tflops, verdict, msg);
    fflush(stdout);
    if (!csv)
        return;
    fprintf(csv, "\"%s\",%s,\"%s\",%s,\"%s\",%.4f,%.2f,\"%s%s\"", s->text, ffpa_backend_name(ctx),
            ffpa_device_name(ctx), ffpa_dtype_name(o->dtype), kernel, ms, tflops, verdict, msg);
    if (o->backward)
        fprintf(csv, ",%s", pass);
    fprintf(csv, "\n");
}

/* Forward FLOPs: QK^T and PV over the visible pairs; causal halves them. */
static double forward_flops(const shape *s, const run_bufs *r)
{
    double flops = 2.0 * r->pairs * (double)s->hq * (double)(s->dqk + s->dv);
    return s->causal ? flops * 0.5 : flops;
}

/*
 * The backward row of a shape whose forward row is done: one forward with LSE
 * for O and LSE, the optional check, the timing. The kernel column is what
 * ffpa_last_kernel says after the backward where it names the backward's
 * kernels (cuda), else "bwd " and the shape's path. Returns 1 on a failure.
 */
static int bench_backward(ffpa_context *ctx, const shape *s, const bench_opts *o, host_inputs *hi,
                          run_bufs *r, FILE *csv)
{
    char msg[512] = "-", prep_kernel[128] = "", kernel[128];
    double ms = NAN, tflops = NAN;
    if (!make_dout(s, o->dtype, hi) || !setup_backward(ctx, hi, r)) {
        printf("%-36s bwd  setup failed: %s\n", s->text, ffpa_last_error(ctx));
        return 1;
    }
    if (run_backward_prep(ctx, r) != FFPA_OK) {
        printf("%-36s bwd  forward with LSE failed: %s\n", s->text, ffpa_last_error(ctx));
        return 1;
    }
    snprintf(prep_kernel, sizeof prep_kernel, "%s", ffpa_last_kernel(ctx));
    int ok = 1, failed = 0;
    if (o->check) {
        ok = check_backward_against_cpu(ctx, s, o->dtype, hi, r, msg, sizeof msg);
        failed |= !ok;
    }
    if (o->time) {
        double med = 0;
        if (time_op(ctx, r, run_backward, o, &med) == FFPA_OK) {
            ms = med * 1e3;
            tflops = 2.5 * forward_flops(s, r) / med * 1e-12;
        } else {
            snprintf(msg, sizeof msg, "backward failed: %s", ffpa_last_error(ctx));
            failed = 1;
        }
    }
    const char *k = ffpa_last_kernel(ctx);
    if (k[0] && strcmp(k, ffpa_backend_name(ctx)) != 0 && strcmp(k, prep_kernel) != 0)
        snprintf(kernel, sizeof kernel, "%s", k);
    else
        snprintf(kernel, sizeof kernel, "bwd %s", path_label(s));
    print_row(o, csv, ctx, s, "bwd", kernel, ms, tflops, ok, msg);
    return failed;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ffpa-bench [--backend NAME] [--dtype bf16|f16] [--iters N] [--reps N] [--warmup N]\n"
            "                  [--csv FILE] [--check] [--no-time] [--backward] (SHAPE... | -f FILE)\n"
            "                  [--decode]\n"
            "SHAPE: B,Hq,Hkv,Nq,Nkv,Dqk,Dv[,flags]  flags: c causal, b bias, d dropout, v varlen, l lse,\n"
            "        r deterministic backward, g dbias (implies b), o gradients accumulated in the output dtype,\n"
            "        wL[.R] sliding window (L keys before the diagonal, R after), sC softcap C, a ALiBi slopes,\n"
            "        tX Q drawn from [-X, X) instead of [-1, 1) (large scores: peaked softmax rows)\n"
            "--decode SHAPE: B,Hq,Hkv,Nq,Nkv,Dqk,Dv,page[,flags] on a paged KV cache (ffpa_forward_kvcache)\n"
            "        flags: c causal, a append, m MLA (V in K), x mixed lengths 1..Nkv, d dense cache\n"
            "exit status: 0 success, 1 a run or check failed, 2 bad usage\n");
}

/* The parsed forward/backward shapes and the decode shapes' texts. */
static void free_shape_lists(shape *shapes, char **decode_shapes, int n_decode)
{
    for (int i = 0; i < n_decode; ++i)
        free(decode_shapes[i]);
    free(decode_shapes);
    free(shapes);
}

/* One shape's text, as a forward SHAPE or (with --decode) a KV-cache shape. */
static void add_shape(const char *text, int decode, shape **shapes, int *n_shapes, int *cap, char **decode_shapes,
                      int *n_decode)
{
    if (decode) {
        decode_shapes[(*n_decode)++] = strdup(text);
        return;
    }
    if (*n_shapes == *cap)
        *shapes = realloc(*shapes, sizeof **shapes * (size_t)(*cap = *cap ? 2 * *cap : 16));
    if (!parse_shape(text, &(*shapes)[*n_shapes]))
        cli_usage_error("shape '%s': expected B,Hq,Hkv,Nq,Nkv,Dqk,Dv[,flags] (see --help)", text);
    ++*n_shapes;
}

int main(int argc, char **argv)
{
    bench_opts o = {NULL, FFPA_BF16, 0, 10, 3, 0, 1, NULL, 0};
    shape *shapes = NULL;
    int n_shapes = 0, cap = 0;
    /* --decode: the shapes are KV-cache shapes (kv_bench.c), kept as text. */
    int decode = 0;
    const char *shape_file = NULL;
    enum { O_BACKEND = 256, O_DTYPE, O_ITERS, O_REPS, O_WARMUP, O_CSV, O_CHECK, O_NOTIME, O_BACKWARD, O_DECODE };
    static const struct option opts[] = {
        {"backend", required_argument, 0, O_BACKEND}, {"dtype", required_argument, 0, O_DTYPE},
        {"iters", required_argument, 0, O_ITERS},     {"reps", required_argument, 0, O_REPS},
        {"warmup", required_argument, 0, O_WARMUP},   {"csv", required_argument, 0, O_CSV},
        {"check", no_argument, 0, O_CHECK},           {"no-time", no_argument, 0, O_NOTIME},
        {"backward", no_argument, 0, O_BACKWARD},     {"decode", no_argument, 0, O_DECODE},
        {"file", required_argument, 0, 'f'},          {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    static const char *const dtypes[] = {"bf16", "f16"};
    cli_tool("ffpa-bench");
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "f:h", opts, NULL)) != -1) {
        switch (ch) {
        case O_BACKEND: o.backend = optarg; break;
        case O_DTYPE: o.dtype = cli_choice("--dtype", optarg, dtypes, 2) ? FFPA_F16 : FFPA_BF16; break;
        case O_ITERS: o.iters = (int)cli_int("--iters", optarg, 1, 1000000); break;
        case O_REPS: o.reps = (int)cli_int("--reps", optarg, 1, 1000000); break;
        case O_WARMUP: o.warmup = (int)cli_int("--warmup", optarg, 0, 1000000); break;
        case O_CSV: o.csv = optarg; fclose(cli_open_out("--csv", optarg)); break; /* fail before any run */
        case O_CHECK: o.check = 1; break;
        case O_NOTIME: o.time = 0; break;
        case O_BACKWARD: o.backward = 1; break;
        case O_DECODE: decode = 1; break;
        case 'f': shape_file = optarg; break;
        case 'h': usage(stdout); return CLI_EXIT_OK;
        default: cli_bad_option(argv, usage);
        }
    }
    char **decode_shapes = calloc((size_t)argc + 1024, sizeof *decode_shapes);
    int n_decode = 0;
    for (int i = optind; i < argc; ++i)
        add_shape(argv[i], decode, &shapes, &n_shapes, &cap, decode_shapes, &n_decode);
    if (shape_file) {
        FILE *f = fopen(shape_file, "r");
        if (!f)
            cli_usage_error("-f '%s': cannot open: %s", shape_file, strerror(errno));
        char line[256];
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n#")] = '\0';
            if (line[0] && n_decode < argc + 1024)
                add_shape(line, decode, &shapes, &n_shapes, &cap, decode_shapes, &n_decode);
        }
        fclose(f);
    }
    if (!n_shapes && !n_decode) {
        usage(stderr);
        free_shape_lists(shapes, decode_shapes, n_decode);
        return CLI_EXIT_USAGE;
    }
    if (o.reps < 10)
        o.reps = 10;

    ffpa_context *ctx = NULL;
    if (ffpa_create(&ctx, o.backend) != FFPA_OK) {
        fprintf(stderr, "ffpa_create: %s\n", ffpa_last_error(NULL));
        free_shape_lists(shapes, decode_shapes, n_decode);
        return 1;
    }
    printf("# backend %s, device %s, dtype %s\n", ffpa_backend_name(ctx), ffpa_device_name(ctx),
           ffpa_dtype_name(o.dtype));
    if (decode) {
        int rc = kv_bench_run(ctx, o.dtype, o.reps, o.check, o.csv, decode_shapes, n_decode);
        ffpa_destroy(ctx);
        free_shape_lists(shapes, decode_shapes, n_decode);
        return rc;
    }
    FILE *csv = o.csv ? cli_open_out("--csv", o.csv) : NULL;
    if (csv)
        fprintf(csv, "shape,backend,device,dtype,path,ms,tflops,check%s\n", o.backward ? ",pass" : "");
    if (o.backward)
        printf("%-36s %-4s %-26s %10s %9s  %s\n", "shape", "pass", "kernel", "ms", "TFLOP/s", "check");
    else
        printf("%-36s %-26s %10s %9s  %s\n", "shape", "kernel", "ms", "TFLOP/s", "check");
    int failures = 0;
    for (int si = 0; si < n_shapes; ++si) {
        const shape *s = &shapes[si];
        host_inputs hi;
        run_bufs r;
        char check_msg[512] = "-";
        double ms = NAN, tflops = NAN;
        if (!make_inputs(s, o.dtype, &hi) || !setup_run(ctx, s, o.dtype, &hi, &r)) {
            printf("%-36s setup failed: %s\n", s->text, ffpa_last_error(ctx));
            ++failures;
            free_inputs(&hi);
            continue;
        }
        int ok = 1;
        if (o.check) {
            ok = check_against_cpu(ctx, s, o.dtype, &hi, &r, check_msg, sizeof check_msg);
            if (!ok)
                ++failures;
        }
        if (o.time) {
            double med = 0;
            if (time_op(ctx, &r, run_forward, &o, &med) == FFPA_OK) {
                ms = med * 1e3;
                tflops = forward_flops(s, &r) / med * 1e-12;
            } else {
                snprintf(check_msg, sizeof check_msg, "forward failed: %s", ffpa_last_error(ctx));
                ++failures;
            }
        }
        print_row(&o, csv, ctx, s, "fwd", kernel_label(ctx, s), ms, tflops, ok, check_msg);
        if (o.backward)
            failures += bench_backward(ctx, s, &o, &hi, &r, csv);
        free_run(ctx, &r);
        free_inputs(&hi);
    }
    if (csv && cli_close_out(csv, o.csv))
        ++failures;
    ffpa_destroy(ctx);
    free_shape_lists(shapes, decode_shapes, n_decode);
    return failures ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}
