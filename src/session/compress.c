/* Eviction machinery of a session: the window queries' attention, the
 * score stage (each preset's rule from the registry), the budget stage
 * (uniform, pyramid, PrefixKV's layer ratios, Ada-KV's head shares),
 * selection, the merge stage and compaction — for compression after the
 * prompt, the decode stage and block-wise prefill alike. */
#include "session/session.h"

#include "attn/attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kvf_status compress_init(struct compress_state *c, const struct kvf_session *s) {
    const struct hparams *hp = &s->model->hp;
    const struct kv_policy *p = &s->policy;
    *c = (struct compress_state){0};
    bool ok = true;
    if (p->method != KV_FULL || p->blocks) {
        const size_t heads = (size_t)hp->n_layer * hp->n_head_kv;
        c->n0 = mem_alloc(heads, sizeof(int), &ok);
        c->head_n = mem_alloc(heads, sizeof(int), &ok);
        c->head_keep = mem_alloc(heads, sizeof(int), &ok);
        c->layer_ratio = mem_alloc((size_t)hp->n_layer, sizeof(double), &ok);
        c->layer_gini = mem_alloc((size_t)hp->n_layer, sizeof(double), &ok);
    }
    if (ok) return KVF_OK;
    compress_free(c);
    return err_set(KVF_ERR_NOMEM, "out of memory for compression buffers");
}

enum kvf_status compress_reserve(struct compress_state *c, const struct kvf_session *s, int n) {
    const struct hparams *hp = &s->model->hp;
    const struct kv_policy *p = &s->policy;
    const int rows = KVF_MAX(kv_qwin_room(&s->qwin), kv_qwin_room(&s->qprox)); /* window_attention reads either */
    bool ok = true;
    if (rows > c->win_rows) {
        ok &= mem_resize(&c->out, (size_t)rows * hp->n_head * hp->head_dim, sizeof *c->out);
        ok &= mem_resize(&c->qtag, (size_t)rows, sizeof *c->qtag);
        if (ok) c->win_rows = rows;
    }
    if (n > c->cap) {
        const size_t N = (size_t)n, heads = (size_t)hp->n_layer * hp->n_head_kv;
        const struct kv_rule *scorer = kv_policy_scorer(p);
        if (kv_policy_needs_window(p)) {
            ok &= mem_resize(&c->win, hp->n_head_kv * N, sizeof *c->win);
            if (scorer->needs & KV_NEEDS_CROSS) ok &= mem_resize(&c->win2, hp->n_head_kv * N, sizeof *c->win2);
        }
        if (scorer->rows) ok &= mem_resize(&c->rows, scorer->rows(n, hp->head_dim), sizeof *c->rows);
        if (p->method != KV_FULL || p->blocks) {
            const enum kv_rank rank = kv_budget_rule(p->alloc)->budget->rank;
            const size_t ranked = N * (rank == KV_RANK_MODEL   ? heads
                                       : rank == KV_RANK_LAYER ? (size_t)hp->n_head_kv
                                                               : 1);
            ok &= mem_resize(&c->score, ranked, sizeof *c->score) && mem_resize(&c->idx, ranked, sizeof *c->idx);
            ok &= mem_resize(&c->tmp, N, sizeof *c->tmp) && mem_resize(&c->layer, N, sizeof *c->layer) &&
                  mem_resize(&c->into, N, sizeof *c->into);
        }
        if (ok) c->cap = n;
    }
    return ok ? KVF_OK : err_set(KVF_ERR_NOMEM, "out of memory for compression buffers (%d entries a head)", n);
}

void compress_free(struct compress_state *c) {
    free(c->score);
    free(c->tmp);
    free(c->win);
    free(c->win2);
    free(c->out);
    free(c->layer);
    free(c->idx);
    free(c->into);
    free(c->head_n);
    free(c->head_keep);
    free(c->qtag);
    free(c->n0);
    free(c->layer_ratio);
    free(c->layer_gini);
    free(c->rows);
    free(c->recon);
    *c = (struct compress_state){0};
}

void compress_reset(struct compress_state *c, const struct kv_policy *p) {
    c->compressed = false;
    c->decode_steps = 0;
    c->have_ratio = c->have_ratio && !p->online; /* online ratios belong to the prompt */
}

void compress_copy(struct compress_state *dst, const struct compress_state *src, int n_layer, int n_head_kv) {
    dst->compressed = src->compressed;
    dst->decode_steps = src->decode_steps;
    dst->have_ratio = src->have_ratio;
    if (src->n0) memcpy(dst->n0, src->n0, sizeof *dst->n0 * (size_t)n_layer * n_head_kv);
    if (src->layer_ratio) memcpy(dst->layer_ratio, src->layer_ratio, sizeof *dst->layer_ratio * (size_t)n_layer);
    if (src->layer_gini) memcpy(dst->layer_gini, src->layer_gini, sizeof *dst->layer_gini * (size_t)n_layer);
}

enum kvf_status compress_load_profile(struct kvf_session *s, const char *path) {
    const enum kvf_status st = kv_prefix_load_profile(path, s->model->hp.n_layer, &s->policy, s->cs.layer_ratio);
    s->cs.have_ratio = st == KVF_OK;
    return st;
}

/* Attention the last `obs` held window queries of layer l (the question's
 * proxies instead when given) pay each of its entries, per kv head (mean
 * over the query heads of g): cs.win[g][j]; with cross (KV_NEEDS_CROSS), their n-softmax
 * attention from the entry's own modality in win and from the other in
 * win2. */
static enum kvf_status window_attention(struct kvf_session *s, int l, int obs, bool cross, bool proxies) {
    const struct hparams *hp = &s->model->hp;
    struct compress_state *c = &s->cs;
    const int stride = c->cap;
    memset(c->win, 0, sizeof(float) * (size_t)hp->n_head_kv * stride);
    if (cross) memset(c->win2, 0, sizeof(float) * (size_t)hp->n_head_kv * stride);
    const struct kv_qwin *w = proxies && kv_qwin_on(&s->qprox) && s->qprox.n[l] > 0 ? &s->qprox : &s->qwin;
    const int n = kv_qwin_on(w) ? w->n[l] : 0;
    if (n == 0) return KVF_OK;
    const int32_t *qpos = kv_qwin_pos(w, l);
    struct attn_stats st = {.stride = stride, .win_first = KVF_MAX(0, n - obs), .nsm_n = (float)s->policy.nsm_n,
                            .qtag = c->qtag};
    for (int i = 0; i < n; i++) c->qtag[i] = s->tags[qpos[i]];
    if (cross) st.a[ATTN_STAT_WIN_NSM_SELF] = c->win, st.a[ATTN_STAT_WIN_NSM_CROSS] = c->win2;
    else st.a[ATTN_STAT_WIN] = c->win;
    const struct attn_params ap = {
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .scale = hp->attn_scale,
        .window = s->model->layers[l].is_local ? hp->sliding_window : 0,
    };
    return attn_forward(&ap, kv_qwin_q(w, l), qpos, n, kv_cache_head(&s->kv, l, 0), c->out, s->fw.attn_scratch,
                        s->params.n_threads, &st);
}

static struct kv_score_in score_in(const struct kvf_session *s, const struct kv_policy *p, int l, int g, int keep) {
    const struct hparams *hp = &s->model->hp;
    const size_t hi = (size_t)l * s->kv.n_head_kv + g;
    const struct compress_state *c = &s->cs;
    const int group = hp->n_head / hp->n_head_kv, local = s->model->layers[l].is_local;
    return (struct kv_score_in){
        .p = p,
        .h = &s->kv.heads[hi],
        .head_dim = s->kv.head_dim,
        .keep = keep,
        .win_attn = c->win ? c->win + (size_t)g * c->cap : NULL,
        .win_cross = c->win2 ? c->win2 + (size_t)g * c->cap : NULL,
        .layer_score = c->layer,
        .win_layer = c->win,
        .n_head_kv = s->kv.n_head_kv,
        .win_stride = c->cap,
        .recon = c->recon ? c->recon + hi * c->recon_stride : NULL,
        .stat = kv_stats_get(&s->stats, kv_policy_scorer(p)->stat),
        .layer = l,
        .q_head = g * group,
        .group = group,
        .rope_freq = s->model->rope_freq[local],
        .rope_mscale = s->model->rope_mscale[local],
        .attn_scale = hp->attn_scale,
        .rope_style = hp->rope_style,
        .next_pos = session_next_rope(s),
        .rows = c->rows,
        .scratch = c->tmp,
        .iscratch = c->into,
        .n0 = c->n0 ? c->n0[hi] : 0,
        .seed = p->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(l * 4099 + g + 1)),
    };
}

/* A windowed layer's first entries are sinks only while the first
 * positions are in its window (once it has freed what left it). */
static int layer_sinks(const struct kvf_session *s, int l, int sinks) {
    return KVF_MAX(0, sinks - (s->n_past - session_layer_seen(s, l)));
}

/* Entries layer l keeps of those it can attend to: the budget stage. */
static int layer_target(const struct kvf_session *s, int l) {
    const int seen = session_layer_seen(s, l);
    if (!s->cs.have_ratio) return kv_policy_layer_keep(&s->policy, seen, l, s->model->hp.n_layer);
    const int k = (int)floor(s->cs.layer_ratio[l] * seen + 0.5);
    return KVF_MAX(1, KVF_MIN(k, seen));
}

/* The budget stage's layer shares (PrefixKV online: searched on the prompt
 * itself), each layer over what it sees and above what its rule always
 * keeps. */
static enum kvf_status layer_shares(struct kvf_session *s, const struct kv_budget_ops *b) {
    struct compress_state *c = &s->cs;
    int *seen = c->head_n, *sinks = c->head_keep; /* free until heads are ranked */
    for (int l = 0; l < s->model->hp.n_layer; l++)
        seen[l] = session_layer_seen(s, l), sinks[l] = layer_sinks(s, l, s->policy.sinks);
    const enum kvf_status st = b->shares(&s->kv, &s->policy, seen, sinks, c->layer_ratio, c->layer_gini);
    c->have_ratio = st == KVF_OK;
    return st;
}

/* Records where each evicted entry of a head went (kept entries are
 * marked in is_kept). */
static enum kvf_status merge_record(struct kv_merge_list *list, const struct kv_head *h, const int *keep, int n_keep,
                                    const int *into, const char *is_kept) {
    const enum kvf_status st = kv_merge_list_reserve(list, h->n - n_keep);
    if (st != KVF_OK) return st;
    for (int j = 0; j < h->n; j++)
        if (!is_kept[j]) list->m[list->n++] = (struct kvf_kv_merge){h->tag[j].pos, h->tag[keep[into[j]]].pos};
    return KVF_OK;
}

/* One head down to the entries keep[0..n_keep) (ascending): merged into
 * them first when the policy merges (and recorded), then compacted. */
static enum kvf_status head_evict(struct kvf_session *s, int l, int g, const int *keep, int n_keep, bool merge) {
    struct kv_head *h = kv_cache_head(&s->kv, l, g);
    struct compress_state *c = &s->cs;
    /* With nothing kept there is nothing to merge into: the head is
     * emptied, and no entry went anywhere to be recorded. */
    if (merge && s->policy.merge != KV_MERGE_NONE && n_keep > 0) {
        enum kvf_status st = kv_merge_head(&s->policy, h, s->kv.head_dim, keep, n_keep, c->into);
        /* The scores are used up: their space marks the kept entries for the record. */
        char *is_kept = (char *)c->score;
        memset(is_kept, 0, (size_t)h->n);
        for (int k = 0; k < n_keep; k++) is_kept[keep[k]] = 1;
        if (st == KVF_OK) st = merge_record(kv_merge_log_head(&s->merges, l, g), h, keep, n_keep, c->into, is_kept);
        if (st != KVF_OK) return st;
    }
    return kv_cache_keep(&s->kv, l, g, keep, n_keep);
}

/* The n heads from head `first` (counted from layer 0's first: they may
 * span layers), scored one after the other in cs.score, down to the
 * `total` best entries between them. */
static enum kvf_status heads_evict(struct kvf_session *s, const struct kv_budget_ops *b, int first, int n, long total,
                                   enum evict_mode mode) {
    struct compress_state *c = &s->cs;
    const int H = s->kv.n_head_kv;
    b->select(&s->policy, n, c->head_n, c->score, total, c->idx, c->head_keep, c->into);
    const int *keep = c->idx;
    enum kvf_status st = KVF_OK;
    for (int i = 0; st == KVF_OK && i < n; keep += c->head_keep[i++])
        if (c->head_keep[i] < c->head_n[i])
            st = head_evict(s, (first + i) / H, (first + i) % H, keep, c->head_keep[i], mode == EVICT_COMPRESS);
    return st;
}

enum kvf_status session_evict(struct kvf_session *s, enum evict_mode mode) {
    const struct hparams *hp = &s->model->hp;
    const int H = hp->n_head_kv;
    struct compress_state *c = &s->cs;
    /* Block eviction scores with the evictor's own window, and holds every
     * head to the block budget: the bound on peak memory is per head. */
    struct kv_policy bp = s->policy;
    if (mode == EVICT_BLOCK) bp.method = bp.evict, bp.window = bp.block_window, bp.alloc = KV_ALLOC_UNIFORM;
    const struct kv_rule *rule = kv_policy_scorer(&bp);
    const struct kv_budget_ops *b = kv_budget_rule(bp.alloc)->budget;
    const struct kv_rule *pool = kv_pool_rule(mode == EVICT_DECODE ? KV_POOL_NONE : bp.pool);
    /* While decoding the decode stage's rule ranks (decode_maintain). */
    const kv_score_fn score_fn = mode == EVICT_DECODE ? kv_decode_rule(bp.decode)->score : rule->score;
    enum kvf_status st = mode == EVICT_COMPRESS && b->shares && !c->have_ratio ? layer_shares(s, b) : KVF_OK;
    /* Every head is scored when heads are ranked together or count their own. */
    const bool every = b->rank != KV_RANK_HEAD || b->head_keep;
    long total = 0;
    float *score = c->score;
    for (int l = 0; st == KVF_OK && l < hp->n_layer; l++) {
        const int target = mode == EVICT_BLOCK ? bp.block_budget : layer_target(s, l);
        bool over = false;
        int held = 0;
        for (int g = 0; g < H; g++) {
            const int n = s->kv.heads[(size_t)l * H + g].n;
            over |= n > target, held += n;
        }
        if (b->rank == KV_RANK_LAYER) over = held > H * target;
        if (b->rank == KV_RANK_MODEL) total += (long)H * target;
        if (b->rank == KV_RANK_MODEL || b->head_keep) over = true;
        if (!over || !score_fn) continue; /* a rule without a score evicts nothing */
        const bool window_sums = mode != EVICT_DECODE && c->win && (rule->needs & KV_NEEDS_WINDOW);
        if (window_sums) {
            const int obs = bp.window > 0 ? bp.window : (int)floor(target * bp.recent + 0.5);
            st = window_attention(s, l, obs, rule->needs & KV_NEEDS_CROSS, mode == EVICT_BLOCK);
        }
        /* A windowed layer frees what it no longer sees before anything is
         * scored (its window queries' attention above still saw it): such
         * entries must not take the budget, nor be merged into what stays. */
        for (int g = 0; st == KVF_OK && g < H; g++) {
            int d;
            st = session_swa_drop(s, l, g, 0, &d);
            /* The entries' statistics move with them. */
            float *w[3] = {window_sums ? c->win + (size_t)g * c->cap : NULL,
                           window_sums && c->win2 ? c->win2 + (size_t)g * c->cap : NULL,
                           c->recon ? c->recon + ((size_t)l * H + g) * c->recon_stride : NULL};
            for (int k = 0; k < 3 && d > 0; k++)
                if (w[k]) memmove(w[k], w[k] + d, sizeof(float) * (size_t)s->kv.heads[(size_t)l * H + g].n);
        }
        struct kv_policy lp = bp;
        lp.sinks = layer_sinks(s, l, bp.sinks);
        /* The protected tail counts within the layer's budget (at least the last entry). */
        if (mode == EVICT_COMPRESS && (rule->needs & KV_NEEDS_LAYER))
            kv_score_layer(&s->kv, l, lp.sinks, KVF_MIN(lp.protect, KVF_MAX(1, target - lp.sinks)), c->layer);
        /* Heads ranked together: their scores one after the other, ranked below. */
        if (b->rank != KV_RANK_MODEL) score = c->score;
        for (int g = 0; st == KVF_OK && g < H; g++) {
            const struct kv_head *h = &s->kv.heads[(size_t)l * H + g];
            if (!every && h->n <= target) continue;
            c->head_n[b->rank == KV_RANK_MODEL ? l * H + g : g] = h->n;
            const struct kv_score_in in = score_in(s, &lp, l, g, target);
            /* The pool stage smooths what a rule ranks by: CSP chooses inside its rule, from
             * the window sums; the others' scores are smoothed once written. */
            const bool inside = rule->needs & KV_NEEDS_CROSS;
            if (pool->smooth && inside) {
                pool->smooth(&bp, c->win + (size_t)g * c->cap, h->n, c->tmp);
                pool->smooth(&bp, c->win2 + (size_t)g * c->cap, h->n, c->tmp);
            }
            score_fn(&in, score);
            if (pool->smooth && !inside) pool->smooth(&bp, score, h->n, c->tmp);
            if (b->rank != KV_RANK_HEAD) {
                score += h->n;
                continue;
            }
            const int keep = b->head_keep ? b->head_keep(&bp, score, h->n) : target;
            const int n_keep = kv_select(h->n, score, keep, c->idx);
            if (n_keep < h->n) st = head_evict(s, l, g, c->idx, n_keep, mode == EVICT_COMPRESS);
        }
        if (b->rank == KV_RANK_LAYER && st == KVF_OK) st = heads_evict(s, b, l * H, H, (long)H * target, mode);
    }
    return b->rank == KV_RANK_MODEL && st == KVF_OK ? heads_evict(s, b, 0, hp->n_layer * H, total, mode) : st;
}
