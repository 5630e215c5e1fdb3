/* mix.h — private to trainer/data: the counter-based randomness every augmentation and the
 * synthetic set draw from (transform.h documents it): splitmix64's finaliser, its increment,
 * and an unbiased-enough integer below m from 64 random bits. */
#ifndef DPTRAIN_DATA_MIX_H
#define DPTRAIN_DATA_MIX_H

#include <stdint.h>

#define GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* (u * m) >> 64: an integer in [0, m) */
static inline uint64_t below(uint64_t u, uint64_t m)
{
	return (uint64_t)(((unsigned __int128)u * m) >> 64);
}

#endif
