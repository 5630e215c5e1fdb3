/* envint.c — integer variables (envint.h). */
#include "common/envint.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

int dp_parse_int(const char *name, const char *value, int min, int max, int *out,
		 struct dp_error *err)
{
	char *end;
	long v;

	if (!value || !*value)
		return 0;
	errno = 0;
	v = strtol(value, &end, 10);
	if (errno || *end || v < min || v > max) {
		if (max == INT_MAX)
			errprintf(err, "%s='%.64s' is not an integer >= %d", name, value, min);
		else
			errprintf(err, "%s='%.64s' is not an integer from %d to %d", name, value,
				  min, max);
		return -1;
	}
	*out = (int)v;
	return 1;
}

int dp_env_int(const char *name, int min, int max, int *out, struct dp_error *err)
{
	return dp_parse_int(name, getenv(name), min, max, out, err);
}
