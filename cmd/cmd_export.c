/* cmd_export.c — `tower export`: a checkpoint's variables to a .safetensors file.
 *
 * Where it sits: cmd/ only wires ckpt_read (ps/checkpoint.h) to the
 * safetensors writer (ps/safetensors.h), after training: the variables leave
 * the tower pattern for PyTorch, JAX or NumPy, under TensorFlow's names and
 * shapes (conv weights (KH, KW, C_in, C_out), dense (n_in, n_out)).  By
 * default the moving averages are exported, as `tower eval` evaluates them;
 * --no_moving_average exports the raw variables.
 * What it does not do: no optimizer slots, no conversion to PyTorch's layouts
 * (docs/export.md shows the transposes), no other formats.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/commands.h"
#include "base/escape.h"
#include "base/flags.h"
#include "io/imagefolder.h"
#include "io/pipeline.h"
#include "model/model.h"
#include "ps/checkpoint.h"
#include "ps/safetensors.h"

typedef struct {
    const char *checkpoint_dir, *checkpoint, *out;
    int no_moving_average;
} ExportOptions;

static int export_flags(ExportOptions *o, Flag *flags) {
    const Flag table[] = {
        {"checkpoint_dir", FLAG_STRING, &o->checkpoint_dir, "directory whose latest checkpoint is exported"},
        {"checkpoint", FLAG_STRING, &o->checkpoint, "a checkpoint file (overrides --checkpoint_dir)"},
        {"out", FLAG_STRING, &o->out, "the .safetensors file to write (replaced atomically)"},
        {"no_moving_average", FLAG_BOOL, &o->no_moving_average, "export the raw variables, not their moving averages"},
    };
    memcpy(flags, table, sizeof table);
    return (int)(sizeof table / sizeof table[0]);
}

/* 1 when bytes (n_bytes) are UTF-8 text: no NUL byte (the value is a C string), no overlong forms, no
 * surrogates, nothing past U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n_bytes) {
    for (size_t i = 0; i < n_bytes;) {
        const unsigned char c = s[i];
        size_t k;
        unsigned long cp, min;
        if (c == 0) return 0;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xe0) == 0xc0) k = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) k = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) k = 3, cp = c & 0x07, min = 0x10000;
        else return 0;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n_bytes || (s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

int cmd_export(int argc, char **argv) {
    ExportOptions o = {.checkpoint_dir = "/tmp/tower_train", .checkpoint = "", .out = "", .no_moving_average = 0};
    Flag flags[8];
    int n_flags = export_flags(&o, flags);
    char *positional[argc > 0 ? argc : 1];
    int n_positional = 0;
    int rc = flags_parse(flags, n_flags, argc, argv, positional, &n_positional);
    if (rc == 1) {
        flags_print_usage("tower export", "--checkpoint_dir DIR --out FILE.safetensors [flags]", flags, n_flags);
        return 0;
    }
    if (rc != 0) return 2;
    if (n_positional > 0) {
        cmd_errorf("tower export: unexpected argument '%s' (see --help)\n", positional[0]);
        return 2;
    }
    if (!o.out[0]) {
        cmd_errorf("tower export: --out FILE.safetensors is required\n");
        return 2;
    }
    char err[1024], path[4096];
    CkptContents ck;
    ModelSpec spec;
    char safe_out[ESCAPE_PATH_N_BYTES];
    escape_str(safe_out, sizeof safe_out, o.out);
    if (ckpt_is_train_dir_file(o.out)) {
        cmd_errorf("tower export: --out %s is a file of a train_dir's checkpoints, or named as one (a training run "
                   "would replace or remove it; export writes a .safetensors file): give another --out\n", safe_out);
        return 1;
    }
    switch (safetensors_probe(o.out)) { /* only nothing, or an earlier export, is replaced */
    case SAFETENSORS_PROBE_NONE:
    case SAFETENSORS_PROBE_EXPORT: break;
    case SAFETENSORS_PROBE_OTHER: /* a class list, an events file, a directory */
        cmd_errorf("tower export: --out %s exists and is not a .safetensors file (export would replace it): give "
                   "another --out\n", safe_out);
        return 1;
    case SAFETENSORS_PROBE_FOREIGN: /* anyone's weights */
        cmd_errorf("tower export: --out %s is a .safetensors file Tower did not write (its metadata has no \"source\": "
                   "\"tower\"; export would replace it): give another --out, or remove it first\n", safe_out);
        return 1;
    case SAFETENSORS_PROBE_ERROR:
        cmd_errorf("tower export: --out %s: %s\n", safe_out, strerror(errno));
        return 1;
    }
    if (cmd_open_checkpoint("export", o.checkpoint, o.checkpoint_dir, &ck, &spec, path, sizeof path) != 0) return 1;
    const float *params = ck.params;
    const char *which = "raw";
    if (!o.no_moving_average) {
        if (ck.ema) {
            params = ck.ema;
            which = "moving_average";
        } else {
            cmd_errorf("tower export: note: %s holds no moving averages; exporting the raw variables\n", path);
        }
    }
    SafetensorsTensor tensors[MODEL_MAX_VARS];
    int n_tensors = safetensors_tensors_from_spec(tensors, &spec, params);
    char step[32], shape[64], classes[16], width[32], fc_width[16];
    /* The shortest digits that read back as the same float: Keras's alpha must build the same network
     * (0.1374999 printed "0.1375" made a layer of 48 filters where Tower's has 40). */
    flags_float_str(spec.opts.width_multiplier, width, sizeof width);
    snprintf(fc_width, sizeof fc_width, "%d", spec.opts.fc_width);
    snprintf(step, sizeof step, "%ld", ck.global_step);
    snprintf(shape, sizeof shape, "[%d, %d, %d]", spec.H, spec.W, spec.C);
    snprintf(classes, sizeof classes, "%d", spec.num_classes);
    /* The class names in label order (labels.txt beside the checkpoint, from an image folder's run): the label
     * numbers' meaning travels with the weights.  JSON holds UTF-8 alone: other bytes leave them out, said. */
    char labels_file[4200], *labels = NULL;
    size_t labels_n_bytes = 0;
    if (io_labels_path(labels_file, sizeof labels_file, path) == 0 &&
        imagefolder_read_labels_text(labels_file, &labels, &labels_n_bytes, err, sizeof err) < 0) {
        char safe_err[4200];
        cmd_errorf("tower export: note: %s; the export holds no class names\n",
                   escape_str(safe_err, sizeof safe_err, err));
        labels = NULL;
    }
    char **names = NULL;
    int n_names = 0;
    if (labels &&
        imagefolder_parse_labels(labels_file, labels, labels_n_bytes, &names, &n_names, err, sizeof err) == 0) {
        for (int i = 0; i < n_names; i++) free(names[i]);
        free(names);
    } else if (labels) { /* not a class list (an empty line, a name twice) */
        char safe_err[4200];
        cmd_errorf("tower export: note: %s; the export holds no class names\n",
                   escape_str(safe_err, sizeof safe_err, err));
        free(labels);
        labels = NULL;
    }
    if (labels && n_names != spec.num_classes) { /* not the class list of this model's outputs (eval refuses it) */
        char safe_labels[4400];
        cmd_errorf("tower export: note: %s names %d class%s where the model has %d outputs; the export holds no "
                   "class names\n", escape_str(safe_labels, sizeof safe_labels, labels_file), n_names,
                   n_names == 1 ? "" : "es", spec.num_classes);
        free(labels);
        labels = NULL;
    }
    if (labels && !utf8_valid((const unsigned char *)labels, labels_n_bytes)) {
        char safe_labels[4400];
        cmd_errorf("tower export: note: %s is not UTF-8 text free of NUL bytes, which the file's JSON header holds "
                   "alone; the export holds no class names\n",
                   escape_str(safe_labels, sizeof safe_labels, labels_file));
        free(labels);
        labels = NULL;
    }
    const SafetensorsMeta meta[] = {
        {"labels", labels ? labels : ""}, /* the first: left out (meta + 1) where there are none */
        {"source", "tower"},
        {"model", spec.name},
        {"global_step", step},
        {"variables", which},
        {"input_shape_hwc", shape},
        {"num_classes", classes},
        {"width_multiplier", width},
        {"head", spec.opts.head == MODEL_HEAD_SEED ? "seed" : "keras"},
        {"fc_width", fc_width},
        {"layout", "tensorflow"},
    };
    /* A signal ends the write after the tensor under way: the .tmp removed, --out as it was, 128 + the signal. */
    cmd_catch_stop_signals();
    rc = safetensors_write(o.out, tensors, n_tensors, meta + (labels ? 0 : 1),
                           (int)(sizeof meta / sizeof meta[0]) - (labels ? 0 : 1), &cmd_stop_signal, err, sizeof err);
    free(labels);
    if (rc != 0) {
        const int sig = cmd_stop_signal;
        if (sig) cmd_errorf("tower export: %s by %s\n", err, cmd_signal_name(sig));
        else cmd_errorf("tower export: %s\n", err);
        ckpt_contents_free(&ck);
        return sig ? 128 + sig : 1;
    }
    char safe_path[ESCAPE_PATH_N_BYTES];
    printf("tower export: wrote %d tensors (%zu floats, %s) of model %s at step %ld from %s to %s\n", n_tensors,
           spec.n_params, !strcmp(which, "moving_average") ? "moving averages" : "raw variables",
           spec.name, ck.global_step, escape_str(safe_path, sizeof safe_path, path), safe_out);
    ckpt_contents_free(&ck);
    return 0;
}
