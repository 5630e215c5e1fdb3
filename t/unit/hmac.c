/* hmac.c (test) — common/hmac.c: SHA-256 against FIPS 180-4's examples (and the empty
 * message), HMAC-SHA256 against every test case of RFC 4231, the same digests whatever the
 * pieces a message is given in, the constant-time comparison; common/random.c's bytes. */
#include "common/hmac.h"
#include "common/random.h"
#include "t/lib/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void hex(const unsigned char *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static void sha_is(const void *msg, size_t n, const char *want, const char *name)
{
	unsigned char d[DP_SHA256_LEN];
	char got[2 * DP_SHA256_LEN + 1];
	dp_sha256(msg, n, d);
	hex(d, sizeof(d), got);
	is(got, want, "SHA-256 of %s", name);
}

/* A digest computed in pieces (of 1, 44, 87 and 130 bytes) is the one-shot digest, for every
 * length up to 300: the buffering across blocks, and the padding of every length near one. */
static int sha_pieces_agree(void)
{
	unsigned char msg[300], one[DP_SHA256_LEN], part[DP_SHA256_LEN];
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)(i * 31 + 7);
	for (size_t len = 0; len <= sizeof(msg); len++) {
		dp_sha256(msg, len, one);
		for (size_t piece = 1; piece <= 130; piece += 43) {
			struct dp_sha256 c;
			dp_sha256_init(&c);
			for (size_t at = 0; at < len; at += piece)
				dp_sha256_update(&c, msg + at, len - at < piece ? len - at : piece);
			dp_sha256_final(&c, part);
			if (memcmp(one, part, sizeof(one)) != 0) {
				diag("length %zu in pieces of %zu differs", len, piece);
				return 0;
			}
		}
	}
	return 1;
}

struct rfc4231 {
	int id;
	unsigned char key[131];
	size_t keylen;
	const char *data; /* NULL: datalen bytes of `fill` */
	size_t datalen;
	unsigned char fill;
	size_t maclen; /* bytes compared: test case 5 truncates to 128 bits */
	const char *mac;
};

int main(void)
{
	/* FIPS 180-4's examples (NIST's "Example Algorithms", SHA256.pdf, SHA256_2.pdf) */
	sha_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	       "\"abc\" (one block)");
	sha_is("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
	       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
	       "the 448-bit message (two blocks: the padding does not fit the first)");
	sha_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	       "the empty message");
	sha_is("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
	       "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
	       112, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
	       "the 896-bit message");
	{
		size_t n = 1000000;
		char *a = malloc(n);
		if (!a)
			bail_out("out of memory");
		memset(a, 'a', n);
		sha_is(a, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
		       "one million 'a'");
		/* and the same fed in pieces that straddle the blocks */
		struct dp_sha256 c;
		unsigned char d[DP_SHA256_LEN];
		char got[2 * DP_SHA256_LEN + 1];
		dp_sha256_init(&c);
		for (size_t at = 0; at < n; at += 999)
			dp_sha256_update(&c, a + at, n - at < 999 ? n - at : 999);
		dp_sha256_final(&c, d);
		hex(d, sizeof(d), got);
		is(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
		   "one million 'a' in pieces of 999");
		free(a);
	}
	ok(sha_pieces_agree(), "every length up to 300 bytes, in pieces: the one-shot digest");

	/* RFC 4231 section 4: every test case */
	static const struct rfc4231 cases[] = {
	    {1,
	     {[0 ... 19] = 0x0b},
	     20,
	     "Hi There",
	     8,
	     0,
	     32,
	     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
	    {2, "Jefe", 4, "what do ya want for nothing?", 28, 0, 32,
	     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
	    {3,
	     {[0 ... 19] = 0xaa},
	     20,
	     NULL,
	     50,
	     0xdd,
	     32,
	     "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
	    {4,
	     {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13,
	      14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25},
	     25,
	     NULL,
	     50,
	     0xcd,
	     32,
	     "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
	    {5,
	     {[0 ... 19] = 0x0c},
	     20,
	     "Test With Truncation",
	     20,
	     0,
	     16,
	     "a3b6167473100ee06e0c796c2955552b"},
	    {6,
	     {[0 ... 130] = 0xaa},
	     131,
	     "Test Using Larger Than Block-Size Key - Hash Key First",
	     54,
	     0,
	     32,
	     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
	    {7,
	     {[0 ... 130] = 0xaa},
	     131,
	     "This is a test using a larger than block-size key and a larger than block-size "
	     "data. The key needs to be hashed before being used by the HMAC algorithm.",
	     152,
	     0,
	     32,
	     "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct rfc4231 *t = &cases[i];
		unsigned char data[200], mac[DP_SHA256_LEN], mac2[DP_SHA256_LEN];
		char got[2 * DP_SHA256_LEN + 1];
		if (t->data)
			memcpy(data, t->data, t->datalen);
		else
			memset(data, t->fill, t->datalen);
		dp_hmac_sha256(t->key, t->keylen, data, t->datalen, mac);
		hex(mac, t->maclen, got);
		is(got, t->mac, "HMAC-SHA256: RFC 4231 test case %d", t->id);
		/* incrementally, a byte at a time */
		struct dp_hmac h;
		dp_hmac_init(&h, t->key, t->keylen);
		for (size_t k = 0; k < t->datalen; k++)
			dp_hmac_update(&h, data + k, 1);
		dp_hmac_final(&h, mac2);
		ok(memcmp(mac, mac2, sizeof(mac)) == 0,
		   "HMAC-SHA256: RFC 4231 test case %d a byte at a time", t->id);
	}
	{
		/* an empty key is a key of zeros: a job without a secret still computes MACs */
		unsigned char a[DP_SHA256_LEN], b[DP_SHA256_LEN], zeros[DP_SHA256_BLOCK] = {0};
		dp_hmac_sha256("", 0, "x", 1, a);
		dp_hmac_sha256(zeros, sizeof(zeros), "x", 1, b);
		ok(memcmp(a, b, sizeof(a)) == 0, "an empty key is the key of 64 zero bytes");
	}

	{
		unsigned char a[32], b[32];
		memset(a, 0x5a, sizeof(a));
		memcpy(b, a, sizeof(b));
		ok(dp_equal_ct(a, b, sizeof(a)) == 1, "dp_equal_ct: equal");
		int all = 1;
		for (size_t i = 0; i < sizeof(a); i++)
			for (int bit = 0; bit < 8; bit++) {
				b[i] ^= (unsigned char)(1 << bit);
				all &= dp_equal_ct(a, b, sizeof(a)) == 0;
				b[i] ^= (unsigned char)(1 << bit);
			}
		ok(all, "dp_equal_ct: any one bit differing, in any byte, is unequal");
		ok(dp_equal_ct(a, b, 0) == 1, "dp_equal_ct: no bytes are equal");
	}
	{
		unsigned char r1[16] = {0}, r2[16] = {0}, zero[16] = {0};
		struct dp_error err;
		ok(dp_random(r1, sizeof(r1), &err) == 0 && dp_random(r2, sizeof(r2), &err) == 0,
		   "dp_random gives bytes");
		ok(memcmp(r1, r2, sizeof(r1)) != 0 && memcmp(r1, zero, sizeof(r1)) != 0,
		   "two nonces of 128 bits differ, and are not zeros");
		static char big[100000];
		ok(dp_random(big, sizeof(big), &err) == 0, "dp_random: %zu bytes at once",
		   sizeof(big));
	}
	return done_testing();
}
