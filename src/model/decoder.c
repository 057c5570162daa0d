/* The decoder forward pass for the Llama, Qwen2 and Gemma 3 families:
 * embeddings -> per layer (norm, QKV, RoPE, cache append, row-blocked
 * attention, output projection, FFN) -> final norm -> logits. */
#include "session.h"

#include "attn/attn.h"
#include "core/ops.h"
#include "kv/reduce.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

static void norm_rows(float *out, const float *x, const struct weight *w, int n, int dim, float eps) {
    for (int t = 0; t < n; t++) ops_rmsnorm(out + (size_t)t * dim, x + (size_t)t * dim, w->data, dim, eps);
}

/* y = x W^T for n rows, n_batch rows per call: the matmul scratch is sized
 * for a batch even when a pass holds a whole prompt. */
static void matmul_rows(struct kvf_session *s, const struct weight *w, const float *x, int n, float *y) {
    for (int i = 0; i < n; i += s->params.n_batch) {
        const int nb = KVF_MIN(s->params.n_batch, n - i);
        ops_matmul(w, x + (size_t)i * w->cols, nb, y + (size_t)i * w->rows, s->mm_scratch, s->params.n_threads);
    }
}

/* Keeps the latest qwin_cap queries of layer l (rows of s->q after RoPE)
 * and their positions, which differ between layers once a reduce step has
 * removed rows. */
static void qwin_push(struct kvf_session *s, int l, int n) {
    const int W = s->qwin_cap, QD = s->model->hp.n_head * s->model->hp.head_dim;
    float *dst = s->qwin + (size_t)l * W * QD;
    int32_t *dpos = s->qwin_pos + (size_t)l * W;
    const int have = s->qwin_n[l], keep = n >= W ? 0 : KVF_MIN(have, W - n), add = KVF_MIN(n, W);
    memmove(dst, dst + (size_t)(have - keep) * QD, sizeof(float) * (size_t)keep * QD);
    memmove(dpos, dpos + (have - keep), sizeof(int32_t) * (size_t)keep);
    memcpy(dst + (size_t)keep * QD, s->q + (size_t)(n - add) * QD, sizeof(float) * (size_t)add * QD);
    memcpy(dpos + keep, s->pos + (n - add), sizeof(int32_t) * (size_t)add);
    s->qwin_n[l] = keep + add;
}

/* The reduce step that follows layer l (l + 1 layers done), or -1. */
static int reduce_step_at(const struct kvf_session *s, int l) {
    for (int i = 0; i < s->n_reduce; i++)
        if (s->r_layer[i] == l + 1) return i;
    return -1;
}

/* Self-attention of layer l for n tokens: reads s->xn, leaves the projected
 * output in s->xn. */
static enum kvf_status layer_attention(struct kvf_session *s, int l, int n) {
    const struct kvf_model *m = s->model;
    const struct hparams *hp = &m->hp;
    const struct layer_weights *L = &m->layers[l];
    const int nt = s->params.n_threads, hd = hp->head_dim;
    const int QD = hp->n_head * hd, KD = hp->n_head_kv * hd;

    matmul_rows(s, &L->wq, s->xn, n, s->q);
    matmul_rows(s, &L->wk, s->xn, n, s->k);
    matmul_rows(s, &L->wv, s->xn, n, s->v);
    ops_add_bias(s->q, &L->bq, n, QD);
    ops_add_bias(s->k, &L->bk, n, KD);
    ops_add_bias(s->v, &L->bv, n, KD);
    if (L->q_norm.data) { /* Gemma: RMSNorm per head before RoPE */
        norm_rows(s->q, s->q, &L->q_norm, n * hp->n_head, hd, hp->norm_eps);
        norm_rows(s->k, s->k, &L->k_norm, n * hp->n_head_kv, hd, hp->norm_eps);
    }
    if (s->policy.reduce == KV_REDUCE_TOME && reduce_step_at(s, l) >= 0) {
        /* ToMe's metric: the keys before RoPE, mean over the kv heads. */
        for (int t = 0; t < n; t++) {
            float *metric = s->r_metric + (size_t)t * hd;
            memset(metric, 0, sizeof(float) * (size_t)hd);
            for (int g = 0; g < hp->n_head_kv; g++)
                for (int e = 0; e < hd; e++) metric[e] += s->k[(size_t)t * KD + (size_t)g * hd + e] / (float)hp->n_head_kv;
        }
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
    /* Entries that carry running statistics get this call's added (not
     * those of the question's trial run, block-wise question=1). */
    const size_t plane = (size_t)hp->n_head_kv * s->params.n_ctx;
    struct attn_stats stats = {.stride = s->params.n_ctx};
    const bool acc = s->kv.has_acc && !s->probing;
    if (acc) {
        stats.a[ATTN_STAT_SUM] = s->acc_tmp + KV_ACC_SUM * plane;
        stats.a[ATTN_STAT_SQ] = s->acc_tmp + KV_ACC_SQ * plane;
        stats.a[ATTN_STAT_COUNT] = s->acc_tmp + KV_ACC_COUNT * plane;
    }
    if ((st = attn_forward(&ap, s->q, s->pos, n, kv_cache_head(&s->kv, l, 0), s->att, s->attn_scratch, nt,
                           acc ? &stats : NULL)))
        return st;
    for (int g = 0; acc && g < hp->n_head_kv; g++) {
        struct kv_head *h = kv_cache_head(&s->kv, l, g);
        for (int k = 0; k < KV_ACC_N; k++) {
            float *t = s->acc_tmp + k * plane + (size_t)g * s->params.n_ctx;
            for (int j = 0; j < h->n; j++) h->acc[(size_t)j * KV_ACC_N + k] += t[j];
            memset(t, 0, sizeof(float) * (size_t)h->n);
        }
    }
    matmul_rows(s, &L->wo, s->att, n, s->xn);
    if (L->post_attn_norm.data) norm_rows(s->xn, s->xn, &L->post_attn_norm, n, hp->n_embd, hp->norm_eps);
    return KVF_OK;
}

/* Feed-forward of layer l: reads s->xn, leaves the output in s->xn; in
 * n_batch rows at a time, the size of the gate and up buffers. */
static void layer_ffn(struct kvf_session *s, int l, int n) {
    const struct kvf_model *m = s->model;
    const struct hparams *hp = &m->hp;
    const struct layer_weights *L = &m->layers[l];
    for (int i = 0; i < n; i += s->params.n_batch) {
        const int nb = KVF_MIN(s->params.n_batch, n - i);
        float *xn = s->xn + (size_t)i * hp->n_embd;
        matmul_rows(s, &L->w_gate, xn, nb, s->gate);
        matmul_rows(s, &L->w_up, xn, nb, s->up);
        if (hp->arch == ARCH_GEMMA3)
            ops_gelu_tanh_mul(s->gate, s->up, (int64_t)nb * hp->n_ff);
        else
            ops_silu_mul(s->gate, s->up, (int64_t)nb * hp->n_ff);
        matmul_rows(s, &L->w_down, s->gate, nb, xn);
    }
    if (L->post_ffn_norm.data) norm_rows(s->xn, s->xn, &L->post_ffn_norm, n, hp->n_embd, hp->norm_eps);
}

/* LightKV's weights after layer l (DESIGN section 7): the layer's logits
 * before the causal mask, softmax over the query axis, summed over heads
 * and text columns: xi[i] = sum_h sum_{j text} softmax_i(scale q_i.k_j), from
 * the pass's queries and keys still in s->q, s->k. Text columns go
 * REDUCE_COLS at a time through one sgemm per head. */
#define REDUCE_COLS 64
static void lightkv_weights(struct kvf_session *s, int n, float *xi) {
    const struct hparams *hp = &s->model->hp;
    const int hd = hp->head_dim, QD = hp->n_head * hd, KD = hp->n_head_kv * hd, group = hp->n_head / hp->n_head_kv;
    float *kb = s->r_scratch, *c = kb + (size_t)REDUCE_COLS * hd; /* [cols][hd] keys, [n][cols] logits */
    int cols[REDUCE_COLS];
    memset(xi, 0, sizeof(float) * (size_t)n);
    for (int j0 = 0; j0 < n;) {
        int nc = 0;
        for (; j0 < n && nc < REDUCE_COLS; j0++)
            if (s->btag[j0].modality == KVF_MOD_TEXT) cols[nc++] = j0;
        for (int h = 0; nc > 0 && h < hp->n_head; h++) {
            for (int c_ = 0; c_ < nc; c_++)
                memcpy(kb + (size_t)c_ * hd, s->k + (size_t)cols[c_] * KD + (size_t)(h / group) * hd, sizeof(float) * (size_t)hd);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, nc, hd, hp->attn_scale, s->q + (size_t)h * hd, QD, kb,
                        hd, 0.0f, c, nc);
            for (int c_ = 0; c_ < nc; c_++) {
                float mx = -INFINITY;
                for (int i = 0; i < n; i++) mx = fmaxf(mx, c[(size_t)i * nc + c_]);
                double sum = 0.0;
                for (int i = 0; i < n; i++) sum += exp(c[(size_t)i * nc + c_] - mx);
                for (int i = 0; i < n; i++) xi[i] += (float)(exp(c[(size_t)i * nc + c_] - mx) / sum);
            }
        }
    }
}

/* FastV's scores after layer l: the attention the pass's last row pays each
 * of its rows in that layer, mean over heads. */
static enum kvf_status fastv_scores(struct kvf_session *s, int l, int n, float *score) {
    const struct hparams *hp = &s->model->hp;
    const int stride = s->params.n_ctx, QD = hp->n_head * hp->head_dim;
    memset(s->r_stat, 0, sizeof(float) * (size_t)hp->n_head_kv * stride);
    const struct attn_stats st = {.stride = stride, .a[ATTN_STAT_SUM] = s->r_stat};
    const struct attn_params ap = {
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .scale = hp->attn_scale,
        .window = s->model->layers[l].is_local ? hp->sliding_window : 0,
    };
    const struct kv_head *kv = kv_cache_head(&s->kv, l, 0);
    enum kvf_status e = attn_forward(&ap, s->q + (size_t)(n - 1) * QD, s->pos + n - 1, 1, kv, s->att, s->attn_scratch,
                                     s->params.n_threads, &st);
    /* The pass's rows are the layer's last n entries. */
    for (int i = 0; e == KVF_OK && i < n; i++) {
        float sum = 0.0f;
        for (int g = 0; g < hp->n_head_kv; g++) sum += s->r_stat[(size_t)g * stride + kv[g].n - n + i];
        score[i] = sum / (float)hp->n_head_kv;
    }
    return e;
}

/* The reduce step after layer l (l + 1 layers done) when the policy has
 * one there: merges or drops vision rows of the pass (never its last row,
 * whose logits are the prompt's), so the layers after see fewer. */
static enum kvf_status reduce_step(struct kvf_session *s, int l, int *n) {
    const int step = reduce_step_at(s, l);
    if (step < 0 || s->n_groups == 0) return KVF_OK; /* nothing to reduce (decoding, text) */
    const int E = s->model->hp.n_embd, m = *n - 1; /* rows that may go */
    for (int i = 0; i < *n; i++) s->r_into[i] = i;
    float *w = s->r_w;
    switch (s->policy.reduce) {
    case KV_REDUCE_LIGHTKV:
        lightkv_weights(s, *n, w);
        reduce_groups_update(s->btag, m, s->r_groups, s->n_groups);
        for (int g = 0; g < s->n_groups; g++)
            reduce_lightkv(s->x, E, s->btag, &s->r_groups[g], s->r_window[step], s->policy.reduce_ratio, s->r_into,
                           s->r_scratch);
        break;
    case KV_REDUCE_TOME:
        reduce_groups_update(s->btag, m, s->r_groups, s->n_groups);
        for (int g = 0; g < s->n_groups; g++)
            reduce_tome(s->r_metric, s->model->hp.head_dim, &s->r_groups[g], s->policy.reduce_ratio, s->r_into,
                        s->r_scratch);
        w = s->r_size;
        break;
    case KV_REDUCE_FASTV: {
        const enum kvf_status st = fastv_scores(s, l, *n, w);
        if (st != KVF_OK) return st;
        reduce_fastv(w, s->btag, m, s->policy.reduce_ratio, s->r_into, s->r_scratch);
        w = NULL;
        break;
    }
    default: break;
    }
    /* Rows merged into others are recorded as merges of every later layer
     * (they never reach its cache), for kvf_session_kv_merges. */
    for (int i = 0; i < *n; i++) {
        const int into = s->r_into[i];
        for (int later = l + 1; into >= 0 && into != i && later < s->model->hp.n_layer; later++) {
            const enum kvf_status st = session_merge_note(s, later, s->pos[i], s->pos[into]);
            if (st != KVF_OK) return st;
        }
    }
    /* ToMe's sizes (w) stay with their rows for its next step. */
    *n = reduce_apply(s->x, E, w, s->btag, s->pos, s->r_into, *n, s->r_scratch);
    return KVF_OK;
}

void decoder_input(struct kvf_session *s, int at, const int32_t *tokens, const float *embd, const struct kvf_tag *tags,
                   int n) {
    const struct hparams *hp = &s->model->hp;
    const int E = hp->n_embd;
    float *x0 = s->x + (size_t)at * E;
    if (embd) {
        /* Media embeddings are already in the embedding layer's output space. */
        memcpy(x0, embd, sizeof(float) * (size_t)n * E);
    } else {
        for (int t = 0; t < n; t++) {
            float *x = x0 + (size_t)t * E;
            ops_get_row(&s->model->tok_embd, tokens[t], x);
            if (hp->embd_scale != 1.0f)
                for (int i = 0; i < E; i++) x[i] *= hp->embd_scale;
        }
    }
    for (int t = 0; t < n; t++)
        s->btag[at + t] = tags ? tags[t] : (struct kvf_tag){.modality = KVF_MOD_TEXT, .media = -1, .row = -1, .col = -1};
}

enum kvf_status decoder_forward(struct kvf_session *s, int n, float *all_logits) {
    const struct kvf_model *m = s->model;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd, n_in = n;
    for (int t = 0; t < n; t++) {
        s->pos[t] = s->n_past + t;
        s->btag[t].pos = s->pos[t];
    }
    memcpy(s->tags + s->n_past, s->btag, sizeof *s->btag * (size_t)n);
    if (s->n_reduce) {
        s->n_groups = reduce_groups(s->btag, n, s->r_groups);
        for (int t = 0; t < n; t++) s->r_size[t] = 1.0f;
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
        if (s->n_reduce && (st = reduce_step(s, l, &n)) != KVF_OK) return st;
    }
    s->n_past += n_in;
    if (all_logits && n != n_in)
        return err_set(KVF_ERR_UNSUPPORTED, "logits of every position: the reduce stage removed %d of them", n_in - n);

    /* Only the rows asked for go through the (large) output matrix. */
    const int first = all_logits ? 0 : n - 1;
    norm_rows(s->xn, s->x + (size_t)first * E, &m->output_norm, n - first, E, hp->norm_eps);
    float *dst = all_logits ? all_logits : s->logits;
    matmul_rows(s, &m->output, s->xn, n - first, dst);
    if (all_logits) memcpy(s->logits, all_logits + (size_t)(n - 1) * hp->n_vocab, sizeof(float) * hp->n_vocab);
    s->has_logits = true;
    return KVF_OK;
}
