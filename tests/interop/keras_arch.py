"""keras_arch.py — Tower's vgg11, resnet20, mnist and cifar10 built from Keras's layer classes with
Tower's layer names, for the networks tf.keras.applications does not have.

Where it sits: tests/interop/; imported by keras_nets.py (the interop test that loads Tower's
variables into these models by name) and by bench/peer_nets.py and bench/keras_resnet20_fmnist.py
(the Keras side of the speed and accuracy comparisons), so that all three use one definition.
vgg11 is VGG's configuration A with Keras's VGG16 naming; resnet20 is the CIFAR ResNet of He et
al. with option-B shortcuts, Conv2D's default bias and BatchNormalization(epsilon=1.001e-5) as
keras/src/applications/resnet.py; mnist and cifar10 are the TensorFlow tutorials' CNNs (model/nets/
mnist.c, cifar10.c: 5x5 convolutions, SAME max pools 2x2 or 3x3 at stride 2, cifar10's local
response normalisation with the tutorial's constants, the dense layers), without their weight
decay.  What it does not do: load weights, train, or compare.
"""
from keras import layers
import keras


def vgg11(H, fc_width=4096, classes=10, channels=3):
    inp = keras.Input((H, H, channels))
    x = inp
    for b, (n, f) in enumerate(zip((1, 1, 2, 2, 2), (64, 128, 256, 512, 512))):
        for i in range(n):
            x = layers.Conv2D(f, (3, 3), activation="relu", padding="same", name="block%d_conv%d" % (b + 1, i + 1))(x)
        x = layers.MaxPooling2D((2, 2), strides=(2, 2), name="block%d_pool" % (b + 1))(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(fc_width, activation="relu", name="fc1")(x)
    x = layers.Dense(fc_width, activation="relu", name="fc2")(x)
    x = layers.Dense(classes, name="predictions")(x)
    return keras.Model(inp, x, name="vgg11")


def resnet20(H, classes=10, channels=3):
    bn = lambda name: layers.BatchNormalization(axis=3, epsilon=1.001e-5, name=name)
    inp = keras.Input((H, H, channels))
    x = layers.Conv2D(16, 3, padding="same", name="conv1_conv")(inp)
    x = bn("conv1_bn")(x)
    x = layers.Activation("relu", name="conv1_relu")(x)
    for s, (filters, stride1) in enumerate(((16, 1), (32, 2), (64, 2))):
        for i in range(3):
            name = "conv%d_block%d" % (s + 2, i + 1)
            stride = stride1 if i == 0 else 1
            if stride != 1 or x.shape[-1] != filters:
                shortcut = layers.Conv2D(filters, 1, strides=stride, name=name + "_0_conv")(x)
                shortcut = bn(name + "_0_bn")(shortcut)
            else:
                shortcut = x
            y = layers.Conv2D(filters, 3, strides=stride, padding="same", name=name + "_1_conv")(x)
            y = bn(name + "_1_bn")(y)
            y = layers.Activation("relu", name=name + "_1_relu")(y)
            y = layers.Conv2D(filters, 3, padding="same", name=name + "_2_conv")(y)
            y = bn(name + "_2_bn")(y)
            x = layers.Add(name=name + "_add")([shortcut, y])
            x = layers.Activation("relu", name=name + "_out")(x)
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    x = layers.Dense(classes, name="predictions")(x)
    return keras.Model(inp, x, name="resnet20")


def tutorial_cnn(kind, H, classes=10, channels=None):
    """The TensorFlow tutorials' mnist (28x28x1: conv 32, pool 2x2, conv 64, pool, dense 1024, 10) or
    cifar10 (24x24x3: conv 64, pool 3x3, LRN, conv 64, LRN, pool, dense 384, 192) network, then
    softmax_linear."""
    import tensorflow as tf
    mnist = kind == "mnist"
    channels = channels or (1 if mnist else 3)
    k = 2 if mnist else 3
    lrn = lambda name: layers.Lambda(lambda t: tf.nn.local_response_normalization(
        t, depth_radius=4, bias=1.0, alpha=0.001 / 9.0, beta=0.75), name=name)
    inp = keras.Input((H, H, channels))
    x = layers.Conv2D(32 if mnist else 64, 5, padding="same", activation="relu", name="conv1")(inp)
    x = layers.MaxPooling2D(k, strides=2, padding="same", name="pool1")(x)
    if not mnist:
        x = lrn("norm1")(x)
    x = layers.Conv2D(64, 5, padding="same", activation="relu", name="conv2")(x)
    if not mnist:
        x = lrn("norm2")(x)
    x = layers.MaxPooling2D(k, strides=2, padding="same", name="pool2")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(1024 if mnist else 384, activation="relu", name="local3")(x)
    x = layers.Dense(10 if mnist else 192, activation="relu", name="local4")(x)  # mnist's is 10 wide, as Tower's
    x = layers.Dense(classes, name="softmax_linear")(x)
    return keras.Model(inp, x, name=kind)
