/* gzfile.h — a file read as one byte stream: a gzip file (RFC 1952; members
 * one after another, as `cat a.gz b.gz` makes) inflated, any other file read
 * as it is.
 *
 * Where it sits: io/, under the converters of raw datasets (io/convert.c:
 * the IDX files of MNIST and Fashion-MNIST, CIFAR-10's binary batches), which
 * read train-images-idx3-ubyte.gz and an uncompressed copy alike.  It
 * replaces zlib's gzopen/gzread there for two things gzread does not do:
 *   - bytes after the last gzip member that are not another member (a file
 *     appended to, a download with an HTML error page behind it) are an
 *     error, named with their count and offset; gzread drops them unseen.
 *     Zero bytes after the last member (tape padding) are read as its end,
 *     as gzip(1) and Python's gzip module read them;
 *   - a FIFO, a directory or a device is refused at the open (base/file.h),
 *     where gzopen of a FIFO waits for a writer, forever if none comes.
 * What it does not do: no writing, no seeking, no threads; TFRecord's own
 * compressed streams are io/tfrecord.c's.
 */
#ifndef TOWER_IO_GZFILE_H
#define TOWER_IO_GZFILE_H

#include <stddef.h>

typedef struct GzFile GzFile;

/* Opens path (a regular file, or a link to one).  Returns the reader (the
 * caller closes it with gzfile_close); NULL with one line in err: "PATH:
 * cannot open: WHY", "PATH: not a regular file (a pipe or FIFO)", or "...:
 * out of memory". */
GzFile *gzfile_open(const char *path, char *err, size_t err_n_bytes);

/* Reads up to n bytes of the stream into dst (n) and returns how many: n,
 * fewer only at the stream's end (0 there), or -1 on an error, which
 * gzfile_error then says. */
long gzfile_read(GzFile *g, void *dst, size_t n);

/* What the last failed gzfile_read met, without the path: "read error:
 * WHY" (the system's), "gzip data error: WHY" (zlib's message: "incorrect
 * data check", ...), "gzip data error: the compressed stream is truncated
 * (no end marker)", or "gzip data error: 37 bytes after the last gzip
 * member (at offset 1021 of the file) are not another member".  Owned by g.
 * Decompression reads ahead, so a bad check value at a member's end is met
 * by the read in flight. */
const char *gzfile_error(const GzFile *g);

/* 1 when the file is gzip-compressed (it starts with gzip's magic). */
int gzfile_is_gzip(const GzFile *g);

/* Closes g and frees it (NULL: nothing). */
void gzfile_close(GzFile *g);

#endif
