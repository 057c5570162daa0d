/* PyramidKV (Cai et al., 2024): lower layers attend broadly and upper layers
 * narrowly, so the budget is spread as a linear pyramid over the layers,
 * with SnapKV's scores choosing the entries. With C the uniform budget and W
 * the window: min = (C-W)/beta, max = 2(C-W) - min, step = (max-min)/(L-1),
 * layer l keeps max - l*step + W (integer division, as the authors' code);
 * a prompt shorter than 2(C-W) gives every layer C. */
#include "kv/policy.h"

int kv_pyramid_keep(const struct kv_policy *p, int n, int keep, int layer, int n_layer) {
    const int w = p->window < keep ? p->window : keep, cw = keep - w;
    if (n_layer < 2 || cw <= 0 || n < 2 * cw) return keep;
    const int lo = cw / p->beta, hi = 2 * cw - lo, step = (hi - lo) / (n_layer - 1);
    const int k = hi - layer * step + w;
    return k < n ? k : n;
}

/* PyramidKV is SnapKV's rule under this allocation. */
const struct kv_rule kv_rule_pyramidkv = {
    .stage = "preset",
    .name = "pyramidkv",
    .summary = "SnapKV scores with more entries in lower layers (a linear pyramid)",
    .paper = "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling (Cai et al., COLM "
             "2025, arXiv:2406.02069)",
    .keys = "budget window kernel beta",
    .shown = "budget=0.2,window=32,kernel=5 +budget=pyramid:beta=20",
    .defaults = {.method = KV_PYRAMIDKV, .budget = 0.2, .window = 32, .kernel = 5, KV_STAGE_DEFAULTS,
                 .alloc = KV_ALLOC_PYRAMID},
    .needs = KV_NEEDS_WINDOW,
    .score = kv_score_snapkv,
};

static const struct kv_budget_ops pyramid_ops = {.rank = KV_RANK_HEAD, .layer_keep = kv_pyramid_keep};

const struct kv_rule kv_rule_budget_pyramid = {
    .stage = "budget",
    .name = "pyramid",
    .summary = "a linear pyramid: lower layers keep more",
    .paper = "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling (Cai et al., COLM "
             "2025, arXiv:2406.02069)",
    .keys = "beta",
    .shown = "beta=20",
    .defaults = {.alloc = KV_ALLOC_PYRAMID, .beta = 20},
    .budget = &pyramid_ops,
};
