/* shards.h — a shard directory as `dptrain-data pack` writes it and data_shards.c reads it
 * (private to trainer/data and dptrain-data): the one spelling of its shards' file names
 * (data_shards.c), the tar layout of a shard, written by pack and checked by pack and verify,
 * and the pack itself (shard_write.c). The index's format is data_index.h's; loading a shard
 * directory as a data set is data.h's (data_load_shards). */
#ifndef DPTRAIN_SHARDS_H
#define DPTRAIN_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "trainer/data/data.h"
#include "trainer/data/data_index.h"

/* --- names (data_shards.c) ------------------------------------------------------------- */

/* Shard K's file name in its directory, for printf: every message and every path that names a
 * shard is made with it ("DIR/" SHARD_NAME ": sample" ...). */
#define SHARD_NAME "shard-%05u.tar"
/* What pack writes a shard as until it is checked and renamed into place. */
#define SHARD_PARTIAL_SUFFIX ".partial"
#define SHARD_NAME_MAX	     32 /* either name of the largest shard number, with its NUL */

/* "shard-00042.tar" for k 42, and "shard-00042.tar.partial". */
void shard_name(char out[SHARD_NAME_MAX], uint32_t k);
void shard_partial_name(char out[SHARD_NAME_MAX], uint32_t k);

/* What a file name in a shard directory is: a shard or a partial shard exactly as the two
 * functions above spell them, with its number in *k, or neither. */
enum shard_file { SHARD_FILE_OTHER, SHARD_FILE_SHARD, SHARD_FILE_PARTIAL };
enum shard_file shard_parse_name(const char *name, uint32_t *k);

/* --- the tar layout of a shard (shard_write.c) ---------------------------------------- */
/* Per sample: [a pax header and its data, when the path fits neither ustar's name nor its
 * prefix field] a ustar header, the file's bytes padded to a block; two zero blocks at the
 * end. Every field is fixed (mode 0644, owner 0, time 0), so the same folder packs to the
 * same bytes. */

#define SHARD_TAR_BLOCK	   512
#define SHARD_TAR_END	   (2 * SHARD_TAR_BLOCK) /* two zero blocks end an archive */
#define SHARD_HDR_MAX	   6144 /* pax header + its data + ustar header, for SHARD_NAME_LEN_MAX */
#define SHARD_NAME_LEN_MAX 4000 /* a member's path, bytes */
/* No image file is this large; the index's word is not taken for more. */
#define SHARD_MAX_MEMBER (1ull << 30)

/* n rounded up to whole blocks. */
uint64_t shard_tar_round(uint64_t n);

/* The header blocks before a member's data, into h (SHARD_HDR_MAX bytes); returns their
 * length. */
size_t shard_tar_headers(uint8_t *h, const char *name, uint64_t size);

/* CRC-32 (zlib's) of p[0..n), of any length: what the index keeps of each member. */
uint32_t shard_crc(const uint8_t *p, size_t n);

/* Sample i of the shard directory's index x, in its shard (open at fd, `size` bytes): NULL
 * when its ustar header and its CRC-32 are what pack wrote, with the member's bytes at
 * b->p + SHARD_TAR_BLOCK; else why (in `why`, or a constant). */
const char *shard_check_member(const struct di_index *x, size_t i, int fd, off_t size,
			       struct data_bytes *b, char *why, size_t wn);

/* The size pack gives each of the index's x->shards shards (its last member, then the end
 * blocks): a malloc'd array, 0 for a shard that holds no sample; NULL when out of memory. */
uint64_t *shard_sizes(const struct di_index *x);

/* --- pack (shard_write.c) --------------------------------------------------------------- */

struct shard_pack_opts {
	const char *root, *out; /* the image folder and the shard directory, as given */
	const char *index;	/* ROOT's listing from this index file (dptrain-data index), or NULL
				 * for a scan */
	uint64_t shard_size;	/* bytes a shard holds at most (one sample more if it is larger) */
	long long stop_after;	/* shards this run writes before it stops; -1: no limit */
	/* What pack says while it works (progress, warnings, the shards it keeps or writes
	 * again), a line at a time without its newline; NULL: nothing. */
	void (*say)(const char *line);
};

struct shard_pack_result {
	size_t count;	  /* samples */
	uint32_t nshards; /* shards of the whole pack */
	uint32_t kept;	  /* shards of an earlier run, checked against ROOT and kept */
	uint32_t wrote;	  /* shards this run wrote */
	uint64_t put;	  /* bytes this run wrote */
	double seconds;	  /* how long it took, from the first shard written */
};

/* Pack the image folder o->root into o->out: OUT/shard-00000.tar ... in sample order, each
 * written as a partial shard, synced, read back, checked and renamed into place, then
 * OUT/index. Resumable: an earlier pack's pack.state names the root, shard size and listing;
 * when they are this pack's, the shards it finished are checked against ROOT and kept, else
 * everything is packed anew. OUT is locked while pack writes in it, and refused when it holds
 * anything pack does not write or lies inside ROOT. 0 when packed; SHARD_PACK_STOPPED after
 * o->stop_after shards; -1 with err. */
#define SHARD_PACK_STOPPED 1
int shard_pack(const struct shard_pack_opts *o, struct shard_pack_result *res,
	       struct dp_error *err);

#endif
