/*
 * ffpa-tune: measures, on the device it runs on, which values of the
 * planner's tunable fields (today: pipeline `stages`, and `kv_splits` of
 * split-KV decode) are fastest for a grid of forward shapes, and writes the
 * per-device table the core loads (tuning/<device>.json, see README.md).
 *
 *   ffpa-tune [--backend cuda] [--out FILE] [--budget-s 85] [--reps 10]
 *             [--margin 0.03] [--quick] [--shape B,Hq,Hkv,Nq,Nkv,D[,c]]...
 *
 * --shape (repeatable) tunes those shapes instead of the built-in grid.
 *
 * Per shape: the heuristic plan runs on a context with FFPA_TUNING=0; every
 * candidate is a one-entry table in a temporary file, run on a context
 * created with FFPA_TUNING_FILE naming it, on the same random inputs. A
 * candidate's O and LSE must match the heuristic's elementwise (bf16
 * tolerance; outputs poisoned with NaN first) or it is rejected. Timing: 2
 * warm-up calls, then the median of `reps` repetitions of `iters` calls
 * (iters reaching ~2 ms), ffpa_synchronize around each. A candidate must
 * beat the heuristic by `margin` to be kept, so noise never writes a change;
 * every shape gets an entry (the heuristic's own values when nothing won),
 * so the nearest-shape lookup never carries a neighbour's choice onto a
 * measured shape. Shapes are sized to ~0.4 TFLOP per call and <= 16M
 * elements per tensor, except N = 8192, tuned at the benchmark grid's own
 * B = 1, Hq = 16; the sweep stops starting shapes after --budget-s.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtype.h"
#include "ffpa.h"
#include "plan.h"
#include "tuning.h"

typedef struct tune_shape {
    int64_t b, hq, hkv, nq, nkv, d;
    int causal;
} tune_shape;

typedef struct tune_cfg {
    int stages, kv_splits; /* 0: keep the heuristic's */
} tune_cfg;

typedef struct tune_opts {
    const char *backend, *out;
    double budget_s, margin;
    int reps, quick;
    int n_user;
    tune_shape user[64];
} tune_opts;

/* Device buffers of one shape, shared by every context of the process. */
typedef struct tune_bufs {
    void *q, *k, *v, *o, *lse;
    size_t q_bytes, kv_bytes, o_bytes, lse_bytes;
    ffpa_tensor tq, tk, tv, to, tl;
    ffpa_options opt;
    uint16_t *o_ref, *o_host;
    float *lse_ref, *lse_host;
} tune_bufs;

static double now_s(void)
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

static const char *path_name(ffpa_kernel_path p)
{
    return p == FFPA_PATH_SMALL_D ? "small-d" : p == FFPA_PATH_SPLIT_D ? "split-d" : "decode";
}

/* The planner's device facts, from "NAME (sm_XY, N SMs)"; only used to
 * predict the heuristic plan for the record and to skip candidates that
 * plan the same as another. The library decides with the real limits. */
static ffpa_device_limits limits_from_name(const char *name)
{
    ffpa_device_limits lim = {0};
    int major = 9, minor = 0, sms = 132;
    const char *p = strstr(name, "(sm_");
    if (p)
        sscanf(p, "(sm_%1d%1d, %d SMs", &major, &minor, &sms);
    int arch = major * 10 + minor;
    lim.is_gpu = 1;
    lim.arch = arch;
    lim.sm_count = sms;
    lim.warp_size = 32;
    lim.smem_per_block = arch == 80 || arch == 87 ? 166912 : arch >= 90 && arch < 120 ? 232448 : 101376;
    lim.smem_per_sm = lim.smem_per_block + 1024;
    lim.regs_per_sm = 65536;
    lim.max_threads_per_block = 1024;
    return lim;
}

static ffpa_plan_input plan_input_of(const tune_shape *s)
{
    ffpa_plan_input in;
    memset(&in, 0, sizeof in);
    in.dtype = FFPA_BF16;
    in.batch = s->b, in.hq = s->hq, in.hkv = s->hkv, in.nq = s->nq, in.nkv = s->nkv;
    in.dqk = in.dv = s->d;
    in.causal = s->causal;
    return in;
}

static void device_key(const char *name, char *buf, size_t len)
{
    const char *paren = strstr(name, " (");
    int n = paren ? (int)(paren - name) : (int)strlen(name);
    snprintf(buf, len, "%.*s", n, name);
}

/* ------------------------------------------------------------ tables */

static cJSON *entry_json(const tune_shape *s, ffpa_kernel_path path, tune_cfg c)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "pass", "fwd");
    cJSON_AddStringToObject(e, "dtype", "bf16");
    cJSON_AddStringToObject(e, "path", path_name(path));
    cJSON_AddBoolToObject(e, "causal", s->causal);
    cJSON_AddBoolToObject(e, "gqa", s->hq != s->hkv);
    cJSON_AddNumberToObject(e, "d", (double)s->d);
    cJSON_AddNumberToObject(e, "nq", (double)s->nq);
    cJSON_AddNumberToObject(e, "nkv", (double)s->nkv);
    cJSON *cfg = cJSON_AddObjectToObject(e, "config");
    if (c.stages)
        cJSON_AddNumberToObject(cfg, "stages", c.stages);
    if (c.kv_splits)
        cJSON_AddNumberToObject(cfg, "kv_splits", c.kv_splits);
    return e;
}

static cJSON *table_json(const char *device, const char *detail)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "format", "ffpa-tuning");
    cJSON_AddNumberToObject(t, "version", 1);
    cJSON_AddStringToObject(t, "device", device);
    cJSON_AddStringToObject(t, "device_detail", detail);
    return t;
}

/* One top-level member per line, one entry per line: diff-friendly. */
static int write_json(const char *path, const cJSON *root)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    int ok = fputs("{\n", f) >= 0;
    for (const cJSON *it = root->child; it && ok; it = it->next) {
        char *key = cJSON_PrintUnformatted(&(cJSON){.type = cJSON_String, .valuestring = it->string});
        ok = key && fprintf(f, "  %s: ", key) > 0;
        free(key);
        if (ok && cJSON_IsArray(it)) {
            ok = fputs("[", f) >= 0;
            for (const cJSON *e = it->child; e && ok; e = e->next) {
                char *text = cJSON_PrintUnformatted(e);
                ok = text && fprintf(f, "\n    %s%s", text, e->next ? "," : "\n  ") > 0;
                free(text);
            }
            ok = ok && fputs("]", f) >= 0;
        } else if (ok) {
            char *text = cJSON_PrintUnformatted(it);
            ok = text && fputs(text, f) >= 0;
            free(text);
        }
        ok = ok && fputs(it->next ? ",\n" : "\n", f) >= 0;
    }
    ok = ok && fputs("}\n", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* ------------------------------------------------------------ runs */

static void *upload(ffpa_context *ctx, const void *host, size_t bytes)
{
    void *d = NULL;
    if (ffpa_malloc(ctx, &d, bytes) != FFPA_OK)
        return NULL;
    if (host && ffpa_memcpy(ctx, d, host, bytes, FFPA_COPY_HOST_TO_DEVICE) != FFPA_OK) {
        ffpa_free(ctx, d);
        return NULL;
    }
    return d;
}

static void free_bufs(ffpa_context *ctx, tune_bufs *r)
{
    ffpa_free(ctx, r->q), ffpa_free(ctx, r->k), ffpa_free(ctx, r->v), ffpa_free(ctx, r->o),
        ffpa_free(ctx, r->lse);
    free(r->o_ref), free(r->o_host), free(r->lse_ref), free(r->lse_host);
    memset(r, 0, sizeof *r);
}

static int setup_bufs(ffpa_context *ctx, const tune_shape *s, tune_bufs *r)
{
    memset(r, 0, sizeof *r);
    size_t nq_el = (size_t)(s->b * s->hq * s->nq * s->d), nkv_el = (size_t)(s->b * s->hkv * s->nkv * s->d);
    size_t n_lse = (size_t)(s->b * s->hq * s->nq);
    r->q_bytes = r->o_bytes = nq_el * 2;
    r->kv_bytes = nkv_el * 2;
    r->lse_bytes = n_lse * 4;
    /* Random bf16 in [-1, 1): a pool of 4M fresh values per tensor, tiled
     * (large tensors repeat it; timing and checks only need non-trivial data). */
    size_t max_el = nq_el > nkv_el ? nq_el : nkv_el, pool = (size_t)1 << 22;
    uint16_t *h = malloc(max_el * 2);
    if (!h)
        return 0;
    int ok = 1;
    void **dst[3] = {&r->q, &r->k, &r->v};
    size_t counts[3] = {nq_el, nkv_el, nkv_el};
    for (int t = 0; t < 3 && ok; ++t) {
        size_t fresh = counts[t] < pool ? counts[t] : pool;
        for (size_t i = 0; i < fresh; ++i)
            h[i] = ffpa_f32_to_bf16(rand_unit());
        for (size_t i = fresh; i < counts[t]; i += fresh)
            memcpy(h + i, h, (counts[t] - i < fresh ? counts[t] - i : fresh) * 2);
        *dst[t] = upload(ctx, h, counts[t] * 2);
        ok = *dst[t] != NULL;
    }
    free(h);
    r->o = ok ? upload(ctx, NULL, r->o_bytes) : NULL;
    r->lse = r->o ? upload(ctx, NULL, r->lse_bytes) : NULL;
    r->o_ref = malloc(r->o_bytes), r->o_host = malloc(r->o_bytes);
    r->lse_ref = malloc(r->lse_bytes), r->lse_host = malloc(r->lse_bytes);
    if (!r->lse || !r->o_ref || !r->o_host || !r->lse_ref || !r->lse_host)
        return 0;
    r->tq = ffpa_tensor_bhnd(r->q, FFPA_BF16, s->b, s->hq, s->nq, s->d);
    r->tk = ffpa_tensor_bhnd(r->k, FFPA_BF16, s->b, s->hkv, s->nkv, s->d);
    r->tv = ffpa_tensor_bhnd(r->v, FFPA_BF16, s->b, s->hkv, s->nkv, s->d);
    r->to = ffpa_tensor_bhnd(r->o, FFPA_BF16, s->b, s->hq, s->nq, s->d);
    r->tl = ffpa_tensor_bhnd(r->lse, FFPA_F32, s->b, s->hq, s->nq, 1);
    r->opt = ffpa_options_default();
    r->opt.causal = s->causal;
    return 1;
}

static ffpa_status forward(ffpa_context *ctx, tune_bufs *r)
{
    return ffpa_forward(ctx, &r->tq, &r->tk, &r->tv, &r->to, &r->tl, &r->opt);
}

/* One checked run: poison, forward, copy O and LSE to o_host / lse_host. */
static int run_once(ffpa_context *ctx, tune_bufs *r, char *why, size_t why_len)
{
    memset(r->o_host, 0xFF, r->o_bytes);
    memset(r->lse_host, 0xFF, r->lse_bytes);
    if (ffpa_memcpy(ctx, r->o, r->o_host, r->o_bytes, FFPA_COPY_HOST_TO_DEVICE) != FFPA_OK ||
        ffpa_memcpy(ctx, r->lse, r->lse_host, r->lse_bytes, FFPA_COPY_HOST_TO_DEVICE) != FFPA_OK ||
        forward(ctx, r) != FFPA_OK || ffpa_synchronize(ctx) != FFPA_OK ||
        ffpa_memcpy(ctx, r->o_host, r->o, r->o_bytes, FFPA_COPY_DEVICE_TO_HOST) != FFPA_OK ||
        ffpa_memcpy(ctx, r->lse_host, r->lse, r->lse_bytes, FFPA_COPY_DEVICE_TO_HOST) != FFPA_OK) {
        snprintf(why, why_len, "%s", ffpa_last_error(ctx));
        return 0;
    }
    return 1;
}

/* Candidate output vs the heuristic's: elementwise within bf16 rounding of
 * a differently ordered sum (split-KV merges), NaN never passes. */
static int matches_reference(const tune_bufs *r, char *why, size_t why_len)
{
    size_t n = r->o_bytes / 2, nl = r->lse_bytes / 4;
    /* Same split of the work, same sums: bitwise equal (the common case). */
    int same_o = !memcmp(r->o_host, r->o_ref, r->o_bytes), same_lse = !memcmp(r->lse_host, r->lse_ref, r->lse_bytes);
    if (same_o && same_lse)
        return 1; /* the reference itself was checked for NaN */
    double max_ref = 0;
    for (size_t i = 0; i < n; ++i) {
        double a = fabs((double)ffpa_bf16_to_f32(r->o_ref[i]));
        max_ref = a > max_ref ? a : max_ref;
    }
    for (size_t i = 0; i < n; ++i) {
        double want = ffpa_bf16_to_f32(r->o_ref[i]), got = ffpa_bf16_to_f32(r->o_host[i]);
        if (!(fabs(got - want) <= 4e-3 * max_ref + 0x1p-7 * fabs(want))) {
            snprintf(why, why_len, "O[%zu] = %g, heuristic plan gives %g", i, got, want);
            return 0;
        }
    }
    for (size_t i = 0; i < nl; ++i) {
        double want = r->lse_ref[i], got = r->lse_host[i];
        if (!(fabs(got - want) <= 1e-3 + 1e-4 * fabs(want))) {
            snprintf(why, why_len, "LSE[%zu] = %g, heuristic plan gives %g", i, got, want);
            return 0;
        }
    }
    return 1;
}

/* Median seconds per call; NAN on failure. */
static double time_forward(ffpa_context *ctx, tune_bufs *r, int reps)
{
    ffpa_status st = FFPA_OK;
    for (int w = 0; w < 2 && st == FFPA_OK; ++w)
        st = forward(ctx, r);
    if (st != FFPA_OK || ffpa_synchronize(ctx) != FFPA_OK)
        return NAN;
    double t0 = now_s();
    st = forward(ctx, r);
    ffpa_synchronize(ctx);
    double one = now_s() - t0;
    int iters = one >= 2e-3 ? 1 : (int)(2e-3 / (one > 1e-6 ? one : 1e-6)) + 1;
    double *times = calloc((size_t)reps, sizeof *times);
    for (int rep = 0; rep < reps && st == FFPA_OK; ++rep) {
        ffpa_synchronize(ctx);
        t0 = now_s();
        for (int it = 0; it < iters && st == FFPA_OK; ++it)
            st = forward(ctx, r);
        if (st == FFPA_OK)
            st = ffpa_synchronize(ctx);
        times[rep] = (now_s() - t0) / iters;
    }
    double med = NAN;
    if (st == FFPA_OK) {
        qsort(times, (size_t)reps, sizeof *times, cmp_double);
        med = times[reps / 2];
    }
    free(times);
    return med;
}

/* ------------------------------------------------------------ shapes */

/* Heads and batch for ~0.4 TFLOP per call within 16M elements per tensor. */
static tune_shape sized(int64_t nq, int64_t nkv, int64_t d, int causal, int gqa)
{
    tune_shape s = {1, 32, 32, nq, nkv, d, causal};
    if (nq == 8192) {
        s.hq = 16; /* the benchmark grid's shape (bench/grid.sh): B = 1, Hq = 16 */
    } else if (nq > 16) {
        double per_head = 4.0 * (double)nq * (double)nkv * (double)d * (causal ? 0.5 : 1.0);
        double heads = 4e11 / per_head;
        int64_t limit = ((int64_t)1 << 24) / (nq * d);
        int64_t bh = heads < 1 ? 1 : (int64_t)heads;
        bh = bh > limit ? limit : bh;
        bh = bh < 1 ? 1 : bh;
        int64_t hq = 1;
        while (hq * 2 <= bh && hq * 2 <= 32)
            hq *= 2;
        s.hq = gqa && hq < 4 ? 4 : hq;
        s.b = bh / s.hq < 1 ? 1 : bh / s.hq > 8 ? 8 : bh / s.hq;
    }
    s.hkv = gqa ? s.hq / 4 : s.hq;
    return s;
}

static int make_shapes(tune_shape *out, int max, int quick)
{
    static const int64_t dims[] = {64, 128, 256, 320, 512, 768, 1024};
    static const int64_t seqs[] = {512, 2048, 8192, 32768};
    int n = 0, nd = quick ? 2 : 7;
#define ADD(s) \
    do { \
        if (n < max) \
            out[n++] = (s); \
    } while (0)
    /* The README grid first (N = 8192), so a cut-short sweep still covers it. */
    for (int i = 0; i < nd; ++i)
        for (int c = 0; c < 2; ++c)
            ADD(sized(8192, 8192, dims[i], c, 0));
    for (int i = 0; i < nd; ++i)
        for (int c = 0; c < 2; ++c)
            ADD(sized(8192, 8192, dims[i], c, 1));
    /* Decode: B = 1, Hq = 32, one or four query rows. */
    static const int64_t kv_lens[] = {4096, 16384};
    for (int i = 0; i < nd; ++i)
        for (int q = 0; q < 2; ++q)
            for (int k = 0; k < 2; ++k)
                ADD(sized(q ? 4 : 1, kv_lens[k], dims[i], 0, 0));
    for (int i = 0; i < nd; ++i)
        ADD(sized(1, 8192, dims[i], 0, 1)); /* the grid's decode row: Hq = 32, Hkv = 8 */
    for (int i = 0; i < nd; ++i)
        for (int si = 0; si < 4; ++si)
            if (seqs[si] != 8192 && !(quick && seqs[si] == 32768))
                ADD(sized(seqs[si], seqs[si], dims[i], 0, 0));
    for (int i = 0; i < nd; ++i)
        ADD(sized(2048, 2048, dims[i], 1, 0));
#undef ADD
    return n;
}

/* ------------------------------------------------------------ tuning */

typedef struct tune_ctx {
    const tune_opts *o;
    const char *device_detail;
    char device[160];
    ffpa_device_limits lim;
    char tmp_path[64];
} tune_ctx;

/* The plan the library makes for s with candidate c; 0 if the table does not load. */
static int plan_with(const tune_ctx *t, const tune_shape *s, ffpa_kernel_path hpath, tune_cfg c,
                     ffpa_plan *plan)
{
    cJSON *root = table_json(t->device, t->device_detail);
    cJSON *list = cJSON_AddArrayToObject(root, "entries");
    cJSON_AddItemToArray(list, entry_json(s, hpath, c));
    int ok = write_json(t->tmp_path, root);
    cJSON_Delete(root);
    char warn[256];
    ffpa_tuning_table *table = ok ? ffpa_tuning_load(t->tmp_path, t->device_detail, warn, sizeof warn) : NULL;
    if (!table) {
        fprintf(stderr, "ffpa-tune: own table rejected: %s\n", ok ? warn : "cannot write");
        return 0;
    }
    ffpa_plan_input in = plan_input_of(s);
    in.tuning = table;
    ok = ffpa_plan_make(&in, &t->lim, plan) == FFPA_OK;
    ffpa_tuning_free(table);
    return ok;
}

typedef struct tried {
    tune_cfg c;
    double ms;
    const char *status;
} tried;

/* Times the candidate written to tmp_path by plan_with (or, heuristic != 0,
 * the heuristics) on a fresh context, as a user's process would; ms or NAN. */
static double run_candidate(const tune_ctx *t, tune_bufs *r, int heuristic, char *why, size_t why_len)
{
    if (!heuristic) {
        setenv("FFPA_TUNING_FILE", t->tmp_path, 1);
        unsetenv("FFPA_TUNING");
    }
    ffpa_context *ctx = NULL;
    double sec = NAN;
    if (ffpa_create(&ctx, t->o->backend) != FFPA_OK) {
        snprintf(why, why_len, "create: %s", ffpa_last_error(NULL));
    } else if (run_once(ctx, r, why, why_len) && matches_reference(r, why, why_len)) {
        sec = time_forward(ctx, r, t->o->reps);
        if (isnan(sec))
            snprintf(why, why_len, "timing run failed: %s", ffpa_last_error(ctx));
    }
    ffpa_destroy(ctx);
    unsetenv("FFPA_TUNING_FILE");
    setenv("FFPA_TUNING", "0", 1);
    return sec * 1e3;
}

static cJSON *tune_shape_entry(const tune_ctx *t, ffpa_context *heur, const tune_shape *s)
{
    ffpa_plan_input in = plan_input_of(s);
    ffpa_plan hp;
    if (ffpa_plan_make(&in, &t->lim, &hp) != FFPA_OK)
        return NULL;
    tune_bufs r;
    char why[256] = "";
    if (!setup_bufs(heur, s, &r) || !run_once(heur, &r, why, sizeof why)) {
        fprintf(stderr, "ffpa-tune: shape skipped (setup): %s\n", why[0] ? why : ffpa_last_error(heur));
        free_bufs(heur, &r);
        return NULL;
    }
    memcpy(r.o_ref, r.o_host, r.o_bytes);
    memcpy(r.lse_ref, r.lse_host, r.lse_bytes);
    for (size_t i = 0; i < r.o_bytes / 2; ++i)
        if (isnan(ffpa_bf16_to_f32(r.o_ref[i]))) {
            fprintf(stderr, "ffpa-tune: shape skipped: the heuristic plan's O[%zu] is NaN\n", i);
            free_bufs(heur, &r);
            return NULL;
        }
    double heur_ms = run_candidate(t, &r, 1, why, sizeof why);
    if (isnan(heur_ms)) {
        fprintf(stderr, "ffpa-tune: shape skipped (heuristic timing): %s\n", why);
        free_bufs(heur, &r);
        return NULL;
    }

    tune_cfg heur_cfg = {hp.stages, hp.path == FFPA_PATH_DECODE ? hp.kv_splits : 0};
    tune_cfg best = heur_cfg;
    double best_ms = heur_ms;
    tried log[32];
    int n_log = 0;
    ffpa_plan seen[32];
    int n_seen = 0;
    seen[n_seen++] = hp;

    /* Decode: the split count first (at the heuristic depth), then the depth. */
    tune_cfg cands[32];
    int n_c = 0;
    if (hp.path == FFPA_PATH_DECODE) {
        static const int splits[] = {4, 8, 16, 24, 48, 64, 96, 128, 192, 264};
        for (size_t i = 0; i < sizeof splits / sizeof splits[0]; ++i)
            cands[n_c++] = (tune_cfg){hp.stages, splits[i]};
    }
    for (int phase = 0; phase < 2; ++phase) {
        if (phase == 1) {
            n_c = 0;
            for (int st = 2; st <= 4; ++st)
                cands[n_c++] = (tune_cfg){st, best.kv_splits};
        }
        for (int i = 0; i < n_c; ++i) {
            ffpa_plan cp;
            if (!plan_with(t, s, hp.path, cands[i], &cp))
                continue;
            int dup = 0;
            for (int j = 0; j < n_seen; ++j)
                dup |= seen[j].stages == cp.stages && seen[j].kv_splits == cp.kv_splits;
            if (dup || n_seen >= 32 || n_log >= 32)
                continue;
            seen[n_seen++] = cp;
            tune_cfg eff = {cp.stages, hp.path == FFPA_PATH_DECODE ? cp.kv_splits : 0};
            why[0] = '\0';
            double ms = run_candidate(t, &r, 0, why, sizeof why);
            log[n_log++] = (tried){eff, ms, isnan(ms) ? "rejected" : "ok"};
            if (isnan(ms))
                fprintf(stderr, "ffpa-tune: d=%lld nq=%lld nkv=%lld stages=%d splits=%d rejected: %s\n",
                        (long long)s->d, (long long)s->nq, (long long)s->nkv, eff.stages, eff.kv_splits, why);
            else if (ms < best_ms && ms < heur_ms * (1.0 - t->o->margin)) {
                best_ms = ms;
                best = eff;
            }
        }
    }
    /* A winner is timed again beside the heuristics and must win again. */
    double confirm_ms = NAN, confirm_heur_ms = NAN;
    if (best.stages != heur_cfg.stages || best.kv_splits != heur_cfg.kv_splits) {
        ffpa_plan cp;
        if (plan_with(t, s, hp.path, best, &cp)) {
            confirm_ms = run_candidate(t, &r, 0, why, sizeof why);
            confirm_heur_ms = run_candidate(t, &r, 1, why, sizeof why);
        }
        if (!(confirm_ms < confirm_heur_ms * (1.0 - t->o->margin))) {
            printf("%-30s not confirmed: %.4f ms vs heuristics %.4f ms\n", "", confirm_ms, confirm_heur_ms);
            best = heur_cfg;
            best_ms = heur_ms;
        }
    }
    free_bufs(heur, &r);

    cJSON *e = entry_json(s, hp.path, best);
    cJSON_AddNumberToObject(e, "batch", (double)s->b);
    cJSON_AddNumberToObject(e, "hq", (double)s->hq);
    cJSON_AddNumberToObject(e, "hkv", (double)s->hkv);
    cJSON *h = cJSON_AddObjectToObject(e, "heuristic");
    cJSON_AddNumberToObject(h, "stages", hp.stages);
    cJSON_AddNumberToObject(h, "kv_splits", hp.kv_splits);
    cJSON_AddNumberToObject(e, "heuristic_ms", round(heur_ms * 1e4) / 1e4);
    cJSON_AddNumberToObject(e, "best_ms", round(best_ms * 1e4) / 1e4);
    cJSON_AddNumberToObject(e, "speedup", round(heur_ms / best_ms * 1e3) / 1e3);
    if (!isnan(confirm_ms)) {
        cJSON_AddNumberToObject(e, "confirm_ms", round(confirm_ms * 1e4) / 1e4);
        cJSON_AddNumberToObject(e, "confirm_heuristic_ms", round(confirm_heur_ms * 1e4) / 1e4);
    }
    cJSON *tl = cJSON_AddArrayToObject(e, "tried");
    for (int i = 0; i < n_log; ++i) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "stages", log[i].c.stages);
        if (log[i].c.kv_splits)
            cJSON_AddNumberToObject(c, "kv_splits", log[i].c.kv_splits);
        if (isnan(log[i].ms))
            cJSON_AddStringToObject(c, "status", log[i].status);
        else
            cJSON_AddNumberToObject(c, "ms", round(log[i].ms * 1e4) / 1e4);
        cJSON_AddItemToArray(tl, c);
    }
    printf("%-30s %-8s heur st=%d sp=%-3d %9.4f ms   best st=%d sp=%-3d %9.4f ms  x%.3f  (%d tried)\n",
           "", path_name(hp.path), hp.stages, hp.kv_splits, heur_ms, best.stages,
           best.kv_splits ? best.kv_splits : hp.kv_splits, best_ms, heur_ms / best_ms, n_log);
    fflush(stdout);
    return e;
}

static void usage(void)
{
    fprintf(stderr, "usage: ffpa-tune [--backend NAME] [--out FILE] [--budget-s S] [--reps N] "
                    "[--margin F] [--quick] [--shape B,Hq,Hkv,Nq,Nkv,D[,c]]...\n");
}

int main(int argc, char **argv)
{
    static tune_opts o = {"cuda", NULL, 85.0, 0.03, 10, 0, 0, {{0}}};
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend") && next)
            o.backend = argv[++i];
        else if (!strcmp(a, "--out") && next)
            o.out = argv[++i];
        else if (!strcmp(a, "--budget-s") && next)
            o.budget_s = atof(argv[++i]);
        else if (!strcmp(a, "--reps") && next)
            o.reps = atoi(argv[++i]);
        else if (!strcmp(a, "--margin") && next)
            o.margin = atof(argv[++i]);
        else if (!strcmp(a, "--quick"))
            o.quick = 1;
        else if (!strcmp(a, "--shape") && next && o.n_user < 64) {
            tune_shape *u = &o.user[o.n_user];
            long long v[6];
            char flag = 0;
            int got = sscanf(argv[++i], "%lld,%lld,%lld,%lld,%lld,%lld,%c", &v[0], &v[1], &v[2], &v[3], &v[4],
                             &v[5], &flag);
            if (got < 6 || v[0] < 1 || v[1] < 1 || v[2] < 1 || v[1] % v[2] || v[3] < 1 || v[4] < 1 || v[5] < 1 ||
                v[5] > FFPA_MAX_HEAD_DIM) {
                fprintf(stderr, "ffpa-tune: bad --shape '%s'; expected B,Hq,Hkv,Nq,Nkv,D[,c]\n", argv[i]);
                return 2;
            }
            *u = (tune_shape){v[0], v[1], v[2], v[3], v[4], v[5], flag == 'c'};
            ++o.n_user;
        }
        else {
            usage();
            return 2;
        }
    }
    if (o.reps < 10)
        o.reps = 10;
    /* The heuristics alone, and no stray A/B knobs. */
    setenv("FFPA_TUNING", "0", 1);
    unsetenv("FFPA_TUNING_FILE");
    unsetenv("FFPA_CUDA_FWD_STAGES");
    ffpa_context *heur = NULL;
    if (ffpa_create(&heur, o.backend) != FFPA_OK) {
        fprintf(stderr, "ffpa-tune: %s\n", ffpa_last_error(NULL));
        return 1;
    }
    tune_ctx t;
    memset(&t, 0, sizeof t);
    t.o = &o;
    t.device_detail = ffpa_device_name(heur);
    device_key(t.device_detail, t.device, sizeof t.device);
    t.lim = limits_from_name(t.device_detail);
    snprintf(t.tmp_path, sizeof t.tmp_path, "/tmp/ffpa-tune-%ld.json", (long)getpid());
    char default_out[200];
    if (!o.out) {
        ffpa_tuning_file_name(t.device_detail, default_out, sizeof default_out);
        o.out = default_out;
    }
    printf("# ffpa-tune on %s (backend %s), bf16 forward, budget %.0f s, margin %.0f%%\n", t.device_detail,
           ffpa_backend_name(heur), o.budget_s, o.margin * 100);

    tune_shape shapes[200];
    int n = o.n_user;
    if (n)
        memcpy(shapes, o.user, (size_t)n * sizeof shapes[0]);
    else
        n = make_shapes(shapes, 200, o.quick);
    cJSON *root = table_json(t.device, t.device_detail);
    cJSON_AddStringToObject(root, "generated_by", "ffpa-tune (tuning/ffpa-tune.c), bf16 forward");
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", FFPA_VERSION_MAJOR, FFPA_VERSION_MINOR, FFPA_VERSION_PATCH);
    cJSON_AddStringToObject(root, "library_version", version);
    cJSON *entries = cJSON_AddArrayToObject(root, "entries");
    double t0 = now_s();
    int done = 0, faster = 0;
    for (int i = 0; i < n; ++i) {
        if (now_s() - t0 > o.budget_s) {
            printf("# budget reached: %d of %d shapes tuned\n", done, n);
            break;
        }
        const tune_shape *s = &shapes[i];
        printf("%lld,%lld,%lld,%lld,%lld,%lld,%lld%s\n", (long long)s->b, (long long)s->hq,
               (long long)s->hkv, (long long)s->nq, (long long)s->nkv, (long long)s->d, (long long)s->d,
               s->causal ? ",c" : "");
        cJSON *e = tune_shape_entry(&t, heur, s);
        if (e) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "speedup");
            faster += cJSON_IsNumber(sp) && sp->valuedouble > 1.0;
            cJSON_AddItemToArray(entries, e);
            ++done;
        }
    }
    unlink(t.tmp_path);
    int ok = done > 0 && write_json(o.out, root);
    printf("# %d entries (%d faster than the heuristics) in %.1f s -> %s%s\n", done, faster, now_s() - t0,
           o.out, ok ? "" : " (NOT WRITTEN)");
    cJSON_Delete(root);
    ffpa_destroy(heur);
    return ok ? 0 : 1;
}
