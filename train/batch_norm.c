/* batch_norm.c — --batch_norm tower: batch norm's moving statistics (the
 * network's non-trainable variables) updated once per step from the
 * towers' batch statistics, the same way in every placement mode.
 *
 * Each tower normalises with its own shard's statistics (TF1 towers,
 * MirroredStrategy's plain BatchNormalization).  After the step's update,
 * tower t's statistics are applied to a copy of the current moving
 * statistics (its UPDATE_OPS on its own copy: moving * momentum + batch_t *
 * (1 - momentum), model_update_moving through the tower's backend; with
 * --accum_steps K, K such updates in micro-batch order, as Keras runs the
 * update on every training forward), the
 * copies of every tower of every rank are summed in the job's tower order
 * (rank-major, as the gradients) and divided by their count, and the mean is
 * written to every destination (the master variables, or every replica).
 * That is MirroredStrategy's ON_READ / MEAN aggregation of the moving
 * variables taken every step, and it does not depend on thread timing:
 * ps_cpu, replicated_host and replicated_mpi end bitwise equal.
 *
 * Where it sits: train/, called by each mode's step after its update
 * (train/mode.h).  Scratch: each tower's host gradient buffer, free once the
 * update has consumed it, and tr->moving_buf for the packed statistics.
 * --batch_norm sync (SyncBatchNormalization): the towers' batch norms sum
 * their statistics across the towers in every layer (model.h's ModelSync,
 * tower/tower.c's collective), so every tower saved the same global-batch
 * statistics (each micro-batch's: the sums run in every micro-batch's
 * forward): tower 0's are applied once (K times in order with
 * --accum_steps K), and the result is written to every
 * destination as above.  Across MPI ranks the sums of every layer go on
 * through the ranks in rank order (base/ranks.h's ranks_sum_ordered), so every
 * rank's tower 0 saved the same statistics and each rank applies its own,
 * with no gather.
 * The asynchronous parameter servers (mode_ps_async.c) apply the update
 * where the statistics live, on each push: train_moving_shares gives each
 * tower's share, batch * (1 - momentum), and the owner finishes the
 * arithmetic above on its current statistics (batchnorm_apply_moving_share).
 */
#include <stdio.h>
#include <string.h>

#include "base/ranks.h"
#include "ps/optimizer.h"
#include "train/mode.h"

size_t train_moving_n_floats(const ModelSpec *spec) {
    size_t n = 0;
    for (int v = 0; v < spec->n_vars; v++)
        if (!spec->vars[v].trainable) n += spec->vars[v].n_floats;
    return n;
}

/* The non-trainable variables of block (n_params) <-> packed (n_moving). */
static void pack_moving(const ModelSpec *spec, float *packed, const float *block) {
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        if (mv->trainable) continue;
        memcpy(packed, block + mv->offset, mv->n_floats * sizeof(float));
        packed += mv->n_floats;
    }
}

static void unpack_moving(const ModelSpec *spec, float *block, const float *packed) {
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        if (mv->trainable) continue;
        memcpy(block + mv->offset, packed, mv->n_floats * sizeof(float));
        packed += mv->n_floats;
    }
}

static void copy_moving(const ModelSpec *spec, float *dst, const float *src) {
    for (int v = 0; v < spec->n_vars; v++) {
        const ModelVar *mv = &spec->vars[v];
        if (!mv->trainable) memcpy(dst + mv->offset, src + mv->offset, mv->n_floats * sizeof(float));
    }
}

int train_update_moving(Trainer *tr, float *const *dst, int n_dst, float loss, char *err, size_t err_n_bytes) {
    const size_t nm = tr->moving_n_floats;
    if (nm == 0) return 0;
    /* sync: every tower of every rank saved the job's global-batch statistics (the same bits): this rank's tower 0
     * alone, with no exchange. */
    /* Server-only ranks (--ps_dedicated, ranks below n_servers) have no towers: they send rows of zeros, which
     * the sum skips, and write the same mean as the workers. */
    const int T = tr->bn_sync ? 1 : tr->worker_towers, R = tr->bn_sync ? 1 : tr->n_ranks;
    const int first = tr->bn_sync ? 0 : tr->n_servers, N = (R - first) * T;
    float *mine = tr->moving_buf;                              /* (T, nm) */
    float *all = R > 1 ? tr->moving_buf + (size_t)T * nm : mine; /* (R, T, nm) */
    if (tr->n_towers == 0) memset(mine, 0, (size_t)T * nm * sizeof(float));
    for (int t = 0; t < T && t < tr->n_towers; t++) {
        float *scratch = tr->ps->tower_grads[t];
        copy_moving(&tr->spec, scratch, dst[0]);
        if (tower_group_update_moving(tr->towers, t, scratch, err, err_n_bytes) != 0) return -1;
        pack_moving(&tr->spec, mine + (size_t)t * nm, scratch);
    }
    if (R > 1) ranks_allgather(mine, all, (size_t)T * nm * sizeof(float));
    /* all[0] = (all[f] + all[f+1] + ... + all[f+N-1]) / N, f = first x T, left to right (ps_average_grads' order). */
    const float n_f = (float)N;
    const size_t f = (size_t)first * T;
    int bad = 0;
    for (size_t i = 0; i < nm; i++) {
        float s = all[f * nm + i];
        for (size_t k = f + 1; k < f + (size_t)N; k++) s += all[k * nm + i];
        all[i] = s / n_f;
        bad |= float_nonfinite(all[i]);
    }
    /* A variance or mean gone to infinity (a huge learning rate, huge inputs) diverges at its step, as the trainable
     * variables do; the loss may stay finite a while, and the next checkpoint would refuse the variables. */
    if (bad) return train_diverged(tr->ps->global_step, "non-finite batch norm moving statistics", loss, err, err_n_bytes);
    for (int d = 0; d < n_dst; d++) unpack_moving(&tr->spec, dst[d], all);
    return 0;
}

int train_moving_shares(Trainer *tr, float *shares, char *err, size_t err_n_bytes) {
    const size_t nm = tr->moving_n_floats;
    for (int t = 0; t < tr->n_towers && nm > 0; t++) {
        float *scratch = tr->ps->tower_grads[t];
        for (int v = 0; v < tr->spec.n_vars; v++) {
            const ModelVar *mv = &tr->spec.vars[v];
            if (!mv->trainable) memset(scratch + mv->offset, 0, mv->n_floats * sizeof(float));
        }
        if (tower_group_update_moving(tr->towers, t, scratch, err, err_n_bytes) != 0) return -1;
        pack_moving(&tr->spec, shares + (size_t)t * nm, scratch);
    }
    return 0;
}
