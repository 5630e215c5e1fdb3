/* wireup.c — dptrain-launch's wire-up, phase by phase (wireup.h): the guard thread, die(),
 * the job config, discovery, the meeting, the output directory and its gate, the rank table,
 * the environment, env.log, the sync and the finish. What happens after (the exec, the
 * records to the plugin) is handover.c's; the allocation itself alloc*.c's. */
#include "launcher/wireup.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/envint.h"
#include "common/error.h"
#include "common/mkdir_p.h"
#include "common/secret.h"
#include "common/warn.h"
#include "task/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>
#ifdef HAVE_PMIX
#include <pmix_version.h>
#endif

void wireup_init(struct wireup *w)
{
	const char *names[] = {ENV_PMIX_RANK, ENV_SLURM_PROCID, ENV_RANK};
	char host[RT_HOST_MAX];
	const char *r = NULL;
	size_t i;

	memset(w, 0, sizeof(*w));
	/* Before anything else, so that every thread (PMIx's) inherits it. */
	sigemptyset(&w->stop);
	sigaddset(&w->stop, SIGTERM);
	sigaddset(&w->stop, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &w->stop, NULL);
	pthread_mutex_init(&w->lock, NULL);
	w->lock_fd = w->wire_fd = w->sigfd = w->wakefd = -1;
	/* Before discovery: the rank as the environment tells it, for early messages. */
	for (i = 0; i < sizeof(names) / sizeof(names[0]) && !r; i++)
		r = getenv(names[i]);
	alloc_hostname(host);
	snprintf(w->ident, sizeof(w->ident), "rank %s on %s", r && strlen(r) < 12 ? r : "?", host);
}

void wireup_die(struct wireup *w, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "dptrain-launch: %s: ", w->ident);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	/* With a PMIx session open, end the whole step (PMIx_Abort), with the store open tell
	 * every rank (alloc_abort): peers stuck waiting for this rank end now instead of at their
	 * own timeout, and srun returns. The library's threads are still running then: leave
	 * without exit handlers. */
	if (w->session_open) {
		char msg[1024];
		struct dp_error aerr;
		int n = snprintf(msg, sizeof(msg), "dptrain-launch: %s: ", w->ident);
		va_start(ap, fmt);
		if (n > 0 && (size_t)n < sizeof(msg))
			vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
		va_end(ap);
		fflush(NULL);
		if (alloc_abort(&w->a, 1, msg, &aerr) != 0)
			fprintf(stderr, "dptrain-launch: %s: %s\n", w->ident, aerr.text);
		fflush(NULL);
		_exit(1);
	}
	exit(1);
}

void wireup_set_step(struct wireup *w, const char *step)
{
	pthread_mutex_lock(&w->lock);
	snprintf(w->step, sizeof(w->step), "%s", step);
	pthread_mutex_unlock(&w->lock);
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
	struct wireup *w = arg;
	struct pollfd fds[2] = {{.fd = w->sigfd, .events = POLLIN},
				{.fd = w->wakefd, .events = POLLIN}};
	struct signalfd_siginfo si;
	char msg[768];
	int sig = 0, n;

	for (;;) {
		double end, left_ms;
		pthread_mutex_lock(&w->lock); /* the limit grows once the config is read */
		end = w->start + w->limit_s;
		pthread_mutex_unlock(&w->lock);
		left_ms = (end - now_s()) * 1000;
		if (left_ms < 1)
			break;
		n = poll(fds, 2, left_ms > 60000 ? 60000 : (int)left_ms);
		if (n < 0 && errno != EINTR)
			break; /* cannot wait: treat as the deadline, the message says so */
		if (n <= 0)
			continue;
		if (fds[1].revents)
			return NULL; /* guard_stop: the wire-up is done */
		if (fds[0].revents && read(w->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
			sig = (int)si.ssi_signo;
			break;
		}
	}
	pthread_mutex_lock(&w->lock);
	if (sig > 0)
		n = snprintf(msg, sizeof(msg),
			     "dptrain-launch: %s: %s while %s: stopping; nothing was trained "
			     "yet, so there is nothing to save\n",
			     w->ident, sig == SIGTERM ? "SIGTERM" : "SIGUSR1", w->step);
	else
		n = snprintf(msg, sizeof(msg),
			     "dptrain-launch: %s: still %s after %d s, past every timeout; "
			     "giving up\n",
			     w->ident, w->step, w->limit_s);
	pthread_mutex_unlock(&w->lock);
	(void)!write(STDERR_FILENO, msg,
		     n < 0		       ? 0
		     : (size_t)n < sizeof(msg) ? (size_t)n
					       : sizeof(msg) - 1);
	_exit(sig > 0 ? 4 : 1); /* no exit handlers: PMIx's threads are running */
}

int wireup_guard_start(struct wireup *w, struct dp_error *err)
{
	int e;

	w->sigfd = signalfd(-1, &w->stop, SFD_CLOEXEC);
	w->wakefd = eventfd(0, EFD_CLOEXEC);
	if (w->sigfd < 0 || w->wakefd < 0)
		return errprintf(err, "cannot wait for stop signals: %s", strerror(errno));
	w->start = now_s();
	e = pthread_create(&w->guard, NULL, guard_main, w);
	if (e != 0)
		return errprintf(err, "cannot start a thread: %s", strerror(e));
	w->guard_running = 1;
	return 0;
}

/* Before the exec: a stop signal from now on stays pending, for the command to take. One
 * that came just before it may already have been taken by the guard, which then ends the
 * rank with status 4 as during the wire-up. */
int wireup_guard_stop(struct wireup *w, struct dp_error *err)
{
	uint64_t one = 1;

	if (!w->guard_running)
		return 0;
	if (write(w->wakefd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		return errprintf(err, "cannot stop the guard thread: %s", strerror(errno));
	pthread_join(w->guard, NULL);
	w->guard_running = 0;
	close(w->sigfd);
	close(w->wakefd);
	w->sigfd = w->wakefd = -1;
	return 0;
}

/* The guard's limit, which it reads at its next wake-up. */
static void set_limit(struct wireup *w, int limit_s)
{
	pthread_mutex_lock(&w->lock);
	w->limit_s = limit_s;
	pthread_mutex_unlock(&w->lock);
}

int wireup_to_plugin(struct wireup *w, int fd, struct dp_error *err)
{
	w->wire_fd = fd;
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	return launch_wire_snapshot(&w->env0, err);
}

static int env_flag(const char *name)
{
	const char *s = getenv(name);
	return s && *s && strcmp(s, "0") != 0;
}

/* The job config's part of the settings (cfg_load_launch: what the launch reads). */
static int read_config(struct wireup_settings *st, const char *cfg_path, struct dp_error *err)
{
	struct cfg c;
	int rv = 0;

	memset(&c, 0, sizeof(c));
	if (cfg_load_launch(&c, cfg_path, err) != 0)
		return errprefix(err, ENV_DPTRAIN_CONFIG);
	if (c.output.dir && c.output.dir[0])
		snprintf(st->outdir, sizeof(st->outdir), "%s", c.output.dir);
	st->outdir_given = c.output.dir_given;
	st->timeout_given = c.timeouts.rendezvous_given;
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
		rv = errprintf(err,
			       "DPTRAIN_CONFIG: network.interface '%.40s...' is longer than an "
			       "interface name can be",
			       c.network.interface);
	cfg_free(&c);
	return rv;
}

/* The site's limit (plugstack.conf max_timeout=): a timeout asked for above it fails the rank,
 * naming where it came from; the default is lowered to it. */
static int check_max_timeout(struct wireup_settings *st, struct dp_error *err)
{
	int max, rc = dp_env_int(ENV_DPTRAIN_MAX_TIMEOUT, 1, INT_MAX, &max, err);

	if (rc <= 0)
		return rc;
	if (st->opts.timeout_s <= max)
		return 0;
	if (!st->timeout_given) {
		st->opts.timeout_s = max;
		return 0;
	}
	return errprintf(err,
			 "a rendezvous timeout of %d s (%s) is more than this site allows: at most "
			 "%d s (max_timeout= in plugstack.conf, see dptrain(8))",
			 st->opts.timeout_s,
			 getenv(ENV_DPTRAIN_TIMEOUT) && *getenv(ENV_DPTRAIN_TIMEOUT)
			     ? ENV_DPTRAIN_TIMEOUT
			     : "the job config's timeouts.rendezvous_s",
			 max);
}

/* What the job config says, or the defaults without one, then the environment's word. */
static int read_settings(struct wireup_settings *st, struct dp_error *err)
{
	const char *cfg_path = getenv(ENV_DPTRAIN_CONFIG), *s;
	int v, rc;

	memset(st, 0, sizeof(*st));
	snprintf(st->outdir, sizeof(st->outdir), "%s", LAUNCH_DEFAULT_OUTDIR);
	st->per_rank_logs = 1;
	st->console = CFG_CONSOLE_RANK0;
	st->opts.timeout_s = LAUNCH_DEFAULT_TIMEOUT;
	st->opts.stall_rank = -1;
	st->opts.verbose = env_flag(ENV_DPTRAIN_VERBOSE);
	if (cfg_path && *cfg_path && read_config(st, cfg_path, err) != 0)
		return -1;
	s = getenv(ENV_DPTRAIN_OUTPUT_DIR);
	if (s && *s)
		snprintf(st->outdir, sizeof(st->outdir), "%s", s);
	else if (!st->outdir_given && (s = getenv(ENV_DPTRAIN_DEFAULT_OUTPUT_DIR)) && *s)
		snprintf(st->outdir, sizeof(st->outdir), "%s", s); /* the site's default */
	rc = dp_env_int(ENV_DPTRAIN_TIMEOUT, 1, INT_MAX, &v, err);
	if (rc < 0)
		return -1;
	if (rc == 1)
		st->opts.timeout_s = v, st->timeout_given = 1;
	if (st->opts.timeout_s < 1)
		st->opts.timeout_s = 1;
	if (check_max_timeout(st, err) != 0)
		return -1;
	s = getenv(ENV_DPTRAIN_IFACE);
	st->opts.iface = s && *s ? s : st->iface[0] ? st->iface : NULL;
	st->opts.hccn_conf = st->hccn_conf[0] ? st->hccn_conf : NULL;
	if (alloc_source_from_name(getenv(ENV_DPTRAIN_SOURCE), &st->opts.source) != 0)
		return errprintf(err, "DPTRAIN_SOURCE='%s' is not one of pmix, slurm, env, auto",
				 getenv(ENV_DPTRAIN_SOURCE));
	if (dp_env_int(ENV_DPTRAIN_TEST_STALL_RANK, 0, INT_MAX, &st->opts.stall_rank, err) < 0)
		return -1;
	st->opts.stall_s = 3600;
	if (dp_env_int(ENV_DPTRAIN_TEST_STALL_SECONDS, 0, INT_MAX, &st->opts.stall_s, err) < 0)
		return -1;
	return 0;
}

int wireup_start(struct wireup *w, struct dp_error *err)
{
	/* The guard covers everything, reading the config too (a config on a hung file
	 * system). */
	wireup_set_step(w, "reading the job config");
	w->limit_s = WIREUP_FIRST_LIMIT;
	if (wireup_guard_start(w, err) != 0 || read_settings(&w->st, err) != 0)
		return -1;
	if (w->st.ms_dynamic && cfg_is_trainer_command(w->cmd[0]))
		return errprintf(err, "mindspore.dynamic_cluster is for MindSpore scripts: the "
				      "bundled trainer would also run as the scheduler; remove it "
				      "from the config");
	set_limit(w, 2 * w->st.opts.timeout_s + 30);
	if (w->wire_fd >= 0) {
		char v[WIRE_LIMIT_MAX];
		wire_limit_value(v, w->limit_s);
		if (launch_wire_put(w->wire_fd, WIRE_LIMIT, v, err) != 0)
			return -1;
	}
	return 0;
}

int wireup_discover(struct wireup *w, struct dp_error *err)
{
	int rc;

	wireup_set_step(w, "discovering the allocation");
#if defined(HAVE_PMIX) && PMIX_VERSION_MAJOR < 5
	/* PMIx 4: a second PMIx client in this rank (MPI_Init of the command) needs the hash
	 * store. PMIx 5's default store takes a second client, and OpenMPI 5 needs the node-level
	 * data the hash store lacks (dptrain(8), VERSIONS): left as it is there, as the plugin
	 * does. */
	if (getenv(ENV_PMIX_RANK) && setenv(ENV_PMIX_MCA_gds, "hash", 0) != 0)
		return errprintf(err, "cannot set PMIX_MCA_gds: %s", strerror(errno));
#endif
	err->text[0] = '\0';
	memset(&w->a, 0, sizeof(w->a));
	rc = alloc_discover(&w->a, &w->st.opts, err);
	w->session_open = w->a.pmix != NULL;
	if (rc != 0)
		return -1;
	pthread_mutex_lock(&w->lock);
	snprintf(w->ident, sizeof(w->ident), "rank %d on %s", w->a.rank,
		 w->a.ranks[w->a.rank].host);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

int wireup_meet(struct wireup *w, struct dp_error *err)
{
	const struct alloc *a = &w->a;
	int rc;

	/* srun --dptrain made the step's secret; without it in the task's environment and
	 * without PMIx to hand one over (alloc_pmix.c does), a store would let in anyone. */
	if (w->wire_fd >= 0 && a->source != ALLOC_SRC_PMIX &&
	    !(getenv(ENV_DPTRAIN_STORE_SECRET) && *getenv(ENV_DPTRAIN_STORE_SECRET)))
		return errprintf(
		    err,
		    "the task's environment lacks the step's secret %s, which srun --dptrain made: "
		    "the step was started with --export=NONE, or inside a job submitted with "
		    "sbatch --export=NONE (SBATCH_EXPORT=NONE), whose sruns inherit it. Without "
		    "PMIx the ranks have no private way to agree on one, and a rendezvous without "
		    "it would let any user of these nodes join this job: start the step with "
		    "--mpi=pmix (the secret then goes through PMIx), or with --export=ALL",
		    ENV_DPTRAIN_STORE_SECRET);
	rc = alloc_meet(&w->a, &w->st.opts, err);
	w->session_open = a->pmix != NULL || a->store != NULL;
	if (rc != 0)
		return -1;
	if (w->st.opts.verbose)
		fprintf(stderr,
			"dptrain-launch: %s: allocation from %s: %d ranks on %d nodes, local rank "
			"%d of %d, GPU %d, master %s:%d\n",
			w->ident, alloc_source_name(a->source), a->world_size, a->node_count,
			a->local_rank, a->local_size, a->ranks[a->rank].gpu.index, a->master_addr,
			a->master_port);
	return 0;
}

/* N of the rank's device<N> directory: its rank, or its device (output.device_dirs) */
static int devdir_number(const struct wireup *w)
{
	return w->st.device_dirs == CFG_DEVDIRS_DEVICE ? w->rt.ranks[w->a.rank].device_id
						       : w->a.rank;
}

/* The rank's output directory (the pattern with %j %s %n %u expanded) and device directory:
 * device<RANK>, or device<DEVICE_ID> (output.device_dirs "device", as MindSpore's scripts
 * name them), which repeats on every node: refused on several nodes unless %n gives each
 * node its own directory. */
static int setup_paths(struct wireup *w, struct dp_error *err)
{
	const struct alloc *a = &w->a;
	char outdir[LAUNCH_PATH_MAX];
	int per_node = strstr(w->st.outdir, "%n") != NULL;

	if (w->st.device_dirs == CFG_DEVDIRS_DEVICE && a->node_count > 1 && !per_node)
		return errprintf(
		    err,
		    "output.device_dirs \"device\" names directories "
		    "device<DEVICE_ID>, which repeat on each of the %d nodes: put %%n "
		    "(the node's name) in output.dir, e.g. \"dptrain.%%j.%%s/%%n\", or "
		    "use \"rank\"",
		    a->node_count);
	if (launch_outdir_expand(w->st.outdir, a->job_id, a->step_id, a->ranks[a->rank].host,
				 outdir, err) != 0)
		return -1;
	return launch_paths_init(&w->paths, outdir, devdir_number(w), err);
}

/* The output directory made, and checked so that no other user can swap it or any directory
 * above it (launch_dir_safe); from here on every path is the resolved one. */
static int safe_outdir(struct wireup *w, struct dp_error *err)
{
	char canon[LAUNCH_PATH_MAX];

	if (dp_mkdir_p(w->paths.outdir, 0755, err) != 0 ||
	    launch_dir_safe(w->paths.outdir, canon, err) != 0 ||
	    launch_paths_init(&w->paths, canon, devdir_number(w), err) != 0)
		return -1;
	return 0;
}

/* Rank 0: take the output directory before any rank writes in it; another live job's
 * directory ends the step with who holds it. */
static int lock_outdir(struct wireup *w, struct dp_error *err)
{
	const struct alloc *a = &w->a;
	char who[400], host[256], when[LAUNCH_TIME_MAX];

	launch_utc_now(when);
	snprintf(host, sizeof(host), "%s", a->ranks[a->rank].host);
	snprintf(who, sizeof(who), "job %s step %s, rank 0 on %s, pid %ld, since %s", a->job_id,
		 a->step_id, host, (long)getpid(), when);
	switch (launch_outdir_lock(w->paths.outdir, who, &w->lock_fd, err)) {
	case 0:
		return 0;
	case 1:
		dp_warn("dptrain-launch", w->ident, "%s", err->text);
		return 0;
	default:
		return -1;
	}
}

int wireup_outdir(struct wireup *w, struct dp_error *err)
{
	wireup_set_step(w, "writing the output directory");
	memset(&w->rt, 0, sizeof(w->rt));
	if (alloc_rank_table(&w->a, &w->rt, err) != 0 || setup_paths(w, err) != 0)
		return -1;
	/* The lock dptrain-run holds for its ranks is rank 0's alone to pass on: another rank's
	 * command (and whatever it leaves behind) must not hold the directory. */
	if (w->a.rank != 0 && getenv(ENV_DPTRAIN_LOCK_FD)) {
		struct dp_error ignored;
		int lfd;
		if (dp_env_int(ENV_DPTRAIN_LOCK_FD, 3, INT_MAX, &lfd, &ignored) == 1)
			close(lfd);
		unsetenv(ENV_DPTRAIN_LOCK_FD);
	}
	/* Rank 0 takes the directory first; with PMIx no rank writes there before it has. */
	if (w->a.rank == 0 && (safe_outdir(w, err) != 0 || lock_outdir(w, err) != 0))
		return -1;
	return 0;
}

int wireup_gate(struct wireup *w, struct dp_error *err)
{
	wireup_set_step(w, "waiting for rank 0 to take the output directory");
	if (alloc_gate(&w->a, w->st.opts.timeout_s, err) != 0)
		return -1;
	wireup_set_step(w, "writing the output directory");
	if (w->a.rank != 0 && safe_outdir(w, err) != 0)
		return -1;
	if (dp_mkdir_p(w->paths.devdir, 0755, err) != 0 ||
	    launch_dir_owned(w->paths.devdir, err) != 0)
		return -1;
	/* TORCHELASTIC_ERROR_FILE: one from an earlier run is not this run's root cause */
	if (unlink(w->paths.errfile) != 0 && errno != ENOENT)
		return errprintf(err, "cannot remove %s, an earlier run's error file: %s",
				 w->paths.errfile, strerror(errno));
	return 0;
}

int wireup_rank_table(struct wireup *w, struct dp_error *err)
{
	/* Every node needs a copy where the output directory is node-local (alloc.h). */
	int rc = alloc_write_table(&w->a, &w->rt, w->paths.rank_table, err);

	if (rc < 0)
		return -1;
	if (rc > 0 && w->st.opts.verbose)
		fprintf(stderr, "dptrain-launch: %s: wrote %s\n", w->ident, w->paths.rank_table);
	return 0;
}

int wireup_environment(struct wireup *w, struct dp_error *err)
{
	if (launch_env_export(&w->a, &w->rt, &w->paths, err) != 0 ||
	    (w->st.ms_dynamic && launch_env_mindspore(&w->a, w->st.opts.timeout_s, err) != 0))
		return -1;
	return 0;
}

int wireup_env_log(struct wireup *w, struct dp_error *err)
{
	char envlog[LAUNCH_PATH_MAX + 16];

	snprintf(envlog, sizeof(envlog), "%s/env.log", w->paths.devdir);
	return launch_env_log(envlog, err);
}

int wireup_sync(struct wireup *w, struct dp_error *err)
{
	wireup_set_step(w, "waiting for every node's rank table");
	return alloc_sync(&w->a, w->paths.rank_table, &w->rt, w->st.opts.timeout_s, err);
}

int wireup_finish(struct wireup *w, struct dp_error *err)
{
	wireup_set_step(w, "finishing the wire-up");
	alloc_finish(&w->a);
	w->session_open = 0;
	return wireup_guard_stop(w, err);
}

void wireup_abort_step(struct wireup *w, int status, const char *msg)
{
	struct alloc a;
	struct dp_error err;

	wireup_set_step(w, "ending the step");
	w->limit_s = WIREUP_FIRST_LIMIT;
	if (wireup_guard_start(w, &err) != 0) {
		fprintf(stderr, "dptrain-launch: %s: %s\n", w->ident, err.text);
		exit(1);
	}
	memset(&a, 0, sizeof(a));
	if (alloc_abort(&a, status, msg, &err) != 0) {
		fprintf(stderr, "dptrain-launch: %s: cannot end the step: %s\n", w->ident,
			err.text);
		fflush(NULL);
		_exit(1);
	}
	fflush(NULL);
	_exit(0); /* PMIx's threads are running: no exit handlers */
}
