/*
 * The fragment contract every architecture layer (backends/cuda/arch_sm80.cuh,
 * backends/hip/arch_portable.h) implements: m16n8k16 fragments held by
 * logical warps of 32 lanes (layouts in arch_sm80.cuh's header comment), and
 * where a FragC element sits. The vendor layer includes this first.
 */
#ifndef FFPA_GPU_ARCH_FRAGMENTS_CUH
#define FFPA_GPU_ARCH_FRAGMENTS_CUH

#include <stdint.h>

#define FFPA_DEV __device__ __forceinline__

namespace ffpa {
namespace arch {

struct FragA { uint32_t r[4]; }; /* 16x16 f16/bf16, 8 elements per lane */
struct FragB { uint32_t r[2]; }; /* 16x8  f16/bf16, 4 elements per lane */
struct FragC { float r[4]; };    /* 16x8  fp32,     4 elements per lane */

/* Lanes of a logical warp (on wave64 targets a wave holds two), and the
 * row/column a FragC element sits at (16x8 tile). */
constexpr int kWarpSize = 32;
FFPA_DEV int frag_c_row(int lane, int idx) { return (lane >> 2) + ((idx >> 1) << 3); }
FFPA_DEV int frag_c_col(int lane, int idx) { return ((lane & 3) << 1) + (idx & 1); }

} /* namespace arch */
} /* namespace ffpa */

#endif
