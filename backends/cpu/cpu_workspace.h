/*
 * What the cpu backend's passes and its table share: the machine's limits
 * for the planner, the Split-D plan, workspace carving, the thread index.
 */
#ifndef FFPA_CPU_WORKSPACE_H
#define FFPA_CPU_WORKSPACE_H

#include <stddef.h>

#include "ffpa.h"
#include "plan.h"
#include "problem.h"

/* Device limits the planner sees for this machine. */
void cpu_device_limits(ffpa_device_limits *lim);

/* Split-D plan of a forward (backward = 0) or backward (1) call; says why
 * in err when there is none (err may be NULL with err_len 0). */
ffpa_status cpu_plan(const ffpa_problem *pb, int backward, ffpa_plan *plan, char *err,
                     size_t err_len);

/* Workspace: a fixed part shared by all threads, then one 64-byte aligned
 * scratch slot per thread. The base pointer is aligned up by the carver, so
 * sizes include 64 bytes of slack. */
typedef struct cpu_workspace {
    char *shared;     /* fixed part (64-byte aligned) */
    char *slots;      /* first thread slot */
    size_t slot_bytes;
    int threads;      /* slots that fit: the thread count of the call */
} cpu_workspace;

/* Bytes for `shared_bytes` plus one slot of `slot_bytes` per thread. */
size_t cpu_workspace_bytes(size_t shared_bytes, size_t slot_bytes);

/* Splits caller memory; fails with a message when not even one slot fits. */
ffpa_status cpu_workspace_carve(cpu_workspace *ws, void *mem, size_t bytes, size_t shared_bytes,
                                size_t slot_bytes, char *err, size_t err_len);

static inline void *cpu_workspace_slot(const cpu_workspace *ws, int thread)
{
    return ws->slots + (size_t)thread * ws->slot_bytes;
}

/* Thread index inside the current parallel region (0 outside one). */
int cpu_thread_index(void);

#endif
