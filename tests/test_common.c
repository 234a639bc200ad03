/*
 * Unit tests of the backend-independent internals in common/: the Split-D
 * planner, fp16/bf16 conversion, Philox4x32-10 and the dropout mask, and
 * environment parsing. Links the static ffpa_common archive.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "env.h"
#include "kv_sched.h"
#include "philox.h"
#include "plan.h"
#include "problem.h"

/* ------------------------------------------------------------ planner */

static ffpa_device_limits h100_limits(void)
{
    ffpa_device_limits lim = {0};
    lim.is_gpu = 1;
    lim.arch = 90;
    lim.sm_count = 132;
    lim.warp_size = 32;
    lim.smem_per_block = 232448;
    lim.smem_per_sm = 233472;
    lim.regs_per_sm = 65536;
    lim.max_threads_per_block = 1024;
    return lim;
}

static ffpa_device_limits sm80_limits(void)
{
    ffpa_device_limits lim = h100_limits();
    lim.arch = 80;
    lim.sm_count = 108;
    lim.smem_per_block = 163 * 1024;
    lim.smem_per_sm = 164 * 1024;
    return lim;
}

static ffpa_device_limits cpu_limits(void)
{
    ffpa_device_limits lim = {0};
    lim.sm_count = 2;
    lim.warp_size = 1;
    lim.max_threads_per_block = 1;
    return lim;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Key columns the rows of query block qb may see under bottom-right causal masking. */
static int64_t causal_keys_of_block(const ffpa_plan *plan, const ffpa_plan_input *in, int64_t qb)
{
    int64_t last_row = (qb + 1) * plan->br - 1;
    if (last_row > in->nq - 1)
        last_row = in->nq - 1;
    int64_t keys = last_row + (in->nkv - in->nq) + 1;
    return keys < 0 ? 0 : keys > in->nkv ? in->nkv : keys;
}

static void check_chunks(const char *what, int64_t d, int chunk, int n_chunks, int padded,
                         const ffpa_plan_input *in)
{
    if (chunk < 1 || n_chunks < 1 || (int64_t)n_chunks * chunk != padded || padded < d ||
        padded - d >= chunk)
        fail_msg("%s chunks do not cover D=%lld exactly: chunk %d x %d = padded %d "
                 "(dqk %lld dv %lld)",
                 what, (long long)d, chunk, n_chunks, padded, (long long)in->dqk,
                 (long long)in->dv);
}

static void check_plan(const ffpa_plan_input *in, const ffpa_device_limits *lim)
{
    ffpa_plan plan;
    memset(&plan, 0xAB, sizeof plan);
    ffpa_status status = ffpa_plan_make(in, lim, &plan);
    if (status != FFPA_OK)
        fail_msg("ffpa_plan_make failed (%d) for dqk %lld dv %lld dtype %d causal %d bwd %d "
                 "arch %d",
                 (int)status, (long long)in->dqk, (long long)in->dv, (int)in->dtype, in->causal,
                 in->backward, lim->arch);
    if (lim->is_gpu) {
        if (plan.smem_bytes > lim->smem_per_block)
            fail_msg("smem %zu > %zu (dqk %lld dv %lld bwd %d arch %d)", plan.smem_bytes,
                     lim->smem_per_block, (long long)in->dqk, (long long)in->dv, in->backward,
                     lim->arch);
        assert_int_equal(plan.smem_bytes, ffpa_plan_smem_bytes(&plan, in->dtype, in->backward));
        /* Q resident: whole-D tiles always; Split-D exactly where it fits. */
        if (in->backward)
            assert_false(ffpa_plan_q_resident(&plan));
        else if (plan.path == FFPA_PATH_SMALL_D)
            assert_true(ffpa_plan_q_resident(&plan));
        else if (plan.path == FFPA_PATH_SPLIT_D && !plan.q_resident) {
            ffpa_plan resident = plan;
            resident.q_resident = 1;
            assert_true(ffpa_plan_smem_bytes(&resident, in->dtype, 0) > lim->smem_per_block);
        }
        /* Tensor-core MMAs consume K in steps of 16 elements. */
        assert_int_equal(plan.dqk_chunk % 16, 0);
        assert_int_equal(plan.dv_chunk % 16, 0);
    }
    check_chunks("qk", in->dqk, plan.dqk_chunk, plan.n_qk_chunks, plan.dqk_padded, in);
    check_chunks("v", in->dv, plan.dv_chunk, plan.n_v_chunks, plan.dv_padded, in);
    assert_true(plan.br >= 1 && plan.bc >= 1 && plan.stages >= 1 && plan.warps >= 1);
    assert_true(plan.kv_splits >= 1);
    if (plan.kv_splits > 1)
        assert_int_equal(plan.path, FFPA_PATH_DECODE);
    int64_t dmax = in->dqk > in->dv ? in->dqk : in->dv;
    if (dmax > 256)
        assert_int_not_equal(plan.path, FFPA_PATH_SMALL_D);
    assert_int_equal(plan.q_blocks, ceil_div(in->nq, plan.br));
    assert_int_equal(plan.grid[0], plan.q_blocks * plan.kv_splits);
    assert_int_equal(plan.grid[1], in->hq);
    assert_int_equal(plan.grid[2], in->batch);
    if (in->causal)
        assert_int_equal(plan.order, FFPA_ORDER_LONGEST_FIRST);

    /* Work order: a permutation of the query blocks; longest-first never puts a
     * block with fewer visible keys before one with more. */
    char *seen = calloc((size_t)plan.q_blocks, 1);
    assert_non_null(seen);
    int64_t previous_keys = INT64_MAX;
    for (int64_t w = 0; w < plan.q_blocks; ++w) {
        int64_t qb = ffpa_plan_q_block(&plan, w);
        assert_true(qb >= 0 && qb < plan.q_blocks);
        assert_false(seen[qb]);
        seen[qb] = 1;
        if (plan.order == FFPA_ORDER_LONGEST_FIRST) {
            int64_t keys = causal_keys_of_block(&plan, in, qb);
            assert_true(keys <= previous_keys);
            previous_keys = keys;
        }
    }
    free(seen);
}

static void sweep_plans(const ffpa_device_limits *lim, const ffpa_dtype *dtypes, int n_dtypes)
{
    int64_t dims[140];
    int n_dims = 0;
    for (int64_t d = 8; d <= 1024; d += 8)
        dims[n_dims++] = d;
    dims[n_dims++] = 1;
    dims[n_dims++] = 3;
    dims[n_dims++] = 1000;
    dims[n_dims++] = 1023;
    const int64_t seqs[][2] = {{1, 4096}, {77, 77}, {4096, 4096}, {300, 100}};
    for (int t = 0; t < n_dtypes; ++t)
        for (int i = 0; i < n_dims; ++i)
            for (int s = 0; s < 4; ++s)
                for (int causal = 0; causal < 2; ++causal)
                    for (int backward = 0; backward < 2; ++backward) {
                        ffpa_plan_input in;
                        memset(&in, 0, sizeof in);
                        in.dtype = dtypes[t];
                        in.batch = s == 0 ? 3 : 1;
                        in.hq = 16;
                        in.hkv = 4;
                        in.nq = seqs[s][0];
                        in.nkv = seqs[s][1];
                        in.dqk = in.dv = dims[i];
                        in.causal = causal;
                        in.backward = backward;
                        check_plan(&in, lim);
                        /* Absorbed-MLA style Dqk != Dv. */
                        in.dv = dims[i] > 64 ? dims[i] - 64 : dims[i] + 64;
                        check_plan(&in, lim);
                    }
}

static const ffpa_dtype half_dtypes[] = {FFPA_F16, FFPA_BF16};
static const ffpa_dtype cpu_dtypes[] = {FFPA_F16, FFPA_BF16, FFPA_F32};

static void test_plan_h100(void **state)
{
    (void)state;
    ffpa_device_limits lim = h100_limits();
    sweep_plans(&lim, half_dtypes, 2);
}

static void test_plan_sm80(void **state)
{
    (void)state;
    ffpa_device_limits lim = sm80_limits();
    sweep_plans(&lim, half_dtypes, 2);
}

static void test_plan_cpu(void **state)
{
    (void)state;
    ffpa_device_limits lim = cpu_limits();
    sweep_plans(&lim, cpu_dtypes, 3);
}

/* The Split-D forward keeps Q resident where it fits the block and takes
 * the widest slabs that fit: D = 512 on the H100 in whole-D slabs (64 KiB
 * of Q, two 64 KiB slots, the two warps' partial S tiles), on sm_80 in
 * 256-column ones, on the 99 KiB parts in 128-column ones with Q streamed;
 * the A/B knob's input flag streams Q; MLA's Dqk = 576 skips the tile that
 * would leave its last chunk an eighth full. */
static void test_plan_q_resident(void **state)
{
    (void)state;
    ffpa_plan_input in;
    memset(&in, 0, sizeof in);
    in.dtype = FFPA_BF16;
    in.batch = 1;
    in.hq = in.hkv = 32;
    in.nq = in.nkv = 8192;
    in.dqk = in.dv = 512;
    ffpa_device_limits h100 = h100_limits(), sm80 = sm80_limits(), sm86 = h100_limits();
    assert_true(ffpa_limits_as_arch(&sm86, 86));
    /* The key split's swap: P in 16 bits (Br x Bc) and two float2 per lane,
     * row group and warp of the D split. */
    const size_t spart = 64 * 64 * 2 + 2 * 64 * 32;
    ffpa_plan p;
    assert_int_equal(ffpa_plan_make(&in, &h100, &p), FFPA_OK);
    assert_int_equal(p.path, FFPA_PATH_SPLIT_D);
    assert_int_equal(p.br, 64);
    assert_int_equal(p.dqk_chunk, 512);
    assert_int_equal(p.stages, 2);
    assert_true(ffpa_plan_q_resident(&p));
    assert_int_equal(p.smem_bytes, 64 * 512 * 2 + 2 * 64 * 512 * 2 + spart);

    /* Streamed, whole-D slabs do not fit: 256 columns at 3 stages. */
    in.stream_q = 1;
    assert_int_equal(ffpa_plan_make(&in, &h100, &p), FFPA_OK);
    assert_false(ffpa_plan_q_resident(&p));
    assert_int_equal(p.dqk_chunk, 256);
    assert_int_equal(p.stages, 3);
    assert_int_equal(p.smem_bytes, 3 * (64 + 64) * 256 * 2 + spart);
    in.stream_q = 0;

    assert_int_equal(ffpa_plan_make(&in, &sm80, &p), FFPA_OK);
    assert_true(ffpa_plan_q_resident(&p));
    assert_int_equal(p.dqk_chunk, 256);
    assert_int_equal(p.stages, 2);
    assert_int_equal(p.smem_bytes, 64 * 512 * 2 + 2 * 64 * 256 * 2 + spart);

    assert_int_equal(ffpa_plan_make(&in, &sm86, &p), FFPA_OK);
    assert_false(ffpa_plan_q_resident(&p));
    assert_int_equal(p.dqk_chunk, 128);
    assert_int_equal(p.stages, 2);
    assert_int_equal(p.smem_bytes, 2 * (64 + 64) * 128 * 2 + spart);

    /* MLA 576 / 512: three 256-column chunks (the last a quarter full), Q resident. */
    in.dqk = 576;
    assert_int_equal(ffpa_plan_make(&in, &h100, &p), FFPA_OK);
    assert_int_equal(p.dqk_chunk, 256);
    assert_int_equal(p.n_qk_chunks, 3);
    assert_int_equal(p.stages, 3);
    assert_true(ffpa_plan_q_resident(&p));
    in.dqk = 512;

    /* D = 1024: whole-D halves (512 columns) on the H100, 256 on sm_80. */
    in.dqk = in.dv = 1024;
    assert_int_equal(ffpa_plan_make(&in, &h100, &p), FFPA_OK);
    assert_int_equal(p.dqk_chunk, 512);
    assert_int_equal(p.br, 32);
    assert_true(ffpa_plan_q_resident(&p));
    assert_int_equal(ffpa_plan_make(&in, &sm80, &p), FFPA_OK);
    assert_int_equal(p.dqk_chunk, 256);
    assert_int_equal(p.bc, 64);
    assert_true(ffpa_plan_q_resident(&p));

    /* D = 320: 64-column slabs in 4-warp blocks, two to a multiprocessor:
     * Q resident on the H100 (64 KiB); on the 99 KiB parts streamed (48 KiB)
     * because the resident block would leave room for one. */
    in.dqk = in.dv = 320;
    assert_int_equal(ffpa_plan_make(&in, &h100, &p), FFPA_OK);
    assert_int_equal(p.dqk_chunk, 64);
    assert_int_equal(p.stages, 3);
    assert_true(ffpa_plan_q_resident(&p));
    assert_int_equal(p.smem_bytes, 64 * 320 * 2 + 3 * 64 * 64 * 2);
    assert_int_equal(ffpa_plan_make(&in, &sm86, &p), FFPA_OK);
    assert_false(ffpa_plan_q_resident(&p));
    assert_int_equal(p.stages, 3);
    assert_int_equal(p.smem_bytes, 3 * (64 + 64) * 64 * 2);
    assert_true(2 * p.smem_bytes <= sm86.smem_per_sm);

    /* The knob reaches the planner through ffpa_plan_input_of: 0 streams
     * Q, 1 or unset keeps the default. */
    ffpa_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.dtype = FFPA_BF16;
    pb.batch = pb.hq = pb.hkv = 1;
    pb.nq = pb.nkv = 128;
    pb.dqk = pb.dv = 512;
    unsetenv("FFPA_GENERIC_Q_RESIDENT");
    assert_int_equal(ffpa_plan_input_of(&pb, 0).stream_q, 0);
    setenv("FFPA_GENERIC_Q_RESIDENT", "0", 1);
    assert_int_equal(ffpa_plan_input_of(&pb, 0).stream_q, 1);
    setenv("FFPA_GENERIC_Q_RESIDENT", "1", 1);
    assert_int_equal(ffpa_plan_input_of(&pb, 0).stream_q, 0);
    unsetenv("FFPA_GENERIC_Q_RESIDENT");

    /* The backward never reads the flag: it is 0 there. */
    in.backward = 1;
    assert_int_equal(ffpa_plan_make(&in, &h100, &p), FFPA_OK);
    assert_false(ffpa_plan_q_resident(&p));
}

static void test_plan_mla_and_options(void **state)
{
    (void)state;
    ffpa_device_limits lims[] = {h100_limits(), sm80_limits()};
    for (int l = 0; l < 2; ++l)
        for (int flags = 0; flags < 8; ++flags) {
            ffpa_plan_input in;
            memset(&in, 0, sizeof in);
            in.dtype = FFPA_BF16;
            in.batch = 2;
            in.hq = 128;
            in.hkv = 1;
            in.nq = flags & 4 ? 1 : 1000;
            in.nkv = 8192;
            in.dqk = 576;
            in.dv = 512;
            in.has_bias = flags & 1;
            in.has_dropout = (flags >> 1) & 1;
            in.varlen = (flags >> 2) & 1;
            in.causal = flags & 1;
            check_plan(&in, &lims[l]);
            in.backward = 1;
            check_plan(&in, &lims[l]);
        }
}

/* A GPU's limits as the planners see them: 1024 work-items, 48 KiB of local memory. */
static ffpa_device_limits gpu_limits(void)
{
    ffpa_device_limits lim = {0};
    lim.is_gpu = 1;
    lim.max_threads_per_block = 1024;
    lim.smem_per_block = 48 * 1024;
    return lim;
}

/* The register-tiled forward's tiles: 4 rows per work-item up to Dv = 512,
 * 2 above (O's registers stay at 128) and for queries of 16 rows or fewer
 * (a decode step in 32-row tiles would run 31 idle rows); refused where its local memory does
 * not fit, with its needs filled in for the message. */
static void test_plan_portable_tiled(void **state)
{
    (void)state;
    ffpa_device_limits lim = gpu_limits();
    ffpa_portable_tiles t;
    assert_int_equal(ffpa_plan_portable_tiled(&lim, 512, 17, &t), FFPA_OK);
    assert_int_equal(t.tr, 4);
    assert_int_equal(t.wg, 128);
    assert_int_equal(t.br, 32);
    assert_int_equal(t.bc, 64);
    assert_int_equal(t.dc, 64);
    /* 4 x (max(Q 32 x 64 + K 16 x 65 x 4, V 64 x 64) + P^T 64 x 36 + 32 x 16) */
    assert_int_equal(t.local_bytes, 36096);
    assert_int_equal(ffpa_plan_portable_tiled(&lim, 512, 16, &t), FFPA_OK);
    assert_int_equal(t.tr, 2);
    assert_int_equal(t.br, 16);
    assert_int_equal(ffpa_plan_portable_tiled(&lim, 64, 1, &t), FFPA_OK);
    assert_int_equal(t.tr, 2);
    assert_int_equal(ffpa_plan_portable_tiled(&lim, 513, 4096, &t), FFPA_OK);
    assert_int_equal(t.tr, 2);
    assert_int_equal(t.br, 16);
    assert_int_equal(t.local_bytes, 26880); /* 4 x (Q 16 x 64 + K 16 x 65 x 4 + P^T 64 x 20 + 16 x 16) */
    lim.smem_per_block = 26879;
    assert_int_equal(ffpa_plan_portable_tiled(&lim, 1024, 4096, &t), FFPA_ERR_UNSUPPORTED);
    assert_int_equal(t.local_bytes, 26880);
    /* CPUs: 32-column chunks (pocl compiles the unrolled chunk loop per
     * program); 4 x (max(Q 32 x 32 + K 8 x 65 x 4, V 64 x 64) + ...) and
     * 4 x (V 64 x 64 + P^T 64 x 20 + 16 x 16). */
    lim.is_gpu = 0;
    lim.smem_per_block = 1 << 20;
    assert_int_equal(ffpa_plan_portable_tiled(&lim, 512, 17, &t), FFPA_OK);
    assert_int_equal(t.dc, 32);
    assert_int_equal(t.local_bytes, 27648);
    assert_int_equal(ffpa_plan_portable_tiled(&lim, 1024, 4096, &t), FFPA_OK);
    assert_int_equal(t.local_bytes, 22528);
    lim.is_gpu = 1;
    lim.smem_per_block = 1 << 20;
    lim.max_threads_per_block = 64;
    assert_int_equal(ffpa_plan_portable_tiled(&lim, 64, 4096, &t), FFPA_ERR_UNSUPPORTED);
    assert_int_equal(t.wg, 128);
}

/* Packed heads (the OpenCL forward): where their work-groups' waves x key
 * tiles come below the unpacked call's (or equal, the packed grid covering
 * every compute unit); the H200's measured cases (docs/notes/opencl.md) on
 * its 132 multiprocessors, and pocl's two cpu threads. */
static void test_plan_packed_heads(void **state)
{
    (void)state;
    ffpa_device_limits h200 = gpu_limits();
    h200.sm_count = 132;
    /* Dense decode (no split), 64-row tiles: GQA 32/8 B=4 is one wave either way, 32 packed work-groups
     * on 132 multiprocessors: unpacked (0.97 against 1.11 ms); MLA Hq=128 B=32: 64 packed (1 wave)
     * against 4096 (32 waves): packed (1.16 against 27.8 ms). */
    assert_int_equal(ffpa_plan_packed_heads(&h200, 4, 32, 8, 1, 64, 64, 128, 0), 1);
    assert_int_equal(ffpa_plan_packed_heads(&h200, 32, 128, 1, 1, 64, 64, 64, 0), 128);
    /* The KV cache splits key tiles: GQA 32/8 B=8 (64 x 5 splits: 3 waves of 26 tiles, against 256 x 2:
     * 4 waves of 64; 0.68 against 1.61 ms), MLA Hq=16 B=8 (8 x 16: 1 wave of 8, against 128 x 3: 3 waves
     * of 43; 0.31 against 3.33), groups of 2 at B=32 (512 x 1: 4 waves, against 1024: 8; 1.53 against
     * 3.07): packed. */
    assert_int_equal(ffpa_plan_packed_heads(&h200, 8, 32, 8, 1, 64, 64, 128, 1), 4);
    assert_int_equal(ffpa_plan_packed_heads(&h200, 8, 16, 1, 1, 64, 64, 128, 1), 16);
    assert_int_equal(ffpa_plan_packed_heads(&h200, 32, 32, 16, 1, 64, 64, 64, 1), 2);
    ffpa_device_limits pocl = h200;
    pocl.sm_count = 2;
    assert_int_equal(ffpa_plan_packed_heads(&pocl, 2, 16, 1, 1, 16, 16, 64, 0), 16);
    /* 256 packed rows in 16 blocks against 16 heads' single blocks: a tie, every unit covered. */
    assert_int_equal(ffpa_plan_packed_heads(&pocl, 2, 16, 1, 16, 16, 16, 64, 0), 16);
    /* Not a grouped-query call, or more than 16 query rows: unpacked. */
    assert_int_equal(ffpa_plan_packed_heads(&pocl, 2, 16, 16, 1, 16, 16, 64, 0), 1);
    assert_int_equal(ffpa_plan_packed_heads(&pocl, 2, 16, 1, 17, 16, 16, 64, 0), 1);
    assert_int_equal(ffpa_plan_packed_heads(&pocl, 0, 16, 1, 1, 16, 16, 64, 0), 1);
}

/* The OpenCL KV cache's static split: two work-groups per compute unit, at
 * most 16 parts, none under 4 key tiles; a forced count capped at 16. */
static void test_plan_static_kv_splits(void **state)
{
    (void)state;
    ffpa_device_limits lim = gpu_limits();
    lim.sm_count = 132;
    assert_int_equal(ffpa_plan_static_kv_splits(&lim, 8, 128, 0), 16);   /* ceil(264 / 8) = 33, capped */
    assert_int_equal(ffpa_plan_static_kv_splits(&lim, 64, 128, 0), 5);   /* ceil(264 / 64) */
    assert_int_equal(ffpa_plan_static_kv_splits(&lim, 64, 13, 0), 3);    /* 13 tiles: 4 a split at least */
    assert_int_equal(ffpa_plan_static_kv_splits(&lim, 264, 1000, 0), 1); /* the device is full */
    assert_int_equal(ffpa_plan_static_kv_splits(&lim, 8, 3, 0), 1);      /* too short to split */
    assert_int_equal(ffpa_plan_static_kv_splits(&lim, 0, 100, 0), 1);
    assert_int_equal(ffpa_plan_static_kv_splits(&lim, 1000, 1, 5), 5);   /* forced, whatever the shapes */
    assert_int_equal(ffpa_plan_static_kv_splits(&lim, 1, 1, 40), 16);
}

/* The matrix forward on 16-row work-groups for decode: only where a KV
 * head's packed rows fit 16 and the work-groups (after the KV split) give
 * every compute unit two; at least two warp columns, the rule's above. The
 * cases are the H200 measurements the rule came from. */
static void test_plan_matrix_few_rows(void **state)
{
    (void)state;
    ffpa_device_limits lim = gpu_limits();
    lim.sm_count = 132;
    int wm = 0, wn = 0;
    /* B = 8, 8 KV heads, group 4, Nkv = 8192: 64 work-groups x 5 splits */
    assert_int_equal(ffpa_plan_matrix_few_rows(&lim, 4, 64, 128, 1, 1, &wm, &wn), 1);
    assert_true(wm == 1 && wn == 2);
    /* MLA B = 64, Hq = 16, Dv = 512 (the rule's two columns) */
    assert_int_equal(ffpa_plan_matrix_few_rows(&lim, 16, 64, 64, 1, 2, &wm, &wn), 1);
    assert_true(wm == 1 && wn == 2);
    assert_int_equal(ffpa_plan_matrix_few_rows(&lim, 16, 300, 64, 0, 4, &wm, &wn), 1); /* no split needed */
    assert_true(wm == 1 && wn == 4);
    /* B = 1, 8 KV heads, Nkv = 32768: 8 x 16 splits = 128 < 264: the rule */
    assert_int_equal(ffpa_plan_matrix_few_rows(&lim, 4, 8, 512, 1, 1, &wm, &wn), 0);
    assert_int_equal(ffpa_plan_matrix_few_rows(&lim, 16, 100, 512, 0, 1, &wm, &wn), 0); /* dense: no split */
    assert_int_equal(ffpa_plan_matrix_few_rows(&lim, 4, 64, 8, 1, 1, &wm, &wn), 0);     /* short: 2 splits */
    assert_int_equal(ffpa_plan_matrix_few_rows(&lim, 17, 1000, 128, 1, 1, &wm, &wn), 0); /* MLA Hq = 128 */
    assert_int_equal(ffpa_plan_matrix_few_rows(&lim, 0, 1000, 128, 1, 1, &wm, &wn), 0);
}

/* The matrix forward's geometry: one warp column up to Dv = 256, two up to
 * 512, four (32 rows) above, so O stays at 128 fp32 registers or fewer a
 * work-item; local memory within NVIDIA's 48 KiB; refused where it does not
 * fit, with its needs filled in. */
static void test_plan_matrix_forward(void **state)
{
    (void)state;
    ffpa_device_limits lim = gpu_limits();
    ffpa_matrix_tiles t;
    const int64_t dvs[] = {8, 64, 128, 200, 256, 264, 512, 520, 576, 600, 768, 1024};
    for (size_t i = 0; i < sizeof dvs / sizeof dvs[0]; ++i) {
        assert_int_equal(ffpa_plan_matrix_forward(&lim, dvs[i], 0, 0, &t), FFPA_OK);
        assert_true(t.dvb >= dvs[i] && t.dvb - dvs[i] < (int64_t)t.vc * t.wn);
        assert_int_equal(t.oc % t.vc, 0);
        assert_true(t.oc / 2 <= 128); /* O's registers per work-item */
        assert_int_equal(t.br, 16 * t.wm);
        assert_int_equal(t.bc % t.wn, 0);
        assert_true((t.bc / t.wn) % 16 == 0); /* whole n16 pairs of S per warp */
        assert_true(t.local_bytes <= 48 * 1024);
        assert_int_equal(t.wn, dvs[i] <= 256 ? 1 : dvs[i] <= 512 ? 2 : 4);
    }
    assert_int_equal(ffpa_plan_matrix_forward(&lim, 512, 0, 0, &t), FFPA_OK);
    assert_int_equal(t.local_bytes, 2 * 16384 + 8192 + 4 * 64 * 2); /* two slots, P, the row exchange */
    /* The tuning knob's geometries: all but 8 x 4 (two 16 KiB slots and 16
     * KiB of P) fit NVIDIA's 48 KiB and 1024 work-items (wm = 8 takes
     * 32-column chunks); other counts are refused as invalid. */
    const int wms[] = {1, 2, 4, 8}, wns[] = {1, 2, 4};
    for (size_t i = 0; i < 4; ++i)
        for (size_t j = 0; j < 3; ++j) {
            const int fits = !(wms[i] == 8 && wns[j] == 4);
            assert_int_equal(ffpa_plan_matrix_forward(&lim, 512, wms[i], wns[j], &t),
                             fits ? FFPA_OK : FFPA_ERR_UNSUPPORTED);
            assert_true(t.wm == wms[i] && t.wn == wns[j] && (t.local_bytes <= 48 * 1024) == fits);
            assert_int_equal(t.dc, wms[i] == 8 ? 32 : 64);
            assert_true(t.dvb >= 512 && t.oc % t.vc == 0);
        }
    assert_int_equal(ffpa_plan_matrix_forward(&lim, 512, 3, 2, &t), FFPA_ERR_INVALID_ARGUMENT);
    assert_int_equal(ffpa_plan_matrix_forward(&lim, 512, 4, 8, &t), FFPA_ERR_INVALID_ARGUMENT);
    assert_int_equal(ffpa_plan_matrix_forward(&lim, 512, 4, 0, &t), FFPA_ERR_INVALID_ARGUMENT);
    lim.smem_per_block = 2 * 16384 + 8192 + 4 * 64 * 2 - 1;
    assert_int_equal(ffpa_plan_matrix_forward(&lim, 512, 0, 0, &t), FFPA_ERR_UNSUPPORTED);
    lim.smem_per_block = 1 << 20;
    lim.max_threads_per_block = 128;
    assert_int_equal(ffpa_plan_matrix_forward(&lim, 128, 0, 0, &t), FFPA_OK); /* four warps */
    assert_int_equal(ffpa_plan_matrix_forward(&lim, 512, 0, 0, &t), FFPA_ERR_UNSUPPORTED);
}

/* The portable (OpenCL) kernels' tiles: the default where it fits, smaller
 * sets as local memory or the work-group shrink, each set within the
 * device's limits and keeping the kernels' divisibility rules; none below
 * the smallest. */
static void test_plan_portable_tiles(void **state)
{
    (void)state;
    ffpa_device_limits lim = gpu_limits();
    ffpa_portable_tiles t;
    assert_int_equal(ffpa_plan_portable(&lim, &t), FFPA_OK);
    assert_int_equal(t.wg, 128);
    assert_int_equal(t.br, 16);
    assert_int_equal(t.bc, 32);
    assert_int_equal(t.dc, 32);
    assert_int_equal(t.local_bytes, 14592); /* the forward: 4 x (512 + 1056 + 1024 + 2 x 528) */
    const size_t mems[] = {32768, 14591, 9000, 4096, 2000, 960, 959, 0};
    const int groups[] = {1024, 128, 64, 32, 31};
    for (size_t m = 0; m < sizeof mems / sizeof mems[0]; ++m)
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; ++g) {
            lim.smem_per_block = mems[m];
            lim.max_threads_per_block = groups[g];
            const ffpa_status st = ffpa_plan_portable(&lim, &t);
            if (mems[m] < 960 || groups[g] < 32) {
                assert_int_equal(st, FFPA_ERR_UNSUPPORTED);
                assert_int_equal(t.local_bytes, 960); /* the smallest set, for the error message */
                assert_int_equal(t.wg, 32);
                continue;
            }
            assert_int_equal(st, FFPA_OK);
            assert_true(t.local_bytes <= mems[m]);
            assert_true(t.wg <= groups[g]);
            const int tpr = t.wg / t.br, parts = t.wg / t.bc;
            assert_int_equal(t.wg % t.br, 0);
            assert_int_equal(t.bc % tpr, 0);
            assert_int_equal(t.dc % tpr, 0);
            assert_int_equal(t.dc % parts, 0);
            assert_true(t.br * (t.bc + 1) <= t.bc * (t.dc + 1)); /* dropped P fits the K chunk's memory */
        }
}

static void test_plan_rejects_bad_input(void **state)
{
    (void)state;
    ffpa_device_limits lim = h100_limits();
    ffpa_plan plan;
    ffpa_plan_input in;
    memset(&in, 0, sizeof in);
    in.dtype = FFPA_F16;
    in.batch = in.hq = in.hkv = 1;
    in.nq = in.nkv = 64;
    in.dqk = in.dv = 0;
    assert_int_equal(ffpa_plan_make(&in, &lim, &plan), FFPA_ERR_INVALID_ARGUMENT);
    in.dqk = in.dv = FFPA_MAX_HEAD_DIM + 1;
    assert_int_equal(ffpa_plan_make(&in, &lim, &plan), FFPA_ERR_INVALID_ARGUMENT);
    in.dqk = in.dv = 64;
    in.nq = 0;
    assert_int_equal(ffpa_plan_make(&in, &lim, &plan), FFPA_ERR_INVALID_ARGUMENT);
}

/* ffpa_plan_q_block on hand-made plans. */
static void test_plan_q_block_order(void **state)
{
    (void)state;
    ffpa_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.q_blocks = 5;
    plan.order = FFPA_ORDER_LINEAR;
    for (int64_t w = 0; w < 5; ++w)
        assert_int_equal(ffpa_plan_q_block(&plan, w), w);
    plan.order = FFPA_ORDER_LONGEST_FIRST;
    for (int64_t w = 0; w < 5; ++w)
        assert_int_equal(ffpa_plan_q_block(&plan, w), 4 - w);
    plan.q_blocks = 1;
    assert_int_equal(ffpa_plan_q_block(&plan, 0), 0);
}

/* ------------------------------------------------------------ fp16 / bf16 */

/* Independent decoders: the value an encoding denotes, in double. */
static double f16_value(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    double v;
    if (exp == 0x1F)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp((double)man, -24);
    else
        v = ldexp((double)(1024 + man), exp - 25);
    return sign ? -v : v;
}

static double bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * Round-to-nearest-even reference over the positive encodings of a format:
 * lo is the largest encoding whose value is <= x (values increase with the
 * bits), the result is the nearer of lo and lo + 1, ties to the even one.
 * The encoding after the largest finite one is infinity, which for rounding
 * counts as the next power of two (IEEE overflow rule), passed as inf_value.
 */
static uint16_t rne_reference(double x, double (*value)(uint16_t), uint16_t max_finite,
                              double inf_value)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a >= inf_value)
        return (uint16_t)(sign | (max_finite + 1));
    uint32_t lo = 0, hi = max_finite;
    if (a >= value(max_finite)) {
        lo = max_finite;
    } else {
        while (lo < hi) { /* largest encoding with value <= a */
            uint32_t mid = (lo + hi + 1) / 2;
            if (value((uint16_t)mid) <= a)
                lo = mid;
            else
                hi = mid - 1;
        }
    }
    double below = value((uint16_t)lo);
    double above = lo == max_finite ? inf_value : value((uint16_t)(lo + 1));
    uint32_t pick;
    if (a - below < above - a)
        pick = lo;
    else if (a - below > above - a)
        pick = lo + 1;
    else
        pick = (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | pick);
}

static float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void expect_f16(float f)
{
    uint16_t want = rne_reference(f, f16_value, 0x7BFF, 65536.0);
    uint16_t got = ffpa_f32_to_f16(f);
    if (got != want)
        fail_msg("f32_to_f16(%.9g = 0x%08x) = 0x%04x, expected 0x%04x", f, ffpa_f32_bits(f), got,
                 want);
}

static void expect_bf16(float f)
{
    uint16_t want = rne_reference(f, bf16_value, 0x7F7F, ldexp(1.0, 128));
    uint16_t got = ffpa_f32_to_bf16(f);
    if (got != want)
        fail_msg("f32_to_bf16(%.9g = 0x%08x) = 0x%04x, expected 0x%04x", f, ffpa_f32_bits(f),
                 got, want);
}


/* The split-KV schedule: longest first, every key tile covered by exactly
 * one split of at most tiles_per_split tiles, blocks within the shape-only
 * grid bound, an empty sequence still one block, mixed lengths balanced. */
static void test_kv_schedule(void **state)
{
    (void)state;
    const int32_t lens[] = {5, 32768, 0, 1000, 32768, 64, 17000, 1};
    const int64_t n = 8;
    ffpa_kv_sched_shape sh = {n, 8, 1, 64, 0, 32768, 264};
    ffpa_kv_sched s;
    assert_int_equal(ffpa_kv_sched_make(&sh, lens, -1, &s), 0);
    int64_t work = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t b = s.seq[k], tiles = ffpa_kv_key_tiles(s.len[b], 64);
        const int64_t splits = ffpa_kv_splits(tiles, s.tiles_per_split);
        if (k > 0)
            assert_true(s.len[s.seq[k - 1]] >= s.len[b]); /* longest first */
        assert_int_equal(s.first[k + 1] - s.first[k], splits * 8);
        assert_true(splits * s.tiles_per_split >= tiles && (splits - 1) * s.tiles_per_split < tiles + (tiles == 0));
        work += tiles * 8;
    }
    assert_int_equal(s.blocks, s.first[n]);
    assert_true(s.blocks <= ffpa_kv_grid_bound(264, n * 8, 1));
    /* Balanced: the blocks are about the target, each at most tps tiles. */
    assert_true(s.blocks >= 264 / 2 && work <= s.blocks * s.tiles_per_split);
    ffpa_kv_sched_free(&s);
    /* Appended keys count, the capacity clips, uniform lengths need no array. */
    assert_int_equal(ffpa_kv_seq_len(lens, -1, 0, 4, 100), 9);
    assert_int_equal(ffpa_kv_seq_len(lens, -1, 1, 4, 100), 100);
    assert_int_equal(ffpa_kv_seq_len(NULL, 77, 3, 0, 100), 77);
    assert_int_equal(ffpa_kv_tiles_per_split(10, 1000, 10), FFPA_KV_MIN_TILES_PER_SPLIT);
    /* A sequence within 1/8 of the balanced split is not split (128 x 128
     * tiles over 132 blocks: 125 + 3 would only add a merge); a longer one is. */
    assert_int_equal(ffpa_kv_tiles_per_split(128 * 128, 132, 128), 128);
    assert_int_equal(ffpa_kv_tiles_per_split(128 * 128, 132, 512), 125);
}

static void test_f16_decode_and_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = ffpa_f16_to_f32((uint16_t)h);
        double want = f16_value((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(f));
            uint16_t back = ffpa_f32_to_f16(f);
            assert_true((back & 0x7C00) == 0x7C00 && (back & 0x3FF) != 0); /* still NaN */
            assert_int_equal(back & 0x8000, h & 0x8000);
            continue;
        }
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("f16_to_f32(0x%04x) = %.9g, expected %.9g", h, f, want);
        if (ffpa_f32_to_f16(f) != h)
            fail_msg("0x%04x -> %.9g -> 0x%04x does not round-trip", h, f, ffpa_f32_to_f16(f));
    }
}

static void test_bf16_decode_and_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = ffpa_bf16_to_f32((uint16_t)h);
        if (isnan(f)) {
            uint16_t back = ffpa_f32_to_bf16(f);
            assert_true((back & 0x7F80) == 0x7F80 && (back & 0x7F) != 0);
            assert_int_equal(back & 0x8000, h & 0x8000);
            continue;
        }
        assert_int_equal(ffpa_f32_bits(f), (uint32_t)h << 16);
        assert_int_equal(ffpa_f32_to_bf16(f), h);
    }
}

static void test_f16_round_to_nearest_even(void **state)
{
    (void)state;
    /* Every tie between neighbouring f16 values (exact in f32), and one f32
     * ulp either side of it, for both signs. */
    for (uint32_t h = 0; h < 0x7BFF; ++h) {
        double mid = (f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2.0;
        float f = (float)mid;
        assert_true((double)f == mid);
        uint32_t u = ffpa_f32_bits(f);
        const float probes[] = {f, bits_to_f32(u + 1), u ? bits_to_f32(u - 1) : f};
        for (int i = 0; i < 3; ++i) {
            expect_f16(probes[i]);
            expect_f16(-probes[i]);
        }
    }
    /* A spread of all f32 bit patterns (odd step: every exponent, many mantissas). */
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
        float f = bits_to_f32((uint32_t)u);
        if (!isnan(f))
            expect_f16(f);
    }
    /* Named cases: overflow, largest finite, subnormals, underflow ties. */
    assert_int_equal(ffpa_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(ffpa_f32_to_f16(65519.996f), 0x7BFF);
    assert_int_equal(ffpa_f32_to_f16(65520.0f), 0x7C00);
    assert_int_equal(ffpa_f32_to_f16(-65520.0f), 0xFC00);
    assert_int_equal(ffpa_f32_to_f16(1e30f), 0x7C00);
    assert_int_equal(ffpa_f32_to_f16(INFINITY), 0x7C00);
    assert_int_equal(ffpa_f32_to_f16(-INFINITY), 0xFC00);
    assert_int_equal(ffpa_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(ffpa_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);     /* tie to even: 0 */
    assert_int_equal(ffpa_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);     /* tie to even: 2 */
    assert_int_equal(ffpa_f32_to_f16(ldexpf(1.0f, -26)), 0x0000);
    assert_int_equal(ffpa_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);     /* smallest normal */
    assert_int_equal(ffpa_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400); /* rounds up to normal */
    assert_int_equal(ffpa_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(ffpa_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3C00); /* tie to even */
    assert_int_equal(ffpa_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3C02);
}

static void test_bf16_round_to_nearest_even(void **state)
{
    (void)state;
    const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    for (uint32_t hi = 0; hi < 65536; ++hi)
        for (int i = 0; i < 6; ++i) {
            float f = bits_to_f32(hi << 16 | lows[i]);
            if (!isnan(f))
                expect_bf16(f);
        }
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
        float f = bits_to_f32((uint32_t)u);
        if (!isnan(f))
            expect_bf16(f);
    }
    assert_int_equal(ffpa_f32_to_bf16(bits_to_f32(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX -> inf */
    assert_int_equal(ffpa_f32_to_bf16(bits_to_f32(0x7F7F7FFFu)), 0x7F7F);
    assert_int_equal(ffpa_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3F80); /* tie to even */
    assert_int_equal(ffpa_f32_to_bf16(1.0f + ldexpf(3.0f, -8)), 0x3F82);
    assert_int_equal(ffpa_f32_to_bf16(bits_to_f32(0x00008000u)), 0x0000); /* subnormal tie */
    assert_int_equal(ffpa_f32_to_bf16(bits_to_f32(0x00018000u)), 0x0002);
}

static void test_nan_stays_nan(void **state)
{
    (void)state;
    const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFC00000u,
                             0xFF800001u, 0x7F802000u, 0x7FBFE000u};
    for (int i = 0; i < 7; ++i) {
        float f = bits_to_f32(nans[i]);
        uint16_t h = ffpa_f32_to_f16(f), b = ffpa_f32_to_bf16(f);
        assert_true(isnan(ffpa_f16_to_f32(h)));
        assert_true(isnan(ffpa_bf16_to_f32(b)));
        assert_int_equal(h >> 15, nans[i] >> 31);
        assert_int_equal(b >> 15, nans[i] >> 31);
    }
}

static void test_load_store(void **state)
{
    (void)state;
    uint16_t half[3];
    float single[3];
    const float values[] = {1.5f, -2.25f, 1e-3f};
    for (int i = 0; i < 3; ++i) {
        ffpa_store_f32(half, FFPA_F16, i, values[i]);
        assert_int_equal(half[i], ffpa_f32_to_f16(values[i]));
        assert_true(ffpa_load_f32(half, FFPA_F16, i) == ffpa_f16_to_f32(half[i]));
        ffpa_store_f32(half, FFPA_BF16, i, values[i]);
        assert_int_equal(half[i], ffpa_f32_to_bf16(values[i]));
        assert_true(ffpa_load_f32(half, FFPA_BF16, i) == ffpa_bf16_to_f32(half[i]));
        ffpa_store_f32(single, FFPA_F32, i, values[i]);
        assert_true(ffpa_load_f32(single, FFPA_F32, i) == values[i]);
    }
}

/* ------------------------------------------------------------ Philox, dropout */

static void expect_philox(ffpa_u32x4 ctr, uint32_t k0, uint32_t k1, ffpa_u32x4 want)
{
    ffpa_u32x4 got = ffpa_philox4x32_10(ctr, k0, k1);
    if (got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w)
        fail_msg("philox4x32_10 = %08x %08x %08x %08x, expected %08x %08x %08x %08x", got.x,
                 got.y, got.z, got.w, want.x, want.y, want.z, want.w);
}

/* Known-answer vectors of Random123 (kat_vectors, philox4x32 10 rounds). */
static void test_philox_known_answers(void **state)
{
    (void)state;
    expect_philox((ffpa_u32x4){0, 0, 0, 0}, 0, 0,
                  (ffpa_u32x4){0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
    expect_philox((ffpa_u32x4){0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                  0xffffffffu, 0xffffffffu,
                  (ffpa_u32x4){0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
    expect_philox((ffpa_u32x4){0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                  0xa4093822u, 0x299f31d0u,
                  (ffpa_u32x4){0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

static void test_dropout_mask_definition(void **state)
{
    (void)state;
    const uint64_t seed = 0x0123456789ABCDEFull, offset = 5;
    const int64_t hq = 6;
    for (int64_t j = 0; j < 11; ++j) {
        /* counter = {j >> 2, i, lo32(stream), hi32(stream)}, key = seed halves. */
        uint64_t stream = offset + 2 * (uint64_t)hq + 3;
        ffpa_u32x4 ctr = {(uint32_t)(j >> 2), 9u, (uint32_t)stream, (uint32_t)(stream >> 32)};
        ffpa_u32x4 words = ffpa_philox4x32_10(ctr, 0x89ABCDEFu, 0x01234567u);
        ffpa_u32x4 via = ffpa_dropout_words(seed, offset, hq, 2, 3, 9, j);
        assert_memory_equal(&words, &via, sizeof words);
        uint32_t word = ffpa_u32x4_at(words, (int)(j & 3));
        uint32_t threshold = ffpa_dropout_threshold(0.5);
        assert_int_equal(ffpa_dropout_keep(seed, offset, threshold, hq, 2, 3, 9, j),
                         word >= threshold);
    }
    /* Advancing offset by B*Hq gives the next call fresh streams: (offset + hq, b = 0)
     * is the same stream as (offset, b = 1). */
    for (int64_t j = 0; j < 64; ++j)
        assert_int_equal(ffpa_dropout_keep(seed, offset + hq, 0x80000000u, hq, 0, 2, 4, j),
                         ffpa_dropout_keep(seed, offset, 0x80000000u, hq, 1, 2, 4, j));
    /* Thresholds. */
    assert_int_equal(ffpa_dropout_threshold(0.0), 0u);
    assert_int_equal(ffpa_dropout_threshold(0.5), 0x80000000u);
    assert_int_equal(ffpa_dropout_threshold(0.25), 0x40000000u);
    assert_int_equal(ffpa_dropout_threshold(0.9999999999999), 0xFFFFFFFFu);
    assert_int_equal(ffpa_dropout_threshold(1.0), 0xFFFFFFFFu);
}

static void test_dropout_keep_rate(void **state)
{
    (void)state;
    const double rates[] = {0.0, 0.1, 0.5, 0.9};
    for (int r = 0; r < 4; ++r) {
        uint32_t threshold = ffpa_dropout_threshold(rates[r]);
        int64_t kept = 0, total = 0;
        for (int64_t b = 0; b < 2; ++b)
            for (int64_t h = 0; h < 4; ++h)
                for (int64_t i = 0; i < 64; ++i)
                    for (int64_t j = 0; j < 256; ++j) {
                        kept += ffpa_dropout_keep(42, 7, threshold, 4, b, h, i, j);
                        ++total;
                    }
        double rate = (double)kept / (double)total;
        double want = 1.0 - rates[r];
        double sigma = sqrt(rates[r] * (1.0 - rates[r]) / (double)total);
        if (fabs(rate - want) > 5.0 * sigma + 1e-12)
            fail_msg("keep rate %.5f for p = %.2f, expected %.5f +- %.5f", rate, rates[r], want,
                     5.0 * sigma);
    }
    /* Different heads and seeds give different masks. */
    int same_head = 0, same_seed = 0;
    uint32_t half = ffpa_dropout_threshold(0.5);
    for (int64_t j = 0; j < 256; ++j) {
        same_head += ffpa_dropout_keep(1, 0, half, 4, 0, 0, 0, j) ==
                     ffpa_dropout_keep(1, 0, half, 4, 0, 1, 0, j);
        same_seed += ffpa_dropout_keep(1, 0, half, 4, 0, 0, 0, j) ==
                     ffpa_dropout_keep(2, 0, half, 4, 0, 0, 0, j);
    }
    assert_true(same_head > 80 && same_head < 176);
    assert_true(same_seed > 80 && same_seed < 176);
}

/* ------------------------------------------------------------ environment */

static void test_env_string(void **state)
{
    (void)state;
    unsetenv("FFPA_TEST_ENV_X");
    assert_null(ffpa_env_string("FFPA_TEST_ENV_X"));
    setenv("FFPA_TEST_ENV_X", "", 1);
    assert_null(ffpa_env_string("FFPA_TEST_ENV_X"));
    setenv("FFPA_TEST_ENV_X", "cuda", 1);
    assert_string_equal(ffpa_env_string("FFPA_TEST_ENV_X"), "cuda");
    unsetenv("FFPA_TEST_ENV_X");
}

static void test_env_bool(void **state)
{
    (void)state;
    const char *truthy[] = {"1", "true", "TRUE", "Yes", "on"};
    const char *falsy[] = {"0", "false", "False", "NO", "off"};
    for (int i = 0; i < 5; ++i) {
        int bad = 0;
        setenv("FFPA_TEST_ENV_B", truthy[i], 1);
        assert_int_equal(ffpa_env_bool("FFPA_TEST_ENV_B", 0, &bad), 1);
        setenv("FFPA_TEST_ENV_B", falsy[i], 1);
        assert_int_equal(ffpa_env_bool("FFPA_TEST_ENV_B", 1, &bad), 0);
        assert_int_equal(bad, 0);
    }
    int bad = 0;
    setenv("FFPA_TEST_ENV_B", "maybe", 1);
    assert_int_equal(ffpa_env_bool("FFPA_TEST_ENV_B", 1, &bad), 1);
    assert_int_equal(bad, 1);
    bad = 0;
    assert_int_equal(ffpa_env_bool("FFPA_TEST_ENV_B", 0, NULL), 0); /* NULL bad is fine */
    unsetenv("FFPA_TEST_ENV_B");
    assert_int_equal(ffpa_env_bool("FFPA_TEST_ENV_B", 1, &bad), 1);
    assert_int_equal(ffpa_env_bool("FFPA_TEST_ENV_B", 0, &bad), 0);
    assert_int_equal(bad, 0);
}

static void test_env_long(void **state)
{
    (void)state;
    int bad = 0;
    setenv("FFPA_TEST_ENV_L", "42", 1);
    assert_int_equal(ffpa_env_long("FFPA_TEST_ENV_L", 7, 0, 100, &bad), 42);
    setenv("FFPA_TEST_ENV_L", "-3", 1);
    assert_int_equal(ffpa_env_long("FFPA_TEST_ENV_L", 7, -10, 100, &bad), -3);
    assert_int_equal(bad, 0);
    const char *rejected[] = {"101", "-11", "12x", "x12", "1.5", " ", "99999999999999999999999"};
    for (int i = 0; i < 7; ++i) {
        bad = 0;
        setenv("FFPA_TEST_ENV_L", rejected[i], 1);
        assert_int_equal(ffpa_env_long("FFPA_TEST_ENV_L", 7, -10, 100, &bad), 7);
        if (!bad)
            fail_msg("'%s' was not flagged as bad", rejected[i]);
    }
    bad = 0;
    unsetenv("FFPA_TEST_ENV_L");
    assert_int_equal(ffpa_env_long("FFPA_TEST_ENV_L", 7, 0, 100, &bad), 7);
    assert_int_equal(bad, 0);
    setenv("FFPA_TEST_ENV_L", "", 1); /* empty is unset */
    assert_int_equal(ffpa_env_long("FFPA_TEST_ENV_L", 7, 0, 100, &bad), 7);
    assert_int_equal(bad, 0);
    unsetenv("FFPA_TEST_ENV_L");
}

static void test_path_list(void **state)
{
    (void)state;
    char buf[64];
    const char *list = "/a/b::/c:";
    assert_int_equal(ffpa_path_list_entry(list, 0, buf, sizeof buf), 1);
    assert_string_equal(buf, "/a/b");
    assert_int_equal(ffpa_path_list_entry(list, 1, buf, sizeof buf), 1);
    assert_string_equal(buf, "/c");
    assert_int_equal(ffpa_path_list_entry(list, 2, buf, sizeof buf), 0);
    assert_int_equal(ffpa_path_list_entry(":::", 0, buf, sizeof buf), 0);
    assert_int_equal(ffpa_path_list_entry("", 0, buf, sizeof buf), 0);
    assert_int_equal(ffpa_path_list_entry(NULL, 0, buf, sizeof buf), 0);
    assert_int_equal(ffpa_path_list_entry("single", 0, buf, sizeof buf), 1);
    assert_string_equal(buf, "single");
    /* Truncated to the buffer, always NUL-terminated. */
    char small[4];
    memset(small, 'z', sizeof small);
    assert_int_equal(ffpa_path_list_entry("/long/path", 0, small, sizeof small), 1);
    assert_int_equal(small[3], '\0');
    assert_int_equal(ffpa_path_list_entry("/x", 0, small, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_h100),
        cmocka_unit_test(test_plan_sm80),
        cmocka_unit_test(test_plan_cpu),
        cmocka_unit_test(test_plan_q_resident),
        cmocka_unit_test(test_plan_mla_and_options),
        cmocka_unit_test(test_plan_rejects_bad_input),
        cmocka_unit_test(test_plan_portable_tiles),
        cmocka_unit_test(test_plan_portable_tiled),
        cmocka_unit_test(test_plan_packed_heads),
        cmocka_unit_test(test_plan_static_kv_splits),
        cmocka_unit_test(test_plan_matrix_forward),
        cmocka_unit_test(test_plan_matrix_few_rows),
        cmocka_unit_test(test_plan_q_block_order),
        cmocka_unit_test(test_kv_schedule),
        cmocka_unit_test(test_f16_decode_and_round_trip),
        cmocka_unit_test(test_bf16_decode_and_round_trip),
        cmocka_unit_test(test_f16_round_to_nearest_even),
        cmocka_unit_test(test_bf16_round_to_nearest_even),
        cmocka_unit_test(test_nan_stays_nan),
        cmocka_unit_test(test_load_store),
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_dropout_mask_definition),
        cmocka_unit_test(test_dropout_keep_rate),
        cmocka_unit_test(test_env_string),
        cmocka_unit_test(test_env_bool),
        cmocka_unit_test(test_env_long),
        cmocka_unit_test(test_path_list),
    };
    return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}
