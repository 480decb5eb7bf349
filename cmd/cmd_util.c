/* cmd_util.c — small pieces several subcommands share: making directories
 * and opening the checkpoint a command was pointed at.  cmd/ only wires; the
 * checkpoint format itself is ps/checkpoint.c's. */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cmd/commands.h"

int cmd_make_dirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

int cmd_open_checkpoint(const char *command, const char *checkpoint, const char *checkpoint_dir,
                        CkptContents *ck, ModelSpec *spec, char *path, size_t path_n_bytes) {
    char err[1024];
    if (checkpoint && checkpoint[0]) {
        snprintf(path, path_n_bytes, "%s", checkpoint);
    } else {
        int found = ckpt_find_latest(checkpoint_dir, path, path_n_bytes, err, sizeof err);
        if (found != 1) {
            if (found == 0) fprintf(stderr, "tower %s: no checkpoint found in %s\n", command, checkpoint_dir);
            else fprintf(stderr, "tower %s: %s\n", command, err);
            return -1;
        }
    }
    if (ckpt_read(path, ck, err, sizeof err) != 0) {
        fprintf(stderr, "tower %s: %s\n", command, err);
        return -1;
    }
    if (model_spec_init(spec, ck->model, ck->H, ck->W, ck->C, ck->num_classes, err, sizeof err) != 0 ||
        spec->n_params != ck->n_params) {
        fprintf(stderr, "tower %s: %s: the checkpoint's model does not build (%s)\n", command, path, err);
        ckpt_contents_free(ck);
        return -1;
    }
    return 0;
}
