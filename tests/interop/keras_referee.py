"""keras_referee.py — the float64 referee of keras_nets.py and
keras_mobilenet.py for the gradients where Tower and Keras float32 differ
by more than 1e-3 (relative to the layer's largest gradient entry).

At initialisation a deep batch-normalised network amplifies float32
rounding in its gradients, and a ReLU or ReLU6 whose input lies closer to
its kink than either side's rounding flips on one side only: at 64x64
Keras's own float32 gradients of ResNet50 differ from its float64 ones by
about 2% (L2), up to 20% in single layers; MobileNetV2 at 33x33 (width
0.5, batch 4) has a block_16_expand_BN value 1.7e-6 from zero in float64
that Keras float32 puts at 5.4e-6.  So the judge is Keras in float64:
Tower's relative L2 error from it must be at most 3 times Keras's float32
one (or 1e-3), Keras's taken as the largest over its run on the inputs and
n_draws runs on inputs moved by one unit in the last place (one draw of
that noise can be far below its spread: on seed 2028 Keras's error in
ResNet50's conv5_block2_1_conv was 0.000111 unmoved and 0.00116-0.00805
moved, where Tower's was 0.00673; 2026-11-28, AMD Zen 5 with AVX-512).
The draws are correlated (inputs moved alike), so one seed's verdict is a
draw too: the run_*.sh scripts judge it over several seeds."""
import numpy as np
import tensorflow as tf
import keras


def float64_referee(build, keyof, arr, params, grads, x, labels, model, strict_failed, seed, n_draws):
    """build(): the Keras model in the current float type; keyof(layer, w): a
    variable's Tower name; arr(block, name): that variable in a flat block
    (params, grads: Tower's); model: the float32 Keras model with Tower's
    variables; strict_failed: (name, ...) of the gradients over 1e-3.
    Prints one line per gradient the referee fails and a summary; returns
    (failures, worst ratio of Tower's error to its bound).  The float32
    model's non-trainable variables are left as they were."""
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        model64 = build()
        for layer in model64.layers:
            for w in layer.weights:
                w.assign(arr(params, keyof(layer, w)).astype(np.float64))
        with tf.GradientTape() as tape:
            logits64 = model64(tf.constant(x.astype(np.float64)), training=True)
            loss64 = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits64))
        g64 = dict(zip([keyof(l, w) for l in model64.layers for w in l.trainable_weights],
                       [v.numpy() for v in tape.gradient(loss64, model64.trainable_weights)]))
    finally:
        keras.config.set_floatx("float32")
        keras.config.set_dtype_policy("float32")
    rel = lambda a, ref: np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-30)
    keys = [f[0] for f in strict_failed]
    names32 = [keyof(l, w) for l in model.layers for w in l.trainable_weights]
    draws = {key: [] for key in keys}
    rng = np.random.default_rng(seed)
    kept = [w.numpy() for w in model.non_trainable_weights]  # a training-mode call moves the statistics
    for d in range(n_draws + 1):  # draw 0: the inputs as they are
        xm = x if d == 0 else (x * (1 + rng.choice([-1.0, 1.0], x.shape) * 2.0 ** -23)).astype(np.float32)
        with tf.GradientTape() as tape:
            lm = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=model(tf.constant(xm), training=True)))
        gm = dict(zip(names32, [v.numpy() for v in tape.gradient(lm, model.trainable_weights)]))
        for key in keys:
            draws[key].append(rel(gm[key], g64[key]))
    for w, v in zip(model.non_trainable_weights, kept):
        w.assign(v)
    failures, worst_ratio = 0, 0.0
    for key in keys:
        et, ek = rel(arr(grads, key), g64[key]), max(draws[key])
        bound = max(3 * ek, 1e-3)
        worst_ratio = max(worst_ratio, et / bound)
        if et > bound:
            print("  gradient %s: tower %.3g, keras float32 up to %.3g over %d draws from keras float64 (L2) FAIL" %
                  (key, et, ek, len(draws[key])))
            failures += 1
    print("  %d variables above 1e-3 from Keras float32, judged against Keras float64: worst at %.2f of the bound" %
          (len(keys), worst_ratio))
    return failures, worst_ratio
