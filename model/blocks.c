/* blocks.c — the small layers of MobileNetV2 and its heads: Keras's
 * ZeroPadding2D, ReLU(6.), Activation("relu") (VGG's and ResNet's
 * ReLU after a batch norm), Add, GlobalAveragePooling2D and Dropout, plus
 * grad_accumulate (the layer graph's sum over a tensor's consumers).
 *
 * Where it sits: nodes of the layer graph between the convolutions and
 * batch norms.  Elementwise loops are OpenMP-parallel over elements (or
 * examples), with static schedules and no reductions across threads, so
 * results do not depend on the thread count.  These loops are the test
 * oracle of blocks_cuda.cu.
 * What it does not do: allocate, or keep a dropout mask (it is recomputed
 * from the key, see layers.h).
 */
#include "model/layers.h"

#include <math.h>
#include <string.h>

/* Below this many floats a loop runs on the calling thread: a parallel
 * region's fork and barrier cost more than the work (and much more when
 * other processes compete for the cores). */
#define OMP_MIN_FLOATS 32768

void grad_accumulate(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* ---- zero padding ---- */

int zeropad_init(ZeroPad *z, int H, int W, int C, int top, int bottom, int left, int right) {
    memset(z, 0, sizeof *z);
    if (H <= 0 || W <= 0 || C <= 0 || top < 0 || bottom < 0 || left < 0 || right < 0) return -1;
    z->H = H; z->W = W; z->C = C;
    z->top = top; z->bottom = bottom; z->left = left; z->right = right;
    z->OH = H + top + bottom;
    z->OW = W + left + right;
    return 0;
}

void keras_correct_pad(int *top, int *bottom, int *left, int *right, int H, int W, int k) {
    const int correct = k / 2;
    *top = correct - (1 - H % 2);
    *bottom = correct;
    *left = correct - (1 - W % 2);
    *right = correct;
}

void zeropad_forward(float *out, const float *inp, const ZeroPad *z, int B) {
    const int C = z->C;
    const size_t in_n = (size_t)z->H * z->W * C, out_n = (size_t)z->OH * z->OW * C, work_per_example = out_n;
#pragma omp parallel for schedule(static) if ((size_t)B * work_per_example >= OMP_MIN_FLOATS)
    for (int b = 0; b < B; b++) {
        float *y = out + (size_t)b * out_n;
        memset(y, 0, sizeof(float) * out_n);
        for (int h = 0; h < z->H; h++)
            memcpy(y + ((size_t)(h + z->top) * z->OW + z->left) * C, inp + (size_t)b * in_n + (size_t)h * z->W * C,
                   sizeof(float) * z->W * C);
    }
}

void zeropad_backward(float *dinp, const float *dout, const ZeroPad *z, int B) {
    const int C = z->C;
    const size_t in_n = (size_t)z->H * z->W * C, out_n = (size_t)z->OH * z->OW * C, work_per_example = in_n;
#pragma omp parallel for schedule(static) if ((size_t)B * work_per_example >= OMP_MIN_FLOATS)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < z->H; h++)
            memcpy(dinp + (size_t)b * in_n + (size_t)h * z->W * C,
                   dout + (size_t)b * out_n + ((size_t)(h + z->top) * z->OW + z->left) * C, sizeof(float) * z->W * C);
}

/* ---- ReLU6 ---- */

void relu6_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i] > 0.0f ? inp[i] : 0.0f;
        out[i] = x < 6.0f ? x : 6.0f;
    }
}

void relu6_backward(float *dinp, const float *out, const float *dout, size_t n) {
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t i = 0; i < n; i++) {
        float g = dout[i];
        dinp[i] = (out[i] > 0.0f && out[i] < 6.0f) ? g : 0.0f;
    }
}

/* ---- ReLU as a layer (Keras Activation("relu"): VGG's and ResNet's) ---- */

void relu_layer_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_layer_backward(float *dinp, const float *out, const float *dout, size_t n) {
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t i = 0; i < n; i++) {
        float g = dout[i];
        dinp[i] = out[i] > 0.0f ? g : 0.0f;
    }
}

/* ---- residual addition ---- */

void add_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* dst = src, in blocks over the threads (one thread's memcpy left the 2-core machine's bandwidth unused). */
static void copy_floats(float *dst, const float *src, size_t n) {
    enum { BLOCK = 16384 };
    const size_t n_blocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t k = 0; k < n_blocks; k++) {
        const size_t lo = k * BLOCK, len = n - lo < BLOCK ? n - lo : BLOCK;
        memcpy(dst + lo, src + lo, sizeof(float) * len);
    }
}

void add_backward(float *da, float *db, const float *dout, size_t n) {
    if (da && da != dout) copy_floats(da, dout, n);
    if (db && db != dout && db != da) copy_floats(db, dout, n);
}

void add_act_forward(float *out, const float *a, const float *b, Activation act, size_t n) {
    if (act == ACT_NONE) {
        add_forward(out, a, b, n);
        return;
    }
    const float hi = act == ACT_RELU6 ? 6.0f : INFINITY;
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t i = 0; i < n; i++) {
        const float s = a[i] + b[i];
        const float p = s > 0.0f ? s : 0.0f; /* relu_layer_forward's and relu6_forward's order */
        out[i] = p < hi ? p : hi;
    }
}

void add_act_backward(float *da, float *db, const float *out, const float *dout, Activation act, size_t n) {
    if (act == ACT_NONE) {
        add_backward(da, db, dout, n);
        return;
    }
    /* One of the two gets the masked gradient (relu_layer_backward's or relu6_backward's loop, which
     * vectorises), the other a copy of it: a loop storing both measured 2x slower (resnet20, 2026-11-27). */
    float *first = da ? da : db, *second = da ? db : NULL;
    if (!first) return;
    if (act == ACT_RELU6) relu6_backward(first, out, dout, n);
    else relu_layer_backward(first, out, dout, n);
    if (second && second != first) copy_floats(second, first, n);
}

/* ---- global average pooling ---- */

void global_avgpool_forward(float *out, const float *inp, int B, int n_pixels, int C) {
    const size_t work_per_example = (size_t)n_pixels * C;
#pragma omp parallel for schedule(static) if ((size_t)B * work_per_example >= OMP_MIN_FLOATS)
    for (int b = 0; b < B; b++) {
        float *y = out + (size_t)b * C;
        for (int c = 0; c < C; c++) y[c] = 0.0f;
        for (int p = 0; p < n_pixels; p++) {
            const float *x = inp + ((size_t)b * n_pixels + p) * C;
            for (int c = 0; c < C; c++) y[c] += x[c];
        }
        for (int c = 0; c < C; c++) y[c] /= (float)n_pixels;
    }
}

void global_avgpool_backward(float *dinp, const float *dout, int B, int n_pixels, int C) {
    const size_t work_per_example = (size_t)n_pixels * C;
#pragma omp parallel for schedule(static) if ((size_t)B * work_per_example >= OMP_MIN_FLOATS)
    for (int b = 0; b < B; b++) {
        const float *g = dout + (size_t)b * C;
        for (int p = 0; p < n_pixels; p++) {
            float *dx = dinp + ((size_t)b * n_pixels + p) * C;
            for (int c = 0; c < C; c++) dx[c] = g[c] / (float)n_pixels;
        }
    }
}

/* ---- dropout ---- */

#define DROPOUT_GOLDEN 0x9E3779B97F4A7C15ULL

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int dropout_init(Dropout *d, float rate) {
    memset(d, 0, sizeof *d);
    if (!(rate >= 0.0f && rate < 1.0f)) return -1;
    d->rate = rate;
    d->scale = 1.0f / (1.0f - rate);
    d->threshold = (uint32_t)ceil((double)rate * 16777216.0);
    return 0;
}

uint64_t dropout_key(uint64_t seed, uint64_t step, int tower, int layer) {
    uint64_t k = mix64(seed + DROPOUT_GOLDEN);
    k = mix64(k ^ (step + 1) * DROPOUT_GOLDEN);
    k = mix64(k ^ ((uint64_t)(uint32_t)tower + 1) * 0xD1B54A32D192ED03ULL);
    return mix64(k ^ ((uint64_t)(uint32_t)layer + 1) * 0x8CB92BA72F3D8DD7ULL);
}

int dropout_keep(const Dropout *d, uint64_t key, size_t i) {
    return (uint32_t)(mix64(key + ((uint64_t)i + 1) * DROPOUT_GOLDEN) >> 40) >= d->threshold;
}

void dropout_forward(float *out, const float *inp, const Dropout *d, uint64_t key, int training, size_t n) {
    if (!training) {
        if (out != inp) memmove(out, inp, sizeof(float) * n);
        return;
    }
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_FLOATS)
    for (size_t i = 0; i < n; i++) out[i] = dropout_keep(d, key, i) ? inp[i] * d->scale : 0.0f;
}

void dropout_backward(float *dinp, const float *dout, const Dropout *d, uint64_t key, int training, size_t n) {
    dropout_forward(dinp, dout, d, key, training, n);
}
