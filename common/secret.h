/* secret.h — the step's secret: DPTRAIN_STORE_SECRET, made where a step is launched (srun
 * --dptrain's local side, dptrain-run) and given to every rank through the environment, which
 * only the job's user (and root) can read. The rendezvous store refuses a connection without
 * it, the CPU collectives' ring too, and the default port without PMIx is derived from it. */
#ifndef DPTRAIN_SECRET_H
#define DPTRAIN_SECRET_H

#include <stddef.h>
#include "common/error.h"
#include "common/env.h"

#define DP_SECRET_LEN 32 /* hex digits: 128 random bits */

/* A fresh secret (DP_SECRET_LEN hex digits and a NUL) from the kernel's random source.
 * 0, or -1 with err naming why (no random source: nothing sensible to fall back to). */
int dp_secret_make(char out[DP_SECRET_LEN + 1], struct dp_error *err);

#endif
