"""keras_nets.py HELPER TMPDIR NET H B FC_WIDTH [SEED] — Tower's vgg11, vgg16,
resnet20 or resnet50 against Keras with Tower's variables loaded by name:
tf.keras.applications.VGG16 / ResNet50 (weights=None, classes=10,
classifier_activation=None), and for vgg11 and resnet20, which Keras's
applications do not have, the same layers built here with Keras's layer
classes and Tower's names (VGG's configuration A; the CIFAR ResNet with
option B shortcuts, Conv2D's default bias, BatchNormalization(epsilon=
1.001e-5) as keras/src/applications/resnet.py).  Checks that both sides
have the same variables in the same order with the same shapes, then
compares the training-mode loss and every trainable variable's gradient
(tf.GradientTape), the moving statistics after one step, and the
evaluation-mode logits.  Prints the largest relative differences; exits 1
above 1e-4 (loss, logits, moving statistics) or 1e-3 (gradients, relative
to the largest gradient entry of the variable's layer) unless, for a
gradient, Keras in float64 says Tower is as close to the truth as Keras in
float32 (see below: ResNet50 at initialisation on small maps; Keras's
float32 error taken over its run and N_NOISE_DRAWS runs on inputs moved by
one unit in the last place, since one draw of that noise can be far below
its spread).  Exits 3
when that referee's verdict is the only failure (run_keras_nets.sh judges
it over several seeds); SEED (default 2026) seeds Tower's variables."""
import os, subprocess, sys
import numpy as np

N_NOISE_DRAWS = 4  # Keras float32 runs on inputs moved by one ulp: its noise floor for the float64 referee

helper, tmp, net, H, B, fc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
seed = int(sys.argv[7]) if len(sys.argv) > 7 else 2026
subprocess.run([helper, net, tmp, str(H), str(B), str(fc), "0", str(seed)], check=True)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
import keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_arch  # noqa: E402  (vgg11 and resnet20, one definition)
import keras_referee  # noqa: E402  (the float64 referee, keras_mobilenet.py's too)

rd = lambda n, dt=np.float32: np.fromfile(os.path.join(tmp, n), dtype=dt)
params, grads, moved = rd("params.bin"), rd("grads.bin"), rd("moved.bin")
x = rd("x.bin").reshape(B, H, H, 3)
labels = rd("labels.bin", np.int32)
loss_t = float(rd("loss.bin")[0])
eval_logits_t = rd("eval_logits.bin").reshape(B, 10)
table, order = {}, []
for line in open(os.path.join(tmp, "vars.txt")):
    f = line.split()
    name, off, nd = f[0], int(f[1]), int(f[2])
    shape = tuple(int(v) for v in f[3:3 + nd])
    table[name] = (off, shape)
    order.append(name)

def arr(block, name):
    off, shape = table[name]
    return block[off:off + int(np.prod(shape))].reshape(shape)


def build():
    if net == "vgg16":
        if fc not in (0, 4096):
            sys.exit("Keras's VGG16 has a 4096-wide head: run vgg16 with FC_WIDTH 0")
        return keras.applications.VGG16(input_shape=(H, H, 3), weights=None, classes=10, classifier_activation=None)
    if net == "resnet50":
        return keras.applications.ResNet50(input_shape=(H, H, 3), weights=None, classes=10, classifier_activation=None)
    if net == "vgg11":
        return keras_arch.vgg11(H, fc or 4096)
    if net == "resnet20":
        return keras_arch.resnet20(H)
    sys.exit("unknown network " + net)


model = build()
keyof = lambda layer, w: layer.name + "/" + w.name.split("/")[-1].split(":")[0]
keras_order = [keyof(layer, w) for layer in model.layers for w in layer.weights]
for key in keras_order:
    if key not in table:
        sys.exit("Keras variable %s has no Tower counterpart" % key)
if keras_order != order:
    sys.exit("Keras's variable order differs from Tower's: first (Keras, Tower) at %r" %
             (next(((a, b) for a, b in zip(keras_order, order) if a != b), (len(keras_order), len(order))),))
n_params = 0
for layer in model.layers:
    for w in layer.weights:
        key = keyof(layer, w)
        if tuple(w.shape) != table[key][1]:
            sys.exit("%s: Keras's shape %s, Tower's %s" % (key, tuple(w.shape), table[key][1]))
        w.assign(arr(params, key))
        n_params += int(np.prod(w.shape))
print("%s %dx%d: %d variables, %d parameters, in Keras's order with Keras's names and shapes" %
      (net, H, H, len(order), n_params))
if model.count_params() != n_params:
    sys.exit("Keras counts %d parameters" % model.count_params())
xt = tf.constant(x)
with tf.GradientTape() as tape:
    logits = model(xt, training=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
tvars = model.trainable_weights
g = tape.gradient(loss, tvars)
worst = 0.0
fails = 0
referee_fails = 0  # gradients the float64 referee finds further from the truth than 3x Keras float32
rel_loss = abs(float(loss) - loss_t) / abs(float(loss))
print("training-mode loss: keras %.8g tower %.8g rel %.2e" % (float(loss), loss_t, rel_loss))
fails += rel_loss > 1e-4
ids = [id(v) for v in tvars]
strict_failed = []
for layer in model.layers:
    if not layer.trainable_weights:
        continue
    pairs = [(keyof(layer, w), g[ids.index(id(w))].numpy(), arr(grads, keyof(layer, w))) for w in layer.trainable_weights]
    scale = max(max(np.abs(gk).max() for _, gk, _ in pairs), 1e-30)
    for key, gk, gt in pairs:
        r = np.abs(gk - gt).max() / scale
        worst = max(worst, r)
        if r > 1e-3:
            strict_failed.append((key, r, gk))
print("gradients: largest relative difference %.3g over %d variables" % (worst, len(tvars)))
if strict_failed:
    referee_fails, _ = keras_referee.float64_referee(build, keyof, arr, params, grads, x, labels, model, strict_failed,
                                                     seed, N_NOISE_DRAWS)
worst = 0.0
n_moving = 0
for layer in model.layers:
    for w in layer.non_trainable_weights:
        key = keyof(layer, w)
        r = np.abs(w.numpy() - arr(moved, key)).max() / max(np.abs(w.numpy()).max(), 1e-30)
        worst = max(worst, r)
        n_moving += 1
        if r > 1e-4:
            print("  moving statistic %s: %.3g FAIL" % (key, r))
            fails += 1
if n_moving:
    print("moving statistics after one step: largest relative difference %.3g over %d" % (worst, n_moving))
for layer in model.layers:
    for w in layer.weights:
        w.assign(arr(moved, keyof(layer, w)))
el = model(xt, training=False).numpy()
r = np.abs(el - eval_logits_t).max() / np.abs(el).max()
print("evaluation logits: max |diff| / max |keras| = %.3g" % r)
fails += r > 1e-4
sys.exit(1 if fails else 3 if referee_fails else 0)
