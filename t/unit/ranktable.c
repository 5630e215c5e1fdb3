#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
/* ranktable.c (test) — building, writing and re-reading rank tables: round trips of 1, 8 and
 * 4096 ranks in all three schemas, rt_build's checks with their exact messages, atomic writes
 * under a concurrent reader, and tables from Slurm/torchrun-style environments.
 * Hand-made input files and parse errors are t/unit/ranktable_read.c's. */
#include "common/error.h"
#include "ranktable/ranktable.h"
#include "t/lib/tap.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

/* An allocation of `world` ranks on `nodes` nodes, block distribution (the first world % nodes
 * nodes get one more), GPUs in reverse local-rank order when gpus (so device_id, the GPU, is
 * not the local rank), IPv6 addresses on odd nodes when v6. */
struct fixture {
	char (*host)[32];
	char (*addr)[RT_ADDR_MAX];
	struct rt_alloc_rank *ranks;
	struct rt_alloc a;
};

static void fixture_make(struct fixture *f, int world, int nodes, int gpus, int v6)
{
	f->host = calloc((size_t)nodes, sizeof(*f->host));
	f->addr = calloc((size_t)nodes, sizeof(*f->addr));
	f->ranks = calloc((size_t)world, sizeof(*f->ranks));
	if (!f->host || !f->addr || !f->ranks)
		bail_out("out of memory");
	for (int i = 0; i < nodes; i++) {
		snprintf(f->host[i], sizeof(f->host[i]), "node%04d", i);
		if (v6 && i % 2)
			snprintf(f->addr[i], sizeof(f->addr[i]), "fd00::%x", i);
		else
			snprintf(f->addr[i], sizeof(f->addr[i]), "10.%d.%d.1", i / 256, i % 256);
	}
	for (int i = 0, r = 0; i < nodes; i++) {
		int here = world / nodes + (i < world % nodes);
		for (int l = 0; l < here; l++, r++)
			f->ranks[r] = (struct rt_alloc_rank){
			    f->host[i], f->addr[i], i, l, gpus ? here - 1 - l : -1, NULL};
	}
	f->a = (struct rt_alloc){world, f->addr[0], 29500, "123456", "0", f->ranks};
}

static void fixture_free(struct fixture *f)
{
	free(f->host);
	free(f->addr);
	free(f->ranks);
}

static void test_round_trip(int world, int nodes, int gpus, int v6)
{
	struct fixture f;
	struct ranktable built, got;
	struct dp_error err;
	char path[512], what[96];
	struct dp_error diff;

	snprintf(what, sizeof(what), "%d ranks on %d nodes, %s%s", world, nodes,
		 gpus ? "GPUs" : "no GPUs", v6 ? ", IPv6 on odd nodes" : "");
	fixture_make(&f, world, nodes, gpus, v6);
	if (!ok(rt_build(&built, &f.a, &err) == 0, "%s: built", what)) {
		diag("%s", err.text);
		fixture_free(&f);
		return;
	}
	is_int(built.node_count, nodes, "%s: node count", what);
	const struct rt_rank *last = &built.ranks[world - 1];
	is_int(last->device_id, gpus ? last->gpu : last->local_rank, "%s: device_id is the %s",
	       what, gpus ? "GPU" : "local rank");
	for (enum rt_schema s = RT_SCHEMA_DPTRAIN; s <= RT_SCHEMA_LEGACY; s++) {
		snprintf(path, sizeof(path), "%s/rt-%s.json", tmpdir, rt_schema_name(s));
		if (!ok(rt_write_atomic(&built, path, s, 0644, &err) == 0, "%s: write %s", what,
			rt_schema_name(s))) {
			diag("%s", err.text);
			continue;
		}
		if (!ok(rt_read(&got, path, &err) == 0, "%s: read %s back", what,
			rt_schema_name(s))) {
			diag("%s", err.text);
			continue;
		}
		is_int(got.schema, s, "%s: %s detected", what, rt_schema_name(s));
		if (!ok(rt_compare(&built, &got, s, &diff) == 0, "%s: %s round trip is equal", what,
			rt_schema_name(s)))
			diag("%s", diff.text);
		if (s != RT_SCHEMA_DPTRAIN) {
			/* What the reader derives where the schema is silent. */
			int wrong = 0;
			for (int r = 0; r < world; r++)
				wrong += strcmp(got.ranks[r].host, got.ranks[r].server_id) != 0 ||
					 got.ranks[r].gpu != -1 ||
					 got.ranks[r].local_rank != built.ranks[r].local_rank;
			is_int(wrong, 0,
			       "%s: %s: host = server_id, gpu -1, local ranks in rank order", what,
			       rt_schema_name(s));
			is(got.master_addr, "", "%s: %s carries no master", what,
			   rt_schema_name(s));
		}
		rt_free(&got);
	}
	/* rt_compare must be able to fail: change one field the dptrain schema carries. */
	built.ranks[world - 1].gpu = 99;
	ok(rt_compare(&built, &built, RT_SCHEMA_DPTRAIN, &diff) == 0, "%s: a table equals itself",
	   what);
	snprintf(path, sizeof(path), "%s/rt-dptrain.json", tmpdir);
	if (rt_read(&got, path, &err) == 0) {
		ok(rt_compare(&built, &got, RT_SCHEMA_DPTRAIN, &diff) == 1,
		   "%s: a changed GPU is a difference", what);
		ok(rt_compare(&built, &got, RT_SCHEMA_HCCL, &diff) == 0,
		   "%s: ... which the hccl schema does not carry", what);
		rt_free(&got);
	}
	rt_free(&built);
	fixture_free(&f);
}

/* rt_build must fail with exactly `want`. */
static void build_fails(const struct rt_alloc *a, const char *want, const char *what)
{
	struct ranktable rt;
	struct dp_error err = {""};
	ok(rt_build(&rt, a, &err) == -1, "%s: rejected", what);
	is(err.text, want, "%s: message", what);
	ok(rt.ranks == NULL, "%s: nothing left allocated", what);
}

static void test_build(void)
{
	struct rt_alloc_rank r2[2] = {{"a", "10.0.0.1", 0, 0, -1, NULL},
				      {"a", "10.0.0.1", 0, 1, -1, NULL}};
	struct rt_alloc a = {2, "10.0.0.1", 29500, "1", "0", r2};
	struct ranktable rt;
	struct dp_error err;

	/* device_id: the GPU when each rank of the node has its own, else the local rank. */
	struct rt_alloc_rank g[3] = {{"a", "10.0.0.1", 0, 0, 3, NULL},
				     {"a", "10.0.0.1", 0, 1, 1, NULL},
				     {"b", "10.0.0.2", 1, 0, 0, NULL}};
	struct rt_alloc ga = {3, "10.0.0.1", 29500, NULL, NULL, g};
	ok(rt_build(&rt, &ga, &err) == 0, "GPUs 3 and 1 on node a: built");
	is_int(rt.ranks[0].device_id, 3, "device_id = GPU 3");
	is_int(rt.ranks[1].device_id, 1, "device_id = GPU 1");
	is(rt.job_id, "", "no job id given: empty");
	rt_free(&rt);
	g[1].gpu = 3;
	ok(rt_build(&rt, &ga, &err) == 0, "two ranks sharing GPU 3: built");
	is_int(rt.ranks[0].device_id, 0, "shared GPU: device_id = local rank 0");
	is_int(rt.ranks[1].device_id, 1, "shared GPU: device_id = local rank 1");
	is_int(rt.ranks[1].gpu, 3, "shared GPU: gpu kept");
	rt_free(&rt);

	/* A node's server_id is its local rank 0's address, even when that is not rank 0. */
	struct rt_alloc_rank sw[2] = {{"a", "10.0.0.7", 0, 1, -1, NULL},
				      {"a", "10.0.0.8", 0, 0, -1, NULL}};
	struct rt_alloc swa = {2, "10.0.0.8", 1, NULL, NULL, sw};
	ok(rt_build(&rt, &swa, &err) == 0, "local ranks in reverse: built");
	is(rt.ranks[0].server_id, "10.0.0.8", "server_id from local rank 0");
	is(rt.ranks[0].addr, "10.0.0.7", "each rank keeps its own address");
	rt_free(&rt);

	r2[1].host = "b";
	build_fails(
	    &a,
	    "dptrain.ranks[1].host: \"b\" differs from \"a\" of rank 0 on the same node (node 0)",
	    "two host names on one node");
	r2[1].host = "a b";
	build_fails(&a, "dptrain.ranks[1].host: \"a b\" is not a host name (printable, no spaces)",
		    "a host name with a space");
	r2[1].host = NULL;
	build_fails(&a, "dptrain.ranks[1].host: missing", "no host");
	r2[1].host = "a";
	r2[1].local_rank = 0;
	build_fails(
	    &a, "dptrain.ranks[1].local_rank: local rank 0 appears twice on node 0 (also rank 0)",
	    "a local rank twice");
	r2[1].local_rank = 5;
	build_fails(&a,
		    "dptrain.ranks[1].local_rank: local rank 5 is out of range: node 0 has 2 ranks",
		    "a local rank beyond the node's ranks");
	r2[1].local_rank = 1;
	r2[1].node_rank = 2;
	r2[1].host = "c";
	build_fails(&a, "dptrain.ranks[1].node_rank: node rank 2 is out of range (0..1)",
		    "a node rank beyond the world");
	r2[1].node_rank = -1;
	build_fails(&a, "dptrain.ranks[1].node_rank: node rank -1 is out of range (0..1)",
		    "a negative node rank");
	struct rt_alloc_rank r3[3] = {{"a", "10.0.0.1", 0, 0, -1, NULL},
				      {"c", "10.0.0.3", 2, 0, -1, NULL},
				      {"c", "10.0.0.3", 2, 1, -1, NULL}};
	struct rt_alloc a3 = {3, "10.0.0.1", 29500, NULL, NULL, r3};
	build_fails(&a3, "node 1 has no ranks (node ranks must be 0..2, each with a rank)",
		    "a gap in node ranks");
	r2[1] = (struct rt_alloc_rank){"a", "10.0.0.x", 0, 1, -1, NULL};
	build_fails(
	    &a, "server_list[0].device[1].device_ip: \"10.0.0.x\" is not an IPv4 or IPv6 address",
	    "a bad address");
	r2[1].addr = "10.0.0.1";
	r2[1].gpu = -2;
	build_fails(&a, "dptrain.ranks[1].gpu: -2 is not a GPU index (-1 for none)", "GPU -2");
	r2[1].gpu = -1;
	a.master_port = 70000;
	build_fails(&a, "dptrain.master_port: 70000 is out of range (1..65535)", "port 70000");
	a.master_port = 29500;
	a.master_addr = "head node";
	build_fails(
	    &a, "dptrain.master_addr: \"head node\" is not an IPv4 or IPv6 address or a host name",
	    "a master address with a space");
	a.master_addr = "10.0.0.1";
	a.job_id = "123456789012345678901234567890123";
	build_fails(
	    &a,
	    "dptrain.job_id: \"123456789012345678901234567890123\" is longer than 31 characters",
	    "a long job id");
	a.job_id = "1";
	a.world_size = 0;
	build_fails(&a, "dptrain.world_size: 0 is out of range (1..1048576)", "world size 0");
	a.world_size = 2;
	ok(rt_build(&rt, &a, &err) == 0, "the allocation, repaired, builds");

	/* rt_validate on a table changed after building. */
	rt.ranks[1].device_id = 0;
	ok(rt_validate(&rt, &err) == -1, "two ranks on device 0 of one node: invalid");
	is(err.text,
	   "server_list[0].device[1].device_id: device 0 appears twice on node a (also at "
	   "server_list[0].device[0].device_id)",
	   "duplicate device: message names both JSON paths");
	char *text = rt_to_json(&rt, RT_SCHEMA_HCCL, &err);
	ok(text == NULL, "an invalid table is not serialised");
	is(err.text,
	   "server_list[0].device[1].device_id: device 0 appears twice on node a (also at "
	   "server_list[0].device[0].device_id)",
	   "... with the same message");
	free(text);
	rt.ranks[1].device_id = 1;
	ok(rt_validate(&rt, &err) == 0, "repaired: valid");
	ok(rt_to_json(&rt, (enum rt_schema)7, &err) == NULL, "an unknown schema is refused");
	is(err.text, "unknown schema 7", "unknown schema: message");
	rt_free(&rt);
	ok(rt.ranks == NULL && rt.world_size == 0, "rt_free zeroes the table");
	rt_free(&rt);
	pass("rt_free twice is harmless");
}

static int count_dir_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return n;
}

static void test_write_errors(void)
{
	struct rt_alloc_rank r2[2] = {{"n1", "127.0.0.1", 0, 0, -1, NULL},
				      {"n2", "127.0.0.1", 1, 0, -1, NULL}};
	struct rt_alloc a = {2, "127.0.0.1", 29500, "1", "0", r2};
	struct ranktable rt;
	struct dp_error err;
	char path[512], want[1024], dir[300];
	struct stat st;

	snprintf(dir, sizeof(dir), "%s/w", tmpdir);
	if (mkdir(dir, 0755) < 0)
		bail_out("mkdir %s: %s", dir, strerror(errno));
	/* Two emulated nodes on one host share an address: fine for HCCL's server_list. */
	ok(rt_build(&rt, &a, &err) == 0, "two nodes with one address: built");
	snprintf(path, sizeof(path), "%s/t.json", dir);
	ok(rt_write_atomic(&rt, path, RT_SCHEMA_DPTRAIN, 0644, &err) == 0,
	   "... and written as dptrain");
	ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "written with mode 0644");
	snprintf(path, sizeof(path), "%s/legacy.json", dir);
	ok(rt_write_atomic(&rt, path, RT_SCHEMA_LEGACY, 0644, &err) == -1,
	   "... but not as legacy, which tells nodes apart by server_id");
	snprintf(want, sizeof(want),
		 "%s: not written: two nodes share the address 127.0.0.1, and the legacy schema "
		 "tells nodes apart by server_id alone: use the hccl or dptrain schema",
		 path);
	is(err.text, want, "legacy with shared addresses: message");
	ok(access(path, F_OK) < 0, "legacy with shared addresses: no file");
	snprintf(path, sizeof(path), "%s/nodir/t.json", dir);
	ok(rt_write_atomic(&rt, path, RT_SCHEMA_DPTRAIN, 0644, &err) == -1,
	   "a missing directory: fails");
	snprintf(want, sizeof(want),
		 "%s: cannot create a temporary file in %s/nodir: No such file or directory", path,
		 dir);
	is(err.text, want, "a missing directory: message names the directory");
	is_int(count_dir_entries(dir), 1, "no temporary files left behind");
	rt_free(&rt);
	snprintf(path, sizeof(path), "%s/t.json", dir);
	unlink(path);
	rmdir(dir);
}

/* A reader parses the table in a loop while a child rewrites it `writes` times, alternating an
 * 8-rank and a 16-rank table. atomic=0 is the control: a plain truncate-and-write in two halves,
 * which the same reader must catch, so the test can tell an atomic writer from one that is not.
 * What must be seen does not depend on scheduling: at the control's half-written points, and
 * after the atomic writer's first two tables, the writer waits until the reader has read the
 * file once more (a byte on `point`, answered on `ack`); in between both run freely. */
static void concurrent(int atomic, int writes, int *reads, int *bad, int *seen8, int *seen16)
{
	struct fixture f8, f16;
	struct ranktable t8, t16, got;
	struct dp_error err;
	char path[512], c = 0;
	int point[2], ack[2];
	pid_t pid;
	int status;

	*reads = *bad = *seen8 = *seen16 = 0;
	fixture_make(&f8, 8, 2, 1, 0);
	fixture_make(&f16, 16, 4, 0, 1);
	if (rt_build(&t8, &f8.a, &err) < 0 || rt_build(&t16, &f16.a, &err) < 0)
		bail_out("%s", err.text);
	snprintf(path, sizeof(path), "%s/concurrent-%d.json", tmpdir, atomic);
	if (rt_write_atomic(&t8, path, RT_SCHEMA_DPTRAIN, 0644, &err) < 0)
		bail_out("%s", err.text);
	if (pipe(point) < 0 || pipe(ack) < 0)
		bail_out("pipe: %s", strerror(errno));
	fflush(stdout);
	if ((pid = fork()) < 0)
		bail_out("fork: %s", strerror(errno));
	if (pid == 0) {
		close(point[0]);
		close(ack[1]);
		for (int i = 0; i < writes; i++) {
			const struct ranktable *t = i % 2 ? &t8 : &t16;
			if (atomic) {
				if (rt_write_atomic(t, path, RT_SCHEMA_DPTRAIN, 0644, &err) < 0)
					_exit(1);
				if (i < 2 &&
				    (write(point[1], "w", 1) != 1 || read(ack[0], &c, 1) != 1))
					_exit(1);
				continue;
			}
			char *text = rt_to_json(t, RT_SCHEMA_DPTRAIN, &err);
			FILE *out = fopen(path, "w");
			size_t half = strlen(text) / 2;
			if (!text || !out || fwrite(text, 1, half, out) != half || fflush(out))
				_exit(1);
			/* a writer preempted halfway, until the reader has looked */
			if (write(point[1], "h", 1) != 1 || read(ack[0], &c, 1) != 1)
				_exit(1);
			fputs(text + half, out);
			fclose(out);
			free(text);
		}
		_exit(0);
	}
	close(point[1]);
	close(ack[0]);
	fcntl(point[0], F_SETFL, O_NONBLOCK);
	for (;;) {
		int done = waitpid(pid, &status, WNOHANG) == pid;
		int at_point = read(point[0], &c, 1) == 1; /* nonblocking */
		if (rt_read(&got, path, &err) < 0) {
			if (atomic && *bad < 3)
				diag("read %d: %s", *reads, err.text);
			(*bad)++;
		} else {
			*seen8 += got.world_size == 8;
			*seen16 += got.world_size == 16;
			rt_free(&got);
		}
		(*reads)++;
		if (at_point && write(ack[1], "a", 1) != 1)
			bail_out("ack: %s", strerror(errno));
		if (done)
			break;
	}
	close(point[0]);
	close(ack[1]);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s writer: %d writes done",
	   atomic ? "atomic" : "plain", writes);
	unlink(path);
	rt_free(&t8);
	rt_free(&t16);
	fixture_free(&f8);
	fixture_free(&f16);
}

static void test_concurrent(void)
{
	int reads, bad, seen8, seen16;

	concurrent(1, 1000, &reads, &bad, &seen8, &seen16);
	note("atomic writer: %d reads, %d of the 8-rank table, %d of the 16-rank one", reads, seen8,
	     seen16);
	ok(reads > 0, "the reader read while the table was rewritten 1000 times (%d reads)", reads);
	is_int(bad, 0, "atomic writer: every read got a whole, valid table");
	ok(seen8 > 0 && seen16 > 0, "atomic writer: the reader saw both tables");
	is_int(count_dir_entries(tmpdir), 0, "atomic writer: no temporary files left");

	concurrent(0, 300, &reads, &bad, &seen8, &seen16);
	note("plain writer (control): %d reads, %d partial or empty", reads, bad);
	ok(bad > 0, "control: a non-atomic writer is caught by the same reader");
}

static const char *const env_names[] = {"SLURM_STEP_NODELIST",	"SLURM_JOB_NODELIST",
					"SLURM_NODELIST",	"SLURM_STEP_TASKS_PER_NODE",
					"SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS",
					"SLURM_NTASKS",		"SLURM_NPROCS",
					"SLURM_JOB_ID",		"SLURM_JOBID",
					"SLURM_STEP_ID",	"SLURM_STEPID",
					"WORLD_SIZE",		"LOCAL_WORLD_SIZE",
					"MASTER_ADDR",		"MASTER_PORT",
					"SLURM_DISTRIBUTION",	NULL};

static void clear_env(void)
{
	for (int i = 0; env_names[i]; i++)
		unsetenv(env_names[i]);
}

static void test_from_env(void)
{
	struct ranktable rt;
	struct dp_error err;
	char host[RT_HOST_MAX], used[RT_USED_MAX];

	clear_env();
	ok(rt_from_env(&rt, RT_ENV_AUTO, used, &err) == -1, "no variables: fails");
	is(err.text,
	   "neither Slurm (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST) nor torchrun-style "
	   "variables (WORLD_SIZE) are set",
	   "no variables: message");

	/* A batch script's view: the job's variables. */
	setenv("SLURM_JOB_NODELIST", "127.0.0.[1-2]", 1);
	setenv("SLURM_TASKS_PER_NODE", "3,1", 1);
	setenv("SLURM_NTASKS", "4", 1);
	setenv("SLURM_JOB_ID", "77", 1);
	if (!ok(rt_from_env(&rt, RT_ENV_AUTO, used, &err) == 0, "job variables: built"))
		diag("%s", err.text);
	is(used,
	   "Slurm variables (SLURM_JOB_NODELIST=127.0.0.[1-2], SLURM_TASKS_PER_NODE=3,1, "
	   "SLURM_JOB_ID=77)",
	   "job variables: which were used");
	is_int(rt.world_size, 4, "job variables: 4 ranks");
	is_int(rt.node_count, 2, "job variables: 2 nodes");
	is(rt.ranks[2].host, "127.0.0.1", "block distribution: rank 2 on the first node");
	is_int(rt.ranks[2].local_rank, 2, "block distribution: rank 2 is local rank 2");
	is(rt.ranks[3].host, "127.0.0.2", "block distribution: rank 3 on the second node");
	is_int(rt.ranks[3].local_rank, 0, "block distribution: rank 3 is local rank 0");
	is(rt.master_addr, "127.0.0.1", "master: the first node's address");
	is_int(rt.master_port, rt_default_port("77", NULL, getenv("DPTRAIN_STORE_SECRET")),
	       "master port: derived from the job id");
	is(rt.job_id, "77", "job id");
	is(rt.step_id, "", "no step id");
	rt_free(&rt);

	/* The layout follows SLURM_DISTRIBUTION, as dptrain-launch's does (block was assumed,
	 * whatever srun -m said). Node-level: what comes before ':' or ','. */
	setenv("SLURM_TASKS_PER_NODE", "2(x2)", 1);
	setenv("SLURM_DISTRIBUTION", "cyclic", 1);
	if (!ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == 0, "cyclic: built"))
		diag("%s", err.text);
	like(used, "SLURM_DISTRIBUTION=cyclic", "cyclic: said among the variables used");
	ok(rt.world_size == 4 && strcmp(rt.ranks[0].host, "127.0.0.1") == 0 &&
	       strcmp(rt.ranks[1].host, "127.0.0.2") == 0 &&
	       strcmp(rt.ranks[2].host, "127.0.0.1") == 0 && rt.ranks[2].local_rank == 1 &&
	       strcmp(rt.ranks[3].host, "127.0.0.2") == 0 && rt.ranks[3].local_rank == 1,
	   "cyclic: ranks 0,2 on the first node, 1,3 on the second");
	rt_free(&rt);
	setenv("SLURM_TASKS_PER_NODE", "4(x2)", 1);
	setenv("SLURM_NTASKS", "8", 1);
	setenv("SLURM_DISTRIBUTION", "plane=2:block", 1);
	if (!ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == 0, "plane=2: built"))
		diag("%s", err.text);
	ok(rt.world_size == 8 && strcmp(rt.ranks[1].host, "127.0.0.1") == 0 &&
	       strcmp(rt.ranks[2].host, "127.0.0.2") == 0 &&
	       strcmp(rt.ranks[4].host, "127.0.0.1") == 0 && rt.ranks[4].local_rank == 2 &&
	       strcmp(rt.ranks[7].host, "127.0.0.2") == 0 && rt.ranks[7].local_rank == 3,
	   "plane=2: ranks 0,1,4,5 on the first node, 2,3,6,7 on the second");
	rt_free(&rt);
	setenv("SLURM_DISTRIBUTION", "block:cyclic", 1);
	if (!ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == 0, "block: built"))
		diag("%s", err.text);
	ok(strcmp(rt.ranks[3].host, "127.0.0.1") == 0 && strcmp(rt.ranks[4].host, "127.0.0.2") == 0,
	   "block: ranks 0-3 on the first node, 4-7 on the second");
	rt_free(&rt);
	setenv("SLURM_DISTRIBUTION", "arbitrary", 1);
	ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == -1, "arbitrary: refused");
	like(err.text, "SLURM_DISTRIBUTION='arbitrary': where each rank runs cannot be derived",
	     "arbitrary: message");
	unsetenv("SLURM_DISTRIBUTION");
	setenv("SLURM_TASKS_PER_NODE", "3,1", 1);
	setenv("SLURM_NTASKS", "4", 1);

	/* Inside srun: the step's variables win over the job's. */
	setenv("SLURM_STEP_NODELIST", "localhost", 1);
	setenv("SLURM_STEP_TASKS_PER_NODE", "2", 1);
	setenv("SLURM_STEP_NUM_TASKS", "2", 1);
	setenv("SLURM_STEP_ID", "5", 1);
	setenv("MASTER_PORT", "4321", 1);
	if (!ok(rt_from_env(&rt, RT_ENV_AUTO, used, &err) == 0, "step variables: built"))
		diag("%s", err.text);
	is_int(rt.world_size, 2, "step variables: 2 ranks");
	is(rt.ranks[1].host, "localhost", "step variables: the host name as Slurm gives it");
	is(rt.ranks[1].addr, "127.0.0.1", "step variables: its address resolved");
	is(rt.step_id, "5", "step id");
	is_int(rt.master_port, 4321, "MASTER_PORT wins");
	rt_free(&rt);
	unsetenv("MASTER_PORT");

	setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)", 1);
	ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == -1, "more counts than nodes: fails");
	is(err.text,
	   "SLURM_STEP_NODELIST names 1 node but SLURM_STEP_TASKS_PER_NODE=\"1(x2)\" counts tasks "
	   "for 2",
	   "more counts than nodes: message");
	setenv("SLURM_STEP_TASKS_PER_NODE", "3", 1);
	ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == -1, "tasks do not add up: fails");
	is(err.text,
	   "SLURM_STEP_NUM_TASKS=2 but SLURM_STEP_TASKS_PER_NODE=\"3\" adds up to 3 tasks",
	   "tasks do not add up: message");
	setenv("SLURM_STEP_TASKS_PER_NODE", "2", 1);
	setenv("SLURM_STEP_NODELIST", "n[1-", 1);
	ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == -1, "a bad node list: fails");
	is(err.text, "SLURM_STEP_NODELIST: bad hostlist \"n[1-\": '[' at offset 1 is never closed",
	   "a bad node list: message");
	setenv("SLURM_STEP_NODELIST", "nosuchhost.invalid", 1);
	ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == -1, "an unresolvable host: fails");
	like(err.text, "SLURM_STEP_NODELIST, node 0: cannot resolve host \"nosuchhost.invalid\": ",
	     "an unresolvable host: message names it");
	unsetenv("SLURM_STEP_NODELIST");
	unsetenv("SLURM_TASKS_PER_NODE");
	ok(rt_from_env(&rt, RT_ENV_SLURM, used, &err) == -1, "no tasks per node: fails");
	is(err.text,
	   "SLURM_JOB_NODELIST is set but SLURM_TASKS_PER_NODE is not: cannot tell how many tasks "
	   "each node runs",
	   "no tasks per node: message");

	clear_env();
	setenv("WORLD_SIZE", "3", 1);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	setenv("MASTER_PORT", "1234", 1);
	if (!ok(rt_from_env(&rt, RT_ENV_AUTO, used, &err) == 0, "torchrun-style: built"))
		diag("%s", err.text);
	is(used,
	   "torchrun-style variables (WORLD_SIZE=3, MASTER_ADDR=127.0.0.1, MASTER_PORT=1234) on "
	   "this host",
	   "torchrun-style: which were used");
	gethostname(host, sizeof(host));
	is_int(rt.world_size, 3, "torchrun-style: 3 ranks");
	is_int(rt.node_count, 1, "torchrun-style: one node");
	is(rt.ranks[2].host, host, "torchrun-style: this host's name");
	is_int(rt.ranks[2].local_rank, 2, "torchrun-style: local rank = rank");
	is_int(rt.master_port, 1234, "torchrun-style: MASTER_PORT");
	rt_free(&rt);
	setenv("LOCAL_WORLD_SIZE", "2", 1);
	ok(rt_from_env(&rt, RT_ENV_TORCHRUN, used, &err) == -1, "torchrun-style on 2 hosts: fails");
	is(err.text,
	   "LOCAL_WORLD_SIZE=2 but WORLD_SIZE=3: torchrun-style variables describe only this "
	   "host, so from-env builds single-host tables from them",
	   "torchrun-style on 2 hosts: message");
	setenv("WORLD_SIZE", "x", 1);
	ok(rt_from_env(&rt, RT_ENV_TORCHRUN, used, &err) == -1, "WORLD_SIZE=x: fails");
	is(err.text, "WORLD_SIZE='x' is not an integer from 1 to 1048576", "WORLD_SIZE=x: message");
	clear_env();
}

static void test_helpers(void)
{
	char addr[RT_ADDR_MAX];
	struct dp_error err;

	ok(rt_resolve_host("10.1.2.3", addr, &err) == 0 && strcmp(addr, "10.1.2.3") == 0,
	   "an IPv4 literal is its own address");
	ok(rt_resolve_host("fd00::1", addr, &err) == 0 && strcmp(addr, "fd00::1") == 0,
	   "an IPv6 literal is its own address");
	ok(rt_resolve_host("localhost", addr, &err) == 0 && strcmp(addr, "127.0.0.1") == 0,
	   "localhost resolves to 127.0.0.1 (IPv4 first)");
	ok(rt_resolve_host("nosuchhost.invalid", addr, &err) == -1, "an unknown host fails");
	like(err.text, "cannot resolve host \"nosuchhost.invalid\": ", "an unknown host: message");

	int p = rt_default_port("123456", "0", NULL);
	ok(p >= 61000 && p <= 65499, "default port %d is above the ephemeral range", p);
	is_int(rt_default_port("123456", "0", NULL), p, "default port: the same for every rank");
	ok(rt_default_port("123456", "1", NULL) != p, "default port: another step, another port");
	ok(rt_default_port("123457", "0", NULL) != p, "default port: another job, another port");
	is_int(rt_default_port(NULL, NULL, NULL), 61000, "default port without ids");
	is_int(rt_default_port(NULL, NULL, ""), 61000, "default port: an empty secret is none");
	/* With the step's secret: unpredictable without it, the same for every rank with it. */
	int ps = rt_default_port("123456", "0", "0123456789abcdef0123456789abcdef");
	ok(ps >= 61000 && ps < 65500, "default port with a secret: in 61000..65499 (%d)", ps);
	is_int(rt_default_port("123456", "0", "0123456789abcdef0123456789abcdef"), ps,
	       "default port with a secret: the same for every rank");
	int differ = 0;
	char sec[33];
	for (int i = 0; i < 16; i++) {
		snprintf(sec, sizeof(sec), "%032x", i * 7919 + 1);
		differ +=
		    rt_default_port("123456", "0", sec) != rt_default_port("123456", "0", NULL);
	}
	ok(differ >= 14,
	   "default port with a secret: not the one job and step alone give (%d of 16 "
	   "secrets)",
	   differ);
	int seen = 0;
	for (int i = 0; i < 16; i++) {
		snprintf(sec, sizeof(sec), "%032x", i * 7919 + 1);
		seen += rt_default_port("123456", "0", sec) == ps;
	}
	ok(seen <= 1, "default port with a secret: another secret, another port (%d of 16 alike)",
	   seen);

	enum rt_schema s;
	ok(rt_schema_from_name("legacy", &s) == 0 && s == RT_SCHEMA_LEGACY, "schema name legacy");
	ok(rt_schema_from_name("hccl", &s) == 0 && s == RT_SCHEMA_HCCL, "schema name hccl");
	ok(rt_schema_from_name("json", &s) == -1, "unknown schema name");
	is(rt_schema_name(RT_SCHEMA_DPTRAIN), "dptrain", "schema name of dptrain");
}

/* rt_task_threads for local ranks, -1 when it fails */
static int threads_for(int local)
{
	struct dp_error err;
	int t;
	return rt_task_threads(local, &t, &err) == 0 ? t : -1;
}

/* rt_task_threads: Slurm's CPUs for the task, shared by the node's ranks, never more than the
 * CPUs this process may run on. */
static void test_task_threads(void)
{
	cpu_set_t set;
	struct dp_error err;
	int t, mine = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
#define CAP(n) ((n) < mine ? (n) : mine)
	unsetenv("SLURM_CPUS_PER_TASK");
	unsetenv("SLURM_CPUS_ON_NODE");
	is_int(threads_for(1), mine, "no Slurm, one rank: the CPUs it may run on");
	is_int(threads_for(2), mine / 2 ? mine / 2 : 1, "no Slurm, two ranks: half each");
	is_int(threads_for(4 * mine), 1, "more ranks than CPUs: 1 each");
	is_int(threads_for(0), mine, "0 ranks counts as 1");
	setenv("SLURM_CPUS_ON_NODE", "1", 1);
	is_int(threads_for(2), 1, "SLURM_CPUS_ON_NODE=1, two ranks: 1");
	setenv("SLURM_CPUS_ON_NODE", "64", 1);
	is_int(threads_for(4), CAP(16), "SLURM_CPUS_ON_NODE=64, four ranks: 16, or fewer CPUs");
	setenv("SLURM_CPUS_PER_TASK", "1", 1);
	is_int(threads_for(4), 1, "SLURM_CPUS_PER_TASK=1 wins");
	setenv("SLURM_CPUS_PER_TASK", "1000", 1);
	is_int(threads_for(1), mine, "SLURM_CPUS_PER_TASK=1000: no more than the CPUs");
	setenv("SLURM_CPUS_PER_TASK", "two", 1);
	ok(rt_task_threads(1, &t, &err) == -1, "a malformed SLURM_CPUS_PER_TASK fails");
	like(err.text, "SLURM_CPUS_PER_TASK='two'", "... naming it and its value");
	unsetenv("SLURM_CPUS_PER_TASK");
	unsetenv("SLURM_CPUS_ON_NODE");
#undef CAP
}

int main(void)
{
	/* Memory-backed where there is one: the 1000 rewrites below would otherwise spend ~10 s in
	 * fsync, and what they test (rename is atomic) does not depend on the disk. */
	const char *base = getenv("TMPDIR");
	if (!base || !*base)
		base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(tmpdir, sizeof(tmpdir), "%s/rt-test.XXXXXX", base);
	if (!mkdtemp(tmpdir))
		bail_out("mkdtemp %s: %s", tmpdir, strerror(errno));

	test_round_trip(1, 1, 0, 0);
	test_round_trip(8, 2, 1, 0);
	test_round_trip(8, 3, 0, 1);
	test_round_trip(4096, 512, 1, 0);
	test_round_trip(4096, 64, 0, 1);
	test_build();
	test_write_errors();
	for (enum rt_schema s = RT_SCHEMA_DPTRAIN; s <= RT_SCHEMA_LEGACY; s++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/rt-%s.json", tmpdir, rt_schema_name(s));
		unlink(path);
	}
	test_concurrent();
	test_from_env();
	test_task_threads();
	test_helpers();
	rmdir(tmpdir);
	return done_testing();
}
