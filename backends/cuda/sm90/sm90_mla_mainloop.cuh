/*
 * Main loop pieces of the Hopper MLA decode kernel:
 *   MlaProducer  the key tiles of a split, page by page through the block
 *                table, into a two-slot ring by TMA (one load of 576
 *                columns serves QK^T and PV);
 *   MlaGemms     the three warpgroup GEMMs of a key tile:
 *                  S(64 x 64)   = Q K^T              (SS, both K-major, 36 k16 steps)
 *                  O[:, 0:192]   += P V[:, 0:192]    (RS: P from registers)
 *                  O[:, 192:512] += P V[:, 192:512]  (SS: P from shared memory)
 *
 * Ring: tile i of the split sits in slot i % 2, use i / 2, in three parts
 * (MlaConfig::kParts: rope, warpgroup 1's V columns, warpgroup 2's);
 *   full[slot][part]:  the producer's arrive.expect_tx + the TMA bytes;
 *   empty[slot][part]: one arrival per warp (4) of the warpgroup whose GEMM
 *                      reads the part last (1: QK^T, PV; 2: PV; 2's PV
 *                      follows warpgroup 1's QK^T of the tile).
 */
#ifndef FFPA_CUDA_SM90_MLA_MAINLOOP_CUH
#define FFPA_CUDA_SM90_MLA_MAINLOOP_CUH

#include "sm90_arch.cuh"
#include "sm90_mla_config.cuh"
#include "wgmma_ops.cuh"

#include "kv/kv_kernel.cuh"

namespace ffpa {
namespace sm90 {

/* The page pool of K (V is its first 512 columns): [Dqk, page rows, kv heads, pages]. */
struct MlaMaps {
    CUtensorMap kv;
};

struct MlaBarriers {
    uint64_t full[2][3], empty[2][3];
};

template <class Cfg> struct MlaRing {
    static FFPA_DEV uint32_t slot(int i) { return (uint32_t)i & 1; }
    static FFPA_DEV uint32_t parity(int i) { return ((uint32_t)i >> 1) & 1; }
    static FFPA_DEV uint8_t *ptr(uint8_t *smem, int i) { return smem + Cfg::kRing + slot(i) * Cfg::kTileBytes; }
};

template <class Cfg> struct MlaProducer {
    /* One warp: lane g < 64 / box_rows looks up the page of the tile's key
     * group g one tile ahead (the table read overlaps the wait for a free
     * slot); lane 0 issues the loads. Groups past the sequence, or whose
     * table entry lies outside the pool, load an out-of-range page: TMA
     * fills zeros and still counts the bytes, so the consumers see a full
     * slot of finite values. */
    static FFPA_DEV void run(const MlaMaps &maps, const ffpa_gpu_kv_params &p, uint8_t *smem, MlaBarriers *bars,
                             int b, int kvh, int len, int tile_begin, int n_tiles, int lane)
    {
        const int box_rows = mla_box_rows(p.page_size, p.block_table != NULL);
        const int groups = Cfg::kBc / box_rows;
        int page = 0, row = 0;
        auto look_up = [&](int tile) {
            if (lane < groups) {
                const int j = tile * Cfg::kBc + lane * box_rows;
                const int pg = j < len ? kv_page(p, b, j) : -1;
                page = pg < 0 ? p.num_pages : pg;
                row = j % p.page_size;
            }
        };
        look_up(tile_begin);
        for (int i = 0; i < n_tiles; ++i) {
            int pages[4], rows[4];
#pragma unroll
            for (int g = 0; g < 4; ++g) {
                pages[g] = __shfl_sync(0xffffffffu, page, g);
                rows[g] = __shfl_sync(0xffffffffu, row, g);
            }
            if (i + 1 < n_tiles)
                look_up(tile_begin + i + 1);
            if (lane == 0) {
                const uint32_t slot = MlaRing<Cfg>::slot(i);
                uint8_t *dst = MlaRing<Cfg>::ptr(smem, i);
#pragma unroll
                for (int part = 0; part < Cfg::kParts; ++part) {
                    const int box0 = Cfg::part_first_box(part), nbox = Cfg::part_boxes(part);
                    if (i >= Cfg::kStages)
                        mbar_wait(&bars->empty[slot][part], MlaRing<Cfg>::parity(i) ^ 1);
                    mbar_arrive_expect_tx(&bars->full[slot][part], (uint32_t)(nbox * kBoxBytes));
                    for (int g = 0; g < groups; ++g)
                        for (int box = box0; box < box0 + nbox; ++box)
                            tma_load_4d(dst + (size_t)box * kBoxBytes + (size_t)g * box_rows * 128, &maps.kv,
                                        &bars->full[slot][part], box * kBoxCols, rows[g], kvh, pages[g]);
                }
            }
            __syncwarp();
        }
    }
};

template <class Cfg> struct MlaGemms {
    using T = typename Cfg::T;

    /* s = Q K^T over the 9 column boxes, 4 k16 steps each, part by part as
     * each lands (full[part], waited with the earlier parts' wgmma already
     * running). The descriptors advance through desc_advance (opaque to the
     * compiler: 36 hoisted descriptors would not fit beside O). */
    static FFPA_DEV void qk(float (&s)[32], uint32_t q_addr, uint32_t k_addr, uint64_t (&full)[3], uint32_t parity)
    {
        const uint64_t q0 = make_desc_sw128(q_addr, 16, 1024), k0 = make_desc_sw128(k_addr, 16, 1024);
#pragma unroll
        for (int part = 0; part < Cfg::kParts; ++part) {
            mbar_wait(&full[part], parity);
#pragma unroll
            for (int b = 0; b < Cfg::part_boxes(part); ++b)
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    const uint32_t off = (uint32_t)(Cfg::part_first_box(part) + b) * kBoxBytes + kk * 32;
                    wgmma_ss<T, 64>(s, desc_advance(q0, off), desc_advance(k0, off), part > 0 || b > 0 || kk > 0);
                }
        }
    }

    /* o += P V[:, 0:192] with P in registers (A fragments of S's layout).
     * V is MN-major: 16 keys = 2048 bytes, the next 64 columns a box away. */
    static FFPA_DEV void pv_regs(float (&o)[Cfg::kO1Acc], const uint32_t (&pf)[4][4], uint32_t v_addr)
    {
        static_assert(Cfg::kO1Acc == 96, "one m64n192 per k16 step");
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            wgmma_rs<T, 192>(o, pf[kk], make_desc_sw128(v_addr + kk * 2048, kBoxBytes, 1024), 1);
    }

    /* o += P V[:, 192:512] with P read from shared memory (a 64 x 64
     * K-major box): n256 over 4 boxes, then n64 over the last. */
    static FFPA_DEV void pv_smem(float (&o)[Cfg::kO2Acc], uint32_t p_addr, uint32_t v_addr)
    {
        static_assert(Cfg::kO2Acc == 160, "m64n256 + m64n64 per k16 step");
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const uint64_t pd = make_desc_sw128(p_addr + kk * 32, 16, 1024);
            wgmma_ss_bt<T, 256>(reinterpret_cast<float(&)[128]>(o[0]), pd,
                                make_desc_sw128(v_addr + kk * 2048, kBoxBytes, 1024), 1);
            wgmma_ss_bt<T, 64>(reinterpret_cast<float(&)[32]>(o[128]), pd,
                               make_desc_sw128(v_addr + 4 * kBoxBytes + kk * 2048, kBoxBytes, 1024), 1);
        }
    }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
