/*
 * ffpa_merge_partials on the backend named by FFPA_TEST_BACKEND (default
 * cpu):
 *   - attention over key ranges (one of them empty), merged, against the
 *     float64 oracle of the attention over all keys (what context
 *     parallelism and split-KV rely on);
 *   - random parts of mixed dtypes and layouts, with -inf LSEs (a part's O
 *     there is NaN: it must not be read) and rows where every part is
 *     -inf, against a float64 merge; every output dtype;
 *   - in place (o and lse are part 0's, the accumulator of a ring);
 *   - empty rows and Dv = 0;
 *   - every bad argument: a status, a message naming it, nothing written.
 * Outputs are poisoned before each call and every element is checked.
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

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* t with its rows [start, start + len) along dim 2 (a view of the same memory). */
static ffpa_tensor rows_of(const ffpa_tensor *t, int64_t start, int64_t len)
{
    ffpa_tensor v = *t;
    v.data = (char *)t->data + start * t->stride[2] * (int64_t)ffpa_dtype_size(t->dtype);
    v.shape[2] = len;
    return v;
}

/* ------------------------------------------------------------ attention over key ranges */

static void run_key_split(const int64_t *bounds, int parts, ffpa_dtype part_dtype, uint64_t seed)
{
    const ffpa_dtype dt = th_fixture_dtype();
    const int64_t b = 2, hq = 4, hkv = 2, nq = 37, dqk = 40, dv = 24, nkv = bounds[parts];
    th_rng rng = th_rng_seeded(seed);
    th_tensor q, k, v, o, lse, po[FFPA_MERGE_MAX_PARTS], pl[FFPA_MERGE_MAX_PARTS];
    th_tensor_make(&q, dt, TH_BHND, b, hq, nq, dqk);
    th_tensor_make(&k, dt, TH_BNHD, b, hkv, nkv, dqk);
    th_tensor_make(&v, dt, TH_BHND, b, hkv, nkv, dv); /* GPU kernels take 16-byte aligned rows */
    th_tensor_make(&o, dt, TH_BNHD, b, hq, nq, dv);
    th_tensor_lse(&lse, TH_BHND, b, hq, nq);
    th_tensor_random(&q, &rng, -2, 2, 0);
    th_tensor_random(&k, &rng, -2, 2, 0);
    th_tensor_random(&v, &rng, -1, 1, 0);
    ffpa_context *ctx = th_ctx();
    ffpa_tensor od[FFPA_MERGE_MAX_PARTS], ld[FFPA_MERGE_MAX_PARTS];
    for (int i = 0; i < parts; ++i) {
        /* The forward writes q's dtype; a wider part dtype gets a copy in it. */
        th_tensor_make(&po[i], dt, i % 2 ? TH_BNHD : TH_BHND, b, hq, nq, dv);
        th_tensor_lse(&pl[i], i % 2 ? TH_PADDED : TH_BHND, b, hq, nq);
        th_tensor_poison(&po[i]);
        th_tensor_poison(&pl[i]);
        const ffpa_tensor kr = rows_of(&k.dev, bounds[i], bounds[i + 1] - bounds[i]);
        const ffpa_tensor vr = rows_of(&v.dev, bounds[i], bounds[i + 1] - bounds[i]);
        th_expect_ok(ctx, ffpa_forward(ctx, &q.dev, &kr, &vr, &po[i].dev, &pl[i].dev, NULL), "ffpa_forward");
        od[i] = po[i].dev;
        ld[i] = pl[i].dev;
    }
    th_tensor wide[FFPA_MERGE_MAX_PARTS];
    double *dense = malloc(sizeof(double) * (size_t)(b * hq * nq * dv));
    if (part_dtype != dt)
        for (int i = 0; i < parts; ++i) { /* the part's values in part_dtype, converted on the host */
            th_tensor_download(&po[i]);
            oracle_read_tensor(&po[i].host, dense);
            th_tensor_make(&wide[i], part_dtype, TH_BHND, b, hq, nq, dv);
            for (int64_t e = 0; e < b * hq * nq * dv; ++e)
                th_tensor_set(&wide[i], e / (hq * nq * dv), e / (nq * dv) % hq, e / dv % nq, e % dv, dense[e]);
            th_tensor_upload(&wide[i]);
            od[i] = wide[i].dev;
        }
    free(dense);
    th_tensor_poison(&o);
    th_tensor_poison(&lse);
    th_expect_ok(ctx, ffpa_merge_partials(ctx, parts, od, ld, &o.dev, &lse.dev), "ffpa_merge_partials");

    oracle_problem p;
    assert_int_equal(oracle_problem_init(&p, &q.host, &k.host, &v.host, NULL), 0);
    double *o_ref = malloc(sizeof(double) * (size_t)oracle_o_elems(&p));
    double *lse_ref = malloc(sizeof(double) * (size_t)oracle_lse_elems(&p));
    oracle_forward(&p, o_ref, lse_ref);
    /* Each part's O was rounded to the dtype before the merge: one more rounding than a forward. */
    th_check("o (merged key ranges)", &o, o_ref, NULL, NULL, TH_OUTPUT, 2.0);
    th_check("lse (merged key ranges)", &lse, lse_ref, NULL, NULL, TH_LSE, 1.0);
    free(o_ref);
    free(lse_ref);
    oracle_problem_free(&p);
    for (int i = 0; i < parts; ++i) {
        th_tensor_free(&po[i]);
        th_tensor_free(&pl[i]);
        if (part_dtype != dt)
            th_tensor_free(&wide[i]);
    }
    th_tensor_free(&q);
    th_tensor_free(&k);
    th_tensor_free(&v);
    th_tensor_free(&o);
    th_tensor_free(&lse);
}

static void test_key_ranges_merged_equal_full_attention(void **state)
{
    (void)state;
    static const int64_t two[] = {0, 40, 101};
    static const int64_t five_one_empty[] = {0, 17, 17, 50, 99, 131};
    static const int64_t one[] = {0, 77};
    static const int64_t sixteen[] = {0, 3, 9, 10, 22, 23, 40, 41, 41, 60, 61, 70, 85, 86, 90, 99, 130};
    run_key_split(two, 2, th_fixture_dtype(), 1);
    run_key_split(five_one_empty, 5, th_fixture_dtype(), 2);
    run_key_split(one, 1, th_fixture_dtype(), 3);
    run_key_split(sixteen, 16, th_fixture_dtype(), 4);
    run_key_split(two, 2, FFPA_F32, 5); /* fp32 parts, as a ring's accumulator */
}

/* ------------------------------------------------------------ random parts */

typedef struct parts_case {
    int parts;
    int64_t b, h, n, dv;
    ffpa_dtype out_dtype;
    int in_place; /* o and lse are part 0's (part 0 then in out_dtype) */
    int with_lse;
    uint64_t seed;
} parts_case;

static const ffpa_dtype kDtypes[3] = {FFPA_F16, FFPA_BF16, FFPA_F32};
static const th_layout kLayouts[3] = {TH_BHND, TH_BNHD, TH_PADDED};

static void run_parts(const parts_case *c)
{
    th_rng rng = th_rng_seeded(c->seed);
    const int64_t rows = c->b * c->h * c->n;
    th_tensor po[FFPA_MERGE_MAX_PARTS], pl[FFPA_MERGE_MAX_PARTS], o, lse;
    ffpa_tensor od[FFPA_MERGE_MAX_PARTS], ld[FFPA_MERGE_MAX_PARTS];
    double *lse_in = malloc(sizeof(double) * (size_t)(rows * c->parts + 1));
    double *o_in = malloc(sizeof(double) * (size_t)(rows * c->dv * c->parts + 1));
    for (int i = 0; i < c->parts; ++i) {
        const ffpa_dtype dt = c->in_place && i == 0 ? c->out_dtype : kDtypes[(i + c->seed) % 3];
        th_tensor_make(&po[i], dt, kLayouts[i % 3], c->b, c->h, c->n, c->dv);
        th_tensor_lse(&pl[i], kLayouts[(i + 1) % 3], c->b, c->h, c->n);
        th_tensor_poison(&po[i]); /* NaN where a part is -inf: never read */
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t x = r / (c->h * c->n), y = r / c->n % c->h, z = r % c->n;
            /* Every 5th row: all parts -inf; part i -inf on every (i + 3)-th row. */
            const int masked = r % 5 == 4 || (r + i) % (i + 3) == 0;
            const double l = masked ? -INFINITY : th_rng_uniform(&rng, -30, 30);
            th_tensor_set(&pl[i], x, y, z, 0, l);
            lse_in[r * c->parts + i] = l;
            for (int64_t d = 0; d < c->dv; ++d) {
                double val = th_rng_uniform(&rng, -1, 1);
                if (dt != FFPA_F32) { /* the value as stored */
                    th_tensor_set(&po[i], x, y, z, d, val);
                    ffpa_tensor e = po[i].host;
                    e.data = (char *)e.data + (x * e.stride[0] + y * e.stride[1] + z * e.stride[2] + d * e.stride[3]) *
                                                  (int64_t)ffpa_dtype_size(dt);
                    e.shape[0] = e.shape[1] = e.shape[2] = e.shape[3] = 1;
                    oracle_read_tensor(&e, &val);
                }
                th_tensor_set(&po[i], x, y, z, d, masked ? NAN : val);
                o_in[(r * c->parts + i) * c->dv + d] = val;
            }
        }
        th_tensor_upload(&po[i]);
        th_tensor_upload(&pl[i]);
        od[i] = po[i].dev;
        ld[i] = pl[i].dev;
    }
    double *o_ref = calloc((size_t)(rows * c->dv + 1), sizeof(double));
    double *lse_ref = malloc(sizeof(double) * (size_t)(rows + 1));
    for (int64_t r = 0; r < rows; ++r) {
        double m = -INFINITY, sum = 0;
        for (int i = 0; i < c->parts; ++i)
            m = fmax(m, lse_in[r * c->parts + i]);
        for (int i = 0; i < c->parts; ++i)
            sum += lse_in[r * c->parts + i] == -INFINITY ? 0 : exp(lse_in[r * c->parts + i] - m);
        lse_ref[r] = sum > 0 ? m + log(sum) : -INFINITY;
        for (int i = 0; i < c->parts && sum > 0; ++i) {
            const double l = lse_in[r * c->parts + i];
            if (l != -INFINITY)
                for (int64_t d = 0; d < c->dv; ++d)
                    o_ref[r * c->dv + d] += exp(l - lse_ref[r]) * o_in[(r * c->parts + i) * c->dv + d];
        }
    }
    ffpa_context *ctx = th_ctx();
    th_tensor *out = &o, *lout = &lse;
    if (c->in_place) {
        out = &po[0];
        lout = &pl[0];
    } else {
        th_tensor_make(&o, c->out_dtype, TH_BNHD, c->b, c->h, c->n, c->dv);
        th_tensor_lse(&lse, TH_PADDED, c->b, c->h, c->n);
        th_tensor_poison(&o);
        th_tensor_poison(&lse);
    }
    th_expect_ok(ctx, ffpa_merge_partials(ctx, c->parts, od, ld, &out->dev, c->with_lse ? &lout->dev : NULL),
                 "ffpa_merge_partials");
    th_check("o (merged parts)", out, o_ref, NULL, NULL, TH_OUTPUT, 1.0);
    if (c->with_lse)
        th_check("lse (merged parts)", lout, lse_ref, NULL, NULL, TH_LSE, 1.0);
    for (int i = 0; i < c->parts; ++i) {
        th_tensor_free(&po[i]);
        th_tensor_free(&pl[i]);
    }
    if (!c->in_place) {
        th_tensor_free(&o);
        th_tensor_free(&lse);
    }
    free(o_ref);
    free(lse_ref);
    free(o_in);
    free(lse_in);
}

static void test_random_parts_every_dtype(void **state)
{
    (void)state;
    for (int od = 0; od < 3; ++od) {
        const parts_case cases[] = {
            {2, 2, 3, 29, 40, kDtypes[od], 0, 1, 10u + (uint64_t)od},
            {5, 1, 2, 17, 520, kDtypes[od], 0, 1, 20u + (uint64_t)od},
            {16, 1, 1, 11, 72, kDtypes[od], 0, 0, 30u + (uint64_t)od},
            {1, 3, 1, 7, 8, kDtypes[od], 0, 1, 40u + (uint64_t)od},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
            run_parts(&cases[i]);
    }
}

static void test_in_place_accumulator(void **state)
{
    (void)state;
    const parts_case f32 = {3, 2, 2, 33, 64, FFPA_F32, 1, 1, 50};
    const parts_case bf16 = {2, 1, 4, 9, 136, FFPA_BF16, 1, 1, 51};
    run_parts(&f32);
    run_parts(&bf16);
}

static void test_no_rows_and_no_columns(void **state)
{
    (void)state;
    const parts_case no_columns = {3, 2, 2, 5, 0, FFPA_F32, 0, 1, 60};
    run_parts(&no_columns);
    /* No row: nothing written (the buffers keep their poison). */
    ffpa_context *ctx = th_ctx();
    th_tensor po[2], pl[2], o, lse;
    ffpa_tensor od[2], ld[2];
    for (int i = 0; i < 2; ++i) {
        th_tensor_make(&po[i], FFPA_F32, TH_BHND, 2, 0, 5, 8);
        th_tensor_lse(&pl[i], TH_BHND, 2, 0, 5);
        od[i] = po[i].dev;
        ld[i] = pl[i].dev;
    }
    th_tensor_make(&o, FFPA_BF16, TH_BHND, 2, 0, 5, 8);
    th_tensor_lse(&lse, TH_BHND, 2, 0, 5);
    th_tensor_poison(&o);
    unsigned char *snap = th_tensor_snapshot(&o);
    th_expect_ok(ctx, ffpa_merge_partials(ctx, 2, od, ld, &o.dev, &lse.dev), "ffpa_merge_partials (no rows)");
    th_expect_unchanged("o (no rows)", &o, snap);
    free(snap);
    for (int i = 0; i < 2; ++i) {
        th_tensor_free(&po[i]);
        th_tensor_free(&pl[i]);
    }
    th_tensor_free(&o);
    th_tensor_free(&lse);
}

/* ------------------------------------------------------------ bad arguments */

typedef struct bad_fixture {
    th_tensor po[3], pl[3], o, lse;
    ffpa_tensor od[3], ld[3];
} bad_fixture;

static void bad_setup(bad_fixture *f)
{
    th_rng rng = th_rng_seeded(70);
    for (int i = 0; i < 3; ++i) {
        th_tensor_make(&f->po[i], FFPA_F32, TH_BHND, 2, 3, 7, 16);
        th_tensor_lse(&f->pl[i], TH_BHND, 2, 3, 7);
        th_tensor_random(&f->po[i], &rng, -1, 1, 0);
        th_tensor_random(&f->pl[i], &rng, -3, 3, 0);
        f->od[i] = f->po[i].dev;
        f->ld[i] = f->pl[i].dev;
    }
    th_tensor_make(&f->o, FFPA_F32, TH_BHND, 2, 3, 7, 16);
    th_tensor_lse(&f->lse, TH_BHND, 2, 3, 7);
    th_tensor_fill_bytes(&f->o, 0x5A);
    th_tensor_fill_bytes(&f->lse, 0x5A);
}

static void bad_teardown(bad_fixture *f)
{
    for (int i = 0; i < 3; ++i) {
        th_tensor_free(&f->po[i]);
        th_tensor_free(&f->pl[i]);
    }
    th_tensor_free(&f->o);
    th_tensor_free(&f->lse);
}

/* The call is refused as INVALID_ARGUMENT naming `names`, and writes nothing. */
static void expect_refused(bad_fixture *f, int parts, const ffpa_tensor *od, const ffpa_tensor *ld,
                           const ffpa_tensor *o, const ffpa_tensor *lse, const char *const *names)
{
    ffpa_context *ctx = th_ctx();
    unsigned char *so = th_tensor_snapshot(&f->o), *sl = th_tensor_snapshot(&f->lse);
    unsigned char *sp = th_tensor_snapshot(&f->po[0]), *spl = th_tensor_snapshot(&f->pl[0]);
    const ffpa_status st = ffpa_merge_partials(ctx, parts, od, ld, o, lse);
    const char *message = ffpa_last_error(ctx);
    if (st != FFPA_ERR_INVALID_ARGUMENT || !th_message_names(message, names))
        fail_msg("expected INVALID_ARGUMENT naming %s, got %d: %s", names[0], (int)st, message);
    th_expect_unchanged("o", &f->o, so);
    th_expect_unchanged("lse", &f->lse, sl);
    th_expect_unchanged("o_parts[0]", &f->po[0], sp);
    th_expect_unchanged("lse_parts[0]", &f->pl[0], spl);
    free(so);
    free(sl);
    free(sp);
    free(spl);
}

static void test_bad_arguments_write_nothing(void **state)
{
    (void)state;
    bad_fixture f;
    bad_setup(&f);
    ffpa_tensor od[3], ld[3], o, lse;
    const ffpa_tensor *O = &f.o.dev, *L = &f.lse.dev;

    expect_refused(&f, 0, f.od, f.ld, O, L, NAMES("parts"));
    expect_refused(&f, FFPA_MERGE_MAX_PARTS + 1, f.od, f.ld, O, L, NAMES("parts"));
    expect_refused(&f, 3, NULL, f.ld, O, L, NAMES("o_parts"));
    expect_refused(&f, 3, f.od, NULL, O, L, NAMES("lse_parts"));
    expect_refused(&f, 3, f.od, f.ld, NULL, L, NAMES("o"));

    memcpy(od, f.od, sizeof od);
    od[2].shape[3] = 8; /* head dim differs from part 0's */
    expect_refused(&f, 3, od, f.ld, O, L, NAMES("o_parts[2]"));
    memcpy(od, f.od, sizeof od);
    od[1].dtype = (ffpa_dtype)7;
    expect_refused(&f, 3, od, f.ld, O, L, NAMES("o_parts[1]"));
    memcpy(od, f.od, sizeof od);
    od[1].data = NULL;
    expect_refused(&f, 3, od, f.ld, O, L, NAMES("o_parts[1]"));

    memcpy(ld, f.ld, sizeof ld);
    ld[1].dtype = FFPA_F16;
    expect_refused(&f, 3, f.od, ld, O, L, NAMES("lse_parts[1]"));
    memcpy(ld, f.ld, sizeof ld);
    ld[0].shape[2] = 6;
    expect_refused(&f, 3, f.od, ld, O, L, NAMES("lse_parts[0]"));
    memcpy(ld, f.ld, sizeof ld);
    ld[2].shape[3] = 2;
    expect_refused(&f, 3, f.od, ld, O, L, NAMES("lse_parts[2]"));

    o = f.o.dev;
    o.shape[1] = 2;
    expect_refused(&f, 3, f.od, f.ld, &o, L, NAMES("o"));
    o = f.o.dev;
    o.stride[2] = 1; /* rows overlap each other */
    expect_refused(&f, 3, f.od, f.ld, &o, L, NAMES("o"));
    lse = f.lse.dev;
    lse.dtype = FFPA_BF16;
    expect_refused(&f, 3, f.od, f.ld, O, &lse, NAMES("lse"));

    /* Overlaps that are not the exact in-place alias. */
    o = f.od[1];
    o.data = (char *)f.od[1].data + sizeof(float); /* part 1's memory, shifted by one element */
    expect_refused(&f, 3, f.od, f.ld, &o, L, NAMES("o"));
    o = f.od[0];
    o.dtype = FFPA_BF16; /* part 0's memory read as another dtype */
    expect_refused(&f, 3, f.od, f.ld, &o, L, NAMES("o"));
    lse = f.ld[2];
    lse.data = (char *)f.ld[2].data + sizeof(float);
    expect_refused(&f, 3, f.od, f.ld, O, &lse, NAMES("lse"));
    lse = f.o.dev; /* lse inside o */
    lse.dtype = FFPA_F32;
    lse.shape[3] = 1;
    expect_refused(&f, 3, f.od, f.ld, O, &lse, NAMES("lse"));

    /* NULL context. */
    assert_int_equal(ffpa_merge_partials(NULL, 3, f.od, f.ld, O, L), FFPA_ERR_INVALID_ARGUMENT);
    bad_teardown(&f);
}

int main(void)
{
    int unavailable = th_backend_unavailable_exit();
    if (unavailable >= 0)
        return unavailable;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_ranges_merged_equal_full_attention),
        cmocka_unit_test(test_random_parts_every_dtype),
        cmocka_unit_test(test_in_place_accumulator),
        cmocka_unit_test(test_no_rows_and_no_columns),
        cmocka_unit_test(test_bad_arguments_write_nothing),
    };
    return th_exit_code(cmocka_run_group_tests_name("merge", tests, NULL, NULL),
                        (int)(sizeof tests / sizeof tests[0]));
}
