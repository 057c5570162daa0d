/* The KV cache: one growable store per (layer, kv head), each with its own
 * length, so later work can keep different numbers of entries per layer and
 * head. Keys are stored after RoPE, next to the tag of each entry (true
 * position, modality, image / frame index, grid cell): compression methods
 * read the tags, and they travel with the entries through eviction.
 * Keys and values are stored as float32, fp16, Q8_0, Q4_0 or Q4_0H rows, each in
 * its own type (chosen per session, as llama.cpp's -ctk / -ctv), keys
 * perhaps smoothed per channel first (Q4_0S, kv_head.smooth); code that
 * needs float32 reads them with kv_head_key_row / kv_head_value_row and
 * writes with kv_head_set_row.
 * Invariant: within a head, entries are in increasing position order. The
 * bytes reported are the bytes allocated. */
#ifndef KVF_KV_CACHE_H
#define KVF_KV_CACHE_H

#include "core/common.h"
#include "core/quant.h"

struct kv_head {
    void *k;             /* [cap] key rows: head_dim values each, stored as type_k */
    void *v;             /* [cap] value rows, stored as type_v */
    struct kvf_tag *tag; /* [cap] tag (true position first) of each entry */
    float *acc;          /* [cap][KV_ACC_N] attention each entry received so far
                            (online scores: H2O, RoCo); NULL unless the cache keeps them */
    float *prior;        /* [cap] the score each entry was given as it was written, from its layer's
                            input (KVzap's learned scorer, kv/kvzap.h; -INFINITY: none, ranked last);
                            NULL unless the cache keeps them */
    float *smooth;       /* [2][head_dim] keys' channel shift, then scale (kvf_kv_type Q4_0S): a stored
                            key is (k - shift) / scale; taken from the head's first entries as they are
                            appended, kept with its storage; NULL: keys stored as they are */
    int smooth_rows;     /* the entries smooth was taken from (0: none yet, shift 0 and scale 1) */
    int n, cap;
    enum dtype type_k, type_v; /* the cache's DT_F32, DT_F16, DT_Q8_0, DT_Q4_0 or DT_Q4_0H: each head carries
                                  them, as readers (attention, policies) are handed heads; a zeroed
                                  view is F32 */
};

/* The running statistics of an entry, over every query that saw it. */
enum { KV_ACC_SUM, KV_ACC_SQ, KV_ACC_COUNT, KV_ACC_N };

struct kv_cache {
    int n_layer, n_head_kv, head_dim;
    enum dtype type_k, type_v; /* storage of keys and of values, as in every head */
    size_t k_row, v_row;   /* bytes of one key row, of one value row */
    bool smooth_k;         /* keys smoothed per channel (Q4_0S): every head with storage has its smooth */
    bool has_acc;          /* entries carry KV_ACC_N running statistics */
    bool has_prior;        /* entries carry a score from when they were written (set while empty) */
    struct kv_head *heads; /* [n_layer][n_head_kv] */
    size_t bytes;          /* allocated bytes of k, v, tags, statistics and smoothing over all heads */
    size_t peak_bytes;     /* the largest `bytes` so far */
    int peak_entries;      /* the most entries any one head has held so far */
};

/* An empty float32 cache. */
enum kvf_status kv_cache_init(struct kv_cache *c, int n_layer, int n_head_kv, int head_dim, bool has_acc);
/* Chooses how an empty cache (just initialised or cleared) stores keys and
 * values: KVF_ERR_INVALID_ARG for a value outside enum kvf_kv_type,
 * KVF_ERR_UNSUPPORTED for a block type (Q8_0, Q4_0, Q4_0H, Q4_0S) when
 * head_dim is not a multiple of 32, for Q4_0H or Q4_0S over QUANT_ROT_MAX,
 * or for Q4_0S as the values' type. */
enum kvf_status kv_cache_set_type(struct kv_cache *c, enum kvf_kv_type type_k, enum kvf_kv_type type_v);
void kv_cache_free(struct kv_cache *c);
void kv_cache_clear(struct kv_cache *c); /* drops every entry and frees the storage; the types stay */
static inline struct kv_head *kv_cache_head(struct kv_cache *c, int layer, int head) {
    return &c->heads[(size_t)layer * c->n_head_kv + head];
}
/* Makes dst, an empty cache of the same shape and types, hold src's
 * entries with src's capacities (so its bytes are what the same appends
 * would have allocated); their statistics and written scores when both
 * carry them, the keys' smoothing. */
enum kvf_status kv_cache_copy(struct kv_cache *dst, const struct kv_cache *src);
/* An empty head of c gets n entries in storage for cap (>= n): key and
 * value rows in the cache's types (n x k_row and n x v_row bytes), tags,
 * statistics [n][KV_ACC_N] and written scores [n] when the cache carries
 * them (acc NULL: zeros; prior NULL: -INFINITY), and the keys' smoothing [2][head_dim]
 * (from smooth_rows entries) when the cache smooths them. */
enum kvf_status kv_cache_fill(struct kv_cache *c, int layer, int head, int n, int cap, const void *k, const void *v,
                              const struct kvf_tag *tag, const float *acc, const float *prior, const float *smooth,
                              int smooth_rows);
/* Sizes every head's storage to exactly the entries it holds (the slack
 * appends left is returned). */
enum kvf_status kv_cache_fit(struct kv_cache *c);
/* The most entries any head holds. */
int kv_cache_most(const struct kv_cache *c);
/* Bytes one position takes in a full cache of n_layer layers of n_head_kv
 * heads stored as type_k/type_v: its key and value rows and its tag in
 * every head; and (per_cache, optional) what the heads hold whatever
 * their length, the keys' smoothing (errors as kv_cache_set_type's). */
enum kvf_status kv_cache_position_bytes(int n_layer, int n_head_kv, int head_dim, enum kvf_kv_type type_k,
                                        enum kvf_kv_type type_v, size_t *per_position, size_t *per_cache);
/* Bytes n entries take in every head of one layer (sized exactly). */
size_t kv_cache_layer_bytes_for(const struct kv_cache *c, int n);
/* Makes room for `extra` more entries in every head of a layer. */
enum kvf_status kv_cache_reserve(struct kv_cache *c, int layer, int extra);
/* Keeps entries keep[0..n_keep) of one head (strictly increasing indices,
 * so position order holds), moves them to the front and shrinks the storage
 * to exactly n_keep entries: evicted memory is returned, never masked. */
enum kvf_status kv_cache_keep(struct kv_cache *c, int layer, int head, const int *keep, int n_keep);
/* Drops the first n entries of one head (the oldest positions): the rest
 * move to the front, and storage shrinks as kv_cache_keep's does. */
enum kvf_status kv_cache_drop_front(struct kv_cache *c, int layer, int head, int n);
/* Keeps the first n entries of one head (a pass's entries removed after
 * it); storage shrinks as kv_cache_keep's does. */
enum kvf_status kv_cache_truncate(struct kv_cache *c, int layer, int head, int n);
/* Appends n entries to every kv head of a layer. k, v: [n][n_head_kv*head_dim]
 * float32 (the layout of the projection output), converted to the cache's
 * types; tags: [n]; statistics start at 0 and written scores at -INFINITY
 * (the caller writes the scores). Space must be reserved. An empty head that smooths
 * its keys takes its shift and scale from these. */
void kv_cache_append(struct kv_cache *c, int layer, const float *k, const float *v,
                     const struct kvf_tag *tags, int n);

/* The number of leading entries of a head at positions <= p (entries are
 * in position order): where a query at p stops seeing, or the entries a
 * window has left behind. */
static inline int kv_head_count_upto(const struct kv_head *h, int32_t p) {
    int lo = 0, hi = h->n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (h->tag[mid].pos <= p) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* Entry j (< h->n) of a head as float32: its key, its value (head_dim floats). */
void kv_head_key_row(const struct kv_head *h, int head_dim, int j, float *out);
void kv_head_value_row(const struct kv_head *h, int head_dim, int j, float *out);
/* Overwrites entry j's key and value with float32 rows, stored in the
 * head's types (for methods that merge entries). */
void kv_head_set_row(struct kv_head *h, int head_dim, int j, const float *k, const float *v);
/* Rows of keys as kv_head_key_row gives them, from what quant_dequant_row
 * gives for n stored rows (in place; nothing for a head without smooth). */
void kv_head_unsmooth(const struct kv_head *h, int head_dim, float *rows, int n);
/* A query against a head's smoothed keys (h->smooth set): q scaled
 * channel by channel into qs, so that qs . stored = q . key - q . shift;
 * returns q . shift. */
float kv_head_smooth_query(const struct kv_head *h, int head_dim, const float *q, float *qs);

#endif
