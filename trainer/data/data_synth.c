/* data_synth.c — the synthetic dataset for throughput runs: sample i is generated on demand
 * from (seed, i) with splitmix64, so a million ImageNet-size images cost no memory and every
 * rank and worker sees the same bytes. Owns only that generator. */
#include "common/error.h"
#include "trainer/data/data.h"
#include "trainer/data/mix.h"

#include <stdio.h>
#include <string.h>

/* Sample i's key; its label is drawn from the key, its pixels from the counter stream
 * mix64(key + k * GOLDEN), k = 1, 2, ... (splitmix64 seeded with the key). */
static int synth_get(const struct data_set *ds, size_t i, uint8_t *scratch, const uint8_t **pixels,
		     int *label, struct dp_error *err)
{
	uint64_t key = mix64(mix64(ds->seed ^ 0x73796e7468657469ull) ^ (uint64_t)i);
	uint64_t state = key;
	unsigned base;
	size_t p = 0;

	(void)err;
	*label = (int)(key % (uint64_t)ds->num_classes);
	base = (unsigned)((uint64_t)*label * 128 / (uint64_t)ds->num_classes);
	while (p < ds->image_bytes) {
		/* 8 pixels a draw, low byte first; 127 + 127 cannot carry into the next byte */
		uint64_t v =
		    (mix64(state += GOLDEN) & 0x7f7f7f7f7f7f7f7full) + base * 0x0101010101010101ull;
		for (int b = 0; b < 8 && p < ds->image_bytes; b++, p++, v >>= 8)
			scratch[p] = (uint8_t)v;
	}
	*pixels = scratch;
	return 0;
}

static const struct data_ops synth_ops = {.get = synth_get};

int data_synthetic(struct data_set *ds, size_t count, int channels, int height, int width,
		   int num_classes, uint64_t seed, struct dp_error *err)
{
	memset(ds, 0, sizeof(*ds));
	snprintf(ds->name, sizeof(ds->name), "synthetic %zu x %dx%dx%d, %d classes, seed %llu",
		 count, channels, height, width, num_classes, (unsigned long long)seed);
	if (count == 0 || channels <= 0 || height <= 0 || width <= 0 || num_classes <= 0) {
		errprintf(err,
			  "%s: count, channels, height, width and classes must all be positive",
			  ds->name);
		return -1;
	}
	if (height > DATA_MAX_SIDE || width > DATA_MAX_SIDE || channels > 4096 ||
	    num_classes > 1 << 24) {
		errprintf(err,
			  "%s: implausible size (at most %u pixels a side, 4096 channels, 2^24 "
			  "classes)",
			  ds->name, DATA_MAX_SIDE);
		return -1;
	}
	ds->ops = &synth_ops;
	ds->kind = "synthetic";
	ds->count = count;
	ds->channels = channels;
	ds->height = height;
	ds->width = width;
	ds->num_classes = num_classes;
	ds->image_bytes = (size_t)channels * height * width;
	ds->seed = seed;
	return 0;
}
