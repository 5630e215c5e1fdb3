/* data_index.h — the index of an image folder or of a shard directory (private to trainer/data
 * and dptrain-data): its text format (doc/dptrain-data.1), read with every line checked and
 * written atomically, and the scan of a torchvision ImageFolder that makes one. Knows nothing
 * of tar, image decoding or the data_set interface.
 *
 * The file:
 *   dptrain-index 1
 *   kind imagefolder | kind shards
 *   root /absolute/path/of/the/folder
 *   shards K                                     (kind shards only)
 *   classes N
 *   class NAME                                   (N lines, sorted by strcmp, unique)
 *   samples M
 *   LABEL \t SIZE \t PATH                        (imagefolder: M lines)
 *   LABEL \t SHARD \t OFFSET \t SIZE \t CRC32 \t PATH   (shards: M lines)
 *   end CRC32                                    (of every byte before this line)
 * PATH is relative to the root and starts with its class's folder. */
#ifndef DPTRAIN_DATA_INDEX_H
#define DPTRAIN_DATA_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "common/error.h"

#define DI_MAGIC "dptrain-index 1"

enum di_kind { DI_FOLDER, DI_SHARDS };

struct di_sample {
	uint64_t offset; /* shards: where the member's data starts in its shard */
	uint64_t size;	 /* bytes of the image file */
	uint32_t name;	 /* its path relative to the root: di_name() */
	uint32_t label;
	uint32_t shard; /* shards: the sample is in shard-<shard>.tar */
	uint32_t crc;	/* shards: CRC-32 (zlib's) of its bytes */
};

struct di_index {
	enum di_kind kind;
	char *root; /* absolute */
	uint32_t shards;
	int num_classes;
	char **classes;
	size_t count, cap;
	struct di_sample *s;
	char *names; /* every path, NUL-terminated, back to back */
	size_t names_len, names_cap;
};

static inline const char *di_name(const struct di_index *x, size_t i)
{
	return x->names + x->s[i].name;
}

/* The imagefolder and shards data sets (data_folder.c, data_shards.c) keep their index as the
 * first member of ds->priv: dptrain-data lists the paths from it. Their class names have gone
 * to ds->class_names (classes is NULL here). */
static inline const struct di_index *di_of_set(const void *priv)
{
	return priv;
}

/* Release everything; leaves *x zeroed (a zeroed index is empty and safe to free). */
void di_free(struct di_index *x);

/* Building one: the root (copied), a class name (copied; in sorted order), a sample (its
 * name copied; s->name is set here). A name with a tab or newline is refused, naming it. */
int di_set_root(struct di_index *x, const char *root, struct dp_error *err);
int di_add_class(struct di_index *x, const char *name, struct dp_error *err);
int di_add_sample(struct di_index *x, const struct di_sample *s, const char *name,
		  struct dp_error *err);

/* Parse an index held in buf[0..len); `path` names it in messages: "PATH:LINE: ...". */
int di_parse(struct di_index *x, const char *path, const char *buf, size_t len,
	     struct dp_error *err);
int di_read(struct di_index *x, const char *path, struct dp_error *err);

/* The text of x (malloc'd, *len bytes, not NUL-terminated). */
int di_format(const struct di_index *x, char **text, size_t *len, struct dp_error *err);

/* Write x to path atomically (temporary, fsync, rename); mtime, when not NULL, is given to the
 * file before it is renamed into place. */
int di_write(const struct di_index *x, const char *path, const struct timespec *mtime,
	     struct dp_error *err);

/* List the image folder at root as torchvision's ImageFolder does (data.h): x->root is its
 * realpath. Files skipped because dptrain does not decode their format (.bmp, .tif, ...) and
 * symbolic-link loops are not errors: warn->text then says what was skipped, in one line
 * (else it is ""). Errors: root missing or not a folder, no class folders, a class without
 * images, an unreadable folder, a name an index cannot hold, a dangling link to an image. */
int di_scan(struct di_index *x, const char *root, struct dp_error *warn, struct dp_error *err);

/* Is `name` kept (.jpg .jpeg .png, any case)? 1: kept; -1: an image format torchvision keeps
 * and dptrain does not decode; 0: not an image. */
int di_image_ext(const char *name);

/* 64-bit FNV-1a of a string. */
uint64_t di_fnv1a64(const char *s);

/* CACHE_DIR/imagefolder-<16 hex digits of di_fnv1a64(abs_root)>.index; -1 if it does not
 * fit in n bytes. */
int di_cache_path(char *buf, size_t n, const char *cache_dir, const char *abs_root);

#endif
