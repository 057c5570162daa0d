#include "kv/stat.h"

#include "kv/policy.h"

#include <stdlib.h>

static enum kvf_status stats_add(struct kv_stats *s, const struct kv_stat_ops *ops, const struct kv_stat_in *in,
                                 const struct kv_stats *like) {
    if (!ops || kv_stats_get(s, ops)) return KVF_OK;
    if (s->n == KV_STATS_MAX) return err_set(KVF_ERR_INTERNAL, "more than %d rule statistics", KV_STATS_MAX);
    const void *src = like ? kv_stats_get(like, ops) : NULL;
    void *st = NULL;
    const enum kvf_status e = src ? ops->dup(&st, src) : ops->init(&st, in);
    if (e != KVF_OK) return e;
    s->ops[s->n] = ops, s->st[s->n++] = st;
    return KVF_OK;
}

enum kvf_status kv_stats_init(struct kv_stats *s, const struct kv_stat_ops *own, bool every,
                              const struct kv_stat_in *in, const struct kv_stats *like) {
    *s = (struct kv_stats){0};
    enum kvf_status st = stats_add(s, own, in, like);
    for (int m = 0; every && st == KVF_OK && m < KV_METHOD_COUNT; m++) {
        const struct kv_stat_ops *ops = kv_rule_of((enum kv_method)m)->stat;
        if (ops && ops->everywhere) st = stats_add(s, ops, in, like);
    }
    if (st != KVF_OK) kv_stats_free(s);
    return st;
}

void kv_stats_free(struct kv_stats *s) {
    for (int i = 0; i < s->n; i++) s->ops[i]->free(s->st[i]);
    *s = (struct kv_stats){0};
}

void kv_stats_clear(struct kv_stats *s) {
    for (int i = 0; i < s->n; i++)
        if (s->ops[i]->clear) s->ops[i]->clear(s->st[i]);
}

void *kv_stats_get(const struct kv_stats *s, const struct kv_stat_ops *ops) {
    for (int i = 0; ops && i < s->n; i++)
        if (s->ops[i] == ops) return s->st[i];
    return NULL;
}

bool kv_stats_prior(const struct kv_stats *s) {
    for (int i = 0; i < s->n; i++)
        if (s->ops[i]->prior) return true;
    return false;
}

enum kvf_status kv_stats_queries(const struct kv_stats *s, int layer, const float *q, const int32_t *pos, int n) {
    enum kvf_status st = KVF_OK;
    for (int i = 0; st == KVF_OK && i < s->n; i++)
        if (s->ops[i]->queries) st = s->ops[i]->queries(s->st[i], layer, q, pos, n);
    return st;
}

enum kvf_status kv_stats_written(const struct kv_stats *s, const struct kv_stat_rows *r) {
    enum kvf_status st = KVF_OK;
    for (int i = 0; st == KVF_OK && i < s->n; i++)
        if (s->ops[i]->written) st = s->ops[i]->written(s->st[i], r);
    return st;
}

enum kvf_status kv_stats_take(struct kv_stats *dst, const struct kv_stats *src, const char *spec) {
    for (int i = 0; i < dst->n; i++) {
        const void *from = kv_stats_get(src, dst->ops[i]);
        if (!from || !dst->ops[i]->agrees(dst->st[i], from))
            return err_set(KVF_ERR_UNSUPPORTED, "fork: '%s' ranks by %s, which the session did not gather as it needs",
                           spec, dst->ops[i]->name);
    }
    for (int i = 0; i < dst->n; i++)
        if (dst->ops[i]->take) dst->ops[i]->take(dst->st[i], kv_stats_get(src, dst->ops[i]));
    return KVF_OK;
}
