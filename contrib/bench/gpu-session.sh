#!/bin/bash
# gpu-session.sh — everything one lent GPU machine session runs, in one command from the repo
# root: records the GPU, toolkit and libraries (reads them; changes no GPU setting), builds into
# BUILD_DIR, runs the CUDA and NCCL unit tests through prove, and PyTorch's ResNet-50 benchmark
# (contrib/bench/resnet50-torch.py) in bf16, tf32 and fp32. Each stage is time-boxed and its exit
# status goes into OUT/summary.md, rewritten after every stage; a failed stage does not stop the
# next. Writes only OUT, BUILD_DIR and a temporary directory it removes.
#
#   bash contrib/bench/gpu-session.sh            (on the GPU machine: OUT is set there)
#   OUT=/tmp/gpu-out-test JOBS=2 bash contrib/bench/gpu-session.sh     (no-GPU dry run)
#
# Environment: OUT (default ./gpu-out), BUILD_DIR (build-gpu), JOBS (16), BUDGET (seconds for
# everything, 470), NVCC_ARCH (-gencode arch=compute_90,code=sm_90), CUDA_HOME (found from nvcc),
# PYTHON (the first python3 that imports torch and torchvision), DEBS_DIR (.gpudeps): .deb
# files to unpack into a private prefix for libraries the machine lacks, e.g. made here with
#   mkdir -p .gpudeps && cp /var/cache/apt/archives/libjansson-dev_*.deb .gpudeps/ &&
#   (cd .gpudeps && apt-get download libjansson4)      and carried ('carry': [".gpudeps"]).
# At most 8 files come back from a device run, so OUT holds exactly these: summary.md, env.log,
# build.log, test-backend_cuda.log, test-comm_nccl.log, bench.log, bench.json.
set -u -o pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" || { echo "gpu-session: cannot create OUT=$OUT" >&2; exit 1; }
OUT=$(cd "$OUT" && pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-16}
BUDGET=${BUDGET:-470}
NVCC_ARCH=${NVCC_ARCH:--gencode arch=compute_90,code=sm_90}
DEBS_DIR=${DEBS_DIR:-.gpudeps}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deadline=$((SECONDS + BUDGET))
failed=0
rm -f "$OUT/summary.md" "$OUT/env.log" "$OUT/build.log" "$OUT/test-backend_cuda.log" \
	"$OUT/test-comm_nccl.log" "$OUT/bench.log" "$OUT/bench.json"
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
if [ -n "$debs" ]; then
	prefix=$top/$BUILD_DIR/debroot
	mkdir -p "$prefix"
	for d in $debs; do
		dpkg-deb -x "$d" "$prefix" >>"$OUT/env.log" 2>&1 || echo "unpacking $d failed" >>"$OUT/env.log"
	done
	libdir=$prefix/usr/lib/x86_64-linux-gnu
	export CPATH=$prefix/usr/include${CPATH:+:$CPATH}
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
	note "- build probes: $(grep -E '^ +(cuda|cudnn|nccl|onednn|openblas):' "$OUT/build.log" | tr -s ' ' | sed 's/^ //; s/|/\//g' | paste -sd';' - | sed 's/;/; /g')"
fi

# ---- 4. the CUDA unit tests through prove (verbose) -------------------------------------------
for t in backend_cuda comm_nccl; do
	bin=./$BUILD_DIR/t/$t.t log=$OUT/test-$t.log
	: >"$log"
	if [ ! -x "$bin" ]; then
		record "test $t" "failed: $bin was not built" - 0 "test-$t.log"
		echo "not run: $bin was not built" >"$log"
		continue
	fi
	# After a failed build, a binary from an earlier build here must not pass for this tree's.
	if [ $build_ok = no ] && ! make -q O="$BUILD_DIR" NVCC_ARCH="$NVCC_ARCH" CUDA_HOME="$CUDA_HOME" \
		"${make_cuda[@]}" "$bin" >/dev/null 2>&1; then
		record "test $t" "failed: $bin is stale (the build failed or did not run)" - 0 "test-$t.log"
		echo "not run: $bin is older than its sources and the build failed" >"$log"
		continue
	fi
	cap=150
	[ $t = comm_nccl ] && cap=90
	run_stage $cap "$log" prove -v --timer --exec '' "$bin"
	nskip=$(grep -c -i '# skip' "$log")
	why=$(grep -m1 -i '# skip' "$log" | sed 's/.*# [Ss][Kk][Ii][Pp] *//' | cut -c1-100 | sed 's/|/\//g')
	[ $rc -eq 0 ] && res="passed"
	[ "$nskip" -gt 0 ] && res="$res ($nskip skipped, first: $why)"
	# A test that skips everything passes prove (NOTESTS): on a GPU machine that is a failure.
	all=$(grep -m1 -o 'skipped: .*' "$log" | cut -c10-170 | sed 's/|/\//g')
	if [ -n "$all" ]; then
		res="skipped: $all"
		[ $have_gpu = yes ] && res="failed: skipped all on a GPU machine: $all"
	fi
	result=$(grep -m1 '^Result:' "$log")
	record "test $t" "$res${result:+; prove $result}" $rc $dt "test-$t.log"
done

# ---- 5. PyTorch's ResNet-50 (one process per mode: one mode's failure spares the others) -------
bench=contrib/bench/resnet50-torch.py
export PYTHONUNBUFFERED=1
jsons=()
if [ $have_gpu = yes ]; then
	plan="bf16:100 tf32:100 fp32:120"
	args=()
else
	plan="fp32:120"
	args=(--device cpu --batch 2 --steps 2 --warmup 1)
	note "- no GPU: the benchmark ran as a CPU smoke test (batch 2, 2 steps), not a measurement"
fi
for p in $plan; do
	mode=${p%%:*} cap=${p#*:}
	echo "==== $mode" >>"$OUT/bench.log"
	run_stage "$cap" "$OUT/bench.log" \
		bash -c 'py=$1 script=$2 mode=$3 out=$4; shift 4
			"$py" "$script" --modes "$mode" --json "$@" >"$out.tmp"; rc=$?
			[ -s "$out.tmp" ] && mv "$out.tmp" "$out"; exit $rc' \
		bash "$PYTHON" "$bench" "$mode" "$work/bench-$mode.json" "${args[@]}"
	[ $rc -eq 2 ] && res="failed: $(tail -n 1 "$OUT/bench.log" | cut -c1-160 | sed 's/|/\//g')"
	if [ -s "$work/bench-$mode.json" ]; then
		jsons+=("$work/bench-$mode.json")
		ips=$("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%s img/s at batch %s" % (r["img_per_s"], r["batch"]) if r["status"] == "ok" else r["error"][:160])' "$work/bench-$mode.json" 2>/dev/null | sed 's/|/\//g')
		res="$res: $ips"
	fi
	record "bench $mode" "$res" $rc $dt bench.log
done
if [ ${#jsons[@]} -gt 0 ]; then
	"$PYTHON" -c 'import json,sys; json.dump([json.load(open(f)) for f in sys.argv[1:]], sys.stdout, indent=1)' "${jsons[@]}" >"$OUT/bench.json" 2>>"$OUT/bench.log"
	{
		echo
		echo "## ResNet-50, PyTorch"
		echo
		"$PYTHON" "$bench" --table-from "${jsons[@]}" 2>&1
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
