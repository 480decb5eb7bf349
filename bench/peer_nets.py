#!/usr/bin/env python3
"""peer_nets.py -- the peers' training step of resnet20, vgg11, mobilenet_v2, resnet50, mnist and cifar10 for bench/run_nets_bench.sh
and bench/run_mobilenet_bench.sh (not a test).

Where it sits: bench/; times one training step (forward, backward and, without
--no_step, an SGD update) of Tower's resnet20 or vgg11 (model/nets/resnet.c,
model/nets/vgg.c) in PyTorch or Keras, on random in-memory data at a given
input size, batch and thread count, and prints a RESULT line as
bench/bench_model does (Tower's optimizer runs in ps/, so bench_model times
forward + backward, and --no_step times the peers the same way; Keras's step
returns its gradients, else TensorFlow prunes the unused backward pass).

  --framework keras: tests/interop/keras_arch.py's models (the definitions the
    interop test loads Tower's variables into) or
    tf.keras.applications.MobileNetV2(weights=None), in a tf.function step;
    intra- and inter-op threads set to --threads.
  --framework torch: the same layers as a torch.nn module: resnet20 with
    option-B (1x1 conv + batch norm) shortcuts, conv biases, batch norm eps
    1.001e-5; vgg11 as VGG's configuration A with a --fc_width head;
    mobilenet_v2 with Keras's layout (keras/src/applications/mobilenet_v2.py:
    the stem conv 3x3/2 with Keras's asymmetric zero padding, 17 inverted
    residual blocks, ReLU6, batch norm eps 1e-3 and Keras's momentum 0.999,
    Conv_1 to 1280 x alpha (at least 1280), global average pooling, the dense
    predictions); resnet50 with Keras's layout (keras/src/applications/resnet.py:
    conv1 7x7/2 after a 3-pixel zero pad, max pool 3x3/2 after a 1-pixel pad,
    bottlenecks 3-4-6-3 with the stride on the first 1x1, projection shortcuts,
    conv biases, batch norm eps 1.001e-5); mnist and cifar10 as bench/torch_models.py's Net (the
    tutorials' CNNs, TensorFlow's SAME pools, the LRN constants; mnist's input has 1 channel);
    torchvision is not needed.
    --device cuda (torch only) trains on GPU 0: the data and the model on the
    GPU, cudnn.benchmark on, TF32 off, each timed step ends in a synchronize
    (bench/run_gpu_bench.sh's GPU_BENCH_NETS part, beside tower bench --device gpu).
Run both with scripts/install-peers.sh's python (torch 2.x, tensorflow 2.x).
"""
import argparse
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--framework", choices=["torch", "keras"], required=True)
ap.add_argument("--model", choices=["resnet20", "vgg11", "mobilenet_v2", "resnet50", "mnist", "cifar10"],
                required=True)
ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                help="torch only: cuda trains on GPU 0 (cudnn.benchmark on, TF32 off, as Tower's FP32)")
ap.add_argument("--width", type=float, default=1.0, help="mobilenet_v2's width multiplier (alpha)")
ap.add_argument("--size", type=int, default=32)
ap.add_argument("--fc_width", type=int, default=4096, help="vgg11's fc1/fc2 width")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=10)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--no_step", action="store_true", help="forward + backward only (as bench_model)")
args = ap.parse_args()
CHANNELS = 1 if args.model == "mnist" else 3  # the input's channels


def make_divisible(v, divisor=8):
    """Keras's _make_divisible."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


# (expansion, filters, stride) of Keras's 17 blocks, in order.
BLOCKS = [(1, 16, 1), (6, 24, 2), (6, 24, 1), (6, 32, 2), (6, 32, 1), (6, 32, 1), (6, 64, 2), (6, 64, 1),
          (6, 64, 1), (6, 64, 1), (6, 96, 1), (6, 96, 1), (6, 96, 1), (6, 160, 2), (6, 160, 1), (6, 160, 1),
          (6, 320, 1)]


def mobilenet_torch(H, alpha, classes=10):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def bn(c):
        return nn.BatchNorm2d(c, eps=1e-3, momentum=1e-3)

    class Block(nn.Module):
        def __init__(self, c_in, expansion, filters, stride):
            super().__init__()
            c_out = make_divisible(int(filters * alpha), 8)
            hidden = c_in * expansion
            self.expand = None
            if expansion != 1:
                self.expand = nn.Sequential(nn.Conv2d(c_in, hidden, 1, bias=False), bn(hidden), nn.ReLU6())
            self.stride = stride
            self.dw = nn.Conv2d(hidden, hidden, 3, stride, padding=1 if stride == 1 else 0, groups=hidden, bias=False)
            self.dw_bn = bn(hidden)
            self.project = nn.Sequential(nn.Conv2d(hidden, c_out, 1, bias=False), bn(c_out))
            self.residual = stride == 1 and c_in == c_out
            self.c_out = c_out

        def forward(self, x):
            y = self.expand(x) if self.expand is not None else x
            if self.stride == 2:
                y = F.pad(y, (0, 1, 0, 1) if y.shape[-1] % 2 == 0 else (1, 1, 1, 1))  # Keras's correct_pad
            y = F.relu6(self.dw_bn(self.dw(y)))
            y = self.project(y)
            return x + y if self.residual else y

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            c = make_divisible(32 * alpha, 8)
            self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, bias=False), bn(c), nn.ReLU6())
            blocks = []
            for e, f, s in BLOCKS:
                b = Block(c, e, f, s)
                blocks.append(b)
                c = b.c_out
            self.blocks = nn.Sequential(*blocks)
            last = make_divisible(1280 * alpha, 8) if alpha > 1.0 else 1280
            self.head = nn.Sequential(nn.Conv2d(c, last, 1, bias=False), bn(last), nn.ReLU6())
            self.predictions = nn.Linear(last, classes)

        def forward(self, x):
            x = F.pad(x, (0, 1, 0, 1) if x.shape[-1] % 2 == 0 else (1, 1, 1, 1))
            x = self.head(self.blocks(self.stem(x)))
            return self.predictions(x.mean(dim=(2, 3)))

    return Net()


def resnet50_torch(bn, classes):
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, c_in, filters, stride, project):
            super().__init__()
            self.short = nn.Sequential(nn.Conv2d(c_in, 4 * filters, 1, stride), bn(4 * filters)) if project else None
            self.body = nn.Sequential(nn.Conv2d(c_in, filters, 1, stride), bn(filters), nn.ReLU(),
                                      nn.Conv2d(filters, filters, 3, padding=1), bn(filters), nn.ReLU(),
                                      nn.Conv2d(filters, 4 * filters, 1), bn(4 * filters))
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu((self.short(x) if self.short is not None else x) + self.body(x))

    layers, c = [nn.ZeroPad2d(3), nn.Conv2d(3, 64, 7, 2), bn(64), nn.ReLU(), nn.ZeroPad2d(1), nn.MaxPool2d(3, 2)], 64
    for filters, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(c, filters, stride if i == 0 else 1, i == 0))
            c = 4 * filters
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
    return nn.Sequential(*layers)


def torch_model(name, H, classes=10):
    import torch.nn as nn

    def bn(c):
        return nn.BatchNorm2d(c, eps=1.001e-5, momentum=0.01)

    if name == "mobilenet_v2":
        return mobilenet_torch(H, args.width, classes)
    if name == "vgg11":
        feats, c = [], 3
        for n, f in zip((1, 1, 2, 2, 2), (64, 128, 256, 512, 512)):
            for _ in range(n):
                feats += [nn.Conv2d(c, f, 3, padding=1), nn.ReLU()]
                c = f
            feats.append(nn.MaxPool2d(2, 2))
        side = H // 32
        return nn.Sequential(*feats, nn.Flatten(), nn.Linear(512 * side * side, args.fc_width), nn.ReLU(),
                             nn.Linear(args.fc_width, args.fc_width), nn.ReLU(), nn.Linear(args.fc_width, classes))

    if name == "resnet50":
        return resnet50_torch(bn, classes)
    if name in ("mnist", "cifar10"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import torch_models
        return torch_models.Net(name, H, H, CHANNELS, classes)

    class Block(nn.Module):
        def __init__(self, c_in, filters, stride):
            super().__init__()
            self.short = None
            if stride != 1 or c_in != filters:
                self.short = nn.Sequential(nn.Conv2d(c_in, filters, 1, stride), bn(filters))
            self.body = nn.Sequential(nn.Conv2d(c_in, filters, 3, stride, padding=1), bn(filters), nn.ReLU(),
                                      nn.Conv2d(filters, filters, 3, padding=1), bn(filters))
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu((self.short(x) if self.short is not None else x) + self.body(x))

    class ResNet20(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), bn(16), nn.ReLU())
            blocks, c = [], 16
            for filters, stride1 in ((16, 1), (32, 2), (64, 2)):
                for i in range(3):
                    blocks.append(Block(c, filters, stride1 if i == 0 else 1))
                    c = filters
            self.blocks = nn.Sequential(*blocks)
            self.predictions = nn.Linear(64, classes)

        def forward(self, x):
            return self.predictions(self.blocks(self.stem(x)).mean(dim=(2, 3)))

    return ResNet20()


def bench_torch():
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    dev = torch.device(args.device)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("peer_nets.py: torch %s has no usable CUDA device" % torch.__version__, file=sys.stderr)
            sys.exit(2)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    net = torch_model(args.model, args.size).to(dev)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = (torch.rand(args.batch, CHANNELS, args.size, args.size) - 0.5).to(dev)
    labels = torch.randint(0, 10, (args.batch,)).to(dev)

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize(dev)

    times = []
    for r in range(args.warmup + args.reps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), labels)
        loss.backward()
        if not args.no_step:
            opt.step()
        sync()
        if r >= args.warmup:
            times.append(time.perf_counter() - t0)
    n_params = sum(p.numel() for p in net.parameters()) + sum(b.numel() for n, b in net.named_buffers()
                                                               if "running" in n)
    return times, "torch %s" % torch.__version__, n_params


def bench_keras():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "interop"))
    import keras_arch
    tf.random.set_seed(1)
    if args.model == "mobilenet_v2":
        model = tf.keras.applications.MobileNetV2(input_shape=(args.size, args.size, 3), alpha=args.width,
                                                  weights=None, classes=10, classifier_activation=None)
    elif args.model == "vgg11":
        model = keras_arch.vgg11(args.size, args.fc_width)
    elif args.model == "resnet50":
        model = tf.keras.applications.ResNet50(input_shape=(args.size, args.size, 3), weights=None, classes=10,
                                               classifier_activation=None)
    elif args.model in ("mnist", "cifar10"):
        model = keras_arch.tutorial_cnn(args.model, args.size)
    else:
        model = keras_arch.resnet20(args.size)
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = tf.random.uniform((args.batch, args.size, args.size, CHANNELS), -0.5, 0.5)
    labels = tf.random.uniform((args.batch,), 0, 10, dtype=tf.int32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        if not args.no_step:
            opt.apply_gradients(zip(grads, model.trainable_variables))
        # Return the gradients: a tf.function's unused results are pruned by Grappler, and with
        # --no_step and only the loss returned the whole backward pass would be (forward only).
        return loss, grads

    times = []
    for r in range(args.warmup + args.reps):
        t0 = time.perf_counter()
        step()[0].numpy()
        if r >= args.warmup:
            times.append(time.perf_counter() - t0)
    return times, "tensorflow %s" % tf.__version__, model.count_params()


def main():
    times, version, n_params = bench_torch() if args.framework == "torch" else bench_keras()
    times.sort()
    med = statistics.median(times)
    B = args.batch
    name = args.framework + ("_nostep" if args.no_step else "")
    print("%s %dx%d batch %d threads %d: %.1f img/s (min-max %.1f-%.1f) [%s, %d variables]"
          % (args.model, args.size, args.size, B, args.threads, B / med, B / times[-1], B / times[0], version,
             n_params))
    print("RESULT framework=%s model=%s size=%d batch=%d threads=%d img_s=%.1f img_s_min=%.1f img_s_max=%.1f"
          % (name, args.model, args.size, B, args.threads, B / med, B / times[-1], B / times[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
