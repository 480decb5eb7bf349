/* crc32c.c — CRC-32C, hardware (SSE4.2) and slicing-by-8 table paths.
 *
 * Where it sits: io/, under the TFRecord reader and writer (see crc32c.h).
 * The table is built once, thread-safely, on first use; the hardware path is
 * compiled with __attribute__((target("sse4.2"))) so the library itself needs
 * no -msse4.2 and still runs on CPUs without it.
 */
#include "io/crc32c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define CRC32C_POLY_REFLECTED 0x82F63B78u

static uint32_t crc_table[8][256]; /* (8, 256) slicing-by-8 tables */
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_build(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ ((c & 1u) ? CRC32C_POLY_REFLECTED : 0u);
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xffu];
}

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

uint32_t crc32c_extend_sw(uint32_t crc, const void *data, size_t n_bytes) {
    pthread_once(&crc_table_once, crc_table_build);
    const uint8_t *p = (const uint8_t *)data;
    uint32_t c = ~crc;
    while (n_bytes >= 8) {
        uint64_t v = load_le64(p) ^ c;
        c = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
            crc_table[5][(v >> 16) & 0xff] ^ crc_table[4][(v >> 24) & 0xff] ^
            crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
            crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][(v >> 56) & 0xff];
        p += 8;
        n_bytes -= 8;
    }
    while (n_bytes--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xffu];
    return ~c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_impl(uint32_t crc, const uint8_t *p, size_t n_bytes) {
    uint64_t c = ~crc;
    while (n_bytes && ((uintptr_t)p & 7u)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n_bytes--;
    }
    while (n_bytes >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n_bytes -= 8;
    }
    while (n_bytes--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

int crc32c_have_hw(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

uint32_t crc32c_extend_hw(uint32_t crc, const void *data, size_t n_bytes) {
    if (!crc32c_have_hw()) return crc32c_extend_sw(crc, data, n_bytes);
    return crc32c_hw_impl(crc, (const uint8_t *)data, n_bytes);
}
#else
int crc32c_have_hw(void) { return 0; }
uint32_t crc32c_extend_hw(uint32_t crc, const void *data, size_t n_bytes) {
    return crc32c_extend_sw(crc, data, n_bytes);
}
#endif

/* -1: not yet probed, 0: table, 1: hardware.  Every thread that probes
 * stores the same value, so relaxed ordering is enough. */
static atomic_int crc_use_hw = -1;

uint32_t crc32c_extend(uint32_t crc, const void *data, size_t n_bytes) {
    int hw = atomic_load_explicit(&crc_use_hw, memory_order_relaxed);
    if (hw < 0) {
        hw = crc32c_have_hw();
        atomic_store_explicit(&crc_use_hw, hw, memory_order_relaxed);
    }
#if defined(__x86_64__)
    if (hw) return crc32c_hw_impl(crc, (const uint8_t *)data, n_bytes);
#endif
    return crc32c_extend_sw(crc, data, n_bytes);
}

uint32_t crc32c(const void *data, size_t n_bytes) { return crc32c_extend(0, data, n_bytes); }
