/* What the reduce rules share: finding each image's rows in a pass, the
 * bipartite matching of ToMe and LightKV, and carrying out a merge map. */
#include "kv/reduce.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool in_group(const struct kvf_tag *t, const struct reduce_group *g) {
    return t->modality == g->modality && t->media == g->media;
}

int reduce_groups(const struct kvf_tag *tag, int n, struct reduce_group *out) {
    int ng = 0;
    for (int i = 0; i < n;) {
        if (tag[i].modality == KVF_MOD_TEXT) {
            i++;
            continue;
        }
        struct reduce_group g = {.first = i, .modality = tag[i].modality, .media = tag[i].media};
        for (; i < n && in_group(&tag[i], &g); i++) {
            g.rows = KVF_MAX(g.rows, tag[i].row + 1);
            g.cols = KVF_MAX(g.cols, tag[i].col + 1);
        }
        g.n = i - g.first;
        out[ng++] = g;
    }
    return ng;
}

void reduce_groups_update(const struct kvf_tag *tag, int n, struct reduce_group *g, int n_groups) {
    for (int k = 0; k < n_groups; k++) g[k].first = n, g[k].n = 0;
    /* Each run of rows goes to the next group of its kind; a group takes
     * one run, so a later image never lands in a vanished earlier one. */
    for (int i = 0, k = 0; i < n && k < n_groups;) {
        if (tag[i].modality == KVF_MOD_TEXT) {
            i++;
            continue;
        }
        int q = k;
        while (q < n_groups && !in_group(&tag[i], &g[q])) q++;
        const int first = i;
        while (i < n && tag[i].modality == tag[first].modality && tag[i].media == tag[first].media) i++;
        if (q == n_groups) continue;
        g[q].first = first, g[q].n = i - first;
        k = q + 1;
    }
}

static double row_norm(const float *x, int dim) {
    double s = 0.0;
    for (int e = 0; e < dim; e++) s += (double)x[e] * x[e];
    return sqrt(s);
}

void reduce_bipartite(const float *feat, int dim, const int *rows, int m, double ratio, int *into, float *scratch) {
    const int na = (m + 1) / 2, nb = m / 2;
    const int r = KVF_MIN((int)floor(ratio * m), nb);
    if (r <= 0) return;
    float *best = scratch, *inv = scratch + na;  /* [na] best cosine, [nb] 1/|b| */
    int *match = (int *)(inv + nb), *sel = match + na; /* [na] best B, [na] the chosen A */
    for (int b = 0; b < nb; b++) {
        const double nn = row_norm(feat + (size_t)rows[2 * b + 1] * dim, dim);
        inv[b] = nn > 0 ? (float)(1.0 / nn) : 0.0f;
    }
    for (int a = 0; a < na; a++) {
        const float *xa = feat + (size_t)rows[2 * a] * dim;
        const double na_ = row_norm(xa, dim);
        best[a] = -INFINITY, match[a] = 0;
        for (int b = 0; b < nb; b++) {
            const float *xb = feat + (size_t)rows[2 * b + 1] * dim;
            double dot = 0.0;
            for (int e = 0; e < dim; e++) dot += (double)xa[e] * xb[e];
            const float c = na_ > 0 ? (float)(dot / na_ * inv[b]) : 0.0f;
            if (c > best[a]) best[a] = c, match[a] = b;
        }
    }
    const int k = kv_select(na, best, r, sel);
    for (int i = 0; i < k; i++) into[rows[2 * sel[i]]] = rows[2 * match[sel[i]] + 1];
}

/* The share of row i in its target b's mean: w / total, or 1 / count
 * when the weights sum to 0. */
static float share_of(const float *w, const float *tot, const float *cnt, int i, int b) {
    return tot[b] > 0 ? (w ? w[i] : 1.0f) / tot[b] : 1.0f / cnt[b];
}

/* x [n][dim] merged as into[] says (tot, cnt: each target's weight sum
 * and rows). */
static void merge_rows(float *x, int dim, const float *w, const int *into, const float *tot, const float *cnt,
                       int n) {
    for (int b = 0; b < n; b++) {
        if (into[b] != b || cnt[b] == 1.0f) continue;
        const float s = share_of(w, tot, cnt, b, b);
        for (int e = 0; e < dim; e++) x[(size_t)b * dim + e] *= s;
    }
    for (int a = 0; a < n; a++) {
        const int b = into[a];
        if (b < 0 || b == a) continue;
        const float s = share_of(w, tot, cnt, a, b);
        for (int e = 0; e < dim; e++) x[(size_t)b * dim + e] += s * x[(size_t)a * dim + e];
    }
}

int reduce_apply(const struct reduce_rows *rows, float *w, const int *into, int n, float *scratch) {
    float *tot = scratch, *cnt = scratch + n; /* per target: weight sum, rows */
    for (int i = 0; i < n; i++) tot[i] = into[i] == i ? (w ? w[i] : 1.0f) : 0.0f, cnt[i] = into[i] == i;
    for (int a = 0; a < n; a++)
        if (into[a] >= 0 && into[a] != a) tot[into[a]] += w ? w[a] : 1.0f, cnt[into[a]] += 1.0f;
    merge_rows(rows->x, rows->dim, w, into, tot, cnt, n);
    if (rows->extra) merge_rows(rows->extra, rows->extra_dim, w, into, tot, cnt, n);
    int o = 0;
    for (int i = 0; i < n; i++) {
        if (into[i] != i) continue;
        if (w) w[o] = tot[i];
        if (o != i) {
            memmove(rows->x + (size_t)o * rows->dim, rows->x + (size_t)i * rows->dim, sizeof(float) * rows->dim);
            if (rows->extra)
                memmove(rows->extra + (size_t)o * rows->extra_dim, rows->extra + (size_t)i * rows->extra_dim,
                        sizeof(float) * (size_t)rows->extra_dim);
            rows->tag[o] = rows->tag[i];
            rows->pos[o] = rows->pos[i];
            if (rows->rpos) memcpy(rows->rpos[o], rows->rpos[i], sizeof rows->rpos[o]);
        }
        o++;
    }
    return o;
}

enum kvf_status reduce_state_init(struct reduce_state *r, const struct kv_policy *p, int n_layer, int n_head_kv,
                                  int head_dim) {
    *r = (struct reduce_state){.rule = kv_reduce_rule(p->reduce), .ops = kv_reduce_ops_of(p->reduce),
                               .ratio = p->reduce_ratio, .head_dim = head_dim, .n_head_kv = n_head_kv};
    if ((r->n_steps = kv_reduce_stages(p, n_layer, r->layer, r->window)) < 0) {
        r->n_steps = 0;
        return KVF_ERR_INVALID_ARG;
    }
    return KVF_OK;
}

enum kvf_status reduce_state_reserve_keys(struct reduce_state *r, int n_keys) {
    if (!(r->rule->needs & KV_NEEDS_LAST_ROW) || n_keys <= r->stat_cap) return KVF_OK;
    if (!mem_resize(&r->stat, (size_t)r->n_head_kv * n_keys, sizeof *r->stat))
        return err_set(KVF_ERR_NOMEM, "out of memory for the reduce stage's attention sums");
    r->stat_cap = n_keys;
    return KVF_OK;
}

enum kvf_status reduce_state_reserve(struct reduce_state *r, int rows) {
    if (r->n_steps == 0 || rows <= r->rows_cap) return KVF_OK;
    const size_t R = (size_t)rows, scratch = KVF_MAX(4 * R, 64 * ((size_t)r->head_dim + R));
    if (!mem_resize(&r->w, R, sizeof *r->w) || !mem_resize(&r->size, R, sizeof *r->size) ||
        !mem_resize(&r->metric, R * r->head_dim, sizeof *r->metric) ||
        !mem_resize(&r->scratch, scratch, sizeof *r->scratch) || !mem_resize(&r->into, R, sizeof *r->into) ||
        !mem_resize(&r->groups, R, sizeof *r->groups))
        return err_set(KVF_ERR_NOMEM, "out of memory for a reduce pass of %d rows", rows);
    r->rows_cap = rows;
    return KVF_OK;
}

void reduce_state_free(struct reduce_state *r) {
    free(r->w);
    free(r->size);
    free(r->metric);
    free(r->scratch);
    free(r->stat);
    free(r->into);
    free(r->groups);
    *r = (struct reduce_state){0};
}

int reduce_step_at(const struct reduce_state *r, int l) {
    for (int i = 0; i < r->n_steps; i++)
        if (r->layer[i] == l + 1) return i;
    return -1;
}

const struct kv_reduce_ops *kv_reduce_ops_of(enum kv_reduce k) {
    static const struct kv_reduce_ops *const ops[KV_REDUCE_COUNT] = {
#define KV_REDUCE_RULE(ID, name) [KV_REDUCE_##ID] = &kv_reduce_ops_##name,
#include "kv/rules.def"
    };
    return (unsigned)k < KV_REDUCE_COUNT ? ops[k] : NULL;
}

float *reduce_map(const struct reduce_view *v, struct reduce_state *r, int step) {
    for (int i = 0; i < v->n; i++) r->into[i] = i;
    reduce_groups_update(v->tag, v->n - 1, r->groups, r->n_groups);
    return r->ops->step(v, r, step);
}

int kv_reduce_stages(const struct kv_policy *p, int n_layer, int *layer, int *window) {
    static const int def_layer[3] = {12, 18, 24}, def_window[3] = {4, 2, 1};
    if (p->reduce == KV_REDUCE_NONE) return 0;
    int n = 0;
    if (p->n_stages > 0) {
        for (; n < p->n_stages; n++) {
            if (p->stage_layer[n] >= n_layer) {
                err_set(KVF_ERR_INVALID_ARG, "kv policy: a reduce step after layer %d needs a later layer; the model "
                        "has %d", p->stage_layer[n], n_layer);
                return -1;
            }
            layer[n] = p->stage_layer[n];
            window[n] = p->n_windows ? p->stage_window[n] : def_window[n % 3];
        }
        return n;
    }
    for (int i = 0; i < 3 && n_layer > 1; i++) {
        const int l = KVF_MAX(1, KVF_MIN(n_layer - 1, (int)floor(def_layer[i] * (double)n_layer / 32.0 + 0.5)));
        if (n > 0 && layer[n - 1] >= l) continue;
        layer[n] = l;
        window[n++] = p->n_windows ? p->stage_window[i] : def_window[i];
    }
    return n;
}
