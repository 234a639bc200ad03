/* The cpu backward pass (cpu_backward.c), called by the backend table. */
#ifndef FFPA_CPU_BACKWARD_H
#define FFPA_CPU_BACKWARD_H

#include <stddef.h>

#include "ffpa.h"
#include "problem.h"

size_t cpu_backward_workspace_size(const ffpa_problem *pb);
ffpa_status cpu_backward(const ffpa_problem *pb, void *workspace, size_t workspace_bytes,
                         char *err, size_t err_len);

#endif
