/* error.c (test) — common/error.c: the one error type's formatter, prefixing in place, a
 * message rewritten from its own text, the mark where a message was cut, errno kept. */
#include "common/error.h"
#include "t/lib/tap.h"

#include <errno.h>
#include <string.h>

/* A callee that fails the way every folder's functions do. */
static int open_thing(const char *path, struct dp_error *err)
{
	return errprintf(err, "%s: %s", path, strerror(ENOENT));
}

int main(void)
{
	struct dp_error err;

	ok(errprintf(&err, "rank %d: %s", 3, "gone") == -1, "errprintf returns -1");
	is(err.text, "rank 3: gone", "errprintf formats");

	ok(open_thing("a.json", &err) == -1 && errprefix(&err, "config %s", "x") == -1,
	   "errprefix returns -1");
	is(err.text, "config x: a.json: No such file or directory",
	   "errprefix puts PREFIX: before");

	errprintf(&err, "inner");
	errprintf(&err, "outer (%s; retry)", err.text);
	is(err.text, "outer (inner; retry)", "an argument may be the message itself");
	errprintf(&err, "%s%s", err.text, err.text);
	is(err.text, "outer (inner; retry)outer (inner; retry)", "... twice");

	/* too long: cut, and the cut is marked */
	char big[3 * DP_ERROR_MAX];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	errprintf(&err, "%s", big);
	size_t n = strlen(err.text);
	is_int((long)n, DP_ERROR_MAX - 1, "a long message fills the struct");
	is(err.text + n - 3, "...", "and ends with ... where it was cut");
	errprintf(&err, "%s", big + sizeof(big) - 1 - (DP_ERROR_MAX - 1));
	is(err.text + DP_ERROR_MAX - 4, "xxx", "exactly DP_ERROR_MAX - 1 bytes fit, uncut");
	errprintf(&err, "%s", big);
	errprefix(&err, "rank %d", 7);
	ok(strncmp(err.text, "rank 7: xxx", 11) == 0, "a prefix on a full message stays: %.12s",
	   err.text);
	is(err.text + strlen(err.text) - 3, "...", "and the cut is marked");

	/* NULL: nothing written, still -1 */
	ok(errprintf(NULL, "x") == -1 && errprefix(NULL, "y") == -1, "NULL err is allowed");

	errno = EACCES;
	errprintf(&err, "%s", strerror(EINVAL));
	errprefix(&err, "p");
	is_int(errno, EACCES, "errno is kept (callers give advice from it)");
	return done_testing();
}
