/* dptrain-run.c — main of dptrain-run: N ranks on this machine without Slurm, each through
 * dptrain-launch with torchrun-style variables, so they get the environment, rank table and
 * device directories the SPANK plugin would make (like torchrun or msrun). Owns the ranks'
 * process groups: forwards signals to them and stops them all when one fails. */
#define _GNU_SOURCE /* sigabbrev_np */
#include "common/errfile.h"
#include "common/error.h"
#include "launcher/alloc.h"
#include "config/config.h"
#include "launcher/launcher.h"
#include "common/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_MAX_RANKS 4096
#define RUN_GRACE_S   10 /* after SIGTERM, before SIGKILL, when a rank failed */

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

struct rank_proc {
	pid_t pid;  /* 0 once reaped */
	pid_t pgid; /* the rank's process group (its first pid) */
	int status;
};

/* CONFIG is the first argument when its name ends in .json: a command never does. */
static int is_config_name(const char *s)
{
	size_t n = strlen(s);
	return n > 5 && strcmp(s + n - 5, ".json") == 0;
}

/* The program's one context. */
static struct {
	int nranks;
	int verbose;
	int grace_s;
	struct rank_proc *ranks;
	int alive;
} run;

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

/* A program installed next to this one, else NULL. */
static char *sibling(const char *name)
{
	char self[LAUNCH_PATH_MAX], path[LAUNCH_PATH_MAX + 64];
	ssize_t n;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return NULL;
	self[n] = '\0';
	snprintf(path, sizeof(path), "%s/%s", dirname(self), name);
	return access(path, X_OK) == 0 ? strdup(path) : NULL;
}

static void set(const char *name, const char *value)
{
	if (setenv(name, value, 1) != 0)
		die(1, "cannot set %s: %s", name, strerror(errno));
}

static void set_int(const char *name, long value)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%ld", value);
	set(name, buf);
}

static void signal_all(int sig)
{
	int r;

	for (r = 0; r < run.nranks; r++)
		if (run.ranks[r].pid > 0)
			kill(-run.ranks[r].pid, sig);
}

/* Exit status a shell would show for a wait status. */
static int shell_status(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static void describe(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "ended with wait status 0x%x", status);
}

/* A rank's end that is not what was asked of it: 0, or 4 (stopped on request) once the ranks
 * were told to stop. */
static int crashed(int status, int interrupted)
{
	return !(WIFEXITED(status) &&
		 (WEXITSTATUS(status) == 0 || (interrupted && WEXITSTATUS(status) == 4)));
}

static pid_t start_rank(int r, const char *launcher, char **cmd, const sigset_t *mask)
{
	char **argv;
	pid_t pid, parent = getpid();
	sigset_t stop;
	int i, n, fd;

	for (n = 0; cmd[n]; n++)
		;
	argv = calloc((size_t)n + 3, sizeof(char *));
	if (!argv)
		die(1, "out of memory");
	argv[0] = (char *)launcher;
	argv[1] = "--";
	for (i = 0; i < n; i++)
		argv[i + 2] = cmd[i];
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die(1, "cannot start rank %d: fork: %s", r, strerror(errno));
	if (pid == 0) {
		/* Own process group: dptrain-run signals a rank and whatever it started at once. */
		setpgid(0, 0);
		set_int("RANK", r);
		set_int("LOCAL_RANK", r);
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0 && fd != STDIN_FILENO) {
			dup2(fd, STDIN_FILENO);
			close(fd);
		}
		/* The rank goes when we go, even by SIGKILL: a trainer checkpoints and stops. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
			_exit(1);
		/* The stop signals stay blocked through the exec: dptrain-launch takes them from
		 * its first instruction, and one that comes before that waits for it. */
		stop = *mask;
		sigaddset(&stop, SIGTERM);
		sigaddset(&stop, SIGUSR1);
		sigprocmask(SIG_SETMASK, &stop, NULL);
		execv(launcher, argv);
		fprintf(stderr, "dptrain-run: rank %d: cannot run %s: %s\n", r, launcher,
			strerror(errno));
		_exit(launch_exec_status(errno));
	}
	setpgid(pid, pid); /* also here: whichever runs first, the group exists before a kill */
	free(argv);
	return pid;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"nranks", required_argument, NULL, 'n'},  {"output", required_argument, NULL, 'o'},
	    {"timeout", required_argument, NULL, 't'}, {"grace", required_argument, NULL, 'g'},
	    {"verbose", no_argument, NULL, 'v'},       {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},       {NULL, 0, NULL, 0},
	};
	const char *outdir_opt = NULL, *timeout_opt = NULL, *s;
	char *launcher = NULL, *trainer = NULL, **cmd, *default_cmd[] = {"dptrain", NULL};
	struct dp_error err;
	char outdir[LAUNCH_PATH_MAX], canon[LAUNCH_PATH_MAX], pattern[LAUNCH_PATH_MAX], job[64],
	    secret[DP_SECRET_LEN + 1], what[128], node[RT_HOST_MAX];
	sigset_t block, oldmask;
	struct timespec wait_ts;
	struct cfg c;
	siginfo_t info;
	time_t kill_at = 0;
	int opt, r, port, port_fd, lock_fd = -1, per_rank_logs, failed = -1, sig, exit_code = 0,
				   interrupted = 0;

	run.grace_s = RUN_GRACE_S;
	while ((opt = getopt_long(argc, argv, "+n:o:vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			run.nranks = parse_count(optarg, "-n", 1, RUN_MAX_RANKS);
			break;
		case 'o':
			outdir_opt = optarg;
			break;
		case 't':
			parse_count(optarg, "--timeout", 1, 1000000);
			timeout_opt = optarg;
			break;
		case 'g':
			run.grace_s = parse_count(optarg, "--grace", 0, 3600);
			break;
		case 'v':
			run.verbose = 1;
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
	if (run.nranks == 0)
		die(2, "say how many ranks to run with -n N (see --help)");
	if (optind >= argc)
		die(2, "no CONFIG or COMMAND given (usage: dptrain-run -n N [CONFIG.json] "
		       "[COMMAND...]; see --help)");
	const char *cfg_path = NULL;
	if (is_config_name(argv[optind]))
		cfg_path = argv[optind++];
	cmd = optind < argc ? argv + optind : default_cmd;
	int bundled = cfg_is_trainer_command(cmd[0]);
	if (bundled && !cfg_path)
		die(2, "the bundled trainer needs a job config: dptrain-run -n N CONFIG.json "
		       "(see dptrain.json(5)); any other command runs without one");

	/* The config is checked here, once, so a typo fails before N ranks start: all of it for
	 * the bundled trainer, what the launch uses for any other command. */
	memset(&c, 0, sizeof(c));
	if (cfg_path) {
		if ((bundled ? cfg_load(&c, cfg_path, 0, NULL, &err)
			     : cfg_load_launch(&c, cfg_path, &err)) != 0)
			die(1, "%s", err.text);
		set("DPTRAIN_CONFIG", c.path);
	} else {
		unsetenv("DPTRAIN_CONFIG"); /* one from an outer job is not this run's */
	}
	per_rank_logs = cfg_path ? c.output.per_rank_logs : 1; /* the launcher's default */
	s = getenv("DPTRAIN_OUTPUT_DIR");
	snprintf(pattern, sizeof(pattern), "%s",
		 outdir_opt			 ? outdir_opt
		 : s && *s			 ? s
		 : c.output.dir && *c.output.dir ? c.output.dir
						 : LAUNCH_DEFAULT_OUTDIR);

	launcher = sibling("dptrain-launch");
	if (!launcher)
		die(1,
		    "dptrain-launch is not installed next to dptrain-run (in the same directory)");
	trainer = sibling("dptrain");
	if (trainer && !getenv("DPTRAIN_TRAINER"))
		set("DPTRAIN_TRAINER", trainer);

	snprintf(job, sizeof(job), "local.%ld", (long)getpid());
	alloc_hostname(node);
	if (launch_outdir_expand(pattern, job, "0", node, outdir, &err) != 0)
		die(1, "%s", err.text);
	/* held until the ranks are done: no other program takes it before rank 0 binds it */
	if (alloc_port_hold("127.0.0.1", &port, &port_fd, &err) != 0)
		die(1, "%s", err.text);
	set("DPTRAIN_SOURCE", "env");
	set("DPTRAIN_JOB_ID", job);
	set("DPTRAIN_STEP_ID", "0");
	/* The output directory is this run's before any rank starts: another live run or job in
	 * it is refused here, with nothing written. The ranks inherit the lock (rank 0's launcher
	 * takes it as its own: DPTRAIN_LOCK_FD). */
	if (launch_mkdir_p(outdir, &err) != 0 || launch_dir_safe(outdir, canon, &err) != 0)
		die(1, "%s", err.text);
	snprintf(outdir, sizeof(outdir), "%s", canon);
	set("DPTRAIN_OUTPUT_DIR", outdir);
	{
		char who[LAUNCH_PATH_MAX + 128], when[LAUNCH_TIME_MAX];

		launch_utc_now(when);
		snprintf(who, sizeof(who), "dptrain-run pid %ld (job %s), since %s", (long)getpid(),
			 job, when);
		switch (launch_outdir_lock(outdir, who, &lock_fd, &err)) {
		case 0:
			if (fcntl(lock_fd, F_SETFD, 0) != 0)
				die(1, "cannot pass on the output directory's lock: %s",
				    strerror(errno));
			set_int("DPTRAIN_LOCK_FD", lock_fd);
			break;
		case 1:
			fprintf(stderr, "dptrain-run: warning: %s\n", err.text);
			break;
		default:
			die(1, "%s", err.text);
		}
	}
	set_int("WORLD_SIZE", run.nranks);
	set_int("LOCAL_WORLD_SIZE", run.nranks);
	set("NODE_RANK", "0");
	set("GROUP_RANK", "0");
	set("MASTER_ADDR", "127.0.0.1");
	set_int("MASTER_PORT", port);
	/* this run's secret: another user's program on 127.0.0.1 cannot join the ranks */
	if (dp_secret_make(secret, &err) != 0)
		die(1, "%s", err.text);
	set(DP_SECRET_ENV, secret);
	if (timeout_opt)
		set("DPTRAIN_TIMEOUT", timeout_opt);
	if (run.verbose)
		fprintf(stderr,
			"dptrain-run: %d ranks of '%s', master 127.0.0.1:%d, output in %s\n",
			run.nranks, cmd[0], port, outdir);

	run.ranks = calloc((size_t)run.nranks, sizeof(*run.ranks));
	if (!run.ranks)
		die(1, "out of memory");
	/* Signals are taken synchronously (sigtimedwait) in the loop below. */
	sigemptyset(&block);
	sigaddset(&block, SIGCHLD);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGHUP);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, &oldmask);
	for (r = 0; r < run.nranks; r++) {
		run.ranks[r].pid = start_rank(r, launcher, cmd, &oldmask);
		run.ranks[r].pgid = run.ranks[r].pid;
		run.alive++;
	}

	while (run.alive > 0) {
		pid_t pid;
		int status;

		/* Reap first: a SIGCHLD may stand for several children. */
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
			for (r = 0; r < run.nranks && run.ranks[r].pid != pid; r++)
				;
			if (r == run.nranks)
				continue;
			run.ranks[r].pid = 0;
			run.ranks[r].status = status;
			run.alive--;
			/* Every crash is named, stopped or not, and the first one decides the exit
			 * status. A rank that stops as asked (4 after a stop request) is no
			 * failure: the others may still be writing the checkpoint. */
			int bad = crashed(status, interrupted);
			if (run.verbose || bad) {
				describe(status, what, sizeof(what));
				fprintf(stderr, "dptrain-run: rank %d %s", r, what);
				if (bad && per_rank_logs)
					fprintf(stderr, " (its output: %s/device%d/train.log)",
						outdir, r);
				struct launch_paths rp; /* the rank's, as its launcher made them */
				char rec[768];
				if (bad && launch_paths_init(&rp, outdir, r, &err) == 0 &&
				    dp_errfile_message(rp.errfile, rec, sizeof(rec)))
					fprintf(stderr,
						"; it recorded: %s (the traceback is in %s)", rec,
						rp.errfile);
			}
			if (bad && failed < 0) {
				failed = r;
				exit_code = shell_status(status);
				if (!interrupted && run.alive)
					fprintf(stderr, "; stopping the other %d rank%s", run.alive,
						run.alive > 1 ? "s" : "");
				signal_all(SIGTERM);
				kill_at = time(NULL) + run.grace_s;
			} else if (failed < 0 && status != 0) {
				exit_code = shell_status(status); /* 4: stopped on request */
			}
			if (run.verbose || bad)
				fputc('\n', stderr);
		}
		if (run.alive == 0)
			break;
		if (kill_at) {
			time_t left = kill_at - time(NULL);
			if (left <= 0) {
				fprintf(stderr,
					"dptrain-run: %d rank%s still running %d s after SIGTERM; "
					"sending SIGKILL\n",
					run.alive, run.alive > 1 ? "s" : "", run.grace_s);
				signal_all(SIGKILL);
				kill_at = 0;
				continue;
			}
			wait_ts.tv_sec = left;
			wait_ts.tv_nsec = 0;
			sig = sigtimedwait(&block, &info, &wait_ts);
		} else {
			sig = sigwaitinfo(&block, &info);
		}
		if (sig < 0 || sig == SIGCHLD)
			continue;
		/* SIGINT/SIGTERM/SIGHUP: the ranks decide how to end (a trainer checkpoints). */
		if (!interrupted)
			fprintf(stderr, "dptrain-run: got SIG%s: passing it to all ranks\n",
				sigabbrev_np(sig));
		interrupted = 1;
		signal_all(sig);
	}
	/* Whatever a failed or stopped rank left behind in its process group goes too. */
	if (failed >= 0 || interrupted)
		for (r = 0; r < run.nranks; r++)
			kill(-run.ranks[r].pgid, SIGKILL);
	close(port_fd);
	free(run.ranks);
	free(launcher);
	free(trainer);
	cfg_free(&c);
	return exit_code;
}
