/*
 * The generic (cuda / hip) backward's host-side choices (backends/gpu/bwd/
 * bwd_host.h: choose_tiles, tiles_label): which dK/dV kernel and ring depth,
 * the gradients kept in registers, Q held for the dK phase, dQ added by the
 * dK/dV kernel (no dQ kernel), on the shared-memory limits of an H100, an
 * A100, a ~100 KiB part (sm_86 / 89 / 120) and a 64 KiB one, with a tuned
 * choice, and under the A/B knobs. Each expectation is the label the GPU runs
 * printed for that part (docs/notes/backward.md, 2026-11-27 fifth session).
 * Also the swizzle algebra the backward's ldmatrix addressing rests on
 * (bwd_mma.cuh swz_addr: steps along k and across n-tile pairs by XOR).
 * Host code only (nvcc, for the arch layer's types): no GPU needed.
 */
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
}
#include <stdlib.h>
#include <string.h>

#include "arch_sm80.cuh"

#include "bwd/bwd_host.h"

using namespace ffpa::bwd;

namespace {

struct Part {
    size_t smem_block, smem_sm; /* opt-in shared memory per block, per multiprocessor */
};
const Part kH100 = {232448, 233472};
const Part kA100 = {166912, 167936};
const Part kSm86 = {101376, 102400};
const Part kLds64 = {65536, 65536};

ffpa_problem problem(int d, int deterministic = 0, int dbias = 0, ffpa_grad_accum acc = FFPA_GRAD_ACCUM_F32)
{
    ffpa_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.dtype = FFPA_BF16;
    pb.batch = 1;
    pb.hq = pb.hkv = 8;
    pb.nq = pb.nkv = pb.total_q = pb.total_k = 4096;
    pb.dqk = pb.dv = d;
    pb.deterministic = deterministic;
    pb.has_dbias = dbias;
    pb.grad_accum = acc;
    return pb;
}

/* The label of what choose_tiles picks for pb on part (plan: a tuned choice). */
void expect(const ffpa_problem &pb, const Part &part, const char *want, const ffpa_plan *plan = nullptr)
{
    ffpa_plan none;
    memset(&none, 0, sizeof none);
    host::Tiles t;
    char err[256] = "", label[128];
    assert_int_equal(host::choose_tiles(&pb, part.smem_block, part.smem_sm, plan ? *plan : none, "test", t, err,
                                        sizeof err),
                     FFPA_OK);
    host::tiles_label(t, label, sizeof label);
    /* The row-statistics buffers' bound (bwd_common.cuh kStatBufs). */
    if (t.dkdv_stages > kMaxStages)
        fail_msg("D=%lld/%lld: a %d-slot ring (kStatBufs assumes <= %d)", (long long)pb.dqk, (long long)pb.dv,
                 t.dkdv_stages, kMaxStages);
    if (strcmp(label, want) != 0)
        fail_msg("D=%lld/%lld on %zu B a block: got \"%s\", want \"%s\"", (long long)pb.dqk, (long long)pb.dv,
                 part.smem_block, label, want);
}

ffpa_problem causal(ffpa_problem pb)
{
    pb.causal = 1;
    return pb;
}

/* H100: 64-key kernel; at D <= 128 gradients in registers, Q held (one
 * more slot), the plain twin for calls without softcap, bias, ALiBi or
 * dropout; dQ from the dK/dV kernel; above 1152 (Dqk + Dv) K/V streamed
 * beside the 128-row tiles, or, causal, 32-key tiles. */
void test_h100(void **)
{
    expect(problem(64), kH100, "bwd dkdv kv128 regs plain s4 q-held, dq atomic");
    expect(problem(48), kH100, "bwd dkdv kv128 regs plain s4 q-held, dq atomic");
    expect(problem(72), kH100, "bwd dkdv kv128 2d regs plain s4 q-held, dq atomic");
    expect(problem(128), kH100, "bwd dkdv kv128 2d regs plain s4 q-held, dq atomic");
    ffpa_problem variant = problem(128);
    variant.softcap = 30.0f;
    expect(variant, kH100, "bwd dkdv kv64 regs s4 q-held, dq atomic");
    variant = problem(128);
    variant.dropout_p = 0.1f;
    expect(variant, kH100, "bwd dkdv kv64 regs s4 q-held, dq atomic");
    static const float slopes[8] = {0};
    variant = problem(64);
    variant.alibi = slopes;
    expect(variant, kH100, "bwd dkdv kv64 regs s4 q-held, dq atomic");
    variant = problem(64);
    variant.has_bias = 1;
    expect(variant, kH100, "bwd dkdv kv64 regs s4 q-held, dq atomic");
    /* D in (128, 256], plain: 64-key blocks of 64-row tiles, dK/dV in registers. */
    expect(problem(256), kH100, "bwd dkdv kv64 2d regs plain s4 q-held, dq atomic");
    expect(causal(problem(192)), kH100, "bwd dkdv kv64 2d regs plain s4 q-held, dq atomic");
    expect(problem(256, 1), kH100, "bwd dkdv kv64 s3, dq big s3");
    variant = problem(256);
    variant.softcap = 30.0f;
    expect(variant, kH100, "bwd dkdv kv64 s3, dq atomic");
    expect(problem(512), kH100, "bwd dkdv kv64 plain s2, dq atomic");
    /* Above 256, a variant call keeps the full kernel. */
    ffpa_problem variant512 = problem(512);
    variant512.dropout_p = 0.1f;
    expect(variant512, kH100, "bwd dkdv kv64 s2, dq atomic");
    expect(causal(problem(512)), kH100, "bwd dkdv kv64 plain s2, dq atomic");
    expect(problem(768), kH100, "bwd dkdv stream s3, dq atomic");
    expect(problem(1024), kH100, "bwd dkdv stream s3, dq atomic");
    expect(causal(problem(768)), kH100, "bwd dkdv kv32 s3, dq atomic");
    expect(causal(problem(1024)), kH100, "bwd dkdv kv32 s2, dq atomic");
}

/* The dQ kernel stays where the additions' order must not vary, where they
 * would be rounded to the output dtype, and where dbias needs its dS tile. */
void test_split_launch(void **)
{
    const char *want = "bwd dkdv kv64 regs s4 q-held, dq big regs s3";
    expect(problem(128, 1), kH100, want);
    expect(problem(128, 0, 1), kH100, want);
    expect(problem(128, 0, 0, FFPA_GRAD_ACCUM_OUTPUT), kH100, want);
    expect(problem(512, 1), kH100, "bwd dkdv kv64 s2, dq big s3");
}

/* A100: no room for the held slot at D = 128. */
void test_a100(void **)
{
    expect(problem(128), kA100, "bwd dkdv kv128 2d regs plain s4 q-held, dq atomic");
    expect(problem(256), kA100, "bwd dkdv kv64 2d regs plain s2, dq atomic");
    expect(problem(512), kA100, "bwd dkdv stream s2, dq atomic");
    expect(causal(problem(512)), kA100, "bwd dkdv kv32 s2, dq atomic");
    expect(problem(1024), kA100, "bwd dkdv stream s2, dq atomic");
    expect(causal(problem(1024)), kA100, "bwd dkdv stream s2, dq atomic");
}

/* ~100 KiB parts without a table: the small configuration at 2 stages (two
 * blocks a multiprocessor) at every D, as the sm_86 / 89 tables chose;
 * a tuned choice still wins. */
void test_100k_parts(void **)
{
    expect(problem(64), kSm86, "bwd dkdv small regs s2, dq atomic");
    for (int d : {128, 256, 512, 1024})
        expect(problem(d), kSm86, "bwd dkdv small s2, dq atomic");
    ffpa_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.bwd_dkdv = FFPA_BWD_DKDV_KV32;
    expect(problem(64), kSm86, "bwd dkdv kv32 s2, dq atomic", &plan);
}

/* 64 KiB of LDS (gfx90a / gfx942 / gfx1100): no depth leaves room for two
 * blocks, so the deepest that fits one. */
void test_64k_parts(void **)
{
    expect(problem(64), kLds64, "bwd dkdv small regs s3, dq atomic");
    expect(problem(256), kLds64, "bwd dkdv small s3, dq atomic");
    expect(problem(256, 1), kLds64, "bwd dkdv small s3, dq small s3");
}

/* The A/B knobs, one at a time; malformed values are ignored. */
void test_knobs(void **)
{
    const struct {
        const char *name, *value, *want;
    } cases[] = {{"FFPA_BWD_DQ_ATOMIC", "0", "bwd dkdv kv64 regs s4 q-held, dq big regs s3"},
                 {"FFPA_BWD_HOLD_Q", "0", "bwd dkdv kv128 2d regs plain s3, dq atomic"},
                 {"FFPA_BWD_KV128_WIDE", "0", "bwd dkdv kv64 regs plain s4 q-held, dq atomic"},
                 {"FFPA_BWD_RESIDENT", "0", "bwd dkdv kv64 plain s3, dq atomic"},
                 {"FFPA_BWD_PLAIN", "0", "bwd dkdv kv64 regs s4 q-held, dq atomic"},
                 {"FFPA_BWD_DQ_ATOMIC", "banana", "bwd dkdv kv128 2d regs plain s4 q-held, dq atomic"}};
    for (const auto &c : cases) {
        setenv(c.name, c.value, 1);
        expect(problem(128), kH100, c.want);
        unsetenv(c.name);
    }
    setenv("FFPA_BWD_KV128", "0", 1);
    expect(problem(64), kH100, "bwd dkdv kv64 regs plain s4 q-held, dq atomic");
    unsetenv("FFPA_BWD_KV128");
    /* 128-key blocks only for the plain dQ-adding kernel. */
    setenv("FFPA_BWD_PLAIN", "0", 1);
    expect(problem(64), kH100, "bwd dkdv kv64 regs s4 q-held, dq atomic");
    unsetenv("FFPA_BWD_PLAIN");
    expect(problem(64, 1), kH100, "bwd dkdv kv64 regs s4 q-held, dq big regs s3");
    expect(problem(64), kA100, "bwd dkdv kv128 regs plain s4 q-held, dq atomic");
    setenv("FFPA_BWD_HOLD_Q", "0", 1);
    expect(problem(64), kH100, "bwd dkdv kv128 regs plain s3, dq atomic");
    unsetenv("FFPA_BWD_HOLD_Q");
    for (const char *knob : {"FFPA_BWD_KV64_WIDE", "FFPA_BWD_RESIDENT"}) {
        setenv(knob, "0", 1);
        expect(problem(256), kH100, "bwd dkdv kv64 plain s3, dq atomic");
        unsetenv(knob);
    }
    setenv("FFPA_BWD_PLAIN", "0", 1);
    expect(problem(256), kH100, "bwd dkdv kv64 s3, dq atomic");
    expect(problem(512), kH100, "bwd dkdv kv64 s2, dq atomic");
    unsetenv("FFPA_BWD_PLAIN");
    setenv("FFPA_BWD_HOLD_Q", "0", 1);
    expect(problem(256), kH100, "bwd dkdv kv64 2d regs plain s4, dq atomic");
    unsetenv("FFPA_BWD_HOLD_Q");
    setenv("FFPA_BWD_STREAM", "0", 1);
    expect(problem(1024), kH100, "bwd dkdv kv32 s2, dq atomic");
    ffpa_plan plan; /* a tuned choice of StreamCfg still holds */
    memset(&plan, 0, sizeof plan);
    plan.bwd_dkdv = FFPA_BWD_DKDV_STREAM;
    expect(problem(1024), kH100, "bwd dkdv stream s3, dq atomic", &plan);
    unsetenv("FFPA_BWD_STREAM");
}

/* Less than the small configuration's 2-stage ring: refused, saying so. */
void test_too_small(void **)
{
    const ffpa_problem pb = problem(128);
    ffpa_plan none;
    memset(&none, 0, sizeof none);
    host::Tiles t;
    char err[256] = "";
    assert_int_equal(host::choose_tiles(&pb, 32768, 32768, none, "test", t, err, sizeof err), FFPA_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "bytes of shared memory per block"));
}

/* swz_addr is the slab layout of smem_tile.cuh (row r, 16-byte piece c at
 * element r * 64 + ((c ^ (r % 8)) * 8)), and the XOR steps the warp
 * functions take hold for every row: piece 2 k + b = piece b XOR (k << 5)
 * (k-steps), and from a base piece c0 that is a multiple of 4 (a warp's
 * m0 / 8 or n0 / 8), piece c0 + 2 np + b = piece c0 + b XOR (np << 5). */
void test_swizzle_steps(void **)
{
    for (uint32_t base : {0u, 128u * 5, 65536u + 2048u})
        for (int row = 0; row < 256; ++row)
            for (int c = 0; c < 8; ++c) {
                const uint32_t elem = (uint32_t)(row * 64 + ((c ^ (row & 7)) << 3));
                assert_int_equal(swz_addr(base, row, c), base + 2 * elem);
                assert_int_equal(swz_addr(base, row, c), swz_addr(base, row, c & 1) ^ ((uint32_t)(c >> 1) << 5));
                const int c0 = c & 4, np = (c >> 1) & 1;
                assert_int_equal(swz_addr(base, row, c), swz_addr(base, row, c0 + (c & 1)) ^ ((uint32_t)np << 5));
            }
}

} /* namespace */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h100),       cmocka_unit_test(test_split_launch), cmocka_unit_test(test_a100),
        cmocka_unit_test(test_100k_parts), cmocka_unit_test(test_64k_parts),    cmocka_unit_test(test_knobs),
        cmocka_unit_test(test_too_small),  cmocka_unit_test(test_swizzle_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
