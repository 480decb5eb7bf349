"""make_jpeg_folder.py DIR N [MIN MAX] — N JPEGs (quality 90) of MIN-MAX px a side (default 300-600, about
ImageNet's; 2000 4000 for camera photographs) in DIR/class_0..9/, seeded, written by PIL: smooth colour fields
with noise, so that they compress like photographs.  bench/ only."""
import os
import sys

import numpy as np
from PIL import Image

out, n = sys.argv[1], int(sys.argv[2])
lo, hi = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (300, 600)
rng = np.random.default_rng(1)
for i in range(n):
    h, w = (int(v) for v in rng.integers(lo, hi + 1, size=2))
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    f = rng.uniform(0.005, 0.05, size=(3, 2))
    img = np.stack([127 + 100 * np.sin(f[c, 0] * x + f[c, 1] * y + c) for c in range(3)], axis=-1)
    img += rng.normal(0, 12, size=img.shape)
    d = os.path.join(out, "class_%d" % (i % 10))
    os.makedirs(d, exist_ok=True)
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(os.path.join(d, "%04d.jpg" % i), quality=90)
