/* Decode maintenance (docs/METHODS.md §5.5): once the prompt is
 * compressed, each decode step appends one entry per head, and these rules
 * say which entries go when a head holds more than its target (the budget
 * applied to the tokens seen so far). `grow` never evicts and `recompress`
 * reruns the preset's own rule every N steps (src/session.c). */
#include "kv/policy.h"

#include <math.h>

void kv_decode_score(const struct kv_score_in *in, int n0, float *score) {
    const int n = in->h->n;
    switch (in->p->decode) {
    case KV_DECODE_WINDOW: /* StreamingLLM: sinks, then the most recent */
        kv_score_streaming(in, score);
        break;
    case KV_DECODE_H2O: /* H2O: evict the lightest hitter outside the recent share */
        kv_score_h2o(in, score);
        break;
    case KV_DECODE_FIXED: {
        /* Elastic Cache / PrefixKV: evict at a fixed index, n0 - distance, so
         * the start of the compressed prompt stays frozen and the entries from
         * there on slide like a window. */
        const int evict = n - in->keep, at = n0 - in->p->distance > 0 ? n0 - in->p->distance : 0;
        const int first = at + evict <= n ? at : n - evict;
        for (int j = 0; j < n; j++) score[j] = j >= first && j < first + evict ? 0.0f : INFINITY;
        break;
    }
    default: /* grow and recompress evict nothing here */
        for (int j = 0; j < n; j++) score[j] = INFINITY;
        break;
    }
}

const struct kv_rule kv_decode_rules[KV_DECODE_COUNT] = {
    [KV_DECODE_GROW] = {
        .stage = "decode",
        .name = "grow",
        .summary = "decoded tokens are all kept (the cache grows)",
        .paper = "-",
        .keys = "",
        .shown = "",
        .defaults = {.decode = KV_DECODE_GROW},
    },
    [KV_DECODE_WINDOW] = {
        .stage = "decode",
        .name = "window",
        .summary = "over budget: evict the oldest entry after the sinks",
        .paper = "Efficient Streaming Language Models with Attention Sinks, StreamingLLM (Xiao et al., ICLR 2024, "
                 "arXiv:2309.17453)",
        .keys = "sinks",
        .shown = "sinks=4",
        .defaults = {.decode = KV_DECODE_WINDOW, .sinks = 4},
    },
    [KV_DECODE_H2O] = {
        .stage = "decode",
        .name = "h2o",
        .summary = "over budget: evict the entry with the least attention so far, outside the recent share",
        .paper = "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models (Zhang et al., "
                 "NeurIPS 2023, arXiv:2306.14048)",
        .keys = "recent",
        .shown = "recent=0.5",
        .defaults = {.decode = KV_DECODE_H2O, .recent = 0.5},
        .needs = KV_NEEDS_ACC,
    },
    [KV_DECODE_FIXED] = {
        .stage = "decode",
        .name = "fixed-distance",
        .summary = "over budget: evict the entry `distance` before the end of the compressed prompt",
        .paper = "Efficient Inference of Vision Instruction-Following Models with Elastic Cache (Liu et al., ECCV "
                 "2024, arXiv:2407.18121)",
        .keys = "distance",
        .shown = "distance=25",
        .defaults = {.decode = KV_DECODE_FIXED, .distance = 25},
    },
    [KV_DECODE_RECOMPRESS] = {
        .stage = "decode",
        .name = "recompress",
        .summary = "every `every` steps, rerun the preset's rule down to budget",
        .paper = "kvpress's DecodingPress (NVIDIA kvpress, github.com/NVIDIA/kvpress; no paper)",
        .keys = "every",
        .shown = "every=32",
        .defaults = {.decode = KV_DECODE_RECOMPRESS, .every = 32},
    },
};
