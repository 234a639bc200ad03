/*
 * Device memory of the OpenCL backend as plain pointers. The C API hands
 * tensors around as `void *` with element offsets folded in; OpenCL buffers
 * are opaque cl_mem handles, and shared virtual memory (which would give
 * real pointers) is optional in OpenCL 3.0 and missing on NVIDIA's driver.
 * So every allocation reserves an address range of its size (PROT_NONE: no
 * memory behind it, never dereferenced) and the range stands for the buffer:
 * any pointer inside it resolves to (cl_mem, byte offset), which is what
 * the copies and kernel arguments take.
 */
#ifndef FFPA_OPENCL_CL_MEMORY_H
#define FFPA_OPENCL_CL_MEMORY_H

#include <stddef.h>
#include <stdint.h>

/* The 1.2 API (clCreateCommandQueue) is what every platform implements. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

/* A buffer of `bytes` in ctx; *ptr its stand-in address. CL error code. */
cl_int ffpa_cl_alloc(cl_context ctx, size_t bytes, void **ptr);

/* Frees what ffpa_cl_alloc returned (NULL: no-op). CL error code. */
cl_int ffpa_cl_free(void *ptr);

/* The buffer holding address p and p's byte offset in it, or NULL when p
 * lies in no live allocation (one past the end counts, for empty views). */
cl_mem ffpa_cl_resolve(const void *p, size_t *offset);

#endif
