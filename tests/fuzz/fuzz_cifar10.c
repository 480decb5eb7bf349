/* fuzz_cifar10.c — fuzz target of the CIFAR-10 binary reader of `tower
 * convert --from cifar10` (convert_open_cifar10 in io/convert.h; raw or gzip).
 *
 * Where it sits: tests/fuzz/; offline, before training.  The input is one
 * data_batch_N.bin (records of 1 label byte + 3072 channel-major bytes),
 * raw or gzip-compressed; it goes into two memfds (one file named twice is
 * refused: its examples would be converted twice), both given to the
 * source, so the step from one file to the next runs too.  The source is
 * drained as convert_run would drain it.
 * Invariants: a refusal is one line naming the file and the record; items
 * are 32 x 32 x 3 with labels in [0, 10) and the HWC image is the
 * transpose of the record's CHW bytes (checked against the raw input when
 * it is not compressed); both passes over the file give the same items.
 * What it does not do: no TFRecord writing (see fuzz_idx.c).
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/convert.h"

#define RECORD_N_BYTES 3073

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FuzzFile file, again;
    if (!file.path[0]) fuzz_file_init(&file, "fuzz_cifar10");
    if (!again.path[0]) fuzz_file_init(&again, "fuzz_cifar10_again");
    fuzz_file_set(&file, data, size);
    fuzz_file_set(&again, data, size);
    const char *paths[2] = {file.path, again.path};
    char err[1024];
    ConvertSource *src = convert_open_cifar10(paths, 2, err, sizeof err);
    FUZZ_REQUIRE(src != NULL, "convert_open_cifar10 refused an existing file: %s", err);
    int raw = !(size >= 2 && data[0] == 0x1f && data[1] == 0x8b);
    if (raw) {
        long want = size % RECORD_N_BYTES == 0 ? 2 * (long)(size / RECORD_N_BYTES) : -1;
        FUZZ_REQUIRE(src->n_examples == want, "n_examples %ld for %zu raw bytes", src->n_examples, size);
    }
    long n = 0;
    for (;;) {
        ConvertItem item;
        int rc = src->next(src, &item, err, sizeof err);
        if (rc == 0) {
            FUZZ_REQUIRE(src->next(src, &item, err, sizeof err) == 0, "a call after the end did not return 0");
            break;
        }
        if (rc < 0) {
            char prefix[128];
            const int second = !strncmp(err, again.path, strlen(again.path)) && err[strlen(again.path)] == ':';
            snprintf(prefix, sizeof prefix, "%s: record ", second ? again.path : file.path);
            fuzz_require_line(err, prefix, "cifar10 next");
            FUZZ_REQUIRE(strstr(err, " at offset "), "cifar10 next: message \"%s\" gives no offset", err);
            break;
        }
        FUZZ_REQUIRE(rc == 1 && item.H == 32 && item.W == 32 && item.C == 3 && item.image, "item %ld: rc %d, %d x %d x %d", n, rc,
                     item.H, item.W, item.C);
        FUZZ_REQUIRE(item.label >= 0 && item.label < 10, "label %lld", (long long)item.label);
        if (raw) {
            size_t rec = (size_t)n % (size / RECORD_N_BYTES ? size / RECORD_N_BYTES : 1);
            const uint8_t *r = data + rec * RECORD_N_BYTES;
            FUZZ_REQUIRE(r[0] == item.label, "item %ld: label %lld, the record says %d", n, (long long)item.label, r[0]);
            for (int i = 0; i < 1024; i++)
                for (int c = 0; c < 3; c++)
                    FUZZ_REQUIRE(item.image[i * 3 + c] == r[1 + c * 1024 + i], "item %ld: pixel %d channel %d differs from the record",
                                 n, i, c);
        }
        n++;
    }
    src->close(src);
    return 0;
}
