/* config.h — the dptrain job config (JSON): parsed into one validated struct with defaults.
 * Pure C + jansson: the SPANK plugin and dptrain-launch link this too, so a bad config is
 * refused on the srun command line. Must not depend on Slurm, PMIx or the rest of the trainer.
 *
 * API contract used by other modules (keep these names; the config owner fills the rest):
 *   int  cfg_load(struct cfg *c, const char *path, int noverrides, char *const overrides[],
 *                 struct dp_error *err);   0 ok, -1 error (err names file + JSON path)
 *   int  cfg_parse(struct cfg *c, const char *text, size_t len, const char *name,
 *                  int noverrides, char *const overrides[], struct dp_error *err);
 *   char *cfg_to_json(const struct cfg *c);    resolved config, malloc'd, pretty JSON
 *   void cfg_free(struct cfg *c);
 * Fields other modules read: c->output.dir, c->output.per_rank_logs, c->output.console,
 * c->timeouts.rendezvous_s, c->device.kind, c->device.allow_shared_gpu, c->path (absolute).
 *
 * Every key, its default and range is documented in doc/dptrain.json.5; the schema itself
 * (names, kinds, ranges) lives in config_schema.c. */
#ifndef DPTRAIN_CONFIG_H
#define DPTRAIN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Configs larger than this are refused before parsing (a real one is a few KiB). */
#define CFG_MAX_FILE_SIZE (16u << 20)

/* The bundled models: config_models.def is the one list. */
enum cfg_model_name {
#define MODEL(id, name, family, arg) CFG_MODEL_##id,
#include "config/config_models.def"
#undef MODEL
};
enum cfg_model_family { CFG_FAMILY_MLP, CFG_FAMILY_LENET, CFG_FAMILY_RESNET };

/* A model's name as a config writes it ("resnet50"), its family, and the family's parameter
 * (a resnet's depth); NULL / -1 for a value that is no model. */
const char *cfg_model_string(enum cfg_model_name m);
int cfg_model_family(enum cfg_model_name m);
int cfg_model_arg(enum cfg_model_name m);

/* small: 3x3 stride-1 conv, no max pool (CIFAR/MNIST-sized inputs);
 * imagenet: 7x7 stride-2 conv + 3x3 stride-2 max pool (torchvision). */
enum cfg_stem { CFG_STEM_SMALL, CFG_STEM_IMAGENET };

enum cfg_data_format {
	CFG_DATA_IDX,
	CFG_DATA_CIFAR10,
	CFG_DATA_SYNTHETIC,
	CFG_DATA_IMAGEFOLDER,
	CFG_DATA_SHARDS,
};

/* MindSpore's "momentum" optimizer is parsed as CFG_OPT_SGD with momentum > 0. */
enum cfg_optimizer_name { CFG_OPT_SGD, CFG_OPT_ADAMW, CFG_OPT_LAMB };

enum cfg_lr_schedule_name { CFG_LR_CONSTANT, CFG_LR_STEP, CFG_LR_MULTISTEP, CFG_LR_COSINE };

/* What lr_schedule.step_size and lr_schedule.milestones count. */
enum cfg_lr_unit { CFG_LR_UNIT_EPOCH, CFG_LR_UNIT_STEP };

/* MindSpore's AMP levels are aliases: O0 -> fp32, O1 and O2 -> fp16 (O3 is refused). */
enum cfg_precision_mode { CFG_PREC_FP32, CFG_PREC_TF32, CFG_PREC_BF16, CFG_PREC_FP16 };

enum cfg_resume { CFG_RESUME_AUTO, CFG_RESUME_NEVER, CFG_RESUME_PATH };

enum cfg_device_kind { CFG_DEVICE_AUTO, CFG_DEVICE_CPU, CFG_DEVICE_CUDA };

enum cfg_console { CFG_CONSOLE_RANK0, CFG_CONSOLE_ALL, CFG_CONSOLE_NONE };
enum cfg_progress { CFG_PROGRESS_AUTO, CFG_PROGRESS_LINES, CFG_PROGRESS_OFF };
/* output.device_dirs: device<RANK> (global rank) or device<DEVICE_ID> (node-local device) */
enum cfg_device_dirs { CFG_DEVDIRS_RANK, CFG_DEVDIRS_DEVICE };

struct cfg_int_list {
	int *v;
	int n;
};

struct cfg_double_list {
	double *v;
	int n;
};

struct cfg_string_list {
	char **v;
	int n;
};

/* data.train / data.eval. Which fields apply depends on data.format; the others hold their
 * defaults (NULL, empty, 0). Paths are absolute. */
struct cfg_data_source {
	bool present;		      /* eval: false = no evaluation */
	char *images;		      /* idx */
	char *labels;		      /* idx */
	struct cfg_string_list files; /* cifar10: binary batch files, read in this order */
	int size;		      /* synthetic: number of samples */
	char *root;		      /* imagefolder: the class folders' parent; shards: the dir */
	char *index;		      /* imagefolder: a `dptrain-data index` file, or NULL */
};

struct cfg {
	char *path;	   /* absolute path of the config file (not resolved through symlinks) */
	char *description; /* NULL when absent */
	int64_t seed;	   /* global seed: weight init, dropout; default of data.seed */

	struct cfg_model {
		enum cfg_model_name name;
		int num_classes;
		int input_shape[3];	    /* C, H, W of one sample as the network sees it */
		enum cfg_stem stem;	    /* resnets; default small when H <= 64, else imagenet */
		struct cfg_int_list hidden; /* mlp: widths of the hidden layers */
		char *init;		    /* NULL, or absolute path of a safetensors file */
	} model;

	struct cfg_data {
		enum cfg_data_format format;
		char *dir; /* NULL, or absolute: where train/eval were looked up by default */
		struct cfg_data_source train;
		struct cfg_data_source eval;
		int batch_size;	     /* per rank */
		int eval_batch_size; /* per rank */
		bool shuffle;
		int64_t seed;
		bool drop_remainder;
		struct cfg_transforms { /* training only, except normalize (train and eval) */
			struct cfg_random_crop {
				bool enabled;
				int size; /* 0: the input size; else equal to H and W */
				int padding;
			} random_crop;
			struct cfg_random_resized_crop { /* imagefolder, shards (always on) */
				bool enabled;
				struct cfg_double_list scale; /* 2 values: area fraction range */
				struct cfg_double_list ratio; /* 2 values: aspect ratio range */
			} random_resized_crop;
			int eval_resize; /* imagefolder, shards: the shorter side before the crop */
			bool dct_scaling; /* imagefolder, shards: decode training JPEGs at reduced
					     size */
			bool horizontal_flip;
			struct cfg_normalize {
				bool enabled;
				struct cfg_double_list mean; /* one per channel */
				struct cfg_double_list std;  /* one per channel, > 0 */
			} normalize;
		} transforms;
		int workers;  /* prefetch threads; 0 = load in the training thread */
		int prefetch; /* batches prepared ahead */
		int max_bad;  /* imagefolder, shards: undecodable images skipped before stopping */
	} data;

	struct cfg_optimizer {
		enum cfg_optimizer_name name;
		double lr;
		double momentum; /* sgd */
		bool nesterov;	 /* sgd */
		double weight_decay;
		bool no_decay_bn_bias; /* no weight decay on batchnorm weights and biases */
		double betas[2];       /* adamw, lamb */
		double eps;	       /* adamw, lamb */
	} optimizer;

	struct cfg_lr_schedule {
		enum cfg_lr_schedule_name name;
		int64_t warmup_steps; /* at most one of warmup_steps / warmup_epochs is > 0 */
		int warmup_epochs;
		enum cfg_lr_unit unit;		/* step, multistep */
		int64_t step_size;		/* step */
		double gamma;			/* step, multistep */
		struct cfg_int_list milestones; /* multistep: strictly increasing */
		double min_lr;			/* cosine */
	} lr_schedule;

	struct cfg_train {
		int epochs;	   /* 0: until max_steps */
		int64_t max_steps; /* 0: until epochs; both > 0: whichever comes first */
		int64_t log_every; /* steps */
		int eval_every;	   /* epochs; 0: only at the end */
		double label_smoothing;
		int threads;		    /* 0: OMP_NUM_THREADS, else all cores */
		double straggler_threshold; /* > 1: x the others' median compute+data time */
		int straggler_window;	    /* reports (log_every steps each); 0: no watch */
	} train;

	struct cfg_parallel {
		bool gradients_mean; /* true: average (PyTorch DDP); false: sum (MindSpore) */
		bool parameter_broadcast;
		struct cfg_int_list
		    all_reduce_fusion_config; /* strictly increasing split indices */
		int grad_accumulation_step;
		bool enable_parallel_optimizer;
		struct cfg_parallel_optimizer_config {
			int parallel_optimizer_threshold; /* KB */
		} parallel_optimizer_config;
		double bucket_cap_mb; /* used when all_reduce_fusion_config is empty */
	} parallel;

	struct cfg_precision {
		enum cfg_precision_mode mode;
		bool dynamic_loss_scale;   /* true: initial_loss_scale, growth_interval apply */
		double loss_scale;	   /* static scale when !dynamic_loss_scale */
		double initial_loss_scale; /* dynamic */
		int growth_interval;	   /* dynamic: steps without overflow before doubling */
	} precision;

	struct cfg_checkpoint {
		char *dir; /* as given, relative to the working directory; NULL: <output
			      dir>/checkpoints */
		int64_t every_steps;
		int every_epochs;
		int keep;
		enum cfg_resume resume;
		char *resume_path; /* CFG_RESUME_PATH: absolute; else NULL */
	} checkpoint;

	struct cfg_device {
		enum cfg_device_kind kind;
		bool allow_shared_gpu;
		bool deterministic;
	} device;

	struct cfg_output {
		char *dir;	/* as given, with %j %s %n %% (see cfg_expand_output_dir) */
		bool dir_given; /* the config names output.dir (a site's default_output_dir=
				   applies where it does not) */
		bool per_rank_logs;
		enum cfg_console console;
		bool metrics;
		bool tensorboard; /* rank 0's TensorBoard event file */
		bool report;	  /* rank 0 writes report.html at each evaluation and the end */
		enum cfg_progress progress; /* loss and progress lines: auto, lines, off */
		enum cfg_device_dirs device_dirs;
		bool run_in_device_dir; /* the command starts in its device directory */
	} output;

	struct cfg_network {
		char *interface; /* whose address a rank publishes; NULL: the first non-loopback */
	} network;

	struct cfg_mindspore {
		bool dynamic_cluster; /* msrun's startup: MS_* variables and a scheduler */
		char *hccn_conf;      /* absolute; NULL: /etc/hccn.conf */
	} mindspore;

	struct cfg_timeouts {
		double rendezvous_s;
		bool rendezvous_given; /* the config names it (a site's max_timeout= caps the
					  default without failing the job) */
		double collective_s;
		double shutdown_s;
	} timeouts;

	/* Things that are allowed but probably not meant ("name: message", without the file
	 * name): a key that the chosen options ignore, warmup longer than training. The caller
	 * prints them, prefixed by its program name and the config name. */
	int nwarnings;
	char **warnings;
	/* The config has a model and data: the bundled trainer can run it. Always true from
	 * cfg_load and cfg_parse; cfg_load_launch accepts a config without them. */
	bool trainer;
};

/* Read and validate the config file at path, then apply the overrides ("path.to.key=VALUE",
 * VALUE parsed as JSON when it parses, else taken as a string; "key=null" removes a key so
 * its default applies). Relative input paths resolve against the directory of path.
 * Returns 0, or -1 with the first error in err ("NAME: json.path: what is expected") and c
 * holding nothing to free. */
int cfg_load(struct cfg *c, const char *path, int noverrides, char *const overrides[],
	     struct dp_error *err);

/* cfg_load as the launchers and the plugin read a config, whose command may be any program:
 * "model" and "data" may be absent (a launch-only config: output.*, timeouts.*, device.*);
 * what is there is checked as cfg_load checks it, and c->trainer says whether both are. */
int cfg_load_launch(struct cfg *c, const char *path, struct dp_error *err);

/* Whether a command is the bundled trainer (dptrain, or a path ending in /dptrain), whose
 * config must be read whole with cfg_load; any other command's with cfg_load_launch. */
int cfg_is_trainer_command(const char *cmd);

/* The same on text[0..len), named name in messages; c->path becomes name made absolute. */
int cfg_parse(struct cfg *c, const char *text, size_t len, const char *name, int noverrides,
	      char *const overrides[], struct dp_error *err);

/* The resolved config (defaults filled in, paths absolute) as pretty JSON that cfg_parse
 * reads back into an equal struct. malloc'd; NULL when out of memory. */
char *cfg_to_json(const struct cfg *c);

/* 1 when every setting of a and b is the same (path and warnings are not compared). */
int cfg_equal(const struct cfg *a, const struct cfg *b);

/* Frees what c holds and zeroes it; safe on a zeroed or already freed struct. */
void cfg_free(struct cfg *c);

/* Expand output.dir: %j -> jobid, %s -> stepid, %n -> "local" (run by hand), %% -> %. Returns
 * the length written, or -1 when buf is too small or pattern holds another % sequence
 * (cfg_parse refuses those). */
int cfg_expand_output_dir(const char *pattern, const char *jobid, const char *stepid, char *buf,
			  size_t buflen);

#endif
