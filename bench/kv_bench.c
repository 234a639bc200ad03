/*
 * ffpa-bench --decode: attention over a paged KV cache (ffpa_forward_kvcache),
 * timed beside the copy ceiling measured in the same run.
 *
 *   SHAPE: B,Hq,Hkv,Nq,Nkv,Dqk,Dv,page[,flags]   flags: c causal, a append
 *   k_new/v_new, m MLA (V = the first Dv columns of K's pages), x mixed
 *   lengths (uniform in 1..Nkv, fixed seed), d dense cache (no block table).
 *
 * Bytes: K (and V unless MLA) of every cached key read once, Q read, O
 * written; GB/s = bytes / time. FLOPs: 2 x Hq x (Dqk + Dv) per visible
 * (query, key) pair. The copy ceiling: a 1 GiB device-to-device copy
 * (read + write bytes / time). Timed calls vouch for their tables
 * (trusted_tables = 1: no host synchronisation); the first call checks them.
 * The plan (kernel, tile rows, tiles per split, blocks, grid) is printed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "ffpa.h"
#include "bench.h"
#include "cli.h"

typedef struct kv_shape {
    int64_t b, hq, hkv, nq, nkv, dqk, dv, page;
    int causal, append, mla, mixed, dense;
    char text[128];
} kv_shape;

static int parse(const char *s, kv_shape *out)
{
    memset(out, 0, sizeof *out);
    char flags[32] = "";
    long long v[8];
    int n = sscanf(s, "%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%31s", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7], flags);
    if (n < 8)
        return -1;
    out->b = v[0], out->hq = v[1], out->hkv = v[2], out->nq = v[3], out->nkv = v[4], out->dqk = v[5];
    out->dv = v[6], out->page = v[7];
    out->causal = strchr(flags, 'c') != NULL;
    out->append = strchr(flags, 'a') != NULL;
    out->mla = strchr(flags, 'm') != NULL;
    out->mixed = strchr(flags, 'x') != NULL;
    out->dense = strchr(flags, 'd') != NULL;
    snprintf(out->text, sizeof out->text, "%s", s);
    return 0;
}

/* Random 16-bit values of the dtype in [-1, 1). */
static uint16_t *random_halves(size_t n, ffpa_dtype dt)
{
    uint16_t *h = malloc(n * sizeof *h);
    if (h)
        bench_fill_random(h, n, dt);
    return h;
}

/* Fixed-seed integers for page tables and lengths. */
static uint64_t next_u64(void)
{
    static uint64_t state = 0x243F6A8885A308D3ull;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

typedef struct kv_bufs {
    void *q, *k, *v, *kn, *vn, *o, *lse, *table, *lens;
    size_t q_bytes, k_bytes, v_bytes, kn_bytes, vn_bytes, o_bytes;
    int64_t pages, max_pages;
    int32_t *host_lens, *host_table;
    uint16_t *hq, *hk, *hv, *hkn, *hvn;
    ffpa_tensor tq, tkn, tvn, to, tlse;
    ffpa_kv_cache cache;
} kv_bufs;

static void *upload(ffpa_context *ctx, const void *h, size_t bytes)
{
    void *d = NULL;
    if (ffpa_malloc(ctx, &d, bytes ? bytes : 16) != FFPA_OK)
        return NULL;
    if (h && bytes && ffpa_memcpy(ctx, d, h, bytes, FFPA_COPY_HOST_TO_DEVICE) != FFPA_OK)
        return NULL;
    return d;
}

static void free_bufs(ffpa_context *ctx, kv_bufs *r, int device)
{
    void *d[] = {r->q, r->k, r->v == r->k ? NULL : r->v, r->kn, r->vn, r->o, r->lse, r->table, r->lens};
    if (device)
        for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i)
            ffpa_free(ctx, d[i]);
}

/* Host data of a shape (shared by the timed backend and the cpu check). */
typedef struct kv_host {
    int32_t *lens, *table;
    int64_t pages, max_pages;
    uint16_t *q, *k, *v, *kn, *vn;
} kv_host;

static int make_host(const kv_shape *s, ffpa_dtype dt, kv_host *h)
{
    memset(h, 0, sizeof *h);
    const int64_t added = s->append ? s->nq : 0;
    const int64_t ps = s->dense ? s->nkv + added : s->page;
    h->max_pages = (s->nkv + added + ps - 1) / ps;
    h->pages = s->b * h->max_pages;
    h->lens = malloc(sizeof(int32_t) * (size_t)s->b);
    h->table = malloc(sizeof(int32_t) * (size_t)(s->b * h->max_pages));
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)h->pages);
    if (!h->lens || !h->table || !perm)
        return -1;
    for (int64_t i = 0; i < h->pages; ++i)
        perm[i] = i;
    for (int64_t i = h->pages - 1; i > 0; --i) {
        int64_t j = (int64_t)(next_u64() % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0; i < s->b * h->max_pages; ++i)
        h->table[i] = (int32_t)perm[i];
    free(perm);
    for (int64_t b = 0; b < s->b; ++b)
        h->lens[b] = (int32_t)(s->mixed ? 1 + (int64_t)(next_u64() % (uint64_t)s->nkv) : s->nkv);
    const size_t kelems = (size_t)(h->pages * s->hkv * ps * s->dqk);
    h->q = random_halves((size_t)(s->b * s->hq * s->nq * s->dqk), dt);
    h->k = random_halves(kelems, dt);
    h->v = s->mla ? NULL : random_halves((size_t)(h->pages * s->hkv * ps * s->dv), dt);
    if (s->append) {
        h->kn = random_halves((size_t)(s->b * s->hkv * s->nq * s->dqk), dt);
        h->vn = s->mla ? NULL : random_halves((size_t)(s->b * s->hkv * s->nq * s->dv), dt);
    }
    return h->q && h->k ? 0 : -1;
}

static void free_host(kv_host *h)
{
    free(h->lens);
    free(h->table);
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->kn);
    free(h->vn);
}

/* Device (or cpu) buffers and descriptors; pools in FlashAttention's
 * [pages, page_size, Hkv, D] layout. */
static int setup(ffpa_context *ctx, const kv_shape *s, ffpa_dtype dt, const kv_host *h, kv_bufs *r)
{
    memset(r, 0, sizeof *r);
    const int64_t added = s->append ? s->nq : 0;
    const int64_t ps = s->dense ? s->nkv + added : s->page;
    const size_t e = 2;
    r->q_bytes = (size_t)(s->b * s->hq * s->nq * s->dqk) * e;
    r->k_bytes = (size_t)(h->pages * s->hkv * ps * s->dqk) * e;
    r->v_bytes = s->mla ? 0 : (size_t)(h->pages * s->hkv * ps * s->dv) * e;
    r->o_bytes = (size_t)(s->b * s->hq * s->nq * s->dv) * e;
    r->q = upload(ctx, h->q, r->q_bytes);
    r->k = upload(ctx, h->k, r->k_bytes);
    r->v = s->mla ? r->k : upload(ctx, h->v, r->v_bytes);
    r->o = upload(ctx, NULL, r->o_bytes);
    r->lse = upload(ctx, NULL, (size_t)(s->b * s->hq * s->nq) * 4);
    r->table = upload(ctx, h->table, sizeof(int32_t) * (size_t)(s->b * h->max_pages));
    r->lens = upload(ctx, h->lens, sizeof(int32_t) * (size_t)s->b);
    if (s->append) {
        r->kn = upload(ctx, h->kn, (size_t)(s->b * s->hkv * s->nq * s->dqk) * e);
        r->vn = s->mla ? NULL : upload(ctx, h->vn, (size_t)(s->b * s->hkv * s->nq * s->dv) * e);
    }
    if (!r->q || !r->k || !r->v || !r->o || !r->lse || !r->table || !r->lens || (s->append && !r->kn))
        return -1;
    r->tq = ffpa_tensor_bnhd(r->q, dt, s->b, s->hq, s->nq, s->dqk);
    r->to = ffpa_tensor_bnhd(r->o, dt, s->b, s->hq, s->nq, s->dv);
    r->tlse = ffpa_tensor_bhnd(r->lse, FFPA_F32, s->b, s->hq, s->nq, 1);
    r->cache.k = ffpa_tensor_bnhd(r->k, dt, s->dense ? s->b : h->pages, s->hkv, ps, s->dqk);
    r->cache.v = ffpa_tensor_bnhd(r->v, dt, s->dense ? s->b : h->pages, s->hkv, ps, s->dv);
    if (s->mla)
        for (int i = 0; i < 4; ++i)
            r->cache.v.stride[i] = r->cache.k.stride[i];
    r->cache.block_table = s->dense ? NULL : r->table;
    r->cache.max_pages_per_seq = h->max_pages;
    r->cache.cache_seqlens = r->lens;
    if (s->append) {
        r->tkn = ffpa_tensor_bnhd(r->kn, dt, s->b, s->hkv, s->nq, s->dqk);
        r->tvn = ffpa_tensor_bnhd(r->vn, dt, s->b, s->hkv, s->nq, s->dv);
    }
    return 0;
}

static ffpa_status call(ffpa_context *ctx, const kv_shape *s, kv_bufs *r)
{
    ffpa_options opt = ffpa_options_default();
    opt.causal = s->causal;
    return ffpa_forward_kvcache(ctx, &r->tq, &r->cache, s->append ? &r->tkn : NULL,
                                s->append && !s->mla ? &r->tvn : NULL, &r->to, &r->tlse, &opt);
}

/* O of the backend against the cpu backend on the same inputs (appends on
 * both start from the same cache), every element. */
static int check(ffpa_context *ctx, const kv_shape *s, ffpa_dtype dt, const kv_host *h, kv_bufs *r)
{
    ffpa_context *cpu;
    if (ffpa_create(&cpu, "cpu") != FFPA_OK)
        return -1;
    kv_bufs c;
    int rc = setup(cpu, s, dt, h, &c);
    const size_t n = r->o_bytes / 2;
    uint16_t *o_dev = malloc(r->o_bytes);
    memset(o_dev, 0xFF, r->o_bytes); /* poison O (NaN) before the run */
    ffpa_memcpy(ctx, r->o, o_dev, r->o_bytes, FFPA_COPY_HOST_TO_DEVICE);
    if (rc == 0 && (call(ctx, s, r) != FFPA_OK || call(cpu, s, &c) != FFPA_OK)) {
        fprintf(stderr, "check %s: %s | %s\n", s->text, ffpa_last_error(ctx), ffpa_last_error(cpu));
        rc = -1;
    }
    if (rc == 0) {
        ffpa_synchronize(ctx);
        ffpa_memcpy(ctx, o_dev, r->o, r->o_bytes, FFPA_COPY_DEVICE_TO_HOST);
        const uint16_t *o_cpu = c.o;
        double worst = 0.0, scale = 0.0;
        for (size_t i = 0; i < n; ++i)
            scale = fmax(scale, fabs((double)ffpa_load_f32(o_cpu, dt, (int64_t)i)));
        for (size_t i = 0; i < n; ++i) {
            double a = ffpa_load_f32(o_dev, dt, (int64_t)i), b = ffpa_load_f32(o_cpu, dt, (int64_t)i);
            double d = isnan(a) ? INFINITY : fabs(a - b);
            worst = fmax(worst, d);
        }
        rc = worst <= 2e-2 * fmax(scale, 1e-6) ? 0 : -1;
        printf("  check %-34s max|O - O_cpu| = %.3g (scale %.3g): %s\n", s->text, worst, scale, rc ? "FAIL" : "pass");
    }
    free(o_dev);
    free_bufs(cpu, &c, 1);
    ffpa_destroy(cpu);
    return rc;
}

/* Copy ceiling: GB/s of a 1 GiB device-to-device copy (bytes read + written). */
static double copy_ceiling(ffpa_context *ctx)
{
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    if (ffpa_malloc(ctx, &a, bytes) != FFPA_OK || ffpa_malloc(ctx, &b, bytes) != FFPA_OK)
        return 0.0;
    double t[10];
    for (int rep = -2; rep < 10; ++rep) {
        ffpa_synchronize(ctx);
        double t0 = bench_now_s();
        ffpa_memcpy(ctx, b, a, bytes, FFPA_COPY_DEVICE_TO_DEVICE);
        ffpa_synchronize(ctx);
        if (rep >= 0)
            t[rep] = bench_now_s() - t0;
    }
    ffpa_free(ctx, a);
    ffpa_free(ctx, b);
    qsort(t, 10, sizeof t[0], bench_cmp_double);
    return 2.0 * (double)bytes / t[5] * 1e-9;
}

int kv_bench_run(ffpa_context *ctx, ffpa_dtype dt, int reps, int do_check, const char *csv_path, char **shapes,
                 int n_shapes)
{
    const double ceiling = copy_ceiling(ctx);
    FILE *csv = csv_path ? cli_open_out("--csv", csv_path) : NULL;
    if (csv)
        fprintf(csv, "shape,backend,device,dtype,kernel,rows_per_tile,tiles_per_split,blocks,grid,ms,gbps,tflops,"
                     "copy_gbps,frac_copy,check\n");
    printf("device: %s (%s), copy ceiling %.0f GB/s\n", ffpa_device_name(ctx), ffpa_backend_name(ctx), ceiling);
    printf("%-34s %-24s %5s %6s %6s %6s %9s %8s %8s %6s\n", "shape (B,Hq,Hkv,Nq,Nkv,Dqk,Dv,page)", "kernel", "rows",
           "tps", "blocks", "grid", "ms", "GB/s", "TFLOP/s", "%copy");
    int failures = 0;
    for (int i = 0; i < n_shapes; ++i) {
        kv_shape s;
        if (parse(shapes[i], &s) != 0) {
            fprintf(stderr, "bad decode shape '%s'\n", shapes[i]);
            return 2;
        }
        kv_host h;
        kv_bufs r;
        if (make_host(&s, dt, &h) != 0 || setup(ctx, &s, dt, &h, &r) != 0) {
            fprintf(stderr, "%s: out of memory\n", s.text);
            failures++;
            continue;
        }
        int checked = 0;
        if (do_check) {
            checked = check(ctx, &s, dt, &h, &r) == 0 ? 1 : -1;
            failures += checked < 0;
        }
        ffpa_kv_schedule_info info;
        memset(&info, 0, sizeof info);
        if (ffpa_kvcache_schedule(ctx, &r.tq, &r.cache, h.lens, s.append, NULL, &info) != FFPA_OK)
            info.kernel = ffpa_backend_name(ctx);
        ffpa_status st = call(ctx, &s, &r); /* checks the tables once */
        r.cache.trusted_tables = 1;
        double t[64];
        int iters = 1;
        for (int w = 0; st == FFPA_OK && w < 3; ++w)
            st = call(ctx, &s, &r);
        ffpa_synchronize(ctx);
        {
            double t0 = bench_now_s();
            for (int w = 0; st == FFPA_OK && w < 5; ++w)
                st = call(ctx, &s, &r);
            ffpa_synchronize(ctx);
            double one = (bench_now_s() - t0) / 5;
            iters = one > 0 ? (int)(2e-3 / one) + 1 : 1;
        }
        if (reps > 64)
            reps = 64;
        for (int rep = 0; st == FFPA_OK && rep < reps; ++rep) {
            ffpa_synchronize(ctx);
            double t0 = bench_now_s();
            for (int it = 0; it < iters && st == FFPA_OK; ++it)
                st = call(ctx, &s, &r);
            ffpa_synchronize(ctx);
            t[rep] = (bench_now_s() - t0) / iters;
        }
        if (st != FFPA_OK) {
            fprintf(stderr, "%s: %s: %s\n", s.text, ffpa_status_string(st), ffpa_last_error(ctx));
            failures++;
            free_bufs(ctx, &r, 1);
            free_host(&h);
            continue;
        }
        qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
        const double sec = t[reps / 2];
        double keys = 0.0, pairs = 0.0;
        for (int64_t b = 0; b < s.b; ++b) {
            const double L = (double)h.lens[b] + (s.append ? (double)s.nq : 0.0);
            keys += L;
            for (int64_t qi = 0; qi < s.nq; ++qi)
                pairs += s.causal ? fmin(L, fmax(0.0, L - (double)s.nq + (double)qi + 1.0)) : L;
        }
        const double bytes = keys * (double)s.hkv * (double)(s.dqk + (s.mla ? 0 : s.dv)) * 2.0 +
                             (double)(r.q_bytes + r.o_bytes);
        const double flops = 2.0 * pairs * (double)s.hq * (double)(s.dqk + s.dv);
        const double gbps = bytes / sec * 1e-9, tflops = flops / sec * 1e-12;
        printf("%-34s %-24s %5d %6lld %6lld %6lld %9.4f %8.0f %8.1f %5.0f%%\n", s.text, info.kernel ? info.kernel : "",
               info.rows_per_tile, (long long)info.tiles_per_split, (long long)info.blocks, (long long)info.grid,
               sec * 1e3, gbps, tflops, ceiling > 0 ? 100.0 * gbps / ceiling : 0.0);
        if (csv)
            fprintf(csv, "\"%s\",%s,\"%s\",%s,\"%s\",%d,%lld,%lld,%lld,%.5f,%.1f,%.2f,%.1f,%.3f,%s\n", s.text,
                    ffpa_backend_name(ctx), ffpa_device_name(ctx), dt == FFPA_F16 ? "f16" : "bf16",
                    info.kernel ? info.kernel : "", info.rows_per_tile, (long long)info.tiles_per_split,
                    (long long)info.blocks, (long long)info.grid, sec * 1e3, gbps, tflops, ceiling,
                    ceiling > 0 ? gbps / ceiling : 0.0, checked > 0 ? "pass" : checked < 0 ? "FAIL" : "");
        free_bufs(ctx, &r, 1);
        free_host(&h);
    }
    if (csv && cli_close_out(csv, csv_path))
        ++failures;
    return failures ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}
