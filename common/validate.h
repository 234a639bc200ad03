/*
 * Argument validation shared by every backend: turns the public tensors and
 * options into a checked ffpa_problem, or says precisely what is wrong.
 * Messages read "<argument>: <what is wrong>; expected <what>".
 */
#ifndef FFPA_COMMON_VALIDATE_H
#define FFPA_COMMON_VALIDATE_H

#include <stddef.h>

#include "ffpa.h"
#include "problem.h"

ffpa_status ffpa_validate_forward(const ffpa_tensor *q, const ffpa_tensor *k,
                                  const ffpa_tensor *v, const ffpa_tensor *o,
                                  const ffpa_tensor *lse, const ffpa_options *opt,
                                  ffpa_problem *pb, char *err, size_t err_len);

/* Checks only what a workspace-size query needs (q, k, v, options). */
ffpa_status ffpa_validate_inputs(const ffpa_tensor *q, const ffpa_tensor *k,
                                 const ffpa_tensor *v, const ffpa_options *opt,
                                 ffpa_problem *pb, char *err, size_t err_len);

ffpa_status ffpa_validate_backward(const ffpa_tensor *dout, const ffpa_tensor *q,
                                   const ffpa_tensor *k, const ffpa_tensor *v,
                                   const ffpa_tensor *out, const ffpa_tensor *lse,
                                   const ffpa_tensor *dq, const ffpa_tensor *dk,
                                   const ffpa_tensor *dv, const ffpa_options *opt,
                                   ffpa_problem *pb, char *err, size_t err_len);

/* A view of a broadcast operand (bias, dbias): size-1 dimensions get stride 0. */
ffpa_view ffpa_broadcast_view(const ffpa_tensor *t);

#endif
