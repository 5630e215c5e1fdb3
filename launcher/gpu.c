/* gpu.c — which GPU a rank uses, from CUDA_VISIBLE_DEVICES as Slurm (or the user) set it.
 * Pure string work plus counting device nodes; must not load CUDA or change the environment:
 * the variable is left as it is so LOCAL_RANK-indexing scripts keep working where they can
 * (alloc_gpu_advice in alloc.c says where they cannot). */
#include "common/error.h"
#include "launcher/alloc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An entry CUDA accepts: a device index, or GPU-<uuid> / MIG-<...> (letters, digits, '-', '/'). */
static int entry_valid(const char *s, size_t n)
{
	size_t i;

	if (n == 0)
		return 0;
	if (s[0] >= '0' && s[0] <= '9') {
		for (i = 0; i < n; i++)
			if (s[i] < '0' || s[i] > '9')
				return 0;
		return n <= 6;
	}
	if (n < 5 || (strncmp(s, "GPU-", 4) != 0 && strncmp(s, "MIG-", 4) != 0))
		return 0;
	for (i = 4; i < n; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      c == '-' || c == '/'))
			return 0;
	}
	return 1;
}

/* "007" and "7" name the same device: compare indices by value. */
static void entry_normalize(const char *s, size_t n, char out[ALLOC_GPU_ID_MAX])
{
	if (s[0] >= '0' && s[0] <= '9') {
		snprintf(out, ALLOC_GPU_ID_MAX, "%ld", strtol(s, NULL, 10));
		return;
	}
	snprintf(out, ALLOC_GPU_ID_MAX, "%.*s", (int)n, s);
}

int alloc_gpu_select(const char *cvd, int local_rank, struct alloc_gpu *g, struct dp_error *err)
{
	char(*ids)[ALLOC_GPU_ID_MAX] = NULL;
	const char *p, *end;
	int n = 0, i, rv = -1;

	memset(g, 0, sizeof(*g));
	g->index = -1;
	if (local_rank < 0) {
		errprintf(err, "local rank %d is negative", local_rank);
		goto out;
	}
	/* Slurm writes NoDevFiles when a GPU gres has no device files; -1 is the usual way to
	 * hide every GPU. Both mean: run on the CPU. */
	if (cvd[0] == '\0' || strcmp(cvd, "NoDevFiles") == 0 || strcmp(cvd, "-1") == 0) {
		rv = 0;
		goto out;
	}
	ids = calloc(ALLOC_GPU_MAX, sizeof(*ids));
	if (!ids) {
		errprintf(err, "out of memory");
		goto out;
	}
	for (p = cvd;; p = end + 1) {
		end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		if (!entry_valid(p, (size_t)(end - p))) {
			errprintf(
			    err,
			    "CUDA_VISIBLE_DEVICES='%s': entry %d ('%.*s') is not a device index "
			    "or a GPU-/MIG- UUID (expected e.g. '0,1' or 'GPU-8d1e...')",
			    cvd, n + 1, (int)(end - p), p);
			goto out;
		}
		if (n == ALLOC_GPU_MAX) {
			errprintf(err, "CUDA_VISIBLE_DEVICES lists more than %d devices",
				  ALLOC_GPU_MAX);
			goto out;
		}
		entry_normalize(p, (size_t)(end - p), ids[n]);
		for (i = 0; i < n; i++)
			if (strcmp(ids[i], ids[n]) == 0) {
				errprintf(err, "CUDA_VISIBLE_DEVICES='%s' lists device '%s' twice",
					  cvd, ids[n]);
				goto out;
			}
		n++;
		if (*end == '\0')
			break;
	}
	g->count = n;
	g->index = local_rank % n;
	snprintf(g->id, sizeof(g->id), "%s", ids[g->index]);
	rv = 0;
out:
	free(ids);
	return rv;
}

int alloc_gpu_count_devices(const char *dev_dir)
{
	struct dirent *e;
	DIR *d;
	int n = 0;

	d = opendir(dev_dir ? dev_dir : "/dev");
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		const char *s = e->d_name;
		if (strncmp(s, "nvidia", 6) != 0 || s[6] == '\0')
			continue;
		for (s += 6; *s >= '0' && *s <= '9'; s++)
			;
		if (*s == '\0')
			n++;
	}
	closedir(d);
	return n;
}
