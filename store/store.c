/* store.c — the rendezvous store of store.h, every rank's side: the client, and on rank 0
 * the server it starts (store_server.c); their protocol is store_wire.h. Knows nothing of
 * collectives; keeps no global state. */
#define _GNU_SOURCE
#include "store/store_wire.h"
#include "common/env.h"
#include "common/error.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/random.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------
 * The client. Requests and their replies happen in the calling thread; only store_abort may
 * be called from another thread, so sends and the abort state are under lock. */

struct store {
	int fd;
	int rank, world;
	char *job;
	char *secret; /* store_opts.secret: the key of the hello's proof, and the collectives' */
	char **hosts; /* per rank: the rank table's name, or the one its hello gave, */
	char *names;  /* pointing into these: a copy of store_opts.hosts, one block, */
	char *told;   /* and the names the rendezvous answered with, one block */
	int unnamed;  /* ranks store_opts.hosts gave no name */
	char master[HOST_MAX];
	int port;
	char local_addr[INET6_ADDRSTRLEN];
	char hostname[HOST_MAX];
	struct store_server *srv;
	uint32_t next_id;
	struct sbuf in;

	pthread_mutex_t lock; /* guards sends on fd, aborted, abort_kind, abort_msg, rollcall */
	int aborted;
	int abort_kind; /* ABORT_FAILED, ABORT_STOPPED */
	char abort_msg[MSG_MAX];
	int rollcall;		/* the server asked the ranks waiting in a collective to report */
	const atomic_int *stop; /* store_opts.stop */
	int opening;		/* in store_open: a stop request ends its waits */
	int lost;		/* the connection closed or broke (cl_store_lost) */
};

static void cl_set_abort(struct store *st, const char *msg, int kind)
{
	pthread_mutex_lock(&st->lock);
	if (!st->aborted) {
		st->aborted = 1;
		st->abort_kind = kind;
		snprintf(st->abort_msg, sizeof(st->abort_msg), "%s", msg);
	}
	pthread_mutex_unlock(&st->lock);
}

static int cl_get_abort(struct store *st, struct dp_error *err)
{
	pthread_mutex_lock(&st->lock);
	int a = st->aborted;
	if (a && err)
		errprintf(err, "%s", st->abort_msg);
	pthread_mutex_unlock(&st->lock);
	return a;
}

static void cl_store_lost(struct store *st, int e)
{
	char name[HOST_MAX + 32], msg[MSG_MAX];
	store_rank_name(st, 0, name, sizeof(name));
	snprintf(
	    msg, sizeof(msg),
	    "%s died or left (the rendezvous store it runs at %s:%d closed the connection%s%s)",
	    name, st->master, st->port, e ? ": " : "", e ? strerror(e) : "");
	st->lost = 1;
	cl_set_abort(st, msg, ABORT_FAILED);
}

static void cl_mute(struct store *st, double waited, struct dp_error *err)
{
	char name[HOST_MAX + 32];
	store_rank_name(st, 0, name, sizeof(name));
	errprintf(
	    err,
	    "rendezvous: the store at %s:%d did not answer within %.3g s: %s is not responding "
	    "(stalled?)",
	    st->master, st->port, waited, name);
}

/* Sends a whole frame by the deadline. */
static int cl_send(struct store *st, struct sbuf *f, double deadline, struct dp_error *err)
{
	int rv = -1;
	double t0 = now_s();
	if (f->bad)
		return errprintf(err, "rendezvous: out of memory");
	pthread_mutex_lock(&st->lock);
	while (f->off < f->len) {
		ssize_t n =
		    send(st->fd, f->p + f->off, f->len - f->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			f->off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = {.fd = st->fd, .events = POLLOUT};
			if (poll(&p, 1, ms_until(deadline)) == 0) {
				pthread_mutex_unlock(&st->lock);
				cl_mute(st, now_s() - t0, err);
				return -1;
			}
			continue;
		}
		int e = errno;
		pthread_mutex_unlock(&st->lock);
		cl_store_lost(st, e);
		cl_get_abort(st, err);
		return -1;
	}
	rv = 0;
	pthread_mutex_unlock(&st->lock);
	return rv;
}

/* Reads what arrived and handles aborts. Returns 1 with the reply to `want` (0: none wanted)
 * in *status and *body (valid until the next read), 0 if none yet, -1 if the store is lost.
 * Stale replies (of requests given up on) are dropped. */
static int cl_pump_any(struct store *st, uint32_t want, uint32_t nwant, uint32_t *got, int *status,
		       struct rd *body)
{
	for (;;) {
		for (;;) {
			int type;
			uint32_t id;
			struct rd b;
			int f = sw_frame_next(&st->in, &type, &id, &b);
			if (f < 0) {
				cl_store_lost(st, EPROTO);
				return -1;
			}
			if (f == 0)
				break;
			if (type == MSG_ABORT) {
				size_t n;
				const char *m = sw_rd_blob(&b, &n);
				int kind = (int)sw_rd_u32(&b);
				char msg[MSG_MAX];
				snprintf(msg, sizeof(msg), "%.*s", (int)n, m);
				cl_set_abort(st, msg, kind == ABORT_STOPPED ? kind : ABORT_FAILED);
			} else if (type == MSG_ROLLCALL) {
				pthread_mutex_lock(&st->lock);
				st->rollcall = 1;
				pthread_mutex_unlock(&st->lock);
			} else if (type == MSG_REPLY && want && id - want < nwant) {
				size_t n;
				*got = id;
				*status = (int)sw_rd_u32(&b);
				const char *d = sw_rd_blob(&b, &n);
				*body = (struct rd){(const unsigned char *)d, n, 0, b.bad};
				return 1;
			}
		}
		int rc = sw_sbuf_fill(&st->in, st->fd);
		if (rc < 0) {
			cl_store_lost(st, errno);
			return -1;
		}
		if (rc == 0)
			return 0;
	}
}

static int cl_pump(struct store *st, uint32_t want, int *status, struct rd *body)
{
	uint32_t got;
	return cl_pump_any(st, want, 1, &got, status, body);
}

/* During the rendezvous: a stop request (SIGTERM, SIGUSR1) ends the wait. */
static int cl_stopped(const struct store *st, struct dp_error *err)
{
	if (!st->opening || !st->stop || !atomic_load(st->stop))
		return 0;
	errprintf(err, "rendezvous: stopped on request while rank %d waited for the others",
		  st->rank);
	return 1;
}

/* Waits by the deadline for the reply to one of the nid requests id, id + 1, ... (*got: which).
 * An abort fails it, unless ignore_abort. */
static int cl_wait_any(struct store *st, uint32_t id, uint32_t nid, uint32_t *got, double deadline,
		       int ignore_abort, int *status, struct rd *body, struct dp_error *err)
{
	double t0 = now_s();
	for (;;) {
		int rc = cl_pump_any(st, id, nid, got, status, body);
		if (rc < 0 || (!ignore_abort && cl_get_abort(st, NULL))) {
			cl_get_abort(st, err);
			return -1;
		}
		if (rc > 0)
			return 0;
		if (cl_stopped(st, err))
			return -1;
		struct pollfd p = {.fd = st->fd, .events = POLLIN};
		int ms = ms_until(deadline);
		if (st->opening && st->stop && (ms < 0 || ms > STOP_POLL_MS))
			ms = STOP_POLL_MS;
		int n = poll(&p, 1, ms);
		if (n == 0 && now_s() >= deadline) {
			cl_mute(st, now_s() - t0, err);
			return -1;
		}
	}
}

/* Waits for the reply to id by the deadline. An abort fails it, unless ignore_abort. */
static int cl_wait(struct store *st, uint32_t id, double deadline, int ignore_abort, int *status,
		   struct rd *body, struct dp_error *err)
{
	uint32_t got;
	return cl_wait_any(st, id, 1, &got, deadline, ignore_abort, status, body, err);
}

/* One request: sends the frame in f and waits for its reply by deadline. */
static int cl_call(struct store *st, struct sbuf *f, uint32_t id, double deadline, int *status,
		   struct rd *body, struct dp_error *err)
{
	if (cl_get_abort(st, err))
		return -1;
	if (cl_send(st, f, deadline, err) < 0)
		return -1;
	return cl_wait(st, id, deadline, 0, status, body, err);
}

static uint32_t cl_id(struct store *st)
{
	if (++st->next_id == 0)
		st->next_id = 1;
	return st->next_id;
}

/* This rank leaves the rendezvous on a stop request (SIGTERM, SIGUSR1): the other ranks are
 * told so, as a stop rather than a death, and stop too with nothing to save (exit 4) instead
 * of failing (exit 3) before their own request arrives, or waiting for the rendezvous to
 * close when only this rank was asked. The goodbye after it, answered, means the server has
 * passed it on. Called once the hello is sent (the server reads in order). */
static void cl_announce_stop(struct store *st)
{
	struct sbuf f = {0};
	char name[HOST_MAX + 32], msg[MSG_MAX];
	struct dp_error err;
	int status, sig = atomic_load(st->stop);
	struct rd body;
	sw_rank_label(name, sizeof(name), st->rank,
		      st->hosts[st->rank] ? st->hosts[st->rank] : st->hostname);
	snprintf(msg, sizeof(msg), "%s was asked to stop (%s) during the rendezvous", name,
		 sig == SIGTERM	  ? "SIGTERM"
		 : sig == SIGUSR1 ? "SIGUSR1"
				  : "a stop request");
	sw_frame_abort(&f, msg, ABORT_STOPPED);
	uint32_t id = cl_id(st);
	size_t at = sw_frame_begin(&f, MSG_GOODBYE, id);
	sw_frame_end(&f, at);
	st->opening = 0; /* the wait below is not ended by the request it announces */
	double deadline = now_s() + 2;
	if (cl_send(st, &f, deadline, &err) == 0)
		cl_wait(st, id, deadline, 1, &status, &body, &err);
	sw_sbuf_free(&f);
}

static int cl_connect(struct store *st, double timeout_s, struct dp_error *err)
{
	double deadline = now_s() + timeout_s;
	char port[16], why[256] = "no answer";
	snprintf(port, sizeof(port), "%d", st->port);
	for (;;) {
		struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
		int g = getaddrinfo(st->master, port, &hints, &res);
		if (g != 0)
			snprintf(why, sizeof(why), "%s", gai_strerror(g));
		for (struct addrinfo *a = g == 0 ? res : NULL; a; a = a->ai_next) {
			int fd =
			    socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			if (fd < 0) {
				snprintf(why, sizeof(why), "%s", strerror(errno));
				continue;
			}
			int e = 0;
			if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
				e = errno;
				if (e == EINPROGRESS) {
					struct pollfd p = {.fd = fd, .events = POLLOUT};
					double d =
					    now_s() + 2.0 < deadline ? now_s() + 2.0 : deadline;
					socklen_t l = sizeof(e);
					if (poll(&p, 1, ms_until(d)) <= 0)
						e = ETIMEDOUT;
					else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
						e = errno;
				}
			}
			if (e == 0) {
				freeaddrinfo(res);
				st->fd = fd;
				return 0;
			}
			snprintf(why, sizeof(why), "%s", strerror(e));
			close(fd);
		}
		if (res)
			freeaddrinfo(res);
		if (now_s() >= deadline || cl_stopped(st, err))
			break;
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (cl_stopped(st, err))
		return -1;
	return errprintf(
	    err,
	    "rendezvous: cannot connect to rank 0's store at %s:%d within %g s: %s (rank 0 "
	    "may not have started yet, or MASTER_ADDR/MASTER_PORT are wrong)",
	    st->master, st->port, timeout_s, why);
}

/* The names of store_opts.hosts, copied into one block (not a block per rank: a job of n
 * ranks on one machine would make n^2 of them). */
static int cl_copy_hosts(struct store *st, const char *const *hosts)
{
	size_t total = 0;
	for (int r = 0; hosts && r < st->world; r++)
		total += hosts[r] ? strlen(hosts[r]) + 1 : 0;
	if (total && !(st->names = malloc(total)))
		return -1;
	char *at = st->names;
	st->unnamed = 0;
	for (int r = 0; r < st->world; r++) {
		if (!hosts || !hosts[r]) {
			st->unnamed++;
			continue;
		}
		size_t n = strlen(hosts[r]) + 1;
		st->hosts[r] = memcpy(at, hosts[r], n);
		at += n;
	}
	return 0;
}

static void store_free(struct store *st)
{
	if (!st)
		return;
	if (st->fd >= 0)
		close(st->fd);
	free(st->hosts);
	free(st->names);
	free(st->told);
	free(st->job);
	free(st->secret);
	sw_sbuf_free(&st->in);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

/* The barrier request: 0, or -1 with err; missing > 0 when ranks did not arrive. */
static int cl_barrier(struct store *st, const char *name, double timeout_s, int *missing,
		      char *list, size_t listlen, struct dp_error *err)
{
	struct sbuf f = {0};
	uint32_t id = cl_id(st);
	size_t at = sw_frame_begin(&f, MSG_BARRIER, id);
	int status, rv = -1;
	struct rd body;
	sw_put_str(&f, name);
	sw_put_u64(&f, (uint64_t)(timeout_s * 1e3));
	/* every rank's name only for a rank that lacks some: n ranks' names to n ranks are n^2
	 * bytes from rank 0 */
	sw_put_u32(&f, strcmp(name, OPEN_BARRIER) == 0 && st->unnamed ? BARRIER_HOSTS : 0);
	sw_frame_end(&f, at);
	*missing = 0;
	if (cl_call(st, &f, id, now_s() + timeout_s + REPLY_MARGIN_S, &status, &body, err) < 0)
		goto out;
	if (status == REPLY_TIMEOUT) {
		size_t n;
		*missing = (int)sw_rd_u32(&body);
		const char *l = sw_rd_blob(&body, &n);
		snprintf(list, listlen, "%.*s", (int)n, l);
		if (*missing < 1)
			*missing = 1;
	} else if (status != REPLY_OK) {
		errprintf(err, "rendezvous: barrier %s: %.*s", name, (int)body.n,
			  (const char *)body.p);
		goto out;
	} else if (strcmp(name, OPEN_BARRIER) == 0 && body.n && !st->told) {
		char *to = st->told = malloc(body.n + (size_t)st->world);
		if (!to) {
			errprintf(err, "rendezvous: out of memory");
			goto out;
		}
		for (int r = 0; r < st->world; r++) {
			size_t n;
			const char *h = sw_rd_blob(&body, &n);
			if (body.bad)
				break;
			if (!st->hosts[r] && n) {
				memcpy(to, h, n);
				to[n] = 0;
				st->hosts[r] = to;
				to += n + 1;
			}
		}
	}
	rv = 0;
out:
	sw_sbuf_free(&f);
	return rv;
}

/* The local address of st's connection to rank 0 (store_local_addr). */
static void cl_local_addr(struct store *st)
{
	struct sockaddr_storage la;
	socklen_t ll = sizeof(la);
	if (getsockname(st->fd, (struct sockaddr *)&la, &ll) == 0) {
		if (la.ss_family == AF_INET6) {
			struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&la;
			if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr))
				inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], st->local_addr,
					  sizeof(st->local_addr));
			else
				inet_ntop(AF_INET6, &a6->sin6_addr, st->local_addr,
					  sizeof(st->local_addr));
		} else {
			inet_ntop(AF_INET, &((struct sockaddr_in *)&la)->sin_addr, st->local_addr,
				  sizeof(st->local_addr));
		}
	}
}

/* cl_hello's answer when the store closed the connection before it answered: it may have
 * dropped this rank as the oldest of too many connections waiting to say their hello (a flood
 * of strangers), so store_open connects again, a few times. */
#define HELLO_CLOSED (-3)

/* The peer on MASTER_PORT is not a dptrain store (or rank 0 ended): why, and what to do. */
static int cl_not_store(struct store *st, const char *why, struct dp_error *err)
{
	return errprintf(err,
			 "rendezvous: %s:%d (MASTER_ADDR:MASTER_PORT) took rank %d's connection "
			 "but did not answer as a dptrain store does (%s): another program listens "
			 "on that port, or rank 0 ended; choose another MASTER_PORT",
			 st->master, st->port, st->rank, why);
}

/* The store's challenge (store_wire.h), its first frame, within the deadline: its nonce into
 * snonce and its flags. A store of another protocol version is named, with both versions. */
static int cl_challenge(struct store *st, double deadline, unsigned char *snonce, uint32_t *flags,
			struct dp_error *err)
{
	char why[256];
	double t0 = now_s(), stop_seen = 0;
	for (;;) {
		int type;
		uint32_t id;
		struct rd b;
		int f = sw_frame_next(&st->in, &type, &id, &b);
		if (f < 0)
			return cl_not_store(st, "it sent what is not a dptrain frame", err);
		if (f > 0) {
			uint32_t version = sw_rd_u32(&b);
			if (type != MSG_CHALLENGE || b.bad)
				return cl_not_store(st, "it did not begin with a store's challenge",
						    err);
			if (version != STORE_PROTO)
				return errprintf(
				    err,
				    "rendezvous: the store at %s:%d speaks protocol %u, "
				    "this rank's dptrain speaks %d: every node must run "
				    "the same dptrain version",
				    st->master, st->port, version, STORE_PROTO);
			size_t n;
			const char *p = sw_rd_blob(&b, &n);
			*flags = sw_rd_u32(&b);
			if (b.bad || n != STORE_NONCE)
				return cl_not_store(st, "its challenge is malformed", err);
			memcpy(snonce, p, n);
			return 0;
		}
		int rc = sw_sbuf_fill(&st->in, st->fd), e = errno;
		if (rc > 0)
			continue;
		/* silence, or a close after long silence (a store of protocol 1 waits for the
		 * rank to speak first, and gives up at about the time this rank does) */
		if ((rc == 0 && now_s() >= deadline) ||
		    (rc < 0 && now_s() - t0 >= HELLO_ANSWER_S / 2)) {
			snprintf(
			    why, sizeof(why),
			    "it said nothing for %.3g s, where a store sends its challenge at "
			    "once; a dptrain of store protocol 1 says nothing first: every node "
			    "must run the same dptrain version",
			    now_s() - t0);
			return cl_not_store(st, why, err);
		}
		if (rc < 0) {
			snprintf(why, sizeof(why), "it closed the connection%s%s", e ? ": " : "",
				 e ? strerror(e) : "");
			cl_not_store(st, why, err);
			return e == 0 || e == ECONNRESET ? HELLO_CLOSED : -1;
		}
		/* a stop request: the challenge a moment longer (STOP_CHALLENGE_S) */
		if (st->opening && st->stop && atomic_load(st->stop) && stop_seen == 0)
			stop_seen = now_s();
		if (stop_seen > 0 && now_s() - stop_seen >= STOP_CHALLENGE_S && cl_stopped(st, err))
			return -1;
		struct pollfd p = {.fd = st->fd, .events = POLLIN};
		int ms = ms_until(deadline);
		if (st->opening && st->stop && ms > STOP_POLL_MS)
			ms = STOP_POLL_MS;
		poll(&p, 1, ms);
	}
}

/* The handshake (store_wire.h): the store's challenge; the hello, with this rank's identity
 * and its proof that it knows the job's secret; the store's answer, with its own proof, and
 * how long the rendezvous stays open (*open_timeout in all, *open_left now). Within left
 * seconds: the challenge within CHALLENGE_WAIT_S, the answer within HELLO_ANSWER_S. *sent once
 * the hello is on its way (from there the server will know this rank). -1 with err, or
 * HELLO_CLOSED. */
static int cl_hello(struct store *st, double left, int *sent, double *open_timeout,
		    double *open_left, struct dp_error *err)
{
	struct sbuf f = {0};
	int status, rv = -1;
	struct rd body;
	unsigned char snonce[STORE_NONCE], cnonce[STORE_NONCE], mac[DP_SHA256_LEN];
	uint32_t flags = 0;
	double t0 = now_s();
	double deadline = t0 + (left < CHALLENGE_WAIT_S ? (left > 1 ? left : 1) : CHALLENGE_WAIT_S);
	if ((rv = cl_challenge(st, deadline, snonce, &flags, err)) < 0)
		return rv;
	rv = -1;
	left -= now_s() - t0;
	deadline = now_s() + (left < HELLO_ANSWER_S ? (left > 1 ? left : 1) : HELLO_ANSWER_S);
	if (st->secret[0] && !(flags & CHALLENGE_SECRET))
		return errprintf(
		    err,
		    "rendezvous: the store at %s:%d has no secret but rank %d has the job's "
		    "(DPTRAIN_STORE_SECRET): it is not this job's store (its rank 0 was started "
		    "without the secret, or another program listens on MASTER_PORT); start every "
		    "rank the same way (srun --dptrain, dptrain-run)",
		    st->master, st->port, st->rank);
	if (dp_random(cnonce, sizeof(cnonce), err) < 0)
		return errprefix(err, "rendezvous: cannot make the hello's nonce");
	uint32_t id = cl_id(st);
	size_t at = sw_frame_begin(&f, MSG_HELLO, id);
	sw_put_u32(&f, STORE_PROTO);
	sw_put_u32(&f, (uint32_t)st->rank);
	sw_put_u32(&f, (uint32_t)st->world);
	sw_put_str(&f, st->job);
	sw_put_str(&f, st->hostname);
	sw_put_blob(&f, cnonce, sizeof(cnonce));
	if (st->secret[0]) {
		sw_auth_hello_mac(st->secret, snonce, cnonce, st->rank, st->world, st->job, mac);
		sw_put_blob(&f, mac, sizeof(mac));
	} else {
		sw_put_blob(&f, NULL, 0);
	}
	sw_frame_end(&f, at);
	*sent = 1;
	if (cl_call(st, &f, id, deadline, &status, &body, err) < 0) {
		if (!cl_stopped(st, err))
			cl_not_store(st, err->text, err);
		if (st->lost)
			rv = HELLO_CLOSED;
		goto out;
	}
	if (status != REPLY_OK) {
		size_t n;
		const char *m = (const char *)body.p;
		n = body.n;
		errprintf(err, "rendezvous: the store at %s:%d refused rank %d: %.*s", st->master,
			  st->port, st->rank, (int)n, m);
		goto out;
	}
	/* From here rank 0's clock decides: the server says how long the rendezvous stays open
	 * and judges it; this rank waits for that verdict (cl_barrier adds the margin for a
	 * busy server), so every rank names the same missing ranks. */
	*open_timeout = (double)sw_rd_u64(&body) / 1e3;
	*open_left = (double)sw_rd_u64(&body) / 1e3;
	size_t nproof;
	const char *proof = sw_rd_blob(&body, &nproof);
	if (body.bad) {
		errprintf(err,
			  "rendezvous: the store at %s:%d sent a malformed answer to rank "
			  "%d's hello (another program on MASTER_PORT?)",
			  st->master, st->port, st->rank);
		goto out;
	}
	if (st->secret[0]) {
		sw_auth_ok_mac(st->secret, cnonce, snonce, st->rank, mac);
		if (nproof != sizeof(mac) || !dp_equal_ct(proof, mac, sizeof(mac))) {
			errprintf(
			    err,
			    "rendezvous: the store at %s:%d took rank %d's hello but could not "
			    "prove that it knows the job's secret: it is not this job's store "
			    "(another program listens on MASTER_PORT); choose another "
			    "MASTER_PORT",
			    st->master, st->port, st->rank);
			goto out;
		}
	}
	rv = 0;
out:
	sw_sbuf_free(&f);
	return rv;
}

/* Back to before the connection, for another try: what the lost one left is forgotten. */
static void cl_disconnect(struct store *st)
{
	close(st->fd);
	st->fd = -1;
	sw_sbuf_free(&st->in);
	st->lost = 0;
	st->aborted = 0;
	st->abort_msg[0] = 0;
}

int store_open(struct store **out, const struct store_opts *o, struct dp_error *err)
{
	struct store *st = NULL;
	int rv = -1, hello_sent = 0;
	double t0 = now_s(), timeout = o->timeout_s > 0 ? o->timeout_s : 300;
	double open_timeout = 0, open_left = 0;
	*out = NULL;
	if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
		return errprintf(err, "rendezvous: rank %d is out of range for %d ranks", o->rank,
				 o->world_size);
	if (o->master_port < 1 || o->master_port > 65535)
		return errprintf(err, "rendezvous: MASTER_PORT %d is not a port (1-65535)",
				 o->master_port);
	if (!o->master_addr || !*o->master_addr)
		return errprintf(err, "rendezvous: no MASTER_ADDR given");
	st = calloc(1, sizeof(*st));
	if (!st)
		return errprintf(err, "rendezvous: out of memory");
	st->fd = -1;
	pthread_mutex_init(&st->lock, NULL);
	st->rank = o->rank;
	st->world = o->world_size;
	st->port = o->master_port;
	st->stop = o->stop;
	st->opening = 1;
	snprintf(st->master, sizeof(st->master), "%s", o->master_addr);
	if (gethostname(st->hostname, sizeof(st->hostname)) < 0)
		snprintf(st->hostname, sizeof(st->hostname), "localhost");
	st->hostname[sizeof(st->hostname) - 1] = 0;
	st->job = strdup(o->job ? o->job : "");
	st->secret = strdup(o->secret ? o->secret : "");
	st->hosts = calloc((size_t)st->world, sizeof(*st->hosts));
	if (!st->job || !st->secret || !st->hosts) {
		errprintf(err, "rendezvous: out of memory");
		goto out;
	}
	if (cl_copy_hosts(st, o->hosts) < 0) {
		errprintf(err, "rendezvous: out of memory");
		goto out;
	}
	if (strlen(st->job) >= STORE_JOB_MAX) {
		errprintf(err, "rendezvous: the job's identity '%.32s...' is longer than %d bytes",
			  st->job, STORE_JOB_MAX - 1);
		goto out;
	}
	if (st->rank == 0 && srv_start(&st->srv, o, timeout, err) < 0)
		goto out;
	for (int tries = 1;; tries++) {
		/* again: rank 0 listens, unless it ended, which is not worth a whole timeout */
		double left = tries == 1 ? timeout : timeout - (now_s() - t0);
		if (tries > 1 && left > HELLO_ANSWER_S)
			left = HELLO_ANSWER_S;
		if (cl_connect(st, left > 1 ? left : 1, err) < 0)
			goto out;
		int one = 1;
		setsockopt(st->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		cl_local_addr(st);
		int h = cl_hello(st, timeout - (now_s() - t0), &hello_sent, &open_timeout,
				 &open_left, err);
		if (h == 0)
			break;
		if (h != HELLO_CLOSED || tries == HELLO_TRIES || now_s() - t0 >= timeout ||
		    (st->stop && atomic_load(st->stop)))
			goto out;
		cl_disconnect(st);
		hello_sent = 0;
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	char list[2048];
	int missing;
	if (cl_barrier(st, OPEN_BARRIER, open_left > 0.1 ? open_left : 0.1, &missing, list,
		       sizeof(list), err) < 0)
		goto out;
	if (missing) {
		errprintf(err, "rendezvous: %d of %d ranks did not connect within %g s: %s",
			  missing, st->world, open_timeout, list);
		goto out;
	}

	st->opening = 0;
	*out = st;
	st = NULL;
	rv = 0;
out:
	if (st && st->stop && atomic_load(st->stop)) {
		if (hello_sent && st->fd >= 0)
			cl_announce_stop(st);
		rv = STORE_STOPPED;
	} else if (st && cl_get_abort(st, NULL) && st->abort_kind == ABORT_STOPPED) {
		cl_get_abort(st, err); /* which rank was asked to stop */
		rv = STORE_STOPPED;
	}
	if (st) {
		struct store_server *srv = st->srv;
		st->srv = NULL;
		store_free(st);
		if (srv)
			srv_stop(srv, 0);
	}
	return rv;
}

static int check_key(const char *key, struct dp_error *err)
{
	size_t n = strlen(key);
	if (n == 0 || n >= STORE_KEY_MAX)
		return errprintf(err, "rendezvous: key '%.64s' must be 1 to %d bytes long", key,
				 STORE_KEY_MAX - 1);
	return 0;
}

int store_set(struct store *st, const char *key, const void *val, size_t len, struct dp_error *err)
{
	struct sbuf f = {0};
	int status, rv = -1;
	struct rd body;
	if (check_key(key, err) < 0)
		return -1;
	if (len > STORE_VALUE_MAX)
		return errprintf(err, "rendezvous: set %s: %zu bytes is more than %u", key, len,
				 STORE_VALUE_MAX);
	uint32_t id = cl_id(st);
	size_t at = sw_frame_begin(&f, MSG_SET, id);
	sw_put_str(&f, key);
	sw_put_blob(&f, val, len);
	sw_frame_end(&f, at);
	if (cl_call(st, &f, id, now_s() + 30 + REPLY_MARGIN_S, &status, &body, err) < 0)
		goto out;
	if (status != REPLY_OK) {
		size_t n;
		const char *m = (const char *)body.p;
		n = body.n;
		errprintf(err, "rendezvous: set %s: %.*s", key, (int)n, m);
		goto out;
	}
	rv = 0;
out:
	sw_sbuf_free(&f);
	return rv;
}

int store_get(struct store *st, const char *key, void **val, size_t *len, double timeout_s,
	      struct dp_error *err)
{
	struct sbuf f = {0};
	int status, rv = -1;
	struct rd body;
	*val = NULL;
	*len = 0;
	if (check_key(key, err) < 0)
		return -1;
	uint32_t id = cl_id(st);
	size_t at = sw_frame_begin(&f, MSG_GET, id);
	sw_put_str(&f, key);
	sw_put_u64(&f, (uint64_t)(timeout_s * 1e3));
	sw_frame_end(&f, at);
	if (cl_call(st, &f, id, now_s() + timeout_s + REPLY_MARGIN_S, &status, &body, err) < 0)
		goto out;
	size_t n = body.n;
	const char *v = (const char *)body.p;
	if (status == REPLY_TIMEOUT) {
		errprintf(err, "rendezvous: key %s was not set within %g s", key, timeout_s);
		goto out;
	}
	if (status != REPLY_OK) {
		errprintf(err, "rendezvous: get %s: %.*s", key, (int)n, v);
		goto out;
	}
	char *p = malloc(n + 1);
	if (!p) {
		errprintf(err, "rendezvous: get %s: out of memory (%zu bytes)", key, n);
		goto out;
	}
	memcpy(p, v, n);
	p[n] = 0;
	*val = p;
	*len = n;
	rv = 0;
out:
	sw_sbuf_free(&f);
	return rv;
}

int store_get_many(struct store *st, const char *const *keys, size_t n, void **vals, size_t *lens,
		   double timeout_s, struct dp_error *err)
{
	struct sbuf f = {0};
	size_t left = n;
	int rv = -1;
	for (size_t i = 0; i < n; i++) {
		vals[i] = NULL;
		lens[i] = 0;
	}
	if (n == 0)
		return 0;
	if (n > UINT32_MAX / 2)
		return errprintf(err, "rendezvous: %zu keys in one request", n);
	/* the requests' ids are consecutive: a reply is matched by its distance from the first */
	if (st->next_id > UINT32_MAX - (uint32_t)n - 1)
		st->next_id = 0;
	uint32_t first = st->next_id + 1;
	st->next_id += (uint32_t)n;
	for (size_t i = 0; i < n; i++) {
		if (check_key(keys[i], err) < 0)
			goto out;
		size_t at = sw_frame_begin(&f, MSG_GET, first + (uint32_t)i);
		sw_put_str(&f, keys[i]);
		sw_put_u64(&f, (uint64_t)(timeout_s * 1e3));
		sw_frame_end(&f, at);
	}
	double deadline = now_s() + timeout_s + REPLY_MARGIN_S;
	if (cl_get_abort(st, err) || cl_send(st, &f, deadline, err) < 0)
		goto out;
	while (left) {
		uint32_t got;
		int status;
		struct rd body;
		if (cl_wait_any(st, first, (uint32_t)n, &got, deadline, 0, &status, &body, err) < 0)
			goto out;
		size_t i = got - first;
		if (vals[i]) /* a second reply to one request: not the store's */
			continue;
		if (status == REPLY_TIMEOUT) {
			errprintf(err, "rendezvous: key %s was not set within %g s", keys[i],
				  timeout_s);
			goto out;
		}
		if (status != REPLY_OK) {
			errprintf(err, "rendezvous: get %s: %.*s", keys[i], (int)body.n,
				  (const char *)body.p);
			goto out;
		}
		if (!(vals[i] = malloc(body.n + 1))) {
			errprintf(err, "rendezvous: get %s: out of memory (%zu bytes)", keys[i],
				  body.n);
			goto out;
		}
		memcpy(vals[i], body.p, body.n);
		((char *)vals[i])[body.n] = 0;
		lens[i] = body.n;
		left--;
	}
	rv = 0;
out:
	if (rv < 0)
		for (size_t i = 0; i < n; i++) {
			free(vals[i]);
			vals[i] = NULL;
			lens[i] = 0;
		}
	sw_sbuf_free(&f);
	return rv;
}

int store_add(struct store *st, const char *key, long delta, long *result, struct dp_error *err)
{
	struct sbuf f = {0};
	int status, rv = -1;
	struct rd body;
	if (check_key(key, err) < 0)
		return -1;
	uint32_t id = cl_id(st);
	size_t at = sw_frame_begin(&f, MSG_ADD, id);
	sw_put_str(&f, key);
	sw_put_u64(&f, (uint64_t)(int64_t)delta);
	sw_frame_end(&f, at);
	if (cl_call(st, &f, id, now_s() + 30 + REPLY_MARGIN_S, &status, &body, err) < 0)
		goto out;
	if (status != REPLY_OK) {
		errprintf(err, "rendezvous: add %s: %.*s", key, (int)body.n, (const char *)body.p);
		goto out;
	}
	long res = (long)(int64_t)sw_rd_u64(&body);
	if (result)
		*result = res;
	rv = 0;
out:
	sw_sbuf_free(&f);
	return rv;
}

int store_barrier(struct store *st, const char *name, double timeout_s, struct dp_error *err)
{
	char list[2048];
	int missing;
	if (check_key(name, err) < 0)
		return -1;
	if (cl_barrier(st, name, timeout_s, &missing, list, sizeof(list), err) < 0)
		return -1;
	if (missing)
		return errprintf(err, "barrier %s: %d of %d ranks did not arrive within %g s: %s",
				 name, missing, st->world, timeout_s, list);
	return 0;
}

int store_fd(const struct store *st)
{
	return st->fd;
}

int store_poll_abort(struct store *st, double wait_s, struct dp_error *err)
{
	double deadline = now_s() + wait_s;
	for (;;) {
		int status;
		struct rd body;
		if (cl_get_abort(st, err))
			return 1;
		if (cl_pump(st, 0, &status, &body) < 0)
			return cl_get_abort(st, err);
		if (cl_get_abort(st, err))
			return 1;
		struct pollfd p = {.fd = st->fd, .events = POLLIN};
		int ms = ms_until(deadline);
		if (ms == 0 || poll(&p, 1, ms) == 0)
			return 0;
	}
}

void store_abort(struct store *st, const char *reason)
{
	struct sbuf f = {0};
	struct dp_error err;
	if (cl_get_abort(st, NULL))
		return;
	sw_frame_abort(&f, reason, ABORT_FAILED);
	cl_send(st, &f, now_s() + 5, &err);
	cl_set_abort(st, reason, ABORT_FAILED);
	sw_sbuf_free(&f);
}

int store_rollcall(struct store *st)
{
	pthread_mutex_lock(&st->lock);
	int r = st->rollcall;
	pthread_mutex_unlock(&st->lock);
	return r;
}

void store_report_timeout(struct store *st, unsigned long seq, const char *what, int waiting_for,
			  double timeout_s, double grace_s, struct dp_error *err)
{
	struct sbuf f = {0};
	char name[HOST_MAX + 32], zero[HOST_MAX + 32];
	if (cl_get_abort(st, err))
		return;
	if (waiting_for < 0 || waiting_for >= st->world)
		waiting_for = 0;
	size_t at = sw_frame_begin(&f, MSG_REPORT, 0);
	sw_put_u64(&f, seq);
	sw_put_str(&f, what);
	sw_put_u32(&f, (uint32_t)waiting_for);
	sw_put_u64(&f, (uint64_t)(timeout_s * 1e3));
	sw_put_u64(&f, (uint64_t)(grace_s * 1e3));
	sw_frame_end(&f, at);
	if (cl_send(st, &f, now_s() + 2, err) == 0 &&
	    store_poll_abort(st, grace_s + REPLY_MARGIN_S, err) == 1)
		goto out;
	if (cl_get_abort(st, err))
		goto out;
	store_rank_name(st, waiting_for, name, sizeof(name));
	store_rank_name(st, 0, zero, sizeof(zero));
	if (waiting_for == 0)
		errprintf(
		    err,
		    "timed out after %g s in %s #%lu waiting for %s, which is not responding: "
		    "neither is the rendezvous store it runs (is rank 0 stalled?)",
		    timeout_s, what, seq, name);
	else
		errprintf(
		    err,
		    "timed out after %g s in %s #%lu waiting for %s; the rendezvous store on %s "
		    "is not responding either (is rank 0 stalled?)",
		    timeout_s, what, seq, name, zero);
out:
	sw_sbuf_free(&f);
}

const char *store_rank_name(const struct store *st, int rank, char *buf, size_t len)
{
	const char *h = rank >= 0 && rank < st->world && st->hosts ? st->hosts[rank] : NULL;
	sw_rank_label(buf, len, rank, h);
	return buf;
}

unsigned long store_server_steps(const struct store *st)
{
	return st->srv ? srv_steps(st->srv) : 0;
}

const char *store_secret(const struct store *st)
{
	return st->secret;
}

int store_rank(const struct store *st)
{
	return st->rank;
}

int store_world_size(const struct store *st)
{
	return st->world;
}

const char *store_local_addr(const struct store *st)
{
	return st->local_addr;
}

void store_close(struct store *st, double timeout_s)
{
	if (!st)
		return;
	struct sbuf f = {0};
	struct dp_error err;
	int status;
	struct rd body;
	uint32_t id = cl_id(st);
	size_t at = sw_frame_begin(&f, MSG_GOODBYE, id);
	sw_frame_end(&f, at);
	/* the server's answer: our goodbye arrived before our connection closes */
	double deadline = now_s() + (timeout_s < 5 ? timeout_s : 5);
	if (cl_send(st, &f, deadline, &err) == 0)
		cl_wait(st, id, deadline, 1, &status, &body, &err);
	sw_sbuf_free(&f);
	struct store_server *srv = st->srv;
	st->srv = NULL;
	if (srv)
		srv_stop(srv, timeout_s);
	store_free(st);
}
