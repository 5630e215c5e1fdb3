/* config_schema.c — what a dptrain job config means: every key with its kind and range, the
 * defaults, which keys the chosen options ignore, and the checks that involve several keys.
 * Keep doc/dptrain.json.5 in step with this file. Decoding and printing are generic
 * (config.c, config_json.c) and must not learn about particular keys. */
#include "config/config_schema.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Enum fields are read and written through int pointers by the generic code. */
_Static_assert(sizeof(enum cfg_model_name) == sizeof(int) && sizeof(enum cfg_stem) == sizeof(int) &&
		   sizeof(enum cfg_data_format) == sizeof(int) &&
		   sizeof(enum cfg_optimizer_name) == sizeof(int) &&
		   sizeof(enum cfg_lr_schedule_name) == sizeof(int) &&
		   sizeof(enum cfg_lr_unit) == sizeof(int) &&
		   sizeof(enum cfg_precision_mode) == sizeof(int) &&
		   sizeof(enum cfg_device_kind) == sizeof(int) &&
		   sizeof(enum cfg_console) == sizeof(int),
	       "enums must be int-sized");

/* ---------------------------------------------------------------------------------------
 * Names. The first name of a value is the one printed; later ones are aliases. */

static const struct cfg_enum_name model_names[] = {
#define MODEL(id, name, family, arg) {name, CFG_MODEL_##id, NULL},
#include "config/config_models.def"
#undef MODEL
    {NULL, 0, NULL},
};

static const struct {
	const char *name;
	int family, arg;
} models[] = {
#define MODEL(id, name, family, arg) [CFG_MODEL_##id] = {name, CFG_FAMILY_##family, arg},
#include "config/config_models.def"
#undef MODEL
};

const char *cfg_model_string(enum cfg_model_name m)
{
	return (unsigned)m < sizeof(models) / sizeof(models[0]) ? models[m].name : NULL;
}

int cfg_model_family(enum cfg_model_name m)
{
	return (unsigned)m < sizeof(models) / sizeof(models[0]) ? models[m].family : -1;
}

int cfg_model_arg(enum cfg_model_name m)
{
	return (unsigned)m < sizeof(models) / sizeof(models[0]) ? models[m].arg : -1;
}

static const struct cfg_enum_name stem_names[] = {
    {"small", CFG_STEM_SMALL, NULL},
    {"imagenet", CFG_STEM_IMAGENET, NULL},
    {NULL, 0, NULL},
};

static const struct cfg_enum_name format_names[] = {
    {"idx", CFG_DATA_IDX, NULL},
    {"cifar10", CFG_DATA_CIFAR10, NULL},
    {"synthetic", CFG_DATA_SYNTHETIC, NULL},
    {"imagefolder", CFG_DATA_IMAGEFOLDER, NULL},
    {"shards", CFG_DATA_SHARDS, NULL},
    {NULL, 0, NULL},
};

static const struct cfg_enum_name optimizer_names[] = {
    {"sgd", CFG_OPT_SGD, NULL},	    {"momentum", CFG_OPT_SGD, NULL}, /* MindSpore's nn.Momentum */
    {"adamw", CFG_OPT_ADAMW, NULL}, {"lamb", CFG_OPT_LAMB, NULL},    {NULL, 0, NULL},
};

static const struct cfg_enum_name lr_schedule_names[] = {
    {"constant", CFG_LR_CONSTANT, NULL},
    {"step", CFG_LR_STEP, NULL},
    {"multistep", CFG_LR_MULTISTEP, NULL},
    {"cosine", CFG_LR_COSINE, NULL},
    {NULL, 0, NULL},
};

static const struct cfg_enum_name lr_unit_names[] = {
    {"epoch", CFG_LR_UNIT_EPOCH, NULL},
    {"step", CFG_LR_UNIT_STEP, NULL},
    {NULL, 0, NULL},
};

static const struct cfg_enum_name precision_names[] = {
    {"fp32", CFG_PREC_FP32, NULL},
    {"tf32", CFG_PREC_TF32, NULL},
    {"bf16", CFG_PREC_BF16, NULL},
    {"fp16", CFG_PREC_FP16, NULL},
    {"O0", CFG_PREC_FP32, NULL},
    {"O1", CFG_PREC_FP16, NULL},
    {"O2", CFG_PREC_FP16, NULL},
    {"O3", 0,
     "it keeps the weights themselves in fp16; use \"O2\" or \"fp16\" (fp16 compute, fp32 "
     "master weights)"},
    {NULL, 0, NULL},
};

static const struct cfg_enum_name device_names[] = {
    {"auto", CFG_DEVICE_AUTO, NULL},
    {"cpu", CFG_DEVICE_CPU, NULL},
    {"cuda", CFG_DEVICE_CUDA, NULL},
    {"gpu", CFG_DEVICE_CUDA, NULL}, /* MindSpore's device_target "GPU" */
    {NULL, 0, NULL},
};

static const struct cfg_enum_name device_dirs_names[] = {
    {"rank", CFG_DEVDIRS_RANK, NULL},
    {"device", CFG_DEVDIRS_DEVICE, NULL},
    {NULL, 0, NULL},
};

static const struct cfg_enum_name progress_names[] = {
    {"auto", CFG_PROGRESS_AUTO, NULL},
    {"lines", CFG_PROGRESS_LINES, NULL},
    {"off", CFG_PROGRESS_OFF, NULL},
    {NULL, 0, NULL},
};

static const struct cfg_enum_name console_names[] = {
    {"rank0", CFG_CONSOLE_RANK0, NULL},
    {"all", CFG_CONSOLE_ALL, NULL},
    {"none", CFG_CONSOLE_NONE, NULL},
    {NULL, 0, NULL},
};

const struct cfg_enum_name *cfg_enum_lookup(const struct cfg_enum_name *names, const char *s)
{
	for (const struct cfg_enum_name *e = names; e->name; e++)
		if (strcmp(e->name, s) == 0)
			return e;
	return NULL;
}

const char *cfg_enum_canonical(const struct cfg_enum_name *names, int value)
{
	for (const struct cfg_enum_name *e = names; e->name; e++)
		if (!e->refuse && e->value == value)
			return e->name;
	return "?";
}

/* ---------------------------------------------------------------------------------------
 * When keys apply. */

static bool is_resnet(const struct cfg *c)
{
	return cfg_model_family(c->model.name) == CFG_FAMILY_RESNET;
}
static bool is_mlp(const struct cfg *c)
{
	return cfg_model_family(c->model.name) == CFG_FAMILY_MLP;
}
static bool has_files(const struct cfg *c)
{
	return c->data.format != CFG_DATA_SYNTHETIC;
}
static bool is_idx(const struct cfg *c)
{
	return c->data.format == CFG_DATA_IDX;
}
static bool is_cifar10(const struct cfg *c)
{
	return c->data.format == CFG_DATA_CIFAR10;
}
static bool is_synthetic(const struct cfg *c)
{
	return c->data.format == CFG_DATA_SYNTHETIC;
}
static bool is_image(const struct cfg *c)
{
	return c->data.format == CFG_DATA_IMAGEFOLDER || c->data.format == CFG_DATA_SHARDS;
}
static bool is_imagefolder(const struct cfg *c)
{
	return c->data.format == CFG_DATA_IMAGEFOLDER;
}
static bool is_decoded(const struct cfg *c)
{
	return !is_image(c);
}
static bool is_sgd(const struct cfg *c)
{
	return c->optimizer.name == CFG_OPT_SGD;
}
static bool is_adaptive(const struct cfg *c)
{
	return c->optimizer.name == CFG_OPT_ADAMW || c->optimizer.name == CFG_OPT_LAMB;
}
static bool is_stepwise(const struct cfg *c)
{
	return c->lr_schedule.name == CFG_LR_STEP || c->lr_schedule.name == CFG_LR_MULTISTEP;
}
static bool is_step(const struct cfg *c)
{
	return c->lr_schedule.name == CFG_LR_STEP;
}
static bool is_multistep(const struct cfg *c)
{
	return c->lr_schedule.name == CFG_LR_MULTISTEP;
}
static bool is_cosine(const struct cfg *c)
{
	return c->lr_schedule.name == CFG_LR_COSINE;
}
static bool parallel_optimizer(const struct cfg *c)
{
	return c->parallel.enable_parallel_optimizer;
}
static bool no_fusion_config(const struct cfg *c)
{
	return c->parallel.all_reduce_fusion_config.n == 0;
}
static bool dynamic_loss_scale(const struct cfg *c)
{
	return c->precision.dynamic_loss_scale;
}

/* ---------------------------------------------------------------------------------------
 * The keys. Ranges are what a sane job can use; the trainer may rely on them (products of
 * shapes fit an int, timeouts fit milliseconds in an int64). */

#define OFF(type, field) offsetof(type, field)
#define MIN_GT		 (CFG_F_MIN_EXCL)
#define RANGE		 (CFG_F_HAS_MAX)

/* One key per entry reads better than one field per line. */
/* clang-format off */
static const struct cfg_key model_keys[] = {
	{.name = "name", .kind = CFG_K_ENUM, .off = OFF(struct cfg_model, name),
	 .flags = CFG_F_REQUIRED, .names = model_names},
	{.name = "num_classes", .kind = CFG_K_INT, .off = OFF(struct cfg_model, num_classes),
	 .flags = RANGE, .min = 2, .max = 1000000},
	{.name = "input_shape", .kind = CFG_K_INT_ARRAY, .off = OFF(struct cfg_model, input_shape),
	 .flags = RANGE, .min = 1, .max = 65536, .len = 3},
	{.name = "stem", .kind = CFG_K_ENUM, .off = OFF(struct cfg_model, stem),
	 .names = stem_names, .applies = is_resnet, .only = "only the resnets have a stem"},
	{.name = "hidden", .kind = CFG_K_INT_LIST, .off = OFF(struct cfg_model, hidden),
	 .flags = RANGE, .min = 1, .max = 1 << 20,
	 .applies = is_mlp, .only = "only used by model.name \"mlp\""},
	{.name = "init", .kind = CFG_K_PATH, .off = OFF(struct cfg_model, init)},
	{.name = NULL},
};

static const struct cfg_key source_keys[] = {
	{.name = "images", .kind = CFG_K_PATH, .off = OFF(struct cfg_data_source, images),
	 .applies = is_idx, .only = "only used by data.format \"idx\""},
	{.name = "labels", .kind = CFG_K_PATH, .off = OFF(struct cfg_data_source, labels),
	 .applies = is_idx, .only = "only used by data.format \"idx\""},
	{.name = "files", .kind = CFG_K_PATH_LIST, .off = OFF(struct cfg_data_source, files),
	 .flags = CFG_F_NONEMPTY,
	 .applies = is_cifar10, .only = "only used by data.format \"cifar10\""},
	{.name = "size", .kind = CFG_K_INT, .off = OFF(struct cfg_data_source, size), .min = 1,
	 .applies = is_synthetic, .only = "only used by data.format \"synthetic\""},
	{.name = "root", .kind = CFG_K_PATH, .off = OFF(struct cfg_data_source, root),
	 .applies = is_image, .only = "only used by data.format \"imagefolder\" and \"shards\""},
	{.name = "index", .kind = CFG_K_PATH, .off = OFF(struct cfg_data_source, index),
	 .applies = is_imagefolder, .only = "only used by data.format \"imagefolder\""},
	{.name = NULL},
};

static const struct cfg_key rrc_keys[] = {
	{.name = "scale", .kind = CFG_K_NUMBER_LIST, .off = OFF(struct cfg_random_resized_crop, scale),
	 .flags = MIN_GT | RANGE | CFG_F_NONEMPTY, .min = 0, .max = 1},
	{.name = "ratio", .kind = CFG_K_NUMBER_LIST, .off = OFF(struct cfg_random_resized_crop, ratio),
	 .flags = MIN_GT | RANGE | CFG_F_NONEMPTY, .min = 0, .max = 1000},
	{.name = NULL},
};

static const struct cfg_key random_crop_keys[] = {
	{.name = "size", .kind = CFG_K_INT, .off = OFF(struct cfg_random_crop, size),
	 .flags = RANGE | CFG_F_OMIT_ZERO, .min = 1, .max = 65536},
	{.name = "padding", .kind = CFG_K_INT, .off = OFF(struct cfg_random_crop, padding),
	 .flags = RANGE, .min = 0, .max = 4096},
	{.name = NULL},
};

static const struct cfg_key normalize_keys[] = {
	{.name = "mean", .kind = CFG_K_NUMBER_LIST, .off = OFF(struct cfg_normalize, mean),
	 .flags = CFG_F_REQUIRED | CFG_F_NO_MIN | CFG_F_NONEMPTY},
	{.name = "std", .kind = CFG_K_NUMBER_LIST, .off = OFF(struct cfg_normalize, std),
	 .flags = CFG_F_REQUIRED | MIN_GT | CFG_F_NONEMPTY, .min = 0},
	{.name = NULL},
};

static const struct cfg_key transforms_keys[] = {
	{.name = "random_crop", .kind = CFG_K_OBJECT, .off = OFF(struct cfg_transforms, random_crop),
	 .off2 = OFF(struct cfg_transforms, random_crop.enabled), .flags = CFG_F_OPTIONAL,
	 .sub = random_crop_keys, .applies = is_decoded,
	 .only = "images of any size get random_resized_crop instead"},
	{.name = "random_resized_crop", .kind = CFG_K_OBJECT,
	 .off = OFF(struct cfg_transforms, random_resized_crop),
	 .off2 = OFF(struct cfg_transforms, random_resized_crop.enabled), .flags = CFG_F_OPTIONAL,
	 .sub = rrc_keys, .applies = is_image,
	 .only = "only used by data.format \"imagefolder\" and \"shards\""},
	{.name = "eval_resize", .kind = CFG_K_INT, .off = OFF(struct cfg_transforms, eval_resize),
	 .flags = RANGE | CFG_F_OMIT_ZERO, .min = 1, .max = 16384, .applies = is_image,
	 .only = "only used by data.format \"imagefolder\" and \"shards\""},
	{.name = "dct_scaling", .kind = CFG_K_BOOL, .off = OFF(struct cfg_transforms, dct_scaling),
	 .applies = is_image, .only = "only used by data.format \"imagefolder\" and \"shards\""},
	{.name = "horizontal_flip", .kind = CFG_K_BOOL,
	 .off = OFF(struct cfg_transforms, horizontal_flip)},
	{.name = "normalize", .kind = CFG_K_OBJECT, .off = OFF(struct cfg_transforms, normalize),
	 .off2 = OFF(struct cfg_transforms, normalize.enabled), .flags = CFG_F_OPTIONAL,
	 .sub = normalize_keys},
	{.name = NULL},
};

static const struct cfg_key data_keys[] = {
	{.name = "format", .kind = CFG_K_ENUM, .off = OFF(struct cfg_data, format),
	 .flags = CFG_F_REQUIRED, .names = format_names},
	{.name = "dir", .kind = CFG_K_PATH, .off = OFF(struct cfg_data, dir),
	 .applies = has_files, .only = "synthetic data has no files"},
	{.name = "train", .kind = CFG_K_OBJECT, .off = OFF(struct cfg_data, train),
	 .off2 = OFF(struct cfg_data, train.present), .flags = CFG_F_OPTIONAL, .sub = source_keys},
	{.name = "eval", .kind = CFG_K_OBJECT, .off = OFF(struct cfg_data, eval),
	 .off2 = OFF(struct cfg_data, eval.present), .flags = CFG_F_OPTIONAL, .sub = source_keys},
	{.name = "batch_size", .kind = CFG_K_INT, .off = OFF(struct cfg_data, batch_size), .min = 1},
	{.name = "eval_batch_size", .kind = CFG_K_INT, .off = OFF(struct cfg_data, eval_batch_size),
	 .min = 1},
	{.name = "shuffle", .kind = CFG_K_BOOL, .off = OFF(struct cfg_data, shuffle)},
	{.name = "seed", .kind = CFG_K_INT64, .off = OFF(struct cfg_data, seed), .min = 0},
	{.name = "drop_remainder", .kind = CFG_K_BOOL, .off = OFF(struct cfg_data, drop_remainder)},
	{.name = "transforms", .kind = CFG_K_OBJECT, .off = OFF(struct cfg_data, transforms),
	 .sub = transforms_keys},
	{.name = "workers", .kind = CFG_K_INT, .off = OFF(struct cfg_data, workers),
	 .flags = RANGE, .min = 0, .max = 256},
	{.name = "prefetch", .kind = CFG_K_INT, .off = OFF(struct cfg_data, prefetch),
	 .flags = RANGE, .min = 1, .max = 1024},
	{.name = "max_bad", .kind = CFG_K_INT, .off = OFF(struct cfg_data, max_bad),
	 .flags = RANGE, .min = 0, .max = 1 << 30, .applies = is_image,
	 .only = "only used by data.format \"imagefolder\" and \"shards\""},
	{.name = NULL},
};

static const struct cfg_key optimizer_keys[] = {
	{.name = "name", .kind = CFG_K_ENUM, .off = OFF(struct cfg_optimizer, name),
	 .names = optimizer_names},
	{.name = "lr", .kind = CFG_K_NUMBER, .off = OFF(struct cfg_optimizer, lr),
	 .flags = MIN_GT, .min = 0},
	{.name = "momentum", .kind = CFG_K_NUMBER, .off = OFF(struct cfg_optimizer, momentum),
	 .flags = RANGE | CFG_F_MAX_EXCL, .min = 0, .max = 1,
	 .applies = is_sgd, .only = "only used by optimizer.name \"sgd\" and \"momentum\""},
	{.name = "nesterov", .kind = CFG_K_BOOL, .off = OFF(struct cfg_optimizer, nesterov),
	 .applies = is_sgd, .only = "only used by optimizer.name \"sgd\" and \"momentum\""},
	{.name = "weight_decay", .kind = CFG_K_NUMBER,
	 .off = OFF(struct cfg_optimizer, weight_decay), .min = 0},
	{.name = "no_decay_bn_bias", .kind = CFG_K_BOOL,
	 .off = OFF(struct cfg_optimizer, no_decay_bn_bias)},
	{.name = "betas", .kind = CFG_K_NUMBER_ARRAY, .off = OFF(struct cfg_optimizer, betas),
	 .flags = RANGE | CFG_F_MAX_EXCL, .min = 0, .max = 1, .len = 2,
	 .applies = is_adaptive, .only = "only used by optimizer.name \"adamw\" and \"lamb\""},
	{.name = "eps", .kind = CFG_K_NUMBER, .off = OFF(struct cfg_optimizer, eps),
	 .flags = MIN_GT | RANGE, .min = 0, .max = 1,
	 .applies = is_adaptive, .only = "only used by optimizer.name \"adamw\" and \"lamb\""},
	{.name = NULL},
};

static const struct cfg_key lr_schedule_keys[] = {
	{.name = "name", .kind = CFG_K_ENUM, .off = OFF(struct cfg_lr_schedule, name),
	 .names = lr_schedule_names},
	{.name = "warmup_steps", .kind = CFG_K_INT64,
	 .off = OFF(struct cfg_lr_schedule, warmup_steps), .min = 0},
	{.name = "warmup_epochs", .kind = CFG_K_INT,
	 .off = OFF(struct cfg_lr_schedule, warmup_epochs), .flags = CFG_F_OMIT_ZERO, .min = 0},
	{.name = "unit", .kind = CFG_K_ENUM, .off = OFF(struct cfg_lr_schedule, unit),
	 .names = lr_unit_names,
	 .applies = is_stepwise, .only = "only used by lr_schedule.name \"step\" and \"multistep\""},
	{.name = "step_size", .kind = CFG_K_INT64, .off = OFF(struct cfg_lr_schedule, step_size),
	 .min = 1, .applies = is_step, .only = "only used by lr_schedule.name \"step\""},
	{.name = "gamma", .kind = CFG_K_NUMBER, .off = OFF(struct cfg_lr_schedule, gamma),
	 .flags = MIN_GT | RANGE, .min = 0, .max = 1,
	 .applies = is_stepwise, .only = "only used by lr_schedule.name \"step\" and \"multistep\""},
	{.name = "milestones", .kind = CFG_K_INT_LIST,
	 .off = OFF(struct cfg_lr_schedule, milestones),
	 .flags = CFG_F_INCREASING | CFG_F_NONEMPTY, .min = 1,
	 .applies = is_multistep, .only = "only used by lr_schedule.name \"multistep\""},
	{.name = "min_lr", .kind = CFG_K_NUMBER, .off = OFF(struct cfg_lr_schedule, min_lr),
	 .min = 0, .applies = is_cosine, .only = "only used by lr_schedule.name \"cosine\""},
	{.name = NULL},
};

static const struct cfg_key train_keys[] = {
	{.name = "epochs", .kind = CFG_K_INT, .off = OFF(struct cfg_train, epochs),
	 .flags = RANGE, .min = 0, .max = 1000000},
	{.name = "max_steps", .kind = CFG_K_INT64, .off = OFF(struct cfg_train, max_steps),
	 .min = 0},
	{.name = "log_every", .kind = CFG_K_INT64, .off = OFF(struct cfg_train, log_every),
	 .min = 1},
	{.name = "eval_every", .kind = CFG_K_INT, .off = OFF(struct cfg_train, eval_every),
	 .min = 0},
	{.name = "label_smoothing", .kind = CFG_K_NUMBER,
	 .off = OFF(struct cfg_train, label_smoothing),
	 .flags = RANGE | CFG_F_MAX_EXCL, .min = 0, .max = 1},
	{.name = "threads", .kind = CFG_K_INT, .off = OFF(struct cfg_train, threads),
	 .flags = RANGE, .min = 0, .max = 4096},
	{.name = "straggler_threshold", .kind = CFG_K_NUMBER,
	 .off = OFF(struct cfg_train, straggler_threshold), .flags = MIN_GT | RANGE, .min = 1,
	 .max = 1000},
	{.name = "straggler_window", .kind = CFG_K_INT, .off = OFF(struct cfg_train, straggler_window),
	 .flags = RANGE, .min = 0, .max = 100000},
	{.name = NULL},
};

static const struct cfg_key parallel_optimizer_keys[] = {
	{.name = "parallel_optimizer_threshold", .kind = CFG_K_INT,
	 .off = OFF(struct cfg_parallel_optimizer_config, parallel_optimizer_threshold),
	 .min = 0},
	{.name = NULL},
};

static const struct cfg_key parallel_keys[] = {
	{.name = "gradients_mean", .kind = CFG_K_BOOL,
	 .off = OFF(struct cfg_parallel, gradients_mean)},
	{.name = "parameter_broadcast", .kind = CFG_K_BOOL,
	 .off = OFF(struct cfg_parallel, parameter_broadcast)},
	{.name = "all_reduce_fusion_config", .kind = CFG_K_INT_LIST,
	 .off = OFF(struct cfg_parallel, all_reduce_fusion_config),
	 .flags = CFG_F_INCREASING, .min = 1},
	{.name = "grad_accumulation_step", .kind = CFG_K_INT,
	 .off = OFF(struct cfg_parallel, grad_accumulation_step),
	 .flags = RANGE, .min = 1, .max = 65536},
	{.name = "enable_parallel_optimizer", .kind = CFG_K_BOOL,
	 .off = OFF(struct cfg_parallel, enable_parallel_optimizer)},
	{.name = "parallel_optimizer_config", .kind = CFG_K_OBJECT,
	 .off = OFF(struct cfg_parallel, parallel_optimizer_config),
	 .sub = parallel_optimizer_keys, .applies = parallel_optimizer,
	 .only = "only used when parallel.enable_parallel_optimizer is true"},
	{.name = "bucket_cap_mb", .kind = CFG_K_NUMBER,
	 .off = OFF(struct cfg_parallel, bucket_cap_mb), .flags = MIN_GT | RANGE, .min = 0,
	 .max = 65536, .applies = no_fusion_config,
	 .only = "parallel.all_reduce_fusion_config sets the buckets"},
	{.name = NULL},
};

static const struct cfg_key precision_keys[] = {
	{.name = "mode", .kind = CFG_K_ENUM, .off = OFF(struct cfg_precision, mode),
	 .names = precision_names},
	{.name = "loss_scale", .kind = CFG_K_LOSS_SCALE,
	 .off = OFF(struct cfg_precision, dynamic_loss_scale),
	 .off2 = OFF(struct cfg_precision, loss_scale),
	 .flags = MIN_GT | RANGE, .min = 0, .max = 1e30},
	{.name = "initial_loss_scale", .kind = CFG_K_NUMBER,
	 .off = OFF(struct cfg_precision, initial_loss_scale),
	 .flags = MIN_GT | RANGE, .min = 0, .max = 1e30,
	 .applies = dynamic_loss_scale, .only = "only used with precision.loss_scale \"dynamic\""},
	{.name = "growth_interval", .kind = CFG_K_INT,
	 .off = OFF(struct cfg_precision, growth_interval), .min = 1,
	 .applies = dynamic_loss_scale, .only = "only used with precision.loss_scale \"dynamic\""},
	{.name = NULL},
};

static const struct cfg_key checkpoint_keys[] = {
	{.name = "dir", .kind = CFG_K_STRING, .off = OFF(struct cfg_checkpoint, dir),
	 .flags = CFG_F_NONEMPTY},
	{.name = "every_steps", .kind = CFG_K_INT64,
	 .off = OFF(struct cfg_checkpoint, every_steps), .min = 0},
	{.name = "every_epochs", .kind = CFG_K_INT,
	 .off = OFF(struct cfg_checkpoint, every_epochs), .min = 0},
	{.name = "keep", .kind = CFG_K_INT, .off = OFF(struct cfg_checkpoint, keep),
	 .flags = RANGE, .min = 1, .max = 1000000},
	{.name = "resume", .kind = CFG_K_RESUME, .off = OFF(struct cfg_checkpoint, resume),
	 .off2 = OFF(struct cfg_checkpoint, resume_path)},
	{.name = NULL},
};

static const struct cfg_key device_keys[] = {
	{.name = "kind", .kind = CFG_K_ENUM, .off = OFF(struct cfg_device, kind),
	 .names = device_names},
	{.name = "allow_shared_gpu", .kind = CFG_K_BOOL,
	 .off = OFF(struct cfg_device, allow_shared_gpu)},
	{.name = "deterministic", .kind = CFG_K_BOOL, .off = OFF(struct cfg_device, deterministic)},
	{.name = NULL},
};

static const struct cfg_key output_keys[] = {
	{.name = "dir", .kind = CFG_K_STRING, .off = OFF(struct cfg_output, dir),
	 .flags = CFG_F_NONEMPTY},
	{.name = "per_rank_logs", .kind = CFG_K_BOOL, .off = OFF(struct cfg_output, per_rank_logs)},
	{.name = "console", .kind = CFG_K_ENUM, .off = OFF(struct cfg_output, console),
	 .names = console_names},
	{.name = "metrics", .kind = CFG_K_BOOL, .off = OFF(struct cfg_output, metrics)},
	{.name = "tensorboard", .kind = CFG_K_BOOL, .off = OFF(struct cfg_output, tensorboard)},
	{.name = "report", .kind = CFG_K_BOOL, .off = OFF(struct cfg_output, report)},
	{.name = "progress", .kind = CFG_K_ENUM, .off = OFF(struct cfg_output, progress),
	 .names = progress_names},
	{.name = "device_dirs", .kind = CFG_K_ENUM, .off = OFF(struct cfg_output, device_dirs),
	 .names = device_dirs_names},
	{.name = "run_in_device_dir", .kind = CFG_K_BOOL,
	 .off = OFF(struct cfg_output, run_in_device_dir)},
	{.name = NULL},
};

static const struct cfg_key network_keys[] = {
	{.name = "interface", .kind = CFG_K_STRING, .off = OFF(struct cfg_network, interface),
	 .flags = CFG_F_NONEMPTY},
	{.name = NULL},
};

static const struct cfg_key mindspore_keys[] = {
	{.name = "dynamic_cluster", .kind = CFG_K_BOOL,
	 .off = OFF(struct cfg_mindspore, dynamic_cluster)},
	{.name = "hccn_conf", .kind = CFG_K_PATH, .off = OFF(struct cfg_mindspore, hccn_conf)},
	{.name = NULL},
};

/* At least a second (less would time out work that is merely busy, and 1e-300 is no
 * timeout), up to about 11 days: long enough for any rendezvous, small enough for int
 * milliseconds. */
#define TIMEOUT_KEY(f) \
	{.name = #f, .kind = CFG_K_NUMBER, .off = OFF(struct cfg_timeouts, f), \
	 .flags = RANGE, .min = 1, .max = 1e6}

static const struct cfg_key timeouts_keys[] = {
	TIMEOUT_KEY(rendezvous_s),
	TIMEOUT_KEY(collective_s),
	TIMEOUT_KEY(shutdown_s),
	{.name = NULL},
};

#define SECTION(f, keys) {.name = #f, .kind = CFG_K_OBJECT, .off = OFF(struct cfg, f), .sub = keys}

const struct cfg_key cfg_schema[] = {
	{.name = "description", .kind = CFG_K_STRING, .off = OFF(struct cfg, description)},
	{.name = "seed", .kind = CFG_K_INT64, .off = OFF(struct cfg, seed), .min = 0},
	SECTION(model, model_keys),
	SECTION(data, data_keys),
	SECTION(optimizer, optimizer_keys),
	SECTION(lr_schedule, lr_schedule_keys),
	SECTION(train, train_keys),
	SECTION(parallel, parallel_keys),
	SECTION(precision, precision_keys),
	SECTION(checkpoint, checkpoint_keys),
	SECTION(device, device_keys),
	SECTION(output, output_keys),
	SECTION(network, network_keys),
	SECTION(mindspore, mindspore_keys),
	SECTION(timeouts, timeouts_keys),
	{.name = NULL},
};
/* clang-format on */

/* ---------------------------------------------------------------------------------------
 * Defaults: the values of keys that are absent. Defaults that depend on other keys are set
 * in cfg_check. */

int cfg_set_defaults(struct cfg *c)
{
	c->seed = 0;

	c->model.name = CFG_MODEL_MLP;
	c->model.num_classes = 10;
	c->model.input_shape[0] = 1;
	c->model.input_shape[1] = 28;
	c->model.input_shape[2] = 28;
	c->model.stem = CFG_STEM_SMALL;
	if (!(c->model.hidden.v = malloc(2 * sizeof(int))))
		return -1;
	c->model.hidden.v[0] = c->model.hidden.v[1] = 512;
	c->model.hidden.n = 2;

	c->data.format = CFG_DATA_IDX;
	c->data.batch_size = 32;
	c->data.eval_batch_size = 32;
	c->data.shuffle = true;
	c->data.drop_remainder = true;
	c->data.transforms.random_crop.padding = 4;
	c->data.workers = 1;
	c->data.prefetch = 2;
	c->data.max_bad = 100;
	c->data.transforms.dct_scaling = true;

	c->optimizer.name = CFG_OPT_SGD;
	c->optimizer.lr = 0.001;
	c->optimizer.betas[0] = 0.9;
	c->optimizer.betas[1] = 0.999;
	c->optimizer.eps = 1e-8;

	c->lr_schedule.name = CFG_LR_CONSTANT;
	c->lr_schedule.unit = CFG_LR_UNIT_EPOCH;
	c->lr_schedule.gamma = 0.1;

	c->train.epochs = 1;
	c->train.log_every = 100;
	c->train.eval_every = 1;
	c->train.straggler_threshold = 1.25;
	c->train.straggler_window = 8;

	c->parallel.gradients_mean = true;
	c->parallel.parameter_broadcast = true;
	c->parallel.grad_accumulation_step = 1;
	c->parallel.parallel_optimizer_config.parallel_optimizer_threshold = 64;
	c->parallel.bucket_cap_mb = 25;

	c->precision.mode = CFG_PREC_FP32;
	c->precision.loss_scale = 1;
	c->precision.initial_loss_scale = 65536;
	c->precision.growth_interval = 2000;

	/* checkpoint.dir stays NULL: "checkpoints" in the output directory (see dptrain.json(5)) */
	c->checkpoint.every_epochs = 1;
	c->checkpoint.keep = 3;
	c->checkpoint.resume = CFG_RESUME_AUTO;

	c->device.kind = CFG_DEVICE_AUTO;

	if (!(c->output.dir = strdup("dptrain.%j.%s")))
		return -1;
	c->output.per_rank_logs = true;
	c->output.console = CFG_CONSOLE_RANK0;
	c->output.metrics = true;
	c->output.tensorboard = true;
	c->output.report = true;

	c->timeouts.rendezvous_s = 300;
	c->timeouts.collective_s = 300;
	c->timeouts.shutdown_s = 30;
	return 0;
}

/* ---------------------------------------------------------------------------------------
 * Checks after decoding. */

static bool given(const struct cfg_ctx *x, const char *path)
{
	return cfg_json_at(x->root, path) != NULL;
}

/* A key the chosen options ignore: warn, take the default, and forget it was given (so the
 * defaults below that depend on its presence apply). */
static int drop_unused(struct cfg_ctx *x, const struct cfg_key *keys, void *base, const void *dbase,
		       json_t *obj, const char *path)
{
	char sub[CFG_JSON_PATH_MAX];

	for (const struct cfg_key *k = keys; k->name; k++) {
		json_t *v = json_object_get(obj, k->name);
		if (!v)
			continue;
		cfg_join_path(sub, path, k->name);
		if (k->applies && !k->applies(x->c)) {
			if (cfg_warn(x, sub, "ignored: %s", k->only) < 0)
				return -1;
			cfg_field_free(k, base);
			if (cfg_field_copy(k, base, dbase) < 0)
				return cfg_fail(x, NULL, "out of memory");
			json_object_del(obj, k->name);
			continue;
		}
		if (k->kind == CFG_K_OBJECT &&
		    drop_unused(x, k->sub, (char *)base + k->off, (const char *)dbase + k->off, v,
				sub) < 0)
			return -1;
	}
	return 0;
}

/* The standard file names under data.dir. idx files may be gzip'ed: the plain name is used
 * when it exists, else the .gz one. */
static char *dir_file(struct cfg_ctx *x, const char *name, bool gz_fallback)
{
	struct stat st;
	size_t n = strlen(x->c->data.dir) + strlen(name) + 5;
	char *p = malloc(n);

	if (!p)
		return NULL;
	snprintf(p, n, "%s/%s", x->c->data.dir, name);
	if (gz_fallback && stat(p, &st) < 0)
		strcat(p, ".gz");
	return p;
}

static int source_from_dir(struct cfg_ctx *x, struct cfg_data_source *s, bool train)
{
	struct cfg_data *d = &x->c->data;

	s->present = true;
	if (d->format == CFG_DATA_IMAGEFOLDER || d->format == CFG_DATA_SHARDS) {
		/* ImageNet's layout: DIR/train and DIR/val */
		s->root = dir_file(x, train ? "train" : "val", false);
		return s->root ? 0 : -1;
	}
	if (d->format == CFG_DATA_IDX) {
		s->images =
		    dir_file(x, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte", true);
		s->labels =
		    dir_file(x, train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte", true);
		return s->images && s->labels ? 0 : -1;
	}
	/* cifar10: the layout of cifar-10-binary.tar.gz (cifar-10-batches-bin/). */
	int n = train ? 5 : 1;
	if (!(s->files.v = calloc((size_t)n, sizeof(char *))))
		return -1;
	s->files.n = n;
	for (int i = 0; i < n; i++) {
		char name[32];
		if (train)
			snprintf(name, sizeof(name), "data_batch_%d.bin", i + 1);
		else
			snprintf(name, sizeof(name), "test_batch.bin");
		if (!(s->files.v[i] = dir_file(x, name, false)))
			return -1;
	}
	return 0;
}

static int set_pair(struct cfg_double_list *l, double a, double b)
{
	if (!(l->v = malloc(2 * sizeof(double))))
		return -1;
	l->v[0] = a;
	l->v[1] = b;
	l->n = 2;
	return 0;
}

/* Images of any size: torchvision's ImageNet recipe unless said otherwise (RandomResizedCrop
 * with its default scale and ratio, flip, ImageNet's mean and std for RGB). */
static int image_defaults(struct cfg_ctx *x)
{
	struct cfg_transforms *t = &x->c->data.transforms;

	if (!is_image(x->c))
		return 0;
	t->random_resized_crop.enabled = true;
	if ((!t->random_resized_crop.scale.n &&
	     set_pair(&t->random_resized_crop.scale, 0.08, 1) < 0) ||
	    (!t->random_resized_crop.ratio.n &&
	     set_pair(&t->random_resized_crop.ratio, 3.0 / 4.0, 4.0 / 3.0) < 0))
		return cfg_fail(x, NULL, "out of memory");
	if (!given(x, "data.transforms.horizontal_flip"))
		t->horizontal_flip = true;
	if (!given(x, "data.transforms.normalize") && x->c->model.input_shape[0] == 3) {
		static const double mean[3] = {0.485, 0.456, 0.406}, std[3] = {0.229, 0.224, 0.225};
		t->normalize.mean.v = malloc(3 * sizeof(double));
		t->normalize.std.v = malloc(3 * sizeof(double));
		if (!t->normalize.mean.v || !t->normalize.std.v)
			return cfg_fail(x, NULL, "out of memory");
		memcpy(t->normalize.mean.v, mean, sizeof(mean));
		memcpy(t->normalize.std.v, std, sizeof(std));
		t->normalize.mean.n = t->normalize.std.n = 3;
		t->normalize.enabled = true;
	}
	if (!t->eval_resize)
		t->eval_resize = (int)((double)x->c->model.input_shape[1] * 256 / 224 + 0.5);
	return 0;
}

/* Defaults that depend on other keys: only for keys that were not given. */
static int derived_defaults(struct cfg_ctx *x)
{
	struct cfg *c = x->c;
	const char *oname = json_string_value(cfg_json_at(x->root, "optimizer.name"));

	if (!given(x, "model.stem"))
		c->model.stem = c->model.input_shape[1] <= 64 ? CFG_STEM_SMALL : CFG_STEM_IMAGENET;
	if (oname && strcmp(oname, "momentum") == 0 && !given(x, "optimizer.momentum"))
		c->optimizer.momentum = 0.9;
	/* PyTorch's AdamW and the usual LAMB decay by 0.01; LAMB's eps is 1e-6. */
	if (c->optimizer.name != CFG_OPT_SGD && !given(x, "optimizer.weight_decay"))
		c->optimizer.weight_decay = 0.01;
	if (c->optimizer.name == CFG_OPT_LAMB && !given(x, "optimizer.eps"))
		c->optimizer.eps = 1e-6;
	if (!given(x, "data.eval_batch_size"))
		c->data.eval_batch_size = c->data.batch_size;
	if (!given(x, "data.seed"))
		c->data.seed = c->seed;
	if (!given(x, "train.epochs") && given(x, "train.max_steps"))
		c->train.epochs = 0;
	if (c->data.dir && c->data.format != CFG_DATA_SYNTHETIC) {
		if (!c->data.train.present && source_from_dir(x, &c->data.train, true) < 0)
			return cfg_fail(x, NULL, "out of memory");
		if (!c->data.eval.present && source_from_dir(x, &c->data.eval, false) < 0)
			return cfg_fail(x, NULL, "out of memory");
	}
	return image_defaults(x);
}

static int check_source(struct cfg_ctx *x, const struct cfg_data_source *s, const char *path)
{
	char p[CFG_JSON_PATH_MAX];

	switch (x->c->data.format) {
	case CFG_DATA_IDX:
		if (!s->images || !s->labels) {
			cfg_join_path(p, path, s->images ? "labels" : "images");
			return cfg_fail(x, p,
					"missing; the idx format needs \"images\" and \"labels\" "
					"files");
		}
		break;
	case CFG_DATA_CIFAR10:
		if (s->files.n == 0) {
			cfg_join_path(p, path, "files");
			return cfg_fail(x, p,
					"missing; the cifar10 format needs \"files\": [the binary "
					"batch files]");
		}
		break;
	case CFG_DATA_IMAGEFOLDER:
	case CFG_DATA_SHARDS:
		if (!s->root) {
			cfg_join_path(p, path, "root");
			return cfg_fail(x, p, "missing; data.format \"%s\" needs \"root\": the %s",
					cfg_enum_canonical(format_names, (int)x->c->data.format),
					x->c->data.format == CFG_DATA_SHARDS
					    ? "directory dptrain-data pack wrote"
					    : "folder holding one folder per class");
		}
		break;
	case CFG_DATA_SYNTHETIC:
		if (s->size == 0) {
			cfg_join_path(p, path, "size");
			return cfg_fail(x, p,
					"missing; synthetic data needs \"size\", the number of "
					"samples");
		}
		break;
	}
	return 0;
}

static int check_pair(struct cfg_ctx *x, const struct cfg_double_list *l, const char *path)
{
	if (l->n != 2)
		return cfg_fail(x, path, "expected 2 values [min, max], got %d", l->n);
	if (l->v[0] > l->v[1])
		return cfg_fail(x, path, "[%g, %g]: min is larger than max", l->v[0], l->v[1]);
	return 0;
}

static int check_image(struct cfg_ctx *x)
{
	const struct cfg *c = x->c;
	const int *s = c->model.input_shape;
	const struct cfg_transforms *t = &c->data.transforms;

	if ((s[0] != 1 && s[0] != 3) || s[1] != s[2])
		return cfg_fail(x, "model.input_shape",
				"images are decoded to RGB [3, N, N] or gray [1, N, N] (square "
				"crops), got [%d, %d, %d]",
				s[0], s[1], s[2]);
	if (check_pair(x, &t->random_resized_crop.scale,
		       "data.transforms.random_resized_crop.scale") < 0 ||
	    check_pair(x, &t->random_resized_crop.ratio,
		       "data.transforms.random_resized_crop.ratio") < 0)
		return -1;
	if (t->eval_resize < s[1])
		return cfg_fail(x, "data.transforms.eval_resize",
				"%d is smaller than the %d-pixel crop (model.input_shape)",
				t->eval_resize, s[1]);
	return 0;
}

static int check_model_data(struct cfg_ctx *x)
{
	struct cfg *c = x->c;
	const int *s = c->model.input_shape;
	const struct cfg_transforms *t = &c->data.transforms;

	if ((long long)s[0] * s[1] * s[2] > INT_MAX)
		return cfg_fail(x, "model.input_shape",
				"%d x %d x %d values per sample is too many (at most %d)", s[0],
				s[1], s[2], INT_MAX);
	if (c->data.format == CFG_DATA_IDX && s[0] != 1)
		return cfg_fail(x, "model.input_shape",
				"idx images have one channel; expected [1, H, W], got [%d, %d, %d]",
				s[0], s[1], s[2]);
	if (c->data.format == CFG_DATA_CIFAR10 && (s[0] != 3 || s[1] != 32 || s[2] != 32))
		return cfg_fail(x, "model.input_shape",
				"cifar10 images are [3, 32, 32], got [%d, %d, %d]", s[0], s[1],
				s[2]);
	if (!c->data.train.present) {
		const char *need =
		    c->data.format == CFG_DATA_IDX
			? "{\"images\": FILE, \"labels\": FILE} or data.dir"
		    : c->data.format == CFG_DATA_CIFAR10 ? "{\"files\": [FILE, ...]} or data.dir"
		    : is_image(c) ? "{\"root\": DIR} or data.dir (DIR/train, DIR/val)"
				  : "{\"size\": N}";
		return cfg_fail(x, "data.train", "missing; data.format \"%s\" needs %s",
				cfg_enum_canonical(format_names, (int)c->data.format), need);
	}
	if (check_source(x, &c->data.train, "data.train") < 0)
		return -1;
	if (c->data.eval.present && check_source(x, &c->data.eval, "data.eval") < 0)
		return -1;
	if (t->normalize.enabled) {
		if (t->normalize.mean.n != s[0])
			return cfg_fail(
			    x, "data.transforms.normalize.mean",
			    "expected %d value%s (one per channel of model.input_shape), "
			    "got %d",
			    s[0], s[0] == 1 ? "" : "s", t->normalize.mean.n);
		if (t->normalize.std.n != s[0])
			return cfg_fail(
			    x, "data.transforms.normalize.std",
			    "expected %d value%s (one per channel of model.input_shape), "
			    "got %d",
			    s[0], s[0] == 1 ? "" : "s", t->normalize.std.n);
	}
	if (is_image(c) && check_image(x) < 0)
		return -1;
	if (t->random_crop.enabled && t->random_crop.size &&
	    (t->random_crop.size != s[1] || t->random_crop.size != s[2]))
		return cfg_fail(x, "data.transforms.random_crop.size",
				"expected the network input size (model.input_shape is [%d, %d, "
				"%d]), got %d",
				s[0], s[1], s[2], t->random_crop.size);
	return 0;
}

static int check_training(struct cfg_ctx *x)
{
	struct cfg *c = x->c;
	const char *oname = json_string_value(cfg_json_at(x->root, "optimizer.name"));

	if (oname && strcmp(oname, "momentum") == 0 && c->optimizer.momentum == 0)
		return cfg_fail(x, "optimizer.momentum",
				"the \"momentum\" optimizer needs momentum > 0; use \"sgd\" for "
				"plain SGD");
	if (c->optimizer.nesterov && c->optimizer.momentum == 0)
		return cfg_fail(x, "optimizer.nesterov",
				"Nesterov momentum needs optimizer.momentum > 0");
	if (c->lr_schedule.warmup_steps > 0 && c->lr_schedule.warmup_epochs > 0)
		return cfg_fail(x, "lr_schedule.warmup_epochs",
				"give warmup_steps or warmup_epochs, not both");
	if (c->lr_schedule.name == CFG_LR_STEP && c->lr_schedule.step_size == 0)
		return cfg_fail(x, "lr_schedule.step_size",
				"missing; the step schedule needs step_size (an integer >= 1)");
	if (c->lr_schedule.name == CFG_LR_MULTISTEP && c->lr_schedule.milestones.n == 0)
		return cfg_fail(x, "lr_schedule.milestones",
				"missing; the multistep schedule needs milestones (an array of "
				"increasing integers >= 1)");
	if (c->lr_schedule.name == CFG_LR_COSINE && c->lr_schedule.min_lr > c->optimizer.lr)
		return cfg_fail(x, "lr_schedule.min_lr",
				"expected at most optimizer.lr (%g), got %g", c->optimizer.lr,
				c->lr_schedule.min_lr);
	if (c->train.epochs == 0 && c->train.max_steps == 0)
		return cfg_fail(x, "train",
				"epochs and max_steps are both 0; set one of them so training "
				"ends");
	return 0;
}

static int check_output_dir(struct cfg_ctx *x)
{
	for (const char *p = x->c->output.dir; *p; p++) {
		if (*p != '%')
			continue;
		p++;
		if (*p == 'j' || *p == 's' || *p == 'n' || *p == 'u' || *p == '%')
			continue;
		return cfg_fail(x, "output.dir",
				"\"%%%.1s\" is not expanded; only %%j (job id), %%s (step id), %%n "
				"(node name), %%u (user name) and %%%% are",
				p);
	}
	return 0;
}

static int check_runtime(struct cfg_ctx *x)
{
	struct cfg *c = x->c;

	if (c->precision.mode == CFG_PREC_FP16 && c->device.kind == CFG_DEVICE_CPU)
		return cfg_fail(x, "precision.mode",
				"fp16 needs a GPU and device.kind is \"cpu\"; use \"bf16\" or "
				"\"fp32\" on CPUs");
	return check_output_dir(x);
}

/* Allowed, but probably not what was meant. */
static int suspicious(struct cfg_ctx *x)
{
	struct cfg *c = x->c;
	const struct cfg_lr_schedule *s = &c->lr_schedule;

	if (s->warmup_epochs > 0 && c->train.epochs > 0 && s->warmup_epochs >= c->train.epochs &&
	    cfg_warn(x, "lr_schedule.warmup_epochs",
		     "%d is not shorter than train.epochs (%d): the learning rate never reaches "
		     "optimizer.lr",
		     s->warmup_epochs, c->train.epochs) < 0)
		return -1;
	if (s->warmup_steps > 0 && c->train.max_steps > 0 &&
	    s->warmup_steps >= c->train.max_steps &&
	    cfg_warn(x, "lr_schedule.warmup_steps",
		     "%lld is not shorter than train.max_steps (%lld): the learning rate never "
		     "reaches optimizer.lr",
		     (long long)s->warmup_steps, (long long)c->train.max_steps) < 0)
		return -1;
	/* bf16 runs on CPUs with AVX512_BF16 or AMX (the trainer checks the CPU it runs on) */
	if (c->precision.mode == CFG_PREC_TF32 && c->device.kind == CFG_DEVICE_CPU &&
	    cfg_warn(x, "precision.mode", "tf32 is a GPU mode; CPUs compute in fp32") < 0)
		return -1;
	return 0;
}

int cfg_check(struct cfg_ctx *x)
{
	struct cfg *c = x->c;
	struct cfg d = {0};
	int rv = -1;

	if (cfg_set_defaults(&d) < 0) {
		cfg_fail(x, NULL, "out of memory");
		goto out;
	}
	/* Before the unused keys are dropped: these decide what is used. */
	if (c->parallel.all_reduce_fusion_config.n > 0 && given(x, "parallel.bucket_cap_mb")) {
		cfg_fail(x, "parallel.bucket_cap_mb",
			 "cannot be combined with parallel.all_reduce_fusion_config, which sets "
			 "the buckets itself; remove one of them");
		goto out;
	}
	c->output.dir_given = given(x, "output.dir");
	c->timeouts.rendezvous_given = given(x, "timeouts.rendezvous_s");
	if (!given(x, "precision.loss_scale"))
		c->precision.dynamic_loss_scale = c->precision.mode == CFG_PREC_FP16;

	if (drop_unused(x, cfg_schema, c, &d, x->root, "") < 0 || derived_defaults(x) < 0 ||
	    (c->trainer && check_model_data(x) < 0) || check_training(x) < 0 ||
	    check_runtime(x) < 0 || suspicious(x) < 0)
		goto out;
	rv = 0;
out:
	cfg_free(&d);
	return rv;
}

/* Over the whole schema, with the per-field operations of config_fields.c. */
void cfg_free(struct cfg *c)
{
	if (!c)
		return;
	for (const struct cfg_key *k = cfg_schema; k->name; k++)
		cfg_field_free(k, c);
	for (int i = 0; i < c->nwarnings; i++)
		free(c->warnings[i]);
	free(c->warnings);
	free(c->path);
	memset(c, 0, sizeof(*c));
}

int cfg_equal(const struct cfg *a, const struct cfg *b)
{
	for (const struct cfg_key *k = cfg_schema; k->name; k++)
		if (!cfg_field_equal(k, a, b))
			return 0;
	return 1;
}
