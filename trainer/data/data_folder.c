/* data_folder.c — torchvision ImageFolder datasets (data_load_imagefolder in data.h): the sample
 * list from an index, a cache or a scan, and each file's bytes read on demand. Owns the cache's
 * freshness rule; the index format and the scan are data_index.c's, decoding is image.c's. */
#define _GNU_SOURCE /* program_invocation_short_name */
#include "trainer/data/data.h"
#include "trainer/data/data_index.h"
#include "common/error.h"
#include "common/mkdir_p.h"
#include "common/warn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* No image file is this large; a bigger one is refused before it is read into memory. */
#define FOLDER_MAX_FILE (1ull << 30)
/* How long a rank waits for another that is listing the same folder into the same cache (a
 * million files on a busy parallel file system take minutes), before listing it itself. */
#define FOLDER_LOCK_WAIT_S 1800

struct folder {
	struct di_index ix; /* first: di_of_set */
	int rootfd;
	char root[]; /* as the caller named it (no trailing '/'), for messages */
};

/* The whole file at fd into b (what is there now, whatever the index said). */
static int read_all(int fd, struct data_bytes *b, const char *root, const char *rel,
		    struct dp_error *err)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return errprintf(err, "%s/%s: %s", root, rel, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return errprintf(err, "%s/%s: not a regular file", root, rel);
	if ((uint64_t)st.st_size >= FOLDER_MAX_FILE)
		return errprintf(err, "%s/%s: %lld bytes: too large for an image", root, rel,
				 (long long)st.st_size);
	b->len = 0;
	for (;;) {
		ssize_t r;

		if (b->len == b->cap) {
			size_t want = (size_t)st.st_size + 1, cap = b->cap ? 2 * b->cap : 65536;
			uint8_t *p;

			if (cap < want && b->len < want)
				cap = want; /* the size fstat gave, and one byte to see the end */
			if (b->len >= FOLDER_MAX_FILE)
				return errprintf(err, "%s/%s: grew past %llu MiB while read", root,
						 rel, FOLDER_MAX_FILE >> 20);
			if (!(p = realloc(b->p, cap)))
				return errprintf(err, "%s/%s: out of memory for %zu bytes", root,
						 rel, cap);
			b->p = p;
			b->cap = cap;
		}
		r = read(fd, b->p + b->len, b->cap - b->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errprintf(err, "%s/%s: read error: %s", root, rel, strerror(errno));
		if (r == 0)
			break;
		b->len += (size_t)r;
	}
	if (b->len == 0)
		return errprintf(err, "%s/%s: empty file, not an image", root, rel);
	return 0;
}

static int folder_read(const struct data_set *ds, size_t i, struct data_bytes *b, int *label,
		       struct dp_error *err)
{
	const struct folder *f = ds->priv;
	const char *rel = di_name(&f->ix, i);
	int fd = openat(f->rootfd, rel, O_RDONLY | O_CLOEXEC), rv;

	if (fd < 0)
		return errprintf(err, "%s/%s: %s%s", f->root, rel, strerror(errno),
				 errno == ENOENT ? " (it was there when the folder was indexed; "
						   "re-create the index)"
						 : "");
	rv = read_all(fd, b, f->root, rel, err);
	close(fd);
	*label = (int)f->ix.s[i].label;
	return rv;
}

static void folder_describe(const struct data_set *ds, size_t i, char *buf, size_t n)
{
	const struct folder *f = ds->priv;

	snprintf(buf, n, "%s/%s", f->root, di_name(&f->ix, i));
}

static void folder_free(struct data_set *ds)
{
	struct folder *f = ds->priv;

	if (!f)
		return;
	if (f->rootfd >= 0)
		close(f->rootfd);
	di_free(&f->ix);
	free(f);
	ds->priv = NULL;
}

static const struct data_ops folder_ops = {
    .read = folder_read, .describe = folder_describe, .free = folder_free};

static bool newer(const struct stat *a, const struct timespec *t)
{
	return a->st_mtim.tv_sec > t->tv_sec ||
	       (a->st_mtim.tv_sec == t->tv_sec && a->st_mtim.tv_nsec > t->tv_nsec);
}

/* The cache at path, when it is of this root and neither the root nor a class folder changed
 * after it was made: 0 with ix filled. 1: stale or absent (why->text says why when that
 * deserves a warning). */
static int cache_fresh(struct di_index *ix, const char *path, const char *abs, struct dp_error *why)
{
	struct stat cs, st;
	char dir[PATH_MAX];

	why->text[0] = '\0';
	if (stat(path, &cs) != 0)
		return 1;
	if (di_read(ix, path, why) != 0) {
		errprefix(why, "ignoring the cache");
		return 1;
	}
	if (ix->kind != DI_FOLDER || strcmp(ix->root, abs) != 0)
		goto stale; /* another root with the same hash: made anew */
	if (stat(abs, &st) != 0 || newer(&st, &cs.st_mtim))
		goto stale;
	for (int k = 0; k < ix->num_classes; k++) {
		int n = snprintf(dir, sizeof(dir), "%s/%s", abs, ix->classes[k]);
		if (n < 0 || (size_t)n >= sizeof(dir) || stat(dir, &st) != 0 ||
		    newer(&st, &cs.st_mtim))
			goto stale;
	}
	return 0;
stale:
	di_free(ix);
	return 1;
}

/* List the folder and write the list to the cache at path (a failure to write it is a
 * warning). */
static int scan_to_cache(struct di_index *ix, const char *abs, const char *cache_dir,
			 const char *path, struct dp_error *why, struct dp_error *err)
{
	struct dp_error w;
	struct timespec t0;

	if (why->text[0])
		dp_warn(program_invocation_short_name, NULL, "%s", why->text);
	fprintf(stderr, "%s: listing the image folder %s (once: the list is kept in %s)\n",
		program_invocation_short_name, abs, path);
	/* A folder that changes while it is listed is newer than the cache: the cache's time is
	 * the start of the scan, less a second for a file server's clock running behind. */
	clock_gettime(CLOCK_REALTIME, &t0);
	t0.tv_sec -= 1;
	if (di_scan(ix, abs, &w, err) != 0)
		return -1;
	if (w.text[0])
		dp_warn(program_invocation_short_name, NULL, "%s", w.text);
	if (dp_mkdir_p(cache_dir, 0777, NULL) != 0) {
		errprintf(&w, "cannot create the cache folder %s: %s; not cached", cache_dir,
			  strerror(errno));
		dp_warn(program_invocation_short_name, NULL, "%s", w.text);
	} else if (di_write(ix, path, &t0, &w) != 0) {
		errprintf(&w, "%s; not cached", w.text);
		dp_warn(program_invocation_short_name, NULL, "%s", w.text);
	}
	return 0;
}

/* The ranks of a job share the cache: one lists the folder while the others wait on PATH.lock
 * (flock; bounded), then read what it wrote, so a million files are listed once, not once per
 * rank. -1: no lock to be had (a file system without flock, a read-only folder): list anyway. */
static int lock_cache(const char *path)
{
	char lock[PATH_MAX];
	int fd, n = snprintf(lock, sizeof(lock), "%s.lock", path);
	struct timespec nap = {0, 100 * 1000 * 1000};

	if (n < 0 || (size_t)n >= sizeof(lock) ||
	    (fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		return -1;
	for (long i = 0; i < FOLDER_LOCK_WAIT_S * 10L; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return fd;
		if (errno != EWOULDBLOCK && errno != EINTR)
			break;
		nanosleep(&nap, NULL);
	}
	close(fd);
	return -1;
}

/* The list from the cache, or from a scan then written to the cache. */
static int load_cached(struct di_index *ix, const char *abs, const char *cache_dir,
		       struct dp_error *err)
{
	char path[PATH_MAX];
	struct dp_error why;
	int lock = -1, rv;

	if (di_cache_path(path, sizeof(path), cache_dir, abs) != 0)
		return errprintf(err, "%s: the cache folder's path is too long", cache_dir);
	if (cache_fresh(ix, path, abs, &why) == 0)
		return 0;
	if (dp_mkdir_p(cache_dir, 0777, NULL) == 0 && (lock = lock_cache(path)) >= 0 &&
	    cache_fresh(ix, path, abs, &why) == 0) {
		close(lock); /* another rank listed it while this one waited */
		return 0;
	}
	rv = scan_to_cache(ix, abs, cache_dir, path, &why, err);
	if (lock >= 0)
		close(lock);
	return rv;
}

static int load_list(struct folder *f, const char *abs, const char *index, const char *cache_dir,
		     struct dp_error *err)
{
	struct dp_error w;

	if (index) {
		if (di_read(&f->ix, index, err) != 0)
			return errprintf(err, "%s; re-create it: dptrain-data index %s -o %s",
					 err->text, f->root, index);
		if (strcmp(f->ix.root, abs) != 0)
			return errprintf(err,
					 "%s: an index of the image folder %s, not of %s (%s); "
					 "re-create it: dptrain-data index %s -o %s",
					 index, f->ix.root, f->root, abs, f->root, index);
		return 0;
	}
	if (cache_dir)
		return load_cached(&f->ix, abs, cache_dir, err);
	if (di_scan(&f->ix, abs, &w, err) != 0)
		return -1;
	if (w.text[0])
		dp_warn(program_invocation_short_name, NULL, "%s", w.text);
	return 0;
}

int data_load_imagefolder(struct data_set *ds, const char *root, const char *index,
			  const char *cache_dir, struct dp_error *err)
{
	size_t n = strlen(root);
	struct folder *f;
	char *abs = NULL;
	int rv = -1;

	memset(ds, 0, sizeof(*ds));
	while (n > 1 && root[n - 1] == '/')
		n--;
	if (!(f = calloc(1, sizeof(*f) + n + 1)))
		return errprintf(err, "%s: out of memory", root);
	memcpy(f->root, root, n);
	f->rootfd = -1;
	if (!(abs = realpath(root, NULL))) {
		errprintf(err, "%s: %s (the image folder)", f->root, strerror(errno));
		goto out;
	}
	if (load_list(f, abs, index, cache_dir, err) != 0)
		goto out;
	if ((f->rootfd = open(abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		errprintf(err, "%s: %s (the image folder)", f->root, strerror(errno));
		goto out;
	}
	ds->ops = &folder_ops;
	ds->kind = "imagefolder";
	snprintf(ds->name, sizeof(ds->name), "%s", f->root);
	ds->count = f->ix.count;
	ds->channels = 3;
	ds->num_classes = f->ix.num_classes;
	ds->encoded = true;
	ds->class_names = f->ix.classes; /* data_free frees them */
	f->ix.classes = NULL;
	ds->priv = f;
	f = NULL;
	rv = 0;
out:
	if (f) {
		if (f->rootfd >= 0)
			close(f->rootfd);
		di_free(&f->ix);
		free(f);
	}
	free(abs);
	return rv;
}
