/* H2O (Zhang et al., 2023): "heavy hitters" — the entries that received the
 * most attention summed over every query so far (here: every prompt query,
 * gathered by the attention kernel during prefill) — plus the most recent
 * entries. `recent` is the recent share of the kept entries (DESIGN's
 * default: heavy 0.1N + recent 0.1N, i.e. 0.5 of budget 0.2). */
#include "kv/policy.h"

#include <math.h>

void kv_score_h2o(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, recent = (int)floor(in->keep * in->p->recent + 0.5);
    for (int j = 0; j < n; j++) score[j] = j >= n - recent ? INFINITY : in->attn_sum[j];
}
