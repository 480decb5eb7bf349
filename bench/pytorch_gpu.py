#!/usr/bin/env python3
"""pytorch_gpu.py -- the PyTorch baseline for bench/bench_gpu.c (not a test).

Where it sits: bench/; trains the same two networks as model/ (mnist,
cifar10: same layers, shapes, TensorFlow's SAME padding and LRN constants,
TensorFlow's initializers, weight decay in the loss) in PyTorch on one GPU,
on random data already in GPU memory, at the same global batch as N Tower
towers of --batch (N = 1, 2, 4, ...), one step = forward + backward + a
Nesterov momentum step, and prints images/sec the way bench_gpu does
(median over --reps timed runs of --steps steps after --warmup steps).
TF32 is off unless --tf32 (as in Tower); cudnn.benchmark picks the
convolution algorithms.  bench/run_gpu_bench.sh runs both side by side.
Needs a PyTorch built with CUDA; exits 2 with a message otherwise.
"""
import argparse
import math
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="all", choices=["mnist", "cifar10", "all"])
    p.add_argument("--batch", type=int, default=128, help="examples per Tower tower; global batch = batch x towers")
    p.add_argument("--max_towers", type=int, default=4, help="global batches for 1, 2, 4, ... towers up to this")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--tf32", action="store_true", help="allow TF32 in cuDNN and cuBLAS")
    return p.parse_args()


args = parse_args()
try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print("pytorch_gpu.py: cannot import torch (%s)" % e, file=sys.stderr)
    sys.exit(2)
if not torch.cuda.is_available():
    print("pytorch_gpu.py: torch %s has no usable CUDA device" % torch.__version__, file=sys.stderr)
    sys.exit(2)


def same_pool(k, s, size):
    """TensorFlow's SAME max pool for input size `size` (the extra padding
    cell after): ceil_mode when all padding is after, explicit -inf padding
    otherwise.  Returns (function, output size)."""
    out = -(-size // s)
    pad_total = max((out - 1) * s + k - size, 0)
    before, after = pad_total // 2, pad_total - pad_total // 2
    if before == 0:
        return (lambda x: F.max_pool2d(x, k, s, padding=0, ceil_mode=True)), out
    if before == after:
        return (lambda x: F.max_pool2d(x, k, s, padding=before)), out
    return (lambda x: F.max_pool2d(F.pad(x, (before, after, before, after), value=-math.inf), k, s)), out


class Net(nn.Module):
    def __init__(self, kind, size, C, num_classes=10):
        super().__init__()
        self.kind = kind
        c1, k = (32, 2) if kind == "mnist" else (64, 3)
        self.conv1 = nn.Conv2d(C, c1, 5, padding=2)
        self.pool1, h = same_pool(k, 2, size)
        self.conv2 = nn.Conv2d(c1, 64, 5, padding=2)
        self.pool2, h = same_pool(k, 2, h)
        n3, n4 = (1024, 10) if kind == "mnist" else (384, 192)
        self.local3 = nn.Linear(h * h * 64, n3)
        self.local4 = nn.Linear(n3, n4)
        self.softmax_linear = nn.Linear(n4, num_classes)
        self.wd = {}
        if kind == "cifar10":
            # TF's lrn(4, bias=1, alpha=0.001/9, beta=0.75); PyTorch divides alpha by the window.
            self.norm = nn.LocalResponseNorm(size=9, alpha=0.001 / 9.0 * 9, beta=0.75, k=1.0)
            self.wd = {"local3": 0.004, "local4": 0.004}
        for m, std, b in ((self.conv1, 5e-2, 0.0), (self.conv2, 5e-2, 0.1), (self.local3, 0.04, 0.1),
                          (self.local4, 0.04, 0.1), (self.softmax_linear, 1 / 192.0, 0.0)):
            with torch.no_grad():
                nn.init.trunc_normal_(m.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
                nn.init.constant_(m.bias, b)

    def forward(self, x):
        x = self.pool1(F.relu(self.conv1(x)))
        if self.kind == "cifar10":
            x = self.norm(x)
        x = F.relu(self.conv2(x))
        if self.kind == "cifar10":
            x = self.norm(x)
        x = self.pool2(x)
        # Tower flattens NHWC; the order does not change the cost.
        x = torch.flatten(x, 1)
        x = F.relu(self.local3(x))
        x = F.relu(self.local4(x))
        return self.softmax_linear(x)

    def loss(self, logits, labels):
        loss = F.cross_entropy(logits, labels)
        for name, wd in self.wd.items():
            loss = loss + wd * 0.5 * getattr(self, name).weight.pow(2).sum()
        return loss


def bench(kind, towers, dev):
    size, C = (28, 1) if kind == "mnist" else (24, 3)
    B = args.batch * towers
    torch.manual_seed(1)
    net = Net(kind, size, C).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    x = torch.rand(B, C, size, size, device=dev) - 0.5
    labels = torch.randint(0, 10, (B,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = net.loss(net(x), labels)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize(dev)
    rates = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        torch.cuda.synchronize(dev)
        rates.append(B * args.steps / (time.perf_counter() - t0))
    med = statistics.median(rates)
    print("%-8s global batch %4d (= %d x %d): %9.0f img/s (min-max %.0f-%.0f)  step %.2f ms, loss %.3f  [pytorch]"
          % (kind, B, towers, args.batch, med, min(rates), max(rates), 1e3 * B / med, loss.item()))
    print("RESULT framework=pytorch model=%s towers=%d batch=%d img_s=%.1f img_s_min=%.1f img_s_max=%.1f tf32=%d"
          % (kind, towers, args.batch, med, min(rates), max(rates), int(args.tf32)))


def main():
    dev = torch.device("cuda", args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True
    print("# torch %s, CUDA %s, cuDNN %s, %s" % (torch.__version__, torch.version.cuda,
                                                torch.backends.cudnn.version(), torch.cuda.get_device_name(dev)))
    for kind in (["mnist", "cifar10"] if args.model == "all" else [args.model]):
        t = 1
        while t <= args.max_towers:
            bench(kind, t, dev)
            t *= 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
