/* tfrecord.c — TFRecord reader and writer (see tfrecord.h).
 *
 * Where it sits: io/, under the pipeline, the converters and `tower inspect`.
 * The reader pulls bytes through one input buffer: uncompressed files are
 * copied out of it (large reads go straight from the file into the record
 * buffer), compressed ones are inflated from it directly into the record
 * buffer.  What it does not do: no seeking, no threads.
 */
#include "io/tfrecord.h"

#include "io/crc32c.h"
#include "base/escape.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The fuzz target of the reader compiles this file with a tiny input buffer
 * (-DTFR_IN_BUFFER_N_BYTES=64) so that small inputs cross every refill path. */
#ifndef TFR_IN_BUFFER_N_BYTES
#define TFR_IN_BUFFER_N_BYTES ((size_t)1 << 18)
#endif
#define TFR_OUT_BUFFER_N_BYTES ((size_t)1 << 18)

const char *io_compression_name(int c) {
    switch (c) {
    case IO_COMPRESSION_AUTO: return "auto";
    case IO_COMPRESSION_NONE: return "none";
    case IO_COMPRESSION_GZIP: return "gzip";
    case IO_COMPRESSION_ZLIB: return "zlib";
    default: return "?";
    }
}

int io_compression_parse(const char *s) {
    if (!s) return -1;
    if (!strcasecmp(s, "auto")) return IO_COMPRESSION_AUTO;
    if (!strcasecmp(s, "none") || !s[0]) return IO_COMPRESSION_NONE;
    if (!strcasecmp(s, "gzip")) return IO_COMPRESSION_GZIP;
    if (!strcasecmp(s, "zlib")) return IO_COMPRESSION_ZLIB;
    return -1;
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void tfr_encode_header(uint8_t header[TFR_HEADER_N_BYTES], uint64_t n_bytes) {
    put_le64(header, n_bytes);
    put_le32(header + 8, crc32c_mask(crc32c(header, 8)));
}

void tfr_encode_footer(uint8_t footer[TFR_FOOTER_N_BYTES], const void *data, size_t n_bytes) {
    put_le32(footer, crc32c_mask(crc32c(data, n_bytes)));
}

/* ================================ reader ================================ */

struct TfrReader {
    char *name;
    FILE *f;                   /* NULL for a memory reader */
    int compression;           /* IO_COMPRESSION_NONE / GZIP / ZLIB */
    size_t max_record_n_bytes;
    uint8_t *in;               /* (in_cap) input bytes; for a memory reader, the caller's buffer */
    size_t in_cap, in_pos, in_len;
    int in_eof;                /* no more input beyond in[in_pos, in_len) */
    int own_in;
    z_stream zs;
    int zs_live;               /* inflateInit2 done */
    int z_ended;               /* Z_STREAM_END seen and no further member started */
    uint8_t *rec;              /* (rec_cap) the current record's data */
    size_t rec_cap;
    uint64_t pos;              /* bytes consumed from the uncompressed record stream */
    long index;                /* index of the record last returned or reported */
    uint64_t offset;           /* its header offset */
    long next_index;
    int dead;                  /* TFR_BAD_STREAM seen */
    char dead_msg[512];
    char src_msg[256];         /* why a source read failed */
    uint64_t file_n_bytes;     /* size of the file (of the buffer for a memory reader); a stream's once read */
    int size_unknown;          /* a stream (not a regular file) whose end was not read yet: file_n_bytes unknown */
    uint64_t file_n_read;      /* bytes read from the file so far (into in, or a large record's straight into rec) */
    uint64_t record_file_offset; /* file bytes consumed before the current record's header */
};

/* File bytes the decoder has consumed: read minus still buffered. */
static uint64_t file_consumed(const TfrReader *r) {
    uint64_t buffered = r->in_len - r->in_pos; /* inflate's input is in[in_pos..] too */
    return r->file_n_read >= buffered ? r->file_n_read - buffered : 0;
}

static void set_err(char *err, size_t err_n, const char *fmt, ...) {
    if (!err || !err_n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_n, fmt, ap);
    va_end(ap);
    escape_in_place(err, err_n); /* the name (and nothing else) may hold any byte */
}

/* Refill r->in from the file.  Returns 0, or -1 on a read error. */
static int in_refill(TfrReader *r) {
    if (r->in_eof) return 0;
    if (!r->f) {
        r->in_eof = 1;
        return 0;
    }
    if (r->in_pos < r->in_len) memmove(r->in, r->in + r->in_pos, r->in_len - r->in_pos);
    r->in_len -= r->in_pos;
    r->in_pos = 0;
    size_t got = fread(r->in + r->in_len, 1, r->in_cap - r->in_len, r->f);
    r->in_len += got;
    r->file_n_read += got;
    if (got == 0) {
        if (ferror(r->f)) {
            snprintf(r->src_msg, sizeof r->src_msg, "read error: %s", strerror(errno ? errno : EIO));
            return -1;
        }
        r->in_eof = 1;
    }
    return 0;
}

/* Reads up to n bytes of the uncompressed stream into dst.  Returns the
 * count (< n only at the end of the stream), or -1 with r->src_msg set. */
static long src_read(TfrReader *r, uint8_t *dst, size_t n) {
    size_t done = 0;
    if (r->compression == IO_COMPRESSION_NONE) {
        size_t avail = r->in_len - r->in_pos;
        size_t k = avail < n ? avail : n;
        memcpy(dst, r->in + r->in_pos, k);
        r->in_pos += k;
        done = k;
        if (done < n && r->f && !r->in_eof) {
            if (n - done >= r->in_cap / 2) {
                size_t got = fread(dst + done, 1, n - done, r->f);
                done += got;
                r->file_n_read += got; /* read past in[]: still read from the file (lost bytes, a stream's size) */
                if (done < n) {
                    if (ferror(r->f)) {
                        snprintf(r->src_msg, sizeof r->src_msg, "read error: %s", strerror(errno ? errno : EIO));
                        return -1;
                    }
                    r->in_eof = 1;
                }
            } else {
                while (done < n) {
                    if (r->in_pos == r->in_len) {
                        if (r->in_eof) break;
                        if (in_refill(r) != 0) return -1;
                        continue;
                    }
                    size_t a = r->in_len - r->in_pos, m = n - done;
                    k = a < m ? a : m;
                    memcpy(dst + done, r->in + r->in_pos, k);
                    r->in_pos += k;
                    done += k;
                }
            }
        }
        r->pos += done;
        return (long)done;
    }
    while (done < n) {
        if (r->z_ended) {
            /* After a gzip member ends, another may follow (concatenated gzip). */
            if (r->in_pos == r->in_len && !r->in_eof && in_refill(r) != 0) return -1;
            if (r->in_pos == r->in_len) break;
            if (r->compression == IO_COMPRESSION_ZLIB) {
                snprintf(r->src_msg, sizeof r->src_msg, "zlib data error: trailing bytes after the end of the compressed stream");
                return -1;
            }
            inflateReset(&r->zs);
            r->z_ended = 0;
        }
        r->zs.next_in = r->in + r->in_pos;
        r->zs.avail_in = (uInt)(r->in_len - r->in_pos);
        size_t want = n - done;
        if (want > (size_t)1 << 30) want = (size_t)1 << 30;
        r->zs.next_out = dst + done;
        r->zs.avail_out = (uInt)want;
        int rc = inflate(&r->zs, Z_NO_FLUSH);
        size_t produced = want - r->zs.avail_out;
        r->in_pos = r->in_len - r->zs.avail_in;
        done += produced;
        if (rc == Z_STREAM_END) {
            r->z_ended = 1;
        } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
            if (produced == 0 && r->in_pos == r->in_len) {
                /* inflate needs more input */
                if (r->in_eof) {
                    snprintf(r->src_msg, sizeof r->src_msg,
                             "%s data error: the compressed stream is truncated (no end marker)",
                             io_compression_name(r->compression));
                    return -1;
                }
                if (in_refill(r) != 0) return -1;
            }
        } else {
            snprintf(r->src_msg, sizeof r->src_msg, "%s data error: %s", io_compression_name(r->compression),
                     r->zs.msg ? r->zs.msg : "corrupt compressed stream");
            return -1;
        }
    }
    r->pos += done;
    return (long)done;
}

/* Is the first bytes (n) a valid uncompressed record header? */
static int looks_like_record_header(const uint8_t *p, size_t n) {
    return n >= TFR_HEADER_N_BYTES && crc32c_mask(crc32c(p, 8)) == get_le32(p + 8);
}

static int detect_compression(const uint8_t *p, size_t n) {
    if (n == 0 || looks_like_record_header(p, n)) return IO_COMPRESSION_NONE;
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return IO_COMPRESSION_GZIP;
    if (n >= 2 && (p[0] & 0x0f) == 8 && (p[0] >> 4) <= 7 && ((unsigned)p[0] * 256u + p[1]) % 31u == 0)
        return IO_COMPRESSION_ZLIB;
    return IO_COMPRESSION_NONE;
}

static TfrReader *reader_finish_open(TfrReader *r, int compression, char *err, size_t err_n) {
    if (compression == IO_COMPRESSION_AUTO) {
        while (r->in_len - r->in_pos < TFR_HEADER_N_BYTES && !r->in_eof) {
            if (in_refill(r) != 0) {
                set_err(err, err_n, "%s: %s", r->name, r->src_msg);
                tfr_reader_close(r);
                return NULL;
            }
        }
        compression = detect_compression(r->in + r->in_pos, r->in_len - r->in_pos);
    }
    if (compression < IO_COMPRESSION_NONE || compression > IO_COMPRESSION_ZLIB) {
        set_err(err, err_n, "%s: unknown compression %d", r->name, compression);
        tfr_reader_close(r);
        return NULL;
    }
    r->compression = compression;
    if (compression != IO_COMPRESSION_NONE) {
        memset(&r->zs, 0, sizeof r->zs);
        int window_bits = compression == IO_COMPRESSION_GZIP ? 15 + 16 : 15;
        if (inflateInit2(&r->zs, window_bits) != Z_OK) {
            set_err(err, err_n, "%s: cannot initialise zlib", r->name);
            tfr_reader_close(r);
            return NULL;
        }
        r->zs_live = 1;
    }
    r->index = -1;
    return r;
}

static TfrReader *reader_new(const char *name, size_t max_record_n_bytes, char *err, size_t err_n) {
    TfrReader *r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name ? name : "(memory)"))) {
        free(r);
        set_err(err, err_n, "%s: out of memory", name ? name : "(memory)");
        return NULL;
    }
    r->max_record_n_bytes = max_record_n_bytes ? max_record_n_bytes : TFR_DEFAULT_MAX_RECORD_N_BYTES;
    return r;
}

TfrReader *tfr_reader_open(const char *path, int compression, size_t max_record_n_bytes, char *err, size_t err_n) {
    TfrReader *r = reader_new(path, max_record_n_bytes, err, err_n);
    if (!r) return NULL;
    r->f = fopen(path, "rb");
    if (!r->f) {
        set_err(err, err_n, "%s: cannot open: %s", path, strerror(errno));
        tfr_reader_close(r);
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(r->f), &sb) == 0 && S_ISREG(sb.st_mode)) r->file_n_bytes = (uint64_t)sb.st_size;
    else r->size_unknown = 1;
    r->in_cap = TFR_IN_BUFFER_N_BYTES;
    r->in = malloc(r->in_cap);
    r->own_in = 1;
    if (!r->in) {
        set_err(err, err_n, "%s: out of memory", path);
        tfr_reader_close(r);
        return NULL;
    }
    return reader_finish_open(r, compression, err, err_n);
}

TfrReader *tfr_reader_open_memory(const void *data, size_t n_bytes, const char *name, int compression,
                                  size_t max_record_n_bytes, char *err, size_t err_n) {
    TfrReader *r = reader_new(name, max_record_n_bytes, err, err_n);
    if (!r) return NULL;
    r->in = (uint8_t *)(uintptr_t)data;
    r->in_cap = r->in_len = n_bytes;
    r->in_eof = 1;
    r->file_n_bytes = r->file_n_read = n_bytes;
    return reader_finish_open(r, compression, err, err_n);
}

/* A stream's size, once its end was read: what was read.  A stream that stops before its end (a broken
 * frame, a reader that stops) keeps an unknown size: nothing reads on to learn it, since a stream (a pipe,
 * /dev/zero) may never end. */
static void stream_size_known(TfrReader *r) {
    if (!r->size_unknown || !r->in_eof) return;
    r->size_unknown = 0;
    r->file_n_bytes = r->file_n_read;
}

/* Report a problem with the current record; BAD_STREAM makes the reader dead. */
static int reader_fail(TfrReader *r, int status, char *err, size_t err_n, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (status == TFR_BAD_STREAM) {
        r->dead = 1;
        stream_size_known(r);
        snprintf(r->dead_msg, sizeof r->dead_msg, "%s: record %ld at offset %llu: %s", r->name, r->index,
                 (unsigned long long)r->offset, what);
        set_err(err, err_n, "%s", r->dead_msg);
    } else {
        set_err(err, err_n, "%s: record %ld at offset %llu: %s", r->name, r->index, (unsigned long long)r->offset, what);
    }
    return status;
}

/* Discards n bytes of the stream (a record over the length limit). */
static long src_discard(TfrReader *r, uint64_t n) {
    uint8_t tmp[16384];
    uint64_t done = 0;
    while (done < n) {
        size_t k = n - done < sizeof tmp ? (size_t)(n - done) : sizeof tmp;
        long got = src_read(r, tmp, k);
        if (got < 0) return -1;
        done += (uint64_t)got;
        if ((size_t)got < k) break;
    }
    return (long)(done == n);
}

int tfr_reader_next(TfrReader *r, const uint8_t **data, size_t *n_bytes, char *err, size_t err_n) {
    if (r->dead) {
        set_err(err, err_n, "%s", r->dead_msg);
        return TFR_BAD_STREAM;
    }
    uint8_t hdr[TFR_HEADER_N_BYTES];
    r->index = r->next_index;
    r->offset = r->pos;
    r->record_file_offset = file_consumed(r);
    long got = src_read(r, hdr, sizeof hdr);
    if (got < 0) return reader_fail(r, TFR_BAD_STREAM, err, err_n, "%s", r->src_msg);
    if (got == 0) {
        r->index = r->next_index - 1;
        stream_size_known(r);
        return TFR_END;
    }
    r->next_index++;
    if (got < 8)
        return reader_fail(r, TFR_BAD_STREAM, err, err_n, "truncated: end of file inside the length (%ld of 8 bytes)", got);
    if (got < TFR_HEADER_N_BYTES)
        return reader_fail(r, TFR_BAD_STREAM, err, err_n, "truncated: end of file inside the length CRC (%ld of 4 bytes)", got - 8);
    uint32_t stored = crc32c_unmask(get_le32(hdr + 8)), computed = crc32c(hdr, 8);
    if (stored != computed)
        return reader_fail(r, TFR_BAD_STREAM, err, err_n, "length CRC mismatch (stored 0x%08x, computed 0x%08x)", stored, computed);
    uint64_t len = get_le64(hdr);
    if (len > r->max_record_n_bytes) {
        /* A length within 4 of 2^64 would wrap the sum to a few bytes and read on mid-record: it claims more than
         * any file holds, so the rest of the file is discarded, as for any length past the file's end. */
        const uint64_t skip = len > UINT64_MAX - TFR_FOOTER_N_BYTES ? UINT64_MAX : len + TFR_FOOTER_N_BYTES;
        long ok = src_discard(r, skip);
        int status = ok == 1 ? TFR_BAD_RECORD : TFR_BAD_STREAM;
        return reader_fail(r, status, err, err_n, "record length %llu bytes is over the limit of %zu bytes",
                           (unsigned long long)len, r->max_record_n_bytes);
    }
    if (len > r->rec_cap || !r->rec) {
        size_t cap = r->rec_cap ? r->rec_cap : 4096;
        while (cap < len) cap *= 2;
        if (cap > r->max_record_n_bytes && len <= r->max_record_n_bytes) cap = r->max_record_n_bytes;
        if (cap < len) cap = (size_t)len;
        uint8_t *p = realloc(r->rec, cap ? cap : 1);
        if (!p) return reader_fail(r, TFR_BAD_STREAM, err, err_n, "out of memory for a %llu-byte record", (unsigned long long)len);
        r->rec = p;
        r->rec_cap = cap;
    }
    got = src_read(r, r->rec, (size_t)len);
    if (got < 0) return reader_fail(r, TFR_BAD_STREAM, err, err_n, "%s", r->src_msg);
    if ((uint64_t)got < len)
        return reader_fail(r, TFR_BAD_STREAM, err, err_n, "truncated: end of file inside the data (%ld of %llu bytes)", got,
                           (unsigned long long)len);
    uint8_t foot[TFR_FOOTER_N_BYTES];
    got = src_read(r, foot, sizeof foot);
    if (got < 0) return reader_fail(r, TFR_BAD_STREAM, err, err_n, "%s", r->src_msg);
    if (got < (long)sizeof foot)
        return reader_fail(r, TFR_BAD_STREAM, err, err_n, "truncated: end of file inside the data CRC (%ld of 4 bytes)", got);
    stored = crc32c_unmask(get_le32(foot));
    computed = crc32c(r->rec, (size_t)len);
    if (stored != computed)
        return reader_fail(r, TFR_BAD_RECORD, err, err_n, "data CRC mismatch (stored 0x%08x, computed 0x%08x)", stored, computed);
    *data = r->rec;
    *n_bytes = (size_t)len;
    return TFR_RECORD;
}

long tfr_reader_record_index(const TfrReader *r) { return r->index; }
uint64_t tfr_reader_record_offset(const TfrReader *r) { return r->offset; }
int tfr_reader_compression(const TfrReader *r) { return r->compression; }
const char *tfr_reader_name(const TfrReader *r) { return r->name; }
uint64_t tfr_reader_file_n_bytes(const TfrReader *r) { return r->file_n_bytes; }

int tfr_reader_size_unknown(const TfrReader *r) { return r->size_unknown; }

uint64_t tfr_reader_file_n_read(const TfrReader *r) { return r->file_n_read; }

uint64_t tfr_reader_lost_n_bytes(const TfrReader *r) {
    uint64_t end = r->dead ? (r->size_unknown ? r->file_n_read : r->file_n_bytes) : file_consumed(r);
    return end > r->record_file_offset ? end - r->record_file_offset : 0;
}

void tfr_reader_close(TfrReader *r) {
    if (!r) return;
    if (r->zs_live) inflateEnd(&r->zs);
    if (r->f) fclose(r->f);
    if (r->own_in) free(r->in);
    free(r->rec);
    free(r->name);
    free(r);
}

size_t tfr_reader_max_n_bytes(int compression, size_t record_n_bytes, size_t max_record_n_bytes) {
    if (!max_record_n_bytes) max_record_n_bytes = TFR_DEFAULT_MAX_RECORD_N_BYTES;
    if (!record_n_bytes || record_n_bytes > max_record_n_bytes) record_n_bytes = max_record_n_bytes;
    size_t rec_cap = 4096; /* tfr_reader_next's growth of r->rec */
    while (rec_cap < record_n_bytes) rec_cap *= 2;
    if (rec_cap > max_record_n_bytes) rec_cap = max_record_n_bytes;
    if (rec_cap < record_n_bytes) rec_cap = record_n_bytes;
    const size_t zlib_n_bytes = compression == IO_COMPRESSION_NONE ? 0 : (size_t)48 << 10; /* inflate state ~7 KiB + window */
    const size_t fixed_n_bytes = sizeof(TfrReader) + 4096 + ((size_t)16 << 10); /* FILE buffer, name, allocator slack */
    return TFR_IN_BUFFER_N_BYTES + rec_cap + zlib_n_bytes + fixed_n_bytes;
}

/* ================================ writer ================================ */

struct TfrWriter {
    char *path;
    FILE *f;
    int compression;
    z_stream zs;
    int zs_live;
    uint8_t *out; /* (TFR_OUT_BUFFER_N_BYTES) deflate output */
    long n_records;
    int failed;
    uint64_t put_n_bytes;     /* uncompressed: the bytes handed to the file */
    uint64_t flushed_n_bytes; /* uncompressed: put_n_bytes at the last tfr_writer_flush that succeeded */
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* tfr_writer_open, and with exclusive (*exists where the name is taken) tfr_writer_open_new. */
static TfrWriter *writer_open(const char *path, int compression, int exclusive, int *exists, char *err, size_t err_n) {
    if (exists) *exists = 0;
    if (compression == IO_COMPRESSION_AUTO) {
        if (ends_with(path, ".gz")) compression = IO_COMPRESSION_GZIP;
        else if (ends_with(path, ".zz") || ends_with(path, ".zlib")) compression = IO_COMPRESSION_ZLIB;
        else compression = IO_COMPRESSION_NONE;
    }
    if (compression < IO_COMPRESSION_NONE || compression > IO_COMPRESSION_ZLIB) {
        set_err(err, err_n, "%s: unknown compression %d", path, compression);
        return NULL;
    }
    TfrWriter *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        set_err(err, err_n, "%s: out of memory", path);
        return NULL;
    }
    w->compression = compression;
    if (exclusive) {
        const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 && !(w->f = fdopen(fd, "wb"))) {
            const int e = errno;
            close(fd);
            unlink(path); /* ours, made just now: not left to read as another writer's */
            errno = e;
        }
        if (fd < 0 && errno == EEXIST) {
            *exists = 1;
            free(w->path);
            free(w);
            return NULL;
        }
    } else {
        w->f = fopen(path, "wb");
    }
    if (!w->f) {
        set_err(err, err_n, "%s: cannot create: %s", path, strerror(errno));
        free(w->path);
        free(w);
        return NULL;
    }
    if (compression != IO_COMPRESSION_NONE) {
        w->out = malloc(TFR_OUT_BUFFER_N_BYTES);
        int window_bits = compression == IO_COMPRESSION_GZIP ? 15 + 16 : 15;
        if (!w->out || deflateInit2(&w->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            set_err(err, err_n, "%s: cannot initialise zlib", path);
            fclose(w->f);
            unlink(path); /* made here (truncated, or created): nothing of it to keep */
            free(w->out);
            free(w->path);
            free(w);
            return NULL;
        }
        w->zs_live = 1;
    }
    return w;
}

TfrWriter *tfr_writer_open(const char *path, int compression, char *err, size_t err_n) {
    return writer_open(path, compression, 0, NULL, err, err_n);
}

TfrWriter *tfr_writer_open_new(const char *path, int compression, int *exists, char *err, size_t err_n) {
    return writer_open(path, compression, 1, exists, err, err_n);
}

static int writer_fail(TfrWriter *w, char *err, size_t err_n, const char *what) {
    w->failed = 1;
    set_err(err, err_n, "%s: write error: %s", w->path, what);
    return -1;
}

/* Feeds bytes to the file, through deflate when compressing. */
static int writer_put(TfrWriter *w, const void *data, size_t n, int flush, char *err, size_t err_n) {
    if (w->failed) return writer_fail(w, err, err_n, "an earlier write failed");
    if (!w->zs_live) {
        if (n && fwrite(data, 1, n, w->f) != n) return writer_fail(w, err, err_n, strerror(errno ? errno : EIO));
        w->put_n_bytes += n;
        return 0;
    }
    const uint8_t *p = (const uint8_t *)data;
    size_t left = n;
    for (;;) {
        size_t chunk = left > ((size_t)1 << 30) ? ((size_t)1 << 30) : left;
        w->zs.next_in = (Bytef *)(uintptr_t)p;
        w->zs.avail_in = (uInt)chunk;
        int last = chunk == left;
        int mode = last ? flush : Z_NO_FLUSH;
        do {
            w->zs.next_out = w->out;
            w->zs.avail_out = (uInt)TFR_OUT_BUFFER_N_BYTES;
            int rc = deflate(&w->zs, mode);
            if (rc == Z_STREAM_ERROR) return writer_fail(w, err, err_n, "deflate failed");
            size_t have = TFR_OUT_BUFFER_N_BYTES - w->zs.avail_out;
            if (have && fwrite(w->out, 1, have, w->f) != have) return writer_fail(w, err, err_n, strerror(errno ? errno : EIO));
        } while (w->zs.avail_out == 0);
        if (last) break;
        p += chunk; /* never on the NULL of a flush (NULL + 0 is undefined) */
        left -= chunk;
    }
    return 0;
}

int tfr_writer_write(TfrWriter *w, const void *data, size_t n_bytes, char *err, size_t err_n) {
    uint8_t hdr[TFR_HEADER_N_BYTES], foot[TFR_FOOTER_N_BYTES];
    tfr_encode_header(hdr, n_bytes);
    tfr_encode_footer(foot, data, n_bytes);
    if (writer_put(w, hdr, sizeof hdr, Z_NO_FLUSH, err, err_n) != 0) return -1;
    if (writer_put(w, data, n_bytes, Z_NO_FLUSH, err, err_n) != 0) return -1;
    if (writer_put(w, foot, sizeof foot, Z_NO_FLUSH, err, err_n) != 0) return -1;
    w->n_records++;
    return 0;
}

int tfr_writer_flush(TfrWriter *w, char *err, size_t err_n) {
    if (w->zs_live && writer_put(w, NULL, 0, Z_SYNC_FLUSH, err, err_n) != 0) return -1;
    if (fflush(w->f) != 0) return writer_fail(w, err, err_n, strerror(errno));
    w->flushed_n_bytes = w->put_n_bytes;
    return 0;
}

long tfr_writer_n_records(const TfrWriter *w) { return w->n_records; }

int tfr_writer_close(TfrWriter *w, char *err, size_t err_n) {
    if (!w) return 0;
    int rc = w->failed ? writer_fail(w, err, err_n, "an earlier write failed") : 0;
    const int compressed = w->zs_live;
    if (w->zs_live) {
        if (rc == 0 && writer_put(w, NULL, 0, Z_FINISH, err, err_n) != 0) rc = -1;
        deflateEnd(&w->zs);
    }
    /* A partial record (a full disk, a file size limit) would end the file: the unwritten rest dropped, the file
     * cut back to its last whole record through its own descriptor, then closed. */
    if (rc != 0 && !compressed) {
        __fpurge(w->f);
        if (ftruncate(fileno(w->f), (off_t)w->flushed_n_bytes) != 0) { /* the close's error is the one said */ }
    }
    if (fclose(w->f) != 0 && rc == 0) rc = writer_fail(w, err, err_n, strerror(errno));
    free(w->out);
    free(w->path);
    free(w);
    return rc;
}
