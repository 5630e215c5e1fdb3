/* secret.c — see secret.h. Owns making the secret; who checks it is the store's business. */
#include "common/secret.h"
#include "common/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

int dp_secret_make(char out[DP_SECRET_LEN + 1], struct dp_error *err)
{
	unsigned char raw[DP_SECRET_LEN / 2];
	size_t got = 0;

	while (got < sizeof(raw)) {
		ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			errprintf(err, "cannot make the step's secret: getrandom: %s",
				  n < 0 ? strerror(errno) : "no bytes");
			return -1;
		}
		got += (size_t)n;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	return 0;
}
