/*
 * ffpa_merge_partials on GPUs (CUDA and HIP share it): partial results
 * merged by LSE with common/lse_merge.h's conventions, the same ones the
 * split-KV decode's merge (kv/kv_kernel.cuh) uses. Memory-bound: one block
 * per row at a time, the row's LSEs read by every thread (broadcast), then
 * each thread its columns. Include after the vendor's arch layer (arch::f16,
 * arch::bf16, to_f32, from_f32).
 */
#ifndef FFPA_GPU_MERGE_KERNEL_CUH
#define FFPA_GPU_MERGE_KERNEL_CUH

#include "gpu_rt.h"
#include "lse_merge.h"
#include "problem.h"

namespace ffpa {
namespace merge {

struct Part {
    const void *o;
    const float *lse;
    int64_t o_sb, o_sh, o_sn, o_sd;
    int64_t lse_sb, lse_sh, lse_sn;
    int dtype; /* ffpa_dtype */
};

struct Params {
    Part part[FFPA_MERGE_MAX_PARTS];
    void *o;
    float *lse; /* NULL: not written */
    int64_t o_sb, o_sh, o_sn, o_sd;
    int64_t lse_sb, lse_sh, lse_sn;
    int64_t h, n, rows;
    int dv, parts;
};

constexpr int kThreads = 128;

__device__ __forceinline__ float load_f32(const void *base, int dtype, int64_t i)
{
    if (dtype == FFPA_F32)
        return static_cast<const float *>(base)[i];
    if (dtype == FFPA_F16)
        return arch::to_f32(static_cast<const arch::f16 *>(base)[i]);
    return arch::to_f32(static_cast<const arch::bf16 *>(base)[i]);
}

template <typename T> __device__ __forceinline__ T store_as(float x) { return arch::from_f32<T>(x); }
template <> __device__ __forceinline__ float store_as<float>(float x) { return x; }

template <typename T> __global__ void __launch_bounds__(kThreads) merge_kernel(const Params p)
{
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        const int64_t b = row / (p.h * p.n), h = row / p.n % p.h, n = row % p.n;
        float w[FFPA_MERGE_MAX_PARTS];
        float m = -INFINITY;
#pragma unroll
        for (int i = 0; i < FFPA_MERGE_MAX_PARTS; ++i) {
            w[i] = -INFINITY;
            if (i < p.parts) {
                const Part &q = p.part[i];
                w[i] = q.lse[b * q.lse_sb + h * q.lse_sh + n * q.lse_sn];
                m = fmaxf(m, w[i]);
            }
        }
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < FFPA_MERGE_MAX_PARTS; ++i)
            sum += ffpa_lse_term(w[i], m);
        const float lse = ffpa_lse_total(m, sum);
#pragma unroll
        for (int i = 0; i < FFPA_MERGE_MAX_PARTS; ++i)
            w[i] = ffpa_lse_weight(w[i], lse);
        T *o = static_cast<T *>(p.o) + b * p.o_sb + h * p.o_sh + n * p.o_sn;
        for (int c = threadIdx.x; c < p.dv; c += kThreads) {
            float acc = 0.0f;
#pragma unroll
            for (int i = 0; i < FFPA_MERGE_MAX_PARTS; ++i)
                if (w[i] != 0.0f) {
                    const Part &q = p.part[i];
                    acc += w[i] * load_f32(q.o, q.dtype, b * q.o_sb + h * q.o_sh + n * q.o_sn + c * q.o_sd);
                }
            o[c * p.o_sd] = store_as<T>(acc);
        }
        /* lse may be a part's LSE (in place): every thread has read it. */
        __syncthreads();
        if (p.lse && threadIdx.x == 0)
            p.lse[b * p.lse_sb + h * p.lse_sh + n * p.lse_sn] = lse;
    }
}

/* Launches the merge of mp on stream s ("<vendor>: merging partial results: ..." on failure). */
inline ffpa_status run(const ffpa_merge_problem *mp, gpuStream_t s, char *err, size_t err_len)
{
    Params p = {};
    for (int i = 0; i < mp->parts; ++i) {
        const ffpa_view &o = mp->o_part[i], &l = mp->lse_part[i];
        p.part[i] = Part{o.data, static_cast<const float *>(l.data), o.sb, o.sh, o.sn, o.sd,
                         l.sb, l.sh, l.sn, (int)mp->o_part_dtype[i]};
    }
    p.o = mp->o.data;
    p.lse = static_cast<float *>(mp->lse.data);
    p.o_sb = mp->o.sb, p.o_sh = mp->o.sh, p.o_sn = mp->o.sn, p.o_sd = mp->o.sd;
    p.lse_sb = mp->lse.sb, p.lse_sh = mp->lse.sh, p.lse_sn = mp->lse.sn;
    p.h = mp->h, p.n = mp->n, p.rows = mp->b * mp->h * mp->n;
    p.dv = (int)mp->dv, p.parts = mp->parts;
    const unsigned grid = (unsigned)(p.rows < (1 << 20) ? p.rows : (1 << 20));
    if (mp->o_dtype == FFPA_F32)
        merge_kernel<float><<<grid, kThreads, 0, s>>>(p);
    else if (mp->o_dtype == FFPA_F16)
        merge_kernel<arch::f16><<<grid, kThreads, 0, s>>>(p);
    else
        merge_kernel<arch::bf16><<<grid, kThreads, 0, s>>>(p);
    const GpuRt::Error e = GpuRt::last_error();
    return GpuRt::ok(e) ? FFPA_OK : GpuRt::error(e, "merging partial results", err, err_len);
}

} /* namespace merge */
} /* namespace ffpa */

#endif
