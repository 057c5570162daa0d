/* Decode maintenance (DESIGN section 5, stage "decode"): once the prompt is
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
