/* bench_imagefolder.c — the input pipeline on an image folder (io/pipeline_imagefolder.c): images/sec.
 *
 * Where it sits: bench/, a benchmark (not a test).  It opens the pipeline on
 * DIR/<class>/FILE.jpg with --threads workers, no shuffle, decoding each JPEG
 * (at libjpeg's reduced scale unless --full; --max_image_pixels N raises the
 * pipeline's bound on a decoded image, which a full decode of a camera
 * photograph exceeds), resizing it to --size x --size
 * RGB (PIL's bilinear) and converting it to float (AUGMENT_NONE), batches of
 * --batch, for --epochs passes after one warm-up pass (timed from
 * pipeline_open to the last batch), and prints one line:
 *   imagefolder: N images in T s = R images/sec; C CPU s = Q images per CPU second (threads W, ...)
 * (the process's CPU time over the timed passes: on a loaded machine a steadier measure than the
 * wall clock, whose share of the cores depends on the other processes)
 * bench/run_imagefolder_bench.sh runs it beside tf.data's decode_jpeg + resize
 * (bench/tf_imagefolder.py) on the same files.
 * `bench_imagefolder --resize_only H W [--size S] [--channels C] [--repeat N]`
 * times the resampler alone (imagefolder_resize, random H x W x C bytes to
 * S x S, N calls): one line, milliseconds per call.
 * What it does not do: no training, no augmentation beyond the float conversion.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/imagefolder.h"
#include "io/pipeline.h"

static double clock_sec(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* --resize_only: imagefolder_resize on random bytes, n calls. */
static int resize_only(int H, int W, int S, int C, int n) {
    if (H < 1 || W < 1 || S < 1 || C < 1 || C > 16 || n < 1) {
        fprintf(stderr, "bench_imagefolder --resize_only: sizes, --channels (1-16) and --repeat must be positive\n");
        return 2;
    }
    unsigned char *src = malloc((size_t)H * W * C), *dst = malloc((size_t)S * S * C);
    if (!src || !dst) return 1;
    unsigned seed = 12345;
    for (size_t i = 0; i < (size_t)H * W * C; i++) src[i] = (unsigned char)((seed = seed * 1103515245u + 12345u) >> 16);
    unsigned sum = 0;
    const double t0 = clock_sec(CLOCK_MONOTONIC);
    for (int k = 0; k < n; k++) {
        if (imagefolder_resize(dst, S, S, src, H, W, C) != 0) return 1;
        sum += dst[(size_t)k % ((size_t)S * S * C)];
    }
    const double t = clock_sec(CLOCK_MONOTONIC) - t0;
    printf("resize: %d x %d x %d -> %d x %d, %.3f ms per call (%d calls; checksum %u)\n", H, W, C, S, S, 1e3 * t / n, n,
           sum);
    free(src);
    free(dst);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "--resize_only")) {
        int S = 224, C = 3, n = 300;
        for (int i = 4; i + 1 < argc; i += 2) {
            if (!strcmp(argv[i], "--size")) S = atoi(argv[i + 1]);
            else if (!strcmp(argv[i], "--channels")) C = atoi(argv[i + 1]);
            else if (!strcmp(argv[i], "--repeat")) n = atoi(argv[i + 1]);
        }
        return resize_only(atoi(argv[2]), atoi(argv[3]), S, C, n);
    }
    const char *dir = NULL;
    int threads = 2, size = 224, batch = 64, epochs = 2, full = 0;
    long max_pixels = 0; /* 0: the pipeline's default */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--max_image_pixels") && i + 1 < argc) max_pixels = atol(argv[++i]);
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else {
            fprintf(stderr, "usage: bench_imagefolder DIR [--threads N] [--size S] [--batch B] [--epochs E] [--full] [--max_image_pixels N]\n");
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: bench_imagefolder DIR [--threads N] [--size S] [--batch B] [--epochs E] [--full] [--max_image_pixels N]\n");
        return 2;
    }
    PipelineConfig c;
    pipeline_config_defaults(&c);
    c.image_dir = dir;
    c.in_H = c.in_W = c.out_H = c.out_W = size;
    c.in_C = 3;
    c.num_classes = 1000;
    c.augment = AUGMENT_NONE;
    c.shard_sizes[0] = batch;
    c.shuffle = 0;
    c.n_workers = threads;
    c.drop_remainder = 0;
    c.jpeg_scaled = !full;
    if (max_pixels > 0) c.max_image_pixels = (size_t)max_pixels;
    char err[1024];
    double t0 = 0.0, cpu0 = 0.0, checksum = 0.0;
    long n = 0;
    PipelineStats st;
    /* one warm-up pass (page cache, allocator), then the timed passes from pipeline_open to the last batch */
    for (int timed = 0; timed < 2; timed++) {
        c.num_epochs = timed ? epochs : 1;
        if (timed) {
            t0 = clock_sec(CLOCK_MONOTONIC);
            cpu0 = clock_sec(CLOCK_PROCESS_CPUTIME_ID);
        }
        Pipeline *p = pipeline_open(&c, err, sizeof err);
        if (!p) {
            fprintf(stderr, "bench_imagefolder: %s\n", err);
            return 1;
        }
        for (;;) {
            PipelineBatch *b;
            int got = pipeline_next(p, &b, err, sizeof err);
            if (got < 0) {
                fprintf(stderr, "bench_imagefolder: %s\n", err);
                pipeline_close(p);
                return 1;
            }
            if (got == 0) break;
            if (timed) n += b->n;
            checksum += b->x[0];
            pipeline_release(p, b);
        }
        pipeline_stats(p, &st);
        pipeline_close(p);
    }
    double t = clock_sec(CLOCK_MONOTONIC) - t0, cpu = clock_sec(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    printf("imagefolder: %ld images in %.3f s = %.1f images/sec; %.3f CPU s = %.1f images per CPU second (threads %d, "
           "size %d, %s, scaled %ld of %ld decodes; checksum %.0f)\n", n, t, n / t, cpu, n / cpu, threads, size,
           full ? "full decode" : "scaled decode", st.images_scaled, st.images_decoded, checksum);
    return 0;
}
