/* warn.h — the one form of a warning, whichever program gives it:
 *
 *     PROGRAM: WHO: warning: TEXT          e.g. "dptrain-launch: rank 0 on n1: warning: ..."
 *     PROGRAM: warning: TEXT               (no WHO)  "dptrain: warning: job.json: ..."
 *
 * PROGRAM is the program's name as its other messages start ("dptrain" for the trainer's
 * library, whichever test runs it); WHO, when given, the part or rank that warns ("rendezvous",
 * "rank 3 on n2"); TEXT says what is wrong, where (the file, the key) and what happens instead.
 * The plugin gives its warnings to Slurm (slurm_spank_log) in the same form, formatted by
 * dp_warn_format. */
#ifndef DPTRAIN_WARN_H
#define DPTRAIN_WARN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#define DP_WARN_ATTR(f, a) __attribute__((format(printf, f, a)))

/* The warning's line, without a newline, into out (cut to len - 1 bytes, as snprintf does);
 * returns the length the whole line has. prog and who may be NULL (left out). */
int dp_warn_format(char *out, size_t len, const char *prog, const char *who, const char *fmt, ...)
    DP_WARN_ATTR(5, 6);
int dp_vwarn_format(char *out, size_t len, const char *prog, const char *who, const char *fmt,
		    va_list ap) DP_WARN_ATTR(5, 0);

/* The line and a newline on standard error, in one fprintf (another thread's line does not
 * cut into it), however long. */
void dp_warn(const char *prog, const char *who, const char *fmt, ...) DP_WARN_ATTR(3, 4);

/* The same on another stream (NULL: standard error), for a caller that collects them. */
void dp_warn_to(FILE *f, const char *prog, const char *who, const char *fmt, ...)
    DP_WARN_ATTR(4, 5);

#endif
