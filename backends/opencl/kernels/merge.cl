/*
 * ffpa_merge_partials on OpenCL: partial results merged by LSE with
 * common/lse_merge.h's conventions (every backend's merge). One work-group
 * per row: every work-item reads the row's part LSEs, then strides over
 * the columns; the LSE is written after a barrier, so o and lse may be a
 * part (in place).
 */
#include "cl_score.h"
#include "lse_merge.h"

#define MAX_PARTS 16

__kernel void ffpa_merge(const ffpa_cl_merge_params p, __global const ffpa_cl_merge_part *part,
                         __global const uchar *o0, __global const uchar *o1, __global const uchar *o2,
                         __global const uchar *o3, __global const uchar *o4, __global const uchar *o5,
                         __global const uchar *o6, __global const uchar *o7, __global const uchar *o8,
                         __global const uchar *o9, __global const uchar *o10, __global const uchar *o11,
                         __global const uchar *o12, __global const uchar *o13, __global const uchar *o14,
                         __global const uchar *o15, __global const float *l0, __global const float *l1,
                         __global const float *l2, __global const float *l3, __global const float *l4,
                         __global const float *l5, __global const float *l6, __global const float *l7,
                         __global const float *l8, __global const float *l9, __global const float *l10,
                         __global const float *l11, __global const float *l12, __global const float *l13,
                         __global const float *l14, __global const float *l15, __global uchar *out,
                         __global float *lse_out)
{
    __global const uchar *ob[MAX_PARTS] = {o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11, o12, o13, o14, o15};
    __global const float *lb[MAX_PARTS] = {l0, l1, l2, l3, l4, l5, l6, l7, l8, l9, l10, l11, l12, l13, l14, l15};
    const long row = (long)get_group_id(0);
    if (row >= p.rows)
        return;
    const long b = row / (p.h * p.n), h = row / p.n % p.h, n = row % p.n;
    float w[MAX_PARTS];
    float m = -INFINITY;
    for (int i = 0; i < p.parts; ++i) {
        const __global ffpa_cl_merge_part *q = &part[i];
        w[i] = lb[i][q->lse_off + b * q->lse_sb + h * q->lse_sh + n * q->lse_sn];
        m = fmax(m, w[i]);
    }
    float sum = 0.0f;
    for (int i = 0; i < p.parts; ++i)
        sum += ffpa_lse_term(w[i], m);
    const float lse = ffpa_lse_total(m, sum);
    for (int i = 0; i < p.parts; ++i)
        w[i] = ffpa_lse_weight(w[i], lse);
    const long o_row = p.o_off + b * p.o_sb + h * p.o_sh + n * p.o_sn;
    for (int c = (int)get_local_id(0); c < p.dv; c += (int)get_local_size(0)) {
        float acc = 0.0f;
        for (int i = 0; i < p.parts; ++i)
            if (w[i] != 0.0f) {
                const __global ffpa_cl_merge_part *q = &part[i];
                acc += w[i] * load_elem(ob[i], q->o_off + b * q->o_sb + h * q->o_sh + n * q->o_sn + c * q->o_sd, q->dt);
            }
        store_elem(out, o_row + c * p.o_sd, acc, p.dt);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (p.has_lse && get_local_id(0) == 0)
        lse_out[p.lse_off + b * p.lse_sb + h * p.lse_sh + n * p.lse_sn] = lse;
}
