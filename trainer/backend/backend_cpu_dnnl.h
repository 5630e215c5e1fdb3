/* backend_cpu_dnnl.h — the oneDNN calls backend_cpu.c makes, in oneDNN 3's shape, on oneDNN
 * 3.x (Debian 13: 3.7) and 2.x (Debian 12: 2.6) alike: memory descriptors as handles, primitive
 * descriptors created directly, no dilation. The one place the two APIs differ; the 2.x half
 * goes when Debian 12 stops being a supported platform. Private to backend_cpu.c. */
#ifndef DPTRAIN_BACKEND_CPU_DNNL_H
#define DPTRAIN_BACKEND_CPU_DNNL_H

#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h>

#if DNNL_VERSION_MAJOR >= 3

typedef dnnl_memory_desc_t cpu_md;	  /* a handle: cpu_md_destroy it */
typedef const_dnnl_memory_desc_t cpu_cmd; /* one the library owns (queries) */

static inline dnnl_status_t cpu_md_create(cpu_md *md, int ndims, const dnnl_dims_t dims,
					  dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
	return dnnl_memory_desc_create_with_tag(md, ndims, dims, dt, tag);
}

static inline void cpu_md_destroy(cpu_md md)
{
	dnnl_memory_desc_destroy(md);
}

static inline int cpu_md_ndims(cpu_cmd md)
{
	int n = 0;
	return dnnl_memory_desc_query(md, dnnl_query_ndims_s32, &n) == dnnl_success ? n : 0;
}

static inline dnnl_data_type_t cpu_md_dtype(cpu_cmd md)
{
	dnnl_data_type_t dt = dnnl_data_type_undef;
	return dnnl_memory_desc_query(md, dnnl_query_data_type, &dt) == dnnl_success
		   ? dt
		   : dnnl_data_type_undef;
}

static inline dnnl_status_t cpu_sum_post_op(dnnl_post_ops_t po)
{
	return dnnl_post_ops_append_sum(po, 1.0f, 0, dnnl_data_type_undef);
}

/* dptrain never dilates; oneDNN 3 takes the zero dilation explicitly */
static const dnnl_dims_t cpu_no_dilation = {0, 0};

static inline dnnl_status_t cpu_conv_fwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					    dnnl_prop_kind_t prop, dnnl_alg_kind_t alg, cpu_cmd src,
					    cpu_cmd wei, cpu_cmd bias, cpu_cmd dst,
					    const dnnl_dims_t strides, const dnnl_dims_t pl,
					    const dnnl_dims_t pr)
{
	return dnnl_convolution_forward_primitive_desc_create(
	    pd, eng, prop, alg, src, wei, bias, dst, strides, cpu_no_dilation, pl, pr, NULL);
}

static inline dnnl_status_t cpu_conv_bwd_data_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						 dnnl_alg_kind_t alg, cpu_cmd diff_src, cpu_cmd wei,
						 cpu_cmd diff_dst, const dnnl_dims_t strides,
						 const dnnl_dims_t pl, const dnnl_dims_t pr,
						 const_dnnl_primitive_desc_t hint)
{
	return dnnl_convolution_backward_data_primitive_desc_create(
	    pd, eng, alg, diff_src, wei, diff_dst, strides, cpu_no_dilation, pl, pr, hint, NULL);
}

static inline dnnl_status_t cpu_conv_bwd_weights_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						    dnnl_alg_kind_t alg, cpu_cmd src,
						    cpu_cmd diff_wei, cpu_cmd diff_bias,
						    cpu_cmd diff_dst, const dnnl_dims_t strides,
						    const dnnl_dims_t pl, const dnnl_dims_t pr,
						    const_dnnl_primitive_desc_t hint)
{
	return dnnl_convolution_backward_weights_primitive_desc_create(
	    pd, eng, alg, src, diff_wei, diff_bias, diff_dst, strides, cpu_no_dilation, pl, pr,
	    hint, NULL);
}

static inline dnnl_status_t cpu_pool_fwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					    dnnl_prop_kind_t prop, dnnl_alg_kind_t alg, cpu_cmd src,
					    cpu_cmd dst, const dnnl_dims_t strides,
					    const dnnl_dims_t kernel, const dnnl_dims_t pl,
					    const dnnl_dims_t pr)
{
	return dnnl_pooling_forward_primitive_desc_create(pd, eng, prop, alg, src, dst, strides,
							  kernel, cpu_no_dilation, pl, pr, NULL);
}

static inline dnnl_status_t cpu_pool_bwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					    dnnl_alg_kind_t alg, cpu_cmd diff_src, cpu_cmd diff_dst,
					    const dnnl_dims_t strides, const dnnl_dims_t kernel,
					    const dnnl_dims_t pl, const dnnl_dims_t pr,
					    const_dnnl_primitive_desc_t hint)
{
	return dnnl_pooling_backward_primitive_desc_create(
	    pd, eng, alg, diff_src, diff_dst, strides, kernel, cpu_no_dilation, pl, pr, hint, NULL);
}

static inline dnnl_status_t cpu_ip_fwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					  dnnl_prop_kind_t prop, cpu_cmd src, cpu_cmd wei,
					  cpu_cmd bias, cpu_cmd dst)
{
	return dnnl_inner_product_forward_primitive_desc_create(pd, eng, prop, src, wei, bias, dst,
								NULL);
}

static inline dnnl_status_t cpu_ip_bwd_data_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					       cpu_cmd diff_src, cpu_cmd wei, cpu_cmd diff_dst,
					       const_dnnl_primitive_desc_t hint)
{
	return dnnl_inner_product_backward_data_primitive_desc_create(pd, eng, diff_src, wei,
								      diff_dst, hint, NULL);
}

static inline dnnl_status_t cpu_ip_bwd_weights_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						  cpu_cmd src, cpu_cmd diff_wei, cpu_cmd diff_bias,
						  cpu_cmd diff_dst,
						  const_dnnl_primitive_desc_t hint)
{
	return dnnl_inner_product_backward_weights_primitive_desc_create(
	    pd, eng, src, diff_wei, diff_bias, diff_dst, hint, NULL);
}

#define CPU_ISA_NAMES_3                                                                            \
	{dnnl_cpu_isa_avx2_vnni_2, "avx2_vnni_2"},                                                 \
	    {dnnl_cpu_isa_avx512_core_fp16, "avx512_core_fp16"},                                   \
	    {dnnl_cpu_isa_avx512_core_amx_fp16, "avx512_core_amx_fp16"},

#else /* oneDNN 2.x: operation descriptors, then the primitive descriptor */

typedef dnnl_memory_desc_t *cpu_md;
typedef const dnnl_memory_desc_t *cpu_cmd;

static inline dnnl_status_t cpu_md_create(cpu_md *md, int ndims, const dnnl_dims_t dims,
					  dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
	if (!(*md = malloc(sizeof(**md))))
		return dnnl_out_of_memory;
	return dnnl_memory_desc_init_by_tag(*md, ndims, dims, dt, tag);
}

static inline void cpu_md_destroy(cpu_md md)
{
	free(md);
}

static inline int cpu_md_ndims(cpu_cmd md)
{
	return md->ndims;
}

static inline dnnl_data_type_t cpu_md_dtype(cpu_cmd md)
{
	return md->data_type;
}

static inline dnnl_status_t cpu_sum_post_op(dnnl_post_ops_t po)
{
	return dnnl_post_ops_append_sum(po, 1.0f);
}

/* the primitive descriptor of an operation descriptor whose init returned st */
static inline dnnl_status_t cpu_pd(dnnl_status_t st, dnnl_primitive_desc_t *pd, const void *desc,
				   dnnl_engine_t eng, const_dnnl_primitive_desc_t hint)
{
	return st != dnnl_success ? st : dnnl_primitive_desc_create(pd, desc, NULL, eng, hint);
}

static inline dnnl_status_t cpu_conv_fwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					    dnnl_prop_kind_t prop, dnnl_alg_kind_t alg, cpu_cmd src,
					    cpu_cmd wei, cpu_cmd bias, cpu_cmd dst,
					    const dnnl_dims_t strides, const dnnl_dims_t pl,
					    const dnnl_dims_t pr)
{
	dnnl_convolution_desc_t d;
	return cpu_pd(
	    dnnl_convolution_forward_desc_init(&d, prop, alg, src, wei, bias, dst, strides, pl, pr),
	    pd, &d, eng, NULL);
}

static inline dnnl_status_t cpu_conv_bwd_data_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						 dnnl_alg_kind_t alg, cpu_cmd diff_src, cpu_cmd wei,
						 cpu_cmd diff_dst, const dnnl_dims_t strides,
						 const dnnl_dims_t pl, const dnnl_dims_t pr,
						 const_dnnl_primitive_desc_t hint)
{
	dnnl_convolution_desc_t d;
	return cpu_pd(dnnl_convolution_backward_data_desc_init(&d, alg, diff_src, wei, diff_dst,
							       strides, pl, pr),
		      pd, &d, eng, hint);
}

static inline dnnl_status_t cpu_conv_bwd_weights_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						    dnnl_alg_kind_t alg, cpu_cmd src,
						    cpu_cmd diff_wei, cpu_cmd diff_bias,
						    cpu_cmd diff_dst, const dnnl_dims_t strides,
						    const dnnl_dims_t pl, const dnnl_dims_t pr,
						    const_dnnl_primitive_desc_t hint)
{
	dnnl_convolution_desc_t d;
	return cpu_pd(dnnl_convolution_backward_weights_desc_init(&d, alg, src, diff_wei, diff_bias,
								  diff_dst, strides, pl, pr),
		      pd, &d, eng, hint);
}

static inline dnnl_status_t cpu_pool_fwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					    dnnl_prop_kind_t prop, dnnl_alg_kind_t alg, cpu_cmd src,
					    cpu_cmd dst, const dnnl_dims_t strides,
					    const dnnl_dims_t kernel, const dnnl_dims_t pl,
					    const dnnl_dims_t pr)
{
	dnnl_pooling_desc_t d;
	return cpu_pd(
	    dnnl_pooling_forward_desc_init(&d, prop, alg, src, dst, strides, kernel, pl, pr), pd,
	    &d, eng, NULL);
}

static inline dnnl_status_t cpu_pool_bwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					    dnnl_alg_kind_t alg, cpu_cmd diff_src, cpu_cmd diff_dst,
					    const dnnl_dims_t strides, const dnnl_dims_t kernel,
					    const dnnl_dims_t pl, const dnnl_dims_t pr,
					    const_dnnl_primitive_desc_t hint)
{
	dnnl_pooling_desc_t d;
	return cpu_pd(
	    dnnl_pooling_backward_desc_init(&d, alg, diff_src, diff_dst, strides, kernel, pl, pr),
	    pd, &d, eng, hint);
}

static inline dnnl_status_t cpu_ip_fwd_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					  dnnl_prop_kind_t prop, cpu_cmd src, cpu_cmd wei,
					  cpu_cmd bias, cpu_cmd dst)
{
	dnnl_inner_product_desc_t d;
	return cpu_pd(dnnl_inner_product_forward_desc_init(&d, prop, src, wei, bias, dst), pd, &d,
		      eng, NULL);
}

static inline dnnl_status_t cpu_ip_bwd_data_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
					       cpu_cmd diff_src, cpu_cmd wei, cpu_cmd diff_dst,
					       const_dnnl_primitive_desc_t hint)
{
	dnnl_inner_product_desc_t d;
	return cpu_pd(dnnl_inner_product_backward_data_desc_init(&d, diff_src, wei, diff_dst), pd,
		      &d, eng, hint);
}

static inline dnnl_status_t cpu_ip_bwd_weights_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng,
						  cpu_cmd src, cpu_cmd diff_wei, cpu_cmd diff_bias,
						  cpu_cmd diff_dst,
						  const_dnnl_primitive_desc_t hint)
{
	dnnl_inner_product_desc_t d;
	return cpu_pd(
	    dnnl_inner_product_backward_weights_desc_init(&d, src, diff_wei, diff_bias, diff_dst),
	    pd, &d, eng, hint);
}

#define CPU_ISA_NAMES_3

#endif /* DNNL_VERSION_MAJOR */

#endif
