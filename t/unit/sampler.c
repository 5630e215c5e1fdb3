/* sampler.c — unit tests for trainer/data/sampler.c: PyTorch's randperm and DistributedSampler
 * from golden lists (t/reference/data/sampler.txt), coverage and padding/drop for every
 * n <= 40 and world size 1..5, epochs and seeds, eval sharding, resume and re-sharding.
 * With arguments it prints indices for t/t0500-data.t, one per line:
 *   sampler.t --perm SEED N
 *   sampler.t --shard N WORLD RANK SEED EPOCH DROP SHUFFLE [START]
 *   sampler.t --eval N WORLD RANK */
#include "common/error.h"
#include "trainer/data/sampler.h"
#include "t/lib/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t *indices(const struct sampler *s, size_t *len)
{
	size_t *v;

	*len = sampler_len(s);
	v = malloc((*len + 1) * sizeof(*v));
	for (size_t j = 0; j < *len; j++)
		v[j] = sampler_index(s, j);
	return v;
}

/* Compares "a b c" with v[0..n-1]. */
static int same_list(const char *text, const size_t *v, size_t n)
{
	size_t k = 0;
	char *end;

	for (const char *p = text;; p = end) {
		unsigned long long x = strtoull(p, &end, 10);
		if (end == p)
			break;
		if (k >= n || x != v[k])
			return 0;
		k++;
	}
	return k == n;
}

static void test_golden(void)
{
	const char *src = getenv("DPTRAIN_SRC_DIR");
	char file[1024], *line = NULL;
	size_t cap = 0;
	int perms = 0, perm_ok = 0, shards = 0, shard_ok = 0;
	FILE *f;

	snprintf(file, sizeof(file), "%s/t/reference/data/sampler.txt", src ? src : ".");
	f = fopen(file, "r");
	if (!f) {
		skip(2, "no golden file %s (make reference)", file);
		return;
	}
	while (getline(&line, &cap, f) > 0) {
		unsigned long long seed, n;
		int w, r, epoch, drop, shuf;
		char *colon = strchr(line, ':');

		if (!colon)
			continue;
		if (sscanf(line, "perm %llu %llu", &seed, &n) == 2) {
			size_t *p = malloc(n * sizeof(*p));
			sampler_randperm(seed, n, p);
			perms++;
			perm_ok += same_list(colon + 1, p, n);
			free(p);
		} else if (sscanf(line, "shard %llu %d %d %llu %d %d %d", &n, &w, &r, &seed, &epoch,
				  &drop, &shuf) == 7) {
			struct sampler s;
			struct dp_error err;
			size_t len, *v;

			shards++;
			if (sampler_init(&s, n, w, r, shuf, seed, drop, &err) != 0)
				continue;
			sampler_set_epoch(&s, epoch);
			v = indices(&s, &len);
			shard_ok += same_list(colon + 1, v, len);
			free(v);
			sampler_free(&s);
		}
	}
	free(line);
	fclose(f);
	ok(perms > 10 && perm_ok == perms, "randperm equals torch 1.13's (%d of %d golden lists)",
	   perm_ok, perms);
	ok(shards > 100 && shard_ok == shards,
	   "DistributedSampler index lists equal torch's (%d of %d golden lists)", shard_ok,
	   shards);
}

static void test_randperm(void)
{
	int perm_ok = 1, same = 1, differ = 0;
	size_t a[64], b[64];

	for (size_t n = 1; n <= 64; n++) {
		int seen[64] = {0};
		sampler_randperm(n * 977, n, a);
		for (size_t i = 0; i < n; i++)
			if (a[i] >= n || seen[a[i]]++)
				perm_ok = 0;
	}
	ok(perm_ok, "randperm yields permutations for n = 1..64");
	sampler_randperm(7, 64, a);
	sampler_randperm(7, 64, b);
	same = memcmp(a, b, sizeof(a)) == 0;
	sampler_randperm(8, 64, b);
	differ = memcmp(a, b, sizeof(a)) != 0;
	ok(same && differ, "same seed same permutation, another seed another");
	sampler_randperm(7 + (1ull << 32), 64, b);
	ok(memcmp(a, b, sizeof(a)) == 0, "only the low 32 bits of the seed count (as in torch)");
}

static void test_train(void)
{
	int counts_ok = 1, cover_ok = 1, pad_ok = 1, drop_ok = 1, order_ok = 1;
	struct dp_error err;

	for (size_t n = 1; n <= 40; n++) {
		for (int w = 1; w <= 5; w++) {
			for (int shuffle = 0; shuffle <= 1; shuffle++) {
				size_t *perm = malloc(n * sizeof(*perm));
				int *seen = calloc(n, sizeof(int));
				size_t per = (n + (size_t)w - 1) / (size_t)w,
				       per_drop = n / (size_t)w;

				for (size_t i = 0; i < n; i++)
					perm[i] = i;
				if (shuffle)
					sampler_randperm(3 + 2, n, perm);
				for (int drop = 0; drop <= 1; drop++) {
					memset(seen, 0, n * sizeof(int));
					for (int r = 0; r < w; r++) {
						struct sampler s;
						size_t len, *v;

						sampler_init(&s, n, w, r, shuffle, 3, drop, &err);
						sampler_set_epoch(&s, 2);
						v = indices(&s, &len);
						if (len != (drop ? per_drop : per))
							counts_ok = 0;
						for (size_t j = 0; j < len; j++) {
							size_t p = (size_t)r + j * (size_t)w;
							if (v[j] != perm[p % n])
								order_ok = 0;
							seen[v[j]]++;
						}
						free(v);
						sampler_free(&s);
					}
					for (size_t i = 0; i < n; i++) {
						size_t pos = 0;
						while (perm[pos] != i)
							pos++;
						if (!drop) {
							/* padding: total = w * per, positions
							 * >= n repeat perm from its start */
							int want =
							    (int)((w * per - pos + n - 1) / n);
							if (seen[i] != want)
								pad_ok = 0;
							if (seen[i] < 1)
								cover_ok = 0;
						} else if (seen[i] !=
							   (pos < w * per_drop ? 1 : 0)) {
							drop_ok = 0;
						}
					}
				}
				free(perm);
				free(seen);
			}
		}
	}
	ok(counts_ok, "train: every rank gets ceil(n/W), or floor(n/W) with drop_last "
		      "(n = 1..40, W = 1..5)");
	ok(order_ok, "train: rank r visits S(r), S(r+W), ... with S(p) = perm[p mod n]");
	ok(cover_ok, "train: every sample is visited at least once per epoch without drop_last");
	ok(pad_ok, "train: the padding repeats the permutation from its start, nothing else");
	ok(drop_ok, "train: drop_last visits each of the first W*floor(n/W) once, never the tail");
}

static void test_epochs(void)
{
	struct sampler a, b;
	struct dp_error err;
	size_t la, lb, *va, *vb, *vc;

	sampler_init(&a, 1000, 2, 1, true, 11, false, &err);
	sampler_init(&b, 1000, 2, 1, true, 11, false, &err);
	va = indices(&a, &la);
	sampler_set_epoch(&a, 1);
	vb = indices(&a, &lb);
	ok(memcmp(va, vb, la * sizeof(*va)) != 0, "set_epoch changes the permutation");
	sampler_set_epoch(&b, 1);
	vc = indices(&b, &lb);
	ok(memcmp(vb, vc, lb * sizeof(*vb)) == 0, "same seed and epoch: same order");
	free(vc);
	sampler_free(&b);
	sampler_init(&b, 1000, 2, 1, true, 12, false, &err);
	vc = indices(&b, &lb);
	ok(memcmp(vb, vc, lb * sizeof(*vb)) == 0, "seed 12 epoch 0 == seed 11 epoch 1 (seed + "
						  "epoch, as torch)");
	free(va);
	free(vb);
	free(vc);
	sampler_free(&a);
	sampler_free(&b);

	sampler_init(&a, 10, 3, 0, false, 0, false, &err);
	sampler_set_epoch(&a, 5);
	va = indices(&a, &la);
	ok(la == 4 && va[0] == 0 && va[1] == 3 && va[2] == 6 && va[3] == 9 && a.perm == NULL,
	   "no shuffle: 0, 3, 6, 9 for rank 0 of 3 at any epoch");
	free(va);
	sampler_free(&a);
}

static void test_eval(void)
{
	int once = 1, counts = 1, order = 1;
	struct dp_error err;

	for (size_t n = 1; n <= 40; n++) {
		for (int w = 1; w <= 5; w++) {
			int *seen = calloc(n, sizeof(int));
			size_t total = 0;

			for (int r = 0; r < w; r++) {
				struct sampler s;
				size_t len, *v;

				sampler_init_eval(&s, n, w, r, &err);
				v = indices(&s, &len);
				if (len != sampler_eval_count(n, w, r))
					counts = 0;
				if (len + 1 < (n + (size_t)w - 1) / (size_t)w)
					counts = 0;
				for (size_t j = 0; j < len; j++) {
					if (v[j] != (size_t)r + j * (size_t)w)
						order = 0;
					seen[v[j]]++;
				}
				total += len;
				free(v);
				sampler_free(&s);
			}
			for (size_t i = 0; i < n; i++)
				once &= seen[i] == 1;
			counts &= total == n;
			free(seen);
		}
	}
	ok(once, "eval: every sample exactly once across ranks (n = 1..40, W = 1..5)");
	ok(counts, "eval: sampler_eval_count is each rank's share, shares differ by at most one");
	ok(order, "eval: rank r gets r, r+W, r+2W, ...");
	is_int(sampler_eval_count(2, 5, 3), 0, "eval: rank 3 of 5 gets nothing of 2 samples");
}

static void test_resume(void)
{
	int tail_ok = 1, skip_ok = 1, reshard_ok = 1, equal_ok = 1;
	struct dp_error err;

	for (size_t n = 5; n <= 37; n += 4) {
		for (int w = 1; w <= 4; w++) {
			for (int drop = 0; drop <= 1; drop++) {
				for (int r = 0; r < w; r++) {
					struct sampler s;
					size_t full, *v;

					sampler_init(&s, n, w, r, true, 99, drop, &err);
					sampler_set_epoch(&s, 4);
					v = indices(&s, &full);
					for (size_t k = 0; k <= full; k++) {
						struct sampler t = s;
						size_t len, *u;

						sampler_set_start(&t, k * (size_t)w);
						u = indices(&t, &len);
						if (len != full - k ||
						    memcmp(u, v + k, len * sizeof(*u)) != 0)
							tail_ok = 0;
						if (sampler_offset_after(&s, k) != k * (size_t)w)
							tail_ok = 0;
						free(u);
						t.start = 0;
						sampler_skip(&t, k);
						if (t.start != k * (size_t)w)
							skip_ok = 0;
					}
					free(v);
					sampler_free(&s);
				}
			}
		}
	}
	ok(tail_ok, "resume at global offset k*W: exactly the tail of the uninterrupted epoch");
	ok(skip_ok, "sampler_skip(k) moves the start by k*W");

	/* Re-shard: W = 3 consumed 4 samples each (g = 12) of n = 29; continue with W' = 1..6:
	 * the positions still to visit are 12.. and every sample not yet visited comes once
	 * (padding aside), each new rank with the same count. */
	for (int w2 = 1; w2 <= 6; w2++) {
		size_t n = 29, g = 12;
		int *seen = calloc(n, sizeof(int));
		size_t perm[29], first_len = 0;

		sampler_randperm(99 + 4, n, perm);
		for (size_t p = 0; p < g; p++)
			seen[perm[p]]++;
		for (int r = 0; r < w2; r++) {
			struct sampler s;
			size_t len, *v;

			sampler_init(&s, n, w2, r, true, 99, false, &err);
			sampler_set_epoch(&s, 4);
			sampler_set_start(&s, g);
			v = indices(&s, &len);
			if (r == 0)
				first_len = len;
			if (len != first_len || len != (n - g + (size_t)w2 - 1) / (size_t)w2)
				equal_ok = 0;
			for (size_t j = 0; j < len; j++) {
				size_t p = g + (size_t)r + j * (size_t)w2;
				if (p < n)
					seen[v[j]]++;
				if (v[j] != perm[p % n])
					reshard_ok = 0;
			}
			free(v);
			sampler_free(&s);
		}
		for (size_t i = 0; i < n; i++)
			reshard_ok &= seen[i] == 1;
		free(seen);
	}
	ok(reshard_ok, "re-shard to W' = 1..6 mid-epoch: same global order, every sample once");
	ok(equal_ok, "re-shard: every new rank gets ceil((n - g) / W') samples");
}

static void test_errors(void)
{
	struct sampler s;
	struct dp_error err;

	ok(sampler_init(&s, 0, 1, 0, true, 0, false, &err) == -1, "empty dataset refused");
	is(err.text, "sampler: the dataset is empty", "... message");
	ok(sampler_init(&s, 10, 0, 0, true, 0, false, &err) == -1, "world size 0 refused");
	is(err.text, "sampler: num_replicas (world size) is 0; need >= 1", "... message");
	ok(sampler_init_eval(&s, 10, 4, 4, &err) == -1, "rank 4 of 4 refused");
	is(err.text, "sampler: rank 4 is outside 0..3 (world size 4)", "... message");
}

static int print_mode(int argc, char **argv)
{
	struct sampler s;
	struct dp_error err;
	size_t len, *v;

	if (strcmp(argv[1], "--perm") == 0 && argc == 4) {
		size_t n = strtoull(argv[3], NULL, 10);
		v = malloc((n + 1) * sizeof(*v));
		sampler_randperm(strtoull(argv[2], NULL, 10), n, v);
		for (size_t i = 0; i < n; i++)
			printf("%zu\n", v[i]);
		free(v);
		return 0;
	}
	if (strcmp(argv[1], "--shard") == 0 && (argc == 9 || argc == 10)) {
		if (sampler_init(&s, strtoull(argv[2], NULL, 10), atoi(argv[3]), atoi(argv[4]),
				 atoi(argv[8]), strtoull(argv[5], NULL, 10), atoi(argv[7]),
				 &err) != 0) {
			fprintf(stderr, "sampler.t: %s\n", err.text);
			return 1;
		}
		sampler_set_epoch(&s, atoll(argv[6]));
		if (argc == 10)
			sampler_set_start(&s, strtoull(argv[9], NULL, 10));
	} else if (strcmp(argv[1], "--eval") == 0 && argc == 5) {
		if (sampler_init_eval(&s, strtoull(argv[2], NULL, 10), atoi(argv[3]), atoi(argv[4]),
				      &err) != 0) {
			fprintf(stderr, "sampler.t: %s\n", err.text);
			return 1;
		}
	} else {
		fprintf(stderr, "usage: sampler.t --perm SEED N | --shard N WORLD RANK SEED EPOCH "
				"DROP SHUFFLE [START] | --eval N WORLD RANK\n");
		return 2;
	}
	v = indices(&s, &len);
	for (size_t j = 0; j < len; j++)
		printf("%zu\n", v[j]);
	free(v);
	sampler_free(&s);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		return print_mode(argc, argv);
	test_golden();
	test_randperm();
	test_train();
	test_epochs();
	test_eval();
	test_resume();
	test_errors();
	return done_testing();
}
