#!/bin/sh
test_description='JPEG/PNG decode and augmentation against torchvision on the same files:
Resize + CenterCrop (eval) and RandomResizedCrop + flip (train, given our crop) bit for bit
after ToTensor + Normalize; the crop draws distributed as RandomResizedCrop.get_params
draws them; DCT-scaled decoding within its stated difference; bad images refused or warned
about with the reason'
. "$(dirname "$0")/sharness.sh"

PY=/usr/bin/python3
DATA="$DPTRAIN_BUILD_DIR/bin/dptrain-data"
$PY -c 'import torchvision, PIL, numpy' 2>/dev/null && test_set_prereq TV

MEAN=0.485,0.456,0.406
STD=0.229,0.224,0.225

# Images with structure and grain (they compress like photos, not like flat colour), every
# kind a user's folder holds: sizes below and above the crop, portrait and landscape, one
# large enough for DCT scaling, a 1x1, grey, CMYK (Photoshop's inverted kind), progressive,
# 4:4:4, and PNGs: RGB, palette, RGBA, grey.
test_expect_success TV 'setup: an image folder made with PIL' '
	cat >make.py <<-\EOF &&
	import os, numpy as np
	from PIL import Image
	rng = np.random.default_rng(5)
	def photo(w, h, k):
	    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
	    img = np.stack([128 + 100 * np.sin(x / (9 + k) + k) * np.cos(y / 23.0),
	                    128 + 90 * np.sin((x + y) / (31.0 + k)),
	                    128 + 80 * np.cos(x / 11.0 - y / (19.0 + k))], -1)
	    img += rng.normal(0, 10, img.shape)
	    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
	for c in ("a", "b"):
	    os.makedirs("root/" + c, exist_ok=True)
	sizes = [(500, 375), (333, 500), (640, 427), (257, 300), (100, 80), (1100, 820)]
	for i, (w, h) in enumerate(sizes):
	    photo(w, h, i).save("root/a/p%d.jpg" % i, quality=90)
	photo(1, 1, 0).save("root/a/one.jpg", quality=90)
	photo(420, 380, 7).convert("L").save("root/b/gray.jpg", quality=90)
	photo(420, 380, 8).convert("CMYK").save("root/b/cmyk.jpg", quality=92)
	photo(450, 350, 9).save("root/b/prog.jpg", quality=85, progressive=True)
	photo(450, 350, 10).save("root/b/s444.jpg", quality=85, subsampling=0)
	photo(300, 410, 11).save("root/b/rgb.png")
	photo(300, 410, 12).convert("P", palette=Image.Palette.ADAPTIVE).save("root/b/pal.png")
	im = photo(310, 260, 13).convert("RGBA"); im.putalpha(90); im.save("root/b/rgba.png")
	photo(260, 310, 14).convert("L").save("root/b/grey.png")
	EOF
	$PY make.py &&
	test $(find root -type f | wc -l) = 15
'

# compare.py MODE OUT LINES [dct]: our floats against torchvision's on the same files. The
# train comparison feeds our crop (LINES: index label top left h w flip W H) to
# F.resized_crop, so it checks the pixels; the draws are checked on their own below.
# ROOT: the folder (root); GRAY=1: one channel, torchvision's Grayscale() as the first
# transform (PIL's convert("L")); HIGHBYTE=1: 16-bit grey PNGs read as their high byte.
test_expect_success TV 'setup: the comparison' '
	cat >compare.py <<-\EOF
	import os, sys, numpy as np, torch
	from PIL import Image
	from torchvision import datasets, transforms as T
	import torchvision.transforms.functional as F
	mode, out, lines = sys.argv[1:4]
	dct = len(sys.argv) > 4
	C = 1 if os.environ.get("GRAY") else 3
	mean, std = [0.485, 0.456, 0.406][:C], [0.229, 0.224, 0.225][:C]
	norm = [T.ToTensor(), T.Normalize(mean, std)]
	ds = datasets.ImageFolder(os.environ.get("ROOT", "root"))
	ours = np.fromfile(out, np.float32).reshape(-1, C, 224, 224)
	rows = [l.split("\t") for l in open(lines).read().splitlines()]
	assert len(rows) == len(ds) == len(ours), (len(rows), len(ds), len(ours))
	worst = 0.0
	for k, (path, label) in enumerate(ds.samples):
	    idx, lab, top, left, h, w, flip, W, H = map(int, rows[k])
	    img = ds.loader(path)
	    if os.environ.get("HIGHBYTE"):
	        img = Image.fromarray((np.asarray(Image.open(path), np.int64) >> 8).astype(np.uint8)).convert("RGB")
	    if C == 1:
	        img = img.convert("L")
	    assert (idx, lab, W, H) == (k, label, img.width, img.height), (rows[k], path, label, img.size)
	    if mode == "eval":
	        ref = T.Compose([T.Resize(256), T.CenterCrop(224)] + norm)(img)
	    else:
	        r = F.resized_crop(img, top, left, h, w, [224, 224])
	        ref = T.Compose(norm)(F.hflip(r) if flip else r)
	    ref = ref.numpy()
	    if not dct:
	        if not np.array_equal(ref, ours[k]):
	            d = np.abs(ref - ours[k]).max()
	            print("%s: differs, max %g" % (path, d)); sys.exit(1)
	    else:
	        # in pixel levels: undo Normalize
	        d = (np.abs(ref - ours[k]) * np.array(std, np.float32)[:, None, None] * 255).mean()
	        print("%s: %dx%d crop %dx%d, mean |diff| %.3f levels" % (path, W, H, w, h, d))
	        worst = max(worst, d)
	if dct:
	    print("worst mean |diff| %.3f levels" % worst)
	    sys.exit(int(worst > float(sys.argv[4])))
	print("%d images identical" % len(ds))
	EOF
'

test_expect_success TV 'eval: Resize(256) + CenterCrop(224) + Normalize are torchvision bit for bit' '
	"$DATA" transform --eval --size 224 --resize 256 --mean $MEAN --std $STD \
		-o ev.bin root >ev.lines &&
	$PY compare.py eval ev.bin ev.lines >cmp.out &&
	cat cmp.out && grep "15 images identical" cmp.out
'

test_expect_success TV 'train: our RandomResizedCrop + flip, resampled as torchvision does, bit for bit' '
	for e in 0 1 2; do
		"$DATA" transform --train --size 224 --seed 11 --epoch $e --no-dct \
			--mean $MEAN --std $STD -o tr$e.bin root >tr$e.lines &&
		$PY compare.py train tr$e.bin tr$e.lines >cmp$e.out &&
		cat cmp$e.out && grep "15 images identical" cmp$e.out || return 1
	done &&
	cut -f7 tr0.lines tr1.lines tr2.lines | sort | uniq -c >flips &&
	test $(wc -l <flips) = 2
'

# PNGs as PIL reads them, where libpng's simplified API reads them otherwise: 16-bit samples
# (PIL keeps the high byte; the low byte here is noise, so rounding would differ), gAMA and
# cHRM chunks (PIL ignores them), Adam7 interlacing, grey of 1, 2 and 4 bits, a palette with
# transparency, grey with alpha. Written byte by byte: PIL writes none of these but the last.
test_expect_success TV 'setup: PNGs of every depth, kind and interlacing' '
	cat >mkpng.py <<-\EOF &&
	import os, struct, zlib, numpy as np
	rng = np.random.default_rng(9)
	def photo(w, h, k, c=3):
	    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
	    img = np.stack([128 + 100 * np.sin(x / (9 + k) + k) * np.cos(y / 23.0),
	                    128 + 90 * np.sin((x + y) / (31.0 + k)),
	                    128 + 80 * np.cos(x / 11.0 - y / (19.0 + k))], -1)[..., :c]
	    return np.clip(img + rng.normal(0, 10, img.shape), 0, 255).astype(np.int64)
	def chunk(t, d):
	    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
	def rows(a, depth):  # (h, w, c) samples to filter-0 rows
	    h = a.shape[0]
	    if depth == 16:
	        b = a.reshape(h, -1).astype(">u2").view(np.uint8)
	    elif depth == 8:
	        b = a.reshape(h, -1).astype(np.uint8)
	    else:  # one channel, packed most significant bits first
	        per = 8 // depth
	        v = a.reshape(h, -1)
	        v = np.pad(v, ((0, 0), (0, -v.shape[1] % per)))
	        v = v.reshape(h, -1, per)
	        b = sum(v[:, :, i] << (8 - depth * (i + 1)) for i in range(per)).astype(np.uint8)
	    return b"".join(b"\0" + r.tobytes() for r in b)
	ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
	def png(path, a, ctype, depth, extra=b"", interlace=False, plte=None):
	    h, w = a.shape[:2]
	    if interlace:
	        raw = b"".join(rows(a[y0::dy, x0::dx], depth) for x0, y0, dx, dy in ADAM7
	                       if a[y0::dy, x0::dx].size)
	    else:
	        raw = rows(a, depth)
	    pre = chunk(b"PLTE", plte) if plte is not None else b""
	    with open(path, "wb") as f:
	        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, int(interlace)))
	                + pre + extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
	def lo(a):  # a 16-bit sample: the 8-bit one high, noise low (rounding it would differ)
	    return a * 256 + rng.integers(0, 256, a.shape)
	for d in ("png/a", "png/b", "png16g/a"):
	    os.makedirs(d, exist_ok=True)
	png("png/a/rgb16.png", lo(photo(300, 260, 1)), 2, 16)
	alpha = rng.integers(0, 65536, (250, 230, 1))
	png("png/a/rgba16.png", np.concatenate([lo(photo(230, 250, 2)), alpha], -1), 6, 16)
	png("png/a/la16.png", np.concatenate([lo(photo(240, 240, 3, 1)), lo(photo(240, 240, 4, 1))], -1), 4, 16)
	png("png/a/gamma.png", photo(280, 250, 5), 2, 8, chunk(b"gAMA", struct.pack(">I", 100000)))
	png("png/a/chrm-gamma.png", photo(250, 280, 6), 2, 8, chunk(b"cHRM", struct.pack(">8I", 31270, 32900, 64000, 33000, 30000, 60000, 15000, 6000)) + chunk(b"gAMA", struct.pack(">I", 55000)))
	png("png/b/adam7.png", photo(301, 207, 7), 2, 8, interlace=True)
	png("png/b/adam7-16.png", lo(photo(229, 233, 8)), 2, 16, interlace=True)
	png("png/b/la.png", np.concatenate([photo(260, 230, 9, 1), photo(260, 230, 10, 1)], -1), 4, 8)
	png("png/b/grey1.png", photo(250, 240, 11, 1) >> 7, 0, 1)
	png("png/b/grey2-adam7.png", photo(243, 237, 12, 1) >> 6, 0, 2, interlace=True)
	png("png/b/grey4.png", photo(237, 243, 13, 1) >> 4, 0, 4)
	pal = rng.integers(0, 256, (16, 3)).astype(np.uint8).tobytes()
	png("png/b/pal4-trns.png", photo(231, 245, 14, 1) >> 4, 3, 4, chunk(b"tRNS", bytes(range(0, 256, 16))), plte=pal)
	png("png16g/a/grey16.png", lo(photo(260, 250, 15, 1)), 0, 16)
	EOF
	$PY mkpng.py &&
	test $(find png -type f | wc -l) = 12
'

test_expect_success TV 'PNGs of every kind: torchvision bit for bit, eval and train' '
	"$DATA" transform --eval --size 224 --resize 256 --mean $MEAN --std $STD \
		-o pe.bin png >pe.lines &&
	ROOT=png $PY compare.py eval pe.bin pe.lines >cmp-pe.out &&
	cat cmp-pe.out && grep "12 images identical" cmp-pe.out &&
	"$DATA" transform --train --size 224 --seed 4 --no-dct --mean $MEAN --std $STD \
		-o pt.bin png >pt.lines &&
	ROOT=png $PY compare.py train pt.bin pt.lines >cmp-pt.out &&
	cat cmp-pt.out && grep "12 images identical" cmp-pt.out
'

# PIL reads a 16-bit grey PNG as 32-bit integers, and torchvision's convert("RGB") saturates
# them: nearly white. dptrain takes the high byte, as PIL does for 16-bit colour.
test_expect_success TV '16-bit grey PNG: its high byte (where torchvision saturates it)' '
	"$DATA" transform --eval --size 224 --resize 256 --mean $MEAN --std $STD \
		-o g16.bin png16g >g16.lines &&
	HIGHBYTE=1 ROOT=png16g $PY compare.py eval g16.bin g16.lines >cmp-g16.out &&
	cat cmp-g16.out && grep "1 images identical" cmp-g16.out &&
	test_must_fail env ROOT=png16g $PY compare.py eval g16.bin g16.lines
'

# One channel (a model with 1 input channel): PIL's convert("L") of the RGB image, before the
# crop, as torchvision's Grayscale() first does (libjpeg's own grey, its Y, is a level off in
# places; libpng's simplified API makes grey in linear light: 8 levels off on average).
test_expect_success TV 'one channel: convert("L") first, then the same transforms, bit for bit' '
	for r in root png; do
		"$DATA" transform --eval --gray --size 224 --resize 256 --mean 0.485 --std 0.229 \
			-o g-$r.bin $r >g-$r.lines &&
		GRAY=1 ROOT=$r $PY compare.py eval g-$r.bin g-$r.lines >cmp-g-$r.out &&
		cat cmp-g-$r.out && grep "images identical" cmp-g-$r.out &&
		"$DATA" transform --train --gray --size 224 --seed 8 --no-dct --mean 0.485 \
			--std 0.229 -o gt-$r.bin $r >gt-$r.lines &&
		GRAY=1 ROOT=$r $PY compare.py train gt-$r.bin gt-$r.lines >cmp-gt-$r.out &&
		cat cmp-gt-$r.out && grep "images identical" cmp-gt-$r.out || return 1
	done
'

# DCT scaling decodes a crop at least twice the output's size at 1/2 (1/4, 1/8) of it, a
# different low-pass than PIL's full-size decode plus antialiased resize: the pixels differ
# by under 1 level of 255 on average (measured 0.46-0.62 on the 1100x820 image, whose grain is
# more than photos have; 0 where no scaling applies). The bound is 3 levels: a wrong scale
# or offset gives tens. Large crops (scale >= 0.6) so that the big image is scaled.
test_expect_success TV 'train with DCT scaling: the same crops within 3/255 on average' '
	for e in 0 1; do
		"$DATA" transform --train --size 224 --scale 0.6,1 --seed 11 --epoch $e \
			--mean $MEAN --std $STD -o dct.bin root >dct.lines &&
		$PY compare.py train dct.bin dct.lines 3 >dct$e.out &&
		cat dct$e.out || return 1
	done &&
	grep -h "p5.jpg: 1100x820" dct0.out dct1.out >big &&
	awk "{ if (\$(NF - 1) + 0 < 0.1) exit 1 }" big &&
	grep -h "p0.jpg: 500x375.*mean |diff| 0.000 levels" dct0.out dct1.out
'

# The crop draws: 20000 of ours against 20000 of torchvision's get_params (torch's generator
# seeded): the area fraction and log aspect ratio distributions (two-sample
# Kolmogorov-Smirnov distance; 0.02 is the 0.1% critical value for these sizes: a wrong
# range or a missing log gives 0.1 and more) and, on a 10:1 image, how often the fallback
# (the centred crop) is taken.
test_expect_success TV 'RandomResizedCrop draws are distributed as torchvision draws them' '
	"$DATA" crops --size 224 --seed 3 --image 500x375 --count 20000 >ours.crops &&
	"$DATA" crops --size 224 --seed 3 --image 1000x100 --count 20000 >ours-wide.crops &&
	cat >ks.py <<-\EOF &&
	import sys, numpy as np, torch
	from torchvision import transforms as T
	from PIL import Image
	torch.manual_seed(0)
	def stats(rows, W, H):
	    a = np.array(rows, np.float64)
	    return a[:, 2] * a[:, 3] / (W * H), np.log(a[:, 3] / a[:, 2]), a
	def ks(x, y):
	    x, y = np.sort(x), np.sort(y)
	    v = np.concatenate([x, y])
	    return np.abs(np.searchsorted(x, v, "right") / len(x) - np.searchsorted(y, v, "right") / len(y)).max()
	bad = 0
	for f, W, H in (("ours.crops", 500, 375), ("ours-wide.crops", 1000, 100)):
	    img = Image.new("RGB", (W, H))
	    ref = [T.RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(20000)]
	    ra, rr, ref = stats([(t, l, h, w) for t, l, h, w in ref], W, H)
	    oa, orr, ours = stats([list(map(int, l.split()[:4])) for l in open(f)], W, H)
	    fb_ref = np.mean((ref[:, 3] == min(W, round(H * 4 / 3))) & (ref[:, 2] == H))
	    fb_ours = np.mean((ours[:, 3] == min(W, round(H * 4 / 3))) & (ours[:, 2] == H))
	    d1, d2 = ks(oa, ra), ks(orr, rr)
	    print("%dx%d: KS area %.4f, KS log-ratio %.4f, fallback %.3f vs %.3f" % (W, H, d1, d2, fb_ours, fb_ref))
	    bad += d1 > 0.02 or d2 > 0.02 or abs(fb_ours - fb_ref) > 0.02
	sys.exit(int(bad))
	EOF
	$PY ks.py >ks.out; rc=$?; cat ks.out && test $rc = 0 &&
	test $(wc -l <ks.out) = 2
'

test_expect_success 'crops are a function of (seed, epoch, index): repeatable, and another epoch differs' '
	"$DATA" crops --size 224 --seed 3 --image 640x480 --count 50 >c1 &&
	"$DATA" crops --size 224 --seed 3 --image 640x480 --count 50 >c2 &&
	"$DATA" crops --size 224 --seed 3 --epoch 1 --image 640x480 --count 50 >c3 &&
	test_cmp c1 c2 && ! test_cmp c1 c3 >/dev/null && test $(wc -l <c1) = 50
'

# Bad files: a truncated JPEG decodes (libjpeg greys what is missing) with a warning; a file
# that is not an image, an empty one and a header-only JPEG are refused, naming the file.
test_expect_success TV 'bad images: warned about or refused with the file and the reason' '
	mkdir -p bad/x &&
	head -c 6000 root/a/p0.jpg >bad/x/cut.jpg &&
	printf "GIF89a nothing" >bad/x/gif.jpg &&
	: >bad/x/empty.jpg &&
	head -c 100 root/a/p0.jpg >bad/x/header.jpg &&
	cp root/b/rgb.png bad/x/ok.png &&
	test_might_fail "$DATA" verify --decode bad >verify.out 2>&1 &&
	cat verify.out &&
	grep "gif.jpg.*neither a JPEG nor a PNG" verify.out &&
	grep "empty.jpg.*empty" verify.out &&
	grep "header.jpg.*JPEG" verify.out &&
	! grep "ok.png" verify.out | grep -v "^ok" | grep -i "error\|bad" &&
	grep "cut.jpg: JPEG: Premature end of JPEG file" verify.out &&
	grep "5 samples checked.*4 bad" verify.out
'

test_done
