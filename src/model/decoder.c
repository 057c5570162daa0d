/* The decoder forward pass for the Llama, Qwen2 and Gemma 3 families:
 * embeddings -> per layer (norm, QKV, RoPE, cache append, row-blocked
 * attention, output projection, FFN) -> final norm -> logits. */
#include "model/decoder.h"

#include "attn/attn.h"
#include "core/ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Row-wise work (norms, RoPE, activations) of at least this many values is
 * split over the threads: a prompt's rows, not a decoding step's. Serial
 * (and with the key and value projections on one thread, ops_matmul), it
 * held Gemma 3's pp512 at two threads to 1.12x the one-thread speed. */
#define ROWS_PARALLEL_MIN 16384

static void norm_rows(const struct fwd_scratch *f, float *out, const float *x, const struct weight *w, int n, int dim,
                      float eps) {
    #pragma omp parallel for num_threads(f->n_threads) if ((int64_t)n * dim >= ROWS_PARALLEL_MIN)
    for (int t = 0; t < n; t++) ops_rmsnorm(out + (size_t)t * dim, x + (size_t)t * dim, w->data, dim, eps);
}

/* gate = act(gate) * up over n rows of n_ff, rows split over the threads. */
static void ffn_act_rows(const struct fwd_scratch *f, const struct hparams *hp, int n) {
    #pragma omp parallel for num_threads(f->n_threads) if ((int64_t)n * hp->n_ff >= ROWS_PARALLEL_MIN)
    for (int t = 0; t < n; t++) {
        float *g = f->gate + (size_t)t * hp->n_ff;
        const float *u = f->up + (size_t)t * hp->n_ff;
        if (hp->arch == ARCH_GEMMA3)
            ops_gelu_tanh_mul(g, u, hp->n_ff);
        else
            ops_silu_mul(g, u, hp->n_ff);
    }
}

/* y = x W^T for n rows, n_batch rows per call: the matmul scratch is sized
 * for a batch even when a pass holds a whole prompt. */
static void matmul_rows(const struct fwd_scratch *f, const struct weight *w, const float *x, int n, float *y) {
    for (int i = 0; i < n; i += f->n_batch) {
        const int nb = KVF_MIN(f->n_batch, n - i);
        ops_matmul(w, x + (size_t)i * w->cols, nb, y + (size_t)i * w->rows, f->mm_scratch, f->n_threads);
    }
}

/* The query, key and value projections of n rows: f->xn into f->q, f->k,
 * f->v (the products only; a batch of sessions shares them). */
static void layer_qkv(const struct fwd_scratch *f, const struct layer_weights *L, int n) {
    matmul_rows(f, &L->wq, f->xn, n, f->q);
    matmul_rows(f, &L->wk, f->xn, n, f->k);
    matmul_rows(f, &L->wv, f->xn, n, f->v);
}

/* Gemma 3's vision models let an image's tokens attend to each other
 * (transformers' token_type_ids mask, OR-ed with the causal one and AND-ed
 * with the window): a row of an image sees up to the image's last row in
 * the pass (the session runs an image in one pass), any other row up to
 * itself. NULL when no row sees past itself. */
static const int32_t *rows_last_visible(const struct decoder *d, int n) {
    struct fwd_scratch *f = d->fw;
    if (!d->model->hp.image_bidirectional) return NULL;
    bool ahead = false;
    for (int t = n - 1; t >= 0; t--) {
        const struct kvf_tag *g = &f->btag[t], *next = t + 1 < n ? &f->btag[t + 1] : NULL;
        const bool same = g->modality == KVF_MOD_IMAGE && next && next->modality == KVF_MOD_IMAGE &&
                          next->media == g->media;
        f->qlast[t] = same ? f->qlast[t + 1] : f->pos[t];
        ahead |= same;
    }
    return ahead ? f->qlast : NULL;
}

/* The pass's rows as a reduce rule sees them (q, k: the layer's). */
static struct reduce_view reduce_view_of(const struct decoder *d, const float *q, const float *k, int n) {
    const struct hparams *hp = &d->model->hp;
    return (struct reduce_view){
        .n = n, .x = d->fw->x, .dim = hp->n_embd, .q = q, .k = k, .tag = d->fw->btag, .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .attn_scale = hp->attn_scale,
    };
}

/* KVzip+'s weights of the MAX statistic for layer l's call of n rows
 * whose attention inputs are x [n][n_embd] (struct decoder_tap). */
static enum kvf_status tap_plus(const struct decoder *d, int l, const float *x, int n, struct attn_stats *stats) {
    const struct hparams *hp = &d->model->hp;
    const struct decoder_tap *tp = d->tap;
    const int hd = hp->head_dim, E = hp->n_embd, group = hp->n_head / hp->n_head_kv;
    if (n > tp->rows) return err_set(KVF_ERR_INTERNAL, "calibration: %d rows in a call of at most %d", n, tp->rows);
    for (int t = 0; t < n; t++) {
        double sq = 0;
        for (int e = 0; e < E; e++) sq += (double)x[(size_t)t * E + e] * x[(size_t)t * E + e];
        const bool counts = d->fw->pos[t] >= tp->run_end - tp->q_span && d->fw->pos[t] < tp->run_end;
        tp->qscale[t] = counts && sq > 0 ? (float)(1.0 / sqrt(sq)) : 0.0f;
    }
    if (stats->stride > tp->entries)
        return err_set(KVF_ERR_INTERNAL, "calibration: statistics of %d entries for %d", stats->stride, tp->entries);
    for (int g = 0; g < hp->n_head_kv; g++) {
        const struct kv_head *h = kv_cache_head(d->kv, l, g);
        for (int j = 0; j < h->n; j++) kv_head_value_row(h, hd, j, tp->vrows + (size_t)j * hd);
        for (int hh = g * group; hh < (g + 1) * group && h->n > 0; hh++) {
            const float *G = tp->gram + ((size_t)l * hp->n_head + hh) * hd * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, h->n, hd, hd, 1.0f, tp->vrows, hd, G, hd, 0.0f,
                        tp->vg, hd);
            float *es = tp->escale + (size_t)hh * stats->stride;
            for (int j = 0; j < h->n; j++) {
                double sq = 0;
                for (int e = 0; e < hd; e++) sq += (double)tp->vg[(size_t)j * hd + e] * tp->vrows[(size_t)j * hd + e];
                es[j] = (float)sqrt(fmax(sq, 0.0));
            }
        }
    }
    stats->max_qscale = tp->qscale;
    stats->max_escale = tp->escale;
    return KVF_OK;
}

/* The weights' own product for the rules' statistics (kv_stat_rows). */
static void stat_matmul(const void *ctx, const struct weight *w, const float *x, int n, float *out) {
    matmul_rows(ctx, w, x, n, out);
}

/* The rest of layer l's self-attention for n rows of one session, whose
 * attention inputs (after the layer's input norm) are x [n][n_embd] and
 * projections q [n][n_head*head_dim], k, v [n][n_head_kv*head_dim]:
 * biases, norms and RoPE, the cache append (with what the rules' statistics write),
 * and attention over the session's cache into att [n][n_head*head_dim].
 * Positions, tags and the attention scratch are the session's (d->fw). */
static enum kvf_status layer_attend(const struct decoder *d, int l, const float *x, float *q, float *k, float *v,
                                    int n, float *att) {
    const struct hparams *hp = &d->model->hp;
    const struct layer_weights *L = &d->model->layers[l];
    struct fwd_scratch *f = d->fw;
    const int hd = hp->head_dim, QD = hp->n_head * hd, KD = hp->n_head_kv * hd;

    ops_add_bias(q, &L->bq, n, QD);
    ops_add_bias(k, &L->bk, n, KD);
    ops_add_bias(v, &L->bv, n, KD);
    if (L->q_norm.data) { /* Gemma 3, Qwen3: RMSNorm per head before RoPE */
        norm_rows(f, q, q, &L->q_norm, n * hp->n_head, hd, hp->norm_eps);
        norm_rows(f, k, k, &L->k_norm, n * hp->n_head_kv, hd, hp->norm_eps);
    }
    if (d->rd->n_steps && d->rd->ops->metric && reduce_step_at(d->rd, l) >= 0) {
        /* Before RoPE the layer is half done: its queries and keys only
         * (q, k may be a batch's, its other rows another session's). */
        struct reduce_view rv = reduce_view_of(d, q, k, n);
        rv.x = NULL, rv.tag = NULL;
        d->rd->ops->metric(&rv, d->rd);
    }
    if (d->stats && d->gather) {
        const enum kvf_status st = kv_stats_queries(d->stats, l, q, f->pos, n);
        if (st != KVF_OK) return st;
    }
    const double *freq = d->model->rope_freq[L->is_local];
    const float mscale = d->model->rope_mscale[L->is_local];
    const bool mrope = hp->mrope[0] + hp->mrope[1] + hp->mrope[2] > 0;
    #pragma omp parallel for num_threads(f->n_threads) if ((int64_t)n * (QD + KD) >= ROWS_PARALLEL_MIN)
    for (int t = 0; t < n; t++) {
        if (mrope)
            ops_rope_axes(q + (size_t)t * QD, hp->n_head, k + (size_t)t * KD, hp->n_head_kv, hd, f->rpos[t],
                          d->model->rope_axis, freq, mscale, hp->rope_style);
        else
            ops_rope(q + (size_t)t * QD, hp->n_head, k + (size_t)t * KD, hp->n_head_kv, hd, f->pos[t], freq, mscale,
                     hp->rope_style);
    }

    if (kv_qwin_on(d->qwin)) kv_qwin_push(d->qwin, l, q, f->pos, n);

    enum kvf_status st = kv_cache_reserve(d->kv, l, n);
    if (st != KVF_OK) return st;
    kv_cache_append(d->kv, l, k, v, f->btag, n);
    if (d->stats && d->stats->n > 0) {
        /* The FFN's gate rows are free until the FFN. */
        const struct kv_stat_rows sr = {.layer = l,
                                        .n = n,
                                        .x = x,
                                        .kv = d->kv,
                                        .matmul = stat_matmul,
                                        .ctx = f,
                                        .work = f->gate,
                                        .batch = f->n_batch,
                                        .work_cols = hp->n_ff};
        if ((st = kv_stats_written(d->stats, &sr)) != KVF_OK) return st;
    }
    for (int t = 0; d->tap && d->tap->x && t < n; t++) {
        const int slot = f->pos[t] >= 0 && f->pos[t] < d->tap->x_cap ? d->tap->x_slot[f->pos[t]] : -1;
        if (slot >= 0)
            memcpy(d->tap->x + ((size_t)l * d->tap->x_rows + slot) * hp->n_embd, x + (size_t)t * hp->n_embd,
                   sizeof(float) * hp->n_embd);
    }

    const struct attn_params ap = {
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
        .scale = hp->attn_scale, .window = L->is_local ? hp->sliding_window : 0, .nsm_n = d->nsm_n,
        .qlast = rows_last_visible(d, n),
    };
    /* Entries that carry running statistics get this call's added. */
    const size_t plane = (size_t)hp->n_head_kv * f->keys_cap;
    struct attn_stats stats = {.stride = f->keys_cap};
    const bool acc = d->kv->has_acc && d->gather;
    if (acc) {
        stats.a[ATTN_STAT_SUM] = f->acc_tmp + KV_ACC_SUM * plane;
        stats.a[ATTN_STAT_SQ] = f->acc_tmp + KV_ACC_SQ * plane;
        stats.a[ATTN_STAT_COUNT] = f->acc_tmp + KV_ACC_COUNT * plane;
    } else if (d->recon) {
        stats.stride = (int)d->recon_stride;
        stats.a[ATTN_STAT_MAX] = d->recon + (size_t)l * hp->n_head_kv * d->recon_stride;
        if (d->tap && d->tap->gram && (st = tap_plus(d, l, x, n, &stats)) != KVF_OK) return st;
    }
    if ((st = attn_forward(&ap, q, f->pos, n, kv_cache_head(d->kv, l, 0), att, f->attn_scratch, f->n_threads,
                           acc || d->recon ? &stats : NULL)))
        return st;
    for (int g = 0; acc && g < hp->n_head_kv; g++) {
        struct kv_head *h = kv_cache_head(d->kv, l, g);
        for (int a = 0; a < KV_ACC_N; a++) {
            float *t = f->acc_tmp + a * plane + (size_t)g * f->keys_cap;
            for (int j = 0; j < h->n; j++) h->acc[(size_t)j * KV_ACC_N + a] += t[j];
            memset(t, 0, sizeof(float) * (size_t)h->n);
        }
    }
    return KVF_OK;
}

/* The output projection of n rows' attention: f->att into f->xn. */
static void layer_attn_out(const struct fwd_scratch *f, const struct hparams *hp, const struct layer_weights *L,
                           int n) {
    matmul_rows(f, &L->wo, f->att, n, f->xn);
    if (L->post_attn_norm.data) norm_rows(f, f->xn, f->xn, &L->post_attn_norm, n, hp->n_embd, hp->norm_eps);
}

/* Feed-forward of a layer: reads f->xn, leaves the output in f->xn; in
 * n_batch rows at a time, the size of the gate and up buffers. */
static void layer_ffn(const struct fwd_scratch *f, const struct hparams *hp, const struct layer_weights *L, int n) {
    for (int i = 0; i < n; i += f->n_batch) {
        const int nb = KVF_MIN(f->n_batch, n - i);
        float *xn = f->xn + (size_t)i * hp->n_embd;
        matmul_rows(f, &L->w_gate, xn, nb, f->gate);
        matmul_rows(f, &L->w_up, xn, nb, f->up);
        ffn_act_rows(f, hp, nb);
        matmul_rows(f, &L->w_down, f->gate, nb, xn);
    }
    if (L->post_ffn_norm.data) norm_rows(f, f->xn, f->xn, &L->post_ffn_norm, n, hp->n_embd, hp->norm_eps);
}

/* Layer l over the rows in f, which n_dec decoders own in turn, rows_each
 * each (a prompt: one decoder, all its rows; a batch of sessions: a row
 * each): the weight products run once over all the rows, attention in each
 * decoder's own cache. */
static enum kvf_status layer_forward(const struct decoder *ds, int n_dec, struct fwd_scratch *f, int l, int rows_each) {
    const struct hparams *hp = &ds[0].model->hp;
    const struct layer_weights *L = &ds[0].model->layers[l];
    const int n = n_dec * rows_each, E = hp->n_embd;
    const size_t QD = (size_t)hp->n_head * hp->head_dim, KD = (size_t)hp->n_head_kv * hp->head_dim;
    norm_rows(f, f->xn, f->x, &L->attn_norm, n, E, hp->norm_eps);
    layer_qkv(f, L, n);
    for (int i = 0; i < n_dec; i++) {
        const size_t r = (size_t)i * rows_each;
        const enum kvf_status st = layer_attend(&ds[i], l, f->xn + r * E, f->q + r * QD, f->k + r * KD,
                                                f->v + r * KD, rows_each, f->att + r * QD);
        if (st != KVF_OK) return st;
    }
    layer_attn_out(f, hp, L, n);
    ops_add(f->x, f->xn, (size_t)n * E);
    norm_rows(f, f->xn, f->x, &L->ffn_norm, n, E, hp->norm_eps);
    layer_ffn(f, hp, L, n);
    ops_add(f->x, f->xn, (size_t)n * E);
    return KVF_OK;
}

/* The attention the pass's last row pays each of its rows in layer l: the
 * sum over a kv head's query heads, averaged over the kv heads. */
static enum kvf_status last_row_attention(const struct decoder *d, int l, int n, float *score) {
    const struct hparams *hp = &d->model->hp;
    const struct fwd_scratch *f = d->fw;
    const int stride = d->rd->stat_cap, QD = hp->n_head * hp->head_dim;
    float *stat = d->rd->stat;
    memset(stat, 0, sizeof(float) * (size_t)hp->n_head_kv * stride);
    const struct attn_stats st = {.stride = stride, .a[ATTN_STAT_SUM] = stat};
    const struct attn_params ap = {
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .scale = hp->attn_scale,
        .window = d->model->layers[l].is_local ? hp->sliding_window : 0,
    };
    const struct kv_head *kv = kv_cache_head(d->kv, l, 0);
    enum kvf_status e = attn_forward(&ap, f->q + (size_t)(n - 1) * QD, f->pos + n - 1, 1, kv, f->att, f->attn_scratch,
                                     f->n_threads, &st);
    /* The pass's rows are the layer's last n entries. */
    for (int i = 0; e == KVF_OK && i < n; i++) {
        float sum = 0.0f;
        for (int g = 0; g < hp->n_head_kv; g++) sum += stat[(size_t)g * stride + kv[g].n - n + i];
        score[i] = sum / (float)hp->n_head_kv;
    }
    return e;
}

/* The reduce step after layer l (l + 1 layers done) when the policy has
 * one there: merges or drops vision rows of the pass (never its last row,
 * whose logits are the prompt's), so the layers after see fewer. */
static enum kvf_status reduce_step(const struct decoder *d, int l, int *n) {
    struct reduce_state *r = d->rd;
    struct fwd_scratch *f = d->fw;
    const int step = reduce_step_at(r, l);
    if (step < 0 || r->n_groups == 0) return KVF_OK; /* nothing to reduce (decoding, text) */
    struct reduce_view v = reduce_view_of(d, f->q, f->k, *n);
    if (r->rule->needs & KV_NEEDS_LAST_ROW) {
        const enum kvf_status st = last_row_attention(d, l, *n, r->w);
        if (st != KVF_OK) return st;
        v.last_attn = r->w;
    }
    float *w = reduce_map(&v, r, step);
    /* Rows merged into others are recorded as merges of every later layer
     * (they never reach its cache), for kvf_session_kv_merges. */
    for (int i = 0; i < *n; i++) {
        const int into = r->into[i];
        for (int later = l + 1; into >= 0 && into != i && later < d->model->hp.n_layer; later++) {
            const enum kvf_status st = kv_merge_log_note(d->merges, later, f->pos[i], f->pos[into]);
            if (st != KVF_OK) return st;
        }
    }
    /* The weights (ToMe's sizes) stay with their rows for the next step. */
    const int *mr = d->model->hp.mrope;
    const struct hparams *hp = &d->model->hp;
    /* DeepStack's features still to come go where their rows go. */
    const int ds_left = hp->n_deepstack - (l + 1);
    const struct reduce_rows rows = {
        .x = f->x, .dim = hp->n_embd, .extra = ds_left > 0 ? f->ds : NULL, .extra_dim = hp->n_deepstack * hp->n_embd,
        .tag = f->btag, .pos = f->pos, .rpos = mr[0] + mr[1] + mr[2] ? f->rpos : NULL,
    };
    *n = reduce_apply(&rows, w, r->into, *n, r->scratch);
    return KVF_OK;
}

/* Qwen3-VL's DeepStack: after layer l < n_deepstack every vision row gains
 * the features the tower's l-th DeepStack merger made for it. */
static void deepstack_add(const struct decoder *d, int l, int n) {
    const struct hparams *hp = &d->model->hp;
    const struct fwd_scratch *f = d->fw;
    const int E = hp->n_embd;
    for (int t = 0; t < n; t++)
        if (f->btag[t].modality != KVF_MOD_TEXT)
            ops_add(f->x + (size_t)t * E, f->ds + ((size_t)t * hp->n_deepstack + l) * E, (size_t)E);
}

void decoder_input(struct fwd_scratch *f, const struct kvf_model *m, int at, const int32_t *tokens, const float *embd,
                   const float *ds, const struct kvf_tag *tags, int32_t pos0, int n) {
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd;
    float *x0 = f->x + (size_t)at * E;
    /* DeepStack rows are read for vision rows only (deepstack_add): tagged
     * rows without features (pseudo-images, caller-made media) read zeros,
     * untagged ones (text: every decoding step) need nothing. */
    if (f->ds && (ds || tags)) {
        const size_t w = (size_t)hp->n_deepstack * E;
        if (ds) memcpy(f->ds + (size_t)at * w, ds, sizeof(float) * (size_t)n * w);
        else memset(f->ds + (size_t)at * w, 0, sizeof(float) * (size_t)n * w);
    }
    if (embd) {
        /* Media embeddings are already in the embedding layer's output space. */
        memcpy(x0, embd, sizeof(float) * (size_t)n * E);
    } else {
        for (int t = 0; t < n; t++) {
            float *x = x0 + (size_t)t * E;
            ops_get_row(&m->tok_embd, tokens[t], x);
            if (hp->embd_scale != 1.0f)
                for (int i = 0; i < E; i++) x[i] *= hp->embd_scale;
        }
    }
    for (int t = 0; t < n; t++) {
        struct kvf_tag *bt = &f->btag[at + t];
        *bt = tags ? tags[t] : (struct kvf_tag){.modality = KVF_MOD_TEXT, .media = -1, .row = -1, .col = -1};
        bt->pos = f->pos[at + t] = pos0 + t;
    }
}

enum kvf_status decoder_forward(const struct decoder *d, int n, float *all_logits, float *logits) {
    const struct kvf_model *m = d->model;
    const struct hparams *hp = &m->hp;
    struct fwd_scratch *f = d->fw;
    struct reduce_state *r = d->rd;
    const int E = hp->n_embd, n_in = n;
    if (r->n_steps) {
        r->n_groups = reduce_groups(f->btag, n, r->groups);
        for (int t = 0; t < n; t++) r->size[t] = 1.0f;
    }

    for (int l = 0; l < hp->n_layer; l++) {
        enum kvf_status st = layer_forward(d, 1, f, l, n);
        if (st == KVF_OK && l < hp->n_deepstack) deepstack_add(d, l, n);
        if (st == KVF_OK && r->n_steps) st = reduce_step(d, l, &n);
        if (st != KVF_OK) return st;
    }
    if (all_logits && n != n_in)
        return err_set(KVF_ERR_UNSUPPORTED, "logits of every position: the reduce stage removed %d of them", n_in - n);

    /* Only the rows asked for go through the (large) output matrix. */
    const int first = all_logits ? 0 : n - 1;
    norm_rows(f, f->xn, f->x + (size_t)first * E, &m->output_norm, n - first, E, hp->norm_eps);
    float *dst = all_logits ? all_logits : logits;
    matmul_rows(f, &m->output, f->xn, n - first, dst);
    if (all_logits) memcpy(logits, all_logits + (size_t)(n - 1) * hp->n_vocab, sizeof(float) * hp->n_vocab);
    return KVF_OK;
}

enum kvf_status decoder_forward_rows(const struct decoder *ds, int n, struct fwd_scratch *b, float *logits) {
    const struct kvf_model *m = ds[0].model;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd;
    for (int i = 0; i < n; i++) memcpy(b->x + (size_t)i * E, ds[i].fw->x, sizeof(float) * (size_t)E);
    for (int l = 0; l < hp->n_layer; l++) {
        const enum kvf_status st = layer_forward(ds, n, b, l, 1);
        if (st != KVF_OK) return st;
    }
    norm_rows(b, b->xn, b->x, &m->output_norm, n, E, hp->norm_eps);
    matmul_rows(b, &m->output, b->xn, n, logits);
    return KVF_OK;
}

void fwd_init(struct fwd_scratch *f, int n_batch, int n_threads, bool acc) {
    *f = (struct fwd_scratch){.n_batch = n_batch, .n_threads = n_threads, .acc = acc};
}

enum kvf_status fwd_reserve(struct fwd_scratch *f, const struct kvf_model *m, int rows) {
    if (rows <= f->rows_cap) return KVF_OK;
    const struct hparams *hp = &m->hp;
    const size_t QD = (size_t)hp->n_head * hp->head_dim, KD = (size_t)hp->n_head_kv * hp->head_dim, R = (size_t)rows;
    const int B = KVF_MIN(rows, f->n_batch);
    const int64_t widest = KVF_MAX(KVF_MAX((int64_t)hp->n_embd, hp->n_ff), (int64_t)QD);
    if (!mem_resize(&f->x, R * hp->n_embd, sizeof *f->x) || !mem_resize(&f->xn, R * hp->n_embd, sizeof *f->xn) ||
        !mem_resize(&f->q, R * QD, sizeof *f->q) || !mem_resize(&f->k, R * KD, sizeof *f->k) ||
        !mem_resize(&f->v, R * KD, sizeof *f->v) || !mem_resize(&f->att, R * QD, sizeof *f->att) ||
        !mem_resize(&f->pos, R, sizeof *f->pos) || !mem_resize(&f->qlast, R, sizeof *f->qlast) ||
        !mem_resize(&f->rpos, R, sizeof *f->rpos) ||
        !mem_resize(&f->btag, R, sizeof *f->btag) ||
        (hp->n_deepstack > 0 && !mem_resize(&f->ds, R * hp->n_deepstack * hp->n_embd, sizeof *f->ds)) ||
        !mem_resize(&f->gate, (size_t)B * hp->n_ff, sizeof *f->gate) ||
        !mem_resize(&f->up, (size_t)B * hp->n_ff, sizeof *f->up) ||
        !mem_resize(&f->mm_scratch, ops_matmul_scratch_bytes(widest, B, f->n_threads), 1))
        return err_set(KVF_ERR_NOMEM, "out of memory for a pass of %d rows", rows);
    f->rows_cap = rows;
    return KVF_OK;
}

enum kvf_status fwd_reserve_keys(struct fwd_scratch *f, const struct kvf_model *m, int n_kv) {
    if (n_kv <= f->keys_cap) return KVF_OK;
    if (!mem_resize(&f->attn_scratch, attn_scratch_bytes(n_kv, f->n_threads), 1))
        return err_set(KVF_ERR_NOMEM, "out of memory for attention over %d keys", n_kv);
    if (f->acc) { /* zeros between layers: nothing to keep */
        free(f->acc_tmp);
        if (!(f->acc_tmp = calloc((size_t)KV_ACC_N * m->hp.n_head_kv * n_kv, sizeof(float)))) {
            f->keys_cap = 0; /* attn_scratch is larger than needed for that; it is freed with f */
            return err_set(KVF_ERR_NOMEM, "out of memory for attention statistics over %d keys", n_kv);
        }
    }
    f->keys_cap = n_kv;
    return KVF_OK;
}

/* The row buffers go; fwd_reserve brings them back for the next pass. */
void fwd_release_rows(struct fwd_scratch *f) {
    free(f->x), free(f->xn), free(f->q), free(f->k), free(f->v), free(f->att);
    free(f->gate), free(f->up), free(f->pos), free(f->qlast), free(f->rpos), free(f->btag), free(f->mm_scratch);
    free(f->ds);
    f->x = f->xn = f->q = f->k = f->v = f->att = f->gate = f->up = f->ds = NULL;
    f->pos = f->qlast = NULL;
    f->rpos = NULL;
    f->btag = NULL;
    f->mm_scratch = NULL;
    f->rows_cap = 0;
}

void fwd_free(struct fwd_scratch *f) {
    fwd_release_rows(f);
    free(f->attn_scratch);
    free(f->acc_tmp);
    *f = (struct fwd_scratch){0};
}
