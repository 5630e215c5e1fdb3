/* train.h — the training run: from a validated config to a trained model, with progress
 * lines, evaluation, metrics and final weights. Owns the loop and the mapping of the config
 * onto data, model, optimizer and schedule; computes nothing itself. */
#ifndef DPTRAIN_TRAIN_H
#define DPTRAIN_TRAIN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#include "common/error.h"
#include "config/config.h"

struct comm;

struct train_env {
	int rank, world_size; /* this process among the data-parallel ranks */
	struct comm *comm;    /* collectives between the ranks; NULL for a single rank */
	int threads;	      /* compute threads when train.threads is 0 (0: the backend's) */
	int gpu;	      /* the CUDA device to train on; -1: the CPU */
	/* set by another thread (on SIGTERM, SIGUSR1): the ranks agree on a step, checkpoint
	 * there and stop; NULL: never */
	const atomic_int *stop;
	const char *output_dir; /* exists; metrics.jsonl and model.safetensors go here */
	FILE *out;		/* progress lines (stdout) */
};

/* What the run achieved (for tests and the final line). */
struct train_result {
	long steps;
	int epochs;
	double last_loss;
	double eval_accuracy; /* -1 when never evaluated */
	double eval_loss;
	double seconds;
	long resumed_at;	  /* the step a checkpoint put us at, -1 when we started fresh */
	int stopped;		  /* 1: stopped early on request, after writing a checkpoint */
	size_t peak_device_bytes; /* GPU: the most device memory held at once; 0 on the CPU */
	/* the newest complete checkpoint this run wrote or resumed from ("" when none): what
	 * running the job again resumes from, named when the run fails */
	char last_checkpoint[4160];
};

/* 0 on success; -1 with err naming what failed (a file, a key, a step) and what to do. */
int train_run(const struct cfg *c, const struct train_env *env, struct train_result *res,
	      struct dp_error *err);

#endif
