/* Forward instantiations: f16, Dv <= 256 (coarse FA-2 tiling). */
#include "fwd_kernels.cuh"

namespace ffpa {
namespace cuda {
const FwdKernelDesc fwd_f16_small[kFwdSmallKernels] = {
        fwd_desc_with_plain<Fwd64x2<arch::f16>>(), fwd_desc<Fwd64<arch::f16>>(), fwd_desc_with_plain<Fwd128x2<arch::f16>>(),
        fwd_desc<Fwd128<arch::f16>>(), fwd_desc<Fwd256<arch::f16>>()};
}
}
