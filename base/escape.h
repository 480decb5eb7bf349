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
#include <string.h>

/* A buffer for one file path escaped: a path of PATH_MAX (4096) printable
 * bytes whole; one with many escapes cut, marked "...". */
#define ESCAPE_PATH_N_BYTES 4200

/* Writes the escaped form of src (src_n_bytes bytes, NULs included) into
 * out (out_n_bytes, > 0), always NUL-terminated; when out is too short the
 * text is cut at a whole character or escape and ends in "..." (where out
 * holds more than 4 bytes), so a cut name is never taken for a whole one.
 * Returns out. */
static inline char *escape_bytes(char *out, size_t out_n_bytes, const void *src, size_t src_n_bytes) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)src;
    if (!out || !out_n_bytes) return out;
    size_t need = 0;
    for (size_t i = 0; i < src_n_bytes; i++) need += p[i] >= 0x20 && p[i] < 0x7f ? 1 : 4;
    const int cut = need + 1 > out_n_bytes, marked = cut && out_n_bytes > 4;
    const size_t room = out_n_bytes - 1 - (marked ? 3 : 0); /* characters before the marker */
    size_t o = 0;
    for (size_t i = 0; i < src_n_bytes; i++) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x7f) {
            if (o + 1 > room) break;
            out[o++] = (char)c;
        } else {
            if (o + 4 > room) break;
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (marked) {
        memcpy(out + o, "...", 3);
        o += 3;
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
 * cutting it to fit as escape_bytes does ("..." at the end of a cut one).
 * For a message built with names from outside. */
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
    const int cut = len + 1 > buf_n_bytes, marked = cut && buf_n_bytes > 4;
    const size_t room = buf_n_bytes - 1 - (marked ? 3 : 0);
    while (len > room) { /* drop source bytes from the end until the result fits */
        unsigned char c = (unsigned char)buf[--n];
        len -= (c < 0x20 || c >= 0x7f) ? 4 : 1;
    }
    static const char hex[] = "0123456789abcdef";
    /* the marker past the escaped text: only dropped source bytes lie there */
    if (marked) memcpy(buf + len, "...", 4);
    else buf[len] = '\0';
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
