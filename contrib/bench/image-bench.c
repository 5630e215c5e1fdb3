/* image-bench.c — dptrain's side of the image pipeline benchmark (image-pipeline.sh runs it
 * beside image-torchvision.py): an image folder (data_load_imagefolder) through a
 * DistributedSampler-style sampler (1 rank, shuffled) and the loader with the train image
 * transform of trainer/data/image.h (RandomResizedCrop(224, scale 0.08..1, ratio 3/4..4/3),
 * horizontal flip p 0.5, ToTensor + ImageNet Normalize, libjpeg DCT scaling unless --no-dct):
 * N worker threads, batches of B, prefetch N + 1, the short last batch dropped. One warm-up
 * epoch, then E timed epochs; the batches are only counted. Touches nothing but stdout (and
 * the index cache with --cache DIR).
 *
 * Reported (one line, key=value, or --json): img/s, img/s per worker (img/s / N), CPU seconds
 * of the whole process over the timed epochs (getrusage: all threads) and img per CPU-second,
 * peak RSS (getrusage ru_maxrss: one process, its threads share it).
 *
 * --single: no loader, no threads: data_read + imtf_apply of every sample in sampler order on
 * the calling thread, E epochs after a warm-up one (for perf record: where one image's time
 * goes). It also times reading alone (data_read of every sample) and reports both.
 *
 *   make bench && build/bench/image-bench ROOT [-j N] [-e EPOCHS] [-b BATCH] [--no-dct]
 *       [--cache DIR] [--seed S] [--single] [--json]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "trainer/data/data.h"
#include "trainer/data/image.h"
#include "trainer/data/loader.h"
#include "trainer/data/sampler.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec * 1e-6;
}

static double peak_rss_mb(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

static void die(const char *what, const struct dp_error *err)
{
	fprintf(stderr, "image-bench: %s: %s\n", what, err->text);
	exit(1);
}

static void usage(void)
{
	fprintf(stderr, "usage: image-bench ROOT [-j WORKERS] [-e EPOCHS] [-b BATCH] [--no-dct] "
			"[--cache DIR] [--seed S] [--single] [--json]\n");
	exit(2);
}

/* One epoch through the loader: the images it handed out. */
static size_t loader_epoch(struct loader *l, int64_t epoch)
{
	struct dp_error err;
	struct loader_batch *b;
	size_t n = 0;
	int rc;

	if (loader_start_epoch(l, epoch, 0, &err) < 0)
		die("loader_start_epoch", &err);
	while ((rc = loader_next(l, &b, &err)) == 1) {
		n += (size_t)b->n;
		loader_release(l, b);
	}
	if (rc < 0)
		die("loader_next", &err);
	return n;
}

/* --single: one epoch of data_read + imtf_apply on this thread (apply false: reads only). */
static size_t single_epoch(const struct data_set *ds, struct sampler *s, const struct imtf *t,
			   int64_t epoch, bool apply, float *dst)
{
	static struct data_bytes bytes;
	static struct imtf_scratch scratch;
	struct dp_error err;
	size_t n = sampler_len(s);

	sampler_set_epoch(s, epoch);
	for (size_t j = 0; j < n; j++) {
		size_t i = sampler_index(s, j);
		bool warning = false;
		int label;

		if (data_read(ds, i, &bytes, &label, &err) < 0)
			die("data_read", &err);
		if (apply &&
		    imtf_apply(t, epoch, i, bytes.p, bytes.len, &scratch, dst, &warning, &err) < 0)
			die("imtf_apply", &err);
	}
	return n;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"workers", required_argument, NULL, 'j'},
	    {"epochs", required_argument, NULL, 'e'},
	    {"batch", required_argument, NULL, 'b'},
	    {"no-dct", no_argument, NULL, 'D'},
	    {"cache", required_argument, NULL, 'c'},
	    {"seed", required_argument, NULL, 's'},
	    {"single", no_argument, NULL, 'S'},
	    {"json", no_argument, NULL, 'J'},
	    {NULL, 0, NULL, 0},
	};
	int workers = 1, epochs = 2, batch = 256, opt;
	bool dct = true, single = false, json = false;
	const char *cache = NULL;
	uint64_t seed = 0;

	while ((opt = getopt_long(argc, argv, "j:e:b:c:s:", longopts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			workers = atoi(optarg);
			break;
		case 'e':
			epochs = atoi(optarg);
			break;
		case 'b':
			batch = atoi(optarg);
			break;
		case 'D':
			dct = false;
			break;
		case 'c':
			cache = optarg;
			break;
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'S':
			single = true;
			break;
		case 'J':
			json = true;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1 || workers < 0 || epochs < 1 || batch < 1)
		usage();
	const char *root = argv[optind];

	struct dp_error err;
	struct data_set ds = {0};
	struct sampler s = {0};
	struct imtf t;
	struct imtf_spec spec = {
	    .mode = IMTF_TRAIN,
	    .channels = 3,
	    .size = 224,
	    .scale = {0.08, 1.0},
	    .ratio = {3.0 / 4.0, 4.0 / 3.0},
	    .flip_p = 0.5,
	    .mean = {0.485f, 0.456f, 0.406f},
	    .std = {0.229f, 0.224f, 0.225f},
	    .dct_scaling = dct,
	    .seed = seed,
	};

	if (data_load_imagefolder(&ds, root, NULL, cache, &err) < 0)
		die(root, &err);
	if (!ds.encoded) {
		fprintf(stderr, "image-bench: %s: not an encoded set\n", root);
		return 1;
	}
	if (sampler_init(&s, ds.count, 1, 0, true, seed, true, &err) < 0)
		die("sampler_init", &err);
	if (imtf_init(&t, &spec, &err) < 0)
		die("imtf_init", &err);

	size_t images = 0, read_images = 0;
	double dt, cpu, read_dt = 0;

	if (single) {
		float *dst = malloc(imtf_out_elems(&t) * sizeof(float));

		if (!dst) {
			fprintf(stderr, "image-bench: out of memory\n");
			return 1;
		}
		single_epoch(&ds, &s, &t, 0, true, dst); /* warm-up */
		double t0 = now();
		for (int e = 1; e <= epochs; e++)
			read_images += single_epoch(&ds, &s, &t, e, false, dst);
		read_dt = now() - t0;
		double c0 = cpu_seconds();
		t0 = now();
		for (int e = 1; e <= epochs; e++)
			images += single_epoch(&ds, &s, &t, e, true, dst);
		dt = now() - t0;
		cpu = cpu_seconds() - c0;
		free(dst);
		workers = 1;
	} else {
		struct loader *l;
		struct loader_opts o = {
		    .batch_size = batch,
		    .drop_remainder = true,
		    .workers = workers,
		    .prefetch = workers + 1,
		    .imtf = &t,
		    .max_bad = 0,
		};

		if (loader_create(&l, &ds, &s, NULL, &o, &err) < 0)
			die("loader_create", &err);
		loader_epoch(l, 0); /* warm-up: threads started, files in the page cache */
		double c0 = cpu_seconds(), t0 = now();
		for (int e = 1; e <= epochs; e++)
			images += loader_epoch(l, e);
		dt = now() - t0;
		cpu = cpu_seconds() - c0;
		loader_destroy(l);
	}

	int cores = workers > 0 ? workers : 1;
	double rss = peak_rss_mb();
	const char *mode = single ? "single" : "loader";

	if (json)
		printf("{\"tool\": \"dptrain\", \"mode\": \"%s\", \"workers\": %d, \"batch\": %d, "
		       "\"epochs\": %d, \"dct\": %s, \"images\": %zu, \"seconds\": %.3f, "
		       "\"img_s\": %.1f, \"img_s_per_core\": %.1f, \"cpu_s\": %.2f, "
		       "\"img_per_cpu_s\": %.1f, \"peak_rss_mb\": %.1f, \"dataset\": %zu",
		       mode, workers, batch, epochs, dct ? "true" : "false", images, dt,
		       images / dt, images / dt / cores, cpu, cpu > 0 ? images / cpu : 0.0, rss,
		       ds.count);
	else
		printf("tool=dptrain mode=%s workers=%d batch=%d epochs=%d dct=%d images=%zu "
		       "seconds=%.3f img_s=%.1f img_s_per_core=%.1f cpu_s=%.2f img_per_cpu_s=%.1f "
		       "peak_rss_mb=%.1f dataset=%zu",
		       mode, workers, batch, epochs, dct, images, dt, images / dt,
		       images / dt / cores, cpu, cpu > 0 ? images / cpu : 0.0, rss, ds.count);
	if (single)
		printf(json ? ", \"read_img_s\": %.1f}\n" : " read_img_s=%.1f\n",
		       read_images / read_dt);
	else
		printf(json ? "}\n" : "\n");

	sampler_free(&s);
	data_free(&ds);
	return 0;
}
