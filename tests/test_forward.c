/*
 * Forward against the float64 oracle on the backend named by
 * FFPA_TEST_BACKEND (default cpu): every option alone and combined, awkward
 * shapes, every dtype and layout, masked rows and large scores.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "attn_case.h"
#include "harness.h"

static const ffpa_dtype all_dtypes[] = {FFPA_F16, FFPA_BF16, FFPA_F32};

/* ------------------------------------------------------------ dtypes, layouts */

static void test_dtypes_basic(void **state)
{
    (void)state;
    for (int i = 0; i < 3; ++i) {
        attn_case c = attn_case_default(all_dtypes[i], 65, 64);
        c.batch = 2;
        attn_run_forward(&c);
    }
}

static void test_layouts(void **state)
{
    (void)state;
    const th_layout layouts[] = {TH_BHND, TH_BNHD, TH_PADDED};
    for (int d = 0; d < 3; ++d)
        for (int l = 0; l < 3; ++l) {
            attn_case c = attn_case_default(all_dtypes[d], 33, 40);
            c.batch = 2;
            c.hq = 4;
            c.layout = c.kv_layout = layouts[l];
            attn_run_forward(&c);
        }
}

static void test_mixed_layouts(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 17, 72);
    c.batch = 2;
    c.layout = TH_BNHD;
    c.kv_layout = TH_PADDED;
    attn_run_forward(&c);
    c.layout = TH_PADDED;
    c.kv_layout = TH_BHND;
    attn_run_forward(&c);
}

/* A head dim with stride 2 (a view of every other column): the cpu and
 * opencl backends take it, GPU kernels refuse it by name (counted). */
static void test_head_dim_strides(void **state)
{
    (void)state;
    attn_case c = attn_case_default(th_fixture_dtype(), 37, 40);
    c.batch = 2;
    c.hq = 4;
    c.hkv = 2;
    c.layout = c.kv_layout = TH_COLUMNS;
    attn_run_forward(&c);
    c.layout = TH_BHND;
    c.causal = 1;
    attn_run_forward(&c);
}

static void test_without_lse(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_F16, 65, 64);
    c.with_lse = 0;
    attn_run_forward(&c);
}

/* ------------------------------------------------------------ shapes */

static void test_seqlen_awkward(void **state)
{
    (void)state;
    const int64_t lengths[] = {1, 7, 65, 129};
    for (int i = 0; i < 4; ++i) {
        attn_case c = attn_case_default(FFPA_BF16, lengths[i], 64);
        attn_run_forward(&c);
    }
}

static void test_head_dims(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 8, 40, 72, 320, 512, 576, 1000, 1024};
    for (int i = 0; i < 9; ++i) {
        attn_case c = attn_case_default(FFPA_F16, dims[i] > 256 ? 33 : 65, dims[i]);
        attn_run_forward(&c);
    }
}

static void test_head_dims_bf16_f32(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 40, 320, 1000};
    for (int i = 0; i < 4; ++i) {
        attn_case c = attn_case_default(FFPA_BF16, 29, dims[i]);
        attn_run_forward(&c);
        c.dtype = c.bias_dtype = FFPA_F32;
        attn_run_forward(&c);
    }
}

static void test_d1024_n128(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_F16, 128, 1024);
    attn_run_forward(&c);
    c = attn_case_default(FFPA_BF16, 65, 1024);
    c.causal = 1;
    c.nkv = 128;
    attn_run_forward(&c);
}

static void test_mla_dqk576_dv512(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 65, 576);
    c.dv = 512;
    attn_run_forward(&c);
    c.dtype = FFPA_F16;
    c.dqk = 72;
    c.dv = 40;
    c.nq = 7;
    attn_run_forward(&c);
}

static void test_cross_attention(void **state)
{
    (void)state;
    const int64_t pairs[][2] = {{7, 65}, {65, 7}, {1, 129}, {129, 1}, {33, 200}};
    for (int i = 0; i < 5; ++i) {
        attn_case c = attn_case_default(FFPA_F16, pairs[i][0], 64);
        c.nkv = pairs[i][1];
        attn_run_forward(&c);
    }
}

static void test_decode_large_d(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 1, 512);
    c.nkv = 129;
    c.batch = 2;
    c.hq = 8;
    c.hkv = 1;
    attn_run_forward(&c);
}

static void test_gqa_and_mqa(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_F16, 33, 64);
    c.hq = 8;
    c.hkv = 2; /* groups of 4 */
    attn_run_forward(&c);
    c.hq = 32;
    c.hkv = 1; /* MQA */
    c.nq = 17;
    attn_run_forward(&c);
    c.dtype = FFPA_F32;
    c.hq = 4;
    c.hkv = 4;
    attn_run_forward(&c);
}

static void test_batch(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 17, 64);
    c.batch = 3;
    c.nkv = 40;
    attn_run_forward(&c);
}

/* ------------------------------------------------------------ options */

static void test_scale(void **state)
{
    (void)state;
    const float scales[] = {0.3f, 1.0f, -0.5f, 0.0f};
    for (int i = 0; i < 4; ++i) {
        attn_case c = attn_case_default(FFPA_F32, 33, 64);
        c.scale = scales[i];
        attn_run_forward(&c);
        /* On the Hopper kernels: D = 64 (three consumers), 128 (the plain
         * kernel; with a bias and a softcap the variant one) and 512 (a
         * cluster), each with a scale of 0 and < 0 as well. */
        const int64_t dims[] = {64, 128, 512};
        for (int d = 0; d < 3; ++d) {
            attn_case h = attn_case_default(FFPA_BF16, 70, dims[d]);
            h.nkv = 90;
            h.scale = scales[i];
            h.causal = 1;
            attn_run_forward(&h);
            h.bias = 1;
            h.softcap = 20.0f;
            attn_run_forward(&h);
        }
    }
}

static void test_causal(void **state)
{
    (void)state;
    const int64_t pairs[][2] = {{65, 65}, {7, 65}, {1, 33}, {33, 200}};
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 4; ++i) {
            attn_case c = attn_case_default(all_dtypes[d], pairs[i][0], 64);
            c.nkv = pairs[i][1];
            c.causal = 1;
            attn_run_forward(&c);
        }
}

/* Nq > Nkv with bottom-right alignment: the first Nq - Nkv rows see nothing. */
static void test_causal_masked_rows(void **state)
{
    (void)state;
    const int64_t pairs[][2] = {{65, 7}, {129, 1}, {40, 33}};
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 3; ++i) {
            attn_case c = attn_case_default(all_dtypes[d], pairs[i][0], 72);
            c.nkv = pairs[i][1];
            c.causal = 1;
            attn_run_forward(&c);
        }
}

static void test_bias_full(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 33, 64);
        c.batch = 2;
        c.nkv = 47;
        c.bias = 1;
        attn_run_forward(&c);
    }
}

static void test_bias_other_dtype(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 33, 64);
    c.bias = 1;
    c.bias_dtype = FFPA_F32;
    attn_run_forward(&c);
    c.dtype = FFPA_F32;
    c.bias_dtype = FFPA_F16;
    attn_run_forward(&c);
}

static void test_bias_broadcast_size1(void **state)
{
    (void)state;
    /* Every subset of {B, H, Nq, Nkv} stored with size 1. */
    for (int mask = 1; mask < 16; ++mask) {
        attn_case c = attn_case_default(FFPA_F16, 17, 40);
        c.batch = 2;
        c.hq = 4;
        c.hkv = 2;
        c.nkv = 23;
        c.bias = 1;
        for (int d = 0; d < 4; ++d)
            c.bias_size1[d] = (mask >> d) & 1;
        c.seed = 100 + (uint64_t)mask;
        attn_run_forward(&c);
    }
}

static void test_bias_broadcast_stride0(void **state)
{
    (void)state;
    for (int mask = 1; mask < 16; ++mask) {
        attn_case c = attn_case_default(FFPA_BF16, 17, 40);
        c.batch = 2;
        c.hq = 4;
        c.nkv = 23;
        c.bias = 1;
        for (int d = 0; d < 4; ++d)
            c.bias_stride0[d] = (mask >> d) & 1;
        c.seed = 200 + (uint64_t)mask;
        attn_run_forward(&c);
    }
}

/* Bias rows of -inf: O = 0 and LSE = -inf, never NaN; scattered -inf entries. */
static void test_bias_inf_rows(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 33, 64);
        c.batch = 2;
        c.bias = 1;
        c.bias_inf_rows = 1;
        attn_run_forward(&c);
        c.causal = 1;
        c.nkv = 20;
        attn_run_forward(&c);
    }
}

static void test_dropout(void **state)
{
    (void)state;
    const float rates[] = {0.1f, 0.5f, 0.9f};
    for (int i = 0; i < 3; ++i) {
        attn_case c = attn_case_default(i == 2 ? FFPA_F32 : FFPA_F16, 33, 64);
        c.batch = 2;
        c.hq = 4;
        c.nkv = 45;
        c.dropout_p = rates[i];
        c.dropout_seed = 0x0123456789ABCDEFull + (uint64_t)i;
        c.dropout_offset = 7 * (uint64_t)i;
        attn_run_forward(&c);
    }
}

static void test_dropout_large_d(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 33, 576);
    c.dv = 512;
    c.dropout_p = 0.2f;
    attn_run_forward(&c);
}

/* Scores around 1e4 (integer q, k so fp32 computes them exactly): nothing may
 * overflow. The softmax is then nearly one-hot and exp() of scores of that
 * size amplifies any fp32 rounding of the scaled score by ~1e4 * 2^-24, so the
 * tolerance is 20x the baseline. */
static void test_large_scores(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 33, 16);
        c.scale = 1.0f;
        c.integer_qk = 1;
        c.qk_range = 64.0;
        c.tol_factor = 20.0;
        attn_run_forward(&c);
        c.causal = 1;
        c.nq = 40;
        attn_run_forward(&c);
    }
    attn_case c = attn_case_default(FFPA_BF16, 17, 320);
    c.scale = 1.0f;
    c.integer_qk = 1;
    c.qk_range = 8.0;
    c.tol_factor = 20.0;
    attn_run_forward(&c);
}

/* ------------------------------------------------------------ varlen */

static attn_case varlen_case(ffpa_dtype dtype, int64_t d)
{
    attn_case c = attn_case_default(dtype, 0, d);
    c.nseq = 4;
    const int32_t lq[] = {5, 0, 33, 17}, lk[] = {5, 0, 33, 17};
    for (int s = 0; s < 4; ++s) {
        c.lens_q[s] = lq[s];
        c.lens_k[s] = lk[s];
    }
    return c;
}

static void test_varlen(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = varlen_case(all_dtypes[d], 64);
        attn_run_forward(&c);
        c.causal = 1;
        attn_run_forward(&c);
    }
}

static void test_varlen_cross(void **state)
{
    (void)state;
    attn_case c = varlen_case(FFPA_BF16, 40);
    c.nseq = 5;
    const int32_t lq[] = {5, 0, 33, 17, 4}, lk[] = {7, 3, 20, 17, 0};
    for (int s = 0; s < 5; ++s) {
        c.lens_q[s] = lq[s];
        c.lens_k[s] = lk[s];
    }
    attn_run_forward(&c);
    c.causal = 1; /* sequence 2 has 13 masked rows, sequence 4 sees no key at all */
    attn_run_forward(&c);
    c.layout = c.kv_layout = TH_BNHD;
    attn_run_forward(&c);
}

static void test_varlen_options(void **state)
{
    (void)state;
    attn_case c = varlen_case(FFPA_F16, 72);
    c.hq = 4;
    c.hkv = 1;
    c.bias = 1;
    c.dropout_p = 0.25f;
    attn_run_forward(&c);
    c.bias_size1[1] = 1;
    c.bias_stride0[0] = 1;
    c.causal = 1;
    attn_run_forward(&c);
}

static void test_varlen_large_d(void **state)
{
    (void)state;
    attn_case c = varlen_case(FFPA_BF16, 576);
    c.dv = 512;
    c.causal = 1;
    attn_run_forward(&c);
}

/* Offsets in backend memory (no host read: graph capture): exact maxima and
 * maxima larger than any sequence, cross lengths with empty sequences, causal
 * and a window. */
static void test_varlen_offsets_on_device(void **state)
{
    (void)state;
    for (int mode = 1; mode <= 2; ++mode) {
        attn_case c = varlen_case(FFPA_BF16, 72);
        c.cu_on_device = mode;
        attn_run_forward(&c);
        c.nseq = 5;
        const int32_t lq[] = {5, 0, 33, 17, 4}, lk[] = {7, 3, 20, 17, 0};
        for (int s = 0; s < 5; ++s) {
            c.lens_q[s] = lq[s];
            c.lens_k[s] = lk[s];
        }
        c.causal = 1;
        c.hq = 4;
        c.hkv = 2;
        attn_run_forward(&c);
        c.window = 1;
        c.window_left = 6;
        c.window_right = -1;
        c.dqk = c.dv = 320;
        attn_run_forward(&c);
    }
}

/* ------------------------------------------------------------ combinations */

static void test_everything_combined(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = varlen_case(all_dtypes[d], 72);
        c.dv = 40;
        c.nseq = 3;
        const int32_t lq[] = {9, 0, 30}, lk[] = {4, 6, 41};
        for (int s = 0; s < 3; ++s) {
            c.lens_q[s] = lq[s];
            c.lens_k[s] = lk[s];
        }
        c.hq = 8;
        c.hkv = 2;
        c.causal = 1;
        c.bias = 1;
        c.bias_inf_rows = 1;
        c.bias_size1[1] = 1;
        c.bias_dtype = FFPA_F32;
        c.dropout_p = 0.3f;
        c.scale = 0.2f;
        c.layout = TH_BNHD;
        c.kv_layout = TH_PADDED;
        attn_run_forward(&c);
    }
    attn_case c = attn_case_default(FFPA_BF16, 65, 320);
    c.batch = 2;
    c.hq = 4;
    c.hkv = 1;
    c.nkv = 70;
    c.causal = 1;
    c.bias = 1;
    c.bias_stride0[0] = 1;
    c.dropout_p = 0.1f;
    c.layout = c.kv_layout = TH_BNHD;
    attn_run_forward(&c);
}

/* Few query rows, many keys: the decode path (split-KV with an LSE merge on
 * GPUs), with splits that are entirely masked by causal or -inf bias columns. */
static void test_decode_split_kv(void **state)
{
    (void)state;
    const int64_t rows[] = {1, 5, 16};
    for (int i = 0; i < 3; ++i) {
        attn_case c = attn_case_default(FFPA_BF16, rows[i], 512);
        c.nkv = 1000;
        c.hq = 4;
        c.hkv = 1;
        attn_run_forward(&c);
        c.dtype = c.bias_dtype = FFPA_F16;
        c.dqk = c.dv = 128;
        c.causal = 1;
        c.bias = 1;
        c.bias_inf_cols = 1;
        attn_run_forward(&c);
        c.dropout_p = 0.2f;
        c.bias_inf_cols = 0;
        attn_run_forward(&c);
    }
}

/* Few query rows with GQA / MQA: backends that give a work-group the rows of
 * every query head of a KV head (the OpenCL kernels' packed heads) must still
 * take each row's own head for its bias, ALiBi slope, dropout mask, output
 * and LSE, and its own query row for the causal diagonal and the window:
 * groups of 3 and 8 (packed rows not a multiple of any tile), 1-16 query
 * rows, varlen with an empty sequence, every option per head. */
static void test_few_rows_grouped_heads(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 7, 72);
        c.nkv = 90;
        c.batch = 2;
        c.hq = 12;
        c.hkv = 4;
        c.causal = 1;
        c.with_lse = 1;
        c.alibi = 1;
        c.alibi_batch = 1;
        attn_run_forward(&c);
        c.alibi = 0;
        c.causal = 0;
        c.bias = 1;
        c.bias_dtype = all_dtypes[d];
        c.dropout_p = 0.25f;
        c.dropout_seed = 11;
        c.window = 1;
        c.window_left = 20;
        c.window_right = 3;
        attn_run_forward(&c);
    }
    attn_case v = attn_case_default(FFPA_BF16, 0, 64);
    v.nseq = 3;
    const int32_t lq[] = {16, 0, 3}, lk[] = {40, 9, 70};
    for (int s = 0; s < 3; ++s) {
        v.lens_q[s] = lq[s];
        v.lens_k[s] = lk[s];
    }
    v.hq = 16;
    v.hkv = 2;
    v.causal = 1;
    v.with_lse = 1;
    attn_run_forward(&v);
    v.dqk = 576;
    v.dv = 512;
    v.hkv = 1;
    v.causal = 0;
    v.softcap = 20.0f;
    attn_run_forward(&v);
}

/* Sequence lengths around 64/128-row tiles and D around the 256 split. */
static void test_tile_boundaries(void **state)
{
    (void)state;
    const int64_t lengths[] = {63, 64, 65, 127, 128};
    const int64_t dims[] = {248, 256, 264};
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 5; ++i) {
            attn_case c = attn_case_default(FFPA_F16, lengths[i], dims[d]);
            c.nkv = lengths[4 - i];
            c.causal = i % 2;
            c.hq = c.hkv = 1;
            attn_run_forward(&c);
        }
}

static void test_bias_inf_cols(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 65, 64);
        c.nkv = 200;
        c.bias = 1;
        c.bias_inf_cols = 1;
        attn_run_forward(&c);
    }
}

/* Random combinations of every option, dtype, layout and shape. */
/* ------------------------------------------------------------ variants */

static void test_window(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < ATTN_WINDOW_CASES; ++i) {
            attn_case c = attn_case_window(all_dtypes[d], i, 64);
            attn_run_forward(&c);
        }
    for (int i = 0; i < 4; ++i) { /* Split-D head dims */
        attn_case c = attn_case_window(FFPA_BF16, i, i % 2 ? 320 : 264);
        attn_run_forward(&c);
    }
}

static void test_softcap(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 4; ++i) {
            attn_case c = attn_case_softcap(all_dtypes[d], i, i == 2 ? 320 : 64);
            attn_run_forward(&c);
        }
}

static void test_alibi(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 4; ++i) {
            attn_case c = attn_case_alibi(all_dtypes[d], i, i == 1 ? 320 : 72);
            attn_run_forward(&c);
        }
}

static void test_variants_combined(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_variants_combined(all_dtypes[d], d == 2 ? 264 : 64);
        attn_run_forward(&c);
    }
}

static void test_random_combinations(void **state)
{
    (void)state;
    const uint64_t cases = th_random_cases(80), first = th_random_first_seed();
    for (uint64_t seed = first; seed < first + cases; ++seed) {
        attn_case c = attn_case_random(seed, 0);
        char text[400];
        attn_case_describe(&c, text, sizeof text);
        print_message("# case %s\n", text);
        attn_run_forward(&c);
    }
}

/* The same context runs many different problems back to back (workspace reuse). */
static void test_repeated_calls(void **state)
{
    (void)state;
    for (int rep = 0; rep < 3; ++rep) {
        attn_case big = attn_case_default(FFPA_F16, 40, 512);
        big.seed = 10 + (uint64_t)rep;
        attn_run_forward(&big);
        attn_case small = attn_case_default(FFPA_F16, 3, 8);
        small.seed = 20 + (uint64_t)rep;
        attn_run_forward(&small);
    }
}

int main(void)
{
    int unavailable = th_backend_unavailable_exit();
    if (unavailable >= 0)
        return unavailable;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes_basic),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_mixed_layouts),
        cmocka_unit_test(test_head_dim_strides),
        cmocka_unit_test(test_without_lse),
        cmocka_unit_test(test_seqlen_awkward),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_head_dims_bf16_f32),
        cmocka_unit_test(test_d1024_n128),
        cmocka_unit_test(test_mla_dqk576_dv512),
        cmocka_unit_test(test_cross_attention),
        cmocka_unit_test(test_decode_large_d),
        cmocka_unit_test(test_gqa_and_mqa),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_causal_masked_rows),
        cmocka_unit_test(test_bias_full),
        cmocka_unit_test(test_bias_other_dtype),
        cmocka_unit_test(test_bias_broadcast_size1),
        cmocka_unit_test(test_bias_broadcast_stride0),
        cmocka_unit_test(test_bias_inf_rows),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_dropout_large_d),
        cmocka_unit_test(test_large_scores),
        cmocka_unit_test(test_varlen),
        cmocka_unit_test(test_varlen_cross),
        cmocka_unit_test(test_varlen_options),
        cmocka_unit_test(test_varlen_large_d),
        cmocka_unit_test(test_varlen_offsets_on_device),
        cmocka_unit_test(test_everything_combined),
        cmocka_unit_test(test_repeated_calls),
        cmocka_unit_test(test_decode_split_kv),
        cmocka_unit_test(test_few_rows_grouped_heads),
        cmocka_unit_test(test_tile_boundaries),
        cmocka_unit_test(test_bias_inf_cols),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_alibi),
        cmocka_unit_test(test_variants_combined),
        cmocka_unit_test(test_random_combinations),
    };
    return th_exit_code(cmocka_run_group_tests_name("forward", tests, NULL, NULL),
                        (int)(sizeof tests / sizeof tests[0]));
}
