/* Threshold eviction (kvpress's ThresholdPress; KVzap, Jegou and Jeblick,
 * NVIDIA 2026, arXiv:2601.07891, uses it with its learned scores): no
 * budget, but a score an entry must reach. Each kv head keeps every entry
 * whose score is at least tau, and its last `last` entries whatever their
 * score (kvpress's sliding window, 128 as there: they have barely been
 * read yet), so how much a head keeps follows what its context holds
 * instead of a share fixed in advance. floor and ceil bound each head's
 * share of its entries (entries its rule always keeps, the sinks and the
 * last ones, stay past ceil). The scale of tau is the scoring rule's:
 * kvzip's scores are attention probabilities in [0, 1], keydiff's minus a
 * cosine in [-1, 1], knorm's minus a key's norm. */
#include "kv/policy.h"

#include <math.h>

int kv_threshold_keep(const struct kv_policy *p, float *score, int n) {
    for (int j = KVF_MAX(0, n - p->last); j < n; j++) score[j] = INFINITY;
    int keep = 0;
    for (int j = 0; j < n; j++) keep += score[j] >= p->tau;
    const int lo = (int)ceil(p->head_floor * n - 1e-9), hi = (int)floor(p->head_ceil * n + 1e-9);
    return KVF_MAX(lo, KVF_MIN(hi, keep));
}

static const char *threshold_check(const struct kv_policy *p) {
    if (kv_policy_given(p, KV_KEY_BUDGET))
        return "budget=threshold keeps what clears tau, so the cache has no budget: leave budget= out (floor= and "
               "ceil= bound each head's share)";
    if (p->head_ceil < p->head_floor) return "budget=threshold's ceil is below its floor";
    if (p->decode != KV_DECODE_GROW && p->decode != KV_DECODE_RECOMPRESS)
        return "budget=threshold has no budget for a decode stage to keep; decode=recompress applies the threshold "
               "again as the cache grows";
    return NULL;
}

static const struct kv_budget_ops threshold_ops = {
    .rank = KV_RANK_HEAD,
    .head_keep = kv_threshold_keep,
    .ranking = "keeps the entries whose score clears tau",
};

const struct kv_rule kv_rule_budget_threshold = {
    .stage = "budget",
    .name = "threshold",
    .summary = "no budget: every kv head keeps the entries whose score is at least tau and its last `last` "
               "(floor and ceil bound each head's share); the share kept follows the context",
    .paper = "kvpress's ThresholdPress (NVIDIA kvpress; KVzap, Jegou and Jeblick, 2026, arXiv:2601.07891)",
    .keys = "tau floor ceil last",
    .shown = "tau=0,floor=0,ceil=1,last=128",
    .defaults = {.alloc = KV_ALLOC_THRESHOLD, .tau = 0, .head_floor = 0, .head_ceil = 1, .last = 128},
    .budget = &threshold_ops,
    .check = threshold_check,
};
