/* errfile.c — the message of a torchelastic error file (errfile.h). */
#include "common/errfile.h"
#include "common/readfile.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRFILE_MAX (1 << 20)

int dp_errfile_message(const char *path, char *out, size_t outlen)
{
	char *buf;
	size_t len;
	int found = 0;

	if (!path || !*path || outlen == 0 ||
	    dp_read_file(path, ERRFILE_MAX, O_NOFOLLOW, &buf, &len, NULL) != 0)
		return 0;
	json_t *root = json_loadb(buf, len, 0, NULL);
	/* {"message": {"message": "Type: text", "extraInfo": {...}}}; an older form has the
	 * message string directly */
	json_t *m = json_object_get(root, "message");
	if (json_is_object(m))
		m = json_object_get(m, "message");
	if (json_is_string(m) && *json_string_value(m)) {
		const char *s = json_string_value(m);
		size_t n = strcspn(s, "\n");
		snprintf(out, outlen, "%.*s%s", (int)(n < outlen ? n : outlen - 1), s,
			 s[n] ? " ..." : "");
		found = 1;
	}
	json_decref(root);
	free(buf);
	return found;
}
