/* dptrain-run.c — main of dptrain-run: N ranks on this machine without Slurm, each through
 * dptrain-launch with torchrun-style variables, so they get the environment, rank table and
 * device directories the SPANK plugin would make (like torchrun or msrun). Only parses its
 * arguments: starting, watching and reaping the ranks is launcher/local_run.c's. */
#include "common/error.h"
#include "config/config.h"
#include "launcher/local_run.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dptrain-run -n N [-o DIR] [--timeout S] [--grace S] [-v] [CONFIG.json] [COMMAND "
    "[ARGS...]]\n"
    "\n"
    "Runs N ranks of a data-parallel job on this machine, each through dptrain-launch, so\n"
    "they get RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT (a free\n"
    "port), a rank table and device directories as under Slurm. COMMAND defaults to the\n"
    "bundled trainer `dptrain` (found next to dptrain-run, else on PATH), which gets CONFIG.\n"
    "Any other COMMAND needs no config; one (its name ends in .json) sets the output\n"
    "directory, timeouts and devices, and needs no model or data.\n"
    "\n"
    "  -n, --nranks N    number of ranks (1-4096)\n"
    "  -o, --output DIR  output directory (default: DPTRAIN_OUTPUT_DIR, the config's\n"
    "                    output.dir, else dptrain.%j.%s; %j is local.<pid>, %s is 0)\n"
    "      --timeout S   rendezvous timeout of the ranks in seconds (DPTRAIN_TIMEOUT)\n"
    "      --grace S     when a rank fails: seconds between SIGTERM and SIGKILL to the\n"
    "                    others (default 10)\n"
    "  -v, --verbose     say what is started\n"
    "  -h, --help        this text\n"
    "      --version     the version\n"
    "\n"
    "SIGINT, SIGTERM, SIGHUP and SIGUSR1 are forwarded to every rank (the bundled trainer\n"
    "checkpoints and exits 4). When a rank fails the others are stopped and dptrain-run\n"
    "exits with the failed rank's status (128+N for signal N); every rank that crashed is\n"
    "named, also after a stop request. If dptrain-run itself dies (even by SIGKILL), its\n"
    "ranks get SIGTERM. The ranks' standard input is /dev/null.\n";

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...)
{
	va_list ap;

	fputs("dptrain-run: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static int parse_count(const char *s, const char *what, int min, int max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		die(2, "%s '%s' is not a number from %d to %d (see --help)", what, s, min, max);
	return (int)v;
}

/* CONFIG is the first argument when its name ends in .json: a command never does. */
static int is_config_name(const char *s)
{
	size_t n = strlen(s);
	return n > 5 && strcmp(s + n - 5, ".json") == 0;
}

/* The options into r; returns -1 to go on, else the exit status (--help, --version, a usage
 * error). */
static int parse_options(struct local_run *r, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"nranks", required_argument, NULL, 'n'},  {"output", required_argument, NULL, 'o'},
	    {"timeout", required_argument, NULL, 't'}, {"grace", required_argument, NULL, 'g'},
	    {"verbose", no_argument, NULL, 'v'},       {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},       {NULL, 0, NULL, 0},
	};
	int opt;

	while ((opt = getopt_long(argc, argv, "+n:o:vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			r->nranks = parse_count(optarg, "-n", 1, LOCAL_RUN_MAX_RANKS);
			break;
		case 'o':
			r->outdir_opt = optarg;
			break;
		case 't':
			parse_count(optarg, "--timeout", 1, 1000000);
			r->timeout_opt = optarg;
			break;
		case 'g':
			r->grace_s = parse_count(optarg, "--grace", 0, 3600);
			break;
		case 'v':
			r->verbose = 1;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			printf("dptrain-run %s\n", DPTRAIN_VERSION);
			return 0;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	static char *default_cmd[] = {"dptrain", NULL};
	struct local_run r;
	struct dp_error err;
	int rc;

	local_run_init(&r);
	if ((rc = parse_options(&r, argc, argv)) >= 0)
		return rc;
	if (r.nranks == 0)
		die(2, "say how many ranks to run with -n N (see --help)");
	if (optind >= argc)
		die(2, "no CONFIG or COMMAND given (usage: dptrain-run -n N [CONFIG.json] "
		       "[COMMAND...]; see --help)");
	if (is_config_name(argv[optind]))
		r.cfg_path = argv[optind++];
	r.cmd = optind < argc ? argv + optind : default_cmd;
	if (cfg_is_trainer_command(r.cmd[0]) && !r.cfg_path)
		die(2, "the bundled trainer needs a job config: dptrain-run -n N CONFIG.json "
		       "(see dptrain.json(5)); any other command runs without one");
	if (local_run_config(&r, &err) != 0 || local_run_programs(&r, &err) != 0 ||
	    local_run_job(&r, &err) != 0 || local_run_outdir(&r, &err) != 0 ||
	    local_run_environment(&r, &err) != 0 || local_run_start(&r, &err) != 0)
		die(1, "%s", err.text);
	rc = local_run_wait(&r);
	local_run_end(&r);
	return rc;
}
