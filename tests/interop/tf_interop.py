"""tf_interop.py — Tower's io/ against TensorFlow itself, both directions.

Run by run_tf_interop.sh (ctest label `interop`); arguments: HELPER [TOWER] TMPDIR.
HELPER is tests/test_io_interop_helper (the io API from the command line),
TOWER the `tower` binary when it is built (its `convert` is tested too).

  1. TensorFlow writes TFRecord files of Examples (plain, GZIP, ZLIB; bytes,
     int64 and float features, edge values, empty lists) -> Tower reads the
     same values, with compression given and auto-detected; the pipeline
     reads TF-written image records.
  2. Tower writes (the writer API, and `tower convert` from IDX and CIFAR-10
     files made here) -> tf.data.TFRecordDataset + tf.io.parse_single_example
     and tf.train.Example read the same values; uncompressed bytes equal
     TF's own writer's.
  3. Tower's augmentation with given crop/flip/brightness/contrast equals
     TF's tf.image ops (crop_to_bounding_box, flip_left_right,
     adjust_brightness, adjust_contrast, per_image_standardization), and the
     eval path equals resize_with_crop_or_pad + standardization.
  4. Encoded images (with TOWER): TensorFlow's tf_cnn_benchmarks-style records
     (image/encoded JPEG and PNG, image/class/label; plain and GZIP) are
     inspected and trained on by `tower`; `tower convert --encoded` writes a
     folder's files byte for byte with their labels, and TensorFlow decodes
     them.
Prints one line per check; exits 1 on the first mismatch.
"""
import gzip
import json
import os
import struct
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HELPER = sys.argv[1]
TOWER = sys.argv[2] if len(sys.argv) > 3 else ""
TMP = sys.argv[-1]
COMPRESSIONS = [("", "none"), ("GZIP", "gzip"), ("ZLIB", "zlib")]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def ok(msg):
    print("ok:", msg)


def helper(*args):
    r = subprocess.run([HELPER] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        fail("helper %s: %s" % (" ".join(map(str, args)), r.stderr.strip()))
    return r.stdout


def f32_hex(v):
    return "%08x" % struct.unpack("<I", struct.pack("<f", np.float32(v)))[0]


def example_to_json(ex):
    """tf.train.Example -> the helper's JSON form."""
    out = {}
    for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        if kind == "bytes_list":
            out[key] = {"kind": kind, "values": [v.hex() for v in feat.bytes_list.value]}
        elif kind == "float_list":
            out[key] = {"kind": kind, "values": [f32_hex(v) for v in feat.float_list.value]}
        elif kind == "int64_list":
            out[key] = {"kind": kind, "values": list(feat.int64_list.value)}
        else:
            out[key] = {"kind": "none", "values": []}
    return {"features": out}


def tf_examples(n):
    rng = np.random.default_rng(5)
    exs = []
    for i in range(n):
        f = {
            "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[rng.integers(0, 256, size=int(rng.integers(0, 4000)), dtype=np.uint8).tobytes()])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
            "big": tf.train.Feature(int64_list=tf.train.Int64List(value=[-(2**63), 2**63 - 1, -1, 0, 300, -i])),
            "floats": tf.train.Feature(float_list=tf.train.FloatList(value=[0.1 * i, -0.0, float("inf"), 1e-42, -3.5e38] + list(rng.standard_normal(i)))),
            "strings": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"", b"\x00\xff", ("s%d" % i).encode()])),
            "empty_f": tf.train.Feature(float_list=tf.train.FloatList(value=[])),
            "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[2])),
        }
        exs.append(tf.train.Example(features=tf.train.Features(feature=f)))
    exs.append(tf.train.Example())  # no features at all
    return exs


def same_examples(got_lines, want, what):
    got = [json.loads(line) for line in got_lines.splitlines() if line.strip()]
    if len(got) != len(want):
        fail("%s: %d records read, %d written" % (what, len(got), len(want)))
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            keys = sorted(set(g["features"]) | set(w["features"]))
            diff = [k for k in keys if g["features"].get(k) != w["features"].get(k)]
            fail("%s: record %d differs in %s" % (what, i, diff))


# ---- 1. TensorFlow writes, Tower reads --------------------------------------------------------
exs = tf_examples(24)
want = [example_to_json(e) for e in exs]
for tf_comp, name in COMPRESSIONS:
    path = os.path.join(TMP, "tf_written_%s.tfrecord" % name)
    with tf.io.TFRecordWriter(path, options=tf_comp) as w:
        for e in exs:
            w.write(e.SerializeToString())
    same_examples(helper("dump", path, name), want, "TF %s -> Tower (compression given)" % (tf_comp or "plain"))
    same_examples(helper("dump", path, "auto"), want, "TF %s -> Tower (auto-detected)" % (tf_comp or "plain"))
    ok("TensorFlow-written %s file: %d Examples read back identical (given and detected)" % (tf_comp or "plain", len(exs)))

# TF-written image records through Tower's pipeline (one epoch, file order, no augmentation).
imgs = np.random.default_rng(9).integers(0, 256, size=(30, 3, 4, 2), dtype=np.uint8)
paths = []
for s, (tf_comp, name) in enumerate(COMPRESSIONS):
    path = os.path.join(TMP, "tf_images-%05d-of-00003.tfrecord" % s)
    paths.append(path)
    with tf.io.TFRecordWriter(path, options=tf_comp) as w:
        for i in range(s * 10, s * 10 + 10):
            f = {"image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[imgs[i].tobytes()])),
                 "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i * 3])),
                 "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
                 "width": tf.train.Feature(int64_list=tf.train.Int64List(value=[4])),
                 "depth": tf.train.Feature(int64_list=tf.train.Int64List(value=[2]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
lines = helper("pipeline-none", os.path.join(TMP, "tf_images-*.tfrecord"), 3, 4, 2).split("\n")
lines = [l for l in lines if l]
if len(lines) != 30:
    fail("pipeline read %d of 30 TF-written examples" % len(lines))
for i, line in enumerate(lines):
    label, hexbytes = line.split()
    if int(label) != i * 3 or bytes.fromhex(hexbytes) != imgs[i].tobytes():
        fail("pipeline example %d differs from what TensorFlow wrote" % i)
ok("TensorFlow-written image records (plain + GZIP + ZLIB shards): the pipeline delivers all 30 identical")

# ---- 2. Tower writes, TensorFlow reads --------------------------------------------------------
for tf_comp, name in COMPRESSIONS:
    path = os.path.join(TMP, "tower_written_%s.tfrecord" % name)
    expected = [json.loads(l) for l in helper("write", path, name, 25).splitlines() if l.strip()]
    got = [example_to_json(tf.train.Example.FromString(r.numpy()))
           for r in tf.data.TFRecordDataset(path, compression_type=tf_comp)]
    if got != expected:
        fail("Tower %s -> TF: tf.train.Example differs" % name)
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64),
            "ints": tf.io.FixedLenFeature([4], tf.int64), "floats": tf.io.VarLenFeature(tf.float32),
            "multi": tf.io.VarLenFeature(tf.string)}
    for i, r in enumerate(tf.data.TFRecordDataset(path, compression_type=tf_comp)):
        p = tf.io.parse_single_example(r, spec)
        e = expected[i]["features"]
        if p["image_raw"].numpy().hex() != e["image_raw"]["values"][0] or int(p["label"]) != e["label"]["values"][0]:
            fail("Tower %s -> parse_single_example: record %d image/label" % (name, i))
        if [int(v) for v in p["ints"].numpy()] != e["ints"]["values"]:
            fail("Tower %s -> parse_single_example: record %d ints" % (name, i))
        if [f32_hex(v) for v in p["floats"].values.numpy()] != e["floats"]["values"]:
            fail("Tower %s -> parse_single_example: record %d floats" % (name, i))
        if [v.hex() for v in p["multi"].values.numpy()] != e["multi"]["values"]:
            fail("Tower %s -> parse_single_example: record %d multi" % (name, i))
    ok("Tower-written %s file (writer API): TFRecordDataset + Example/parse_single_example read 25 identical" % name)

raw_tower = os.path.join(TMP, "raw_tower.tfrecord")
raw_tf = os.path.join(TMP, "raw_tf.tfrecord")
helper("write-raw", raw_tower)
with tf.io.TFRecordWriter(raw_tf) as w:
    w.write(b"abc")
    w.write(b"")
if open(raw_tower, "rb").read() != open(raw_tf, "rb").read():
    fail("uncompressed framing differs from TensorFlow's writer")
ok("uncompressed file bytes identical to tf.io.TFRecordWriter's")

# Converters: IDX (gzip, like Debian's Fashion-MNIST) and CIFAR-10 binary.
rng = np.random.default_rng(3)
idx_imgs = rng.integers(0, 256, size=(23, 28, 28), dtype=np.uint8)
idx_labels = rng.integers(0, 10, size=23, dtype=np.uint8)
img_path, lab_path = os.path.join(TMP, "t-images-idx3-ubyte.gz"), os.path.join(TMP, "t-labels-idx1-ubyte.gz")
with gzip.open(img_path, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 23, 28, 28) + idx_imgs.tobytes())
with gzip.open(lab_path, "wb") as f:
    f.write(struct.pack(">II", 0x801, 23) + idx_labels.tobytes())
cifar = [rng.integers(0, 256, size=(n, 3073), dtype=np.uint8) for n in (7, 5)]
cifar_paths = []
for k, c in enumerate(cifar):
    c[:, 0] = rng.integers(0, 10, size=len(c))
    p = os.path.join(TMP, "data_batch_%d.bin" % (k + 1))
    c.tofile(p)
    cifar_paths.append(p)
cifar_all = np.concatenate(cifar)
cifar_imgs = cifar_all[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # CHW -> HWC
cifar_labels = cifar_all[:, 0]

runners = [("io API", lambda *a: None)]
if TOWER:
    runners.append(("tower convert", None))
for how, _ in runners:
    for tf_comp, name in COMPRESSIONS:
        prefix_idx = os.path.join(TMP, "conv_%s_%s" % (how.replace(" ", "_"), name), "fmnist")
        prefix_cifar = os.path.join(TMP, "conv_%s_%s" % (how.replace(" ", "_"), name), "cifar")
        if how == "io API":
            helper("convert-idx", img_path, lab_path, prefix_idx, 3, name)
            helper("convert-cifar", prefix_cifar, 2, name, *cifar_paths)
        else:
            for cmd in ([TOWER, "convert", "--from", "idx", "--images", img_path, "--labels", lab_path, "--out", prefix_idx,
                         "--num_shards", "3", "--compression", name],
                        [TOWER, "convert", "--from", "cifar10", "--out", prefix_cifar, "--num_shards", "2",
                         "--compression", name] + cifar_paths):
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    fail("%s: %s" % (" ".join(cmd), r.stderr.strip()))
        spec = {"image_raw": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64),
                "height": tf.io.FixedLenFeature([], tf.int64), "width": tf.io.FixedLenFeature([], tf.int64),
                "depth": tf.io.FixedLenFeature([], tf.int64)}
        for prefix, shards, imgs_want, labels_want in ((prefix_idx, 3, idx_imgs[..., None], idx_labels),
                                                       (prefix_cifar, 2, cifar_imgs, cifar_labels)):
            n_read = 0
            for s in range(shards):
                path = "%s-%05d-of-%05d.tfrecord" % (prefix, s, shards)
                for j, r in enumerate(tf.data.TFRecordDataset(path, compression_type=tf_comp)):
                    p = tf.io.parse_single_example(r, spec)
                    i = s + j * shards  # round-robin sharding
                    h, w, d = int(p["height"]), int(p["width"]), int(p["depth"])
                    img = tf.reshape(tf.io.decode_raw(p["image_raw"], tf.uint8), [h, w, d]).numpy()
                    if img.shape != imgs_want[i].shape or not np.array_equal(img, imgs_want[i]) or int(p["label"]) != labels_want[i]:
                        fail("%s %s: %s example %d differs" % (how, name, os.path.basename(prefix), i))
                    n_read += 1
            if n_read != len(labels_want):
                fail("%s %s: %d of %d examples" % (how, name, n_read, len(labels_want)))
        ok("%s output (%s; IDX 23 examples in 3 shards, CIFAR-10 12 in 2): TensorFlow reads every pixel and label" % (how, name))
if not TOWER:
    print("note: the tower binary is not built; `tower convert` was tested through the io API only")

# ---- 3. Augmentation against tf.image -------------------------------------------------------
img = np.random.default_rng(11).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
img_path = os.path.join(TMP, "aug_in.raw")
img.tofile(img_path)
out_path = os.path.join(TMP, "aug_out.raw")
x = tf.cast(tf.constant(img), tf.float32)
worst = 0.0
for (cy, cx, flip, delta, factor) in [(0, 0, 0, 0.0, 1.0), (8, 8, 1, 63.0, 1.8), (3, 5, 0, -40.5, 0.2),
                                      (7, 1, 1, 12.25, 0.75), (4, 4, 0, -63.0, 1.3)]:
    helper("augment", img_path, out_path, 32, 32, 3, 24, 24, cy, cx, flip, delta, factor)
    got = np.fromfile(out_path, dtype=np.float32).reshape(24, 24, 3)
    t = tf.image.crop_to_bounding_box(x, cy, cx, 24, 24)
    if flip:
        t = tf.image.flip_left_right(t)
    t = tf.image.adjust_brightness(t, delta)
    t = tf.image.adjust_contrast(t, factor)
    t = tf.image.per_image_standardization(t).numpy()
    err = float(np.max(np.abs(got - t)))
    worst = max(worst, err)
    if err > 1e-4:
        fail("augmentation (%d, %d, flip %d, delta %g, factor %g) differs from tf.image by %g" % (cy, cx, flip, delta, factor, err))
helper("augment", img_path, out_path, 32, 32, 3, 24, 24, "eval")
got = np.fromfile(out_path, dtype=np.float32).reshape(24, 24, 3)
t = tf.image.per_image_standardization(tf.image.resize_with_crop_or_pad(x, 24, 24)).numpy()
err = float(np.max(np.abs(got - t)))
if err > 1e-4:
    fail("eval preprocessing differs from resize_with_crop_or_pad + per_image_standardization by %g" % err)
ok("augmentation equals tf.image (crop, flip, brightness, contrast, standardization) within %.1e; eval within %.1e" % (worst, err))
# ---- 4. Encoded images (ImageNet's image/encoded), both directions -----------------------------
if TOWER:
    rng = np.random.default_rng(5)
    # TensorFlow writes tf_cnn_benchmarks-style records (JPEG and PNG, plain and GZIP): tower inspect says
    # encoded, tower train reads them.
    for tf_comp, name in (("", "none"), ("GZIP", "gzip")):
        path = os.path.join(TMP, "enc_tf_%s.tfrecord" % name)
        with tf.io.TFRecordWriter(path, options=tf_comp or None) as w:
            for i in range(12):
                pix = rng.integers(0, 256, size=(20 + i, 30, 3), dtype=np.uint8)
                data = (tf.io.encode_png(pix) if i % 3 == 0 else tf.io.encode_jpeg(pix, quality=90)).numpy()
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                    "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"PNG" if i % 3 == 0 else b"JPEG"])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3]))}))
                w.write(ex.SerializeToString())
        keys = ["--image_key", "image/encoded", "--label_key", "image/class/label"]
        r = subprocess.run([TOWER, "inspect"] + keys + [path], capture_output=True, text=True)
        if r.returncode != 0 or "encoded JPEG or PNG images ('image/encoded'" not in r.stdout:
            fail("tower inspect of TF-written encoded records (%s): exit %d: %s%s" % (name, r.returncode, r.stdout, r.stderr))
        r = subprocess.run([TOWER, "train", "--model", "mnist", "--num_classes", "3", "--image_size", "28", "--batch_size", "4",
                            "--max_steps", "3", "--min_after_dequeue", "4", "--summary_every", "0", "--data", path,
                            "--train_dir", os.path.join(TMP, "enc_run_%s" % name)] + keys, capture_output=True, text=True)
        if r.returncode != 0 or "done at step 3" not in r.stdout:
            fail("tower train on TF-written encoded records (%s): exit %d: %s" % (name, r.returncode, r.stderr.strip()))
    # tower convert --encoded writes a folder's files as stored: TensorFlow reads the same bytes and labels, and
    # decodes them.
    folder = os.path.join(TMP, "enc_folder")
    files = []
    for c, cls in enumerate(("b_dog", "a_cat")):  # labels follow the sorted names: a_cat 0, b_dog 1
        os.makedirs(os.path.join(folder, cls))
        for i in range(3):
            pix = rng.integers(0, 256, size=(16, 24, 3), dtype=np.uint8)
            f = os.path.join(folder, cls, "%d.%s" % (i, "png" if i == 0 else "jpg"))
            data = (tf.io.encode_png(pix) if i == 0 else tf.io.encode_jpeg(pix)).numpy()
            open(f, "wb").write(data)
            files.append((data, 1 - c))
    prefix = os.path.join(TMP, "enc_conv", "train")
    r = subprocess.run([TOWER, "convert", "--from", "imagefolder", "--encoded", "--out", prefix, "--num_shards", "2",
                        "--image_key", "image/encoded", "--label_key", "image/class/label", folder],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("tower convert --encoded: %s" % r.stderr.strip())
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string), "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    got = []
    for s in range(2):
        for rec in tf.data.TFRecordDataset("%s-%05d-of-%05d.tfrecord" % (prefix, s, 2)):
            p = tf.io.parse_single_example(rec, spec)
            data = p["image/encoded"].numpy()
            if tf.io.decode_image(data).shape != (16, 24, 3):
                fail("tower convert --encoded: TensorFlow decodes a record to %s" % (tf.io.decode_image(data).shape,))
            got.append((data, int(p["image/class/label"])))
    if sorted(got) != sorted(files):
        fail("tower convert --encoded: the records' bytes and labels are not the files' (%d records)" % len(got))
    ok("encoded images: TensorFlow's records (JPEG, PNG; plain and GZIP) inspected and trained on by tower; tower "
       "convert --encoded's records hold the files' bytes and labels, decoded by TensorFlow")

print("all TensorFlow interoperability checks passed (TensorFlow %s)" % tf.__version__)
