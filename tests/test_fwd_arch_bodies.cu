/*
 * The generic forward's entry points compile no body for a tile whose
 * least shared memory (fwd_min_smem) is more than the architecture's blocks
 * get (backends/cuda/fwd_kernels.cuh, arch_smem_per_block); such a kernel
 * traps. This holds only while the planner never picks such a tile on such
 * a part: every plan over a sweep of head dims, sequence lengths, causal
 * and MLA-shaped calls, on the limits of each architecture built, must land
 * on an instantiation that has its body there, and the planner's shared
 * memory must be the instantiation's layout (fwd_smem_layout; the launchers
 * refuse a call where they disagree). Also the launchers' choice of a
 * tile's plain twin. Host code only (nvcc, for the instantiation table's
 * types): no GPU needed.
 */
/* Before cmocka.h, whose fail() macro would take fwd_host.h's fail(). */
#include "fwd_kernels.cuh"
#include "fwd_host.h"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
}
#include <stdlib.h>
#include <string.h>

#include "plan.h"

namespace {

using namespace ffpa;
using T = arch::bf16;

struct Inst {
    int dv, br, bc, chunk, warps;
    size_t min_smem;
    size_t (*smem)(int q_resident, int qk_chunks, int stages);
};

template <class Cfg> constexpr Inst inst()
{
    return Inst{Cfg::kDv, Cfg::kBr, Cfg::kBc, Cfg::kCols, Cfg::kWM * Cfg::kWN, fwd_min_smem<Cfg>(), &fwd_smem_bytes<Cfg>};
}

/* The instantiations of fwd_inst_<dtype>_<small|large>.cu, in their order. */
const Inst kInsts[] = {
    inst<cuda::Fwd64x2<T>>(),     inst<cuda::Fwd64<T>>(),        inst<cuda::Fwd128x2<T>>(),
    inst<cuda::Fwd128<T>>(),      inst<cuda::Fwd256<T>>(),       inst<cuda::Fwd320<T>>(),
    inst<cuda::Fwd512c512<T>>(),  inst<cuda::Fwd512c256<T>>(),   inst<cuda::Fwd512<T>>(),
    inst<cuda::Fwd1024c512<T>>(), inst<cuda::Fwd1024<T>>(),      inst<cuda::Fwd1024k32<T>>(),
};

/* The launchers' rule (fwd_host.h pick_kernel): the smallest covering Dv with the plan's tile. */
const Inst *inst_of(const ffpa_plan &p, int64_t dv)
{
    const Inst *best = NULL;
    for (const Inst &k : kInsts)
        if (dv <= k.dv && p.br == k.br && p.bc == k.bc && p.dqk_chunk == k.chunk && p.warps == k.warps &&
            (!best || k.dv < best->dv))
            best = &k;
    return best;
}

struct Arch {
    int arch; /* __CUDA_ARCH__ */
    size_t per_block, per_sm;
};

void sweep(const Arch &a)
{
    ffpa_device_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.is_gpu = 1;
    lim.arch = a.arch / 10;
    lim.sm_count = 132;
    lim.warp_size = 32;
    lim.smem_per_block = a.per_block;
    lim.smem_per_sm = a.per_sm;
    lim.regs_per_sm = 65536;
    lim.max_threads_per_block = 1024;
    const size_t body_limit = cuda::arch_smem_per_block(a.arch);
    assert_true(a.per_block <= body_limit);
    const int64_t seqs[][2] = {{1, 4096}, {77, 77}, {4096, 4096}};
    int planned = 0;
    for (int64_t d = 8; d <= 1024; d += 8)
        for (int mla = 0; mla < 2; ++mla)
            for (int s = 0; s < 3; ++s)
                for (int causal = 0; causal < 2; ++causal) {
                    ffpa_plan_input in;
                    memset(&in, 0, sizeof in);
                    in.dtype = FFPA_BF16;
                    in.batch = 1;
                    in.hq = 16;
                    in.hkv = 4;
                    in.nq = seqs[s][0];
                    in.nkv = seqs[s][1];
                    in.dv = d;
                    in.dqk = mla && d + 64 <= 1024 ? d + 64 : d;
                    in.causal = causal;
                    for (int stream_q = 0; stream_q < 2; ++stream_q) {
                        in.stream_q = stream_q;
                        ffpa_plan p;
                        if (ffpa_plan_make(&in, &lim, &p) != FFPA_OK)
                            continue; /* refused with a status: nothing launches */
                        const Inst *k = inst_of(p, in.dv);
                        if (!k)
                            fail_msg("sm_%d dqk %lld dv %lld: no instantiation has the tile br %d bc %d chunk %d warps %d",
                                     a.arch / 10, (long long)in.dqk, (long long)in.dv, p.br, p.bc, p.dqk_chunk, p.warps);
                        if (k->min_smem > body_limit)
                            fail_msg("sm_%d dqk %lld dv %lld: planned on the Dv %d tile (chunk %d), compiled without a "
                                     "body there (needs %zu bytes, the architecture's blocks get %zu)",
                                     a.arch / 10, (long long)in.dqk, (long long)in.dv, k->dv, k->chunk, k->min_smem,
                                     body_limit);
                        const size_t layout = k->smem(ffpa_plan_q_resident(&p), p.n_qk_chunks, p.stages);
                        if (layout != p.smem_bytes)
                            fail_msg("sm_%d dqk %lld dv %lld: the planner's %zu bytes of shared memory, the Dv %d "
                                     "tile's layout (chunk %d, %d stages) %zu",
                                     a.arch / 10, (long long)in.dqk, (long long)in.dv, p.smem_bytes, k->dv, k->chunk,
                                     p.stages, layout);
                        ++planned;
                    }
                }
    assert_true(planned > 0);
}

/* One architecture's limits per test (cmocka prestate). */
const Arch kArchs[] = {
    {900, 232448, 233472},  /* H100 */
    {1000, 232448, 233472}, /* B200 */
    {800, 166912, 167936},  /* A100 */
    {860, 101376, 102400},  /* sm_86 */
    {890, 101376, 102400},  /* sm_89 */
    {1200, 101376, 102400}, /* sm_120 */
};

void test_arch(void **state)
{
    sweep(*static_cast<const Arch *>(*state));
}

/* The tiles the gate drops on the small parts are the ones meant to drop:
 * the 512-column slabs below 227 KiB, the 256-column ones below 163. */
void test_dropped_tiles(void **)
{
    assert_true(fwd_min_smem<cuda::Fwd512c512<T>>() > cuda::arch_smem_per_block(800));
    assert_true(fwd_min_smem<cuda::Fwd1024c512<T>>() > cuda::arch_smem_per_block(800));
    assert_true(fwd_min_smem<cuda::Fwd512c256<T>>() <= cuda::arch_smem_per_block(800));
    assert_true(fwd_min_smem<cuda::Fwd512c256<T>>() > cuda::arch_smem_per_block(890));
    assert_true(fwd_min_smem<cuda::Fwd512<T>>() <= cuda::arch_smem_per_block(890));
    assert_true(fwd_min_smem<cuda::Fwd1024k32<T>>() <= cuda::arch_smem_per_block(1200));
    for (const Inst &k : kInsts)
        assert_true(k.min_smem <= cuda::arch_smem_per_block(900));
}

/* The slab copies keep their per-row addresses (load_tile_async's
 * kSpaced) on the one tile where the bases measured slower: the 4-warp
 * D = 256 tile, one m-tile a warp, 256-column slabs (row step 4). The
 * other tiles with a row step below 8 (the 512-column slabs) gained with
 * the bases (docs/notes/forward.md). */
void test_spaced_copies(void **)
{
    assert_true(cuda::Fwd256<T>::kSpacedCopies);
    assert_false(cuda::Fwd64x2<T>::kSpacedCopies);
    assert_false(cuda::Fwd64<T>::kSpacedCopies);
    assert_false(cuda::Fwd128x2<T>::kSpacedCopies);
    assert_false(cuda::Fwd128<T>::kSpacedCopies);
    assert_false(cuda::Fwd320<T>::kSpacedCopies);
    assert_false(cuda::Fwd512c512<T>::kSpacedCopies);
    assert_false(cuda::Fwd512c256<T>::kSpacedCopies);
    assert_false(cuda::Fwd512<T>::kSpacedCopies);
    assert_false(cuda::Fwd1024c512<T>::kSpacedCopies);
    assert_false(cuda::Fwd1024<T>::kSpacedCopies);
    assert_false(cuda::Fwd1024k32<T>::kSpacedCopies);
}

/* Every m-tile's row maxima before the exp2s (FwdConfig::kMaxesFirst) only
 * on the tile where it measured a gain: two m-tiles a warp over 128 keys
 * (Fwd64x2). The 64-key two-m-tile tile lost 2.6% with it and the one-m-tile
 * tiles have nothing to overlap (docs/notes/forward.md). */
void test_maxes_first(void **)
{
    using T = arch::bf16;
    assert_true(cuda::Fwd64x2<T>::kMaxesFirst);
    assert_true(cuda::Fwd64x2<arch::f16>::kMaxesFirst);
    assert_false(cuda::Fwd64<T>::kMaxesFirst);
    assert_false(cuda::Fwd128x2<T>::kMaxesFirst);
    assert_false(cuda::Fwd128<T>::kMaxesFirst);
    assert_false(cuda::Fwd256<T>::kMaxesFirst);
    assert_false(cuda::Fwd320<T>::kMaxesFirst);
    assert_false(cuda::Fwd512c512<T>::kMaxesFirst);
    assert_false(cuda::Fwd1024c512<T>::kMaxesFirst);
    assert_false(cuda::Fwd1024<T>::kMaxesFirst);
    assert_false(cuda::Fwd1024k32<T>::kMaxesFirst);
}

/* The slab loops' step counts (with_covering_steps): the 256- and
 * 512-column loops cover the valid columns in whole 64- (128-) column
 * groups, straight-line; the narrow ones run whole or stop at run time (0). */
template <int kMax> static int covering_steps(int col0, int cols_valid)
{
    int k = -1; /* -1: no loop */
    with_covering_steps<kMax>(col0, cols_valid, [&](auto steps) { k = decltype(steps)::value; });
    return k;
}

void test_covering_steps(void **)
{
    assert_int_equal(covering_steps<16>(0, 256), 16);
    assert_int_equal(covering_steps<16>(0, 300), 16);
    assert_int_equal(covering_steps<16>(0, 193), 16);
    assert_int_equal(covering_steps<16>(0, 192), 12);
    assert_int_equal(covering_steps<16>(0, 160), 12);
    assert_int_equal(covering_steps<16>(0, 128), 8);
    assert_int_equal(covering_steps<16>(0, 72), 8);
    assert_int_equal(covering_steps<16>(0, 64), 4);
    assert_int_equal(covering_steps<16>(0, 8), 4);
    assert_int_equal(covering_steps<16>(0, 0), -1);
    assert_int_equal(covering_steps<16>(256, 64), -1); /* a slab past Dqk */
    assert_int_equal(covering_steps<32>(0, 512), 32);
    assert_int_equal(covering_steps<32>(0, 448), 32);
    assert_int_equal(covering_steps<32>(0, 384), 24);
    assert_int_equal(covering_steps<32>(0, 64), 8);
    assert_int_equal(covering_steps<8>(0, 128), 8);
    assert_int_equal(covering_steps<8>(0, 96), 0);
    assert_int_equal(covering_steps<8>(128, 200), 0); /* the second warp's columns */
    assert_int_equal(covering_steps<8>(128, 256), 8);
    assert_int_equal(covering_steps<4>(0, 64), 4);
    assert_int_equal(covering_steps<4>(0, 48), 0);
}

/* The generic forward's plain twin runs a plain call without dropout, where
 * the tile has one, unless FFPA_GENERIC_PLAIN_TWIN=0; the kernel's name says so. */
void test_plain_twin_choice(void **)
{
    struct Desc {
        const void *launch_plain;
    };
    static const int entry = 0;
    const Desc with = {&entry}, without = {nullptr};
    ffpa_gpu_fwd_params p;
    memset(&p, 0, sizeof p);
    p.plain = 1;
    assert_true(fwd::host::uses_plain_twin(&with, p));
    assert_false(fwd::host::uses_plain_twin(&without, p));
    p.has_dropout = 1;
    assert_false(fwd::host::uses_plain_twin(&with, p));
    p.has_dropout = 0;
    p.plain = 0;
    assert_false(fwd::host::uses_plain_twin(&with, p));
    p.plain = 1;
    setenv("FFPA_GENERIC_PLAIN_TWIN", "0", 1);
    assert_false(fwd::host::uses_plain_twin(&with, p));
    setenv("FFPA_GENERIC_PLAIN_TWIN", "banana", 1); /* malformed: the default */
    assert_true(fwd::host::uses_plain_twin(&with, p));
    unsetenv("FFPA_GENERIC_PLAIN_TWIN");

    ffpa_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.kv_splits = 1;
    plan.path = FFPA_PATH_SMALL_D;
    assert_string_equal(fwd::host::generic_name(plan), "generic small-d");
    assert_string_equal(fwd::host::generic_name(plan, true), "generic small-d plain");
    plan.path = FFPA_PATH_SPLIT_D;
    assert_string_equal(fwd::host::generic_name(plan, true), "generic split-d plain");
    plan.kv_splits = 4;
    assert_string_equal(fwd::host::generic_name(plan, true), "generic decode (split-KV) plain");
}

} /* namespace */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_arch, (void *)&kArchs[0]),
        cmocka_unit_test_prestate(test_arch, (void *)&kArchs[1]),
        cmocka_unit_test_prestate(test_arch, (void *)&kArchs[2]),
        cmocka_unit_test_prestate(test_arch, (void *)&kArchs[3]),
        cmocka_unit_test_prestate(test_arch, (void *)&kArchs[4]),
        cmocka_unit_test_prestate(test_arch, (void *)&kArchs[5]),
        cmocka_unit_test(test_dropped_tiles),
        cmocka_unit_test(test_plain_twin_choice),
        cmocka_unit_test(test_spaced_copies),
        cmocka_unit_test(test_maxes_first),
        cmocka_unit_test(test_covering_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
