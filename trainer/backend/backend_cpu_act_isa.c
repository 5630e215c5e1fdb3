/* backend_cpu_act_isa.c — which build of the CPU backend's own kernels runs
 * (backend_cpu_act.h): the instruction-set level oneDNN runs here, so that ONEDNN_MAX_CPU_ISA
 * caps both alike and every level is tested on one machine (t/t0020-cpu-isa.t). */
#include <string.h>

#include "trainer/backend/backend_cpu_act.h"

#if HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static const struct {
	const char *name;
	const struct cpu_act_kernels *k;
} levels[] = {
    {"base", &cpu_act_kernels_base},
#if CPU_ACT_X86
    {"avx2", &cpu_act_kernels_avx2},
    {"avx512", &cpu_act_kernels_avx512},
#endif
};

static int cur; /* index in levels */

static int level_of_dnnl(void)
{
#if HAVE_DNNL && CPU_ACT_X86
	unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
	unsigned avx512 = (unsigned)dnnl_cpu_isa_avx512_core, avx2 = (unsigned)dnnl_cpu_isa_avx2;

	if ((isa & avx512) == avx512)
		return 2;
	if ((isa & avx2) == avx2)
		return 1;
#endif
	return 0;
}

/* Whether this CPU runs level i's instructions: a forced level it lacks would end the process
 * with SIGILL (as the unit test's did on an AMD EPYC with AVX2 only). */
static int cpu_runs(size_t i)
{
#if CPU_ACT_X86
	__builtin_cpu_init();
	if (i == 1)
		return __builtin_cpu_supports("avx2");
	if (i == 2)
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
	(void)i;
	return 1;
}

const char *cpu_act_use(const char *level)
{
	if (!level) {
		cur = level_of_dnnl();
		return levels[cur].name;
	}
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		if (strcmp(levels[i].name, level) == 0) {
			if (!cpu_runs(i))
				return NULL;
			cur = (int)i;
			return levels[i].name;
		}
	return NULL;
}

const char *cpu_act_level(void)
{
	return levels[cur].name;
}

#define K (levels[cur].k)

void cpu_act_import(const struct cpu_act *a, const float *x, void *y)
{
	K->import(a, x, y);
}

void cpu_act_export(const struct cpu_act *a, const void *x, float *y)
{
	K->export_(a, x, y);
}

void cpu_act_bn_fwd(const struct be_bn_desc *d, const struct cpu_act *a, const void *x,
		    const void *z, const float *gamma, const float *beta_, void *y,
		    float *save_mean, float *save_invstd, float *running_mean, float *running_var,
		    float momentum)
{
	K->bn_fwd(d, a, x, z, gamma, beta_, y, save_mean, save_invstd, running_mean, running_var,
		  momentum);
}

void cpu_act_bn_bwd(const struct be_bn_desc *d, const struct cpu_act *a, const void *x,
		    const void *y, const void *dy, const float *gamma, const float *save_mean,
		    const float *save_invstd, void *dx, void *dz, float bz, float *dgamma,
		    float *dbeta, float beta)
{
	K->bn_bwd(d, a, x, y, dy, gamma, save_mean, save_invstd, dx, dz, bz, dgamma, dbeta, beta);
}

void cpu_act_maxpool_bwd(const struct be_pool_desc *d, int bs, int bf16, const void *x,
			 const void *dy, void *dx, float beta, float *scratch)
{
	K->maxpool_bwd(d, bs, bf16, x, dy, dx, beta, scratch);
}

void cpu_act_maxpool_fwd_nchw(const struct be_pool_desc *d, const float *x, float *y)
{
	K->maxpool_fwd_nchw(d, x, y);
}

void cpu_act_gap_fwd(const struct cpu_act *a, const void *x, void *y)
{
	K->gap_fwd(a, x, y);
}

void cpu_act_gap_bwd(const struct cpu_act *a, const void *dy, void *dx, float beta)
{
	K->gap_bwd(a, dy, dx, beta);
}

void cpu_bf16_relu_fwd(const uint16_t *x, uint16_t *y, size_t n)
{
	K->bf16_relu_fwd(x, y, n);
}

void cpu_bf16_relu_bwd(const uint16_t *y, const uint16_t *dy, uint16_t *dx, size_t n, float beta)
{
	K->bf16_relu_bwd(y, dy, dx, n, beta);
}

void cpu_bf16_add(const uint16_t *a, const uint16_t *b, uint16_t *y, size_t n)
{
	K->bf16_add(a, b, y, n);
}

void cpu_bf16_accum(const uint16_t *dy, uint16_t *g, size_t n, float beta)
{
	K->bf16_accum(dy, g, n, beta);
}

void cpu_bf16_scale(uint16_t *y, float beta, size_t n)
{
	K->bf16_scale(y, beta, n);
}

void cpu_bf16_from_f32(const float *x, uint16_t *y, size_t n)
{
	K->bf16_from_f32(x, y, n);
}

void cpu_bf16_to_f32(const uint16_t *x, float *y, size_t n)
{
	K->bf16_to_f32(x, y, n);
}
