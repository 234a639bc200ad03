/* Argument validation shared by every backend. See validate.h. */
#include "validate.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "philox.h"

static const char *const DIM_NAME[4] = {"B", "H", "N", "D"};

static ffpa_status fail(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return FFPA_ERR_INVALID_ARGUMENT;
}

#define TRY(expr)                  \
    do {                           \
        ffpa_status st_ = (expr);  \
        if (st_ != FFPA_OK)        \
            return st_;            \
    } while (0)

static int dtype_valid(ffpa_dtype dt)
{
    return dt == FFPA_F16 || dt == FFPA_BF16 || dt == FFPA_F32;
}

/* Elements of a tensor; -1 when the product of its nonzero dimensions
 * overflows int64 (refused even for an empty tensor: row counts such as
 * B x N are formed from them). Any zero-size dimension makes it 0. */
static int64_t element_count(const ffpa_tensor *t)
{
    int64_t n = 1;
    int empty = 0;
    for (int i = 0; i < 4; ++i) {
        if (t->shape[i] == 0)
            empty = 1;
        else if (__builtin_mul_overflow(n, t->shape[i], &n))
            return -1;
    }
    return empty ? 0 : n;
}

/* Pointer, dtype, shape >= 0, strides >= 0, element count and byte extent
 * within int64, alignment. A tensor with a zero-size dimension holds no
 * element: its pointer may be NULL. */
static ffpa_status check_tensor(const char *name, const ffpa_tensor *t, char *err, size_t err_len)
{
    if (!t)
        return fail(err, err_len, "%s: descriptor is NULL; expected a tensor", name);
    if (!dtype_valid(t->dtype))
        return fail(err, err_len, "%s: dtype %d is unknown; expected FFPA_F16, FFPA_BF16 or FFPA_F32",
                    name, (int)t->dtype);
    for (int i = 0; i < 4; ++i) {
        if (t->shape[i] < 0)
            return fail(err, err_len, "%s: shape[%d] (%s) = %lld is negative; expected >= 0", name, i,
                        DIM_NAME[i], (long long)t->shape[i]);
        if (t->stride[i] < 0)
            return fail(err, err_len, "%s: stride[%d] (%s) = %lld is negative; expected >= 0", name,
                        i, DIM_NAME[i], (long long)t->stride[i]);
    }
    const int64_t elements = element_count(t);
    if (elements < 0)
        return fail(err, err_len,
                    "%s: shape [%lld, %lld, %lld, %lld] multiplies past 2^63; expected an element "
                    "count that fits int64",
                    name, (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
                    (long long)t->shape[3]);
    if (elements == 0)
        return FFPA_OK;
    const int64_t elt = (int64_t)ffpa_dtype_size(t->dtype);
    int64_t last = 0; /* offset of the last element, then the byte extent */
    for (int i = 0; i < 4; ++i) {
        int64_t step;
        if (__builtin_mul_overflow(t->stride[i], t->shape[i] - 1, &step) ||
            __builtin_add_overflow(last, step, &last))
            last = -1;
        if (last < 0)
            break;
    }
    if (last < 0 || __builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, elt, &last))
        return fail(err, err_len, "%s: strides span more than 2^63 bytes; expected an extent that fits "
                                  "int64",
                    name);
    if (!t->data)
        return fail(err, err_len, "%s: data pointer is NULL; expected device/host memory", name);
    if ((uintptr_t)t->data % (uintptr_t)elt != 0)
        return fail(err, err_len, "%s: data pointer %p is misaligned; expected a multiple of %lld bytes",
                    name, t->data, (long long)elt);
    return FFPA_OK;
}

/* check_tensor, and every dimension >= 1 (the KV-cache call's tensors). */
static ffpa_status check_tensor_nonempty(const char *name, const ffpa_tensor *t, char *err, size_t err_len)
{
    TRY(check_tensor(name, t, err, err_len));
    for (int i = 0; i < 4; ++i)
        if (t->shape[i] < 1)
            return fail(err, err_len, "%s: shape[%d] (%s) = %lld; expected >= 1 in a KV-cache call",
                        name, i, DIM_NAME[i], (long long)t->shape[i]);
    return FFPA_OK;
}

/* An output must not have two indices mapping to one element. Sort the
 * dimensions by stride; each stride must step over the previous extent.
 * With sum_zero_strides, stride-0 dimensions are reductions (dbias) and skipped. */
static ffpa_status check_layout(const char *name, const ffpa_tensor *t, int ndim,
                                int sum_zero_strides, char *err, size_t err_len)
{
    for (int d = 0; d < 4; ++d)
        if (t->shape[d] == 0)
            return FFPA_OK; /* no element, nothing to overlap */
    int order[4] = {0, 1, 2, 3};
    for (int a = 1; a < ndim; ++a)
        for (int b = a; b > 0 && t->stride[order[b]] < t->stride[order[b - 1]]; --b) {
            int tmp = order[b];
            order[b] = order[b - 1];
            order[b - 1] = tmp;
        }
    int64_t extent = 1; /* elements spanned by the faster dimensions */
    for (int a = 0; a < ndim; ++a) {
        int d = order[a];
        if (t->shape[d] == 1 || (sum_zero_strides && t->stride[d] == 0))
            continue;
        if (t->stride[d] < extent)
            return fail(err, err_len,
                        "%s: strides make elements overlap (stride[%d] = %lld < %lld); expected "
                        "a non-overlapping output layout",
                        name, d, (long long)t->stride[d], (long long)extent);
        extent = t->stride[d] * (t->shape[d] - 1) + extent;
    }
    return FFPA_OK;
}

/* Byte range [lo, hi) a tensor's elements span. */
static void byte_range(const ffpa_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    if (element_count(t) == 0) { /* an empty range overlaps nothing */
        *lo = *hi = (uintptr_t)t->data;
        return;
    }
    int64_t last = 0;
    for (int i = 0; i < 4; ++i)
        last += t->stride[i] * (t->shape[i] - 1);
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)((last + 1) * (int64_t)ffpa_dtype_size(t->dtype));
}

/* Outputs must not share memory with any input or other output: kernels read
 * inputs after writing outputs (in another block, or in a later pass). */
typedef struct named_tensor {
    const char *name;
    const ffpa_tensor *t;
} named_tensor;

static ffpa_status check_separate(const named_tensor *outs, int n_outs, const named_tensor *ins,
                                  int n_ins, char *err, size_t err_len)
{
    for (int a = 0; a < n_outs; ++a) {
        if (!outs[a].t)
            continue;
        uintptr_t lo, hi;
        byte_range(outs[a].t, &lo, &hi);
        for (int b = 0; b < n_ins + n_outs; ++b) {
            const named_tensor *other = b < n_ins ? &ins[b] : &outs[b - n_ins];
            if (!other->t || other == &outs[a])
                continue;
            uintptr_t olo, ohi;
            byte_range(other->t, &olo, &ohi);
            if (lo < ohi && olo < hi)
                return fail(err, err_len, "%s: overlaps the memory of %s; expected a separate buffer",
                            outs[a].name, other->name);
        }
    }
    return FFPA_OK;
}

static ffpa_status check_dim(const char *name, const ffpa_tensor *t, int dim, int64_t want,
                             const char *why, char *err, size_t err_len)
{
    if (t->shape[dim] != want)
        return fail(err, err_len, "%s: shape[%d] (%s) = %lld; expected %lld (%s)", name, dim,
                    DIM_NAME[dim], (long long)t->shape[dim], (long long)want, why);
    return FFPA_OK;
}


static ffpa_view view_of(const ffpa_tensor *t)
{
    ffpa_view v = {t->data, t->stride[0], t->stride[1], t->stride[2], t->stride[3]};
    return v;
}

ffpa_view ffpa_broadcast_view(const ffpa_tensor *t)
{
    ffpa_view v = view_of(t);
    if (t->shape[0] == 1)
        v.sb = 0;
    if (t->shape[1] == 1)
        v.sh = 0;
    if (t->shape[2] == 1)
        v.sn = 0;
    if (t->shape[3] == 1)
        v.sd = 0;
    return v;
}

static ffpa_status check_cu_seqlens(const char *name, const int32_t *cu, int32_t batch,
                                    int64_t total, int64_t *max_len, char *err, size_t err_len)
{
    if (cu[0] != 0)
        return fail(err, err_len, "%s: [0] = %d; expected 0", name, cu[0]);
    int64_t longest = 0;
    for (int32_t b = 0; b < batch; ++b) {
        if (cu[b + 1] < cu[b])
            return fail(err, err_len, "%s: [%d] = %d < [%d] = %d; expected non-decreasing offsets",
                        name, b + 1, cu[b + 1], b, cu[b]);
        if (cu[b + 1] - cu[b] > longest)
            longest = cu[b + 1] - cu[b];
    }
    if (cu[batch] != total)
        return fail(err, err_len, "%s: [%d] = %d; expected %lld (rows of the packed tensor)", name,
                    batch, cu[batch], (long long)total);
    *max_len = longest;
    return FFPA_OK;
}

ffpa_status ffpa_validate_offsets_values(const ffpa_problem *pb, char *err, size_t err_len)
{
    int64_t longest_q, longest_k;
    TRY(check_cu_seqlens("opt.cu_seqlens_q", pb->cu_q, (int32_t)pb->batch, pb->total_q, &longest_q, err, err_len));
    TRY(check_cu_seqlens("opt.cu_seqlens_k", pb->cu_k, (int32_t)pb->batch, pb->total_k, &longest_k, err, err_len));
    if (longest_q > pb->nq || longest_k > pb->nkv)
        return fail(err, err_len, "%s: %lld is below the longest sequence's %lld rows; expected >= every "
                                  "cu_seqlens[b+1] - cu_seqlens[b]",
                    longest_q > pb->nq ? "opt.max_seqlen_q" : "opt.max_seqlen_k",
                    (long long)(longest_q > pb->nq ? pb->nq : pb->nkv),
                    (long long)(longest_q > pb->nq ? longest_q : longest_k));
    return FFPA_OK;
}

/* A caller-given longest sequence (offsets in backend memory). */
static ffpa_status check_max_seqlen(const char *name, int64_t max_len, int64_t total, char *err, size_t err_len)
{
    if (max_len < 0 || max_len > total)
        return fail(err, err_len, "%s: %lld; expected 0 <= max <= %lld (rows of the packed tensor) with "
                                  "opt.cu_seqlens_on_device", name, (long long)max_len, (long long)total);
    return FFPA_OK;
}

static ffpa_status check_bias_shape(const char *name, const ffpa_tensor *t, const ffpa_problem *pb,
                                    char *err, size_t err_len)
{
    const int64_t want[4] = {pb->batch, pb->hq, pb->nq, pb->nkv};
    for (int i = 0; i < 4; ++i) {
        int ok = t->shape[i] == 1 || t->shape[i] == want[i];
        if (!ok)
            return fail(err, err_len,
                        "%s: shape[%d] = %lld does not broadcast; expected 1 or %lld (%s)", name, i,
                        (long long)t->shape[i], (long long)want[i],
                        i == 0 ? "batch" : i == 1 ? "query heads" : i == 2 ? "query rows" : "key rows");
    }
    return FFPA_OK;
}

/* Window, softcap and ALiBi slopes (pb's batch and heads already set). */
static ffpa_status check_variants(const ffpa_options *opt, ffpa_problem *pb, char *err, size_t err_len)
{
    if (opt->window != 0 && opt->window != 1)
        return fail(err, err_len, "opt.window: %d; expected 0 (none) or 1 (window_left, window_right)", opt->window);
    if (opt->window) {
        const struct {
            const char *name;
            int64_t v;
        } sides[] = {{"opt.window_left", opt->window_left}, {"opt.window_right", opt->window_right}};
        for (int i = 0; i < 2; ++i)
            if (sides[i].v < -1)
                return fail(err, err_len, "%s: %lld; expected -1 (unbounded) or >= 0 keys", sides[i].name,
                            (long long)sides[i].v);
        pb->window = 1;
        pb->window_left = opt->window_left;
        pb->window_right = opt->window_right;
    }
    if (!(opt->softcap >= 0.0f && isfinite(opt->softcap)))
        return fail(err, err_len, "opt.softcap: %g; expected 0 (none) or a finite cap > 0", (double)opt->softcap);
    pb->softcap = opt->softcap;
    const ffpa_tensor *slopes = opt->alibi_slopes;
    if (slopes) {
        TRY(check_tensor("opt.alibi_slopes", slopes, err, err_len));
        if (slopes->dtype != FFPA_F32)
            return fail(err, err_len, "opt.alibi_slopes: dtype %s; expected f32", ffpa_dtype_name(slopes->dtype));
        const int64_t want[4] = {pb->batch, pb->hq, 1, 1};
        for (int i = 0; i < 4; ++i)
            if (slopes->shape[i] != want[i] && !(i == 0 && slopes->shape[0] == 1))
                return fail(err, err_len, "opt.alibi_slopes: shape[%d] = %lld; expected %s%lld ([B|1, Hq, 1, 1])",
                            i, (long long)slopes->shape[i], i == 0 ? "1 or " : "", (long long)want[i]);
        const ffpa_view view = ffpa_broadcast_view(slopes);
        pb->alibi = (const float *)view.data;
        pb->alibi_sb = view.sb;
        pb->alibi_sh = view.sh;
    }
    return FFPA_OK;
}

ffpa_status ffpa_validate_inputs(const ffpa_tensor *q, const ffpa_tensor *k, const ffpa_tensor *v,
                                 const ffpa_options *opt, ffpa_problem *pb, char *err,
                                 size_t err_len)
{
    static const ffpa_options defaults = {0};
    const int varlen = opt && (opt->cu_seqlens_q || opt->cu_seqlens_k);
    if (!opt)
        opt = &defaults;
    memset(pb, 0, sizeof *pb);
    TRY(check_tensor("q", q, err, err_len));
    TRY(check_tensor("k", k, err, err_len));
    TRY(check_tensor("v", v, err, err_len));
    if (k->dtype != q->dtype)
        return fail(err, err_len, "k: dtype %s differs from q's; expected %s", ffpa_dtype_name(k->dtype),
                    ffpa_dtype_name(q->dtype));
    if (v->dtype != q->dtype)
        return fail(err, err_len, "v: dtype %s differs from q's; expected %s", ffpa_dtype_name(v->dtype),
                    ffpa_dtype_name(q->dtype));
    TRY(check_dim("k", k, 0, q->shape[0], "batch of q", err, err_len));
    TRY(check_dim("v", v, 0, q->shape[0], "batch of q", err, err_len));
    TRY(check_dim("v", v, 1, k->shape[1], "heads of k", err, err_len));
    TRY(check_dim("v", v, 2, k->shape[2], "rows of k", err, err_len));
    TRY(check_dim("k", k, 3, q->shape[3], "head dim of q", err, err_len));
    if (k->shape[1] == 0 && q->shape[1] != 0)
        return fail(err, err_len, "k: 0 kv heads for %lld query heads; expected Hq %% Hkv == 0",
                    (long long)q->shape[1]);
    if (k->shape[1] != 0 && q->shape[1] % k->shape[1] != 0)
        return fail(err, err_len,
                    "k: %lld kv heads do not divide %lld query heads; expected Hq %% Hkv == 0",
                    (long long)k->shape[1], (long long)q->shape[1]);
    if (q->shape[3] > FFPA_MAX_HEAD_DIM)
        return fail(err, err_len, "q: head dim %lld is out of range; expected 0..%d",
                    (long long)q->shape[3], FFPA_MAX_HEAD_DIM);
    if (v->shape[3] > FFPA_MAX_HEAD_DIM)
        return fail(err, err_len, "v: head dim %lld is out of range; expected 0..%d",
                    (long long)v->shape[3], FFPA_MAX_HEAD_DIM);

    pb->dtype = q->dtype;
    pb->batch = q->shape[0];
    pb->hq = q->shape[1];
    pb->hkv = k->shape[1];
    pb->nq = q->shape[2];
    pb->nkv = k->shape[2];
    pb->dqk = q->shape[3];
    pb->dv = v->shape[3];
    pb->total_q = pb->batch * pb->nq;
    pb->total_k = pb->batch * pb->nkv;

    if (opt->cu_seqlens_on_device != 0 && opt->cu_seqlens_on_device != 1)
        return fail(err, err_len, "opt.cu_seqlens_on_device: %d; expected 0 or 1", opt->cu_seqlens_on_device);
    if (opt->cu_seqlens_on_device && !varlen)
        return fail(err, err_len, "opt.cu_seqlens_on_device: 1 without opt.cu_seqlens_q/k; expected offsets "
                                  "in backend memory, or 0");
    if (varlen) {
        if (!opt->cu_seqlens_q || !opt->cu_seqlens_k)
            return fail(err, err_len, "%s: is NULL while %s is set; expected both or neither",
                        opt->cu_seqlens_q ? "opt.cu_seqlens_k" : "opt.cu_seqlens_q",
                        opt->cu_seqlens_q ? "opt.cu_seqlens_q" : "opt.cu_seqlens_k");
        if (opt->varlen_batch < 1)
            return fail(err, err_len, "opt.varlen_batch: %d; expected >= 1 with cu_seqlens",
                        opt->varlen_batch);
        if (q->shape[0] != 1)
            return fail(err, err_len, "q: shape[0] (B) = %lld with varlen; expected 1 (packed rows)",
                        (long long)q->shape[0]);
        if (opt->cu_seqlens_on_device) {
            /* Backend memory: the caller's maxima size the launch; the
             * offsets themselves stay unread (no host synchronisation). */
            TRY(check_max_seqlen("opt.max_seqlen_q", opt->max_seqlen_q, q->shape[2], err, err_len));
            TRY(check_max_seqlen("opt.max_seqlen_k", opt->max_seqlen_k, k->shape[2], err, err_len));
            pb->nq = opt->max_seqlen_q;
            pb->nkv = opt->max_seqlen_k;
            pb->cu_on_device = 1;
        } else {
            TRY(check_cu_seqlens("opt.cu_seqlens_q", opt->cu_seqlens_q, opt->varlen_batch, q->shape[2],
                                 &pb->nq, err, err_len));
            TRY(check_cu_seqlens("opt.cu_seqlens_k", opt->cu_seqlens_k, opt->varlen_batch, k->shape[2],
                                 &pb->nkv, err, err_len));
        }
        pb->batch = opt->varlen_batch;
        pb->cu_q = opt->cu_seqlens_q;
        pb->cu_k = opt->cu_seqlens_k;
        pb->total_q = q->shape[2];
        pb->total_k = k->shape[2];
    }

    if (!isfinite(opt->scale))
        return fail(err, err_len, "opt.scale: %g is not finite; expected a finite number (0: 1/sqrt(D))",
                    (double)opt->scale);
    /* Dqk = 0: every score is an empty dot product, 0 at any scale (1 here, not 1/sqrt(0)). */
    pb->scale = opt->scale != 0.0f ? opt->scale : pb->dqk ? (float)(1.0 / sqrt((double)pb->dqk)) : 1.0f;
    if (opt->causal != 0 && opt->causal != 1)
        return fail(err, err_len, "opt.causal: %d; expected 0 or 1", opt->causal);
    pb->causal = opt->causal;

    if (!(opt->dropout_p >= 0.0f && opt->dropout_p < 1.0f))
        return fail(err, err_len, "opt.dropout_p: %g is out of range; expected 0 <= p < 1",
                    (double)opt->dropout_p);
    pb->dropout_p = opt->dropout_p;
    pb->dropout_threshold = ffpa_dropout_threshold((double)opt->dropout_p);
    pb->dropout_scale = (float)(1.0 / (1.0 - (double)opt->dropout_p));
    pb->dropout_seed = opt->dropout_seed;
    pb->dropout_offset = opt->dropout_offset;

    if (opt->bias) {
        TRY(check_tensor("bias", opt->bias, err, err_len));
        TRY(check_bias_shape("bias", opt->bias, pb, err, err_len));
        pb->has_bias = 1;
        pb->bias_dtype = opt->bias->dtype;
        pb->bias = ffpa_broadcast_view(opt->bias);
    }
    TRY(check_variants(opt, pb, err, err_len));
    if (opt->grad_accum != FFPA_GRAD_ACCUM_F32 && opt->grad_accum != FFPA_GRAD_ACCUM_OUTPUT)
        return fail(err, err_len, "opt.grad_accum: %d; expected FFPA_GRAD_ACCUM_F32 or _OUTPUT",
                    (int)opt->grad_accum);
    pb->grad_accum = opt->grad_accum;
    pb->deterministic = opt->deterministic != 0;

    pb->q = view_of(q);
    pb->k = view_of(k);
    pb->v = view_of(v);
    if (varlen)
        pb->q.sb = pb->k.sb = pb->v.sb = 0;
    return FFPA_OK;
}

/* An output shaped like `like` (same dims and dtype) that does not overlap. */
static ffpa_status check_output_like(const char *name, const ffpa_tensor *t, const ffpa_tensor *like,
                                     const char *like_name, char *err,
                                     size_t err_len)
{
    TRY(check_tensor(name, t, err, err_len));
    if (t->dtype != like->dtype)
        return fail(err, err_len, "%s: dtype %s; expected %s (the dtype of %s)", name,
                    ffpa_dtype_name(t->dtype), ffpa_dtype_name(like->dtype), like_name);
    for (int i = 0; i < 4; ++i)
        TRY(check_dim(name, t, i, like->shape[i], like_name, err, err_len));
    return check_layout(name, t, 4, 0, err, err_len);
}

/* O's shape: [B, Hq, Nq, Dv]. */
static ffpa_status check_o_shape(const char *name, const ffpa_tensor *t, const ffpa_tensor *q,
                                 const ffpa_tensor *v, char *err, size_t err_len)
{
    TRY(check_tensor(name, t, err, err_len));
    if (t->dtype != q->dtype)
        return fail(err, err_len, "%s: dtype %s; expected %s (the dtype of q)", name,
                    ffpa_dtype_name(t->dtype), ffpa_dtype_name(q->dtype));
    TRY(check_dim(name, t, 0, q->shape[0], "batch of q", err, err_len));
    TRY(check_dim(name, t, 1, q->shape[1], "heads of q", err, err_len));
    TRY(check_dim(name, t, 2, q->shape[2], "rows of q", err, err_len));
    TRY(check_dim(name, t, 3, v->shape[3], "head dim of v", err, err_len));
    return FFPA_OK;
}

static ffpa_status check_lse(const char *name, const ffpa_tensor *lse, const ffpa_tensor *q,
                             char *err, size_t err_len)
{
    TRY(check_tensor(name, lse, err, err_len));
    if (lse->dtype != FFPA_F32)
        return fail(err, err_len, "%s: dtype %s; expected f32", name, ffpa_dtype_name(lse->dtype));
    TRY(check_dim(name, lse, 0, q->shape[0], "batch of q", err, err_len));
    TRY(check_dim(name, lse, 1, q->shape[1], "heads of q", err, err_len));
    TRY(check_dim(name, lse, 2, q->shape[2], "rows of q", err, err_len));
    TRY(check_dim(name, lse, 3, 1, "one value per row", err, err_len));
    return FFPA_OK;
}

ffpa_status ffpa_validate_forward(const ffpa_tensor *q, const ffpa_tensor *k, const ffpa_tensor *v,
                                  const ffpa_tensor *o, const ffpa_tensor *lse,
                                  const ffpa_options *opt, ffpa_problem *pb, char *err,
                                  size_t err_len)
{
    TRY(ffpa_validate_inputs(q, k, v, opt, pb, err, err_len));
    TRY(check_o_shape("o", o, q, v, err, err_len));
    TRY(check_layout("o", o, 4, 0, err, err_len));
    pb->o = view_of(o);
    if (lse) {
        TRY(check_lse("lse", lse, q, err, err_len));
        TRY(check_layout("lse", lse, 3, 0, err, err_len));
        pb->lse = view_of(lse);
    }
    const named_tensor outs[] = {{"o", o}, {"lse", lse}};
    const named_tensor ins[] = {{"q", q},
                                {"k", k},
                                {"v", v},
                                {"bias", opt ? opt->bias : NULL},
                                {"opt.alibi_slopes", opt ? opt->alibi_slopes : NULL}};
    TRY(check_separate(outs, 2, ins, 5, err, err_len));
    if (pb->cu_q)
        pb->o.sb = pb->lse.sb = 0;
    return FFPA_OK;
}

ffpa_status ffpa_validate_dbias(const ffpa_options *opt, ffpa_problem *pb, char *err, size_t err_len)
{
    const ffpa_tensor *dbias = opt ? opt->dbias : NULL;
    if (dbias) {
        if (!pb->has_bias)
            return fail(err, err_len, "opt.dbias: is set without opt.bias; expected a bias to "
                                      "differentiate");
        TRY(check_tensor("opt.dbias", dbias, err, err_len));
        if (dbias->dtype != FFPA_F32 && dbias->dtype != opt->bias->dtype)
            return fail(err, err_len, "opt.dbias: dtype %s; expected f32 or %s (the bias dtype)",
                        ffpa_dtype_name(dbias->dtype), ffpa_dtype_name(opt->bias->dtype));
        for (int i = 0; i < 4; ++i)
            if (dbias->shape[i] != opt->bias->shape[i])
                return fail(err, err_len, "opt.dbias: shape[%d] = %lld; expected %lld (as bias)", i,
                            (long long)dbias->shape[i], (long long)opt->bias->shape[i]);
        TRY(check_layout("opt.dbias", dbias, 4, 1, err, err_len));
        pb->has_dbias = 1;
        pb->dbias_dtype = dbias->dtype;
        pb->dbias = ffpa_broadcast_view(dbias);
    }
    return FFPA_OK;
}

ffpa_status ffpa_validate_backward(const ffpa_tensor *dout, const ffpa_tensor *q,
                                   const ffpa_tensor *k, const ffpa_tensor *v,
                                   const ffpa_tensor *out, const ffpa_tensor *lse,
                                   const ffpa_tensor *dq, const ffpa_tensor *dk,
                                   const ffpa_tensor *dv, const ffpa_options *opt,
                                   ffpa_problem *pb, char *err, size_t err_len)
{
    TRY(ffpa_validate_inputs(q, k, v, opt, pb, err, err_len));
    TRY(check_o_shape("out", out, q, v, err, err_len));
    TRY(check_o_shape("dout", dout, q, v, err, err_len));
    if (!lse)
        return fail(err, err_len, "lse: is NULL; expected the forward's f32 LSE [B, Hq, Nq, 1]");
    TRY(check_lse("lse", lse, q, err, err_len));
    TRY(check_output_like("dq", dq, q, "q", err, err_len));
    TRY(check_output_like("dk", dk, k, "k", err, err_len));
    TRY(check_output_like("dv", dv, v, "v", err, err_len));
    pb->o = view_of(out);
    pb->dout = view_of(dout);
    pb->lse = view_of(lse);
    pb->grad_q = view_of(dq);
    pb->grad_k = view_of(dk);
    pb->grad_v = view_of(dv);
    if (pb->cu_q)
        pb->o.sb = pb->dout.sb = pb->lse.sb = pb->grad_q.sb = pb->grad_k.sb = pb->grad_v.sb = 0;

    const ffpa_tensor *dbias = opt ? opt->dbias : NULL;
    TRY(ffpa_validate_dbias(opt, pb, err, err_len));
    const named_tensor outs[] = {{"dq", dq}, {"dk", dk}, {"dv", dv}, {"opt.dbias", dbias}};
    const named_tensor ins[] = {{"dout", dout}, {"q", q},     {"k", k},
                                {"v", v},       {"out", out}, {"lse", lse},
                                {"bias", pb->has_bias ? opt->bias : NULL},
                                {"opt.alibi_slopes", pb->alibi ? opt->alibi_slopes : NULL}};
    TRY(check_separate(outs, 4, ins, 8, err, err_len));
    return FFPA_OK;
}

/* ------------------------------------------------------------------ merge */

static int ranges_overlap(const ffpa_tensor *a, const ffpa_tensor *b)
{
    uintptr_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}


/* a and b are one tensor: same memory, dtype and strides (size-1 dims aside). */
static int same_tensor(const ffpa_tensor *a, const ffpa_tensor *b)
{
    if (a->data != b->data || a->dtype != b->dtype)
        return 0;
    for (int i = 0; i < 4; ++i)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->stride[i] != b->stride[i]))
            return 0;
    return 1;
}

/* A part's or the merged LSE: float32 [B, H, N, 1] of o_parts[0]'s rows. */
static ffpa_status check_merge_lse(const char *name, const ffpa_tensor *t, const ffpa_tensor *first,
                                   char *err, size_t err_len)
{
    TRY(check_tensor(name, t, err, err_len));
    if (t->dtype != FFPA_F32)
        return fail(err, err_len, "%s: dtype %s; expected f32", name, ffpa_dtype_name(t->dtype));
    for (int d = 0; d < 3; ++d)
        TRY(check_dim(name, t, d, first->shape[d], "the rows of o_parts[0]", err, err_len));
    return check_dim(name, t, 3, 1, "one value per row", err, err_len);
}

static ffpa_status check_merge_out(const char *name, const ffpa_tensor *out, int parts,
                                   const ffpa_tensor *o_parts, const ffpa_tensor *lse_parts, char *err,
                                   size_t err_len)
{
    for (int i = 0; i < 2 * parts; ++i) {
        const ffpa_tensor *in = i < parts ? &o_parts[i] : &lse_parts[i - parts];
        if (ranges_overlap(out, in) && !same_tensor(out, in))
            return fail(err, err_len,
                        "%s: overlaps the memory of %s[%d] without being that tensor; expected a "
                        "separate buffer, or exactly %s[%d] (same data, dtype, strides) to merge in place",
                        name, i < parts ? "o_parts" : "lse_parts", i % parts,
                        i < parts ? "o_parts" : "lse_parts", i % parts);
    }
    return FFPA_OK;
}

ffpa_status ffpa_validate_merge(int parts, const ffpa_tensor *o_parts, const ffpa_tensor *lse_parts,
                                const ffpa_tensor *o, const ffpa_tensor *lse, ffpa_merge_problem *mp,
                                char *err, size_t err_len)
{
    memset(mp, 0, sizeof *mp);
    if (parts < 1 || parts > FFPA_MERGE_MAX_PARTS)
        return fail(err, err_len, "parts: %d; expected 1..%d (FFPA_MERGE_MAX_PARTS)", parts,
                    FFPA_MERGE_MAX_PARTS);
    if (!o_parts)
        return fail(err, err_len, "o_parts: is NULL; expected an array of %d tensors", parts);
    if (!lse_parts)
        return fail(err, err_len, "lse_parts: is NULL; expected an array of %d tensors", parts);
    char name[32];
    const ffpa_tensor *first = &o_parts[0];
    for (int i = 0; i < parts; ++i) {
        snprintf(name, sizeof name, "o_parts[%d]", i);
        TRY(check_tensor(name, &o_parts[i], err, err_len));
        for (int d = 0; d < 4; ++d)
            TRY(check_dim(name, &o_parts[i], d, first->shape[d], "the shape of o_parts[0]", err, err_len));
        snprintf(name, sizeof name, "lse_parts[%d]", i);
        TRY(check_merge_lse(name, &lse_parts[i], first, err, err_len));
    }
    TRY(check_tensor("o", o, err, err_len));
    for (int d = 0; d < 4; ++d)
        TRY(check_dim("o", o, d, first->shape[d], "the shape of o_parts[0]", err, err_len));
    TRY(check_layout("o", o, 4, 0, err, err_len));
    TRY(check_merge_out("o", o, parts, o_parts, lse_parts, err, err_len));
    if (lse) {
        TRY(check_merge_lse("lse", lse, first, err, err_len));
        TRY(check_layout("lse", lse, 3, 0, err, err_len));
        TRY(check_merge_out("lse", lse, parts, o_parts, lse_parts, err, err_len));
        if (ranges_overlap(o, lse))
            return fail(err, err_len, "lse: overlaps the memory of o; expected a separate buffer");
    }
    mp->parts = parts;
    mp->b = first->shape[0], mp->h = first->shape[1], mp->n = first->shape[2], mp->dv = first->shape[3];
    for (int i = 0; i < parts; ++i) {
        mp->o_part[i] = view_of(&o_parts[i]);
        mp->o_part_dtype[i] = o_parts[i].dtype;
        mp->lse_part[i] = view_of(&lse_parts[i]);
    }
    mp->o = view_of(o);
    mp->o_dtype = o->dtype;
    if (lse)
        mp->lse = view_of(lse);
    return FFPA_OK;
}

/* ------------------------------------------------------------------ KV cache */

static ffpa_status check_same_dtype(const char *name, const ffpa_tensor *t, const ffpa_tensor *q,
                                    char *err, size_t err_len)
{
    if (t->dtype != q->dtype)
        return fail(err, err_len, "%s: dtype %s differs from q's; expected %s", name,
                    ffpa_dtype_name(t->dtype), ffpa_dtype_name(q->dtype));
    return FFPA_OK;
}

/* k_new / v_new: [B, Hkv, Nq, d]. */
static ffpa_status check_new_tokens(const char *name, const ffpa_tensor *t, const ffpa_tensor *q,
                                    int64_t hkv, int64_t d, char *err, size_t err_len)
{
    TRY(check_tensor(name, t, err, err_len));
    TRY(check_same_dtype(name, t, q, err, err_len));
    TRY(check_dim(name, t, 0, q->shape[0], "batch of q", err, err_len));
    TRY(check_dim(name, t, 1, hkv, "kv heads of the cache", err, err_len));
    TRY(check_dim(name, t, 2, q->shape[2], "new tokens: rows of q", err, err_len));
    TRY(check_dim(name, t, 3, d, "head dim of the cache", err, err_len));
    return FFPA_OK;
}

ffpa_status ffpa_validate_kv_inputs(const ffpa_tensor *q, const ffpa_kv_cache *cache,
                                   const ffpa_options *opt, ffpa_problem *pb, ffpa_kv_problem *kv,
                                   char *err, size_t err_len)
{
    static const ffpa_options defaults = {0};
    if (!opt)
        opt = &defaults;
    memset(pb, 0, sizeof *pb);
    memset(kv, 0, sizeof *kv);
    if (!cache)
        return fail(err, err_len, "cache: is NULL; expected an ffpa_kv_cache");
    const ffpa_tensor *k = &cache->k, *v = &cache->v;
    TRY(check_tensor("q", q, err, err_len)); /* B and Nq may be 0: nothing to do */
    for (int i = 1; i < 4; i += 2)
        if (q->shape[i] < 1)
            return fail(err, err_len, "q: shape[%d] (%s) = %lld; expected >= 1 in a KV-cache call (only B "
                                      "and Nq may be 0)",
                        i, DIM_NAME[i], (long long)q->shape[i]);
    TRY(check_tensor_nonempty("cache.k", k, err, err_len));
    TRY(check_tensor_nonempty("cache.v", v, err, err_len));
    TRY(check_same_dtype("cache.k", k, q, err, err_len));
    TRY(check_same_dtype("cache.v", v, q, err, err_len));
    TRY(check_dim("cache.v", v, 0, k->shape[0], "pages of cache.k", err, err_len));
    TRY(check_dim("cache.v", v, 1, k->shape[1], "kv heads of cache.k", err, err_len));
    TRY(check_dim("cache.v", v, 2, k->shape[2], "page size of cache.k", err, err_len));
    TRY(check_dim("cache.k", k, 3, q->shape[3], "head dim of q", err, err_len));
    if (k->shape[1] == 0 && q->shape[1] != 0)
        return fail(err, err_len, "k: 0 kv heads for %lld query heads; expected Hq %% Hkv == 0",
                    (long long)q->shape[1]);
    if (k->shape[1] != 0 && q->shape[1] % k->shape[1] != 0)
        return fail(err, err_len,
                    "cache.k: %lld kv heads do not divide %lld query heads; expected Hq %% Hkv == 0",
                    (long long)k->shape[1], (long long)q->shape[1]);
    if (q->shape[3] > FFPA_MAX_HEAD_DIM || v->shape[3] > FFPA_MAX_HEAD_DIM)
        return fail(err, err_len, "%s: head dim %lld is out of range; expected 1..%d",
                    q->shape[3] > FFPA_MAX_HEAD_DIM ? "q" : "cache.v",
                    (long long)(q->shape[3] > FFPA_MAX_HEAD_DIM ? q->shape[3] : v->shape[3]),
                    FFPA_MAX_HEAD_DIM);
    if (opt->bias || opt->dropout_p != 0.0f || opt->cu_seqlens_q || opt->cu_seqlens_k || opt->cu_seqlens_on_device)
        return fail(err, err_len, "%s: is set; expected it unset for a KV-cache call (no bias, "
                                  "dropout or varlen there: lengths come from cache_seqlens)",
                    opt->bias                   ? "opt.bias"
                    : opt->dropout_p != 0.0f    ? "opt.dropout_p"
                    : opt->cu_seqlens_on_device ? "opt.cu_seqlens_on_device"
                                                : "opt.cu_seqlens");
    if (!isfinite(opt->scale))
        return fail(err, err_len, "opt.scale: %g is not finite; expected a finite number (0: 1/sqrt(D))",
                    (double)opt->scale);
    if (opt->causal != 0 && opt->causal != 1)
        return fail(err, err_len, "opt.causal: %d; expected 0 or 1", opt->causal);
    if (!cache->cache_seqlens)
        return fail(err, err_len, "cache.cache_seqlens: is NULL; expected int32 [B] in backend memory");

    const int64_t batch = q->shape[0], page_size = k->shape[2];
    if (cache->block_table) {
        if (page_size % 16 != 0)
            return fail(err, err_len, "cache.k: page size (shape[2]) %lld; expected a multiple of 16",
                        (long long)page_size);
        if (cache->max_pages_per_seq < 1)
            return fail(err, err_len, "cache.max_pages_per_seq: %lld; expected >= 1",
                        (long long)cache->max_pages_per_seq);
        if (cache->block_table_stride != 0 && cache->block_table_stride < cache->max_pages_per_seq)
            return fail(err, err_len, "cache.block_table_stride: %lld; expected 0 or >= %lld "
                                      "(max_pages_per_seq)",
                        (long long)cache->block_table_stride, (long long)cache->max_pages_per_seq);
        if ((uintptr_t)cache->block_table % sizeof(int32_t))
            return fail(err, err_len, "cache.block_table: %p is misaligned; expected int32 alignment",
                        (const void *)cache->block_table);
        kv->block_table = cache->block_table;
        kv->max_pages = cache->max_pages_per_seq;
        kv->bt_stride = cache->block_table_stride ? cache->block_table_stride : cache->max_pages_per_seq;
    } else {
        TRY(check_dim("cache.k", k, 0, batch, "batch of q: without a block table the cache is dense",
                      err, err_len));
        kv->max_pages = 1;
        kv->bt_stride = 0;
    }
    kv->num_pages = k->shape[0];
    kv->page_size = page_size;
    kv->cache_seqlens = cache->cache_seqlens;
    kv->uniform_len = -1;

    /* V inside K's storage (MLA): only the view of K's first Dv columns. */
    kv->v_in_k = ranges_overlap(k, v);
    if (kv->v_in_k) {
        int same = v->data == k->data && v->shape[3] <= k->shape[3];
        for (int i = 0; i < 3; ++i)
            same = same && v->stride[i] == k->stride[i];
        same = same && v->stride[3] == k->stride[3];
        if (!same)
            return fail(err, err_len, "cache.v: overlaps cache.k but is not a view of its first %lld "
                                      "columns; expected v.data == k.data with k's strides",
                        (long long)v->shape[3]);
    }
    pb->dtype = q->dtype;
    pb->batch = batch;
    pb->hq = q->shape[1];
    pb->hkv = k->shape[1];
    pb->nq = q->shape[2];
    TRY(check_variants(opt, pb, err, err_len)); /* bottom-right aligned on each sequence's keys */
    /* Sizes that follow from the table's width: refused by name where they
     * do not fit int64 (a fuzzer finding), never wrapped. */
    int64_t table_entries;
    if (__builtin_mul_overflow(kv->max_pages, page_size, &pb->nkv) ||
        __builtin_mul_overflow(batch, pb->nkv, &pb->total_k) ||
        __builtin_mul_overflow(batch > 0 ? batch - 1 : 0, kv->bt_stride, &table_entries) ||
        __builtin_add_overflow(table_entries, kv->max_pages, &table_entries) ||
        table_entries > INT64_MAX / 8)
        return fail(err, err_len,
                    "cache.max_pages_per_seq: %lld pages of %lld tokens (table stride %lld) for %lld sequences "
                    "overflow int64; expected a block table whose size fits",
                    (long long)kv->max_pages, (long long)page_size, (long long)kv->bt_stride, (long long)batch);
    pb->dqk = q->shape[3];
    pb->dv = v->shape[3];
    pb->total_q = batch * pb->nq;
    /* Dqk = 0: every score is an empty dot product, 0 at any scale (1 here, not 1/sqrt(0)). */
    pb->scale = opt->scale != 0.0f ? opt->scale : pb->dqk ? (float)(1.0 / sqrt((double)pb->dqk)) : 1.0f;
    pb->causal = opt->causal;
    pb->grad_accum = FFPA_GRAD_ACCUM_F32;
    pb->q = view_of(q);
    pb->k = view_of(k);
    pb->v = view_of(v);
    pb->kv = kv;
    return FFPA_OK;
}

ffpa_status ffpa_validate_kvcache(const ffpa_tensor *q, const ffpa_kv_cache *cache,
                                  const ffpa_tensor *k_new, const ffpa_tensor *v_new,
                                  const ffpa_tensor *o, const ffpa_tensor *lse,
                                  const ffpa_options *opt, ffpa_problem *pb, ffpa_kv_problem *kv,
                                  char *err, size_t err_len)
{
    TRY(ffpa_validate_kv_inputs(q, cache, opt, pb, kv, err, err_len));
    const ffpa_tensor *k = &cache->k, *v = &cache->v;
    const int64_t hkv = k->shape[1];
    if (k_new || v_new) {
        if (!k_new)
            return fail(err, err_len, "k_new: is NULL while v_new is set; expected both or neither");
        TRY(check_new_tokens("k_new", k_new, q, hkv, k->shape[3], err, err_len));
        if (kv->v_in_k) {
            if (v_new)
                return fail(err, err_len, "v_new: is set while cache.v is a view of cache.k; expected "
                                          "NULL (k_new carries V's columns)");
        } else {
            if (!v_new)
                return fail(err, err_len, "v_new: is NULL while k_new is set; expected both or neither");
            TRY(check_new_tokens("v_new", v_new, q, hkv, v->shape[3], err, err_len));
            kv->v_new = view_of(v_new);
        }
        kv->append = 1;
        kv->k_new = view_of(k_new);
        TRY(check_layout("cache.k", k, 4, 0, err, err_len));
        if (!kv->v_in_k)
            TRY(check_layout("cache.v", v, 4, 0, err, err_len));
    }

    TRY(check_o_shape("o", o, q, v, err, err_len));
    TRY(check_layout("o", o, 4, 0, err, err_len));
    if (lse) {
        TRY(check_lse("lse", lse, q, err, err_len));
        TRY(check_layout("lse", lse, 3, 0, err, err_len));
        pb->lse = view_of(lse);
    }
    /* Outputs: o, lse, and the cache when appending (v only when separate). */
    const ffpa_tensor *kout = kv->append ? k : NULL, *vout = kv->append && !kv->v_in_k ? v : NULL;
    const named_tensor outs[] = {{"o", o}, {"lse", lse}, {"cache.k", kout}, {"cache.v", vout}};
    const named_tensor ins[] = {{"q", q},
                                {"k_new", k_new},
                                {"v_new", v_new},
                                {"cache.k", kout ? NULL : k},
                                {"cache.v", vout || kv->v_in_k ? NULL : v}};
    TRY(check_separate(outs, 4, ins, 5, err, err_len));

    pb->o = view_of(o);
    return FFPA_OK;
}

ffpa_status ffpa_validate_kv_tables(const ffpa_problem *pb, const int32_t *seqlens,
                                    const int32_t *block_table, char *err, size_t err_len)
{
    const ffpa_kv_problem *kv = pb->kv;
    const int64_t added = kv->append ? pb->nq : 0;
    for (int64_t b = 0; b < pb->batch; ++b) {
        const int64_t len = seqlens[b];
        if (len < 0)
            return fail(err, err_len, "cache.cache_seqlens: [%lld] = %lld is negative; expected >= 0",
                        (long long)b, (long long)len);
        if (len + added > pb->nkv)
            return fail(err, err_len,
                        "cache.cache_seqlens: [%lld] = %lld%s exceeds the %lld tokens a sequence holds "
                        "(%lld pages of %lld); expected <= %lld",
                        (long long)b, (long long)len, added ? " plus the appended tokens" : "",
                        (long long)pb->nkv, (long long)kv->max_pages, (long long)kv->page_size,
                        (long long)(pb->nkv - added));
        if (!block_table)
            continue;
        const int64_t pages = (len + added + kv->page_size - 1) / kv->page_size;
        for (int64_t j = 0; j < pages; ++j) {
            const int64_t page = block_table[b * kv->bt_stride + j];
            if (page < 0 || page >= kv->num_pages)
                return fail(err, err_len,
                            "cache.block_table: [%lld][%lld] = %lld is outside the pool; expected "
                            "0..%lld",
                            (long long)b, (long long)j, (long long)page, (long long)kv->num_pages - 1);
        }
    }
    return FFPA_OK;
}
