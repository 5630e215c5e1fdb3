/* store.h — the rendezvous store: a small key/value server run by rank 0 at
 * MASTER_ADDR:MASTER_PORT that every rank (rank 0 too) connects to, like PyTorch's TCPStore.
 * Owns the TCP protocol, its deadlines, and the job's liveness verdicts: which ranks did not
 * arrive, which rank died or stopped taking part. Knows nothing of tensors or collectives.
 *
 * Liveness. Every rank keeps its store connection open for the whole job and says goodbye in
 * store_close. When a connection drops without goodbye, the server tells every other rank
 * at once (an abort message naming the rank), so a dead rank is named within milliseconds
 * on every rank. A stalled rank is found by store_report_timeout: ranks that timed out in a
 * collective report it; after a short grace the server names the ranks that did not report
 * (they are not taking part) and tells everyone. */
#ifndef DPTRAIN_STORE_H
#define DPTRAIN_STORE_H

#include <stddef.h>

#define STORE_KEY_MAX 256
#define STORE_VALUE_MAX (16u << 20) /* one value; keys hold addresses, ids, small blobs */

struct store;

struct store_opts {
	const char *master_addr; /* host name or address of rank 0 */
	int master_port;	 /* rank 0 binds it on all addresses; others connect to it */
	int rank, world_size;
	const char *job;	 /* job identity (e.g. "1234.0"); a rank of another job on the
				    same port is refused by name. NULL: "" */
	const char *const *hosts; /* world_size host names for messages ("rank 2 (n1)"), or NULL */
	double timeout_s;	  /* rendezvous: connecting, waiting for all ranks */
};

/* Rank 0 starts the server (an error names the port in use and what to do) and every rank
 * connects, retrying until timeout_s; returns when every rank has connected (the first
 * barrier), or -1 naming the ranks that did not arrive / the unreachable master. */
int store_open(struct store **st, const struct store_opts *o, char *err, size_t errlen);

/* Key/value operations. get waits until the key exists (up to timeout_s). */
int store_set(struct store *st, const char *key, const void *val, size_t len, char *err,
	      size_t errlen);
int store_get(struct store *st, const char *key, void **val, size_t *len, double timeout_s,
	      char *err, size_t errlen); /* *val is malloc'd, NUL-terminated past len */
/* Adds delta to the integer under key (created as 0) and returns the new value. */
int store_add(struct store *st, const char *key, long delta, long *result, char *err,
	      size_t errlen);
/* Waits until every rank has entered the barrier called name; a timeout names the ranks
 * that did not arrive: "barrier NAME: 1 of 4 ranks did not arrive within 30 s: rank 2 (n1)". */
int store_barrier(struct store *st, const char *name, double timeout_s, char *err,
		  size_t errlen);

/* The connection's descriptor: readable when the server sent something unasked (an abort).
 * Collectives poll it beside their own sockets and then call store_poll_abort. */
int store_fd(const struct store *st);
/* 1 with the abort message in err if the job was aborted (now or before), 0 if not, waiting
 * up to wait_s for one to arrive. */
int store_poll_abort(struct store *st, double wait_s, char *err, size_t errlen);
/* Tell every rank this job is aborted with reason (e.g. "rank 1: loss is nan"). */
void store_abort(struct store *st, const char *reason);
/* This rank timed out in collective number seq (what: "allreduce", waiting for rank
 * `waiting_for`). Waits up to grace_s for the server's verdict and returns it in err: the
 * ranks that did not report, i.e. are not taking part (stalled, or elsewhere in the
 * program), or the first abort. Falls back to a message naming waiting_for. */
void store_report_timeout(struct store *st, unsigned long seq, const char *what,
			  int waiting_for, double timeout_s, double grace_s, char *err,
			  size_t errlen);

/* "rank 2 (n1)" for messages. */
const char *store_rank_name(const struct store *st, int rank, char *buf, size_t len);
int store_rank(const struct store *st);
int store_world_size(const struct store *st);
/* The local address of this rank's connection to rank 0: the interface peers reach it on. */
const char *store_local_addr(const struct store *st);

/* Goodbye. Rank 0 waits (up to timeout_s) for every other rank's goodbye before stopping
 * the server, so no rank loses the store while it still needs it. NULL is a no-op. */
void store_close(struct store *st, double timeout_s);

#endif
