/* loss.c — sparse softmax cross-entropy (mean over the batch) and
 * TensorFlow's L2 weight-decay term.
 *
 * Where it sits: the end of both models' forward pass (model.c) and the
 * start of backward.  Sums are accumulated in double.
 * What it does not do: validate labels beyond returning NAN (model.c
 * offers model_check_labels for a clear message).
 */
#include "model/layers.h"

#include <math.h>

float softmax_xent_forward(float *probs, const float *logits, const int32_t *labels, int B, int K) {
    double total = 0.0;
    int bad = 0;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K;
        float *p = probs + (size_t)b * K;
        float zmax = z[0];
        for (int k = 1; k < K; k++) zmax = z[k] > zmax ? z[k] : zmax;
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            p[k] = expf(z[k] - zmax);
            sum += p[k];
        }
        float inv = (float)(1.0 / sum);
        for (int k = 0; k < K; k++) p[k] *= inv;
        int y = labels[b];
        if (y < 0 || y >= K) { bad = 1; continue; }
        total += log(sum) - ((double)z[y] - zmax);
    }
    return bad ? NAN : (float)(total / B);
}

void softmax_xent_backward(float *dlogits, const float *probs, const int32_t *labels,
                           float dloss, int B, int K) {
    const float scale = dloss / (float)B;
    for (int b = 0; b < B; b++) {
        const float *p = probs + (size_t)b * K;
        float *d = dlogits + (size_t)b * K;
        for (int k = 0; k < K; k++) d[k] = scale * p[k];
        int y = labels[b];
        if (y >= 0 && y < K) d[y] -= scale;
    }
}

float l2_loss_forward(const float *w, size_t n, float wd) {
    /* Eight running sums, element i into sum i % 8, added at the end: the order is fixed (the same result on
     * every run and thread count), and the eight chains run side by side where one would wait on each add. */
    double s8[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s8[k] += (double)w[i + k] * w[i + k];
    for (; i < n; i++) s8[i % 8] += (double)w[i] * w[i];
    const double s = ((s8[0] + s8[1]) + (s8[2] + s8[3])) + ((s8[4] + s8[5]) + (s8[6] + s8[7]));
    return (float)(wd * s * 0.5);
}

void l2_loss_backward(float *dw, const float *w, size_t n, float wd) {
    for (size_t i = 0; i < n; i++) dw[i] += wd * w[i];
}

int in_top_k(const float *logits, int K, int label, int k) {
    const float target = logits[label];
    int above = 0;
    for (int c = 0; c < K; c++) {
        if (!isfinite(logits[c])) return 0;
        above += logits[c] > target;
    }
    return above < k;
}
