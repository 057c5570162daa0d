/* A session: one conversation's KV cache under a compression policy. The
 * path a prompt takes is all here — prefill (in batches, blocks, or one
 * pass with a reduce stage) → kvf_session_compress → kvf_session_decode
 * with the decode stage — while the eviction machinery it calls lives in
 * session/compress.c and the forward pass in model/decoder.c. */
#include "session/session.h"

#include "session/prompt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SESSION_MAX_CTX_DEFAULT 8192

struct kvf_session_params kvf_session_default_params(void) {
    struct kvf_session_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 0, .type_k = KVF_KV_F16,
                                   .type_v = KVF_KV_F16};
    return p;
}

void kvf_session_free(struct kvf_session *s) {
    if (!s) return;
    kv_cache_free(&s->kv);
    fwd_free(&s->fw);
    kv_qwin_free(&s->qwin);
    kv_qwin_free(&s->qprox);
    kv_stats_free(&s->stats);
    reduce_state_free(&s->rd);
    compress_free(&s->cs);
    kv_merge_log_free(&s->merges);
    free(s->logits);
    free(s->tags);
    free(s->toks);
    free(s->rope_next);
    free(s->spec);
    free(s->note);
    free(s);
}

enum kvf_status kvf_session_set_note(struct kvf_session *s, const char *text) {
    if (!s) return err_set(KVF_ERR_INVALID_ARG, "note: NULL session");
    const size_t n = text ? strlen(text) : 0;
    if (n > SESSION_NOTE_MAX)
        return err_set(KVF_ERR_INVALID_ARG, "note: %zu bytes, over the %u allowed", n, SESSION_NOTE_MAX);
    char *copy = text ? strdup(text) : NULL;
    if (text && !copy) return err_set(KVF_ERR_NOMEM, "note: out of memory");
    free(s->note);
    s->note = copy;
    return KVF_OK;
}

const char *kvf_session_note(const struct kvf_session *s) { return s && s->note ? s->note : ""; }

const char *kvf_session_kv_spec(const struct kvf_session *s) { return s ? s->spec : ""; }

/* Queries each layer keeps for the policy's window: its window, CSP's
 * default (as many queries as recent entries kept), the block-wise
 * evictor's, and what kv_gather asks; 0 when nothing reads them. */
static int qwin_rows(const struct kv_policy *p, const struct kvf_session_params *sp) {
    const bool window = kv_policy_needs_window(p);
    if (!window && sp->kv_gather <= 0) return 0;
    int cap = p->window > 0                           ? p->window
        : kv_policy_scorer(p)->needs & KV_NEEDS_CROSS ? (int)floor(kv_policy_keep_count(p, sp->n_ctx) * p->recent + 0.5)
                                                      : 0;
    if (p->blocks && p->evict == KV_SNAPKV) cap = KVF_MAX(cap, p->block_window);
    return KVF_MAX(cap, sp->kv_gather);
}

/* The parts a session owns, each allocated by its own init. */
static enum kvf_status session_parts_init(struct kvf_session *s, const struct kvf_session *like) {
    const struct hparams *hp = &s->model->hp;
    const struct kvf_session_params *p = &s->params;
    const struct kv_policy *pol = &s->policy;
    const int QD = hp->n_head * hp->head_dim, cap = qwin_rows(pol, p);
    const bool evicts = pol->method != KV_FULL || pol->blocks;
    enum kvf_status st = kv_cache_init(&s->kv, hp->n_layer, hp->n_head_kv, hp->head_dim,
                                       kv_policy_needs_acc(pol) || p->kv_gather > 0);
    if (st == KVF_OK) st = kv_cache_set_type(&s->kv, p->type_k, p->type_v);
    const struct kv_stat_in in = {
        .n_layer = hp->n_layer,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .n_embd = hp->n_embd,
        .sinks = pol->sinks,
        .digest = s->model->digest,
        .scorer = pol->scorer,
        .beside = s->model->zap_path,
    };
    if (st == KVF_OK)
        st = kv_stats_init(&s->stats, kv_policy_scorer(pol)->stat, p->kv_gather > 0, &in, like ? &like->stats : NULL);
    s->kv.has_prior = kv_stats_prior(&s->stats);
    fwd_init(&s->fw, p->n_batch, p->n_threads, s->kv.has_acc);
    if (st == KVF_OK) st = kv_qwin_init(&s->qwin, hp->n_layer, cap, QD);
    if (st == KVF_OK)
        st = kv_qwin_init(&s->qprox, hp->n_layer, pol->question && kv_policy_needs_window(pol) ? cap : 0, QD);
    if (st == KVF_OK) st = reduce_state_init(&s->rd, pol, hp->n_layer, hp->n_head_kv, hp->head_dim);
    if (st == KVF_OK) st = compress_init(&s->cs, s);
    if (st == KVF_OK) st = kv_merge_log_init(&s->merges, hp->n_layer, hp->n_head_kv, evicts);
    if (st == KVF_OK && !(s->logits = malloc(sizeof(float) * (size_t)hp->n_vocab)))
        st = err_set(KVF_ERR_NOMEM, "out of memory for logits");
    return st;
}

enum kvf_status session_new(const struct kvf_model *m, const struct kvf_session_params *p,
                            const struct kv_policy *policy, const char *spec, const struct kvf_session *like,
                            struct kvf_session **out) {
    struct kvf_session *s = calloc(1, sizeof *s);
    if (!s) return err_set(KVF_ERR_NOMEM, "out of memory");
    s->model = m;
    s->params = *p;
    s->policy = *policy;
    s->swa_lost = -1;
    s->spec = strdup(spec ? spec : "");
    enum kvf_status st = s->spec ? KVF_OK : err_set(KVF_ERR_NOMEM, "out of memory");
    if (st == KVF_OK) st = session_parts_init(s, like);
    if (st != KVF_OK) {
        kvf_session_free(s);
        return st;
    }
    *out = s;
    return KVF_OK;
}

enum kvf_status kvf_session_init(const struct kvf_model *m, const struct kvf_session_params *params,
                                 struct kvf_session **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    return session_create(m, params, true, out);
}

enum kvf_status session_create(const struct kvf_model *m, const struct kvf_session_params *params, bool load_profile,
                               struct kvf_session **out) {
    *out = NULL;
    if (!m) return err_set(KVF_ERR_INVALID_ARG, "no model");
    if (model_require_weights(m, "session") != KVF_OK) return KVF_ERR_UNSUPPORTED;
    struct kvf_session_params p = params ? *params : kvf_session_default_params();
    const struct hparams *hp = &m->hp;
    if (p.n_ctx <= 0) p.n_ctx = KVF_MIN(hp->n_ctx_train, SESSION_MAX_CTX_DEFAULT);
    if (p.n_ctx > (1 << 24)) return err_set(KVF_ERR_INVALID_ARG, "n_ctx %d too large", p.n_ctx);
    if (p.n_batch <= 0 || p.n_batch > 65536)
        return err_set(KVF_ERR_INVALID_ARG, "n_batch %d out of range [1, 65536]", p.n_batch);
    p.n_batch = KVF_MIN(p.n_batch, p.n_ctx);
    if (p.n_threads <= 0) p.n_threads = m->n_threads;
    if (p.n_threads > 1024) return err_set(KVF_ERR_INVALID_ARG, "n_threads %d out of range", p.n_threads);
    if (p.kv_gather < 0) return err_set(KVF_ERR_INVALID_ARG, "kv_gather %d is negative", p.kv_gather);
    p.kv_gather = KVF_MIN(p.kv_gather, p.n_ctx);

    struct kv_policy policy;
    enum kvf_status st = kv_policy_parse_budget(p.kv_spec, p.kv_budget, &policy);
    if (st != KVF_OK) return st;
    const char *spec = p.kv_spec;
    p.kv_spec = NULL; /* not kept: the caller owns the string (s->spec is a copy) */
    if (policy.blocks && policy.block > 0) p.n_batch = KVF_MIN(p.n_batch, policy.block); /* a batch is a block */
    struct kvf_session *s;
    if ((st = session_new(m, &p, &policy, spec, NULL, &s)) != KVF_OK) return st;
    if (load_profile && kv_budget_rule(policy.alloc)->budget->shares && policy.profile[0] &&
        (st = compress_load_profile(s, policy.profile)) != KVF_OK) {
        kvf_session_free(s);
        return st;
    }
    *out = s;
    return KVF_OK;
}

void kvf_session_reset(struct kvf_session *s) {
    kv_cache_clear(&s->kv);
    s->n_past = 0;
    s->has_logits = false;
    kv_qwin_clear(&s->qwin);
    kv_qwin_clear(&s->qprox);
    kv_stats_clear(&s->stats);
    compress_reset(&s->cs, &s->policy);
    kv_merge_log_clear(&s->merges);
    s->part_of = NULL;
    s->swa_lost = -1;
}

enum kvf_status kvf_session_truncate(struct kvf_session *s, int n) {
    if (!s || n < 0 || n > s->n_past)
        return err_set(KVF_ERR_INVALID_ARG, "truncate: %d positions of the %d seen", n, s ? s->n_past : 0);
    if (s->swa_lost >= 0 && n < s->swa_lost + s->model->hp.sliding_window)
        return err_set(KVF_ERR_UNSUPPORTED, "truncate to %d positions: the sliding-window layers freed position %d, "
                       "which position %d would see (the least is %d; kv_swa_full keeps them)", n, s->swa_lost, n,
                       s->swa_lost + s->model->hp.sliding_window);
    int *keep = malloc(sizeof *keep * (size_t)KVF_MAX(1, kv_cache_most(&s->kv)));
    if (!keep) return err_set(KVF_ERR_NOMEM, "truncate: out of memory");
    enum kvf_status st = KVF_OK;
    for (int l = 0; l < s->kv.n_layer && st == KVF_OK; l++)
        for (int g = 0; g < s->kv.n_head_kv && st == KVF_OK; g++) {
            const struct kv_head *h = kv_cache_head(&s->kv, l, g);
            int k = 0;
            for (int j = 0; j < h->n; j++)
                if (h->tag[j].pos < n) keep[k++] = j;
            st = kv_cache_keep(&s->kv, l, g, keep, k);
            if (s->merges.heads) { /* records of forgotten positions go too */
                struct kv_merge_list *ml = kv_merge_log_head(&s->merges, l, g);
                int m = 0;
                for (int i = 0; i < ml->n; i++)
                    if (ml->m[i].from < n && ml->m[i].into < n) ml->m[m++] = ml->m[i];
                ml->n = m;
            }
        }
    free(keep);
    /* Storage fitted to what is left, as after a compression: a server
     * reserves a truncated session's memory for its new positions only. */
    if (st == KVF_OK) st = kv_cache_fit(&s->kv);
    s->n_past = n;
    s->has_logits = false;
    s->part_of = NULL;
    kv_qwin_clear(&s->qwin); /* the latest queries were of forgotten positions */
    return st;
}

static bool session_mrope(const struct kvf_session *s) {
    const int *m = s->model->hp.mrope;
    return m[0] + m[1] + m[2] > 0;
}

static enum kvf_status context_check(const struct kvf_session *s, int n) {
    return n > s->params.n_ctx - s->n_past
        ? err_set(KVF_ERR_CONTEXT, "%d positions do not fit: %d of %d used", n, s->n_past, s->params.n_ctx)
        : KVF_OK;
}

/* Doubling up to n_ctx: a session decoding one token at a time grows its
 * buffers log(n) times. */
static int room_next(const struct kvf_session *s, int have, int need) {
    return KVF_MIN(s->params.n_ctx, KVF_MAX(need, 2 * have));
}

enum kvf_status session_room(struct kvf_session *s, int n_pos, int n_keys) {
    if (n_pos > s->room) {
        const int room = room_next(s, s->room, n_pos);
        if (!mem_resize(&s->tags, (size_t)room, sizeof *s->tags) ||
            !mem_resize(&s->toks, (size_t)room, sizeof *s->toks) ||
            (session_mrope(s) && !mem_resize(&s->rope_next, (size_t)room, sizeof *s->rope_next)))
            return err_set(KVF_ERR_NOMEM, "out of memory recording %d positions", room);
        s->room = room;
    }
    const int keys = n_keys > s->keys ? room_next(s, s->keys, n_keys) : s->keys;
    enum kvf_status st = fwd_reserve_keys(&s->fw, s->model, keys);
    if (st == KVF_OK) st = reduce_state_reserve_keys(&s->rd, keys);
    if (st == KVF_OK) st = compress_reserve(&s->cs, s, keys); /* and the query window's rows */
    if (st == KVF_OK) s->keys = keys;
    return st;
}

enum kvf_status session_reserve(struct kvf_session *s, int n) {
    if (context_check(s, n) != KVF_OK) return KVF_ERR_CONTEXT;
    enum kvf_status st = kv_qwin_reserve(&s->qwin, kv_qwin_most(&s->qwin) + n);
    if (st == KVF_OK) st = kv_qwin_reserve(&s->qprox, kv_qwin_most(&s->qprox) + n);
    if (st == KVF_OK) st = session_room(s, s->n_past + n, kv_cache_most(&s->kv) + n);
    if (st == KVF_OK) st = fwd_reserve(&s->fw, s->model, n);
    return st == KVF_OK ? reduce_state_reserve(&s->rd, n) : st;
}

/* The rope position a text token at position pos takes (M-RoPE): one past
 * the position before it, or past the image it ends. */
static int32_t rope_after(const struct kvf_session *s, int pos) { return pos > 0 ? s->rope_next[pos - 1] : 0; }

/* M-RoPE positions of the pass's rows [at, at + n), which sit at positions
 * pos0.. of the session: a prompt's (rel [n], counted from prompt_rope0),
 * or text after what is in (rel NULL: decoding, kvf_session_prefill*).
 * Each position's rope_next is recorded. */
static void session_rope(struct kvf_session *s, int at, int32_t pos0, const struct mrope_pos *rel, int n) {
    if (!session_mrope(s)) return;
    for (int t = 0; t < n; t++) {
        int32_t *r = s->fw.rpos[at + t];
        if (rel) {
            for (int c = 0; c < 3; c++) r[c] = s->prompt_rope0 + rel[t].pos[c];
            s->rope_next[pos0 + t] = s->prompt_rope0 + rel[t].next;
        } else {
            r[0] = r[1] = r[2] = rope_after(s, pos0 + t);
            s->rope_next[pos0 + t] = r[0] + 1;
        }
    }
}

/* Whether a session's prefill is a plain one: any policy's work starts once
 * the prompt is in. */
static bool prefill_plain(const struct kvf_session *s) {
    return s->rd.n_steps == 0 && !s->policy.blocks && !s->policy.question;
}

/* An empty session s (of src's shape) gets src's positions: the cache (its
 * capacities too), tags, token ids, rope positions and logits (its rule
 * statistics are taken apart: kv_stats_take, or copied by session_new). */
static enum kvf_status session_take(struct kvf_session *s, const struct kvf_session *src) {
    enum kvf_status st = kv_cache_copy(&s->kv, &src->kv);
    if (st == KVF_OK) st = session_room(s, src->n_past, src->keys);
    if (st != KVF_OK) return st;
    memcpy(s->tags, src->tags, sizeof *s->tags * (size_t)src->n_past);
    memcpy(s->toks, src->toks, sizeof *s->toks * (size_t)src->n_past);
    if (s->rope_next) memcpy(s->rope_next, src->rope_next, sizeof *s->rope_next * (size_t)src->n_past);
    memcpy(s->logits, src->logits, sizeof(float) * (size_t)s->model->hp.n_vocab);
    s->n_past = src->n_past;
    s->has_logits = src->has_logits;
    s->swa_lost = src->swa_lost;
    return KVF_OK;
}

enum kvf_status kvf_session_fork(const struct kvf_session *src, const char *kv_spec, double kv_budget,
                                 struct kvf_session **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "fork: no output");
    *out = NULL;
    if (!src) return err_set(KVF_ERR_INVALID_ARG, "fork: NULL session");
    if (src->cs.compressed || !prefill_plain(src))
        return err_set(KVF_ERR_UNSUPPORTED, "fork: the session is compressed or its policy changed its prefill");
    struct kvf_session_params p = src->params;
    p.kv_spec = kv_spec;
    p.kv_budget = kv_budget;
    p.kv_gather = 0;
    struct kvf_session *s;
    enum kvf_status st = kvf_session_init(src->model, &p, &s);
    if (st != KVF_OK) return st;
    if (!prefill_plain(s))
        st = err_set(KVF_ERR_UNSUPPORTED, "fork: '%s' changes the prefill (reduce, schedule or question stage)",
                     kv_spec);
    else if (s->kv.has_acc && !src->kv.has_acc)
        st = err_set(KVF_ERR_UNSUPPORTED, "fork: '%s' scores with attention sums the session did not gather", kv_spec);
    /* a prefill of its own would hold the last min(cap, n_past) queries of each layer */
    else if ((st = kv_qwin_copy_last(&s->qwin, &src->qwin, src->n_past)) == KVF_ERR_UNSUPPORTED)
        st = err_set(KVF_ERR_UNSUPPORTED, "fork: '%s' needs the last %d queries, the session kept %d", kv_spec,
                     KVF_MIN(s->qwin.cap, src->n_past), src->qwin.n ? src->qwin.n[0] : 0);
    if (st == KVF_OK) st = kv_stats_take(&s->stats, &src->stats, kv_spec);
    if (st == KVF_OK) st = session_take(s, src);
    if (st != KVF_OK) {
        kvf_session_free(s);
        return st;
    }
    *out = s;
    return KVF_OK;
}

enum kvf_status kvf_session_copy(const struct kvf_session *src, struct kvf_session **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "copy: no output");
    *out = NULL;
    if (!src) return err_set(KVF_ERR_INVALID_ARG, "copy: NULL session");
    struct kvf_session *s;
    enum kvf_status st = session_new(src->model, &src->params, &src->policy, src->spec, src, &s);
    if (st != KVF_OK) return st;
    st = kv_qwin_copy(&s->qwin, &src->qwin); /* first: session_take sizes the compression scratch to it */
    if (st == KVF_OK) st = session_take(s, src);
    if (st == KVF_OK) st = kv_merge_log_copy(&s->merges, &src->merges);
    if (st != KVF_OK) {
        kvf_session_free(s);
        return st;
    }
    compress_copy(&s->cs, &src->cs, s->kv.n_layer, s->kv.n_head_kv);
    if (src->note && kvf_session_set_note(s, src->note) != KVF_OK) {
        kvf_session_free(s);
        return KVF_ERR_NOMEM;
    }
    s->kv.peak_bytes = src->kv.peak_bytes; /* the copy has been where src has */
    s->kv.peak_entries = src->kv.peak_entries;
    s->prompt_rope0 = src->prompt_rope0;
    s->part_of = src->part_of, s->part_next = src->part_next, s->part_base = src->part_base;
    *out = s;
    return KVF_OK;
}

/* Whether layer l frees the entries that fall out of its window. */
static bool layer_swa(const struct kvf_session *s, int l) {
    return !s->params.kv_swa_full && s->model->layers[l].is_local && s->model->hp.sliding_window > 0;
}

int session_layer_seen(const struct kvf_session *s, int l) {
    return layer_swa(s, l) ? KVF_MIN(s->n_past, s->model->hp.sliding_window - 1) : s->n_past;
}

/* Out-of-window entries a windowed head keeps while the prompt and the
 * reply go in: when more than 2 x SWA_SLACK are there, all but SWA_SLACK
 * go. Freeing moves the window's rows, so it happens every SWA_SLACK
 * steps, not every step; the SWA_SLACK kept let a session go back that
 * many positions (a server's next turn re-tokenizing the end of a reply). */
#define SWA_SLACK 32

enum kvf_status session_swa_drop(struct kvf_session *s, int l, int g, int slack, int *dropped) {
    const int32_t last = s->n_past - s->model->hp.sliding_window; /* the newest position no query will see */
    const struct kv_head *h = kv_cache_head(&s->kv, l, g);
    if (dropped) *dropped = 0;
    if (!layer_swa(s, l) || last < 0 || s->probing) return KVF_OK;
    const int lo = kv_head_count_upto(h, last);
    if (lo <= 2 * slack) return KVF_OK;
    const int drop = lo - slack;
    const int32_t lost = h->tag[drop - 1].pos; /* the newest position this head frees */
    s->swa_lost = KVF_MAX(s->swa_lost, lost);
    /* The decode stage's fixed-distance rule counts from the end of the compressed prompt. */
    int *n0 = s->cs.n0 ? &s->cs.n0[(size_t)l * s->kv.n_head_kv + g] : NULL;
    if (n0) *n0 = KVF_MAX(0, *n0 - drop);
    if (s->merges.heads) { /* records of entries merged into freed ones go too */
        struct kv_merge_list *ml = kv_merge_log_head(&s->merges, l, g);
        int m = 0;
        for (int i = 0; i < ml->n; i++)
            if (ml->m[i].into > lost) ml->m[m++] = ml->m[i];
        ml->n = m;
    }
    if (dropped) *dropped = drop;
    return kv_cache_drop_front(&s->kv, l, g, drop);
}

/* session_swa_drop on every head. */
static enum kvf_status session_swa_free(struct kvf_session *s, int slack) {
    enum kvf_status st = KVF_OK;
    for (int l = 0; l < s->kv.n_layer; l++)
        for (int g = 0; g < s->kv.n_head_kv && st == KVF_OK; g++) st = session_swa_drop(s, l, g, slack, NULL);
    return st;
}

/* The session's parts, lent to one forward pass. */
static struct decoder session_decoder(struct kvf_session *s) {
    return (struct decoder){
        .model = s->model,
        .fw = &s->fw,
        .kv = &s->kv,
        .qwin = &s->qwin,
        .rd = &s->rd,
        .merges = &s->merges,
        /* not the statistics of the question's trial run (block-wise question=1) */
        .gather = !s->probing,
        .stats = &s->stats,
        .tap = s->tap,
        .nsm_n = s->cs.compressed && s->policy.decode_softmax ? (float)s->policy.nsm_n : 0.0f,
    };
}

/* Runs the n rows the pass holds (decoder_input put them there) at
 * positions n_past.., recording their tags. */
static enum kvf_status session_pass(struct kvf_session *s, int n, float *all_logits) {
    memcpy(s->tags + s->n_past, s->fw.btag, sizeof *s->tags * (size_t)n);
    const struct decoder d = session_decoder(s);
    enum kvf_status st = decoder_forward(&d, n, all_logits, s->logits);
    s->n_past += n;
    s->has_logits = st == KVF_OK;
    return st == KVF_OK ? session_swa_free(s, SWA_SLACK) : st;
}

/* Under block-wise prefill, a pass that filled the block budget is evicted
 * back to it. */
static enum kvf_status session_block_done(struct kvf_session *s) {
    const struct kv_policy *p = &s->policy;
    if (p->blocks && !s->cs.compressed && !s->probing && s->n_past >= (p->first > 0 ? p->first : p->block_budget))
        return session_evict(s, EVICT_BLOCK);
    return KVF_OK;
}

/* Rows of an image that attend to each other (model.h:
 * image_bidirectional) must be in one pass. */
static bool same_image(const struct kvf_model *m, const struct kvf_tag *a, const struct kvf_tag *b) {
    return m->hp.image_bidirectional && a->modality == KVF_MOD_IMAGE && b->modality == KVF_MOD_IMAGE &&
           a->media == b->media;
}

/* Runs n inputs (ids or embedding rows, already checked) in batches of at
 * most `batch` rows (more when an image would be split); under block-wise
 * prefill a batch is a block, evicted back to the block budget after it. */
static enum kvf_status session_run(struct kvf_session *s, const int32_t *tokens, const float *embd, const float *ds,
                                   const struct kvf_tag *tags, const struct mrope_pos *rope, int n, int batch,
                                   float *all_logits) {
    enum kvf_status st = context_check(s, n);
    if (st != KVF_OK) return st;
    const int n_vocab = s->model->hp.n_vocab, E = s->model->hp.n_embd;
    for (int i = 0, nb; i < n; i += nb) {
        nb = KVF_MIN(batch, n - i);
        while (tags && i + nb < n && same_image(s->model, &tags[i + nb - 1], &tags[i + nb])) nb++;
        /* batch by batch: under block-wise prefill the heads stay near the block budget, and so does the scratch */
        if ((st = session_reserve(s, nb)) != KVF_OK) return st;
        decoder_input(&s->fw, s->model, 0, tokens ? tokens + i : NULL, embd ? embd + (size_t)i * E : NULL,
                      ds ? ds + (size_t)i * s->model->hp.n_deepstack * E : NULL, tags ? tags + i : NULL, s->n_past, nb);
        for (int t = 0; t < nb; t++) s->toks[s->n_past + t] = tokens ? tokens[i + t] : -1;
        session_rope(s, 0, s->n_past, rope ? rope + i : NULL, nb);
        st = session_pass(s, nb, all_logits ? all_logits + (size_t)i * n_vocab : NULL);
        if (st == KVF_OK) st = session_block_done(s);
        if (st != KVF_OK) return st;
    }
    return KVF_OK;
}

enum kvf_status kvf_session_prefill(struct kvf_session *s, const int32_t *tokens, int n, float *all_logits) {
    if (!s || (n > 0 && !tokens) || n < 0) return err_set(KVF_ERR_INVALID_ARG, "prefill: bad arguments");
    if (n == 0) return KVF_OK;
    const int n_vocab = s->model->hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return err_set(KVF_ERR_INVALID_ARG, "token id %d out of range [0, %d)", tokens[i], n_vocab);
    return session_run(s, tokens, NULL, NULL, NULL, NULL, n, s->params.n_batch, all_logits);
}

enum kvf_status kvf_session_prefill_embd(struct kvf_session *s, const float *embd, const struct kvf_tag *tags, int n,
                                         float *all_logits) {
    if (!s || (n > 0 && !embd) || n < 0) return err_set(KVF_ERR_INVALID_ARG, "prefill_embd: bad arguments");
    if (n == 0) return KVF_OK;
    for (int i = 0; tags && i < n; i++)
        if (tags[i].modality < KVF_MOD_TEXT || tags[i].modality > KVF_MOD_VIDEO)
            return err_set(KVF_ERR_INVALID_ARG, "tag %d: modality %d is not text, image or video", i, tags[i].modality);
    return session_run(s, NULL, embd, NULL, tags, NULL, n, s->params.n_batch, all_logits);
}

/* Block-wise question=1: the last block_window tokens of the prompt's last
 * text segment (its question) run alone at their own positions; their
 * queries are kept as the proxies that score every block (docs/METHODS.md
 * §5.7.2), and their entries removed. Only those tokens run,
 * so the trial adds no more than the window to the cache. */
static enum kvf_status question_probe(struct kvf_session *s, const struct kvf_prompt *p) {
    int g = p->n_segs - 1;
    while (g >= 0 && p->segs[g].media) g--;
    if (g < 0 || !kv_qwin_on(&s->qprox)) return KVF_OK;
    const struct prompt_seg *sg = &p->segs[g];
    const int L = s->kv.n_layer, H = s->kv.n_head_kv, n_past = s->n_past;
    int *had = malloc(sizeof(int) * (size_t)L * H);
    if (!had) return err_set(KVF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < L * H; i++) had[i] = s->kv.heads[i].n;
    kv_qwin_clear(&s->qwin);
    s->probing = true;
    const int n = KVF_MIN(sg->n, s->policy.block_window), start = sg->start + sg->n - n;
    s->n_past += start;
    enum kvf_status st = session_run(s, p->ids + start, NULL, NULL, p->tags + start,
                                     p->rope ? p->rope + start : NULL, n, s->params.n_batch, NULL);
    s->probing = false;
    s->n_past = n_past;
    s->has_logits = false;
    /* The trial's window becomes the proxies; the prompt's own starts empty. */
    const struct kv_qwin proxies = s->qwin;
    s->qwin = s->qprox;
    s->qprox = proxies;
    kv_qwin_clear(&s->qwin);
    for (int i = 0; st == KVF_OK && i < L * H; i++) st = kv_cache_truncate(&s->kv, i / H, i % H, had[i]);
    free(had);
    return st;
}

static enum kvf_status prompt_check_ids(const struct kvf_session *s, const struct kvf_prompt *p) {
    for (int i = 0; i < p->n; i++)
        if (p->ids[i] >= s->model->hp.n_vocab)
            return err_set(KVF_ERR_INVALID_ARG, "prompt made for another model (id %d)", p->ids[i]);
    return KVF_OK;
}

/* The checks of a prompt about to be prefilled from its start. */
static enum kvf_status prompt_check(const struct kvf_session *s, const struct kvf_prompt *p) {
    if (p->n > s->params.n_ctx - s->n_past)
        return err_set(KVF_ERR_CONTEXT, "the prompt's %d positions do not fit: %d of %d used", p->n, s->n_past,
                       s->params.n_ctx);
    return prompt_check_ids(s, p);
}

/* Text runs go in batches of n_batch, except under block-wise prefill with
 * a block per image or frame: no larger than the largest of them, so that
 * the cache never holds more than the block budget plus one block (a prompt
 * within the budget is never evicted, and keeps the batching of a plain
 * prefill). n_past0: the positions before the prompt. */
static int prompt_text_batch(const struct kvf_session *s, const struct kvf_prompt *p, int n_past0) {
    int text_batch = s->params.n_batch;
    if (s->policy.blocks && s->policy.block == 0 && n_past0 + p->n > s->policy.block_budget) {
        int largest = 0;
        for (int g = 0; g < p->n_segs; g++) largest = p->segs[g].media ? KVF_MAX(largest, p->segs[g].n) : largest;
        if (largest > 0) text_batch = KVF_MIN(text_batch, largest);
    }
    return text_batch;
}

/* A media item's embedding rows from row `first` on, and their DeepStack
 * features (NULL: none). */
static const float *media_embd(const struct kvf_media *md, int first) {
    return md->embd + (size_t)first * md->n_embd;
}
static const float *media_deepstack(const struct kvf_media *md, int first) {
    return md->deepstack ? md->deepstack + (size_t)first * md->n_deepstack * md->n_embd : NULL;
}

/* The prompt's positions [first, first + n), segment by segment. */
static enum kvf_status prompt_run(struct kvf_session *s, const struct kvf_prompt *p, int first, int n, int text_batch,
                                  float *all_logits) {
    const int n_vocab = s->model->hp.n_vocab;
    enum kvf_status st = KVF_OK;
    for (int g = 0; st == KVF_OK && g < p->n_segs; g++) {
        const struct prompt_seg *sg = &p->segs[g];
        const int lo = KVF_MAX(sg->start, first), hi = KVF_MIN(sg->start + sg->n, first + n);
        if (lo >= hi) continue;
        float *lg = all_logits ? all_logits + (size_t)(lo - first) * n_vocab : NULL;
        const struct mrope_pos *rope = p->rope ? p->rope + lo : NULL;
        const struct kvf_media *md = sg->media;
        const int at = sg->first + lo - sg->start;
        st = md ? session_run(s, NULL, media_embd(md, at), media_deepstack(md, at), p->tags + lo, rope, hi - lo,
                              s->params.n_batch, lg)
                : session_run(s, p->ids + lo, NULL, NULL, p->tags + lo, rope, hi - lo, text_batch, lg);
    }
    return st;
}

enum kvf_status kvf_session_prefill_prompt(struct kvf_session *s, const struct kvf_prompt *p, float *all_logits) {
    if (!s || !p) return err_set(KVF_ERR_INVALID_ARG, "prefill_prompt: NULL argument");
    enum kvf_status st = prompt_check(s, p);
    if (st != KVF_OK) return st;
    s->part_of = NULL;
    if (p->rope) s->prompt_rope0 = rope_after(s, s->n_past);
    if (s->policy.question) st = question_probe(s, p);
    if (st == KVF_OK && s->rd.n_steps > 0) {
        /* A reduce step weighs an image's tokens by the text after it: the
         * whole prompt is one pass. */
        if ((st = session_reserve(s, p->n)) != KVF_OK) return st;
        for (int g = 0; g < p->n_segs; g++) {
            const struct prompt_seg *sg = &p->segs[g];
            decoder_input(&s->fw, s->model, sg->start, sg->media ? NULL : p->ids + sg->start,
                          sg->media ? media_embd(sg->media, sg->first) : NULL,
                          sg->media ? media_deepstack(sg->media, sg->first) : NULL, p->tags + sg->start,
                          s->n_past + sg->start, sg->n);
            for (int t = 0; t < sg->n; t++) s->toks[s->n_past + sg->start + t] = sg->media ? -1 : p->ids[sg->start + t];
            session_rope(s, sg->start, s->n_past + sg->start, p->rope ? p->rope + sg->start : NULL, sg->n);
        }
        return session_pass(s, p->n, all_logits);
    }
    return st == KVF_OK ? prompt_run(s, p, 0, p->n, prompt_text_batch(s, p, s->n_past), all_logits) : st;
}

enum kvf_status kvf_session_prefill_prompt_part(struct kvf_session *s, const struct kvf_prompt *p, int first, int n) {
    if (!s || !p || first < 0 || n < 0 || n > p->n - first)
        return err_set(KVF_ERR_INVALID_ARG, "prefill_prompt_part: bad arguments");
    if (s->rd.n_steps > 0 || s->policy.question)
        return err_set(KVF_ERR_UNSUPPORTED, "prefill_prompt_part: this policy needs the whole prompt in one pass "
                       "(a reduce stage, or block-wise question=1): use kvf_session_prefill_prompt");
    if (first == 0 || (s->part_of != p && first == s->n_past)) {
        /* From the start, or after the first positions a truncated session
         * shares with this prompt. */
        if (p->n - first > s->params.n_ctx - s->n_past)
            return err_set(KVF_ERR_CONTEXT, "the prompt's %d positions do not fit: %d of %d used", p->n - first,
                           s->n_past, s->params.n_ctx);
        const enum kvf_status st = prompt_check_ids(s, p);
        if (st != KVF_OK) return st;
        s->part_of = p;
        s->part_next = first;
        s->part_base = s->n_past - first;
        /* The prompt's position `first` continues the session's rope positions. */
        if (p->rope) s->prompt_rope0 = rope_after(s, s->n_past) - (first < p->n ? p->rope[first].pos[0] : 0);
    } else if (s->part_of != p || first != s->part_next || s->n_past != s->part_base + first) {
        return err_set(KVF_ERR_INVALID_ARG, "prefill_prompt_part: positions from %d, but %d of this prompt are in",
                       first, s->part_of == p ? s->part_next : 0);
    }
    /* The whole prompt's batching: as if it had started at part_base. */
    const int text_batch = prompt_text_batch(s, p, s->part_base);
    /* The part ends where a pass of the whole prompt ends, so that the
     * parts run the very passes of kvf_session_prefill_prompt (block-wise
     * eviction and the statistics' sums depend on them). */
    int end = first + n;
    for (int g = 0; g < p->n_segs; g++) {
        const struct prompt_seg *sg = &p->segs[g];
        if (end <= sg->start || end >= sg->start + sg->n) continue;
        /* An image whose tokens attend to each other is one pass. */
        const int b = !sg->media ? text_batch : s->model->hp.image_bidirectional ? sg->n : s->params.n_batch;
        end = KVF_MIN(sg->start + sg->n, sg->start + (end - sg->start + b - 1) / b * b);
        break;
    }
    const enum kvf_status st = prompt_run(s, p, first, end - first, text_batch, NULL);
    s->part_next = end;
    if (st != KVF_OK || s->part_next == p->n) s->part_of = NULL;
    return st;
}

enum kvf_status session_user_template(const struct kvf_model *m, char *buf, int cap, const char **after) {
    static const char mark[] = "\x01user\x01";
    const struct kvf_chat_message msg = {"user", mark};
    int32_t len;
    if (kvf_chat_apply(m, NULL, &msg, 1, true, buf, cap, &len) != KVF_OK) {
        buf[0] = '\0';
        *after = "\n";
        return KVF_OK;
    }
    char *at = strstr(buf, mark);
    if (!at) return err_set(KVF_ERR_INTERNAL, "the chat template lost the user's text");
    *at = '\0';
    *after = at + sizeof mark - 1;
    return KVF_OK;
}

/* The chat template's end of a user turn and start of the assistant's
 * (kvpress: what follows the user's text), or "\n" without a template. */
static enum kvf_status pass_turn(const struct kvf_model *m, char *buf, int cap) {
    const char *after;
    const enum kvf_status st = session_user_template(m, buf, cap, &after);
    if (st == KVF_OK) memmove(buf, after, strlen(after) + 1);
    return st;
}

/* One run of n ids at positions n0.. through the decoder, its queries'
 * attention maxima folded into cs.recon; its entries removed after it. */
static enum kvf_status pass_run(struct kvf_session *s, const int32_t *ids, int n, const int *had, float *logits) {
    const int L = s->kv.n_layer, H = s->kv.n_head_kv, n0 = s->n_past;
    struct kv_qwin off = {0};
    struct reduce_state none = {0};
    const struct decoder d = {.model = s->model,
                              .fw = &s->fw,
                              .kv = &s->kv,
                              .qwin = &off,
                              .rd = &none,
                              .merges = &s->merges,
                              .recon = s->cs.recon,
                              .recon_stride = s->cs.recon_stride,
                              .stats = &s->stats,
                              .tap = s->tap};
    const int32_t rope0 = session_next_rope(s);
    if (s->tap) s->tap->run_end = n0 + n;
    enum kvf_status st = KVF_OK;
    for (int i = 0, nb; st == KVF_OK && i < n; i += nb) {
        nb = KVF_MIN(s->params.n_batch, n - i);
        if ((st = fwd_reserve(&s->fw, s->model, nb)) != KVF_OK) break;
        decoder_input(&s->fw, s->model, 0, ids + i, NULL, NULL, NULL, n0 + i, nb);
        for (int t = 0; session_mrope(s) && t < nb; t++)
            s->fw.rpos[t][0] = s->fw.rpos[t][1] = s->fw.rpos[t][2] = rope0 + i + t;
        st = decoder_forward(&d, nb, NULL, logits);
    }
    /* The pass's entries go even when it failed, so the cache is the context's again. */
    for (int i = 0; i < L * H; i++) {
        const enum kvf_status e = kv_cache_truncate(&s->kv, i / H, i % H, had[i]);
        if (st == KVF_OK) st = e;
    }
    return st;
}

enum kvf_status kvf_kv_compress_positions(const struct kvf_model *m, const char *kv_spec, int32_t n_context,
                                          int32_t *n_extra) {
    if (!m || !n_extra || n_context < 0)
        return err_set(KVF_ERR_INVALID_ARG, "kvf_kv_compress_positions: a NULL model or result, or n_context < 0");
    *n_extra = 0;
    struct kv_policy p;
    enum kvf_status st = kv_policy_parse(kv_spec, &p);
    const struct kv_pass_ops *pass = st == KVF_OK ? kv_policy_scorer(&p)->pass : NULL;
    if (!pass || n_context == 0) return st;
    char turn[512];
    if ((st = pass_turn(m, turn, sizeof turn)) == KVF_OK) *n_extra = pass->most(&p, n_context, turn);
    return st;
}

/* A scoring rule's pass over the context (struct kv_pass_ops; KVzip's
 * reconstruction, src/kv/policy/kvzip.c): the runs the rule writes go
 * through the model one after the other at the positions after the
 * context, each attending to the whole cache and to itself, and each is
 * removed after it, so the cache holds at most the context and one run
 * (past n_ctx if need be: the attention scratch grows). cs.recon gets, for
 * each entry, the most attention any query of any run paid it. */
enum kvf_status session_rule_pass(struct kvf_session *s, const struct kv_pass_ops *pass) {
    const int L = s->kv.n_layer, H = s->kv.n_head_kv;
    const int32_t bos = tok_bos(s->model->tok);
    const int held = kv_cache_most(&s->kv);
    /* The context's text tokens but BOS: media rows are not repeated (their
     * entries are scored by what the runs over the text read of them). */
    int n_text = 0;
    for (int i = 0; i < s->n_past; i++) n_text += s->toks[i] >= 0 && s->toks[i] != bos;
    char turn[512];
    enum kvf_status st = pass_turn(s->model, turn, sizeof turn);
    const int cap = pass->most(&s->policy, n_text, turn);
    const size_t stride = (size_t)held + cap;
    int32_t *text = malloc(sizeof *text * ((size_t)n_text + 1)), *ids = malloc(sizeof *ids * (size_t)cap);
    int *had = malloc(sizeof *had * (size_t)L * H);
    float *logits = malloc(sizeof *logits * (size_t)s->model->hp.n_vocab);
    free(s->cs.recon);
    s->cs.recon = calloc((size_t)L * H * stride, sizeof(float));
    s->cs.recon_stride = stride;
    if (st == KVF_OK && (!text || !ids || !had || !logits || !s->cs.recon))
        st = err_set(KVF_ERR_NOMEM, "%s: out of memory for a pass over %d tokens", kv_policy_scorer(&s->policy)->name,
                     n_text);
    if (st == KVF_OK) st = fwd_reserve_keys(&s->fw, s->model, (int)stride);
    for (int i = 0, k = 0; st == KVF_OK && i < s->n_past; i++)
        if (s->toks[i] >= 0 && s->toks[i] != bos) text[k++] = s->toks[i];
    for (int i = 0; st == KVF_OK && i < L * H; i++) had[i] = s->kv.heads[i].n;
    const struct kv_pass_in in = {.p = &s->policy, .tok = s->model->tok, .text = text, .n_text = n_text, .turn = turn};
    for (int k = 0, n = 1; st == KVF_OK && n > 0; k++)
        if ((st = pass->run(&in, k, ids, cap, &n)) == KVF_OK && n > 0) st = pass_run(s, ids, n, had, logits);
    free(text);
    free(ids);
    free(had);
    free(logits);
    return st;
}

enum kvf_status kvf_session_compress(struct kvf_session *s) {
    if (!s) return err_set(KVF_ERR_INVALID_ARG, "compress: NULL session");
    /* What the prompt left allocated beyond its entries is returned, so
     * that the bytes kept compare with kvf_session_kv_full_bytes exactly,
     * and so are its pass buffers: decoding runs a row at a time (a server
     * holds many decoding sessions; a later prefill takes them again).
     * Windowed layers lose what they no longer see: the eviction frees it
     * in the layers it evicts from (after their window queries' attention,
     * which still sees some of it), session_swa_free in the others. */
    const bool full = s->policy.method == KV_FULL;
    const struct kv_pass_ops *pass = kv_policy_scorer(&s->policy)->pass;
    enum kvf_status st = pass ? session_rule_pass(s, pass) : KVF_OK;
    if (st == KVF_OK && !full) st = session_evict(s, EVICT_COMPRESS);
    free(s->cs.recon); /* its entries' indices are those of the cache before this compression */
    s->cs.recon = NULL;
    if (st == KVF_OK) st = session_swa_free(s, 0);
    if (st == KVF_OK) st = kv_cache_fit(&s->kv);
    fwd_release_rows(&s->fw);
    if (full) return st;
    for (size_t i = 0; i < (size_t)s->kv.n_layer * s->kv.n_head_kv; i++) s->cs.n0[i] = s->kv.heads[i].n;
    s->cs.compressed = true;
    s->cs.decode_steps = 0;
    return st;
}

/* The decode stage, after each decoded token: its rule's eviction when
 * due, or the preset's own compression again. */
static enum kvf_status decode_maintain(struct kvf_session *s) {
    const struct kv_rule *r = kv_decode_rule(s->policy.decode);
    if (!r->due || !r->due(&s->policy, &s->cs.decode_steps)) return KVF_OK;
    return session_evict(s, r->score ? EVICT_DECODE : EVICT_COMPRESS);
}

enum kvf_status kvf_session_decode(struct kvf_session *s, int32_t token) {
    enum kvf_status st = kvf_session_prefill(s, &token, 1, NULL);
    return st == KVF_OK && s->cs.compressed ? decode_maintain(s) : st;
}

enum kvf_status kvf_session_decode_batch(struct kvf_session *const *ss, const int32_t *tokens, int n) {
    if (!ss || !tokens || n < 1) return err_set(KVF_ERR_INVALID_ARG, "decode_batch: bad arguments");
    for (int i = 0; i < n; i++) {
        if (!ss[i] || ss[i]->model != ss[0]->model)
            return err_set(KVF_ERR_INVALID_ARG, "decode_batch: session %d is NULL or of another model", i);
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i])
                return err_set(KVF_ERR_INVALID_ARG, "decode_batch: session %d is also session %d", i, j);
        if (tokens[i] < 0 || tokens[i] >= ss[i]->model->hp.n_vocab)
            return err_set(KVF_ERR_INVALID_ARG, "decode_batch: token id %d out of range [0, %d)", tokens[i],
                           ss[i]->model->hp.n_vocab);
        if (ss[i]->n_past >= ss[i]->params.n_ctx)
            return err_set(KVF_ERR_CONTEXT, "decode_batch: session %d is full (%d positions)", i, ss[i]->n_past);
    }
    if (n == 1) return kvf_session_decode(ss[0], tokens[0]);
    enum kvf_status st = KVF_OK;
    for (int i = 0; i < n && st == KVF_OK; i++) st = session_reserve(ss[i], 1);
    const struct kvf_model *m = ss[0]->model;
    struct decoder *ds = malloc(sizeof *ds * (size_t)n);
    float *logits = malloc(sizeof *logits * (size_t)n * m->hp.n_vocab);
    struct fwd_scratch b = {0};
    if (st == KVF_OK && (!ds || !logits)) st = err_set(KVF_ERR_NOMEM, "decode_batch: out of memory");
    fwd_init(&b, n, ss[0]->fw.n_threads, false);
    if (st == KVF_OK) st = fwd_reserve(&b, m, n);
    if (st == KVF_OK) {
        for (int i = 0; i < n; i++) {
            struct kvf_session *s = ss[i];
            decoder_input(&s->fw, m, 0, &tokens[i], NULL, NULL, NULL, s->n_past, 1);
            session_rope(s, 0, s->n_past, NULL, 1);
            s->tags[s->n_past] = s->fw.btag[0];
            ds[i] = session_decoder(s);
        }
        st = decoder_forward_rows(ds, n, &b, logits);
        for (int i = 0; i < n; i++) {
            struct kvf_session *s = ss[i];
            memcpy(s->logits, logits + (size_t)i * m->hp.n_vocab, sizeof *logits * (size_t)m->hp.n_vocab);
            s->n_past++;
            s->has_logits = st == KVF_OK;
        }
        /* What kvf_session_decode does after its pass, in every session
         * (the first failure is returned). */
        for (int i = 0, pass_ok = st == KVF_OK; i < n && pass_ok; i++) {
            enum kvf_status si = session_swa_free(ss[i], SWA_SLACK);
            if (si == KVF_OK) si = session_block_done(ss[i]);
            if (si == KVF_OK && ss[i]->cs.compressed) si = decode_maintain(ss[i]);
            if (st == KVF_OK) st = si;
        }
    }
    fwd_free(&b);
    free(logits);
    free(ds);
    return st;
}

const float *kvf_session_logits(const struct kvf_session *s) { return s->has_logits ? s->logits : NULL; }
int kvf_session_n_past(const struct kvf_session *s) { return s->n_past; }
int kvf_session_n_ctx(const struct kvf_session *s) { return s->params.n_ctx; }
size_t kvf_session_kv_bytes(const struct kvf_session *s) { return s->kv.bytes; }
size_t kvf_session_kv_peak_bytes(const struct kvf_session *s) { return s->kv.peak_bytes; }
void kvf_session_kv_peak_reset(struct kvf_session *s) { s->kv.peak_bytes = s->kv.bytes; }
size_t kvf_session_kv_full_bytes(const struct kvf_session *s) {
    size_t bytes = 0;
    for (int l = 0; l < s->kv.n_layer; l++) bytes += kv_cache_layer_bytes_for(&s->kv, session_layer_seen(s, l));
    return bytes;
}
enum kvf_status kvf_kv_position_bytes(const struct kvf_model *m, enum kvf_kv_type type_k, enum kvf_kv_type type_v,
                                      size_t *per_position, size_t *per_cache) {
    if (!m || !per_position) return err_set(KVF_ERR_INVALID_ARG, "kvf_kv_position_bytes: a NULL argument");
    return kv_cache_position_bytes(m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim, type_k, type_v, per_position,
                                   per_cache);
}
int kvf_session_kv_peak_entries(const struct kvf_session *s) { return s->kv.peak_entries; }
const struct kvf_tag *kvf_session_tags(const struct kvf_session *s) { return s->tags; }

const int32_t *kvf_session_tokens(const struct kvf_session *s) { return s->toks; }

const struct kvf_kv_merge *kvf_session_kv_merges(const struct kvf_session *s, int layer, int head, int *n) {
    *n = 0;
    if (!s->merges.heads || layer < 0 || layer >= s->kv.n_layer || head < 0 || head >= s->kv.n_head_kv) return NULL;
    const struct kv_merge_list *list = &s->merges.heads[(size_t)layer * s->kv.n_head_kv + head];
    *n = list->n;
    return list->n ? list->m : NULL;
}

bool kvf_session_kv_layer_budget(const struct kvf_session *s, int layer, double *ratio, double *gini) {
    if (!s->cs.have_ratio || layer < 0 || layer >= s->kv.n_layer) return false;
    *ratio = s->cs.layer_ratio[layer];
    *gini = s->policy.online ? s->cs.layer_gini[layer] : NAN;
    return true;
}

const struct kvf_tag *kvf_session_kv_tags(const struct kvf_session *s, int layer, int head, int *n) {
    *n = 0;
    if (layer < 0 || layer >= s->kv.n_layer || head < 0 || head >= s->kv.n_head_kv) return NULL;
    const struct kv_head *h = &s->kv.heads[(size_t)layer * s->kv.n_head_kv + head];
    *n = h->n;
    return h->tag;
}
