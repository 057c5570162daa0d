/* Reduce stage (DESIGN section 5): vision tokens merged or dropped inside
 * the decoder during prefill, after a chosen layer, so that every later
 * layer sees and caches fewer of them. A rule looks at the rows of one
 * forward pass and says where each goes — into[i] = i: kept, another row:
 * merged into it, -1: dropped — and reduce_apply carries that out. The
 * rules live in src/kv/policy/{lightkv,tome,fastv}.c. */
#ifndef KVF_KV_REDUCE_H
#define KVF_KV_REDUCE_H

#include "core/common.h"

/* One image's (or video frame's) vision rows in a pass: rows
 * [first, first + n), laid out on a rows x cols grid (tag.row, tag.col). */
struct reduce_group {
    int first, n;
    int rows, cols;
    int modality, media;
};

/* The groups of n rows: maximal runs of non-text rows of one (modality,
 * media), the grid from the largest row and col seen. Returns their count
 * (at most n); out: room for n. */
int reduce_groups(const struct kvf_tag *tag, int n, struct reduce_group *out);
/* After rows were removed: each group's run found again (same order, same
 * (modality, media)); the grid is left as it was. A group with no row left
 * gets n = 0. */
void reduce_groups_update(const struct kvf_tag *tag, int n, struct reduce_group *g, int n_groups);

/* Bipartite soft matching (ToMe's, which LightKV reuses): the rows
 * rows[0..m) in order split into A (even places) and B (odd places); each A
 * row's most similar B row by cosine of feat ([.][dim]; ties: the earlier
 * B); the r = min(floor(ratio * m), m / 2) A rows of highest similarity
 * (ties: the earlier A) get into[a] = their B. Other into[] entries are left
 * alone. scratch: 3m floats. */
void reduce_bipartite(const float *feat, int dim, const int *rows, int m, double ratio, int *into, float *scratch);

/* LightKV (paper 003, section 3.2): the group's grid split into w x w
 * windows (the row at (r, c) is in window (r*w/rows, c*w/cols)); within each
 * window, reduce_bipartite on the hidden states x [.][dim]. Skipped (nothing
 * merged) when the group has fewer than 8 w^2 rows. scratch: 4 g->n floats. */
void reduce_lightkv(const float *x, int dim, const struct kvf_tag *tag, const struct reduce_group *g, int w,
                    double ratio, int *into, float *scratch);
/* ToMe (Bolya et al., 2023): reduce_bipartite over the whole group on
 * metric rows (the layer's keys before RoPE, averaged over kv heads).
 * scratch: 4 g->n floats. */
void reduce_tome(const float *metric, int dim, const struct reduce_group *g, double ratio, int *into, float *scratch);
/* FastV (Chen et al., 2024): of the v non-text rows among n, the
 * v - floor(v * (1 - ratio) + 0.5) with the lowest score (the attention the
 * last prompt token paid them) are dropped (into = -1); ties: the later row
 * goes first. Other into[] entries are left alone. scratch: 2n floats. */
void reduce_fastv(const float *score, const struct kvf_tag *tag, int n, double ratio, int *into, float *scratch);

/* Carries out into[0..n): each merge target b becomes the w-weighted mean
 *   x_b' = (w_b x_b + sum_{into[a]=b} w_a x_a) / (w_b + sum w_a)
 * (the plain mean when those weights sum to 0) and w_b' = that sum (ToMe's
 * sizes); rows whose into[] is not their own index are removed, the rest
 * keep their order, from x [n][dim], w [n] (NULL: unit weights, not
 * written), tag [n] and pos [n]. Returns the rows left. Targets must be kept
 * rows. scratch: 2n floats. */
int reduce_apply(float *x, int dim, float *w, struct kvf_tag *tag, int32_t *pos, const int *into, int n,
                 float *scratch);

#endif
