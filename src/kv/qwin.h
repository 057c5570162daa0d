/* A query window: the latest queries of every layer (after RoPE) and their
 * positions, kept while the prompt runs, for the policies that score
 * entries by the attention of the prompt's last queries (SnapKV, PyramidKV,
 * CSP, block-wise SnapKV eviction). Positions differ between layers once a
 * reduce step has removed rows. */
#ifndef KVF_KV_QWIN_H
#define KVF_KV_QWIN_H

#include "core/common.h"

struct kv_qwin {
    float *q;     /* [n_layer][cap][qd] queries, oldest first */
    int32_t *pos; /* [n_layer][cap] their positions */
    int *n;       /* [n_layer] rows held (<= cap) */
    int n_layer, cap, qd;
};

/* An empty window of cap rows of qd floats per layer; cap 0 holds nothing
 * and allocates nothing. */
enum kvf_status kv_qwin_init(struct kv_qwin *w, int n_layer, int cap, int qd);
void kv_qwin_free(struct kv_qwin *w);
void kv_qwin_clear(struct kv_qwin *w);
static inline bool kv_qwin_on(const struct kv_qwin *w) { return w->cap > 0; }
/* Layer l's rows: held count in *n. */
static inline const float *kv_qwin_q(const struct kv_qwin *w, int l) { return w->q + (size_t)l * w->cap * w->qd; }
static inline const int32_t *kv_qwin_pos(const struct kv_qwin *w, int l) { return w->pos + (size_t)l * w->cap; }
/* Appends n queries q [n][qd] at positions pos [n] to layer l, dropping
 * the oldest beyond cap. */
void kv_qwin_push(struct kv_qwin *w, int l, const float *q, const int32_t *pos, int n);
/* dst (same n_layer and qd) gets the last min(dst->cap, n_last) rows of
 * every layer of src; false when src holds fewer in some layer. */
bool kv_qwin_copy_last(struct kv_qwin *dst, const struct kv_qwin *src, int n_last);
/* dst (same n_layer, cap and qd) gets every row src holds. */
void kv_qwin_copy(struct kv_qwin *dst, const struct kv_qwin *src);

#endif
