/* Forward instantiations: f16, 256 < Dv <= 1024. */
#include "fwd_kernels_hip.h"

namespace ffpa {
namespace hip {
const FwdKernelDesc *fwd_f16_large()
{
    static const FwdKernelDesc table[kFwdLargeKernels] = {
        fwd_desc<Fwd320<arch::f16>>(),
        fwd_desc<Fwd512c512<arch::f16>>(),
        fwd_desc<Fwd512c256<arch::f16>>(),
        fwd_desc<Fwd512<arch::f16>>(),
        fwd_desc<Fwd1024c512<arch::f16>>(),
        fwd_desc<Fwd1024<arch::f16>>(),
        fwd_desc<Fwd1024k32<arch::f16>>(),
    };
    return table;
}
}
}
