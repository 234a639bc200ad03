/*
 * Warp-level tensor-core pieces of the backward (mma.sync m16n8k16 through
 * the arch layer). Three operand shapes occur:
 *   C  = A B^T    S = Q K^T, dP = dO V^T       (A, B: swizzled 64-column slabs)
 *   C += A^T B    dV = P^T dO, dK = dS^T Q     (A: padded [k][m] tile, B: slab)
 *   C += A B      dQ = dS K                    (A: registers, B: slab)
 * and the accumulator update of a gradient ("acc view": fp32 buffer or the
 * output tensor), loaded before the MMAs so its latency hides behind them.
 * Requires the arch layer (included first by the instantiating file) and
 * backends/gpu/smem_tile.cuh.
 */
#ifndef FFPA_GPU_BWD_MMA_CUH
#define FFPA_GPU_BWD_MMA_CUH

#include "bwd_params.h"

namespace ffpa {
namespace bwd {

constexpr int kSlab = 64; /* columns of a shared-memory slab (one D chunk) */

/*
 * Byte address of the 16-byte piece `chunk` of row `row` in a swizzled
 * [rows][64] slab at shared address `base` (128-byte aligned, as every
 * tile of the backward's layout is). The piece index enters only through
 * bits 4..6 of the address, so the piece 2 k + b of a row is the piece b's
 * address XOR (k << 5): a lane computes its address once per operand and
 * steps along the k dimension (or 16-column groups) with one LOP3, the
 * other dimension being a constant offset (16 rows = 2048 bytes).
 */
__host__ __device__ __forceinline__ uint32_t swz_addr(uint32_t base, int row, int chunk)
{
    return base + (uint32_t)row * (kSlab * 2) + ((uint32_t)((chunk ^ row) & 7) << 4);
}

/*
 * c[nt] (16 x 8 kNT) += A[row0 .. row0+16)[0..64) * B[0 .. 8 kNT)[0..64)^T
 * over the slab columns < cols_valid. A and B are swizzled [rows][64] slabs
 * of 16-bit elements.
 */
template <typename T, int kNT, class PA = const T *, class PB = const T *>
__device__ __forceinline__ void warp_abt(arch::FragC (&c)[kNT], PA a, int row0, PB b, int cols_valid, int lane)
{
    static_assert(kNT % 2 == 0, "n-tiles come in pairs");
    static_assert(sizeof(T) == 2, "16-bit slabs");
    const uint32_t a0 = swz_addr(smem_addr(a), row0 + (lane & 15), lane >> 4);
    const uint32_t b0 = swz_addr(smem_addr(b), (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    auto kstep = [&](int kk) {
        arch::FragA fa;
        arch::ldmatrix_x4(fa.r, a0 ^ (kk << 5));
        const uint32_t bk = b0 ^ (kk << 5);
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
            uint32_t r[4];
            arch::ldmatrix_x4(r, bk + np * 16 * (kSlab * 2));
            arch::FragB b0f = {{r[0], r[1]}}, b1f = {{r[2], r[3]}};
            arch::mma_m16n8k16<T>(c[2 * np], fa, b0f);
            arch::mma_m16n8k16<T>(c[2 * np + 1], fa, b1f);
        }
    };
    if (cols_valid >= kSlab) { /* whole slab: no per-step test */
#pragma unroll
        for (int kk = 0; kk < kSlab / 16; ++kk)
            kstep(kk);
    } else {
#pragma unroll
        for (int kk = 0; kk < kSlab / 16; ++kk) {
            if (kk * 16 >= cols_valid)
                break;
            kstep(kk);
        }
    }
}

/* Element offset of (row, col) in a [rows][kCols] tile of P or dS: swizzled
 * when rows hold whole 128-byte groups, else padded by 16 bytes (both give
 * conflict-free ldmatrix and 4-byte fragment stores). */
template <int kCols> __device__ __forceinline__ int ptile_off(int row, int col)
{
    if constexpr (kCols % 64 == 0)
        return swz<kCols>(row, col);
    else
        return row * (kCols + 8) + col;
}
template <int kCols> constexpr int ptile_elems(int rows)
{
    return kCols % 64 == 0 ? rows * kCols : rows * (kCols + 8);
}

/*
 * c[mt][nt] (32 x 8 kNT) += A^T B where A is a [k][kACols] P/dS tile
 * (ptile_off layout) and B is a swizzled [k][64] slab; m from m0 (a
 * multiple of 32), n from the slab column n0 (a multiple of 8 kNT, so that
 * the n-tile pairs step by XOR), k over [0, kK).
 */
template <typename T, int kNT, int kK, int kACols, class PA = const T *, class PB = const T *>
__device__ __forceinline__ void warp_atb(arch::FragC (&c)[2][kNT], PA a, int m0, PB b, int n0, int lane)
{
    static_assert(kNT % 2 == 0 && (kNT & (kNT - 1)) == 0, "n-tiles come in pairs, a power of two");
    static_assert(sizeof(T) == 2, "16-bit tiles");
    /* A: rows k (16 per step: a constant offset), columns m0 + 16 mt + ...:
     * swizzled (kACols a multiple of 64: ptile_off's swz) pieces m0 / 8 +
     * 2 mt + (q & 1), mt by XOR (m0 a multiple of 32 keeps the piece's low
     * two bits free, so the XOR with the row's swizzle commutes). */
    constexpr bool kSwizzled = kACols % 64 == 0;
    const int q = lane >> 3, rr = lane & 7;
    const uint32_t abase = smem_addr(a);
    const int arow = ((q >> 1) << 3) + rr;
    const uint32_t a0 = abase + 2 * (uint32_t)ptile_off<kACols>(arow, m0 + ((q & 1) << 3));
    /* B: rows k, pieces n0 / 8 + 2 np + (lane >> 4), np by XOR. */
    const uint32_t b0 = swz_addr(smem_addr(b), rr + ((q & 1) << 3), (n0 >> 3) + (lane >> 4));
    uint32_t bn[kNT / 2];
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np)
        bn[np] = b0 ^ (np << 5);
    constexpr uint32_t kARowBytes = 2 * ptile_elems<kACols>(1); /* one row of A */
#pragma unroll
    for (int kk = 0; kk < kK / 16; ++kk) {
        arch::FragA fa[2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const uint32_t am = kSwizzled ? a0 ^ (mt << 5) : a0 + mt * 32;
            arch::ldmatrix_x4_trans(fa[mt].r, am + kk * 16 * kARowBytes);
        }
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
            uint32_t r[4];
            arch::ldmatrix_x4_trans(r, bn[np] + kk * 16 * (kSlab * 2));
            arch::FragB b0f = {{r[0], r[1]}}, b1f = {{r[2], r[3]}};
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                arch::mma_m16n8k16<T>(c[mt][2 * np], fa[mt], b0f);
                arch::mma_m16n8k16<T>(c[mt][2 * np + 1], fa[mt], b1f);
            }
        }
    }
}

/* One k-step (16 rows of B) of c[nt] += A B: fa the step's A fragment, B a
 * swizzled [k][64] slab whose lane address b0 (warp_ab_reg's) steps its
 * n-tile pairs by XOR. */
template <typename T, int kNT>
__device__ __forceinline__ void ab_kstep(arch::FragC (&c)[kNT], const arch::FragA &fa, uint32_t b0, int kk)
{
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
        uint32_t r[4];
        arch::ldmatrix_x4_trans(r, (b0 ^ (np << 5)) + kk * 16 * (kSlab * 2));
        arch::FragB b0f = {{r[0], r[1]}}, b1f = {{r[2], r[3]}};
        arch::mma_m16n8k16<T>(c[2 * np], fa, b0f);
        arch::mma_m16n8k16<T>(c[2 * np + 1], fa, b1f);
    }
}

/* c[nt] (16 x 8 kNT) += A B with A (16 x kK) in registers as packed
 * fragments (af[kk] = FragA of k-step kk) and B a swizzled [k][64] slab,
 * columns n0 .. n0 + 8 kNT (n0 a multiple of 8 kNT). */
template <typename T, int kK, int kNT = kSlab / 8, class PB = const T *>
__device__ __forceinline__ void warp_ab_reg(arch::FragC (&c)[kNT], const uint32_t (&af)[kK / 16][4], PB b, int n0,
                                            int lane)
{
    static_assert(sizeof(T) == 2, "16-bit slabs");
    static_assert(kNT % 2 == 0 && (kNT & (kNT - 1)) == 0 && kNT <= kSlab / 8, "n-tile pairs, a power of two");
    const uint32_t b0 = swz_addr(smem_addr(b), (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4));
#pragma unroll
    for (int kk = 0; kk < kK / 16; ++kk) {
        arch::FragA fa = {{af[kk][0], af[kk][1], af[kk][2], af[kk][3]}};
        ab_kstep<T, kNT>(c, fa, b0, kk);
    }
}

/* c[nt] (16 x 8 kNT) += A B with A rows [row0, row0 + 16) x [0, kK) of a
 * [rows][kACols] P / dS tile (ptile_off layout, ldmatrix) and B a swizzled
 * [k][64] slab, columns n0 .. n0 + 8 kNT (n0 a multiple of 8 kNT): dQ = dS K
 * where a warp's registers hold only part of its rows' dS (2-D S tiling). */
template <typename T, int kK, int kACols, int kNT = kSlab / 8, class PA = const T *, class PB = const T *>
__device__ __forceinline__ void warp_ab_smem(arch::FragC (&c)[kNT], PA a, int row0, PB b, int n0, int lane)
{
    static_assert(sizeof(T) == 2, "16-bit tiles");
    static_assert(kNT % 2 == 0 && (kNT & (kNT - 1)) == 0 && kNT <= kSlab / 8, "n-tile pairs, a power of two");
    const uint32_t abase = smem_addr(a);
    const int arow = row0 + (lane & 15);
    const uint32_t b0 = swz_addr(smem_addr(b), (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4));
#pragma unroll
    for (int kk = 0; kk < kK / 16; ++kk) {
        arch::FragA fa;
        arch::ldmatrix_x4(fa.r, abase + 2 * (uint32_t)ptile_off<kACols>(arow, kk * 16 + ((lane >> 4) << 3)));
        ab_kstep<T, kNT>(c, fa, b0, kk);
    }
}

/* ------------------------------------------------------ gradient accumulators */

/* Element offset of row 0 of (b, h) in an acc view. */
__device__ __forceinline__ int64_t acc_row0(const ffpa_bwd_acc &a, const int32_t *cu, int b, int h)
{
    return (int64_t)h * a.sh + (cu ? (int64_t)cu[b] * a.sn : (int64_t)b * a.sb);
}

/*
 * One C fragment pair (two adjacent columns) of a gradient tile: the previous
 * partial sum is read first (prefetch), added after the MMAs, and written back.
 * Rows/columns outside the valid range are neither read nor written.
 */
template <typename T> struct AccPair {
    __device__ __forceinline__ static float2 load(const ffpa_bwd_acc &a, int64_t off)
    {
        if (a.is_f32)
            return *reinterpret_cast<const float2 *>(static_cast<const float *>(a.data) + off);
        uint32_t u = *reinterpret_cast<const uint32_t *>(static_cast<const T *>(a.data) + off);
        const T *h = reinterpret_cast<const T *>(&u);
        return make_float2(arch::to_f32<T>(h[0]), arch::to_f32<T>(h[1]));
    }
    __device__ __forceinline__ static void store(const ffpa_bwd_acc &a, int64_t off, float x, float y)
    {
        if (a.is_f32) {
            *reinterpret_cast<float2 *>(static_cast<float *>(a.data) + off) = make_float2(x, y);
        } else {
            *reinterpret_cast<uint32_t *>(static_cast<T *>(a.data) + off) = arch::pack_f32x2<T>(x, y);
        }
    }
};

/*
 * Gradient tile of kMT m-tiles x kNT n-tiles held by a warp: rows
 * row0 + 16 mt + frag row (valid below rows_valid), columns col0 + 8 nt +
 * frag col (valid below cols_valid). prefetch() reads the old values (zeros
 * when first), commit() adds the fragments and stores.
 */
template <typename T, int kMT, int kNT> struct AccTile {
    float2 old[kMT][kNT][2];

    __device__ __forceinline__ void prefetch(const ffpa_bwd_acc &a, int64_t base, int row0, int rows_valid,
                                             int col0, int cols_valid, bool first, int lane)
    {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    int r = row0 + mt * 16 + arch::frag_c_row(lane, 2 * half);
                    int c = col0 + nt * 8 + arch::frag_c_col(lane, 0);
                    old[mt][nt][half] = (!first && r < rows_valid && c < cols_valid)
                                            ? AccPair<T>::load(a, base + (int64_t)r * a.sn + c)
                                            : make_float2(0.f, 0.f);
                }
    }

    __device__ __forceinline__ void commit(const arch::FragC (&c)[kMT][kNT], const ffpa_bwd_acc &a, int64_t base,
                                           int row0, int rows_valid, int col0, int cols_valid, int lane) const
    {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    int r = row0 + mt * 16 + arch::frag_c_row(lane, 2 * half);
                    int col = col0 + nt * 8 + arch::frag_c_col(lane, 0);
                    if (r < rows_valid && col < cols_valid)
                        AccPair<T>::store(a, base + (int64_t)r * a.sn + col,
                                          old[mt][nt][half].x + c[mt][nt].r[2 * half],
                                          old[mt][nt][half].y + c[mt][nt].r[2 * half + 1]);
                }
    }
};

/*
 * Where a warp's 16 fragment rows of an fp32 buffer lie for red_tile: the
 * lane's two rows (fragment rows of half 0 and 1) as pointers at its column
 * pair, and whether each row is inside the sequence. Built once per tile so
 * that a reduction is one instruction at a constant offset.
 */
struct RedRows {
    float *row[2];
    bool ok[2];
    bool all; /* all 16 rows inside: the unchecked path */
    __device__ __forceinline__ RedRows(float *base, int64_t sn, int row0, int rows_valid, int lane)
    {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = row0 + arch::frag_c_row(lane, 2 * half);
            row[half] = base + (int64_t)r * sn + arch::frag_c_col(lane, 0);
            ok[half] = r < rows_valid;
        }
        all = row0 + 16 <= rows_valid;
    }
};

/*
 * A warp's 16 x 8 kNT fragments added into an fp32 buffer with reductions
 * (dQ from the dK/dV kernel: every key block of the row adds its part), at
 * columns col0 + 8 nt + frag col, valid below cols_valid. Whole tiles (the
 * rule) take one REDG per pair at a constant offset from the row pointer;
 * the edge tiles check every pair.
 */
template <int kNT>
__device__ __forceinline__ void red_tile(const arch::FragC (&c)[kNT], const RedRows &rows, int col0, int cols_valid,
                                         int lane)
{
    float *const r0 = rows.row[0] + col0, *const r1 = rows.row[1] + col0;
    if (rows.all && col0 + 8 * kNT <= cols_valid) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
            arch::red_add_f32x2(r0 + nt * 8, c[nt].r[0], c[nt].r[1]);
            arch::red_add_f32x2(r1 + nt * 8, c[nt].r[2], c[nt].r[3]);
        }
        return;
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
        const bool col_ok = col0 + nt * 8 + arch::frag_c_col(lane, 0) < cols_valid;
        if (rows.ok[0] && col_ok)
            arch::red_add_f32x2(r0 + nt * 8, c[nt].r[0], c[nt].r[1]);
        if (rows.ok[1] && col_ok)
            arch::red_add_f32x2(r1 + nt * 8, c[nt].r[2], c[nt].r[3]);
    }
}

} /* namespace bwd */
} /* namespace ffpa */

#endif
