"""crop_interop.py HELPER -- Tower's random crop against TensorFlow's and PIL's.

Where it sits: the `interop` test test_crop_interop (tests/eco_tests.cmake,
run by run_crop_interop.sh).  `tower train --data DIR --resize_mode
random_crop` promises tf_cnn_benchmarks' training crop:
tf.image.sample_distorted_bounding_box(min_object_covered=0.1,
aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0), max_attempts=100,
use_image_if_no_bounding_boxes=True) on the whole image, the crop resized to
the input size, then tf.image.random_flip_left_right.  Tower draws from its
own counter-based stream, not TensorFlow's Philox, so the crops are compared
as distributions: for each image size, 3000 of TensorFlow's (the stateless
op, seeds (7, i)) against 3000 of Tower's (HELPER `boxes`), by the
two-sample Kolmogorov-Smirnov distance of the crops' area fraction, height,
aspect ratio (w / h) and left offset as a fraction of the room left, and by
the rate of whole-image fallbacks and of flips.  Limit: every distance below
0.06 (above 0.05 happens by chance about once in a thousand for one
statistic at 3000 a side); the script checks that the same comparison sees a
plausible other sampler -- the crop's AREA uniform in [0.1, 1] instead of its
height (torchvision's RandomResizedCrop samples that way, with other bounds)
-- as different (a distance over 0.06).
Pixels: for a few crops of PNG and JPEG images, HELPER `crop` (Tower's full
decode, crop, PIL-bilinear resize, flip) against PIL's
img.crop(box).resize((S, S), BILINEAR) (transposed where flipped): every
value within 1 grey level, at most 25% differing, mean below 0.25, as
pil_interop.py allows for the two resamplers' rounding.
Exits 0 when both agree, 1 otherwise.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

N = 3000
MAX_KS = 0.06
SIZES = [(375, 500), (500, 375), (224, 224), (60, 300)]  # (H, W)


def tf_boxes(tf, H, W):
    out = np.zeros((N, 5), dtype=np.int64)
    box = tf.constant([[[0.0, 0.0, 1.0, 1.0]]])
    size = tf.constant([H, W, 3])
    for i in range(N):
        begin, sz, _ = tf.image.stateless_sample_distorted_bounding_box(
            size, bounding_boxes=box, seed=[7, i], min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
            area_range=(0.05, 1.0), max_attempts=100, use_image_if_no_bounding_boxes=True)
        b, s = begin.numpy(), sz.numpy()
        out[i] = (b[1], b[0], s[1], s[0], 0)
    # random_flip_left_right: a uniform draw below 0.5 (its own stream)
    out[:, 4] = tf.random.stateless_uniform([N], seed=[8, 0]).numpy() < 0.5
    return out


def tower_boxes(helper, H, W):
    text = subprocess.run([helper, "boxes", str(H), str(W), "7", str(N)], check=True, capture_output=True,
                          text=True).stdout
    return np.array([[int(v) for v in line.split()] for line in text.splitlines()], dtype=np.int64)


def uniform_area_boxes(rng, H, W):
    """The other sampler the comparison must tell apart: area uniform in [0.1, 1], aspect as TensorFlow."""
    out = np.zeros((N, 5), dtype=np.int64)
    for i in range(N):
        while True:
            area = rng.uniform(0.1, 1.0) * H * W
            a = rng.uniform(0.75, 1.33)
            h = int(round(np.sqrt(area / a)))
            w = int(round(h * a))
            if 1 <= h <= H and 1 <= w <= W:
                break
        out[i] = (rng.integers(0, W - w + 1), rng.integers(0, H - h + 1), w, h, rng.random() < 0.5)
    return out


def ks(a, b):
    a, b = np.sort(a), np.sort(b)
    v = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, v, side="right") / len(a) -
                               np.searchsorted(b, v, side="right") / len(b))))


def stats(boxes, H, W):
    x, y, w, h = (boxes[:, k].astype(np.float64) for k in range(4))
    room = np.maximum(W - w, 1)
    return {"area": w * h / (H * W), "height": h, "aspect": w / h, "left": x / room}


def distance(p, q, H, W):
    sp, sq = stats(p, H, W), stats(q, H, W)
    return {k: ks(sp[k], sq[k]) for k in sp}


def whole(b, H, W):
    return float(np.mean((b[:, 2] == W) & (b[:, 3] == H)))


def compare_pixels(helper, work):
    rng = np.random.default_rng(2026)
    failures = 0
    cases = [(375, 500, "PNG", (17, 40, 300, 222), 0, 224), (375, 500, "PNG", (0, 0, 500, 375), 1, 96),
             (480, 640, "JPEG", (333, 101, 120, 150), 1, 64), (200, 300, "JPEG", (5, 7, 40, 31), 0, 100),
             (64, 48, "PNG", (3, 9, 40, 50), 1, 224)]
    for i, (h, w, fmt, (x, y, cw, ch), flip, S) in enumerate(cases):
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
        base = np.stack([128 + 100 * np.sin(xx / (7 + 5 * k) + yy / (11 + 3 * k) + k) for k in range(3)], axis=-1)
        img = Image.fromarray(np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8), "RGB")
        path = os.path.join(work, "c%d.%s" % (i, fmt.lower()))
        img.save(path, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        ref = Image.open(path).convert("RGB").crop((x, y, x + cw, y + ch)).resize((S, S), Image.BILINEAR)
        if flip:
            ref = ref.transpose(Image.FLIP_LEFT_RIGHT)
        ref = np.asarray(ref)
        out = os.path.join(work, "c%d.raw" % i)
        subprocess.run([helper, "crop", path, str(S), str(x), str(y), str(cw), str(ch), str(flip), out], check=True)
        got = np.fromfile(out, dtype=np.uint8).reshape(S, S, 3)
        d = np.abs(got.astype(np.int32) - ref.astype(np.int32))
        ok = d.max() <= 1 and (d > 0).mean() <= 0.25 and d.mean() <= 0.25
        failures += not ok
        print("pixels %-4s %4dx%-4d crop (%d, %d) %dx%d flip %d -> %3d: largest |tower - PIL| %d, %5.2f%% differ, "
              "mean %.4f: %s" % (fmt, w, h, x, y, cw, ch, flip, S, d.max(), 100 * (d > 0).mean(), d.mean(),
                                 "ok" if ok else "FAIL"))
        # a crop one pixel off must be seen
        if i == 0:
            off = np.asarray(Image.open(path).convert("RGB").crop((x + 1, y, x + 1 + cw, y + ch))
                             .resize((S, S), Image.BILINEAR))
            seen = np.abs(got.astype(np.int32) - off.astype(np.int32)).max() > 1
            print("pixels: a crop one pixel to the right %s" % ("seen as different (ok)" if seen else
                                                                "NOT seen as different: FAIL"))
            failures += not seen
    return failures


def main():
    helper = sys.argv[1]
    import tensorflow as tf
    failures = 0
    rng = np.random.default_rng(5)
    for H, W in SIZES:
        t, m, u = tf_boxes(tf, H, W), tower_boxes(helper, H, W), uniform_area_boxes(rng, H, W)
        d, du = distance(m, t, H, W), distance(u, t, H, W)
        ok = max(d.values()) < MAX_KS and abs(whole(m, H, W) - whole(t, H, W)) < 0.02 and \
            abs(m[:, 4].mean() - t[:, 4].mean()) < 0.05
        sees = max(du.values()) > MAX_KS
        failures += (not ok) + (not sees)
        print("%4d x %-4d mean area: TF %.3f tower %.3f; whole image: TF %.3f tower %.3f; flips: TF %.3f tower %.3f; "
              "KS distance %s: %s" % (W, H, stats(t, H, W)["area"].mean(), stats(m, H, W)["area"].mean(),
                                      whole(t, H, W), whole(m, H, W), t[:, 4].mean(), m[:, 4].mean(),
                                      " ".join("%s %.3f" % kv for kv in d.items()), "ok" if ok else "FAIL"))
        print("            area-uniform sampler against TF: largest KS distance %.3f: %s" %
              (max(du.values()), "seen as different (ok)" if sees else "NOT seen as different: FAIL"))
    with tempfile.TemporaryDirectory() as work:
        failures += compare_pixels(helper, work)
    print("crop interop: %s" % ("Tower's random crop agrees with TensorFlow's and PIL's" if failures == 0 else
                                "%d check(s) failed" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
