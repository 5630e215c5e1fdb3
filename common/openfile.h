/* openfile.h — opening a file whose path a user controls (a log, a rank table, hccn.conf) so
 * that what is there cannot hang or redirect the caller: never through a symbolic link as the
 * last component, never blocking in open(2) on a FIFO or a device (O_NONBLOCK during the open,
 * cleared after), and only a regular file, owned as the caller requires. In the plugin the
 * caller is a task of slurmstepd: an open that blocks there is a task Slurm cannot end, and a
 * node it drains. */
#ifndef DPTRAIN_OPENFILE_H
#define DPTRAIN_OPENFILE_H

#include <sys/types.h>

#include "common/error.h"

/* What dp_open_regular checks besides "a regular file" (or'ed). */
enum {
	DP_OPEN_MINE = 1,	  /* owned by this process's effective user */
	DP_OPEN_MINE_OR_ROOT = 2, /* owned by this user or by root (a site's file) */
	DP_OPEN_NOT_SHARED = 4,	  /* not writable by its group or by others */
};

/* open(path, flags | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK, mode), then the checks;
 * the descriptor is returned blocking (O_NONBLOCK cleared), or -1 with a message naming path
 * and what is wrong in err (errno as open(2) left it, or EINVAL for a failed check). `what`
 * names the file in messages ("the rank's log", "mindspore.hccn_conf"); NULL: no name. */
int dp_open_regular(const char *path, int flags, mode_t mode, unsigned checks, const char *what,
		    struct dp_error *err);
/* What a file of mode m is when it is not a regular one, for messages ("a FIFO", "a
 * directory", ...). */
const char *dp_file_kind(mode_t m);

#endif
