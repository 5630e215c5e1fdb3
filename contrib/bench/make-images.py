#!/usr/bin/python3
"""make-images.py — a deterministic ImageNet-like JPEG set for the image pipeline benchmark
(contrib/bench/image-pipeline.sh): N files (default 2000) in torchvision's ImageFolder layout
(OUT/class_00 .. class_09/img_00000.jpg), the long side uniform in 400..500 px, the aspect
ratio like a camera's (3:4 .. 4:3, about a third portrait), quality 90, 4:2:0 chroma
subsampling (PIL's default), RGB.

Content: each output is a random crop (area 50-100% of the largest crop of that aspect),
Lanczos scale, mirror, sharpening (unsharp mask 1.5 px, 200%), colour shift (per-channel gain,
brightness) and sensor grain (sigma 4 luma, 2 per channel) of one of the 28
real photographs that Debian's opencv-doc package ships as OpenCV sample data
(/usr/share/doc/opencv-doc/examples; image-pipeline.sh extracts the package into its cache
with `apt-get download` + `dpkg-deb -x` when it is not installed). Pass --sources DIR for
another copy of that tree. Without any of those photos (--synthetic, or none found) the
content is synthesised instead: smooth gradients, blurred blobs and edges, textures and
noise, lightly low-pass filtered (about 0.2 bytes/pixel at q90: smoother than these photos'
0.46, a fallback only). The stats go to stdout and to OUT.json.

Uses Debian's python3-pil and python3-numpy (/usr/bin/python3). Prints the set's stats.

    /usr/bin/python3 contrib/bench/make-images.py OUT [-n 2000] [--classes 10] [--seed 1]
        [--sources DIR] [--synthetic]
"""
import argparse
import json
import math
import os
import random
import sys

import numpy as np
from PIL import Image, ImageFilter

# Colour photographs among OpenCV's sample data (paths relative to opencv-doc's examples/);
# drawings, renders, grey and synthetic images of that folder are left out.
PHOTOS = [
    "alphamat/input_images/plant.jpg", "data/aero1.jpg", "data/aero3.jpg", "data/aloeL.jpg",
    "data/apple.jpg", "data/baboon.jpg", "data/board.jpg", "data/building.jpg",
    "data/butterfly.jpg", "data/ela_original.jpg", "data/fruits.jpg", "data/home.jpg",
    "data/leuvenA.jpg", "data/licenseplate_motion.jpg", "data/messi5.jpg", "data/orange.jpg",
    "data/squirrel_cls.jpg", "data/left.jpg", "data/rubberwhale1.png", "data/graf1.png",
    "data/stuff.jpg", "hfs/data/000.jpg", "text/scenetext01.jpg", "text/scenetext02.jpg",
    "text/scenetext03.jpg", "text/scenetext04.jpg", "text/scenetext05.jpg",
    "text/scenetext06.jpg",
]
DEFAULT_SOURCES = ["/usr/share/doc/opencv-doc/examples"]


def find_photos(dirs):
    for d in dirs:
        found = [os.path.join(d, p) for p in PHOTOS if os.path.isfile(os.path.join(d, p))]
        if len(found) >= len(PHOTOS) // 2:
            return d, found
    return None, []


def out_size(rng):
    """Long side 400..500, aspect 3:4..4:3 (log-uniform), a third portrait."""
    long_side = rng.randint(400, 500)
    aspect = math.exp(rng.uniform(math.log(1.0), math.log(4 / 3)))
    short = int(round(long_side / aspect))
    if rng.random() < 1 / 3:
        return short, long_side  # portrait: w, h
    return long_side, short


def from_photo(rng, nrng, src, w, h):
    W, H = src.size
    a = w / h
    # the largest crop of aspect a inside the source, then 50-100% of its area
    cw, ch = (W, W / a) if W / a <= H else (H * a, H)
    f = math.sqrt(rng.uniform(0.5, 1.0))
    cw, ch = max(8, cw * f), max(8, ch * f)
    x0, y0 = rng.uniform(0, W - cw), rng.uniform(0, H - ch)
    im = src.resize((w, h), Image.LANCZOS, box=(x0, y0, x0 + cw, y0 + ch))
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    # a camera's sharpening: these sources are old, soft JPEGs (about 0.25 bytes/pixel at
    # q90 as they are, where ImageNet's files average about 0.6)
    im = im.filter(ImageFilter.UnsharpMask(radius=1.5, percent=200, threshold=0))
    x = np.asarray(im, dtype=np.float32)
    gain = np.array([rng.uniform(0.85, 1.15) for _ in range(3)], dtype=np.float32)
    x = x * gain * rng.uniform(0.85, 1.1) + rng.uniform(-12, 12)
    # sensor grain, mostly luminance
    x += nrng.normal(0.0, 4.0, (h, w, 1)).astype(np.float32)
    x += nrng.normal(0.0, 2.0, (h, w, 3)).astype(np.float32)
    return Image.fromarray(np.clip(x + 0.5, 0, 255).astype(np.uint8), "RGB")


def synthetic(rng, nrng, w, h):
    """Natural-looking content without photos: gradient sky/ground, soft blobs, hard edges,
    a texture band, noise, then a slight blur (JPEG bytes per pixel near a photo's)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c0 = np.array([rng.uniform(0, 255) for _ in range(3)], np.float32)
    c1 = np.array([rng.uniform(0, 255) for _ in range(3)], np.float32)
    t = (yy / h)[..., None]
    x = c0 * (1 - t) + c1 * t
    for _ in range(rng.randint(4, 10)):  # blobs and polygons
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.05, 0.35) * min(w, h)
        col = np.array([rng.uniform(0, 255) for _ in range(3)], np.float32)
        d = np.sqrt((xx - cx) ** 2 + ((yy - cy) * rng.uniform(0.5, 2)) ** 2)
        m = (d < r).astype(np.float32) if rng.random() < 0.5 else np.exp(-(d / r) ** 2)
        x = x * (1 - m[..., None]) + col * m[..., None]
    # texture: multi-octave value noise (grass, foliage, fabric)
    tex = np.zeros((h, w), np.float32)
    for octave in (4, 8, 16, 32, 64):
        g = nrng.normal(0, 1, (h // octave + 2, w // octave + 2)).astype(np.float32)
        g = np.asarray(Image.fromarray(g).resize((w, h), Image.BICUBIC))
        tex += g * (octave / 8.0)
    x += tex[..., None] * rng.uniform(3, 10)
    x += nrng.normal(0, 6, x.shape).astype(np.float32)
    im = Image.fromarray(np.clip(x, 0, 255).astype(np.uint8), "RGB")
    return im.filter(ImageFilter.GaussianBlur(0.6))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--sources", action="append", default=[])
    ap.add_argument("--synthetic", action="store_true")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    nrng = np.random.RandomState(a.seed)
    srcdir, paths = (None, []) if a.synthetic else find_photos(a.sources + DEFAULT_SOURCES)
    if not a.synthetic and not paths:
        print("make-images: no opencv-doc photos found (--sources DIR); synthesising content",
              file=sys.stderr)
    srcs = [Image.open(p).convert("RGB") for p in paths]
    for c in srcs:
        c.load()

    total_bytes = total_px = portrait = 0
    for i in range(a.n):
        cls = i % a.classes
        d = os.path.join(a.out, "class_%02d" % cls)
        os.makedirs(d, exist_ok=True)
        w, h = out_size(rng)
        portrait += h > w
        if srcs:
            im = from_photo(rng, nrng, srcs[rng.randrange(len(srcs))], w, h)
        else:
            im = synthetic(rng, nrng, w, h)
        path = os.path.join(d, "img_%05d.jpg" % i)
        im.save(path, "JPEG", quality=a.quality)  # PIL's default subsampling: 4:2:0
        total_bytes += os.path.getsize(path)
        total_px += w * h
    stats = {
        "count": a.n, "classes": a.classes, "seed": a.seed, "quality": a.quality,
        "content": ("photos from " + srcdir + " (%d)" % len(srcs)) if srcs else "synthetic",
        "mean_bytes": round(total_bytes / a.n), "mean_pixels": round(total_px / a.n),
        "bytes_per_pixel": round(total_bytes / total_px, 3),
        "portrait": portrait, "total_mb": round(total_bytes / 2**20, 1),
    }
    with open(a.out.rstrip("/") + ".json", "w") as f:  # beside it: ImageFolder sees folders only
        json.dump(stats, f)
    print("make-images: %(count)d JPEGs, %(classes)d classes, q%(quality)d 4:2:0, "
          "%(content)s; mean %(mean_bytes)d bytes, %(mean_pixels)d pixels, "
          "%(bytes_per_pixel).3f bytes/pixel, %(portrait)d portrait, %(total_mb).1f MB" % stats)


if __name__ == "__main__":
    main()
