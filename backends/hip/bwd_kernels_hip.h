/*
 * The HIP backward kernels' entry points: bwd/bwd_entry.h (shared with
 * CUDA), defined by bwd_inst_*.hip and bwd_aux.hip over the bodies of
 * backends/gpu/bwd/ compiled with arch_hip.h.
 */
#ifndef FFPA_HIP_BWD_KERNELS_H
#define FFPA_HIP_BWD_KERNELS_H

#include "hip_port.h"

#include "bwd/bwd_entry.h"

/* The backward's BigCfg kernels exist on NVIDIA only (bwd_inst_hip.h); on
 * AMD the planner sees at most kAmdBwdSmem bytes per block, SmallCfg's
 * bound, so it never picks them. */
#if defined(__HIP_PLATFORM_NVIDIA__)
#define FFPA_HIP_BIG_BWD 1
#else
#define FFPA_HIP_BIG_BWD 0
#endif
#define FFPA_HIP_AMD_BWD_SMEM ((size_t)65536)

#endif
