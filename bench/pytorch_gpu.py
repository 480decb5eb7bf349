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
import os
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
except ImportError as e:
    print("pytorch_gpu.py: cannot import torch (%s)" % e, file=sys.stderr)
    sys.exit(2)
if not torch.cuda.is_available():
    print("pytorch_gpu.py: torch %s has no usable CUDA device" % torch.__version__, file=sys.stderr)
    sys.exit(2)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import Net  # noqa: E402  (the same networks as model/, shared with the CPU baselines)


def bench(kind, towers, dev):
    size, C = (28, 1) if kind == "mnist" else (24, 3)
    B = args.batch * towers
    torch.manual_seed(1)
    net = Net(kind, size, size, C).to(dev)
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
