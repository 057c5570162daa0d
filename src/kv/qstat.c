#include "kv/qstat.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

enum kvf_status kv_qstat_init(struct kv_qstat *s, int n_layer, int n_head, int d, int first) {
    *s = (struct kv_qstat){.first = first};
    if (n_layer <= 0) return KVF_OK;
    const size_t heads = (size_t)n_layer * n_head;
    s->sum = calloc(heads * d, sizeof(double));
    s->sq = calloc(heads * d * d, sizeof(double));
    s->n = calloc((size_t)n_layer, sizeof(long));
    if (!s->sum || !s->sq || !s->n) {
        kv_qstat_free(s);
        return err_set(KVF_ERR_NOMEM, "out of memory for query statistics (%zu MB)", heads * d * d * 8 >> 20);
    }
    s->n_layer = n_layer, s->n_head = n_head, s->d = d;
    return KVF_OK;
}

void kv_qstat_free(struct kv_qstat *s) {
    free(s->sum);
    free(s->sq);
    free(s->n);
    *s = (struct kv_qstat){0};
}

void kv_qstat_clear(struct kv_qstat *s) {
    if (!kv_qstat_on(s)) return;
    const size_t heads = (size_t)s->n_layer * s->n_head;
    memset(s->sum, 0, sizeof(double) * heads * s->d);
    memset(s->sq, 0, sizeof(double) * heads * s->d * s->d);
    memset(s->n, 0, sizeof(long) * (size_t)s->n_layer);
}

/* Fewer rows (decode steps) go through a loop: a BLAS call per head and
 * layer costs more than it saves (OpenBLAS wakes its threads each time). */
#define QSTAT_BLAS_ROWS 16

enum kvf_status kv_qstat_push(struct kv_qstat *s, int l, const float *q, const int32_t *pos, int n) {
    const int d = s->d, QD = s->n_head * d;
    int t0 = 0;
    while (t0 < n && pos[t0] < s->first) t0++;
    const int m = n - t0;
    if (m <= 0) return KVF_OK;
    /* Sums of squares in double: the covariance is E[q q^T] - mean mean^T,
     * and query means (Qwen's bias) are large beside their spread. */
    double *x = malloc(sizeof(double) * (size_t)m * QD);
    if (!x) return err_set(KVF_ERR_NOMEM, "out of memory for query statistics");
    for (size_t i = 0; i < (size_t)m * QD; i++) x[i] = q[(size_t)t0 * QD + i];
    for (int h = 0; h < s->n_head; h++) {
        const size_t hi = (size_t)l * s->n_head + h;
        double *sum = s->sum + hi * d;
        for (int t = 0; t < m; t++)
            for (int e = 0; e < d; e++) sum[e] += x[(size_t)t * QD + (size_t)h * d + e];
        double *sq = s->sq + hi * d * d;
        if (m >= QSTAT_BLAS_ROWS) {
            cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, d, m, 1.0, x + (size_t)h * d, QD, 1.0, sq, d);
            continue;
        }
        for (int t = 0; t < m; t++) {
            const double *r = x + (size_t)t * QD + (size_t)h * d;
            for (int a = 0; a < d; a++)
                for (int b = a; b < d; b++) sq[(size_t)a * d + b] += r[a] * r[b];
        }
    }
    s->n[l] += m;
    free(x);
    return KVF_OK;
}

void kv_qstat_copy(struct kv_qstat *dst, const struct kv_qstat *src) {
    if (!kv_qstat_on(dst) || !kv_qstat_on(src)) return;
    const size_t heads = (size_t)src->n_layer * src->n_head;
    memcpy(dst->sum, src->sum, sizeof(double) * heads * src->d);
    memcpy(dst->sq, src->sq, sizeof(double) * heads * src->d * src->d);
    memcpy(dst->n, src->n, sizeof(long) * (size_t)src->n_layer);
}

bool kv_qstat_moments(const struct kv_qstat *s, int l, int h, float *mean, float *cov) {
    if (!kv_qstat_on(s) || s->n[l] == 0) return false;
    const int d = s->d;
    const size_t hi = (size_t)l * s->n_head + h;
    const double inv = 1.0 / (double)s->n[l], *sum = s->sum + hi * d, *sq = s->sq + hi * d * d;
    for (int a = 0; a < d; a++)
        for (int b = a; b < d; b++)
            cov[(size_t)a * d + b] = cov[(size_t)b * d + a] =
                (float)(sq[(size_t)a * d + b] * inv - sum[a] * inv * (sum[b] * inv));
    for (int e = 0; e < d; e++) mean[e] = (float)(sum[e] * inv);
    return true;
}

/* As Expected Attention's statistic (kv/stat.h): from the first position
 * past the policy's sinks, in every session that gathers for any policy. */
static enum kvf_status stat_init(void **st, const struct kv_stat_in *in) {
    struct kv_qstat *s = malloc(sizeof *s);
    if (!s) return err_set(KVF_ERR_NOMEM, "out of memory for query statistics");
    const enum kvf_status e = kv_qstat_init(s, in->n_layer, in->n_head, in->head_dim, in->sinks);
    if (e != KVF_OK) free(s);
    else *st = s;
    return e;
}

static enum kvf_status stat_dup(void **st, const void *src) {
    const struct kv_qstat *from = src;
    const struct kv_stat_in in = {.n_layer = from->n_layer,
                                  .n_head = from->n_head,
                                  .head_dim = from->d,
                                  .sinks = from->first};
    const enum kvf_status e = stat_init(st, &in);
    if (e == KVF_OK) kv_qstat_copy(*st, from);
    return e;
}

static void stat_free(void *st) {
    if (st) kv_qstat_free(st);
    free(st);
}

static void stat_clear(void *st) { kv_qstat_clear(st); }

static bool stat_agrees(const void *st, const void *src) {
    const struct kv_qstat *a = st, *b = src;
    return a->n_layer == b->n_layer && a->n_head == b->n_head && a->d == b->d && a->first == b->first;
}

static void stat_take(void *st, const void *src) { kv_qstat_copy(st, src); }

static enum kvf_status stat_queries(void *st, int layer, const float *q, const int32_t *pos, int n) {
    return kv_qstat_push(st, layer, q, pos, n);
}

static void stat_save(const void *st, const struct kv_stat_io *io) {
    const struct kv_qstat *s = st;
    const size_t heads = (size_t)s->n_layer * s->n_head, d = (size_t)s->d;
    io->put(io->ctx, s->n, sizeof(long) * (size_t)s->n_layer);
    io->put(io->ctx, s->sum, sizeof(double) * heads * d);
    io->put(io->ctx, s->sq, sizeof(double) * heads * d * d);
}

static enum kvf_status stat_load(void *st, const struct kv_stat_io *io) {
    struct kv_qstat *s = st;
    const size_t heads = (size_t)s->n_layer * s->n_head, d = (size_t)s->d;
    if (!io->get(io->ctx, s->n, sizeof(long) * (size_t)s->n_layer) ||
        !io->get(io->ctx, s->sum, sizeof(double) * heads * d) ||
        !io->get(io->ctx, s->sq, sizeof(double) * heads * d * d))
        return err_set(KVF_ERR_FORMAT, "session file: truncated in its query statistics");
    for (int l = 0; l < s->n_layer; l++) /* a count of queries run since the reset: truncations do not lower it */
        if (s->n[l] < 0) return err_set(KVF_ERR_FORMAT, "session file: query statistics of a negative count");
    return KVF_OK;
}

const struct kv_stat_ops kv_stat_qstat = {
    .name = "query statistics",
    .everywhere = true,
    .init = stat_init,
    .dup = stat_dup,
    .free = stat_free,
    .clear = stat_clear,
    .agrees = stat_agrees,
    .take = stat_take,
    .queries = stat_queries,
    .save = stat_save,
    .load = stat_load,
};
