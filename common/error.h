/* error.h — the one way every folder reports an error to its caller, in the spirit of flux's
 * flux_error_t: the callee fills the caller's struct dp_error and returns -1, so
 *
 *     return errprintf(err, "%s: %s", path, strerror(errno));
 *
 * ends a function. A caller that adds what it knows (the file, the rank, what to do) rewrites
 * the same struct in place, with errprefix or errprintf, whose arguments may be err->text
 * itself:
 *
 *     if (ck_load(c, path, err) < 0)
 *             return errprefix(err, "resuming from %s", dir);          "resuming from D: ..."
 *     ...     return errprintf(err, "%s (set checkpoint.dir)", err->text);
 *
 * so no caller keeps a second buffer and no message is cut to fit one. A message longer than
 * DP_ERROR_MAX - 1 bytes ends in "..." where it was cut. err may be NULL (nothing is written).
 * The functions keep errno. */
#ifndef DPTRAIN_ERROR_H
#define DPTRAIN_ERROR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DP_ERROR_MAX 2048

struct dp_error {
	char text[DP_ERROR_MAX];
};

/* Set the message; returns -1. */
int errprintf(struct dp_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int verrprintf(struct dp_error *err, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Put "PREFIX: " before the message; returns -1. */
int errprefix(struct dp_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
