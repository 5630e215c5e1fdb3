/* warn.c (test) — common/warn.c, the one form of a warning: "PROGRAM: WHO: warning: TEXT",
 * WHO left out when NULL, exactly; cut like snprintf in a buffer; one whole line with its
 * newline on a stream and on standard error, a long one not cut. */
#define _GNU_SOURCE
#include "common/warn.h"
#include "t/lib/tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What f holds from the start. */
static char *contents(FILE *f)
{
	long n;
	char *s;

	fflush(f);
	n = ftell(f);
	s = calloc(1, (size_t)n + 1);
	rewind(f);
	if (fread(s, 1, (size_t)n, f) != (size_t)n)
		bail_out("cannot read back the stream");
	return s;
}

int main(void)
{
	char line[128], *got, *big;
	FILE *f;
	int n;

	n = dp_warn_format(line, sizeof(line), "dptrain-launch", "rank 0 on n1", "%s %d", "x", 3);
	is(line, "dptrain-launch: rank 0 on n1: warning: x 3", "PROGRAM: WHO: warning: TEXT");
	is_int(n, (long)strlen(line), "... its length returned");
	dp_warn_format(line, sizeof(line), "dptrain", NULL, "%s: %s", "job.json", "a.b: ignored");
	is(line, "dptrain: warning: job.json: a.b: ignored", "no WHO: PROGRAM: warning: TEXT");
	dp_warn_format(line, sizeof(line), "dptrain", "rendezvous", "no secret");
	is(line, "dptrain: rendezvous: warning: no secret", "a part of the program as WHO");
	dp_warn_format(line, sizeof(line), NULL, NULL, "skipped %d files", 3);
	is(line, "warning: skipped 3 files", "no PROGRAM: for a caller that adds its own");

	n = dp_warn_format(line, 12, "dptrain", "rank 3", "too long for the buffer");
	is(line, "dptrain: ra", "a small buffer: cut, as snprintf does");
	is_int(n, (long)strlen("dptrain: rank 3: warning: too long for the buffer"),
	       "... the whole line's length returned");
	n = dp_warn_format(line, 30, "dptrain", "rank 3", "text");
	is(line, "dptrain: rank 3: warning: tex", "cut in the text");

	if (!(f = tmpfile()))
		bail_out("tmpfile: %s", strerror(errno));
	dp_warn_to(f, "dptrain", NULL, "data.train: %s: empty file", "a.jpg");
	dp_warn_to(f, "dptrain-run", NULL, "second");
	got = contents(f);
	is(got, "dptrain: warning: data.train: a.jpg: empty file\ndptrain-run: warning: second\n",
	   "on a stream: one line each, with its newline");
	free(got);
	fclose(f);

	/* standard error, and a line longer than the formatting buffer */
	big = malloc(10001);
	memset(big, 'w', 10000);
	big[10000] = '\0';
	if (!(f = tmpfile()))
		bail_out("tmpfile: %s", strerror(errno));
	fflush(stderr);
	int saved = dup(2);
	dup2(fileno(f), 2);
	dp_warn("dptrain", "rank 1", "%s", big);
	dp_warn_to(NULL, "dptrain", NULL, "to NULL: stderr");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	fseek(f, 0, SEEK_END);
	got = contents(f);
	ok(strncmp(got, "dptrain: rank 1: warning: www", 29) == 0, "dp_warn: on standard error");
	n = (int)strlen("dptrain: rank 1: warning: ") + 10000;
	ok((int)strlen(got) > n && got[n] == '\n' && got[n - 1] == 'w',
	   "... a long line whole, then its newline");
	is(got + n + 1, "dptrain: warning: to NULL: stderr\n", "dp_warn_to(NULL, ...): stderr");
	free(got);
	free(big);
	fclose(f);
	return done_testing();
}
