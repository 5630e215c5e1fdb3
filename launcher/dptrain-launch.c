/* dptrain-launch.c — main of dptrain-launch, the per-rank wire-up program: discover the allocation
 * (PMIx, SLURM_*, torchrun-style env), write the rank table and the device directory, export
 * the environment, then exec the command. Runs once per task, started by the SPANK plugin, by
 * dptrain-run, or directly by srun. Only parses its arguments: the wire-up's phases are
 * launcher/wireup.c's. Must not contain training code. */
#include "common/error.h"
#include "launcher/wireup.h"
#include "task/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* --wire-up=FD's descriptor: an open one above the standard three, else -1. */
static int wire_up_fd(const char *arg)
{
	char *end;
	long fd;

	errno = 0;
	fd = strtol(arg, &end, 10);
	if (errno || end == arg || *end || fd < 3 || fd > 1 << 20 || fcntl((int)fd, F_GETFD) < 0)
		return -1;
	return (int)fd;
}

/* --abort=STATUS MESSAGE: the plugin's watcher, after this rank's command failed, ends the
 * whole step through PMIx (alloc_abort), so the other ranks do not wait for it until their
 * own timeouts; MESSAGE says why (Slurm logs it). The guard bounds it like any wire-up. */
static int abort_step(struct wireup *w, char **cmd)
{
	char *end;
	long status;

	errno = 0;
	status = strtol(cmd[0] + 8, &end, 10);
	if (errno || end == cmd[0] + 8 || *end || status < 1 || status > 255 || !cmd[1]) {
		fprintf(stderr, "dptrain-launch: %s: usage: --abort=STATUS (1-255) MESSAGE\n",
			w->ident);
		return 2;
	}
	wireup_abort_step(w, (int)status, cmd[1]);
}

int main(int argc, char **argv)
{
	struct wireup w;
	struct dp_error err;
	char **cmd = argv + 1;
	int rc = 0;

	wireup_init(&w); /* first: the stop signals blocked before any thread starts */
	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--version") == 0) {
		/* with what a half-upgraded node's plugin compares (task/wire.h) */
		printf("dptrain-launch %s (wire-up protocol %d)\n", DPTRAIN_VERSION, WIRE_VERSION);
		return 0;
	}
	if (cmd[0] && strncmp(cmd[0], "--wire-up=", 10) == 0) {
		int fd = wire_up_fd(cmd[0] + 10);
		if (fd < 0) {
			fprintf(stderr, "dptrain-launch: %s: %s: not an open descriptor\n", w.ident,
				cmd[0]);
			return 2;
		}
		if (wireup_to_plugin(&w, fd, &err) != 0)
			wireup_die(&w, "%s", err.text);
		cmd++;
	}
	if (cmd[0] && strncmp(cmd[0], "--abort=", 8) == 0)
		return abort_step(&w, cmd);
	if (cmd[0] && strcmp(cmd[0], "--") == 0)
		cmd++;
	if (!cmd[0]) {
		fprintf(stderr, "dptrain-launch: %s: no command given\n%s", w.ident, usage_text);
		return 2;
	}
	w.cmd = cmd;
	if (wireup_start(&w, &err) != 0 || wireup_discover(&w, &err) != 0 ||
	    wireup_meet(&w, &err) != 0 || wireup_outdir(&w, &err) != 0 ||
	    wireup_gate(&w, &err) != 0 || wireup_rank_table(&w, &err) != 0 ||
	    wireup_environment(&w, &err) != 0 || wireup_env_log(&w, &err) != 0 ||
	    wireup_sync(&w, &err) != 0 || wireup_finish(&w, &err) != 0 ||
	    wireup_command(&w, &err) != 0 || (rc = wireup_hand_over(&w, &err)) < 0)
		wireup_die(&w, "%s", err.text);
	return rc;
}
