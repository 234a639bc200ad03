/*
 * Host side of the Hopper backward: coverage, the instantiation for Dqk/Dv,
 * the tensor maps and the launch sequence
 *   Delta -> zero dQ (the fp32 buffer, or the output with
 *   FFPA_GRAD_ACCUM_OUTPUT) and dbias -> fused dK/dV/dQ(/dbias) kernel ->
 *   dQ and dbias conversions.
 * Checks, workspace layout and kernel parameters are the generic
 * backward's (backends/gpu/bwd/bwd_host.h), so both paths accept and refuse
 * the same inputs with the same messages.
 */
#include <stdio.h>
#include <string.h>

#include "arch_sm80.cuh"

#include "../bwd/bwd_kernels.h"
#include "bwd/bwd_host.h"
#include "sm90_bwd_kernels.cuh"
#include "sm90_bwd_launch.h"
#include "sm90_host.h"

namespace {

using ffpa::sm90::BwdKernelDesc;
using ffpa::sm90::BwdMaps;
using ffpa::sm90::BwdOutViews;
using ffpa::sm90::encode;
using ffpa::sm90::unsupported;

/* Bias, dropout or a variant: the kernels' second instantiation. */
bool has_extras(const ffpa_problem *pb)
{
    return pb->has_bias || pb->dropout_p > 0.0f || pb->window || pb->softcap > 0.0f || pb->alibi != NULL;
}

/* The width for pb: the tuned one (boxes x cluster) where it can run pb,
 * else the small-D or the gradient-split kernel where it can, else the
 * first in the table's order of preference that can. */
const BwdKernelDesc *pick(const ffpa_problem *pb, int boxes, int cluster)
{
    const BwdKernelDesc *table = pb->dtype == FFPA_F16 ? ffpa::sm90::bwd_f16 : ffpa::sm90::bwd_bf16;
    const int64_t d = pb->dqk > pb->dv ? pb->dqk : pb->dv;
    const bool f32_dq = pb->grad_accum == FFPA_GRAD_ACCUM_F32;
    /* Not with a bias: its 32 values a thread spill there (H100 D=128: 88 against 129 TFLOP/s on the
     * 64-key kernel). Deterministic: its turns are taken by the TMA thread (fp32 buffer). */
    if (!boxes && d <= 128 && !pb->has_bias && (!pb->deterministic || f32_dq))
        return pb->dtype == FFPA_F16 ? &ffpa::sm90::bwd_keys_f16 : &ffpa::sm90::bwd_keys_bf16;
    /* Not with a bias, dropout or a variant: its extras build spills 380 bytes (H100 D=320: dropout 98
     * against 124, a bias 72 against 100 TFLOP/s on the 6-box kernel). */
    if (!boxes && d > 256 && d <= 320 && !has_extras(pb))
        return pb->dtype == FFPA_F16 ? &ffpa::sm90::bwd_grads_f16 : &ffpa::sm90::bwd_grads_bf16;
    const BwdKernelDesc *first = NULL;
    for (int i = 0; i < ffpa::sm90::kNumBwdShapes; ++i) {
        const BwdKernelDesc *kd = &table[i];
        if (d > 64 * (int64_t)kd->boxes * kd->cluster || (!f32_dq && kd->f32_dq_only))
            continue;
        if (kd->boxes == boxes && kd->cluster == cluster)
            return kd;
        if (!first)
            first = kd;
    }
    return first;
}

/* Contributions each dbias element sums: the product of the dimensions
 * where dbias broadcasts (1: each element is written once, in any order). */
int64_t dbias_contributions(const ffpa_problem *pb)
{
    int64_t g[4];
    ffpa::bwd::host::dbias_grid(pb, g);
    const int64_t full[4] = {pb->batch, pb->hq, pb->nq, pb->nkv};
    int64_t n = 1;
    for (int i = 0; i < 4; ++i)
        n *= g[i] ? full[i] / g[i] : 0; /* g[i] = 0: no elements at all */
    return n;
}

/* Whether the kernel can write dbias straight into the output: each
 * element gets one contribution, a plain store (sm90_bwd_dbias.cuh, gn and
 * gk > 1), and the output is fp32 laid out as the buffer [gb][gh][gn][gk]
 * is, so no buffer and no conversion. */
bool dbias_direct(const ffpa_problem *pb)
{
    if (!pb->has_dbias || pb->dbias_dtype != FFPA_F32 || dbias_contributions(pb) != 1)
        return false;
    int64_t g[4];
    ffpa::bwd::host::dbias_grid(pb, g);
    if (g[2] == 1 || g[3] == 1)
        return false; /* one query row or key (stride 0): the kernel's row / key sums reduce */
    const int64_t want[4] = {g[1] * g[2] * g[3], g[2] * g[3], g[3], 1};
    const int64_t have[4] = {pb->dbias.sb, pb->dbias.sh, pb->dbias.sn, pb->dbias.sd};
    for (int i = 0; i < 4; ++i)
        if (g[i] > 1 && have[i] != want[i])
            return false;
    return true;
}

} /* namespace */

extern "C" ffpa_status ffpa_cuda_sm90_backward(struct ffpa_cuda_state *st, const ffpa_problem *pb, int boxes,
                                               int cluster, void *ws, size_t ws_bytes, const char **kernel, char *err,
                                               size_t err_len)
{
#ifndef FFPA_CUDA_HAVE_SM90A
    (void)st, (void)pb, (void)boxes, (void)cluster, (void)ws, (void)ws_bytes, (void)kernel;
    return unsupported(err, err_len, "the sm90 kernels were not built (-Dcuda-archs has no 90a)");
#else
    namespace host = ffpa::bwd::host;
    if (st->prop.major != 9 || st->prop.minor != 0)
        return unsupported(err, err_len, "the sm90 backward needs an sm_90 device (H100/H200)");
    if (pb->has_dbias && pb->deterministic && dbias_contributions(pb) > 1)
        return unsupported(err, err_len,
                           "opt.dbias: a broadcast dbias sums contributions in no fixed order on the sm90 backward "
                           "(deterministic mode takes the generic one)");
    ffpa_status s = host::check(pb, "cuda", err, err_len);
    if (s != FFPA_OK)
        return s;
    const BwdKernelDesc *kd = pick(pb, boxes, cluster);
    if (!kd)
        return unsupported(err, err_len, "q: the sm90 backward covers Dqk and Dv up to 1024");
    if (!kd->launch[has_extras(pb)]) /* pick does not hand such calls to a plain-only width */
        return unsupported(err, err_len, "the sm90 backward width has no bias/dropout/variant build");
    if (kd->smem_bytes > st->prop.sharedMemPerBlockOptin)
        return unsupported(err, err_len, "the sm90 backward needs more shared memory than this device has");
    const host::Layout lay = host::layout_of(pb);
    if ((s = host::check_workspace(lay, ws, ws_bytes, "cuda", err, err_len)) != FFPA_OK)
        return s;

    const bool varlen = pb->cu_q != NULL;
    BwdMaps maps;
    memset(&maps, 0, sizeof maps);
    const int64_t qb = varlen ? 1 : pb->batch;
    const int64_t qrows = varlen ? pb->total_q : pb->nq, krows = varlen ? pb->total_k : pb->nkv;
    if (!encode(&maps.q, pb->q, pb->dtype, pb->dqk, qrows, pb->hq, qb) ||
        !encode(&maps.dout, pb->dout, pb->dtype, pb->dv, qrows, pb->hq, qb) ||
        !encode(&maps.k, pb->k, pb->dtype, pb->dqk, krows, pb->hkv, qb) ||
        !encode(&maps.v, pb->v, pb->dtype, pb->dv, krows, pb->hkv, qb))
        return unsupported(err, err_len,
                           "q/k/v/dout: strides not expressible as a TMA tensor map (e.g. broadcast stride 0)");

    unsigned char *base = static_cast<unsigned char *>(ws);
    /* The fp32 dQ buffer ([hq][total_q][Dqk], dense batches as [hq][B][nq]):
     * the instantiations with kDqBulk add their 64 x 32 boxes with TMA
     * reductions; the others never read the map. */
    if (kd->dq_bulk && pb->grad_accum == FFPA_GRAD_ACCUM_F32 && pb->nq > 0) {
        const int64_t dims[4] = {pb->dqk, qrows, pb->hq, qb};
        const int64_t strides[3] = {pb->dqk, pb->total_q * pb->dqk, pb->nq * pb->dqk};
        if (!ffpa::sm90::encode_tiled(&maps.dq, base + lay.dq, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, dims, strides,
                                      32, 64))
            return unsupported(err, err_len, "the dQ buffer is too large for a TMA tensor map");
    }

    host::Tiles t;
    memset(&t, 0, sizeof t);
    t.bc = kd->keys;
    t.br = 64;
    ffpa_bwd_params p;
    int64_t g[4], dq_blocks;
    host::fill_params(pb, base, lay, t, p, g, dq_blocks);
    if (pb->deterministic) {
        p.dq_turn = reinterpret_cast<int *>(base + lay.dq_turn);
        p.dq_turn_tiles = (int)host::dq_turn_tiles(pb);
    }
    /* Reductions only where elements sum several contributions (fill_params
     * counts a size-1 dimension's stride 0 as sharing: B = 1 would reduce). */
    p.dbias_atomic = pb->has_dbias && dbias_contributions(pb) > 1;
    const bool direct_dbias = dbias_direct(pb);
    if (direct_dbias)
        p.dbias = static_cast<float *>(pb->dbias.data);

    BwdOutViews out;
    out.dk = pb->grad_k.data;
    out.dk_sb = pb->grad_k.sb, out.dk_sh = pb->grad_k.sh, out.dk_sn = pb->grad_k.sn, out.dk_sd = pb->grad_k.sd;
    out.dv = pb->grad_v.data;
    out.dv_sb = pb->grad_v.sb, out.dv_sh = pb->grad_v.sh, out.dv_sn = pb->grad_v.sn, out.dv_sd = pb->grad_v.sd;

    cudaStream_t stream = ffpa_cuda_stream(&st->gpu);
    cudaError_t e = cudaSuccess;
    if (varlen && !pb->cu_on_device) { /* device offsets: fill_params points p at them */
        const size_t bytes = (size_t)(pb->batch + 1) * sizeof(int32_t);
        if ((e = cudaMemcpyAsync(base + lay.cu_q, pb->cu_q, bytes, cudaMemcpyHostToDevice, stream)) != cudaSuccess ||
            (e = cudaMemcpyAsync(base + lay.cu_k, pb->cu_k, bytes, cudaMemcpyHostToDevice, stream)) != cudaSuccess)
            return ffpa_gpu_launch_error(e, "cuda backward: uploading cu_seqlens", err, err_len);
    }
    const int dtype = (int)pb->dtype;
    const bool dq_f32 = pb->grad_accum == FFPA_GRAD_ACCUM_F32;
    const int64_t nlen = varlen ? 0 : pb->nq;
    const size_t dbias_bytes = (size_t)(g[0] * g[1] * g[2] * g[3]) * sizeof(float);
    /* Written straight into the output and with no bound on the query tiles
     * a key block runs (causal, window) in a dense batch, every element of
     * dbias is stored once: nothing to clear. */
    const bool dbias_covered = direct_dbias && !pb->causal && !p.mask.window && !varlen;
    if (pb->has_dbias && !dbias_covered && (e = cudaMemsetAsync(p.dbias, 0, dbias_bytes, stream)) != cudaSuccess)
        return ffpa_gpu_launch_error(e, "cuda backward: clearing the dbias buffer", err, err_len);
    if (pb->nq > 0) {
        if ((e = ffpa::bwd::launch_delta(dtype, p, stream)) != cudaSuccess)
            return ffpa_gpu_launch_error(e, "cuda backward: delta kernel", err, err_len);
        /* The key blocks add into dQ: the fp32 buffer, or the output itself. */
        if (dq_f32) {
            const size_t dq_bytes = (size_t)(pb->hq * pb->total_q * pb->dqk) * sizeof(float);
            e = cudaMemsetAsync(p.dq.data, 0, dq_bytes, stream);
        } else {
            e = ffpa::bwd::launch_convert(dtype, host::convert_job(NULL, pb->grad_q, pb->hq, pb->total_q, nlen,
                                                                   pb->dqk), stream);
        }
        if (e != cudaSuccess)
            return ffpa_gpu_launch_error(e, "cuda backward: clearing dQ", err, err_len);
        if (p.dq_turn && (e = cudaMemsetAsync(p.dq_turn, 0, host::dq_turn_bytes(pb), stream)) != cudaSuccess)
            return ffpa_gpu_launch_error(e, "cuda backward: clearing the dQ turn counters", err, err_len);
    }
    const int64_t ctas = (int64_t)p.kv_blocks * pb->hkv * pb->batch;
    /* The variants (window, softcap, ALiBi) ride on the bias/dropout instantiation. */
    const int extras = has_extras(pb);
    if (pb->nkv > 0 && (e = kd->launch[extras](maps, p, out, ctas, stream)) != cudaSuccess)
        return ffpa_gpu_launch_error(e, "cuda backward: sm90 dK/dV/dQ kernel", err, err_len);
    if (pb->nq > 0 && dq_f32) {
        const ffpa::bwd::ConvertJob cj = host::convert_job(static_cast<const float *>(p.dq.data), pb->grad_q, pb->hq,
                                                           pb->total_q, nlen, pb->dqk);
        if ((e = ffpa::bwd::launch_convert(dtype, cj, stream)) != cudaSuccess)
            return ffpa_gpu_launch_error(e, "cuda backward: dQ conversion kernel", err, err_len);
    }
    if (pb->has_dbias && !direct_dbias) {
        const int64_t stride[4] = {pb->dbias.sb, pb->dbias.sh, pb->dbias.sn, pb->dbias.sd};
        if ((e = ffpa::bwd::launch_dbias_convert(p.dbias, g, pb->dbias.data, (int)pb->dbias_dtype, stride, stream)) !=
            cudaSuccess)
            return ffpa_gpu_launch_error(e, "cuda backward: dbias conversion kernel", err, err_len);
    }
    if (kernel)
        *kernel = kd->name;
    return FFPA_OK;
#endif
}
