/*
 * Which work item a block runs. A 1-D grid is decoded so that:
 *  - non-causal (linear order): query blocks of one head are adjacent, then
 *    the heads sharing a kv head, so blocks running together share K/V in L2;
 *  - causal (longest-first): the query-block rank is the slowest index and
 *    is reversed, so blocks with the most key columns start first and the
 *    short ones fill the tail of the last wave.
 */
#ifndef FFPA_GPU_TILE_SCHEDULER_CUH
#define FFPA_GPU_TILE_SCHEDULER_CUH

#include "fwd_params.h"

namespace ffpa {

struct FwdWork {
    int q_block, split, h, b;
};

__device__ __forceinline__ FwdWork fwd_work(const ffpa_gpu_fwd_params &p, int64_t linear)
{
    FwdWork w;
    if (p.longest_first) {
        int64_t per_rank = (int64_t)p.hq * p.batch * p.kv_splits;
        int rank = (int)(linear / per_rank);
        int64_t rest = linear % per_rank;
        w.split = (int)(rest % p.kv_splits);
        rest /= p.kv_splits;
        w.h = (int)(rest % p.hq);
        w.b = (int)(rest / p.hq);
        w.q_block = p.q_blocks - 1 - rank;
    } else {
        w.split = (int)(linear % p.kv_splits);
        int64_t rest = linear / p.kv_splits;
        w.q_block = (int)(rest % p.q_blocks);
        rest /= p.q_blocks;
        w.h = (int)(rest % p.hq);
        w.b = (int)(rest / p.hq);
    }
    return w;
}

} /* namespace ffpa */

#endif
