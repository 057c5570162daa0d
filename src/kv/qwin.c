#include "kv/qwin.h"

#include <stdlib.h>
#include <string.h>

enum kvf_status kv_qwin_init(struct kv_qwin *w, int n_layer, int cap, int qd) {
    *w = (struct kv_qwin){.n_layer = n_layer, .cap = KVF_MAX(cap, 0), .qd = qd};
    if (cap <= 0) return KVF_OK;
    w->q = calloc((size_t)n_layer, sizeof *w->q);
    w->pos = calloc((size_t)n_layer, sizeof *w->pos);
    w->n = calloc((size_t)n_layer, sizeof *w->n);
    w->rows = calloc((size_t)n_layer, sizeof *w->rows);
    if (w->q && w->pos && w->n && w->rows) return KVF_OK;
    kv_qwin_free(w);
    return err_set(KVF_ERR_NOMEM, "out of memory for a query window");
}

enum kvf_status kv_qwin_reserve_layer(struct kv_qwin *w, int l, int rows) {
    if (w->cap <= 0 || KVF_MIN(rows, w->cap) <= w->rows[l]) return KVF_OK;
    rows = KVF_MIN(w->cap, KVF_MAX(rows, 2 * w->rows[l])); /* doubling: decoding pushes a row at a time */
    if (!mem_resize(&w->q[l], (size_t)rows * w->qd, sizeof **w->q) ||
        !mem_resize(&w->pos[l], (size_t)rows, sizeof **w->pos))
        return err_set(KVF_ERR_NOMEM, "out of memory for a window of %d queries", rows);
    w->rows[l] = rows;
    return KVF_OK;
}

enum kvf_status kv_qwin_reserve(struct kv_qwin *w, int rows) {
    enum kvf_status st = KVF_OK;
    for (int l = 0; st == KVF_OK && l < w->n_layer; l++) st = kv_qwin_reserve_layer(w, l, rows);
    return st;
}

void kv_qwin_free(struct kv_qwin *w) {
    for (int l = 0; w->q && l < w->n_layer; l++) free(w->q[l]);
    for (int l = 0; w->pos && l < w->n_layer; l++) free(w->pos[l]);
    free(w->q);
    free(w->pos);
    free(w->n);
    free(w->rows);
    *w = (struct kv_qwin){0};
}

int kv_qwin_most(const struct kv_qwin *w) {
    int most = 0;
    for (int l = 0; w->n && l < w->n_layer; l++) most = KVF_MAX(most, w->n[l]);
    return most;
}

int kv_qwin_room(const struct kv_qwin *w) {
    int most = 0;
    for (int l = 0; w->rows && l < w->n_layer; l++) most = KVF_MAX(most, w->rows[l]);
    return most;
}

void kv_qwin_clear(struct kv_qwin *w) {
    for (int l = 0; w->n && l < w->n_layer; l++) w->n[l] = 0;
}

void kv_qwin_push(struct kv_qwin *w, int l, const float *q, const int32_t *pos, int n) {
    const int W = w->cap, QD = w->qd;
    float *dst = w->q[l];
    int32_t *dpos = w->pos[l];
    const int have = w->n[l], keep = n >= W ? 0 : KVF_MIN(have, W - n), add = KVF_MIN(n, W);
    memmove(dst, dst + (size_t)(have - keep) * QD, sizeof(float) * (size_t)keep * QD);
    memmove(dpos, dpos + (have - keep), sizeof(int32_t) * (size_t)keep);
    memcpy(dst + (size_t)keep * QD, q + (size_t)(n - add) * QD, sizeof(float) * (size_t)add * QD);
    memcpy(dpos + keep, pos + (n - add), sizeof(int32_t) * (size_t)add);
    w->n[l] = keep + add;
}

/* Layer l of dst gets the last n rows of src's. */
static void qwin_copy_layer(struct kv_qwin *dst, const struct kv_qwin *src, int l, int n) {
    const int from = src->n[l] - n;
    if (n > 0) {
        memcpy(dst->q[l], kv_qwin_q(src, l) + (size_t)from * src->qd, sizeof(float) * (size_t)n * dst->qd);
        memcpy(dst->pos[l], kv_qwin_pos(src, l) + from, sizeof(int32_t) * (size_t)n);
    }
    dst->n[l] = n;
}

enum kvf_status kv_qwin_copy_last(struct kv_qwin *dst, const struct kv_qwin *src, int n_last) {
    if (dst->cap <= 0) return KVF_OK;
    const int n = KVF_MIN(dst->cap, n_last);
    for (int l = 0; l < dst->n_layer; l++)
        if (!src->n || src->n[l] < n) return KVF_ERR_UNSUPPORTED;
    const enum kvf_status st = kv_qwin_reserve(dst, n);
    for (int l = 0; st == KVF_OK && l < dst->n_layer; l++) qwin_copy_layer(dst, src, l, n);
    return st;
}

enum kvf_status kv_qwin_copy(struct kv_qwin *dst, const struct kv_qwin *src) {
    enum kvf_status st = KVF_OK;
    for (int l = 0; st == KVF_OK && dst->cap > 0 && l < dst->n_layer; l++)
        if ((st = kv_qwin_reserve_layer(dst, l, src->n[l])) == KVF_OK) qwin_copy_layer(dst, src, l, src->n[l]);
    return st;
}
