/* hostlist.c — expansion of Slurm hostlists and tasks-per-node specs (see hostlist.h).
 * Owns only string parsing; every expansion is bounded by RT_HOSTLIST_MAX before anything is
 * allocated, so a hostile list cannot exhaust memory. Knows nothing of tables or environment. */
#include "ranktable/hostlist.h"
#include "common/error.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HL_DIGITS_MAX	9  /* numbers in brackets stay below 1e9: no overflow anywhere */
#define HL_BRACKETS_MAX 16 /* "a[1-2]b[3-4]" is two; Slurm's own limit is lower */

struct hl_range {
	unsigned long lo, hi;
	int width; /* zero padding: the number of digits of the lower bound as written */
};

/* One element of a hostlist: literal text with bracket groups in between, e.g. "a", [1-2], "b". */
struct hl_elem {
	const char *lit[HL_BRACKETS_MAX + 1];
	size_t litlen[HL_BRACKETS_MAX + 1];
	struct hl_range *ranges[HL_BRACKETS_MAX];
	int nranges[HL_BRACKETS_MAX];
	int nbrackets;
};

static void hl_err(struct dp_error *err, const char *list, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void hl_err(struct dp_error *err, const char *list, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verrprintf(err, fmt, ap);
	va_end(ap);
	/* A long list is quoted cut at 200 bytes: the reason is what the reader needs. */
	errprefix(err, "bad hostlist \"%.200s%s\"", list, strlen(list) > 200 ? "..." : "");
}

static int hl_is_sep(char c)
{
	return c == ',' || c == ' ' || c == '\t' || c == '\n';
}

/* A host name character: printable ASCII that is not part of the list syntax. */
static int hl_is_name_char(char c)
{
	return c > 0x20 && c < 0x7f && c != '[' && c != ']' && c != ',';
}

static void hl_elem_free(struct hl_elem *e)
{
	for (int b = 0; b < e->nbrackets; b++)
		free(e->ranges[b]);
	memset(e, 0, sizeof(*e));
}

/* Parse a number of at most HL_DIGITS_MAX digits at *p; advances *p. */
static int hl_number(const char **p, unsigned long *val, int *width)
{
	const char *s = *p;
	unsigned long v = 0;
	int n = 0;
	while (isdigit((unsigned char)s[n])) {
		if (n == HL_DIGITS_MAX)
			return -1;
		v = v * 10 + (unsigned long)(s[n] - '0');
		n++;
	}
	if (n == 0)
		return -1;
	*p = s + n;
	*val = v;
	*width = n;
	return 0;
}

/* Parse the ranges between '[' and ']' ("01-03,7"); [s, end) excludes the brackets. */
static int hl_parse_bracket(const char *list, const char *s, const char *end, struct hl_range **out,
			    int *nout, unsigned long *nvalues, struct dp_error *err)
{
	struct hl_range *r = NULL;
	int n = 0, cap = 0, rv = -1;
	unsigned long total = 0;

	if (s == end) {
		hl_err(err, list, "empty brackets \"[]\"");
		goto out;
	}
	while (s < end) {
		struct hl_range cur;
		int hiwidth;
		const char *at = s;
		if (hl_number(&s, &cur.lo, &cur.width) < 0) {
			hl_err(err, list, "expected a number of 1 to %d digits at \"%.*s\"",
			       HL_DIGITS_MAX, (int)(end - at), at);
			goto out;
		}
		cur.hi = cur.lo;
		if (s < end && *s == '-') {
			s++;
			if (hl_number(&s, &cur.hi, &hiwidth) < 0) {
				hl_err(err, list,
				       "expected a number of 1 to %d digits after '-' in \"%.*s\"",
				       HL_DIGITS_MAX, (int)(end - at), at);
				goto out;
			}
			if (cur.hi < cur.lo) {
				hl_err(err, list, "range %.*s goes backwards", (int)(s - at), at);
				goto out;
			}
		}
		if (s < end && *s != ',') {
			if (isprint((unsigned char)*s))
				hl_err(err, list, "unexpected '%c' in brackets", *s);
			else
				hl_err(err, list, "unexpected character 0x%02x in brackets",
				       (unsigned char)*s);
			goto out;
		}
		if (s < end && s + 1 == end) {
			hl_err(err, list, "a ',' that ends the brackets");
			goto out;
		}
		if (s < end)
			s++;
		total += cur.hi - cur.lo + 1;
		if (total > RT_HOSTLIST_MAX) {
			hl_err(err, list, "expands to more than %d hosts", RT_HOSTLIST_MAX);
			goto out;
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 4;
			struct hl_range *grown = realloc(r, (size_t)cap * sizeof(*r));
			if (!grown) {
				hl_err(err, list, "out of memory");
				goto out;
			}
			r = grown;
		}
		r[n++] = cur;
	}
	*out = r;
	*nout = n;
	*nvalues = total;
	r = NULL;
	rv = 0;
out:
	free(r);
	return rv;
}

/* Parse one element [s, end), count the names it expands to and check the longest fits. */
static int hl_parse_elem(const char *list, const char *s, const char *end, struct hl_elem *e,
			 unsigned long *count, struct dp_error *err)
{
	unsigned long n = 1;
	size_t len = 0;

	memset(e, 0, sizeof(*e));
	e->lit[0] = s;
	while (s < end) {
		if (*s == '[') {
			const char *close = memchr(s, ']', (size_t)(end - s));
			const char *nested = memchr(s + 1, '[', (size_t)(end - s - 1));
			unsigned long nvalues;
			int b = e->nbrackets;
			if (!close) {
				hl_err(err, list, "'[' at offset %d is never closed",
				       (int)(s - list));
				goto fail;
			}
			if (nested && nested < close) {
				hl_err(err, list, "nested '[' at offset %d", (int)(nested - list));
				goto fail;
			}
			if (b == HL_BRACKETS_MAX) {
				hl_err(err, list, "more than %d bracket groups in one name",
				       HL_BRACKETS_MAX);
				goto fail;
			}
			e->litlen[b] = (size_t)(s - e->lit[b]);
			if (hl_parse_bracket(list, s + 1, close, &e->ranges[b], &e->nranges[b],
					     &nvalues, err) < 0)
				goto fail;
			e->nbrackets++;
			n *= nvalues; /* both factors <= RT_HOSTLIST_MAX: fits in 64 bits */
			if (n > RT_HOSTLIST_MAX) {
				hl_err(err, list, "expands to more than %d hosts", RT_HOSTLIST_MAX);
				goto fail;
			}
			int width = 0;
			for (int i = 0; i < e->nranges[b]; i++) {
				int w = e->ranges[b][i].width;
				int hiw = snprintf(NULL, 0, "%lu", e->ranges[b][i].hi);
				width = w > width ? w : width;
				width = hiw > width ? hiw : width;
			}
			len += (size_t)width;
			s = close + 1;
			e->lit[e->nbrackets] = s;
			continue;
		}
		if (*s == ']') {
			hl_err(err, list, "']' at offset %d without '['", (int)(s - list));
			goto fail;
		}
		if (!hl_is_name_char(*s)) {
			hl_err(err, list,
			       "character 0x%02x at offset %d cannot be part of a host name",
			       (unsigned char)*s, (int)(s - list));
			goto fail;
		}
		s++;
	}
	e->litlen[e->nbrackets] = (size_t)(end - e->lit[e->nbrackets]);
	for (int b = 0; b <= e->nbrackets; b++)
		len += e->litlen[b];
	if (len >= RT_HOST_MAX) {
		hl_err(err, list, "host names longer than %d characters", RT_HOST_MAX - 1);
		goto fail;
	}
	*count = n;
	return 0;
fail:
	hl_elem_free(e);
	return -1;
}

/* Write every name of a parsed element into hosts[*at...]; the last bracket varies fastest. */
static int hl_expand_elem(const struct hl_elem *e, char **hosts, int *at)
{
	int ri[HL_BRACKETS_MAX] = {0};
	unsigned long v[HL_BRACKETS_MAX];

	for (int b = 0; b < e->nbrackets; b++)
		v[b] = e->ranges[b][0].lo;
	for (;;) {
		char name[RT_HOST_MAX], *p = name; /* hl_parse_elem checked the longest fits */
		for (int b = 0; b <= e->nbrackets; b++) {
			memcpy(p, e->lit[b], e->litlen[b]);
			p += e->litlen[b];
			if (b < e->nbrackets)
				p += sprintf(p, "%0*lu", e->ranges[b][ri[b]].width, v[b]);
		}
		*p = '\0';
		if (!(hosts[*at] = strdup(name)))
			return -1;
		(*at)++;

		int b = e->nbrackets - 1;
		for (; b >= 0; b--) {
			if (v[b] < e->ranges[b][ri[b]].hi) {
				v[b]++;
				break;
			}
			if (ri[b] + 1 < e->nranges[b]) {
				v[b] = e->ranges[b][++ri[b]].lo;
				break;
			}
			ri[b] = 0;
			v[b] = e->ranges[b][0].lo;
		}
		if (b < 0)
			return 0;
	}
}

void rt_hostlist_free(char **hosts, int count)
{
	if (!hosts)
		return;
	for (int i = 0; i < count; i++)
		free(hosts[i]);
	free(hosts);
}

int rt_hostlist_expand(const char *list, char ***hosts, int *count, struct dp_error *err)
{
	char **out = NULL;
	int n = 0, rv = -1;
	unsigned long total = 0;

	*hosts = NULL;
	*count = 0;
	if (!list) {
		errprintf(err, "bad hostlist: none given");
		return -1;
	}
	/* Two passes: count (and check) everything first, then allocate exactly once. */
	for (int pass = 0; pass < 2; pass++) {
		const char *s = list;
		while (*s) {
			struct hl_elem e;
			unsigned long k;
			int depth = 0;
			const char *end = s;
			if (hl_is_sep(*s)) {
				s++;
				continue;
			}
			/* The element ends at a separator outside brackets. */
			while (*end && (depth > 0 || !hl_is_sep(*end))) {
				if (*end == '[')
					depth++;
				else if (*end == ']' && depth > 0)
					depth--;
				end++;
			}
			if (hl_parse_elem(list, s, end, &e, &k, err) < 0)
				goto out;
			if (pass == 0) {
				total += k;
				if (total > RT_HOSTLIST_MAX) {
					hl_elem_free(&e);
					hl_err(err, list, "expands to more than %d hosts",
					       RT_HOSTLIST_MAX);
					goto out;
				}
			} else if (hl_expand_elem(&e, out, &n) < 0) {
				hl_elem_free(&e);
				hl_err(err, list, "out of memory");
				goto out;
			}
			hl_elem_free(&e);
			s = end;
		}
		if (pass == 0) {
			if (total == 0) {
				hl_err(err, list, "no host names in it");
				goto out;
			}
			out = calloc(total, sizeof(*out));
			if (!out) {
				hl_err(err, list, "out of memory");
				goto out;
			}
		}
	}
	*hosts = out;
	*count = n;
	out = NULL;
	rv = 0;
out:
	rt_hostlist_free(out, n);
	return rv;
}

/* A count of 1..RT_HOSTLIST_MAX at *p (advances it). */
static int tpn_number(const char **p, int *val)
{
	unsigned long v;
	int width;
	if (hl_number(p, &v, &width) < 0 || v < 1 || v > RT_HOSTLIST_MAX)
		return -1;
	*val = (int)v;
	return 0;
}

int rt_tasks_per_node_expand(const char *spec, int **counts, int *nnodes, struct dp_error *err)
{
	int *out = NULL, n = 0, rv = -1;
	long total = 0;

	*counts = NULL;
	*nnodes = 0;
	if (!spec || !*spec) {
		errprintf(err, "bad tasks-per-node spec: empty");
		return -1;
	}
	for (int pass = 0; pass < 2; pass++) {
		const char *s = spec;
		n = 0;
		for (;;) {
			int tasks, repeat = 1;
			const char *at = s;
			if (tpn_number(&s, &tasks) < 0) {
				errprintf(err,
					  "bad tasks-per-node spec \"%.200s\": expected a count of "
					  "1 to %d at \"%.40s\"",
					  spec, RT_HOSTLIST_MAX, at);
				goto out;
			}
			if (strncmp(s, "(x", 2) == 0) {
				s += 2;
				if (tpn_number(&s, &repeat) < 0 || *s != ')') {
					errprintf(err,
						  "bad tasks-per-node spec \"%.200s\": expected "
						  "\"(xN)\" with N from 1 to %d at \"%.40s\"",
						  spec, RT_HOSTLIST_MAX, at);
					goto out;
				}
				s++;
			}
			if (pass == 0) {
				total += repeat;
				if (total > RT_HOSTLIST_MAX) {
					errprintf(
					    err,
					    "bad tasks-per-node spec \"%.200s\": more than %d "
					    "nodes",
					    spec, RT_HOSTLIST_MAX);
					goto out;
				}
			} else {
				for (int i = 0; i < repeat; i++)
					out[n++] = tasks;
			}
			if (*s == '\0')
				break;
			if (*s != ',' || s[1] == '\0') {
				errprintf(
				    err,
				    "bad tasks-per-node spec \"%.200s\": unexpected \"%.40s\" "
				    "(expected e.g. \"2(x3),1\")",
				    spec, s);
				goto out;
			}
			s++;
		}
		if (pass == 0 && !(out = calloc((size_t)total, sizeof(*out)))) {
			errprintf(err, "bad tasks-per-node spec: out of memory");
			goto out;
		}
	}
	*counts = out;
	*nnodes = n;
	out = NULL;
	rv = 0;
out:
	free(out);
	return rv;
}
