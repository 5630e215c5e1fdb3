/* transform.h — per-sample augmentation and conversion with torchvision semantics:
 * RandomCrop(size, padding) (zero padding), RandomHorizontalFlip(p), ToTensor + Normalize
 * (x / 255, then (x - mean[c]) / std[c], float32), from uint8 CHW to float32 CHW.
 * Owns only pixel arithmetic; which sample, epoch and seed come from the caller.
 *
 * Randomness is a pure function of (seed, epoch, sample index), never of a thread, worker
 * count or world size, so N ranks see what 1 rank sees and a resumed run is bit-exact:
 *   mix(z)  = splitmix64's finaliser: z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
 *             z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31
 *   key     = mix(mix(mix(seed ^ 0x7472616e73666f72) ^ epoch) ^ index)
 *   draw(k) = mix(key + (k + 1) * 0x9e3779b97f4a7c15)   (splitmix64 from key)
 *   below(u, m) = (u * m) >> 64 (128-bit product): an integer in [0, m)
 *   crop top = below(draw(0), H + 2*pad - size + 1), left = below(draw(1), W + 2*pad - size + 1)
 *   flip     = (draw(2) >> 11) * 2^-53 < p
 * `index` is the dataset index of the sample (so DistributedSampler's padded duplicates get
 * the same augmentation as the original within an epoch). The draws differ from torch's
 * global RNG by design; the geometry and arithmetic are torchvision's. */
#ifndef DPTRAIN_TRANSFORM_H
#define DPTRAIN_TRANSFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/error.h"

#define TF_MAX_CHANNELS 4

/* What the user asks for. Zero values mean "off": crop 0 keeps the input size (pad must then
 * be 0), flip_p 0 never flips. mean/std default to 0/1 (plain ToTensor) when std[c] is 0 for
 * every channel. */
struct tf_spec {
	int crop;      /* RandomCrop output side (square) */
	int pad;       /* zero padding on every side before cropping */
	double flip_p; /* RandomHorizontalFlip probability */
	float mean[TF_MAX_CHANNELS];
	float std[TF_MAX_CHANNELS];
	uint64_t seed;
};

/* A spec checked against an input size, with a lookup table per channel. */
struct tf {
	struct tf_spec spec;
	int channels, in_h, in_w;
	int out_h, out_w;
	float lut[TF_MAX_CHANNELS][256]; /* ((float)v / 255 - mean) / std, torch's float32 ops */
};

/* Check spec against C x H x W inputs: -1 with err for a crop larger than the padded image,
 * padding without a crop, std 0, too many channels, p outside [0, 1]. */
int tf_init(struct tf *t, const struct tf_spec *spec, int channels, int height, int width,
	    struct dp_error *err);

/* Floats per output sample: channels * out_h * out_w. */
size_t tf_out_elems(const struct tf *t);

/* The random choices for one sample (exposed for tests). */
struct tf_draw {
	int top, left; /* in the padded image */
	bool flip;
};
void tf_draw(const struct tf *t, int64_t epoch, size_t index, struct tf_draw *d);

/* Augment and convert one sample: src is C x in_h x in_w uint8, dst C x out_h x out_w. */
void tf_apply(const struct tf *t, int64_t epoch, size_t index, const uint8_t *src, float *dst);

/* The same with the choices given (what tf_apply does after tf_draw). */
void tf_apply_drawn(const struct tf *t, const struct tf_draw *d, const uint8_t *src, float *dst);

#endif
