"""torch_models.py -- the Tower models (mnist, cifar10) in PyTorch, for the baselines in bench/.

Where it sits: bench/ only, never part of the tests.  Same layers, shapes, padding, LRN constants,
TensorFlow's initializers and weight decay as model/; imported by pytorch_model.py (speed) and
pytorch_fashion_mnist.py (accuracy).  The caller sets OPENBLAS_CORETYPE and thread counts before
importing torch.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


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
