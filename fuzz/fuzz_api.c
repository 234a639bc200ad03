/*
 * libFuzzer target: bytes -> tensor descriptors (shapes, strides, dtypes,
 * aliasing, NULL pointers), options (scale, causal, dropout, bias/dbias
 * broadcasts, varlen offsets, grad_accum, determinism) -> ffpa_forward,
 * ffpa_backward, the paged KV-cache call and the workspace queries on the
 * cpu backend, with host buffers sized from the descriptors.
 *
 * Beyond "no crash, no sanitizer report", each call must keep the API's
 * promises: a status from the enum, never FFPA_ERR_INTERNAL; on failure a
 * non-empty message and every output byte untouched.
 *
 *   bash tools/fuzz.sh 600        (build with clang-19, run 600 s on fuzz/corpus)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffpa.h"

enum { MAX_ELEMS = 1 << 13 }; /* per tensor: keeps one call in microseconds */

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static unsigned take(reader *r)
{
    if (!r->n)
        return 0;
    --r->n;
    return *r->p++;
}

static int64_t take_i64(reader *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v = v << 8 | take(r);
    return (int64_t)v;
}

static uint64_t rng_state;
static double rng_uniform(double lo, double hi)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

/* One tensor and the host buffer behind it. backed: the buffer covers every
 * element the descriptor names (else the call that uses it is skipped). */
typedef struct fz_tensor {
    ffpa_tensor t;
    unsigned char *buf;
    size_t bytes;
    int backed;
    int is_output;
} fz_tensor;

/* A small dimension, now and then 0, a raw byte, or a raw int64. */
static int64_t take_dim(reader *r, int64_t typical)
{
    unsigned c = take(r);
    switch (c % 16) {
    case 0: return 0;
    case 1: return (int8_t)take(r);
    case 2: return take_i64(r);
    case 3: return 1;
    default: return 1 + (int64_t)(c % (unsigned)typical);
    }
}

static int64_t extent_elems(const ffpa_tensor *t)
{
    int64_t last = 0;
    for (int i = 0; i < 4; ++i) {
        if (t->shape[i] <= 0)
            return 0;
        int64_t step;
        if (t->stride[i] < 0 || __builtin_mul_overflow(t->stride[i], t->shape[i] - 1, &step) ||
            __builtin_add_overflow(last, step, &last))
            return -1;
    }
    return last == INT64_MAX ? -1 : last + 1;
}

static void make_tensor(reader *r, fz_tensor *ft, ffpa_dtype dtype, int64_t b, int64_t h, int64_t n,
                        int64_t d, int is_output)
{
    memset(ft, 0, sizeof *ft);
    ft->is_output = is_output;
    unsigned mode = take(r) % 12;
    ft->t = mode == 1 ? ffpa_tensor_bnhd(NULL, dtype, b, h, n, d) : ffpa_tensor_bhnd(NULL, dtype, b, h, n, d);
    if (mode == 2) /* random strides, overlap and broadcasts included */
        for (int i = 0; i < 4; ++i)
            ft->t.stride[i] = take(r) % 5 == 0 ? 0 : (int64_t)(take(r) % 97);
    if (mode == 3) /* one dimension of a wrong or wild size */
        ft->t.shape[take(r) % 4] = take_dim(r, 9);
    if (mode == 4)
        ft->t.dtype = (ffpa_dtype)(int8_t)take(r);
    if (mode == 5)
        ft->t.stride[take(r) % 4] = take_i64(r);
    const int64_t elems = extent_elems(&ft->t);
    const int dtype_ok = ft->t.dtype == FFPA_F16 || ft->t.dtype == FFPA_BF16 || ft->t.dtype == FFPA_F32;
    if (elems < 0 || elems > MAX_ELEMS || !dtype_ok) {
        ft->t.data = (void *)(uintptr_t)64; /* never dereferenced: the call is skipped */
        return;
    }
    const size_t elt = ffpa_dtype_size(ft->t.dtype);
    ft->bytes = (size_t)elems * elt;
    ft->backed = 1;
    if (!elems) {
        ft->t.data = take(r) % 2 ? NULL : (void *)(uintptr_t)4096; /* empty: any pointer */
        return;
    }
    ft->buf = malloc(ft->bytes);
    ft->t.data = ft->buf;
    if (mode == 6)
        ft->t.data = ft->buf + 1; /* misaligned for f16/bf16/f32 */
    if (mode == 7)
        ft->t.data = NULL;
    for (int64_t i = 0; i < elems; ++i) {
        float v = is_output ? NAN : (float)rng_uniform(-3.0, 3.0);
        if (ft->t.dtype == FFPA_F32)
            memcpy(ft->buf + 4 * i, &v, 4);
        else /* any 16-bit pattern of a finite value's top bits; poison: 0xFFFF (NaN) */
            ((uint16_t *)ft->buf)[i] = is_output ? 0xFFFFu : (uint16_t)(0x3800u + (rng_state >> 40) % 0x0400u);
    }
}

static void free_tensor(fz_tensor *ft)
{
    free(ft->buf);
}

static int all_backed(fz_tensor *const *ts, int n)
{
    for (int i = 0; i < n; ++i)
        if (ts[i] && !ts[i]->backed)
            return 0;
    return 1;
}

/* Failure: every output byte untouched (the buffers were poisoned). */
static void check_untouched(fz_tensor *const *outs, int n, unsigned char *const *snapshots)
{
    for (int i = 0; i < n; ++i)
        if (outs[i] && outs[i]->buf && memcmp(outs[i]->buf, snapshots[i], outs[i]->bytes) != 0) {
            fprintf(stderr, "refused call wrote output %d\n", i);
            abort();
        }
}

static void check_status(ffpa_context *ctx, ffpa_status st)
{
    if ((int)st < 0 || (int)st > FFPA_ERR_INTERNAL) {
        fprintf(stderr, "status %d is not an ffpa_status\n", (int)st);
        abort();
    }
    if (st == FFPA_ERR_INTERNAL) {
        fprintf(stderr, "internal error: %s\n", ffpa_last_error(ctx));
        abort();
    }
    if (st != FFPA_OK && !ffpa_last_error(ctx)[0]) {
        fprintf(stderr, "status %d without a message\n", (int)st);
        abort();
    }
}

static ffpa_context *context(void)
{
    static ffpa_context *ctx;
    if (!ctx && ffpa_create(&ctx, "cpu") != FFPA_OK) {
        fprintf(stderr, "ffpa_create(cpu): %s\n", ffpa_last_error(NULL));
        abort();
    }
    return ctx;
}

/* The paged KV-cache call: a pool of pages, a block table and lengths from
 * the input (entries outside the pool, lengths past the pages, appends that
 * overflow included: refused unless the caller vouches, and the fuzzer
 * vouches only for tables that are right), q / k_new / v_new / o / lse. */
static void fuzz_kvcache(reader *r, ffpa_context *ctx)
{
    const ffpa_dtype dtype = (ffpa_dtype)(take(r) % 3);
    const int64_t b = take_dim(r, 3), hkv = 1 + take(r) % 2, group = 1 + take(r) % 3, nq = take_dim(r, 4);
    const int64_t d = 8 * (1 + take(r) % 4), dv = take(r) % 4 == 0 ? d / 2 : d; /* dv < d: V over K (MLA) */
    const int64_t pages = 1 + take(r) % 6, page = take(r) % 8 == 0 ? (int64_t)(int8_t)take(r) : 16 * (1 + take(r) % 2);
    const int64_t max_pages = take(r) % 8 == 0 ? (int64_t)(int8_t)take(r) : 1 + take(r) % 4;
    const int paged = take(r) % 4 != 0;
    const int v_in_k = dv < d;
    if (b < 0 || b > 4 || nq < 0 || nq > 4 || page < 1 || page > 64 || max_pages < 0 || max_pages > 8)
        return; /* keeps the buffers below honest about their sizes */
    const int64_t pool_pages = paged ? pages : b;
    fz_tensor kpool, vpool, q, knew, vnew, o, lse;
    make_tensor(r, &kpool, dtype, pool_pages, hkv, page, d, 0);
    make_tensor(r, &vpool, dtype, pool_pages, hkv, page, dv, 0);
    make_tensor(r, &q, dtype, b, hkv * group, nq, d, 0);
    make_tensor(r, &knew, dtype, b, hkv, nq, d, 0);
    make_tensor(r, &vnew, dtype, b, hkv, nq, dv, 0);
    make_tensor(r, &o, dtype, b, hkv * group, nq, dv, 1);
    make_tensor(r, &lse, FFPA_F32, b, hkv * group, nq, 1, 1);
    int32_t table[4 * 8], lens[4];
    int tables_right = 1;
    for (int64_t i = 0; i < b; ++i) {
        lens[i] = take(r) % 8 == 0 ? (int32_t)(int8_t)take(r) : (int32_t)(take(r) % (unsigned)(page * max_pages + 1));
        tables_right &= lens[i] >= 0 && lens[i] + nq <= page * (paged ? max_pages : 1);
    }
    for (int64_t i = 0; i < b * (max_pages ? max_pages : 1); ++i) {
        table[i] = take(r) % 16 == 0 ? (int32_t)(int8_t)take(r) : (int32_t)(take(r) % (unsigned)pages);
        tables_right &= table[i] >= 0 && table[i] < pages;
    }
    ffpa_kv_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.k = kpool.t;
    cache.v = vpool.t;
    if (v_in_k && kpool.backed && kpool.buf) { /* MLA: V = K's first dv columns, same strides */
        cache.v = kpool.t;
        cache.v.shape[3] = dv;
    }
    cache.block_table = paged ? table : NULL;
    cache.max_pages_per_seq = max_pages;
    cache.cache_seqlens = take(r) % 32 ? lens : NULL;
    cache.trusted_tables = tables_right && take(r) % 2;
    ffpa_options opt = ffpa_options_default();
    opt.causal = take(r) % 2;
    const int append = take(r) % 2;
    fz_tensor *used[] = {&kpool, v_in_k ? NULL : &vpool, &q, &o, &lse, append ? &knew : NULL,
                         append && !v_in_k ? &vnew : NULL};
    if (all_backed(used, 7)) {
        unsigned char *k_before = kpool.buf ? malloc(kpool.bytes) : NULL;
        if (k_before)
            memcpy(k_before, kpool.buf, kpool.bytes);
        fz_tensor *outs[] = {&o, &lse};
        unsigned char *snap[2] = {0};
        for (int i = 0; i < 2; ++i)
            if (outs[i]->buf) {
                snap[i] = malloc(outs[i]->bytes);
                memcpy(snap[i], outs[i]->buf, outs[i]->bytes);
            }
        ffpa_status st = ffpa_forward_kvcache(ctx, &q.t, &cache, append ? &knew.t : NULL,
                                              append && !v_in_k ? &vnew.t : NULL, &o.t, &lse.t, &opt);
        check_status(ctx, st);
        if (st != FFPA_OK) {
            check_untouched(outs, 2, snap);
            if (k_before && memcmp(k_before, kpool.buf, kpool.bytes) != 0) {
                fprintf(stderr, "refused KV-cache call wrote the cache\n");
                abort();
            }
        }
        free(k_before);
        free(snap[0]);
        free(snap[1]);
    }
    size_t ws = 0;
    check_status(ctx, ffpa_forward_kvcache_workspace_size(ctx, &q.t, &cache, &opt, &ws));
    fz_tensor *all[] = {&kpool, &vpool, &q, &knew, &vnew, &o, &lse};
    for (int i = 0; i < 7; ++i)
        free_tensor(all[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    ffpa_context *ctx = context();
    rng_state = size * 0x9E3779B97F4A7C15ULL + (size ? data[0] : 0);

    const unsigned op = take(&r) % 5; /* forward, backward, workspace sizes, KV cache */
    if (op == 4) {
        fuzz_kvcache(&r, ctx);
        return 0;
    }
    const ffpa_dtype dtype = (ffpa_dtype)(take(&r) % 3);
    const int64_t hkv = take_dim(&r, 3), group = take_dim(&r, 3);
    int64_t b = take_dim(&r, 3), nq = take_dim(&r, 9), nkv = take_dim(&r, 9);
    const int64_t dqk = take_dim(&r, 24), dvw = take_dim(&r, 24); /* head dims */
    int64_t hq;
    if (__builtin_mul_overflow(hkv, group, &hq))
        hq = INT64_MIN; /* refused as negative */

    ffpa_options opt = ffpa_options_default();
    const unsigned flags = take(&r);
    if (flags & 1)
        opt.causal = take(&r) % 4 == 0 ? (int)(int8_t)take(&r) : 1;
    if (flags & 2) {
        uint32_t bits = (uint32_t)take_i64(&r);
        memcpy(&opt.scale, &bits, 4);
    }
    if (flags & 4) {
        opt.dropout_p = (float)(take(&r) % 5) * 0.25f - (take(&r) % 8 == 0 ? 0.5f : 0.0f);
        opt.dropout_seed = (uint64_t)take_i64(&r);
    }
    opt.grad_accum = (ffpa_grad_accum)(take(&r) % 8 == 0 ? (int)(int8_t)take(&r) : (flags >> 6) & 1);
    opt.deterministic = (flags >> 7) & 1;

    int32_t cu_q[130], cu_k[130]; /* any varlen_batch up to 127 reads within them */
    if (flags & 8) { /* varlen: packed rows, offsets from the input (broken ones too) */
        const int nseq = 1 + (int)(take(&r) % 4);
        cu_q[0] = cu_k[0] = 0;
        for (int s = 1; s <= nseq; ++s) {
            cu_q[s] = cu_q[s - 1] + (int32_t)(take(&r) % 6);
            cu_k[s] = cu_k[s - 1] + (int32_t)(take(&r) % 6);
        }
        for (int s = nseq + 1; s < 130; ++s)
            cu_q[s] = cu_q[nseq], cu_k[s] = cu_k[nseq];
        if (take(&r) % 8 == 0)
            cu_q[take(&r) % (unsigned)(nseq + 1)] = (int32_t)(int8_t)take(&r);
        opt.cu_seqlens_q = cu_q;
        opt.cu_seqlens_k = take(&r) % 16 ? cu_k : NULL;
        opt.varlen_batch = take(&r) % 16 ? nseq : (int)(int8_t)take(&r);
        nq = cu_q[nseq] > 0 ? cu_q[nseq] : 0;
        nkv = cu_k[nseq];
        b = 1;
    }

    fz_tensor q, k, v, o, lse, dout, dq, dk, dv, bias, dbias;
    make_tensor(&r, &q, dtype, b, hq, nq, dqk, 0);
    make_tensor(&r, &k, dtype, b, hkv, nkv, dqk, 0);
    const int v_alias_k = take(&r) % 16 == 0;
    make_tensor(&r, &v, dtype, b, hkv, nkv, dvw, 0);
    make_tensor(&r, &o, dtype, b, hq, nq, dvw, 1);
    make_tensor(&r, &lse, FFPA_F32, b, hq, nq, 1, 1);
    make_tensor(&r, &dout, dtype, b, hq, nq, dvw, 0);
    make_tensor(&r, &dq, dtype, b, hq, nq, dqk, 1);
    make_tensor(&r, &dk, dtype, b, hkv, nkv, dqk, 1);
    make_tensor(&r, &dv, dtype, b, hkv, nkv, dvw, 1);
    int64_t bshape[4] = {b, hq, nq, nkv};
    const unsigned bcast = take(&r);
    for (int i = 0; i < 4; ++i)
        if (bcast >> i & 1)
            bshape[i] = 1;
    make_tensor(&r, &bias, (ffpa_dtype)(take(&r) % 3), bshape[0], bshape[1], bshape[2], bshape[3], 0);
    make_tensor(&r, &dbias, take(&r) % 2 ? FFPA_F32 : bias.t.dtype, bshape[0], bshape[1], bshape[2],
                bshape[3], 1);
    if (flags & 16)
        opt.bias = &bias.t;
    if ((flags & 32) && op == 1)
        opt.dbias = &dbias.t;
    /* Aliases only where the other buffer covers the whole descriptor: the
     * library cannot tell a lie about a buffer's size from the truth. */
    if (v_alias_k && k.buf && v.buf && k.bytes >= v.bytes)
        v.t.data = k.t.data; /* MLA-style V over K's memory */
    const unsigned alias = take(&r) % 32; /* an output over an input: refused */
    if (alias == 1 && q.buf && o.buf && q.bytes >= o.bytes)
        o.t.data = q.t.data;
    if (alias == 2 && dout.buf && dk.buf && dout.bytes >= dk.bytes)
        dk.t.data = dout.t.data;
    const int null_lse = take(&r) % 4 == 0;

    fz_tensor *outs[] = {&o, &lse, &dq, &dk, &dv, (flags & 32) && op == 1 ? &dbias : NULL};
    unsigned char *snap[6] = {0};
    for (int i = 0; i < 6; ++i)
        if (outs[i] && outs[i]->buf) {
            snap[i] = malloc(outs[i]->bytes);
            memcpy(snap[i], outs[i]->buf, outs[i]->bytes);
        }

    /* Calls whose work (B x Hq x Nq x Nkv scores) is large are valid and
     * run for real; the fuzzer skips them to stay fast (a zero head dim
     * lets every dimension but D be huge at no memory cost). */
    int64_t work = 1;
    const int64_t dims[4] = {b, hq, nq, nkv};
    for (int i = 0; i < 4; ++i)
        if (dims[i] > 0 && __builtin_mul_overflow(work, dims[i], &work))
            work = INT64_MAX;
    const int small_work = work <= (1 << 20);

    ffpa_status st;
    size_t ws = 0;
    if (op < 2 && !small_work) {
        /* validation only: the workspace queries below */
    } else if (op == 0) {
        fz_tensor *used[] = {&q, &k, &v, &o, null_lse ? NULL : &lse, opt.bias ? &bias : NULL};
        if (all_backed(used, 6)) {
            st = ffpa_forward(ctx, &q.t, &k.t, &v.t, &o.t, null_lse ? NULL : &lse.t, &opt);
            check_status(ctx, st);
            if (st != FFPA_OK)
                check_untouched(outs, 2, snap);
        }
    } else if (op == 1) {
        fz_tensor *used[] = {&dout, &q, &k, &v, &o, &lse, &dq, &dk, &dv,
                             opt.bias ? &bias : NULL, opt.dbias ? &dbias : NULL};
        if (all_backed(used, 11)) {
            st = ffpa_backward(ctx, &dout.t, &q.t, &k.t, &v.t, &o.t, null_lse ? NULL : &lse.t, &dq.t, &dk.t,
                               &dv.t, &opt);
            check_status(ctx, st);
            if (st != FFPA_OK)
                check_untouched(outs, 6, snap);
        }
    }
    if (op >= 2 || !small_work) {
        st = op % 2 == 0 ? ffpa_forward_workspace_size(ctx, &q.t, &k.t, &v.t, &opt, &ws)
                     : ffpa_backward_workspace_size(ctx, &q.t, &k.t, &v.t, &opt, &ws);
        check_status(ctx, st);
    }

    for (int i = 0; i < 6; ++i)
        free(snap[i]);
    fz_tensor *all[] = {&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv, &bias, &dbias};
    for (int i = 0; i < 11; ++i)
        free_tensor(all[i]);
    return 0;
}
