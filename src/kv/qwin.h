/* A query window: the latest queries of every layer (after RoPE) and their
 * positions, kept while the prompt runs, for the policies that score
 * entries by the attention of the prompt's last queries (SnapKV, PyramidKV,
 * CSP, block-wise SnapKV eviction). Positions differ between layers once a
 * reduce step has removed rows. */
#ifndef KVF_KV_QWIN_H
#define KVF_KV_QWIN_H

#include "core/common.h"

struct kv_qwin {
    float **q;     /* [n_layer] -> [rows[l]][qd] queries, oldest first */
    int32_t **pos; /* [n_layer] -> [rows[l]] their positions */
    int *n;        /* [n_layer] rows held (<= rows[l] <= cap) */
    int *rows;     /* [n_layer] rows allocated, grown up to cap (each layer apart: what a
                      session file holds for one layer is allocated for that layer) */
    int n_layer, cap, qd;
};

/* An empty window of up to cap rows of qd floats per layer, none allocated
 * yet; cap 0 holds nothing. */
enum kvf_status kv_qwin_init(struct kv_qwin *w, int n_layer, int cap, int qd);
/* Room for min(rows, cap) rows in every layer (in layer l), what is held
 * kept: a window takes memory for the queries a session has run, not for
 * its context. */
enum kvf_status kv_qwin_reserve(struct kv_qwin *w, int rows);
enum kvf_status kv_qwin_reserve_layer(struct kv_qwin *w, int l, int rows);
/* The most rows a layer holds; the most a layer has room for. */
int kv_qwin_most(const struct kv_qwin *w);
int kv_qwin_room(const struct kv_qwin *w);
void kv_qwin_free(struct kv_qwin *w);
void kv_qwin_clear(struct kv_qwin *w);
static inline bool kv_qwin_on(const struct kv_qwin *w) { return w->cap > 0; }
/* Layer l's rows: held count in *n. */
static inline const float *kv_qwin_q(const struct kv_qwin *w, int l) { return w->q[l]; }
static inline const int32_t *kv_qwin_pos(const struct kv_qwin *w, int l) { return w->pos[l]; }
/* Appends n queries q [n][qd] at positions pos [n] to layer l, dropping
 * the oldest beyond cap; the window was reserved for what it then holds. */
void kv_qwin_push(struct kv_qwin *w, int l, const float *q, const int32_t *pos, int n);
/* dst (same n_layer and qd) gets the last min(dst->cap, n_last) rows of
 * every layer of src; KVF_ERR_UNSUPPORTED (no message set) when src holds
 * fewer in some layer. */
enum kvf_status kv_qwin_copy_last(struct kv_qwin *dst, const struct kv_qwin *src, int n_last);
/* dst (same n_layer, cap and qd) gets every row src holds. */
enum kvf_status kv_qwin_copy(struct kv_qwin *dst, const struct kv_qwin *src);

#endif
