/* image.h — an encoded image (JPEG or PNG, any size) to one float32 CHW (or uint8 HWC)
 * training sample, with torchvision's geometry and arithmetic:
 *   train: RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(p) + ToTensor +
 *          Normalize(mean, std)
 *   eval:  Resize(resize) (shorter side) + CenterCrop(size) + ToTensor + Normalize
 * Resampling is PIL's bilinear filter with its support widened by the scale factor (what
 * torchvision's transforms run on PIL images: antialiased), computed in PIL's 22-bit fixed
 * point, horizontal pass first, for the output pixels only: without DCT scaling the result
 * is PIL's to the bit. Decoding covers only the rows and columns the output needs (plus one
 * iMCU on each side, so chroma upsampling sees what a full decode sees), and for training
 * crops libjpeg-turbo's DCT-domain scaling (1/2, 1/4, 1/8) decodes no larger than the crop
 * needs (never smaller than the output); PNGs go through libpng's classic API, read as PIL
 * reads them (16-bit samples' high byte, gamma chunks ignored, alpha and transparency
 * dropped; a 16-bit grey PNG, which torchvision saturates, by its high byte too).
 * Grayscale, CMYK and palette images come out as RGB; with channels 1, PIL's convert("L") of
 * the RGB pixels, before the resampling.
 *
 * Randomness is a pure function of (seed, epoch, dataset index) and the image's size, as in
 * transform.h:
 *   key = mix(mix(mix(seed ^ 0x696d616765746672) ^ epoch) ^ index), draw(k) = mix(key + (k+1)G)
 *   u(k) = (draw(k) >> 11) * 2^-53, in [0, 1)
 *   RandomResizedCrop.get_params on a W x H image, area = W*H, for attempt a = 0..9:
 *     target = area * (scale[0] + u(4a) * (scale[1] - scale[0]))
 *     aspect = exp(log(ratio[0]) + u(4a+1) * (log(ratio[1]) - log(ratio[0])))
 *     w = round(sqrt(target * aspect)), h = round(sqrt(target / aspect))  (round half even)
 *     if 0 < w <= W and 0 < h <= H: top = below(draw(4a+2), H - h + 1),
 *                                   left = below(draw(4a+3), W - w + 1); done
 *   else torchvision's fallback: the whole image cut to the ratio range, centred
 *     (top = (H - h) / 2, left = (W - w) / 2, integer division).
 *   flip = u(40) < p
 * The eval geometry has no randomness: Resize's shorter side s -> `resize`, the longer
 * L -> floor(resize * L / s) (torchvision's rule), then CenterCrop: top = round((h' - size) /
 * 2), as torchvision computes it; the crop is a window of that resized image. */
#ifndef DPTRAIN_IMAGE_H
#define DPTRAIN_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/error.h"

#define IMG_MAX_CHANNELS 3
/* Images with more pixels than this after DCT scaling are refused (a 20000x20000 JPEG
 * decodes at 1/8 scale well below it; a PNG of that size does not). */
#define IMG_MAX_DECODED_PIXELS (64u << 20)

enum imtf_mode {
	IMTF_TRAIN, /* RandomResizedCrop + flip */
	IMTF_EVAL,  /* Resize + CenterCrop */
};

struct imtf_spec {
	enum imtf_mode mode;
	int channels;	 /* 3 (RGB) or 1 (gray) */
	int size;	 /* output side (square), > 0 */
	int resize;	 /* eval: the shorter side before the centre crop (>= size) */
	double scale[2]; /* train: area fraction range, 0 < scale[0] <= scale[1] <= 1 */
	double ratio[2]; /* train: aspect ratio range, 0 < ratio[0] <= ratio[1] */
	double flip_p;	 /* train: horizontal flip probability */
	float mean[IMG_MAX_CHANNELS], std[IMG_MAX_CHANNELS]; /* all std 0: no Normalize */
	bool dct_scaling; /* train: decode at the smallest libjpeg scale that covers the crop
			   * (eval always decodes at full size) */
	uint64_t seed;
};

struct imtf {
	struct imtf_spec spec;
	float lut[IMG_MAX_CHANNELS][256];		     /* ((float)v / 255 - mean) / std */
	float mean[IMG_MAX_CHANNELS], std[IMG_MAX_CHANNELS]; /* what lut uses (0 and 1: none) */
};

/* Where a sample's pixels come from, in the image's own full-size coordinates. */
struct imtf_crop {
	int top, left, h, w; /* the source window (eval: of the image resized to `resize`) */
	bool flip;
	/* eval: the resized image's size (the crop is a window of it); train: 0 */
	int rh, rw;
};

/* Per-thread buffers, grown as needed; zero-initialise, imtf_scratch_free when done. */
struct imtf_scratch {
	uint8_t *dec; /* decoded pixels, HWC */
	size_t dec_cap;
	uint8_t *tmp; /* the horizontal pass */
	size_t tmp_cap;
	int32_t *coef; /* filter coefficients */
	size_t coef_cap;
	uint8_t *out; /* the resampled output, HWC */
	size_t out_cap;
};

/* -1 with err for sizes out of range, std <= 0, p outside [0, 1], bad scale/ratio ranges. */
int imtf_init(struct imtf *t, const struct imtf_spec *spec, struct dp_error *err);

/* Floats (or bytes) per output sample: channels * size * size. */
size_t imtf_out_elems(const struct imtf *t);

/* The geometry for one sample of a W x H image (exposed for tests and dptrain-data). */
void imtf_draw(const struct imtf *t, int64_t epoch, size_t index, int W, int H,
	       struct imtf_crop *c);

/* An image's size and kind without decoding it. *kind: "JPEG" or "PNG". -1 with err when it
 * is neither or its header is damaged. */
int img_probe(const uint8_t *buf, size_t len, int *W, int *H, const char **kind,
	      struct dp_error *err);

/* Decode, crop, resample, flip and normalise one sample into dst (float32 CHW). -1 with err
 * for an image that cannot be decoded (the message says why: truncated, not a JPEG or PNG,
 * too large, ...); dst is then unspecified. A JPEG whose data is cut short but whose header
 * is whole decodes as libjpeg does (the missing part grey), sets *warning and puts libjpeg's
 * warning in err (0 is returned). */
int imtf_apply(const struct imtf *t, int64_t epoch, size_t index, const uint8_t *buf, size_t len,
	       struct imtf_scratch *s, float *dst, bool *warning, struct dp_error *err);

/* The same to uint8 HWC (channels interleaved): cropped, resampled and flipped, not
 * normalised (for a device that normalises on its side). */
int imtf_apply_u8(const struct imtf *t, int64_t epoch, size_t index, const uint8_t *buf, size_t len,
		  struct imtf_scratch *s, uint8_t *dst, bool *warning, struct dp_error *err);

void imtf_scratch_free(struct imtf_scratch *s);

#endif
