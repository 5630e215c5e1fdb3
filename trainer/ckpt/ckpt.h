/* ckpt.h — checkpoint directories: root/step-<N>/ holding files that callers write (weights,
 * optimizer state) and the caller's trainer state (trainer_state.json), a state.json that
 * lists every file with its size and CRC-32, and root/latest naming the newest. Owns atomicity
 * (a step is written under a temporary name, fsynced, renamed; latest is replaced by rename),
 * validation, choosing what to resume from, and keeping the last K. Knows nothing of models or
 * optimizers: the caller writes its files through a callback and reads them back from the
 * directory.
 *
 * Nothing else writes in root. A directory counts as a checkpoint only when its name is
 * step-<N>, its state.json parses and every file it lists has the listed size and CRC; so a
 * crash at any moment leaves either the old set or the old set plus one complete new step,
 * and at worst a step-<N>.tmp-* directory that the next successful write removes. */
#ifndef DPTRAIN_CKPT_H
#define DPTRAIN_CKPT_H

#include <stddef.h>
#include "common/error.h"

#define CKPT_MAX_FILES 8
#define CKPT_PATH_MAX  4096

/* Writes one file of a checkpoint at path (a fresh name inside the temporary directory);
 * 0, or -1 with err. It need not fsync: ckpt_write does. */
typedef int (*ckpt_writer)(void *ctx, const char *path, struct dp_error *err);

struct ckpt_file {
	const char *name; /* plain file name, e.g. "model.safetensors" (not "state.json") */
	ckpt_writer write;
	void *ctx;
};

/* Writes root/step-<step> with the files, trainer_state.json = state_json (a JSON object text
 * from the caller), and state.json = {"format": "dptrain-checkpoint", "version": 2, "step":
 * step, "files": {name: {"bytes": B, "crc32": C}}} listing them all, so the caller's state is
 * checked like its files (version 1 kept the state in state.json, unchecked: still read).
 * Creates root if needed.
 * Then points root/latest at it and removes all but the newest `keep` complete steps and any
 * leftover temporary directories. A step-<step> that already exists is replaced. On any error
 * (disk full, permission) nothing that existed is harmed and the error names the path. */
int ckpt_write(const char *root, long step, const struct ckpt_file *files, int nfiles,
	       const char *state_json, int keep, struct dp_error *err);

struct ckpt {
	char path[CKPT_PATH_MAX]; /* the step directory */
	long step;
	char *state_json; /* the "state" object as JSON text (malloc'd) */
};

/* Validates one step directory (state.json, every file's size and CRC); fills c. -1 with err
 * naming the file and what is wrong ("model.safetensors: 1234 bytes, state.json says 5678:
 * truncated?"). */
int ckpt_open(struct ckpt *c, const char *step_dir, struct dp_error *err);
void ckpt_close(struct ckpt *c);

/* Whether the caller can resume from a state (its "state" object as JSON text): 0, or -1 with
 * why (a value out of range for this job, say). */
typedef int (*ckpt_state_check)(void *ctx, const char *state_json, struct dp_error *why);

/* The newest valid checkpoint under root: 1 found (c filled), 0 none (root missing or holds
 * no complete step), -1 error (root unreadable). Invalid steps are skipped, and so are steps
 * whose state check (when not NULL) refuses; each gets one line in warn (joined with "\n",
 * NUL-terminated, truncated to warnlen) naming it and why. latest is a hint only: the scan
 * decides. */
int ckpt_find_latest(const char *root, ckpt_state_check check, void *check_ctx, struct ckpt *c,
		     char *warn, size_t warnlen, struct dp_error *err);

#endif
