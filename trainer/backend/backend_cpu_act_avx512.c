/* backend_cpu_act_avx512.c — backend_cpu_act.c's kernels built for AVX-512 F/BW/VL/DQ, the
 * set oneDNN calls avx512_core (the Makefile adds the flags for this file alone;
 * backend_cpu_act_isa.c calls them only where oneDNN runs avx512_core or above). */
#define CPU_ACT_LEVEL avx512
#include "trainer/backend/backend_cpu_act.c"
