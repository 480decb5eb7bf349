/* host_alloc.h — how a backend hands out host memory.
 *
 * Where it sits: the tower backends (tower/) provide a HostAlloc; the
 * parameter server (ps/) takes its master-variable block from it and the
 * input pipeline (io/) its staging buffers, so that with the CUDA backend
 * both are pinned (cudaHostAlloc) and copies to the devices run at full
 * speed.  This header defines the interface and the plain page-aligned
 * default used by CPU towers (base/host_alloc.c); it knows nothing of any
 * device.
 */
#ifndef TOWER_HOST_ALLOC_H
#define TOWER_HOST_ALLOC_H

#include <stddef.h>

typedef struct {
    /* Returns n_bytes of zeroed host memory aligned to at least 64 bytes, or NULL. */
    void *(*alloc)(size_t n_bytes, void *ctx);
    void (*free)(void *p, void *ctx);
    void *ctx;
    const char *kind; /* for --log_device_placement: "page-aligned host memory", "pinned host memory (cudaHostAlloc)" */
} HostAlloc;

/* Blocks of at least this many bytes are mapped from the kernel (below). */
#define HOST_ALLOC_MAP_MIN_N_BYTES ((size_t)2 << 20)

/* n_bytes of zeroed, page-aligned host memory, or NULL when there is none
 * (or n_bytes overflows).  A block of at least HOST_ALLOC_MAP_MIN_N_BYTES
 * is an anonymous mapping of its own, zero as the kernel hands it out (no
 * memset: its pages are touched first by whoever writes them, e.g. the
 * input pipeline's workers, not all at once by the allocating thread); a
 * smaller one comes from posix_memalign and is zeroed here.  ctx is
 * unused.  Free it only with host_free_page_aligned: a page before the
 * block says which it is. */
void *host_alloc_page_aligned(size_t n_bytes, void *ctx);

/* The bytes host_alloc_page_aligned holds for a block of n_bytes: its
 * whole pages and the page before them (the page size of this machine).
 * For memory bounds (the input pipeline's); no overflow check. */
size_t host_alloc_page_aligned_n_bytes(size_t n_bytes);

/* Frees a block of host_alloc_page_aligned; NULL is a no-op. */
void host_free_page_aligned(void *p, void *ctx);

/* The default allocator: page-aligned, zeroed host memory. */
static inline HostAlloc host_alloc_default(void) {
    HostAlloc a = {host_alloc_page_aligned, host_free_page_aligned, NULL, "page-aligned host memory"};
    return a;
}

#endif
