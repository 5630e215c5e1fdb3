/* env.h — the environment contract's names (common/env.def): ENV_NAME is the string "NAME" for
 * every variable declared there, so that a name is spelled once and a typo is a compile error.
 * What each variable means, who sets and who reads it: env.def, and the man pages it names. */
#ifndef DPTRAIN_ENV_H
#define DPTRAIN_ENV_H

#include <string.h>

#define DP_ENV(name, set_by, read_by, pages) static const char ENV_##name[] = #name;
#include "common/env.def"
#undef DP_ENV

/* 1 if entry ("NAME=VALUE", as in environ) is the variable name's. */
static inline int dp_env_is(const char *entry, const char *name)
{
	size_t n = strlen(name);
	return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

#endif
