/* wireup.h — one rank's wire-up as dptrain-launch runs it, phase by phase: the job config read
 * under a guard thread, the allocation discovered and met, the output directory taken, the
 * rank table, the environment and env.log written, the ranks synced, then the command exec'd or,
 * for the SPANK plugin, the records of task/wire.h sent back. Each phase returns -1 with err
 * on failure; wireup_die() then ends the rank, and the whole step where a PMIx session or the
 * launchers' store is open. dptrain-launch's main parses its arguments and calls them in
 * order; a test can call them too. */
#ifndef DPTRAIN_WIREUP_H
#define DPTRAIN_WIREUP_H

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "common/error.h"
#include "config/config.h"
#include "launcher/alloc.h"
#include "launcher/launcher.h"
#include "ranktable/ranktable.h"

/* How long reading the job config may take, before the guard knows the wire-up's limit. */
#define WIREUP_FIRST_LIMIT 60

/* What the job config says, or the defaults without one, with the environment's overrides. */
struct wireup_settings {
	char outdir[LAUNCH_PATH_MAX]; /* pattern */
	int outdir_given;	      /* the job config names output.dir */
	int timeout_given;	      /* the config or DPTRAIN_TIMEOUT names the timeout */
	int per_rank_logs;
	enum cfg_console console;
	enum cfg_device_dirs device_dirs;
	int run_in_device_dir;
	int ms_dynamic;			 /* mindspore.dynamic_cluster */
	char hccn_conf[LAUNCH_PATH_MAX]; /* mindspore.hccn_conf, or "" */
	char iface[64];			 /* network.interface, or "" */
	struct alloc_opts opts;
};

/* The process's one context: who we are for messages, what we are doing (for the guard's
 * messages), whether a PMIx session or the store is open, and what the phases made. The guard
 * thread reads ident, step and limit_s: lock. */
struct wireup {
	pthread_mutex_t lock;
	char ident[RT_HOST_MAX + 64]; /* "rank 3 on n2" */
	char step[128];
	int limit_s;	  /* the guard's: from start, WIREUP_FIRST_LIMIT until the config */
	double start;	  /* now_s() when the guard started */
	int session_open; /* PMIx, or the launchers' store (alloc.h) */
	sigset_t stop;	  /* SIGTERM, SIGUSR1: blocked from wireup_init on */
	pthread_t guard;  /* takes them, and ends a wire-up that outlives every timeout */
	int guard_running;
	int sigfd, wakefd; /* the guard's: a signalfd for stop, an eventfd to end it */

	char **cmd; /* the command, as given */
	struct wireup_settings st;
	struct alloc a;
	struct ranktable rt;
	struct launch_paths paths;
	int lock_fd; /* rank 0: the output directory's lock (launch_outdir_lock), or -1 */
	int wire_fd; /* --wire-up=FD: the plugin's socket, or -1 */
	char **env0; /* with wire_fd: the environment we started with (only changes are sent) */

	/* the command's launch (wireup_command) */
	struct launch_exec ex;
	char header[4096], train_log[LAUNCH_PATH_MAX + 16], sched_log[LAUNCH_PATH_MAX + 16];
	char gpu_self[512], gpu_all[1024];
};

/* Blocks SIGTERM and SIGUSR1 (call first in main, so that every thread, PMIx's too, inherits
 * the mask) and sets ident from the environment, for early messages. */
void wireup_init(struct wireup *w);

/* Say what went wrong ("dptrain-launch: rank 3 on n2: ...") and end the rank: with a PMIx
 * session open the whole step (PMIx_Abort), with the store open every rank is told; then
 * _exit(1) (the library's threads run: no exit handlers), else exit(1). */
void wireup_die(struct wireup *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* What we are doing now, for the guard's messages. */
void wireup_set_step(struct wireup *w, const char *step);

/* The guard: a thread that takes SIGTERM/SIGUSR1 and ends the rank (status 4) on one, or
 * ends a wire-up that is still running after limit_s seconds (status 1), each with a message
 * naming the step. Started by wireup_start, stopped by wireup_finish; wireup_guard_stop
 * returns -1 with err when the thread cannot be told. */
int wireup_guard_start(struct wireup *w, struct dp_error *err);
int wireup_guard_stop(struct wireup *w, struct dp_error *err);

/* --wire-up=FD: answer the plugin on fd (made close-on-exec) instead of exec'ing the command;
 * the environment is remembered now, so that only what the wire-up changes is sent. */
int wireup_to_plugin(struct wireup *w, int fd, struct dp_error *err);

/* The phases, in order. */

/* The guard started (reading the config is guarded too), the job config and the environment
 * read (w->st), the guard's limit raised to the wire-up's (twice the rendezvous timeout plus
 * 30 s); with the plugin, the first record (the limit and the protocol version) sent. */
int wireup_start(struct wireup *w, struct dp_error *err);
/* alloc_discover: who this rank is; ident names it from here on. */
int wireup_discover(struct wireup *w, struct dp_error *err);
/* alloc_meet, once the step's secret is known to be there where a store needs it. */
int wireup_meet(struct wireup *w, struct dp_error *err);
/* The rank table built, the paths of the output and device directory; rank 0 makes the output
 * directory, checks that nobody else can swap it, and locks it. */
int wireup_outdir(struct wireup *w, struct dp_error *err);
/* alloc_gate: rank 0 has taken the directory; then every rank checks it, makes its device
 * directory and removes an earlier run's error file. */
int wireup_gate(struct wireup *w, struct dp_error *err);
/* alloc_write_table: rank_table.json, by the ranks that write it. */
int wireup_rank_table(struct wireup *w, struct dp_error *err);
/* The variables the command needs exported (launch_env_export, MindSpore's dynamic cluster). */
int wireup_environment(struct wireup *w, struct dp_error *err);
/* device<N>/env.log: the whole environment. */
int wireup_env_log(struct wireup *w, struct dp_error *err);
/* alloc_sync: every node's rank table is there. */
int wireup_sync(struct wireup *w, struct dp_error *err);
/* The PMIx session or store closed, the guard stopped: from here a stop request waits for
 * the command. */
int wireup_finish(struct wireup *w, struct dp_error *err);
/* The command's launch (w->ex): its path, signal mask, directory, train.log and its header,
 * the tee, MindSpore's scheduler; GPU advice printed. Frees the allocation and rank table. */
int wireup_command(struct wireup *w, struct dp_error *err);

/* The end, after wireup_command: exec the command holding the output directory's lock
 * (returns only on failure, with the exit status), or with the plugin send it the records:
 * 0, or 1 when train.log cannot be opened (said on stderr). -1 with err otherwise. */
int wireup_hand_over(struct wireup *w, struct dp_error *err);

/* The records of task/wire.h as the helper sends them (wire_send.c), each 0 or -1 with err. */
/* One record on fd. */
int launch_wire_put(int fd, char kind, const char *value, struct dp_error *err);
/* One record with a descriptor attached (SCM_RIGHTS): the plugin keeps it open in the task. */
int launch_wire_put_fd(int fd, char kind, int desc, struct dp_error *err);
/* A copy of the environment now (*env0, NULL-terminated; free with _snapshot_free) ... */
int launch_wire_snapshot(char ***env0, struct dp_error *err);
void launch_wire_snapshot_free(char **env0);
/* ... and an E record for each variable that is new or changed since. */
int launch_wire_send_env(int fd, char *const *env0, struct dp_error *err);

/* --abort: end the whole step through PMIx (alloc_abort) with status and msg, under the guard;
 * never returns (exit status 0 when PMIx took it, else 1 with the reason on stderr). */
void wireup_abort_step(struct wireup *w, int status, const char *msg) __attribute__((noreturn));

#endif
