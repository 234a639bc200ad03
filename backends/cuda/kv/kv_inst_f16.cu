/* KV-cache attention instantiations: f16. */
#include "kv_kernels.cuh"

namespace ffpa {
namespace cuda {
const KvDesc kv_f16[kKvKernels] = {
    kv_desc<Kv16x128<arch::f16>>(FFPA_F16, "generic kv 16-row d128"),
    kv_desc<Kv16x256<arch::f16>>(FFPA_F16, "generic kv 16-row d256"),
    kv_desc<Kv16x512<arch::f16>>(FFPA_F16, "generic kv 16-row d512"),
    kv_desc<Kv16x1024<arch::f16>>(FFPA_F16, "generic kv 16-row d1024"),
    kv_desc<Kv64x512<arch::f16>>(FFPA_F16, "generic kv 64-row d512"),
    kv_desc<Kv32x1024<arch::f16>>(FFPA_F16, "generic kv 32-row d1024"),
    kv_mla_desc(FFPA_F16, "sm90 mla d576/512"),
};
}
}
