/* Internal layout of a session: what one conversation owns. */
#ifndef KVF_SESSION_H
#define KVF_SESSION_H

#include "kv/cache.h"
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
    int32_t *pos;                     /* [B] */
    void *mm_scratch;                 /* ops_matmul scratch */
    float *attn_scratch;              /* attn_forward scratch for n_ctx keys */
};

/* Runs tokens[0..n) (n <= n_batch, ids already checked) at positions n_past.. through the model,
 * appends their keys/values to the cache and writes logits: every row into
 * all_logits ([n][n_vocab]) when given, the last row into s->logits. */
enum kvf_status decoder_forward(struct kvf_session *s, const int32_t *tokens, int n, float *all_logits);

#endif
