/* warn.c — the one form of a warning (warn.h). */
#include "common/warn.h"

#include <stdlib.h>

int dp_vwarn_format(char *out, size_t len, const char *prog, const char *who, const char *fmt,
		    va_list ap)
{
	int n = snprintf(out, len, "%s%s%s%swarning: ", prog ? prog : "", prog ? ": " : "",
			 who ? who : "", who ? ": " : "");
	int m;

	if (n < 0)
		return n;
	m = vsnprintf((size_t)n < len ? out + n : NULL, (size_t)n < len ? len - (size_t)n : 0, fmt,
		      ap);
	return m < 0 ? m : n + m;
}

int dp_warn_format(char *out, size_t len, const char *prog, const char *who, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = dp_vwarn_format(out, len, prog, who, fmt, ap);
	va_end(ap);
	return n;
}

static void vwarn_to(FILE *f, const char *prog, const char *who, const char *fmt, va_list ap)
{
	char line[4096], *big = NULL, *p = line;
	va_list again;
	int n;

	va_copy(again, ap);
	n = dp_vwarn_format(line, sizeof(line), prog, who, fmt, ap);
	/* a longer one whole, as fprintf would have written it */
	if (n >= (int)sizeof(line) && (big = malloc((size_t)n + 1)) &&
	    dp_vwarn_format(big, (size_t)n + 1, prog, who, fmt, again) == n)
		p = big;
	va_end(again);
	if (n >= 0)
		fprintf(f ? f : stderr, "%s\n", p);
	free(big);
}

void dp_warn(const char *prog, const char *who, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn_to(stderr, prog, who, fmt, ap);
	va_end(ap);
}

void dp_warn_to(FILE *f, const char *prog, const char *who, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwarn_to(f, prog, who, fmt, ap);
	va_end(ap);
}
