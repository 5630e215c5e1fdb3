/* store_wire.h — private to the rendezvous store (store/): the protocol shared by
 * rank 0's server (store_server.c) and every rank's client (store.c), and the helpers both use.
 * Its functions and macros are prefixed sw_ (store wire): they are global symbols of the
 * trainer and the launcher, which must not clash with anything linked beside them.
 *
 * A frame is u32 length (of what follows, big-endian), u8 type, u32 request id, then the
 * fields: u32/u64 big-endian integers and u32-length-prefixed byte strings (blobs, strings).
 * The server answers a request with a REPLY carrying the request's id; it sends ABORT and
 * ROLLCALL (id 0) unasked.
 *
 * A BARRIER is str name, u64 timeout (ms), u32 flags; its REPLY_OK for the rendezvous
 * (OPEN_BARRIER) holds every rank's host name (str each, by rank) if the flags asked for them
 * (BARRIER_HOSTS: a rank without a rank table's names), else nothing: n ranks' names to n
 * ranks would be n^2 bytes from rank 0. A barrier without flags (a rank of an earlier build)
 * asks for them.
 *
 * The handshake (protocol STORE_PROTO). The server speaks first, on accept:
 *   CHALLENGE (id 0): u32 protocol version, blob server nonce (STORE_NONCE random bytes),
 *     u32 flags (CHALLENGE_SECRET: the store has a secret, and its reply will prove it).
 *   The version is the first field in every version, so ranks of two versions name both.
 * The rank checks the version and answers
 *   HELLO: u32 version, u32 rank, u32 world, str job, str host, blob client nonce
 *     (STORE_NONCE), blob proof: HMAC-SHA256(secret, HELLO_LABEL || server nonce || client
 *     nonce || u32 rank || u32 world || job); empty from a rank without a secret.
 * The server checks the proof in constant time and replies
 *   REPLY_OK: u64 how long the rendezvous stays open (ms), u64 how much of it is left (ms),
 *     blob proof: HMAC-SHA256(secret, OK_LABEL || client nonce || server nonce || u32 rank),
 *     which the rank checks before it believes anything else; empty without a secret;
 *   or REPLY_ERROR with why (a stranger is told only that it was refused), and closes.
 * The secret never crosses the wire, and a recorded proof is worth nothing for another nonce.
 * What the handshake does not do is protect the frames after it: someone who can rewrite the
 * traffic on the path can still take over a connection once it is made (as with PyTorch's
 * TCPStore; only TLS would stop that). Without a secret on either side (a job started by hand)
 * both proofs are empty and anyone who reaches the port may join, as with TCPStore.
 *
 * Before its hello is accepted a connection is a stranger, and costs rank 0 little: at most
 * PREAUTH_FRAME_MAX bytes of its first frame are read (a longer one drops it at once, before
 * its body is read), at most PREAUTH_PENDING + world strangers wait at once (the oldest makes
 * room for a new one after PREAUTH_GRACE_S), each for at most HELLO_ANSWER_S; so what rank 0
 * holds for strangers is bounded by (PREAUTH_PENDING + world) x (PREAUTH_FRAME_MAX + about
 * 1 KiB) and as many descriptors. Out of descriptors, it pauses accepting (ACCEPT_PAUSE_S). */
#ifndef DPTRAIN_STORE_WIRE_H
#define DPTRAIN_STORE_WIRE_H

#include "common/error.h"
#include "common/hmac.h"
#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

enum {
	MSG_HELLO_V1 = 1, /* protocol 1's hello, which carried the secret: refused by name */
	MSG_SET,
	MSG_GET,
	MSG_ADD,
	MSG_BARRIER,
	MSG_ABORT,
	MSG_REPORT,
	MSG_GOODBYE,
	MSG_ROLLCALL,  /* server -> every rank: another rank timed out; report if you wait too */
	MSG_CHALLENGE, /* server -> a new connection, before anything else */
	MSG_HELLO,
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
 * what is not a frame, is another program. The server gives a new connection as long to say
 * its hello. */
#define HELLO_ANSWER_S 10.0
/* A store sends its challenge as soon as it takes the connection; a flood of strangers ahead
 * of this rank in rank 0's backlog may delay that (PREAUTH_GRACE_S), so a rank waits longer
 * for the challenge than for an answer before it says that another program listens. */
#define CHALLENGE_WAIT_S (3 * HELLO_ANSWER_S)
/* The handshake's protocol (STORE_PROTO 1 had no challenge and sent the secret itself). */
#define STORE_PROTO	 2
#define STORE_NONCE	 16 /* bytes: 128 random bits, never the same twice in practice */
#define CHALLENGE_SECRET 1u /* the challenge's flag: the store has a secret */
#define HELLO_LABEL	 "dptrain store hello v2" /* what each MAC is for: one is never */
#define OK_LABEL	 "dptrain store ok v2"	  /* taken for the other */
/* The most of its first frame a connection that has not proven it is a rank may send: a
 * hello with a STORE_JOB_MAX job id and a HOST_MAX host name fits with room to spare. */
#define PREAUTH_FRAME_MAX 4096
/* How many connections may wait to say their hello at once, besides the world: a new one
 * beyond it drops the oldest, once that one has had PREAUTH_GRACE_S to say its hello (it is
 * read first); while every one of them is younger, the server takes no new connection (they
 * wait in the listener's backlog). Every rank of a starting job may be waiting at once, so the
 * world is counted in. A rank says its hello a round trip after its connection was taken:
 * dropping the oldest only after the grace, a flood can neither push a rank out (however
 * deep the backlog the flooder keeps) nor hold a slot for longer than HELLO_ANSWER_S, and it
 * costs rank 0 at most (PREAUTH_PENDING + world) / PREAUTH_GRACE_S accepts a second. */
#define PREAUTH_PENDING 64
#define PREAUTH_GRACE_S 0.2
/* When rank 0 is out of descriptors, how long the server stops taking connections. */
#define ACCEPT_PAUSE_S 0.25
/* How many times a rank connects again when the store closes its connection before it
 * answered the hello (it was dropped as the oldest in a flood of strangers). */
#define HELLO_TRIES 3
/* How many refused connections rank 0 logs (a port scan must not flood its log). */
#define REFUSALS_LOGGED 20
#define BARRIER_HOSTS	1u  /* a barrier's flag: answer with every rank's host name */
#define STOP_POLL_MS	100 /* how often a rendezvous wait looks at the stop request */
/* A stop request that comes once this rank is connected still waits this long for the store's
 * challenge (which a store sends at once), so that the hello, and the stop after it, reach rank
 * 0: the other ranks then stop at once instead of when the rendezvous closes. */
#define STOP_CHALLENGE_S 2.0
#define OPEN_BARRIER	 "dptrain.store.open"

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

int sw_sbuf_reserve(struct sbuf *b, size_t n);
void sw_sbuf_put(struct sbuf *b, const void *d, size_t n);
void sw_sbuf_free(struct sbuf *b);
void sw_put_u8(struct sbuf *b, uint8_t v);
void sw_put_u32(struct sbuf *b, uint32_t v);
void sw_put_u64(struct sbuf *b, uint64_t v);
void sw_put_blob(struct sbuf *b, const void *d, size_t n);
void sw_put_str(struct sbuf *b, const char *s);
size_t sw_frame_begin(struct sbuf *b, int type, uint32_t id);
void sw_frame_end(struct sbuf *b, size_t at);
/* A whole ABORT frame (reason, kind: ABORT_FAILED or ABORT_STOPPED), as both sides send it. */
void sw_frame_abort(struct sbuf *b, const char *reason, int kind);
uint32_t sw_rd_u32(struct rd *r);
uint64_t sw_rd_u64(struct rd *r);
const char *sw_rd_blob(struct rd *r, size_t *len);
char *sw_rd_strdup(struct rd *r);
int sw_frame_next(struct sbuf *b, int *type, uint32_t *id, struct rd *body);
int sw_sbuf_fill(struct sbuf *b, int fd);
int sw_sbuf_flush(struct sbuf *b, int fd);
void sw_rank_label(char *buf, size_t len, int rank, const char *host);
int sw_array_room(void *arrp, size_t *cap, size_t n, size_t elem, size_t first);

/* Room for one more element in a growable array `arr` of `cap` elements with `n` in use. */
#define SW_ARRAY_ROOM(arr, n, cap, first)                                                          \
	sw_array_room(&(arr), &(cap), (n), sizeof(*(arr)), (first))

/* The handshake's proofs (above): the rank's, and the store's. secret: "" without one. */
void sw_auth_hello_mac(const char *secret, const unsigned char *snonce, const unsigned char *cnonce,
		       int rank, int world, const char *job, unsigned char out[DP_SHA256_LEN]);
void sw_auth_ok_mac(const char *secret, const unsigned char *cnonce, const unsigned char *snonce,
		    int rank, unsigned char out[DP_SHA256_LEN]);

/* Rank 0's server (store_server.c), run by store_open on rank 0 and stopped by store_close. */
struct store_server;
int srv_start(struct store_server **out, const struct store_opts *o, double timeout_s,
	      struct dp_error *err);
void srv_stop(struct store_server *s, double timeout_s);
/* store_server_steps (store.h). */
unsigned long srv_steps(const struct store_server *s);

#endif
