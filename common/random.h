/* random.h — random bytes from the kernel (getrandom), for the nonces of the store's and the
 * ring's challenge-response. */
#ifndef DPTRAIN_RANDOM_H
#define DPTRAIN_RANDOM_H

#include <stddef.h>
#include "common/error.h"

/* n random bytes into buf: 0, or -1 with err naming why (there is nothing sensible to fall
 * back to: a predictable nonce would let a recorded answer be replayed). */
int dp_random(void *buf, size_t n, struct dp_error *err);

#endif
