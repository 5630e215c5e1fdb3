/* config_schema.h — internal to config/: the schema table types, the parse context
 * and the helpers the config files share. Nothing outside config/ includes this;
 * the public API is config.h. */
#ifndef DPTRAIN_CONFIG_SCHEMA_H
#define DPTRAIN_CONFIG_SCHEMA_H

#include "config/config.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Longest JSON path we name in a message; longer ones (only from unknown keys) are cut. */
#define CFG_JSON_PATH_MAX 512

/* How a key's JSON value is stored. Offsets are relative to the struct of the enclosing
 * object (struct cfg for top-level keys, struct cfg_model for model.*, ...). */
enum cfg_kind {
	CFG_K_OBJECT,	 /* sub-struct at off; keys in sub; CFG_F_OPTIONAL: bool present at off2 */
	CFG_K_BOOL,	 /* bool */
	CFG_K_INT,	 /* int */
	CFG_K_INT64,	 /* int64_t */
	CFG_K_NUMBER,	 /* double; JSON integers are accepted */
	CFG_K_STRING,	 /* char *; NULL when absent */
	CFG_K_PATH,	 /* char *; made absolute against the config's directory */
	CFG_K_ENUM,	 /* int (the C enum); names in names */
	CFG_K_INT_ARRAY, /* int[len] */
	CFG_K_NUMBER_ARRAY, /* double[len] */
	CFG_K_INT_LIST,	    /* struct cfg_int_list */
	CFG_K_NUMBER_LIST,  /* struct cfg_double_list */
	CFG_K_PATH_LIST,    /* struct cfg_string_list of absolute paths */
	CFG_K_LOSS_SCALE,   /* "dynamic" or a number: bool dynamic at off, double scale at off2 */
	CFG_K_RESUME,	    /* "auto" | "never" | path: enum cfg_resume at off, char * at off2 */
};

#define CFG_F_REQUIRED	 0x01u /* missing is an error */
#define CFG_F_OPTIONAL	 0x02u /* object whose presence is recorded (bool at off2) */
#define CFG_F_MIN_EXCL	 0x04u /* value > min rather than >= min */
#define CFG_F_HAS_MAX	 0x08u /* value <= max (or < max with CFG_F_MAX_EXCL) */
#define CFG_F_MAX_EXCL	 0x10u
#define CFG_F_NO_MIN	 0x20u	/* any number (min is ignored) */
#define CFG_F_INCREASING 0x40u	/* list elements strictly increasing */
#define CFG_F_OMIT_ZERO	 0x80u	/* cfg_to_json leaves the key out while it is 0 */
#define CFG_F_NONEMPTY	 0x100u /* strings: not ""; lists: at least one element */

struct cfg_enum_name {
	const char *name;
	int value;	    /* several names may share a value (aliases); the first is printed */
	const char *refuse; /* non-NULL: the name is known but refused, with this explanation */
};

struct cfg_key {
	const char *name; /* NULL ends a table */
	enum cfg_kind kind;
	size_t off;
	size_t off2;
	unsigned flags;
	double min; /* numbers, and elements of arrays and lists */
	double max;
	int len; /* CFG_K_*_ARRAY: exact length */
	const struct cfg_enum_name *names;
	const struct cfg_key *sub;
	/* NULL: always used. Otherwise false means the current choices ignore this key: a value
	 * given for it is a warning ("ignored: <only>") and cfg_to_json leaves it out. */
	bool (*applies)(const struct cfg *c);
	const char *only;
};

/* The root table (top-level keys of a config). */
extern const struct cfg_key cfg_schema[];

/* One config being parsed. */
struct cfg_ctx {
	struct cfg *c;
	json_t *root;	  /* the document after overrides */
	const char *name; /* the config's name in messages */
	char *dir;	  /* absolute directory relative input paths resolve against */
	int noverrides;
	char *const *overrides;
	struct dp_error *err; /* where cfg_fail writes; may be NULL */
	int launch;	      /* cfg_load_launch: model and data may be absent */
};

/* Messages (config_msg.c). Append s (at most max bytes) to out with control characters
 * escaped, and quotes and backslashes too when quoted; cfg_escape_into: quoted. */
void cfg_escape_text(char *out, size_t outlen, const char *s, size_t max, int quoted);
void cfg_escape_into(char *out, size_t outlen, const char *s, size_t max);
/* "got ..." text for a JSON value: an object, an array of 3 values, "text", 32.0. */
void cfg_describe(const json_t *v, char *buf, size_t len);
/* The last override that set path or a value containing it; -1 when the file did. */
int cfg_override_for(const struct cfg_ctx *x, const char *path);
/* cfg_fail naming override ov (-1: the one that set path, if any); returns -1. */
int cfg_fail_override(struct cfg_ctx *x, int ov, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "NAME: out of memory"; returns -1. */
int cfg_oom(struct cfg_ctx *x);
/* Record an error "NAME: PATH: message" (PATH may be NULL or ""); returns -1. */
int cfg_fail(struct cfg_ctx *x, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Append a warning "PATH: message" to c->warnings; returns 0, or -1 when out of memory. */
int cfg_warn(struct cfg_ctx *x, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The value at a dotted path of the document ("optimizer.momentum"), or NULL. */
json_t *cfg_json_at(json_t *root, const char *path);
/* path made absolute against x->dir and lexically cleaned; NULL when out of memory. */
char *cfg_resolve_path(const struct cfg_ctx *x, const char *path);
/* d as a user would write it, exactly: 300, 0.1, 1e-08. */
void cfg_format_number(double d, char *buf, size_t len);
/* "a", "a.b": parent path joined with key (cut at CFG_JSON_PATH_MAX). */
void cfg_join_path(char *out, const char *parent, const char *key);

/* Schema semantics (config_schema.c). */
int cfg_set_defaults(struct cfg *c); /* -1 when out of memory */
int cfg_check(struct cfg_ctx *x);    /* defaults that depend on other keys, cross-field checks */
const struct cfg_enum_name *cfg_enum_lookup(const struct cfg_enum_name *names, const char *s);
const char *cfg_enum_canonical(const struct cfg_enum_name *names, int value);

/* Per-field operations (config_fields.c). */
void cfg_field_free(const struct cfg_key *k, void *base);
int cfg_field_equal(const struct cfg_key *k, const void *a, const void *b);
int cfg_field_copy(const struct cfg_key *k, void *dst, const void *src); /* -1: OOM */

/* Typed access to a field at base + offset. */
#define CFG_AT(type, base, off)	 ((type *)(void *)((char *)(base) + (off)))
#define CFG_CAT(type, base, off) ((const type *)(const void *)((const char *)(base) + (off)))

#endif
