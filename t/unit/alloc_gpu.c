/* alloc_gpu.c — unit tests of the launcher's GPU choice: CUDA_VISIBLE_DEVICES patterns against
 * local ranks, device counting, and the shared-GPU check. Owns nothing but its temp dir. */
#include "common/error.h"
#include "launcher/alloc.h"
#include "launcher/alloc_source.h"
#include "t/lib/tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void pick(const char *cvd, int lr, int want_index, const char *want_id, int want_count)
{
	struct alloc_gpu g;
	struct dp_error err = {""};
	int rc = alloc_gpu_select(cvd, lr, &g, &err);

	ok(rc == 0, "CUDA_VISIBLE_DEVICES='%s' local rank %d accepted%s%s", cvd, lr, rc ? ": " : "",
	   rc ? err.text : "");
	is_int(g.index, want_index, "'%s' local rank %d -> device index %d", cvd, lr, want_index);
	is(g.id, want_id, "'%s' local rank %d -> physical id '%s'", cvd, lr, want_id);
	is_int(g.count, want_count, "'%s' -> %d visible", cvd, want_count);
}

static void refuse(const char *cvd, const char *needle)
{
	struct alloc_gpu g;
	struct dp_error err = {""};

	ok(alloc_gpu_select(cvd, 0, &g, &err) == -1, "CUDA_VISIBLE_DEVICES='%s' is refused", cvd);
	like(err.text, needle, "... with a message naming '%s'", needle);
	is_int(g.index, -1, "... and no GPU chosen");
}

static void test_patterns(void)
{
	char id[8];
	int lr;

	for (lr = 0; lr < 8; lr++)
		pick("0", lr, 0, "0", 1);
	for (lr = 0; lr < 8; lr++) {
		snprintf(id, sizeof(id), "%d", lr % 4);
		pick("0,1,2,3", lr, lr % 4, id, 4);
	}
	for (lr = 0; lr < 8; lr++)
		pick("2,3", lr, lr % 2, lr % 2 ? "3" : "2", 2);
	/* Slurm's --gpus-per-task=1: one GPU per task, another one in each. */
	pick("5", 3, 0, "5", 1);
	pick("007", 0, 0, "7", 1);
	pick("", 0, -1, "", 0);
	pick("", 5, -1, "", 0);
	pick("NoDevFiles", 0, -1, "", 0);
	pick("-1", 2, -1, "", 0);
	pick("GPU-8d1e2c6f-1234-5678-9abc-def012345678", 0, 0,
	     "GPU-8d1e2c6f-1234-5678-9abc-def012345678", 1);
	pick("GPU-aaaa,GPU-bbbb", 1, 1, "GPU-bbbb", 2);
	pick("GPU-aaaa,GPU-bbbb", 2, 0, "GPU-aaaa", 2);
	pick("MIG-GPU-8d1e2c6f/1/0", 0, 0, "MIG-GPU-8d1e2c6f/1/0", 1);

	refuse("0, 1", "CUDA_VISIBLE_DEVICES='0, 1'");
	refuse(" 0", "entry 1");
	refuse("0 ", "is not a device index");
	refuse("0,,1", "entry 2 ('')");
	refuse("0,", "entry 2");
	refuse(",0", "entry 1");
	refuse("abc", "'abc'");
	refuse("0;1", "'0;1'");
	refuse("-2", "'-2'");
	refuse("0,-1", "'-1'");
	refuse("GPU-", "'GPU-'");
	refuse("GPU-12 34", "'GPU-12 34'");
	refuse("1234567", "'1234567'");
	refuse("0,0", "lists device '0' twice");
	refuse("1,01", "lists device '1' twice");
	refuse("GPU-a,GPU-a", "twice");
}

static void test_negative_local_rank(void)
{
	struct alloc_gpu g;
	struct dp_error err = {""};

	ok(alloc_gpu_select("0,1", -1, &g, &err) == -1, "local rank -1 is refused");
	like(err.text, "local rank -1", "... naming it");
}

static void touch(const char *dir, const char *name)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT, 0644);
	if (fd >= 0)
		close(fd);
}

static void test_count_devices(void)
{
	char dir[] = "/tmp/dptrain-gpu-XXXXXX", path[512];
	struct alloc_opts o;
	struct alloc_gpu g;
	struct dp_error err = {""};
	const char *names[] = {"nvidia0",    "nvidia1", "nvidia12", "nvidiactl",
			       "nvidia-uvm", "nvidia",	"nvidia3x", "nvme0"};
	size_t i;

	if (!mkdtemp(dir)) {
		skip(9, "cannot create a temporary directory");
		return;
	}
	is_int(alloc_gpu_count_devices(dir), 0, "an empty /dev has no GPUs");
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		touch(dir, names[i]);
	is_int(alloc_gpu_count_devices(dir), 3,
	       "nvidia0, nvidia1, nvidia12 count; nvidiactl, "
	       "nvidia-uvm, nvidia3x do not");
	is_int(alloc_gpu_count_devices("/nonexistent-dptrain"), 0, "a missing dir has no GPUs");

	/* Unset CUDA_VISIBLE_DEVICES: all GPUs for the env source, none under Slurm. */
	memset(&o, 0, sizeof(o));
	o.dev_dir = dir;
	unsetenv("CUDA_VISIBLE_DEVICES");
	ok(alloc_self_gpu(&o, ALLOC_SRC_ENV, 4, &g, &err) == 0, "env source, unset: accepted");
	is_int(g.index, 1, "env source, unset, 3 device nodes: local rank 4 -> GPU 1");
	ok(alloc_self_gpu(&o, ALLOC_SRC_SLURM, 4, &g, &err) == 0, "slurm source, unset: accepted");
	is_int(g.index, -1, "slurm source, unset: no GPU (the step did not ask for one)");
	setenv("CUDA_VISIBLE_DEVICES", "6,7", 1);
	ok(alloc_self_gpu(&o, ALLOC_SRC_ENV, 3, &g, &err) == 0 && g.index == 1 &&
	       strcmp(g.id, "7") == 0,
	   "set: CUDA_VISIBLE_DEVICES wins over the device nodes");
	unsetenv("CUDA_VISIBLE_DEVICES");
	is_int(alloc_self_gpu(&o, ALLOC_SRC_PMIX, 0, &g, &err), 0, "pmix source, unset: accepted");

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

static void set_rank(struct alloc_rank *x, const char *host, int node, int lr, int gpu,
		     const char *id)
{
	memset(x, 0, sizeof(*x));
	snprintf(x->host, sizeof(x->host), "%s", host);
	snprintf(x->addr, sizeof(x->addr), "127.0.0.1");
	x->node_rank = node;
	x->local_rank = lr;
	x->gpu.index = gpu;
	snprintf(x->gpu.id, sizeof(x->gpu.id), "%s", id);
}

static void test_shared_gpu(void)
{
	struct alloc_rank ranks[4];
	struct alloc a;
	struct dp_error err = {""};

	memset(&a, 0, sizeof(a));
	a.world_size = 4;
	a.ranks = ranks;
	/* Physical ids, not indices: both ranks of n1 see their GPU as index 0. */
	set_rank(&ranks[0], "n1", 0, 0, 0, "0");
	set_rank(&ranks[1], "n1", 0, 1, 0, "1");
	set_rank(&ranks[2], "n2", 1, 0, 0, "0");
	set_rank(&ranks[3], "n2", 1, 1, 0, "1");
	is_int(alloc_check_shared_gpu(&a, 0, &err), 0,
	       "one GPU per rank (same ids on different nodes) is fine");

	set_rank(&ranks[3], "n2", 1, 1, 1, "0");
	is_int(alloc_check_shared_gpu(&a, 0, &err), -1, "ranks 2 and 3 on n2 on GPU 0 is an error");
	like(err.text, "ranks 2 and 3 on n2 would share GPU '0'",
	     "... naming the ranks, node and GPU");
	like(err.text, "device.allow_shared_gpu", "... and how to allow it");
	is_int(alloc_check_shared_gpu(&a, 1, &err), 0, "... unless device.allow_shared_gpu");

	set_rank(&ranks[3], "n2", 1, 1, -1, "");
	set_rank(&ranks[2], "n2", 1, 0, -1, "");
	is_int(alloc_check_shared_gpu(&a, 0, &err), 0, "CPU ranks (no GPU) never share");
}

/* What a LOCAL_RANK-indexing script is told, per binding (the local cluster's --gpus emulates
 * them end to end in t0330). */
static void test_advice(void)
{
	struct alloc_rank ranks[4];
	struct alloc a;
	char self[512], all[1024];
	int r;

	memset(&a, 0, sizeof(a));
	a.world_size = 4;
	a.ranks = ranks;
	/* --gpus-per-node=2, two ranks a node: LOCAL_RANK is the device */
	for (r = 0; r < 4; r++) {
		set_rank(&ranks[r], r < 2 ? "n1" : "n2", r / 2, r % 2, r % 2, r % 2 ? "1" : "0");
		ranks[r].gpu.count = 2;
	}
	setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
	for (r = 0; r < 4; r++) {
		a.rank = r;
		a.local_rank = r % 2;
		is_int(alloc_gpu_advice(&a, self, sizeof(self), all, sizeof(all)), 0,
		       "--gpus-per-node: rank %d advised", r);
		ok(self[0] == '\0' && all[0] == '\0', "... nothing to say");
	}
	/* --gpus-per-task=1: each sees one, its index 0 */
	for (r = 0; r < 4; r++) {
		set_rank(&ranks[r], r < 2 ? "n1" : "n2", r / 2, r % 2, 0, r % 2 ? "1" : "0");
		ranks[r].gpu.count = 1;
	}
	setenv("CUDA_VISIBLE_DEVICES", "1", 1);
	a.rank = 3;
	a.local_rank = 1;
	is_int(alloc_gpu_advice(&a, self, sizeof(self), all, sizeof(all)), 0,
	       "--gpus-per-task: rank 3 advised");
	like(self, "LOCAL_RANK is 1 but this rank sees 1 GPU (CUDA_VISIBLE_DEVICES=1)",
	     "... it is told why LOCAL_RANK fails");
	like(self, "use DPTRAIN_GPU (0 here) or LOCAL_RANK % torch.cuda.device_count()",
	     "... and what to use");
	is(all, "", "... and only rank 0 speaks for all");
	setenv("CUDA_VISIBLE_DEVICES", "0", 1);
	a.rank = 0;
	a.local_rank = 0;
	alloc_gpu_advice(&a, self, sizeof(self), all, sizeof(all));
	is(self, "", "rank 0 (LOCAL_RANK 0) itself is fine");
	like(all,
	     "ranks 1, 3 have a LOCAL_RANK at or above the number of GPUs they see (rank 1 sees 1;",
	     "rank 0 names the ranks it fails on");
	/* CPU ranks: nothing to say */
	for (r = 0; r < 4; r++)
		set_rank(&ranks[r], r < 2 ? "n1" : "n2", r / 2, r % 2, -1, "");
	unsetenv("CUDA_VISIBLE_DEVICES");
	alloc_gpu_advice(&a, self, sizeof(self), all, sizeof(all));
	ok(self[0] == '\0' && all[0] == '\0', "no GPUs: nothing to say");
}

/* The record the ranks exchange carries how many GPUs each sees. */
static void test_record(void)
{
	struct alloc_rank x, y;
	char buf[ALLOC_RECORD_MAX];
	int nodeid, port;

	memset(&x, 0, sizeof(x));
	set_rank(&x, "n2", 1, 3, 1, "GPU-aaaa");
	x.gpu.count = 2;
	alloc_record_format(buf, sizeof(buf), &x, 1, 29500);
	memset(&y, 0, sizeof(y));
	is_int(alloc_record_parse(buf, &y, &nodeid, &port), 0, "a record parses: %s", buf);
	ok(strcmp(y.host, "n2") == 0 && y.local_rank == 3 && y.gpu.index == 1 && y.gpu.count == 2 &&
	       strcmp(y.gpu.id, "GPU-aaaa") == 0 && nodeid == 1 && port == 29500,
	   "... back to what was written");
	is_int(alloc_record_parse("1 n2 127.0.0.1 1 3 1 GPU-aaaa 29500", &y, &nodeid, &port), -1,
	       "a record of version 1 (another dptrain) is refused");
}

int main(void)
{
	test_patterns();
	test_negative_local_rank();
	test_count_devices();
	test_shared_gpu();
	test_advice();
	test_record();
	return done_testing();
}
