/* metrics.c — metrics.h. */
#define _GNU_SOURCE /* vasprintf */
#include "trainer/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/append.h"
#include "common/error.h"
#include "common/openfile.h"

int metrics_open(struct metrics *mt, const char *dir, struct dp_error *err)
{
	struct dp_error oerr;

	mt->open = 0;
	mt->warned = 0;
	snprintf(mt->path, sizeof(mt->path), "%s/metrics.jsonl", dir);
	mt->fd = dp_open_regular(mt->path, O_WRONLY | O_APPEND | O_CREAT, 0644, DP_OPEN_MINE, NULL,
				 &oerr);
	if (mt->fd < 0)
		return errprintf(err, "%s: cannot open: %s", mt->path,
				 errno == EINVAL ? oerr.text : strerror(errno));
	mt->open = 1;
	return 0;
}

void metrics_line(struct metrics *mt, const char *fmt, ...)
{
	char *line = NULL;
	int n;

	if (!mt->open)
		return;
	va_list ap;
	va_start(ap, fmt);
	n = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	/* every line ends with the wall-clock time it was written (schema 2) */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char tail[48];
	int nt = n > 1 && line[n - 1] == '}'
		     ? snprintf(tail, sizeof(tail), "%s\"time\":%.3f}", n > 2 ? "," : "",
				(double)ts.tv_sec + (double)ts.tv_nsec / 1e9)
		     : 0;
	char *l = realloc(line, (size_t)n + (size_t)nt + 2);
	if (!l) {
		free(line);
		return;
	}
	line = l;
	if (nt > 0) {
		memcpy(line + n - 1, tail, (size_t)nt + 1);
		n += nt - 1;
	}
	line[n++] = '\n';
	dp_append_or_warn(mt->fd, line, (size_t)n, mt->path, "a line", &mt->warned);
	free(line);
}

const char *metrics_json_str(char *buf, size_t n, const char *s)
{
	size_t o = 0;
	if (n == 0)
		return buf;
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;
		char e[8];
		int k = ch == '"' || ch == '\\' ? snprintf(e, sizeof(e), "\\%c", ch)
			: ch < 0x20		? snprintf(e, sizeof(e), "\\u%04x", ch)
						: (e[0] = (char)ch, 1);
		if (o + (size_t)k >= n)
			break;
		memcpy(buf + o, e, (size_t)k);
		o += (size_t)k;
	}
	buf[o] = 0;
	return buf;
}

void metrics_close(struct metrics *mt)
{
	if (mt->open)
		close(mt->fd);
	mt->open = 0;
}
