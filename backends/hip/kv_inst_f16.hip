/* KV-cache attention instantiations: f16. */
#include "kv_kernels_hip.h"

namespace ffpa {
namespace hip {
const KvDesc *kv_f16()
{
    static const KvDesc table[kKvKernels] = {
        kv_desc<Kv16x128<arch::f16>>(FFPA_F16, "hip kv 16-row d128"),
        kv_desc<Kv16x256<arch::f16>>(FFPA_F16, "hip kv 16-row d256"),
        kv_desc<Kv16x512<arch::f16>>(FFPA_F16, "hip kv 16-row d512"),
    };
    return table;
}
}
}
