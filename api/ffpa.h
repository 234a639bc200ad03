/**
 * @file ffpa.h
 * libffpa: fused attention for large head dimensions (Split-D tiling).
 *
 * One C API over several backends (cpu, cuda, hip). A context is bound to a
 * backend; every tensor it is given lives in that backend's memory space
 * (host memory for cpu, device memory for cuda/hip; use ffpa_malloc and
 * ffpa_memcpy to stay backend-neutral).
 *
 * Shapes are logical [B, H, N, D] with 64-bit strides counted in elements,
 * so BHND, BNHD (packed QKV) and any other layout work without copies.
 *
 *   Q  [B, Hq,  Nq,  Dqk]     K  [B, Hkv, Nkv, Dqk]     V [B, Hkv, Nkv, Dv]
 *   O  [B, Hq,  Nq,  Dv ]     LSE [B, Hq, Nq, 1] float32 (natural log)
 *
 * Hq must be a multiple of Hkv (GQA/MQA); Nq may differ from Nkv
 * (cross-attention, decode with Nq = 1). Dqk and Dv may differ (absorbed MLA:
 * 576/512); each is 0..FFPA_MAX_HEAD_DIM.
 *
 * Calls on GPU backends are asynchronous on the context's stream, like every
 * CUDA library; ffpa_synchronize() waits. On error nothing is written to any
 * output and ffpa_last_error() says which argument was wrong and why.
 *
 * Thread safety: a context is used by one thread at a time; separate contexts
 * are independent and may run at once, and may be created from many threads
 * at once, the process's first ones included (tests/test_threads.c).
 *
 * Any dimension of any tensor may be 0: O = 0 and LSE = -inf for rows that
 * see no key, zero gradients where nothing flows, and at Dqk = 0 every score
 * is 0 (the default scale is 1 there). docs/promises.md lists every promise
 * with its test.
 */
#ifndef FFPA_H
#define FFPA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks the library's exported functions. */
#if defined(_WIN32)
#define FFPA_API __declspec(dllexport)
#else
#define FFPA_API __attribute__((visibility("default")))
#endif

#define FFPA_VERSION_MAJOR 0 /**< major version of this header */
#define FFPA_VERSION_MINOR 1 /**< minor version of this header */
#define FFPA_VERSION_PATCH 0 /**< patch version of this header */
/** The header's version as one number (major * 10000 + minor * 100 + patch)
 * and as text; ffpa_version() says which library is loaded at run time. */
#define FFPA_VERSION (FFPA_VERSION_MAJOR * 10000 + FFPA_VERSION_MINOR * 100 + FFPA_VERSION_PATCH)
#define FFPA_STRINGIFY_(x) #x                  /**< helper of FFPA_STRINGIFY */
#define FFPA_STRINGIFY(x) FFPA_STRINGIFY_(x) /**< x's expansion as a string literal */
/** The header's version as text, "major.minor.patch". */
#define FFPA_VERSION_STRING                                                                 \
    FFPA_STRINGIFY(FFPA_VERSION_MAJOR) "." FFPA_STRINGIFY(FFPA_VERSION_MINOR) "." FFPA_STRINGIFY( \
        FFPA_VERSION_PATCH)

/** Largest head dimension (Dqk and Dv) any backend accepts. */
#define FFPA_MAX_HEAD_DIM 1024

/* ------------------------------------------------------------------ status */

/** What every call returns; on anything but FFPA_OK, ffpa_last_error() says why. */
typedef enum ffpa_status {
    FFPA_OK = 0,                   /**< success */
    FFPA_ERR_INVALID_ARGUMENT = 1, /**< bad pointer, shape, stride, dtype or option */
    FFPA_ERR_UNSUPPORTED = 2,      /**< valid, but this backend cannot do it (says why) */
    FFPA_ERR_NO_BACKEND = 3,       /**< unknown backend name, or it cannot start here */
    FFPA_ERR_OUT_OF_MEMORY = 4,    /**< host or device allocation failed */
    FFPA_ERR_DEVICE = 5,           /**< the device runtime reported an error */
    FFPA_ERR_INTERNAL = 6          /* a bug in libffpa: please report it */
} ffpa_status;

/** Static English name of a status ("invalid argument", ...). Never NULL. */
FFPA_API const char *ffpa_status_string(ffpa_status status);

/* ------------------------------------------------------------------ tensors */

/** Element types of tensors (LSE is always FFPA_F32). */
typedef enum ffpa_dtype {
    FFPA_F16 = 0,  /**< IEEE binary16 */
    FFPA_BF16 = 1, /**< bfloat16 */
    FFPA_F32 = 2   /**< IEEE binary32 */
} ffpa_dtype;

/** Size in bytes of one element (0 for an unknown dtype). */
FFPA_API size_t ffpa_dtype_size(ffpa_dtype dtype);
/** Static name of a dtype ("f16", "bf16", "f32"; "unknown" otherwise). */
FFPA_API const char *ffpa_dtype_name(ffpa_dtype dtype);

/**
 * A strided view. shape = {B, H, N, D}; stride[i] is the distance in elements
 * between consecutive indices of dimension i. Strides must be >= 0. Inputs may
 * use stride 0 to broadcast (an expanded view, as torch.expand makes); outputs
 * must not overlap (no two indices may map to one element). The data pointer
 * must be aligned to the element size. Sizes are >= 0; a tensor with a
 * zero-size dimension holds no element (any strides, data may be NULL). The
 * product of the nonzero sizes and the byte extent must fit int64.
 */
typedef struct ffpa_tensor {
    void *data;        /**< first element, in the context's backend memory */
    ffpa_dtype dtype;  /**< element type */
    int64_t shape[4];  /**< sizes of B, H, N, D */
    int64_t stride[4]; /**< elements between consecutive indices of each dimension */
} ffpa_tensor;

/** Fills a contiguous [B, H, N, D] (BHND) descriptor. A stride that would
 * overflow int64 is set to INT64_MAX, which validation then refuses. */
FFPA_API ffpa_tensor ffpa_tensor_bhnd(void *data, ffpa_dtype dtype, int64_t b, int64_t h,
                                      int64_t n, int64_t d);
/** Fills a [B, H, N, D] descriptor over memory laid out as [B, N, H, D] (BNHD). */
FFPA_API ffpa_tensor ffpa_tensor_bnhd(void *data, ffpa_dtype dtype, int64_t b, int64_t h,
                                      int64_t n, int64_t d);

/* ------------------------------------------------------------------ options */

/** Where the backward accumulates dQ, dK and dV before writing them. */
typedef enum ffpa_grad_accum {
    FFPA_GRAD_ACCUM_F32 = 0,    /**< dQ/dK/dV accumulate in an fp32 buffer, rounded once (default) */
    FFPA_GRAD_ACCUM_OUTPUT = 1  /**< accumulate in the output dtype (less memory, less precise) */
} ffpa_grad_accum;

/**
 * Options shared by forward and backward; backward must be given the same
 * values the forward used (scale, causal, bias, dropout, varlen).
 * Initialise with ffpa_options_default() and change what you need.
 */
typedef struct ffpa_options {
    /** sizeof(ffpa_options) of the header the caller was built with, set by
     * ffpa_options_default(); 0 means this header's. Options added by later
     * headers then keep their defaults for older callers, and a newer
     * caller's options this library does not know are refused unless 0. */
    uint32_t struct_size;

    /** Softmax scale applied to QK^T; 0 means 1/sqrt(Dqk). Must be finite. */
    float scale;

    /** Causal masking, aligned to the bottom-right corner when Nq != Nkv:
     * query row i sees key columns j <= i + (Nkv - Nq). Rows that see no key
     * give O = 0 and LSE = -inf. */
    int causal;

    /** Optional additive bias/mask added to the scaled scores, float of any
     * supported dtype, logical shape [B|1, Hq|1, Nq|1, Nkv|1] (dimensions of
     * size 1, or with stride 0, broadcast). Use -INFINITY to mask. With varlen
     * the bias is indexed by the position inside each sequence and its N
     * dimensions are the longest query / key sequence (max_seqlen_q / _k
     * with offsets in backend memory), or 1. NULL: none. */
    const ffpa_tensor *bias;

    /** Dropout on the attention probabilities, p in [0, 1). The keep mask is a
     * pure function of (seed, offset, batch, head, row, column), identical on
     * every backend; kept entries are scaled by 1/(1-p). Advance offset by
     * B*Hq between calls for fresh masks. */
    float dropout_p;
    uint64_t dropout_seed;   /**< key of the dropout mask's Philox stream */
    uint64_t dropout_offset; /**< counter offset of the mask in that stream */

    /** Variable-length batches: host arrays of varlen_batch+1 int32 cumulative
     * offsets (0 = first, non-decreasing, last = total rows). Tensors are then
     * packed as [1, H, total, D] and sequence b owns rows cu[b] .. cu[b+1]-1.
     * NULL: dense batch taken from shape[0]. Both or neither must be given. */
    const int32_t *cu_seqlens_q;
    const int32_t *cu_seqlens_k; /**< key offsets, as cu_seqlens_q for the key rows */
    int32_t varlen_batch;        /**< number of sequences (offsets hold varlen_batch + 1 entries) */

    /* Backward only. */
    ffpa_grad_accum grad_accum; /**< see ffpa_grad_accum */
    /** 1: two runs give bit-identical gradients. 0 (default): a backend may
     * reduce with atomics where that is faster (the cuda and hip backends do
     * for dQ; in deterministic runs the Hopper kernel adds the key blocks'
     * contributions in a fixed order and the generic kernels run a dQ pass
     * that owns its rows). */
    int deterministic;
    /** Optional d(bias) output with the bias's shape, float32 or the bias
     * dtype; gradients are summed over its size-1 and stride-0 dimensions.
     * NULL: not computed. */
    const ffpa_tensor *dbias;

    /* Attention variants (FlashAttention's window_size, softcap, alibi_slopes).
     * Every one is off at 0 / NULL, so a zeroed struct and older callers get
     * plain attention. */

    /** 1: sliding window. Query row i sees key columns j with
     * i + (Nkv - Nq) - window_left <= j <= i + (Nkv - Nq) + window_right
     * (aligned bottom-right, as causal); -1 leaves that side unbounded.
     * Composes with causal, which bounds the right side at 0. Rows that see
     * no key give O = 0 and LSE = -inf. 0: no window (the bounds are unused). */
    int window;
    int64_t window_left;  /**< keys before the diagonal a row sees, or -1 */
    int64_t window_right; /**< keys after the diagonal a row sees, or -1 */
    /** Logit softcap c > 0: the scaled scores s = scale * QK^T become
     * c * tanh(s / c) before bias, ALiBi and masks are added. 0: none. */
    float softcap;
    /** ALiBi: float32 slopes of logical shape [B|1, Hq, 1, 1] in backend
     * memory (size 1 or stride 0 broadcasts the batch). Adds
     * -slope * |i + (Nkv - Nq) - j| to the score of query row i and key
     * column j (with the bias, after softcap); computed, never stored.
     * NULL: none. */
    const ffpa_tensor *alibi_slopes;

    /** 1: cu_seqlens_q / cu_seqlens_k are in backend memory (ffpa_malloc's
     * space: device memory on a GPU, host memory on the cpu backend), not
     * host memory. The library then never reads them on the host, so a
     * varlen call stays asynchronous and can be captured in a CUDA/HIP graph
     * (FlashAttention's device cu_seqlens with max_seqlen). The caller gives
     * the longest sequences in max_seqlen_q / max_seqlen_k (0 <= max <= the
     * packed rows; at least every cu[b+1] - cu[b], since the launch is sized
     * by them) and vouches for the offsets (0 first, non-decreasing, the
     * packed rows last), which a GPU backend cannot check without a
     * read-back (the cpu backend, whose memory is host memory, checks them).
     * 0 (default): host arrays, checked; max_seqlen_* unused. */
    int cu_seqlens_on_device;
    int64_t max_seqlen_q; /**< longest query sequence (cu_seqlens_on_device) */
    int64_t max_seqlen_k; /**< longest key sequence (cu_seqlens_on_device) */
} ffpa_options;

/** Default options (scale 1/sqrt(Dqk), no mask, no dropout, dense batch,
 * fp32 gradient accumulation) with struct_size set. */
FFPA_API ffpa_options ffpa_options_default(void);

/** The loaded library's version: FFPA_VERSION's number and FFPA_VERSION_STRING's
 * text as they were when it was built (compare with the header's to catch a
 * program running against another libffpa). */
FFPA_API int ffpa_version(void);
/** The loaded library's version as text ("0.1.0"). */
FFPA_API const char *ffpa_version_string(void);

/* ------------------------------------------------------------------ backends */

/** One backend as ffpa_backend_get_info describes it. */
typedef struct ffpa_backend_info {
    const char *name;        /**< "cpu", "cuda", "hip" */
    int available;           /**< 1 when a context can be created for it now */
    char detail[512];        /**< device name when available, else why not */
    char version[32];        /**< libffpa version the backend was built from ("0.1.0"); "" when its
                                plugin was not found or was refused */
} ffpa_backend_info;

/** Number of backends this build knows (built-in and plugin). */
FFPA_API int ffpa_backend_count(void);
/** Describes backend i (0 <= i < ffpa_backend_count()); probes it on first use. */
FFPA_API ffpa_status ffpa_backend_get_info(int index, ffpa_backend_info *info);

/* ------------------------------------------------------------------ context */

/** A backend instance with its stream, workspace and last error (opaque). */
typedef struct ffpa_context ffpa_context;

/**
 * Creates a context. backend: "cpu", "cuda", "hip", "auto", or NULL to read
 * FFPA_BACKEND (unset means "auto": the first GPU backend whose probe
 * succeeds, else cpu). A named backend that is unknown or cannot start fails
 * with FFPA_ERR_NO_BACKEND; ffpa_last_error(NULL) then lists the backends and
 * why each unavailable one is unavailable. Never silently falls back.
 */
FFPA_API ffpa_status ffpa_create(ffpa_context **ctx, const char *backend);
/** Waits for the context's queued work and frees it, its workspace included
 * (NULL is a no-op). */
FFPA_API void ffpa_destroy(ffpa_context *ctx);

/** Name of the backend the context runs on. */
FFPA_API const char *ffpa_backend_name(const ffpa_context *ctx);
/** Device description ("NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", "cpu (2 threads)"). */
FFPA_API const char *ffpa_device_name(const ffpa_context *ctx);
/** Kernel the last successful pass on ctx ran: a forward's ("sm90 wgmma
 * d256x2 cluster", "generic split-d", "cpu", ...) or, on the cuda backend,
 * a backward's ("sm90 wgmma bwd d384", "bwd dkdv kv64 s3, dq big s2"); ""
 * before the first. For benchmarks, A/B runs (FFPA_CUDA_KERNEL) and the
 * tuner. */
FFPA_API const char *ffpa_last_kernel(const ffpa_context *ctx);

/** Message of the last failed call on ctx (or, with NULL, of the last failed
 * ffpa_create on this thread). Empty string when none. */
FFPA_API const char *ffpa_last_error(const ffpa_context *ctx);

/** Stream for GPU backends (cudaStream_t / hipStream_t); NULL is the default
 * stream. Ignored by the cpu backend. */
FFPA_API ffpa_status ffpa_set_stream(ffpa_context *ctx, void *stream);
/** Waits until the work queued on the context's stream is done; reports a
 * device error raised by that work. */
FFPA_API ffpa_status ffpa_synchronize(ffpa_context *ctx);

/* ------------------------------------------------------------------ memory */

/** Direction of ffpa_memcpy ("device": the backend's memory). */
typedef enum ffpa_copy_kind {
    FFPA_COPY_HOST_TO_DEVICE = 0,  /**< host memory to backend memory */
    FFPA_COPY_DEVICE_TO_HOST = 1,  /**< backend memory to host memory */
    FFPA_COPY_DEVICE_TO_DEVICE = 2 /**< within the backend's memory */
} ffpa_copy_kind;

/** Memory in the backend's space ("device" is host memory for cpu). */
FFPA_API ffpa_status ffpa_malloc(ffpa_context *ctx, void **ptr, size_t bytes);
/** Frees memory from ffpa_malloc (NULL is a no-op). */
FFPA_API ffpa_status ffpa_free(ffpa_context *ctx, void *ptr);
/** Synchronous with respect to the host for copies that touch host memory. */
FFPA_API ffpa_status ffpa_memcpy(ffpa_context *ctx, void *dst, const void *src, size_t bytes,
                                 ffpa_copy_kind kind);

/**
 * Workspace. By default the context owns a workspace that grows to the
 * largest size a call needed and is reused (no allocation per call once
 * warm). A caller may instead hand in its own memory; calls then fail with
 * FFPA_ERR_INVALID_ARGUMENT if it is too small. Pass NULL, 0 to go back to
 * context-owned memory.
 */
FFPA_API ffpa_status ffpa_set_workspace(ffpa_context *ctx, void *ptr, size_t bytes);

/** Workspace bytes the call with these arguments needs (0 is a valid answer). */
FFPA_API ffpa_status ffpa_forward_workspace_size(ffpa_context *ctx, const ffpa_tensor *q,
                                                 const ffpa_tensor *k, const ffpa_tensor *v,
                                                 const ffpa_options *opt, size_t *bytes);
/** Workspace bytes ffpa_backward needs for these shapes and options. */
FFPA_API ffpa_status ffpa_backward_workspace_size(ffpa_context *ctx, const ffpa_tensor *q,
                                                  const ffpa_tensor *k, const ffpa_tensor *v,
                                                  const ffpa_options *opt, size_t *bytes);

/* ------------------------------------------------------------------ attention */

/**
 * O = softmax(scale * Q K^T + bias [masked]) [dropout] V, and optionally
 * LSE = logsumexp of the scaled, biased, masked scores per row.
 * q, k, v, o share one dtype; lse may be NULL (else float32 [B, Hq, Nq, 1]).
 * opt may be NULL for the defaults.
 */
FFPA_API ffpa_status ffpa_forward(ffpa_context *ctx, const ffpa_tensor *q, const ffpa_tensor *k,
                                  const ffpa_tensor *v, const ffpa_tensor *o,
                                  const ffpa_tensor *lse, const ffpa_options *opt);

/**
 * Gradients of the forward above. dout, q, k, v, out share one dtype; lse is
 * the forward's float32 LSE (required). dq, dk, dv have the shapes of q, k, v
 * and the same dtype. opt->dbias, when set, receives d(bias).
 */
FFPA_API ffpa_status ffpa_backward(ffpa_context *ctx, const ffpa_tensor *dout,
                                   const ffpa_tensor *q, const ffpa_tensor *k,
                                   const ffpa_tensor *v, const ffpa_tensor *out,
                                   const ffpa_tensor *lse, const ffpa_tensor *dq,
                                   const ffpa_tensor *dk, const ffpa_tensor *dv,
                                   const ffpa_options *opt);

/* ------------------------------------------------------------------ merging partial results */

/** Most partial results one ffpa_merge_partials call merges. */
#define FFPA_MERGE_MAX_PARTS 16

/**
 * Merges partial attention results by their LSE, the step that joins
 * attention computed over disjoint key ranges (context parallelism, split
 * keys, a KV cache in pieces):
 *
 *   lse = log(sum_i exp(lse_i)),   O = sum_i exp(lse_i - lse) O_i
 *
 * in float32 for each row. o_parts[i] [B, H, N, Dv] (each f16, bf16 or f32,
 * dtypes may differ) and lse_parts[i] f32 [B, H, N, 1], i < parts, are the
 * results of ffpa_forward over each key range; o [B, H, N, Dv] any dtype;
 * lse f32 [B, H, N, 1] or NULL. Any strides. A part whose row LSE is -inf
 * (no key seen) adds nothing and its O row is not read; a row with every
 * part -inf gets O = 0 and LSE = -inf, as a forward over all the keys would.
 *
 * o may be o_parts[i] itself (same data, dtype and strides) and lse may be
 * lse_parts[j] itself: an accumulator merged into in place. Any other
 * overlap of an output with an input is refused. 1 <= parts <=
 * FFPA_MERGE_MAX_PARTS. Asynchronous on GPU backends like the forward.
 * Bad arguments: a status and a message, nothing written.
 */
FFPA_API ffpa_status ffpa_merge_partials(ffpa_context *ctx, int parts, const ffpa_tensor *o_parts,
                                         const ffpa_tensor *lse_parts, const ffpa_tensor *o,
                                         const ffpa_tensor *lse);

/* ------------------------------------------------------------------ serving: paged KV cache */

/**
 * A paged KV cache (as inference engines keep it). K and V are pools of
 * pages; each page holds page_size tokens of every KV head:
 *
 *   k  shape {num_pages, Hkv, page_size, Dqk}   v  shape {num_pages, Hkv, page_size, Dv}
 *
 * (any strides: [pages, page_size, Hkv, D] memory, FlashAttention's layout,
 * is ffpa_tensor_bnhd(k_ptr, dtype, num_pages, Hkv, page_size, Dqk)). Token t
 * of sequence b is row t % page_size of page block_table[b][t / page_size].
 *
 * block_table: int32 [B, max_pages_per_seq] (row stride block_table_stride
 * elements; 0 means max_pages_per_seq) in the backend's memory. NULL: no
 * paging, sequence b owns "page" b, i.e. a dense cache [B, Hkv, capacity, D]
 * whose page_size is its capacity (shape[2]), num_pages = B.
 * cache_seqlens: int32 [B] in the backend's memory, tokens already cached.
 *
 * V may be a view of K's storage (absorbed MLA: v = the first Dv columns of
 * the pages of k, same strides); nothing is copied. Then only k_new is
 * appended (it carries V's columns too) and v_new must be NULL.
 *
 * The page size must be a multiple of 16 (1..256 otherwise unchecked for
 * the dense form, which takes any capacity).
 */
typedef struct ffpa_kv_cache {
    ffpa_tensor k;                  /**< pages of K, see above */
    ffpa_tensor v;                  /**< pages of V (may alias k) */
    const int32_t *block_table;     /**< [B, max_pages_per_seq] int32, or NULL (dense) */
    int64_t max_pages_per_seq;      /**< block_table columns (ignored when NULL) */
    int64_t block_table_stride;     /**< elements between block_table rows; 0: max_pages_per_seq */
    const int32_t *cache_seqlens;   /**< [B] int32: tokens cached before this call */
    /** 0 (default): the library copies block_table and cache_seqlens to the
     * host and checks every entry before launching anything (a
     * synchronisation). 1: the caller vouches for them; nothing is read on
     * the host, so the call can be captured in a CUDA graph. GPU kernels
     * still never dereference a page outside the pool: a bad entry there
     * gives wrong numbers, never a wild access. */
    int trusted_tables;
} ffpa_kv_cache;

/**
 * Attention of q against a paged KV cache (decode, speculative decode,
 * chunked prefill):
 *
 *   q      [B, Hq, Nq, Dqk]  the step's query tokens (Nq = 1 for decode)
 *   k_new  [B, Hkv, Nq, Dqk] optional, with v_new [B, Hkv, Nq, Dv]: written
 *          into the cache at positions cache_seqlens[b] .. + Nq - 1 before
 *          attending (flash_attn_with_kvcache's append); NULL: nothing appended
 *   o      [B, Hq, Nq, Dv], lse [B, Hq, Nq, 1] float32 or NULL
 *
 * Sequence b attends to L_b = cache_seqlens[b] (+ Nq when appending) keys.
 * opt: scale and causal apply (causal among the new tokens: token i sees
 * keys j <= i + L_b - Nq, bottom-right aligned to each sequence's length);
 * bias, dropout and varlen must be unset. The cache_seqlens array is not
 * advanced: the caller does that, as with FlashAttention.
 * Query heads that share a KV head are computed together, so each KV head
 * is read once per step; long caches are split across blocks and merged.
 * Errors (bad shapes, page size, table entries outside the pool, lengths
 * negative or beyond the table, an append that would overflow the pages a
 * sequence has): a status and message, nothing written (cache included).
 */
FFPA_API ffpa_status ffpa_forward_kvcache(ffpa_context *ctx, const ffpa_tensor *q,
                                          const ffpa_kv_cache *cache, const ffpa_tensor *k_new,
                                          const ffpa_tensor *v_new, const ffpa_tensor *o,
                                          const ffpa_tensor *lse, const ffpa_options *opt);

/** Workspace bytes ffpa_forward_kvcache needs for these shapes (split-KV
 * partials, the schedule); depends on shapes only, never on the lengths. */
FFPA_API ffpa_status ffpa_forward_kvcache_workspace_size(ffpa_context *ctx, const ffpa_tensor *q,
                                                         const ffpa_kv_cache *cache,
                                                         const ffpa_options *opt, size_t *bytes);

/** The split-KV schedule a GPU backend would run for a batch with these
 * cache lengths (host array) and shapes: for ffpa-run / ffpa-bench to
 * print (and the tests to check). Fills *out; FFPA_ERR_UNSUPPORTED on cpu,
 * which runs no split schedule. */
typedef struct ffpa_kv_schedule_info {
    int rows_per_tile;       /**< packed query rows (Nq x Hq/Hkv) per tile */
    int q_tiles;             /**< tiles per (sequence, kv head) */
    int key_tile;            /**< keys per key tile */
    int64_t units;           /**< (sequence, kv head) pairs */
    int64_t tiles_per_split; /**< key tiles each block runs at most */
    int64_t blocks;          /**< blocks that do work (splits x q tiles summed over units) */
    int64_t grid;            /**< blocks launched (an upper bound fixed by the shapes) */
    int max_splits;          /**< largest split count of one unit */
    const char *kernel;      /**< kernel name */
} ffpa_kv_schedule_info;

/** Fills *out with the schedule for host_seqlens (see ffpa_kv_schedule_info). */
FFPA_API ffpa_status ffpa_kvcache_schedule(ffpa_context *ctx, const ffpa_tensor *q,
                                           const ffpa_kv_cache *cache, const int32_t *host_seqlens,
                                           int append, const ffpa_options *opt,
                                           ffpa_kv_schedule_info *out);

#ifdef __cplusplus
}
#endif

#endif /* FFPA_H */
