/* hostlist.c (test) — Slurm hostlist and tasks-per-node expansion: zero padding, several
 * bracket groups, separators, the size limit, and an exact message for each kind of bad
 * input. Tests ranktable/hostlist.c only. */
#include "common/error.h"
#include "ranktable/hostlist.h"
#include "t/lib/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Expand list and compare with the space-separated names in want. */
static void expands(const char *list, const char *want)
{
	char **hosts = NULL, got[4096] = "";
	struct dp_error err;
	int n = -1;

	if (!ok(rt_hostlist_expand(list, &hosts, &n, &err) == 0, "\"%s\" expands", list)) {
		diag("%s", err.text);
		return;
	}
	for (int i = 0; i < n; i++) {
		if (i)
			strncat(got, " ", sizeof(got) - strlen(got) - 1);
		strncat(got, hosts[i], sizeof(got) - strlen(got) - 1);
	}
	is(got, want, "\"%s\" -> %s", list, want);
	rt_hostlist_free(hosts, n);
}

static void rejects(const char *list, const char *want)
{
	char **hosts = (char **)1;
	struct dp_error err = {""};
	int n = -1;

	ok(rt_hostlist_expand(list, &hosts, &n, &err) == -1, "\"%.60s\" is rejected", list);
	ok(hosts == NULL && n == 0, "\"%.60s\": nothing returned", list);
	is(err.text, want, "\"%.60s\": message", list);
}

static void test_hostlists(void)
{
	expands("n[01-03,7],gpu5,a[1-2]b", "n01 n02 n03 n7 gpu5 a1b a2b");
	expands("node1", "node1");
	expands("n[8-10]", "n8 n9 n10");
	expands("n[098-101]", "n098 n099 n100 n101");
	expands("n[007]", "n007");
	expands("a[1-2]b[3-4]", "a1b3 a1b4 a2b3 a2b4");
	expands("rack[1-2]-n[01-02,05]",
		"rack1-n01 rack1-n02 rack1-n05 rack2-n01 rack2-n02 rack2-n05");
	/* As in Slurm, each range keeps its own width. */
	expands("n[01-02,5]", "n01 n02 n5");
	expands("[1-3]", "1 2 3");
	expands("10.0.0.[1-3]", "10.0.0.1 10.0.0.2 10.0.0.3");
	expands("n1 n2,n3\tn4,", "n1 n2 n3 n4");
	expands("x-y_z.example.com", "x-y_z.example.com");

	rejects("", "bad hostlist \"\": no host names in it");
	rejects(" , ", "bad hostlist \" , \": no host names in it");
	rejects("n[1-3", "bad hostlist \"n[1-3\": '[' at offset 1 is never closed");
	rejects("n[1-3,m4", "bad hostlist \"n[1-3,m4\": '[' at offset 1 is never closed");
	rejects("n1-3]", "bad hostlist \"n1-3]\": ']' at offset 4 without '['");
	rejects("n[1[2]]", "bad hostlist \"n[1[2]]\": nested '[' at offset 3");
	rejects("n[3-1]", "bad hostlist \"n[3-1]\": range 3-1 goes backwards");
	rejects("n[a]", "bad hostlist \"n[a]\": expected a number of 1 to 9 digits at \"a\"");
	rejects("n[]", "bad hostlist \"n[]\": empty brackets \"[]\"");
	rejects("n[1,]", "bad hostlist \"n[1,]\": a ',' that ends the brackets");
	rejects("n[1-]",
		"bad hostlist \"n[1-]\": expected a number of 1 to 9 digits after '-' in \"1-\"");
	rejects("n[1x]", "bad hostlist \"n[1x]\": unexpected 'x' in brackets");
	rejects("n[1\t]", "bad hostlist \"n[1\t]\": unexpected character 0x09 in brackets");
	rejects("n[1-1000000000]",
		"bad hostlist \"n[1-1000000000]\": expected a number of 1 to 9 digits after '-' in "
		"\"1-1000000000\"");
	rejects("n[0-999999999]",
		"bad hostlist \"n[0-999999999]\": expands to more than 1000000 hosts");
	rejects("n[0-999][0-1000]",
		"bad hostlist \"n[0-999][0-1000]\": expands to more than 1000000 hosts");
	rejects("a[0-500000],b[0-500000]",
		"bad hostlist \"a[0-500000],b[0-500000]\": expands to more than 1000000 hosts");
	rejects("n\001",
		"bad hostlist \"n\001\": character 0x01 at offset 1 cannot be part of a host name");

	/* Names up to 255 characters: 253 + "10" fits, 254 + "10" does not. */
	char long_name[300], want[300], **names;
	struct dp_error lerr;
	int count;
	memset(long_name, 'h', 253);
	strcpy(long_name + 253, "[1-10]");
	ok(rt_hostlist_expand(long_name, &names, &count, &lerr) == 0 && strlen(names[9]) == 255,
	   "a 255-character host name expands");
	rt_hostlist_free(names, count);
	memset(long_name, 'h', 254);
	strcpy(long_name + 254, "[1-10]");
	/* the list is quoted cut at 200 bytes, the reason whole */
	snprintf(want, sizeof(want),
		 "bad hostlist \"%.200s...\": host names longer than 255 characters", long_name);
	rejects(long_name, want);

	/* The limit itself is allowed: a million names, all distinct and padded. */
	char **hosts;
	struct dp_error err;
	int n;
	if (ok(rt_hostlist_expand("n[000-999][000-999]", &hosts, &n, &err) == 0,
	       "a million hosts (the limit) expand")) {
		is_int(n, 1000000, "a million hosts: count");
		is(hosts[0], "n000000", "a million hosts: first");
		is(hosts[1000], "n001000", "a million hosts: the second bracket varies fastest");
		is(hosts[n - 1], "n999999", "a million hosts: last");
		rt_hostlist_free(hosts, n);
	} else {
		diag("%s", err.text);
	}
}

static void tpn_expands(const char *spec, const char *want)
{
	int *counts = NULL, n = -1;
	struct dp_error err;
	char got[1024] = "";

	if (!ok(rt_tasks_per_node_expand(spec, &counts, &n, &err) == 0, "\"%s\" expands", spec)) {
		diag("%s", err.text);
		return;
	}
	for (int i = 0; i < n; i++)
		snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%d", i ? " " : "",
			 counts[i]);
	is(got, want, "\"%s\" -> %s", spec, want);
	free(counts);
}

static void tpn_rejects(const char *spec, const char *want)
{
	int *counts = (int *)1, n = -1;
	struct dp_error err = {""};

	ok(rt_tasks_per_node_expand(spec, &counts, &n, &err) == -1, "\"%s\" is rejected", spec);
	ok(counts == NULL && n == 0, "\"%s\": nothing returned", spec);
	is(err.text, want, "\"%s\": message", spec);
}

static void test_tasks_per_node(void)
{
	tpn_expands("2(x3),1", "2 2 2 1");
	tpn_expands("4", "4");
	tpn_expands("1,2,3", "1 2 3");
	tpn_expands("8(x1)", "8");

	int *counts, n;
	struct dp_error err;
	ok(rt_tasks_per_node_expand("1(x1000000)", &counts, &n, &err) == 0 && n == 1000000,
	   "a million nodes (the limit)");
	free(counts);

	tpn_rejects("", "bad tasks-per-node spec: empty");
	tpn_rejects("1(x1000001)",
		    "bad tasks-per-node spec \"1(x1000001)\": expected \"(xN)\" with N from 1 to "
		    "1000000 at \"1(x1000001)\"");
	tpn_rejects("1(x600000),1(x400001)",
		    "bad tasks-per-node spec \"1(x600000),1(x400001)\": more than 1000000 nodes");
	tpn_rejects("0",
		    "bad tasks-per-node spec \"0\": expected a count of 1 to 1000000 at \"0\"");
	tpn_rejects(
	    "2(x0)",
	    "bad tasks-per-node spec \"2(x0)\": expected \"(xN)\" with N from 1 to 1000000 at "
	    "\"2(x0)\"");
	tpn_rejects(
	    "2(x3",
	    "bad tasks-per-node spec \"2(x3\": expected \"(xN)\" with N from 1 to 1000000 at "
	    "\"2(x3\"");
	tpn_rejects("2,",
		    "bad tasks-per-node spec \"2,\": unexpected \",\" (expected e.g. \"2(x3),1\")");
	tpn_rejects(",2",
		    "bad tasks-per-node spec \",2\": expected a count of 1 to 1000000 at \",2\"");
	tpn_rejects(
	    "2(x3)1",
	    "bad tasks-per-node spec \"2(x3)1\": unexpected \"1\" (expected e.g. \"2(x3),1\")");
	tpn_rejects("two",
		    "bad tasks-per-node spec \"two\": expected a count of 1 to 1000000 at \"two\"");
	tpn_rejects(
	    "2 (x3)",
	    "bad tasks-per-node spec \"2 (x3)\": unexpected \" (x3)\" (expected e.g. \"2(x3),1\")");
}

int main(void)
{
	test_hostlists();
	test_tasks_per_node();
	return done_testing();
}
