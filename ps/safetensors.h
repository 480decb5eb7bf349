/* safetensors.h — writing variables in the safetensors format.
 *
 * Where it sits: ps/, beside the checkpoints: `tower export` reads a
 * checkpoint (ckpt_read) and writes its variables here, under TensorFlow's
 * names and shapes, for PyTorch, JAX and NumPy users.  The format
 * (huggingface/safetensors):
 *     uint64 N (little-endian) | N bytes of JSON header | data
 * The header maps each tensor name to {"dtype":"F32","shape":[...],
 * "data_offsets":[begin,end]} (byte offsets from the start of the data) and
 * holds string-to-string "__metadata__".  As the reference writer does,
 * "__metadata__" comes first, tensors follow sorted by name (all are F32, so
 * its dtype-then-name order is the name order), their data is laid out
 * contiguously in that order, and the header is padded with spaces to a
 * multiple of 8 bytes so the data starts 8-byte aligned.
 * What it does not do: no reading, no dtypes other than F32, no sharded
 * (index.json) files.
 *
 * Errors: one line in err naming the file, and -1.
 */
#ifndef TOWER_PS_SAFETENSORS_H
#define TOWER_PS_SAFETENSORS_H

#include <signal.h>
#include <stddef.h>

#include "model/model.h"

#define SAFETENSORS_MAX_DIMS 8

typedef struct {
    const char *name;                 /* tensor name, unique, not "__metadata__" */
    int ndim;                         /* 0 (a scalar) .. SAFETENSORS_MAX_DIMS */
    int shape[SAFETENSORS_MAX_DIMS];  /* (ndim) */
    const float *data;                /* (prod(shape)) row-major, caller-owned */
} SafetensorsTensor;

typedef struct {
    const char *key, *value;          /* both strings, as the format requires */
} SafetensorsMeta;

/* Writes the tensors (n_tensors, any order: they are sorted by name) and
 * the metadata (n_meta pairs, written sorted by key) to path, atomically:
 * path.tmp (created here, O_EXCL: where it exists, another writer's or a
 * killed one's, nothing is written), fsync, rename.  Everything is checked
 * before anything is written: empty or duplicate names, negative
 * dimensions.  stop (NULL, or a signal handler's flag) is read after each
 * tensor: non-zero ends the write.  Returns 0, or -1 with one line in err
 * (no file of ours left behind). */
int safetensors_write(const char *path, const SafetensorsTensor *tensors, int n_tensors, const SafetensorsMeta *meta,
                      int n_meta, const volatile sig_atomic_t *stop, char *err, size_t err_n_bytes);

/* What lies at path, before a write replaces it (a write over anything but
 * nothing or an earlier export would destroy what is not ours). */
typedef enum {
    SAFETENSORS_PROBE_NONE = 0,    /* nothing there (or an empty file) */
    SAFETENSORS_PROBE_EXPORT = 1,  /* a safetensors file whose __metadata__ holds "source":"tower": an export */
    SAFETENSORS_PROBE_OTHER = 2,   /* another kind of file, a directory, a device */
    SAFETENSORS_PROBE_FOREIGN = 3, /* a safetensors file (an 8-byte little-endian header length within the
                                      file, then '{') that Tower did not write: anyone's weights */
    SAFETENSORS_PROBE_ERROR = -1,  /* it cannot be told (errno: ENOTDIR where a parent is a file, EACCES, ...) */
} SafetensorsProbe;
SafetensorsProbe safetensors_probe(const char *path);

/* The variables of a flat parameter block: one tensor per spec->vars entry,
 * named and shaped as the table says (TensorFlow's names and layouts),
 * data pointing into params (n_params floats, caller-owned).  Fills
 * tensors[0 .. spec->n_vars) and returns spec->n_vars. */
int safetensors_tensors_from_spec(SafetensorsTensor *tensors, const ModelSpec *spec, const float *params);

#endif
