/* Stand-in addresses for OpenCL buffers. See cl_memory.h. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "cl_memory.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

typedef struct cl_allocation {
    uintptr_t base;
    size_t bytes;
    cl_mem mem;
    struct cl_allocation *next;
} cl_allocation;

static cl_allocation *allocations;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

cl_int ffpa_cl_alloc(cl_context ctx, size_t bytes, void **ptr)
{
    *ptr = NULL;
    cl_int e = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &e);
    if (e != CL_SUCCESS)
        return e;
    cl_allocation *a = malloc(sizeof *a);
    /* One byte more than the buffer: the one-past-the-end address is still
     * ours, never the start of the next range (mmap packs them). */
    const size_t reserved = bytes + 1;
    void *range = mmap(NULL, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!a || range == MAP_FAILED) {
        free(a);
        if (range != MAP_FAILED)
            munmap(range, reserved);
        clReleaseMemObject(mem);
        return CL_OUT_OF_HOST_MEMORY;
    }
    a->base = (uintptr_t)range;
    a->bytes = bytes;
    a->mem = mem;
    pthread_mutex_lock(&lock);
    a->next = allocations;
    allocations = a;
    pthread_mutex_unlock(&lock);
    *ptr = range;
    return CL_SUCCESS;
}

cl_int ffpa_cl_free(void *ptr)
{
    if (!ptr)
        return CL_SUCCESS;
    pthread_mutex_lock(&lock);
    cl_allocation **at = &allocations;
    while (*at && (*at)->base != (uintptr_t)ptr)
        at = &(*at)->next;
    cl_allocation *a = *at;
    if (a)
        *at = a->next;
    pthread_mutex_unlock(&lock);
    if (!a)
        return CL_INVALID_MEM_OBJECT;
    /* Releasing waits for nothing: OpenCL keeps the buffer alive until the
     * commands that use it are done. */
    cl_int e = clReleaseMemObject(a->mem);
    munmap((void *)a->base, a->bytes + 1);
    free(a);
    return e;
}

cl_mem ffpa_cl_resolve(const void *p, size_t *offset)
{
    const uintptr_t at = (uintptr_t)p;
    cl_mem found = NULL;
    pthread_mutex_lock(&lock);
    for (const cl_allocation *a = allocations; a; a = a->next)
        if (at >= a->base && at <= a->base + a->bytes) {
            found = a->mem;
            *offset = at - a->base;
            break;
        }
    pthread_mutex_unlock(&lock);
    return found;
}
