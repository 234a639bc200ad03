/*
 * OpenCL programs of the backend: the embedded kernel source built for the
 * process's device with a set of build options, once per process, and kept
 * on disk as a program binary keyed by device, platform and driver versions,
 * source and options (a hash), so later processes skip the compiler.
 *
 * Cache folder: FFPA_OPENCL_CACHE (empty: no disk cache), else
 * $XDG_CACHE_HOME/ffpa/opencl, else ~/.cache/ffpa/opencl. A file that does
 * not load is rebuilt from source and replaced. FFPA_OPENCL_BUILD_OPTIONS
 * is appended to every build's options.
 */
#ifndef FFPA_OPENCL_CL_PROGRAM_H
#define FFPA_OPENCL_CL_PROGRAM_H

#include <stddef.h>

#include "cl_device.h"

/* The program of source built with options; on a compile failure
 * FFPA_ERR_DEVICE with the compiler's log (its start) in err. */
ffpa_status ffpa_cl_program(const ffpa_cl_device *dev, const char *source, const char *options, cl_program *out,
                            char *err, size_t err_len);

#endif
