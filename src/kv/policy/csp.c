/* Cross-Self Pruning (Pei et al., 2024, section 3.2; docs/METHODS.md §4.13): attention to an
 * entry from queries of its own modality (self) and of the other modality
 * (cross) follow different distributions, so entries are ranked within each
 * and the top of both lists is kept. With the observation window's n-softmax
 * sums S_self and S_cross (the last `window` queries; src/attn) and k = keep
 * - recent: the top k*cross_ratio entries by S_cross and the top
 * k*(1-cross_ratio) by S_self outside the recent window, their union (the
 * released code concatenates the two lists, storing an entry chosen twice
 * twice; here it is kept once and the freed slots go to the next best by
 * S_self + S_cross), then the recent window. */
#include "kv/policy.h"

#include <math.h>
#include <stdlib.h>

static int by_desc(const void *a, const void *b, void *arg) {
    const float *s = arg;
    const int i = *(const int *)a, j = *(const int *)b;
    if (s[i] != s[j]) return s[i] > s[j] ? -1 : 1;
    return i - j;
}

/* Marks (score = INFINITY) the `take` best of order[] not yet marked. */
static int take_best(const int *order, int n, int take, float *score) {
    int got = 0;
    for (int i = 0; i < n && got < take; i++)
        if (score[order[i]] != INFINITY) score[order[i]] = INFINITY, got++;
    return got;
}

static void kv_score_csp(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, recent = KVF_MIN(n, (int)floor(in->keep * in->p->recent + 0.5));
    const int body = n - recent, k = KVF_MAX(0, KVF_MIN(in->keep - recent, body));
    const int k_cross = (int)floor(k * in->p->cross_ratio + 0.5), k_self = k - k_cross;
    int *order = in->iscratch;
    float *sum = in->scratch;
    for (int j = 0; j < n; j++) score[j] = j >= body ? INFINITY : 0.0f;
    for (int pass = 0; pass < 3; pass++) {
        /* cross, then self, then both for the slots the overlap freed */
        const float *a = pass == 0 ? in->win_cross : in->win_attn;
        for (int j = 0; j < body; j++) sum[j] = pass < 2 ? a[j] : in->win_attn[j] + in->win_cross[j];
        for (int j = 0; j < body; j++) order[j] = j;
        qsort_r(order, (size_t)body, sizeof *order, by_desc, sum);
        if (pass == 0) take_best(order, body, k_cross, score);
        else if (pass == 1) {
            /* the self list's own top k_self, whether or not cross took them */
            for (int i = 0; i < k_self && i < body; i++) score[order[i]] = INFINITY;
        } else {
            int kept = 0;
            for (int j = 0; j < body; j++) kept += score[j] == INFINITY;
            take_best(order, body, k - kept, score);
        }
    }
}

const struct kv_rule kv_rule_csp = {
    .stage = "preset",
    .name = "csp",
    .summary = "top entries by same-modality and by cross-modality n-softmax attention of the observation window "
               "(window=0: as many queries as recent entries), their union, the recent window. The default window is "
               "mostly prompt body; window=32+pool=avg keeps a detail for a later question as snapkv does",
    .paper = "Cross-Self KV Cache Pruning for Efficient Vision-Language Inference, CSP (Pei et al., 2024, "
             "arXiv:2412.04652)",
    .keys = "budget recent important cross_ratio n window decode_softmax",
    .shown = "budget=0.2,recent=0.5,cross_ratio=0.5,n=1,window=0,decode_softmax=0",
    .defaults = {.method = KV_CSP, .budget = 0.2, .recent = 0.5, .cross_ratio = 0.5, .nsm_n = 1.0, KV_STAGE_DEFAULTS},
    .needs = KV_NEEDS_WINDOW | KV_NEEDS_CROSS,
    .score = kv_score_csp,
};
