/* Pool stage: SnapKV (Li et al., 2024) smooths its window attention with a
 * 1-D average pool before choosing, so that a run of related tokens (a
 * number spelled digit by digit, a name in several pieces) is kept together
 * rather than in fragments. `+pool=avg:width=K` applies the same smoothing
 * to any rule's scores (docs/METHODS.md §5.8): a test of whether the rules
 * that score single entries (H2O, CSP, LOOK-M) keep such runs when pooled. */
#include "kv/policy.h"

#include <math.h>
#include <string.h>

void kv_pool_scores(float *score, int n, int width, float *tmp) {
    const int half = width / 2;
    for (int j = 0; j < n; j++) tmp[j] = isfinite(score[j]) ? score[j] : 0.0f;
    for (int j = 0; j < n; j++) {
        if (!isfinite(score[j])) continue;
        double s = 0.0;
        for (int t = j - half; t <= j + half; t++)
            if (t >= 0 && t < n) s += tmp[t];
        score[j] = (float)(s / width);
    }
}

static void pool_avg(const struct kv_policy *p, float *score, int n, float *tmp) {
    kv_pool_scores(score, n, p->width, tmp);
}

const struct kv_rule kv_rule_pool_avg = {
    .stage = "pool",
    .name = "avg",
    .summary = "each finite score averaged over `width` neighbouring entries (zero padding), as SnapKV pools",
    .paper = "SnapKV's pooling, for any rule: SnapKV: LLM Knows What You are Looking for Before Generation (Li et "
             "al., NeurIPS 2024, arXiv:2404.14469)",
    .keys = "width",
    .shown = "width=5",
    .defaults = {.pool = KV_POOL_AVG, .width = 5},
    .smooth = pool_avg,
};
