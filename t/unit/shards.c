/* shards.c — unit tests of trainer/data/shards.h: the one spelling of a shard's file name
 * (made and parsed), and the writer (shard_pack) and the reader (data_load_shards) agreeing on
 * it: a folder of small files packed into several shards, every member checked as verify
 * checks it, read back through the data set, a stopped pack resumed to the same bytes, and a
 * directory holding a file pack does not write refused. The files are not images: nothing
 * here decodes (t/t0510-imagefolder.t packs real ones). */
#define _GNU_SOURCE
#include "common/error.h"
#include "t/lib/tap.h"
#include "trainer/data/data.h"
#include "trainer/data/shards.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/dptrain-shards-XXXXXX";

static const char *P(const char *name)
{
	static char buf[8][1024];
	static int k;
	char *p = buf[k++ % 8];

	snprintf(p, 1024, "%s/%s", dir, name);
	return p;
}

static void put(const char *name, size_t n)
{
	FILE *f = fopen(P(name), "wb");

	for (size_t i = 0; f && i < n; i++)
		fputc((int)((i * 7 + n) & 0xff), f);
	if (!f || fclose(f) != 0)
		bail_out("cannot write %s", P(name));
}

/* The whole of a file, malloc'd, *n bytes. */
static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *p = NULL;
	long len;

	*n = 0;
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (p = malloc((size_t)len + 1)) && fread(p, 1, (size_t)len, f) == (size_t)len)
		*n = (size_t)len;
	fclose(f);
	return p;
}

static int same_file(const char *a, const char *b)
{
	size_t na, nb;
	char *pa = slurp(a, &na), *pb = slurp(b, &nb);
	int same = pa && pb && na == nb && !memcmp(pa, pb, na);

	free(pa);
	free(pb);
	return same;
}

static void test_names(void)
{
	char name[SHARD_NAME_MAX];
	uint32_t k = 7;

	shard_name(name, 42);
	is(name, "shard-00042.tar", "shard_name: five digits at least");
	shard_partial_name(name, 42);
	is(name, "shard-00042.tar.partial", "shard_partial_name: the same, .partial");
	shard_name(name, UINT32_MAX);
	is(name, "shard-4294967295.tar", "the largest shard number fits");
	shard_partial_name(name, UINT32_MAX);
	ok(strlen(name) < SHARD_NAME_MAX, "... its partial name too");

	is_int(shard_parse_name("shard-00042.tar", &k), SHARD_FILE_SHARD, "parsed: a shard");
	is_int(k, 42, "... its number");
	is_int(shard_parse_name("shard-00003.tar.partial", &k), SHARD_FILE_PARTIAL,
	       "parsed: a partial shard");
	is_int(k, 3, "... its number");
	is_int(shard_parse_name("shard-123456.tar", &k), SHARD_FILE_SHARD, "more than five digits");
	is_int(k, 123456, "... its number");
	is_int(shard_parse_name("shard-4294967295.tar", &k), SHARD_FILE_SHARD, "the largest");
	is_int(shard_parse_name("shard-4294967296.tar", &k), SHARD_FILE_OTHER,
	       "past 32 bits: no shard");
	is_int(shard_parse_name("shard-000001.tar", &k), SHARD_FILE_OTHER,
	       "a zero pack does not add: no shard");
	is_int(shard_parse_name("shard-0001.tar", &k), SHARD_FILE_OTHER, "four digits: no shard");
	is_int(shard_parse_name("shard-00001.tar.tmp", &k), SHARD_FILE_OTHER, "another suffix");
	is_int(shard_parse_name("xshard-00001.tar", &k), SHARD_FILE_OTHER, "another prefix");
	is_int(shard_parse_name("index", &k), SHARD_FILE_OTHER, "no digits");
	is_int(shard_parse_name("shard-+0001.tar", &k), SHARD_FILE_OTHER, "a sign");
}

static void say_nothing(const char *line)
{
	(void)line;
}

/* root/<class>/<file>: 3 classes, 12 files of 100 to 1200 bytes, one with a path too long
 * for ustar's name field (a pax header). */
static void make_root(void)
{
	char name[600];

	mkdir(P("root"), 0755);
	mkdir(P("root/a"), 0755);
	mkdir(P("root/b"), 0755);
	mkdir(P("root/c"), 0755);
	for (int i = 0; i < 12; i++) {
		snprintf(name, sizeof(name), "root/%c/f%02d.jpg", "abc"[i % 3], i);
		put(name, 100 + 100 * (size_t)i);
	}
	snprintf(name, sizeof(name), "root/b/%0150d.png", 7);
	put(name, 333);
}

static void test_pack(void)
{
	char root[600], out[600], resumed[600];
	struct shard_pack_opts o = {
	    .root = root, .out = out, .shard_size = 4096, .stop_after = -1, .say = say_nothing};
	struct shard_pack_result r;
	struct data_bytes b = {0};
	struct data_set ds;
	struct dp_error err;
	const struct di_index *x;
	char name[SHARD_NAME_MAX], rel[64], buf[1024], why[512];
	int label, bad = 0, same = 1;

	snprintf(root, sizeof(root), "%s", P("root"));
	snprintf(out, sizeof(out), "%s", P("out"));
	snprintf(resumed, sizeof(resumed), "%s", P("resumed"));
	make_root();
	is_int(shard_pack(&o, &r, &err), 0, "pack: done");
	if (r.count != 13)
		diag("%s", err.text);
	is_int(r.count, 13, "... 13 samples");
	ok(r.nshards > 2 && r.wrote == r.nshards && r.kept == 0, "... in %u shards, all written",
	   r.nshards);
	shard_name(name, r.nshards - 1);
	snprintf(rel, sizeof(rel), "out/%s", name);
	ok(access(P(rel), F_OK) == 0, "the last shard is %s", name);
	shard_partial_name(name, 0);
	snprintf(rel, sizeof(rel), "out/%s", name);
	ok(access(P(rel), F_OK) != 0, "no partial shard is left");

	ok(data_load_shards(&ds, P("out"), &err) == 0, "the reader opens what the writer wrote");
	if (ds.count != 13)
		diag("%s", err.text);
	x = di_of_set(ds.priv);
	uint64_t *sizes = shard_sizes(x);
	ok(sizes != NULL, "shard_sizes");
	for (uint32_t k = 0; sizes && k < x->shards; k++) {
		struct stat st;
		shard_name(name, k);
		snprintf(rel, sizeof(rel), "out/%s", name);
		same &= stat(P(rel), &st) == 0 && (uint64_t)st.st_size == sizes[k];
	}
	ok(same, "... each shard is the size verify expects");
	free(sizes);
	for (size_t i = 0; i < ds.count; i++) {
		int fd;
		struct stat st;
		shard_name(name, x->s[i].shard);
		snprintf(rel, sizeof(rel), "out/%s", name);
		fd = open(P(rel), O_RDONLY);
		if (fd < 0 || fstat(fd, &st) != 0 ||
		    shard_check_member(x, i, fd, st.st_size, &b, why, sizeof(why)) ||
		    data_read(&ds, i, &b, &label, &err) != 0 || b.len != x->s[i].size)
			bad++;
		if (fd >= 0)
			close(fd);
	}
	is_int(bad, 0, "every member: its tar header and CRC-32 as verify checks, and readable");
	data_describe(&ds, 0, buf, sizeof(buf));
	like(buf, "/out/shard-00000.tar: a/f00.jpg", "describe names the shard with the same name");
	data_free(&ds);
	free(b.p);

	o.out = resumed;
	o.stop_after = 2;
	is_int(shard_pack(&o, &r, &err), SHARD_PACK_STOPPED, "--stop-after-shards 2: stopped");
	is_int(r.wrote, 2, "... after 2 shards");
	o.stop_after = -1;
	is_int(shard_pack(&o, &r, &err), 0, "run again: done");
	ok(r.kept == 2 && r.wrote == r.nshards - 2, "... the 2 kept, the rest written");
	same = 1;
	for (uint32_t k = 0; k < r.nshards; k++) {
		char a[64], c[64];
		shard_name(name, k);
		snprintf(a, sizeof(a), "out/%s", name);
		snprintf(c, sizeof(c), "resumed/%s", name);
		same &= same_file(P(a), P(c));
	}
	ok(same && same_file(P("out/index"), P("resumed/index")),
	   "the same bytes as a pack that was not stopped");

	put("resumed/notes.txt", 10);
	is_int(shard_pack(&o, &r, &err), -1, "a directory holding another file");
	like(err.text, "holds notes.txt, which dptrain-data pack does not write", "... is refused");
}

int main(void)
{
	char cmd[300];

	if (!mkdtemp(dir))
		bail_out("mkdtemp: %s", strerror(errno));
	test_names();
	test_pack();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done_testing();
}
