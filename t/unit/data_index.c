/* data_index.c — unit tests for trainer/data/data_index.c, data_folder.c and data_shards.c: the
 * index text pinned byte for byte (its end CRC computed here with zlib), a round trip through a
 * file, every malformed-index error with its line, the cache's name, the ImageFolder scan's
 * order and errors on a tree made here, the image-folder cache's freshness, and a shard
 * directory written by hand (reads, CRC mismatch, truncation). Image contents are never
 * decoded here: t/t0510-imagefolder.t does that against torchvision. */
#define _GNU_SOURCE
#include "common/error.h"
#include "trainer/data/data.h"
#include "trainer/data/data_index.h"
#include "t/lib/tap.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char dir[256];

static const char *P(const char *name)
{
	static char buf[8][1024];
	static int k;
	char *p = buf[k++ % 8];

	snprintf(p, 1024, "%s/%s", dir, name);
	return p;
}

static void put_file(const char *name, const void *data, size_t len)
{
	FILE *f = fopen(P(name), "wb");

	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
		bail_out("cannot write %s", P(name));
}

static void put_text(const char *name, const char *text)
{
	put_file(name, text, strlen(text));
}

static void mk(const char *name)
{
	if (mkdir(P(name), 0755) != 0)
		bail_out("mkdir %s", P(name));
}

/* text + "end <its CRC-32>\n", in a static buffer */
static const char *with_end(const char *text)
{
	static char buf[4096];
	uLong c = crc32(0, (const Bytef *)text, (uInt)strlen(text));

	snprintf(buf, sizeof(buf), "%send %08lx\n", text, c);
	return buf;
}

/* Replace the first `from` in base with `to`. */
static const char *edit(const char *base, const char *from, const char *to)
{
	static char buf[4096];
	const char *at = strstr(base, from);

	if (!at)
		bail_out("edit: '%s' not in the base text", from);
	snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
	return buf;
}

static const char folder_text[] = "dptrain-index 1\n"
				  "kind imagefolder\n"
				  "root /data/set\n"
				  "classes 2\n"
				  "class a\n"
				  "class b\n"
				  "samples 3\n"
				  "0\t10\ta/x.jpg\n"
				  "1\t20\tb/y.png\n"
				  "1\t30\tb/sub/z.jpeg\n";

static const char shards_text[] = "dptrain-index 1\n"
				  "kind shards\n"
				  "root /data/set\n"
				  "shards 2\n"
				  "classes 2\n"
				  "class a\n"
				  "class b\n"
				  "samples 3\n"
				  "0\t0\t512\t10\t0000abcd\ta/x.jpg\n"
				  "1\t0\t1536\t20\tdeadbeef\tb/y.png\n"
				  "1\t1\t512\t30\t00000001\tb/sub/z.jpeg\n";

static void build(struct di_index *x, enum di_kind kind)
{
	static const char *const names[] = {"a/x.jpg", "b/y.png", "b/sub/z.jpeg"};
	static const struct di_sample s[] = {
	    {.label = 0, .size = 10, .shard = 0, .offset = 512, .crc = 0xabcd},
	    {.label = 1, .size = 20, .shard = 0, .offset = 1536, .crc = 0xdeadbeef},
	    {.label = 1, .size = 30, .shard = 1, .offset = 512, .crc = 1}};
	struct dp_error err;

	memset(x, 0, sizeof(*x));
	x->kind = kind;
	x->shards = kind == DI_SHARDS ? 2 : 0;
	if (di_set_root(x, "/data/set", &err) || di_add_class(x, "a", &err) ||
	    di_add_class(x, "b", &err))
		bail_out("%s", err.text);
	for (int i = 0; i < 3; i++)
		if (di_add_sample(x, &s[i], names[i], &err))
			bail_out("%s", err.text);
}

static bool same_index(const struct di_index *a, const struct di_index *b)
{
	if (a->kind != b->kind || strcmp(a->root, b->root) || a->shards != b->shards ||
	    a->num_classes != b->num_classes || a->count != b->count)
		return false;
	for (int k = 0; k < a->num_classes; k++)
		if (strcmp(a->classes[k], b->classes[k]))
			return false;
	for (size_t i = 0; i < a->count; i++) {
		const struct di_sample *p = &a->s[i], *q = &b->s[i];
		if (strcmp(di_name(a, i), di_name(b, i)) || p->label != q->label ||
		    p->size != q->size ||
		    (a->kind == DI_SHARDS &&
		     (p->shard != q->shard || p->offset != q->offset || p->crc != q->crc)))
			return false;
	}
	return true;
}

static void test_round_trip(void)
{
	struct di_index x, y;
	struct dp_error err;
	struct timespec t = {.tv_sec = 1500000000, .tv_nsec = 0};
	struct stat st;
	char *text;
	size_t len;

	for (int kind = DI_FOLDER; kind <= DI_SHARDS; kind++) {
		const char *want = with_end(kind == DI_FOLDER ? folder_text : shards_text);
		const char *what = kind == DI_FOLDER ? "imagefolder" : "shards";

		build(&x, (enum di_kind)kind);
		if (di_format(&x, &text, &len, &err) != 0)
			bail_out("%s", err.text);
		ok(len == strlen(want) && !memcmp(text, want, len),
		   "%s: the index text is the documented format, byte for byte", what);
		ok(di_parse(&y, "F", text, len, &err) == 0 && same_index(&x, &y),
		   "%s: parsed back to the same index", what);
		di_free(&y);
		free(text);
		ok(di_write(&x, P("rt.index"), &t, &err) == 0, "%s: written atomically", what);
		ok(stat(P("rt.index"), &st) == 0 && st.st_mtim.tv_sec == t.tv_sec,
		   "%s: with the mtime asked for", what);
		ok(di_read(&y, P("rt.index"), &err) == 0 && same_index(&x, &y),
		   "%s: read back from the file", what);
		di_free(&y);
		di_free(&x);
	}
	memset(&x, 0, sizeof(x));
	di_set_root(&x, "/r", &err);
	is_int(di_add_sample(&x, &(struct di_sample){0}, "a/x\ty.jpg", &err), -1,
	       "a name with a tab is refused");
	is(err.text,
	   "/r/a/x\ty.jpg: a file name with a tab or newline cannot go in an index; "
	   "rename it",
	   "... naming the file");
	is_int(di_add_class(&x, "a\nb", &err), -1, "a class name with a newline is refused");
	like(err.text, "/r/a\nb: a class name with a tab or newline", "... naming the folder");
	is_int(di_set_root(&x, "/r\tx", &err), -1, "a root with a tab is refused");
	di_free(&x);
}

struct bad {
	const char *text; /* the whole file */
	const char *want; /* the message, or its start */
};

static void test_malformed(void)
{
	struct bad b[64];
	int n = 0;
	const char *F = folder_text, *S = shards_text;
	char trunc[4096];

#define BAD(t, w) b[n++] = (struct bad){strdup(t), w}
	BAD("", "F: empty file, not a dptrain index");
	BAD(with_end("hello\n"), "F:1: not a dptrain index: the first line is 'hello', not "
				 "'dptrain-index 1'");
	BAD(with_end(edit(F, "index 1", "index 2")),
	    "F:1: index format 'dptrain-index 2'; this dptrain-data reads version 1");
	snprintf(trunc, sizeof(trunc), "%.*s", (int)strlen(F) - 4, F);
	BAD(trunc, "F: truncated: line 10 is cut short and no 'end' line follows");
	BAD(F, "F: truncated: it ends after line 10 without its 'end' line");
	BAD(edit(with_end(F), "end ", "end 1"), "F:11: bad end line 'end 1");
	BAD(edit(with_end(F), "\n0\t10", "\n0\t11"), "F:11: CRC-32 mismatch: the end line says ");
	BAD(with_end(edit(F, "kind imagefolder", "kind folder")),
	    "F:2: unknown kind 'folder' (imagefolder or shards)");
	BAD(with_end(edit(F, "root /data", "root data")),
	    "F:3: the root 'data/set' is not an absolute path");
	BAD(with_end(edit(F, "root /data/set\n", "")),
	    "F:3: expected 'root /PATH', found 'classes 2'");
	BAD(with_end(edit(F, "classes 2", "classes x")),
	    "F:4: 'classes x': not a number from 0 to 2147483647");
	BAD(with_end(edit(F, "classes 2", "classes 0")), "F:4: no classes");
	BAD(with_end(edit(F, "classes 2", "classes 12")),
	    "F:4: 12 classes, but only 6 lines follow before the end line");
	BAD(with_end(edit(F, "class a\nclass b", "class b\nclass a")),
	    "F:6: class 'a' after 'b': classes are sorted by name (byte order) and unique");
	BAD(with_end(edit(F, "class a\nclass b", "class a\nclass a")), "F:6: class 'a' after 'a'");
	BAD(with_end(edit(F, "class a\n", "class a/b\n")),
	    "F:5: bad class name 'a/b': a folder name, not a path");
	BAD(with_end(edit(F, "class a\n", "class ..\n")), "F:5: bad class name '..'");
	BAD(with_end(edit(F, "classes 2", "classes 3")),
	    "F:7: expected 'class NAME', found 'samples 3' (line 4 says 3 classes)");
	BAD(with_end("dptrain-index 1\nkind imagefolder\nroot /x\nclasses 1\nclass a\n"),
	    "F:6: the 'end' line comes where 'samples N' should be: the header is incomplete");
	BAD(with_end(edit(F, "samples 3", "samples 0")), "F:7: no samples");
	BAD(with_end(edit(F, "samples 3", "samples 2")),
	    "F:10: one sample more than line 7 says ('samples 2')");
	BAD(with_end(edit(F, "samples 3", "samples 4")),
	    "F:11: the 'end' line after 3 samples, but line 7 says 'samples 4': lines are "
	    "missing");
	BAD(with_end(edit(F, "0\t10\t", "x\t10\t")), "F:8: label 'x' is not a number");
	BAD(with_end(edit(F, "1\t20\t", "2\t20\t")),
	    "F:9: label 2 out of range (the index has 2 classes)");
	BAD(with_end(edit(F, "1\t20\t", "-1\t20\t")), "F:9: label '-1' is not a number");
	BAD(with_end(edit(F, "0\t10\t", "0\t1e3\t")), "F:8: size '1e3' is not a number");
	BAD(with_end(edit(F, "0\t10\t", "0\t99999999999999999999999\t")),
	    "F:8: size '99999999999999999999999' is not a number");
	BAD(with_end(edit(F, "0\t10\ta/x.jpg", "0\ta/x.jpg")),
	    "F:8: expected 3 tab-separated fields (LABEL, SIZE, PATH), found '0?a/x.jpg'");
	BAD(with_end(edit(F, "a/x.jpg", "a/x\ty.jpg")), "F:8: expected 3 tab-separated fields");
	BAD(with_end(edit(F, "a/x.jpg", "/a/x.jpg")),
	    "F:8: bad path '/a/x.jpg': a path relative to the root");
	BAD(with_end(edit(F, "a/x.jpg", "a/../b/x.jpg")),
	    "F:8: bad path 'a/../b/x.jpg': it has an empty, '.' or '..' part");
	BAD(with_end(edit(F, "a/x.jpg", "a//x.jpg")), "F:8: bad path 'a//x.jpg'");
	BAD(with_end(edit(F, "a/x.jpg", "b/x.jpg")),
	    "F:8: path 'b/x.jpg' is not in the folder of its class 0, 'a'");
	BAD(with_end(edit(F, "a/x.jpg", "ab/x.jpg")), "F:8: path 'ab/x.jpg' is not in the folder");
	BAD(with_end(edit(F, "a/x.jpg", "a")), "F:8: path 'a' is not in the folder");
	BAD(with_end(edit(S, "shards 2", "shards 0")), "F:4: no shards");
	BAD(with_end(edit(S, "shards 2\n", "")), "F:4: expected 'shards N', found 'classes 2'");
	BAD(with_end(edit(S, "1\t1\t512", "1\t2\t512")),
	    "F:11: shard 2 out of range (the index has 2 shards)");
	BAD(with_end(edit(S, "0\t0\t512", "0\t0\t100")),
	    "F:9: offset 100 is not where a tar member's data can start");
	BAD(with_end(edit(S, "0\t0\t512", "0\t0\t0")), "F:9: offset 0 is not where");
	BAD(with_end(edit(S, "1536", "1024")),
	    "F:10: shard 0 offset 1024 overlaps the sample before it");
	BAD(with_end(edit(S, "1\t1\t512", "1\t0\t512")),
	    "F:11: shard 0 offset 512 overlaps the sample before it");
	BAD(with_end(edit(S, "0000abcd", "abcd")), "F:9: CRC-32 'abcd' is not 8 hex digits");
	BAD(with_end(edit(S, "0000abcd", "0000abcg")), "F:9: CRC-32 '0000abcg' is not 8 hex");
	BAD(with_end(edit(S, "\t0000abcd", "")),
	    "F:9: expected 6 tab-separated fields (LABEL, SHARD, OFFSET, SIZE, CRC32, PATH)");
	BAD(with_end(edit(S, "1\t1\t512", "1\tx\t512")), "F:11: shard 'x' is not a number");
#undef BAD
	for (int k = 0; k < n; k++) {
		struct di_index x;
		struct dp_error err = {"(no error)"};
		int rc = di_parse(&x, "F", b[k].text, strlen(b[k].text), &err);

		ok(rc == -1 && !strncmp(err.text, b[k].want, strlen(b[k].want)), "malformed: %s",
		   b[k].want);
		if (rc != -1 || strncmp(err.text, b[k].want, strlen(b[k].want)))
			diag("got: %s", err.text);
		ok(x.count == 0 && !x.s && !x.classes && !x.root, "... and nothing is left");
		free((void *)b[k].text);
	}
	{
		struct di_index x;
		struct dp_error err;
		is_int(di_read(&x, P("nonexistent.index"), &err), -1, "a missing index");
		is(err.text, P("nonexistent.index: No such file or directory"), "... names it");
	}
}

static void test_names(void)
{
	char buf[256];

	is_int((long long)di_fnv1a64(""), (long long)0xcbf29ce484222325ull, "FNV-1a 64 of ''");
	is_int((long long)di_fnv1a64("a"), (long long)0xaf63dc4c8601ec8cull, "FNV-1a 64 of 'a'");
	is_int((long long)di_fnv1a64("foobar"), (long long)0x85944171f73967e8ull,
	       "FNV-1a 64 of 'foobar'");
	ok(di_cache_path(buf, sizeof(buf), "/cache", "foobar") == 0, "cache path made");
	is(buf, "/cache/imagefolder-85944171f73967e8.index",
	   "cache file: imagefolder-<16 hex digits of FNV-1a 64 of the root>.index");
	is_int(di_cache_path(buf, 20, "/cache", "foobar"), -1, "a buffer too small: -1");
	is_int(di_image_ext("x.jpg") + di_image_ext("x.JPEG") + di_image_ext("x.Png") +
		   di_image_ext(".jpg"),
	       4, ".jpg .JPEG .Png and a bare .jpg are kept");
	is_int(di_image_ext("x.bmp") + di_image_ext("x.TIFF") + di_image_ext("x.webp") +
		   di_image_ext("x.ppm") + di_image_ext("x.pgm") + di_image_ext("x.tif"),
	       -6, "torchvision's other formats are told apart");
	is_int(di_image_ext("x.txt") + di_image_ext("jpg") + di_image_ext("x.jpg.txt") +
		   di_image_ext("x.jpgx"),
	       0, "the rest are not images");
}

/* root/{B,_c,a,b}: byte order puts B < _c < a < b, unlike a case-insensitive sort */
static void make_tree(void)
{
	mk("root");
	mk("root/a");
	mk("root/a/sub");
	mk("root/a/sub/deep");
	mk("root/a/sub-x");
	mk("root/b");
	mk("root/B");
	mk("root/_c");
	put_text("root/a/2.jpg", "two");
	put_text("root/a/10.JPG", "ten");
	put_text("root/a/note.txt", "not an image");
	put_text("root/a/q.bmp", "a bitmap");
	put_text("root/a/sub/x.png", "png");
	put_text("root/a/sub-x/y.jpeg", "jpeg");
	put_text("root/a/sub/deep/z.jpg", "deep");
	put_text("root/b/k.Jpeg", "k");
	put_text("root/B/m.png", "m");
	put_text("root/_c/n.jpg", "n");
	put_text("root/loose.jpg", "not in a class");
	if (symlink("../b", P("root/_c/link")) != 0 || symlink("..", P("root/a/sub/deep/up")) != 0)
		bail_out("symlink");
}

static const char *const tree_order[] = {
    "0 B/m.png",     "1 _c/n.jpg",	 "1 _c/link/k.Jpeg",   "2 a/10.JPG", "2 a/2.jpg",
    "2 a/sub/x.png", "2 a/sub-x/y.jpeg", "2 a/sub/deep/z.jpg", "3 b/k.Jpeg"};

static void test_scan(void)
{
	struct di_index x;
	struct dp_error err, warn;
	char line[256], *abs;
	bool same;

	make_tree();
	abs = realpath(P("root"), NULL);
	ok(di_scan(&x, P("root"), &warn, &err) == 0, "scan");
	is(x.root, abs, "root: the realpath");
	is_int(x.num_classes, 4, "4 classes");
	ok(x.num_classes == 4 && !strcmp(x.classes[0], "B") && !strcmp(x.classes[1], "_c") &&
	       !strcmp(x.classes[2], "a") && !strcmp(x.classes[3], "b"),
	   "classes in byte order: B _c a b");
	same = x.count == 9;
	for (size_t i = 0; same && i < x.count; i++) {
		snprintf(line, sizeof(line), "%u %s", x.s[i].label, di_name(&x, i));
		same = !strcmp(line, tree_order[i]);
		if (!same)
			diag("sample %zu: got '%s', want '%s'", i, line, tree_order[i]);
	}
	ok(same, "samples in torchvision's order: folders by whole path (sub < sub-x < "
		 "sub/deep), names by bytes, links followed");
	ok(x.count == 9 && x.s[3].size == 3 && x.s[7].size == 4, "sizes from stat");
	like(warn.text, "skipped 1 file in formats dptrain does not decode", "one warning: .bmp");
	like(warn.text, "root/a/q.bmp", "... with the example");
	like(warn.text, "skipped 1 symbolic link to a folder above it (a loop), e.g. ",
	     "... and the loop");
	like(warn.text, "root/a/sub/deep/up", "... by name");
	di_free(&x);

	put_text("root/a/sub/t\tab.jpg", "tab");
	is_int(di_scan(&x, P("root"), &warn, &err), -1, "a file name with a tab");
	like(err.text, "root/a/sub/t\tab.jpg: a file name with a tab or newline cannot go",
	     "... is an error naming it");
	unlink(P("root/a/sub/t\tab.jpg"));

	if (symlink("nowhere.jpg", P("root/B/dangling.jpg")) != 0)
		bail_out("symlink");
	is_int(di_scan(&x, P("root"), &warn, &err), -1, "a dangling link to an image");
	like(err.text,
	     "root/B/dangling.jpg: No such file or directory (a symbolic link to "
	     "nothing); remove it",
	     "... is an error naming it");
	unlink(P("root/B/dangling.jpg"));

	mk("root/empty");
	put_text("root/empty/readme.txt", "nothing");
	is_int(di_scan(&x, P("root"), &warn, &err), -1, "a class without images");
	like(err.text, "root/empty: no .jpg, .jpeg or .png file in this class folder",
	     "... is an error naming the folder");
	unlink(P("root/empty/readme.txt"));
	rmdir(P("root/empty"));

	is_int(di_scan(&x, P("missing"), &warn, &err), -1, "a missing root");
	is(err.text, P("missing: No such file or directory (the image folder)"), "... says so");
	is_int(di_scan(&x, P("root/loose.jpg"), &warn, &err), -1, "a root that is a file");
	like(err.text, "Not a directory (an image folder is a folder with one folder",
	     "... says so");
	mk("flat");
	put_text("flat/x.jpg", "x");
	is_int(di_scan(&x, P("flat"), &warn, &err), -1, "a root without class folders");
	like(err.text, "flat: no class folders", "... says so");
	free(abs);
}

static void set_old(const char *name)
{
	struct timespec t[2] = {{.tv_sec = 1500000000}, {.tv_sec = 1500000000}};

	if (utimensat(AT_FDCWD, P(name), t, 0) != 0)
		bail_out("utimensat %s", P(name));
}

static void test_folder(void)
{
	struct data_set ds;
	struct dp_error err;
	struct data_bytes b = {0};
	char cache[1024], buf[1024], *abs = realpath(P("root"), NULL);
	struct di_index x;
	int label;

	ok(data_load_imagefolder(&ds, P("root/"), NULL, NULL, &err) == 0, "image folder loaded");
	ok(ds.encoded && ds.count == 9 && ds.num_classes == 4 && ds.channels == 3 &&
	       ds.height == 0 && !strcmp(ds.class_names[1], "_c") &&
	       !strcmp(ds.kind, "imagefolder"),
	   "encoded, 9 samples, 4 classes, class names");
	is(ds.name, P("root"), "named after the root, without a trailing /");
	ok(data_read(&ds, 4, &b, &label, &err) == 0 && b.len == 3 && !memcmp(b.p, "two", 3) &&
	       label == 2,
	   "read: the file's bytes and its label");
	data_describe(&ds, 4, buf, sizeof(buf));
	is(buf, P("root/a/2.jpg"), "describe: ROOT/PATH");
	rename(P("root/a/2.jpg"), P("2.jpg"));
	is_int(data_read(&ds, 4, &b, &label, &err), -1, "a file gone since the listing");
	snprintf(buf, sizeof(buf),
		 "%s: No such file or directory (it was there when the folder "
		 "was indexed; re-create the index)",
		 P("root/a/2.jpg"));
	is(err.text, buf, "... names it and says what to do");
	rename(P("2.jpg"), P("root/a/2.jpg"));
	put_text("root/a/2.jpg", "");
	is_int(data_read(&ds, 4, &b, &label, &err), -1, "an empty file");
	like(err.text, "root/a/2.jpg: empty file, not an image", "... is an error");
	put_text("root/a/2.jpg", "two");
	data_free(&ds);

	/* the cache: old folders, a cache made now */
	snprintf(cache, sizeof(cache), "%s/cache/sub/imagefolder-%016llx.index", dir,
		 (unsigned long long)di_fnv1a64(abs));
	for (const char *const *d =
		 (const char *const[]){"root", "root/a", "root/b", "root/B", "root/_c", NULL};
	     *d; d++)
		set_old(*d);
	ok(data_load_imagefolder(&ds, P("root"), NULL, P("cache/sub"), &err) == 0 && ds.count == 9,
	   "with a cache folder (made)");
	data_free(&ds);
	ok(di_read(&x, cache, &err) == 0 && x.count == 9 && !strcmp(x.root, abs),
	   "the cache is the index, at cache/imagefolder-<FNV-1a of the realpath>.index");
	di_free(&x);
	unlink(P("root/a/10.JPG"));
	set_old("root/a");
	ok(data_load_imagefolder(&ds, P("root"), NULL, P("cache/sub"), &err) == 0 && ds.count == 9,
	   "a class folder no newer than the cache: the cache is used (it still lists the "
	   "removed file)");
	data_free(&ds);
	put_text("root/a/10.JPG", "ten");
	unlink(P("root/a/2.jpg"));
	ok(data_load_imagefolder(&ds, P("root"), NULL, P("cache/sub"), &err) == 0 && ds.count == 8,
	   "a class folder changed after: listed again");
	data_free(&ds);
	ok(di_read(&x, cache, &err) == 0 && x.count == 8, "... and the cache rewritten");
	di_free(&x);
	put_text("root/a/2.jpg", "two");
	put_text(cache + strlen(dir) + 1, "garbage\n");
	ok(data_load_imagefolder(&ds, P("root"), NULL, P("cache/sub"), &err) == 0 && ds.count == 9,
	   "a corrupt cache: listed again (with a warning)");
	data_free(&ds);

	/* an explicit index */
	ok(di_scan(&x, P("root"), NULL, &err) == 0 &&
	       di_write(&x, P("root.index"), NULL, &err) == 0,
	   "index written");
	ok(data_load_imagefolder(&ds, P("root"), P("root.index"), NULL, &err) == 0 &&
	       ds.count == 9 && data_read(&ds, 8, &b, &label, &err) == 0 && label == 3 &&
	       b.len == 1 && b.p[0] == 'k',
	   "loaded through it");
	data_free(&ds);
	free(x.root);
	x.root = strdup("/elsewhere");
	di_write(&x, P("other.index"), NULL, &err);
	di_free(&x);
	is_int(data_load_imagefolder(&ds, P("root"), P("other.index"), NULL, &err), -1,
	       "an index of another root");
	snprintf(buf, sizeof(buf), "%s: an index of the image folder /elsewhere, not of %s (%s)",
		 P("other.index"), P("root"), abs);
	like(err.text, buf, "... is refused, saying so");
	put_text("bad.index", "dptrain-index 1\nkind imagefolder\n");
	is_int(data_load_imagefolder(&ds, P("root"), P("bad.index"), NULL, &err), -1,
	       "a truncated index");
	like(err.text, "bad.index: truncated: it ends after line 2 without its 'end' line",
	     "... names the file");
	like(err.text, "; re-create it: dptrain-data index ", "... and says what to do");
	free(b.p);
	free(abs);
}

static void shard_dir(uint32_t crc_x, uint32_t crc_y)
{
	char text[1024];
	uint8_t tar[3072] = {0};

	mkdir(P("sh"), 0755);
	memcpy(tar + 512, "hello", 5);
	memcpy(tar + 1536, "abc", 3);
	put_file("sh/shard-00000.tar", tar, sizeof(tar));
	snprintf(text, sizeof(text),
		 "dptrain-index 1\nkind shards\nroot /nowhere\nshards 1\nclasses 2\nclass a\n"
		 "class b\nsamples 2\n0\t0\t512\t5\t%08x\ta/x.jpg\n1\t0\t1536\t3\t%08x\tb/y.jpg\n",
		 crc_x, crc_y);
	put_text("sh/index", with_end(text));
}

static void test_shards(void)
{
	uint32_t cx = (uint32_t)crc32(0, (const Bytef *)"hello", 5);
	uint32_t cy = (uint32_t)crc32(0, (const Bytef *)"abc", 3);
	struct data_set ds;
	struct dp_error err;
	struct data_bytes b = {0};
	char buf[1024];
	int label;

	shard_dir(cx, cy);
	ok(data_load_shards(&ds, P("sh/"), &err) == 0, "shards loaded");
	ok(ds.encoded && ds.count == 2 && ds.num_classes == 2 && !strcmp(ds.class_names[1], "b") &&
	       !strcmp(ds.kind, "shards"),
	   "encoded, 2 samples, class names");
	is(ds.name, P("sh"), "named after the directory");
	ok(data_read(&ds, 1, &b, &label, &err) == 0 && b.len == 3 && !memcmp(b.p, "abc", 3) &&
	       label == 1,
	   "read: the member's bytes, its label");
	data_describe(&ds, 1, buf, sizeof(buf));
	is(buf, P("sh/shard-00000.tar: b/y.jpg"), "describe: DIR/shard-NNNNN.tar: PATH");
	{
		int fd = open(P("sh/shard-00000.tar"), O_WRONLY);
		if (fd < 0 || pwrite(fd, "X", 1, 1537) != 1)
			bail_out("pwrite");
		close(fd);
	}
	is_int(data_read(&ds, 1, &b, &label, &err), -1, "a damaged member");
	snprintf(buf, sizeof(buf),
		 "%s: b/y.jpg: CRC-32 mismatch (corrupt shard); dptrain-data verify %s lists "
		 "every damaged sample",
		 P("sh/shard-00000.tar"), P("sh"));
	is(err.text, buf, "... fails its CRC-32, naming shard and sample");
	ok(data_read(&ds, 0, &b, &label, &err) == 0 && b.len == 5, "the other still reads");
	data_free(&ds);

	shard_dir(cx, cy);
	if (truncate(P("sh/shard-00000.tar"), 1538) != 0)
		bail_out("truncate");
	is_int(data_load_shards(&ds, P("sh"), &err), -1, "a truncated shard");
	snprintf(buf, sizeof(buf),
		 "%s: truncated: 1538 bytes, but sample 1 (b/y.jpg) ends at byte 1539; re-run "
		 "dptrain-data pack /nowhere %s to repair",
		 P("sh/shard-00000.tar"), P("sh"));
	is(err.text, buf, "... is refused when loading, naming it and the first sample it lacks");
	unlink(P("sh/shard-00000.tar"));
	is_int(data_load_shards(&ds, P("sh"), &err), -1, "a missing shard");
	like(err.text, "sh/shard-00000.tar: No such file or directory; re-run dptrain-data pack",
	     "... says so");
	unlink(P("sh/index"));
	is_int(data_load_shards(&ds, P("sh"), &err), -1, "no index");
	like(err.text, "sh/index: No such file or directory (dptrain-data pack writes",
	     "... says the pack may not have finished");
	put_text("sh/index", with_end(folder_text));
	is_int(data_load_shards(&ds, P("sh"), &err), -1, "an image folder's index");
	like(err.text, "sh/index: the index of an image folder (/data/set), not of shards",
	     "... is refused");
	free(b.p);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/dptrain-index-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		bail_out("mkdtemp %s failed", dir);
	test_round_trip();
	test_malformed();
	test_names();
	test_scan();
	test_folder();
	test_shards();
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return done_testing();
}
