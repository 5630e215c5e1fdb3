/* store_server.c — rank 0's rendezvous server (store.h): one thread, one poll loop over the
 * listening socket, the clients and a wake-up pipe; the keys, gets, barriers, the job's
 * liveness verdicts and the refusal of strangers, within bounds a flood of them cannot pass.
 * The protocol is store_wire.h. */
#define _GNU_SOURCE
#include "store/store_wire.h"
#include "common/error.h"
#include "common/clock.h"
#include "common/warn.h"
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------
 * The server: one thread of rank 0, one poll loop over the listening socket, the clients
 * and a wake-up pipe; every wait in it is a deadline in that loop. */

struct srv_conn {
	int fd;				 /* -1 once closed (a stranger dropped to make room) */
	int rank;			 /* -1 until its hello was accepted */
	char peer[INET6_ADDRSTRLEN + 8]; /* "addr:port" of the other end, for the refusal log */
	double taken;			 /* when it was accepted */
	double hello_by;		 /* a connection without a hello by then is dropped */
	unsigned long seq; /* accepted as the seq'th: the oldest stranger goes first */
	unsigned char nonce[STORE_NONCE]; /* the challenge it was sent */
	/* Until its hello is accepted (srv_read_preauth): its first frame, read to its length
	 * and no further, a length over PREAUTH_FRAME_MAX refused before a byte of it is read. */
	unsigned char head[4];
	size_t nhead;
	unsigned char *body;
	size_t nbody, lbody;
	struct sbuf in, out; /* in: once it is a rank */
	int goodbye;
	int closing; /* close once out is flushed (a refused hello) */
	int dead;
};

struct srv_kv {
	char *key;
	char *val;
	size_t len;
};

struct srv_get {
	int rank;
	uint32_t id;
	char *key;
	double deadline;
};

struct srv_barrier {
	char *name;
	int count;
	char *arrived;	  /* per rank */
	char *waiting;	  /* per rank: a reply is owed */
	uint32_t *id;	  /* per rank */
	double *deadline; /* per rank */
	double *timeout;  /* per rank, for the message */
};

/* Rank 0's server. Every field belongs to the server thread (srv_main and what it calls)
 * once that thread runs, except `lock` and what it guards (stop, stop_deadline: set by
 * store_close on the rank's own thread) and wake[1] (written by that thread to wake the
 * loop). srv_start fills the rest before the thread starts; srv_free runs after it ended. */
struct store_server {
	int lfd;
	int wake[2];
	pthread_t thread;
	int world, port;
	char *job;
	char *secret; /* the job's secret ("" = none): a hello without it is refused */
	int refusals; /* refused connections logged so far (at most REFUSALS_LOGGED) */
	/* Strangers (connections without an accepted hello): at most preauth_max at once, the
	 * oldest dropped for a new one; accepted counts the connections taken, for their seq. */
	size_t preauth_max;
	unsigned long accepted;
	/* Out of descriptors, or of room for strangers: the listener is left alone until
	 * accept_paused_until, so the loop sleeps. reserve is /dev/null, given up to accept and
	 * close one waiting connection when there are no descriptors. */
	int reserve;
	double accept_paused_until;
	int fds_logged; /* said once that rank 0 ran out of descriptors */
	char hostname[HOST_MAX];
	char **hosts;	   /* the rank table's names, or NULL */
	char **hello_host; /* per rank, from its hello */

	struct srv_conn **conns;
	size_t nconns, capconns;
	struct srv_conn **by_rank;
	char *left; /* per rank: said goodbye or dropped */

	struct srv_kv *kv;
	size_t nkv, capkv;
	struct srv_get *gets;
	size_t ngets, capgets;
	struct srv_barrier **bars;
	size_t nbars, capbars;
	struct pollfd *pfd; /* the poll loop's: room for nconns + 2 (made with each connection) */
	size_t cappfd;

	/* the rendezvous (OPEN_BARRIER) closes at open_deadline: the server's verdict, the same
	 * for every rank, whatever their own timeouts */
	double open_deadline, open_timeout;

	/* the timeout episode (store_report_timeout) */
	int rep_active;
	double rep_deadline;
	char *reported;
	unsigned long rep_seq;
	char rep_what[64];
	int rep_rank, rep_waiting;
	double rep_timeout;

	char *abort_msg; /* the first abort: the job's verdict */
	int abort_kind;	 /* ABORT_FAILED or ABORT_STOPPED */

	pthread_mutex_t lock; /* guards stop and stop_deadline */
	int stop;
	double stop_deadline;
};

static const char *srv_host(const struct store_server *s, int rank)
{
	if (s->hosts && s->hosts[rank])
		return s->hosts[rank];
	return s->hello_host[rank];
}

static void srv_name(const struct store_server *s, int rank, char *buf, size_t len)
{
	sw_rank_label(buf, len, rank, srv_host(s, rank));
}

/* "rank 2 (n1), rank 3 (n2)" for the ranks with flag[r] == want; returns their number. */
static int srv_rank_list(const struct store_server *s, const char *flag, int want, char *buf,
			 size_t len)
{
	int n = 0;
	size_t at = 0;
	buf[0] = 0;
	for (int r = 0; r < s->world; r++) {
		if ((flag[r] != 0) != want)
			continue;
		n++;
		if (n > 8)
			continue;
		char name[HOST_MAX + 32];
		srv_name(s, r, name, sizeof(name));
		if (at < len)
			at += (size_t)snprintf(buf + at, len - at, "%s%s", n > 1 ? ", " : "", name);
	}
	if (n > 8 && at < len)
		snprintf(buf + at, len - at, " and %d more", n - 8);
	return n;
}

static void srv_send(struct srv_conn *c, struct sbuf *frame)
{
	if (c->dead || frame->bad)
		return;
	sw_sbuf_put(&c->out, frame->p + frame->off, frame->len - frame->off);
	if (c->out.bad || sw_sbuf_flush(&c->out, c->fd) < 0)
		c->dead = 1;
}

static void srv_reply(struct srv_conn *c, uint32_t id, int status, const void *data, size_t n)
{
	struct sbuf f = {0};
	size_t at = sw_frame_begin(&f, MSG_REPLY, id);
	sw_put_u32(&f, (uint32_t)status);
	sw_put_blob(&f, data, n);
	sw_frame_end(&f, at);
	srv_send(c, &f);
	sw_sbuf_free(&f);
}

static void srv_reply_str(struct srv_conn *c, uint32_t id, int status, const char *msg)
{
	srv_reply(c, id, status, msg, strlen(msg));
}

/* Sends the job's abort to c. */
static void srv_send_abort(struct store_server *s, struct srv_conn *c)
{
	struct sbuf f = {0};
	sw_frame_abort(&f, s->abort_msg, s->abort_kind);
	srv_send(c, &f);
	sw_sbuf_free(&f);
}

/* Records the job's first abort (kind: ABORT_FAILED or ABORT_STOPPED) and tells every rank but
 * skip (-1: all). */
static void srv_abort(struct store_server *s, const char *msg, int kind, int skip)
{
	if (s->abort_msg || !(s->abort_msg = strdup(msg)))
		return;
	s->abort_kind = kind;
	for (int r = 0; r < s->world; r++)
		if (r != skip && s->by_rank[r])
			srv_send_abort(s, s->by_rank[r]);
}

static struct srv_kv *srv_kv_find(struct store_server *s, const char *key)
{
	for (size_t i = 0; i < s->nkv; i++)
		if (strcmp(s->kv[i].key, key) == 0)
			return &s->kv[i];
	return NULL;
}

/* Takes val (malloc'd, NUL-terminated past len). */
static int srv_kv_set(struct store_server *s, const char *key, char *val, size_t len)
{
	struct srv_kv *e = srv_kv_find(s, key);
	if (!e) {
		if (SW_ARRAY_ROOM(s->kv, s->nkv, s->capkv, 16) < 0)
			return -1;
		e = &s->kv[s->nkv];
		e->key = strdup(key);
		if (!e->key)
			return -1;
		e->val = NULL;
		s->nkv++;
	}
	free(e->val);
	e->val = val;
	e->len = len;
	/* answer the gets that wait for it */
	for (size_t i = 0; i < s->ngets;) {
		struct srv_get *g = &s->gets[i];
		if (strcmp(g->key, key) != 0) {
			i++;
			continue;
		}
		if (s->by_rank[g->rank])
			srv_reply(s->by_rank[g->rank], g->id, REPLY_OK, val, len);
		free(g->key);
		s->gets[i] = s->gets[--s->ngets];
	}
	return 0;
}

static void srv_barrier_free(struct srv_barrier *b)
{
	if (!b)
		return;
	free(b->name);
	free(b->arrived);
	free(b->waiting);
	free(b->id);
	free(b->deadline);
	free(b->timeout);
	free(b);
}

static void srv_barrier_enter(struct store_server *s, struct srv_conn *c, uint32_t id,
			      const char *name, double timeout)
{
	struct srv_barrier *b = NULL;
	size_t bi;
	for (bi = 0; bi < s->nbars; bi++)
		if (strcmp(s->bars[bi]->name, name) == 0) {
			b = s->bars[bi];
			break;
		}
	if (!b) {
		if (SW_ARRAY_ROOM(s->bars, s->nbars, s->capbars, 8) < 0)
			goto oom;
		size_t w = (size_t)s->world;
		b = calloc(1, sizeof(*b));
		if (!b)
			goto oom;
		b->name = strdup(name);
		b->arrived = calloc(w, 1);
		b->waiting = calloc(w, 1);
		b->id = calloc(w, sizeof(*b->id));
		b->deadline = calloc(w, sizeof(*b->deadline));
		b->timeout = calloc(w, sizeof(*b->timeout));
		if (!b->name || !b->arrived || !b->waiting || !b->id || !b->deadline ||
		    !b->timeout) {
			srv_barrier_free(b);
			goto oom;
		}
		bi = s->nbars;
		s->bars[s->nbars++] = b;
	}
	if (!b->arrived[c->rank]) {
		b->arrived[c->rank] = 1;
		b->count++;
	}
	b->waiting[c->rank] = 1;
	b->id[c->rank] = id;
	if (strcmp(name, OPEN_BARRIER) == 0) { /* rank 0's timeout decides, for everyone */
		b->deadline[c->rank] = s->open_deadline;
		b->timeout[c->rank] = s->open_timeout;
	} else {
		b->deadline[c->rank] = now_s() + timeout;
		b->timeout[c->rank] = timeout;
	}
	if (b->count < s->world)
		return;
	/* the rendezvous barrier tells every rank the others' host names */
	struct sbuf hosts = {0};
	if (strcmp(name, OPEN_BARRIER) == 0)
		for (int r = 0; r < s->world; r++)
			sw_put_str(&hosts, s->hello_host[r] ? s->hello_host[r] : "");
	for (int r = 0; r < s->world; r++)
		if (b->waiting[r] && s->by_rank[r])
			srv_reply(s->by_rank[r], b->id[r], REPLY_OK, hosts.p, hosts.len);
	sw_sbuf_free(&hosts);
	srv_barrier_free(b);
	s->bars[bi] = s->bars[--s->nbars];
	return;
oom:
	srv_reply_str(c, id, REPLY_ERROR, "the store on rank 0 is out of memory");
}

/* The timeout episode's verdict: who did not report. */
static void srv_verdict(struct store_server *s)
{
	char list[2048], waiter[HOST_MAX + 32], waited[HOST_MAX + 32], msg[MSG_MAX + 2048];
	int missing = srv_rank_list(s, s->reported, 0, list, sizeof(list));
	int reporters = s->world - missing;
	srv_name(s, s->rep_rank, waiter, sizeof(waiter));
	srv_name(s, s->rep_waiting, waited, sizeof(waited));
	if (missing > 0)
		snprintf(msg, sizeof(msg),
			 "%s stopped taking part: %d of %d ranks were waiting in a collective (%s "
			 "timed out after %g s in %s #%lu) and %s did not answer (stalled, or "
			 "elsewhere in the program)",
			 list, reporters, s->world, waiter, s->rep_timeout, s->rep_what, s->rep_seq,
			 missing > 1 ? "they" : "it");
	else
		snprintf(msg, sizeof(msg),
			 "all %d ranks timed out after %g s in %s #%lu (%s waiting for %s): "
			 "none stopped, so the connections between them may be stuck",
			 s->world, s->rep_timeout, s->rep_what, s->rep_seq, waiter, waited);
	s->rep_active = 0;
	srv_abort(s, msg, ABORT_FAILED, -1);
}

static void srv_drop(struct store_server *s, struct srv_conn *c)
{
	c->dead = 1;
	if (c->rank < 0)
		return;
	int r = c->rank;
	c->rank = -1;
	s->by_rank[r] = NULL;
	for (size_t i = 0; i < s->ngets;) {
		if (s->gets[i].rank == r) {
			free(s->gets[i].key);
			s->gets[i] = s->gets[--s->ngets];
		} else {
			i++;
		}
	}
	for (size_t i = 0; i < s->nbars; i++)
		s->bars[i]->waiting[r] = 0;
	if (!s->left[r] && !c->goodbye) {
		char name[HOST_MAX + 32], msg[MSG_MAX];
		srv_name(s, r, name, sizeof(name));
		snprintf(msg, sizeof(msg),
			 "%s died (its connection to the rendezvous store closed)", name);
		srv_abort(s, msg, ABORT_FAILED, r);
	}
	s->left[r] = 1;
}

/* Every refused connection is logged on rank 0's stderr (the first REFUSALS_LOGGED of them),
 * with the address it came from; the connection itself learns nothing about the job. */
static void srv_refuse(struct store_server *s, struct srv_conn *c, const char *why)
{
	if (s->refusals < REFUSALS_LOGGED)
		fprintf(
		    stderr, "dptrain: rendezvous: refused a connection to port %d from %s: %s%s\n",
		    s->port, c->peer[0] ? c->peer : "an unknown address", why,
		    s->refusals + 1 == REFUSALS_LOGGED ? " (further refusals are not logged)" : "");
	s->refusals++;
}

/* A rank of a dptrain of another protocol. Protocol 1's hello (MSG_HELLO_V1) carried the
 * secret itself: that one is told which versions met, as a hello of any later version is. */
static void srv_version_refuse(struct store_server *s, struct srv_conn *c, uint32_t id,
			       uint32_t version)
{
	char msg[MSG_MAX];
	snprintf(msg, sizeof(msg),
		 "refused: this rank's dptrain speaks protocol %u, the store's (rank 0's) speaks "
		 "%d: every node must run the same dptrain version",
		 version, STORE_PROTO);
	srv_reply_str(c, id, REPLY_ERROR, msg);
	c->closing = 1;
	snprintf(msg, sizeof(msg), "it speaks protocol %u of the store, not %d (another dptrain)",
		 version, STORE_PROTO);
	srv_refuse(s, c, msg);
}

static void srv_hello(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	uint32_t version = sw_rd_u32(b);
	if (!b->bad && c->rank < 0 && version != STORE_PROTO) {
		srv_version_refuse(s, c, id, version); /* its fields may be laid out otherwise */
		return;
	}
	int rank = (int)sw_rd_u32(b), world = (int)sw_rd_u32(b);
	char *job = sw_rd_strdup(b), *host = sw_rd_strdup(b);
	size_t ncnonce, nproof;
	const unsigned char *cnonce = (const unsigned char *)sw_rd_blob(b, &ncnonce);
	const unsigned char *proof = (const unsigned char *)sw_rd_blob(b, &nproof);
	unsigned char want[DP_SHA256_LEN];
	char msg[MSG_MAX], name[HOST_MAX + 32];
	if (b->bad || c->rank >= 0 || ncnonce != STORE_NONCE) {
		if (c->rank < 0)
			srv_refuse(s, c, "its hello is malformed");
		c->dead = 1;
		goto out;
	}
	/* Before anything is said about the job: a connection that cannot prove it knows the
	 * job's secret is not one of its ranks (another user's program, a port scanner). It is
	 * told only that it was refused. A rank without a secret sends no proof. */
	if (s->secret[0]) {
		sw_auth_hello_mac(s->secret, c->nonce, cnonce, rank, world, job, want);
		if (nproof != sizeof(want) || !dp_equal_ct(proof, want, sizeof(want))) {
			srv_reply_str(c, id, REPLY_ERROR,
				      "refused: not a rank of this job (it lacks the job's secret, "
				      "DPTRAIN_STORE_SECRET, which the launcher gives every rank)");
			c->closing = 1;
			snprintf(msg, sizeof(msg), "it said it was rank %d on '%.*s' but gave %s",
				 rank, HOST_MAX - 1, host, nproof ? "a wrong secret" : "no secret");
			srv_refuse(s, c, msg);
			goto out;
		}
	}
	sw_rank_label(name, sizeof(name), rank, host);
	if (strcmp(job, s->job) != 0)
		snprintf(msg, sizeof(msg),
			 "%s belongs to job '%s' but the store at port %d on %s serves job '%s' "
			 "(two jobs on one MASTER_PORT?)",
			 name, job, s->port, s->hostname, s->job);
	else if (world != s->world)
		snprintf(msg, sizeof(msg),
			 "%s says the job has %d ranks but rank 0 says %d: every rank must be "
			 "started with the same world size",
			 name, world, s->world);
	else if (rank < 0 || rank >= s->world)
		snprintf(msg, sizeof(msg), "rank %d is out of range for a job of %d ranks", rank,
			 s->world);
	else if (s->by_rank[rank])
		snprintf(
		    msg, sizeof(msg),
		    "%s: rank %d is already connected from %s (two ranks with the same number, "
		    "or a leftover process?)",
		    name, rank, s->hello_host[rank] ? s->hello_host[rank] : "?");
	else if (s->left[rank])
		snprintf(msg, sizeof(msg), "%s: rank %d already left this job", name, rank);
	else
		msg[0] = 0;
	if (msg[0]) {
		srv_reply_str(c, id, REPLY_ERROR, msg);
		c->closing = 1;
		goto out;
	}
	c->rank = rank;
	s->by_rank[rank] = c;
	free(s->hello_host[rank]);
	s->hello_host[rank] = host;
	host = NULL;
	/* how long the rendezvous stays open: the rank waits for the verdict, not its own timer;
	 * and the store's proof, without which the rank believes none of it */
	double open_left = s->open_deadline - now_s();
	struct sbuf r = {0};
	sw_put_u64(&r, (uint64_t)(s->open_timeout * 1e3));
	sw_put_u64(&r, (uint64_t)(open_left > 0 ? open_left * 1e3 : 0));
	if (s->secret[0]) {
		sw_auth_ok_mac(s->secret, cnonce, c->nonce, rank, want);
		sw_put_blob(&r, want, sizeof(want));
	} else {
		sw_put_blob(&r, NULL, 0);
	}
	srv_reply(c, id, REPLY_OK, r.p, r.len);
	sw_sbuf_free(&r);
	if (s->abort_msg)
		srv_send_abort(s, c);
out:
	free(job);
	free(host);
}

/* One handler per request a rank may send after its hello. Each reads its fields from b; a
 * malformed request (b->bad) drops the connection. */

static void srv_on_set(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	char *key = sw_rd_strdup(b);
	size_t n;
	const char *v = sw_rd_blob(b, &n);
	char *val = b->bad ? NULL : malloc(n + 1);

	if (val) {
		memcpy(val, v, n);
		val[n] = 0;
	}
	if (b->bad) {
		c->dead = 1;
	} else if (!val || srv_kv_set(s, key, val, n) < 0) {
		free(val);
		srv_reply_str(c, id, REPLY_ERROR, "the store on rank 0 is out of memory");
	} else {
		srv_reply(c, id, REPLY_OK, NULL, 0);
	}
	free(key);
}

/* The value now, or when it is set (srv_kv_set answers the waiting gets), or a timeout. */
static void srv_on_get(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	char *key = sw_rd_strdup(b);
	double timeout = (double)sw_rd_u64(b) / 1e3;
	struct srv_kv *e;

	if (b->bad) {
		c->dead = 1;
		free(key);
		return;
	}
	e = srv_kv_find(s, key);
	if (e) {
		srv_reply(c, id, REPLY_OK, e->val, e->len);
		free(key);
		return;
	}
	if (SW_ARRAY_ROOM(s->gets, s->ngets, s->capgets, 16) < 0) {
		srv_reply_str(c, id, REPLY_ERROR, "the store on rank 0 is out of memory");
		free(key);
		return;
	}
	s->gets[s->ngets++] = (struct srv_get){c->rank, id, key, now_s() + timeout};
}

static void srv_on_add(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	char *key = sw_rd_strdup(b), *val, *end = NULL;
	long delta = (long)(int64_t)sw_rd_u64(b), v = 0;
	struct srv_kv *e;

	if (b->bad) {
		c->dead = 1;
		free(key);
		return;
	}
	e = srv_kv_find(s, key);
	if (e) {
		errno = 0;
		v = strtol(e->val, &end, 10);
		if (errno || end == e->val || *end) {
			char msg[MSG_MAX];
			snprintf(msg, sizeof(msg), "key '%s' does not hold an integer", key);
			srv_reply_str(c, id, REPLY_ERROR, msg);
			free(key);
			return;
		}
	}
	v += delta;
	val = malloc(32);
	if (!val || srv_kv_set(s, key, val, (size_t)snprintf(val, 32, "%ld", v)) < 0) {
		free(val);
		srv_reply_str(c, id, REPLY_ERROR, "the store on rank 0 is out of memory");
	} else {
		struct sbuf r = {0};
		sw_put_u64(&r, (uint64_t)(int64_t)v);
		srv_reply(c, id, REPLY_OK, r.p, r.len);
		sw_sbuf_free(&r);
	}
	free(key);
}

static void srv_on_barrier(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	char *name = sw_rd_strdup(b);
	double timeout = (double)sw_rd_u64(b) / 1e3;

	if (b->bad)
		c->dead = 1;
	else
		srv_barrier_enter(s, c, id, name, timeout);
	free(name);
}

static void srv_on_abort(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	char *reason = sw_rd_strdup(b);
	int kind = (int)sw_rd_u32(b);

	(void)id;
	if (b->bad || (kind != ABORT_FAILED && kind != ABORT_STOPPED))
		c->dead = 1;
	else
		srv_abort(s, reason, kind, c->rank);
	free(reason);
}

/* A rank timed out in a collective (store_report_timeout): the first report starts an episode
 * and asks every other rank to report if it waits too (a roll call); the verdict comes when
 * every rank reported, or at the episode's deadline (srv_timers). */
static void srv_on_report(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	unsigned long seq = (unsigned long)sw_rd_u64(b);
	char *what = sw_rd_strdup(b);
	int waiting = (int)sw_rd_u32(b);
	double timeout = (double)sw_rd_u64(b) / 1e3, grace = (double)sw_rd_u64(b) / 1e3;

	(void)id;
	if (b->bad || waiting < 0 || waiting >= s->world) {
		c->dead = 1;
	} else if (s->abort_msg) {
		srv_send_abort(s, c);
	} else {
		if (!s->rep_active) {
			s->rep_active = 1;
			s->rep_deadline = now_s() + grace;
			memset(s->reported, 0, (size_t)s->world);
			s->rep_seq = seq;
			snprintf(s->rep_what, sizeof(s->rep_what), "%s", what);
			s->rep_rank = c->rank;
			s->rep_waiting = waiting;
			s->rep_timeout = timeout;
			/* the others' timers fire when they fire: ask who waits too */
			struct sbuf f = {0};
			size_t at = sw_frame_begin(&f, MSG_ROLLCALL, 0);
			sw_put_u64(&f, seq);
			sw_put_str(&f, what);
			sw_frame_end(&f, at);
			for (int r = 0; r < s->world; r++)
				if (r != c->rank && s->by_rank[r])
					srv_send(s->by_rank[r], &f);
			sw_sbuf_free(&f);
		}
		s->reported[c->rank] = 1;
		if (memchr(s->reported, 0, (size_t)s->world) == NULL)
			srv_verdict(s);
	}
	free(what);
}

static void srv_on_goodbye(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	(void)b;
	c->goodbye = 1;
	s->left[c->rank] = 1;
	srv_reply(c, id, REPLY_OK, NULL, 0);
}

typedef void (*srv_handler)(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b);
static const srv_handler srv_handlers[] = {
    [MSG_SET] = srv_on_set,	    [MSG_GET] = srv_on_get,	[MSG_ADD] = srv_on_add,
    [MSG_BARRIER] = srv_on_barrier, [MSG_ABORT] = srv_on_abort, [MSG_REPORT] = srv_on_report,
    [MSG_GOODBYE] = srv_on_goodbye,
};

static void srv_request(struct store_server *s, struct srv_conn *c, int type, uint32_t id,
			struct rd *b)
{
	if (type == MSG_HELLO) {
		srv_hello(s, c, id, b);
		return;
	}
	if (type == MSG_HELLO_V1 && c->rank < 0) {
		srv_version_refuse(s, c, id, 1);
		return;
	}
	if (c->rank < 0) { /* nothing but a hello before the hello */
		srv_refuse(s, c, "it sent something other than a dptrain hello");
		c->dead = 1;
		return;
	}
	if (type < 0 || (size_t)type >= sizeof(srv_handlers) / sizeof(srv_handlers[0]) ||
	    !srv_handlers[type]) {
		c->dead = 1; /* not a request (a reply, a roll call) or not one we know */
		return;
	}
	srv_handlers[type](s, c, id, b);
}

/* A rank's requests: whatever arrived, in order. */
static void srv_read(struct store_server *s, struct srv_conn *c)
{
	int rc = sw_sbuf_fill(&c->in, c->fd);
	for (;;) {
		int type;
		uint32_t id;
		struct rd body;
		int f = sw_frame_next(&c->in, &type, &id, &body);
		if (f < 0)
			c->dead = 1;
		if (f <= 0 || c->dead || c->closing)
			break;
		srv_request(s, c, type, id, &body);
	}
	if (rc < 0)
		c->dead = 1;
}

/* A stranger's first frame, which must be its hello: read to the frame's length and not a
 * byte further (what a rank sends after its hello is read as a rank's, by srv_read), into a
 * buffer of that length, after the length was checked. So a stranger costs rank 0 at most
 * PREAUTH_FRAME_MAX bytes, and one that announces more is dropped before its body is read. */
static void srv_read_preauth(struct store_server *s, struct srv_conn *c)
{
	char why[128];
	while (c->rank < 0 && !c->dead && !c->closing) {
		int head = c->nhead < sizeof(c->head);
		unsigned char *to = head ? c->head + c->nhead : c->body + c->nbody;
		size_t want = head ? sizeof(c->head) - c->nhead : c->lbody - c->nbody;
		ssize_t n = recv(c->fd, to, want, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) { /* gone before its hello: a port probe, nothing to log */
			c->dead = 1;
			return;
		}
		if (head) {
			c->nhead += (size_t)n;
			if (c->nhead < sizeof(c->head))
				continue;
			uint32_t be;
			memcpy(&be, c->head, 4);
			size_t len = ntohl(be);
			if (len < FRAME_HEAD - 4 || len > FRAME_MAX) {
				srv_refuse(s, c, "it does not speak the dptrain store's protocol");
				c->dead = 1;
				return;
			}
			if (len > PREAUTH_FRAME_MAX - 4) {
				snprintf(
				    why, sizeof(why),
				    "its first frame is %zu bytes, more than the %d a hello may be",
				    len + 4, PREAUTH_FRAME_MAX);
				srv_refuse(s, c, why);
				c->dead = 1;
				return;
			}
			c->body = malloc(len);
			if (!c->body) {
				c->dead = 1;
				return;
			}
			c->lbody = len;
			c->nbody = 0;
			continue;
		}
		c->nbody += (size_t)n;
		if (c->nbody < c->lbody)
			continue;
		uint32_t be;
		memcpy(&be, c->body + 1, 4);
		struct rd body = {c->body + FRAME_HEAD - 4, c->lbody - (FRAME_HEAD - 4), 0, 0};
		srv_request(s, c, c->body[0], ntohl(be), &body);
		free(c->body);
		c->body = NULL;
		c->nhead = c->nbody = c->lbody = 0;
	}
	if (c->rank >= 0 && !c->dead && !c->closing)
		srv_read(s, c); /* what it sent after its hello */
}

/* The rendezvous closed with ranks missing: every rank waiting in it gets the same list, and
 * it becomes the job's verdict, so that a rank leaving over it is not reported as dead. */
static void srv_open_verdict(struct store_server *s, struct srv_barrier *b)
{
	char list[2048], msg[MSG_MAX + 2048];
	int missing = srv_rank_list(s, b->arrived, 0, list, sizeof(list));
	struct sbuf d = {0};
	sw_put_u32(&d, (uint32_t)missing);
	sw_put_str(&d, list);
	for (int r = 0; r < s->world; r++) {
		if (!b->waiting[r])
			continue;
		b->waiting[r] = 0;
		if (s->by_rank[r])
			srv_reply(s->by_rank[r], b->id[r], REPLY_TIMEOUT, d.p, d.len);
	}
	sw_sbuf_free(&d);
	snprintf(msg, sizeof(msg), "rendezvous: %d of %d ranks did not connect within %g s: %s",
		 missing, s->world, s->open_timeout, list);
	srv_abort(s, msg, ABORT_FAILED, -1);
}

/* Answers the gets and barrier waits whose deadline passed; ends a timeout episode. Returns
 * the next deadline. */
static double srv_timers(struct store_server *s)
{
	double t = now_s(), next = t + 1.0;
	for (size_t i = 0; i < s->ngets;) {
		struct srv_get *g = &s->gets[i];
		if (g->deadline > t) {
			next = g->deadline < next ? g->deadline : next;
			i++;
			continue;
		}
		if (s->by_rank[g->rank])
			srv_reply(s->by_rank[g->rank], g->id, REPLY_TIMEOUT, NULL, 0);
		free(g->key);
		s->gets[i] = s->gets[--s->ngets];
	}
	for (size_t i = 0; i < s->nbars; i++) {
		struct srv_barrier *b = s->bars[i];
		if (strcmp(b->name, OPEN_BARRIER) == 0) {
			if (s->open_deadline > t)
				next = s->open_deadline < next ? s->open_deadline : next;
			else
				srv_open_verdict(s, b);
			continue;
		}
		for (int r = 0; r < s->world; r++) {
			if (!b->waiting[r])
				continue;
			if (b->deadline[r] > t) {
				next = b->deadline[r] < next ? b->deadline[r] : next;
				continue;
			}
			/* it stays arrived: the message of a later timeout names only the
			 * ranks that never came */
			b->waiting[r] = 0;
			if (!s->by_rank[r])
				continue;
			char list[2048];
			int missing = srv_rank_list(s, b->arrived, 0, list, sizeof(list));
			struct sbuf d = {0};
			sw_put_u32(&d, (uint32_t)missing);
			sw_put_str(&d, list);
			srv_reply(s->by_rank[r], b->id[r], REPLY_TIMEOUT, d.p, d.len);
			sw_sbuf_free(&d);
		}
	}
	if (s->rep_active) {
		if (s->rep_deadline <= t)
			srv_verdict(s);
		else
			next = s->rep_deadline < next ? s->rep_deadline : next;
	}
	return next;
}

/* "addr:port" ("[v6]:port") of a peer; IPv4-mapped IPv6 addresses as IPv4. */
static void peer_name(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";
	int port = 0, v6 = 0;
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
		if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
			inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], a, sizeof(a));
		} else {
			inet_ntop(AF_INET6, &a6->sin6_addr, a, sizeof(a));
			v6 = 1;
		}
		port = ntohs(a6->sin6_port);
	} else if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a4 = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &a4->sin_addr, a, sizeof(a));
		port = ntohs(a4->sin_port);
	}
	snprintf(buf, len, v6 ? "[%s]:%d" : "%s:%d", a, port);
}

static void srv_conn_free(struct srv_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->body);
	sw_sbuf_free(&c->in);
	sw_sbuf_free(&c->out);
	free(c);
}

/* Drops a stranger now, its descriptor and buffers too (the loop frees the rest). */
static void srv_drop_stranger(struct srv_conn *c)
{
	c->dead = 1;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->body);
	c->body = NULL;
	sw_sbuf_free(&c->out);
}

/* Room for one more stranger: 1, or 0 when there is none yet. While preauth_max wait already,
 * the oldest goes once it has had PREAUTH_GRACE_S to say its hello (it is read first: a rank is
 * never dropped for being read late); until then the listener rests, and new connections
 * wait in its backlog rather than push out one that may be a rank about to speak. */
static int srv_make_room(struct store_server *s)
{
	for (;;) {
		struct srv_conn *old = NULL;
		size_t waiting = 0;
		for (size_t i = 0; i < s->nconns; i++) {
			struct srv_conn *c = s->conns[i];
			if (c->rank >= 0 || c->dead)
				continue;
			waiting++;
			if (!old || c->seq < old->seq)
				old = c;
		}
		if (waiting < s->preauth_max)
			return 1;
		if (!old->closing) {
			srv_read_preauth(s, old);
			if (old->rank >= 0 || old->dead)
				continue;
		}
		if (now_s() < old->taken + PREAUTH_GRACE_S) {
			s->accept_paused_until = old->taken + PREAUTH_GRACE_S;
			return 0;
		}
		char why[160];
		snprintf(why, sizeof(why),
			 "it had not sent its hello, and %zu connections were waiting to send "
			 "theirs (a flood? the oldest goes)",
			 waiting);
		if (!old->closing)
			srv_refuse(s, old, why);
		srv_drop_stranger(old);
	}
}

/* accept() failed for want of descriptors, and the listener stays readable: the loop would
 * spin. The reserve descriptor is given up to accept the oldest waiting connection and close
 * it (it learns that it is refused, not left hanging), and the listener rests a while. */
static void srv_out_of_fds(struct store_server *s, int e)
{
	if (!s->fds_logged)
		fprintf(
		    stderr,
		    "dptrain: rendezvous: rank 0 is out of file descriptors (accept on port %d: "
		    "%s): it turns connections away for now; if ranks cannot connect, raise the "
		    "limit (ulimit -n)\n",
		    s->port, strerror(e));
	s->fds_logged = 1;
	if (s->reserve >= 0) {
		close(s->reserve);
		s->reserve = -1;
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			close(fd);
		s->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	s->accept_paused_until = now_s() + ACCEPT_PAUSE_S;
}

/* Takes the waiting connections while there is room (at most preauth_max in one go, so the
 * loop runs between) and sends each its challenge. */
static void srv_accept(struct store_server *s)
{
	if (s->reserve < 0) /* given up while out of descriptors: take it back when one is free */
		s->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	for (size_t k = 0; k < s->preauth_max && srv_make_room(s); k++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				srv_out_of_fds(s, errno);
			return;
		}
		/* the poll loop's array has room for every connection, the wake-up pipe and the
		 * listening socket: made here, so that loop never allocates */
		if (SW_ARRAY_ROOM(s->conns, s->nconns, s->capconns, 16) < 0 ||
		    SW_ARRAY_ROOM(s->pfd, s->nconns + 2, s->cappfd, 18) < 0) {
			close(fd);
			return;
		}
		struct srv_conn *c = calloc(1, sizeof(*c));
		struct dp_error err;
		if (!c || dp_random(c->nonce, sizeof(c->nonce), &err) < 0) {
			free(c);
			close(fd);
			return;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		c->rank = -1;
		c->taken = now_s();
		c->hello_by = c->taken + HELLO_ANSWER_S;
		c->seq = ++s->accepted;
		peer_name(&ss, c->peer, sizeof(c->peer));
		s->conns[s->nconns++] = c;
		struct sbuf f = {0};
		size_t at = sw_frame_begin(&f, MSG_CHALLENGE, 0);
		sw_put_u32(&f, STORE_PROTO);
		sw_put_blob(&f, c->nonce, sizeof(c->nonce));
		sw_put_u32(&f, s->secret[0] ? CHALLENGE_SECRET : 0);
		sw_frame_end(&f, at);
		srv_send(c, &f);
		sw_sbuf_free(&f);
	}
}

static void *srv_main(void *arg)
{
	struct store_server *s = arg;
	for (;;) {
		/* room for nconns + 2: made with each connection (and at the start) */
		struct pollfd *pfd = s->pfd;
		double next = srv_timers(s);
		pthread_mutex_lock(&s->lock);
		int stop = s->stop;
		double stop_deadline = s->stop_deadline;
		pthread_mutex_unlock(&s->lock);
		if (stop) {
			if (memchr(s->left, 0, (size_t)s->world) == NULL ||
			    now_s() >= stop_deadline)
				break;
			next = stop_deadline < next ? stop_deadline : next;
		}
		pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
		/* out of descriptors: the listener rests (a negative fd is not polled) */
		int paused = now_s() < s->accept_paused_until;
		pfd[1] = (struct pollfd){.fd = paused ? -1 : s->lfd, .events = POLLIN};
		if (paused)
			next = s->accept_paused_until < next ? s->accept_paused_until : next;
		for (size_t i = 0; i < s->nconns; i++) {
			struct srv_conn *c = s->conns[i];
			/* a refused connection is only told why: what it sends is not read */
			pfd[2 + i] =
			    (struct pollfd){.fd = c->fd, .events = c->closing ? 0 : POLLIN};
			if (c->out.off < c->out.len)
				pfd[2 + i].events |= POLLOUT;
		}
		size_t n = s->nconns;
		if (poll(pfd, n + 2, ms_until(next)) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents) {
			char buf[64];
			while (read(s->wake[0], buf, sizeof(buf)) > 0)
				;
		}
		for (size_t i = 0; i < n; i++) {
			struct srv_conn *c = s->conns[i];
			short re = pfd[2 + i].revents;
			if (((re & POLLOUT) && sw_sbuf_flush(&c->out, c->fd) < 0) ||
			    ((re & (POLLHUP | POLLERR)) && c->closing))
				c->dead = 1;
			if ((re & (POLLIN | POLLHUP | POLLERR)) && !c->dead && c->rank < 0)
				srv_read_preauth(s, c);
			else if ((re & (POLLIN | POLLHUP | POLLERR)) && !c->dead)
				srv_read(s, c);
		}
		if (pfd[1].revents)
			srv_accept(s);
		/* drop the dead, and refused connections once told why */
		for (size_t i = 0; i < s->nconns;) {
			struct srv_conn *c = s->conns[i];
			if (c->closing && !c->dead && c->out.off == c->out.len)
				c->dead = 1;
			if (c->rank < 0 && !c->dead && now_s() > c->hello_by) {
				if (!c->closing)
					srv_refuse(s, c, "it sent no hello within 10 s");
				c->dead = 1;
			}
			if (!c->dead) {
				i++;
				continue;
			}
			srv_drop(s, c);
			srv_conn_free(c);
			s->conns[i] = s->conns[--s->nconns];
		}
	}
	return NULL;
}

static void srv_free(struct store_server *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nconns; i++)
		srv_conn_free(s->conns[i]);
	free(s->conns);
	for (size_t i = 0; i < s->nkv; i++) {
		free(s->kv[i].key);
		free(s->kv[i].val);
	}
	free(s->kv);
	for (size_t i = 0; i < s->ngets; i++)
		free(s->gets[i].key);
	free(s->gets);
	for (size_t i = 0; i < s->nbars; i++)
		srv_barrier_free(s->bars[i]);
	free(s->bars);
	if (s->hosts)
		for (int r = 0; r < s->world; r++)
			free(s->hosts[r]);
	free(s->hosts);
	if (s->hello_host)
		for (int r = 0; r < s->world; r++)
			free(s->hello_host[r]);
	free(s->hello_host);
	free(s->by_rank);
	free(s->left);
	free(s->reported);
	free(s->abort_msg);
	free(s->job);
	free(s->secret);
	free(s->pfd);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->reserve >= 0)
		close(s->reserve);
	if (s->wake[0] >= 0)
		close(s->wake[0]);
	if (s->wake[1] >= 0)
		close(s->wake[1]);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Binds the port on the address the ranks were told (MASTER_ADDR) when that is an IP address
 * of this host: a store for a job on one node's loopback is not reachable from the network.
 * Returns the socket, -2 if addr is not an address of this host, -1 with err otherwise. */
static int srv_listen_addr(int port, const char *addr, const char *host, struct dp_error *err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1;
	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		ss.ss_family = AF_INET;
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
		len = sizeof(struct sockaddr_in);
	} else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		ss.ss_family = AF_INET6;
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
		len = sizeof(struct sockaddr_in6);
	} else {
		return -2;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errprintf(err, "rendezvous: socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) == 0 && listen(fd, SOMAXCONN) == 0)
		return fd;
	int e = errno;
	close(fd);
	if (e == EADDRNOTAVAIL)
		return -2;
	if (e == EADDRINUSE)
		return errprintf(
		    err,
		    "rendezvous: port %d on %s (%s) is already in use (another job, or a "
		    "stale process?): pick another MASTER_PORT or wait",
		    port, host, addr);
	return errprintf(err, "rendezvous: cannot listen on %s port %d on %s: %s", addr, port, host,
			 strerror(e));
}

/* Binds the port on MASTER_ADDR (above), or, when that is a host name or not an address of
 * this host, on every address: IPv6 with IPv4 mapped where the host has IPv6. */
static int srv_listen(int port, const char *addr, const char *host, struct dp_error *err)
{
	int one = 1, zero = 0, e = 0;
	int fd0 = srv_listen_addr(port, addr, host, err);
	if (fd0 != -2)
		return fd0;
	for (int pass = 0; pass < 2; pass++) {
		int fd = socket(pass == 0 ? AF_INET6 : AF_INET,
				SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			e = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		int rc;
		if (pass == 0) {
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
			struct sockaddr_in6 a = {.sin6_family = AF_INET6,
						 .sin6_port = htons((uint16_t)port),
						 .sin6_addr = in6addr_any};
			rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
		} else {
			struct sockaddr_in a = {.sin_family = AF_INET,
						.sin_port = htons((uint16_t)port),
						.sin_addr.s_addr = htonl(INADDR_ANY)};
			rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
		}
		if (rc == 0 && listen(fd, SOMAXCONN) == 0)
			return fd;
		e = errno;
		close(fd);
		if (e == EADDRINUSE)
			break;
	}
	if (e == EADDRINUSE)
		return errprintf(
		    err,
		    "rendezvous: port %d on %s is already in use (another job, or a stale "
		    "process?): pick another MASTER_PORT or wait",
		    port, host);
	return errprintf(err, "rendezvous: cannot listen on port %d on %s: %s", port, host,
			 strerror(e));
}

int srv_start(struct store_server **out, const struct store_opts *o, double timeout_s,
	      struct dp_error *err)
{
	struct store_server *s = calloc(1, sizeof(*s));
	size_t w = (size_t)o->world_size;
	int rv = -1;
	if (!s)
		return errprintf(err, "rendezvous: out of memory");
	s->lfd = s->wake[0] = s->wake[1] = -1;
	pthread_mutex_init(&s->lock, NULL);
	s->world = o->world_size;
	s->preauth_max = PREAUTH_PENDING + w;
	/* a descriptor in hand for when there are none: see srv_out_of_fds */
	s->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	s->port = o->master_port;
	s->open_timeout = timeout_s;
	s->open_deadline = now_s() + timeout_s;
	if (gethostname(s->hostname, sizeof(s->hostname)) < 0)
		snprintf(s->hostname, sizeof(s->hostname), "localhost");
	s->hostname[sizeof(s->hostname) - 1] = 0;
	s->job = strdup(o->job ? o->job : "");
	s->secret = strdup(o->secret ? o->secret : "");
	s->by_rank = calloc(w, sizeof(*s->by_rank));
	s->left = calloc(w, 1);
	s->reported = calloc(w, 1);
	s->hello_host = calloc(w, sizeof(*s->hello_host));
	if (!s->job || !s->secret || !s->by_rank || !s->left || !s->reported || !s->hello_host ||
	    SW_ARRAY_ROOM(s->pfd, 2, s->cappfd, 18) < 0) {
		errprintf(err, "rendezvous: out of memory");
		goto out;
	}
	if (o->hosts) {
		s->hosts = calloc(w, sizeof(*s->hosts));
		if (!s->hosts) {
			errprintf(err, "rendezvous: out of memory");
			goto out;
		}
		for (size_t r = 0; r < w; r++)
			if (o->hosts[r] && !(s->hosts[r] = strdup(o->hosts[r]))) {
				errprintf(err, "rendezvous: out of memory");
				goto out;
			}
	}
	if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
		errprintf(err, "rendezvous: pipe: %s", strerror(errno));
		goto out;
	}
	s->lfd = srv_listen(o->master_port, o->master_addr, s->hostname, err);
	if (s->lfd < 0)
		goto out;
	if (!s->secret[0])
		dp_warn("dptrain", "rendezvous",
			"no secret (DPTRAIN_STORE_SECRET is not set): the store on port %d accepts "
			"any program that can reach that port, as PyTorch's TCPStore does; srun "
			"--dptrain and dptrain-run give the ranks a secret",
			s->port);
	int e = pthread_create(&s->thread, NULL, srv_main, s);
	if (e) {
		errprintf(err, "rendezvous: cannot start the store thread: %s", strerror(e));
		goto out;
	}
	*out = s;
	s = NULL;
	rv = 0;
out:
	srv_free(s);
	return rv;
}

/* Lets the server run until every rank said goodbye (or dropped), or the deadline. */
void srv_stop(struct store_server *s, double timeout_s)
{
	pthread_mutex_lock(&s->lock);
	s->stop = 1;
	s->stop_deadline = now_s() + timeout_s;
	pthread_mutex_unlock(&s->lock);
	char c = 1;
	if (write(s->wake[1], &c, 1) < 0) {
		/* the pipe is full: the server wakes anyway */
	}
	pthread_join(s->thread, NULL);
	srv_free(s);
}
