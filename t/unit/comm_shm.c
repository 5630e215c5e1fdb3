/* comm_shm.c (test) — the shared memory of the CPU engine (trainer/dist/comm_shm.c) where
 * t/unit/comm.c does not reach it: its segment's header and check; a leader that hands over a
 * foreign segment (another step's, corrupted, a file that is not a sealed 0600 memfd, too
 * small), refused by the rank it is handed to; strangers at the node's socket (another
 * secret, another user, a silent one) refused while the node forms; a rank SIGKILLed
 * mid-allreduce (a follower, the leader) named by the others, with nothing left behind (no
 * file in /dev/shm, no socket, no process mapping the segment); two comms of one job and two
 * jobs at once on separate segments, with exact results streamed and cached. comm.c runs
 * every operation over the shared memory and the stops and deaths of its fault table.
 * Ranks are forked processes (t/lib/ranks.h); no check depends on the machine's speed. */
#define _GNU_SOURCE
#include "trainer/dist/comm.h"
#include "trainer/dist/comm_shm.h"
#include "common/hmac.h"
#include "store/store.h"
#include "t/lib/ranks.h"
#include "t/lib/tap.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define LONG_S 30
#define SECRET "comm-shm-test-secret"

/* ---------------------------------------------------------------------------------------
 * comm_shm.c's handshake, as a test that knows it speaks it. */

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

/* The layout of a node of two ranks (0 leads), the first comm of the job. */
static void layout2(struct shm_layout *l)
{
	static const int ranks[2] = {0, 1};
	struct shm_node nd = {.world = 2, .nlocal = 2, .local = 0, .ranks = ranks, .gen = 1};
	shm_layout_of(&nd, l);
}

static struct store_opts opts(const struct ranks_job *j, int rank, const char *secret)
{
	struct store_opts so = {.master_addr = "127.0.0.1",
				.master_port = j->port,
				.rank = rank,
				.world_size = j->world,
				.job = "comm-shm-test",
				.secret = secret,
				.timeout_s = LONG_S};
	return so;
}

/* Reads n bytes from fd within LONG_S: 0, or -1. */
static int read_all(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, LONG_S * 1000) != 1)
			return -1;
		ssize_t k = read(fd, (char *)buf + got, n - got);
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

/* Reads until fd closes (or LONG_S pass): the bytes that came and the descriptors with them;
 * bytes -1 if it stayed open. */
static void read_to_close(int fd, long *bytes, int *fds)
{
	double t0 = ranks_now();
	*bytes = 0;
	*fds = 0;
	while (ranks_now() - t0 < LONG_S) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) != 1)
			continue;
		unsigned char buf[256];
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(4 * sizeof(int))];
		} cm;
		struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
		struct msghdr m = {.msg_iov = &iov,
				   .msg_iovlen = 1,
				   .msg_control = cm.b,
				   .msg_controllen = sizeof(cm.b)};
		ssize_t k = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
		if (k <= 0)
			return;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				*fds += (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		*bytes += k;
	}
	*bytes = -1;
}

/* ---------------------------------------------------------------------------------------
 * The header alone. */

static void test_header(void)
{
	struct shm_layout l;
	struct shm_header h, bad;
	struct dp_error err;
	layout2(&l);
	shm_header_make(&h, SECRET, &l);
	ok(shm_header_check(&h, l.size, SECRET, &l, "rank 0", &err) == 0,
	   "a segment's header checks with its secret and layout");
	like(shm_header_check(&h, l.size, "another-step", &l, "rank 0", &err) < 0 ? err.text : "",
	     "rank 0 handed over was not made for this step",
	     "another step's secret: refused, naming who handed it over");
	bad = h;
	bad.magic ^= 1;
	like(shm_header_check(&bad, l.size, SECRET, &l, "rank 0", &err) < 0 ? err.text : "",
	     "not a dptrain segment (magic", "a wrong magic: refused");
	bad = h;
	bad.version = SHM_VERSION + 1;
	like(shm_header_check(&bad, l.size, SECRET, &l, "rank 0", &err) < 0 ? err.text : "",
	     "this dptrain's are of version", "another version: refused");
	bad = h;
	bad.l.world++;
	like(shm_header_check(&bad, l.size, SECRET, &l, "rank 0", &err) < 0 ? err.text : "",
	     "not made for this step", "a layout changed after it was made: refused (its MAC)");
	struct shm_layout other = l;
	other.gen = 2;
	like(shm_header_check(&h, l.size, SECRET, &other, "rank 0", &err) < 0 ? err.text : "",
	     "this rank's is comm 2", "another comm's segment: refused");
	like(shm_header_check(&h, l.size - 4096, SECRET, &l, "rank 0", &err) < 0 ? err.text : "",
	     "mapped); this rank expects", "a segment of another size: refused");
	like(shm_header_check(&h, 8, SECRET, &l, "rank 0", &err) < 0 ? err.text : "",
	     "8 bytes: not a dptrain segment", "a segment shorter than a header: refused");
	/* a buffer group (shared_alloc): its buffers' size is part of what is checked */
	static const int ranks[2] = {0, 1};
	struct shm_node nd = {
	    .world = 2, .nlocal = 2, .local = 0, .ranks = ranks, .gen = 1, .user_bytes = 10000};
	struct shm_layout lb, lb2;
	shm_layout_of(&nd, &lb);
	nd.user_bytes = 20000;
	shm_layout_of(&nd, &lb2);
	ok(lb.user == 12288 && lb.size % 4096 == 0 && lb.size >= 2 * lb.user &&
	       lb.size < 2 * lb.user + 65536,
	   "a buffer group holds a page-rounded buffer per rank (%llu bytes each, %llu in all)",
	   (unsigned long long)lb.user, (unsigned long long)lb.size);
	shm_header_make(&h, SECRET, &lb);
	ok(shm_header_check(&h, lb.size, SECRET, &lb, "rank 0", &err) == 0,
	   "a buffer group's header checks with its secret and layout");
	like(shm_header_check(&h, lb.size, SECRET, &lb2, "rank 0", &err) < 0 ? err.text : "",
	     "holds 12288-byte buffers; this rank expects 20480",
	     "a buffer group of another size (the ranks' models differ): refused");
	like(shm_header_check(&h, lb.size, SECRET, &l, "rank 0", &err) < 0 ? err.text : "",
	     "holds 12288-byte buffers; this rank expects 0",
	     "a buffer group where the node's segment is expected: refused");
}

/* ---------------------------------------------------------------------------------------
 * A leader that hands over a foreign segment: rank 0 plays the node's leader by the protocol,
 * with the step's secret, and hands rank 1 (a real comm) a segment that is not the one. */

enum foreign { F_OTHER_STEP, F_MAGIC, F_FLIPPED, F_FILE, F_SMALL, F_NFOREIGN };
static const char *foreign_what[] = {"another step's segment", "a segment with a wrong magic",
				     "a segment whose layout was changed",
				     "a 0644 file, not a sealed memfd", "a segment too small"};
static const char *foreign_want[] = {"not made for this step", "not a dptrain segment",
				     "not made for this step", "not this user's sealed 0600",
				     "not this user's sealed 0600"};

static int foreign_fd(enum foreign f, const struct shm_layout *l, char *msg, size_t len)
{
	struct shm_header h;
	int fd;
	size_t size = f == F_SMALL ? 4096 : l->size;
	if (f == F_FILE) {
		char path[] = "/tmp/dptrain-comm-shm-test.XXXXXX";
		fd = mkstemp(path);
		if (fd >= 0) {
			unlink(path);
			fchmod(fd, 0644);
		}
	} else {
		fd = memfd_create("dptrain-comm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd >= 0)
			fchmod(fd, 0600);
	}
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
		snprintf(msg, len, "foreign segment: %s", strerror(errno));
		return -1;
	}
	if (f != F_FILE)
		fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	shm_header_make(&h, f == F_OTHER_STEP ? "another-step-secret" : SECRET, l);
	if (f == F_MAGIC)
		h.magic = 0x12345678u;
	if (f == F_FLIPPED)
		h.l.slice *= 2;
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		snprintf(msg, len, "foreign segment: cannot write its header");
		return -1;
	}
	return fd;
}

static int fake_leader(const struct ranks_job *j, enum foreign f, char *msg, size_t len)
{
	struct store_opts so = opts(j, 0, SECRET);
	struct store *st;
	struct dp_error err;
	struct shm_layout l;
	struct sockaddr_un a;
	socklen_t alen;
	unsigned char nonce[SHM_NONCE], chal[4 + SHM_NONCE], hello[8 + SHM_NONCE + DP_SHA256_LEN],
	    welcome[4 + DP_SHA256_LEN];
	char hex[2 * SHM_NONCE + 1];
	void *v = NULL;
	size_t vlen;
	int lfd = -1, fd = -1, seg = -1, rv = -1;
	layout2(&l);
	if (store_open(&st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	for (int i = 0; i < SHM_NONCE; i++)
		nonce[i] = (unsigned char)(getpid() * 31 + i * 7);
	for (int i = 0; i < SHM_NONCE; i++)
		sprintf(hex + 2 * i, "%02x", nonce[i]);
	shm_sock_name(SECRET, nonce, &l, &a, &alen);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, alen) < 0 || listen(lfd, 4) < 0) {
		snprintf(msg, len, "fake leader: cannot listen: %s", strerror(errno));
		goto out;
	}
	if (store_set(st, "dptrain.comm.cpu.1.nodes", "0 0", 3, &err) < 0 ||
	    store_set(st, "dptrain.comm.cpu.1.shm.0", hex, strlen(hex), &err) < 0) {
		ranks_msg(msg, len, &err);
		goto out;
	}
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	if (poll(&p, 1, LONG_S * 1000) != 1 || (fd = accept(lfd, NULL, NULL)) < 0) {
		snprintf(msg, len, "fake leader: rank 1 did not connect");
		goto out;
	}
	put32(chal, SHM_HELLO_MAGIC);
	memcpy(chal + 4, nonce, SHM_NONCE); /* any challenge will do */
	if (write(fd, chal, sizeof(chal)) != (ssize_t)sizeof(chal) ||
	    read_all(fd, hello, sizeof(hello)) < 0) {
		snprintf(msg, len, "fake leader: no hello from rank 1");
		goto out;
	}
	put32(welcome, SHM_HELLO_MAGIC);
	shm_hello_mac(SECRET, SHM_WELCOME_LABEL, sizeof(SHM_WELCOME_LABEL), chal + 4, hello + 8, 1,
		      &l, welcome + 4);
	if ((seg = foreign_fd(f, &l, msg, len)) < 0)
		goto out;
	if (shm_send_fd(fd, welcome, sizeof(welcome), seg, 0) != (ssize_t)sizeof(welcome)) {
		snprintf(msg, len, "fake leader: cannot hand over: %s", strerror(errno));
		goto out;
	}
	/* the store stays up until rank 1 has its verdict */
	if (store_get(st, "test.done", &v, &vlen, LONG_S, &err) < 0) {
		ranks_msg(msg, len, &err);
		goto out;
	}
	snprintf(msg, len, "handed over %s", foreign_what[f]);
	rv = 0;
out:
	free(v);
	if (seg >= 0)
		close(seg);
	if (fd >= 0)
		close(fd);
	if (lfd >= 0)
		close(lfd);
	store_close(st, 5);
	return rv;
}

static int rank_foreign(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	enum foreign f = *(const enum foreign *)j->arg;
	if (rank == 0)
		return fake_leader(j, f, msg, len);
	struct store_opts so = opts(j, rank, SECRET);
	struct comm_cpu_opts co = {.timeout_s = LONG_S};
	struct store *st;
	struct comm *c = NULL;
	struct dp_error err;
	if (store_open(&st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	double t0 = ranks_now();
	int made = comm_cpu_create(&c, st, &co, &err);
	double took = ranks_now() - t0;
	if (made == 0) {
		snprintf(msg, len, "the comm was made on %s", foreign_what[f]);
		c->ops->destroy(c);
	} else {
		snprintf(msg, len, "%.2f|%s", took, err.text);
	}
	store_set(st, "test.done", "1", 1, &err);
	store_close(st, 5);
	return made == 0 ? -1 : 0;
}

static void test_foreign(void)
{
	struct ranks_out out[RANKS_MAX];
	for (enum foreign f = 0; f < F_NFOREIGN; f++) {
		struct ranks_job j = {.world = 2, .arg = &f};
		ranks_run(&j, rank_foreign, -1, 3 * LONG_S, out);
		ok(out[0].status == 0 && out[1].status == 0, "a leader hands over %s: %s | %s",
		   foreign_what[f], out[0].msg, out[1].msg);
		const char *bar = strchr(out[1].msg, '|');
		like(bar ? bar + 1 : "", foreign_want[f], "%s: refused, saying why",
		     foreign_what[f]);
		like(bar ? bar + 1 : "", "rank 0", "%s: the message names who handed it over",
		     foreign_what[f]);
		ok(bar && atof(out[1].msg) < LONG_S,
		   "%s: refused at once, not at the timeout (%.2f s)", foreign_what[f],
		   atof(out[1].msg));
	}
}

/* ---------------------------------------------------------------------------------------
 * Strangers at the node's socket: rank 1 stands for a rank of the node (it publishes the
 * node's name as its host), finds the leader's socket by the protocol, and first lets
 * strangers at it: one with another secret, one of another user (when the test runs as root),
 * one that says nothing and stays. Then it makes its comm for real: the node forms, the
 * strangers got nothing (the challenge for the first, not even that for the other user). */

/* Connects to a, says hello with a MAC of key (NULL: says nothing). */
static int stranger(const struct sockaddr_un *a, socklen_t alen, const struct shm_layout *l,
		    const char *key)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (const struct sockaddr *)a, alen) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!key)
		return fd;
	unsigned char chal[4 + SHM_NONCE], hello[8 + SHM_NONCE + DP_SHA256_LEN];
	if (read_all(fd, chal, sizeof(chal)) < 0)
		return fd;
	put32(hello, SHM_HELLO_MAGIC);
	put32(hello + 4, 1);
	memset(hello + 8, 0x5a, SHM_NONCE);
	shm_hello_mac(key, SHM_HELLO_LABEL, sizeof(SHM_HELLO_LABEL), chal + 4, hello + 8, 1, l,
		      hello + 8 + SHM_NONCE);
	if (write(fd, hello, sizeof(hello)) != (ssize_t)sizeof(hello)) {
		/* closed already: read_to_close says so */
	}
	return fd;
}

/* Another user's connection (root only): what came back, as the exit status of a child. */
static long other_user(const struct sockaddr_un *a, socklen_t alen)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(200);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (const struct sockaddr *)a, alen) < 0)
			_exit(201);
		long bytes;
		int fds;
		read_to_close(fd, &bytes, &fds);
		_exit(bytes < 0 ? 202 : fds ? 203 : (int)(bytes > 100 ? 100 : bytes));
	}
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static int rank_strangers(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	struct store_opts so = opts(j, rank, SECRET);
	struct comm_cpu_opts co = {.timeout_s = LONG_S, .node = "x"};
	struct store *st;
	struct comm *c = NULL;
	struct dp_error err;
	int rv = -1, silent = -1;
	if (store_open(&st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	char said[256] = "";
	if (rank == 1) {
		struct shm_layout l;
		struct sockaddr_un a;
		socklen_t alen;
		unsigned char nonce[SHM_NONCE];
		void *v = NULL, *w = NULL;
		size_t vlen;
		layout2(&l);
		if (store_set(st, "dptrain.comm.cpu.1.host.1", "node x", 6, &err) < 0 ||
		    store_get(st, "dptrain.comm.cpu.1.nodes", &w, &vlen, LONG_S, &err) < 0 ||
		    store_get(st, "dptrain.comm.cpu.1.shm.0", &v, &vlen, LONG_S, &err) < 0) {
			ranks_msg(msg, len, &err);
			goto out;
		}
		for (int i = 0; i < SHM_NONCE; i++) {
			unsigned b = 0;
			sscanf((char *)v + 2 * i, "%2x", &b);
			nonce[i] = (unsigned char)b;
		}
		free(v);
		free(w);
		shm_sock_name(SECRET, nonce, &l, &a, &alen);
		long bytes = -2;
		int fds = -1;
		int fd = stranger(&a, alen, &l, "not-the-secret");
		if (fd >= 0) {
			read_to_close(fd, &bytes, &fds);
			close(fd);
		}
		long other = geteuid() == 0 ? other_user(&a, alen) : -3;
		silent = stranger(&a, alen, &l, NULL);
		snprintf(said, sizeof(said),
			 "another secret got %ld bytes and %d descriptors; another user got %ld "
			 "bytes; ",
			 bytes, fds, other);
	}
	double t0 = ranks_now();
	if (comm_cpu_create(&c, st, &co, &err) < 0) {
		ranks_msg(msg, len, &err);
		goto out;
	}
	double took = ranks_now() - t0;
	float x[1000];
	for (int i = 0; i < 1000; i++)
		x[i] = (float)(rank + 1) * (float)i;
	if (c->ops->allreduce(c, x, 1000, COMM_F32, COMM_SUM, &err) < 0) {
		ranks_msg(msg, len, &err);
		goto out;
	}
	int right = 1;
	for (int i = 0; i < 1000; i++)
		right &= x[i] == 3.0f * (float)i;
	snprintf(msg, len, "%s%s; made in %.2f s; allreduce %s", said, c->ops->name, took,
		 right ? "right" : "wrong");
	rv = right ? 0 : -1;
out:
	if (silent >= 0)
		close(silent);
	if (c)
		c->ops->destroy(c);
	store_close(st, 5);
	return rv;
}

static void test_strangers(void)
{
	struct ranks_out out[RANKS_MAX];
	struct ranks_job j = {.world = 2};
	ranks_run(&j, rank_strangers, -1, 3 * LONG_S, out);
	ok(out[0].status == 0 && out[1].status == 0,
	   "strangers at the node's socket: the node forms, the allreduce is right: %s | %s",
	   out[0].msg, out[1].msg);
	like(out[1].msg, "another secret got 0 bytes and 0 descriptors",
	     "a stranger with another secret gets nothing after the challenge, no descriptor");
	if (geteuid() == 0)
		like(out[1].msg, "another user got 0 bytes",
		     "another user's connection is closed before the challenge");
	else
		skip(1, "another user's connection: not root");
	like(out[1].msg, "shared memory: 2 ranks on 1 node",
	     "the comm is the node's shared memory");
	const char *t = strstr(out[0].msg, "made in ");
	double took = t ? atof(t + 8) : LONG_S;
	ok(took < LONG_S / 2, "a silent stranger does not hold up the node: %.2f s (< %d)", took,
	   LONG_S / 2);
}

/* ---------------------------------------------------------------------------------------
 * SIGKILL mid-allreduce. Each rank reports its segment's inode (its memfd in /proc/self/maps)
 * and whether the node's socket is gone once the comm is made; the victim's thread SIGKILLs
 * its process while its main thread is in an allreduce. */

/* The inode of this process's mapping of the segment of comm gen (the nth memfd mapping). */
static unsigned long segment_inode(int nth)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	unsigned long found = 0;
	int n = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long ino;
		char path[256] = "";
		if (sscanf(line, "%*s %*s %*s %*s %lu %255[^\n]", &ino, path) == 2 &&
		    strstr(path, "memfd:dptrain-comm") && n++ == nth) {
			found = ino;
			break;
		}
	}
	if (f)
		fclose(f);
	return found;
}

/* Whether a process maps a memfd of that inode. */
static int mapped_anywhere(unsigned long ino)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int found = 0;
	while (d && !found && (e = readdir(d))) {
		char path[300], line[512];
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/maps", e->d_name);
		FILE *f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f)) {
			unsigned long i;
			char p[256] = "";
			if (sscanf(line, "%*s %*s %*s %*s %lu %255[^\n]", &i, p) == 2 && i == ino &&
			    strstr(p, "memfd:dptrain-comm"))
				found = 1;
		}
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

/* Whether an abstract socket named "@dptrain-shm-..." is in this network namespace. */
static int shm_sockets(void)
{
	FILE *f = fopen("/proc/net/unix", "r");
	char line[512];
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "@dptrain-shm-") != NULL;
	if (f)
		fclose(f);
	return n;
}

/* /dev/shm's entries, joined. */
static void dev_shm(char *buf, size_t len)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t at = 0;
	buf[0] = 0;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' && at < len)
			at += (size_t)snprintf(buf + at, len - at, "%s ", e->d_name);
	if (d)
		closedir(d);
}

struct kill_job {
	int victim;
};

static void *killer(void *arg)
{
	(void)arg;
	ranks_sleep(0.3);
	raise(SIGKILL);
	return NULL;
}

static int rank_kill(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	const struct kill_job *k = j->arg;
	struct store_opts so = opts(j, rank, SECRET);
	struct comm_cpu_opts co = {.timeout_s = LONG_S};
	struct store *st;
	struct comm *c = NULL;
	struct dp_error err;
	size_t count = 1 << 20;
	if (store_open(&st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	if (comm_cpu_create(&c, st, &co, &err) < 0) {
		store_close(st, 1);
		return ranks_msg(msg, len, &err);
	}
	unsigned long ino = segment_inode(0);
	if (c->ops->barrier(c, &err) < 0) { /* every rank has looked */
		ranks_msg(msg, len, &err);
		goto out;
	}
	/* no node socket is left once every rank attached (unless another test's is there: then
	 * the count is not ours to judge, and a second look says so) */
	int sockets = shm_sockets();
	float *buf = calloc(count, sizeof(float));
	if (rank == k->victim) {
		pthread_t t;
		pthread_create(&t, NULL, killer, NULL);
	}
	for (;;) {
		double t0 = ranks_now();
		if (c->ops->allreduce(c, buf, count, COMM_F32, COMM_SUM, &err) < 0) {
			snprintf(msg, len, "%lu|%d|%.2f|%s", ino, sockets, ranks_now() - t0,
				 err.text);
			break;
		}
	}
	free(buf);
out:
	c->ops->destroy(c);
	store_close(st, 1);
	return 0;
}

static void test_kill(int world, int victim)
{
	struct ranks_out out[RANKS_MAX];
	struct kill_job k = {victim};
	struct ranks_job j = {.world = world, .arg = &k};
	char before[4096], after[4096];
	dev_shm(before, sizeof(before));
	ranks_run(&j, rank_kill, victim, 3 * LONG_S, out);
	dev_shm(after, sizeof(after));
	unsigned long ino = 0;
	for (int r = 0; r < world; r++) {
		if (r == victim) {
			ok(out[r].status == 128 + SIGKILL, "rank %d was SIGKILLed (status %d)", r,
			   out[r].status);
			continue;
		}
		char *m = out[r].msg;
		unsigned long i = strtoul(m, NULL, 10);
		const char *f[4] = {m, NULL, NULL, NULL};
		for (int n = 1; n < 4 && f[n - 1]; n++) {
			f[n] = strchr(f[n - 1], '|');
			f[n] = f[n] ? f[n] + 1 : NULL;
		}
		ok(out[r].status == 0 && f[3], "SIGKILL of rank %d: rank %d failed (%s)", victim, r,
		   m);
		if (!f[3])
			continue;
		if (r == (victim + 1) % world)
			note("SIGKILL of rank %d: rank %d: %s", victim, r, f[3]);
		char name[32];
		snprintf(name, sizeof(name), "rank %d", victim);
		like(f[3], name, "SIGKILL of rank %d: rank %d's message names it", victim, r);
		like(f[3], "died", "SIGKILL of rank %d: rank %d's message says it died", victim, r);
		ok(atof(f[2]) < LONG_S,
		   "SIGKILL of rank %d: rank %d knew before the %d s timeout (%.2f s)", victim, r,
		   LONG_S, atof(f[2]));
		ok(i != 0 && (ino == 0 || i == ino),
		   "SIGKILL of rank %d: rank %d mapped the node's segment (inode %lu)", victim, r,
		   i);
		ino = i ? i : ino;
		ok(atoi(f[1]) == 0 || shm_sockets() == 0,
		   "SIGKILL of rank %d: rank %d: no node socket once the node was made (%d seen)",
		   victim, r, atoi(f[1]));
	}
	is(after, before, "SIGKILL of rank %d: /dev/shm as before", victim);
	ok(ino && !mapped_anywhere(ino), "SIGKILL of rank %d: no process maps the segment after",
	   victim);
}

/* ---------------------------------------------------------------------------------------
 * Two comms of one job, two jobs at once: separate segments, exact sums (small integers) of
 * 10 MiB, the first comm's outputs written with streaming stores, the second's through the
 * cache (the machine's rule picks one of the two by the cache's size). */

struct pair_job {
	const char *secret;
	int salt;
};

#define PAIR_COUNT ((size_t)(2621440 + 3)) /* 10 MiB and 3 floats */

static int rank_pair(const struct ranks_job *j, int rank, char *msg, size_t len)
{
	const struct pair_job *p = j->arg;
	struct store_opts so = opts(j, rank, p->secret);
	struct comm_cpu_opts co[2] = {{.timeout_s = LONG_S, .stream_min = 1 << 20},
				      {.timeout_s = LONG_S, .stream_min = SIZE_MAX}};
	struct store *st;
	struct comm *c[2] = {NULL, NULL};
	struct dp_error err;
	int rv = -1, w = j->world;
	float *x[2] = {malloc(PAIR_COUNT * 4), malloc(PAIR_COUNT * 4)};
	if (store_open(&st, &so, &err) < 0)
		return ranks_msg(msg, len, &err);
	for (int k = 0; k < 2; k++)
		if (comm_cpu_create(&c[k], st, &co[k], &err) < 0) {
			ranks_msg(msg, len, &err);
			goto out;
		}
	unsigned long ino[2] = {segment_inode(0), segment_inode(1)};
	size_t wrong = 0;
	for (int it = 0; it < 3; it++) {
		for (int k = 0; k < 2; k++)
			for (size_t i = 0; i < PAIR_COUNT; i++)
				x[k][i] = (float)((rank + 1) * (int)((i + (size_t)k) % 13) +
						  p->salt + it);
		/* interleaved: the first comm's, then the second's, alternately */
		if (c[0]->ops->allreduce(c[0], x[0], PAIR_COUNT, COMM_F32, COMM_SUM, &err) < 0 ||
		    c[1]->ops->allreduce(c[1], x[1], PAIR_COUNT, COMM_F32, COMM_SUM, &err) < 0) {
			ranks_msg(msg, len, &err);
			goto out;
		}
		for (int k = 0; k < 2; k++)
			for (size_t i = 0; i < PAIR_COUNT; i++) {
				int m = (int)((i + (size_t)k) % 13);
				float want = (float)(m * w * (w + 1) / 2 + w * (p->salt + it));
				wrong += x[k][i] != want;
			}
	}
	snprintf(msg, len, "%lu %lu|%zu wrong", ino[0], ino[1], wrong);
	rv = wrong ? -1 : 0;
out:
	for (int k = 0; k < 2; k++) {
		if (c[k])
			c[k]->ops->destroy(c[k]);
		free(x[k]);
	}
	store_close(st, 5);
	return rv;
}

static void test_pairs(void)
{
	struct ranks_out a[RANKS_MAX], b[RANKS_MAX];
	struct pair_job pa = {"the first step's secret", 1}, pb = {"the second step's secret", 100};
	int fds[2];
	if (pipe(fds) < 0)
		bail_out("pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid == 0) { /* the second job, at the same time */
		struct ranks_job j = {.world = 3, .arg = &pb};
		close(fds[0]);
		ranks_run(&j, rank_pair, -1, 3 * LONG_S, b);
		ssize_t n = write(fds[1], b, sizeof(b));
		_exit(n == (ssize_t)sizeof(b) ? 0 : 1);
	}
	close(fds[1]);
	struct ranks_job j = {.world = 2, .arg = &pa};
	ranks_run(&j, rank_pair, -1, 3 * LONG_S, a);
	memset(b, 0, sizeof(b));
	if (read_all(fds[0], b, sizeof(b)) < 0)
		snprintf(b[0].msg, sizeof(b[0].msg), "the second job said nothing");
	close(fds[0]);
	waitpid(pid, NULL, 0);
	unsigned long ia[2], ib[2];
	int same = 1;
	for (int r = 0; r < 2; r++)
		same &= a[r].status == 0 &&
			strcmp(strchr(a[r].msg, '|') ? a[r].msg : "", a[0].msg) == 0;
	ok(same,
	   "two comms of a 2-rank job: exact sums at %zu floats (streamed, cached), every rank one "
	   "segment each: %s",
	   PAIR_COUNT, a[0].msg);
	same = 1;
	for (int r = 0; r < 3; r++)
		same &= b[r].status == 0 &&
			strcmp(strchr(b[r].msg, '|') ? b[r].msg : "", b[0].msg) == 0;
	ok(same, "two comms of a 3-rank job at the same time: exact sums, one segment each: %s",
	   b[0].msg);
	if (sscanf(a[0].msg, "%lu %lu", &ia[0], &ia[1]) == 2 &&
	    sscanf(b[0].msg, "%lu %lu", &ib[0], &ib[1]) == 2)
		ok(ia[0] && ia[1] && ib[0] && ib[1] && ia[0] != ia[1] && ib[0] != ib[1] &&
		       ia[0] != ib[0] && ia[0] != ib[1] && ia[1] != ib[0] && ia[1] != ib[1],
		   "four comms, four segments (%lu %lu, %lu %lu)", ia[0], ia[1], ib[0], ib[1]);
	else
		ok(0, "four comms, four segments: no inodes (%s | %s)", a[0].msg, b[0].msg);
}

int main(void)
{
	double t0 = ranks_now();
	test_header();
	test_foreign();
	test_strangers();
	test_kill(3, 2);
	test_kill(3, 0);
	test_pairs();
	diag("comm_shm tests took %.1f s", ranks_now() - t0);
	return done_testing();
}
