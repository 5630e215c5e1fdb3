/* comm_shm.c — the node half of the CPU engine (comm_shm.h): the segment's making, handing over
 * and checking, the pipelined rounds of each operation through it, and the waits, bounded and
 * watching the abort flag and the store's verdicts. Owns the segment and its descriptor; not
 * the store, not the TCP ring (comm_cpu.c).
 *
 * Rounds. The data goes through the segment in rounds of nlocal slices of `slice` bytes. Each
 * rank has an area of `depth` slots, a slot per round in turn, each nlocal slices. In an
 * allreduce's round, rank j copies the round's slices s != j of its buffer into slice s of its
 * slot and says so (counter `in`); once every rank has, rank j adds slice j of every rank's slot
 * (and its own, from its buffer) in the operation's order, writes the sum to its buffer and to
 * slice j of its own slot, and says so (`red`); once every rank has, it copies the other sums
 * from their slots (`done`: it has read everything of that round). A slot is written again
 * `depth` rounds later, once every rank's `done` says it is free; rank j copies the next
 * round in while the others still add this one. Every rank adds one slice, all at once: all
 * the node's cores reduce, each over data its neighbours wrote a moment ago (in their caches),
 * and the buffers themselves are read once and written once.
 *
 * Waits. A rank that must wait for the others spins on their counters for a few microseconds
 * (longer while spinning pays, shorter when it does not: on a node with more ranks than free
 * cores the rank it waits for needs the core), then sleeps on a futex of its own in the segment
 * in naps of at most SHM_NAP_S; whoever publishes a counter wakes the sleepers whose wait it
 * ends. Between naps it checks the comm's abort flag, the store's verdict (a rank that died, an
 * abort) and roll call, and its timeout (no progress of the ranks it waits for within
 * timeout_s), each failing as the TCP ring does. Nothing waits forever, and nothing spins for
 * long. */
#define _GNU_SOURCE
#include "trainer/dist/comm_shm.h"
#include "common/error.h"
#include "common/clock.h"
#include "common/hmac.h"
#include "common/random.h"
#include "store/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The slice: large enough that a round's waits cost little beside its copies, small enough
 * that a round's slots stay in the caches; within SHM_SEGMENT_BUDGET for many local ranks. */
#define SHM_SLICE_DEFAULT  (256u << 10)
#define SHM_SLICE_MIN	   4096u
#define SHM_SEGMENT_BUDGET (64u << 20)
#define SHM_DEPTH	   3u
/* A buffer larger than 3/4 of the last-level cache is written with streaming stores (glibc's
 * memcpy streams from a threshold of the same order, a fraction of the L3): it would not stay
 * in the cache anyway, and they spare the read of each line before it is written. Below it a
 * streamed output costs a trip to memory that the next reader pays again (measured on a Xeon
 * with a 480 MiB L3, 2 ranks: 11.2 MB 1.6 ms cached against 2.7 ms streamed, 102 MB 20
 * against 26). Where the cache's size is unknown: SHM_STREAM_MIN. */
#define SHM_STREAM_MIN (8u << 20)
/* Spinning before sleeping: between these, halved when a spin ends in a sleep, doubled when it
 * succeeds; and how long one sleep lasts at most before the store and the clock are checked. */
#define SHM_SPIN_MIN_S 1e-6
#define SHM_SPIN_MAX_S 50e-6
#define SHM_NAP_S      0.05
/* Connections to the leader's socket heard at once, and how long each may take to prove
 * itself (a stranger of the same user that says nothing cannot keep the node's ranks out). */
#define SHM_PENDING   16
#define SHM_HELLO_S   5.0
#define SHM_CHALLENGE (4 + SHM_NONCE)
#define SHM_HELLO     (8 + SHM_NONCE + DP_SHA256_LEN)
#define SHM_WELCOME   (4 + DP_SHA256_LEN)

enum { C_IN, C_RED, C_DONE };

/* One local rank's lines: its counters (written by it, read by everyone), and its sleep (what
 * it waits for, written by it, read by whoever publishes). 128-byte halves: no false sharing
 * with the adjacent-line prefetcher either. */
struct shm_line {
	_Alignas(128) _Atomic uint64_t ctr[3]; /* in, red, done: the last round published */
	_Atomic int32_t pid;		       /* attached */
	_Alignas(128) _Atomic uint32_t bell;   /* the futex word it sleeps on */
	_Atomic uint32_t sleeping;	       /* 1 while it sleeps (or is about to) */
	_Atomic uint32_t want_which;	       /* ... until counter want_which */
	_Atomic int32_t want_only;	       /* of rank want_only (-1: of every other rank) */
	_Atomic uint64_t want_round;	       /* reaches want_round */
};

struct shm_group {
	struct shm_ctl *ctl;
	int n, me, world, node;
	int *ranks;
	unsigned char *base;
	size_t size;
	struct shm_line *line;
	unsigned char *data;
	size_t slice, area;
	unsigned depth;
	uint64_t round; /* rounds run so far: the same on every rank of the node */
	double spin_s;
	int fd;		   /* the segment (kept open: the tests look at it) */
	int streamed;	   /* this operation used streaming stores: fence before it returns */
	size_t stream_min; /* outputs of this many bytes or more are streamed */
	size_t user;	   /* a buffer group's bytes per rank; 0: slices */
};

/* ---------------------------------------------------------------------------------------
 * The layout and the header. */

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

#define SHM_SEGMENT_LABEL "dptrain shm segment v1"

static void header_tag(const char *secret, uint32_t magic, uint32_t version,
		       const struct shm_layout *l, unsigned char out[DP_SHA256_LEN])
{
	unsigned char b[8 + 4 * 4 + 5 * 8];
	put32(b, magic);
	put32(b + 4, version);
	put32(b + 8, l->world);
	put32(b + 12, l->nlocal);
	put32(b + 16, l->node);
	put32(b + 20, l->leader);
	put64(b + 24, l->gen);
	put64(b + 32, l->slice);
	put64(b + 40, l->depth);
	put64(b + 48, l->size);
	put64(b + 56, l->user);
	struct dp_hmac h;
	dp_hmac_init(&h, secret, strlen(secret));
	dp_hmac_update(&h, SHM_SEGMENT_LABEL, sizeof(SHM_SEGMENT_LABEL));
	dp_hmac_update(&h, b, sizeof(b));
	dp_hmac_final(&h, out);
}

void shm_header_make(struct shm_header *h, const char *secret, const struct shm_layout *l)
{
	memset(h, 0, sizeof(*h));
	h->magic = SHM_MAGIC;
	h->version = SHM_VERSION;
	h->l = *l;
	header_tag(secret, h->magic, h->version, l, h->tag);
}

int shm_header_check(const struct shm_header *h, size_t bytes, const char *secret,
		     const struct shm_layout *want, const char *made_by, struct dp_error *err)
{
	struct shm_header c;
	unsigned char tag[DP_SHA256_LEN];
	if (bytes < sizeof(c))
		return errprintf(err,
				 "the segment %s handed over is %zu bytes: not a dptrain segment",
				 made_by, bytes);
	memcpy(&c, h, sizeof(c)); /* one look: what is checked is what is used */
	if (c.magic != SHM_MAGIC)
		return errprintf(err,
				 "the segment %s handed over is not a dptrain segment (magic %08x, "
				 "not %08x): refused",
				 made_by, c.magic, SHM_MAGIC);
	if (c.version != SHM_VERSION)
		return errprintf(
		    err,
		    "the segment %s handed over is of version %u, this dptrain's are of "
		    "version %u: refused (run one dptrain version in a job)",
		    made_by, c.version, SHM_VERSION);
	header_tag(secret, c.magic, c.version, &c.l, tag);
	if (!dp_equal_ct(tag, c.tag, sizeof(tag)))
		return errprintf(err,
				 "the segment %s handed over was not made for this step (its "
				 "header's HMAC does not match this step's secret: another step's, "
				 "or corrupted): refused",
				 made_by);
	if (c.l.world != want->world || c.l.gen != want->gen || c.l.node != want->node ||
	    c.l.leader != want->leader || c.l.nlocal != want->nlocal)
		return errprintf(
		    err,
		    "the segment %s handed over is for comm %llu of %u ranks, node %u "
		    "of %u ranks led by rank %u; this rank's is comm %llu of %u ranks, "
		    "node %u of %u ranks led by rank %u: refused",
		    made_by, (unsigned long long)c.l.gen, c.l.world, c.l.node, c.l.nlocal,
		    c.l.leader, (unsigned long long)want->gen, want->world, want->node,
		    want->nlocal, want->leader);
	if (c.l.user != want->user)
		return errprintf(err,
				 "the segment %s handed over holds %llu-byte buffers; this rank "
				 "expects %llu: refused (the ranks' models differ)",
				 made_by, (unsigned long long)c.l.user,
				 (unsigned long long)want->user);
	if (c.l.slice != want->slice || c.l.depth != want->depth || c.l.size != want->size ||
	    c.l.size != bytes)
		return errprintf(
		    err,
		    "the segment %s handed over is laid out as %llu slots of %llu-byte "
		    "slices in %llu bytes (%zu mapped); this rank expects %llu of "
		    "%llu in %llu: refused (the ranks' options differ)",
		    made_by, (unsigned long long)c.l.depth, (unsigned long long)c.l.slice,
		    (unsigned long long)c.l.size, bytes, (unsigned long long)want->depth,
		    (unsigned long long)want->slice, (unsigned long long)want->size);
	return 0;
}

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

/* The layout every rank of the node computes alike: the slice within the budget, the areas
 * after the header and the lines, page-aligned. */
static void layout(const struct shm_node *nd, struct shm_layout *l, size_t *lines_at,
		   size_t *data_at)
{
	size_t n = (size_t)nd->nlocal,
	       slice = nd->slice_bytes ? nd->slice_bytes : SHM_SLICE_DEFAULT;
	size_t most = SHM_SEGMENT_BUDGET / (SHM_DEPTH * n * n);
	if (!nd->slice_bytes && slice > most)
		slice = most;
	slice = slice < SHM_SLICE_MIN && !nd->slice_bytes ? SHM_SLICE_MIN : slice;
	slice = slice < 64 ? 64 : slice / 64 * 64;
	l->world = (uint32_t)nd->world;
	l->nlocal = (uint32_t)nd->nlocal;
	l->node = (uint32_t)nd->node;
	l->leader = (uint32_t)nd->ranks[0];
	l->gen = (uint64_t)nd->gen;
	l->slice = slice;
	l->depth = SHM_DEPTH;
	l->user = nd->user_bytes ? round_up(nd->user_bytes, 4096) : 0;
	*lines_at = round_up(sizeof(struct shm_header), 256);
	*data_at = round_up(*lines_at + n * sizeof(struct shm_line), 4096);
	l->size = *data_at + (l->user ? n * l->user : n * SHM_DEPTH * n * slice);
}

void shm_layout_of(const struct shm_node *nd, struct shm_layout *l)
{
	size_t lines_at, data_at;
	layout(nd, l, &lines_at, &data_at);
}

/* ---------------------------------------------------------------------------------------
 * Counters and waits. */

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static uint64_t ctr(const struct shm_group *g, int rank, int which)
{
	return atomic_load_explicit(&g->line[rank].ctr[which], memory_order_acquire);
}

/* Whether every rank of `only` (-1: every rank but `me`) has published round `round` on
 * counter `which`; *behind is one that has not. */
static int all_reached(const struct shm_group *g, int me, int which, int only, uint64_t round,
		       int *behind)
{
	if (only >= 0) {
		*behind = only;
		return ctr(g, only, which) >= round;
	}
	for (int i = 0; i < g->n; i++)
		if (i != me && ctr(g, i, which) < round) {
			*behind = i;
			return 0;
		}
	return 1;
}

/* Publish round `round` on the counters in mask (bits 1 << C_*), then wake the ranks asleep
 * on a wait this ends. The stores and the loads of `sleeping` are sequentially consistent:
 * either this sees a sleeper, or the sleeper sees the counter before it sleeps. */
static void publish(struct shm_group *g, unsigned mask, uint64_t round)
{
	struct shm_line *me = &g->line[g->me];
	for (int w = C_IN; w <= C_DONE; w++)
		if (mask & (1u << w))
			atomic_store(&me->ctr[w], round);
	atomic_thread_fence(memory_order_seq_cst); /* the counters, then who sleeps */
	for (int i = 0; i < g->n; i++) {
		struct shm_line *o = &g->line[i];
		int behind;
		if (i == g->me || !atomic_load(&o->sleeping))
			continue;
		int which = (int)atomic_load(&o->want_which);
		if (which > C_DONE || !all_reached(g, i, which, atomic_load(&o->want_only),
						   atomic_load(&o->want_round), &behind))
			continue;
		atomic_fetch_add(&o->bell, 1);
		futex(&o->bell, FUTEX_WAKE, 1, NULL);
	}
}

static uint64_t progress(const struct shm_group *g, int which)
{
	uint64_t s = 0;
	for (int i = 0; i < g->n; i++)
		s += ctr(g, i, which);
	return s;
}

/* The wait ran out, or the store calls the roll: report it; the store's verdict names who is
 * not taking part. */
static int wait_report(struct shm_group *g, int behind, struct dp_error *err)
{
	struct shm_ctl *x = g->ctl;
	store_report_timeout(x->st, x->seq, x->op, g->ranks[behind], x->timeout_s, x->grace_s, err);
	return -1;
}

/* Until counter `which` of `only` (-1: of every other rank of the node) reaches `round`. */
static int shm_wait(struct shm_group *g, int which, int only, uint64_t round, struct dp_error *err)
{
	struct shm_ctl *x = g->ctl;
	struct shm_line *me = &g->line[g->me];
	int behind;
	if (all_reached(g, g->me, which, only, round, &behind))
		return 0;
	double t0 = now_s(), spin_until = t0 + g->spin_s;
	for (unsigned i = 1;; i++) {
		cpu_relax();
		if (all_reached(g, g->me, which, only, round, &behind)) {
			g->spin_s = g->spin_s * 2 < SHM_SPIN_MAX_S ? g->spin_s * 2 : SHM_SPIN_MAX_S;
			return 0;
		}
		if (i % 32 == 0 && now_s() >= spin_until)
			break;
	}
	g->spin_s = g->spin_s / 2 > SHM_SPIN_MIN_S ? g->spin_s / 2 : SHM_SPIN_MIN_S;
	double last = t0;
	uint64_t seen = progress(g, which);
	for (;;) {
		if (atomic_load_explicit(x->aborted, memory_order_acquire))
			return SHM_ABORTED;
		if (store_poll_abort(x->st, 0, err) == 1)
			return -1;
		if (store_rollcall(x->st))
			return wait_report(g, behind, err);
		double now = now_s();
		uint64_t p = progress(g, which);
		if (p != seen) {
			seen = p;
			last = now;
		}
		if (now >= last + x->timeout_s)
			return wait_report(g, behind, err);
		double nap =
		    last + x->timeout_s - now < SHM_NAP_S ? last + x->timeout_s - now : SHM_NAP_S;
		struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
		atomic_store(&me->want_which, (uint32_t)which);
		atomic_store(&me->want_only, only);
		atomic_store(&me->want_round, round);
		atomic_store(&me->sleeping, 1);
		atomic_thread_fence(memory_order_seq_cst); /* that it sleeps, then the counters */
		uint32_t bell = atomic_load(&me->bell);
		if (!all_reached(g, g->me, which, only, round, &behind))
			futex(&me->bell, FUTEX_WAIT, bell, &ts);
		atomic_store(&me->sleeping, 0);
		if (all_reached(g, g->me, which, only, round, &behind))
			return 0;
	}
}

void shm_wake(struct shm_group *g)
{
	if (!g)
		return;
	struct shm_line *me = &g->line[g->me];
	atomic_fetch_add(&me->bell, 1);
	futex(&me->bell, FUTEX_WAKE, 1, NULL);
}

/* ---------------------------------------------------------------------------------------
 * Copies and sums. */

static size_t stream_min(void)
{
	long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
	if (llc <= 0)
		llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
	return llc > 0 ? (size_t)llc / 4 * 3 : SHM_STREAM_MIN;
}

static void copy_out(struct shm_group *g, void *dst, const void *src, size_t n, int stream)
{
#if defined(__SSE2__)
	if (stream && n >= 256) {
		unsigned char *d = dst;
		const unsigned char *s = src;
		size_t head = (16 - ((uintptr_t)d & 15)) & 15;
		memcpy(d, s, head);
		d += head;
		s += head;
		n -= head;
		for (; n >= 64; n -= 64, d += 64, s += 64) {
			__m128i a = _mm_loadu_si128((const __m128i *)s);
			__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
			__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
			__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
			_mm_stream_si128((__m128i *)d, a);
			_mm_stream_si128((__m128i *)(d + 16), b);
			_mm_stream_si128((__m128i *)(d + 32), c);
			_mm_stream_si128((__m128i *)(d + 48), e);
		}
		memcpy(d, s, n);
		g->streamed = 1;
		return;
	}
#endif
	(void)g;
	(void)stream;
	memcpy(dst, src, n);
}

/* The end of an operation that streamed: its stores are visible before it returns. */
static void fence(struct shm_group *g)
{
#if defined(__SSE2__)
	if (g->streamed)
		_mm_sfence();
#endif
	g->streamed = 0;
}

#define RED_BLOCK 1024 /* elements summed at a time, in an L1-resident buffer */

/* Sum m elements of type T at element `at` of src[0..n) in that order, element by element
 * (((s0 + s1) + s2) + ...), divided by div if div > 1, into tmp. */
#define SUM_BLOCK(T, tmp, src, n, at, m, div)                                                      \
	do {                                                                                       \
		const T *a_ = (const T *)(src)[0] + (at), *b_ = (const T *)(src)[1] + (at);        \
		for (size_t i_ = 0; i_ < (m); i_++)                                                \
			(tmp)[i_] = a_[i_] + b_[i_];                                               \
		for (int k_ = 2; k_ < (n); k_++) {                                                 \
			const T *x_ = (const T *)(src)[k_] + (at);                                 \
			for (size_t i_ = 0; i_ < (m); i_++)                                        \
				(tmp)[i_] += x_[i_];                                               \
		}                                                                                  \
		if ((div) > 1)                                                                     \
			for (size_t i_ = 0; i_ < (m); i_++)                                        \
				(tmp)[i_] /= (T)(div);                                             \
	} while (0)

/* A block of at most RED_BLOCK elements, summed in the L1. */
union red_block {
	float f[RED_BLOCK];
	double d[RED_BLOCK];
};

/* m <= RED_BLOCK elements at `at` of src[0..n) summed (SUM_BLOCK's order) into tmp. */
static void sum_block(union red_block *tmp, const void *const *src, int n, size_t at, size_t m,
		      enum comm_dtype t, int div)
{
	if (t == COMM_F32)
		SUM_BLOCK(float, tmp->f, src, n, at, m, div);
	else
		SUM_BLOCK(double, tmp->d, src, n, at, m, div);
}

/* The sum of src[0..n) (SUM_BLOCK's order), divided by div if div > 1, into out (streamed if
 * stream) and into copy; either may be NULL. */
static void reduce_piece(struct shm_group *g, void *out, void *copy, const void *const *src, int n,
			 size_t count, enum comm_dtype t, int div, int stream)
{
	size_t es = comm_dtype_size(t);
	for (size_t at = 0; at < count; at += RED_BLOCK) {
		size_t m = count - at < RED_BLOCK ? count - at : RED_BLOCK;
		union red_block tmp;
		sum_block(&tmp, src, n, at, m, t, div);
		if (out)
			copy_out(g, (unsigned char *)out + at * es, &tmp, m * es, stream);
		if (copy)
			memcpy((unsigned char *)copy + at * es, &tmp, m * es);
	}
}

static unsigned char *slot(const struct shm_group *g, int rank, uint64_t round)
{
	return g->data + (size_t)rank * g->area +
	       (size_t)(round % g->depth) * (size_t)g->n * g->slice;
}

/* ---------------------------------------------------------------------------------------
 * The operations. */

/* Round `round` must not be written before every rank has read what round - depth left. */
static int slot_free(struct shm_group *g, uint64_t round, struct dp_error *err)
{
	if (round <= g->depth)
		return 0;
	return shm_wait(g, C_DONE, -1, round - g->depth, err);
}

/* An allreduce round: elements [lo, lo + len) of the buffer, slice s [lo + len * s / n, ...). */
struct rd_round {
	size_t lo, len;
};

static void rd_slice(const struct shm_group *g, const struct rd_round *r, int s, size_t *a,
		     size_t *b)
{
	*a = r->lo + r->len * (size_t)s / (size_t)g->n;
	*b = r->lo + r->len * (size_t)(s + 1) / (size_t)g->n;
}

static void rd_copy_in(struct shm_group *g, const struct rd_round *r, uint64_t round,
		       const unsigned char *in, size_t es)
{
	unsigned char *sl = slot(g, g->me, round);
	for (int s = 0; s < g->n; s++) {
		size_t a, b;
		if (s == g->me)
			continue;
		rd_slice(g, r, s, &a, &b);
		memcpy(sl + (size_t)s * g->slice, in + a * es, (b - a) * es);
	}
}

int shm_reduce(struct shm_group *g, const void *in, void *out, size_t count, enum comm_dtype t,
	       int div, enum shm_order order, int to_leader, struct dp_error *err)
{
	size_t es = comm_dtype_size(t), per = (size_t)g->n * (g->slice / es);
	int me = g->me, n = g->n, rv = 0;
	int gets = !to_leader || me == 0;   /* this rank receives the sum */
	int shares = !to_leader || me != 0; /* its slice's sum goes to the others */
	int stream = gets && count * es >= g->stream_min;
	const unsigned char *src = in;
	unsigned char *dst = out;
	size_t rounds = (count + per - 1) / per;
	uint64_t r0 = g->round;
	const void *inputs[n];
	/* the ring's blocks (SHM_ORDER_RING: the node holds every rank, local = global) */
	size_t base_n = count / (size_t)n, rem = count % (size_t)n;
#define BLK_OFF(k) ((size_t)(k)*base_n + ((size_t)(k) < rem ? (size_t)(k) : rem))

	if (rounds == 0)
		return 0;
	if ((rv = slot_free(g, r0 + 1, err)) != 0)
		return rv;
	struct rd_round r = {0, count < per ? count : per};
	rd_copy_in(g, &r, r0 + 1, src, es);
	publish(g, 1u << C_IN, r0 + 1);
	for (size_t k = 0; k < rounds; k++) {
		uint64_t round = r0 + 1 + k;
		size_t a, b;
		r.lo = k * per;
		r.len = count - r.lo < per ? count - r.lo : per;
		if ((rv = shm_wait(g, C_IN, -1, round, err)) != 0)
			goto out;
		/* this rank's slice, in pieces that each sum in one order */
		rd_slice(g, &r, me, &a, &b);
		unsigned char *mine = slot(g, me, round) + (size_t)me * g->slice;
		for (size_t p = a; p < b;) {
			size_t q = b;
			int first = 0; /* the first rank in the order */
			if (order == SHM_ORDER_RING) {
				int blk = 0;
				while (blk + 1 < n && BLK_OFF(blk + 1) <= p)
					blk++;
				q = BLK_OFF(blk + 1) < b ? BLK_OFF(blk + 1) : b;
				first = (blk + 1) % n;
			}
			for (int i = 0; i < n; i++) {
				int who = (first + i) % n;
				inputs[i] = who == me ? (const void *)(src + p * es)
						      : (const void *)(slot(g, who, round) +
								       (size_t)me * g->slice +
								       (p - a) * es);
			}
			reduce_piece(g, gets ? dst + p * es : NULL,
				     shares ? mine + (p - a) * es : NULL, inputs, n, q - p, t, div,
				     stream);
			p = q;
		}
		publish(g, 1u << C_RED | (gets ? 0 : 1u << C_DONE), round);
		/* the next round in, while the others finish adding this one */
		if (k + 1 < rounds) {
			struct rd_round nx = {(k + 1) * per, count - (k + 1) * per < per
								 ? count - (k + 1) * per
								 : per};
			if ((rv = slot_free(g, round + 1, err)) != 0)
				goto out;
			rd_copy_in(g, &nx, round + 1, src, es);
			publish(g, 1u << C_IN, round + 1);
		}
		if (!gets)
			continue;
		if ((rv = shm_wait(g, C_RED, -1, round, err)) != 0)
			goto out;
		for (int s = 0; s < n; s++) {
			if (s == me)
				continue;
			rd_slice(g, &r, s, &a, &b);
			copy_out(g, dst + a * es, slot(g, s, round) + (size_t)s * g->slice,
				 (b - a) * es, stream);
		}
		publish(g, 1u << C_DONE, round);
	}
out:
#undef BLK_OFF
	g->round = r0 + rounds;
	fence(g);
	return rv;
}

void *shm_buffer(struct shm_group *g)
{
	return g && g->user ? g->data + (size_t)g->me * g->user : NULL;
}

int shm_reduce_shared(struct shm_group *g, size_t off, size_t count, enum comm_dtype t, int div,
		      enum shm_order order, int to_leader, struct dp_error *err)
{
	size_t es = comm_dtype_size(t);
	int me = g->me, n = g->n, rv;
	uint64_t round = g->round + 1;
	unsigned char *buf[n];
	const void *inputs[n];
	/* this rank's block of the ring: its elements start their sum at the next rank's */
	size_t base_n = count / (size_t)n, rem = count % (size_t)n;
	size_t lo = (size_t)me * base_n + ((size_t)me < rem ? (size_t)me : rem);
	size_t hi = lo + base_n + ((size_t)me < rem ? 1 : 0);
	int first = order == SHM_ORDER_RING ? (me + 1) % n : 0;
	int outs = to_leader ? 1 : n; /* the buffers the sums go to: the leader's first */

	if (!g->user || off % es || off + count * es > g->user)
		return errprintf(err,
				 "shared allreduce of %zu bytes at %zu: not in the %zu-byte buffer",
				 count * es, off, g->user);
	for (int r = 0; r < n; r++)
		buf[r] = g->data + (size_t)r * g->user + off;
	for (int i = 0; i < n; i++)
		inputs[i] = buf[(first + i) % n];
	publish(g, 1u << C_IN, round);
	if ((rv = shm_wait(g, C_IN, -1, round, err)) != 0)
		goto out;
	for (size_t at = lo; at < hi; at += RED_BLOCK) {
		size_t m = hi - at < RED_BLOCK ? hi - at : RED_BLOCK;
		union red_block tmp;
		sum_block(&tmp, inputs, n, at, m, t, div);
		for (int r = 0; r < outs; r++)
			memcpy(buf[r] + at * es, &tmp, m * es);
	}
	/* the sums are in place once every rank has published its block */
	publish(g, 1u << C_RED | 1u << C_DONE, round);
	rv = shm_wait(g, C_RED, -1, round, err);
out:
	g->round = round;
	return rv;
}

int shm_bcast_shared(struct shm_group *g, size_t off, size_t bytes, struct dp_error *err)
{
	uint64_t round = g->round + 1;
	const unsigned all = 1u << C_IN | 1u << C_RED | 1u << C_DONE;
	int rv;
	if (!g->user || off > g->user || bytes > g->user - off)
		return errprintf(err,
				 "shared broadcast of %zu bytes at %zu: not in the %zu-byte buffer",
				 bytes, off, g->user);
	/* this rank's share of the copies, in whole cache lines (the last rank's takes the rest):
	 * every core of the node copies */
	size_t lo, hi;
	comm_share(bytes / 64, g->me, g->n, &lo, &hi);
	lo *= 64;
	hi = g->me + 1 == g->n ? bytes : hi * 64;
	g->round = round;
	if (g->me == 0)
		publish(g, 1u << C_IN, round); /* the sum is in the leader's buffer */
	else if ((rv = shm_wait(g, C_IN, 0, round, err)) != 0)
		return rv;
	for (int r = 1; r < g->n; r++)
		memcpy(g->data + (size_t)r * g->user + off + lo, g->data + off + lo, hi - lo);
	/* every buffer is the others' to write until they all say so */
	publish(g, all, round);
	return shm_wait(g, C_DONE, -1, round, err);
}

int shm_reduce_scatter(struct shm_group *g, const void *in, void *out, size_t count,
		       enum comm_dtype t, int div, struct dp_error *err)
{
	size_t es = comm_dtype_size(t), per = g->slice / es;
	int me = g->me, n = g->n, rv = 0;
	const unsigned char *src = in;
	unsigned char *dst = out;
	size_t rounds = (count + per - 1) / per;
	uint64_t r0 = g->round;
	const void *inputs[n];
	int stream = count * es >= g->stream_min;
	for (size_t k = 0; k < rounds; k++) {
		uint64_t round = r0 + 1 + k;
		size_t lo = k * per, len = count - lo < per ? count - lo : per;
		if ((rv = slot_free(g, round, err)) != 0)
			goto out;
		unsigned char *sl = slot(g, me, round);
		for (int s = 0; s < n; s++)
			if (s != me)
				memcpy(sl + (size_t)s * g->slice,
				       src + ((size_t)s * count + lo) * es, len * es);
		publish(g, 1u << C_IN, round);
		if ((rv = shm_wait(g, C_IN, -1, round, err)) != 0)
			goto out;
		for (int i = 0; i < n; i++) { /* block me: the ring's order, from rank me + 1 */
			int who = (me + 1 + i) % n;
			inputs[i] =
			    who == me ? (const void *)(src + ((size_t)me * count + lo) * es)
				      : (const void *)(slot(g, who, round) + (size_t)me * g->slice);
		}
		reduce_piece(g, dst + lo * es, NULL, inputs, n, len, t, div, stream);
		publish(g, 1u << C_RED | 1u << C_DONE, round);
	}
out:
	g->round = r0 + rounds;
	fence(g);
	return rv;
}

int shm_allgather(struct shm_group *g, const void *in, void *out, size_t count, enum comm_dtype t,
		  struct dp_error *err)
{
	size_t bytes = count * comm_dtype_size(t), per = (size_t)g->n * g->slice;
	int me = g->me, n = g->n, rv = 0;
	unsigned char *o = out;
	size_t rounds = (bytes + per - 1) / per;
	uint64_t r0 = g->round;
	int stream = bytes * (size_t)n >= g->stream_min;
	if (in != o + (size_t)me * bytes)
		memmove(o + (size_t)me * bytes, in, bytes);
	for (size_t k = 0; k < rounds; k++) {
		uint64_t round = r0 + 1 + k;
		size_t lo = k * per, len = bytes - lo < per ? bytes - lo : per;
		if ((rv = slot_free(g, round, err)) != 0)
			goto out;
		memcpy(slot(g, me, round), o + (size_t)me * bytes + lo, len);
		publish(g, 1u << C_IN | 1u << C_RED, round);
		if ((rv = shm_wait(g, C_IN, -1, round, err)) != 0)
			goto out;
		for (int i = 0; i < n; i++)
			if (i != me)
				copy_out(g, o + (size_t)i * bytes + lo, slot(g, i, round), len,
					 stream);
		publish(g, 1u << C_DONE, round);
	}
out:
	g->round = r0 + rounds;
	fence(g);
	return rv;
}

int shm_bcast(struct shm_group *g, const void *src, void *dst, size_t bytes, int root,
	      struct dp_error *err)
{
	size_t per = (size_t)g->n * g->slice;
	int rv = 0;
	size_t rounds = (bytes + per - 1) / per;
	uint64_t r0 = g->round;
	int stream = bytes >= SHM_STREAM_MIN;
	const unsigned all = 1u << C_IN | 1u << C_RED | 1u << C_DONE;
	if (g->me != root && !dst) { /* none of it for this rank: the root waits for no one */
		if (rounds)
			publish(g, all, r0 + rounds);
		g->round = r0 + rounds;
		return 0;
	}
	for (size_t k = 0; k < rounds; k++) {
		uint64_t round = r0 + 1 + k;
		size_t lo = k * per, len = bytes - lo < per ? bytes - lo : per;
		if (g->me == root) {
			if ((rv = slot_free(g, round, err)) != 0)
				goto out;
			memcpy(slot(g, root, round), (const unsigned char *)src + lo, len);
			publish(g, all, round);
			continue;
		}
		if ((rv = shm_wait(g, C_IN, root, round, err)) != 0)
			goto out;
		copy_out(g, (unsigned char *)dst + lo, slot(g, root, round), len, stream);
		publish(g, all, round);
	}
out:
	g->round = r0 + rounds;
	fence(g);
	return rv;
}

int shm_barrier(struct shm_group *g, struct dp_error *err)
{
	uint64_t round = ++g->round;
	publish(g, 1u << C_IN | 1u << C_RED | 1u << C_DONE, round);
	return shm_wait(g, C_DONE, -1, round, err);
}

/* ---------------------------------------------------------------------------------------
 * Making the segment and handing it over. */

ssize_t shm_send_fd(int sock, const void *buf, size_t len, int fd, int flags)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	memset(&cm, 0, sizeof(cm));
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &m, MSG_NOSIGNAL | flags);
}

/* The leader's socket: "\0dptrain-shm-" and an HMAC of the secret, the nonce it published,
 * the comm and the node, so that no one can take the name before the leader (the nonce is
 * random), and no two steps or comms or nodes share one. */
void shm_sock_name(const char *secret, const unsigned char *nonce, const struct shm_layout *l,
		   struct sockaddr_un *a, unsigned *len)
{
	unsigned char b[12], mac[DP_SHA256_LEN];
	struct dp_hmac h;
	put32(b, (uint32_t)l->gen);
	put32(b + 4, l->node);
	put32(b + 8, l->leader);
	dp_hmac_init(&h, secret, strlen(secret));
	dp_hmac_update(&h, SHM_SOCKET_LABEL, sizeof(SHM_SOCKET_LABEL));
	dp_hmac_update(&h, nonce, SHM_NONCE);
	dp_hmac_update(&h, b, sizeof(b));
	dp_hmac_final(&h, mac);
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	char *p = a->sun_path + 1;
	p += sprintf(p, "dptrain-shm-");
	for (int i = 0; i < 16; i++)
		p += sprintf(p, "%02x", mac[i]);
	*len = (unsigned)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - a->sun_path));
}

/* The MAC of a hello (welcome: the leader's answer) between nonces nl and nf for rank. */
void shm_hello_mac(const char *secret, const char *label, size_t label_len, const unsigned char *nl,
		   const unsigned char *nf, uint32_t rank, const struct shm_layout *l,
		   unsigned char out[DP_SHA256_LEN])
{
	unsigned char b[16];
	struct dp_hmac h;
	put32(b, rank);
	put32(b + 4, l->world);
	put32(b + 8, (uint32_t)l->gen);
	put32(b + 12, l->node);
	dp_hmac_init(&h, secret, strlen(secret));
	dp_hmac_update(&h, label, label_len);
	dp_hmac_update(&h, nl, SHM_NONCE);
	dp_hmac_update(&h, nf, SHM_NONCE);
	dp_hmac_update(&h, b, sizeof(b));
	dp_hmac_final(&h, out);
}

static int peer_uid_ok(int fd)
{
	struct ucred cr;
	socklen_t l = sizeof(cr);
	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) == 0 && cr.uid == geteuid();
}

static void nonce_key(char *key, size_t len, const struct shm_layout *l)
{
	snprintf(key, len, "dptrain.comm.cpu.%llu.shm.%u%s", (unsigned long long)l->gen, l->leader,
		 l->user ? ".buffers" : "");
}

/* A connection to the leader's socket, heard until it proves itself. */
struct shm_peer {
	int fd;
	double by;
	unsigned char challenge[SHM_CHALLENGE], hello[SHM_HELLO];
	size_t sent, got;
};

static void peer_drop(struct shm_peer *p, int *np, int i)
{
	close(p[i].fd);
	p[i] = p[--*np];
}

/* 1: p answered as local rank *who and was handed the segment; 0: not yet; -1: drop it. */
static int peer_step(struct shm_group *g, struct shm_peer *p, const struct shm_layout *l,
		     const char *secret, const int *served, int *who)
{
	while (p->sent < SHM_CHALLENGE) {
		ssize_t k = send(p->fd, p->challenge + p->sent, SHM_CHALLENGE - p->sent,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0)
			p->sent += (size_t)k;
		else if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		else
			return -1;
	}
	while (p->got < SHM_HELLO) {
		ssize_t k = recv(p->fd, p->hello + p->got, SHM_HELLO - p->got, MSG_DONTWAIT);
		if (k > 0)
			p->got += (size_t)k;
		else if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		else
			return -1;
	}
	uint32_t magic, rank;
	memcpy(&magic, p->hello, 4);
	memcpy(&rank, p->hello + 4, 4);
	magic = ntohl(magic);
	rank = ntohl(rank);
	int j = -1;
	for (int i = 1; i < g->n; i++)
		if ((uint32_t)g->ranks[i] == rank)
			j = i;
	if (magic != SHM_HELLO_MAGIC || j < 0 || served[j])
		return -1;
	unsigned char want[DP_SHA256_LEN], answer[SHM_WELCOME];
	shm_hello_mac(secret, SHM_HELLO_LABEL, sizeof(SHM_HELLO_LABEL), p->challenge + 4,
		      p->hello + 8, rank, l, want);
	if (!dp_equal_ct(want, p->hello + 8 + SHM_NONCE, sizeof(want)))
		return -1;
	put32(answer, SHM_HELLO_MAGIC);
	shm_hello_mac(secret, SHM_WELCOME_LABEL, sizeof(SHM_WELCOME_LABEL), p->challenge + 4,
		      p->hello + 8, rank, l, answer + 4);
	/* the welcome and the descriptor in one message */
	if (shm_send_fd(p->fd, answer, sizeof(answer), g->fd, MSG_DONTWAIT) !=
	    (ssize_t)sizeof(answer))
		return -1;
	*who = j;
	return 1;
}

/* The leader: make the segment, publish the nonce, hand the segment to every other local rank
 * that proves itself. */
static int leader_serve(struct shm_group *g, const struct shm_layout *l, double deadline,
			struct dp_error *err)
{
	struct shm_ctl *x = g->ctl;
	const char *secret = store_secret(x->st);
	unsigned char nonce[SHM_NONCE];
	char key[128], hex[2 * SHM_NONCE + 1];
	struct sockaddr_un a;
	socklen_t alen;
	struct shm_peer peer[SHM_PENDING];
	int npeer = 0, left = g->n - 1, refused = 0, rv = -1, lfd = -1;
	int *served = calloc((size_t)g->n, sizeof(int));
	if (!served)
		return errprintf(err, "comm: out of memory");
	nonce_key(key, sizeof(key), l);
	if (dp_random(nonce, sizeof(nonce), err) < 0) {
		errprefix(err, "comm: cannot make the node's socket name");
		goto out;
	}
	shm_sock_name(secret, nonce, l, &a, &alen);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, alen) < 0 || listen(lfd, 64) < 0) {
		errprintf(err, "comm: cannot listen on the node's socket @%s: %s", a.sun_path + 1,
			  strerror(errno));
		goto out;
	}
	for (int i = 0; i < SHM_NONCE; i++)
		sprintf(hex + 2 * i, "%02x", nonce[i]);
	if (store_set(x->st, key, hex, strlen(hex), err) < 0)
		goto out;
	while (left > 0) {
		struct pollfd p[2 + SHM_PENDING];
		double wake = deadline;
		p[0] = (struct pollfd){.fd = store_fd(x->st), .events = POLLIN};
		p[1] = (struct pollfd){.fd = lfd, .events = POLLIN};
		for (int i = 0; i < npeer; i++) {
			p[2 + i] = (struct pollfd){.fd = peer[i].fd,
						   .events = peer[i].sent < SHM_CHALLENGE ? POLLOUT
											  : POLLIN};
			wake = peer[i].by < wake ? peer[i].by : wake;
		}
		int k = poll(p, (nfds_t)(2 + npeer), ms_until(wake));
		if (k < 0 && errno != EINTR) {
			errprintf(err, "comm: poll: %s", strerror(errno));
			goto out;
		}
		if (store_poll_abort(x->st, 0, err) == 1) {
			errprefix(err, "comm");
			goto out;
		}
		for (int i = 0; i < npeer;) {
			int who, r = now_s() < peer[i].by
					 ? peer_step(g, &peer[i], l, secret, served, &who)
					 : -1;
			if (r == 0) {
				i++;
				continue;
			}
			if (r > 0) {
				served[who] = 1;
				left--;
			} else {
				refused++;
			}
			peer_drop(peer, &npeer, i);
		}
		for (;;) {
			int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			if (fd < 0)
				break;
			if (!peer_uid_ok(fd)) {
				close(fd);
				refused++;
				continue;
			}
			if (npeer == SHM_PENDING) { /* the oldest makes room */
				int old = 0;
				for (int i = 1; i < npeer; i++)
					if (peer[i].by < peer[old].by)
						old = i;
				peer_drop(peer, &npeer, old);
				refused++;
			}
			struct shm_peer *q = &peer[npeer++];
			memset(q, 0, sizeof(*q));
			q->fd = fd;
			q->by = now_s() + SHM_HELLO_S;
			put32(q->challenge, SHM_HELLO_MAGIC);
			if (dp_random(q->challenge + 4, SHM_NONCE, err) < 0) {
				errprefix(err, "comm: cannot make the node's challenge");
				goto out;
			}
		}
		if (left > 0 && now_s() >= deadline) {
			char name[300], list[1024] = "";
			size_t at = 0;
			int missing = 0;
			for (int i = 1; i < g->n; i++) {
				if (served[i])
					continue;
				if (missing++ < 8 && at < sizeof(list))
					at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s",
							       at ? ", " : "",
							       store_rank_name(x->st, g->ranks[i],
									       name, sizeof(name)));
			}
			errprintf(
			    err,
			    "comm: %d of this node's %d other ranks did not attach to its shared "
			    "memory within %g s%s: %s%s",
			    missing, g->n - 1, x->timeout_s,
			    refused ? " (connections that could not prove the step's secret "
				      "were refused)"
				    : "",
			    list, missing > 8 ? ", ..." : "");
			goto out;
		}
	}
	rv = 0;
out:
	while (npeer > 0)
		peer_drop(peer, &npeer, 0);
	if (lfd >= 0)
		close(lfd); /* the name goes with it */
	free(served);
	return rv;
}

/* Moves n bytes over fd (out: send) by the deadline, watching the store: 0, or -1 (err). */
static int io_by(struct shm_group *g, int fd, void *buf, size_t n, int out, double deadline,
		 const char *leader, struct dp_error *err)
{
	size_t done = 0;
	while (done < n) {
		ssize_t k = out ? send(fd, (unsigned char *)buf + done, n - done,
				       MSG_NOSIGNAL | MSG_DONTWAIT)
				: recv(fd, (unsigned char *)buf + done, n - done, MSG_DONTWAIT);
		if (k > 0) {
			done += (size_t)k;
			continue;
		}
		if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
			if (store_poll_abort(g->ctl->st, 2, err) == 1)
				return errprefix(err, "comm");
			return errprintf(err,
					 "comm: %s closed the node's socket before handing over "
					 "its shared memory",
					 leader);
		}
		struct pollfd p[2] = {{.fd = fd, .events = out ? POLLOUT : POLLIN},
				      {.fd = store_fd(g->ctl->st), .events = POLLIN}};
		if (poll(p, 2, ms_until(deadline)) == 0 && now_s() >= deadline)
			return errprintf(
			    err,
			    "comm: %s did not hand over the node's shared memory within "
			    "%g s",
			    leader, g->ctl->timeout_s);
		if (store_poll_abort(g->ctl->st, 0, err) == 1)
			return errprefix(err, "comm");
	}
	return 0;
}

/* The welcome and the descriptor; -1 (err) if anything but one descriptor came. */
static int recv_welcome(struct shm_group *g, int fd, unsigned char *answer, int *seg,
			double deadline, const char *leader, struct dp_error *err)
{
	*seg = -1;
	for (;;) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(4 * sizeof(int))];
		} cm;
		struct iovec iov = {.iov_base = answer, .iov_len = SHM_WELCOME};
		struct msghdr m = {.msg_iov = &iov,
				   .msg_iovlen = 1,
				   .msg_control = cm.b,
				   .msg_controllen = sizeof(cm.b)};
		ssize_t k = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
					      {.fd = store_fd(g->ctl->st), .events = POLLIN}};
			if (poll(p, 2, ms_until(deadline)) == 0 && now_s() >= deadline)
				return errprintf(
				    err,
				    "comm: %s did not hand over the node's shared memory "
				    "within %g s",
				    leader, g->ctl->timeout_s);
			if (store_poll_abort(g->ctl->st, 0, err) == 1)
				return errprefix(err, "comm");
			continue;
		}
		int nfd = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nf; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (nfd++ == 0)
					*seg = f;
				else
					close(f);
			}
		}
		if (k != SHM_WELCOME || nfd != 1 || (m.msg_flags & MSG_CTRUNC)) {
			if (*seg >= 0)
				close(*seg);
			*seg = -1;
			if (k == 0 && store_poll_abort(g->ctl->st, 2, err) == 1)
				return errprefix(err, "comm");
			return errprintf(err,
					 "comm: %s's node socket answered with %zd bytes and %d "
					 "descriptors, not the node's shared memory: refused",
					 leader, k, nfd);
		}
		return 0;
	}
}

/* A rank but the leader: the nonce from the store, the leader's socket, the handshake, the
 * descriptor; checked before it is mapped. */
static int follower_attach(struct shm_group *g, const struct shm_layout *l, double deadline,
			   struct dp_error *err)
{
	struct shm_ctl *x = g->ctl;
	const char *secret = store_secret(x->st);
	char key[128], leader[300];
	void *v = NULL;
	size_t vlen;
	unsigned char nonce[SHM_NONCE], chal[SHM_CHALLENGE], hello[SHM_HELLO], answer[SHM_WELCOME],
	    want[DP_SHA256_LEN];
	struct sockaddr_un a;
	socklen_t alen;
	int fd = -1, seg = -1, rv = -1;
	store_rank_name(x->st, g->ranks[0], leader, sizeof(leader));
	nonce_key(key, sizeof(key), l);
	double left = deadline - now_s();
	if (store_get(x->st, key, &v, &vlen, left > 0 ? left : 0.001, err) < 0) {
		errprefix(err, "comm: waiting for %s's shared memory", leader);
		goto out;
	}
	if (vlen && ((char *)v)[0] == '!') {
		errprintf(err, "comm: %s could not make the node's shared memory: %s", leader,
			  (char *)v + 1);
		goto out;
	}
	for (int i = 0; i < SHM_NONCE; i++) {
		unsigned b;
		if (vlen != 2 * SHM_NONCE || sscanf((char *)v + 2 * i, "%2x", &b) != 1) {
			errprintf(err, "comm: %s published a bad socket nonce", leader);
			goto out;
		}
		nonce[i] = (unsigned char)b;
	}
	shm_sock_name(secret, nonce, l, &a, &alen);
	for (;;) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			errprintf(err, "comm: socket: %s", strerror(errno));
			goto out;
		}
		if (connect(fd, (struct sockaddr *)&a, alen) == 0)
			break;
		int e = errno;
		close(fd);
		fd = -1;
		if ((e != EAGAIN && e != EINTR) || now_s() >= deadline) {
			if (store_poll_abort(x->st, 2, err) == 1) {
				errprefix(err, "comm");
				goto out;
			}
			errprintf(err, "comm: cannot reach %s's node socket @%s: %s", leader,
				  a.sun_path + 1, strerror(e));
			goto out;
		}
		struct timespec ts = {0, 10 * 1000 * 1000}; /* its backlog is full: soon */
		nanosleep(&ts, NULL);
	}
	if (!peer_uid_ok(fd)) {
		errprintf(err, "comm: %s's node socket @%s is served by another user: refused",
			  leader, a.sun_path + 1);
		goto out;
	}
	if (io_by(g, fd, chal, sizeof(chal), 0, deadline, leader, err) < 0)
		goto out;
	uint32_t magic;
	memcpy(&magic, chal, 4);
	if (ntohl(magic) != SHM_HELLO_MAGIC) {
		errprintf(err, "comm: %s's node socket did not send a dptrain challenge", leader);
		goto out;
	}
	put32(hello, SHM_HELLO_MAGIC);
	put32(hello + 4, (uint32_t)g->ranks[g->me]);
	if (dp_random(hello + 8, SHM_NONCE, err) < 0) {
		errprefix(err, "comm: cannot make the node's challenge");
		goto out;
	}
	shm_hello_mac(secret, SHM_HELLO_LABEL, sizeof(SHM_HELLO_LABEL), chal + 4, hello + 8,
		      (uint32_t)g->ranks[g->me], l, hello + 8 + SHM_NONCE);
	if (io_by(g, fd, hello, sizeof(hello), 1, deadline, leader, err) < 0 ||
	    recv_welcome(g, fd, answer, &seg, deadline, leader, err) < 0)
		goto out;
	shm_hello_mac(secret, SHM_WELCOME_LABEL, sizeof(SHM_WELCOME_LABEL), chal + 4, hello + 8,
		      (uint32_t)g->ranks[g->me], l, want);
	memcpy(&magic, answer, 4);
	if (ntohl(magic) != SHM_HELLO_MAGIC || !dp_equal_ct(want, answer + 4, sizeof(want))) {
		errprintf(err,
			  "comm: %s's node socket could not prove the step's secret: its segment "
			  "is refused",
			  leader);
		goto out;
	}
	struct stat sb;
	int seals = fcntl(seg, F_GET_SEALS);
	if (fstat(seg, &sb) < 0 || sb.st_uid != geteuid() || (sb.st_mode & 077) ||
	    (uint64_t)sb.st_size != l->size || seals < 0 || !(seals & F_SEAL_SHRINK)) {
		errprintf(err,
			  "comm: the segment %s handed over is not this user's sealed 0600 segment "
			  "of %llu bytes: refused",
			  leader, (unsigned long long)l->size);
		goto out;
	}
	void *p = mmap(NULL, (size_t)l->size, PROT_READ | PROT_WRITE, MAP_SHARED, seg, 0);
	if (p == MAP_FAILED) {
		errprintf(err, "comm: cannot map the node's shared memory (%llu bytes): %s",
			  (unsigned long long)l->size, strerror(errno));
		goto out;
	}
	g->base = p;
	g->size = (size_t)l->size;
	g->fd = seg;
	seg = -1;
	if (shm_header_check((const struct shm_header *)g->base, g->size, secret, l, leader, err) <
	    0) {
		errprefix(err, "comm");
		goto out;
	}
	rv = 0;
out:
	if (rv < 0 && g->base) {
		munmap(g->base, g->size);
		g->base = NULL;
	}
	if (seg >= 0)
		close(seg);
	if (fd >= 0)
		close(fd);
	free(v);
	return rv;
}

static int leader_make(struct shm_group *g, const struct shm_layout *l, struct dp_error *err)
{
	int fd = memfd_create("dptrain-comm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return errprintf(err, "memfd_create: %s", strerror(errno));
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)l->size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		errprintf(err, "%llu bytes of shared memory: %s", (unsigned long long)l->size,
			  strerror(errno));
		close(fd);
		return -1;
	}
	void *p = mmap(NULL, (size_t)l->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		errprintf(err, "mapping %llu bytes of shared memory: %s",
			  (unsigned long long)l->size, strerror(errno));
		close(fd);
		return -1;
	}
	g->base = p;
	g->size = (size_t)l->size;
	g->fd = fd;
	shm_header_make((struct shm_header *)g->base, store_secret(g->ctl->st), l);
	return 0;
}

int shm_create(struct shm_group **out, struct shm_ctl *ctl, const struct shm_node *nd,
	       struct dp_error *err)
{
	struct shm_group *g = calloc(1, sizeof(*g));
	struct shm_layout l;
	size_t lines_at, data_at;
	double deadline = now_s() + ctl->timeout_s;
	int rv = -1;
	*out = NULL;
	if (!g || !(g->ranks = malloc((size_t)nd->nlocal * sizeof(int)))) {
		free(g);
		return errprintf(err, "comm: out of memory");
	}
	g->ctl = ctl;
	g->n = nd->nlocal;
	g->me = nd->local;
	g->world = nd->world;
	g->node = nd->node;
	g->fd = -1;
	g->spin_s = SHM_SPIN_MAX_S / 4;
	g->stream_min = nd->stream_min ? nd->stream_min : stream_min();
	memcpy(g->ranks, nd->ranks, (size_t)nd->nlocal * sizeof(int));
	layout(nd, &l, &lines_at, &data_at);
	g->slice = (size_t)l.slice;
	g->depth = (unsigned)l.depth;
	g->area = (size_t)l.depth * (size_t)g->n * g->slice;
	g->user = (size_t)l.user;
	if (g->me == 0) {
		if (leader_make(g, &l, err) < 0) {
			char key[128];
			struct dp_error e2;
			size_t n = strlen(err->text);
			char *bang = malloc(n + 2);
			nonce_key(key, sizeof(key), &l);
			if (bang) { /* the others fail at once with this, not at their timeout */
				bang[0] = '!';
				memcpy(bang + 1, err->text, n + 1);
				store_set(ctl->st, key, bang, n + 1, &e2);
				free(bang);
			}
			errprefix(err,
				  "comm: cannot make this node's shared memory (DPTRAIN_COMM_SHM=0 "
				  "turns it off)");
			goto out;
		}
	}
	if (g->me == 0 ? leader_serve(g, &l, deadline, err) < 0
		       : follower_attach(g, &l, deadline, err) < 0)
		goto out;
	g->line = (struct shm_line *)(void *)(g->base + lines_at);
	g->data = g->base + data_at;
	atomic_store(&g->line[g->me].pid, (int32_t)getpid());
	/* every rank of the node has mapped it */
	struct dp_error e;
	int r = shm_barrier(g, &e);
	if (r == SHM_ABORTED) {
		errprintf(err, "comm: aborted");
		goto out;
	}
	if (r < 0) {
		errprintf(err, "comm: attaching to the node's shared memory: %s", e.text);
		goto out;
	}
	*out = g;
	g = NULL;
	rv = 0;
out:
	shm_destroy(g);
	return rv;
}

void shm_destroy(struct shm_group *g)
{
	if (!g)
		return;
	if (g->base)
		munmap(g->base, g->size);
	if (g->fd >= 0)
		close(g->fd);
	free(g->ranks);
	free(g);
}
