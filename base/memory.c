/* memory.c — the host memory this process can still take (base/memory.h):
 * /proc/meminfo and the process's cgroup (v2 or v1), read as text. */
#include "base/memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* One number from a file holding it alone ("max" and unreadable: 0). */
static unsigned long long read_number(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return v;
}

/* MemAvailable of /proc/meminfo in bytes, or 0. */
static unsigned long long meminfo_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return kib * 1024ULL;
}

/* The limit (bytes) of this process's cgroup minus its usage, with the limit
 * file's path in limit_path; 0 when no cgroup sets a limit (or none can be
 * read).  A limit at or below the usage counts as 1 byte left. */
static unsigned long long cgroup_left(char *limit_path, size_t limit_path_n_bytes, unsigned long long *limit) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096];
    unsigned long long left = 0;
    *limit = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        /* "0::/path" (v2) or "N:memory:/path" (v1, possibly "N:cpu,memory:/path"). */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *controllers = c1 + 1, *rel = c2 + 1;
        const int v2 = controllers[0] == '\0';
        const int v1 = !v2 && (strstr(controllers, "memory") != NULL);
        if (!v1 && !v2) continue;
        if (!strcmp(rel, "/")) rel = "";
        char lim_path[4200], use_path[4200];
        /* Inside a container the cgroup's own files are at the mount's root; try both. */
        for (int attempt = 0; attempt < 2; attempt++) {
            const char *r = attempt == 0 ? rel : "";
            if (v2) {
                snprintf(lim_path, sizeof lim_path, "/sys/fs/cgroup%s/memory.max", r);
                snprintf(use_path, sizeof use_path, "/sys/fs/cgroup%s/memory.current", r);
            } else {
                snprintf(lim_path, sizeof lim_path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", r);
                snprintf(use_path, sizeof use_path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", r);
            }
            FILE *probe = fopen(lim_path, "r");
            if (!probe) continue;
            fclose(probe);
            unsigned long long lim = read_number(lim_path), used = read_number(use_path);
            /* v2 "max" reads as 0; v1 "no limit" is a huge number near 2^63. */
            if (lim == 0 || lim >= (1ULL << 60)) break;
            unsigned long long l = lim > used ? lim - used : 1;
            if (left == 0 || l < left) {
                left = l;
                *limit = lim;
                snprintf(limit_path, limit_path_n_bytes, "%s", lim_path);
            }
            break;
        }
    }
    fclose(f);
    return left;
}

/* The address-space limit (RLIMIT_AS: ulimit -v, prlimit --as) minus this process's address space now (VmSize of
 * /proc/self/status) and an eighth of the limit (at least 256 MiB): the address space the threads still to start
 * reserve beyond what they touch (stacks, malloc arenas; mnist at batch 6500 reached 1.05 GiB of it over its
 * resident peak, the libraries' 0.9 of it mapped at the start).  *limit gets the limit; 0 when there is none (or
 * VmSize cannot be read).  A limit at or below that counts as 1 byte left.  malloc fails past the limit, so a bound
 * over it ended in an abort or a crash. */
static unsigned long long address_space_left(unsigned long long *limit, unsigned long long *size) {
    struct rlimit rl;
    *limit = *size = 0;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "VmSize: %llu kB", &kib) == 1;
    fclose(f);
    if (!found) return 0;
    *limit = (unsigned long long)rl.rlim_cur;
    const unsigned long long margin = *limit / 8 > (256ULL << 20) ? *limit / 8 : 256ULL << 20;
    *size = kib * 1024ULL;
    return *limit > *size + margin ? *limit - *size - margin : 1;
}

size_t memory_available_n_bytes(char *source, size_t source_n_bytes) {
    char dummy[8];
    if (!source) {
        source = dummy;
        source_n_bytes = sizeof dummy;
    }
    const char *forced = getenv(MEMORY_TEST_AVAILABLE_ENV);
    if (forced && forced[0]) {
        char *end;
        unsigned long long v = strtoull(forced, &end, 10);
        if (*end == '\0') {
            snprintf(source, source_n_bytes, "%s", MEMORY_TEST_AVAILABLE_ENV);
            return (size_t)v;
        }
    }
    unsigned long long avail = meminfo_available(), limit = 0, as_limit = 0, as_size = 0;
    char limit_path[4200] = "";
    unsigned long long left = cgroup_left(limit_path, sizeof limit_path, &limit);
    const unsigned long long as_left = address_space_left(&as_limit, &as_size);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (as_left > 0 && (avail == 0 || as_left < avail) && (left == 0 || as_left < left)) {
        snprintf(source, source_n_bytes, "the address-space limit (ulimit -v) of %.1f GiB minus this process's %.2f "
                 "GiB and a reserve for its threads", (double)as_limit / gib, (double)as_size / gib);
        return (size_t)as_left;
    }
    if (left > 0 && (avail == 0 || left < avail)) {
        snprintf(source, source_n_bytes, "the cgroup limit %s (%.1f GiB) minus its usage", limit_path,
                 (double)limit / gib);
        return (size_t)left;
    }
    snprintf(source, source_n_bytes, "MemAvailable in /proc/meminfo");
    return (size_t)avail;
}
