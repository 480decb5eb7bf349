/* gzfile.c — a gzip file inflated, or any other file read as it is (see
 * gzfile.h).  io/, under the raw-dataset converters.  One input buffer;
 * inflate writes straight into the caller's memory. */
#include "io/gzfile.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/file.h"

/* The fuzz target compiles this file with a tiny buffer so that small inputs cross every refill. */
#ifndef GZFILE_IN_BUFFER_N_BYTES
#define GZFILE_IN_BUFFER_N_BYTES ((size_t)1 << 17)
#endif

struct GzFile {
    FILE *f;
    int gzip;                 /* the file starts with gzip's magic: inflated; else copied */
    int zs_live;              /* inflateInit2 done */
    int member_ended;         /* inflate returned Z_STREAM_END: another member, zeros or the file's end follow */
    int at_end;               /* the stream's end was reached cleanly */
    int in_eof;               /* fread met the file's end */
    z_stream zs;
    uint64_t in_offset;       /* file offset of in[0] */
    size_t in_pos, in_len;    /* unread input: in[in_pos .. in_len) */
    unsigned char in[GZFILE_IN_BUFFER_N_BYTES];
    char error[160];
};

/* Moves the unread input to the front and reads more behind it.  0 (in_eof set at the file's end), or -1 with
 * g->error. */
static int refill(GzFile *g) {
    if (g->in_pos > 0) {
        memmove(g->in, g->in + g->in_pos, g->in_len - g->in_pos);
        g->in_offset += g->in_pos;
        g->in_len -= g->in_pos;
        g->in_pos = 0;
    }
    const size_t got = fread(g->in + g->in_len, 1, sizeof g->in - g->in_len, g->f);
    g->in_len += got;
    if (got == 0) {
        if (ferror(g->f)) {
            snprintf(g->error, sizeof g->error, "read error: %s", strerror(errno ? errno : EIO));
            return -1;
        }
        g->in_eof = 1;
    }
    return 0;
}

GzFile *gzfile_open(const char *path, char *err, size_t err_n_bytes) {
    GzFile *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_n_bytes, "%s: out of memory", path);
        return NULL;
    }
    const char *instead;
    if (!(g->f = file_open_regular(path, &instead))) {
        if (instead) snprintf(err, err_n_bytes, "%s: not a regular file (%s)", path, instead);
        else snprintf(err, err_n_bytes, "%s: cannot open: %s", path, strerror(errno));
        free(g);
        return NULL;
    }
    while (g->in_len < 2 && !g->in_eof)
        if (refill(g) != 0) {
            snprintf(err, err_n_bytes, "%s: offset 0: %s", path, g->error);
            gzfile_close(g);
            return NULL;
        }
    g->gzip = g->in_len >= 2 && g->in[0] == 0x1f && g->in[1] == 0x8b;
    if (g->gzip) {
        if (inflateInit2(&g->zs, 16 + MAX_WBITS) != Z_OK) {
            snprintf(err, err_n_bytes, "%s: out of memory", path);
            gzfile_close(g);
            return NULL;
        }
        g->zs_live = 1;
    }
    return g;
}

/* After a member's end: another member (inflate reset for it; 0), zeros to the file's end or nothing (g->at_end;
 * 0), or anything else (-1 with g->error). */
static int after_member(GzFile *g) {
    while (g->in_len - g->in_pos < 2 && !g->in_eof)
        if (refill(g) != 0) return -1;
    const unsigned char *p = g->in + g->in_pos;
    const size_t avail = g->in_len - g->in_pos;
    if (avail >= 2 && p[0] == 0x1f && p[1] == 0x8b) {
        inflateReset(&g->zs);
        g->member_ended = 0;
        return 0;
    }
    const uint64_t junk_offset = g->in_offset + g->in_pos;
    uint64_t n_junk = 0;
    int zeros = 1;
    for (;;) { /* to the file's end: zeros are padding, anything else is counted whole */
        for (size_t k = g->in_pos; k < g->in_len; k++) zeros &= g->in[k] == 0;
        n_junk += g->in_len - g->in_pos;
        g->in_pos = g->in_len;
        if (g->in_eof) break;
        if (refill(g) != 0) return -1;
    }
    if (zeros) {
        g->at_end = 1;
        return 0;
    }
    snprintf(g->error, sizeof g->error, "gzip data error: %llu byte%s after the last gzip member (at offset %llu of the "
             "file) %s not another member", (unsigned long long)n_junk, n_junk == 1 ? "" : "s",
             (unsigned long long)junk_offset, n_junk == 1 ? "is" : "are");
    return -1;
}

long gzfile_read(GzFile *g, void *dst, size_t n) {
    unsigned char *out = dst;
    size_t done = 0;
    if (!g->gzip) {
        while (done < n) {
            if (g->in_pos == g->in_len) {
                if (g->in_eof) break;
                if (refill(g) != 0) return -1;
                continue;
            }
            size_t k = g->in_len - g->in_pos < n - done ? g->in_len - g->in_pos : n - done;
            memcpy(out + done, g->in + g->in_pos, k);
            g->in_pos += k;
            done += k;
        }
        return (long)done;
    }
    while (done < n && !g->at_end) {
        if (g->member_ended) {
            if (after_member(g) != 0) return -1;
            continue;
        }
        if (g->in_pos == g->in_len) {
            if (g->in_eof) {
                snprintf(g->error, sizeof g->error, "gzip data error: the compressed stream is truncated (no end marker)");
                return -1;
            }
            if (refill(g) != 0) return -1;
            continue;
        }
        const size_t want = n - done > ((size_t)1 << 30) ? (size_t)1 << 30 : n - done;
        g->zs.next_in = g->in + g->in_pos;
        g->zs.avail_in = (uInt)(g->in_len - g->in_pos);
        g->zs.next_out = out + done;
        g->zs.avail_out = (uInt)want;
        const int rc = inflate(&g->zs, Z_NO_FLUSH);
        g->in_pos = g->in_len - g->zs.avail_in;
        done += want - g->zs.avail_out;
        if (rc == Z_STREAM_END) {
            g->member_ended = 1;
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            snprintf(g->error, sizeof g->error, "gzip data error: %s", g->zs.msg ? g->zs.msg : "corrupt compressed stream");
            return -1;
        }
    }
    return (long)done;
}

const char *gzfile_error(const GzFile *g) { return g->error[0] ? g->error : "read error"; }

int gzfile_is_gzip(const GzFile *g) { return g->gzip; }

void gzfile_close(GzFile *g) {
    if (!g) return;
    if (g->zs_live) inflateEnd(&g->zs);
    if (g->f) fclose(g->f);
    free(g);
}
