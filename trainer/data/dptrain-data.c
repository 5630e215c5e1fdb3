/* dptrain-data.c — dptrain-data: image folders and packed shards from the command line (index,
 * list, pack, verify) and the image transforms' outputs and crops that tests compare with
 * torchvision (transform, crops). Owns only the command line and what it prints: the shards'
 * names, tar layout and the pack itself are shard_write.c's (shards.h), the index format
 * data_index.c's, loading data_folder.c's and data_shards.c's, pixels image.c's. Exit status:
 * 0 done, 1 error, 2 usage, 3 stopped by --stop-after-shards. */
#define _GNU_SOURCE
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/warn.h"
#include "trainer/data/data.h"
#include "trainer/data/data_index.h"
#include "trainer/data/image.h"
#include "trainer/data/shards.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG	     "dptrain-data"
#define EXIT_USAGE   2
#define EXIT_STOPPED 3

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
	char first[SHARD_NAME_MAX], path[PATH_MAX];
	const char *const names[] = {"index", "pack.state", first};

	shard_name(first, 0);
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
		dp_warn(PROG, NULL, "%s", warn.text);
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
/* pack */

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

/* What pack says while it works. */
static void pack_say(const char *line)
{
	fprintf(stderr, PROG ": %s\n", line);
}

static int cmd_pack(int argc, char **argv)
{
	static const struct option opts[] = {{"shard-size", required_argument, NULL, 'S'},
					     {"index", required_argument, NULL, 'I'},
					     {"stop-after-shards", required_argument, NULL, 'K'},
					     {"help", no_argument, NULL, 'h'},
					     {0}};
	struct shard_pack_opts o = {.shard_size = 1ull << 30, .stop_after = -1, .say = pack_say};
	struct shard_pack_result r;
	struct dp_error err;
	char wrote[256], kept[128] = "";
	int c, rv;

	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h')
			return fputs(pack_help, stdout), 0;
		if (c == 'S' && !parse_size(optarg, &o.shard_size))
			return usage_err("pack", "--shard-size '%s': a size such as 1G, 512M, 100K",
					 optarg);
		if (c == 'K' && !parse_ll(optarg, 0, UINT32_MAX, &o.stop_after))
			return usage_err("pack", "--stop-after-shards '%s': a number of shards",
					 optarg);
		if (c == 'I')
			o.index = optarg;
		if (c != 'S' && c != 'K' && c != 'I')
			return bad_option("pack", c, argv);
	}
	if (argc - optind != 2)
		return usage_err("pack", "expected ROOT and OUT, got %d arguments", argc - optind);
	o.root = argv[optind];
	o.out = argv[optind + 1];
	rv = shard_pack(&o, &r, &err);
	if (rv < 0)
		return fail("%s", err.text);
	if (rv == SHARD_PACK_STOPPED) {
		fprintf(stderr,
			PROG ": pack: stopped after %u shard%s (--stop-after-shards); run the same "
			     "command again to go on\n",
			r.wrote, r.wrote == 1 ? "" : "s");
		return EXIT_STOPPED;
	}
	if (r.wrote)
		snprintf(wrote, sizeof(wrote),
			 "this run wrote %u shard%s, %.1f MB in %.1f s (%.1f MB/s), each read "
			 "back with every member's CRC-32 checked",
			 r.wrote, r.wrote == 1 ? "" : "s", (double)r.put / 1e6, r.seconds,
			 r.seconds > 0 ? (double)r.put / 1e6 / r.seconds : 0.0);
	else
		snprintf(wrote, sizeof(wrote), "this run wrote no shard");
	if (r.kept)
		snprintf(kept, sizeof(kept),
			 "; the earlier run's shards (%u) were checked against the source and "
			 "kept",
			 r.kept);
	fprintf(stderr, PROG ": packed %s into %s: %zu samples in %u shard%s; %s%s\n", o.root,
		o.out, r.count, r.nshards, r.nshards == 1 ? "" : "s", wrote, kept);
	return 0;
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
	const char *bad = shard_check_member(x, i, fd, size, b, why, wn);

	if (bad)
		return bad;
	return check_image(v, i, b->p + SHARD_TAR_BLOCK, (size_t)x->s[i].size, why, wn);
}

/* Each shard's size must be what pack wrote: its last member, then the end blocks. */
static int check_shard_sizes(struct vcheck *v, const struct di_index *x, const char *dir,
			     const int *eno, const off_t *size)
{
	uint64_t *want = shard_sizes(x);

	if (!want)
		return -1;
	for (uint32_t k = 0; k < x->shards; k++) {
		if (eno[k] || !want[k] || (uint64_t)size[k] == want[k])
			continue;
		v->bad_shards++;
		printf("%s/" SHARD_NAME ": %lld bytes, %llu expected: %s; re-run dptrain-data "
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
		snprintf(path, sizeof(path), "%s/" SHARD_NAME, dir, k);
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
			printf("%s/" SHARD_NAME ": %s: %s\n", dir, k, di_name(&x, i), bad);
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
		dp_warn(PROG, NULL, "%s: %s (decoded what was there)", desc, err.text);
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
