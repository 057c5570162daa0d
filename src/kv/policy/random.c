/* Random baselines: `random` keeps a uniform subset; `imgrand` keeps every
 * entry that is not an image token and drops image tokens at random, the
 * control that tells whether a method's choice among image tokens matters. */
#include "kv/policy.h"

#include <math.h>

void kv_score_random(const struct kv_score_in *in, float *score) {
    uint64_t s = in->seed;
    const bool image_only = in->p->method == KV_IMGRAND;
    for (int j = 0; j < in->h->n; j++) {
        const float u = (float)(rng_splitmix64(&s) >> 40) / 16777216.0f;
        score[j] = image_only && in->h->tag[j].modality != KVF_MOD_IMAGE ? INFINITY : u;
    }
}
