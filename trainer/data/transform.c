/* transform.c — RandomCrop + RandomHorizontalFlip + ToTensor/Normalize in one pass over the
 * output, with the counter-based draws transform.h documents. Owns only pixel arithmetic. */
#include "trainer/data/transform.h"
#include "trainer/data/mix.h"
#include "common/error.h"

#include <stdio.h>
#include <string.h>

int tf_init(struct tf *t, const struct tf_spec *spec, int channels, int height, int width,
	    struct dp_error *err)
{
	bool any_std = false;

	memset(t, 0, sizeof(*t));
	t->spec = *spec;
	t->channels = channels;
	t->in_h = height;
	t->in_w = width;
	if (channels < 1 || channels > TF_MAX_CHANNELS || height < 1 || width < 1) {
		errprintf(err, "transform: %dx%dx%d images are not supported (1..%d channels)",
			  channels, height, width, TF_MAX_CHANNELS);
		return -1;
	}
	if (spec->crop < 0 || spec->pad < 0) {
		errprintf(err, "transform: crop %d and padding %d must not be negative", spec->crop,
			  spec->pad);
		return -1;
	}
	if (spec->pad > 0 && spec->crop == 0) {
		errprintf(err,
			  "transform: padding %d needs a crop size (RandomCrop(size, padding))",
			  spec->pad);
		return -1;
	}
	if (spec->crop > 0 &&
	    (spec->crop > height + 2 * spec->pad || spec->crop > width + 2 * spec->pad)) {
		errprintf(err,
			  "transform: crop %d is larger than the %dx%d images padded by %d (%dx%d)",
			  spec->crop, height, width, spec->pad, height + 2 * spec->pad,
			  width + 2 * spec->pad);
		return -1;
	}
	if (!(spec->flip_p >= 0 && spec->flip_p <= 1)) {
		errprintf(err, "transform: flip probability %g is outside [0, 1]", spec->flip_p);
		return -1;
	}
	for (int c = 0; c < channels; c++)
		any_std |= spec->std[c] != 0;
	for (int c = 0; c < channels; c++) {
		float mean = any_std ? spec->mean[c] : 0.0f, std = any_std ? spec->std[c] : 1.0f;

		if (!(std > 0)) {
			errprintf(err, "transform: std[%d] is %g; every channel's std must be > 0",
				  c, (double)std);
			return -1;
		}
		for (int v = 0; v < 256; v++)
			t->lut[c][v] = ((float)v / 255.0f - mean) / std;
	}
	t->out_h = spec->crop ? spec->crop : height;
	t->out_w = spec->crop ? spec->crop : width;
	return 0;
}

size_t tf_out_elems(const struct tf *t)
{
	return (size_t)t->channels * t->out_h * t->out_w;
}

void tf_draw(const struct tf *t, int64_t epoch, size_t index, struct tf_draw *d)
{
	uint64_t key = mix64(mix64(mix64(t->spec.seed ^ 0x7472616e73666f72ull) ^ (uint64_t)epoch) ^
			     (uint64_t)index);

	d->top = d->left = t->spec.pad;
	if (t->spec.crop) {
		d->top = (int)below(mix64(key + 1 * GOLDEN),
				    (uint64_t)(t->in_h + 2 * t->spec.pad - t->spec.crop + 1));
		d->left = (int)below(mix64(key + 2 * GOLDEN),
				     (uint64_t)(t->in_w + 2 * t->spec.pad - t->spec.crop + 1));
	}
	d->flip = (double)(mix64(key + 3 * GOLDEN) >> 11) * 0x1.0p-53 < t->spec.flip_p;
}

void tf_apply_drawn(const struct tf *t, const struct tf_draw *d, const uint8_t *src, float *dst)
{
	/* Output (y, x) reads padded (top + y, left + x'), x' = flip ? out_w - 1 - x : x; the
	 * padded image is the source shifted by pad, zero (before normalising) outside it. Per
	 * row, the output columns that land inside the source are [x0, x1). */
	int oy = d->top - t->spec.pad, ox = d->left - t->spec.pad, w = t->out_w;
	int lo = -ox > 0 ? -ox : 0, hi = t->in_w - ox < w ? t->in_w - ox : w; /* unflipped */
	int x0 = d->flip ? w - hi : lo, x1 = d->flip ? w - lo : hi;

	for (int c = 0; c < t->channels; c++) {
		const uint8_t *plane = src + (size_t)c * t->in_h * t->in_w;
		const float *lut = t->lut[c];

		for (int y = 0; y < t->out_h; y++) {
			int sy = oy + y;
			float *row = dst + ((size_t)c * t->out_h + y) * w;
			const uint8_t *in;

			if (sy < 0 || sy >= t->in_h || x0 >= x1) {
				for (int x = 0; x < w; x++)
					row[x] = lut[0];
				continue;
			}
			in = plane + (size_t)sy * t->in_w + ox;
			for (int x = 0; x < x0; x++)
				row[x] = lut[0];
			if (d->flip)
				for (int x = x0; x < x1; x++)
					row[x] = lut[in[w - 1 - x]];
			else
				for (int x = x0; x < x1; x++)
					row[x] = lut[in[x]];
			for (int x = x1; x < w; x++)
				row[x] = lut[0];
		}
	}
}

void tf_apply(const struct tf *t, int64_t epoch, size_t index, const uint8_t *src, float *dst)
{
	struct tf_draw d;

	tf_draw(t, epoch, index, &d);
	tf_apply_drawn(t, &d, src, dst);
}
