/* test_conv_algo.c — conv_algo_pick (model/conv_algo.h), the rule by which
 * a GPU conv layer takes one of cuDNN's algorithms, on hand-made heuristics
 * lists: no GPU needed, runs in every build.
 *
 * Checked: the best deterministic entry that fits wins over a better
 * non-deterministic one; without --deterministic a non-deterministic entry
 * is taken only when no deterministic one fits; with it, -1 instead;
 * tensor-op entries only with TF32; the workspace cap and unusable entries
 * are honoured; an empty list gives -1; the math type an entry runs with
 * is FMA without TF32 and never ALLOW_CONVERSION (FP16/BF16) with it.
 */
#include <stdio.h>

#include "model/conv_algo.h"

static int failures;

static void expect(const char *what, int got, int want) {
    printf("  %-72s %2d (want %2d)  %s\n", what, got, want, got == want ? "ok" : "FAIL");
    failures += got != want;
}

int main(void) {
    /* {usable, tensor_op, deterministic, ws_n_bytes}, best first, as cuDNN's _v7 heuristics list them. */
    const ConvAlgoCandidate bwd_filter[] = {
        {1, 0, 0, 0},        /* ALGO_0: atomics */
        {1, 0, 0, 1 << 20},  /* ALGO_3: atomics */
        {1, 0, 1, 4 << 20},  /* ALGO_1: deterministic, more workspace */
    };
    expect("deterministic preferred over a better non-deterministic entry", conv_algo_pick(bwd_filter, 3, 0, 0, 64 << 20), 2);
    expect("--deterministic: the deterministic entry", conv_algo_pick(bwd_filter, 3, 0, 1, 64 << 20), 2);
    expect("no deterministic entry fits the cap: the best non-deterministic one", conv_algo_pick(bwd_filter, 3, 0, 0, 2 << 20), 0);
    expect("--deterministic and none fits the cap: refused", conv_algo_pick(bwd_filter, 3, 0, 1, 2 << 20), -1);

    const ConvAlgoCandidate tf32[] = {
        {1, 1, 1, 0},  /* tensor-op (TF32) */
        {0, 0, 1, 0},  /* status not SUCCESS */
        {1, 0, 1, 8},  /* FMA */
    };
    expect("no TF32: the tensor-op entry is skipped", conv_algo_pick(tf32, 3, 0, 1, 64), 2);
    expect("TF32 allowed: the tensor-op entry", conv_algo_pick(tf32, 3, 1, 1, 64), 0);
    expect("no TF32, cap below the FMA entry's workspace: none", conv_algo_pick(tf32, 3, 0, 0, 4), -1);

    const ConvAlgoCandidate nondet_only[] = {{1, 0, 0, 0}, {0, 0, 1, 0}};
    expect("only a non-deterministic entry usable: taken without --deterministic", conv_algo_pick(nondet_only, 2, 0, 0, 0), 0);
    expect("only a non-deterministic entry usable: refused with --deterministic", conv_algo_pick(nondet_only, 2, 0, 1, 0), -1);
    expect("empty list", conv_algo_pick(nondet_only, 0, 1, 0, 1 << 30), -1);
    expect("math without TF32: FMA, whatever cuDNN lists", conv_algo_run_math(CONV_MATH_TENSOR_OP, 0), CONV_MATH_FMA);
    expect("math with TF32: DEFAULT stays DEFAULT", conv_algo_run_math(CONV_MATH_DEFAULT, 1), CONV_MATH_DEFAULT);
    expect("math with TF32: TENSOR_OP stays TENSOR_OP", conv_algo_run_math(CONV_MATH_TENSOR_OP, 1), CONV_MATH_TENSOR_OP);
    expect("math with TF32: ALLOW_CONVERSION (FP16/BF16) refused",
           conv_algo_run_math(CONV_MATH_TENSOR_OP_ALLOW_CONVERSION, 1), -1);
    printf("%s\n", failures ? "conv_algo_pick FAILED" : "conv_algo_pick: every case as expected");
    return failures ? 1 : 0;
}
