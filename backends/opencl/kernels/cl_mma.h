/*
 * The matrix layer kernels/fwd_mma.cl is written against: NVIDIA's
 * instructions through inline PTX (cl_mma_nv.h), or, built with
 * FFPA_CL_MMA_EMULATED (a testing knob: FFPA_OPENCL_MMA_EMULATE=1), the
 * same functions in portable OpenCL C (cl_mma_emu.h), so CI runs the
 * kernel's logic on pocl. FFPA_MMA_SCRATCH goes at the kernel's scope: the
 * local memory the emulation exchanges fragments through (nothing on NVIDIA);
 * FFPA_UNROLL before the kernel's fixed-count loops.
 */
#ifndef FFPA_OPENCL_CL_MMA_H
#define FFPA_OPENCL_CL_MMA_H

#ifdef FFPA_CL_MMA_EMULATED
#include "cl_mma_emu.h"
/* Loops left rolled: a CPU compiler (pocl's) takes minutes over unrolled
 * loops of barriers, and the emulation has two a call. */
#define FFPA_UNROLL
#else
#include "cl_mma_nv.h"
#define FFPA_MMA_SCRATCH
#define FFPA_UNROLL _Pragma("unroll")
#endif

#endif
