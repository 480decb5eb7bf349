/* test_accum_resume.c — --accum_steps in the checkpoint (RunState.accum_steps)
 * and --resume with the same or another accumulation (train/trainer.c's
 * resume; docs/ps.md "Checkpoints").
 *
 * mnist, 2 towers of micro-batches of 2, synthetic data, a train_dir in /tmp:
 *
 *   1. 2 steps of K = 3, saved: the checkpoint records accum_steps 3 and 2
 *      steps x 2 towers x 3 x 2 = 24 examples consumed (ckpt_read);
 *   2. --resume with K = 3 and 1 step: bitwise the straight 3 steps
 *      (variables and moving averages), no note on stderr;
 *   3. --resume with K = 1: one note on stderr naming the saved
 *      accum_steps 3 and the new 1, the run goes on from the saved count
 *      (examples_consumed 24 after the open, what the pipeline skips), 1
 *      step adds 2 x 2 = 4 (28), and its checkpoint records accum_steps 1;
 *   4. a file without the field (what a writer older than it wrote: proto3
 *      writes no field whose value is 0, and ckpt_save with accum_steps 0
 *      writes exactly that) reads as accum_steps 1; --resume with K = 1 from
 *      it gives no note, with K = 3 the note;
 *   5. --shard_sizes in the checkpoint (RunState.shard_sizes): unequal 3,1
 *      records batch 3 and the list; --resume with 3,1 gives no note, with
 *      1,3 or --batch_size 2 the note names "shards 3,1"; equal 2,2 records
 *      batch 2 and no list, and --resume with --batch_size 2 (no
 *      --shard_sizes) gives no note (the flag's unused default was written
 *      before: a false note here, none for 3,1 -> 1,3);
 *   6. an epoch-based schedule carries over a resume with another step
 *      size (docs/ps.md "Checkpoints"): piecewise 0.1 until epoch 2 of 16
 *      examples, 4 steps of 4 (one epoch), --resume with steps of 8: the
 *      next 2 steps (the second epoch) at 0.1, then 0.01 (before: 0.01 at
 *      once, the schedule read at step 4 in steps of 8); the same run
 *      resumed with its own step size runs steps 4-7 at 0.1 (offset 0).
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/checkpoint.h"
#include "tests/modes_common.h"

#define B 2
#define N_TOWERS 2

static int failures = 0;

static void check(int ok, const char *what) {
    printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

static void options(TrainerOptions *o, const char *dir, int accum_steps, int resume) {
    modes_base_options(o, "mnist", "cpu", N_TOWERS, B);
    o->accum_steps = accum_steps;
    o->train_dir = dir;
    o->resume = resume;
}

/* trainer_open with stderr caught in note (note_n_bytes, NUL-terminated); exits 1 when it fails. */
static Trainer *open_catching_stderr(const TrainerOptions *o, char *note, size_t note_n_bytes) {
    char path[] = "/tmp/test_accum_resume_stderr.XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    fflush(stderr);
    const int saved = dup(2);
    dup2(fd, 2);
    Trainer *tr = modes_open_or_die(o);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    const ssize_t n = pread(fd, note, note_n_bytes - 1, 0);
    note[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return tr;
}

static void save_or_die(Trainer *tr) {
    char err[1024];
    if (trainer_save(tr, err, sizeof err) != 0) {
        fprintf(stderr, "trainer_save: %s\n", err);
        exit(1);
    }
}

/* The run state of the latest checkpoint in dir (exits 1 when there is none). */
static CkptRunState latest_run(const char *dir) {
    char path[4096], err[1024];
    CkptContents ck;
    if (ckpt_find_latest(dir, path, sizeof path, err, sizeof err) != 1 || ckpt_read(path, &ck, err, sizeof err) != 0) {
        fprintf(stderr, "no readable checkpoint in %s: %s\n", dir, err);
        exit(1);
    }
    const CkptRunState run = ck.run;
    ckpt_contents_free(&ck);
    return run;
}

static void rm_rf(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* trainer_open (stderr caught in note) and trainer_close: what the open says, nothing run. */
static void open_and_close(const TrainerOptions *o, char *note, size_t note_n_bytes) {
    trainer_close(open_catching_stderr(o, note, note_n_bytes), NULL, 0);
}

/* Open, run `steps` steps, save, close (exits 1 when a part fails). */
static void train_and_save(const TrainerOptions *o, int steps) {
    Trainer *tr = modes_open_or_die(o);
    modes_steps_or_die(tr, steps);
    save_or_die(tr);
    trainer_close(tr, NULL, 0);
}

/* dir (a mkdtemp name) removed and made anew, empty; exits 1 when it cannot be. */
static void fresh_dir(char *dir) {
    rm_rf(dir);
    if (!mkdtemp(strcpy(dir, "/tmp/test_accum_resume.XXXXXX"))) {
        perror("mkdtemp");
        exit(1);
    }
}

int main(void) {
    char dir[] = "/tmp/test_accum_resume.XXXXXX", copy[] = "/tmp/test_accum_resume_k3.XXXXXX";
    if (!mkdtemp(dir) || !mkdtemp(copy)) {
        perror("mkdtemp");
        return 1;
    }
    char what[512], note[4096];
    TrainerOptions o;

    /* 1. 2 steps of K = 3, saved. */
    options(&o, dir, 3, 0);
    RunResult straight = modes_run(&o, 3);
    const size_t n_bytes = modes_last_spec().n_params * sizeof(float);
    Trainer *tr = modes_open_or_die(&o);
    modes_steps_or_die(tr, 2);
    save_or_die(tr);
    trainer_close(tr, NULL, 0);
    CkptRunState run = latest_run(dir);
    snprintf(what, sizeof what, "2 steps of 2 towers x 3 micro-batches of 2: the checkpoint records accum_steps %d "
             "(3), %ld examples consumed (24), batch %d (2)", run.accum_steps, run.examples_consumed, run.batch_size);
    check(run.accum_steps == 3 && run.examples_consumed == 24 && run.batch_size == B && run.n_towers == N_TOWERS, what);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "cp -r '%s'/. '%s'/", dir, copy);
    if (system(cmd) != 0) {
        fprintf(stderr, "%s failed\n", cmd);
        return 1;
    }

    /* 2. Resume with the same K: bitwise, no note. */
    options(&o, dir, 3, 1);
    tr = open_catching_stderr(&o, note, sizeof note);
    modes_steps_or_die(tr, 1);
    RunResult resumed = modes_collect(tr);
    trainer_close(tr, NULL, 0);
    check(!memcmp(straight.params, resumed.params, n_bytes) && !memcmp(straight.ema, resumed.ema, n_bytes) &&
              strstr(note, "note:") == NULL,
          "--resume with the same accum_steps 3: 2 steps + checkpoint + 1 step bitwise 3 steps, no note");
    modes_free_result(&resumed);

    /* 3. Resume with K = 1: a note, the input position kept, the new K recorded. */
    options(&o, copy, 1, 1);
    tr = open_catching_stderr(&o, note, sizeof note);
    printf("      (%s)\n", strtok(note, "\n") ? note : "no note");
    const long at_open = tr->examples_consumed;
    modes_steps_or_die(tr, 1);
    const long after = tr->examples_consumed;
    save_or_die(tr);
    trainer_close(tr, NULL, 0);
    run = latest_run(copy);
    snprintf(what, sizeof what, "--resume with accum_steps 1 from 3: a note, examples consumed %ld at the open (24), "
             "%ld after 1 step (28), the new checkpoint records accum_steps %d (1), %ld examples",
             at_open, after, run.accum_steps, run.examples_consumed);
    check(strstr(note, "accum_steps 3") && strstr(note, "continuing with 2, batch 2, 1, 5") && at_open == 24 &&
              after == 28 && run.accum_steps == 1 && run.examples_consumed == 28,
          what);

    /* 4. A file without the field reads as 1. */
    fresh_dir(dir);
    options(&o, dir, 1, 0);
    tr = modes_open_or_die(&o);
    modes_steps_or_die(tr, 1);
    const CkptRunState old = {.seed = (uint64_t)o.seed, .examples_consumed = tr->examples_consumed,
                              .n_towers = N_TOWERS, .batch_size = B, .accum_steps = 0};
    char err[1024];
    if (ckpt_save(dir, tr->ps, &old, 0, err, sizeof err) != 0) {
        fprintf(stderr, "ckpt_save: %s\n", err);
        return 1;
    }
    trainer_close(tr, NULL, 0);
    run = latest_run(dir);
    check(run.accum_steps == 1, "a checkpoint without accum_steps (older files) reads as accum_steps 1");
    options(&o, dir, 1, 1);
    open_and_close(&o, note, sizeof note);
    check(strstr(note, "note:") == NULL, "--resume from it with accum_steps 1: no note");
    options(&o, dir, 3, 1);
    open_and_close(&o, note, sizeof note);
    check(strstr(note, "accum_steps 1") && strstr(note, "continuing with 2, batch 2, 3, 5"),
          "--resume from it with accum_steps 3: the note names accum_steps 1 and 3");

    /* 5. --shard_sizes. */
    fresh_dir(dir);
    options(&o, dir, 1, 0);
    o.shard_sizes = "3,1";
    train_and_save(&o, 1);
    run = latest_run(dir);
    check(run.batch_size == 3 && run.n_shard_sizes == 2 && run.shard_sizes[0] == 3 && run.shard_sizes[1] == 1,
          "--shard_sizes 3,1: the checkpoint records batch 3 and the shards 3,1");
    options(&o, dir, 1, 1);
    o.shard_sizes = "3,1";
    open_and_close(&o, note, sizeof note);
    check(strstr(note, "note:") == NULL, "--resume with --shard_sizes 3,1 from 3,1: no note");
    o.shard_sizes = "1,3";
    open_and_close(&o, note, sizeof note);
    printf("      (%s)\n", strtok(note, "\n") ? note : "no note");
    check(strstr(note, "2 tower(s), shards 3,1, accum_steps 1") && strstr(note, "continuing with 2, shards 1,3, 1, 5"),
          "--resume with --shard_sizes 1,3 from 3,1: the note names both");
    o.shard_sizes = "";
    open_and_close(&o, note, sizeof note);
    check(strstr(note, "shards 3,1") && strstr(note, "continuing with 2, batch 2, 1, 5"),
          "--resume with --batch_size 2 from 3,1: the note names both");
    fresh_dir(dir);
    options(&o, dir, 1, 0);
    o.shard_sizes = "2,2";
    o.batch_size = 128; /* the flag's default, unused under --shard_sizes */
    train_and_save(&o, 1);
    run = latest_run(dir);
    check(run.batch_size == 2 && run.n_shard_sizes == 0, "--shard_sizes 2,2: the checkpoint records batch 2, no list");
    options(&o, dir, 1, 1);
    open_and_close(&o, note, sizeof note);
    check(strstr(note, "note:") == NULL, "--resume with --batch_size 2 from --shard_sizes 2,2: no note");

    /* 6. The schedule's epochs across a resume with another step size. */
    fresh_dir(dir);
    options(&o, dir, 1, 0);
    o.lr_schedule = "piecewise";
    o.piecewise_lr = "0.1;2;0.01";
    o.num_examples_per_epoch = 16;
    o.learning_rate = NAN; /* the schedule's first rate is the initial rate */
    tr = modes_open_or_die(&o);
    modes_steps_or_die(tr, 4);
    save_or_die(tr);
    trainer_close(tr, NULL, 0);
    for (int same = 0; same < 2; same++) {
        options(&o, dir, 1, 1);
        o.lr_schedule = "piecewise";
        o.piecewise_lr = "0.1;2;0.01";
        o.num_examples_per_epoch = 16;
        o.learning_rate = NAN;
        o.batch_size = same ? B : 2 * B;
        tr = open_catching_stderr(&o, note, sizeof note);
        float rates[4];
        for (int s = 0; s < 4; s++) {
            rates[s] = ps_step_lr(tr->ps);
            modes_steps_or_die(tr, 1);
        }
        trainer_close(tr, NULL, 0);
        const int ok = same ? rates[0] == 0.1f && rates[1] == 0.1f && rates[2] == 0.1f && rates[3] == 0.1f
                            : rates[0] == 0.1f && rates[1] == 0.1f && rates[2] == 0.01f && rates[3] == 0.01f;
        snprintf(what, sizeof what, "piecewise 0.1 until epoch 2, 4 steps of 4, --resume with steps of %d: rates %g %g "
                 "%g %g (%s)", same ? 4 : 8, rates[0], rates[1], rates[2], rates[3],
                 same ? "0.1 until the second epoch ends" : "0.1 0.1 0.01 0.01: the second epoch, then 0.01");
        check(ok, what);
    }

    modes_free_result(&straight);
    rm_rf(dir);
    rm_rf(copy);
    printf("%s\n", failures ? "accum_steps in the checkpoint FAILED" : "accum_steps in the checkpoint holds");
    return failures ? 1 : 0;
}
