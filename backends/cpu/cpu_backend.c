/*
 * The cpu backend table: probe, context state, workspace and host memory.
 * The math lives in cpu_forward.c and cpu_backward.c, what they share
 * (plan, workspace carving) in cpu_workspace.c.
 */
#include "cpu_backward.h"
#include "cpu_forward.h"
#include "cpu_merge.h"
#include "cpu_workspace.h"
#include "host_alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_tiles.h"

/* ---------------------------------------------------------------- table members */

static ffpa_status cpu_probe(ffpa_backend_caps *caps, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    memset(caps, 0, sizeof *caps);
    cpu_device_limits(&caps->limits);
    int threads = caps->limits.sm_count;
    snprintf(caps->device_name, sizeof caps->device_name, "cpu (%d thread%s)", threads,
             threads == 1 ? "" : "s");
    caps->dtype_mask = (1u << FFPA_F16) | (1u << FFPA_BF16) | (1u << FFPA_F32);
    caps->max_head_dim = FFPA_MAX_HEAD_DIM;
    caps->has_backward = 1;
    caps->variants = FFPA_VARIANT_WINDOW | FFPA_VARIANT_SOFTCAP | FFPA_VARIANT_ALIBI;
    return FFPA_OK;
}

/* The cpu backend keeps no per-context state; a static token stands in so
 * that the core never sees a NULL state from a successful init. */
static int cpu_state_token;

static ffpa_status cpu_init(void **state, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    *state = &cpu_state_token;
    return FFPA_OK;
}

static void cpu_destroy(void *state)
{
    (void)state;
}

static size_t cpu_workspace_size(void *state, const ffpa_problem *pb, int backward)
{
    (void)state;
    return backward ? cpu_backward_workspace_size(pb) : cpu_forward_workspace_size(pb);
}

static ffpa_status cpu_forward_entry(void *state, const ffpa_problem *pb, void *workspace,
                                     size_t workspace_bytes, char *err, size_t err_len)
{
    (void)state;
    return cpu_forward(pb, workspace, workspace_bytes, err, err_len);
}

static ffpa_status cpu_kvcache_entry(void *state, const ffpa_problem *pb, void *workspace,
                                     size_t workspace_bytes, char *err, size_t err_len)
{
    (void)state;
    return cpu_forward_kvcache(pb, workspace, workspace_bytes, err, err_len);
}

static size_t cpu_kv_workspace_size(void *state, const ffpa_problem *pb)
{
    (void)state;
    return cpu_forward_workspace_size(pb);
}

static ffpa_status cpu_backward_entry(void *state, const ffpa_problem *pb, void *workspace,
                                      size_t workspace_bytes, char *err, size_t err_len)
{
    (void)state;
    return cpu_backward(pb, workspace, workspace_bytes, err, err_len);
}

static ffpa_status cpu_mem_alloc(void *state, void **ptr, size_t bytes, char *err, size_t err_len)
{
    (void)state;
    void *mem = NULL;
    /* 64-byte alignment suits every dtype and vector width; size 0 still
     * returns a distinct pointer. */
    size_t rounded = cpu_align64(bytes ? bytes : 1);
    if (rounded < bytes || ffpa_host_memalign(&mem, 64, rounded) != 0) {
        snprintf(err, err_len, "bytes: cannot allocate %zu bytes of host memory", bytes);
        *ptr = NULL;
        return FFPA_ERR_OUT_OF_MEMORY;
    }
    *ptr = mem;
    return FFPA_OK;
}

static void cpu_mem_free(void *state, void *ptr)
{
    (void)state;
    free(ptr);
}

static ffpa_status cpu_mem_copy(void *state, void *dst, const void *src, size_t bytes,
                                ffpa_copy_kind kind, char *err, size_t err_len)
{
    (void)state;
    (void)kind; /* host and "device" are the same memory */
    (void)err;
    (void)err_len;
    if (bytes)
        memmove(dst, src, bytes);
    return FFPA_OK;
}

static ffpa_status cpu_merge_entry(void *state, const ffpa_merge_problem *mp, char *err, size_t err_len)
{
    (void)state;
    (void)err;
    (void)err_len;
    return cpu_merge(mp);
}

static const ffpa_backend_i cpu_backend_table = {
    .abi_version = FFPA_BACKEND_ABI_VERSION,
    .name = "cpu",
    .probe = cpu_probe,
    .init = cpu_init,
    .destroy = cpu_destroy,
    .workspace_size = cpu_workspace_size,
    .forward = cpu_forward_entry,
    .backward = cpu_backward_entry,
    .set_stream = NULL,  /* no streams: the stream handle is ignored */
    .synchronize = NULL, /* calls return when the work is done */
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_copy = cpu_mem_copy,
    .last_kernel = NULL,     /* one kernel family */
    .forward_kvcache = cpu_kvcache_entry,
    .kv_workspace_size = cpu_kv_workspace_size,
    .kv_schedule = NULL,     /* one task per (sequence, head, query block): no split schedule */
    .merge = cpu_merge_entry,
    .version = FFPA_VERSION_STRING,
};

const ffpa_backend_i *ffpa_cpu_backend(void)
{
    return &cpu_backend_table;
}
