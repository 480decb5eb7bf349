#!/usr/bin/env python3
"""keras_fmnist.py -- the Keras side of the accuracy comparisons on 32x32 Fashion-MNIST (not a test).

Where it sits: bench/; trains resnet20 (tests/interop/keras_arch.py, the definition the interop
test loads Tower's variables into) or tf.keras.applications.MobileNetV2 (weights=None) on
bench/make_fmnist32.py's TFRecords, the same bytes Tower trains on, as seed 000 trains: under
tf.distribute.MirroredStrategy over --replicas logical CPU devices (Tower's towers), the
per-example loss summed over the global batch and divided by it, Adam at --learning_rate, a
shuffle buffer of --shuffle examples, --batch per replica.  After every epoch it prints the test
set's precision @ 1 (evaluation mode: batch norm's moving statistics) and the seconds of training
so far (and every --eval_every steps, to compare with Tower's checkpoints of the same steps), then a
RESULT line.  Run it with scripts/install-peers.sh's python.
Moving averages of the trainable variables as Tower keeps them by default (--moving_average_decay,
TensorFlow's ExponentialMovingAverage with num_updates = the step: decay min(d, (1 + k) / (10 + k)),
updated after each step in cross-replica context); each evaluation prints the precision with the
averages (the trainable variables swapped for their shadows, batch norm's moving statistics their own,
as `tower eval` does) and with the raw variables.  Batch norm's moving statistics start at mean 0,
variance 1 and move by 1 - momentum a step (0.99: resnet20; 0.999: MobileNetV2), so an evaluation
before about 1000 steps (resnet20) reads near chance in both Keras and Tower: compare at later steps.
What it does not do: augment.
"""
import argparse
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True, help="directory with train.tfrecord and test.tfrecord")
ap.add_argument("--model", choices=["resnet20", "mobilenet_v2"], default="resnet20")
ap.add_argument("--epochs", type=int, default=10)
ap.add_argument("--max_steps", type=int, default=0, help="stop after this many steps (0: --epochs only)")
ap.add_argument("--eval_every", type=int, default=0,
                help="also evaluate every this many steps, as Tower's --save_every checkpoints (0: per epoch only)")
ap.add_argument("--batch", type=int, default=64, help="examples per replica")
ap.add_argument("--replicas", type=int, default=2)
ap.add_argument("--learning_rate", type=float, default=0.001)
ap.add_argument("--shuffle", type=int, default=20000)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--moving_average_decay", type=float, default=0.9999,
                help="decay of the trainable variables' moving averages, as Tower's flag (0: none)")
args = ap.parse_args()

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(args.threads)
tf.config.threading.set_inter_op_parallelism_threads(args.threads)
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
tf.random.set_seed(args.seed)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "interop"))
import keras_arch  # noqa: E402

spec = {"image_raw": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}


def parse(rec):
    ex = tf.io.parse_single_example(rec, spec)
    img = tf.reshape(tf.io.decode_raw(ex["image_raw"], tf.uint8), (32, 32, 1))
    return tf.cast(img, tf.float32) / 255.0 - 0.5, ex["label"]  # Tower's scaling for these nets (io/augment.c, augment_mnist_u8)


def dataset(split, shuffle):
    ds = tf.data.TFRecordDataset(os.path.join(args.data, split + ".tfrecord")).map(parse)
    if shuffle:
        ds = ds.shuffle(args.shuffle, seed=args.seed)
    return ds.batch(args.batch * args.replicas, drop_remainder=shuffle).prefetch(2)


strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
global_batch = args.batch * args.replicas
with strategy.scope():
    if args.model == "resnet20":
        model = keras_arch.resnet20(32, channels=1)
    else:
        model = tf.keras.applications.MobileNetV2(input_shape=(32, 32, 1), weights=None, classes=10,
                                                  classifier_activation=None)
    opt = tf.keras.optimizers.Adam(args.learning_rate)
    opt.build(model.trainable_variables)  # slots made here, not lazily inside the replicas' step
    loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    shadows = [tf.Variable(tf.identity(v.value), trainable=False) for v in model.trainable_variables]
    ema_step = tf.Variable(0.0, trainable=False)


@tf.function
def train_step(dist_batch):
    def step(x, y):
        with tf.GradientTape() as tape:
            per_example = loss_obj(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    per_replica = strategy.run(step, args=dist_batch)
    if args.moving_average_decay > 0:
        ema_step.assign_add(1.0)
        d = tf.minimum(args.moving_average_decay, (1.0 + ema_step) / (10.0 + ema_step))
        for s, v in zip(shadows, model.trainable_variables):
            s.assign_sub((s - v.value) * (1.0 - d))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


@tf.function
def predict(x):
    return tf.argmax(model(x, training=False), axis=1)


def evaluate_raw():
    right = total = 0
    for x, y in dataset("test", False):
        right += int(tf.reduce_sum(tf.cast(predict(x) == y, tf.int32)))
        total += int(y.shape[0])
    return right / total


def evaluate():
    """(precision with the moving averages, precision with the raw variables); the first is the second
    without --moving_average_decay."""
    raw = evaluate_raw()
    if args.moving_average_decay <= 0:
        return raw, raw
    saved = [tf.identity(v.value) for v in model.trainable_variables]
    for v, s in zip(model.trainable_variables, shadows):
        v.assign(tf.convert_to_tensor(s))
    averaged = evaluate_raw()
    for v, s in zip(model.trainable_variables, saved):
        v.assign(s)
    return averaged, raw


train_ds = strategy.experimental_distribute_dataset(dataset("train", True))
trained_s, step, precision, raw, done = 0.0, 0, 0.0, 0.0, False
for epoch in range(1, args.epochs + 1):
    t0 = time.perf_counter()
    n, loss_sum = 0, 0.0
    for batch in train_ds:
        loss_sum += float(train_step(batch))
        n += 1
        step += 1
        if n % 100 == 0:
            print("epoch %d step %d: loss %.4f, %.1f examples/sec" %
                  (epoch, step, loss_sum / n, n * global_batch / (time.perf_counter() - t0)), flush=True)
        if args.eval_every and step % args.eval_every == 0:
            trained_s += time.perf_counter() - t0
            precision, raw = evaluate()
            print("step %d (epoch %.2f): precision @ 1 = %.4f (moving averages), %.4f (raw variables), "
                  "%.0f s of training" % (step, step * global_batch / 60000.0, precision, raw, trained_s), flush=True)
            t0 = time.perf_counter()
        if args.max_steps and step >= args.max_steps:
            done = True
            break
    trained_s += time.perf_counter() - t0
    if not (args.eval_every and step % args.eval_every == 0):
        precision, raw = evaluate()
    print("epoch %d: %d steps, mean loss %.4f, precision @ 1 = %.4f (moving averages), %.4f (raw variables), "
          "%.0f s of training" % (epoch, step, loss_sum / max(n, 1), precision, raw, trained_s), flush=True)
    if done:
        break
print("RESULT framework=keras model=%s steps=%d precision=%.4f raw_precision=%.4f train_s=%.0f tensorflow=%s" %
      (args.model, step, precision, raw, trained_s, tf.__version__))
