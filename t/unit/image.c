/* image.c — unit tests for trainer/data/image.c on images made here (libpng writes lossless
 * PNGs, libjpeg JPEGs): exact identities (a same-size resize, a whole-image crop, a mirror,
 * a constant colour at any scale), torchvision's Resize/CenterCrop geometry, the
 * RandomResizedCrop draws (deterministic, keyed by seed/epoch/index, within the ranges, the
 * fallback), and the refusals: empty, not an image, a cut header, a cut PNG, a JPEG whose
 * header claims 20000x20000 (refused at full size, decoded at 1/8 with a warning). The
 * comparison with torchvision itself is t/t0520-image.t. */
#include "common/error.h"
#include "trainer/data/image.h"
#include "t/lib/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

static uint8_t *make_png(const uint8_t *px, int w, int h, int c, size_t *len)
{
	png_image im = {.version = PNG_IMAGE_VERSION,
			.width = (png_uint_32)w,
			.height = (png_uint_32)h,
			.format = c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY};
	png_alloc_size_t n = 0;
	uint8_t *buf;

	if (!png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL))
		bail_out("png size: %s", im.message);
	buf = malloc(n);
	if (!buf || !png_image_write_to_memory(&im, buf, &n, 0, px, 0, NULL))
		bail_out("png write: %s", im.message);
	*len = n;
	return buf;
}

static uint8_t *make_jpeg(const uint8_t *px, int w, int h, size_t *len)
{
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr e;
	unsigned char *out = NULL;
	unsigned long n = 0;

	c.err = jpeg_std_error(&e);
	jpeg_create_compress(&c);
	jpeg_mem_dest(&c, &out, &n);
	c.image_width = (JDIMENSION)w;
	c.image_height = (JDIMENSION)h;
	c.input_components = 3;
	c.in_color_space = JCS_RGB;
	jpeg_set_defaults(&c);
	jpeg_set_quality(&c, 95, TRUE);
	jpeg_start_compress(&c, TRUE);
	for (int y = 0; y < h; y++) {
		JSAMPROW row = (JSAMPROW)(px + (size_t)y * w * 3);
		jpeg_write_scanlines(&c, &row, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	*len = n;
	return out;
}

static struct imtf make(enum imtf_mode mode, int size, int resize, double s0, double s1, double r0,
			double r1, double flip)
{
	struct imtf_spec s = {.mode = mode,
			      .channels = 3,
			      .size = size,
			      .resize = resize,
			      .scale = {s0, s1},
			      .ratio = {r0, r1},
			      .flip_p = flip,
			      .seed = 7};
	struct imtf t;
	struct dp_error err;

	if (imtf_init(&t, &s, &err) != 0)
		bail_out("imtf_init: %s", err.text);
	return t;
}

static uint8_t *pattern(int w, int h)
{
	uint8_t *p = malloc((size_t)w * h * 3);

	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			for (int c = 0; c < 3; c++)
				p[((size_t)y * w + x) * 3 + c] =
				    (uint8_t)((x * 7 + y * 13 + c * 50) & 255);
	return p;
}

static void test_identities(void)
{
	uint8_t *px = pattern(32, 32), out[32 * 32 * 3], mirror[32 * 32 * 3];
	size_t len;
	uint8_t *png = make_png(px, 32, 32, 3, &len);
	struct imtf_scratch s = {0};
	struct dp_error err;
	bool warn;
	struct imtf t = make(IMTF_EVAL, 32, 32, 0, 0, 0, 0, 0);

	ok(imtf_apply_u8(&t, 0, 0, png, len, &s, out, &warn, &err) == 0 &&
	       memcmp(out, px, sizeof(out)) == 0 && !warn,
	   "eval Resize(32) + CenterCrop(32) of a 32x32 PNG gives its pixels back");
	t = make(IMTF_TRAIN, 32, 0, 1, 1, 1, 1, 0);
	ok(imtf_apply_u8(&t, 3, 9, png, len, &s, out, &warn, &err) == 0 &&
	       memcmp(out, px, sizeof(out)) == 0,
	   "train crop of scale 1 and ratio 1 at the output size: the image itself");
	t = make(IMTF_TRAIN, 32, 0, 1, 1, 1, 1, 1);
	for (int y = 0; y < 32; y++)
		for (int x = 0; x < 32; x++)
			memcpy(mirror + ((size_t)y * 32 + x) * 3,
			       px + ((size_t)y * 32 + 31 - x) * 3, 3);
	ok(imtf_apply_u8(&t, 3, 9, png, len, &s, out, &warn, &err) == 0 &&
	       memcmp(out, mirror, sizeof(out)) == 0,
	   "flip probability 1: the mirror image");
	free(png);

	/* A constant colour stays that colour at any scale, both ways. */
	uint8_t one[3] = {200, 17, 90}, big[64 * 48 * 3], *o224 = malloc(224 * 224 * 3);
	int bad = 0;
	png = make_png(one, 1, 1, 3, &len);
	t = make(IMTF_TRAIN, 224, 0, 0.08, 1, 0.75, 4.0 / 3, 0.5);
	ok(imtf_apply_u8(&t, 0, 0, png, len, &s, o224, &warn, &err) == 0, "a 1x1 PNG decodes");
	for (int i = 0; i < 224 * 224; i++)
		bad += memcmp(o224 + 3 * i, one, 3) != 0;
	is_int(bad, 0, "a 1x1 image blown up to 224x224 is that pixel everywhere");
	free(png);
	for (int i = 0; i < 64 * 48; i++)
		memcpy(big + 3 * i, one, 3);
	png = make_png(big, 64, 48, 3, &len);
	t = make(IMTF_TRAIN, 20, 0, 0.08, 1, 0.75, 4.0 / 3, 0.5);
	bad = 0;
	for (int idx = 0; idx < 20; idx++) {
		if (imtf_apply_u8(&t, 0, (size_t)idx, png, len, &s, o224, &warn, &err) != 0)
			bad++;
		for (int i = 0; i < 20 * 20; i++)
			bad += memcmp(o224 + 3 * i, one, 3) != 0;
	}
	is_int(bad, 0,
	       "twenty random crops of a constant 64x48 image shrunk to 20x20 stay constant");
	free(png);
	free(o224);
	free(px);
	imtf_scratch_free(&s);
}

static void test_geometry(void)
{
	struct imtf t = make(IMTF_EVAL, 224, 256, 0, 0, 0, 0, 0);
	struct imtf_crop c;
	int out_of_range = 0, fallbacks = 0, differ = 0;

	imtf_draw(&t, 0, 0, 500, 375, &c);
	ok(c.rw == 341 && c.rh == 256 && c.top == 16 && c.left == 58 && c.h == 224 && c.w == 224,
	   "Resize(256) of 500x375 is 341x256 (floor), CenterCrop(224) at 16, 58 (round half "
	   "even of 58.5): got %dx%d at %d, %d",
	   c.rw, c.rh, c.top, c.left);
	imtf_draw(&t, 0, 0, 333, 500, &c);
	ok(c.rw == 256 && c.rh == 384 && c.top == 80 && c.left == 16,
	   "portrait 333x500: 256x384, crop at 80, 16: got %dx%d at %d, %d", c.rw, c.rh, c.top,
	   c.left);

	t = make(IMTF_TRAIN, 224, 0, 0.08, 1, 0.75, 4.0 / 3, 0.5);
	for (int i = 0; i < 5000; i++) {
		struct imtf_crop a, b;
		double area, ratio;

		imtf_draw(&t, 1, (size_t)i, 500, 375, &a);
		imtf_draw(&t, 1, (size_t)i, 500, 375, &b);
		out_of_range += memcmp(&a, &b, sizeof(a)) != 0;
		area = (double)a.w * a.h / (500.0 * 375);
		ratio = (double)a.w / a.h;
		if (a.top < 0 || a.left < 0 || a.top + a.h > 375 || a.left + a.w > 500 ||
		    area < 0.075 || area > 1.0 || ratio < 0.74 || ratio > 1.35)
			out_of_range++;
		imtf_draw(&t, 2, (size_t)i, 500, 375, &b);
		differ += memcmp(&a, &b, sizeof(a)) != 0;
	}
	is_int(out_of_range, 0,
	       "5000 crops of 500x375: repeatable, inside the image, the area "
	       "and aspect ranges");
	ok(differ > 4900, "another epoch draws other crops (%d of 5000 differ)", differ);
	/* 1000x100 is 10:1: a crop of ratio <= 4/3 covering 8% fits only now and then; the fallback
	 * is centred 133x100 (round(100 * 4/3)) */
	for (int i = 0; i < 2000; i++) {
		imtf_draw(&t, 0, (size_t)i, 1000, 100, &c);
		fallbacks += c.w == 133 && c.h == 100 && c.left == 433 && c.top == 0;
	}
	ok(fallbacks > 0 && fallbacks < 2000,
	   "a 10:1 image: some draws fall back to the centred 133x100 (%d of 2000)", fallbacks);
}

static void test_refusals(void)
{
	uint8_t *px = pattern(64, 64), out[16 * 16 * 3];
	size_t len;
	uint8_t *jpg = make_jpeg(px, 64, 64, &len), *png;
	struct imtf t = make(IMTF_EVAL, 16, 16, 0, 0, 0, 0, 0);
	struct imtf_scratch s = {0};
	struct dp_error err;
	bool warn;
	int W, H;
	const char *kind;

	ok(img_probe(jpg, len, &W, &H, &kind, &err) == 0 && W == 64 && H == 64 &&
	       strcmp(kind, "JPEG") == 0,
	   "img_probe: a 64x64 JPEG");
	ok(imtf_apply_u8(&t, 0, 0, jpg, len, &s, out, &warn, &err) == 0 && !warn,
	   "it decodes without a warning");
	ok(imtf_apply_u8(&t, 0, 0, jpg, len / 2, &s, out, &warn, &err) == 0 && warn,
	   "cut in half, it still decodes, with a warning");
	like(err.text, "Premature end", "the warning is libjpeg's: %s", err.text);
	ok(imtf_apply_u8(&t, 0, 0, jpg, 40, &s, out, &warn, &err) != 0,
	   "cut in its header: refused");
	like(err.text, "JPEG", "naming the format: %s", err.text);
	ok(imtf_apply_u8(&t, 0, 0, jpg, 0, &s, out, &warn, &err) != 0, "empty: refused");
	like(err.text, "empty", "saying so: %s", err.text);
	ok(imtf_apply_u8(&t, 0, 0, (const uint8_t *)"GIF89a....", 10, &s, out, &warn, &err) != 0,
	   "a GIF: refused");
	like(err.text, "neither a JPEG nor a PNG (starts with 47 49 46 38)", "%s", err.text);

	/* the frame header's size: SOF0 (ff c0), length, precision, then height and width */
	for (size_t i = 2; i + 8 < len; i++)
		if (jpg[i] == 0xff && jpg[i + 1] == 0xc0) {
			jpg[i + 5] = 20000 >> 8, jpg[i + 6] = 20000 & 255;
			jpg[i + 7] = 20000 >> 8, jpg[i + 8] = 20000 & 255;
			break;
		}
	ok(img_probe(jpg, len, &W, &H, &kind, &err) == 0 && W == 20000 && H == 20000,
	   "a header patched to 20000x20000");
	ok(imtf_apply_u8(&t, 0, 0, jpg, len, &s, out, &warn, &err) != 0,
	   "at full size (eval) it is refused before anything is allocated");
	like(err.text, "too large", "%s", err.text);
	t = make(IMTF_TRAIN, 16, 0, 0.08, 1, 0.75, 4.0 / 3, 0.5);
	t.spec.dct_scaling = true;
	ok(imtf_apply_u8(&t, 0, 0, jpg, len, &s, out, &warn, &err) == 0 && warn,
	   "a training crop decodes it at 1/8 scale (its data is short: a warning)");

	png = make_png(px, 64, 64, 3, &len);
	ok(imtf_apply_u8(&t, 0, 0, png, len - 20, &s, out, &warn, &err) != 0,
	   "a PNG cut short: refused");
	like(err.text, "PNG", "naming the format: %s", err.text);
	ok(imtf_apply_u8(&t, 0, 0, png, 30, &s, out, &warn, &err) != 0, "a PNG cut in its header");
	free(png);
	free(jpg);
	free(px);
	imtf_scratch_free(&s);
}

static void test_spec(void)
{
	struct imtf_spec s = {.mode = IMTF_EVAL, .channels = 3, .size = 224, .resize = 200};
	struct imtf t;
	struct dp_error err;

	ok(imtf_init(&t, &s, &err) != 0, "resize below the crop size: refused");
	like(err.text, "resize 200 must be at least the crop size 224", "%s", err.text);
	s = (struct imtf_spec){.mode = IMTF_TRAIN,
			       .channels = 3,
			       .size = 224,
			       .scale = {0.5, 0.1},
			       .ratio = {0.75, 1.33}};
	ok(imtf_init(&t, &s, &err) != 0, "scale min > max: refused");
	s.scale[1] = 1;
	s.channels = 2;
	ok(imtf_init(&t, &s, &err) != 0, "two channels: refused");
	s.channels = 3;
	s.std[0] = 1, s.std[1] = 0, s.std[2] = 1;
	ok(imtf_init(&t, &s, &err) != 0, "std 0 for one channel: refused");
	s.std[1] = 0.5;
	s.mean[1] = 0.25;
	ok(imtf_init(&t, &s, &err) == 0 && t.lut[1][255] == (1.0f - 0.25f) / 0.5f,
	   "the lookup table is ((v / 255) - mean) / std in float32");
}

int main(void)
{
	plan(34);
	test_identities();
	test_geometry();
	test_refusals();
	test_spec();
	return done_testing();
}
