/* What the cpu passes share: plan, workspace carving, thread index. See cpu_workspace.h. */
#include "cpu_workspace.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu_tiles.h"

#ifdef _OPENMP
#include <omp.h>
#endif

int cpu_thread_index(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

void cpu_device_limits(ffpa_device_limits *lim)
{
    memset(lim, 0, sizeof *lim);
    lim->is_gpu = 0;
    lim->arch = 0;
    lim->sm_count = cpu_max_threads(); /* one "multiprocessor" per thread */
    lim->warp_size = 1;
    lim->max_threads_per_block = 1;
}

ffpa_status cpu_plan(const ffpa_problem *pb, int backward, ffpa_plan *plan, char *err,
                     size_t err_len)
{
    ffpa_device_limits lim;
    cpu_device_limits(&lim);
    ffpa_plan_input in = ffpa_plan_input_of(pb, backward);
    ffpa_status st = ffpa_plan_make(&in, &lim, plan);
    if (st != FFPA_OK)
        snprintf(err, err_len,
                 "q: head dims Dqk = %lld, Dv = %lld have no cpu Split-D plan; expected 1..%d",
                 (long long)pb->dqk, (long long)pb->dv, FFPA_MAX_HEAD_DIM);
    return st;
}

size_t cpu_workspace_bytes(size_t shared_bytes, size_t slot_bytes)
{
    return 64 + cpu_align64(shared_bytes) + (size_t)cpu_max_threads() * cpu_align64(slot_bytes);
}

ffpa_status cpu_workspace_carve(cpu_workspace *ws, void *mem, size_t bytes, size_t shared_bytes,
                                size_t slot_bytes, char *err, size_t err_len)
{
    const size_t skip = mem ? (64 - (uintptr_t)mem % 64) % 64 : 0;
    const size_t shared = cpu_align64(shared_bytes), slot = cpu_align64(slot_bytes);
    const size_t need_one = skip + shared + slot;
    if (!mem || bytes < need_one) {
        snprintf(err, err_len, "workspace: %zu bytes; expected at least %zu (%zu per thread)",
                 mem ? bytes : (size_t)0, 64 + shared + slot, slot);
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    /* The thread count of the call is what both OpenMP and the memory allow. */
    size_t fit = (bytes - skip - shared) / slot;
    int threads = cpu_max_threads();
    if (fit < (size_t)threads)
        threads = (int)fit;
    ws->shared = (char *)mem + skip;
    ws->slots = ws->shared + shared;
    ws->slot_bytes = slot;
    ws->threads = threads;
    return FFPA_OK;
}
