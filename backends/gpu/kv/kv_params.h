/*
 * Parameters of the KV-cache kernels (schedule, append, attention, merge),
 * shared by the host layer (kv_host.h) and the device code of every GPU
 * backend. Plain C. Strides are in elements, pointers are device pointers.
 */
#ifndef FFPA_GPU_KV_PARAMS_H
#define FFPA_GPU_KV_PARAMS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ffpa_gpu_kv_params {
    const void *q;
    void *o;                        /* [B, Hq, Nq, Dv] */
    float *lse;                     /* [B, Hq, Nq] or NULL */
    int64_t q_sb, q_sh, q_sn;
    int64_t o_sb, o_sh, o_sn;
    int64_t lse_sb, lse_sh, lse_sn;

    /* Page pools: page, head, row strides (dense cache: page = sequence). */
    const void *k, *v;
    int64_t k_sp, k_sh, k_sn;
    int64_t v_sp, v_sh, v_sn;
    const int32_t *block_table;     /* NULL: page b is sequence b */
    int64_t bt_stride;
    int max_pages, num_pages, page_size;
    const int32_t *seqlens;         /* NULL: every sequence uniform_len keys */
    int64_t uniform_len;
    int added;                      /* keys appended by the call (Nq or 0) */
    int capacity;                   /* keys a sequence can hold */

    /* Append: k_new [B, Hkv, Nq, Dqk], v_new [B, Hkv, Nq, Dv] (v_new NULL: V lives in K). */
    const void *k_new, *v_new;
    int64_t kn_sb, kn_sh, kn_sn;
    int64_t vn_sb, vn_sh, vn_sn;

    int batch, hq, hkv, group, nq, dqk, dv;
    float scale_log2;               /* softmax scale * log2(e) */
    int causal;
    /* Variants, as in fwd_params.h: window bounds (-1 unbounded; window 0:
     * none), softcap in the base-2 domain (0: none), ALiBi slopes of
     * (sequence, query head) at b * alibi_sb + h * alibi_sh (NULL: none). */
    int window, window_left, window_right;
    float softcap_in, softcap_out;
    const float *alibi;
    int64_t alibi_sb, alibi_sh;

    /* Packed rows: the nq x group query rows of a (sequence, kv head), row
     * r = token * group + head within the group, cut into q_tiles tiles. */
    int rows, q_tiles;
    int bc;                         /* keys per key tile */
    int qk_chunks, v_chunks, stages;
    int64_t target_blocks;

    /* Schedule in the workspace (kv_sched.h), written by the schedule kernel. */
    int32_t *sched_first;           /* [B + 1] first block of each rank */
    int32_t *sched_seq;             /* [B] sequence at each rank */
    int32_t *sched_rank;            /* [B] rank of each sequence */
    int32_t *sched_tps;             /* [1] key tiles per split */
    int64_t *sched_len;             /* [B] scratch: keys of each sequence */

    /* Split partials, per block: [block][row of tile][dv] and [block][row]. */
    float *part_o, *part_lse;
    int tile_rows;                  /* rows of a tile (the kernel's Br) */
} ffpa_gpu_kv_params;

#ifdef __cplusplus
}
#endif

#endif
