/* store_wire.c — the store's frames and byte buffers (store_wire.h), for its server and its
 * client. */
#include "store/store_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---------------------------------------------------------------------------------------
 * Byte buffers and frames. */

int sw_sbuf_reserve(struct sbuf *b, size_t n)
{
	if (b->off == b->len)
		b->off = b->len = 0;
	if (b->len + n <= b->cap)
		return 0;
	if (b->off > 0) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + n <= b->cap)
			return 0;
	}
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p) {
		b->bad = 1;
		return -1;
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

void sw_sbuf_put(struct sbuf *b, const void *d, size_t n)
{
	if (sw_sbuf_reserve(b, n) < 0)
		return;
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

void sw_sbuf_free(struct sbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void sw_put_u8(struct sbuf *b, uint8_t v)
{
	sw_sbuf_put(b, &v, 1);
}

void sw_put_u32(struct sbuf *b, uint32_t v)
{
	uint32_t be = htonl(v);
	sw_sbuf_put(b, &be, 4);
}

void sw_put_u64(struct sbuf *b, uint64_t v)
{
	sw_put_u32(b, (uint32_t)(v >> 32));
	sw_put_u32(b, (uint32_t)v);
}

void sw_put_blob(struct sbuf *b, const void *d, size_t n)
{
	sw_put_u32(b, (uint32_t)n);
	sw_sbuf_put(b, d, n);
}

void sw_put_str(struct sbuf *b, const char *s)
{
	sw_put_blob(b, s, strlen(s));
}

/* Starts a frame in b; returns where its length goes, for sw_frame_end. */
size_t sw_frame_begin(struct sbuf *b, int type, uint32_t id)
{
	size_t at = b->len;
	sw_put_u32(b, 0);
	sw_put_u8(b, (uint8_t)type);
	sw_put_u32(b, id);
	return at;
}

void sw_frame_end(struct sbuf *b, size_t at)
{
	if (b->bad)
		return;
	uint32_t be = htonl((uint32_t)(b->len - at - 4));
	memcpy(b->p + at, &be, 4);
}

void sw_frame_abort(struct sbuf *b, const char *reason, int kind)
{
	size_t at = sw_frame_begin(b, MSG_ABORT, 0);
	sw_put_str(b, reason);
	sw_put_u32(b, (uint32_t)kind);
	sw_frame_end(b, at);
}

uint32_t sw_rd_u32(struct rd *r)
{
	if (r->n - r->off < 4) {
		r->bad = 1;
		return 0;
	}
	uint32_t be;
	memcpy(&be, r->p + r->off, 4);
	r->off += 4;
	return ntohl(be);
}

uint64_t sw_rd_u64(struct rd *r)
{
	uint64_t hi = sw_rd_u32(r);
	return hi << 32 | sw_rd_u32(r);
}

const char *sw_rd_blob(struct rd *r, size_t *len)
{
	size_t n = sw_rd_u32(r);
	if (r->bad || r->n - r->off < n) {
		r->bad = 1;
		*len = 0;
		return "";
	}
	const char *p = (const char *)r->p + r->off;
	r->off += n;
	*len = n;
	return p;
}

/* A copy of a blob as a C string (keys, names, messages). */
char *sw_rd_strdup(struct rd *r)
{
	size_t n;
	const char *p = sw_rd_blob(r, &n);
	char *s = malloc(n + 1);
	if (!s) {
		r->bad = 1;
		return NULL;
	}
	memcpy(s, p, n);
	s[n] = 0;
	return s;
}

/* One complete frame at the front of b, or 0; -1 for a frame no peer of ours sends. */
int sw_frame_next(struct sbuf *b, int *type, uint32_t *id, struct rd *body)
{
	size_t have = b->len - b->off;
	if (have < 4)
		return 0;
	uint32_t be;
	memcpy(&be, b->p + b->off, 4);
	size_t len = ntohl(be);
	if (len < FRAME_HEAD - 4 || len > FRAME_MAX)
		return -1;
	if (have < 4 + len)
		return 0;
	const unsigned char *f = (const unsigned char *)b->p + b->off;
	*type = f[4];
	memcpy(&be, f + 5, 4);
	*id = ntohl(be);
	body->p = f + FRAME_HEAD;
	body->n = len - (FRAME_HEAD - 4);
	body->off = 0;
	body->bad = 0;
	b->off += 4 + len;
	return 1;
}

/* Reads what the socket has into b (nonblocking). 1: read some, 0: nothing now, -1: EOF or
 * error (errno; 0 for EOF). The buffer starts small (rank 0 holds one per rank) and doubles
 * while what is pending fills it. */
int sw_sbuf_fill(struct sbuf *b, int fd)
{
	int got = 0;
	for (;;) {
		size_t pending = b->len - b->off;
		if (b->cap - b->len < 512 &&
		    sw_sbuf_reserve(b, pending > 512 ? pending : 512) < 0) {
			errno = ENOMEM;
			return -1;
		}
		size_t room = b->cap - b->len;
		ssize_t n = recv(fd, b->p + b->len, room, MSG_DONTWAIT);
		if (n > 0) {
			b->len += (size_t)n;
			got = 1;
			if ((size_t)n < room)
				return got;
			continue;
		}
		if (n == 0) {
			errno = 0;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return got;
		return -1;
	}
}

/* Sends what b holds (nonblocking). 0: all or some sent, -1: error. */
int sw_sbuf_flush(struct sbuf *b, int fd)
{
	while (b->off < b->len) {
		ssize_t n = send(fd, b->p + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			b->off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		return -1;
	}
	b->off = b->len = 0;
	return 0;
}

void sw_rank_label(char *buf, size_t len, int rank, const char *host)
{
	if (host && *host)
		snprintf(buf, len, "rank %d (%s)", rank, host);
	else
		snprintf(buf, len, "rank %d", rank);
}

/* Room for one more element in the growable array *arrp (its capacity *cap, n in use),
 * doubled from `first`: 0, or -1 when out of memory (the array is left as it was). Through
 * SW_ARRAY_ROOM, which passes the element size. */
int sw_array_room(void *arrp, size_t *cap, size_t n, size_t elem, size_t first)
{
	void *p, *q;
	size_t ncap;

	if (n < *cap)
		return 0;
	ncap = *cap ? 2 * *cap : first;
	memcpy(&p, arrp, sizeof(p));
	q = realloc(p, ncap * elem);
	if (!q)
		return -1;
	memcpy(arrp, &q, sizeof(q));
	*cap = ncap;
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * The handshake's proofs (store_wire.h). Integers big-endian, as on the wire; the job last,
 * so that no two different hellos hash the same bytes. */

static void mac_u32(struct dp_hmac *h, uint32_t v)
{
	uint32_t be = htonl(v);
	dp_hmac_update(h, &be, 4);
}

void sw_auth_hello_mac(const char *secret, const unsigned char *snonce, const unsigned char *cnonce,
		       int rank, int world, const char *job, unsigned char out[DP_SHA256_LEN])
{
	struct dp_hmac h;
	dp_hmac_init(&h, secret, strlen(secret));
	dp_hmac_update(&h, HELLO_LABEL, sizeof(HELLO_LABEL)); /* with its NUL */
	dp_hmac_update(&h, snonce, STORE_NONCE);
	dp_hmac_update(&h, cnonce, STORE_NONCE);
	mac_u32(&h, (uint32_t)rank);
	mac_u32(&h, (uint32_t)world);
	dp_hmac_update(&h, job, strlen(job));
	dp_hmac_final(&h, out);
}

void sw_auth_ok_mac(const char *secret, const unsigned char *cnonce, const unsigned char *snonce,
		    int rank, unsigned char out[DP_SHA256_LEN])
{
	struct dp_hmac h;
	dp_hmac_init(&h, secret, strlen(secret));
	dp_hmac_update(&h, OK_LABEL, sizeof(OK_LABEL));
	dp_hmac_update(&h, cnonce, STORE_NONCE);
	dp_hmac_update(&h, snonce, STORE_NONCE);
	mac_u32(&h, (uint32_t)rank);
	dp_hmac_final(&h, out);
}
