/* data_index.c — the index files of image folders and shard directories (data_index.h): the
 * text format parsed line by line with errors "FILE:LINE: ...", formatted and written
 * atomically, and the scan of an image folder in torchvision's ImageFolder order. Owns no tar,
 * no decoding and no data_set. */
#define _GNU_SOURCE
#include "trainer/data/data_index.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/readfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_U62	  (UINT64_MAX >> 2) /* sizes and offsets: no sum of two overflows */
#define TAR_BLOCK 512

/* ------------------------------------------------------------------------------------ */
/* Building */

void di_free(struct di_index *x)
{
	if (x->classes)
		for (int k = 0; k < x->num_classes; k++)
			free(x->classes[k]);
	free(x->classes);
	free(x->root);
	free(x->s);
	free(x->names);
	memset(x, 0, sizeof(*x));
}

static bool unfit_name(const char *s)
{
	return strpbrk(s, "\t\n") != NULL;
}

int di_set_root(struct di_index *x, const char *root, struct dp_error *err)
{
	char *r;

	if (unfit_name(root))
		return errprintf(err,
				 "%s: a path with a tab or newline cannot go in an index; "
				 "rename the folder",
				 root);
	if (!(r = strdup(root)))
		return errprintf(err, "%s: out of memory", root);
	free(x->root);
	x->root = r;
	return 0;
}

int di_add_class(struct di_index *x, const char *name, struct dp_error *err)
{
	int n = x->num_classes;

	if (unfit_name(name))
		return errprintf(err,
				 "%s/%s: a class name with a tab or newline cannot go in an "
				 "index; rename the folder",
				 x->root ? x->root : "", name);
	if (n == INT_MAX)
		return errprintf(err, "%s: too many classes", x->root ? x->root : "");
	if ((n & (n - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to the next power of two */
		char **c = realloc(x->classes, sizeof(*c) * (n ? 2 * (size_t)n : 1));
		if (!c)
			return errprintf(err, "out of memory for %d class names", n + 1);
		x->classes = c;
	}
	if (!(x->classes[n] = strdup(name)))
		return errprintf(err, "out of memory for %d class names", n + 1);
	x->num_classes = n + 1;
	return 0;
}

int di_add_sample(struct di_index *x, const struct di_sample *s, const char *name,
		  struct dp_error *err)
{
	size_t len = strlen(name) + 1;

	if (unfit_name(name))
		return errprintf(err,
				 "%s/%s: a file name with a tab or newline cannot go in an "
				 "index; rename it",
				 x->root ? x->root : "", name);
	if (x->count == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 1024;
		struct di_sample *ns = realloc(x->s, cap * sizeof(*ns));
		if (!ns)
			return errprintf(err, "out of memory for %zu samples", cap);
		x->s = ns;
		x->cap = cap;
	}
	if (x->names_len + len > UINT32_MAX)
		return errprintf(err, "%s: the sample paths take more than 4 GiB",
				 x->root ? x->root : "");
	if (x->names_len + len > x->names_cap) {
		size_t cap = x->names_cap ? 2 * x->names_cap : 65536;
		char *nn;
		while (cap < x->names_len + len)
			cap *= 2;
		if (!(nn = realloc(x->names, cap)))
			return errprintf(err, "out of memory for the sample paths");
		x->names = nn;
		x->names_cap = cap;
	}
	memcpy(x->names + x->names_len, name, len);
	x->s[x->count] = *s;
	x->s[x->count].name = (uint32_t)x->names_len;
	x->names_len += len;
	x->count++;
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Formatting and writing */

struct sb {
	char *p;
	size_t len, cap;
	bool oom;
};

static bool sb_reserve(struct sb *b, size_t n)
{
	if (b->oom)
		return false;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *np;
		while (cap < b->len + n)
			cap *= 2;
		if (!(np = realloc(b->p, cap))) {
			b->oom = true;
			return false;
		}
		b->p = np;
		b->cap = cap;
	}
	return true;
}

static void sb_printf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sb *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !sb_reserve(b, (size_t)n + 1)) {
		b->oom = true;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* zlib's crc32 counts in uInt: in pieces. */
static uint32_t crc32_of(const char *p, size_t n)
{
	uLong c = crc32(0, Z_NULL, 0);

	while (n) {
		uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
		c = crc32(c, (const Bytef *)p, k);
		p += k;
		n -= k;
	}
	return (uint32_t)c;
}

static void format_sample(struct sb *b, const struct di_index *x, size_t i)
{
	const struct di_sample *s = &x->s[i];

	if (x->kind == DI_FOLDER)
		sb_printf(b, "%u\t%llu\t%s\n", s->label, (unsigned long long)s->size,
			  di_name(x, i));
	else
		sb_printf(b, "%u\t%u\t%llu\t%llu\t%08x\t%s\n", s->label, s->shard,
			  (unsigned long long)s->offset, (unsigned long long)s->size, s->crc,
			  di_name(x, i));
}

int di_format(const struct di_index *x, char **text, size_t *len, struct dp_error *err)
{
	struct sb b = {0};

	sb_printf(&b, "%s\nkind %s\nroot %s\n", DI_MAGIC,
		  x->kind == DI_FOLDER ? "imagefolder" : "shards", x->root ? x->root : "");
	if (x->kind == DI_SHARDS)
		sb_printf(&b, "shards %u\n", x->shards);
	sb_printf(&b, "classes %d\n", x->num_classes);
	for (int k = 0; k < x->num_classes; k++)
		sb_printf(&b, "class %s\n", x->classes[k]);
	sb_printf(&b, "samples %zu\n", x->count);
	for (size_t i = 0; i < x->count && !b.oom; i++)
		format_sample(&b, x, i);
	if (!b.oom)
		sb_printf(&b, "end %08x\n", crc32_of(b.p, b.len));
	if (b.oom) {
		free(b.p);
		return errprintf(err, "out of memory formatting an index of %zu samples", x->count);
	}
	*text = b.p;
	*len = b.len;
	return 0;
}

int di_write(const struct di_index *x, const char *path, const struct timespec *mtime,
	     struct dp_error *err)
{
	struct af_file f;
	char *text;
	size_t len;
	int rv = -1;

	if (di_format(x, &text, &len, err) != 0)
		return errprefix(err, "%s", path);
	if (af_open(&f, path, 0644, err) != 0 || af_write_chunk(&f, text, len, err) != 0)
		goto out;
	if (mtime) {
		struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, *mtime};
		if (futimens(f.fd, ts) != 0) {
			errprintf(err, "%s: cannot set the time of %s: %s", path, f.tmp,
				  strerror(errno));
			af_abort(&f);
			goto out;
		}
	}
	rv = af_commit(&f, err);
out:
	free(text);
	return rv;
}

/* ------------------------------------------------------------------------------------ */
/* Parsing */

struct cur {
	const char *path;
	const char *p, *end; /* what is left, up to the end line */
	size_t line;	     /* of the line last returned */
	const char *s;	     /* that line, without its newline */
	size_t n;
	struct dp_error *err;
};

static bool next_line(struct cur *c)
{
	const char *nl;

	if (c->p >= c->end)
		return false;
	nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
	c->s = c->p;
	c->n = (size_t)(nl - c->p);
	c->p = nl + 1;
	c->line++;
	return true;
}

/* A line as a message quotes it: at most 60 bytes, control bytes as '?'. */
static const char *show(const char *s, size_t n, char buf[72])
{
	size_t k = n > 60 ? 60 : n;

	for (size_t i = 0; i < k; i++)
		buf[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
	strcpy(buf + k, n > 60 ? "..." : "");
	return buf;
}

static int fail(struct cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct cur *c, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return errprintf(c->err, "%s:%zu: %s", c->path, c->line, msg);
}

static bool parse_u64(const char *s, size_t n, uint64_t max, uint64_t *v)
{
	uint64_t x = 0;

	if (n == 0 || n > 20)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		if (x > (max - (uint64_t)(s[i] - '0')) / 10)
			return false;
		x = x * 10 + (uint64_t)(s[i] - '0');
	}
	*v = x;
	return true;
}

static bool parse_hex32(const char *s, size_t n, uint32_t *v)
{
	uint32_t x = 0;

	if (n != 8)
		return false;
	for (size_t i = 0; i < n; i++) {
		int d = s[i] >= '0' && s[i] <= '9'   ? s[i] - '0'
			: s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10
			: s[i] >= 'A' && s[i] <= 'F' ? s[i] - 'A' + 10
						     : -1;
		if (d < 0)
			return false;
		x = x << 4 | (uint32_t)d;
	}
	*v = x;
	return true;
}

/* The next line must be "KEYWORD VALUE"; (*v, *vn) is the value (non-empty). */
static int keyword(struct cur *c, const char *kw, const char *what, const char **v, size_t *vn)
{
	size_t k = strlen(kw);
	char q[72];

	if (!next_line(c)) {
		c->line++;
		return fail(c,
			    "the 'end' line comes where '%s %s' should be: the header is "
			    "incomplete",
			    kw, what);
	}
	if (c->n <= k + 1 || memcmp(c->s, kw, k) != 0 || c->s[k] != ' ')
		return fail(c, "expected '%s %s', found '%s'", kw, what, show(c->s, c->n, q));
	*v = c->s + k + 1;
	*vn = c->n - k - 1;
	return 0;
}

static int keyword_num(struct cur *c, const char *kw, uint64_t max, uint64_t *v)
{
	const char *s;
	size_t n;
	char q[72];

	if (keyword(c, kw, "N", &s, &n) != 0)
		return -1;
	if (!parse_u64(s, n, max, v))
		return fail(c, "'%s %s': not a number from 0 to %llu", kw, show(s, n, q),
			    (unsigned long long)max);
	return 0;
}

static int parse_kind_root(struct cur *c, struct di_index *x)
{
	const char *s;
	size_t n;
	char q[72];

	if (keyword(c, "kind", "imagefolder|shards", &s, &n) != 0)
		return -1;
	if (n == 11 && memcmp(s, "imagefolder", 11) == 0)
		x->kind = DI_FOLDER;
	else if (n == 6 && memcmp(s, "shards", 6) == 0)
		x->kind = DI_SHARDS;
	else
		return fail(c, "unknown kind '%s' (imagefolder or shards)", show(s, n, q));
	if (keyword(c, "root", "/PATH", &s, &n) != 0)
		return -1;
	if (s[0] != '/' || memchr(s, '\0', n))
		return fail(c, "the root '%s' is not an absolute path", show(s, n, q));
	if (!(x->root = strndup(s, n)))
		return fail(c, "out of memory");
	return 0;
}

static bool bad_component(const char *s, size_t n)
{
	return n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.');
}

static int parse_classes(struct cur *c, struct di_index *x, size_t end_line)
{
	uint64_t n;
	size_t cline;
	char q[72];

	if (keyword_num(c, "classes", INT_MAX, &n) != 0)
		return -1;
	cline = c->line;
	if (n == 0)
		return fail(c, "no classes");
	if (n > end_line - cline - 1) /* before the memory: the lines must be there */
		return fail(c, "%llu classes, but only %zu lines follow before the end line",
			    (unsigned long long)n, end_line - cline - 1);
	if (!(x->classes = calloc((size_t)n, sizeof(*x->classes))))
		return fail(c, "out of memory for %llu classes", (unsigned long long)n);
	for (uint64_t k = 0; k < n; k++) {
		const char *s;
		size_t len;

		if (keyword(c, "class", "NAME", &s, &len) != 0)
			return errprintf(c->err, "%s (line %zu says %llu classes)", c->err->text,
					 cline, (unsigned long long)n);
		if (bad_component(s, len) || memchr(s, '/', len) || memchr(s, '\0', len))
			return fail(c, "bad class name '%s': a folder name, not a path",
				    show(s, len, q));
		if (!(x->classes[k] = strndup(s, len)))
			return fail(c, "out of memory");
		x->num_classes = (int)k + 1;
		if (k > 0 && strcmp(x->classes[k - 1], x->classes[k]) >= 0)
			return fail(c,
				    "class '%s' after '%s': classes are sorted by name (byte "
				    "order) and unique",
				    x->classes[k],
				    show(x->classes[k - 1], strlen(x->classes[k - 1]), q));
	}
	return 0;
}

/* The path of a sample: relative, no empty, '.' or '..' parts, under its class's folder. */
static int check_path(struct cur *c, const struct di_index *x, uint32_t label, const char *s,
		      size_t n)
{
	const char *cls = x->classes[label];
	size_t cl = strlen(cls);
	char q[72];

	if (n == 0 || s[0] == '/' || memchr(s, '\0', n))
		return fail(c, "bad path '%s': a path relative to the root", show(s, n, q));
	for (size_t a = 0, b; a <= n; a = b + 1) {
		const char *sl = memchr(s + a, '/', n - a);
		b = sl ? (size_t)(sl - s) : n;
		if (bad_component(s + a, b - a))
			return fail(c, "bad path '%s': it has an empty, '.' or '..' part",
				    show(s, n, q));
	}
	if (n <= cl + 1 || memcmp(s, cls, cl) != 0 || s[cl] != '/')
		return fail(c, "path '%s' is not in the folder of its class %u, '%s'",
			    show(s, n, q), label, cls);
	return 0;
}

/* Split a sample line into exactly nf tab-separated fields (the last one the path). */
static int split(struct cur *c, const char *f[6], size_t fn[6], int nf, const char *names)
{
	int k = 0;
	const char *s = c->s, *end = c->s + c->n;
	char q[72];

	while (k < nf - 1) {
		const char *t = memchr(s, '\t', (size_t)(end - s));
		if (!t)
			break;
		f[k] = s;
		fn[k++] = (size_t)(t - s);
		s = t + 1;
	}
	f[k] = s;
	fn[k++] = (size_t)(end - s);
	if (k != nf || memchr(f[nf - 1], '\t', fn[nf - 1]))
		return fail(c, "expected %d tab-separated fields (%s), found '%s'", nf, names,
			    show(c->s, c->n, q));
	return 0;
}

struct prev {
	bool any;
	uint32_t shard;
	uint64_t end; /* where the previous member's data ends */
};

static int parse_shard_fields(struct cur *c, const struct di_index *x, const char *f[6],
			      const size_t fn[6], struct di_sample *s, struct prev *pv)
{
	uint64_t v;
	char q[72];

	if (!parse_u64(f[1], fn[1], UINT32_MAX, &v))
		return fail(c, "shard '%s' is not a number", show(f[1], fn[1], q));
	if (v >= x->shards)
		return fail(c, "shard %llu out of range (the index has %u shards)",
			    (unsigned long long)v, x->shards);
	s->shard = (uint32_t)v;
	if (!parse_u64(f[2], fn[2], MAX_U62, &s->offset))
		return fail(c, "offset '%s' is not a number", show(f[2], fn[2], q));
	if (!parse_u64(f[3], fn[3], MAX_U62, &s->size))
		return fail(c, "size '%s' is not a number", show(f[3], fn[3], q));
	if (!parse_hex32(f[4], fn[4], &s->crc))
		return fail(c, "CRC-32 '%s' is not 8 hex digits", show(f[4], fn[4], q));
	if (s->offset % TAR_BLOCK || s->offset < TAR_BLOCK)
		return fail(c,
			    "offset %llu is not where a tar member's data can start (a "
			    "multiple of 512, after a header)",
			    (unsigned long long)s->offset);
	if (pv->any &&
	    (s->shard < pv->shard || (s->shard == pv->shard && s->offset < pv->end + TAR_BLOCK)))
		return fail(c,
			    "shard %u offset %llu overlaps the sample before it: samples are "
			    "in shard order, each after the one before",
			    s->shard, (unsigned long long)s->offset);
	pv->any = true;
	pv->shard = s->shard;
	pv->end = (s->offset + s->size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
	return 0;
}

static int parse_sample(struct cur *c, struct di_index *x, struct prev *pv)
{
	const char *f[6];
	size_t fn[6];
	int nf = x->kind == DI_FOLDER ? 3 : 6;
	struct di_sample s = {0};
	uint64_t v;
	char q[72], path[PATH_MAX];

	if (split(c, f, fn, nf,
		  nf == 3 ? "LABEL, SIZE, PATH" : "LABEL, SHARD, OFFSET, SIZE, CRC32, PATH") != 0)
		return -1;
	if (!parse_u64(f[0], fn[0], UINT32_MAX, &v))
		return fail(c, "label '%s' is not a number", show(f[0], fn[0], q));
	if (v >= (uint64_t)x->num_classes)
		return fail(c, "label %llu out of range (the index has %d classes)",
			    (unsigned long long)v, x->num_classes);
	s.label = (uint32_t)v;
	if (nf == 3 && !parse_u64(f[1], fn[1], MAX_U62, &s.size))
		return fail(c, "size '%s' is not a number", show(f[1], fn[1], q));
	if (nf == 6 && parse_shard_fields(c, x, f, fn, &s, pv) != 0)
		return -1;
	if (check_path(c, x, s.label, f[nf - 1], fn[nf - 1]) != 0)
		return -1;
	if (fn[nf - 1] >= sizeof(path))
		return fail(c, "path of %zu bytes: longer than PATH_MAX", fn[nf - 1]);
	memcpy(path, f[nf - 1], fn[nf - 1]);
	path[fn[nf - 1]] = '\0';
	if (di_add_sample(x, &s, path, c->err) != 0)
		return fail(c, "%s", c->err->text);
	return 0;
}

static size_t count_lines(const char *p, size_t n)
{
	size_t k = 0;
	const char *e = p + n;

	while (p < e && (p = memchr(p, '\n', (size_t)(e - p)))) {
		k++;
		p++;
	}
	return k;
}

/* The first and last lines: the magic, and "end CRC" over everything before it. Sets
 * c->end to the end line's start, *end_line to its number. */
static int check_frame(struct cur *c, const char *buf, size_t len, size_t *end_line)
{
	const char *nl = memchr(buf, '\n', len), *last;
	size_t n1 = nl ? (size_t)(nl - buf) : len, lines;
	uint32_t want, got;
	char q[72];

	c->line = 1;
	if (len == 0)
		return errprintf(c->err, "%s: empty file, not a dptrain index", c->path);
	if (n1 != strlen(DI_MAGIC) || memcmp(buf, DI_MAGIC, n1) != 0) {
		if (n1 > 14 && memcmp(buf, "dptrain-index ", 14) == 0)
			return fail(c, "index format '%s'; this dptrain-data reads version 1",
				    show(buf, n1, q));
		return fail(c, "not a dptrain index: the first line is '%s', not '%s'",
			    show(buf, n1, q), DI_MAGIC);
	}
	lines = count_lines(buf, len);
	if (buf[len - 1] != '\n')
		return errprintf(c->err,
				 "%s: truncated: line %zu is cut short and no 'end' line "
				 "follows (the write was interrupted)",
				 c->path, lines + 1);
	for (last = buf + len - 1; last > buf && last[-1] != '\n'; last--)
		;
	if ((size_t)(buf + len - last) < 5 || memcmp(last, "end ", 4) != 0)
		return errprintf(c->err,
				 "%s: truncated: it ends after line %zu without its 'end' line "
				 "(the write was interrupted)",
				 c->path, lines);
	c->line = lines;
	if (!parse_hex32(last + 4, (size_t)(buf + len - 1 - (last + 4)), &want))
		return fail(c, "bad end line '%s': 'end' and 8 hex digits",
			    show(last, (size_t)(buf + len - 1 - last), q));
	got = crc32_of(buf, (size_t)(last - buf));
	if (got != want)
		return fail(c,
			    "CRC-32 mismatch: the end line says %08x, the lines before it "
			    "make %08x; the index is corrupt",
			    want, got);
	c->p = nl + 1;
	c->end = last;
	c->line = 1;
	*end_line = lines;
	return 0;
}

static int parse(struct cur *c, struct di_index *x, const char *buf, size_t len)
{
	size_t end_line = 0, sline;
	uint64_t v, m;
	struct prev pv = {0};

	if (check_frame(c, buf, len, &end_line) != 0 || parse_kind_root(c, x) != 0)
		return -1;
	if (x->kind == DI_SHARDS) {
		if (keyword_num(c, "shards", UINT32_MAX, &v) != 0)
			return -1;
		if (v == 0)
			return fail(c, "no shards");
		x->shards = (uint32_t)v;
	}
	if (parse_classes(c, x, end_line) != 0 || keyword_num(c, "samples", SIZE_MAX, &m) != 0)
		return -1;
	sline = c->line;
	if (m == 0)
		return fail(c, "no samples");
	if (m != end_line - sline - 1) {
		if (m < end_line - sline - 1) {
			c->line = sline + m + 1;
			return fail(c, "one sample more than line %zu says ('samples %llu')", sline,
				    (unsigned long long)m);
		}
		c->line = end_line;
		return fail(c,
			    "the 'end' line after %zu samples, but line %zu says 'samples "
			    "%llu': lines are missing",
			    end_line - sline - 1, sline, (unsigned long long)m);
	}
	free(x->s);
	if (!(x->s = malloc((size_t)m * sizeof(*x->s))))
		return fail(c, "out of memory for %llu samples", (unsigned long long)m);
	x->cap = (size_t)m;
	while (next_line(c))
		if (parse_sample(c, x, &pv) != 0)
			return -1;
	return 0;
}

int di_parse(struct di_index *x, const char *path, const char *buf, size_t len,
	     struct dp_error *err)
{
	struct cur c = {.path = path, .err = err};

	memset(x, 0, sizeof(*x));
	if (parse(&c, x, buf, len) != 0) {
		di_free(x);
		return -1;
	}
	return 0;
}

int di_read(struct di_index *x, const char *path, struct dp_error *err)
{
	char *buf;
	size_t len;
	int rv;

	memset(x, 0, sizeof(*x));
	if (dp_read_file(path, SIZE_MAX, 0, &buf, &len, err) != 0) {
		if (errno == EISDIR || errno == EINVAL)
			errprintf(err, "%s: not a regular file, so not an index", path);
		else if (errno != ENOMEM)
			errprintf(err, "%s: %s", path, strerror(errno));
		return -1;
	}
	rv = di_parse(x, path, buf, len, err);
	free(buf);
	return rv;
}

/* ------------------------------------------------------------------------------------ */
/* Names */

int di_image_ext(const char *name)
{
	static const char *const keep[] = {".jpg", ".jpeg", ".png"};
	static const char *const skip[] = {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
	size_t n = strlen(name);

	for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++)
		if (n >= strlen(keep[k]) && !strcasecmp(name + n - strlen(keep[k]), keep[k]))
			return 1;
	for (size_t k = 0; k < sizeof(skip) / sizeof(skip[0]); k++)
		if (n >= strlen(skip[k]) && !strcasecmp(name + n - strlen(skip[k]), skip[k]))
			return -1;
	return 0;
}

uint64_t di_fnv1a64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

int di_cache_path(char *buf, size_t n, const char *cache_dir, const char *abs_root)
{
	int k = snprintf(buf, n, "%s/imagefolder-%016llx.index", cache_dir,
			 (unsigned long long)di_fnv1a64(abs_root));

	return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* Scanning an image folder. torchvision's make_dataset walks each class folder with
 * sorted(os.walk(dir, followlinks=True)) and sorted(fnames): folders ordered by their whole
 * path, the files of each by name. The walk here collects the same and sorts the same. */

struct wfile {
	char *name;
	uint64_t size;
};

struct wdir {
	char *path; /* relative to the root: "cls", "cls/sub" */
	struct wfile *f;
	size_t n, cap;
};

struct devino {
	dev_t dev;
	ino_t ino;
};

struct walk {
	struct di_index *x;
	int rootfd;
	struct wdir *d; /* the folders of the class being walked */
	size_t nd, capd;
	struct devino *chain; /* the folders above the one being walked (loops) */
	size_t depth, capc;
	size_t skipped, loops;
	char *skipped_ex, *loop_ex;
	struct dp_error *err;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_wfile(const void *a, const void *b)
{
	return strcmp(((const struct wfile *)a)->name, ((const struct wfile *)b)->name);
}

static int cmp_wdir(const void *a, const void *b)
{
	return strcmp(((const struct wdir *)a)->path, ((const struct wdir *)b)->path);
}

static void walk_clear(struct walk *w)
{
	for (size_t i = 0; i < w->nd; i++) {
		for (size_t k = 0; k < w->d[i].n; k++)
			free(w->d[i].f[k].name);
		free(w->d[i].f);
		free(w->d[i].path);
	}
	w->nd = 0;
}

static char *join(const char *a, const char *b)
{
	char *s;

	return asprintf(&s, "%s/%s", a, b) < 0 ? NULL : s;
}

static void remember(size_t *count, char **example, const char *root, const char *rel,
		     const char *name)
{
	if ((*count)++ == 0 && asprintf(example, "%s/%s/%s", root, rel, name) < 0)
		*example = NULL;
}

/* One entry of folder `rel`: a subfolder to walk (appended to subs), a file kept in dir, or
 * nothing. */
static int walk_entry(struct walk *w, int dfd, const char *rel, const char *name, struct wdir *dir,
		      char ***subs, size_t *nsubs)
{
	struct stat st;
	int ext = di_image_ext(name);

	if (fstatat(dfd, name, &st, 0) != 0) {
		int e = errno;
		/* os.walk counts what it cannot stat as a file (a dangling link) */
		if (ext <= 0)
			return 0;
		return errprintf(w->err, "%s/%s/%s: %s%s; remove it", w->x->root, rel, name,
				 strerror(e), e == ENOENT ? " (a symbolic link to nothing)" : "");
	}
	if (S_ISDIR(st.st_mode)) {
		char **ns = realloc(*subs, (*nsubs + 1) * sizeof(*ns));
		if (!ns || !(ns[*nsubs] = strdup(name))) {
			if (ns)
				*subs = ns;
			return errprintf(w->err, "out of memory listing %s/%s", w->x->root, rel);
		}
		*subs = ns;
		(*nsubs)++;
		return 0;
	}
	if (ext < 0)
		remember(&w->skipped, &w->skipped_ex, w->x->root, rel, name);
	if (ext <= 0)
		return 0;
	if (!S_ISREG(st.st_mode))
		return errprintf(w->err, "%s/%s/%s: not a regular file; remove it", w->x->root, rel,
				 name);
	if (dir->n == dir->cap) {
		size_t cap = dir->cap ? 2 * dir->cap : 64;
		struct wfile *nf = realloc(dir->f, cap * sizeof(*nf));
		if (!nf)
			return errprintf(w->err, "out of memory listing %s/%s", w->x->root, rel);
		dir->f = nf;
		dir->cap = cap;
	}
	if (!(dir->f[dir->n].name = strdup(name)))
		return errprintf(w->err, "out of memory listing %s/%s", w->x->root, rel);
	dir->f[dir->n++].size = (uint64_t)st.st_size;
	return 0;
}

static int walk_dir(struct walk *w, char *rel);

/* Walk the subfolders of `rel` found by walk_list, skipping those that are a folder above. */
static int walk_subs(struct walk *w, const char *rel, char **subs, size_t nsubs)
{
	int rv = 0;

	for (size_t i = 0; i < nsubs && rv == 0; i++) {
		char *sub = join(rel, subs[i]);
		struct stat st;

		if (!sub)
			return errprintf(w->err, "out of memory listing %s/%s", w->x->root, rel);
		if (fstatat(w->rootfd, sub, &st, 0) != 0) {
			rv = errprintf(w->err, "%s/%s: %s", w->x->root, sub, strerror(errno));
			free(sub);
			break;
		}
		bool loop = false;
		for (size_t k = 0; k < w->depth; k++)
			loop |= w->chain[k].dev == st.st_dev && w->chain[k].ino == st.st_ino;
		if (loop) {
			remember(&w->loops, &w->loop_ex, w->x->root, rel, subs[i]);
			free(sub);
			continue;
		}
		rv = walk_dir(w, sub); /* takes sub */
	}
	return rv;
}

/* List folder `rel` (taken: freed or kept in w->d), then its subfolders. */
static int walk_dir(struct walk *w, char *rel)
{
	struct wdir *dir;
	struct dirent *e;
	struct stat st;
	char **subs = NULL;
	size_t nsubs = 0;
	int fd, rv = -1;
	DIR *d;

	if (w->nd == w->capd) {
		size_t cap = w->capd ? 2 * w->capd : 16;
		struct wdir *nd = realloc(w->d, cap * sizeof(*nd));
		if (!nd) {
			free(rel);
			return errprintf(w->err, "out of memory listing %s", w->x->root);
		}
		w->d = nd;
		w->capd = cap;
	}
	dir = &w->d[w->nd++];
	memset(dir, 0, sizeof(*dir));
	dir->path = rel;
	if ((fd = openat(w->rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fstat(fd, &st) != 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return errprintf(w->err, "%s/%s: cannot list the folder: %s", w->x->root, rel,
				 strerror(errno));
	}
	errno = 0;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (walk_entry(w, dirfd(d), rel, e->d_name, dir, &subs, &nsubs) != 0)
			goto out;
		errno = 0;
	}
	if (errno) {
		errprintf(w->err, "%s/%s: cannot list the folder: %s", w->x->root, rel,
			  strerror(errno));
		goto out;
	}
	if (dir->n > 1)
		qsort(dir->f, dir->n, sizeof(*dir->f), cmp_wfile);
	/* dir is not used again: the walk below may move w->d */
	if (w->depth == w->capc) {
		size_t cap = w->capc ? 2 * w->capc : 16;
		struct devino *nc = realloc(w->chain, cap * sizeof(*nc));
		if (!nc) {
			errprintf(w->err, "out of memory listing %s", w->x->root);
			goto out;
		}
		w->chain = nc;
		w->capc = cap;
	}
	w->chain[w->depth++] = (struct devino){st.st_dev, st.st_ino};
	rv = walk_subs(w, rel, subs, nsubs);
	w->depth--;
out:
	closedir(d);
	for (size_t i = 0; i < nsubs; i++)
		free(subs[i]);
	free(subs);
	return rv;
}

/* Walk class `label` and append its images, in torchvision's order. */
static int walk_class(struct walk *w, uint32_t label)
{
	const char *cls = w->x->classes[label];
	size_t before = w->x->count;
	char *rel = strdup(cls);

	if (!rel)
		return errprintf(w->err, "out of memory listing %s", w->x->root);
	walk_clear(w);
	w->depth = 1; /* chain[0] is the root */
	if (walk_dir(w, rel) != 0)
		return -1;
	qsort(w->d, w->nd, sizeof(*w->d), cmp_wdir);
	for (size_t i = 0; i < w->nd; i++)
		for (size_t k = 0; k < w->d[i].n; k++) {
			struct di_sample s = {.label = label, .size = w->d[i].f[k].size};
			char *name = join(w->d[i].path, w->d[i].f[k].name);
			int r = name ? di_add_sample(w->x, &s, name, w->err)
				     : errprintf(w->err, "out of memory");
			free(name);
			if (r != 0)
				return -1;
		}
	if (w->x->count == before)
		return errprintf(w->err,
				 "%s/%s: no .jpg, .jpeg or .png file in this class folder (nor "
				 "below it); torchvision's ImageFolder refuses an empty class too: "
				 "add its images or remove the folder",
				 w->x->root, cls);
	return 0;
}

/* The classes: root's subfolders (links to folders too), sorted. */
static int list_classes(struct walk *w, struct dp_error *err)
{
	char **names = NULL;
	size_t n = 0;
	struct dirent *e;
	int fd = dup(w->rootfd), rv = -1;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return errprintf(err, "%s: cannot list the folder: %s", w->x->root,
				 strerror(errno));
	}
	while ((e = readdir(d))) {
		struct stat st;
		char **nn;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    fstatat(w->rootfd, e->d_name, &st, 0) != 0 || !S_ISDIR(st.st_mode))
			continue;
		if (!(nn = realloc(names, (n + 1) * sizeof(*nn))) || !(nn[n] = strdup(e->d_name))) {
			if (nn)
				names = nn;
			errprintf(err, "out of memory listing %s", w->x->root);
			goto out;
		}
		names = nn;
		n++;
	}
	if (n == 0) {
		errprintf(err,
			  "%s: no class folders: an image folder holds one folder per class, "
			  "each with that class's images (ROOT/CLASS/NAME.jpg)",
			  w->x->root);
		goto out;
	}
	qsort(names, n, sizeof(*names), cmp_str);
	rv = 0;
	for (size_t k = 0; k < n && rv == 0; k++)
		rv = di_add_class(w->x, names[k], err);
out:
	for (size_t k = 0; k < n; k++)
		free(names[k]);
	free(names);
	closedir(d);
	return rv;
}

static void scan_warning(struct walk *w, struct dp_error *warn)
{
	char a[DP_ERROR_MAX / 2] = "", b[DP_ERROR_MAX / 2] = "";

	if (w->skipped)
		snprintf(a, sizeof(a),
			 "skipped %zu file%s in formats dptrain does not decode (.bmp .pgm .ppm "
			 ".tif .tiff .webp), e.g. %s; convert them to JPEG or PNG to use them",
			 w->skipped, w->skipped == 1 ? "" : "s",
			 w->skipped_ex ? w->skipped_ex : "?");
	if (w->loops)
		snprintf(b, sizeof(b),
			 "%sskipped %zu symbolic link%s to a folder above it (a loop), e.g. %s",
			 w->skipped ? "; " : "", w->loops, w->loops == 1 ? "" : "s",
			 w->loop_ex ? w->loop_ex : "?");
	if (w->skipped || w->loops)
		errprintf(warn, "%s: %s%s", w->x->root, a, b);
}

int di_scan(struct di_index *x, const char *root, struct dp_error *warn, struct dp_error *err)
{
	struct walk w = {.x = x, .rootfd = -1, .err = err};
	struct stat st;
	char *abs;
	int rv = -1;

	memset(x, 0, sizeof(*x));
	x->kind = DI_FOLDER;
	if (warn)
		warn->text[0] = '\0';
	if (!(abs = realpath(root, NULL)))
		return errprintf(err, "%s: %s%s", root, strerror(errno),
				 errno == ENOENT ? " (the image folder)" : "");
	if (di_set_root(x, abs, err) != 0)
		goto out;
	if ((w.rootfd = open(abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fstat(w.rootfd, &st) != 0) {
		errprintf(err, "%s: %s%s", root, strerror(errno),
			  errno == ENOTDIR ? " (an image folder is a folder with one folder of "
					     "images per class)"
					   : "");
		goto out;
	}
	if (!(w.chain = malloc(16 * sizeof(*w.chain)))) {
		errprintf(err, "out of memory listing %s", root);
		goto out;
	}
	w.capc = 16;
	w.chain[0] = (struct devino){st.st_dev, st.st_ino};
	if (list_classes(&w, err) != 0)
		goto out;
	for (int k = 0; k < x->num_classes; k++)
		if (walk_class(&w, (uint32_t)k) != 0)
			goto out;
	if (warn)
		scan_warning(&w, warn);
	rv = 0;
out:
	walk_clear(&w);
	free(w.d);
	free(w.chain);
	free(w.skipped_ex);
	free(w.loop_ex);
	free(abs);
	if (w.rootfd >= 0)
		close(w.rootfd);
	if (rv != 0)
		di_free(x);
	return rv;
}
