/* conv_algo.h — which cuDNN convolution algorithm a GPU conv layer takes,
 * as a pure function of cuDNN's heuristics list, so that the rule is tested
 * on machines without a GPU (tests/test_conv_algo.c).
 *
 * Where it sits: model/, plain C (no CUDA headers); conv2d_cuda.cu turns
 * each cudnnConvolution*AlgoPerf_t entry into a ConvAlgoCandidate (asking
 * cuDNN for its workspace with the math type it would run with) and calls
 * conv_algo_pick for each of forward, backward data and backward filter.
 * What it does not do: talk to cuDNN, or know the algorithms' names.
 */
#ifndef TOWER_MODEL_CONV_ALGO_H
#define TOWER_MODEL_CONV_ALGO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cuDNN's math types (cudnnMathType_t), named here so the rule below needs
 * no cuDNN header; conv2d_cuda.cu maps between the two. */
typedef enum {
    CONV_MATH_DEFAULT,                   /* CUDNN_DEFAULT_MATH: float32, TF32 allowed on Ampere+ */
    CONV_MATH_TENSOR_OP,                 /* CUDNN_TENSOR_OP_MATH: tensor cores (TF32 on float32 data) */
    CONV_MATH_TENSOR_OP_ALLOW_CONVERSION,/* CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: may convert to FP16/BF16 */
    CONV_MATH_FMA,                       /* CUDNN_FMA_MATH: float32 FMA only */
} ConvMath;

/* The math type an entry cuDNN lists with `listed` runs with, or -1 when
 * it may not run at all: without TF32 every entry runs CONV_MATH_FMA (the
 * tensor-op ones are refused by conv_algo_pick); with TF32 an entry runs
 * with its own DEFAULT, TENSOR_OP or FMA math, and an ALLOW_CONVERSION
 * entry is refused (it would let cuDNN compute in FP16/BF16). */
int conv_algo_run_math(ConvMath listed, int allow_tf32);

/* One entry of cuDNN's heuristics list (best first). */
typedef struct {
    int usable;            /* cuDNN's status was SUCCESS and its workspace could be asked */
    int tensor_op;         /* its math type uses tensor cores (TF32 on float32 data) */
    int deterministic;     /* cuDNN's determinism field says CUDNN_DETERMINISTIC */
    size_t ws_n_bytes;     /* workspace it needs, with the math type it would run with */
} ConvAlgoCandidate;

/* The index of the entry to use, or -1 when none fits:
 *   - an entry must be usable, need at most cap_n_bytes of workspace, and
 *     not be tensor-op unless allow_tf32;
 *   - the first (best) deterministic entry that fits wins;
 *   - only when none does and !deterministic_only, the first entry that fits
 *     (a non-deterministic one: run-to-run results may then differ in the
 *     last bits, docs/gpu.md);
 *   - with deterministic_only and no deterministic entry that fits: -1. */
int conv_algo_pick(const ConvAlgoCandidate *cand, int n, int allow_tf32, int deterministic_only, size_t cap_n_bytes);

#ifdef __cplusplus
}
#endif

#endif
