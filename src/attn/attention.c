#include "attn/attn.h"

#include "core/ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

size_t attn_scratch_bytes(int n_kv, int n_threads) {
    return (size_t)n_threads * ATTN_BLOCK * (size_t)KVF_MAX(n_kv, 1) * sizeof(float);
}

/* Number of leading entries with pos <= p (entries are in position order). */
static int visible_end(const struct kv_head *h, int32_t p) {
    int lo = 0, hi = h->n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (h->tag[mid].pos <= p) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* First entry with pos > p - window. */
static int visible_begin(const struct kv_head *h, int32_t p, int window) {
    return window > 0 ? visible_end(h, p - window) : 0;
}

/* A thread's partial statistics: [requested arrays][n_head_kv][len]; slot[k]
 * is where statistic k sits among the requested ones. */
struct stats_part {
    const struct attn_stats *st;
    float *buf;
    int n_head_kv, len;
    const int *slot;
};

static float *part_array(const struct stats_part *sp, int k, int g) {
    return sp->buf + ((size_t)sp->slot[k] * sp->n_head_kv + g) * sp->len;
}

static void add_row(float *a, const float *row, int jb, int je, float w) {
    for (int j = jb; j < je; j++) a[j] += w * row[j];
}

/* Adds query i's softmax row (visible columns [jb, je)) to kv head g's
 * partial sums; w = 1/group averages the query heads sharing g. nsm: the
 * row's n-softmax / softmax ratio, S / (S + n e^-max). */
static void stats_row(const struct stats_part *sp, int g, int i, const float *row, int jb, int je, float w,
                      float nsm) {
    const struct attn_stats *st = sp->st;
    if (st->a[ATTN_STAT_SUM]) add_row(part_array(sp, ATTN_STAT_SUM, g), row, jb, je, w);
    if (st->a[ATTN_STAT_SQ]) {
        float *a = part_array(sp, ATTN_STAT_SQ, g);
        for (int j = jb; j < je; j++) a[j] += w * row[j] * row[j];
    }
    if (st->a[ATTN_STAT_COUNT]) {
        float *a = part_array(sp, ATTN_STAT_COUNT, g);
        for (int j = jb; j < je; j++) a[j] += w;
    }
    const int mod = st->qtag ? ATTN_STAT_TEXT + st->qtag[i].modality : -1;
    if (mod >= 0 && st->a[mod]) add_row(part_array(sp, mod, g), row, jb, je, w);
    if (i < st->win_first) return;
    if (st->a[ATTN_STAT_WIN]) add_row(part_array(sp, ATTN_STAT_WIN, g), row, jb, je, w);
    if (st->a[ATTN_STAT_WIN_NSM]) add_row(part_array(sp, ATTN_STAT_WIN_NSM, g), row, jb, je, w * nsm);
}

/* Below this many queries in a block, scores and outputs are dot products
 * and axpys; from it on, two BLAS calls (decode is one query per head, where
 * a BLAS call's overhead costs more than it saves). */
#define ATTN_BLAS_MIN_ROWS 4

/* One block of queries of one head: scores = scale * Q K^T, masked and
 * softmaxed row by row (statistics taken from the rows), then O = S V. */
static void attn_block(const struct attn_params *p, const float *q, const int32_t *qpos, int i0, int i1, int head,
                       const struct kv_head *h, float *out, float *s, const struct stats_part *sp) {
    const int d = p->head_dim, qstride = p->n_head * d, nb = i1 - i0;
    const int group = p->n_head / p->n_head_kv;
    /* Keys past the block's last query are masked for every row of it. */
    const int jend = p->bidirectional ? h->n : visible_end(h, qpos[i1 - 1]);
    const size_t qoff = (size_t)i0 * qstride + (size_t)head * d;
    const bool blas = nb >= ATTN_BLAS_MIN_ROWS && jend > 0;
    if (blas)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, jend, d, p->scale, q + qoff, qstride, h->k, d,
                    0.0f, s, jend);
    for (int i = i0; i < i1; i++) {
        float *row = s + (size_t)(i - i0) * jend;
        const float *qi = q + (size_t)i * qstride + (size_t)head * d;
        const int jb = p->bidirectional ? 0 : visible_begin(h, qpos[i], p->window);
        const int je = p->bidirectional ? jend : visible_end(h, qpos[i]);
        for (int j = 0; j < jb; j++) row[j] = -INFINITY;
        for (int j = je; j < jend; j++) row[j] = -INFINITY;
        if (!blas)
            for (int j = jb; j < je; j++) row[j] = vec_dot_f32(qi, h->k + (size_t)j * d, d) * p->scale;
        double sum;
        const float mx = ops_softmax_sum(row, jend, &sum);
        if (sp && je > jb) {
            /* n-softmax exp(x)/(n + sum exp(x)) = softmax * S / (S + n e^-max), S = sum exp(x - max). */
            const float nsm = (float)(sum / (sum + sp->st->nsm_n * exp(-(double)mx)));
            stats_row(sp, head / group, i, row, jb, je, 1.0f / group, nsm);
        }
        if (!blas) {
            float *o = out + (size_t)i * qstride + (size_t)head * d;
            memset(o, 0, sizeof(float) * d);
            for (int j = jb; j < je; j++)
                if (row[j] != 0.0f) vec_axpy_f32(o, row[j], h->v + (size_t)j * d, d);
        }
    }
    if (blas)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, d, jend, 1.0f, s, jend, h->v, d, 0.0f,
                    out + qoff, qstride);
}

enum kvf_status attn_forward(const struct attn_params *p, const float *q, const int32_t *qpos, int n_q,
                             const struct kv_head *kv, float *out, float *scratch, int n_threads,
                             const struct attn_stats *stats) {
    const int group = p->n_head / p->n_head_kv;
    const int n_blocks = (n_q + ATTN_BLOCK - 1) / ATTN_BLOCK;
    const int n_tasks = p->n_head * n_blocks;
    int n_kv_max = 1;
    for (int g = 0; g < p->n_head_kv; g++) n_kv_max = KVF_MAX(n_kv_max, kv[g].n);
    if (stats && stats->stride < n_kv_max)
        return err_set(KVF_ERR_INTERNAL, "attention statistics of stride %d for %d entries", stats->stride, n_kv_max);

    /* Threads add into private partial sums (blocks of one head run on
     * several threads), folded into the caller's arrays at the end; only the
     * requested statistics, over the entries there are. */
    int slot[ATTN_STAT_N], n_req = 0;
    for (int k = 0; stats && k < ATTN_STAT_N; k++) slot[k] = stats->a[k] ? n_req++ : -1;
    float *parts = NULL;
    const size_t part_len = (size_t)n_req * p->n_head_kv * (size_t)n_kv_max;
    if (stats && !(parts = calloc((size_t)n_threads * part_len + 1, sizeof(float))))
        return err_set(KVF_ERR_NOMEM, "out of memory for attention statistics");

    /* Each of our threads runs one-thread BLAS calls (see ops_matmul). */
    openblas_set_num_threads(1);
    #pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1)
    for (int t = 0; t < n_tasks; t++) {
        const int head = t / n_blocks, b = t % n_blocks, th = omp_get_thread_num();
        const int i0 = b * ATTN_BLOCK, i1 = KVF_MIN(n_q, i0 + ATTN_BLOCK);
        float *s = scratch + (size_t)th * ATTN_BLOCK * n_kv_max;
        const struct stats_part sp = {stats, parts + (size_t)th * part_len, p->n_head_kv, n_kv_max, slot};
        attn_block(p, q, qpos, i0, i1, head, &kv[head / group], out, s, stats ? &sp : NULL);
    }
    for (int k = 0; stats && k < ATTN_STAT_N; k++) {
        if (!stats->a[k]) continue;
        for (int th = 0; th < n_threads; th++) {
            const struct stats_part sp = {stats, parts + (size_t)th * part_len, p->n_head_kv, n_kv_max, slot};
            for (int g = 0; g < p->n_head_kv; g++) {
                const float *src = part_array(&sp, k, g);
                float *dst = stats->a[k] + (size_t)g * stats->stride;
                for (int j = 0; j < kv[g].n; j++) dst[j] += src[j];
            }
        }
    }
    free(parts);
    return KVF_OK;
}
