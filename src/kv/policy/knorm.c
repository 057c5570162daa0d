/* Key norm (Devoto et al., 2024, as in kvpress): keys of small L2 norm draw
 * the most attention, so the smallest norms are kept. */
#include "kv/policy.h"

#include <math.h>

static void kv_score_knorm(const struct kv_score_in *in, float *score) {
    const int d = in->head_dim;
    float k[1024]; /* head_dim <= 1024 is checked at load */
    for (int j = 0; j < in->h->n; j++) {
        kv_head_key_row(in->h, d, j, k);
        double nn = 0.0;
        for (int e = 0; e < d; e++) nn += (double)k[e] * k[e];
        score[j] = (float)-sqrt(nn);
    }
}

const struct kv_rule kv_rule_knorm = {
    .stage = "preset",
    .name = "knorm",
    .summary = "keys of smallest L2 norm",
    .paper = "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression (Devoto et al., EMNLP 2024, "
             "arXiv:2406.11430); kvpress's KnormPress",
    .keys = "budget",
    .shown = "budget=0.2",
    .defaults = {.method = KV_KNORM, .budget = 0.2, KV_STAGE_DEFAULTS},
    .score = kv_score_knorm,
};
