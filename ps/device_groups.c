/* device_groups.c — which towers share a device (see device_groups.h). */
#include "ps/device_groups.h"

#include <stdio.h>
#include <string.h>

int device_groups_plan(DeviceGroups *out, int n_towers, const int *devices, char *err, size_t err_n_bytes) {
    if (n_towers < 1 || n_towers > DEVICE_GROUPS_MAX) {
        snprintf(err, err_n_bytes, "device groups: %d towers, expected 1 to %d", n_towers, DEVICE_GROUPS_MAX);
        return -1;
    }
    for (int t = 0; t < n_towers; t++) {
        if (devices[t] < 0) {
            snprintf(err, err_n_bytes, "device groups: tower %d is on device %d, expected a device number >= 0", t,
                     devices[t]);
            return -1;
        }
    }
    DeviceGroups g;
    memset(&g, 0, sizeof g);
    g.n_towers = n_towers;
    for (int t = 0; t < n_towers; t++) {
        int k = 0;
        while (k < g.n_groups && g.device[k] != devices[t]) k++;
        if (k == g.n_groups) { /* first tower on this device: a new group, led by t */
            g.device[k] = devices[t];
            g.leader[k] = t;
            g.n_groups++;
        }
        g.group_of[t] = k;
        g.members[k][g.n_members[k]++] = t;
    }
    *out = g;
    return 0;
}
