/* fuzz_ranktable.c — libFuzzer target for the rank-table reader: any bytes either fail with a
 * message or give a valid table that survives writing in every schema and reading back (equal
 * on what the schema carries, and written identically the second time). Aborts otherwise.
 * Touches only the ranktable library; seeds are in t/fuzz/seeds/ranktable/. */
#include "common/error.h"
#include "ranktable/ranktable.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fuzz_fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_ranktable: %s: %s\n", what, detail);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ranktable a, b;
	struct dp_error err;
	struct dp_error diff;

	err.text[0] = '\0';
	if (rt_parse(&a, (const char *)data, size, "fuzz.json", &err) < 0) {
		if (strncmp(err.text, "fuzz.json: ", 11) != 0 ||
		    !memchr(err.text, '\0', sizeof(err.text)))
			fuzz_fail("an error without the file name", err.text);
		if (a.ranks || a.world_size)
			fuzz_fail("a failed parse left a table", err.text);
		return 0;
	}
	if (rt_validate(&a, &err) < 0)
		fuzz_fail("a parsed table does not validate", err.text);
	for (enum rt_schema s = RT_SCHEMA_DPTRAIN; s <= RT_SCHEMA_LEGACY; s++) {
		char *text = rt_to_json(&a, s, &err), *again;
		if (!text) {
			/* Only legacy may refuse: it cannot tell two nodes with one address apart.
			 */
			if (s != RT_SCHEMA_LEGACY ||
			    !strstr(err.text, "two nodes share the address"))
				fuzz_fail("a valid table was not written", err.text);
			continue;
		}
		if (rt_parse(&b, text, strlen(text), "written.json", &err) < 0)
			fuzz_fail("what was written does not read back", err.text);
		if (b.schema != s)
			fuzz_fail("read back as another schema", rt_schema_name(b.schema));
		if (rt_compare(&a, &b, s, &diff) != 0)
			fuzz_fail("the round trip changed the table", diff.text);
		if (!(again = rt_to_json(&b, s, &err)) || strcmp(text, again) != 0)
			fuzz_fail("written twice, written differently", rt_schema_name(s));
		free(again);
		free(text);
		rt_free(&b);
	}
	rt_free(&a);
	return 0;
}
