/*
 * OpenCL C pieces every kernel of the backend shares: element loads and
 * stores of the three dtypes, the sequence geometry, the visible key and
 * row ranges (causal, window), and the score of one (row, key) pair in the
 * order of backends/cpu/cpu_tiles.c (scale, softcap, bias, ALiBi, masks;
 * docs/notes/variants.md), with softcap's derivative for the backward.
 */
#ifndef FFPA_OPENCL_CL_SCORE_H
#define FFPA_OPENCL_CL_SCORE_H

#include "cl_params.h"

#ifdef FFPA_CL_TEST_COMPILE_ERROR
#error "FFPA_CL_TEST_COMPILE_ERROR: the build-failure path's test (FFPA_OPENCL_BUILD_OPTIONS)"
#endif

/* Element idx of a buffer of dtype dt (0 f16, 1 bf16, 2 f32) as float: f16
 * through vload_half (no cl_khr_fp16 needed), bf16 as a float's high half. */
static float load_elem(__global const uchar *base, long idx, int dt)
{
    if (dt == 2)
        return ((__global const float *)base)[idx];
    if (dt == 0)
        return vload_half((size_t)idx, (__global const half *)base);
    return as_float((uint)((__global const ushort *)base)[idx] << 16);
}

/* Rounded to nearest even, as the cpu backend (common/dtype.h). */
static void store_elem(__global uchar *base, long idx, float v, int dt)
{
    if (dt == 2) {
        ((__global float *)base)[idx] = v;
    } else if (dt == 0) {
        vstore_half_rte(v, (size_t)idx, (__global half *)base);
    } else {
        uint u = as_uint(v);
        if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN stays a quiet NaN */
            u = (u >> 16) | 0x0040u;
        else
            u = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        ((__global ushort *)base)[idx] = (ushort)u;
    }
}

/* How stage() lays a tile out and loads it (flags): STAGE_PLANES, the
 * tile's 4-column groups in planes of ld floats, 4 floats a row, so that
 * 4-column reads (local_quad_load) of consecutive rows are consecutive 16-byte
 * pieces (kernels/fwd_tiled.cl's K chunk: its work-items read keys
 * cg + 16 u); STAGE_QUADS, 4 contiguous columns per load where the source
 * allows (a load and its index arithmetic per element cost the
 * register-tiled forward as much as its FMAs). Both for kernels/fwd_tiled.cl:
 * on the H200 the quads made fwd.cl 13-18% slower at D >= 512 (its odd-pitch
 * K chunk), so fwd.cl and bwd.cl stage element by element
 * (docs/notes/opencl.md). */
#define STAGE_PLANES 1
#define STAGE_QUADS 2

/* Four floats of local memory as one 16-byte access, at a 16-byte aligned
 * address. vload4 / vstore4 promise only a float's alignment, so their PTX
 * is four 4-byte shared accesses: the CUDA driver's JIT merges them, NVIDIA's
 * OpenCL JIT of the same PTX does not (800 LDS and 624 STS against 196
 * LDS.128 and 127 STS.128 in the tiled forward, 1.88x its time on the H200;
 * docs/notes/opencl.md). */
static float4 local_quad_load(__local const float *at)
{
    return *(__local const float4 *)at;
}

static void local_quad_store(__local float *at, float4 v)
{
    *(__local float4 *)at = v;
}

/* Where element (rr, cc) of a staged tile lives in local memory: row pitch
 * ld, or with STAGE_PLANES in layout, plane pitch ld. */
static int local_at(int rr, int cc, int ld, int layout)
{
    if (layout & STAGE_PLANES)
        return (cc >> 2) * ld + rr * 4 + (cc & 3);
    return rr * ld + cc;
}

/* The 4 elements of dtype dt at byte address at, as load_elem. Built with
 * FFPA_CL_ALIGNED_QUADS (the host's promise: every quad the program loads
 * starts on a 4-element boundary), one vector load; otherwise vload4,
 * which NVIDIA's compiler turns into 4 element loads at 2-byte alignment. */
static float4 load_quad_at(__global const uchar *at, int dt)
{
#ifdef FFPA_CL_ALIGNED_QUADS
    if (dt == 2)
        return *(__global const float4 *)at;
    if (dt == 0)
        return vloada_half4(0, (__global const half *)at);
    return as_float4(convert_uint4(*(__global const ushort4 *)at) << 16);
#else
    if (dt == 2)
        return vload4(0, (__global const float *)at);
    if (dt == 0)
        return vload_half4(0, (__global const half *)at);
    return as_float4(convert_uint4(vload4(0, (__global const ushort *)at)) << 16);
#endif
}

/* Elements idx..idx + 3 of a buffer of dtype dt, as load_elem. */
static float4 load_quad(__global const uchar *base, long idx, int dt)
{
    return load_quad_at(base + idx * (dt == 2 ? 4 : 2), dt);
}

/* Whether a staged chunk goes 4 columns at a time: asked for, unit column
 * stride, whole groups of 4 in 16-byte aligned local rows (of a 16-byte
 * aligned tile: local_quad_store), none past dim (the last chunk of an odd
 * Dv is not). */
static int quads_fit(int layout, int ld, long sd, int cols, int d0, int dim)
{
    return (layout & STAGE_QUADS) && sd == 1 && (cols & 3) == 0 && (ld & 3) == 0 && d0 + cols <= dim;
}

/* rows x cols elements of a strided tensor (row stride sn, column stride
 * sd; rows r0.. valid below `valid`, columns d0.. below dim; zeros
 * elsewhere) into local memory (local_at(ld, layout)), the work-group's
 * nthreads work-items sharing the copy. */
static void stage(__local float *dst, int ld, int layout, int rows, int cols, __global const uchar *src, long base,
                  long sn, long sd, int r0, int valid, int d0, int dim, int dt, int tid, int nthreads)
{
    if (quads_fit(layout, ld, sd, cols, d0, dim)) {
        const int quads = cols >> 2;
        for (int e = tid; e < rows * quads; e += nthreads) {
            const int rr = e / quads, cc = (e % quads) << 2;
            local_quad_store(dst + local_at(rr, cc, ld, layout),
                             r0 + rr < valid ? load_quad(src, base + (long)(r0 + rr) * sn + d0 + cc, dt)
                                             : (float4)(0.0f));
        }
        return;
    }
    for (int e = tid; e < rows * cols; e += nthreads) {
        const int rr = e / cols, cc = e % cols;
        dst[local_at(rr, cc, ld, layout)] = r0 + rr < valid && d0 + cc < dim
                                             ? load_elem(src, base + (long)(r0 + rr) * sn + (long)(d0 + cc) * sd, dt)
                                             : 0.0f;
    }
}

/* Sequence b's first packed rows and lengths (offsets [cu_q | cu_k]). */
typedef struct seq_geom {
    long q_start, k_start;
    int seqlen_q, seqlen_k;
} seq_geom;

static seq_geom seq_of(const ffpa_cl_fwd_params p, __global const int *cub, int b)
{
    seq_geom g;
    g.q_start = g.k_start = 0;
    g.seqlen_q = p.nq;
    g.seqlen_k = p.nkv;
    if (p.varlen) {
        __global const int *cu_q = cub + p.cu_off, *cu_k = cu_q + p.batch + 1;
        g.q_start = cu_q[b];
        g.seqlen_q = cu_q[b + 1] - cu_q[b];
        g.k_start = cu_k[b];
        g.seqlen_k = cu_k[b + 1] - cu_k[b];
    }
    return g;
}

/* Key columns [first, last] row i may see (diag = seqlen_k - seqlen_q);
 * unbounded sides are +-2^30. */
static int first_col(const ffpa_cl_fwd_params p, int i, int diag)
{
    return p.window && p.window_left >= 0 ? i + diag - p.window_left : -(1 << 30);
}

static int last_col(const ffpa_cl_fwd_params p, int i, int diag)
{
    int last = 1 << 30;
    if (p.causal)
        last = i + diag;
    if (p.window && p.window_right >= 0)
        last = min(last, i + diag + p.window_right);
    return last;
}

/* Key tiles of bc keys that rows [r0, r1] may see: [*begin, end). */
static int key_tiles(const ffpa_cl_fwd_params p, int r0, int r1, int diag, int seqlen_k, int bc, int *begin)
{
    const int first = max(0, first_col(p, r0, diag)), last = min(seqlen_k - 1, last_col(p, r1, diag));
    *begin = first / bc;
    return last < first ? *begin : last / bc + 1;
}

/* Query rows that may see a key of [c0, c1]: [*begin, end). */
static int seeing_rows(const ffpa_cl_fwd_params p, int c0, int c1, int diag, int seqlen_q, int *begin)
{
    *begin = max(0, c0 - last_col(p, 0, diag));
    return max(*begin, min(seqlen_q, c1 - first_col(p, 0, diag) + 1));
}

/* Head h's ALiBi slope in sequence b (0 without ALiBi). */
static float alibi_slope(const ffpa_cl_fwd_params p, __global const float *alibib, int b, int h)
{
    return p.has_alibi ? alibib[p.alibi_off + (long)b * p.alibi_sb + (long)h * p.alibi_sh] : 0.0f;
}

/* The score of dot product x of row i (< seqlen_q) and key j: -inf outside
 * the sequence, the causal diagonal or the window; *cap (when not NULL) gets
 * d(score)/d(scale * x), softcap's 1 - tanh^2 (1 without softcap). */
static float score(const ffpa_cl_fwd_params p, float x, int b, int h, int i, int j, seq_geom g,
                   __global const uchar *biasb, float slope, float *cap)
{
    const int diag = g.seqlen_k - g.seqlen_q;
    if (cap)
        *cap = 1.0f;
    if (i >= g.seqlen_q || j >= g.seqlen_k || j > last_col(p, i, diag) || j < first_col(p, i, diag))
        return -INFINITY;
    float s = x * p.scale;
    if (p.softcap > 0.0f) {
        const float t = tanh(s / p.softcap);
        s = p.softcap * t;
        if (cap)
            *cap = 1.0f - t * t;
    }
    if (p.has_bias)
        s += load_elem(biasb, p.bias_off + (long)b * p.bias_sb + (long)h * p.bias_sh + (long)i * p.bias_sn +
                                  (long)j * p.bias_sd,
                       p.bias_dtype);
    if (p.has_alibi)
        s -= slope * (float)abs(i + diag - j);
    return s;
}

#endif
