/* host_alloc.c — the default host allocator: page-aligned, zeroed blocks.
 *
 * Where it sits: base/, under every floor; the CPU towers' HostAlloc
 * (base/host_alloc.h), so the parameter server's master variables and the
 * input pipeline's staging buffers come from here when no device pins them.
 * Why large blocks are mapped: the pipeline's staging buffers are tens of
 * MiB (64 images of 224 x 224 x 3 floats are 38.5 MB a batch); zeroing them
 * with memset in pipeline_open faulted every 4 KiB page in one thread before
 * the first image was decoded (about 40 ms for 77 MB on the 2-core EPYC, see
 * bench/RESULTS.md).  A fresh mapping is zero already, and its pages fault in
 * where they are first written, once (the kernel's zeroing, without a second
 * pass of memset).
 * What it does not do: pin memory (tower/tower_cuda.c does), pool blocks
 * (each call maps or allocates, each free unmaps or frees), or ask for
 * transparent huge pages (tried: no difference measured through the noise of
 * this machine, and a policy of the kernel's to leave to the user).
 * LeakSanitizer does not see the mapped blocks (only malloc's); the smaller
 * ones, and everything else in the process, it still checks.
 */
#include "base/host_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The page before each block: the length of the mapping that holds both, or
 * 0 where the block came from posix_memalign. */
typedef struct {
    size_t map_n_bytes;
} HostAllocHeader;

static size_t page_n_bytes(void) {
    const long n = sysconf(_SC_PAGESIZE);
    return n > 0 ? (size_t)n : 4096;
}

size_t host_alloc_page_aligned_n_bytes(size_t n_bytes) {
    const size_t page = page_n_bytes();
    return page + (n_bytes + page - 1) / page * page;
}

void *host_alloc_page_aligned(size_t n_bytes, void *ctx) {
    (void)ctx;
    const size_t page = page_n_bytes();
    if (n_bytes > SIZE_MAX - 2 * page) return NULL;
    const size_t total = host_alloc_page_aligned_n_bytes(n_bytes);
    char *base;
    if (n_bytes >= HOST_ALLOC_MAP_MIN_N_BYTES) {
        void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        base = m;
        ((HostAllocHeader *)base)->map_n_bytes = total;
    } else {
        void *m = NULL;
        if (posix_memalign(&m, page, total) != 0) return NULL;
        base = m;
        memset(base, 0, total);
        ((HostAllocHeader *)base)->map_n_bytes = 0;
    }
    return base + page;
}

void host_free_page_aligned(void *p, void *ctx) {
    (void)ctx;
    if (!p) return;
    char *base = (char *)p - page_n_bytes();
    const size_t map_n_bytes = ((HostAllocHeader *)base)->map_n_bytes;
    if (map_n_bytes) munmap(base, map_n_bytes);
    else free(base);
}
