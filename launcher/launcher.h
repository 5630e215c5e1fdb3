/* launcher.h — the launcher library's face: what dptrain-launch does once the allocation is
 * known: the output directory, atomic files, the exported environment, per-rank logs and the
 * exec of the command. Shared by dptrain-launch and dptrain-run. Knows nothing about PMIx
 * (launcher/alloc.h does). */
#ifndef DPTRAIN_LAUNCHER_H
#define DPTRAIN_LAUNCHER_H

#include <signal.h>
#include <stddef.h>

#include "common/error.h"
#include "launcher/alloc.h"
#include "ranktable/ranktable.h"

#define LAUNCH_PATH_MAX	       4096
#define LAUNCH_DEFAULT_OUTDIR  "dptrain.%j.%s"
#define LAUNCH_DEFAULT_TIMEOUT 300 /* seconds, as the config's timeouts.rendezvous_s default */

/* --- output directory and files (outdir.c) -------------------------------------------- */

/* Expand %j (job id), %s (step id), %n (node name), %u (this user's name) and %% in an output
 * directory pattern; a relative result is made absolute against the working directory. Any
 * other %-sequence is an error. */
int launch_outdir_expand(const char *pattern, const char *job, const char *step, const char *node,
			 char out[LAUNCH_PATH_MAX], struct dp_error *err);

/* Write a file others read: temporary in the same directory, fsync, rename, fsync dir. */
/* write(2) all of p[0..len), retrying after EINTR and short writes; 0 or -1 (errno). */
int launch_write_all(int fd, const char *p, size_t len);

int launch_write_atomic(const char *path, const char *data, size_t len, unsigned mode,
			struct dp_error *err);
/* A directory the job may keep its files in: a real directory (not a symlink), this user's,
 * not writable by group or others. 0, or -1 with what to do in err. On a shared file system
 * another user could otherwise have made it first, to read or replace the job's files. */
int launch_dir_owned(const char *path, struct dp_error *err);

/* launch_dir_owned, and no other user can make the path lead elsewhere later: along the path
 * with its links resolved, every directory is this user's or root's and lets nobody else
 * rename what is in it (not writable by group or others, or sticky with the entry this
 * user's or root's). canon gets the resolved path, which the job then uses (a link on the way
 * could be replaced; what it led to cannot). 0, or -1 with the directory at fault and what to
 * do in err. */
int launch_dir_safe(const char *path, char canon[LAUNCH_PATH_MAX], struct dp_error *err);

/* This user's name (for %u), or the uid where the name service has none. 0, or -1. */
int launch_user_name(char *out, size_t len);

/* Now, in UTC, as ISO 8601 ("2026-11-26T10:00:00Z"), for the lock's holder line and the
 * header train.log gets at each launch. */
#define LAUNCH_TIME_MAX 32
void launch_utc_now(char out[LAUNCH_TIME_MAX]);

/* The output directory's lock, taken by rank 0 before any rank writes there and held until
 * its command ends: outdir/.dptrain.lock, this user's regular file, flock'ed (shared file
 * systems that have locks see it on every node), holding `who` ("job 12 step 0, rank 0 on
 * n1, pid 42, since ...") for the message of a job that finds it taken. 0: *fd holds it
 * (close-on-exec); 1: the file system has no locks (*fd -1, a warning in err: nothing is
 * checked); -1: in use by another job, or an error, with what to do in err. */
int launch_outdir_lock(const char *outdir, const char *who, int *fd, struct dp_error *err);
/* (A lock that dptrain-run took for its ranks, passed down as descriptor DPTRAIN_LOCK_FD, is
 * taken as this one: the same file, already held by the same open file.) */

/* --- environment (env_export.c) ------------------------------------------------------- */

struct launch_paths {
	char outdir[LAUNCH_PATH_MAX];
	char rank_table[LAUNCH_PATH_MAX]; /* outdir/rank_table.json */
	char devdir[LAUNCH_PATH_MAX];	  /* outdir/device<RANK> */
	char errfile[LAUNCH_PATH_MAX];	  /* devdir/error.json: TORCHELASTIC_ERROR_FILE */
};

int launch_paths_init(struct launch_paths *p, const char *outdir, int rank, struct dp_error *err);

/* Export what the command needs: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK
 * GROUP_RANK GROUP_WORLD_SIZE MASTER_ADDR MASTER_PORT (PyTorch), RANK_TABLE_FILE RANK_ID
 * RANK_SIZE DEVICE_ID (MindSpore; DEVICE_ID is the rank table's device_id), DPTRAIN_RANK_TABLE
 * DPTRAIN_DEVICE_DIR DPTRAIN_OUTPUT_DIR DPTRAIN_SOURCE DPTRAIN_GPU. */
int launch_env_export(const struct alloc *a, const struct ranktable *rt,
		      const struct launch_paths *p, struct dp_error *err);
/* Part of launch_env_export: what frameworks read besides those, each unless the user set it
 * (their value wins): OMP_NUM_THREADS (rt_task_threads), GLOO_SOCKET_IFNAME and
 * NCCL_SOCKET_IFNAME (the interface of this rank's address); and torchrun's
 * TORCHELASTIC_RUN_ID (JOB.STEP), TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
 * TORCHELASTIC_USE_AGENT_STORE (False), TORCHELASTIC_ERROR_FILE (DEVDIR/error.json),
 * ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE. */
/* MindSpore's dynamic cluster, as msrun sets it for a worker (mindspore.dynamic_cluster):
 * MS_ROLE=MS_WORKER, MS_SCHED_HOST (the master's address), MS_SCHED_PORT (MASTER_PORT),
 * MS_WORKER_NUM, MS_NODE_ID (the rank), and MS_TOPO_TIMEOUT (timeout_s) unless the user set
 * it. 0, or -1 with err. */
int launch_env_mindspore(const struct alloc *a, int timeout_s, struct dp_error *err);

int launch_env_frameworks(const struct alloc *a, const struct launch_paths *p,
			  struct dp_error *err);

/* The whole environment, sorted, one VAR=value per line, written atomically to path. */
int launch_env_log(const char *path, struct dp_error *err);

/* --- logs and exec (exec.c) ----------------------------------------------------------- */

struct launch_exec {
	char *const *argv;     /* the command; argv[0] is what the user typed */
	const char *path;      /* run this file instead of looking argv[0] up in PATH, or NULL */
	const char *train_log; /* append stdout+stderr here, or NULL to leave them alone */
	int tee;	       /* with train_log: also keep the output on the console */
	const char *header;    /* one line written to train_log first (no newline needed) */
	const char *ident;     /* "rank 3 on n2", for messages */
	const sigset_t *stop;  /* signals blocked in this process (NULL: none) */
	int pass_stop;	       /* exec the command with them still blocked, and pending ones
				* pending; else unblocked (a pending one is then delivered) */
	const char *cwd;       /* run the command there (output.run_in_device_dir), or NULL */
	const char *sched_log; /* start MindSpore's scheduler beside it, its output here (sched.h),
				* or NULL */
};

/* Run the command. Without tee this execs and returns only on failure (with the exit status a
 * shell would give: 127 not found, 126 not executable; the message is already printed). With
 * tee the command runs as a child while this process copies its output to train.log and the
 * console, then exits with the command's status (or dies of its signal): it never returns
 * then, except on a setup failure (returns 1). */
int launch_exec(const struct launch_exec *e);

/* Open e->train_log for appending (created 0644, never through a symlink) and write e->header
 * to it: the descriptor, or -1 with the reason on stderr. */
int launch_open_log(const struct launch_exec *e);
/* The status a shell reports for a failed exec: 127 for a missing file, else 126. */
int launch_exec_status(int errnum);

#endif
