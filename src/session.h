/* Internal layout of a session: what one conversation owns. */
#ifndef KVF_SESSION_H
#define KVF_SESSION_H

#include "kv/cache.h"
#include "kv/policy.h"
#include "model/model.h"

struct kvf_session {
    const struct kvf_model *model;
    struct kvf_session_params params; /* resolved: n_ctx, n_batch, n_threads > 0 */
    struct kv_cache kv;
    int n_past;                       /* positions processed so far */
    float *logits;                    /* [n_vocab] after the last token */
    bool has_logits;

    /* Scratch for one batch of up to n_batch tokens (B below). */
    float *x, *xn;                    /* [B][n_embd] residual stream, normed copy */
    float *q, *k, *v, *att;           /* [B][n_head*head_dim], [B][n_head_kv*head_dim] x2, [B][n_head*head_dim] */
    float *gate, *up;                 /* [B][n_ff] */
    int32_t *pos;                     /* [B] true positions of the batch */
    struct kvf_tag *btag;             /* [B] tags of the batch */
    struct kvf_tag *tags;             /* [tags_cap] tag of every position so far ([n_past] used) */
    int tags_cap;

    struct kv_policy policy;
    /* The latest `policy.window` queries of every layer (after RoPE), for
     * policies scored by the attention of the prompt's last queries. */
    float *qwin;                      /* [n_layer][qwin_cap][n_head*head_dim] or NULL */
    int32_t *qwin_pos;                /* [qwin_cap] their positions */
    struct kvf_tag *qwin_tag;         /* [qwin_cap] their tags, for window_attention */
    int qwin_n, qwin_cap;             /* rows held (<= qwin_cap: the policy's window, or for
                                         csp with window=0 the most recent entries it can keep) */
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

/* Runs n inputs (n <= n_batch) at positions n_past.. through the model —
 * token ids (tokens, already checked) or input embeddings (embd
 * [n][n_embd]) — appends their keys/values with tags[0..n) (pos filled in
 * here; NULL: text) to the cache and writes logits: every row into
 * all_logits ([n][n_vocab]) when given, the last row into s->logits. */
enum kvf_status decoder_forward(struct kvf_session *s, const int32_t *tokens, const float *embd,
                                const struct kvf_tag *tags, int n, float *all_logits);

#endif
