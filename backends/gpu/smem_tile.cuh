/*
 * Shared-memory tile layout of the forward kernels: row-major tiles whose
 * rows are a multiple of 64 elements (128 bytes), with the 16-byte pieces of
 * each row XOR-swizzled by (row % 8). Eight consecutive rows at the same
 * logical piece then land in eight different bank groups, so 8x8 matrix
 * loads (ldmatrix, ds_read_b128) and 16-byte async copies are conflict-free
 * without padding.
 */
#ifndef FFPA_GPU_SMEM_TILE_CUH
#define FFPA_GPU_SMEM_TILE_CUH

namespace ffpa {

/* A shared-memory tile as its 32-bit address, stepped in elements of
 * kElt bytes like a pointer: its arithmetic stays 32-bit, where a generic
 * pointer's is 64-bit and converted back at every ldmatrix / cp.async
 * (the backward's hot loop spent ~80 instructions a tile on that). */
template <int kElt = 2> struct SmemAddr {
    uint32_t a;
    __device__ __forceinline__ SmemAddr operator+(int elems) const { return {a + (uint32_t)(kElt * elems)}; }
};
template <int kElt> __device__ __forceinline__ uint32_t smem_addr(SmemAddr<kElt> p) { return p.a; }
template <typename T> __device__ __forceinline__ uint32_t smem_addr(const T *p) { return arch::smem_u32(p); }

/* Element offset of (row, col) in a swizzled tile of `cols` columns. */
template <int cols> __device__ __forceinline__ int swz(int row, int col)
{
    static_assert(cols % 64 == 0, "swizzled rows hold whole 128-byte groups");
    return row * cols + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

/*
 * Asynchronous copy of a rows x cols tile (row-major in global memory, row
 * stride `stride` elements) into a swizzled tile. Rows >= rows_valid and
 * columns >= cols_valid are zero-filled, never read.
 *
 * Each thread copies one 16-byte column piece of rows r0, r0 + row_step, ...
 * The shared addresses are a few per-thread bases plus compile-time
 * offsets: the swizzle depends on (row & 7) only, so rows 8 apart share it,
 * and a row_step below 8 cycles through 8 / row_step bases (kPhases).
 * Recomputing the swizzle per row cost ~15 instructions a copy at 256
 * columns (ncu, docs/notes/forward.md).
 * kSpaced: the per-row form all the same. Where the shared-memory port
 * binds (the 4-warp D = 256 forward tile) copies issued back to back delay
 * the other block's ldmatrix (-3% measured); the per-row arithmetic spaces
 * them.
 */
template <typename T, int rows, int cols, int threads, bool kSpaced = false, class Tile = T *>
__device__ __forceinline__ void load_tile_async(Tile tile, const T *base, int64_t stride, int rows_valid,
                                                int col0, int cols_valid, int tid)
{
    constexpr int pieces_per_row = cols / 8;
    static_assert(threads % pieces_per_row == 0, "a thread keeps its column across iterations");
    constexpr int row_step = threads / pieces_per_row;
    static_assert(row_step % 8 == 0 || 8 % row_step == 0, "rows 8 apart share a swizzle");
    constexpr int kPhases = row_step % 8 == 0 ? 1 : 8 / row_step;
    constexpr int iters = (rows + row_step - 1) / row_step;
    constexpr uint32_t phase_bytes = (uint32_t)(kPhases * row_step * cols * sizeof(T));
    const int r0 = tid / pieces_per_row;
    const int c = (tid % pieces_per_row) * 8;
    const T *src = base + (int64_t)r0 * stride + col0 + c;
    const int64_t src_step = (int64_t)row_step * stride;
    const uint32_t tile_a = smem_addr(tile);
    uint32_t dst[kPhases];
#pragma unroll
    for (int j = 0; j < kPhases; ++j)
        dst[j] = tile_a + (uint32_t)(swz<cols>(r0 + j * row_step, c) * (int)sizeof(T));
    const bool col_ok = col0 + c < cols_valid;
#pragma unroll
    for (int it = 0; it < iters; ++it) {
        const int r = r0 + it * row_step;
        if (rows % row_step == 0 || r < rows) {
            const bool ok = col_ok && r < rows_valid;
            const uint32_t d = kSpaced ? smem_addr(tile + swz<cols>(r, c))
                                       : dst[it % kPhases] + (uint32_t)(it / kPhases) * phase_bytes;
            arch::cp_async_16(d, ok ? src : base, ok ? 16 : 0);
            src += src_step;
        }
    }
}

} /* namespace ffpa */

#endif
