/* dptrain-data.c — dptrain-data: image folders and packed shards from the command line (index,
 * list, pack, verify) and the image transforms' outputs and crops that tests compare with
 * torchvision (transform, crops). Owns the tar layout of the shards (written by pack, checked
 * by pack and verify); the index format is data_index.c's, loading data_folder.c's and
 * data_shards.c's, pixels image.c's. Exit status: 0 done, 1 error, 2 usage, 3 stopped by
 * --stop-after-shards. */
#define _GNU_SOURCE
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/error.h"
#include "trainer/data/data.h"
#include "trainer/data/data_index.h"
#include "trainer/data/image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define PROG	     "dptrain-data"
#define EXIT_USAGE   2
#define EXIT_STOPPED 3
#define TAR_BLOCK    512
#define TAR_END	     (2 * TAR_BLOCK) /* two zero blocks end an archive */
#define MAX_MEMBER   (1ull << 30)    /* what data_shards.c reads */
#define MAX_NAME     4000	     /* a member's path, bytes */
#define HDR_MAX	     6144	     /* pax header + its data + ustar header, for MAX_NAME */
#define WBUF	     (8u << 20)

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static int usage_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_err(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG " %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "; see " PROG " %s --help\n", cmd);
	return EXIT_USAGE;
}

/* getopt_long's complaint as a usage error (optstring starts with ':'). */
static int bad_option(const char *cmd, int c, char **argv)
{
	const char *opt = argv[optind - 1];
	char s[3] = {'-', (char)optopt, 0};

	if (optopt && strncmp(opt, "--", 2) != 0)
		opt = s;
	if (c == ':')
		return usage_err(cmd, "option '%s' needs a value", opt);
	return usage_err(cmd, "unknown option '%s'", opt);
}

static int write_stdout_done(void)
{
	if (fflush(stdout) != 0 || ferror(stdout))
		return fail("cannot write the standard output: %s", strerror(errno));
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Numbers on the command line */

static bool parse_ll(const char *s, long long lo, long long hi, long long *v)
{
	char *end;
	long long x;

	errno = 0;
	x = strtoll(s, &end, 10);
	if (errno || end == s || *end || x < lo || x > hi)
		return false;
	*v = x;
	return true;
}

static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return !errno && !*end;
}

/* "1G", "512M", "100K", "4096": powers of 1024. */
static bool parse_size(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long x;
	int shift = 0;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno)
		return false;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10, end++;
		break;
	case 'm':
	case 'M':
		shift = 20, end++;
		break;
	case 'g':
	case 'G':
		shift = 30, end++;
		break;
	case 't':
	case 'T':
		shift = 40, end++;
		break;
	}
	if (*end || x == 0 || x > (UINT64_MAX >> 2) >> shift)
		return false;
	*v = (uint64_t)x << shift;
	return true;
}

/* n comma-separated numbers (*got of them, 1..n). */
static bool parse_doubles(const char *s, double *v, int n, int *got)
{
	int k = 0;

	for (;;) {
		char *end;
		if (k == n)
			return false;
		errno = 0;
		v[k++] = strtod(s, &end);
		if (errno || end == s || !isfinite(v[k - 1]))
			return false;
		if (*end == '\0')
			break;
		if (*end != ',')
			return false;
		s = end + 1;
	}
	*got = k;
	return true;
}

/* ------------------------------------------------------------------------------------ */
/* Sources: an image folder, an index file, a shard directory */

static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A shard directory: what pack writes there (its index last). */
static bool is_shard_dir(const char *dir)
{
	static const char *const names[] = {"index", "pack.state", "shard-00000.tar"};
	char path[PATH_MAX];

	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
		if (is_file(path))
			return true;
	}
	return false;
}

static int load_source(struct data_set *ds, const char *src, const char *cache_dir,
		       struct dp_error *err)
{
	struct stat st;
	char path[PATH_MAX];

	if (stat(src, &st) != 0)
		return errprintf(err, "%s: %s", src, strerror(errno));
	if (S_ISREG(st.st_mode)) {
		struct di_index x;
		char *root, *slash;
		int rv;

		if (di_read(&x, src, err) != 0)
			return -1;
		if (x.kind == DI_SHARDS) {
			di_free(&x);
			snprintf(path, sizeof(path), "%s", src);
			slash = strrchr(path, '/');
			if (slash)
				*(slash == path ? slash + 1 : slash) = '\0';
			return data_load_shards(ds, slash ? path : ".", err);
		}
		root = x.root;
		x.root = NULL;
		di_free(&x);
		rv = data_load_imagefolder(ds, root, src, NULL, err);
		free(root);
		return rv;
	}
	if (!S_ISDIR(st.st_mode))
		return errprintf(err, "%s: neither a folder nor an index file", src);
	if (is_shard_dir(src))
		return data_load_shards(ds, src, err);
	return data_load_imagefolder(ds, src, NULL, cache_dir, err);
}

/* ------------------------------------------------------------------------------------ */
/* index, list */

static const char index_help[] =
    "usage: " PROG " index ROOT -o FILE\n"
    "List the image folder ROOT (torchvision's ImageFolder: one folder per class) into an\n"
    "index file, written atomically; -o - writes it to the standard output.\n";

static int cmd_index(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"output", required_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'}, {0}};
	const char *out = NULL;
	struct di_index x;
	struct dp_error err, warn;
	int c;

	while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
		if (c == 'h')
			return fputs(index_help, stdout), 0;
		if (c == 'o')
			out = optarg;
		else
			return bad_option("index", c, argv);
	}
	if (argc - optind != 1)
		return usage_err("index", "expected one ROOT, got %d arguments", argc - optind);
	if (!out)
		return usage_err("index", "say where the index goes: -o FILE (or -o - for the "
					  "standard output)");
	if (di_scan(&x, argv[optind], &warn, &err) != 0)
		return fail("%s", err.text);
	if (warn.text[0])
		fprintf(stderr, PROG ": warning: %s\n", warn.text);
	if (strcmp(out, "-") == 0) {
		char *text;
		size_t len;
		int rv = di_format(&x, &text, &len, &err);

		if (rv == 0)
			fwrite(text, 1, len, stdout);
		free(text);
		di_free(&x);
		return rv != 0 ? fail("%s", err.text) : write_stdout_done();
	}
	if (di_write(&x, out, NULL, &err) != 0) {
		di_free(&x);
		return fail("%s", err.text);
	}
	fprintf(stderr, PROG ": %s: %zu samples in %d classes, indexed in %s\n", x.root, x.count,
		x.num_classes, out);
	di_free(&x);
	return 0;
}

static const char list_help[] =
    "usage: " PROG " list [--cache-dir DIR] SOURCE\n"
    "Print INDEX<TAB>LABEL<TAB>CLASS<TAB>PATH for every sample of SOURCE: an image folder, an\n"
    "index file, or a shard directory. --cache-dir: an image folder's listing is cached there,\n"
    "as the trainer does.\n";

static int cmd_list(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"cache-dir", required_argument, NULL, 'C'}, {"help", no_argument, NULL, 'h'}, {0}};
	const char *cache = NULL;
	const struct di_index *x;
	struct data_set ds;
	struct dp_error err;
	int c;

	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h')
			return fputs(list_help, stdout), 0;
		if (c == 'C')
			cache = optarg;
		else
			return bad_option("list", c, argv);
	}
	if (argc - optind != 1)
		return usage_err("list", "expected one SOURCE, got %d arguments", argc - optind);
	if (load_source(&ds, argv[optind], cache, &err) != 0)
		return fail("%s", err.text);
	x = di_of_set(ds.priv);
	for (size_t i = 0; i < x->count; i++)
		printf("%zu\t%u\t%s\t%s\n", i, x->s[i].label, ds.class_names[x->s[i].label],
		       di_name(x, i));
	data_free(&ds);
	return write_stdout_done();
}

/* ------------------------------------------------------------------------------------ */
/* The tar layout of a shard: per sample [pax header + its data, when the path does not fit
 * ustar's name and prefix fields] ustar header, the file's bytes padded to 512; two zero
 * blocks at the end. Every field is fixed (mode 0644, owner 0, time 0), so the same folder
 * packs to the same bytes. */

static uint64_t round_block(uint64_t n)
{
	return (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
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

static void ustar_header(uint8_t h[TAR_BLOCK], const char *name, size_t len, uint64_t size,
			 char type)
{
	int p = ustar_split(name, len);
	unsigned sum = 0;

	memset(h, 0, TAR_BLOCK);
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
	for (int i = 0; i < TAR_BLOCK; i++)
		sum += h[i];
	octal(h + 148, 7, sum);
	h[155] = ' ';
}

/* The header blocks before a member's data, into h (HDR_MAX bytes); returns their length. */
static size_t tar_headers(uint8_t *h, const char *name, uint64_t size)
{
	size_t len = strlen(name), body, rec;

	if (ustar_split(name, len) >= 0) {
		ustar_header(h, name, len, size, '0');
		return TAR_BLOCK;
	}
	/* a pax record: "LEN path=NAME\n", LEN counting itself */
	body = strlen(" path=") + len + 1;
	for (rec = body + 1; (size_t)snprintf(NULL, 0, "%zu", rec) + body != rec;)
		rec = body + (size_t)snprintf(NULL, 0, "%zu", rec);
	ustar_header(h, "PaxHeaders/path", 15, rec, 'x');
	memset(h + TAR_BLOCK, 0, round_block(rec));
	snprintf((char *)h + TAR_BLOCK, rec + 1, "%zu path=%s\n", rec, name);
	ustar_header(h + TAR_BLOCK + round_block(rec), name, len, size, '0');
	return 2 * TAR_BLOCK + round_block(rec);
}

static size_t header_len(const char *name)
{
	uint8_t h[HDR_MAX];

	return ustar_split(name, strlen(name)) >= 0 ? TAR_BLOCK : tar_headers(h, name, 0);
}

static uint32_t crc_of(const uint8_t *p, size_t n)
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
/* pack */

struct pack {
	const char *root, *out; /* as given */
	uint64_t shard_size;
	long long stop_after; /* shards this run writes before it stops; -1: no limit */
	struct di_index x;    /* the folder's list, made the shards' index */
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

static const char pack_help[] =
    "usage: " PROG " pack ROOT OUT [--shard-size SIZE] [--index FILE] [--stop-after-shards K]\n"
    "Pack the image folder ROOT into tar shards in the directory OUT (made if absent):\n"
    "OUT/shard-00000.tar ... in sample order, then OUT/index. Resumable: run again after an\n"
    "interruption and the shards already written are checked against ROOT and kept.\n"
    "  --shard-size SIZE        bytes a shard holds at most (one sample more if it is larger);\n"
    "                           K, M, G suffixes (powers of 1024); default 1G\n"
    "  --index FILE             ROOT's listing from FILE (" PROG " index) instead of a scan\n"
    "  --stop-after-shards K    for testing resumption: stop with exit status 3 after writing\n"
    "                           K shards\n";

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

		if (strlen(di_name(x, i)) > MAX_NAME)
			return errprintf(p->err, "%s/%s: a path longer than %d bytes", p->root,
					 di_name(x, i), MAX_NAME);
		if (s->size > MAX_MEMBER)
			return errprintf(p->err, "%s/%s: %llu bytes: too large for an image",
					 p->root, di_name(x, i), (unsigned long long)s->size);
		hb = header_len(di_name(x, i));
		mb = hb + round_block(s->size);
		if (cur > 0 && cur + mb + TAR_END > p->shard_size) {
			p->bytes[k++] = cur + TAR_END;
			p->first[k] = (uint32_t)i;
			cur = 0;
		}
		s->shard = k;
		s->offset = cur + hb;
		cur += mb;
	}
	p->bytes[k] = cur + TAR_END;
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
	uint8_t h[HDR_MAX];
	size_t got;

	if (fstat(fd, &st) != 0)
		return snprintf(why, wn, "%s", strerror(errno)), 1;
	if ((uint64_t)st.st_size != p->bytes[k])
		return snprintf(why, wn, "%lld bytes, not the %llu its samples make",
				(long long)st.st_size, (unsigned long long)p->bytes[k]),
		       1;
	for (uint32_t i = p->first[k]; i < p->first[k + 1]; i++) {
		struct di_sample *s = &p->x.s[i];
		size_t hb = tar_headers(h, di_name(&p->x, i), s->size);
		size_t n = hb + round_block(s->size);
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
		crc = crc_of(p->back.p + hb, (size_t)s->size);
		if (from_source) {
			if (read_source(p, i) != 0)
				return -1;
			s->crc = crc_of(p->src.p, p->src.len);
		}
		if (crc != s->crc)
			return snprintf(why, wn, "%s: CRC-32 %08x, %s %08x", di_name(&p->x, i), crc,
					from_source ? "the source file's is" : "written were",
					s->crc),
			       1;
	}
	if (pread_all(fd, h, TAR_END, (off_t)(p->bytes[k] - TAR_END), &got) != 0 || got != TAR_END)
		return snprintf(why, wn, "its end blocks cannot be read back"), 1;
	for (int b = 0; b < TAR_END; b++)
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
	fprintf(stderr, PROG ": pack: %zu/%zu samples, shard %u/%u, %.1f MB, %.1f MB/s\n", at,
		total, p->kept + p->wrote + (at < total), p->nshards, (double)p->put / 1e6,
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

/* shard k as shard-K.tar.partial: written, synced, read back and checked, renamed. */
static int write_shard(struct pack *p, uint32_t k)
{
	char part[64], final[64], why[512];
	static const uint8_t zero[TAR_END];
	uint8_t h[HDR_MAX];
	int fd, rc;

	snprintf(final, sizeof(final), "shard-%05u.tar", k);
	snprintf(part, sizeof(part), "shard-%05u.tar.partial", k);
	if ((fd = openat(p->outfd, part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
		return errprintf(p->err, "%s/%s: %s", p->out, part, strerror(errno));
	for (uint32_t i = p->first[k]; i < p->first[k + 1]; i++) {
		struct di_sample *s = &p->x.s[i];
		size_t hb;

		if (read_source(p, i) != 0)
			goto fail;
		s->crc = crc_of(p->src.p, p->src.len);
		hb = tar_headers(h, di_name(&p->x, i), s->size);
		if (wput(p, fd, part, h, hb) != 0 || wput(p, fd, part, p->src.p, p->src.len) != 0 ||
		    wput(p, fd, part, zero, round_block(s->size) - s->size) != 0)
			goto fail;
		p->done++;
		progress(p, false);
	}
	if (wput(p, fd, part, zero, TAR_END) != 0 || wflush(p, fd, part) != 0)
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

/* What pack makes in OUT: index, pack.state, shard-NNNNN.tar(.partial), and the temporaries
 * of atomic_file.h. */
static enum entry classify(const char *n, uint32_t *k)
{
	char canon[64];
	size_t nd;

	if (!strcmp(n, "index"))
		return E_INDEX;
	if (!strcmp(n, "pack.state"))
		return E_STATE;
	if (!strncmp(n, "index.tmp-", 10) || !strncmp(n, "pack.state.tmp-", 15))
		return E_TMP;
	if (strncmp(n, "shard-", 6) != 0 || (nd = strspn(n + 6, "0123456789")) < 5 || nd > 10)
		return E_OTHER;
	unsigned long long v = strtoull(n + 6, NULL, 10);
	if (v > UINT32_MAX)
		return E_OTHER;
	*k = (uint32_t)v;
	snprintf(canon, sizeof(canon), "shard-%05u.tar", *k);
	if (!strcmp(n, canon))
		return E_SHARD;
	strcat(canon, ".partial");
	return !strcmp(n, canon) ? E_PARTIAL : E_OTHER;
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
	fprintf(stderr,
		PROG ": %s: the shards there were packed from another listing of %s or with "
		     "another shard size; packing anew\n",
		p->out, p->root);
	return 0;
}

/* Check the shards an earlier run completed, in order; *start = the first to write. */
static int verify_kept(struct pack *p, uint32_t *start)
{
	char name[64], why[512];
	uint32_t k;

	for (k = 0; k < p->nshards; k++) {
		int fd, rc;

		snprintf(name, sizeof(name), "shard-%05u.tar", k);
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
			fprintf(stderr, PROG ": %s/%s: %s; writing it again\n", p->out, name, why);
			break;
		}
		p->kept++;
	}
	*start = k;
	if (k > 0)
		fprintf(stderr,
			PROG ": pack: %u shard%s of an earlier run checked against %s and kept\n",
			k, k == 1 ? "" : "s", p->root);
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
		if (warn.text[0])
			fprintf(stderr, PROG ": warning: %s\n", warn.text);
	}
	p->x.kind = DI_FOLDER;
	if (di_format(&p->x, &text, &len, p->err) != 0)
		return -1;
	p->source_crc = crc_of((const uint8_t *)text, len);
	free(text);
	p->x.kind = DI_SHARDS;
	return 0;
}

static int pack_run(struct pack *p, const char *index)
{
	char *abs = NULL, path[PATH_MAX], wrote[256], kept[128] = "";
	uint32_t start = 0;
	double t;
	int rv = 1;

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
			fprintf(stderr,
				PROG ": pack: stopped after %u shard%s (--stop-after-shards); run "
				     "the same command again to go on\n",
				p->wrote, p->wrote == 1 ? "" : "s");
			rv = EXIT_STOPPED;
			goto out;
		}
		if (write_shard(p, k) != 0)
			goto out;
	}
	snprintf(path, sizeof(path), "%s/index", p->out);
	if (di_write(&p->x, path, NULL, p->err) != 0)
		goto out;
	t = now_s() - p->t0;
	progress(p, true);
	if (p->wrote)
		snprintf(wrote, sizeof(wrote),
			 "this run wrote %u shard%s, %.1f MB in %.1f s (%.1f MB/s), each read "
			 "back with every member's CRC-32 checked",
			 p->wrote, p->wrote == 1 ? "" : "s", (double)p->put / 1e6, t,
			 t > 0 ? (double)p->put / 1e6 / t : 0.0);
	else
		snprintf(wrote, sizeof(wrote), "this run wrote no shard");
	if (p->kept)
		snprintf(kept, sizeof(kept),
			 "; the earlier run's shards (%u) were checked against the source and "
			 "kept",
			 p->kept);
	fprintf(stderr, PROG ": packed %s into %s: %zu samples in %u shard%s; %s%s\n", p->root,
		p->out, p->x.count, p->nshards, p->nshards == 1 ? "" : "s", wrote, kept);
	rv = 0;
out:
	if (rv == 1)
		fail("%s", p->err->text);
	free(abs);
	return rv;
}

static int cmd_pack(int argc, char **argv)
{
	static const struct option opts[] = {{"shard-size", required_argument, NULL, 'S'},
					     {"index", required_argument, NULL, 'I'},
					     {"stop-after-shards", required_argument, NULL, 'K'},
					     {"help", no_argument, NULL, 'h'},
					     {0}};
	struct dp_error err;
	struct pack p = {
	    .shard_size = 1ull << 30, .stop_after = -1, .rootfd = -1, .outfd = -1, .err = &err};
	const char *index = NULL;
	int c, rv;

	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h')
			return fputs(pack_help, stdout), 0;
		if (c == 'S' && !parse_size(optarg, &p.shard_size))
			return usage_err("pack", "--shard-size '%s': a size such as 1G, 512M, 100K",
					 optarg);
		if (c == 'K' && !parse_ll(optarg, 0, UINT32_MAX, &p.stop_after))
			return usage_err("pack", "--stop-after-shards '%s': a number of shards",
					 optarg);
		if (c == 'I')
			index = optarg;
		if (c != 'S' && c != 'K' && c != 'I')
			return bad_option("pack", c, argv);
	}
	if (argc - optind != 2)
		return usage_err("pack", "expected ROOT and OUT, got %d arguments", argc - optind);
	p.root = argv[optind];
	p.out = argv[optind + 1];
	rv = pack_run(&p, index);
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

/* ------------------------------------------------------------------------------------ */
/* verify */

static const char verify_help[] =
    "usage: " PROG " verify [--decode] SOURCE\n"
    "Check every sample of SOURCE (a shard directory, an image folder or an index file): a\n"
    "shard's size, each member's tar header and CRC-32, and every image's header (JPEG or\n"
    "PNG, its size); --decode also decodes each one (the eval transform, 224). Prints each bad\n"
    "sample with the reason, then a summary; exit status 1 if any is bad.\n";

struct vcheck {
	bool decode;
	struct imtf t;
	struct imtf_scratch s;
	float *out;
	size_t checked, bad, bad_shards;
};

/* The image's header, with --decode the whole image: NULL when good, else why. */
static const char *check_image(struct vcheck *v, size_t i, const uint8_t *p, size_t n, char *why,
			       size_t wn)
{
	struct dp_error err;
	const char *kind;
	bool warning = false;
	int W, H;

	if (n == 0)
		return snprintf(why, wn, "empty file, not an image"), why;
	if (img_probe(p, n, &W, &H, &kind, &err) != 0)
		return snprintf(why, wn, "%s", err.text), why;
	if (!v->decode)
		return NULL;
	if (imtf_apply(&v->t, 0, i, p, n, &v->s, v->out, &warning, &err) != 0)
		return snprintf(why, wn, "%s", err.text), why;
	if (warning) /* libjpeg's complaint: the file decodes, what is missing grey */
		return snprintf(why, wn, "%.1900s (decodes with what is missing grey)", err.text),
		       why;
	return NULL;
}

/* Sample i of a shard directory: NULL when good, else why. */
static const char *check_member(struct vcheck *v, const struct di_index *x, size_t i, int fd,
				off_t size, struct data_bytes *b, char *why, size_t wn)
{
	const struct di_sample *s = &x->s[i];
	uint8_t h[HDR_MAX];
	size_t hb = tar_headers(h, di_name(x, i), s->size), got;

	if (s->offset + round_block(s->size) > (uint64_t)size)
		return snprintf(why, wn,
				"beyond the end of the shard (%lld bytes): the shard is "
				"truncated",
				(long long)size),
		       why;
	if (!grow(b, (size_t)s->size + TAR_BLOCK))
		return snprintf(why, wn, "out of memory"), why;
	if (pread_all(fd, b->p, (size_t)s->size + TAR_BLOCK, (off_t)s->offset - TAR_BLOCK, &got) !=
		0 ||
	    got != s->size + TAR_BLOCK)
		return snprintf(why, wn, "read error: %s", strerror(errno)), why;
	if (memcmp(b->p, h + hb - TAR_BLOCK, TAR_BLOCK) != 0)
		return snprintf(why, wn, "its tar header is damaged"), why;
	if (crc_of(b->p + TAR_BLOCK, (size_t)s->size) != s->crc)
		return snprintf(why, wn, "CRC-32 mismatch (corrupt shard)"), why;
	return check_image(v, i, b->p + TAR_BLOCK, (size_t)s->size, why, wn);
}

/* Each shard's size must be what pack wrote: its last member, then the end blocks. */
static int check_shard_sizes(struct vcheck *v, const struct di_index *x, const char *dir,
			     const int *eno, const off_t *size)
{
	uint64_t *want = calloc(x->shards, sizeof(*want));

	if (!want)
		return -1;
	for (size_t i = 0; i < x->count; i++)
		want[x->s[i].shard] = round_block(x->s[i].offset + x->s[i].size) + TAR_END;
	for (uint32_t k = 0; k < x->shards; k++) {
		if (eno[k] || !want[k] || (uint64_t)size[k] == want[k])
			continue;
		v->bad_shards++;
		printf("%s/shard-%05u.tar: %lld bytes, %llu expected: %s; re-run dptrain-data "
		       "pack %s %s to repair\n",
		       dir, k, (long long)size[k], (unsigned long long)want[k],
		       (uint64_t)size[k] < want[k] ? "truncated" : "data after the archive's end",
		       x->root, dir);
	}
	free(want);
	return 0;
}

static int verify_shards(struct vcheck *v, const char *dir)
{
	struct di_index x;
	struct dp_error err;
	struct data_bytes b = {0};
	char path[PATH_MAX], why[DP_ERROR_MAX];
	int *fd;
	off_t *size;
	int *eno;

	snprintf(path, sizeof(path), "%s/index", dir);
	if (di_read(&x, path, &err) != 0)
		return fail("%s", err.text);
	if (x.kind != DI_SHARDS) {
		di_free(&x);
		return fail("%s: the index of an image folder, not of shards", path);
	}
	fd = calloc(x.shards, sizeof(*fd));
	size = calloc(x.shards, sizeof(*size));
	eno = calloc(x.shards, sizeof(*eno));
	if (!fd || !size || !eno)
		return fail("out of memory");
	for (uint32_t k = 0; k < x.shards; k++) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/shard-%05u.tar", dir, k);
		fd[k] = open(path, O_RDONLY | O_CLOEXEC);
		eno[k] = fd[k] < 0 || fstat(fd[k], &st) != 0 ? errno : 0;
		size[k] = eno[k] ? 0 : st.st_size;
	}
	if (check_shard_sizes(v, &x, dir, eno, size) != 0)
		return fail("out of memory");
	for (size_t i = 0; i < x.count; i++) {
		uint32_t k = x.s[i].shard;
		const char *bad =
		    eno[k] ? strerror(eno[k])
			   : check_member(v, &x, i, fd[k], size[k], &b, why, sizeof(why));
		v->checked++;
		if (bad) {
			v->bad++;
			printf("%s/shard-%05u.tar: %s: %s\n", dir, k, di_name(&x, i), bad);
		}
	}
	printf("%s: %zu samples in %u shards checked (sizes, tar headers, CRC-32, image "
	       "headers%s): %zu bad%s\n",
	       dir, v->checked, x.shards, v->decode ? ", decoding" : "", v->bad,
	       v->bad_shards ? ", and shards of the wrong size" : "");
	for (uint32_t k = 0; k < x.shards; k++)
		if (fd[k] >= 0)
			close(fd[k]);
	free(fd);
	free(size);
	free(eno);
	free(b.p);
	di_free(&x);
	return 0;
}

static int verify_folder(struct vcheck *v, const char *src)
{
	struct data_set ds;
	struct dp_error err;
	struct data_bytes b = {0};
	char desc[PATH_MAX + 64], why[DP_ERROR_MAX];
	const struct di_index *x;

	if (load_source(&ds, src, NULL, &err) != 0)
		return fail("%s", err.text);
	x = di_of_set(ds.priv);
	for (size_t i = 0; i < ds.count; i++) {
		const char *bad = NULL;
		int label;

		data_describe(&ds, i, desc, sizeof(desc));
		v->checked++;
		if (data_read(&ds, i, &b, &label, &err) != 0)
			bad = err.text;
		else if (b.len != x->s[i].size)
			bad = (snprintf(why, sizeof(why),
					"%zu bytes, the index says %llu: it changed since it was "
					"indexed",
					b.len, (unsigned long long)x->s[i].size),
			       why);
		else
			bad = check_image(v, i, b.p, b.len, why, sizeof(why));
		if (bad) {
			v->bad++;
			if (bad == err.text) /* names the file already */
				printf("%s\n", bad);
			else
				printf("%s: %s\n", desc, bad);
		}
	}
	printf("%s: %zu samples checked (image headers%s): %zu bad\n", ds.name, v->checked,
	       v->decode ? ", decoding" : "", v->bad);
	free(b.p);
	data_free(&ds);
	return 0;
}

static int cmd_verify(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"decode", no_argument, NULL, 'D'}, {"help", no_argument, NULL, 'h'}, {0}};
	struct imtf_spec spec = {
	    .mode = IMTF_EVAL, .channels = 3, .size = 224, .resize = 256, .dct_scaling = true};
	struct vcheck v = {0};
	struct dp_error err;
	char path[PATH_MAX];
	const char *src;
	int c, rv;

	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h')
			return fputs(verify_help, stdout), 0;
		if (c == 'D')
			v.decode = true;
		else
			return bad_option("verify", c, argv);
	}
	if (argc - optind != 1)
		return usage_err("verify", "expected one SOURCE, got %d arguments", argc - optind);
	src = argv[optind];
	if (imtf_init(&v.t, &spec, &err) != 0)
		return fail("%s", err.text);
	if (!(v.out = malloc(imtf_out_elems(&v.t) * sizeof(float))))
		return fail("out of memory");
	if (is_shard_dir(src)) {
		rv = verify_shards(&v, src);
	} else {
		struct di_index x = {0};
		/* an index file: a shard directory's, or an image folder's */
		if (is_file(src) && di_read(&x, src, &err) == 0 && x.kind == DI_SHARDS) {
			char *slash;
			snprintf(path, sizeof(path), "%s", src);
			slash = strrchr(path, '/');
			if (slash)
				*(slash == path ? slash + 1 : slash) = '\0';
			rv = verify_shards(&v, slash ? path : ".");
		} else {
			rv = verify_folder(&v, src);
		}
		di_free(&x);
	}
	imtf_scratch_free(&v.s);
	free(v.out);
	if (rv == 0 && write_stdout_done() != 0)
		return 1;
	return rv ? rv : v.bad || v.bad_shards ? 1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* transform, crops */

static const char transform_help[] =
    "usage: " PROG " transform (--train|--eval) [options] -o OUT SOURCE\n"
    "Write the transformed samples FIRST .. FIRST+COUNT-1 of SOURCE (an image folder, an index\n"
    "file or a shard directory) to OUT, back to back: float32 CHW, little-endian (uint8 HWC\n"
    "with --u8); print INDEX LABEL TOP LEFT H W FLIP IMAGE_W IMAGE_H (tab-separated) for each.\n"
    "  --train | --eval      RandomResizedCrop + flip, or Resize + CenterCrop\n"
    "  --size N              output side (224)\n"
    "  --resize N            eval: shorter side before the crop (round(size * 256 / 224))\n"
    "  --scale A,B           train: area fraction range (0.08,1)\n"
    "  --ratio A,B           train: aspect ratio range (0.75,1.3333333333333333)\n"
    "  --flip P              horizontal flip probability (0.5 train, 0 eval)\n"
    "  --mean A,B,C --std A,B,C   Normalize (default: none, values in [0, 1])\n"
    "  --gray                one channel\n"
    "  --seed S --epoch E    what the random draws derive from (0, 0)\n"
    "  --no-dct              decode JPEGs at full size (no DCT scaling)\n"
    "  --u8                  uint8 HWC, not normalized\n"
    "  --first I --count N   which samples (0, all)\n"
    "  --cache-dir DIR       cache an image folder's listing there\n";

static const char crops_help[] =
    "usage: " PROG " crops --image WxH --count N [--first I] [--train|--eval] [--size N]\n"
    "                 [--resize N] [--scale A,B] [--ratio A,B] [--flip P] [--seed S]\n"
    "                 [--epoch E]\n"
    "Print TOP LEFT H W FLIP (space-separated) of the crop of samples FIRST .. FIRST+N-1 of a\n"
    "W x H image, as transform draws them (defaults as for transform, --train).\n";

enum {
	O_TRAIN = 256,
	O_EVAL,
	O_SIZE,
	O_RESIZE,
	O_SCALE,
	O_RATIO,
	O_FLIP,
	O_MEAN,
	O_STD,
	O_GRAY,
	O_SEED,
	O_EPOCH,
	O_NODCT,
	O_U8,
	O_FIRST,
	O_COUNT,
	O_IMAGE,
	O_CACHE,
};

static const struct option tf_opts[] = {{"train", no_argument, NULL, O_TRAIN},
					{"eval", no_argument, NULL, O_EVAL},
					{"size", required_argument, NULL, O_SIZE},
					{"resize", required_argument, NULL, O_RESIZE},
					{"scale", required_argument, NULL, O_SCALE},
					{"ratio", required_argument, NULL, O_RATIO},
					{"flip", required_argument, NULL, O_FLIP},
					{"mean", required_argument, NULL, O_MEAN},
					{"std", required_argument, NULL, O_STD},
					{"gray", no_argument, NULL, O_GRAY},
					{"seed", required_argument, NULL, O_SEED},
					{"epoch", required_argument, NULL, O_EPOCH},
					{"no-dct", no_argument, NULL, O_NODCT},
					{"u8", no_argument, NULL, O_U8},
					{"first", required_argument, NULL, O_FIRST},
					{"count", required_argument, NULL, O_COUNT},
					{"image", required_argument, NULL, O_IMAGE},
					{"cache-dir", required_argument, NULL, O_CACHE},
					{"output", required_argument, NULL, 'o'},
					{"help", no_argument, NULL, 'h'},
					{0}};

struct tfo {
	struct imtf_spec spec;
	bool train, eval, resize_set, flip_set;
	double mean[3], std[3];
	int nmean, nstd;
	long long epoch, first, count, size, resize;
	bool u8, gray;
	const char *out, *image, *cache;
};

/* One option of transform/crops into o; 0, or the usage error's exit status. */
static int tf_option(const char *cmd, int c, struct tfo *o, char **argv)
{
	double d[3];
	int n;

	switch (c) {
	case O_TRAIN:
		o->train = true;
		return 0;
	case O_EVAL:
		o->eval = true;
		return 0;
	case O_GRAY:
		o->gray = true;
		return 0;
	case O_NODCT:
		o->spec.dct_scaling = false;
		return 0;
	case O_U8:
		o->u8 = true;
		return 0;
	case O_CACHE:
		o->cache = optarg;
		return 0;
	case O_IMAGE:
		o->image = optarg;
		return 0;
	case 'o':
		o->out = optarg;
		return 0;
	case O_SIZE:
		return parse_ll(optarg, 1, 8192, &o->size)
			   ? 0
			   : usage_err(cmd, "--size '%s': 1 to 8192", optarg);
	case O_RESIZE:
		o->resize_set = true;
		return parse_ll(optarg, 1, 16384, &o->resize)
			   ? 0
			   : usage_err(cmd, "--resize '%s': 1 to 16384", optarg);
	case O_SEED:
		return parse_u64(optarg, &o->spec.seed)
			   ? 0
			   : usage_err(cmd, "--seed '%s': a number", optarg);
	case O_EPOCH:
		return parse_ll(optarg, 0, INT64_MAX, &o->epoch)
			   ? 0
			   : usage_err(cmd, "--epoch '%s': a number", optarg);
	case O_FIRST:
		return parse_ll(optarg, 0, INT64_MAX, &o->first)
			   ? 0
			   : usage_err(cmd, "--first '%s': a number", optarg);
	case O_COUNT:
		return parse_ll(optarg, 0, INT64_MAX, &o->count)
			   ? 0
			   : usage_err(cmd, "--count '%s': a number", optarg);
	case O_FLIP:
		o->flip_set = true;
		return parse_doubles(optarg, &o->spec.flip_p, 1, &n)
			   ? 0
			   : usage_err(cmd, "--flip '%s': a probability", optarg);
	case O_SCALE:
	case O_RATIO:
		if (!parse_doubles(optarg, d, 2, &n) || n != 2)
			return usage_err(cmd, "%s '%s': two numbers A,B", argv[optind - 1], optarg);
		memcpy(c == O_SCALE ? o->spec.scale : o->spec.ratio, d, 2 * sizeof(double));
		return 0;
	case O_MEAN:
	case O_STD:
		if (!parse_doubles(optarg, c == O_MEAN ? o->mean : o->std, 3,
				   c == O_MEAN ? &o->nmean : &o->nstd) ||
		    (c == O_MEAN ? o->nmean : o->nstd) == 2)
			return usage_err(cmd, "%s '%s': one number, or one per channel (A,B,C)",
					 argv[optind - 1], optarg);
		return 0;
	}
	return bad_option(cmd, c, argv);
}

/* The transform's spec from the options; 0, or the usage error's exit status. */
static int tf_spec(const char *cmd, struct tfo *o, bool need_mode)
{
	struct imtf_spec *s = &o->spec;

	if (o->train && o->eval)
		return usage_err(cmd, "--train or --eval, not both");
	if (need_mode && !o->train && !o->eval)
		return usage_err(cmd, "say --train or --eval");
	s->mode = o->eval ? IMTF_EVAL : IMTF_TRAIN;
	s->channels = o->gray ? 1 : 3;
	s->size = (int)o->size;
	s->resize = o->resize_set ? (int)o->resize : (int)lround((double)o->size * 256.0 / 224.0);
	if (!o->flip_set)
		s->flip_p = s->mode == IMTF_TRAIN ? 0.5 : 0.0;
	if ((o->nmean > 0) != (o->nstd > 0))
		return usage_err(cmd, "--mean and --std go together");
	for (int c = 0; c < s->channels && o->nmean; c++) {
		s->mean[c] = (float)o->mean[o->nmean == 1 ? 0 : c];
		s->std[c] = (float)o->std[o->nstd == 1 ? 0 : c];
	}
	return 0;
}

static void tfo_defaults(struct tfo *o)
{
	memset(o, 0, sizeof(*o));
	o->size = 224;
	o->count = -1;
	o->spec.scale[0] = 0.08;
	o->spec.scale[1] = 1.0;
	o->spec.ratio[0] = 0.75;
	o->spec.ratio[1] = 1.3333333333333333;
	o->spec.dct_scaling = true;
}

/* Write sample i's output; print its line. */
static int transform_one(const struct data_set *ds, const struct imtf *t, const struct tfo *o,
			 size_t i, struct data_bytes *b, struct imtf_scratch *s, void *out,
			 size_t out_bytes, struct af_file *f)
{
	struct dp_error err;
	struct imtf_crop c;
	char desc[PATH_MAX + 64];
	const char *kind;
	bool warning = false;
	int label, W, H, rc;

	if (data_read(ds, i, b, &label, &err) != 0)
		return fail("%s", err.text);
	data_describe(ds, i, desc, sizeof(desc));
	if (img_probe(b->p, b->len, &W, &H, &kind, &err) != 0)
		return fail("%s: %s", desc, err.text);
	imtf_draw(t, o->epoch, i, W, H, &c);
	rc = o->u8 ? imtf_apply_u8(t, o->epoch, i, b->p, b->len, s, out, &warning, &err)
		   : imtf_apply(t, o->epoch, i, b->p, b->len, s, out, &warning, &err);
	if (rc != 0)
		return fail("%s: %s", desc, err.text);
	if (warning)
		fprintf(stderr, PROG ": warning: %s: %s (decoded what was there)\n", desc,
			err.text);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	if (!o->u8)
		for (size_t k = 0; k < out_bytes / 4; k++)
			((uint32_t *)out)[k] = __builtin_bswap32(((uint32_t *)out)[k]);
#endif
	if (af_write_chunk(f, out, out_bytes, &err) != 0)
		return fail("%s", err.text);
	printf("%zu\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", i, label, c.top, c.left, c.h, c.w,
	       (int)c.flip, W, H);
	return 0;
}

static int transform_run(struct tfo *o, const char *src)
{
	struct data_set ds;
	struct dp_error err;
	struct imtf t;
	struct imtf_scratch s = {0};
	struct data_bytes b = {0};
	struct af_file f = {.fd = -1};
	size_t out_bytes;
	void *out = NULL;
	int rv = 1;

	if (imtf_init(&t, &o->spec, &err) != 0)
		return fail("%s", err.text);
	if (load_source(&ds, src, o->cache, &err) != 0)
		return fail("%s", err.text);
	if (o->count < 0)
		o->count = o->first < (long long)ds.count ? (long long)ds.count - o->first : 0;
	if (o->first + o->count > (long long)ds.count || o->count == 0) {
		fail("%s: samples %lld..%lld: it has %zu (0..%zu)", ds.name, o->first,
		     o->first + o->count - 1, ds.count, ds.count - 1);
		goto out;
	}
	out_bytes = imtf_out_elems(&t) * (o->u8 ? 1 : sizeof(float));
	if (!(out = malloc(out_bytes))) {
		fail("out of memory");
		goto out;
	}
	if (af_open(&f, o->out, 0644, &err) != 0) {
		fail("%s", err.text);
		goto out;
	}
	for (long long i = o->first; i < o->first + o->count; i++)
		if (transform_one(&ds, &t, o, (size_t)i, &b, &s, out, out_bytes, &f) != 0)
			goto out;
	if (af_commit(&f, &err) != 0) {
		fail("%s", err.text);
		goto out;
	}
	rv = write_stdout_done();
out:
	af_abort(&f);
	free(out);
	free(b.p);
	imtf_scratch_free(&s);
	data_free(&ds);
	return rv;
}

static int cmd_transform(int argc, char **argv)
{
	struct tfo o;
	int c, rc;

	tfo_defaults(&o);
	while ((c = getopt_long(argc, argv, ":ho:", tf_opts, NULL)) != -1) {
		if (c == 'h')
			return fputs(transform_help, stdout), 0;
		if (c == O_IMAGE)
			return usage_err("transform", "--image is for crops");
		if ((rc = tf_option("transform", c, &o, argv)) != 0)
			return rc;
	}
	if (argc - optind != 1)
		return usage_err("transform", "expected one SOURCE, got %d arguments",
				 argc - optind);
	if (!o.out)
		return usage_err("transform", "say where the samples go: -o OUT");
	if ((rc = tf_spec("transform", &o, true)) != 0)
		return rc;
	return transform_run(&o, argv[optind]);
}

static int cmd_crops(int argc, char **argv)
{
	struct dp_error err;
	struct imtf t;
	struct tfo o;
	int c, rc, W, H;
	char tail;

	tfo_defaults(&o);
	while ((c = getopt_long(argc, argv, ":h", tf_opts, NULL)) != -1) {
		if (c == 'h')
			return fputs(crops_help, stdout), 0;
		if (c == 'o' || c == O_U8 || c == O_NODCT || c == O_CACHE || c == O_MEAN ||
		    c == O_STD || c == O_GRAY)
			return usage_err("crops", "'%s' is for transform", argv[optind - 1]);
		if ((rc = tf_option("crops", c, &o, argv)) != 0)
			return rc;
	}
	if (argc != optind)
		return usage_err("crops", "takes no arguments ('%s')", argv[optind]);
	if (!o.image || sscanf(o.image, "%dx%d%c", &W, &H, &tail) != 2 || W < 1 || H < 1 ||
	    W > DATA_MAX_SIDE || H > DATA_MAX_SIDE)
		return usage_err("crops", "say the image's size: --image WxH (1 to %d a side)",
				 DATA_MAX_SIDE);
	if (o.count < 0)
		return usage_err("crops", "say how many samples: --count N");
	if ((rc = tf_spec("crops", &o, false)) != 0)
		return rc;
	if (imtf_init(&t, &o.spec, &err) != 0)
		return fail("%s", err.text);
	for (long long i = o.first; i < o.first + o.count; i++) {
		struct imtf_crop cr;
		imtf_draw(&t, o.epoch, (size_t)i, W, H, &cr);
		printf("%d %d %d %d %d\n", cr.top, cr.left, cr.h, cr.w, (int)cr.flip);
	}
	return write_stdout_done();
}

/* ------------------------------------------------------------------------------------ */

static const char main_help[] =
    "usage: " PROG " COMMAND [OPTIONS] ...\n"
    "Image folders and packed shards for dptrain (see dptrain-data(1)):\n"
    "  index ROOT -o FILE          list an image folder into an index file\n"
    "  list SOURCE                 print every sample: index, label, class, path\n"
    "  pack ROOT OUT               pack an image folder into tar shards (resumable)\n"
    "  verify SOURCE               check every sample of shards or a folder\n"
    "  transform ... -o OUT SOURCE the transformed samples, for comparisons\n"
    "  crops --image WxH --count N the crops the train transform draws\n"
    "'" PROG " COMMAND --help' says more.\n";

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(int argc, char **argv);
	} cmds[] = {{"index", cmd_index},   {"list", cmd_list},		  {"pack", cmd_pack},
		    {"verify", cmd_verify}, {"transform", cmd_transform}, {"crops", cmd_crops}};

	if (argc < 2) {
		fputs(main_help, stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
		return fputs(main_help, stdout), 0;
	if (!strcmp(argv[1], "--version"))
		return puts(PROG " " DPTRAIN_VERSION), 0;
	opterr = 0;
	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++)
		if (!strcmp(argv[1], cmds[k].name))
			return cmds[k].run(argc - 1, argv + 1);
	fprintf(stderr, PROG ": unknown command '%s'; see " PROG " --help\n", argv[1]);
	return EXIT_USAGE;
}
