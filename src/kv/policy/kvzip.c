/* KVzip (Kim et al., 2025): an entry matters as much as the model needs it
 * to reproduce the context. After the prompt, the session feeds the model
 * "Repeat the previous context exactly." and then the context itself,
 * teacher-forced through the cache in chunks of `chunk` tokens (each pass's
 * own entries removed after it: session.c session_reconstruct); an entry's
 * score is the most attention any query of any pass, in any query head of
 * its kv head, paid it. The question plays no part, so the compressed
 * cache serves whatever is asked next. The first `sinks` entries are
 * always kept; the scores of every head of every layer are ranked together
 * (+budget=global, the paper's non-uniform budgets), so heads and layers
 * that reconstruction hardly reads give their room to those it reads. */
#include "kv/policy.h"

#include <math.h>

void kv_score_kvzip(const struct kv_score_in *in, float *score) {
    for (int j = 0; j < in->h->n; j++) score[j] = j < in->p->sinks ? INFINITY : in->recon[j];
}

const struct kv_rule kv_rule_kvzip = {
    "preset", "kvzip",
    "the most attention an entry gets while the model repeats the context (query-agnostic); heads ranked together",
    "KVzip: Query-Agnostic KV Cache Compression with Context Reconstruction (Kim et al., NeurIPS 2025, "
    "arXiv:2505.23416); kvpress's KVzipPress",
    "budget sinks chunk", "budget=0.2,sinks=4,chunk=2048 +budget=global",
    {.method = KV_KVZIP, .budget = 0.2, .chunk = 2048, KV_STAGE_DEFAULTS, .alloc = KV_ALLOC_GLOBAL}, KV_NEEDS_RECON,
    kv_score_kvzip,
};

const struct kv_rule kv_rule_budget_global = {
    "budget", "global",
    "every kv head of every layer shares the model's budget by score (no floor); heads and layers hold different "
    "entry counts",
    "KVzip (Kim et al., NeurIPS 2025, arXiv:2505.23416), kvpress's KVzipPress with layerwise=False",
    "", "", {.alloc = KV_ALLOC_GLOBAL}, 0, NULL,
};
