/* TOVA (Oren et al., 2024), as kvpress's TOVAPress applies it to a prompt:
 * the attention the prompt's last query pays each earlier entry, averaged
 * over every query head of the layer (not per kv head), so every kv head of
 * a layer takes the same scores and keeps the same entries; the last entry
 * is always kept. The last query is the end of the question when it ends
 * the prompt (question-aware, as SnapKV). */
#include "kv/policy.h"

#include <math.h>

static void kv_score_tova(const struct kv_score_in *in, float *score) {
    const int n = in->h->n;
    for (int j = 0; j + 1 < n; j++) {
        double s = 0.0;
        for (int g = 0; g < in->n_head_kv; g++) s += in->win_layer[(size_t)g * in->win_stride + j];
        score[j] = (float)(s / in->n_head_kv); /* each kv head's value is already its query heads' mean */
    }
    if (n > 0) score[n - 1] = INFINITY;
}

const struct kv_rule kv_rule_tova = {
    .stage = "preset",
    .name = "tova",
    .summary = "attention of the prompt's last query, averaged over every head of the layer; last kept",
    .paper = "Transformers are Multi-State RNNs, TOVA (Oren et al., EMNLP 2024, arXiv:2401.06104); kvpress's TOVAPress",
    .keys = "budget",
    .shown = "budget=0.2",
    .defaults = {.method = KV_TOVA, .budget = 0.2, .window = 1, KV_STAGE_DEFAULTS},
    .needs = KV_NEEDS_WINDOW,
    .score = kv_score_tova,
};
