/* test_mpi_input_split_helper.c — which records each rank reads under
 * --input_split (train/trainer.c, io/pipeline.h's split_by), run by
 * tests/test_mpi_input_split.sh under `mpirun -np R`:
 *
 *   test_mpi_input_split_helper SPLIT DATA N_RECORDS
 *       Every rank opens the trainer (mnist, 1 tower, batch 1, one epoch,
 *       --input_split SPLIT, TFRecord files DATA) and reads its pipeline to
 *       the end of the epoch, naming each example by a hash of its image
 *       (the test data's images are all different).  Rank 0 prints each
 *       rank's count and checks, over every rank's names:
 *         - none: every rank read all N_RECORDS (each the whole stream);
 *         - files, records: no example was read by two ranks, and together
 *           the ranks read all N_RECORDS (each rank about 1/R of them:
 *           records, N/R rounded either way).
 * Exit 0 when the checks pass, 1 otherwise, 77 when launched by mpirun
 * with several ranks in a build without MPI.
 * Where it sits: tests/, label mpi.  What it does not do: train (the
 * script trains with the split and checks that it learns).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ranks.h"
#include "tests/check.h"
#include "tests/modes_common.h"

static uint64_t hash_image(const float *x, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *b = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    char err[1024];
    if (ranks_init(&argc, &argv, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return strstr(err, "built without MPI") ? 77 : 1;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s none|files|records DATA N_RECORDS\n", argv[0]);
        return 2;
    }
    const int R = ranks_size(), rank = ranks_rank();
    const long n_records = atol(argv[3]);
    TrainerOptions o;
    modes_base_options(&o, "mnist", "cpu", 1, 1);
    o.synthetic = 0;
    o.data = argv[2];
    o.input_split = argv[1];
    o.num_epochs = 1;
    o.min_after_dequeue = 50;
    o.train_dir = "/nonexistent-never-written";
    o.no_checkpoints = 1; /* nothing is saved: trainer_open leaves the train_dir alone */
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    Trainer tr;
    if (trainer_open(&tr, &o, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: trainer_open: %s\n", rank, err);
        ranks_abort(1);
        return 1;
    }
    uint64_t *mine = malloc((size_t)(n_records + 1) * sizeof *mine);
    long n = 0;
    for (;;) {
        PipelineBatch *b;
        const int got = pipeline_next(tr.pipeline, &b, err, sizeof err);
        if (got < 0) {
            fprintf(stderr, "rank %d: pipeline_next: %s\n", rank, err);
            ranks_abort(1);
            return 1;
        }
        if (got == 0) break;
        for (int i = 0; i < b->n && n <= n_records; i++) mine[n++] = hash_image(b->x + (size_t)i * b->example_n_floats, b->example_n_floats);
        pipeline_release(tr.pipeline, b);
    }
    long counts[256];
    CHECK(R <= 256, "at most 256 ranks");
    ranks_allgather(&n, counts, sizeof n);
    long max_n = 0, total = 0;
    for (int r = 0; r < R; r++) {
        max_n = counts[r] > max_n ? counts[r] : max_n;
        total += counts[r];
    }
    uint64_t *pad = calloc((size_t)max_n + 1, sizeof *pad), *all = malloc(((size_t)R * max_n + 1) * sizeof *all);
    memcpy(pad, mine, (size_t)n * sizeof *mine);
    ranks_allgather(pad, all, (size_t)max_n * sizeof *pad);
    if (rank == 0) {
        printf("--input_split %s, %d rank(s):", argv[1], R);
        for (int r = 0; r < R; r++) printf(" rank %d read %ld", r, counts[r]);
        printf(" of %ld records\n", n_records);
        /* every rank's names, then the distinct ones */
        uint64_t *names = malloc(((size_t)total + 1) * sizeof *names);
        long k = 0;
        for (int r = 0; r < R; r++)
            for (long i = 0; i < counts[r]; i++) names[k++] = all[(size_t)r * max_n + i];
        qsort(names, (size_t)k, sizeof *names, cmp_u64);
        long distinct = 0;
        for (long i = 0; i < k; i++) distinct += i == 0 || names[i] != names[i - 1];
        if (!strcmp(argv[1], "none") || R == 1) {
            for (int r = 0; r < R; r++) CHECK(counts[r] == n_records, "rank %d read %ld of %ld", r, counts[r], n_records);
            CHECK(distinct == n_records, "%ld distinct examples, expected %ld", distinct, n_records);
        } else {
            CHECK(total == n_records, "the ranks read %ld examples in all, expected %ld", total, n_records);
            CHECK(distinct == total, "%ld examples were read by more than one rank", total - distinct);
            if (!strcmp(argv[1], "records"))
                for (int r = 0; r < R; r++)
                    CHECK(counts[r] == n_records / R + (r < n_records % R), "rank %d read %ld, expected %ld", r, counts[r],
                          n_records / R + (r < n_records % R));
            printf("disjoint: %ld distinct examples, each read by one rank\n", distinct);
        }
        free(names);
    }
    free(mine);
    free(pad);
    free(all);
    trainer_close(&tr, NULL, 0);
    const int failed = ranks_any(check_failures != 0);
    ranks_finalize();
    return failed ? 1 : 0;
}
