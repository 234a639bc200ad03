/* Tile helpers of the cpu backend. See cpu_tiles.h. */
#include "cpu_tiles.h"

#include <math.h>
#include <string.h>

#include "dtype.h"
#include "philox.h"

#ifdef _OPENMP
#include <omp.h>
#endif

int cpu_max_threads(void)
{
#ifdef _OPENMP
    int n = omp_get_max_threads();
    return n > 0 ? n : 1;
#else
    return 1;
#endif
}

/* fp16 bits -> fp32, bit-identical to ffpa_f16_to_f32 (checked on all 65536
 * inputs) but branch-free so that runs vectorise (about 3x faster): selects by masks
 * between the normal/inf/NaN rebias and the exact subnormal product, which
 * is a normal float or zero (safe under flush-to-zero modes). */
static inline float f16_bits_to_f32(uint32_t h)
{
    const uint32_t magnitude = h & 0x7FFFu;
    const uint32_t is_subnormal = 0u - (uint32_t)(magnitude < 0x0400u);
    const uint32_t is_special = 0u - (uint32_t)(magnitude >= 0x7C00u);
    uint32_t bits = (magnitude << 13) + 0x38000000u + (is_special & 0x38000000u);
    const float small = (float)(int32_t)magnitude * (1.0f / 16777216.0f);
    uint32_t small_bits;
    memcpy(&small_bits, &small, sizeof small_bits);
    bits = (bits & ~is_subnormal) | (small_bits & is_subnormal);
    bits |= (h & 0x8000u) << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void f16_run_to_f32(float *out, const uint16_t *in, int n)
{
    int c = 0;
    /* Fixed-length inner loop: gcc -O2 (very-cheap cost model) vectorises
     * only loops whose trip count needs no scalar epilogue. */
    for (; c + 8 <= n; c += 8)
        for (int k = 0; k < 8; ++k)
            out[c + k] = f16_bits_to_f32(in[c + k]);
    for (; c < n; ++c)
        out[c] = f16_bits_to_f32(in[c]);
}

/* n contiguous elements starting at element src, as fp32. */
static void load_run(float *out, const void *base, ffpa_dtype dtype, int64_t src, int n)
{
    if (dtype == FFPA_F32) {
        memcpy(out, (const float *)base + src, (size_t)n * sizeof(float));
    } else if (dtype == FFPA_BF16) {
        const uint16_t *in = (const uint16_t *)base + src;
        int c = 0;
        for (; c + 8 <= n; c += 8) /* fixed length: vectorised at -O2 too */
            for (int k = 0; k < 8; ++k)
                out[c + k] = ffpa_bf16_to_f32(in[c + k]);
        for (; c < n; ++c)
            out[c] = ffpa_bf16_to_f32(in[c]);
    } else {
        f16_run_to_f32(out, (const uint16_t *)base + src, n);
    }
}

void cpu_load_tile(float *dst, int64_t ld, const void *base, ffpa_dtype dtype, int64_t off,
                   int64_t row_stride, int64_t col_stride, int rows, int cols)
{
    for (int r = 0; r < rows; ++r) {
        float *out = dst + r * ld;
        const int64_t src = off + r * row_stride;
        if (col_stride == 1)
            load_run(out, base, dtype, src, cols);
        else
            for (int c = 0; c < cols; ++c)
                out[c] = ffpa_load_f32(base, dtype, src + c * col_stride);
    }
}

void cpu_load_tile_t(float *dst, int64_t ld, const void *base, ffpa_dtype dtype, int64_t off,
                     int64_t row_stride, int64_t col_stride, int rows, int cols)
{
    enum { PIECE = 128 };
    float run[PIECE];
    for (int r = 0; r < rows; ++r) {
        const int64_t src = off + r * row_stride;
        if (col_stride == 1) {
            /* Convert a contiguous piece, then scatter it down a column. */
            for (int c0 = 0; c0 < cols; c0 += PIECE) {
                const int n = cols - c0 < PIECE ? cols - c0 : PIECE;
                load_run(run, base, dtype, src + c0, n);
                for (int c = 0; c < n; ++c)
                    dst[(c0 + c) * ld + r] = run[c];
            }
        } else {
            for (int c = 0; c < cols; ++c)
                dst[c * ld + r] = ffpa_load_f32(base, dtype, src + c * col_stride);
        }
    }
}

void cpu_store_tile(void *base, ffpa_dtype dtype, int64_t off, int64_t row_stride,
                    int64_t col_stride, const float *src, int64_t ld, int rows, int cols)
{
    for (int r = 0; r < rows; ++r) {
        const float *in = src + r * ld;
        int64_t dst = off + r * row_stride;
        if (col_stride == 1 && dtype == FFPA_F32)
            memcpy((float *)base + dst, in, (size_t)cols * sizeof(float));
        else
            for (int c = 0; c < cols; ++c)
                ffpa_store_f32(base, dtype, dst + c * col_stride, in[c]);
    }
}

void cpu_transpose(float *dst, int64_t ld_dst, const float *src, int64_t ld_src, int rows,
                   int cols)
{
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            dst[c * ld_dst + r] = src[r * ld_src + c];
}

/* Register block of the GEMM kernel: 4 rows x 8 columns of C stay in
 * registers while k streams. Each C element still sums its products in
 * index order (no reassociation), so both variants below give the same
 * bits as the plain edge loops. */
#define GEMM_MR 4
#define GEMM_NR 8

#if defined(__GNUC__)
/* GCC/Clang vector extension: 4-float vectors (SSE/NEON width) keep the 8
 * accumulators in registers at -O2 and -O3 alike, which plain arrays do not
 * (gcc -O3 even reshuffles them into a slower form). */
typedef float cpu_v4f __attribute__((vector_size(16)));

static inline cpu_v4f v4_load(const float *p)
{
    cpu_v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void v4_store(float *p, cpu_v4f v)
{
    memcpy(p, &v, sizeof v);
}

static void gemm_block(int k, const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                       int64_t ldc)
{
    cpu_v4f c0l = v4_load(c), c0h = v4_load(c + 4);
    cpu_v4f c1l = v4_load(c + ldc), c1h = v4_load(c + ldc + 4);
    cpu_v4f c2l = v4_load(c + 2 * ldc), c2h = v4_load(c + 2 * ldc + 4);
    cpu_v4f c3l = v4_load(c + 3 * ldc), c3h = v4_load(c + 3 * ldc + 4);
    for (int p = 0; p < k; ++p) {
        const cpu_v4f bl = v4_load(b + p * ldb), bh = v4_load(b + p * ldb + 4);
        const float a0 = a[p], a1 = a[lda + p], a2 = a[2 * lda + p], a3 = a[3 * lda + p];
        c0l += a0 * bl;
        c0h += a0 * bh;
        c1l += a1 * bl;
        c1h += a1 * bh;
        c2l += a2 * bl;
        c2h += a2 * bh;
        c3l += a3 * bl;
        c3h += a3 * bh;
    }
    v4_store(c, c0l);
    v4_store(c + 4, c0h);
    v4_store(c + ldc, c1l);
    v4_store(c + ldc + 4, c1h);
    v4_store(c + 2 * ldc, c2l);
    v4_store(c + 2 * ldc + 4, c2h);
    v4_store(c + 3 * ldc, c3l);
    v4_store(c + 3 * ldc + 4, c3h);
}
#else
/* Portable C: one array per row and a single column loop, which compilers
 * vectorise. */
static void gemm_block(int k, const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                       int64_t ldc)
{
    float c0[GEMM_NR], c1[GEMM_NR], c2[GEMM_NR], c3[GEMM_NR];
    for (int j = 0; j < GEMM_NR; ++j) {
        c0[j] = c[j];
        c1[j] = c[ldc + j];
        c2[j] = c[2 * ldc + j];
        c3[j] = c[3 * ldc + j];
    }
    for (int p = 0; p < k; ++p) {
        const float *bp = b + p * ldb;
        const float a0 = a[p], a1 = a[lda + p], a2 = a[2 * lda + p], a3 = a[3 * lda + p];
        for (int j = 0; j < GEMM_NR; ++j) {
            c0[j] += a0 * bp[j];
            c1[j] += a1 * bp[j];
            c2[j] += a2 * bp[j];
            c3[j] += a3 * bp[j];
        }
    }
    for (int j = 0; j < GEMM_NR; ++j) {
        c[j] = c0[j];
        c[ldc + j] = c1[j];
        c[2 * ldc + j] = c2[j];
        c[3 * ldc + j] = c3[j];
    }
}
#endif

/* One row of C over columns [j0, j1): the edges the register block leaves. */
static void gemm_row_edge(int j0, int j1, int k, const float *a, const float *b, int64_t ldb,
                          float *c)
{
    for (int j = j0; j < j1; ++j) {
        float acc = c[j];
        for (int p = 0; p < k; ++p)
            acc += a[p] * b[p * ldb + j];
        c[j] = acc;
    }
}

void cpu_gemm_acc(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float *c, int64_t ldc)
{
    int m_full = m - m % GEMM_MR;
    int n_full = n - n % GEMM_NR;
    for (int i = 0; i < m_full; i += GEMM_MR) {
        for (int j = 0; j < n_full; j += GEMM_NR)
            gemm_block(k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc);
        for (int ii = i; ii < i + GEMM_MR; ++ii)
            gemm_row_edge(n_full, n, k, a + ii * lda, b, ldb, c + ii * ldc);
    }
    for (int i = m_full; i < m; ++i)
        gemm_row_edge(0, n, k, a + i * lda, b, ldb, c + i * ldc);
}

void cpu_round_tile(float *tile, int64_t ld, int rows, int cols, ffpa_dtype dtype)
{
    if (dtype == FFPA_F32)
        return;
    for (int r = 0; r < rows; ++r) {
        float *row = tile + r * ld;
        if (dtype == FFPA_BF16)
            for (int c = 0; c < cols; ++c)
                row[c] = ffpa_bf16_to_f32(ffpa_f32_to_bf16(row[c]));
        else
            for (int c = 0; c < cols; ++c)
                row[c] = ffpa_f16_to_f32(ffpa_f32_to_f16(row[c]));
    }
}

void cpu_score_ctx_init(cpu_score_ctx *sc, const ffpa_problem *pb, int64_t b, int64_t h,
                        int64_t seqlen_q, int64_t seqlen_k)
{
    sc->pb = pb;
    sc->scale = pb->scale;
    sc->shift = seqlen_k - seqlen_q;
    sc->masked = pb->causal || pb->window;
    sc->softcap = pb->softcap;
    sc->alibi = pb->alibi != NULL;
    sc->alibi_slope = pb->alibi ? pb->alibi[b * pb->alibi_sb + h * pb->alibi_sh] : 0.0f;
    sc->bias = pb->has_bias ? pb->bias.data : NULL;
    sc->bias_dtype = pb->bias_dtype;
    /* The bias is indexed by the sequence index and the positions inside
     * the sequence, also for varlen problems (no cu offsets). */
    sc->bias_off = b * pb->bias.sb + h * pb->bias.sh;
    sc->bias_sn = pb->bias.sn;
    sc->bias_sd = pb->bias.sd;
}

static int64_t clip(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

int64_t cpu_key_range(const cpu_score_ctx *sc, int64_t i0, int rows, int64_t seqlen_k, int align,
                      int64_t *begin)
{
    /* Both bounds grow with the row: the first row bounds the start, the last one the end. */
    const int64_t first = clip(ffpa_first_visible_col(sc->pb, i0, sc->shift), 0, seqlen_k);
    const int64_t end = clip(ffpa_last_visible_col(sc->pb, i0 + rows - 1, sc->shift) + 1, 0, seqlen_k);
    *begin = first - first % align;
    return end;
}

int64_t cpu_row_range(const cpu_score_ctx *sc, int64_t j0, int cols, int64_t seqlen_q, int align,
                      int64_t *begin)
{
    /* Row i sees column j iff first_visible(i) <= j <= last_visible(i), both
     * of the form i + const: invert them at the block's first and last column. */
    const int64_t last_off = ffpa_last_visible_col(sc->pb, 0, sc->shift);
    const int64_t first_off = ffpa_first_visible_col(sc->pb, 0, sc->shift);
    const int64_t first = clip(j0 - last_off, 0, seqlen_q);
    const int64_t end = clip(j0 + cols - 1 - first_off + 1, 0, seqlen_q);
    *begin = first - first % align;
    return end;
}

static void add_bias_row(float *row, int cols, const cpu_score_ctx *sc, int64_t off)
{
    if (sc->bias_sd == 1 && sc->bias_dtype == FFPA_F32) {
        const float *in = (const float *)sc->bias + off;
        for (int c = 0; c < cols; ++c)
            row[c] += in[c];
    } else if (sc->bias_sd == 0) {
        float value = ffpa_load_f32(sc->bias, sc->bias_dtype, off);
        for (int c = 0; c < cols; ++c)
            row[c] += value;
    } else {
        for (int c = 0; c < cols; ++c)
            row[c] += ffpa_load_f32(sc->bias, sc->bias_dtype, off + c * sc->bias_sd);
    }
}

void cpu_score_epilogue(float *s, int64_t ld, int rows, int cols, int64_t i0, int64_t j0,
                        const cpu_score_ctx *sc, float *cap)
{
    const float scale = sc->scale, softcap = sc->softcap;
    for (int r = 0; r < rows; ++r) {
        float *row = s + r * ld;
        const int64_t i = i0 + r;
        for (int c = 0; c < cols; ++c)
            row[c] *= scale;
        if (softcap > 0.0f) {
            float *cap_row = cap ? cap + r * ld : NULL;
            for (int c = 0; c < cols; ++c) {
                const float t = tanhf(row[c] / softcap);
                row[c] = softcap * t;
                if (cap_row)
                    cap_row[c] = 1.0f - t * t;
            }
        }
        if (sc->bias)
            add_bias_row(row, cols, sc, sc->bias_off + i * sc->bias_sn + j0 * sc->bias_sd);
        if (sc->alibi) {
            const int64_t diag = i + sc->shift;
            for (int c = 0; c < cols; ++c) {
                const int64_t dist = diag - (j0 + c);
                row[c] -= sc->alibi_slope * (float)(dist < 0 ? -dist : dist);
            }
        }
        if (sc->masked) {
            /* Columns outside [first, last] lie outside the causal diagonal or the window. */
            const int64_t first = ffpa_first_visible_col(sc->pb, i, sc->shift) - j0;
            const int64_t last = ffpa_last_visible_col(sc->pb, i, sc->shift) - j0;
            for (int c = 0; c < cols; ++c)
                if (c < first || c > last)
                    row[c] = -INFINITY;
        }
    }
}

void cpu_dropout_tile(float *z, int64_t ld, int rows, int cols, const ffpa_problem *pb, int64_t b,
                      int64_t h, int64_t i0, int64_t j0)
{
    const uint32_t threshold = pb->dropout_threshold;
    const float keep_scale = pb->dropout_scale;
    for (int r = 0; r < rows; ++r) {
        float *row = z + r * ld;
        int c = 0;
        while (c < cols) {
            /* One Philox call yields the words of four aligned columns. */
            int64_t j = j0 + c;
            ffpa_u32x4 words = ffpa_dropout_words(pb->dropout_seed, pb->dropout_offset, pb->hq, b,
                                                  h, i0 + r, j);
            for (int lane = (int)(j & 3); lane < 4 && c < cols; ++lane, ++c)
                row[c] = ffpa_u32x4_at(words, lane) >= threshold ? keep_scale : 0.0f;
        }
    }
}
