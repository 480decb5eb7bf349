/* test_base_host_alloc.c — the default host allocator (base/host_alloc.c):
 * every block page-aligned and zero, on both of its paths (posix_memalign
 * and memset below HOST_ALLOC_MAP_MIN_N_BYTES, an anonymous mapping from
 * it up), also when a block of the same size was just written and freed
 * (the small path reuses freed memory: a missing memset shows here), and
 * an impossible size refused with NULL; the bytes it says a block holds
 * (host_alloc_page_aligned_n_bytes) whole pages of this machine's size.
 *
 * Where it sits: ctest (CPU).  The pipeline's staging buffers and the
 * parameter server's master variables come from this allocator on CPU
 * towers; both count on the zeros.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/host_alloc.h"
#include "tests/check.h"

/* The first non-zero byte of p (n_bytes), or -1. */
static long first_nonzero(const unsigned char *p, size_t n_bytes) {
    for (size_t i = 0; i < n_bytes; i++)
        if (p[i]) return (long)i;
    return -1;
}

int main(void) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t M = HOST_ALLOC_MAP_MIN_N_BYTES;
    const size_t sizes[] = {0, 1, 63, 4095, 4096, 4097, 65536, M - 1, M, M + 1, 3 * M + 12345, (size_t)77 << 20};
    for (int round = 0; round < 2; round++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            const size_t n = sizes[k];
            unsigned char *p = host_alloc_page_aligned(n, NULL);
            CHECK(p != NULL, "round %d: %zu bytes: NULL", round, n);
            if (!p) continue;
            CHECK((uintptr_t)p % page == 0, "round %d: %zu bytes at %p: not aligned to the page (%zu)", round, n,
                  (void *)p, page);
            /* What a memory bound counts for it (the input pipeline's): whole pages of this machine, and one more. */
            const size_t held = host_alloc_page_aligned_n_bytes(n);
            CHECK(held % page == 0 && held >= n + page && held < n + 2 * page,
                  "%zu bytes: host_alloc_page_aligned_n_bytes says %zu (pages of %zu)", n, held, page);
            const long nz = first_nonzero(p, n);
            CHECK(nz < 0, "round %d: %zu bytes: byte %ld is 0x%02x, not zero", round, n, nz, nz < 0 ? 0 : p[nz]);
            memset(p, 0xab, n); /* every byte writable; dirty for the next round's block of this size */
            host_free_page_aligned(p, NULL);
        }
    }
    host_free_page_aligned(NULL, NULL);
    CHECK(host_alloc_page_aligned(SIZE_MAX, NULL) == NULL, "SIZE_MAX bytes: not refused");
    CHECK(host_alloc_page_aligned(SIZE_MAX - page, NULL) == NULL, "SIZE_MAX - page bytes: not refused");
    HostAlloc a = host_alloc_default();
    float *x = a.alloc(M * 2, a.ctx);
    CHECK(x && x[0] == 0.0f && x[M / 2 - 1] == 0.0f, "host_alloc_default: not zeroed floats");
    a.free(x, a.ctx);
    if (check_failures) {
        printf("FAIL: %d checks failed\n", check_failures);
        return 1;
    }
    printf("host_alloc_page_aligned: %zu sizes (0 to 77 MiB, both paths), page-aligned and zero twice; SIZE_MAX "
           "refused: ok\n", sizeof sizes / sizeof sizes[0]);
    return 0;
}
