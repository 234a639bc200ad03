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

/* The values of varlen offsets given in backend memory (pb->cu_on_device),
 * for a backend whose memory the host reads directly (the cpu backend): as
 * host offsets are checked, plus no sequence longer than max_seqlen_*. */
ffpa_status ffpa_validate_offsets_values(const ffpa_problem *pb, char *err, size_t err_len);

/* opt->dbias (when set) against the bias already in *pb: fills pb's dbias
 * fields. Part of ffpa_validate_backward; the backward workspace query uses
 * it alone. */
ffpa_status ffpa_validate_dbias(const ffpa_options *opt, ffpa_problem *pb, char *err, size_t err_len);

ffpa_status ffpa_validate_backward(const ffpa_tensor *dout, const ffpa_tensor *q,
                                   const ffpa_tensor *k, const ffpa_tensor *v,
                                   const ffpa_tensor *out, const ffpa_tensor *lse,
                                   const ffpa_tensor *dq, const ffpa_tensor *dk,
                                   const ffpa_tensor *dv, const ffpa_options *opt,
                                   ffpa_problem *pb, char *err, size_t err_len);

/* ffpa_forward_kvcache's arguments (shapes, dtypes, strides, page size,
 * options; not the contents of block_table / cache_seqlens, which live in
 * backend memory: see ffpa_validate_kv_tables). Fills pb and kv (pb->kv = kv). */
ffpa_status ffpa_validate_kvcache(const ffpa_tensor *q, const ffpa_kv_cache *cache,
                                  const ffpa_tensor *k_new, const ffpa_tensor *v_new,
                                  const ffpa_tensor *o, const ffpa_tensor *lse,
                                  const ffpa_options *opt, ffpa_problem *pb, ffpa_kv_problem *kv,
                                  char *err, size_t err_len);

/* The shape part of the above (q, cache, options): what a workspace-size
 * or schedule query needs. */
ffpa_status ffpa_validate_kv_inputs(const ffpa_tensor *q, const ffpa_kv_cache *cache,
                                   const ffpa_options *opt, ffpa_problem *pb, ffpa_kv_problem *kv,
                                   char *err, size_t err_len);

/* The table contents, from host copies: every length in 0..capacity (after
 * the append), every page a sequence uses inside the pool. block_table may
 * be NULL (dense cache). */
ffpa_status ffpa_validate_kv_tables(const ffpa_problem *pb, const int32_t *seqlens,
                                    const int32_t *block_table, char *err, size_t err_len);

/* ffpa_merge_partials' arguments (ffpa.h): parts, shapes, dtypes, strides,
 * and no overlap of an output with an input other than the exact in-place
 * aliases. Fills mp. */
ffpa_status ffpa_validate_merge(int parts, const ffpa_tensor *o_parts, const ffpa_tensor *lse_parts,
                                const ffpa_tensor *o, const ffpa_tensor *lse, ffpa_merge_problem *mp,
                                char *err, size_t err_len);

/* A view of a broadcast operand (bias, dbias): size-1 dimensions get stride 0. */
ffpa_view ffpa_broadcast_view(const ffpa_tensor *t);

#endif
