/* ffpa-tune: device buffers, checked runs and timing of one shape and pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "tune.h"

double tune_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float rand_unit(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A device buffer of `count` bf16 values: random in [-1, 1) (a pool of 4M
 * fresh values, tiled: timing and checks only need non-trivial data), or
 * uninitialised when random is 0. NULL on failure. */
static void *device_bf16(ffpa_context *ctx, size_t count, int random)
{
    void *d = NULL;
    if (ffpa_malloc(ctx, &d, count * 2) != FFPA_OK)
        return NULL;
    if (!random)
        return d;
    size_t pool = (size_t)1 << 22, fresh = count < pool ? count : pool;
    uint16_t *h = malloc(count * 2);
    if (h) {
        for (size_t i = 0; i < fresh; ++i)
            h[i] = ffpa_f32_to_bf16(rand_unit());
        for (size_t i = fresh; i < count; i += fresh)
            memcpy(h + i, h, (count - i < fresh ? count - i : fresh) * 2);
    }
    if (!h || ffpa_memcpy(ctx, d, h, count * 2, FFPA_COPY_HOST_TO_DEVICE) != FFPA_OK) {
        ffpa_free(ctx, d);
        d = NULL;
    }
    free(h);
    return d;
}

static int add_out(tune_bufs *r, const char *name, void *dev, size_t bytes, int is_f32)
{
    tune_out *o = &r->out[r->n_out++];
    o->name = name;
    o->dev = dev;
    o->bytes = bytes;
    o->is_f32 = is_f32;
    o->ref = malloc(bytes);
    o->host = malloc(bytes);
    return o->ref && o->host;
}

void tune_free_bufs(ffpa_context *ctx, tune_bufs *r)
{
    void *dev[] = {r->q, r->k, r->v, r->o, r->lse, r->dout, r->dq, r->dk, r->dv};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i)
        ffpa_free(ctx, dev[i]);
    for (int i = 0; i < r->n_out; ++i)
        free(r->out[i].ref), free(r->out[i].host);
    memset(r, 0, sizeof *r);
}

static ffpa_status run_pass(ffpa_context *ctx, tune_bufs *r)
{
    if (r->backward)
        return ffpa_backward(ctx, &r->tdo, &r->tq, &r->tk, &r->tv, &r->to, &r->tl, &r->tdq, &r->tdk, &r->tdv,
                             &r->opt);
    return ffpa_forward(ctx, &r->tq, &r->tk, &r->tv, &r->to, &r->tl, &r->opt);
}

int tune_setup_bufs(ffpa_context *ctx, const tune_shape *s, int backward, tune_bufs *r)
{
    memset(r, 0, sizeof *r);
    r->backward = backward;
    size_t nq_el = (size_t)(s->b * s->hq * s->nq * s->d), nkv_el = (size_t)(s->b * s->hkv * s->nkv * s->d);
    size_t lse_bytes = (size_t)(s->b * s->hq * s->nq) * 4;
    r->q = device_bf16(ctx, nq_el, 1);
    r->k = device_bf16(ctx, nkv_el, 1);
    r->v = device_bf16(ctx, nkv_el, 1);
    r->o = device_bf16(ctx, nq_el, 0);
    if (ffpa_malloc(ctx, &r->lse, lse_bytes) != FFPA_OK)
        r->lse = NULL;
    int ok = r->q && r->k && r->v && r->o && r->lse;
    r->tq = ffpa_tensor_bhnd(r->q, FFPA_BF16, s->b, s->hq, s->nq, s->d);
    r->tk = ffpa_tensor_bhnd(r->k, FFPA_BF16, s->b, s->hkv, s->nkv, s->d);
    r->tv = ffpa_tensor_bhnd(r->v, FFPA_BF16, s->b, s->hkv, s->nkv, s->d);
    r->to = ffpa_tensor_bhnd(r->o, FFPA_BF16, s->b, s->hq, s->nq, s->d);
    r->tl = ffpa_tensor_bhnd(r->lse, FFPA_F32, s->b, s->hq, s->nq, 1);
    r->opt = ffpa_options_default();
    r->opt.causal = s->causal;
    if (ok && !backward) {
        ok = add_out(r, "O", r->o, nq_el * 2, 0) && add_out(r, "LSE", r->lse, lse_bytes, 1);
    } else if (ok) {
        /* The backward's inputs O and LSE: the forward of this context. */
        ok = ffpa_forward(ctx, &r->tq, &r->tk, &r->tv, &r->to, &r->tl, &r->opt) == FFPA_OK &&
             ffpa_synchronize(ctx) == FFPA_OK;
        r->dout = device_bf16(ctx, nq_el, 1);
        r->dq = device_bf16(ctx, nq_el, 0);
        r->dk = device_bf16(ctx, nkv_el, 0);
        r->dv = device_bf16(ctx, nkv_el, 0);
        ok = ok && r->dout && r->dq && r->dk && r->dv;
        r->tdo = ffpa_tensor_bhnd(r->dout, FFPA_BF16, s->b, s->hq, s->nq, s->d);
        r->tdq = ffpa_tensor_bhnd(r->dq, FFPA_BF16, s->b, s->hq, s->nq, s->d);
        r->tdk = ffpa_tensor_bhnd(r->dk, FFPA_BF16, s->b, s->hkv, s->nkv, s->d);
        r->tdv = ffpa_tensor_bhnd(r->dv, FFPA_BF16, s->b, s->hkv, s->nkv, s->d);
        ok = ok && add_out(r, "dQ", r->dq, nq_el * 2, 0) && add_out(r, "dK", r->dk, nkv_el * 2, 0) &&
             add_out(r, "dV", r->dv, nkv_el * 2, 0);
    }
    if (!ok)
        tune_free_bufs(ctx, r);
    return ok;
}

int tune_run_once(ffpa_context *ctx, tune_bufs *r, char *why, size_t why_len)
{
    int ok = 1;
    for (int i = 0; i < r->n_out && ok; ++i) {
        memset(r->out[i].host, 0xFF, r->out[i].bytes); /* NaN in bf16 and f32 */
        ok = ffpa_memcpy(ctx, r->out[i].dev, r->out[i].host, r->out[i].bytes, FFPA_COPY_HOST_TO_DEVICE) == FFPA_OK;
    }
    ok = ok && run_pass(ctx, r) == FFPA_OK && ffpa_synchronize(ctx) == FFPA_OK;
    for (int i = 0; i < r->n_out && ok; ++i)
        ok = ffpa_memcpy(ctx, r->out[i].host, r->out[i].dev, r->out[i].bytes, FFPA_COPY_DEVICE_TO_HOST) == FFPA_OK;
    if (!ok)
        snprintf(why, why_len, "%s", ffpa_last_error(ctx));
    return ok;
}

static double value_at(const tune_out *o, const void *base, size_t i)
{
    return o->is_f32 ? (double)((const float *)base)[i] : (double)ffpa_bf16_to_f32(((const uint16_t *)base)[i]);
}

int tune_keep_reference(tune_bufs *r, char *why, size_t why_len)
{
    for (int k = 0; k < r->n_out; ++k) {
        tune_out *o = &r->out[k];
        memcpy(o->ref, o->host, o->bytes);
        size_t n = o->bytes / (o->is_f32 ? 4 : 2);
        for (size_t i = 0; i < n; ++i)
            if (isnan(value_at(o, o->ref, i))) {
                snprintf(why, why_len, "the heuristic plan's %s[%zu] is NaN", o->name, i);
                return 0;
            }
    }
    return 1;
}

int tune_matches_reference(const tune_bufs *r, char *why, size_t why_len)
{
    /* bf16 outputs: relative to the largest value, wider for the backward's
     * longer sums (atomics and other tilings reorder them); LSE: absolute. */
    const double rel_max = r->backward ? 1e-2 : 4e-3;
    for (int k = 0; k < r->n_out; ++k) {
        const tune_out *o = &r->out[k];
        if (!memcmp(o->host, o->ref, o->bytes))
            continue; /* same sums: bitwise equal (the reference was checked for NaN) */
        size_t n = o->bytes / (o->is_f32 ? 4 : 2);
        double max_ref = 0;
        for (size_t i = 0; i < n; ++i) {
            double a = fabs(value_at(o, o->ref, i));
            max_ref = a > max_ref ? a : max_ref;
        }
        for (size_t i = 0; i < n; ++i) {
            double want = value_at(o, o->ref, i), got = value_at(o, o->host, i);
            double tol = o->is_f32 ? 1e-3 + 1e-4 * fabs(want) : rel_max * max_ref + 0x1p-7 * fabs(want);
            if (!(fabs(got - want) <= tol)) {
                snprintf(why, why_len, "%s[%zu] = %g, heuristic plan gives %g (tolerance %.3g)", o->name, i, got,
                         want, tol);
                return 0;
            }
        }
    }
    return 1;
}

double tune_time_calls(ffpa_context *ctx, tune_bufs *r, int reps)
{
    ffpa_status st = FFPA_OK;
    for (int w = 0; w < 2 && st == FFPA_OK; ++w)
        st = run_pass(ctx, r);
    if (st != FFPA_OK || ffpa_synchronize(ctx) != FFPA_OK)
        return NAN;
    double t0 = tune_now_s();
    st = run_pass(ctx, r);
    ffpa_synchronize(ctx);
    double one = tune_now_s() - t0;
    int iters = one >= 2e-3 ? 1 : (int)(2e-3 / (one > 1e-6 ? one : 1e-6)) + 1;
    double *times = calloc((size_t)reps, sizeof *times);
    if (!times)
        return NAN;
    for (int rep = 0; rep < reps && st == FFPA_OK; ++rep) {
        ffpa_synchronize(ctx);
        t0 = tune_now_s();
        for (int it = 0; it < iters && st == FFPA_OK; ++it)
            st = run_pass(ctx, r);
        if (st == FFPA_OK)
            st = ffpa_synchronize(ctx);
        times[rep] = (tune_now_s() - t0) / iters;
    }
    double med = NAN;
    if (st == FFPA_OK) {
        qsort(times, (size_t)reps, sizeof *times, cmp_double);
        med = times[reps / 2];
    }
    free(times);
    return med;
}
