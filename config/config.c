/* config.c — reading a job config: the file, JSON, overrides, and the schema-driven decoder
 * that fills struct cfg and names the JSON path of every error.
 * What the keys mean (tables, defaults, cross-field checks) is config_schema.c; printing is
 * config_json.c. No Slurm, PMIx or trainer code here: the SPANK plugin links this file. */
#include "config/config_schema.h"
#include "common/error.h"
#include "common/readfile.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------
 * Did you mean: the nearest candidate by edit distance (adjacent swaps count one), compared
 * without case, if it is close enough to be a plausible typo. */

static int edit_distance(const char *a, const char *b)
{
	enum { MAXLEN = 64 };
	/* Three rows of the usual table (the swap looks two rows back); small enough for the
	 * stack of any thread the SPANK plugin runs in. */
	int rows[3][MAXLEN + 1];
	int la = (int)strlen(a), lb = (int)strlen(b);

	if (la > MAXLEN || lb > MAXLEN)
		return INT_MAX;
	for (int j = 0; j <= lb; j++)
		rows[0][j] = j;
	for (int i = 1; i <= la; i++) {
		int *cur = rows[i % 3], *up = rows[(i - 1) % 3], *up2 = rows[(i + 1) % 3];
		cur[0] = i;
		for (int j = 1; j <= lb; j++) {
			int ai = tolower((unsigned char)a[i - 1]),
			    bj = tolower((unsigned char)b[j - 1]);
			int v = up[j] + 1;
			if (cur[j - 1] + 1 < v)
				v = cur[j - 1] + 1;
			if (up[j - 1] + (ai != bj) < v)
				v = up[j - 1] + (ai != bj);
			if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == bj && up2[j - 2] + 1 < v)
				v = up2[j - 2] + 1;
			cur[j] = v;
		}
	}
	return rows[la % 3][lb];
}

static const char *suggest(const char *word, const char *const *cands, int n)
{
	const char *best = NULL;
	int bestd = INT_MAX;

	for (int i = 0; i < n; i++) {
		int len = (int)strlen(cands[i]);
		int limit = len <= 3 ? 1 : len <= 6 ? 2 : 3;
		int d = edit_distance(word, cands[i]);
		/* "input" means "input_shape" more likely than "init". */
		if (strlen(word) >= 3 && strncasecmp(cands[i], word, strlen(word)) == 0 && d > 1)
			d = 1;
		if (d <= limit && d < bestd) {
			best = cands[i];
			bestd = d;
		}
	}
	return best;
}

static int unknown_key(struct cfg_ctx *x, int ov, const struct cfg_key *keys, const char *path,
		       const char *key)
{
	const char *cands[64] = {NULL};
	char list[512] = "";
	int n = 0;

	for (const struct cfg_key *k = keys; k->name && n < 64; k++)
		cands[n++] = k->name;
	const char *s = suggest(key, cands, n);
	if (s)
		return cfg_fail_override(x, ov, path, "unknown key; did you mean \"%s\"?", s);
	for (int i = 0; i < n; i++) {
		strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
		strncat(list, cands[i], sizeof(list) - strlen(list) - 1);
	}
	return cfg_fail_override(x, ov, path, "unknown key; the keys here are: %s", list);
}

/* ---------------------------------------------------------------------------------------
 * What a key expects, in words: "an integer >= 1", "a number in [0, 1)", ... */

static void range_text(const struct cfg_key *k, char *buf, size_t len)
{
	char lo[40], hi[40];
	int has_min = !(k->flags & CFG_F_NO_MIN), has_max = !!(k->flags & CFG_F_HAS_MAX);

	cfg_format_number(k->min, lo, sizeof(lo));
	cfg_format_number(k->max, hi, sizeof(hi));
	if (has_min && has_max)
		snprintf(buf, len, " in %c%s, %s%c", k->flags & CFG_F_MIN_EXCL ? '(' : '[', lo, hi,
			 k->flags & CFG_F_MAX_EXCL ? ')' : ']');
	else if (has_min)
		snprintf(buf, len, " %s %s", k->flags & CFG_F_MIN_EXCL ? ">" : ">=", lo);
	else if (has_max)
		snprintf(buf, len, " %s %s", k->flags & CFG_F_MAX_EXCL ? "<" : "<=", hi);
	else
		buf[0] = '\0';
}

static void enum_list(const struct cfg_enum_name *names, char *buf, size_t len)
{
	buf[0] = '\0';
	for (const struct cfg_enum_name *e = names; e->name; e++) {
		if (e->refuse)
			continue;
		size_t n = strlen(buf);
		snprintf(buf + n, len - n, "%s\"%s\"", n ? ", " : "", e->name);
	}
}

static void expected_text(const struct cfg_key *k, char *buf, size_t len)
{
	char range[96];
	const char *incr = k->flags & CFG_F_INCREASING ? ", strictly increasing" : "";

	range_text(k, range, sizeof(range));
	switch (k->kind) {
	case CFG_K_OBJECT:
		snprintf(buf, len, "an object");
		break;
	case CFG_K_BOOL:
		snprintf(buf, len, "true or false");
		break;
	case CFG_K_INT:
	case CFG_K_INT64:
		snprintf(buf, len, "an integer%s", range);
		break;
	case CFG_K_NUMBER:
		snprintf(buf, len, "a number%s", range);
		break;
	case CFG_K_STRING:
		snprintf(buf, len, "%s",
			 k->flags & CFG_F_NONEMPTY ? "a non-empty string" : "a string");
		break;
	case CFG_K_PATH:
		snprintf(buf, len, "a file path (a non-empty string)");
		break;
	case CFG_K_ENUM:
		snprintf(buf, len, "one of ");
		enum_list(k->names, buf + strlen(buf), len - strlen(buf));
		break;
	case CFG_K_INT_ARRAY:
		snprintf(buf, len, "an array of %d integers%s", k->len, range);
		break;
	case CFG_K_NUMBER_ARRAY:
		snprintf(buf, len, "an array of %d numbers%s", k->len, range);
		break;
	case CFG_K_INT_LIST:
		snprintf(buf, len, "an array of integers%s%s", range, incr);
		break;
	case CFG_K_NUMBER_LIST:
		snprintf(buf, len, "an array of numbers%s%s", range, incr);
		break;
	case CFG_K_PATH_LIST:
		snprintf(buf, len, "an array of file paths");
		break;
	case CFG_K_LOSS_SCALE:
		snprintf(buf, len, "\"dynamic\" or a number%s", range);
		break;
	case CFG_K_RESUME:
		snprintf(buf, len, "\"auto\", \"never\" or the path of a checkpoint");
		break;
	}
}

/* Elements of arrays and lists are described as the scalar they are. */
static enum cfg_kind element_kind(enum cfg_kind kind)
{
	switch (kind) {
	case CFG_K_INT_ARRAY:
	case CFG_K_INT_LIST:
		return CFG_K_INT;
	case CFG_K_NUMBER_ARRAY:
	case CFG_K_NUMBER_LIST:
		return CFG_K_NUMBER;
	case CFG_K_PATH_LIST:
		return CFG_K_PATH;
	default:
		return kind;
	}
}

static int expect(struct cfg_ctx *x, const char *path, const struct cfg_key *k, const json_t *v)
{
	char want[512], got[128];

	expected_text(k, want, sizeof(want));
	cfg_describe(v, got, sizeof(got));
	return cfg_fail(x, path, "expected %s, got %s", want, got);
}

static int expect_element(struct cfg_ctx *x, const char *path, const struct cfg_key *k,
			  const json_t *v)
{
	struct cfg_key el = *k;
	el.kind = element_kind(k->kind);
	el.flags &= ~CFG_F_INCREASING;
	return expect(x, path, &el, v);
}

/* ---------------------------------------------------------------------------------------
 * Paths. Input paths are made absolute so the job works from any directory. */

/* Clean an absolute path in place: no empty or "." components. ".." is kept: removing it
 * lexically would be wrong across symbolic links. */
static void clean_path(char *s)
{
	char *out = s, *in = s;

	while (*in) {
		while (*in == '/')
			in++;
		if (!*in)
			break;
		char *end = strchr(in, '/');
		size_t n = end ? (size_t)(end - in) : strlen(in);
		if (!(n == 1 && in[0] == '.')) {
			*out++ = '/';
			memmove(out, in, n);
			out += n;
		}
		in += n;
	}
	if (out == s)
		*out++ = '/';
	*out = '\0';
}

static char *absolute_path(const char *dir, const char *p)
{
	char *r;

	if (p[0] == '/') {
		r = strdup(p);
	} else {
		size_t n = strlen(dir) + strlen(p) + 2;
		if ((r = malloc(n)))
			snprintf(r, n, "%s/%s", dir, p);
	}
	if (r)
		clean_path(r);
	return r;
}

char *cfg_resolve_path(const struct cfg_ctx *x, const char *path)
{
	return absolute_path(x->dir, path);
}

/* A path written in an override resolves against the current directory, where the user
 * typed it; one in the file against the file's directory. */
static char *resolve_input_path(struct cfg_ctx *x, const char *jpath, const char *p)
{
	char cwd[PATH_MAX];

	if (p[0] != '/' && cfg_override_for(x, jpath) >= 0) {
		if (!getcwd(cwd, sizeof(cwd))) {
			cfg_fail(x, jpath, "cannot resolve \"%s\": current directory: %s", p,
				 strerror(errno));
			return NULL;
		}
		char *r = absolute_path(cwd, p);
		if (!r)
			cfg_oom(x);
		return r;
	}
	char *r = cfg_resolve_path(x, p);
	if (!r)
		cfg_oom(x);
	return r;
}

/* ---------------------------------------------------------------------------------------
 * The decoder: one JSON value into one schema field. */

static int in_range(const struct cfg_key *k, double v)
{
	if (!(k->flags & CFG_F_NO_MIN) && (k->flags & CFG_F_MIN_EXCL ? v <= k->min : v < k->min))
		return 0;
	if ((k->flags & CFG_F_HAS_MAX) && (k->flags & CFG_F_MAX_EXCL ? v >= k->max : v > k->max))
		return 0;
	return 1;
}

/* An integer field: JSON integer, in the key's range and in [INT64_MIN, type_max]. */
static int get_integer(struct cfg_ctx *x, const struct cfg_key *k, const json_t *v,
		       const char *path, long long type_max, long long *out)
{
	if (!json_is_integer(v))
		return expect_element(x, path, k, v);
	long long n = json_integer_value(v);
	if (n > type_max || !in_range(k, (double)n))
		return expect_element(x, path, k, v);
	*out = n;
	return 0;
}

static int get_number(struct cfg_ctx *x, const struct cfg_key *k, const json_t *v, const char *path,
		      double *out)
{
	if (!json_is_number(v))
		return expect_element(x, path, k, v);
	double d = json_number_value(v);
	if (!in_range(k, d))
		return expect_element(x, path, k, v);
	*out = d;
	return 0;
}

static int get_path(struct cfg_ctx *x, const struct cfg_key *k, const json_t *v, const char *path,
		    char **out)
{
	if (!json_is_string(v) || json_string_length(v) == 0)
		return expect_element(x, path, k, v);
	if (!(*out = resolve_input_path(x, path, json_string_value(v))))
		return -1;
	return 0;
}

static int get_enum(struct cfg_ctx *x, const struct cfg_key *k, const json_t *v, const char *path,
		    int *out)
{
	const struct cfg_enum_name *e;
	const char *cands[32] = {NULL};
	char want[512], got[128];
	int n = 0;

	if (!json_is_string(v))
		return expect(x, path, k, v);
	const char *s = json_string_value(v);
	if ((e = cfg_enum_lookup(k->names, s))) {
		if (e->refuse)
			return cfg_fail(x, path, "\"%s\" is not supported: %s", e->name, e->refuse);
		*out = e->value;
		return 0;
	}
	for (e = k->names; e->name && n < 32; e++)
		if (!e->refuse)
			cands[n++] = e->name;
	expected_text(k, want, sizeof(want));
	cfg_describe(v, got, sizeof(got));
	const char *sug = suggest(s, cands, n);
	if (sug)
		return cfg_fail(x, path, "expected %s, got %s; did you mean \"%s\"?", want, got,
				sug);
	return cfg_fail(x, path, "expected %s, got %s", want, got);
}

static int decode_object(struct cfg_ctx *x, const struct cfg_key *keys, void *base, json_t *obj,
			 const char *path);

/* Arrays and lists: check the length, then each element with its index in the path. */
static int decode_array(struct cfg_ctx *x, const struct cfg_key *k, void *base, json_t *v,
			const char *path)
{
	char ep[CFG_JSON_PATH_MAX + 24];
	size_t n = json_array_size(v);
	int fixed = k->kind == CFG_K_INT_ARRAY || k->kind == CFG_K_NUMBER_ARRAY;
	void *vals = NULL;
	size_t i;
	int rv = -1;

	if (!json_is_array(v) || (fixed && n != (size_t)k->len) ||
	    (!fixed && (k->flags & CFG_F_NONEMPTY) && n == 0) || n > 65536)
		return expect(x, path, k, v);
	if (fixed) {
		vals = (char *)base + k->off;
	} else if (n > 0) {
		size_t elsize = k->kind == CFG_K_INT_LIST      ? sizeof(int)
				: k->kind == CFG_K_NUMBER_LIST ? sizeof(double)
							       : sizeof(char *);
		if (!(vals = calloc(n, elsize)))
			return cfg_oom(x);
	}
	for (i = 0; i < n; i++) {
		json_t *el = json_array_get(v, i);
		long long iv;
		double dv;
		snprintf(ep, sizeof(ep), "%s[%zu]", path, i);
		switch (element_kind(k->kind)) {
		case CFG_K_INT:
			if (get_integer(x, k, el, ep, INT_MAX, &iv) < 0)
				goto out;
			if ((k->flags & CFG_F_INCREASING) && i > 0 && iv <= ((int *)vals)[i - 1])
				goto not_increasing;
			((int *)vals)[i] = (int)iv;
			break;
		case CFG_K_NUMBER:
			if (get_number(x, k, el, ep, &dv) < 0)
				goto out;
			if ((k->flags & CFG_F_INCREASING) && i > 0 && dv <= ((double *)vals)[i - 1])
				goto not_increasing;
			((double *)vals)[i] = dv;
			break;
		default:
			if (get_path(x, k, el, ep, &((char **)vals)[i]) < 0)
				goto out;
			break;
		}
	}
	if (!fixed) {
		/* Replace the default only once the whole list is valid. */
		cfg_field_free(k, base);
		switch (k->kind) {
		case CFG_K_INT_LIST:
			*CFG_AT(struct cfg_int_list, base, k->off) =
			    (struct cfg_int_list){vals, (int)n};
			break;
		case CFG_K_NUMBER_LIST:
			*CFG_AT(struct cfg_double_list, base, k->off) =
			    (struct cfg_double_list){vals, (int)n};
			break;
		default:
			*CFG_AT(struct cfg_string_list, base, k->off) =
			    (struct cfg_string_list){vals, (int)n};
			break;
		}
		vals = NULL;
	}
	rv = 0;
	goto out;
not_increasing : {
	/* Element i is not above its predecessor; ep names it. */
	char prev[40], got[128];
	if (element_kind(k->kind) == CFG_K_INT)
		snprintf(prev, sizeof(prev), "%d", ((int *)vals)[i - 1]);
	else
		cfg_format_number(((double *)vals)[i - 1], prev, sizeof(prev));
	cfg_describe(json_array_get(v, i), got, sizeof(got));
	cfg_fail(x, ep, "expected a value greater than the previous one (%s), got %s", prev, got);
}
out:
	if (!fixed && vals) {
		if (k->kind == CFG_K_PATH_LIST)
			for (size_t j = 0; j < n; j++)
				free(((char **)vals)[j]);
		free(vals);
	}
	return rv;
}

static int decode_value(struct cfg_ctx *x, const struct cfg_key *k, void *base, json_t *v,
			const char *path)
{
	long long iv;
	double dv;
	char *s;

	switch (k->kind) {
	case CFG_K_OBJECT:
		if (!json_is_object(v))
			return expect(x, path, k, v);
		if (k->flags & CFG_F_OPTIONAL)
			*CFG_AT(bool, base, k->off2) = true;
		return decode_object(x, k->sub, (char *)base + k->off, v, path);
	case CFG_K_BOOL:
		if (!json_is_boolean(v))
			return expect(x, path, k, v);
		*CFG_AT(bool, base, k->off) = json_is_true(v);
		return 0;
	case CFG_K_INT:
		if (get_integer(x, k, v, path, INT_MAX, &iv) < 0)
			return -1;
		*CFG_AT(int, base, k->off) = (int)iv;
		return 0;
	case CFG_K_INT64:
		if (get_integer(x, k, v, path, INT64_MAX, &iv) < 0)
			return -1;
		*CFG_AT(int64_t, base, k->off) = (int64_t)iv;
		return 0;
	case CFG_K_NUMBER:
		if (get_number(x, k, v, path, &dv) < 0)
			return -1;
		*CFG_AT(double, base, k->off) = dv;
		return 0;
	case CFG_K_STRING:
		if (!json_is_string(v) || ((k->flags & CFG_F_NONEMPTY) && !json_string_length(v)))
			return expect(x, path, k, v);
		if (!(s = strdup(json_string_value(v))))
			return cfg_oom(x);
		free(*CFG_AT(char *, base, k->off));
		*CFG_AT(char *, base, k->off) = s;
		return 0;
	case CFG_K_PATH:
		if (get_path(x, k, v, path, &s) < 0)
			return -1;
		free(*CFG_AT(char *, base, k->off));
		*CFG_AT(char *, base, k->off) = s;
		return 0;
	case CFG_K_ENUM:
		return get_enum(x, k, v, path, CFG_AT(int, base, k->off));
	case CFG_K_INT_ARRAY:
	case CFG_K_NUMBER_ARRAY:
	case CFG_K_INT_LIST:
	case CFG_K_NUMBER_LIST:
	case CFG_K_PATH_LIST:
		return decode_array(x, k, base, v, path);
	case CFG_K_LOSS_SCALE:
		if (json_is_string(v) && strcmp(json_string_value(v), "dynamic") == 0) {
			*CFG_AT(bool, base, k->off) = true;
			return 0;
		}
		if (!json_is_number(v) || !in_range(k, json_number_value(v)))
			return expect(x, path, k, v);
		*CFG_AT(bool, base, k->off) = false;
		*CFG_AT(double, base, k->off2) = json_number_value(v);
		return 0;
	case CFG_K_RESUME: {
		enum cfg_resume *r = CFG_AT(enum cfg_resume, base, k->off);
		char **rp = CFG_AT(char *, base, k->off2);
		if (!json_is_string(v) || json_string_length(v) == 0)
			return expect(x, path, k, v);
		free(*rp);
		*rp = NULL;
		if (strcmp(json_string_value(v), "auto") == 0) {
			*r = CFG_RESUME_AUTO;
		} else if (strcmp(json_string_value(v), "never") == 0) {
			*r = CFG_RESUME_NEVER;
		} else {
			if (!(*rp = resolve_input_path(x, path, json_string_value(v))))
				return -1;
			*r = CFG_RESUME_PATH;
		}
		return 0;
	}
	}
	return cfg_fail(x, path, "internal error: key kind %d", (int)k->kind);
}

static const struct cfg_key *find_key(const struct cfg_key *keys, const char *name)
{
	for (const struct cfg_key *k = keys; k->name; k++)
		if (strcmp(k->name, name) == 0)
			return k;
	return NULL;
}

/* Keys in file order, so the first error reported is the first one in the file; then the
 * required keys, in schema order (also inside absent objects, to name the deepest one). */
static int decode_object(struct cfg_ctx *x, const struct cfg_key *keys, void *base, json_t *obj,
			 const char *path)
{
	char sub[CFG_JSON_PATH_MAX];
	const char *key;
	json_t *v;

	if (obj) {
		json_object_foreach(obj, key, v)
		{
			const struct cfg_key *k = find_key(keys, key);
			cfg_join_path(sub, path, key);
			if (!k)
				return unknown_key(x, -1, keys, sub, key);
			if (decode_value(x, k, base, v, sub) < 0)
				return -1;
		}
	}
	for (const struct cfg_key *k = keys; k->name; k++) {
		if (obj && json_object_get(obj, k->name))
			continue;
		/* a launch-only config: no trainer part to check */
		if (x->launch && !path[0] &&
		    (!strcmp(k->name, "model") || !strcmp(k->name, "data")))
			continue;
		cfg_join_path(sub, path, k->name);
		if (k->flags & CFG_F_REQUIRED) {
			char want[512];
			expected_text(k, want, sizeof(want));
			return cfg_fail(x, sub, "missing; expected %s", want);
		}
		if (k->kind == CFG_K_OBJECT && !(k->flags & CFG_F_OPTIONAL) &&
		    decode_object(x, k->sub, (char *)base + k->off, NULL, sub) < 0)
			return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Overrides: "path.to.key=VALUE" edits the document before it is decoded, so an override
 * is checked exactly like the same value in the file. */

static int bad_override(struct cfg_ctx *x, const char *ov)
{
	char esc[128] = "";
	cfg_escape_into(esc, sizeof(esc), ov, 80);
	return cfg_fail(x, NULL, "bad override \"%s\": expected path.to.key=VALUE", esc);
}

static int apply_override(struct cfg_ctx *x, json_t *root, int i)
{
	const char *ov = x->overrides[i];
	const char *eq = strchr(ov, '=');
	const struct cfg_key *keys = cfg_schema, *k = NULL;
	char path[CFG_JSON_PATH_MAX] = "", part[CFG_JSON_PATH_MAX];
	json_t *obj = root, *val;
	const char *p = ov;

	if (!eq || eq == ov)
		return bad_override(x, ov);
	while (p < eq) {
		size_t n = strcspn(p, ".=");
		if (n == 0 || n >= sizeof(part) || (p[n] == '.' && p + n + 1 == eq))
			return bad_override(x, ov);
		memcpy(part, p, n);
		part[n] = '\0';
		p += n;
		char parent[CFG_JSON_PATH_MAX];
		memcpy(parent, path, sizeof(parent));
		cfg_join_path(path, parent, part);
		if (!(k = find_key(keys, part)))
			return unknown_key(x, i, keys, path, part);
		if (p == eq)
			break;
		p++; /* the '.' */
		if (k->kind != CFG_K_OBJECT) {
			char want[512], next[CFG_JSON_PATH_MAX] = "";
			expected_text(k, want, sizeof(want));
			size_t nn = strcspn(p, ".=");
			memcpy(part, p, nn < sizeof(part) ? nn : sizeof(part) - 1);
			part[nn < sizeof(part) ? nn : sizeof(part) - 1] = '\0';
			cfg_escape_into(next, sizeof(next), part, 120);
			return cfg_fail_override(
			    x, i, path, "is %s, not an object: it has no key \"%s\"", want, next);
		}
		json_t *child = json_object_get(obj, part);
		if (!child) {
			child = json_object();
			if (!child || json_object_set_new(obj, part, child) < 0)
				return cfg_oom(x);
		} else if (!json_is_object(child)) {
			return expect(x, path, k, child);
		}
		obj = child;
		keys = k->sub;
	}
	json_error_t jerr;
	val = json_loads(eq + 1, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
	if (!val && !(val = json_string(eq + 1)))
		return cfg_fail_override(x, i, path, "the value is not valid UTF-8");
	if (json_is_null(val)) {
		/* key=null: back to the default. */
		json_decref(val);
		json_object_del(obj, part);
		return 0;
	}
	if (json_object_set_new(obj, part, val) < 0)
		return cfg_oom(x);
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Entry points. */

static char *dir_of(const char *abspath)
{
	const char *slash = strrchr(abspath, '/');
	size_t n = slash && slash != abspath ? (size_t)(slash - abspath) : 1;
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, abspath, n);
		d[n] = '\0';
	}
	return d;
}

static int all_space(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!isspace((unsigned char)s[i]))
			return 0;
	return 1;
}

/* abspath: the config's absolute path, or NULL for name made absolute against the cwd. */
static int parse(struct cfg *c, const char *text, size_t len, const char *name, const char *abspath,
		 int noverrides, char *const overrides[], int launch, struct dp_error *err)
{
	struct cfg_ctx x = {.c = c,
			    .name = name && name[0] ? name : "config",
			    .noverrides = noverrides > 0 && overrides ? noverrides : 0,
			    .overrides = overrides,
			    .err = err,
			    .launch = launch};
	char cwd[PATH_MAX], got[128], msg[256] = "";
	json_error_t jerr;
	int rv = -1;

	memset(c, 0, sizeof(*c));
	if (err)
		err->text[0] = '\0';
	if (cfg_set_defaults(c) < 0) {
		cfg_oom(&x);
		goto out;
	}
	if (!abspath && !getcwd(cwd, sizeof(cwd))) {
		cfg_fail(&x, NULL, "cannot determine the current directory: %s", strerror(errno));
		goto out;
	}
	c->path = abspath ? strdup(abspath) : absolute_path(cwd, x.name);
	if (!c->path || !(x.dir = dir_of(c->path))) {
		cfg_oom(&x);
		goto out;
	}
	if (!text || all_space(text, len)) {
		cfg_fail(&x, NULL, "empty file; expected a JSON object (see dptrain.json(5))");
		goto out;
	}
	x.root = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
	if (!x.root) {
		cfg_escape_text(msg, sizeof(msg), jerr.text, 160, 0);
		/* jansson names its own flag; say what the user can change instead. */
		char *nul = strstr(msg, " is not allowed without JSON_ALLOW_NUL");
		if (nul)
			memcpy(nul, " is not allowed in strings",
			       sizeof(" is not allowed in strings"));
		cfg_fail(&x, NULL, "line %d column %d: invalid JSON: %s", jerr.line, jerr.column,
			 msg);
		goto out;
	}
	if (!json_is_object(x.root)) {
		cfg_describe(x.root, got, sizeof(got));
		cfg_fail(&x, NULL, "expected a JSON object at the top level, got %s", got);
		goto out;
	}
	for (int i = 0; i < x.noverrides; i++)
		if (apply_override(&x, x.root, i) < 0)
			goto out;
	c->trainer = json_object_get(x.root, "model") && json_object_get(x.root, "data");
	if (decode_object(&x, cfg_schema, c, x.root, "") < 0 || cfg_check(&x) < 0)
		goto out;
	rv = 0;
out:
	json_decref(x.root);
	free(x.dir);
	if (rv < 0)
		cfg_free(c);
	return rv;
}

int cfg_parse(struct cfg *c, const char *text, size_t len, const char *name, int noverrides,
	      char *const overrides[], struct dp_error *err)
{
	return parse(c, text, len, name, NULL, noverrides, overrides, 0, err);
}

/* The file's directory through realpath (so "../jobs/x.json" gives a clean path), joined
 * with the file's own name (a symbolic link to a config keeps its directory). NULL when the
 * directory cannot be resolved. */
static char *file_abspath(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX], *r = NULL;
	const char *base = slash ? slash + 1 : path;
	size_t dlen = slash ? (size_t)(slash - path) : 0;

	if (dlen >= sizeof(dir))
		return NULL;
	memcpy(dir, slash ? path : ".", slash ? dlen : 1);
	dir[slash ? dlen : 1] = '\0';
	if (slash && dlen == 0)
		strcpy(dir, "/");
	char *real = realpath(dir, NULL);
	if (!real)
		return NULL;
	size_t n = strlen(real) + strlen(base) + 2;
	if ((r = malloc(n)))
		snprintf(r, n, "%s/%s", strcmp(real, "/") == 0 ? "" : real, base);
	free(real);
	return r;
}

static int load(struct cfg *c, const char *path, int noverrides, char *const overrides[],
		int launch, struct dp_error *err)
{
	char *abspath = NULL;
	char *buf = NULL;
	size_t len = 0;
	int rv = -1;

	memset(c, 0, sizeof(*c));
	if (err)
		err->text[0] = '\0';
	if (!path || !path[0]) {
		errprintf(err, "no config file given");
		goto out;
	}
	/* Only a regular file, opened without blocking: a FIFO or a device could keep srun,
	 * slurmstepd or the launcher waiting for data that never comes. */
	if (dp_read_file(path, CFG_MAX_FILE_SIZE, 0, &buf, &len, err) != 0) {
		if (errno == EINVAL)
			errprintf(err,
				  "%s: not a regular file (a job config must be a file, not a "
				  "FIFO, device or socket)",
				  path);
		else if (errno == EFBIG)
			errprintf(err, "%s: too large: a config is at most %u bytes", path,
				  CFG_MAX_FILE_SIZE);
		goto out;
	}
	abspath = file_abspath(path);
	rv = parse(c, buf, len, path, abspath, noverrides, overrides, launch, err);
out:
	free(abspath);
	free(buf);
	return rv;
}

int cfg_load(struct cfg *c, const char *path, int noverrides, char *const overrides[],
	     struct dp_error *err)
{
	return load(c, path, noverrides, overrides, 0, err);
}

int cfg_load_launch(struct cfg *c, const char *path, struct dp_error *err)
{
	return load(c, path, 0, NULL, 1, err);
}

int cfg_is_trainer_command(const char *cmd)
{
	const char *slash = strrchr(cmd, '/');
	return strcmp(slash ? slash + 1 : cmd, "dptrain") == 0;
}

int cfg_expand_output_dir(const char *pattern, const char *jobid, const char *stepid, char *buf,
			  size_t buflen)
{
	size_t o = 0;

	for (const char *p = pattern; *p; p++) {
		const char *piece;
		char one[2] = {*p, '\0'};
		if (*p != '%') {
			piece = one;
		} else {
			p++;
			if (*p == 'j')
				piece = jobid;
			else if (*p == 's')
				piece = stepid;
			else if (*p == 'n')
				piece = "local";
			else if (*p == '%')
				piece = "%";
			else
				return -1;
		}
		size_t n = strlen(piece);
		if (o + n >= buflen)
			return -1;
		memcpy(buf + o, piece, n);
		o += n;
	}
	if (o >= buflen)
		return -1;
	buf[o] = '\0';
	return (int)o;
}
