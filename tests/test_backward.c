/*
 * Backward against the float64 oracle and against central finite
 * differences, on the backend named by FFPA_TEST_BACKEND (default cpu).
 * Every run also checks the forward it starts from, that the inputs are left
 * untouched and that nothing outside the gradient views is written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "attn_case.h"
#include "harness.h"

static const ffpa_dtype all_dtypes[] = {FFPA_F16, FFPA_BF16, FFPA_F32};

/* ------------------------------------------------------------ finite differences */

/* Tiny f32 problems: the library's dQ/dK/dV/dbias and the oracle's analytic
 * gradients against central differences of the oracle's sum(O * dO). */
static attn_case fd_case(int64_t n, uint64_t seed)
{
    attn_case c = attn_case_default(FFPA_F32, n, 4);
    c.finite_differences = 1;
    c.seed = seed;
    return c;
}

static void test_fd_plain(void **state)
{
    (void)state;
    for (int64_t n = 3; n <= 5; ++n) {
        attn_case c = fd_case(n, 40 + (uint64_t)n);
        attn_run_backward(&c);
    }
}

static void test_fd_options(void **state)
{
    (void)state;
    attn_case c = fd_case(4, 1);
    c.causal = 1;
    c.nkv = 5;
    attn_run_backward(&c);

    c = fd_case(5, 2);
    c.causal = 1;
    c.nkv = 3; /* two fully masked rows */
    attn_run_backward(&c);

    c = fd_case(4, 3);
    c.hq = 4;
    c.hkv = 1;
    c.dv = 3;
    attn_run_backward(&c);

    c = fd_case(4, 4);
    c.dropout_p = 0.3f;
    attn_run_backward(&c);

    c = fd_case(3, 5);
    c.scale = 0.7f;
    c.nkv = 5;
    attn_run_backward(&c);
}

static void test_fd_bias(void **state)
{
    (void)state;
    attn_case c = fd_case(4, 6);
    c.bias = 1;
    c.dbias = 1;
    attn_run_backward(&c);
    c.bias_size1[0] = c.bias_size1[2] = 1;
    attn_run_backward(&c);
    c.bias_size1[0] = c.bias_size1[2] = 0;
    c.bias_stride0[1] = 1;
    c.causal = 1;
    attn_run_backward(&c);
}

static void test_fd_varlen(void **state)
{
    (void)state;
    attn_case c = fd_case(0, 7);
    c.nseq = 3;
    const int32_t lq[] = {3, 0, 4}, lk[] = {2, 3, 5};
    for (int s = 0; s < 3; ++s) {
        c.lens_q[s] = lq[s];
        c.lens_k[s] = lk[s];
    }
    c.causal = 1;
    c.bias = 1;
    c.dbias = 1;
    attn_run_backward(&c);
}

/* ------------------------------------------------------------ dtypes, shapes */

static void test_dtypes_basic(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 33, 64);
        c.batch = 2;
        attn_run_backward(&c);
    }
}

static void test_seqlen_awkward(void **state)
{
    (void)state;
    const int64_t lengths[] = {1, 7, 65, 129};
    for (int i = 0; i < 4; ++i) {
        attn_case c = attn_case_default(FFPA_BF16, lengths[i], 40);
        attn_run_backward(&c);
    }
}

static void test_head_dims(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 8, 40, 72, 320, 512, 576, 1000, 1024};
    for (int i = 0; i < 9; ++i) {
        attn_case c = attn_case_default(FFPA_F16, 17, dims[i]);
        attn_run_backward(&c);
    }
    attn_case c = attn_case_default(FFPA_BF16, 65, 1024);
    c.causal = 1;
    attn_run_backward(&c);
    c = attn_case_default(FFPA_F32, 9, 1000);
    attn_run_backward(&c);
}

static void test_mla_dqk576_dv512(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 33, 576);
    c.dv = 512;
    attn_run_backward(&c);
}

static void test_cross_attention(void **state)
{
    (void)state;
    const int64_t pairs[][2] = {{7, 65}, {65, 7}, {1, 33}, {33, 1}};
    for (int i = 0; i < 4; ++i) {
        attn_case c = attn_case_default(FFPA_F16, pairs[i][0], 64);
        c.nkv = pairs[i][1];
        attn_run_backward(&c);
    }
}

static void test_gqa_and_mqa(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 17, 64);
    c.hq = 8;
    c.hkv = 2;
    attn_run_backward(&c);
    c.hq = 32;
    c.hkv = 1;
    c.nq = 9;
    attn_run_backward(&c);
}

static void test_layouts(void **state)
{
    (void)state;
    const th_layout layouts[] = {TH_BNHD, TH_PADDED};
    for (int l = 0; l < 2; ++l) {
        attn_case c = attn_case_default(FFPA_F16, 33, 40);
        c.batch = 2;
        c.layout = c.kv_layout = layouts[l];
        attn_run_backward(&c);
        c.layout = TH_BHND;
        attn_run_backward(&c);
    }
}

/* A head dim with stride 2 for every tensor (gradients included): the cpu
 * and opencl backends take it, GPU kernels refuse it by name (counted). */
static void test_head_dim_strides(void **state)
{
    (void)state;
    attn_case c = attn_case_default(th_fixture_dtype(), 29, 24);
    c.batch = 2;
    c.hq = 4;
    c.hkv = 2;
    c.layout = c.kv_layout = TH_COLUMNS;
    c.causal = 1;
    attn_run_backward(&c);
}

/* ------------------------------------------------------------ options */

static void test_causal(void **state)
{
    (void)state;
    const int64_t pairs[][2] = {{33, 33}, {7, 40}, {40, 7}, {65, 1}};
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 4; ++i) {
            attn_case c = attn_case_default(all_dtypes[d], pairs[i][0], 64);
            c.nkv = pairs[i][1];
            c.causal = 1;
            attn_run_backward(&c);
        }
}

static void test_bias_and_dbias(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 33, 64);
        c.batch = 2;
        c.nkv = 21;
        c.bias = 1;
        attn_run_backward(&c); /* bias without dbias */
        c.dbias = 1;
        attn_run_backward(&c); /* dbias in f32 */
        c.dbias_dtype = c.bias_dtype;
        attn_run_backward(&c); /* dbias in the bias dtype */
    }
}

static void test_dbias_broadcast(void **state)
{
    (void)state;
    for (int mask = 1; mask < 16; ++mask) {
        attn_case c = attn_case_default(FFPA_F32, 9, 16);
        c.batch = 2;
        c.hq = 4;
        c.hkv = 2;
        c.nkv = 11;
        c.bias = 1;
        c.dbias = 1;
        c.seed = 300 + (uint64_t)mask;
        for (int d = 0; d < 4; ++d)
            c.bias_size1[d] = (mask >> d) & 1;
        attn_run_backward(&c);
        for (int d = 0; d < 4; ++d) {
            c.bias_stride0[d] = c.bias_size1[d];
            c.bias_size1[d] = 0;
        }
        attn_run_backward(&c);
    }
    attn_case c = attn_case_default(FFPA_BF16, 33, 64);
    c.hq = 4;
    c.bias = 1;
    c.dbias = 1;
    c.bias_size1[0] = c.bias_size1[1] = 1;
    c.dbias_dtype = FFPA_BF16;
    attn_run_backward(&c);
}

static void test_bias_inf_rows(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 33, 40);
        c.bias = 1;
        c.bias_inf_rows = 1;
        c.dbias = 1;
        attn_run_backward(&c);
    }
}

static void test_dropout(void **state)
{
    (void)state;
    const float rates[] = {0.1f, 0.5f};
    for (int i = 0; i < 2; ++i)
        for (int d = 0; d < 3; ++d) {
            attn_case c = attn_case_default(all_dtypes[d], 33, 64);
            c.batch = 2;
            c.nkv = 40;
            c.dropout_p = rates[i];
            c.dropout_seed = 99 + (uint64_t)i;
            attn_run_backward(&c);
        }
}

/* GRAD_ACCUM_OUTPUT accumulates dQ/dK/dV in the output dtype: each of the
 * ~N partial sums rounds to 8 (bf16) or 11 (f16) bits, so the error grows like
 * sqrt(N) roundings; 2.5x the baseline for N <= 40. */
static void test_grad_accum(void **state)
{
    (void)state;
    const ffpa_grad_accum modes[] = {FFPA_GRAD_ACCUM_F32, FFPA_GRAD_ACCUM_OUTPUT};
    for (int m = 0; m < 2; ++m)
        for (int d = 0; d < 3; ++d) {
            attn_case c = attn_case_default(all_dtypes[d], 40, 72);
            c.hq = 4;
            c.hkv = 2;
            c.grad_accum = modes[m];
            if (modes[m] == FFPA_GRAD_ACCUM_OUTPUT)
                c.tol_factor = 2.5;
            attn_run_backward(&c);
            c.causal = 1;
            c.dqk = 320;
            c.dv = 320;
            attn_run_backward(&c);
        }
}

static void test_deterministic(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 65, 64);
        c.batch = 2;
        c.hq = 8;
        c.hkv = 1;
        c.bias = 1;
        c.bias_size1[0] = c.bias_size1[1] = 1;
        c.dbias = 1;
        c.deterministic = 1;
        attn_run_backward(&c);
    }
    attn_case c = attn_case_default(FFPA_BF16, 40, 512);
    c.hq = 4;
    c.hkv = 2;
    c.causal = 1;
    c.deterministic = 1;
    attn_run_backward(&c);
}

/* Deterministic mode where many key blocks add into each dQ tile (on cuda
 * sm_90 the Hopper kernel, whose dQ reductions then go in a fixed order):
 * dense, causal with Nq < Nkv and Nq > Nkv, clusters of four and three
 * CTAs per key block (D = 1024, 704: the exchange's sums), GQA and varlen;
 * each run twice, byte for byte. */
static void test_deterministic_many_key_blocks(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 400, 128);
    c.hq = 4;
    c.hkv = 2;
    c.deterministic = 1;
    attn_run_backward(&c);

    c = attn_case_default(FFPA_BF16, 130, 512);
    c.nkv = 260;
    c.hkv = 1;
    c.causal = 1;
    c.deterministic = 1;
    attn_run_backward(&c);

    c = attn_case_default(FFPA_F16, 333, 320);
    c.nkv = 200;
    c.causal = 1;
    c.deterministic = 1;
    attn_run_backward(&c);

    c = attn_case_default(FFPA_BF16, 150, 1024);
    c.causal = 1;
    c.deterministic = 1;
    attn_run_backward(&c);

    c = attn_case_default(FFPA_BF16, 140, 704);
    c.nkv = 90;
    c.hq = 2;
    c.hkv = 1;
    c.deterministic = 1;
    attn_run_backward(&c);

    c = attn_case_default(FFPA_BF16, 0, 256);
    c.nseq = 3;
    const int32_t lq[] = {130, 1, 257}, lk[] = {200, 65, 100};
    for (int s = 0; s < 3; ++s) {
        c.lens_q[s] = lq[s];
        c.lens_k[s] = lk[s];
    }
    c.hq = 4;
    c.hkv = 2;
    c.causal = 1;
    c.deterministic = 1;
    attn_run_backward(&c);
}

/* The FFPA paper's precision case (its Table 10: max |dV| error <= 2e-2 with
 * the fp32 gradient buffer): D = 512, N = 2048, causal, bf16. The fp32
 * buffer must stay within that absolute bound; the output-dtype
 * accumulation is checked with test_grad_accum's looser tolerance, and both
 * print their largest errors (the figures the notes quote). */
static void test_precision_fp32_buffer(void **state)
{
    (void)state;
    attn_case c = attn_case_default(FFPA_BF16, 2048, 512);
    c.hq = c.hkv = 1;
    c.causal = 1;
    /* Both modes on the same inputs (one oracle run): the output-dtype
     * accumulation with test_grad_accum's tolerance and no absolute bound. */
    const attn_accum_check checks[] = {{FFPA_GRAD_ACCUM_F32, 1.0, 2e-2}, {FFPA_GRAD_ACCUM_OUTPUT, 2.5, 1.0}};
    attn_run_backward_accums(&c, checks, 2);
}

static void test_large_scores(void **state)
{
    (void)state;
    /* See test_forward.c: scores ~1e4 computed exactly; 20x tolerance for the
     * near one-hot softmax. */
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 17, 16);
        c.scale = 1.0f;
        c.integer_qk = 1;
        c.qk_range = 64.0;
        c.tol_factor = 20.0;
        attn_run_backward(&c);
    }
}

/* ------------------------------------------------------------ varlen */

static void set_lengths(attn_case *c, int nseq, const int32_t *lq, const int32_t *lk)
{
    c->nseq = nseq;
    for (int s = 0; s < nseq; ++s) {
        c->lens_q[s] = lq[s];
        c->lens_k[s] = lk[s];
    }
}

static void test_varlen(void **state)
{
    (void)state;
    const int32_t lq[] = {5, 0, 33, 17}, lk_same[] = {5, 0, 33, 17};
    const int32_t lq2[] = {5, 0, 33, 17, 4}, lk2[] = {7, 3, 20, 17, 0};
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 0, 40);
        set_lengths(&c, 4, lq, lk_same);
        attn_run_backward(&c);
        set_lengths(&c, 5, lq2, lk2);
        c.causal = 1;
        attn_run_backward(&c);
    }
}

/* Offsets in backend memory, exact and larger maxima (see test_forward). */
static void test_varlen_offsets_on_device(void **state)
{
    (void)state;
    const int32_t lq[] = {5, 0, 33, 17, 4}, lk[] = {7, 3, 20, 17, 0};
    for (int mode = 1; mode <= 2; ++mode) {
        attn_case c = attn_case_default(FFPA_BF16, 0, 72);
        set_lengths(&c, 5, lq, lk);
        c.cu_on_device = mode;
        c.causal = 1;
        c.hq = 4;
        c.hkv = 2;
        attn_run_backward(&c);
        c.window = 1;
        c.window_left = 6;
        c.window_right = 2;
        c.dbias = c.bias = 1;
        attn_run_backward(&c);
    }
}

static void test_varlen_options(void **state)
{
    (void)state;
    const int32_t lq[] = {5, 0, 33, 17}, lk[] = {9, 2, 30, 17};
    attn_case c = attn_case_default(FFPA_BF16, 0, 72);
    set_lengths(&c, 4, lq, lk);
    c.hq = 4;
    c.hkv = 2;
    c.bias = 1;
    c.dbias = 1;
    c.dropout_p = 0.2f;
    c.causal = 1;
    c.layout = TH_BNHD;
    attn_run_backward(&c);
    c.bias_size1[1] = 1;
    c.bias_stride0[0] = 1;
    c.dv = 40;
    c.deterministic = 1;
    attn_run_backward(&c);
}

static void test_everything_combined(void **state)
{
    (void)state;
    const int32_t lq[] = {9, 0, 30}, lk[] = {4, 6, 41};
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 0, 72);
        set_lengths(&c, 3, lq, lk);
        c.dv = 40;
        c.hq = 8;
        c.hkv = 2;
        c.causal = 1;
        c.bias = 1;
        c.bias_inf_rows = 1;
        c.bias_size1[1] = 1;
        c.bias_dtype = FFPA_F32;
        c.dbias = 1;
        c.dropout_p = 0.3f;
        c.scale = 0.2f;
        c.layout = TH_BNHD;
        c.kv_layout = TH_PADDED;
        c.deterministic = 1;
        attn_run_backward(&c);
    }
    attn_case c = attn_case_default(FFPA_F16, 33, 576);
    c.dv = 512;
    c.batch = 2;
    c.hq = 4;
    c.hkv = 1;
    c.nkv = 40;
    c.causal = 1;
    c.bias = 1;
    c.dbias = 1;
    c.bias_stride0[1] = 1;
    c.dropout_p = 0.1f;
    attn_run_backward(&c);
}

/* Sequence lengths around 64/128-row tiles and D around the 256 split. */
static void test_tile_boundaries(void **state)
{
    (void)state;
    const int64_t lengths[] = {63, 64, 65, 128};
    const int64_t dims[] = {256, 264};
    for (int d = 0; d < 2; ++d)
        for (int i = 0; i < 4; ++i) {
            attn_case c = attn_case_default(FFPA_BF16, lengths[i], dims[d]);
            c.nkv = lengths[3 - i];
            c.causal = i % 2;
            c.hq = c.hkv = 1;
            attn_run_backward(&c);
        }
}

static void test_bias_inf_cols(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_default(all_dtypes[d], 33, 64);
        c.nkv = 150;
        c.bias = 1;
        c.bias_inf_cols = 1;
        c.dbias = 1;
        attn_run_backward(&c);
    }
}

/* Random combinations of every option, dtype, layout and shape. */
/* ------------------------------------------------------------ variants */

static void test_window(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < ATTN_WINDOW_CASES; ++i) {
            attn_case c = attn_case_window(all_dtypes[d], i, 40);
            attn_run_backward(&c);
        }
    attn_case c = attn_case_window(FFPA_BF16, 3, 264);
    attn_run_backward(&c);
}

static void test_softcap(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 4; ++i) {
            attn_case c = attn_case_softcap(all_dtypes[d], i, i == 2 ? 136 : 40);
            c.dbias = c.bias;
            attn_run_backward(&c);
        }
}

static void test_alibi(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 4; ++i) {
            attn_case c = attn_case_alibi(all_dtypes[d], i, 40);
            attn_run_backward(&c);
        }
}

static void test_variants_combined(void **state)
{
    (void)state;
    for (int d = 0; d < 3; ++d) {
        attn_case c = attn_case_variants_combined(all_dtypes[d], d == 2 ? 136 : 40);
        c.dbias = 1;
        c.deterministic = d == 1;
        attn_run_backward(&c);
    }
}

/* Finite differences through the window, softcap (a strong cap: its
 * derivative matters) and ALiBi. */
static void test_fd_variants(void **state)
{
    (void)state;
    attn_case c = fd_case(5, 8);
    c.window = 1;
    c.window_left = 1;
    c.window_right = 0;
    attn_run_backward(&c);
    c = fd_case(4, 9);
    c.softcap = 0.5f;
    c.bias = 1;
    c.dbias = 1;
    attn_run_backward(&c);
    c = fd_case(4, 10);
    c.alibi = 1;
    c.causal = 1;
    c.nkv = 6;
    attn_run_backward(&c);
}

static void test_random_combinations(void **state)
{
    (void)state;
    const uint64_t cases = th_random_cases(60), first = th_random_first_seed();
    for (uint64_t seed = first; seed < first + cases; ++seed) {
        attn_case c = attn_case_random(1000 + seed, 1);
        char text[400];
        attn_case_describe(&c, text, sizeof text);
        print_message("# case %s\n", text);
        attn_run_backward(&c);
    }
}

int main(void)
{
    int unavailable = th_backend_unavailable_exit();
    if (unavailable >= 0)
        return unavailable;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_plain),
        cmocka_unit_test(test_fd_options),
        cmocka_unit_test(test_fd_bias),
        cmocka_unit_test(test_fd_varlen),
        cmocka_unit_test(test_dtypes_basic),
        cmocka_unit_test(test_seqlen_awkward),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_mla_dqk576_dv512),
        cmocka_unit_test(test_cross_attention),
        cmocka_unit_test(test_gqa_and_mqa),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_head_dim_strides),
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_bias_and_dbias),
        cmocka_unit_test(test_dbias_broadcast),
        cmocka_unit_test(test_bias_inf_rows),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_grad_accum),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_deterministic_many_key_blocks),
        cmocka_unit_test(test_precision_fp32_buffer),
        cmocka_unit_test(test_large_scores),
        cmocka_unit_test(test_varlen),
        cmocka_unit_test(test_varlen_offsets_on_device),
        cmocka_unit_test(test_varlen_options),
        cmocka_unit_test(test_everything_combined),
        cmocka_unit_test(test_tile_boundaries),
        cmocka_unit_test(test_bias_inf_cols),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_alibi),
        cmocka_unit_test(test_variants_combined),
        cmocka_unit_test(test_fd_variants),
        cmocka_unit_test(test_random_combinations),
    };
    return th_exit_code(cmocka_run_group_tests_name("backward", tests, NULL, NULL),
                        (int)(sizeof tests / sizeof tests[0]));
}
