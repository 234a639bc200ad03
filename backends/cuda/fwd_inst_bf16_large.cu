/* Forward instantiations: bf16, Dv > 256 (fine-grained Split-D tiling). */
#include "fwd_kernels.cuh"

namespace ffpa {
namespace cuda {
const FwdKernelDesc fwd_bf16_large[kFwdLargeKernels] = {
    fwd_desc_with_plain<Fwd320<arch::bf16>>(),
    fwd_desc<Fwd512c512<arch::bf16>>(),
    fwd_desc<Fwd512c256<arch::bf16>>(),
    fwd_desc<Fwd512<arch::bf16>>(),
    fwd_desc<Fwd1024c512<arch::bf16>>(),
    fwd_desc<Fwd1024<arch::bf16>>(),
    fwd_desc<Fwd1024k32<arch::bf16>>(),
};
}
}
