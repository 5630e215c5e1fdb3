/* rt_internal.h — what the rank-table library's own files share: error formatting, where in a
 * JSON document each rank came from (for messages), and the table checker. Not for callers
 * outside ranktable/: they use ranktable.h. */
#ifndef DPTRAIN_RT_INTERNAL_H
#define DPTRAIN_RT_INTERNAL_H

#include "common/error.h"
#include "ranktable/ranktable.h"

#include <stddef.h>

/* The fields of a rank that a message can point at. */
enum rt_field {
	RT_F_RANK_ID,
	RT_F_DEVICE_ID,
	RT_F_DEVICE_IP,
	RT_F_SERVER_ID,
	RT_F_HOST,
	RT_F_NODE_RANK,
	RT_F_LOCAL_RANK,
	RT_F_GPU,
};

/* Where one rank sits in the document it was read from: server_list[i].device[j] (HCCL),
 * group_list[0].instance_list[j] (legacy), dptrain.ranks[k] (k < 0: no dptrain object). */
struct rt_loc {
	int i, j, k;
};

/* How to name a rank's fields in messages: `loc` (indexed by rank) for a table read from a
 * document of `schema`; NULL loc names them as rt_to_json would write the table. */
struct rt_where {
	enum rt_schema schema;
	const struct rt_loc *loc;
};

/* The JSON path of field f of `rank`, e.g. "server_list[1].device[0].rank_id". */
void rt_path(char *buf, size_t size, const struct ranktable *rt, const struct rt_where *w, int rank,
	     enum rt_field f);

/* Everything rt_validate promises, with paths named through w. */
int rt_check(const struct ranktable *rt, const struct rt_where *w, struct dp_error *err);

/* ids[0..n) must hold 0..n-1 each exactly once; fills inv[id] = index. Messages name entries
 * through path(ctx, index); `list` prefixes the "rank R is missing" message when non-empty. */
int rt_check_ranks(const int *ids, int n, int *inv, void (*path)(char *, size_t, const void *, int),
		   const void *ctx, const char *list, struct dp_error *err);

/* Text checks: an IPv4/IPv6 literal; a DNS host name; a printable token without spaces. */
int rt_is_address(const char *s);
int rt_is_hostname(const char *s);
int rt_is_token(const char *s);

#endif
