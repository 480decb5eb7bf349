/* memory.h — how much host memory this process can still take.
 *
 * Where it sits: base/, under every floor.  The trainer (train/) and
 * `tower eval` (cmd/) compare their memory bound with it before they
 * allocate, so a batch that cannot fit is refused in one line instead of
 * ending under the kernel's OOM killer.
 * What it does not do: reserve anything, or count swap (a run that swaps
 * is not refused), or know what other processes will take meanwhile.
 */
#ifndef TOWER_BASE_MEMORY_H
#define TOWER_BASE_MEMORY_H

#include <stddef.h>

/* The variable that replaces every figure below with its value (bytes),
 * for tests: TOWER_TEST_MEM_AVAILABLE_BYTES=1000000 tower train ... */
#define MEMORY_TEST_AVAILABLE_ENV "TOWER_TEST_MEM_AVAILABLE_BYTES"

/* The bytes this process can still allocate and touch: the least of
 * MemAvailable (/proc/meminfo) and, where this process's cgroup sets a
 * limit, that limit minus the cgroup's current usage (cgroup v2
 * memory.max - memory.current, or v1 memory.limit_in_bytes -
 * memory.usage_in_bytes), and, under an address-space limit (RLIMIT_AS:
 * ulimit -v, prlimit --as), that limit minus the process's VmSize and a
 * reserve for its threads' stacks and arenas (an eighth, at least 256 MiB).
 * `source` (when not NULL) receives where the
 * figure came from, e.g. "MemAvailable in /proc/meminfo" or "the cgroup
 * limit /sys/fs/cgroup/x/memory.max (8.0 GiB) minus its usage".
 * Returns 0 when nothing can be read (no /proc): the caller then does not
 * compare.  Never fails otherwise; allocates nothing. */
size_t memory_available_n_bytes(char *source, size_t source_n_bytes);

#endif
