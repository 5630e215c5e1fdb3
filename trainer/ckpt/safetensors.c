/* safetensors.c — safetensors reader (mmap + validation) and atomic writer. */
#define _GNU_SOURCE
#include "trainer/ckpt/safetensors.h"
#include "common/atomic_file.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_HEADER_MAX (100u << 20) /* the format's own limit */

size_t st_dtype_size(const char *d)
{
	static const struct {
		const char *name;
		size_t size;
	} t[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
		 {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},	  {"BOOL", 1},
		 {"U16", 2}, {"U32", 4}, {"U64", 8}};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (strcmp(t[i].name, d) == 0)
			return t[i].size;
	return 0;
}

void st_close(struct st_file *f)
{
	if (f->map && f->map != MAP_FAILED)
		munmap(f->map, f->size);
	for (int i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	free(f->metadata);
	free(f->path);
	memset(f, 0, sizeof(*f));
}

static int cmp_begin(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* One header entry: tensor t described by v, its data within the file's data_len bytes. */
static int st_entry(struct st_tensor *t, json_t *v, size_t data_len, struct dp_error *err)
{
	json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
	       *off = json_object_get(v, "data_offsets");
	if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
	    json_array_size(off) != 2 || json_array_size(sh) > ST_MAX_DIMS ||
	    !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)))
		return errprintf(
		    err, "expected {dtype, shape (at most %d dims), data_offsets [begin, end]}",
		    ST_MAX_DIMS);
	snprintf(t->dtype, sizeof(t->dtype), "%s", json_string_value(dt));
	size_t esize = st_dtype_size(t->dtype);
	if (!esize)
		return errprintf(err, "unknown dtype \"%s\"", json_string_value(dt));
	unsigned __int128 count = 1;
	t->ndim = (int)json_array_size(sh);
	for (int d = 0; d < t->ndim; d++) {
		json_t *e = json_array_get(sh, (size_t)d);
		if (!json_is_integer(e) || json_integer_value(e) < 0)
			return errprintf(err, "shape[%d] is not a size", d);
		t->shape[d] = json_integer_value(e);
		count *= (unsigned __int128)t->shape[d];
	}
	json_int_t b = json_integer_value(json_array_get(off, 0)),
		   e = json_integer_value(json_array_get(off, 1));
	if (b < 0 || e < b || (uint64_t)e > data_len)
		return errprintf(err,
				 "data_offsets [%lld, %lld] outside the %zu data bytes (truncated "
				 "file?)",
				 (long long)b, (long long)e, data_len);
	t->begin = (size_t)b;
	t->end = (size_t)e;
	if (count * esize != (unsigned __int128)(t->end - t->begin))
		return errprintf(err, "%zu bytes of data for a %s tensor of that shape",
				 t->end - t->begin, t->dtype);
	return 0;
}

int st_open(struct st_file *f, const char *path, struct dp_error *err)
{
	int fd = -1, rv = -1;
	json_t *hdr = NULL;
	struct stat st;
	memset(f, 0, sizeof(*f));
	f->path = strdup(path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		errprintf(err, "%s: cannot open: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		errprintf(err, "%s: not a regular file", path);
		goto out;
	}
	f->size = (size_t)st.st_size;
	if (f->size < 8) {
		errprintf(err, "%s: truncated: %zu bytes, a safetensors file has at least 8", path,
			  f->size);
		goto out;
	}
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		errprintf(err, "%s: cannot map: %s", path, strerror(errno));
		goto out;
	}
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | f->map[i];
	if (hlen > ST_HEADER_MAX || hlen > f->size - 8) {
		errprintf(
		    err,
		    "%s: header length %llu does not fit in the file (%zu bytes): truncated or "
		    "not a safetensors file",
		    path, (unsigned long long)hlen, f->size);
		goto out;
	}
	f->data_start = 8 + (size_t)hlen;
	json_error_t je;
	hdr = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
	if (!hdr || !json_is_object(hdr)) {
		errprintf(err, "%s: header is not a JSON object%s%s", path, hdr ? "" : ": ",
			  hdr ? "" : je.text);
		goto out;
	}
	f->t = calloc(json_object_size(hdr) + 1, sizeof(*f->t));
	if (!f->t) {
		errprintf(err, "%s: out of memory", path);
		goto out;
	}
	const char *key;
	json_t *v;
	size_t data_len = f->size - f->data_start;
	json_object_foreach(hdr, key, v)
	{
		if (strcmp(key, "__metadata__") == 0) {
			f->metadata = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
			continue;
		}
		struct st_tensor *t = &f->t[f->n];
		t->name = strdup(key);
		f->n++;
		if (st_entry(t, v, data_len, err) < 0) {
			errprefix(err, "%s: tensor \"%s\"", path, key);
			goto out;
		}
	}
	qsort(f->t, (size_t)f->n, sizeof(*f->t), cmp_begin);
	for (int i = 1; i < f->n; i++)
		if (f->t[i].begin < f->t[i - 1].end) {
			errprintf(err, "%s: tensors \"%s\" and \"%s\" overlap", path,
				  f->t[i - 1].name, f->t[i].name);
			goto out;
		}
	rv = 0;
out:
	if (fd >= 0)
		close(fd);
	json_decref(hdr);
	if (rv < 0)
		st_close(f);
	return rv;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	for (int i = 0; i < f->n; i++)
		if (strcmp(f->t[i].name, name) == 0)
			return &f->t[i];
	return NULL;
}

const void *st_data(const struct st_file *f, const struct st_tensor *t)
{
	return f->map + f->data_start + t->begin;
}

int st_write_atomic(const char *path, const struct st_entry *e, int n, const char *metadata_json,
		    struct dp_error *err)
{
	int rv = -1;
	char *hdr_text = NULL;
	struct af_file af = {.fd = -1};
	json_t *hdr = json_object();
	size_t off = 0;
	if (!hdr)
		goto oom;
	if (metadata_json) {
		json_error_t je;
		json_t *meta = json_loads(metadata_json, 0, &je);
		if (!json_is_object(meta)) {
			json_decref(meta);
			errprintf(err, "%s: metadata is not a JSON object", path);
			goto out;
		}
		json_object_set_new(hdr, "__metadata__", meta);
	}
	for (int i = 0; i < n; i++) {
		json_t *shape = json_array(), *t = json_object();
		if (!shape || !t) {
			json_decref(shape);
			json_decref(t);
			goto oom;
		}
		for (int d = 0; d < e[i].ndim; d++)
			json_array_append_new(shape, json_integer(e[i].shape[d]));
		json_object_set_new(t, "dtype", json_string(e[i].dtype));
		json_object_set_new(t, "shape", shape);
		json_object_set_new(
		    t, "data_offsets",
		    json_pack("[II]", (json_int_t)off, (json_int_t)(off + e[i].nbytes)));
		json_object_set_new(hdr, e[i].name, t);
		off += e[i].nbytes;
	}
	hdr_text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!hdr_text)
		goto oom;
	/* pad the header with spaces to 8 bytes so the data is aligned, as the reference
	 * implementation does */
	size_t hlen = strlen(hdr_text), padded = (hlen + 7) / 8 * 8;
	char *h2 = realloc(hdr_text, padded + 1);
	if (!h2)
		goto oom;
	hdr_text = h2;
	memset(hdr_text + hlen, ' ', padded - hlen);
	hlen = padded;
	unsigned char len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));

	if (af_open(&af, path, 0644, err) < 0 || af_write_chunk(&af, len8, 8, err) < 0 ||
	    af_write_chunk(&af, hdr_text, hlen, err) < 0)
		goto out;
	for (int i = 0; i < n; i++)
		if (af_write_chunk(&af, e[i].data, e[i].nbytes, err) < 0)
			goto out;
	rv = af_commit(&af, err);
	goto out;
oom:
	errprintf(err, "%s: out of memory", path);
out:
	af_abort(&af);
	int cause = errno; /* ckpt's writer wrapper reads it (ENOSPC) */
	free(hdr_text);
	json_decref(hdr);
	errno = cause;
	return rv;
}
