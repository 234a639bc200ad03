/*
 * The HIP backward kernels' entry points: bwd/bwd_entry.h (shared with
 * CUDA), defined by bwd_inst_*.hip and bwd_aux.hip over the bodies of
 * backends/gpu/bwd/ compiled with arch_hip.h.
 */
#ifndef FFPA_HIP_BWD_KERNELS_H
#define FFPA_HIP_BWD_KERNELS_H

#include "hip_port.h"

#include "bwd/bwd_entry.h"

#endif
