/* path_search.h — a command found as execvp finds it, but on a PATH given as a string (a
 * task's, not this process's). */
#ifndef DPTRAIN_PATH_SEARCH_H
#define DPTRAIN_PATH_SEARCH_H

#include <stddef.h>

/* name with a '/' is taken as it is; else the first executable dir/name along path (NULL or
 /usr/local/bin:/usr/bin:/bin; empty entries are skipped). 0 with it in out, else -1
 * with errno set (ENOENT when nowhere) and name in out. */
int path_search(const char *name, const char *path, char *out, size_t outlen);

#endif
