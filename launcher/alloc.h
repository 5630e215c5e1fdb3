/* alloc.h — allocation discovery for dptrain-launch: who this rank is, who its peers are,
 * its GPU and the master endpoint, from PMIx, from SLURM_* or from torchrun-style variables.
 * Owns struct alloc and the helpers it needs (GPU choice, addresses, ports); must not write
 * files or touch the process environment beyond reading it (launcher/launcher.h does that). */
#ifndef DPTRAIN_ALLOC_H
#define DPTRAIN_ALLOC_H

#include <stddef.h>

#include <net/if.h>

#include "common/error.h"
#include "ranktable/ranktable.h"

#define ALLOC_GPU_ID_MAX 96   /* one CUDA_VISIBLE_DEVICES entry: an index, GPU-<uuid>, MIG-... */
#define ALLOC_GPU_MAX	 4096 /* most entries CUDA_VISIBLE_DEVICES may list */

/* Where the allocation came from. */
enum alloc_source {
	ALLOC_SRC_AUTO = 0, /* PMIx if present, else SLURM_*, else torchrun-style env */
	ALLOC_SRC_PMIX,
	ALLOC_SRC_SLURM,
	ALLOC_SRC_ENV,
};

/* The GPU one rank uses. */
struct alloc_gpu {
	int index; /* CUDA device index as the rank sees it (into its CUDA_VISIBLE_DEVICES), -1 */
	int count; /* devices visible to the rank */
	char id[ALLOC_GPU_ID_MAX]; /* the chosen CUDA_VISIBLE_DEVICES entry (a physical index or a
				      UUID); "" for none or unknown */
};

struct alloc_rank {
	char host[RT_HOST_MAX]; /* node name (Slurm NodeName); identifies the node */
	char addr[RT_ADDR_MAX]; /* the rank's interface address */
	int node_rank;
	int local_rank;
	struct alloc_gpu gpu;	     /* index -1 and id "" when unknown (peers without PMIx) */
	char device_ip[RT_ADDR_MAX]; /* its device's address from hccn.conf; "" for none */
};

struct alloc_pmix; /* an open PMIx session (alloc_pmix.c) */
struct store;	   /* the rendezvous store (store/store.h) */

struct alloc {
	enum alloc_source source;
	int world_size;
	int rank;
	int local_rank;
	int local_size;
	int node_rank;
	int node_count;
	char master_addr[RT_HOST_MAX]; /* an address, or a host name the user chose */
	int master_port;
	char job_id[RT_ID_MAX];
	char step_id[RT_ID_MAX];
	struct alloc_rank *ranks; /* world_size entries, indexed by rank; ranks[rank] is us */
	struct alloc_pmix *pmix;  /* open until alloc_finish, NULL otherwise */
	struct store *store;	  /* without PMIx (SLURM_*): the launcher's rendezvous store
				     (alloc_store.c), open until alloc_finish, NULL otherwise */
	int timeout_s;		  /* alloc_opts.timeout_s, for alloc_finish */
};

/* What the caller chooses. */
struct alloc_opts {
	enum alloc_source source;
	int timeout_s;	      /* every blocking step (fence, get, waiting for a file) */
	const char *iface;    /* interface for our address; NULL or "" = first non-loopback IPv4 */
	int allow_shared_gpu; /* two ranks of a node on one GPU is an error unless set */
	int verbose;
	int stall_rank; /* test hook DPTRAIN_TEST_STALL_RANK: this rank sleeps before it joins */
	int stall_s;	/* ... for this long (the watchdog or Slurm ends it first) */
	const char *dev_dir;   /* where GPU device nodes are counted when CUDA_VISIBLE_DEVICES is
				  unset (env source only); NULL = /dev */
	const char *hccn_conf; /* the node's NPU addresses (address_N=IP); NULL = /etc/hccn.conf,
				  which may be absent; a file named here must exist */
};

/* Discover the allocation. With PMIx this initialises PMIx, exchanges every rank's host,
 * address, node rank, local rank and GPU in one fence, and leaves the session open for
 * alloc_sync(); a timeout names the ranks that did not arrive. 0 on success, -1 with err. */
int alloc_discover(struct alloc *a, const struct alloc_opts *o, struct dp_error *err);

/* Where the ranks meet after alloc_discover (with PMIx they have: the fence). With the SLURM_*
 * source the launchers open a store at the master endpoint (rank 0 runs it) and exchange
 * their records, so every node's table writer knows every rank's address and GPU
 * (alloc_store.c); with the env source nothing. 0, or -1 with err (e.g. naming the ranks that
 * did not arrive, or the unreachable master). */
int alloc_meet(struct alloc *a, const struct alloc_opts *o, struct dp_error *err);

/* The first meeting point after discovery: no rank passes it before rank 0 has checked and
 * locked the output directory (if rank 0 cannot, it ends the step), so no rank writes into a
 * directory another job is using. With PMIx a fence and a value of rank 0; with the SLURM_*
 * source a value in the launcher's store; with the env source (dptrain-run, which holds the
 * lock itself, or torchrun) there is no channel: 0 at once. */
int alloc_gate(struct alloc *a, int timeout_s, struct dp_error *err);

/* Write the rank table `rt` to `path` as this rank's part: with PMIx every node's local rank 0
 * (each has the whole table: a shared directory gets the same bytes from each); with the
 * SLURM_* source rank 0, then every other node's local rank 0 where the file does not already
 * hold that table (one writer per file); else local rank 0. 1 when this rank wrote it, 0 when
 * not, -1 with err. */
int alloc_write_table(struct alloc *a, const struct ranktable *rt, const char *path,
		      struct dp_error *err);

/* The second meeting point, after the rank tables are written (alloc_write_table): with PMIx
 * a fence, with the SLURM_* source a barrier in the store (so no rank execs before its node's
 * table exists); with the env source the other local ranks wait, up to timeout_s, until the
 * file holds the table they expect (`expect`). 0 on success, -1 with err naming who did not
 * arrive. */
int alloc_sync(struct alloc *a, const char *rank_table, const struct ranktable *expect,
	       int timeout_s, struct dp_error *err);

/* Close the PMIx session (PMIx_Finalize) or the store if one is open. Call before exec; on an
 * error path call alloc_abort instead. */
void alloc_finish(struct alloc *a);

/* End the whole step (PMIx_Abort: Slurm then kills every task of it, on every node, as
 * srun -K would; with the store open, every rank is told at once and fails naming this one):
 * on an error path, so peers stuck in a fence or a collective end now instead of at their own
 * timeout. With a->pmix NULL (no session open) a session is opened for it
 * (PMIx_Init as this task's rank), as the plugin's watcher does after a rank's command
 * failed. 0 when PMIx took the request, or -1 with err (no PMIx here: nothing to end). */
int alloc_abort(struct alloc *a, int status, const char *msg, struct dp_error *err);

/* Free the rank array; leaves *a zeroed. Does not finalize PMIx. */
void alloc_free(struct alloc *a);

/* Build the rank table of this allocation (rt_build). 0 or -1 with err. */
int alloc_rank_table(const struct alloc *a, struct ranktable *rt, struct dp_error *err);

/* What a script that calls torch.cuda.set_device(LOCAL_RANK) needs to know: in `self`, when
 * this rank's LOCAL_RANK is not its device index (it sees fewer GPUs, as under
 * --gpus-per-task); on rank 0 in `all`, which ranks that holds for. "" where all is well.
 * Reads CUDA_VISIBLE_DEVICES for the message. -1 only when out of memory. */
int alloc_gpu_advice(const struct alloc *a, char *self, size_t self_len, char *all, size_t all_len);

/* Two ranks of one node on the same physical GPU: -1 with a message naming them and the
 * GPU, unless allowed. Ranks whose GPU is unknown are not compared. */
int alloc_check_shared_gpu(const struct alloc *a, int allow, struct dp_error *err);

const char *alloc_source_name(enum alloc_source s);
/* "pmix", "slurm", "env", "auto" (or ""); -1 for anything else. */
int alloc_source_from_name(const char *name, enum alloc_source *out);

/* --- GPU (gpu.c) ---------------------------------------------------------------------- */

/* Choose the GPU of a rank from its CUDA_VISIBLE_DEVICES (not NULL): one entry -> it; several
 * -> local_rank modulo their count; "", "NoDevFiles" or "-1" -> none (index -1). Entries are
 * indices or GPU-/MIG- UUIDs; blanks, empty entries, duplicates and anything else are errors
 * naming the variable. */
int alloc_gpu_select(const char *cvd, int local_rank, struct alloc_gpu *g, struct dp_error *err);

/* GPU device nodes (nvidia0, nvidia1, ...) in dev_dir: how many GPUs a process sees when
 * nobody set CUDA_VISIBLE_DEVICES. */
int alloc_gpu_count_devices(const char *dev_dir);

/* --- NPU addresses (hccn.c) ------------------------------------------------------------ */

/* The address of NPU `device` from hccn.conf at path (NULL or "": /etc/hccn.conf): 1 with it
 * in out; 0 when the default file does not exist (no NPUs: HCCL's device_ip is then the host
 * address); -1 with err naming the file (and line) when a named file is missing, a line is
 * malformed, or the device has no address_N line. */
int alloc_hccn_lookup(const char *path, int device, char out[RT_ADDR_MAX], struct dp_error *err);

/* --- addresses and ports (netaddr.c, port.c) ------------------------------------------ */

/* The address of `iface` (IPv4, else a non-link-local IPv6), or with iface NULL/"" the first
 * non-loopback IPv4 of an interface that is up, else 127.0.0.1. */
int alloc_iface_addr(const char *iface, char addr[RT_ADDR_MAX], struct dp_error *err);
/* The interface that holds addr (as alloc_iface_addr writes it): 1 with its name, 0 when no
 * interface of this node has it, -1 when the interfaces cannot be listed. */
int alloc_addr_iface(const char *addr, char name[IF_NAMESIZE]);

/* This node's name: PMIx/Slurm's when known (SLURMD_NODENAME), else gethostname(). */
void alloc_hostname(char host[RT_HOST_MAX]);

/* Parse a port number "1".."65535" (what names the variable in the message). */
int alloc_port_parse(const char *s, const char *what, int *port, struct dp_error *err);

/* A free TCP port on addr: bind port 0, read it back, close. Another program may take it
 * before the trainer binds it; the window is short and the trainer reports a clash. */
int alloc_port_pick(const char *addr, int *port, struct dp_error *err);
/* The same, but the port stays held by *fd until it is closed: bound with SO_REUSEADDR and
 * close-on-exec, never listening, so the kernel gives it to no other socket while rank 0
 * starts, and rank 0's store (which sets SO_REUSEADDR too) can still bind it and listen. For
 * a picker that outlives the ranks' start (dptrain-run). */
int alloc_port_hold(const char *addr, int *port, int *fd, struct dp_error *err);

/* MASTER_ADDR / MASTER_PORT set by the user: 1 and the value when set, 0 when unset, -1 when
 * set but unusable (err says why). */
int alloc_user_master_addr(char addr[RT_HOST_MAX], struct dp_error *err);
int alloc_user_master_port(int *port, struct dp_error *err);

/* Job and step id for %j/%s and the rank table: DPTRAIN_JOB_ID, else SLURM_JOB_ID, else
 * "local"; DPTRAIN_STEP_ID, else SLURM_STEP_ID, else "0". */
void alloc_job_ids(char job[RT_ID_MAX], char step[RT_ID_MAX]);

#endif
