/* Random baselines: `random` keeps a uniform subset; `imgrand` keeps every
 * entry that is not an image token and drops image tokens at random, the
 * control that tells whether a method's choice among image tokens matters. */
#include "kv/policy.h"

#include <math.h>

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void kv_score_random(const struct kv_score_in *in, float *score) {
    uint64_t s = in->seed;
    const bool image_only = in->p->method == KV_IMGRAND;
    for (int j = 0; j < in->h->n; j++) {
        const float u = (float)(splitmix(&s) >> 40) / 16777216.0f;
        score[j] = image_only && in->h->tag[j].modality != KVF_MOD_IMAGE ? INFINITY : u;
    }
}
