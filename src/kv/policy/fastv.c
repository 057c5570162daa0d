/* FastV (Chen et al., 2024): after layer K-1 the image tokens the last
 * prompt token attended to least (mean over heads) are dropped, so layers
 * K on neither compute nor cache them. */
#include "kv/policy.h"
#include "kv/reduce.h"

#include <math.h>

void reduce_fastv(const float *score, const struct kvf_tag *tag, int n, double ratio, int *into, float *scratch) {
    float *vs = scratch;         /* [v] the vision rows' scores, in order */
    int *sel = (int *)(scratch + n), v = 0;
    for (int i = 0; i < n; i++)
        if (tag[i].modality != KVF_MOD_TEXT) vs[v++] = score[i];
    /* kv_select keeps the earlier of equal scores, so the later goes first. */
    const int kept = kv_select(v, vs, (int)floor(v * (1.0 - ratio) + 0.5), sel);
    for (int i = 0, k = 0, c = 0; i < n; i++) {
        if (tag[i].modality == KVF_MOD_TEXT) continue;
        if (c < kept && sel[c] == k) c++;
        else into[i] = -1;
        k++;
    }
}

/* Drops only: nothing merges, so no weights. */
static float *fastv_step(const struct reduce_view *v, struct reduce_state *r, int step) {
    (void)step;
    reduce_fastv(v->last_attn, v->tag, v->n - 1, r->ratio, r->into, r->scratch);
    return NULL;
}

const struct kv_reduce_ops kv_reduce_ops_fastv = {.step = fastv_step};

const struct kv_rule kv_rule_fastv = {
    .stage = "preset",
    .name = "fastv",
    .summary = "after layer k - 1 the share r of image tokens the last prompt token attended to least is dropped; "
               "layers k on neither compute nor cache them",
    .paper = "An Image is Worth 1/2 Tokens After Layer 2: Plug-and-Play Inference Acceleration for Large "
             "Vision-Language Models, FastV (Chen et al., ECCV 2024, arXiv:2403.06764)",
    .keys = "k r",
    .shown = "k=2,r=0.5",
    .defaults = {.method = KV_FASTV, .budget = 1.0, .reduce = KV_REDUCE_FASTV, .n_stages = 1, .stage_layer = {2},
                 .reduce_ratio = 0.5, KV_STAGE_DEFAULTS},
};

const struct kv_rule kv_rule_reduce_fastv = {
    .stage = "reduce",
    .name = "fastv",
    .summary = "as the fastv preset",
    .paper = "An Image is Worth 1/2 Tokens After Layer 2: Plug-and-Play Inference Acceleration for Large "
             "Vision-Language Models, FastV (Chen et al., ECCV 2024, arXiv:2403.06764)",
    .keys = "k r",
    .shown = "k=2,r=0.5",
    .defaults = {.reduce = KV_REDUCE_FASTV, .n_stages = 1, .stage_layer = {2}, .reduce_ratio = 0.5},
    .needs = KV_NEEDS_LAST_ROW | KV_NEEDS_QUESTION,
};
