/* KV cache policies: a spec string parsed into the stages of DESIGN
 * section 5, and the steps that apply them to the cache. A spec is a preset
 * ("snapkv:budget=0.2,window=32") — which fixes the score rule and the
 * defaults of the other stages — optionally followed by stage options
 * ("+budget=pyramid:beta=20", "+decode=h2o:recent=0.5"). Each rule lives in
 * its own file under src/kv/policy/. */
#ifndef KVF_KV_POLICY_H
#define KVF_KV_POLICY_H

#include "kv/cache.h"

/* Presets; each one is a score rule (pyramidkv: SnapKV's rule with the
 * pyramid budget allocation). */
enum kv_method { KV_FULL, KV_STREAMING, KV_H2O, KV_SNAPKV, KV_PYRAMIDKV, KV_ROCO, KV_KEYDIFF, KV_KNORM, KV_RANDOM,
                 KV_IMGRAND, KV_METHOD_COUNT };
/* Budget stage: how the entries are spread over the layers. */
enum kv_alloc { KV_ALLOC_UNIFORM, KV_ALLOC_PYRAMID, KV_ALLOC_COUNT };
/* Decode stage: how the cache is kept within budget while generating. */
enum kv_decode { KV_DECODE_GROW, KV_DECODE_WINDOW, KV_DECODE_H2O, KV_DECODE_FIXED, KV_DECODE_RECOMPRESS,
                 KV_DECODE_COUNT };

struct kv_policy {
    enum kv_method method;
    double budget;      /* <= 1: a ratio of the tokens seen; > 1: a count of entries per head */
    int sinks;          /* streaming, decode=window: first entries always kept             */
    double recent;      /* h2o, roco, decode=h2o: share of the kept entries protected as recent
                           (roco: protected by the spread of their attention)             */
    int window;         /* snapkv: observation window (last queries of the prompt)        */
    int kernel;         /* snapkv: average-pooling width (odd)                            */
    uint64_t seed;      /* random, imgrand                                                */
    enum kv_alloc alloc;
    int beta;           /* alloc=pyramid: the top layer keeps (budget - window) / beta     */
    enum kv_decode decode;
    int distance;       /* decode=fixed-distance: the evicted index is this far from the end
                           of the compressed prompt                                        */
    int every;          /* decode=recompress: decode steps between compressions           */
};

/* Parses a spec; on failure the message lists what is valid. */
enum kvf_status kv_policy_parse(const char *spec, struct kv_policy *out);
/* Entries a head keeps, n_seen tokens in, under the policy's budget. */
int kv_policy_keep_count(const struct kv_policy *p, int n_seen);
/* The same in layer `layer` of n_layer, after the budget allocation
 * (uniform, or PyramidKV's pyramid, src/kv/policy/pyramid.c). */
int kv_policy_layer_keep(const struct kv_policy *p, int n_seen, int layer, int n_layer);
int kv_pyramid_keep(const struct kv_policy *p, int n, int keep, int layer, int n_layer);
/* Whether compression needs the last `window` queries of each layer. */
static inline bool kv_policy_needs_window(const struct kv_policy *p) {
    return p->method == KV_SNAPKV || p->method == KV_PYRAMIDKV;
}
/* Whether cache entries carry the attention they received (KV_ACC_*). */
static inline bool kv_policy_needs_acc(const struct kv_policy *p) {
    return p->method == KV_H2O || p->method == KV_ROCO || p->decode == KV_DECODE_H2O;
}

/* One head's scores: higher is kept first; INFINITY marks entries that are
 * always kept (sinks, the observation window, recent entries, text under
 * imgrand). */
struct kv_score_in {
    const struct kv_policy *p;
    const struct kv_head *h;
    int head_dim;
    int keep;              /* entries the head keeps (h2o splits them)         */
    const float *win_attn; /* snapkv: attention of the window queries [h->n]   */
    uint64_t seed;         /* per (layer, head) stream for the random rules    */
    float *scratch;        /* [h->n] work space                                 */
};
void kv_score_streaming(const struct kv_score_in *in, float *score);
void kv_score_h2o(const struct kv_score_in *in, float *score);
void kv_score_roco(const struct kv_score_in *in, float *score);
void kv_score_snapkv(const struct kv_score_in *in, float *score);
void kv_score_keydiff(const struct kv_score_in *in, float *score);
void kv_score_knorm(const struct kv_score_in *in, float *score);
void kv_score_random(const struct kv_score_in *in, float *score);  /* random and imgrand */

/* Keeps the `keep` best-scored entries of one head (ties: the earlier
 * entry), compacting the cache; entries scored INFINITY are kept even when
 * they alone exceed `keep` (the real count is what the cache then holds).
 * scratch: h->n ints. */
enum kvf_status kv_select_keep(struct kv_cache *c, int layer, int head, const float *score, int keep, int *scratch);

/* Decode stage: scores for one head that holds more than `target` entries
 * during decoding (window: StreamingLLM's; h2o: H2O's over the attention
 * accumulated so far; fixed-distance: everything but the entries at index
 * n0 - distance on, n0 being the head's size right after compression), for
 * kv_select_keep(..., target, ...). Not for decode=grow or recompress. */
void kv_decode_score(const struct kv_score_in *in, int n0, float *score);

#endif
