/* ToMe (Bolya et al., 2023), as a reduce stage inside the decoder (the
 * "ToMe (P)" baseline of the LightKV paper; docs/METHODS.md §5.6.4): each image's tokens alternate into the
 * two sides of a bipartite graph, matched on the cosine of their keys
 * (averaged over heads), and up to half merge per stage; the decoder
 * averages them weighted by how many tokens each already stands for. */
#include "kv/reduce.h"

void reduce_tome(const float *metric, int dim, const struct reduce_group *g, double ratio, int *into, float *scratch) {
    int *rows = (int *)scratch;
    for (int i = 0; i < g->n; i++) rows[i] = g->first + i;
    reduce_bipartite(metric, dim, rows, g->n, ratio, into, scratch + g->n);
}

const struct kv_rule kv_rule_tome = {
    "preset", "tome", "after layers 12, 18 and 24 (scaled to the model's depth as lightkv's) up to `ratio` of each "
    "image's tokens merge: bipartite matching on keys averaged over heads, size-weighted means",
    "Token Merging: Your ViT But Faster, ToMe (Bolya et al., ICLR 2023, arXiv:2210.09461), as LightKV's "
    "ToMe (P) baseline",
    "layers ratio", "layers=12,18,24,ratio=0.5",
    {.method = KV_TOME, .budget = 1.0, .reduce = KV_REDUCE_TOME, .reduce_ratio = 0.5, KV_STAGE_DEFAULTS}, 0, NULL,
};

const struct kv_rule kv_rule_reduce_tome = {
    "reduce", "tome", "as the tome preset",
    "Token Merging: Your ViT But Faster, ToMe (Bolya et al., ICLR 2023, arXiv:2210.09461)", "layers ratio",
    "layers=12,18,24,ratio=0.5",
    {.reduce = KV_REDUCE_TOME, .reduce_ratio = 0.5}, 0, NULL,
};
