/* H2O (Zhang et al., 2023): "heavy hitters" — the entries that received the
 * most attention summed over every query so far (prompt queries, then each
 * decode step's, accumulated next to every entry by the attention kernel) —
 * plus the most recent entries. `recent` is the recent share of the kept
 * entries (the authors' default: heavy 0.1N + recent 0.1N, i.e. 0.5 of budget
 * 0.2; docs/METHODS.md §4.3). The same rule evicts during decoding (decode=h2o). */
#include "kv/policy.h"

#include <math.h>

void kv_score_h2o(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, recent = (int)floor(in->keep * in->p->recent + 0.5);
    for (int j = 0; j < n; j++) score[j] = j >= n - recent ? INFINITY : in->h->acc[(size_t)j * KV_ACC_N + KV_ACC_SUM];
}

const struct kv_rule kv_rule_h2o = {
    .stage = "preset",
    .name = "h2o",
    .summary = "heavy hitters (attention summed over every query so far) + the most recent entries; one eviction per "
               "decode step. Summed attention favours early and haystack entries: weak at keeping a detail of a long "
               "prompt (a number) for a later question, where snapkv or keydiff keep it",
    .paper = "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models (Zhang et al., "
             "NeurIPS 2023, arXiv:2306.14048)",
    .keys = "budget recent",
    .shown = "budget=0.2,recent=0.5 +decode=h2o",
    .defaults = {.method = KV_H2O, .budget = 0.2, .recent = 0.5, KV_STAGE_DEFAULTS, .decode = KV_DECODE_H2O},
    .needs = KV_NEEDS_ACC,
    .score = kv_score_h2o,
};
