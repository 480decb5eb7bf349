/* checkpoint.h — saving and restoring the parameter server's state.
 *
 * Where it sits: the trainer calls ckpt_save every N synchronous steps (after
 * ps_apply_gradients, while no tower is running) and ckpt_latest/ckpt_load
 * to resume; eval and export call ckpt_read, which needs no ParamServer.
 * This file does not decide when to save, and it saves only what resuming
 * needs: no gradients, no activations, no data.
 *
 * File layout of model.ckpt-STEP (format version 1), little-endian:
 *   offset  0  8 bytes   magic "TWRCKPT\0"
 *   offset  8  uint32    format version (1)
 *   offset 12  uint64    payload length in bytes
 *   offset 20  uint32    zlib crc32 of the payload
 *   offset 24  payload   a tower.Checkpoint message (ps/checkpoint.proto):
 *              model name and input shape, every variable by name with its
 *              shape, the optimizer's slots (Momentum in the `momentum`
 *              section under the variables' names, every other slot in
 *              `slots` as "<variable>/<slot>", TensorFlow's slot variable
 *              names: "conv1/weights/Adam") and scalars ("beta1_power"),
 *              the optimizer's name, the moving averages, global_step and
 *              the run state below.
 * The train dir also holds `checkpoint`, a text index in TensorFlow's form:
 *   model_checkpoint_path: "model.ckpt-3000"
 *   all_model_checkpoint_paths: "model.ckpt-1000"     (oldest first)
 *   all_model_checkpoint_paths: "model.ckpt-2000"
 *   all_model_checkpoint_paths: "model.ckpt-3000"
 * Both files are written atomically: a temporary file in the same directory
 * (name + ".tmp"), fwrite, fflush, fsync, rename, fsync of the directory.
 * Temporary files are never read: ckpt_latest follows the index only, and
 * the index only ever names renamed files.
 *
 * Errors: every function that takes err writes ONE line there (no newline)
 * that names the file and says what is wrong, and returns -1.
 */
#ifndef TOWER_PS_CHECKPOINT_H
#define TOWER_PS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "base/limits.h"
#include "ps/ps.h"

#define CKPT_FORMAT_VERSION 1u
#define CKPT_HEADER_N_BYTES 24
#define CKPT_INDEX_NAME "checkpoint"

#define CKPT_MAX_PARTS TOWER_MAX_TOWERS

/* What resuming needs besides the variables. */
typedef struct {
    uint64_t seed;           /* the run's RNG seed */
    long examples_consumed;  /* examples handed out by the input pipeline so far */
    int n_towers;
    int batch_size;          /* per tower (per micro-batch) */
    int accum_steps;         /* micro-batches per tower per step; 1 for files older than the field */
    /* Across ranks with --input_split files or records: each worker part's own examples consumed (a job's
     * workers are at most its towers); n_parts 0 without a split and in files older than the field. */
    int n_parts;
    long part_examples_consumed[CKPT_MAX_PARTS]; /* (n_parts) in worker order */
    char input_split[8];     /* "files" or "records" with the parts; "" without */
    /* Unequal towers (--shard_sizes): the job's towers' micro-batch sizes (every worker's, in rank and tower order);
     * n_shard_sizes 0 where every tower takes batch_size (and in files older than the field). */
    int n_shard_sizes;
    int shard_sizes[CKPT_MAX_PARTS]; /* (n_shard_sizes) */
    long min_after_dequeue;  /* the shuffle buffer the run read with; 0 in files older than the field */
    int had_moving_averages; /* ckpt_load: 1 when the file holds moving averages (a server without them drops them) */
} CkptRunState;

/* Write dir/model.ckpt-<global_step> from ps and run (run may be NULL: zeros),
 * then the index dir/checkpoint naming it as the latest, then delete the
 * checkpoints that fall out of the newest keep_last (keep_last <= 0 keeps
 * all), stale temporary files, and (keep_last > 0, previous index readable)
 * every model.ckpt-N the new index does not list: a crash between a
 * checkpoint's rename and the index's leaves one.  Creates dir (one level)
 * if missing.
 * Saving twice at the same step replaces the file.  Returns 0, or -1 with a
 * message in err; on failure the previous checkpoint and index are intact. */
int ckpt_save(const char *dir, const ParamServer *ps, const CkptRunState *run,
              int keep_last, char *err, size_t err_n_bytes);

/* A checkpoint in shards (train/mode_ps_mpi.c: each parameter-server rank
 * writes its own): shard k of n of step N is the file
 * dir/model.ckpt-N.shard-0000k-of-0000n, in the format above, holding the
 * variables keep[v] != 0 selects (n_vars flags) with their slots and moving
 * averages, and everything else of a checkpoint (model, step, scalars, run
 * state).  ckpt_save_shard writes one (atomically, as ckpt_save); once every
 * shard is written (the caller's barrier), ckpt_commit_shards checks that
 * all n are there, writes the manifest dir/model.ckpt-N.shards (text:
 * `n_shards: n`, then one `shard: "NAME"` a line; atomically), removes a
 * single file model.ckpt-N of the same step, and writes the index naming
 * model.ckpt-N (with keep_last's deletions, shards included).  A kill at any
 * moment leaves the index naming a checkpoint whose files are all there.
 * ckpt_load and ckpt_read take the base path "dir/model.ckpt-N" of either
 * form: the single file when it exists, else the manifest's shards joined
 * (every variable must be in exactly one of them; a manifest that names a
 * file twice, by one name or two, is refused before it is read again).
 * Both return 0, or -1 with one line in err (the index untouched). */
#define CKPT_MAX_SHARDS 4096
int ckpt_save_shard(const char *dir, const ParamServer *ps, const unsigned char *keep, int shard, int n_shards,
                    const CkptRunState *run, char *err, size_t err_n_bytes);
int ckpt_commit_shards(const char *dir, long global_step, int n_shards, int keep_last, char *err, size_t err_n_bytes);

/* A checkpoint file's payload of ps (bytes), for memory bounds: the
 * variables, optimizer slots and moving averages ps has, plus 64 KiB for
 * names, shapes and framing, and the slot tensors' names.  A ckpt_load holds
 * about twice it (the file's payload and its decoded copy); a ckpt_save
 * holds none of it (protobuf-c packs it straight into the file). */
size_t ckpt_max_n_bytes(const ParamServer *ps);

/* The latest checkpoint of dir, from its index: writes "dir/<name>" (or the
 * index's absolute path) to path.  Returns 1 when found, 0 when dir has no
 * index (or does not exist), -1 when the index cannot be read or names
 * nothing, or path_n_bytes is too small.  It does not open the checkpoint. */
int ckpt_latest(const char *dir, char *path, size_t path_n_bytes);

/* The checkpoints dir holds, whatever its index says: the number of files
 * of checkpoints (model.ckpt-<digits>, a sharded one's manifest and
 * shards; not temporary files), and in newest (when not NULL) the base name
 * of the one with the highest step.  0 when there are none or dir cannot
 * be read.  For the trainer's refusal to start over an earlier run. */
int ckpt_dir_scan(const char *dir, char *newest, size_t newest_n_bytes);

/* 1 when path is named as a file of a train_dir's checkpoints (the index
 * `checkpoint`, a checkpoint model.ckpt-<digits>, a shard manifest or a
 * shard, or one of those with a save's .tmp suffix), there or not (a run writing or pruning its checkpoints would
 * replace or delete it), or is an existing file beginning with a
 * checkpoint's magic; 0 otherwise.  For writers of other files (export)
 * that must not replace one, nor be removed as one. */
int ckpt_is_train_dir_file(const char *path);

/* The most checkpoints an index lists, so the most --keep_checkpoints keeps
 * (0 keeps every file, the index naming the newest CKPT_MAX_KEEP). */
#define CKPT_MAX_KEEP 1024

/* ckpt_latest, and on -1 one line in err that names the index and says what
 * is wrong with it (cannot be opened, not a regular file, which line does
 * not parse, no model_checkpoint_path). */
int ckpt_find_latest(const char *dir, char *path, size_t path_n_bytes, char *err, size_t err_n_bytes);

/* Read the checkpoint at path into ps: params, the optimizer's slots and
 * scalars, ema (when ps has one), global_step, and *run (when run is not
 * NULL).  Everything is validated before ps is touched: header, checksum,
 * decoding, model name, input shape and network options (width multiplier,
 * head; a file without them: 1.0 and keras) against ps->spec, and every
 * variable by name and shape (missing, unexpected, duplicate or misshapen
 * is an error).  The optimizer state must match ps's optimizer: every slot
 * and scalar it keeps present ("no momentum accumulators (saved with sgd):
 * cannot resume with nesterov"), and no slot it does not keep ("holds
 * optimizer slots 'Momentum' that adam does not keep"), except that sgd,
 * which keeps none, starts from any checkpoint.  Moving averages must be
 * there when ps keeps them.  Returns 0, or -1 with one line in err and ps
 * unchanged. */
int ckpt_load(const char *path, ParamServer *ps, CkptRunState *run,
              char *err, size_t err_n_bytes);

/* A checkpoint read without a ParamServer, for eval and export.  The arrays
 * are malloc'ed and laid out as model_spec_init_opts(model, H, W, C, num_classes,
 * opts) lays out the flat block; ema is NULL when the file has none; slots[k]
 * is the slot named slot_names[k] (the `momentum` section is "Momentum"). */
typedef struct {
    char model[32];
    int H, W, C, num_classes;
    ModelOptions opts;  /* the network's options (width 1.0, Keras's head in files older than them) */
    long global_step;
    size_t n_params;
    float *params;  /* (n_params) */
    float *ema;     /* (n_params) or NULL */
    int n_slots;
    char slot_names[OPT_MAX_SLOTS][64];
    float *slots[OPT_MAX_SLOTS]; /* [n_slots] -> (n_params) */
    char optimizer[32];          /* optimizer_name of the saver; "momentum" or "sgd" for older files */
    CkptRunState run;
} CkptContents;

/* Read and validate the checkpoint at path (as ckpt_load, against the spec
 * of the model it names) into out, which the caller releases with
 * ckpt_contents_free.  Returns 0, or -1 with one line in err and out
 * zeroed. */
int ckpt_read(const char *path, CkptContents *out, char *err, size_t err_n_bytes);

/* Free the arrays of c and zero it.  NULL is a no-op. */
void ckpt_contents_free(CkptContents *c);

/* Test hook: simulate a crash inside ckpt_save.  The fault stays set until
 * ckpt_set_fault(CKPT_FAULT_NONE).  Not thread-safe; for tests only.
 *   CKPT_FAULT_BEFORE_RENAME: stop after fsync of the checkpoint's temporary
 *     file, leave it behind, return -1.
 *   CKPT_FAULT_BEFORE_INDEX_RENAME: the checkpoint is renamed into place, but
 *     stop after fsync of the index's temporary file, return -1. */
typedef enum {
    CKPT_FAULT_NONE = 0,
    CKPT_FAULT_BEFORE_RENAME = 1,
    CKPT_FAULT_BEFORE_INDEX_RENAME = 2
} CkptFault;
void ckpt_set_fault(CkptFault fault);

#endif
