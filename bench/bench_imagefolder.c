/* bench_imagefolder.c — the input pipeline on an image folder (io/pipeline_imagefolder.c): images/sec.
 *
 * Where it sits: bench/, a benchmark (not a test).  It opens the pipeline on
 * DIR/<class>/FILE.jpg with --threads workers, no shuffle, decoding each JPEG
 * (at libjpeg's reduced scale unless --full; --max_image_pixels N raises the
 * pipeline's bound on a decoded image, which a full decode of a camera
 * photograph exceeds), resizing it to --size x --size
 * RGB (PIL's bilinear; --resize_mode as tower train's, random_crop the
 * training crop) and converting it to float (AUGMENT_NONE), batches of
 * --batch, for --epochs passes after one warm-up pass (timed from
 * pipeline_open to the last batch), and prints one line:
 *   imagefolder: N images in T s = R images/sec; C CPU s = Q images per CPU second (threads W, ...)
 * (the process's CPU time over the timed passes: on a loaded machine a steadier measure than the
 * wall clock, whose share of the cores depends on the other processes)
 * bench/run_imagefolder_bench.sh runs it beside tf.data's decode_jpeg + resize
 * (bench/tf_imagefolder.py) on the same files.
 * `--records`: DIR is instead a comma list of globs of TFRecord files of
 * encoded images (image/encoded, image/class/label, as build_imagenet_data.py
 * writes them), read by the encoded source (io/pipeline_tfrecord.c): the
 * reader streams the records, the workers decode as for a folder; the line
 * starts "records:".
 * `bench_imagefolder --resize_only H W [--size S] [--channels C] [--repeat N]`
 * times the resampler alone (imagefolder_resize, random H x W x C bytes to
 * S x S, N calls): one line, milliseconds per call.
 * What it does not do: no training, no augmentation beyond the float conversion.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/flags.h"
#include "bench/bench_util.h"
#include "io/imagefolder.h"
#include "io/pipeline.h"

static double clock_sec(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* --resize_only: imagefolder_resize on random bytes, n calls. */
static int resize_only(int H, int W, int S, int C, int n) {
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
    int threads = 2, size = 224, batch = 64, epochs = 2, full = 0, resize = 0, channels = 3, repeat = 300, records = 0;
    long max_pixels = 0; /* 0: the pipeline's default */
    const char *resize_mode = "resize";
    const Flag flags[] = {
        {"threads", FLAG_INT, &threads, "decode workers", FLAG_RANGE(1, 256, "[]", NULL)},
        {"size", FLAG_INT, &size, "output height and width", FLAG_RANGE(1, 4096, "[]", NULL)},
        {"batch", FLAG_INT, &batch, "images a batch", FLAG_RANGE(1, 1 << 16, "[]", NULL)},
        {"epochs", FLAG_INT, &epochs, "passes over the folder", FLAG_RANGE(1, 1000, "[]", NULL)},
        {"full", FLAG_BOOL, &full, "decode JPEGs at full size (no reduced-scale decoding)"},
        {"resize_mode", FLAG_STRING, &resize_mode, "resize, center_crop or random_crop (the training crop)"},
        {"max_image_pixels", FLAG_LONG, &max_pixels, "the decoded image's bound", FLAG_RANGE(0, INFINITY, "[)", "0: the pipeline's default")},
        {"records", FLAG_BOOL, &records, "DIR is TFRecord files of encoded images (globs): image/encoded, image/class/label"},
        {"resize_only", FLAG_BOOL, &resize, "instead: time the resize alone, of a random H x W image (the two arguments) to --size"},
        {"channels", FLAG_INT, &channels, "--resize_only: channels of the image", FLAG_RANGE(1, 16, "[]", NULL)},
        {"repeat", FLAG_INT, &repeat, "--resize_only: calls timed", FLAG_RANGE(1, 1000000, "[]", NULL)},
    };
    const int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *pos[argc > 0 ? argc : 1];
    int n_pos = 0;
    const int done = bench_parse_flags("bench_imagefolder", "DIR [flags] | --resize_only H W [--size S] [--channels C] "
                                       "[--repeat N]", flags, n_flags, argc, argv, pos, &n_pos, 2);
    if (done >= 0) return done;
    if (resize) {
        char *end_h, *end_w;
        const long H = n_pos == 2 ? strtol(pos[0], &end_h, 10) : 0, W = n_pos == 2 ? strtol(pos[1], &end_w, 10) : 0;
        if (n_pos != 2 || *end_h || *end_w || H < 1 || W < 1 || H > 16384 || W > 16384) {
            fprintf(stderr, "bench_imagefolder: --resize_only takes H and W, each in [1, 16384] (see --help)\n");
            return 2;
        }
        return resize_only((int)H, (int)W, size, channels, repeat);
    }
    if (n_pos != 1) {
        fprintf(stderr, "bench_imagefolder: give one image folder DIR (see --help)\n");
        return 2;
    }
    const char *dir = pos[0];
    const int mode = imagefolder_resize_mode_from_name(resize_mode);
    if (mode < 0) {
        fprintf(stderr, "bench_imagefolder: --resize_mode '%s': expected resize, center_crop or random_crop\n",
                resize_mode);
        return 2;
    }
    PipelineConfig c;
    pipeline_config_defaults(&c);
    char **files = NULL;
    int n_files = 0;
    char err[1024];
    if (records) {
        if (io_expand_globs(dir, &files, &n_files, err, sizeof err) != 0) {
            fprintf(stderr, "bench_imagefolder: %s\n", err);
            return 1;
        }
        c.files = (const char *const *)files;
        c.n_files = n_files;
        c.image_encoded = 1;
        c.image_key = "image/encoded";
        c.label_key = "image/class/label";
    } else {
        c.image_dir = dir;
    }
    c.in_H = c.in_W = c.out_H = c.out_W = size;
    c.in_C = 3;
    c.num_classes = 1000;
    c.augment = AUGMENT_NONE;
    c.shard_sizes[0] = batch;
    c.shuffle = 0;
    c.n_workers = threads;
    c.drop_remainder = 0;
    c.jpeg_scaled = !full;
    c.resize_mode = mode;
    if (max_pixels > 0) c.max_image_pixels = (size_t)max_pixels;
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
    io_free_files(files, n_files);
    printf("%s: %ld images in %.3f s = %.1f images/sec; %.3f CPU s = %.1f images per CPU second (threads %d, "
           "size %d, %s, %s, scaled %ld of %ld decodes; checksum %.0f)\n", records ? "records" : "imagefolder", n, t, n / t, cpu, n / cpu, threads, size,
           resize_mode, full ? "full decode" : "scaled decode", st.images_scaled, st.images_decoded, checksum);
    return 0;
}
