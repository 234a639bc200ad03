/* Hopper backward instantiations, bf16 (see sm90_bwd_kernels.cuh). */
#include "sm90_bwd_kernels.cuh"

namespace ffpa {
namespace sm90 {
#define FFPA_BWD_DESC(b, c, label, f32_dq_only) \
    bwd_desc<BwdConfig<arch::bf16, b, c>>("sm90 wgmma bwd " label, f32_dq_only),
const BwdKernelDesc bwd_bf16[kNumBwdShapes] = {FFPA_SM90_BWD_WIDTHS(FFPA_BWD_DESC)};
#undef FFPA_BWD_DESC
const BwdKernelDesc bwd_keys_bf16 = bwd_desc<BwdConfig<arch::bf16, 2, 1, true>>("sm90 wgmma bwd d128 keys128");
const BwdKernelDesc bwd_grads_bf16 = bwd_desc<BwdConfig<arch::bf16, 6, 1, false, true>, true>("sm90 wgmma bwd d320 split");
}
}
