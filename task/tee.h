/* tee.h — a rank's output copied to its train.log and the console while the command runs,
 * then the command's exit status passed on. Shared by dptrain-launch (the command is its
 * child) and the SPANK plugin (the task's process keeps Slurm's task pid and copies; the
 * command is its child, which Slurm executes). Knows nothing about PMIx or Slurm; never
 * calls exit() (in the plugin the process is a fork of slurmstepd: no exit handlers). */
#ifndef DPTRAIN_TEE_H
#define DPTRAIN_TEE_H
#include <signal.h>
#include <sys/types.h>

/* Signals the tee ignores while it copies: Slurm signals every process of the step and
 * dptrain-run the whole process group, so the command gets them itself; the tee must outlive
 * it to copy its last lines, and forwarding would deliver them twice. tee_ignore() sets
 * SIG_IGN for those not blocked (a blocked one cannot end the tee, and stays pending) and
 * keeps the old dispositions in old[TEE_NIGNORED]; tee_restore() puts them back (in the
 * command's process). */
#define TEE_NIGNORED 7
void tee_ignore(struct sigaction *old);
void tee_restore(const struct sigaction *old);

/* In the command's process after the fork: the stop signals (members of stop) that were
 * pending in `pending` (taken before the fork, which does not pass them on) are sent again, to
 * the process (not the thread); they are blocked, so they wait, pending, for the command. */
void tee_raise_pending(const sigset_t *stop, const sigset_t *pending);

/* In the tee after the fork: stop signals (members of stop) pending here now that were not
 * in `before` (taken just before the fork, and re-raised in the child) came in between and
 * reached only this process: send them to the child. One that also reached the child (its
 * process group was signalled after the fork) arrives twice, which is one stop request. */
void tee_pass_pending(pid_t child, const sigset_t *stop, const sigset_t *before);

/* Copy out_r and err_r to log_fd and to stdout/stderr until both close, or until the child
 * has exited and what it left in the pipes is copied (a grandchild may hold them open). When
 * `parent` > 0 and our parent changes (it died), the child gets one SIGTERM. Write errors on
 * the log are reported once on stderr (naming ident and log_path); the console's are ignored. */
void tee_copy(pid_t child, int out_r, int err_r, int log_fd, const char *ident,
	      const char *log_path, pid_t parent);

/* Wait up to secs seconds for the child to end (on a pidfd where the kernel has them, 5.3 and
 * later, else polling every 5 ms): 1 when it was reaped (or cannot be: not our child), with
 * its wait status in *status; 0 when it still runs. */
int tee_reap_within(pid_t child, int *status, double secs);

/* Wait for the child: its wait status, or -1 with the reason on stderr. */
int tee_wait(pid_t child, const char *ident, int *status);

/* Leave the way a child did (its wait status): the same exit code, or death by the same
 * signal (without a second core dump). Flushes stdio, never runs exit handlers. */
void tee_leave(int status) __attribute__((noreturn));

/* tee_wait, then tee_leave (exit 1 if the wait failed). */
void tee_finish(pid_t child, const char *ident) __attribute__((noreturn));
#endif
