/* test_io_crc32c.c — CRC-32C: known vectors on the hardware and the table
 * path, agreement with the bitwise definition at every length and
 * alignment, incremental extension, and TFRecord's mask. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "io/crc32c.h"
#include "test_io_util.h"

/* The definition: reflected polynomial 0x82F63B78, one bit at a time. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

typedef uint32_t (*CrcFn)(uint32_t, const void *, size_t);

static void check_vectors(const char *name, CrcFn fn) {
    uint8_t buf[32];
    CHECK_MSG(fn(0, "123456789", 9) == 0xE3069283u, "%s", name);
    CHECK_MSG(fn(0, "", 0) == 0u, "%s", name);
    /* RFC 3720 (iSCSI) appendix B.4 vectors. */
    memset(buf, 0, 32);
    CHECK_MSG(fn(0, buf, 32) == 0x8A9136AAu, "%s zeros", name);
    memset(buf, 0xff, 32);
    CHECK_MSG(fn(0, buf, 32) == 0x62A8AB43u, "%s ones", name);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    CHECK_MSG(fn(0, buf, 32) == 0x46DD794Eu, "%s incrementing", name);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    CHECK_MSG(fn(0, buf, 32) == 0x113FDB5Cu, "%s decrementing", name);
}

int main(void) {
    check_vectors("table", crc32c_extend_sw);
    check_vectors("dispatch", crc32c_extend);
    if (crc32c_have_hw()) check_vectors("sse4.2", crc32c_extend_hw);
    else printf("note: no SSE4.2 on this CPU; the hardware path falls back to the table\n");
    CHECK(crc32c("123456789", 9) == 0xE3069283u);

    /* Every length 0..300 at every alignment 0..7 against the definition. */
    uint8_t data[320];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof data; i++) {
        s = s * 1103515245u + 12345u;
        data[i] = (uint8_t)(s >> 16);
    }
    int mismatches = 0;
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 308; n++) {
            uint32_t want = crc32c_bitwise(data + off, n);
            if (crc32c_extend_sw(0, data + off, n) != want) mismatches++;
            if (crc32c_extend_hw(0, data + off, n) != want) mismatches++;
        }
    CHECK_MSG(mismatches == 0, "%d mismatches", mismatches);

    /* Extension: crc(a + b) == extend(crc(a), b), on both paths. */
    for (size_t cut = 0; cut <= 300; cut += 7) {
        uint32_t whole = crc32c_bitwise(data, 300);
        CHECK(crc32c_extend_sw(crc32c_extend_sw(0, data, cut), data + cut, 300 - cut) == whole);
        CHECK(crc32c_extend_hw(crc32c_extend_hw(0, data, cut), data + cut, 300 - cut) == whole);
    }

    /* Mask: the formula, and unmask inverts it. */
    uint32_t crcs[] = {0u, 1u, 0xE3069283u, 0xffffffffu, 0x8000u};
    for (size_t i = 0; i < sizeof crcs / sizeof crcs[0]; i++) {
        uint32_t c = crcs[i];
        uint32_t want = (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u);
        CHECK(crc32c_mask(c) == want);
        CHECK(crc32c_unmask(crc32c_mask(c)) == c);
        CHECK(crc32c_mask(c) != c);
    }
    return io_test_result("test_io_crc32c");
}
