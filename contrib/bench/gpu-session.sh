#!/bin/bash
# gpu-session.sh — everything one lent GPU machine session runs, in one command from the repo
# root: records the GPU, toolkit and libraries (reads them; changes no GPU setting), builds into
# BUILD_DIR, runs the CUDA, NCCL and GPU optimizer unit tests and the GPU end-to-end test
# t/t1000-gpu.t through prove, and the ResNet-50 benchmark in bf16, tf32 and fp32: PyTorch's
# (contrib/bench/resnet50-torch.py) and dptrain's (contrib/bench/resnet50-dptrain.sh) mode by
# mode, side by side in the summary. Each stage is time-boxed and its exit status goes into
# OUT/summary.md, rewritten after every stage; a failed stage does not stop the next. Writes only
# OUT, BUILD_DIR and a temporary directory it removes.
#
#   bash contrib/bench/gpu-session.sh            (on the GPU machine: OUT is set there)
#   STAGES=tests bash contrib/bench/gpu-session.sh, then STAGES=bench ...   (two device calls:
#                 all of it takes more than one 10-minute call; the build is kept between them)
#   OUT=/tmp/gpu-out-test JOBS=2 bash contrib/bench/gpu-session.sh     (no-GPU dry run)
#
# Environment: OUT (default ./gpu-out), BUILD_DIR (build-gpu), JOBS (16), BUDGET (seconds for
# everything, 470; 560 for STAGES=bench alone), STAGES (tests,bench: a comma list of tests,
# bench, profile (ncu over one dptrain step, PROFILE_MODE bf16, PROFILE_BATCH, PROFILE_CAP
# 150 s) and sanitize (compute-sanitizer memcheck and racecheck over backend_cuda.t and comm_nccl.t, SANITIZE_CAP
# 90 s each)), PLAN (the benchmark runs in order, SIDE:MODE:CAP with SIDE torch, dptrain,
# dptrain@NAME=VALUE (dptrain with that variable set: "dptrain@DPTRAIN_CUDA_BN_VEC=0:bf16:70"
# beside "dptrain:bf16:90" is an A/B in one call), torch-jpeg or dptrain-jpeg; default PyTorch bf16 eager and compiled, dptrain bf16 and fp16, then
# both in bf16 on real JPEGs: about 530 s, a call of its own), TEST_CAP (backend_cuda.t's seconds, 150; the other unit tests
# 3/5 of it), E2E_CAP (t1000-gpu.t's, 300), NVCC_ARCH (-gencode arch=compute_90,code=sm_90), CUDA_HOME (found from
# nvcc), PYTHON (the first python3 that imports torch and torchvision), DEBS_DIR (.gpudeps): .deb
# files to unpack into a private prefix for what the machine lacks: libraries, and for
# t/t1000-gpu.t Debian's sharness and dataset-fashion-mnist (pointed at in the prefix: a copy of
# t/sharness.sh in the temporary directory, DPTRAIN_FMNIST_DIR), made here by
# contrib/bench/gpu-deps.sh and carried ('carry': [".gpudeps"]; about 32 MB with the dataset).
# At most 8 files come back from a device run, so OUT holds exactly these: summary.md, env.log,
# build.log, tests.log (every test stage, one after the other), bench.log (both benchmarks),
# bench.json ({"pytorch": [...], "dptrain": [...]}: each mode's --json report), profile.csv
# (ncu's), sanitize.log.
# Real JPEGs (PLAN sides torch-jpeg and dptrain-jpeg): IMAGES (default 4000) JPEGs made once in
# the temporary directory by contrib/bench/make-images.py, one process per core, from the
# photographs gpu-deps.sh puts in DEBS_DIR/photos (else its synthetic content), at the batch the
# last synthetic PyTorch entry found.
set -u -o pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" || { echo "gpu-session: cannot create OUT=$OUT" >&2; exit 1; }
OUT=$(cd "$OUT" && pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-16}
NVCC_ARCH=${NVCC_ARCH:--gencode arch=compute_90,code=sm_90}
DEBS_DIR=${DEBS_DIR:-.gpudeps}
STAGES=${STAGES:-tests,bench}
# a call of the benchmarks alone may take most of a device call's 600 s
BUDGET=${BUDGET:-$([ "$STAGES" = bench ] && echo 560 || echo 470)}
case ,$STAGES, in *,tests,* | *,bench,* | *,profile,* | *,sanitize,*) ;; *)
	echo "gpu-session: STAGES=$STAGES: give a comma list of tests, bench, profile, sanitize" >&2
	exit 1
	;;
esac
stage_on() { case ,$STAGES, in *,$1,*) return 0 ;; esac; return 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deadline=$((SECONDS + BUDGET))
failed=0
rm -f "$OUT/summary.md" "$OUT/env.log" "$OUT/build.log" "$OUT/tests.log" "$OUT/bench.log" \
	"$OUT/bench.json" "$OUT/profile.csv" "$OUT/sanitize.log"
: >"$work/rows"
: >"$work/notes"

# ---- summary.md: a table of stages and notes, rewritten whole after each stage ------------
write_summary() {
	{
		echo "# dptrain GPU session, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (+ local changes)')"
		echo
		echo "| stage | result | exit | seconds | log |"
		echo "|-------|--------|-----:|--------:|-----|"
		cat "$work/rows"
		echo
		cat "$work/notes"
	} >"$OUT/summary.md.tmp" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
}
record() { # STAGE RESULT EXIT SECONDS LOG
	printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4" "$5" >>"$work/rows"
	case $2 in ok* | passed* | skipped* | absent*) ;; *) failed=1 ;; esac
	write_summary
}
note() { printf '%s\n' "$*" >>"$work/notes"; write_summary; }

# run_stage CAP LOG CMD...: CMD under timeout, min(CAP, what is left of BUDGET), output appended
# to LOG; sets rc (124: timed out, 125: not run, no time left), dt and res.
run_stage() {
	local cap=$1 log=$2 t0=$SECONDS t
	shift 2
	t=$((deadline - SECONDS))
	[ "$t" -gt "$cap" ] && t=$cap
	if [ "$t" -lt 10 ]; then
		rc=125 dt=0 res="not run: the $BUDGET s budget is spent"
		return
	fi
	echo "\$ $*  (timeout ${t}s)" >>"$log"
	timeout -k 10 "$t" "$@" >>"$log" 2>&1
	rc=$? dt=$((SECONDS - t0))
	case $rc in
	0) res=ok ;;
	124 | 137) res="timed out after ${t}s" ;;
	*) res=failed ;;
	esac
}
section() { printf '\n==== %s\n' "$*" >>"$OUT/env.log"; }
# probe NAME CODE FLAGS...: does a C program with CODE compile and link?
probe() {
	local name=$1 code=$2
	shift 2
	if printf '%b' "$code" | ${CC:-gcc} -x c - -o "$work/probe" "$@" >>"$work/probe.log" 2>&1; then
		echo "$name: yes" >>"$OUT/env.log"
		return 0
	fi
	echo "$name: no" >>"$OUT/env.log"
	return 1
}

# ---- 1. the GPU (nvidia-smi queries only) -------------------------------------------------
t0=$SECONDS
have_gpu=no
section "host"
{ uname -a; nproc; free -g 2>/dev/null; grep -m1 'model name' /proc/cpuinfo; } >>"$OUT/env.log" 2>&1
section "nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
	q=name,driver_version,memory.total,memory.used,compute_cap,pstate,clocks.sm,clocks.max.sm,power.limit,mig.mode.current
	timeout 60 nvidia-smi --query-gpu=$q --format=csv >"$work/smi.csv" 2>&1
	rc=$?
	cat "$work/smi.csv" >>"$OUT/env.log"
	timeout 60 nvidia-smi >>"$OUT/env.log" 2>&1
	if [ $rc -eq 0 ] && [ "$(wc -l <"$work/smi.csv")" -ge 2 ]; then
		have_gpu=yes
		record gpu "ok: $(sed -n 2p "$work/smi.csv" | cut -d, -f1-3 | sed 's/|/\//g')" 0 $((SECONDS - t0)) env.log
	else
		record gpu "failed: nvidia-smi found no GPU" $rc $((SECONDS - t0)) env.log
	fi
else
	echo "nvidia-smi: absent" >>"$OUT/env.log"
	record gpu "absent: no nvidia-smi (no NVIDIA driver); GPU tests skip, benchmark on the CPU only" - 0 env.log
fi

# ---- 2. toolkit, python, libraries: what the build will find, and what is missing ---------
t0=$SECONDS
section "toolkit"
if [ -z "${CUDA_HOME:-}" ]; then
	if [ -x /usr/local/cuda/bin/nvcc ]; then
		CUDA_HOME=/usr/local/cuda
	elif command -v nvcc >/dev/null 2>&1; then
		CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
	else
		CUDA_HOME=/usr/local/cuda
	fi
fi
export CUDA_HOME
echo "CUDA_HOME=$CUDA_HOME" >>"$OUT/env.log"
if [ -x "$CUDA_HOME/bin/nvcc" ]; then
	"$CUDA_HOME/bin/nvcc" --version >>"$OUT/env.log" 2>&1
	nvcc_v=$("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
else
	echo "nvcc: absent at $CUDA_HOME/bin/nvcc" >>"$OUT/env.log"
	nvcc_v=absent
fi
{ ${CC:-gcc} --version | head -n 1; make --version | head -n 1; prove --version; } >>"$OUT/env.log" 2>&1

section "python"
if [ -z "${PYTHON:-}" ]; then
	for p in python3 /usr/bin/python3; do
		command -v "$p" >/dev/null 2>&1 || continue
		if "$p" -c 'import torch, torchvision' >/dev/null 2>&1; then PYTHON=$p; break; fi
		if [ -z "${PYTHON:-}" ] && "$p" -c 'import torch' >/dev/null 2>&1; then PYTHON=$p; fi
	done
fi
PYTHON=${PYTHON:-python3}
echo "PYTHON=$PYTHON ($(command -v "$PYTHON"))" >>"$OUT/env.log"
timeout 120 "$PYTHON" - >>"$OUT/env.log" 2>&1 <<'PY'
import sys
print("python", sys.version.split()[0])
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
          "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(0))
    import torchvision
    print("torchvision", torchvision.__version__)
except Exception as e:
    print("import failed:", e)
PY

# Libraries the machine lacks can come as .deb files in DEBS_DIR, unpacked into a private
# prefix (never into /) that the compiler, linker and tests are pointed at.
section "libraries"
debs=$(ls "$DEBS_DIR"/*.deb 2>/dev/null)
prefix=
if [ -n "$debs" ]; then
	prefix=$top/$BUILD_DIR/debroot
	mkdir -p "$prefix"
	for d in $debs; do
		dpkg-deb -x "$d" "$prefix" >>"$OUT/env.log" 2>&1 || echo "unpacking $d failed" >>"$OUT/env.log"
	done
	libdir=$prefix/usr/lib/$(${CC:-gcc} -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
	# and the multiarch include directory: libjpeg62-turbo-dev's jconfig.h is there
	ma=$(${CC:-gcc} -print-multiarch 2>/dev/null)
	export CPATH=$prefix/usr/include${ma:+:$prefix/usr/include/$ma}${CPATH:+:$CPATH}
	export LIBRARY_PATH=$libdir:$prefix/usr/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
	export LD_LIBRARY_PATH=$libdir:$prefix/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	echo "unpacked into $prefix: $(echo "$debs" | xargs -n1 basename | tr '\n' ' ')" >>"$OUT/env.log"
	dangling=$(find "$prefix" -xtype l -name '*.so' -printf '%f ' 2>/dev/null)
	[ -n "$dangling" ] && note "- $DEBS_DIR: $dangling point nowhere: add the runtime packages (e.g. libjansson4 beside libjansson-dev)"
	note "- libraries from $DEBS_DIR (unpacked into $BUILD_DIR/debroot): $(echo "$debs" | xargs -n1 basename | tr '\n' ' ')"
fi
cu="-I$CUDA_HOME/include -L$CUDA_HOME/lib64"
missing_req="" missing_opt=""
for tool in ${CC:-gcc} make prove timeout; do
	command -v "$tool" >/dev/null 2>&1 || missing_req="$missing_req $tool"
done
probe jansson '#include <jansson.h>\nint main(void){return json_object()==0;}\n' -ljansson || missing_req="$missing_req jansson(libjansson-dev)"
probe zlib '#include <zlib.h>\nint main(void){return zlibVersion()==0;}\n' -lz || missing_req="$missing_req zlib(zlib1g-dev)"
probe libjpeg '#include <stdio.h>\n#include <jpeglib.h>\nint main(void){struct jpeg_decompress_struct d;jpeg_crop_scanline(&d,0,0);return 0;}\n' -ljpeg || missing_req="$missing_req libjpeg-turbo(libjpeg62-turbo-dev)"
probe libpng '#include <png.h>\nint main(void){png_image i={0};return png_image_begin_read_from_memory(&i,0,0);}\n' -lpng || missing_req="$missing_req libpng(libpng-dev)"
probe openmp 'int main(void){return 0;}\n' -fopenmp || missing_req="$missing_req libgomp"
probe onednn '#include <oneapi/dnnl/dnnl.h>\nint main(void){return dnnl_version()==0;}\n' -ldnnl || missing_opt="$missing_opt onednn(libdnnl-dev)"
probe openblas '#include <cblas.h>\nint main(void){return openblas_get_num_threads()<0;}\n' $(pkg-config --cflags openblas 2>/dev/null) -lopenblas || missing_opt="$missing_opt openblas(libopenblas-dev)"
[ "$nvcc_v" = absent ] && missing_req="$missing_req nvcc"
probe cudart '#include <cuda_runtime.h>\nint main(void){int v;return cudaRuntimeGetVersion(&v);}\n' $cu -lcudart || missing_req="$missing_req cudart"
probe cublas '#include <cublas_v2.h>\nint main(void){cublasHandle_t h;return cublasCreate(&h);}\n' $cu -lcublas || missing_req="$missing_req cublas"
cudnn_code='#include <cudnn.h>\nint main(void){return cudnnGetVersion()==0;}\n'
nccl_code='#include <nccl.h>\nint main(void){int v;return ncclGetVersion(&v);}\n'
have_cudnn=yes have_nccl=yes
probe cudnn "$cudnn_code" $cu -lcudnn || have_cudnn=no
probe nccl "$nccl_code" $cu -lnccl || have_nccl=no

# cuDNN and NCCL missing from the toolkit but shipped in PyTorch's wheels (nvidia-cudnn-cu*,
# nvidia-nccl-cu*): build against those, through linker names made in BUILD_DIR.
make_cuda=()
if [ $have_cudnn = no ] || [ $have_nccl = no ]; then
	wheel=$(timeout 60 "$PYTHON" -c 'import nvidia, os; print(os.path.abspath(list(nvidia.__path__)[0]))' 2>/dev/null)
	if [ -n "$wheel" ]; then
		links=$top/$BUILD_DIR/wheel-lib
		mkdir -p "$links"
		cflags="-I$CUDA_HOME/include" libs="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -L$links"
		for pair in cudnn:libcudnn nccl:libnccl; do
			pkg=${pair%%:*} lib=${pair#*:}
			so=$(ls "$wheel/$pkg/lib/$lib".so* 2>/dev/null | head -n 1)
			[ -n "$so" ] || continue
			ln -sf "$so" "$links/$lib.so"
			cflags="$cflags -I$wheel/$pkg/include" libs="$libs -Wl,-rpath,$wheel/$pkg/lib"
		done
		export LD_LIBRARY_PATH=$links${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		echo "PyTorch's wheels at $wheel: CUDA_CFLAGS=$cflags CUDA_LIBS=$libs" >>"$OUT/env.log"
		wheel_used=
		if [ $have_cudnn = no ] && probe "cudnn (wheel)" "$cudnn_code" $cflags $libs -lcudnn; then
			have_cudnn=wheel wheel_used="$wheel_used cudnn"
		fi
		if [ $have_nccl = no ] && probe "nccl (wheel)" "$nccl_code" $cflags $libs -lnccl; then
			have_nccl=wheel wheel_used="$wheel_used nccl"
		fi
		if [ -n "$wheel_used" ]; then
			make_cuda=("CUDA_CFLAGS=$cflags" "CUDA_LIBS=$libs")
			note "- built against PyTorch's wheels for:$wheel_used ($wheel)"
		fi
	fi
fi
[ $have_cudnn = no ] && missing_opt="$missing_opt cudnn(the CUDA backend is then a stub)"
[ $have_nccl = no ] && missing_opt="$missing_opt nccl(comm_nccl.t skips)"
echo "missing, required:${missing_req:- none}; optional:${missing_opt:- none}" >>"$OUT/env.log"
note "- toolkit: nvcc $nvcc_v at $CUDA_HOME; python: $PYTHON; cudnn: $have_cudnn, nccl: $have_nccl"
note "- missing, required:${missing_req:- none}; optional:${missing_opt:- none}"
if [ -n "$missing_req" ]; then
	record deps "missing:$missing_req" - $((SECONDS - t0)) env.log
else
	record deps "ok${missing_opt:+ (optional missing:$missing_opt)}" 0 $((SECONDS - t0)) env.log
fi

# ---- 3. build -------------------------------------------------------------------------------
export DPTRAIN_BUILD_DIR=$top/$BUILD_DIR DPTRAIN_SRC_DIR=$top DPTRAIN_SAN=0
build_ok=no
if echo "$missing_req" | grep -q jansson; then
	record build "not run: jansson is missing (the Makefile requires it); carry its .debs in DEBS_DIR (see the header of this script)" - 0 build.log
	echo "not run: jansson missing" >"$OUT/build.log"
else
	# -k: a broken unrelated target must not keep the CUDA tests from being built.
	run_stage 300 "$OUT/build.log" make -k O="$BUILD_DIR" -j"$JOBS" NVCC_ARCH="$NVCC_ARCH" \
		CUDA_HOME="$CUDA_HOME" "${make_cuda[@]}"
	[ $rc -eq 0 ] && build_ok=yes
	[ $rc -ne 0 ] && [ $rc -ne 125 ] && res="$res: $(grep -m1 -E 'error|Error' "$OUT/build.log" | cut -c1-160 | sed 's/|/\//g')"
	record build "$res" $rc $dt build.log
	# Another compiler may warn where this project's does not: the GPU stages still need a
	# build, so a failed one is retried without -Werror (the failure stays in the table).
	if [ $rc -ne 0 ] && [ $rc -ne 125 ] && grep -q -- '-Werror' "$OUT/build.log"; then
		echo "==== again without -Werror" >>"$OUT/build.log"
		run_stage 200 "$OUT/build.log" make -k O="$BUILD_DIR" -j"$JOBS" NVCC_ARCH="$NVCC_ARCH" \
			CUDA_HOME="$CUDA_HOME" "${make_cuda[@]}" \
			WARN="-Wall -Wextra -Wshadow -Wformat=2 -Wno-format-nonliteral"
		[ $rc -eq 0 ] && build_ok=yes
		record "build without -Werror" "$res" $rc $dt build.log
	fi
	note "- build probes: $(grep -E '^ +(cuda|cudnn|nccl|onednn|openblas):' "$OUT/build.log" | tr -s ' ' | sed 's/^ //; s/|/\//g' | paste -sd';' - | sed 's/;/; /g')"
fi

# ---- 4. tests through prove (verbose), all into tests.log -----------------------------------
# test_result NAME OFFSET: summary row of the prove run that wrote tests.log from byte OFFSET on.
test_result() {
	local sec nskip why all result
	sec=$(tail -c +$(($2 + 1)) "$OUT/tests.log")
	nskip=$(printf '%s\n' "$sec" | grep -c -i '# skip')
	why=$(printf '%s\n' "$sec" | grep -m1 -i '# skip' | sed 's/.*# [Ss][Kk][Ii][Pp] *//' | cut -c1-100 | sed 's/|/\//g')
	[ $rc -eq 0 ] && res="passed"
	[ "$nskip" -gt 0 ] && res="$res ($nskip skipped, first: $why)"
	# A test that skips everything passes prove (NOTESTS): on a GPU machine that is a failure.
	all=$(printf '%s\n' "$sec" | grep -m1 -o 'skipped: .*' | cut -c10-170 | sed 's/|/\//g')
	if [ -n "$all" ]; then
		res="skipped: $all"
		[ $have_gpu = yes ] && res="failed: skipped all on a GPU machine: $all"
	fi
	result=$(printf '%s\n' "$sec" | grep -m1 '^Result:')
	record "test $1" "$res${result:+; prove $result}" $rc $dt tests.log
}
# fresh NAME TARGETS...: after a failed build, a binary from an earlier build here must not pass
# for this tree's.
fresh() {
	local name=$1
	shift
	[ $build_ok = yes ] && return 0
	make -q O="$BUILD_DIR" NVCC_ARCH="$NVCC_ARCH" CUDA_HOME="$CUDA_HOME" "${make_cuda[@]}" \
		"$@" >/dev/null 2>&1 && return 0
	record "test $name" "failed: $* stale (the build failed or did not run)" - 0 tests.log
	echo "not run: $* older than the sources and the build failed" >>"$OUT/tests.log"
	return 1
}

# tap TEST [ARGS] (a command for run_stage): through prove where the machine has it, else the
# test itself (its TAP stream in the log; its exit status counts the failures)
tap=(bash -c 't=$1; shift
	if command -v prove >/dev/null 2>&1; then exec prove -v --timer --exec "" "$t" ${1:+::} "$@"; fi
	echo "(no prove here: the test'"'"'s own TAP output)"; exec "$t" "$@"' tap)
# unit_tests NAME...: the GPU unit tests t/unit/NAME.c, each boxed (backend_cuda.t TEST_CAP,
# the others 3/5 of it)
unit_tests() {
	local t bin cap off
	for t in "$@"; do
		bin=./$BUILD_DIR/t/$t.t
		printf '\n==== test %s\n' "$t" >>"$OUT/tests.log"
		if [ ! -f "t/unit/$t.c" ]; then
			record "test $t" "absent: t/unit/$t.c is not in this tree" - 0 tests.log
			echo "not run: t/unit/$t.c is not in this tree" >>"$OUT/tests.log"
			continue
		fi
		if [ ! -x "$bin" ]; then
			record "test $t" "failed: $bin was not built" - 0 tests.log
			echo "not run: $bin was not built" >>"$OUT/tests.log"
			continue
		fi
		fresh "$t" "$bin" || continue
		cap=${TEST_CAP:-150}
		[ $t = backend_cuda ] || cap=$((cap * 3 / 5))
		off=$(stat -c %s "$OUT/tests.log")
		run_stage $cap "$OUT/tests.log" "${tap[@]}" "$bin"
		test_result "$t" "$off"
	done
}
: >"$OUT/tests.log"
if stage_on tests; then
	# most telling first: every op against the CPU, the optimizers, then the trainer end to
	# end (t1000), then NCCL, which t1000's DDP runs already touch
	unit_tests backend_cuda optim_gpu

	# The end-to-end test needs Debian's sharness and Fashion-MNIST; where the machine has
	# neither, their .debs from DEBS_DIR (unpacked into the prefix) stand in.
	printf '\n==== test t1000-gpu\n' >>"$OUT/tests.log"
	t1000=t/t1000-gpu.t
	sh_lib=/usr/share/sharness/sharness.sh
	if [ ! -f $sh_lib ] && [ -n "$prefix" ] && [ -f "$prefix$sh_lib" ]; then
		mkdir -p "$work/t"
		sed "s|$sh_lib|$prefix$sh_lib|g" t/sharness.sh >"$work/t/sharness.sh"
		cp "$t1000" "$work/t/"
		t1000=$work/t/t1000-gpu.t
		note "- t1000-gpu.t ran with sharness from $DEBS_DIR (a copy of t/sharness.sh pointed at $prefix$sh_lib)"
	fi
	fm=/usr/share/datasets/fashion-mnist
	if [ ! -f $fm/train-images-idx3-ubyte.gz ] && [ -n "$prefix" ] &&
		[ -f "$prefix$fm/train-images-idx3-ubyte.gz" ]; then
		export DPTRAIN_FMNIST_DIR=$prefix$fm
		note "- t1000-gpu.t read Fashion-MNIST from $DEBS_DIR ($DPTRAIN_FMNIST_DIR)"
	fi
	if fresh t1000-gpu "$BUILD_DIR/bin/dptrain" "$BUILD_DIR/bin/dptrain-run" \
		"$BUILD_DIR/bin/dptrain-launch"; then
		off=$(stat -c %s "$OUT/tests.log")
		# sharness -v: every command's output, for a failure seen only here
		run_stage "${E2E_CAP:-300}" "$OUT/tests.log" "${tap[@]}" "$t1000" -v
		test_result t1000-gpu "$off"
	fi
	unit_tests comm_nccl

	# Several ranks on one GPU over NCCL need NCCL 2.30 or later (NCCL_MULTI_RANK_GPU_ENABLE):
	# the NCCL the build loads and the one PyTorch's wheel carries, each asked its version at
	# run time; where only the wheel's is new enough, comm_nccl and t1000-gpu run again with
	# it first on the loader's path (the same soname, libnccl.so.2).
	built_nccl=
	# shellcheck disable=SC2086 # flags are words
	probe "nccl run-time version" '#include <nccl.h>\n#include <stdio.h>\nint main(void){int v = 0; ncclGetVersion(&v); printf("%d\\n", v); return 0;}\n' \
		$cu -Wl,-rpath,"$CUDA_HOME/lib64" ${make_cuda[0]:+${make_cuda[0]#CUDA_CFLAGS=}} \
		${make_cuda[1]:+${make_cuda[1]#CUDA_LIBS=}} -lnccl &&
		cp "$work/probe" "$work/nccl-version" && built_nccl=$("$work/nccl-version" 2>/dev/null)
	wheel_nccl=$(timeout 60 "$PYTHON" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
	torch_nccl=
	[ -x "$work/nccl-version" ] && [ -n "$wheel_nccl" ] && [ -e "$wheel_nccl/libnccl.so.2" ] &&
		torch_nccl=$(LD_LIBRARY_PATH=$wheel_nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/nccl-version" 2>/dev/null)
	echo "NCCL at run time: the build's ${built_nccl:-unknown}, PyTorch's wheel's ${torch_nccl:-none} ($wheel_nccl)" >>"$OUT/env.log"
	note "- NCCL at run time (ncclGetVersion): the build's ${built_nccl:-unknown}, PyTorch's wheel's ${torch_nccl:-none}; several ranks on one GPU need 23000 (2.30)"
	if [ "${built_nccl:-0}" -lt 23000 ] && [ "${torch_nccl:-0}" -ge 23000 ]; then
		export LD_LIBRARY_PATH=$wheel_nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		note "- comm_nccl and t1000-gpu again with the wheel's NCCL $torch_nccl first on LD_LIBRARY_PATH"
		unit_tests comm_nccl
		printf '\n==== test t1000-gpu (the wheel'"'"'s NCCL)\n' >>"$OUT/tests.log"
		off=$(stat -c %s "$OUT/tests.log")
		run_stage "${E2E_CAP:-300}" "$OUT/tests.log" "${tap[@]}" "$t1000" -v
		test_result "t1000-gpu (wheel NCCL)" "$off"
	fi
fi

# ---- 5. ResNet-50: PyTorch's, then dptrain's, mode by mode (one process per mode and side) -----
bench=contrib/bench/resnet50-torch.py
dbench=contrib/bench/resnet50-dptrain.sh
export PYTHONUNBUFFERED=1
tjsons=() djsons=()
# PLAN: SIDE:MODE:CAP entries run in order; SIDE is torch or dptrain. dptrain's batch search
# starts at the batch the last PyTorch entry found (or 256).
if [ $have_gpu = yes ]; then
	plan=${PLAN:-"torch:bf16:75 dptrain:bf16:90 dptrain:fp16:70 torch:bf16-compile:130 dptrain-jpeg:bf16:80 torch-jpeg:bf16:80"}
	args=() dargs=()
else
	plan=${PLAN:-"torch:fp32:120 dptrain:fp32:120"}
	args=(--device cpu --batch 2 --steps 2 --warmup 1)
	dargs=(--smoke)
	stage_on bench && note "- no GPU: the benchmarks ran as CPU smoke tests (PyTorch: batch 2 at 224x224, 2 steps; dptrain: batch 2 at 32x32, 3 steps), not measurements"
fi
# json_row FILE: the first result of a --json report as "img/s at batch B", or its error
json_row() {
	"$PYTHON" -c 'import json,sys
r = json.load(open(sys.argv[1]))["results"][0]
print("%s img/s at batch %s" % (r["img_per_s"], r["batch"]) if r["status"] == "ok"
      else "%s: %s" % (r["status"], r.get("error", "?")[:160]))' "$1" 2>/dev/null | sed 's/|/\//g'
}
stage_on bench || plan=
: >"$OUT/bench.log"
tbatch=
# make_images: the JPEG set for the *-jpeg sides, once: $work/img/train/class_NN/*.jpg
img_ready=
make_images() {
	[ -n "$img_ready" ] && return "$img_ready"
	local n=${IMAGES:-4000} k procs src=() t0=$SECONDS
	procs=$(nproc)
	[ -d "$DEBS_DIR/photos" ] && src=(--sources "$DEBS_DIR/photos")
	echo "==== images: $n JPEGs, $procs processes${src:+, photos from $DEBS_DIR/photos}" >>"$OUT/bench.log"
	mkdir -p "$work/img/train"
	for k in $(seq 0 $((procs - 1))); do
		timeout 120 "$PYTHON" contrib/bench/make-images.py "$work/img/part$k" \
			-n $(((n + procs - 1) / procs)) --seed $((k + 1)) "${src[@]}" \
			$([ ${#src[@]} = 0 ] && echo --synthetic) >>"$OUT/bench.log" 2>&1 &
	done
	wait
	for d in "$work"/img/part*/class_*; do
		[ -d "$d" ] || continue
		mkdir -p "$work/img/train/${d##*/}"
		for f in "$d"/*.jpg; do
			mv "$f" "$work/img/train/${d##*/}/$(basename "$(dirname "$d")")-${f##*/}"
		done
	done
	k=$(find "$work/img/train" -name '*.jpg' | wc -l)
	note "- JPEGs for the *-jpeg runs: $k made in $((SECONDS - t0)) s ($([ ${#src[@]} = 0 ] && echo synthetic content || echo "photos from $DEBS_DIR/photos"))"
	img_ready=1
	[ "$k" -ge 1 ] && [ "$k" -ge $((n / 2)) ] && img_ready=0
	return "$img_ready"
}
for p in $plan; do
	side=${p%%:*} rest=${p#*:}
	mode=${rest%%:*} cap=${rest#*:}
	if [ "$side" = torch-jpeg ] || [ "$side" = dptrain-jpeg ]; then
		echo "==== $side $mode" >>"$OUT/bench.log"
		if ! make_images; then
			record "bench $side $mode" "failed: the JPEG set was not made (bench.log)" - 0 bench.log
			continue
		fi
		jb=${tbatch:-256} js=$work/bench-$side-$mode.json
		if [ "$side" = torch-jpeg ]; then
			run_stage "$cap" "$OUT/bench.log" \
				bash -c 'py=$1 script=$2 mode=$3 out=$4; shift 4
					"$py" "$script" --modes "$mode" --json "$@" >"$out.tmp"; rc=$?
					[ -s "$out.tmp" ] && mv "$out.tmp" "$out"; exit $rc' \
				bash "$PYTHON" "$bench" "$mode" "$js" --images "$work/img" --batch "$jb" \
				--warmup 10 --steps 30 "${args[@]}"
		else
			run_stage "$cap" "$OUT/bench.log" \
				bash -c 'script=$1 mode=$2 out=$3; shift 3
					bash "$script" --modes "$mode" --json "$@" >"$out.tmp"; rc=$?
					[ -s "$out.tmp" ] && mv "$out.tmp" "$out"; exit $rc' \
				bash "$dbench" "$mode" "$js" --seconds $((cap - 20)) --images "$work/img" \
				--batch "$jb" "${dargs[@]}"
		fi
		if [ -s "$js" ]; then
			[ "$side" = torch-jpeg ] && tjsons+=("$js") || djsons+=("$js")
			res="$res: $(json_row "$js")"
		fi
		record "bench $side $mode" "$res" $rc $dt bench.log
		continue
	fi
	if [ "$side" = torch ]; then
		echo "==== pytorch $mode" >>"$OUT/bench.log"
		tb=()
		# a compiled mode compiles once per batch: it takes the batch eager bf16 found
		case $mode in *compile* | *autotune*) [ -n "$tbatch" ] && tb=(--batch "$tbatch") ;; esac
		run_stage "$cap" "$OUT/bench.log" \
			bash -c 'py=$1 script=$2 mode=$3 out=$4; shift 4
				"$py" "$script" --modes "$mode" --json "$@" >"$out.tmp"; rc=$?
				[ -s "$out.tmp" ] && mv "$out.tmp" "$out"; exit $rc' \
			bash "$PYTHON" "$bench" "$mode" "$work/bench-$mode.json" "${args[@]}" "${tb[@]}"
		[ $rc -eq 2 ] && res="failed: $(tail -n 1 "$OUT/bench.log" | cut -c1-160 | sed 's/|/\//g')"
		if [ -s "$work/bench-$mode.json" ]; then
			tjsons+=("$work/bench-$mode.json")
			res="$res: $(json_row "$work/bench-$mode.json")"
			b=$("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(r["batch"] if r["status"] == "ok" else "")' "$work/bench-$mode.json" 2>/dev/null)
			[ -n "$b" ] && tbatch=$b
		fi
		record "bench pytorch $mode" "$res" $rc $dt bench.log
		continue
	fi
	# dptrain at the batch PyTorch found (or smaller, if it does not fit), each run boxed
	# inside the stage's cap; side dptrain@NAME=VALUE runs it with that variable set (an A/B
	# of a switch such as DPTRAIN_CUDA_BN_VEC=0 in the same call)
	denv=()
	case $side in dptrain@*=*) denv=("${side#dptrain@}") ;; dptrain) ;; *)
		record "bench $side $mode" "failed: PLAN side $side: torch, dptrain, dptrain@NAME=VALUE, torch-jpeg or dptrain-jpeg" - 0 bench.log
		continue
		;;
	esac
	echo "==== dptrain $mode ${denv[*]}" >>"$OUT/bench.log"
	mb=()
	[ $have_gpu = yes ] && [ -n "$tbatch" ] && mb=(--max-batch "$tbatch")
	dj=$work/dbench-$mode${denv:+-${#djsons[@]}}.json
	run_stage "$cap" "$OUT/bench.log" env "${denv[@]}" \
		bash -c 'script=$1 mode=$2 out=$3; shift 3
			bash "$script" --modes "$mode" --json "$@" >"$out.tmp"; rc=$?
			[ -s "$out.tmp" ] && mv "$out.tmp" "$out"; exit $rc' \
		bash "$dbench" "$mode" "$dj" --seconds $((cap - 20)) "${mb[@]}" \
		"${dargs[@]}"
	if [ -s "$dj" ]; then
		djsons+=("$dj")
		row=$(json_row "$dj")
		case $row in skipped:*) res=$row ;; *) res="$res: $row" ;; esac
	elif [ $rc -eq 2 ]; then
		res="failed: $(tail -n 1 "$OUT/bench.log" | cut -c1-160 | sed 's/|/\//g')"
	fi
	record "bench dptrain $mode${denv:+ (${denv[*]})}" "$res" $rc $dt bench.log
done

# ---- 6. where dptrain's step goes: ncu over one whole step (PROFILE_MODE, default bf16) ------
# DPTRAIN_PROFILE_STEP opens ncu's capture range for that step alone; every kernel's duration
# (gpu__time_duration.sum) lands in profile.csv, summed by kind in the summary.
if stage_on profile && [ $have_gpu = yes ] && command -v ncu >/dev/null 2>&1; then
	pm=${PROFILE_MODE:-bf16} pb=${PROFILE_BATCH:-${tbatch:-128}}
	echo "==== ncu: dptrain $pm batch $pb, step 6" >>"$OUT/bench.log"
	run_stage "${PROFILE_CAP:-150}" "$OUT/bench.log" env DPTRAIN_PROFILE_STEP=6 \
		ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
		--csv --log-file "$OUT/profile.csv" \
		"$BUILD_DIR/bin/dptrain" contrib/examples/resnet50-synthetic.json device.kind=cuda \
		precision.mode="$pm" data.batch_size="$pb" train.epochs=0 train.max_steps=7 \
		train.log_every=1 data.eval=null output.dir="$work/prof" checkpoint.resume=never \
		checkpoint.every_epochs=0 checkpoint.every_steps=0 lr_schedule=null optimizer.lr=0.01 \
		optimizer.weight_decay=0 train.label_smoothing=0
	record "profile dptrain $pm" "$res" $rc $dt profile.csv
	if [ -s "$OUT/profile.csv" ]; then
		{
			echo
			echo "## One dptrain step ($pm, batch $pb) by kernel kind (ncu, --clock-control none)"
			echo
			"$PYTHON" contrib/bench/ncu-breakdown.py "$OUT/profile.csv" 2>&1
		} >>"$work/notes"
		write_summary
	fi
	rm -rf "$work/prof"
fi

# ---- 7. compute-sanitizer memcheck and racecheck over the backend and NCCL tests ------------
if stage_on sanitize && [ $have_gpu = yes ] && command -v compute-sanitizer >/dev/null 2>&1; then
	: >"$OUT/sanitize.log"
	for tool in memcheck racecheck; do
		for t in backend_cuda comm_nccl; do
			[ -x "./$BUILD_DIR/t/$t.t" ] || continue
			echo "==== compute-sanitizer --tool $tool $t" >>"$OUT/sanitize.log"
			run_stage "${SANITIZE_CAP:-90}" "$OUT/sanitize.log" compute-sanitizer --tool $tool \
				--error-exitcode 99 --print-limit 20 "./$BUILD_DIR/t/$t.t"
			errs=$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize.log" | tail -n 1)
			record "sanitize $tool $t" "$res${errs:+: $errs}" $rc $dt sanitize.log
		done
	done
fi
if [ $((${#tjsons[@]} + ${#djsons[@]})) -gt 0 ]; then
	"$PYTHON" - "${tjsons[@]}" -- "${djsons[@]}" >"$OUT/bench.json" 2>>"$OUT/bench.log" <<-'PY'
	import json, sys
	args = sys.argv[1:]
	cut = args.index("--")
	json.dump({"pytorch": [json.load(open(f)) for f in args[:cut]],
	           "dptrain": [json.load(open(f)) for f in args[cut + 1:]]}, sys.stdout, indent=1)
	PY
	{
		echo
		echo "## ResNet-50, dptrain and PyTorch side by side"
		echo
		"$PYTHON" - "$OUT/bench.json" 2>&1 <<-'PY'
		import json, sys
		b = json.load(open(sys.argv[1]))
		rows = {}
		for side in ("pytorch", "dptrain"):
		    for rep in b[side]:
		        for r in rep["results"]:
		            rows.setdefault(r["mode"], {})[side] = dict(r, image=rep["image"])
		for side in ("dptrain", "pytorch"):
		    if b[side]:
		        e, rep = b[side][0]["env"], b[side][0]
		        print("- %s: %s, %s; %s" % (side, e.get("device"), "x".join(map(str, rep["image"])),
		              ", ".join("%s %s" % (k, e[k]) for k in ("dptrain", "torch", "cuda", "cudnn",
		                                                     "driver") if e.get(k))))
		print()
		print("| mode | batch dptrain / PyTorch | dptrain img/s | PyTorch img/s | dptrain / PyTorch "
		      "| TFLOP/s dptrain / PyTorch | peak GiB dptrain / PyTorch | data wait ms dptrain / PyTorch |")
		print("|------|------:|------:|------:|------:|------:|------:|------:|")
		ok = lambda r: r is not None and r.get("status") == "ok"
		def val(r, key, fmt):
		    if not ok(r):
		        return "-"
		    return "n/a" if r.get(key) is None else fmt % r[key]
		def ips(r):  # the measurement, or why there is none
		    if r is None:
		        return "not run"
		    if not ok(r):
		        return "%s: %s" % (r.get("status"), r.get("error", "?")[:80].replace("|", "/"))
		    return "%.1f" % r["img_per_s"]
		for mode in rows:
		    d, t = rows[mode].get("dptrain"), rows[mode].get("pytorch")
		    ratio = "-"
		    if ok(d) and ok(t):  # a ratio of other image sizes (the CPU smoke tests) is none
		        ratio = ("%.2f" % (d["img_per_s"] / t["img_per_s"]) if d["image"] == t["image"]
		                 else "- (other image sizes)")
		    pair = lambda k, f: "%s / %s" % (val(d, k, f), val(t, k, f))
		    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (mode, pair("batch", "%d"), ips(d),
		          ips(t), ratio, pair("tflops", "%.2f"), pair("peak_mem_gib", "%.2f"),
		          pair("data_wait_ms", "%.3f")))
		PY
		if [ ${#tjsons[@]} -gt 0 ]; then
			echo
			echo "## ResNet-50, PyTorch"
			echo
			"$PYTHON" "$bench" --table-from "${tjsons[@]}" 2>&1
		fi
		echo
	} >>"$work/notes"
	write_summary
fi

verdict="all stages ok"
[ $failed -ne 0 ] && verdict="SOME STAGES FAILED (see the table)"
[ $have_gpu = no ] && verdict="$verdict; no GPU here: GPU stages skipped"
note "- verdict: $verdict; $((SECONDS)) s in all"
echo "gpu-session: $verdict; $OUT/summary.md"
cat "$OUT/summary.md"
exit $failed
