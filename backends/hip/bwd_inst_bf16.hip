/* Backward kernels for bf16 (see bwd_inst_hip.h). */
#define FFPA_BWD_T arch::bf16
#define FFPA_BWD_LAUNCH_DKDV launch_dkdv_bf16
#define FFPA_BWD_LAUNCH_DQ launch_dq_bf16
#include "bwd_inst_hip.h"
