/* The cpu forward pass (cpu_forward.c), called by the backend table. */
#ifndef FFPA_CPU_FORWARD_H
#define FFPA_CPU_FORWARD_H

#include <stddef.h>

#include "ffpa.h"
#include "problem.h"

size_t cpu_forward_workspace_size(const ffpa_problem *pb);
/* Paged KV cache (pb->kv): append, then the forward over the pages. */
ffpa_status cpu_forward_kvcache(const ffpa_problem *pb, void *workspace, size_t workspace_bytes,
                                char *err, size_t err_len);
ffpa_status cpu_forward(const ffpa_problem *pb, void *workspace, size_t workspace_bytes,
                        char *err, size_t err_len);

#endif
