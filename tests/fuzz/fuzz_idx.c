/* fuzz_idx.c — fuzz target of the IDX reader of `tower convert --from idx`
 * (convert_open_idx in io/convert.h: MNIST, Fashion-MNIST; raw or gzip).
 *
 * Where it sits: tests/fuzz/; offline, before training.  The input holds
 * both files of a data set: a 2-byte little-endian length L, then L bytes
 * of the labels file, then the images file (scripts/fuzz-corpus.sh packs
 * real pairs that way with fuzz_seed_tool pack-idx).  Each goes into a
 * memfd; the source is opened and drained as convert_run would drain it.
 * Invariants: a refusal is one line naming a file; an accepted header (of a
 * raw images file) announces images of at most CONVERT_MAX_IMAGE_N_BYTES,
 * the buffer allocated before any pixel is read; every item has the shape
 * of the first and a label below 256; no more items than the header
 * announces; after the end the source keeps returning 0.
 * What it does not do: no TFRecord writing (convert_run's writer loop
 * only re-encodes what the source hands it; fuzz_tfrecord.c reads TFRecords).
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/convert.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FuzzFile images, labels;
    if (!images.path[0]) {
        fuzz_file_init(&images, "fuzz_idx_images");
        fuzz_file_init(&labels, "fuzz_idx_labels");
    }
    size_t n_labels = size >= 2 ? (size_t)data[0] | (size_t)data[1] << 8 : 0;
    const uint8_t *rest = size >= 2 ? data + 2 : data;
    size_t rest_n = size >= 2 ? size - 2 : size;
    if (n_labels > rest_n) n_labels = rest_n;
    fuzz_file_set(&labels, rest, n_labels);
    fuzz_file_set(&images, rest + n_labels, rest_n - n_labels);

    char err[1024];
    ConvertSource *src = convert_open_idx(images.path, labels.path, err, sizeof err);
    if (!src) {
        if (strncmp(err, labels.path, strlen(labels.path)) == 0) fuzz_require_line(err, labels.path, "convert_open_idx");
        else fuzz_require_line(err, images.path, "convert_open_idx");
        return 0;
    }
    FUZZ_REQUIRE(!strcmp(src->format, "idx") && src->n_examples >= 0, "format %s, %ld examples", src->format, src->n_examples);
    /* The image buffer is allocated from the header: an accepted raw header
     * announces at most CONVERT_MAX_IMAGE_N_BYTES per image. */
    const uint8_t *im = rest + n_labels;
    size_t im_n = rest_n - n_labels;
    if (im_n >= 16 && !(im[0] == 0x1f && im[1] == 0x8b)) {
        uint64_t n_bytes = 1;
        for (int d = 1; d < im[3] && 4 + 4 * d + 4 <= (int)im_n; d++)
            n_bytes *= (uint64_t)im[4 + 4 * d] << 24 | (uint64_t)im[5 + 4 * d] << 16 | (uint64_t)im[6 + 4 * d] << 8 | im[7 + 4 * d];
        FUZZ_REQUIRE(n_bytes <= CONVERT_MAX_IMAGE_N_BYTES, "convert_open_idx accepted images of %llu bytes each",
                     (unsigned long long)n_bytes);
    }
    long n = 0;
    int H = 0, W = 0, C = 0;
    for (;;) {
        ConvertItem item;
        int rc = src->next(src, &item, err, sizeof err);
        if (rc == 0) {
            FUZZ_REQUIRE(n == src->n_examples, "the source ended after %ld of %ld examples", n, src->n_examples);
            FUZZ_REQUIRE(src->next(src, &item, err, sizeof err) == 0, "a call after the end did not return 0");
            break;
        }
        if (rc < 0) {
            if (strncmp(err, labels.path, strlen(labels.path)) == 0) fuzz_require_line(err, labels.path, "idx next");
            else fuzz_require_line(err, images.path, "idx next");
            FUZZ_REQUIRE(strstr(err, ": record ") && strstr(err, " at offset "), "idx next: message \"%s\" names no record", err);
            break;
        }
        FUZZ_REQUIRE(rc == 1 && n < src->n_examples, "item %ld of %ld (rc %d)", n, src->n_examples, rc);
        if (n == 0) {
            H = item.H;
            W = item.W;
            C = item.C;
            FUZZ_REQUIRE(H >= 1 && W >= 1 && C >= 1, "item of %d x %d x %d", H, W, C);
        }
        FUZZ_REQUIRE(item.H == H && item.W == W && item.C == C && item.image, "item %ld of %d x %d x %d after %d x %d x %d", n,
                     item.H, item.W, item.C, H, W, C);
        FUZZ_REQUIRE(item.label >= 0 && item.label < 256, "label %lld", (long long)item.label);
        volatile unsigned sink = 0;
        size_t n_bytes = (size_t)H * W * C;
        for (size_t i = 0; i < n_bytes; i++) sink += item.image[i];
        (void)sink;
        n++;
    }
    src->close(src);
    return 0;
}
