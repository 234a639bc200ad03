/*
 * d(bias) of the Hopper backward: the unscaled dS of each tile
 * (softmax_grad's P * (dP Z - Delta), the gradient of the score that bias
 * adds to) into the fp32 dbias buffer [gb][gh][gn][gk] of bwd_params.h,
 * summed over the dimensions where the bias broadcasts:
 *   gn > 1, gk > 1  one reduction per element (its only contribution when
 *                   dbias broadcasts over neither batch nor head);
 *   gk == 1         summed over the tile's keys in registers and across
 *                   the warp's lanes first, one reduction per query row;
 *   gn == 1         summed over the tile's queries per thread, then across
 *                   the lanes that share its keys, one reduction per key
 *                   and tile (per warp and tile when gk == 1 too).
 * Only the first pass of a CTA adds (later passes recompute the same dS).
 * Element (key, q) of a thread: key = kb0 + 16 * warp + lane / 4 + 8 * half,
 * q = q0 + 8j + 2 * (lane % 4) + e (the S^T accumulator fragment).
 * Reductions are red.global.add.f32: deterministic only where each element
 * gets one contribution (sm90_bwd_launch.cu refuses the rest in
 * deterministic mode). Where each element gets exactly one (dbias
 * broadcasts over nothing: bwd_params dbias_atomic 0) it is a plain store,
 * and the buffer may be the fp32 output itself (sm90_bwd_launch.cu).
 */
#ifndef FFPA_CUDA_SM90_BWD_DBIAS_CUH
#define FFPA_CUDA_SM90_BWD_DBIAS_CUH

#include "bwd/bwd_params.h"
#include "sm90_arch.cuh"
#include "sm90_bwd_mainloop.cuh"

namespace ffpa {
namespace sm90 {

struct BwdDbias {
    float *plane;         /* the (b, h) plane of the buffer; NULL without dbias */
    int64_t gn, gk;       /* its rows (queries or 1) and columns (keys or 1) */
    bool atomic;          /* gn, gk > 1: other CTAs add into the same elements */
    int key[2];           /* this thread's two keys */
    bool key_ok[2];       /* ... inside the sequence */
    int seqlen_q;
    float by_key[2];      /* gn == 1: the tile's sums per key */

    FFPA_DEV static BwdDbias of(const ffpa_bwd_params &p, const BwdWork &w, int h, int ctid)
    {
        BwdDbias d;
        d.plane = nullptr;
        if (p.dbias) {
            const int64_t gb = p.dbias_gb > 1 ? w.b : 0, gh = p.dbias_gh > 1 ? h : 0;
            d.plane = p.dbias + (gb * p.dbias_gh + gh) * p.dbias_gn * p.dbias_gk;
        }
        d.gn = p.dbias_gn;
        d.gk = p.dbias_gk;
        d.atomic = p.dbias_atomic != 0;
        const int lane = ctid & 31;
        for (int half = 0; half < 2; ++half) {
            d.key[half] = w.kb0 + (ctid >> 5) * 16 + (lane >> 2) + 8 * half;
            d.key_ok[half] = d.key[half] < w.seqlen_k;
            d.by_key[half] = 0.0f;
        }
        d.seqlen_q = w.seqlen_q;
        return d;
    }

    /* g: this thread's four values of n8-block j (value 2 * half + e),
     * whose first query row is q. Warp-uniform: every lane calls it. */
    FFPA_DEV void add(int q, const float (&g)[4], int lane)
    {
        if (gn > 1 && gk > 1) {
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (key_ok[i >> 1] && q + (i & 1) < seqlen_q) {
                    float *at = plane + (int64_t)(q + (i & 1)) * gk + key[i >> 1];
                    if (atomic)
                        red_add(at, g[i]);
                    else
                        *at = g[i];
                }
        } else if (gn > 1) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float v = g[e] + g[2 + e];
                v += __shfl_xor_sync(0xFFFFFFFFu, v, 4);
                v += __shfl_xor_sync(0xFFFFFFFFu, v, 8);
                v += __shfl_xor_sync(0xFFFFFFFFu, v, 16);
                if (lane < 4 && q + e < seqlen_q)
                    red_add(plane + q + e, v);
            }
        } else {
            by_key[0] += g[0] + g[1];
            by_key[1] += g[2] + g[3];
        }
    }

    /* After the tile's last add (gn == 1: the sums per key leave). */
    FFPA_DEV void flush(int lane)
    {
        if (gn > 1)
            return;
        float total = 0.0f;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float v = by_key[half];
            v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
            v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
            if (gk > 1 && (lane & 3) == 0 && key_ok[half])
                red_add(plane + key[half], v);
            total += v;
            by_key[half] = 0.0f;
        }
        if (gk == 1) {
            total += __shfl_xor_sync(0xFFFFFFFFu, total, 4);
            total += __shfl_xor_sync(0xFFFFFFFFu, total, 8);
            total += __shfl_xor_sync(0xFFFFFFFFu, total, 16);
            if (lane == 0)
                red_add(plane, total);
        }
    }
};

} /* namespace sm90 */
} /* namespace ffpa */

#endif
