/* main.c — the dptrain program: command line, loading the job config, then training.
 * Owns the arguments and the exit codes only: the config is trainer/config*.c, training is
 * the trainer engine's entry point (train()), which this build does not have yet. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DPTRAIN_VERSION
#define DPTRAIN_VERSION "0.0.0"
#endif

enum {
	EXIT_OK = 0,
	EXIT_CONFIG = 1,    /* the config (or an override) is invalid */
	EXIT_USAGE = 2,	    /* bad command line */
	EXIT_NO_ENGINE = 3, /* valid config, but nothing here can train it */
};

struct args {
	const char *config; /* as given, for messages */
	int noverrides;
	char **overrides;
	int check;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: dptrain [OPTIONS] [CONFIG] [path.to.key=VALUE ...]\n"
		"Train a model data-parallel as the job config CONFIG (JSON, see dptrain.json(5))\n"
		"says. CONFIG defaults to $DPTRAIN_CONFIG, which srun --dptrain sets.\n"
		"\n"
		"  -c, --check     validate CONFIG, print the resolved config as JSON and exit\n"
		"  -h, --help      show this help and exit\n"
		"  -V, --version   show the version and exit\n"
		"\n"
		"path.to.key=VALUE changes one key for this run: VALUE is read as JSON when it\n"
		"parses, else as a string; key=null restores the default. For example:\n"
		"  dptrain --check lenet-fmnist.json train.epochs=1 data.batch_size=64\n"
		"\n"
		"Exit status: 0 success, 1 invalid config, 2 usage error, 3 no training engine in\n"
		"this build.\n");
}

/* KEY=VALUE with no '/' in KEY is an override; anything else is the config file (write
 * ./a=b.json for a config whose name looks like an override). */
static int is_override(const char *arg)
{
	const char *eq = strchr(arg, '=');
	return eq && !memchr(arg, '/', (size_t)(eq - arg));
}

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
	    {"check", no_argument, NULL, 'c'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	int ch;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, "chV", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			a->check = 1;
			break;
		case 'h':
			usage(stdout);
			exit(EXIT_OK);
		case 'V':
			printf("dptrain %s\n", DPTRAIN_VERSION);
			exit(EXIT_OK);
		default:
			fprintf(stderr, "dptrain: unknown option '%s'; see dptrain --help\n",
				argv[optind - 1]);
			return -1;
		}
	}
	if (!(a->overrides = calloc((size_t)argc, sizeof(char *)))) {
		fprintf(stderr, "dptrain: out of memory\n");
		return -1;
	}
	for (int i = optind; i < argc; i++) {
		if (is_override(argv[i])) {
			a->overrides[a->noverrides++] = argv[i];
		} else if (a->config) {
			fprintf(stderr,
				"dptrain: two configs given ('%s' and '%s'); give one, and "
				"overrides as path.to.key=VALUE\n",
				a->config, argv[i]);
			return -1;
		} else {
			a->config = argv[i];
		}
	}
	if (!a->config) {
		const char *env = getenv("DPTRAIN_CONFIG");
		if (!env || !env[0]) {
			fprintf(stderr,
				"dptrain: no config: give CONFIG or set DPTRAIN_CONFIG; see "
				"dptrain --help\n");
			return -1;
		}
		a->config = env;
	}
	return 0;
}

static int print_config(const struct cfg *c)
{
	char *json = cfg_to_json(c);

	if (!json) {
		fprintf(stderr, "dptrain: out of memory\n");
		return EXIT_CONFIG;
	}
	fputs(json, stdout);
	free(json);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "dptrain: cannot write the config to stdout: %s\n",
			strerror(errno));
		return EXIT_CONFIG;
	}
	return EXIT_OK;
}

/* The trainer engine's entry point goes here (run_training(c)); until it exists a valid
 * config cannot be trained. */
static int train(const struct cfg *c, const char *name)
{
	(void)c;
	fprintf(stderr,
		"dptrain: %s is valid, but this build has no training engine yet; use --check to "
		"print the resolved config\n",
		name);
	return EXIT_NO_ENGINE;
}

int main(int argc, char **argv)
{
	struct args a = {0};
	struct cfg c = {0};
	char err[1024];
	int rv;

	if (parse_args(argc, argv, &a) < 0) {
		rv = EXIT_USAGE;
		goto out;
	}
	if (cfg_load(&c, a.config, a.noverrides, a.overrides, err, sizeof(err)) < 0) {
		fprintf(stderr, "dptrain: %s\n", err);
		rv = EXIT_CONFIG;
		goto out;
	}
	for (int i = 0; i < c.nwarnings; i++)
		fprintf(stderr, "dptrain: warning: %s: %s\n", a.config, c.warnings[i]);
	rv = a.check ? print_config(&c) : train(&c, a.config);
out:
	cfg_free(&c);
	free(a.overrides);
	return rv;
}
