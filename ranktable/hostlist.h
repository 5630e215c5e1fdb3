/* hostlist.h — Slurm's compact lists: hostlists ("n[01-03,7],gpu5") and tasks-per-node counts
 * ("2(x3),1"), expanded for dptrain-ranktable and the launcher. Pure string work: no Slurm
 * library, no environment, no allocation beyond the returned arrays. */
#ifndef DPTRAIN_HOSTLIST_H
#define DPTRAIN_HOSTLIST_H

#include "common/error.h"
#include "ranktable/ranktable.h"

#define RT_HOSTLIST_MAX 1000000 /* most hosts (or nodes) one expansion may produce */

/* Expand a Slurm hostlist ("n[01-03,7],gpu5,a[1-2]b") into a malloc'd array of malloc'd strings,
 * keeping zero padding. */
int rt_hostlist_expand(const char *list, char ***hosts, int *count, struct dp_error *err);
void rt_hostlist_free(char **hosts, int count);
/* Expand SLURM_TASKS_PER_NODE-style "2(x3),1" into a malloc'd array of per-node counts. */
int rt_tasks_per_node_expand(const char *spec, int **counts, int *nnodes, struct dp_error *err);

#endif
