/* host_alloc.h — how a backend hands out host memory.
 *
 * Where it sits: the tower backends (tower/) provide a HostAlloc; the
 * parameter server (ps/) takes its master-variable block from it and the
 * input pipeline (io/) its staging buffers, so that with the CUDA backend
 * both are pinned (cudaHostAlloc) and copies to the devices run at full
 * speed.  This header only defines the interface and the plain page-aligned
 * default used by CPU towers; it knows nothing of any device.
 */
#ifndef TOWER_HOST_ALLOC_H
#define TOWER_HOST_ALLOC_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    /* Returns n_bytes of zeroed host memory aligned to at least 64 bytes, or NULL. */
    void *(*alloc)(size_t n_bytes, void *ctx);
    void (*free)(void *p, void *ctx);
    void *ctx;
    const char *kind; /* for --log_device_placement: "page-aligned host memory", "pinned host memory (cudaHostAlloc)" */
} HostAlloc;

static inline void *host_alloc_page_aligned(size_t n_bytes, void *ctx) {
    (void)ctx;
    void *p = NULL;
    if (posix_memalign(&p, 4096, n_bytes ? n_bytes : 1) != 0) return NULL;
    memset(p, 0, n_bytes);
    return p;
}
static inline void host_free_page_aligned(void *p, void *ctx) { (void)ctx; free(p); }

/* The default allocator: page-aligned, zeroed host memory. */
static inline HostAlloc host_alloc_default(void) {
    HostAlloc a = {host_alloc_page_aligned, host_free_page_aligned, NULL, "page-aligned host memory"};
    return a;
}

#endif
