/* sampler.c — DistributedSampler semantics and torch's CPU randperm (mt19937 + Fisher-Yates),
 * bit-identical to PyTorch 1.13 (t/t0500-data.t checks it against python3-torch). Owns only
 * index arithmetic; sampler.h states the semantics. */
#include "trainer/data/sampler.h"
#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mt19937 as torch's at::mt19937 (and std::mt19937): the state is initialised from the low
 * 32 bits of the seed; each draw is one tempered 32-bit output. */
#define MT_N 624
#define MT_M 397

struct mt19937 {
	uint32_t s[MT_N];
	int i;
};

static void mt_seed(struct mt19937 *mt, uint32_t seed)
{
	mt->s[0] = seed;
	for (int j = 1; j < MT_N; j++)
		mt->s[j] = 1812433253u * (mt->s[j - 1] ^ (mt->s[j - 1] >> 30)) + (uint32_t)j;
	mt->i = MT_N;
}

static uint32_t mt_next(struct mt19937 *mt)
{
	uint32_t y;

	if (mt->i >= MT_N) {
		for (int j = 0; j < MT_N; j++) {
			y = (mt->s[j] & 0x80000000u) | (mt->s[(j + 1) % MT_N] & 0x7fffffffu);
			mt->s[j] =
			    mt->s[(j + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0);
		}
		mt->i = 0;
	}
	y = mt->s[mt->i++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

void sampler_randperm(uint64_t seed, size_t n, size_t *out)
{
	struct mt19937 mt;

	mt_seed(&mt, (uint32_t)seed);
	for (size_t i = 0; i < n; i++)
		out[i] = i;
	for (size_t i = 0; i + 1 < n; i++) {
		size_t z = mt_next(&mt) % (n - i);
		size_t t = out[i];
		out[i] = out[z + i];
		out[z + i] = t;
	}
}

static int check_args(size_t n, int num_replicas, int rank, struct dp_error *err)
{
	if (n == 0) {
		errprintf(err, "sampler: the dataset is empty");
		return -1;
	}
	if (num_replicas < 1) {
		errprintf(err, "sampler: num_replicas (world size) is %d; need >= 1", num_replicas);
		return -1;
	}
	if (rank < 0 || rank >= num_replicas) {
		errprintf(err, "sampler: rank %d is outside 0..%d (world size %d)", rank,
			  num_replicas - 1, num_replicas);
		return -1;
	}
	return 0;
}

int sampler_init(struct sampler *s, size_t n, int num_replicas, int rank, bool shuffle,
		 uint64_t seed, bool drop_last, struct dp_error *err)
{
	memset(s, 0, sizeof(*s));
	if (check_args(n, num_replicas, rank, err) != 0)
		return -1;
	s->mode = SAMPLER_TRAIN;
	s->n = n;
	s->num_replicas = num_replicas;
	s->rank = rank;
	s->shuffle = shuffle;
	s->seed = seed;
	s->drop_last = drop_last;
	if (shuffle) {
		s->perm = malloc(n * sizeof(*s->perm));
		if (!s->perm) {
			errprintf(err, "sampler: out of memory for a permutation of %zu samples",
				  n);
			return -1;
		}
	}
	sampler_set_epoch(s, 0);
	return 0;
}

int sampler_init_eval(struct sampler *s, size_t n, int num_replicas, int rank, struct dp_error *err)
{
	memset(s, 0, sizeof(*s));
	if (check_args(n, num_replicas, rank, err) != 0)
		return -1;
	s->mode = SAMPLER_EVAL;
	s->n = n;
	s->num_replicas = num_replicas;
	s->rank = rank;
	return 0;
}

void sampler_free(struct sampler *s)
{
	free(s->perm);
	memset(s, 0, sizeof(*s));
}

void sampler_set_epoch(struct sampler *s, int64_t epoch)
{
	s->epoch = epoch;
	s->start = 0;
	if (s->perm) /* python's seed + epoch, reduced mod 2^64 as manual_seed does */
		sampler_randperm(s->seed + (uint64_t)epoch, s->n, s->perm);
}

void sampler_set_start(struct sampler *s, size_t global_offset)
{
	s->start = global_offset;
}

void sampler_skip(struct sampler *s, size_t k)
{
	s->start += k * (size_t)s->num_replicas;
}

size_t sampler_eval_count(size_t n, int num_replicas, int rank)
{
	size_t w = (size_t)num_replicas, r = (size_t)rank;

	return r < n ? (n - r + w - 1) / w : 0;
}

size_t sampler_len(const struct sampler *s)
{
	size_t w = (size_t)s->num_replicas;

	if (s->mode == SAMPLER_EVAL)
		return s->start < s->n
			   ? sampler_eval_count(s->n - s->start, s->num_replicas, s->rank)
			   : 0;
	if (s->start >= s->n)
		return 0;
	return s->drop_last ? (s->n - s->start) / w : (s->n - s->start + w - 1) / w;
}

size_t sampler_index(const struct sampler *s, size_t j)
{
	size_t p = s->start + (size_t)s->rank + j * (size_t)s->num_replicas;

	if (s->mode == SAMPLER_EVAL)
		return p;
	p %= s->n;
	return s->perm ? s->perm[p] : p;
}

size_t sampler_offset_after(const struct sampler *s, size_t consumed)
{
	return s->start + consumed * (size_t)s->num_replicas;
}
