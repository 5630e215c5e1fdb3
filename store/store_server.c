/* store_server.c — rank 0's rendezvous server (store.h): one thread, one epoll loop over the
 * listening socket, the clients and a wake-up pipe; the keys, gets, barriers, the job's
 * liveness verdicts and the refusal of strangers, within bounds a flood of them cannot pass.
 * What a request costs does not grow with the job: a key is found by its hash, a get waits on
 * its key, every deadline is in one heap, strangers queue by age, and the loop visits only the
 * connections that have something to say (store_server_steps counts the steps). The protocol
 * is store_wire.h. */
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Descriptors rank 0 wants besides one per rank and stranger (FD_SPARE: its own connection,
 * the listener, epoll, the wake-up pipe, the reserve, stdio and the files of the program
 * around the store), and needs at least besides one per rank (FD_NEED). */
#define FD_SPARE   64
#define FD_NEED	   16
#define EVENTS_MAX 256	      /* epoll events taken per wait */
#define SBUF_KEEP  (64 << 10) /* an emptied buffer larger than this is given back */

/* ---------------------------------------------------------------------------------------
 * The server: one thread of rank 0, one epoll loop over the listening socket, the clients
 * and a wake-up pipe; every wait in it is a deadline in that loop. */

struct srv_conn {
	struct store_server *srv;
	int fd;				  /* -1 once closed (a stranger dropped to make room) */
	int rank;			  /* -1 until its hello was accepted */
	size_t idx;			  /* its place in srv->conns */
	uint32_t events;		  /* what epoll watches fd for */
	char peer[INET6_ADDRSTRLEN + 8];  /* "addr:port" of the other end, for the refusal log */
	double taken;			  /* when it was accepted */
	double hello_by;		  /* a connection without a hello by then is dropped */
	unsigned char nonce[STORE_NONCE]; /* the challenge it was sent */
	/* Strangers (no hello accepted yet, not dead) queue in the order they were taken
	 * (srv->oldest ... srv->newest): the oldest goes first, and is the first whose hello
	 * is due. */
	struct srv_conn *older, *newer;
	int queued;
	/* Until its hello is accepted (srv_read_preauth): its first frame, read to its length
	 * and no further, a length over PREAUTH_FRAME_MAX refused before a byte of it is read. */
	unsigned char head[4];
	size_t nhead;
	unsigned char *body;
	size_t nbody, lbody;
	struct sbuf in, out; /* in: once it is a rank */
	int want_hosts;	     /* its rendezvous barrier asked for every rank's host name */
	int goodbye;
	int closing; /* close once out is flushed (a refused hello) */
	int dead;    /* listed in srv->dead, freed at the end of the loop's round */
	struct srv_conn *next_dead;
};

/* A key, or one that gets wait for (val NULL until it is set). */
struct srv_kv {
	char *key;
	uint64_t hash;
	char *val;
	size_t len;
	int waiters; /* the first get waiting for it (an index in srv->getv), -1: none */
};

/* A get waiting for its key: a slot of srv->getv, which indices (not pointers) name. */
struct srv_get {
	int rank;     /* -1: a free slot */
	uint32_t id;  /* the request's */
	uint32_t gen; /* uses of the slot: a deadline of an earlier use does not match */
	struct srv_kv *kv;
	int prev, next; /* the key's waiters; next also chains the free slots */
};

/* A deadline in srv->heap: a get's (its slot and gen) or a rank's wait in a barrier (the
 * barrier's serial and the rank). One whose wait ended some other way stays until it comes
 * up, and is then skipped. */
enum { TIMER_GET, TIMER_BARRIER };
struct srv_timer {
	double at;
	int kind;
	int index;	   /* the get's slot, or the rank */
	unsigned long tag; /* the get's gen, or the barrier's serial */
};

struct srv_barrier {
	char *name;
	unsigned long serial; /* which barrier of that name (a name may be used again) */
	int open;	      /* OPEN_BARRIER: its deadline is the rendezvous' */
	int count;
	char *arrived;	  /* per rank */
	char *waiting;	  /* per rank: a reply is owed */
	uint32_t *id;	  /* per rank */
	double *deadline; /* per rank */
	double *timeout;  /* per rank, for the message */
	char *missing;	  /* the ranks that did not arrive, for a timeout's message, */
	int missing_at;	  /* as they were at this count */
};

/* Rank 0's server. Every field belongs to the server thread (srv_main and what it calls)
 * once that thread runs, except `lock` and what it guards (stop, stop_deadline: set by
 * store_close on the rank's own thread), wake[1] (written by that thread to wake the loop)
 * and steps (read by store_server_steps). srv_start fills the rest before the thread starts;
 * srv_free runs after it ended. */
struct store_server {
	int lfd, ep;
	int wake[2];
	int listening; /* the listener is watched (not while accepting rests) */
	pthread_t thread;
	int world, port;
	char *job;
	char *secret; /* the job's secret ("" = none): a hello without it is refused */
	int refusals; /* refused connections logged so far (at most REFUSALS_LOGGED) */
	/* Strangers: at most preauth_max at once, the oldest dropped for a new one. */
	size_t preauth_max, nstrangers;
	struct srv_conn *oldest, *newest;
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
	struct srv_conn *dead; /* killed this round: dropped and freed at its end */
	struct srv_conn **by_rank;
	char *left; /* per rank: said goodbye or dropped */
	int nleft;

	uint64_t seed;	    /* of the keys' hash */
	struct srv_kv **kv; /* open addressing, at most half full; cap a power of two */
	size_t nkv, capkv;
	struct srv_get *getv;
	size_t capget;
	int getfree; /* the first free slot, -1: none */
	struct srv_timer *heap;
	size_t nheap, capheap;
	struct srv_barrier **bars;
	size_t nbars, capbars;
	unsigned long barriers; /* made so far: the next one's serial */

	/* the rendezvous (OPEN_BARRIER) closes at open_deadline: the server's verdict, the same
	 * for every rank, whatever their own timeouts */
	double open_deadline, open_timeout;
	int open_judged; /* it closed with ranks missing */

	/* the timeout episode (store_report_timeout) */
	int rep_active;
	double rep_deadline;
	char *reported;
	int nreported;
	unsigned long rep_seq;
	char rep_what[64];
	int rep_rank, rep_waiting;
	double rep_timeout;

	char *abort_msg; /* the first abort: the job's verdict */
	int abort_kind;	 /* ABORT_FAILED or ABORT_STOPPED */

	atomic_ulong steps; /* store_server_steps */

	pthread_mutex_t lock; /* guards stop and stop_deadline */
	int stop;
	double stop_deadline;
};

/* One elementary step of the server: a key compared, a waiter answered, a deadline or a
 * stranger looked at, an event handled. */
static void step(struct store_server *s)
{
	atomic_fetch_add_explicit(&s->steps, 1, memory_order_relaxed);
}

unsigned long srv_steps(const struct store_server *s)
{
	return atomic_load_explicit(&s->steps, memory_order_relaxed);
}

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

/* ---------------------------------------------------------------------------------------
 * Connections: killed where something fails, freed at the end of the loop's round (an event
 * of this round may still name them); what a connection is sent goes out at once, and only
 * what its socket does not take waits in its buffer, watched for room. */

static void srv_unqueue(struct store_server *s, struct srv_conn *c)
{
	if (!c->queued)
		return;
	if (c->older)
		c->older->newer = c->newer;
	else
		s->oldest = c->newer;
	if (c->newer)
		c->newer->older = c->older;
	else
		s->newest = c->older;
	c->older = c->newer = NULL;
	c->queued = 0;
	s->nstrangers--;
}

static void srv_kill(struct srv_conn *c)
{
	struct store_server *s = c->srv;
	if (c->dead)
		return;
	c->dead = 1;
	srv_unqueue(s, c);
	c->next_dead = s->dead;
	s->dead = c;
}

/* A buffer emptied: a large one is given back (a 16 MiB value must not stay with its rank). */
static void srv_trim(struct sbuf *b)
{
	if (b->off == b->len && b->cap > SBUF_KEEP)
		sw_sbuf_free(b);
}

/* epoll watches for what c waits for: a request (unless it is closing), room for its output. */
static void srv_watch(struct srv_conn *c)
{
	if (c->dead || c->fd < 0)
		return;
	uint32_t want = (c->closing ? 0 : EPOLLIN) | (c->out.off < c->out.len ? EPOLLOUT : 0);
	if (want == c->events)
		return;
	struct epoll_event ev = {.events = want, .data.ptr = c};
	if (epoll_ctl(c->srv->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) {
		srv_kill(c);
		return;
	}
	c->events = want;
}

/* Sends the n pieces of one frame: what the socket takes now, the rest through out. */
static void srv_sendv(struct srv_conn *c, struct iovec *iov, int n)
{
	size_t sent = 0;
	if (c->dead || c->fd < 0)
		return;
	if (c->out.off == c->out.len) {
		struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t k;
		do
			k = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (k < 0 && errno == EINTR);
		if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			srv_kill(c);
			return;
		}
		sent = k > 0 ? (size_t)k : 0;
	}
	for (int i = 0; i < n; i++) {
		size_t skip = sent < iov[i].iov_len ? sent : iov[i].iov_len;
		sent -= skip;
		if (skip < iov[i].iov_len)
			sw_sbuf_put(&c->out, (const char *)iov[i].iov_base + skip,
				    iov[i].iov_len - skip);
	}
	if (c->out.bad)
		srv_kill(c);
	srv_watch(c);
}

static void srv_send(struct srv_conn *c, struct sbuf *frame)
{
	if (frame->bad)
		return;
	struct iovec iov = {frame->p + frame->off, frame->len - frame->off};
	srv_sendv(c, &iov, 1);
}

/* A REPLY: its head built here, the data sent from where it is (a value is not copied). */
static void srv_reply(struct srv_conn *c, uint32_t id, int status, const void *data, size_t n)
{
	unsigned char head[FRAME_HEAD + 8];
	uint32_t be;
	be = htonl((uint32_t)(sizeof(head) - 4 + n));
	memcpy(head, &be, 4);
	head[4] = MSG_REPLY;
	be = htonl(id);
	memcpy(head + 5, &be, 4);
	be = htonl((uint32_t)status);
	memcpy(head + 9, &be, 4);
	be = htonl((uint32_t)n);
	memcpy(head + 13, &be, 4);
	struct iovec iov[2] = {{head, sizeof(head)}, {(void *)data, n}};
	srv_sendv(c, iov, n ? 2 : 1);
}

static void srv_reply_str(struct srv_conn *c, uint32_t id, int status, const char *msg)
{
	srv_reply(c, id, status, msg, strlen(msg));
}

/* After c's event: a refused connection that has been told why is closed. */
static void srv_settle(struct srv_conn *c)
{
	if (!c->dead && c->closing && c->out.off == c->out.len)
		srv_kill(c);
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

static void srv_leave(struct store_server *s, int rank)
{
	if (!s->left[rank]) {
		s->left[rank] = 1;
		s->nleft++;
	}
}

/* ---------------------------------------------------------------------------------------
 * Deadlines: one binary heap, earliest first. */

static int srv_timer_push(struct store_server *s, double at, int kind, int index, unsigned long tag)
{
	if (SW_ARRAY_ROOM(s->heap, s->nheap, s->capheap, 64) < 0)
		return -1;
	size_t i = s->nheap++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		step(s);
		if (s->heap[up].at <= at)
			break;
		s->heap[i] = s->heap[up];
		i = up;
	}
	s->heap[i] = (struct srv_timer){at, kind, index, tag};
	return 0;
}

static struct srv_timer srv_timer_pop(struct store_server *s)
{
	struct srv_timer top = s->heap[0], last = s->heap[--s->nheap];
	size_t i = 0, n = s->nheap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && s->heap[c + 1].at < s->heap[c].at)
			c++;
		step(s);
		if (last.at <= s->heap[c].at)
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (n)
		s->heap[i] = last;
	return top;
}

/* ---------------------------------------------------------------------------------------
 * Keys: a hash table (open addressing, linear probing, at most half full), each key with the
 * gets that wait for it. */

static uint64_t srv_hash(const struct store_server *s, const char *key)
{
	uint64_t h = 14695981039346656037ull ^ s->seed; /* FNV-1a, seeded */
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return h ^ (h >> 29);
}

static int srv_kv_grow(struct store_server *s)
{
	size_t cap = s->capkv ? 2 * s->capkv : 64;
	struct srv_kv **kv = calloc(cap, sizeof(*kv));
	if (!kv)
		return -1;
	for (size_t i = 0; i < s->capkv; i++) {
		struct srv_kv *e = s->kv[i];
		if (!e)
			continue;
		size_t j = e->hash & (cap - 1);
		while (kv[j])
			j = (j + 1) & (cap - 1);
		kv[j] = e;
	}
	free(s->kv);
	s->kv = kv;
	s->capkv = cap;
	return 0;
}

/* key's entry; with create, a new one (no value yet) where there is none. NULL: none, or no
 * memory for it. */
static struct srv_kv *srv_kv_lookup(struct store_server *s, const char *key, int create)
{
	uint64_t h = srv_hash(s, key);
	size_t i = 0;
	if (s->capkv) {
		for (i = h & (s->capkv - 1);; i = (i + 1) & (s->capkv - 1)) {
			struct srv_kv *e = s->kv[i];
			step(s);
			if (!e)
				break;
			if (e->hash == h && strcmp(e->key, key) == 0)
				return e;
		}
	}
	if (!create)
		return NULL;
	if (2 * (s->nkv + 1) > s->capkv) {
		if (srv_kv_grow(s) < 0)
			return NULL;
		for (i = h & (s->capkv - 1); s->kv[i]; i = (i + 1) & (s->capkv - 1))
			;
	}
	struct srv_kv *e = calloc(1, sizeof(*e));
	if (!e || !(e->key = strdup(key))) {
		free(e);
		return NULL;
	}
	e->hash = h;
	e->waiters = -1;
	s->kv[i] = e;
	s->nkv++;
	return e;
}

/* A free slot of getv (which may move: hold indices, not pointers, across this), or -1. */
static int srv_get_new(struct store_server *s)
{
	if (s->getfree < 0) {
		size_t cap = s->capget ? 2 * s->capget : 64;
		struct srv_get *g = cap <= INT32_MAX ? realloc(s->getv, cap * sizeof(*g)) : NULL;
		if (!g)
			return -1;
		for (size_t i = s->capget; i < cap; i++)
			g[i] = (struct srv_get){.rank = -1, .next = i + 1 < cap ? (int)i + 1 : -1};
		s->getfree = (int)s->capget;
		s->getv = g;
		s->capget = cap;
	}
	int i = s->getfree;
	s->getfree = s->getv[i].next;
	return i;
}

/* Ends get i: off its key's waiters, its slot free (and its deadline stale). */
static void srv_get_end(struct store_server *s, int i)
{
	struct srv_get *g = &s->getv[i];
	if (g->prev >= 0)
		s->getv[g->prev].next = g->next;
	else
		g->kv->waiters = g->next;
	if (g->next >= 0)
		s->getv[g->next].prev = g->prev;
	g->rank = -1;
	g->gen++;
	g->kv = NULL;
	g->next = s->getfree;
	s->getfree = i;
}

/* Takes val (malloc'd, NUL-terminated past len). */
static int srv_kv_set(struct store_server *s, const char *key, char *val, size_t len)
{
	struct srv_kv *e = srv_kv_lookup(s, key, 1);
	if (!e)
		return -1;
	free(e->val);
	e->val = val;
	e->len = len;
	/* answer the gets that wait for it */
	while (e->waiters >= 0) {
		struct srv_get *g = &s->getv[e->waiters];
		step(s);
		if (s->by_rank[g->rank])
			srv_reply(s->by_rank[g->rank], g->id, REPLY_OK, val, len);
		srv_get_end(s, e->waiters);
	}
	return 0;
}

/* A get's deadline came: a timeout, unless it was answered (or its slot used again). */
static void srv_get_expired(struct store_server *s, const struct srv_timer *t)
{
	struct srv_get *g = &s->getv[t->index];
	if (g->rank < 0 || g->gen != (uint32_t)t->tag)
		return;
	if (s->by_rank[g->rank])
		srv_reply(s->by_rank[g->rank], g->id, REPLY_TIMEOUT, NULL, 0);
	srv_get_end(s, t->index);
}

/* ---------------------------------------------------------------------------------------
 * Barriers. */

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
	free(b->missing);
	free(b);
}

static struct srv_barrier *srv_barrier_find(struct store_server *s, const char *name, size_t *at)
{
	for (size_t i = 0; i < s->nbars; i++) {
		step(s);
		if (strcmp(s->bars[i]->name, name) == 0) {
			*at = i;
			return s->bars[i];
		}
	}
	return NULL;
}

/* The ranks that did not arrive, for a timeout's message: made again only when more came. */
static const char *srv_barrier_missing(struct store_server *s, struct srv_barrier *b)
{
	char list[2048];
	if (b->missing && b->missing_at == b->count)
		return b->missing;
	srv_rank_list(s, b->arrived, 0, list, sizeof(list));
	free(b->missing);
	b->missing = strdup(list);
	b->missing_at = b->count;
	return b->missing ? b->missing : "";
}

/* rank's wait in b ends in a timeout: it stays arrived (the message of a later timeout names
 * only the ranks that never came). */
static void srv_barrier_timeout(struct store_server *s, struct srv_barrier *b, int rank)
{
	b->waiting[rank] = 0;
	if (!s->by_rank[rank])
		return;
	struct sbuf d = {0};
	sw_put_u32(&d, (uint32_t)(s->world - b->count));
	sw_put_str(&d, srv_barrier_missing(s, b));
	srv_reply(s->by_rank[rank], b->id[rank], d.bad ? REPLY_ERROR : REPLY_TIMEOUT, d.p, d.len);
	sw_sbuf_free(&d);
}

static void srv_barrier_expired(struct store_server *s, const struct srv_timer *t)
{
	for (size_t i = 0; i < s->nbars; i++) {
		struct srv_barrier *b = s->bars[i];
		step(s);
		if (b->serial != t->tag)
			continue;
		if (b->waiting[t->index] && b->deadline[t->index] == t->at)
			srv_barrier_timeout(s, b, t->index);
		return;
	}
}

/* Every rank arrived: each that waits is answered; the rendezvous barrier's answer holds
 * every rank's host name for the ranks that asked (those without a rank table). */
static void srv_barrier_done(struct store_server *s, struct srv_barrier *b, size_t at)
{
	struct sbuf hosts = {0};
	int built = 0;
	for (int r = 0; r < s->world; r++) {
		struct srv_conn *c = s->by_rank[r];
		step(s);
		if (!b->waiting[r] || !c)
			continue;
		if (b->open && c->want_hosts && !built) {
			for (int h = 0; h < s->world; h++)
				sw_put_str(&hosts, s->hello_host[h] ? s->hello_host[h] : "");
			built = 1;
		}
		if (b->open && c->want_hosts && hosts.bad)
			srv_reply_str(c, b->id[r], REPLY_ERROR,
				      "the store on rank 0 is out of memory");
		else if (b->open && c->want_hosts)
			srv_reply(c, b->id[r], REPLY_OK, hosts.p, hosts.len);
		else
			srv_reply(c, b->id[r], REPLY_OK, NULL, 0);
	}
	sw_sbuf_free(&hosts);
	srv_barrier_free(b);
	s->bars[at] = s->bars[--s->nbars];
}

static void srv_barrier_enter(struct store_server *s, struct srv_conn *c, uint32_t id,
			      const char *name, double timeout)
{
	size_t bi = 0;
	struct srv_barrier *b = srv_barrier_find(s, name, &bi);
	if (!b) {
		if (SW_ARRAY_ROOM(s->bars, s->nbars, s->capbars, 8) < 0)
			goto oom;
		size_t w = (size_t)s->world;
		b = calloc(1, sizeof(*b));
		if (!b)
			goto oom;
		b->name = strdup(name);
		b->serial = ++s->barriers;
		b->open = strcmp(name, OPEN_BARRIER) == 0;
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
	if (b->open) { /* rank 0's timeout decides, for everyone */
		b->deadline[c->rank] = s->open_deadline;
		b->timeout[c->rank] = s->open_timeout;
		if (s->open_judged) { /* it closed before this rank came */
			srv_barrier_timeout(s, b, c->rank);
			return;
		}
	} else {
		b->deadline[c->rank] = now_s() + timeout;
		b->timeout[c->rank] = timeout;
		if (srv_timer_push(s, b->deadline[c->rank], TIMER_BARRIER, c->rank, b->serial) <
		    0) {
			b->waiting[c->rank] = 0;
			goto oom;
		}
	}
	if (b->count == s->world)
		srv_barrier_done(s, b, bi);
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

/* A connection is gone (freed next): its rank, if it had one, left; without its goodbye it
 * died, and every other rank is told. Its gets stay until their key or deadline comes, and
 * are then not answered: a rank that left never comes back (s->left). */
static void srv_drop(struct store_server *s, struct srv_conn *c)
{
	if (c->rank < 0)
		return;
	int r = c->rank;
	c->rank = -1;
	s->by_rank[r] = NULL;
	for (size_t i = 0; i < s->nbars; i++)
		s->bars[i]->waiting[r] = 0;
	if (!s->left[r] && !c->goodbye) {
		char name[HOST_MAX + 32], msg[MSG_MAX];
		srv_name(s, r, name, sizeof(name));
		snprintf(msg, sizeof(msg),
			 "%s died (its connection to the rendezvous store closed)", name);
		srv_abort(s, msg, ABORT_FAILED, r);
	}
	srv_leave(s, r);
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
		srv_kill(c);
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
	srv_unqueue(s, c);
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
		srv_kill(c);
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
	int i;

	if (b->bad) {
		srv_kill(c);
		free(key);
		return;
	}
	e = srv_kv_lookup(s, key, 1);
	free(key);
	if (e && e->val) {
		srv_reply(c, id, REPLY_OK, e->val, e->len);
		return;
	}
	if (!e || (i = srv_get_new(s)) < 0) {
		srv_reply_str(c, id, REPLY_ERROR, "the store on rank 0 is out of memory");
		return;
	}
	s->getv[i] = (struct srv_get){c->rank, id, s->getv[i].gen, e, -1, e->waiters};
	if (e->waiters >= 0)
		s->getv[e->waiters].prev = i;
	e->waiters = i;
	if (srv_timer_push(s, now_s() + timeout, TIMER_GET, i, s->getv[i].gen) < 0) {
		srv_get_end(s, i);
		srv_reply_str(c, id, REPLY_ERROR, "the store on rank 0 is out of memory");
	}
}

static void srv_on_add(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	char *key = sw_rd_strdup(b), *val, *end = NULL;
	long delta = (long)(int64_t)sw_rd_u64(b), v = 0;
	struct srv_kv *e;

	if (b->bad) {
		srv_kill(c);
		free(key);
		return;
	}
	e = srv_kv_lookup(s, key, 0);
	if (e && e->val) {
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
	/* the flags, which a rank of an earlier build of this protocol does not send: it reads
	 * the host names from the rendezvous barrier's answer */
	uint32_t flags = b->off < b->n ? sw_rd_u32(b) : BARRIER_HOSTS;

	if (b->bad) {
		srv_kill(c);
	} else {
		c->want_hosts = (flags & BARRIER_HOSTS) != 0;
		srv_barrier_enter(s, c, id, name, timeout);
	}
	free(name);
}

static void srv_on_abort(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	char *reason = sw_rd_strdup(b);
	int kind = (int)sw_rd_u32(b);

	(void)id;
	if (b->bad || (kind != ABORT_FAILED && kind != ABORT_STOPPED))
		srv_kill(c);
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
		srv_kill(c);
	} else if (s->abort_msg) {
		srv_send_abort(s, c);
	} else {
		if (!s->rep_active) {
			s->rep_active = 1;
			s->rep_deadline = now_s() + grace;
			memset(s->reported, 0, (size_t)s->world);
			s->nreported = 0;
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
		if (!s->reported[c->rank]) {
			s->reported[c->rank] = 1;
			s->nreported++;
		}
		if (s->nreported == s->world)
			srv_verdict(s);
	}
	free(what);
}

static void srv_on_goodbye(struct store_server *s, struct srv_conn *c, uint32_t id, struct rd *b)
{
	(void)b;
	c->goodbye = 1;
	srv_leave(s, c->rank);
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
		srv_kill(c);
		return;
	}
	if (type < 0 || (size_t)type >= sizeof(srv_handlers) / sizeof(srv_handlers[0]) ||
	    !srv_handlers[type]) {
		srv_kill(c); /* not a request (a reply, a roll call) or not one we know */
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
			srv_kill(c);
		if (f <= 0 || c->dead || c->closing)
			break;
		srv_request(s, c, type, id, &body);
	}
	if (rc < 0)
		srv_kill(c);
	srv_trim(&c->in);
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
			srv_kill(c);
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
				srv_kill(c);
				return;
			}
			if (len > PREAUTH_FRAME_MAX - 4) {
				snprintf(
				    why, sizeof(why),
				    "its first frame is %zu bytes, more than the %d a hello may be",
				    len + 4, PREAUTH_FRAME_MAX);
				srv_refuse(s, c, why);
				srv_kill(c);
				return;
			}
			c->body = malloc(len);
			if (!c->body) {
				srv_kill(c);
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
 * it becomes the job's verdict, so that a rank leaving over it is not reported as dead. A rank
 * that comes later is told the same at once (srv_barrier_enter). */
static void srv_open_verdict(struct store_server *s, struct srv_barrier *b)
{
	char msg[MSG_MAX + 2048];
	s->open_judged = 1;
	for (int r = 0; r < s->world; r++)
		if (b->waiting[r])
			srv_barrier_timeout(s, b, r);
	snprintf(msg, sizeof(msg), "rendezvous: %d of %d ranks did not connect within %g s: %s",
		 s->world - b->count, s->world, s->open_timeout, srv_barrier_missing(s, b));
	srv_abort(s, msg, ABORT_FAILED, -1);
}

/* Answers the gets and barrier waits whose deadline passed, closes the rendezvous, drops the
 * strangers whose hello is overdue, ends a timeout episode. Returns the next deadline. */
static double srv_timers(struct store_server *s)
{
	double t = now_s(), next = t + 1.0;
	while (s->nheap && s->heap[0].at <= t) {
		struct srv_timer e = srv_timer_pop(s);
		step(s);
		if (e.kind == TIMER_GET)
			srv_get_expired(s, &e);
		else
			srv_barrier_expired(s, &e);
	}
	if (s->nheap && s->heap[0].at < next)
		next = s->heap[0].at;
	if (!s->open_judged)
		for (size_t i = 0; i < s->nbars; i++) {
			struct srv_barrier *b = s->bars[i];
			if (!b->open)
				continue;
			if (s->open_deadline > t)
				next = s->open_deadline < next ? s->open_deadline : next;
			else
				srv_open_verdict(s, b);
		}
	/* the oldest stranger's hello is the first due */
	while (s->oldest && s->oldest->hello_by < t) {
		struct srv_conn *c = s->oldest;
		step(s);
		if (!c->closing)
			srv_refuse(s, c, "it sent no hello within 10 s");
		srv_kill(c);
	}
	if (s->oldest && s->oldest->hello_by < next)
		next = s->oldest->hello_by;
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
	if (c->fd >= 0) {
		/* out of the epoll set first: a forked child may hold the socket open */
		epoll_ctl(c->srv->ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	free(c->body);
	sw_sbuf_free(&c->in);
	sw_sbuf_free(&c->out);
	free(c);
}

/* The connections killed this round: their ranks dropped (which may kill others: a failed
 * send of the abort), then freed. */
static void srv_reap(struct store_server *s)
{
	while (s->dead) {
		struct srv_conn *c = s->dead;
		s->dead = c->next_dead;
		srv_drop(s, c);
		s->conns[c->idx] = s->conns[--s->nconns];
		s->conns[c->idx]->idx = c->idx;
		srv_conn_free(c);
	}
}

/* Drops a stranger now, its descriptor and buffers too (srv_reap frees the rest). */
static void srv_drop_stranger(struct srv_conn *c)
{
	srv_kill(c);
	if (c->fd >= 0) {
		epoll_ctl(c->srv->ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
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
	while (s->nstrangers >= s->preauth_max) {
		struct srv_conn *old = s->oldest;
		step(s);
		if (!old->closing) {
			srv_read_preauth(s, old);
			srv_settle(old);
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
			 s->nstrangers);
		if (!old->closing)
			srv_refuse(s, old, why);
		srv_drop_stranger(old);
	}
	return 1;
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
		    "%s): it turns connections away for now; if ranks cannot connect, raise its "
		    "limit of open files (RLIMIT_NOFILE: ulimit -n)\n",
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
		struct srv_conn *c = NULL;
		struct dp_error err;
		struct epoll_event ev = {.events = EPOLLIN};
		if (SW_ARRAY_ROOM(s->conns, s->nconns, s->capconns, 16) < 0 ||
		    !(c = calloc(1, sizeof(*c))) ||
		    dp_random(c->nonce, sizeof(c->nonce), &err) < 0 ||
		    (ev.data.ptr = c, epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) < 0)) {
			free(c);
			close(fd);
			return;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->srv = s;
		c->fd = fd;
		c->rank = -1;
		c->events = EPOLLIN;
		c->taken = now_s();
		c->hello_by = c->taken + HELLO_ANSWER_S;
		peer_name(&ss, c->peer, sizeof(c->peer));
		c->idx = s->nconns;
		s->conns[s->nconns++] = c;
		/* the newest stranger */
		c->older = s->newest;
		if (s->newest)
			s->newest->newer = c;
		else
			s->oldest = c;
		s->newest = c;
		c->queued = 1;
		s->nstrangers++;
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

/* One connection's events. */
static void srv_event(struct store_server *s, struct srv_conn *c, uint32_t re)
{
	step(s);
	if (c->dead)
		return;
	if (re & EPOLLOUT) {
		if (sw_sbuf_flush(&c->out, c->fd) < 0) {
			srv_kill(c);
			return;
		}
		srv_trim(&c->out);
		srv_watch(c);
	}
	if ((re & (EPOLLHUP | EPOLLERR)) && c->closing)
		srv_kill(c);
	if ((re & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !c->dead && !c->closing) {
		if (c->rank < 0)
			srv_read_preauth(s, c);
		else
			srv_read(s, c);
	}
	srv_settle(c);
}

/* The listener is watched, or rests (out of descriptors, or of room for strangers). */
static void srv_listen_watch(struct store_server *s, int on)
{
	struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = &s->lfd};
	if (on != s->listening && epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &ev) == 0)
		s->listening = on;
}

static void *srv_main(void *arg)
{
	struct store_server *s = arg;
	struct epoll_event ev[EVENTS_MAX];
	for (;;) {
		double next = srv_timers(s);
		srv_reap(s);
		pthread_mutex_lock(&s->lock);
		int stop = s->stop;
		double stop_deadline = s->stop_deadline;
		pthread_mutex_unlock(&s->lock);
		if (stop) {
			if (s->nleft == s->world || now_s() >= stop_deadline)
				break;
			next = stop_deadline < next ? stop_deadline : next;
		}
		int paused = now_s() < s->accept_paused_until;
		srv_listen_watch(s, !paused);
		if (paused)
			next = s->accept_paused_until < next ? s->accept_paused_until : next;
		int n = epoll_wait(s->ep, ev, EVENTS_MAX, ms_until(next));
		if (n < 0 && errno != EINTR)
			break;
		int accept = 0;
		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr == &s->wake[0]) {
				char buf[64];
				while (read(s->wake[0], buf, sizeof(buf)) > 0)
					;
			} else if (ev[i].data.ptr == &s->lfd) {
				accept = 1;
			} else {
				srv_event(s, ev[i].data.ptr, ev[i].events);
			}
		}
		if (accept)
			srv_accept(s);
		srv_reap(s);
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
	for (size_t i = 0; i < s->capkv; i++)
		if (s->kv[i]) {
			free(s->kv[i]->key);
			free(s->kv[i]->val);
			free(s->kv[i]);
		}
	free(s->kv);
	free(s->getv);
	free(s->heap);
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
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->ep >= 0)
		close(s->ep);
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

/* Rank 0 holds a descriptor per rank, and room for the strangers that may wait besides: where
 * its soft limit of open files is lower, it is raised to the hard limit. Where even that
 * cannot hold the ranks, the rendezvous could never complete: an error that says what to do. */
static int srv_fd_room(const struct store_server *s, struct dp_error *err)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)s->preauth_max + FD_SPARE, need = (rlim_t)s->world + FD_NEED;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur >= want)
		return 0;
	if (rl.rlim_max > rl.rlim_cur) {
		struct rlimit up = rl;
		up.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &up) < 0) { /* a hard limit beyond fs.nr_open */
			up.rlim_cur = want;
			setrlimit(RLIMIT_NOFILE, &up);
		}
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur >= need)
		return 0;
	return errprintf(
	    err,
	    "rendezvous: rank 0's store holds a connection to each of the %d ranks, but this "
	    "process may open only %llu files (RLIMIT_NOFILE, its hard limit; %llu needed): raise "
	    "the hard limit where the job starts (ulimit -Hn in the shell that runs srun, with "
	    "Slurm's PropagateResourceLimits; LimitNOFILE= in slurmd's systemd unit; "
	    "/etc/security/limits.conf)",
	    s->world, (unsigned long long)rl.rlim_cur, (unsigned long long)need);
}

int srv_start(struct store_server **out, const struct store_opts *o, double timeout_s,
	      struct dp_error *err)
{
	struct store_server *s = calloc(1, sizeof(*s));
	size_t w = (size_t)o->world_size;
	int rv = -1;
	if (!s)
		return errprintf(err, "rendezvous: out of memory");
	s->lfd = s->ep = s->wake[0] = s->wake[1] = -1;
	s->getfree = -1;
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
	if (!s->job || !s->secret || !s->by_rank || !s->left || !s->reported || !s->hello_host) {
		errprintf(err, "rendezvous: out of memory");
		goto out;
	}
	if (dp_random(&s->seed, sizeof(s->seed), err) < 0) {
		errprefix(err, "rendezvous");
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
	if (srv_fd_room(s, err) < 0)
		goto out;
	if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
		errprintf(err, "rendezvous: pipe: %s", strerror(errno));
		goto out;
	}
	s->lfd = srv_listen(o->master_port, o->master_addr, s->hostname, err);
	if (s->lfd < 0)
		goto out;
	struct epoll_event wake = {.events = EPOLLIN, .data.ptr = &s->wake[0]};
	struct epoll_event lis = {.events = EPOLLIN, .data.ptr = &s->lfd};
	if ((s->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    epoll_ctl(s->ep, EPOLL_CTL_ADD, s->wake[0], &wake) < 0 ||
	    epoll_ctl(s->ep, EPOLL_CTL_ADD, s->lfd, &lis) < 0) {
		errprintf(err, "rendezvous: epoll: %s", strerror(errno));
		goto out;
	}
	s->listening = 1;
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
