/* ranktable_read.c — the rank-table reader: hand-made HCCL v1.0 and MindSpore legacy files from
 * t/data/ranktable/ with the fields it derives, and for every kind of bad input its own exact
 * message (file, JSON path, what is wrong). Reads only; writing is t/unit/ranktable.c's. */
#define _GNU_SOURCE /* vasprintf */
#include "common/error.h"
#include "ranktable/ranktable.h"
#include "t/lib/tap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char data_dir[4096];

/* JSON written with single quotes (readable in C) turned into real JSON. */
static char *q(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *q(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		bail_out("out of memory");
	va_end(ap);
	for (char *p = s; *p; p++)
		if (*p == '\'')
			*p = '"';
	return s;
}

#define DEV(id, ip, rank) "{'device_id':" id ",'device_ip':" ip ",'rank_id':" rank "}"
#define D0		  DEV("'0'", "'10.0.0.1'", "'0'")
#define D1		  DEV("'1'", "'10.0.0.1'", "'1'")
#define D2		  DEV("'0'", "'10.0.0.2'", "'2'")
#define D3		  DEV("'1'", "'10.0.0.2'", "'3'")

/* Two servers of two devices, as hccl_tools.py writes them; `tail` adds top-level members. */
static char *hccl4(const char *count, const char *d0, const char *d1, const char *d2,
		   const char *d3, const char *tail)
{
	return q("{'version':'1.0','server_count':%s,'server_list':["
		 "{'server_id':'10.0.0.1','device':[%s,%s],'host_nic_ip':'reserve'},"
		 "{'server_id':'10.0.0.2','device':[%s,%s],'host_nic_ip':'reserve'}],"
		 "'status':'completed'%s}",
		 count, d0, d1, d2, d3, tail);
}

#define RANK(r, host, node, local, gpu)                                                            \
	"{'rank':" #r ",'host':'" host "','node_rank':" #node ",'local_rank':" #local              \
	",'gpu':" #gpu "}"
#define DP_RANKS                                                                                   \
	RANK(0, "n1", 0, 0, 0)                                                                     \
	"," RANK(1, "n1", 0, 1, 1) "," RANK(2, "n2", 1, 0, 0) "," RANK(3, "n2", 1, 1, 1)

static char *dptrain4(const char *members, const char *ranks)
{
	char *tail = q(",'dptrain':{'version':1,%s'ranks':[%s]}", members, ranks);
	char *s = hccl4("'2'", D0, D1, D2, D3, tail);
	free(tail);
	return s;
}

#define INST(rank, server, dev, ip)                                                                \
	"{'devices':[{'device_id':'" #dev "','device_ip':'" ip "'}],'rank_id':'" #rank             \
	"','server_id':'" server "'}"
#define LEGACY_INSTANCES                                                                           \
	INST(0, "10.0.0.1", 0, "192.1.0.1")                                                        \
	"," INST(1, "10.0.0.1", 1, "192.1.0.2") "," INST(2, "10.0.0.2", 0, "192.2.0.1")

static char *legacy3(const char *group_count, const char *device_num, const char *server_num,
		     const char *instance_count, const char *instances)
{
	return q("{'board_id':'0x0000','chip_info':'910','deploy_mode':'lab','group_count':'%s',"
		 "'group_list':[{'device_num':'%s','server_num':'%s','group_name':'',"
		 "'instance_count':'%s','instance_list':[%s]}],"
		 "'para_plane_nic_location':'device','para_plane_nic_name':['eth0','eth1'],"
		 "'para_plane_nic_num':'2','status':'completed'}",
		 group_count, device_num, server_num, instance_count, instances);
}

/* Parse text as "t.json": 0 and the table, or -1 and err. */
static int parse(const char *text, struct ranktable *rt, struct dp_error *err)
{
	err->text[0] = '\0';
	return rt_parse(rt, text, strlen(text), "t.json", err);
}

/* text must fail with exactly `want`; frees text. */
static void rejects(char *text, const char *want, const char *what)
{
	struct ranktable rt;
	struct dp_error err;
	int rv = parse(text, &rt, &err);
	if (!ok(rv == -1, "%s: rejected", what))
		diag("text: %s", text);
	is(err.text, want, "%s: message", what);
	ok(rt.ranks == NULL && rt.world_size == 0, "%s: table left empty", what);
	rt_free(&rt);
	free(text);
}

static void accepts(char *text, int world, int nodes, const char *what)
{
	struct ranktable rt;
	struct dp_error err;
	if (!ok(parse(text, &rt, &err) == 0, "%s: accepted", what))
		diag("%s", err.text);
	is_int(rt.world_size, world, "%s: world size", what);
	is_int(rt.node_count, nodes, "%s: nodes", what);
	rt_free(&rt);
	free(text);
}

static void test_hccl_tools_file(void)
{
	struct ranktable rt;
	struct dp_error err;
	char path[4200];
	snprintf(path, sizeof(path), "%s/hccl_2x8.json", data_dir);

	if (!ok(rt_read(&rt, path, &err) == 0, "hccl_tools.py table: read"))
		diag("%s", err.text);
	is_int(rt.schema, RT_SCHEMA_HCCL, "hccl_tools.py table: schema detected as hccl");
	is_int(rt.world_size, 16, "hccl_tools.py table: 16 ranks");
	is_int(rt.node_count, 2, "hccl_tools.py table: 2 nodes");
	is(rt.master_addr, "", "hccl_tools.py table: no master address");
	is_int(rt.master_port, 0, "hccl_tools.py table: no master port");
	is(rt.job_id, "", "hccl_tools.py table: no job id");
	is(rt.ranks[9].server_id, "10.155.111.141", "rank 9: server_id of the second server");
	is(rt.ranks[9].host, "10.155.111.141", "rank 9: host derived from server_id");
	is(rt.ranks[9].addr, "192.98.93.101", "rank 9: device_ip");
	is_int(rt.ranks[9].device_id, 1, "rank 9: device_id");
	is_int(rt.ranks[9].node_rank, 1, "rank 9: node rank = position of its server");
	is_int(rt.ranks[9].local_rank, 1, "rank 9: local rank = position within its server");
	is_int(rt.ranks[9].gpu, -1, "rank 9: no GPU known");
	is_int(rt.ranks[0].node_rank, 0, "rank 0 on node 0");
	is_int(rt.ranks[15].local_rank, 7, "rank 15: local rank 7");
	rt_free(&rt);
}

static void test_legacy_files(void)
{
	struct ranktable rt;
	struct dp_error err;
	char path[4200];

	snprintf(path, sizeof(path), "%s/legacy_1x8.json", data_dir);
	if (!ok(rt_read(&rt, path, &err) == 0, "legacy table (MindSpore docs): read"))
		diag("%s", err.text);
	is_int(rt.schema, RT_SCHEMA_LEGACY, "legacy table: schema detected as legacy");
	is_int(rt.world_size, 8, "legacy table: 8 ranks");
	is_int(rt.node_count, 1, "legacy table: 1 node");
	is(rt.ranks[5].addr, "192.2.27.7", "legacy rank 5: device_ip");
	is(rt.ranks[5].server_id, "10.155.111.140", "legacy rank 5: server_id");
	is(rt.ranks[5].host, "10.155.111.140", "legacy rank 5: host derived from server_id");
	is_int(rt.ranks[5].local_rank, 5, "legacy rank 5: local rank");
	is_int(rt.ranks[5].device_id, 5, "legacy rank 5: device_id");
	rt_free(&rt);

	snprintf(path, sizeof(path), "%s/legacy_2x4_numbers.json", data_dir);
	if (!ok(rt_read(&rt, path, &err) == 0, "legacy table with numbers as numbers: read"))
		diag("%s", err.text);
	is_int(rt.world_size, 8, "legacy 2x4: 8 ranks");
	is_int(rt.node_count, 2, "legacy 2x4: 2 nodes (distinct server_ids)");
	is_int(rt.ranks[2].node_rank, 0, "legacy 2x4: rank 2 (listed last) on node 0");
	is_int(rt.ranks[2].local_rank, 2, "legacy 2x4: rank 2 is local rank 2 (rank order)");
	is(rt.ranks[2].addr, "192.168.0.102", "legacy 2x4: rank 2's device_ip");
	is_int(rt.ranks[4].node_rank, 1, "legacy 2x4: rank 4 on node 1");
	is_int(rt.ranks[4].local_rank, 0, "legacy 2x4: rank 4 is local rank 0");
	rt_free(&rt);

	snprintf(path, sizeof(path), "%s/legacy_trailing_comma.json", data_dir);
	char want[4400];
	snprintf(
	    want, sizeof(want),
	    "%s: line 21 column 13: JSON parse error: unexpected token near ']' (JSON allows no "
	    "comma before ']')",
	    path);
	ok(rt_read(&rt, path, &err) == -1, "legacy table with the docs' trailing comma: rejected");
	is(err.text, want, "trailing comma: a JSON error with line and column");
}

static void test_dptrain_file(void)
{
	struct ranktable rt;
	struct dp_error err;
	char path[4200];

	snprintf(path, sizeof(path), "%s/dptrain_2x2.json", data_dir);
	if (!ok(rt_read(&rt, path, &err) == 0, "dptrain table: read"))
		diag("%s", err.text);
	is_int(rt.schema, RT_SCHEMA_DPTRAIN, "dptrain table: schema detected");
	is(rt.master_addr, "10.1.0.1", "dptrain table: master_addr");
	is_int(rt.master_port, 29500, "dptrain table: master_port");
	is(rt.job_id, "4242", "dptrain table: job_id");
	is(rt.step_id, "3", "dptrain table: step_id");
	is(rt.ranks[3].host, "gpu02", "dptrain table: rank 3's host name");
	is(rt.ranks[3].server_id, "fd00::2", "dptrain table: an IPv6 server_id");
	is_int(rt.ranks[3].gpu, 1, "dptrain table: rank 3's GPU");
	rt_free(&rt);
}

static void test_missing_file(void)
{
	struct ranktable rt;
	struct dp_error err;
	ok(rt_read(&rt, "/nonexistent/rank_table.json", &err) == -1, "missing file: rejected");
	is(err.text, "/nonexistent/rank_table.json: cannot open: No such file or directory",
	   "missing file: message names the file and the reason");
}

static void test_truncated(void)
{
	char path[4200], *text;
	FILE *f;
	long len;
	struct ranktable rt;
	struct dp_error err;

	snprintf(path, sizeof(path), "%s/hccl_2x8.json", data_dir);
	if (!(f = fopen(path, "rb")) || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0)
		bail_out("cannot read %s", path);
	rewind(f);
	text = malloc((size_t)len);
	if (!text || fread(text, 1, (size_t)len, f) != (size_t)len)
		bail_out("cannot read %s", path);
	fclose(f);
	/* Cut inside the seventh device's address, as a writer that died there would leave it. */
	ok(rt_parse(&rt, text, 1200, "t.json", &err) == -1, "truncated JSON: rejected");
	is(err.text,
	   "t.json: line 40 column 37: JSON parse error: premature end of input near '\"192'",
	   "truncated JSON: line and column of the end");
	ok(rt_parse(&rt, text, 0, "t.json", &err) == -1, "empty file: rejected");
	is(err.text,
	   "t.json: line 1 column 0: JSON parse error: '[' or '{' expected near end of file",
	   "empty file: message");
	ok(rt_parse(&rt, text, (size_t)len, "t.json", &err) == 0, "the whole file parses");
	rt_free(&rt);
	free(text);
}

static void test_wrong_types(void)
{
	rejects(hccl4("['2']", D0, D1, D2, D3, ""),
		"t.json: server_count: expected a string holding an integer, got array",
		"server_count is an array");
	rejects(hccl4("'two'", D0, D1, D2, D3, ""),
		"t.json: server_count: expected a string holding an integer, got \"two\"",
		"server_count is not a number");
	rejects(hccl4("'2'", D0, DEV("'1'", "'10.0.0.1'", "'one'"), D2, D3, ""),
		"t.json: server_list[0].device[1].rank_id: expected a string holding an integer, "
		"got \"one\"",
		"rank_id is not a number");
	rejects(hccl4("'2'", D0, DEV("'1'", "'10.0.0.1'", "'-1'"), D2, D3, ""),
		"t.json: server_list[0].device[1].rank_id: expected a string holding an integer, "
		"got \"-1\"",
		"rank_id is negative");
	rejects(hccl4("'2'", D0, D1, DEV("'0'", "167772162", "'2'"), D3, ""),
		"t.json: server_list[1].device[0].device_ip: expected a string, got integer",
		"device_ip is a number");
	rejects(hccl4("'2'", D0, D1, DEV("1.5", "'10.0.0.2'", "'2'"), D3, ""),
		"t.json: server_list[1].device[0].device_id: expected a string holding an integer, "
		"got real",
		"device_id is a real");
	rejects(dptrain4("'world_size':'4',", DP_RANKS),
		"t.json: dptrain.world_size: expected an integer, got string",
		"dptrain.world_size is a string (our own object is strict)");
	rejects(q("['not','a','table']"),
		"t.json: expected a JSON object at the top level, got array",
		"top level is an array");
	rejects(q("{'version':'1.0','server_count':'1','server_list':{}}"),
		"t.json: server_list: expected an array, got object", "server_list is an object");
	rejects(hccl4("'2'", D0, "{'device_id':'1','rank_id':'1'}", D2, D3, ""),
		"t.json: server_list[0].device[1]: missing key \"device_ip\"",
		"a device lacks device_ip");
	rejects(q("{'server_count':'1','server_list':[]}"), "t.json: missing key \"version\"",
		"no version");
	/* Lenient where real tools are: numbers instead of strings. */
	accepts(hccl4("2", DEV("0", "'10.0.0.1'", "0"), D1, D2, D3, ""), 4, 2,
		"numbers instead of strings");
}

static void test_ranks(void)
{
	rejects(hccl4("'2'", D0, D1, DEV("'0'", "'10.0.0.2'", "'1'"), D3, ""),
		"t.json: server_list[1].device[0].rank_id: rank 1 appears twice "
		"(also at server_list[0].device[1].rank_id)",
		"duplicate rank_id");
	rejects(hccl4("'2'", D0, D1, D2, DEV("'1'", "'10.0.0.2'", "'4'"), ""),
		"t.json: rank 3 is missing (ranks must be 0..3 each exactly once; "
		"server_list[1].device[1].rank_id is 4)",
		"missing rank");
	rejects(
	    hccl4("'2'", D0, DEV("'0'", "'10.0.0.1'", "'1'"), D2, D3, ""),
	    "t.json: server_list[0].device[1].device_id: device 0 appears twice on node 10.0.0.1 "
	    "(also at server_list[0].device[0].device_id)",
	    "duplicate device on one server");
	accepts(hccl4("'2'", D1, D0, D3, D2, ""), 4, 2, "devices out of rank order");
	/* The same device on two servers is fine. */
	accepts(hccl4("'2'", D0, D1, DEV("'0'", "'10.0.0.2'", "'2'"), D3, ""), 4, 2,
		"device 0 on each server");
}

static void test_addresses(void)
{
	rejects(hccl4("'2'", D0, DEV("'1'", "'10.0.0.x'", "'1'"), D2, D3, ""),
		"t.json: server_list[0].device[1].device_ip: \"10.0.0.x\" is not an IPv4 or IPv6 "
		"address",
		"unparseable device_ip");
	rejects(q("{'version':'1.0','server_count':'1','server_list':[{'server_id':'node1',"
		  "'device':[" D0 "]}],'status':'completed'}"),
		"t.json: server_list[0].server_id: \"node1\" is not an IPv4 or IPv6 address",
		"server_id is a host name");
	rejects(q("{'version':'1.0','server_count':'1','server_list':[{'server_id':'10.0.0.1',"
		  "'device':[" D0 "],'host_nic_ip':'none'}],'status':'completed'}"),
		"t.json: server_list[0].host_nic_ip: \"none\" is not an IPv4 or IPv6 address or "
		"\"reserve\"",
		"host_nic_ip neither an address nor reserve");
	accepts(
	    q("{'version':'1.0','server_count':'1','server_list':[{'server_id':'fe80::1',"
	      "'device':[" DEV("'0'", "'::ffff:10.0.0.1'", "'0'") "],'host_nic_ip':'10.0.0.9'}]}"),
	    1, 1, "IPv6 addresses, a host_nic_ip address, no status");
	rejects(
	    dptrain4("'world_size':4,'master_addr':'bad addr',", DP_RANKS),
	    "t.json: dptrain.master_addr: \"bad addr\" is not an IPv4 or IPv6 address or a host "
	    "name",
	    "master_addr neither address nor host name");
	accepts(dptrain4("'world_size':4,'master_addr':'head-node.cluster',", DP_RANKS), 4, 2,
		"master_addr may be a host name");
}

static void test_sizes(void)
{
	rejects(hccl4("'3'", D0, D1, D2, D3, ""),
		"t.json: server_count: 3 but server_list has 2 servers",
		"server_count larger than server_list");
	rejects(dptrain4("'world_size':5,", DP_RANKS),
		"t.json: dptrain.world_size: 5 but server_list has 4 devices",
		"dptrain.world_size differs from the devices");
	rejects(dptrain4("'world_size':4,", RANK(0, "n1", 0, 0, 0) "," RANK(1, "n1", 0, 1, 1)),
		"t.json: dptrain.ranks: 2 entries but dptrain.world_size is 4",
		"dptrain.ranks shorter than world_size");
	rejects(legacy3("1", "3", "2", "4", LEGACY_INSTANCES),
		"t.json: group_list[0].instance_count: 4 but instance_list has 3 instances",
		"legacy instance_count");
	rejects(legacy3("1", "4", "2", "3", LEGACY_INSTANCES),
		"t.json: group_list[0].device_num: 4 but instance_list has 3 devices",
		"legacy device_num");
	rejects(legacy3("1", "3", "1", "3", LEGACY_INSTANCES),
		"t.json: group_list[0].server_num: 1 but instance_list names 2 servers",
		"legacy server_num");
	rejects(legacy3("2", "3", "2", "3", LEGACY_INSTANCES),
		"t.json: group_count: 2 but group_list has 1 group", "legacy group_count");
	accepts(legacy3("1", "3", "2", "3", LEGACY_INSTANCES), 3, 2, "the legacy table itself");
	rejects(q("{'version':'1.0','server_count':'2','server_list':[{'server_id':'10.0.0.1',"
		  "'device':[" D0 "]},{'server_id':'10.0.0.2','device':[]}]}"),
		"t.json: server_list[1].device: a server with no devices", "an empty server");
}

static void test_dptrain_object(void)
{
	rejects(dptrain4("'world_size':4,'master_prot':29500,", DP_RANKS),
		"t.json: dptrain: unknown key \"master_prot\"", "dptrain: misspelt key");
	rejects(
	    dptrain4("'world_size':4,", RANK(0, "n1", 0, 0, 0) "," RANK(1, "n1", 0, 1, 1) "," RANK(
					    2, "n2", 0, 0, 0) "," RANK(3, "n2", 1, 1, 1)),
	    "t.json: dptrain.ranks[2].node_rank: 0 but rank 2 is in server_list[1]",
	    "dptrain: node_rank disagrees with server_list");
	rejects(
	    dptrain4("'world_size':4,", RANK(0, "n1", 0, 0, 0) "," RANK(1, "n9", 0, 1, 1) "," RANK(
					    2, "n2", 1, 0, 0) "," RANK(3, "n2", 1, 1, 1)),
	    "t.json: dptrain.ranks[1].host: \"n9\" differs from \"n1\" of rank 0 on the same node "
	    "(node 0)",
	    "dptrain: two host names on one server");
	rejects(
	    dptrain4("'world_size':4,", RANK(0, "n1", 0, 0, 0) "," RANK(1, "n1", 0, 0, 1) "," RANK(
					    2, "n2", 1, 0, 0) "," RANK(3, "n2", 1, 1, 1)),
	    "t.json: dptrain.ranks[1].local_rank: local rank 0 appears twice on node 0 (also "
	    "rank 0)",
	    "dptrain: duplicate local rank");
	rejects(
	    dptrain4("'world_size':4,", RANK(0, "n1", 0, 0, 0) "," RANK(0, "n1", 0, 1, 1) "," RANK(
					    2, "n2", 1, 0, 0) "," RANK(3, "n2", 1, 1, 1)),
	    "t.json: dptrain.ranks[1].rank: rank 0 appears twice (also at dptrain.ranks[0].rank)",
	    "dptrain: duplicate rank");
	rejects(
	    dptrain4("'world_size':4,", RANK(0, "n1", 0, 0, 0) "," RANK(1, "n1", 0, 1, 1) "," RANK(
					    2, "n2", 1, 0, 0) "," RANK(3, "n2", 1, 1, -2)),
	    "t.json: dptrain.ranks[3].gpu: -2 is out of range (-1..2147483647)",
	    "dptrain: GPU below -1");
	rejects(q("{'version':'1.0','server_count':'1','server_list':[{'server_id':'10.0.0.1',"
		  "'device':[" D0 "]}],'dptrain':{'version':2,'world_size':1,'ranks':[]}}"),
		"t.json: dptrain.version: 2 is newer than this reader (1): update dptrain",
		"dptrain: a newer version");
	/* Ranks listed in another order are placed by their "rank". */
	accepts(dptrain4("'world_size':4,'job_id':'7','step_id':'0',",
			 RANK(3, "n2", 1, 1, 1) "," RANK(2, "n2", 1, 0, 0) "," RANK(
			     1, "n1", 0, 1, 1) "," RANK(0, "n1", 0, 0, 0)),
		4, 2, "dptrain.ranks in any order");
}

static void test_documents(void)
{
	rejects(q("{'version':'1.0',\n}"),
		"t.json: line 2 column 1: JSON parse error: string or '}' expected near '}' (JSON "
		"allows no comma before '}')",
		"a trailing comma in an object");
	rejects(q("{'version':'1.0' ]"),
		"t.json: line 1 column 18: JSON parse error: '}' expected near ']'",
		"a wrong bracket, no comma: no hint");
	rejects(
	    q("{}"),
	    "t.json: neither \"server_list\" (HCCL v1.0) nor \"group_list\" (MindSpore legacy): "
	    "not a rank table",
	    "not a rank table");
	rejects(q("{'server_list':[],'group_list':[]}"),
		"t.json: both \"server_list\" (HCCL v1.0) and \"group_list\" (MindSpore legacy): a "
		"rank table has one of them",
		"both schemas at once");
	rejects(hccl4("'2'", D0, D1, D2, D3, ",'status':'initializing'"),
		"t.json: line 1 column 421: JSON parse error: duplicate object key near "
		"'\"status\"'",
		"a key twice");
	rejects(
	    q("{'version':'1.0','server_count':'1','server_list':[{'server_id':'10.0.0.1',"
	      "'device':[" D0 "]}],'status':'initializing'}"),
	    "t.json: status: \"initializing\": the table is not complete (expected \"completed\")",
	    "a table still being written");
	rejects(q("{'version':'2.0','server_count':'1','server_list':[]}"),
		"t.json: version: \"2.0\" is not a rank-table version this reader knows (\"1.0\")",
		"an unknown version");
	rejects(legacy3("1", "3", "2", "3",
			INST(0, "10.0.0.1", 0, "192.1.0.1") "," INST(
			    0, "10.0.0.1", 1, "192.1.0.2") "," INST(2, "10.0.0.2", 0, "192.2.0.1")),
		"t.json: group_list[0].instance_list[1].rank_id: rank 0 appears twice (also at "
		"group_list[0].instance_list[0].rank_id)",
		"legacy: duplicate rank");
	rejects(
	    legacy3("1", "3", "2", "3",
		    INST(0, "10.0.0.1", 0, "192.1.0.1") "," INST(
			1, "10.0.0.1", 0, "192.1.0.2") "," INST(2, "10.0.0.2", 0, "192.2.0.1")),
	    "t.json: group_list[0].instance_list[1].devices[0].device_id: device 0 appears twice "
	    "on node 10.0.0.1 (also at group_list[0].instance_list[0].devices[0].device_id)",
	    "legacy: duplicate device");
	rejects(q("{'group_count':'2','group_list':[{},{}]}"),
		"t.json: group_list: 2 groups: dptrain reads tables with exactly one group",
		"legacy: two groups");
	rejects(
	    q("{'group_count':'1','group_list':[{'device_num':'1','server_num':'1',"
	      "'instance_count':'1','instance_list':[{'rank_id':'0','server_id':'10.0.0.1',"
	      "'devices':[]}]}]}"),
	    "t.json: group_list[0].instance_list[0].devices: 0 devices: dptrain reads one device "
	    "per instance (rank)",
	    "legacy: an instance without a device");
}

int main(void)
{
	const char *src = getenv("DPTRAIN_SRC_DIR");
	snprintf(data_dir, sizeof(data_dir), "%s/t/data/ranktable", src ? src : ".");

	test_hccl_tools_file();
	test_legacy_files();
	test_dptrain_file();
	test_missing_file();
	test_truncated();
	test_wrong_types();
	test_ranks();
	test_addresses();
	test_sizes();
	test_dptrain_object();
	test_documents();
	return done_testing();
}
