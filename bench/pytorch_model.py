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
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import Net, same_pool, tf_lrn  # noqa: E402  (the networks, shared with the other baselines)


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
