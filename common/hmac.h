/* hmac.h — SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), written for the rendezvous
 * store's and the ring's challenge-response, so that a job's secret proves itself without
 * crossing the wire; and a comparison whose time does not depend on where the bytes differ. */
#ifndef DPTRAIN_HMAC_H
#define DPTRAIN_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define DP_SHA256_LEN	32 /* bytes of a digest */
#define DP_SHA256_BLOCK 64 /* bytes of a block: HMAC's key size */

struct dp_sha256 {
	uint32_t h[8];
	uint64_t bytes; /* hashed so far */
	unsigned char buf[DP_SHA256_BLOCK];
	size_t nbuf;
};

void dp_sha256_init(struct dp_sha256 *c);
void dp_sha256_update(struct dp_sha256 *c, const void *p, size_t n);
/* The digest; the context is wiped (init it again to reuse it). */
void dp_sha256_final(struct dp_sha256 *c, unsigned char out[DP_SHA256_LEN]);
void dp_sha256(const void *p, size_t n, unsigned char out[DP_SHA256_LEN]);

/* HMAC-SHA256, incrementally: init with the key, update with the message in any pieces. */
struct dp_hmac {
	struct dp_sha256 inner, outer;
};

void dp_hmac_init(struct dp_hmac *h, const void *key, size_t keylen);
void dp_hmac_update(struct dp_hmac *h, const void *p, size_t n);
/* The MAC; the context, which holds what the key became, is wiped. */
void dp_hmac_final(struct dp_hmac *h, unsigned char out[DP_SHA256_LEN]);
void dp_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t n,
		    unsigned char out[DP_SHA256_LEN]);

/* 1 if the n bytes at a and b are equal, 0 if not, in time that depends only on n: a MAC
 * compared with memcmp tells a forger, by how soon it returns, how many bytes were right. */
int dp_equal_ct(const void *a, const void *b, size_t n);

#endif
