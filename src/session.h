/* Internal layout of a session: what one conversation owns. */
#ifndef KVF_SESSION_H
#define KVF_SESSION_H

#include "kv/cache.h"
#include "kv/policy.h"
#include "kv/reduce.h"
#include "model/model.h"

struct kvf_session {
    const struct kvf_model *model;
    struct kvf_session_params params; /* resolved: n_ctx, n_batch, n_threads > 0 */
    struct kv_cache kv;
    int n_past;                       /* positions processed so far */
    float *logits;                    /* [n_vocab] after the last token */
    bool has_logits;

    /* Scratch for one forward pass of up to rows_cap rows (R below): a batch
     * of n_batch tokens, or a whole prompt when a reduce stage runs it in
     * one pass (session_reserve_rows). gate, up and the matmul scratch stay
     * at n_batch rows (B): the decoder feeds them a batch at a time. */
    int rows_cap;
    float *x, *xn;                    /* [R][n_embd] residual stream, normed copy */
    float *q, *k, *v, *att;           /* [R][n_head*head_dim], [R][n_head_kv*head_dim] x2, [R][n_head*head_dim] */
    float *gate, *up;                 /* [B][n_ff] */
    int32_t *pos;                     /* [R] true positions of the pass's rows */
    struct kvf_tag *btag;             /* [R] tags of the pass's rows */
    struct kvf_tag *tags;             /* [tags_cap] tag of every position so far ([n_past] used) */
    int tags_cap;

    struct kv_policy policy;
    /* The latest `policy.window` queries of every layer (after RoPE), for
     * policies scored by the attention of the prompt's last queries. */
    float *qwin;                      /* [n_layer][qwin_cap][n_head*head_dim] or NULL */
    int32_t *qwin_pos;                /* [n_layer][qwin_cap] their positions */
    int *qwin_n;                      /* [n_layer] rows held (<= qwin_cap: the policy's window,
                                         or for csp with window=0 the most recent entries it can keep) */
    struct kvf_tag *qwin_tag;         /* [qwin_cap] one layer's tags, for window_attention */
    int qwin_cap;
    /* Block-wise question=1: the question's queries, from a trial run of it
     * alone (same layout as qwin); probing while that runs. */
    float *qprox;
    int32_t *qprox_pos;
    int *qprox_n;
    bool probing;
    /* Reduce stage: steps after r_layer[i] layers (src/kv/reduce.h), and
     * their per-row state, [R] unless said: weights (lightkv's text
     * attention, fastv's scores), tome's sizes and metric [R][head_dim],
     * merge map, the pass's images, scratch (max(4 R, 64 (head_dim + R))
     * floats), fastv's attention [n_head_kv][n_ctx]. */
    int n_reduce, r_layer[KV_REDUCE_MAX], r_window[KV_REDUCE_MAX];
    float *r_w, *r_size, *r_metric, *r_scratch, *r_stat;
    int *r_into;
    struct reduce_group *r_groups;
    int n_groups;
    /* Attention statistics of one layer's call, before they are added to the
     * entries' running sums (kv.has_acc): [KV_ACC_N][n_head_kv][n_ctx]. */
    float *acc_tmp;
    /* Compression state: after kvf_session_compress the decode stage keeps
     * each head within budget. n0: [n_layer][n_head_kv] sizes right after it. */
    bool compressed;
    int *n0;
    int decode_steps;
    /* Compression scratch, sized for n_ctx entries: scores, indices, work
     * space, window attention [n_head_kv][n_ctx], window output. */
    float *c_score, *c_tmp, *c_win, *c_win2, *c_out, *c_layer;
    int *c_idx, *c_into;
    /* Per-layer budgets as shares of the tokens seen (budget=prefix), and
     * the Gini coefficient of each layer's priority curve when searched. */
    double *layer_ratio, *layer_gini;
    bool have_ratio;
    /* Merges done, per (layer, kv head). */
    struct merge_log {
        struct kvf_kv_merge *m;
        int n, cap;
    } *merges;
    void *mm_scratch;                 /* ops_matmul scratch */
    float *attn_scratch;              /* attn_forward scratch for n_ctx keys */
};

/* Records in every kv head's merge log of layer l that position `from`
 * was folded into position `into` (a no-op for policies without logs). */
enum kvf_status session_merge_note(struct kvf_session *s, int l, int32_t from, int32_t into);
/* Fills rows [at, at + n) of the pass: token ids (tokens, already checked)
 * or input embeddings (embd [n][n_embd]), with tags[0..n) (NULL: text; pos
 * is set by decoder_forward). */
void decoder_input(struct kvf_session *s, int at, const int32_t *tokens, const float *embd, const struct kvf_tag *tags,
                   int n);
/* Runs the pass's n rows (n <= rows_cap) at positions n_past.. through the
 * model, records their tags, appends their keys/values to the cache (fewer
 * of them in the layers after a reduce step) and writes logits: every row
 * into all_logits ([n][n_vocab]) when given, the last row into s->logits. */
enum kvf_status decoder_forward(struct kvf_session *s, int n, float *all_logits);

#endif
