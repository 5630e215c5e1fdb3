/* config_json.c — cfg_to_json: the resolved config as pretty JSON, walked from the schema.
 * Written by hand rather than with json_dumps so numbers come out in their shortest exact
 * form (0.1, not 0.10000000000000001) and short arrays stay on one line. */
#include "config/config_schema.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct out {
	char *p;
	size_t len, cap;
	int failed;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->failed)
		return;
	if (o->len + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 4096;
		while (cap < o->len + n + 1)
			cap *= 2;
		char *p = realloc(o->p, cap);
		if (!p) {
			o->failed = 1;
			return;
		}
		o->p = p;
		o->cap = cap;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
	o->p[o->len] = '\0';
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

static void putf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct out *o, const char *fmt, ...)
{
	char buf[64];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	put(o, buf, n > 0 ? (size_t)n : 0);
}

static void put_indent(struct out *o, int depth)
{
	for (int i = 0; i < depth; i++)
		puts_(o, "  ");
}

/* Strings come from jansson, so they are valid UTF-8 without NUL; escape what JSON needs. */
static void put_string(struct out *o, const char *s)
{
	puts_(o, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			char e[2] = {'\\', (char)ch};
			put(o, e, 2);
		} else if (ch < 0x20) {
			putf(o, "\\u%04x", ch);
		} else {
			put(o, (const char *)&ch, 1);
		}
	}
	puts_(o, "\"");
}

static void put_number(struct out *o, double d)
{
	char buf[40];
	cfg_format_number(d, buf, sizeof(buf));
	puts_(o, buf);
}

static bool omitted(const struct cfg_key *k, const void *base, const struct cfg *c)
{
	if (k->applies && !k->applies(c))
		return true;
	switch (k->kind) {
	case CFG_K_OBJECT:
		return (k->flags & CFG_F_OPTIONAL) && !*CFG_CAT(bool, base, k->off2);
	case CFG_K_STRING:
	case CFG_K_PATH:
		return *CFG_CAT(char *, base, k->off) == NULL;
	case CFG_K_INT:
		return (k->flags & CFG_F_OMIT_ZERO) && *CFG_CAT(int, base, k->off) == 0;
	default:
		return false;
	}
}

static void put_object(struct out *o, const struct cfg_key *keys, const void *base,
		       const struct cfg *c, int depth);

static void put_value(struct out *o, const struct cfg_key *k, const void *base, const struct cfg *c,
		      int depth)
{
	switch (k->kind) {
	case CFG_K_OBJECT:
		put_object(o, k->sub, (const char *)base + k->off, c, depth);
		break;
	case CFG_K_BOOL:
		puts_(o, *CFG_CAT(bool, base, k->off) ? "true" : "false");
		break;
	case CFG_K_INT:
		putf(o, "%d", *CFG_CAT(int, base, k->off));
		break;
	case CFG_K_INT64:
		putf(o, "%" PRId64, *CFG_CAT(int64_t, base, k->off));
		break;
	case CFG_K_NUMBER:
		put_number(o, *CFG_CAT(double, base, k->off));
		break;
	case CFG_K_STRING:
	case CFG_K_PATH:
		put_string(o, *CFG_CAT(char *, base, k->off));
		break;
	case CFG_K_ENUM:
		put_string(o, cfg_enum_canonical(k->names, *CFG_CAT(int, base, k->off)));
		break;
	case CFG_K_INT_ARRAY:
		puts_(o, "[");
		for (int i = 0; i < k->len; i++)
			putf(o, "%s%d", i ? ", " : "", CFG_CAT(int, base, k->off)[i]);
		puts_(o, "]");
		break;
	case CFG_K_NUMBER_ARRAY:
		puts_(o, "[");
		for (int i = 0; i < k->len; i++) {
			puts_(o, i ? ", " : "");
			put_number(o, CFG_CAT(double, base, k->off)[i]);
		}
		puts_(o, "]");
		break;
	case CFG_K_INT_LIST: {
		const struct cfg_int_list *l = CFG_CAT(struct cfg_int_list, base, k->off);
		puts_(o, "[");
		for (int i = 0; i < l->n; i++)
			putf(o, "%s%d", i ? ", " : "", l->v[i]);
		puts_(o, "]");
		break;
	}
	case CFG_K_NUMBER_LIST: {
		const struct cfg_double_list *l = CFG_CAT(struct cfg_double_list, base, k->off);
		puts_(o, "[");
		for (int i = 0; i < l->n; i++) {
			puts_(o, i ? ", " : "");
			put_number(o, l->v[i]);
		}
		puts_(o, "]");
		break;
	}
	case CFG_K_PATH_LIST: {
		/* Paths are long: one per line. */
		const struct cfg_string_list *l = CFG_CAT(struct cfg_string_list, base, k->off);
		puts_(o, "[");
		for (int i = 0; i < l->n; i++) {
			puts_(o, i ? ",\n" : "\n");
			put_indent(o, depth + 1);
			put_string(o, l->v[i]);
		}
		if (l->n) {
			puts_(o, "\n");
			put_indent(o, depth);
		}
		puts_(o, "]");
		break;
	}
	case CFG_K_LOSS_SCALE:
		if (*CFG_CAT(bool, base, k->off))
			put_string(o, "dynamic");
		else
			put_number(o, *CFG_CAT(double, base, k->off2));
		break;
	case CFG_K_RESUME: {
		enum cfg_resume r = *CFG_CAT(enum cfg_resume, base, k->off);
		const char *p = *CFG_CAT(char *, base, k->off2);
		put_string(o, r == CFG_RESUME_PATH && p ? p
			      : r == CFG_RESUME_NEVER	? "never"
							: "auto");
		break;
	}
	}
}

static void put_object(struct out *o, const struct cfg_key *keys, const void *base,
		       const struct cfg *c, int depth)
{
	int n = 0;

	puts_(o, "{");
	for (const struct cfg_key *k = keys; k->name; k++) {
		if (omitted(k, base, c))
			continue;
		puts_(o, n++ ? ",\n" : "\n");
		put_indent(o, depth + 1);
		put_string(o, k->name);
		puts_(o, ": ");
		put_value(o, k, base, c, depth + 1);
	}
	if (n) {
		puts_(o, "\n");
		put_indent(o, depth);
	}
	puts_(o, "}");
}

char *cfg_to_json(const struct cfg *c)
{
	struct out o = {0};

	put_object(&o, cfg_schema, c, c, 0);
	puts_(&o, "\n");
	if (o.failed) {
		free(o.p);
		return NULL;
	}
	return o.p;
}
