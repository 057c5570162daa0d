#include "attn/attn.h"

#include "core/ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
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

/* Below this many queries in a block, scores and outputs are dot products
 * and axpys; from it on, two BLAS calls (decode is one query per head, where
 * a BLAS call's overhead costs more than it saves). */
#define ATTN_BLAS_MIN_ROWS 4

/* One block of queries of one head: scores = scale * Q K^T, masked and
 * softmaxed row by row, then O = S V. */
static void attn_block(const struct attn_params *p, const float *q, const int32_t *qpos, int i0,
                       int i1, int head, const struct kv_head *h, float *out, float *s) {
    const int d = p->head_dim, qstride = p->n_head * d, nb = i1 - i0;
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
        ops_softmax(row, jend);
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

void attn_forward(const struct attn_params *p, const float *q, const int32_t *qpos, int n_q,
                  const struct kv_head *kv, float *out, float *scratch, int n_threads) {
    const int group = p->n_head / p->n_head_kv;
    const int n_blocks = (n_q + ATTN_BLOCK - 1) / ATTN_BLOCK;
    const int n_tasks = p->n_head * n_blocks;
    int n_kv_max = 1;
    for (int g = 0; g < p->n_head_kv; g++) n_kv_max = KVF_MAX(n_kv_max, kv[g].n);

    /* Each of our threads runs one-thread BLAS calls (see ops_matmul). */
    openblas_set_num_threads(1);
    #pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1)
    for (int t = 0; t < n_tasks; t++) {
        const int head = t / n_blocks, b = t % n_blocks;
        const int i0 = b * ATTN_BLOCK, i1 = KVF_MIN(n_q, i0 + ATTN_BLOCK);
        float *s = scratch + (size_t)omp_get_thread_num() * ATTN_BLOCK * n_kv_max;
        attn_block(p, q, qpos, i0, i1, head, &kv[head / group], out, s);
    }
}
