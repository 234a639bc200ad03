/* Host side of the split-KV schedule. See kv_sched.h. */
#include "kv_sched.h"
#include "host_alloc.h"

#include <stdlib.h>
#include <string.h>

void ffpa_kv_sched_free(ffpa_kv_sched *s)
{
    free(s->first);
    free(s->seq);
    free(s->len);
    memset(s, 0, sizeof *s);
}

int ffpa_kv_sched_make(const ffpa_kv_sched_shape *sh, const int32_t *seqlens, int64_t uniform,
                       ffpa_kv_sched *out)
{
    const int64_t n = sh->batch;
    memset(out, 0, sizeof *out);
    out->first = ffpa_host_malloc((size_t)(n + 1) * sizeof *out->first);
    out->seq = ffpa_host_malloc((size_t)(n > 0 ? n : 1) * sizeof *out->seq);
    out->len = ffpa_host_malloc((size_t)(n > 0 ? n : 1) * sizeof *out->len);
    if (!out->first || !out->seq || !out->len) {
        ffpa_kv_sched_free(out);
        return -1;
    }
    int64_t work = 0, longest = 0;
    for (int64_t b = 0; b < n; ++b) {
        out->len[b] = ffpa_kv_seq_len(seqlens, uniform, b, sh->added, sh->capacity);
        const int64_t tiles = ffpa_kv_key_tiles(out->len[b], sh->bc);
        work += tiles * sh->hkv * sh->q_tiles;
        longest = tiles > longest ? tiles : longest;
    }
    out->tiles_per_split = ffpa_kv_tiles_per_split(work, sh->target_blocks, longest);
    for (int64_t b = 0; b < n; ++b)
        out->seq[ffpa_kv_rank(out->len, n, b)] = b;
    out->first[0] = 0;
    for (int64_t k = 0; k < n; ++k) {
        int64_t splits = ffpa_kv_splits(ffpa_kv_key_tiles(out->len[out->seq[k]], sh->bc), out->tiles_per_split);
        if (splits > out->max_splits)
            out->max_splits = splits;
        out->first[k + 1] = out->first[k] + splits * sh->hkv * sh->q_tiles;
    }
    out->blocks = out->first[n];
    return 0;
}
