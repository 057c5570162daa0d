#include "kv/qwin.h"

#include <stdlib.h>
#include <string.h>

enum kvf_status kv_qwin_init(struct kv_qwin *w, int n_layer, int cap, int qd) {
    *w = (struct kv_qwin){.n_layer = n_layer, .cap = cap, .qd = qd};
    if (cap <= 0) return KVF_OK;
    w->q = malloc(sizeof(float) * (size_t)n_layer * cap * qd);
    w->pos = malloc(sizeof(int32_t) * (size_t)n_layer * cap);
    w->n = calloc((size_t)n_layer, sizeof(int));
    if (w->q && w->pos && w->n) return KVF_OK;
    kv_qwin_free(w);
    return err_set(KVF_ERR_NOMEM, "out of memory for a window of %d queries", cap);
}

void kv_qwin_free(struct kv_qwin *w) {
    free(w->q);
    free(w->pos);
    free(w->n);
    *w = (struct kv_qwin){0};
}

void kv_qwin_clear(struct kv_qwin *w) {
    for (int l = 0; w->n && l < w->n_layer; l++) w->n[l] = 0;
}

void kv_qwin_push(struct kv_qwin *w, int l, const float *q, const int32_t *pos, int n) {
    const int W = w->cap, QD = w->qd;
    float *dst = w->q + (size_t)l * W * QD;
    int32_t *dpos = w->pos + (size_t)l * W;
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
    memcpy(dst->q + (size_t)l * dst->cap * dst->qd, kv_qwin_q(src, l) + (size_t)from * src->qd,
           sizeof(float) * (size_t)n * dst->qd);
    memcpy(dst->pos + (size_t)l * dst->cap, kv_qwin_pos(src, l) + from, sizeof(int32_t) * (size_t)n);
    dst->n[l] = n;
}

bool kv_qwin_copy_last(struct kv_qwin *dst, const struct kv_qwin *src, int n_last) {
    if (dst->cap <= 0) return true;
    const int n = KVF_MIN(dst->cap, n_last);
    for (int l = 0; l < dst->n_layer; l++)
        if (!src->n || src->n[l] < n) return false;
    for (int l = 0; l < dst->n_layer; l++) qwin_copy_layer(dst, src, l, n);
    return true;
}

void kv_qwin_copy(struct kv_qwin *dst, const struct kv_qwin *src) {
    for (int l = 0; dst->cap > 0 && l < dst->n_layer; l++) qwin_copy_layer(dst, src, l, src->n[l]);
}
