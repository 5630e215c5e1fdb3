/* errfile.c — the message of a torchelastic error file (errfile.h). */
#include "common/errfile.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ERRFILE_MAX (1 << 20)

int dp_errfile_message(const char *path, char *out, size_t outlen)
{
	struct stat st;
	char *buf = NULL;
	ssize_t got = 0;
	int found = 0;

	if (!path || !*path || outlen == 0)
		return 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > ERRFILE_MAX ||
	    !(buf = malloc((size_t)st.st_size + 1)))
		goto out;
	while (got < st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)(st.st_size - got));
		if (n <= 0)
			break;
		got += n;
	}
	json_t *root = json_loadb(buf, (size_t)got, 0, NULL);
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
out:
	free(buf);
	close(fd);
	return found;
}
