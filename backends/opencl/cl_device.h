/*
 * The OpenCL device of this process: chosen once (FFPA_OPENCL_DEVICE), with
 * its context and default in-order queue, shared by every ffpa context of
 * the opencl backend (the shared GPU host layer's runtime calls carry no
 * context). Plain C.
 */
#ifndef FFPA_OPENCL_CL_DEVICE_H
#define FFPA_OPENCL_CL_DEVICE_H

#include <stddef.h>

#include "backend.h"
#include "cl_memory.h"

typedef struct ffpa_cl_device {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;   /* the default queue (ffpa_set_stream(NULL)) */
    char name[160];           /* "<device> (<platform>, <type>)" */
    char cache_key[512];      /* device, platform and driver versions: part of the program cache's key */
    int is_gpu;               /* GPU or accelerator (not a CPU device) */
    int nv_cc;                /* NVIDIA's compute capability, 10 major + minor (cl_nv_device_attribute_query); 0 elsewhere */
} ffpa_cl_device;

/* The process's device, chosen and opened on first use; NULL with
 * FFPA_ERR_NO_BACKEND and the reason (no platform, no such device) in err.
 * FFPA_OPENCL_DEVICE: unset (the first GPU of any platform, else the first
 * device), "P:D" (device D of platform P), "N" (the N-th device over all
 * platforms), or a case-insensitive substring of "<platform> <device>". */
const ffpa_cl_device *ffpa_cl_device_get(char *err, size_t err_len);

/* The queue of a context's stream (NULL: the device's default queue). */
cl_command_queue ffpa_cl_queue(void *stream);

/* "CL_OUT_OF_RESOURCES (-5)" for an OpenCL error code. */
const char *ffpa_cl_error_string(int error);

/* The backend's capabilities on dev. */
void ffpa_cl_fill_caps(const ffpa_cl_device *dev, ffpa_backend_caps *caps);

#endif
