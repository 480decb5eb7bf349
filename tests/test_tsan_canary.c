/* test_tsan_canary.c — the ThreadSanitizer build's proof that it can fail.
 *
 * Built only with TOWER_SANITIZE_THREAD (scripts/test-tsan.sh).  Each mode
 * races on purpose, the way a bug in Tower would, and
 * tests/test_tsan_canary.sh expects a "data race" report from each:
 *   pthread  two threads add to one counter with no lock (the towers, the
 *            input pipeline's workers and the trainer are pthreads);
 *   omp      an OpenMP loop whose iterations all add to one shared
 *            volatile sum (the parameter server's and the layers' loops
 *            are OpenMP; with the sum kept in a register and stored once
 *            per thread, 4 of 40 runs under Archer went unreported);
 *   clean    the pthread count with a mutex, and rounds of an OpenMP
 *            loop with a reduction where the calling thread writes the
 *            input before each region and reads the output after it: no
 *            report may appear.  The OpenMP runtime is not instrumented;
 *            a sanitizer that does not see its forks and barriers calls
 *            the later rounds' reads races (a run that reports
 *            everything would pass the first two modes).
 * What it does not do: test Tower's code; the suite under the sanitizer
 * does that.
 */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static long counter;                           /* the pthread modes' shared count */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int use_lock;

static void *add_many(void *arg) {
    (void)arg;
    for (int i = 0; i < 100000; i++) {
        if (use_lock) pthread_mutex_lock(&lock);
        counter++;
        if (use_lock) pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static long run_pthreads(int locked) {
    pthread_t t[2];
    use_lock = locked;
    counter = 0;
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, add_many, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return counter;
}

enum { N = 100000 };
static double x[N], y[N]; /* (N) the OpenMP modes' input and output */

static double run_omp_clean(void) {
    double total = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) x[i] = round + 1; /* the calling thread writes, then the team reads */
        double sum = 0;
#pragma omp parallel for num_threads(2) reduction(+ : sum)
        for (int i = 0; i < N; i++) {
            y[i] = 2 * x[i];
            sum += x[i];
        }
        for (int i = 0; i < N; i++) total += y[i]; /* the team wrote, the calling thread reads */
        total += sum;
    }
    return total;
}

/* The planted OpenMP race: one region whose two threads load and store
 * one shared sum in every iteration (volatile: not kept in a register). */
static double run_omp_race(void) {
    static volatile double racy_sum;
    for (int i = 0; i < N; i++) x[i] = 1.0;
#pragma omp parallel for num_threads(2)
    for (int i = 0; i < N; i++) racy_sum += x[i];
    return racy_sum;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "pthread")) {
        printf("pthread: %ld\n", run_pthreads(0));
    } else if (!strcmp(mode, "omp")) {
        printf("omp: %.0f\n", run_omp_race());
    } else if (!strcmp(mode, "clean")) {
        printf("clean: %ld %.0f\n", run_pthreads(1), run_omp_clean());
    } else {
        fprintf(stderr, "usage: test_tsan_canary pthread|omp|clean\n");
        return 2;
    }
    return 0;
}
