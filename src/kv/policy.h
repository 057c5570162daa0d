/* KV cache policies: a spec string ("snapkv:budget=0.2,window=32") parsed
 * into parameters, and the compression step that scores every entry of every
 * (layer, kv head), keeps the best `budget` and compacts the cache. Each
 * scoring rule lives in its own file under src/kv/policy/. */
#ifndef KVF_KV_POLICY_H
#define KVF_KV_POLICY_H

#include "kv/cache.h"

enum kv_method { KV_FULL, KV_STREAMING, KV_H2O, KV_SNAPKV, KV_PYRAMIDKV, KV_KEYDIFF, KV_KNORM, KV_RANDOM, KV_IMGRAND,
                 KV_METHOD_COUNT };

struct kv_policy {
    enum kv_method method;
    double budget;      /* <= 1: a ratio of the entries; > 1: a count of entries per head */
    int sinks;          /* streaming: first entries always kept                           */
    double recent;      /* h2o: share of the kept entries that are the most recent        */
    int window;         /* snapkv: observation window (last queries of the prompt)        */
    int kernel;         /* snapkv: average-pooling width (odd)                            */
    int beta;           /* pyramidkv: the top layer keeps (budget - window) / beta         */
    uint64_t seed;      /* random, imgrand                                                */
};

/* Parses a spec; on failure the message lists what is valid. */
enum kvf_status kv_policy_parse(const char *spec, struct kv_policy *out);
/* Entries a head of n entries keeps under the policy's budget. */
int kv_policy_keep_count(const struct kv_policy *p, int n);
/* The same in layer `layer` of n_layer: the budget allocation (uniform, or
 * PyramidKV's pyramid, src/kv/policy/pyramid.c). */
int kv_policy_layer_keep(const struct kv_policy *p, int n, int layer, int n_layer);
int kv_pyramid_keep(const struct kv_policy *p, int n, int keep, int layer, int n_layer);
/* Whether compression needs the last `window` prompt queries of each layer. */
static inline bool kv_policy_needs_window(const struct kv_policy *p) {
    return p->method == KV_SNAPKV || p->method == KV_PYRAMIDKV;
}
/* Whether compression needs the attention every prompt query paid each entry. */
static inline bool kv_policy_needs_attn_sum(const struct kv_policy *p) { return p->method == KV_H2O; }

/* One head's scores: higher is kept first; INFINITY marks entries that are
 * always kept (sinks, the observation window, recent entries, text under
 * imgrand). */
struct kv_score_in {
    const struct kv_policy *p;
    const struct kv_head *h;
    int head_dim;
    int keep;              /* entries the head keeps (h2o splits them)         */
    const float *win_attn; /* snapkv: attention of the window queries [h->n]   */
    const float *attn_sum; /* h2o: attention summed over every prompt query [h->n] */
    uint64_t seed;         /* per (layer, head) stream for the random rules    */
};
void kv_score_streaming(const struct kv_score_in *in, float *score);
void kv_score_h2o(const struct kv_score_in *in, float *score);
void kv_score_snapkv(const struct kv_score_in *in, float *score);
void kv_score_keydiff(const struct kv_score_in *in, float *score);
void kv_score_knorm(const struct kv_score_in *in, float *score);
void kv_score_random(const struct kv_score_in *in, float *score);  /* random and imgrand */

/* Keeps the `keep` best-scored entries of one head (ties: the earlier
 * entry), compacting the cache; entries scored INFINITY are kept even when
 * they alone exceed `keep` (the real count is what the cache then holds).
 * scratch: h->n ints. */
enum kvf_status kv_select_keep(struct kv_cache *c, int layer, int head, const float *score, int keep, int *scratch);

#endif
