# dptrain — top-level GNU Makefile.
# Probes optional dependencies by compiling and linking against their headers and libraries
# (never by asking the package manager), says what it found, and always builds the CPU-only
# parts. Objects go to $(O) (build/, or build-san/ with SAN=1) so both builds coexist.

PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
LIBDIR      ?= $(PREFIX)/lib
LIBEXECDIR  ?= $(PREFIX)/libexec/dptrain
MANDIR      ?= $(PREFIX)/share/man
DATADIR     ?= $(PREFIX)/share/dptrain
SYSCONFDIR  ?= /etc
DESTDIR     ?=
CUDA_HOME   ?= /usr/local/cuda
SAN         ?= 0
V           ?= 0

comma := ,
hash := \#
empty :=
space := $(empty) $(empty)

ifeq ($(SAN),1)
O ?= build-san
else
O ?= build
endif
# make names files by words: a build directory with a blank cannot be one. The checkout's own
# path may have blanks (O is relative to it by default).
ifneq ($(words $(O)),1)
$(error the build directory O='$(O)' has a blank, and make cannot name files in it: give O a path without blanks, for instance one relative to the checkout (the default is build))
endif

CC      ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif
FUZZCC  ?= clang
PROVE   ?= prove
PKG_CONFIG ?= pkg-config

VERSION := $(shell cat VERSION 2>/dev/null || echo 0.0.0)

WARN     := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wno-format-nonliteral
HARDEN   := -fstack-protector-strong -fPIC
# Every project #include is written from the repository's root ("store/store.h"), so
# where a dependency comes from is seen where it is used (contrib/ci/check-layers checks it).
CPPFLAGS += -DDPTRAIN_VERSION='"$(VERSION)"' -I.
CFLAGS   ?= -O2 -g
CFLAGS   += -std=gnu11 $(WARN) $(HARDEN) -pthread
LDFLAGS  += -Wl,-z,now -Wl,-z,relro -pthread
ifeq ($(SAN),1)
CFLAGS   += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
else
CPPFLAGS += -D_FORTIFY_SOURCE=2
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---------------------------------------------------------------------------------------
# Probes. Each sets HAVE_X := yes|no and X_VERSION. One compile/link each, at parse time.
probe_link = $(call probe_link_with,$(CC),$(1),$(2))
probe_link_with = $(shell printf '%b' '$(2)' | $(1) -x c - -o /dev/null $(3) >/dev/null 2>&1 && echo yes || echo no)
probe_macro = $(shell printf '%b' '$(1)' | $(CC) -E -P -x c - $(2) 2>/dev/null | tail -n 1 | sed 's/[ "]//g; s/\([0-9]\)[LU]*\b/\1/g')

# Libraries outside the compiler's default paths (Slurm built into /opt/slurm, oneDNN from
# Intel's installer): X_CFLAGS and X_LDFLAGS on make's command line say where, e.g.
#   make SLURM_CFLAGS=-I/opt/slurm/include DNNL_CFLAGS=-I/opt/dnnl/include \
#        DNNL_LDFLAGS="-L/opt/dnnl/lib64 -Wl,-rpath,/opt/dnnl/lib64"
# By default they come from pkg-config where the library ships a .pc file (jansson, pmix,
# openblas everywhere; slurm.pc with the RPMs that Slurm's own slurm.spec builds, whatever
# their prefix; Debian's libslurm-dev and oneDNN have none and need none).
pc_default = $(if $(filter undefined,$(origin $(1))),$(eval $(1) := $(shell $(PKG_CONFIG) $(2) 2>/dev/null)))
$(call pc_default,JANSSON_CFLAGS,--cflags jansson)
$(call pc_default,JANSSON_LDFLAGS,--libs-only-L jansson)
$(call pc_default,SLURM_CFLAGS,--cflags slurm)
$(call pc_default,OPENBLAS_CFLAGS,--cflags openblas)
$(call pc_default,OPENBLAS_LDFLAGS,--libs-only-L openblas)
DNNL_CFLAGS  ?=
DNNL_LDFLAGS ?=

HAVE_JANSSON := $(call probe_link,$(hash)include <jansson.h>\nint main(void){return json_object()==0;}\n,$(JANSSON_CFLAGS) $(JANSSON_LDFLAGS) -ljansson)
JANSSON_VERSION := $(call probe_macro,$(hash)include <jansson.h>\nJANSSON_VERSION\n,$(JANSSON_CFLAGS))

HAVE_SLURM := $(call probe_link,$(hash)include <slurm/spank.h>\nint main(void){return 0;}\n,$(SLURM_CFLAGS))
SLURM_VERSION := $(shell v=$$(printf '%b' '$(hash)include <slurm/slurm_version.h>\nSLURM_VERSION_NUMBER\n' | $(CC) -E -P -x c - $(SLURM_CFLAGS) 2>/dev/null | tail -n 1); [ -n "$$v" ] && printf '%d.%02d.%d' $$((v>>16)) $$((v>>8&255)) $$((v&255)))

PMIX_CFLAGS := $(shell $(PKG_CONFIG) --cflags pmix 2>/dev/null)
PMIX_LIBS   := $(shell $(PKG_CONFIG) --libs pmix 2>/dev/null)
HAVE_PMIX := $(call probe_link,$(hash)include <pmix.h>\nint main(void){return PMIx_Initialized();}\n,$(PMIX_CFLAGS) $(PMIX_LIBS))
PMIX_VERSION := $(call probe_macro,$(hash)include <pmix_version.h>\nPMIX_VERSION_MAJOR.PMIX_VERSION_MINOR.PMIX_VERSION_RELEASE\n,$(PMIX_CFLAGS))

HAVE_DNNL := $(call probe_link,$(hash)include <oneapi/dnnl/dnnl.h>\nint main(void){return dnnl_version()==0;}\n,$(DNNL_CFLAGS) $(DNNL_LDFLAGS) -ldnnl)
DNNL_VERSION := $(call probe_macro,$(hash)include <oneapi/dnnl/dnnl_version.h>\nDNNL_VERSION_MAJOR.DNNL_VERSION_MINOR.DNNL_VERSION_PATCH\n,$(DNNL_CFLAGS))

HAVE_OPENBLAS := $(call probe_link,$(hash)include <cblas.h>\nint main(void){return openblas_get_num_threads()<0;}\n,$(OPENBLAS_CFLAGS) $(OPENBLAS_LDFLAGS) -lopenblas)
OPENBLAS_VERSION := $(patsubst OpenBLAS%,%,$(call probe_macro,$(hash)include <openblas_config.h>\nOPENBLAS_VERSION\n,$(OPENBLAS_CFLAGS)))

# Every object and program sees them (openblas's and pmix's only where those are used, below).
CPPFLAGS += $(JANSSON_CFLAGS) $(SLURM_CFLAGS) $(DNNL_CFLAGS)
LDFLAGS  += $(JANSSON_LDFLAGS) $(DNNL_LDFLAGS) $(if $(filter yes,$(HAVE_OPENBLAS)),$(OPENBLAS_LDFLAGS))

CUDA_CFLAGS := -I$(CUDA_HOME)/include
CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64
HAVE_CUDA := $(call probe_link,$(hash)include <cuda_runtime.h>\nint main(void){int v;return cudaRuntimeGetVersion(&v);}\n,$(CUDA_CFLAGS) $(CUDA_LIBS) -lcudart)
CUDA_VERSION := $(shell v=$$(printf '%b' '$(hash)include <cuda.h>\nCUDA_VERSION\n' | $(CC) -E -P -x c - $(CUDA_CFLAGS) 2>/dev/null | tail -n 1); [ -n "$$v" ] && echo $$((v/1000)).$$((v%1000/10)))
HAVE_CUDNN := $(call probe_link,$(hash)include <cudnn.h>\nint main(void){return cudnnGetVersion()==0;}\n,$(CUDA_CFLAGS) $(CUDA_LIBS) -lcudnn)
CUDNN_VERSION := $(call probe_macro,$(hash)include <cudnn_version.h>\nCUDNN_MAJOR.CUDNN_MINOR.CUDNN_PATCHLEVEL\n,$(CUDA_CFLAGS))
HAVE_NCCL := $(call probe_link,$(hash)include <nccl.h>\nint main(void){int v;return ncclGetVersion(&v);}\n,$(CUDA_CFLAGS) $(CUDA_LIBS) -lnccl)
NCCL_VERSION := $(call probe_macro,$(hash)include <nccl.h>\nNCCL_MAJOR.NCCL_MINOR.NCCL_PATCH\n,$(CUDA_CFLAGS))
NVCC := $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc))

HAVE_SHARNESS := $(if $(wildcard /usr/share/sharness/sharness.sh),yes,no)
HAVE_SLURMD   := $(if $(shell command -v slurmd 2>/dev/null),yes,no)
HAVE_FUZZCC   := $(call probe_link_with,$(FUZZCC),int LLVMFuzzerTestOneInput(const char *d, unsigned long n){(void)d;(void)n;return 0;}\n,-fsanitize=fuzzer)

# Required: a C compiler, jansson and zlib. Without one, the targets that build (all, check,
# install, ...) stop with what to install; deps, demo, help and clean work on a bare machine,
# so no $(error) here: the probes above stay quiet when even the compiler is missing.
HAVE_CC   := $(call probe_link,int main(void){return 0;}\n,)
HAVE_ZLIB := $(call probe_link,$(hash)include <zlib.h>\nint main(void){return zlibVersion()==0;}\n,-lz)
HAVE_JPEG := $(call probe_link,$(hash)include <stdio.h>\n$(hash)include <jpeglib.h>\nint main(void){struct jpeg_decompress_struct d;jpeg_crop_scanline(&d,0,0);return 0;}\n,-ljpeg)
HAVE_PNG  := $(call probe_link,$(hash)include <png.h>\nint main(void){png_image i={0};return png_image_begin_read_from_memory(&i,0,0);}\n,-lpng)
need = $(if $(filter yes,$(1)),,$(2);)
MISSING_DEPS := $(strip $(call need,$(HAVE_CC),a C compiler '$(CC)' (Debian: gcc libc6-dev)) \
	$(call need,$(HAVE_JANSSON),jansson (Debian: libjansson-dev)) $(call need,$(HAVE_ZLIB),zlib (Debian: zlib1g-dev)) \
	$(call need,$(HAVE_JPEG),libjpeg-turbo (Debian: libjpeg62-turbo-dev)) $(call need,$(HAVE_PNG),libpng (Debian: libpng-dev)))

# Print what was found once per top-level make (not for 'clean', nor the package targets,
# which build in a copy).
PKG_TARGETS := deb rpm package-test
ifeq ($(filter clean distclean deps demo help format $(PKG_TARGETS),$(MAKECMDGOALS)),)
$(info dptrain $(VERSION): build directory $(O)$(if $(filter 1,$(SAN)), (AddressSanitizer + UBSan),))
$(info $(space) cc:        $(HAVE_CC) ($(CC))$(if $(filter yes,$(HAVE_CC)),, -- required (Debian: gcc libc6-dev)))
$(info $(space) jansson:   $(HAVE_JANSSON)$(if $(filter yes,$(HAVE_JANSSON)), ($(JANSSON_VERSION)), -- required (Debian: libjansson-dev)))
$(info $(space) zlib:      $(HAVE_ZLIB)$(if $(filter yes,$(HAVE_ZLIB)),, -- required (Debian: zlib1g-dev)))
$(info $(space) jpeg/png:  $(HAVE_JPEG)/$(HAVE_PNG)$(if $(filter yesyes,$(HAVE_JPEG)$(HAVE_PNG)),, -- required (Debian: libjpeg62-turbo-dev libpng-dev)))
$(info $(space) slurm:     $(HAVE_SLURM)$(if $(filter yes,$(HAVE_SLURM)), ($(SLURM_VERSION)), -- skipping the SPANK plugin (Debian: libslurm-dev)))
$(info $(space) pmix:      $(HAVE_PMIX)$(if $(filter yes,$(HAVE_PMIX)), ($(PMIX_VERSION)), -- dptrain-launch uses the SLURM_*/torchrun fallback only (Debian: libpmix-dev)))
$(info $(space) onednn:    $(HAVE_DNNL)$(if $(filter yes,$(HAVE_DNNL)), ($(DNNL_VERSION)), (Debian: libdnnl-dev)))
$(info $(space) openblas:  $(HAVE_OPENBLAS)$(if $(filter yes,$(HAVE_OPENBLAS)), ($(OPENBLAS_VERSION)), (Debian: libopenblas-dev)))
$(info $(space) cuda:      $(HAVE_CUDA)$(if $(filter yes,$(HAVE_CUDA)), ($(CUDA_VERSION) at $(CUDA_HOME)), -- no toolkit at CUDA_HOME=$(CUDA_HOME): CUDA backend skipped))
$(info $(space) cudnn:     $(HAVE_CUDNN)$(if $(filter yes,$(HAVE_CUDNN)), ($(CUDNN_VERSION)),))
$(info $(space) nccl:      $(HAVE_NCCL)$(if $(filter yes,$(HAVE_NCCL)), ($(NCCL_VERSION)),))
$(info $(space) tests:     sharness $(HAVE_SHARNESS), slurmd $(HAVE_SLURMD), libFuzzer $(HAVE_FUZZCC))
endif

# ---------------------------------------------------------------------------------------
# Components: one library per folder, its files named (doc/ARCHITECTURE.md says what each
# owns and may use; contrib/ci/check-layers enforces it). Listed in link order: a library
# comes before the ones it uses, so a dependency against the table also fails to link.
TRAIN_SRC   := trainer/train.c trainer/train_ckpt.c trainer/loss_scale.c trainer/metrics.c \
	trainer/tbevents.c trainer/report.c trainer/report_page.c trainer/progress.c \
	trainer/rankwatch.c trainer/straggler.c
DIST_SRC    := trainer/dist/comm_cpu.c trainer/dist/comm_fail.c trainer/dist/comm_nccl.c \
	trainer/dist/comm_staged.c trainer/dist/comm_staged_cuda.c \
	trainer/dist/comm_shm.c trainer/dist/ddp.c
NN_SRC      := trainer/nn/nn.c trainer/nn/nn_build.c trainer/nn/nn_io.c trainer/nn/models.c \
	trainer/nn/init.c
OPTIM_SRC   := trainer/optim/optim.c trainer/optim/optim_exec.c trainer/optim/lr_schedule.c \
	trainer/optim/optim_gpu_none.c
DATA_SRC    := trainer/data/data.c trainer/data/data_cifar.c trainer/data/data_idx.c \
	trainer/data/data_synth.c trainer/data/data_folder.c trainer/data/data_index.c \
	trainer/data/data_shards.c trainer/data/image.c trainer/data/loader.c \
	trainer/data/sampler.c trainer/data/shard_write.c trainer/data/transform.c
CKPT_SRC    := trainer/ckpt/ckpt.c trainer/ckpt/safetensors.c
BACKEND_SRC := trainer/backend/backend_cpu.c trainer/backend/backend_cpu_act.c trainer/backend/backend_ref.c \
	trainer/backend/backend_cpu_act_isa.c trainer/backend/backend_cpu_wino.c \
	trainer/backend/backend_cuda_none.c
# The CPU backend's own kernels once more per x86 level (backend_cpu_act.c; the flags below)
ifneq ($(findstring x86_64,$(shell $(CC) -dumpmachine 2>/dev/null)),)
CPU_ACT_LEVEL_SRC := trainer/backend/backend_cpu_act_avx2.c trainer/backend/backend_cpu_act_avx512.c
BACKEND_SRC += $(CPU_ACT_LEVEL_SRC)
endif
STORE_SRC   := store/store.c store/store_server.c store/store_wire.c
CFG_LIB_SRC := config/config.c config/config_fields.c \
	config/config_json.c config/config_msg.c config/config_schema.c
RT_LIB_SRC  := ranktable/hostlist.c ranktable/ranktable.c ranktable/rt_env.c ranktable/rt_io.c \
	ranktable/rt_json.c ranktable/rt_validate.c
COMMON_SRC  := common/append.c common/atomic_file.c common/envint.c common/errfile.c common/error.c \
	common/hmac.c common/mkdir_p.c common/openfile.c common/path_search.c common/random.c \
	common/readfile.c common/secret.c common/slurm_step.c common/warn.c
# What a rank's task runs beside its command, for the plugin and the launcher alike: the tee
# of its output and MindSpore's scheduler (no PMIx, no Slurm in them).
TASK_SRC    := task/sched.c task/tee.c task/wire.c
LAUNCH_LIB_SRC := launcher/alloc.c launcher/alloc_common.c launcher/alloc_env.c \
	launcher/alloc_pmix.c launcher/alloc_store.c launcher/env_export.c launcher/exec.c \
	launcher/gpu.c launcher/handover.c launcher/hccn.c launcher/local_run.c \
	launcher/netaddr.c launcher/nodeaddr.c launcher/outdir.c launcher/port.c \
	launcher/wire_send.c launcher/wireup.c
SPANK_SRC   := spank/args.c spank/plugin.c spank/local.c spank/remote.c
PLUGIN_SHARED_SRC := $(TASK_SRC) $(COMMON_SRC)
TAP_SRC     := t/lib/tap.c t/lib/ranks.c
UNIT_SRC    := $(wildcard t/unit/*.c)
# The trainer's own code (what the optimizer flags below apply to)
TRAINER_LIB_SRC := $(TRAIN_SRC) $(DIST_SRC) $(NN_SRC) $(OPTIM_SRC) $(DATA_SRC) $(CKPT_SRC) \
	$(BACKEND_SRC) $(STORE_SRC)

obj = $(patsubst %.c,$(O)/obj/%.o,$(1))

lib = $(O)/lib/libdptrain-$(1).a
LIBTRAIN   := $(call lib,train)
LIBDIST    := $(call lib,dist)
LIBNN      := $(call lib,nn)
LIBOPTIM   := $(call lib,optim)
LIBDATA    := $(call lib,data)
LIBCKPT    := $(call lib,ckpt)
LIBBACKEND := $(call lib,backend)
LIBSTORE   := $(call lib,store)
LIBCFG     := $(call lib,config)
LIBRT      := $(call lib,ranktable)
LIBCOMMON  := $(call lib,common)
LIBTASK    := $(call lib,task)
LIBLAUNCH  := $(call lib,launch)
LIBTAP     := $(O)/lib/libtap.a
# Everything the trainer links, in link order
TRAINER_LIBS_A := $(LIBTRAIN) $(LIBDIST) $(LIBNN) $(LIBOPTIM) $(LIBDATA) $(LIBCKPT) $(LIBBACKEND) \
	$(LIBSTORE) $(LIBCFG) $(LIBRT) $(LIBCOMMON)

BIN_RANKTABLE := $(O)/bin/dptrain-ranktable
BIN_TRAINER   := $(O)/bin/dptrain
BIN_LAUNCH    := $(O)/bin/dptrain-launch
BIN_RUN       := $(O)/bin/dptrain-run
BIN_DATA      := $(O)/bin/dptrain-data
BIN_REPORT    := $(O)/bin/dptrain-report
SPANK_SO      := $(O)/lib/dptrain.so
UNIT_TESTS    := $(patsubst t/unit/%.c,$(O)/t/%.t,$(UNIT_SRC))

PROGRAMS := $(BIN_RANKTABLE) $(BIN_TRAINER) $(BIN_LAUNCH) $(BIN_RUN) $(BIN_DATA) $(BIN_REPORT)
ifeq ($(HAVE_PMIX),yes)
LAUNCH_CPPFLAGS := -DHAVE_PMIX=1 $(PMIX_CFLAGS)
LAUNCH_LIBS     := $(PMIX_LIBS)
endif
ifeq ($(HAVE_SLURM),yes)
PROGRAMS += $(SPANK_SO)
endif

.PHONY: $(PKG_TARGETS) programs all check check-unit check-integration check-portable check-layers check-env format install uninstall clean deps fuzz help demo reference bench missing-deps chaos
.DEFAULT_GOAL := all
# Keep the unit tests' objects: they are intermediate to make, but relinking is all we want.
.SECONDARY:

ifeq ($(MISSING_DEPS),)
all: $(PROGRAMS) $(UNIT_TESTS)
else
all: missing-deps
endif

# The programs and the plugin alone (the packages' build: debian/rules, the RPM spec).
programs: $(if $(MISSING_DEPS),missing-deps,$(PROGRAMS))

missing-deps:
	@echo "dptrain: cannot build without $(MISSING_DEPS)" | sed 's/; *$$/./; s/;/,/g' >&2
	@echo "dptrain: run 'make deps' (as root: installs every Debian package the build and the tests need), then make again." >&2
	@exit 1

$(O)/obj/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(filter 0,$(V)),echo "  CC      $<",:)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

CPPFLAGS += $(LAUNCH_CPPFLAGS)

$(O)/lib/%.a:
	@mkdir -p $(@D)
	@$(if $(filter 0,$(V)),echo "  AR      $@",:)
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIBTRAIN): $(call obj,$(TRAIN_SRC))
$(LIBDIST): $(call obj,$(DIST_SRC))
$(LIBNN): $(call obj,$(NN_SRC))
$(LIBOPTIM): $(call obj,$(OPTIM_SRC))
$(LIBDATA): $(call obj,$(DATA_SRC))
$(LIBCKPT): $(call obj,$(CKPT_SRC))
$(LIBBACKEND): $(call obj,$(BACKEND_SRC))
$(LIBSTORE): $(call obj,$(STORE_SRC))
$(LIBCFG): $(call obj,$(CFG_LIB_SRC))
$(LIBRT): $(call obj,$(RT_LIB_SRC))
$(LIBCOMMON): $(call obj,$(COMMON_SRC))
$(LIBTAP): $(call obj,$(TAP_SRC))
# gcc's -O2 does not vectorize loops of unknown length, and sqrtf's errno blocks it: the
# optimizer updates are 2-4x faster with these, bit for bit the same (no FMA contraction).
# -fno-trapping-math lets it vectorize loops that compare floats under a condition (the batch
# norm's fused ReLU): the values are the same, only floating-point exceptions (never enabled
# here) could differ.
$(call obj,$(TRAINER_LIB_SRC)): CFLAGS += -ftree-vectorize -fno-math-errno -ffp-contract=off \
	-fno-trapping-math
# Each level's build of backend_cpu_act.c may use its instructions (no FMA: -ffp-contract=off
# keeps every level's values the same); backend_cpu_act_isa.c calls a level only where oneDNN
# runs it.
$(call obj,trainer/backend/backend_cpu_act_avx2.c): CFLAGS += -mavx2
$(call obj,trainer/backend/backend_cpu_act_avx512.c): CFLAGS += -mavx512f -mavx512bw -mavx512vl \
	-mavx512dq
$(LIBTASK): $(call obj,$(TASK_SRC))
$(LIBLAUNCH): $(call obj,$(LAUNCH_LIB_SRC))

link = @mkdir -p $(@D); $(if $(filter 0,$(V)),echo "  LD      $@";,) $(CC) $(CFLAGS) $(LDFLAGS) -o $@

$(BIN_RANKTABLE): $(call obj,ranktable/dptrain-ranktable.c) $(LIBRT) $(LIBCOMMON)
	$(link) $^ -ljansson

TRAINER_LIBS := -ljansson -ljpeg -lpng -lz -lm
ifeq ($(HAVE_DNNL),yes)
CPPFLAGS     += -DHAVE_DNNL=1
TRAINER_LIBS += -ldnnl
endif
CFLAGS += -fopenmp
LDFLAGS += -fopenmp

# The CUDA backend and NCCL: trainer/*/*.cu through nvcc (sm_90 code plus PTX for newer GPUs),
# CUDA-side C files against the toolkit's headers. Built wherever the toolkit is, GPU or not.
CUDA_BACKEND_SRC := trainer/backend/backend_cuda.cu trainer/backend/cuda_mem.cu \
	trainer/backend/cuda_op.cu trainer/backend/cuda_eltwise.cu trainer/backend/cuda_conv.cu \
	trainer/backend/cuda_bn.cu trainer/backend/cuda_pool.cu trainer/backend/cuda_linear.cu \
	trainer/backend/cuda_loss.cu
CUDA_OPTIM_SRC   := trainer/optim/optim_cuda.cu
ifeq ($(HAVE_CUDA)$(if $(NVCC),yes,no),yesyes)
CPPFLAGS     += -DHAVE_CUDA=1 $(CUDA_CFLAGS)
TRAINER_LIBS += $(CUDA_LIBS) -lcudart -lcublas -lstdc++
ifeq ($(HAVE_CUDNN),yes)
CPPFLAGS     += -DHAVE_CUDNN=1
TRAINER_LIBS += -lcudnn
endif
ifeq ($(HAVE_NCCL),yes)
CPPFLAGS     += -DHAVE_NCCL=1
TRAINER_LIBS += -lnccl
endif
NVCC_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -std=c++17 $(NVCC_ARCH) -Xcompiler -fPIC,-Wall,-Wextra -Werror all-warnings
$(O)/obj/%.o: %.cu
	@mkdir -p $(@D)
	@$(if $(filter 0,$(V)),echo "  NVCC    $<",:)
	$(Q)$(NVCC) $(filter -D% -I%,$(CPPFLAGS)) $(NVCCFLAGS) -MMD -MP -c -o $@ $<
$(LIBBACKEND): $(call obj,$(CUDA_BACKEND_SRC:.cu=.c))
$(LIBOPTIM): $(call obj,$(CUDA_OPTIM_SRC:.cu=.c))
# The CUDA backend's own kernels run on the host (t/unit/kernels_host.cc, through
# t/unit/cuda_emu.h): a C++ unit test wherever the toolkit's headers are, GPU or not.
UNIT_CXX_SRC := $(wildcard t/unit/*.cc)
UNIT_CXX_TESTS := $(patsubst t/unit/%.cc,$(O)/t/%.t,$(UNIT_CXX_SRC))
UNIT_TESTS   += $(UNIT_CXX_TESTS)
all: $(UNIT_CXX_TESTS)
CXX          ?= g++
CXXFLAGS     := $(filter-out -std=%,$(CFLAGS)) -std=gnu++17 -ffp-contract=off -Wno-unknown-pragmas
$(O)/obj/%.o: %.cc
	@mkdir -p $(@D)
	@$(if $(filter 0,$(V)),echo "  CXX     $<",:)
	$(Q)$(CXX) $(CPPFLAGS) $(CXXFLAGS) -MMD -MP -c -o $@ $<
endif

$(BIN_TRAINER): $(call obj,trainer/dptrain.c) $(TRAINER_LIBS_A)
	$(link) $^ $(TRAINER_LIBS)

# Image folders and packed shards: index, pack, verify, and the transforms for tests.
$(BIN_DATA): $(call obj,trainer/data/dptrain-data.c) $(LIBDATA) $(LIBCOMMON)
	$(link) $^ -ljpeg -lpng -lz -lm

# report.html from an output directory: the trainer's page writer (trainer/report.c) alone.
$(BIN_REPORT): $(call obj,trainer/dptrain-report.c) $(LIBTRAIN) $(LIBCFG) $(LIBRT) $(LIBCOMMON)
	$(link) $^ -ljansson -lm

# The rendezvous store is the trainer's; the launchers meet in it too without PMIx.
LAUNCH_LIBS_A := $(LIBLAUNCH) $(LIBTASK) $(LIBSTORE) $(LIBCFG) $(LIBRT) $(LIBCOMMON)
$(BIN_LAUNCH): $(call obj,launcher/dptrain-launch.c) $(LAUNCH_LIBS_A)
	$(link) $^ -ljansson $(LAUNCH_LIBS) -lpthread

$(BIN_RUN): $(call obj,launcher/dptrain-run.c) $(LAUNCH_LIBS_A)
	$(link) $^ -ljansson $(LAUNCH_LIBS) -lpthread

# The plugin is dlopen'ed by srun and slurmstepd, which are not built with ASan (its runtime
# must come first in a process), so with SAN=1 it gets UBSan only. It links its own -fPIC copy
# of the config validator and exports only the SPANK symbols (spank/dptrain.map).
PLUGIN_CFLAGS  := $(filter-out -fopenmp -fsanitize=address$(comma)undefined,$(CFLAGS)) $(if $(filter 1,$(SAN)),-fsanitize=undefined)
PLUGIN_LDFLAGS := $(filter-out -fopenmp -fsanitize=address$(comma)undefined,$(LDFLAGS)) $(if $(filter 1,$(SAN)),-fsanitize=undefined)
$(O)/obj-plugin/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(filter 0,$(V)),echo "  CC      $< (plugin)",:)
	$(Q)$(CC) $(CPPFLAGS) $(PLUGIN_CFLAGS) -MMD -MP -c -o $@ $<

# What the plugin decides at build time: its default launcher ($(BINDIR)/dptrain-launch) and
# whether tasks need PMIX_MCA_gds=hash (the PMIx major version dptrain-launch is built with).
# They go to the plugin's own objects; a change of any of them rebuilds them.
PLUGIN_PMIX_MAJOR := $(if $(filter yes,$(HAVE_PMIX)),$(firstword $(subst ., ,$(PMIX_VERSION))))
PLUGIN_STAMP_TEXT := $(BINDIR) pmix=$(PLUGIN_PMIX_MAJOR)
PREFIX_STAMP := $(O)/prefix.stamp
$(shell mkdir -p $(O) && { [ "$$(cat $(PREFIX_STAMP) 2>/dev/null)" = "$(PLUGIN_STAMP_TEXT)" ] || echo "$(PLUGIN_STAMP_TEXT)" > $(PREFIX_STAMP); })
$(O)/obj-plugin/spank/%.o: CPPFLAGS += -DDPTRAIN_BINDIR='"$(BINDIR)"' \
	$(if $(PLUGIN_PMIX_MAJOR),-DDPTRAIN_PMIX_MAJOR=$(PLUGIN_PMIX_MAJOR))
$(patsubst %.c,$(O)/obj-plugin/%.o,$(SPANK_SRC)): $(PREFIX_STAMP)

$(SPANK_SO): $(patsubst %.c,$(O)/obj-plugin/%.o,$(SPANK_SRC) $(PLUGIN_SHARED_SRC) $(CFG_LIB_SRC)) spank/dptrain.map
	@mkdir -p $(@D)
	@$(if $(filter 0,$(V)),echo "  LD      $@",:)
	$(Q)$(CC) $(PLUGIN_CFLAGS) $(PLUGIN_LDFLAGS) -shared -Wl,--version-script=spank/dptrain.map \
		-o $@ $(filter %.o,$^) -ljansson

$(O)/t/%.t: $(O)/obj/t/unit/%.o $(LIBTAP) $(LIBLAUNCH) $(LIBTASK) $(TRAINER_LIBS_A)
	$(link) $^ $(TRAINER_LIBS) $(LAUNCH_LIBS)

# A launcher of a later release that speaks wire-up protocol 2 (task/wire.h): the real launcher
# with its two version-carrying files rebuilt, for t0310's half-upgraded node.
WIRE2_LAUNCH := $(O)/t/dptrain-launch-wire2
$(O)/obj-wire2/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(filter 0,$(V)),echo "  CC      $< (wire-up protocol 2)",:)
	$(Q)$(CC) $(CPPFLAGS) -UDPTRAIN_VERSION -DDPTRAIN_VERSION='"9.9.9"' -DWIRE_VERSION=2 $(CFLAGS) -MMD -MP -c -o $@ $<
$(WIRE2_LAUNCH): $(O)/obj-wire2/task/wire.o $(O)/obj-wire2/launcher/dptrain-launch.o $(LAUNCH_LIBS_A)
	$(link) $^ -ljansson $(LAUNCH_LIBS) -lpthread
ifeq ($(MISSING_DEPS),)
all: $(WIRE2_LAUNCH)
endif

# Benchmarks (contrib/bench/*.c): built by `make bench`, run by the scripts beside them.
BENCH_PROGS := $(patsubst contrib/bench/%.c,$(O)/bench/%,$(wildcard contrib/bench/*.c))
$(O)/bench/%: $(O)/obj/contrib/bench/%.o $(TRAINER_LIBS_A)
	$(link) $^ $(TRAINER_LIBS)
bench: all $(BENCH_PROGS)

# ---------------------------------------------------------------------------------------
# Tests: C unit tests (TAP) and sharness integration tests, all through prove. One of them:
# make check-integration SHELL_TESTS=t/t0320-srun-dptrain.t (or UNIT_TESTS=... check-unit).
SHELL_TESTS := $(sort $(wildcard t/t[0-9]*.t))
PROVE_FLAGS ?= --timer
export DPTRAIN_BUILD_DIR = $(abspath $(O))
export DPTRAIN_SRC_DIR = $(abspath .)
export DPTRAIN_SAN = $(SAN)

check: all
	$(PROVE) $(PROVE_FLAGS) --exec '' $(UNIT_TESTS) $(SHELL_TESTS)

check-unit: all
	$(PROVE) $(PROVE_FLAGS) --exec '' $(UNIT_TESTS)

# The dependency rules (contrib/ci/check-layers; also t/t0002-layers.t in make check).
# The suite from a checkout unlike CI's (contrib/ci/portable.sh): a long path with blanks and
# non-ASCII characters, another locale and time zone, one CPU; then as a user who is not root.
check-portable:
	contrib/ci/portable.sh --cpus 0 check
	contrib/ci/portable.sh --user dpportable --locale de_DE.UTF-8 --tz America/St_Johns check

check-layers: all
	$(PROVE) $(PROVE_FLAGS) --exec '' t/t0002-layers.t

# The environment contract (common/env.def, contrib/ci/check-env; also t/t0004-env.t).
check-env:
	@python3 contrib/ci/check-env

check-integration: all
	$(PROVE) $(PROVE_FLAGS) --exec '' $(SHELL_TESTS)

# The long chaos run (contrib/chaos/README.md, doc/reliability.md); t/t0850-chaos.t is its
# short version in make check. make chaos CHAOS_FAULTS=1000 CHAOS_TIME=21600 CHAOS_SEED=7
CHAOS_FAULTS ?= 200
CHAOS_JOBS ?= 1
CHAOS_TIME ?= 3600
chaos: all
	/usr/bin/python3 contrib/chaos/chaos.py --faults $(CHAOS_FAULTS) --jobs $(CHAOS_JOBS) \
		--steps 500 --time-limit $(CHAOS_TIME) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) \
		--report $(O)/chaos-report.json

# Formatting: `make format` formats every C and CUDA source as .clang-format says, with the
# clang-format version named there (others break some lines differently); make check checks it
# (t/t0003-format.t). contrib/ci/check-format holds the list of sources and the version rule.
CLANG_FORMAT ?= clang-format
format:
	@CLANG_FORMAT=$(CLANG_FORMAT) sh contrib/ci/check-format --fix

# ---------------------------------------------------------------------------------------
# Fuzzing (clang libFuzzer): one target per parser, FUZZ_SECONDS each.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := $(patsubst t/fuzz/%.c,build-fuzz/%,$(wildcard t/fuzz/fuzz_*.c))
FUZZ_FLAGS := -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -I.

build-fuzz/fuzz_%: t/fuzz/fuzz_%.c $(RT_LIB_SRC) $(CFG_LIB_SRC) $(COMMON_SRC)
	@mkdir -p $(@D)
	$(FUZZCC) $(FUZZ_FLAGS) -o $@ $^ -ljansson -lm

fuzz: $(FUZZ_TARGETS)
	@set -e; for f in $(FUZZ_TARGETS); do \
		n=$$(basename $$f); mkdir -p build-fuzz/corpus-$$n; \
		cp -n t/fuzz/seeds/$${n#fuzz_}/* build-fuzz/corpus-$$n/ 2>/dev/null || true; \
		echo "fuzz: $$n for $(FUZZ_SECONDS) s"; \
		$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -timeout=10 \
			build-fuzz/corpus-$$n 2>build-fuzz/$$n.log || { tail -n 40 build-fuzz/$$n.log; exit 1; }; \
		grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' build-fuzz/$$n.log; \
	done

# ---------------------------------------------------------------------------------------
deps:
	bash contrib/deps.sh

# The README's first command: packages, build, a private Slurm, srun --dptrain jobs.
demo:
	bash contrib/demo.sh

# Regenerate the committed PyTorch reference data in t/reference/data (Debian's python3-torch,
# not a python on PATH). gen_model.py is not among them: its whole-model references are
# hundreds of MB, so t/unit/model_parity.c runs it into a temporary directory at test time.
REFERENCE_PY ?= /usr/bin/python3
reference:
	@set -e; for g in $(filter-out t/reference/gen_model.py,$(wildcard t/reference/gen_*.py)); do \
		echo "  REF     $$g"; $(REFERENCE_PY) $$g; done

install: programs
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/slurm $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DATADIR)/examples \
		$(DESTDIR)$(SYSCONFDIR)/slurm/plugstack.conf.d
	install -m 755 $(filter $(O)/bin/%,$(PROGRAMS)) $(DESTDIR)$(BINDIR)/
	$(if $(filter $(SPANK_SO),$(PROGRAMS)),install -m 755 $(SPANK_SO) $(DESTDIR)$(LIBDIR)/slurm/dptrain.so,@echo "install: no SPANK plugin built (no spank.h)")
	for m in doc/*.1; do [ -e "$$m" ] && install -m 644 $$m $(DESTDIR)$(MANDIR)/man1/; done; true
	for m in doc/*.5; do [ -e "$$m" ] && install -m 644 $$m $(DESTDIR)$(MANDIR)/man5/; done; true
	for m in doc/*.8; do [ -e "$$m" ] && install -m 644 $$m $(DESTDIR)$(MANDIR)/man8/; done; true
	install -m 644 contrib/examples/*.json contrib/examples/*.sbatch $(DESTDIR)$(DATADIR)/examples/
	sed 's|@LIBDIR@|$(LIBDIR)|g; s|@BINDIR@|$(BINDIR)|g' contrib/plugstack.conf.in \
		> $(DESTDIR)$(SYSCONFDIR)/slurm/plugstack.conf.d/dptrain.conf.example
	chmod 644 $(DESTDIR)$(SYSCONFDIR)/slurm/plugstack.conf.d/dptrain.conf.example

# Packages: make deb (debian/, dpkg-buildpackage, lintian) and make rpm (contrib/rpm/dptrain.spec,
# rpmbuild); the files land in $(O)/pkg. make package-test: contrib/ci/package-test.sh, the
# Debian packages built and installed in fresh Debian 12 and 13 roots (CI runs Debian 12's).
deb:
	$(if $(filter command line,$(origin CUDA_HOME)),DEB_CUDA_HOME=$(CUDA_HOME)) sh contrib/pkg/build-deb.sh $(O)/pkg
rpm:
	sh contrib/pkg/build-rpm.sh $(O)/pkg
package-test:
	bash contrib/ci/package-test.sh --debian 12 && bash contrib/ci/package-test.sh --debian 13

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(filter $(O)/bin/%,$(PROGRAMS))))
	rm -f $(DESTDIR)$(LIBDIR)/slurm/dptrain.so
	rm -f $(DESTDIR)$(SYSCONFDIR)/slurm/plugstack.conf.d/dptrain.conf.example
	rm -rf $(DESTDIR)$(DATADIR)

clean:
	rm -rf build build-san build-fuzz t/test-results "t/trash directory."*

help:
	@echo "make [SAN=1] [CUDA_HOME=...]   build (SAN=1: AddressSanitizer + UBSan into build-san/)"
	@echo "make deps                      install the Debian packages needed to build and test"
	@echo "make check [SAN=1]             unit + integration tests through prove"
	@echo "make check-portable            the suite from an odd path, one CPU, other locales, a user not root"
	@echo "make check-layers              the dependency rules (contrib/ci/check-layers), also in make check"
	@echo "make check-env                 the environment contract (common/env.def), also in make check"
	@echo "make format                    clang-format every source (.clang-format names the version), checked by make check"
	@echo "make fuzz [FUZZ_SECONDS=60]    libFuzzer on the rank-table reader and config parser"
	@echo "make install PREFIX=/usr DESTDIR=...   install programs, plugin, man pages, examples"
	@echo "make deb | rpm                 Debian packages (debian/) or RPMs (contrib/rpm/dptrain.spec) in $(O)/pkg"
	@echo "make package-test              the Debian packages installed and used in fresh Debian 12 and 13 roots"
	@echo "make demo                      packages, build, a private Slurm, srun --dptrain jobs"
	@echo "make bench                     build the benchmark programs (contrib/bench, doc/performance.md)"
	@echo "make chaos [CHAOS_FAULTS=200]   the long fault-injection run (contrib/chaos, doc/reliability.md)"
	@echo "make reference                 regenerate t/reference/data with Debian's python3-torch"

-include $(shell find $(O)/obj $(O)/obj-plugin $(O)/obj-wire2 -name '*.d' 2>/dev/null)
