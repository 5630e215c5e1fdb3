/* wire.h — the contract between the launcher's helper (dptrain-launch --wire-up=FD) and the
 * SPANK plugin that started it from task_init: the records the helper sends back on FD, a
 * socket, once the rank is wired up. The plugin and the launcher may come from different
 * dptrain versions during a rolling upgrade, so the helper's first record says which version
 * of these records it speaks, and a plugin that speaks another refuses it before it reads
 * anything else. Knows nothing about PMIx or Slurm.
 *
 * Framing: a record is its kind (one byte, below), its value (text, no NUL in it), then a NUL.
 * The records follow each other on the socket without anything between them; the helper's
 * whole answer is at most WIRE_MAX_BYTES. The first record is always D, in every version: it
 * carries the version. Z ends the answer: without it the plugin fails the task.
 *
 * A change to any record (a kind added, removed or read differently) is a new WIRE_VERSION. */
#ifndef DPTRAIN_WIRE_H
#define DPTRAIN_WIRE_H
#include <stddef.h>

#include "common/error.h"

/* The version of the records below. A first record without one ("D<seconds>") comes from a
 * launcher that predates the version: its records are version 1's. */
#ifndef WIRE_VERSION /* a test build of another version: make ... CPPFLAGS=-DWIRE_VERSION=2 */
#define WIRE_VERSION 1
#endif

/* What the plugin reads from one helper at most, every record together. */
#define WIRE_MAX_BYTES (1 << 20)

/* The record kinds, by their byte on the socket. */
enum wire_kind {
	/* first, always: "<seconds> <version>", how long the wire-up may take (the helper's
	 * own limit, which the plugin waits for plus a margin) and the protocol version; what
	 * may follow after a further space is for later versions, and version 1 since dptrain
	 * 0.1.0 sends its release there ("630 1 0.1.0"), which a plugin names in its message
	 * about another version */
	WIRE_LIMIT = 'D',
	/* "NAME=VALUE": a variable to set in the task (new or changed by the wire-up) */
	WIRE_ENV = 'E',
	/* a path: the rank's train.log (made, its header written): the task's output goes there */
	WIRE_LOG = 'L',
	/* "0" or "1", after L: also keep the output on the console (the task tees) */
	WIRE_TEE = 'T',
	/* "0" or "1": the command is the bundled trainer, started with SIGTERM/SIGUSR1 blocked */
	WIRE_STOP_BLOCKED = 'S',
	/* a directory: run the command there (output.run_in_device_dir) */
	WIRE_CWD = 'C',
	/* a path: start MindSpore's scheduler beside the command, its output there */
	WIRE_SCHED_LOG = 'M',
	/* "" with a descriptor attached (SCM_RIGHTS): the output directory's lock (rank 0), which
	 * the task holds until its command ends */
	WIRE_LOCK = 'K',
	/* "": last, everything was sent */
	WIRE_END = 'Z',
};

/* One record as read: its kind and its value, NUL-terminated, in the reader's buffer (which
 * the reader may change in place). */
struct wire_rec {
	char kind;
	char *value;
};

/* Room for the first record's value ("<seconds> <version> <release>"). */
#define WIRE_LIMIT_MAX 96

/* The helper's side. */

/* The value of the first record for a wire-up that may take limit_s seconds, with this
 * WIRE_VERSION. */
void wire_limit_value(char out[WIRE_LIMIT_MAX], int limit_s);

/* Record `kind` with `value`, framed, in a malloc'd buffer of *len bytes; NULL when out of
 * memory. */
char *wire_record(char kind, const char *value, size_t *len);

/* The plugin's side. */

/* The next complete record of buf[*off..len) into r, *off moved past it: 1; 0 when none is
 * left complete (an unterminated tail is a helper that died mid-record). */
int wire_next(char *buf, size_t len, size_t *off, struct wire_rec *r);

/* Is the first record of buf[0..len) one this plugin reads? 1 and *limit_s (the helper's
 * limit) when it is D of this WIRE_VERSION; 0 while it is not complete yet; -1 when it is not
 * D, cannot be read, or is of another version, with a message in err that names `launcher`
 * and, for another version, both versions and what to do. */
int wire_check_first(const char *buf, size_t len, const char *launcher, int *limit_s,
		     struct dp_error *err);

#endif
