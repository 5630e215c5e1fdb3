/* launch_files.c — unit tests of what dptrain-launch writes: output directory patterns,
 * mkdir -p, atomic files, env.log, the exported variables and the fallback's wait for the
 * rank table; and the wire-up's phases (launcher/wireup.h) called one by one for a one-rank
 * job, answering the plugin on a socket pair. Works in its own temporary directory. */
#include "common/error.h"
#include "common/mkdir_p.h"
#include "common/openfile.h"
#include "launcher/alloc.h"
#include "launcher/launcher.h"
#include "t/lib/tap.h"
#include "launcher/wireup.h"
#include "task/tee.h"
#include "task/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmp[] = "/tmp/dptrain-launch-XXXXXX";

static char *slurp(const char *path)
{
	static char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	buf[0] = '\0';
	if (fd < 0)
		return buf;
	n = read(fd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
	return buf;
}

static void test_expand(void)
{
	char out[LAUNCH_PATH_MAX], want[LAUNCH_PATH_MAX], cwd[1024], longp[LAUNCH_PATH_MAX + 8];
	struct dp_error err = {""};

	if (!getcwd(cwd, sizeof(cwd)))
		bail_out("getcwd: %s", strerror(errno));
	ok(launch_outdir_expand("dptrain.%j.%s", "123", "4", "n1", out, &err) == 0,
	   "default pattern expands");
	snprintf(want, sizeof(want), "%s/dptrain.123.4", cwd);
	is(out, want, "relative to the working directory, %%j and %%s replaced");
	ok(launch_outdir_expand("/abs/%j/x%%y%s", "local", "0", "n1", out, &err) == 0,
	   "absolute pattern with %%%%");
	is(out, "/abs/local/x%y0", "%%%% is a percent sign; absolute stays absolute");
	ok(launch_outdir_expand("runs/%j%j", "7", "0", "n1", out, &err) == 0, "%%j twice");
	snprintf(want, sizeof(want), "%s/runs/77", cwd);
	is(out, want, "... both replaced");

	ok(launch_outdir_expand("runs/%j/%n", "7", "0", "gpu-node-12", out, &err) == 0, "%%n");
	snprintf(want, sizeof(want), "%s/runs/7/gpu-node-12", cwd);
	is(out, want, "... is the node's name");

	char user[256];
	ok(launch_user_name(user, sizeof(user)) == 0 && user[0], "this user's name: %s", user);
	ok(launch_outdir_expand("/scratch/%u/%j.%s", "7", "1", "n1", out, &err) == 0, "%%u");
	snprintf(want, sizeof(want), "/scratch/%s/7.1", user);
	is(out, want, "... is the user's name");

	ok(launch_outdir_expand("out.%x", "1", "0", "n1", out, &err) == -1, "%%x is refused");
	like(err.text, "unknown pattern '%x'", "... naming it");
	like(err.text, "%j job id", "... and listing what is known");
	ok(launch_outdir_expand("out%", "1", "0", "n1", out, &err) == -1,
	   "a trailing %% is refused");
	ok(launch_outdir_expand("", "1", "0", "n1", out, &err) == -1, "empty is refused");
	like(err.text, "empty", "... as empty");
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	ok(launch_outdir_expand(longp, "1", "0", "n1", out, &err) == -1,
	   "an over-long pattern is refused");
	like(err.text, "too long", "... as too long");
}

static void test_mkdir(void)
{
	char path[512], file[512];
	struct dp_error err = {""};
	struct stat st;

	/* dp_mkdir_p itself: t/unit/mkdir_p.c */
	snprintf(path, sizeof(path), "%s/a/b/c/", tmp);
	ok(dp_mkdir_p(path, 0755, &err) == 0, "mkdir -p a/b/c/ %s", err.text);
	ok(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "... exists");

	/* Whose directory the job's files may go into (issue: a shared output_dir) */
	snprintf(path, sizeof(path), "%s/a/b", tmp);
	ok(launch_dir_owned(path, &err) == 0, "our own 0755 directory: fine %s", err.text);
	chmod(path, 0775);
	ok(launch_dir_owned(path, &err) == -1, "group-writable: refused");
	like(err.text, "writable by its group (mode 0775)", "... saying so");
	chmod(path, 01777);
	ok(launch_dir_owned(path, &err) == -1, "world-writable, even sticky: refused");
	like(err.text, "writable by everyone", "... saying so");
	chmod(path, 0755);
	snprintf(file, sizeof(file), "%s/link", tmp);
	ok(symlink(path, file) == 0 && launch_dir_owned(file, &err) == -1,
	   "a symlink to our own directory: refused");
	like(err.text, "is not a directory (a symbolic link", "... saying so");
	if (geteuid() == 0) {
		ok(chown(path, 65534, 65534) == 0, "give it to nobody");
		ok(launch_dir_owned(path, &err) == -1, "another user's: refused");
		like(err.text, "belongs to another user (uid 65534)", "... naming the owner");
		ok(chown(path, 0, 0) == 0, "back to root");
	} else {
		skip(3, "not root: cannot give a directory to another user");
		ok(1, "not root");
	}
}

/* No other user may be able to swap a directory on the way to the output directory (issue:
 * a parent owned by another user, a group-writable project directory). */
static void test_dir_safe(void)
{
	char base[512], path[600], link[600], canon[LAUNCH_PATH_MAX], want[600];
	struct dp_error err = {""};

	snprintf(base, sizeof(base), "%s/safe", tmp);
	snprintf(path, sizeof(path), "%s/p/run", base);
	ok(dp_mkdir_p(path, 0755, &err) == 0, "mkdir %s", path);
	ok(launch_dir_safe(path, canon, &err) == 0, "our own tree: safe %s", err.text);
	is(canon, path, "... the path as it is (no link on the way)");
	snprintf(want, sizeof(want), "%s/p", base);
	chmod(want, 0775);
	ok(launch_dir_safe(path, canon, &err) == -1, "a group-writable parent: refused");
	like(err.text, "/safe/p' on its way is writable by its group and not sticky (mode 0775)",
	     "... naming it and why");
	chmod(want, 0777);
	ok(launch_dir_safe(path, canon, &err) == -1, "a world-writable parent: refused");
	like(err.text, "writable by everyone and not sticky", "... saying so");
	chmod(want, 01777);
	ok(launch_dir_safe(path, canon, &err) == 0, "a sticky one, our entry in it: safe %s",
	   err.text);
	chmod(want, 0755);
	snprintf(link, sizeof(link), "%s/l", base);
	ok(symlink("p", link) == 0, "a link of ours on the way");
	snprintf(want, sizeof(want), "%s/l/run", base);
	ok(launch_dir_safe(want, canon, &err) == 0, "... is followed %s", err.text);
	is(canon, path, "... and the resolved path is the one used");
	snprintf(want, sizeof(want), "%s/l", base);
	ok(launch_dir_safe(want, canon, &err) == -1, "the link itself as the directory: refused");
	if (geteuid() == 0) {
		snprintf(want, sizeof(want), "%s/p", base);
		ok(chown(want, 65534, 65534) == 0, "the parent given to nobody");
		ok(launch_dir_safe(path, canon, &err) == -1, "a parent of another user's: refused");
		like(err.text, "/safe/p' on its way belongs to another user (uid 65534)",
		     "... naming it and its owner");
		ok(chown(want, 0, 0) == 0 && chmod(want, 01777) == 0 &&
		       chown(path, 65534, 65534) == 0,
		   "a sticky parent, the directory nobody's");
		ok(launch_dir_safe(path, canon, &err) == -1, "... refused");
		like(err.text, "belongs to another user (uid 65534)", "... naming its owner");
		ok(chown(path, 0, 0) == 0 && chmod(want, 0755) == 0, "back to root's");
	} else {
		skip(7, "not root: cannot give a directory to another user");
	}
}

/* dp_open_regular: what a user put in place of a file (a FIFO, a link, a directory) is
 * refused at once, never waited for; the owner and mode checks. */
static void test_open_regular(void)
{
	char fifo[512], file[512], link[512];
	struct dp_error err = {""};
	int fd;

	snprintf(fifo, sizeof(fifo), "%s/fifo", tmp);
	snprintf(file, sizeof(file), "%s/regular", tmp);
	snprintf(link, sizeof(link), "%s/tofile", tmp);
	ok(mkfifo(fifo, 0600) == 0, "a FIFO without a writer or reader");
	alarm(20); /* a blocking open would hang: fail loudly instead */
	ok(dp_open_regular(fifo, O_RDONLY, 0, 0, "the log", &err) == -1, "read: refused at once");
	like(err.text, "the log ", "... named as the caller says");
	like(err.text, "/fifo is a FIFO, not a regular file", "... saying what it is");
	ok(dp_open_regular(fifo, O_WRONLY | O_APPEND, 0, DP_OPEN_MINE, NULL, &err) == -1,
	   "write: refused at once");
	like(err.text, "is a FIFO, not a regular file", "... saying what it is");
	ok(dp_open_regular(tmp, O_RDONLY, 0, 0, NULL, &err) == -1, "a directory: refused");
	like(err.text, "is a directory", "... saying so");
	alarm(0);
	fd = dp_open_regular(file, O_WRONLY | O_CREAT | O_APPEND, 0644, DP_OPEN_MINE, NULL, &err);
	ok(fd >= 0, "a new file of ours: %s", err.text);
	ok(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK), "... returned blocking");
	ok(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC), "... close-on-exec");
	if (fd >= 0)
		close(fd);
	ok(symlink(file, link) == 0 && dp_open_regular(link, O_RDONLY, 0, 0, NULL, &err) == -1,
	   "a symbolic link: refused");
	like(err.text, "a symbolic link is refused", "... saying so");
	chmod(file, 0664);
	ok(dp_open_regular(file, O_RDONLY, 0, DP_OPEN_NOT_SHARED, NULL, &err) == -1,
	   "group-writable, when that matters: refused");
	like(err.text, "writable by its group (mode 0664)", "... saying so");
	ok((fd = dp_open_regular(file, O_RDONLY, 0, 0, NULL, &err)) >= 0, "... else fine");
	if (fd >= 0)
		close(fd);
	chmod(file, 0644);
	if (geteuid() == 0) {
		ok(chown(file, 65534, 65534) == 0, "the file given to nobody");
		ok(dp_open_regular(file, O_RDONLY, 0, DP_OPEN_MINE_OR_ROOT, NULL, &err) == -1,
		   "another user's, mine or root's wanted: refused");
		like(err.text, "belongs to another user (uid 65534), neither you nor root",
		     "... naming the owner");
		ok(dp_open_regular(file, O_WRONLY | O_APPEND, 0, DP_OPEN_MINE, NULL, &err) == -1,
		   "another user's, mine wanted: refused");
	} else {
		skip(4, "not root: cannot give a file to another user");
	}
}

/* The output directory's lock: one holder; the next is told who; a symlinked or foreign lock
 * file is refused; a lock passed down by dptrain-run (DPTRAIN_LOCK_FD) is taken as one's own;
 * closing the holder frees it. */
static void test_lock(void)
{
	char dir[512], file[600], env[32];
	struct dp_error err = {""};
	int fd = -1, fd2 = -1;

	snprintf(dir, sizeof(dir), "%s/locked", tmp);
	ok(dp_mkdir_p(dir, 0755, &err) == 0, "a directory to lock %s", err.text);
	ok(launch_outdir_lock(dir, "job 7 step 1, rank 0 on n3", &fd, &err) == 0 && fd >= 0,
	   "the first taker holds it %s", err.text);
	ok((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0, "... close-on-exec until passed on");
	snprintf(file, sizeof(file), "%s/.dptrain.lock", dir);
	like(slurp(file), "job 7 step 1, rank 0 on n3\n", "... and says who it is");
	ok(launch_outdir_lock(dir, "job 8 step 0, rank 0 on n1", &fd2, &err) == -1 && fd2 == -1,
	   "a second taker is refused");
	like(err.text,
	     "is in use by another job (job 7 step 1, rank 0 on n3): two jobs writing one",
	     "... naming the holder");
	like(slurp(file), "job 7 step 1", "... and leaves the holder's note alone");
	snprintf(env, sizeof(env), "%d", fd);
	setenv("DPTRAIN_LOCK_FD", env, 1);
	err.text[0] = '\0';
	ok(launch_outdir_lock(dir, "job 7 step 1, rank 0 (launcher)", &fd2, &err) == 0 &&
	       fd2 >= 0 && fd2 != fd,
	   "the holder's own lock, passed down: taken as one's own %s", err.text);
	unsetenv("DPTRAIN_LOCK_FD");
	close(fd2);
	close(fd);
	fd2 = -1;
	err.text[0] = '\0';
	ok(launch_outdir_lock(dir, "job 8 step 0, rank 0 on n1", &fd2, &err) == 0,
	   "once the holder has closed it, the next job gets it %s", err.text);
	like(slurp(file), "job 8 step 0, rank 0 on n1\n", "... with its own note");
	close(fd2);
	unlink(file);
	ok(symlink("/etc/passwd", file) == 0, "a symlink as the lock file");
	ok(launch_outdir_lock(dir, "x", &fd2, &err) == -1, "... is refused");
	like(err.text, "a symbolic link is refused", "... saying so");
	unlink(file);
	if (geteuid() == 0) {
		int f = open(file, O_WRONLY | O_CREAT, 0600);
		ok(f >= 0 && fchown(f, 65534, 65534) == 0, "a lock file of another user");
		close(f);
		ok(launch_outdir_lock(dir, "x", &fd2, &err) == -1, "... is refused");
		like(err.text, "is not a regular file of this user's", "... saying so");
		unlink(file);
	} else {
		skip(3, "not root: cannot give a file to another user");
	}
}

/* 1 if sig is pending on the process (ShdPnd), not only on the calling thread (SigPnd). */
static int pending_on_process(int sig)
{
	char line[256];
	unsigned long long mask = 0;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "ShdPnd: %llx", &mask) == 1)
			break;
	if (f)
		fclose(f);
	return (mask >> (sig - 1)) & 1;
}

/* The tee's child hands a stop signal that came before the fork on to the command: pending on
 * the process, where the command's signal thread sees it after the exec. (Raised on the thread
 * it stayed the main thread's, and the trainer's sigwaitinfo thread never took it: a stop
 * request lost, seen in t0840 under the sanitizers.) */
static void test_tee_pending(void)
{
	sigset_t stop, pending;
	int status = -1;
	pid_t pid;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGUSR1);
	sigemptyset(&pending);
	sigaddset(&pending, SIGTERM);
	pid = fork();
	if (pid == 0) {
		sigprocmask(SIG_BLOCK, &stop, NULL);
		tee_raise_pending(&stop, &pending);
		_exit(pending_on_process(SIGTERM) && !pending_on_process(SIGUSR1) ? 0 : 1);
	}
	ok(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0,
	   "a stop signal from before the fork is pending on the child process, for any thread");
}

static int count_entries(const char *dir)
{
	char cmd[600];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	p = popen(cmd, "r");
	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

static void test_atomic(void)
{
	char dir[512], path[600];
	struct dp_error err = {""};
	struct stat st;

	snprintf(dir, sizeof(dir), "%s/atomic", tmp);
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/f.json", dir);
	ok(launch_write_atomic(path, "first\n", 6, 0644, &err) == 0, "write %s", err.text);
	is(slurp(path), "first\n", "content");
	ok(launch_write_atomic(path, "second\n", 7, 0644, &err) == 0, "overwrite");
	is(slurp(path), "second\n", "new content");
	is_int(count_entries(dir), 1, "no temporary file left behind");
	ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "mode 0644");
	snprintf(path, sizeof(path), "%s/missing/f", dir);
	ok(launch_write_atomic(path, "x", 1, 0644, &err) == -1, "missing directory fails");
	like(err.text, "cannot create a temporary file next to", "... saying where");
}

static void test_env(void)
{
	const char *vars[][2] = {{"RANK", "1"},
				 {"WORLD_SIZE", "2"},
				 {"MASTER_ADDR", "127.0.0.1"},
				 {"MASTER_PORT", "29511"},
				 {"ZZZ_LAST", "z"},
				 {"AAA_FIRST", "a=b"}};
	struct alloc_opts o;
	struct alloc a;
	struct ranktable rt;
	struct launch_paths p;
	struct dp_error err;
	char path[600], *log;
	const char *s;
	size_t i;

	clearenv();
	setenv("PATH", "/usr/bin:/bin", 1);
	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		setenv(vars[i][0], vars[i][1], 1);
	memset(&o, 0, sizeof(o));
	o.source = ALLOC_SRC_ENV;
	o.iface = "lo";
	o.stall_rank = -1;
	o.dev_dir = "/nonexistent-dptrain";
	ok(alloc_discover(&a, &o, &err) == 0, "2-rank env allocation %s", err.text);
	memset(&rt, 0, sizeof(rt));
	ok(alloc_rank_table(&a, &rt, &err) == 0, "its rank table %s", err.text);
	ok(launch_paths_init(&p, tmp, 1, &err) == 0, "paths");
	snprintf(path, sizeof(path), "%s/rank_table.json", tmp);
	is(p.rank_table, path, "rank table path is OUTPUT/rank_table.json");
	snprintf(path, sizeof(path), "%s/device1", tmp);
	is(p.devdir, path, "device directory is OUTPUT/device<RANK>");
	ok(launch_env_export(&a, &rt, &p, &err) == 0, "export %s", err.text);
	s = getenv("LOCAL_RANK");
	is(s, "1", "LOCAL_RANK=1");
	is(getenv("LOCAL_WORLD_SIZE"), "2", "LOCAL_WORLD_SIZE=2");
	is(getenv("NODE_RANK"), "0", "NODE_RANK=0");
	is(getenv("GROUP_RANK"), "0", "GROUP_RANK=0");
	is(getenv("RANK_ID"), "1", "RANK_ID=1 (MindSpore)");
	is(getenv("RANK_SIZE"), "2", "RANK_SIZE=2");
	is(getenv("DEVICE_ID"), "1", "DEVICE_ID = local rank on a CPU node");
	is(getenv("RANK_TABLE_FILE"), p.rank_table, "RANK_TABLE_FILE");
	is(getenv("DPTRAIN_RANK_TABLE"), p.rank_table, "DPTRAIN_RANK_TABLE");
	is(getenv("DPTRAIN_DEVICE_DIR"), p.devdir, "DPTRAIN_DEVICE_DIR");
	is(getenv("DPTRAIN_OUTPUT_DIR"), tmp, "DPTRAIN_OUTPUT_DIR");
	is(getenv("DPTRAIN_SOURCE"), "env", "DPTRAIN_SOURCE=env");
	is(getenv("DPTRAIN_GPU"), "-1", "DPTRAIN_GPU=-1 without GPUs");
	is(getenv("MASTER_PORT"), "29511", "MASTER_PORT kept");

	snprintf(path, sizeof(path), "%s/env.log", tmp);
	ok(launch_env_log(path, &err) == 0, "env.log written %s", err.text);
	{
		struct stat st;
		ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600,
		   "env.log is 0600: it holds the environment");
	}
	log = slurp(path);
	ok(strncmp(log, "AAA_FIRST=a=b\n", 14) == 0, "env.log is sorted: AAA_FIRST first");
	like(log, "\nRANK=1\n", "env.log has RANK=1");
	like(log, "\nDPTRAIN_SOURCE=env\n", "env.log has what was exported");
	ok(strlen(log) > 11 && strcmp(log + strlen(log) - 11, "ZZZ_LAST=z\n") == 0,
	   "ZZZ_LAST last");

	/* Without PMIx, local rank 1 waits for local rank 0's table; here nobody writes it. */
	ok(alloc_sync(&a, p.rank_table, &rt, 1, &err) == -1,
	   "local rank 1 times out without a rank table");
	like(err.text, "rank 0 (local rank 0 on", "... naming the rank that should write it");
	like(err.text, "within 1 s", "... and the timeout");
	ok(rt_write_atomic(&rt, p.rank_table, RT_SCHEMA_DPTRAIN, 0644, &err) == 0,
	   "rank table written");
	ok(alloc_sync(&a, p.rank_table, &rt, 1, &err) == 0, "then local rank 1 goes on %s",
	   err.text);
	rt_free(&rt);
	alloc_free(&a);
}

static void test_exec_status(void)
{
	is_int(launch_exec_status(ENOENT), 127, "a missing command: 127 like a shell");
	is_int(launch_exec_status(EACCES), 126, "not executable: 126");
	is_int(launch_exec_status(ENOEXEC), 126, "bad format: 126");
}

/* The phases dptrain-launch's main calls, in its order, for rank 0 of 1 (env source), as the
 * plugin's helper: each leaves what the next needs, and the records come back on the socket,
 * the first with this protocol version, the last the end. */
static void test_wireup_phases(void)
{
	static char cmd0[] = "true", *cmd[] = {cmd0, NULL};
	struct wireup w;
	struct dp_error err;
	struct wire_rec r;
	char out[600], path[700], buf[65536];
	size_t len = 0, off = 0;
	ssize_t n;
	int sv[2], limit = -1, phase = 0, got_log = 0, got_end = 0, kinds_ok = 1;

	snprintf(out, sizeof(out), "%s/wired", tmp);
	clearenv();
	setenv("PATH", "/usr/bin:/bin", 1);
	setenv("DPTRAIN_SOURCE", "env", 1);
	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "1", 1);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	setenv("MASTER_PORT", "29511", 1);
	setenv("DPTRAIN_OUTPUT_DIR", out, 1);
	setenv("DPTRAIN_STORE_SECRET", "0123456789abcdef0123456789abcdef", 1);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		bail_out("socketpair: %s", strerror(errno));
	wireup_init(&w);
	w.cmd = cmd;
	like(w.ident, "rank 0 on ", "ident before discovery: the rank from the environment");
	ok(wireup_to_plugin(&w, sv[1], &err) == 0, "answers the plugin on a socket");
	int (*phases[])(struct wireup *, struct dp_error *) = {
	    wireup_start, wireup_discover,   wireup_meet,	 wireup_outdir,
	    wireup_gate,  wireup_rank_table, wireup_environment, wireup_env_log,
	    wireup_sync,  wireup_finish,     wireup_command};
	for (phase = 0; phase < (int)(sizeof(phases) / sizeof(phases[0])); phase++)
		if (phases[phase](&w, &err) != 0)
			break;
	is_int(phase, 11, "every phase passes %s", phase < 11 ? err.text : "");
	like(w.ident, "rank 0 on ", "ident after discovery");
	ok(!w.guard_running && !w.session_open, "the guard stopped, no session open");
	snprintf(path, sizeof(path), "%s/rank_table.json", out);
	ok(access(path, F_OK) == 0, "the rank table written");
	snprintf(path, sizeof(path), "%s/device0/env.log", out);
	ok(access(path, F_OK) == 0, "device0/env.log written");
	ok(w.lock_fd >= 0, "rank 0 holds the output directory's lock");
	is_int(wireup_hand_over(&w, &err), 0, "the hand-over: the records sent");
	while ((n = read(sv[0], buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)n;
	close(sv[0]);
	is_int(wire_check_first(buf, len, "test", &limit, &err), 1,
	       "the first record: D of this protocol version");
	is_int(limit, 2 * LAUNCH_DEFAULT_TIMEOUT + 30, "... the guard's limit");
	while (wire_next(buf, len, &off, &r)) {
		got_log |= r.kind == WIRE_LOG && strstr(r.value, "/device0/train.log") != NULL;
		got_end = r.kind == WIRE_END;
		kinds_ok &= strchr("DELTSCMKZ", r.kind) != NULL;
	}
	ok(got_log, "the log record names device0/train.log");
	ok(kinds_ok && got_end && off == len, "known kinds, the end last");
	if (w.lock_fd >= 0)
		close(w.lock_fd);
}

int main(void)
{
	char cmd[600];

	if (!mkdtemp(tmp))
		bail_out("mkdtemp: %s", strerror(errno));
	if (chdir(tmp) != 0)
		bail_out("chdir: %s", strerror(errno));
	test_expand();
	test_mkdir();
	test_dir_safe();
	test_open_regular();
	test_lock();
	test_tee_pending();
	test_atomic();
	test_env();
	test_exec_status();
	test_wireup_phases();
	if (chdir("/") == 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
		if (system(cmd) != 0)
			diag("could not remove %s", tmp);
	}
	return done_testing();
}
