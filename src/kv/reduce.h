/* Reduce stage (docs/METHODS.md §5.6): vision tokens merged or dropped inside
 * the decoder during prefill, after a chosen layer, so that every later
 * layer sees and caches fewer of them. A rule looks at the rows of one
 * forward pass (struct reduce_view) and says where each goes — into[i] = i:
 * kept, another row: merged into it, -1: dropped — and reduce_apply carries
 * that out. Each rule is one file under src/kv/policy/ (lightkv.c, tome.c,
 * fastv.c) whose descriptor carries its hooks (struct kv_reduce_ops) and one
 * KV_REDUCE_RULE line of kv/rules.def; the decoder only orchestrates. */
#ifndef KVF_KV_REDUCE_H
#define KVF_KV_REDUCE_H

#include "kv/policy.h"

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

/* LightKV (docs/METHODS.md §5.6.3): the group's grid split into w x w
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

/* The rows a reduce step rearranges: x [n][dim], extra [n][extra_dim]
 * (Qwen3-VL's DeepStack features still to be added; NULL: none), tag [n],
 * pos [n] and rpos [n] (M-RoPE positions; NULL: none). */
struct reduce_rows {
    float *x, *extra;
    int dim, extra_dim;
    struct kvf_tag *tag;
    int32_t *pos;
    int32_t (*rpos)[3];
};
/* Carries out into[0..n): each merge target b becomes the w-weighted mean
 *   x_b' = (w_b x_b + sum_{into[a]=b} w_a x_a) / (w_b + sum w_a)
 * (the plain mean when those weights sum to 0; extra likewise) and w_b' =
 * that sum (ToMe's sizes; w NULL: unit weights, not written); rows whose
 * into[] is not their own index are removed, the rest keep their order. A
 * merged row keeps its target's tag and positions. Returns the rows left.
 * Targets must be kept rows. scratch: 2n floats. */
int reduce_apply(const struct reduce_rows *rows, float *w, const int *into, int n, float *scratch);

/* The pass as a rule sees it at a step's layer, borrowed from the decoder. */
struct reduce_view {
    int n;                 /* rows of the pass */
    float *x;              /* [n][dim] hidden states after the layer (NULL in the metric hook) */
    int dim;
    const float *q, *k;    /* the layer's queries [n][n_head * head_dim] and keys [n][n_head_kv * head_dim]:
                              before RoPE in the metric hook, after it in the step hook */
    const struct kvf_tag *tag; /* [n] (NULL in the metric hook) */
    int n_head, n_head_kv, head_dim;
    float attn_scale;
    const float *last_attn; /* KV_NEEDS_LAST_ROW: [n] the attention the last row paid each row in the layer, the
                               sum over a kv head's query heads averaged over the kv heads; else NULL */
};

struct reduce_state;
/* A reduce rule's hooks, kv_reduce_ops_<name> in the rule's file. */
struct kv_reduce_ops {
    /* Before RoPE in a step's layer (NULL: none): what the step will need
     * of the unrotated rows (ToMe's metric, into r->metric). */
    void (*metric)(const struct reduce_view *v, struct reduce_state *r);
    /* The step (index `step`, after layer r->layer[step]): into[0..n) set
     * for the rows that may go (all but the last, whose logits are the
     * prompt's; into[] starts as the identity, and r->groups as found
     * again for them). Returns the weights reduce_apply merges by ([n],
     * updated by it; NULL: unit weights). */
    float *(*step)(const struct reduce_view *v, struct reduce_state *r, int step);
    /* What the spec parser checks beyond each key's range (NULL: nothing):
     * a message when the policy's settings do not fit together, else NULL. */
    const char *(*check)(const struct kv_policy *p);
};

#define KV_REDUCE_RULE(ID, name) extern const struct kv_reduce_ops kv_reduce_ops_##name;
#include "kv/rules.def"
/* The hooks of reduce option k (NULL for KV_REDUCE_NONE or out of range). */
const struct kv_reduce_ops *kv_reduce_ops_of(enum kv_reduce k);

/* The reduce steps for a model of n_layer layers: stage_layer[] as given,
 * or the defaults for 32 layers scaled (round(l * n_layer / 32), kept in
 * [1, n_layer - 1], a step falling on an earlier one's layer dropped).
 * Returns their count, or -1 (error set) when a given layer is not below
 * n_layer. */
int kv_reduce_stages(const struct kv_policy *p, int n_layer, int *layer, int *window);

/* A session's reduce stage: its steps and the per-row state of one pass of
 * up to rows_cap rows (R): weights (lightkv's text attention, the last
 * row's attention under KV_NEEDS_LAST_ROW) [R], tome's sizes [R] and metric
 * [R][head_dim], the merge map [R], the pass's images [R], scratch (max(4 R,
 * 64 (head_dim + R)) floats), and, under KV_NEEDS_LAST_ROW, the layer's
 * attention sums [n_head_kv][stat_cap] for up to stat_cap entries a head. */
struct reduce_state {
    const struct kv_rule *rule; /* the policy's reduce option (its needs) */
    const struct kv_reduce_ops *ops; /* its hooks (NULL: no steps) */
    double ratio;           /* the policy's reduce_ratio */
    int n_steps, layer[KV_REDUCE_MAX], window[KV_REDUCE_MAX];
    int rows_cap, head_dim, n_head_kv, stat_cap;
    float *w, *size, *metric, *scratch, *stat;
    int *into;
    struct reduce_group *groups;
    int n_groups;
};

/* The policy's steps for the model's depth (kv_reduce_stages: an error for
 * a step past the last layer). */
enum kvf_status reduce_state_init(struct reduce_state *r, const struct kv_policy *p, int n_layer, int n_head_kv,
                                  int head_dim);
/* Grows the per-row buffers to `rows` rows (a no-op without steps). */
enum kvf_status reduce_state_reserve(struct reduce_state *r, int rows);
/* Grows fastv's attention sums to heads of n_keys entries (a no-op
 * without KV_NEEDS_LAST_ROW). */
enum kvf_status reduce_state_reserve_keys(struct reduce_state *r, int n_keys);
void reduce_state_free(struct reduce_state *r);
/* The step that follows layer l (l + 1 layers done), or -1. */
int reduce_step_at(const struct reduce_state *r, int l);
/* The rule's map for step `step` of the pass in v, into r->into (see
 * kv_reduce_ops.step); returns the weights to merge by. */
float *reduce_map(const struct reduce_view *v, struct reduce_state *r, int step);

#endif
