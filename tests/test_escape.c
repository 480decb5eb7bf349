/* test_escape.c — base/escape.h: bytes from files and file names made safe to print.
 *
 * What it proves: printable ASCII passes through; every other byte (NUL,
 * newline, CR, ESC, DEL, bytes >= 0x80) becomes \xHH; a short buffer cuts at
 * a whole character or escape, ends in "..." and stays NUL-terminated; escaping in place
 * gives the same text as escaping into another buffer, and escaping twice
 * changes nothing.
 */
#include <stdio.h>
#include <string.h>

#include "base/escape.h"

#include "tests/check.h"

int main(void) {
    char out[256];
    const char raw[] = "a\nb\x1b[2J\rc\0d\x7f\x9b\xc3\xa9\\x";
    escape_bytes(out, sizeof out, raw, sizeof raw - 1);
    const char *want = "a\\x0ab\\x1b[2J\\x0dc\\x00d\\x7f\\x9b\\xc3\\xa9\\x";
    CHECK(!strcmp(out, want), "escape_bytes: '%s', expected '%s'", out, want);
    for (const char *c = out; *c; c++) CHECK(*c >= 0x20 && *c < 0x7f, "raw byte 0x%02x", (unsigned char)*c);

    escape_str(out, sizeof out, "plain name.tfrecord");
    CHECK(!strcmp(out, "plain name.tfrecord"), "escape_str changed a plain name: '%s'", out);
    escape_str(out, sizeof out, NULL);
    CHECK(!strcmp(out, "(null)"), "escape_str(NULL): '%s'", out);

    /* Short buffers: whole escapes only, and "..." says the text was cut (where the buffer holds more than 4). */
    char small[7];
    escape_bytes(small, sizeof small, "ab\ncd", 5);
    CHECK(!strcmp(small, "ab..."), "cut before an escape that does not fit, marked: '%s'", small);
    escape_bytes(small, sizeof small, "a\nbcdefgh", 9);
    CHECK(!strcmp(small, "a..."), "cut: '%s'", small);
    escape_bytes(small, sizeof small, "abcdefgh", 8);
    CHECK(!strcmp(small, "abc..."), "plain text cut: '%s'", small);
    escape_bytes(small, sizeof small, "abcdef", 6);
    CHECK(!strcmp(small, "abcdef"), "a text that just fits is whole, unmarked: '%s'", small);
    escape_bytes(small, 4, "abcdef", 6);
    CHECK(!strcmp(small, "abc"), "no room for the marker: cut alone: '%s'", small);
    char wide[16];
    escape_bytes(wide, sizeof wide, "ab\ncd\x1b", 6);
    CHECK(!strcmp(wide, "ab\\x0acd\\x1b"), "fits whole: '%s'", wide);
    escape_bytes(wide, sizeof wide, "ab\ncde\x1bxyz", 10);
    CHECK(!strcmp(wide, "ab\\x0acde..."), "cut at the escape: '%s'", wide);

    /* In place: the same text; twice: unchanged; cut to fit, marked. */
    char buf[64];
    snprintf(buf, sizeof buf, "%s", "x\ny\x1b");
    escape_in_place(buf, sizeof buf);
    CHECK(!strcmp(buf, "x\\x0ay\\x1b"), "in place: '%s'", buf);
    escape_in_place(buf, sizeof buf);
    CHECK(!strcmp(buf, "x\\x0ay\\x1b"), "twice: '%s'", buf);
    char tight[12] = "ab\ncd\n";
    escape_in_place(tight, sizeof tight);
    CHECK(!strcmp(tight, "ab\\x0acd..."), "in place, cut: '%s'", tight);
    char exact[13] = "ab\ncd\n";
    escape_in_place(exact, sizeof exact);
    CHECK(!strcmp(exact, "ab\\x0acd\\x0a"), "in place, just fits: '%s'", exact);
    /* The same cut into another buffer and in place. */
    for (size_t n = 1; n <= 20; n++) {
        char a[32], b[32];
        const char *msg = "p\x01q\x1b[2Jrs\n";
        escape_bytes(a, n, msg, strlen(msg));
        snprintf(b, sizeof b, "%s", msg);
        escape_in_place(b, n);
        CHECK(!strcmp(a, b), "buffer of %zu: '%s' into another, '%s' in place", n, a, b);
        CHECK(strlen(a) < n, "buffer of %zu: '%s' overruns", n, a);
    }
    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
