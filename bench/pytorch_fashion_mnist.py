#!/usr/bin/python3
"""pytorch_fashion_mnist.py -- the PyTorch side of the accuracy comparison (not a test).

Where it sits: bench/; bench/run_accuracy_compare.sh runs it beside `tower
train` + `tower eval` with the same hyperparameters: the mnist model with
TensorFlow's initializers, Nesterov momentum 0.9, learning rate 0.01, global
batch 128, one epoch of Debian's Fashion-MNIST, pixels x / 255 - 0.5, the
training set reshuffled by the seed; then precision @ 1 on the 10,000 test
images.  Prints one line: seed, precision, training seconds, images/sec.
Run it with Debian's python (/usr/bin/python3, which has python3-torch).
"""
import argparse
import os
import sys

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--seed", type=int, default=1)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--batch", type=int, default=128)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
args = p.parse_args()
os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"  # Debian's OpenBLAS 0.3.21 misdetects newer CPUs
os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
os.environ["OMP_NUM_THREADS"] = str(args.threads)

import gzip  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import Net  # noqa: E402


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split):
    images = read_idx(os.path.join(args.data, "%s-images-idx3-ubyte.gz" % split))
    labels = read_idx(os.path.join(args.data, "%s-labels-idx1-ubyte.gz" % split))
    x = torch.from_numpy(images.astype(np.float32) / 255.0 - 0.5).unsqueeze(1)  # (N, 1, 28, 28)
    return x, torch.from_numpy(labels.astype(np.int64))


torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)
x_train, y_train = load("train")
x_test, y_test = load("t10k")
net = Net("mnist", 28, 28, 1)
opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
g = torch.Generator().manual_seed(args.seed)
n = x_train.shape[0]
steps = 0
t0 = time.perf_counter()
for epoch in range(args.epochs):
    order = torch.randperm(n, generator=g)
    for i in range(0, n - args.batch + 1, args.batch):
        idx = order[i:i + args.batch]
        opt.zero_grad(set_to_none=True)
        loss = net.loss(net(x_train[idx]), y_train[idx])
        loss.backward()
        opt.step()
        steps += 1
train_sec = time.perf_counter() - t0
net.eval()
with torch.no_grad():
    correct = sum((net(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum().item()
                  for i in range(0, x_test.shape[0], 1000))
print("pytorch seed %d: precision @ 1 = %.4f; %d steps in %.1f s (%.0f images/sec); torch %s, %d threads"
      % (args.seed, correct / x_test.shape[0], steps, train_sec, steps * args.batch / train_sec,
         torch.__version__, args.threads))
