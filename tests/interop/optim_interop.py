"""optim_interop.py HELPER TMPDIR — Tower's optimizer table against
TensorFlow's own optimizers on the same float32 gradients (label interop).

For each case, TensorFlow and Tower (tests/test_optim_interop_helper.c,
optimizer_apply of ps/optimizer.h) start from the same random variables and
take the same 10 steps of random gradients (some elements' gradients are
always 0, the scale changes from step to step); after every step the
variables are compared: max |tower - tf| / max(|tf|, 1e-3) must stay within
1e-6 (with TensorFlow 2.21 / Keras 3.15 on x86-64 every case comes out bit
for bit the same, which the output says).  Cases: tf.compat.v1.train.AdamOptimizer, RMSPropOptimizer (plain,
with momentum, centered with momentum) and tf.keras.optimizers.AdamW.  The
comparison is shown to fail where it must: Tower's Adam with beta2 0.99
against TensorFlow's 0.999, and Tower's AdamW without weight decay against
Keras's with it.  The slot names of Tower's table are checked, role by role,
against the slot variables TensorFlow 1 creates in a graph.
"""
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

HELPER, TMP = sys.argv[1], sys.argv[2]
N, K, TOL = 4096, 10, 1e-6
F32 = lambda x: float(np.float32(x))  # a Python float holding the float32 value Tower parses


def inputs(seed):
    rng = np.random.default_rng(seed)
    var = rng.normal(0.0, 1.0, N).astype(np.float32)
    grads = np.stack([(rng.normal(0.0, 1.0, N) * 10.0 ** rng.uniform(-3, 1)).astype(np.float32) for _ in range(K)])
    grads[:, :64] = 0.0  # elements whose gradient is always 0 (AdamW: decay alone)
    return var, grads


def tower(opt, var, grads, **kw):
    src, dst = os.path.join(TMP, "in.bin"), os.path.join(TMP, "out.bin")
    with open(src, "wb") as f:
        f.write(np.array([N, K], "<i4").tobytes())
        f.write(var.astype("<f4").tobytes())
        f.write(grads.astype("<f4").tobytes())
    args = [HELPER, "run", opt, src, dst] + ["%s=%r" % (k, v) for k, v in kw.items()]
    subprocess.run(args, check=True)
    return np.fromfile(dst, "<f4").reshape(K, N)


def tf1(make_opt, var, grads):
    v = tf.Variable(var)
    opt = make_opt()
    out = []
    for g in grads:
        opt.apply_gradients([(tf.constant(g), v)])
        out.append(v.numpy().copy())
    return np.stack(out)


def keras_run(make_opt, var, grads):
    import keras
    v = keras.Variable(var)
    opt = make_opt()
    out = []
    for g in grads:
        opt.apply_gradients([(tf.constant(g), v)])
        out.append(np.array(v.numpy()).copy())
    return np.stack(out)


def max_rel(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b) / np.maximum(np.abs(b.astype(np.float64)), 1e-3)))


failures = 0


def compare(label, got, want, expect_equal=True):
    global failures
    worst = max(max_rel(got[s], want[s]) for s in range(K))
    ok = worst <= TOL if expect_equal else worst > TOL
    print("%-58s max relative difference over %d steps %.3g%s (tolerance %.0e)%s  %s" % (
        label, K, worst, " (bitwise)" if np.array_equal(got, want) else "", TOL,
        "" if expect_equal else ", must exceed it", "ok" if ok else "FAIL"))
    failures += not ok
    return worst


lr = F32(0.01)
var, grads = inputs(1)

want = tf1(lambda: tf.compat.v1.train.AdamOptimizer(lr, beta1=0.9, beta2=0.999, epsilon=1e-8), var, grads)
compare("adam vs tf.compat.v1.train.AdamOptimizer", tower("adam", var, grads, lr=lr, beta1=0.9, beta2=0.999, epsilon=1e-8), want)
compare("adam beta2 0.99 vs AdamOptimizer beta2 0.999", tower("adam", var, grads, lr=lr, beta2=0.99), want, False)

for label, mom, centered in [("rmsprop", 0.0, False), ("rmsprop momentum 0.5", 0.5, False),
                             ("rmsprop centered momentum 0.5", 0.5, True)]:
    want = tf1(lambda: tf.compat.v1.train.RMSPropOptimizer(lr, decay=0.9, momentum=mom, epsilon=1e-10, centered=centered),
               var, grads)
    compare("%s vs tf.compat.v1.train.RMSPropOptimizer" % label,
            tower("rmsprop", var, grads, lr=lr, decay=0.9, momentum=mom, epsilon=1e-10, centered=int(centered)), want)

import keras  # noqa: E402
wd = F32(0.1)
# beta_1, beta_2 as a Keras user writes them, Python floats (F32(0.9) hid a 1 - beta2 taken from float32's 0.999).
want = keras_run(lambda: keras.optimizers.AdamW(learning_rate=lr, weight_decay=wd, beta_1=0.9, beta_2=0.999,
                                                epsilon=F32(1e-7)), var, grads)
compare("adamw vs tf.keras.optimizers.AdamW (Keras %s)" % keras.__version__,
        tower("adamw", var, grads, lr=lr, weight_decay=wd, beta1=0.9, beta2=0.999, epsilon=1e-7), want)
compare("adamw without weight decay vs Keras AdamW with 0.1", tower("adamw", var, grads, lr=lr, weight_decay=0.0), want, False)

# Slot names: the slot variables TensorFlow 1 creates beside a variable, in a
# graph, taken in the order of Tower's slots (their roles: m, v; ms, mg, mom),
# then the optimizer's other variables (Adam's beta powers).
def tf1_slots(make_opt, roles):
    g = tf.Graph()
    with g.as_default():
        v = tf.compat.v1.Variable(np.zeros(2, np.float32), name="w")
        opt = make_opt()
        opt.minimize(tf.reduce_sum(v * v), var_list=[v])
        slot_vars = [opt.get_slot(v, r) for r in roles]
        names = [x.op.name.replace("w/", "", 1) for x in slot_vars]
        others = [x.op.name for x in tf.compat.v1.global_variables()
                  if x.op.name != "w" and all(x is not y for y in slot_vars)]
        return names + sorted(others)


for opt, extra, roles, make in [
        ("momentum", [], ["momentum"], lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)),
        ("adam", [], ["m", "v"], lambda: tf.compat.v1.train.AdamOptimizer()),
        ("rmsprop", [], ["rms", "momentum"], lambda: tf.compat.v1.train.RMSPropOptimizer(0.1, momentum=0.5)),
        ("rmsprop", ["centered=1"], ["rms", "mg", "momentum"],
         lambda: tf.compat.v1.train.RMSPropOptimizer(0.1, momentum=0.5, centered=True))]:
    ours = subprocess.run([HELPER, "slots", opt] + extra, check=True, capture_output=True, text=True).stdout.split()
    theirs = tf1_slots(make, roles)
    ok = ours == theirs
    print("%-58s Tower %s, TensorFlow %s  %s" % ("slot names of %s %s (%s)" % (opt, " ".join(extra), ", ".join(roles)),
                                                 ours, theirs, "ok" if ok else "FAIL"))
    failures += not ok

print("optimizers equal TensorFlow's" if not failures else "optimizer interop FAILED (%d)" % failures)
sys.exit(1 if failures else 0)
