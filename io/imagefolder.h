/* imagefolder.h — image-folder datasets: DIR/<class>/FILE.png|jpg|jpeg as a ConvertSource.
 *
 * Where it sits: io/, offline, before training: `tower convert --from
 * imagefolder DIR` drains this source through convert_run into sharded
 * TFRecords, as for the IDX and CIFAR-10 converters (convert.h).
 * Labels: the class folders' names sorted bytewise (Python's sorted() on
 * the names, as torchvision's ImageFolder and the seed scripts do), label k
 * being the k-th name, or the names of a given labels file (cfg.labels_file,
 * so that every split of a data set shares one class list);
 * imagefolder_write_labels writes them one per line.
 * Files: every regular file directly inside a class folder, in bytewise
 * name order, class after class; names starting with '.' are skipped
 * silently.  The format is taken from the content (PNG signature, JPEG SOI
 * marker), not the extension.  PNG goes through libpng (palettes and grey
 * expand to RGB, alpha is dropped, as PIL's convert("RGB"); 16-bit keeps
 * the high byte, as TensorFlow's decode_png to uint8, where PIL clips 16-bit
 * grey to 255), JPEG through libjpeg-turbo.  A file that is not a PNG or JPEG, or does not
 * decode, gets one warning line and is skipped; imagefolder_n_skipped counts
 * them, and the conversion goes on.  A JPEG whose scan data libjpeg finds
 * damaged (and fills in) is kept with one warning line, as TensorFlow and PIL
 * keep it; one whose file ends inside the image is skipped as truncated.
 * Every image comes out image_size x image_size x channels, uint8:
 *   IMAGEFOLDER_RESIZE       both sides scaled to image_size (aspect ratio not kept);
 *   IMAGEFOLDER_CENTER_CROP  the shorter side scaled to image_size (or to short_side:
 *                            imagefolder_short_side), then the central square kept
 *                            (torchvision's Resize(r) + CenterCrop(s));
 *   IMAGEFOLDER_RANDOM_CROP  (training, through the pipeline) a random crop of the
 *                            stored image scaled to image_size, mirrored half the
 *                            time: tf_cnn_benchmarks' training distortion
 *                            (imagefolder_random_crop).
 * Scaling is PIL's bilinear filter (a triangle filter widened by the scale
 * factor when shrinking, so downscaling averages instead of aliasing; plain
 * bilinear with half-pixel centres when enlarging), separable, in float,
 * rounded to nearest.  channels 1 is PIL's convert("L"):
 * L = (19595 R + 38470 G + 7471 B + 32768) >> 16.
 * What it does not do: no recursion into subfolders, no other formats, no
 * EXIF orientation, no colour management (gAMA/ICC are ignored), no
 * train/validation split.
 */
#ifndef TOWER_IO_IMAGEFOLDER_H
#define TOWER_IO_IMAGEFOLDER_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "io/convert.h"

typedef enum {
    IMAGEFOLDER_RESIZE = 0,
    IMAGEFOLDER_CENTER_CROP = 1,
    IMAGEFOLDER_RANDOM_CROP = 2,
} ImageFolderResizeMode;

/* A rectangle of the stored image, in its pixels (x, y its top-left corner;
 * w, h its size), and whether the result is mirrored left-right. */
typedef struct {
    int x, y, w, h;
    int flip;
} ImageFolderCrop;

/* IMAGEFOLDER_RANDOM_CROP, training only: tf_cnn_benchmarks' training crop
 * (preprocessing.py's train_image), drawn from the stream *rng_state
 * (io/rng.h) for an H x W image.  TensorFlow's
 * sample_distorted_bounding_box with the whole image as the only box,
 * min_object_covered 0.1, aspect_ratio_range (0.75, 1.33), area_range
 * (0.05, 1.0), max_attempts 100: each attempt draws an aspect ratio a
 * uniformly, then a height uniformly among the integers whose crop of width
 * round(a h) has an area within the range (TensorFlow's GenerateRandomCrop,
 * its rounding corrections included), then the offsets uniformly, y in
 * [0, H - h) and x in [0, W - w) (0 where the crop spans the side), and
 * keeps the crop when it covers at least 0.1 of the image; after 100
 * failed attempts the whole image.  Then random_flip_left_right: flip with
 * probability 1/2.  The same algorithm, not TensorFlow's random numbers:
 * the distribution is compared with TensorFlow's in
 * tests/interop/crop_interop.py. */
void imagefolder_random_crop(ImageFolderCrop *crop, int H, int W, uint64_t *rng_state);

#define IMAGEFOLDER_MAX_PIXELS ((size_t)1 << 28) /* larger images are skipped with a warning */

typedef struct {
    int image_size;                   /* output height and width, in [1, 4096] */
    int channels;                     /* 3 (RGB) or 1 (grey) */
    ImageFolderResizeMode mode;
    int short_side;                   /* IMAGEFOLDER_CENTER_CROP: the shorter side's size before the crop,
                                       * >= image_size (0: image_size) */
    /* Called with each warning line (no newline), e.g.
     * "DIR/cat/x.png: skipped: not a PNG or JPEG image"; NULL prints it to stderr. */
    void (*warn)(void *ctx, const char *line);
    void *warn_ctx;
    /* NULL: the classes are the class folders, sorted.  Else a labels file (one
     * class name a line, e.g. the train split's labels.txt): the classes are its
     * lines in its order, label k the k-th; a class folder not in it is an error,
     * and a class without a folder gets a warning (a split may lack a class). */
    const char *labels_file;
    /* How a refusal names where labels_file came from, before its path: NULL
     * "--labels" (e.g. "the checkpoint's class list" when eval took the
     * checkpoint directory's labels.txt). */
    const char *labels_origin;
    /* The source's next reads the files in a permutation of (shuffle_seed)
     * (1), not class after class as listed (0): tower convert's shards each a
     * mix of every class, as TensorFlow's build_image_data.py writes them (a
     * shuffle buffer smaller than the data cannot mix class-sorted records).
     * imagefolder_file and the pipeline keep the listing's order. */
    int shuffle;
    uint64_t shuffle_seed;
    /* 1: the source's next gives each image's file as stored (ConvertItem.encoded: its bytes, read whole, once it
     * decoded: a file that does not is skipped as always), not resized (image_size, channels, mode unused): tower
     * convert --encoded, TFRecords of encoded images as build_image_data.py writes them. */
    int encoded;
} ImageFolderConfig;

#define IMAGEFOLDER_MAX_LABELS_N_BYTES ((size_t)1 << 20)

/* Reads a labels file whole (at most IMAGEFOLDER_MAX_LABELS_N_BYTES) into
 * *text (n_bytes, NUL-terminated, malloc'ed: the caller frees it).  Returns
 * 1 read, 0 when path does not exist (ENOENT; *text NULL), -1 with one line
 * in err (cannot open, not a regular file: a directory, a FIFO, which is
 * refused without waiting for a writer; read error, too large, out of
 * memory).  Shared by
 * imagefolder_read_labels and the labels checks of io/files.c. */
int imagefolder_read_labels_text(const char *path, char **text, size_t *n_bytes, char *err, size_t err_n_bytes);

/* Reads a labels file: class names, one a line (the last newline optional;
 * no empty line, no repeated name, at most IMAGEFOLDER_MAX_LABELS_N_BYTES).
 * *names (n_names, each malloc'ed, and the array) belong to the caller.
 * 0, or -1 with one line in err. */
int imagefolder_read_labels(const char *path, char ***names, int *n_names, char *err, size_t err_n_bytes);

/* The class names of a labels file's text already read (text, n_bytes; a
 * NUL after them is not needed), by imagefolder_read_labels's rules (no
 * empty text or line, no NUL byte, no repeated name; the last newline
 * optional); path names the file in err.  *names (n_names, each malloc'ed,
 * and the array) belong to the caller; text stays the caller's.  0, or -1
 * with one line in err (*names NULL, *n_names 0). */
int imagefolder_parse_labels(const char *path, const char *text, size_t n_bytes, char ***names, int *n_names,
                             char *err, size_t err_n_bytes);

/* The shorter side's size before a centre crop to S that keeps the central
 * fraction of it (timm's floor(S / crop_pct); 224 and 0.875 give
 * torchvision's Resize(256) + CenterCrop(224), tf_cnn_benchmarks' and
 * slim's evaluation crop up to their rounding); 0 for a fraction of 1 (the
 * crop keeps the whole shorter side) or outside (0, 1]. */
int imagefolder_short_side(int S, double central_fraction);

/* 1 when short_side suits a resize of mode to S: 0, or with
 * IMAGEFOLDER_CENTER_CROP a side from S to 65535. */
int imagefolder_short_side_valid(ImageFolderResizeMode mode, int short_side, int S);

/* The mode named "resize", "center_crop" or "random_crop" (the flag
 * --resize_mode's values); -1 for any other name. */
int imagefolder_resize_mode_from_name(const char *name);

/* The data flags of one kind of --data given with the other, as train and
 * eval refuse them rather than ignore them: with an image folder
 * (image_folder 1) a --compression, --image_key or --label_key other than
 * its default (auto, image_raw, label); with TFRecords, --labels (non-empty)
 * and, unless their images are encoded (encoded 1: decoded and resized as
 * an image folder's), a --resize_mode other than resize.  Returns 0, or -1
 * with one line naming the flag in err. */
int imagefolder_check_data_flags(int image_folder, int encoded, const char *compression, const char *image_key,
                                 const char *label_key, const char *labels, const char *resize_mode, char *err,
                                 size_t err_n_bytes);

/* The floor of --max_image_pixels for an image folder made into H x W images: the resampling buffer holds two
 * of them, so a bound below 2 x H x W could decode nothing.  Returns 0, or -1 with one line naming the flag in
 * err (train and eval word it alike). */
int imagefolder_check_max_pixels(size_t max_image_pixels, int H, int W, char *err, size_t err_n_bytes);

/* image_size 32, channels 3, IMAGEFOLDER_RESIZE, warnings to stderr. */
void imagefolder_config_defaults(ImageFolderConfig *cfg);

/* Lists dir's class folders and their files (nothing is decoded yet).
 * n_examples of the source is the number of candidate files (skipped ones
 * still count).  NULL + one line in err when dir cannot be read, holds no
 * class folder, the configuration is bad, or memory is short.  The source
 * copies cfg; free it with its close. */
ConvertSource *convert_open_imagefolder(const char *dir, const ImageFolderConfig *cfg, char *err, size_t err_n_bytes);

/* For a source from convert_open_imagefolder: the class names in label
 * order (owned by the source) and their number. */
const char *const *imagefolder_classes(const ConvertSource *src, int *n_classes);

/* Files skipped so far (one warning each). */
long imagefolder_n_skipped(const ConvertSource *src);

/* Writes the class names, one per line in label order, to path (path.tmp,
 * then rename).  Returns 0, or -1 with one line in err. */
int imagefolder_write_labels(const ConvertSource *src, const char *path, char *err, size_t err_n_bytes);

/* "PNG" or "JPEG" where bytes (n_bytes) begin as that format's file does (the decoder's own test, and
 * the shape probe's for an encoded image inside a TFRecord), else NULL. */
const char *imagefolder_encoded_kind(const uint8_t *bytes, size_t n_bytes);

/* Decodes the PNG or JPEG file at path to 8-bit RGB: *pixels (H, W, 3) is
 * malloc'ed for the caller.  Returns 0, or -1 with one line in err
 * ("PATH: ...").  On success err is "", or one warning line for a JPEG
 * whose scan data libjpeg found damaged and filled in ("PATH: damaged JPEG
 * data (libjpeg: Corrupt JPEG data: premature end of data segment); ..."):
 * the image is kept, as TensorFlow and PIL keep it; a JPEG whose file ends
 * inside the image is refused. */
int imagefolder_decode(const char *path, uint8_t **pixels, int *H, int *W, char *err, size_t err_n_bytes);

/* As imagefolder_decode, with libjpeg's scaled decoding: S > 0 decodes a
 * JPEG at the smallest scale M/8 (M = 1..8, *scale_eighths = M) whose
 * output still covers the size (S, mode, short_side) resamples to before
 * its crop, on both sides: a 600 x 450 JPEG for S 224 decodes at 4/8 to
 * 300 x 225, which
 * the DCT does at a fraction of the full decode's cost.  S 0 or a PNG:
 * full size (*scale_eighths 8).  *H, *W: the decoded size; *orig_H,
 * *orig_W: the stored size.  An image over max_pixels (decoded) is refused
 * before its pixels are allocated.  0 (err: "" or a warning line, as
 * imagefolder_decode), or -1 with one line in err. */
int imagefolder_decode_scaled(const char *path, int S, ImageFolderResizeMode mode, int short_side, size_t max_pixels,
                              uint8_t **pixels, int *H, int *W, int *orig_H, int *orig_W, int *scale_eighths, char *err,
                              size_t err_n_bytes);

/* A worker's buffers, grown on demand and kept from image to image; zero it before the first use, free with
 * imagefolder_scratch_free. */
typedef struct {
    uint8_t *scaled;          /* (tH, tW, 3) the resampled image before the centre crop */
    size_t scaled_n_bytes;
    uint8_t *pixels;          /* (H, W, 3) the decoded JPEG (imagefolder_load) */
    size_t pixels_n_bytes;
    uint8_t *file;            /* (n_bytes) the file's bytes, read whole (imagefolder_load) */
    size_t file_n_bytes;
} ImageFolderScratch;
void imagefolder_scratch_free(ImageFolderScratch *scr);

/* rgb (H, W, 3), decoded from an image stored as orig_H x orig_W (H, W
 * smaller after a scaled decode), into out (S, S, C): the size (S, mode,
 * short_side: 0, or the center crop's shorter side before it, as
 * ImageFolderConfig's) gives from the stored size, the centre crop, the
 * channels (C 1: PIL's luma).  0, or -1 when memory is short or mode is IMAGEFOLDER_RANDOM_CROP
 * (imagefolder_transform_crop's). */
int imagefolder_transform(uint8_t *out, int S, int C, ImageFolderResizeMode mode, int short_side, const uint8_t *rgb,
                          int H, int W, int orig_H, int orig_W, ImageFolderScratch *scr);

/* As imagefolder_transform for a crop of the stored image (crop, in the
 * stored image's pixels): the crop's pixels resized to S x S by the same
 * filter (PIL's img.crop(box).resize((S, S), BILINEAR), then
 * transpose(FLIP_LEFT_RIGHT) where crop->flip).  After a scaled decode
 * (H, W smaller than orig_H, orig_W) the crop's edges are those of the
 * decoded pixels nearest to them (round(x W / orig_W), ...), at most half a
 * decoded pixel away.  0, or -1 when memory is short or the crop lies
 * outside the image. */
int imagefolder_transform_crop(uint8_t *out, int S, int C, const ImageFolderCrop *crop, const uint8_t *rgb, int H,
                               int W, int orig_H, int orig_W, ImageFolderScratch *scr);

/* After a failed load or decode (errno set to 0 before it): 1 when errno says the machine failed, not the
 * file (out of memory, too many open files), which a reader must not skip as a corrupt file (--skip_corrupt
 * dropped good images when the descriptors ran out); else 0. */
#define IMAGEFOLDER_SYSTEM_FAULT " (a fault of this machine, not of the file: not skipped)" /* after such a why */
static inline int imagefolder_failed_for_system(int errno_value) {
    return errno_value == ENOMEM || errno_value == EMFILE || errno_value == ENFILE;
}

/* One file to out (S, S, C): decoded as imagefolder_decode_scaled does
 * (scaled 0: full size, as tower convert), then imagefolder_transform.  A
 * file of at most max_pixels bytes is read whole into scr->file and
 * decoded from those bytes (a larger file through stdio) into scr->pixels,
 * both kept for the next file.  Refuses images whose
 * decoded size or resampling buffers ((tH, W) and (tH, tW)) exceed
 * max_pixels, or with a side over 65535, so that a worker's memory is
 * bounded by max_pixels (the input pipeline's bound).  *scale_eighths as
 * imagefolder_decode_scaled.  0 (err: "" or a warning line, as
 * imagefolder_decode), or -1 with one line in err ("PATH: ..."). */
int imagefolder_load(uint8_t *out, int S, int C, ImageFolderResizeMode mode, int short_side, const char *path,
                     size_t max_pixels, int scaled, ImageFolderScratch *scr, int *scale_eighths, char *err,
                     size_t err_n_bytes);

/* As imagefolder_load with IMAGEFOLDER_RANDOM_CROP: the crop is
 * imagefolder_random_crop's from rng_state (a copy: the same state gives
 * the same crop) for the stored size, and a JPEG is decoded (scaled) at the
 * smallest of the scales whose crop still covers S x S, through the crop's
 * window only (libjpeg-turbo's jpeg_crop_scanline and jpeg_skip_scanlines:
 * within one level of imagefolder_transform_crop on the whole decode, at
 * the window's edges).  *crop (may be NULL) gets the crop drawn.  Returns
 * as imagefolder_load. */
int imagefolder_load_random_crop(uint8_t *out, int S, int C, uint64_t rng_state, const char *path, size_t max_pixels,
                                 int scaled, ImageFolderScratch *scr, ImageFolderCrop *crop, int *scale_eighths,
                                 char *err, size_t err_n_bytes);

/* As imagefolder_load (or, for IMAGEFOLDER_RANDOM_CROP, as
 * imagefolder_load_random_crop from rng_state; rng_state is unused
 * otherwise) for an encoded JPEG or PNG already in memory: bytes (n_bytes,
 * the caller's, only read), e.g. a TFRecord's image/encoded feature.  name
 * stands where the path would in err ("FILE: record 3 at offset 812: not a
 * JPEG or PNG ...").  Nothing is read from disk; scr->file is unused.
 * Returns as imagefolder_load. */
int imagefolder_load_bytes(uint8_t *out, int S, int C, ImageFolderResizeMode mode, int short_side, uint64_t rng_state,
                           const uint8_t *bytes, size_t n_bytes, const char *name, size_t max_pixels, int scaled,
                           ImageFolderScratch *scr, int *scale_eighths, char *err, size_t err_n_bytes);

/* For a source from convert_open_imagefolder: the candidate files, class
 * after class (imagefolder_file: its path, owned by the source, and label). */
long imagefolder_n_files(const ConvertSource *src);
const char *imagefolder_file(const ConvertSource *src, long i, int *label);
/* Their sizes in bytes, summed from the stat that listed them (no second stat a file). */
uint64_t imagefolder_files_n_bytes(const ConvertSource *src);

/* 1 when path is a directory holding at least one subdirectory (a class
 * folder): an image folder as `--data`.  A directory of files only is not.
 * A directory that cannot be listed counts as one, so that opening it
 * (convert_open_imagefolder) reports the read error with its errno. */
int imagefolder_is_folder(const char *path);

/* The bytes convert_open_imagefolder's listing of dir holds (file paths,
 * class names, the arrays), from a listing of the names without stat; 0
 * when dir cannot be read. */
size_t imagefolder_listing_n_bytes(const char *dir);

/* PIL-style bilinear resampling of src (sH, sW, C) to dst (dH, dW, C),
 * uint8, both caller-owned, C in [1, 16]; in float, columns first.
 * Returns 0, or -1 when memory is short or C is out of range. */
int imagefolder_resize(uint8_t *dst, int dH, int dW, const uint8_t *src, int sH, int sW, int C);

/* As imagefolder_resize for src rows stride_n bytes apart (stride_n >= sW C:
 * a window of a larger image).  -1 also when stride_n is smaller. */
int imagefolder_resize_strided(uint8_t *dst, int dH, int dW, const uint8_t *src, int sH, int sW, size_t stride_n,
                               int C);

#endif
