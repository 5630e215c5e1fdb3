/* path_search.c — see path_search.h. */
#include "common/path_search.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int path_search(const char *name, const char *path, char *out, size_t outlen)
{
	const char *p, *end;

	if (strchr(name, '/')) {
		snprintf(out, outlen, "%s", name);
		return access(out, X_OK) == 0 ? 0 : -1;
	}
	for (p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p; p = *end ? end + 1 : end) {
		int n;
		end = strchr(p, ':');
		if (!end)
			end = p + strlen(p);
		if (end == p)
			continue;
		n = snprintf(out, outlen, "%.*s/%s", (int)(end - p), p, name);
		if (n > 0 && (size_t)n < outlen && access(out, X_OK) == 0)
			return 0;
	}
	snprintf(out, outlen, "%s", name);
	errno = ENOENT;
	return -1;
}
