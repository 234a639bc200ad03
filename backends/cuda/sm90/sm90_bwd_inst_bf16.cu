/* Hopper backward instantiations, bf16 (see sm90_bwd_kernels.cuh). */
#include "sm90_bwd_kernels.cuh"

namespace ffpa {
namespace sm90 {
const BwdKernelDesc bwd_bf16[kNumBwdShapes] = {
    bwd_desc<BwdConfig<arch::bf16, 2>>("sm90 wgmma bwd d128"),
    bwd_desc<BwdConfig<arch::bf16, 4>>("sm90 wgmma bwd d256"),
    bwd_desc<BwdConfig<arch::bf16, 6>>("sm90 wgmma bwd d384"),
    bwd_desc<BwdConfig<arch::bf16, 4, 2>>("sm90 wgmma bwd d256x2 cluster", 1),
    bwd_desc<BwdConfig<arch::bf16, 8>>("sm90 wgmma bwd d512"),
    bwd_desc<BwdConfig<arch::bf16, 4, 3>>("sm90 wgmma bwd d256x3 cluster", 1),
    bwd_desc<BwdConfig<arch::bf16, 6, 2>>("sm90 wgmma bwd d384x2 cluster"),
    bwd_desc<BwdConfig<arch::bf16, 4, 4>>("sm90 wgmma bwd d256x4 cluster", 1),
    bwd_desc<BwdConfig<arch::bf16, 8, 2>>("sm90 wgmma bwd d512x2 cluster"),
};
const BwdKernelDesc bwd_keys_bf16 = bwd_desc<BwdConfig<arch::bf16, 2, 1, true>>("sm90 wgmma bwd d128 keys128");
}
}
