/* metrics.c — metrics.h. */
#include "trainer/metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "common/error.h"

int metrics_open(struct metrics *mt, const char *dir, struct dp_error *err)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
	mt->f = fopen(path, "a");
	if (!mt->f)
		return errprintf(err, "%s: cannot open: %s", path, strerror(errno));
	return 0;
}

void metrics_line(struct metrics *mt, const char *fmt, ...)
{
	if (!mt->f)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(mt->f, fmt, ap);
	va_end(ap);
	fputc('\n', mt->f);
	fflush(mt->f);
}

void metrics_close(struct metrics *mt)
{
	if (mt->f)
		fclose(mt->f);
	mt->f = NULL;
}
