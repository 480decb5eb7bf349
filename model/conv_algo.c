/* conv_algo.c — conv_algo_pick (conv_algo.h): the rule by which a GPU conv
 * layer takes one of cuDNN's convolution algorithms.  Plain C, built into
 * tower_model in every build so that tests/test_conv_algo.c runs anywhere.
 * What it does not do: talk to cuDNN (conv2d_cuda.cu does).
 */
#include "model/conv_algo.h"

int conv_algo_run_math(ConvMath listed, int allow_tf32) {
    if (!allow_tf32) return CONV_MATH_FMA;
    if (listed == CONV_MATH_DEFAULT || listed == CONV_MATH_TENSOR_OP || listed == CONV_MATH_FMA) return (int)listed;
    return -1;
}

static int fits(const ConvAlgoCandidate *c, int allow_tf32, size_t cap_n_bytes) {
    return c->usable && c->ws_n_bytes <= cap_n_bytes && (allow_tf32 || !c->tensor_op);
}

int conv_algo_pick(const ConvAlgoCandidate *cand, int n, int allow_tf32, int deterministic_only, size_t cap_n_bytes) {
    for (int i = 0; i < n; i++)
        if (cand[i].deterministic && fits(&cand[i], allow_tf32, cap_n_bytes)) return i;
    if (deterministic_only) return -1;
    for (int i = 0; i < n; i++)
        if (fits(&cand[i], allow_tf32, cap_n_bytes)) return i;
    return -1;
}
