"""keras_layers.py HELPER TMPDIR — the MobileNetV2 layers of model/ against
Keras 3 and TensorFlow's gradients (the `interop` ctest test_layers_keras).

For each case, random inputs are written as float32 files, the C helper
(tests/test_layers_keras_helper.c) runs Tower's layer on them, and the same
computation runs in Keras: ZeroPadding2D(correct_pad) + DepthwiseConv2D
(stride 2 VALID, or stride 1 SAME), BatchNormalization(momentum=0.999,
epsilon=1e-3) in training (output, moving statistics after one step) and
evaluation, ReLU(6.) + GlobalAveragePooling2D.  Gradients of sum(y * dy)
come from tf.GradientTape.  Every array must agree to a relative 1e-4 of
its largest value; one line per array, exit 1 on any failure.
"""
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf
import keras

helper, tmp = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(15)
failures = 0


def put(name, a):
    np.asarray(a, np.float32).tofile(os.path.join(tmp, name + ".f32"))


def get(name, shape):
    return np.fromfile(os.path.join(tmp, name + ".f32"), np.float32).reshape(shape)


def compare(what, tower, ref, rel=1e-4):
    global failures
    ref = np.asarray(ref, np.float64)
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    diff = float(np.max(np.abs(tower - ref))) / scale
    ok = diff <= rel
    failures += not ok
    print(f"  {what:40s} max |diff| / max |keras| = {diff:.2e}: {'ok' if ok else 'FAIL'}")


def run(*args):
    subprocess.run([helper, *map(str, args)], check=True)


def correct_pad(h, w, k=3):
    adjust = (1 - h % 2, 1 - w % 2)
    c = (k // 2, k // 2)
    return ((c[0] - adjust[0], c[0]), (c[1] - adjust[1], c[1]))


def depthwise(B, H, W, C, stride):
    print(f"depthwise 3x3 stride {stride} on {B}x{H}x{W}x{C}")
    x = rng.uniform(-1, 1, (B, H, W, C)).astype(np.float32)
    w = rng.uniform(-1, 1, (3, 3, C, 1)).astype(np.float32)
    layers = []
    if stride == 2:
        layers.append(keras.layers.ZeroPadding2D(correct_pad(H, W)))
    dw = keras.layers.DepthwiseConv2D(3, strides=stride, padding="same" if stride == 1 else "valid", use_bias=False)
    layers.append(dw)
    model = keras.Sequential([keras.Input((H, W, C))] + layers)
    dw.set_weights([w])
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = model(xt)
        dy = rng.uniform(-1, 1, y.shape).astype(np.float32)
        loss = tf.reduce_sum(y * dy)
    dx, dk = tape.gradient(loss, [xt, dw.kernel])
    put("x", x), put("w", w), put("dy", dy)
    run("depthwise", tmp, B, H, W, C, stride)
    compare("forward y", get("y", y.shape), y.numpy())
    compare("dx", get("dx", x.shape), dx.numpy())
    compare("dweight", get("dw", (3, 3, C, 1)), dk.numpy())


def batchnorm(B, H, W, C):
    print(f"batch norm (momentum 0.999, epsilon 1e-3) on {B}x{H}x{W}x{C}")
    x = (rng.uniform(-1, 1, (B, H, W, C)) * 2 + 0.5).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, C).astype(np.float32)
    beta = rng.uniform(-0.5, 0.5, C).astype(np.float32)
    bn = keras.layers.BatchNormalization(momentum=0.999, epsilon=1e-3)
    bn.build((None, H, W, C))
    bn.gamma.assign(gamma)
    bn.beta.assign(beta)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = bn(xt, training=True)
        dy = rng.uniform(-1, 1, y.shape).astype(np.float32)
        loss = tf.reduce_sum(y * dy)
    dx, dg, db = tape.gradient(loss, [xt, bn.gamma, bn.beta])
    y_eval = bn(xt, training=False)
    put("x", x), put("gamma", gamma), put("beta", beta), put("dy", dy)
    run("batchnorm", tmp, B, H, W, C)
    compare("training forward y", get("y", x.shape), y.numpy())
    compare("dx", get("dx", x.shape), dx.numpy())
    compare("dgamma", get("dgamma", (C,)), dg.numpy())
    compare("dbeta", get("dbeta", (C,)), db.numpy())
    compare("moving_mean after one step", get("moving_mean", (C,)), bn.moving_mean.numpy())
    compare("moving_variance after one step", get("moving_var", (C,)), bn.moving_variance.numpy())
    # The variance fed to the moving average, (moving - 0.999 * 1) / 0.001:
    # the biased one (Keras 3) differs from the unbiased one by n / (n - 1),
    # which the comparison above (values near 1) is too coarse to see.
    fed = lambda mv: (np.asarray(mv, np.float64) - 0.999) / 0.001
    compare("variance fed to the moving average", fed(get("moving_var", (C,))), fed(bn.moving_variance.numpy()), 1e-3)
    n = B * H * W
    unbiased = fed(bn.moving_variance.numpy()) * n / (n - 1)
    print(f"  {'(the unbiased one would differ by':40s} {float(np.max(np.abs(unbiased - fed(bn.moving_variance.numpy())) / np.max(np.abs(unbiased)))):.2e})")
    compare("evaluation forward y", get("y_eval", x.shape), y_eval.numpy())


def head(B, H, W, C):
    print(f"ReLU(6.) + GlobalAveragePooling2D on {B}x{H}x{W}x{C}")
    x = rng.uniform(-3, 9, (B, H, W, C)).astype(np.float32)
    model = keras.Sequential([keras.Input((H, W, C)), keras.layers.ReLU(6.0), keras.layers.GlobalAveragePooling2D()])
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = model(xt)
        dy = rng.uniform(-1, 1, y.shape).astype(np.float32)
        loss = tf.reduce_sum(y * dy)
    dx = tape.gradient(loss, xt)
    put("x", x), put("dy", dy)
    run("head", tmp, B, H, W, C)
    compare("forward y", get("y", y.shape), y.numpy())
    compare("dx", get("dx", x.shape), dx.numpy())


print(f"keras {keras.__version__}, tensorflow {tf.__version__}")
depthwise(2, 8, 8, 16, 1)
depthwise(2, 7, 9, 8, 1)
depthwise(2, 16, 16, 24, 2)
depthwise(2, 7, 8, 8, 2)
batchnorm(4, 5, 6, 32)
batchnorm(3, 2, 2, 7)
head(3, 4, 5, 16)
print("keras layers: " + ("all match" if failures == 0 else f"{failures} FAILED"))
sys.exit(1 if failures else 0)
