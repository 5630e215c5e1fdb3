/* alloc_pmix.c — the allocation from PMIx: every rank publishes its own host, address, node
 * id, local rank and GPU (peers' PMIX_NODEID/PMIX_LOCAL_RANK are not trusted: Slurm before
 * 25.05 lacks them), one fence collects them all. Every wait has a deadline of our own, since
 * Slurm's server ignores PMIX_TIMEOUT once a fence has left the node. Owns the PMIx session
 * from PMIx_Init to PMIx_Finalize; must not run inside slurmstepd, whose PMIx server shares
 * the library: a client call there hangs (see dptrain(8)). */
#define _GNU_SOURCE /* qsort_r, pipe2, mkostemp */
#include "common/clock.h"
#include "common/error.h"
#include "common/env.h"
#include "common/slurm_step.h"
#include "common/secret.h"
#include "launcher/alloc_source.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HAVE_PMIX

int alloc_pmix_present(void)
{
	return 0;
}

int alloc_from_pmix(struct alloc *a, const struct alloc_opts *o, struct dp_error *err)
{
	(void)a;
	(void)o;
	errprintf(err, "this dptrain-launch was built without PMIx (Debian: libpmix-dev); "
		       "use DPTRAIN_SOURCE=slurm or srun --mpi=none");
	return -1;
}

int alloc_pmix_gate(struct alloc *a, int timeout_s, struct dp_error *err)
{
	(void)a;
	(void)timeout_s;
	(void)err;

	return 0;
}

int alloc_pmix_sync(struct alloc *a, int timeout_s, struct dp_error *err)
{
	(void)a;
	(void)timeout_s;
	(void)err;

	return 0;
}

void alloc_pmix_finish(struct alloc *a)
{
	(void)a;
}

int alloc_pmix_abort(struct alloc *a, int status, const char *msg, struct dp_error *err)
{
	(void)a;
	(void)status;
	(void)msg;
	errprintf(err, "built without PMIx: cannot end the step");
	return -1;
}

#else

#include <errno.h>
#include <pmix.h>
#include <pthread.h>
#include <time.h>

#define KEY_RANK      "dptrain.rank"   /* alloc_record_format's */
#define KEY_READY     "dptrain.ready"  /* published after the rank table is written */
#define KEY_GATE      "dptrain.gate"   /* published once rank 0 holds the output directory */
#define KEY_SECRET    "dptrain.secret" /* rank 0's, where the tasks' environment had none */
#define PROBE_S	      1 /* how long a rank that missed a fence gets to answer a Get */
#define NEAR_FIRST_S  2 /* how long rank 0 waits for its node's ranks before asking about others */
#define ABORT_SLACK_S 5 /* rank 0's time to name the missing ranks after its deadline */

struct alloc_pmix {
	pmix_proc_t me;
	pmix_proc_t all;   /* the whole namespace: PMIX_RANK_WILDCARD */
	double fence_took; /* seconds the last fence() took, for messages */
	double abort_at;   /* CLOCK_MONOTONIC time before which this rank does not end the step */
};

/* "timed out after 300 s", or "failed (WHY) after 0.2 s": a fence that failed early says so. */
static void fence_outcome(const struct alloc_pmix *s, const char *why, int timeout_s, char *buf,
			  size_t len)
{
	if (strcmp(why, "timed out") == 0)
		snprintf(buf, len, "timed out after %d s", timeout_s);
	else
		snprintf(buf, len, "failed (%s) after %.1f s", why, s->fence_took);
}

/* One outstanding non-blocking call. PMIx may read the proc and the info array after the _nb
 * call returns, so they live on the heap with the batch, not on the caller's stack. */
struct op {
	int done;
	pmix_status_t status;
	char *value; /* a Get's string, strdup'ed in the callback */
	pmix_proc_t proc;
	double at; /* when it finished (now_s) */
};

struct batch {
	struct batch *next; /* abandoned batches stay listed: late callbacks may write them */
	int n;
	pmix_info_t info[2]; /* shared by all ops of the batch */
	struct op op[];
};

/* The module's one context: callbacks arrive on PMIx's progress thread. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct batch *abandoned;
} px = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL};

int alloc_pmix_present(void)
{
	return getenv(ENV_PMIX_RANK) && getenv(ENV_PMIX_NAMESPACE);
}

static struct batch *batch_new(int n)
{
	return calloc(1, sizeof(struct batch) + (size_t)n * sizeof(struct op));
}

static void op_finish(struct op *op, pmix_status_t st, char *value)
{
	pthread_mutex_lock(&px.mu);
	op->status = st;
	op->value = value;
	op->at = now_s();
	op->done = 1;
	pthread_cond_broadcast(&px.cv);
	pthread_mutex_unlock(&px.mu);
}

static void fence_cb(pmix_status_t st, void *cbdata)
{
	op_finish(cbdata, st, NULL);
}

static void get_cb(pmix_status_t st, pmix_value_t *kv, void *cbdata)
{
	char *v = NULL;

	if (st == PMIX_SUCCESS) {
		if (kv && kv->type == PMIX_STRING && kv->data.string)
			v = strdup(kv->data.string);
		if (!v)
			st = PMIX_ERR_BAD_PARAM;
	}
	/* libpmix 4.2 hands the value of a PMIx_Get_nb over to the callback (measured: it leaks
	 * otherwise), unlike the blocking PMIx_Get's, which the caller frees. */
	if (kv)
		PMIX_VALUE_RELEASE(kv);
	op_finish(cbdata, st, v);
}

/* Wait until every op of b is done or `secs` pass; returns how many are not done. */
static int batch_settle(struct batch *b, int secs)
{
	struct timespec ts;
	int i, left, rc = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += secs;
	pthread_mutex_lock(&px.mu);
	for (;;) {
		for (left = 0, i = 0; i < b->n; i++)
			left += !b->op[i].done;
		if (left == 0 || rc == ETIMEDOUT)
			break;
		rc = pthread_cond_timedwait(&px.cv, &px.mu, &ts);
	}
	pthread_mutex_unlock(&px.mu);
	return left;
}

/* Leave b to late callbacks: listed, never freed. Call under px.mu. */
static void batch_abandon_locked(struct batch *b)
{
	b->next = px.abandoned;
	px.abandoned = b;
}

static void batch_free(struct batch *b);

/* Done with b: freed when every op is done, else abandoned to late callbacks. */
static void batch_release(struct batch *b)
{
	int i, left = 0;

	if (!b)
		return;
	pthread_mutex_lock(&px.mu);
	for (i = 0; i < b->n; i++)
		left += !b->op[i].done;
	if (left)
		batch_abandon_locked(b);
	pthread_mutex_unlock(&px.mu);
	if (!left)
		batch_free(b);
}

/* Wait until every op of b is done or `secs` pass. Returns 1 when all are done; 0 leaves b
 * to late callbacks (it is listed as abandoned and must not be freed). */
static int batch_wait(struct batch *b, int secs)
{
	int left = batch_settle(b, secs);

	if (left) {
		pthread_mutex_lock(&px.mu);
		batch_abandon_locked(b);
		pthread_mutex_unlock(&px.mu);
	}
	return left == 0;
}

static void batch_free(struct batch *b)
{
	int i;

	if (!b)
		return;
	for (i = 0; i < b->n; i++)
		free(b->op[i].value);
	free(b);
}

/* Fence over the namespace. 0, or -1 with *why: "timed out" / PMIx's error. */
static int fence(struct alloc_pmix *s, int collect, int timeout_s, const char **why)
{
	struct batch *b = batch_new(1);
	bool yes = collect ? true : false;
	int secs = timeout_s, ok, rv = -1;
	pmix_status_t rc;

	double t0 = now_s();

	*why = "out of memory";
	s->fence_took = 0;
	if (!b)
		return -1;
	b->n = 1;
	b->op[0].proc = s->all;
	PMIX_INFO_LOAD(&b->info[0], PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
	PMIX_INFO_LOAD(&b->info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
	rc = PMIx_Fence_nb(&b->op[0].proc, 1, b->info, 2, fence_cb, &b->op[0]);
	if (rc == PMIX_OPERATION_SUCCEEDED) {
		batch_free(b);
		return 0;
	}
	if (rc != PMIX_SUCCESS) {
		*why = PMIx_Error_string(rc);
		batch_free(b);
		return -1;
	}
	/* One second more than the server's own timeout, which fires where it works. */
	ok = batch_wait(b, timeout_s + 1);
	s->fence_took = now_s() - t0;
	if (!ok) {
		*why = "timed out";
		return -1;
	}
	if (b->op[0].status == PMIX_SUCCESS)
		rv = 0;
	else if (b->op[0].status == PMIX_ERR_TIMEOUT)
		*why = "timed out";
	else
		*why = PMIx_Error_string(b->op[0].status);
	batch_free(b);
	return rv;
}

/* Post a Get of `key` of each of the n ranks in `ranks` (NULL: ranks 0..n-1) at once, each
 * with PMIX_TIMEOUT get_s; the values arrive in op[i].value. NULL on allocation failure. */
static struct batch *gather_post(struct alloc_pmix *s, const char *key, const int *ranks, int n,
				 int get_s)
{
	struct batch *b = batch_new(n);
	pmix_status_t rc;
	int i;

	if (!b)
		return NULL;
	b->n = n;
	PMIX_INFO_LOAD(&b->info[0], PMIX_TIMEOUT, &get_s, PMIX_INT);
	for (i = 0; i < n; i++) {
		struct op *op = &b->op[i];
		PMIX_LOAD_PROCID(&op->proc, s->me.nspace, (pmix_rank_t)(ranks ? ranks[i] : i));
		rc = PMIx_Get_nb(&op->proc, key, b->info, 1, get_cb, op);
		if (rc != PMIX_SUCCESS)
			op_finish(op, rc, NULL);
	}
	return b;
}

/* Get `key` of every rank at once, each with PMIX_TIMEOUT get_s, all within wait_s. Returns
 * the batch (values in op[r].value), or NULL on allocation failure. *all_done says whether
 * every Get finished; if not, the batch is abandoned and only read under px.mu. */
static struct batch *gather(struct alloc_pmix *s, const char *key, int n, int get_s, int wait_s,
			    int *all_done)
{
	struct batch *b = gather_post(s, key, NULL, n, get_s);

	*all_done = b ? batch_wait(b, wait_s) : 0;
	return b;
}

/* The ranks on this node (PMIX_LOCAL_PEERS, "0,1,2"), into a new array; -1 if not given. Asked
 * of the server (it answers at once: this is before any fence), not PMIX_OPTIONAL: with the
 * hash store the ranks use (PMIX_MCA_gds=hash, dptrain(8)) the key is not in the client's
 * cache, and an optional Get answered NOT-FOUND (Slurm 22.05, PMIx 4.2), so rank 0 asked about
 * every rank at once and named its own node's ranks as missing when the server got stuck. */
static int local_peers(struct alloc_pmix *s, int world, int **out)
{
	pmix_info_t info[2];
	pmix_value_t *v = NULL;
	bool yes = true;
	const char *p;
	char *end;
	int *r = NULL, n = 0, secs = PROBE_S;
	long x;

	*out = NULL;
	PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &secs, PMIX_INT);
	PMIX_INFO_LOAD(&info[1], PMIX_NODE_INFO, &yes, PMIX_BOOL);
	if (PMIx_Get(&s->all, PMIX_LOCAL_PEERS, info, 2, &v) != PMIX_SUCCESS || !v ||
	    v->type != PMIX_STRING || !v->data.string || !(r = malloc((size_t)world * sizeof(int))))
		goto fail;
	for (p = v->data.string; *p;) {
		errno = 0;
		x = strtol(p, &end, 10);
		if (end == p || errno || x < 0 || x >= world || n >= world ||
		    (*end != ',' && *end != '\0'))
			goto fail;
		r[n++] = (int)x;
		p = *end ? end + 1 : end;
	}
	PMIX_VALUE_RELEASE(v);
	*out = r;
	return n;
fail:
	if (v)
		PMIX_VALUE_RELEASE(v);
	free(r);
	return -1;
}

/* Who arrived at a fence, learnt beside it, from Gets posted before it: a Get is answered once
 * that rank has published `key`, whatever becomes of the fence. Rank 0 asks about every rank,
 * another rank about rank 0 only (n Gets in all, not n*n).
 *
 * A probe made after a failed fence cannot tell this, nor can Gets posted all at once: Slurm's
 * PMIx server answers nothing for half a minute while it retries sending to a node whose step
 * has ended (measured with Slurm 22.05: 31 s; the fence, or a Get of a rank there, sends), so
 * ranks that had arrived were named as missing. Rank 0 therefore asks about its own node's
 * ranks first (answered by the node's server, no network), and about the others once its
 * node's ranks have answered, or after NEAR_FIRST_S; where the server gets stuck all the same,
 * the message says so (server_answers). */
struct watch {
	struct batch *near; /* rank 0: its node's ranks; another rank: rank 0 */
	struct batch *far;  /* rank 0: every other rank */
};

/* Post the watch; returns the seconds spent waiting for rank 0's node (to be taken off the
 * fence's timeout). On allocation failure the watch is partly or wholly empty: no names. */
static int watch_start(struct alloc_pmix *s, struct watch *w, const char *key, int world,
		       int timeout_s)
{
	int *near = NULL, *far = NULL, nnear, nfar = 0, r, i, zero = 0;
	double t0 = now_s();

	memset(w, 0, sizeof(*w));
	if (s->me.rank != 0) {
		w->near = gather_post(s, key, &zero, 1, timeout_s + 1);
		return 0;
	}
	nnear = local_peers(s, world, &near);
	if (nnear < 0) {
		/* no node list: ask about every rank at once */
		w->far = gather_post(s, key, NULL, world, timeout_s + 1);
		return 0;
	}
	w->near = gather_post(s, key, near, nnear, timeout_s + 1);
	if (w->near)
		batch_settle(w->near, timeout_s < NEAR_FIRST_S ? timeout_s : NEAR_FIRST_S);
	far = malloc((size_t)world * sizeof(int));
	if (far) {
		for (r = 0; r < world; r++) {
			for (i = 0; i < nnear && near[i] != r; i++)
				;
			if (i == nnear)
				far[nfar++] = r;
		}
		if (nfar)
			w->far = gather_post(s, key, far, nfar, timeout_s + 1);
	}
	free(near);
	free(far);
	return (int)(now_s() - t0);
}

/* After a successful fence the watch is not needed: freed, or left to its late callbacks. */
static void watch_end(struct watch *w)
{
	batch_release(w->near);
	batch_release(w->far);
}

/* A peer's host for a message: job-level data the server gave us at init (local, no wait). */
static void peer_host(struct alloc_pmix *s, int r, char *buf, size_t len)
{
	pmix_proc_t p;
	pmix_info_t info;
	pmix_value_t *v = NULL;
	bool yes = true;

	snprintf(buf, len, "?");
	PMIX_LOAD_PROCID(&p, s->me.nspace, (pmix_rank_t)r);
	PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &yes, PMIX_BOOL);
	if (PMIx_Get(&p, PMIX_HOSTNAME, &info, 1, &v) == PMIX_SUCCESS && v &&
	    v->type == PMIX_STRING && v->data.string)
		snprintf(buf, len, "%s", v->data.string);
	if (v)
		PMIX_VALUE_RELEASE(v);
}

/* Whether this node's PMIx server answers now: a Get of a key nobody publishes, with
 * PMIX_GET_REFRESH_CACHE, is answered (NOT-FOUND) at once by a server that works; one that is
 * stuck answers nothing (Slurm 22.05's, while it retries reaching a node where every task of
 * the step has ended, measured: nothing for 27-31 s, its own PMIX_TIMEOUT included). */
static int server_answers(struct alloc_pmix *s)
{
	struct batch *b = batch_new(1);
	bool yes = true;
	int one = 1, left;

	if (!b)
		return 1;
	b->n = 1;
	PMIX_INFO_LOAD(&b->info[0], PMIX_TIMEOUT, &one, PMIX_INT);
	PMIX_INFO_LOAD(&b->info[1], PMIX_GET_REFRESH_CACHE, &yes, PMIX_BOOL);
	b->op[0].proc = s->me;
	if (PMIx_Get_nb(&b->op[0].proc, "dptrain.alive", b->info, 2, get_cb, &b->op[0]) !=
	    PMIX_SUCCESS) {
		batch_free(b);
		return 1;
	}
	left = batch_settle(b, PROBE_S);
	batch_release(b);
	return !left;
}

static int by_int(const void *x, const void *y)
{
	int a = *(const int *)x, b = *(const int *)y;
	return (a > b) - (a < b);
}

/* After a failed fence, from the watch posted before it: rank 0 names every rank that has
 * not published `key`; another rank says whether rank 0 has (then rank 0's message names the
 * others). Fills err; ends the watch. */
static void name_missing(struct alloc_pmix *s, struct watch *w, int world, const char *what,
			 int timeout_s, const char *why, struct dp_error *err)
{
	char list[256], hosts[256], h[RT_HOST_MAX], outcome[160];
	struct batch *bs[2] = {w->near, w->far};
	int *missing = NULL, nmissing = 0, asked = 0, early, i, k;
	size_t used = 0;
	char stuck[320] = "";

	fence_outcome(s, why, timeout_s, outcome, sizeof(outcome));
	/* After a timeout the answers have had all that time; after an early failure, a little
	 * more. */
	early = strcmp(why, "timed out") != 0;
	for (k = 0; k < 2; k++)
		if (bs[k]) {
			batch_settle(bs[k], early ? PROBE_S : 0);
			asked += bs[k]->n;
		}
	missing = malloc((size_t)world * sizeof(int));
	if (!missing || asked < (s->me.rank == 0 ? world : 1)) {
		errprintf(err, "%s %s", what, outcome);
		goto out;
	}
	pthread_mutex_lock(&px.mu);
	for (k = 0; k < 2; k++)
		for (i = 0; bs[k] && i < bs[k]->n; i++)
			if (!bs[k]->op[i].done || bs[k]->op[i].status != PMIX_SUCCESS)
				missing[nmissing++] = (int)bs[k]->op[i].proc.rank;
	pthread_mutex_unlock(&px.mu);
	qsort(missing, (size_t)nmissing, sizeof(int), by_int);
	if (nmissing && !server_answers(s))
		snprintf(stuck, sizeof(stuck),
			 " (but this node's PMIx server, in slurmstepd, has stopped answering, as "
			 "Slurm's does while it retries reaching a node where every task of the "
			 "step has ended, so %s may have arrived after all)",
			 nmissing > 1 ? "some of them"
			 : s->me.rank ? "rank 0"
				      : "it");
	if (s->me.rank != 0) {
		peer_host(s, 0, h, sizeof(h));
		if (nmissing) {
			errprintf(
			    err,
			    "%s %s: rank 0 (on %s) did not arrive%s: it ended or hangs before "
			    "this point (its own message, or srun's, says why); other ranks "
			    "may be missing too",
			    what, outcome, h, stuck);
			/* Where the server is stuck rank 0 may well be alive, with a deadline
			 * like ours: leave it the time to say which ranks are missing. */
			if (stuck[0])
				s->abort_at = now_s() + timeout_s + ABORT_SLACK_S;
			goto out;
		}
		errprintf(err,
			  "%s %s: rank 0 (on %s) arrived, and its message names the ranks that "
			  "did not",
			  what, outcome, h);
		/* This rank's error would end the step (PMIx_Abort) before rank 0 has said
		 * which ranks are missing. Rank 0 gives up no later than timeout_s after its
		 * record reached us, and then ends the step itself: wait for that first. */
		pthread_mutex_lock(&px.mu);
		s->abort_at = bs[0]->op[0].at + timeout_s + ABORT_SLACK_S;
		pthread_mutex_unlock(&px.mu);
		goto out;
	}
	if (nmissing == 0) {
		errprintf(err, "%s %s (every rank has arrived since; retry)", what, outcome);
		goto out;
	}
	alloc_format_ranks(missing, nmissing, list, sizeof(list));
	hosts[0] = '\0';
	for (i = 0; i < nmissing && i < 8; i++) {
		peer_host(s, missing[i], h, sizeof(h));
		if (strstr(hosts, h) || used + strlen(h) + 8 >= sizeof(hosts))
			continue;
		used += (size_t)snprintf(hosts + used, sizeof(hosts) - used, "%s%s",
					 used ? ", " : "", h);
	}
	errprintf(err,
		  "%s %s: %d of %d ranks did not arrive: rank%s %s on %s%s%s; they ended or "
		  "hang before this point: srun names a task that ended, and each rank's own "
		  "message says why",
		  what, outcome, nmissing, world, nmissing > 1 ? "s" : "", list, hosts,
		  nmissing > 8 ? ", ..." : "", stuck);
out:
	free(missing);
	watch_end(w);
}

static int get_long(struct alloc_pmix *s, const pmix_proc_t *p, const char *key, long *out)
{
	pmix_info_t info;
	pmix_value_t *v = NULL;
	bool yes = true;
	int rv = -1;

	(void)s;
	PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &yes, PMIX_BOOL);
	if (PMIx_Get(p, key, &info, 1, &v) != PMIX_SUCCESS || !v)
		goto out;
	rv = 0;
	switch (v->type) {
	case PMIX_UINT16:
		*out = v->data.uint16;
		break;
	case PMIX_UINT32:
		*out = (long)v->data.uint32;
		break;
	case PMIX_INT:
		*out = v->data.integer;
		break;
	case PMIX_UINT:
		*out = (long)v->data.uint;
		break;
	case PMIX_INT32:
		*out = v->data.int32;
		break;
	case PMIX_UINT64:
		*out = (long)v->data.uint64;
		break;
	default:
		rv = -1;
	}
out:
	if (v)
		PMIX_VALUE_RELEASE(v);
	return rv;
}

static int get_string(const pmix_proc_t *p, const char *key, char *buf, size_t len)
{
	pmix_info_t info;
	pmix_value_t *v = NULL;
	bool yes = true;
	int rv = -1;

	PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &yes, PMIX_BOOL);
	if (PMIx_Get(p, key, &info, 1, &v) == PMIX_SUCCESS && v && v->type == PMIX_STRING &&
	    v->data.string && strlen(v->data.string) < len) {
		snprintf(buf, len, "%s", v->data.string);
		rv = 0;
	}
	if (v)
		PMIX_VALUE_RELEASE(v);
	return rv;
}

/* Put key (and commit, with what was put before it unless `commit` is 0). One commit for
 * everything a rank publishes before a fence: a peer's Get that comes between two commits
 * finds the first and is told NOT-FOUND for the rest, where it would otherwise wait. */
static int put_value(const char *key, const char *value, int commit, struct dp_error *err)
{
	pmix_value_t val;
	pmix_status_t rc;

	PMIX_VALUE_LOAD(&val, value, PMIX_STRING);
	rc = PMIx_Put(PMIX_GLOBAL, key, &val);
	PMIX_VALUE_DESTRUCT(&val);
	if (rc == PMIX_SUCCESS && commit)
		rc = PMIx_Commit();
	if (rc != PMIX_SUCCESS) {
		errprintf(err, "PMIx_Put/Commit of %s failed: %s", key, PMIx_Error_string(rc));
		return -1;
	}
	return 0;
}

static int put_string(const char *key, const char *value, struct dp_error *err)
{
	return put_value(key, value, 1, err);
}

/* Node ranks from the published hosts: nodes in order of their PMIx node id (then of their
 * first rank), numbered 0..K-1, whatever numbering the resource manager used. */
struct node_key {
	int first; /* first rank on the node */
	long nodeid;
};

static int by_host_rank(const void *x, const void *y, void *ctx)
{
	const struct alloc_rank *ranks = ctx;
	int a = *(const int *)x, b = *(const int *)y;
	int c = strcmp(ranks[a].host, ranks[b].host);
	return c ? c : a - b;
}

static int by_nodeid(const void *x, const void *y)
{
	const struct node_key *a = x, *b = y;
	if (a->nodeid != b->nodeid)
		return a->nodeid < b->nodeid ? -1 : 1;
	return a->first - b->first;
}

static int number_nodes(struct alloc *a, const int *nodeid, struct dp_error *err)
{
	int n = a->world_size, *order = NULL, i, j, k, nnodes = 0, rv = -1;
	struct node_key *keys = NULL;

	order = malloc((size_t)n * sizeof(int));
	keys = malloc((size_t)n * sizeof(*keys));
	if (!order || !keys) {
		errprintf(err, "out of memory for %d ranks", n);
		goto out;
	}
	for (i = 0; i < n; i++)
		order[i] = i;
	qsort_r(order, (size_t)n, sizeof(int), by_host_rank, a->ranks);
	for (i = 0; i < n; i = j) {
		keys[nnodes].first = order[i];
		keys[nnodes].nodeid = nodeid[order[i]] >= 0 ? nodeid[order[i]] : 0x7fffffffL;
		for (j = i + 1;
		     j < n && strcmp(a->ranks[order[j]].host, a->ranks[order[i]].host) == 0; j++)
			if (nodeid[order[j]] != nodeid[order[i]]) {
				errprintf(err, "ranks %d and %d on %s report node ids %d and %d",
					  order[i], order[j], a->ranks[order[i]].host,
					  nodeid[order[i]], nodeid[order[j]]);
				goto out;
			}
		nnodes++;
	}
	qsort(keys, (size_t)nnodes, sizeof(*keys), by_nodeid);
	/* keys[k].first identifies node k; give every rank of that host node rank k. */
	for (k = 0; k < nnodes; k++)
		a->ranks[keys[k].first].node_rank = k;
	for (i = 0; i < n; i = j) {
		k = a->ranks[order[i]].node_rank;
		for (j = i; j < n && strcmp(a->ranks[order[j]].host, a->ranks[order[i]].host) == 0;
		     j++)
			a->ranks[order[j]].node_rank = k;
	}
	rv = 0;
out:
	free(order);
	free(keys);
	return rv;
}

int alloc_from_pmix(struct alloc *a, const struct alloc_opts *o, struct dp_error *err)
{
	struct alloc_pmix *s;
	struct alloc_rank self;
	struct batch *b = NULL;
	struct watch w;
	char rec[512];
	long v;
	int *nodeid = NULL, *port = NULL, world, local = -1, mynode = -1, myport = 0, all_done = 0;
	int r, spent, watching = 0, missing, need_secret, rv = -1;
	const char *why;
	struct dp_slurm_step ss;
	pmix_status_t rc;

	s = calloc(1, sizeof(*s));
	if (!s) {
		errprintf(err, "out of memory");
		return -1;
	}
	rc = PMIx_Init(&s->me, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		errprintf(err,
			  "PMIx_Init failed: %s (PMIX_NAMESPACE=%s); was the step started with "
			  "srun --mpi=pmix?",
			  PMIx_Error_string(rc), getenv(ENV_PMIX_NAMESPACE));
		free(s);
		return -1;
	}
	a->pmix = s;
	PMIX_LOAD_PROCID(&s->all, s->me.nspace, PMIX_RANK_WILDCARD);
	if (get_long(s, &s->all, PMIX_JOB_SIZE, &v) != 0 || v < 1 || v > RT_WORLD_MAX) {
		errprintf(err, "PMIx gives no usable job size (%s)", PMIX_JOB_SIZE);
		goto out;
	}
	world = (int)v;
	if (s->me.rank >= (pmix_rank_t)world) {
		errprintf(err, "PMIx rank %u is not below the job size %d", s->me.rank, world);
		goto out;
	}
	a->world_size = world;
	a->rank = (int)s->me.rank;
	/* Our own local rank and node id are right even where peers' are missing. */
	dp_slurm_step_read(&ss);
	if (get_long(s, &s->me, PMIX_LOCAL_RANK, &v) == 0)
		local = (int)v;
	else if (dp_slurm_int(&ss.localid, 0, INT_MAX, &local, err) != 1)
		local = -1;
	if (local < 0) {
		errprintf(err,
			  "cannot tell the local rank: PMIx has no %s for this rank and "
			  "SLURM_LOCALID is not set",
			  PMIX_LOCAL_RANK);
		goto out;
	}
	if (get_long(s, &s->me, PMIX_NODEID, &v) == 0)
		mynode = (int)v;
	else if (dp_slurm_int(&ss.nodeid, 0, INT_MAX, &mynode, err) != 1)
		mynode = -1;

	memset(&self, 0, sizeof(self));
	/* Under Slurm the node's name is Slurm's (SLURMD_NODENAME): PMIX_HOSTNAME is Slurm's node
	 * name with PMIx 4 or the hash store, but the machine's hostname with PMIx 5's default
	 * store, which emulated nodes of one machine share. Elsewhere PMIx's, else gethostname. */
	if (getenv(ENV_SLURMD_NODENAME) ||
	    get_string(&s->me, PMIX_HOSTNAME, self.host, sizeof(self.host)) != 0)
		alloc_hostname(self.host);
	if (alloc_iface_addr(o->iface, self.addr, err) != 0 ||
	    alloc_self_gpu(o, ALLOC_SRC_PMIX, local, &self.gpu, err) != 0)
		goto out;
	if (a->rank == 0) {
		myport = a->master_port;
		if (!myport && alloc_port_pick(self.addr, &myport, err) != 0)
			goto out;
	}
	/* The step's secret (secret.h) reaches the tasks in srun's environment, unless the step
	 * was started with --export=NONE (or SBATCH_EXPORT=NONE, which a batch script's sruns
	 * inherit): then rank 0 makes one and hands it to the others through PMIx, whose data
	 * only this step's processes can read, so that the store and the collectives still let
	 * in none but this step's ranks. */
	need_secret = !getenv(ENV_DPTRAIN_STORE_SECRET) || !*getenv(ENV_DPTRAIN_STORE_SECRET);
	if (need_secret && a->rank == 0) {
		char secret[DP_SECRET_LEN + 1];
		/* committed with the record below */
		if (dp_secret_make(secret, err) != 0 || put_value(KEY_SECRET, secret, 0, err) != 0)
			goto out;
		if (setenv(ENV_DPTRAIN_STORE_SECRET, secret, 1) != 0) {
			errprintf(err, "cannot set %s: %s", ENV_DPTRAIN_STORE_SECRET,
				  strerror(errno));
			goto out;
		}
	}
	alloc_stall(o, a->rank, "before publishing its PMIx record");
	self.local_rank = local;
	if (alloc_self_device_ip(o, &self, err) != 0)
		goto out;
	alloc_record_format(rec, sizeof(rec), &self, mynode, myport);
	if (put_string(KEY_RANK, rec, err) != 0)
		goto out;
	spent = watch_start(s, &w, KEY_RANK, world, o->timeout_s);
	watching = 1;
	if (fence(s, 1, o->timeout_s > spent ? o->timeout_s - spent : 1, &why) != 0) {
		watching = 0;
		name_missing(s, &w, world, "PMIx fence (rendezvous of all ranks)", o->timeout_s,
			     why, err);
		goto out;
	}

	a->ranks = calloc((size_t)world, sizeof(*a->ranks));
	nodeid = malloc((size_t)world * sizeof(int));
	port = malloc((size_t)world * sizeof(int));
	if (!a->ranks || !nodeid || !port) {
		errprintf(err, "out of memory for %d ranks", world);
		goto out;
	}
	b = gather(s, KEY_RANK, world, o->timeout_s, o->timeout_s + 1, &all_done);
	missing = !b || !all_done;
	for (r = 0; !missing && r < world; r++)
		missing = b->op[r].status != PMIX_SUCCESS;
	if (missing) {
		/* A fence that passed without every record: Slurm 24.11 with PMIx 5 reported a
		 * fence that timed out as a success (measured: rank 0's fence "succeeded" at its
		 * own timeout while rank 2 had not published). Who is missing is the watch's to
		 * say, as after a failed fence. */
		watching = 0;
		name_missing(s, &w, world, "PMIx fence (rendezvous of all ranks)", o->timeout_s,
			     "timed out", err);
		goto out;
	}
	for (r = 0; r < world; r++) {
		if (alloc_record_parse(b->op[r].value, &a->ranks[r], &nodeid[r], &port[r]) != 0) {
			errprintf(err, "rank %d published a malformed %s: '%s'", r, KEY_RANK,
				  b->op[r].value);
			goto out;
		}
	}
	if (number_nodes(a, nodeid, err) != 0)
		goto out;
	if (need_secret && a->rank != 0) {
		char secret[DP_SECRET_LEN + 1];
		pmix_proc_t zero;
		PMIX_LOAD_PROCID(&zero, s->me.nspace, 0);
		if (get_string(&zero, KEY_SECRET, secret, sizeof(secret)) != 0 ||
		    strlen(secret) != DP_SECRET_LEN) {
			errprintf(err,
				  "this rank's environment has no %s and rank 0 published none "
				  "through PMIx (rank 0 had one: were the ranks started with "
				  "different environments?)",
				  ENV_DPTRAIN_STORE_SECRET);
			goto out;
		}
		if (setenv(ENV_DPTRAIN_STORE_SECRET, secret, 1) != 0) {
			errprintf(err, "cannot set %s: %s", ENV_DPTRAIN_STORE_SECRET,
				  strerror(errno));
			goto out;
		}
	}
	if (!a->master_addr[0])
		snprintf(a->master_addr, sizeof(a->master_addr), "%s", a->ranks[0].addr);
	if (!a->master_port)
		a->master_port = port[0];
	rv = 0;
out:
	if (watching)
		watch_end(&w);
	if (b && all_done)
		batch_free(b);
	free(nodeid);
	free(port);
	return rv;
}

/* Rank 0 publishes KEY_GATE once it holds the output directory; every rank then needs that
 * value. A fence alone is no gate: when rank 0 has ended, Slurm's PMIx server may complete
 * the fence without it (seen with Slurm 22.05), and a rank on another node would go on. */
int alloc_pmix_gate(struct alloc *a, int timeout_s, struct dp_error *err)
{
	const char *why;
	struct batch *b;
	int all_done, ok;

	if (a->rank == 0 && put_string(KEY_GATE, "1", err) != 0)
		return -1;
	if (fence(a->pmix, 1, timeout_s, &why) != 0) {
		char outcome[160];
		fence_outcome(a->pmix, why, timeout_s, outcome, sizeof(outcome));
		errprintf(err,
			  "PMIx fence (rank 0 taking the output directory) %s; see rank 0's "
			  "message",
			  outcome);
		return -1;
	}
	b = gather(a->pmix, KEY_GATE, 1, PROBE_S, PROBE_S + 1, &all_done);
	if (!b)
		ok = 0;
	else if (!all_done)
		ok = 0; /* abandoned: read only under px.mu, and not needed */
	else
		ok = b->op[0].status == PMIX_SUCCESS && b->op[0].value &&
		     strcmp(b->op[0].value, "1") == 0;
	if (b && all_done)
		batch_free(b);
	if (!ok) {
		errprintf(err,
			  "rank 0 did not take the output directory (it ended before: its message "
			  "says why); nothing written there");
		return -1;
	}
	return 0;
}

int alloc_pmix_sync(struct alloc *a, int timeout_s, struct dp_error *err)
{
	const char *why;
	struct watch w;
	int spent;

	if (put_string(KEY_READY, "1", err) != 0)
		return -1;
	spent = watch_start(a->pmix, &w, KEY_READY, a->world_size, timeout_s);
	if (fence(a->pmix, 0, timeout_s > spent ? timeout_s - spent : 1, &why) != 0) {
		name_missing(a->pmix, &w, a->world_size, "PMIx fence (every rank table written)",
			     timeout_s, why, err);
		return -1;
	}
	watch_end(&w);
	return 0;
}

void alloc_pmix_finish(struct alloc *a)
{
	PMIx_Finalize(NULL, 0);
	free(a->pmix);
	a->pmix = NULL;
}

int alloc_pmix_abort(struct alloc *a, int status, const char *msg, struct dp_error *err)
{
	pmix_proc_t me;
	pmix_status_t rc;

	if (!a->pmix) {
		if (!alloc_pmix_present()) {
			errprintf(err, "not started by a PMIx server: cannot end the step");
			return -1;
		}
		rc = PMIx_Init(&me, NULL, 0);
		if (rc != PMIX_SUCCESS) {
			errprintf(err, "PMIx_Init failed: %s", PMIx_Error_string(rc));
			return -1;
		}
	}
	if (a->pmix && a->pmix->abort_at > 0) {
		double left = a->pmix->abort_at - now_s();
		struct timespec ts;

		if (left > 0) {
			ts.tv_sec = (time_t)left;
			ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		}
	}
	/* NULL procs: the whole namespace, i.e. the step. */
	rc = PMIx_Abort(status, msg, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		errprintf(err, "PMIx_Abort failed: %s", PMIx_Error_string(rc));
		return -1;
	}
	return 0;
}

#endif
