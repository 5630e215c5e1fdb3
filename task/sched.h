/* sched.h — MindSpore's scheduler process, as msrun starts it for its dynamic cluster: the
 * rank's own command with MS_ROLE=MS_SCHED, RANK_ID=0 and no MS_NODE_ID
 * (mindspore/python/mindspore/parallel/cluster/process_entity/_api.py, start_scheduler), on
 * the master's node, its output in a log of its own. Shared by dptrain-launch and the SPANK
 * plugin: no PMIx, no Slurm, never exit() (in the plugin the process is a fork of slurmstepd). */
#ifndef DPTRAIN_SCHED_H
#define DPTRAIN_SCHED_H
#include <sys/types.h>

/* Seconds the scheduler has to end by itself after rank 0's command succeeded (its workers
 * have finalized with it by then), before SIGTERM; then SCHED_KILL_S more before SIGKILL. */
#define SCHED_GRACE_S 30
#define SCHED_KILL_S  5

/* Start it: argv[0] looked up in envp's PATH, run with envp changed as above, stdin from
 * /dev/null, stdout and stderr appended to log. It gets SIGTERM if the starting process dies.
 * Its pid, or -1 with the reason on stderr (prefixed by ident). */
pid_t sched_start(char *const argv[], char *const envp[], const char *log, const char *ident);

/* After rank 0's command ended (ok: it succeeded): wait for the scheduler as above, then reap
 * it. A scheduler that failed is reported on stderr, naming its log. */
void sched_finish(pid_t pid, int ok, const char *log, const char *ident);
#endif
