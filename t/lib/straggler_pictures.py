"""The pictures of the straggler tests (t0930, t0940): the same 32 random pictures, two
classes, as 32x32 JPEGs in small/ and as 2048x2048 ones in big/ (the picture at full
resolution, with its grain), in the current directory. A rank that reads big/ decodes about
10x the bytes: slowed by its data, for real."""
import os

import numpy as np
from PIL import Image

rng = np.random.default_rng(7)
for i in range(32):
    px = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    for name, size in (("small", 32), ("big", 2048)):
        d = "%s/c%d" % (name, i % 2)
        os.makedirs(d, exist_ok=True)
        im = Image.fromarray(px)
        if size != 32:
            a = np.asarray(im.resize((size, size), Image.Resampling.BILINEAR)).astype(int)
            a += rng.integers(-12, 13, a.shape)
            im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
        im.save("%s/%03d.jpg" % (d, i), quality=90)
