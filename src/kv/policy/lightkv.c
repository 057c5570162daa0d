/* LightKV (section 3.2 of its paper; docs/METHODS.md §5.6.3): after a chosen layer, each image's
 * vision tokens are merged inside w x w windows of its grid — bipartite
 * matching on the cosine of their hidden states, the top pairs folded
 * together weighted by the attention text paid them (computed by the
 * decoder, docs/METHODS.md §2.3) — so later layers see fewer of them. Small
 * windows first (intra-window), larger later (inter-window). */
#include "core/vec.h"
#include "kv/reduce.h"

#include <math.h>
#include <string.h>

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

/* The weights (docs/METHODS.md §2.3): the layer's logits before the
 * causal mask, softmax over the query axis, summed over heads and text
 * columns: xi[i] = sum_h sum_{j text} softmax_i(scale q_i.k_j). Text
 * columns go REDUCE_COLS at a time, packed as attention's keys, through the
 * block scores of prompt attention (tile_scores) for each head. */
#define REDUCE_COLS 64
static void lightkv_weights(const struct reduce_view *v, float *xi, float *scratch) {
    const int n = v->n, hd = v->head_dim, QD = v->n_head * hd, KD = v->n_head_kv * hd, group = v->n_head / v->n_head_kv;
    float *kp = scratch, *c = kp + (size_t)REDUCE_COLS * hd; /* key panels, [n][cols] logits */
    int cols[REDUCE_COLS];
    memset(xi, 0, sizeof(float) * (size_t)n);
    for (int j0 = 0; j0 < n;) {
        int nc = 0;
        for (; j0 < n && nc < REDUCE_COLS; j0++)
            if (v->tag[j0].modality == KVF_MOD_TEXT) cols[nc++] = j0;
        for (int h = 0; nc > 0 && h < v->n_head; h++) {
            for (int c_ = 0; c_ < nc; c_++)
                tile_pack(hd, v->k + (size_t)cols[c_] * KD + (size_t)(h / group) * hd, c_, c_ + 1, kp);
            tile_scores(hd, v->q + (size_t)h * hd, QD, n, kp, nc, v->attn_scale, c, nc);
            for (int c_ = 0; c_ < nc; c_++) {
                float mx = -INFINITY;
                for (int i = 0; i < n; i++) mx = fmaxf(mx, c[(size_t)i * nc + c_]);
                double sum = 0.0;
                for (int i = 0; i < n; i++) sum += exp(c[(size_t)i * nc + c_] - mx);
                for (int i = 0; i < n; i++) xi[i] += (float)(exp(c[(size_t)i * nc + c_] - mx) / sum);
            }
        }
    }
}

static float *lightkv_step(const struct reduce_view *v, struct reduce_state *r, int step) {
    lightkv_weights(v, r->w, r->scratch);
    for (int g = 0; g < r->n_groups; g++)
        reduce_lightkv(v->x, v->dim, v->tag, &r->groups[g], r->window[step], r->ratio, r->into, r->scratch);
    return r->w;
}

static const char *lightkv_check(const struct kv_policy *p) {
    return (p->n_stages ? p->n_stages : 3) != (p->n_windows ? p->n_windows : 3)
               ? "lightkv needs one window size per layer (layers=12,18,24,windows=4,2,1)" : NULL;
}

const struct kv_reduce_ops kv_reduce_ops_lightkv = {.step = lightkv_step, .check = lightkv_check};

const struct kv_rule kv_rule_lightkv = {
    .stage = "preset",
    .name = "lightkv",
    .summary = "after layers 12, 18 and 24 each image's tokens merge in 4x4, 2x2, then 1x1 windows of its grid "
               "(bipartite matching on hidden-state cosine, weighted by the attention text pays them), so later "
               "layers see and cache fewer; the default layers are for 32 layers and are scaled to the model's depth "
               "(round(l * layers / 32))",
    .paper = "Make Your LVLM KV Cache More Lightweight, LightKV (Chen et al., TMLR 2026, arXiv:2605.00789)",
    .keys = "layers windows ratio",
    .shown = "layers=12,18,24,windows=4,2,1,ratio=0.5",
    .defaults = {.method = KV_LIGHTKV, .budget = 1.0, .reduce = KV_REDUCE_LIGHTKV, .reduce_ratio = 0.5,
                 KV_STAGE_DEFAULTS},
};

const struct kv_rule kv_rule_reduce_lightkv = {
    .stage = "reduce",
    .name = "lightkv",
    .summary = "as the lightkv preset",
    .paper = "Make Your LVLM KV Cache More Lightweight, LightKV (Chen et al., TMLR 2026, arXiv:2605.00789)",
    .keys = "layers windows ratio",
    .shown = "layers=12,18,24,windows=4,2,1,ratio=0.5",
    .defaults = {.reduce = KV_REDUCE_LIGHTKV, .reduce_ratio = 0.5},
    .needs = KV_NEEDS_QUESTION,
};
