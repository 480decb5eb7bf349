"""pil_interop.py HELPER -- Tower's image-folder pixels against PIL's.

Where it sits: the `interop` test test_pil_interop (tests/eco_tests.cmake,
run by run_pil_interop.sh).  Tower's image folders (`tower convert --from
imagefolder`, `tower train --data DIR`) promise PIL's picture: libpng and
libjpeg-turbo decode as PIL's `Image.open(...).convert("RGB")` does, and the
resize is PIL's BILINEAR filter (a triangle whose support grows with the
shrink factor, as `Image.resize` has done since Pillow 2.7), then for
`center_crop` torchvision's `Resize(S)` + `CenterCrop(S)` (`Resize(R)` for
`--central_fraction`, the helper's mode `center_crop/R`).  This script makes
images with PIL (smooth gradients plus noise, so that both a wrong filter
and a wrong phase show; RGB and grey PNGs, JPEGs at 4:2:0 and 4:4:4, CMYK
JPEGs (libjpeg gives no RGB for them: Tower converts as PIL does), sizes
that shrink by 1.1x to 7x and enlarge), has HELPER (`test_imagefolder load
PATH S MODE OUT`, imagefolder_load at full decode) produce Tower's S x S
RGB, computes PIL's, and compares.

What may differ, and why: PIL resamples in 22-bit fixed point, horizontal
pass first, rounding to bytes between the passes; Tower in float, vertical
pass first, rounding once (io/imagefolder.c says why).  Measured on
2026-11-26 (Pillow 13.0): every value within 1 grey level, 5.7-20.9% of the
values differing, mean absolute difference 0.06-0.21; the decoded pixels
themselves are equal (a fixed-point version of Tower's resize in PIL's
order matched PIL bit for bit on every case here, so the decoders agree).
The limits: every value within 1, at most 25% of them differing, mean
below 0.25.  A nearest-neighbour or plain 2-tap bilinear filter, a
half-pixel phase shift or a swapped channel moves values by tens of levels
(the script checks that its own comparison sees a 2-tap bilinear resize of
the same images as different: 45-72 levels).
Exits 0 when every image agrees, 1 otherwise.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

MAX_DIFF = 1
MAX_FRACTION = 0.25
MAX_MEAN = 0.25


def make_image(rng, h, w, grey):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([128 + 100 * np.sin(x / (7 + 5 * k) + y / (11 + 3 * k) + k) for k in range(3)], axis=-1)
    img = np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(img[..., 0] if grey else img, "L" if grey else "RGB")


def pil_reference(path, size, mode):
    im = Image.open(path).convert("RGB")
    if mode == "resize":
        return np.asarray(im.resize((size, size), Image.BILINEAR))
    w, h = im.size
    # torchvision Resize(r): the shorter side to r, the other int(r * long / short); r = size, or R of
    # "center_crop/R" (Resize(R) + CenterCrop(size): `--central_fraction`)
    r = int(mode.split("/")[1]) if "/" in mode else size
    if w <= h:
        tw, th = r, int(r * h / w)
    else:
        th, tw = r, int(r * w / h)
    scaled = np.asarray(im.resize((tw, th), Image.BILINEAR))
    top, left = int(round((th - size) / 2.0)), int(round((tw - size) / 2.0))
    return scaled[top:top + size, left:left + size]


def tower_pixels(helper, path, size, mode, work):
    out = os.path.join(work, "out.raw")
    subprocess.run([helper, "load", path, str(size), mode, out], check=True)
    return np.fromfile(out, dtype=np.uint8).reshape(size, size, 3)


def compare(a, b):
    d = np.abs(a.astype(np.int32) - b.astype(np.int32))
    return int(d.max()), float((d > 0).mean()), float(d.mean())


def main():
    helper = sys.argv[1]
    rng = np.random.default_rng(2026)
    cases = [  # (h, w, grey, format, subsampling, size, mode)
        (375, 500, False, "PNG", None, 224, "resize"),
        (375, 500, False, "PNG", None, 224, "center_crop"),
        (600, 450, False, "JPEG", 2, 224, "resize"),
        (333, 517, False, "JPEG", 0, 96, "center_crop"),
        (1000, 700, False, "PNG", None, 150, "resize"),
        (64, 48, False, "PNG", None, 224, "resize"),
        (257, 129, True, "PNG", None, 100, "center_crop"),
        (480, 640, True, "JPEG", None, 32, "resize"),
        (31, 700, False, "PNG", None, 28, "resize"),
        (375, 500, False, "CMYK", 2, 224, "resize"),
        (300, 200, False, "CMYK", 0, 64, "center_crop"),
        (375, 500, False, "PNG", None, 224, "center_crop/256"),
        (600, 450, False, "JPEG", 2, 224, "center_crop/256"),
        (257, 129, True, "PNG", None, 28, "center_crop/32"),
    ]
    failures = 0
    seen_bilinear = []
    with tempfile.TemporaryDirectory() as work:
        for i, (h, w, grey, fmt, sub, size, mode) in enumerate(cases):
            path = os.path.join(work, "img%d.%s" % (i, "png" if fmt == "PNG" else "jpg"))
            img = make_image(rng, h, w, grey)
            if fmt == "CMYK":  # a CMYK JPEG (PIL writes Adobe's inverted inks and marker, as Photoshop does)
                img.convert("CMYK").save(path, "JPEG", quality=90, subsampling=sub)
            elif fmt == "JPEG":
                kw = {"quality": 90}
                if sub is not None:
                    kw["subsampling"] = sub
                img.save(path, "JPEG", **kw)
            else:
                img.save(path, "PNG")
            ref = pil_reference(path, size, mode)
            got = tower_pixels(helper, path, size, mode, work)
            worst, frac, mean = compare(got, ref)
            ok = worst <= MAX_DIFF and frac <= MAX_FRACTION and mean <= MAX_MEAN
            failures += not ok
            print("%-4s %4dx%-4d %-4s %-5s -> %3d %-11s: largest |tower - PIL| %d, %5.2f%% of values differ, "
                  "mean %.4f: %s" % (fmt, w, h, "grey" if grey else "RGB", "" if sub is None else "4:%s" %
                                     {0: "4:4", 2: "2:0"}[sub], size, mode, worst, 100 * frac, mean,
                                     "ok" if ok else "FAIL"))
            if mode == "resize" and not grey:
                # The comparison must see a wrong filter: PIL's plain 2-tap bilinear (reducing_gap off, no
                # support scaling) through NumPy, against PIL's own filter.
                im = np.asarray(Image.open(path).convert("RGB")).astype(np.float64)
                ys = (np.arange(size) + 0.5) * im.shape[0] / size - 0.5
                xs = (np.arange(size) + 0.5) * im.shape[1] / size - 0.5
                y0 = np.clip(np.floor(ys).astype(int), 0, im.shape[0] - 1)
                x0 = np.clip(np.floor(xs).astype(int), 0, im.shape[1] - 1)
                y1, x1 = np.minimum(y0 + 1, im.shape[0] - 1), np.minimum(x0 + 1, im.shape[1] - 1)
                fy, fx = np.clip(ys - y0, 0, 1)[:, None, None], np.clip(xs - x0, 0, 1)[None, :, None]
                two_tap = ((im[y0][:, x0] * (1 - fx) + im[y0][:, x1] * fx) * (1 - fy) +
                           (im[y1][:, x0] * (1 - fx) + im[y1][:, x1] * fx) * fy)
                seen_bilinear.append(compare(np.clip(np.rint(two_tap), 0, 255).astype(np.uint8), ref))
    shrinking = [c for c, case in zip(seen_bilinear, [c for c in cases if c[6] == "resize" and not c[2]])
                 if case[0] > case[5] * 1.5]
    sees = all(worst > MAX_DIFF for worst, _, _ in shrinking) and len(shrinking) > 0
    print("a 2-tap bilinear resize of the shrunk images against PIL's: largest differences %s: %s" %
          ([w for w, _, _ in shrinking], "seen as different (ok)" if sees else "NOT seen as different: FAIL"))
    failures += not sees
    print("PIL interop: %s" % ("every image agrees" if failures == 0 else "%d check(s) failed" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
