/* KeyDiff (Park et al., 2025): keys that differ most from the head's mean
 * direction carry the most distinct information; needs no attention, so it
 * works with any attention kernel. score = -cos(k_j, mean_i k_i/|k_i|). */
#include "kv/policy.h"

#include <math.h>

static void kv_score_keydiff(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, d = in->head_dim;
    double anchor[1024] = {0}; /* head_dim <= 1024 is checked at load */
    float k[1024];
    for (int j = 0; j < n; j++) {
        kv_head_key_row(in->h, d, j, k);
        double nn = 0.0;
        for (int e = 0; e < d; e++) nn += (double)k[e] * k[e];
        const double inv = nn > 0 ? 1.0 / sqrt(nn) : 0.0;
        for (int e = 0; e < d; e++) anchor[e] += k[e] * inv;
    }
    double an = 0.0;
    for (int e = 0; e < d; e++) an += anchor[e] * anchor[e];
    an = sqrt(an);
    for (int j = 0; j < n; j++) {
        kv_head_key_row(in->h, d, j, k);
        double dot = 0.0, nn = 0.0;
        for (int e = 0; e < d; e++) dot += k[e] * anchor[e], nn += (double)k[e] * k[e];
        score[j] = nn > 0 && an > 0 ? (float)(-dot / (sqrt(nn) * an)) : 0.0f;
    }
}

const struct kv_rule kv_rule_keydiff = {
    .stage = "preset",
    .name = "keydiff",
    .summary = "keys least similar (cosine) to the mean normalised key",
    .paper = "KeyDiff: Key Similarity-Based KV Cache Eviction for Long-Context LLM Inference in Resource-Constrained "
             "Environments (Park et al., NeurIPS 2025, arXiv:2504.15364)",
    .keys = "budget",
    .shown = "budget=0.2",
    .defaults = {.method = KV_KEYDIFF, .budget = 0.2, KV_STAGE_DEFAULTS},
    .score = kv_score_keydiff,
};
