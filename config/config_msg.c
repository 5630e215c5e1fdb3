/* config_msg.c — the config's messages: what a user wrote, escaped so an error is one line of
 * printable text; errors that name the config, the JSON path and the override that set it;
 * warnings; numbers as a user writes them; the value at a dotted path. Used by the reader
 * (config.c) and the schema (config_schema.c); uses neither. */
#include "config/config_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Text helpers for messages. Everything a user wrote is escaped before it is printed, so an
 * error is always one line of printable text. */

/* Append s (at most max bytes of it) to out with control characters escaped, and with
 * quotes and backslashes too when it goes between quotes. */
void cfg_escape_text(char *out, size_t outlen, const char *s, size_t max, int quoted)
{
	size_t o = strlen(out);
	size_t i;

	for (i = 0; s[i] && i < max && o + 8 < outlen; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (quoted && (ch == '"' || ch == '\\')) {
			out[o++] = '\\';
			out[o++] = (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			o += (size_t)snprintf(out + o, outlen - o, "\\u%04x", ch);
		} else {
			out[o++] = (char)ch;
		}
	}
	if (s[i] && o + 4 < outlen) {
		/* Cut on a UTF-8 character boundary. */
		while (o > 0 && ((unsigned char)out[o - 1] & 0xc0) == 0x80)
			o--;
		if (o > 0 && ((unsigned char)out[o - 1] & 0xc0) == 0xc0)
			o--;
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

void cfg_escape_into(char *out, size_t outlen, const char *s, size_t max)
{
	cfg_escape_text(out, outlen, s, max, 1);
}

void cfg_format_number(double d, char *buf, size_t len)
{
	/* Whole numbers without an exponent (300, not 3e+02); others in the shortest form that
	 * reads back as exactly d (0.1, not 0.10000000000000001). No libm: the SPANK plugin
	 * links this file with jansson only. */
	if (d > -1e15 && d < 1e15 && d == (double)(long long)d) {
		snprintf(buf, len, "%.0f", d == 0 ? 0.0 : d);
		return;
	}
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			return;
	}
}

/* "got ..." text for a JSON value. */
void cfg_describe(const json_t *v, char *buf, size_t len)
{
	buf[0] = '\0';
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		snprintf(buf, len, "an object");
		break;
	case JSON_ARRAY:
		snprintf(buf, len, "an array of %zu value%s", json_array_size(v),
			 json_array_size(v) == 1 ? "" : "s");
		break;
	case JSON_STRING:
		snprintf(buf, len, "\"");
		cfg_escape_into(buf, len - 1, json_string_value(v), 60);
		strcat(buf, "\"");
		break;
	case JSON_INTEGER:
		snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		break;
	case JSON_REAL:
		cfg_format_number(json_real_value(v), buf, len);
		/* 32.0 must not read as the integer 32 in "expected an integer, got 32.0". */
		if (!strpbrk(buf, ".eEn"))
			strncat(buf, ".0", len - strlen(buf) - 1);
		break;
	case JSON_TRUE:
		snprintf(buf, len, "true");
		break;
	case JSON_FALSE:
		snprintf(buf, len, "false");
		break;
	case JSON_NULL:
		snprintf(buf, len, "null");
		break;
	}
}

void cfg_join_path(char *out, const char *parent, const char *key)
{
	char esc[CFG_JSON_PATH_MAX] = "";
	size_t n = 0, m;

	cfg_escape_into(esc, sizeof(esc), key, 120);
	if (parent && parent[0]) {
		n = strnlen(parent, CFG_JSON_PATH_MAX - 2);
		memmove(out, parent, n);
		out[n++] = '.';
	}
	m = strlen(esc);
	if (m > CFG_JSON_PATH_MAX - 1 - n)
		m = CFG_JSON_PATH_MAX - 1 - n;
	memcpy(out + n, esc, m);
	out[n + m] = '\0';
}

/* ---------------------------------------------------------------------------------------
 * Errors and warnings. */

/* Length of the key part of override i ("a.b" of "a.b=1"). */
static size_t override_key_len(const char *ov)
{
	const char *eq = strchr(ov, '=');
	return eq ? (size_t)(eq - ov) : strlen(ov);
}

/* The last override that set path or a value containing it; -1 when the file did. */
int cfg_override_for(const struct cfg_ctx *x, const char *path)
{
	for (int i = x->noverrides - 1; i >= 0; i--) {
		const char *ov = x->overrides[i];
		size_t n = override_key_len(ov);
		if (path && strncmp(path, ov, n) == 0 &&
		    (path[n] == '\0' || path[n] == '.' || path[n] == '['))
			return i;
	}
	return -1;
}

static int vfail(struct cfg_ctx *x, int ov, const char *path, const char *fmt, va_list ap)
{
	verrprintf(x->err, fmt, ap);
	if (ov < 0)
		ov = cfg_override_for(x, path);
	if (ov >= 0) {
		char quoted[6 * 80 + 16] =
		    ""; /* 80 bytes of the override, at most 6 each (\\u00XX) */
		cfg_escape_text(quoted, sizeof(quoted), x->overrides[ov], 80, 0);
		errprintf(x->err, "%s (from the override %s)", x->err->text, quoted);
	}
	if (path && path[0])
		return errprefix(x->err, "%s: %s", x->name, path);
	return errprefix(x->err, "%s", x->name);
}

int cfg_fail(struct cfg_ctx *x, const char *path, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(x, -1, path, fmt, ap);
	va_end(ap);
	return -1;
}

int cfg_fail_override(struct cfg_ctx *x, int ov, const char *path, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(x, ov, path, fmt, ap);
	va_end(ap);
	return -1;
}

int cfg_oom(struct cfg_ctx *x)
{
	return cfg_fail(x, NULL, "out of memory");
}

int cfg_warn(struct cfg_ctx *x, const char *path, const char *fmt, ...)
{
	struct cfg *c = x->c;
	char msg[1024];
	size_t n;
	char **w;
	va_list ap;

	snprintf(msg, sizeof(msg), "%s: ", path);
	n = strlen(msg);
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
	va_end(ap);
	w = realloc(c->warnings, (size_t)(c->nwarnings + 1) * sizeof(*w));
	if (!w)
		return cfg_oom(x);
	c->warnings = w;
	if (!(w[c->nwarnings] = strdup(msg)))
		return cfg_oom(x);
	c->nwarnings++;
	return 0;
}

json_t *cfg_json_at(json_t *root, const char *path)
{
	char part[CFG_JSON_PATH_MAX];
	json_t *v = root;

	while (v && *path) {
		size_t n = strcspn(path, ".");
		if (n >= sizeof(part) || !json_is_object(v))
			return NULL;
		memcpy(part, path, n);
		part[n] = '\0';
		v = json_object_get(v, part);
		path += n;
		if (*path == '.')
			path++;
	}
	return v;
}
