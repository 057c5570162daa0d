/* SnapKV (Li et al., 2024): the attention the last `window` prompt queries
 * pay each earlier entry (summed over the window, mean over the query heads
 * of a kv head), smoothed by a 1-D average pool of width `kernel` (stride 1,
 * zero padding, divided by the full width as torch's avg_pool1d does), picks
 * the entries kept besides the window itself, which is always kept. */
#include "kv/policy.h"

#include <math.h>

void kv_score_snapkv(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, w = in->p->window < n ? in->p->window : n, half = in->p->kernel / 2;
    const int body = n - w; /* entries before the window */
    for (int j = 0; j < body; j++) {
        double s = 0.0;
        for (int t = j - half; t <= j + half; t++)
            if (t >= 0 && t < body) s += in->win_attn[t];
        score[j] = (float)(s / in->p->kernel);
    }
    for (int j = body; j < n; j++) score[j] = INFINITY;
}

const struct kv_rule kv_rule_snapkv = {
    .stage = "preset",
    .name = "snapkv",
    .summary = "attention of the last `window` prompt queries, average-pooled; window kept",
    .paper = "SnapKV: LLM Knows What You are Looking for Before Generation (Li et al., NeurIPS 2024, arXiv:2404.14469)",
    .keys = "budget window kernel",
    .shown = "budget=0.2,window=32,kernel=5",
    .defaults = {.method = KV_SNAPKV, .budget = 0.2, .window = 32, .kernel = 5, KV_STAGE_DEFAULTS},
    .needs = KV_NEEDS_WINDOW,
    .score = kv_score_snapkv,
};
