/* Hopper forward instantiations, f16 (see sm90_fwd_kernels.cuh). */
#include "sm90_fwd_kernels.cuh"

namespace ffpa {
namespace sm90 {
const KernelDesc fwd_f16[kNumShapes] = {
    desc<FwdConfig<arch::f16, 128, 1>>("sm90 wgmma d128"),
    desc<FwdConfig<arch::f16, 192, 1, 128>>("sm90 wgmma d192/128"),
    desc<FwdConfig<arch::f16, 256, 1>>("sm90 wgmma d256"),
    desc<FwdConfig<arch::f16, 320, 1>>("sm90 wgmma d320"),
    desc<FwdConfig<arch::f16, 192, 2>>("sm90 wgmma d192x2 cluster"),
    desc<FwdConfig<arch::f16, 256, 2>>("sm90 wgmma d256x2 cluster"),
    desc<FwdConfig<arch::f16, 320, 2, 256>>("sm90 wgmma d320/256x2 cluster"),
    desc<FwdConfig<arch::f16, 192, 4>>("sm90 wgmma d192x4 cluster"),
    desc<FwdConfig<arch::f16, 256, 4>>("sm90 wgmma d256x4 cluster"),
};
}
}
