/* errfile.h — the exception a rank recorded before it failed: PyTorch's @record (torchrun's
 * error handler) writes it to TORCHELASTIC_ERROR_FILE, which dptrain-launch points at
 * DEVDIR/error.json. The plugin and dptrain-run read it to name a failed rank's root cause. */
#ifndef DPTRAIN_ERRFILE_H
#define DPTRAIN_ERRFILE_H

#include <stddef.h>

/* The recorded message ("ValueError: ...", its first line, cut to outlen) of the error file at
 * path: 1 with it in out, 0 when there is no such file or it holds no message. Reads at most
 * 1 MiB of a regular file and follows no symbolic link. */
int dp_errfile_message(const char *path, char *out, size_t outlen);

#endif
