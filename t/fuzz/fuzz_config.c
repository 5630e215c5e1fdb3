/* fuzz_config.c — libFuzzer target for the job config parser: any bytes through cfg_parse
 * must give a config or an error, never a crash or leak; an accepted config must print
 * (cfg_to_json) and read back into an equal struct. Seeds: t/fuzz/seeds/config/. */
#include "config/config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cfg c, again;
	struct dp_error err;
	char *json;

	if (cfg_parse(&c, (const char *)data, size, "fuzz.json", 0, NULL, &err) < 0) {
		/* An error is one line naming the config. */
		if (strncmp(err.text, "fuzz.json: ", 11) != 0 || strchr(err.text, '\n'))
			abort();
		return 0;
	}
	if (!(json = cfg_to_json(&c)))
		abort();
	if (cfg_parse(&again, json, strlen(json), "fuzz.json", 0, NULL, &err) < 0) {
		fprintf(stderr, "the printed config does not parse: %s\n%s", err.text, json);
		abort();
	}
	/* Ignored keys are left out of the print; other warnings hold for it too. */
	int kept = 0;
	for (int i = 0; i < c.nwarnings; i++)
		kept += strstr(c.warnings[i], ": ignored: ") == NULL;
	if (!cfg_equal(&c, &again) || again.nwarnings != kept) {
		fprintf(stderr, "the printed config reads back different\n%s", json);
		abort();
	}
	char *json2 = cfg_to_json(&again);
	if (!json2 || strcmp(json, json2) != 0)
		abort();
	free(json2);
	free(json);
	cfg_free(&again);
	cfg_free(&c);
	return 0;
}
