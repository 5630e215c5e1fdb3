/* random.c — see random.h. Owns reading the kernel's random source; what the bytes are for is
 * its callers' business. */
#include "common/random.h"
#include "common/error.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

int dp_random(void *buf, size_t n, struct dp_error *err)
{
	unsigned char *p = buf;
	size_t got = 0;

	while (got < n) {
		ssize_t k = getrandom(p + got, n - got, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return errprintf(err, "getrandom: %s",
					 k < 0 ? strerror(errno) : "no bytes");
		got += (size_t)k;
	}
	return 0;
}
