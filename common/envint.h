/* envint.h — the one parser of integer variables (RANK, SLURM_NTASKS, DPTRAIN_TIMEOUT, ...):
 * whole decimal numbers in a range, with one message for every way a value can be wrong.
 * Owns the parsing only; which variable to read and what its absence means is the caller's. */
#ifndef DPTRAIN_ENVINT_H
#define DPTRAIN_ENVINT_H

#include "common/error.h"

/* The integer value of the variable name (value as read, NULL when unset): 1 with it in *out;
 * 0 when value is NULL or empty (*out untouched); -1 when it is not a decimal integer from min
 * to max (garbage, trailing text, out of range or of long's range), with
 * "NAME='VALUE' is not an integer >= MIN" (max INT_MAX) or "NAME='VALUE' is not an integer
 * from MIN to MAX" in err (VALUE cut to 64 bytes). strtol's leading blanks and sign pass. */
int dp_parse_int(const char *name, const char *value, int min, int max, int *out,
		 struct dp_error *err);

/* dp_parse_int of getenv(name). */
int dp_env_int(const char *name, int min, int max, int *out, struct dp_error *err);

#endif
