/* dptrain-report.c — dptrain-report: OUTDIR/report.html from a training job's output
 * directory, while it runs or after. Owns the arguments, where the config comes from and the
 * exit status; the page is the library's (trainer/report.h). Exit 0 written, 1 nothing usable
 * or not written, 2 usage. */
#include "common/error.h"
#include "common/readfile.h"
#include "common/env.h"
#include "trainer/report.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "dptrain-report"

#define EXIT_USAGE 2

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " PROG " [OPTIONS] OUTDIR\n"
		"\n"
		"Write OUTDIR/report.html: one self-contained page (no network needed) with the\n"
		"job's status, loss, accuracy, learning rate, throughput, the data/compute/\n"
		"communication split, the ranks' step times, checkpoints, resumes, stops,\n"
		"stragglers, the rank table and the config, from OUTDIR/metrics.jsonl and\n"
		"OUTDIR/rank_table.json.\n"
		"\n"
		"Options:\n"
		"  -c, --config FILE   the config to show (default: DPTRAIN_CONFIG as\n"
		"                      OUTDIR/device0/env.log records it)\n"
		"  -o, --output FILE   write FILE instead of OUTDIR/report.html\n"
		"  -q, --quiet         do not list the problems found in the input\n"
		"  -h, --help          this help\n"
		"  -V, --version       the version\n"
		"\n"
		"Exit status: 0 the report was written (problems in the input said on standard\n"
		"error), 1 nothing usable in OUTDIR or the report not written, 2 usage error.\n"
		"See " PROG "(1).\n");
}

static void warn_line(void *arg, const char *msg)
{
	(void)arg;
	fprintf(stderr, PROG ": warning: %s\n", msg);
}

/* DPTRAIN_CONFIG from the env.log the launcher wrote for rank 0; malloc'd, or NULL */
static char *config_from_env_log(const char *dir, char *log, size_t loglen)
{
	char *text = NULL, *found = NULL;
	size_t len;
	struct dp_error err;
	snprintf(log, loglen, "%s/device0/env.log", dir);
	if (dp_read_file(log, 64u << 20, 0, &text, &len, &err) < 0)
		return NULL;
	for (char *l = text; l && *l;) {
		char *nl = strchr(l, '\n');
		if (nl)
			*nl = '\0';
		if (dp_env_is(l, ENV_DPTRAIN_CONFIG) && l[sizeof(ENV_DPTRAIN_CONFIG)]) {
			found = strdup(l + sizeof(ENV_DPTRAIN_CONFIG));
			break;
		}
		l = nl ? nl + 1 : NULL;
	}
	free(text);
	return found;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'}, {"output", required_argument, NULL, 'o'},
	    {"quiet", no_argument, NULL, 'q'},	      {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
	};
	const char *config = NULL, *output = NULL;
	int quiet = 0, c;
	while ((c = getopt_long(argc, argv, "c:o:qhV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'o':
			output = optarg;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf(PROG " %s\n", DPTRAIN_VERSION);
			return 0;
		default:
			fprintf(stderr, PROG ": try '" PROG " --help'\n");
			return EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, PROG ": %s; try '" PROG " --help'\n",
			optind == argc ? "give the output directory (OUTDIR)"
				       : "one output directory only");
		return EXIT_USAGE;
	}
	const char *dir = argv[optind];

	struct dp_error err, note;
	char *text = NULL, *found = NULL, from[4200] = "", log[4096];
	size_t len;
	struct report_opts o = {.output = output, .warn = quiet ? NULL : warn_line};
	if (!config)
		config = found = config_from_env_log(dir, log, sizeof(log));
	if (config) {
		if (dp_read_file(config, 16u << 20, 0, &text, &len, &err) == 0) {
			snprintf(from, sizeof(from), "%s%s%s", config,
				 found ? ", as recorded in " : "", found ? log : "");
			o.config = text;
			o.config_from = from;
		} else if (found) {
			errprintf(&note, "The config %s names could not be read: %s.", log,
				  err.text);
			o.config_note = note.text;
		} else {
			fprintf(stderr, PROG ": --config: %s\n", err.text);
			return EXIT_USAGE;
		}
	} else
		o.config_note = "No config found (OUTDIR/device0/env.log names none): give it "
				"with dptrain-report --config FILE.";
	int rv = report_write(dir, &o, &err);
	free(text);
	free(found);
	if (rv < 0) {
		fprintf(stderr, PROG ": %s; no report written\n", err.text);
		return 1;
	}
	return 0;
}
