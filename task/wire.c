/* wire.c — the helper-to-plugin records (wire.h): framing them, walking them, and the first
 * record's verdict on the helper's version. Must not decide what a record does to the task
 * (spank/remote.c) or what the helper sends (launcher/wireup_answer.c). */
#include "task/wire.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wire_limit_value(char out[WIRE_LIMIT_MAX], int limit_s)
{
	snprintf(out, WIRE_LIMIT_MAX, "%d %d %s", limit_s, WIRE_VERSION, DPTRAIN_VERSION);
}

char *wire_record(char kind, const char *value, size_t *len)
{
	size_t n = strlen(value);
	char *rec = malloc(n + 2);

	if (!rec)
		return NULL;
	rec[0] = kind;
	memcpy(rec + 1, value, n + 1);
	*len = n + 2;
	return rec;
}

int wire_next(char *buf, size_t len, size_t *off, struct wire_rec *r)
{
	char *rec = buf + *off;
	size_t n;

	if (*off >= len)
		return 0;
	n = strnlen(rec, len - *off);
	if (*off + n == len)
		return 0;
	r->kind = rec[0];
	r->value = n > 0 ? rec + 1 : rec; /* an empty record (a lone NUL) has the value "" */
	*off += n + 1;
	return 1;
}

/* A decimal number from 0 to INT_MAX at *s, *s moved past it: 0, or -1 when there is none. */
static int read_num(const char **s, int *v)
{
	long long x = 0;
	const char *p = *s;

	if (!isdigit((unsigned char)*p))
		return -1;
	for (; isdigit((unsigned char)*p); p++) {
		x = x * 10 + (*p - '0');
		if (x > INT_MAX)
			return -1;
	}
	*v = (int)x;
	*s = p;
	return 0;
}

int wire_check_first(const char *buf, size_t len, const char *launcher, int *limit_s,
		     struct dp_error *err)
{
	const char *p = buf + 1;
	char release[48] = "";
	int secs = 0, version = 1, ok;

	if (len == 0)
		return 0;
	if (buf[0] != WIRE_LIMIT) {
		unsigned char c = (unsigned char)buf[0];
		char shown[8];

		snprintf(shown, sizeof(shown), isprint(c) ? "'%c'" : "byte %u", c);
		return errprintf(
		    err,
		    "the launcher %s does not speak the wire-up protocol: its answer "
		    "starts with %s, not D (this plugin speaks version %d): install the "
		    "same dptrain version of plugin and launcher on every node",
		    launcher, shown, WIRE_VERSION);
	}
	if (!memchr(buf, '\0', len))
		return 0;
	/* "<seconds>" (version 1, before the version was sent) or "<seconds> <version>[ ...]" */
	ok = read_num(&p, &secs) == 0;
	if (ok && *p == ' ') {
		p++;
		ok = read_num(&p, &version) == 0;
	}
	if (!ok || (*p != '\0' && *p != ' '))
		return errprintf(
		    err,
		    "the launcher %s sent a first record the wire-up protocol %d "
		    "cannot read ('D%.40s'): install the same dptrain version of plugin "
		    "and launcher on every node",
		    launcher, WIRE_VERSION, buf + 1);
	/* "... <release>": the launcher's dptrain version, sent since 0.1.0, for the message */
	if (ok && *p == ' ') {
		size_t n = strcspn(p + 1, " ");
		snprintf(release, sizeof(release), " (dptrain-launch %.*s)", (int)(n < 24 ? n : 24),
			 p + 1);
	}
	if (version != WIRE_VERSION)
		return errprintf(err,
				 "the launcher %s%s speaks wire-up protocol %d, this plugin "
				 "(dptrain.so " DPTRAIN_VERSION ") %d: install the same dptrain "
				 "version of plugin and launcher on every node",
				 launcher, release, version, WIRE_VERSION);
	*limit_s = secs;
	return 1;
}
