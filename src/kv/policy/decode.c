/* Decode maintenance (docs/METHODS.md §5.5): once the prompt is
 * compressed, each decode step appends one entry per head, and these rules
 * say which entries go when a head holds more than its target (the budget
 * applied to the tokens seen so far). `grow` never evicts and `recompress`
 * reruns the preset's own rule every N steps. Each rule's `due` says when,
 * its `score` what goes (session/compress.c runs them). */
#include "kv/policy.h"

#include <math.h>

/* Elastic Cache / PrefixKV: evict at a fixed index, n0 - distance, so the
 * start of the compressed prompt stays frozen and the entries from there on
 * slide like a window. */
static void score_fixed(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, evict = n - in->keep, at = in->n0 - in->p->distance > 0 ? in->n0 - in->p->distance : 0;
    const int first = at + evict <= n ? at : n - evict;
    for (int j = 0; j < n; j++) score[j] = j >= first && j < first + evict ? 0.0f : INFINITY;
}

/* After every token: a head over its target loses an entry. */
static bool due_always(const struct kv_policy *p, int *steps) {
    (void)p, (void)steps;
    return true;
}

static bool due_every(const struct kv_policy *p, int *steps) { return ++*steps % p->every == 0; }

const struct kv_rule kv_rule_decode_grow = {
    .stage = "decode",
    .name = "grow",
    .summary = "decoded tokens are all kept (the cache grows)",
    .paper = "-",
    .keys = "",
    .shown = "",
    .defaults = {.decode = KV_DECODE_GROW},
};

const struct kv_rule kv_rule_decode_window = {
    .stage = "decode",
    .name = "window",
    .summary = "over budget: evict the oldest entry after the sinks",
    .paper = "Efficient Streaming Language Models with Attention Sinks, StreamingLLM (Xiao et al., ICLR 2024, "
             "arXiv:2309.17453)",
    .keys = "sinks",
    .shown = "sinks=4",
    .defaults = {.decode = KV_DECODE_WINDOW, .sinks = 4},
    .due = due_always,
    .score = kv_score_streaming, /* sinks, then the most recent */
};

const struct kv_rule kv_rule_decode_h2o = {
    .stage = "decode",
    .name = "h2o",
    .summary = "over budget: evict the entry with the least attention so far, outside the recent share",
    .paper = "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models (Zhang et al., "
             "NeurIPS 2023, arXiv:2306.14048)",
    .keys = "recent",
    .shown = "recent=0.5",
    .defaults = {.decode = KV_DECODE_H2O, .recent = 0.5},
    .needs = KV_NEEDS_ACC,
    .due = due_always,
    .score = kv_score_h2o, /* the lightest hitter outside the recent share */
};

const struct kv_rule kv_rule_decode_fixed = {
    .stage = "decode",
    .name = "fixed-distance",
    .summary = "over budget: evict the entry `distance` before the end of the compressed prompt",
    .paper = "Efficient Inference of Vision Instruction-Following Models with Elastic Cache (Liu et al., ECCV "
             "2024, arXiv:2407.18121)",
    .keys = "distance",
    .shown = "distance=25",
    .defaults = {.decode = KV_DECODE_FIXED, .distance = 25},
    .due = due_always,
    .score = score_fixed,
};

const struct kv_rule kv_rule_decode_recompress = {
    .stage = "decode",
    .name = "recompress",
    .summary = "every `every` steps, rerun the preset's rule down to budget",
    .paper = "kvpress's DecodingPress (NVIDIA kvpress, github.com/NVIDIA/kvpress; no paper)",
    .keys = "every",
    .shown = "every=32",
    .defaults = {.decode = KV_DECODE_RECOMPRESS, .every = 32},
    .due = due_every,
};
