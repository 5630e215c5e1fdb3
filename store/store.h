/* store.h — the rendezvous store: a small key/value server run by rank 0 at
 * MASTER_ADDR:MASTER_PORT that every rank (rank 0 too) connects to, like PyTorch's TCPStore.
 * Owns the TCP protocol, its deadlines, and the job's liveness verdicts: which ranks did not
 * arrive, which rank died or stopped taking part. Knows nothing of tensors or collectives.
 *
 * Liveness. Every rank keeps its store connection open for the whole job and says goodbye in
 * store_close. When a connection drops without goodbye, the server tells every other rank
 * at once (an abort message naming the rank), so a dead rank is named within milliseconds
 * on every rank. A stalled rank is found by store_report_timeout: the first rank that times
 * out in a collective reports it, and the server asks every other rank to report at once if
 * it is waiting in a collective too (a roll call, store_rollcall); after a short grace it
 * names the ranks that did not report (they are not taking part) and tells everyone. So the
 * verdict does not depend on whose timer fires first, only on who answers.
 *
 * The rendezvous is judged by the server too: it closes rank 0's timeout_s after the server
 * started, and every rank that arrived is told the same verdict naming the ranks that did
 * not; a rank's own timeout_s only bounds how long it tries to reach the server.
 *
 * Strangers. With the job's secret, a connection is a rank only once it proved that it knows
 * the secret, and the store proves it too before a rank believes it: a challenge-response
 * (store_wire.h) in which the secret never crosses the wire, so neither someone on the path
 * nor a program squatting on MASTER_PORT learns it. Until its proof, a connection costs rank
 * 0 a few KiB and a descriptor, for at most 10 s, and only so many wait at once: a flood of
 * them cannot take rank 0's memory or descriptors, nor lock the job's ranks out. */
#ifndef DPTRAIN_STORE_H
#define DPTRAIN_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include "common/error.h"

#define STORE_KEY_MAX	256
#define STORE_VALUE_MAX (16u << 20) /* one value; keys hold addresses, ids, small blobs */
#define STORE_JOB_MAX	256	    /* a job identity, with its NUL */

struct store;

struct store_opts {
	const char *master_addr; /* host name or address of rank 0 */
	int master_port;	 /* rank 0 binds it on master_addr if that is an IP address of
				    its host, else on all addresses; others connect to it */
	int rank, world_size;
	const char *job;    /* job identity (e.g. "1234.0", shorter than STORE_JOB_MAX); a
			       rank of another job on the same port is refused by name. NULL: "" */
	const char *secret; /* the job's secret (DPTRAIN_STORE_SECRET, which the launcher makes
			       per step): rank 0's server refuses, and logs, a connection that
			       cannot prove it knows it, telling it nothing about the job, and a
			       rank refuses a store that cannot prove it; the collectives' ring
			       proves it too. It is never sent. NULL or "": none (anyone who
			       reaches the port may join, as with torchrun's TCPStore; rank 0
			       warns once) */
	const char *const *hosts; /* world_size host names for messages ("rank 2 (n1)"), or NULL */
	double timeout_s;	  /* rendezvous (0: 300): how long a rank tries to connect; rank
				     0's also how long the rendezvous stays open */
	const atomic_int *stop;	  /* set (by another thread) when the rank is asked to stop:
				     store_open's waits end at once; NULL: never */
};

/* Rank 0 starts the server (an error names the port in use and what to do) and every rank
 * connects, retrying until timeout_s, and proves it is one of the job's ranks (a store that
 * cannot prove it is the job's is refused: "not this job's store"; one of another dptrain
 * version is named with both versions); returns when every rank has connected (the first
 * barrier), or -1 naming the ranks that did not arrive / the unreachable master. Whether a
 * rank arrived is rank 0's verdict, given to every rank that connected when rank 0's
 * timeout_s has passed: a rank whose own timeout_s is shorter, or started earlier, waits
 * for it (with a margin for a busy server) instead of giving up on its own. */
int store_open(struct store **st, const struct store_opts *o, struct dp_error *err);
/* store_open's answer when the rendezvous ended on a stop request, this rank's (o->stop) or
 * another's: nothing was lost, and the job can simply run again. A rank asked to stop tells
 * the others (err then names it), so that they stop too instead of reporting it dead. */
#define STORE_STOPPED (-2)

/* Key/value operations. get waits until the key exists (up to timeout_s). */
int store_set(struct store *st, const char *key, const void *val, size_t len, struct dp_error *err);
int store_get(struct store *st, const char *key, void **val, size_t *len, double timeout_s,
	      struct dp_error *err); /* *val is malloc'd, NUL-terminated past len */
/* The values of n keys, as n gets sent at once (one round trip, not n: rank 0 gathering every
 * rank's record): vals[i] malloc'd, NUL-terminated past lens[i]; on failure none are left. */
int store_get_many(struct store *st, const char *const *keys, size_t n, void **vals, size_t *lens,
		   double timeout_s, struct dp_error *err);
/* Adds delta to the integer under key (created as 0) and returns the new value. */
int store_add(struct store *st, const char *key, long delta, long *result, struct dp_error *err);
/* Waits until every rank has entered the barrier called name; a timeout names the ranks
 * that did not arrive: "barrier NAME: 1 of 4 ranks did not arrive within 30 s: rank 2 (n1)". */
int store_barrier(struct store *st, const char *name, double timeout_s, struct dp_error *err);

/* The connection's descriptor: readable when the server sent something unasked (an abort).
 * Collectives poll it beside their own sockets and then call store_poll_abort. */
int store_fd(const struct store *st);
/* 1 with the abort message in err if the job was aborted (now or before), 0 if not, waiting
 * up to wait_s for one to arrive. */
int store_poll_abort(struct store *st, double wait_s, struct dp_error *err);
/* Tell every rank this job is aborted with reason (e.g. "rank 1: loss is nan"). */
void store_abort(struct store *st, const char *reason);
/* 1 if another rank timed out in a collective and the server asks every rank that is waiting
 * in one to report now (store_report_timeout) rather than when its own timer fires. Reads only
 * what store_poll_abort (or any other call) already received. */
int store_rollcall(struct store *st);
/* This rank timed out in collective number seq (what: "allreduce", waiting for rank
 * `waiting_for`), or answers a roll call while waiting there. Waits up to grace_s (plus a
 * margin for a busy server) for the server's verdict and returns it in err: the ranks that
 * did not report, i.e. are not taking part (stalled, or elsewhere in the program), or the
 * first abort. Falls back to a message naming waiting_for. */
void store_report_timeout(struct store *st, unsigned long seq, const char *what, int waiting_for,
			  double timeout_s, double grace_s, struct dp_error *err);

/* "rank 2 (n1)" for messages. */
const char *store_rank_name(const struct store *st, int rank, char *buf, size_t len);
int store_rank(const struct store *st);
/* store_opts.secret ("" when none), for the collectives' own handshakes: a key, never to be
 * sent. */
const char *store_secret(const struct store *st);
int store_world_size(const struct store *st);
/* The local address of this rank's connection to rank 0: the interface peers reach it on. */
const char *store_local_addr(const struct store *st);

/* Rank 0: the elementary steps its server has taken so far (a key compared, a waiter or a
 * deadline looked at, a connection's event handled): what requests cost, counted rather than
 * timed, for the tests and benchmarks that check it does not grow with the job. 0 elsewhere. */
unsigned long store_server_steps(const struct store *st);

/* Goodbye. Rank 0 waits (up to timeout_s) for every other rank's goodbye before stopping
 * the server, so no rank loses the store while it still needs it. NULL is a no-op. */
void store_close(struct store *st, double timeout_s);

#endif
