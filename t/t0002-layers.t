#!/bin/sh
# t0002-layers.t — the dependency rules of the tree (contrib/ci/check-layers): includes written
# from the repository's root, the allowed includes between components, no cycle between
# components, private headers, where Slurm/PMIx/CUDA/oneDNN headers may be used, and no cycle
# between files or between the objects of this build. Then a small tree that breaks each rule
# once, to see every check fail and name the file.
test_description='the dependency rules: this tree follows them, a tree that breaks them fails'
. "$(dirname "$0")/sharness.sh"

py=/usr/bin/python3
test -x "$py" || py=python3
check="$DPTRAIN_SRC_DIR/contrib/ci/check-layers"

test_expect_success 'this tree and its build follow every rule' '
	"$py" "$check" "$DPTRAIN_BUILD_DIR" >out 2>&1 || { cat out; return 1; }
	cat out &&
	test $(grep -c "^ok" out) -ge 7 && ! grep "^not ok" out
'

# One break of each rule, each in a file of its own so each message can be looked for.
put() { mkdir -p "$(dirname "bad/$1")" && printf '%s\n' "$2" >"bad/$1"; }
test_expect_success 'a tree that breaks each rule once: every check fails, naming the file' '
	put common/ok.h "" &&
	put launcher/launcher.h "" &&
	put trainer/backend/backend_cuda.h "" &&
	put trainer/data/data.h "" &&
	put trainer/nn/nn.c "#include \"trainer/nn/nn.h\"
#include \"launcher/launcher.h\"" &&
	put trainer/nn/nn.h "#include \"trainer/dist/ddp.h\"" &&
	put trainer/dist/ddp.h "#include \"trainer/nn/nn.h\"" &&
	put trainer/data/loader.c "#include \"data.h\"" &&
	put trainer/data/sampler.c "#include \"trainer/backend/backend_cuda.h\"" &&
	put trainer/data/data.c "#include <slurm/spank.h>" &&
	test_expect_code 1 "$py" "$check" --root "$PWD/bad" "$PWD/no-build" >out 2>&1 &&
	cat out &&
	grep "^not ok 1 - every project include is written from the repository.s root" out &&
	grep "trainer/data/loader.c includes \"data.h\": not a path from the repository" out &&
	grep "^not ok 2 - every include follows the allowed-dependency table" out &&
	grep "trainer/nn/nn.c (nn) includes launcher/launcher.h (launcher)" out &&
	grep "trainer/nn/nn.h (nn) includes trainer/dist/ddp.h (dist)" out &&
	grep "^not ok 3 - private headers" out &&
	grep "trainer/data/sampler.c includes trainer/backend/backend_cuda.h, which is private" out &&
	grep "^not ok 4 - Slurm, PMIx, CUDA and oneDNN headers" out &&
	grep "trainer/data/data.c includes <slurm/spank.h>" out &&
	grep "^not ok 5 - no cycle between components" out &&
	grep "^#   dist -> nn -> dist" out &&
	grep "^not ok 6 - no include cycle" out &&
	grep "^#   trainer/dist/ddp.h -> trainer/nn/nn.h -> trainer/dist/ddp.h" out &&
	grep "^ok 7 - no cycle between objects # SKIP" out
'

test_done
