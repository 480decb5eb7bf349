/* escape.h — bytes that came from a file or a file name, made safe to print.
 *
 * Where it sits: base/, the floor: io/ (record keys, file names in
 * messages), ps/ (names in checkpoints) and cmd/ use it before a byte from
 * outside reaches a terminal or a log.  Header only, no allocation.
 * Rule: printable ASCII (0x20..0x7e) passes through; every other byte
 * (control bytes such as a newline, CR, ESC, NUL; DEL; bytes >= 0x80, which
 * include the C1 controls) is written as the four characters \xHH
 * (lowercase hex).  A backslash passes through, so escaping twice changes
 * nothing and a message may be escaped whole after names were put in it.
 * So a message stays one line and cannot move the cursor, clear the screen
 * or forge a line.  UTF-8 names come out as \xHH sequences.
 * What it does not do: no unescaping, no quoting for a shell or JSON.
 */
#ifndef TOWER_BASE_ESCAPE_H
#define TOWER_BASE_ESCAPE_H

#include <stddef.h>

/* Writes the escaped form of src (src_n_bytes bytes, NULs included) into
 * out (out_n_bytes, > 0), always NUL-terminated; when out is too short the
 * text is cut at a whole character or escape.  Returns out. */
static inline char *escape_bytes(char *out, size_t out_n_bytes, const void *src, size_t src_n_bytes) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)src;
    size_t o = 0;
    if (!out || !out_n_bytes) return out;
    for (size_t i = 0; i < src_n_bytes; i++) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x7f) {
            if (o + 1 >= out_n_bytes) break;
            out[o++] = (char)c;
        } else {
            if (o + 4 >= out_n_bytes) break;
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return out;
}

/* escape_bytes of the NUL-terminated string s (NULL prints as "(null)"). */
static inline char *escape_str(char *out, size_t out_n_bytes, const char *s) {
    size_t n = 0;
    if (!s) s = "(null)";
    while (s[n]) n++;
    return escape_bytes(out, out_n_bytes, s, n);
}

/* Escapes the NUL-terminated message in buf (capacity buf_n_bytes) in place,
 * cutting it to fit.  For a message built with names from outside. */
static inline void escape_in_place(char *buf, size_t buf_n_bytes) {
    size_t n = 0, n_extra = 0;
    if (!buf || !buf_n_bytes) return;
    while (buf[n]) {
        unsigned char c = (unsigned char)buf[n++];
        if (c < 0x20 || c >= 0x7f) n_extra += 3;
    }
    if (!n_extra) return;
    /* From the end backwards, so no copy is needed; escapes that do not fit are cut. */
    size_t len = n + n_extra;
    while (len + 1 > buf_n_bytes) { /* drop source bytes from the end until the result fits */
        unsigned char c = (unsigned char)buf[--n];
        len -= (c < 0x20 || c >= 0x7f) ? 4 : 1;
    }
    static const char hex[] = "0123456789abcdef";
    buf[len] = '\0';
    size_t o = len;
    while (n > 0) {
        unsigned char c = (unsigned char)buf[--n];
        if (c < 0x20 || c >= 0x7f) {
            buf[--o] = hex[c & 15];
            buf[--o] = hex[c >> 4];
            buf[--o] = 'x';
            buf[--o] = '\\';
        } else {
            buf[--o] = (char)c;
        }
    }
}

#endif
