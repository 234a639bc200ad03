/* The Split-D planner. See plan.h. */
#include "plan.h"

#include <string.h>

#include "env.h"
#include "kv_sched.h" /* FFPA_KV_MIN_TILES_PER_SPLIT */
#include "problem.h"

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int round_up(int64_t a, int64_t m)
{
    return (int)(ceil_div(a, m) * m);
}

/* Padded head dims and chunk counts from the chunk sizes. */
static void derive_chunks(const ffpa_plan_input *in, ffpa_plan *p)
{
    p->dqk_padded = round_up(in->dqk, p->dqk_chunk);
    p->dv_padded = round_up(in->dv, p->dv_chunk);
    p->n_qk_chunks = p->dqk_padded / p->dqk_chunk;
    p->n_v_chunks = p->dv_padded / p->dv_chunk;
}

/*
 * Forward shapes of the generic GPU kernels, one per instantiated Dv (the
 * kernels keep O for the whole Dv in registers, so Dv is compile-time; Dqk
 * is a loop count). Must match backends/cuda/fwd_kernels.cuh and
 * backends/hip/fwd_kernels_hip.h: the launchers check.
 *   dv: largest Dv covered; wm x wn warps (wm x 16 query rows; wn warps split
 *   every D chunk); bc key rows per tile; chunk: D columns per smem slab.
 */
typedef struct gpu_fwd_shape {
    int dv, wm, wn, bc, chunk, stages, mt; /* mt: m16 tiles of query rows per warp */
    int key_split; /* the wn warps of a row group share QK^T by keys and swap P (FwdConfig::kKeySplit) */
} gpu_fwd_shape;

/* The first covering Dv is the default; a later one of the same Dv (the
 * 16-rows-per-warp tiles at 64 and 128; at 512 and 1024 the narrower
 * slabs, 256 columns for the 163 KiB of sm_80 and 128 (512) or 32 keys
 * (1024) for the 99 KiB of sm_86 / sm_89) runs where the ones before it do
 * not fit (plan_gpu_forward) or a tuning table names it. */
static const gpu_fwd_shape gpu_fwd_shapes[] = {
    {64, 4, 1, 128, 64, 2, 2, 0}, {64, 4, 1, 64, 64, 2, 1, 0},   {128, 4, 1, 64, 128, 2, 2, 0},
    {128, 8, 1, 64, 128, 2, 1, 0}, {256, 4, 1, 64, 256, 2, 1, 0}, {320, 4, 1, 64, 64, 3, 1, 0},
    {512, 4, 2, 64, 512, 2, 1, 1}, {512, 4, 2, 64, 256, 3, 1, 1}, {512, 4, 2, 64, 128, 3, 1, 1},
    {1024, 2, 4, 64, 512, 2, 1, 0}, {1024, 2, 4, 64, 256, 2, 1, 0}, {1024, 2, 4, 32, 256, 2, 1, 0},
};
#define N_GPU_FWD_SHAPES ((int)(sizeof gpu_fwd_shapes / sizeof gpu_fwd_shapes[0]))

static int shape_has_tile(const gpu_fwd_shape *s, int br, int bc, int chunk, int warps)
{
    return 16 * s->wm * s->mt == br && s->bc == bc && s->chunk == chunk && s->wm * s->wn == warps;
}

/* The instantiation the launchers run a tile on: the smallest with that
 * tile covering dv (NULL: none). */
static const gpu_fwd_shape *shape_of_tile(int br, int bc, int chunk, int warps, int64_t dv)
{
    for (int i = 0; i < N_GPU_FWD_SHAPES; ++i)
        if (gpu_fwd_shapes[i].dv >= dv && shape_has_tile(&gpu_fwd_shapes[i], br, bc, chunk, warps))
            return &gpu_fwd_shapes[i];
    return NULL;
}

/* Forward GPU model: the layout of the forward kernels
 * (backends/gpu/fwd_kernel.cuh, fwd_smem_layout). Q is resident (loaded
 * once, Br x Dqk) or streamed with each K chunk (ffpa_plan_q_resident); a
 * ring of `stages` slots of Bc (+ Br) x chunk; the partial S tiles when
 * warps split D (warps > Br / 16); O is staged through the same memory at
 * the end, Br x the instantiation's whole Dv (more than dv_padded when a
 * tuned tile runs on a larger instantiation). */
static size_t plan_smem_forward_gpu(const ffpa_plan *plan, size_t elt)
{
    const gpu_fwd_shape *shape = shape_of_tile(plan->br, plan->bc, plan->dqk_chunk, plan->warps, plan->dv_padded);
    int row_warps = plan->br / 16 > 0 ? plan->br / 16 : 1;
    int d_warps = shape ? shape->wn : plan->warps > row_warps ? plan->warps / row_warps : 1;
    int resident = ffpa_plan_q_resident(plan);
    int o_cols = shape ? shape->dv : plan->dv_padded;
    size_t q = resident ? (size_t)plan->br * (size_t)plan->dqk_padded * elt : 0;
    size_t slot = (size_t)(plan->bc + (resident ? 0 : plan->br)) * (size_t)plan->dqk_chunk * elt;
    size_t main_loop = q + (size_t)plan->stages * slot;
    size_t epilogue = (size_t)plan->br * (size_t)o_cols * elt;
    /* Warps that split D add partial S tiles in fp32; under the key split
     * they swap P (16-bit) and two float2 per lane and row group instead. */
    size_t spart = d_warps <= 1 ? 0
                   : shape && shape->key_split
                       ? (size_t)plan->br * plan->bc * 2 + (size_t)d_warps * plan->br * 32
                       : (size_t)d_warps * plan->br * plan->bc * sizeof(float);
    return (main_loop > epilogue ? main_loop : epilogue) + spart;
}

size_t ffpa_plan_smem_bytes(const ffpa_plan *plan, ffpa_dtype dtype, int backward)
{
    size_t elt = ffpa_dtype_size(dtype);
    if (!backward)
        return plan_smem_forward_gpu(plan, elt);
    if (plan->path == FFPA_PATH_SPLIT_D || plan->path == FFPA_PATH_DECODE) {
        /* Q, K and V chunks stream through one ring of `stages` slots: a
         * slot holds a Br x Dchunk Q chunk and a Bc x Dchunk K (or V) chunk. */
        int chunk = plan->dqk_chunk > plan->dv_chunk ? plan->dqk_chunk : plan->dv_chunk;
        size_t ring = (size_t)plan->stages * (size_t)(plan->br + plan->bc) * (size_t)chunk * elt;
        /* S/dP tile in fp32 for the recompute */
        ring += (size_t)plan->br * (size_t)plan->bc * sizeof(float);
        return ring;
    }
    /* Small D: whole-D tiles of Q (once) and K, V (staged). */
    size_t q = (size_t)plan->br * (size_t)plan->dqk_padded * elt;
    size_t kv = (size_t)plan->stages * (size_t)plan->bc *
                (size_t)(plan->dqk_padded > plan->dv_padded ? plan->dqk_padded : plan->dv_padded) *
                elt;
    size_t extra = (size_t)plan->br * (size_t)plan->bc * sizeof(float);
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

static void plan_gpu_backward(const ffpa_plan_input *in, const ffpa_device_limits *lim, ffpa_plan *p)
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

static void use_fwd_shape(const ffpa_plan_input *in, const gpu_fwd_shape *s, ffpa_plan *p)
{
    p->br = 16 * s->wm * s->mt;
    p->bc = s->bc;
    p->dqk_chunk = s->chunk;
    p->dv_chunk = s->chunk;
    p->stages = s->stages;
    p->warps = s->wm * s->wn;
    p->kv_splits = 1;
    derive_chunks(in, p);
}

/* Q resident in shared memory, the rule before the Split-D upgrade:
 * whole-D tiles, and the decode path's tiles at D <= 256. */
static int fwd_q_resident_base(const ffpa_plan *p)
{
    return p->path == FFPA_PATH_SMALL_D ||
           (p->path == FFPA_PATH_DECODE && p->dqk_padded <= 256 && p->dv_padded <= 256);
}

/* The Split-D tiles (and the split-KV decode path's) keep Q resident too
 * where Q, the ring at the plan's depth and the partial S tiles fit the
 * block: Q is then read from L2 once per block instead of once per key
 * tile (a third of the block's fill traffic at D = 512). */
static int fwd_q_resident(const ffpa_plan_input *in, const ffpa_device_limits *lim, const ffpa_plan *p)
{
    if (fwd_q_resident_base(p))
        return 1;
    if (in->stream_q)
        return 0;
    const size_t elt = ffpa_dtype_size(in->dtype);
    ffpa_plan r = *p;
    r.q_resident = 1;
    const size_t resident = plan_smem_forward_gpu(&r, elt);
    if (resident > lim->smem_per_block)
        return 0;
    /* Blocks of 4 warps run two to a multiprocessor: streamed where only
     * that keeps two (D = 320 on the 99 KiB parts: 48 KiB streamed against
     * 64 resident, 191 against 119 TFLOP/s planned as sm_86 on the H100). */
    r.q_resident = 0;
    return !(p->warps == 4 && 2 * resident > lim->smem_per_sm && 2 * plan_smem_forward_gpu(&r, elt) <= lim->smem_per_sm);
}

/* Shared memory of p's tile with Q where the planner will keep it. */
static size_t fwd_smem(const ffpa_plan_input *in, const ffpa_device_limits *lim, const ffpa_plan *p)
{
    ffpa_plan r = *p;
    r.q_resident = fwd_q_resident(in, lim, p);
    return ffpa_plan_smem_bytes(&r, in->dtype, 0);
}

/* Whether two blocks of p's tile fit a multiprocessor at (at most) 2 stages. */
static int fwd_two_blocks_fit(const ffpa_plan_input *in, const ffpa_plan *p, const ffpa_device_limits *lim)
{
    ffpa_plan two = *p;
    if (two.stages > 2)
        two.stages = 2;
    return 2 * fwd_smem(in, lim, &two) <= lim->smem_per_sm;
}

/* Whether p's tile fits the block's shared memory at (at most) 2 stages,
 * the shallowest ring plan_gpu_forward shrinks to. */
static int fwd_fits_two_stages(const ffpa_plan_input *in, const ffpa_plan *p, const ffpa_device_limits *lim)
{
    ffpa_plan two = *p;
    if (two.stages > 2)
        two.stages = 2;
    return fwd_smem(in, lim, &two) <= lim->smem_per_block;
}

/* Whether Dqk's last chunk would be under a quarter full: MLA's Dqk = 576
 * on 512-column slabs spends a whole slab's wait and barrier on 64 columns,
 * all on one warp of the D split (174 TFLOP/s against 193 on 256-column
 * slabs, H100, docs/notes/forward.md). */
static int fwd_last_chunk_sparse(const ffpa_plan_input *in, const ffpa_plan *p)
{
    int64_t last = in->dqk - (int64_t)(p->n_qk_chunks - 1) * p->dqk_chunk;
    return p->n_qk_chunks > 1 && 4 * last < p->dqk_chunk;
}

static void plan_gpu_forward(const ffpa_plan_input *in, const ffpa_device_limits *lim, ffpa_plan *p)
{
    int i = 0;
    while (i < N_GPU_FWD_SHAPES - 1 && in->dv > gpu_fwd_shapes[i].dv)
        ++i;
    const gpu_fwd_shape *s = &gpu_fwd_shapes[i];
    int64_t dmax = in->dqk > in->dv ? in->dqk : in->dv;
    /* D <= 256: coarse FA-2 tiling (Q resident, whole-D slabs);
     * D > 256: fine-grained Split-D (K/V chunks streamed; Q resident where
     * it fits, fwd_q_resident, else streamed beside each K chunk). */
    p->path = dmax <= 256 ? FFPA_PATH_SMALL_D : FFPA_PATH_SPLIT_D;
    use_fwd_shape(in, s, p);
    /* Blocks of 4 warps are built to run two to a multiprocessor: where two
     * do not fit (two m-tiles per warp at D = 128 on the 100 KiB parts,
     * sm_86 / sm_89, and AMD's 64 KiB LDS) the SM would run 4 warps, so the
     * next tile of the same Dv runs instead (16 rows a warp in 8-warp
     * blocks), as FlashAttention-2 narrows its tiles on those parts. */
    while (p->warps == 4 && !fwd_two_blocks_fit(in, p, lim) && i + 1 < N_GPU_FWD_SHAPES &&
           gpu_fwd_shapes[i + 1].dv == s->dv)
        use_fwd_shape(in, &gpu_fwd_shapes[++i], p);
    /* A tile that does not fit the block even at 2 stages, or leaves Dqk's
     * last chunk nearly empty, gives way to the next of the same Dv (D = 512
     * and 1024: 512-column slabs on the H100, 256 on sm_80, then 128
     * columns or 32 keys on the 99 KiB parts). */
    while ((!fwd_fits_two_stages(in, p, lim) || fwd_last_chunk_sparse(in, p)) && i + 1 < N_GPU_FWD_SHAPES &&
           gpu_fwd_shapes[i + 1].dv == s->dv)
        use_fwd_shape(in, &gpu_fwd_shapes[++i], p);
    /* Few query rows cannot fill the machine: split the KV sequence too
     * (flash-decoding), about two blocks per multiprocessor. */
    int64_t q_blocks = ceil_div(in->nq, p->br);
    int64_t blocks = q_blocks * in->hq * in->batch;
    if (in->nq <= 16 && !in->varlen && blocks < lim->sm_count) {
        int64_t kv_blocks = ceil_div(in->nkv, p->bc);
        int64_t want = ceil_div(2 * (int64_t)lim->sm_count, blocks);
        int64_t splits = want < kv_blocks ? want : kv_blocks;
        if (splits > 1) {
            /* No empty split: every split owns ceil(kv_blocks / splits) tiles. */
            int64_t per = ceil_div(kv_blocks, splits);
            p->kv_splits = (int)ceil_div(kv_blocks, per);
            p->path = FFPA_PATH_DECODE;
        }
    }
    /* Shallower ring if the block's shared memory is too small (consumer parts). */
    while (p->stages > 2 && fwd_smem(in, lim, p) > lim->smem_per_block)
        --p->stages;
    /* Blocks of 4 warps are built to run two to a multiprocessor (their
     * launch bounds): where two fit at some depth, a deeper ring that
     * leaves room for one would halve the SM's warps. */
    if (p->warps == 4 && fwd_two_blocks_fit(in, p, lim))
        while (p->stages > 2 && 2 * fwd_smem(in, lim, p) > lim->smem_per_sm)
            --p->stages;
}

static void plan_gpu(const ffpa_plan_input *in, const ffpa_device_limits *lim, ffpa_plan *p)
{
    if (in->backward)
        plan_gpu_backward(in, lim, p);
    else
        plan_gpu_forward(in, lim, p);
}

void ffpa_plan_derive(const ffpa_plan_input *in, const ffpa_device_limits *lim, ffpa_plan *p)
{
    derive_chunks(in, p);
    p->q_resident = lim->is_gpu && !in->backward ? fwd_q_resident(in, lim, p) : 0;
    p->smem_bytes = lim->is_gpu ? ffpa_plan_smem_bytes(p, in->dtype, in->backward) : 0;
    p->q_blocks = ceil_div(in->nq, p->br);
    p->grid[0] = p->q_blocks * p->kv_splits;
    p->grid[1] = in->hq;
    p->grid[2] = in->batch;
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
    ffpa_plan_derive(in, lim, &p);
    if (lim->is_gpu && p.smem_bytes > lim->smem_per_block)
        return FFPA_ERR_UNSUPPORTED;
    /* Causal blocks near the bottom see the most keys: start them first so
     * the short ones fill the tail of the wave. */
    p.order = in->causal ? FFPA_ORDER_LONGEST_FIRST : FFPA_ORDER_LINEAR;
    ffpa_tuning_apply(in->tuning, in, lim, &p); /* no-op without a table */
    *plan = p;
    return FFPA_OK;
}

int ffpa_plan_fwd_tiles(int64_t dv, ffpa_fwd_tile *out, int max)
{
    int n = 0;
    for (int i = 0; i < N_GPU_FWD_SHAPES; ++i) {
        const gpu_fwd_shape *s = &gpu_fwd_shapes[i];
        /* A tile a smaller covering instantiation has already runs there. */
        if (s->dv < dv || shape_of_tile(16 * s->wm * s->mt, s->bc, s->chunk, s->wm * s->wn, dv) != s)
            continue;
        if (n < max)
            out[n] = (ffpa_fwd_tile){s->dv, 16 * s->wm * s->mt, s->bc, s->chunk, s->wm * s->wn};
        ++n;
    }
    return n;
}

int ffpa_plan_use_fwd_tile(const ffpa_plan_input *in, int br, int bc, int chunk, int warps, ffpa_plan *p)
{
    if (!shape_of_tile(br, bc, chunk, warps, in->dv))
        return 0;
    p->br = br;
    p->bc = bc;
    p->dqk_chunk = p->dv_chunk = chunk;
    p->warps = warps;
    derive_chunks(in, p);
    return 1;
}

/* The Dqk and Dv each sm_90a forward instantiation covers
 * (FFPA_SM90_FWD_SHAPES: slice x cluster columns of Q/K, slice_v x cluster
 * of V). */
int ffpa_plan_sm90_covers(int64_t dqk, int64_t dv, int cluster)
{
#define FFPA_FWD_COVER(slice, slice_v, c, label) {c, (slice) * (c), (slice_v) * (c)},
    static const struct {
        int cluster, max_dqk, max_dv;
    } cover[] = {FFPA_SM90_FWD_SHAPES(FFPA_FWD_COVER)};
#undef FFPA_FWD_COVER
    for (size_t i = 0; i < sizeof cover / sizeof cover[0]; ++i)
        if (cover[i].cluster == cluster && round_up(dqk, 64) <= cover[i].max_dqk &&
            round_up(dv, 64) <= cover[i].max_dv)
            return 1;
    return 0;
}

/* The sm_90a backward widths (boxes x cluster), as instantiated in
 * backends/cuda/sm90/sm90_bwd_inst_*.cu (FFPA_SM90_BWD_WIDTHS). */
int ffpa_plan_sm90_bwd_covers(int64_t dqk, int64_t dv, int boxes, int cluster)
{
#define FFPA_BWD_WIDTH(b, c, label, f32_dq_only) {b, c},
    static const struct {
        int boxes, cluster;
    } widths[] = {FFPA_SM90_BWD_WIDTHS(FFPA_BWD_WIDTH)};
#undef FFPA_BWD_WIDTH
    int64_t d = dqk > dv ? dqk : dv;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; ++i)
        if (widths[i].boxes == boxes && widths[i].cluster == cluster)
            return d <= 64 * (int64_t)boxes * cluster;
    return 0;
}

ffpa_plan_input ffpa_plan_input_of(const ffpa_problem *pb, int backward)
{
    ffpa_plan_input in;
    memset(&in, 0, sizeof in);
    in.dtype = pb->dtype;
    in.batch = pb->batch;
    in.hq = pb->hq;
    in.hkv = pb->hkv;
    in.nq = pb->nq > 0 ? pb->nq : 1;
    in.nkv = pb->nkv > 0 ? pb->nkv : 1;
    in.dqk = pb->dqk;
    in.dv = pb->dv;
    in.causal = pb->causal;
    in.has_bias = pb->has_bias;
    in.has_dropout = pb->dropout_p > 0.0f;
    in.varlen = pb->cu_q != NULL;
    in.backward = backward;
    in.stream_q = !ffpa_env_bool("FFPA_GENERIC_Q_RESIDENT", 1, NULL);
    in.tuning = pb->tuning;
    return in;
}

/* ------------------------------------------------------------ portable kernels */

/* Local memory of the portable kernels (kernels/fwd.cl, bwd.cl), fp32:
 * forward Q chunk, K chunk (padded), V chunk, scores and P; the backward's
 * two kernels a Q/dO chunk, a K/V chunk and two score tiles. */
static size_t portable_local_bytes(int br, int bc, int dc)
{
    const size_t fwd = (size_t)br * dc + (size_t)bc * (dc + 1) + (size_t)bc * dc + 2 * (size_t)br * (bc + 1);
    const size_t bwd = (size_t)br * dc + (size_t)bc * (dc + 1) + 2 * (size_t)br * (bc + 1);
    return sizeof(float) * (fwd > bwd ? fwd : bwd);
}

ffpa_status ffpa_plan_portable(const ffpa_device_limits *lim, ffpa_portable_tiles *out)
{
    /* Each set keeps the kernels' rules: wg / br work-items per row dividing
     * bc and dc, wg / bc update parts dividing dc (bwd.cl), and the forward's
     * dropped P (br x (bc + 1)) fitting in the K chunk's memory. */
    static const int sets[][4] = {{128, 16, 32, 32}, {128, 16, 32, 16}, {64, 8, 16, 16}, {32, 4, 8, 8}};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; ++i) {
        ffpa_portable_tiles t = {sets[i][0], sets[i][1], sets[i][2], sets[i][3], 0, 0};
        t.local_bytes = portable_local_bytes(t.br, t.bc, t.dc);
        if ((size_t)t.wg <= (size_t)lim->max_threads_per_block && t.local_bytes <= lim->smem_per_block) {
            *out = t;
            return FFPA_OK;
        }
        *out = t; /* on failure: the smallest set, whose needs the caller reports */
    }
    return FFPA_ERR_UNSUPPORTED;
}

ffpa_status ffpa_plan_portable_tiled(const ffpa_device_limits *lim, int64_t dv, int64_t rows,
                                     ffpa_portable_tiles *out)
{
    /* Dqk columns a chunk: 64 on GPUs (half the chunks' barriers and copy
     * rounds; H200: D = 128 +15%, 1024 +10%, 512 0), 32 on CPUs (pocl
     * compiles the unrolled chunk loop once per program: CI's time). */
    const int tr = dv <= 512 && rows > 16 ? 4 : 2, wg = 128, groups = 16, bc = 4 * groups, dcv = 4 * groups;
    const int dc = lim->is_gpu ? 64 : 32;
    ffpa_portable_tiles t = {wg, (wg / groups) * tr, bc, dc, 0, tr};
    /* The Q chunk and the K chunk (dc / 4 planes of bc + 1 four-float rows)
     * share their memory with the V chunk (another phase, barriers between),
     * then P^T (row pitch br + 4) and one float per (row, column group). */
    const size_t qk = (size_t)t.br * dc + (size_t)dc / 4 * (bc + 1) * 4, v = (size_t)bc * dcv;
    t.local_bytes = sizeof(float) * ((qk > v ? qk : v) + (size_t)bc * (t.br + 4) + (size_t)t.br * groups);
    *out = t; /* either way: on failure, what the device lacks */
    return (size_t)wg > (size_t)lim->max_threads_per_block || t.local_bytes > lim->smem_per_block
               ? FFPA_ERR_UNSUPPORTED
               : FFPA_OK;
}

int ffpa_plan_static_kv_splits(const ffpa_device_limits *lim, int64_t work_groups, int64_t key_tiles, int forced)
{
    if (forced > 0)
        return forced < FFPA_MERGE_MAX_PARTS ? forced : FFPA_MERGE_MAX_PARTS;
    if (work_groups <= 0)
        return 1;
    const int64_t units = lim->sm_count > 0 ? lim->sm_count : 1;
    int64_t splits = (2 * units + work_groups - 1) / work_groups;
    const int64_t by_length = key_tiles / FFPA_KV_MIN_TILES_PER_SPLIT;
    if (splits > by_length)
        splits = by_length;
    if (splits > FFPA_MERGE_MAX_PARTS)
        splits = FFPA_MERGE_MAX_PARTS;
    return splits < 1 ? 1 : (int)splits;
}

/* Waves x key tiles a work-group of a call of `work_groups` (split where
 * splittable); *launched the work-groups with their splits. */
static int64_t grid_time(const ffpa_device_limits *lim, int64_t work_groups, int64_t key_tiles, int splittable,
                         int64_t *launched)
{
    const int64_t units = lim->sm_count > 0 ? lim->sm_count : 1;
    const int64_t splits = splittable ? ffpa_plan_static_kv_splits(lim, work_groups, key_tiles, 0) : 1;
    *launched = work_groups * splits;
    return (*launched + units - 1) / units * ((key_tiles + splits - 1) / splits);
}

int ffpa_plan_packed_heads(const ffpa_device_limits *lim, int64_t batch, int64_t hq, int64_t hkv, int64_t nq,
                           int br_packed, int br_unpacked, int64_t key_tiles, int splittable)
{
    if (hkv <= 0 || hq <= hkv || nq > 16 || nq <= 0 || batch <= 0 || br_packed <= 0 || br_unpacked <= 0)
        return 1;
    const int64_t group = hq / hkv, tiles = key_tiles > 0 ? key_tiles : 1;
    int64_t packed_groups, unpacked_groups;
    const int64_t packed = grid_time(lim, batch * hkv * ((nq * group + br_packed - 1) / br_packed), tiles,
                                     splittable, &packed_groups);
    const int64_t unpacked = grid_time(lim, batch * hq * ((nq + br_unpacked - 1) / br_unpacked), tiles, splittable,
                                       &unpacked_groups);
    const int pays = packed < unpacked || (packed == unpacked && packed_groups >= lim->sm_count);
    return pays ? (int)group : 1;
}

ffpa_status ffpa_plan_matrix_forward(const ffpa_device_limits *lim, int64_t dv, int wm, int wn,
                                     ffpa_matrix_tiles *out)
{
    ffpa_matrix_tiles t;
    memset(&t, 0, sizeof t);
    if ((wm || wn) && ((wm != 1 && wm != 2 && wm != 4 && wm != 8) || (wn != 1 && wn != 2 && wn != 4))) {
        *out = t;
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    t.wn = wn ? wn : dv <= 256 ? 1 : dv <= 512 ? 2 : 4;
    t.wm = wm ? wm : t.wn == 4 ? 2 : 4;
    t.br = 16 * t.wm;
    t.bc = 64;
    /* A ring slot holds a Q and a K chunk, or every warp column's V chunk:
     * 32 columns where 64 would not leave two slots and P in 48 KiB. */
    t.dc = t.wm == 8 ? 32 : 64;
    t.vc = t.wn == 4 || t.wm == 8 ? 32 : 64;
    const int64_t per_warp = (dv + t.wn - 1) / t.wn;
    t.oc = (int)((per_warp + t.vc - 1) / t.vc * t.vc);
    t.dvb = t.oc * t.wn;
    const size_t qk = (size_t)(t.br + t.bc) * t.dc, v = (size_t)t.bc * t.vc * t.wn;
    t.slot_bytes = 2 * (qk > v ? qk : v);
    t.p_bytes = t.wn > 1 ? 2 * (size_t)t.br * t.bc : 0;
    /* two slots, P, one float per (row, warp column) for the row max and sum */
    t.local_bytes = 2 * t.slot_bytes + t.p_bytes + sizeof(float) * (size_t)t.br * t.wn;
    *out = t;
    return (size_t)(32 * t.wm * t.wn) > (size_t)lim->max_threads_per_block || t.local_bytes > lim->smem_per_block
               ? FFPA_ERR_UNSUPPORTED
               : FFPA_OK;
}

int ffpa_plan_matrix_few_rows(const ffpa_device_limits *lim, int64_t rows, int64_t work_groups, int64_t key_tiles,
                              int splittable, int rule_wn, int *wm, int *wn)
{
    if (rows <= 0 || rows > 16 || work_groups <= 0)
        return 0;
    int64_t launched; /* the work-groups with the KV split's, as grid_time counts them */
    grid_time(lim, work_groups, key_tiles, splittable, &launched);
    if (launched < 2 * (lim->sm_count > 0 ? lim->sm_count : 1))
        return 0;
    *wm = 1;
    *wn = rule_wn > 2 ? rule_wn : 2;
    return 1;
}

int ffpa_limits_as_arch(ffpa_device_limits *lim, int arch)
{
    static const struct {
        int arch;
        size_t per_block, per_sm;
    } parts[] = {{80, 166912, 167936}, {86, 101376, 102400}, {89, 101376, 102400}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; ++i) {
        if (parts[i].arch != arch)
            continue;
        if (!lim || arch > lim->arch || parts[i].per_block > lim->smem_per_block ||
            parts[i].per_sm > lim->smem_per_sm)
            return 0;
        lim->arch = arch;
        lim->smem_per_block = parts[i].per_block;
        lim->smem_per_sm = parts[i].per_sm;
        return 1;
    }
    return 0;
}
