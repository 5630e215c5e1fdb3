/* rt_json.c — the rank table's on-disk forms: reads the dptrain, HCCL v1.0 and MindSpore legacy
 * schemas (autodetected) into a struct ranktable and writes it back in any of them. Owns JSON
 * and the JSON paths of messages; what makes a table valid lives in rt_validate.c, files in
 * rt_io.c. */
#include "common/error.h"
#include "ranktable/rt_internal.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_DPTRAIN_VERSION 1 /* of the "dptrain" object; a reader refuses newer ones */

/* ------------------------------------------------------------------------------------------
 * Typed access with JSON-path messages. Each writes "PATH: what is wrong" into err. */

static const char *jtype(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "object";
	case JSON_ARRAY:
		return "array";
	case JSON_STRING:
		return "string";
	case JSON_INTEGER:
		return "integer";
	case JSON_REAL:
		return "real";
	case JSON_TRUE:
	case JSON_FALSE:
		return "boolean";
	case JSON_NULL:
		return "null";
	}
	return "unknown";
}

/* obj.key; `at` is obj's path ("" for the top level). Absent and optional: *out = NULL. */
static int jget(const json_t *obj, const char *at, const char *key, int required, json_t **out,
		struct dp_error *err)
{
	*out = json_object_get(obj, key);
	if (!*out && required)
		return errprintf(err, "%s%smissing key \"%s\"", at, *at ? ": " : "", key);
	return 0;
}

static int jobject(const json_t *v, const char *path, struct dp_error *err)
{
	if (!json_is_object(v))
		return errprintf(err, "%s: expected an object, got %s", path, jtype(v));
	return 0;
}

static int jarray(const json_t *v, const char *path, struct dp_error *err)
{
	if (!json_is_array(v))
		return errprintf(err, "%s: expected an array, got %s", path, jtype(v));
	return 0;
}

/* A string that fits in size bytes with its NUL. */
static int jstring(const json_t *v, const char *path, char *buf, size_t size, struct dp_error *err)
{
	if (!json_is_string(v))
		return errprintf(err, "%s: expected a string, got %s", path, jtype(v));
	if (json_string_length(v) >= size)
		return errprintf(err, "%s: \"%.40s...\" is longer than %zu characters", path,
				 json_string_value(v), size - 1);
	memcpy(buf, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

/* HCCL's convention: an integer as a string ("3"); real tools sometimes write the number
 * itself, which is accepted. Range 0..max. */
static int jstrint(const json_t *v, const char *path, int max, int *out, struct dp_error *err)
{
	long long val = 0;

	if (json_is_integer(v)) {
		val = json_integer_value(v);
	} else if (json_is_string(v)) {
		const char *s = json_string_value(v);
		size_t len = json_string_length(v);
		int digits = len >= 1 && len <= 10;
		for (size_t i = 0; digits && i < len; i++)
			digits = s[i] >= '0' && s[i] <= '9';
		if (!digits)
			return errprintf(err,
					 "%s: expected a string holding an integer, got \"%.40s\"",
					 path, s);
		val = strtoll(s, NULL, 10);
	} else {
		return errprintf(err, "%s: expected a string holding an integer, got %s", path,
				 jtype(v));
	}
	if (val < 0 || val > max)
		return errprintf(err, "%s: %lld is out of range (0..%d)", path, val, max);
	*out = (int)val;
	return 0;
}

/* Our own object uses JSON integers, strictly. */
static int jint(const json_t *v, const char *path, int min, int max, int *out, struct dp_error *err)
{
	if (!json_is_integer(v))
		return errprintf(err, "%s: expected an integer, got %s", path, jtype(v));
	json_int_t val = json_integer_value(v);
	if (val < min || val > max)
		return errprintf(err, "%s: %lld is out of range (%d..%d)", path, (long long)val,
				 min, max);
	*out = (int)val;
	return 0;
}

static int jaddress(const json_t *v, const char *path, char buf[RT_ADDR_MAX], struct dp_error *err)
{
	if (!json_is_string(v))
		return errprintf(err, "%s: expected a string, got %s", path, jtype(v));
	const char *s = json_string_value(v);
	if (json_string_length(v) >= RT_ADDR_MAX || !rt_is_address(s))
		return errprintf(err, "%s: \"%.64s\" is not an IPv4 or IPv6 address", path, s);
	memcpy(buf, s, json_string_length(v) + 1);
	return 0;
}

/* obj.key, required, through the checks above; `at` is obj's path ("" at the top level). */
static const char *jpath(char *buf, size_t size, const char *at, const char *key)
{
	snprintf(buf, size, "%s%s%s", at, *at ? "." : "", key);
	return buf;
}

static int jint_at(const json_t *obj, const char *at, const char *key, int min, int max, int *out,
		   struct dp_error *err)
{
	json_t *v;
	char path[192];
	if (jget(obj, at, key, 1, &v, err) < 0)
		return -1;
	return jint(v, jpath(path, sizeof(path), at, key), min, max, out, err);
}

static int jstrint_at(const json_t *obj, const char *at, const char *key, int max, int *out,
		      struct dp_error *err)
{
	json_t *v;
	char path[192];
	if (jget(obj, at, key, 1, &v, err) < 0)
		return -1;
	return jstrint(v, jpath(path, sizeof(path), at, key), max, out, err);
}

static int jstring_at(const json_t *obj, const char *at, const char *key, char *buf, size_t size,
		      struct dp_error *err)
{
	json_t *v;
	char path[192];
	if (jget(obj, at, key, 1, &v, err) < 0)
		return -1;
	return jstring(v, jpath(path, sizeof(path), at, key), buf, size, err);
}

static int jaddress_at(const json_t *obj, const char *at, const char *key, char buf[RT_ADDR_MAX],
		       struct dp_error *err)
{
	json_t *v;
	char path[192];
	if (jget(obj, at, key, 1, &v, err) < 0)
		return -1;
	return jaddress(v, jpath(path, sizeof(path), at, key), buf, err);
}

/* Every key of obj must be one of keys (our own object: a misspelt key is an error). */
static int jknown_keys(const json_t *obj, const char *at, const char *const *keys,
		       struct dp_error *err)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)obj, key, v)
	{
		int known = 0;
		for (int i = 0; keys[i]; i++)
			known |= strcmp(key, keys[i]) == 0;
		if (!known)
			return errprintf(err, "%s: unknown key \"%.64s\"", at, key);
	}
	return 0;
}

/* "completed" is the only state in which HCCL readers may use a table; absent is accepted. */
static int jstatus(const json_t *root, struct dp_error *err)
{
	json_t *v;
	char status[32];
	jget(root, "", "status", 0, &v, err);
	if (!v)
		return 0;
	if (jstring(v, "status", status, sizeof(status), err) < 0)
		return -1;
	if (strcmp(status, "completed") != 0)
		return errprintf(
		    err, "status: \"%s\": the table is not complete (expected \"completed\")",
		    status);
	return 0;
}

/* ------------------------------------------------------------------------------------------
 * Reading. Each schema's reader collects the ranks in document order (tmp, tloc, ids), then
 * rt_place puts them at their rank ids. */

struct rt_doc {
	int n; /* devices = ranks */
	struct rt_rank *tmp;
	struct rt_loc *tloc;
	int *ids;
};

static int rt_doc_alloc(struct rt_doc *d, int n, struct dp_error *err)
{
	d->n = n;
	d->tmp = calloc((size_t)n, sizeof(*d->tmp));
	d->tloc = calloc((size_t)n, sizeof(*d->tloc));
	d->ids = calloc((size_t)n, sizeof(*d->ids));
	if (!d->tmp || !d->tloc || !d->ids)
		return errprintf(err, "out of memory reading %d ranks", n);
	return 0;
}

static void rt_doc_free(struct rt_doc *d)
{
	free(d->tmp);
	free(d->tloc);
	free(d->ids);
	memset(d, 0, sizeof(*d));
}

static void hccl_rank_path(char *buf, size_t size, const void *ctx, int e)
{
	const struct rt_loc *l = (const struct rt_loc *)ctx + e;
	snprintf(buf, size, "server_list[%d].device[%d].rank_id", l->i, l->j);
}

static void legacy_rank_path(char *buf, size_t size, const void *ctx, int e)
{
	const struct rt_loc *l = (const struct rt_loc *)ctx + e;
	snprintf(buf, size, "group_list[0].instance_list[%d].rank_id", l->j);
}

static void dptrain_rank_path(char *buf, size_t size, const void *ctx, int e)
{
	(void)ctx;
	snprintf(buf, size, "dptrain.ranks[%d].rank", e);
}

/* Put document-order ranks at their ids; local ranks count a node's ranks in rank order. */
static int rt_place(struct ranktable *rt, struct rt_loc **locp, const struct rt_doc *d, int nodes,
		    void (*path)(char *, size_t, const void *, int), struct dp_error *err)
{
	int *inv = malloc((size_t)d->n * sizeof(int)), *count = calloc((size_t)nodes, sizeof(int));
	int rv = -1;

	rt->ranks = calloc((size_t)d->n, sizeof(*rt->ranks));
	*locp = calloc((size_t)d->n, sizeof(**locp));
	if (!inv || !count || !rt->ranks || !*locp) {
		errprintf(err, "out of memory reading %d ranks", d->n);
		goto out;
	}
	if (rt_check_ranks(d->ids, d->n, inv, path, d->tloc, "", err) < 0)
		goto out;
	rt->world_size = d->n;
	rt->node_count = nodes;
	for (int r = 0; r < d->n; r++) {
		rt->ranks[r] = d->tmp[inv[r]];
		rt->ranks[r].local_rank = count[rt->ranks[r].node_rank]++;
		(*locp)[r] = d->tloc[inv[r]];
	}
	rv = 0;
out:
	free(inv);
	free(count);
	return rv;
}

static int rt_read_hccl(const json_t *root, struct ranktable *rt, struct rt_loc **locp,
			struct dp_error *err)
{
	struct rt_doc d = {0};
	json_t *list, *nic;
	char at[96], version[16];
	int count, n = 0, rv = -1;

	if (jstring_at(root, "", "version", version, sizeof(version), err) < 0)
		goto out;
	/* 1.x share server_list[].device[] (later ones add fields this reader does not need). */
	if (strncmp(version, "1.", 2) != 0 || !version[2] ||
	    strspn(version + 2, "0123456789") != strlen(version + 2)) {
		errprintf(err,
			  "version: \"%s\" is not a rank-table version this reader knows (\"1.0\")",
			  version);
		goto out;
	}
	if (jstrint_at(root, "", "server_count", RT_WORLD_MAX, &count, err) < 0 ||
	    jget(root, "", "server_list", 1, &list, err) < 0 ||
	    jarray(list, "server_list", err) < 0 || jstatus(root, err) < 0)
		goto out;
	if ((size_t)count != json_array_size(list)) {
		errprintf(err, "server_count: %d but server_list has %zu server%s", count,
			  json_array_size(list), json_array_size(list) == 1 ? "" : "s");
		goto out;
	}
	if (count == 0) {
		errprintf(err, "server_list: no servers");
		goto out;
	}
	/* First pass: shapes and the number of devices, so that one allocation fits them. */
	for (int i = 0; i < count; i++) {
		json_t *server = json_array_get(list, (size_t)i), *devs;
		snprintf(at, sizeof(at), "server_list[%d]", i);
		if (jobject(server, at, err) < 0 || jget(server, at, "device", 1, &devs, err) < 0)
			goto out;
		snprintf(at, sizeof(at), "server_list[%d].device", i);
		if (jarray(devs, at, err) < 0)
			goto out;
		if (json_array_size(devs) == 0) {
			errprintf(err, "%s: a server with no devices", at);
			goto out;
		}
		if (json_array_size(devs) > (size_t)(RT_WORLD_MAX - n)) {
			errprintf(err, "%s: more than %d devices in the table", at, RT_WORLD_MAX);
			goto out;
		}
		n += (int)json_array_size(devs);
	}
	if (rt_doc_alloc(&d, n, err) < 0)
		goto out;
	for (int i = 0, e = 0; i < count; i++) {
		json_t *server = json_array_get(list, (size_t)i),
		       *devs = json_object_get(server, "device");
		char server_id[RT_ADDR_MAX];
		snprintf(at, sizeof(at), "server_list[%d]", i);
		if (jaddress_at(server, at, "server_id", server_id, err) < 0)
			goto out;
		/* "reserve" is what hccl_tools.py writes: HCCL does not use the host NIC. */
		nic = json_object_get(server, "host_nic_ip");
		if (nic &&
		    !(json_is_string(nic) && (strcmp(json_string_value(nic), "reserve") == 0 ||
					      rt_is_address(json_string_value(nic))))) {
			if (!json_is_string(nic))
				errprintf(err, "%s.host_nic_ip: expected a string, got %s", at,
					  jtype(nic));
			else
				errprintf(
				    err,
				    "%s.host_nic_ip: \"%.64s\" is not an IPv4 or IPv6 address "
				    "or \"reserve\"",
				    at, json_string_value(nic));
			goto out;
		}
		for (int j = 0; j < (int)json_array_size(devs); j++, e++) {
			json_t *dev = json_array_get(devs, (size_t)j);
			struct rt_rank *x = &d.tmp[e];
			snprintf(at, sizeof(at), "server_list[%d].device[%d]", i, j);
			if (jobject(dev, at, err) < 0 ||
			    jstrint_at(dev, at, "device_id", INT_MAX, &x->device_id, err) < 0 ||
			    jaddress_at(dev, at, "device_ip", x->addr, err) < 0 ||
			    jstrint_at(dev, at, "rank_id", INT_MAX, &d.ids[e], err) < 0)
				goto out;
			/* What HCCL does not carry: the node's name is its address, no GPU known.
			 */
			memcpy(x->server_id, server_id, sizeof(server_id));
			memcpy(x->host, server_id, sizeof(server_id));
			x->node_rank = i;
			x->gpu = -1;
			d.tloc[e] = (struct rt_loc){i, j, -1};
		}
	}
	rv = rt_place(rt, locp, &d, count, hccl_rank_path, err);
out:
	rt_doc_free(&d);
	return rv;
}

/* The "dptrain" object over a table read from server_list: fills what HCCL lacks and checks it
 * agrees with server_list. */
static int rt_read_dptrain(const json_t *obj, struct ranktable *rt, struct rt_loc *loc,
			   struct dp_error *err)
{
	static const char *const keys[] = {"version", "world_size", "master_addr", "master_port",
					   "job_id",  "step_id",    "ranks",	   NULL};
	static const char *const rank_keys[] = {"rank",	      "host", "node_rank",
						"local_rank", "gpu",  NULL};
	json_t *ranks;
	char at[64];
	int version, world, *ids = NULL, *inv = NULL, rv = -1;
	struct rt_rank *got = NULL; /* document order; host, node_rank, local_rank, gpu */

	if (jobject(obj, "dptrain", err) < 0 || jknown_keys(obj, "dptrain", keys, err) < 0 ||
	    jint_at(obj, "dptrain", "version", 1, INT_MAX, &version, err) < 0)
		goto out;
	if (version > RT_DPTRAIN_VERSION) {
		errprintf(err, "dptrain.version: %d is newer than this reader (%d): update dptrain",
			  version, RT_DPTRAIN_VERSION);
		goto out;
	}
	if (jint_at(obj, "dptrain", "world_size", 1, RT_WORLD_MAX, &world, err) < 0)
		goto out;
	if (world != rt->world_size) {
		errprintf(err, "dptrain.world_size: %d but server_list has %d device%s", world,
			  rt->world_size, rt->world_size == 1 ? "" : "s");
		goto out;
	}
	/* Optional: absent when unknown. */
	if (json_object_get(obj, "master_addr") &&
	    jstring_at(obj, "dptrain", "master_addr", rt->master_addr, sizeof(rt->master_addr),
		       err) < 0)
		goto out;
	if (json_object_get(obj, "master_port") &&
	    jint_at(obj, "dptrain", "master_port", 1, 65535, &rt->master_port, err) < 0)
		goto out;
	if (json_object_get(obj, "job_id") &&
	    jstring_at(obj, "dptrain", "job_id", rt->job_id, sizeof(rt->job_id), err) < 0)
		goto out;
	if (json_object_get(obj, "step_id") &&
	    jstring_at(obj, "dptrain", "step_id", rt->step_id, sizeof(rt->step_id), err) < 0)
		goto out;
	if (jget(obj, "dptrain", "ranks", 1, &ranks, err) < 0 ||
	    jarray(ranks, "dptrain.ranks", err) < 0)
		goto out;
	if (json_array_size(ranks) != (size_t)world) {
		errprintf(err, "dptrain.ranks: %zu entr%s but dptrain.world_size is %d",
			  json_array_size(ranks), json_array_size(ranks) == 1 ? "y" : "ies", world);
		goto out;
	}
	ids = malloc((size_t)world * sizeof(int));
	inv = malloc((size_t)world * sizeof(int));
	got = calloc((size_t)world, sizeof(*got));
	if (!ids || !inv || !got) {
		errprintf(err, "out of memory reading %d ranks", world);
		goto out;
	}
	for (int k = 0; k < world; k++) {
		json_t *x = json_array_get(ranks, (size_t)k);
		snprintf(at, sizeof(at), "dptrain.ranks[%d]", k);
		if (jobject(x, at, err) < 0 || jknown_keys(x, at, rank_keys, err) < 0 ||
		    jint_at(x, at, "rank", 0, INT_MAX, &ids[k], err) < 0 ||
		    jstring_at(x, at, "host", got[k].host, sizeof(got[k].host), err) < 0 ||
		    jint_at(x, at, "node_rank", 0, INT_MAX, &got[k].node_rank, err) < 0 ||
		    jint_at(x, at, "local_rank", 0, INT_MAX, &got[k].local_rank, err) < 0 ||
		    jint_at(x, at, "gpu", -1, INT_MAX, &got[k].gpu, err) < 0)
			goto out;
	}
	if (rt_check_ranks(ids, world, inv, dptrain_rank_path, NULL, "dptrain.ranks", err) < 0)
		goto out;
	for (int r = 0; r < world; r++) {
		int k = inv[r];
		struct rt_rank *x = &rt->ranks[r];
		if (got[k].node_rank != x->node_rank) {
			errprintf(
			    err,
			    "dptrain.ranks[%d].node_rank: %d but rank %d is in server_list[%d]", k,
			    got[k].node_rank, r, x->node_rank);
			goto out;
		}
		memcpy(x->host, got[k].host, sizeof(x->host));
		x->local_rank = got[k].local_rank;
		x->gpu = got[k].gpu;
		loc[r].k = k;
	}
	rv = 0;
out:
	free(ids);
	free(inv);
	free(got);
	return rv;
}

struct legacy_server {
	const char *id;
	int first; /* document index: of this instance, then of the server's first instance */
	int run;   /* which distinct server_id */
};

static int legacy_id_cmp(const void *a, const void *b)
{
	const struct legacy_server *x = a, *y = b;
	int c = strcmp(x->id, y->id);
	return c ? c : (x->first > y->first) - (x->first < y->first);
}

static int legacy_first_cmp(const void *a, const void *b)
{
	const struct legacy_server *x = a, *y = b;
	return (x->first > y->first) - (x->first < y->first);
}

/* Nodes of a legacy table: its distinct server_ids, numbered in order of first appearance. */
static int legacy_nodes(struct rt_doc *d, int *nodes, struct dp_error *err)
{
	int n = d->n, m = 0, rv = -1;
	struct legacy_server *s = malloc((size_t)n * sizeof(*s)),
			     *runs = malloc((size_t)n * sizeof(*s));
	int *run_of = malloc((size_t)n * sizeof(int)), *node_of = malloc((size_t)n * sizeof(int));

	if (!s || !runs || !run_of || !node_of) {
		errprintf(err, "out of memory reading %d ranks", n);
		goto out;
	}
	for (int e = 0; e < n; e++)
		s[e] = (struct legacy_server){d->tmp[e].server_id, e, 0};
	qsort(s, (size_t)n, sizeof(*s), legacy_id_cmp);
	for (int q = 0; q < n; q++) {
		if (q == 0 || strcmp(s[q].id, s[q - 1].id) != 0) {
			runs[m] = (struct legacy_server){s[q].id, s[q].first, m};
			m++;
		}
		run_of[s[q].first] = m - 1;
	}
	qsort(runs, (size_t)m, sizeof(*runs), legacy_first_cmp);
	for (int node = 0; node < m; node++)
		node_of[runs[node].run] = node;
	for (int e = 0; e < n; e++)
		d->tmp[e].node_rank = node_of[run_of[e]];
	*nodes = m;
	rv = 0;
out:
	free(s);
	free(runs);
	free(run_of);
	free(node_of);
	return rv;
}

static int rt_read_legacy(const json_t *root, struct ranktable *rt, struct rt_loc **locp,
			  struct dp_error *err)
{
	static const char *const g = "group_list[0]";
	struct rt_doc d = {0};
	json_t *groups, *group, *list;
	char at[96];
	int ngroups, device_num, server_num, instance_count, nodes, rv = -1;

	if (jstrint_at(root, "", "group_count", INT_MAX, &ngroups, err) < 0 ||
	    jget(root, "", "group_list", 1, &groups, err) < 0 ||
	    jarray(groups, "group_list", err) < 0 || jstatus(root, err) < 0)
		goto out;
	if ((size_t)ngroups != json_array_size(groups)) {
		errprintf(err, "group_count: %d but group_list has %zu group%s", ngroups,
			  json_array_size(groups), json_array_size(groups) == 1 ? "" : "s");
		goto out;
	}
	if (ngroups != 1) {
		errprintf(err, "group_list: %d groups: dptrain reads tables with exactly one group",
			  ngroups);
		goto out;
	}
	group = json_array_get(groups, 0);
	if (jobject(group, g, err) < 0 ||
	    jstrint_at(group, g, "device_num", INT_MAX, &device_num, err) < 0 ||
	    jstrint_at(group, g, "server_num", INT_MAX, &server_num, err) < 0 ||
	    jstrint_at(group, g, "instance_count", INT_MAX, &instance_count, err) < 0 ||
	    jget(group, g, "instance_list", 1, &list, err) < 0 ||
	    jarray(list, "group_list[0].instance_list", err) < 0)
		goto out;
	if ((size_t)instance_count != json_array_size(list)) {
		errprintf(
		    err, "group_list[0].instance_count: %d but instance_list has %zu instance%s",
		    instance_count, json_array_size(list), json_array_size(list) == 1 ? "" : "s");
		goto out;
	}
	if (instance_count == 0 || instance_count > RT_WORLD_MAX) {
		errprintf(err, "group_list[0].instance_list: %d instances (expected 1..%d)",
			  instance_count, RT_WORLD_MAX);
		goto out;
	}
	if (rt_doc_alloc(&d, instance_count, err) < 0)
		goto out;
	for (int j = 0; j < instance_count; j++) {
		json_t *inst = json_array_get(list, (size_t)j), *devs, *dev;
		struct rt_rank *x = &d.tmp[j];
		snprintf(at, sizeof(at), "group_list[0].instance_list[%d]", j);
		if (jobject(inst, at, err) < 0 ||
		    jstrint_at(inst, at, "rank_id", INT_MAX, &d.ids[j], err) < 0 ||
		    jaddress_at(inst, at, "server_id", x->server_id, err) < 0 ||
		    jget(inst, at, "devices", 1, &devs, err) < 0)
			goto out;
		snprintf(at, sizeof(at), "group_list[0].instance_list[%d].devices", j);
		if (jarray(devs, at, err) < 0)
			goto out;
		if (json_array_size(devs) != 1) {
			errprintf(err,
				  "%s: %zu devices: dptrain reads one device per instance (rank)",
				  at, json_array_size(devs));
			goto out;
		}
		dev = json_array_get(devs, 0);
		snprintf(at, sizeof(at), "group_list[0].instance_list[%d].devices[0]", j);
		if (jobject(dev, at, err) < 0 ||
		    jstrint_at(dev, at, "device_id", INT_MAX, &x->device_id, err) < 0 ||
		    jaddress_at(dev, at, "device_ip", x->addr, err) < 0)
			goto out;
		memcpy(x->host, x->server_id, sizeof(x->server_id));
		x->gpu = -1;
		d.tloc[j] = (struct rt_loc){0, j, -1};
	}
	if (device_num != instance_count) {
		errprintf(err, "group_list[0].device_num: %d but instance_list has %d device%s",
			  device_num, instance_count, instance_count == 1 ? "" : "s");
		goto out;
	}
	if (legacy_nodes(&d, &nodes, err) < 0)
		goto out;
	if (server_num != nodes) {
		errprintf(err, "group_list[0].server_num: %d but instance_list names %d server%s",
			  server_num, nodes, nodes == 1 ? "" : "s");
		goto out;
	}
	rv = rt_place(rt, locp, &d, nodes, legacy_rank_path, err);
out:
	rt_doc_free(&d);
	return rv;
}

/* A hint when jansson stopped at the ']' or '}' after a trailing comma (as in the legacy example
 * of MindSpore's documentation): `position` is the offset just past the token it stopped at. */
static const char *rt_trailing_comma(const char *text, size_t len, int position)
{
	if (position < 2 || (size_t)position > len)
		return "";
	char close = text[position - 1];
	if (close != ']' && close != '}')
		return "";
	for (int i = position - 2; i >= 0; i--) {
		if (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')
			continue;
		if (text[i] != ',')
			return "";
		return close == ']' ? " (JSON allows no comma before ']')"
				    : " (JSON allows no comma before '}')";
	}
	return "";
}

int rt_parse(struct ranktable *rt, const char *text, size_t len, const char *name,
	     struct dp_error *err)
{
	json_error_t je;
	json_t *root = NULL, *dp;
	struct rt_loc *loc = NULL;
	struct rt_where where;
	int rv = -1;

	memset(rt, 0, sizeof(*rt));
	if (!name)
		name = "<input>";
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		errprintf(err, "line %d column %d: JSON parse error: %s%s", je.line, je.column,
			  je.text, rt_trailing_comma(text, len, je.position));
		goto out;
	}
	if (!json_is_object(root)) {
		errprintf(err, "expected a JSON object at the top level, got %s", jtype(root));
		goto out;
	}
	int has_servers = json_object_get(root, "server_list") != NULL;
	int has_groups = json_object_get(root, "group_list") != NULL;
	dp = json_object_get(root, "dptrain");
	if (has_servers && has_groups) {
		errprintf(err,
			  "both \"server_list\" (HCCL v1.0) and \"group_list\" (MindSpore legacy): "
			  "a rank table has one of them");
		goto out;
	}
	if (has_servers) {
		if (rt_read_hccl(root, rt, &loc, err) < 0 ||
		    (dp && rt_read_dptrain(dp, rt, loc, err) < 0))
			goto out;
		rt->schema = dp ? RT_SCHEMA_DPTRAIN : RT_SCHEMA_HCCL;
	} else if (has_groups) {
		if (dp) {
			errprintf(err,
				  "dptrain: the \"dptrain\" object goes with server_list (HCCL "
				  "v1.0), not with group_list");
			goto out;
		}
		if (rt_read_legacy(root, rt, &loc, err) < 0)
			goto out;
		rt->schema = RT_SCHEMA_LEGACY;
	} else {
		errprintf(
		    err,
		    "neither \"server_list\" (HCCL v1.0) nor \"group_list\" (MindSpore legacy): "
		    "not a rank table");
		goto out;
	}
	where = (struct rt_where){rt->schema, loc};
	rv = rt_check(rt, &where, err);
out:
	if (rv < 0) {
		errprefix(err, "%s", name);
		rt_free(rt);
	}
	free(loc);
	json_decref(root);
	return rv;
}

/* ------------------------------------------------------------------------------------------
 * Writing. */

static json_t *jintstr(long v)
{
	char buf[24];
	snprintf(buf, sizeof(buf), "%ld", v);
	return json_string(buf);
}

/* json_object_set_new/json_array_append_new take NULL values and fail: one check at the end. */
#define SET(obj, key, val) (bad |= json_object_set_new((obj), (key), (val)) != 0)
#define APPEND(arr, val)   (bad |= json_array_append_new((arr), (val)) != 0)

/* Ranks grouped by node, rank order within a node: byn[start[i]..start[i+1]). */
static int rt_group(const struct ranktable *rt, int **startp, int **bynp)
{
	int m = rt->node_count, n = rt->world_size, rv = -1;
	int *start = calloc((size_t)m + 1, sizeof(int)), *fill = calloc((size_t)m, sizeof(int));
	int *byn = malloc((size_t)n * sizeof(int));

	if (!start || !fill || !byn)
		goto out;
	for (int r = 0; r < n; r++)
		start[rt->ranks[r].node_rank + 1]++;
	for (int i = 0; i < m; i++)
		start[i + 1] += start[i];
	for (int r = 0; r < n; r++) {
		int i = rt->ranks[r].node_rank;
		byn[start[i] + fill[i]++] = r;
	}
	*startp = start;
	*bynp = byn;
	start = byn = NULL;
	rv = 0;
out:
	free(start);
	free(fill);
	free(byn);
	return rv;
}

static int server_id_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The legacy schema tells nodes apart by server_id alone. */
static int legacy_distinct(const struct ranktable *rt, const int *start, const int *byn,
			   struct dp_error *err)
{
	int m = rt->node_count, rv = 0;
	const char **ids = malloc((size_t)m * sizeof(*ids));
	if (!ids)
		return errprintf(err, "out of memory");
	for (int i = 0; i < m; i++)
		ids[i] = rt->ranks[byn[start[i]]].server_id;
	qsort(ids, (size_t)m, sizeof(*ids), server_id_cmp);
	for (int i = 1; i < m && rv == 0; i++)
		if (strcmp(ids[i], ids[i - 1]) == 0)
			rv = errprintf(
			    err,
			    "two nodes share the address %s, and the legacy schema tells "
			    "nodes apart by server_id alone: use the hccl or dptrain schema",
			    ids[i]);
	free(ids);
	return rv;
}

static json_t *rt_json_dptrain(const struct ranktable *rt)
{
	json_t *obj = json_object(), *ranks = json_array();
	int bad = !obj || !ranks;

	SET(obj, "version", json_integer(RT_DPTRAIN_VERSION));
	SET(obj, "world_size", json_integer(rt->world_size));
	/* Optional members are left out when unknown (a table converted from HCCL). */
	if (rt->master_addr[0])
		SET(obj, "master_addr", json_string(rt->master_addr));
	if (rt->master_port > 0)
		SET(obj, "master_port", json_integer(rt->master_port));
	if (rt->job_id[0])
		SET(obj, "job_id", json_string(rt->job_id));
	if (rt->step_id[0])
		SET(obj, "step_id", json_string(rt->step_id));
	for (int r = 0; r < rt->world_size; r++) {
		const struct rt_rank *x = &rt->ranks[r];
		json_t *e = json_object();
		SET(e, "rank", json_integer(r));
		SET(e, "host", json_string(x->host));
		SET(e, "node_rank", json_integer(x->node_rank));
		SET(e, "local_rank", json_integer(x->local_rank));
		SET(e, "gpu", json_integer(x->gpu));
		APPEND(ranks, e);
	}
	SET(obj, "ranks", json_incref(ranks));
	json_decref(ranks);
	if (bad) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

static json_t *rt_json_servers(const struct ranktable *rt, const int *start, const int *byn,
			       int dptrain)
{
	json_t *root = json_object(), *servers = json_array();
	int bad = !root || !servers;

	SET(root, "version", json_string("1.0"));
	SET(root, "server_count", jintstr(rt->node_count));
	for (int i = 0; i < rt->node_count; i++) {
		json_t *server = json_object(), *devs = json_array();
		SET(server, "server_id", json_string(rt->ranks[byn[start[i]]].server_id));
		for (int s = start[i]; s < start[i + 1]; s++) {
			const struct rt_rank *x = &rt->ranks[byn[s]];
			json_t *dev = json_object();
			SET(dev, "device_id", jintstr(x->device_id));
			SET(dev, "device_ip", json_string(x->addr));
			SET(dev, "rank_id", jintstr(byn[s]));
			APPEND(devs, dev);
		}
		SET(server, "device", devs);
		SET(server, "host_nic_ip", json_string("reserve"));
		APPEND(servers, server);
	}
	SET(root, "server_list", servers);
	SET(root, "status", json_string("completed"));
	if (dptrain)
		SET(root, "dptrain", rt_json_dptrain(rt));
	if (bad) {
		json_decref(root);
		return NULL;
	}
	return root;
}

static json_t *rt_json_legacy(const struct ranktable *rt, const int *start, const int *byn)
{
	json_t *root = json_object(), *groups = json_array(), *group = json_object();
	json_t *list = json_array(), *nics = json_array();
	int bad = !root || !groups || !group || !list || !nics, widest = 0;

	for (int i = 0; i < rt->node_count; i++) {
		if (start[i + 1] - start[i] > widest)
			widest = start[i + 1] - start[i];
		for (int s = start[i]; s < start[i + 1]; s++) {
			const struct rt_rank *x = &rt->ranks[byn[s]];
			json_t *inst = json_object(), *devs = json_array(), *dev = json_object();
			SET(dev, "device_id", jintstr(x->device_id));
			SET(dev, "device_ip", json_string(x->addr));
			APPEND(devs, dev);
			SET(inst, "devices", devs);
			SET(inst, "rank_id", jintstr(byn[s]));
			SET(inst, "server_id", json_string(x->server_id));
			APPEND(list, inst);
		}
	}
	/* Constant fields as MindSpore's examples have them; dptrain ignores them when reading. */
	SET(root, "board_id", json_string("0x0000"));
	SET(root, "chip_info", json_string("910"));
	SET(root, "deploy_mode", json_string("lab"));
	SET(root, "group_count", json_string("1"));
	SET(group, "device_num", jintstr(rt->world_size));
	SET(group, "server_num", jintstr(rt->node_count));
	SET(group, "group_name", json_string(""));
	SET(group, "instance_count", jintstr(rt->world_size));
	SET(group, "instance_list", list);
	APPEND(groups, group);
	SET(root, "group_list", groups);
	SET(root, "para_plane_nic_location", json_string("device"));
	for (int i = 0; i < widest; i++) {
		char nic[24];
		snprintf(nic, sizeof(nic), "eth%d", i);
		APPEND(nics, json_string(nic));
	}
	SET(root, "para_plane_nic_name", nics);
	SET(root, "para_plane_nic_num", jintstr(widest));
	SET(root, "status", json_string("completed"));
	if (bad) {
		json_decref(root);
		return NULL;
	}
	return root;
}

char *rt_to_json(const struct ranktable *rt, enum rt_schema schema, struct dp_error *err)
{
	int *start = NULL, *byn = NULL;
	json_t *root = NULL;
	char *text = NULL, *out = NULL;

	if (schema != RT_SCHEMA_DPTRAIN && schema != RT_SCHEMA_HCCL && schema != RT_SCHEMA_LEGACY) {
		errprintf(err, "unknown schema %d", (int)schema);
		goto out;
	}
	if (rt_check(rt, NULL, err) < 0)
		goto out;
	if (rt_group(rt, &start, &byn) < 0) {
		errprintf(err, "out of memory writing %d ranks", rt->world_size);
		goto out;
	}
	if (schema == RT_SCHEMA_LEGACY) {
		if (legacy_distinct(rt, start, byn, err) < 0)
			goto out;
		root = rt_json_legacy(rt, start, byn);
	} else {
		root = rt_json_servers(rt, start, byn, schema == RT_SCHEMA_DPTRAIN);
	}
	/* Four spaces, as hccl_tools.py indents; key order as written above. */
	if (!root || !(text = json_dumps(root, JSON_INDENT(4)))) {
		errprintf(err, "out of memory writing %d ranks", rt->world_size);
		goto out;
	}
	size_t len = strlen(text);
	if (!(out = malloc(len + 2))) {
		errprintf(err, "out of memory writing %d ranks", rt->world_size);
		goto out;
	}
	memcpy(out, text, len);
	memcpy(out + len, "\n", 2);
out:
	free(text);
	json_decref(root);
	free(start);
	free(byn);
	return out;
}
