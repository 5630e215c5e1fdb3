/* backend_cpu_act_avx2.c — backend_cpu_act.c's kernels built for AVX2 (the Makefile adds
 * -mavx2 for this file alone; backend_cpu_act_isa.c calls them only where oneDNN runs AVX2). */
#define CPU_ACT_LEVEL avx2
#include "trainer/backend/backend_cpu_act.c"
