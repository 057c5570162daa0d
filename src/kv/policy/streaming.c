/* StreamingLLM (Xiao et al., 2023): the first `sinks` entries, which soak up
 * attention whatever the content, plus the most recent ones. */
#include "kv/policy.h"

#include <math.h>

void kv_score_streaming(const struct kv_score_in *in, float *score) {
    for (int j = 0; j < in->h->n; j++) score[j] = j < in->p->sinks ? INFINITY : (float)j;
}

const struct kv_rule kv_rule_streaming = {
    .stage = "preset",
    .name = "streaming",
    .summary = "attention sinks + the most recent entries, also while decoding",
    .paper = "Efficient Streaming Language Models with Attention Sinks, StreamingLLM (Xiao et al., ICLR 2024, "
             "arXiv:2309.17453)",
    .keys = "budget sinks",
    .shown = "budget=0.2,sinks=4 +decode=window",
    .defaults = {.method = KV_STREAMING, .budget = 0.2, KV_STAGE_DEFAULTS, .decode = KV_DECODE_WINDOW},
    .score = kv_score_streaming,
};
