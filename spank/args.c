/* args.c — the plugstack.conf arguments of dptrain.so ("key=value" words after the plugin's
 * path): their defaults, syntax and validation. Every context parses them the same way. Must
 * not look at the job: what the arguments mean for a task is remote.c's business. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "spank/plugin.h"

/* Where `make install` puts the programs; the Makefile passes it for the plugin's objects.
 * Without it the launcher and trainer are looked up on the task's PATH. */
#ifdef DPTRAIN_BINDIR
#define DP_DEFAULT_LAUNCHER DPTRAIN_BINDIR "/dptrain-launch"
#define DP_DEFAULT_TRAINER  DPTRAIN_BINDIR "/dptrain"
#else
#define DP_DEFAULT_LAUNCHER "dptrain-launch"
#define DP_DEFAULT_TRAINER  "dptrain"
#endif

#define DP_KNOWN_KEYS                                                                              \
	"launcher=, trainer=, output_dir=, default_output_dir=, iface=, timeout=, max_timeout=, "  \
	"max_data_workers="

static int dp_set(char *dst, size_t size, const char *key, const char *val, struct dp_error *err)
{
	if (strlen(val) >= size) {
		errprintf(err, "dptrain: plugstack.conf: %s= is longer than %zu characters", key,
			  size - 1);
		return -1;
	}
	strcpy(dst, val);
	return 0;
}

static int dp_check_path(const char *key, const char *val, struct dp_error *err)
{
	if (val[0] != '/') {
		errprintf(err,
			  "dptrain: plugstack.conf: %s=%s is not an absolute path (the task's "
			  "PATH and working directory are the user's, not yours)",
			  key, val);
		return -1;
	}
	return 0;
}

/* An interface name as the kernel takes it (IFNAMSIZ 16, no '/' or blanks). */
static int dp_check_iface(const char *val, struct dp_error *err)
{
	size_t n = strlen(val);

	if (n >= 16 || strcspn(val, "/ \t:") != n) {
		errprintf(err,
			  "dptrain: plugstack.conf: iface=%s is not a network interface name "
			  "(at most 15 characters, no '/', ':' or blanks; e.g. iface=eth0)",
			  val);
		return -1;
	}
	return 0;
}

/* The patterns dptrain-launch expands in an output directory (launch_outdir_expand). */
static int dp_check_pattern(const char *key, const char *val, struct dp_error *err)
{
	for (const char *p = strchr(val, '%'); p; p = strchr(p + 2, '%'))
		if (!p[1] || !strchr("jsnu%", p[1])) {
			errprintf(
			    err,
			    "dptrain: plugstack.conf: %s=%s: '%%%.1s' is not expanded "
			    "(known: %%j job id, %%s step id, %%n node name, %%u user name, %%%% "
			    "a percent sign)",
			    key, val, p + 1);
			return -1;
		}
	return 0;
}

/* A whole number from 1 to max (dptrain-launch and the trainer read the variables the plugin
 * sets from these as integers), digits only. */
static int dp_check_count(const char *key, const char *val, long max, const char *what,
			  const char *example, struct dp_error *err)
{
	char *end;
	long s;

	errno = 0;
	s = strtol(val, &end, 10);
	if (errno || end == val || *end || val[0] < '0' || val[0] > '9' || s < 1 || s > max) {
		errprintf(err,
			  "dptrain: plugstack.conf: %s=%s is not a whole number of %s from 1 to "
			  "%ld (e.g. %s=%s)",
			  key, val, what, max, key, example);
		return -1;
	}
	return 0;
}

int dp_args_parse(struct dp_args *a, int ac, char **av, struct dp_error *err)
{
	unsigned seen = 0;
	int i;

	memset(a, 0, sizeof(*a));
	strcpy(a->launcher, DP_DEFAULT_LAUNCHER);
	strcpy(a->trainer, DP_DEFAULT_TRAINER);

	for (i = 0; i < ac; i++) {
		static const char *const keys[] = {
		    "launcher",		  "trainer",	 "output_dir",	    "iface", "timeout",
		    "default_output_dir", "max_timeout", "max_data_workers"};
		const char *eq = strchr(av[i], '=');
		const char *val = eq ? eq + 1 : NULL;
		unsigned k;
		int rc;

		for (k = 0; eq && k < sizeof(keys) / sizeof(keys[0]); k++)
			if ((size_t)(eq - av[i]) == strlen(keys[k]) &&
			    !strncmp(av[i], keys[k], strlen(keys[k])))
				break;
		if (!eq || k == sizeof(keys) / sizeof(keys[0])) {
			errprintf(err,
				  "dptrain: plugstack.conf: unknown argument '%s' for dptrain.so "
				  "(known: " DP_KNOWN_KEYS ")",
				  av[i]);
			return -1;
		}
		if (seen & (1u << k)) {
			errprintf(err, "dptrain: plugstack.conf: %s= is given twice", keys[k]);
			return -1;
		}
		seen |= 1u << k;
		if (!*val) {
			errprintf(err,
				  "dptrain: plugstack.conf: %s= is empty (leave it out for the "
				  "default)",
				  keys[k]);
			return -1;
		}
		switch (k) {
		case 0:
			rc = dp_check_path(keys[k], val, err) ||
			     dp_set(a->launcher, sizeof(a->launcher), keys[k], val, err);
			break;
		case 1:
			if (strcmp(val, DP_TRAINER_NONE) == 0) {
				a->trainer[0] = '\0';
				rc = 0;
				break;
			}
			rc = dp_check_path(keys[k], val, err) ||
			     dp_set(a->trainer, sizeof(a->trainer), keys[k], val, err);
			break;
		case 2:
			rc = dp_check_pattern(keys[k], val, err) ||
			     dp_set(a->output_dir, sizeof(a->output_dir), keys[k], val, err);
			break;
		case 3:
			rc = dp_check_iface(val, err) ||
			     dp_set(a->iface, sizeof(a->iface), keys[k], val, err);
			break;
		case 4:
			rc = dp_check_count(keys[k], val, 7 * 86400, "seconds", "300", err) ||
			     dp_set(a->timeout, sizeof(a->timeout), keys[k], val, err);
			break;
		case 5:
			rc = dp_check_pattern(keys[k], val, err) ||
			     dp_set(a->default_output_dir, sizeof(a->default_output_dir), keys[k],
				    val, err);
			break;
		case 6:
			rc = dp_check_count(keys[k], val, 7 * 86400, "seconds", "1800", err) ||
			     dp_set(a->max_timeout, sizeof(a->max_timeout), keys[k], val, err);
			break;
		default:
			rc = dp_check_count(keys[k], val, 1024, "data workers", "8", err) ||
			     dp_set(a->max_data_workers, sizeof(a->max_data_workers), keys[k], val,
				    err);
			break;
		}
		if (rc)
			return -1;
	}
	/* The site's own timeout must be one its limit allows. */
	if (a->timeout[0] && a->max_timeout[0] && atol(a->timeout) > atol(a->max_timeout))
		return errprintf(err,
				 "dptrain: plugstack.conf: timeout=%s is more than max_timeout=%s",
				 a->timeout, a->max_timeout);
	return 0;
}
