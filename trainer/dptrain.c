/* dptrain.c — the dptrain program: command line, loading the job config, then training.
 * Owns the arguments, where this rank's outputs go, and the exit codes; the config is
 * config/, the training loop trainer/train.c. */
#define _GNU_SOURCE
#include "common/error.h"
#include "common/env.h"
#include "common/envint.h"
#include "common/mkdir_p.h"
#include "trainer/backend/backend.h"
#include "trainer/dist/comm.h"
#include "config/config.h"
#include "ranktable/ranktable.h"
#include "common/secret.h"
#include "common/warn.h"
#include "store/store.h"
#include "trainer/train.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DPTRAIN_VERSION
#define DPTRAIN_VERSION "0.0.0"
#endif

enum {
	EXIT_OK = 0,
	EXIT_CONFIG = 1,  /* the config (or an override) is invalid */
	EXIT_USAGE = 2,	  /* bad command line */
	EXIT_TRAIN = 3,	  /* training stopped: bad data, diverged, out of memory, ... */
	EXIT_STOPPED = 4, /* stopped on SIGTERM/SIGUSR1 after writing a checkpoint */
};

/* Stop requests: SIGTERM (Slurm's preemption and time limit, scancel) and SIGUSR1 (sbatch
 * --signal): finish the step, checkpoint, stop. They are blocked from main's first instruction,
 * so every thread started from then on inherits the mask (OpenMP's, oneDNN's, the loader's,
 * CUDA's, NCCL's), and one thread that does nothing else takes them with sigwaitinfo: no
 * handler ever runs on a thread that runs a kernel (oneDNN's AVX-512 GEMM points the stack
 * pointer into a heap workspace, and the kernel would write the signal frame there).
 * A thread that a library started before main (in its constructor, as OpenBLAS starts its
 * pool) has them unblocked, and the kernel delivers a process-directed signal there: the
 * handler stop_forward, which only such threads can run, hands it to the waiting thread
 * (measured: without it, SIGTERM to a build that loaded OpenBLAS ended the process, 143).
 * dptrain-launch hands a stop signal that arrived before the exec on, pending. The one piece
 * of global state. */
static struct {
	sigset_t set;
	atomic_int requested; /* the signal that asked, 0 while none */
	atomic_int training;  /* a training run: a stop is a request, not the end of the process */
	char who[32];	      /* "rank N" for the message */
	pthread_t waiter;     /* the thread in sigwaitinfo, once waiter_ready */
	atomic_int waiter_ready;
	atomic_int early; /* a signal stop_forward took before the waiter existed */
} stop;

static void stop_forward(int sig)
{
	int e = errno;

	if (atomic_load(&stop.waiter_ready)) {
		pthread_kill(stop.waiter, sig);
	} else {
		atomic_store(&stop.early, sig);
		if (atomic_load(&stop.waiter_ready) && atomic_exchange(&stop.early, 0))
			pthread_kill(stop.waiter, sig);
	}
	errno = e;
}

static void *stop_waiter(void *arg)
{
	(void)arg;
	for (;;) {
		int sig = sigwaitinfo(&stop.set, NULL);
		if (sig < 0)
			continue; /* EINTR */
		if (!atomic_load(&stop.training)) {
			/* --check, --devices: what the signal does to any program */
			sigset_t one;
			sigemptyset(&one);
			sigaddset(&one, sig);
			signal(sig, SIG_DFL);
			pthread_sigmask(SIG_UNBLOCK, &one, NULL);
			raise(sig);
			_exit(128 + sig);
		}
		if (atomic_exchange(&stop.requested, sig) == 0) {
			fprintf(stderr,
				"dptrain: %s: %s: stopping after this step, with a checkpoint\n",
				stop.who, sig == SIGTERM ? "SIGTERM" : "SIGUSR1");
			fflush(stderr);
		}
	}
	return NULL;
}

/* First thing in main, before any thread exists: a stop signal from now on waits, pending,
 * for the thread that takes it. */
static void block_stop_signals(void)
{
	/* a closed stdout (the launcher's tee gone) must not end a rank in its checkpoint */
	struct sigaction fwd;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&stop.set);
	sigaddset(&stop.set, SIGTERM);
	sigaddset(&stop.set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &stop.set, NULL);
	memset(&fwd, 0, sizeof(fwd));
	fwd.sa_handler = stop_forward;
	fwd.sa_flags = SA_RESTART;
	sigfillset(&fwd.sa_mask);
	sigaction(SIGTERM, &fwd, NULL);
	sigaction(SIGUSR1, &fwd, NULL);
}

/* Once the command line says whether this is a training run (a signal that came earlier,
 * even before the exec, is taken now). */
static void take_stop_signals(int training)
{
	pthread_t t;
	pthread_attr_t attr;
	const char *r = getenv(ENV_RANK);

	snprintf(stop.who, sizeof(stop.who), "rank %.12s", r && *r ? r : "0");
	atomic_store(&stop.training, training);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int e = pthread_create(&t, &attr, stop_waiter, NULL);
	if (e == 0) {
		int sig;
		struct timespec now = {0, 0};
		stop.waiter = t;
		atomic_store(&stop.waiter_ready, 1);
		if ((sig = atomic_exchange(&stop.early, 0)) != 0)
			pthread_kill(t, sig);
		/* One pending on this thread alone (raised here before the exec, by a launcher
		 * that used raise()) is invisible to the waiter's sigwaitinfo: hand it over. */
		while ((sig = sigtimedwait(&stop.set, NULL, &now)) > 0)
			pthread_kill(t, sig);
	} else {
		/* nobody would take them: leave their default action to them */
		dp_warn("dptrain", NULL,
			"no thread for SIGTERM/SIGUSR1 (%s): they end the process without a "
			"checkpoint",
			strerror(e));
		signal(SIGTERM, SIG_DFL);
		signal(SIGUSR1, SIG_DFL);
		pthread_sigmask(SIG_UNBLOCK, &stop.set, NULL);
	}
	pthread_attr_destroy(&attr);
}

struct args {
	const char *config; /* as given, for messages */
	int noverrides;
	char **overrides;
	int check;
	int devices;
	char *resume; /* --resume PATH as an override, applied after the others */
	int quiet;    /* --quiet: output.progress=off, applied last */
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: dptrain [OPTIONS] [CONFIG] [path.to.key=VALUE ...]\n"
		"Train a model data-parallel as the job config CONFIG (JSON, see dptrain.json(5))\n"
		"says. CONFIG defaults to $DPTRAIN_CONFIG, which srun --dptrain sets.\n"
		"\n"
		"  -c, --check     validate CONFIG, print the resolved config as JSON and exit\n"
		"  -d, --devices   list the GPUs this process can train on and exit (status 1\n"
		"                  when there is none, with the reason)\n"
		"  -r, --resume PATH  resume from the checkpoint directory PATH (a step-N); the\n"
		"                  same as checkpoint.resume=PATH\n"
		"  -q, --quiet     no loss nor progress lines (metrics.jsonl still gets them);\n"
		"                  the same as output.progress=off\n"
		"  -h, --help      show this help and exit\n"
		"  -V, --version   show the version and exit\n"
		"\n"
		"path.to.key=VALUE changes one key for this run: VALUE is read as JSON when it\n"
		"parses, else as a string; key=null restores the default. For example:\n"
		"  dptrain --check lenet-fmnist.json train.epochs=1 data.batch_size=64\n"
		"\n"
		"Exit status: 0 success, 1 invalid config, 2 usage error, 3 training stopped (a\n"
		"data or weights file, divergence, out of memory: the message says which), 4\n"
		"stopped on SIGTERM or SIGUSR1 after a checkpoint (or before the first step, with\n"
		"nothing to save yet): run the job again to continue.\n");
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
	    {"devices", no_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"resume", required_argument, NULL, 'r'},
	    {"version", no_argument, NULL, 'V'},
	    {"quiet", no_argument, NULL, 'q'},
	    {NULL, 0, NULL, 0},
	};
	int ch;

	opterr = 0;
	if (!(a->overrides = calloc((size_t)argc + 1, sizeof(char *)))) {
		fprintf(stderr, "dptrain: out of memory\n");
		return -1;
	}
	while ((ch = getopt_long(argc, argv, ":cdhqr:V", opts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			a->check = 1;
			break;
		case 'd':
			a->devices = 1;
			return 0;
		case 'r': /* the same as the override, which the config parser checks */
			if (asprintf(&a->resume, "checkpoint.resume=%s", optarg) < 0) {
				fprintf(stderr, "dptrain: out of memory\n");
				return -1;
			}
			break;
		case 'q':
			a->quiet = 1;
			break;
		case 'h':
			usage(stdout);
			exit(EXIT_OK);
		case 'V':
			printf("dptrain %s\n", DPTRAIN_VERSION);
			exit(EXIT_OK);
		case ':': /* getopt's "missing argument": opterr is 0 and the string starts ':' */
			fprintf(stderr, "dptrain: %s needs a value%s; see dptrain --help\n",
				argv[optind - 1],
				optopt == 'r'
				    ? ": the checkpoint to resume from (a step-N directory)"
				    : "");
			return -1;
		default:
			fprintf(stderr, "dptrain: unknown option '%s'; see dptrain --help\n",
				argv[optind - 1]);
			return -1;
		}
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
	if (a->resume)
		a->overrides[a->noverrides++] = a->resume;
	if (a->quiet)
		a->overrides[a->noverrides++] = (char *)"output.progress=off";
	if (!a->config) {
		const char *env = getenv(ENV_DPTRAIN_CONFIG);
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

/* An integer variable from 0 to 2^24 (dp_env_int): def when unset, -1 when malformed. */
static int env_int(const char *name, int def)
{
	int v = def;
	return dp_env_int(name, 0, 1 << 24, &v, NULL) < 0 ? -1 : v;
}

/* How long the rendezvous may take: DPTRAIN_TIMEOUT (dptrain-run --timeout, plugstack.conf
 * timeout=) when set, as dptrain-launch takes it for its own wire-up, else the config's
 * timeouts.rendezvous_s. -1 when DPTRAIN_TIMEOUT is set but not a number of seconds. */
static double rendezvous_timeout(const struct cfg *c)
{
	const char *v = getenv(ENV_DPTRAIN_TIMEOUT);
	if (!v || !*v)
		return c->timeouts.rendezvous_s;
	int t = env_int(ENV_DPTRAIN_TIMEOUT, 0);
	return t >= 1 ? t : -1;
}

/* dptrain --devices: the GPUs as this process sees them (after CUDA_VISIBLE_DEVICES). */
static int list_devices(void)
{
	char desc[512];
	struct dp_error why;
	int n = be_cuda_device_count(&why);
	const char *cvd = getenv(ENV_CUDA_VISIBLE_DEVICES);
	be_cpu_describe(desc, sizeof(desc));
	printf("CPU: %s\n", desc);
	printf("CPU kernels: %s\n", be_cpu_kernels());
	static const char *wino[] = {
	    "no (float32 acts are not in oneDNN's blocked layouts here: every convolution is "
	    "direct)",
	    "yes (dptrain's F(4x4, 3x3) for float32 3x3 stride-1 convolutions, oneDNN having none "
	    "here; DPTRAIN_CPU_CONV_ALG)",
	    "yes (oneDNN's, for float32 3x3 stride-1 convolutions where it judges it faster; "
	    "DPTRAIN_CPU_CONV_ALG)"};
	printf("CPU Winograd: %s\n", wino[be_cpu_winograd()]);
	if (n <= 0) {
		printf("no GPU: %s (CUDA_VISIBLE_DEVICES=%s); dptrain trains on the CPU\n",
		       why.text, cvd ? cvd : "(unset)");
		return 1;
	}
	for (int i = 0; i < n; i++) { /* a GPU that cannot be described is still listed */
		be_cuda_describe(i, desc, sizeof(desc));
		printf("GPU %d: %s\n", i, desc);
	}
	return EXIT_OK;
}

/* The GPU this rank trains on, or -1 for the CPU: device.kind, and DPTRAIN_GPU, the device
 * index the launcher chose from the rank's CUDA_VISIBLE_DEVICES (-1: it found none). Run by
 * hand (no DPTRAIN_GPU), GPU 0 when there is one. */
static int choose_gpu(const struct cfg *c, int rank, struct dp_error *err)
{
	const char *env = getenv(ENV_DPTRAIN_GPU), *cvd = getenv(ENV_CUDA_VISIBLE_DEVICES);
	int gpu = 0;
	if (c->device.kind == CFG_DEVICE_CPU)
		return -1;
	if (dp_env_int(ENV_DPTRAIN_GPU, -1, 1 << 20, &gpu, err) < 0) {
		errprintf(
		    err,
		    "%s: not a GPU index (or -1 for none); it is set by dptrain-launch, unset "
		    "it to run by hand",
		    err->text);
		return -2;
	}
	if (gpu == -1) {
		if (c->device.kind == CFG_DEVICE_AUTO)
			return -1;
		errprintf(
		    err,
		    "device.kind is cuda, but the launcher found no GPU for rank %d "
		    "(CUDA_VISIBLE_DEVICES=%s): ask Slurm for GPUs (srun --gpus-per-task=1) or "
		    "set device.kind to auto or cpu",
		    rank, cvd ? cvd : "(unset)");
		return -2;
	}
	int n = be_cuda_device_count(err); /* why there is none */
	if (n <= 0 || gpu >= n) {
		if (c->device.kind == CFG_DEVICE_AUTO && n <= 0 && !(env && *env))
			return -1;
		if (n <= 0)
			errprintf(err,
				  "device.kind is %s, but rank %d has no usable GPU: %s "
				  "(CUDA_VISIBLE_DEVICES=%s); set device.kind to cpu, or run where "
				  "there is a GPU",
				  c->device.kind == CFG_DEVICE_AUTO
				      ? "auto and the launcher assigned "
					"a GPU"
				      : "cuda",
				  rank, err->text, cvd ? cvd : "(unset)");
		else
			errprintf(
			    err,
			    "rank %d was given GPU %d, but it sees only %d (CUDA_VISIBLE_DEVICES="
			    "%s)",
			    rank, gpu, n, cvd ? cvd : "(unset)");
		return -2;
	}
	return gpu;
}

/* The ranks of a job: the rendezvous store at MASTER_ADDR:MASTER_PORT (served by rank 0) and
 * the collectives over it. Host names and the job's identity come from the rank table when
 * the launcher made one. */
struct dist {
	struct store *st;
	struct comm *comm;
};

static int dist_open(struct dist *d, const struct cfg *c, int rank, int world_size, int gpu,
		     struct dp_error *err)
{
	const char *addr = getenv(ENV_MASTER_ADDR), *port = getenv(ENV_MASTER_PORT);
	const char *rtpath = getenv(ENV_DPTRAIN_RANK_TABLE);
	struct ranktable rt = {0};
	char job[2 * RT_ID_MAX + 2] = "";
	const char **hosts = NULL;
	int p = env_int(ENV_MASTER_PORT, 0), rv = -1;
	if (!addr || !*addr || !port || !*port || p < 1 || p > 65535) {
		errprintf(
		    err,
		    "WORLD_SIZE=%d but MASTER_ADDR/MASTER_PORT (\"%s\", \"%s\") do not name rank "
		    "0's rendezvous endpoint; start the ranks with srun --dptrain or "
		    "dptrain-run, or set both as torchrun does",
		    world_size, addr ? addr : "", port ? port : "");
		return -1;
	}
	/* the rank table only adds the hosts' names to messages: one that cannot be read is
	 * left out */
	if (rtpath && *rtpath && rt_read(&rt, rtpath, err) == 0 && rt.world_size == world_size) {
		hosts = calloc((size_t)world_size, sizeof(*hosts));
		for (int i = 0; hosts && i < world_size; i++)
			hosts[i] = rt.ranks[i].host;
		if (rt.job_id[0])
			snprintf(job, sizeof(job), "%s.%s", rt.job_id, rt.step_id);
	}
	struct store_opts so = {
	    .master_addr = addr,
	    .master_port = p,
	    .rank = rank,
	    .world_size = world_size,
	    .job = job,
	    .secret = getenv(ENV_DPTRAIN_STORE_SECRET),
	    .hosts = hosts,
	    .timeout_s = rendezvous_timeout(c),
	    .stop = &stop.requested,
	};
	/* GPU ranks: NCCL, or the CPU engine with the device buffers staged through host memory */
	const char *gc = getenv(ENV_DPTRAIN_GPU_COMM);
	int staged = gc && strcmp(gc, "cpu") == 0;
	if (gpu >= 0 && gc && *gc && !staged && strcmp(gc, "nccl") != 0) {
		errprintf(err, "DPTRAIN_GPU_COMM=%s: give nccl (the default) or cpu", gc);
		goto out;
	}
	if ((rv = store_open(&d->st, &so, err)) < 0)
		goto out;
	rv = -1;
	if (gpu >= 0 && !staged) {
		struct comm_nccl_opts no = {.device = gpu,
					    .share_gpu = c->device.allow_shared_gpu,
					    .timeout_s = c->timeouts.collective_s};
		if (comm_nccl_create(&d->comm, d->st, &no, err) < 0) {
			errprefix(err, "collectives on GPU %d", gpu);
			goto out;
		}
	} else {
		struct comm_cpu_opts co = {.timeout_s = c->timeouts.collective_s};
		if (comm_cpu_create(&d->comm, d->st, &co, err) < 0) {
			errprefix(err, "collectives");
			goto out;
		}
		if (gpu >= 0 && comm_staged_cuda(&d->comm, d->comm, gpu, err) < 0) {
			errprefix(err,
				  "collectives on GPU %d through the CPU (DPTRAIN_GPU_COMM=cpu)",
				  gpu);
			goto out;
		}
	}
	rv = 0;
out:
	free(hosts);
	rt_free(&rt);
	return rv;
}

/* clean: every rank finished; rank 0 keeps the store up until the others said goodbye. */
static void dist_close(struct dist *d, const struct cfg *c, int clean)
{
	if (d->comm)
		d->comm->ops->destroy(d->comm);
	d->comm = NULL;
	store_close(d->st, clean ? c->timeouts.shutdown_s : 0);
	d->st = NULL;
}

/* train.threads 0 and no OMP_NUM_THREADS (dptrain-launch sets it from the same source): the
 * CPUs Slurm gave this rank, shared with the node's other ranks when they are not its own
 * (rt_task_threads; torchrun sets OMP_NUM_THREADS=1 for the same reason: oversubscribed
 * OpenMP threads spin against each other). 0: OpenMP's own default. */
static int default_threads(void)
{
	const char *omp = getenv(ENV_OMP_NUM_THREADS);
	struct dp_error err;
	int threads;
	if (omp && *omp)
		return 0;
	if (rt_task_threads(env_int(ENV_LOCAL_WORLD_SIZE, 1), &threads, &err) < 0) {
		dp_warn("dptrain", NULL, "%s; threads: OpenMP's default", err.text);
		return 0;
	}
	return threads;
}

/* A stop request before training began (while loading the config, during the rendezvous):
 * there is nothing to save, and the job can simply run again. After that, a request ends the
 * run after the step the ranks are in, with a checkpoint. other: NULL, or why this rank stops
 * when it was not asked itself (another rank was). */
static int stopped_early(int rank, const char *other)
{
	if (!atomic_load(&stop.requested) && !other)
		return 0;
	if (atomic_load(&stop.requested))
		printf("dptrain: rank %d: stopped on request before the first step: ", rank);
	else
		printf("dptrain: rank %d: stopped before the first step (%s): ", rank, other);
	printf("nothing to save yet (a checkpoint from an earlier run stands); run the job again "
	       "to continue\n");
	return 1;
}

/* The ranks agree whether a stop request came before training began: each one's request
 * flag, summed over the ranks. A local look would not do: the launcher passes a signal to the
 * ranks one after the other, and each takes it on its own thread, so one rank can see it here
 * and leave while another, not yet told, starts the first step and finds its peer gone (an
 * error, exit 3, instead of exit 4). A request after the vote is seen at the first step's
 * vote, with a checkpoint. 1: stop (this rank said so when it saw the request itself), 0: go
 * on, -1: the vote failed, with err. */
static int start_vote(struct dist *d, int rank, struct dp_error *err)
{
	double asked = atomic_load(&stop.requested) ? 1 : 0;
	if (!d->comm)
		return stopped_early(rank, NULL);
	if (d->comm->ops->allreduce(d->comm, &asked, 1, COMM_F64, COMM_SUM, err) < 0)
		return -1;
	if (asked <= 0)
		return 0;
	return stopped_early(rank, "another rank was asked to stop");
}

/* The rank and output directory come from dptrain-launch (srun --dptrain, dptrain-run);
 * run by hand, dptrain is rank 0 of 1 and writes to output.dir with %j = "local". */
/* After a failure (rank 0): the checkpoint that nothing before it was lost from, and what
 * running the job again does with it. */
static void say_last_checkpoint(const struct cfg *c, const struct train_result *res)
{
	if (!res->last_checkpoint[0])
		fprintf(stderr, "dptrain: no checkpoint was written in this run%s\n",
			c->checkpoint.resume == CFG_RESUME_AUTO && res->resumed_at < 0
			    ? ": running the job again starts over"
			    : "");
	else if (c->checkpoint.resume == CFG_RESUME_AUTO)
		fprintf(stderr,
			"dptrain: the last good checkpoint is %s: running the job again resumes "
			"from it\n",
			res->last_checkpoint);
	else
		fprintf(stderr,
			"dptrain: the last good checkpoint is %s (checkpoint.resume is not "
			"\"auto\": give it as checkpoint.resume to continue from it)\n",
			res->last_checkpoint);
}

static int train(const struct cfg *c, int outdir_overridden)
{
	char outdir[4096];
	struct dp_error err;
	const char *od = getenv(ENV_DPTRAIN_OUTPUT_DIR);
	struct train_env env = {.out = stdout};
	struct train_result res;
	env.threads = default_threads();
	env.stop = &stop.requested;
	env.rank = env_int(ENV_RANK, 0);
	env.world_size = env_int(ENV_WORLD_SIZE, 1);
	if (stopped_early(env.rank, NULL))
		return EXIT_STOPPED;
	if (env.rank < 0 || env.world_size < 1 || env.rank >= env.world_size) {
		fprintf(stderr,
			"dptrain: RANK=%s WORLD_SIZE=%s: not a rank of a job; unset them or "
			"start ranks with srun --dptrain or dptrain-run\n",
			getenv(ENV_RANK) ? getenv(ENV_RANK) : "",
			getenv(ENV_WORLD_SIZE) ? getenv(ENV_WORLD_SIZE) : "");
		return EXIT_USAGE;
	}
	if (od && *od && outdir_overridden) {
		/* the launcher made this rank's directory (rank table, device<N>/ and its logs)
		 * before we ran: moving the weights elsewhere would split the job's output */
		fprintf(stderr,
			"dptrain: rank %d: output.dir on the command line cannot move this rank's "
			"output: the launcher already made its directory %s (the job config's "
			"output.dir or DPTRAIN_OUTPUT_DIR); set output.dir in the job config, or "
			"DPTRAIN_OUTPUT_DIR for srun (dptrain-run -o)\n",
			env.rank, od);
		return EXIT_CONFIG;
	}
	if (od && *od) {
		snprintf(outdir, sizeof(outdir), "%s", od);
	} else if (cfg_expand_output_dir(c->output.dir, "local", "0", outdir, sizeof(outdir)) < 0) {
		fprintf(stderr, "dptrain: output.dir \"%s\" is too long\n", c->output.dir);
		return EXIT_CONFIG;
	}
	if (dp_mkdir_p(outdir, 0755, NULL) < 0) {
		fprintf(stderr, "dptrain: cannot create output directory %s: %s\n", outdir,
			strerror(errno));
		return EXIT_TRAIN;
	}
	env.output_dir = outdir;
	env.gpu = choose_gpu(c, env.rank, &err);
	if (env.gpu < -1) {
		fprintf(stderr, "dptrain: rank %d: %s\n", env.rank, err.text);
		return EXIT_TRAIN;
	}
	/* DPTRAIN_DDP=1: the whole data-parallel machinery even for one rank (as torchrun
	 * --nproc-per-node=1 does), to test it where there is one GPU */
	int force_ddp = env_int(ENV_DPTRAIN_DDP, 0) == 1;
	if (rendezvous_timeout(c) < 0) {
		fprintf(stderr,
			"dptrain: rank %d: DPTRAIN_TIMEOUT=%s is not a number of seconds "
			"(1 or more); it bounds the rendezvous (dptrain-run --timeout)\n",
			env.rank, getenv(ENV_DPTRAIN_TIMEOUT));
		return EXIT_CONFIG;
	}
	struct dist dist = {0};
	int dr = env.world_size > 1 || force_ddp
		     ? dist_open(&dist, c, env.rank, env.world_size, env.gpu, &err)
		     : 0;
	if (dr < 0) {
		dist_close(&dist, c, 0);
		if (stopped_early(env.rank, dr == STORE_STOPPED ? err.text : NULL))
			return EXIT_STOPPED;
		fprintf(stderr, "dptrain: rank %d: %s\n", env.rank, err.text);
		return EXIT_TRAIN;
	}
	env.comm = dist.comm;
	int early = start_vote(&dist, env.rank, &err);
	if (early != 0) {
		dist_close(&dist, c, 0);
		if (early > 0 || stopped_early(env.rank, NULL))
			return EXIT_STOPPED;
		fprintf(stderr, "dptrain: rank %d: %s\n", env.rank, err.text);
		return EXIT_TRAIN;
	}
	if (train_run(c, &env, &res, &err) < 0) {
		fprintf(stderr, "dptrain: rank %d: %s\n", env.rank, err.text);
		if (env.rank == 0)
			say_last_checkpoint(c, &res);
		dist_close(&dist, c, 0);
		return EXIT_TRAIN;
	}
	dist_close(&dist, c, 1);
	if (res.stopped) {
		if (env.rank == 0)
			printf("dptrain: stopped at step %ld on request; run the job again to "
			       "continue "
			       "from its checkpoint\n",
			       res.steps);
		return EXIT_STOPPED;
	}
	if (env.rank == 0) {
		printf("dptrain: done: %ld steps, %d epoch%s in %.1f s", res.steps, res.epochs,
		       res.epochs == 1 ? "" : "s", res.seconds);
		if (res.eval_accuracy >= 0)
			printf("; test accuracy %.4f", res.eval_accuracy);
		printf("; weights and metrics in %s\n", outdir);
	}
	return EXIT_OK;
}

/* The site's limit on data workers per rank (plugstack.conf max_data_workers=, which the plugin
 * passes in DPTRAIN_MAX_DATA_WORKERS): a config above it fails before any work. */
static int check_site_limits(const struct cfg *c, const char *path)
{
	struct dp_error err;
	int max, rc = dp_env_int(ENV_DPTRAIN_MAX_DATA_WORKERS, 1, INT_MAX, &max, &err);

	if (rc < 0) {
		fprintf(stderr, "dptrain: %s\n", err.text);
		return -1;
	}
	if (rc == 1 && c->data.workers > max) {
		fprintf(stderr,
			"dptrain: %s: data.workers is %d, more than this site allows (at most %d "
			"per rank: max_data_workers= in plugstack.conf, see dptrain(8))\n",
			path, c->data.workers, max);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct args a = {0};
	struct cfg c = {0};
	struct dp_error err;
	int rv;

	block_stop_signals();
	/* The log is read as it grows (tail -f of train.log, srun's console): a line at a time,
	 * not when a 4 KB buffer fills. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (parse_args(argc, argv, &a) < 0) {
		rv = EXIT_USAGE;
		goto out;
	}
	take_stop_signals(!a.check && !a.devices);
	if (a.devices) {
		rv = list_devices();
		goto out;
	}
	if (cfg_load(&c, a.config, a.noverrides, a.overrides, &err) < 0) {
		fprintf(stderr, "dptrain: %s\n", err.text);
		rv = EXIT_CONFIG;
		goto out;
	}
	for (int i = 0; i < c.nwarnings; i++)
		dp_warn("dptrain", NULL, "%s: %s", a.config, c.warnings[i]);
	if (check_site_limits(&c, a.config) < 0) {
		rv = EXIT_CONFIG;
		goto out;
	}
	int outdir_overridden = 0;
	for (int i = 0; i < a.noverrides; i++)
		if (strncmp(a.overrides[i], "output.dir=", 11) == 0)
			outdir_overridden = 1;
	rv = a.check ? print_config(&c) : train(&c, outdir_overridden);
out:
	cfg_free(&c);
	free(a.overrides);
	free(a.resume);
	return rv;
}
