/* config.c — unit tests of the job config parser (config/): defaults, every type and
 * range check, cross-field checks, overrides, path resolution, did-you-mean, warnings.
 * Round trips through cfg_to_json are t/unit/config_roundtrip.c. */
#include "config/config.h"
#include "t/lib/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The smallest valid config; tests add one section to it. */
#define MODEL "\"model\": {\"name\": \"lenet\"}"
#define DATA  "\"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 100}}"
#define MIN   MODEL ", " DATA

static struct dp_error err;

static int parse_ov(struct cfg *c, const char *json, int n, char *const *ov)
{
	return cfg_parse(c, json, strlen(json), "job.json", n, ov, &err);
}

static int parse(struct cfg *c, const char *json)
{
	return parse_ov(c, json, 0, NULL);
}

static void test_defaults(void)
{
	struct cfg c;
	char cwd[PATH_MAX], want[PATH_MAX + 16];

	ok(parse(&c, "{" MIN "}") == 0, "the minimal config parses: %s", err.text);
	is(err.text, "", "no error text on success");
	ok(getcwd(cwd, sizeof(cwd)) != NULL, "getcwd");
	snprintf(want, sizeof(want), "%s/job.json", cwd);
	is(c.path, want, "c->path is the name made absolute");
	ok(c.description == NULL, "no description");
	is_int(c.seed, 0, "seed 0");
	is_int(c.model.name, CFG_MODEL_LENET, "model.name");
	is_int(c.model.num_classes, 10, "model.num_classes 10");
	ok(c.model.input_shape[0] == 1 && c.model.input_shape[1] == 28 &&
	       c.model.input_shape[2] == 28,
	   "model.input_shape [1, 28, 28]");
	is_int(c.model.stem, CFG_STEM_SMALL, "model.stem small for H <= 64");
	ok(c.model.hidden.n == 2 && c.model.hidden.v[0] == 512 && c.model.hidden.v[1] == 512,
	   "model.hidden [512, 512]");
	ok(c.model.init == NULL, "no model.init");
	is_int(c.data.format, CFG_DATA_SYNTHETIC, "data.format");
	ok(c.data.dir == NULL, "no data.dir");
	ok(c.data.train.present && c.data.train.size == 100, "data.train.size 100");
	ok(!c.data.eval.present, "no eval");
	is_int(c.data.batch_size, 32, "data.batch_size 32");
	is_int(c.data.eval_batch_size, 32, "data.eval_batch_size = batch_size");
	ok(c.data.shuffle && c.data.drop_remainder, "shuffle, drop_remainder");
	is_int(c.data.seed, 0, "data.seed = seed");
	ok(!c.data.transforms.random_crop.enabled && !c.data.transforms.horizontal_flip &&
	       !c.data.transforms.normalize.enabled,
	   "no transforms");
	is_int(c.data.workers, 1, "data.workers 1");
	is_int(c.data.prefetch, 2, "data.prefetch 2");
	is_int(c.optimizer.name, CFG_OPT_SGD, "optimizer sgd");
	is_double(c.optimizer.lr, 0.001, 0, "lr 0.001");
	is_double(c.optimizer.momentum, 0, 0, "momentum 0");
	ok(!c.optimizer.nesterov && !c.optimizer.no_decay_bn_bias, "no nesterov, decay all");
	is_double(c.optimizer.weight_decay, 0, 0, "sgd weight_decay 0");
	ok(c.optimizer.betas[0] == 0.9 && c.optimizer.betas[1] == 0.999, "betas");
	is_double(c.optimizer.eps, 1e-8, 0, "eps 1e-8");
	is_int(c.lr_schedule.name, CFG_LR_CONSTANT, "constant lr");
	ok(c.lr_schedule.warmup_steps == 0 && c.lr_schedule.warmup_epochs == 0, "no warmup");
	is_int(c.lr_schedule.unit, CFG_LR_UNIT_EPOCH, "unit epoch");
	is_double(c.lr_schedule.gamma, 0.1, 0, "gamma 0.1");
	is_int(c.lr_schedule.milestones.n, 0, "no milestones");
	is_int(c.train.epochs, 1, "train.epochs 1");
	is_int(c.train.max_steps, 0, "train.max_steps 0");
	is_int(c.train.log_every, 100, "log_every 100");
	is_int(c.train.eval_every, 1, "eval_every 1");
	is_double(c.train.label_smoothing, 0, 0, "label_smoothing 0");
	is_int(c.train.threads, 0, "threads 0");
	ok(c.parallel.gradients_mean && c.parallel.parameter_broadcast, "mean, broadcast");
	is_int(c.parallel.all_reduce_fusion_config.n, 0, "no fusion config");
	is_int(c.parallel.grad_accumulation_step, 1, "grad_accumulation_step 1");
	ok(!c.parallel.enable_parallel_optimizer, "no parallel optimizer");
	is_int(c.parallel.parallel_optimizer_config.parallel_optimizer_threshold, 64,
	       "parallel_optimizer_threshold 64");
	is_double(c.parallel.bucket_cap_mb, 25, 0, "bucket_cap_mb 25");
	is_int(c.precision.mode, CFG_PREC_FP32, "fp32");
	ok(!c.precision.dynamic_loss_scale && c.precision.loss_scale == 1, "loss scale 1");
	is_double(c.precision.initial_loss_scale, 65536, 0, "initial_loss_scale");
	is_int(c.precision.growth_interval, 2000, "growth_interval");
	ok(c.checkpoint.dir == NULL, "checkpoint.dir unset: checkpoints in the output directory");
	is_int(c.checkpoint.every_steps, 0, "every_steps 0");
	is_int(c.checkpoint.every_epochs, 1, "every_epochs 1");
	is_int(c.checkpoint.keep, 3, "keep 3");
	ok(c.checkpoint.resume == CFG_RESUME_AUTO && !c.checkpoint.resume_path, "resume auto");
	is_int(c.device.kind, CFG_DEVICE_AUTO, "device auto");
	ok(!c.device.allow_shared_gpu && !c.device.deterministic, "device flags");
	is(c.output.dir, "dptrain.%j.%s", "output.dir");
	ok(c.output.per_rank_logs && c.output.metrics && c.output.tensorboard,
	   "per_rank_logs, metrics, tensorboard");
	is_int(c.output.console, CFG_CONSOLE_RANK0, "console rank0");
	is_int(c.output.progress, CFG_PROGRESS_AUTO, "progress auto");
	ok(c.train.straggler_threshold == 1.25 && c.train.straggler_window == 8,
	   "straggler watch: 1.25x over 8 reports");
	ok(c.timeouts.rendezvous_s == 300 && c.timeouts.collective_s == 300 &&
	       c.timeouts.shutdown_s == 30,
	   "timeouts");
	is_int(c.nwarnings, 0, "no warnings");
	cfg_free(&c);
	cfg_free(&c); /* twice is harmless */
	ok(c.path == NULL && c.checkpoint.dir == NULL, "cfg_free zeroes");
}

/* Defaults that depend on other keys. */
static void test_derived_defaults(void)
{
	struct cfg c;

	ok(parse(&c, "{\"model\": {\"name\": \"resnet50\", \"input_shape\": [3, 224, 224]}, " DATA
		     "}") == 0,
	   "resnet50 224x224: %s", err.text);
	is_int(c.model.stem, CFG_STEM_IMAGENET, "stem imagenet when H > 64");
	cfg_free(&c);
	ok(parse(&c, "{\"model\": {\"name\": \"resnet18\", \"input_shape\": [3, 64, 64]}, " DATA
		     "}") == 0,
	   "resnet18 64x64: %s", err.text);
	is_int(c.model.stem, CFG_STEM_SMALL, "stem small when H <= 64");
	cfg_free(&c);
	ok(parse(&c, "{\"model\": {\"name\": \"resnet18\", \"input_shape\": [3, 224, 224], "
		     "\"stem\": \"small\"}, " DATA "}") == 0,
	   "explicit stem");
	is_int(c.model.stem, CFG_STEM_SMALL, "an explicit stem wins");
	cfg_free(&c);

	ok(parse(&c, "{" MIN ", \"optimizer\": {\"name\": \"momentum\"}}") == 0, "momentum: %s",
	   err.text);
	is_int(c.optimizer.name, CFG_OPT_SGD, "\"momentum\" is sgd");
	is_double(c.optimizer.momentum, 0.9, 0, "with momentum 0.9 by default");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"optimizer\": {\"name\": \"momentum\", \"momentum\": 0.5}}") == 0,
	   "momentum 0.5");
	is_double(c.optimizer.momentum, 0.5, 0, "explicit momentum wins");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"optimizer\": {\"name\": \"adamw\"}}") == 0, "adamw");
	is_double(c.optimizer.weight_decay, 0.01, 0, "adamw weight_decay 0.01 (PyTorch)");
	is_double(c.optimizer.eps, 1e-8, 0, "adamw eps 1e-8");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"optimizer\": {\"name\": \"lamb\", \"weight_decay\": 0}}") == 0,
	   "lamb");
	is_double(c.optimizer.weight_decay, 0, 0, "explicit weight_decay 0 wins");
	is_double(c.optimizer.eps, 1e-6, 0, "lamb eps 1e-6");
	cfg_free(&c);

	ok(parse(&c, "{\"seed\": 7, " MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": "
		     "{\"size\": 5}, \"batch_size\": 16}}") == 0,
	   "seed 7, batch 16");
	is_int(c.data.seed, 7, "data.seed follows seed");
	is_int(c.data.eval_batch_size, 16, "eval_batch_size follows batch_size");
	cfg_free(&c);
	ok(parse(&c, "{\"seed\": 7, " MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": "
		     "{\"size\": 5}, \"seed\": 3, \"eval_batch_size\": 8}}") == 0,
	   "explicit data.seed");
	is_int(c.data.seed, 3, "explicit data.seed wins");
	is_int(c.data.eval_batch_size, 8, "explicit eval_batch_size wins");
	cfg_free(&c);

	ok(parse(&c, "{" MIN ", \"train\": {\"max_steps\": 50}}") == 0, "max_steps only");
	ok(c.train.epochs == 0 && c.train.max_steps == 50, "max_steps alone: epochs 0");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"train\": {\"max_steps\": 50, \"epochs\": 2}}") == 0, "both");
	ok(c.train.epochs == 2 && c.train.max_steps == 50, "both kept");
	cfg_free(&c);

	ok(parse(&c, "{" MIN ", \"precision\": {\"mode\": \"fp16\"}}") == 0, "fp16");
	ok(c.precision.dynamic_loss_scale, "fp16: dynamic loss scale");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"precision\": {\"mode\": \"O2\"}}") == 0, "O2");
	ok(c.precision.mode == CFG_PREC_FP16 && c.precision.dynamic_loss_scale, "O2 = fp16");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"precision\": {\"mode\": \"O1\", \"loss_scale\": 128}}") == 0,
	   "O1 static");
	ok(c.precision.mode == CFG_PREC_FP16 && !c.precision.dynamic_loss_scale &&
	       c.precision.loss_scale == 128,
	   "O1 = fp16 with a static scale");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"precision\": {\"mode\": \"O0\"}}") == 0, "O0");
	ok(c.precision.mode == CFG_PREC_FP32 && !c.precision.dynamic_loss_scale, "O0 = fp32");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"precision\": {\"mode\": \"bf16\", \"loss_scale\": \"dynamic\", "
		     "\"initial_loss_scale\": 1024, \"growth_interval\": 10}}") == 0,
	   "bf16 dynamic");
	ok(c.precision.dynamic_loss_scale && c.precision.initial_loss_scale == 1024 &&
	       c.precision.growth_interval == 10,
	   "dynamic scale settings");
	cfg_free(&c);
}

/* Every check with its exact message: the first error, named by file and JSON path. */
static const struct {
	const char *json;
	const char *err;
} bad[] = {
    {"{}", "job.json: model.name: missing; expected one of \"mlp\", \"lenet\", \"resnet18\", "
	   "\"resnet34\", \"resnet50\", \"resnet101\", \"resnet152\""},
    {"{" MODEL "}", "job.json: data.format: missing; expected one of \"idx\", \"cifar10\", "
		    "\"synthetic\", \"imagefolder\", \"shards\""},
    {"{\"model\": 1, " DATA "}", "job.json: model: expected an object, got 1"},
    {"{\"model\": {\"name\": \"lenat\"}, " DATA "}",
     "job.json: model.name: expected one of \"mlp\", \"lenet\", \"resnet18\", \"resnet34\", "
     "\"resnet50\", \"resnet101\", \"resnet152\", got \"lenat\"; did you mean \"lenet\"?"},
    {"{\"model\": {\"name\": \"vgg\"}, " DATA "}",
     "job.json: model.name: expected one of \"mlp\", \"lenet\", \"resnet18\", \"resnet34\", "
     "\"resnet50\", \"resnet101\", \"resnet152\", got \"vgg\""},
    {"{\"model\": {\"name\": 5}, " DATA "}",
     "job.json: model.name: expected one of \"mlp\", \"lenet\", \"resnet18\", \"resnet34\", "
     "\"resnet50\", \"resnet101\", \"resnet152\", got 5"},
    {"{\"model\": {\"name\": \"lenet\", \"num_classes\": 1}, " DATA "}",
     "job.json: model.num_classes: expected an integer in [2, 1000000], got 1"},
    {"{\"model\": {\"name\": \"lenet\", \"num_classes\": 10.5}, " DATA "}",
     "job.json: model.num_classes: expected an integer in [2, 1000000], got 10.5"},
    {"{\"model\": {\"name\": \"lenet\", \"num_classes\": \"10\"}, " DATA "}",
     "job.json: model.num_classes: expected an integer in [2, 1000000], got \"10\""},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [1, 28]}, " DATA "}",
     "job.json: model.input_shape: expected an array of 3 integers in [1, 65536], got an "
     "array of 2 values"},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [1, 0, 28]}, " DATA "}",
     "job.json: model.input_shape[1]: expected an integer in [1, 65536], got 0"},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [1, 28, 28.0]}, " DATA "}",
     "job.json: model.input_shape[2]: expected an integer in [1, 65536], got 28.0"},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [65536, 65536, 1]}, " DATA "}",
     "job.json: model.input_shape: 65536 x 65536 x 1 values per sample is too many (at most "
     "2147483647)"},
    {"{\"model\": {\"name\": \"resnet18\", \"stem\": \"big\"}, " DATA "}",
     "job.json: model.stem: expected one of \"small\", \"imagenet\", got \"big\""},
    {"{\"model\": {\"name\": \"mlp\", \"hidden\": [512, 0]}, " DATA "}",
     "job.json: model.hidden[1]: expected an integer in [1, 1048576], got 0"},
    {"{\"model\": {\"name\": \"mlp\", \"init\": \"\"}, " DATA "}",
     "job.json: model.init: expected a file path (a non-empty string), got \"\""},
    {"{\"model\": {\"name\": \"lenet\", \"input\": 1}, " DATA "}",
     "job.json: model.input: unknown key; did you mean \"input_shape\"?"},
    {"{\"model\": {\"name\": \"lenet\", \"classes\": 1}, " DATA "}",
     "job.json: model.classes: unknown key; the keys here are: name, num_classes, input_shape, "
     "stem, hidden, init"},
    {"{\"model\": {\"name\": \"lenet\", \"num_class\": 1}, " DATA "}",
     "job.json: model.num_class: unknown key; did you mean \"num_classes\"?"},
    {"{" MODEL ", \"data\": {\"format\": \"idx\"}}",
     "job.json: data.train: missing; data.format \"idx\" needs {\"images\": FILE, \"labels\": "
     "FILE} or data.dir"},
    {"{" MODEL ", \"data\": {\"format\": \"idx\", \"train\": {\"images\": \"a\"}}}",
     "job.json: data.train.labels: missing; the idx format needs \"images\" and \"labels\" "
     "files"},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [3, 32, 32]}, \"data\": {\"format\": "
     "\"idx\", \"dir\": \"/d\"}}",
     "job.json: model.input_shape: idx images have one channel; expected [1, H, W], got [3, "
     "32, 32]"},
    {"{" MODEL ", \"data\": {\"format\": \"cifar10\"}}",
     "job.json: model.input_shape: cifar10 images are [3, 32, 32], got [1, 28, 28]"},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [3, 32, 32]}, \"data\": {\"format\": "
     "\"cifar10\"}}",
     "job.json: data.train: missing; data.format \"cifar10\" needs {\"files\": [FILE, ...]} or "
     "data.dir"},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [3, 32, 32]}, \"data\": {\"format\": "
     "\"cifar10\", \"train\": {\"files\": []}}}",
     "job.json: data.train.files: expected an array of file paths, got an array of 0 values"},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [3, 32, 32]}, \"data\": {\"format\": "
     "\"cifar10\", \"train\": {\"files\": [\"a\", 3]}}}",
     "job.json: data.train.files[1]: expected a file path (a non-empty string), got 3"},
    {"{\"model\": {\"name\": \"lenet\", \"input_shape\": [3, 32, 32]}, \"data\": {\"format\": "
     "\"cifar10\", \"train\": {}}}",
     "job.json: data.train.files: missing; the cifar10 format needs \"files\": [the binary "
     "batch files]"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\"}}",
     "job.json: data.train: missing; data.format \"synthetic\" needs {\"size\": N}"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {}}}",
     "job.json: data.train.size: missing; synthetic data needs \"size\", the number of "
     "samples"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, \"eval\": "
     "{}}}",
     "job.json: data.eval.size: missing; synthetic data needs \"size\", the number of "
     "samples"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 0}}}",
     "job.json: data.train.size: expected an integer >= 1, got 0"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"batch_size\": -3}}",
     "job.json: data.batch_size: expected an integer >= 1, got -3"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"batch_size\": 3000000000}}",
     "job.json: data.batch_size: expected an integer >= 1, got 3000000000"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"batchsize\": 3}}",
     "job.json: data.batchsize: unknown key; did you mean \"batch_size\"?"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"shuffle\": 1}}",
     "job.json: data.shuffle: expected true or false, got 1"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"seed\": -1}}",
     "job.json: data.seed: expected an integer >= 0, got -1"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"workers\": 1000}}",
     "job.json: data.workers: expected an integer in [0, 256], got 1000"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"prefetch\": 0}}",
     "job.json: data.prefetch: expected an integer in [1, 1024], got 0"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"transforms\": {\"normalize\": {\"mean\": [0.5, 0.5, 0.5], \"std\": [0.5]}}}}",
     "job.json: data.transforms.normalize.mean: expected 1 value (one per channel of "
     "model.input_shape), got 3"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"transforms\": {\"normalize\": {\"mean\": [0.5], \"std\": [0.5, 1]}}}}",
     "job.json: data.transforms.normalize.std: expected 1 value (one per channel of "
     "model.input_shape), got 2"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"transforms\": {\"normalize\": {\"mean\": [0.5], \"std\": [0]}}}}",
     "job.json: data.transforms.normalize.std[0]: expected a number > 0, got 0"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"transforms\": {\"normalize\": {\"mean\": [0.5]}}}}",
     "job.json: data.transforms.normalize.std: missing; expected an array of numbers > 0"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"transforms\": {\"random_crop\": {\"size\": 24}}}}",
     "job.json: data.transforms.random_crop.size: expected the network input size "
     "(model.input_shape is [1, 28, 28]), got 24"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"transforms\": {\"random_crop\": {\"padding\": -1}}}}",
     "job.json: data.transforms.random_crop.padding: expected an integer in [0, 4096], got -1"},
    {"{" MODEL ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": 5}, "
     "\"transforms\": {\"flip\": true}}}",
     "job.json: data.transforms.flip: unknown key; the keys here are: random_crop, "
     "random_resized_crop, eval_resize, dct_scaling, horizontal_flip, normalize"},
    {"{" MIN ", \"optimizer\": {\"name\": \"adam\"}}",
     "job.json: optimizer.name: expected one of \"sgd\", \"momentum\", \"adamw\", \"lamb\", got "
     "\"adam\"; did you mean \"adamw\"?"},
    {"{" MIN ", \"optimizer\": {\"lr\": 0}}",
     "job.json: optimizer.lr: expected a number > 0, got 0"},
    {"{" MIN ", \"optimizer\": {\"lr\": -0.1}}",
     "job.json: optimizer.lr: expected a number > 0, got -0.1"},
    {"{" MIN ", \"optimizer\": {\"momentum\": 1}}",
     "job.json: optimizer.momentum: expected a number in [0, 1), got 1"},
    {"{" MIN ", \"optimizer\": {\"momentun\": 0.9}}",
     "job.json: optimizer.momentun: unknown key; did you mean \"momentum\"?"},
    {"{" MIN ", \"optimizer\": {\"LR\": 0.9}}",
     "job.json: optimizer.LR: unknown key; did you mean \"lr\"?"},
    {"{" MIN ", \"optimizer\": {\"momnetum\": 0.9}}",
     "job.json: optimizer.momnetum: unknown key; did you mean \"momentum\"?"},
    {"{" MIN ", \"optimizer\": {\"weightdecay\": 0.9}}",
     "job.json: optimizer.weightdecay: unknown key; did you mean \"weight_decay\"?"},
    {"{" MIN ", \"optimizer\": {\"nesterov\": true}}",
     "job.json: optimizer.nesterov: Nesterov momentum needs optimizer.momentum > 0"},
    {"{" MIN ", \"optimizer\": {\"name\": \"momentum\", \"momentum\": 0}}",
     "job.json: optimizer.momentum: the \"momentum\" optimizer needs momentum > 0; use \"sgd\" "
     "for plain SGD"},
    {"{" MIN ", \"optimizer\": {\"weight_decay\": -1}}",
     "job.json: optimizer.weight_decay: expected a number >= 0, got -1"},
    {"{" MIN ", \"optimizer\": {\"name\": \"adamw\", \"betas\": [0.9, 1]}}",
     "job.json: optimizer.betas[1]: expected a number in [0, 1), got 1"},
    {"{" MIN ", \"optimizer\": {\"name\": \"adamw\", \"betas\": [0.9]}}",
     "job.json: optimizer.betas: expected an array of 2 numbers in [0, 1), got an array of 1 "
     "value"},
    {"{" MIN ", \"optimizer\": {\"name\": \"adamw\", \"eps\": 0}}",
     "job.json: optimizer.eps: expected a number in (0, 1], got 0"},
    {"{" MIN ", \"lr_schedule\": {\"name\": \"linear\"}}",
     "job.json: lr_schedule.name: expected one of \"constant\", \"step\", \"multistep\", "
     "\"cosine\", got \"linear\""},
    {"{" MIN ", \"lr_schedule\": {\"name\": \"step\"}}",
     "job.json: lr_schedule.step_size: missing; the step schedule needs step_size (an integer "
     ">= 1)"},
    {"{" MIN ", \"lr_schedule\": {\"name\": \"step\", \"step_size\": 0}}",
     "job.json: lr_schedule.step_size: expected an integer >= 1, got 0"},
    {"{" MIN ", \"lr_schedule\": {\"name\": \"step\", \"step_size\": 3, \"gamma\": 0}}",
     "job.json: lr_schedule.gamma: expected a number in (0, 1], got 0"},
    {"{" MIN ", \"lr_schedule\": {\"name\": \"multistep\"}}",
     "job.json: lr_schedule.milestones: missing; the multistep schedule needs milestones (an "
     "array of increasing integers >= 1)"},
    {"{" MIN ", \"lr_schedule\": {\"name\": \"multistep\", \"milestones\": [30, 60, 60]}}",
     "job.json: lr_schedule.milestones[2]: expected a value greater than the previous one "
     "(60), got 60"},
    {"{" MIN ", \"lr_schedule\": {\"name\": \"multistep\", \"milestones\": []}}",
     "job.json: lr_schedule.milestones: expected an array of integers >= 1, strictly "
     "increasing, got an array of 0 values"},
    {"{" MIN ", \"lr_schedule\": {\"name\": \"multistep\", \"unit\": \"iteration\", "
     "\"milestones\": [3]}}",
     "job.json: lr_schedule.unit: expected one of \"epoch\", \"step\", got \"iteration\""},
    {"{" MIN ", \"lr_schedule\": {\"warmup_steps\": 10, \"warmup_epochs\": 1}}",
     "job.json: lr_schedule.warmup_epochs: give warmup_steps or warmup_epochs, not both"},
    {"{" MIN ", \"lr_schedule\": {\"warmup_steps\": -10}}",
     "job.json: lr_schedule.warmup_steps: expected an integer >= 0, got -10"},
    {"{" MIN ", \"optimizer\": {\"lr\": 0.1}, \"lr_schedule\": {\"name\": \"cosine\", "
     "\"min_lr\": 0.5}}",
     "job.json: lr_schedule.min_lr: expected at most optimizer.lr (0.1), got 0.5"},
    {"{" MIN ", \"train\": {\"epochs\": 0}}",
     "job.json: train: epochs and max_steps are both 0; set one of them so training ends"},
    {"{" MIN ", \"train\": {\"epochs\": -1}}",
     "job.json: train.epochs: expected an integer in [0, 1000000], got -1"},
    {"{" MIN ", \"train\": {\"max_steps\": 1.5}}",
     "job.json: train.max_steps: expected an integer >= 0, got 1.5"},
    {"{" MIN ", \"train\": {\"log_every\": 0}}",
     "job.json: train.log_every: expected an integer >= 1, got 0"},
    {"{" MIN ", \"train\": {\"label_smoothing\": 1}}",
     "job.json: train.label_smoothing: expected a number in [0, 1), got 1"},
    {"{" MIN ", \"train\": {\"threads\": -1}}",
     "job.json: train.threads: expected an integer in [0, 4096], got -1"},
    {"{" MIN ", \"train\": {\"epoch\": 3}}",
     "job.json: train.epoch: unknown key; did you mean \"epochs\"?"},
    {"{" MIN ", \"parallel\": {\"gradients_mean\": \"yes\"}}",
     "job.json: parallel.gradients_mean: expected true or false, got \"yes\""},
    {"{" MIN ", \"parallel\": {\"all_reduce_fusion_config\": [85, 40]}}",
     "job.json: parallel.all_reduce_fusion_config[1]: expected a value greater than the "
     "previous one (85), got 40"},
    {"{" MIN ", \"parallel\": {\"all_reduce_fusion_config\": [0, 40]}}",
     "job.json: parallel.all_reduce_fusion_config[0]: expected an integer >= 1, got 0"},
    {"{" MIN ", \"parallel\": {\"all_reduce_fusion_config\": [20, 40], \"bucket_cap_mb\": 25}}",
     "job.json: parallel.bucket_cap_mb: cannot be combined with "
     "parallel.all_reduce_fusion_config, which sets the buckets itself; remove one of them"},
    {"{" MIN ", \"parallel\": {\"bucket_cap_mb\": 0}}",
     "job.json: parallel.bucket_cap_mb: expected a number in (0, 65536], got 0"},
    {"{" MIN ", \"parallel\": {\"grad_accumulation_step\": 0}}",
     "job.json: parallel.grad_accumulation_step: expected an integer in [1, 65536], got 0"},
    {"{" MIN ", \"parallel\": {\"parallel_optimizer_config\": {\"threshold\": 1}}}",
     "job.json: parallel.parallel_optimizer_config.threshold: unknown key; the keys here are: "
     "parallel_optimizer_threshold"},
    {"{" MIN ", \"precision\": {\"mode\": \"O3\"}}",
     "job.json: precision.mode: \"O3\" is not supported: it keeps the weights themselves in "
     "fp16; use \"O2\" or \"fp16\" (fp16 compute, fp32 master weights)"},
    {"{" MIN ", \"precision\": {\"mode\": \"o2\"}}",
     "job.json: precision.mode: expected one of \"fp32\", \"tf32\", \"bf16\", \"fp16\", "
     "\"O0\", \"O1\", \"O2\", got \"o2\"; did you mean \"O2\"?"},
    {"{" MIN ", \"precision\": {\"loss_scale\": \"static\"}}",
     "job.json: precision.loss_scale: expected \"dynamic\" or a number in (0, 1e+30], got "
     "\"static\""},
    {"{" MIN ", \"precision\": {\"loss_scale\": 0}}",
     "job.json: precision.loss_scale: expected \"dynamic\" or a number in (0, 1e+30], got 0"},
    {"{" MIN ", \"precision\": {\"mode\": \"fp16\", \"growth_interval\": 0}}",
     "job.json: precision.growth_interval: expected an integer >= 1, got 0"},
    {"{" MIN ", \"precision\": {\"mode\": \"fp16\"}, \"device\": {\"kind\": \"cpu\"}}",
     "job.json: precision.mode: fp16 needs a GPU and device.kind is \"cpu\"; use \"bf16\" or "
     "\"fp32\" on CPUs"},
    {"{" MIN ", \"checkpoint\": {\"keep\": 0}}",
     "job.json: checkpoint.keep: expected an integer in [1, 1000000], got 0"},
    {"{" MIN ", \"checkpoint\": {\"dir\": \"\"}}",
     "job.json: checkpoint.dir: expected a non-empty string, got \"\""},
    {"{" MIN ", \"checkpoint\": {\"resume\": false}}",
     "job.json: checkpoint.resume: expected \"auto\", \"never\" or the path of a checkpoint, "
     "got false"},
    {"{" MIN ", \"checkpoint\": {\"every_steps\": -5}}",
     "job.json: checkpoint.every_steps: expected an integer >= 0, got -5"},
    {"{" MIN ", \"device\": {\"kind\": \"ascend\"}}",
     "job.json: device.kind: expected one of \"auto\", \"cpu\", \"cuda\", \"gpu\", got "
     "\"ascend\""},
    {"{" MIN ", \"device\": {\"allow_shared_gpus\": true}}",
     "job.json: device.allow_shared_gpus: unknown key; did you mean \"allow_shared_gpu\"?"},
    {"{" MIN ", \"output\": {\"dir\": \"run.%U\"}}",
     "job.json: output.dir: \"%U\" is not expanded; only %j (job id), %s (step id), %n (node "
     "name), "
     "%u (user name) and %% are"},
    {"{" MIN ", \"output\": {\"dir\": \"run.%\"}}",
     "job.json: output.dir: \"%\" is not expanded; only %j (job id), %s (step id), %n (node name), "
     "%u (user name) and %% are"},
    {"{" MIN ", \"output\": {\"console\": \"rank1\"}}",
     "job.json: output.console: expected one of \"rank0\", \"all\", \"none\", got \"rank1\"; "
     "did you mean \"rank0\"?"},
    {"{" MIN ", \"output\": null}", "job.json: output: expected an object, got null"},
    {"{" MIN ", \"timeouts\": {\"rendezvous_s\": 0}}",
     "job.json: timeouts.rendezvous_s: expected a number in [1, 1000000], got 0"},
    {"{" MIN ", \"timeouts\": {\"collective_s\": 1e-300}}",
     "job.json: timeouts.collective_s: expected a number in [1, 1000000], got 1e-300"},
    {"{" MIN ", \"timeouts\": {\"collective_s\": 1e7}}",
     "job.json: timeouts.collective_s: expected a number in [1, 1000000], got 10000000.0"},
    {"{" MIN ", \"seed\": 1e30}", "job.json: seed: expected an integer >= 0, got 1e+30"},
    {"{" MIN ", \"description\": 3}", "job.json: description: expected a string, got 3"},
    {"{" MIN ", \"comment\": \"x\"}",
     "job.json: comment: unknown key; the keys here are: description, seed, model, data, "
     "optimizer, lr_schedule, train, parallel, precision, checkpoint, device, output, "
     "network, mindspore, timeouts"},
    {"{" MIN ", \"x\\n\\\"\": 1}",
     "job.json: x\\u000a\\\": unknown key; the keys here are: description, seed, model, data, "
     "optimizer, lr_schedule, train, parallel, precision, checkpoint, device, output, "
     "network, mindspore, timeouts"},
    {"{" MIN ", \"optimizer\": {\"lr\": 0.1, \"lr\": 0.2}}",
     "job.json: line 1 column 115: invalid JSON: duplicate object key near '\"lr\"'"},
    {"{" MIN ", \"seed\": 99999999999999999999}",
     "job.json: line 1 column 114: invalid JSON: too big integer near "
     "'99999999999999999999'"},
    {"{\n  \"model\": {\n    \"name\" \"lenet\"\n  }\n}",
     "job.json: line 3 column 18: invalid JSON: ':' expected near '\"lenet\"'"},
    {"{\"model\": ", "job.json: line 1 column 10: invalid JSON: unexpected token near end of "
		     "file"},
    {"[" MIN "]", "job.json: line 1 column 9: invalid JSON: ']' expected near ':'"},
    {"[1, 2]", "job.json: expected a JSON object at the top level, got an array of 2 values"},
    {"\"x\"", "job.json: expected a JSON object at the top level, got \"x\""},
    {"", "job.json: empty file; expected a JSON object (see dptrain.json(5))"},
    {" \n\t ", "job.json: empty file; expected a JSON object (see dptrain.json(5))"},
    {"{} {}", "job.json: line 1 column 4: invalid JSON: end of file expected near '{'"},
};

static void test_bad(void)
{
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cfg c;
		int rv = parse(&c, bad[i].json);
		ok(rv == -1, "bad config %zu is refused", i);
		is(err.text, bad[i].err, "bad config %zu: message", i);
		ok(c.path == NULL && c.model.hidden.v == NULL && c.output.dir == NULL,
		   "bad config %zu: nothing left to free", i);
		cfg_free(&c);
	}
}

/* Keys the chosen options ignore: a warning, and the default. */
static void test_warnings(void)
{
	struct cfg c;

	ok(parse(&c, "{" MIN ", \"optimizer\": {\"name\": \"adamw\", \"momentum\": 0.9, "
		     "\"nesterov\": true}}") == 0,
	   "adamw with sgd keys parses: %s", err.text);
	is_int(c.nwarnings, 2, "two warnings");
	if (c.nwarnings == 2) {
		is(c.warnings[0],
		   "optimizer.momentum: ignored: only used by optimizer.name \"sgd\" and "
		   "\"momentum\"",
		   "momentum ignored");
		is(c.warnings[1],
		   "optimizer.nesterov: ignored: only used by optimizer.name \"sgd\" and "
		   "\"momentum\"",
		   "nesterov ignored");
	}
	ok(c.optimizer.momentum == 0 && !c.optimizer.nesterov, "the ignored keys hold defaults");
	cfg_free(&c);

	ok(parse(&c, "{\"model\": {\"name\": \"mlp\", \"stem\": \"imagenet\", \"input_shape\": "
		     "[1, 128, 128]}, " DATA "}") == 0,
	   "mlp with a stem");
	is_int(c.nwarnings, 1, "one warning");
	if (c.nwarnings == 1)
		is(c.warnings[0], "model.stem: ignored: only the resnets have a stem", "stem");
	is_int(c.model.stem, CFG_STEM_IMAGENET, "an ignored stem still gets the H-based default");
	cfg_free(&c);

	ok(parse(&c, "{\"model\": {\"name\": \"lenet\", \"hidden\": [3]}, \"data\": {\"format\": "
		     "\"synthetic\", \"dir\": \"x\", \"train\": {\"size\": 4, \"images\": \"i\"}}, "
		     "\"lr_schedule\": {\"milestones\": [3], \"min_lr\": 0.1, \"gamma\": 0.5, "
		     "\"unit\": \"step\", \"step_size\": 3}, \"parallel\": {"
		     "\"parallel_optimizer_config\": {\"parallel_optimizer_threshold\": 1}}, "
		     "\"precision\": {\"growth_interval\": 5, \"initial_loss_scale\": 8}}") == 0,
	   "many ignored keys: %s", err.text);
	static const char *const want[] = {
	    "model.hidden: ignored: only used by model.name \"mlp\"",
	    "data.dir: ignored: synthetic data has no files",
	    "data.train.images: ignored: only used by data.format \"idx\"",
	    "lr_schedule.unit: ignored: only used by lr_schedule.name \"step\" and \"multistep\"",
	    "lr_schedule.step_size: ignored: only used by lr_schedule.name \"step\"",
	    "lr_schedule.gamma: ignored: only used by lr_schedule.name \"step\" and "
	    "\"multistep\"",
	    "lr_schedule.milestones: ignored: only used by lr_schedule.name \"multistep\"",
	    "lr_schedule.min_lr: ignored: only used by lr_schedule.name \"cosine\"",
	    "parallel.parallel_optimizer_config: ignored: only used when "
	    "parallel.enable_parallel_optimizer is true",
	    "precision.initial_loss_scale: ignored: only used with precision.loss_scale "
	    "\"dynamic\"",
	    "precision.growth_interval: ignored: only used with precision.loss_scale "
	    "\"dynamic\"",
	};
	is_int(c.nwarnings, 11, "eleven warnings, in schema order");
	for (int i = 0; i < c.nwarnings && i < 11; i++)
		is(c.warnings[i], want[i], "warning %d", i);
	ok(c.data.dir == NULL && c.data.train.images == NULL && c.lr_schedule.gamma == 0.1 &&
	       c.lr_schedule.milestones.n == 0 && c.model.hidden.n == 2 &&
	       c.parallel.parallel_optimizer_config.parallel_optimizer_threshold == 64 &&
	       c.precision.growth_interval == 2000,
	   "all of them hold their defaults");
	cfg_free(&c);

	ok(parse(&c, "{" MIN ", \"train\": {\"epochs\": 3, \"max_steps\": 100}, \"lr_schedule\": "
		     "{\"warmup_epochs\": 3}}") == 0,
	   "long warmup");
	is_int(c.nwarnings, 1, "one warning");
	if (c.nwarnings == 1)
		is(c.warnings[0],
		   "lr_schedule.warmup_epochs: 3 is not shorter than train.epochs (3): the "
		   "learning "
		   "rate never reaches optimizer.lr",
		   "warmup_epochs >= epochs");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"train\": {\"max_steps\": 100}, \"lr_schedule\": "
		     "{\"warmup_steps\": 200}}") == 0,
	   "long warmup steps");
	is_int(c.nwarnings, 1, "one warning");
	if (c.nwarnings == 1)
		is(c.warnings[0],
		   "lr_schedule.warmup_steps: 200 is not shorter than train.max_steps (100): the "
		   "learning rate never reaches optimizer.lr",
		   "warmup_steps >= max_steps");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"precision\": {\"mode\": \"tf32\"}, \"device\": {\"kind\": "
		     "\"cpu\"}}") == 0,
	   "tf32 on cpu");
	ok(c.nwarnings == 1 &&
	       strcmp(c.warnings[0], "precision.mode: tf32 is a GPU mode; CPUs compute in fp32") ==
		   0,
	   "tf32 on a CPU is a warning");
	cfg_free(&c);
	ok(parse(&c, "{" MIN ", \"precision\": {\"mode\": \"bf16\"}, \"device\": {\"kind\": "
		     "\"cpu\"}}") == 0,
	   "bf16 on cpu");
	is_int(c.nwarnings, 0, "bf16 on a CPU is no warning (a CPU mode where the CPU has it)");
	cfg_free(&c);
}

static void test_overrides(void)
{
	struct cfg c;
	char cwd[PATH_MAX], want[PATH_MAX + 64];

	{
		char *ov[] = {"train.epochs=1",
			      "data.batch_size=64",
			      "model.name=resnet18",
			      "optimizer.name=adamw",
			      "optimizer.betas=[0.9,0.99]",
			      "description=a b=c",
			      "output.dir=\"7\"",
			      "seed=5"};
		ok(parse_ov(&c, "{" MIN ", \"train\": {\"epochs\": 9}}", 8, ov) == 0,
		   "overrides apply: %s", err.text);
		is_int(c.train.epochs, 1, "train.epochs=1 replaces 9");
		is_int(c.data.batch_size, 64, "data.batch_size=64");
		is_int(c.model.name, CFG_MODEL_RESNET18, "model.name=resnet18 (a bare string)");
		ok(c.optimizer.betas[0] == 0.9 && c.optimizer.betas[1] == 0.99, "betas array");
		is(c.description, "a b=c", "the value is everything after the first =");
		is(c.output.dir, "7", "a JSON string that looks like a number");
		is_int(c.seed, 5, "top-level key");
		is_int(c.data.seed, 5, "derived defaults see overridden values");
		cfg_free(&c);
	}
	{
		char *ov[] = {"optimizer.momentum=null", "lr_schedule.name=cosine"};
		ok(parse_ov(&c, "{" MIN ", \"optimizer\": {\"momentum\": 0.5}}", 2, ov) == 0,
		   "null override: %s", err.text);
		is_double(c.optimizer.momentum, 0, 0, "key=null restores the default");
		is_int(c.lr_schedule.name, CFG_LR_COSINE, "a section absent from the file");
		cfg_free(&c);
	}
	{
		char *ov[] = {"data.transforms={\"horizontal_flip\": true}"};
		ok(parse_ov(&c,
			    "{" MODEL
			    ", \"data\": {\"format\": \"synthetic\", \"train\": {\"size\": "
			    "5}, \"transforms\": {\"random_crop\": {}}}}",
			    1, ov) == 0,
		   "object override: %s", err.text);
		ok(c.data.transforms.horizontal_flip && !c.data.transforms.random_crop.enabled,
		   "an object value replaces the whole object");
		cfg_free(&c);
	}
	{
		char *ov[] = {"model.init=w/init.safetensors"};
		ok(parse_ov(&c, "{" MIN "}", 1, ov) == 0, "path override");
		ok(getcwd(cwd, sizeof(cwd)) != NULL, "getcwd");
		snprintf(want, sizeof(want), "%s/w/init.safetensors", cwd);
		is(c.model.init, want, "a relative path in an override resolves against the cwd");
		cfg_free(&c);
	}
	static const struct {
		const char *ov;
		const char *err;
	} bad_ov[] = {
	    {"optimizer.momentun=0.9", "job.json: optimizer.momentun: unknown key; did you mean "
				       "\"momentum\"? (from the override "
				       "optimizer.momentun=0.9)"},
	    {"optimzer.lr=0.1", "job.json: optimzer: unknown key; did you mean \"optimizer\"? "
				"(from the override optimzer.lr=0.1)"},
	    {"data.batch_size=-3", "job.json: data.batch_size: expected an integer >= 1, got -3 "
				   "(from the override data.batch_size=-3)"},
	    {"data.batch_size=many", "job.json: data.batch_size: expected an integer >= 1, got "
				     "\"many\" (from the override data.batch_size=many)"},
	    {"optimizer.betas=[0.9,", "job.json: optimizer.betas: expected an array of 2 numbers "
				      "in [0, 1), got \"[0.9,\" (from the override "
				      "optimizer.betas=[0.9,)"},
	    {"train.epochs.x=1", "job.json: train.epochs: is an integer in [0, 1000000], not an "
				 "object: it has no key \"x\" (from the override "
				 "train.epochs.x=1)"},
	    {"model.name=null", "job.json: model.name: missing; expected one of \"mlp\", "
				"\"lenet\", \"resnet18\", \"resnet34\", \"resnet50\", "
				"\"resnet101\", \"resnet152\" (from the override model.name=null)"},
	    {"train..epochs=1", "job.json: bad override \"train..epochs=1\": expected "
				"path.to.key=VALUE"},
	    {"train.epochs.=1", "job.json: bad override \"train.epochs.=1\": expected "
				"path.to.key=VALUE"},
	    {"=1", "job.json: bad override \"=1\": expected path.to.key=VALUE"},
	    {"train.epochs", "job.json: bad override \"train.epochs\": expected "
			     "path.to.key=VALUE"},
	    {"bogus=1", "job.json: bogus: unknown key; the keys here are: description, seed, "
			"model, data, optimizer, lr_schedule, train, parallel, precision, "
			"checkpoint, device, output, network, mindspore, timeouts (from the "
			"override bogus=1)"},
	    {"description=\xff", "job.json: description: the value is not valid UTF-8 (from the "
				 "override description=\xff)"},
	};
	for (size_t i = 0; i < sizeof(bad_ov) / sizeof(bad_ov[0]); i++) {
		char *ov[] = {(char *)bad_ov[i].ov};
		ok(parse_ov(&c, "{" MIN "}", 1, ov) == -1, "bad override %s is refused",
		   bad_ov[i].ov);
		is(err.text, bad_ov[i].err, "bad override %s: message", bad_ov[i].ov);
		cfg_free(&c);
	}
	{
		/* The file's error comes first when the override cannot reach inside. */
		char *ov[] = {"optimizer.lr=0.1"};
		ok(parse_ov(&c, "{" MIN ", \"optimizer\": 3}", 1, ov) == -1, "override into a "
									     "non-object");
		is(err.text, "job.json: optimizer: expected an object, got 3",
		   "names the file's value");
		cfg_free(&c);
	}
	{
		char *ov[] = {"train.epochs=2", "train.epochs=3"};
		ok(parse_ov(&c, "{" MIN "}", 2, ov) == 0, "the same key twice");
		is_int(c.train.epochs, 3, "the last override wins");
		cfg_free(&c);
	}
}

static void test_paths(void)
{
	struct cfg c;
	char dir[] = "/tmp/dptrain-cfg-XXXXXX", p[PATH_MAX + 64], want[2 * PATH_MAX];
	const char *json = "{" MODEL ", \"data\": {\"format\": \"idx\", \"train\": {\"images\": "
			   "\"a/./b//c.gz\", \"labels\": \"/abs/l\"}, \"eval\": {\"images\": "
			   "\"../up/x\", \"labels\": \"./y/\"}}, \"checkpoint\": {\"dir\": "
			   "\"ck\", \"resume\": \"ck/step-5\"}, \"output\": {\"dir\": \"out/%j\"}}";

	ok(cfg_parse(&c, json, strlen(json), "/cfgtest/jobs/job.json", 0, NULL, &err) == 0,
	   "paths parse: %s", err.text);
	is(c.path, "/cfgtest/jobs/job.json", "c->path");
	is(c.data.train.images, "/cfgtest/jobs/a/b/c.gz", "relative to the config's directory");
	is(c.data.train.labels, "/abs/l", "absolute paths stay");
	is(c.data.eval.images, "/cfgtest/jobs/../up/x", ".. is kept (symbolic links)");
	is(c.data.eval.labels, "/cfgtest/jobs/y", "trailing / and ./ dropped");
	is(c.checkpoint.dir, "ck", "checkpoint.dir stays as given");
	is(c.output.dir, "out/%j", "output.dir stays as given");
	ok(c.checkpoint.resume == CFG_RESUME_PATH, "resume path");
	is(c.checkpoint.resume_path, "/cfgtest/jobs/ck/step-5", "checkpoint.resume resolves");
	cfg_free(&c);

	ok(cfg_parse(&c, json, strlen(json), "rel/job.json", 0, NULL, &err) == 0,
	   "relative config name");
	ok(getcwd(p, PATH_MAX) != NULL, "getcwd");
	snprintf(want, sizeof(want), "%s/rel/a/b/c.gz", p);
	is(c.data.train.images, want, "a relative config name resolves against the cwd");
	cfg_free(&c);

	/* data.dir: the standard names, the plain file when it exists, else .gz. */
	ok(mkdtemp(dir) != NULL, "temporary directory");
	snprintf(p, sizeof(p), "%s/train-images-idx3-ubyte", dir);
	FILE *f = fopen(p, "w");
	ok(f != NULL, "create %s", p);
	if (f)
		fclose(f);
	snprintf(p, sizeof(p), "%s/job.json", dir);
	const char *dj = "{" MODEL ", \"data\": {\"format\": \"idx\", \"dir\": \".\"}}";
	ok(cfg_parse(&c, dj, strlen(dj), p, 0, NULL, &err) == 0, "idx dir: %s", err.text);
	is(c.data.dir, dir, "data.dir resolves");
	snprintf(want, sizeof(want), "%s/train-images-idx3-ubyte", dir);
	is(c.data.train.images, want, "the plain file when it exists");
	snprintf(want, sizeof(want), "%s/train-labels-idx1-ubyte.gz", dir);
	is(c.data.train.labels, want, "else the .gz name");
	snprintf(want, sizeof(want), "%s/t10k-images-idx3-ubyte.gz", dir);
	ok(c.data.eval.present, "eval from dir");
	is(c.data.eval.images, want, "eval images");
	snprintf(want, sizeof(want), "%s/t10k-labels-idx1-ubyte.gz", dir);
	is(c.data.eval.labels, want, "eval labels");
	cfg_free(&c);

	const char *dj2 = "{" MODEL ", \"data\": {\"format\": \"idx\", \"dir\": \"/nowhere\", "
			  "\"eval\": {\"images\": \"e\", \"labels\": \"l\"}}}";
	ok(cfg_parse(&c, dj2, strlen(dj2), p, 0, NULL, &err) == 0, "dir + eval");
	is(c.data.train.images, "/nowhere/train-images-idx3-ubyte.gz", "train from dir");
	snprintf(want, sizeof(want), "%s/e", dir);
	is(c.data.eval.images, want, "an explicit eval wins over dir");
	cfg_free(&c);

	const char *cj = "{\"model\": {\"name\": \"resnet18\", \"input_shape\": [3, 32, 32]}, "
			 "\"data\": {\"format\": \"cifar10\", \"dir\": \"/c\"}}";
	ok(cfg_parse(&c, cj, strlen(cj), p, 0, NULL, &err) == 0, "cifar dir: %s", err.text);
	ok(c.data.train.files.n == 5 && c.data.eval.files.n == 1, "5 train batches, 1 test");
	if (c.data.train.files.n == 5 && c.data.eval.files.n == 1) {
		is(c.data.train.files.v[0], "/c/data_batch_1.bin", "first batch");
		is(c.data.train.files.v[4], "/c/data_batch_5.bin", "last batch");
		is(c.data.eval.files.v[0], "/c/test_batch.bin", "test batch");
	}
	cfg_free(&c);

	snprintf(p, sizeof(p), "%s/train-images-idx3-ubyte", dir);
	unlink(p);
	rmdir(dir);
}

static void test_load(void)
{
	struct cfg c;
	char dir[] = "/tmp/dptrain-cfg-XXXXXX", p[PATH_MAX + 64], want[2 * PATH_MAX];
	FILE *f;

	ok(mkdtemp(dir) != NULL, "temporary directory");
	ok(cfg_load(&c, "/nonexistent/x.json", 0, NULL, &err) == -1, "missing file");
	is(err.text, "/nonexistent/x.json: cannot open: No such file or directory",
	   "missing: message");
	ok(cfg_load(&c, dir, 0, NULL, &err) == -1, "a directory");
	snprintf(want, sizeof(want), "%s: cannot read: Is a directory", dir);
	is(err.text, want, "directory: message");
	ok(cfg_load(&c, "", 0, NULL, &err) == -1, "empty name");
	is(err.text, "no config file given", "empty name: message");

	/* A FIFO whose writer never writes (it is held open here, so a read would block for
	 * ever), and an endless device: refused at once, neither is read. */
	snprintf(p, sizeof(p), "%s/fifo.json", dir);
	if (mkfifo(p, 0600) == 0) {
		int rfd = open(p, O_RDONLY | O_NONBLOCK), wfd = open(p, O_WRONLY | O_NONBLOCK);
		ok(cfg_load(&c, p, 0, NULL, &err) == -1, "a FIFO with a silent writer");
		snprintf(want, sizeof(want),
			 "%s: not a regular file (a job config must be a file, not a FIFO, device "
			 "or socket)",
			 p);
		is(err.text, want, "FIFO: message");
		if (wfd >= 0)
			close(wfd);
		if (rfd >= 0)
			close(rfd);
		unlink(p);
	} else {
		ok(0, "mkfifo %s: %s", p, strerror(errno));
	}
	ok(cfg_load(&c, "/dev/zero", 0, NULL, &err) == -1, "/dev/zero");
	is(err.text,
	   "/dev/zero: not a regular file (a job config must be a file, not a FIFO, device or "
	   "socket)",
	   "/dev/zero: message");

	snprintf(p, sizeof(p), "%s/empty.json", dir);
	f = fopen(p, "w");
	if (f)
		fclose(f);
	ok(cfg_load(&c, p, 0, NULL, &err) == -1, "empty file");
	snprintf(want, sizeof(want), "%s: empty file; expected a JSON object (see dptrain.json(5))",
		 p);
	is(err.text, want, "empty: message");
	unlink(p);

	snprintf(p, sizeof(p), "%s/big.json", dir);
	f = fopen(p, "w");
	ok(f && fseek(f, CFG_MAX_FILE_SIZE + 1, SEEK_SET) == 0 && fputc(' ', f) != EOF,
	   "a sparse file larger than the limit");
	if (f)
		fclose(f);
	ok(cfg_load(&c, p, 0, NULL, &err) == -1, "too large");
	snprintf(want, sizeof(want), "%s: too large: a config is at most %u bytes", p,
		 CFG_MAX_FILE_SIZE);
	is(err.text, want, "too large: message");
	unlink(p);

	snprintf(p, sizeof(p), "%s/job.json", dir);
	f = fopen(p, "w");
	if (f) {
		fputs("{" MODEL ", \"data\": {\"format\": \"idx\", \"train\": {\"images\": \"i\", "
		      "\"labels\": \"l\"}}}",
		      f);
		fclose(f);
	}
	char *ov[] = {"train.epochs=4"};
	ok(cfg_load(&c, p, 1, ov, &err) == 0, "cfg_load: %s", err.text);
	is(c.path, p, "c->path is the file");
	snprintf(want, sizeof(want), "%s/i", dir);
	is(c.data.train.images, want, "inputs resolve against the file's directory");
	is_int(c.train.epochs, 4, "overrides apply to loaded files");
	cfg_free(&c);

	/* No error to fill is fine (a caller that only wants the verdict). */
	ok(cfg_load(&c, "/nonexistent/x.json", 0, NULL, NULL) == -1, "no err: load fails");
	ok(cfg_parse(&c, "{}", 2, "x", 0, NULL, NULL) == -1, "no err: parse fails");
	unlink(p);
	rmdir(dir);
}

/* config_models.def is the one list: every model parses, prints back its name, and is in the man
 * page's list of model.name. */
static void test_models(void)
{
	const char *src = getenv("DPTRAIN_SRC_DIR");
	char path[PATH_MAX], line[1024], json[512];
	FILE *f;
	int m, listed = 0, parsed = 0, n = 0;

	snprintf(path, sizeof(path), "%s/doc/dptrain.json.5", src && *src ? src : ".");
	f = fopen(path, "r");
	if (!ok(f != NULL, "the man page %s is there", path))
		return;
	/* the line after "One of" under .B model.name */
	int state = 0;
	while (fgets(line, sizeof(line), f)) {
		if (state == 0 && strncmp(line, ".B model.name", 13) == 0)
			state = 1;
		else if (state == 1 && strncmp(line, "One of", 6) == 0)
			state = 2;
		else if (state == 2)
			break;
	}
	fclose(f);
	for (m = 0; cfg_model_string((enum cfg_model_name)m); m++) {
		const char *name = cfg_model_string((enum cfg_model_name)m);
		char quoted[64];
		struct cfg c;

		n++;
		snprintf(quoted, sizeof(quoted), " %s ", name);
		listed += state == 2 && strstr(line, quoted) != NULL;
		snprintf(json, sizeof(json), "{\"model\": {\"name\": \"%s\"}, " DATA "}", name);
		if (parse(&c, json) == 0) {
			parsed += (int)c.model.name == m &&
				  strcmp(cfg_model_string(c.model.name), name) == 0;
			cfg_free(&c);
		}
	}
	ok(n > 0, "config_models.def lists %d models", n);
	is_int(parsed, n, "every model of config_models.def parses as model.name and prints back");
	is_int(listed, n,
	       "dptrain.json(5) lists every model of config_models.def under model.name");
	ok(cfg_model_string((enum cfg_model_name)n) == NULL && cfg_model_family(-1) == -1,
	   "no model past the list");
	is_int(cfg_model_arg(CFG_MODEL_RESNET50), 50, "a resnet's depth comes with it");
}

/* cfg_load_launch: a config for any command needs no model or data; what it has is checked. */
static void test_launch_only(void)
{
	char dir[] = "/tmp/dptrain-cfg-launch-XXXXXX", p[PATH_MAX];
	struct cfg c;
	static const struct {
		const char *json, *err; /* err NULL: valid */
		int trainer;
	} cases[] = {
	    {"{}", NULL, 0},
	    {"{\"output\": {\"dir\": \"out/%j\", \"per_rank_logs\": false}, \"timeouts\": "
	     "{\"rendezvous_s\": 30}, \"device\": {\"kind\": \"cpu\"}}",
	     NULL, 0},
	    {"{" MIN "}", NULL, 1},
	    {"{" MODEL "}", NULL, 0},
	    {"{" DATA "}", NULL, 0},
	    {"{\"output\": {\"dir\": 5}}", "output.dir: expected a non-empty string, got 5", 0},
	    {"{\"timeouts\": {\"rendezvous_s\": -1}}", "timeouts.rendezvous_s: ", 0},
	    {"{\"model\": {\"name\": \"nope\"}}", "model.name: expected one of \"mlp\"", 0},
	    {"{\"modle\": {}}", "modle: unknown key; did you mean \"model\"?", 0},
	    {"{" MODEL ", \"data\": {\"format\": \"synthetic\"}}", "data.train: missing", 0},
	};
	if (!mkdtemp(dir))
		bail_out("mkdtemp: %s", strerror(errno));
	snprintf(p, sizeof(p), "%s/launch.json", dir);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		FILE *f = fopen(p, "w");
		if (!f)
			bail_out("%s: %s", p, strerror(errno));
		fputs(cases[i].json, f);
		fclose(f);
		int rv = cfg_load_launch(&c, p, &err);
		if (!cases[i].err) {
			ok(rv == 0, "launch-only %zu is valid: %s", i, rv ? err.text : "");
			ok(rv == 0 && c.trainer == cases[i].trainer, "launch-only %zu: trainer %d",
			   i, cases[i].trainer);
			if (rv == 0)
				cfg_free(&c);
		} else {
			ok(rv == -1, "launch-only %zu is refused", i);
			like(err.text, cases[i].err, "launch-only %zu: message", i);
		}
		/* the bundled trainer's reading still wants both */
		int full = cfg_load(&c, p, 0, NULL, &err);
		ok(full == (cases[i].trainer ? 0 : -1), "cfg_load %zu: %s", i,
		   full ? err.text : "valid");
		if (full == 0)
			cfg_free(&c);
	}
	ok(cfg_load(&c, p, 0, NULL, &err) == -1, "cfg_load of a config without model");
	ok(cfg_is_trainer_command("dptrain") && cfg_is_trainer_command("/opt/bin/dptrain") &&
	       !cfg_is_trainer_command("python3") && !cfg_is_trainer_command("dptrain-run") &&
	       !cfg_is_trainer_command("/opt/dptrain/bin/train"),
	   "the bundled trainer is dptrain or a path ending in /dptrain");
	unlink(p);
	rmdir(dir);
}

/* imagefolder and shards: torchvision's ImageNet recipe unless told otherwise, and the checks
 * of what only they have. */
static void test_image_formats(void)
{
	struct cfg c;
	const char *r224 = "\"model\": {\"name\": \"resnet18\", \"input_shape\": [3, 224, 224]}";
	char j[1024];

	snprintf(j, sizeof(j), "{%s, \"data\": {\"format\": \"imagefolder\", \"dir\": \"/d/in\"}}",
		 r224);
	ok(parse(&c, j) == 0, "imagefolder with data.dir: %s", err.text);
	is(c.data.train.root, "/d/in/train", "data.dir gives train/");
	is(c.data.eval.root, "/d/in/val", "and val/ (ImageNet's layout)");
	ok(c.data.transforms.random_resized_crop.enabled &&
	       c.data.transforms.random_resized_crop.scale.n == 2 &&
	       c.data.transforms.random_resized_crop.scale.v[0] == 0.08 &&
	       c.data.transforms.random_resized_crop.scale.v[1] == 1 &&
	       c.data.transforms.random_resized_crop.ratio.v[0] == 0.75 &&
	       c.data.transforms.random_resized_crop.ratio.v[1] == 4.0 / 3.0,
	   "RandomResizedCrop's defaults: scale [0.08, 1], ratio [3/4, 4/3]");
	ok(c.data.transforms.horizontal_flip && c.data.transforms.normalize.enabled &&
	       c.data.transforms.normalize.mean.n == 3 &&
	       c.data.transforms.normalize.std.v[2] == 0.225,
	   "flip and ImageNet's normalisation by default");
	is_int(c.data.transforms.eval_resize, 256, "eval_resize 256 for 224");
	ok(c.data.transforms.dct_scaling && c.data.max_bad == 100, "dct_scaling on, max_bad 100");
	cfg_free(&c);

	snprintf(j, sizeof(j),
		 "{\"model\": {\"name\": \"lenet\", \"input_shape\": [3, 32, 32]}, \"data\": "
		 "{\"format\": \"shards\", \"train\": {\"root\": \"/s\"}, \"transforms\": "
		 "{\"horizontal_flip\": false, \"random_resized_crop\": {\"scale\": [0.5, 1]}}}}");
	ok(parse(&c, j) == 0, "shards with a root: %s", err.text);
	ok(!c.data.transforms.horizontal_flip &&
	       c.data.transforms.random_resized_crop.scale.v[0] == 0.5 &&
	       c.data.transforms.random_resized_crop.ratio.n == 2,
	   "flip false and scale given win; ratio takes its default");
	is_int(c.data.transforms.eval_resize, 37, "eval_resize 37 for 32 (32 * 256 / 224)");
	cfg_free(&c);

	static const struct {
		const char *data, *err;
	} refused[] = {
	    {"\"format\": \"imagefolder\"",
	     "data.train: missing; data.format \"imagefolder\" needs {\"root\": DIR} or data.dir "
	     "(DIR/train, DIR/val)"},
	    {"\"format\": \"imagefolder\", \"train\": {}",
	     "data.train.root: missing; data.format \"imagefolder\" needs \"root\": the folder "
	     "holding one folder per class"},
	    {"\"format\": \"shards\", \"train\": {\"root\": \"/s\"}, \"transforms\": "
	     "{\"random_resized_crop\": {\"scale\": [0.5, 0.4]}}",
	     "data.transforms.random_resized_crop.scale: [0.5, 0.4]: min is larger than max"},
	    {"\"format\": \"shards\", \"train\": {\"root\": \"/s\"}, \"transforms\": "
	     "{\"random_resized_crop\": {\"ratio\": [0.5, 1, 2]}}",
	     "data.transforms.random_resized_crop.ratio: expected 2 values [min, max], got 3"},
	    {"\"format\": \"shards\", \"train\": {\"root\": \"/s\"}, \"transforms\": "
	     "{\"eval_resize\": 200}",
	     "data.transforms.eval_resize: 200 is smaller than the 224-pixel crop "
	     "(model.input_shape)"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char want[512];
		snprintf(j, sizeof(j), "{%s, \"data\": {%s}}", r224, refused[i].data);
		snprintf(want, sizeof(want), "job.json: %s", refused[i].err);
		ok(parse(&c, j) == -1, "image config %zu refused", i);
		is(err.text, want, "image config %zu: message", i);
		cfg_free(&c);
	}
	snprintf(j, sizeof(j),
		 "{\"model\": {\"name\": \"resnet18\", \"input_shape\": [3, 224, 200]}, "
		 "\"data\": {\"format\": \"imagefolder\", \"train\": {\"root\": \"/r\"}}}");
	ok(parse(&c, j) == -1, "a non-square input with images: refused");
	like(err.text, "model.input_shape: images are decoded to RGB [3, N, N]", "%s", err.text);
	cfg_free(&c);
}

int main(void)
{
	test_defaults();
	test_image_formats();
	test_models();
	test_derived_defaults();
	test_bad();
	test_warnings();
	test_overrides();
	test_paths();
	test_load();
	test_launch_only();
	return done_testing();
}
