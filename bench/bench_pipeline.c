/* bench_pipeline.c — input pipeline throughput alone, no training (not a test).
 *
 * Where it sits: bench/; measures io -> shards: TFRecord files on disk (in
 * the page cache after the first pass) through the reader thread, the
 * shuffle buffer and the augment workers into staging buffers, with a
 * consumer that releases each batch at once.  Rows:
 *   cifar10: --cifar_records generated 32x32x3 records (5 files), full
 *            training augmentation (crop 24x24, flip, brightness, contrast,
 *            standardization), shuffle min_after_dequeue 20000, batch 128;
 *            with 1 and --workers workers; uncompressed and GZIP files;
 *            evaluation preprocessing (central crop + standardization); and
 *            no augmentation at all, which shows the reader thread's ceiling.
 *   fashion-mnist: the real training set converted from --fashion_mnist
 *            (Debian's dataset-fashion-mnist), x / 255 - 0.5, shuffle
 *            min_after_dequeue 20000, batch 128.
 * Each run reads --epochs epochs; images/sec = examples delivered / wall
 * time from pipeline_open to the last batch (start-up and shuffle-buffer
 * fill included).  Each row is the median of --reps runs, with min-max.
 * Files go to --dir (default: a fresh directory under $TMPDIR or /tmp),
 * removed at the end.
 */
#include "bench/bench_util.h"
#include "base/flags.h"
#include "io/convert.h"
#include "io/example.h"
#include "io/pipeline.h"
#include "io/tfrecord.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Writes n random 32x32x3 examples round-robin into n_files files PREFIX-i-of-n. */
static int write_cifar_like(const char *prefix, int n_files, long n, int compression) {
    char err[1024], path[4096];
    TfrWriter *w[16];
    for (int f = 0; f < n_files; f++) {
        snprintf(path, sizeof path, "%s-%05d-of-%05d.tfrecord", prefix, f, n_files);
        if (!(w[f] = tfr_writer_open(path, compression, err, sizeof err))) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
    }
    ExampleBuilder b;
    example_builder_init(&b);
    uint8_t img[3072];
    uint64_t s = 88172645463325252ull;
    for (long i = 0; i < n; i++) {
        for (int j = 0; j < 3072; j++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            img[j] = (uint8_t)s;
        }
        example_builder_reset(&b);
        example_add_bytes(&b, "image_raw", img, sizeof img);
        example_add_int64(&b, "label", i % 10);
        example_add_int64(&b, "height", 32);
        example_add_int64(&b, "width", 32);
        example_add_int64(&b, "depth", 3);
        const uint8_t *data;
        size_t dn = example_builder_encode(&b, &data);
        if (tfr_writer_write(w[i % n_files], data, dn, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
    }
    example_builder_free(&b);
    for (int f = 0; f < n_files; f++)
        if (tfr_writer_close(w[f], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return -1;
        }
    return 0;
}

/* One timed run: images/sec, or -1. */
static double run_once(PipelineConfig *c, double *wait_s) {
    char err[1024];
    double t0 = now_s();
    Pipeline *p = pipeline_open(c, err, sizeof err);
    if (!p) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    PipelineBatch *b;
    long total = 0;
    int rc;
    volatile float sink = 0;
    while ((rc = pipeline_next(p, &b, err, sizeof err)) == 1) {
        total += b->n;
        sink += b->x[0];
        pipeline_release(p, b);
    }
    double dt = now_s() - t0;
    PipelineStats st;
    pipeline_stats(p, &st);
    *wait_s = st.consumer_wait_sec;
    pipeline_close(p);
    if (rc < 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return (double)total / dt;
}

static void row(const char *what, PipelineConfig *c, int reps) {
    double r[64], wait = 0;
    int n = 0;
    run_once(c, &wait); /* warm-up: page cache, allocator */
    for (int i = 0; i < reps && i < 64; i++) {
        double v = run_once(c, &wait);
        if (v < 0) return;
        r[n++] = v;
    }
    qsort(r, (size_t)n, sizeof(double), cmp_double);
    printf("| %s | %d | %.0f | %.0f-%.0f |\n", what, c->n_workers, r[n / 2], r[0], r[n - 1]);
    printf("RESULT %s workers=%d median_img_per_s=%.0f min=%.0f max=%.0f\n", what, c->n_workers, r[n / 2], r[0], r[n - 1]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    long cifar_records = 50000;
    int workers = 2, reps = 5, epochs = 2, batch = 128;
    const char *dir = "", *fmnist = "/usr/share/datasets/fashion-mnist";
    const Flag flags[] = {
        {"cifar_records", FLAG_LONG, &cifar_records, "generated CIFAR-sized records", FLAG_RANGE(1, 100000000, "[]", NULL)},
        {"workers", FLAG_INT, &workers, "augment workers for the main rows", FLAG_RANGE(1, 256, "[]", NULL)},
        {"reps", FLAG_INT, &reps, "timed runs per row (median reported)", FLAG_RANGE(1, 64, "[]", NULL)},
        {"epochs", FLAG_INT, &epochs, "epochs per run", FLAG_RANGE(1, 1000, "[]", NULL)},
        {"batch", FLAG_INT, &batch, "global batch", FLAG_RANGE(1, 1 << 20, "[]", NULL)},
        {"dir", FLAG_STRING, &dir, "scratch directory (default: a new one under $TMPDIR or /tmp)"},
        {"fashion_mnist", FLAG_STRING, &fmnist, "directory of Fashion-MNIST's IDX .gz files (\"\" to skip)"},
    };
    int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *pos[argc > 0 ? argc : 1];
    int n_pos = 0;
    const int done = bench_parse_flags("bench_pipeline", "[flags]", flags, n_flags, argc, argv, pos, &n_pos, 0);
    if (done >= 0) return done;
    char scratch[1024];
    int made = 0;
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/tower_bench_pipeline_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(scratch)) {
            perror("mkdtemp");
            return 1;
        }
        made = 1;
    } else {
        snprintf(scratch, sizeof scratch, "%s", dir);
    }
    char prefix[2048], gzprefix[2048], glob[2100], gzglob[2100];
    snprintf(prefix, sizeof prefix, "%s/cifar", scratch);
    snprintf(gzprefix, sizeof gzprefix, "%s/cifargz", scratch);
    snprintf(glob, sizeof glob, "%s-*.tfrecord", prefix);
    snprintf(gzglob, sizeof gzglob, "%s-*.tfrecord", gzprefix);
    printf("generating %ld CIFAR-sized records (uncompressed and gzip) in %s ...\n", cifar_records, scratch);
    if (write_cifar_like(prefix, 5, cifar_records, IO_COMPRESSION_NONE) || write_cifar_like(gzprefix, 5, cifar_records, IO_COMPRESSION_GZIP))
        return 1;
    printf("\n| input | workers | images/sec (median of %d) | min-max |\n|---|---|---|---|\n", reps);
    char err[1024];
    char **files;
    int n_files;
    PipelineConfig c;
    pipeline_config_defaults(&c);
    c.shard_sizes[0] = batch;
    c.num_epochs = epochs;
    c.seed = 1;
    if (io_expand_globs(glob, &files, &n_files, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    c.files = (const char *const *)files;
    c.n_files = n_files;
    char what[256];
    snprintf(what, sizeof what, "cifar10 32x32x3, train augmentation, uncompressed, %ld records x %d epochs", cifar_records, epochs);
    c.n_workers = 1;
    row(what, &c, reps);
    c.n_workers = workers;
    row(what, &c, reps);
    c.augment = AUGMENT_CIFAR_EVAL;
    c.shuffle = 0;
    snprintf(what, sizeof what, "cifar10 32x32x3, eval preprocessing (no shuffle), uncompressed, %ld records x %d epochs", cifar_records, epochs);
    row(what, &c, reps);
    /* The reader thread's ceiling: no crop, no augmentation, shuffled. */
    c.augment = AUGMENT_NONE;
    c.shuffle = 1;
    c.out_H = c.in_H;
    c.out_W = c.in_W;
    snprintf(what, sizeof what, "cifar10 32x32x3, no augmentation (reader ceiling), uncompressed, %ld records x %d epochs", cifar_records, epochs);
    row(what, &c, reps);
    c.out_H = c.out_W = 24;
    io_free_files(files, n_files);
    if (io_expand_globs(gzglob, &files, &n_files, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    c.files = (const char *const *)files;
    c.augment = AUGMENT_CIFAR_TRAIN;
    c.shuffle = 1;
    snprintf(what, sizeof what, "cifar10 32x32x3, train augmentation, GZIP, %ld records x %d epochs", cifar_records, epochs);
    row(what, &c, reps);
    io_free_files(files, n_files);

    if (fmnist[0]) {
        char images[2048], labels[2048], fprefix[2048], fglob[2100];
        snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", fmnist);
        snprintf(labels, sizeof labels, "%s/train-labels-idx1-ubyte.gz", fmnist);
        snprintf(fprefix, sizeof fprefix, "%s/fmnist", scratch);
        snprintf(fglob, sizeof fglob, "%s-*.tfrecord", fprefix);
        ConvertSource *s = convert_open_idx(images, labels, err, sizeof err);
        ConvertConfig cc;
        convert_config_defaults(&cc);
        cc.out_prefix = fprefix;
        cc.num_shards = 4;
        ConvertStats cs;
        if (!s || convert_run(s, &cc, &cs, err, sizeof err) != 0) {
            printf("(Fashion-MNIST skipped: %s)\n", err);
        } else {
            io_expand_globs(fglob, &files, &n_files, err, sizeof err);
            pipeline_config_defaults(&c);
            c.files = (const char *const *)files;
            c.n_files = n_files;
            c.in_H = c.in_W = c.out_H = c.out_W = 28;
            c.in_C = 1;
            c.augment = AUGMENT_MNIST;
            c.shard_sizes[0] = batch;
            c.num_epochs = epochs;
            c.seed = 1;
            snprintf(what, sizeof what, "fashion-mnist 28x28x1 (real, 4 shards), x/255-0.5, uncompressed, %ld records x %d epochs",
                     cs.n_examples, epochs);
            c.n_workers = 1;
            row(what, &c, reps);
            c.n_workers = workers;
            row(what, &c, reps);
            io_free_files(files, n_files);
        }
        if (s) s->close(s);
    }
    if (made) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", scratch);
    }
    return 0;
}
