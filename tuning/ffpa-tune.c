/*
 * ffpa-tune: measures, on the device it runs on, which of the planner's
 * legal configurations is fastest for a grid of shapes, forward and
 * backward, and writes the per-device table the core loads
 * (tuning/<device>.json, format in README.md).
 *
 *   ffpa-tune [--backend cuda] [--out FILE] [--pass fwd|bwd|both] [--budget-s 240]
 *             [--reps 10] [--margin 0.03] [--quick] [--shape B,Hq,Hkv,Nq,Nkv,D[,c]]...
 *
 * --shape (repeatable) tunes those shapes instead of the built-in grids.
 * Under FFPA_CUDA_AS_ARCH=80|86|89 (the cuda backend planning as on that
 * part) it writes that arch's table (cuda-sm_80.json: "arch" and
 * "measured_on" instead of "device").
 *
 * Candidates per shape, each only where the planner applies it (legal for
 * the problem, fits shared memory):
 *   forward, split-KV decode: kv_splits at the heuristic tile, then every
 *     generic tile covering D x stages 2..4 at the best split count;
 *   forward, other shapes: every generic tile covering D x stages 2..4
 *     (kernel "generic"), and on sm_90 the Hopper kernels at each cluster
 *     size that covers D;
 *   backward: dK/dV kernel {kv64, stream, kv32, small} x dQ kernel {big, small} x
 *     stages {3, 2} (each kernel falls back to its default where its choice
 *     does not fit); on sm_90 instead the Hopper kernel at each width
 *     (boxes x cluster) that covers D and the generic kernels at their
 *     defaults.
 * Candidates that plan like one already tried, or (Hopper and backward
 * kernels, told apart by ffpa_last_kernel) run the same kernels, are not
 * timed again.
 *
 * Per shape: the heuristic plan runs on a context with FFPA_TUNING=0; every
 * candidate is a one-entry table in a temporary file, run on a context
 * created with FFPA_TUNING_FILE naming it, on the same random inputs. A
 * candidate's outputs (O and LSE; dQ, dK and dV) must match the heuristic's
 * elementwise (outputs poisoned with NaN first) or it is rejected. Timing: 2
 * warm-up calls, then the median of `reps` repetitions of `iters` calls
 * (iters reaching ~2 ms). A candidate must beat the heuristic by `margin`,
 * and again in a confirmation run, to be kept, so noise never writes a
 * change; every shape gets an entry (the heuristic's own choice when
 * nothing won), so the nearest-shape lookup never carries a neighbour's
 * choice onto a measured shape. Shapes run in priority order (the benchmark
 * grid's first); the sweep stops starting shapes after --budget-s (with
 * --pass both, the forward after 60% of it).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tune.h"
#include "cli.h"
#include "tuning.h"

typedef struct tune_opts {
    const char *backend, *out;
    double budget_s, margin;
    int reps, quick, fwd, bwd;
    int n_user;
    tune_shape user[64];
} tune_opts;

typedef struct tune_ctx {
    const tune_opts *o;
    const char *device_detail, *backend;
    char device[160];
    ffpa_device_limits lim;
    char tmp_path[64];
} tune_ctx;

typedef enum run_status { RUN_OK, RUN_REJECTED, RUN_SAME_AS_HEURISTIC, RUN_SAME_AS_OTHER } run_status;

/* One candidate run: its configuration as planned, the kernels that ran
 * (ffpa_last_kernel) and the median ms (NAN unless RUN_OK). */
typedef struct tried {
    tune_cfg c;
    run_status status;
    double ms;
    char ran[64];
} tried;

#define MAX_TRIED 64

/* The sweep of one shape and pass. */
typedef struct shape_sweep {
    const tune_ctx *t;
    const tune_shape *s;
    int backward;
    ffpa_plan hp; /* the heuristic plan */
    tune_bufs r;
    tried heur; /* the heuristic's run */
    tried log[MAX_TRIED];
    int n_log;
    ffpa_plan planned[MAX_TRIED]; /* the plans timed or tried (forward) */
    int n_planned;
    tune_cfg best;
    double best_ms;
    int won;
} shape_sweep;

/* The planner's device facts, from "NAME (sm_XY, N SMs)" (another name: a
 * 64 KiB-LDS AMD part); used to predict which candidates the library will
 * apply and to skip those that plan the same as another. The library
 * decides with the real limits. */
static ffpa_device_limits limits_from_name(const char *name)
{
    ffpa_device_limits lim = {0};
    int major = 0, minor = 0, sms = 132;
    const char *p = strstr(name, "(sm_");
    if (p)
        sscanf(p, "(sm_%1d%1d, %d SMs", &major, &minor, &sms);
    int arch = major * 10 + minor;
    lim.is_gpu = 1;
    lim.arch = arch;
    lim.sm_count = sms;
    lim.warp_size = 32;
    lim.smem_per_block = !p                           ? 65536
                         : arch == 80 || arch == 87   ? 166912
                         : arch >= 90 && arch < 120   ? 232448
                                                      : 101376;
    lim.smem_per_sm = lim.smem_per_block + 1024;
    lim.regs_per_sm = 65536;
    lim.max_threads_per_block = 1024;
    return lim;
}

static ffpa_plan_input plan_input_of(const tune_shape *s, int backward)
{
    ffpa_plan_input in;
    memset(&in, 0, sizeof in);
    in.dtype = FFPA_BF16;
    in.batch = s->b, in.hq = s->hq, in.hkv = s->hkv, in.nq = s->nq, in.nkv = s->nkv;
    in.dqk = in.dv = s->d;
    in.causal = s->causal;
    in.backward = backward;
    return in;
}

static void device_key(const char *name, char *buf, size_t len)
{
    const char *paren = strstr(name, " (");
    int n = paren ? (int)(paren - name) : (int)strlen(name);
    snprintf(buf, len, "%.*s", n, name);
}

/* A configuration as one line of JSON, for the log. */
static void cfg_text(const tune_cfg *c, int backward, char *buf, size_t len)
{
    cJSON *obj = cJSON_CreateObject();
    tune_cfg_to_json(obj, c, backward);
    char *text = cJSON_PrintUnformatted(obj);
    snprintf(buf, len, "%s", text ? text : "?");
    free(text);
    cJSON_Delete(obj);
}

/* ------------------------------------------------------------ shapes */

static void add_shape(tune_shape *out, int *n, int max, tune_shape s)
{
    if (*n < max)
        out[(*n)++] = s;
}

/* Forward: heads and batch for ~0.4 TFLOP per call within 16M elements per
 * tensor, except N = 8192, the benchmark grid's own B = 1, Hq = 16. */
static tune_shape sized(int64_t nq, int64_t nkv, int64_t d, int causal, int gqa)
{
    tune_shape s = {1, 32, 32, nq, nkv, d, causal};
    if (nq == 8192) {
        s.hq = 16; /* the benchmark grid's shape (bench/gpu.sh grid): B = 1, Hq = 16 */
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

static int make_fwd_shapes(tune_shape *out, int max, int quick)
{
    static const int64_t dims[] = {64, 128, 256, 320, 512, 768, 1024};
    static const int64_t seqs[] = {512, 2048, 8192, 32768};
    int n = 0, nd = quick ? 2 : 7;
    /* The README grid first (N = 8192), so a cut-short sweep still covers it. */
    for (int i = 0; i < nd; ++i)
        for (int c = 0; c < 2; ++c)
            add_shape(out, &n, max, sized(8192, 8192, dims[i], c, 0));
    for (int i = 0; i < nd; ++i)
        for (int c = 0; c < 2; ++c)
            add_shape(out, &n, max, sized(8192, 8192, dims[i], c, 1));
    for (int i = 0; i < nd; ++i)
        add_shape(out, &n, max, sized(1, 8192, dims[i], 0, 1)); /* the grid's decode row: Hq = 32, Hkv = 8 */
    /* Decode: B = 1, Hq = 32, one or four query rows. */
    static const int64_t kv_lens[] = {4096, 16384};
    for (int i = 0; i < nd; ++i)
        for (int q = 0; q < 2; ++q)
            for (int k = 0; k < 2; ++k)
                add_shape(out, &n, max, sized(q ? 4 : 1, kv_lens[k], dims[i], 0, 0));
    for (int i = 0; i < nd; ++i)
        for (int si = 0; si < 4; ++si)
            if (seqs[si] != 8192 && !(quick && seqs[si] == 32768))
                add_shape(out, &n, max, sized(seqs[si], seqs[si], dims[i], 0, 0));
    for (int i = 0; i < nd; ++i)
        add_shape(out, &n, max, sized(2048, 2048, dims[i], 1, 0));
    return n;
}

/* Backward: ~2 TFLOP of forward work per call (the backward does ~2.5x
 * that), 4 to 16 heads, within 32M elements per tensor. */
static tune_shape sized_bwd(int64_t n, int64_t d, int causal, int gqa)
{
    double per_head = 4.0 * (double)n * (double)n * (double)d * (causal ? 0.5 : 1.0);
    int64_t hq = 16;
    while (hq > 4 && ((double)hq * per_head > 2e12 || hq * n * d > ((int64_t)1 << 25)))
        hq /= 2;
    return (tune_shape){1, hq, gqa ? hq / 4 : hq, n, n, d, causal};
}

static int make_bwd_shapes(tune_shape *out, int max, int quick)
{
    /* 320 and 768: between the Hopper backward's widths (boxes x cluster). */
    static const int64_t dims[] = {128, 256, 512, 1024, 320, 768};
    static const int64_t seqs[] = {8192, 4096};
    int n = 0, nd = quick ? 2 : 6;
    for (int si = quick ? 1 : 0; si < 2; ++si) {
        for (int i = 0; i < nd; ++i)
            for (int c = 0; c < 2; ++c)
                add_shape(out, &n, max, sized_bwd(seqs[si], dims[i], c, 0));
        if (si == 0)
            add_shape(out, &n, max, sized_bwd(8192, 512, 0, 1)); /* GQA: Hkv = Hq / 4 */
    }
    return n;
}

/* ------------------------------------------------------------ candidates */

/* The plan the library makes for the sweep's shape with candidate c (the
 * one-entry table stays in tmp_path for run_candidate); 0 if the table does
 * not load. */
static int plan_with(const shape_sweep *sw, const tune_cfg *c, ffpa_plan *plan)
{
    const tune_ctx *t = sw->t;
    cJSON *root = tune_table_json(t->device, t->device_detail, t->backend);
    cJSON *list = cJSON_AddArrayToObject(root, "entries");
    cJSON_AddItemToArray(list, tune_entry_json(sw->s, sw->backward, sw->hp.path, c));
    int ok = tune_write_json(t->tmp_path, root);
    cJSON_Delete(root);
    char warn[256] = "";
    ffpa_tuning_table *table =
        ok ? ffpa_tuning_load(t->tmp_path, t->device_detail, t->lim.arch, t->backend, warn, sizeof warn) : NULL;
    if (!table) {
        fprintf(stderr, "ffpa-tune: own table rejected: %s\n", ok ? warn : "cannot write");
        return 0;
    }
    ffpa_plan_input in = plan_input_of(sw->s, sw->backward);
    in.tuning = table;
    ok = ffpa_plan_make(&in, &t->lim, plan) == FFPA_OK;
    ffpa_tuning_free(table);
    return ok;
}

/* Whether the planner took every choice of c (else it is illegal here). */
static int plan_takes(const ffpa_plan *p, const tune_cfg *c, int backward)
{
    if (backward)
        return p->bwd_dkdv == c->dkdv && p->bwd_dq == c->dq && p->bwd_stages == c->stages &&
               (!c->family || p->family == c->family) && p->bwd_boxes == c->boxes &&
               (!c->boxes || p->cluster == c->cluster);
    return (!c->stages || p->stages == c->stages) && (!c->family || p->family == c->family) &&
           (!c->cluster || p->cluster == c->cluster) &&
           (!c->br || (p->br == c->br && p->bc == c->bc && p->dqk_chunk == c->chunk && p->warps == c->warps));
}

/* c with the values the planner made of it (kv_splits is clamped). */
static tune_cfg as_planned(const ffpa_plan *p, const tune_cfg *c)
{
    tune_cfg e = *c;
    if (c->kv_splits)
        e.kv_splits = p->kv_splits;
    return e;
}

/* The CUDA launcher runs the Hopper kernels for this forward plan (where
 * they take the call; the tuner's calls they do). */
static int runs_hopper(const ffpa_plan *p, int arch)
{
    return arch == 90 && p->family != FFPA_FAMILY_GENERIC && p->kv_splits == 1 && p->path != FFPA_PATH_DECODE;
}

/* Forward plans that run the same kernel on the same schedule. */
static int same_forward(const ffpa_plan *a, const ffpa_plan *b, int arch)
{
    int hopper = runs_hopper(a, arch);
    if (hopper != runs_hopper(b, arch))
        return 0;
    if (hopper)
        return a->cluster == b->cluster;
    return a->path == b->path && a->br == b->br && a->bc == b->bc && a->dqk_chunk == b->dqk_chunk &&
           a->warps == b->warps && a->stages == b->stages && a->kv_splits == b->kv_splits;
}

/* ffpa_last_kernel names the configuration exactly (Hopper instantiation;
 * cuda backward kernels and depths), so equal names are equal runs. */
static int label_identifies(const char *ran, int backward)
{
    return (backward && !strncmp(ran, "bwd ", 4)) || !strncmp(ran, "sm90", 4);
}

/* Runs the candidate written to tmp_path by plan_with (heuristic != 0: the
 * heuristics) on a fresh context, as a user's process would: the checked
 * run, then, unless `dedupe` finds its kernels already timed, the timing.
 * Fills out (ran, status, ms). */
static void run_candidate(shape_sweep *sw, int heuristic, int dedupe, tried *out, char *why, size_t why_len)
{
    const tune_ctx *t = sw->t;
    if (!heuristic) {
        setenv("FFPA_TUNING_FILE", t->tmp_path, 1);
        unsetenv("FFPA_TUNING");
    }
    out->status = RUN_REJECTED;
    out->ms = NAN;
    out->ran[0] = '\0';
    ffpa_context *ctx = NULL;
    if (ffpa_create(&ctx, t->o->backend) != FFPA_OK) {
        snprintf(why, why_len, "create: %s", ffpa_last_error(NULL));
    } else if (tune_run_once(ctx, &sw->r, why, why_len) &&
               (heuristic || tune_matches_reference(&sw->r, why, why_len))) {
        snprintf(out->ran, sizeof out->ran, "%s", ffpa_last_kernel(ctx));
        int same_heur = 0, same_other = 0;
        if (dedupe && label_identifies(out->ran, sw->backward)) {
            same_heur = !strcmp(out->ran, sw->heur.ran);
            for (int i = 0; i < sw->n_log; ++i)
                same_other |= sw->log[i].status == RUN_OK && !strcmp(out->ran, sw->log[i].ran);
        }
        if (same_heur || same_other) {
            out->status = same_heur ? RUN_SAME_AS_HEURISTIC : RUN_SAME_AS_OTHER;
        } else {
            out->ms = tune_time_calls(ctx, &sw->r, t->o->reps) * 1e3;
            out->status = isnan(out->ms) ? RUN_REJECTED : RUN_OK;
            if (isnan(out->ms))
                snprintf(why, why_len, "timing run failed: %s", ffpa_last_error(ctx));
        }
    }
    ffpa_destroy(ctx);
    unsetenv("FFPA_TUNING_FILE");
    setenv("FFPA_TUNING", "0", 1);
}

/* Plans candidate c and, where the planner takes it and it is new, runs it. */
static void consider(shape_sweep *sw, tune_cfg c)
{
    ffpa_plan cp;
    if (sw->n_log >= MAX_TRIED || !plan_with(sw, &c, &cp) || !plan_takes(&cp, &c, sw->backward))
        return;
    if (!sw->backward) {
        for (int i = 0; i < sw->n_planned; ++i)
            if (same_forward(&cp, &sw->planned[i], sw->t->lim.arch))
                return;
        sw->planned[sw->n_planned++] = cp;
    }
    tried *x = &sw->log[sw->n_log++];
    x->c = as_planned(&cp, &c);
    char why[256] = "";
    run_candidate(sw, 0, 1, x, why, sizeof why);
    if (x->status == RUN_REJECTED) {
        char text[200];
        cfg_text(&x->c, sw->backward, text, sizeof text);
        fprintf(stderr, "ffpa-tune: %s d=%lld nq=%lld nkv=%lld %s rejected: %s\n", sw->backward ? "bwd" : "fwd",
                (long long)sw->s->d, (long long)sw->s->nq, (long long)sw->s->nkv, text, why);
    } else if (x->status == RUN_OK && x->ms < sw->best_ms && x->ms < sw->heur.ms * (1.0 - sw->t->o->margin)) {
        sw->best_ms = x->ms;
        sw->best = x->c;
        sw->won = 1;
    }
}

static void sweep_forward(shape_sweep *sw)
{
    const ffpa_plan *hp = &sw->hp;
    ffpa_fwd_tile tiles[8];
    int n_tiles = ffpa_plan_fwd_tiles(sw->s->d, tiles, 8);
    n_tiles = n_tiles < 8 ? n_tiles : 8;
    int kv_splits = 0;
    if (hp->path == FFPA_PATH_DECODE) {
        /* The split count first (at the heuristic tile), then tiles and depths at the best. */
        static const int splits[] = {4, 8, 16, 24, 48, 64, 96, 128, 192, 264};
        for (size_t i = 0; i < sizeof splits / sizeof splits[0]; ++i)
            consider(sw, (tune_cfg){.stages = hp->stages, .kv_splits = splits[i]});
        kv_splits = sw->best.kv_splits;
    }
    for (int i = 0; i < n_tiles; ++i)
        for (int st = 2; st <= 4; ++st)
            consider(sw, (tune_cfg){.family = FFPA_FAMILY_GENERIC, .br = tiles[i].br, .bc = tiles[i].bc,
                                    .chunk = tiles[i].chunk, .warps = tiles[i].warps, .stages = st,
                                    .kv_splits = kv_splits});
    if (sw->t->lim.arch == 90 && hp->path != FFPA_PATH_DECODE)
        for (int cluster = 1; cluster <= 4; ++cluster)
            consider(sw, (tune_cfg){.family = FFPA_FAMILY_HOPPER, .cluster = cluster});
}

static void sweep_backward(shape_sweep *sw)
{
    static const ffpa_bwd_dkdv_kernel dkdv[] = {FFPA_BWD_DKDV_KV64, FFPA_BWD_DKDV_STREAM, FFPA_BWD_DKDV_KV32,
                                                FFPA_BWD_DKDV_SMALL};
    static const ffpa_bwd_dq_kernel dq[] = {FFPA_BWD_DQ_BIG, FFPA_BWD_DQ_SMALL};
    if (sw->t->lim.arch != 90) {
        for (int i = 0; i < (int)(sizeof dkdv / sizeof dkdv[0]); ++i)
            for (int j = 0; j < 2; ++j)
                for (int st = 3; st >= 2; --st)
                    consider(sw, (tune_cfg){.dkdv = dkdv[i], .dq = dq[j], .stages = st});
        return;
    }
    /* sm_90: the Hopper kernel's widths, and the generic kernels once at
     * their defaults (3-4x slower at every shape measured; their own
     * choices matter only where the Hopper kernel cannot run a call, and
     * sweeping them would take most of the budget). */
    for (int cluster = 1; cluster <= 4; ++cluster) /* 3: the cluster of three 4-box CTAs (D <= 768) */
        for (int boxes = 2; boxes <= 8; boxes += 2)
            if (ffpa_plan_sm90_bwd_covers(sw->s->d, sw->s->d, boxes, cluster))
                consider(sw, (tune_cfg){.family = FFPA_FAMILY_HOPPER, .boxes = boxes, .cluster = cluster});
    consider(sw, (tune_cfg){.family = FFPA_FAMILY_GENERIC});
}

/* ------------------------------------------------------------ one shape */

static const char *status_name(run_status s)
{
    return s == RUN_REJECTED ? "rejected" : s == RUN_SAME_AS_HEURISTIC ? "same kernels as the heuristic"
                                                                      : "same kernels as another candidate";
}

static double round4(double ms)
{
    return round(ms * 1e4) / 1e4;
}

/* The table entry: the winner (or the heuristic's choice) and the record. */
static cJSON *entry_of(const shape_sweep *sw, double confirm_ms, double confirm_heur_ms)
{
    const tune_shape *s = sw->s;
    cJSON *e = tune_entry_json(s, sw->backward, sw->hp.path, &sw->best);
    cJSON_AddNumberToObject(e, "batch", (double)s->b);
    cJSON_AddNumberToObject(e, "hq", (double)s->hq);
    cJSON_AddNumberToObject(e, "hkv", (double)s->hkv);
    cJSON *h = cJSON_AddObjectToObject(e, "heuristic");
    if (!sw->backward) {
        cJSON_AddNumberToObject(h, "stages", sw->hp.stages);
        cJSON_AddNumberToObject(h, "kv_splits", sw->hp.kv_splits);
        cJSON_AddNumberToObject(h, "br", sw->hp.br);
        cJSON_AddNumberToObject(h, "chunk", sw->hp.dqk_chunk);
        cJSON_AddNumberToObject(h, "warps", sw->hp.warps);
    }
    cJSON_AddStringToObject(h, "ran", sw->heur.ran);
    cJSON_AddNumberToObject(e, "heuristic_ms", round4(sw->heur.ms));
    cJSON_AddNumberToObject(e, "best_ms", round4(sw->best_ms));
    cJSON_AddNumberToObject(e, "speedup", round(sw->heur.ms / sw->best_ms * 1e3) / 1e3);
    if (!isnan(confirm_ms)) {
        cJSON_AddNumberToObject(e, "confirm_ms", round4(confirm_ms));
        cJSON_AddNumberToObject(e, "confirm_heuristic_ms", round4(confirm_heur_ms));
    }
    cJSON *tl = cJSON_AddArrayToObject(e, "tried");
    for (int i = 0; i < sw->n_log; ++i) {
        const tried *x = &sw->log[i];
        cJSON *c = cJSON_CreateObject();
        tune_cfg_to_json(c, &x->c, sw->backward);
        if (x->ran[0])
            cJSON_AddStringToObject(c, "ran", x->ran);
        if (x->status == RUN_OK)
            cJSON_AddNumberToObject(c, "ms", round4(x->ms));
        else
            cJSON_AddStringToObject(c, "status", status_name(x->status));
        cJSON_AddItemToArray(tl, c);
    }
    return e;
}

static cJSON *tune_one(const tune_ctx *t, ffpa_context *heur_ctx, const tune_shape *s, int backward)
{
    shape_sweep *sw = calloc(1, sizeof *sw);
    if (!sw)
        return NULL;
    sw->t = t;
    sw->s = s;
    sw->backward = backward;
    ffpa_plan_input in = plan_input_of(s, backward);
    char why[256] = "";
    cJSON *e = NULL;
    if (ffpa_plan_make(&in, &t->lim, &sw->hp) != FFPA_OK) {
        fprintf(stderr, "ffpa-tune: shape skipped: no heuristic plan\n");
        free(sw);
        return NULL;
    }
    if (!tune_setup_bufs(heur_ctx, s, backward, &sw->r)) {
        fprintf(stderr, "ffpa-tune: shape skipped (setup): %s\n", ffpa_last_error(heur_ctx));
        free(sw);
        return NULL;
    }
    if (!tune_run_once(heur_ctx, &sw->r, why, sizeof why) || !tune_keep_reference(&sw->r, why, sizeof why)) {
        fprintf(stderr, "ffpa-tune: shape skipped: %s\n", why);
        goto done;
    }
    run_candidate(sw, 1, 0, &sw->heur, why, sizeof why);
    if (sw->heur.status != RUN_OK) {
        fprintf(stderr, "ffpa-tune: shape skipped (heuristic timing): %s\n", why);
        goto done;
    }
    /* What the heuristics run, as a table entry: a shape nothing beats keeps it. */
    if (!backward) {
        sw->best.stages = sw->hp.stages;
        sw->best.kv_splits = sw->hp.path == FFPA_PATH_DECODE ? sw->hp.kv_splits : 0;
    }
    sw->best_ms = sw->heur.ms;
    sw->planned[sw->n_planned++] = sw->hp;
    tune_cfg heur_cfg = sw->best;
    if (backward)
        sweep_backward(sw);
    else
        sweep_forward(sw);

    /* A winner is timed again beside the heuristics and must win again. */
    double confirm_ms = NAN, confirm_heur_ms = NAN;
    if (sw->won) {
        ffpa_plan cp;
        tried again, heur_again;
        if (plan_with(sw, &sw->best, &cp)) {
            run_candidate(sw, 0, 0, &again, why, sizeof why);
            run_candidate(sw, 1, 0, &heur_again, why, sizeof why);
            confirm_ms = again.ms, confirm_heur_ms = heur_again.ms;
        }
        if (!(confirm_ms < confirm_heur_ms * (1.0 - t->o->margin))) {
            printf("%-30s not confirmed: %.4f ms vs heuristics %.4f ms\n", "", confirm_ms, confirm_heur_ms);
            sw->best = heur_cfg;
            sw->best_ms = sw->heur.ms;
        }
    }
    e = entry_of(sw, confirm_ms, confirm_heur_ms);
    char best_text[200];
    cfg_text(&sw->best, backward, best_text, sizeof best_text);
    printf("%-30s %s %-8s heur %9.4f ms (%s)  best %9.4f ms %s  x%.3f  (%d tried)\n", "", backward ? "bwd" : "fwd",
           tune_path_name(sw->hp.path), sw->heur.ms, sw->heur.ran, sw->best_ms, best_text, sw->heur.ms / sw->best_ms,
           sw->n_log);
    fflush(stdout);
done:
    tune_free_bufs(heur_ctx, &sw->r);
    free(sw);
    return e;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
    fprintf(f, "usage: ffpa-tune [--backend NAME] [--out FILE] [--pass fwd|bwd|both] [--budget-s S] "
               "[--reps N] [--margin F] [--quick] [--shape B,Hq,Hkv,Nq,Nkv,D[,c]]...\n"
               "Tunes the GPU kernels' plans of one device (cuda or hip; the cpu backend has nothing to tune).\n"
               "Under FFPA_CUDA_AS_ARCH=80|86|89 it tunes as that part and writes its table, cuda-sm_<arch>.json.\n"
               "exit status: 0 success, 1 a run failed or the table could not be written, 2 bad usage\n");
}

/* Options into *o (a usage error exits with status 2). */
static void parse_args(int argc, char **argv, tune_opts *o)
{
    enum { O_BACKEND = 256, O_OUT, O_PASS, O_BUDGET, O_REPS, O_MARGIN, O_QUICK, O_SHAPE };
    static const struct option opts[] = {
        {"backend", required_argument, 0, O_BACKEND}, {"out", required_argument, 0, O_OUT},
        {"pass", required_argument, 0, O_PASS},       {"budget-s", required_argument, 0, O_BUDGET},
        {"reps", required_argument, 0, O_REPS},       {"margin", required_argument, 0, O_MARGIN},
        {"quick", no_argument, 0, O_QUICK},           {"shape", required_argument, 0, O_SHAPE},
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
    static const char *const passes[] = {"fwd", "bwd", "both"};
    cli_tool("ffpa-tune");
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case O_BACKEND: o->backend = optarg; break;
        case O_OUT: o->out = optarg; break;
        case O_PASS: {
            const int p = cli_choice("--pass", optarg, passes, 3);
            o->fwd = p != 1;
            o->bwd = p != 0;
            break;
        }
        case O_BUDGET: o->budget_s = cli_real("--budget-s", optarg, 1.0, 1e7); break;
        case O_REPS: o->reps = (int)cli_int("--reps", optarg, 1, 100000); break;
        case O_MARGIN: o->margin = cli_real("--margin", optarg, 0.0, 1.0); break;
        case O_QUICK: o->quick = 1; break;
        case O_SHAPE: {
            long long v[6];
            char flag = 0, rest = 0;
            const int got = sscanf(optarg, "%lld,%lld,%lld,%lld,%lld,%lld,%c%c", &v[0], &v[1], &v[2], &v[3], &v[4],
                                   &v[5], &flag, &rest);
            if (o->n_user >= 64)
                cli_usage_error("--shape: at most 64 shapes");
            if (got < 6 || got > 7 || (got == 7 && flag != 'c') || v[0] < 1 || v[1] < 1 || v[2] < 1 || v[1] % v[2] ||
                v[3] < 1 || v[4] < 1 || v[5] < 1 || v[5] > FFPA_MAX_HEAD_DIM)
                cli_usage_error("--shape '%s': expected B,Hq,Hkv,Nq,Nkv,D[,c] (sizes >= 1, Hq a multiple of Hkv, "
                                "D <= %d)",
                                optarg, FFPA_MAX_HEAD_DIM);
            o->user[o->n_user++] = (tune_shape){v[0], v[1], v[2], v[3], v[4], v[5], got == 7};
            break;
        }
        case 'h': usage(stdout); exit(CLI_EXIT_OK);
        default: cli_bad_option(argv, usage);
        }
    }
    if (optind < argc)
        cli_usage_error("unexpected argument '%s' (see --help)", argv[optind]);
    if (o->reps < 10)
        o->reps = 10;
}

/* Tunes shapes[0..n) of one pass into entries until `until` seconds after t0. */
static void tune_pass(const tune_ctx *t, ffpa_context *heur, const tune_shape *shapes, int n, int backward,
                      double t0, double until, cJSON *entries, int *done, int *faster)
{
    int mine = 0;
    for (int i = 0; i < n; ++i) {
        if (tune_now_s() - t0 > until) {
            printf("# %s budget reached: %d of %d shapes tuned\n", backward ? "bwd" : "fwd", mine, n);
            break;
        }
        const tune_shape *s = &shapes[i];
        printf("%s %lld,%lld,%lld,%lld,%lld,%lld,%lld%s\n", backward ? "bwd" : "fwd", (long long)s->b,
               (long long)s->hq, (long long)s->hkv, (long long)s->nq, (long long)s->nkv, (long long)s->d,
               (long long)s->d, s->causal ? ",c" : "");
        cJSON *e = tune_one(t, heur, s, backward);
        if (e) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "speedup");
            *faster += cJSON_IsNumber(sp) && sp->valuedouble > 1.0;
            cJSON_AddItemToArray(entries, e);
            ++*done;
            ++mine;
        }
    }
}

int main(int argc, char **argv)
{
    static tune_opts o = {"cuda", NULL, 240.0, 0.03, 10, 0, 1, 1, 0, {{0}}};
    parse_args(argc, argv, &o);
    /* The heuristics alone, and no stray A/B knobs (FFPA_CUDA_KERNEL would
     * override every candidate's kernel family). */
    setenv("FFPA_TUNING", "0", 1);
    unsetenv("FFPA_TUNING_FILE");
    unsetenv("FFPA_CUDA_FWD_STAGES");
    unsetenv("FFPA_CUDA_KERNEL");
    unsetenv("FFPA_BWD_SMEM_LIMIT");
    ffpa_context *heur = NULL;
    if (ffpa_create(&heur, o.backend) != FFPA_OK) {
        fprintf(stderr, "ffpa-tune: %s\n", ffpa_last_error(NULL));
        return 1;
    }
    if (!strcmp(ffpa_backend_name(heur), "cpu")) {
        ffpa_destroy(heur);
        cli_usage_error("--backend '%s' runs on the cpu backend, which has no tunable kernels; expected cuda "
                        "or hip on a GPU",
                        o.backend);
    }
    tune_ctx t;
    memset(&t, 0, sizeof t);
    t.o = &o;
    t.device_detail = ffpa_device_name(heur);
    t.backend = ffpa_backend_name(heur);
    device_key(t.device_detail, t.device, sizeof t.device);
    t.lim = limits_from_name(t.device_detail);
    snprintf(t.tmp_path, sizeof t.tmp_path, "/tmp/ffpa-tune-%ld.json", (long)getpid());
    /* Under FFPA_CUDA_AS_ARCH the table is the emulated part's (its arch),
     * not this device's. */
    const char *as_arch = strstr(t.device_detail, " as sm_");
    char default_out[200];
    if (!o.out) {
        if (!as_arch || !ffpa_tuning_arch_file_name(t.backend, t.lim.arch, default_out, sizeof default_out))
            ffpa_tuning_file_name(t.device_detail, default_out, sizeof default_out);
        o.out = default_out;
    }
    { /* the table must be writable before hours of tuning, not after */
        const int existed = access(o.out, F_OK) == 0;
        FILE *f = fopen(o.out, "a");
        if (!f) {
            ffpa_destroy(heur);
            cli_usage_error("--out '%s': cannot write the table there: %s", o.out, strerror(errno));
        }
        fclose(f);
        if (!existed)
            unlink(o.out);
    }
    const char *passes = o.fwd && o.bwd ? "forward and backward" : o.fwd ? "forward" : "backward";
    printf("# ffpa-tune on %s (backend %s), bf16 %s, budget %.0f s, margin %.0f%%\n", t.device_detail, t.backend,
           passes, o.budget_s, o.margin * 100);

    static tune_shape fwd_shapes[200], bwd_shapes[64];
    int n_fwd = 0, n_bwd = 0;
    if (o.n_user) {
        memcpy(fwd_shapes, o.user, (size_t)o.n_user * sizeof o.user[0]);
        memcpy(bwd_shapes, o.user, (size_t)o.n_user * sizeof o.user[0]);
        n_fwd = n_bwd = o.n_user;
    } else {
        n_fwd = make_fwd_shapes(fwd_shapes, 200, o.quick);
        n_bwd = make_bwd_shapes(bwd_shapes, 64, o.quick);
    }
    cJSON *root = tune_table_json(t.device, t.device_detail, t.backend);
    if (as_arch) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "device");
        cJSON_AddNumberToObject(root, "arch", t.lim.arch);
        char measured[400];
        snprintf(measured, sizeof measured,
                 "%.*s with FFPA_CUDA_AS_ARCH=%d: the generic (mma.sync) kernels planned within sm_%d's shared "
                 "memory per block, each SM held to its shared memory per SM by the kernels' carveout; timed on "
                 "this device's SMs, registers, clocks and memory; not measured on an sm_%d part",
                 (int)(as_arch - t.device_detail), t.device_detail, t.lim.arch, t.lim.arch, t.lim.arch);
        cJSON_AddStringToObject(root, "measured_on", measured);
    }
    char generated[96];
    snprintf(generated, sizeof generated, "ffpa-tune (tuning/ffpa-tune.c), bf16 %s", passes);
    cJSON_AddStringToObject(root, "generated_by", generated);
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", FFPA_VERSION_MAJOR, FFPA_VERSION_MINOR, FFPA_VERSION_PATCH);
    cJSON_AddStringToObject(root, "library_version", version);
    cJSON *entries = cJSON_AddArrayToObject(root, "entries");
    double t0 = tune_now_s();
    int done = 0, faster = 0;
    if (o.fwd)
        tune_pass(&t, heur, fwd_shapes, n_fwd, 0, t0, o.bwd ? 0.6 * o.budget_s : o.budget_s, entries, &done,
                  &faster);
    if (o.bwd)
        tune_pass(&t, heur, bwd_shapes, n_bwd, 1, t0, o.budget_s, entries, &done, &faster);
    unlink(t.tmp_path);
    int ok = done > 0 && tune_write_json(o.out, root);
    printf("# %d entries (%d faster than the heuristics) in %.1f s -> %s%s\n", done, faster, tune_now_s() - t0,
           o.out, ok ? "" : " (NOT WRITTEN)");
    cJSON_Delete(root);
    ffpa_destroy(heur);
    return ok ? 0 : 1;
}
