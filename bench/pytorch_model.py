#!/usr/bin/python3
"""pytorch_model.py -- the PyTorch baseline for bench/bench_model.c (not a test).

Where it sits: bench/; trains the same two networks as model/ (mnist,
cifar10: same layers, shapes, padding, LRN constants, TensorFlow's
initializers and weight decay) in PyTorch on the CPU, on random in-memory
data, with the same threads and batch, and prints images/sec the way
bench_model does.  bench/run_model_bench.sh runs both side by side.
One step = forward + backward + an SGD step (the optimizer runs in ps/ for
Tower, so bench_model times forward + backward only; --no_step times
PyTorch the same way).

Run it with Debian's python (/usr/bin/python3, which has python3-torch).
Debian's torch does its matrix products in the system BLAS (OpenBLAS, via
libblas.so.3); OpenBLAS 0.3.21 does not recognise newer CPUs and falls back
to slower kernels, so this script sets OPENBLAS_CORETYPE (SkylakeX by
default, overriding whatever the environment holds: some machines export
one) and OPENBLAS_NUM_THREADS before torch loads, and prints which BLAS and
core type torch actually got.  Convolutions go through oneDNN (mkldnn)
inside torch.
"""
import argparse
import os
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="all", choices=["mnist", "cifar10", "all"])
    p.add_argument("--batch", type=int, default=0, help="0 = 64 and 128")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=20, help="timed steps (median reported)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no_step", action="store_true", help="time forward+backward only, no optimizer step")
    p.add_argument("--check", action="store_true", help="check the LRN and pooling equivalences, then exit")
    p.add_argument("--openblas_coretype", default="SkylakeX",
                   help="OPENBLAS_CORETYPE for torch's OpenBLAS; '' leaves the environment's value")
    return p.parse_args()


args = parse_args()
# Before torch is imported: OpenBLAS reads these when it loads.
if args.openblas_coretype:
    os.environ["OPENBLAS_CORETYPE"] = args.openblas_coretype
os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
os.environ["OMP_NUM_THREADS"] = str(args.threads)

import ctypes  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def blas_report():
    """Which BLAS libraries torch loaded, and OpenBLAS's core type."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "blas" in path or "dnnl" in path or "mkl" in path:
                libs.add(path)
    core = "n/a"
    for path in sorted(libs):
        if "openblas" in path:
            try:
                core = ctypes.CDLL(path).openblas_get_corename
                core.restype = ctypes.c_char_p
                core = core().decode()
            except (OSError, AttributeError):
                pass
    return sorted(libs), core


def same_pool(k, s, size):
    """TensorFlow's SAME max pool as a PyTorch call, for input size `size`:
    out = ceil(size / s); pad_total = max((out - 1) * s + k - size, 0), the
    extra cell after.  Returns a function of x."""
    out = -(-size // s)
    pad_total = max((out - 1) * s + k - size, 0)
    before, after = pad_total // 2, pad_total - pad_total // 2
    if before == 0:
        # Only trailing padding: ceil_mode lets the last window hang over the end.
        fn = lambda x: F.max_pool2d(x, k, s, padding=0, ceil_mode=True)  # noqa: E731
        if (size - k + s - 1) // s + 1 != out and size >= k:
            raise ValueError("ceil_mode does not reproduce TF SAME for size %d" % size)
        return fn, out
    if before == after:
        return (lambda x: F.max_pool2d(x, k, s, padding=before)), out
    # General case: pad explicitly with -inf (padded cells never win).
    return (lambda x: F.max_pool2d(F.pad(x, (before, after, before, after), value=-math.inf), k, s)), out


def tf_lrn():
    """TF's lrn(depth_radius=4, bias=1, alpha=0.001/9, beta=0.75): PyTorch
    divides alpha by the window size, so alpha_torch = alpha_tf * size."""
    size = 2 * 4 + 1
    return nn.LocalResponseNorm(size=size, alpha=(0.001 / 9.0) * size, beta=0.75, k=1.0)


def trunc_normal_(t, std):
    with torch.no_grad():
        nn.init.trunc_normal_(t, mean=0.0, std=std, a=-2 * std, b=2 * std)
    return t


class Net(nn.Module):
    def __init__(self, kind, H, W, C, num_classes=10):
        super().__init__()
        self.kind = kind
        c1, k, self.wd = (32, 2, {}) if kind == "mnist" else (64, 3, {})
        if H != W:
            raise ValueError("square inputs only (the pools are built for one size)")
        self.conv1 = nn.Conv2d(C, c1, 5, padding=2)
        self.pool1, h = same_pool(k, 2, H)
        self.conv2 = nn.Conv2d(c1, 64, 5, padding=2)
        self.pool2, h = same_pool(k, 2, h)
        w = h
        n3, n4 = (1024, 10) if kind == "mnist" else (384, 192)
        self.local3 = nn.Linear(h * w * 64, n3)
        self.local4 = nn.Linear(n3, n4)
        self.softmax_linear = nn.Linear(n4, num_classes)
        if kind == "cifar10":
            self.norm = tf_lrn()
            self.wd = {"local3": 0.004, "local4": 0.004}
        for m, std, b in ((self.conv1, 5e-2, 0.0), (self.conv2, 5e-2, 0.1), (self.local3, 0.04, 0.1),
                          (self.local4, 0.04, 0.1), (self.softmax_linear, 1 / 192.0, 0.0)):
            trunc_normal_(m.weight, std)
            nn.init.constant_(m.bias, b)

    def forward(self, x):
        x = self.pool1(F.relu(self.conv1(x)))
        if self.kind == "cifar10":
            x = self.norm(x)
        x = F.relu(self.conv2(x))
        if self.kind == "cifar10":
            x = self.norm(x)
        x = self.pool2(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.local3(x))
        x = F.relu(self.local4(x))
        return self.softmax_linear(x)

    def loss(self, logits, labels):
        loss = F.cross_entropy(logits, labels)
        for name, wd in self.wd.items():
            loss = loss + wd * 0.5 * getattr(self, name).weight.pow(2).sum()
        return loss


def check():
    """The equivalences the benchmark relies on, against TF's definitions."""
    torch.manual_seed(0)
    x = torch.randn(2, 64, 5, 5) * 3
    y = tf_lrn()(x)
    sq = x.pow(2)
    ref = torch.empty_like(x)
    for d in range(64):
        s = sq[:, max(0, d - 4):min(64, d + 5)].sum(1)
        ref[:, d] = x[:, d] / (1.0 + (0.001 / 9.0) * s).pow(0.75)
    err = (y - ref).abs().max().item()
    print("LRN: PyTorch LocalResponseNorm vs TF formula, max |diff| = %.2e" % err)
    ok = err < 1e-5
    for size in (24, 12, 28, 14, 7, 9):
        for k in (2, 3):
            pool, out = same_pool(k, 2, size)
            z = torch.randn(1, 3, size, size) - 10  # all negative: zero padding would win
            got = pool(z)
            out_ref = -(-size // 2)
            pad = max((out_ref - 1) * 2 + k - size, 0) // 2
            ref = torch.empty(1, 3, out_ref, out_ref)
            for i in range(out_ref):
                for j in range(out_ref):
                    r0, c0 = max(0, i * 2 - pad), max(0, j * 2 - pad)
                    r1, c1 = min(size, i * 2 - pad + k), min(size, j * 2 - pad + k)
                    ref[0, :, i, j] = z[0, :, r0:r1, c0:c1].amax(dim=(1, 2))
            good = got.shape == ref.shape and torch.equal(got, ref)
            print("pool %dx%d/2 SAME on %d: %s" % (k, k, size, "ok" if good else "MISMATCH"))
            ok &= good
    return ok


def bench(kind, B, threads, reps, warmup, step):
    H, W, C = (28, 28, 1) if kind == "mnist" else (24, 24, 3)
    torch.manual_seed(1)
    net = Net(kind, H, W, C)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.rand(B, C, H, W) - 0.5
    labels = torch.randint(0, 10, (B,))
    times = []
    for r in range(warmup + reps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = net.loss(net(x), labels)
        loss.backward()
        if step:
            opt.step()
        dt = time.perf_counter() - t0
        if r >= warmup:
            times.append(dt)
    times.sort()
    med = statistics.median(times)
    print("%-8s batch %4d threads %d: %8.1f img/s (min-max %.1f-%.1f)  %.1f ms/step  [pytorch%s]"
          % (kind, B, threads, B / med, B / times[-1], B / times[0], med * 1e3, "" if step else ", no step"))
    print("RESULT framework=pytorch%s model=%s batch=%d threads=%d img_s=%.1f img_s_min=%.1f img_s_max=%.1f"
          % ("" if step else "_nostep", kind, B, threads, B / med, B / times[-1], B / times[0]))


def main():
    torch.set_num_threads(args.threads)
    if args.check:
        return 0 if check() else 1
    libs, core = blas_report()
    print("torch %s, %d threads; BLAS libraries loaded: %s; OpenBLAS core: %s; mkldnn: %s"
          % (torch.__version__, torch.get_num_threads(), ", ".join(libs) or "none", core,
             torch.backends.mkldnn.is_available()))
    models = ["mnist", "cifar10"] if args.model == "all" else [args.model]
    batches = [args.batch] if args.batch else [64, 128]
    for kind in models:
        for B in batches:
            bench(kind, B, args.threads, args.reps, args.warmup, not args.no_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
