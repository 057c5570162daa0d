/* Head-wise adaptive budgets, after Ada-KV (Feng et al., 2024): a layer's
 * budget is H x the per-head budget B, and its kv heads compete for it by
 * score, so a head whose attention is concentrated on a few entries gives
 * slots to a head whose attention is spread out. Each head first keeps its
 * best floor(floor x B) entries (the paper's safeguard alpha: no head is
 * starved); the other slots go to the best remaining entries of the whole
 * layer. The heads then hold different numbers of entries, each head's
 * storage sized to its own (kv_cache_keep): memory is really freed per head,
 * where kvpress's AdaKVPress only masks.
 *
 * The layer's entries are ranked as one list — higher score first, ties:
 * the lower head, then the earlier entry — which restricted to one head is
 * kv_select's own order, so every head keeps a prefix of its ranking. */
#include "kv/policy.h"

#include <math.h>

int kv_adaptive_select(int n_head, const int *n, float *score, int per_head, double floor_share, int *out, int *count,
                       int *scratch) {
    const int safe = (int)floor(floor_share * per_head);
    int total = 0;
    for (int g = 0; g < n_head; g++) {
        /* The safeguard: a head's best entries enter the layer's ranking as always-kept. */
        float *s = score + total;
        const int k = kv_select(n[g], s, safe, scratch);
        for (int i = 0; i < k; i++) s[scratch[i]] = INFINITY;
        total += n[g];
    }
    return kv_heads_select(n_head, n, score, (long)n_head * per_head, out, count);
}

static int adaptive_select(const struct kv_policy *p, int n_head, const int *n, float *score, long total, int *out,
                           int *count, int *scratch) {
    return kv_adaptive_select(n_head, n, score, (int)(total / n_head), p->head_floor, out, count, scratch);
}

static const struct kv_budget_ops adaptive_ops = {
    .rank = KV_RANK_LAYER,
    .select = adaptive_select,
    .ranking = "shares a layer's budget among its kv heads by their scores",
};

const struct kv_rule kv_rule_budget_adaptive = {
    .stage = "budget",
    .name = "adaptive",
    .summary = "the kv heads of a layer share its budget by score (each keeps at least `floor` of an even share); "
               "heads hold different entry counts",
    .paper = "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget Allocation for Efficient LLM Inference (Feng et "
             "al., NeurIPS 2025, arXiv:2407.11550)",
    .keys = "floor",
    .shown = "floor=0.2",
    .defaults = {.alloc = KV_ALLOC_ADAPTIVE, .head_floor = 0.2},
    .budget = &adaptive_ops,
};
