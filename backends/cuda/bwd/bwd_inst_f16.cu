/* Backward kernels for fp16 (see bwd_inst.cuh). */
#define FFPA_BWD_T arch::f16
#define FFPA_BWD_LAUNCH_DKDV launch_dkdv_f16
#define FFPA_BWD_LAUNCH_DQ launch_dq_f16
#define FFPA_BWD_ATTR attr_f16
#include "bwd_inst.cuh"
