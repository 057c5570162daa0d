#include "kv/cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Indexed by enum kvf_kv_type; smooth: keys smoothed per channel, then stored as type. */
static const struct {
    const char *name;
    enum dtype type;
    bool smooth;
} kv_types[] = {{"f32", DT_F32, false},     {"f16", DT_F16, false},   {"q8_0", DT_Q8_0, false},
                {"q4_0", DT_Q4_0, false},   {"q4_0h", DT_Q4_0H, false}, {"q4_0s", DT_Q4_0H, true}};
#define KV_TYPE_COUNT ((int)(sizeof kv_types / sizeof kv_types[0]))
#define KV_TYPE_NAMES "f32, f16, q8_0, q4_0, q4_0h, q4_0s"

/* A head's keys are smoothed from the statistics of its first entries,
 * taken again (the entries it holds stored anew) each time it has doubled
 * until SMOOTH_ROWS: a prompt's first batch sets them once; a cache
 * filled a token at a time re-stores its first 64 keys a few times. */
#define SMOOTH_ROWS 64

const char *kvf_kv_type_name(enum kvf_kv_type type) {
    return (unsigned)type < (unsigned)KV_TYPE_COUNT ? kv_types[type].name : NULL;
}

enum kvf_status kvf_kv_type_parse(const char *name, enum kvf_kv_type *out) {
    for (int t = 0; name && t < KV_TYPE_COUNT; t++)
        if (strcmp(name, kv_types[t].name) == 0) {
            *out = (enum kvf_kv_type)t;
            return KVF_OK;
        }
    return err_set(KVF_ERR_INVALID_ARG, "unknown KV cache type '%s' (valid: " KV_TYPE_NAMES ")",
                   name ? name : "(null)");
}

static size_t head_bytes(const struct kv_cache *c, int cap) {
    const size_t acc = (c->has_acc ? KV_ACC_N * sizeof(float) : 0) + (c->has_prior ? sizeof(float) : 0);
    const size_t smooth = cap > 0 && c->smooth_k ? 2 * sizeof(float) * (size_t)c->head_dim : 0;
    return (size_t)cap * (c->k_row + c->v_row + sizeof(struct kvf_tag) + acc) + smooth;
}

size_t kv_cache_layer_bytes_for(const struct kv_cache *c, int n) { return head_bytes(c, n) * (size_t)c->n_head_kv; }

static void bytes_add(struct kv_cache *c, size_t add, size_t sub) {
    c->bytes += add - sub;
    c->peak_bytes = KVF_MAX(c->peak_bytes, c->bytes);
}

enum kvf_status kv_cache_init(struct kv_cache *c, int n_layer, int n_head_kv, int head_dim, bool has_acc) {
    memset(c, 0, sizeof *c);
    c->heads = calloc((size_t)n_layer * n_head_kv, sizeof *c->heads); /* zeroed: F32 heads */
    if (!c->heads) return err_set(KVF_ERR_NOMEM, "kv cache: out of memory");
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim = head_dim;
    c->type_k = c->type_v = DT_F32;
    c->k_row = c->v_row = dtype_row_bytes(DT_F32, head_dim);
    c->has_acc = has_acc;
    return KVF_OK;
}

/* The storage type and row bytes of one kvf_kv_type on c's heads, for
 * keys or for values. */
static enum kvf_status type_row(const struct kv_cache *c, enum kvf_kv_type type, bool values, enum dtype *t,
                                size_t *row) {
    const char *name = kvf_kv_type_name(type);
    if (!name) return err_set(KVF_ERR_INVALID_ARG, "KV cache type %d (valid: " KV_TYPE_NAMES ")", (int)type);
    if (values && kv_types[type].smooth)
        return err_set(KVF_ERR_UNSUPPORTED, "KV cache type %s is for keys (it smooths their channels); values vary by "
                       "token, and q4_0h is their 4-bit type", name);
    *t = kv_types[type].type;
    *row = dtype_row_bytes(*t, c->head_dim);
    if (*row == 0)
        return err_set(KVF_ERR_UNSUPPORTED,
                       "KV cache type %s needs a head dimension that is a multiple of %d (the model's is %d)", name,
                       dtype_get(*t)->block, c->head_dim);
    if (*t == DT_Q4_0H && c->head_dim > QUANT_ROT_MAX)
        return err_set(KVF_ERR_UNSUPPORTED, "KV cache type %s takes heads of up to %d dimensions (the model's are %d)",
                       name, QUANT_ROT_MAX, c->head_dim);
    return KVF_OK;
}

enum kvf_status kv_cache_position_bytes(int n_layer, int n_head_kv, int head_dim, enum kvf_kv_type type_k,
                                        enum kvf_kv_type type_v, size_t *per_position, size_t *per_cache) {
    const struct kv_cache c = {.head_dim = head_dim};
    enum dtype t;
    size_t k_row, v_row;
    enum kvf_status st = type_row(&c, type_k, false, &t, &k_row);
    if (st == KVF_OK) st = type_row(&c, type_v, true, &t, &v_row);
    if (st != KVF_OK) return st;
    const size_t heads = (size_t)n_layer * (size_t)n_head_kv;
    *per_position = heads * (k_row + v_row + sizeof(struct kvf_tag));
    if (per_cache) *per_cache = kv_types[type_k].smooth ? heads * 2 * sizeof(float) * (size_t)head_dim : 0;
    return KVF_OK;
}

enum kvf_status kv_cache_set_type(struct kv_cache *c, enum kvf_kv_type type_k, enum kvf_kv_type type_v) {
    enum dtype tk, tv;
    size_t k_row, v_row;
    enum kvf_status st = type_row(c, type_k, false, &tk, &k_row);
    if (st == KVF_OK) st = type_row(c, type_v, true, &tv, &v_row);
    if (st != KVF_OK) return st;
    if (c->bytes != 0) return err_set(KVF_ERR_INTERNAL, "kv cache: type changed while holding entries");
    c->type_k = tk, c->type_v = tv;
    c->smooth_k = kv_types[type_k].smooth;
    c->k_row = k_row, c->v_row = v_row;
    for (size_t i = 0; i < (size_t)c->n_layer * c->n_head_kv; i++) c->heads[i].type_k = tk, c->heads[i].type_v = tv;
    return KVF_OK;
}

/* Frees a head's storage (its entries are gone); the type stays. */
static void head_release(struct kv_cache *c, struct kv_head *h) {
    free(h->k);
    free(h->v);
    free(h->tag);
    free(h->acc);
    free(h->prior);
    free(h->smooth);
    bytes_add(c, 0, head_bytes(c, h->cap));
    *h = (struct kv_head){.type_k = c->type_k, .type_v = c->type_v};
}

void kv_cache_clear(struct kv_cache *c) {
    for (size_t i = 0; i < (size_t)c->n_layer * c->n_head_kv; i++) head_release(c, &c->heads[i]);
    c->bytes = 0;
    c->peak_bytes = 0;
    c->peak_entries = 0;
}

void kv_cache_free(struct kv_cache *c) {
    if (!c->heads) return;
    kv_cache_clear(c);
    free(c->heads);
    memset(c, 0, sizeof *c);
}

static enum kvf_status head_grow(struct kv_cache *c, struct kv_head *h, int cap) {
    void *k = realloc(h->k, (size_t)cap * c->k_row);
    if (k) h->k = k;
    void *v = k ? realloc(h->v, (size_t)cap * c->v_row) : NULL;
    if (v) h->v = v;
    struct kvf_tag *t = v ? realloc(h->tag, (size_t)cap * sizeof *t) : NULL;
    if (t) h->tag = t;
    float *a = t && c->has_acc ? realloc(h->acc, (size_t)cap * KV_ACC_N * sizeof(float)) : NULL;
    if (a) h->acc = a;
    float *pr = t && c->has_prior ? realloc(h->prior, (size_t)cap * sizeof(float)) : NULL;
    if (pr) h->prior = pr;
    if (t && c->smooth_k && !h->smooth && (h->smooth = malloc(2 * sizeof(float) * (size_t)c->head_dim))) {
        for (int i = 0; i < c->head_dim; i++) h->smooth[i] = 0, h->smooth[c->head_dim + i] = 1;
        h->smooth_rows = 0;
    }
    if (!t || (c->has_acc && !a) || (c->has_prior && !pr) || (c->smooth_k && !h->smooth))
        return err_set(KVF_ERR_NOMEM, "kv cache: cannot grow to %d entries", cap);
    bytes_add(c, head_bytes(c, cap), head_bytes(c, h->cap));
    h->cap = cap;
    return KVF_OK;
}

/* Entries [from, from + len) of a head move to [to, to + len). */
static void head_move(const struct kv_cache *c, struct kv_head *h, int to, int from, int len) {
    const size_t kr = c->k_row, vr = c->v_row;
    memmove((uint8_t *)h->k + to * kr, (uint8_t *)h->k + from * kr, (size_t)len * kr);
    memmove((uint8_t *)h->v + to * vr, (uint8_t *)h->v + from * vr, (size_t)len * vr);
    memmove(h->tag + to, h->tag + from, (size_t)len * sizeof *h->tag);
    if (h->acc)
        memmove(h->acc + (size_t)to * KV_ACC_N, h->acc + (size_t)from * KV_ACC_N,
                (size_t)len * KV_ACC_N * sizeof(float));
    if (h->prior) memmove(h->prior + to, h->prior + from, (size_t)len * sizeof(float));
}

/* A head now holding its first n entries: storage is freed when empty, and
 * shrinks (a shrinking realloc) unless it is only a little over: a decode
 * step evicts one entry and appends the next, which must not reallocate
 * every time. Whatever stays allocated is counted. */
static enum kvf_status head_shrink(struct kv_cache *c, struct kv_head *h, int n) {
    h->n = n;
    if (n == 0) {
        head_release(c, h);
        return KVF_OK;
    }
    return h->cap > n + n / 4 + 16 ? head_grow(c, h, n) : KVF_OK;
}

enum kvf_status kv_cache_keep(struct kv_cache *c, int layer, int head, const int *keep, int n_keep) {
    struct kv_head *h = kv_cache_head(c, layer, head);
    if (n_keep < 0 || n_keep > h->n) return err_set(KVF_ERR_INTERNAL, "kv keep: %d of %d entries", n_keep, h->n);
    for (int i = 0; i < n_keep; i++)
        if (keep[i] < 0 || keep[i] >= h->n || (i > 0 && keep[i] <= keep[i - 1]))
            return err_set(KVF_ERR_INTERNAL, "kv keep: index %d (%d) out of order or range", i, keep[i]);
    /* Runs of consecutive kept entries move in one go. */
    for (int i = 0, r; i < n_keep; i = r) {
        for (r = i + 1; r < n_keep && keep[r] == keep[r - 1] + 1;) r++;
        if (keep[i] != i) head_move(c, h, i, keep[i], r - i);
    }
    return head_shrink(c, h, n_keep);
}

enum kvf_status kv_cache_drop_front(struct kv_cache *c, int layer, int head, int n) {
    struct kv_head *h = kv_cache_head(c, layer, head);
    if (n < 0 || n > h->n) return err_set(KVF_ERR_INTERNAL, "kv drop: %d of %d entries", n, h->n);
    if (n == 0) return KVF_OK;
    head_move(c, h, 0, n, h->n - n);
    return head_shrink(c, h, h->n - n);
}

enum kvf_status kv_cache_truncate(struct kv_cache *c, int layer, int head, int n) {
    struct kv_head *h = kv_cache_head(c, layer, head);
    if (n < 0 || n > h->n) return err_set(KVF_ERR_INTERNAL, "kv truncate: %d of %d entries", n, h->n);
    return head_shrink(c, h, n);
}

int kv_cache_most(const struct kv_cache *c) {
    int most = 0;
    for (int i = 0; i < c->n_layer * c->n_head_kv; i++) most = KVF_MAX(most, c->heads[i].n);
    return most;
}

enum kvf_status kv_cache_fit(struct kv_cache *c) {
    enum kvf_status st = KVF_OK;
    for (int l = 0; st == KVF_OK && l < c->n_layer; l++)
        for (int g = 0; st == KVF_OK && g < c->n_head_kv; g++) {
            struct kv_head *h = kv_cache_head(c, l, g);
            if (h->n == 0) head_release(c, h);
            else if (h->cap != h->n) st = head_grow(c, h, h->n);
        }
    return st;
}

enum kvf_status kv_cache_fill(struct kv_cache *c, int layer, int head, int n, int cap, const void *k, const void *v,
                              const struct kvf_tag *tag, const float *acc, const float *prior, const float *smooth,
                              int smooth_rows) {
    struct kv_head *h = kv_cache_head(c, layer, head);
    if (h->cap || n < 0 || cap < n)
        return err_set(KVF_ERR_INTERNAL, "kv fill: %d entries in %d, head not empty", n, cap);
    if (cap == 0) return KVF_OK;
    enum kvf_status st = head_grow(c, h, cap);
    if (st != KVF_OK) return st;
    memcpy(h->k, k, (size_t)n * c->k_row);
    memcpy(h->v, v, (size_t)n * c->v_row);
    memcpy(h->tag, tag, (size_t)n * sizeof *h->tag);
    if (h->acc && acc) memcpy(h->acc, acc, (size_t)n * KV_ACC_N * sizeof(float));
    else if (h->acc) memset(h->acc, 0, (size_t)n * KV_ACC_N * sizeof(float));
    for (int j = 0; h->prior && j < n; j++) h->prior[j] = prior ? prior[j] : -INFINITY;
    if (h->smooth && smooth) memcpy(h->smooth, smooth, 2 * sizeof(float) * (size_t)c->head_dim);
    if (h->smooth) h->smooth_rows = smooth_rows;
    h->n = n;
    c->peak_entries = KVF_MAX(c->peak_entries, n);
    return KVF_OK;
}

enum kvf_status kv_cache_copy(struct kv_cache *dst, const struct kv_cache *src) {
    if (dst->bytes || dst->n_layer != src->n_layer || dst->n_head_kv != src->n_head_kv || dst->type_k != src->type_k ||
        dst->type_v != src->type_v || dst->head_dim != src->head_dim)
        return err_set(KVF_ERR_INTERNAL, "kv copy: caches of different shapes");
    enum kvf_status st = KVF_OK;
    for (int l = 0; l < src->n_layer && st == KVF_OK; l++)
        for (int g = 0; g < src->n_head_kv && st == KVF_OK; g++) {
            const struct kv_head *from = &src->heads[(size_t)l * src->n_head_kv + g];
            st = kv_cache_fill(dst, l, g, from->n, from->cap, from->k, from->v, from->tag, from->acc, from->prior,
                               from->smooth, from->smooth_rows);
        }
    return st;
}

enum kvf_status kv_cache_reserve(struct kv_cache *c, int layer, int extra) {
    for (int g = 0; g < c->n_head_kv; g++) {
        struct kv_head *h = kv_cache_head(c, layer, g);
        if (h->n + extra <= h->cap) continue;
        /* Geometric growth keeps appends amortised O(1) during decode; a
         * small factor (1/8) keeps a compressed head within 1/8 + 16 entries
         * of its budget, below the slack at which kv_cache_keep shrinks. */
        int cap = KVF_MAX(h->n + extra, h->cap + h->cap / 8);
        cap = KVF_MAX(cap, 16);
        enum kvf_status st = head_grow(c, h, cap);
        if (st != KVF_OK) return st;
    }
    return KVF_OK;
}

/* Row j of rows stored as t, head_dim values each. */
static uint8_t *row_at(void *rows, enum dtype t, int head_dim, int j) {
    return (uint8_t *)rows + (size_t)j * dtype_row_bytes(t, head_dim);
}

static void key_store(struct kv_head *h, int d, int j, const float *k) {
    if (!h->smooth) {
        quant_quantize_row(h->type_k, k, row_at(h->k, h->type_k, d, j), d);
        return;
    }
    float x[QUANT_ROT_MAX];
    for (int i = 0; i < d; i++) x[i] = (k[i] - h->smooth[i]) / h->smooth[d + i];
    quant_quantize_row(h->type_k, x, row_at(h->k, h->type_k, d, j), d);
}

/* The shift and scale of a head's keys from its entries and the n keys
 * about to follow them (k: stride floats apart), which are then stored
 * anew: each channel's mean, and the square root of its largest distance
 * from it (QServe's SmoothAttention takes the square root of its largest
 * magnitude), no channel's scale under that of a thousandth of the widest
 * one's (a channel that never moved is not blown up). */
static void smooth_fit(struct kv_head *h, int d, const float *k, size_t stride, int n) {
    const int m = h->n + n;
    float *rows = malloc(sizeof(float) * (size_t)m * d), *mu = h->smooth, *lam = h->smooth + d;
    if (!rows) return; /* the old statistics stay: what is stored reads back as it did */
    for (int j = 0; j < h->n; j++) kv_head_key_row(h, d, j, rows + (size_t)j * d);
    for (int t = 0; t < n; t++) memcpy(rows + (size_t)(h->n + t) * d, k + (size_t)t * stride, sizeof(float) * d);
    float widest = 0;
    for (int i = 0; i < d; i++) {
        double sum = 0;
        for (int j = 0; j < m; j++) sum += rows[(size_t)j * d + i];
        mu[i] = (float)(sum / m), lam[i] = 0;
        for (int j = 0; j < m; j++) lam[i] = fmaxf(lam[i], fabsf(rows[(size_t)j * d + i] - mu[i]));
        widest = fmaxf(widest, lam[i]);
    }
    for (int i = 0; i < d; i++) lam[i] = widest > 0 ? sqrtf(fmaxf(lam[i], 1e-3f * widest)) : 1.0f;
    h->smooth_rows = m;
    for (int j = 0; j < h->n; j++) key_store(h, d, j, rows + (size_t)j * d);
    free(rows);
}

void kv_cache_append(struct kv_cache *c, int layer, const float *k, const float *v,
                     const struct kvf_tag *tags, int n) {
    const int d = c->head_dim, stride = c->n_head_kv * d;
    for (int g = 0; g < c->n_head_kv; g++) {
        struct kv_head *h = kv_cache_head(c, layer, g);
        if (h->smooth && n > 0 && h->smooth_rows < SMOOTH_ROWS && h->n + n >= 2 * h->smooth_rows)
            smooth_fit(h, d, k + (size_t)g * d, (size_t)stride, n);
        for (int t = 0; t < n; t++)
            kv_head_set_row(h, d, h->n + t, k + (size_t)t * stride + g * d, v + (size_t)t * stride + g * d);
        memcpy(h->tag + h->n, tags, (size_t)n * sizeof *tags);
        if (h->acc) memset(h->acc + (size_t)h->n * KV_ACC_N, 0, (size_t)n * KV_ACC_N * sizeof(float));
        for (int t = 0; h->prior && t < n; t++) h->prior[h->n + t] = -INFINITY;
        h->n += n;
        c->peak_entries = KVF_MAX(c->peak_entries, h->n);
    }
}

void kv_head_key_row(const struct kv_head *h, int head_dim, int j, float *out) {
    quant_dequant_row(h->type_k, row_at(h->k, h->type_k, head_dim, j), out, head_dim);
    kv_head_unsmooth(h, head_dim, out, 1);
}

void kv_head_unsmooth(const struct kv_head *h, int head_dim, float *rows, int n) {
    for (int j = 0; h->smooth && j < n; j++)
        for (int i = 0; i < head_dim; i++)
            rows[(size_t)j * head_dim + i] = rows[(size_t)j * head_dim + i] * h->smooth[head_dim + i] + h->smooth[i];
}

float kv_head_smooth_query(const struct kv_head *h, int head_dim, const float *q, float *qs) {
    float shift = 0;
    for (int i = 0; i < head_dim; i++) qs[i] = q[i] * h->smooth[head_dim + i], shift += q[i] * h->smooth[i];
    return shift;
}

void kv_head_value_row(const struct kv_head *h, int head_dim, int j, float *out) {
    quant_dequant_row(h->type_v, row_at(h->v, h->type_v, head_dim, j), out, head_dim);
}

void kv_head_set_row(struct kv_head *h, int head_dim, int j, const float *k, const float *v) {
    key_store(h, head_dim, j, k);
    quant_quantize_row(h->type_v, v, row_at(h->v, h->type_v, head_dim, j), head_dim);
}
