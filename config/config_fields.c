/* config_fields.c — generic operations on one schema field of struct cfg: free, compare, copy.
 * Knows storage kinds, not particular keys or the schema (config_schema.c, which has cfg_free
 * and cfg_equal over the whole schema). */
#include "config/config_schema.h"

#include <stdlib.h>
#include <string.h>

static int str_equal(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

void cfg_field_free(const struct cfg_key *k, void *base)
{
	switch (k->kind) {
	case CFG_K_OBJECT:
		for (const struct cfg_key *s = k->sub; s->name; s++)
			cfg_field_free(s, (char *)base + k->off);
		break;
	case CFG_K_STRING:
	case CFG_K_PATH:
		free(*CFG_AT(char *, base, k->off));
		*CFG_AT(char *, base, k->off) = NULL;
		break;
	case CFG_K_INT_LIST: {
		struct cfg_int_list *l = CFG_AT(struct cfg_int_list, base, k->off);
		free(l->v);
		*l = (struct cfg_int_list){NULL, 0};
		break;
	}
	case CFG_K_NUMBER_LIST: {
		struct cfg_double_list *l = CFG_AT(struct cfg_double_list, base, k->off);
		free(l->v);
		*l = (struct cfg_double_list){NULL, 0};
		break;
	}
	case CFG_K_PATH_LIST: {
		struct cfg_string_list *l = CFG_AT(struct cfg_string_list, base, k->off);
		for (int i = 0; i < l->n; i++)
			free(l->v[i]);
		free(l->v);
		*l = (struct cfg_string_list){NULL, 0};
		break;
	}
	case CFG_K_RESUME:
		free(*CFG_AT(char *, base, k->off2));
		*CFG_AT(char *, base, k->off2) = NULL;
		break;
	default:
		break;
	}
}

int cfg_field_equal(const struct cfg_key *k, const void *a, const void *b)
{
	switch (k->kind) {
	case CFG_K_OBJECT:
		if ((k->flags & CFG_F_OPTIONAL) &&
		    *CFG_CAT(bool, a, k->off2) != *CFG_CAT(bool, b, k->off2))
			return 0;
		for (const struct cfg_key *s = k->sub; s->name; s++)
			if (!cfg_field_equal(s, (const char *)a + k->off, (const char *)b + k->off))
				return 0;
		return 1;
	case CFG_K_BOOL:
		return *CFG_CAT(bool, a, k->off) == *CFG_CAT(bool, b, k->off);
	case CFG_K_INT:
	case CFG_K_ENUM:
		return *CFG_CAT(int, a, k->off) == *CFG_CAT(int, b, k->off);
	case CFG_K_INT64:
		return *CFG_CAT(int64_t, a, k->off) == *CFG_CAT(int64_t, b, k->off);
	case CFG_K_NUMBER:
		return *CFG_CAT(double, a, k->off) == *CFG_CAT(double, b, k->off);
	case CFG_K_STRING:
	case CFG_K_PATH:
		return str_equal(*CFG_CAT(char *, a, k->off), *CFG_CAT(char *, b, k->off));
	case CFG_K_INT_ARRAY:
		return memcmp(CFG_CAT(int, a, k->off), CFG_CAT(int, b, k->off),
			      (size_t)k->len * sizeof(int)) == 0;
	case CFG_K_NUMBER_ARRAY:
		for (int i = 0; i < k->len; i++)
			if (CFG_CAT(double, a, k->off)[i] != CFG_CAT(double, b, k->off)[i])
				return 0;
		return 1;
	case CFG_K_INT_LIST: {
		const struct cfg_int_list *la = CFG_CAT(struct cfg_int_list, a, k->off);
		const struct cfg_int_list *lb = CFG_CAT(struct cfg_int_list, b, k->off);
		return la->n == lb->n &&
		       (la->n == 0 || memcmp(la->v, lb->v, (size_t)la->n * sizeof(int)) == 0);
	}
	case CFG_K_NUMBER_LIST: {
		const struct cfg_double_list *la = CFG_CAT(struct cfg_double_list, a, k->off);
		const struct cfg_double_list *lb = CFG_CAT(struct cfg_double_list, b, k->off);
		if (la->n != lb->n)
			return 0;
		for (int i = 0; i < la->n; i++)
			if (la->v[i] != lb->v[i])
				return 0;
		return 1;
	}
	case CFG_K_PATH_LIST: {
		const struct cfg_string_list *la = CFG_CAT(struct cfg_string_list, a, k->off);
		const struct cfg_string_list *lb = CFG_CAT(struct cfg_string_list, b, k->off);
		if (la->n != lb->n)
			return 0;
		for (int i = 0; i < la->n; i++)
			if (!str_equal(la->v[i], lb->v[i]))
				return 0;
		return 1;
	}
	case CFG_K_LOSS_SCALE:
		return *CFG_CAT(bool, a, k->off) == *CFG_CAT(bool, b, k->off) &&
		       *CFG_CAT(double, a, k->off2) == *CFG_CAT(double, b, k->off2);
	case CFG_K_RESUME:
		return *CFG_CAT(enum cfg_resume, a, k->off) ==
			   *CFG_CAT(enum cfg_resume, b, k->off) &&
		       str_equal(*CFG_CAT(char *, a, k->off2), *CFG_CAT(char *, b, k->off2));
	}
	return 0;
}

static char *dup_or_null(const char *s, int *failed)
{
	char *d = s ? strdup(s) : NULL;
	if (s && !d)
		*failed = 1;
	return d;
}

/* dst's field holds nothing to free (cfg_field_free was called on it). */
int cfg_field_copy(const struct cfg_key *k, void *dst, const void *src)
{
	int failed = 0;

	switch (k->kind) {
	case CFG_K_OBJECT:
		if (k->flags & CFG_F_OPTIONAL)
			*CFG_AT(bool, dst, k->off2) = *CFG_CAT(bool, src, k->off2);
		for (const struct cfg_key *s = k->sub; s->name; s++)
			if (cfg_field_copy(s, (char *)dst + k->off, (const char *)src + k->off) < 0)
				failed = 1;
		break;
	case CFG_K_BOOL:
		*CFG_AT(bool, dst, k->off) = *CFG_CAT(bool, src, k->off);
		break;
	case CFG_K_INT:
	case CFG_K_ENUM:
		*CFG_AT(int, dst, k->off) = *CFG_CAT(int, src, k->off);
		break;
	case CFG_K_INT64:
		*CFG_AT(int64_t, dst, k->off) = *CFG_CAT(int64_t, src, k->off);
		break;
	case CFG_K_NUMBER:
		*CFG_AT(double, dst, k->off) = *CFG_CAT(double, src, k->off);
		break;
	case CFG_K_STRING:
	case CFG_K_PATH:
		*CFG_AT(char *, dst, k->off) = dup_or_null(*CFG_CAT(char *, src, k->off), &failed);
		break;
	case CFG_K_INT_ARRAY:
		memcpy(CFG_AT(int, dst, k->off), CFG_CAT(int, src, k->off),
		       (size_t)k->len * sizeof(int));
		break;
	case CFG_K_NUMBER_ARRAY:
		memcpy(CFG_AT(double, dst, k->off), CFG_CAT(double, src, k->off),
		       (size_t)k->len * sizeof(double));
		break;
	case CFG_K_INT_LIST: {
		const struct cfg_int_list *s = CFG_CAT(struct cfg_int_list, src, k->off);
		struct cfg_int_list *d = CFG_AT(struct cfg_int_list, dst, k->off);
		*d = (struct cfg_int_list){NULL, 0};
		if (s->n > 0) {
			if (!(d->v = malloc((size_t)s->n * sizeof(int))))
				return -1;
			memcpy(d->v, s->v, (size_t)s->n * sizeof(int));
			d->n = s->n;
		}
		break;
	}
	case CFG_K_NUMBER_LIST: {
		const struct cfg_double_list *s = CFG_CAT(struct cfg_double_list, src, k->off);
		struct cfg_double_list *d = CFG_AT(struct cfg_double_list, dst, k->off);
		*d = (struct cfg_double_list){NULL, 0};
		if (s->n > 0) {
			if (!(d->v = malloc((size_t)s->n * sizeof(double))))
				return -1;
			memcpy(d->v, s->v, (size_t)s->n * sizeof(double));
			d->n = s->n;
		}
		break;
	}
	case CFG_K_PATH_LIST: {
		const struct cfg_string_list *s = CFG_CAT(struct cfg_string_list, src, k->off);
		struct cfg_string_list *d = CFG_AT(struct cfg_string_list, dst, k->off);
		*d = (struct cfg_string_list){NULL, 0};
		if (s->n > 0) {
			if (!(d->v = calloc((size_t)s->n, sizeof(char *))))
				return -1;
			d->n = s->n;
			for (int i = 0; i < s->n; i++)
				d->v[i] = dup_or_null(s->v[i], &failed);
		}
		break;
	}
	case CFG_K_LOSS_SCALE:
		*CFG_AT(bool, dst, k->off) = *CFG_CAT(bool, src, k->off);
		*CFG_AT(double, dst, k->off2) = *CFG_CAT(double, src, k->off2);
		break;
	case CFG_K_RESUME:
		*CFG_AT(enum cfg_resume, dst, k->off) = *CFG_CAT(enum cfg_resume, src, k->off);
		*CFG_AT(char *, dst, k->off2) =
		    dup_or_null(*CFG_CAT(char *, src, k->off2), &failed);
		break;
	}
	return failed ? -1 : 0;
}
