/* alloc_source.h — what the allocation sources (alloc_pmix.c, alloc_env.c) share with
 * alloc.c. Internal to launcher/: the launcher and tests use alloc.h. */
#ifndef DPTRAIN_ALLOC_SOURCE_H
#define DPTRAIN_ALLOC_SOURCE_H

#include "common/error.h"
#include "launcher/alloc.h"

/* Each source fills world_size, rank, local_rank, local_size, node_rank, node_count, ranks[]
 * and master_addr/master_port where they are still empty/0 (alloc_discover presets them from
 * a user's MASTER_ADDR/MASTER_PORT). */
int alloc_pmix_present(void); /* built with PMIx and started by a PMIx server */
int alloc_from_pmix(struct alloc *a, const struct alloc_opts *o, struct dp_error *err);
int alloc_pmix_sync(struct alloc *a, int timeout_s, struct dp_error *err);
int alloc_pmix_gate(struct alloc *a, int timeout_s, struct dp_error *err);
void alloc_pmix_finish(struct alloc *a);
int alloc_pmix_abort(struct alloc *a, int status, const char *msg, struct dp_error *err);

int alloc_from_slurm(struct alloc *a, const struct alloc_opts *o, struct dp_error *err);
int alloc_from_env(struct alloc *a, const struct alloc_opts *o, struct dp_error *err);

/* This rank's GPU from its CUDA_VISIBLE_DEVICES. Unset means "all GPUs" to CUDA: the env source
 * (dptrain-run, torchrun-style) then counts the device nodes; under Slurm, unset means the step
 * asked for no GPU, and using one anyway would take another job's. */
int alloc_self_gpu(const struct alloc_opts *o, enum alloc_source src, int local_rank,
		   struct alloc_gpu *g, struct dp_error *err);

/* x's device_ip from hccn.conf (alloc_hccn_lookup), for the device its rank uses: the GPU's
 * physical index where the rank has one by index, else its local rank (the NPU nodes, with no
 * CUDA device). 0, or -1 with err. */
int alloc_self_device_ip(const struct alloc_opts *o, struct alloc_rank *x, struct dp_error *err);

/* The test hook: rank o->stall_rank sleeps o->stall_s seconds here. */
void alloc_stall(const struct alloc_opts *o, int rank, const char *where);

/* One rank's record as the ranks exchange it (PMIx, or the launcher's store without PMIx):
 * "2 host addr nodeid local_rank gpu gpus gpu_id|- device_ip|- port" (gpus: how many it sees;
 * device_ip: hccn.conf's); parse: 0, or -1 when malformed or of another version. */
#define ALLOC_RECORD_MAX 512
void alloc_record_format(char *buf, size_t len, const struct alloc_rank *x, int nodeid, int port);
int alloc_record_parse(const char *rec, struct alloc_rank *x, int *nodeid, int *port);

/* A Slurm node's address where its name does not resolve: its NodeAddr (SLURM_NODE_ALIASES,
 * else scontrol -o show node, within timeout_s), resolved if it is a name (nodeaddr.c). 0, or
 * -1 with err saying why. */
int alloc_node_addr(const char *node, char addr[RT_ADDR_MAX], int timeout_s, struct dp_error *err);

/* Write rt to path atomically (the dptrain schema): 1, or -1 with err. */
int alloc_table_write(const struct ranktable *rt, const char *path, struct dp_error *err);

/* The wire-up without PMIx (alloc_store.c): see there. */
int alloc_store_open(struct alloc *a, const struct alloc_opts *o, struct dp_error *err);
int alloc_store_gate(struct alloc *a, int timeout_s, struct dp_error *err);
int alloc_store_write_table(struct alloc *a, const struct ranktable *rt, const char *path,
			    int timeout_s, struct dp_error *err);
int alloc_store_sync(struct alloc *a, int timeout_s, struct dp_error *err);
void alloc_store_abort(struct alloc *a, const char *msg);
void alloc_store_finish(struct alloc *a, int timeout_s);

/* "2, 5-7, 9" for a sorted list of ranks, at most about len bytes ("... and N more"). */
void alloc_format_ranks(const int *ranks, int n, char *buf, size_t len);

#endif
