/* report.c (test) — trainer/report.c: the escaping of what goes into the page (HTML text,
 * JSON inside <script>), and a long run's metrics thinned to what a page draws: every k-th
 * point with the first and the last kept, a large world's ranks grouped into rows holding the
 * slowest of each group, the problems in the input said with their line. */
#include "trainer/report.h"
#include "t/lib/tap.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/readfile.h"

static char said[8][256];
static int nsaid;

static void collect(void *arg, const char *msg)
{
	(void)arg;
	if (nsaid < 8)
		snprintf(said[nsaid], sizeof(said[0]), "%s", msg);
	nsaid++;
}

/* The page's embedded data (the JSON in <script id="dp-data">), parsed. */
static json_t *page_data(const char *path)
{
	char *text;
	size_t len;
	struct dp_error err;
	if (dp_read_file(path, 1 << 26, 0, &text, &len, &err) < 0) {
		diag("%s", err.text);
		return NULL;
	}
	const char *tag = "<script type=\"application/json\" id=\"dp-data\">";
	char *a = strstr(text, tag), *b = a ? strstr(a, "</script>") : NULL;
	json_t *d = NULL;
	if (a && b) {
		json_error_t je;
		a += strlen(tag);
		d = json_loadb(a, (size_t)(b - a), 0, &je);
		if (!d)
			diag("page data: %s", je.text);
	}
	free(text);
	return d;
}

int main(void)
{
	char *s = report_html_escape("a<b>&\"c'</script>");
	is(s, "a&lt;b&gt;&amp;&quot;c&#39;&lt;/script&gt;", "HTML: & < > \" ' escaped");
	free(s);
	s = report_json_for_script("{\"a\":\"</script><!--&\xe2\x80\xa8\"}");
	is(s, "{\"a\":\"\\u003c/script\\u003e\\u003c!--\\u0026\\u2028\"}",
	   "JSON in <script>: < > & and U+2028 as \\u escapes");
	json_error_t je;
	json_t *back = json_loads(s, 0, &je);
	is(back ? json_string_value(json_object_get(back, "a")) : "?", "</script><!--&\xe2\x80\xa8",
	   "... and the JSON still says the same");
	json_decref(back);
	free(s);

	/* a long run: 10000 train lines, a ranks line with 1000 ranks each 10th step, a bad
	 * line in the middle and an incomplete last one */
	char dir[] = "/tmp/dptrain-report-test-XXXXXX", path[256], page[256];
	if (!mkdtemp(dir))
		bail_out("mkdtemp: %m");
	snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
	snprintf(page, sizeof(page), "%s/report.html", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		bail_out("%s: %m", path);
	fprintf(f, "{\"event\":\"start\",\"model\":\"m\",\"world_size\":1000,\"total_steps\":"
		   "10000}\n");
	for (int i = 1; i <= 10000; i++) {
		fprintf(f, "{\"event\":\"train\",\"global_step\":%d,\"loss\":%d.5}\n", i, i);
		if (i == 5000)
			fprintf(f, "{\"event\":\"train\",\"global_step\":\n");
		if (i % 10 == 0) {
			fprintf(f, "{\"event\":\"ranks\",\"global_step\":%d,\"ranks\":[", i);
			for (int r = 0; r < 1000; r++)
				fprintf(f, "%s{\"rank\":%d,\"step_ms\":%d}", r ? "," : "", r,
					r == 997 ? 500 : 100 + r % 4);
			fprintf(f, "]}\n");
		}
	}
	fprintf(f, "{\"event\":\"eval\",\"global_st");
	fclose(f);

	struct dp_error err;
	struct report_opts o = {.warn = collect};
	ok(report_write(dir, &o, &err) == 0, "a long run's page is written");
	is_int(nsaid, 2, "two problems said");
	like(said[0], "metrics.jsonl:5501: not JSON (", "the bad line, by its number");
	like(said[1], "metrics.jsonl:11003: the last line is incomplete",
	     "the incomplete last line, by its number");
	json_t *d = page_data(page);
	ok(d != NULL, "the page's data parses");
	json_t *steps = json_object_get(json_object_get(d, "train"), "step");
	size_t n = json_array_size(steps);
	ok(n > 2000 && n <= 4001, "train points thinned to at most 4000 and the last (%zu)", n);
	is_int(json_integer_value(json_array_get(steps, 0)), 1, "the first point kept");
	is_int(json_integer_value(json_array_get(steps, n - 1)), 10000, "the last point kept");
	is_int(json_integer_value(json_object_get(json_object_get(d, "train"), "every")), 4,
	       "every 4th point (the page says so)");
	json_t *loss = json_object_get(json_object_get(d, "train"), "loss");
	is_double(json_number_value(json_array_get(loss, 1)), 5.5, 0, "the kept points' values");
	json_t *heat = json_object_get(d, "heat");
	json_t *cols = json_object_get(heat, "columns");
	size_t nc = json_array_size(cols);
	ok(nc > 100 && nc <= 201, "heat-map columns thinned to at most 200 and the last (%zu)", nc);
	json_t *last = json_array_get(cols, nc - 1);
	is_int(json_integer_value(json_array_get(json_object_get(heat, "step"), nc - 1)), 10000,
	       "the last ranks line kept");
	is_int(json_integer_value(json_object_get(last, "group")), 4, "1000 ranks: 4 to a row");
	json_t *ms = json_object_get(last, "ms");
	is_int((long)json_array_size(ms), 250, "250 rows");
	is_double(json_number_value(json_array_get(ms, 249)), 500, 0,
		  "a row holds the slowest of its ranks (rank 997)");
	is_double(json_number_value(json_array_get(ms, 0)), 103, 0, "... ranks 0-3: 103 ms");
	json_decref(d);

	/* nothing usable: the page is not written, and an older one stays */
	f = fopen(path, "w");
	fprintf(f, "not json\n");
	fclose(f);
	nsaid = 0;
	ok(report_write(dir, &o, &err) < 0, "nothing usable: an error");
	like(err.text, "metrics.jsonl: none of its 1 line is an event", "... saying so");
	ok(access(page, F_OK) == 0, "the older page is left as it was");
	unlink(page);
	unlink(path);
	ok(report_write(dir, &o, &err) < 0, "no metrics.jsonl: an error");
	like(err.text, "metrics.jsonl: no such file", "... naming it");
	rmdir(dir);
	return done_testing();
}
