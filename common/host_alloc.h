/*
 * Host allocations of the core and the cpu backend go through these, so a
 * test build (-Dalloc-failure-injection=true) can fail the N-th one and
 * prove that every failure becomes a status and a message, never a crash
 * or a leak (tests/test_alloc_failures.c). In other builds they are the C
 * library's calls.
 */
#ifndef FFPA_COMMON_HOST_ALLOC_H
#define FFPA_COMMON_HOST_ALLOC_H

#include <errno.h>
#include <stdlib.h>

#include "ffpa.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef FFPA_ALLOC_FAILURE_INJECTION
/* With FFPA_FAIL_ALLOC=N in the environment: 1 for the N-th allocation
 * counted from when the variable last changed. Not thread-safe (tests). */
FFPA_API int ffpa_alloc_should_fail(void);
/* Allocations failed on purpose so far. */
FFPA_API long ffpa_alloc_failures_injected(void);
#else
static inline int ffpa_alloc_should_fail(void)
{
    return 0;
}
#endif

static inline void *ffpa_host_malloc(size_t bytes)
{
    return ffpa_alloc_should_fail() ? NULL : malloc(bytes);
}

static inline void *ffpa_host_calloc(size_t count, size_t size)
{
    return ffpa_alloc_should_fail() ? NULL : calloc(count, size);
}

static inline int ffpa_host_memalign(void **ptr, size_t alignment, size_t bytes)
{
    return ffpa_alloc_should_fail() ? ENOMEM : posix_memalign(ptr, alignment, bytes);
}

#ifdef __cplusplus
}
#endif

#endif
