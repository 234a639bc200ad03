/* Forward instantiations: f16, Dv <= 256. */
#include "fwd_kernels_hip.h"

namespace ffpa {
namespace hip {
const FwdKernelDesc *fwd_f16_small()
{
    static const FwdKernelDesc table[kFwdSmallKernels] = {
        fwd_desc<Fwd64x2<arch::f16>>(), fwd_desc<Fwd64<arch::f16>>(), fwd_desc<Fwd128x2<arch::f16>>(),
        fwd_desc<Fwd128<arch::f16>>(), fwd_desc<Fwd256<arch::f16>>()};
    return table;
}
}
}
