"""lr_interop.py TOWER DATA N_EXAMPLES TMPDIR — Tower's learning-rate
schedules against TensorFlow's and Keras's own (label interop).

Each case trains the mnist model with `tower train` for 60 steps (2 towers
of 16: 20 steps an epoch of the N_EXAMPLES = 640 records), writing the
`learning_rate` scalar at every step; the event at step s holds the rate the
update of step s - 1 used.  TensorFlow computes the same rates from its own
schedule objects, with the epochs turned into steps as tf_cnn_benchmarks
turns them (int(steps per epoch * epochs); a piecewise boundary one less)
and its warmup (init_lr * float32(step) / float32(warmup_steps), the
schedule not shifted); cosine is keras.optimizers.schedules.CosineDecay,
with warmup_target and warmup_steps where there is a warmup.  Every step's
rate must agree within 1e-6 relative (the output says where they agree bit
for bit).  The comparison is shown to fail where it must: piecewise
boundaries one step later (without tf_cnn_benchmarks' - 1), and a cosine
whose warmup is not followed by the decay's start.
"""
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf
import keras

TOWER, DATA, N, TMP = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
STEPS, TOWERS, BATCH, TOL = 60, 2, 16, 1e-6
PER_EPOCH = float(N) / (TOWERS * BATCH)  # tf_cnn_benchmarks' num_batches_per_epoch


def tower_rates(name, flags):
    """The rate of each step 0 .. STEPS-1, from the events of a Tower run."""
    run = os.path.join(TMP, name)
    cmd = [TOWER, "train", "--model", "mnist", "--data", DATA, "--num_towers", str(TOWERS), "--batch_size",
           str(BATCH), "--max_steps", str(STEPS), "--summary_every", "1", "--histogram_every", "0", "--optimizer",
           "sgd", "--min_after_dequeue", "100", "--log_every", "0", "--no_progress", "--train_dir", run] + flags
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit("FAIL: %s: tower train exited %d:\n%s" % (name, out.returncode, out.stdout))
    line = [l for l in out.stdout.splitlines() if "learning rate:" in l]
    events = [f for f in os.listdir(run) if f.startswith("events.out.tfevents.")]
    rates = {}
    for e in tf.compat.v1.train.summary_iterator(os.path.join(run, events[0])):
        for v in e.summary.value:
            if v.tag == "learning_rate":
                rates[e.step - 1] = np.float32(v.simple_value)
    if sorted(rates) != list(range(STEPS)):
        sys.exit("FAIL: %s: learning_rate events at steps %s" % (name, sorted(k + 1 for k in rates)))
    return np.array([rates[s] for s in range(STEPS)], np.float32), (line[0].split(": ", 1)[1] if line else "")


def warmup(schedule, init_lr, warmup_steps):
    """tf_cnn_benchmarks' get_learning_rate: a linear warmup in front of schedule, not shifting it."""
    def rate(step):
        s = tf.constant(step, tf.int64)
        lr = schedule(s)
        if warmup_steps > 0:
            w = init_lr * tf.cast(s, tf.float32) / tf.cast(warmup_steps, tf.float32)
            lr = tf.cond(s < warmup_steps, lambda: w, lambda: tf.cast(lr, tf.float32))
        return lr
    return rate


def tf_rates(rate):
    return np.array([np.float32(rate(s)) for s in range(STEPS)], np.float32)


def compare(name, ours, theirs, must_match=True):
    rel = np.abs(ours.astype(np.float64) - theirs) / np.maximum(np.abs(theirs.astype(np.float64)), 1e-12)
    worst = int(np.argmax(rel))
    ok = rel.max() <= TOL
    if must_match and not ok:
        sys.exit("FAIL: %s: step %d: tower %.9g, tensorflow %.9g (relative %.3g)" % (
            name, worst, ours[worst], theirs[worst], rel[worst]))
    if not must_match and ok:
        sys.exit("FAIL: %s: a schedule that must differ from Tower's matched it" % name)
    return ok, int((ours == theirs).sum()), rel.max()


def main():
    cases = []
    # piecewise with a warmup of half an epoch: tf_cnn_benchmarks' form
    values, epochs, warm = [0.01, 0.004, 0.001], [1, 2], 0.5
    W = int(PER_EPOCH * warm)
    bounds = [int(int(e) * PER_EPOCH) - 1 for e in epochs]
    ours, line = tower_rates("piecewise", ["--lr_schedule", "piecewise", "--piecewise_learning_rate_schedule",
                                           "0.01;1;0.004;2;0.001", "--num_learning_rate_warmup_epochs", str(warm)])
    pw = tf.compat.v1.train.piecewise_constant
    theirs = tf_rates(warmup(lambda s: pw(s, bounds, values)(), values[0], W))
    cases.append(("piecewise 0.01;1;0.004;2;0.001, warmup 0.5 epoch", ours, theirs, line))
    late = tf_rates(warmup(lambda s: pw(s, [b + 1 for b in bounds], values)(), values[0], W))
    compare("piecewise against boundaries one step later", ours, late, must_match=False)

    # exponential (staircase, halved every epoch) with a warmup of a quarter epoch
    ours, line = tower_rates("exponential", ["--learning_rate", "0.01", "--lr_decay_factor", "0.5",
                                             "--num_epochs_per_decay", "1", "--num_learning_rate_warmup_epochs", "0.25"])
    ed = tf.compat.v1.train.exponential_decay
    theirs = tf_rates(warmup(lambda s: ed(0.01, s, int(PER_EPOCH * 1), 0.5, staircase=True)(), 0.01,
                             int(PER_EPOCH * 0.25)))
    cases.append(("exponential 0.01 x 0.5 an epoch, warmup 0.25 epoch", ours, theirs, line))

    # cosine with Keras's warmup: 0.5 epoch up to 0.01, then 2 epochs down to 0.05 of it, then flat
    W, D = int(PER_EPOCH * 0.5), int(PER_EPOCH * 2)
    ours, line = tower_rates("cosine_warmup", ["--lr_schedule", "cosine", "--learning_rate", "0.01", "--cosine_alpha",
                                               "0.05", "--cosine_decay_epochs", "2", "--num_learning_rate_warmup_epochs",
                                               "0.5"])
    theirs = tf_rates(keras.optimizers.schedules.CosineDecay(0.0, D, alpha=0.05, warmup_target=0.01, warmup_steps=W))
    cases.append(("cosine 0.01 -> 0.05x over 2 epochs after a 0.5-epoch warmup", ours, theirs, line))
    unshifted = tf_rates(warmup(keras.optimizers.schedules.CosineDecay(0.01, D, alpha=0.05), 0.01, W))
    compare("cosine whose decay is not shifted by the warmup", ours, unshifted, must_match=False)

    # cosine without a warmup, over the whole run (--cosine_decay_epochs 0: to --max_steps)
    ours, line = tower_rates("cosine", ["--lr_schedule", "cosine", "--learning_rate", "0.008"])
    theirs = tf_rates(keras.optimizers.schedules.CosineDecay(0.008, STEPS))
    cases.append(("cosine 0.008 -> 0 over the run's 60 steps", ours, theirs, line))

    for name, ours, theirs, line in cases:
        ok, same, worst = compare(name, ours, theirs)
        print("ok: %s: %d steps, %d bit for bit, max relative %.2g (Tower: %s)" % (name, STEPS, same, worst, line))
    print("ok: piecewise boundaries one step later and an unshifted cosine both differ from Tower's (the test can fail)")


main()
