"""make_fmnist32.py SRC OUT [--folder] — Fashion-MNIST as 32x32 TFRecords (and, with --folder, the same
images as PNG files in an image folder) for the accuracy comparisons with Keras (bench/ only).

Where it sits: bench/; reads the idx files of Debian's dataset-fashion-mnist (SRC, e.g.
/usr/share/datasets/fashion-mnist), pads every 28x28 image with 2 zero pixels on each side (as
LeNet's 32x32 MNIST), and writes OUT/train.tfrecord and OUT/test.tfrecord with Tower's features
(image_raw: uint8 HWC bytes, label, height, width, depth; docs/data.md), so that Tower and Keras
(bench/keras_fmnist.py) train and evaluate on the same bytes.  With --folder it also writes
OUT/folder/{train,test}/<label>/<index>.png (grey 32x32 PNG, lossless: the same pixels as the records;
the class folders "0".."9" sort as the labels), for `tower train --data OUT/folder/train` as seed 000
trains from an image folder.  Needs tensorflow (the
TFRecord writer); what it does not do: resize, augment or shuffle.
"""
import gzip
import os
import struct
import sys

import numpy as np
import tensorflow as tf


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    nd = magic & 0xFF
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * nd).reshape(dims)


def feature_int(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v)]))


src, out = sys.argv[1], sys.argv[2]
folder = "--folder" in sys.argv[3:]
os.makedirs(out, exist_ok=True)
for split, prefix in (("train", "train"), ("test", "t10k")):
    images = read_idx(os.path.join(src, "%s-images-idx3-ubyte.gz" % prefix))
    labels = read_idx(os.path.join(src, "%s-labels-idx1-ubyte.gz" % prefix))
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2)))
    with tf.io.TFRecordWriter(os.path.join(out, split + ".tfrecord")) as w:
        for img, lab in zip(padded, labels):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "label": feature_int(lab), "height": feature_int(32), "width": feature_int(32),
                "depth": feature_int(1)}))
            w.write(ex.SerializeToString())
    print("make_fmnist32: %s: %d images 32x32x1" % (os.path.join(out, split + ".tfrecord"), len(labels)))
    if folder:
        for c in range(10):
            os.makedirs(os.path.join(out, "folder", split, str(c)), exist_ok=True)
        for i, (img, lab) in enumerate(zip(padded, labels)):
            png = tf.io.encode_png(img[:, :, None]).numpy()
            with open(os.path.join(out, "folder", split, str(int(lab)), "%05d.png" % i), "wb") as f:
                f.write(png)
        print("make_fmnist32: %s: %d PNG files" % (os.path.join(out, "folder", split), len(labels)))
