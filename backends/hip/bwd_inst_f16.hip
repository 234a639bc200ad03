/* Backward kernels for f16 (see bwd_inst_hip.h). */
#define FFPA_BWD_T arch::f16
#define FFPA_BWD_LAUNCH_DKDV launch_dkdv_f16
#define FFPA_BWD_LAUNCH_DQ launch_dq_f16
#include "bwd_inst_hip.h"
