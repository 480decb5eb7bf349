/* cmd_bench.c — `tower bench`: the variable placement modes side by side.
 *
 * Where it sits: cmd/; it only wires.  For every model x mode x tower count
 * of the matrix it opens a Trainer (train/trainer.h) on synthetic data held in
 * memory (or --data), on the towers --device picks, runs --warmup steps, then --steps timed steps, and
 * reports what trainer_step recorded: images/sec, the step time's median and
 * spread, the speedup over one tower and the per-phase breakdown (input,
 * copies, forward+backward, gradient reduction, apply).  With --repeat R the
 * whole matrix runs R times, configurations interleaved so that a burst of
 * other work on the machine hits different ones, and each row is the run
 * with the median images/sec, with the range over the R runs beside it.  It writes the table
 * as CSV and an SVG chart (images/sec at the median step against towers, a
 * line per mode, the table's noisy-machine warning under its subtitle), and
 * with --predict fits the cost model of docs/modes.md to microbenchmarks of
 * this machine and prints its predictions beside the measured points.
 * With --predict_nets it prints, without training them, the what-if for
 * networks too large to run here (VGG16, ResNet-50 at 224 and 32): the
 * parameter server against the ring at 1-8 towers from measured host rates
 * and the graph's FLOPs (or given device rates), and with --predict_hosts
 * the cost model across hosts (docs/modes.md, "Across hosts").  Under
 * `mpirun -np R` every rank runs the matrix in step (rank 0 prints): the
 * MPI modes' rows add an MPI ping-pong, their parts timed alone and the
 * cost model's network time (docs/hosts.md, "Measuring it"), the
 * asynchronous one's (ps_mpi_async) its staleness.
 * What it does not do: train anything to accuracy, or assert timings (the
 * numbers are for bench/RESULTS.md and for the user's own machine).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "model/graph.h"
#include "base/escape.h"
#include "base/flags.h"
#include "base/ranks.h"
#include "train/trainer.h"
#include "train/mode.h" /* a mode's across_ranks; with ps/ps.h's ps_sum_in_order, the MPI parts timed alone */
#include "ps/optimizer.h"
#include "ps/placement.h"

#define BENCH_MAX_ROWS 256
#define COST_REPS 15   /* timings per microbenchmark of --predict; the median is used */
#define BENCH_MAX_LIST 16
#define BENCH_MAX_RANKS 1024 /* the ranks dimension's largest job */

typedef struct {
    const char *models;        /* comma-separated names of THE table of networks (model/nets/nets.c) */
    float width_multiplier;    /* mobilenet_v2's alpha (as tower train's) */
    const char *head;          /* mobilenet_v2's head: keras | seed */
    int fc_width;              /* vgg11, vgg16: units of fc1 and fc2 */
    ModelOptions model_opts;   /* the two above, checked (cmd_model_options) */
    const char *modes;         /* comma-separated mode names (trainer_mode_from_name) */
    const char *device;        /* the towers: "cpu", "gpu" or "auto" (as tower train's --device) */
    int deterministic;         /* GPU towers: only deterministic cuDNN algorithms (as tower train's --deterministic) */
    const char *towers;        /* comma-separated tower counts */
    const char *data;          /* "": synthetic data; else TFRecord globs (one model) */
    const char *image_key, *label_key; /* --data's features (as tower train's) */
    int image_size;            /* --data: tower train's --image_size (0: its default) */
    const char *csv, *svg;     /* output files; "" = not written */
    const char *trace;         /* "": none; else FILE.json -> FILE-<model>-<mode>-<N>.json */
    int batch_size;            /* per tower */
    int steps, warmup;
    int repeat;                /* runs of the whole matrix, interleaved; each row reports the median run */
    int predict;
    int predict_max_towers;    /* the what-if table goes up to this many towers */
    float predict_copy_gbps;   /* 0: measured (memcpy of the variables) */
    float predict_allreduce_gbps; /* 0: measured (2-rank ring) */
    float predict_compute_ms;  /* 0: the measured 1-tower forward+backward */
    const char *predict_nets;  /* --predict_nets: networks of the what-if at each of --predict_sizes ("": none) */
    const char *predict_sizes; /* comma-separated input sizes (square) of --predict_nets */
    int ps_dedicated;          /* under mpirun: the parameter_server modes' first N ranks only serve (0: co-located) */
    float device_tflops;       /* achieved TFLOP/s of one tower's device; 0: this machine's measured rate */
    float device_update_gbps;  /* a replica's update on its tower's device, GB/s of variables; 0: the host's, 1 thread */
    int predict_hosts;         /* print the cost model across hosts for --predict_nets */
    const char *link_gbits;    /* --predict_hosts: comma-separated link speeds, Gb/s */
    const char *host_counts;   /* --predict_hosts: comma-separated host counts */
    int gpus_per_host;         /* --predict_hosts: towers (GPUs) per host */
    float link_latency_us;     /* --predict_hosts: one message's latency on a link (assumed) */
    float local_gbps;          /* --predict_hosts: intra-host all-reduce bus bandwidth, GB/s (assumed) */
    float server_gbps;         /* --predict_hosts: a server's summation rate, GB/s read + written; 0: this CPU's, measured */
    int predict_only;          /* print the predictions only: no matrix */
    long seed;
} BenchOptions;

/* One row of the matrix: its configuration and what was measured (times in ms). */
typedef struct {
    const char *model;
    TrainerMode mode;
    int towers, batch, global_batch, steps, cores;
    size_t n_params;
    double images_per_sec;
    double images_per_sec_min, images_per_sec_max; /* over the --repeat runs */
    int repeats;
    double step_median, step_p10, step_p90;
    double speedup, efficiency;       /* NAN without a 1-tower row of the same model and mode */
    TrainerPhaseSec phase;            /* medians over the steps, in ms */
    double predicted;                 /* the cost model's step time (ms); NAN without --predict */
    int ranks;                        /* MPI ranks of the job (1 without mpirun) */
    int servers;                      /* server-only ranks (--ps_dedicated; 0: co-located); with some, the phases and
                                         the local average are the first worker's (rank `servers`) */
    /* MPI modes only (NAN otherwise): the parts of the step's reduce and apply spans timed alone on the
     * same ranks right after the configuration ran, and the cost model's network time from the ping-pong. */
    double local_avg_ms;              /* ps_mpi: the sum of this rank's T towers; replicated_mpi: the ordered sum of R x T */
    double push_ms, pull_ms;          /* ps_mpi: MPI_Alltoallv of the shards' slices, MPI_Allgatherv of the shards */
    double gather_ms;                 /* replicated_mpi: MPI_Allgather of T gradients per rank */
    double net_predicted_ms;          /* alpha + bytes through the busiest rank / ping-pong bandwidth */
    double stale_mean, stale_max;     /* ps_mpi_async: staleness (updates) of the applied gradients, rank 0's last
                                         pulls' figures over the run; NAN in the synchronous modes */
} BenchRow;

/* The ping-pong of an MPI run (rank 0 <-> rank R-1), measured before the matrix. */
#define PINGPONG_N_SIZES 4
static const size_t pingpong_sizes[PINGPONG_N_SIZES] = {8, 64 << 10, 1 << 20, 16 << 20};
typedef struct {
    double rtt_sec[PINGPONG_N_SIZES]; /* median round trip per size; all -1 with one rank */
    double alpha_sec;                 /* half the round trip of the smallest message */
    double gbps;                      /* largest size / half its round trip, GB/s */
} PingPong;

/* ---- small helpers ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of v (n values, sorted in place): linear interpolation. */
static double quantile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double pos = q * (n - 1);
    int lo = (int)pos;
    int hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

/* The comma-separated list of --flag (empty items skipped) as items, pointers into buf: 0 with *n_items set, or -1
 * after one line when it does not fit buf, holds more than max items, or names one twice (a configuration's second
 * row would be the first's baseline; --repeat measures one again). */
static int bench_list(const char *flag, const char *list, char *buf, size_t buf_n_bytes, char **items, int max,
                      int *n_items) {
    const size_t len = strlen(list);
    *n_items = 0;
    if (len >= buf_n_bytes) {
        cmd_errorf("tower bench: --%s: a list of %zu characters (at most %zu)\n", flag, len, buf_n_bytes - 1);
        return -1;
    }
    memcpy(buf, list, len + 1);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max) {
            cmd_errorf("tower bench: --%s: more than %d values\n", flag, max);
            return -1;
        }
        for (int j = 0; j < n; j++) {
            if (!strcmp(items[j], tok)) {
                cmd_errorf("tower bench: --%s names %s twice (--repeat measures a configuration again)\n", flag, tok);
                return -1;
            }
        }
        items[n++] = tok;
    }
    *n_items = n;
    return 0;
}

/* Whether values[i], the value of items[i] of --flag, is an earlier item's ("1" and "01" name one tower count):
 * 1 after one line naming both, else 0. */
static int bench_repeats(const char *flag, char *const *items, const double *values, int i) {
    for (int j = 0; j < i; j++) {
        if (values[j] == values[i]) {
            cmd_errorf("tower bench: --%s names %s and %s, the same value%s\n", flag, items[j], items[i],
                       strncmp(flag, "predict_", 8) ? " (--repeat measures a configuration again)" : "");
            return 1;
        }
    }
    return 0;
}

/* The items (n, at most BENCH_MAX_LIST: bench_list's) of --flag as integers in [lo, hi] (what: "a tower count")
 * into out, each once: 0, or -1 after one line naming the item. */
static int bench_int_list(const char *flag, char *const *items, int n, long lo, long hi, const char *what, int *out) {
    double values[BENCH_MAX_LIST];
    for (int i = 0; i < n; i++) {
        char *end;
        const long v = strtol(items[i], &end, 10);
        if (end == items[i] || *end || v < lo || v > hi) {
            cmd_errorf("tower bench: --%s: '%s' is not %s in [%ld, %ld]\n", flag, items[i], what, lo, hi);
            return -1;
        }
        out[i] = (int)v;
        values[i] = (double)v;
        if (bench_repeats(flag, items, values, i)) return -1;
    }
    return 0;
}

static long online_cores(void) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? c : 1;
}

static double load_average(void) {
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1.0;
        fclose(f);
    }
    return l;
}

/* FILE.json -> FILE-<model>-<mode>-<N>.json */
static void trace_path_for(const char *trace, const BenchRow *r, char *out, size_t out_n_bytes) {
    size_t len = strlen(trace);
    size_t stem = len > 5 && !strcmp(trace + len - 5, ".json") ? len - 5 : len;
    snprintf(out, out_n_bytes, "%.*s-%s-%s-%d.json", (int)stem, trace, r->model, trainer_mode_name(r->mode), r->towers);
}

/* ---- the ranks dimension (mpirun -np R tower bench --modes ps_mpi,replicated_mpi) ---- */

/* The ping-pong between rank 0 and the last rank, at pingpong_sizes. */
static void measure_pingpong(PingPong *pp) {
    static const int reps[PINGPONG_N_SIZES] = {200, 50, 20, 5};
    const int R = ranks_size();
    for (int k = 0; k < PINGPONG_N_SIZES; k++) pp->rtt_sec[k] = ranks_pingpong_sec(R - 1, pingpong_sizes[k], reps[k]);
    pp->alpha_sec = pp->rtt_sec[0] / 2;
    pp->gbps = pp->rtt_sec[PINGPONG_N_SIZES - 1] > 0
                   ? pingpong_sizes[PINGPONG_N_SIZES - 1] / (pp->rtt_sec[PINGPONG_N_SIZES - 1] / 2) / 1e9
                   : NAN;
}

/* Median ms of 3 calls of one collective, every rank entering together (ranks_any as a barrier). */
#define TIME_COLLECTIVE(out_ms, call)                                  \
    do {                                                               \
        double t_[3];                                                  \
        for (int k_ = 0; k_ < 3; k_++) {                               \
            (void)ranks_any(0);                                        \
            double t0_ = tower_now_sec();                              \
            call;                                                      \
            t_[k_] = (tower_now_sec() - t0_) * 1e3;                    \
        }                                                              \
        (out_ms) = quantile(t_, 3, 0.5);                               \
    } while (0)

/* An MPI mode's parts timed alone, on the configuration's own sizes and
 * ranks, right after it ran (every rank calls it): what the step's reduce
 * and apply spans are made of.  0, or -1 with err (out of memory; the
 * caller ends the job). */
static int measure_rank_parts(const Trainer *tr, BenchRow *r, const PingPong *pp, char *err, size_t err_n_bytes) {
    /* N: the ranks that hold shards; with --ps_dedicated they are servers only, and the W = R - N workers push
     * to them and pull from them (a server times the local average of a worker's T towers too: only the first
     * worker's figure is reported). */
    const int R = tr->n_ranks, T = tr->worker_towers, me = tr->rank;
    const int N = tr->n_servers > 0 ? tr->n_servers : R, first_worker = tr->n_servers, W = R - tr->n_servers;
    const size_t M = tr->spec.n_params;
    const double M_bytes = (double)M * sizeof(float);
    const int is_ps = !strcmp(train_mode(r->mode)->variable_update, "parameter_server");
    const int n_sum = is_ps ? T : R * T;
    float *bufs = calloc((size_t)n_sum * M + M, sizeof(float));
    float *gather = is_ps ? NULL : calloc((size_t)R * T * M, sizeof(float));
    size_t var_n_bytes[MODEL_MAX_VARS], task_n_bytes[BENCH_MAX_RANKS];
    int owner[MODEL_MAX_VARS];
    int counts[BENCH_MAX_RANKS], displs[BENCH_MAX_RANKS], rcounts[BENCH_MAX_RANKS], rdispls[BENCH_MAX_RANKS];
    if (!bufs || (!is_ps && !gather) || R > BENCH_MAX_RANKS) {
        snprintf(err, err_n_bytes, "out of memory timing the MPI parts (%d ranks)", R);
        free(bufs);
        free(gather);
        return -1;
    }
    const float **gs = malloc((size_t)n_sum * sizeof *gs);
    if (!gs) {
        snprintf(err, err_n_bytes, "out of memory timing the MPI parts");
        free(bufs);
        free(gather);
        return -1;
    }
    for (int k = 0; k < n_sum; k++) gs[k] = bufs + (size_t)k * M;
    float *out = bufs + (size_t)n_sum * M;
    TIME_COLLECTIVE(r->local_avg_ms, ps_sum_in_order(out, gs, n_sum, M, is_ps ? 1 : n_sum));
    r->push_ms = r->pull_ms = r->gather_ms = NAN;
    const double alpha = pp->alpha_sec > 0 ? pp->alpha_sec : 0.0, bw = pp->gbps * 1e9;
    if (is_ps) {
        for (int v = 0; v < tr->spec.n_vars; v++) var_n_bytes[v] = tr->spec.vars[v].n_floats * sizeof(float);
        ps_place_variables(var_n_bytes, tr->spec.n_vars, N, PS_PLACE_GREEDY, owner, task_n_bytes);
        for (int s = N; s < R; s++) task_n_bytes[s] = 0;
        int at = 0;
        const int worker = me >= first_worker;
        for (int s = 0; s < R; s++) {
            counts[s] = (int)(task_n_bytes[s] / sizeof(float));
            displs[s] = at;
            at += counts[s];
            rcounts[s] = s >= first_worker ? (int)(task_n_bytes[me] / sizeof(float)) : 0;
            rdispls[s] = (s >= first_worker ? s - first_worker : 0) * (int)(task_n_bytes[me] / sizeof(float));
        }
        static const int no_counts[BENCH_MAX_RANKS];
        float *recv = gather ? gather : calloc((size_t)R * (task_n_bytes[me] / sizeof(float)) + 1, sizeof(float));
        if (!recv) {
            snprintf(err, err_n_bytes, "out of memory timing the MPI parts");
            free(bufs);
            free(gs);
            return -1;
        }
        TIME_COLLECTIVE(r->push_ms, ranks_alltoallv(out, worker ? counts : no_counts, displs, recv, rcounts, rdispls));
        TIME_COLLECTIVE(r->pull_ms, ranks_allgatherv(out + displs[me], out, counts, displs));
        free(recv);
        /* The busiest rank's bytes each way: co-located, a rank sends the others' shards and takes R - 1 slices
         * of its own; with server-only ranks a server takes W slices of its shard, a worker sends all M. */
        double busiest = 0.0;
        for (int s = 0; s < N; s++) {
            double in = (double)(tr->n_servers > 0 ? W : R - 1) * task_n_bytes[s];
            double outb = tr->n_servers > 0 ? M_bytes : M_bytes - task_n_bytes[s];
            if (in > busiest) busiest = in;
            if (outb > busiest) busiest = outb;
        }
        const int peers = tr->n_servers > 0 ? (W > N ? W : N) : R - 1; /* messages through the busiest rank */
        r->net_predicted_ms = R > 1 ? 2 * (peers * alpha + busiest / bw) * 1e3 : 0.0;
    } else {
        TIME_COLLECTIVE(r->gather_ms, ranks_allgather(bufs, gather, (size_t)T * M * sizeof(float)));
        r->net_predicted_ms = R > 1 ? ((R - 1) * alpha + (double)(R - 1) * T * M_bytes / bw) * 1e3 : 0.0;
    }
    free(gs);
    free(bufs);
    free(gather);
    return 0;
}

/* With server-only ranks (--ps_dedicated) rank 0 is a server, which computes nothing: the row's phases, step
 * spread and local average become the first worker's (rank n_servers), gathered from every rank (a
 * collective).  0, or -1 with err (out of memory). */
static int take_first_workers(const Trainer *tr, BenchRow *r, char *err, size_t err_n_bytes) {
    enum { N_FIGURES = 11 };
    const double mine[N_FIGURES] = {r->step_median,   r->step_p10,       r->step_p90,     r->phase.input,
                                    r->phase.copy,    r->phase.compute,  r->phase.reduce, r->phase.apply,
                                    r->phase.other,   r->local_avg_ms,   r->phase.step};
    double *all = malloc((size_t)tr->n_ranks * sizeof mine);
    if (!all) {
        snprintf(err, err_n_bytes, "out of memory gathering the workers' phases");
        return -1;
    }
    ranks_allgather(mine, all, sizeof mine);
    const double *w = all + (size_t)tr->n_servers * N_FIGURES;
    r->step_median = w[0], r->step_p10 = w[1], r->step_p90 = w[2];
    r->phase.input = w[3], r->phase.copy = w[4], r->phase.compute = w[5], r->phase.reduce = w[6];
    r->phase.apply = w[7], r->phase.other = w[8], r->local_avg_ms = w[9], r->phase.step = w[10];
    free(all);
    return 0;
}

/* ---- one configuration ---- */

/* The trainer's options for row r (its trace file, when --trace, into trace_path). */
static void row_options(const BenchOptions *bo, const BenchRow *r, TrainerOptions *out, char *trace_path,
                        size_t trace_path_n_bytes) {
    TrainerOptions o;
    trainer_options_defaults(&o);
    o.model = r->model;
    o.model_opts = bo->model_opts;
    o.num_towers = r->towers;
    o.batch_size = r->batch;
    o.seed = bo->seed;
    o.min_after_dequeue = 1000;
    o.device = bo->device;
    o.deterministic = bo->deterministic;
    o.no_checkpoints = 1; /* an earlier run's checkpoints in the default train_dir are none of its business */
    trainer_mode_set_flags(r->mode, &o);
    if (bo->ps_dedicated > 0 && !strcmp(train_mode(r->mode)->variable_update, "parameter_server")) {
        o.ps_ranks = bo->ps_dedicated;
        o.ps_dedicated = 1;
    }
    if (bo->data[0]) {
        o.data = bo->data;
        o.image_key = bo->image_key;
        o.label_key = bo->label_key;
        if (bo->image_size > 0) {
            o.image_size = bo->image_size;
            o.image_size_given = 1;
        }
    } else {
        o.synthetic = 1;
    }
    if (bo->trace[0] && trace_path) {
        trace_path_for(bo->trace, r, trace_path, trace_path_n_bytes);
        o.trace = trace_path;
    }
    *out = o;
}

/* Whether row r's trainer opens (its mode under this job's ranks, its device, its data), closed at once: the
 * matrix is checked before the first measurement, so a mode that cannot run here (a one-process mode under
 * mpirun, a GPU mode without a GPU) does not end the run after other rows were measured.  0, or trainer_open's
 * code with err (TRAINER_OPEN_REFUSED under mpirun: every rank stops, err "" but on the rank that says why). */
static int preflight_row(const BenchOptions *bo, const BenchRow *r, char *err, size_t err_n_bytes) {
    TrainerOptions o;
    row_options(bo, r, &o, NULL, 0);
    Trainer tr;
    const int rc = trainer_open(&tr, &o, err, err_n_bytes);
    if (rc == 0) trainer_close(&tr, NULL, 0);
    return rc;
}

/* Opens row r's trainer, runs --warmup + --steps steps and fills r with the medians (and the ranks' parts).  0, -1
 * with err, or trainer_open's TRAINER_OPEN_REFUSED (as preflight_row). */
static int run_config(const BenchOptions *bo, BenchRow *r, const PingPong *pp, char *err, size_t err_n_bytes) {
    TrainerOptions o;
    char trace_path[1200];
    row_options(bo, r, &o, trace_path, sizeof trace_path);
    Trainer tr;
    const int open_rc = trainer_open(&tr, &o, err, err_n_bytes);
    if (open_rc != 0) return open_rc;
    r->mode = tr.mode; /* the mode that runs: under mpirun, ps_cpu's flags settle on ps_mpi */
    r->global_batch = tr.global_batch;
    r->n_params = tr.spec.n_params;
    r->cores = (int)online_cores();
    int total = bo->warmup + bo->steps;
    double *step = calloc((size_t)bo->steps, sizeof *step);
    double *ph[6];
    for (int k = 0; k < 6; k++) ph[k] = calloc((size_t)bo->steps, sizeof(double));
    double t0 = 0.0, images = 0.0;
    int rc = 0;
    for (int s = 0; s < total; s++) {
        if (s == bo->warmup) t0 = tower_now_sec();
        float loss;
        int got = trainer_step(&tr, &loss, err, err_n_bytes);
        if (got == 0) {
            snprintf(err, err_n_bytes, "--data ran out after %d steps (need --warmup + --steps = %d)", s, total);
            rc = -1;
            break;
        }
        if (got == -2) {
            snprintf(err, err_n_bytes, "the loss diverged at step %d (%s, %s, %d towers)", s + 1, r->model,
                     trainer_mode_name(r->mode), r->towers);
            rc = -1;
            break;
        }
        if (got < 0) {
            rc = -1;
            break;
        }
        if (s < bo->warmup) continue;
        int i = s - bo->warmup;
        TrainerPhaseSec p;
        trainer_phase_breakdown(&tr, &p);
        step[i] = p.step * 1e3;
        ph[0][i] = p.input * 1e3;
        ph[1][i] = p.copy * 1e3;
        ph[2][i] = p.compute * 1e3;
        ph[3][i] = p.reduce * 1e3;
        ph[4][i] = p.apply * 1e3;
        ph[5][i] = p.other * 1e3;
        images += tr.global_batch;
    }
    if (rc == 0) {
        double wall = tower_now_sec() - t0;
        r->steps = bo->steps;
        r->images_per_sec = images / wall;
        r->step_median = quantile(step, bo->steps, 0.5);
        r->step_p10 = quantile(step, bo->steps, 0.1);
        r->step_p90 = quantile(step, bo->steps, 0.9);
        r->phase.input = quantile(ph[0], bo->steps, 0.5);
        r->phase.copy = quantile(ph[1], bo->steps, 0.5);
        r->phase.compute = quantile(ph[2], bo->steps, 0.5);
        r->phase.reduce = quantile(ph[3], bo->steps, 0.5);
        r->phase.apply = quantile(ph[4], bo->steps, 0.5);
        r->phase.other = quantile(ph[5], bo->steps, 0.5);
        r->phase.step = r->step_median;
    }
    free(step);
    for (int k = 0; k < 6; k++) free(ph[k]);
    r->ranks = tr.n_ranks;
    r->servers = tr.n_servers;
    r->stale_mean = tr.staleness_max >= 0 ? tr.staleness_mean : NAN;
    r->stale_max = tr.staleness_max >= 0 ? (double)tr.staleness_max : NAN;
    r->local_avg_ms = r->push_ms = r->pull_ms = r->gather_ms = r->net_predicted_ms = NAN;
    if (rc == 0 && train_mode(r->mode)->across_ranks) rc = measure_rank_parts(&tr, r, pp, err, err_n_bytes);
    if (rc == 0 && tr.n_servers > 0) rc = take_first_workers(&tr, r, err, err_n_bytes);
    if (rc == 0) rc = trainer_close(&tr, err, err_n_bytes);
    else trainer_close(&tr, NULL, 0);
    return rc;
}

/* ---- the cost model (docs/modes.md) ---- */


typedef struct {
    AllreduceHost *ar;
    int rank, reps;
    float *const *bufs;
    size_t n_floats;
} RingArgs;

static void *ring_rank(void *arg) {
    RingArgs *a = arg;
    for (int i = 0; i < a->reps; i++) allreduce_host_ring_mean(a->ar, a->rank, a->bufs, a->n_floats);
    return NULL;
}

/* Median seconds of one 2-rank ring all-reduce of n_floats (over COST_REPS timings of reps calls). */
static double time_ring(float *const *bufs, size_t n_floats, int reps) {
    char e[256];
    AllreduceHost *ar = allreduce_host_create(2, e, sizeof e);
    double t[COST_REPS];
    for (int k = 0; k < COST_REPS; k++) {
        pthread_t th;
        RingArgs a0 = {ar, 0, reps, bufs, n_floats}, a1 = {ar, 1, reps, bufs, n_floats};
        double t0 = tower_now_sec();
        pthread_create(&th, NULL, ring_rank, &a1);
        ring_rank(&a0);
        pthread_join(th, NULL);
        t[k] = (tower_now_sec() - t0) / reps;
    }
    allreduce_host_free(ar);
    return quantile(t, COST_REPS, 0.5);
}

static int measure_figures(const char *model, const ModelOptions *opts, TrainCostFigures *f, char *err,
                           size_t err_n_bytes) {
    ModelSpec spec;
    ModelInputFacts facts;
    (void)model_input_facts(model, &facts);
    /* The synthetic batch's shape as run_config trains on it (cifar10 crops to tower train's --image_size 24). */
    const int size = facts.distorts ? 24 : facts.H;
    if (model_spec_init_opts(&spec, model, size, facts.distorts ? 24 : facts.W, facts.C, 10, opts, err,
                             err_n_bytes) != 0)
        return -1;
    PsConfig pc;
    ps_config_defaults(&pc);
    ParamServer *ps = ps_create(&spec, 2, &pc, host_alloc_default(), 1);
    float *src = host_alloc_page_aligned(spec.n_params * sizeof(float), NULL);
    float *dst = host_alloc_page_aligned(spec.n_params * sizeof(float), NULL);
    if (!ps || !src || !dst) {
        snprintf(err, err_n_bytes, "--predict: out of memory for the microbenchmarks");
        ps_free(ps);
        host_free_page_aligned(src, NULL);
        host_free_page_aligned(dst, NULL);
        return -1;
    }
    const size_t n = spec.n_params;
    const double M = (double)n * sizeof(float);
    f->model_n_bytes = M;
    f->cores = (int)online_cores();
    double t[COST_REPS];
    for (int k = 0; k < COST_REPS; k++) {
        double t0 = tower_now_sec();
        memcpy(dst, src, n * sizeof(float));
        t[k] = tower_now_sec() - t0;
    }
    f->copy_gbps = M / quantile(t, COST_REPS, 0.5) / 1e9;
    for (int k = 0; k < COST_REPS; k++) {
        double t0 = tower_now_sec();
        ps_average_grads(ps);
        t[k] = tower_now_sec() - t0;
    }
    f->reduce_gbps = 3.0 * M / quantile(t, COST_REPS, 0.5) / 1e9;
    for (int k = 0; k < COST_REPS; k++) {
        double t0 = tower_now_sec();
        ps_apply_gradients(ps);
        t[k] = tower_now_sec() - t0;
    }
    f->ps_apply_ms = quantile(t, COST_REPS, 0.5) * 1e3;
    /* a replica's update and the moving averages with one OpenMP thread (a tower on one core) */
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int k = 0; k < COST_REPS; k++) {
        double t0 = tower_now_sec();
        optimizer_apply(dst, ps->slots, ps->scalars, ps->grads, n, 0.01f, ps->global_step, &pc.opt);
        t[k] = tower_now_sec() - t0;
    }
    f->opt_1thread_ms = quantile(t, COST_REPS, 0.5) * 1e3;
    for (int k = 0; k < COST_REPS; k++) {
        double t0 = tower_now_sec();
        ema_apply(ps->ema, ps->params, n, 0.99f);
        t[k] = tower_now_sec() - t0;
    }
    f->ema_1thread_ms = quantile(t, COST_REPS, 0.5) * 1e3;
    omp_set_num_threads(threads_before);
    float *bufs[2] = {ps->tower_grads[0], ps->tower_grads[1]};
    double t_big = time_ring(bufs, n, 3);
    double t_tiny = time_ring(bufs, 2, 200);
    f->barrier_ms = t_tiny * 1e3; /* N = 2: one barrier and two tiny phases */
    f->ring_gbps = M / (t_big - t_tiny > 1e-9 ? t_big - t_tiny : t_big) / 1e9; /* each rank moves 2(N-1)/N M = M */
    ps_free(ps);
    host_free_page_aligned(src, NULL);
    host_free_page_aligned(dst, NULL);
    return 0;
}

/* Predicted step time (ms) of a measured row: its own input and compute
 * times plus what its mode's cost model adds (train/: NAN for the GPU
 * modes, whose copies these host figures do not model). */
static double predict_row(const BenchRow *r, const TrainCostFigures *f) {
    return r->phase.input + r->phase.compute + trainer_mode_predict_ms(r->mode, f, r->towers);
}

/* The model sizes at which the ring is faster, in words (out, out_n_bytes), where the parameter server's step
 * minus the ring's is size x per_byte_s - fixed_ms: "more than X MB", "any size", or "no size" where the server's
 * cost per byte is the lower one. */
static void break_even_words(char *out, size_t out_n_bytes, double per_byte_s, double fixed_ms) {
    if (per_byte_s > 0 && fixed_ms > 0) snprintf(out, out_n_bytes, "more than %.3f MB", fixed_ms * 1e-3 / per_byte_s / 1e6);
    else if (per_byte_s > 0) snprintf(out, out_n_bytes, "any size");
    else snprintf(out, out_n_bytes, "no size (the server's per-byte cost is lower)");
}

/* Tower counts in increasing order as runs of consecutive counts (what-if's lists: up to 4096 counts). */
typedef struct {
    int first[8], last[8]; /* the runs kept, in order */
    int n_runs;            /* the runs seen; those past 8 are counted, not kept */
    int latest;            /* the count added last (0: none) */
} TowerRuns;

static void tower_runs_add(TowerRuns *r, int n) {
    if (r->n_runs > 0 && r->latest == n - 1) {
        if (r->n_runs <= 8) r->last[r->n_runs - 1] = n;
    } else {
        if (r->n_runs < 8) r->first[r->n_runs] = r->last[r->n_runs] = n;
        r->n_runs++;
    }
    r->latest = n;
}

/* "1-3, 5, 8-4096", "none", or the first 8 runs and how many more; returns out. */
static const char *tower_runs_words(const TowerRuns *r, char *out, size_t out_n_bytes) {
    size_t k = 0;
    snprintf(out, out_n_bytes, "none");
    for (int i = 0; i < r->n_runs && i < 8 && k < out_n_bytes; i++) {
        if (r->first[i] == r->last[i]) k += (size_t)snprintf(out + k, out_n_bytes - k, "%s%d", i ? ", " : "", r->first[i]);
        else k += (size_t)snprintf(out + k, out_n_bytes - k, "%s%d-%d", i ? ", " : "", r->first[i], r->last[i]);
    }
    if (r->n_runs > 8 && k < out_n_bytes) snprintf(out + k, out_n_bytes - k, " and %d more runs", r->n_runs - 8);
    return out;
}

/* The what-if table: N towers each on its own device (compute per tower
 * constant), the parameter server moving the model once each way per tower
 * through the host, the ring moving 2(N-1)/N of it per tower in parallel. */
static void print_what_if(const BenchOptions *bo, const char *model, const TrainCostFigures *f, double compute_ms,
                          const char *compute_source) {
    const double M = f->model_n_bytes;
    const double copy = bo->predict_copy_gbps > 0 ? bo->predict_copy_gbps : f->copy_gbps;
    const double ar = bo->predict_allreduce_gbps > 0 ? bo->predict_allreduce_gbps : f->ring_gbps;
    const double comp = bo->predict_compute_ms > 0 ? bo->predict_compute_ms : compute_ms;
    printf("\nwhat-if, %s (M = %.1f MB): N towers each on its own device, forward+backward %.3g ms per tower (%s), "
           "host<->device %.3g GB/s, all-reduce %.3g GB/s per link, CPU reduce %.3g GB/s, barrier %.3f ms\n",
           model, M / 1e6, comp, bo->predict_compute_ms > 0 ? "given" : compute_source, copy, ar, f->reduce_gbps,
           f->barrier_ms);
    printf("  %6s  %14s  %14s  %8s  %s\n", "towers", "ps step ms", "ring step ms", "faster",
           "the ring is faster for models of");
    TowerRuns ring_at = {0}, ps_at = {0};
    for (int n = 1; n <= bo->predict_max_towers; n++) {
        const double N = n;
        double ps = comp + 2 * N * M / (copy * 1e9) * 1e3 + (N + 1) * M / (f->reduce_gbps * 1e9) * 1e3 + f->ps_apply_ms;
        double ring = comp + (n > 1 ? 2 * (N - 1) / N * M / (ar * 1e9) * 1e3 + (2 * N - 3) * f->barrier_ms : 0.0) +
                      f->opt_1thread_ms + f->ema_1thread_ms / N;
        /* ps - ring = size x (per byte of the server - per byte of the ring) - the ring's phases; the updates were
         * timed on this model, so they grow with the size as the copies and sums do: per byte, not fixed. */
        const double per_byte = 2 * N / (copy * 1e9) + (N + 1) / (f->reduce_gbps * 1e9) + f->ps_apply_ms * 1e-3 / M -
                                (n > 1 ? 2 * (N - 1) / N / (ar * 1e9) : 0.0) -
                                (f->opt_1thread_ms + f->ema_1thread_ms / N) * 1e-3 / M;
        char sizes[64];
        break_even_words(sizes, sizeof sizes, per_byte, n > 1 ? (2 * N - 3) * f->barrier_ms : 0.0);
        tower_runs_add(ring < ps ? &ring_at : &ps_at, n);
        printf("  %6d  %14.2f  %14.2f  %8s  %s\n", n, ps, ring, ring < ps ? "ring" : "ps", sizes);
    }
    char ring_words[160], ps_words[160];
    printf("  predicted faster for this model: the ring at N = %s; the parameter server at N = %s\n",
           tower_runs_words(&ring_at, ring_words, sizeof ring_words), tower_runs_words(&ps_at, ps_words, sizeof ps_words));
}

/* ---- the what-if for networks the matrix need not run (--predict_nets, --predict_hosts) ---- */

#define RATE_N_FLOATS ((size_t)8 << 20) /* the host rates are measured on 32 MiB buffers */

/* This machine's per-byte rates, measured on plain buffers of RATE_N_FLOATS. */
typedef struct {
    double copy_gbps;    /* memcpy, one thread */
    double reduce_gbps;  /* the ordered sum of 2 buffers (bytes read + written), all cores */
    double apply_gbps;   /* optimizer (momentum) + moving averages, bytes of variables per second, all cores */
    double apply1_gbps;  /* the same on one thread (a replica's update) */
    double ring_gbps;    /* a 2-rank host ring: bytes a rank moves per second */
    double barrier_ms;   /* one ring phase on 2 floats */
} HostRates;

static int measure_host_rates(HostRates *h, char *err, size_t err_n_bytes) {
    const size_t n = RATE_N_FLOATS;
    const double M = (double)n * sizeof(float);
    float *buf = calloc(7 * n, sizeof(float));
    if (!buf) {
        snprintf(err, err_n_bytes, "--predict_nets: out of memory for the rate microbenchmarks (%.0f MB)", 7 * M / 1e6);
        return -1;
    }
    float *src = buf, *dst = buf + n, *g0 = buf + 2 * n, *g1 = buf + 3 * n, *out = buf + 4 * n, *slot = buf + 5 * n,
          *ema = buf + 6 * n;
    PsConfig pc;
    ps_config_defaults(&pc);
    float *slots[OPT_MAX_SLOTS] = {slot, slot, slot};
    float scalars[OPT_MAX_SCALARS] = {0};
    double t[COST_REPS], t2[COST_REPS];
    h->apply_gbps = h->apply1_gbps = 0.0;
    for (int k = 0; k < COST_REPS; k++) {
        double t0 = tower_now_sec();
        memcpy(dst, src, n * sizeof(float));
        t[k] = tower_now_sec() - t0;
    }
    h->copy_gbps = M / quantile(t, COST_REPS, 0.5) / 1e9;
    const float *gs[2] = {g0, g1};
    for (int k = 0; k < COST_REPS; k++) {
        double t0 = tower_now_sec();
        ps_sum_in_order(out, gs, 2, n, 2);
        t[k] = tower_now_sec() - t0;
    }
    h->reduce_gbps = 3.0 * M / quantile(t, COST_REPS, 0.5) / 1e9;
    const int threads_before = omp_get_max_threads();
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) omp_set_num_threads(1);
        for (int k = 0; k < COST_REPS; k++) {
            double t0 = tower_now_sec();
            (void)optimizer_apply(dst, slots, scalars, g0, n, 0.0f, 0, &pc.opt);
            ema_apply(ema, dst, n, 0.99f);
            t2[k] = tower_now_sec() - t0;
        }
        const double gbps = M / quantile(t2, COST_REPS, 0.5) / 1e9;
        if (pass == 0) h->apply_gbps = gbps;
        else h->apply1_gbps = gbps;
    }
    omp_set_num_threads(threads_before);
    float *bufs[2] = {g0, g1};
    const double t_big = time_ring(bufs, n, 3), t_tiny = time_ring(bufs, 2, 200);
    h->barrier_ms = t_tiny * 1e3;
    h->ring_gbps = M / (t_big - t_tiny > 1e-9 ? t_big - t_tiny : t_big) / 1e9;
    free(buf);
    return 0;
}

/* Achieved GFLOP/s of one forward+backward of `name` at 32x32x3, batch B,
 * on this machine's cores (the median of 2 timed steps after one untimed). */
static int measure_compute_gflops(const char *name, const ModelOptions *opts, int B, double *gflops, char *err,
                                  size_t err_n_bytes) {
    ModelSpec spec;
    if (model_spec_init_opts(&spec, name, 32, 32, 3, 10, opts, err, err_n_bytes) != 0) return -1;
    float *params = malloc(spec.n_params * sizeof(float)), *dparams = calloc(spec.n_params, sizeof(float));
    float *x = malloc((size_t)B * 32 * 32 * 3 * sizeof(float)), *logits = malloc((size_t)B * 10 * sizeof(float));
    int32_t *labels = malloc((size_t)B * sizeof(int32_t));
    ModelActs *acts = params && dparams && x && logits && labels ? model_acts_create(&spec, B) : NULL;
    int rc = 0;
    if (!acts) {
        snprintf(err, err_n_bytes, "--predict_nets: out of memory measuring %s's compute rate", name);
        rc = -1;
    } else {
        model_init_params(params, &spec, 1);
        for (size_t i = 0; i < (size_t)B * 32 * 32 * 3; i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
        for (int i = 0; i < B; i++) labels[i] = i % 10;
        double t[3];
        for (int k = 0; k < 3; k++) {
            double t0 = tower_now_sec();
            float ce;
            (void)model_forward(logits, &ce, acts, x, labels, params, B);
            model_backward(dparams, acts, params);
            t[k] = tower_now_sec() - t0;
        }
        const double step = t[1] < t[2] ? t[1] : t[2];
        *gflops = 6.0 * model_forward_flops_per_example(&spec) * B / step / 1e9;
    }
    model_acts_free(acts);
    free(params);
    free(dparams);
    free(x);
    free(logits);
    free(labels);
    return rc;
}

/* One network at one input size, as the what-if tables need it. */
typedef struct {
    char name[64];           /* "vgg16 224x224" */
    double M;                /* bytes of variables */
    double train_gflop;      /* per image: 3 x 2 x multiply-adds of the forward */
    size_t var_n_bytes[MODEL_MAX_VARS];
    int n_vars;
    double tc_ms;            /* forward+backward of one tower of --batch_size */
    char tc_source[160];     /* where tc_ms came from */
} NetFacts;

static int net_facts(const BenchOptions *bo, const char *name, int size, double gflops_measured, NetFacts *nf,
                     char *err, size_t err_n_bytes) {
    ModelSpec spec;
    if (model_spec_init_opts(&spec, name, size, size, 3, size >= 128 ? 1000 : 10, &bo->model_opts, err,
                             err_n_bytes) != 0)
        return -1;
    snprintf(nf->name, sizeof nf->name, "%s %dx%d", name, size, size);
    nf->M = (double)spec.n_params * sizeof(float);
    nf->train_gflop = 6.0 * model_forward_flops_per_example(&spec) / 1e9;
    nf->n_vars = spec.n_vars;
    for (int v = 0; v < spec.n_vars; v++) nf->var_n_bytes[v] = spec.vars[v].n_floats * sizeof(float);
    if (bo->device_tflops > 0) {
        nf->tc_ms = nf->train_gflop * bo->batch_size / (bo->device_tflops * 1e3) * 1e3;
        snprintf(nf->tc_source, sizeof nf->tc_source, "assumed %.1f TFLOP/s per tower (--device_tflops)",
                 bo->device_tflops);
    } else {
        nf->tc_ms = nf->train_gflop * bo->batch_size / gflops_measured * 1e3;
        snprintf(nf->tc_source, sizeof nf->tc_source,
                 "measured %.1f GFLOP/s (%s 32x32 forward+backward on this machine's %ld cores)", gflops_measured,
                 name, online_cores());
    }
    return 0;
}

/* Towers 1, 2, 4, 8 of one host: the parameter server on the CPU against the ring (docs/modes.md). */
static void print_net_towers(const BenchOptions *bo, const NetFacts *nf, const HostRates *h) {
    const double M = nf->M;
    const double copy = bo->predict_copy_gbps > 0 ? bo->predict_copy_gbps : h->copy_gbps;
    const double ar = bo->predict_allreduce_gbps > 0 ? bo->predict_allreduce_gbps : h->ring_gbps;
    const double B = bo->batch_size;
    printf("\n%s: %.1f M variables (M = %.1f MB), %.2f GFLOP per image trained (3 x 2 x the graph's forward "
           "multiply-adds), batch %d per tower\n", nf->name, M / 4e6, M / 1e6, nf->train_gflop, bo->batch_size);
    printf("  inputs: forward+backward %.1f ms per tower: %s\n", nf->tc_ms, nf->tc_source);
    printf("          host<->device %.1f GB/s: %s; ring link %.1f GB/s: %s\n", copy,
           bo->predict_copy_gbps > 0 ? "given (--predict_copy_gbps)" : "measured (memcpy, 1 thread)", ar,
           bo->predict_allreduce_gbps > 0 ? "given (--predict_allreduce_gbps)" : "measured (2-rank host ring)");
    const double upd = bo->device_update_gbps > 0 ? bo->device_update_gbps : h->apply1_gbps;
    printf("          CPU average %.1f GB/s, server update %.1f GB/s (all cores), ring phase %.3f ms: measured; "
           "replica update %.1f GB/s: %s\n", h->reduce_gbps, h->apply_gbps, h->barrier_ms, upd,
           bo->device_update_gbps > 0 ? "given (--device_update_gbps)" : "measured (this host, 1 thread)");
    printf("  %6s  %12s %10s  %12s %10s  %7s  %s\n", "towers", "ps step ms", "ps img/s", "ring step ms", "ring img/s",
           "faster", "at these rates the ring is faster for models of");
    int first_ring = 0, ps_wins_after = 0;
    static const int towers[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        const double N = towers[i];
        const double ps = nf->tc_ms + 2 * N * M / (copy * 1e9) * 1e3 + (N + 1) * M / (h->reduce_gbps * 1e9) * 1e3 +
                          M / (h->apply_gbps * 1e9) * 1e3;
        const double ring = nf->tc_ms + (N > 1 ? 2 * (N - 1) / N * M / (ar * 1e9) * 1e3 + (2 * N - 3) * h->barrier_ms : 0) +
                            M / (upd * 1e9) * 1e3;
        const int ring_wins = ring < ps;
        if (ring_wins && !first_ring) first_ring = towers[i];
        if (!ring_wins && first_ring && !ps_wins_after) ps_wins_after = towers[i];
        /* ps - ring = M x (per-byte difference) - (the ring's fixed phases): the break-even size */
        const double per_byte = 2 * N / (copy * 1e9) + (N + 1) / (h->reduce_gbps * 1e9) + 1 / (h->apply_gbps * 1e9) -
                                (N > 1 ? 2 * (N - 1) / N / (ar * 1e9) : 0) - 1 / (upd * 1e9);
        char sizes[64];
        break_even_words(sizes, sizeof sizes, per_byte, N > 1 ? (2 * N - 3) * h->barrier_ms : 0.0);
        printf("  %6d  %12.1f %10.1f  %12.1f %10.1f  %7s  %s\n", towers[i], ps, N * B / ps * 1e3, ring, N * B / ring * 1e3,
               ring_wins ? "ring" : "ps", sizes);
    }
    if (!first_ring) printf("  crossover: none up to 8 towers: the parameter server stays ahead\n");
    else if (ps_wins_after) printf("  crossover: the ring is ahead at %d tower(s), the parameter server again from %d\n",
                                   first_ring, ps_wins_after);
    else if (first_ring == 1) printf("  crossover: none: the ring is ahead at every tower count\n");
    else printf("  crossover: the ring overtakes the parameter server at %d towers\n", first_ring);
    /* where the time goes at the largest count, and the CPU rates at which the server would tie there */
    const double N = 8;
    const double ps_copy = 2 * N * M / (copy * 1e9) * 1e3, ps_avg = (N + 1) * M / (h->reduce_gbps * 1e9) * 1e3,
                 ps_upd = M / (h->apply_gbps * 1e9) * 1e3;
    const double ring_ar = 2 * (N - 1) / N * M / (ar * 1e9) * 1e3, ring_ph = (2 * N - 3) * h->barrier_ms,
                 ring_upd = M / (upd * 1e9) * 1e3;
    printf("  at 8 towers, ms beyond compute: ps copies %.1f + average %.1f + update %.1f = %.1f; ring all-reduce %.1f + "
           "phases %.2f + update %.1f = %.1f\n", ps_copy, ps_avg, ps_upd, ps_copy + ps_avg + ps_upd, ring_ar, ring_ph,
           ring_upd, ring_ar + ring_ph + ring_upd);
}

/* The cost model across hosts (docs/modes.md, "Across hosts"): H hosts of G
 * towers, links of L Gb/s, five designs. */
static void print_net_hosts(const BenchOptions *bo, const NetFacts *nf, const HostRates *h, const double *gbits,
                            int n_gbits, const int *hosts, int n_hosts) {
    const double M = nf->M, G = bo->gpus_per_host, B = bo->batch_size, alpha = bo->link_latency_us * 1e-3;
    const double local = G > 1 ? 2 * (G - 1) / G * M / (bo->local_gbps * 1e9) * 1e3 : 0.0;
    const double sum_gbps = bo->server_gbps > 0 ? bo->server_gbps : h->reduce_gbps;
    printf("\n%s across hosts of %d towers: forward+backward %.1f ms per tower (%s); intra-host all-reduce %.1f ms "
           "(assumed %.0f GB/s bus, --predict_local_gbps); link latency %.1f us (assumed, --predict_link_latency_us); "
           "a server, and allgather's every host, sums at %.4g GB/s (%s); no overlap of communication with compute\n",
           nf->name,
           bo->gpus_per_host, nf->tc_ms, nf->tc_source, local, bo->local_gbps, bo->link_latency_us, sum_gbps,
           bo->server_gbps > 0 ? "given, --predict_server_gbps" : "measured, this CPU");
    printf("  %7s %6s %6s | %9s %9s %9s %9s %9s | %-9s %5s\n", "Gb/s", "hosts", "towers", "ring", "ps_whole",
           "ps_even", "byteps", "allgather", "best", "eff");
    for (int l = 0; l < n_gbits; l++) {
        const double bw = gbits[l] * 1e9 / 8; /* bytes/s */
        for (int k = 0; k < n_hosts; k++) {
            const int H = hosts[k];
            size_t task[BENCH_MAX_RANKS];
            int owner[MODEL_MAX_VARS];
            ps_place_variables(nf->var_n_bytes, nf->n_vars, H, PS_PLACE_GREEDY, owner, task);
            double busiest = 0.0, task_max = 0.0;
            for (int s = 0; s < H; s++) {
                double in = (double)(H - 1) * task[s], out = M - task[s];
                if (in > busiest) busiest = in;
                if (out > busiest) busiest = out;
                if (task[s] > task_max) task_max = task[s];
            }
            const double sum_ms = (H + 1) * (M / H) / (sum_gbps * 1e9) * 1e3; /* a server's sum of H slices */
            double t[5];
            t[0] = 2 * (H - 1.0) / H * M / bw * 1e3 + 2 * (H - 1) * alpha;                /* ring */
            t[1] = 2 * busiest / bw * 1e3 + 2 * alpha + (H + 1.0) * task_max / (sum_gbps * 1e9) * 1e3; /* ps_whole */
            t[2] = 2 * (H - 1.0) / H * M / bw * 1e3 + 2 * alpha + sum_ms;                 /* ps_even */
            t[3] = M / bw * 1e3 + 2 * alpha + sum_ms;                                     /* byteps */
            /* allgather: no local combine, but every host sums the H x G gradients it gathered, in order */
            t[4] = (H - 1.0) * G * M / bw * 1e3 + (H - 1) * alpha + (H * G + 1.0) * M / (sum_gbps * 1e9) * 1e3;
            static const char *const names[] = {"ring", "ps_whole", "ps_even", "byteps", "allgather"};
            double ips[5];
            int best = 0;
            for (int d = 0; d < 5; d++) {
                const double step = nf->tc_ms + (d == 4 ? 0.0 : local) + t[d];
                ips[d] = H * G * B / step * 1e3;
                if (ips[d] > ips[best]) best = d;
            }
            const double linear = H * G * B / nf->tc_ms * 1e3;
            printf("  %7.4g %6d %6d | %9.0f %9.0f %9.0f %9.0f %9.0f | %-9s %4.0f%%\n", gbits[l], H, H * bo->gpus_per_host,
                   ips[0], ips[1], ips[2], ips[3], ips[4], names[best], 100 * ips[best] / linear);
        }
    }
}

/* ---- output ---- */

/* The model and mode columns' widths (*wm, *wd): as wide as the longest name among the rows printed (mobilenet_v2,
 * replicated_mpi_allreduce; ranks_only: the rows of the ranks table), at least 8 and 16. */
static void name_widths(const BenchRow *rows, int n_rows, int ranks_only, int *wm, int *wd) {
    *wm = 8, *wd = 16;
    for (int i = 0; i < n_rows; i++) {
        if (ranks_only && isnan(rows[i].local_avg_ms)) continue;
        const int m = (int)strlen(rows[i].model), d = (int)strlen(trainer_mode_name(rows[i].mode));
        if (m > *wm) *wm = m;
        if (d > *wd) *wd = d;
    }
}

static void print_table(const BenchRow *rows, int n_rows, int predict) {
    int wm, wd;
    name_widths(rows, n_rows, 0, &wm, &wd);
    printf("\n%-*s %-*s %6s %6s %24s %24s %8s %6s | %7s %7s %8s %7s %7s %7s%s\n", wm, "model", wd, "mode", "towers", "batch",
           "img/s (min-max of runs)", "step ms median (p10-p90)", "speedup", "eff", "input", "copy", "fwd+bwd", "reduce",
           "apply", "other", predict ? " | predicted ms" : "");
    for (int i = 0; i < n_rows; i++) {
        const BenchRow *r = &rows[i];
        char ips[64], spread[64], speed[16], eff[16], pred[32] = "";
        if (r->repeats > 1)
            snprintf(ips, sizeof ips, "%.1f (%.0f-%.0f)", r->images_per_sec, r->images_per_sec_min, r->images_per_sec_max);
        else snprintf(ips, sizeof ips, "%.1f", r->images_per_sec);
        snprintf(spread, sizeof spread, "%.1f (%.1f-%.1f)", r->step_median, r->step_p10, r->step_p90);
        if (isnan(r->speedup)) snprintf(speed, sizeof speed, "-"), snprintf(eff, sizeof eff, "-");
        else snprintf(speed, sizeof speed, "%.2fx", r->speedup), snprintf(eff, sizeof eff, "%.0f%%", 100 * r->efficiency);
        if (predict && isnan(r->predicted)) snprintf(pred, sizeof pred, " | %12s", "-"); /* no model for the mode */
        else if (predict) snprintf(pred, sizeof pred, " | %12.1f", r->predicted);
        printf("%-*s %-*s %6d %6d %24s %24s %8s %6s | %7.2f %7.2f %8.2f %7.2f %7.2f %7.2f%s\n", wm, r->model, wd,
               trainer_mode_name(r->mode), r->towers, r->global_batch, ips, spread, speed, eff,
               r->phase.input, r->phase.copy, r->phase.compute, r->phase.reduce, r->phase.apply, r->phase.other, pred);
    }
    printf("(batch = global batch; phases are medians in ms over the steps of the median run, per-tower phases "
           "averaged over the towers)\n");
}

/* The MPI rows: the job's images/sec and rank 0's phases, the step's
 * reduce and apply spans beside their parts timed alone, and the cost
 * model's network time from the ping-pong. */
static void print_ranks_table(const BenchRow *rows, int n_rows, const PingPong *pp) {
    int any = 0;
    for (int i = 0; i < n_rows; i++) any |= !isnan(rows[i].local_avg_ms);
    if (!any) return;
    printf("\nranks: %d (mpirun); ping-pong rank 0 <-> rank %d:", rows[0].ranks, rows[0].ranks - 1);
    for (int k = 0; k < PINGPONG_N_SIZES; k++) {
        if (pp->rtt_sec[k] > 0)
            printf(" %zu B %.1f us (%.2f GB/s)%s", pingpong_sizes[k], pp->rtt_sec[k] / 2 * 1e6,
                   pingpong_sizes[k] / (pp->rtt_sec[k] / 2) / 1e9, k + 1 < PINGPONG_N_SIZES ? "," : "");
        else if (k == 0) printf(" none (one rank)");
    }
    int wm, wd;
    name_widths(rows, n_rows, 1, &wm, &wd);
    printf("\n%-*s %-*s %5s %7s %6s %6s %9s %8s | %8s | %8s %9s %7s %7s | %8s %7s | %7s | %9s %9s | %14s\n",
           wm, "model", wd, "mode", "ranks", "servers", "towers", "batch", "img/s", "step ms", "fwd+bwd", "reduce", "local avg",
           "push", "gather",
           "apply", "pull", "other", "net alone", "net model", "stale mean/max");
    for (int i = 0; i < n_rows; i++) {
        const BenchRow *r = &rows[i];
        if (isnan(r->local_avg_ms)) continue;
        const int is_ps = !isnan(r->push_ms);
        char push[16] = "-", gather[16] = "-", pull[16] = "-";
        if (is_ps) snprintf(push, sizeof push, "%.2f", r->push_ms), snprintf(pull, sizeof pull, "%.2f", r->pull_ms);
        else snprintf(gather, sizeof gather, "%.2f", r->gather_ms);
        const double net = is_ps ? r->push_ms + r->pull_ms : r->gather_ms;
        char stale[32] = "-";
        if (!isnan(r->stale_mean)) snprintf(stale, sizeof stale, "%.2f/%.0f", r->stale_mean, r->stale_max);
        char servers[16] = "-";
        if (r->servers > 0) snprintf(servers, sizeof servers, "%d", r->servers);
        printf("%-*s %-*s %5d %7s %6d %6d %9.1f %8.1f | %8.2f | %8.2f %9.2f %7s %7s | %8.2f %7s | %7.2f | %9.2f %9.2f | "
               "%14s\n", wm, r->model, wd, trainer_mode_name(r->mode), r->ranks, servers, r->towers, r->global_batch, r->images_per_sec,
               r->step_median, r->phase.compute, r->phase.reduce, r->local_avg_ms, push, gather, r->phase.apply, pull,
               r->phase.other, net, r->net_predicted_ms, stale);
    }
    printf("(img/s: the job's, every rank's towers; phases: rank 0's medians in ms.  reduce = the step's span from the "
           "towers' end through the\n agreement on the outcome, the local average and the push (ps_mpi) or the "
           "all-gather and the ordered sum (replicated_mpi); apply = the\n update (+ the pull, ps_mpi).  local avg, "
           "push, pull, gather: those parts timed alone on the same ranks and sizes after the configuration ran;\n"
           " net model: (R-1) x latency + the bytes through the busiest rank / the ping-pong's bandwidth "
           "(docs/modes.md, \"Across hosts\"));\n ps_mpi_async: img/s and phases are rank 0's worker steps (reduce = "
           "its towers' mean, apply = its push and pull, waits for the\n staleness bound included), push and pull "
           "timed as ps_mpi's collectives of the same bytes; stale: the updates applied between a worker's pull and\n"
           " its push, mean and max over the run; servers: --ps_dedicated's server-only ranks, whose rows give the first\n"
           " worker's phases and local average, towers a worker's, and push/pull the workers' to and from the servers)\n");
}

static int write_csv(const char *path, const BenchRow *rows, int n_rows, char *err, size_t err_n_bytes) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, err_n_bytes, "--csv %s: cannot create the file: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "model,mode,variable_update,local_parameter_device,all_reduce,towers,batch_per_tower,global_batch,steps,"
               "images_per_sec,step_ms_median,step_ms_p10,step_ms_p90,speedup,scaling_efficiency,input_ms,copy_ms,"
               "compute_ms,reduce_ms,apply_ms,other_ms,predicted_step_ms,cores,repeats,images_per_sec_min,"
               "images_per_sec_max,ranks,local_avg_ms,push_ms,pull_ms,allgather_ms,network_predicted_ms,staleness_mean,"
               "staleness_max,ps_dedicated_ranks\n");
    for (int i = 0; i < n_rows; i++) {
        const BenchRow *r = &rows[i];
        TrainerOptions o;
        trainer_mode_set_flags(r->mode, &o);
        fprintf(f, "%s,%s,%s,%s,%s,%d,%d,%d,%d,%.2f,%.3f,%.3f,%.3f,", r->model, trainer_mode_name(r->mode),
                o.variable_update, o.local_parameter_device, o.all_reduce, r->towers, r->batch, r->global_batch,
                r->steps, r->images_per_sec, r->step_median, r->step_p10, r->step_p90);
        if (isnan(r->speedup)) fprintf(f, ",,");
        else fprintf(f, "%.4f,%.4f,", r->speedup, r->efficiency);
        fprintf(f, "%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,", r->phase.input, r->phase.copy, r->phase.compute, r->phase.reduce,
                r->phase.apply, r->phase.other);
        if (!isnan(r->predicted)) fprintf(f, "%.3f", r->predicted);
        fprintf(f, ",%d,%d,%.2f,%.2f,%d", r->cores, r->repeats, r->images_per_sec_min, r->images_per_sec_max, r->ranks);
        const double extra[7] = {r->local_avg_ms, r->push_ms, r->pull_ms,  r->gather_ms,
                                 r->net_predicted_ms, r->stale_mean, r->stale_max};
        for (int k = 0; k < 7; k++) {
            if (isnan(extra[k])) fprintf(f, ",");
            else fprintf(f, ",%.3f", extra[k]);
        }
        fprintf(f, ",%d\n", r->servers);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, err_n_bytes, "--csv %s: writing the file failed", path);
        return -1;
    }
    return 0;
}

/* A "nice" axis maximum >= v: 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten. */
static double nice_ceiling(double v) {
    static const double steps[] = {1, 1.5, 2, 2.5, 3, 4, 5, 6, 8};
    if (v <= 0) return 1.0;
    double p = pow(10.0, floor(log10(v)));
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (steps[i] * p >= v) return steps[i] * p;
    return 10 * p;
}

static const char *const mode_colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
#define N_MODE_COLORS ((int)(sizeof mode_colors / sizeof mode_colors[0]))

/* The throughput the chart plots: the global batch over the median step
 * time, the statistic the cost model predicts (a median step), so measured
 * and predicted lines compare like with like.  The table's images/sec is
 * the mean over the timed steps' wall time. */
static double median_step_images_per_sec(const BenchRow *r) {
    return r->step_median > 0 ? r->global_batch / (r->step_median * 1e-3) : NAN;
}

/* One panel per model: images/sec at the median step against towers, a
 * solid line per mode (and a dashed one for its prediction with --predict).
 * warning (may be "") is a third heading line, e.g. that other work was
 * running, as the table says. */
static int write_svg(const char *path, const BenchRow *rows, int n_rows, char **models, int n_models, int predict,
                     const char *subtitle, const char *warning, char *err, size_t err_n_bytes) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, err_n_bytes, "--svg %s: cannot create the file: %s", path, strerror(errno));
        return -1;
    }
    /* The legend under each plot: a line per mode (and per prediction), 16 px each from 52 px below the plot. */
    int n_entries = 0;
    for (int mode = 0; mode < TRAINER_N_MODES; mode++) {
        int measured = 0, predicted = 0;
        for (int i = 0; i < n_rows; i++) {
            measured |= (int)rows[i].mode == mode;
            predicted |= (int)rows[i].mode == mode && predict && !isnan(rows[i].predicted);
        }
        n_entries += measured + predicted;
    }
    const int pw = 420, ph = 300, ml = 70, mr = 20, mt = 76, mb = 52 + 16 * n_entries + 10 > 110 ? 52 + 16 * n_entries + 10 : 110;
    const int W = n_models * (pw + ml + mr) > 780 ? n_models * (pw + ml + mr) : 780, H = ph + mt + mb;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"15\">tower bench: images/sec at the median step time against towers, "
               "a line per variable placement mode</text>\n");
    fprintf(f, "<text x=\"10\" y=\"38\" fill=\"#555\">%s</text>\n", subtitle);
    if (warning && warning[0]) fprintf(f, "<text x=\"10\" y=\"54\" fill=\"#b00\">%s</text>\n", warning);
    for (int m = 0; m < n_models; m++) {
        const int x0 = m * (pw + ml + mr) + ml, y0 = mt;
        int max_towers = 1;
        double max_ips = 0.0;
        for (int i = 0; i < n_rows; i++) {
            if (strcmp(rows[i].model, models[m])) continue;
            if (rows[i].towers > max_towers) max_towers = rows[i].towers;
            double v = median_step_images_per_sec(&rows[i]);
            if (v > max_ips) max_ips = v;
            if (predict && !isnan(rows[i].predicted)) {
                double p = rows[i].global_batch / (rows[i].predicted * 1e-3);
                if (p > max_ips) max_ips = p;
            }
        }
        const double ymax = nice_ceiling(max_ips * 1.05);
        fprintf(f, "<g>\n<text x=\"%d\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\">%s</text>\n", x0 + pw / 2,
                y0 - 8, models[m]);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", x0, y0, pw, ph);
        for (int k = 0; k <= 5; k++) {
            double v = ymax * k / 5;
            int y = y0 + ph - (int)(ph * k / 5);
            fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#eee\"/>", x0, y, x0 + pw, y);
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f</text>\n", x0 - 6, y + 4, v);
        }
        for (int n = 1; n <= max_towers; n++) {
            int x = x0 + (max_towers == 1 ? pw / 2 : (int)((double)(n - 1) / (max_towers - 1) * (pw - 40)) + 20);
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", x, y0 + ph + 16, n);
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">towers</text>\n", x0 + pw / 2, y0 + ph + 34);
        fprintf(f, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">images/sec</text>\n",
                x0 - 52, y0 + ph / 2);
        int legend = 0;
        for (int mode = 0; mode < TRAINER_N_MODES; mode++) {
            for (int pass = 0; pass < (predict ? 2 : 1); pass++) {
                char points[4096] = "";
                size_t used = 0;
                int n_points = 0;
                for (int i = 0; i < n_rows; i++) {
                    const BenchRow *r = &rows[i];
                    if (strcmp(r->model, models[m]) || (int)r->mode != mode) continue;
                    double v = pass == 0 ? median_step_images_per_sec(r) : r->global_batch / (r->predicted * 1e-3);
                    if (!(v >= 0)) continue;
                    int x = x0 + (max_towers == 1 ? pw / 2
                                                  : (int)((double)(r->towers - 1) / (max_towers - 1) * (pw - 40)) + 20);
                    int y = y0 + ph - (int)(v / ymax * ph);
                    used += (size_t)snprintf(points + used, sizeof points - used, "%d,%d ", x, y);
                    if (used >= sizeof points) used = sizeof points - 1;
                    if (pass == 0)
                        fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"%s\"><title>%s %d tower(s): %.1f "
                                   "images/sec at the median step (%.1f over the timed steps)</title></circle>\n", x, y,
                                mode_colors[mode % N_MODE_COLORS], trainer_mode_name((TrainerMode)mode), r->towers, v, r->images_per_sec);
                    n_points++;
                }
                if (!n_points) continue;
                fprintf(f, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", points,
                        mode_colors[mode % N_MODE_COLORS], pass ? " stroke-dasharray=\"6,4\"" : "");
                int ly = y0 + ph + 52 + 16 * legend++;
                fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>", x0,
                        ly - 4, x0 + 24, ly - 4, mode_colors[mode % N_MODE_COLORS], pass ? " stroke-dasharray=\"6,4\"" : "");
                fprintf(f, "<text x=\"%d\" y=\"%d\">%s%s</text>\n", x0 + 30, ly, trainer_mode_name((TrainerMode)mode),
                        pass ? " (cost model)" : " (measured)");
            }
        }
        fprintf(f, "</g>\n");
    }
    fprintf(f, "</svg>\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, err_n_bytes, "--svg %s: writing the file failed", path);
        return -1;
    }
    return 0;
}

/* ---- the command ---- */

/* Whether path can be written, tried before the benchmark runs: an existing
 * file is opened for writing (not truncated), a missing one is created and
 * removed again.  0, or -1 with err in the words of the writers. */
static int check_writable(const char *flag, const char *path, char *err, size_t err_n_bytes) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    const int created = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = open(path, O_WRONLY);
    if (fd < 0) {
        snprintf(err, err_n_bytes, "--%s %s: cannot create the file: %s", flag, path, strerror(errno));
        return -1;
    }
    close(fd);
    if (created) unlink(path);
    return 0;
}

/* --modes' help: every entry of train/modes.c's table, by name. */
static const char *modes_help(void) {
    static char help[512];
    int n = snprintf(help, sizeof help, "comma-separated modes:");
    for (int m = 0; m < TRAINER_N_MODES && n > 0 && (size_t)n < sizeof help; m++)
        n += snprintf(help + n, sizeof help - (size_t)n, "%s %s", m ? "," : "", trainer_mode_name((TrainerMode)m));
    if (n > 0 && (size_t)n < sizeof help)
        snprintf(help + n, sizeof help - (size_t)n, " (or parameter_server/cpu, replicated/host, ...; docs/modes.md)");
    return help;
}

static int bench_flags(BenchOptions *o, Flag *flags) {
    const Flag table[] = {
        {"models", FLAG_STRING, &o->models, cmd_model_help("comma-separated models")},
        {"width_multiplier", FLAG_FLOAT, &o->width_multiplier, "mobilenet_v2: Keras's alpha", FLAG_RANGE(0, 16, "(]", NULL)},
        {"head", FLAG_STRING, &o->head, "mobilenet_v2: keras or seed (as tower train)"},
        {"fc_width", FLAG_INT, &o->fc_width, "vgg11, vgg16: units of fc1 and fc2 (as tower train)", FLAG_RANGE(1, 65536, "[]", NULL)},
        {"modes", FLAG_STRING, &o->modes, modes_help()},
        {"device", FLAG_STRING, &o->device, "tower device: cpu, gpu or auto (GPU towers when a GPU is usable); ps_gpu and replicated_nccl need GPU towers"},
        {"deterministic", FLAG_BOOL, &o->deterministic, "GPU towers: only deterministic convolution algorithms (cuDNN's that cuDNN calls so; Tower's GEMMs are; an error when a layer has none)"},
        {"towers", FLAG_STRING, &o->towers, "comma-separated tower counts"},
        {"batch_size", FLAG_INT, &o->batch_size, "examples per tower per step", FLAG_RANGE(1, 1 << 20, "[]", NULL)},
        {"steps", FLAG_INT, &o->steps, "timed steps per configuration", FLAG_RANGE(1, 1000000, "[]", NULL)},
        {"warmup", FLAG_INT, &o->warmup, "untimed steps first", FLAG_RANGE(0, 1000000, "[]", NULL)},
        {"repeat", FLAG_INT, &o->repeat, "run the matrix this many times, interleaved; report each configuration's median run", FLAG_RANGE(1, 99, "[]", NULL)},
        {"data", FLAG_STRING, &o->data, "TFRecord files (comma-separated globs) instead of synthetic data in memory; give one model"},
        {"image_key", FLAG_STRING, &o->image_key, "--data: the Example feature holding the image, raw or an encoded JPEG or PNG (as tower train)"},
        {"label_key", FLAG_STRING, &o->label_key, "--data: the Example feature holding the label (as tower train)"},
        {"image_size", FLAG_INT, &o->image_size, "--data: tower train's --image_size (encoded images: the size they are resized to; cifar10: its crop)", FLAG_RANGE(0, CMD_MAX_IMAGE_SIZE, "[]", "0: tower train's default")},
        {"csv", FLAG_STRING, &o->csv, "write the table here as CSV (\"\": not written)"},
        {"svg", FLAG_STRING, &o->svg, "write the chart here as SVG (\"\": not written)"},
        {"trace", FLAG_STRING, &o->trace, "FILE.json: write each configuration's timeline to FILE-<model>-<mode>-<towers>.json"},
        {"predict", FLAG_BOOL, &o->predict, "fit the cost model of docs/modes.md and print its predictions beside the measurements"},
        {"predict_max_towers", FLAG_INT, &o->predict_max_towers, "--predict: the what-if table goes up to this many towers", FLAG_RANGE(1, 4096, "[]", NULL)},
        {"predict_copy_gbps", FLAG_FLOAT, &o->predict_copy_gbps, "--predict what-if: host<->device GB/s per tower (0: measured memcpy)", FLAG_RANGE(0, 1e6, "[]", NULL)},
        {"predict_allreduce_gbps", FLAG_FLOAT, &o->predict_allreduce_gbps, "--predict what-if: all-reduce GB/s per link (0: measured host ring)", FLAG_RANGE(0, 1e6, "[]", NULL)},
        {"predict_compute_ms", FLAG_FLOAT, &o->predict_compute_ms, "--predict what-if: forward+backward ms per tower (0: measured: the 1-tower row, else the first row)", FLAG_RANGE(0, 1e7, "[]", NULL)},
        {"predict_nets", FLAG_STRING, &o->predict_nets, "what-if for these networks (e.g. vgg16,resnet50) at each --predict_sizes, without training them: the parameter server against the ring at 1, 2, 4, 8 towers"},
        {"predict_sizes", FLAG_STRING, &o->predict_sizes, "--predict_nets: comma-separated square input sizes (from 128: 1000 classes, else 10)"},
        {"device_tflops", FLAG_FLOAT, &o->device_tflops, "--predict_nets: achieved TFLOP/s of one tower's device (0: this machine's rate, measured on each network at 32x32)", FLAG_RANGE(0, 1e6, "[]", NULL)},
        {"device_update_gbps", FLAG_FLOAT, &o->device_update_gbps, "--predict_nets: a replica's optimizer update on its tower's device, GB/s of variables (0: this host's, measured on one thread)", FLAG_RANGE(0, 1e6, "[]", NULL)},
        {"predict_hosts", FLAG_BOOL, &o->predict_hosts, "--predict_nets: also the cost model across hosts (ring, parameter servers, BytePS-style, all-gather)"},
        {"predict_link_gbits", FLAG_STRING, &o->link_gbits, "--predict_hosts: comma-separated link speeds in Gb/s"},
        {"predict_host_counts", FLAG_STRING, &o->host_counts, "--predict_hosts: comma-separated host counts"},
        {"predict_gpus_per_host", FLAG_INT, &o->gpus_per_host, "--predict_hosts: towers per host", FLAG_RANGE(1, 4096, "[]", NULL)},
        {"predict_link_latency_us", FLAG_FLOAT, &o->link_latency_us, "--predict_hosts: one message's latency on a link, microseconds (assumed)", FLAG_RANGE(0, 1e7, "[]", NULL)},
        {"predict_local_gbps", FLAG_FLOAT, &o->local_gbps, "--predict_hosts: intra-host all-reduce bus bandwidth, GB/s (assumed)", FLAG_RANGE(0, 1e6, "(]", NULL)},
        {"predict_server_gbps", FLAG_FLOAT, &o->server_gbps, "--predict_hosts: a parameter server's summation rate, GB/s read + written (0: this CPU's, measured)", FLAG_RANGE(0, 1e6, "[]", NULL)},
        {"predict_only", FLAG_BOOL, &o->predict_only, "print the --predict_nets tables only (no matrix, no CSV or SVG)"},
        {"ps_dedicated", FLAG_INT, &o->ps_dedicated, "under mpirun -np R: the parameter_server modes across ranks run with the first N ranks as parameter servers only (tower train's --ps_dedicated --ps_ranks N; the other R - N ranks are the workers); the replicated modes ignore it (0: every rank a worker)", FLAG_RANGE(0, INFINITY, "[)", NULL)},
        {"seed", FLAG_LONG, &o->seed, "seed of the variables and of the synthetic data"},
    };
    int n = (int)(sizeof table / sizeof table[0]);
    if (flags) memcpy(flags, table, sizeof table);
    return n;
}

/* Under mpirun every rank checks its own command line, rank 0 aloud (cmd_bench), and the ranks agree on the outcome
 * before the first collective: a refusal on any rank ends every rank with one line.  bench_checked: this rank got
 * past its checks (bench_agree_checks); bench_refused: the job stopped at the agreement (no MPI_Abort). */
static int bench_checked = 0, bench_refused = 0;
/* 1 while cmd_bench runs bench_main again on the rank that refused first, aloud: no collective then. */
static int bench_saying_again = 0;

/* Flags that may differ between the ranks: the files rank 0 alone writes. */
static const char *const bench_per_rank_flags[] = {"csv", "svg", NULL};

/* The end of bench_main's checks, passed on this rank: 1 when another rank refused its command line, or when the
 * ranks were given other flags (the matrix runs in step: another --steps left the others waiting), after the line
 * saying it (cmd_check_same_flags); this rank then ends with exit 2.  Else 0.  Pairs with cmd_bench's
 * cmd_agree_refusal on a rank that refused. */
static int bench_agree_checks(const Flag *flags, int n_flags) {
    bench_checked = 1;
    flags_quiet(0);
    cmd_errors_quiet(0);
    if (ranks_size() < 2) return 0;
    if (cmd_agree_refusal(0, NULL, NULL) < 0 && cmd_check_same_flags("bench", flags, n_flags, bench_per_rank_flags) == 0)
        return 0;
    bench_refused = 1;
    return 1;
}

static int bench_main(int argc, char **argv) {
    BenchOptions o = {
        .models = "mnist,cifar10", .modes = "ps_cpu,replicated_host", .device = "auto", .towers = "1,2,4", .data = "",
        .image_key = "image_raw", .label_key = "label",
        .csv = "tower_bench.csv", .svg = "tower_bench.svg", .trace = "", .batch_size = 32, .steps = 20, .warmup = 3, .repeat = 1,
        .predict = 0, .predict_max_towers = 8, .seed = 1, .width_multiplier = 1.0f, .head = "keras", .fc_width = 4096,
        .predict_nets = "", .predict_sizes = "224,32", .link_gbits = "10,25,100", .host_counts = "8,16,32,64,128,256",
        .gpus_per_host = 8, .link_latency_us = 10.0f, .local_gbps = 100.0f,
    };
    Flag flags[64];
    int n_flags = bench_flags(&o, flags);
    char *positional[argc > 0 ? argc : 1];
    int n_positional;
    int rc = flags_parse(flags, n_flags, argc, argv, positional, &n_positional);
    if (ranks_size() > 1 && !bench_saying_again) { /* rank 0's --help: the job's usage, every rank ends with 0 */
        int help0 = rc == 1;
        ranks_bcast(&help0, sizeof help0);
        if (help0) {
            bench_checked = 1;
            if (ranks_rank() == 0) flags_print_usage("tower bench", "[flags]", flags, n_flags);
            return 0;
        }
    }
    if (rc == 1 && ranks_size() > 1) {
        cmd_errorf("tower bench: --help was given to this rank but not to rank 0: every rank of the job needs the "
                   "same flags (docs/hosts.md)\n");
        return 2;
    }
    if (rc == 1) {
        flags_print_usage("tower bench", "[flags]", flags, n_flags);
        return 0;
    }
    if (rc != 0 || cmd_check_no_arguments("bench", o.data[0] ? o.data : NULL, positional, n_positional) != 0 ||
        cmd_model_options("bench", o.width_multiplier, o.head, o.fc_width, &o.model_opts) != 0)
        return 2;

    char err[1200];
    char models_buf[256], modes_buf[512], towers_buf[256];
    char *models[BENCH_MAX_LIST], *mode_names[BENCH_MAX_LIST], *tower_items[BENCH_MAX_LIST];
    int n_models, n_modes, n_tower_counts;
    if (bench_list("models", o.models, models_buf, sizeof models_buf, models, BENCH_MAX_LIST, &n_models) ||
        bench_list("modes", o.modes, modes_buf, sizeof modes_buf, mode_names, BENCH_MAX_LIST, &n_modes) ||
        bench_list("towers", o.towers, towers_buf, sizeof towers_buf, tower_items, BENCH_MAX_LIST, &n_tower_counts))
        return 2;
    TrainerMode modes[BENCH_MAX_LIST];
    int tower_counts[BENCH_MAX_LIST];
    if (n_models < 1 || n_modes < 1 || n_tower_counts < 1) {
        cmd_errorf("tower bench: --models, --modes and --towers each need at least one value\n");
        return 2;
    }
    for (int i = 0; i < n_models; i++) {
        if (!model_net_find(models[i])) {
            char names[256];
            model_net_names(names, sizeof names);
            cmd_errorf("tower bench: --models: unknown model '%s' (expected %s)\n", models[i], names);
            return 2;
        }
    }
    for (int i = 0; i < n_modes; i++) {
        if (trainer_mode_from_name(mode_names[i], &modes[i], err, sizeof err) != 0) {
            cmd_errorf("tower bench: --modes: %s\n", err);
            return 2;
        }
        if (!trainer_mode_available(modes[i], err, sizeof err)) {
            cmd_errorf("tower bench: --modes %s: %s\n", mode_names[i], err);
            return 1;
        }
        for (int j = 0; j < i; j++)
            if (modes[j] == modes[i]) { /* a second row of it would be the first's baseline: speedup 0.29x */
                cmd_errorf("tower bench: --modes names %s twice, as %s and %s (--repeat measures a configuration "
                           "again)\n", trainer_mode_name(modes[i]), mode_names[j], mode_names[i]);
                return 2;
            }
    }
    if (bench_int_list("towers", tower_items, n_tower_counts, 1, TOWER_MAX_TOWERS, "a tower count", tower_counts))
        return 2;
    if (o.data[0] && n_models != 1) {
        cmd_errorf("tower bench: --data holds one kind of image: give exactly one --models\n");
        return 2;
    }
    static const char *const devices[] = {"cpu", "gpu", "auto", NULL};
    if (cmd_check_choice("bench", "device", o.device, devices) ||
        (o.data[0] && cmd_check_data_paths("bench", "data", o.data)))
        return 2;
    /* --predict_nets and --predict_hosts: their lists. */
    char nets_buf[256], sizes_buf[128], gbits_buf[128], hosts_buf[256];
    char *nets[BENCH_MAX_LIST], *size_items[BENCH_MAX_LIST], *gbit_items[BENCH_MAX_LIST], *host_items[BENCH_MAX_LIST];
    int n_nets, n_sizes, n_gbits, n_hosts;
    if (bench_list("predict_nets", o.predict_nets, nets_buf, sizeof nets_buf, nets, BENCH_MAX_LIST, &n_nets) ||
        bench_list("predict_sizes", o.predict_sizes, sizes_buf, sizeof sizes_buf, size_items, BENCH_MAX_LIST, &n_sizes) ||
        bench_list("predict_link_gbits", o.link_gbits, gbits_buf, sizeof gbits_buf, gbit_items, BENCH_MAX_LIST, &n_gbits) ||
        bench_list("predict_host_counts", o.host_counts, hosts_buf, sizeof hosts_buf, host_items, BENCH_MAX_LIST, &n_hosts))
        return 2;
    int sizes[BENCH_MAX_LIST], hosts[BENCH_MAX_LIST];
    double gbits[BENCH_MAX_LIST];
    for (int i = 0; i < n_nets; i++) {
        if (!model_net_find(nets[i])) {
            char names[256];
            model_net_names(names, sizeof names);
            cmd_errorf("tower bench: --predict_nets: unknown model '%s' (expected %s)\n", nets[i], names);
            return 2;
        }
    }
    if (bench_int_list("predict_sizes", size_items, n_sizes, 32, 1024, "an input size", sizes)) return 2;
    for (int i = 0; i < n_gbits; i++) {
        char *end;
        gbits[i] = strtod(gbit_items[i], &end);
        if (end == gbit_items[i] || *end || !(gbits[i] > 0) || gbits[i] > 1e6) {
            cmd_errorf("tower bench: --predict_link_gbits: '%s' is not a link speed in (0, 1e6] Gb/s\n", gbit_items[i]);
            return 2;
        }
        if (bench_repeats("predict_link_gbits", gbit_items, gbits, i)) return 2;
    }
    if (bench_int_list("predict_host_counts", host_items, n_hosts, 1, BENCH_MAX_RANKS, "a host count", hosts)) return 2;
    if ((o.predict_only || o.predict_hosts) && n_nets < 1) {
        cmd_errorf("tower bench: --%s needs --predict_nets (e.g. vgg16,resnet50)\n",
                o.predict_only ? "predict_only" : "predict_hosts");
        return 2;
    }
    if (n_nets > 0 && (n_sizes < 1 || (o.predict_hosts && (n_gbits < 1 || n_hosts < 1)))) {
        cmd_errorf("tower bench: --predict_sizes, --predict_link_gbits and --predict_host_counts each need at least one value\n");
        return 2;
    }
    const int R = ranks_size();
    if (o.ps_dedicated < 0 || (o.ps_dedicated > 0 && o.ps_dedicated >= R)) {
        cmd_errorf("tower bench: --ps_dedicated %d: expected 0, or 1 to R - 1 under mpirun -np R (servers and at "
                "least one worker); this run has %d rank(s)\n", o.ps_dedicated, R);
        return 2;
    }
    const char *trace_base = strrchr(o.trace, '/') ? strrchr(o.trace, '/') + 1 : o.trace;
    struct stat trace_sb;
    if (o.trace[0] && (!trace_base[0] || !strcmp(trace_base, ".json") ||
                       (stat(o.trace, &trace_sb) == 0 && S_ISDIR(trace_sb.st_mode)))) {
        cmd_errorf("tower bench: --trace %s names a folder, not a file: give FILE.json (each configuration's timeline "
                   "is written to FILE-<model>-<mode>-<towers>.json)\n", o.trace);
        return 2;
    }
    if (R > 1 && (o.trace[0] || o.predict || n_nets > 0)) {
        cmd_errorf("tower bench: under mpirun with %d ranks only the matrix runs: --%s is for one process\n", R,
                o.trace[0] ? "trace" : o.predict ? "predict" : "predict_nets");
        return 2;
    }
    if (bench_agree_checks(flags, n_flags)) return 2;

    if (n_nets > 0) {
        HostRates h;
        if (measure_host_rates(&h, err, sizeof err) != 0) {
            cmd_errorf("tower bench: %s\n", err);
            return 1;
        }
        char ts0[64];
        trainer_timestamp(ts0, sizeof ts0);
        printf("%s: tower bench --predict_nets: %ld cores, load average %.2f%s; host rates measured on %zu MiB buffers\n",
               ts0, online_cores(), load_average(),
               load_average() > online_cores() * 0.5 ? " (other work is running: measured rates are noisy)" : "",
               RATE_N_FLOATS * sizeof(float) >> 20);
        for (int i = 0; i < n_nets; i++) {
            double gflops = NAN;
            const int cap = o.batch_size < 32 ? o.batch_size : 32;
            if (o.device_tflops <= 0 && measure_compute_gflops(nets[i], &o.model_opts, cap, &gflops, err, sizeof err) != 0) {
                cmd_errorf("tower bench: %s\n", err);
                return 1;
            }
            for (int k = 0; k < n_sizes; k++) {
                NetFacts nf;
                if (net_facts(&o, nets[i], sizes[k], gflops, &nf, err, sizeof err) != 0) {
                    cmd_errorf("tower bench: --predict_nets: %s\n", err);
                    return 2;
                }
                print_net_towers(&o, &nf, &h);
                if (o.predict_hosts) print_net_hosts(&o, &nf, &h, gbits, n_gbits, hosts, n_hosts);
            }
        }
        fflush(stdout);
        if (o.predict_only) return 0;
    }

    /* The outputs are tried now: a path that cannot be written is found before the benchmark, not after it. */
    if (ranks_rank() != 0) o.csv = o.svg = ""; /* rank 0 writes them */
    struct stat csv_sb, svg_sb;
    if (o.csv[0] && o.svg[0] &&
        (!strcmp(o.csv, o.svg) || (stat(o.csv, &csv_sb) == 0 && stat(o.svg, &svg_sb) == 0 &&
                                   csv_sb.st_dev == svg_sb.st_dev && csv_sb.st_ino == svg_sb.st_ino))) {
        cmd_errorf("tower bench: --csv and --svg name the same file %s: the chart would replace the table\n", o.csv);
        return 2;
    }
    const int unwritable = (o.csv[0] && check_writable("csv", o.csv, err, sizeof err) != 0) ||
                           (o.svg[0] && check_writable("svg", o.svg, err, sizeof err) != 0);
    if (unwritable) cmd_errorf("tower bench: %s\n", err);
    if (ranks_size() > 1 && cmd_agree_refusal(unwritable, NULL, NULL) >= 0) { /* rank 0's: every rank ends, no abort */
        bench_refused = 1;
        return 1;
    }
    if (unwritable) return 1;
    if (o.trace[0]) {
        BenchRow first = {.model = models[0], .mode = modes[0], .towers = tower_counts[0]};
        char trace_path[1200];
        trace_path_for(o.trace, &first, trace_path, sizeof trace_path);
        if (check_writable("trace", trace_path, err, sizeof err) != 0) {
            cmd_errorf("tower bench: %s\n", err);
            return 1;
        }
    }

    const double load = load_average();
    char ts[64], subtitle[512];
    trainer_timestamp(ts, sizeof ts);
    snprintf(subtitle, sizeof subtitle, "%ld CPU cores, batch %d per tower, %s data, %d timed steps after %d warm-up; %.19s",
             online_cores(), o.batch_size, o.data[0] ? "TFRecord" : "synthetic", o.steps, o.warmup, ts);
    printf("%s: tower bench: %d model(s) x %d mode(s) x %d tower count(s); %ld cores, load average %.2f at the start%s\n",
           ts, n_models, n_modes, n_tower_counts, online_cores(), load,
           load > online_cores() * 0.5 ? " (other work is running: figures will be noisy)" : "");
    if (o.warmup == 0)
        printf("--warmup 0: every configuration's first step, its start-up (threads, first touch of its buffers), is "
               "timed with the rest: the first configuration's speedups are not the steady state's\n");
    fflush(stdout);

    /* --predict: this machine's figures first, before the matrix loads it with threads and buffers */
    static TrainCostFigures figures[BENCH_MAX_LIST];
    for (int m = 0; o.predict && m < n_models; m++) {
        if (measure_figures(models[m], &o.model_opts, &figures[m], err, sizeof err) != 0) {
            cmd_errorf("tower bench: %s\n", err);
            return 1;
        }
    }

    PingPong pp;
    measure_pingpong(&pp);
    if (R > 1)
        printf("ping-pong rank 0 <-> rank %d: latency %.1f us (half the round trip of %zu bytes), %.2f GB/s (%zu bytes)\n",
               R - 1, pp.alpha_sec * 1e6, pingpong_sizes[0], pp.gbps, pingpong_sizes[PINGPONG_N_SIZES - 1]);

    static BenchRow rows[BENCH_MAX_ROWS];
    int n_rows = 0;
    for (int m = 0; m < n_models; m++) {
        for (int k = 0; k < n_modes; k++) {
            for (int t = 0; t < n_tower_counts && n_rows < BENCH_MAX_ROWS; t++) {
                BenchRow *r = &rows[n_rows++];
                memset(r, 0, sizeof *r);
                r->model = models[m];
                r->mode = modes[k];
                r->towers = tower_counts[t];
                r->batch = o.batch_size;
            }
        }
    }
    /* Every mode opens here (with the first model and tower count) before anything is measured. */
    for (int k = 0; k < n_modes; k++) {
        BenchRow probe = rows[k * n_tower_counts];
        const int prc = preflight_row(&o, &probe, err, sizeof err);
        if (prc != 0) { /* TRAINER_OPEN_REFUSED: every rank stops here, the lowest that refused says why */
            if (err[0])
                cmd_errorf("tower bench: %s, %s, %d tower(s): %s (nothing measured)\n", probe.model,
                           trainer_mode_name(probe.mode), probe.towers, err);
            bench_refused = prc == TRAINER_OPEN_REFUSED;
            return 1;
        }
    }
    /* runs[i * repeat + k]: configuration i's k-th run */
    BenchRow *runs = calloc((size_t)n_rows * (size_t)o.repeat, sizeof *runs);
    if (!runs) {
        cmd_errorf("tower bench: out of memory\n");
        return 1;
    }
    for (int k = 0; k < o.repeat; k++) {
        for (int i = 0; i < n_rows; i++) {
            BenchRow *r = &runs[i * o.repeat + k];
            *r = rows[i];
            const int rrc = run_config(&o, r, &pp, err, sizeof err);
            if (rrc != 0) {
                if (err[0])
                    cmd_errorf("tower bench: %s, %s, %d tower(s): %s\n", r->model, trainer_mode_name(r->mode),
                               r->towers, err);
                bench_refused = rrc == TRAINER_OPEN_REFUSED;
                free(runs);
                return 1;
            }
            printf("  run %d/%d  %-8s %-16s %2d tower(s): %8.1f images/sec, step %.1f ms\n", k + 1, o.repeat, r->model,
                   trainer_mode_name(r->mode), r->towers, r->images_per_sec, r->step_median);
            fflush(stdout);
        }
    }
    for (int i = 0; i < n_rows; i++) {
        BenchRow *rs = &runs[i * o.repeat];
        double ips[100];
        for (int k = 0; k < o.repeat; k++) ips[k] = rs[k].images_per_sec;
        double lo = ips[0], hi = ips[0];
        for (int k = 1; k < o.repeat; k++) {
            if (ips[k] < lo) lo = ips[k];
            if (ips[k] > hi) hi = ips[k];
        }
        double target = quantile(ips, o.repeat, 0.5);
        int best = 0; /* the run closest to the median (the median run itself for odd R) */
        for (int k = 1; k < o.repeat; k++)
            if (fabs(rs[k].images_per_sec - target) < fabs(rs[best].images_per_sec - target)) best = k;
        rows[i] = rs[best];
        rows[i].images_per_sec_min = lo;
        rows[i].images_per_sec_max = hi;
        rows[i].repeats = o.repeat;
        rows[i].speedup = rows[i].efficiency = rows[i].predicted = NAN;
    }
    free(runs);
    for (int i = 0; i < n_rows; i++) {
        for (int j = 0; j < n_rows; j++) {
            if (rows[j].towers == 1 && rows[j].mode == rows[i].mode && !strcmp(rows[j].model, rows[i].model)) {
                rows[i].speedup = rows[i].images_per_sec / rows[j].images_per_sec;
                rows[i].efficiency = rows[i].speedup / rows[i].towers;
            }
        }
    }

    if (o.predict) {
        for (int m = 0; m < n_models; m++) {
            const TrainCostFigures *f = &figures[m];
            double compute_1 = NAN;
            for (int i = 0; i < n_rows; i++) {
                if (strcmp(rows[i].model, models[m])) continue;
                rows[i].predicted = predict_row(&rows[i], f);
                if (rows[i].towers == 1 && isnan(compute_1)) compute_1 = rows[i].phase.compute;
            }
            /* No 1-tower row: the first row's per-tower time as measured (towers beyond the cores run mostly one
             * after another, each span near one tower's alone: 6.4 ms a tower at 8 towers on 2 cores, 5.4 alone). */
            char compute_source[96] = "the 1-tower row's";
            for (int i = 0; i < n_rows && isnan(compute_1); i++) {
                if (strcmp(rows[i].model, models[m])) continue;
                compute_1 = rows[i].phase.compute;
                snprintf(compute_source, sizeof compute_source, "the %d-tower row's: no 1-tower row ran", rows[i].towers);
            }
            printf("\ncost model figures, %s (measured before the matrix): variables %.1f MB; memcpy %.1f GB/s (1 thread); "
                   "CPU average %.1f GB/s; server update %.2f ms; replica update %.2f ms (1 thread); moving averages "
                   "%.2f ms (1 thread); ring %.1f GB/s per rank, %.3f ms per phase; %d cores\n",
                   models[m], f->model_n_bytes / 1e6, f->copy_gbps, f->reduce_gbps, f->ps_apply_ms, f->opt_1thread_ms,
                   f->ema_1thread_ms, f->ring_gbps, f->barrier_ms, f->cores);
            print_what_if(&o, models[m], f, compute_1, compute_source);
        }
    }
    print_table(rows, n_rows, o.predict);
    print_ranks_table(rows, n_rows, &pp);
    char safe[ESCAPE_PATH_N_BYTES];
    if (o.csv[0]) {
        if (write_csv(o.csv, rows, n_rows, err, sizeof err) != 0) {
            cmd_errorf("tower bench: %s\n", err);
            return 1;
        }
        printf("table written to %s\n", escape_str(safe, sizeof safe, o.csv));
    }
    if (o.svg[0]) {
        char warning[160] = "";
        if (load > online_cores() * 0.5)
            snprintf(warning, sizeof warning, "other work was running (load average %.2f on %ld cores at the start): figures are noisy",
                     load, online_cores());
        if (write_svg(o.svg, rows, n_rows, models, n_models, o.predict, subtitle, warning, err, sizeof err) != 0) {
            cmd_errorf("tower bench: %s\n", err);
            return 1;
        }
        printf("chart written to %s\n", escape_str(safe, sizeof safe, o.svg));
    }
    if (o.trace[0]) { /* the stem: the name without its .json */
        const size_t n = strlen(o.trace), stem_n = n > 5 && !strcmp(o.trace + n - 5, ".json") ? n - 5 : n;
        printf("timelines written to %s-<model>-<mode>-<towers>.json\n", escape_bytes(safe, sizeof safe, o.trace, stem_n));
    }
    return 0;
}

/* The refusal of the rank that refused first, said again (cmd_agree_refusal's say_again): bench_main on its
 * command line, aloud, without its collectives, this rank named in base/flags' lines. */
typedef struct {
    int argc;
    char **argv; /* (argc + 1): NULL last */
} BenchArgs;

static void bench_again(void *ctx) {
    const BenchArgs *a = ctx;
    char program[96], *tagged[a->argc + 1];
    cmd_rank_program("bench", program, sizeof program);
    memcpy(tagged, a->argv, (size_t)(a->argc + 1) * sizeof *a->argv);
    tagged[0] = program;
    bench_saying_again = 1;
    (void)bench_main(a->argc, tagged);
    bench_saying_again = 0;
}

/* The job around the benchmark: MPI started (under mpirun) before any
 * thread, the other ranks quiet, the job ended on any rank's error. */
int cmd_bench(int argc, char **argv) {
    char err[512];
    if (ranks_init(&argc, &argv, err, sizeof err) != 0) {
        cmd_errorf("tower bench: %s\n", err);
        return 1;
    }
    const int rank = ranks_rank();
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) cmd_errorf("tower bench: rank %d: cannot silence stdout\n", rank);
    flags_quiet(rank != 0);
    cmd_errors_quiet(rank != 0);
    int rc = bench_main(argc, argv);
    if (!bench_checked) { /* refused (or --help) before the agreement: the other ranks wait in it, or are here */
        flags_quiet(0);
        cmd_errors_quiet(0);
        if (ranks_size() > 1) {
            BenchArgs args = {argc, argv};
            (void)cmd_agree_refusal(1, bench_again, &args);
            bench_refused = 1;
        }
    }
    if (rc != 0 && ranks_size() > 1 && !bench_refused) {
        cmd_errorf("tower bench: rank %d of %d ends the job (exit %d)\n", rank, ranks_size(), rc);
        ranks_abort(rc);
    }
    ranks_finalize();
    return rc;
}
