/* LOOK-M (Wan et al., 2024, section 3.2; docs/METHODS.md §4.10): during the prompt the model
 * attends to text far more than to image patches, so with the text prior
 * every text entry is kept, the most recent `recent` share of the budget is
 * kept, and image entries compete for what is left by the attention they
 * received over the whole prompt (H2O's score). Without the prior every
 * entry outside the recent window competes (plain H2O selection). The
 * released code keeps all text even past the budget; so does this rule, and
 * the cache reports the real count. Evicted entries are then merged
 * (src/kv/policy/merge.c). */
#include "kv/policy.h"

#include <math.h>

void kv_score_lookm(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, recent = (int)floor(in->keep * in->p->recent + 0.5);
    for (int j = 0; j < n; j++) {
        const bool text = in->p->text_prior && in->h->tag[j].modality == KVF_MOD_TEXT;
        score[j] = text || j >= n - recent ? INFINITY : in->h->acc[(size_t)j * KV_ACC_N + KV_ACC_SUM];
    }
}

const struct kv_rule kv_rule_lookm = {
    "preset", "lookm", "text kept, recent kept, image entries by attention received; evicted entries merged into "
    "the most similar kept key (merge=none|avg|pivotal|weighted)",
    "LOOK-M (Wan et al., 2024)", "budget recent important merge text_prior",
    "budget=0.2,recent=0.5,merge=pivotal,text_prior=1",
    {.method = KV_LOOKM, .budget = 0.2, .recent = 0.5, .merge = KV_MERGE_PIVOTAL, .text_prior = true,
     KV_STAGE_DEFAULTS},
    KV_NEEDS_ACC, kv_score_lookm,
};
