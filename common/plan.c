/* The Split-D planner. See plan.h. */
#include "plan.h"

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int round_up(int64_t a, int64_t m)
{
    return (int)(ceil_div(a, m) * m);
}

size_t ffpa_plan_smem_bytes(const ffpa_plan *plan, ffpa_dtype dtype, int backward)
{
    size_t elt = ffpa_dtype_size(dtype);
    if (plan->path == FFPA_PATH_SPLIT_D || plan->path == FFPA_PATH_DECODE) {
        /* Q, K and V chunks stream through one ring of `stages` slots: a
         * slot holds a Br x Dchunk Q chunk and a Bc x Dchunk K (or V) chunk. */
        int chunk = plan->dqk_chunk > plan->dv_chunk ? plan->dqk_chunk : plan->dv_chunk;
        size_t ring = (size_t)plan->stages * (size_t)(plan->br + plan->bc) * (size_t)chunk * elt;
        if (backward) /* S/dP tile in fp32 for the recompute */
            ring += (size_t)plan->br * (size_t)plan->bc * sizeof(float);
        return ring;
    }
    /* Small D: whole-D tiles of Q (once) and K, V (staged). */
    size_t q = (size_t)plan->br * (size_t)plan->dqk_padded * elt;
    size_t kv = (size_t)plan->stages * (size_t)plan->bc *
                (size_t)(plan->dqk_padded > plan->dv_padded ? plan->dqk_padded : plan->dv_padded) *
                elt;
    size_t extra = backward ? (size_t)plan->br * (size_t)plan->bc * sizeof(float) : 0;
    return q + kv + extra;
}

static void plan_cpu(const ffpa_plan_input *in, const ffpa_device_limits *lim, ffpa_plan *p)
{
    /* Cache-sized tiles: a Bc x Dchunk block of K stays in L1/L2 while the
     * Br query rows sweep it. */
    p->path = in->dqk > 256 || in->dv > 256 ? FFPA_PATH_SPLIT_D : FFPA_PATH_SMALL_D;
    p->br = 32;
    p->bc = 64;
    p->dqk_chunk = in->dqk < 64 ? (int)in->dqk : 64;
    p->dv_chunk = in->dv < 64 ? (int)in->dv : 64;
    p->stages = 1;
    p->warps = lim->sm_count > 0 ? lim->sm_count : 1;
    p->kv_splits = 1;
}

static void plan_gpu(const ffpa_plan_input *in, const ffpa_device_limits *lim, ffpa_plan *p)
{
    int64_t dmax = in->dqk > in->dv ? in->dqk : in->dv;
    p->kv_splits = 1;
    if (dmax <= 256) {
        /* Coarse FA-2 tiling: the whole head dim per tile; 4 warps x 16 rows. */
        p->path = FFPA_PATH_SMALL_D;
        p->br = 64;
        p->bc = dmax <= 128 ? 64 : 32;
        p->dqk_chunk = round_up(in->dqk, 32);
        p->dv_chunk = round_up(in->dv, 32);
        p->stages = 2;
        p->warps = 4;
    } else {
        /* Fine-grained Split-D: D streamed in 64-wide chunks; O stays in fp32
         * registers across the whole D. */
        p->path = FFPA_PATH_SPLIT_D;
        p->br = 64;
        p->bc = 64;
        p->dqk_chunk = 64;
        p->dv_chunk = 64;
        p->stages = 2;
        p->warps = 4;
    }
    /* Few query rows cannot fill the machine: split the KV sequence too. */
    int64_t q_blocks = ceil_div(in->nq, p->br);
    int64_t blocks = q_blocks * in->hq * in->batch;
    if (!in->backward && in->nq <= 16 && !in->varlen && blocks < lim->sm_count) {
        p->path = FFPA_PATH_DECODE;
        p->br = 16;
        p->dqk_chunk = 64;
        p->dv_chunk = 64;
        int64_t kv_blocks = ceil_div(in->nkv, p->bc);
        int64_t want = ceil_div(2 * (int64_t)lim->sm_count, blocks);
        p->kv_splits = (int)(want < kv_blocks ? want : kv_blocks);
        if (p->kv_splits < 1)
            p->kv_splits = 1;
    }
    /* Shrink the pipeline until it fits the block's shared memory. */
    while (p->stages > 1 && ffpa_plan_smem_bytes(p, in->dtype, in->backward) > lim->smem_per_block)
        --p->stages;
    while (p->bc > 16 && ffpa_plan_smem_bytes(p, in->dtype, in->backward) > lim->smem_per_block)
        p->bc /= 2;
}

ffpa_status ffpa_plan_make(const ffpa_plan_input *in, const ffpa_device_limits *lim,
                           ffpa_plan *plan)
{
    ffpa_plan p = {0};
    if (in->dqk < 1 || in->dv < 1 || in->dqk > FFPA_MAX_HEAD_DIM || in->dv > FFPA_MAX_HEAD_DIM ||
        in->nq < 1 || in->nkv < 1)
        return FFPA_ERR_INVALID_ARGUMENT;
    if (lim->is_gpu)
        plan_gpu(in, lim, &p);
    else
        plan_cpu(in, lim, &p);
    p.dqk_padded = round_up(in->dqk, p.dqk_chunk);
    p.dv_padded = round_up(in->dv, p.dv_chunk);
    p.n_qk_chunks = p.dqk_padded / p.dqk_chunk;
    p.n_v_chunks = p.dv_padded / p.dv_chunk;
    p.smem_bytes = lim->is_gpu ? ffpa_plan_smem_bytes(&p, in->dtype, in->backward) : 0;
    if (lim->is_gpu && p.smem_bytes > lim->smem_per_block)
        return FFPA_ERR_UNSUPPORTED;
    p.q_blocks = ceil_div(in->nq, p.br);
    p.grid[0] = p.q_blocks * p.kv_splits;
    p.grid[1] = in->hq;
    p.grid[2] = in->batch;
    /* Causal blocks near the bottom see the most keys: start them first so
     * the short ones fill the tail of the wave. */
    p.order = in->causal ? FFPA_ORDER_LONGEST_FIRST : FFPA_ORDER_LINEAR;
    *plan = p;
    return FFPA_OK;
}
