/* test_optim_interop_helper.c — Tower's optimizers on gradients given in a
 * file, for tests/interop/optim_interop.py, which runs TensorFlow's
 * optimizers on the same gradients and compares (label interop).
 *
 * Where it sits: tests/, linked to ps/ only.  It drives the optimizer table
 * (ps/optimizer.h) as the parameter server does each step: the slots at
 * their table values, the scalars from init_scalars, optimizer_apply once
 * per step with global_step = the step index.  It decides nothing about
 * tolerances; the script does.
 *
 * Usage:
 *   test_optim_interop_helper slots OPTIMIZER [centered=1]
 *       prints the slot names of OPTIMIZER, space-separated, and its scalars
 *   test_optim_interop_helper run OPTIMIZER IN OUT [key=value ...]
 *       IN:  int32 n, int32 k, float32 var[n], float32 grads[k][n] (little-endian)
 *       OUT: float32 var[k][n], the variables after each step
 *       keys: lr, beta1, beta2, epsilon, weight_decay, decay, momentum, centered
 * Exit 0, or 2 with one line on stderr.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/optimizer.h"

static int die(const char *msg, const char *arg) {
    fprintf(stderr, "test_optim_interop_helper: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 2;
}

/* cfg from OPTIMIZER and key=value arguments; lr into *lr.  0 or -1. */
static int parse_config(const char *name, char **kv, int n_kv, OptimizerConfig *cfg, float *lr) {
    char err[256];
    optimizer_config_defaults(cfg);
    if (optimizer_kind_from_name(name, &cfg->kind, err, sizeof err) != 0) return die(err, NULL), -1;
    cfg->epsilon = optimizer_default_adam_epsilon(cfg->kind);
    *lr = optimizer_default_lr(cfg->kind);
    for (int i = 0; i < n_kv; i++) {
        char *eq = strchr(kv[i], '=');
        if (!eq) return die("expected key=value", kv[i]), -1;
        *eq = '\0';
        const float v = strtof(eq + 1, NULL);
        if (!strcmp(kv[i], "lr")) *lr = v;
        else if (!strcmp(kv[i], "beta1")) cfg->beta1 = strtod(eq + 1, NULL); /* as typed: a Python float */
        else if (!strcmp(kv[i], "beta2")) cfg->beta2 = strtod(eq + 1, NULL);
        else if (!strcmp(kv[i], "epsilon")) cfg->epsilon = cfg->rms_epsilon = v;
        else if (!strcmp(kv[i], "weight_decay")) cfg->weight_decay = v;
        else if (!strcmp(kv[i], "decay")) cfg->rms_decay = v;
        else if (!strcmp(kv[i], "momentum")) cfg->rms_momentum = cfg->momentum = v;
        else if (!strcmp(kv[i], "centered")) cfg->centered = v != 0.0f;
        else return die("unknown key", kv[i]), -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "slots")) {
        OptimizerConfig cfg;
        float lr;
        if (parse_config(argv[2], argv + 3, argc - 3, &cfg, &lr) != 0) return 2;
        const OptSlot *slots;
        const int n = optimizer_slots(&cfg, &slots);
        const OptimizerI *o = optimizer_i(cfg.kind);
        for (int k = 0; k < n; k++) printf("%s%s", k ? " " : "", slots[k].name);
        for (int k = 0; k < o->n_scalars; k++) printf(" %s", o->scalar_names[k]);
        printf("\n");
        return 0;
    }
    if (argc < 5 || strcmp(argv[1], "run") != 0)
        return die("usage: test_optim_interop_helper slots OPTIMIZER | run OPTIMIZER IN OUT [key=value ...]", NULL);
    OptimizerConfig cfg;
    float lr;
    if (parse_config(argv[2], argv + 5, argc - 5, &cfg, &lr) != 0) return 2;
    FILE *f = fopen(argv[3], "rb");
    if (!f) return die("cannot open", argv[3]);
    int32_t nk[2];
    if (fread(nk, sizeof(int32_t), 2, f) != 2 || nk[0] < 1 || nk[1] < 1 || nk[0] > (1 << 24) || nk[1] > 1000) {
        fclose(f);
        return die("bad header (n, k)", argv[3]);
    }
    const size_t n = (size_t)nk[0], k = (size_t)nk[1];
    float *var = malloc(n * sizeof(float)), *grads = malloc(n * k * sizeof(float)), *out = malloc(n * k * sizeof(float));
    float *slot_mem = malloc(OPT_MAX_SLOTS * n * sizeof(float));
    if (!var || !grads || !out || !slot_mem) return die("out of memory", NULL);
    if (fread(var, sizeof(float), n, f) != n || fread(grads, sizeof(float), n * k, f) != n * k) {
        fclose(f);
        return die("truncated", argv[3]);
    }
    fclose(f);
    const OptSlot *info;
    const int n_slots = optimizer_slots(&cfg, &info);
    float *slots[OPT_MAX_SLOTS] = {NULL}, scalars[OPT_MAX_SCALARS] = {0};
    for (int s = 0; s < n_slots; s++) {
        slots[s] = slot_mem + (size_t)s * n;
        for (size_t i = 0; i < n; i++) slots[s][i] = info[s].init;
    }
    const OptimizerI *o = optimizer_i(cfg.kind);
    if (o->init_scalars) o->init_scalars(&cfg, scalars);
    for (size_t step = 0; step < k; step++) {
        optimizer_apply(var, slots, scalars, grads + step * n, n, lr, (long)step, &cfg);
        memcpy(out + step * n, var, n * sizeof(float));
    }
    f = fopen(argv[4], "wb");
    if (!f || fwrite(out, sizeof(float), n * k, f) != n * k || fclose(f) != 0) return die("cannot write", argv[4]);
    free(var), free(grads), free(out), free(slot_mem);
    return 0;
}
