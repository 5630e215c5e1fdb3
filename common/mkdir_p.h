/* mkdir_p.h — mkdir -p: a directory and every missing one above it. Owns making them, not
 * deciding whose they may be (launcher/outdir.c checks that) or where they go. */
#ifndef DPTRAIN_MKDIR_P_H
#define DPTRAIN_MKDIR_P_H

#include <sys/types.h>

#include "common/error.h"

/* Make path and every missing directory above it with mode (less the umask). One that exists
 * is fine: ranks or processes making the same path at once all succeed. 0, or -1 with errno
 * and err: "cannot create directory 'PREFIX': STRERROR" (mkdir(2)'s errno, PREFIX the part
 * that failed), "'PATH' exists and is not a directory" (ENOTDIR), "directory name is too
 * long: ..." (ENAMETOOLONG). A symbolic link to a directory counts as the directory. */
int dp_mkdir_p(const char *path, mode_t mode, struct dp_error *err);

#endif
