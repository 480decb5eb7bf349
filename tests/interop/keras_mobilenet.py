"""keras_mobilenet.py HELPER TMPDIR H WIDTH B [SEED] — Tower's mobilenet_v2
against tf.keras.applications.MobileNetV2 (weights=None, classes=10, no
classifier activation) with Tower's variables loaded by name: the
training-mode loss and every trainable variable's gradient
(tf.GradientTape), the moving statistics after one step (Keras's
BatchNormalization in training mode updates them), and the evaluation-mode
logits.  Prints the largest relative differences; exits 1 above 1e-4 (loss,
logits, moving statistics) or 1e-3 (gradients, relative to the largest
gradient entry of the variable's layer) unless, for a gradient, Keras in
float64 says Tower is as close to the truth as Keras in float32
(keras_referee.py: a ReLU6 input nearer its kink than float32 rounding
flips on one side only); exits 3 when that referee's verdict is the only
failure (run_keras_mobilenet.sh judges it over several seeds).  SEED
(default 2026) seeds Tower's variables and inputs.  Keras 3's names: a
DepthwiseConv2D's variable is `kernel`."""
import os, subprocess, sys
import numpy as np

N_NOISE_DRAWS = 4  # as keras_nets.py

helper, tmp, H, width, B = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
seed = int(sys.argv[6]) if len(sys.argv) > 6 else 2026
subprocess.run([helper, "mobilenet_v2", tmp, str(H), str(B), "0", str(width), str(seed)], check=True)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
import keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_referee  # noqa: E402  (the float64 referee, keras_nets.py's too)

rd = lambda n, dt=np.float32: np.fromfile(os.path.join(tmp, n), dtype=dt)
params, grads, moved = rd("params.bin"), rd("grads.bin"), rd("moved.bin")
x = rd("x.bin").reshape(B, H, H, 3)
labels = rd("labels.bin", np.int32)
loss_t = float(rd("loss.bin")[0])
eval_logits_t = rd("eval_logits.bin").reshape(B, 10)
table = {}
for line in open(os.path.join(tmp, "vars.txt")):
    f = line.split()
    name, off, nd = f[0], int(f[1]), int(f[2])
    shape = tuple(int(v) for v in f[3:3 + nd])
    table[name] = (off, shape)

def arr(block, name):
    off, shape = table[name]
    return block[off:off + int(np.prod(shape))].reshape(shape)

build = lambda: keras.applications.MobileNetV2(input_shape=(H, H, 3), alpha=width, weights=None, classes=10,
                                                classifier_activation=None)
keyof = lambda layer, w: layer.name + "/" + w.name.split("/")[-1].split(":")[0]
model = build()
n_loaded = 0
for layer in model.layers:
    for w in layer.weights:
        key = keyof(layer, w)
        if key not in table:
            sys.exit("Keras variable %s (%s) has no Tower counterpart" % (key, w.path))
        w.assign(arr(params, key))
        n_loaded += 1
if n_loaded != len(table):
    sys.exit("Keras has %d variables, Tower %d" % (n_loaded, len(table)))
xt = tf.constant(x)
with tf.GradientTape() as tape:
    logits = model(xt, training=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
tvars = model.trainable_weights
g = tape.gradient(loss, tvars)
worst = 0.0
fails = 0
rel_loss = abs(float(loss) - loss_t) / abs(float(loss))
print("loss: keras %.8g tower %.8g rel %.2e" % (float(loss), loss_t, rel_loss))
fails += rel_loss > 1e-4
ids = [id(v) for v in tvars]
strict_failed = []
for layer in model.layers:
    if not layer.trainable_weights:
        continue
    # Scale: the layer's largest gradient entry (a batch norm's beta followed
    # by a 1x1 conv and another batch norm has a true gradient of 0, which
    # both sides only approximate by rounding).
    pairs = [(keyof(layer, w), g[ids.index(id(w))].numpy(), arr(grads, keyof(layer, w))) for w in layer.trainable_weights]
    scale = max(max(np.abs(gk).max() for _, gk, _ in pairs), 1e-30)
    for key, gk, gt in pairs:
        r = np.abs(gk - gt).max() / scale
        worst = max(worst, r)
        if r > 1e-3:
            print("  gradient %s: max |diff| / the layer's max |keras gradient| = %.3g (to the referee)" % (key, r))
            strict_failed.append((key, r, gk))
print("gradients: largest relative difference %.3g over %d variables" % (worst, len(tvars)))
referee_fails = 0
if strict_failed:
    referee_fails, _ = keras_referee.float64_referee(build, keyof, arr, params, grads, x, labels, model, strict_failed,
                                                     seed, N_NOISE_DRAWS)
worst = 0.0
for layer in model.layers:
    for w in layer.non_trainable_weights:
        key = keyof(layer, w)
        r = np.abs(w.numpy() - arr(moved, key)).max() / max(np.abs(w.numpy()).max(), 1e-30)
        worst = max(worst, r)
        if r > 1e-4:
            print("  moving statistic %s: %.3g FAIL" % (key, r))
            fails += 1
print("moving statistics after one step: largest relative difference %.3g" % worst)
for layer in model.layers:
    for w in layer.weights:
        w.assign(arr(moved, keyof(layer, w)))
el = model(xt, training=False).numpy()
r = np.abs(el - eval_logits_t).max() / np.abs(el).max()
print("evaluation logits: max |diff| / max |keras| = %.3g" % r)
fails += r > 1e-4
sys.exit(1 if fails else 3 if referee_fails else 0)
