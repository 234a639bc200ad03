/*
 * ffpa_forward_kvcache against the float64 oracle on the backend named by
 * FFPA_TEST_BACKEND (default cpu): decode, speculative decode and chunked
 * prefill over a paged cache (page sizes 16, 64, 256; shuffled tables;
 * pages shared between sequences), the dense cache, the append of new
 * tokens, absorbed MLA (V a view of K's pages), awkward lengths (0, 1,
 * page - 1, page + 1, 100k) and every bad table a caller can pass.
 *
 * The reference gathers each sequence's keys out of the pages (after
 * applying the append to a host copy) into a packed varlen problem and
 * runs the oracle's textbook forward on it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "oracle.h"

typedef struct kv_case {
    ffpa_dtype dtype;
    int64_t batch, hq, hkv, nq, dqk, dv, page_size;
    const int64_t *lens; /* cached tokens per sequence (before the append) */
    int paged;           /* 0: dense cache [B, Hkv, capacity, D] */
    int append;          /* pass k_new / v_new */
    int causal;
    int mla;             /* v is a view of k's first dv columns */
    int share_prefix;    /* sequence 1 reuses sequence 0's first full pages */
    int spare_pages;     /* extra capacity per sequence beyond what is used */
    th_layout layout;    /* of the pools (BNHD is FlashAttention's) */
    int trusted;
    int table_pad;       /* block_table rows longer than max_pages by this much */
    /* Variants (bottom-right aligned on each sequence's keys): window
     * (bounds -1 = unbounded), logit softcap, ALiBi slopes [B, Hq]. */
    int window;
    int64_t window_left, window_right;
    float softcap;
    int alibi;
    uint64_t seed;
} kv_case;

static kv_case kv_default(int64_t batch, int64_t hq, int64_t hkv, int64_t nq, int64_t d, int64_t page,
                          const int64_t *lens)
{
    kv_case c;
    memset(&c, 0, sizeof c);
    c.dtype = th_fixture_dtype();
    c.batch = batch;
    c.hq = hq;
    c.hkv = hkv;
    c.nq = nq;
    c.dqk = c.dv = d;
    c.page_size = page;
    c.lens = lens;
    c.paged = 1;
    c.layout = TH_BNHD;
    c.seed = 1234 + (uint64_t)(batch * 7 + hq * 13 + nq * 17 + d + page);
    return c;
}

/* Everything one call needs, host and backend copies. */
typedef struct kv_run {
    th_tensor q, kpool, vpool, knew, vnew, o, lse, alibi;
    int32_t *table, *seqlens; /* host */
    void *dev_table, *dev_seqlens;
    int64_t max_pages, num_pages, bt_stride;
    ffpa_kv_cache cache;
} kv_run;

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static void kv_setup(const kv_case *c, kv_run *r)
{
    ffpa_context *ctx = th_ctx();
    th_rng rng = th_rng_seeded(c->seed);
    memset(r, 0, sizeof *r);
    const int64_t added = c->append ? c->nq : 0, ps = c->page_size;
    int64_t most = 1;
    for (int64_t b = 0; b < c->batch; ++b)
        most = ceil_div(c->lens[b] + added, ps) > most ? ceil_div(c->lens[b] + added, ps) : most;
    r->max_pages = most + c->spare_pages;
    r->bt_stride = r->max_pages + c->table_pad;
    r->num_pages = c->paged ? c->batch * r->max_pages + 3 : c->batch;
    const int64_t rows = c->paged ? ps : r->max_pages * ps;

    /* Tables: the pool's pages in a shuffled order; spare entries -1. */
    r->table = malloc(sizeof(int32_t) * (size_t)(c->batch * r->bt_stride));
    r->seqlens = malloc(sizeof(int32_t) * (size_t)c->batch);
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)r->num_pages);
    for (int64_t i = 0; i < r->num_pages; ++i)
        perm[i] = i;
    for (int64_t i = r->num_pages - 1; i > 0; --i) {
        int64_t j = (int64_t)(th_rng_next(&rng) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t next = 0;
    for (int64_t b = 0; b < c->batch; ++b) {
        r->seqlens[b] = (int32_t)c->lens[b];
        const int64_t used = ceil_div(c->lens[b] + added, ps);
        for (int64_t j = 0; j < r->bt_stride; ++j)
            r->table[b * r->bt_stride + j] = c->paged && j < used ? (int32_t)perm[next++] : -1;
    }
    if (c->share_prefix && c->batch >= 2) {
        const int64_t full = (c->lens[0] < c->lens[1] ? c->lens[0] : c->lens[1]) / ps;
        for (int64_t j = 0; j < full; ++j)
            r->table[r->bt_stride + j] = r->table[j];
    }
    free(perm);

    th_tensor_make(&r->q, c->dtype, TH_BHND, c->batch, c->hq, c->nq, c->dqk);
    th_tensor_make(&r->kpool, c->dtype, c->layout, r->num_pages, c->hkv, rows, c->dqk);
    th_tensor_random(&r->q, &rng, -1.0, 1.0, 0);
    th_tensor_random(&r->kpool, &rng, -1.0, 1.0, 0);
    if (!c->mla) {
        th_tensor_make(&r->vpool, c->dtype, c->layout, r->num_pages, c->hkv, rows, c->dv);
        th_tensor_random(&r->vpool, &rng, -1.0, 1.0, 0);
    }
    if (c->append) {
        th_tensor_make(&r->knew, c->dtype, TH_BNHD, c->batch, c->hkv, c->nq, c->dqk);
        th_tensor_random(&r->knew, &rng, -1.0, 1.0, 0);
        if (!c->mla) {
            th_tensor_make(&r->vnew, c->dtype, TH_BNHD, c->batch, c->hkv, c->nq, c->dv);
            th_tensor_random(&r->vnew, &rng, -1.0, 1.0, 0);
        }
    }
    if (c->alibi) {
        th_tensor_make(&r->alibi, FFPA_F32, TH_BHND, c->batch, c->hq, 1, 1);
        th_tensor_random(&r->alibi, &rng, 0.0, 0.5, 0);
    }
    th_tensor_make(&r->o, c->dtype, TH_BHND, c->batch, c->hq, c->nq, c->dv);
    th_tensor_lse(&r->lse, TH_BHND, c->batch, c->hq, c->nq);
    th_tensor_poison(&r->o);
    th_tensor_poison(&r->lse);

    size_t tb = sizeof(int32_t) * (size_t)(c->batch * r->bt_stride), lb = sizeof(int32_t) * (size_t)c->batch;
    th_expect_ok(ctx, ffpa_malloc(ctx, &r->dev_table, tb), "ffpa_malloc");
    th_expect_ok(ctx, ffpa_malloc(ctx, &r->dev_seqlens, lb), "ffpa_malloc");
    th_expect_ok(ctx, ffpa_memcpy(ctx, r->dev_table, r->table, tb, FFPA_COPY_HOST_TO_DEVICE), "ffpa_memcpy");
    th_expect_ok(ctx, ffpa_memcpy(ctx, r->dev_seqlens, r->seqlens, lb, FFPA_COPY_HOST_TO_DEVICE), "ffpa_memcpy");

    r->cache.k = r->kpool.dev;
    if (c->mla) {
        r->cache.v = r->kpool.dev;
        r->cache.v.shape[3] = c->dv;
    } else {
        r->cache.v = r->vpool.dev;
    }
    r->cache.block_table = c->paged ? r->dev_table : NULL;
    r->cache.max_pages_per_seq = c->paged ? r->max_pages : 0;
    r->cache.block_table_stride = c->table_pad ? r->bt_stride : 0;
    r->cache.cache_seqlens = r->dev_seqlens;
    r->cache.trusted_tables = c->trusted;
}

static void kv_free(kv_run *r)
{
    ffpa_context *ctx = th_ctx();
    th_tensor *ts[] = {&r->q, &r->kpool, &r->vpool, &r->knew, &r->vnew, &r->o, &r->lse, &r->alibi};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i)
        if (ts[i]->host_base)
            th_tensor_free(ts[i]);
    ffpa_free(ctx, r->dev_table);
    ffpa_free(ctx, r->dev_seqlens);
    free(r->table);
    free(r->seqlens);
}

/* The case's options; ALiBi slopes from `slopes` (backend or host copy). */
static ffpa_options kv_options(const kv_case *c, const ffpa_tensor *slopes)
{
    ffpa_options opt = ffpa_options_default();
    opt.causal = c->causal;
    opt.window = c->window;
    opt.window_left = c->window_left;
    opt.window_right = c->window_right;
    opt.softcap = c->softcap;
    opt.alibi_slopes = c->alibi ? slopes : NULL;
    return opt;
}

static ffpa_status kv_call(const kv_case *c, kv_run *r)
{
    ffpa_options opt = kv_options(c, &r->alibi.dev);
    return ffpa_forward_kvcache(th_ctx(), &r->q.dev, &r->cache, c->append ? &r->knew.dev : NULL,
                                c->append && !c->mla ? &r->vnew.dev : NULL, &r->o.dev, &r->lse.dev, &opt);
}

/* Element offset of key row j of (b, kv head h) in a host pool. */
static int64_t pool_row(const kv_case *c, const kv_run *r, const ffpa_tensor *pool, int64_t b, int64_t h,
                        int64_t j)
{
    const int64_t ps = c->paged ? c->page_size : pool->shape[2];
    const int64_t page = c->paged ? r->table[b * r->bt_stride + j / ps] : b;
    return page * pool->stride[0] + h * pool->stride[1] + (j % ps) * pool->stride[2];
}

static void copy_row(const ffpa_tensor *dst, int64_t dst_off, const ffpa_tensor *src, int64_t src_off, int64_t d)
{
    const size_t elt = ffpa_dtype_size(dst->dtype);
    for (int64_t x = 0; x < d; ++x)
        memcpy((char *)dst->data + (size_t)(dst_off + x * dst->stride[3]) * elt,
               (const char *)src->data + (size_t)(src_off + x * src->stride[3]) * elt, elt);
}

/* The append, applied to the host copies of the pools. */
static void host_append(const kv_case *c, kv_run *r)
{
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t h = 0; h < c->hkv; ++h)
            for (int64_t t = 0; t < c->nq; ++t) {
                const int64_t j = c->lens[b] + t;
                copy_row(&r->kpool.host, pool_row(c, r, &r->kpool.host, b, h, j), &r->knew.host,
                         b * r->knew.host.stride[0] + h * r->knew.host.stride[1] + t * r->knew.host.stride[2],
                         c->dqk);
                if (!c->mla)
                    copy_row(&r->vpool.host, pool_row(c, r, &r->vpool.host, b, h, j), &r->vnew.host,
                             b * r->vnew.host.stride[0] + h * r->vnew.host.stride[1] +
                                 t * r->vnew.host.stride[2],
                             c->dv);
            }
}

/* Reference O and LSE: each sequence's keys gathered into a packed varlen
 * problem (q as [1, Hq, B*Nq, D]) for the oracle. */
static void kv_reference(const kv_case *c, kv_run *r, double *o_ref, double *lse_ref)
{
    const int64_t added = c->append ? c->nq : 0;
    int32_t *cu_q = malloc(sizeof(int32_t) * (size_t)(c->batch + 1));
    int32_t *cu_k = malloc(sizeof(int32_t) * (size_t)(c->batch + 1));
    cu_q[0] = cu_k[0] = 0;
    for (int64_t b = 0; b < c->batch; ++b) {
        cu_q[b + 1] = (int32_t)((b + 1) * c->nq);
        cu_k[b + 1] = cu_k[b] + (int32_t)(c->lens[b] + added);
    }
    const int64_t total_k = cu_k[c->batch];
    const size_t elt = ffpa_dtype_size(c->dtype);
    const ffpa_tensor *vsrc = c->mla ? &r->kpool.host : &r->vpool.host;
    ffpa_tensor q = ffpa_tensor_bhnd(NULL, c->dtype, 1, c->hq, c->batch * c->nq, c->dqk);
    ffpa_tensor k = ffpa_tensor_bhnd(NULL, c->dtype, 1, c->hkv, total_k, c->dqk);
    ffpa_tensor v = ffpa_tensor_bhnd(NULL, c->dtype, 1, c->hkv, total_k, c->dv);
    q.data = malloc(elt * (size_t)(c->hq * c->batch * c->nq * c->dqk) + 16);
    k.data = malloc(elt * (size_t)(c->hkv * total_k * c->dqk) + 16);
    v.data = malloc(elt * (size_t)(c->hkv * total_k * c->dv) + 16);
    for (int64_t b = 0; b < c->batch; ++b) {
        for (int64_t h = 0; h < c->hq; ++h)
            for (int64_t i = 0; i < c->nq; ++i)
                copy_row(&q, h * q.stride[1] + (b * c->nq + i) * q.stride[2], &r->q.host,
                         b * r->q.host.stride[0] + h * r->q.host.stride[1] + i * r->q.host.stride[2], c->dqk);
        for (int64_t h = 0; h < c->hkv; ++h)
            for (int64_t j = 0; j < c->lens[b] + added; ++j) {
                copy_row(&k, h * k.stride[1] + (cu_k[b] + j) * k.stride[2], &r->kpool.host,
                         pool_row(c, r, &r->kpool.host, b, h, j), c->dqk);
                copy_row(&v, h * v.stride[1] + (cu_k[b] + j) * v.stride[2], vsrc,
                         pool_row(c, r, vsrc, b, h, j), c->dv);
            }
    }
    ffpa_options opt = kv_options(c, &r->alibi.host);
    opt.cu_seqlens_q = cu_q;
    opt.cu_seqlens_k = cu_k;
    opt.varlen_batch = (int32_t)c->batch;
    oracle_problem p;
    assert_int_equal(oracle_problem_init(&p, &q, &k, &v, &opt), 0);
    double *o_packed = malloc(sizeof(double) * (size_t)oracle_o_elems(&p));
    double *lse_packed = malloc(sizeof(double) * (size_t)oracle_lse_elems(&p));
    oracle_forward(&p, o_packed, lse_packed);
    /* [1, Hq, B*Nq, Dv] -> [B, Hq, Nq, Dv] */
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t h = 0; h < c->hq; ++h)
            for (int64_t i = 0; i < c->nq; ++i) {
                const int64_t from = h * c->batch * c->nq + b * c->nq + i, to = (b * c->hq + h) * c->nq + i;
                memcpy(o_ref + to * c->dv, o_packed + from * c->dv, sizeof(double) * (size_t)c->dv);
                lse_ref[to] = lse_packed[from];
            }
    oracle_problem_free(&p);
    free(o_packed);
    free(lse_packed);
    free(q.data);
    free(k.data);
    free(v.data);
    free(cu_q);
    free(cu_k);
}

static void kv_check(const kv_case *c)
{
    kv_run r;
    kv_setup(c, &r);
    ffpa_context *ctx = th_ctx();
    ffpa_status st = kv_call(c, &r);
    if (th_refused(ctx, st, "ffpa_forward_kvcache")) {
        kv_free(&r);
        return;
    }
    th_expect_ok(ctx, st, "ffpa_forward_kvcache");
    th_expect_ok(ctx, ffpa_synchronize(ctx), "ffpa_synchronize");
    if (c->append)
        host_append(c, &r);
    double *o_ref = malloc(sizeof(double) * (size_t)(c->batch * c->hq * c->nq * c->dv));
    double *lse_ref = malloc(sizeof(double) * (size_t)(c->batch * c->hq * c->nq));
    kv_reference(c, &r, o_ref, lse_ref);
    th_check("o", &r.o, o_ref, NULL, NULL, TH_OUTPUT, 1.0);
    th_check("lse", &r.lse, lse_ref, NULL, NULL, TH_LSE, 1.0);
    /* The cache: the appended rows and nothing else changed. */
    th_expect_unchanged("cache.k", &r.kpool, r.kpool.host_base);
    if (!c->mla)
        th_expect_unchanged("cache.v", &r.vpool, r.vpool.host_base);
    free(o_ref);
    free(lse_ref);
    kv_free(&r);
}

/* ------------------------------------------------------------ decode */

static void test_decode_awkward_lengths(void **state)
{
    (void)state;
    /* 0, 1, page - 1, page + 1, a few pages, across page sizes 16, 64, 256
     * and 48 (not a power of two: the kernels' division path). */
    const int64_t pages[] = {16, 64, 256, 48};
    for (int p = 0; p < 4; ++p) {
        const int64_t ps = pages[p];
        const int64_t lens[] = {0, 1, ps - 1, ps + 1, 3 * ps + 5};
        kv_case c = kv_default(5, 8, 2, 1, 64, ps, lens);
        kv_check(&c);
    }
}

static void test_decode_long_cache(void **state)
{
    (void)state;
    const int64_t lens[] = {100000, 37};
    kv_case c = kv_default(2, 4, 1, 1, 64, 256, lens);
    kv_check(&c);
}

static void test_decode_group_sizes(void **state)
{
    (void)state;
    const int64_t lens[] = {70, 200, 33};
    const int64_t groups[][2] = {{4, 4}, {8, 1}, {128, 1}};
    for (int g = 0; g < 3; ++g) {
        kv_case c = kv_default(3, groups[g][0], groups[g][1], 1, 64, 16, lens);
        kv_check(&c);
    }
}

static void test_decode_head_dims(void **state)
{
    (void)state;
    const int64_t lens[] = {150, 64};
    const int64_t dims[][2] = {{128, 128}, {256, 256}, {512, 512}, {1024, 1024}, {136, 72}};
    for (int i = 0; i < 5; ++i) {
        kv_case c = kv_default(2, 4, 2, 1, dims[i][0], 64, lens);
        c.dv = dims[i][1];
        kv_check(&c);
    }
}

static void test_shuffled_shared_pages(void **state)
{
    (void)state;
    const int64_t lens[] = {80, 100, 17};
    kv_case c = kv_default(3, 8, 2, 2, 64, 16, lens);
    c.share_prefix = 1;
    c.causal = 1;
    kv_check(&c);
}

static void test_dense_cache(void **state)
{
    (void)state;
    const int64_t lens[] = {0, 90, 129};
    kv_case c = kv_default(3, 8, 2, 3, 64, 64, lens);
    c.paged = 0;
    c.spare_pages = 1;
    c.causal = 1;
    c.append = 1;
    kv_check(&c);
}

static void test_bhnd_pools_trusted(void **state)
{
    (void)state;
    const int64_t lens[] = {45, 300};
    kv_case c = kv_default(2, 6, 3, 1, 96, 64, lens);
    c.layout = TH_BHND;
    c.trusted = 1;
    kv_check(&c);
}

/* ------------------------------------------------------------ append, causal, Nq > 1 */

static void test_speculative_causal_append(void **state)
{
    (void)state;
    const int64_t lens[] = {0, 15, 16, 47};
    const int64_t nqs[] = {1, 2, 4, 16};
    for (int i = 0; i < 4; ++i) {
        kv_case c = kv_default(4, 8, 2, nqs[i], 64, 16, lens);
        c.causal = 1;
        c.append = 1;
        kv_check(&c);
    }
}

static void test_chunked_prefill(void **state)
{
    (void)state;
    const int64_t lens[] = {0, 190};
    kv_case c = kv_default(2, 4, 2, 100, 64, 64, lens);
    c.causal = 1;
    c.append = 1;
    kv_check(&c);
}

static void test_noncausal_append_mqa(void **state)
{
    (void)state;
    const int64_t lens[] = {31, 5};
    kv_case c = kv_default(2, 8, 1, 3, 64, 16, lens);
    c.append = 1;
    kv_check(&c);
}

/* ------------------------------------------------------------ absorbed MLA */

static void test_mla_v_in_k(void **state)
{
    (void)state;
    const int64_t lens[] = {63, 65, 1};
    const int64_t hqs[] = {16, 128};
    for (int i = 0; i < 2; ++i) {
        kv_case c = kv_default(3, hqs[i], 1, i + 1, 576, 64, lens);
        c.dv = 512;
        c.mla = 1;
        c.append = 1;
        c.causal = 1;
        kv_check(&c);
    }
}

/* The Hopper MLA kernel's cases (any backend runs them): lengths 0, 1,
 * page +- 1 and a few pages through page sizes 16, 64 and 256; Hq 16-128;
 * Nq 1, 2, 4 (causal among the new tokens); appends; LSE. */
static void test_mla_awkward(void **state)
{
    (void)state;
    const struct {
        int64_t page, hq, nq;
        int append;
    } cases[] = {{16, 16, 1, 0}, {64, 32, 2, 1}, {256, 64, 4, 0}, {64, 128, 1, 1}};
    for (int i = 0; i < 4; ++i) {
        const int64_t ps = cases[i].page;
        const int64_t lens[] = {0, 1, ps - 1, ps + 1, 3 * ps + 5};
        kv_case c = kv_default(5, cases[i].hq, 1, cases[i].nq, 576, ps, lens);
        c.dv = 512;
        c.mla = 1;
        c.append = cases[i].append;
        c.causal = cases[i].nq > 1;
        kv_check(&c);
    }
}

/* Window, softcap and ALiBi on the KV-cache call: decode (windows shorter
 * than a page and than the cache, one-sided), speculative causal append with
 * all three, GQA, MLA (the generic kernel takes them). */
static void test_variants(void **state)
{
    (void)state;
    static const int64_t lens[] = {700, 5, 129, 0};
    kv_case c = kv_default(4, 8, 2, 1, 128, 16, lens);
    c.window = 1;
    c.window_left = 40;
    c.window_right = -1;
    kv_check(&c);
    c.window_left = 3;
    c.softcap = 5.0f;
    kv_check(&c);
    c.window = 0;
    c.softcap = 0.0f;
    c.alibi = 1;
    kv_check(&c);
    kv_case s = kv_default(3, 8, 2, 4, 64, 32, lens);
    s.append = s.causal = 1;
    s.window = 1;
    s.window_left = 9;
    s.window_right = 0;
    s.softcap = 20.0f;
    s.alibi = 1;
    kv_check(&s);
    s.causal = 0;
    s.window_right = 2; /* sees two keys past its own position: none exist for the last token */
    kv_check(&s);
    kv_case m = kv_default(2, 16, 1, 2, 576, 64, lens);
    m.dv = 512;
    m.mla = m.append = m.causal = 1;
    m.window = 1;
    m.window_left = 100;
    m.window_right = -1;
    m.alibi = 1;
    kv_check(&m);
}

static void test_mla_long_cache(void **state)
{
    (void)state;
    const int64_t lens[] = {100000, 37};
    kv_case c = kv_default(2, 16, 1, 1, 576, 64, lens);
    c.dv = 512;
    c.mla = 1;
    kv_check(&c);
}

/* ------------------------------------------------------------ bad input */

/* Runs a call that must fail with `want` naming `name`, and checks that
 * nothing was written (o, lse, the cache). */
static void expect_refused(const kv_case *c, kv_run *r, ffpa_status want, const char *name)
{
    ffpa_context *ctx = th_ctx();
    unsigned char *o_snap = th_tensor_snapshot(&r->o), *k_snap = th_tensor_snapshot(&r->kpool);
    ffpa_status st = kv_call(c, r);
    if (st != want)
        fail_msg("expected status %d for a bad %s, got %d (%s)", (int)want, name, (int)st, ffpa_last_error(ctx));
    const char *names[] = {name, NULL};
    if (!th_message_names(ffpa_last_error(ctx), names))
        fail_msg("message does not name %s: %s", name, ffpa_last_error(ctx));
    th_expect_unchanged("o", &r->o, o_snap);
    th_expect_unchanged("cache.k", &r->kpool, k_snap);
    free(o_snap);
    free(k_snap);
}

static void upload_tables(kv_run *r, const kv_case *c)
{
    ffpa_context *ctx = th_ctx();
    th_expect_ok(ctx,
                 ffpa_memcpy(ctx, r->dev_table, r->table, sizeof(int32_t) * (size_t)(c->batch * r->bt_stride),
                             FFPA_COPY_HOST_TO_DEVICE),
                 "ffpa_memcpy");
    th_expect_ok(ctx,
                 ffpa_memcpy(ctx, r->dev_seqlens, r->seqlens, sizeof(int32_t) * (size_t)c->batch,
                             FFPA_COPY_HOST_TO_DEVICE),
                 "ffpa_memcpy");
}

static void test_bad_tables(void **state)
{
    (void)state;
    const int64_t lens[] = {20, 40};
    kv_case c = kv_default(2, 4, 2, 2, 64, 16, lens);
    c.append = 1;
    kv_run r;
    kv_setup(&c, &r);

    r.table[1] = (int32_t)r.num_pages; /* outside the pool */
    upload_tables(&r, &c);
    expect_refused(&c, &r, FFPA_ERR_INVALID_ARGUMENT, "cache.block_table");
    r.table[1] = -3;
    upload_tables(&r, &c);
    expect_refused(&c, &r, FFPA_ERR_INVALID_ARGUMENT, "cache.block_table");
    r.table[1] = r.table[0];

    r.seqlens[1] = -1; /* negative */
    upload_tables(&r, &c);
    expect_refused(&c, &r, FFPA_ERR_INVALID_ARGUMENT, "cache.cache_seqlens");
    /* The append would overflow the pages the sequence has. */
    r.seqlens[1] = (int32_t)(r.max_pages * c.page_size - 1);
    upload_tables(&r, &c);
    expect_refused(&c, &r, FFPA_ERR_INVALID_ARGUMENT, "cache.cache_seqlens");
    kv_free(&r);
}

static void test_bad_shapes(void **state)
{
    (void)state;
    const int64_t lens[] = {20, 40};
    kv_case c = kv_default(2, 4, 2, 1, 64, 16, lens);
    kv_run r;
    kv_setup(&c, &r);
    /* A page size that is not a multiple of 16: view the pool as pages of 8. */
    ffpa_tensor k8 = r.cache.k, v8 = r.cache.v;
    r.cache.k.shape[2] = r.cache.v.shape[2] = 8;
    expect_refused(&c, &r, FFPA_ERR_INVALID_ARGUMENT, "cache.k");
    r.cache.k = k8;
    r.cache.v = v8;
    /* kv heads that do not divide the query heads */
    r.cache.k.shape[1] = r.cache.v.shape[1] = 3;
    expect_refused(&c, &r, FFPA_ERR_INVALID_ARGUMENT, "cache.k");
    r.cache.k = k8;
    r.cache.v = v8;
    /* no lengths */
    r.cache.cache_seqlens = NULL;
    expect_refused(&c, &r, FFPA_ERR_INVALID_ARGUMENT, "cache.cache_seqlens");
    r.cache.cache_seqlens = r.dev_seqlens;
    /* v overlapping k without being its view */
    r.cache.v = r.cache.k;
    r.cache.v.data = (char *)r.cache.k.data + ffpa_dtype_size(c.dtype) * 8;
    r.cache.v.shape[3] = 32;
    expect_refused(&c, &r, FFPA_ERR_INVALID_ARGUMENT, "cache.v");
    r.cache.v = v8;
    /* a bias is not part of the KV-cache call */
    ffpa_options opt = ffpa_options_default();
    opt.dropout_p = 0.5f;
    ffpa_status st = ffpa_forward_kvcache(th_ctx(), &r.q.dev, &r.cache, NULL, NULL, &r.o.dev, NULL, &opt);
    assert_int_equal(st, FFPA_ERR_INVALID_ARGUMENT);
    kv_free(&r);
}

/* Every argument check of the call: status, message naming the argument,
 * nothing written. */
static void test_bad_arguments(void **state)
{
    (void)state;
    const int64_t lens[] = {20, 40};
    kv_case c = kv_default(2, 4, 2, 2, 64, 16, lens);
    c.append = 1;
    kv_run r;
    kv_setup(&c, &r);
    ffpa_context *ctx = th_ctx();
    ffpa_options opt = ffpa_options_default();
    const ffpa_kv_cache good = r.cache;
    unsigned char *o_snap = th_tensor_snapshot(&r.o), *k_snap = th_tensor_snapshot(&r.kpool),
                  *v_snap = th_tensor_snapshot(&r.vpool);
    typedef struct bad_call {
        const char *name;
        const ffpa_kv_cache *cache;
        const ffpa_tensor *k_new, *v_new, *o;
        int causal;
        const ffpa_tensor *bias;
    } bad_call;
    bad_call bad[16];
    int n = 0;
    ffpa_kv_cache caches[8];
    ffpa_tensor knew_short = r.knew.dev, o_on_cache = r.o.dev;
    knew_short.shape[2] = 1; /* rows of q differ */
    o_on_cache.data = r.kpool.dev.data;
    for (int i = 0; i < 8; ++i)
        caches[i] = good;
    caches[0].block_table_stride = good.max_pages_per_seq - 1;
    caches[1].max_pages_per_seq = 0;
    caches[2].block_table = NULL; /* dense: the pool's pages must then be the batch */
    caches[3].cache_seqlens = NULL;
    caches[4].v.dtype = c.dtype == FFPA_F32 ? FFPA_F16 : FFPA_F32;
    caches[5].max_pages_per_seq = (int64_t)1 << 60; /* pages x tokens overflow int64 (a fuzzer finding) */
    caches[5].block_table_stride = 0;
    bad[n++] = (bad_call){"cache", NULL, &r.knew.dev, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"cache.block_table_stride", &caches[0], &r.knew.dev, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"cache.max_pages_per_seq", &caches[1], &r.knew.dev, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"cache.k", &caches[2], &r.knew.dev, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"cache.cache_seqlens", &caches[3], &r.knew.dev, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"cache.max_pages_per_seq", &caches[5], &r.knew.dev, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"cache.v", &caches[4], &r.knew.dev, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"v_new", &good, &r.knew.dev, NULL, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"k_new", &good, NULL, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"k_new", &good, &knew_short, &r.vnew.dev, &r.o.dev, 0, NULL};
    bad[n++] = (bad_call){"o", &good, &r.knew.dev, &r.vnew.dev, &o_on_cache, 0, NULL};
    bad[n++] = (bad_call){"opt.causal", &good, &r.knew.dev, &r.vnew.dev, &r.o.dev, 2, NULL};
    bad[n++] = (bad_call){"opt.bias", &good, &r.knew.dev, &r.vnew.dev, &r.o.dev, 0, &r.o.dev};
    for (int i = 0; i < n; ++i) {
        opt.causal = bad[i].causal;
        opt.bias = bad[i].bias;
        ffpa_status st = ffpa_forward_kvcache(ctx, &r.q.dev, bad[i].cache, bad[i].k_new, bad[i].v_new, bad[i].o,
                                              &r.lse.dev, &opt);
        if (st != FFPA_ERR_INVALID_ARGUMENT)
            fail_msg("bad %s: status %d (%s)", bad[i].name, (int)st, ffpa_last_error(ctx));
        const char *names[] = {bad[i].name, NULL};
        if (!th_message_names(ffpa_last_error(ctx), names))
            fail_msg("bad %s: message names something else: %s", bad[i].name, ffpa_last_error(ctx));
    }
    th_expect_unchanged("o", &r.o, o_snap);
    th_expect_unchanged("cache.k", &r.kpool, k_snap);
    th_expect_unchanged("cache.v", &r.vpool, v_snap);
    free(o_snap);
    free(k_snap);
    free(v_snap);
    kv_free(&r);
}

/* No sequence (B = 0) or no new token (Nq = 0): a valid call with nothing
 * to do; the cache, its tables and every output stay as they were, and the
 * workspace query and the schedule say so (0 bytes, an empty schedule). */
static void test_empty_batch_and_no_new_tokens(void **state)
{
    (void)state;
    const int64_t lens[] = {20, 40};
    kv_case c = kv_default(2, 4, 2, 2, 64, 16, lens);
    c.append = 1;
    kv_run r;
    kv_setup(&c, &r);
    ffpa_context *ctx = th_ctx();
    ffpa_options opt = ffpa_options_default();
    unsigned char *o_snap = th_tensor_snapshot(&r.o), *k_snap = th_tensor_snapshot(&r.kpool),
                  *v_snap = th_tensor_snapshot(&r.vpool);
    for (int dim = 0; dim < 4; dim += 2) { /* B, then Nq */
        ffpa_tensor q = r.q.dev, o = r.o.dev, lse = r.lse.dev, knew = r.knew.dev, vnew = r.vnew.dev;
        q.shape[dim] = o.shape[dim] = lse.shape[dim] = knew.shape[dim] = vnew.shape[dim] = 0;
        th_expect_ok(ctx, ffpa_forward_kvcache(ctx, &q, &r.cache, &knew, &vnew, &o, &lse, &opt),
                     dim ? "ffpa_forward_kvcache (Nq = 0, append)" : "ffpa_forward_kvcache (B = 0)");
        size_t bytes = 1;
        th_expect_ok(ctx, ffpa_forward_kvcache_workspace_size(ctx, &q, &r.cache, &opt, &bytes),
                     "ffpa_forward_kvcache_workspace_size");
        assert_int_equal(bytes, 0);
    }
    th_expect_unchanged("o", &r.o, o_snap);
    th_expect_unchanged("cache.k", &r.kpool, k_snap);
    th_expect_unchanged("cache.v", &r.vpool, v_snap);
    free(o_snap);
    free(k_snap);
    free(v_snap);
    kv_free(&r);
}

/* A block table with padded rows (block_table_stride > max_pages). */
static void test_table_stride(void **state)
{
    (void)state;
    const int64_t lens[] = {50, 21, 64};
    kv_case c = kv_default(3, 4, 2, 2, 64, 16, lens);
    c.table_pad = 3;
    c.append = 1;
    c.causal = 1;
    kv_check(&c);
}

/* Tables the caller vouched for are not checked: a page outside the pool
 * still runs, reads nothing outside the pool (ASan on cpu, memcheck on GPUs)
 * and writes nothing but O and LSE. */
static void test_trusted_bad_entry(void **state)
{
    (void)state;
    const int64_t lens[] = {40, 40};
    kv_case c = kv_default(2, 4, 2, 1, 64, 16, lens);
    c.trusted = 1;
    kv_run r;
    kv_setup(&c, &r);
    r.table[1] = (int32_t)(r.num_pages + 1000);
    r.table[r.bt_stride] = -7;
    upload_tables(&r, &c);
    unsigned char *k_snap = th_tensor_snapshot(&r.kpool), *v_snap = th_tensor_snapshot(&r.vpool);
    ffpa_context *ctx = th_ctx();
    ffpa_status st = kv_call(&c, &r);
    if (!th_refused(ctx, st, "ffpa_forward_kvcache")) {
        th_expect_ok(ctx, st, "ffpa_forward_kvcache");
        th_expect_ok(ctx, ffpa_synchronize(ctx), "ffpa_synchronize");
        th_expect_unchanged("cache.k", &r.kpool, k_snap);
        th_expect_unchanged("cache.v", &r.vpool, v_snap);
    }
    free(k_snap);
    free(v_snap);
    kv_free(&r);
}

/* The split plan: a GPU backend describes it; the cpu backend runs none. */
static void test_schedule_query(void **state)
{
    (void)state;
    const int64_t lens[] = {3000, 10, 0};
    kv_case c = kv_default(3, 8, 2, 1, 128, 64, lens);
    kv_run r;
    kv_setup(&c, &r);
    ffpa_context *ctx = th_ctx();
    ffpa_kv_schedule_info info;
    const int32_t host_lens[] = {3000, 10, 0};
    ffpa_status st = ffpa_kvcache_schedule(ctx, &r.q.dev, &r.cache, host_lens, 0, NULL, &info);
    if (strcmp(ffpa_backend_name(ctx), "cpu") == 0) {
        assert_int_equal(st, FFPA_ERR_UNSUPPORTED);
        const char *names[] = {"ctx", NULL};
        assert_true(th_message_names(ffpa_last_error(ctx), names));
    } else if (!th_refused(ctx, st, "ffpa_kvcache_schedule")) {
        th_expect_ok(ctx, st, "ffpa_kvcache_schedule");
        assert_true(info.rows_per_tile >= 16 && info.kernel && info.kernel[0]);
        assert_int_equal(info.units, 3 * 2);
        /* every sequence at least one block per kv head; the longest split */
        assert_true(info.blocks >= info.units && info.blocks <= info.grid && info.max_splits > 1);
    }
    assert_int_equal(ffpa_kvcache_schedule(ctx, &r.q.dev, &r.cache, NULL, 0, NULL, &info),
                     FFPA_ERR_INVALID_ARGUMENT);
    kv_free(&r);
}

static void test_workspace_query(void **state)
{
    (void)state;
    const int64_t lens[] = {20, 40};
    kv_case c = kv_default(2, 4, 2, 1, 64, 16, lens);
    kv_run r;
    kv_setup(&c, &r);
    size_t bytes = 0;
    th_expect_ok(th_ctx(), ffpa_forward_kvcache_workspace_size(th_ctx(), &r.q.dev, &r.cache, NULL, &bytes),
                 "ffpa_forward_kvcache_workspace_size");
    /* Caller-owned workspace of exactly that size works. */
    void *ws = NULL;
    th_expect_ok(th_ctx(), ffpa_malloc(th_ctx(), &ws, bytes ? bytes : 16), "ffpa_malloc");
    th_expect_ok(th_ctx(), ffpa_set_workspace(th_ctx(), ws, bytes ? bytes : 16), "ffpa_set_workspace");
    th_expect_ok(th_ctx(), kv_call(&c, &r), "ffpa_forward_kvcache");
    th_expect_ok(th_ctx(), ffpa_synchronize(th_ctx()), "ffpa_synchronize");
    th_expect_ok(th_ctx(), ffpa_set_workspace(th_ctx(), NULL, 0), "ffpa_set_workspace");
    ffpa_free(th_ctx(), ws);
    kv_free(&r);
}

int main(void)
{
    int skip = th_backend_unavailable_exit();
    if (skip >= 0)
        return skip;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_awkward_lengths),
        cmocka_unit_test(test_decode_long_cache),
        cmocka_unit_test(test_decode_group_sizes),
        cmocka_unit_test(test_decode_head_dims),
        cmocka_unit_test(test_shuffled_shared_pages),
        cmocka_unit_test(test_dense_cache),
        cmocka_unit_test(test_bhnd_pools_trusted),
        cmocka_unit_test(test_speculative_causal_append),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_noncausal_append_mqa),
        cmocka_unit_test(test_mla_v_in_k),
        cmocka_unit_test(test_mla_awkward),
        cmocka_unit_test(test_mla_long_cache),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_bad_tables),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_empty_batch_and_no_new_tokens),
        cmocka_unit_test(test_table_stride),
        cmocka_unit_test(test_trusted_bad_entry),
        cmocka_unit_test(test_schedule_query),
        cmocka_unit_test(test_workspace_query),
    };
    const int failures = cmocka_run_group_tests_name("kvcache", tests, NULL, NULL);
    return th_exit_code(failures, (int)(sizeof tests / sizeof tests[0]));
}
