/* Forward instantiations: bf16, 256 < Dv <= 1024. */
#include "fwd_kernels_hip.h"

namespace ffpa {
namespace hip {
const FwdKernelDesc *fwd_bf16_large()
{
    static const FwdKernelDesc table[kFwdLargeKernels] = {
        fwd_desc<Fwd320<arch::bf16>>(),
        fwd_desc<Fwd512c512<arch::bf16>>(),
        fwd_desc<Fwd512c256<arch::bf16>>(),
        fwd_desc<Fwd512<arch::bf16>>(),
        fwd_desc<Fwd1024c512<arch::bf16>>(),
        fwd_desc<Fwd1024<arch::bf16>>(),
        fwd_desc<Fwd1024k32<arch::bf16>>(),
    };
    return table;
}
}
}
