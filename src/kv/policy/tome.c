/* ToMe (Bolya et al., 2023), as a reduce stage inside the decoder (the
 * "ToMe (P)" baseline of the LightKV paper; docs/METHODS.md §5.6.4): each image's tokens alternate into the
 * two sides of a bipartite graph, matched on the cosine of their keys
 * (averaged over heads), and up to half merge per stage; the decoder
 * averages them weighted by how many tokens each already stands for. */
#include "kv/reduce.h"

#include <string.h>

void reduce_tome(const float *metric, int dim, const struct reduce_group *g, double ratio, int *into, float *scratch) {
    int *rows = (int *)scratch;
    for (int i = 0; i < g->n; i++) rows[i] = g->first + i;
    reduce_bipartite(metric, dim, rows, g->n, ratio, into, scratch + g->n);
}

/* The metric: the keys before RoPE, mean over the kv heads. */
static void tome_metric(const struct reduce_view *v, struct reduce_state *r) {
    const int hd = v->head_dim, KD = v->n_head_kv * hd;
    for (int t = 0; t < v->n; t++) {
        float *metric = r->metric + (size_t)t * hd;
        memset(metric, 0, sizeof(float) * (size_t)hd);
        for (int g = 0; g < v->n_head_kv; g++)
            for (int e = 0; e < hd; e++) metric[e] += v->k[(size_t)t * KD + (size_t)g * hd + e] / (float)v->n_head_kv;
    }
}

/* Merges weigh each row by the tokens it already stands for (its size). */
static float *tome_step(const struct reduce_view *v, struct reduce_state *r, int step) {
    (void)step;
    for (int g = 0; g < r->n_groups; g++)
        reduce_tome(r->metric, v->head_dim, &r->groups[g], r->ratio, r->into, r->scratch);
    return r->size;
}

const struct kv_reduce_ops kv_reduce_ops_tome = {.metric = tome_metric, .step = tome_step};

const struct kv_rule kv_rule_tome = {
    .stage = "preset",
    .name = "tome",
    .summary = "after layers 12, 18 and 24 (scaled to the model's depth as lightkv's) up to `ratio` of each image's "
               "tokens merge: bipartite matching on keys averaged over heads, size-weighted means",
    .paper = "Token Merging: Your ViT But Faster, ToMe (Bolya et al., ICLR 2023, arXiv:2210.09461), as LightKV's ToMe "
             "(P) baseline",
    .keys = "layers ratio",
    .shown = "layers=12,18,24,ratio=0.5",
    .defaults = {.method = KV_TOME, .budget = 1.0, .reduce = KV_REDUCE_TOME, .reduce_ratio = 0.5, KV_STAGE_DEFAULTS},
};

const struct kv_rule kv_rule_reduce_tome = {
    .stage = "reduce",
    .name = "tome",
    .summary = "as the tome preset",
    .paper = "Token Merging: Your ViT But Faster, ToMe (Bolya et al., ICLR 2023, arXiv:2210.09461)",
    .keys = "layers ratio",
    .shown = "layers=12,18,24,ratio=0.5",
    .defaults = {.reduce = KV_REDUCE_TOME, .reduce_ratio = 0.5},
};
