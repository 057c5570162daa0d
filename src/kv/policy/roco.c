/* RoCo (Ren & Zhu, 2024, "On the efficacy of eviction policy for key-value
 * constrained generative language model inference"): an entry's importance is
 * the mean attention it received (sum / number of queries that saw it), and
 * entries whose attention varies most are not evicted yet, since they may
 * matter again. The authors' code (EasyKV, h2o_head_std_avg) protects the
 * last 10 entries and the `recent` share of the budget with the largest
 * standard deviation, then evicts by the smallest mean among the rest. */
#include "kv/policy.h"

#include <math.h>
#include <stdlib.h>

#define ROCO_LAST 10

static int by_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

void kv_score_roco(const struct kv_score_in *in, float *score) {
    const struct kv_head *h = in->h;
    const int n = h->n, protect = (int)floor(in->keep * in->p->recent + 0.5);
    float *sd = in->scratch;
    for (int j = 0; j < n; j++) {
        const float *a = h->acc + (size_t)j * KV_ACC_N;
        const double cnt = a[KV_ACC_COUNT] > 0 ? a[KV_ACC_COUNT] : 1.0, mean = a[KV_ACC_SUM] / cnt;
        const double var = a[KV_ACC_SQ] / cnt - mean * mean;
        score[j] = j >= n - ROCO_LAST ? INFINITY : (float)sqrt(var > 0 ? var : 0);
        sd[j] = score[j];
    }
    /* The protected entries: the last ones, then the largest deviations
     * (ties: the earlier entry) up to `protect` in all. */
    float cut = INFINITY;
    if (protect > 0 && n > 0) {
        qsort(sd, (size_t)n, sizeof *sd, by_desc);
        cut = sd[(protect < n ? protect : n) - 1];
    }
    int protected_n = n < ROCO_LAST ? n : ROCO_LAST;
    for (int j = 0; j < n; j++) {
        const float *a = h->acc + (size_t)j * KV_ACC_N;
        bool keep = score[j] == INFINITY;
        if (!keep && score[j] >= cut && protected_n < protect) keep = true, protected_n++;
        score[j] = keep ? INFINITY : a[KV_ACC_SUM] / (a[KV_ACC_COUNT] > 0 ? a[KV_ACC_COUNT] : 1.0f);
    }
}
