/* pipeline_imagefolder.c — the pipeline's image-folder source (io/pipeline_source.h).
 *
 * Where it sits: io/, inside the input pipeline.  At open it lists
 * DIR/<class>/FILE with convert_open_imagefolder (the class list, --labels,
 * the skipped non-files and their warnings are tower convert's); each epoch
 * the reader permutes the file list (seeded by (seed, epoch), as the
 * TFRecord file order) and has the workers decode and resize the images
 * (pipeline_decode_in_workers: imagefolder_load, JPEGs at libjpeg's reduced
 * scale; with IMAGEFOLDER_RANDOM_CROP a crop drawn from (seed, epoch, file),
 * io/imagefolder.h), collecting them in that order for the shuffle buffer.  An image
 * that does not decode is a bad example: pipeline_bad with the file's size
 * as the bytes lost.  Memory: the listing, one epoch's order, and per worker
 * the buffers imagefolder_load bounds by cfg.max_image_pixels.
 * What it does not do: no caching of decoded images between epochs, no
 * recursion into subfolders, no EXIF orientation (io/imagefolder.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/imagefolder.h"
#include "io/pipeline_source.h"
#include "io/rng.h"

#define DECODE_WINDOW_PER_WORKER (2 * PIPELINE_GROUP) /* images in flight per worker */
#define LIBJPEG_N_BYTES_PER_PIXEL 8                   /* libjpeg's own memory per decoded pixel (the bound) */
/* The resampler's weights for sides up to 65535: per axis out x ksize <= 2 in + 3 out <= 5 x 65535 taps, as
 * doubles then floats, and on AVX2 the horizontal pass's copies of them (16 bytes a tap) and its sums (16
 * bytes an output pixel): under 10 MiB at the peak. */
#define RESAMPLE_COEFFS_N_BYTES ((size_t)16 << 20)
#define RESAMPLE_ROW_PAD_N_FLOATS ((size_t)65535 * 3 + 1) /* the zeros past its row (imagefolder_resize) */

typedef struct {
    ConvertSource *listing;       /* convert_open_imagefolder's: classes, files, labels */
    int listing_borrowed;         /* 1: cfg.image_listing, the caller's to close */
    long n_files;
    long *order;                  /* (n_files) this epoch's order */
    long epoch;                   /* the epoch being read: set by the reader before it hands out the epoch's files */
    ImageFolderScratch *scratch;  /* (n_workers) */
} FolderSource;

static int folder_open(Pipeline *p, char *err, size_t err_n) {
    PipelineConfig *c = &p->cfg;
    FolderSource *fs = calloc(1, sizeof *fs);
    if (!fs) {
        snprintf(err, err_n, "pipeline: out of memory");
        return -1;
    }
    p->src_state = fs;
    fs->listing_borrowed = c->image_listing != NULL;
    if (fs->listing_borrowed) {
        fs->listing = c->image_listing;
    } else {
        /* The listing alone is used (classes, files, labels): the source's image options stay at defaults. */
        ImageFolderConfig ic;
        imagefolder_config_defaults(&ic);
        ic.warn = c->warn;
        ic.warn_ctx = c->warn_ctx;
        ic.labels_file = c->labels_file;
        if (!(fs->listing = convert_open_imagefolder(c->image_dir, &ic, err, err_n))) return -1;
    }
    int n_classes;
    imagefolder_classes(fs->listing, &n_classes);
    if (n_classes > c->num_classes) {
        snprintf(err, err_n, "%s: %d classes, but the model has num_classes %d", c->image_dir, n_classes, c->num_classes);
        return -1;
    }
    fs->n_files = imagefolder_n_files(fs->listing);
    if (fs->n_files == 0) {
        snprintf(err, err_n, "%s: no image files in its class folders", c->image_dir);
        return -1;
    }
    p->input_n_bytes += imagefolder_files_n_bytes(fs->listing);
    fs->order = malloc((size_t)fs->n_files * sizeof *fs->order);
    fs->scratch = calloc((size_t)c->n_workers, sizeof *fs->scratch);
    if (!fs->order || !fs->scratch) {
        snprintf(err, err_n, "pipeline: out of memory");
        return -1;
    }
    snprintf(p->no_data_msg, sizeof p->no_data_msg, "%s: no usable images in %ld file(s)", c->image_dir, fs->n_files);
    return 0;
}

static void folder_close(Pipeline *p) {
    FolderSource *fs = p->src_state;
    if (!fs) return;
    if (fs->listing && !fs->listing_borrowed) fs->listing->close(fs->listing);
    for (int w = 0; fs->scratch && w < p->cfg.n_workers; w++) imagefolder_scratch_free(&fs->scratch[w]);
    free(fs->scratch);
    free(fs->order);
    free(fs);
    p->src_state = NULL;
}

static long folder_count(Pipeline *p, char *err, size_t err_n) {
    (void)err;
    (void)err_n;
    return ((const FolderSource *)p->src_state)->n_files;
}

static long folder_read_epoch(Pipeline *p, long epoch) {
    FolderSource *fs = p->src_state;
    fs->epoch = epoch;
    pipeline_order(p, epoch, fs->order, fs->n_files);
    return pipeline_decode_in_workers(p, fs->order, fs->n_files);
}

static int folder_decode(Pipeline *p, int worker, long item, int slot, char *why, size_t why_n, uint64_t *lost_n_bytes) {
    FolderSource *fs = p->src_state;
    const PipelineConfig *c = &p->cfg;
    int label, scale_eighths = 8;
    const char *path = imagefolder_file(fs->listing, item, &label);
    uint8_t *dst = p->slot_data + (size_t)slot * p->slot_n_bytes;
    atomic_fetch_add(&p->images_decoded, 1);
    int rc;
    if (c->resize_mode == IMAGEFOLDER_RANDOM_CROP) {
        /* the crop of (seed, epoch, file): the same whichever worker decodes it, and after a resume */
        const uint64_t rng =
            rng_seed(c->seed, RNG_STREAM_CROP, (uint64_t)fs->epoch * (uint64_t)fs->n_files + (uint64_t)item);
        rc = imagefolder_load_random_crop(dst, c->in_H, c->in_C, rng, path, c->max_image_pixels, c->jpeg_scaled,
                                          &fs->scratch[worker], NULL, &scale_eighths, why, why_n);
    } else {
        rc = imagefolder_load(dst, c->in_H, c->in_C, (ImageFolderResizeMode)c->resize_mode, c->short_side, path,
                              c->max_image_pixels, c->jpeg_scaled, &fs->scratch[worker], &scale_eighths, why, why_n);
    }
    if (rc != 0) {
        const int load_errno = errno; /* decode_one reads it: the machine's fault or the file's */
        struct stat sb;
        *lost_n_bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        errno = load_errno;
        return -1;
    }
    if (scale_eighths < 8) atomic_fetch_add(&p->images_scaled, 1);
    if (label >= c->num_classes) { /* pipeline_open checked the class count; a guard all the same */
        snprintf(why, why_n, "%s: label %d outside [0, %d)", path, label, c->num_classes);
        return -1;
    }
    p->slot_label[slot] = label;
    return 0;
}

static void folder_max_n_bytes(const PipelineConfig *cfg, size_t record_n_bytes, size_t *reader_n_bytes,
                               size_t *workers_n_bytes) {
    (void)record_n_bytes;
    const size_t listing = imagefolder_listing_n_bytes(cfg->image_dir);
    /* the epoch's order: one long a file; the listing holds at least as many bytes a file */
    *reader_n_bytes = listing + listing / 2 + sizeof(FolderSource);
    *workers_n_bytes = (size_t)cfg->n_workers * pipeline_decode_worker_n_bytes(cfg, 1);
}

/* One worker: the decoded image (3 bytes a pixel), the resampled (tH, tW) bytes (3), libjpeg's memory
 * (LIBJPEG_N_BYTES_PER_PIXEL, its max_memory_to_use), a file read whole (at most P + 1 bytes; larger
 * ones are read through stdio), the resampler's one row of floats (W, 3) with its padding, W at most
 * 65535, and its weights. */
size_t pipeline_decode_worker_n_bytes(const PipelineConfig *cfg, int reads_files) {
    const size_t P = cfg->max_image_pixels ? cfg->max_image_pixels : PIPELINE_DEFAULT_MAX_IMAGE_PIXELS;
    const size_t row_n_bytes = ((size_t)65535 * 3 + RESAMPLE_ROW_PAD_N_FLOATS) * sizeof(float);
    return P * (3 + 3 + LIBJPEG_N_BYTES_PER_PIXEL) + (reads_files ? P + 1 : 0) + row_n_bytes +
           RESAMPLE_COEFFS_N_BYTES + sizeof(ImageFolderScratch);
}

const PipelineSourceI pipeline_source_imagefolder = {
    .name = "imagefolder",
    .open = folder_open,
    .count = folder_count,
    .read_epoch = folder_read_epoch,
    .decode = folder_decode,
    .close = folder_close,
    .max_n_bytes = folder_max_n_bytes,
    .decode_window = DECODE_WINDOW_PER_WORKER,
};

const char *const *pipeline_classes(const Pipeline *p, int *n_classes) {
    *n_classes = 0;
    if (p->src != &pipeline_source_imagefolder || !p->src_state) return NULL;
    return imagefolder_classes(((const FolderSource *)p->src_state)->listing, n_classes);
}
