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

/* x * y, or INT64_MAX where the product overflows: such a stride makes
 * validation refuse the tensor by name ("strides span more than 2^63
 * bytes"), where a wrapped one could look valid. */
static int64_t stride_product(int64_t x, int64_t y)
{
    int64_t r;
    return __builtin_mul_overflow(x, y, &r) ? INT64_MAX : r;
}

ffpa_tensor ffpa_tensor_bhnd(void *data, ffpa_dtype dtype, int64_t b, int64_t h, int64_t n,
                             int64_t d)
{
    const int64_t sn = d, sh = stride_product(n, d), sb = stride_product(h, sh);
    ffpa_tensor t = {data, dtype, {b, h, n, d}, {sb, sh, sn, 1}};
    return t;
}

ffpa_tensor ffpa_tensor_bnhd(void *data, ffpa_dtype dtype, int64_t b, int64_t h, int64_t n,
                             int64_t d)
{
    const int64_t sh = d, sn = stride_product(h, d), sb = stride_product(n, sn);
    ffpa_tensor t = {data, dtype, {b, h, n, d}, {sb, sh, sn, 1}};
    return t;
}
