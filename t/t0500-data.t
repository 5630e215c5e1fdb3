#!/bin/sh
test_description='data pipeline against independent references: the sharded sampler against
PyTorch 1.13 (randperm, DistributedSampler), normalize against torch float32 ops, and the
idx reader against a Python gzip+struct reader on the real Fashion-MNIST'
. "$(dirname "$0")/sharness.sh"

# Debian's python3-torch, never a python found first on PATH.
PY=/usr/bin/python3
SAMPLER="$DPTRAIN_BUILD_DIR/t/sampler.t"
DATA="$DPTRAIN_BUILD_DIR/t/data.t"
TRANSFORM="$DPTRAIN_BUILD_DIR/t/transform.t"
FM=/usr/share/datasets/fashion-mnist

test_expect_success 'helpers are built' '
	test -x "$SAMPLER" && test -x "$DATA" && test -x "$TRANSFORM"
'

# SEED N: every dataset size the trainer meets, up to ImageNet's 1281167. One python for all
# (importing torch takes seconds).
test_expect_success TORCH 'randperm is bit-identical to torch.randperm (torch.Generator, manual_seed)' '
	cat >perm.py <<-\EOF &&
	import sys, torch
	for k, line in enumerate(sys.stdin):
	    seed, n = map(int, line.split())
	    g = torch.Generator()
	    g.manual_seed(seed)
	    with open("perm.%d" % k, "w") as f:
	        f.write("\n".join(map(str, torch.randperm(n, generator=g).tolist())) + "\n")
	EOF
	cat >perms <<-\EOF &&
	0 1
	0 2
	5 10
	0 10000
	1 60000
	42 50000
	4294967301 60000
	18446744073709551615 1000
	0 1281167
	89 1281167
	EOF
	$PY perm.py <perms &&
	k=0 &&
	while read seed n; do
		"$SAMPLER" --perm $seed $n >got &&
		test_cmp perm.$k got || return 1
		k=$((k + 1))
	done <perms &&
	test $k = 10
'

# N WORLD RANK SEED EPOCH DROP_LAST SHUFFLE
cat >combos <<\EOF
60000 8 3 0 0 0 1
60000 8 7 42 3 1 1
60000 3 1 0 1 0 1
10000 3 2 1 5 0 1
10000 3 0 1 5 1 1
10000 16 15 7 2 0 1
50000 7 6 2024 1 0 1
50000 7 6 2024 1 1 1
50000 7 0 2024 1 1 0
10 4 3 0 0 0 1
10 4 3 0 0 1 1
10 4 0 0 0 0 0
7 5 4 9 2 0 1
2 5 4 9 2 0 1
2 5 4 9 2 1 1
2 5 1 9 2 0 0
13 4 1 0 0 0 0
13 4 1 0 0 1 0
1 3 2 0 0 0 1
1281167 16 15 0 89 0 1
1281167 24 5 0 89 1 1
EOF

test_expect_success TORCH 'per-rank index lists equal DistributedSampler (padding, drop_last, shuffle, epochs)' '
	cat >shard.py <<-\EOF &&
	import sys
	from torch.utils.data.distributed import DistributedSampler
	for k, line in enumerate(open(sys.argv[1])):
	    n, world, rank, seed, epoch, drop, shuffle = map(int, line.split())
	    s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=bool(shuffle),
	                           seed=seed, drop_last=bool(drop))
	    s.set_epoch(epoch)
	    with open("want.%d" % k, "w") as f:
	        f.write("".join("%d\n" % i for i in s))
	EOF
	$PY shard.py combos &&
	k=0 &&
	while read n world rank seed epoch drop shuffle; do
		"$SAMPLER" --shard $n $world $rank $seed $epoch $drop $shuffle >got.$k &&
		test_cmp want.$k got.$k || return 1
		k=$((k + 1))
	done <combos &&
	test $k = 21
'

test_expect_success TORCH 'resume at offset k*W continues exactly where DistributedSampler would' '
	for k in 0 1 100 7499; do
		start=$((k * 8)) &&
		"$SAMPLER" --shard 60000 8 3 0 0 0 1 $start >got &&
		tail -n +$((k + 1)) want.0 >want &&
		test_cmp want got || return 1
	done &&
	"$SAMPLER" --shard 60000 8 3 0 0 0 1 60000 >got &&
	test_must_be_empty got
'

test_expect_success 'eval sharding: rank r of W gets r, r+W, ... < n (every sample once)' '
	for r in 0 1 2 3 4 5 6; do
		"$SAMPLER" --eval 10000 7 $r || return 1
	done | sort -n >all &&
	seq 0 9999 >want &&
	test_cmp want all &&
	"$SAMPLER" --eval 10000 7 6 >r6 &&
	test $(wc -l <r6) = 1428 &&
	test "$(sed -n 1p r6),$(sed -n 2p r6),$(tail -n 1 r6)" = "6,13,9995"
'

test_expect_success TORCH 'normalize equals torch: x.float().div(255).sub(mean).div(std) in float32' '
	cat >norm.py <<-\EOF &&
	import sys, torch
	mean, std = float(sys.argv[1]), float(sys.argv[2])
	x = torch.arange(256, dtype=torch.uint8).float().div(255)
	y = x.sub(torch.tensor([mean])).div(torch.tensor([std]))
	sys.stdout.write("".join("%08x\n" % (v & 0xffffffff) for v in y.view(torch.int32).tolist()))
	EOF
	for ms in "0.2860 0.3530" "0.1307 0.3081" "0.4914 0.2470" "0.5 0.5"; do
		set -- $ms &&
		$PY norm.py $1 $2 >want &&
		"$TRANSFORM" --normalize $1 $2 >got &&
		test_cmp want got || return 1
	done
'

test_expect_success FMNIST 'Fashion-MNIST images and labels equal an independent gzip+struct reader' '
	cat >fm.py <<-\EOF &&
	import gzip, struct, sys
	images, labels = sys.argv[1], sys.argv[2]
	with gzip.open(images) as f:
	    magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
	    assert magic == 0x803
	    pix = f.read()
	with gzip.open(labels) as f:
	    magic, m = struct.unpack(">II", f.read(8))
	    assert magic == 0x801 and m == n
	    lab = f.read()
	size = rows * cols
	assert len(pix) == n * size and len(lab) == n
	for a in sys.argv[3:]:
	    i = int(a)
	    img = pix[i * size:(i + 1) * size]
	    h = 0xcbf29ce484222325
	    for b in img:
	        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
	    print("%d %d %d %016x" % (i, lab[i], sum(img), h))
	EOF
	$PY fm.py $FM/train-images-idx3-ubyte.gz $FM/train-labels-idx1-ubyte.gz 0 1 2 12345 30000 59999 >want &&
	"$DATA" --dump $FM/train-images-idx3-ubyte.gz $FM/train-labels-idx1-ubyte.gz 0 1 2 12345 30000 59999 >got &&
	test_cmp want got &&
	$PY fm.py $FM/t10k-images-idx3-ubyte.gz $FM/t10k-labels-idx1-ubyte.gz 0 5000 9999 >want &&
	"$DATA" --dump $FM/t10k-images-idx3-ubyte.gz $FM/t10k-labels-idx1-ubyte.gz 0 5000 9999 >got &&
	test_cmp want got
'

test_expect_success 'a bad dataset path is an error naming the file, not a crash' '
	test_must_fail "$DATA" --dump /nonexistent/train-images.gz /nonexistent/labels.gz 0 2>err &&
	grep "^data.t: /nonexistent/train-images.gz: No such file or directory$" err
'

test_done
