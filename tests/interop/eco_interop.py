"""eco_interop.py WORK — Tower's event files and .safetensors files, read by their own ecosystems.

Run by run_eco_interop.sh after it trained 30 steps on 2 towers (--summary_every 10,
--histogram_every 20, global batch 16, learning rate 0.05), evaluated, and exported
WORK/ema.safetensors and WORK/raw.safetensors.  Checks:
  * TensorBoard's EventAccumulator reads WORK/run: every scalar tag at steps 10, 20, 30;
    learning_rate; loss = the mean of the tower losses; examples_per_sec = 16 x
    global_step/sec; each variable's norm at step 30 equals the norm of the exported raw
    variable; histograms at steps 20 and 30 whose statistics match the raw variables;
  * WORK/crashed (a run resumed from step 10 after it had written steps 12 to 20): TensorBoard
    shows each step once, the resumed run's from step 10 on (the session start's purge);
  * WORK/run/eval holds "Precision @ 1" at step 30, equal to what `tower eval` printed;
  * the safetensors package loads both files; every tensor equals this script's own
    parse of the file's bytes; the metadata says which variables they are;
  * where TensorFlow is importable: tf.compat.v1.train.summary_iterator reads the file,
    TensorFlow's own histogram op gives the same buckets for the same values, and the
    mnist network built from TensorFlow ops with the exported moving averages (in
    TensorFlow's layouts, no transposes) reaches the precision `tower eval` printed.
Prints "ok: ..." lines; exits 1 on the first failed group.
"""
import glob
import json
import os
import re
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
from tensorboard.backend.event_processing import event_accumulator as ea

work = sys.argv[1]
run_dir = os.path.join(work, "run")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL: " + msg)


def done(group):
    if failures:
        sys.exit(1)
    print("ok: " + group)


# ---- safetensors: the package's tensors against this script's own parse of the bytes
def parse_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"])
    return header.get("__metadata__", {}), out


raw = load_file(os.path.join(work, "raw.safetensors"))
ema = load_file(os.path.join(work, "ema.safetensors"))
names = sorted(raw)
check(sorted(ema) == names and len(names) == 10, "tensor names %s" % names)
for which, loaded in (("raw", raw), ("ema", ema)):
    path = os.path.join(work, which + ".safetensors")
    meta, own = parse_safetensors(path)
    with safe_open(path, framework="np") as f:
        check(f.metadata() == meta, "%s: metadata %s vs %s" % (which, f.metadata(), meta))
    check(meta.get("variables") == ("raw" if which == "raw" else "moving_average"), "%s: metadata %s" % (which, meta))
    check(meta.get("model") == "mnist" and meta.get("global_step") == "30", "%s: metadata %s" % (which, meta))
    for name in names:
        a, b = loaded[name], own[name]
        check(a.dtype == np.float32 and a.shape == b.shape, "%s %s: %s %s vs %s" % (which, name, a.dtype, a.shape, b.shape))
        check(np.array_equal(a.view(np.uint32), b.view(np.uint32)), "%s %s: values differ from the bytes" % (which, name))
check(raw["conv1/weights"].shape == (5, 5, 1, 32) and raw["local3/weights"].shape == (3136, 1024)
      and raw["softmax_linear/weights"].shape == (10, 3), "TensorFlow shapes: %s" % {k: raw[k].shape for k in names})
check(any(not np.array_equal(raw[n], ema[n]) for n in names), "moving averages equal the raw variables")
done("safetensors loads %d tensors from each file, equal to the bytes, TensorFlow names and shapes" % len(names))

# ---- TensorBoard's reader on the training run
acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
acc.Reload()
tags = acc.Tags()
scalar_tags = ["loss", "accuracy", "tower_0/loss", "tower_1/loss", "tower_0/accuracy", "tower_1/accuracy",
               "learning_rate", "examples_per_sec", "global_step/sec"] + [n + "/norm" for n in names]
check(sorted(tags["scalars"]) == sorted(scalar_tags), "scalar tags %s" % tags["scalars"])
scalars = {t: acc.Scalars(t) for t in tags["scalars"]}
for t, evs in scalars.items():
    check([e.step for e in evs] == [10, 20, 30], "%s at steps %s" % (t, [e.step for e in evs]))
for i in range(3):
    lr = scalars["learning_rate"][i].value
    check(lr == float(np.float32(0.05)), "learning_rate %r" % lr)
    mean = (scalars["tower_0/loss"][i].value + scalars["tower_1/loss"][i].value) / 2
    check(abs(scalars["loss"][i].value - mean) <= 1e-5 * abs(mean), "loss %r vs tower mean %r" % (scalars["loss"][i].value, mean))
    eps, gps = scalars["examples_per_sec"][i].value, scalars["global_step/sec"][i].value
    check(eps > 0 and abs(eps - 16 * gps) <= 1e-4 * eps, "examples_per_sec %r vs 16 x %r" % (eps, gps))
for n in names:
    want = float(np.linalg.norm(raw[n].astype(np.float64)))
    got = scalars[n + "/norm"][-1].value
    check(abs(got - want) <= 1e-6 * want, "%s/norm at step 30: %r, exported %r" % (n, got, want))
check(sorted(tags["histograms"]) == names, "histogram tags %s" % tags["histograms"])
for n in names:
    hs = acc.Histograms(n)
    check([h.step for h in hs] == [20, 30], "%s histograms at %s" % (n, [h.step for h in hs]))
    h = hs[-1].histogram_value
    v = raw[n].astype(np.float64).ravel()
    check(h.num == v.size and h.min == v.min() and h.max == v.max(), "%s histogram num/min/max" % n)
    check(abs(h.sum - v.sum()) <= 1e-9 * np.abs(v).sum() + 1e-12, "%s histogram sum %r vs %r" % (n, h.sum, v.sum()))
    check(abs(h.sum_squares - (v * v).sum()) <= 1e-9 * (v * v).sum(), "%s histogram sum_squares" % n)
    check(len(h.bucket) == len(h.bucket_limit) and sum(h.bucket) == v.size, "%s histogram buckets" % n)
done("TensorBoard reads %d scalar tags at steps 10, 20, 30 and %d histograms at 20, 30; norms and histograms match "
     "the exported variables" % (len(scalar_tags), len(names)))

# ---- a run resumed from step 10 after it had written steps 12 to 20 (run_eco_interop.sh's "crashed"): the
#      resumed file's session start (SessionLog START at step 11, its first) drops the first file's steps from 11
#      on; step 10's, the checkpoint's, stays
crashed = ea.EventAccumulator(os.path.join(work, "crashed"), size_guidance={ea.SCALARS: 0})
crashed.Reload()
steps = [e.step for e in crashed.Scalars("loss")]
check(steps == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24],
      "the resumed run's loss steps in TensorBoard: %s (expected 2 to 10, then the resumed run's 12 to 24)" % steps)
done("TensorBoard drops the steps a crashed run wrote past its checkpoint: loss at %s" % steps)

# ---- the evaluation beside the run
with open(os.path.join(work, "eval.out")) as f:
    printed = float(re.search(r"precision @ 1 = ([0-9.]+)", f.read()).group(1))
ev = ea.EventAccumulator(os.path.join(run_dir, "eval"))
ev.Reload()
check(sorted(ev.Tags()["scalars"]) == ["Precision @ 1", "cross_entropy", "loss"], "eval tags %s" % ev.Tags()["scalars"])
p = ev.Scalars("Precision @ 1")
check([e.step for e in p] == [30] and abs(p[0].value - printed) <= 5e-4, "Precision @ 1 %s, printed %r" % (p, printed))
check(printed > 0.45, "precision %.3f: the model did not learn, so the TensorFlow comparison below would prove little"
      % printed)
done("TensorBoard reads Precision @ 1 = %.3f at step 30 in run/eval" % printed)

# ---- TensorFlow itself, where it is installed
try:
    import tensorflow as tf
except Exception:  # noqa: BLE001 - any import failure means "not installed here"
    print("note: tensorflow is not importable; the TensorFlow cross-checks are skipped")
    sys.exit(0)

files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
events = list(tf.compat.v1.train.summary_iterator(files[0]))
check(events[0].file_version == "brain.Event:2", "first event %s" % events[0])
last = [e for e in events if e.step == 30 and any(v.HasField("histo") for v in e.summary.value)][0]
with tf.Graph().as_default():
    ops = {n: tf.compat.v1.summary.histogram("h", tf.constant(raw[n])) for n in names}
    with tf.compat.v1.Session() as sess:
        results = sess.run(ops)
for n in names:
    theirs = tf.compat.v1.Summary.FromString(results[n]).value[0].histo
    ours = [v.histo for v in last.summary.value if v.tag == n][0]
    check(list(theirs.bucket_limit) == list(ours.bucket_limit) and list(theirs.bucket) == list(ours.bucket),
          "%s: buckets differ from TensorFlow's histogram op" % n)
    check(theirs.num == ours.num and theirs.min == ours.min and theirs.max == ours.max, "%s: num/min/max vs TF" % n)
done("TensorFlow's summary_iterator reads the file; its histogram op gives the same buckets for all %d variables"
     % len(names))

# The exported moving averages in TensorFlow's own ops, TensorFlow's layouts as they are.
w = {k: tf.constant(v) for k, v in ema.items()}
feature = {"image_raw": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}


def decode(rec):
    ex = tf.io.parse_single_example(rec, feature)
    x = tf.reshape(tf.cast(tf.io.decode_raw(ex["image_raw"], tf.uint8), tf.float32), [28, 28, 1]) / 255.0 - 0.5
    return x, ex["label"]


ds = tf.data.TFRecordDataset(sorted(glob.glob(os.path.join(work, "data", "train-*.tfrecord")))).map(decode).batch(64)
correct = total = top2 = 0
for x, y in ds:
    h = tf.nn.relu(tf.nn.conv2d(x, w["conv1/weights"], 1, "SAME") + w["conv1/biases"])
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")
    h = tf.nn.relu(tf.nn.conv2d(h, w["conv2/weights"], 1, "SAME") + w["conv2/biases"])
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")
    h = tf.reshape(h, [tf.shape(h)[0], -1])
    h = tf.nn.relu(h @ w["local3/weights"] + w["local3/biases"])
    h = tf.nn.relu(h @ w["local4/weights"] + w["local4/biases"])
    logits = h @ w["softmax_linear/weights"] + w["softmax_linear/biases"]
    correct += int(tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == y, tf.int32)))
    top2 += int(tf.reduce_sum(tf.cast(tf.math.in_top_k(y, logits, 2), tf.int32)))
    total += int(tf.shape(y)[0])
check(total == 120 and abs(correct / total - printed) <= 1.0 / total + 1e-9,
      "TensorFlow ops on the export: %d/%d, tower eval printed %.3f" % (correct, total, printed))
done("the export in TensorFlow's ops: precision %d/%d = %.3f, tower eval %.3f" % (correct, total, correct / total, printed))
# --top_k 2 against tf.math.in_top_k on the same export (one example's near-tie may flip either way)
with open(os.path.join(work, "eval_top2.out")) as f:
    lines = f.read()
at1 = [float(l.rsplit("= ", 1)[1]) for l in lines.splitlines() if "precision @ 1 = " in l]
at2 = [float(l.rsplit("= ", 1)[1]) for l in lines.splitlines() if "precision @ 2 = " in l]
check(at1 == [printed] and len(at2) == 1, "tower eval --top_k 2 printed %r" % lines)
check(abs(top2 / total - at2[0]) <= 1.0 / total + 1e-9 and at2[0] >= at1[0],
      "precision @ 2: TensorFlow's in_top_k %d/%d, tower eval printed %.3f" % (top2, total, at2[0]))
done("precision @ 2: TensorFlow's in_top_k %d/%d = %.3f, tower eval --top_k 2 %.3f" % (top2, total, top2 / total, at2[0]))
