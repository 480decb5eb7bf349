/* test_gpu_layers.c — every CUDA layer (model/layers_cuda.h), forward and
 * backward, against the CPU reference (model/layers.h) on fresh random
 * inputs, for the geometries of both models, the MobileNetV2 layers (batch
 * norm with its sync split, depthwise, pointwise, zero padding, ReLU6, add,
 * global average pooling, dropout) and a few others; conv2d also with odd
 * SAME padding (the zero-padded copy), with measured algorithms
 * (TOWER_CUDNN_FIND=1), 1x1 as cuBLAS GEMMs (strided: the sampled
 * input) and on cuDNN, the filter gradient as im2col + GEMM (in several
 * chunks) and as cuDNN's, the input gradient as a forward convolution
 * with the flipped filter (TOWER_CONV_DGRAD_FORWARD=1; VGG16's 224x224
 * layers get a deterministic one under --deterministic); depthwise also
 * as cuDNN's grouped convolution.
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

#include "base/flags.h"
#include "model/conv_algo.h"
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
    if (conv2d_cuda_init(&c, &g, max_batch, allow_tf32, 0, 1, x->cudnn, err, sizeof err) ||
        conv2d_cuda_set_batch(&c, B, x->cudnn, err, sizeof err)) {
        printf("  %s: FAIL\n", err);
        return 1;
    }
    /* A 1x1 kernel has no padding: cuBLAS GEMMs, unless TOWER_CONV1X1_CUDNN=1 keeps cuDNN. */
    const int want_gemm = K == 1 && !flags_env_on("TOWER_CONV1X1_CUDNN");
    if (c.gemm_1x1 != want_gemm) {
        printf("  gemm_1x1 is %d, want %d: FAIL\n", c.gemm_1x1, want_gemm);
        conv2d_cuda_free(&c);
        return 1;
    }
    if (K == 1) printf("  1x1 on %s\n", c.gemm_1x1 ? "cuBLAS GEMMs" : "cuDNN (TOWER_CONV1X1_CUDNN=1)");
    /* TOWER_CONV_DGRAD_FORWARD=1: the input gradient runs as a forward convolution wherever it applies. */
    int pad_h, pad_w;
    const int dgrad_applies = !c.gemm_1x1 && conv_dgrad_as_forward(g.H, g.OH, g.KH, g.stride_h, g.pad_top, &pad_h) &&
                              conv_dgrad_as_forward(g.W, g.OW, g.KW, g.stride_w, g.pad_left, &pad_w);
    if (flags_env_on("TOWER_CONV_DGRAD_FORWARD") && c.dgrad_fwd != dgrad_applies) {
        printf("  TOWER_CONV_DGRAD_FORWARD=1: dgrad_fwd is %d, want %d: FAIL\n", c.dgrad_fwd, dgrad_applies);
        conv2d_cuda_free(&c);
        return 1;
    }
    if (c.dgrad_fwd) printf("  input gradient: a forward convolution with the flipped filter, padding %d x %d\n", pad_h,
                            pad_w);
    if (c.wgrad_gemm) printf("  filter gradient: im2col + cuBLAS GEMM, %d image(s) a chunk, %d chunk(s)\n", c.col_batch,
                             (B + c.col_batch - 1) / c.col_batch);
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
    conv2d_forward_cuda(d_out, d_scratch, d_inp, d_w, d_b, &c, B, x->cudnn, x->cublas, x->stream);
    gpu_test_download(got, d_out, F(out_n));
    fails += gpu_test_check_scaled("forward out", got, out, out_n, rel);
    conv2d_backward_cuda(d_dinp, d_dw, d_db, d_scratch, d_saved, d_dout, d_inp, d_w, &c, B, x->cudnn, x->cublas,
                         x->stream);
    gpu_test_download(got, d_dinp, F(in_n));
    fails += gpu_test_check_scaled("backward dinp", got, dinp, in_n, rel);
    gpu_test_download(got, d_dw, F(w_n));
    fails += gpu_test_check_scaled("backward dweight (HWIO)", got, dw, w_n, rel);
    gpu_test_download(got, d_db, F(C_out));
    fails += gpu_test_check_scaled("backward dbias", got, db, C_out, rel);
    /* dinp and dbias may be NULL (the first layer): dweight must not change. */
    CUDA_CHECK(cudaMemset(d_dw, 0xff, F(w_n)));
    conv2d_backward_cuda(NULL, d_dw, NULL, d_scratch, d_saved, d_dout, d_inp, d_w, &c, B, x->cudnn, x->cublas,
                         x->stream);
    gpu_test_download(got, d_dw, F(w_n));
    fails += gpu_test_check_scaled("backward dweight, dinp = dbias = NULL", got, dw, w_n, rel);

    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b); cudaFree(d_dout); cudaFree(d_saved); cudaFree(d_out);
    cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_db); cudaFree(d_scratch);
    free(inp); free(w); free(b); free(dout); free(out); free(dinp); free(dw); free(db); free(scratch); free(got);
    conv2d_cuda_free(&c);
    return fails;
}

/* The models' conv shapes at batch 128 with deterministic_only (--deterministic),
 * and resnet50's 1x1 convolutions at 224x224 (on cuDNN they had no
 * deterministic input-gradient algorithm within the workspace cap): init succeeds, and every recorded algorithm is one cuDNN calls
 * deterministic, in FMA math (no TF32); the description names all three. */
static int test_conv_deterministic(const Ctx *x, int H, int C_in, int C_out, int K, int stride) {
    Conv2d g;
    if (conv2d_init(&g, H, H, C_in, K, K, C_out, stride, stride, PAD_SAME, ACT_RELU)) {
        printf("conv2d_init rejected %dx%dx%d: FAIL\n", H, H, C_in);
        return 1;
    }
    Conv2dCuda c;
    char err[512] = "", desc[1024] = "";
    if (conv2d_cuda_init(&c, &g, 128, 0, 1, 1, x->cudnn, err, sizeof err)) {
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

/* resnet50's conv1_conv (7x7 stride 2 on the 230x230x3 padded image, 64
 * filters) at batch 128 under --deterministic: cuDNN has no deterministic
 * backward-data algorithm for it within the cap, and as the network's first
 * layer it needs none: with input_grad 0 init succeeds, every recorded
 * direction is deterministic, the description says backward data is not
 * wanted; forward and the filter gradient then match the CPU (test_conv's
 * dinp = NULL call is the same path on a small shape). */
static int test_conv_first_layer(const Ctx *x) {
    Conv2d g;
    if (conv2d_init(&g, 230, 230, 3, 7, 7, 64, 2, 2, PAD_VALID, ACT_NONE)) {
        printf("conv2d_init rejected resnet50's conv1: FAIL\n");
        return 1;
    }
    Conv2dCuda c;
    char err[512] = "", desc[1024] = "";
    if (conv2d_cuda_init(&c, &g, 128, 0, 1, 0, x->cudnn, err, sizeof err)) {
        printf("resnet50 conv1 230x230x3 7x7/2 -> 64, batch 128, deterministic only, no input gradient: %s: FAIL\n",
               err);
        return 1;
    }
    conv2d_cuda_describe_algos(&c, desc, sizeof desc);
    int ok = 1;
    for (int d = 0; d < 3; d++) ok &= c.algo_deterministic[d];
    ok &= strstr(desc, "input gradient not wanted") != NULL && !strstr(desc, "NOT deterministic");
    printf("resnet50 conv1, batch 128, deterministic only, no input gradient: %s: %s\n", desc, ok ? "ok" : "FAIL");
    conv2d_cuda_free(&c);
    return ok ? 0 : 1;
}

/* TOWER_CUDNN_FIND=1: the algorithms come from cuDNN's measurements; every
 * direction records a time, the rule still holds (deterministic only:
 * every algorithm deterministic, FMA math), the description says
 * "measured"; without the variable nothing is measured. */
static int test_conv_find(const Ctx *x, int H, int C_in, int C_out, int stride) {
    Conv2d g;
    if (conv2d_init(&g, H, H, C_in, 3, 3, C_out, stride, stride, PAD_SAME, ACT_RELU)) {
        printf("conv2d_init rejected %dx%dx%d: FAIL\n", H, H, C_in);
        return 1;
    }
    Conv2dCuda c;
    char err[512] = "", desc[1024] = "";
    setenv("TOWER_CUDNN_FIND", "1", 1);
    int rc = conv2d_cuda_init(&c, &g, 32, 0, 1, 1, x->cudnn, err, sizeof err);
    unsetenv("TOWER_CUDNN_FIND");
    if (rc) {
        printf("conv2d %dx%dx%d -> %d stride %d, TOWER_CUDNN_FIND=1: %s: FAIL\n", H, H, C_in, C_out, stride, err);
        return 1;
    }
    conv2d_cuda_describe_algos(&c, desc, sizeof desc);
    int ok = c.measured == 1;
    for (int d = 0; d < 3; d++) /* the filter gradient's GEMM (wgrad_gemm) is not cuDNN's to measure */
        ok &= (d == 2 && c.wgrad_gemm ? c.algo_ms[d] < 0.0f : c.algo_ms[d] >= 0.0f) && c.algo_deterministic[d] &&
              c.algo_math[d] == CUDNN_FMA_MATH;
    ok &= strstr(desc, "measured") != NULL && !strstr(desc, "NOT deterministic");
    printf("conv2d %dx%dx%d -> %d stride %d, batch 32, TOWER_CUDNN_FIND=1, deterministic only: %s: %s\n", H, H, C_in,
           C_out, stride, desc, ok ? "ok" : "FAIL");
    conv2d_cuda_free(&c);
    /* and without it: heuristics, nothing measured */
    if (conv2d_cuda_init(&c, &g, 32, 0, 1, 1, x->cudnn, err, sizeof err)) {
        printf("  without TOWER_CUDNN_FIND: %s: FAIL\n", err);
        return 1;
    }
    conv2d_cuda_describe_algos(&c, desc, sizeof desc);
    const int ok2 = c.measured == 0 && !strstr(desc, "measured");
    printf("  without TOWER_CUDNN_FIND: nothing measured: %s\n", ok2 ? "ok" : "FAIL");
    conv2d_cuda_free(&c);
    return ok && ok2 ? 0 : 1;
}

/* TOWER_CUDNN_WORKSPACE_MIB: at 1 MiB the chosen algorithms' workspace stays within it; 0, a word and 65537
 * are refused with one line naming the variable. */
static int test_conv_workspace_cap(const Ctx *x) {
    Conv2d g;
    if (conv2d_init(&g, 32, 32, 16, 3, 3, 32, 1, 1, PAD_SAME, ACT_RELU)) {
        printf("conv2d_init rejected 32x32x16: FAIL\n");
        return 1;
    }
    Conv2dCuda c;
    char err[512] = "";
    int fails = 0;
    setenv("TOWER_CUDNN_WORKSPACE_MIB", "1", 1);
    if (conv2d_cuda_init(&c, &g, 64, 0, 0, 1, x->cudnn, err, sizeof err)) {
        printf("TOWER_CUDNN_WORKSPACE_MIB=1: %s: FAIL\n", err);
        fails++;
    } else {
        const int ok = c.workspace_n_bytes <= ((size_t)1 << 20);
        printf("TOWER_CUDNN_WORKSPACE_MIB=1: workspace %zu B: %s\n", c.workspace_n_bytes, ok ? "ok" : "FAIL");
        fails += !ok;
        conv2d_cuda_free(&c);
    }
    static const char *const bad[] = {"0", "lots", "65537"};
    for (int k = 0; k < 3; k++) {
        setenv("TOWER_CUDNN_WORKSPACE_MIB", bad[k], 1);
        err[0] = '\0';
        const int rc = conv2d_cuda_init(&c, &g, 64, 0, 0, 1, x->cudnn, err, sizeof err);
        const int ok = rc != 0 && strstr(err, "TOWER_CUDNN_WORKSPACE_MIB") != NULL;
        printf("TOWER_CUDNN_WORKSPACE_MIB=%s: refused (%s): %s\n", bad[k], err, ok ? "ok" : "FAIL");
        fails += !ok;
        if (rc == 0) conv2d_cuda_free(&c);
    }
    unsetenv("TOWER_CUDNN_WORKSPACE_MIB");
    return fails;
}

/* A geometry whose unrolled input exceeds one im2col chunk at batch B: the
 * filter gradient sums several chunks (checked), then test_conv compares
 * everything with the CPU. */
static int test_conv_chunked(const Ctx *x, int H, int C_in, int K, int C_out, int B, double rel) {
    Conv2d g;
    Conv2dCuda c;
    char err[512] = "";
    if (conv2d_init(&g, H, H, C_in, K, K, C_out, 1, 1, PAD_SAME, ACT_RELU) ||
        conv2d_cuda_init(&c, &g, B, 0, 0, 1, x->cudnn, err, sizeof err)) {
        printf("conv2d %dx%dx%d k%d: %s: FAIL\n", H, H, C_in, K, err);
        return 1;
    }
    const int ok = c.wgrad_gemm && c.col_batch < B;
    printf("conv2d %dx%dx%d k%d batch %d: filter gradient in chunks of %d images: %s\n", H, H, C_in, K, B, c.col_batch,
           ok ? "ok" : "FAIL (want several chunks)");
    conv2d_cuda_free(&c);
    return (ok ? 0 : 1) + test_conv(x, H, H, C_in, K, C_out, 1, PAD_SAME, ACT_RELU, B, B, 0, rel);
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
    dense_backward(dinp, dw, db, dpre, out, dout, inp, w, &d, B, 0);
    float *d_inp = gpu_test_upload(inp, F(in_n)), *d_w = gpu_test_upload(w, F(w_n)), *d_b = gpu_test_upload(b, F(n_out));
    float *d_g = gpu_test_upload(dout, F(out_n)), *d_saved = gpu_test_upload(out, F(out_n));
    float *d_out = gpu_test_dev(F(out_n)), *d_dinp = gpu_test_dev(F(in_n)), *d_dw = gpu_test_dev(F(w_n));
    float *d_db = gpu_test_dev(F(n_out));
    int fails = 0;
    dense_forward_cuda(d_out, d_inp, d_w, d_b, &d, B, x->cublas, x->stream);
    gpu_test_download(got, d_out, F(out_n));
    fails += gpu_test_check_scaled("forward out", got, out, out_n, rel);
    /* dpre aliases dout, as model_cuda.cu calls it */
    dense_backward_cuda(d_dinp, d_dw, d_db, d_g, d_saved, d_g, d_inp, d_w, &d, B, 0, x->cublas, x->stream);
    gpu_test_download(got, d_dinp, F(in_n));
    fails += gpu_test_check_scaled("backward dinp", got, dinp, in_n, rel);
    gpu_test_download(got, d_dw, F(w_n));
    fails += gpu_test_check_scaled("backward dweight", got, dw, w_n, rel);
    gpu_test_download(got, d_db, F(n_out));
    fails += gpu_test_check_scaled("backward dbias", got, db, n_out, rel);
    /* dw_add, as the CUDA executor calls it: added onto random values (d_g now holds the pre-activation gradient,
     * which the relu's mask leaves as it is) */
    float *dw0 = gpu_test_host(F(w_n)), *db0 = gpu_test_host(F(n_out));
    gpu_test_fill(dw0, w_n, -1.0f, 1.0f);
    gpu_test_fill(db0, n_out, -1.0f, 1.0f);
    CUDA_CHECK(cudaMemcpy(d_dw, dw0, F(w_n), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_db, db0, F(n_out), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < w_n; i++) dw0[i] += dw[i];
    for (int j = 0; j < n_out; j++) db0[j] += db[j];
    dense_backward_cuda(NULL, d_dw, d_db, d_g, d_saved, d_g, d_inp, d_w, &d, B, 1, x->cublas, x->stream);
    gpu_test_download(got, d_dw, F(w_n));
    fails += gpu_test_check_scaled("backward dweight added", got, dw0, w_n, rel);
    gpu_test_download(got, d_db, F(n_out));
    fails += gpu_test_check_scaled("backward dbias added", got, db0, n_out, rel);
    free(dw0); free(db0);
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

/* ---- the MobileNetV2 layers ---- */

/* Fill a device buffer of n floats with `start` (parameter gradients are ADDED). */
static float *dev_filled(size_t n, float start) {
    float *h = gpu_test_host(F(n));
    for (size_t i = 0; i < n; i++) h[i] = start;
    float *d = gpu_test_upload(h, F(n));
    free(h);
    return d;
}

static int test_batchnorm(const Ctx *x, size_t rows, int C, float offset, double rel) {
    printf("batchnorm %zu rows x %d channels, inputs around %.1f\n", rows, C, offset);
    const BatchNorm bn = {C, 0.99, 1e-3f, ACT_NONE};
    const size_t n = rows * (size_t)C;
    float *inp = gpu_test_host(F(n)), *dout = gpu_test_host(F(n)), *gamma = gpu_test_host(F(C)), *beta = gpu_test_host(F(C));
    float *out = gpu_test_host(F(n)), *dinp = gpu_test_host(F(n)), *got = gpu_test_host(F(n));
    float *mean = gpu_test_host(F(C)), *var = gpu_test_host(F(C)), *inv_std = gpu_test_host(F(C));
    float *dgamma = gpu_test_host(F(C)), *dbeta = gpu_test_host(F(C)), *mm = gpu_test_host(F(C)), *mv = gpu_test_host(F(C));
    double *sums = gpu_test_host(batchnorm_scratch_n_doubles(C) * sizeof(double));
    gpu_test_fill(inp, n, offset - 1.0f, offset + 1.0f);
    gpu_test_fill(dout, n, -1.0f, 1.0f);
    gpu_test_fill(gamma, C, 0.5f, 1.5f);
    gpu_test_fill(beta, C, -0.5f, 0.5f);
    gpu_test_fill(mm, C, -0.5f, 0.5f);
    gpu_test_fill(mv, C, 0.5f, 2.0f);
    float *d_inp = gpu_test_upload(inp, F(n)), *d_dout = gpu_test_upload(dout, F(n));
    float *d_gamma = gpu_test_upload(gamma, F(C)), *d_beta = gpu_test_upload(beta, F(C));
    float *d_mm = gpu_test_upload(mm, F(C)), *d_mv = gpu_test_upload(mv, F(C));
    float *d_out = gpu_test_dev(F(n)), *d_dinp = gpu_test_dev(F(n));
    float *d_mean = gpu_test_dev(F(C)), *d_var = gpu_test_dev(F(C)), *d_inv_std = gpu_test_dev(F(C));
    float *d_dgamma = dev_filled(C, 0.25f), *d_dbeta = dev_filled(C, -0.5f);
    double *d_scratch = gpu_test_dev(batchnorm_cuda_scratch_n_doubles(C) * sizeof(double));
    double *d_sums = d_scratch, *d_partials = d_scratch + 2 * C; /* for the split calls */
    int fails = 0;

    /* Training forward and backward. */
    for (int c = 0; c < C; c++) { dgamma[c] = 0.25f; dbeta[c] = -0.5f; }
    batchnorm_forward_train(out, mean, var, inv_std, sums, inp, gamma, beta, &bn, rows);
    batchnorm_backward(dinp, dgamma, dbeta, sums, dout, inp, mean, inv_std, gamma, &bn, rows);
    batchnorm_forward_train_cuda(d_out, d_mean, d_var, d_inv_std, d_scratch, d_inp, d_gamma, d_beta, &bn, rows,
                                 x->stream);
    gpu_test_download(got, d_out, F(n));
    fails += gpu_test_check_scaled("train forward out", got, out, n, rel);
    gpu_test_download(got, d_mean, F(C));
    fails += gpu_test_check("train forward mean", got, mean, C, 1e-6, 1e-6, 0);
    gpu_test_download(got, d_var, F(C));
    fails += gpu_test_check("train forward var (biased)", got, var, C, 1e-6, 1e-5, 0);
    gpu_test_download(got, d_inv_std, F(C));
    fails += gpu_test_check("train forward inv_std", got, inv_std, C, 1e-6, 1e-5, 0);
    /* Backward from the CPU's saved statistics (upload them: same xhat on both sides). */
    CUDA_CHECK(cudaMemcpy(d_mean, mean, F(C), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_inv_std, inv_std, F(C), cudaMemcpyHostToDevice));
    batchnorm_backward_cuda(d_dinp, d_dgamma, d_dbeta, d_scratch, d_dout, d_inp, d_mean, d_inv_std, d_gamma, &bn, rows,
                            x->stream);
    gpu_test_download(got, d_dinp, F(n));
    fails += gpu_test_check_scaled("backward dinp", got, dinp, n, rel);
    gpu_test_download(got, d_dgamma, F(C));
    fails += gpu_test_check_scaled("backward dgamma (added to 0.25)", got, dgamma, C, rel);
    gpu_test_download(got, d_dbeta, F(C));
    fails += gpu_test_check_scaled("backward dbeta (added to -0.5)", got, dbeta, C, rel);

    /* Moving update, then evaluation with the moving statistics. */
    CUDA_CHECK(cudaMemcpy(d_var, var, F(C), cudaMemcpyHostToDevice));
    batchnorm_update_moving(mm, mv, mean, var, 0.999, C);
    batchnorm_update_moving_cuda(d_mm, d_mv, d_mean, d_var, 0.999, C, x->stream);
    gpu_test_download(got, d_mm, F(C));
    fails += gpu_test_check("moving mean update", got, mm, C, 1e-7, 1e-6, 0);
    gpu_test_download(got, d_mv, F(C));
    fails += gpu_test_check("moving variance update", got, mv, C, 1e-7, 1e-6, 0);
    batchnorm_forward_eval(out, inv_std, inp, mm, mv, gamma, beta, &bn, rows);
    CUDA_CHECK(cudaMemcpy(d_mm, mm, F(C), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_mv, mv, F(C), cudaMemcpyHostToDevice));
    batchnorm_forward_eval_cuda(d_out, d_inv_std, d_inp, d_mm, d_mv, d_gamma, d_beta, &bn, rows, x->stream);
    gpu_test_download(got, d_out, F(n));
    fails += gpu_test_check_scaled("eval forward out", got, out, n, rel);

    /* Sync split: two towers' sums (rows split unevenly) added on the host,
     * moments over the global count, each tower normalised: one tower's result. */
    const size_t rows_a = rows / 3, n_a = rows_a * C;
    double *s_a = gpu_test_host(2 * C * sizeof(double)), *s_b = gpu_test_host(2 * C * sizeof(double));
    batchnorm_forward_train(out, mean, var, inv_std, sums, inp, gamma, beta, &bn, rows);
    batchnorm_sums_cuda(d_sums, d_partials, d_inp, rows_a, C, x->stream);
    gpu_test_download(s_a, d_sums, 2 * C * sizeof(double));
    batchnorm_sums_cuda(d_sums, d_partials, d_inp + n_a, rows - rows_a, C, x->stream);
    gpu_test_download(s_b, d_sums, 2 * C * sizeof(double));
    for (int i = 0; i < 2 * C; i++) s_a[i] += s_b[i];
    CUDA_CHECK(cudaMemcpy(d_sums, s_a, 2 * C * sizeof(double), cudaMemcpyHostToDevice));
    batchnorm_moments_cuda(d_mean, d_var, d_sums, (double)rows, C, x->stream);
    batchnorm_normalize_cuda(d_out, d_inv_std, d_inp, d_mean, d_var, d_gamma, d_beta, bn.epsilon, rows_a, C, x->stream);
    batchnorm_normalize_cuda(d_out + n_a, d_inv_std, d_inp + n_a, d_mean, d_var, d_gamma, d_beta, bn.epsilon,
                             rows - rows_a, C, x->stream);
    gpu_test_download(got, d_out, F(n));
    fails += gpu_test_check_scaled("sync split (2 towers) forward out", got, out, n, rel);
    /* Backward split: each tower's (dy, dy * xhat) sums, added on the host,
     * then each tower's input gradient from the global sums; the parameter
     * gradients from the added sums equal one tower's. */
    for (int c = 0; c < C; c++) dgamma[c] = dbeta[c] = 0.0f;
    batchnorm_backward(dinp, dgamma, dbeta, sums, dout, inp, mean, inv_std, gamma, &bn, rows);
    CUDA_CHECK(cudaMemcpy(d_mean, mean, F(C), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_inv_std, inv_std, F(C), cudaMemcpyHostToDevice));
    batchnorm_backward_sums_cuda(d_sums, d_partials, d_dout, d_inp, d_mean, d_inv_std, rows_a, C, x->stream);
    gpu_test_download(s_a, d_sums, 2 * C * sizeof(double));
    batchnorm_backward_sums_cuda(d_sums, d_partials, d_dout + n_a, d_inp + n_a, d_mean, d_inv_std, rows - rows_a, C,
                                 x->stream);
    gpu_test_download(s_b, d_sums, 2 * C * sizeof(double));
    for (int i = 0; i < 2 * C; i++) s_a[i] += s_b[i];
    CUDA_CHECK(cudaMemcpy(d_sums, s_a, 2 * C * sizeof(double), cudaMemcpyHostToDevice));
    batchnorm_backward_input_cuda(d_dinp, d_dout, d_inp, d_mean, d_inv_std, d_gamma, d_sums, (double)rows, rows_a, C,
                                  x->stream);
    batchnorm_backward_input_cuda(d_dinp + n_a, d_dout + n_a, d_inp + n_a, d_mean, d_inv_std, d_gamma, d_sums,
                                  (double)rows, rows - rows_a, C, x->stream);
    gpu_test_download(got, d_dinp, F(n));
    fails += gpu_test_check_scaled("sync split (2 towers) backward dinp", got, dinp, n, rel);
    CUDA_CHECK(cudaMemset(d_dgamma, 0, F(C)));
    CUDA_CHECK(cudaMemset(d_dbeta, 0, F(C)));
    batchnorm_param_grads_cuda(d_dgamma, d_dbeta, d_sums, C, x->stream);
    gpu_test_download(got, d_dgamma, F(C));
    fails += gpu_test_check_scaled("sync split (2 towers) dgamma", got, dgamma, C, rel);
    gpu_test_download(got, d_dbeta, F(C));
    fails += gpu_test_check_scaled("sync split (2 towers) dbeta", got, dbeta, C, rel);

    cudaFree(d_inp); cudaFree(d_dout); cudaFree(d_gamma); cudaFree(d_beta); cudaFree(d_mm); cudaFree(d_mv);
    cudaFree(d_out); cudaFree(d_dinp); cudaFree(d_mean); cudaFree(d_var); cudaFree(d_inv_std); cudaFree(d_dgamma);
    cudaFree(d_dbeta); cudaFree(d_scratch);
    free(inp); free(dout); free(gamma); free(beta); free(out); free(dinp); free(got); free(mean); free(var);
    free(inv_std); free(dgamma); free(dbeta); free(mm); free(mv); free(sums); free(s_a); free(s_b);
    return fails;
}

/* The small-map kernels (batchnorm_act_*_fused_cuda) against the split ones
 * on the same random inputs, bit for bit: forward (out after act, mean,
 * var, inv_std), then backward (dinp, dgamma and dbeta added onto
 * non-zero values) with act's backward in place first on the split side;
 * and once more without dinp (dgamma, dbeta only).  The split kernels are
 * checked against the CPU by test_batchnorm. */
static int test_batchnorm_fused(const Ctx *x, size_t rows, int C, Activation act) {
    static const char *const act_name[] = {"none", "relu", "relu6"};
    printf("batchnorm fused, %zu rows x %d channels, activation %s\n", rows, C,
           act == ACT_RELU6 ? act_name[2] : act == ACT_RELU ? act_name[1] : act_name[0]);
    const BatchNorm bn = {C, 0.99, 1e-3f, act};
    const size_t n = rows * (size_t)C;
    float *h = gpu_test_host(F(n)), *a = gpu_test_host(F(n)), *b = gpu_test_host(F(n));
    gpu_test_fill(h, n, -4.0f, 8.0f);
    float *d_inp = gpu_test_upload(h, F(n));
    gpu_test_fill(h, n, -1.0f, 1.0f);
    float *d_dout = gpu_test_upload(h, F(n));
    /* The output is beta + gamma x with x normalised (uniform inputs: |x| up to about 1.73), whatever the inputs'
     * range: for relu6, gamma in [1.5, 2.5] and beta in [3.5, 5] put it in about [-0.8, 9.3], across both of
     * relu6's edges (checked below); else about [-3.1, 3.1], across relu's. */
    gpu_test_fill(h, C, act == ACT_RELU6 ? 1.5f : 0.5f, act == ACT_RELU6 ? 2.5f : 1.5f);
    float *d_gamma = gpu_test_upload(h, F(C));
    gpu_test_fill(h, C, act == ACT_RELU6 ? 3.5f : -0.5f, act == ACT_RELU6 ? 5.0f : 0.5f);
    float *d_beta = gpu_test_upload(h, F(C));
    float *d_out[2], *d_stats[2], *d_dinp[2], *d_dg[2], *d_db[2], *d_dout2[2];
    for (int k = 0; k < 2; k++) {
        d_out[k] = gpu_test_dev(F(n));
        d_stats[k] = gpu_test_dev(F(3 * (size_t)C)); /* mean, var, inv_std */
        d_dinp[k] = gpu_test_dev(F(n));
        d_dg[k] = dev_filled(C, 0.25f);
        d_db[k] = dev_filled(C, -0.5f);
        d_dout2[k] = gpu_test_dev(F(n));
        CUDA_CHECK(cudaMemcpy(d_dout2[k], d_dout, F(n), cudaMemcpyDeviceToDevice));
    }
    double *d_scratch = gpu_test_dev(batchnorm_cuda_scratch_n_doubles(C) * sizeof(double));
    const BatchNorm plain = {C, 0.99, 1e-3f, ACT_NONE};
    /* split: forward, then the activation in place; backward: the activation's backward in place on dout, then
     * batch norm's */
    batchnorm_forward_train_cuda(d_out[0], d_stats[0], d_stats[0] + C, d_stats[0] + 2 * C, d_scratch, d_inp, d_gamma,
                                 d_beta, &plain, rows, x->stream);
    if (act == ACT_RELU) relu_forward_cuda(d_out[0], d_out[0], n, x->stream);
    if (act == ACT_RELU6) relu6_forward_cuda(d_out[0], d_out[0], n, x->stream);
    if (act == ACT_RELU) relu_backward_cuda(d_dout2[0], d_out[0], d_dout2[0], n, x->stream);
    if (act == ACT_RELU6) relu6_backward_cuda(d_dout2[0], d_out[0], d_dout2[0], n, x->stream);
    batchnorm_backward_cuda(d_dinp[0], d_dg[0], d_db[0], d_scratch, d_dout2[0], d_inp, d_stats[0], d_stats[0] + 2 * C,
                            d_gamma, &plain, rows, x->stream);
    /* fused */
    batchnorm_act_forward_train_fused_cuda(d_out[1], d_stats[1], d_stats[1] + C, d_stats[1] + 2 * C, d_inp, d_gamma,
                                           d_beta, &bn, act, rows, x->stream);
    batchnorm_act_backward_fused_cuda(d_dinp[1], d_dg[1], d_db[1], d_dout2[1], act == ACT_NONE ? NULL : d_out[1],
                                      d_inp, d_stats[1], d_stats[1] + 2 * C, d_gamma, &bn, act, rows, x->stream);
    int fails = 0;
    const struct { const char *what; float *const *d; size_t n; } cmp[] = {
        {"forward out", d_out, n}, {"mean, var, inv_std", d_stats, 3 * (size_t)C}, {"dinp", d_dinp, n},
        {"dgamma (added to 0.25)", d_dg, (size_t)C}, {"dbeta (added to -0.5)", d_db, (size_t)C}};
    for (size_t k = 0; k < sizeof cmp / sizeof cmp[0]; k++) {
        gpu_test_download(a, cmp[k].d[0], F(cmp[k].n));
        gpu_test_download(b, cmp[k].d[1], F(cmp[k].n));
        const int same = memcmp(a, b, F(cmp[k].n)) == 0;
        printf("  %-28s %s\n", cmp[k].what, same ? "bitwise equal to the split kernels: ok" : "DIFFER: FAIL");
        fails += !same;
    }
    /* the activation's edges reached: outputs clamped at 0 (relu, relu6) and at 6 (relu6) */
    if (act != ACT_NONE) {
        gpu_test_download(a, d_out[0], F(n));
        size_t at0 = 0, at6 = 0;
        for (size_t i = 0; i < n; i++) {
            at0 += a[i] == 0.0f;
            at6 += a[i] == 6.0f;
        }
        const int edges = at0 > 0 && (act != ACT_RELU6 || at6 > 0);
        printf("  %-28s %zu at 0, %zu at 6: %s\n", "activation's edges", at0, at6, edges ? "ok" : "not reached: FAIL");
        fails += !edges;
    }
    /* dout unchanged by the fused backward; without dinp, dgamma and dbeta again (added a second time) */
    gpu_test_download(a, d_dout, F(n));
    gpu_test_download(b, d_dout2[1], F(n));
    const int kept = memcmp(a, b, F(n)) == 0;
    printf("  %-28s %s\n", "dout", kept ? "not modified: ok" : "modified: FAIL");
    fails += !kept;
    batchnorm_backward_cuda(NULL, d_dg[0], d_db[0], d_scratch, d_dout2[0], d_inp, d_stats[0], d_stats[0] + 2 * C,
                            d_gamma, &plain, rows, x->stream);
    batchnorm_act_backward_fused_cuda(NULL, d_dg[1], d_db[1], d_dout2[1], d_out[1], d_inp, d_stats[1],
                                      d_stats[1] + 2 * C, d_gamma, &bn, act, rows, x->stream);
    gpu_test_download(a, d_dg[0], F(C));
    gpu_test_download(b, d_dg[1], F(C));
    int same = memcmp(a, b, F(C)) == 0;
    gpu_test_download(a, d_db[0], F(C));
    gpu_test_download(b, d_db[1], F(C));
    same &= memcmp(a, b, F(C)) == 0;
    printf("  %-28s %s\n", "dinp NULL: dgamma, dbeta", same ? "bitwise equal: ok" : "DIFFER: FAIL");
    fails += !same;
    for (int k = 0; k < 2; k++) {
        cudaFree(d_out[k]); cudaFree(d_stats[k]); cudaFree(d_dinp[k]); cudaFree(d_dg[k]); cudaFree(d_db[k]);
        cudaFree(d_dout2[k]);
    }
    cudaFree(d_inp); cudaFree(d_dout); cudaFree(d_gamma); cudaFree(d_beta); cudaFree(d_scratch);
    free(h); free(a); free(b);
    return fails;
}

/* A depthwise case and the CPU layer's results on fresh random inputs:
 * forward out, dinp, and dweight added onto dw0 in every entry. */
typedef struct {
    Depthwise d;
    int B;
    size_t in_n, out_n, w_n;
    float *inp, *w, *dout;   /* (B, H, W, C), (3, 3, C), (B, OH, OW, C) */
    float *out, *dinp, *dw;  /* the CPU's */
    float *got;              /* a download buffer, (max(in_n, out_n)) */
} DwCase;

static int dw_case_make(DwCase *k, int B, int H, int W, int C, int stride, Padding pad, float dw0, const char *what) {
    memset(k, 0, sizeof *k);
    if (depthwise_init(&k->d, H, W, C, 3, 3, stride, pad)) {
        printf("depthwise_init rejected %dx%dx%d s%d: FAIL\n", H, W, C, stride);
        return -1;
    }
    printf("depthwise 3x3%s %dx%dx%d, stride %d, %s -> %dx%d, batch %d\n", what, H, W, C, stride,
           pad == PAD_SAME ? "SAME" : "VALID", k->d.OH, k->d.OW, B);
    k->B = B;
    k->in_n = (size_t)B * H * W * C, k->out_n = (size_t)B * k->d.OH * k->d.OW * C, k->w_n = (size_t)9 * C;
    k->inp = gpu_test_host(F(k->in_n)), k->w = gpu_test_host(F(k->w_n)), k->dout = gpu_test_host(F(k->out_n));
    k->out = gpu_test_host(F(k->out_n)), k->dinp = gpu_test_host(F(k->in_n)), k->dw = gpu_test_host(F(k->w_n));
    k->got = gpu_test_host(F(k->in_n > k->out_n ? k->in_n : k->out_n));
    float *scratch = gpu_test_host(F(depthwise_scratch_n_floats(&k->d, 1)));
    gpu_test_fill(k->inp, k->in_n, -1.0f, 1.0f);
    gpu_test_fill(k->w, k->w_n, -1.0f, 1.0f);
    gpu_test_fill(k->dout, k->out_n, -1.0f, 1.0f);
    for (size_t i = 0; i < k->w_n; i++) k->dw[i] = dw0;
    depthwise_forward(k->out, k->inp, k->w, &k->d, B);
    depthwise_backward(k->dinp, k->dw, scratch, k->dout, k->inp, k->w, &k->d, B, 1);
    free(scratch);
    return 0;
}

static void dw_case_free(DwCase *k) {
    free(k->inp), free(k->w), free(k->dout), free(k->out), free(k->dinp), free(k->dw), free(k->got);
}

static int test_depthwise(const Ctx *x, int B, int H, int W, int C, int stride, Padding pad, double rel) {
    DwCase k;
    if (dw_case_make(&k, B, H, W, C, stride, pad, 0.5f, "")) return 1;
    const Depthwise *d = &k.d;
    float *d_inp = gpu_test_upload(k.inp, F(k.in_n)), *d_w = gpu_test_upload(k.w, F(k.w_n));
    float *d_dout = gpu_test_upload(k.dout, F(k.out_n)), *d_out = gpu_test_dev(F(k.out_n));
    float *d_dinp = gpu_test_dev(F(k.in_n)), *d_dw = dev_filled(k.w_n, 0.5f);
    void *d_scratch = gpu_test_dev(depthwise_cuda_scratch_n_bytes(d, B));
    int fails = 0;
    depthwise_forward_cuda(d_out, d_inp, d_w, d, B, x->stream);
    gpu_test_download(k.got, d_out, F(k.out_n));
    fails += gpu_test_check_scaled("forward out", k.got, k.out, k.out_n, rel);
    depthwise_backward_cuda(d_dinp, d_dw, d_scratch, d_dout, d_inp, d_w, d, B, x->stream);
    gpu_test_download(k.got, d_dinp, F(k.in_n));
    fails += gpu_test_check_scaled("backward dinp", k.got, k.dinp, k.in_n, rel);
    gpu_test_download(k.got, d_dw, F(k.w_n));
    fails += gpu_test_check_scaled("backward dweight (added to 0.5)", k.got, k.dw, k.w_n, rel);
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_dout); cudaFree(d_out); cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_scratch);
    dw_case_free(&k);
    return fails;
}

/* The same depthwise convolution as cuDNN's grouped convolution
 * (conv2d_cuda_init_depthwise, TOWER_DEPTHWISE_CUDNN=1's path): forward,
 * dinp and dweight (written) against the CPU layer; the description says
 * "grouped". */
static int test_depthwise_cudnn(const Ctx *x, int B, int H, int W, int C, int stride, Padding pad, double rel) {
    DwCase k;
    if (dw_case_make(&k, B, H, W, C, stride, pad, 0.0f, " as cuDNN's grouped convolution")) return 1;
    Conv2dCuda c;
    char err[512], desc[1024];
    if (conv2d_cuda_init_depthwise(&c, &k.d, B, 0, 0, 1, x->cudnn, err, sizeof err)) {
        printf("  %s: FAIL\n", err);
        dw_case_free(&k);
        return 1;
    }
    conv2d_cuda_describe_algos(&c, desc, sizeof desc);
    float *d_inp = gpu_test_upload(k.inp, F(k.in_n)), *d_w = gpu_test_upload(k.w, F(k.w_n));
    float *d_dout = gpu_test_upload(k.dout, F(k.out_n)), *d_out = gpu_test_dev(F(k.out_n));
    float *d_dinp = gpu_test_dev(F(k.in_n)), *d_dw = gpu_test_dev(F(k.w_n));
    void *d_scratch = gpu_test_dev(conv2d_cuda_scratch_n_bytes(&c));
    int fails = !strstr(desc, "grouped");
    printf("  %s: %s\n", desc, fails ? "FAIL (not described as grouped)" : "ok");
    conv2d_forward_cuda(d_out, d_scratch, d_inp, d_w, NULL, &c, B, x->cudnn, x->cublas, x->stream);
    gpu_test_download(k.got, d_out, F(k.out_n));
    fails += gpu_test_check_scaled("forward out", k.got, k.out, k.out_n, rel);
    conv2d_backward_cuda(d_dinp, d_dw, NULL, d_scratch, d_out, d_dout, d_inp, d_w, &c, B, x->cudnn, x->cublas,
                         x->stream);
    gpu_test_download(k.got, d_dinp, F(k.in_n));
    fails += gpu_test_check_scaled("backward dinp", k.got, k.dinp, k.in_n, rel);
    gpu_test_download(k.got, d_dw, F(k.w_n));
    fails += gpu_test_check_scaled("backward dweight (written)", k.got, k.dw, k.w_n, rel);
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_dout); cudaFree(d_out); cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_scratch);
    conv2d_cuda_free(&c);
    dw_case_free(&k);
    return fails;
}

static int test_pointwise(const Ctx *x, size_t rows, int Ci, int Co, double rel) {
    printf("pointwise 1x1 %zu rows, %d -> %d channels\n", rows, Ci, Co);
    const size_t in_n = rows * Ci, out_n = rows * Co, w_n = (size_t)Ci * Co;
    float *inp = gpu_test_host(F(in_n)), *w = gpu_test_host(F(w_n)), *dout = gpu_test_host(F(out_n));
    float *out = gpu_test_host(F(out_n)), *dinp = gpu_test_host(F(in_n)), *dw = gpu_test_host(F(w_n));
    float *got = gpu_test_host(F(in_n > out_n ? (in_n > w_n ? in_n : w_n) : (out_n > w_n ? out_n : w_n)));
    gpu_test_fill(inp, in_n, -1.0f, 1.0f);
    gpu_test_fill(w, w_n, -0.3f, 0.3f);
    gpu_test_fill(dout, out_n, -1.0f, 1.0f);
    for (size_t i = 0; i < w_n; i++) dw[i] = -0.25f;
    pointwise_forward(out, inp, w, rows, Ci, Co);
    pointwise_backward(dinp, dw, dout, inp, w, rows, Ci, Co);
    float *d_inp = gpu_test_upload(inp, F(in_n)), *d_w = gpu_test_upload(w, F(w_n)), *d_dout = gpu_test_upload(dout, F(out_n));
    float *d_out = gpu_test_dev(F(out_n)), *d_dinp = gpu_test_dev(F(in_n)), *d_dw = dev_filled(w_n, -0.25f);
    int fails = 0;
    pointwise_forward_cuda(d_out, d_inp, d_w, rows, Ci, Co, x->cublas, x->stream);
    gpu_test_download(got, d_out, F(out_n));
    fails += gpu_test_check_scaled("forward out", got, out, out_n, rel);
    pointwise_backward_cuda(d_dinp, d_dw, d_dout, d_inp, d_w, rows, Ci, Co, x->cublas, x->stream);
    gpu_test_download(got, d_dinp, F(in_n));
    fails += gpu_test_check_scaled("backward dinp", got, dinp, in_n, rel);
    gpu_test_download(got, d_dw, F(w_n));
    fails += gpu_test_check_scaled("backward dweight (added to -0.25)", got, dw, w_n, rel);
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_dout); cudaFree(d_out); cudaFree(d_dinp); cudaFree(d_dw);
    free(inp); free(w); free(dout); free(out); free(dinp); free(dw); free(got);
    return fails;
}

/* Zero padding, ReLU6, ReLU (the RELU node's pair), add, grad_accumulate, global average pooling, dropout. */
static int test_blocks(const Ctx *x, int B, int H, int W, int C) {
    printf("zeropad / relu6 / relu / add / global_avgpool / dropout on %dx%dx%dx%d\n", B, H, W, C);
    ZeroPad z;
    int t, b, l, r;
    keras_correct_pad(&t, &b, &l, &r, H, W, 3);
    if (zeropad_init(&z, H, W, C, t, b, l, r)) {
        printf("zeropad_init rejected %dx%dx%d: FAIL\n", H, W, C);
        return 1;
    }
    const size_t n = (size_t)B * H * W * C, pn = (size_t)B * z.OH * z.OW * C, gn = (size_t)B * C;
    float *a = gpu_test_host(F(n)), *b2 = gpu_test_host(F(n)), *pd = gpu_test_host(F(pn)), *ref = gpu_test_host(F(pn > n ? pn : n));
    float *got = gpu_test_host(F(pn > n ? pn : n)), *g = gpu_test_host(F(gn));
    gpu_test_fill(a, n, -2.0f, 8.0f);
    gpu_test_fill(b2, n, -1.0f, 1.0f);
    gpu_test_fill(pd, pn, -1.0f, 1.0f);
    gpu_test_fill(g, gn, -1.0f, 1.0f);
    float *d_a = gpu_test_upload(a, F(n)), *d_b = gpu_test_upload(b2, F(n)), *d_pd = gpu_test_upload(pd, F(pn));
    float *d_g = gpu_test_upload(g, F(gn)), *d_o = gpu_test_dev(F(pn > n ? pn : n));
    int fails = 0;
    zeropad_forward(ref, a, &z, B);
    zeropad_forward_cuda(d_o, d_a, &z, B, x->stream);
    gpu_test_download(got, d_o, F(pn));
    fails += gpu_test_check("zeropad forward (exact)", got, ref, pn, 0.0, 0.0, 0);
    zeropad_backward(ref, pd, &z, B);
    zeropad_backward_cuda(d_o, d_pd, &z, B, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("zeropad backward (exact)", got, ref, n, 0.0, 0.0, 0);
    relu6_forward(ref, a, n);
    relu6_forward_cuda(d_o, d_a, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("relu6 forward (exact)", got, ref, n, 0.0, 0.0, 0);
    relu6_backward(ref, a, b2, n);
    relu6_backward_cuda(d_o, d_a, d_b, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("relu6 backward (exact)", got, ref, n, 0.0, 0.0, 0);
    relu_layer_forward(ref, a, n); /* the RELU node: relu_layer_* on the CPU, relu_*_cuda on the GPU */
    relu_forward_cuda(d_o, d_a, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("relu node forward (exact)", got, ref, n, 0.0, 0.0, 0);
    relu_layer_backward(ref, a, b2, n);
    relu_backward_cuda(d_o, d_a, d_b, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("relu node backward (exact)", got, ref, n, 0.0, 0.0, 0);
    add_forward(ref, a, b2, n);
    add_forward_cuda(d_o, d_a, d_b, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("add forward (exact)", got, ref, n, 0.0, 0.0, 0);
    add_backward(ref, NULL, b2, n);
    add_backward_cuda(d_o, NULL, d_b, n, x->stream);
    grad_accumulate(ref, a, n);
    grad_accumulate_cuda(d_o, d_a, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("add backward + grad_accumulate (exact)", got, ref, n, 0.0, 0.0, 0);
    /* the Add with a fused ReLU / ReLU6 (ResNet's "*_add" + "*_out"): out, then da and db from out (a's values,
     * -2 to 8, stand for the activated output: both masks' edges are crossed) */
    for (int act = ACT_RELU; act <= ACT_RELU6; act++) {
        const char *an = act == ACT_RELU6 ? "relu6" : "relu";
        char what[64];
        add_act_forward(ref, a, b2, (Activation)act, n);
        add_act_forward_cuda(d_o, d_a, d_b, (Activation)act, n, x->stream);
        gpu_test_download(got, d_o, F(n));
        snprintf(what, sizeof what, "add+%s forward (exact)", an);
        fails += gpu_test_check(what, got, ref, n, 0.0, 0.0, 0);
        float *d_db = gpu_test_dev(F(n)), *ref_db = gpu_test_host(F(n));
        add_act_backward(ref, ref_db, a, b2, (Activation)act, n);
        add_act_backward_cuda(d_o, d_db, d_a, d_b, (Activation)act, n, x->stream);
        gpu_test_download(got, d_o, F(n));
        snprintf(what, sizeof what, "add+%s backward da (exact)", an);
        fails += gpu_test_check(what, got, ref, n, 0.0, 0.0, 0);
        gpu_test_download(got, d_db, F(n));
        snprintf(what, sizeof what, "add+%s backward db (exact)", an);
        fails += gpu_test_check(what, got, ref_db, n, 0.0, 0.0, 0);
        cudaFree(d_db);
        free(ref_db);
    }
    global_avgpool_forward(ref, a, B, H * W, C);
    global_avgpool_forward_cuda(d_o, d_a, B, H * W, C, x->stream);
    gpu_test_download(got, d_o, F(gn));
    fails += gpu_test_check("global_avgpool forward (exact)", got, ref, gn, 0.0, 0.0, 0);
    global_avgpool_backward(ref, g, B, H * W, C);
    global_avgpool_backward_cuda(d_o, d_g, B, H * W, C, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("global_avgpool backward (exact)", got, ref, n, 0.0, 0.0, 0);
    Dropout dr;
    dropout_init(&dr, 0.3f);
    const uint64_t key = dropout_key(gpu_test_next(), 12, 1, 2);
    dropout_forward(ref, a, &dr, key, 1, n);
    dropout_forward_cuda(d_o, d_a, &dr, key, 1, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("dropout forward, the same mask (exact)", got, ref, n, 0.0, 0.0, 0);
    dropout_backward(ref, b2, &dr, key, 1, n);
    dropout_backward_cuda(d_o, d_b, &dr, key, 1, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("dropout backward (exact)", got, ref, n, 0.0, 0.0, 0);
    dropout_forward_cuda(d_o, d_a, &dr, key, 0, n, x->stream);
    gpu_test_download(got, d_o, F(n));
    fails += gpu_test_check("dropout evaluation = identity", got, a, n, 0.0, 0.0, 0);
    cudaFree(d_a); cudaFree(d_b); cudaFree(d_pd); cudaFree(d_g); cudaFree(d_o);
    free(a); free(b2); free(pd); free(ref); free(got); free(g);
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
    fails += test_conv_deterministic(&x, 28, 1, 32, 5, 1);
    fails += test_conv_deterministic(&x, 14, 32, 64, 5, 1);
    fails += test_conv_deterministic(&x, 24, 3, 64, 5, 1);
    fails += test_conv_deterministic(&x, 12, 64, 64, 5, 1);
    fails += test_conv_first_layer(&x);
    fails += test_conv_deterministic(&x, 56, 256, 64, 1, 1);  /* conv2_block2_1_conv */
    fails += test_conv_deterministic(&x, 56, 256, 512, 1, 2); /* conv3_block1_0_conv */
    /* 1x1 convolutions: cuBLAS GEMMs (stride 1; stride 2 on an odd and an even map; TF32), then cuDNN */
    fails += test_conv(&x, 14, 14, 64, 1, 32, 1, PAD_VALID, ACT_RELU, 5, 7, 0, rel);
    fails += test_conv(&x, 15, 15, 24, 1, 40, 2, PAD_VALID, ACT_NONE, 3, 4, 0, rel);
    fails += test_conv(&x, 8, 9, 16, 1, 24, 2, PAD_SAME, ACT_RELU, 4, 4, 0, rel);
    CUBLAS_CHECK(cublasSetMathMode(x.cublas, CUBLAS_TF32_TENSOR_OP_MATH)); /* as model_cuda.cu's with TF32 */
    fails += test_conv(&x, 14, 14, 64, 1, 32, 1, PAD_SAME, ACT_NONE, 4, 4, 1, 5e-3);
    CUBLAS_CHECK(cublasSetMathMode(x.cublas, CUBLAS_DEFAULT_MATH));
    fails += test_conv_chunked(&x, 96, 32, 3, 8, 7, rel);
    /* The input gradient as a forward convolution of dout with the flipped filter (TOWER_CONV_DGRAD_FORWARD=1
     * takes it wherever it applies: stride 1, symmetric padding): SAME 5x5 and 3x3, VALID, a map wider than
     * tall, a kernel as large as the map, TF32; a stride-2 and an odd-padded layer keep cuDNN's backward data. */
    setenv("TOWER_CONV_DGRAD_FORWARD", "1", 1);
    fails += test_conv(&x, 14, 14, 32, 5, 64, 1, PAD_SAME, ACT_RELU, 5, 7, 0, rel);
    fails += test_conv(&x, 12, 12, 40, 3, 24, 1, PAD_SAME, ACT_NONE, 3, 4, 0, rel);
    fails += test_conv(&x, 11, 11, 16, 3, 8, 1, PAD_VALID, ACT_RELU, 4, 4, 0, rel);
    fails += test_conv(&x, 9, 13, 5, 3, 7, 1, PAD_SAME, ACT_RELU, 2, 3, 0, rel);
    fails += test_conv(&x, 5, 5, 8, 5, 4, 1, PAD_VALID, ACT_NONE, 3, 3, 0, rel);
    fails += test_conv(&x, 12, 12, 64, 3, 64, 1, PAD_SAME, ACT_RELU, 4, 4, 1, 5e-3);
    fails += test_conv(&x, 9, 9, 5, 3, 7, 2, PAD_SAME, ACT_NONE, 3, 3, 0, rel);
    fails += test_conv(&x, 8, 8, 3, 4, 8, 1, PAD_SAME, ACT_RELU, 4, 4, 0, rel);
    fails += test_conv(&x, 56, 56, 64, 3, 64, 1, PAD_SAME, ACT_RELU, 4, 4, 0, rel); /* a VGG-sized map, numbers too */
    unsetenv("TOWER_CONV_DGRAD_FORWARD");
    /* VGG16's 3x3 layers at 224x224, batch 128 (cuDNN's only backward data within the cap was the atomic
     * ALGO_0 on 2026-11-27): under --deterministic every direction now has a deterministic algorithm. */
    fails += test_conv_deterministic(&x, 224, 64, 64, 3, 1); /* block1_conv2 */
    fails += test_conv_deterministic(&x, 56, 256, 256, 3, 1); /* block3_conv2 */
    fails += test_conv_deterministic(&x, 28, 512, 512, 3, 1); /* block4_conv2 */
    setenv("TOWER_CONV_WGRAD_CUDNN", "1", 1); /* cuDNN's filter gradient, with odd SAME padding */
    fails += test_conv(&x, 9, 10, 5, 3, 7, 2, PAD_SAME, ACT_RELU, 2, 3, 0, rel);
    fails += test_conv(&x, 14, 14, 32, 5, 64, 1, PAD_SAME, ACT_RELU, 5, 7, 0, rel);
    unsetenv("TOWER_CONV_WGRAD_CUDNN");
    setenv("TOWER_CONV1X1_CUDNN", "1", 1);
    fails += test_conv(&x, 15, 15, 24, 1, 40, 2, PAD_VALID, ACT_RELU, 3, 4, 0, rel);
    unsetenv("TOWER_CONV1X1_CUDNN");
    /* TensorFlow's SAME with an odd total (one more cell after than before):
     * a zero-padded copy of the input on the GPU.  resnet20's and
     * mobilenet_v2's stride-2 3x3 convs on even maps, then odd totals of 3,
     * and a map padded unevenly in one dimension only. */
    fails += test_conv(&x, 32, 32, 16, 3, 32, 2, PAD_SAME, ACT_NONE, 3, 4, 0, rel);
    fails += test_conv(&x, 96, 96, 3, 3, 32, 2, PAD_SAME, ACT_NONE, 2, 2, 0, rel);
    fails += test_conv(&x, 10, 10, 3, 5, 8, 2, PAD_SAME, ACT_RELU, 3, 4, 0, rel);
    fails += test_conv(&x, 8, 8, 3, 4, 8, 1, PAD_SAME, ACT_RELU, 4, 4, 0, rel);
    fails += test_conv(&x, 9, 10, 5, 3, 7, 2, PAD_SAME, ACT_RELU, 2, 3, 0, rel);
    /* Measured algorithms (TOWER_CUDNN_FIND=1): the rule holds, and the numbers match the CPU as before. */
    fails += test_conv_find(&x, 32, 16, 32, 1);
    fails += test_conv_find(&x, 32, 16, 32, 2);
    fails += test_conv_workspace_cap(&x);
    setenv("TOWER_CUDNN_FIND", "1", 1);
    fails += test_conv(&x, 32, 32, 16, 3, 32, 2, PAD_SAME, ACT_RELU, 3, 4, 0, rel);
    fails += test_conv(&x, 14, 14, 32, 5, 64, 1, PAD_SAME, ACT_RELU, 5, 7, 0, rel);
    unsetenv("TOWER_CUDNN_FIND");

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

    /* The MobileNetV2 layers at MobileNetV2-like shapes, then odd ones. */
    fails += test_batchnorm(&x, (size_t)8 * 16 * 16, 32, 0.0f, rel);
    fails += test_batchnorm(&x, (size_t)5 * 4 * 4, 1280, 2.0f, rel);
    fails += test_batchnorm(&x, 37, 19, -1.0f, rel);
    /* The small-map kernels: mobilenet_v2's 1x1, 2x2 and 4x4 maps at batch 128, the largest map they take,
     * an odd one; each activation.  Under TOWER_BN_CUDA_FUSED=1 (ctest's test_gpu_layers_bn_fused) the split
     * entry points take them too: test_batchnorm above then checks them against the CPU, and these cases would
     * compare them with themselves. */
    if (flags_env_on("TOWER_BN_CUDA_FUSED"))
        printf("TOWER_BN_CUDA_FUSED=1: batch norm's small maps ran the fused kernels against the CPU above; "
               "the fused-against-split cases are skipped\n");
    else {
    fails += test_batchnorm_fused(&x, 128, 1280, ACT_RELU6);
    fails += test_batchnorm_fused(&x, 512, 96, ACT_NONE);
    fails += test_batchnorm_fused(&x, 2048, 144, ACT_RELU6);
    fails += test_batchnorm_fused(&x, BN_CUDA_FUSED_MAX_ROWS, 40, ACT_RELU);
    fails += test_batchnorm_fused(&x, 37, 19, ACT_RELU);
    fails += test_batchnorm_fused(&x, 1, 8, ACT_NONE);
    }
    fails += test_depthwise(&x, 8, 16, 16, 32, 1, PAD_SAME, rel);
    fails += test_depthwise(&x, 8, 17, 17, 96, 2, PAD_VALID, rel);
    fails += test_depthwise(&x, 3, 7, 5, 13, 1, PAD_SAME, rel);
    fails += test_depthwise(&x, 3, 9, 8, 5, 2, PAD_VALID, rel);
    /* The same as cuDNN's grouped convolution (TOWER_DEPTHWISE_CUDNN=1), odd SAME padding (32x32 stride 2) included. */
    fails += test_depthwise_cudnn(&x, 8, 16, 16, 32, 1, PAD_SAME, rel);
    fails += test_depthwise_cudnn(&x, 4, 32, 32, 16, 2, PAD_SAME, rel);
    fails += test_depthwise_cudnn(&x, 8, 17, 17, 96, 2, PAD_VALID, rel);
    fails += test_depthwise_cudnn(&x, 3, 7, 5, 13, 1, PAD_SAME, rel);
    fails += test_pointwise(&x, (size_t)8 * 16 * 16, 16, 96, rel);
    fails += test_pointwise(&x, (size_t)8 * 4 * 4, 320, 1280, rel);
    fails += test_pointwise(&x, 37, 7, 5, rel);
    fails += test_blocks(&x, 4, 16, 16, 24);
    fails += test_blocks(&x, 3, 7, 5, 13);

    cublasDestroy(x.cublas);
    cudnnDestroy(x.cudnn);
    cudaStreamDestroy(x.stream);
    printf("%s: %d check(s) failed\n", fails ? "GPU layers FAILED" : "GPU layers match the CPU", fails);
    return fails ? 1 : 0;
}
