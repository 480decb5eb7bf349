/* gen_records.c — writes a large synthetic training set of valid
 * tf.train.Examples in TFRecord files (not a test; a data generator).
 *
 * Where it sits: bench/; feeds bench/run_memory_bench.sh and the `memory`
 * ctest (tests/memory_tests.cmake), which train over gigabytes of records to
 * show that `tower train`'s peak memory does not grow with the data set.
 * Each record is what `tower convert` writes: image_raw (H*W*C uint8 bytes,
 * HWC), label (int64 in [0, num_classes)), height, width, depth (int64).
 * Pixels are seeded pseudo-random bytes, labels cycle through the classes;
 * the records are spread round-robin over --num_shards files named
 * <out_dir>/train-%05d-of-%05d.tfrecord (uncompressed).  The same flags
 * give the same bytes.  The file count is fixed by --num_shards, so a data
 * set 10x larger has as many files, each 10x larger.
 * What it does not do: no learnable content (the loss stays near ln 10), no
 * compression, no sharding by class.
 *
 * Usage: gen_records --out_dir DIR --n_mb 2048 [--height 64 --width 64 --depth 3]
 *        (or --num_records N instead of --n_mb).  Prints one line: records,
 *        bytes, files.  Exit 1 with one line on stderr on any error.
 */
#include "base/flags.h"
#include "bench/bench_util.h"
#include "io/example.h"
#include "io/rng.h"
#include "io/tfrecord.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GEN_MAX_SHARDS 256

/* One record's image: n_bytes pseudo-random bytes for record i under seed. */
static void fill_image(uint8_t *img, size_t n_bytes, uint64_t seed, long i) {
    uint64_t s = rng_seed(seed, 0x9e4, (uint64_t)i);
    size_t k = 0;
    for (; k + 8 <= n_bytes; k += 8) {
        uint64_t r = rng_next(&s);
        memcpy(img + k, &r, 8);
    }
    for (uint64_t r = rng_next(&s); k < n_bytes; k++, r >>= 8) img[k] = (uint8_t)r;
}

int main(int argc, char **argv) {
    const char *out_dir = "";
    long n_mb = 0, num_records = 0, seed = 1;
    int height = 64, width = 64, depth = 3, num_classes = 10, num_shards = 8;
    const Flag flags[] = {
        {"out_dir", FLAG_STRING, &out_dir, "directory for the train-*.tfrecord files (created if missing)"},
        {"n_mb", FLAG_LONG, &n_mb, "write records until the files hold at least this many MiB", FLAG_RANGE(0, INFINITY, "[)", "0: --num_records")},
        {"num_records", FLAG_LONG, &num_records, "write exactly this many records (instead of --n_mb)", FLAG_RANGE(0, INFINITY, "[)", "0: --n_mb")},
        {"height", FLAG_INT, &height, "image height", FLAG_RANGE(1, 16384, "[]", NULL)},
        {"width", FLAG_INT, &width, "image width", FLAG_RANGE(1, 16384, "[]", NULL)},
        {"depth", FLAG_INT, &depth, "image channels", FLAG_RANGE(1, 64, "[]", NULL)},
        {"num_classes", FLAG_INT, &num_classes, "labels cycle through [0, num_classes)", FLAG_RANGE(1, 1 << 16, "[]", NULL)},
        {"num_shards", FLAG_INT, &num_shards, "number of files", FLAG_RANGE(1, GEN_MAX_SHARDS, "[]", NULL)},
        {"seed", FLAG_LONG, &seed, "seed of the pixels"},
    };
    const int n_flags = (int)(sizeof flags / sizeof flags[0]);
    char *positional[argc > 0 ? argc : 1];
    int n_positional = 0;
    const int done = bench_parse_flags("gen_records", "--out_dir DIR (--n_mb N | --num_records N) [flags]", flags,
                                       n_flags, argc, argv, positional, &n_positional, 0);
    if (done >= 0) return done;
    if (!out_dir[0] || (n_mb == 0) == (num_records == 0)) {
        fprintf(stderr, "gen_records: need --out_dir and exactly one of --n_mb or --num_records (see --help)\n");
        return 2;
    }
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "gen_records: cannot create %s: %s\n", out_dir, strerror(errno));
        return 1;
    }
    const size_t image_n_bytes = (size_t)height * width * depth;
    uint8_t *img = malloc(image_n_bytes);
    if (!img) {
        fprintf(stderr, "gen_records: out of memory for a %zu-byte image\n", image_n_bytes);
        return 1;
    }
    char err[1024], path[4096];
    TfrWriter *w[GEN_MAX_SHARDS];
    for (int f = 0; f < num_shards; f++) {
        snprintf(path, sizeof path, "%s/train-%05d-of-%05d.tfrecord", out_dir, f, num_shards);
        if (!(w[f] = tfr_writer_open(path, IO_COMPRESSION_NONE, err, sizeof err))) {
            fprintf(stderr, "gen_records: %s\n", err);
            return 1;
        }
    }
    ExampleBuilder b;
    example_builder_init(&b);
    const uint64_t target_n_bytes = (uint64_t)n_mb << 20;
    uint64_t written_n_bytes = 0;
    long n = 0;
    int failed = 0;
    while (!failed && (num_records > 0 ? n < num_records : written_n_bytes < target_n_bytes)) {
        fill_image(img, image_n_bytes, (uint64_t)seed, n);
        example_builder_reset(&b);
        example_add_bytes(&b, "image_raw", img, image_n_bytes);
        example_add_int64(&b, "label", n % num_classes);
        example_add_int64(&b, "height", height);
        example_add_int64(&b, "width", width);
        example_add_int64(&b, "depth", depth);
        const uint8_t *data;
        size_t data_n_bytes = example_builder_encode(&b, &data);
        if (!data_n_bytes || tfr_writer_write(w[n % num_shards], data, data_n_bytes, err, sizeof err) != 0) {
            fprintf(stderr, "gen_records: %s\n", data_n_bytes ? err : "out of memory encoding an Example");
            failed = 1;
            break;
        }
        written_n_bytes += TFR_HEADER_N_BYTES + data_n_bytes + TFR_FOOTER_N_BYTES;
        n++;
    }
    for (int f = 0; f < num_shards; f++) {
        if (tfr_writer_close(w[f], err, sizeof err) != 0 && !failed) {
            fprintf(stderr, "gen_records: %s\n", err);
            failed = 1;
        }
    }
    example_builder_free(&b);
    free(img);
    if (failed) return 1;
    printf("gen_records: %ld records of %dx%dx%d, %llu bytes in %d files under %s\n", n, height, width, depth,
           (unsigned long long)written_n_bytes, num_shards, out_dir);
    return 0;
}
