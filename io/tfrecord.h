/* tfrecord.h — TFRecord files: streaming reader and writer, TensorFlow's format.
 *
 * Where it sits: io/, the first step of io -> shards: the input pipeline,
 * `tower inspect` and the converters read and write through it; later the
 * TensorBoard event writer reuses TfrWriter and the fuzzers TfrReader.
 * Framing (little-endian), byte for byte TensorFlow's record_writer.cc:
 *     uint64 length | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
 * Compression (TensorFlow's compression_type "", "GZIP", "ZLIB") wraps the
 * whole stream: GZIP is a gzip member (deflate, window 15, gzip header),
 * ZLIB a zlib stream (deflate, window 15, zlib header).
 * Records are streamed: memory held is one record plus fixed buffers, never
 * a whole file; a length over max_record_n_bytes is never allocated.
 * What it does not do: no random access, no index files, no threads (one
 * reader or writer per thread; different ones may run in parallel).
 *
 * Errors are one line, "<file>: record <index> at offset <byte offset>: <what>",
 * with every byte outside printable ASCII (from the file name) as \xHH (base/escape.h),
 * where the offset is that of the record's header in the uncompressed record
 * stream (the file offset for uncompressed files).
 */
#ifndef TOWER_IO_TFRECORD_H
#define TOWER_IO_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    IO_COMPRESSION_AUTO = 0, /* reader: detect from the first bytes; writer: from the extension */
    IO_COMPRESSION_NONE = 1,
    IO_COMPRESSION_GZIP = 2,
    IO_COMPRESSION_ZLIB = 3,
} IoCompression;

#define TFR_HEADER_N_BYTES 12
#define TFR_FOOTER_N_BYTES 4
#define TFR_DEFAULT_MAX_RECORD_N_BYTES ((size_t)64 << 20)
/* --skip_corrupt's limit: stop once bad records made more than this fraction
 * of the input's bytes unreadable (io/inspect.h, io/pipeline.h). */
#define IO_DEFAULT_MAX_CORRUPT_FRACTION 0.01

/* "auto", "none", "gzip", "zlib" (or "?" for anything else). */
const char *io_compression_name(int compression);

/* Parses "auto", "none" (also "" as TensorFlow spells it), "gzip", "zlib",
 * case-insensitively.  Returns the IoCompression, or -1 if unknown. */
int io_compression_parse(const char *name);

/* ---- reading ---- */

typedef struct TfrReader TfrReader;

typedef enum {
    TFR_RECORD = 1,      /* a record was returned */
    TFR_END = 0,         /* clean end of the file */
    TFR_BAD_RECORD = -1, /* this record is bad (data CRC mismatch, over the length limit); the
                            reader is positioned at the next record, so reading may go on */
    TFR_BAD_STREAM = -2, /* the file cannot be read further (truncated, length CRC mismatch,
                            corrupt compressed stream, I/O error); every later call repeats it */
} TfrStatus;

/* Opens path for reading.  compression IO_COMPRESSION_AUTO detects it from
 * the first bytes: a valid uncompressed record header wins, else the gzip
 * magic 1f 8b means GZIP, else a zlib header means ZLIB, else uncompressed
 * (whose first read then reports the bad header).  max_record_n_bytes 0
 * means TFR_DEFAULT_MAX_RECORD_N_BYTES.  Returns NULL with a one-line
 * message in err when the file cannot be opened or memory is short.
 * The reader owns everything it allocates; free with tfr_reader_close. */
TfrReader *tfr_reader_open(const char *path, int compression, size_t max_record_n_bytes,
                           char *err, size_t err_n_bytes);

/* Same over a caller-owned buffer (data, n_bytes), which must outlive the
 * reader; name is used in messages (copied).  For tests and fuzzing. */
TfrReader *tfr_reader_open_memory(const void *data, size_t n_bytes, const char *name, int compression,
                                  size_t max_record_n_bytes, char *err, size_t err_n_bytes);

/* Reads the next record.  On TFR_RECORD, *data (n_bytes) points into a
 * buffer owned by the reader, valid until the next call or close.  On
 * TFR_BAD_RECORD / TFR_BAD_STREAM, err holds one line in the format above.
 * Both CRCs are always verified. */
int tfr_reader_next(TfrReader *r, const uint8_t **data, size_t *n_bytes, char *err, size_t err_n_bytes);

/* Index (0-based, bad records included) and header offset of the record the
 * last tfr_reader_next call returned or reported. */
long tfr_reader_record_index(const TfrReader *r);
uint64_t tfr_reader_record_offset(const TfrReader *r);

/* The compression in use (never AUTO after open) and the name given at open. */
int tfr_reader_compression(const TfrReader *r);
const char *tfr_reader_name(const TfrReader *r);

/* The file's size in bytes at open (the buffer's for a memory reader); a
 * stream's (a pipe, a device: not a regular file) 0 until its end was read,
 * then what was read. */
uint64_t tfr_reader_file_n_bytes(const TfrReader *r);

/* 1 for a stream whose end was not read (yet, or ever: a broken frame stops
 * the reading), so its size is unknown; then tfr_reader_file_n_read says
 * how much was read, and tfr_reader_lost_n_bytes after TFR_BAD_STREAM counts
 * the bytes read past the bad record only. */
int tfr_reader_size_unknown(const TfrReader *r);
uint64_t tfr_reader_file_n_read(const TfrReader *r);

/* After TFR_BAD_RECORD or TFR_BAD_STREAM: the bytes of the file that the
 * bad record made unreadable, from its header on: the whole record for
 * TFR_BAD_RECORD, the rest of the file for TFR_BAD_STREAM.  In file bytes
 * (compressed bytes for GZIP/ZLIB, where the count is the input the
 * decoder had consumed, so a close approximation). */
uint64_t tfr_reader_lost_n_bytes(const TfrReader *r);

/* Closes the file and frees the reader.  NULL is fine. */
void tfr_reader_close(TfrReader *r);

/* Host memory one open file reader holds at most, in bytes, while the
 * records it returns are at most record_n_bytes long (0: up to
 * max_record_n_bytes, itself 0 for TFR_DEFAULT_MAX_RECORD_N_BYTES): the
 * input buffer, the record buffer (grown by doubling from 4 KiB, never past
 * the limit), zlib's inflate state and 32 KiB window unless compression is
 * IO_COMPRESSION_NONE, stdio's FILE buffer and the reader itself.  For
 * memory bounds (io/pipeline.h: pipeline_max_n_bytes); never fails. */
size_t tfr_reader_max_n_bytes(int compression, size_t record_n_bytes, size_t max_record_n_bytes);

/* ---- writing ---- */

typedef struct TfrWriter TfrWriter;

/* Creates (truncates) path.  compression IO_COMPRESSION_AUTO picks GZIP for
 * names ending ".gz", ZLIB for ".zz" or ".zlib", else NONE.  Returns NULL
 * with a message in err if the file cannot be created. */
TfrWriter *tfr_writer_open(const char *path, int compression, char *err, size_t err_n_bytes);

/* As tfr_writer_open, but only where no file of that name exists, checked
 * and created in one step (O_EXCL: of two processes asking for one name,
 * one gets it): when the name is taken, NULL with *exists = 1 and nothing
 * in err; any other failure NULL with *exists = 0 and a message in err. */
TfrWriter *tfr_writer_open_new(const char *path, int compression, int *exists, char *err, size_t err_n_bytes);

/* Appends one record (data, n_bytes: caller-owned, not retained).  Returns 0,
 * or -1 with "<file>: write error: ..." in err (the writer is then unusable;
 * close it). */
int tfr_writer_write(TfrWriter *w, const void *data, size_t n_bytes, char *err, size_t err_n_bytes);

/* Pushes everything written so far to the file (a sync flush of the
 * compressed stream), so a reader sees complete records.  0 or -1. */
int tfr_writer_flush(TfrWriter *w, char *err, size_t err_n_bytes);

/* Records written so far. */
long tfr_writer_n_records(const TfrWriter *w);

/* Finishes the compressed stream, closes the file and frees the writer.
 * Returns 0, or -1 with a message if any write or the close failed (the file
 * is then incomplete: an uncompressed one is cut back to the end of its last
 * record tfr_writer_flush pushed, so that readers meet no partial record).
 * NULL is fine (returns 0). */
int tfr_writer_close(TfrWriter *w, char *err, size_t err_n_bytes);

/* The framing, for callers that assemble records themselves:
 * header = length (8 bytes LE) + masked crc32c of those 8 bytes;
 * footer = masked crc32c of data (n_bytes). */
void tfr_encode_header(uint8_t header[TFR_HEADER_N_BYTES], uint64_t n_bytes);
void tfr_encode_footer(uint8_t footer[TFR_FOOTER_N_BYTES], const void *data, size_t n_bytes);

#endif
