/*
 * Which work item a block runs. A 1-D grid is decoded so that:
 *  - non-causal (linear order): query blocks of one head are adjacent, then
 *    the heads sharing a kv head, so blocks running together share K/V in L2;
 *  - causal (longest-first within a head): heads stay adjacent as above,
 *    but each head's query blocks run in reverse, the one with the most key
 *    columns first. The blocks in flight still share their K/V in L2, and
 *    the last head's short blocks fill the tail of the last wave. (Making
 *    the query block the slowest index instead, so every head's longest
 *    block starts first, puts ~33 heads' K/V in flight at once: at D = 512
 *    that is ~0.5 GB streamed from HBM, which bounds the causal forward.)
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
    w.split = (int)(linear % p.kv_splits);
    int64_t rest = linear / p.kv_splits;
    const int rank = (int)(rest % p.q_blocks);
    w.q_block = p.longest_first ? p.q_blocks - 1 - rank : rank;
    rest /= p.q_blocks;
    w.h = (int)(rest % p.hq);
    w.b = (int)(rest / p.hq);
    return w;
}

} /* namespace ffpa */

#endif
