#!/bin/sh
test_description='the job config: dptrain --check on the examples, bad configs, overrides, the CLI'
. "$(dirname "$0")/sharness.sh"

data="$SHARNESS_TEST_SRCDIR/data/config"
examples="$DPTRAIN_SRC_DIR/contrib/examples"

for ex in resnet50 resnet50-synthetic resnet18 mlp-fmnist lenet-fmnist resnet18-fmnist; do
	test_expect_success "example $ex.json validates and prints JSON" '
		dptrain --check "$examples/$ex.json" >$ex.out 2>$ex.err &&
		test_must_be_empty $ex.err &&
		/usr/bin/python3 -c "import json,sys; json.load(open(sys.argv[1]))" $ex.out
	'
	test_expect_success "example $ex.json: the printed config reads back the same" '
		dptrain --check $ex.out >$ex.again &&
		test_cmp $ex.out $ex.again
	'
done

test_expect_success 'the printed config has the defaults filled in' '
	test "$(dp_json lenet-fmnist.out "d[\"timeouts\"][\"rendezvous_s\"]")" = 300 &&
	test "$(dp_json lenet-fmnist.out "d[\"timeouts\"][\"shutdown_s\"]")" = 30 &&
	test "$(dp_json lenet-fmnist.out "d[\"output\"][\"dir\"]")" = "dptrain.%j.%s" &&
	test "$(dp_json lenet-fmnist.out "d[\"output\"][\"console\"]")" = rank0 &&
	test "$(dp_json lenet-fmnist.out "d[\"checkpoint\"][\"keep\"]")" = 3 &&
	test "$(dp_json lenet-fmnist.out "d[\"checkpoint\"][\"resume\"]")" = auto &&
	test "$(dp_json lenet-fmnist.out "d[\"parallel\"][\"gradients_mean\"]")" = True &&
	test "$(dp_json lenet-fmnist.out "d[\"parallel\"][\"bucket_cap_mb\"]")" = 25 &&
	test "$(dp_json lenet-fmnist.out "d[\"data\"][\"eval_batch_size\"]")" = 32 &&
	test "$(dp_json lenet-fmnist.out "d[\"data\"][\"seed\"]")" = 1 &&
	test "$(dp_json lenet-fmnist.out "d[\"model\"][\"num_classes\"]")" = 10
'

test_expect_success 'the examples resolve as documented' '
	test "$(dp_json lenet-fmnist.out "d[\"data\"][\"train\"][\"images\"]")" = \
		/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz &&
	test "$(dp_json lenet-fmnist.out "d[\"data\"][\"eval\"][\"labels\"]")" = \
		/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz &&
	test "$(dp_json lenet-fmnist.out "d[\"optimizer\"][\"name\"]")" = sgd &&
	test "$(dp_json lenet-fmnist.out "d[\"optimizer\"][\"momentum\"]")" = 0.9 &&
	test "$(dp_json mlp-fmnist.out "d[\"model\"][\"hidden\"]")" = "[512, 512]" &&
	test "$(dp_json mlp-fmnist.out "d[\"train\"][\"epochs\"]")" = 2 &&
	test "$(dp_json resnet50.out "d[\"model\"][\"input_shape\"]")" = "[3, 224, 224]" &&
	test "$(dp_json resnet50.out "d[\"model\"][\"num_classes\"]")" = 1000 &&
	test "$(dp_json resnet50.out "d[\"model\"][\"stem\"]")" = imagenet &&
	test "$(dp_json resnet50.out "d[\"data\"][\"format\"]")" = imagefolder &&
	test "$(dp_json resnet50.out "d[\"data\"][\"train\"][\"root\"]")" = /data/imagenet/train &&
	test "$(dp_json resnet50.out "d[\"data\"][\"eval\"][\"root\"]")" = /data/imagenet/val &&
	test "$(dp_json resnet50.out "d[\"data\"][\"transforms\"][\"random_resized_crop\"][\"scale\"]")" = "[0.08, 1]" &&
	test "$(dp_json resnet50.out "d[\"data\"][\"transforms\"][\"eval_resize\"]")" = 256 &&
	test "$(dp_json resnet50.out "d[\"data\"][\"batch_size\"]")" = 32 &&
	dp_json resnet50.out "d[\"description\"]" | grep ImageNet &&
	test "$(dp_json resnet50-synthetic.out "d[\"data\"][\"format\"]")" = synthetic &&
	dp_json resnet50-synthetic.out "d[\"description\"]" | grep -i synthetic &&
	test "$(dp_json resnet18.out "d[\"model\"][\"name\"]")" = resnet18 &&
	test "$(dp_json resnet18-fmnist.out "d[\"model\"][\"stem\"]")" = small &&
	test "$(dp_json resnet18-fmnist.out "d[\"data\"][\"transforms\"][\"random_crop\"][\"padding\"]")" = 4 &&
	test "$(dp_json resnet18-fmnist.out "d[\"data\"][\"transforms\"][\"horizontal_flip\"]")" = True
'

# Every bad config: exactly the expected message on stderr, exit 1 (not a crash), nothing on
# stdout. NAME.args holds overrides, one per line.
test_expect_success 'there are at least 20 bad configs, each with its expected message' '
	n=0 &&
	for f in "$data"/bad/*.json; do
		test -f "${f%.json}.err" || { echo "no ${f%.json}.err"; return 1; }
		n=$((n + 1))
	done &&
	test $n -ge 20
'

for f in "$data"/bad/*.json; do
	name=$(basename "$f" .json)
	test_expect_success "bad config $name: exit 1 with the expected message" '
		cp "$data/bad/$name.json" . &&
		set -- &&
		if test -f "$data/bad/$name.args"; then
			while read -r arg; do set -- "$@" "$arg"; done <"$data/bad/$name.args"
		fi &&
		test_expect_code 1 dptrain --check $name.json "$@" >out 2>err &&
		test_must_be_empty out &&
		test_cmp "$data/bad/$name.err" err
	'
done

test_expect_success 'a missing file' '
	test_expect_code 1 dptrain --check nothere.json 2>err &&
	echo "dptrain: nothere.json: cannot open: No such file or directory" >expect &&
	test_cmp expect err
'

test_expect_success 'a directory given as the config' '
	mkdir -p adir &&
	test_expect_code 1 dptrain --check adir 2>err &&
	echo "dptrain: adir: cannot read: Is a directory" >expect &&
	test_cmp expect err
'

test_expect_success 'an unreadable file' '
	cp "$data/good/minimal.json" unreadable.json && chmod 000 unreadable.json &&
	if test "$(id -u)" = 0; then
		dptrain --check unreadable.json >/dev/null
	else
		test_expect_code 1 dptrain --check unreadable.json 2>err &&
		grep "unreadable.json: cannot open: Permission denied" err
	fi
'

test_expect_success 'overrides change keys (JSON values, bare strings, arrays)' '
	dptrain --check "$examples/lenet-fmnist.json" train.epochs=1 data.batch_size=128 \
		model.name=resnet18 optimizer.name=adamw "optimizer.betas=[0.9,0.99]" \
		description="two words" >ov.json &&
	test "$(dp_json ov.json "d[\"train\"][\"epochs\"]")" = 1 &&
	test "$(dp_json ov.json "d[\"data\"][\"batch_size\"]")" = 128 &&
	test "$(dp_json ov.json "d[\"data\"][\"eval_batch_size\"]")" = 128 &&
	test "$(dp_json ov.json "d[\"model\"][\"name\"]")" = resnet18 &&
	test "$(dp_json ov.json "d[\"optimizer\"][\"betas\"]")" = "[0.9, 0.99]" &&
	test "$(dp_json ov.json "d[\"description\"]")" = "two words"
'

test_expect_success 'an override that leaves a key unused is a warning, not an error' '
	dptrain --check "$examples/lenet-fmnist.json" optimizer.name=adamw >ov.json 2>err &&
	cat >expect <<-EOF &&
	dptrain: warning: $examples/lenet-fmnist.json: optimizer.momentum: ignored: only used by optimizer.name "sgd" and "momentum"
	EOF
	test_cmp expect err &&
	test "$(dp_json ov.json "\"momentum\" in d[\"optimizer\"]")" = False
'

test_expect_success 'key=null restores the default' '
	dptrain --check "$examples/lenet-fmnist.json" optimizer.momentum=null \
		optimizer.name=sgd >ov.json &&
	test "$(dp_json ov.json "d[\"optimizer\"][\"momentum\"]")" = 0
'

test_expect_success 'a config with ignored keys: warnings on stderr, exit 0' '
	dptrain --check "$data/good/ignored-keys.json" >out 2>err &&
	cat >expect <<-EOF &&
	dptrain: warning: $data/good/ignored-keys.json: optimizer.momentum: ignored: only used by optimizer.name "sgd" and "momentum"
	EOF
	test_cmp expect err &&
	/usr/bin/python3 -c "import json,sys; json.load(open(sys.argv[1]))" out
'

test_expect_success 'relative input paths resolve against the config file, wherever dptrain runs' '
	mkdir -p jobs/sub elsewhere &&
	cp "$data/good/relative.json" jobs/sub/ &&
	jobdir=$(cd jobs/sub && pwd) &&
	(cd elsewhere && dptrain --check ../jobs/sub/relative.json) >rel.json &&
	test "$(dp_json rel.json "d[\"model\"][\"init\"]")" = "$jobdir/weights/init.safetensors" &&
	test "$(dp_json rel.json "d[\"data\"][\"train\"][\"images\"]")" = \
		"$jobdir/data/train-images-idx3-ubyte" &&
	test "$(dp_json rel.json "d[\"data\"][\"train\"][\"labels\"]")" = \
		"$jobdir/data/train-labels-idx1-ubyte" &&
	test "$(dp_json rel.json "d[\"data\"][\"eval\"][\"images\"]")" = /abs/t10k-images-idx3-ubyte &&
	test "$(dp_json rel.json "d[\"checkpoint\"][\"resume\"]")" = "$jobdir/ck/step-100" &&
	test "$(dp_json rel.json "d[\"checkpoint\"][\"dir\"]")" = ck &&
	test "$(dp_json rel.json "d[\"output\"][\"dir\"]")" = "out.%j"
'

test_expect_success 'a relative path in an override resolves against the current directory' '
	here=$(pwd) &&
	dptrain --check jobs/sub/relative.json model.init=w.safetensors >rel.json &&
	test "$(dp_json rel.json "d[\"model\"][\"init\"]")" = "$here/w.safetensors"
'

test_expect_success 'DPTRAIN_CONFIG is the default config; an argument wins over it' '
	DPTRAIN_CONFIG="$examples/mlp-fmnist.json" dptrain --check >env.json &&
	test "$(dp_json env.json "d[\"model\"][\"name\"]")" = mlp &&
	DPTRAIN_CONFIG="$examples/mlp-fmnist.json" dptrain --check train.epochs=5 >env.json &&
	test "$(dp_json env.json "d[\"train\"][\"epochs\"]")" = 5 &&
	DPTRAIN_CONFIG="$examples/mlp-fmnist.json" dptrain --check \
		"$examples/lenet-fmnist.json" >env.json &&
	test "$(dp_json env.json "d[\"model\"][\"name\"]")" = lenet
'

test_expect_success 'options may follow the config' '
	dptrain "$examples/mlp-fmnist.json" --check >after.json &&
	test_cmp mlp-fmnist.out after.json
'

test_expect_success 'setup: a minimal valid config here' '
	cp "$data/good/minimal.json" . &&
	dptrain --check minimal.json >/dev/null
'

test_expect_success 'without --check an invalid config still exits 1' '
	cp "$data/bad/lr-zero.json" . &&
	test_expect_code 1 dptrain lr-zero.json 2>err &&
	test_cmp "$data/bad/lr-zero.err" err
'

test_expect_success 'usage: no config and no DPTRAIN_CONFIG exits 2' '
	(unset DPTRAIN_CONFIG; test_expect_code 2 dptrain --check 2>err) &&
	echo "dptrain: no config: give CONFIG or set DPTRAIN_CONFIG; see dptrain --help" >expect &&
	test_cmp expect err &&
	(DPTRAIN_CONFIG= test_expect_code 2 dptrain --check 2>err) &&
	test_cmp expect err
'

test_expect_success 'usage: an unknown option exits 2' '
	test_expect_code 2 dptrain --chek minimal.json 2>err &&
	echo "dptrain: unknown option '"'"'--chek'"'"'; see dptrain --help" >expect &&
	test_cmp expect err &&
	test_expect_code 2 dptrain -x minimal.json 2>err &&
	grep "unknown option" err
'

test_expect_success 'usage: two configs exit 2' '
	test_expect_code 2 dptrain --check minimal.json lr-zero.json 2>err &&
	grep "^dptrain: two configs given (.minimal.json. and .lr-zero.json.)" err
'

test_expect_success '--help and --version' '
	dptrain --help >out &&
	grep "^Usage: dptrain \[OPTIONS\] \[CONFIG\] \[path.to.key=VALUE ...\]" out &&
	grep -- "--check" out && grep DPTRAIN_CONFIG out &&
	dptrain -h >out2 && test_cmp out out2 &&
	dptrain --version >out &&
	grep "^dptrain [0-9][0-9.]*" out
'

test_expect_success 'a config whose name looks like an override is reached through ./' '
	cp "$data/good/minimal.json" "a=b.json" &&
	(unset DPTRAIN_CONFIG; test_expect_code 2 dptrain --check a=b.json 2>err) &&
	grep "no config" err &&
	dptrain --check ./a=b.json >out
'

test_expect_success 'a full stdout is an error, not silence' '
	if test -w /dev/full; then
		test_expect_code 1 dptrain --check minimal.json >/dev/full 2>err &&
		grep "^dptrain: cannot write the config to stdout" err
	fi
'

# The man pages render without warnings.
command -v man >/dev/null 2>&1 && test_set_prereq MAN
for page in dptrain.json.5 dptrain.1; do
	test_expect_success MAN "doc/$page renders cleanly" '
		MANWIDTH=80 man --warnings -E UTF-8 -l "$DPTRAIN_SRC_DIR/doc/'$page'" >page.txt 2>warn &&
		test_must_be_empty warn &&
		test $(wc -l <page.txt) -gt 20
	'
done

test_expect_success MAN 'dptrain.json(5) documents every key of the printed config' '
	dptrain --check minimal.json optimizer.name=adamw lr_schedule.name=multistep \
		"lr_schedule.milestones=[3]" precision.loss_scale=dynamic \
		parallel.enable_parallel_optimizer=true "model.init=w" >all1.json &&
	dptrain --check minimal.json "model.input_shape=[3,32,32]" data.format=cifar10 \
		"data.train={\"files\": [\"a\"]}" "data.eval={\"files\": [\"b\"]}" \
		"data.dir=d" lr_schedule.name=step lr_schedule.step_size=3 \
		"data.transforms={\"random_crop\": {\"size\": 32}}" model.name=mlp >all2.json &&
	dptrain --check minimal.json lr_schedule.name=cosine lr_schedule.warmup_epochs=1 \
		train.epochs=2 model.name=resnet18 >all3.json &&
	MANWIDTH=200 man -l "$DPTRAIN_SRC_DIR/doc/dptrain.json.5" >page.txt 2>/dev/null &&
	/usr/bin/python3 - resnet50.out resnet50-synthetic.out lenet-fmnist.out resnet18-fmnist.out \
		all1.json all2.json all3.json page.txt <<-\EOF
	import json, sys
	page = open(sys.argv[-1]).read()
	missing = set()
	def walk(d, prefix):
	    for k, v in d.items():
	        path = prefix + k
	        if path not in page:
	            missing.add(path)
	        if isinstance(v, dict):
	            walk(v, path + ".")
	for f in sys.argv[1:-1]:
	    walk(json.load(open(f)), "")
	if missing:
	    sys.exit("undocumented: " + ", ".join(sorted(missing)))
	EOF
'

test_done
