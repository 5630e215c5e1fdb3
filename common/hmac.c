/* hmac.c — SHA-256 as FIPS 180-4 section 6.2 describes it, HMAC as RFC 2104 does, and the
 * constant-time comparison (hmac.h). Knows nothing of what is authenticated, or of keys' origin.
 * Written for clarity, not speed: it hashes a few hundred bytes per connection. */
#define _DEFAULT_SOURCE
#include "common/hmac.h"

#include <string.h>

/* FIPS 180-4 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first
 * 64 primes. */
static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* FIPS 180-4 5.3.3: the first 32 bits of the fractional parts of the square roots of the
 * first 8 primes. */
static const uint32_t sha256_h0[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static uint32_t rotr(uint32_t x, int n)
{
	return x >> n | x << (32 - n);
}

/* FIPS 180-4 6.2.2: one 512-bit block into the hash value. */
static void sha256_block(uint32_t h[8], const unsigned char *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, hh;

	for (int t = 0; t < 16; t++)
		w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
		       (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
	for (int t = 16; t < 64; t++) {
		uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ w[t - 15] >> 3;
		uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ w[t - 2] >> 10;
		w[t] = s1 + w[t - 7] + s0 + w[t - 16];
	}
	a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
	for (int t = 0; t < 64; t++) {
		uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = hh + S1 + ch + sha256_k[t] + w[t];
		uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
		uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = S0 + maj;
		hh = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
	explicit_bzero(w, sizeof(w));
}

void dp_sha256_init(struct dp_sha256 *c)
{
	memcpy(c->h, sha256_h0, sizeof(c->h));
	c->bytes = 0;
	c->nbuf = 0;
}

void dp_sha256_update(struct dp_sha256 *c, const void *p, size_t n)
{
	const unsigned char *in = p;

	c->bytes += n;
	while (n > 0) {
		size_t k = DP_SHA256_BLOCK - c->nbuf < n ? DP_SHA256_BLOCK - c->nbuf : n;
		memcpy(c->buf + c->nbuf, in, k);
		c->nbuf += k;
		in += k;
		n -= k;
		if (c->nbuf == DP_SHA256_BLOCK) {
			sha256_block(c->h, c->buf);
			c->nbuf = 0;
		}
	}
}

/* FIPS 180-4 5.1.1: a 1 bit, zeros up to 448 bits mod 512, the message's length in bits as a
 * 64-bit big-endian integer; then the hash value, big-endian. */
void dp_sha256_final(struct dp_sha256 *c, unsigned char out[DP_SHA256_LEN])
{
	uint64_t bits = c->bytes * 8;
	unsigned char pad[DP_SHA256_BLOCK + 8] = {0x80};
	size_t npad = (c->nbuf < 56 ? 56 : 120) - c->nbuf;

	for (int i = 0; i < 8; i++)
		pad[npad + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
	dp_sha256_update(c, pad, npad + 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (unsigned char)(c->h[i] >> 24);
		out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
		out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
		out[4 * i + 3] = (unsigned char)c->h[i];
	}
	explicit_bzero(c, sizeof(*c));
}

void dp_sha256(const void *p, size_t n, unsigned char out[DP_SHA256_LEN])
{
	struct dp_sha256 c;
	dp_sha256_init(&c);
	dp_sha256_update(&c, p, n);
	dp_sha256_final(&c, out);
}

/* RFC 2104 section 2: H(K ^ opad, H(K ^ ipad, text)), a key longer than a block hashed first,
 * a shorter one padded with zeros. Both hashes start here with their padded key hashed. */
void dp_hmac_init(struct dp_hmac *h, const void *key, size_t keylen)
{
	unsigned char k[DP_SHA256_BLOCK] = {0}, pad[DP_SHA256_BLOCK];

	if (keylen > DP_SHA256_BLOCK)
		dp_sha256(key, keylen, k);
	else if (keylen > 0)
		memcpy(k, key, keylen);
	for (int i = 0; i < DP_SHA256_BLOCK; i++)
		pad[i] = k[i] ^ 0x36;
	dp_sha256_init(&h->inner);
	dp_sha256_update(&h->inner, pad, sizeof(pad));
	for (int i = 0; i < DP_SHA256_BLOCK; i++)
		pad[i] = k[i] ^ 0x5c;
	dp_sha256_init(&h->outer);
	dp_sha256_update(&h->outer, pad, sizeof(pad));
	explicit_bzero(k, sizeof(k));
	explicit_bzero(pad, sizeof(pad));
}

void dp_hmac_update(struct dp_hmac *h, const void *p, size_t n)
{
	dp_sha256_update(&h->inner, p, n);
}

void dp_hmac_final(struct dp_hmac *h, unsigned char out[DP_SHA256_LEN])
{
	unsigned char inner[DP_SHA256_LEN];

	dp_sha256_final(&h->inner, inner);
	dp_sha256_update(&h->outer, inner, sizeof(inner));
	dp_sha256_final(&h->outer, out);
	explicit_bzero(inner, sizeof(inner));
}

void dp_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t n,
		    unsigned char out[DP_SHA256_LEN])
{
	struct dp_hmac h;
	dp_hmac_init(&h, key, keylen);
	dp_hmac_update(&h, msg, n);
	dp_hmac_final(&h, out);
}

int dp_equal_ct(const void *a, const void *b, size_t n)
{
	const volatile unsigned char *x = a, *y = b;
	unsigned char d = 0;

	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)(x[i] ^ y[i]);
	return d == 0;
}
