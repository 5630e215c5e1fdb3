/* alloc_hccn.c — unit tests of reading hccn.conf (address_N=IP) for HCCL's device_ip: the lookup,
 * what it ignores, what it refuses (naming file and line), a rank's device and %n. Owns its
 * temp dir. The end-to-end test (a rank table from per-node files) is t0330. */
#include "common/error.h"
#include "launcher/alloc.h"
#include "launcher/alloc_source.h"
#include "t/lib/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/dptrain-hccn-XXXXXX";

static const char *put(const char *name, const char *text)
{
	static char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		bail_out("cannot write %s", path);
	return path;
}

static void lookup_ok(const char *path, int device, const char *want)
{
	char out[RT_ADDR_MAX];
	struct dp_error err = {""};
	int rc = alloc_hccn_lookup(path, device, out, &err);

	is_int(rc, 1, "device %d found%s%s", device, rc < 0 ? ": " : "", rc < 0 ? err.text : "");
	is(out, want, "... address_%d is %s", device, want);
}

static void lookup_fails(const char *path, int device, const char *needle)
{
	char out[RT_ADDR_MAX];
	struct dp_error err = {""};

	is_int(alloc_hccn_lookup(path, device, out, &err), -1, "refused: %s", needle);
	like(err.text, needle, "... the message says '%s'", needle);
}

int main(void)
{
	const char *f;
	char out[RT_ADDR_MAX];
	struct dp_error err = {""};
	struct alloc_opts o;
	struct alloc_rank x;

	if (!mkdtemp(dir))
		bail_out("cannot create a temporary directory");
	/* As hccn_tool writes it: address, netmask, gateway per device; blanks around '=' */
	f = put("hccn.conf", "address_0=192.168.100.101\nnetmask_0=255.255.255.0\n"
			     "netdetect_0=192.168.100.1\n# a comment\n\n"
			     "  address_1 = 192.168.101.101  \naddress_7=fd00::7\n");
	lookup_ok(f, 0, "192.168.100.101");
	lookup_ok(f, 1, "192.168.101.101");
	lookup_ok(f, 7, "fd00::7");
	lookup_fails(f, 3, "has no address_3, this rank's device");
	lookup_fails(put("bad-ip.conf", "address_0=192.168.1.300\n"), 0,
		     "bad-ip.conf:1: address_0='192.168.1.300' is not an IPv4 or IPv6 address");
	lookup_fails(put("no-eq.conf", "netmask_0=255.0.0.0\naddress_0 192.168.1.1\n"), 0,
		     "no-eq.conf:2: 'address_0 192.168.1.1' has no '='");
	lookup_fails(put("no-n.conf", "address_x=192.168.1.1\n"), 0,
		     "no-n.conf:1: 'address_x' is not address_N");
	/* A file someone named must be there; the default may be missing (not an NPU node). */
	lookup_fails("/nonexistent-dptrain/hccn.conf", 0, "cannot read it: No such file");
	if (access("/etc/hccn.conf", F_OK) != 0)
		is_int(alloc_hccn_lookup(NULL, 0, out, &err), 0,
		       "no /etc/hccn.conf: no device address, no error");
	else
		skip(1, "this machine has an /etc/hccn.conf");

	/* A rank's device: its GPU's physical index, else its local rank; %n its node. */
	put("hccn.n2.conf", "address_0=10.0.0.20\naddress_1=10.0.0.21\naddress_5=10.0.0.25\n");
	memset(&o, 0, sizeof(o));
	char pattern[600];
	snprintf(pattern, sizeof(pattern), "%s/hccn.%%n.conf", dir);
	o.hccn_conf = pattern;
	memset(&x, 0, sizeof(x));
	snprintf(x.host, sizeof(x.host), "n2");
	x.local_rank = 1;
	x.gpu.index = -1;
	is_int(alloc_self_device_ip(&o, &x, &err), 0, "%%n in the path: the node's own file");
	is(x.device_ip, "10.0.0.21", "... a rank without a GPU: its local rank's address");
	x.gpu.index = 0;
	snprintf(x.gpu.id, sizeof(x.gpu.id), "5");
	is_int(alloc_self_device_ip(&o, &x, &err), 0, "a rank on physical GPU 5");
	is(x.device_ip, "10.0.0.25", "... gets address_5");
	snprintf(x.host, sizeof(x.host), "n3");
	is_int(alloc_self_device_ip(&o, &x, &err), -1, "node n3 has no file of its own");
	like(err.text, "hccn.n3.conf: cannot read it", "... named in the message");

	const char *names[] = {"hccn.conf", "bad-ip.conf", "no-eq.conf", "no-n.conf",
			       "hccn.n2.conf"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char path[600];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	ok(rmdir(dir) == 0, "the temporary directory is left empty");
	return done_testing();
}
