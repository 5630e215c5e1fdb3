/* shard_write.c — the shards of a shard directory (shards.h): their tar layout, written by
 * pack and checked by pack and verify, and `dptrain-data pack` itself: the image folder planned
 * into shards, each written under its partial name, synced, read back, checked and renamed
 * into place, the index last; resumed from pack.state. Says what it does through the caller's
 * say(); the command line and every other output are dptrain-data.c's, reading shards
 * data_shards.c's, the index format data_index.c's. */
#define _GNU_SOURCE /* asprintf */
#include "trainer/data/shards.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/warn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define WBUF (8u << 20)

/* ------------------------------------------------------------------------------------ */
/* The tar layout (shards.h) */

uint64_t shard_tar_round(uint64_t n)
{
	return (n + SHARD_TAR_BLOCK - 1) / SHARD_TAR_BLOCK * SHARD_TAR_BLOCK;
}

/* width-1 octal digits, zero-padded, then NUL */
static void octal(uint8_t *dst, int width, uint64_t v)
{
	for (int i = width - 2; i >= 0; i--, v >>= 3)
		dst[i] = (uint8_t)('0' + (v & 7));
	dst[width - 1] = '\0';
}

/* 0: the path fits the name field; p > 0: prefix = path[0..p), name = path[p+1..]; -1: it
 * fits neither (a pax header carries it). */
static int ustar_split(const char *name, size_t len)
{
	if (len <= 100)
		return 0;
	for (size_t p = len - 101 ? len - 101 : 1; p <= 155 && p < len; p++)
		if (name[p] == '/')
			return (int)p;
	return -1;
}

static void ustar_header(uint8_t h[SHARD_TAR_BLOCK], const char *name, size_t len, uint64_t size,
			 char type)
{
	int p = ustar_split(name, len);
	unsigned sum = 0;

	memset(h, 0, SHARD_TAR_BLOCK);
	if (p > 0) {
		memcpy(h + 345, name, (size_t)p);
		memcpy(h, name + p + 1, len - (size_t)p - 1);
	} else if (p == 0) {
		memcpy(h, name, len);
	} else {
		memcpy(h, name + len - 100, 100); /* for readers without pax: the path's end */
	}
	octal(h + 100, 8, 0644);
	octal(h + 108, 8, 0);
	octal(h + 116, 8, 0);
	octal(h + 124, 12, size);
	octal(h + 136, 12, 0);
	h[156] = (uint8_t)type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < SHARD_TAR_BLOCK; i++)
		sum += h[i];
	octal(h + 148, 7, sum);
	h[155] = ' ';
}

size_t shard_tar_headers(uint8_t *h, const char *name, uint64_t size)
{
	size_t len = strlen(name), body, rec;

	if (ustar_split(name, len) >= 0) {
		ustar_header(h, name, len, size, '0');
		return SHARD_TAR_BLOCK;
	}
	/* a pax record: "LEN path=NAME\n", LEN counting itself */
	body = strlen(" path=") + len + 1;
	for (rec = body + 1; (size_t)snprintf(NULL, 0, "%zu", rec) + body != rec;)
		rec = body + (size_t)snprintf(NULL, 0, "%zu", rec);
	ustar_header(h, "PaxHeaders/path", 15, rec, 'x');
	memset(h + SHARD_TAR_BLOCK, 0, shard_tar_round(rec));
	snprintf((char *)h + SHARD_TAR_BLOCK, rec + 1, "%zu path=%s\n", rec, name);
	ustar_header(h + SHARD_TAR_BLOCK + shard_tar_round(rec), name, len, size, '0');
	return 2 * SHARD_TAR_BLOCK + shard_tar_round(rec);
}

static size_t header_len(const char *name)
{
	uint8_t h[SHARD_HDR_MAX];

	return ustar_split(name, strlen(name)) >= 0 ? SHARD_TAR_BLOCK
						    : shard_tar_headers(h, name, 0);
}

uint32_t shard_crc(const uint8_t *p, size_t n)
{
	uLong c = crc32(0, Z_NULL, 0);

	for (size_t k = 0; k < n;) {
		uInt m = n - k > (1u << 30) ? 1u << 30 : (uInt)(n - k);
		c = crc32(c, p + k, m);
		k += m;
	}
	return (uint32_t)c;
}

static int pread_all(int fd, void *buf, size_t n, off_t off, size_t *got)
{
	*got = 0;
	while (*got < n) {
		ssize_t r = pread(fd, (char *)buf + *got, n - *got, off + (off_t)*got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		*got += (size_t)r;
	}
	return 0;
}

static bool grow(struct data_bytes *b, size_t n)
{
	uint8_t *p;

	if (n <= b->cap)
		return true;
	if (!(p = realloc(b->p, n)))
		return false;
	b->p = p;
	b->cap = n;
	return true;
}

/* ------------------------------------------------------------------------------------ */
/* What verify checks of a shard directory */

const char *shard_check_member(const struct di_index *x, size_t i, int fd, off_t size,
			       struct data_bytes *b, char *why, size_t wn)
{
	const struct di_sample *s = &x->s[i];
	uint8_t h[SHARD_HDR_MAX];
	size_t hb = shard_tar_headers(h, di_name(x, i), s->size), got;

	if (s->offset + shard_tar_round(s->size) > (uint64_t)size)
		return snprintf(why, wn,
				"beyond the end of the shard (%lld bytes): the shard is "
				"truncated",
				(long long)size),
		       why;
	if (!grow(b, (size_t)s->size + SHARD_TAR_BLOCK))
		return "out of memory";
	if (pread_all(fd, b->p, (size_t)s->size + SHARD_TAR_BLOCK,
		      (off_t)s->offset - SHARD_TAR_BLOCK, &got) != 0 ||
	    got != s->size + SHARD_TAR_BLOCK)
		return snprintf(why, wn, "read error: %s", strerror(errno)), why;
	if (memcmp(b->p, h + hb - SHARD_TAR_BLOCK, SHARD_TAR_BLOCK) != 0)
		return "its tar header is damaged";
	if (shard_crc(b->p + SHARD_TAR_BLOCK, (size_t)s->size) != s->crc)
		return "CRC-32 mismatch (corrupt shard)";
	return NULL;
}

uint64_t *shard_sizes(const struct di_index *x)
{
	uint64_t *want = calloc(x->shards, sizeof(*want));

	if (!want)
		return NULL;
	for (size_t i = 0; i < x->count; i++)
		want[x->s[i].shard] =
		    shard_tar_round(x->s[i].offset + x->s[i].size) + SHARD_TAR_END;
	return want;
}

/* ------------------------------------------------------------------------------------ */
/* pack */

/* One pack's state. */
struct pack {
	const char *root, *out; /* as given */
	uint64_t shard_size;
	long long stop_after; /* shards this run writes before it stops; -1: no limit */
	void (*say)(const char *line);
	struct di_index x; /* the folder's list, made the shards' index */
	uint32_t nshards;
	uint32_t *first;     /* shard k holds samples first[k] .. first[k + 1] - 1 */
	uint64_t *bytes;     /* shard k's size */
	uint32_t source_crc; /* CRC-32 of the folder's index: what pack.state remembers */
	int rootfd, outfd;
	struct data_bytes src, back; /* a source file; a member read back */
	uint8_t *w;		     /* write buffer */
	size_t wlen;
	double t0, shown;
	size_t done;	/* samples written by this run */
	uint64_t put;	/* bytes written by this run */
	uint32_t kept;	/* shards of an earlier run verified and kept */
	uint32_t wrote; /* shards written by this run */
	struct dp_error *err;
};

/* A line for the caller to show (shard_pack_opts.say). */
static void say(const struct pack *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const struct pack *p, const char *fmt, ...)
{
	char line[DP_ERROR_MAX + 256];
	va_list ap;

	if (!p->say)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	p->say(line);
}

/* Which shard each sample goes to and where its data starts. */
static int pack_plan(struct pack *p)
{
	struct di_index *x = &p->x;
	uint64_t cur = 0;
	uint32_t k = 0;

	if (!(p->first = malloc((x->count + 1) * sizeof(*p->first))) ||
	    !(p->bytes = malloc((x->count + 1) * sizeof(*p->bytes))))
		return errprintf(p->err, "out of memory planning %zu samples", x->count);
	if (x->count > UINT32_MAX)
		return errprintf(p->err, "%s: %zu samples: more than a shard index holds", p->root,
				 x->count);
	p->first[0] = 0;
	for (size_t i = 0; i < x->count; i++) {
		struct di_sample *s = &x->s[i];
		uint64_t hb, mb;

		if (strlen(di_name(x, i)) > SHARD_NAME_LEN_MAX)
			return errprintf(p->err, "%s/%s: a path longer than %d bytes", p->root,
					 di_name(x, i), SHARD_NAME_LEN_MAX);
		if (s->size > SHARD_MAX_MEMBER)
			return errprintf(p->err, "%s/%s: %llu bytes: too large for an image",
					 p->root, di_name(x, i), (unsigned long long)s->size);
		hb = header_len(di_name(x, i));
		mb = hb + shard_tar_round(s->size);
		if (cur > 0 && cur + mb + SHARD_TAR_END > p->shard_size) {
			p->bytes[k++] = cur + SHARD_TAR_END;
			p->first[k] = (uint32_t)i;
			cur = 0;
		}
		s->shard = k;
		s->offset = cur + hb;
		cur += mb;
	}
	p->bytes[k] = cur + SHARD_TAR_END;
	p->nshards = k + 1;
	p->first[p->nshards] = (uint32_t)x->count;
	x->shards = p->nshards;
	return 0;
}

/* Source file i, whole, into p->src; its size must be the listed one. */
static int read_source(struct pack *p, size_t i)
{
	const struct di_sample *s = &p->x.s[i];
	const char *name = di_name(&p->x, i);
	size_t got;
	int fd = openat(p->rootfd, name, O_RDONLY | O_CLOEXEC), rc;
	uint8_t extra;

	if (fd < 0)
		return errprintf(p->err, "%s/%s: %s", p->root, name, strerror(errno));
	if (!grow(&p->src, (size_t)s->size + 1)) {
		close(fd);
		return errprintf(p->err, "%s/%s: out of memory", p->root, name);
	}
	rc = pread_all(fd, p->src.p, (size_t)s->size, 0, &got);
	if (rc == 0 && got == s->size)
		rc = pread_all(fd, &extra, 1, (off_t)got, &got) == 0 && got == 0 ? 0 : 1;
	else if (rc == 0)
		rc = 1;
	if (rc < 0)
		errprintf(p->err, "%s/%s: read error: %s", p->root, name, strerror(errno));
	else if (rc > 0)
		errprintf(p->err,
			  "%s/%s: its size changed since ROOT was listed (%llu bytes then): the "
			  "folder is changing under pack; run pack again once it is still",
			  p->root, name, (unsigned long long)s->size);
	close(fd);
	p->src.len = (size_t)s->size;
	return rc == 0 ? 0 : -1;
}

/* Is shard k (open at fd) what pack writes? Every header, data byte (by CRC-32: the index's,
 * or with from_source the source file's, which then goes to the index), padding and the end
 * blocks. 0: yes; 1: no, why says why; -1: err (a source file could not be read). */
static int check_shard(struct pack *p, uint32_t k, int fd, bool from_source, char *why, size_t wn)
{
	struct stat st;
	uint8_t h[SHARD_HDR_MAX];
	size_t got;

	if (fstat(fd, &st) != 0)
		return snprintf(why, wn, "%s", strerror(errno)), 1;
	if ((uint64_t)st.st_size != p->bytes[k])
		return snprintf(why, wn, "%lld bytes, not the %llu its samples make",
				(long long)st.st_size, (unsigned long long)p->bytes[k]),
		       1;
	for (uint32_t i = p->first[k]; i < p->first[k + 1]; i++) {
		struct di_sample *s = &p->x.s[i];
		size_t hb = shard_tar_headers(h, di_name(&p->x, i), s->size);
		size_t n = hb + shard_tar_round(s->size);
		uint32_t crc;

		if (!grow(&p->back, n))
			return errprintf(p->err, "out of memory"), -1;
		if (pread_all(fd, p->back.p, n, (off_t)(s->offset - hb), &got) != 0 || got != n)
			return snprintf(why, wn, "%s: cannot be read back: %s", di_name(&p->x, i),
					got != n ? "cut short" : strerror(errno)),
			       1;
		if (memcmp(p->back.p, h, hb) != 0)
			return snprintf(why, wn, "%s: its tar header is not what pack writes",
					di_name(&p->x, i)),
			       1;
		for (size_t b = hb + s->size; b < n; b++)
			if (p->back.p[b])
				return snprintf(why, wn, "%s: its padding is not zero",
						di_name(&p->x, i)),
				       1;
		crc = shard_crc(p->back.p + hb, (size_t)s->size);
		if (from_source) {
			if (read_source(p, i) != 0)
				return -1;
			s->crc = shard_crc(p->src.p, p->src.len);
		}
		if (crc != s->crc)
			return snprintf(why, wn, "%s: CRC-32 %08x, %s %08x", di_name(&p->x, i), crc,
					from_source ? "the source file's is" : "written were",
					s->crc),
			       1;
	}
	if (pread_all(fd, h, SHARD_TAR_END, (off_t)(p->bytes[k] - SHARD_TAR_END), &got) != 0 ||
	    got != SHARD_TAR_END)
		return snprintf(why, wn, "its end blocks cannot be read back"), 1;
	for (int b = 0; b < SHARD_TAR_END; b++)
		if (h[b])
			return snprintf(why, wn, "it does not end in two zero blocks"), 1;
	return 0;
}

static void progress(struct pack *p, bool force)
{
	double t = now_s();
	size_t total = p->x.count;
	size_t at = p->first[p->kept] + p->done;

	if (!force && t - p->shown < 1.0)
		return;
	p->shown = t;
	say(p, "pack: %zu/%zu samples, shard %u/%u, %.1f MB, %.1f MB/s", at, total,
	    p->kept + p->wrote + (at < total), p->nshards, (double)p->put / 1e6,
	    t > p->t0 ? (double)p->put / 1e6 / (t - p->t0) : 0.0);
}

static int wflush(struct pack *p, int fd, const char *path)
{
	if (p->wlen && af_write_fd(fd, p->w, p->wlen) != 0)
		return errprintf(p->err, "%s: cannot write: %s", path, strerror(errno));
	p->put += p->wlen;
	p->wlen = 0;
	return 0;
}

static int wput(struct pack *p, int fd, const char *path, const void *data, size_t n)
{
	while (n) {
		size_t k = WBUF - p->wlen < n ? WBUF - p->wlen : n;
		memcpy(p->w + p->wlen, data, k);
		p->wlen += k;
		data = (const uint8_t *)data + k;
		n -= k;
		if (p->wlen == WBUF && wflush(p, fd, path) != 0)
			return -1;
	}
	return 0;
}

/* shard k as its partial shard: written, synced, read back and checked, renamed. */
static int write_shard(struct pack *p, uint32_t k)
{
	char part[SHARD_NAME_MAX], final[SHARD_NAME_MAX], why[512];
	static const uint8_t zero[SHARD_TAR_END];
	uint8_t h[SHARD_HDR_MAX];
	int fd, rc;

	shard_name(final, k);
	shard_partial_name(part, k);
	if ((fd = openat(p->outfd, part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
		return errprintf(p->err, "%s/%s: %s", p->out, part, strerror(errno));
	for (uint32_t i = p->first[k]; i < p->first[k + 1]; i++) {
		struct di_sample *s = &p->x.s[i];
		size_t hb;

		if (read_source(p, i) != 0)
			goto fail;
		s->crc = shard_crc(p->src.p, p->src.len);
		hb = shard_tar_headers(h, di_name(&p->x, i), s->size);
		if (wput(p, fd, part, h, hb) != 0 || wput(p, fd, part, p->src.p, p->src.len) != 0 ||
		    wput(p, fd, part, zero, shard_tar_round(s->size) - s->size) != 0)
			goto fail;
		p->done++;
		progress(p, false);
	}
	if (wput(p, fd, part, zero, SHARD_TAR_END) != 0 || wflush(p, fd, part) != 0)
		goto fail;
	if (fsync(fd) != 0) {
		errprintf(p->err, "%s/%s: cannot sync: %s", p->out, part, strerror(errno));
		goto fail;
	}
	/* read back from the storage, not from the page cache where it can be dropped */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if ((rc = check_shard(p, k, fd, false, why, sizeof(why))) != 0) {
		if (rc > 0)
			errprintf(p->err,
				  "%s/%s: read back after writing: %s; the storage does not return "
				  "what was written",
				  p->out, part, why);
		goto fail;
	}
	close(fd);
	if (renameat(p->outfd, part, p->outfd, final) != 0 ||
	    (fsync(p->outfd) != 0 && errno != EINVAL))
		return errprintf(p->err, "%s/%s: cannot rename it into place: %s", p->out, part,
				 strerror(errno));
	p->wrote++;
	return 0;
fail:
	close(fd);
	unlinkat(p->outfd, part, 0);
	return -1;
}

enum entry { E_OTHER, E_INDEX, E_STATE, E_SHARD, E_PARTIAL, E_TMP };

/* What pack makes in OUT: index, pack.state, shards and partial shards, and the temporaries
 * of atomic_file.h. */
static enum entry classify(const char *n, uint32_t *k)
{
	if (!strcmp(n, "index"))
		return E_INDEX;
	if (!strcmp(n, "pack.state"))
		return E_STATE;
	if (!strncmp(n, "index.tmp-", 10) || !strncmp(n, "pack.state.tmp-", 15))
		return E_TMP;
	switch (shard_parse_name(n, k)) {
	case SHARD_FILE_SHARD:
		return E_SHARD;
	case SHARD_FILE_PARTIAL:
		return E_PARTIAL;
	default:
		return E_OTHER;
	}
}

/* Remove what OUT holds of the kinds in `mask` (1 << entry), shards only from min_shard on. */
static int remove_entries(struct pack *p, unsigned mask, uint32_t min_shard)
{
	int fd = openat(p->outfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	int rv = 0;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return errprintf(p->err, "%s: cannot list: %s", p->out, strerror(errno));
	}
	while ((e = readdir(d)) && rv == 0) {
		uint32_t k = 0;
		enum entry t = classify(e->d_name, &k);

		if (!(mask & 1u << t) || ((t == E_SHARD || t == E_PARTIAL) && k < min_shard))
			continue;
		if (unlinkat(p->outfd, e->d_name, 0) != 0 && errno != ENOENT)
			rv = errprintf(p->err, "%s/%s: cannot remove: %s", p->out, e->d_name,
				       strerror(errno));
	}
	closedir(d);
	return rv;
}

/* What OUT holds: *state (pack.state), *any (an index or shards); -1 for anything else. */
static int survey_out(struct pack *p, bool *state, bool *any)
{
	int fd = openat(p->outfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	int rv = 0;

	*state = *any = false;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return errprintf(p->err, "%s: cannot list: %s", p->out, strerror(errno));
	}
	while ((e = readdir(d)) && rv == 0) {
		uint32_t k;
		enum entry t;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		t = classify(e->d_name, &k);
		*state |= t == E_STATE;
		*any |= t == E_INDEX || t == E_SHARD || t == E_PARTIAL;
		if (t == E_OTHER)
			rv = errprintf(p->err,
				       "%s: holds %s, which dptrain-data pack does not write; pack "
				       "into a new or empty directory (or one an earlier pack of "
				       "ROOT was writing)",
				       p->out, e->d_name);
	}
	closedir(d);
	return rv;
}

/* The earlier run's pack.state: 1 if it is this pack's, 0 if another pack of this root
 * (other shard size or listing), -1 (err) if of another root or unreadable. */
static int same_pack(struct pack *p, const char *want)
{
	char buf[PATH_MAX + 256] = "";
	const char *root = strstr(want, "\nroot "), *end = strchr(root + 1, '\n');
	size_t got = 0;
	int fd = openat(p->outfd, "pack.state", O_RDONLY | O_CLOEXEC);

	if (fd < 0 || pread_all(fd, buf, sizeof(buf) - 1, 0, &got) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return errprintf(p->err, "%s/pack.state: %s", p->out, strerror(e));
	}
	close(fd);
	buf[got] = '\0';
	if (!strcmp(buf, want))
		return 1;
	if (!strncmp(buf, "dptrain-pack 1\n", 15) && strstr(buf, "\nroot ") &&
	    strncmp(strstr(buf, "\nroot "), root, (size_t)(end - root + 1)) != 0)
		return errprintf(p->err,
				 "%s: holds the shards of another folder (see its pack.state); "
				 "pack %s elsewhere, or remove them",
				 p->out, p->root);
	say(p,
	    "%s: the shards there were packed from another listing of %s or with another shard "
	    "size; packing anew",
	    p->out, p->root);
	return 0;
}

/* Check the shards an earlier run completed, in order; *start = the first to write. */
static int verify_kept(struct pack *p, uint32_t *start)
{
	char name[SHARD_NAME_MAX], why[512];
	uint32_t k;

	for (k = 0; k < p->nshards; k++) {
		int fd, rc;

		shard_name(name, k);
		if ((fd = openat(p->outfd, name, O_RDONLY | O_CLOEXEC)) < 0) {
			if (errno == ENOENT)
				break;
			return errprintf(p->err, "%s/%s: %s", p->out, name, strerror(errno));
		}
		rc = check_shard(p, k, fd, true, why, sizeof(why));
		close(fd);
		if (rc < 0)
			return -1;
		if (rc > 0) {
			say(p, "%s/%s: %s; writing it again", p->out, name, why);
			break;
		}
		p->kept++;
	}
	*start = k;
	if (k > 0)
		say(p, "pack: %u shard%s of an earlier run checked against %s and kept", k,
		    k == 1 ? "" : "s", p->root);
	return 0;
}

/* OUT made or checked, locked, cleaned; *start: the first shard to write. */
static int pack_prepare(struct pack *p, const char *abs_root, uint32_t *start)
{
	char *want = NULL, *abs_out;
	bool state, any;
	int same = 0, rv = -1;
	size_t n = strlen(abs_root);

	if (mkdir(p->out, 0777) != 0 && errno != EEXIST)
		return errprintf(p->err, "%s: cannot create: %s", p->out, strerror(errno));
	if ((p->outfd = open(p->out, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return errprintf(p->err, "%s: %s", p->out, strerror(errno));
	if ((abs_out = realpath(p->out, NULL)) && !strncmp(abs_out, abs_root, n) &&
	    (abs_out[n] == '/' || abs_out[n] == '\0' || n == 1)) {
		free(abs_out);
		return errprintf(p->err,
				 "%s: inside the image folder %s, where it would be read "
				 "as a class; pack somewhere else",
				 p->out, p->root);
	}
	free(abs_out);
	if (flock(p->outfd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
		return errprintf(p->err, "%s: another dptrain-data pack is writing there", p->out);
	if (survey_out(p, &state, &any) != 0)
		return -1;
	if (!state && any)
		return errprintf(p->err,
				 "%s: holds shards or an index but no pack.state, so not a pack "
				 "this can resume; remove them, or pack elsewhere",
				 p->out);
	if (asprintf(&want, "dptrain-pack 1\nroot %s\nshard-size %llu\nsource %08x\n", abs_root,
		     (unsigned long long)p->shard_size, p->source_crc) < 0)
		return errprintf(p->err, "out of memory");
	if (state && (same = same_pack(p, want)) < 0)
		goto out;
	if (same) {
		if (remove_entries(p, 1u << E_PARTIAL | 1u << E_TMP, 0) != 0 ||
		    verify_kept(p, start) != 0 || remove_entries(p, 1u << E_SHARD, *start) != 0)
			goto out;
	} else {
		char path[PATH_MAX];
		*start = 0;
		snprintf(path, sizeof(path), "%s/pack.state", p->out);
		if (remove_entries(p, 1u << E_INDEX, 0) != 0 ||
		    remove_entries(p, 1u << E_SHARD | 1u << E_PARTIAL | 1u << E_TMP, 0) != 0 ||
		    af_write(path, want, strlen(want), 0644, p->err) != 0)
			goto out;
	}
	rv = 0;
out:
	free(want);
	return rv;
}

/* ROOT's samples (a scan, or --index), and the CRC-32 of their index text. */
static int pack_list(struct pack *p, const char *index, char **abs_root)
{
	struct dp_error warn;
	char *text;
	size_t len;

	if (!(*abs_root = realpath(p->root, NULL)))
		return errprintf(p->err, "%s: %s (the image folder)", p->root, strerror(errno));
	if (index) {
		if (di_read(&p->x, index, p->err) != 0)
			return -1;
		if (strcmp(p->x.root, *abs_root) != 0)
			return errprintf(p->err, "%s: an index of %s, not of %s (%s)", index,
					 p->x.root, p->root, *abs_root);
	} else {
		if (di_scan(&p->x, *abs_root, &warn, p->err) != 0)
			return -1;
		if (warn.text[0]) {
			/* the form of every warning; the caller's say() puts its name first */
			char line[DP_ERROR_MAX + 16];
			dp_warn_format(line, sizeof(line), NULL, NULL, "%s", warn.text);
			say(p, "%s", line);
		}
	}
	p->x.kind = DI_FOLDER;
	if (di_format(&p->x, &text, &len, p->err) != 0)
		return -1;
	p->source_crc = shard_crc((const uint8_t *)text, len);
	free(text);
	p->x.kind = DI_SHARDS;
	return 0;
}

static int pack_run(struct pack *p, const char *index, struct shard_pack_result *res)
{
	char *abs = NULL, path[PATH_MAX];
	uint32_t start = 0;
	int rv = -1;

	if (pack_list(p, index, &abs) != 0 || pack_plan(p) != 0)
		goto out;
	if ((p->rootfd = open(abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		errprintf(p->err, "%s: %s", p->root, strerror(errno));
		goto out;
	}
	if (!(p->w = malloc(WBUF))) {
		errprintf(p->err, "out of memory");
		goto out;
	}
	if (pack_prepare(p, abs, &start) != 0)
		goto out;
	p->t0 = p->shown = now_s();
	for (uint32_t k = start; k < p->nshards; k++) {
		if (p->stop_after >= 0 && p->wrote == p->stop_after) {
			rv = SHARD_PACK_STOPPED;
			goto out;
		}
		if (write_shard(p, k) != 0)
			goto out;
	}
	snprintf(path, sizeof(path), "%s/index", p->out);
	if (di_write(&p->x, path, NULL, p->err) != 0)
		goto out;
	res->seconds = now_s() - p->t0;
	progress(p, true);
	rv = 0;
out:
	res->count = p->x.count;
	res->nshards = p->nshards;
	res->kept = p->kept;
	res->wrote = p->wrote;
	res->put = p->put;
	free(abs);
	return rv;
}

int shard_pack(const struct shard_pack_opts *o, struct shard_pack_result *res, struct dp_error *err)
{
	struct pack p = {.root = o->root,
			 .out = o->out,
			 .shard_size = o->shard_size,
			 .stop_after = o->stop_after,
			 .say = o->say,
			 .rootfd = -1,
			 .outfd = -1,
			 .err = err};
	int rv;

	memset(res, 0, sizeof(*res));
	rv = pack_run(&p, o->index, res);
	if (p.rootfd >= 0)
		close(p.rootfd);
	if (p.outfd >= 0)
		close(p.outfd);
	di_free(&p.x);
	free(p.first);
	free(p.bytes);
	free(p.src.p);
	free(p.back.p);
	free(p.w);
	return rv;
}
