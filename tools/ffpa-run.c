/*
 * ffpa-run: the main job. Runs attention forward and backward at one shape
 * and option set on the selected backend (FFPA_BACKEND or --backend), checks
 * the result against the float64 oracle when the shape is small, and prints
 * latency and TFLOP/s.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "ffpa.h"
#include "cli.h"
#include "oracle.h"

typedef struct run_config {
    const char *backend;
    int64_t b, hq, hkv, nq, nkv, dqk, dv;
    ffpa_dtype dtype;
    int causal, bias, bnhd, backward, iters;
    float dropout;
    int check; /* -1 auto, 0 off, 1 on */
    int window, alibi;
    int64_t window_left, window_right;
    float softcap;
} run_config;

/* Host and backend copies of one tensor. */
typedef struct buffer {
    ffpa_tensor host, dev;
    size_t bytes;
} buffer;

static ffpa_context *ctx;

#define CHECK(call)                                                                             \
    do {                                                                                        \
        ffpa_status st_ = (call);                                                               \
        if (st_ != FFPA_OK) {                                                                   \
            fprintf(stderr, "ffpa-run: %s failed: %s: %s\n", #call, ffpa_status_string(st_),   \
                    ffpa_last_error(ctx));                                                      \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float uniform(void) /* [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0) - 1.0);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void make_buffer(buffer *buf, ffpa_dtype dt, int64_t b, int64_t h, int64_t n, int64_t d,
                        int bnhd, int fill)
{
    /* A shape whose size does not fit gets a token buffer: the library
     * refuses it by name before touching memory (no local overflow here). */
    int64_t elems = 0, bytes = 0;
    const int fits = !__builtin_mul_overflow(b, h, &elems) && !__builtin_mul_overflow(elems, n, &elems) &&
                     !__builtin_mul_overflow(elems, d, &elems) &&
                     !__builtin_mul_overflow(elems, (int64_t)ffpa_dtype_size(dt), &bytes);
    buf->bytes = fits ? (size_t)bytes : 0;
    void *host = malloc(buf->bytes ? buf->bytes : 16);
    void *dev = NULL;
    if (!host) {
        fprintf(stderr, "ffpa-run: out of host memory for a [%lld, %lld, %lld, %lld] tensor (%zu bytes)\n",
                (long long)b, (long long)h, (long long)n, (long long)d, buf->bytes);
        exit(2);
    }
    CHECK(ffpa_malloc(ctx, &dev, buf->bytes ? buf->bytes : 16));
    buf->host = bnhd ? ffpa_tensor_bnhd(host, dt, b, h, n, d) : ffpa_tensor_bhnd(host, dt, b, h, n, d);
    buf->dev = buf->host;
    buf->dev.data = dev;
    for (int64_t i = 0; fits && i < elems; ++i)
        ffpa_store_f32(host, dt, i, fill ? uniform() : NAN);
    CHECK(ffpa_memcpy(ctx, dev, host, buf->bytes, FFPA_COPY_HOST_TO_DEVICE));
}

static void download(buffer *buf)
{
    CHECK(ffpa_memcpy(ctx, buf->host.data, buf->dev.data, buf->bytes, FFPA_COPY_DEVICE_TO_HOST));
}

static void free_buffer(buffer *buf)
{
    ffpa_free(ctx, buf->dev.data);
    free(buf->host.data);
}

/* max |got - ref| / max |ref| over a host tensor against a dense oracle array;
 * NaN (an unwritten element) gives infinity. */
static double rel_error(const ffpa_tensor *t, const double *ref)
{
    int64_t n = t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3];
    double *got = malloc(sizeof(double) * (size_t)(n ? n : 1));
    oracle_read_tensor(t, got);
    double max_err = 0, max_ref = 1e-30;
    for (int64_t i = 0; i < n; ++i) {
        if (!isfinite(got[i]) && !(isinf(got[i]) && got[i] == ref[i]))
            max_err = INFINITY;
        else if (fabs(got[i] - ref[i]) > max_err)
            max_err = fabs(got[i] - ref[i]);
        if (isfinite(ref[i]) && fabs(ref[i]) > max_ref)
            max_ref = fabs(ref[i]);
    }
    free(got);
    return max_err / max_ref;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && v[j] < v[j - 1]; --j) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ffpa-run [options]\n"
            "  --backend NAME   cpu | cuda | hip | auto (default: FFPA_BACKEND, else auto)\n"
            "  -b B --hq H --hkv H --nq N --nkv N -d D --dv D   shape (default 1 4 4 256 256 512)\n"
            "  --dtype f16|bf16|f32   (default bf16)\n"
            "  --causal --bias --dropout P --bnhd   options\n"
            "  --window L,R     sliding window: L keys before the diagonal, R after (-1: unbounded)\n"
            "  --softcap C      logit softcap C * tanh(s / C)\n"
            "  --alibi          ALiBi slopes per query head (0.5 / 2^h)\n"
            "  --no-backward    forward only\n"
            "  --iters N        timed repetitions (median reported; default 3)\n"
            "  --check / --no-check   compare with the float64 oracle (default: when small)\n"
            "  --list           list backends and exit\n"
            "  --help           this text\n"
            "exit status: 0 success, 1 a run or the check failed, 2 bad usage (refused by the tool or the library)\n");
}

static int list_backends(void)
{
    printf("libffpa %s (header %s)\n", ffpa_version_string(), FFPA_VERSION_STRING);
    for (int i = 0; i < ffpa_backend_count(); ++i) {
        ffpa_backend_info info;
        if (ffpa_backend_get_info(i, &info) == FFPA_OK)
            printf("%-6s %-8s %-12s %s\n", info.name, info.version[0] ? info.version : "-",
                   info.available ? "available" : "unavailable", info.detail);
    }
    return 0;
}

static void parse(int argc, char **argv, run_config *c)
{
    enum { O_BACKEND = 256, O_HQ, O_HKV, O_NQ, O_NKV, O_DV, O_DTYPE, O_CAUSAL, O_BIAS, O_DROPOUT,
           O_BNHD, O_NOBWD, O_ITERS, O_CHECK, O_NOCHECK, O_LIST, O_WINDOW, O_SOFTCAP, O_ALIBI };
    static const struct option opts[] = {
        {"backend", required_argument, 0, O_BACKEND}, {"hq", required_argument, 0, O_HQ},
        {"hkv", required_argument, 0, O_HKV},         {"nq", required_argument, 0, O_NQ},
        {"nkv", required_argument, 0, O_NKV},         {"dv", required_argument, 0, O_DV},
        {"dtype", required_argument, 0, O_DTYPE},     {"causal", no_argument, 0, O_CAUSAL},
        {"bias", no_argument, 0, O_BIAS},             {"dropout", required_argument, 0, O_DROPOUT},
        {"bnhd", no_argument, 0, O_BNHD},             {"no-backward", no_argument, 0, O_NOBWD},
        {"iters", required_argument, 0, O_ITERS},     {"check", no_argument, 0, O_CHECK},
        {"no-check", no_argument, 0, O_NOCHECK},      {"list", no_argument, 0, O_LIST},
        {"window", required_argument, 0, O_WINDOW},   {"softcap", required_argument, 0, O_SOFTCAP},
        {"alibi", no_argument, 0, O_ALIBI},           {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    static const char *const dtypes[] = {"f16", "bf16", "f32"};
    const int64_t big = INT64_MAX; /* sequence lengths: the library refuses what does not fit, naming the tensor */
    int ch, hkv_set = 0, nkv_set = 0, dv_set = 0;
    cli_tool("ffpa-run");
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "b:d:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'b': c->b = cli_int("-b", optarg, 0, INT32_MAX); break;
        case 'd': c->dqk = cli_int("-d", optarg, 0, FFPA_MAX_HEAD_DIM); break;
        case O_BACKEND: c->backend = optarg; break;
        case O_HQ: c->hq = cli_int("--hq", optarg, 0, 65536); break;
        case O_HKV: c->hkv = cli_int("--hkv", optarg, 0, 65536); hkv_set = 1; break;
        case O_NQ: c->nq = cli_int("--nq", optarg, 0, big); break;
        case O_NKV: c->nkv = cli_int("--nkv", optarg, 0, big); nkv_set = 1; break;
        case O_DV: c->dv = cli_int("--dv", optarg, 0, FFPA_MAX_HEAD_DIM); dv_set = 1; break;
        case O_DTYPE: {
            static const ffpa_dtype values[] = {FFPA_F16, FFPA_BF16, FFPA_F32};
            c->dtype = values[cli_choice("--dtype", optarg, dtypes, 3)];
            break;
        }
        case O_CAUSAL: c->causal = 1; break;
        case O_BIAS: c->bias = 1; break;
        case O_DROPOUT: c->dropout = (float)cli_real("--dropout", optarg, 0.0, 0.999); break;
        case O_BNHD: c->bnhd = 1; break;
        case O_WINDOW: {
            char left[32], right[32], extra;
            if (strlen(optarg) >= sizeof left || sscanf(optarg, "%31[^,],%31[^,]%c", left, right, &extra) != 2)
                cli_usage_error("--window '%s': expected L,R (keys before and after the diagonal, -1: unbounded)",
                                optarg);
            c->window = 1;
            c->window_left = cli_int("--window (left)", left, -1, INT64_MAX);
            c->window_right = cli_int("--window (right)", right, -1, INT64_MAX);
            break;
        }
        case O_SOFTCAP: c->softcap = (float)cli_real("--softcap", optarg, 1e-3, 1e6); break;
        case O_ALIBI: c->alibi = 1; break;
        case O_NOBWD: c->backward = 0; break;
        case O_ITERS: c->iters = (int)cli_int("--iters", optarg, 1, 1000000); break;
        case O_CHECK: c->check = 1; break;
        case O_NOCHECK: c->check = 0; break;
        case O_LIST: exit(list_backends());
        case 'h': usage(stdout); exit(CLI_EXIT_OK);
        default: cli_bad_option(argv, usage);
        }
    }
    if (optind < argc)
        cli_usage_error("unexpected argument '%s' (see --help)", argv[optind]);
    if (!hkv_set)
        c->hkv = c->hq;
    if (!nkv_set)
        c->nkv = c->nq;
    if (!dv_set)
        c->dv = c->dqk;
}

/* Decode shapes (a few query rows) run the KV-cache kernels on GPU backends:
 * print their split plan (the dense K/V seen as a cache of one page per
 * sequence, every sequence Nkv keys). */
static void print_decode_plan(ffpa_context *ctx, const run_config *c, const ffpa_tensor *q, const ffpa_tensor *k,
                              const ffpa_tensor *v)
{
    if (c->nq > 16 || c->bias || c->dropout > 0)
        return;
    ffpa_kv_cache cache = {0};
    cache.k = *k;
    cache.v = *v;
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)c->b);
    if (!lens)
        return;
    for (int64_t b = 0; b < c->b; ++b)
        lens[b] = (int32_t)c->nkv;
    cache.cache_seqlens = lens; /* not read: only the schedule query below */
    ffpa_kv_schedule_info info;
    if (ffpa_kvcache_schedule(ctx, q, &cache, lens, 0, NULL, &info) == FFPA_OK)
        printf("plan      %s: %d packed rows per tile x %d tiles, %lld (sequence, kv head) units, %lld key "
               "tiles of %d per split, %lld blocks (grid %lld), up to %d splits\n",
               info.kernel, info.rows_per_tile, info.q_tiles, (long long)info.units,
               (long long)info.tiles_per_split, info.key_tile, (long long)info.blocks, (long long)info.grid,
               info.max_splits);
    else
        printf("plan      %s\n", ffpa_last_error(ctx));
    free(lens);
}

int main(int argc, char **argv)
{
    run_config c = {NULL, 1, 4, 4, 256, 256, 512, 512, FFPA_BF16, 0, 0, 0, 1, 3, 0.0f, -1, 0, 0, -1, -1, 0.0f};
    parse(argc, argv, &c);
    if (ffpa_create(&ctx, c.backend) != FFPA_OK) {
        fprintf(stderr, "ffpa-run: %s\n", ffpa_last_error(NULL));
        return 2;
    }
    double work = (double)c.b * c.hq * c.nq * c.nkv * (c.dqk + c.dv);
    int check = c.check >= 0 ? c.check : work <= 4.0e9;

    buffer q, k, v, o, lse, bias, alibi, dout, dq, dk, dv;
    make_buffer(&q, c.dtype, c.b, c.hq, c.nq, c.dqk, c.bnhd, 1);
    make_buffer(&k, c.dtype, c.b, c.hkv, c.nkv, c.dqk, c.bnhd, 1);
    make_buffer(&v, c.dtype, c.b, c.hkv, c.nkv, c.dv, c.bnhd, 1);
    make_buffer(&o, c.dtype, c.b, c.hq, c.nq, c.dv, c.bnhd, 0);
    make_buffer(&lse, FFPA_F32, c.b, c.hq, c.nq, 1, 0, 0);
    ffpa_options opt = ffpa_options_default();
    opt.causal = c.causal;
    opt.dropout_p = c.dropout;
    opt.dropout_seed = 1234;
    if (c.bias) { /* a per-head [1, Hq, Nq, Nkv] bias, broadcast over the batch */
        make_buffer(&bias, FFPA_F32, 1, c.hq, c.nq, c.nkv, 0, 1);
        opt.bias = &bias.dev;
    }
    opt.window = c.window;
    opt.window_left = c.window_left;
    opt.window_right = c.window_right;
    opt.softcap = c.softcap;
    if (c.alibi) { /* the ALiBi paper's geometric slopes, [1, Hq, 1, 1] */
        make_buffer(&alibi, FFPA_F32, 1, c.hq, 1, 1, 0, 1);
        for (int64_t h = 0; h < c.hq; ++h)
            ((float *)alibi.host.data)[h] = 0.5f / (float)(1u << (h % 16));
        CHECK(ffpa_memcpy(ctx, alibi.dev.data, alibi.host.data, alibi.bytes, FFPA_COPY_HOST_TO_DEVICE));
        opt.alibi_slopes = &alibi.dev;
    }

    printf("backend %s: %s\n", ffpa_backend_name(ctx), ffpa_device_name(ctx));
    printf("shape B=%lld Hq=%lld Hkv=%lld Nq=%lld Nkv=%lld Dqk=%lld Dv=%lld %s%s%s%s%s%s%s\n",
           (long long)c.b, (long long)c.hq, (long long)c.hkv, (long long)c.nq, (long long)c.nkv,
           (long long)c.dqk, (long long)c.dv, ffpa_dtype_name(c.dtype), c.causal ? " causal" : "",
           c.bias ? " bias" : "", c.dropout > 0 ? " dropout" : "", c.softcap > 0 ? " softcap" : "",
           c.alibi ? " alibi" : "", c.bnhd ? " BNHD" : " BHND");
    if (c.window)
        printf("window    %lld keys before the diagonal, %lld after (-1: unbounded)\n", (long long)c.window_left,
               (long long)c.window_right);

    /* Forward FLOPs: QK^T and PV; causal halves them (as FlashAttention counts). */
    double fwd_flops = 2.0 * work * (c.causal ? 0.5 : 1.0);
    double times[64];
    int iters = c.iters < 64 ? c.iters : 64;
    CHECK(ffpa_forward(ctx, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &opt)); /* warm-up */
    CHECK(ffpa_synchronize(ctx));
    for (int i = 0; i < iters; ++i) {
        double t0 = now_ms();
        CHECK(ffpa_forward(ctx, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &opt));
        CHECK(ffpa_synchronize(ctx));
        times[i] = now_ms() - t0;
    }
    double fwd_ms = median(times, iters);
    printf("forward   %10.3f ms  %8.2f TFLOP/s\n", fwd_ms, fwd_flops / (fwd_ms * 1e9));
    printf("kernel    forward: %s\n", ffpa_last_kernel(ctx));
    print_decode_plan(ctx, &c, &q.dev, &k.dev, &v.dev);

    double bwd_ms = 0;
    if (c.backward) {
        make_buffer(&dout, c.dtype, c.b, c.hq, c.nq, c.dv, c.bnhd, 1);
        make_buffer(&dq, c.dtype, c.b, c.hq, c.nq, c.dqk, c.bnhd, 0);
        make_buffer(&dk, c.dtype, c.b, c.hkv, c.nkv, c.dqk, c.bnhd, 0);
        make_buffer(&dv, c.dtype, c.b, c.hkv, c.nkv, c.dv, c.bnhd, 0);
        CHECK(ffpa_backward(ctx, &dout.dev, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &dq.dev, &dk.dev,
                            &dv.dev, &opt));
        CHECK(ffpa_synchronize(ctx));
        for (int i = 0; i < iters; ++i) {
            double t0 = now_ms();
            CHECK(ffpa_backward(ctx, &dout.dev, &q.dev, &k.dev, &v.dev, &o.dev, &lse.dev, &dq.dev,
                                &dk.dev, &dv.dev, &opt));
            CHECK(ffpa_synchronize(ctx));
            times[i] = now_ms() - t0;
        }
        bwd_ms = median(times, iters);
        printf("backward  %10.3f ms  %8.2f TFLOP/s (2.5x forward FLOPs)\n", bwd_ms,
               2.5 * fwd_flops / (bwd_ms * 1e9));
        printf("kernel    backward: %s\n", ffpa_last_kernel(ctx));
    }

    int failed = 0;
    if (check) {
        /* bf16 keeps 8 mantissa bits: a few ulps of the largest value. */
        double tol = c.dtype == FFPA_F32 ? 1e-4 : c.dtype == FFPA_F16 ? 5e-3 : 3e-2;
        ffpa_options host_opt = opt;
        if (c.bias)
            host_opt.bias = &bias.host;
        if (c.alibi)
            host_opt.alibi_slopes = &alibi.host;
        oracle_problem p;
        if (oracle_problem_init(&p, &q.host, &k.host, &v.host, &host_opt) != 0) {
            fprintf(stderr, "ffpa-run: oracle setup failed\n");
            return 2;
        }
        double *ref_o = malloc(sizeof(double) * (size_t)oracle_o_elems(&p));
        double *ref_lse = malloc(sizeof(double) * (size_t)oracle_lse_elems(&p));
        oracle_forward(&p, ref_o, ref_lse);
        download(&o);
        download(&lse);
        double e_o = rel_error(&o.host, ref_o), e_lse = rel_error(&lse.host, ref_lse);
        printf("check     O rel err %.2e, LSE rel err %.2e (tolerance %.0e)\n", e_o, e_lse, tol);
        failed |= !(e_o <= tol && e_lse <= tol);
        if (c.backward) {
            double *g = malloc(sizeof(double) * (size_t)oracle_o_elems(&p));
            double *rq = malloc(sizeof(double) * (size_t)oracle_q_elems(&p));
            double *rk = malloc(sizeof(double) * (size_t)oracle_k_elems(&p));
            double *rv = malloc(sizeof(double) * (size_t)oracle_v_elems(&p));
            oracle_read_tensor(&dout.host, g);
            oracle_backward(&p, g, rq, rk, rv, NULL);
            download(&dq);
            download(&dk);
            download(&dv);
            double eq = rel_error(&dq.host, rq), ek = rel_error(&dk.host, rk),
                   ev = rel_error(&dv.host, rv);
            printf("check     dQ %.2e, dK %.2e, dV %.2e (tolerance %.0e)\n", eq, ek, ev, 2 * tol);
            failed |= !(eq <= 2 * tol && ek <= 2 * tol && ev <= 2 * tol);
            free(g);
            free(rq);
            free(rk);
            free(rv);
        }
        free(ref_o);
        free(ref_lse);
        oracle_problem_free(&p);
        printf("%s\n", failed ? "FAIL" : "PASS");
    } else {
        printf("check     skipped (shape too large for the float64 oracle; use --check)\n");
    }

    free_buffer(&q);
    free_buffer(&k);
    free_buffer(&v);
    free_buffer(&o);
    free_buffer(&lse);
    if (c.bias)
        free_buffer(&bias);
    if (c.alibi)
        free_buffer(&alibi);
    if (c.backward) {
        free_buffer(&dout);
        free_buffer(&dq);
        free_buffer(&dk);
        free_buffer(&dv);
    }
    ffpa_destroy(ctx);
    return failed;
}
