/* Public dtype helpers. */
#include "ffpa.h"

size_t ffpa_dtype_size(ffpa_dtype dtype)
{
    switch (dtype) {
    case FFPA_F16:
    case FFPA_BF16:
        return 2;
    case FFPA_F32:
        return 4;
    }
    return 0;
}

const char *ffpa_dtype_name(ffpa_dtype dtype)
{
    switch (dtype) {
    case FFPA_F16:
        return "f16";
    case FFPA_BF16:
        return "bf16";
    case FFPA_F32:
        return "f32";
    }
    return "unknown";
}

ffpa_tensor ffpa_tensor_bhnd(void *data, ffpa_dtype dtype, int64_t b, int64_t h, int64_t n,
                             int64_t d)
{
    ffpa_tensor t = {data, dtype, {b, h, n, d}, {h * n * d, n * d, d, 1}};
    return t;
}

ffpa_tensor ffpa_tensor_bnhd(void *data, ffpa_dtype dtype, int64_t b, int64_t h, int64_t n,
                             int64_t d)
{
    ffpa_tensor t = {data, dtype, {b, h, n, d}, {n * h * d, d, h * d, 1}};
    return t;
}
