/* comm_shm.h — the node half of the CPU engine (comm_cpu.c): the ranks of one node reduce,
 * gather and broadcast through one shared-memory segment. Private to trainer/dist (comm_cpu.c)
 * and its tests; knows the store only for the failure path, nothing of the TCP ring.
 *
 * The segment. The node's first rank (its lowest global rank, the leader) makes it with
 * memfd_create: an anonymous file that no directory names (nothing in /dev/shm, ever), owned
 * by the job's user, mode 0600, sealed against growing and shrinking. It hands the descriptor
 * to each other rank of the node over a Unix socket in the abstract namespace (gone when
 * closed or when its process dies), whose name is an HMAC of the step's secret and a nonce
 * the leader publishes in the store; both sides check the peer's uid (SO_PEERCRED) and prove
 * the secret to each other (HMAC challenge and response: the secret never crosses) before the
 * descriptor is sent (SCM_RIGHTS). Once every rank of the node has it, the socket closes. The
 * memory lives as long as one rank maps it, and goes with the last one, however it ends
 * (SIGKILL included): there is nothing to clean up and nothing to leak.
 *
 * The header (struct shm_header) carries a magic, a version, the layout and an HMAC of all of
 * them under the step's secret, which every rank checks before using a segment: a corrupted
 * one, another step's, another dptrain version's is refused, naming which.
 *
 * A buffer group (shm_node.user_bytes) is a second segment made and handed over the same way,
 * holding one buffer per local rank instead of the slices: the comm's shared buffer
 * (comm.h shared_alloc), which DDP keeps its gradients in and which shm_reduce_shared
 * reduces in place (on several nodes: into the leader's buffer, which the ring between the
 * nodes' leaders reduces and shm_bcast_shared hands back). */
#ifndef DPTRAIN_COMM_SHM_H
#define DPTRAIN_COMM_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "common/error.h"
#include "common/hmac.h"
#include "trainer/dist/comm.h"

struct store;
struct shm_group;

/* What a wait consults besides the segment, kept by comm_cpu.c: the store (its verdicts, the
 * roll call, the report of a timeout), the comm's abort flag, the operation in progress. */
struct shm_ctl {
	struct store *st;
	const atomic_int *aborted;
	const char *op;
	unsigned long seq;
	double timeout_s, grace_s;
};

/* This rank's node as comm_cpu.c found it in the store. */
struct shm_node {
	int world;	    /* the job's ranks */
	int nlocal, local;  /* the node's ranks, this rank's index among them */
	const int *ranks;   /* their nlocal global ranks, ascending: ranks[0] leads */
	int node;	    /* the node's index (nodes numbered by their lowest rank) */
	long gen;	    /* the comm's generation (comm_cpu.c: the same on every rank) */
	size_t slice_bytes; /* pipelining unit; 0: SHM_SLICE_DEFAULT (within the budget) */
	size_t stream_min;  /* outputs this large are written with streaming stores; 0: 3/4 of
			       the last-level cache (comm_shm.c) */
	size_t user_bytes;  /* > 0: a buffer group (shm_buffer): the segment holds one buffer of
			       this many bytes per local rank instead of the slices */
};

/* A wait ended by this comm's abort (comm_cpu.c words the message). */
#define SHM_ABORTED (-2)

/* Collective over the node's ranks: the leader makes the segment, the others attach; returns
 * when every rank of the node has attached. Within ctl->timeout_s. */
int shm_create(struct shm_group **g, struct shm_ctl *ctl, const struct shm_node *nd,
	       struct dp_error *err);
void shm_destroy(struct shm_group *g);
/* From any thread of this rank: its waits wake now (and find the abort flag). */
void shm_wake(struct shm_group *g);

/* Who adds what in which order (see comm_cpu.c, "Reduction order"). */
enum shm_order {
	SHM_ORDER_ASCENDING, /* every element: ((x[r0] + x[r1]) + ...) over the node's ranks */
	SHM_ORDER_RING,	     /* the TCP ring's, for a node that holds every rank: element i of
				ring block b is ((x[b+1] + x[b+2]) + ...) + x[b] */
};

/* Every operation: 0, -1 with err holding the failure (a verdict of the store, a timeout's
 * report), or SHM_ABORTED. Every rank of the node calls the same ones with the same counts.
 *
 * The node's sum of in (count elements on each rank), divided by div when div > 1, into out:
 * on every rank of the node, or only on the leader when to_leader (out unused elsewhere). out
 * may be in. */
int shm_reduce(struct shm_group *g, const void *in, void *out, size_t count, enum comm_dtype t,
	       int div, enum shm_order order, int to_leader, struct dp_error *err);
/* For a node that holds every rank: out (count) is block `local` of in (count * nlocal) summed
 * over the ranks in the ring's order, divided by div when div > 1. out may be in's block. */
int shm_reduce_scatter(struct shm_group *g, const void *in, void *out, size_t count,
		       enum comm_dtype t, int div, struct dp_error *err);
/* out (count * nlocal) holds every local rank's in at its index; in may be out's block. */
int shm_allgather(struct shm_group *g, const void *in, void *out, size_t count, enum comm_dtype t,
		  struct dp_error *err);
/* bytes from root's src to every other rank's dst (NULL: this rank takes no part of it). */
int shm_bcast(struct shm_group *g, const void *src, void *dst, size_t bytes, int root,
	      struct dp_error *err);
int shm_barrier(struct shm_group *g, struct dp_error *err);

/* A buffer group (made with nd->user_bytes): this rank's buffer, user_bytes long, which every
 * rank of the node maps; NULL for a group of slices. */
void *shm_buffer(struct shm_group *g);
/* On a buffer group, in place: elements [off, off + count) of every local rank's buffer
 * (off in bytes, the same on every rank) summed in the order given, divided by div when
 * div > 1, into every rank's buffer, or only into the leader's (local rank 0) when to_leader.
 * Each rank sums one block (the ring's block of its index) reading the others' buffers where
 * they are and writes the sum into every buffer (the leader's): the bytes are read once and
 * written once, where shm_reduce copies them in and out of its slices. A rank's buffer is the
 * others' to read and write from its call until every rank has returned (the call returns
 * only then). */
int shm_reduce_shared(struct shm_group *g, size_t off, size_t count, enum comm_dtype t, int div,
		      enum shm_order order, int to_leader, struct dp_error *err);
/* On a buffer group: bytes [off, off + bytes) of the leader's buffer into every other local
 * rank's, each rank (the leader too) copying its share of them into all of them; every rank
 * returns once every copy is done. */
int shm_bcast_shared(struct shm_group *g, size_t off, size_t bytes, struct dp_error *err);

/* The segment's header and its check (also for the tests). */
#define SHM_MAGIC   0x64707368u /* "dpsh" */
#define SHM_VERSION 2u		/* 2: buffer groups (shm_layout.user) */

struct shm_layout {
	uint32_t world, nlocal, node, leader;
	uint64_t gen, slice, depth, size;
	uint64_t user; /* a buffer group's bytes per rank (page-rounded); 0: slices */
};

struct shm_header {
	uint32_t magic, version;
	struct shm_layout l;
	unsigned char tag[DP_SHA256_LEN]; /* HMAC(secret, label || magic || version || l) */
};

/* The layout every rank of node nd computes alike (the tests play a leader with it). */
void shm_layout_of(const struct shm_node *nd, struct shm_layout *l);
void shm_header_make(struct shm_header *h, const char *secret, const struct shm_layout *l);
/* 0 if h is a segment of this dptrain, made with this secret, laid out as want (of size
 * bytes); else -1 with err saying what is wrong ("made by" names who handed it over). */
int shm_header_check(const struct shm_header *h, size_t bytes, const char *secret,
		     const struct shm_layout *want, const char *made_by, struct dp_error *err);

/* The handshake at the leader's socket (also for the tests, which play a leader or a stranger):
 * its name, and the MAC of a hello or a welcome between the nonces nl and nf for rank. */
#define SHM_NONCE	  16
#define SHM_HELLO_MAGIC	  0x64707368u
#define SHM_SOCKET_LABEL  "dptrain shm socket v1"
#define SHM_HELLO_LABEL	  "dptrain shm hello v1"
#define SHM_WELCOME_LABEL "dptrain shm welcome v1"
struct sockaddr_un;
void shm_sock_name(const char *secret, const unsigned char *nonce, const struct shm_layout *l,
		   struct sockaddr_un *a, unsigned *len);
/* Send len bytes of buf and the descriptor fd in one message on sock (MSG_NOSIGNAL | flags);
 * sendmsg's result. */
ssize_t shm_send_fd(int sock, const void *buf, size_t len, int fd, int flags);
void shm_hello_mac(const char *secret, const char *label, size_t label_len, const unsigned char *nl,
		   const unsigned char *nf, uint32_t rank, const struct shm_layout *l,
		   unsigned char out[DP_SHA256_LEN]);

#endif
