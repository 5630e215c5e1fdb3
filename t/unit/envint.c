/* envint.c (test) — common/envint.c, the one parser of integer variables: unset and empty
 * leave the value alone, the range's ends pass, and every way a value is wrong (below, above,
 * garbage, trailing text, beyond int, beyond long) fails with the message that names the
 * variable, its value and the range. */
#include "common/envint.h"
#include "t/lib/tap.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dp_env_int of NAME=value (NULL: unset); out starts at 77. */
static int parse(const char *value, int min, int max, int *out, struct dp_error *err)
{
	if (value)
		setenv("UNIT_TEST_INT", value, 1);
	else
		unsetenv("UNIT_TEST_INT");
	*out = 77;
	err->text[0] = '\0';
	return dp_env_int("UNIT_TEST_INT", min, max, out, err);
}

/* value refused with exactly msg */
static void refused(const char *value, int min, int max, const char *msg, const char *what)
{
	struct dp_error err;
	int v;

	ok(parse(value, min, max, &v, &err) == -1, "%s: -1", what);
	is(err.text, msg, "... %s", what);
	is_int(v, 77, "... the value left alone");
}

int main(void)
{
	struct dp_error err;
	int v;

	ok(parse(NULL, 1, 10, &v, &err) == 0 && v == 77 && !err.text[0],
	   "unset: 0, value and err untouched");
	ok(parse("", 1, 10, &v, &err) == 0 && v == 77, "empty: as unset");
	ok(parse("7", 1, 10, &v, &err) == 1 && v == 7, "7 in 1..10: 1 and 7");
	ok(parse("1", 1, 10, &v, &err) == 1 && v == 1, "the lower end passes");
	ok(parse("10", 1, 10, &v, &err) == 1 && v == 10, "the upper end passes");
	ok(parse("-1", -1, 1 << 20, &v, &err) == 1 && v == -1, "a negative minimum (DPTRAIN_GPU)");
	ok(parse(" 8", 1, 10, &v, &err) == 1 && v == 8,
	   "leading blanks pass, as strtol takes them");
	ok(parse("2147483647", 0, INT_MAX, &v, &err) == 1 && v == INT_MAX, "INT_MAX itself");

	refused("0", 1, 10, "UNIT_TEST_INT='0' is not an integer from 1 to 10", "below the range");
	refused("11", 1, 10, "UNIT_TEST_INT='11' is not an integer from 1 to 10",
		"above the range");
	refused("-3", 0, INT_MAX, "UNIT_TEST_INT='-3' is not an integer >= 0",
		"below an open range: the \">=\" form");
	refused("abc", 1, INT_MAX, "UNIT_TEST_INT='abc' is not an integer >= 1", "garbage");
	refused("4x", 1, INT_MAX, "UNIT_TEST_INT='4x' is not an integer >= 1", "trailing text");
	refused("3 ", 1, INT_MAX, "UNIT_TEST_INT='3 ' is not an integer >= 1", "a trailing blank");
	refused("2147483648", 0, INT_MAX, "UNIT_TEST_INT='2147483648' is not an integer >= 0",
		"beyond int");
	refused("99999999999999999999", 0, INT_MAX,
		"UNIT_TEST_INT='99999999999999999999' is not an integer >= 0",
		"beyond long (strtol's overflow)");
	refused("0x10", 0, 100, "UNIT_TEST_INT='0x10' is not an integer from 0 to 100",
		"hexadecimal is not decimal");

	/* a long value is cut in the message */
	char longv[200], want[256];
	memset(longv, '9', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	snprintf(want, sizeof(want), "UNIT_TEST_INT='%.64s' is not an integer >= 0", longv);
	refused(longv, 0, INT_MAX, want, "a long value: cut to 64 bytes");

	/* the parser of a value already read (common/slurm_step.c's) */
	ok(dp_parse_int("X", NULL, 0, 1, &v, &err) == 0, "dp_parse_int: NULL is unset");
	ok(dp_parse_int("SLURM_NTASKS", "q", 1, INT_MAX, &v, &err) == -1, "dp_parse_int: garbage");
	is(err.text, "SLURM_NTASKS='q' is not an integer >= 1", "... named as given");
	ok(dp_parse_int("X", "5", 0, 9, &v, NULL) == 1 && v == 5 &&
	       dp_parse_int("X", "y", 0, 9, &v, NULL) == -1,
	   "err may be NULL");
	return done_testing();
}
