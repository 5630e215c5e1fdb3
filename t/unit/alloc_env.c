/* alloc_env.c — unit tests of allocation discovery without PMIx: the torchrun-style env source,
 * the SLURM_* source and its layouts, master endpoint overrides and derivation, and the
 * messages bad variables give. Changes only its own process environment. */
#include "common/error.h"
#include "launcher/alloc.h"
#include "launcher/alloc_source.h"
#include "t/lib/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A clean environment with exactly the given NAME=VALUE pairs (NULL-terminated). */
static void env_only(const char *const *vars)
{
	char name[128];
	const char *eq;

	clearenv();
	setenv("PATH", "/usr/bin:/bin", 1);
	for (; vars && *vars; vars++) {
		eq = strchr(*vars, '=');
		snprintf(name, sizeof(name), "%.*s", (int)(eq - *vars), *vars);
		setenv(name, eq + 1, 1);
	}
}

static void opts_init(struct alloc_opts *o, enum alloc_source src)
{
	memset(o, 0, sizeof(*o));
	o->source = src;
	o->timeout_s = 5;
	o->iface = "lo";
	o->stall_rank = -1;
	o->dev_dir = "/nonexistent-dptrain";
}

/* Discovery with these variables must fail with a message containing needle. */
static void refused(enum alloc_source src, const char *const *vars, const char *needle,
		    const char *what)
{
	struct alloc_opts o;
	struct alloc a;
	struct dp_error err = {""};

	env_only(vars);
	opts_init(&o, src);
	ok(alloc_discover(&a, &o, &err) == -1, "refused: %s", what);
	like(err.text, needle, "... saying '%s'", needle);
	alloc_free(&a);
}

static void test_env_single_node(void)
{
	const char *vars[] = {"RANK=2",
			      "WORLD_SIZE=4",
			      "MASTER_ADDR=127.0.0.1",
			      "MASTER_PORT=29501",
			      "CUDA_VISIBLE_DEVICES=0,1,2,3",
			      NULL};
	struct alloc_opts o;
	struct alloc a;
	struct dp_error err = {""};
	int r, layout_ok = 1;

	env_only(vars);
	opts_init(&o, ALLOC_SRC_ENV);
	ok(alloc_discover(&a, &o, &err) == 0, "env source: RANK/WORLD_SIZE/MASTER_* %s", err.text);
	is_int(a.source, ALLOC_SRC_ENV, "source is env");
	is_int(a.rank, 2, "rank 2");
	is_int(a.world_size, 4, "world size 4");
	is_int(a.local_rank, 2, "without LOCAL_RANK: one node, local rank = rank");
	is_int(a.local_size, 4, "local size = world size");
	is_int(a.node_rank, 0, "node 0");
	is_int(a.node_count, 1, "one node");
	is(a.master_addr, "127.0.0.1", "master address from MASTER_ADDR");
	is_int(a.master_port, 29501, "master port from MASTER_PORT");
	is(a.job_id, "local", "job id 'local' outside Slurm");
	is(a.step_id, "0", "step id 0 outside Slurm");
	for (r = 0; r < 4; r++)
		if (a.ranks[r].local_rank != r || a.ranks[r].gpu.index != r ||
		    strcmp(a.ranks[r].addr, "127.0.0.1") != 0 ||
		    strcmp(a.ranks[r].host, a.ranks[0].host) != 0)
			layout_ok = 0;
	ok(layout_ok, "every rank on this host, address of 'lo', GPU = local rank (shared env)");
	alloc_free(&a);

	/* Same variables with GPUs for half the ranks: two ranks per GPU. */
	setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
	ok(alloc_discover(&a, &o, &err) == -1, "4 ranks on 2 GPUs are refused");
	like(err.text, "ranks 0 and 2 on", "... naming two ranks that would share");
	like(err.text, "share GPU '0'", "... and the GPU");
	alloc_free(&a);
	o.allow_shared_gpu = 1;
	ok(alloc_discover(&a, &o, &err) == 0 && a.ranks[2].gpu.index == 0,
	   "... accepted with allow_shared_gpu; rank 2 on GPU 0");
	alloc_free(&a);
}

static void test_env_two_nodes(void)
{
	const char *vars[] = {
	    "RANK=5",	    "WORLD_SIZE=8",	     "LOCAL_RANK=1",	  "LOCAL_WORLD_SIZE=4",
	    "GROUP_RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29502", NULL};
	struct alloc_opts o;
	struct alloc a;
	struct dp_error err = {""};

	env_only(vars);
	opts_init(&o, ALLOC_SRC_ENV);
	ok(alloc_discover(&a, &o, &err) == 0, "env source on two nodes %s", err.text);
	is_int(a.node_rank, 1, "node 1 from GROUP_RANK");
	is_int(a.node_count, 2, "two nodes");
	is_int(a.local_rank, 1, "local rank 1");
	is_int(a.local_size, 4, "4 ranks per node");
	is_int(a.ranks[2].node_rank, 0, "rank 2 is on node 0");
	is(a.ranks[0].addr, "127.0.0.1", "node 0's address is the master's");
	is(a.ranks[0].host, "unknown-node0", "node 0's name is unknown to the env source");
	is_int(a.ranks[0].gpu.index, -1, "other nodes' GPUs are unknown");
	alloc_free(&a);

	/* NODE_RANK is the other spelling. */
	unsetenv("GROUP_RANK");
	setenv("NODE_RANK", "1", 1);
	ok(alloc_discover(&a, &o, &err) == 0 && a.node_rank == 1,
	   "NODE_RANK works like GROUP_RANK");
	alloc_free(&a);
	unsetenv("NODE_RANK");
	ok(alloc_discover(&a, &o, &err) == 0 && a.node_rank == 1,
	   "without either, node = RANK / LOCAL_WORLD_SIZE");
	alloc_free(&a);
}

static void test_env_errors(void)
{
	const char *no_rank[] = {"WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
	const char *no_world[] = {"RANK=0", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
	const char *too_big[] = {"RANK=4", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
	const char *bad_rank[] = {"RANK=abc", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1",
				  NULL};
	const char *neg_rank[] = {"RANK=-1", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1",
				  NULL};
	const char *zero_world[] = {"RANK=0", "WORLD_SIZE=0", "MASTER_ADDR=h", "MASTER_PORT=1",
				    NULL};
	const char *half_local[] = {"RANK=0",	     "WORLD_SIZE=4",  "LOCAL_RANK=0",
				    "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
	const char *uneven[] = {"RANK=0",
				"WORLD_SIZE=4",
				"LOCAL_RANK=0",
				"LOCAL_WORLD_SIZE=3",
				"MASTER_ADDR=h",
				"MASTER_PORT=1",
				NULL};
	const char *local_big[] = {"RANK=0",
				   "WORLD_SIZE=4",
				   "LOCAL_RANK=2",
				   "LOCAL_WORLD_SIZE=2",
				   "MASTER_ADDR=h",
				   "MASTER_PORT=1",
				   NULL};
	const char *numbering[] = {
	    "RANK=5",	    "WORLD_SIZE=8",  "LOCAL_RANK=1",  "LOCAL_WORLD_SIZE=4",
	    "GROUP_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
	const char *no_addr[] = {"RANK=0", "WORLD_SIZE=4", "MASTER_PORT=1", NULL};
	const char *no_port[] = {"RANK=0", "WORLD_SIZE=4", "MASTER_ADDR=h", NULL};

	refused(ALLOC_SRC_ENV, no_rank, "RANK is not set", "env source without RANK");
	refused(ALLOC_SRC_ENV, no_world, "WORLD_SIZE is not set", "env source without WORLD_SIZE");
	refused(ALLOC_SRC_ENV, too_big, "RANK=4 is not below WORLD_SIZE=4", "RANK >= WORLD_SIZE");
	refused(ALLOC_SRC_ENV, bad_rank, "RANK='abc' is not an integer", "RANK=abc");
	refused(ALLOC_SRC_ENV, neg_rank, "RANK='-1' is not an integer >= 0", "RANK=-1");
	refused(ALLOC_SRC_ENV, zero_world, "WORLD_SIZE='0' is not an integer >= 1", "WORLD_SIZE=0");
	refused(ALLOC_SRC_ENV, half_local, "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not",
		"LOCAL_RANK without LOCAL_WORLD_SIZE");
	refused(ALLOC_SRC_ENV, uneven, "same number of ranks on every node",
		"LOCAL_WORLD_SIZE not dividing WORLD_SIZE");
	refused(ALLOC_SRC_ENV, local_big, "LOCAL_RANK < LOCAL_WORLD_SIZE",
		"LOCAL_RANK >= LOCAL_WORLD_SIZE");
	refused(ALLOC_SRC_ENV, numbering, "numbered node by node",
		"RANK inconsistent with GROUP_RANK/LOCAL_RANK");
	refused(ALLOC_SRC_ENV, no_addr, "MASTER_ADDR is not set", "env source without MASTER_ADDR");
	refused(ALLOC_SRC_ENV, no_port, "MASTER_PORT is not set", "env source without MASTER_PORT");
	refused(ALLOC_SRC_AUTO, NULL, "no allocation found", "nothing at all in the environment");
}

#define SLURM_VARS(procid, localid, nodeid)                                                        \
	"SLURM_PROCID=" procid, "SLURM_LOCALID=" localid, "SLURM_NODEID=" nodeid,                  \
	    "SLURM_JOB_ID=4242", "SLURM_STEP_ID=3"

static void test_slurm(void)
{
	const char *block[] = {SLURM_VARS("3", "0", "1"),	"SLURM_STEP_NUM_TASKS=4",
			       "SLURM_STEP_NUM_NODES=2",	"SLURM_STEP_NODELIST=n[1-2]",
			       "SLURM_STEP_TASKS_PER_NODE=3,1", "MASTER_ADDR=127.0.0.1",
			       "CUDA_VISIBLE_DEVICES=1",	NULL};
	struct alloc_opts o;
	struct alloc a;
	struct dp_error err = {""};
	int port1, port2;

	env_only(block);
	opts_init(&o, ALLOC_SRC_AUTO);
	ok(alloc_discover(&a, &o, &err) == 0, "SLURM_* without PMIx %s", err.text);
	is_int(a.source, ALLOC_SRC_SLURM, "auto picks slurm (no PMIX_RANK)");
	is_int(a.rank, 3, "rank from SLURM_PROCID");
	is_int(a.world_size, 4, "world from SLURM_STEP_NUM_TASKS");
	is_int(a.node_rank, 1, "node 1");
	is_int(a.local_size, 1, "alone on n2");
	is(a.ranks[3].host, "n2", "rank 3 on n2");
	is(a.ranks[2].host, "n1", "block layout: rank 2 on n1");
	is_int(a.ranks[2].local_rank, 2, "... as its local rank 2");
	is_int(a.ranks[3].gpu.index, 0, "own GPU from CUDA_VISIBLE_DEVICES=1: index 0");
	is(a.ranks[3].gpu.id, "1", "... physical id 1");
	is_int(a.ranks[0].gpu.index, -1, "peers' GPUs are unknown without PMIx");
	is(a.ranks[0].addr, "0.0.0.0", "an unresolvable peer node's address is 0.0.0.0 (unknown)");
	is(a.ranks[3].addr, "127.0.0.1", "own address from the interface (lo)");
	is(a.master_addr, "127.0.0.1", "MASTER_ADDR wins over the first node");
	is(a.job_id, "4242", "job id from SLURM_JOB_ID");
	is(a.step_id, "3", "step id from SLURM_STEP_ID");
	port1 = a.master_port;
	ok(port1 > 60999 && port1 <= 65535,
	   "derived master port %d is above Linux's ephemeral range (32768-60999)", port1);
	alloc_free(&a);

	ok(alloc_discover(&a, &o, &err) == 0 && a.master_port == port1,
	   "the derived port is the same every time (every rank computes it alone)");
	alloc_free(&a);
	setenv("SLURM_STEP_ID", "4", 1);
	ok(alloc_discover(&a, &o, &err) == 0, "next step");
	port2 = a.master_port;
	ok(port2 != port1 && port2 > 60999 && port2 <= 65535,
	   "the next step of the job gets another port (%d, %d)", port1, port2);
	alloc_free(&a);

	setenv("MASTER_PORT", "29400", 1);
	ok(alloc_discover(&a, &o, &err) == 0 && a.master_port == 29400,
	   "MASTER_PORT wins over the derived port");
	alloc_free(&a);

	/* The master is the first node, resolved: localhost resolves everywhere. */
	env_only(block);
	unsetenv("MASTER_ADDR");
	setenv("SLURM_STEP_NODELIST", "localhost,n2", 1);
	ok(alloc_discover(&a, &o, &err) == 0, "first node 'localhost' %s", err.text);
	is(a.master_addr, "127.0.0.1", "master = first node of SLURM_STEP_NODELIST, resolved");
	alloc_free(&a);
	setenv("SLURM_STEP_NODELIST", "no-such-node-dptrain.invalid,n2", 1);
	ok(alloc_discover(&a, &o, &err) == -1, "unresolvable first node: refused");
	like(err.text, "no-such-node-dptrain.invalid", "... naming the node");
	like(err.text, "set MASTER_ADDR", "... and what to do");
	alloc_free(&a);
}

static void test_slurm_layouts(void)
{
	const char *cyclic[] = {SLURM_VARS("1", "0", "1"),
				"SLURM_NTASKS=4",
				"SLURM_STEP_NODELIST=n[1-2]",
				"SLURM_STEP_TASKS_PER_NODE=2(x2)",
				"SLURM_DISTRIBUTION=cyclic",
				"MASTER_ADDR=127.0.0.1",
				NULL};
	const char *plane[] = {SLURM_VARS("6", "2", "1"),
			       "SLURM_NTASKS=8",
			       "SLURM_STEP_NODELIST=n[1-2]",
			       "SLURM_STEP_TASKS_PER_NODE=4(x2)",
			       "SLURM_DISTRIBUTION=plane=2",
			       "MASTER_ADDR=127.0.0.1",
			       NULL};
	const char *wrong_node[] = {SLURM_VARS("1", "1", "1"),	  "SLURM_NTASKS=4",
				    "SLURM_STEP_NODELIST=n[1-2]", "SLURM_STEP_TASKS_PER_NODE=2(x2)",
				    "MASTER_ADDR=127.0.0.1",	  NULL};
	const char *arbitrary[] = {SLURM_VARS("0", "0", "0"),
				   "SLURM_NTASKS=2",
				   "SLURM_STEP_NODELIST=n[1-2]",
				   "SLURM_STEP_TASKS_PER_NODE=1(x2)",
				   "SLURM_DISTRIBUTION=arbitrary",
				   "MASTER_ADDR=127.0.0.1",
				   NULL};
	const char *count_mismatch[] = {
	    SLURM_VARS("0", "0", "0"),	  "SLURM_NTASKS=4",
	    "SLURM_STEP_NODELIST=n[1-3]", "SLURM_STEP_TASKS_PER_NODE=2(x2)",
	    "MASTER_ADDR=127.0.0.1",	  NULL};
	const char *no_list[] = {SLURM_VARS("0", "0", "0"), "SLURM_NTASKS=4",
				 "SLURM_STEP_TASKS_PER_NODE=4", "MASTER_ADDR=127.0.0.1", NULL};
	const char *nodes_mismatch[] = {SLURM_VARS("0", "0", "0"),
					"SLURM_NTASKS=4",
					"SLURM_STEP_NUM_NODES=3",
					"SLURM_STEP_NODELIST=n[1-2]",
					"SLURM_STEP_TASKS_PER_NODE=2(x2)",
					"MASTER_ADDR=127.0.0.1",
					NULL};
	const char *bad_port[] = {SLURM_VARS("0", "0", "0"),
				  "SLURM_NTASKS=1",
				  "SLURM_STEP_NODELIST=n1",
				  "SLURM_STEP_TASKS_PER_NODE=1",
				  "MASTER_ADDR=127.0.0.1",
				  "MASTER_PORT=70000",
				  NULL};
	struct alloc_opts o;
	struct alloc a;
	struct dp_error err = {""};
	int node_of[8], local_of[8], counts[2] = {3, 2}, i, same;

	env_only(cyclic);
	opts_init(&o, ALLOC_SRC_SLURM);
	ok(alloc_discover(&a, &o, &err) == 0, "cyclic distribution %s", err.text);
	ok(a.world_size == 4 && strcmp(a.ranks[0].host, "n1") == 0 &&
	       strcmp(a.ranks[1].host, "n2") == 0 && strcmp(a.ranks[2].host, "n1") == 0 &&
	       a.ranks[2].local_rank == 1 && a.ranks[3].local_rank == 1,
	   "cyclic: ranks 0,2 on n1 and 1,3 on n2");
	alloc_free(&a);

	env_only(plane);
	ok(alloc_discover(&a, &o, &err) == 0, "plane=2 distribution %s", err.text);
	ok(strcmp(a.ranks[1].host, "n1") == 0 && strcmp(a.ranks[2].host, "n2") == 0 &&
	       strcmp(a.ranks[4].host, "n1") == 0 && a.ranks[4].local_rank == 2 &&
	       a.ranks[7].local_rank == 3,
	   "plane=2: ranks 0,1,4,5 on n1 and 2,3,6,7 on n2");
	alloc_free(&a);

	refused(ALLOC_SRC_SLURM, wrong_node, "run with --mpi=pmix",
		"Slurm's own node/local rank disagreeing with the derived layout");
	refused(ALLOC_SRC_SLURM, arbitrary, "SLURM_DISTRIBUTION='arbitrary'",
		"a distribution whose layout cannot be derived");
	refused(ALLOC_SRC_SLURM, count_mismatch, "names 3 nodes but", "nodelist vs tasks per node");
	refused(ALLOC_SRC_SLURM, no_list, "SLURM_STEP_NODELIST is not set", "no node list");
	refused(ALLOC_SRC_SLURM, nodes_mismatch, "SLURM_STEP_NUM_NODES=3", "node count mismatch");
	refused(ALLOC_SRC_SLURM, bad_port, "MASTER_PORT='70000' is not a port number",
		"MASTER_PORT=70000");

	/* The layout function itself. */
	ok(rt_slurm_layout(NULL, 2, counts, 5, node_of, local_of, &err) == 0,
	   "block layout of 3,2");
	same = node_of[0] == 0 && node_of[2] == 0 && node_of[3] == 1 && local_of[4] == 1;
	ok(same, "block: 0-2 on node 0, 3-4 on node 1");
	ok(rt_slurm_layout("cyclic:block", 2, counts, 5, node_of, local_of, &err) == 0,
	   "cyclic:block (only the node level counts)");
	ok(node_of[0] == 0 && node_of[1] == 1 && node_of[4] == 0 && local_of[4] == 2,
	   "cyclic over 3,2: 0,2,4 on node 0");
	ok(rt_slurm_layout("block", 2, counts, 6, node_of, local_of, &err) == -1,
	   "more ranks than tasks per node hold is refused");
	like(err.text, "hold 5 ranks, not 6", "... with both numbers");
	for (i = 0; i < 5; i++)
		node_of[i] = -1;
	ok(rt_slurm_layout("*", 2, counts, 5, node_of, local_of, &err) == 0 && node_of[2] == 0,
	   "'*' is the default (block)");
}

static void test_master_overrides(void)
{
	const char *base[] = {"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1",
			      NULL};
	struct {
		const char *port, *needle;
	} bad_ports[] = {
	    {"0", "MASTER_PORT='0' is not a port number (1-65535)"},
	    {"70000", "MASTER_PORT='70000'"},
	    {"abc", "MASTER_PORT='abc'"},
	    {"", "MASTER_PORT=''"},
	    {"12a", "MASTER_PORT='12a'"},
	    {"-5", "MASTER_PORT='-5'"},
	    {" 80", "MASTER_PORT=' 80'"},
	};
	char addr[RT_HOST_MAX];
	struct dp_error err = {""};
	size_t i;
	int port;

	for (i = 0; i < sizeof(bad_ports) / sizeof(bad_ports[0]); i++) {
		env_only(base);
		setenv("MASTER_PORT", bad_ports[i].port, 1);
		ok(alloc_user_master_port(&port, &err) == -1, "MASTER_PORT='%s' refused",
		   bad_ports[i].port);
		like(err.text, bad_ports[i].needle, "... saying so");
	}
	setenv("MASTER_PORT", "65535", 1);
	ok(alloc_user_master_port(&port, &err) == 1 && port == 65535, "MASTER_PORT=65535 accepted");
	unsetenv("MASTER_PORT");
	is_int(alloc_user_master_port(&port, &err), 0, "unset MASTER_PORT: 0");

	setenv("MASTER_ADDR", "", 1);
	ok(alloc_user_master_addr(addr, &err) == -1, "MASTER_ADDR='' refused");
	like(err.text, "is empty", "... as empty");
	setenv("MASTER_ADDR", "a b", 1);
	ok(alloc_user_master_addr(addr, &err) == -1, "MASTER_ADDR='a b' refused");
	like(err.text, "blank", "... for the blank");
	setenv("MASTER_ADDR", "head-node.example", 1);
	ok(alloc_user_master_addr(addr, &err) == 1 && strcmp(addr, "head-node.example") == 0,
	   "a host name is a valid MASTER_ADDR");
	unsetenv("MASTER_ADDR");
	is_int(alloc_user_master_addr(addr, &err), 0, "unset MASTER_ADDR: 0");
}

static void test_ports(void)
{
	struct dp_error err = {""};
	int port = 0, port2 = 0;

	ok(alloc_port_parse("29500", "X", &port, &err) == 0 && port == 29500, "port 29500 parses");
	ok(alloc_port_parse("1", "X", &port, &err) == 0 && port == 1, "port 1 parses");
	ok(alloc_port_parse("65536", "X", &port, &err) == -1, "65536 is refused");
	like(err.text, "X='65536'", "... naming the variable");
	ok(alloc_port_pick("127.0.0.1", &port, &err) == 0 && port > 0 && port < 65536,
	   "a free port on 127.0.0.1: %d", port);
	ok(alloc_port_pick("127.0.0.1", &port2, &err) == 0 && port2 > 0, "another: %d", port2);
	ok(alloc_port_pick("not-an-address", &port, &err) == -1, "picking on a non-address fails");
	like(err.text, "'not-an-address' is not an IP address", "... saying why");
}

static void test_misc(void)
{
	enum alloc_source s;
	char job[RT_ID_MAX], step[RT_ID_MAX], buf[256], addr[RT_ADDR_MAX];
	struct dp_error err = {""};
	int ranks[] = {2, 5, 6, 7, 9};

	ok(alloc_source_from_name("pmix", &s) == 0 && s == ALLOC_SRC_PMIX, "'pmix' names PMIx");
	ok(alloc_source_from_name("slurm", &s) == 0 && s == ALLOC_SRC_SLURM, "'slurm'");
	ok(alloc_source_from_name("env", &s) == 0 && s == ALLOC_SRC_ENV, "'env'");
	ok(alloc_source_from_name("", &s) == 0 && s == ALLOC_SRC_AUTO, "'' is auto");
	ok(alloc_source_from_name("auto", &s) == 0 && s == ALLOC_SRC_AUTO, "'auto'");
	ok(alloc_source_from_name("PMIx", &s) == -1, "'PMIx' (case) is refused");

	env_only(NULL);
	alloc_job_ids(job, step);
	ok(strcmp(job, "local") == 0 && strcmp(step, "0") == 0, "no ids: local / 0");
	setenv("SLURM_JOB_ID", "77", 1);
	setenv("SLURM_STEP_ID", "2", 1);
	alloc_job_ids(job, step);
	ok(strcmp(job, "77") == 0 && strcmp(step, "2") == 0, "Slurm's ids");
	setenv("DPTRAIN_JOB_ID", "local.99", 1);
	alloc_job_ids(job, step);
	is(job, "local.99", "DPTRAIN_JOB_ID (dptrain-run) wins over SLURM_JOB_ID");

	alloc_format_ranks(ranks, 5, buf, sizeof(buf));
	is(buf, "2, 5-7, 9", "rank lists are compressed");
	alloc_format_ranks(ranks, 1, buf, sizeof(buf));
	is(buf, "2", "one rank");

	ok(alloc_iface_addr("lo", addr, &err) == 0 && strcmp(addr, "127.0.0.1") == 0,
	   "interface lo has 127.0.0.1");
	ok(alloc_iface_addr(NULL, addr, &err) == 0 && strcmp(addr, "") != 0,
	   "a default address exists (%s)", addr);
	ok(alloc_iface_addr("nosuch9", addr, &err) == -1, "a missing interface fails");
	like(err.text, "no interface 'nosuch9'", "... naming it");
	like(err.text, "lo", "... and listing the ones there are");
}

int main(void)
{
	test_env_single_node();
	test_env_two_nodes();
	test_env_errors();
	test_slurm();
	test_slurm_layouts();
	test_master_overrides();
	test_ports();
	test_misc();
	return done_testing();
}
