#include "kv/cache.h"

#include <stdlib.h>
#include <string.h>

static size_t head_bytes(const struct kv_cache *c, int cap) {
    return (size_t)cap * (2 * (size_t)c->head_dim * sizeof(float) + sizeof(struct kvf_tag));
}

enum kvf_status kv_cache_init(struct kv_cache *c, int n_layer, int n_head_kv, int head_dim) {
    memset(c, 0, sizeof *c);
    c->heads = calloc((size_t)n_layer * n_head_kv, sizeof *c->heads);
    if (!c->heads) return err_set(KVF_ERR_NOMEM, "kv cache: out of memory");
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim = head_dim;
    return KVF_OK;
}

void kv_cache_clear(struct kv_cache *c) {
    for (size_t i = 0; i < (size_t)c->n_layer * c->n_head_kv; i++) {
        struct kv_head *h = &c->heads[i];
        free(h->k);
        free(h->v);
        free(h->tag);
        memset(h, 0, sizeof *h);
    }
    c->bytes = 0;
}

void kv_cache_free(struct kv_cache *c) {
    if (!c->heads) return;
    kv_cache_clear(c);
    free(c->heads);
    memset(c, 0, sizeof *c);
}

static enum kvf_status head_grow(struct kv_cache *c, struct kv_head *h, int cap) {
    const size_t row = (size_t)c->head_dim * sizeof(float);
    float *k = realloc(h->k, (size_t)cap * row);
    if (k) h->k = k;
    float *v = k ? realloc(h->v, (size_t)cap * row) : NULL;
    if (v) h->v = v;
    struct kvf_tag *t = v ? realloc(h->tag, (size_t)cap * sizeof *t) : NULL;
    if (!t) return err_set(KVF_ERR_NOMEM, "kv cache: cannot grow to %d entries", cap);
    h->tag = t;
    c->bytes += head_bytes(c, cap) - head_bytes(c, h->cap);
    h->cap = cap;
    return KVF_OK;
}

enum kvf_status kv_cache_keep(struct kv_cache *c, int layer, int head, const int *keep, int n_keep) {
    struct kv_head *h = kv_cache_head(c, layer, head);
    if (n_keep < 0 || n_keep > h->n) return err_set(KVF_ERR_INTERNAL, "kv keep: %d of %d entries", n_keep, h->n);
    for (int i = 0; i < n_keep; i++)
        if (keep[i] < 0 || keep[i] >= h->n || (i > 0 && keep[i] <= keep[i - 1]))
            return err_set(KVF_ERR_INTERNAL, "kv keep: index %d (%d) out of order or range", i, keep[i]);
    const size_t d = (size_t)c->head_dim;
    for (int i = 0; i < n_keep; i++) {
        if (keep[i] == i) continue;
        memcpy(h->k + i * d, h->k + keep[i] * d, d * sizeof(float));
        memcpy(h->v + i * d, h->v + keep[i] * d, d * sizeof(float));
        h->tag[i] = h->tag[keep[i]];
    }
    h->n = n_keep;
    if (n_keep == 0) {
        free(h->k);
        free(h->v);
        free(h->tag);
        c->bytes -= head_bytes(c, h->cap);
        h->k = h->v = NULL;
        h->tag = NULL;
        h->cap = 0;
        return KVF_OK;
    }
    return head_grow(c, h, n_keep); /* a shrinking realloc */
}

enum kvf_status kv_cache_reserve(struct kv_cache *c, int layer, int extra) {
    for (int g = 0; g < c->n_head_kv; g++) {
        struct kv_head *h = kv_cache_head(c, layer, g);
        if (h->n + extra <= h->cap) continue;
        /* Geometric growth keeps appends amortised O(1) during decode. */
        int cap = KVF_MAX(h->n + extra, h->cap + h->cap / 2);
        cap = KVF_MAX(cap, 16);
        enum kvf_status st = head_grow(c, h, cap);
        if (st != KVF_OK) return st;
    }
    return KVF_OK;
}

void kv_cache_append(struct kv_cache *c, int layer, const float *k, const float *v,
                     const struct kvf_tag *tags, int n) {
    const int d = c->head_dim, stride = c->n_head_kv * d;
    for (int g = 0; g < c->n_head_kv; g++) {
        struct kv_head *h = kv_cache_head(c, layer, g);
        for (int t = 0; t < n; t++) {
            memcpy(h->k + (size_t)(h->n + t) * d, k + (size_t)t * stride + g * d, d * sizeof(float));
            memcpy(h->v + (size_t)(h->n + t) * d, v + (size_t)t * stride + g * d, d * sizeof(float));
        }
        memcpy(h->tag + h->n, tags, (size_t)n * sizeof *tags);
        h->n += n;
    }
}
