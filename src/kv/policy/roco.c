/* RoCo (Ren & Zhu, 2024, "On the efficacy of eviction policy for key-value
 * constrained generative language model inference"): an entry's importance is
 * the mean attention it received (sum / number of queries that saw it), and
 * entries whose attention varies most are not evicted yet, since they may
 * matter again. As the authors' code (EasyKV, h2o_head_std_avg), the last 10
 * entries and the largest standard deviations are protected, `recent` x
 * budget entries in all, and the rest are evicted by the smallest mean; as
 * docs/METHODS.md §4.6 (and EasyKV's prompt mode), the first `sinks` entries are
 * protected too, within the same share. */
#include "kv/policy.h"

#include <math.h>
#include <stdlib.h>

#define ROCO_LAST 10

static int by_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static void kv_score_roco(const struct kv_score_in *in, float *score) {
    const struct kv_head *h = in->h;
    const int n = h->n, protect = (int)floor(in->keep * in->p->recent + 0.5);
    float *sd = in->scratch;
    int protected_n = 0;
    for (int j = 0; j < n; j++) {
        const float *a = h->acc + (size_t)j * KV_ACC_N;
        const double cnt = a[KV_ACC_COUNT] > 0 ? a[KV_ACC_COUNT] : 1.0, mean = a[KV_ACC_SUM] / cnt;
        const double var = a[KV_ACC_SQ] / cnt - mean * mean;
        const bool fixed = j < in->p->sinks || j >= n - ROCO_LAST;
        score[j] = fixed ? INFINITY : (float)sqrt(var > 0 ? var : 0);
        sd[j] = score[j];
        protected_n += fixed;
    }
    /* The deviation at the cut: entries above it are protected, then those
     * at it, earlier first, until `protect` entries are. */
    float cut = INFINITY;
    if (protect > 0 && n > 0) {
        qsort(sd, (size_t)n, sizeof *sd, by_desc);
        cut = sd[(protect < n ? protect : n) - 1];
    }
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < n && protected_n < protect; j++)
            if (score[j] != INFINITY && (pass == 0 ? score[j] > cut : score[j] == cut))
                score[j] = INFINITY, protected_n++;
    for (int j = 0; j < n; j++) {
        const float *a = h->acc + (size_t)j * KV_ACC_N;
        if (score[j] != INFINITY) score[j] = a[KV_ACC_SUM] / (a[KV_ACC_COUNT] > 0 ? a[KV_ACC_COUNT] : 1.0f);
    }
}

const struct kv_rule kv_rule_roco = {
    .stage = "preset",
    .name = "roco",
    .summary = "smallest mean attention received, among entries whose attention varies least. Attention over every "
               "query, as h2o: weak at keeping a detail of a long prompt for a later question",
    .paper = "On the Efficacy of Eviction Policy for Key-Value Constrained Generative Language Model Inference, RoCo "
             "(Ren & Zhu, 2024, arXiv:2402.06262)",
    .keys = "budget recent sinks",
    .shown = "budget=0.2,recent=0.3,sinks=4",
    .defaults = {.method = KV_ROCO, .budget = 0.2, .recent = 0.3, KV_STAGE_DEFAULTS},
    .needs = KV_NEEDS_ACC,
    .score = kv_score_roco,
};
