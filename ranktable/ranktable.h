/* ranktable.h — the rank table: what dptrain-launch writes for every job step and what the
 * trainer (and MindSpore/HCCL-style scripts) read. Build from an allocation description,
 * write atomically, read any of the three on-disk schemas, validate with JSON-path errors.
 * Must not depend on the trainer, Slurm or PMIx: plain C + jansson. */
#ifndef DPTRAIN_RANKTABLE_H
#define DPTRAIN_RANKTABLE_H

#include <stddef.h>

#define RT_HOST_MAX 256 /* a hostname or Slurm NodeName */
#define RT_ADDR_MAX 64  /* a textual IPv4/IPv6 address */
#define RT_ID_MAX   32  /* a job or step id */
#define RT_ERR_MAX  512

/* Which on-disk form a table was read from / is written as. */
enum rt_schema {
	RT_SCHEMA_DPTRAIN = 0, /* HCCL v1.0 + the "dptrain" object (what we write) */
	RT_SCHEMA_HCCL,	       /* hccl_tools.py v1.0: version/server_count/server_list */
	RT_SCHEMA_LEGACY,      /* MindSpore's older board_id/group_list/instance_list */
};

/* One rank. Fields a schema lacks are filled by the reader: host = server_id,
 * node_rank = index of the server in server_list order, local_rank = position within its
 * server, gpu = -1 (unknown). */
struct rt_rank {
	char host[RT_HOST_MAX];      /* hostname of the node (Slurm NodeName) */
	char server_id[RT_ADDR_MAX]; /* the node's address: HCCL server_id */
	char addr[RT_ADDR_MAX];      /* this rank's address: HCCL device_ip */
	int device_id;		     /* HCCL device_id: the local GPU, else the local rank */
	int node_rank;
	int local_rank;
	int gpu; /* CUDA device index as the rank sees it, -1 for none */
};

struct ranktable {
	enum rt_schema schema;
	int world_size;
	int node_count;
	char master_addr[RT_ADDR_MAX]; /* empty when the schema does not carry it */
	int master_port;	       /* 0 when unknown */
	char job_id[RT_ID_MAX];
	char step_id[RT_ID_MAX];
	struct rt_rank *ranks; /* world_size entries, indexed by rank id */
};

/* What the launcher knows about an allocation (pmix/'s struct alloc fills this). */
struct rt_alloc {
	int world_size;
	const char *master_addr;
	int master_port;
	const char *job_id;  /* may be NULL */
	const char *step_id; /* may be NULL */
	/* Per rank, indexed by rank: host and addr required; node_rank/local_rank as
	 * discovered; gpu -1 for none. device_id is derived (gpu, else local_rank). */
	const struct rt_alloc_rank {
		const char *host;
		const char *addr;
		int node_rank;
		int local_rank;
		int gpu;
	} *ranks;
};

/* Build a table from an allocation; validates it. 0 on success, -1 with err filled. */
int rt_build(struct ranktable *rt, const struct rt_alloc *a, char err[RT_ERR_MAX]);

/* Free what rt_build/rt_read/rt_parse allocated; leaves *rt zeroed. Safe on a zeroed table. */
void rt_free(struct ranktable *rt);

/* Check a table: ranks 0..N-1 each once, devices unique per server, sizes consistent,
 * addresses parseable. Errors name the JSON path of the dptrain schema. */
int rt_validate(const struct ranktable *rt, char err[RT_ERR_MAX]);

/* Parse a JSON text of any of the three schemas (autodetected); validates. `name` is used in
 * messages (a file path). Errors name the file and the JSON path, e.g.
 * "rank_table.json: server_list[1].device[0].rank_id: duplicate rank 3 (also at ...)". */
int rt_parse(struct ranktable *rt, const char *text, size_t len, const char *name,
	     char err[RT_ERR_MAX]);

/* Read and parse a file. */
int rt_read(struct ranktable *rt, const char *path, char err[RT_ERR_MAX]);

/* Serialise in the given schema; returns a malloc'd NUL-terminated string or NULL. */
char *rt_to_json(const struct ranktable *rt, enum rt_schema schema, char err[RT_ERR_MAX]);

/* Write atomically: temporary file in the same directory, fsync, rename, fsync directory.
 * Mode 0644. Readers never see a partial file. */
int rt_write_atomic(const struct ranktable *rt, const char *path, enum rt_schema schema,
		    char err[RT_ERR_MAX]);

const char *rt_schema_name(enum rt_schema s);
int rt_schema_from_name(const char *name, enum rt_schema *out);

#endif
