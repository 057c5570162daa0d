/* The decoder forward pass for the Llama, Qwen2 and Gemma 3 families:
 * embeddings -> per layer (norm, QKV, RoPE, cache append, row-blocked
 * attention, output projection, FFN) -> final norm -> logits. */
#include "session.h"

#include "attn/attn.h"
#include "core/ops.h"

#include <string.h>

static void norm_rows(float *out, const float *x, const struct weight *w, int n, int dim, float eps) {
    for (int t = 0; t < n; t++) ops_rmsnorm(out + (size_t)t * dim, x + (size_t)t * dim, w->data, dim, eps);
}

/* Keeps the latest `window` queries of layer l (rows of s->q after RoPE);
 * s->qwin_n, the rows held before this batch, moves on after the last layer. */
static void qwin_push(struct kvf_session *s, int l, int n) {
    const int W = s->qwin_cap, QD = s->model->hp.n_head * s->model->hp.head_dim;
    float *dst = s->qwin + (size_t)l * W * QD;
    if (n >= W) {
        memcpy(dst, s->q + (size_t)(n - W) * QD, sizeof(float) * (size_t)W * QD);
        return;
    }
    const int keep = KVF_MIN(s->qwin_n, W - n);
    memmove(dst, dst + (size_t)(s->qwin_n - keep) * QD, sizeof(float) * (size_t)keep * QD);
    memcpy(dst + (size_t)keep * QD, s->q, sizeof(float) * (size_t)n * QD);
}

/* Self-attention of layer l for n tokens: reads s->xn, leaves the projected
 * output in s->xn. */
static enum kvf_status layer_attention(struct kvf_session *s, int l, int n) {
    const struct kvf_model *m = s->model;
    const struct hparams *hp = &m->hp;
    const struct layer_weights *L = &m->layers[l];
    const int nt = s->params.n_threads, hd = hp->head_dim;
    const int QD = hp->n_head * hd, KD = hp->n_head_kv * hd;

    ops_matmul(&L->wq, s->xn, n, s->q, s->mm_scratch, nt);
    ops_matmul(&L->wk, s->xn, n, s->k, s->mm_scratch, nt);
    ops_matmul(&L->wv, s->xn, n, s->v, s->mm_scratch, nt);
    ops_add_bias(s->q, &L->bq, n, QD);
    ops_add_bias(s->k, &L->bk, n, KD);
    ops_add_bias(s->v, &L->bv, n, KD);
    if (L->q_norm.data) { /* Gemma: RMSNorm per head before RoPE */
        norm_rows(s->q, s->q, &L->q_norm, n * hp->n_head, hd, hp->norm_eps);
        norm_rows(s->k, s->k, &L->k_norm, n * hp->n_head_kv, hd, hp->norm_eps);
    }
    const float base = L->is_local ? hp->rope_base_local : hp->rope_base;
    for (int t = 0; t < n; t++) {
        ops_rope(s->q + (size_t)t * QD, hp->n_head, s->k + (size_t)t * KD, hp->n_head_kv, hd, s->pos[t], base,
                 hp->rope_style);
    }

    if (s->qwin) qwin_push(s, l, n);

    enum kvf_status st = kv_cache_reserve(&s->kv, l, n);
    if (st != KVF_OK) return st;
    kv_cache_append(&s->kv, l, s->k, s->v, s->btag, n);

    const struct attn_params ap = {
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
        .scale = hp->attn_scale, .window = L->is_local ? hp->sliding_window : 0,
        .nsm_n = s->compressed && s->policy.decode_softmax ? (float)s->policy.nsm_n : 0.0f,
    };
    /* Entries that carry running statistics get this call's added. */
    const size_t plane = (size_t)hp->n_head_kv * s->params.n_ctx;
    struct attn_stats stats = {.stride = s->params.n_ctx};
    if (s->kv.has_acc) {
        stats.a[ATTN_STAT_SUM] = s->acc_tmp + KV_ACC_SUM * plane;
        stats.a[ATTN_STAT_SQ] = s->acc_tmp + KV_ACC_SQ * plane;
        stats.a[ATTN_STAT_COUNT] = s->acc_tmp + KV_ACC_COUNT * plane;
    }
    if ((st = attn_forward(&ap, s->q, s->pos, n, kv_cache_head(&s->kv, l, 0), s->att, s->attn_scratch, nt,
                           s->kv.has_acc ? &stats : NULL)))
        return st;
    for (int g = 0; s->kv.has_acc && g < hp->n_head_kv; g++) {
        struct kv_head *h = kv_cache_head(&s->kv, l, g);
        for (int k = 0; k < KV_ACC_N; k++) {
            float *t = s->acc_tmp + k * plane + (size_t)g * s->params.n_ctx;
            for (int j = 0; j < h->n; j++) h->acc[(size_t)j * KV_ACC_N + k] += t[j];
            memset(t, 0, sizeof(float) * (size_t)h->n);
        }
    }
    ops_matmul(&L->wo, s->att, n, s->xn, s->mm_scratch, nt);
    if (L->post_attn_norm.data) norm_rows(s->xn, s->xn, &L->post_attn_norm, n, hp->n_embd, hp->norm_eps);
    return KVF_OK;
}

/* Feed-forward of layer l: reads s->xn, leaves the output in s->xn. */
static void layer_ffn(struct kvf_session *s, int l, int n) {
    const struct kvf_model *m = s->model;
    const struct hparams *hp = &m->hp;
    const struct layer_weights *L = &m->layers[l];
    const int nt = s->params.n_threads;
    ops_matmul(&L->w_gate, s->xn, n, s->gate, s->mm_scratch, nt);
    ops_matmul(&L->w_up, s->xn, n, s->up, s->mm_scratch, nt);
    if (hp->arch == ARCH_GEMMA3)
        ops_gelu_tanh_mul(s->gate, s->up, (int64_t)n * hp->n_ff);
    else
        ops_silu_mul(s->gate, s->up, (int64_t)n * hp->n_ff);
    ops_matmul(&L->w_down, s->gate, n, s->xn, s->mm_scratch, nt);
    if (L->post_ffn_norm.data) norm_rows(s->xn, s->xn, &L->post_ffn_norm, n, hp->n_embd, hp->norm_eps);
}

enum kvf_status decoder_forward(struct kvf_session *s, const int32_t *tokens, const float *embd,
                                const struct kvf_tag *tags, int n, float *all_logits) {
    const struct kvf_model *m = s->model;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd;
    if (embd) {
        /* Media embeddings are already in the embedding layer's output space. */
        memcpy(s->x, embd, sizeof(float) * (size_t)n * E);
    } else {
        for (int t = 0; t < n; t++) {
            float *x = s->x + (size_t)t * E;
            ops_get_row(&m->tok_embd, tokens[t], x);
            if (hp->embd_scale != 1.0f)
                for (int i = 0; i < E; i++) x[i] *= hp->embd_scale;
        }
    }
    for (int t = 0; t < n; t++) {
        s->pos[t] = s->n_past + t;
        s->btag[t] = tags ? tags[t] : (struct kvf_tag){.modality = KVF_MOD_TEXT, .media = -1, .row = -1, .col = -1};
        s->btag[t].pos = s->pos[t];
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const struct layer_weights *L = &m->layers[l];
        norm_rows(s->xn, s->x, &L->attn_norm, n, E, hp->norm_eps);
        enum kvf_status st = layer_attention(s, l, n);
        if (st != KVF_OK) return st;
        ops_add(s->x, s->xn, (size_t)n * E);
        norm_rows(s->xn, s->x, &L->ffn_norm, n, E, hp->norm_eps);
        layer_ffn(s, l, n);
        ops_add(s->x, s->xn, (size_t)n * E);
    }
    if (s->qwin) { /* the positions of the rows qwin_push kept */
        const int W = s->qwin_cap, keep = n >= W ? 0 : KVF_MIN(s->qwin_n, W - n), add = KVF_MIN(n, W);
        memmove(s->qwin_pos, s->qwin_pos + (s->qwin_n - keep), sizeof(int32_t) * (size_t)keep);
        memcpy(s->qwin_pos + keep, s->pos + (n - add), sizeof(int32_t) * (size_t)add);
        s->qwin_n = keep + add;
    }
    s->n_past += n;

    /* Only the rows asked for go through the (large) output matrix. */
    const int first = all_logits ? 0 : n - 1;
    norm_rows(s->xn, s->x + (size_t)first * E, &m->output_norm, n - first, E, hp->norm_eps);
    float *dst = all_logits ? all_logits : s->logits;
    ops_matmul(&m->output, s->xn, n - first, dst, s->mm_scratch, s->params.n_threads);
    if (all_logits) memcpy(s->logits, all_logits + (size_t)(n - 1) * hp->n_vocab, sizeof(float) * hp->n_vocab);
    s->has_logits = true;
    return KVF_OK;
}
