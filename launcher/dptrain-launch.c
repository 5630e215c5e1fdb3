/* dptrain-launch.c — main of dptrain-launch, the per-rank wire-up program: discover the allocation
 * (PMIx, SLURM_*, torchrun-style env), write the rank table and the device directory, export
 * the environment, then exec the command. Runs once per task, started by the SPANK plugin, by
 * dptrain-run, or directly by srun. Must not contain training code. */
#include "common/error.h"
#include "common/secret.h"
#include "launcher/alloc.h"
#include "config/config.h"
#include "launcher/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_PMIX
#include <pmix_version.h>
#endif

static const char usage_text[] =
    "usage: dptrain-launch [--] COMMAND [ARGS...]\n"
    "\n"
    "Makes this task one rank of a data-parallel job, then runs COMMAND in it: discovers\n"
    "the allocation (PMIx, else SLURM_*, else RANK/WORLD_SIZE/...), writes\n"
    "OUTPUT/rank_table.json, OUTPUT/device<RANK>/{env.log,train.log}, exports RANK,\n"
    "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, RANK_TABLE_FILE, DEVICE_ID, ...,\n"
    "OMP_NUM_THREADS, GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME unless already set, and\n"
    "torchrun's TORCHELASTIC_* and ROLE_*, with config mindspore.dynamic_cluster msrun's\n"
    "MS_* and its scheduler on rank 0 (see dptrain-launch(1)),\n"
    "and execs COMMAND (`dptrain` means $DPTRAIN_TRAINER when that is set). COMMAND's\n"
    "output is appended to device<RANK>/train.log, rank 0's also kept on the console\n"
    "(config output.per_rank_logs and output.console change that).\n"
    "\n"
    "Environment:\n"
    "  DPTRAIN_CONFIG      job config (output.*, timeouts.rendezvous_s, device.*,\n"
    "                      network.interface, mindspore.*); optional\n"
    "  DPTRAIN_OUTPUT_DIR  output directory, %j job id, %s step id, %n node name\n"
    "                      (default dptrain.%j.%s)\n"
    "  DPTRAIN_IFACE       network interface whose address this rank publishes\n"
    "  DPTRAIN_TIMEOUT     seconds any rendezvous may take (default: config, else 300)\n"
    "  DPTRAIN_SOURCE      pmix, slurm, env or auto (default)\n"
    "  DPTRAIN_TRAINER     the bundled trainer, run for COMMAND `dptrain`\n"
    "  DPTRAIN_VERBOSE     1: say which source and endpoint were used\n"
    "  MASTER_ADDR, MASTER_PORT   when set, used instead of the discovered endpoint\n"
    "Test hooks: DPTRAIN_TEST_STALL_RANK=N makes rank N sleep (DPTRAIN_TEST_STALL_SECONDS,\n"
    "default 3600) before it joins the others, to test rendezvous timeouts.\n";

/* How long reading the job config may take, before the guard knows the wire-up's limit. */
#define LAUNCH_FIRST_LIMIT 60

/* The process's one context: who we are for messages, what we are doing (for the guard's
 * messages), and whether a PMIx session or the store is open. The guard thread reads ident and
 * step: lock. */
static struct {
	pthread_mutex_t lock;
	char ident[RT_HOST_MAX + 64]; /* "rank 3 on n2" */
	char step[128];
	int limit_s; /* the guard's: from start, LAUNCH_FIRST_LIMIT until the config is read */
	struct timespec start; /* CLOCK_MONOTONIC at guard_start */
	int session_open;      /* PMIx, or the launchers' store (alloc.h) */
	sigset_t stop;	       /* SIGTERM, SIGUSR1: blocked from main's first instruction */
	pthread_t guard;       /* takes them, and ends a wire-up that outlives every timeout */
	int guard_running;
	int sigfd, wakefd;   /* the guard's: a signalfd for stop, an eventfd to end it */
	struct alloc *alloc; /* for die(): the PMIx session to end the step with */
} ctx = {.lock = PTHREAD_MUTEX_INITIALIZER};

#if defined(__SANITIZE_ADDRESS__)
/* Sanitizer builds only: libpmix 4.2 leaks by itself, whatever its client does (measured with
 * a bare PMIx_Init/Fence/Finalize): strings in PMIx_Init, and with PMIX_MCA_gds=hash (which
 * the launcher sets for MPI programs) the values its hash store fetches and a string while
 * it processes the server's messages. Full stacks, so only allocations made under those
 * library functions are suppressed. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:pmix_rte_init\nleak:pmix_hash_fetch\nleak:pmix_ptl_base_process_msg\n";
}
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "fast_unwind_on_malloc=0";
}
#endif

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "dptrain-launch: %s: ", ctx.ident);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	/* With a PMIx session open, end the whole step (PMIx_Abort), with the store open tell
	 * every rank (alloc_abort): peers stuck waiting for this rank end now instead of at their
	 * own timeout, and srun returns. The library's threads are still running then: leave
	 * without exit handlers. */
	if (ctx.session_open) {
		char msg[1024];
		struct dp_error aerr;
		int n = snprintf(msg, sizeof(msg), "dptrain-launch: %s: ", ctx.ident);
		va_start(ap, fmt);
		if (n > 0 && (size_t)n < sizeof(msg))
			vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
		va_end(ap);
		fflush(NULL);
		if (ctx.alloc && alloc_abort(ctx.alloc, 1, msg, &aerr) != 0)
			fprintf(stderr, "dptrain-launch: %s: %s\n", ctx.ident, aerr.text);
		fflush(NULL);
		_exit(1);
	}
	exit(1);
}

/* The guard: a thread that waits for SIGTERM/SIGUSR1 until the wire-up's deadline (two
 * rendezvous plus slack: the last resort against a hang nobody foresaw). No signal handler
 * runs anywhere in this process, so none can interrupt PMIx's threads. A stop request during
 * the wire-up ends the rank at once with the trainer's "stopped" status (4): nothing is
 * trained yet, so nothing is lost, and peers still waiting for it are stopped by Slurm.
 * It polls a signalfd (the signals stay blocked everywhere) and an eventfd that guard_stop
 * writes: the thread returns by itself, never cancelled (cancellation unwinds its stack
 * without a trace in AddressSanitizer's shadow, which then reports the next use of it). */
static void *guard_main(void *arg)
{
	struct timespec end;
	struct pollfd fds[2] = {{.fd = ctx.sigfd, .events = POLLIN},
				{.fd = ctx.wakefd, .events = POLLIN}};
	struct signalfd_siginfo si;
	char msg[768];
	int sig = 0, n;

	(void)arg;
	for (;;) {
		struct timespec now;
		long long left_ms;
		pthread_mutex_lock(&ctx.lock); /* the limit grows once the config is read */
		end = ctx.start;
		end.tv_sec += ctx.limit_s;
		pthread_mutex_unlock(&ctx.lock);
		clock_gettime(CLOCK_MONOTONIC, &now);
		left_ms = (long long)(end.tv_sec - now.tv_sec) * 1000 +
			  (end.tv_nsec - now.tv_nsec) / 1000000;
		if (left_ms <= 0)
			break;
		n = poll(fds, 2, left_ms > 60000 ? 60000 : (int)left_ms);
		if (n < 0 && errno != EINTR)
			break; /* cannot wait: treat as the deadline, the message says so */
		if (n <= 0)
			continue;
		if (fds[1].revents)
			return NULL; /* guard_stop: the wire-up is done */
		if (fds[0].revents && read(ctx.sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
			sig = (int)si.ssi_signo;
			break;
		}
	}
	pthread_mutex_lock(&ctx.lock);
	if (sig > 0)
		n = snprintf(msg, sizeof(msg),
			     "dptrain-launch: %s: %s while %s: stopping; nothing was trained "
			     "yet, so there is nothing to save\n",
			     ctx.ident, sig == SIGTERM ? "SIGTERM" : "SIGUSR1", ctx.step);
	else
		n = snprintf(msg, sizeof(msg),
			     "dptrain-launch: %s: still %s after %d s, past every timeout; "
			     "giving up\n",
			     ctx.ident, ctx.step, ctx.limit_s);
	pthread_mutex_unlock(&ctx.lock);
	(void)!write(STDERR_FILENO, msg,
		     n < 0		       ? 0
		     : (size_t)n < sizeof(msg) ? (size_t)n
					       : sizeof(msg) - 1);
	_exit(sig > 0 ? 4 : 1); /* no exit handlers: PMIx's threads are running */
}

static void guard_start(void)
{
	int e;

	ctx.sigfd = signalfd(-1, &ctx.stop, SFD_CLOEXEC);
	ctx.wakefd = eventfd(0, EFD_CLOEXEC);
	if (ctx.sigfd < 0 || ctx.wakefd < 0) {
		fprintf(stderr, "dptrain-launch: %s: cannot wait for stop signals: %s\n", ctx.ident,
			strerror(errno));
		exit(1);
	}
	clock_gettime(CLOCK_MONOTONIC, &ctx.start);
	e = pthread_create(&ctx.guard, NULL, guard_main, NULL);
	if (e != 0) {
		fprintf(stderr, "dptrain-launch: %s: cannot start a thread: %s\n", ctx.ident,
			strerror(e));
		exit(1);
	}
	ctx.guard_running = 1;
}

/* Before the exec: a stop signal from now on stays pending, for the command to take. One
 * that came just before it may already have been taken by the guard, which then ends the
 * rank with status 4 as during the wire-up. */
static void guard_stop(void)
{
	uint64_t one = 1;

	if (!ctx.guard_running)
		return;
	if (write(ctx.wakefd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		die("cannot stop the guard thread: %s", strerror(errno));
	pthread_join(ctx.guard, NULL);
	ctx.guard_running = 0;
	close(ctx.sigfd);
	close(ctx.wakefd);
}

/* What we are doing now, for the guard's messages. */
static void set_step(const char *step)
{
	pthread_mutex_lock(&ctx.lock);
	snprintf(ctx.step, sizeof(ctx.step), "%s", step);
	pthread_mutex_unlock(&ctx.lock);
}

/* Before discovery: the rank as the environment tells it, for early messages. */
static void early_ident(void)
{
	const char *names[] = {"PMIX_RANK", "SLURM_PROCID", "RANK"};
	char host[RT_HOST_MAX];
	const char *r = NULL;
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]) && !r; i++)
		r = getenv(names[i]);
	alloc_hostname(host);
	snprintf(ctx.ident, sizeof(ctx.ident), "rank %s on %s", r && strlen(r) < 12 ? r : "?",
		 host);
}

static int env_flag(const char *name)
{
	const char *s = getenv(name);
	return s && *s && strcmp(s, "0") != 0;
}

/* What the job config says, or the defaults without one. */
struct settings {
	char outdir[LAUNCH_PATH_MAX]; /* pattern */
	int per_rank_logs;
	enum cfg_console console;
	enum cfg_device_dirs device_dirs;
	int run_in_device_dir;
	int ms_dynamic;			 /* mindspore.dynamic_cluster */
	char hccn_conf[LAUNCH_PATH_MAX]; /* mindspore.hccn_conf, or "" */
	char iface[64];			 /* network.interface, or "" */
	struct alloc_opts opts;
};

static void read_settings(struct settings *st)
{
	const char *cfg_path = getenv("DPTRAIN_CONFIG"), *s;
	struct dp_error err;
	struct cfg c;
	int v, rc;

	memset(st, 0, sizeof(*st));
	snprintf(st->outdir, sizeof(st->outdir), "%s", LAUNCH_DEFAULT_OUTDIR);
	st->per_rank_logs = 1;
	st->console = CFG_CONSOLE_RANK0;
	st->opts.timeout_s = LAUNCH_DEFAULT_TIMEOUT;
	st->opts.stall_rank = -1;
	st->opts.verbose = env_flag("DPTRAIN_VERBOSE");
	if (cfg_path && *cfg_path) {
		memset(&c, 0, sizeof(c));
		if (cfg_load_launch(&c, cfg_path, &err) != 0)
			die("DPTRAIN_CONFIG: %s", err.text);
		if (c.output.dir && c.output.dir[0])
			snprintf(st->outdir, sizeof(st->outdir), "%s", c.output.dir);
		st->per_rank_logs = c.output.per_rank_logs;
		st->console = c.output.console;
		/* Whole seconds, rounded up (no libm in the launcher). */
		st->opts.timeout_s = (int)c.timeouts.rendezvous_s;
		if (st->opts.timeout_s < c.timeouts.rendezvous_s)
			st->opts.timeout_s++;
		st->opts.allow_shared_gpu = c.device.allow_shared_gpu;
		st->device_dirs = c.output.device_dirs;
		st->run_in_device_dir = c.output.run_in_device_dir;
		st->ms_dynamic = c.mindspore.dynamic_cluster;
		if (c.mindspore.hccn_conf)
			snprintf(st->hccn_conf, sizeof(st->hccn_conf), "%s", c.mindspore.hccn_conf);
		if (c.network.interface && snprintf(st->iface, sizeof(st->iface), "%s",
						    c.network.interface) >= (int)sizeof(st->iface))
			die("DPTRAIN_CONFIG: network.interface '%.40s...' is longer than an "
			    "interface name can be",
			    c.network.interface);
		cfg_free(&c);
	}
	s = getenv("DPTRAIN_OUTPUT_DIR");
	if (s && *s)
		snprintf(st->outdir, sizeof(st->outdir), "%s", s);
	rc = rt_env_int("DPTRAIN_TIMEOUT", 1, INT_MAX, &v, &err);
	if (rc < 0)
		die("%s", err.text);
	if (rc == 1)
		st->opts.timeout_s = v;
	if (st->opts.timeout_s < 1)
		st->opts.timeout_s = 1;
	s = getenv("DPTRAIN_IFACE");
	st->opts.iface = s && *s ? s : st->iface[0] ? st->iface : NULL;
	st->opts.hccn_conf = st->hccn_conf[0] ? st->hccn_conf : NULL;
	if (alloc_source_from_name(getenv("DPTRAIN_SOURCE"), &st->opts.source) != 0)
		die("DPTRAIN_SOURCE='%s' is not one of pmix, slurm, env, auto",
		    getenv("DPTRAIN_SOURCE"));
	if (rt_env_int("DPTRAIN_TEST_STALL_RANK", 0, INT_MAX, &st->opts.stall_rank, &err) < 0)
		die("%s", err.text);
	st->opts.stall_s = 3600;
	if (rt_env_int("DPTRAIN_TEST_STALL_SECONDS", 0, INT_MAX, &st->opts.stall_s, &err) < 0)
		die("%s", err.text);
}

/* N of the rank's device<N> directory: its rank, or its device (output.device_dirs) */
static int devdir_number(const struct settings *st, const struct alloc *a,
			 const struct ranktable *rt)
{
	return st->device_dirs == CFG_DEVDIRS_DEVICE ? rt->ranks[a->rank].device_id : a->rank;
}

/* The rank's output directory (the pattern with %j %s %n %u expanded) and device directory:
 * device<RANK>, or device<DEVICE_ID> (output.device_dirs "device", as MindSpore's scripts
 * name them), which repeats on every node: refused on several nodes unless %n gives each
 * node its own directory. */
static int setup_paths(const struct settings *st, const struct alloc *a, const struct ranktable *rt,
		       struct launch_paths *paths, struct dp_error *err)
{
	char outdir[LAUNCH_PATH_MAX];
	int per_node = strstr(st->outdir, "%n") != NULL;

	if (st->device_dirs == CFG_DEVDIRS_DEVICE && a->node_count > 1 && !per_node) {
		errprintf(err,
			  "output.device_dirs \"device\" names directories device<DEVICE_ID>, "
			  "which repeat on each of the %d nodes: put %%n (the node's name) in "
			  "output.dir, e.g. \"dptrain.%%j.%%s/%%n\", or use \"rank\"",
			  a->node_count);
		return -1;
	}
	if (launch_outdir_expand(st->outdir, a->job_id, a->step_id, a->ranks[a->rank].host, outdir,
				 err) != 0)
		return -1;
	return launch_paths_init(paths, outdir, devdir_number(st, a, rt), err);
}

/* The output directory made, and checked so that no other user can swap it or any directory
 * above it (launch_dir_safe); from here on every path is the resolved one. */
static void safe_outdir(const struct settings *st, const struct alloc *a,
			const struct ranktable *rt, struct launch_paths *paths)
{
	char canon[LAUNCH_PATH_MAX];
	struct dp_error err;

	if (launch_mkdir_p(paths->outdir, &err) != 0 ||
	    launch_dir_safe(paths->outdir, canon, &err) != 0 ||
	    launch_paths_init(paths, canon, devdir_number(st, a, rt), &err) != 0)
		die("%s", err.text);
}

/* --wire-up=FD: dptrain-launch as the SPANK plugin's helper. The plugin starts it from
 * task_init (a fresh process, so a proper PMIx client, while the task itself stays a fork of
 * slurmstepd that must not call PMIx); it does the whole wire-up, then, instead of running
 * the command, tells the plugin on FD what the task needs, as NUL-terminated records:
 *   D<seconds>    first: how long the wire-up may take (the guard's limit)
 *   E<NAME=VALUE> a variable to set in the task (new or changed by the wire-up)
 *   L<path>       the rank's train.log (created, header written): the task's output goes there
 *   T<0|1>        with L: also keep the output on the console (the task tees)
 *   S<0|1>        the command is the bundled trainer: start it with SIGTERM/SIGUSR1 blocked
 *   C<dir>        run the command there (output.run_in_device_dir)
 *   M<path>       start MindSpore's scheduler beside the command, its output in path
 *   Z             last: everything was sent (without it the plugin fails the task)
 * Slurm then runs the command itself, with everything it does after task_init (dptrain(8)). */
static int wire_fd = -1;
static int lock_fd = -1; /* rank 0: the output directory's lock (launch_outdir_lock) */

/* Rank 0: take the output directory before any rank writes in it; another live job's
 * directory ends the step (die) with who holds it. */
static void lock_outdir(const struct alloc *a, const char *outdir)
{
	char who[400], host[256], when[LAUNCH_TIME_MAX];
	struct dp_error err;

	launch_utc_now(when);
	snprintf(host, sizeof(host), "%s", a->ranks[a->rank].host);
	snprintf(who, sizeof(who), "job %s step %s, rank 0 on %s, pid %ld, since %s", a->job_id,
		 a->step_id, host, (long)getpid(), when);
	switch (launch_outdir_lock(outdir, who, &lock_fd, &err)) {
	case 0:
		return;
	case 1:
		fprintf(stderr, "dptrain-launch: %s: warning: %s\n", ctx.ident, err.text);
		return;
	default:
		die("%s", err.text);
	}
}
static char **env0; /* the environment we were started with: only differences are sent */

static void wire_put(char kind, const char *value)
{
	size_t n = strlen(value);
	char *rec = malloc(n + 2);

	if (!rec)
		die("out of memory");
	rec[0] = kind;
	memcpy(rec + 1, value, n + 1);
	if (launch_write_all(wire_fd, rec, n + 2) != 0)
		die("cannot send the wire-up to the plugin: %s", strerror(errno));
	free(rec);
}

/* A record with a descriptor attached (SCM_RIGHTS): the plugin keeps it open in the task
 * (the output directory's lock). The wire-up's descriptor is a socket for that. */
static void wire_put_fd(char kind, int fd)
{
	char rec[2] = {kind, '\0'}, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {rec, sizeof(rec)};
	struct msghdr m = {0};
	struct cmsghdr *c;
	ssize_t n;

	memset(ctl, 0, sizeof(ctl));
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl;
	m.msg_controllen = sizeof(ctl);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	do
		n = sendmsg(wire_fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(rec))
		die("cannot send the output directory's lock to the plugin: %s",
		    n < 0 ? strerror(errno) : "short write");
}

static void wire_snapshot(void)
{
	extern char **environ;
	size_t n = 0, i;

	while (environ[n])
		n++;
	env0 = calloc(n + 1, sizeof(*env0));
	if (!env0)
		die("out of memory");
	for (i = 0; i < n; i++)
		if (!(env0[i] = strdup(environ[i])))
			die("out of memory");
}

static void wire_send_env(void)
{
	extern char **environ;
	size_t i, j;

	for (i = 0; environ[i]; i++) {
		for (j = 0; env0[j] && strcmp(env0[j], environ[i]) != 0; j++)
			;
		if (!env0[j])
			wire_put('E', environ[i]);
	}
}

/* --abort=STATUS MESSAGE: the plugin's watcher, after this rank's command failed, ends the
 * whole step through PMIx (alloc_abort), so the other ranks do not wait for it until their
 * own timeouts; MESSAGE says why (Slurm logs it). The guard bounds it like any wire-up. */
static int abort_step(char **cmd)
{
	struct alloc a;
	struct dp_error err;
	char *end;
	long status;

	errno = 0;
	status = strtol(cmd[0] + 8, &end, 10);
	if (errno || end == cmd[0] + 8 || *end || status < 1 || status > 255 || !cmd[1]) {
		fprintf(stderr, "dptrain-launch: %s: usage: --abort=STATUS (1-255) MESSAGE\n",
			ctx.ident);
		return 2;
	}
	set_step("ending the step");
	ctx.limit_s = LAUNCH_FIRST_LIMIT;
	guard_start();
	memset(&a, 0, sizeof(a));
	if (alloc_abort(&a, (int)status, cmd[1], &err) != 0) {
		fprintf(stderr, "dptrain-launch: %s: cannot end the step: %s\n", ctx.ident,
			err.text);
		fflush(NULL);
		_exit(1);
	}
	fflush(NULL);
	_exit(0); /* PMIx's threads are running: no exit handlers */
}

int main(int argc, char **argv)
{
	struct settings st;
	struct alloc a;
	struct ranktable rt;
	struct launch_paths paths;
	struct launch_exec ex;
	struct dp_error err;
	char header[4096], train_log[LAUNCH_PATH_MAX + 16], envlog[LAUNCH_PATH_MAX + 16];
	char gpu_self[512], gpu_all[1024], sched_log[LAUNCH_PATH_MAX + 16];
	const char *trainer, *restart;
	char **cmd;
	char when[LAUNCH_TIME_MAX];
	int i, used, tee, rc;

	/* Before anything else, so that every thread (PMIx's) inherits it. */
	sigemptyset(&ctx.stop);
	sigaddset(&ctx.stop, SIGTERM);
	sigaddset(&ctx.stop, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &ctx.stop, NULL);
	early_ident();
	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--version") == 0) {
		printf("dptrain-launch %s\n", DPTRAIN_VERSION);
		return 0;
	}
	cmd = argv + 1;
	if (cmd[0] && strncmp(cmd[0], "--wire-up=", 10) == 0) {
		char *end;
		long fd;
		errno = 0;
		fd = strtol(cmd[0] + 10, &end, 10);
		if (errno || end == cmd[0] + 10 || *end || fd < 3 || fd > 1 << 20 ||
		    fcntl((int)fd, F_GETFD) < 0) {
			fprintf(stderr, "dptrain-launch: %s: %s: not an open descriptor\n",
				ctx.ident, cmd[0]);
			return 2;
		}
		wire_fd = (int)fd;
		fcntl(wire_fd, F_SETFD, FD_CLOEXEC);
		wire_snapshot();
		cmd++;
	}
	if (cmd[0] && strncmp(cmd[0], "--abort=", 8) == 0)
		return abort_step(cmd);
	if (cmd[0] && strcmp(cmd[0], "--") == 0)
		cmd++;
	if (!cmd[0]) {
		fprintf(stderr, "dptrain-launch: %s: no command given\n%s", ctx.ident, usage_text);
		return 2;
	}

	/* The guard covers everything, reading the config too (a config on a hung file system). */
	set_step("reading the job config");
	ctx.limit_s = LAUNCH_FIRST_LIMIT;
	guard_start();
	read_settings(&st);
	if (st.ms_dynamic && cfg_is_trainer_command(cmd[0]))
		die("mindspore.dynamic_cluster is for MindSpore scripts: the bundled trainer would "
		    "also run as the scheduler; remove it from the config");
	pthread_mutex_lock(&ctx.lock);
	ctx.limit_s = 2 * st.opts.timeout_s + 30;
	pthread_mutex_unlock(&ctx.lock);
	if (wire_fd >= 0) {
		char v[32];
		snprintf(v, sizeof(v), "%d", ctx.limit_s);
		wire_put('D', v);
	}
	set_step("discovering the allocation");

#if defined(HAVE_PMIX) && PMIX_VERSION_MAJOR < 5
	/* PMIx 4: a second PMIx client in this rank (MPI_Init of the command) needs the hash
	 * store. PMIx 5's default store takes a second client, and OpenMPI 5 needs the node-level
	 * data the hash store lacks (dptrain(8), VERSIONS): left as it is there, as the plugin
	 * does. */
	if (getenv("PMIX_RANK") && setenv("PMIX_MCA_gds", "hash", 0) != 0)
		die("cannot set PMIX_MCA_gds: %s", strerror(errno));
#endif

	err.text[0] = '\0';
	memset(&a, 0, sizeof(a));
	ctx.alloc = &a;
	rc = alloc_discover(&a, &st.opts, &err);
	ctx.session_open = a.pmix != NULL;
	if (rc != 0)
		die("%s", err.text);
	pthread_mutex_lock(&ctx.lock);
	snprintf(ctx.ident, sizeof(ctx.ident), "rank %d on %s", a.rank, a.ranks[a.rank].host);
	pthread_mutex_unlock(&ctx.lock);
	/* srun --dptrain made the step's secret; without it in the task's environment and
	 * without PMIx to hand one over (alloc_pmix.c does), a store would let in anyone. */
	if (wire_fd >= 0 && a.source != ALLOC_SRC_PMIX &&
	    !(getenv(DP_SECRET_ENV) && *getenv(DP_SECRET_ENV)))
		die("the task's environment lacks the step's secret %s, which srun --dptrain made: "
		    "the step was started with --export=NONE, or inside a job submitted with "
		    "sbatch --export=NONE (SBATCH_EXPORT=NONE), whose sruns inherit it. Without "
		    "PMIx the ranks have no private way to agree on one, and a rendezvous without "
		    "it would let any user of these nodes join this job: start the step with "
		    "--mpi=pmix (the secret then goes through PMIx), or with --export=ALL",
		    DP_SECRET_ENV);
	rc = alloc_meet(&a, &st.opts, &err);
	ctx.session_open = a.pmix != NULL || a.store != NULL;
	if (rc != 0)
		die("%s", err.text);
	if (st.opts.verbose)
		fprintf(stderr,
			"dptrain-launch: %s: allocation from %s: %d ranks on %d nodes, local rank "
			"%d of %d, GPU %d, master %s:%d\n",
			ctx.ident, alloc_source_name(a.source), a.world_size, a.node_count,
			a.local_rank, a.local_size, a.ranks[a.rank].gpu.index, a.master_addr,
			a.master_port);

	set_step("writing the output directory");
	memset(&rt, 0, sizeof(rt));
	if (alloc_rank_table(&a, &rt, &err) != 0 || setup_paths(&st, &a, &rt, &paths, &err) != 0)
		die("%s", err.text);
	/* The lock dptrain-run holds for its ranks is rank 0's alone to pass on: another rank's
	 * command (and whatever it leaves behind) must not hold the directory. */
	if (a.rank != 0 && getenv("DPTRAIN_LOCK_FD")) {
		int lfd;
		if (rt_env_int("DPTRAIN_LOCK_FD", 3, INT_MAX, &lfd, &err) == 1)
			close(lfd);
		unsetenv("DPTRAIN_LOCK_FD");
	}
	/* Rank 0 takes the directory first; with PMIx no rank writes there before it has. */
	if (a.rank == 0) {
		safe_outdir(&st, &a, &rt, &paths);
		lock_outdir(&a, paths.outdir);
	}
	set_step("waiting for rank 0 to take the output directory");
	if (alloc_gate(&a, st.opts.timeout_s, &err) != 0)
		die("%s", err.text);
	set_step("writing the output directory");
	if (a.rank != 0)
		safe_outdir(&st, &a, &rt, &paths);
	if (launch_mkdir_p(paths.devdir, &err) != 0 || launch_dir_owned(paths.devdir, &err) != 0)
		die("%s", err.text);
	/* TORCHELASTIC_ERROR_FILE: one from an earlier run is not this run's root cause */
	if (unlink(paths.errfile) != 0 && errno != ENOENT)
		die("cannot remove %s, an earlier run's error file: %s", paths.errfile,
		    strerror(errno));
	/* Every node needs a copy where the output directory is node-local (alloc.h). */
	rc = alloc_write_table(&a, &rt, paths.rank_table, &err);
	if (rc < 0)
		die("%s", err.text);
	if (rc > 0 && st.opts.verbose)
		fprintf(stderr, "dptrain-launch: %s: wrote %s\n", ctx.ident, paths.rank_table);
	if (launch_env_export(&a, &rt, &paths, &err) != 0 ||
	    (st.ms_dynamic && launch_env_mindspore(&a, st.opts.timeout_s, &err) != 0))
		die("%s", err.text);
	snprintf(envlog, sizeof(envlog), "%s/env.log", paths.devdir);
	if (launch_env_log(envlog, &err) != 0)
		die("%s", err.text);

	set_step("waiting for every node's rank table");
	if (alloc_sync(&a, paths.rank_table, &rt, st.opts.timeout_s, &err) != 0)
		die("%s", err.text);
	set_step("finishing the wire-up");
	alloc_finish(&a);
	ctx.session_open = 0;
	guard_stop();

	memset(&ex, 0, sizeof(ex));
	ex.argv = cmd;
	ex.ident = ctx.ident;
	trainer = getenv("DPTRAIN_TRAINER");
	if (strcmp(cmd[0], "dptrain") == 0 && trainer && *trainer)
		ex.path = trainer;
	/* The bundled trainer takes SIGTERM/SIGUSR1 from its first instruction: hand it the
	 * mask, and a request that came meanwhile, pending. Any other command gets them as it
	 * would without us. */
	ex.stop = &ctx.stop;
	ex.pass_stop = cfg_is_trainer_command(cmd[0]);
	if (st.run_in_device_dir)
		ex.cwd = paths.devdir;
	/* msrun starts the scheduler where the master is: rank 0's node */
	if (st.ms_dynamic && a.rank == 0) {
		snprintf(sched_log, sizeof(sched_log), "%s/scheduler.log", paths.outdir);
		ex.sched_log = sched_log;
	}
	tee = st.console == CFG_CONSOLE_ALL || (st.console == CFG_CONSOLE_RANK0 && a.rank == 0);
	/* The bundled trainer takes DPTRAIN_GPU; any other command may index by LOCAL_RANK. */
	gpu_self[0] = gpu_all[0] = '\0';
	if (!ex.pass_stop &&
	    alloc_gpu_advice(&a, gpu_self, sizeof(gpu_self), gpu_all, sizeof(gpu_all)) != 0)
		die("out of memory");
	if (gpu_all[0])
		fprintf(stderr, "dptrain-launch: %s: warning: %s\n", ctx.ident, gpu_all);
	if (st.per_rank_logs) {
		snprintf(train_log, sizeof(train_log), "%s/train.log", paths.devdir);
		ex.train_log = train_log;
		ex.tee = tee;
		launch_utc_now(when);
		restart = getenv("SLURM_RESTART_COUNT");
		used = snprintf(
		    header, sizeof(header),
		    "=== dptrain-launch %s: rank %d of %d on %s (node %d, local rank %d), "
		    "job %s step %s, restart %s, source %s:",
		    when, a.rank, a.world_size, a.ranks[a.rank].host, a.node_rank, a.local_rank,
		    a.job_id, a.step_id, restart ? restart : "0", alloc_source_name(a.source));
		for (i = 0; cmd[i] && used > 0 && used < (int)sizeof(header) - 8; i++)
			used +=
			    snprintf(header + used, sizeof(header) - (size_t)used, " %s", cmd[i]);
		const char *warnings[] = {gpu_self, gpu_all};
		for (i = 0; i < 2; i++)
			if (warnings[i][0] && used > 0 && used < (int)sizeof(header))
				used += snprintf(header + used, sizeof(header) - (size_t)used,
						 "\ndptrain-launch: %s: warning: %s", ctx.ident,
						 warnings[i]);
		ex.header = header;
	}
	rt_free(&rt);
	alloc_free(&a);
	if (wire_fd < 0) {
		/* the command holds the output directory's lock until it ends */
		if (lock_fd >= 0 && fcntl(lock_fd, F_SETFD, 0) != 0)
			die("cannot pass on the output directory's lock: %s", strerror(errno));
		return launch_exec(&ex);
	}
	/* The plugin's helper: the task runs the command; say what it needs. */
	wire_send_env();
	if (ex.train_log) {
		int fd = launch_open_log(&ex);
		if (fd < 0)
			return 1;
		close(fd);
		wire_put('L', ex.train_log);
		wire_put('T', ex.tee ? "1" : "0");
	}
	wire_put('S', ex.pass_stop ? "1" : "0");
	if (ex.cwd)
		wire_put('C', ex.cwd);
	if (ex.sched_log)
		wire_put('M', ex.sched_log);
	if (lock_fd >= 0)
		wire_put_fd('K', lock_fd);
	wire_put('Z', "");
	close(wire_fd);
	return 0;
}
