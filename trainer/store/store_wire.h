/* store_wire.h — private to the rendezvous store (trainer/store/): the protocol shared by
 * rank 0's server (store_server.c) and every rank's client (store.c), and the helpers both use.
 *
 * A frame is u32 length (of what follows, big-endian), u8 type, u32 request id, then the
 * fields: u32/u64 big-endian integers and u32-length-prefixed byte strings. The server
 * answers a request with a REPLY carrying the request's id; it sends ABORT and ROLLCALL
 * (id 0) unasked. */
#ifndef DPTRAIN_STORE_WIRE_H
#define DPTRAIN_STORE_WIRE_H

#include "common/error.h"
#include "trainer/store/store.h"

#include <stddef.h>
#include <stdint.h>

enum {
	MSG_HELLO = 1,
	MSG_SET,
	MSG_GET,
	MSG_ADD,
	MSG_BARRIER,
	MSG_ABORT,
	MSG_REPORT,
	MSG_GOODBYE,
	MSG_ROLLCALL, /* server -> every rank: another rank timed out; report if you wait too */
	MSG_REPLY = 64,
};
enum { REPLY_OK = 0, REPLY_TIMEOUT = 1, REPLY_ERROR = 2 };
/* An ABORT is the reason (a string), then what ended the job (u32): a failure, or a rank that
 * was asked to stop (SIGTERM, SIGUSR1) before the ranks could agree on stopping together. */
enum { ABORT_FAILED = 0, ABORT_STOPPED = 1 };

#define FRAME_HEAD     9 /* u32 length, u8 type, u32 id */
#define FRAME_MAX      (STORE_VALUE_MAX + 2 * STORE_KEY_MAX + 64)
#define HOST_MAX       256
#define MSG_MAX	       1024
#define REPLY_MARGIN_S 5.0 /* beyond a server-side deadline before the server counts as mute */
/* A store answers a hello at once: a peer on MASTER_PORT that is silent this long, or sends
 * what is not a frame, is another program. */
#define HELLO_ANSWER_S 10.0
/* How many refused connections rank 0 logs (a port scan must not flood its log). */
#define REFUSALS_LOGGED 20
#define STOP_POLL_MS	100 /* how often a rendezvous wait looks at the stop request */
#define OPEN_BARRIER	"dptrain.store.open"

/* A growable byte buffer: frames are built and read in one. */
struct sbuf {
	char *p;
	size_t off, len, cap; /* bytes [off, len) are pending */
	int bad;	      /* an allocation failed */
};

/* A reader over one frame's body: a short or malformed body sets bad. */
struct rd {
	const unsigned char *p;
	size_t n, off;
	int bad;
};

int sbuf_reserve(struct sbuf *b, size_t n);
void sbuf_put(struct sbuf *b, const void *d, size_t n);
void sbuf_free(struct sbuf *b);
void put_u8(struct sbuf *b, uint8_t v);
void put_u32(struct sbuf *b, uint32_t v);
void put_u64(struct sbuf *b, uint64_t v);
void put_blob(struct sbuf *b, const void *d, size_t n);
void put_str(struct sbuf *b, const char *s);
size_t frame_begin(struct sbuf *b, int type, uint32_t id);
void frame_end(struct sbuf *b, size_t at);
/* A whole ABORT frame (reason, kind: ABORT_FAILED or ABORT_STOPPED), as both sides send it. */
void frame_abort(struct sbuf *b, const char *reason, int kind);
uint32_t rd_u32(struct rd *r);
uint64_t rd_u64(struct rd *r);
const char *rd_blob(struct rd *r, size_t *len);
char *rd_strdup(struct rd *r);
int frame_next(struct sbuf *b, int *type, uint32_t *id, struct rd *body);
int sbuf_fill(struct sbuf *b, int fd);
int sbuf_flush(struct sbuf *b, int fd);
void rank_label(char *buf, size_t len, int rank, const char *host);
int array_room(void *arrp, size_t *cap, size_t n, size_t elem, size_t first);

/* Room for one more element in a growable array `arr` of `cap` elements with `n` in use. */
#define ARRAY_ROOM(arr, n, cap, first) array_room(&(arr), &(cap), (n), sizeof(*(arr)), (first))

/* Rank 0's server (store_server.c), run by store_open on rank 0 and stopped by store_close. */
struct store_server;
int srv_start(struct store_server **out, const struct store_opts *o, double timeout_s,
	      struct dp_error *err);
void srv_stop(struct store_server *s, double timeout_s);

#endif
