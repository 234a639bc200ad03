/* The cpu backend's ffpa_merge_partials (cpu_merge.c). */
#ifndef FFPA_CPU_MERGE_H
#define FFPA_CPU_MERGE_H

#include "problem.h"

ffpa_status cpu_merge(const ffpa_merge_problem *mp);

#endif
