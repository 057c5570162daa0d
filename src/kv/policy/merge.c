/* Merge stage (docs/METHODS.md §5.4): before a head is compacted to its kept
 * entries, every evicted entry is folded into one kept entry, so that what
 * the evicted tokens contributed is not simply lost.
 * - LOOK-M (Wan et al., 2024, section 3.3; docs/METHODS.md §5.4.1): each evicted entry goes to the kept
 *   entry whose post-RoPE key is most similar (cosine; ties: the earlier
 *   kept entry), and the same assignment and weights apply to the values.
 *   With n_j entries assigned to kept entry j (x = key or value):
 *     avg       x_j' = (x_j + sum_e x_e) / (1 + n_j)
 *     pivotal   x_j' = (x_j + sum_e (x_e + x_j) / 2) / (1 + n_j)
 *     weighted  x_j' = (x_j + sum_e s_e x_e) / (1 + n_j), s_e that cosine.
 * - Elastic Cache: each evicted entry goes to the kept entry nearest in
 *   position (ties: the earlier), x_j' = the mean of x_j and its entries. */
#include "kv/policy.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MERGE_BLOCK 256 /* evicted keys compared with every kept key per sgemm */

static void normalise(float *dst, const float *src, int d) {
    double nn = 0.0;
    for (int e = 0; e < d; e++) nn += (double)src[e] * src[e];
    const float inv = nn > 0 ? (float)(1.0 / sqrt(nn)) : 0.0f;
    for (int e = 0; e < d; e++) dst[e] = src[e] * inv;
}

/* into[e], sim[e] for every evicted entry: the most similar kept key.
 * kept_rows: [n_keep][2][d] the kept keys and values as float32. */
static enum kvf_status assign_cosine(const struct kv_head *h, int d, int n_keep, const char *kept,
                                     const float *kept_rows, int *into, float *sim) {
    float *kn = malloc(sizeof(float) * (size_t)n_keep * d), *en = malloc(sizeof(float) * (size_t)MERGE_BLOCK * d);
    float *s = malloc(sizeof(float) * (size_t)MERGE_BLOCK * n_keep), *row = malloc(sizeof(float) * (size_t)d);
    int *ev = malloc(sizeof(int) * MERGE_BLOCK);
    enum kvf_status st = kn && en && s && row && ev ? KVF_OK : err_set(KVF_ERR_NOMEM, "merge: out of memory");
    for (int c = 0; st == KVF_OK && c < n_keep; c++) normalise(kn + (size_t)c * d, kept_rows + (size_t)c * 2 * d, d);
    for (int j = 0; st == KVF_OK && j < h->n;) {
        int nb = 0;
        for (; j < h->n && nb < MERGE_BLOCK; j++) {
            if (kept[j]) continue;
            kv_head_key_row(h, d, j, row);
            normalise(en + (size_t)nb * d, row, d);
            ev[nb++] = j;
        }
        if (nb == 0) break;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, n_keep, d, 1.0f, en, d, kn, d, 0.0f, s, n_keep);
        for (int b = 0; b < nb; b++) {
            const float *r = s + (size_t)b * n_keep;
            int best = 0;
            for (int c = 1; c < n_keep; c++)
                if (r[c] > r[best]) best = c;
            into[ev[b]] = best;
            sim[ev[b]] = r[best];
        }
    }
    free(kn), free(en), free(s), free(row), free(ev);
    return st;
}

/* into[e] for every evicted entry: the kept entry nearest in position. */
static void assign_position(const struct kv_head *h, const int *keep, int n_keep, const char *kept, int *into) {
    int c = 0; /* keep[c] is the first kept entry at or after j */
    for (int j = 0; j < h->n; j++) {
        while (c < n_keep && keep[c] < j) c++;
        if (kept[j]) continue;
        if (c == n_keep) into[j] = n_keep - 1;
        else if (c == 0) into[j] = 0;
        else into[j] = h->tag[j].pos - h->tag[keep[c - 1]].pos <= h->tag[keep[c]].pos - h->tag[j].pos ? c - 1 : c;
    }
}

enum kvf_status kv_merge_head(const struct kv_policy *p, struct kv_head *h, int d, const int *keep, int n_keep,
                              int *into) {
    const int n = h->n;
    if (p->merge == KV_MERGE_NONE || n_keep == 0 || n_keep == n) return KVF_OK;
    char *kept = calloc((size_t)n, 1);
    float *sim = malloc(sizeof(float) * (size_t)n), *ev = malloc(sizeof(float) * 2 * (size_t)d);
    /* [n_keep][2][d]: the kept keys and values, then the sums folded into them */
    float *rows = malloc(sizeof(float) * (size_t)n_keep * 2 * d), *sum = calloc((size_t)n_keep * 2 * d, sizeof(float));
    float *cnt = calloc((size_t)n_keep, sizeof(float));
    enum kvf_status st =
        kept && sim && ev && rows && sum && cnt ? KVF_OK : err_set(KVF_ERR_NOMEM, "merge: out of memory");
    for (int c = 0; st == KVF_OK && c < n_keep; c++) {
        kept[keep[c]] = 1, into[keep[c]] = c;
        kv_head_key_row(h, d, keep[c], rows + (size_t)c * 2 * d);
        kv_head_value_row(h, d, keep[c], rows + (size_t)c * 2 * d + d);
    }
    if (st == KVF_OK && p->merge == KV_MERGE_POSITION) assign_position(h, keep, n_keep, kept, into);
    else if (st == KVF_OK) st = assign_cosine(h, d, n_keep, kept, rows, into, sim);
    for (int j = 0; st == KVF_OK && j < n; j++) {
        if (kept[j]) continue;
        const int c = into[j];
        const float w = p->merge == KV_MERGE_WEIGHTED ? sim[j] : 1.0f;
        kv_head_key_row(h, d, j, ev);
        kv_head_value_row(h, d, j, ev + d);
        float *acc = sum + (size_t)c * 2 * d;
        const float *own = rows + (size_t)c * 2 * d;
        for (int e = 0; e < 2 * d; e++) acc[e] += p->merge == KV_MERGE_PIVOTAL ? 0.5f * (ev[e] + own[e]) : w * ev[e];
        cnt[c] += 1.0f;
    }
    for (int c = 0; st == KVF_OK && c < n_keep; c++) {
        if (cnt[c] == 0.0f) continue;
        float *own = rows + (size_t)c * 2 * d;
        const float *acc = sum + (size_t)c * 2 * d;
        for (int e = 0; e < 2 * d; e++) own[e] = (own[e] + acc[e]) / (1.0f + cnt[c]);
        kv_head_set_row(h, d, keep[c], own, own + d);
    }
    free(kept), free(sim), free(ev), free(rows), free(sum), free(cnt);
    return st;
}
