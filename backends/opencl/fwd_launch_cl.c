/*
 * Host side of the OpenCL forward: the kernel parameters of a problem
 * (kernels/cl_params.h), its buffers resolved from the API's pointers
 * (cl_memory.h), the varlen offsets uploaded to the workspace, the program
 * for the dtype and Dv (cl_program.h), the launch.
 */
#include "cl_launch.h"

#include <stdio.h>
#include <string.h>

#include "cl_program.h"
#include "dtype.h"
#include "env.h"

extern const char ffpa_cl_fwd_source[];
extern const char ffpa_cl_fwd_tiled_source[];
extern const char ffpa_cl_fwd_mma_source[];


size_t ffpa_cl_forward_workspace(const ffpa_gpu_state *state, const ffpa_problem *pb)
{
    (void)state;
    return pb->cu_q ? 2 * (size_t)(pb->batch + 1) * sizeof(int32_t) : 0;
}

/* Testing knob (not API): FFPA_OPENCL_MMA_EMULATE=1 runs the matrix forward
 * on any device with its matrix layer in portable OpenCL C
 * (kernels/cl_mma_emu.h), chosen wherever the inputs allow it as on NVIDIA,
 * so that CI checks the kernel's logic on pocl. Returns 1 when set to 1, 0
 * when unset, -1 for any other value (refused by ffpa_cl_forward_kernel). */
static int mma_emulated(void)
{
    const char *knob = ffpa_env_string("FFPA_OPENCL_MMA_EMULATE");
    return !knob ? 0 : strcmp(knob, "1") == 0 ? 1 : strcmp(knob, "0") == 0 ? 0 : -1;
}

/* Whether every row of q, k and v (dense, or a paged cache's pool: its
 * page stride is k_sb) starts on an n-element boundary: offsets and
 * strides, head-dim strides aside, in multiples of n. */
static int rows_aligned(const ffpa_cl_fwd_params *p, int64_t n)
{
    const int64_t at[] = {p->q_off, p->q_sb, p->q_sh, p->q_sn, p->k_off, p->k_sb,
                          p->k_sh,  p->k_sn, p->v_off, p->v_sb, p->v_sh, p->v_sn};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; ++i)
        if (at[i] % n)
            return 0;
    return 1;
}

/* The forward program for pb's dtype and Dv: GPUs get O's registers sized to
 * Dv and the Dv loop unrolled; CPUs one program per dtype (kernels/fwd.cl
 * says why; the tiled kernel's O holds 512 or 1024 columns there). */
ffpa_status ffpa_cl_forward_program(const ffpa_cl_device *dev, const ffpa_problem *pb, const ffpa_cl_inputs_t *in,
                                    cl_program *program, char *err, size_t err_len)
{
    char tiles[64], options[160];
    const char *unroll = dev->is_gpu ? " -DFFPA_CL_UNROLL" : "";
    const ffpa_portable_tiles *t = &in->tiles;
    if (in->matrix) {
        const ffpa_matrix_tiles *m = &in->mt;
        snprintf(options, sizeof options, "-DDT=%d -DWM=%d -DWN=%d -DDC=%d -DVC=%d -DOC=%d%s%s%s", (int)pb->dtype,
                 m->wm, m->wn, m->dc, m->vc, m->oc, unroll, in->tiles_in_pages ? " -DFFPA_CL_TILES_IN_PAGES" : "",
                 mma_emulated() == 1 ? " -DFFPA_CL_MMA_EMULATED" : "");
        return ffpa_cl_program(dev, ffpa_cl_fwd_mma_source, options, program, err, err_len);
    }
    if (t->tr) {
        const int dvb = dev->is_gpu ? (int)((pb->dv + 63) / 64 * 64) : pb->dv <= 512 ? 512 : FFPA_MAX_HEAD_DIM;
        /* Rows on 4-element boundaries: the tiled kernel's 4-column copies
         * (columns d0 + 4 c) are one vector load each (cl_score.h). GPUs
         * only: a CPU loads unaligned vectors as fast, and each program
         * variant costs pocl ~15 s to compile (CI's time). */
        snprintf(options, sizeof options, "-DTR=%d -DDC=%d -DDT=%d -DDVB=%d%s%s", t->tr, t->dc, (int)pb->dtype, dvb,
                 unroll,
                 dev->is_gpu && rows_aligned(&in->p, 4) ? " -DFFPA_CL_ALIGNED_QUADS" : "");
        return ffpa_cl_program(dev, ffpa_cl_fwd_tiled_source, options, program, err, err_len);
    }
    ffpa_cl_tile_options(t, tiles, sizeof tiles);
    const int dvb = dev->is_gpu ? (int)((pb->dv + t->dc - 1) / t->dc * t->dc) : FFPA_MAX_HEAD_DIM;
    snprintf(options, sizeof options, "%s -DDT=%d -DDVB=%d%s", tiles, (int)pb->dtype, dvb, unroll);
    return ffpa_cl_program(dev, ffpa_cl_fwd_source, options, program, err, err_len);
}

const char *ffpa_cl_forward_name(const ffpa_cl_inputs_t *in, int paged)
{
    static const char *const names[3][4] = {
        {"opencl mma.sync", "opencl mma.sync (paged KV cache)", "opencl mma.sync (packed heads)",
         "opencl mma.sync (paged KV cache, packed heads)"},
        {"opencl tiled", "opencl tiled (paged KV cache)", "opencl tiled (packed heads)",
         "opencl tiled (paged KV cache, packed heads)"},
        {"opencl portable", "opencl portable (paged KV cache)", "opencl portable (packed heads)",
         "opencl portable (paged KV cache, packed heads)"}};
    const int kernel = in->matrix ? 0 : in->tiles.tr ? 1 : 2;
    return names[kernel][(paged ? 1 : 0) + (in->p.pack > 1 ? 2 : 0)];
}

ffpa_status ffpa_cl_forward_launch(cl_command_queue queue, cl_program program, const ffpa_problem *pb,
                                   const ffpa_cl_inputs_t *in, const ffpa_cl_kv_params *kv, cl_mem block_table,
                                   cl_mem seqlens, char *err, size_t err_len)
{
    const ffpa_cl_arg args[] = {{sizeof in->p, &in->p},     {sizeof(cl_mem), &in->q},     {sizeof(cl_mem), &in->k},
                                {sizeof(cl_mem), &in->v},     {sizeof(cl_mem), &in->o},     {sizeof(cl_mem), &in->lse},
                                {sizeof(cl_mem), &in->bias},  {sizeof(cl_mem), &in->alibi}, {sizeof(cl_mem), &in->cu},
                                {sizeof *kv, kv},             {sizeof(cl_mem), &block_table},
                                {sizeof(cl_mem), &seqlens}};
    const size_t wg = in->matrix ? (size_t)(32 * in->mt.wm * in->mt.wn) : (size_t)in->tiles.wg;
    /* A work-group per query block of each (sequence, query head), or of each KV head with packed heads. */
    const size_t global =
        (size_t)in->p.splits * (size_t)in->p.q_blocks * (size_t)(pb->hq / in->p.pack) * (size_t)pb->batch * wg;
    const char *name = in->matrix ? "ffpa_fwd_mma" : in->tiles.tr ? "ffpa_fwd_tiled" : "ffpa_fwd";
    return ffpa_cl_launch(queue, program, name, args, 12, global, wg, err, err_len);
}

/* Why the matrix forward (kernels/fwd_mma.cl) cannot run pb on dev, or
 * NULL: its copies move 16-byte pieces of 16-bit rows (cp.async), so every
 * Q, K and V row starts on a 16-byte boundary and Dqk, Dv come in whole
 * pieces. */
static const char *matrix_refusal(const ffpa_cl_device *dev, const ffpa_problem *pb, const ffpa_cl_fwd_params *p)
{
    if (dev->nv_cc < 80 && mma_emulated() != 1)
        return "it needs an NVIDIA device of compute capability 8.0 or later (mma.sync through inline PTX)";
    if (pb->dtype != FFPA_F16 && pb->dtype != FFPA_BF16)
        return "it takes f16 or bf16 inputs";
    if (pb->dqk % 8 || pb->dv % 8)
        return "it needs Dqk and Dv multiples of 8";
    if (p->q_sd != 1 || p->k_sd != 1 || p->v_sd != 1)
        return "it needs unit head-dim strides on q, k and v";
    if (!rows_aligned(p, 8))
        return "it needs q, k and v offsets and strides in multiples of 8 elements (16-byte rows)";
    return NULL;
}

/* Tuning knob (not API): FFPA_OPENCL_MMA_TILES=WMxWN sets the matrix
 * forward's warps (rows x columns of the work-group) instead of the plan's
 * rule, for A/B runs in one build (docs/notes/opencl.md); 0, 0 when unset.
 * 1 for a value that is not two positive counts (the planner judges the
 * counts themselves). */
static int matrix_warps(int *wm, int *wn)
{
    const char *knob = ffpa_env_string("FFPA_OPENCL_MMA_TILES");
    char tail;
    *wm = *wn = 0;
    return knob && !(sscanf(knob, "%dx%d%c", wm, wn, &tail) == 2 && *wm > 0 && *wn > 0);
}

/* Tuning knob (not API): FFPA_OPENCL_PACKED_HEADS=0 runs every call unpacked,
 * 1 packs every call ffpa_plan_packed_heads would consider (A/B runs in one
 * build); unset: the planner's choice. Returns -1 when unset, -2 for any
 * other value (refused by ffpa_cl_forward_kernel). */
static int packed_heads_knob(void)
{
    const char *knob = ffpa_env_string("FFPA_OPENCL_PACKED_HEADS");
    return !knob ? -1 : strcmp(knob, "0") == 0 ? 0 : strcmp(knob, "1") == 0 ? 1 : -2;
}

/* The forward's tuning knobs other than the kernel and its warps: a value
 * they do not take is refused before anything runs, as a typo in an A/B run
 * would otherwise time the default silently. */
static ffpa_status check_knobs(char *err, size_t err_len)
{
    if (mma_emulated() == -1) {
        snprintf(err, err_len, "FFPA_OPENCL_MMA_EMULATE=%s: expected 0 or 1", ffpa_env_string("FFPA_OPENCL_MMA_EMULATE"));
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    if (packed_heads_knob() == -2) {
        snprintf(err, err_len, "FFPA_OPENCL_PACKED_HEADS=%s: expected 0 or 1",
                 ffpa_env_string("FFPA_OPENCL_PACKED_HEADS"));
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    int bad = 0;
    ffpa_env_long("FFPA_OPENCL_KV_SPLITS", 0, 1, FFPA_MERGE_MAX_PARTS, &bad);
    if (bad) {
        snprintf(err, err_len, "FFPA_OPENCL_KV_SPLITS=%s: expected a split count, 1 to %d",
                 ffpa_env_string("FFPA_OPENCL_KV_SPLITS"), FFPA_MERGE_MAX_PARTS);
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    return FFPA_OK;
}

/* Query heads per work-group (kernels/cl_kv.h, packed heads) for a kernel
 * of br rows a work-group: the planner's choice (common/plan.c
 * ffpa_plan_packed_heads), or the knob's. */
static int packed_heads(const ffpa_gpu_state *st, const ffpa_problem *pb, int br_packed, int br_unpacked)
{
    const int knob = packed_heads_knob();
    if (knob == 0)
        return 1;
    if (knob == 1) {
        const ffpa_device_limits one_wave = {.sm_count = 1};
        return ffpa_plan_packed_heads(&one_wave, pb->batch, pb->hq, pb->hkv, pb->nq, 1, 1, 1, 0);
    }
    /* The KV cache splits its key tiles (kv_launch_cl.c); 64-key tiles for the estimate. */
    return ffpa_plan_packed_heads(&st->caps.limits, pb->batch, pb->hq, pb->hkv, pb->nq, br_packed, br_unpacked,
                                  (pb->nkv + 63) / 64, pb->kv != NULL);
}

/* The matrix forward's warps for decode with GQA / MQA / MLA (a KV head's
 * packed rows fit one 16-row block): ffpa_plan_matrix_few_rows's, or 0, 0
 * for the rule. */
static void few_rows_warps(const ffpa_gpu_state *st, const ffpa_problem *pb, int *wm, int *wn)
{
    const int64_t group = ffpa_query_group(pb);
    ffpa_matrix_tiles rule;
    if (group < 2 || ffpa_plan_matrix_forward(&st->caps.limits, pb->dv, 0, 0, &rule) != FFPA_OK ||
        !ffpa_plan_matrix_few_rows(&st->caps.limits, pb->nq * group, pb->batch * pb->hkv, (pb->nkv + 63) / 64,
                                   pb->kv != NULL, rule.wn, wm, wn))
        *wm = *wn = 0;
}

/* The launch's rows: pack query heads per block of br rows. */
static void set_rows(ffpa_cl_inputs_t *in, const ffpa_problem *pb, int pack, int br)
{
    in->p.pack = pack;
    in->p.q_blocks = (int)((pb->nq * pack + br - 1) / br);
}

ffpa_status ffpa_cl_forward_kernel(const ffpa_gpu_state *st, const ffpa_cl_device *dev, const ffpa_problem *pb,
                                   ffpa_cl_inputs_t *in, char *err, size_t err_len)
{
    const char *want = ffpa_env_string("FFPA_OPENCL_FORWARD");
    if (want && strcmp(want, "mma") != 0 && strcmp(want, "tiled") != 0 && strcmp(want, "portable") != 0) {
        snprintf(err, err_len, "FFPA_OPENCL_FORWARD=%s: expected mma, tiled or portable", want);
        return FFPA_ERR_INVALID_ARGUMENT;
    }
    const ffpa_status knobs = check_knobs(err, err_len);
    if (knobs != FFPA_OK)
        return knobs;
    in->matrix = 0;
    const ffpa_device_limits *lim = &st->caps.limits;
    /* The portable kernel packed or not: the same kernel either way. */
    const int portable_pack = packed_heads(st, pb, in->tiles.br, in->tiles.br);
    if (want ? strcmp(want, "portable") == 0 : !dev->is_gpu && mma_emulated() != 1) {
        set_rows(in, pb, portable_pack, in->tiles.br);
        return FFPA_OK;
    }
    if (!want || strcmp(want, "mma") == 0) {
        int wm, wn;
        const int malformed = matrix_warps(&wm, &wn);
        if (!malformed && !wm && !wn)
            few_rows_warps(st, pb, &wm, &wn);
        const ffpa_status planned = ffpa_plan_matrix_forward(lim, pb->dv, wm, wn, &in->mt);
        if (malformed || planned == FFPA_ERR_INVALID_ARGUMENT) {
            snprintf(err, err_len, "FFPA_OPENCL_MMA_TILES=%s: expected WMxWN warps, WM 1, 2, 4 or 8 and WN 1, 2 or 4",
                     ffpa_env_string("FFPA_OPENCL_MMA_TILES"));
            return FFPA_ERR_INVALID_ARGUMENT;
        }
        const char *why = matrix_refusal(dev, pb, &in->p);
        if (!why && planned != FFPA_OK)
            why = "its local memory or work-group does not fit the device";
        if (!why) {
            in->matrix = 1;
            set_rows(in, pb, packed_heads(st, pb, in->mt.br, in->mt.br), in->mt.br);
            return FFPA_OK;
        }
        if (want) {
            snprintf(err, err_len, "FFPA_OPENCL_FORWARD=mma: the matrix forward cannot run this call on %s: %s",
                     dev->name, why);
            return FFPA_ERR_UNSUPPORTED;
        }
    }
    ffpa_portable_tiles tiled;
    if (ffpa_plan_portable_tiled(lim, pb->dv, pb->nq, &tiled) != FFPA_OK) {
        if (!want) { /* the device's local memory is too small for it: fwd.cl */
            set_rows(in, pb, portable_pack, in->tiles.br);
            return FFPA_OK;
        }
        snprintf(err, err_len,
                 "FFPA_OPENCL_FORWARD=tiled: the tiled forward needs %zu bytes of local memory and %d work-items "
                 "per work-group; the device offers %zu and %d",
                 tiled.local_bytes, tiled.wg, lim->smem_per_block, lim->max_threads_per_block);
        return FFPA_ERR_UNSUPPORTED;
    }
    /* The same kernel on the packed rows (nq x the group), where it fits. */
    const int64_t group = ffpa_query_group(pb);
    ffpa_portable_tiles packed;
    const int packed_fits = ffpa_plan_portable_tiled(lim, pb->dv, pb->nq * group, &packed) == FFPA_OK;
    const int pack = packed_fits ? packed_heads(st, pb, packed.br, tiled.br) : 1;
    in->tiles = pack > 1 ? packed : tiled;
    set_rows(in, pb, pack, in->tiles.br);
    return FFPA_OK;
}

ffpa_status ffpa_cl_forward_begin(const ffpa_gpu_state *st, const ffpa_problem *pb, const ffpa_cl_device **dev,
                                  cl_command_queue *queue, ffpa_cl_inputs_t *in, char *err, size_t err_len)
{
    memset(in, 0, sizeof *in);
    if (!(*dev = ffpa_cl_device_get(err, err_len)))
        return FFPA_ERR_DEVICE;
    *queue = ffpa_cl_queue(st->stream);
    ffpa_status s = ffpa_cl_tiles(st, &in->tiles, err, err_len);
    if (s != FFPA_OK)
        return s;
    in->p = ffpa_cl_params_of(pb, in->tiles.br);
    return ffpa_cl_inputs(pb, in, err, err_len);
}

ffpa_status ffpa_cl_forward(ffpa_gpu_state *st, const ffpa_problem *pb, void *ws, size_t ws_bytes, char *err,
                            size_t err_len)
{
    if (pb->batch == 0 || pb->hq == 0 || pb->nq == 0 || pb->dv == 0)
        return FFPA_OK;
    const ffpa_cl_device *dev;
    cl_command_queue queue;
    ffpa_cl_inputs_t in;
    ffpa_status s = ffpa_cl_forward_begin(st, pb, &dev, &queue, &in, err, err_len);
    if (s == FFPA_OK && pb->cu_q && ws_bytes < ffpa_cl_forward_workspace(st, pb)) {
        snprintf(err, err_len, "opencl: forward workspace missing or too small");
        s = FFPA_ERR_INTERNAL;
    }
    if (s == FFPA_OK)
        s = ffpa_cl_upload_offsets(queue, pb, ws, &in, err, err_len); /* [cu_q | cu_k] at the workspace's start */
    if (s == FFPA_OK)
        s = ffpa_cl_forward_kernel(st, dev, pb, &in, err, err_len);
    cl_program program;
    if (s == FFPA_OK)
        s = ffpa_cl_forward_program(dev, pb, &in, &program, err, err_len);
    ffpa_cl_kv_params no_cache;
    memset(&no_cache, 0, sizeof no_cache);
    if (s == FFPA_OK)
        s = ffpa_cl_forward_launch(queue, program, pb, &in, &no_cache, NULL, NULL, err, err_len);
    if (s == FFPA_OK)
        st->last_kernel = ffpa_cl_forward_name(&in, 0);
    return s;
}
