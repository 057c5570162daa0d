/* Random baselines: `random` keeps a uniform subset; `imgrand` keeps every
 * entry that is not an image token and drops image tokens at random, the
 * control that tells whether a method's choice among image tokens matters. */
#include "kv/policy.h"

#include <math.h>

static void score_uniform(const struct kv_score_in *in, bool image_only, float *score) {
    uint64_t s = in->seed;
    for (int j = 0; j < in->h->n; j++) {
        const float u = (float)(rng_splitmix64(&s) >> 40) / 16777216.0f;
        score[j] = image_only && in->h->tag[j].modality != KVF_MOD_IMAGE ? INFINITY : u;
    }
}

static void kv_score_random(const struct kv_score_in *in, float *score) { score_uniform(in, false, score); }
static void kv_score_imgrand(const struct kv_score_in *in, float *score) { score_uniform(in, true, score); }

const struct kv_rule kv_rule_random = {
    .stage = "preset",
    .name = "random",
    .summary = "a uniform random subset (seeded)",
    .paper = "a baseline (no paper)",
    .keys = "budget seed",
    .shown = "budget=0.2,seed=1",
    .defaults = {.method = KV_RANDOM, .budget = 0.2, .seed = 1, KV_STAGE_DEFAULTS},
    .score = kv_score_random,
};

const struct kv_rule kv_rule_imgrand = {
    .stage = "preset",
    .name = "imgrand",
    .summary = "every non-image entry; image entries dropped at random (seeded)",
    .paper = "a baseline (no paper)",
    .keys = "budget seed",
    .shown = "budget=0.2,seed=1",
    .defaults = {.method = KV_IMGRAND, .budget = 0.2, .seed = 1, KV_STAGE_DEFAULTS},
    .score = kv_score_imgrand,
};
