/* fuzz_seed_tool.c — makes and packs the seed inputs of the fuzz targets.
 *
 * Where it sits: tests/fuzz/, run by scripts/fuzz-corpus.sh, which makes
 * the valid files themselves with `tower convert` and `tower train`; this
 * tool only does what a shell cannot do cleanly:
 *   images OUTDIR             small PNGs of every colour type and bit depth
 *                             (palette with tRNS, grey 1/2/4/16-bit, alpha,
 *                             Adam7) and JPEGs (baseline, grey, progressive,
 *                             restart markers, arithmetic coding, 4:2:0),
 *                             written with libpng and libjpeg-turbo
 *   payloads FILE OUTDIR PREFIX MAX
 *                             the payloads of FILE's first MAX TFRecord
 *                             records, one file each (fuzz_example's input)
 *   encoded-example IMAGE OUT an Example payload whose image_raw is IMAGE's
 *                             bytes (label 3): fuzz_example's encoded path
 *   pack-idx LABELS IMAGES OUT
 *                             fuzz_idx's input: 2-byte LE length of the
 *                             labels file, the labels file, the images file
 *   ckpt-skeleton OUT         fuzz_checkpoint's mode-0 input (a 0 byte, then
 *                             a tower.Checkpoint payload) for mnist on 4x4x1
 *                             with every variable named and shaped but
 *                             holding no data: small, and it walks the
 *                             loader up to the size check
 *   ckpt-shards FILE OFFSET N OUT
 *                             fuzz_checkpoint's mode-3 input (a 3 byte, the
 *                             manifest, then each shard's payload after
 *                             "\n%%shard%%\n") from the tower.Checkpoint
 *                             payload at byte OFFSET of FILE (24: after a
 *                             checkpoint file's header; 1: after a seed's
 *                             mode byte), cut into N shards as
 *                             ckpt_save_shard writes them: the variables
 *                             round robin (--ps_placement round_robin), each
 *                             shard its variables' tensors (variables,
 *                             momentum, moving averages, the slots
 *                             "<variable>/<slot>") and every other field
 * Exits 0, or 1 with one line on stderr.
 * What it does not do: no fuzzing, no valid checkpoints (those come from a
 * real `tower train`).
 */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "io/example.h"
#include "io/tfrecord.h"
#include "model/model.h"
#include "ps/checkpoint.pb-c.h"

static int die(const char *msg, const char *arg) {
    fprintf(stderr, "fuzz_seed_tool: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    exit(1);
}

/* A deterministic pattern so the images are not flat. */
static uint8_t px(int y, int x, int c) { return (uint8_t)(y * 37 + x * 11 + c * 85 + ((x ^ y) & 3) * 20); }

static void write_png(const char *dir, const char *name, int W, int H, int color, int depth, int interlace) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot create", path);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info || setjmp(png_jmpbuf(png))) die("libpng failed writing", path);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, depth, color, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (color == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[16];
        png_byte alpha[16];
        for (int i = 0; i < 16; i++) {
            pal[i].red = (png_byte)(i * 16);
            pal[i].green = (png_byte)(255 - i * 16);
            pal[i].blue = (png_byte)(i * 7);
            alpha[i] = (png_byte)(255 - i * 8);
        }
        int n = 1 << (depth < 4 ? depth : 4);
        png_set_PLTE(png, info, pal, n);
        png_set_tRNS(png, info, alpha, n, NULL);
    }
    png_write_info(png, info);
    int channels = color == PNG_COLOR_TYPE_RGB ? 3 : color == PNG_COLOR_TYPE_RGBA ? 4 : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : 1;
    size_t row_n_bytes = ((size_t)W * channels * depth + 7) / 8;
    png_bytep *rows = malloc((size_t)H * sizeof *rows);
    uint8_t *buf = calloc((size_t)H, row_n_bytes);
    if (!rows || !buf) die("out of memory", NULL);
    for (int y = 0; y < H; y++) {
        rows[y] = buf + (size_t)y * row_n_bytes;
        for (int x = 0; x < W; x++)
            for (int c = 0; c < channels; c++) {
                unsigned v = px(y, x, c);
                if (color == PNG_COLOR_TYPE_PALETTE) v = (v % (1u << (depth < 4 ? depth : 4))) << (8 - depth); /* an index below 16 */
                size_t bit = ((size_t)x * channels + c) * depth;
                if (depth == 16) {
                    rows[y][bit / 8] = (uint8_t)v;
                    rows[y][bit / 8 + 1] = (uint8_t)(v * 3);
                } else if (depth == 8) {
                    rows[y][bit / 8] = (uint8_t)v;
                } else {
                    unsigned s = (v >> (8 - depth)) & ((1u << depth) - 1);
                    rows[y][bit / 8] |= (uint8_t)(s << (8 - depth - bit % 8));
                }
            }
    }
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(buf);
    if (fclose(f) != 0) die("write failed", path);
}

typedef struct {
    int grey, progressive, restart, arith, subsample;
    int cmyk; /* 1: four channels stored as CMYK, 2: as YCCK (Adobe's transform) */
} JpegKind;

static void write_jpeg(const char *dir, const char *name, int W, int H, JpegKind k) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot create", path);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)W;
    c.image_height = (JDIMENSION)H;
    c.input_components = k.grey ? 1 : k.cmyk ? 4 : 3;
    c.in_color_space = k.grey ? JCS_GRAYSCALE : k.cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    if (k.cmyk == 2) jpeg_set_colorspace(&c, JCS_YCCK);
    jpeg_set_quality(&c, 80, TRUE);
    if (!k.grey) {
        int h = k.subsample ? 2 : 1;
        c.comp_info[0].h_samp_factor = h;
        c.comp_info[0].v_samp_factor = h;
    }
    if (k.progressive) jpeg_simple_progression(&c);
    if (k.restart) c.restart_interval = 1;
    if (k.arith) c.arith_code = TRUE;
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)W * 4);
    if (!row) die("out of memory", NULL);
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W; x++)
            for (int ch = 0; ch < c.input_components; ch++) row[x * c.input_components + ch] = px(y, x, ch);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    if (fclose(f) != 0) die("write failed", path);
}

static int cmd_images(const char *dir) {
    write_png(dir, "rgb8.png", 5, 4, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE);
    write_png(dir, "rgb16.png", 3, 3, PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_NONE);
    write_png(dir, "rgba8.png", 4, 2, PNG_COLOR_TYPE_RGBA, 8, PNG_INTERLACE_NONE);
    write_png(dir, "grey1.png", 9, 3, PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE);
    write_png(dir, "grey2.png", 6, 2, PNG_COLOR_TYPE_GRAY, 2, PNG_INTERLACE_NONE);
    write_png(dir, "grey4.png", 5, 5, PNG_COLOR_TYPE_GRAY, 4, PNG_INTERLACE_NONE);
    write_png(dir, "grey16.png", 2, 3, PNG_COLOR_TYPE_GRAY, 16, PNG_INTERLACE_NONE);
    write_png(dir, "greya8.png", 3, 4, PNG_COLOR_TYPE_GRAY_ALPHA, 8, PNG_INTERLACE_NONE);
    write_png(dir, "palette4.png", 7, 3, PNG_COLOR_TYPE_PALETTE, 4, PNG_INTERLACE_NONE);
    write_png(dir, "palette8.png", 3, 7, PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE);
    write_png(dir, "adam7.png", 9, 9, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_ADAM7);
    write_png(dir, "one.png", 1, 1, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE);
    write_jpeg(dir, "baseline.jpg", 8, 8, (JpegKind){0, 0, 0, 0, 0});
    write_jpeg(dir, "grey.jpg", 7, 5, (JpegKind){1, 0, 0, 0, 0});
    write_jpeg(dir, "progressive.jpg", 17, 9, (JpegKind){0, 1, 0, 0, 1});
    write_jpeg(dir, "restart.jpg", 16, 16, (JpegKind){0, 0, 1, 0, 0});
    write_jpeg(dir, "arith.jpg", 9, 6, (JpegKind){0, 0, 0, 1, 1});
    write_jpeg(dir, "one.jpg", 1, 1, (JpegKind){0, 0, 0, 0, 1});
    write_jpeg(dir, "cmyk.jpg", 9, 7, (JpegKind){.cmyk = 1});
    write_jpeg(dir, "ycck.jpg", 8, 10, (JpegKind){.subsample = 1, .cmyk = 2});
    return 0;
}

static int cmd_payloads(const char *file, const char *dir, const char *prefix, long max) {
    char err[1024];
    TfrReader *r = tfr_reader_open(file, IO_COMPRESSION_AUTO, 0, err, sizeof err);
    if (!r) die(err, NULL);
    long i = 0;
    const uint8_t *data;
    size_t n;
    int st;
    while (i < max && (st = tfr_reader_next(r, &data, &n, err, sizeof err)) == TFR_RECORD) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s-%ld", dir, prefix, i++);
        FILE *f = fopen(path, "wb");
        if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) die("cannot write", path);
    }
    tfr_reader_close(r);
    if (i < max && st != TFR_END) die(err, NULL);
    return 0;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open", path);
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap);
    *n = 0;
    size_t got;
    while (buf && (got = fread(buf + *n, 1, cap - *n, f)) > 0) {
        *n += got;
        if (*n == cap) buf = realloc(buf, cap *= 2);
    }
    if (!buf || ferror(f)) die("cannot read", path);
    fclose(f);
    return buf;
}

static int cmd_pack_idx(const char *labels, const char *images, const char *out) {
    size_t nl, ni;
    uint8_t *l = slurp(labels, &nl), *im = slurp(images, &ni);
    if (nl > 65535) die("the labels file is over 65535 bytes", labels);
    FILE *f = fopen(out, "wb");
    uint8_t len[2] = {(uint8_t)nl, (uint8_t)(nl >> 8)};
    if (!f || fwrite(len, 1, 2, f) != 2 || (nl && fwrite(l, 1, nl, f) != nl) || (ni && fwrite(im, 1, ni, f) != ni) || fclose(f) != 0)
        die("cannot write", out);
    free(l);
    free(im);
    return 0;
}

static int cmd_ckpt_skeleton(const char *out) {
    ModelSpec spec;
    char err[256];
    if (model_spec_init(&spec, "mnist", 4, 4, 1, 10, err, sizeof err) != 0) die(err, NULL);
    Tower__Checkpoint msg;
    Tower__RunState rs;
    Tower__Tensor t[MODEL_MAX_VARS], *tp[MODEL_MAX_VARS];
    int32_t shapes[MODEL_MAX_VARS][4];
    tower__checkpoint__init(&msg);
    tower__run_state__init(&rs);
    msg.model = "mnist";
    msg.height = 4;
    msg.width = 4;
    msg.channels = 1;
    msg.num_classes = 10;
    msg.global_step = 2;
    rs.seed = 1;
    rs.n_towers = 1;
    rs.batch_size = 2;
    msg.run = &rs;
    for (int v = 0; v < spec.n_vars; v++) {
        tower__tensor__init(&t[v]);
        t[v].name = spec.vars[v].name;
        for (int d = 0; d < spec.vars[v].ndim; d++) shapes[v][d] = spec.vars[v].shape[d];
        t[v].n_shape = (size_t)spec.vars[v].ndim;
        t[v].shape = shapes[v];
        tp[v] = &t[v];
    }
    msg.n_variables = msg.n_momentum = msg.n_moving_averages = (size_t)spec.n_vars;
    msg.variables = msg.momentum = msg.moving_averages = tp;
    size_t n = tower__checkpoint__get_packed_size(&msg);
    uint8_t *buf = malloc(n + 1);
    if (!buf) die("out of memory", NULL);
    buf[0] = 0; /* fuzz_checkpoint's mode 0: a payload */
    tower__checkpoint__pack(&msg, buf + 1);
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(buf, 1, n + 1, f) != n + 1 || fclose(f) != 0) die("cannot write", out);
    free(buf);
    return 0;
}

/* The index of the variable named name (a slot "<variable>/<slot>" when slot: its variable) in msg, or -1. */
static int variable_of(const Tower__Checkpoint *msg, const char *name, int slot) {
    const char *slash = slot ? strrchr(name, '/') : NULL;
    const size_t n = slash ? (size_t)(slash - name) : strlen(name);
    for (size_t v = 0; v < msg->n_variables; v++)
        if (strlen(msg->variables[v]->name) == n && !strncmp(msg->variables[v]->name, name, n)) return (int)v;
    return -1;
}

/* From in[0 .. n_in) the tensors of shard k of n_shards (variable v goes to shard v mod n_shards) into out. */
static size_t keep_tensors(const Tower__Checkpoint *msg, Tower__Tensor **in, size_t n_in, int slot, int k,
                           int n_shards, Tower__Tensor **out) {
    size_t n = 0;
    for (size_t i = 0; i < n_in; i++) {
        const int v = variable_of(msg, in[i]->name, slot);
        if (v < 0) die("a tensor of no variable", in[i]->name);
        if (v % n_shards == k) out[n++] = in[i];
    }
    return n;
}

static int cmd_ckpt_shards(const char *file, long offset, int n_shards, const char *out) {
    FILE *f = fopen(file, "rb");
    if (!f || n_shards < 1 || n_shards > 99) die("cannot read (or N outside [1, 99])", file);
    static uint8_t in[1 << 24];
    const size_t n_in = fread(in, 1, sizeof in, f);
    fclose(f);
    if ((size_t)offset >= n_in) die("shorter than OFFSET", file);
    Tower__Checkpoint *msg = tower__checkpoint__unpack(NULL, n_in - (size_t)offset, in + offset);
    if (!msg) die("not a tower.Checkpoint payload at OFFSET", file);
    FILE *o = fopen(out, "wb");
    if (!o) die("cannot write", out);
    fprintf(o, "%cn_shards: %d\n", 3, n_shards);
    for (int k = 0; k < n_shards; k++) fprintf(o, "shard: \"model.ckpt-1.shard-%05d-of-%05d\"\n", k, n_shards);
    const size_t cap = msg->n_variables + msg->n_slots + 1;
    Tower__Tensor **vars = malloc(cap * sizeof *vars), **mom = malloc(cap * sizeof *mom),
                  **ema = malloc(cap * sizeof *ema), **slots = malloc(cap * sizeof *slots);
    if (!vars || !mom || !ema || !slots) die("out of memory", NULL);
    for (int k = 0; k < n_shards; k++) {
        Tower__Checkpoint shard = *msg;
        shard.n_variables = keep_tensors(msg, msg->variables, msg->n_variables, 0, k, n_shards, vars);
        shard.n_momentum = keep_tensors(msg, msg->momentum, msg->n_momentum, 0, k, n_shards, mom);
        shard.n_moving_averages = keep_tensors(msg, msg->moving_averages, msg->n_moving_averages, 0, k, n_shards, ema);
        shard.n_slots = keep_tensors(msg, msg->slots, msg->n_slots, 1, k, n_shards, slots);
        shard.variables = vars;
        shard.momentum = mom;
        shard.moving_averages = ema;
        shard.slots = slots;
        const size_t n = tower__checkpoint__get_packed_size(&shard);
        uint8_t *buf = malloc(n + 1);
        if (!buf) die("out of memory", NULL);
        tower__checkpoint__pack(&shard, buf);
        if (fputs("\n%%shard%%\n", o) == EOF || fwrite(buf, 1, n, o) != n) die("cannot write", out);
        free(buf);
    }
    if (fclose(o) != 0) die("cannot write", out);
    free(vars);
    free(mom);
    free(ema);
    free(slots);
    tower__checkpoint__free_unpacked(msg, NULL);
    return 0;
}

/* An Example payload whose image_raw holds the bytes of image file IMAGE (an encoded JPEG or PNG, as
 * ImageNet's image/encoded) and whose label is 3: fuzz_example's way into the encoded source. */
static int cmd_encoded_example(const char *image, const char *out) {
    FILE *f = fopen(image, "rb");
    if (!f) die("cannot open", image);
    static uint8_t bytes[1 << 20];
    const size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    ExampleBuilder b;
    example_builder_init(&b);
    const uint8_t *data;
    size_t data_n;
    if (example_add_bytes(&b, "image_raw", bytes, n) != 0 || example_add_int64(&b, "label", 3) != 0 ||
        !(data_n = example_builder_encode(&b, &data)))
        die("cannot encode an Example of", image);
    FILE *o = fopen(out, "wb");
    if (!o || fwrite(data, 1, data_n, o) != data_n || fclose(o) != 0) die("cannot write", out);
    example_builder_free(&b);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "images")) return cmd_images(argv[2]);
    if (argc == 6 && !strcmp(argv[1], "payloads")) return cmd_payloads(argv[2], argv[3], argv[4], atol(argv[5]));
    if (argc == 5 && !strcmp(argv[1], "pack-idx")) return cmd_pack_idx(argv[2], argv[3], argv[4]);
    if (argc == 4 && !strcmp(argv[1], "encoded-example")) return cmd_encoded_example(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "ckpt-skeleton")) return cmd_ckpt_skeleton(argv[2]);
    if (argc == 6 && !strcmp(argv[1], "ckpt-shards")) return cmd_ckpt_shards(argv[2], atol(argv[3]), atoi(argv[4]), argv[5]);
    fprintf(stderr, "usage: fuzz_seed_tool images OUTDIR | payloads FILE OUTDIR PREFIX MAX | pack-idx LABELS IMAGES OUT | "
                    "encoded-example IMAGE OUT | ckpt-skeleton OUT | ckpt-shards FILE OFFSET N OUT\n");
    return 2;
}
