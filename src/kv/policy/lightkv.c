/* LightKV (section 3.2 of its paper; docs/METHODS.md §5.6.3): after a chosen layer, each image's
 * vision tokens are merged inside w x w windows of its grid — bipartite
 * matching on the cosine of their hidden states, the top pairs folded
 * together weighted by the attention text paid them (computed by the
 * decoder, docs/METHODS.md §2.3) — so later layers see fewer of them. Small
 * windows first (intra-window), larger later (inter-window). */
#include "kv/reduce.h"

void reduce_lightkv(const float *x, int dim, const struct kvf_tag *tag, const struct reduce_group *g, int w,
                    double ratio, int *into, float *scratch) {
    if (g->n < 8 * w * w) return;
    int *rows = (int *)scratch; /* one window's rows, in order */
    for (int wr = 0; wr < w; wr++) {
        for (int wc = 0; wc < w; wc++) {
            int m = 0;
            for (int i = g->first; i < g->first + g->n; i++)
                if (tag[i].row * w / g->rows == wr && tag[i].col * w / g->cols == wc) rows[m++] = i;
            reduce_bipartite(x, dim, rows, m, ratio, into, scratch + g->n);
        }
    }
}

const struct kv_rule kv_rule_lightkv = {
    "preset", "lightkv", "after layers 12, 18 and 24 each image's tokens merge in 4x4, 2x2, then 1x1 windows of its "
    "grid (bipartite matching on hidden-state cosine, weighted by the attention text pays them), so later layers "
    "see and cache fewer; the default layers are for 32 layers and are scaled to the model's depth "
    "(round(l * layers / 32))",
    "Make Your LVLM KV Cache More Lightweight, LightKV (Chen et al., TMLR 2026, arXiv:2605.00789)",
    "layers windows ratio", "layers=12,18,24,windows=4,2,1,ratio=0.5",
    {.method = KV_LIGHTKV, .budget = 1.0, .reduce = KV_REDUCE_LIGHTKV, .reduce_ratio = 0.5, KV_STAGE_DEFAULTS}, 0, NULL,
};

const struct kv_rule kv_rule_reduce_lightkv = {
    "reduce", "lightkv", "as the lightkv preset",
    "Make Your LVLM KV Cache More Lightweight, LightKV (Chen et al., TMLR 2026, arXiv:2605.00789)",
    "layers windows ratio", "layers=12,18,24,windows=4,2,1,ratio=0.5",
    {.reduce = KV_REDUCE_LIGHTKV, .reduce_ratio = 0.5}, 0, NULL,
};
