"""tf_imagefolder.py DIR [--threads N] [--size S] [--batch B] [--epochs E] [--distort] — tf.data's image-folder
input: decode_jpeg + resize (bilinear, float32) in a map with num_parallel_calls=N, batched, its threads limited to N
(private_threadpool_size, inter/intra op); images/sec over E passes after one warm-up pass.  --distort:
tf_cnn_benchmarks' training crop instead (preprocessing.train_image with fuse_decode_and_crop: extract_jpeg_shape,
sample_distorted_bounding_box(min_object_covered 0.1, aspect (0.75, 1.33), area (0.05, 1.0), 100 attempts),
decode_and_crop_jpeg, resize, random_flip_left_right).  --records: DIR is a glob of TFRecord files of encoded images
(image/encoded, image/class/label), read as tf_cnn_benchmarks reads ImageNet: TFRecordDataset (num_parallel_reads N),
parse_single_example, then the same decode map.  --make_records OUT N_FILES: writes DIR's JPEGs as such files
(OUT-0000k-of-0000N, the files' bytes unchanged, in sorted order round robin) and exits.
bench/ only: the comparison for bench_imagefolder (bench/run_imagefolder_bench.sh)."""
import argparse
import glob
import os
import time

p = argparse.ArgumentParser()
p.add_argument("dir")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--size", type=int, default=224)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--distort", action="store_true")
p.add_argument("--records", action="store_true")
p.add_argument("--make_records", nargs=2, metavar=("OUT", "N_FILES"))
a = p.parse_args()

import tensorflow as tf  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(a.threads)
tf.config.threading.set_intra_op_parallelism_threads(a.threads)
files = sorted(glob.glob(os.path.join(a.dir, "*", "*.jpg")))

if a.make_records:
    out, n_out = a.make_records[0], int(a.make_records[1])
    classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    writers = [tf.io.TFRecordWriter("%s-%05d-of-%05d" % (out, k, n_out)) for k in range(n_out)]
    for i, f in enumerate(files):
        with open(f, "rb") as fh:
            data = fh.read()
        ex = tf.train.Example(features=tf.train.Features(feature={
            "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
            "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
            "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                value=[classes.index(os.path.basename(os.path.dirname(f)))]))}))
        writers[i % n_out].write(ex.SerializeToString())
    for w in writers:
        w.close()
    raise SystemExit(0)


def load(path):
    img = tf.io.decode_jpeg(read(path), channels=3)
    return tf.image.resize(img, [a.size, a.size])


def load_distorted(path):
    buf = read(path)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.image.extract_jpeg_shape(buf), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0), max_attempts=100,
        use_image_if_no_bounding_boxes=True)
    window = tf.stack([begin[0], begin[1], size[0], size[1]])
    img = tf.io.decode_and_crop_jpeg(buf, window, channels=3)
    return tf.image.random_flip_left_right(tf.image.resize(img, [a.size, a.size]))


features = {"image/encoded": tf.io.FixedLenFeature([], tf.string), "image/class/label": tf.io.FixedLenFeature([], tf.int64)}


def read(item):  # a file's bytes, or a record's encoded image
    return tf.io.parse_single_example(item, features)["image/encoded"] if a.records else tf.io.read_file(item)


source = (tf.data.TFRecordDataset(sorted(glob.glob(a.dir)), num_parallel_reads=a.threads) if a.records
          else tf.data.Dataset.from_tensor_slices(files))
ds = source.map(load_distorted if a.distort else load, num_parallel_calls=a.threads).batch(a.batch).prefetch(2)
opt = tf.data.Options()
opt.threading.private_threadpool_size = a.threads
ds = ds.with_options(opt)
for _ in ds:  # warm-up pass
    pass
t0 = time.perf_counter()
c0 = time.process_time()
n = 0
for _ in range(a.epochs):
    for b in ds:
        n += int(b.shape[0])
t = time.perf_counter() - t0
c = time.process_time() - c0
print("tf.data: %d images in %.3f s = %.1f images/sec; %.3f CPU s = %.1f images per CPU second (threads %d, size %d)"
      % (n, t, n / t, c, n / c, a.threads, a.size) + (" with the training crop" if a.distort else "")
      + (" from TFRecords" if a.records else ""))
