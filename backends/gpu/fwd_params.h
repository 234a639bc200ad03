/*
 * Parameters of the forward kernels, shared by the host launcher and the
 * device code of every GPU backend (plain C, no vendor types).
 *
 * Strides are in elements. Pointers are device pointers. For varlen
 * problems cu_q / cu_k point to device copies of the offsets, sb is 0 and
 * sequence b owns packed rows cu[b] .. cu[b+1]-1.
 */
#ifndef FFPA_GPU_FWD_PARAMS_H
#define FFPA_GPU_FWD_PARAMS_H

#include <stdint.h>

#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ffpa_gpu_fwd_params {
    const void *q, *k, *v;
    void *o;                       /* [B, Hq, Nq, Dv], dtype of q */
    float *lse;                    /* [B, Hq, Nq] float32, or NULL */
    int64_t q_sb, q_sh, q_sn;
    int64_t k_sb, k_sh, k_sn;
    int64_t v_sb, v_sh, v_sn;
    int64_t o_sb, o_sh, o_sn;
    int64_t lse_sb, lse_sh, lse_sn;

    int batch, hq, hkv, group;     /* group = hq / hkv */
    int nq, nkv;                   /* dense lengths, or longest sequences (varlen) */
    int dqk, dv;                   /* real head dims (multiples of 8) */
    const int32_t *cu_q, *cu_k;    /* device offsets, or NULL */

    float scale_log2;              /* softmax scale * log2(e) */
    int causal;                    /* bottom-right aligned */

    const void *bias;              /* NULL: none */
    int bias_dtype;                /* ffpa_dtype */
    int64_t bias_sb, bias_sh, bias_sn, bias_sd;

    /* Variants (docs/notes/variants.md), off at 0 / NULL. Window: row i sees
     * keys j with i + diag - window_left <= j <= i + diag + window_right
     * (diag = seqlen_k - seqlen_q; a bound < 0: unbounded; both < 0 with
     * window = 0 when off). Softcap: s_log2 -> softcap_out * tanh(s_log2 *
     * softcap_in) with softcap_in = 1 / (log2(e) * softcap), softcap_out =
     * log2(e) * softcap (0: none). ALiBi: -alibi_log2 * slope * |i + diag - j|
     * with fp32 slopes at b * alibi_sb + h * alibi_sh. */
    int window;
    int window_left, window_right;
    float softcap_in, softcap_out;
    const float *alibi;
    int64_t alibi_sb, alibi_sh;

    int has_dropout;
    uint32_t dropout_threshold;
    float dropout_scale;
    uint64_t dropout_seed, dropout_offset;

    /* Schedule (from the planner). */
    int q_blocks;                  /* ceil(nq / br) */
    int kv_splits;                 /* > 1: partial results go to part_o / part_lse */
    int longest_first;             /* causal: last query block first */
    int q_resident;                /* 1: whole Q tile loaded once; 0: streamed per chunk */
    int stages;                    /* cp.async ring depth (2..4) */
    int qk_chunks;                 /* ceil(dqk / chunk): K slabs per key tile */
    int v_chunks;                  /* ceil(dv / chunk): V slabs per key tile */
    int kv_tiles_per_split;        /* key tiles each split owns */

    /* Split-KV partials: [split][b][h][row][dv] and [split][b][h][row]. */
    float *part_o;
    float *part_lse;

    /* Generic forward: no softcap, bias, ALiBi or dropout and scale_log2 > 0,
     * so masks only and the scale folded into the exp2's FFMA. Last, so the
     * other fields keep the offsets the Hopper kernels were tuned with. */
    int plain;
} ffpa_gpu_fwd_params;

/* The variant fields of p from pb. Shared by the forward's and the backward's
 * parameter fills of every GPU backend. */
static inline void ffpa_gpu_fill_variants(ffpa_gpu_fwd_params *p, const struct ffpa_problem *pb)
{
    p->window = pb->window;
    p->window_left = ffpa_window_bound32(pb, pb->window_left);
    p->window_right = ffpa_window_bound32(pb, pb->window_right);
    ffpa_softcap_log2(pb, &p->softcap_in, &p->softcap_out);
    p->alibi = pb->alibi;
    p->alibi_sb = pb->alibi_sb;
    p->alibi_sh = pb->alibi_sh;
}

/* No bias, dropout, softcap or ALiBi in p: what every backend's plain
 * forward kernels leave out (the generic one also wants scale_log2 > 0,
 * the Hopper twins do not), so the kernels' choice lives in one place. */
static inline int ffpa_gpu_fwd_no_variants(const ffpa_gpu_fwd_params *p)
{
    return !p->bias && !p->has_dropout && p->softcap_out <= 0.0f && !p->alibi;
}

#ifdef __cplusplus
}
#endif

#endif
