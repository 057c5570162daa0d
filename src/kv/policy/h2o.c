/* H2O (Zhang et al., 2023): "heavy hitters" — the entries that received the
 * most attention summed over every query so far (prompt queries, then each
 * decode step's, accumulated next to every entry by the attention kernel) —
 * plus the most recent entries. `recent` is the recent share of the kept
 * entries (DESIGN's default: heavy 0.1N + recent 0.1N, i.e. 0.5 of budget
 * 0.2). The same rule evicts during decoding (decode=h2o). */
#include "kv/policy.h"

#include <math.h>

void kv_score_h2o(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, recent = (int)floor(in->keep * in->p->recent + 0.5);
    for (int j = 0; j < n; j++) score[j] = j >= n - recent ? INFINITY : in->h->acc[(size_t)j * KV_ACC_N + KV_ACC_SUM];
}
