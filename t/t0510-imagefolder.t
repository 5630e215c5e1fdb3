#!/bin/sh
test_description='image folders and shards (dptrain-data): the sample list against torchvision
ImageFolder (classes in byte order, nested folders, links, any-case extensions), the index
file, packing into tar shards that GNU tar reads back, resuming an interrupted pack to the
same bytes, and damaged shards and indexes named with their file, line and sample'
. "$(dirname "$0")/sharness.sh"

PY=/usr/bin/python3
DATA="$DPTRAIN_BUILD_DIR/bin/dptrain-data"
$PY -c 'import torchvision, PIL, numpy' 2>/dev/null && test_set_prereq TV
tar --version 2>/dev/null | grep -q "GNU tar" && test_set_prereq GNUTAR

test_expect_success 'dptrain-data is built' '
	test -x "$DATA"
'

test_expect_success 'usage: --help for each command, unknown options and commands are exit 2' '
	for c in index list pack verify transform crops; do
		"$DATA" $c --help >help.$c && grep "^usage: dptrain-data $c" help.$c || return 1
	done &&
	test_expect_code 2 "$DATA" list --bogus root 2>err &&
	grep "^dptrain-data list: unknown option .--bogus.; see dptrain-data list --help$" err &&
	test_expect_code 2 "$DATA" pack root 2>err &&
	grep "expected ROOT and OUT" err &&
	test_expect_code 2 "$DATA" pack root out --shard-size 1X 2>err &&
	grep "shard-size .1X.: a size such as 1G" err &&
	test_expect_code 2 "$DATA" index root 2>err &&
	grep "say where the index goes: -o FILE" err &&
	test_expect_code 2 "$DATA" transform -o x root 2>err &&
	grep "say --train or --eval" err &&
	test_expect_code 2 "$DATA" frobnicate 2>err &&
	grep "unknown command .frobnicate." err
'

# Classes whose byte order differs from a case-insensitive one (Zebra _under apple banana
# Épée), nested folders whose whole-path order differs from a depth-first walk (sub,
# sub-x, sub/deep), names that sort as bytes (10 before 9, B before b), a link to another
# class's folder (followed, as os.walk(followlinks=True) does), a hidden file, .JPG and
# .jpeg, PNGs, a grey JPEG, a text file, and paths longer than tar's 100-byte name field
# (one that needs the ustar prefix, one whose file name alone is longer: a pax header).
test_expect_success TV 'setup: an image folder made with PIL' '
	cat >make.py <<-\EOF &&
	import os, numpy as np
	from PIL import Image
	rng = np.random.default_rng(7)
	def save(path, w, h, grey=False):
	    os.makedirs(os.path.dirname(path), exist_ok=True)
	    a = rng.integers(0, 256, (h, w) if grey else (h, w, 3), dtype=np.uint8)
	    im = Image.fromarray(a, "L" if grey else "RGB")
	    im.save(path, "PNG" if path.lower().endswith(".png") else "JPEG", quality=85)
	long_dir = "apple/" + "d" * 70 + "/" + "e" * 40
	long_name = "apple/" + "f" * 120 + ".jpg"
	for i, p in enumerate(["Zebra/z1.jpg", "Zebra/z0.JPG", "apple/a.jpg", "apple/10.jpg",
	                       "apple/9.jpg", "apple/sub/b.png", "apple/sub-x/c.jpeg",
	                       "apple/sub/deep/d.jpg", "_under/u.png", "banana/b.jpg",
	                       "banana/B.jpg", "banana/.hidden.jpg", "\u00c9p\u00e9e/e.jpg",
	                       long_dir + "/g.jpg", long_name]):
	    save("root/" + p, 20 + 13 * i, 90 - 4 * i)
	save("root/apple/grey.jpg", 40, 30, grey=True)
	open("root/apple/notes.txt", "w").write("not an image\n")
	os.symlink("../_under", "root/banana/link")
	EOF
	$PY make.py &&
	test $(find root -type f | wc -l) = 17
'

cat >tv.py <<\EOF
import os, sys
from torchvision.datasets import ImageFolder
ds = ImageFolder(sys.argv[1])
assert ds.class_to_idx == {c: i for i, c in enumerate(ds.classes)}
with open("tv.classes", "w") as f:
    f.write("".join("class %s\n" % c for c in ds.classes))
for i, (p, y) in enumerate(ds.samples):
    print("%d\t%d\t%s\t%s" % (i, y, ds.classes[y], os.path.relpath(p, sys.argv[1])))
EOF

test_expect_success TV 'list: the samples, labels and classes of torchvision ImageFolder, in its order' '
	$PY tv.py root >want &&
	"$DATA" list root >got 2>err &&
	test_cmp want got &&
	test_must_be_empty err &&
	test $(wc -l <got) = 17 &&
	cut -f3 got | uniq | tr "\n" " " >classes &&
	test "$(cat classes)" = "Zebra _under apple banana Épée " &&
	grep "	apple/sub/b.png$" got && grep "	banana/link/u.png$" got
'

test_expect_success TV 'a .bmp (torchvision keeps it, dptrain does not decode it): skipped with one warning' '
	cp -r root bmp &&
	$PY -c "from PIL import Image; [Image.new(\"RGB\", (8, 8)).save(\"bmp/apple/x%d.bmp\" % i) for i in range(3)]" &&
	$PY tv.py bmp | grep -v "\.bmp$" | cut -f2- >want.bmp &&
	"$DATA" list bmp 2>err | cut -f2- >got.bmp &&
	test_cmp want.bmp got.bmp &&
	cat err &&
	test $(wc -l <err) = 1 &&
	grep "^dptrain-data: warning: .*/bmp: skipped 3 files in formats dptrain does not decode" err &&
	grep "e.g. .*/bmp/apple/x[0-9].bmp" err
'

test_expect_success TV 'a class folder without images is an error naming it, as torchvision refuses it' '
	cp -r root empty && mkdir empty/nothing && echo hi >empty/nothing/readme.txt &&
	test_must_fail $PY tv.py empty 2>tv.err && grep "Found no valid file for the classes nothing" tv.err &&
	test_expect_code 1 "$DATA" list empty 2>err &&
	grep "^dptrain-data: .*/empty/nothing: no .jpg, .jpeg or .png file in this class folder" err
'

test_expect_success 'a missing root, a file, a folder without class folders: clear errors' '
	test_expect_code 1 "$DATA" list nowhere 2>err &&
	test "$(cat err)" = "dptrain-data: nowhere: No such file or directory" &&
	mkdir flat && echo x >flat/a.jpg &&
	test_expect_code 1 "$DATA" index flat -o flat.index 2>err &&
	grep "flat: no class folders: an image folder holds one folder per class" err &&
	test_expect_code 1 "$DATA" index flat/a.jpg -o flat.index 2>err &&
	grep "flat/a.jpg: Not a directory" err &&
	! test -e flat.index
'

test_expect_success TV 'a symbolic link loop is skipped with a warning, not followed forever' '
	cp -r root loop && ln -s .. loop/apple/sub/deep/up &&
	"$DATA" list loop >got 2>err &&
	test $(wc -l <got) = 17 &&
	grep "skipped 1 symbolic link to a folder above it (a loop), e.g. .*/loop/apple/sub/deep/up" err
'

test_expect_success TV 'index: the documented text, and the same samples loaded through it' '
	"$DATA" index root -o root.index 2>err &&
	grep "root: 17 samples in 5 classes, indexed in root.index" err &&
	test "$(sed -n 1,3p root.index)" = "dptrain-index 1
kind imagefolder
root $(cd root && pwd -P)" &&
	sed -n "s/^class /class /p" root.index >classes &&
	test_cmp tv.classes classes &&
	grep "^samples 17$" root.index &&
	grep "^2	[0-9]*	apple/sub/b.png$" root.index &&
	test $(stat -c %s root/apple/sub/b.png) = $(grep "	apple/sub/b.png$" root.index | cut -f2) &&
	$PY -c "import sys, zlib; t = open(\"root.index\", \"rb\").read(); body, end = t[:t.rindex(b\"end \")], t[t.rindex(b\"end \"):]; sys.exit(end != b\"end %08x\\n\" % zlib.crc32(body))" &&
	"$DATA" list root.index >got &&
	test_cmp want got &&
	"$DATA" index root -o - >stdout.index &&
	test_cmp root.index stdout.index
'

test_expect_success TV 'list --cache-dir: the cache is imagefolder-<FNV-1a 64 of the real path>.index' '
	"$DATA" list --cache-dir cache root >got &&
	test_cmp want got &&
	name=$($PY -c "import os; h = 0xcbf29ce484222325
for b in os.path.realpath(\"root\").encode(): h = ((h ^ b) * 0x100000001b3) % 2**64
print(\"imagefolder-%016x.index\" % h)") &&
	test -f cache/$name &&
	sed "/^end /d" cache/$name >c && sed "/^end /d" root.index >r && test_cmp r c
'

test_expect_success TV,GNUTAR 'pack: several shards, members in sample order, read back by GNU tar' '
	"$DATA" pack root shards --shard-size 16K 2>pack.err &&
	cat pack.err &&
	grep "packed root into shards: 17 samples in [0-9]* shards" pack.err &&
	grep "each read back with every member.s CRC-32 checked" pack.err &&
	n=$(ls shards/shard-*.tar | wc -l) && test $n -ge 4 &&
	test "$(ls shards | grep -v "^shard-[0-9]*\.tar$" | tr "\n" " ")" = "index pack.state " &&
	for t in shards/shard-*.tar; do tar --quoting-style=literal -tf "$t" || return 1; done >members &&
	cut -f4 got >paths &&
	test_cmp paths members &&
	mkdir x && for t in shards/shard-*.tar; do tar xf "$t" -C x || return 1; done &&
	while IFS= read -r p; do cmp "root/$p" "x/$p" || return 1; done <paths &&
	grep "^shards $n$" shards/index && grep "^kind shards$" shards/index
'

test_expect_success TV 'shards: the same samples, labels and order as the folder; verify passes' '
	"$DATA" list shards >got.shards &&
	test_cmp got got.shards &&
	"$DATA" list shards/index >got.index &&
	test_cmp got got.index &&
	"$DATA" verify shards >verify.out &&
	cat verify.out &&
	grep "^shards: 17 samples in [0-9]* shards checked (sizes, tar headers, CRC-32, image headers): 0 bad$" verify.out &&
	"$DATA" verify --decode root >verify.out &&
	grep "root: 17 samples checked (image headers, decoding): 0 bad" verify.out
'

test_expect_success TV 'transform: the same bytes from the folder, its index and its shards' '
	"$DATA" transform --eval --size 32 -o f.bin root >f.lines &&
	"$DATA" transform --eval --size 32 -o i.bin root.index >i.lines &&
	"$DATA" transform --eval --size 32 -o s.bin shards >s.lines &&
	test $(stat -c %s f.bin) = $((17 * 3 * 32 * 32 * 4)) &&
	cmp f.bin i.bin && cmp f.bin s.bin && test_cmp f.lines s.lines &&
	test "$(cut -f2 f.lines | tr "\n" " ")" = "$(cut -f2 got | tr "\n" " ")" &&
	"$DATA" transform --train --u8 --size 16 --first 3 --count 2 -o u.bin shards >u.lines &&
	test $(stat -c %s u.bin) = $((2 * 16 * 16 * 3)) &&
	test "$(cut -f1 u.lines | tr "\n" " ")" = "3 4 "
'

same_dirs() {
	(cd "$1" && ls) >l1 && (cd "$2" && ls) >l2 && test_cmp l1 l2 &&
	for f in $(cat l1); do cmp "$1/$f" "$2/$f" || return 1; done
}

test_expect_success TV 'an interrupted pack resumes to the same bytes as one that was not' '
	test_expect_code 3 "$DATA" pack root part --shard-size 16K --stop-after-shards 1 2>err &&
	grep "stopped after 1 shard (--stop-after-shards); run the same command again" err &&
	test "$(ls part | tr "\n" " ")" = "pack.state shard-00000.tar " &&
	cmp shards/shard-00000.tar part/shard-00000.tar &&
	"$DATA" pack root part --shard-size 16K 2>err &&
	cat err &&
	grep "1 shard of an earlier run checked against root and kept" err &&
	grep "the earlier run.s shards (1) were checked against the source and kept" err &&
	same_dirs shards part
'

test_expect_success TV 'resuming: a leftover partial shard is discarded, a damaged kept shard written again' '
	test_expect_code 3 "$DATA" pack root part2 --shard-size 16K --stop-after-shards 3 2>err &&
	echo junk >part2/shard-00003.tar.partial &&
	off=$(awk -F"\t" "NF == 6 && \$2 == 1 { print \$3; exit }" shards/index) &&
	printf "\377" | dd of=part2/shard-00001.tar bs=1 seek=$((off + 10)) conv=notrunc 2>/dev/null &&
	! cmp -s shards/shard-00001.tar part2/shard-00001.tar &&
	"$DATA" pack root part2 --shard-size 16K 2>err &&
	cat err &&
	grep "part2/shard-00001.tar: .*: CRC-32 [0-9a-f]*, the source file.s is [0-9a-f]*; writing it again" err &&
	grep "1 shard of an earlier run checked" err &&
	same_dirs shards part2
'

test_expect_success TV 'pack refuses a directory holding something else, and one inside the folder' '
	mkdir other && echo mine >other/notes.txt &&
	test_expect_code 1 "$DATA" pack root other 2>err &&
	grep "^dptrain-data: other: holds notes.txt, which dptrain-data pack does not write" err &&
	test "$(ls other)" = notes.txt &&
	test_expect_code 1 "$DATA" pack root root/apple/out 2>err &&
	grep "root/apple/out: inside the image folder root" err &&
	cp -r shards moved &&
	test_expect_code 1 "$DATA" pack loop moved --shard-size 16K 2>err &&
	grep "moved: holds the shards of another folder" err
'

test_expect_success TV 'a byte flipped inside a member: verify names the sample, reading it fails' '
	cp -r shards bad &&
	line=$(grep "	apple/9.jpg$" bad/index) &&
	shard=$(echo "$line" | cut -f2) && off=$(echo "$line" | cut -f3) &&
	tarf=bad/shard-$(printf %05d $shard).tar &&
	printf "\001" | dd of=$tarf bs=1 seek=$((off + 300)) conv=notrunc 2>/dev/null &&
	test_expect_code 1 "$DATA" verify bad >verify.out &&
	cat verify.out &&
	test "$(head -n 1 verify.out)" = "$tarf: apple/9.jpg: CRC-32 mismatch (corrupt shard)" &&
	grep "^bad: 17 samples in [0-9]* shards checked .*: 1 bad$" verify.out &&
	test $(wc -l <verify.out) = 2 &&
	test_expect_code 1 "$DATA" transform --eval --size 32 -o b.bin bad >/dev/null 2>err &&
	test "$(cat err)" = "dptrain-data: $tarf: apple/9.jpg: CRC-32 mismatch (corrupt shard); dptrain-data verify bad lists every damaged sample"
'

test_expect_success TV 'a truncated shard: loading names it and the first sample it lacks; verify lists each' '
	cp -r shards cut &&
	last=$(ls cut/shard-*.tar | tail -n 1) && k=${last#cut/shard-} && k=$((1${k%.tar} - 100000)) &&
	first=$(awk -F"\t" -v k=$k "NF == 6 && \$2 == k { print \$6; exit }" cut/index) &&
	truncate -s 600 $last &&
	test_expect_code 1 "$DATA" list cut >/dev/null 2>err &&
	cat err &&
	grep "^dptrain-data: $last: truncated: 600 bytes, but sample [0-9]* ($first) ends at byte [0-9]*; re-run dptrain-data pack .*/root cut to repair$" err &&
	test_expect_code 1 "$DATA" verify cut >verify.out &&
	cat verify.out &&
	grep "^$last: 600 bytes, [0-9]* expected: truncated" verify.out &&
	grep "^$last: $first: beyond the end of the shard (600 bytes): the shard is truncated$" verify.out &&
	"$DATA" pack root cut --shard-size 16K 2>err &&
	grep "$last: .*writing it again" err &&
	same_dirs shards cut
'

test_expect_success TV 'a missing, truncated or corrupt index: errors naming the file and the line' '
	test_expect_code 1 "$DATA" list nothere.index 2>err &&
	test "$(cat err)" = "dptrain-data: nothere.index: No such file or directory" &&
	# cut where the content says, not at a byte count: the root line holds this checkout'"'"'s
	# path, so a fixed count fell on a line end in some checkouts and mid-line in others
	$PY -c "import sys; t = open(\"root.index\", \"rb\").read(); i = t.index(b\"samples \"); j = t.index(b\"\n\", t.index(b\"\n\", i) + 1); k = t.index(b\"\n\", j + 1); open(\"cut.index\", \"wb\").write(t[:(j + 1 + k) // 2]); open(\"cutend.index\", \"wb\").write(t[:k + 1]); print(t[:k + 1].count(b\"\n\"))" >cutend.lines &&
	test_expect_code 1 "$DATA" list cut.index 2>err &&
	grep "^dptrain-data: cut.index: truncated: line $(cat cutend.lines) is cut short and no .end. line follows" err &&
	test_expect_code 1 "$DATA" list cutend.index 2>err &&
	grep "^dptrain-data: cutend.index: truncated: it ends after line $(cat cutend.lines) without its .end. line" err &&
	sed "/^end /d" root.index >noend.index &&
	test_expect_code 1 "$DATA" list noend.index 2>err &&
	grep "^dptrain-data: noend.index: truncated: it ends after line $(wc -l <noend.index) without its .end. line" err &&
	sed "s/^2	\([0-9]*\)	apple\/sub\/b.png$/4	9\1	apple\/sub\/b.png/" root.index >crc.index &&
	! cmp -s root.index crc.index &&
	test_expect_code 1 "$DATA" list crc.index 2>err &&
	grep "^dptrain-data: crc.index:$(wc -l <crc.index): CRC-32 mismatch: the end line says [0-9a-f]*, the lines before it make [0-9a-f]*; the index is corrupt" err &&
	$PY -c "import zlib; t = open(\"root.index\", \"rb\").read(); b = t[:t.rindex(b\"end \")].replace(b\"\n4\t\", b\"\n99\t\", 1); open(\"label.index\", \"wb\").write(b + b\"end %08x\n\" % zlib.crc32(b))" &&
	n=$(grep -n "^99	" label.index | cut -d: -f1) &&
	test_expect_code 1 "$DATA" list label.index 2>err &&
	test "$(cat err)" = "dptrain-data: label.index:$n: label 99 out of range (the index has 5 classes)" &&
	cp -r shards noindex && rm noindex/index &&
	test_expect_code 1 "$DATA" list noindex 2>err &&
	grep "^dptrain-data: noindex/index: No such file or directory" err &&
	cp -r shards badindex && head -c -30 shards/index >badindex/index &&
	test_expect_code 1 "$DATA" list badindex 2>err &&
	grep "^dptrain-data: badindex/index: truncated: .*; re-run dptrain-data pack to repair it$" err
'

test_expect_success TV 'verify of a folder names a file that is not an image' '
	cp -r root notimg && echo "plain text" >notimg/apple/text.jpg &&
	test_expect_code 1 "$DATA" verify notimg >verify.out &&
	cat verify.out &&
	test $(grep -c "notimg/apple/text.jpg: " verify.out) = 1 &&
	grep "notimg: 18 samples checked (image headers): 1 bad" verify.out
'

test_done
