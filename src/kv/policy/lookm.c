/* LOOK-M (Wan et al., 2024, section 3.2; docs/METHODS.md §4.10): during the
 * prompt the model attends to text far more than to image patches, so the
 * text prior keeps text before images: the most recent `recent` share of
 * the budget is kept, then text, and image entries compete for what is left
 * by the attention they received over the whole prompt (H2O's score). The
 * budget is the user's memory limit, so when the text alone does not fit in
 * what is left, text entries compete among themselves by that score and no
 * image entry is kept (text_prior=1). The released code keeps every text
 * entry even past the budget (text_prior=all; the cache then reports the
 * real count). Without the prior (text_prior=0) every entry outside the
 * recent window competes (plain H2O selection). Evicted entries are then
 * merged (src/kv/policy/merge.c). */
#include "kv/policy.h"

#include <math.h>

static void kv_score_lookm(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, recent = KVF_MIN(n, (int)floor(in->keep * in->p->recent + 0.5));
    int text = 0; /* text entries before the recent window */
    for (int j = 0; j < n - recent; j++) text += in->h->tag[j].modality == KVF_MOD_TEXT;
    const bool fits = in->p->text_prior == KV_TEXT_ALL || text <= in->keep - recent;
    for (int j = 0; j < n; j++) {
        const float sum = in->h->acc[(size_t)j * KV_ACC_N + KV_ACC_SUM];
        const bool is_text = in->h->tag[j].modality == KVF_MOD_TEXT;
        if (j >= n - recent) score[j] = INFINITY;
        else if (in->p->text_prior == KV_TEXT_NONE) score[j] = sum;
        else if (is_text) score[j] = fits ? INFINITY : sum; /* text first */
        else score[j] = fits ? sum : -INFINITY;             /* images after it */
    }
}

const struct kv_rule kv_rule_lookm = {
    .stage = "preset",
    .name = "lookm",
    .summary = "recent kept, then text (text_prior=1: within the budget; all: every text entry, past it), then image "
               "entries by attention received; evicted entries merged into the most similar kept key "
               "(merge=none|avg|pivotal|weighted). Summed attention, as h2o: weak at keeping a detail of a long "
               "prompt for a later question",
    .paper = "LOOK-M: Look-Once Optimization in KV Cache for Efficient Multimodal Long-Context Inference (Wan et al., "
             "Findings of EMNLP 2024, arXiv:2406.18139)",
    .keys = "budget recent important merge text_prior",
    .shown = "budget=0.2,recent=0.5,merge=pivotal,text_prior=1",
    .defaults = {.method = KV_LOOKM, .budget = 0.2, .recent = 0.5, .merge = KV_MERGE_PIVOTAL,
                 .text_prior = KV_TEXT_FIRST, KV_STAGE_DEFAULTS},
    .needs = KV_NEEDS_ACC,
    .score = kv_score_lookm,
};
