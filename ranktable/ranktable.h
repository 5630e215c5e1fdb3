/* ranktable.h — the rank table: what dptrain-launch writes for every job step and what the
 * trainer (and MindSpore/HCCL-style scripts) read. Build from an allocation description,
 * write atomically, read any of the three on-disk schemas, validate with JSON-path errors.
 * Must not depend on the trainer, Slurm or PMIx: plain C + jansson. */
#ifndef DPTRAIN_RANKTABLE_H
#define DPTRAIN_RANKTABLE_H

#include <stddef.h>
#include "common/error.h"

#define RT_HOST_MAX  256	/* a hostname or Slurm NodeName */
#define RT_ADDR_MAX  64		/* a textual IPv4/IPv6 address */
#define RT_ID_MAX    32		/* a job or step id */
#define RT_USED_MAX  512	/* rt_from_env's line saying what it read */
#define RT_WORLD_MAX (1 << 20)	/* most ranks in a table: bounds what bad input can allocate */
#define RT_FILE_MAX  (1L << 30) /* largest rank-table file read: ~100 bytes per rank at most */

/* Which on-disk form a table was read from / is written as. */
enum rt_schema {
	RT_SCHEMA_DPTRAIN = 0, /* HCCL v1.0 + the "dptrain" object (what we write) */
	RT_SCHEMA_HCCL,	       /* hccl_tools.py v1.0: version/server_count/server_list */
	RT_SCHEMA_LEGACY,      /* MindSpore's older board_id/group_list/instance_list */
};

/* One rank. Fields a schema lacks are filled by the reader: host = server_id,
 * node_rank = index of the server in server_list order (legacy: of its server_id in order of
 * first appearance), local_rank = position among its server's ranks in rank order,
 * gpu = -1 (unknown). */
struct rt_rank {
	char host[RT_HOST_MAX];	     /* hostname of the node (Slurm NodeName) */
	char server_id[RT_ADDR_MAX]; /* the node's address: HCCL server_id */
	char addr[RT_ADDR_MAX];	     /* this rank's address: HCCL device_ip */
	int device_id;		     /* HCCL device_id: the local GPU, else the local rank */
	int node_rank;
	int local_rank;
	int gpu; /* CUDA device index as the rank sees it, -1 for none */
};

struct ranktable {
	enum rt_schema schema;
	int world_size;
	int node_count;
	char master_addr[RT_HOST_MAX]; /* an address or a host name; empty when the schema does
					* not carry it */
	int master_port;	       /* 0 when unknown */
	char job_id[RT_ID_MAX];
	char step_id[RT_ID_MAX];
	struct rt_rank *ranks; /* world_size entries, indexed by rank id */
};

/* What the launcher knows about an allocation (launcher/'s struct alloc fills this). */
struct rt_alloc {
	int world_size;
	const char *master_addr; /* may be NULL or "" (unknown); an address or a host name */
	int master_port;	 /* 0 when unknown */
	const char *job_id;	 /* may be NULL */
	const char *step_id;	 /* may be NULL */
	/* Per rank, indexed by rank: host and addr required; node_rank/local_rank as
	 * discovered; gpu -1 for none. device_id is derived: the GPU where every rank of the
	 * node has a GPU of its own, else the local rank (HCCL needs it unique per server). */
	const struct rt_alloc_rank {
		const char *host;
		const char *addr; /* the rank's host address (its node's server_id) */
		int node_rank;
		int local_rank;
		int gpu;
		const char *device_ip; /* HCCL's device_ip (hccn.conf); NULL or "": addr */
	} * ranks;
};

/* Build a table from an allocation; validates it. 0 on success, -1 with err filled. */
int rt_build(struct ranktable *rt, const struct rt_alloc *a, struct dp_error *err);

/* Free what rt_build/rt_read/rt_parse allocated; leaves *rt zeroed. Safe on a zeroed table. */
void rt_free(struct ranktable *rt);

/* Check a table: ranks 0..N-1 each once, devices unique per server, sizes consistent,
 * addresses parseable. Errors name the JSON path of the dptrain schema. */
int rt_validate(const struct ranktable *rt, struct dp_error *err);

/* Parse a JSON text of any of the three schemas (autodetected); validates. `name` is used in
 * messages (a file path). Errors name the file and the JSON path, e.g.
 * "rank_table.json: server_list[1].device[0].rank_id: rank 3 appears twice (also at ...)". */
int rt_parse(struct ranktable *rt, const char *text, size_t len, const char *name,
	     struct dp_error *err);

/* Read and parse a file. */
int rt_read(struct ranktable *rt, const char *path, struct dp_error *err);

/* Serialise in the given schema; returns a malloc'd NUL-terminated string or NULL. */
char *rt_to_json(const struct ranktable *rt, enum rt_schema schema, struct dp_error *err);

/* Write atomically: temporary file in the same directory, fsync, rename, fsync directory,
 * with the given mode (the launcher's table is 0600: it names the master port before the
 * command has bound it, and only the job's user may know it). Readers never see a partial
 * file. */
int rt_write_atomic(const struct ranktable *rt, const char *path, enum rt_schema schema,
		    unsigned mode, struct dp_error *err);

/* "dptrain", "hccl", "legacy"; rt_schema_from_name returns -1 for any other name. */
const char *rt_schema_name(enum rt_schema s);
int rt_schema_from_name(const char *name, enum rt_schema *out);

/* Compare two tables on what `carried` can hold: everything for RT_SCHEMA_DPTRAIN; world size,
 * nodes and per rank server_id, addr, device_id, node_rank for the other two (what a reader
 * derives is not compared). 0 when equal, else 1 with the first difference in diff. */
int rt_compare(const struct ranktable *a, const struct ranktable *b, enum rt_schema carried,
	       struct dp_error *diff);

/* A host's address as text: the name itself when it is an IPv4/IPv6 literal, else the first
 * IPv4 (then IPv6) address getaddrinfo gives. -1 with an error naming the host. */
int rt_resolve_host(const char *host, char addr[RT_ADDR_MAX], struct dp_error *err);

/* The master port used when nobody chose one (no PMIx): in 61000..65499, above Linux's
 * default ephemeral range, the same on every rank. With the step's secret (secret non-empty:
 * DPTRAIN_STORE_SECRET, which srun --dptrain gives every task) a hash of job, step and secret,
 * so another user cannot tell the port in advance and take it; without one, derived from job
 * and step id alone (numeric prefixes; anything else counts as 0), so concurrent steps on one
 * node rarely collide. */
int rt_default_port(const char *job_id, const char *step_id, const char *secret);

/* The threads one rank's compute should use: SLURM_CPUS_PER_TASK (what Slurm gave the
 * task), else SLURM_CPUS_ON_NODE (the job's CPUs on this node) shared by the node's
 * local_ranks, else this process's CPUs shared likewise; never more than the CPUs the
 * process may run on, at least 1. 0, or -1 with err for a malformed variable. */
int rt_task_threads(int local_ranks, int *threads, struct dp_error *err);

/* Where Slurm put every rank, from the node-level part of SLURM_DISTRIBUTION (block when
 * unset, cyclic, plane=N) and the tasks per node: node_of[r], local_of[r] for world ranks.
 * -1 with err for a distribution whose layout cannot be derived (arbitrary). */
int rt_slurm_layout(const char *dist, int nnodes, const int *counts, int world, int *node_of,
		    int *local_of, struct dp_error *err);

/* Build a table from the environment of a job step (what `dptrain-ranktable from-env` does):
 * RT_ENV_SLURM: SLURM_STEP_NODELIST/SLURM_JOB_NODELIST, SLURM_STEP_TASKS_PER_NODE/
 * SLURM_TASKS_PER_NODE, SLURM_STEP_NUM_TASKS/SLURM_NTASKS, SLURM_JOB_ID, SLURM_STEP_ID,
 * SLURM_DISTRIBUTION (rt_slurm_layout; all as common/slurm_step.h reads them, with its
 * fallbacks), hosts resolved with rt_resolve_host; RT_ENV_TORCHRUN:
 * WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT on this one host; RT_ENV_AUTO: Slurm when
 * a node list is set, else torchrun-style when WORLD_SIZE is. MASTER_ADDR/MASTER_PORT, when set,
 * win in both. `used` says which variables were read. */
enum rt_env_source { RT_ENV_AUTO = 0, RT_ENV_SLURM, RT_ENV_TORCHRUN };
int rt_from_env(struct ranktable *rt, enum rt_env_source source, char used[RT_USED_MAX],
		struct dp_error *err);

#endif
