/* nn_io.c — a model's weights to and from safetensors, with PyTorch state_dict names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/nn/nn.h"
#include "trainer/ckpt/safetensors.h"

/* state_dict order: per module, weight, bias, then BN's running_mean, running_var,
 * num_batches_tracked */
struct io_item {
	char name[NN_NAME_MAX + 24];
	int ndim;
	int64_t shape[4];
	int is_state; /* 0 param, 1 BN buffer, 2 num_batches_tracked */
	size_t offset, count;
};

static int list_items(const struct nn_model *m, struct io_item **out)
{
	int n = 0;
	struct io_item *it = calloc((size_t)(m->nparams + 3 * m->nbufs + 1), sizeof(*it));
	if (!it)
		return -1;
	/* Registration order is PyTorch's state_dict order (a BN layer's buffers follow its
	 * bias); node order may differ where nn_build fused layers. */
	for (int i = 0; i < m->nparams; i++) {
		const struct nn_param *p = &m->params[i];
		const struct nn_node *nd = &m->nodes[p->node];
		struct io_item *x = &it[n++];
		snprintf(x->name, sizeof(x->name), "%s", p->name);
		x->ndim = p->ndim;
		for (int d = 0; d < p->ndim; d++)
			x->shape[d] = p->shape[d];
		x->offset = p->offset;
		x->count = p->count;
		if (nd->kind != NN_BN || i != nd->b)
			continue;
		const int bidx[2] = {nd->rmean, nd->rvar};
		for (int j = 0; j < 2; j++) {
			const struct nn_buffer *q = &m->bufs[bidx[j]];
			x = &it[n++];
			snprintf(x->name, sizeof(x->name), "%s", q->name);
			x->ndim = 1;
			x->shape[0] = q->c;
			x->is_state = 1;
			x->offset = q->offset;
			x->count = q->count;
		}
		x = &it[n++];
		snprintf(x->name, sizeof(x->name), "%s.num_batches_tracked", nd->name);
		x->ndim = 0;
		x->is_state = 2;
		x->count = 1;
	}
	*out = it;
	return n;
}

int nn_save_weights(const struct nn_model *m, const char *path, const char *metadata_json,
		    struct dp_error *err)
{
	int rv = -1;
	struct io_item *it = NULL;
	struct st_entry *e = NULL;
	float *w = malloc((m->param_total ? m->param_total : 1) * sizeof(float));
	float *s = malloc((m->state_total ? m->state_total : 1) * sizeof(float));
	int64_t nbt = m->batches_tracked;
	int n = list_items(m, &it);
	if (!w || !s || n < 0 || !(e = calloc((size_t)n + 1, sizeof(*e)))) {
		errprintf(err, "%s: out of memory", path);
		goto out;
	}
	if (m->be->ops->to_host(m->be, w, m->weights, m->param_total * sizeof(float)) < 0 ||
	    m->be->ops->to_host(m->be, s, m->state, m->state_total * sizeof(float)) < 0) {
		errprintf(err, "%s: %s", path, m->be->err.text);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		e[i].name = it[i].name;
		e[i].ndim = it[i].ndim;
		e[i].shape = it[i].shape;
		if (it[i].is_state == 2) {
			e[i].dtype = "I64";
			e[i].data = &nbt;
			e[i].nbytes = sizeof(nbt);
		} else {
			e[i].dtype = "F32";
			e[i].data = (it[i].is_state ? s : w) + it[i].offset;
			e[i].nbytes = it[i].count * sizeof(float);
		}
	}
	rv = st_write_atomic(path, e, n, metadata_json, err);
out:
	free(w);
	free(s);
	free(it);
	free(e);
	return rv;
}

static float half_to_float(uint16_t h, int bf16)
{
	if (bf16) {
		uint32_t u = (uint32_t)h << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
	float v;
	if (exp == 0)
		v = ldexpf((float)man, -24);
	else if (exp == 31)
		v = man ? NAN : INFINITY;
	else
		v = ldexpf((float)(man | 1024), exp - 25);
	return sign ? -v : v;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
}

int nn_load_weights(struct nn_model *m, const char *path, struct dp_error *err)
{
	int rv = -1;
	struct st_file f;
	struct io_item *it = NULL;
	float *w = NULL, *s = NULL;
	int64_t nbt = -1;
	if (st_open(&f, path, err) < 0)
		return -1;
	int n = list_items(m, &it);
	w = calloc(m->param_total ? m->param_total : 1, sizeof(float));
	s = calloc(m->state_total ? m->state_total : 1, sizeof(float));
	if (n < 0 || !w || !s) {
		errprintf(err, "%s: out of memory", path);
		goto out;
	}
	int used = 0;
	for (int i = 0; i < n; i++) {
		const struct st_tensor *t = st_find(&f, it[i].name);
		if (!t) {
			if (it[i].is_state == 2)
				continue; /* older exports omit num_batches_tracked */
			errprintf(
			    err,
			    "%s: tensor \"%s\" is missing (the file has %d tensors; is it a %s "
			    "checkpoint?)",
			    path, it[i].name, f.n, m->name);
			goto out;
		}
		used++;
		int same = t->ndim == it[i].ndim;
		for (int d = 0; same && d < t->ndim; d++)
			same = t->shape[d] == it[i].shape[d];
		if (!same) {
			char a[96], b[96];
			shape_str(a, sizeof(a), t->ndim, t->shape);
			shape_str(b, sizeof(b), it[i].ndim, it[i].shape);
			errprintf(err, "%s: tensor \"%s\" has shape %s, model %s expects %s", path,
				  it[i].name, a, m->name, b);
			goto out;
		}
		const unsigned char *src = st_data(&f, t);
		if (it[i].is_state == 2) {
			if (strcmp(t->dtype, "I64") != 0) {
				errprintf(err, "%s: tensor \"%s\": expected I64, got %s", path,
					  it[i].name, t->dtype);
				goto out;
			}
			memcpy(&nbt, src, sizeof(nbt));
			continue;
		}
		float *dst = (it[i].is_state ? s : w) + it[i].offset;
		for (size_t j = 0; j < it[i].count; j++) {
			if (strcmp(t->dtype, "F32") == 0) {
				memcpy(&dst[j], src + 4 * j, 4);
			} else if (strcmp(t->dtype, "F64") == 0) {
				double d;
				memcpy(&d, src + 8 * j, 8);
				dst[j] = (float)d;
			} else if (strcmp(t->dtype, "F16") == 0 || strcmp(t->dtype, "BF16") == 0) {
				uint16_t h;
				memcpy(&h, src + 2 * j, 2);
				dst[j] = half_to_float(h, t->dtype[0] == 'B');
			} else {
				errprintf(
				    err, "%s: tensor \"%s\": dtype %s is not a floating-point type",
				    path, it[i].name, t->dtype);
				goto out;
			}
		}
	}
	if (used != f.n) {
		for (int j = 0; j < f.n; j++) {
			int known = 0;
			for (int i = 0; i < n && !known; i++)
				known = strcmp(f.t[j].name, it[i].name) == 0;
			if (!known) {
				errprintf(
				    err,
				    "%s: tensor \"%s\" is not part of model %s (wrong model or "
				    "num_classes?)",
				    path, f.t[j].name, m->name);
				goto out;
			}
		}
	}
	if (m->be->ops->from_host(m->be, m->weights, w, m->param_total * sizeof(float)) < 0 ||
	    m->be->ops->from_host(m->be, m->state, s, m->state_total * sizeof(float)) < 0) {
		errprintf(err, "%s: %s", path, m->be->err.text);
		goto out;
	}
	if (nbt >= 0)
		m->batches_tracked = nbt;
	rv = 0;
out:
	st_close(&f);
	free(it);
	free(w);
	free(s);
	return rv;
}
