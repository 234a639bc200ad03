/*
 * The split-KV schedule of attention over a KV cache (decode, speculative
 * decode, chunked prefill), shared by every backend: the same arithmetic
 * runs on the host (common/kv_sched.c: the cpu backend's and the tools'
 * view, unit tests) and on a GPU inside one small kernel that reads the
 * cache lengths from device memory, so a call needs no host round trip and
 * can be captured in a CUDA graph.
 *
 * Work: a unit is (sequence b, KV head); its rows are the Nq x (Hq/Hkv)
 * query rows that share the KV head (packed heads: the KV head is read
 * once per step, not once per query head), cut into q_tiles tiles of the
 * kernel's rows. Each tile walks the unit's key tiles of `bc` keys.
 *
 * Balance: the key tiles of the whole batch are cut into splits of at most
 * tiles_per_split tiles, chosen so that about target_blocks blocks run; a
 * sequence of L keys gets ceil(tiles / tiles_per_split) splits (at least
 * one, so an empty sequence still writes O = 0, LSE = -inf). Mixed lengths
 * therefore give blocks of equal work, whatever the lengths. Sequences are
 * laid out longest first, so the short tails fill the end of the wave.
 * The grid is fixed by the shapes alone: target_blocks + q_tiles x units
 * bounds the blocks any lengths can need; blocks past the last exit.
 *
 * Usable from C and from CUDA/HIP device code.
 */
#ifndef FFPA_COMMON_KV_SCHED_H
#define FFPA_COMMON_KV_SCHED_H

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define FFPA_KV_FN __host__ __device__ __forceinline__
#else
#define FFPA_KV_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Smallest split, in key tiles: below it the partial results and their
 * merge cost more than the extra parallelism returns. */
#define FFPA_KV_MIN_TILES_PER_SPLIT 4

/* Keys sequence b attends to: its cached tokens, plus the Nq appended ones,
 * clipped to [0, capacity]. uniform >= 0 replaces the lengths array (dense
 * forward decode: every sequence has the same length). */
FFPA_KV_FN int64_t ffpa_kv_seq_len(const int32_t *seqlens, int64_t uniform, int64_t b, int64_t added,
                                   int64_t capacity)
{
    int64_t len = (uniform >= 0 ? uniform : (int64_t)seqlens[b]) + added;
    return len < 0 ? 0 : len > capacity ? capacity : len;
}

FFPA_KV_FN int64_t ffpa_kv_key_tiles(int64_t len, int64_t bc)
{
    return (len + bc - 1) / bc;
}

/* Tiles per split from the batch's total key-tile work (summed over units
 * and q tiles), the blocks wanted and the longest sequence's key tiles.
 * When the longest sequence is within 1/8 of the balanced split, nothing is
 * split: one block per unit ends within 12.5% of the balanced schedule and
 * the partials and their merge are skipped (a split of 125 + 3 tiles only
 * adds a merge). */
FFPA_KV_FN int64_t ffpa_kv_tiles_per_split(int64_t total_tile_work, int64_t target_blocks, int64_t longest_tiles)
{
    int64_t t = target_blocks > 0 ? (total_tile_work + target_blocks - 1) / target_blocks : total_tile_work;
    if (longest_tiles <= t + t / 8)
        t = longest_tiles;
    return t < FFPA_KV_MIN_TILES_PER_SPLIT ? FFPA_KV_MIN_TILES_PER_SPLIT : t;
}

FFPA_KV_FN int64_t ffpa_kv_splits(int64_t key_tiles, int64_t tiles_per_split)
{
    int64_t s = (key_tiles + tiles_per_split - 1) / tiles_per_split;
    return s < 1 ? 1 : s;
}

/* Position of sequence b in longest-first order (ties: lower index first). */
FFPA_KV_FN int64_t ffpa_kv_rank(const int64_t *lens, int64_t n, int64_t b)
{
    int64_t rank = 0;
    for (int64_t o = 0; o < n; ++o)
        rank += lens[o] > lens[b] || (lens[o] == lens[b] && o < b);
    return rank;
}

/* Upper bound of the blocks any lengths need: the grid. */
FFPA_KV_FN int64_t ffpa_kv_grid_bound(int64_t target_blocks, int64_t units, int64_t q_tiles)
{
    return target_blocks + units * q_tiles;
}

#ifdef __cplusplus
}
#endif

/* ------------------------------------------------------------------ host */
#ifdef __cplusplus
extern "C" {
#endif

/* The shape facts of a schedule. */
typedef struct ffpa_kv_sched_shape {
    int64_t batch, hkv;
    int64_t q_tiles;        /* tiles of packed rows per unit */
    int64_t bc;             /* keys per key tile */
    int64_t added;          /* keys appended by the call (Nq with k_new, else 0) */
    int64_t capacity;       /* keys a sequence can hold */
    int64_t target_blocks;
} ffpa_kv_sched_shape;

/* The schedule of one batch. first[k] is the first block of the k-th
 * longest sequence (first[batch] = blocks); within it the blocks run
 * (KV head, split, q tile) with the q tile fastest, so the tiles that read
 * the same keys run side by side and share them in L2. */
typedef struct ffpa_kv_sched {
    int64_t tiles_per_split;
    int64_t blocks;
    int64_t max_splits;
    int64_t *first;  /* [batch + 1] */
    int64_t *seq;    /* [batch]: sequence at each rank */
    int64_t *len;    /* [batch]: keys of each sequence */
} ffpa_kv_sched;

/* Host schedule from host lengths (seqlens NULL: every sequence `uniform`).
 * Allocates the arrays; 0 on success, -1 when out of memory. */
int ffpa_kv_sched_make(const ffpa_kv_sched_shape *sh, const int32_t *seqlens, int64_t uniform,
                       ffpa_kv_sched *out);
void ffpa_kv_sched_free(ffpa_kv_sched *s);

#ifdef __cplusplus
}
#endif

#endif
