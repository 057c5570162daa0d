/* Key norm (Devoto et al., 2024, as in kvpress): keys of small L2 norm draw
 * the most attention, so the smallest norms are kept. */
#include "kv/policy.h"

#include <math.h>

void kv_score_knorm(const struct kv_score_in *in, float *score) {
    const int d = in->head_dim;
    for (int j = 0; j < in->h->n; j++) {
        const float *k = in->h->k + (size_t)j * d;
        double nn = 0.0;
        for (int e = 0; e < d; e++) nn += (double)k[e] * k[e];
        score[j] = (float)-sqrt(nn);
    }
}
