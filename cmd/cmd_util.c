/* cmd_util.c — small pieces several subcommands share: making directories,
 * opening the checkpoint a command was pointed at, and the parse-time checks
 * of flag values (a refusal is one line and exit 2).  cmd/ only wires; the
 * checkpoint format itself is ps/checkpoint.c's. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/commands.h"

#include "base/escape.h"
#include "base/ranks.h"
#include "io/imagefolder.h"
#include "model/graph.h"

static int errors_quiet = 0;
static char errors_tag[64] = "";

void cmd_errors_quiet(int quiet) { errors_quiet = quiet; }

volatile sig_atomic_t cmd_stop_signal = 0;

static void on_stop_signal(int sig) { cmd_stop_signal = sig; }

void cmd_catch_signals(void (*handler)(int)) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        /* nohup's SIGHUP stays ignored; SIGINT is caught even where inherited ignored (a script's background
         * job): a Ctrl-C or a kill -INT then stops the run with its checkpoint, as it always did */
        if (sigs[i] == SIGHUP && sigaction(SIGHUP, NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = handler; /* no SA_RESTART: a write blocked on a reader that does not read ends (EINTR) */
        sigaction(sigs[i], &sa, NULL);
    }
}

void cmd_catch_stop_signals(void) { cmd_catch_signals(on_stop_signal); }

const char *cmd_signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP"; }

void cmd_errors_tag(const char *tag) { snprintf(errors_tag, sizeof errors_tag, "%s", tag ? tag : ""); }

void cmd_errorf(const char *fmt, ...) {
    if (errors_quiet) return;
    char msg[16384]; /* a path of PATH_MAX bytes, escaped, and the rest of the line */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *colon = errors_tag[0] ? strstr(msg, ": ") : NULL;
    if (colon) { /* "tower train: TAG: the rest" */
        char rest[sizeof msg];
        snprintf(rest, sizeof rest, "%s", colon + 2);
        snprintf(msg + (colon - msg), sizeof msg - (size_t)(colon - msg), ": %s: %s", errors_tag, rest);
    }
    size_t n = strlen(msg), n_fmt = strlen(fmt);
    int newline = n_fmt > 0 && fmt[n_fmt - 1] == '\n';
    if (newline && n > 0 && msg[n - 1] == '\n') msg[n - 1] = '\0';
    escape_in_place(msg, sizeof msg - 1); /* room for the newline */
    if (newline) strcat(msg, "\n");
    fputs(msg, stderr);
}

int cmd_agree_refusal(int refused, void (*say_again)(void *ctx), void *ctx) {
    if (ranks_size() < 2) return refused ? 0 : -1;
    const int first = ranks_first(refused);
    if (first > 0 && ranks_rank() == first && say_again) {
        char tag[64];
        snprintf(tag, sizeof tag, "rank %d of %d", first, ranks_size());
        cmd_errors_tag(tag);
        say_again(ctx);
        cmd_errors_tag(NULL);
    }
    return first;
}

void cmd_rank_program(const char *command, char *buf, size_t n_bytes) {
    snprintf(buf, n_bytes, "tower %s: rank %d of %d", command, ranks_rank(), ranks_size());
}

int cmd_read_checkpoint(const char *path, CkptContents *ck, ModelSpec *spec, char *err, size_t err_n_bytes) {
    if (ckpt_read(path, ck, err, err_n_bytes) != 0) return -1;
    char why[256] = "";
    const int built = model_spec_init_opts(spec, ck->model, ck->H, ck->W, ck->C, ck->num_classes, &ck->opts, why,
                                           sizeof why) == 0;
    if (built && spec->n_params != ck->n_params)
        snprintf(why, sizeof why, "its variables hold %zu floats, the file %zu", spec->n_params, ck->n_params);
    if (!built || spec->n_params != ck->n_params) {
        snprintf(err, err_n_bytes, "%s: the checkpoint's model does not build (%s)", path, why);
        ckpt_contents_free(ck);
        return -1;
    }
    for (int v = 0; ck->ema && v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        if (!mv->trainable) memcpy(ck->ema + mv->offset, ck->params + mv->offset, mv->n_floats * sizeof(float));
    }
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
            struct stat st;
            if (found == 0 && stat(checkpoint_dir, &st) != 0)
                cmd_errorf("tower %s: --checkpoint_dir %s: %s\n", command, checkpoint_dir, strerror(errno));
            else if (found == 0 && !S_ISDIR(st.st_mode))
                cmd_errorf("tower %s: --checkpoint_dir %s is not a directory\n", command, checkpoint_dir);
            else if (found == 0)
                cmd_errorf("tower %s: no checkpoint found in %s (no index %s/checkpoint)\n", command, checkpoint_dir,
                           checkpoint_dir);
            else cmd_errorf("tower %s: %s\n", command, err);
            return -1;
        }
    }
    if (cmd_read_checkpoint(path, ck, spec, err, sizeof err) != 0) {
        cmd_errorf("tower %s: %s\n", command, err);
        return -1;
    }
    return 0;
}

const char *const *cmd_model_names(void) {
    static const char *names[MODEL_N_KINDS + 1];
    for (int k = 0; k < MODEL_N_KINDS; k++) names[k] = model_nets[k].name;
    names[MODEL_N_KINDS] = NULL;
    return names;
}

const char *cmd_model_help(const char *what) {
    static char help[512];
    char names[256];
    model_net_names(names, sizeof names);
    snprintf(help, sizeof help, "%s: %s (docs/models.md)", what, names);
    return help;
}

int cmd_model_options(const char *command, float width_multiplier, const char *head, int fc_width,
                      ModelOptions *opts) {
    static const char *const heads[] = {"keras", "seed", NULL};
    if (cmd_check_choice(command, "head", head, heads)) return -1;
    opts->width_multiplier = width_multiplier;
    opts->fc_width = fc_width;
    opts->head = strcmp(head, "seed") ? MODEL_HEAD_KERAS : MODEL_HEAD_SEED;
    return 0;
}

int cmd_check_central_fraction(const char *command, float central_fraction, const char *resize_mode) {
    if (central_fraction == 1.0f || !strcmp(resize_mode, "center_crop")) return 0;
    cmd_errorf("tower %s: --central_fraction applies to --resize_mode center_crop (this run: --resize_mode %s)\n",
               command, resize_mode);
    return -1;
}

int cmd_check_choice(const char *command, const char *flag, const char *value, const char *const *choices) {
    int n = 0;
    for (; choices[n]; n++)
        if (!strcmp(value, choices[n])) return 0;
    char expected[512];
    size_t k = 0;
    expected[0] = '\0';
    for (int i = 0; i < n && k < sizeof expected; i++)
        k += (size_t)snprintf(expected + k, sizeof expected - k, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ",
                              choices[i]);
    cmd_errorf("tower %s: --%s '%s': expected %s\n", command, flag, value, expected);
    return -1;
}

int cmd_check_nonempty(const char *command, const char *flag, const char *value, const char *what) {
    if (value && value[0]) return 0;
    cmd_errorf("tower %s: --%s '': expected a non-empty %s\n", command, flag, what);
    return -1;
}

int cmd_check_data_paths(const char *command, const char *flag, const char *globs) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", globs);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        struct stat st;
        if (strpbrk(p, "*?[") || stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        size_t len = strlen(p);
        const char *slash = len > 0 && p[len - 1] == '/' ? "" : "/";
        if (flag)
            cmd_errorf("tower %s: --%s '%s' is a directory: give its TFRecord files, e.g. --%s '%s%s*.tfrecord'\n",
                    command, flag, p, flag, p, slash);
        else
            cmd_errorf("tower %s: '%s' is a directory: give its TFRecord files, e.g. '%s%s*.tfrecord'\n", command,
                    p, p, slash);
        return -1;
    }
    return 0;
}

int cmd_check_data(const char *command, const char *flag, const char *data) {
    if (!strchr(data, ',') && imagefolder_is_folder(data)) return 0;
    return cmd_check_data_paths(command, flag, data);
}

/* Length of the longest common prefix of a and b. */
static size_t common_prefix(const char *a, const char *b) {
    size_t k = 0;
    while (a[k] && a[k] == b[k]) k++;
    return k;
}

/* Length of the longest common suffix of a and b. */
static size_t common_suffix(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b), k = 0;
    while (k < na && k < nb && a[na - 1 - k] == b[nb - 1 - k]) k++;
    return k;
}

int cmd_check_no_arguments(const char *command, const char *data, char **extra, int n_extra) {
    if (n_extra == 0) return 0;
    struct stat st;
    const int looks_like_data = strstr(extra[0], ".tfrecord") || (stat(extra[0], &st) == 0 && S_ISREG(st.st_mode));
    if (!looks_like_data || !data) {
        cmd_errorf("tower %s: unexpected argument '%s' (see --help)\n", command, extra[0]);
        return -1;
    }
    /* The pattern the files share: the common prefix without its trailing
     * digits, *, the common suffix without its leading digits. */
    const char *first = strpbrk(data, "*?[,") ? extra[0] : data;
    size_t shortest = strlen(first), pre = shortest, suf = shortest;
    for (int i = 0; i < n_extra; i++) {
        size_t len = strlen(extra[i]), p = common_prefix(first, extra[i]), s = common_suffix(first, extra[i]);
        if (len < shortest) shortest = len;
        if (p < pre) pre = p;
        if (s < suf) suf = s;
    }
    while (pre > 0 && first[pre - 1] >= '0' && first[pre - 1] <= '9') pre--;
    const char *tail = first + strlen(first) - suf;
    while (suf > 0 && *tail >= '0' && *tail <= '9') {
        tail++;
        suf--;
    }
    if (pre + suf > shortest) suf = shortest > pre ? shortest - pre : 0;
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%.*s*%s", (int)pre, first, first + strlen(first) - suf);
    cmd_errorf("tower %s: unexpected argument '%s': an unquoted glob given to --data was expanded by the shell "
            "into several files; quote it, e.g. --data '%s'\n", command, extra[0], pattern);
    return -1;
}

/* A flag's value as compared across ranks: floats to 9 digits, doubles to the digits that read back (one value
 * each; NaN, "not given": the flag's own
 * default, --learning_rate's), the rest as flags_value_str writes them. */
static void flag_canonical(const Flag *f, char *buf, int n) {
    if (f->type == FLAG_FLOAT && isnan(*(float *)f->target)) snprintf(buf, n, "(not given)"); /* NaN: its default */
    else if (f->type == FLAG_FLOAT) snprintf(buf, n, "%.9g", (double)*(float *)f->target);
    else if (f->type == FLAG_DOUBLE) flags_double_str(*(double *)f->target, buf, n); /* reads back exactly */
    else flags_value_str(f, buf, n);
}

int cmd_check_same_flags(const char *command, const Flag *flags, int n_flags, const char *const *per_rank_flags) {
    if (ranks_size() < 2) return 0;
    const int rank = ranks_rank();
    /* This rank's values packed one after another, each ended by its NUL: rank 0's length goes first, then its
     * bytes (a few KiB for the whole table). */
    size_t mine_n = 0, mine_cap = 4096, rank0_n;
    char *mine = malloc(mine_cap), *rank0 = NULL;
    for (int k = 0; mine && k < n_flags; k++) {
        char value[4096];
        flag_canonical(&flags[k], value, sizeof value);
        size_t n = strlen(value) + 1;
        if (mine_n + n > mine_cap) {
            char *grown = realloc(mine, mine_cap = 2 * mine_cap + n);
            if (!grown) free(mine);
            mine = grown;
        }
        if (mine) memcpy(mine + mine_n, value, n);
        mine_n += n;
    }
    rank0_n = mine_n;
    ranks_bcast(&rank0_n, sizeof rank0_n);
    if (mine && (rank0 = malloc(rank0_n))) memcpy(rank0, mine, rank == 0 ? rank0_n : 0);
    if (!mine || !rank0) { /* the same on every rank in practice; a rank that cannot compare ends the job */
        cmd_errorf("tower %s: rank %d: out of memory comparing the ranks' flags\n", command, rank);
        free(mine);
        free(rank0);
        return 1;
    }
    ranks_bcast(rank0, rank0_n);
    int differ = -1, rc = 0;
    const char *differ_mine = "", *differ_rank0 = "";
    size_t mine_at = 0, rank0_at = 0; /* the next value's offset in mine, in rank0 */
    for (int k = 0; k < n_flags && differ < 0; k++) {
        const char *v = mine + mine_at, *v0 = rank0_at < rank0_n ? rank0 + rank0_at : "";
        mine_at += strlen(v) + 1;
        rank0_at += strnlen(v0, rank0_n - rank0_at) + 1;
        int per_rank = 0;
        for (int j = 0; per_rank_flags[j]; j++) per_rank |= !strcmp(flags[k].name, per_rank_flags[j]);
        if (!per_rank && strcmp(v, v0)) {
            differ = k;
            differ_mine = v;
            differ_rank0 = v0;
        }
    }
    const int first = ranks_first(differ >= 0); /* the lowest rank whose flags differ from rank 0's */
    if (first >= 0) {
        if (rank == first)
            cmd_errorf("tower %s: rank %d of %d was given --%s %s but rank 0 --%s %s: every rank of the job needs "
                       "the same flags (docs/hosts.md)\n", command, rank, ranks_size(), flags[differ].name,
                       differ_mine, flags[differ].name, differ_rank0);
        rc = 2;
    }
    free(mine);
    free(rank0);
    return rc;
}
