/* path_search.c — unit tests of finding a command on a PATH string (common/path_search.c),
 * as the plugin finds the launcher and the launcher MindSpore's scheduler command. */
#include "common/path_search.h"
#include "t/lib/tap.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

int main(void)
{
	char out[PATH_MAX];

	is_int(path_search("sh", "/nonexistent-dptrain::/bin", out, sizeof(out)), 0,
	       "sh is found past a missing directory and an empty entry");
	is(out, "/bin/sh", "... in /bin");
	is_int(path_search("sh", NULL, out, sizeof(out)), 0, "no PATH: the default one");
	ok(strcmp(out, "/usr/bin/sh") == 0 || strcmp(out, "/bin/sh") == 0, "... found there (%s)",
	   out);
	errno = 0;
	is_int(path_search("no-such-command-dptrain", "/bin:/usr/bin", out, sizeof(out)), -1,
	       "a missing command is not found");
	ok(errno == ENOENT && strcmp(out, "no-such-command-dptrain") == 0,
	   "... ENOENT, and its name in out");
	is_int(path_search("sh", "", out, sizeof(out)), -1, "an empty PATH finds nothing");
	is_int(path_search("/bin/sh", "/nonexistent-dptrain", out, sizeof(out)), 0,
	       "a name with a slash is taken as it is");
	is(out, "/bin/sh", "... unchanged");
	is_int(path_search("/nonexistent-dptrain/sh", NULL, out, sizeof(out)), -1,
	       "... and must be executable");
	return done_testing();
}
