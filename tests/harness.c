/* Test harness. See harness.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dtype.h"

/* ------------------------------------------------------------ backend */

static ffpa_context *shared_ctx;
static int backend_unavailable;
static int skipped_tests;
static char unavailable_reason[512];

const char *th_backend(void)
{
    const char *name = getenv("FFPA_TEST_BACKEND");
    return name && *name ? name : "cpu";
}

static void destroy_shared_ctx(void)
{
    if (shared_ctx)
        ffpa_destroy(shared_ctx);
    shared_ctx = NULL;
}

/* A backend the library knows by name (built or not): an unknown name is a
 * typo in FFPA_TEST_BACKEND, which must fail the suite, not skip it. */
static int backend_name_known(const char *name)
{
    if (strcmp(name, "auto") == 0)
        return 1;
    for (int i = 0; i < ffpa_backend_count(); ++i) {
        ffpa_backend_info info;
        if (ffpa_backend_get_info(i, &info) == FFPA_OK && strcmp(info.name, name) == 0)
            return 1;
    }
    return 0;
}

ffpa_context *th_ctx(void)
{
    if (shared_ctx)
        return shared_ctx;
    if (!backend_unavailable) {
        ffpa_status status = ffpa_create(&shared_ctx, th_backend());
        if (status == FFPA_OK) {
            atexit(destroy_shared_ctx);
            return shared_ctx;
        }
        shared_ctx = NULL;
        snprintf(unavailable_reason, sizeof unavailable_reason, "%s (%s)",
                 ffpa_status_string(status), ffpa_last_error(NULL));
        if (strcmp(th_backend(), "cpu") == 0 || status != FFPA_ERR_NO_BACKEND ||
            !backend_name_known(th_backend()))
            fail_msg("ffpa_create(\"%s\") failed: %s", th_backend(), unavailable_reason);
        backend_unavailable = 1;
    }
    print_message("# SKIPPED: backend '%s' is not available here: %s\n", th_backend(),
                  unavailable_reason);
    ++skipped_tests;
    skip();
    return NULL;
}

int th_backend_unavailable_exit(void)
{
    if (shared_ctx)
        return -1;
    /* FFPA_TEST_FILTER / FFPA_TEST_SKIP: only the tests whose names match, or
     * all but those (cmocka's * and ? patterns), for suites that run a costly
     * setting on part of a program. */
    const char *only = getenv("FFPA_TEST_FILTER"), *skip = getenv("FFPA_TEST_SKIP");
    if (only && *only)
        cmocka_set_test_filter(only);
    if (skip && *skip)
        cmocka_set_skip_filter(skip);
    ffpa_status status = ffpa_create(&shared_ctx, th_backend());
    if (status == FFPA_OK) {
        atexit(destroy_shared_ctx);
        return -1;
    }
    shared_ctx = NULL;
    if (!backend_name_known(th_backend())) {
        printf("FFPA_TEST_BACKEND='%s' names no backend this library knows: %s\n", th_backend(),
               ffpa_last_error(NULL));
        return 1; /* a failure, never a skip */
    }
    if (strcmp(th_backend(), "cpu") == 0 || status != FFPA_ERR_NO_BACKEND)
        return -1; /* not a skip: the tests fail through th_ctx() with the message */
    const char *why = ffpa_last_error(NULL);
    const char *tap = getenv("CMOCKA_MESSAGE_OUTPUT");
    if (tap && strcasecmp(tap, "TAP") == 0) {
        /* A TAP plan of zero tests with a SKIP directive: meson reports SKIP. */
        printf("1..0 # SKIP backend '%s' is not available here: %s\n", th_backend(), why);
        return 0;
    }
    printf("SKIPPED: backend '%s' is not available here: %s\n", th_backend(), why);
    return 77;
}

static uint64_t env_u64(const char *name, uint64_t fallback)
{
    const char *v = getenv(name);
    char *end = NULL;
    unsigned long long n = v && *v ? strtoull(v, &end, 10) : 0;
    if (!v || !*v)
        return fallback;
    if (*end || n == 0)
        fail_msg("%s='%s': expected a positive integer", name, v);
    return (uint64_t)n;
}

uint64_t th_random_cases(uint64_t default_cases)
{
    return env_u64("FFPA_TEST_RANDOM_CASES", default_cases);
}

uint64_t th_random_first_seed(void)
{
    return env_u64("FFPA_TEST_RANDOM_SEED", 1);
}

static int refused_cases;

int th_exit_code(int failures, int tests)
{
    if (refused_cases)
        print_message("# %d case(s) refused by backend '%s' as unsupported (listed above)\n",
                      refused_cases, th_backend());
    if (failures == 0 && backend_unavailable && skipped_tests >= tests) {
        print_message("# backend '%s' unavailable: every test that needs it was SKIPPED\n",
                      th_backend());
        return 77;
    }
    return failures;
}

int th_refused(ffpa_context *ctx, ffpa_status status, const char *call)
{
    if (status != FFPA_ERR_UNSUPPORTED || strcmp(th_backend(), "cpu") == 0)
        return 0;
    ++refused_cases;
    print_message("# %s refused by %s as unsupported: %s\n", call, th_backend(),
                  ffpa_last_error(ctx));
    return 1;
}

int th_refused_count(void)
{
    return refused_cases;
}

ffpa_dtype th_fixture_dtype(void)
{
    return strcmp(th_backend(), "cpu") == 0 ? FFPA_F32 : FFPA_BF16;
}

void th_expect_ok(ffpa_context *ctx, ffpa_status status, const char *call)
{
    if (status != FFPA_OK)
        fail_msg("%s on backend %s returned %d (%s): %s", call, th_backend(), (int)status,
                 ffpa_status_string(status), ffpa_last_error(ctx));
}

void th_expect_backward_ok(ffpa_context *ctx, ffpa_status status, const char *call)
{
    if (status == FFPA_ERR_UNSUPPORTED && strcmp(th_backend(), "cpu") != 0 &&
        strstr(ffpa_last_error(ctx), "has no backward pass")) {
        print_message("# %s: %s\n", call, ffpa_last_error(ctx));
        return;
    }
    th_expect_ok(ctx, status, call);
}

/* ------------------------------------------------------------ tolerances */

double th_tolerance(ffpa_dtype dtype, th_kind kind)
{
    int wide = dtype == FFPA_F32;
    switch (kind) {
    case TH_OUTPUT:
        return wide ? 1e-4 : 1e-2;
    case TH_LSE:
        return wide ? 1e-4 : 1e-3;
    case TH_GRAD:
        return wide ? 2e-4 : 2e-2;
    }
    return 0.0;
}

/* ------------------------------------------------------------ random numbers */

th_rng th_rng_seeded(uint64_t seed)
{
    th_rng rng = {seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull};
    return rng;
}

uint64_t th_rng_next(th_rng *rng)
{
    /* splitmix64 */
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double th_rng_uniform(th_rng *rng, double lo, double hi)
{
    double unit = (double)(th_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    return lo + (hi - lo) * unit;
}

/* ------------------------------------------------------------ tensors */

const char *th_layout_name(th_layout layout)
{
    switch (layout) {
    case TH_BHND:
        return "BHND";
    case TH_BNHD:
        return "BNHD";
    case TH_PADDED:
        return "padded";
    case TH_COLUMNS:
        return "strided head dim";
    }
    return "?";
}

static int64_t offset_of(const ffpa_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d * t->stride[3];
}

void th_tensor_strided(th_tensor *t, ffpa_dtype dtype, const int64_t shape[4],
                       const int64_t stride[4])
{
    memset(t, 0, sizeof *t);
    int64_t extent = 1;
    int empty = 0;
    for (int i = 0; i < 4; ++i) {
        if (shape[i] == 0)
            empty = 1;
        else
            extent += (shape[i] - 1) * stride[i];
    }
    if (empty)
        extent = 0;
    size_t elt = ffpa_dtype_size(dtype);
    t->elems = (size_t)extent + 2 * TH_GUARD;
    t->bytes = t->elems * elt;
    t->host_base = malloc(t->bytes);
    assert_non_null(t->host_base);
    ffpa_context *ctx = th_ctx();
    th_expect_ok(ctx, ffpa_malloc(ctx, &t->dev_base, t->bytes), "ffpa_malloc");
    t->host.dtype = t->dev.dtype = dtype;
    for (int i = 0; i < 4; ++i) {
        t->host.shape[i] = t->dev.shape[i] = shape[i];
        t->host.stride[i] = t->dev.stride[i] = stride[i];
    }
    t->host.data = (char *)t->host_base + TH_GUARD * elt;
    t->dev.data = (char *)t->dev_base + TH_GUARD * elt;
    th_tensor_poison(t);
}

void th_tensor_make(th_tensor *t, ffpa_dtype dtype, th_layout layout, int64_t b, int64_t h,
                    int64_t n, int64_t d)
{
    int64_t shape[4] = {b, h, n, d};
    int64_t stride[4];
    switch (layout) {
    case TH_BNHD:
        stride[3] = 1;
        stride[1] = d;
        stride[2] = h * d;
        stride[0] = n * h * d;
        break;
    case TH_PADDED:
        stride[3] = 1;
        stride[2] = d + 3;
        stride[1] = n * stride[2] + 5;
        stride[0] = h * stride[1] + 7;
        break;
    case TH_COLUMNS:
        stride[3] = 2;
        stride[1] = 2 * d + 1;
        stride[2] = h * stride[1];
        stride[0] = n * stride[2] + 3;
        break;
    default:
        stride[3] = 1;
        stride[2] = d;
        stride[1] = n * d;
        stride[0] = h * n * d;
        break;
    }
    th_tensor_strided(t, dtype, shape, stride);
}

void th_tensor_lse(th_tensor *t, th_layout layout, int64_t b, int64_t h, int64_t n)
{
    int64_t shape[4] = {b, h, n, 1};
    int64_t stride[4];
    switch (layout) {
    case TH_BNHD:
        stride[3] = 1;
        stride[1] = 1;
        stride[2] = h;
        stride[0] = n * h;
        break;
    case TH_PADDED:
        stride[3] = 1;
        stride[2] = 1;
        stride[1] = n + 3;
        stride[0] = h * stride[1] + 2;
        break;
    default:
        stride[3] = 1;
        stride[2] = 1;
        stride[1] = n;
        stride[0] = h * n;
        break;
    }
    th_tensor_strided(t, FFPA_F32, shape, stride);
}

void th_tensor_free(th_tensor *t)
{
    if (t->dev_base)
        ffpa_free(th_ctx(), t->dev_base);
    free(t->host_base);
    memset(t, 0, sizeof *t);
}

void th_tensor_upload(th_tensor *t)
{
    ffpa_context *ctx = th_ctx();
    th_expect_ok(ctx,
                 ffpa_memcpy(ctx, t->dev_base, t->host_base, t->bytes, FFPA_COPY_HOST_TO_DEVICE),
                 "ffpa_memcpy(host to device)");
}

void th_tensor_download(th_tensor *t)
{
    ffpa_context *ctx = th_ctx();
    th_expect_ok(ctx, ffpa_synchronize(ctx), "ffpa_synchronize");
    th_expect_ok(ctx,
                 ffpa_memcpy(ctx, t->host_base, t->dev_base, t->bytes, FFPA_COPY_DEVICE_TO_HOST),
                 "ffpa_memcpy(device to host)");
}

void th_tensor_fill_bytes(th_tensor *t, int byte)
{
    memset(t->host_base, byte, t->bytes);
    th_tensor_upload(t);
}

void th_tensor_poison(th_tensor *t)
{
    th_tensor_fill_bytes(t, 0xFF);
}

void th_tensor_set(th_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, double value)
{
    ffpa_store_f32(t->host.data, t->host.dtype, offset_of(&t->host, a, b, c, d), (float)value);
}

void th_tensor_random(th_tensor *t, th_rng *rng, double lo, double hi, int integers)
{
    memset(t->host_base, 0xFF, t->bytes);
    const ffpa_tensor *h = &t->host;
    for (int64_t a = 0; a < h->shape[0]; ++a)
        for (int64_t b = 0; b < h->shape[1]; ++b)
            for (int64_t c = 0; c < h->shape[2]; ++c)
                for (int64_t d = 0; d < h->shape[3]; ++d) {
                    double value = th_rng_uniform(rng, lo, hi);
                    if (integers)
                        value = nearbyint(value);
                    th_tensor_set(t, a, b, c, d, value);
                }
    th_tensor_upload(t);
}

unsigned char *th_tensor_snapshot(th_tensor *t)
{
    th_tensor_download(t);
    unsigned char *copy = malloc(t->bytes);
    assert_non_null(copy);
    memcpy(copy, t->host_base, t->bytes);
    return copy;
}

void th_expect_unchanged(const char *what, th_tensor *t, const unsigned char *snapshot)
{
    th_tensor_download(t);
    const unsigned char *now = t->host_base;
    for (size_t i = 0; i < t->bytes; ++i)
        if (now[i] != snapshot[i])
            fail_msg("%s: byte %zu of its buffer changed (0x%02x -> 0x%02x); the buffer "
                     "must be left untouched",
                     what, i, snapshot[i], now[i]);
}

/* ------------------------------------------------------------ checks */

static int64_t ref_index(const int64_t shape[4], int64_t a, int64_t b, int64_t c, int64_t d)
{
    return ((a * shape[1] + b) * shape[2] + c) * shape[3] + d;
}

double th_check(const char *what, th_tensor *t, const double *ref, const double *mag,
                const int64_t ref_shape[4], th_kind kind, double tol_factor)
{
    th_tensor_download(t);
    const ffpa_tensor *h = &t->host;
    const int64_t *shape = ref_shape ? ref_shape : h->shape;
    int64_t count = shape[0] * shape[1] * shape[2] * shape[3];
    double max_ref = 0.0;
    for (int64_t e = 0; e < count; ++e)
        if (isfinite(ref[e]) && fabs(ref[e]) > max_ref)
            max_ref = fabs(ref[e]);
    double tol = th_tolerance(h->dtype, kind) * (tol_factor > 0 ? tol_factor : 1.0);
    /* Underflow: values below the dtype's normal range (f32 intermediates may be
     * flushed to zero on GPUs, fp16 stores subnormals of 2^-24 steps) carry an
     * absolute error no relative bound covers; it matters only for gradients that
     * cancel to ~1e-30 and below. */
    double max_mag = 0.0;
    for (int64_t e = 0; mag && e < count; ++e)
        if (mag[e] > max_mag)
            max_mag = mag[e];
    double floor = (h->dtype == FFPA_F16 ? ldexp(1.0, -24) : ldexp(1.0, -126)) +
                   1e-30 * fmax(max_ref, max_mag);

    /* Which buffer elements the view covers: everything else must still be 0xFF. */
    unsigned char *covered = calloc(t->elems, 1);
    assert_non_null(covered);
    for (int64_t a = 0; a < h->shape[0]; ++a)
        for (int64_t b = 0; b < h->shape[1]; ++b)
            for (int64_t c = 0; c < h->shape[2]; ++c)
                for (int64_t d = 0; d < h->shape[3]; ++d)
                    covered[TH_GUARD + offset_of(h, a, b, c, d)] = 1;

    int bad = 0;
    double worst = 0.0;
    char first[6][200];
    for (int64_t a = 0; a < shape[0]; ++a)
        for (int64_t b = 0; b < shape[1]; ++b)
            for (int64_t c = 0; c < shape[2]; ++c)
                for (int64_t d = 0; d < shape[3]; ++d) {
                    int64_t r = ref_index(shape, a, b, c, d);
                    double want = ref[r];
                    double got = ffpa_load_f32(h->data, h->dtype, offset_of(h, a, b, c, d));
                    int ok;
                    if (isnan(got))
                        ok = 0;
                    else if (isinf(want))
                        ok = got == want;
                    else if (kind == TH_LSE)
                        ok = fabs(got - want) <= tol * fmax(1.0, fabs(want));
                    else if (kind == TH_OUTPUT && want == 0.0)
                        ok = got == 0.0; /* masked row */
                    else if (kind == TH_GRAD && mag && mag[r] == 0.0)
                        ok = got == 0.0; /* no contributing term */
                    else
                        ok = isfinite(got) &&
                             fabs(got - want) <= tol * fmax(max_ref, mag ? mag[r] : 0.0) + floor;
                    if (isfinite(got) && isfinite(want) && fabs(got - want) > worst)
                        worst = fabs(got - want);
                    if (!ok) {
                        if (bad < 6)
                            snprintf(first[bad], sizeof first[bad],
                                     "  [%lld,%lld,%lld,%lld] got %.9g want %.9g%s%.3g\n",
                                     (long long)a, (long long)b, (long long)c, (long long)d,
                                     got, want, mag ? " magnitude " : "", mag ? mag[r] : 0.0);
                        ++bad;
                    }
                }
    size_t elt = ffpa_dtype_size(h->dtype);
    const unsigned char *bytes = t->host_base;
    int64_t stray = -1;
    for (size_t e = 0; e < t->elems && stray < 0; ++e)
        if (!covered[e])
            for (size_t k = 0; k < elt; ++k)
                if (bytes[e * elt + k] != 0xFF) {
                    stray = (int64_t)e - TH_GUARD;
                    break;
                }
    free(covered);
    if (bad) {
        for (int i = 0; i < bad && i < 6; ++i)
            print_message("# %s", first[i]);
        fail_msg("%s (%s, backend %s): %d of %lld elements wrong; tolerance %.3g x "
                 "max(max|ref| %.6g%s); largest finite error %.3g",
                 what, ffpa_dtype_name(h->dtype), th_backend(), bad, (long long)count, tol,
                 max_ref, mag ? ", magnitude" : "", worst);
    }
    if (stray >= 0)
        fail_msg("%s: element at buffer offset %lld lies outside the view but was written",
                 what, (long long)stray);
    return worst;
}

int th_message_names(const char *message, const char *const *names)
{
    if (!message)
        return 0;
    for (; *names; ++names) {
        size_t len = strlen(*names);
        if (strncmp(message, *names, len) == 0 && message[len] == ':')
            return 1;
    }
    return 0;
}
