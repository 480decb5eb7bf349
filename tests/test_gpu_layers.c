/* test_gpu_layers.c — every CUDA layer (model/layers_cuda.h), forward and
 * backward, against the CPU reference (model/layers.h) on fresh random
 * inputs, for the geometries of both models and a few others.
 *
 * Where it sits: the first GPU test (label `gpu`); skipped (77) without a
 * GPU.  The seed is printed; TOWER_TEST_SEED=<seed> replays a run.
 * Backward passes get the CPU's saved values (forward output, argmax,
 * scale), so a relu or max decision that float rounding could tip the
 * other way is the same on both sides and the comparison stays tight:
 * float32 sums in another order, relative 1e-4 of the tensor's largest
 * value; own kernels that mirror the CPU's operations exactly, 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/layers_cuda.h"
#include "tests/test_gpu_common.h"

typedef struct {
    cudaStream_t stream;
    cudnnHandle_t cudnn;   /* bound to stream */
    cublasHandle_t cublas; /* bound to stream, CUBLAS_DEFAULT_MATH (no TF32) */
} Ctx;

#define F(n) ((n) * sizeof(float))

/* ---- conv2d ---- */

static int test_conv(const Ctx *x, int H, int W, int C_in, int K, int C_out, int stride, Padding pad, Activation act,
                     int B, int max_batch, int allow_tf32, double rel) {
    Conv2d g;
    if (conv2d_init(&g, H, W, C_in, K, K, C_out, stride, stride, pad, act)) {
        printf("conv2d_init rejected %dx%dx%d k%d s%d: FAIL\n", H, W, C_in, K, stride);
        return 1;
    }
    printf("conv2d %dx%dx%d, kernel %dx%d, stride %d, %s, %s -> %dx%dx%d, batch %d of %d%s\n", H, W, C_in, K, K, stride,
           pad == PAD_SAME ? "SAME" : "VALID", act == ACT_RELU ? "relu" : "no activation", g.OH, g.OW, C_out, B,
           max_batch, allow_tf32 ? ", TF32 allowed" : "");
    Conv2dCuda c;
    char err[512];
    if (conv2d_cuda_init(&c, &g, max_batch, allow_tf32, 0, x->cudnn, err, sizeof err) ||
        conv2d_cuda_set_batch(&c, B, x->cudnn, err, sizeof err)) {
        printf("  %s: FAIL\n", err);
        return 1;
    }
    const size_t in_n = (size_t)B * H * W * C_in, out_n = (size_t)B * g.OH * g.OW * C_out;
    const size_t w_n = (size_t)K * K * C_in * C_out;
    float *inp = gpu_test_host(F(in_n)), *w = gpu_test_host(F(w_n)), *b = gpu_test_host(F(C_out));
    float *dout = gpu_test_host(F(out_n)), *out = gpu_test_host(F(out_n)), *dinp = gpu_test_host(F(in_n));
    float *dw = gpu_test_host(F(w_n)), *db = gpu_test_host(F(C_out));
    float *scratch = gpu_test_host(F(conv2d_scratch_n_floats(&g, 1)));
    float *got = gpu_test_host(F(in_n > out_n ? (in_n > w_n ? in_n : w_n) : (out_n > w_n ? out_n : w_n)));
    gpu_test_fill(inp, in_n, -1.0f, 1.0f);
    gpu_test_fill(w, w_n, -0.2f, 0.2f);
    gpu_test_fill(b, C_out, -0.5f, 0.5f);
    gpu_test_fill(dout, out_n, -1.0f, 1.0f);
    conv2d_forward(out, scratch, inp, w, b, &g, B, 1);
    conv2d_backward(dinp, dw, db, scratch, out, dout, inp, w, &g, B, 1);

    float *d_inp = gpu_test_upload(inp, F(in_n)), *d_w = gpu_test_upload(w, F(w_n)), *d_b = gpu_test_upload(b, F(C_out));
    float *d_dout = gpu_test_upload(dout, F(out_n)), *d_saved = gpu_test_upload(out, F(out_n));
    float *d_out = gpu_test_dev(F(out_n)), *d_dinp = gpu_test_dev(F(in_n)), *d_dw = gpu_test_dev(F(w_n));
    float *d_db = gpu_test_dev(F(C_out));
    void *d_scratch = gpu_test_dev(conv2d_cuda_scratch_n_bytes(&c));
    int fails = 0;
    conv2d_forward_cuda(d_out, d_scratch, d_inp, d_w, d_b, &c, B, x->cudnn, x->stream);
    gpu_test_download(got, d_out, F(out_n));
    fails += gpu_test_check_scaled("forward out", got, out, out_n, rel);
    conv2d_backward_cuda(d_dinp, d_dw, d_db, d_scratch, d_saved, d_dout, d_inp, d_w, &c, B, x->cudnn, x->stream);
    gpu_test_download(got, d_dinp, F(in_n));
    fails += gpu_test_check_scaled("backward dinp", got, dinp, in_n, rel);
    gpu_test_download(got, d_dw, F(w_n));
    fails += gpu_test_check_scaled("backward dweight (HWIO)", got, dw, w_n, rel);
    gpu_test_download(got, d_db, F(C_out));
    fails += gpu_test_check_scaled("backward dbias", got, db, C_out, rel);
    /* dinp and dbias may be NULL (the first layer): dweight must not change. */
    CUDA_CHECK(cudaMemset(d_dw, 0xff, F(w_n)));
    conv2d_backward_cuda(NULL, d_dw, NULL, d_scratch, d_saved, d_dout, d_inp, d_w, &c, B, x->cudnn, x->stream);
    gpu_test_download(got, d_dw, F(w_n));
    fails += gpu_test_check_scaled("backward dweight, dinp = dbias = NULL", got, dw, w_n, rel);

    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b); cudaFree(d_dout); cudaFree(d_saved); cudaFree(d_out);
    cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_db); cudaFree(d_scratch);
    free(inp); free(w); free(b); free(dout); free(out); free(dinp); free(dw); free(db); free(scratch); free(got);
    conv2d_cuda_free(&c);
    return fails;
}

/* TensorFlow's SAME with an odd total padding must be refused at init. */
static int test_conv_odd_padding(const Ctx *x, int H, int K, int stride) {
    Conv2d g;
    if (conv2d_init(&g, H, H, 3, K, K, 8, stride, stride, PAD_SAME, ACT_RELU)) {
        printf("conv2d_init rejected %dx%d k%d s%d: FAIL\n", H, H, K, stride);
        return 1;
    }
    Conv2dCuda c;
    char err[512] = "";
    int rc = conv2d_cuda_init(&c, &g, 4, 0, 0, x->cudnn, err, sizeof err);
    int ok = rc == -1 && strstr(err, "cuDNN") && strstr(err, "SAME");
    printf("conv2d %dx%d, kernel %d, stride %d, SAME (pad_total odd) refused at init: \"%s\": %s\n", H, H, K, stride,
           err, ok ? "ok" : "FAIL");
    if (rc == 0) conv2d_cuda_free(&c);
    return ok ? 0 : 1;
}

/* The models' conv shapes at batch 128 with deterministic_only (--deterministic):
 * init succeeds, and every recorded algorithm is one cuDNN calls
 * deterministic, in FMA math (no TF32); the description names all three. */
static int test_conv_deterministic(const Ctx *x, int H, int C_in, int C_out) {
    Conv2d g;
    if (conv2d_init(&g, H, H, C_in, 5, 5, C_out, 1, 1, PAD_SAME, ACT_RELU)) {
        printf("conv2d_init rejected %dx%dx%d: FAIL\n", H, H, C_in);
        return 1;
    }
    Conv2dCuda c;
    char err[512] = "", desc[1024] = "";
    if (conv2d_cuda_init(&c, &g, 128, 0, 1, x->cudnn, err, sizeof err)) {
        printf("conv2d %dx%dx%d -> %d, batch 128, deterministic only: %s: FAIL\n", H, H, C_in, C_out, err);
        return 1;
    }
    conv2d_cuda_describe_algos(&c, desc, sizeof desc);
    int ok = 1;
    for (int d = 0; d < 3; d++) ok &= c.algo_deterministic[d] && c.algo_math[d] == CUDNN_FMA_MATH;
    ok &= strstr(desc, "forward") && strstr(desc, "backward data") && strstr(desc, "backward filter") &&
          !strstr(desc, "NOT deterministic");
    printf("conv2d %dx%dx%d -> %d, batch 128, deterministic only: %s: %s\n", H, H, C_in, C_out, desc, ok ? "ok" : "FAIL");
    conv2d_cuda_free(&c);
    return ok ? 0 : 1;
}

/* ---- max pooling ---- */

static int test_pool(const Ctx *x, int H, int W, int C, int k, int stride, Padding pad, int B, int ties) {
    MaxPool p;
    if (maxpool_init(&p, H, W, C, k, k, stride, stride, pad)) {
        printf("maxpool_init rejected %dx%dx%d k%d s%d: FAIL\n", H, W, C, k, stride);
        return 1;
    }
    printf("maxpool %dx%dx%d, window %d, stride %d, %s (pad %d before, %d in total) -> %dx%d, batch %d%s\n", H, W, C, k,
           stride, pad == PAD_SAME ? "SAME" : "VALID", p.pad_top,
           pad == PAD_SAME ? ((p.OH - 1) * stride + k - H > 0 ? (p.OH - 1) * stride + k - H : 0) : 0, p.OH, p.OW, B,
           ties ? ", many ties" : "");
    const size_t in_n = (size_t)B * H * W * C, out_n = (size_t)B * p.OH * p.OW * C;
    float *inp = gpu_test_host(F(in_n)), *out = gpu_test_host(F(out_n)), *dout = gpu_test_host(F(out_n));
    float *dinp = gpu_test_host(F(in_n)), *got = gpu_test_host(F(in_n > out_n ? in_n : out_n));
    int32_t *arg = gpu_test_host(out_n * sizeof(int32_t)), *got_arg = gpu_test_host(out_n * sizeof(int32_t));
    gpu_test_fill(inp, in_n, -1.0f, 1.0f);
    if (ties)
        for (size_t i = 0; i < in_n; i++) inp[i] = (float)(int)(inp[i] * 2.0f) * 0.5f; /* -0.5, 0, 0.5 */
    gpu_test_fill(dout, out_n, -1.0f, 1.0f);
    maxpool_forward(out, arg, inp, &p, B);
    maxpool_backward(dinp, arg, dout, &p, B);
    float *d_inp = gpu_test_upload(inp, F(in_n)), *d_dout = gpu_test_upload(dout, F(out_n));
    float *d_out = gpu_test_dev(F(out_n)), *d_dinp = gpu_test_dev(F(in_n));
    int32_t *d_arg = gpu_test_dev(out_n * sizeof(int32_t)), *d_arg_cpu = gpu_test_upload(arg, out_n * sizeof(int32_t));
    int fails = 0;
    maxpool_forward_cuda(d_out, d_arg, d_inp, &p, B, x->stream);
    gpu_test_download(got, d_out, F(out_n));
    fails += gpu_test_check("forward out (exact)", got, out, out_n, 0.0, 0.0, 0);
    gpu_test_download(got_arg, d_arg, out_n * sizeof(int32_t));
    fails += gpu_test_check_i32("forward argmax (exact)", got_arg, arg, out_n);
    maxpool_backward_cuda(d_dinp, d_arg_cpu, d_dout, &p, B, x->stream);
    gpu_test_download(got, d_dinp, F(in_n));
    fails += gpu_test_check("backward dinp (exact)", got, dinp, in_n, 0.0, 0.0, 0);
    cudaFree(d_inp); cudaFree(d_dout); cudaFree(d_out); cudaFree(d_dinp); cudaFree(d_arg); cudaFree(d_arg_cpu);
    free(inp); free(out); free(dout); free(dinp); free(got); free(arg); free(got_arg);
    return fails;
}

/* ---- LRN ---- */

static int test_lrn(const Ctx *x, int C, size_t n_pixels, int r, float bias, float alpha, float beta, LrnCudaImpl impl,
                    float in_scale, double rel) {
    Lrn p = {r, bias, alpha, beta};
    LrnCuda l;
    char err[512];
    if (lrn_cuda_init(&l, &p, C, impl, err, sizeof err) || lrn_cuda_set_n_pixels(&l, n_pixels, err, sizeof err)) {
        printf("lrn r=%d: %s: FAIL\n", r, err);
        return 1;
    }
    printf("lrn (%zu, %d), depth_radius %d, bias %g, alpha %g, beta %g, inputs in +-%g: %s\n", n_pixels, C, r, bias,
           alpha, beta, in_scale, l.use_cudnn ? "cuDNN" : "our kernels");
    int fails = 0;
    if ((impl == LRN_CUDA_CUDNN && !l.use_cudnn) || (impl == LRN_CUDA_KERNEL && l.use_cudnn)) {
        printf("  the implementation asked for was not used: FAIL\n");
        fails++;
    }
    const size_t n = n_pixels * C;
    float *inp = gpu_test_host(F(n)), *out = gpu_test_host(F(n)), *scale = gpu_test_host(F(n));
    float *dout = gpu_test_host(F(n)), *dinp = gpu_test_host(F(n)), *got = gpu_test_host(F(n));
    gpu_test_fill(inp, n, -in_scale, in_scale);
    gpu_test_fill(dout, n, -1.0f, 1.0f);
    lrn_forward(out, scale, inp, &p, n_pixels, C);
    lrn_backward(dinp, scale, out, dout, inp, &p, n_pixels, C);
    float *d_inp = gpu_test_upload(inp, F(n)), *d_dout = gpu_test_upload(dout, F(n));
    float *d_out_cpu = gpu_test_upload(out, F(n)), *d_scale_cpu = gpu_test_upload(scale, F(n));
    float *d_out = gpu_test_dev(F(n)), *d_scale = gpu_test_dev(F(n)), *d_dinp = gpu_test_dev(F(n));
    lrn_forward_cuda(d_out, d_scale, d_inp, &l, n_pixels, C, x->cudnn, x->stream);
    gpu_test_download(got, d_out, F(n));
    fails += gpu_test_check_scaled("forward out", got, out, n, rel);
    if (!l.use_cudnn) {
        gpu_test_download(got, d_scale, F(n));
        fails += gpu_test_check_scaled("forward scale", got, scale, n, rel);
    }
    lrn_backward_cuda(d_dinp, d_scale_cpu, d_out_cpu, d_dout, d_inp, &l, n_pixels, C, x->cudnn, x->stream);
    gpu_test_download(got, d_dinp, F(n));
    fails += gpu_test_check_scaled("backward dinp", got, dinp, n, rel);
    cudaFree(d_inp); cudaFree(d_dout); cudaFree(d_out_cpu); cudaFree(d_scale_cpu); cudaFree(d_out); cudaFree(d_scale);
    cudaFree(d_dinp);
    free(inp); free(out); free(scale); free(dout); free(dinp); free(got);
    lrn_cuda_free(&l);
    return fails;
}

static int test_lrn_out_of_range(void) {
    Lrn p = {9, 1.0f, 1e-3f, 0.75f}; /* window 19 > 16 */
    LrnCuda l;
    char err[512] = "";
    int rc_cudnn = lrn_cuda_init(&l, &p, 32, LRN_CUDA_CUDNN, err, sizeof err);
    int ok = rc_cudnn == -1 && strstr(err, "cuDNN") != NULL;
    if (rc_cudnn == 0) lrn_cuda_free(&l);
    char err2[512] = "";
    int rc_auto = lrn_cuda_init(&l, &p, 32, LRN_CUDA_AUTO, err2, sizeof err2);
    ok = ok && rc_auto == 0 && !l.use_cudnn;
    if (rc_auto == 0) lrn_cuda_free(&l);
    printf("lrn depth_radius 9: cuDNN refused (\"%s\"), AUTO falls back to our kernels: %s\n", err, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

/* ---- dense ---- */

static int test_dense(const Ctx *x, int n_in, int n_out, Activation act, int B, double rel) {
    Dense d = {n_in, n_out, act};
    printf("dense %d -> %d, %s, batch %d\n", n_in, n_out, act == ACT_RELU ? "relu" : "no activation", B);
    const size_t in_n = (size_t)B * n_in, out_n = (size_t)B * n_out, w_n = (size_t)n_in * n_out;
    float *inp = gpu_test_host(F(in_n)), *w = gpu_test_host(F(w_n)), *b = gpu_test_host(F(n_out));
    float *out = gpu_test_host(F(out_n)), *dout = gpu_test_host(F(out_n)), *dpre = gpu_test_host(F(out_n));
    float *dinp = gpu_test_host(F(in_n)), *dw = gpu_test_host(F(w_n)), *db = gpu_test_host(F(n_out));
    float *got = gpu_test_host(F(in_n > w_n ? in_n : w_n) + F(out_n));
    gpu_test_fill(inp, in_n, -1.0f, 1.0f);
    gpu_test_fill(w, w_n, -0.1f, 0.1f);
    gpu_test_fill(b, n_out, -0.5f, 0.5f);
    gpu_test_fill(dout, out_n, -1.0f, 1.0f);
    dense_forward(out, inp, w, b, &d, B);
    dense_backward(dinp, dw, db, dpre, out, dout, inp, w, &d, B);
    float *d_inp = gpu_test_upload(inp, F(in_n)), *d_w = gpu_test_upload(w, F(w_n)), *d_b = gpu_test_upload(b, F(n_out));
    float *d_g = gpu_test_upload(dout, F(out_n)), *d_saved = gpu_test_upload(out, F(out_n));
    float *d_out = gpu_test_dev(F(out_n)), *d_dinp = gpu_test_dev(F(in_n)), *d_dw = gpu_test_dev(F(w_n));
    float *d_db = gpu_test_dev(F(n_out));
    int fails = 0;
    dense_forward_cuda(d_out, d_inp, d_w, d_b, &d, B, x->cublas, x->stream);
    gpu_test_download(got, d_out, F(out_n));
    fails += gpu_test_check_scaled("forward out", got, out, out_n, rel);
    /* dpre aliases dout, as model_cuda.cu calls it */
    dense_backward_cuda(d_dinp, d_dw, d_db, d_g, d_saved, d_g, d_inp, d_w, &d, B, x->cublas, x->stream);
    gpu_test_download(got, d_dinp, F(in_n));
    fails += gpu_test_check_scaled("backward dinp", got, dinp, in_n, rel);
    gpu_test_download(got, d_dw, F(w_n));
    fails += gpu_test_check_scaled("backward dweight", got, dw, w_n, rel);
    gpu_test_download(got, d_db, F(n_out));
    fails += gpu_test_check_scaled("backward dbias", got, db, n_out, rel);
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b); cudaFree(d_g); cudaFree(d_saved); cudaFree(d_out); cudaFree(d_dinp);
    cudaFree(d_dw); cudaFree(d_db);
    free(inp); free(w); free(b); free(out); free(dout); free(dpre); free(dinp); free(dw); free(db); free(got);
    return fails;
}

/* ---- bias, relu, bias gradient ---- */

static int test_activations(const Ctx *x, size_t n_rows, int C) {
    printf("bias add, relu, bias gradient on (%zu, %d)\n", n_rows, C);
    const size_t n = n_rows * C;
    float *a = gpu_test_host(F(n)), *bias = gpu_test_host(F(C)), *ref = gpu_test_host(F(n)), *got = gpu_test_host(F(n));
    float *db = gpu_test_host(F(C)), *db0 = gpu_test_host(F(C)), *g = gpu_test_host(F(n));
    gpu_test_fill(a, n, -1.0f, 1.0f);
    gpu_test_fill(bias, C, -0.5f, 0.5f);
    gpu_test_fill(g, n, -1.0f, 1.0f);
    gpu_test_fill(db0, C, -1.0f, 1.0f);
    float *d_a = gpu_test_upload(a, F(n)), *d_bias = gpu_test_upload(bias, F(C)), *d_g = gpu_test_upload(g, F(n));
    float *d_out = gpu_test_dev(F(n)), *d_db = gpu_test_upload(db0, F(C));
    float *d_partials = gpu_test_dev(F(bias_grad_cuda_partials_n_floats(C)));
    int fails = 0;

    bias_add_forward(ref, a, bias, n_rows, C);
    bias_add_forward_cuda(d_out, d_a, d_bias, n_rows, C, x->stream);
    gpu_test_download(got, d_out, F(n));
    fails += gpu_test_check("bias_add forward (exact)", got, ref, n, 0.0, 0.0, 0);

    memcpy(db, db0, F(C));
    bias_add_backward(db, g, n_rows, C);
    bias_add_backward_cuda(d_db, d_g, n_rows, C, x->stream);
    gpu_test_download(got, d_db, F(C));
    fails += gpu_test_check("bias_add backward, adds (exact)", got, db, C, 0.0, 0.0, 0);

    memset(db, 0, F(C));
    bias_add_backward(db, g, n_rows, C);
    bias_grad_cuda(d_db, d_partials, d_g, n_rows, C, x->stream);
    gpu_test_download(got, d_db, F(C));
    fails += gpu_test_check_scaled("bias gradient in chunks, overwrites", got, db, C, 1e-4);

    relu_forward(ref, a, n);
    relu_forward_cuda(d_out, d_a, n, x->stream);
    gpu_test_download(got, d_out, F(n));
    fails += gpu_test_check("relu forward (exact)", got, ref, n, 0.0, 0.0, 0);

    float *relu_out = gpu_test_host(F(n));
    memcpy(relu_out, ref, F(n));
    relu_backward(ref, relu_out, g, n);
    float *d_dinp = gpu_test_dev(F(n));
    relu_backward_cuda(d_dinp, d_out, d_g, n, x->stream); /* d_out holds relu's output */
    gpu_test_download(got, d_dinp, F(n));
    cudaFree(d_dinp);
    fails += gpu_test_check("relu backward (exact)", got, ref, n, 0.0, 0.0, 0);

    bias_add_forward(ref, a, bias, n_rows, C);
    relu_forward(ref, ref, n);
    CUDA_CHECK(cudaMemcpy(d_out, a, F(n), cudaMemcpyHostToDevice));
    bias_act_forward_cuda(d_out, d_bias, n_rows, C, ACT_RELU, x->stream);
    gpu_test_download(got, d_out, F(n));
    fails += gpu_test_check("fused bias + relu (exact)", got, ref, n, 0.0, 0.0, 0);

    cudaFree(d_a); cudaFree(d_bias); cudaFree(d_g); cudaFree(d_out); cudaFree(d_db); cudaFree(d_partials);
    free(a); free(bias); free(ref); free(got); free(db); free(db0); free(g); free(relu_out);
    return fails;
}

/* ---- loss ---- */

static int test_softmax(const Ctx *x, int B, int K, int bad_label) {
    printf("softmax cross-entropy, batch %d, %d classes%s\n", B, K, bad_label ? ", one label out of range" : "");
    const size_t n = (size_t)B * K;
    float *logits = gpu_test_host(F(n)), *probs = gpu_test_host(F(n)), *dl = gpu_test_host(F(n)), *got = gpu_test_host(F(n));
    int32_t *labels = gpu_test_host(B * sizeof(int32_t));
    gpu_test_fill(logits, n, -5.0f, 5.0f);
    for (int b = 0; b < B; b++) labels[b] = (int32_t)(gpu_test_next() % (uint64_t)K);
    if (bad_label) labels[B / 2] = K;
    float ce = softmax_xent_forward(probs, logits, labels, B, K);
    softmax_xent_backward(dl, probs, labels, 0.7f, B, K);
    float *d_logits = gpu_test_upload(logits, F(n)), *d_probs = gpu_test_dev(F(n)), *d_ce = gpu_test_dev(F(1));
    float *d_probs_cpu = gpu_test_upload(probs, F(n)), *d_dl = gpu_test_dev(F(n));
    int32_t *d_labels = gpu_test_upload(labels, B * sizeof(int32_t));
    double *d_ex = gpu_test_dev(B * sizeof(double));
    int fails = 0;
    softmax_xent_forward_cuda(d_ce, d_probs, d_ex, d_logits, d_labels, B, K, x->stream);
    float got_ce;
    gpu_test_download(&got_ce, d_ce, F(1));
    fails += gpu_test_check("forward mean cross-entropy", &got_ce, &ce, 1, 0.0, 1e-5, bad_label);
    if (bad_label && !isnan(got_ce)) {
        printf("  a label out of range must give NAN: FAIL\n");
        fails++;
    }
    gpu_test_download(got, d_probs, F(n));
    fails += gpu_test_check("forward probabilities", got, probs, n, 1e-7, 1e-5, 0);
    softmax_xent_backward_cuda(d_dl, d_probs_cpu, d_labels, 0.7f, B, K, x->stream);
    gpu_test_download(got, d_dl, F(n));
    fails += gpu_test_check("backward dlogits, dloss 0.7", got, dl, n, 0.0, 1e-6, 0);
    cudaFree(d_logits); cudaFree(d_probs); cudaFree(d_ce); cudaFree(d_probs_cpu); cudaFree(d_dl); cudaFree(d_labels);
    cudaFree(d_ex);
    free(logits); free(probs); free(dl); free(got); free(labels);
    return fails;
}

static int test_l2(const Ctx *x, size_t n, float wd) {
    printf("L2 weight decay, %zu weights, wd %g\n", n, wd);
    float *w = gpu_test_host(F(n)), *dw = gpu_test_host(F(n)), *got = gpu_test_host(F(n));
    gpu_test_fill(w, n, -0.1f, 0.1f);
    gpu_test_fill(dw, n, -1e-3f, 1e-3f);
    float *d_w = gpu_test_upload(w, F(n)), *d_dw = gpu_test_upload(dw, F(n)), *d_loss = gpu_test_dev(F(1));
    double *d_partials = gpu_test_dev(L2_LOSS_CUDA_BLOCKS * sizeof(double));
    float loss = l2_loss_forward(w, n, wd);
    l2_loss_backward(dw, w, n, wd);
    int fails = 0;
    l2_loss_forward_cuda(d_loss, d_partials, d_w, n, wd, x->stream);
    float got_loss;
    gpu_test_download(&got_loss, d_loss, F(1));
    fails += gpu_test_check("forward wd * sum(w^2) / 2", &got_loss, &loss, 1, 0.0, 1e-6, 0);
    l2_loss_backward_cuda(d_dw, d_w, n, wd, x->stream);
    gpu_test_download(got, d_dw, F(n));
    fails += gpu_test_check("backward dw += wd * w (exact)", got, dw, n, 0.0, 0.0, 0);
    cudaFree(d_w); cudaFree(d_dw); cudaFree(d_loss); cudaFree(d_partials);
    free(w); free(dw); free(got);
    return fails;
}

static int test_transpose(const Ctx *x, int rows, int cols) {
    printf("transpose (%d, %d)\n", rows, cols);
    const size_t n = (size_t)rows * cols;
    float *a = gpu_test_host(F(n)), *ref = gpu_test_host(F(n)), *got = gpu_test_host(F(n));
    gpu_test_fill(a, n, -1.0f, 1.0f);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) ref[(size_t)c * rows + r] = a[(size_t)r * cols + c];
    float *d_a = gpu_test_upload(a, F(n)), *d_t = gpu_test_dev(F(n));
    transpose_cuda(d_t, d_a, rows, cols, x->stream);
    gpu_test_download(got, d_t, F(n));
    int fails = gpu_test_check("transposed (exact)", got, ref, n, 0.0, 0.0, 0);
    cudaFree(d_a); cudaFree(d_t);
    free(a); free(ref); free(got);
    return fails;
}

int main(void) {
    gpu_test_require_gpu();
    gpu_test_seed();
    Ctx x;
    CUDA_CHECK(cudaStreamCreate(&x.stream));
    CUDNN_CHECK(cudnnCreate(&x.cudnn));
    CUDNN_CHECK(cudnnSetStream(x.cudnn, x.stream));
    CUBLAS_CHECK(cublasCreate(&x.cublas));
    CUBLAS_CHECK(cublasSetStream(x.cublas, x.stream));
    CUBLAS_CHECK(cublasSetMathMode(x.cublas, CUBLAS_DEFAULT_MATH));
    const double rel = 1e-4;
    int fails = 0;

    /* conv1/conv2 of mnist and cifar10, then other strides and paddings */
    fails += test_conv(&x, 28, 28, 1, 5, 32, 1, PAD_SAME, ACT_RELU, 5, 7, 0, rel);
    fails += test_conv(&x, 14, 14, 32, 5, 64, 1, PAD_SAME, ACT_RELU, 5, 7, 0, rel);
    fails += test_conv(&x, 24, 24, 3, 5, 64, 1, PAD_SAME, ACT_RELU, 5, 7, 0, rel);
    fails += test_conv(&x, 12, 12, 64, 5, 64, 1, PAD_SAME, ACT_RELU, 7, 7, 0, rel);
    fails += test_conv(&x, 9, 9, 5, 3, 7, 2, PAD_SAME, ACT_NONE, 3, 3, 0, rel);
    fails += test_conv(&x, 9, 11, 5, 3, 7, 2, PAD_VALID, ACT_RELU, 2, 4, 0, rel);
    fails += test_conv(&x, 12, 12, 64, 5, 64, 1, PAD_SAME, ACT_RELU, 4, 4, 1, 5e-3);
    fails += test_conv_deterministic(&x, 28, 1, 32);
    fails += test_conv_deterministic(&x, 14, 32, 64);
    fails += test_conv_deterministic(&x, 24, 3, 64);
    fails += test_conv_deterministic(&x, 12, 64, 64);
    fails += test_conv_odd_padding(&x, 10, 5, 2);
    fails += test_conv_odd_padding(&x, 8, 4, 1);

    /* pool1/pool2 of mnist (2x2/2) and cifar10 (3x3/2, padding only after), then others */
    fails += test_pool(&x, 28, 28, 32, 2, 2, PAD_SAME, 3, 0);
    fails += test_pool(&x, 14, 14, 64, 2, 2, PAD_SAME, 3, 1);
    fails += test_pool(&x, 24, 24, 64, 3, 2, PAD_SAME, 3, 0);
    fails += test_pool(&x, 12, 12, 64, 3, 2, PAD_SAME, 3, 1);
    fails += test_pool(&x, 13, 11, 3, 3, 2, PAD_SAME, 2, 1);
    fails += test_pool(&x, 9, 9, 3, 3, 2, PAD_VALID, 2, 0);
    fails += test_pool(&x, 10, 10, 5, 5, 3, PAD_SAME, 2, 1);

    /* norm1/norm2 of cifar10 on both paths, then stronger normalisations */
    const float a9 = (float)(0.001 / 9.0);
    fails += test_lrn(&x, 64, 3 * 12 * 12, 4, 1.0f, a9, 0.75f, LRN_CUDA_CUDNN, 1.0f, rel);
    fails += test_lrn(&x, 64, 3 * 12 * 12, 4, 1.0f, a9, 0.75f, LRN_CUDA_KERNEL, 1.0f, rel);
    fails += test_lrn(&x, 16, 500, 3, 1.0f, 0.5f, 0.75f, LRN_CUDA_CUDNN, 2.0f, rel);
    fails += test_lrn(&x, 16, 500, 3, 1.0f, 0.5f, 0.75f, LRN_CUDA_KERNEL, 2.0f, rel);
    fails += test_lrn(&x, 7, 300, 2, 2.0f, 0.1f, 0.6f, LRN_CUDA_AUTO, 2.0f, rel);
    fails += test_lrn(&x, 40, 200, 9, 1.0f, 0.05f, 0.5f, LRN_CUDA_AUTO, 2.0f, rel);
    fails += test_lrn_out_of_range();

    /* local3, local4, softmax_linear of mnist and cifar10 */
    fails += test_dense(&x, 3136, 1024, ACT_RELU, 5, rel);
    fails += test_dense(&x, 1024, 10, ACT_RELU, 5, rel);
    fails += test_dense(&x, 10, 10, ACT_NONE, 5, rel);
    fails += test_dense(&x, 2304, 384, ACT_RELU, 6, rel);
    fails += test_dense(&x, 384, 192, ACT_RELU, 6, rel);
    fails += test_dense(&x, 192, 10, ACT_NONE, 6, rel);

    fails += test_activations(&x, 3, 10);
    fails += test_activations(&x, 5 * 24 * 24, 64);
    fails += test_activations(&x, 128 * 24 * 24, 64);
    fails += test_softmax(&x, 7, 10, 0);
    fails += test_softmax(&x, 128, 10, 1);
    fails += test_l2(&x, 2304 * 384, 0.004f);
    fails += test_l2(&x, 1000, 0.5f);
    fails += test_transpose(&x, 1600, 64);
    fails += test_transpose(&x, 64, 1600);
    fails += test_transpose(&x, 37, 5);

    cublasDestroy(x.cublas);
    cudnnDestroy(x.cudnn);
    cudaStreamDestroy(x.stream);
    printf("%s: %d check(s) failed\n", fails ? "GPU layers FAILED" : "GPU layers match the CPU", fails);
    return fails ? 1 : 0;
}
