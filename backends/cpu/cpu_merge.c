/*
 * The cpu backend's merge of partial results by LSE (ffpa_merge_partials),
 * with the conventions of common/lse_merge.h. Row by row: every part's LSE
 * is read before anything is written, and each O element is read from every
 * part before it is written, so o and lse may be a part (in place).
 */
#include "cpu_merge.h"

#include "dtype.h"
#include "lse_merge.h"

static int64_t row_offset(const ffpa_view *v, int64_t b, int64_t h, int64_t n)
{
    return b * v->sb + h * v->sh + n * v->sn;
}

static void merge_row(const ffpa_merge_problem *mp, int64_t b, int64_t h, int64_t n)
{
    float lse_i[FFPA_MERGE_MAX_PARTS], w[FFPA_MERGE_MAX_PARTS];
    float m = -INFINITY;
    for (int i = 0; i < mp->parts; ++i) {
        lse_i[i] = ((const float *)mp->lse_part[i].data)[row_offset(&mp->lse_part[i], b, h, n)];
        m = lse_i[i] > m ? lse_i[i] : m;
    }
    float sum = 0.0f;
    for (int i = 0; i < mp->parts; ++i)
        sum += ffpa_lse_term(lse_i[i], m);
    const float lse = ffpa_lse_total(m, sum);
    for (int i = 0; i < mp->parts; ++i)
        w[i] = ffpa_lse_weight(lse_i[i], lse);
    const int64_t o_row = row_offset(&mp->o, b, h, n);
    for (int64_t c = 0; c < mp->dv; ++c) {
        float acc = 0.0f;
        for (int i = 0; i < mp->parts; ++i)
            if (w[i] != 0.0f)
                acc += w[i] * ffpa_load_f32(mp->o_part[i].data, mp->o_part_dtype[i],
                                            row_offset(&mp->o_part[i], b, h, n) + c * mp->o_part[i].sd);
        ffpa_store_f32(mp->o.data, mp->o_dtype, o_row + c * mp->o.sd, acc);
    }
    if (mp->lse.data)
        ((float *)mp->lse.data)[row_offset(&mp->lse, b, h, n)] = lse;
}

ffpa_status cpu_merge(const ffpa_merge_problem *mp)
{
    const int64_t rows = mp->b * mp->h * mp->n;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
        merge_row(mp, r / (mp->h * mp->n), r / mp->n % mp->h, r % mp->n);
    return FFPA_OK;
}
