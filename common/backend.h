/*
 * The backend table: what a backend (built-in cpu, or a cuda/hip plugin
 * loaded with dlopen) provides to the core. Modelled on ggml's
 * ggml_backend_i: one struct of function pointers, each commented, optional
 * members marked, and an ABI version the core checks before using it.
 *
 * Errors: a member that fails writes a one-line message into err (at most
 * err_len bytes, NUL-terminated) and returns a status other than FFPA_OK.
 */
#ifndef FFPA_COMMON_BACKEND_H
#define FFPA_COMMON_BACKEND_H

#include <stddef.h>

#include "ffpa.h"
#include "plan.h"
#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bump on any change to ffpa_backend_i, ffpa_problem, ffpa_backend_caps, or
 * ffpa_plan / ffpa_plan_input (a tuning table's apply, in the core, fills
 * the plugin's plan: common/tuning.h). 5: forward_kvcache, kv_schedule.
 * 6: version. 7: window, softcap, ALiBi (ffpa_problem, caps.variants).
 * 8: merge (ffpa_merge_problem). */
#define FFPA_BACKEND_ABI_VERSION 8

/* Symbol every plugin exports: const ffpa_backend_i *ffpa_backend_entry(void). */
#define FFPA_BACKEND_ENTRY_SYMBOL "ffpa_backend_entry"

/* Attention variants a backend may implement (ffpa_backend_caps.variants). */
#define FFPA_VARIANT_WINDOW 1u
#define FFPA_VARIANT_SOFTCAP 2u
#define FFPA_VARIANT_ALIBI 4u

typedef struct ffpa_backend_caps {
    char device_name[160];       /* e.g. "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" */
    unsigned dtype_mask;         /* bit (1u << ffpa_dtype) per supported dtype */
    int max_head_dim;            /* largest Dqk / Dv accepted */
    int has_backward;            /* backward implemented */
    unsigned variants;           /* FFPA_VARIANT_* bits the backend implements (every op); the core
                                    refuses the others by name */
    ffpa_device_limits limits;   /* fed to the Split-D planner */
} ffpa_backend_caps;

typedef struct ffpa_backend_i {
    /* FFPA_BACKEND_ABI_VERSION the backend was built against. */
    unsigned abi_version;

    /* Short lower-case name: "cpu", "cuda", "hip". */
    const char *name;

    /* Required. Is a usable device present? Fills caps on success; otherwise
     * says why not (missing runtime, no device, driver too old). Must be
     * cheap and must not leave state behind. */
    ffpa_status (*probe)(ffpa_backend_caps *caps, char *err, size_t err_len);

    /* Required. Creates the per-context state (device, default stream). */
    ffpa_status (*init)(void **state, char *err, size_t err_len);

    /* Required. Frees the state from init; waits for outstanding work. */
    void (*destroy)(void *state);

    /* Optional (NULL: needs none). Workspace bytes for a forward
     * (backward = 0) or backward (backward = 1) call of this problem. */
    size_t (*workspace_size)(void *state, const ffpa_problem *pb, int backward);

    /* Required. Forward: writes pb->o and, when pb->lse.data, pb->lse.
     * workspace holds at least workspace_size(pb, 0) bytes of backend memory. */
    ffpa_status (*forward)(void *state, const ffpa_problem *pb, void *workspace,
                           size_t workspace_bytes, char *err, size_t err_len);

    /* Optional (NULL: backward unsupported). Writes pb->dq, dk, dv and,
     * when pb->has_dbias, pb->dbias. */
    ffpa_status (*backward)(void *state, const ffpa_problem *pb, void *workspace,
                            size_t workspace_bytes, char *err, size_t err_len);

    /* Optional (NULL: streams not applicable). Later calls run on stream. */
    ffpa_status (*set_stream)(void *state, void *stream, char *err, size_t err_len);

    /* Optional (NULL: calls are synchronous). Waits for the context's work. */
    ffpa_status (*synchronize)(void *state, char *err, size_t err_len);

    /* Required. Memory in the backend's address space. */
    ffpa_status (*mem_alloc)(void *state, void **ptr, size_t bytes, char *err, size_t err_len);
    void (*mem_free)(void *state, void *ptr);
    ffpa_status (*mem_copy)(void *state, void *dst, const void *src, size_t bytes,
                            ffpa_copy_kind kind, char *err, size_t err_len);

    /* Optional (NULL: one kernel family). Static name of the kernel the last
     * successful forward launched, e.g. "sm90 wgmma d256x2 cluster", for
     * benchmarks and A/B runs; "" before the first forward. */
    const char *(*last_kernel)(void *state);

    /* Optional (NULL: the paged KV cache is unsupported). Attention over a
     * paged KV cache (pb->kv set): appends pb->kv->k_new/v_new when
     * pb->kv->append, then writes pb->o and, when pb->lse.data, pb->lse.
     * Tables were checked by the core unless the caller vouched for them.
     * workspace holds at least kv_workspace_size(pb) bytes. */
    ffpa_status (*forward_kvcache)(void *state, const ffpa_problem *pb, void *workspace,
                                   size_t workspace_bytes, char *err, size_t err_len);

    /* Optional (NULL: needs none). Workspace bytes of forward_kvcache; a
     * function of the shapes only. */
    size_t (*kv_workspace_size)(void *state, const ffpa_problem *pb);

    /* Optional (NULL: no split schedule, e.g. cpu). The schedule
     * forward_kvcache would run for these host cache lengths. */
    ffpa_status (*kv_schedule)(void *state, const ffpa_problem *pb, const int32_t *host_seqlens,
                               ffpa_kv_schedule_info *out, char *err, size_t err_len);

    /* Optional (NULL: ffpa_merge_partials is unsupported). Merges partial
     * results by LSE: writes mp->o and, when mp->lse.data, mp->lse. Every
     * call has parts >= 1 and rows >= 1; o and lse may alias a part (in place). */
    ffpa_status (*merge)(void *state, const ffpa_merge_problem *mp, char *err, size_t err_len);

    /* Required. FFPA_VERSION_STRING of the sources the backend was built
     * from, for ffpa_backend_get_info (a plugin from another install shows). */
    const char *version;
} ffpa_backend_i;

typedef const ffpa_backend_i *(*ffpa_backend_entry_fn)(void);

/* The built-in cpu backend. */
const ffpa_backend_i *ffpa_cpu_backend(void);

#ifdef __cplusplus
}
#endif

#endif
