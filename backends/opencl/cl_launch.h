/*
 * The OpenCL backend's launchers, behind the shared GPU host layer
 * (gpu/gpu_host.h): the forward (fwd_launch_cl.c). Plain C.
 */
#ifndef FFPA_OPENCL_CL_LAUNCH_H
#define FFPA_OPENCL_CL_LAUNCH_H

#include "cl_device.h"
#include "gpu_host.h"

size_t ffpa_cl_forward_workspace(const ffpa_gpu_state *state, const ffpa_problem *pb);
ffpa_status ffpa_cl_forward(ffpa_gpu_state *state, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                            size_t err_len);

#endif
