/* data.c — unit tests for trainer/data/data*.c: idx files (raw and gzip) written here, every
 * bad-file error by its exact text, CIFAR-10 records, the synthetic set, and the real
 * Fashion-MNIST when installed. With arguments it is a helper for t/t0500-data.t:
 *   data.t --dump IMAGES LABELS INDEX...   prints "INDEX LABEL SUM FNV1A64" per sample. */
#include "common/error.h"
#include "trainer/data/data.h"
#include "t/lib/tap.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FMNIST "/usr/share/datasets/fashion-mnist"

static char dir[256];

static const char *path(const char *name)
{
	static char buf[8][512];
	static int k;
	char *p = buf[k++ % 8];

	snprintf(p, 512, "%s/%s", dir, name);
	return p;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static void write_raw(const char *file, const void *data, size_t len)
{
	FILE *f = fopen(file, "wb");

	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
		bail_out("cannot write %s", file);
}

static void write_gz(const char *file, const void *data, size_t len)
{
	gzFile g = gzopen(file, "wb");

	if (!g || (len && gzwrite(g, data, (unsigned)len) != (int)len) || gzclose(g) != Z_OK)
		bail_out("cannot write %s", file);
}

/* An idx3 file image: header + n images of rows x cols; pixel = (i * 7 + p) & 255. */
static uint8_t *idx3(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t pixels,
		     size_t *len)
{
	uint8_t *b = calloc(1, 16 + pixels + 1);

	put32(b, magic);
	put32(b + 4, n);
	put32(b + 8, rows);
	put32(b + 12, cols);
	for (size_t p = 0; p < pixels; p++)
		b[16 + p] = (uint8_t)((p / ((size_t)rows * cols + !(rows && cols))) * 7 + p);
	*len = 16 + pixels;
	return b;
}

static uint8_t *idx1(uint32_t magic, uint32_t n, size_t labels, size_t *len)
{
	uint8_t *b = calloc(1, 8 + labels + 1);

	put32(b, magic);
	put32(b + 4, n);
	for (size_t i = 0; i < labels; i++)
		b[8 + i] = (uint8_t)(i % 10);
	*len = 8 + labels;
	return b;
}

/* Loads images/labels and compares the error with `want` (exact), or with `part` (substring)
 * when want is NULL. */
static void bad_idx(const char *images, const char *labels, const char *want, const char *part,
		    const char *what)
{
	struct data_set ds;
	struct dp_error err = {""};
	int rc = data_load_idx(&ds, images, labels, &err);

	ok(rc == -1 && ds.count == 0 && ds.pixels == NULL, "%s: refused", what);
	if (want)
		is(err.text, want, "%s: message", what);
	else
		like(err.text, part, "%s: message", what);
}

static void test_idx_good(void)
{
	size_t ilen, llen;
	uint8_t *img = idx3(0x803, 5, 3, 4, 60, &ilen), *lab = idx1(0x801, 5, 5, &llen);
	const char *names[2][2] = {{"good-images", "good-labels"},
				   {"good-images.gz", "good-labels.gz"}};
	struct dp_error err;

	write_raw(path(names[0][0]), img, ilen);
	write_raw(path(names[0][1]), lab, llen);
	write_gz(path(names[1][0]), img, ilen);
	write_gz(path(names[1][1]), lab, llen);
	for (int gz = 0; gz < 2; gz++) {
		struct data_set ds;
		int same = 1, label = -1;
		const uint8_t *px = NULL;

		err.text[0] = 0;
		if (!ok(data_load_idx(&ds, path(names[gz][0]), path(names[gz][1]), &err) == 0,
			"idx %s: loads (%s)", gz ? "gzip" : "raw", err.text))
			continue;
		is_int(ds.count, 5, "count");
		ok(ds.channels == 1 && ds.height == 3 && ds.width == 4 && ds.image_bytes == 12,
		   "1x3x4 images");
		is_int(ds.num_classes, 5, "num_classes = largest label + 1");
		is(ds.kind, "idx", "kind");
		is(ds.name, path(names[gz][0]), "named after the image file");
		for (size_t i = 0; i < 5; i++) {
			if (data_get(&ds, i, NULL, &px, &label, &err) != 0 ||
			    memcmp(px, img + 16 + i * 12, 12) != 0 || label != (int)i)
				same = 0;
		}
		ok(same, "every image and label as written");
		ok(data_get(&ds, 5, NULL, &px, &label, &err) == -1, "index past the end refused");
		data_free(&ds);
		ok(ds.count == 0 && ds.ops == NULL, "data_free zeroes the set");
	}
	free(img);
	free(lab);
}

static void test_idx_bad(void)
{
	size_t ilen, llen;
	uint8_t *img = idx3(0x803, 5, 3, 4, 60, &ilen), *lab = idx1(0x801, 5, 5, &llen);
	uint8_t *b;
	size_t blen;
	char want[2048], labels[512];

	snprintf(labels, sizeof(labels), "%s", path("good-labels"));

	/* missing, directory, empty */
	snprintf(want, sizeof(want), "%s: No such file or directory", path("nonexistent"));
	bad_idx(path("nonexistent"), labels, want, NULL, "missing image file");
	snprintf(want, sizeof(want), "%s: No such file or directory", path("nonexistent-labels"));
	bad_idx(path("good-images"), path("nonexistent-labels"), want, NULL, "missing label file");
	snprintf(want, sizeof(want), "%s: is a directory, not a dataset file", dir);
	bad_idx(dir, labels, want, NULL, "a directory");
	write_raw(path("empty"), "", 0);
	snprintf(want, sizeof(want), "%s: empty file; expected an idx3 image file", path("empty"));
	bad_idx(path("empty"), labels, want, NULL, "empty file");

	/* short header */
	write_raw(path("short-header"), img, 10);
	snprintf(want, sizeof(want),
		 "%s: truncated: 10 bytes is too short for the 16-byte header of an idx3 image "
		 "file",
		 path("short-header"));
	bad_idx(path("short-header"), labels, want, NULL, "header cut short");

	/* wrong magic, swapped files */
	b = idx3(0x804, 5, 3, 4, 60, &blen);
	write_gz(path("train-images-idx3-ubyte.gz"), b, blen);
	free(b);
	snprintf(want, sizeof(want),
		 "%s: not an idx3 image file (magic 0x00000804; expected 0x00000803, unsigned "
		 "bytes in 3 dimensions: an idx file of the wrong number of dimensions)",
		 path("train-images-idx3-ubyte.gz"));
	bad_idx(path("train-images-idx3-ubyte.gz"), labels, want, NULL, "wrong magic (gzip)");
	write_raw(path("png"), "\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
	snprintf(want, sizeof(want),
		 "%s: not an idx3 image file (magic 0x89504e47; expected 0x00000803, unsigned "
		 "bytes in 3 dimensions)",
		 path("png"));
	bad_idx(path("png"), labels, want, NULL, "not an idx file at all");
	snprintf(want, sizeof(want),
		 "%s: not an idx3 image file (magic 0x00000801; expected 0x00000803, unsigned "
		 "bytes in 3 dimensions: that is an idx1 label file; are the image and label paths "
		 "swapped?)",
		 labels);
	bad_idx(labels, path("good-images"), want, NULL, "image and label paths swapped");
	snprintf(want, sizeof(want),
		 "%s: not an idx1 label file (magic 0x00000803; expected 0x00000801, unsigned "
		 "bytes in 1 dimensions: that is an idx3 image file; are the image and label paths "
		 "swapped?)",
		 path("good-images"));
	bad_idx(path("good-images"), path("good-images"), want, NULL, "images given as labels");

	/* sizes: zero, none, implausible */
	b = idx3(0x803, 5, 0, 4, 0, &blen);
	write_raw(path("zero-rows"), b, blen);
	free(b);
	snprintf(want, sizeof(want), "%s: zero-size images (0x4 in its header)", path("zero-rows"));
	bad_idx(path("zero-rows"), labels, want, NULL, "zero-size images");
	b = idx3(0x803, 0, 3, 4, 0, &blen);
	write_raw(path("no-images"), b, blen);
	free(b);
	snprintf(want, sizeof(want), "%s: holds no images (count 0 in its header)",
		 path("no-images"));
	bad_idx(path("no-images"), labels, want, NULL, "count 0");
	b = idx3(0x803, 4000000000u, 3000, 3000, 0, &blen);
	write_gz(path("huge.gz"), b, blen);
	free(b);
	snprintf(want, sizeof(want),
		 "%s: implausible header: 4000000000 images of 3000x3000 (at most 65536 pixels a "
		 "side and 64 GiB in all); the file is corrupt or not an image file",
		 path("huge.gz"));
	bad_idx(path("huge.gz"), labels, want, NULL, "implausibly large");
	b = idx3(0x803, 1, 100000, 1, 0, &blen);
	write_raw(path("tall"), b, blen);
	free(b);
	snprintf(want, sizeof(want),
		 "%s: implausible header: 1 images of 100000x1 (at most 65536 pixels a side and 64 "
		 "GiB in all); the file is corrupt or not an image file",
		 path("tall"));
	bad_idx(path("tall"), labels, want, NULL, "implausible side");

	/* truncated and trailing data */
	write_raw(path("cut-images"), img, ilen - 7);
	snprintf(want, sizeof(want),
		 "%s: truncated: expected 60 bytes of images (5 images of 3x4) after the 16-byte "
		 "header, got 53; fetch the file again",
		 path("cut-images"));
	bad_idx(path("cut-images"), labels, want, NULL, "truncated raw images");
	write_raw(path("cut-labels"), lab, llen - 2);
	snprintf(want, sizeof(want),
		 "%s: truncated: expected 5 bytes of labels after the 8-byte header, got 3; fetch "
		 "the file again",
		 path("cut-labels"));
	bad_idx(path("good-images"), path("cut-labels"), want, NULL, "truncated raw labels");
	{
		uint8_t *longer = malloc(ilen + 3);
		memcpy(longer, img, ilen);
		memcpy(longer + ilen, "abc", 3);
		write_gz(path("long.gz"), longer, ilen + 3);
		free(longer);
	}
	snprintf(want, sizeof(want),
		 "%s: 3 bytes of trailing data after the images its header announces; the header "
		 "is wrong or the file was appended to",
		 path("long.gz"));
	bad_idx(path("long.gz"), labels, want, NULL, "trailing data");

	/* count mismatch */
	b = idx1(0x801, 4, 4, &blen);
	write_raw(path("four-labels"), b, blen);
	free(b);
	snprintf(want, sizeof(want),
		 "%s has 5 images but %s has 4 labels; give the label file that belongs to these "
		 "images",
		 path("good-images"), path("four-labels"));
	bad_idx(path("good-images"), path("four-labels"), want, NULL, "image/label count mismatch");

	free(img);
	free(lab);
}

/* gzip damage needs more than a few bytes of data: 2000 incompressible 28x28 images. */
static void test_idx_gzip_damage(void)
{
	size_t n = 2000, len, zlen;
	uint8_t *b = idx3(0x803, (uint32_t)n, 28, 28, n * 784, &len), *z;
	uint64_t s = 88172645463325252ull;
	FILE *f;
	char want[2048];
	struct stat st;
	size_t lablen;
	uint8_t *lab = idx1(0x801, (uint32_t)n, n, &lablen);

	for (size_t i = 16; i < len; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		b[i] = (uint8_t)s;
	}
	write_gz(path("rand.gz"), b, len);
	write_gz(path("rand-labels.gz"), lab, lablen);
	{
		struct data_set ds;
		struct dp_error err = {""};
		int rc = data_load_idx(&ds, path("rand.gz"), path("rand-labels.gz"), &err);
		ok(rc == 0 && ds.count == n && memcmp(ds.pixels, b + 16, n * 784) == 0,
		   "2000 random images round-trip through gzip (%s)", err.text);
		if (rc == 0)
			data_free(&ds);
	}
	stat(path("rand.gz"), &st);
	zlen = (size_t)st.st_size;
	z = malloc(zlen);
	f = fopen(path("rand.gz"), "rb");
	if (!f || fread(z, 1, zlen, f) != zlen)
		bail_out("cannot read back rand.gz");
	fclose(f);

	/* Two gzip members back to back (cat a.gz b.gz) are one stream, as for gzip(1);
	 * anything else after the data is refused. */
	{
		struct data_set ds;
		struct dp_error err = {""};
		FILE *cat;
		int rc;

		write_gz(path("part1.gz"), b, 1000);
		write_gz(path("part2.gz"), b + 1000, len - 1000);
		cat = fopen(path("two-members.gz"), "wb");
		for (int k = 0; k < 2; k++) {
			FILE *in = fopen(path(k ? "part2.gz" : "part1.gz"), "rb");
			int ch;
			while ((ch = fgetc(in)) != EOF)
				fputc(ch, cat);
			fclose(in);
		}
		fclose(cat);
		rc = data_load_idx(&ds, path("two-members.gz"), path("rand-labels.gz"), &err);
		ok(rc == 0 && ds.count == n && memcmp(ds.pixels, b + 16, n * 784) == 0,
		   "concatenated gzip members read as one file (%s)", err.text);
		if (rc == 0)
			data_free(&ds);
		cat = fopen(path("two-members.gz"), "ab");
		fputs("garbage", cat);
		fclose(cat);
		snprintf(want, sizeof(want),
			 "%s: trailing garbage after the gzip data; fetch the file again",
			 path("two-members.gz"));
		bad_idx(path("two-members.gz"), path("rand-labels.gz"), want, NULL,
			"garbage after the gzip data");
	}

	write_raw(path("half.gz"), z, zlen / 2);
	snprintf(want, sizeof(want),
		 "%s: truncated: expected 1568000 bytes of images (2000 images of 28x28) after "
		 "the 16-byte header, got ",
		 path("half.gz"));
	bad_idx(path("half.gz"), path("rand-labels.gz"), NULL, want, "gzip cut in half");
	bad_idx(path("half.gz"), path("rand-labels.gz"), NULL,
		" before the gzip stream broke off; fetch the file again", "... says how");

	write_raw(path("no-trailer.gz"), z, zlen - 4);
	snprintf(want, sizeof(want),
		 "%s: truncated gzip file: the data is complete but the gzip trailer is missing; "
		 "fetch the file again",
		 path("no-trailer.gz"));
	bad_idx(path("no-trailer.gz"), path("rand-labels.gz"), want, NULL, "gzip trailer cut off");

	z[zlen / 2] ^= 0x55;
	z[zlen / 2 + 1] ^= 0xaa;
	write_raw(path("corrupt.gz"), z, zlen);
	snprintf(want, sizeof(want), "%s: corrupt gzip data (", path("corrupt.gz"));
	bad_idx(path("corrupt.gz"), path("rand-labels.gz"), NULL, want, "corrupt gzip data");
	bad_idx(path("corrupt.gz"), path("rand-labels.gz"), NULL, "; fetch the file again",
		"... says what to do");

	/* The CRC is checked: flip one byte of the stored checksum. */
	z[zlen / 2] ^= 0x55;
	z[zlen / 2 + 1] ^= 0xaa;
	z[zlen - 8] ^= 1;
	write_raw(path("bad-crc.gz"), z, zlen);
	snprintf(want, sizeof(want), "%s: corrupt gzip data (incorrect data check)",
		 path("bad-crc.gz"));
	bad_idx(path("bad-crc.gz"), path("rand-labels.gz"), NULL, want, "gzip checksum mismatch");
	free(z);
	free(b);
	free(lab);
}

static void test_cifar(void)
{
	size_t rec = 3073, n1 = 3, n2 = 2;
	uint8_t *f1 = malloc(n1 * rec), *f2 = malloc(n2 * rec);
	struct data_set ds;
	struct dp_error err;
	char want[2048];
	const char *paths[2] = {path("data_batch_1.bin"), path("data_batch_2.bin.gz")};
	int same = 1;

	for (size_t i = 0; i < n1 * rec; i++)
		f1[i] = (uint8_t)(i % rec == 0 ? (i / rec) : i * 31);
	for (size_t i = 0; i < n2 * rec; i++)
		f2[i] = (uint8_t)(i % rec == 0 ? 9 - (i / rec) : i * 17);
	write_raw(paths[0], f1, n1 * rec);
	write_gz(paths[1], f2, n2 * rec);
	if (ok(data_load_cifar10(&ds, 2, paths, &err) == 0, "CIFAR-10: two files load (%s)",
	       err.text)) {
		is_int(ds.count, 5, "5 records");
		ok(ds.channels == 3 && ds.height == 32 && ds.width == 32 && ds.num_classes == 10,
		   "3x32x32, 10 classes");
		for (size_t i = 0; i < 5; i++) {
			const uint8_t *rec_p = i < n1 ? f1 + i * rec : f2 + (i - n1) * rec;
			const uint8_t *px;
			int label;

			if (data_get(&ds, i, NULL, &px, &label, &err) != 0 || label != rec_p[0] ||
			    memcmp(px, rec_p + 1, 3072) != 0)
				same = 0;
		}
		ok(same, "labels and planar pixels of every record, across files");
		like(ds.name, "(and 1 more CIFAR-10 files)", "name mentions the other files");
		data_free(&ds);
	}

	write_raw(path("cifar-short"), f1, n1 * rec - 100);
	snprintf(want, sizeof(want),
		 "%s: truncated or not a CIFAR-10 binary file: 9119 bytes is not a whole number "
		 "of 3073-byte records (1 label + 3072 pixels; the last has 2973)",
		 path("cifar-short"));
	paths[0] = path("cifar-short");
	ok(data_load_cifar10(&ds, 1, paths, &err) == -1, "CIFAR-10: partial record refused");
	is(err.text, want, "... message");

	f1[rec] = 10;
	write_raw(path("cifar100"), f1, n1 * rec);
	paths[0] = path("cifar100");
	snprintf(want, sizeof(want),
		 "%s: record 1 has label 10; CIFAR-10 labels are 0..9 (a CIFAR-100 file has two "
		 "label bytes and is not supported)",
		 path("cifar100"));
	ok(data_load_cifar10(&ds, 1, paths, &err) == -1, "CIFAR-10: label 10 refused");
	is(err.text, want, "... message");

	paths[0] = path("data_batch_1.bin");
	paths[1] = path("nonexistent.bin");
	snprintf(want, sizeof(want), "%s: No such file or directory", path("nonexistent.bin"));
	ok(data_load_cifar10(&ds, 2, paths, &err) == -1, "CIFAR-10: missing second file refused");
	is(err.text, want, "... message");
	paths[0] = path("empty");
	snprintf(want, sizeof(want), "%s: empty file; expected CIFAR-10 records", path("empty"));
	ok(data_load_cifar10(&ds, 1, paths, &err) == -1, "CIFAR-10: empty file refused");
	is(err.text, want, "... message");
	ok(data_load_cifar10(&ds, 0, paths, &err) == -1, "CIFAR-10: no files refused");
	free(f1);
	free(f2);
}

static void test_synthetic(void)
{
	struct data_set a, b, c;
	struct dp_error err = {""};
	uint8_t *s1 = malloc(3 * 8 * 5), *s2 = malloc(3 * 8 * 5);
	int same = 1, differ = 0, in_range = 1, counts[10] = {0};
	double bright[10] = {0};

	ok(data_synthetic(&a, 1000, 3, 8, 5, 10, 42, &err) == 0 &&
	       data_synthetic(&b, 1000, 3, 8, 5, 10, 42, &err) == 0 &&
	       data_synthetic(&c, 1000, 3, 8, 5, 10, 43, &err) == 0,
	   "synthetic sets created (%s)", err.text);
	ok(a.count == 1000 && a.channels == 3 && a.height == 8 && a.width == 5 &&
	       a.num_classes == 10 && a.image_bytes == 120,
	   "synthetic geometry as asked");
	for (size_t i = 0; i < a.count; i++) {
		const uint8_t *p1, *p2, *p3;
		int l1, l2, l3;
		uint8_t s3[120];

		data_get(&a, i, s1, &p1, &l1, &err);
		data_get(&b, i, s2, &p2, &l2, &err);
		data_get(&c, i, s3, &p3, &l3, &err);
		if (l1 != l2 || memcmp(p1, p2, 120) != 0)
			same = 0;
		if (l1 != l3 || memcmp(p1, p3, 120) != 0)
			differ++;
		if (l1 < 0 || l1 >= 10)
			in_range = 0;
		else {
			counts[l1]++;
			for (int k = 0; k < 120; k++)
				bright[l1] += p1[k];
		}
	}
	ok(same, "same seed: same pixels and labels");
	ok(differ > 990, "another seed: different samples (%d of 1000)", differ);
	ok(in_range, "labels in 0..9");
	{
		int min = 1000, max = 0, monotone = 1;
		for (int k = 0; k < 10; k++) {
			min = counts[k] < min ? counts[k] : min;
			max = counts[k] > max ? counts[k] : max;
			bright[k] /= counts[k] ? counts[k] * 120.0 : 1;
			if (k && bright[k] <= bright[k - 1])
				monotone = 0;
		}
		ok(min > 60 && max < 140, "labels roughly uniform (%d..%d per class)", min, max);
		ok(monotone, "mean brightness rises with the class (learnable)");
	}
	/* Pinned with an independent Python transcription of data.h's description. */
	{
		const uint8_t *p0, *p999;
		int l0, l999;
		unsigned sum0 = 0, sum999 = 0;
		uint8_t s3[120];

		data_get(&a, 0, s1, &p0, &l0, &err);
		data_get(&a, 999, s3, &p999, &l999, &err);
		for (int k = 0; k < 120; k++) {
			sum0 += p0[k];
			sum999 += p999[k];
		}
		ok(l0 == 7 && sum0 == 17910 && p0[0] == 98 && p0[1] == 129 && p0[119] == 161 &&
		       l999 == 4 && sum999 == 14484 && p999[0] == 153,
		   "pinned synthetic samples 0 and 999 of seed 42");
	}
	ok(data_synthetic(&c, 0, 3, 8, 5, 10, 1, &err) == -1, "synthetic: count 0 refused");
	like(err.text, "must all be positive", "... message");
	ok(data_synthetic(&c, 10, 3, 100000, 5, 10, 1, &err) == -1,
	   "synthetic: 100000 rows refused");
	data_free(&a);
	data_free(&b);
	free(s1);
	free(s2);
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static void test_fmnist(void)
{
	struct data_set tr, te;
	struct dp_error err = {""};
	int labels_ok = 1, hist[10] = {0};

	if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0) {
		skip(6,
		     "Fashion-MNIST not installed at " FMNIST " (Debian: dataset-fashion-mnist)");
		return;
	}
	ok(data_load_idx(&tr, FMNIST "/train-images-idx3-ubyte.gz",
			 FMNIST "/train-labels-idx1-ubyte.gz", &err) == 0,
	   "Fashion-MNIST train loads (%s)", err.text);
	ok(data_load_idx(&te, FMNIST "/t10k-images-idx3-ubyte.gz",
			 FMNIST "/t10k-labels-idx1-ubyte.gz", &err) == 0,
	   "Fashion-MNIST test loads (%s)", err.text);
	ok(tr.count == 60000 && te.count == 10000, "60000 train, 10000 test");
	ok(tr.height == 28 && tr.width == 28 && tr.channels == 1 && te.height == 28,
	   "28x28, one channel");
	for (size_t i = 0; i < tr.count; i++) {
		if (tr.labels[i] > 9)
			labels_ok = 0;
		else
			hist[tr.labels[i]]++;
	}
	ok(labels_ok && tr.num_classes == 10 && te.num_classes == 10, "labels 0..9");
	{
		int balanced = 1;
		for (int k = 0; k < 10; k++)
			balanced &= hist[k] == 6000;
		ok(balanced, "6000 training images per class");
	}
	data_free(&tr);
	data_free(&te);
}

static int dump(int argc, char **argv)
{
	struct data_set ds;
	struct dp_error err;

	if (data_load_idx(&ds, argv[2], argv[3], &err) != 0) {
		fprintf(stderr, "data.t: %s\n", err.text);
		return 1;
	}
	for (int a = 4; a < argc; a++) {
		size_t i = strtoull(argv[a], NULL, 10);
		const uint8_t *px;
		int label;
		unsigned long sum = 0;

		if (data_get(&ds, i, NULL, &px, &label, &err) != 0) {
			fprintf(stderr, "data.t: %s\n", err.text);
			data_free(&ds);
			return 1;
		}
		for (size_t k = 0; k < ds.image_bytes; k++)
			sum += px[k];
		printf("%zu %d %lu %016llx\n", i, label, sum,
		       (unsigned long long)fnv1a(px, ds.image_bytes));
	}
	data_free(&ds);
	return 0;
}

/* The scratch directory is flat: remove its files, then it. */
static void rm_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlink(path(e->d_name));
	if (d)
		closedir(d);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");

	if (argc >= 4 && strcmp(argv[1], "--dump") == 0)
		return dump(argc, argv);
	snprintf(dir, sizeof(dir), "%s/dptrain-data-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		bail_out("mkdtemp %s failed", dir);
	test_idx_good();
	test_idx_bad();
	test_idx_gzip_damage();
	test_cifar();
	test_synthetic();
	test_fmnist();
	rm_dir();
	return done_testing();
}
