/* ranks.h — forked ranks for the C unit tests of networked code (store, comm): runs a function as
 * W processes that meet on a free port of 127.0.0.1, collects each one's exit status and message
 * with a deadline, and kills what is left. Knows nothing about what the ranks do. */
#ifndef DPTRAIN_T_RANKS_H
#define DPTRAIN_T_RANKS_H

#include <stddef.h>

#include "common/error.h"

#define RANKS_MAX 8    /* the most ranks ranks_run forks */
#define RANKS_MSG 4096 /* the longest message a rank returns, with its NUL */

struct ranks_job {
	int world;	 /* ranks to fork, 1 to RANKS_MAX */
	int port;	 /* set by ranks_run: free on 127.0.0.1, for rank 0 to serve on */
	const void *arg; /* the scenario's own parameters, for the rank function */
};

struct ranks_out {
	int status; /* exit status; 128 + signal if killed; -1 if killed at the deadline */
	char msg[RANKS_MSG];
};

/* Runs in a forked rank; what it leaves in msg reaches the parent. < 0 makes the exit status 1. */
typedef int (*ranks_fn)(const struct ranks_job *j, int rank, char *msg, size_t len);
/* A rank's message from a library's error: copies it into (msg, len); returns -1. */
int ranks_msg(char *msg, size_t len, const struct dp_error *err);

double ranks_now(void); /* CLOCK_MONOTONIC in seconds */
void ranks_sleep(double s);
/* A TCP port on 127.0.0.1 held by *fd until it is closed: bound with SO_REUSEADDR but not
 * listening, so a connection to it is refused, the kernel gives it to no other socket, and
 * only a socket that sets SO_REUSEADDR too (the store's) can bind it and listen. A port that
 * was merely free a moment ago can be taken by anyone before the test binds it. Bails out of
 * the test if there is none. */
int ranks_hold_port(int *fd);
/* Runs fn as j->world processes on a fresh j->port, held (ranks_hold_port) until they are
 * done. Waits up to deadline_s for every rank but
 * `nowait` (-1: none), then kills what is left; out[r] holds rank r's status and message. */
void ranks_run(struct ranks_job *j, ranks_fn fn, int nowait, double deadline_s,
	       struct ranks_out *out);

#endif
