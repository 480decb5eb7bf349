/* crc32c.h — CRC-32C (Castagnoli), the checksum of TFRecord framing.
 *
 * Where it sits: io/ checks every TFRecord length and payload with it on the
 * way in (io -> shards) and stamps them on the way out (converters, and later
 * TensorBoard event files).  Polynomial 0x1EDC6F41 (reflected 0x82F63B78),
 * initial value ~0, final xor ~0: crc32c("123456789") == 0xE3069283.
 * Two implementations: the SSE4.2 crc32 instruction (8 bytes per step) and a
 * slicing-by-8 table; crc32c_extend() picks one at run time.  Both are public
 * so tests can check each.  What it does not do: no other CRC polynomials.
 */
#ifndef TOWER_IO_CRC32C_H
#define TOWER_IO_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of data (n_bytes) continuing from crc (0 to start: the ~ pre/post
 * conditioning is done inside, as in TensorFlow's crc32c::Extend).  Uses the
 * hardware path when the CPU has SSE4.2, else the table.  Never fails. */
uint32_t crc32c_extend(uint32_t crc, const void *data, size_t n_bytes);

/* crc32c_extend(0, data, n_bytes). */
uint32_t crc32c(const void *data, size_t n_bytes);

/* The table path (slicing-by-8), on every CPU. */
uint32_t crc32c_extend_sw(uint32_t crc, const void *data, size_t n_bytes);

/* The SSE4.2 path.  Call only when crc32c_have_hw() is 1: on other CPUs (or
 * non-x86 builds) it falls back to the table path itself. */
uint32_t crc32c_extend_hw(uint32_t crc, const void *data, size_t n_bytes);

/* 1 when the CPU has the SSE4.2 crc32 instruction, else 0. */
int crc32c_have_hw(void);

/* TFRecord's masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8, and back. */
static inline uint32_t crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
static inline uint32_t crc32c_unmask(uint32_t masked) {
    uint32_t rot = masked - 0xa282ead8u;
    return (rot >> 17) | (rot << 15);
}

#endif
