/* error.c — struct dp_error's formatter (error.h). */
#include "common/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Copy what vsnprintf made of a message into err, marking a cut with "...". n is vsnprintf's
 * result: the length the whole message would have had. */
static int finish(struct dp_error *err, const char *tmp, int n)
{
	if (n < 0) {
		snprintf(err->text, sizeof(err->text), "(an error message could not be formatted)");
		return -1;
	}
	memcpy(err->text, tmp, sizeof(err->text));
	if ((size_t)n >= sizeof(err->text))
		memcpy(err->text + sizeof(err->text) - 4, "...", 4);
	return -1;
}

int verrprintf(struct dp_error *err, const char *fmt, va_list ap)
{
	if (!err)
		return -1;
	int saved = errno;
	/* Through a copy: an argument may be err->text itself. */
	char tmp[DP_ERROR_MAX];
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	finish(err, tmp, n);
	errno = saved;
	return -1;
}

int errprintf(struct dp_error *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verrprintf(err, fmt, ap);
	va_end(ap);
	return -1;
}

int errprefix(struct dp_error *err, const char *fmt, ...)
{
	if (!err)
		return -1;
	int saved = errno;
	char tmp[DP_ERROR_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(tmp)) {
		int m = snprintf(tmp + n, sizeof(tmp) - (size_t)n, ": %s", err->text);
		n = m < 0 ? m : n + m;
	}
	finish(err, tmp, n);
	errno = saved;
	return -1;
}
