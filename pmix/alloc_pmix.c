/* alloc_pmix.c — the allocation from PMIx: every rank publishes its own host, address, node
 * id, local rank and GPU (peers' PMIX_NODEID/PMIX_LOCAL_RANK are not trusted: Slurm before
 * 25.05 lacks them), one fence collects them all. Every wait has a deadline of our own, since
 * Slurm's server ignores PMIX_TIMEOUT once a fence has left the node. Owns the PMIx session
 * from PMIx_Init to PMIx_Finalize; must not run inside slurmstepd, whose PMIx server shares
 * the library: a client call there hangs (see dptrain(8)). */
#define _GNU_SOURCE /* qsort_r, pipe2, mkostemp */
#include "alloc_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HAVE_PMIX

int alloc_pmix_present(void)
{
	return 0;
}

int alloc_from_pmix(struct alloc *a, const struct alloc_opts *o, char *err, size_t errlen)
{
	(void)a;
	(void)o;
	snprintf(err, errlen,
		 "this dptrain-launch was built without PMIx (Debian: libpmix-dev); "
		 "use DPTRAIN_SOURCE=slurm or srun --mpi=none");
	return -1;
}

int alloc_pmix_gate(struct alloc *a, int timeout_s, char *err, size_t errlen)
{
	(void)a;
	(void)timeout_s;
	(void)err;
	(void)errlen;
	return 0;
}

int alloc_pmix_sync(struct alloc *a, int timeout_s, char *err, size_t errlen)
{
	(void)a;
	(void)timeout_s;
	(void)err;
	(void)errlen;
	return 0;
}

void alloc_pmix_finish(struct alloc *a)
{
	(void)a;
}

int alloc_pmix_abort(struct alloc *a, int status, const char *msg, char *err, size_t errlen)
{
	(void)a;
	(void)status;
	(void)msg;
	snprintf(err, errlen, "built without PMIx: cannot end the step");
	return -1;
}

#else

#include <errno.h>
#include <pmix.h>
#include <pthread.h>
#include <time.h>

#define KEY_RANK  "dptrain.rank"  /* "1 host addr nodeid local_rank gpu gpu_id|- port" */
#define KEY_READY "dptrain.ready" /* published after the rank table is written */
#define KEY_GATE  "dptrain.gate"  /* published once rank 0 holds the output directory */
#define PROBE_S	  1		  /* how long a rank that missed a fence gets to answer a Get */

struct alloc_pmix {
	pmix_proc_t me;
	pmix_proc_t all;   /* the whole namespace: PMIX_RANK_WILDCARD */
	double fence_took; /* seconds the last fence() took, for messages */
};

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

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
	return getenv("PMIX_RANK") && getenv("PMIX_NAMESPACE");
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

/* Wait until every op of b is done or `secs` pass. Returns 1 when all are done; 0 leaves b
 * to late callbacks (it is listed as abandoned and must not be freed). */
static int batch_wait(struct batch *b, int secs)
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
	if (left) {
		b->next = px.abandoned;
		px.abandoned = b;
	}
	pthread_mutex_unlock(&px.mu);
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

	double t0 = mono_s();

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
	s->fence_took = mono_s() - t0;
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

/* Get `key` of every rank at once, each with PMIX_TIMEOUT get_s, all within wait_s. Returns
 * the batch (values in op[r].value), or NULL on allocation failure. *all_done says whether
 * every Get finished; if not, the batch is abandoned and only read under px.mu. */
static struct batch *gather(struct alloc_pmix *s, const char *key, int n, int get_s, int wait_s,
			    int *all_done)
{
	struct batch *b = batch_new(n);
	pmix_status_t rc;
	int r;

	*all_done = 0;
	if (!b)
		return NULL;
	b->n = n;
	PMIX_INFO_LOAD(&b->info[0], PMIX_TIMEOUT, &get_s, PMIX_INT);
	for (r = 0; r < n; r++) {
		struct op *op = &b->op[r];
		PMIX_LOAD_PROCID(&op->proc, s->me.nspace, (pmix_rank_t)r);
		rc = PMIx_Get_nb(&op->proc, key, b->info, 1, get_cb, op);
		if (rc != PMIX_SUCCESS)
			op_finish(op, rc, NULL);
	}
	*all_done = batch_wait(b, wait_s);
	return b;
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

/* After a failed fence: ask every rank for `key` briefly; who does not answer did not arrive.
 * Fills err with the ranks and their hosts. */
static void name_missing(struct alloc_pmix *s, const char *key, int n, const char *what,
			 int timeout_s, const char *why, char *err, size_t errlen)
{
	struct batch *b;
	char list[256], hosts[256], h[RT_HOST_MAX], outcome[160];
	int *missing = NULL, nmissing = 0, all_done, r;
	size_t used = 0;

	fence_outcome(s, why, timeout_s, outcome, sizeof(outcome));

	b = gather(s, key, n, PROBE_S, PROBE_S + 1, &all_done);
	missing = malloc((size_t)n * sizeof(int));
	if (!b || !missing) {
		snprintf(err, errlen, "%s %s", what, outcome);
		goto out;
	}
	pthread_mutex_lock(&px.mu);
	for (r = 0; r < n; r++)
		if (!b->op[r].done || b->op[r].status != PMIX_SUCCESS)
			missing[nmissing++] = r;
	pthread_mutex_unlock(&px.mu);
	if (nmissing == 0) {
		snprintf(err, errlen, "%s %s (every rank has arrived since; retry)", what, outcome);
		goto out;
	}
	alloc_format_ranks(missing, nmissing, list, sizeof(list));
	hosts[0] = '\0';
	for (r = 0; r < nmissing && r < 8; r++) {
		peer_host(s, missing[r], h, sizeof(h));
		if (strstr(hosts, h) || used + strlen(h) + 8 >= sizeof(hosts))
			continue;
		used += (size_t)snprintf(hosts + used, sizeof(hosts) - used, "%s%s",
					 used ? ", " : "", h);
	}
	snprintf(err, errlen,
		 "%s %s: %d of %d ranks did not arrive: rank%s %s on %s%s; they did "
		 "not start or hang before this point: see their messages",
		 what, outcome, nmissing, n, nmissing > 1 ? "s" : "", list, hosts,
		 nmissing > 8 ? ", ..." : "");
out:
	free(missing);
	if (b && all_done)
		batch_free(b);
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

static int put_string(const char *key, const char *value, char *err, size_t errlen)
{
	pmix_value_t val;
	pmix_status_t rc;

	PMIX_VALUE_LOAD(&val, value, PMIX_STRING);
	rc = PMIx_Put(PMIX_GLOBAL, key, &val);
	PMIX_VALUE_DESTRUCT(&val);
	if (rc == PMIX_SUCCESS)
		rc = PMIx_Commit();
	if (rc != PMIX_SUCCESS) {
		snprintf(err, errlen, "PMIx_Put/Commit of %s failed: %s", key,
			 PMIx_Error_string(rc));
		return -1;
	}
	return 0;
}

/* One peer's record: "1 host addr nodeid local_rank gpu gpu_id|- port". */
static int parse_record(const char *rec, struct alloc_rank *x, int *nodeid, int *port)
{
	char host[RT_HOST_MAX], addr[RT_ADDR_MAX], gid[ALLOC_GPU_ID_MAX];
	int version, n;

	if (sscanf(rec, "%d %255s %63s %d %d %d %95s %d%n", &version, host, addr, nodeid,
		   &x->local_rank, &x->gpu.index, gid, port, &n) != 8 ||
	    version != 1 || rec[n] != '\0')
		return -1;
	snprintf(x->host, sizeof(x->host), "%s", host);
	snprintf(x->addr, sizeof(x->addr), "%s", addr);
	snprintf(x->gpu.id, sizeof(x->gpu.id), "%s", strcmp(gid, "-") == 0 ? "" : gid);
	return 0;
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

static int number_nodes(struct alloc *a, const int *nodeid, char *err, size_t errlen)
{
	int n = a->world_size, *order = NULL, i, j, k, nnodes = 0, rv = -1;
	struct node_key *keys = NULL;

	order = malloc((size_t)n * sizeof(int));
	keys = malloc((size_t)n * sizeof(*keys));
	if (!order || !keys) {
		snprintf(err, errlen, "out of memory for %d ranks", n);
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
				snprintf(err, errlen,
					 "ranks %d and %d on %s report node ids %d and %d",
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

int alloc_from_pmix(struct alloc *a, const struct alloc_opts *o, char *err, size_t errlen)
{
	struct alloc_pmix *s;
	struct alloc_rank self;
	struct batch *b = NULL;
	char rec[512];
	long v;
	int *nodeid = NULL, *port = NULL, world, local = -1, mynode = -1, myport = 0, all_done = 0;
	int r, rv = -1;
	const char *why;
	pmix_status_t rc;

	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	rc = PMIx_Init(&s->me, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		snprintf(err, errlen,
			 "PMIx_Init failed: %s (PMIX_NAMESPACE=%s); was the step started with "
			 "srun --mpi=pmix?",
			 PMIx_Error_string(rc), getenv("PMIX_NAMESPACE"));
		free(s);
		return -1;
	}
	a->pmix = s;
	PMIX_LOAD_PROCID(&s->all, s->me.nspace, PMIX_RANK_WILDCARD);
	if (get_long(s, &s->all, PMIX_JOB_SIZE, &v) != 0 || v < 1 || v > RT_WORLD_MAX) {
		snprintf(err, errlen, "PMIx gives no usable job size (%s)", PMIX_JOB_SIZE);
		goto out;
	}
	world = (int)v;
	if (s->me.rank >= (pmix_rank_t)world) {
		snprintf(err, errlen, "PMIx rank %u is not below the job size %d", s->me.rank,
			 world);
		goto out;
	}
	a->world_size = world;
	a->rank = (int)s->me.rank;
	/* Our own local rank and node id are right even where peers' are missing. */
	if (get_long(s, &s->me, PMIX_LOCAL_RANK, &v) == 0)
		local = (int)v;
	else if (alloc_env_int("SLURM_LOCALID", 0, &local, err, errlen) != 1)
		local = -1;
	if (local < 0) {
		snprintf(err, errlen,
			 "cannot tell the local rank: PMIx has no %s for this rank and "
			 "SLURM_LOCALID is not set",
			 PMIX_LOCAL_RANK);
		goto out;
	}
	if (get_long(s, &s->me, PMIX_NODEID, &v) == 0)
		mynode = (int)v;
	else if (alloc_env_int("SLURM_NODEID", 0, &mynode, err, errlen) != 1)
		mynode = -1;

	memset(&self, 0, sizeof(self));
	/* Under Slurm the node's name is Slurm's (SLURMD_NODENAME): PMIX_HOSTNAME is Slurm's node
	 * name with PMIx 4 or the hash store, but the machine's hostname with PMIx 5's default
	 * store, which emulated nodes of one machine share. Elsewhere PMIx's, else gethostname. */
	if (getenv("SLURMD_NODENAME") ||
	    get_string(&s->me, PMIX_HOSTNAME, self.host, sizeof(self.host)) != 0)
		alloc_hostname(self.host);
	if (alloc_iface_addr(o->iface, self.addr, err, errlen) != 0 ||
	    alloc_self_gpu(o, ALLOC_SRC_PMIX, local, &self.gpu, err, errlen) != 0)
		goto out;
	if (a->rank == 0) {
		myport = a->master_port;
		if (!myport && alloc_port_pick(self.addr, &myport, err, errlen) != 0)
			goto out;
	}
	alloc_stall(o, a->rank, "before publishing its PMIx record");
	snprintf(rec, sizeof(rec), "1 %s %s %d %d %d %s %d", self.host, self.addr, mynode, local,
		 self.gpu.index, self.gpu.id[0] ? self.gpu.id : "-", myport);
	if (put_string(KEY_RANK, rec, err, errlen) != 0)
		goto out;
	if (fence(s, 1, o->timeout_s, &why) != 0) {
		name_missing(s, KEY_RANK, world, "PMIx fence (rendezvous of all ranks)",
			     o->timeout_s, why, err, errlen);
		goto out;
	}

	a->ranks = calloc((size_t)world, sizeof(*a->ranks));
	nodeid = malloc((size_t)world * sizeof(int));
	port = malloc((size_t)world * sizeof(int));
	if (!a->ranks || !nodeid || !port) {
		snprintf(err, errlen, "out of memory for %d ranks", world);
		goto out;
	}
	b = gather(s, KEY_RANK, world, o->timeout_s, o->timeout_s + 1, &all_done);
	if (!b || !all_done) {
		snprintf(err, errlen, "PMIx_Get of the peers' records did not finish within %d s",
			 o->timeout_s + 1);
		goto out;
	}
	for (r = 0; r < world; r++) {
		if (b->op[r].status != PMIX_SUCCESS) {
			snprintf(err, errlen, "PMIx_Get of rank %d's %s failed: %s", r, KEY_RANK,
				 PMIx_Error_string(b->op[r].status));
			goto out;
		}
		if (parse_record(b->op[r].value, &a->ranks[r], &nodeid[r], &port[r]) != 0) {
			snprintf(err, errlen, "rank %d published a malformed %s: '%s'", r, KEY_RANK,
				 b->op[r].value);
			goto out;
		}
	}
	if (number_nodes(a, nodeid, err, errlen) != 0)
		goto out;
	if (!a->master_addr[0])
		snprintf(a->master_addr, sizeof(a->master_addr), "%s", a->ranks[0].addr);
	if (!a->master_port)
		a->master_port = port[0];
	rv = 0;
out:
	if (b && all_done)
		batch_free(b);
	free(nodeid);
	free(port);
	return rv;
}

/* Rank 0 publishes KEY_GATE once it holds the output directory; every rank then needs that
 * value. A fence alone is no gate: when rank 0 has ended, Slurm's PMIx server may complete
 * the fence without it (seen with Slurm 22.05), and a rank on another node would go on. */
int alloc_pmix_gate(struct alloc *a, int timeout_s, char *err, size_t errlen)
{
	const char *why;
	struct batch *b;
	int all_done, ok;

	if (a->rank == 0 && put_string(KEY_GATE, "1", err, errlen) != 0)
		return -1;
	if (fence(a->pmix, 1, timeout_s, &why) != 0) {
		char outcome[160];
		fence_outcome(a->pmix, why, timeout_s, outcome, sizeof(outcome));
		snprintf(err, errlen,
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
		snprintf(err, errlen,
			 "rank 0 did not take the output directory (it ended before: its message "
			 "says why); nothing written there");
		return -1;
	}
	return 0;
}

int alloc_pmix_sync(struct alloc *a, int timeout_s, char *err, size_t errlen)
{
	const char *why;

	if (put_string(KEY_READY, "1", err, errlen) != 0)
		return -1;
	if (fence(a->pmix, 0, timeout_s, &why) != 0) {
		name_missing(a->pmix, KEY_READY, a->world_size,
			     "PMIx fence (every rank table written)", timeout_s, why, err, errlen);
		return -1;
	}
	return 0;
}

void alloc_pmix_finish(struct alloc *a)
{
	PMIx_Finalize(NULL, 0);
	free(a->pmix);
	a->pmix = NULL;
}

int alloc_pmix_abort(struct alloc *a, int status, const char *msg, char *err, size_t errlen)
{
	pmix_proc_t me;
	pmix_status_t rc;

	if (!a->pmix) {
		if (!alloc_pmix_present()) {
			snprintf(err, errlen, "not started by a PMIx server: cannot end the step");
			return -1;
		}
		rc = PMIx_Init(&me, NULL, 0);
		if (rc != PMIX_SUCCESS) {
			snprintf(err, errlen, "PMIx_Init failed: %s", PMIx_Error_string(rc));
			return -1;
		}
	}
	/* NULL procs: the whole namespace, i.e. the step. */
	rc = PMIx_Abort(status, msg, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		snprintf(err, errlen, "PMIx_Abort failed: %s", PMIx_Error_string(rc));
		return -1;
	}
	return 0;
}

#endif
