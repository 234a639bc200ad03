/*
 * Test harness: the backend under test, tensors that live both on the host
 * (for the oracle) and in the backend's memory (for the library), poisoning
 * of outputs, and tolerance checks against the float64 oracle.
 *
 * Include after <stdarg.h>, <stddef.h>, <setjmp.h> and <cmocka.h>: the
 * helpers report through cmocka (fail_msg, skip).
 */
#ifndef FFPA_TESTS_HARNESS_H
#define FFPA_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "ffpa.h"

/* ------------------------------------------------------------ backend */

/* FFPA_TEST_BACKEND, default "cpu". */
const char *th_backend(void);

/* The shared context for the backend under test, created on first use.
 * A GPU backend that cannot start skips the calling test (cmocka skip());
 * the cpu backend failing to start fails it. */
ffpa_context *th_ctx(void);

/* Call first in main(): -1 when the backend under test can run (or is cpu, whose
 * failure the tests report); else prints why and returns the exit code that
 * reports the whole program as skipped (TAP "1..0 # SKIP" and 0 when
 * CMOCKA_MESSAGE_OUTPUT=TAP, else 77). Per-test skip() is avoided because
 * cmocka 1.1.5 writes skips as "not ok ... # SKIP", which meson counts as failures. */
int th_backend_unavailable_exit(void);
/* (It also applies FFPA_TEST_FILTER and FFPA_TEST_SKIP, cmocka name patterns, when set.) */

/* Random-combination tests: how many cases (FFPA_TEST_RANDOM_CASES, else
 * `default_cases`) from which seed (FFPA_TEST_RANDOM_SEED, else 1): the
 * GPU stress run asks for thousands from a fresh seed. */
uint64_t th_random_cases(uint64_t default_cases);
uint64_t th_random_first_seed(void);

/* main()'s return value: cmocka's failure count, or 77 (meson: SKIP) when
 * all `tests` tests were skipped because the backend under test is unavailable. */
int th_exit_code(int failures, int tests);

/* Fails the test with the library's message unless status is FFPA_OK. */
void th_expect_ok(ffpa_context *ctx, ffpa_status status, const char *call);
/* th_expect_ok for a backward call, except that a backend without a
 * backward (the opencl backend today) may refuse it by name:
 * FFPA_ERR_UNSUPPORTED saying it "has no backward pass". */
void th_expect_backward_ok(ffpa_context *ctx, ffpa_status status, const char *call);

/* 1 when a GPU backend refused a valid case as FFPA_ERR_UNSUPPORTED (a
 * documented limit: fp32, unaligned rows, ...): the case is reported in a TAP
 * diagnostic line and counted, not checked. The cpu backend never refuses:
 * there it is a test failure. */
int th_refused(ffpa_context *ctx, ffpa_status status, const char *call);

/* Cases refused so far (printed by th_exit_code). */
int th_refused_count(void);

/* The dtype of fixtures that test something other than dtypes: f32 on cpu,
 * bf16 on GPU backends (which refuse f32). */
ffpa_dtype th_fixture_dtype(void);

/* ------------------------------------------------------------ tolerances */

/* What a compared tensor holds. */
typedef enum th_kind {
    TH_OUTPUT, /* O: |out - ref| <= tol * max|ref| */
    TH_LSE,    /* LSE: |out - ref| <= tol * max(1, |ref|); -inf must match */
    TH_GRAD    /* dQ, dK, dV, dbias: |out - ref| <= tol * max|ref| */
} th_kind;

/*
 * The suite's tolerances, stated once. The oracle runs on the inputs as
 * rounded to the test dtype, so these cover only the library's arithmetic:
 * f32 about 1e-4 relative to the largest reference element; f16/bf16 about
 * 1e-2 (outputs rounded to 8/11 bits, P and dS rounded on GPUs), gradients
 * twice that (two more rounded GEMMs). LSE is always computed in f32.
 */
double th_tolerance(ffpa_dtype dtype, th_kind kind);

/* ------------------------------------------------------------ random numbers */

typedef struct th_rng {
    uint64_t state;
} th_rng;

th_rng th_rng_seeded(uint64_t seed);
uint64_t th_rng_next(th_rng *rng);
double th_rng_uniform(th_rng *rng, double lo, double hi);

/* ------------------------------------------------------------ tensors */

typedef enum th_layout {
    TH_BHND,  /* contiguous [B, H, N, D] */
    TH_BNHD,  /* contiguous [B, N, H, D] memory (packed-QKV style strides) */
    TH_PADDED, /* BHND with gaps after every row, head and batch (odd sizes) */
    TH_COLUMNS /* BNHD with the head dim strided (stride[3] = 2; GPU kernels refuse it) */
} th_layout;

const char *th_layout_name(th_layout layout);

/*
 * A tensor in host memory (host) and backend memory (dev) with the same
 * strides. Buffers carry TH_GUARD elements before and after the view; every
 * element of the buffer that the view does not cover is kept at 0xFF bytes so
 * that stray writes are detected and stray reads produce NaN.
 */
#define TH_GUARD 16

typedef struct th_tensor {
    ffpa_tensor host;
    ffpa_tensor dev;
    void *host_base, *dev_base;
    size_t elems; /* elements in each buffer, guards included */
    size_t bytes;
} th_tensor;

/* Any strides (>= 0). */
void th_tensor_strided(th_tensor *t, ffpa_dtype dtype, const int64_t shape[4],
                       const int64_t stride[4]);
/* Strides of a layout for logical [b, h, n, d]. */
void th_tensor_make(th_tensor *t, ffpa_dtype dtype, th_layout layout, int64_t b, int64_t h,
                    int64_t n, int64_t d);
/* LSE [b, h, n, 1] float32 in a layout's spirit. */
void th_tensor_lse(th_tensor *t, th_layout layout, int64_t b, int64_t h, int64_t n);
void th_tensor_free(th_tensor *t);

/* Fills the view with uniform values in [lo, hi) (rounded to the dtype; with
 * integers set, rounded to integers first) and uploads the buffer. */
void th_tensor_random(th_tensor *t, th_rng *rng, double lo, double hi, int integers);
/* Sets element (a, b, c, d) of the host copy (call th_tensor_upload after). */
void th_tensor_set(th_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, double value);
/* Whole buffer to 0xFF bytes (NaN in every float dtype), host and backend. */
void th_tensor_poison(th_tensor *t);
/* Whole buffer to a byte pattern, host and backend. */
void th_tensor_fill_bytes(th_tensor *t, int byte);
void th_tensor_upload(th_tensor *t);
void th_tensor_download(th_tensor *t);

/* Downloads into a fresh malloc'ed copy of the whole buffer. */
unsigned char *th_tensor_snapshot(th_tensor *t);
/* Fails unless the backend buffer equals the snapshot byte for byte. */
void th_expect_unchanged(const char *what, th_tensor *t, const unsigned char *snapshot);

/*
 * Downloads t and compares it with ref, a dense array over ref_shape (NULL:
 * t's shape; a smaller shape reads index 0 of the missing extent, for dbias
 * over broadcast dimensions). tol = tol_factor * th_tolerance(dtype, kind).
 * Fails (listing the first mismatches) unless, for every element:
 *   - nothing is NaN; a -inf reference (LSE of a masked row) is -inf;
 *   - TH_OUTPUT: a reference of exactly 0 (masked row) is exactly 0, else
 *     |out - ref| <= tol * max|ref|;
 *   - TH_LSE: |out - ref| <= tol * max(1, |ref|);
 *   - TH_GRAD with mag (oracle_backward_and_magnitude, same layout as ref): a
 *     magnitude of 0 (no contributing term) requires exactly 0, else
 *     |out - ref| <= tol * max(max|ref|, mag); without mag, tol * max|ref|;
 *   - plus, in both, an underflow floor far below any normal-sized error
 *     (2^-24 for f16, 2^-126 otherwise, + 1e-30 of the tensor's scale);
 * and no byte of the buffer outside the view changed. Returns the largest
 * finite absolute error (for tests that report or bound it).
 */
double th_check(const char *what, th_tensor *t, const double *ref, const double *mag,
                const int64_t ref_shape[4], th_kind kind, double tol_factor);

/* 1 when the message starts with "<name>:" for one of the NULL-terminated names. */
int th_message_names(const char *message, const char *const *names);

#endif
