/* trainer.h — the training step as a library: the input pipeline (io/),
 * the towers (tower/) and the parameter server (ps/), wired together by a
 * variable placement mode (train/mode.h, one file per mode).
 *
 * Where it sits: train/, between cmd/ (which parses flags and prints) and
 * tower/, ps/, io/.  `tower train`, `tower bench`, the tests and the
 * benchmarks all drive these same functions.  It owns nothing of the
 * math.  One call of trainer_step, in the default mode (--variable_update
 * parameter_server --local_parameter_device cpu, TensorFlow's
 * cifar10_multi_gpu_train; train/mode_ps_cpu.c):
 *
 *     pipeline_next          the next global batch, split into tower shards
 *     tower_group_run        each tower: copy the variables in, forward and
 *                            backward on its shard, deliver its gradients
 *     ps_average_grads       the mean of the tower gradients, in tower order
 *     ps_apply_gradients     the optimizer, global_step + 1, moving averages
 *     train_update_moving    batch norm's moving statistics from the towers'
 *                            batch statistics, their mean in tower order
 *                            (train/batch_norm.c; every mode, after its update)
 *
 * and in --variable_update replicated --all_reduce host (MirroredStrategy,
 * DistributedDataParallel, Horovod on CPU towers; train/mode_replicated_host.c):
 *
 *     pipeline_next          as above
 *     tower_group_run        each tower, on its own variables (no copy-in):
 *                            forward and backward, then on the tower threads
 *                            allreduce_host_ring_mean (every tower's gradient
 *                            becomes the mean) and ps_replica_apply (each
 *                            tower updates its own variables and slots, and
 *                            its 1/N share of the moving averages)
 *     ps_finish_replicated_step   global_step + 1
 *
 * The GPU modes keep the variables on the GPUs (ps/ps_gpu.h); the host
 * block is then a copy for checkpoints, refreshed by trainer_save and
 * trainer_variables.  --variable_update parameter_server
 * --local_parameter_device gpu (PyTorch's DataParallel; train/mode_ps_gpu.c):
 *
 *     pipeline_next          as above
 *     tower_group_run        each tower: the variables in from the server's
 *                            GPU (tower 0's; peer copies), forward and
 *                            backward, its gradient out to that GPU
 *     ps_gpu_step            mean, optimizer, global_step + 1, moving
 *                            averages, all by kernels on that GPU
 *
 * and --variable_update replicated --all_reduce nccl (MirroredStrategy,
 * DistributedDataParallel with NCCL; train/mode_replicated_nccl.c):
 *
 *     pipeline_next          as above
 *     tower_group_run        each tower, on its own device variables (no
 *                            copy-in, no copy-out): forward and backward,
 *                            then on the tower threads allreduce_nccl_mean
 *                            (summed per GPU, NCCL across GPUs, divided by
 *                            the tower count) and ps_gpu_replica_apply
 *     ps_finish_replicated_step   global_step + 1
 *
 * The modes, what moves where and when each wins: docs/modes.md.
 */
#ifndef TOWER_TRAIN_TRAINER_H
#define TOWER_TRAIN_TRAINER_H

#include "io/pipeline.h"
#include "model/model.h"
#include "ps/allreduce_host.h"
#include "ps/allreduce_nccl.h"
#include "ps/checkpoint.h"
#include "ps/ps.h"
#include "ps/ps_gpu.h"
#include "tower/tower.h"
#include "train/trace.h"

struct Trainer; /* below: TrainerOptions.check_data sees it */

/* Everything `tower train` can be told; defaults in trainer_options_defaults. */
typedef struct {
    const char *model;              /* a name of THE table of networks (model/nets/nets.c) */
    const char *data;               /* comma-separated globs of TFRecord files, or one image folder DIR/<class>/FILE */
    const char *train_dir;
    int no_checkpoints;             /* 1: the caller saves nothing (tower bench): train_dir is not looked at */
    const char *device;             /* "cpu" | "gpu" | "auto" */
    const char *optimizer;          /* "momentum" | "sgd" | "adam" | "rmsprop" | "adamw" (ps/optimizer.h) */
    const char *image_key, *label_key;
    const char *compression;        /* "auto" | "none" | "gzip" | "zlib" */
    const char *shard_sizes;        /* "" (equal) or e.g. "80,48": examples per tower (and micro-batch) */
    long max_steps;
    int batch_size;                 /* per tower and micro-batch, as in TensorFlow's script (a step: accum_steps x it) */
    int accum_steps;                /* micro-batches per tower per step (gradient accumulation), >= 1; default 1 */
    const char *loss_scaling;       /* "tower_mean" (default: the towers' mean of their shard means) | "global_batch"
                                       (MirroredStrategy: the per-example loss summed over the global batch / its size) */
    int num_towers;                 /* 0: one per device */
    int num_gpus;                   /* GPU towers: use the first num_gpus visible GPUs */
    const char *gpus;               /* GPU towers: "0,2,3" names them (overrides num_gpus) */
    int allow_tf32;                 /* GPU towers: TF32 tensor-core math in cuBLAS/cuDNN */
    int deterministic;              /* GPU towers: only cuDNN algorithms cuDNN calls deterministic, else an error */
    int num_classes;
    int image_size;                 /* cifar10: crop to image_size x image_size (0: no crop); an image folder: the size
                                       its images are resized to (both models; no crop) */
    int image_size_given;           /* 1: --image_size was on the command line (a run that uses none refuses a size
                                       other than its TFRecords'); 0: the default */
    const char *labels;             /* an image folder: the class list file ("": the sorted class folders) */
    const char *resize_mode;        /* an image folder: "resize", "center_crop" or "random_crop" (io/imagefolder.h) */
    float central_fraction;         /* an image folder, center_crop: the fraction of the shorter side kept, (0, 1] */
    int max_image_pixels;           /* an image folder: the largest image decoded, in pixels (a larger one is a bad
                                       example); each input worker's decode buffers are sized by it */
    float learning_rate;            /* NAN: the optimizer's default (optimizer_default_lr) */
    float momentum;
    int nesterov;
    double adam_beta1, adam_beta2;  /* adam, adamw: 0.9, 0.999, as typed (OptimizerConfig's) */
    float adam_epsilon;             /* adam, adamw; NAN: 1e-8 for adam (TF1), 1e-7 for adamw (Keras) */
    float weight_decay;             /* adamw: decoupled weight decay, 0.004 (Keras) */
    float rmsprop_decay, rmsprop_momentum, rmsprop_epsilon; /* rmsprop: 0.9, 0, 1e-10 */
    int rmsprop_centered;           /* rmsprop: centered (ApplyCenteredRMSProp) */
    const char *lr_schedule;        /* exponential, piecewise or cosine (ps/optimizer.h's table) */
    float lr_decay_factor;          /* exponential */
    double num_epochs_per_decay;    /* exponential; 0: constant learning rate (epochs as typed: double, as Python's) */
    const char *piecewise_lr;       /* piecewise: "RATE;EPOCH;RATE;..." (tf_cnn_benchmarks' flag) */
    double cosine_decay_epochs;     /* cosine: its length after the warmup; 0: to max_steps */
    double cosine_alpha;            /* cosine: the floor, a fraction of the rate (Keras's Python float) */
    double warmup_epochs;           /* every schedule: a linear warmup from 0; 0: none */
    long num_examples_per_epoch;    /* 0: count the records of --data */
    float moving_average_decay;
    long seed;
    int log_every, save_every, keep_checkpoints;
    int resume;
    int log_device_placement;
    long min_after_dequeue;
    int input_threads;
    int skip_corrupt;
    double max_corrupt_fraction;    /* with skip_corrupt: the pipeline stops past this fraction of the bytes lost (as
                                       typed: float32's 0.01 is under 0.01, and a loss of exactly 1% stopped a run) */
    void (*warn)(void *ctx, const char *line); /* the pipeline's warnings (reader thread); NULL: stderr */
    void *warn_ctx;
    /* The caller's check of the data against its own records (cmd/'s class list against the train_dir's), called
     * once by trainer_open after the data is listed or probed and before the input pipeline's threads start (so no
     * worker's warning precedes its refusal); non-zero refuses the open with its line in err.  NULL: none. */
    int (*check_data)(void *ctx, const struct Trainer *tr, char *err, size_t err_n_bytes);
    void *check_data_ctx;
    int num_epochs;                 /* 0: as many as max_steps needs */
    const char *variable_update;    /* "parameter_server" | "replicated" (tf_cnn_benchmarks' names) */
    const char *local_parameter_device; /* parameter_server: where the variables live, "cpu" | "gpu" */
    const char *all_reduce;         /* replicated: "auto" | "host" | "nccl" (auto: nccl for GPU towers when built with NCCL, else host) */
    const char *trace;              /* "": none; else a Chrome trace-event JSON file (train/trace.h) */
    int synthetic;                  /* 1: no files; one seeded random global batch in memory, every step */
    int ps_ranks;                   /* parameter_server across ranks: the first ps_ranks ranks hold the shards; 0: every rank */
    int ps_dedicated;               /* parameter_server across ranks: 1, those ps_ranks ranks only serve (TensorFlow's ps
                                       tasks: no towers, no input) and the other ranks are the workers; 0: each is also a worker */
    const char *ps_placement;       /* parameter_server across ranks: "greedy" (by bytes, least loaded) | "round_robin" */
    const char *checkpoint_writers; /* parameter_server across ranks: "owners" (each shard's owner writes it) | "rank0" */
    const char *input_split;        /* across ranks: "none" (every rank reads the whole stream) | "files" | "records" */
    int sync_replicas;              /* parameter_server across ranks: 1 (default) synchronous (ps_mpi); 0 asynchronous (ps_mpi_async) */
    int max_staleness;              /* asynchronous: a worker starts step t once every worker pushed step t - S - 1 (>= 0) */
    ModelOptions model_opts;        /* the Keras networks' options (--width_multiplier, --head); mnist, cifar10 ignore them */
    const char *batch_norm;         /* "tower" or "sync": train/batch_norm.c */
} TrainerOptions;

/* Where the variables live and how the gradients are combined: the index
 * of the mode's entry in train/modes.c's table. */
typedef enum {
    TRAINER_PS_CPU = 0,          /* parameter_server, cpu: variables in host memory, CPU averages and applies */
    TRAINER_PS_GPU = 1,          /* parameter_server, gpu: variables on tower 0's GPU (needs GPU towers) */
    TRAINER_REPLICATED_HOST = 2, /* replicated, host: per-tower variables, ring all-reduce over host buffers */
    TRAINER_REPLICATED_NCCL = 3, /* replicated, nccl: per-tower variables, NCCL all-reduce (needs GPU towers) */
    TRAINER_REPLICATED_MPI = 4,  /* replicated, mpi: per-tower variables on every rank, gradients gathered across MPI ranks */
    TRAINER_PS_MPI = 5,          /* parameter_server, mpi: variables in shards on parameter-server ranks, pushed and pulled over MPI */
    TRAINER_REPLICATED_MPI_ALLREDUCE = 6, /* replicated, mpi_allreduce: as replicated_mpi, the ranks' sums added by MPI_Allreduce */
    TRAINER_PS_MPI_ASYNC = 7,    /* parameter_server, mpi, --sync_replicas false: each worker's gradient applied on arrival */
    TRAINER_REPLICATED_NCCL_MPI = 8, /* replicated, nccl_mpi: replicated_nccl with one NCCL communicator over every rank's GPUs */
    TRAINER_N_MODES = 9
} TrainerMode;

/* "ps_cpu", "ps_gpu", "replicated_host", "replicated_nccl", "replicated_mpi", "ps_mpi", "replicated_mpi_allreduce",
 * "ps_mpi_async", "replicated_nccl_mpi". */
const char *trainer_mode_name(TrainerMode m);

/* The mode for tf_cnn_benchmarks' flag values (all_reduce "auto" = host
 * here; trainer_open makes it nccl once it has GPU towers and NCCL is built
 * in).  Returns 0, or -1 with one line in err naming the bad flag. */
int trainer_mode_from_flags(const char *variable_update, const char *local_parameter_device,
                            const char *all_reduce, TrainerMode *mode, char *err, size_t err_n_bytes);

/* The mode for a short name (trainer_mode_name's) or a tf_cnn_benchmarks
 * pair "parameter_server/cpu", "parameter_server/gpu", "replicated/host",
 * "replicated/nccl" ("parameter_server" alone = ps_cpu, "replicated" alone =
 * replicated_host).  Returns 0, or -1 with one line in err. */
int trainer_mode_from_name(const char *name, TrainerMode *mode, char *err, size_t err_n_bytes);

/* Set o's variable_update, local_parameter_device and all_reduce to select m. */
void trainer_mode_set_flags(TrainerMode m, TrainerOptions *o);

/* 1 when this build can run the mode; 0 with one line in err saying what
 * it needs (ps_gpu a CUDA build, replicated_nccl one with NCCL).  The GPU
 * modes also need GPU towers at run time: trainer_open says so otherwise. */
int trainer_mode_available(TrainerMode m, char *err, size_t err_n_bytes);

/* This machine's figures for one model size, from microbenchmarks
 * (`tower bench --predict` measures them; docs/modes.md's cost model). */
typedef struct {
    double model_n_bytes;      /* M: the variables (= a gradient) in bytes */
    double copy_gbps;          /* one thread copying M (a CPU tower's copy-in) */
    double reduce_gbps;        /* ps_average_grads: bytes read + written per second, 2 towers */
    double ps_apply_ms;        /* ps_apply_gradients (optimizer + moving averages), all cores */
    double opt_1thread_ms;     /* optimizer_apply on one thread (a replica's update) */
    double ema_1thread_ms;     /* all the moving averages on one thread (a replica does 1/N of them) */
    double ring_gbps;          /* 2-rank ring: bytes a rank moves (2(N-1)/N M) per second */
    double barrier_ms;         /* one ring phase on a tiny buffer (alpha) */
    int cores;
} TrainCostFigures;

/* The cost model's time (ms) that mode m adds to a step of n_towers CPU
 * towers beyond their input and forward+backward: moving the variables and
 * gradients, reducing, updating.  NAN where the mode has no model from
 * these host figures (the GPU modes). */
double trainer_mode_predict_ms(TrainerMode m, const TrainCostFigures *f, int n_towers);

/* Where the time of the last step went, on the tower_now_sec() clock. */
typedef struct {
    double start_sec, end_sec;  /* the whole trainer_step */
    TowerSpan input;            /* pipeline_next, or handing out the synthetic batch */
    TowerSpan towers;           /* tower_group_run: the go to the last tower done */
    TowerSpan average;          /* parameter_server: ps_average_grads (ps_gpu: the device's time of the mean); replicated: empty */
    TowerSpan apply;            /* parameter_server: ps_apply_gradients (ps_gpu: the device's time of the update); replicated: global_step + 1 */
} TrainerStepTimes;

/* The last step's time split into the phases `tower bench` reports, in
 * seconds.  Per-tower phases are means over the towers. */
typedef struct {
    double step;      /* the whole trainer_step */
    double input;     /* waiting for the global batch */
    double copy;      /* copy-in + copy-out of a tower (variables, shard, gradients) */
    double compute;   /* forward + backward of a tower */
    double reduce;    /* parameter_server: the server's average; replicated: a tower's all-reduce */
    double apply;     /* the server's update (parameter_server) or a tower's update and share of the moving averages (replicated) */
    double other;     /* the rest: waking threads, waiting for the slowest tower, loss bookkeeping */
} TrainerPhaseSec;

void trainer_options_defaults(TrainerOptions *o);

/* --batch_norm: 0 for "tower" or "sync"; -1 with one line in err otherwise.
 * trainer_open calls it; cmd/ too,
 * before any work. */
int trainer_check_batch_norm(const char *batch_norm, char *err, size_t err_n_bytes);

/* The learning-rate schedule's flags: --lr_schedule a name of the table,
 * no flag of another schedule, piecewise's list well formed and without
 * --learning_rate.  0, or -1 with one line in err.  trainer_open calls it;
 * cmd/ too, before any work. */
int trainer_check_lr_schedule(const TrainerOptions *o, char *err, size_t err_n_bytes);

typedef struct Trainer {
    TrainerOptions opt;
    ModelSpec spec;
    const TowerBackend *backend;
    HostAlloc alloc;
    ParamServer *ps;
    TowerGroup *towers;
    Pipeline *pipeline;
    int input_split;                 /* PIPELINE_SPLIT_*: across ranks, each rank reads its part of the data (--input_split) */
    char **files;                    /* the TFRecord files (none for an image folder) */
    int n_files;
    int image_folder;                /* 1: --data is an image folder, decoded in the pipeline */
    int image_encoded;               /* 1: --data is TFRecords of encoded JPEG/PNG images, decoded in the pipeline */
    struct ConvertSource *image_listing; /* image_folder: its files, listed once (the pipeline borrows it) */
    int n_towers;                    /* this process's towers (with MPI: this rank's; 0 on a server-only rank) */
    int rank, n_ranks;               /* this process in the job (base/ranks.h): 0 of 1 without mpirun */
    int n_servers;                   /* --ps_dedicated: ranks 0 .. n_servers - 1 only serve (no towers, no input); else 0 */
    int n_workers;                   /* the ranks with towers, n_servers .. n_ranks - 1 (n_ranks - n_servers) */
    int worker;                      /* this rank's index among them (rank - n_servers), or -1 on a server-only rank */
    int worker_towers;               /* the towers of each worker rank (n_towers there; n_towers is 0 on a server-only rank) */
    int shard_sizes[TOWER_MAX_TOWERS]; /* examples of one micro-batch of tower t (its shard: accum_steps x it) */
    int accum_steps;                 /* micro-batches per tower per step (opt.accum_steps) */
    int loss_global_batch;           /* 1: --loss_scaling global_batch (train_tower_weight); 0: tower_mean */
    int global_batch;                /* the job's examples per step: n_workers x accum_steps x the sum of shard_sizes */
    long examples_per_epoch;
    long examples_consumed;          /* by the steps taken so far (for resume) */
    int resumed;                     /* 1: trainer_open loaded a checkpoint (--resume found one) */
    CkptRunState resume_run;         /* --resume: the checkpoint's run state (across ranks rank 0's, broadcast at
                                        open: train_ranks_bcast_state); zeros without */
    long examples_at_open;           /* examples_consumed when this run's steps began */
    long part_start[TOWER_MAX_TOWERS]; /* (n_workers) --input_split files|records: the examples each worker's part had
                                        consumed when this run began, what its pipeline skips (trainer_open) */
    float tower_losses[TOWER_MAX_TOWERS];     /* each tower's mean loss in the last step */
    float tower_accuracy[TOWER_MAX_TOWERS];   /* each tower's batch accuracy in the last step */
    float accuracy;                           /* the global batch's accuracy in the last step */
    TrainerMode mode;
    int server_threads;              /* parameter_server: OpenMP threads of the average and the update */
    /* The modes' own state, each set by its mode's open and freed by its close (train/mode_*.c). */
    int replicas_bound;              /* replicated: the towers compute on ps->replica_params in place */
    int params_bound;                /* ps_cpu, ps_mpi: the (CPU) towers compute on ps->params in place */
    AllreduceHost *allreduce;        /* replicated_host: the ring the tower threads run */
    PsGpu *ps_gpu;                   /* ps_gpu: variables, slots and moving averages on tower 0's GPU */
    PsGpuReplicas *gpu_replicas;     /* replicated_nccl: each tower's slots and share of the moving averages, on its GPU */
    AllreduceNccl *nccl;             /* replicated_nccl: the communicator over the towers' GPUs */
    TowerSpan nccl_spans[TOWER_MAX_TOWERS]; /* replicated_nccl: each GPU leader's ncclAllReduce in the last step (device time) */
    float step_lr;                   /* replicated: the learning rate of the step in flight */
    int replica_nonfinite[TOWER_MAX_TOWERS]; /* replicated_host, replicated_nccl: tower t's last update left a variable non-finite */
    int bn_sync;                     /* --batch_norm sync: the towers' batch norms share the global batch's statistics */
    size_t moving_n_floats;          /* floats in the non-trainable variables (batch norm's moving statistics); 0: none */
    float *moving_buf;               /* (T + (n_ranks > 1 ? n_ranks x T : 0), moving_n_floats): train_update_moving's
                                        packed statistics; NULL when moving_n_floats is 0 */
    int stop_requested;              /* this rank was asked to stop (a signal): set before a step, carried by the
                                        modes whose ranks step apart (trainer_ranks_stop) */
    int stop_agreed;                 /* those modes, after a step: every rank stops after this one */
    long schedule_step;              /* those modes: the count --max_steps and --save_every read
                                        (trainer_schedule_step), the same on every rank after a step */
    int input_done;                  /* those modes: this worker's input ended and it stays in the job without it
                                        (the mode's input_ended said so): each step gets the empty batch */
    double staleness_mean;           /* ps_mpi_async: the staleness (updates) of the gradients applied so far, over
                                        every shard as the last pulls said; max -1 in the modes without */
    long staleness_max;
    void *mode_state;                /* a further mode's own state (its open makes it, its close frees it); NULL here */
    Trace *trace;                    /* --trace, or NULL */
    TrainerStepTimes times;          /* of the last step */
    PipelineBatch synthetic;         /* opt.synthetic: the batch every step gets (io/synthetic.h), its buffers from alloc */
    PipelineConfig pipeline_cfg;     /* what the pipeline was opened with (for trainer_max_n_bytes) */
    size_t record_n_bytes;           /* the longest record the memory bound assumes: the image + 4 KiB */
    size_t loaded_n_bytes;           /* the process's resident memory when trainer_open began (trainer_max_n_bytes) */
} Trainer;

/* Host memory a training process holds, part by part (trainer_max_n_bytes).
 * Everything is fixed by the configuration; nothing depends on how many
 * records the data has or how many steps run. */
typedef struct {
    PipelineMemory pipeline;   /* the input pipeline (io/pipeline.h); zero with --synthetic */
    size_t input_n_bytes;      /* pipeline.total_n_bytes, or the synthetic batch */
    size_t variables_n_bytes;  /* ps_host_n_bytes: variables, averaged and per-tower gradients, momentum, moving averages, replicas */
    size_t towers_n_bytes;     /* n_towers x the backend's host_n_bytes: a CPU tower's weights, logits, activations and scratch */
    size_t mode_n_bytes;       /* the placement mode's own host buffers (TrainModeI.host_n_bytes): across ranks the
                                * gathered gradients (replicated_mpi: R x T x M), the push, pull and save buffers (ps_mpi) */
    size_t checkpoint_n_bytes; /* a --resume load: twice the payload (payload + decoded copy); a save streams its
                                  file and holds no copy */
    size_t summaries_n_bytes;  /* the events writer: queued histograms of every variable and the encoded event */
    size_t loaded_n_bytes;     /* measured: resident when trainer_open began — the executable and its shared libraries
                                * as loaded (about 7 MiB; about 220 MiB more when the CUDA libraries are linked in) */
    size_t runtime_n_bytes;    /* TRAINER_RUNTIME_N_BYTES: thread stacks, allocator and oneDNN buffers, pages touched later */
    size_t total_n_bytes;      /* the sum: peak RSS stays below it */
    int towers_known;          /* 0: the backend does not report its towers' host memory (GPU towers; nor the CUDA runtime) */
} TrainerMemory;

/* The allowance for what no buffer size gives, beyond what is resident when
 * trainer_open begins (loaded_n_bytes): the stacks of the tower, OpenMP and
 * pipeline threads, malloc's per-thread arenas, oneDNN's packing buffers
 * inside sgemm and library pages first touched later.  Measured as peak RSS
 * minus the other parts (libraries included): 12-14 MiB for cifar10 and
 * 18-21 MiB for mnist on the 2-core development machine, with 1 to 8 OpenMP
 * threads (bench/run_memory_bench.sh). */
#define TRAINER_RUNTIME_N_BYTES ((size_t)32 << 20)

/* The most host memory (bytes) an open trainer's process holds while it
 * trains, as the sum of the parts in m (filled when not NULL), for records
 * no longer than tr->record_n_bytes.  A bound, not an estimate: each part
 * is what its module allocates for this configuration (rounded up to whole
 * pages), plus what was resident when trainer_open began (measured: code and
 * libraries) and a fixed allowance, and the parts are summed although some never coexist (the
 * checkpoint load happens before the towers exist).  Never fails. */
size_t trainer_max_n_bytes(const Trainer *tr, TrainerMemory *m);

/* The memory bound (trainer_max_n_bytes, less what is resident already)
 * against what the machine can give (base/memory.h: MemAvailable, a
 * cgroup's limit less its usage).  trainer_open calls it before the
 * parameter server exists (the bound then lacks the server's part) and
 * again once it does, before the towers, the pipeline and a --resume load
 * allocate.
 * Returns 0 when it fits (or nothing can be read), else -1 with one line in
 * err naming the bound, what is available and the flag to lower:
 *   not enough memory: this run needs up to 23.10 GiB of host memory (the memory bound: input 5.00 GiB,
 *   towers 18.00 GiB, ...), and 20.50 GiB is available (MemAvailable in /proc/meminfo): lower --batch_size
 * The bound does not count the replicas a replicated mode's open makes, nor
 * GPU towers' host memory (towers_known 0). */
int trainer_check_memory(const Trainer *tr, char *err, size_t err_n_bytes);

/* An image folder's class list as listed (--labels, or its sorted class folders): n_classes names owned by the
 * trainer until trainer_close; NULL (n_classes 0) for TFRecord or synthetic data. */
const char *const *trainer_classes(const Trainer *tr, int *n_classes);

/* Build the pipeline, the parameter server and the towers from the options
 * (and resume from the latest checkpoint in train_dir when opt->resume; when
 * it holds none, one line on stdout says the run starts from step 0).
 * Refuses a run whose memory bound the machine cannot give
 * (trainer_check_memory) before allocating more than the server.
 * Under mpirun the ranks compare their model, class list and, where the
 * mode has other ranks write checkpoint files (TrainModeI.train_dir_writers),
 * their train_dir with rank 0's: rank 0 makes a probe file there (so
 * train_dir must exist unless opt->no_checkpoints) and those ranks must see
 * it.  Prints what it placed where, and the memory bound (trainer_max_n_bytes),
 * when log_device_placement.  Returns 0, or on failure (everything made so
 * far freed):
 *   TRAINER_OPEN_FAILED (-1): this process failed, one line in err; under
 *     mpirun the other ranks may be waiting in a collective of the mode's
 *     open, so the caller ends the job (ranks_abort);
 *   TRAINER_OPEN_REFUSED (-2), under mpirun only: every rank stops here
 *     together (a refusal of the options or the data, on any rank, before
 *     or after the mode's open): the lowest rank that failed has its line in
 *     err ("rank R of N: ..." unless rank 0), every other rank "" (nothing
 *     to say); the caller just exits. */
enum { TRAINER_OPEN_FAILED = -1, TRAINER_OPEN_REFUSED = -2 };
int trainer_open(Trainer *tr, const TrainerOptions *opt, char *err, size_t err_n_bytes);

/* One synchronous step: trainer_next_batch, then trainer_step_batch.
 * *loss = the mean of the towers' losses.  Returns 1 after a step, 0 when
 * the data has run out (num_epochs), and -1 on an error (message in err).
 * The model diverged: -2, with err saying how and at which step, one of
 *   Model diverged with loss = NaN at step 7          (variables as before the step)
 *   Model diverged with non-finite gradients (not applied) at step 7 (loss = 2.31)   (as before the step)
 *   Model diverged with non-finite variables at step 7 (loss = 1572684.25)   (the step was applied)
 * The CPU modes test the mean gradient (ps_cpu) and the new variables
 * (ps_cpu, replicated_host) in the average and update loops; the GPU modes
 * test the loss every step and the variables at a save (trainer_save). */
int trainer_step(Trainer *tr, float *loss, char *err, size_t err_n_bytes);

/* The step's first half: the next global batch (the pipeline's, or the
 * synthetic one), owned by the trainer until trainer_step_batch gives it
 * back; starts the step's clock.  1, 0 when the data has run out, -1 + err. */
int trainer_next_batch(Trainer *tr, PipelineBatch **batch, char *err, size_t err_n_bytes);

/* The step's second half on that batch: the placement mode's step (towers,
 * reduction, update), the --trace spans.  Returns as trainer_step (1, -1,
 * -2); the batch is given back either way. */
int trainer_step_batch(Trainer *tr, PipelineBatch *batch, float *loss, char *err, size_t err_n_bytes);

/* Write a checkpoint of the current state to train_dir (in the replicated
 * modes: tower 0's variables and momentum slots, which every tower shares;
 * in the GPU modes they are first copied from the GPUs to the host block).
 * Under mpirun every rank calls it at the same point: the mode gathers what
 * other ranks hold (ps_mpi: the shards' slots and moving averages), and
 * rank 0 alone writes; the other ranks return 0. */
int trainer_save(Trainer *tr, char *err, size_t err_n_bytes);

/* 1 when trainer_save needs every rank (a job of several ranks in a mode
 * whose state is spread over them): rank 0 cannot save alone, e.g. after an
 * error of its own. */
int trainer_save_needs_every_rank(const Trainer *tr);

/* 1 when the ranks do not step together (ps_mpi_async): only the save
 * points (--save_every, the end) are common to every rank, so a collective
 * check waits for one (a stop by signal is agreed otherwise:
 * trainer_ranks_stop). */
int trainer_ranks_step_apart(const Trainer *tr);

/* The examples one global step carries: the global batch, or where the
 * ranks step apart one worker's batch (ps_mpi_async's global_step counts the
 * workers' updates, TensorFlow's convention).  --num_epochs_per_decay's
 * decay steps and the progress bar's count of the run are in these, so an
 * asynchronous run decays after the same examples as a synchronous one. */
long trainer_step_examples(const Trainer *tr);

/* The count the loop's schedule reads (--max_steps, --save_every, whether
 * the end needs a save): ps->global_step, except where the ranks step apart,
 * whose global_steps may differ between the save points (a passive rank of
 * ps_mpi_async counts the job's updates exactly, a running worker as owner 0
 * knows them when it answers): there
 * tr->schedule_step, W a step on every rank from the count at open, the same
 * on every rank after each step, so that every rank meets the others at the
 * same save points and ends after the same step. */
long trainer_schedule_step(const Trainer *tr);

/* After a step: 1 when every rank stops here (a stop by signal); stop_here:
 * this rank was asked to.  Ranks in lockstep agree at once (ranks_any, a
 * collective); ranks that step apart agree through their messages: set
 * tr->stop_requested before each step, the request travels with the step's
 * pushes and every rank stops after the same worker step, a few steps later
 * (mode_ps_async.c); one process: stop_here. */
int trainer_ranks_stop(Trainer *tr, int stop_here);

/* The current variables, (n_params) floats owned by the trainer and valid
 * until the next trainer_step: ps->params, or tower 0's replica in
 * replicated_host (where ps->params is only refreshed at a save).  In the
 * GPU modes it first copies the variables, slots and moving averages from
 * the GPUs into ps->params, ps->accum and ps->ema (a device-to-host copy of
 * the model: for summaries and tests, not every step). */
const float *trainer_variables(const Trainer *tr);

/* The last step's time in `tower bench`'s phases (see TrainerPhaseSec). */
void trainer_phase_breakdown(const Trainer *tr, TrainerPhaseSec *out);

/* Stop everything and free it; also closes the --trace file.  Returns 0,
 * or -1 when the trace could not be written: one line (the file and the
 * errno text) in err, or on stderr when err is NULL (the error paths, which
 * report their own failure first).  Everything is freed either way. */
int trainer_close(Trainer *tr, char *err, size_t err_n_bytes);

/* One run per train_dir (train/train_dir.c): an exclusive flock on
 * train_dir/.lock, which then holds this process's PID, and a file written
 * and removed in train_dir, so that a directory that cannot take the
 * checkpoints is found before training.  train_dir must exist.  Returns 0
 * with the lock's descriptor in *fd (close it with trainer_unlock_dir; the
 * kernel drops the lock anyway when the process ends, leaving the file), or -1 with one line
 * in err:
 *   --train_dir DIR is in use by another run (pid 1234 holds DIR/.lock): wait for it to end, or give another --train_dir
 *   --train_dir DIR is not a directory
 *   --train_dir DIR cannot be written: DIR/.lock: Read-only file system
 * Readers (eval, export) take no lock. */
int trainer_lock_dir(const char *train_dir, int *fd, char *err, size_t err_n_bytes);

/* Remove train_dir/.lock and drop the lock of trainer_lock_dir (fd < 0:
 * nothing). */
void trainer_unlock_dir(const char *train_dir, int fd);

/* "2026-11-21 12:00:00.123456" (local time), as Python's datetime.now(). */
void trainer_timestamp(char *out, size_t out_n_bytes);

#endif
