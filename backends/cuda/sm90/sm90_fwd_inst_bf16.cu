/* Hopper forward instantiations, bf16 (see sm90_fwd_kernels.cuh). */
#include "sm90_fwd_kernels.cuh"

namespace ffpa {
namespace sm90 {
#define FFPA_FWD_DESC(slice, slice_v, cluster, label) \
    desc<FwdConfig<arch::bf16, slice, cluster, slice_v>>("sm90 wgmma " label),
const KernelDesc fwd_bf16[kNumShapes] = {FFPA_SM90_FWD_SHAPES(FFPA_FWD_DESC)};
#undef FFPA_FWD_DESC
const KernelDesc fwd_bf16_d64_dropout = desc<FwdConfigD64Dropout<arch::bf16>>("sm90 wgmma d64 dropout");
#define FFPA_FWD_PLAIN_DESC(slice, slice_v, cluster, label) \
    desc<FwdConfigPlain<arch::bf16, slice, cluster, slice_v>>("sm90 wgmma " label " plain"),
const KernelDesc fwd_bf16_plain[kNumShapes] = {FFPA_SM90_FWD_SHAPES(FFPA_FWD_PLAIN_DESC)};
#undef FFPA_FWD_PLAIN_DESC
const KernelDesc fwd_bf16_d64_plain_wide = desc<FwdConfigD64PlainWide<arch::bf16>>("sm90 wgmma d64 plain 2x192");
}
}
