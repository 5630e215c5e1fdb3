/* append.h — one record appended to a log file whole or not at all: metrics.jsonl's lines,
 * TensorBoard's event records. A reader stops at a part of a record, so one that the file
 * system takes only in part (full, a file-size limit) is cut off again, leaving the file as it
 * was before. Owns the write, not what the bytes mean or how a failure is said. */
#ifndef DPTRAIN_APPEND_H
#define DPTRAIN_APPEND_H

#include <stddef.h>

/* Appends buf[0..n) to the end of fd in one write(2): 0, or the errno of the failure (ENOSPC
 * for a short write), after which the file holds no part of buf. */
int dp_append_whole(int fd, const void *buf, size_t n);

/* The same for a log that training goes on without: the first failure is said once on
 * stderr (*warned set), naming path and what was left out (what: "a line", "an event"). */
void dp_append_or_warn(int fd, const void *buf, size_t n, const char *path, const char *what,
		       int *warned);

#endif
