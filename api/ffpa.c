/*
 * The thin C front: argument validation (common/validate.c), backend
 * selection (registry.c), error strings and workspace ownership. No math.
 */
#define _GNU_SOURCE /* dladdr, to find tuning tables beside libffpa */
#include "ffpa.h"
#include "host_alloc.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "env.h"
#include "fill.h"
#include "registry.h"
#include "tuning.h"
#include "validate.h"

#ifndef FFPA_DATA_DIR
#define FFPA_DATA_DIR "/usr/local/share"
#endif

#define ERR_LEN 1024

struct ffpa_context {
    const ffpa_registry_entry *backend;
    void *state;
    char err[ERR_LEN];
    void *owned_ws;        /* context-owned workspace, grown on demand */
    size_t owned_ws_bytes;
    void *user_ws;         /* caller-provided workspace, when set */
    size_t user_ws_bytes;
    ffpa_tuning_table *tuning; /* this device's tuned plans, or NULL: heuristics */
    int ran;               /* a pass has succeeded on this context (ffpa_last_kernel) */
};

/* Message of the last failed ffpa_create (or call with a NULL context). */
static _Thread_local char thread_err[ERR_LEN];

static ffpa_status set_error(char *buf, ffpa_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, ERR_LEN, fmt, ap);
    va_end(ap);
    return st;
}

#define NULL_CTX_ERROR() \
    set_error(thread_err, FFPA_ERR_INVALID_ARGUMENT, "ctx: is NULL; expected a context from ffpa_create")

ffpa_options ffpa_options_default(void)
{
    ffpa_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = (uint32_t)sizeof opt;
    opt.grad_accum = FFPA_GRAD_ACCUM_F32;
    return opt;
}

/* The caller's options as this library's struct (ffpa.h, struct_size):
 * fields past an older caller's size keep their defaults; a newer caller's
 * fields this library lacks must be 0. *use: out, or NULL for NULL. */
static ffpa_status resolve_options(char *err, const ffpa_options *in, ffpa_options *out,
                                   const ffpa_options **use)
{
    *use = NULL;
    if (!in)
        return FFPA_OK;
    size_t n = in->struct_size ? in->struct_size : sizeof *out;
    if (n < sizeof in->struct_size)
        return set_error(err, FFPA_ERR_INVALID_ARGUMENT,
                         "opt.struct_size: %u is smaller than the field itself; expected sizeof(ffpa_options) "
                         "(ffpa_options_default() sets it)",
                         (unsigned)in->struct_size);
    if (n > sizeof *out) {
        const unsigned char *extra = (const unsigned char *)in + sizeof *out;
        for (size_t i = 0; i < n - sizeof *out; ++i)
            if (extra[i])
                return set_error(err, FFPA_ERR_UNSUPPORTED,
                                 "opt: sets options this libffpa %s does not know (struct_size %zu > %zu); "
                                 "expected them left at 0, or a libffpa built from the caller's newer ffpa.h",
                                 FFPA_VERSION_STRING, n, sizeof *out);
        n = sizeof *out;
    }
    *out = ffpa_options_default();
    memcpy(out, in, n);
    out->struct_size = (uint32_t)sizeof *out;
    *use = out;
    return FFPA_OK;
}

#define RESOLVE_OPTIONS(err, opt)                                       \
    ffpa_options opt_copy_;                                             \
    do {                                                                \
        ffpa_status rst_ = resolve_options((err), (opt), &opt_copy_, &(opt)); \
        if (rst_ != FFPA_OK)                                            \
            return rst_;                                                \
    } while (0)

/* ------------------------------------------------------------------ backends */

int ffpa_backend_count(void)
{
    return ffpa_registry_count();
}

ffpa_status ffpa_backend_get_info(int index, ffpa_backend_info *info)
{
    if (!info)
        return set_error(thread_err, FFPA_ERR_INVALID_ARGUMENT, "info: is NULL; expected a struct");
    const ffpa_registry_entry *e = ffpa_registry_get(index);
    if (!e)
        return set_error(thread_err, FFPA_ERR_INVALID_ARGUMENT,
                         "index: %d is out of range; expected 0..%d", index, ffpa_registry_count() - 1);
    info->name = e->name;
    info->available = e->status == FFPA_OK;
    snprintf(info->detail, sizeof info->detail, "%s", info->available ? e->caps.device_name : e->why);
    snprintf(info->version, sizeof info->version, "%s", e->iface && e->iface->version ? e->iface->version : "");
    return FFPA_OK;
}

/* ------------------------------------------------------------------ context */

/* Folder holding libffpa (tables live in <it>/ffpa/tuning; in the build
 * tree that is <build>/ffpa/tuning, where tuning/meson.build copies them). */
static int library_dir(char *buf, size_t len)
{
    Dl_info info;
    char resolved[PATH_MAX];
    if (!dladdr((void *)&ffpa_create, &info) || !info.dli_fname)
        return 0;
    const char *file = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
    const char *slash = strrchr(file, '/');
    size_t n = slash ? (size_t)(slash - file) : 0;
    if (!slash || n >= len)
        return 0;
    memcpy(buf, file, n);
    buf[n] = '\0';
    return 1;
}

/* The device's tuning table (FFPA_TUNING, FFPA_TUNING_FILE; see tuning.h).
 * A bad table is reported once, here, and the heuristics are used. */
static ffpa_tuning_table *load_tuning(const ffpa_registry_entry *e)
{
    char lib_dir[PATH_MAX], warn[512];
    int have_dir = library_dir(lib_dir, sizeof lib_dir);
    ffpa_tuning_table *t = ffpa_tuning_load_for_device(e->caps.device_name, e->caps.limits.arch, e->name,
                                                       have_dir ? lib_dir : NULL, FFPA_DATA_DIR, warn,
                                                       sizeof warn);
    if (warn[0])
        fprintf(stderr, "libffpa: warning: tuning table ignored, using the built-in heuristics: %s\n",
                warn);
    return t;
}

/* The first GPU-class backend whose device is a GPU (an OpenCL CPU device,
 * such as pocl's, runs only when named), else cpu. */
static const ffpa_registry_entry *pick_auto(void)
{
    for (int i = 0; i < ffpa_registry_count(); ++i) {
        const ffpa_registry_entry *e = ffpa_registry_get(i);
        if (e->is_gpu && e->status == FFPA_OK && e->caps.limits.is_gpu)
            return e;
    }
    return ffpa_registry_find("cpu");
}

ffpa_status ffpa_create(ffpa_context **out, const char *backend)
{
    char list[1400];
    if (!out)
        return set_error(thread_err, FFPA_ERR_INVALID_ARGUMENT, "ctx: output pointer is NULL");
    *out = NULL;
    const char *source = "backend";
    if (!backend) {
        backend = ffpa_env_string("FFPA_BACKEND");
        source = "FFPA_BACKEND";
    }
    if (!backend)
        backend = "auto";

    const ffpa_registry_entry *e;
    if (strcmp(backend, "auto") == 0) {
        e = pick_auto();
    } else {
        e = ffpa_registry_find(backend);
        if (!e) {
            ffpa_registry_describe(list, sizeof list, 1);
            return set_error(thread_err, FFPA_ERR_NO_BACKEND,
                             "%s: unknown backend '%s'; expected auto or one of: %s", source, backend,
                             list);
        }
        if (e->status != FFPA_OK) {
            ffpa_registry_describe(list, sizeof list, 0);
            return set_error(thread_err, FFPA_ERR_NO_BACKEND,
                             "%s: backend '%s' cannot start: %s; backends: %s", source, backend, e->why,
                             list);
        }
    }

    ffpa_context *ctx = ffpa_host_calloc(1, sizeof *ctx);
    if (!ctx)
        return set_error(thread_err, FFPA_ERR_OUT_OF_MEMORY, "ctx: out of host memory");
    ctx->backend = e;
    ffpa_status st = e->iface->init(&ctx->state, ctx->err, sizeof ctx->err);
    if (st != FFPA_OK) {
        set_error(thread_err, st == FFPA_ERR_DEVICE ? FFPA_ERR_NO_BACKEND : st,
                  "%s: backend '%s' failed to start: %s", source, e->name, ctx->err);
        free(ctx);
        return st == FFPA_ERR_DEVICE ? FFPA_ERR_NO_BACKEND : st;
    }
    ctx->tuning = load_tuning(e);
    thread_err[0] = '\0';
    *out = ctx;
    return FFPA_OK;
}

void ffpa_destroy(ffpa_context *ctx)
{
    if (!ctx)
        return;
    if (ctx->owned_ws)
        ctx->backend->iface->mem_free(ctx->state, ctx->owned_ws);
    ctx->backend->iface->destroy(ctx->state);
    ffpa_tuning_free(ctx->tuning);
    free(ctx);
}

const char *ffpa_backend_name(const ffpa_context *ctx)
{
    return ctx ? ctx->backend->name : "";
}

const char *ffpa_device_name(const ffpa_context *ctx)
{
    return ctx ? ctx->backend->caps.device_name : "";
}

const char *ffpa_last_kernel(const ffpa_context *ctx)
{
    if (!ctx || !ctx->ran)
        return "";
    if (!ctx->backend->iface->last_kernel)
        return ctx->backend->iface->name; /* one kernel family: the backend */
    const char *k = ctx->backend->iface->last_kernel(ctx->state);
    return k ? k : "";
}

const char *ffpa_last_error(const ffpa_context *ctx)
{
    return ctx ? ctx->err : thread_err;
}

ffpa_status ffpa_set_stream(ffpa_context *ctx, void *stream)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    if (!ctx->backend->iface->set_stream)
        return FFPA_OK; /* streams do not apply (cpu) */
    return ctx->backend->iface->set_stream(ctx->state, stream, ctx->err, sizeof ctx->err);
}

ffpa_status ffpa_synchronize(ffpa_context *ctx)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    if (!ctx->backend->iface->synchronize)
        return FFPA_OK;
    return ctx->backend->iface->synchronize(ctx->state, ctx->err, sizeof ctx->err);
}

/* ------------------------------------------------------------------ memory */

ffpa_status ffpa_malloc(ffpa_context *ctx, void **ptr, size_t bytes)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    if (!ptr)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT, "ptr: is NULL; expected an output pointer");
    *ptr = NULL;
    if (bytes == 0)
        return FFPA_OK;
    return ctx->backend->iface->mem_alloc(ctx->state, ptr, bytes, ctx->err, sizeof ctx->err);
}

ffpa_status ffpa_free(ffpa_context *ctx, void *ptr)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    if (ptr)
        ctx->backend->iface->mem_free(ctx->state, ptr);
    return FFPA_OK;
}

ffpa_status ffpa_memcpy(ffpa_context *ctx, void *dst, const void *src, size_t bytes,
                        ffpa_copy_kind kind)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    if (bytes == 0)
        return FFPA_OK;
    if (!dst || !src)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT, "%s: is NULL; expected memory",
                         dst ? "src" : "dst");
    if (kind != FFPA_COPY_HOST_TO_DEVICE && kind != FFPA_COPY_DEVICE_TO_HOST &&
        kind != FFPA_COPY_DEVICE_TO_DEVICE)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT, "kind: %d; expected an ffpa_copy_kind",
                         (int)kind);
    return ctx->backend->iface->mem_copy(ctx->state, dst, src, bytes, kind, ctx->err, sizeof ctx->err);
}

/* ------------------------------------------------------------------ workspace */

ffpa_status ffpa_set_workspace(ffpa_context *ctx, void *ptr, size_t bytes)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    if (!ptr && bytes)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT,
                         "ptr: is NULL with %zu bytes; expected memory, or NULL and 0", bytes);
    if (ptr && (uintptr_t)ptr % 16)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT,
                         "ptr: %p is misaligned; expected 16-byte alignment", ptr);
    ctx->user_ws = ptr;
    ctx->user_ws_bytes = bytes;
    return FFPA_OK;
}

static size_t workspace_bytes(const ffpa_context *ctx, const ffpa_problem *pb, int backward)
{
    const ffpa_backend_i *b = ctx->backend->iface;
    return b->workspace_size ? b->workspace_size(ctx->state, pb, backward) : 0;
}

/* Workspace of at least `need` bytes: the caller's, or the context's own
 * (grown to the largest need seen, then reused). */
static ffpa_status acquire_workspace(ffpa_context *ctx, size_t need, void **ws, size_t *ws_bytes)
{
    if (ctx->user_ws || ctx->user_ws_bytes) {
        if (ctx->user_ws_bytes < need)
            return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT,
                             "workspace: %zu bytes set with ffpa_set_workspace; expected >= %zu",
                             ctx->user_ws_bytes, need);
        *ws = ctx->user_ws;
        *ws_bytes = ctx->user_ws_bytes;
        return FFPA_OK;
    }
    if (need > ctx->owned_ws_bytes) {
        const ffpa_backend_i *b = ctx->backend->iface;
        if (ctx->owned_ws) {
            /* The old buffer may still be in use by queued work. */
            ffpa_status st = ffpa_synchronize(ctx);
            if (st != FFPA_OK)
                return st;
            b->mem_free(ctx->state, ctx->owned_ws);
            ctx->owned_ws = NULL;
            ctx->owned_ws_bytes = 0;
        }
        ffpa_status st = b->mem_alloc(ctx->state, &ctx->owned_ws, need, ctx->err, sizeof ctx->err);
        if (st != FFPA_OK)
            return st;
        ctx->owned_ws_bytes = need;
    }
    *ws = ctx->owned_ws;
    *ws_bytes = ctx->owned_ws_bytes;
    return FFPA_OK;
}

/* What the backend's capabilities rule out, checked before any work. */
/* Varlen offsets in backend memory are the caller's promise where reading
 * them would synchronise with a device. The cpu backend's memory is host
 * memory: there they are checked like host offsets (a bad one would
 * otherwise be read past the tensors). */
static ffpa_status check_readable_offsets(ffpa_context *ctx, const ffpa_problem *pb)
{
    if (!pb->cu_on_device || strcmp(ctx->backend->name, "cpu") != 0)
        return FFPA_OK;
    return ffpa_validate_offsets_values(pb, ctx->err, sizeof ctx->err);
}

static ffpa_status check_caps(ffpa_context *ctx, const ffpa_problem *pb)
{
    const ffpa_backend_caps *caps = &ctx->backend->caps;
    if (!(caps->dtype_mask & (1u << pb->dtype)))
        return set_error(ctx->err, FFPA_ERR_UNSUPPORTED, "q: dtype %s is not supported by the %s backend",
                         ffpa_dtype_name(pb->dtype), ctx->backend->name);
    if (pb->dqk > caps->max_head_dim || pb->dv > caps->max_head_dim)
        return set_error(ctx->err, FFPA_ERR_UNSUPPORTED,
                         "q: head dim %lld/%lld exceeds the %s backend's limit %d", (long long)pb->dqk,
                         (long long)pb->dv, ctx->backend->name, caps->max_head_dim);
    const struct {
        int used;
        unsigned bit;
        const char *name;
    } variants[] = {{pb->window, FFPA_VARIANT_WINDOW, "opt.window"},
                    {pb->softcap > 0.0f, FFPA_VARIANT_SOFTCAP, "opt.softcap"},
                    {pb->alibi != NULL, FFPA_VARIANT_ALIBI, "opt.alibi_slopes"}};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; ++i)
        if (variants[i].used && !(caps->variants & variants[i].bit))
            return set_error(ctx->err, FFPA_ERR_UNSUPPORTED,
                             "%s: is set; the %s backend does not implement it yet (the cpu backend does)",
                             variants[i].name, ctx->backend->name);
    return FFPA_OK;
}

ffpa_status ffpa_forward_workspace_size(ffpa_context *ctx, const ffpa_tensor *q,
                                        const ffpa_tensor *k, const ffpa_tensor *v,
                                        const ffpa_options *opt, size_t *bytes)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    RESOLVE_OPTIONS(ctx->err, opt);
    if (!bytes)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT, "bytes: is NULL; expected an output");
    ffpa_problem pb;
    ffpa_status st = ffpa_validate_inputs(q, k, v, opt, &pb, ctx->err, sizeof ctx->err);
    if (st != FFPA_OK)
        return st;
    pb.tuning = ctx->tuning;
    *bytes = workspace_bytes(ctx, &pb, 0);
    return FFPA_OK;
}

ffpa_status ffpa_backward_workspace_size(ffpa_context *ctx, const ffpa_tensor *q,
                                         const ffpa_tensor *k, const ffpa_tensor *v,
                                         const ffpa_options *opt, size_t *bytes)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    RESOLVE_OPTIONS(ctx->err, opt);
    if (!bytes)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT, "bytes: is NULL; expected an output");
    ffpa_problem pb;
    ffpa_status st = ffpa_validate_inputs(q, k, v, opt, &pb, ctx->err, sizeof ctx->err);
    if (st != FFPA_OK)
        return st;
    /* Backends size their dbias scratch from its broadcast view. */
    st = ffpa_validate_dbias(opt, &pb, ctx->err, sizeof ctx->err);
    if (st != FFPA_OK)
        return st;
    pb.tuning = ctx->tuning;
    *bytes = workspace_bytes(ctx, &pb, 1);
    return FFPA_OK;
}

/* ------------------------------------------- zero-size dimensions (ffpa.h) */
/* The backends never see an empty grid: outputs that are constants are
 * filled here (O = 0 and LSE = -inf for rows that see no key, zero
 * gradients where nothing flows), and a zero head dim runs the backend on
 * a one-column zero pad (every score an empty dot product, 0). */

static ffpa_status fill(ffpa_context *ctx, const ffpa_tensor *t, float value)
{
    return t ? ffpa_fill_tensor(ctx->backend->iface, ctx->state, t, value, ctx->err, sizeof ctx->err)
             : FFPA_OK;
}

/* Up to four one-column tensors in the backend's memory, freed together
 * after the work that reads them. */
typedef struct pads {
    void *mem[4];
    int n;
} pads;

/* A dense tensor shaped like `like` with one column, zero-filled. */
static ffpa_status pad_like(ffpa_context *ctx, pads *p, const ffpa_tensor *like, ffpa_tensor *out)
{
    const size_t elt = ffpa_dtype_size(like->dtype);
    *out = *like;
    out->shape[3] = 1;
    out->stride[3] = 1;
    out->stride[2] = 1;
    out->stride[1] = like->shape[2];
    out->stride[0] = like->shape[1] * like->shape[2];
    int64_t elems, bytes;
    if (__builtin_mul_overflow(like->shape[0], like->shape[1], &elems) ||
        __builtin_mul_overflow(elems, like->shape[2], &elems) ||
        __builtin_mul_overflow(elems, (int64_t)elt, &bytes))
        return set_error(ctx->err, FFPA_ERR_OUT_OF_MEMORY,
                         "workspace: a one-column stand-in for a zero-width tensor of shape [%lld, %lld, "
                         "%lld, 0] needs more than 2^63 bytes",
                         (long long)like->shape[0], (long long)like->shape[1], (long long)like->shape[2]);
    ffpa_status st =
        ctx->backend->iface->mem_alloc(ctx->state, &out->data, (size_t)bytes, ctx->err, sizeof ctx->err);
    if (st != FFPA_OK)
        return st;
    p->mem[p->n++] = out->data;
    return fill(ctx, out, 0.0f);
}

static ffpa_status pads_release(ffpa_context *ctx, pads *p, ffpa_status st)
{
    if (p->n && st == FFPA_OK)
        st = ffpa_synchronize(ctx); /* the pads are read by queued work */
    else if (p->n) { /* keep the first error's message */
        char ignored[ERR_LEN];
        if (ctx->backend->iface->synchronize)
            (void)ctx->backend->iface->synchronize(ctx->state, ignored, sizeof ignored);
    }
    for (int i = 0; i < p->n; ++i)
        ctx->backend->iface->mem_free(ctx->state, p->mem[i]);
    return st;
}

/* 1: the forward is complete (or failed: *st); 0: the backend runs it. */
static int forward_degenerate(ffpa_context *ctx, const ffpa_problem *pb, const ffpa_tensor *q,
                              const ffpa_tensor *k, const ffpa_tensor *v, const ffpa_tensor *o,
                              const ffpa_tensor *lse, const ffpa_options *opt, ffpa_status *st)
{
    *st = FFPA_OK;
    if (pb->batch == 0 || pb->hq == 0 || pb->total_q == 0 || (pb->dv == 0 && !lse))
        return 1; /* no output element */
    if (pb->total_k == 0) { /* no key anywhere: softmax over nothing */
        *st = fill(ctx, o, 0.0f);
        if (*st == FFPA_OK)
            *st = fill(ctx, lse, -INFINITY);
        return 1;
    }
    if (pb->dqk != 0 && pb->dv != 0)
        return 0;
    pads p = {{0}, 0};
    ffpa_tensor q1 = *q, k1 = *k, v1 = *v, o1 = *o;
    if (pb->dqk == 0) {
        *st = pad_like(ctx, &p, q, &q1);
        if (*st == FFPA_OK)
            *st = pad_like(ctx, &p, k, &k1);
    }
    if (pb->dv == 0 && *st == FFPA_OK) {
        *st = pad_like(ctx, &p, v, &v1);
        if (*st == FFPA_OK)
            *st = pad_like(ctx, &p, o, &o1);
    }
    if (*st == FFPA_OK)
        *st = ffpa_forward(ctx, &q1, &k1, &v1, &o1, lse, opt);
    *st = pads_release(ctx, &p, *st);
    return 1;
}

/* 1: the backward is complete (or failed: *st); 0: the backend runs it. */
static int backward_degenerate(ffpa_context *ctx, const ffpa_problem *pb, const ffpa_tensor *dout,
                               const ffpa_tensor *q, const ffpa_tensor *k, const ffpa_tensor *v,
                               const ffpa_tensor *out, const ffpa_tensor *lse, const ffpa_tensor *dq,
                               const ffpa_tensor *dk, const ffpa_tensor *dv, const ffpa_options *opt,
                               ffpa_status *st)
{
    *st = FFPA_OK;
    const ffpa_tensor *dbias = opt ? opt->dbias : NULL;
    if (pb->batch == 0 || pb->hq == 0)
        return 1; /* every gradient is empty */
    if (pb->total_q == 0 || pb->total_k == 0 || pb->dv == 0) {
        /* No query, no key, or dO of zero width: nothing flows back. */
        const ffpa_tensor *zero[] = {dq, dk, dv, dbias};
        for (int i = 0; i < 4 && *st == FFPA_OK; ++i)
            *st = fill(ctx, zero[i], 0.0f);
        return 1;
    }
    if (pb->dqk != 0)
        return 0;
    /* Dqk = 0: uniform attention; dV and dbias flow, dQ and dK are empty. */
    pads p = {{0}, 0};
    ffpa_tensor q1, k1, dq1, dk1;
    *st = pad_like(ctx, &p, q, &q1);
    if (*st == FFPA_OK)
        *st = pad_like(ctx, &p, k, &k1);
    if (*st == FFPA_OK)
        *st = pad_like(ctx, &p, dq, &dq1);
    if (*st == FFPA_OK)
        *st = pad_like(ctx, &p, dk, &dk1);
    if (*st == FFPA_OK)
        *st = ffpa_backward(ctx, dout, &q1, &k1, v, out, lse, &dq1, &dk1, dv, opt);
    *st = pads_release(ctx, &p, *st);
    return 1;
}

/* ------------------------------------------------------------------ attention */

ffpa_status ffpa_forward(ffpa_context *ctx, const ffpa_tensor *q, const ffpa_tensor *k,
                         const ffpa_tensor *v, const ffpa_tensor *o, const ffpa_tensor *lse,
                         const ffpa_options *opt)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    RESOLVE_OPTIONS(ctx->err, opt);
    ffpa_problem pb;
    ffpa_status st = ffpa_validate_forward(q, k, v, o, lse, opt, &pb, ctx->err, sizeof ctx->err);
    if (st == FFPA_OK)
        st = check_caps(ctx, &pb);
    if (st == FFPA_OK)
        st = check_readable_offsets(ctx, &pb);
    if (st != FFPA_OK || forward_degenerate(ctx, &pb, q, k, v, o, lse, opt, &st))
        return st;
    pb.tuning = ctx->tuning;
    void *ws = NULL;
    size_t ws_bytes = 0;
    st = acquire_workspace(ctx, workspace_bytes(ctx, &pb, 0), &ws, &ws_bytes);
    if (st != FFPA_OK)
        return st;
    st = ctx->backend->iface->forward(ctx->state, &pb, ws, ws_bytes, ctx->err, sizeof ctx->err);
    if (st == FFPA_OK)
        ctx->ran = 1;
    return st;
}

ffpa_status ffpa_backward(ffpa_context *ctx, const ffpa_tensor *dout, const ffpa_tensor *q,
                          const ffpa_tensor *k, const ffpa_tensor *v, const ffpa_tensor *out,
                          const ffpa_tensor *lse, const ffpa_tensor *dq, const ffpa_tensor *dk,
                          const ffpa_tensor *dv, const ffpa_options *opt)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    RESOLVE_OPTIONS(ctx->err, opt);
    ffpa_problem pb;
    ffpa_status st = ffpa_validate_backward(dout, q, k, v, out, lse, dq, dk, dv, opt, &pb, ctx->err,
                                            sizeof ctx->err);
    if (st == FFPA_OK)
        st = check_caps(ctx, &pb);
    if (st == FFPA_OK)
        st = check_readable_offsets(ctx, &pb);
    if (st != FFPA_OK)
        return st;
    if (!ctx->backend->iface->backward || !ctx->backend->caps.has_backward)
        return set_error(ctx->err, FFPA_ERR_UNSUPPORTED, "ctx: the %s backend has no backward pass",
                         ctx->backend->name);
    if (backward_degenerate(ctx, &pb, dout, q, k, v, out, lse, dq, dk, dv, opt, &st))
        return st;
    pb.tuning = ctx->tuning;
    void *ws = NULL;
    size_t ws_bytes = 0;
    st = acquire_workspace(ctx, workspace_bytes(ctx, &pb, 1), &ws, &ws_bytes);
    if (st != FFPA_OK)
        return st;
    st = ctx->backend->iface->backward(ctx->state, &pb, ws, ws_bytes, ctx->err, sizeof ctx->err);
    if (st == FFPA_OK)
        ctx->ran = 1;
    return st;
}

/* ------------------------------------------------------------------ merge */

ffpa_status ffpa_merge_partials(ffpa_context *ctx, int parts, const ffpa_tensor *o_parts,
                                const ffpa_tensor *lse_parts, const ffpa_tensor *o, const ffpa_tensor *lse)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    ffpa_merge_problem mp;
    ffpa_status st = ffpa_validate_merge(parts, o_parts, lse_parts, o, lse, &mp, ctx->err, sizeof ctx->err);
    if (st != FFPA_OK)
        return st;
    if (!ctx->backend->iface->merge)
        return set_error(ctx->err, FFPA_ERR_UNSUPPORTED, "ctx: the %s backend cannot merge partial results",
                         ctx->backend->name);
    if (mp.b == 0 || mp.h == 0 || mp.n == 0)
        return FFPA_OK; /* no row */
    return ctx->backend->iface->merge(ctx->state, &mp, ctx->err, sizeof ctx->err);
}

/* ------------------------------------------------------------------ KV cache */

static ffpa_status kv_supported(ffpa_context *ctx)
{
    if (!ctx->backend->iface->forward_kvcache)
        return set_error(ctx->err, FFPA_ERR_UNSUPPORTED, "ctx: the %s backend has no paged KV cache path",
                         ctx->backend->name);
    return FFPA_OK;
}

static size_t kv_workspace_bytes(const ffpa_context *ctx, const ffpa_problem *pb)
{
    const ffpa_backend_i *b = ctx->backend->iface;
    return b->kv_workspace_size ? b->kv_workspace_size(ctx->state, pb) : 0;
}

/* Copies the tables to the host and checks every entry a call will use. */
static ffpa_status check_kv_tables(ffpa_context *ctx, const ffpa_problem *pb)
{
    const ffpa_kv_problem *kv = pb->kv;
    const size_t len_bytes = (size_t)pb->batch * sizeof(int32_t);
    const size_t table_bytes =
        kv->block_table ? ((size_t)(pb->batch - 1) * (size_t)kv->bt_stride + (size_t)kv->max_pages) * sizeof(int32_t)
                        : 0;
    int32_t *lens = ffpa_host_malloc(len_bytes), *table = table_bytes ? ffpa_host_malloc(table_bytes) : NULL;
    ffpa_status st = FFPA_OK;
    if (!lens || (table_bytes && !table))
        st = set_error(ctx->err, FFPA_ERR_OUT_OF_MEMORY, "cache: out of host memory for the table check");
    if (st == FFPA_OK)
        st = ctx->backend->iface->mem_copy(ctx->state, lens, kv->cache_seqlens, len_bytes,
                                           FFPA_COPY_DEVICE_TO_HOST, ctx->err, sizeof ctx->err);
    if (st == FFPA_OK && table)
        st = ctx->backend->iface->mem_copy(ctx->state, table, kv->block_table, table_bytes,
                                           FFPA_COPY_DEVICE_TO_HOST, ctx->err, sizeof ctx->err);
    if (st == FFPA_OK)
        st = ffpa_validate_kv_tables(pb, lens, table, ctx->err, sizeof ctx->err);
    free(lens);
    free(table);
    return st;
}

ffpa_status ffpa_forward_kvcache(ffpa_context *ctx, const ffpa_tensor *q, const ffpa_kv_cache *cache,
                                 const ffpa_tensor *k_new, const ffpa_tensor *v_new, const ffpa_tensor *o,
                                 const ffpa_tensor *lse, const ffpa_options *opt)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    RESOLVE_OPTIONS(ctx->err, opt);
    ffpa_problem pb;
    ffpa_kv_problem kv;
    ffpa_status st = ffpa_validate_kvcache(q, cache, k_new, v_new, o, lse, opt, &pb, &kv, ctx->err,
                                           sizeof ctx->err);
    if (st == FFPA_OK)
        st = check_caps(ctx, &pb);
    if (st == FFPA_OK)
        st = kv_supported(ctx);
    if (st != FFPA_OK || pb.batch == 0 || pb.nq == 0)
        return st; /* no sequence or no new token: nothing to append or compute */
    if (!cache->trusted_tables)
        st = check_kv_tables(ctx, &pb);
    if (st != FFPA_OK)
        return st;
    pb.tuning = ctx->tuning;
    void *ws = NULL;
    size_t ws_bytes = 0;
    st = acquire_workspace(ctx, kv_workspace_bytes(ctx, &pb), &ws, &ws_bytes);
    if (st != FFPA_OK)
        return st;
    st = ctx->backend->iface->forward_kvcache(ctx->state, &pb, ws, ws_bytes, ctx->err, sizeof ctx->err);
    if (st == FFPA_OK)
        ctx->ran = 1;
    return st;
}

/* Validation of a size or schedule query: shapes only. */
static ffpa_status validate_kv_query(ffpa_context *ctx, const ffpa_tensor *q, const ffpa_kv_cache *cache,
                                     int append, const ffpa_options *opt, ffpa_problem *pb,
                                     ffpa_kv_problem *kv)
{
    ffpa_status st = ffpa_validate_kv_inputs(q, cache, opt, pb, kv, ctx->err, sizeof ctx->err);
    if (st != FFPA_OK)
        return st;
    kv->append = append != 0;
    pb->tuning = ctx->tuning;
    return check_caps(ctx, pb);
}

ffpa_status ffpa_forward_kvcache_workspace_size(ffpa_context *ctx, const ffpa_tensor *q,
                                                const ffpa_kv_cache *cache, const ffpa_options *opt,
                                                size_t *bytes)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    RESOLVE_OPTIONS(ctx->err, opt);
    if (!bytes)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT, "bytes: is NULL; expected an output");
    ffpa_problem pb;
    ffpa_kv_problem kv;
    ffpa_status st = validate_kv_query(ctx, q, cache, 1, opt, &pb, &kv);
    if (st == FFPA_OK)
        st = kv_supported(ctx);
    if (st != FFPA_OK)
        return st;
    *bytes = pb.batch == 0 || pb.nq == 0 ? 0 : kv_workspace_bytes(ctx, &pb);
    return FFPA_OK;
}

ffpa_status ffpa_kvcache_schedule(ffpa_context *ctx, const ffpa_tensor *q, const ffpa_kv_cache *cache,
                                  const int32_t *host_seqlens, int append, const ffpa_options *opt,
                                  ffpa_kv_schedule_info *out)
{
    if (!ctx)
        return NULL_CTX_ERROR();
    RESOLVE_OPTIONS(ctx->err, opt);
    if (!out || !host_seqlens)
        return set_error(ctx->err, FFPA_ERR_INVALID_ARGUMENT, "%s: is NULL; expected %s",
                         out ? "host_seqlens" : "out", out ? "int32 [B] host lengths" : "an output");
    ffpa_problem pb;
    ffpa_kv_problem kv;
    ffpa_status st = validate_kv_query(ctx, q, cache, append, opt, &pb, &kv);
    if (st != FFPA_OK)
        return st;
    if (!ctx->backend->iface->kv_schedule)
        return set_error(ctx->err, FFPA_ERR_UNSUPPORTED,
                         "ctx: the %s backend runs no split-KV schedule (one task per query tile)",
                         ctx->backend->name);
    memset(out, 0, sizeof *out);
    if (pb.batch == 0 || pb.nq == 0)
        return FFPA_OK; /* no work: an empty schedule */
    return ctx->backend->iface->kv_schedule(ctx->state, &pb, host_seqlens, out, ctx->err, sizeof ctx->err);
}
