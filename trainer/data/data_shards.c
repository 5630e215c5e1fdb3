/* data_shards.c — packed shard directories (data_load_shards in data.h): DIR/index and the tar
 * shards it names, each opened once; a sample's bytes are pread from its shard (so any thread
 * may read) and checked against the index's CRC-32. Owns reading shards and the shards' file
 * names (shards.h), which the writer uses; writing them is shard_write.c's, the index format
 * data_index.c's. */
#include "trainer/data/data.h"
#include "trainer/data/data_index.h"
#include "trainer/data/shards.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

void shard_name(char out[SHARD_NAME_MAX], uint32_t k)
{
	snprintf(out, SHARD_NAME_MAX, SHARD_NAME, k);
}

void shard_partial_name(char out[SHARD_NAME_MAX], uint32_t k)
{
	snprintf(out, SHARD_NAME_MAX, SHARD_NAME SHARD_PARTIAL_SUFFIX, k);
}

/* The number is the name's first digits; the name must be exactly what shard_name or
 * shard_partial_name make of it (so "shard-000001.tar" is no shard). */
enum shard_file shard_parse_name(const char *name, uint32_t *k)
{
	const char *digits = strpbrk(name, "0123456789");
	char canon[SHARD_NAME_MAX];
	unsigned long long v;

	if (!digits)
		return SHARD_FILE_OTHER;
	errno = 0;
	v = strtoull(digits, NULL, 10);
	if (errno || v > UINT32_MAX)
		return SHARD_FILE_OTHER;
	*k = (uint32_t)v;
	shard_name(canon, *k);
	if (!strcmp(name, canon))
		return SHARD_FILE_SHARD;
	shard_partial_name(canon, *k);
	return !strcmp(name, canon) ? SHARD_FILE_PARTIAL : SHARD_FILE_OTHER;
}

struct shards {
	struct di_index ix; /* first: di_of_set */
	int *fd;	    /* ix.shards of them */
	char dir[];
};

static int shards_read(const struct data_set *ds, size_t i, struct data_bytes *b, int *label,
		       struct dp_error *err)
{
	const struct shards *sh = ds->priv;
	const struct di_sample *s = &sh->ix.s[i];
	size_t got = 0;
	uLong crc = crc32(0, Z_NULL, 0);

	*label = (int)s->label;
	if (s->size == 0)
		return errprintf(err, "%s/" SHARD_NAME ": %s: empty file, not an image", sh->dir,
				 s->shard, di_name(&sh->ix, i));
	if (s->size > b->cap) {
		uint8_t *p = realloc(b->p, (size_t)s->size);
		if (!p)
			return errprintf(err, "%s/" SHARD_NAME ": %s: out of memory for %llu bytes",
					 sh->dir, s->shard, di_name(&sh->ix, i),
					 (unsigned long long)s->size);
		b->p = p;
		b->cap = (size_t)s->size;
	}
	while (got < s->size) {
		ssize_t r = pread(sh->fd[s->shard], b->p + got, (size_t)s->size - got,
				  (off_t)(s->offset + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return errprintf(err,
					 "%s/" SHARD_NAME ": %s: %s; re-run dptrain-data pack "
					 "to repair the shard",
					 sh->dir, s->shard, di_name(&sh->ix, i),
					 r < 0 ? strerror(errno) : "the shard ends inside it");
		got += (size_t)r;
	}
	b->len = got;
	for (size_t k = 0; k < got;) {
		uInt n = got - k > (1u << 30) ? 1u << 30 : (uInt)(got - k);
		crc = crc32(crc, b->p + k, n);
		k += n;
	}
	if ((uint32_t)crc != s->crc)
		return errprintf(err,
				 "%s/" SHARD_NAME ": %s: CRC-32 mismatch (corrupt shard); "
				 "dptrain-data verify %s lists every damaged sample",
				 sh->dir, s->shard, di_name(&sh->ix, i), sh->dir);
	return 0;
}

static void shards_describe(const struct data_set *ds, size_t i, char *buf, size_t n)
{
	const struct shards *sh = ds->priv;

	snprintf(buf, n, "%s/" SHARD_NAME ": %s", sh->dir, sh->ix.s[i].shard, di_name(&sh->ix, i));
}

static void shards_release(struct shards *sh)
{
	if (sh->fd)
		for (uint32_t k = 0; k < sh->ix.shards; k++)
			if (sh->fd[k] >= 0)
				close(sh->fd[k]);
	free(sh->fd);
	di_free(&sh->ix);
	free(sh);
}

static void shards_free(struct data_set *ds)
{
	if (ds->priv)
		shards_release(ds->priv);
	ds->priv = NULL;
}

static const struct data_ops shards_ops = {
    .read = shards_read, .describe = shards_describe, .free = shards_free};

/* Open every shard and check that each holds the bytes its samples need. */
static int open_shards(struct shards *sh, struct dp_error *err)
{
	const struct di_index *x = &sh->ix;
	off_t *size = calloc(x->shards, sizeof(*size));
	char path[4096];
	int rv = -1;

	if (!(sh->fd = malloc(x->shards * sizeof(*sh->fd))) || !size) {
		errprintf(err, "%s: out of memory for %u shards", sh->dir, x->shards);
		goto out;
	}
	for (uint32_t k = 0; k < x->shards; k++)
		sh->fd[k] = -1;
	for (uint32_t k = 0; k < x->shards; k++) {
		struct stat st;

		snprintf(path, sizeof(path), "%s/" SHARD_NAME, sh->dir, k);
		if ((sh->fd[k] = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(sh->fd[k], &st)) {
			errprintf(err, "%s: %s%s", path, strerror(errno),
				  errno == EMFILE ? " (every shard is kept open: raise ulimit -n, "
						    "or pack with a larger --shard-size)"
				  : errno == ENOENT ? "; re-run dptrain-data pack to repair"
						    : "");
			goto out;
		}
		size[k] = st.st_size;
	}
	for (size_t i = 0; i < x->count; i++) {
		const struct di_sample *s = &x->s[i];
		if (s->offset + s->size > (uint64_t)size[s->shard]) {
			errprintf(err,
				  "%s/" SHARD_NAME ": truncated: %lld bytes, but sample %zu (%s) "
				  "ends at byte %llu; re-run dptrain-data pack %s %s to repair",
				  sh->dir, s->shard, (long long)size[s->shard], i, di_name(x, i),
				  (unsigned long long)(s->offset + s->size), x->root, sh->dir);
			goto out;
		}
		if (s->size > SHARD_MAX_MEMBER) {
			errprintf(err,
				  "%s/index: sample %zu (%s): %llu bytes: too large for an image",
				  sh->dir, i, di_name(x, i), (unsigned long long)s->size);
			goto out;
		}
	}
	rv = 0;
out:
	free(size);
	return rv;
}

int data_load_shards(struct data_set *ds, const char *dir, struct dp_error *err)
{
	size_t n = strlen(dir);
	struct shards *sh;
	char path[4096];

	memset(ds, 0, sizeof(*ds));
	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n + 16 >= sizeof(path))
		return errprintf(err, "%s: path too long", dir);
	if (!(sh = calloc(1, sizeof(*sh) + n + 1)))
		return errprintf(err, "%s: out of memory", dir);
	memcpy(sh->dir, dir, n);
	snprintf(path, sizeof(path), "%s/index", sh->dir);
	if (di_read(&sh->ix, path, err) != 0) {
		struct stat st;
		bool missing = stat(path, &st) != 0 && errno == ENOENT;

		errprintf(err, "%s%s", err->text,
			  missing ? " (dptrain-data pack writes a shard directory's index last: "
				    "did it finish?)"
				  : "; re-run dptrain-data pack to repair it");
		goto fail;
	}
	if (sh->ix.kind != DI_SHARDS) {
		errprintf(err, "%s: the index of an image folder (%s), not of shards", path,
			  sh->ix.root);
		goto fail;
	}
	if (open_shards(sh, err) != 0)
		goto fail;
	ds->ops = &shards_ops;
	ds->kind = "shards";
	snprintf(ds->name, sizeof(ds->name), "%s", sh->dir);
	ds->count = sh->ix.count;
	ds->channels = 3;
	ds->num_classes = sh->ix.num_classes;
	ds->encoded = true;
	ds->class_names = sh->ix.classes; /* data_free frees them */
	sh->ix.classes = NULL;
	ds->priv = sh;
	return 0;
fail:
	shards_release(sh);
	return -1;
}
