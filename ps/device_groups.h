/* device_groups.h — which towers share a device: the plan of the
 * replicated_nccl all-reduce (and of any reduction that wants one rank per
 * device).
 *
 * Where it sits: ps/, plain C, built with or without CUDA (so that the plan
 * is unit-tested on any machine).  NCCL refuses two ranks of one
 * communicator on the same GPU, so with several towers on a GPU the
 * all-reduce runs in three stages (ps/allreduce_nccl.h, docs/modes.md):
 *   1. on each GPU, the gradients of its towers are summed into its leader's
 *      buffer (the leader: the lowest-numbered tower on that GPU), in tower
 *      order;
 *   2. the leaders all-reduce across GPUs, one NCCL rank per GPU, ranks
 *      numbered in the order the GPUs first appear in the tower list;
 *   3. every other tower of a GPU copies the result from its leader.
 * This file only computes that plan from the towers' device numbers; it
 * moves no data and knows nothing of CUDA or NCCL.
 */
#ifndef TOWER_PS_DEVICE_GROUPS_H
#define TOWER_PS_DEVICE_GROUPS_H

#include <stddef.h>

#include "base/limits.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many towers (base/limits.h). */
#define DEVICE_GROUPS_MAX TOWER_MAX_TOWERS

typedef struct {
    int n_towers;
    int n_groups;                                        /* distinct devices = NCCL ranks */
    int device[DEVICE_GROUPS_MAX];                       /* [n_groups] group g's device, in order of first appearance */
    int group_of[DEVICE_GROUPS_MAX];                     /* [n_towers] the group (rank) of tower t */
    int leader[DEVICE_GROUPS_MAX];                       /* [n_groups] the lowest-numbered tower of group g */
    int n_members[DEVICE_GROUPS_MAX];                    /* [n_groups] towers on group g's device */
    int members[DEVICE_GROUPS_MAX][DEVICE_GROUPS_MAX];   /* [g][k] the k-th tower of group g, ascending; members[g][0] = leader[g] */
} DeviceGroups;

/* Plan the groups of n_towers towers, tower t on devices[t] (>= 0).
 * Returns 0, or -1 with one line in err when n_towers is outside
 * [1, DEVICE_GROUPS_MAX] or a device number is negative (out untouched
 * then).  out is owned by the caller. */
int device_groups_plan(DeviceGroups *out, int n_towers, const int *devices, char *err, size_t err_n_bytes);

#ifdef __cplusplus
}
#endif

#endif
