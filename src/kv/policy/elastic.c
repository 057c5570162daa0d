/* Elastic Cache (Liu et al., 2024): the importance of an entry is the
 * attention it received over every prompt query, averaged over the layer's
 * heads, so each layer keeps one set of positions for all its kv heads
 * (kv_score_layer, shared with PrefixKV), always with the first `sinks`
 * entries and the last `protect`. Summed attention favours early entries
 * (more queries saw them): with only the last entry protected, as in the
 * authors' code (protect=1), a chat prompt's question and the template's
 * assistant prefix are evicted and the model loses the thread (degenerate
 * text on Qwen2.5-1.5B at 0.2, docs/RESULTS.md), hence protect=32.
 * Evicted entries are merged into the kept entry nearest in position
 * (merge=position, src/kv/policy/merge.c), and while decoding the entry
 * `distance` before the end of the compressed prompt goes
 * (decode=fixed-distance, src/kv/policy/decode.c). */
#include "kv/policy.h"

const struct kv_rule kv_rule_elastic = {
    .stage = "preset",
    .name = "elastic",
    .summary = "attention received (mean over heads), one kept set per layer, the first `sinks` and the last "
               "`protect` entries kept (protect=1: the authors' code); evicted entries merged into the kept entry "
               "nearest in position. Summed attention, as h2o: weak at keeping a detail of a long prompt for a later "
               "question",
    .paper = "Efficient Inference of Vision Instruction-Following Models with Elastic Cache (Liu et al., ECCV 2024, "
             "arXiv:2407.18121)",
    .keys = "budget sinks protect distance",
    .shown = "budget=0.2,sinks=4,protect=32 +decode=fixed-distance:distance=25",
    .defaults = {.method = KV_ELASTIC, .budget = 0.2, .merge = KV_MERGE_POSITION, KV_STAGE_DEFAULTS, .protect = 32,
                 .decode = KV_DECODE_FIXED},
    .needs = KV_NEEDS_ACC | KV_NEEDS_LAYER,
    .score = kv_score_from_layer,
};
