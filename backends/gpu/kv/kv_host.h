/*
 * Host side of attention over a paged KV cache, written once for the CUDA
 * and HIP launchers: what the kernels support, the instantiation and ring
 * depth for a problem, the workspace (schedule + split partials, sized from
 * shapes alone so a CUDA graph can replay the call with new lengths), the
 * parameters, and the launch sequence
 *   [append] -> schedule -> attention -> merge,
 * every step asynchronous on the stream, nothing read back.
 *
 * The runtime is a template argument Rt (KvRt, kv_rt.cuh: gpu_rt.h's calls
 * and the launches of the small kernels), and a table of instantiations
 * (KvKernel) with their launch functions.
 */
#ifndef FFPA_GPU_KV_HOST_H
#define FFPA_GPU_KV_HOST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../gpu_support.h"
#include "env.h"
#include "kv_params.h"
#include "kv_sched.h"
#include "plan.h"
#include "problem.h"

namespace ffpa {
namespace kv {

/* One instantiation of kv_attn_body. */
template <class Stream, class Error> struct KvKernel {
    ffpa_dtype dtype;
    int dv, br, bc, cols, threads;
    int blocks_per_sm; /* occupancy the ring depth is chosen for (measured per tile) */
    const char *name;
    size_t (*smem_bytes)(int qk_chunks, int stages);
    Error (*launch)(const ffpa_gpu_kv_params &p, size_t smem, int64_t blocks, Stream stream);
    /* Optional (NULL: a generic tile, chosen by rows and Dv). A specialised
     * kernel's coverage: NULL when it runs pb, else why not. Specialised
     * kernels that accept a problem are chosen before the generic tiles. */
    const char *(*accepts)(const ffpa_problem *pb, const ffpa_device_limits &lim);
};

constexpr size_t kAlign = 256;
inline size_t align_up(size_t x)
{
    return (x + kAlign - 1) / kAlign * kAlign;
}

/* Why the kernels cannot run pb (message in buf), or NULL. */
inline const char *unsupported(const ffpa_problem *pb, const char *backend, char *buf, size_t len)
{
    const ffpa_kv_problem *kv = pb->kv;
    const ffpa_view *views[6] = {&pb->q, &pb->k, &pb->v, &pb->o, &kv->k_new, &kv->v_new};
    const char *names[6] = {"q", "cache.k", "cache.v", "o", "k_new", "v_new"};
    const char *why = ffpa_gpu_unsupported(pb, views, names, 6, backend, buf, len);
    if (why)
        return why;
    if (pb->nkv > INT32_MAX / 2 || pb->batch * pb->hq * pb->nq > INT32_MAX / 2) {
        snprintf(buf, len, "cache.k: cache or batch too large for the %s backend; expected fewer than 2^30 tokens",
                 backend);
        return buf;
    }
    return NULL;
}

/* Everything the launch depends on. */
template <class K> struct Choice {
    const K *kernel;
    int stages;
    size_t smem;
    int64_t rows, q_tiles, units, target, grid;
};

/* The instantiation for pb: a specialised kernel that accepts it (the
 * Hopper MLA kernel), else the fewest rows per tile that hold the packed
 * rows (16: decode's handful of rows, one K/V read per kv head), else the
 * large tiles (MLA's 128 heads, speculative and chunked prefill); the
 * deepest ring that keeps the tile's blocks per multiprocessor resident
 * (or FFPA_KV_BLOCKS_PER_SM), fewer when they do not fit. */
template <class K>
bool choose(const ffpa_problem *pb, const K *table, int n, const ffpa_device_limits &lim, Choice<K> &c)
{
    c.rows = pb->nq * ffpa_query_group(pb);
    c.kernel = NULL;
    for (int i = 0; i < n && !c.kernel; ++i)
        if (table[i].accepts && table[i].dtype == pb->dtype && !table[i].accepts(pb, lim))
            c.kernel = &table[i];
    for (int pass = 0; pass < 2 && !c.kernel; ++pass)
        for (int i = 0; i < n; ++i) {
            const K &k = table[i];
            const bool small = k.br == 16;
            if (k.accepts || k.dtype != pb->dtype || k.dv < pb->dv || (pass == 0 && small != (c.rows <= 16)))
                continue;
            if (!c.kernel || k.dv < c.kernel->dv)
                c.kernel = &k;
        }
    if (!c.kernel)
        return false;
    const int qk_chunks = (int)((pb->dqk + c.kernel->cols - 1) / c.kernel->cols);
    /* Tuning knob (not API): FFPA_KV_BLOCKS_PER_SM overrides the tile's own. */
    const int want_blocks = (int)ffpa_env_long("FFPA_KV_BLOCKS_PER_SM", c.kernel->blocks_per_sm, 1, 8, NULL);
    c.stages = 0;
    for (int blocks = want_blocks; blocks >= 1 && !c.stages; --blocks)
        for (int s = 4; s >= 2; --s) {
            size_t smem = c.kernel->smem_bytes(qk_chunks, s);
            if (smem <= lim.smem_per_block && (size_t)blocks * (smem + 1024) <= lim.smem_per_sm) {
                c.stages = s;
                c.smem = smem;
                c.target = (int64_t)lim.sm_count * blocks;
                break;
            }
        }
    if (!c.stages)
        return false;
    c.q_tiles = (c.rows + c.kernel->br - 1) / c.kernel->br;
    c.units = pb->batch * pb->hkv;
    c.grid = ffpa_kv_grid_bound(c.target, c.units, c.q_tiles);
    return true;
}

/* Workspace: [first B+1][seq B][rank B][tps][len B (int64)][partial O][partial LSE]. */
struct Layout {
    size_t first, seq, rank, tps, len, part_o, part_lse, total;
};

template <class K> Layout layout(const ffpa_problem *pb, const Choice<K> &c)
{
    Layout l;
    size_t off = 0;
    const size_t n = (size_t)pb->batch;
    l.first = off;
    off += align_up((n + 1) * 4);
    l.seq = off;
    off += align_up(n * 4);
    l.rank = off;
    off += align_up(n * 4);
    l.tps = off;
    off += align_up(4);
    l.len = off;
    off += align_up(n * 8);
    const size_t part_rows = (size_t)c.grid * (size_t)c.kernel->br;
    l.part_o = off;
    off += align_up(part_rows * (size_t)pb->dv * sizeof(float));
    l.part_lse = off;
    off += align_up(part_rows * sizeof(float));
    l.total = off;
    return l;
}

template <class K> ffpa_gpu_kv_params params(const ffpa_problem *pb, const Choice<K> &c, char *ws, const Layout &l)
{
    const ffpa_kv_problem *kv = pb->kv;
    ffpa_gpu_kv_params p;
    memset(&p, 0, sizeof p);
    p.q = pb->q.data;
    p.o = pb->o.data;
    p.lse = static_cast<float *>(pb->lse.data);
    p.q_sb = pb->q.sb, p.q_sh = pb->q.sh, p.q_sn = pb->q.sn;
    p.o_sb = pb->o.sb, p.o_sh = pb->o.sh, p.o_sn = pb->o.sn;
    p.lse_sb = pb->lse.sb, p.lse_sh = pb->lse.sh, p.lse_sn = pb->lse.sn;
    p.k = pb->k.data;
    p.v = pb->v.data;
    p.k_sp = pb->k.sb, p.k_sh = pb->k.sh, p.k_sn = pb->k.sn;
    p.v_sp = pb->v.sb, p.v_sh = pb->v.sh, p.v_sn = pb->v.sn;
    p.block_table = kv->block_table;
    p.bt_stride = kv->bt_stride;
    p.max_pages = (int)kv->max_pages;
    p.num_pages = (int)kv->num_pages;
    p.page_size = (int)kv->page_size;
    p.seqlens = kv->cache_seqlens;
    p.uniform_len = kv->uniform_len;
    p.added = kv->append ? (int)pb->nq : 0;
    p.capacity = (int)pb->nkv;
    if (kv->append) {
        p.k_new = kv->k_new.data;
        p.kn_sb = kv->k_new.sb, p.kn_sh = kv->k_new.sh, p.kn_sn = kv->k_new.sn;
        if (!kv->v_in_k) {
            p.v_new = kv->v_new.data;
            p.vn_sb = kv->v_new.sb, p.vn_sh = kv->v_new.sh, p.vn_sn = kv->v_new.sn;
        }
    }
    p.batch = (int)pb->batch;
    p.hq = (int)pb->hq;
    p.hkv = (int)pb->hkv;
    p.group = (int)ffpa_query_group(pb);
    p.nq = (int)pb->nq;
    p.dqk = (int)pb->dqk;
    p.dv = (int)pb->dv;
    p.scale_log2 = pb->scale * 1.4426950408889634f;
    p.causal = pb->causal;
    p.window = pb->window;
    p.window_left = ffpa_window_bound32(pb, pb->window_left);
    p.window_right = ffpa_window_bound32(pb, pb->window_right);
    ffpa_softcap_log2(pb, &p.softcap_in, &p.softcap_out);
    p.alibi = pb->alibi;
    p.alibi_sb = pb->alibi_sb;
    p.alibi_sh = pb->alibi_sh;
    p.rows = (int)c.rows;
    p.q_tiles = (int)c.q_tiles;
    p.bc = c.kernel->bc;
    p.qk_chunks = (int)((pb->dqk + c.kernel->cols - 1) / c.kernel->cols);
    p.v_chunks = (int)((pb->dv + c.kernel->cols - 1) / c.kernel->cols);
    p.stages = c.stages;
    p.target_blocks = c.target;
    p.sched_first = reinterpret_cast<int32_t *>(ws + l.first);
    p.sched_seq = reinterpret_cast<int32_t *>(ws + l.seq);
    p.sched_rank = reinterpret_cast<int32_t *>(ws + l.rank);
    p.sched_tps = reinterpret_cast<int32_t *>(ws + l.tps);
    p.sched_len = reinterpret_cast<int64_t *>(ws + l.len);
    p.part_o = reinterpret_cast<float *>(ws + l.part_o);
    p.part_lse = reinterpret_cast<float *>(ws + l.part_lse);
    p.tile_rows = c.kernel->br;
    return p;
}

/* Whether an instantiation of the table runs pb on this device (the
 * dense-decode routing asks before it commits to the KV-cache kernels). */
template <class K> bool runs(const ffpa_problem *pb, const K *table, int n, const ffpa_device_limits &lim)
{
    Choice<K> c;
    return choose(pb, table, n, lim, c);
}

inline ffpa_status no_config(const ffpa_problem *pb, const ffpa_device_limits &lim, char *err, size_t err_len)
{
    snprintf(err, err_len,
             "q: no KV-cache configuration for Dqk=%lld Dv=%lld fits this device's %zu bytes of shared memory per "
             "block; expected a smaller head dimension on this GPU",
             (long long)pb->dqk, (long long)pb->dv, lim.smem_per_block);
    return FFPA_ERR_UNSUPPORTED;
}

template <class K> size_t workspace(const ffpa_problem *pb, const K *table, int n, const ffpa_device_limits &lim)
{
    Choice<K> c;
    if (!choose(pb, table, n, lim, c))
        return 0;
    return layout(pb, c).total;
}

template <class K>
ffpa_status schedule_info(const ffpa_problem *pb, const K *table, int n, const ffpa_device_limits &lim,
                          const int32_t *host_seqlens, ffpa_kv_schedule_info *out, char *err, size_t err_len)
{
    Choice<K> c;
    if (!choose(pb, table, n, lim, c))
        return no_config(pb, lim, err, err_len);
    ffpa_kv_sched_shape sh = {pb->batch, pb->hkv, c.q_tiles, c.kernel->bc, pb->kv->append ? pb->nq : 0, pb->nkv,
                              c.target};
    ffpa_kv_sched s;
    if (ffpa_kv_sched_make(&sh, host_seqlens, -1, &s) != 0) {
        snprintf(err, err_len, "host_seqlens: out of host memory for the schedule");
        return FFPA_ERR_OUT_OF_MEMORY;
    }
    out->rows_per_tile = c.kernel->br;
    out->q_tiles = (int)c.q_tiles;
    out->key_tile = c.kernel->bc;
    out->units = c.units;
    out->tiles_per_split = s.tiles_per_split;
    out->blocks = s.blocks;
    out->grid = c.grid;
    out->max_splits = (int)s.max_splits;
    out->kernel = c.kernel->name;
    ffpa_kv_sched_free(&s);
    return FFPA_OK;
}

template <class Rt, class K>
ffpa_status forward(const ffpa_problem *pb, const K *table, int n, const ffpa_device_limits &lim, void *ws,
                    size_t ws_bytes, typename Rt::Stream stream, const char *backend, const char **kernel_name,
                    char *err, size_t err_len)
{
    char reason[256];
    const char *why = unsupported(pb, backend, reason, sizeof reason);
    if (why) {
        snprintf(err, err_len, "%s", why);
        return FFPA_ERR_UNSUPPORTED;
    }
    Choice<K> c;
    if (!choose(pb, table, n, lim, c))
        return no_config(pb, lim, err, err_len);
    const Layout l = layout(pb, c);
    if (!ws || ws_bytes < l.total) {
        snprintf(err, err_len, "internal: KV-cache workspace too small (%zu < %zu bytes)", ws_bytes, l.total);
        return FFPA_ERR_INTERNAL;
    }
    const ffpa_gpu_kv_params p = params(pb, c, static_cast<char *>(ws), l);
    typename Rt::Error e{};
    const char *step = "appending the new tokens";
    if (pb->kv->append)
        e = Rt::append(pb->dtype, p, stream);
    if (Rt::ok(e)) {
        step = "scheduling";
        e = Rt::schedule(p, stream);
    }
    if (Rt::ok(e)) {
        step = "launching the KV-cache attention kernel";
        e = c.kernel->launch(p, c.smem, c.grid, stream);
    }
    if (Rt::ok(e)) {
        step = "merging the splits";
        e = Rt::merge(pb->dtype, p, stream);
    }
    if (!Rt::ok(e))
        return Rt::error(e, step, err, err_len);
    *kernel_name = c.kernel->name;
    return FFPA_OK;
}

} /* namespace kv */
} /* namespace ffpa */

#endif
