/* config_roundtrip.c — unit tests of cfg_to_json, cfg_equal and cfg_expand_output_dir:
 * the printed config reads back into an equal struct, for the examples and for configs that
 * set every key. Parsing and its errors are t/unit/config.c. */
#include "config/config.h"
#include "t/lib/tap.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct dp_error err;

/* A config with a non-default value for every key (and the kinds of every choice that
 * switches keys on: mlp hidden, cifar10 files, adamw betas, multistep milestones, fusion
 * config, static loss scale, resume path). */
static const char *const full[] = {
    "{\"description\": \"every key \\\"quoted\\\" \\\\ \\t tab \\u00e9\\u4e2d\", \"seed\": "
    "12345678901234,"
    " \"model\": {\"name\": \"mlp\", \"num_classes\": 7, \"input_shape\": [3, 32, 32],"
    "  \"hidden\": [100, 50, 25], \"init\": \"w/init.safetensors\"},"
    " \"data\": {\"format\": \"cifar10\", \"train\": {\"files\": [\"a.bin\", \"b.bin\"]},"
    "  \"eval\": {\"files\": [\"t.bin\"]}, \"batch_size\": 17, \"eval_batch_size\": 33,"
    "  \"shuffle\": false, \"seed\": 99, \"drop_remainder\": false,"
    "  \"transforms\": {\"random_crop\": {\"size\": 32, \"padding\": 2}, \"horizontal_flip\": "
    "true,"
    "   \"normalize\": {\"mean\": [0.4914, 0.4822, 0.4465], \"std\": [0.247, 0.2435, "
    "0.2616]}},"
    "  \"workers\": 3, \"prefetch\": 5},"
    " \"optimizer\": {\"name\": \"adamw\", \"lr\": 3e-4, \"weight_decay\": 0.05,"
    "  \"no_decay_bn_bias\": true, \"betas\": [0.85, 0.995], \"eps\": 1e-7},"
    " \"lr_schedule\": {\"name\": \"multistep\", \"warmup_epochs\": 2, \"unit\": \"step\","
    "  \"gamma\": 0.25, \"milestones\": [1000, 2000, 3000]},"
    " \"train\": {\"epochs\": 12, \"max_steps\": 100000, \"log_every\": 7, \"eval_every\": 0,"
    "  \"label_smoothing\": 0.15, \"threads\": 6, \"straggler_threshold\": 1.5,"
    "  \"straggler_window\": 4},"
    " \"parallel\": {\"gradients_mean\": false, \"parameter_broadcast\": false,"
    "  \"all_reduce_fusion_config\": [20, 85, 160], \"grad_accumulation_step\": 4,"
    "  \"enable_parallel_optimizer\": true,"
    "  \"parallel_optimizer_config\": {\"parallel_optimizer_threshold\": 128}},"
    " \"precision\": {\"mode\": \"fp16\", \"loss_scale\": 1024},"
    " \"checkpoint\": {\"dir\": \"/scratch/ck\", \"every_steps\": 500, \"every_epochs\": 0,"
    "  \"keep\": 9, \"resume\": \"old/step-100\"},"
    " \"device\": {\"kind\": \"cuda\", \"allow_shared_gpu\": true, \"deterministic\": true},"
    " \"output\": {\"dir\": \"runs/%j-%s-%%\", \"per_rank_logs\": false, \"console\": \"all\","
    "  \"metrics\": false, \"tensorboard\": false, \"progress\": \"lines\"},"
    " \"timeouts\": {\"rendezvous_s\": 1.5, \"collective_s\": 1e6, \"shutdown_s\": 2.25}}",

    "{\"model\": {\"name\": \"resnet152\", \"num_classes\": 1000, \"input_shape\": [1, 224, "
    "224], \"stem\": \"small\"},"
    " \"data\": {\"format\": \"idx\", \"dir\": \"/data\", \"eval\": {\"images\": \"e\", "
    "\"labels\": \"l\"}},"
    " \"optimizer\": {\"name\": \"momentum\", \"lr\": 0.1, \"nesterov\": true},"
    " \"lr_schedule\": {\"name\": \"step\", \"warmup_steps\": 100, \"step_size\": 30, "
    "\"gamma\": 0.5},"
    " \"train\": {\"max_steps\": 1000},"
    " \"parallel\": {\"bucket_cap_mb\": 0.25},"
    " \"precision\": {\"mode\": \"bf16\", \"loss_scale\": \"dynamic\", \"initial_loss_scale\": "
    "256, \"growth_interval\": 3},"
    " \"checkpoint\": {\"resume\": \"never\"},"
    " \"device\": {\"kind\": \"gpu\"}, \"output\": {\"console\": \"none\"}}",

    "{\"model\": {\"name\": \"lenet\"}, \"data\": {\"format\": \"synthetic\", \"train\": "
    "{\"size\": 1}},"
    " \"optimizer\": {\"name\": \"lamb\"}, \"lr_schedule\": {\"name\": \"cosine\", \"min_lr\": "
    "1e-300},"
    " \"precision\": {\"mode\": \"tf32\"}}",

    /* Keys the choices ignore: warnings the first time, not in the printed config. */
    "{\"model\": {\"name\": \"resnet34\", \"hidden\": [1]}, \"data\": {\"format\": "
    "\"synthetic\", \"train\": {\"size\": 3, \"images\": \"x\"}, \"dir\": \"d\"},"
    " \"optimizer\": {\"betas\": [0.1, 0.2]}, \"lr_schedule\": {\"milestones\": [4]}}",
};

/* Parse, print, parse the print, print again: equal structs, identical text. */
static void round_trip(const char *what, struct cfg *c1)
{
	struct cfg c2;
	char *j1 = cfg_to_json(c1), *j2 = NULL;

	ok(j1 != NULL, "%s: cfg_to_json", what);
	if (!j1)
		return;
	int rv = cfg_parse(&c2, j1, strlen(j1), "job.json", 0, NULL, &err);
	ok(rv == 0, "%s: the printed config parses: %s", what, err.text);
	if (rv == 0) {
		ok(cfg_equal(c1, &c2), "%s: into an equal struct", what);
		is_int(c2.nwarnings, 0, "%s: without warnings", what);
		j2 = cfg_to_json(&c2);
		is(j2, j1, "%s: and prints the same", what);
	} else {
		diag("%s", j1);
	}
	free(j1);
	free(j2);
	cfg_free(&c2);
}

static void test_full(void)
{
	for (size_t i = 0; i < sizeof(full) / sizeof(full[0]); i++) {
		struct cfg c;
		char what[32];
		snprintf(what, sizeof(what), "config %zu", i);
		int rv = cfg_parse(&c, full[i], strlen(full[i]), "job.json", 0, NULL, &err);
		ok(rv == 0, "%s parses: %s", what, err.text);
		if (rv == 0)
			round_trip(what, &c);
		if (i == 3)
			is_int(c.nwarnings, 5, "config 3 had its warnings");
		cfg_free(&c);
	}
}

/* The printed JSON read by jansson: everything resolved is there. */
static void test_printed(void)
{
	struct cfg c;
	json_error_t jerr;

	ok(cfg_parse(&c, full[1], strlen(full[1]), "/j/job.json", 0, NULL, &err) == 0,
	   "config 1: %s", err.text);
	char *s = cfg_to_json(&c);
	json_t *j = s ? json_loads(s, JSON_REJECT_DUPLICATES, &jerr) : NULL;
	ok(j != NULL, "cfg_to_json prints valid JSON without duplicate keys");
	const char *sections[] = {"model",  "data",	"optimizer", "lr_schedule",
				  "train",  "parallel", "precision", "checkpoint",
				  "device", "output",	"timeouts"};
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
		ok(json_is_object(json_object_get(j, sections[i])), "section %s printed",
		   sections[i]);
	json_t *m = json_object_get(j, "model"), *d = json_object_get(j, "data");
	json_t *o = json_object_get(j, "optimizer"), *p = json_object_get(j, "precision");
	is(json_string_value(json_object_get(m, "stem")), "small", "the stem");
	ok(json_object_get(m, "hidden") == NULL, "no hidden for a resnet");
	is(json_string_value(json_object_get(json_object_get(d, "train"), "images")),
	   "/data/train-images-idx3-ubyte.gz", "train from data.dir, absolute");
	is(json_string_value(json_object_get(json_object_get(d, "eval"), "images")), "/j/e",
	   "eval absolute");
	ok(json_object_get(json_object_get(d, "train"), "size") == NULL, "no size for idx");
	is(json_string_value(json_object_get(o, "name")), "sgd", "\"momentum\" prints as sgd");
	ok(json_number_value(json_object_get(o, "momentum")) == 0.9, "with momentum 0.9");
	ok(json_object_get(o, "betas") == NULL && json_object_get(o, "eps") == NULL,
	   "no adam keys for sgd");
	is(json_string_value(json_object_get(p, "loss_scale")), "dynamic", "dynamic loss scale");
	ok(json_integer_value(json_object_get(p, "initial_loss_scale")) == 256,
	   "initial_loss_scale printed");
	is(json_string_value(json_object_get(json_object_get(j, "device"), "kind")), "cuda",
	   "\"gpu\" prints as cuda");
	is(json_string_value(json_object_get(json_object_get(j, "checkpoint"), "resume")), "never",
	   "resume never");
	ok(json_integer_value(json_object_get(json_object_get(j, "timeouts"), "rendezvous_s")) ==
	       300,
	   "default timeouts printed as integers");
	ok(strstr(s, "\"input_shape\": [1, 224, 224]") != NULL, "short arrays on one line");
	json_decref(j);
	free(s);
	cfg_free(&c);

	if (!ok(cfg_parse(&c, full[0], strlen(full[0]), "/j/job.json", 0, NULL, &err) == 0,
		"config 0: %s", err.text))
		bail_out("config 0 does not parse: %s", err.text);
	s = cfg_to_json(&c);
	ok(s && strstr(s, "\"lr\": 0.0003,") != NULL, "shortest exact numbers (0.0003)");
	ok(s && strstr(s, "\"rendezvous_s\": 1.5,") != NULL, "1.5");
	ok(s && strstr(s, "\"seed\": 12345678901234,") != NULL, "64-bit seed");
	ok(s && strstr(s, "\"description\": \"every key \\\"quoted\\\" \\\\ \\u0009 tab "
			  "\xc3\xa9\xe4\xb8\xad\"") != NULL,
	   "strings escaped, UTF-8 kept");
	ok(s && strstr(s, "\"resume\": \"/j/old/step-100\"") != NULL, "resume path absolute");
	ok(s && !strstr(s, "bucket_cap_mb"), "no bucket_cap_mb with a fusion config");
	free(s);
	cfg_free(&c);
}

static void test_examples(void)
{
	const char *src = getenv("DPTRAIN_SRC_DIR");
	const char *names[] = {"resnet50.json",	    "resnet50-synthetic.json",
			       "resnet18.json",	    "mlp-fmnist.json",
			       "lenet-fmnist.json", "resnet18-fmnist.json"};
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct cfg c;
		snprintf(path, sizeof(path), "%s/contrib/examples/%s", src ? src : ".", names[i]);
		int rv = cfg_load(&c, path, 0, NULL, &err);
		ok(rv == 0, "example %s loads: %s", names[i], err.text);
		if (rv == 0) {
			is_int(c.nwarnings, 0, "%s: no warnings", names[i]);
			round_trip(names[i], &c);
		}
		cfg_free(&c);
	}
}

/* cfg_equal must see a change in any kind of field, or the round trips prove nothing. */
static void test_equal(void)
{
	struct cfg a, b;

	if (!ok(cfg_parse(&a, full[0], strlen(full[0]), "job.json", 0, NULL, &err) == 0, "a") ||
	    !ok(cfg_parse(&b, full[0], strlen(full[0]), "job.json", 0, NULL, &err) == 0, "b"))
		bail_out("config 0 does not parse: %s", err.text);
	ok(cfg_equal(&a, &b), "the same text gives equal structs");
	b.model.hidden.v[2]++;
	ok(!cfg_equal(&a, &b), "an int list element");
	b.model.hidden.v[2]--;
	b.data.train.files.v[1][0] = 'z';
	ok(!cfg_equal(&a, &b), "a path list element");
	b.data.train.files.v[1][0] = a.data.train.files.v[1][0];
	b.data.transforms.normalize.std.v[2] += 1e-12;
	ok(!cfg_equal(&a, &b), "a number list element");
	b.data.transforms.normalize.std.v[2] = a.data.transforms.normalize.std.v[2];
	b.optimizer.betas[1] = 0.5;
	ok(!cfg_equal(&a, &b), "a number array element");
	b.optimizer.betas[1] = a.optimizer.betas[1];
	b.data.eval.present = false;
	ok(!cfg_equal(&a, &b), "an optional object's presence");
	b.data.eval.present = true;
	b.seed++;
	ok(!cfg_equal(&a, &b), "an int64");
	b.seed--;
	b.precision.dynamic_loss_scale = true;
	ok(!cfg_equal(&a, &b), "the loss scale kind");
	b.precision.dynamic_loss_scale = false;
	b.checkpoint.resume = CFG_RESUME_AUTO;
	ok(!cfg_equal(&a, &b), "the resume kind");
	b.checkpoint.resume = a.checkpoint.resume;
	b.output.console = CFG_CONSOLE_RANK0;
	ok(!cfg_equal(&a, &b), "an enum");
	b.output.console = a.output.console;
	free(b.description);
	b.description = NULL;
	ok(!cfg_equal(&a, &b), "a string against NULL");
	ok(cfg_equal(&b, &b), "a struct equals itself");
	cfg_free(&a);
	cfg_free(&b);
}

static void test_expand(void)
{
	char buf[64];

	is_int(cfg_expand_output_dir("dptrain.%j.%s", "123", "0", buf, sizeof(buf)), 13,
	       "expand: length");
	is(buf, "dptrain.123.0", "expand %%j and %%s");
	ok(cfg_expand_output_dir("a%%b%j", "7", "1", buf, sizeof(buf)) == 4 &&
	       strcmp(buf, "a%b7") == 0,
	   "%%%% is a percent sign");
	ok(cfg_expand_output_dir("x%u", "7", "1", buf, sizeof(buf)) == -1, "unknown escape");
	ok(cfg_expand_output_dir("x%", "7", "1", buf, sizeof(buf)) == -1, "trailing %%");
	ok(cfg_expand_output_dir("dptrain.%j.%s", "123456", "0", buf, 14) == -1, "too small");
	ok(cfg_expand_output_dir("dptrain.%j.%s", "12345", "0", buf, 16) == 15 &&
	       strcmp(buf, "dptrain.12345.0") == 0,
	   "exactly fits");
	ok(cfg_expand_output_dir("", "1", "2", buf, sizeof(buf)) == 0 && buf[0] == '\0', "empty");
}

int main(void)
{
	test_full();
	test_printed();
	test_examples();
	test_equal();
	test_expand();
	return done_testing();
}
