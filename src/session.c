#include "session.h"

#include "prompt.h"

#include "attn/attn.h"
#include "core/ops.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SESSION_MAX_CTX_DEFAULT 8192

struct kvf_session_params kvf_session_default_params(void) {
    struct kvf_session_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 0, .kv_type = KVF_KV_F32};
    return p;
}

void kvf_session_free(struct kvf_session *s) {
    if (!s) return;
    kv_cache_free(&s->kv);
    free(s->logits);
    free(s->x);
    free(s->xn);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->gate);
    free(s->up);
    free(s->pos);
    free(s->btag);
    free(s->tags);
    free(s->mm_scratch);
    free(s->attn_scratch);
    free(s->qwin);
    free(s->qwin_pos);
    free(s->qwin_n);
    free(s->qwin_tag);
    free(s->qprox);
    free(s->qprox_pos);
    free(s->qprox_n);
    free(s->r_w);
    free(s->r_size);
    free(s->r_metric);
    free(s->r_scratch);
    free(s->r_stat);
    free(s->r_into);
    free(s->r_groups);
    free(s->c_win2);
    free(s->acc_tmp);
    free(s->n0);
    free(s->c_score);
    free(s->c_tmp);
    free(s->c_win);
    free(s->c_out);
    free(s->c_idx);
    free(s->c_layer);
    free(s->c_into);
    free(s->layer_ratio);
    free(s->layer_gini);
    for (size_t i = 0; s->merges && i < (size_t)s->model->hp.n_layer * s->model->hp.n_head_kv; i++) free(s->merges[i].m);
    free(s->merges);
    free(s);
}

/* Layer ratios made by `kvfold profile` for this model:
 * {"model", "n_layer", "budget", "ratios": [n_layer shares in (0, 1]], ...}.
 * The spec's budget must be the profile's (it is taken when not given). */
static enum kvf_status profile_load(struct kvf_session *s, const char *path) {
    const int L = s->model->hp.n_layer;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KVF_ERR_IO, "prefixkv profile '%s': cannot open", path);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf && (len += fread(buf + len, 1, cap - len - 1, f)) == cap - 1 && cap < (16u << 20)) {
        char *nb = realloc(buf, cap *= 2);
        if (!nb) free(buf);
        buf = nb;
    }
    const bool whole = buf && feof(f);
    fclose(f);
    if (buf) buf[len] = '\0';
    cJSON *o = whole ? cJSON_Parse(buf) : NULL;
    free(buf);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "ratios");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(o, "n_layer"), *b = cJSON_GetObjectItemCaseSensitive(o, "budget");
    enum kvf_status st = KVF_OK;
    if (!o || !cJSON_IsArray(r) || !cJSON_IsNumber(nl) || !cJSON_IsNumber(b))
        st = err_set(KVF_ERR_FORMAT, "prefixkv profile '%s': not a profile (JSON with n_layer, budget, ratios)", path);
    else if (nl->valuedouble != L || cJSON_GetArraySize(r) != L)
        st = err_set(KVF_ERR_SHAPE, "prefixkv profile '%s' is for %g layers, the model has %d", path, nl->valuedouble, L);
    else if ((s->policy.shares & 4) && fabs(b->valuedouble - s->policy.budget) > 1e-9)
        st = err_set(KVF_ERR_INVALID_ARG, "prefixkv profile '%s' was made for budget %g, the spec asks %g", path,
                     b->valuedouble, s->policy.budget);
    for (int l = 0; st == KVF_OK && l < L; l++) {
        const cJSON *x = cJSON_GetArrayItem(r, l);
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0 && x->valuedouble <= 1))
            st = err_set(KVF_ERR_FORMAT, "prefixkv profile '%s': ratio %d is not in (0, 1]", path, l);
        else
            s->layer_ratio[l] = x->valuedouble;
    }
    if (st == KVF_OK) {
        s->policy.budget = b->valuedouble;
        s->have_ratio = true;
    }
    cJSON_Delete(o);
    return st;
}

static void *alloc_rows(int rows, int64_t cols, size_t elem, bool *ok) {
    void *p = malloc((size_t)rows * (size_t)cols * elem);
    if (!p) *ok = false;
    return p;
}

/* Grows the pass buffers to n rows (their sizes are in session.h); the r_
 * ones only with a reduce stage. */
static enum kvf_status session_reserve_rows(struct kvf_session *s, int n) {
    if (n <= s->rows_cap) return KVF_OK;
    const struct hparams *hp = &s->model->hp;
    const size_t QD = (size_t)hp->n_head * hp->head_dim, KD = (size_t)hp->n_head_kv * hp->head_dim, R = (size_t)n;
#define GROW(p, count)                                                                             \
    do {                                                                                           \
        void *grown = realloc(p, (count) * sizeof *(p));                                           \
        if (!grown) return err_set(KVF_ERR_NOMEM, "out of memory for a pass of %d rows", n);       \
        p = grown;                                                                                 \
    } while (0)
    GROW(s->x, R * hp->n_embd);
    GROW(s->xn, R * hp->n_embd);
    GROW(s->q, R * QD);
    GROW(s->k, R * KD);
    GROW(s->v, R * KD);
    GROW(s->att, R * QD);
    GROW(s->pos, R);
    GROW(s->btag, R);
    if (s->n_reduce) {
        GROW(s->r_w, R);
        GROW(s->r_size, R);
        GROW(s->r_metric, R * hp->head_dim);
        GROW(s->r_scratch, KVF_MAX(4 * R, 64 * ((size_t)hp->head_dim + R)));
        GROW(s->r_into, R);
        GROW(s->r_groups, R);
    }
#undef GROW
    s->rows_cap = n;
    return KVF_OK;
}

/* kv_policy_parse of spec with its preset's budget replaced by budget (> 0),
 * as if the spec said budget=X: a later key overrides an earlier one, so
 * "snapkv" becomes "snapkv:budget=X" and "lookm:merge=avg+decode=h2o"
 * "lookm:merge=avg,budget=X+decode=h2o". budget 0: the spec as it is. */
static enum kvf_status policy_parse_budget(const char *spec, double budget, struct kv_policy *out) {
    enum kvf_status st = kv_policy_parse(spec, out);
    if (st != KVF_OK || budget == 0) return st;
    if (!(budget > 0)) return err_set(KVF_ERR_INVALID_ARG, "kv_budget %g is negative or not a number", budget);
    const char *s = spec ? spec : "";
    const size_t head = strcspn(s, "+"), name_len = strcspn(s, ":+");
    bool has_budget = false;
    for (int i = 0; i < kvf_kv_policy_count(); i++) {
        struct kvf_kv_policy_info info;
        if (kvf_kv_policy_get(i, &info) == KVF_OK && !strcmp(info.stage, "preset") && strlen(info.name) == name_len &&
            !strncmp(info.name, s, name_len))
            has_budget = strstr(info.keys, "budget") != NULL;
    }
    if (!has_budget)
        return err_set(KVF_ERR_INVALID_ARG, "kv_budget %g: kv policy '%s' takes no budget", budget, s[0] ? s : "full");
    char buf[320];
    const int n = snprintf(buf, sizeof buf, "%.*s%sbudget=%.17g%s", (int)head, s, name_len < head ? "," : ":", budget,
                           s + head);
    if (n < 0 || (size_t)n >= sizeof buf) return err_set(KVF_ERR_INVALID_ARG, "kv policy spec too long");
    return kv_policy_parse(buf, out);
}

enum kvf_status kvf_kv_policy_check_budget(const char *spec, double budget) {
    struct kv_policy p;
    return policy_parse_budget(spec, budget, &p);
}

enum kvf_status kvf_session_init(const struct kvf_model *m, const struct kvf_session_params *params,
                                 struct kvf_session **out) {
    *out = NULL;
    if (!m) return err_set(KVF_ERR_INVALID_ARG, "no model");
    if (model_require_weights(m, "session") != KVF_OK) return KVF_ERR_UNSUPPORTED;
    struct kvf_session_params p = params ? *params : kvf_session_default_params();
    const struct hparams *hp = &m->hp;
    if (p.n_ctx <= 0) p.n_ctx = KVF_MIN(hp->n_ctx_train, SESSION_MAX_CTX_DEFAULT);
    if (p.n_ctx > (1 << 24)) return err_set(KVF_ERR_INVALID_ARG, "n_ctx %d too large", p.n_ctx);
    if (p.n_batch <= 0 || p.n_batch > 65536) return err_set(KVF_ERR_INVALID_ARG, "n_batch %d out of range [1, 65536]", p.n_batch);
    p.n_batch = KVF_MIN(p.n_batch, p.n_ctx);
    if (p.n_threads <= 0) p.n_threads = m->n_threads;
    if (p.n_threads > 1024) return err_set(KVF_ERR_INVALID_ARG, "n_threads %d out of range", p.n_threads);
    if (p.kv_gather < 0) return err_set(KVF_ERR_INVALID_ARG, "kv_gather %d is negative", p.kv_gather);
    p.kv_gather = KVF_MIN(p.kv_gather, p.n_ctx);

    struct kv_policy policy;
    enum kvf_status pst = policy_parse_budget(p.kv_spec, p.kv_budget, &policy);
    if (pst != KVF_OK) return pst;
    p.kv_spec = NULL; /* not kept: the caller owns the string */
    if (policy.blocks && policy.block > 0) p.n_batch = KVF_MIN(p.n_batch, policy.block); /* a batch is a block */
    struct kvf_session *s = calloc(1, sizeof *s);
    if (!s) return err_set(KVF_ERR_NOMEM, "out of memory");
    s->model = m;
    s->params = p;
    s->policy = policy;
    enum kvf_status st =
        kv_cache_init(&s->kv, hp->n_layer, hp->n_head_kv, hp->head_dim, kv_policy_needs_acc(&policy) || p.kv_gather > 0);
    if (st == KVF_OK) st = kv_cache_set_type(&s->kv, p.kv_type);
    if (st != KVF_OK) {
        kvf_session_free(s);
        return st;
    }
    const int B = p.n_batch;
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t widest = KVF_MAX(KVF_MAX((int64_t)hp->n_embd, hp->n_ff), QD);
    bool ok = true;
    s->logits = alloc_rows(1, hp->n_vocab, sizeof(float), &ok);
    s->gate = alloc_rows(B, hp->n_ff, sizeof(float), &ok);
    s->up = alloc_rows(B, hp->n_ff, sizeof(float), &ok);
    s->mm_scratch = alloc_rows(1, (int64_t)ops_matmul_scratch_bytes(widest, B, p.n_threads), 1, &ok);
    s->attn_scratch = alloc_rows(1, (int64_t)attn_scratch_bytes(p.n_ctx, p.n_threads), 1, &ok);
    /* CSP's default window is as many queries as recent entries kept. */
    s->qwin_cap = policy.window > 0 ? policy.window
                  : policy.method == KV_CSP ? (int)floor(kv_policy_keep_count(&policy, p.n_ctx) * policy.recent + 0.5) : 0;
    if (policy.blocks && policy.evict == KV_SNAPKV) s->qwin_cap = KVF_MAX(s->qwin_cap, policy.block_window);
    const bool window = kv_policy_needs_window(&policy);
    s->qwin_cap = KVF_MAX(s->qwin_cap, p.kv_gather);
    /* An empty window (csp with no recent entries) scores every entry 0. */
    if ((window || p.kv_gather > 0) && s->qwin_cap > 0) {
        s->qwin = alloc_rows(hp->n_layer * s->qwin_cap, QD, sizeof(float), &ok);
        s->qwin_pos = alloc_rows(hp->n_layer * s->qwin_cap, 1, sizeof(int32_t), &ok);
        s->qwin_tag = alloc_rows(s->qwin_cap, 1, sizeof(struct kvf_tag), &ok);
        s->c_out = alloc_rows(s->qwin_cap, QD, sizeof(float), &ok);
        s->qwin_n = calloc((size_t)hp->n_layer, sizeof(int)), ok &= s->qwin_n != NULL;
    }
    if (window) {
        if (s->qwin_cap > 0 && policy.question) {
            s->qprox = alloc_rows(hp->n_layer * s->qwin_cap, QD, sizeof(float), &ok);
            s->qprox_pos = alloc_rows(hp->n_layer * s->qwin_cap, 1, sizeof(int32_t), &ok);
            s->qprox_n = calloc((size_t)hp->n_layer, sizeof(int)), ok &= s->qprox_n != NULL;
        }
        s->c_win = alloc_rows(hp->n_head_kv, p.n_ctx, sizeof(float), &ok);
        if (policy.method == KV_CSP) s->c_win2 = alloc_rows(hp->n_head_kv, p.n_ctx, sizeof(float), &ok);
    }
    if (s->kv.has_acc) s->acc_tmp = calloc((size_t)KV_ACC_N * hp->n_head_kv * p.n_ctx, sizeof(float)), ok &= s->acc_tmp != NULL;
    if (policy.method != KV_FULL || policy.blocks) {
        s->n0 = alloc_rows(hp->n_layer, hp->n_head_kv, sizeof(int), &ok);
        s->c_score = alloc_rows(1, p.n_ctx, sizeof(float), &ok);
        s->c_tmp = alloc_rows(1, p.n_ctx, sizeof(float), &ok);
        s->c_idx = alloc_rows(1, p.n_ctx, sizeof(int), &ok);
        s->c_layer = alloc_rows(1, p.n_ctx, sizeof(float), &ok);
        s->c_into = alloc_rows(1, p.n_ctx, sizeof(int), &ok);
        s->layer_ratio = alloc_rows(1, hp->n_layer, sizeof(double), &ok);
        s->layer_gini = alloc_rows(1, hp->n_layer, sizeof(double), &ok);
        s->merges = calloc((size_t)hp->n_layer * hp->n_head_kv, sizeof *s->merges), ok &= s->merges != NULL;
    }
    if (policy.reduce == KV_REDUCE_FASTV) s->r_stat = alloc_rows(hp->n_head_kv, p.n_ctx, sizeof(float), &ok);
    if ((s->n_reduce = kv_reduce_stages(&policy, hp->n_layer, s->r_layer, s->r_window)) < 0 ||
        (st = session_reserve_rows(s, B)) != KVF_OK) {
        st = s->n_reduce < 0 ? KVF_ERR_INVALID_ARG : st;
        kvf_session_free(s);
        return st;
    }
    if (!ok) {
        kvf_session_free(s);
        return err_set(KVF_ERR_NOMEM, "out of memory allocating session buffers (batch %d, ctx %d)", B, p.n_ctx);
    }
    if (policy.alloc == KV_ALLOC_PREFIX && policy.profile[0] && (st = profile_load(s, policy.profile)) != KVF_OK) {
        kvf_session_free(s);
        return st;
    }
    *out = s;
    return KVF_OK;
}

void kvf_session_reset(struct kvf_session *s) {
    kv_cache_clear(&s->kv);
    s->n_past = 0;
    for (int l = 0; s->qwin_n && l < s->model->hp.n_layer; l++) s->qwin_n[l] = 0;
    for (int l = 0; s->qprox_n && l < s->model->hp.n_layer; l++) s->qprox_n[l] = 0;
    s->compressed = false;
    s->decode_steps = 0;
    s->has_logits = false;
    s->have_ratio = s->have_ratio && !s->policy.online; /* online ratios belong to the prompt */
    for (size_t i = 0; s->merges && i < (size_t)s->kv.n_layer * s->kv.n_head_kv; i++) s->merges[i].n = 0;
}

static enum kvf_status tags_reserve(struct kvf_session *s, int n) {
    if (s->n_past + n <= s->tags_cap) return KVF_OK;
    const int cap = KVF_MIN(s->params.n_ctx, KVF_MAX(s->n_past + n, s->tags_cap * 2));
    struct kvf_tag *t = realloc(s->tags, (size_t)cap * sizeof *t);
    if (!t) return err_set(KVF_ERR_NOMEM, "out of memory recording %d tags", cap);
    s->tags = t;
    s->tags_cap = cap;
    return KVF_OK;
}

/* Whether a session's prefill is a plain one: any policy's work starts once
 * the prompt is in. */
static bool prefill_plain(const struct kvf_session *s) {
    return s->n_reduce == 0 && !s->policy.blocks && !s->policy.question;
}

enum kvf_status kvf_session_fork(const struct kvf_session *src, const char *kv_spec, double kv_budget,
                                 struct kvf_session **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "fork: no output");
    *out = NULL;
    if (!src) return err_set(KVF_ERR_INVALID_ARG, "fork: NULL session");
    if (src->compressed || !prefill_plain(src))
        return err_set(KVF_ERR_UNSUPPORTED, "fork: the session is compressed or its policy changed its prefill");
    struct kvf_session_params p = src->params;
    p.kv_spec = kv_spec;
    p.kv_budget = kv_budget;
    p.kv_gather = 0;
    struct kvf_session *s;
    enum kvf_status st = kvf_session_init(src->model, &p, &s);
    if (st != KVF_OK) return st;
    const int L = s->model->hp.n_layer;
    if (!prefill_plain(s))
        st = err_set(KVF_ERR_UNSUPPORTED, "fork: '%s' changes the prefill (reduce, schedule or question stage)", kv_spec);
    else if (s->kv.has_acc && !src->kv.has_acc)
        st = err_set(KVF_ERR_UNSUPPORTED, "fork: '%s' scores with attention sums the session did not gather", kv_spec);
    /* a prefill of its own would hold the last min(cap, n_past) queries of each layer */
    for (int l = 0; st == KVF_OK && s->qwin && l < L; l++)
        if (!src->qwin || src->qwin_n[l] < KVF_MIN(s->qwin_cap, src->n_past))
            st = err_set(KVF_ERR_UNSUPPORTED, "fork: '%s' needs the last %d queries, the session kept %d", kv_spec,
                         KVF_MIN(s->qwin_cap, src->n_past), src->qwin ? src->qwin_n[l] : 0);
    if (st == KVF_OK) st = tags_reserve(s, src->n_past);
    if (st == KVF_OK) st = kv_cache_copy(&s->kv, &src->kv);
    if (st != KVF_OK) {
        kvf_session_free(s);
        return st;
    }
    const size_t QD = (size_t)s->model->hp.n_head * s->model->hp.head_dim;
    for (int l = 0; s->qwin && l < L; l++) {
        const int n = KVF_MIN(s->qwin_cap, src->n_past), from = src->qwin_n[l] - n;
        memcpy(s->qwin + (size_t)l * s->qwin_cap * QD, src->qwin + ((size_t)l * src->qwin_cap + from) * QD,
               sizeof(float) * n * QD);
        memcpy(s->qwin_pos + (size_t)l * s->qwin_cap, src->qwin_pos + (size_t)l * src->qwin_cap + from,
               sizeof(int32_t) * n);
        s->qwin_n[l] = n;
    }
    memcpy(s->tags, src->tags, sizeof *s->tags * (size_t)src->n_past);
    memcpy(s->logits, src->logits, sizeof(float) * (size_t)s->model->hp.n_vocab);
    s->n_past = src->n_past;
    s->has_logits = src->has_logits;
    *out = s;
    return KVF_OK;
}

/* What brings the cache back within budget: the preset's rule and merge
 * after the prompt (compress), the decode stage's rule while generating,
 * or the schedule stage's evictor after each block of the prompt. */
enum evict_mode { EVICT_COMPRESS, EVICT_DECODE, EVICT_BLOCK };
static enum kvf_status evict_to_budget(struct kvf_session *s, enum evict_mode mode);

/* Runs n inputs (ids or embedding rows, already checked) in batches of
 * n_batch; under block-wise prefill a batch is a block. */
static enum kvf_status session_run(struct kvf_session *s, const int32_t *tokens, const float *embd,
                                   const struct kvf_tag *tags, int n, float *all_logits) {
    if (n > s->params.n_ctx - s->n_past)
        return err_set(KVF_ERR_CONTEXT, "%d positions do not fit: %d of %d used", n, s->n_past, s->params.n_ctx);
    enum kvf_status st = tags_reserve(s, n);
    if (st != KVF_OK) return st;
    const int n_vocab = s->model->hp.n_vocab, E = s->model->hp.n_embd;
    const struct kv_policy *p = &s->policy;
    for (int i = 0; i < n; i += s->params.n_batch) {
        const int nb = KVF_MIN(s->params.n_batch, n - i);
        decoder_input(s, 0, tokens ? tokens + i : NULL, embd ? embd + (size_t)i * E : NULL, tags ? tags + i : NULL, nb);
        st = decoder_forward(s, nb, all_logits ? all_logits + (size_t)i * n_vocab : NULL);
        if (st != KVF_OK) return st;
        if (p->blocks && !s->compressed && !s->probing && s->n_past >= (p->first > 0 ? p->first : p->block_budget) &&
            (st = evict_to_budget(s, EVICT_BLOCK)) != KVF_OK)
            return st;
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
    return session_run(s, tokens, NULL, NULL, n, all_logits);
}

enum kvf_status kvf_session_prefill_embd(struct kvf_session *s, const float *embd, const struct kvf_tag *tags, int n,
                                         float *all_logits) {
    if (!s || (n > 0 && !embd) || n < 0) return err_set(KVF_ERR_INVALID_ARG, "prefill_embd: bad arguments");
    if (n == 0) return KVF_OK;
    for (int i = 0; tags && i < n; i++)
        if (tags[i].modality < KVF_MOD_TEXT || tags[i].modality > KVF_MOD_VIDEO)
            return err_set(KVF_ERR_INVALID_ARG, "tag %d: modality %d is not text, image or video", i, tags[i].modality);
    return session_run(s, NULL, embd, tags, n, all_logits);
}

/* Block-wise question=1: the last block_window tokens of the prompt's last
 * text segment (its question) run alone at their own positions; their
 * queries are kept as the proxies that score every block (paper 002,
 * section 3.2), and their entries removed. Only those tokens run, so the
 * trial adds no more than the window to the cache. */
static enum kvf_status question_probe(struct kvf_session *s, const struct kvf_prompt *p) {
    int g = p->n_segs - 1;
    while (g >= 0 && p->segs[g].media) g--;
    if (g < 0 || !s->qprox) return KVF_OK;
    const struct prompt_seg *sg = &p->segs[g];
    const int L = s->kv.n_layer, H = s->kv.n_head_kv, n_past = s->n_past;
    int *had = malloc(sizeof(int) * (size_t)L * H);
    if (!had) return err_set(KVF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < L * H; i++) had[i] = s->kv.heads[i].n;
    for (int l = 0; l < L; l++) s->qwin_n[l] = 0;
    s->probing = true;
    const int n = KVF_MIN(sg->n, s->policy.block_window), start = sg->start + sg->n - n;
    s->n_past += start;
    enum kvf_status st = session_run(s, p->ids + start, NULL, p->tags + start, n, NULL);
    s->probing = false;
    s->n_past = n_past;
    s->has_logits = false;
    const size_t QD = (size_t)s->model->hp.n_head * s->model->hp.head_dim, W = (size_t)s->qwin_cap;
    memcpy(s->qprox, s->qwin, sizeof(float) * L * W * QD);
    memcpy(s->qprox_pos, s->qwin_pos, sizeof(int32_t) * L * W);
    memcpy(s->qprox_n, s->qwin_n, sizeof(int) * L);
    for (int l = 0; l < L; l++) s->qwin_n[l] = 0;
    for (int j = 0; j < s->params.n_ctx; j++) s->c_idx[j] = j;
    for (int i = 0; st == KVF_OK && i < L * H; i++) st = kv_cache_keep(&s->kv, i / H, i % H, s->c_idx, had[i]);
    free(had);
    return st;
}

enum kvf_status kvf_session_prefill_prompt(struct kvf_session *s, const struct kvf_prompt *p, float *all_logits) {
    if (!s || !p) return err_set(KVF_ERR_INVALID_ARG, "prefill_prompt: NULL argument");
    if (p->n > s->params.n_ctx - s->n_past)
        return err_set(KVF_ERR_CONTEXT, "the prompt's %d positions do not fit: %d of %d used", p->n, s->n_past,
                       s->params.n_ctx);
    const int n_vocab = s->model->hp.n_vocab;
    for (int i = 0; i < p->n; i++)
        if (p->ids[i] >= n_vocab) return err_set(KVF_ERR_INVALID_ARG, "prompt made for another model (id %d)", p->ids[i]);
    enum kvf_status st = s->policy.question ? question_probe(s, p) : KVF_OK;
    if (st == KVF_OK && s->n_reduce > 0) {
        /* A reduce step weighs an image's tokens by the text after it: the
         * whole prompt is one pass. */
        if ((st = tags_reserve(s, p->n)) != KVF_OK || (st = session_reserve_rows(s, p->n)) != KVF_OK) return st;
        for (int g = 0; g < p->n_segs; g++) {
            const struct prompt_seg *sg = &p->segs[g];
            decoder_input(s, sg->start, sg->media ? NULL : p->ids + sg->start, sg->media ? sg->media->embd : NULL,
                          p->tags + sg->start, sg->n);
        }
        return decoder_forward(s, p->n, all_logits);
    }
    for (int g = 0; st == KVF_OK && g < p->n_segs; g++) {
        const struct prompt_seg *sg = &p->segs[g];
        float *lg = all_logits ? all_logits + (size_t)sg->start * n_vocab : NULL;
        st = sg->media ? session_run(s, NULL, sg->media->embd, p->tags + sg->start, sg->n, lg)
                       : session_run(s, p->ids + sg->start, NULL, p->tags + sg->start, sg->n, lg);
    }
    return st;
}

/* Attention the last `obs` held window queries of layer l (the question's
 * proxies instead when given) pay each of its entries, per kv head (mean
 * over the query heads of g): s->c_win[g][j]; with csp, their n-softmax
 * attention from the entry's own modality in c_win and from the other in
 * c_win2. */
static enum kvf_status window_attention(struct kvf_session *s, int l, int obs, bool csp, bool proxies) {
    const struct hparams *hp = &s->model->hp;
    const int W = s->qwin_cap, QD = hp->n_head * hp->head_dim, stride = s->params.n_ctx;
    memset(s->c_win, 0, sizeof(float) * (size_t)hp->n_head_kv * stride);
    if (csp) memset(s->c_win2, 0, sizeof(float) * (size_t)hp->n_head_kv * stride);
    const bool px = proxies && s->qprox_n && s->qprox_n[l] > 0;
    const int n = !s->qwin ? 0 : px ? s->qprox_n[l] : s->qwin_n[l];
    if (n == 0) return KVF_OK;
    const float *q = (px ? s->qprox : s->qwin) + (size_t)l * W * QD;
    const int32_t *qpos = (px ? s->qprox_pos : s->qwin_pos) + (size_t)l * W;
    struct attn_stats st = {.stride = stride, .win_first = KVF_MAX(0, n - obs), .nsm_n = (float)s->policy.nsm_n,
                            .qtag = s->qwin_tag};
    for (int i = 0; i < n; i++) s->qwin_tag[i] = s->tags[qpos[i]];
    if (csp) st.a[ATTN_STAT_WIN_NSM_SELF] = s->c_win, st.a[ATTN_STAT_WIN_NSM_CROSS] = s->c_win2;
    else st.a[ATTN_STAT_WIN] = s->c_win;
    const struct attn_params ap = {
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .scale = hp->attn_scale,
        .window = s->model->layers[l].is_local ? hp->sliding_window : 0,
    };
    return attn_forward(&ap, q, qpos, n, kv_cache_head(&s->kv, l, 0), s->c_out, s->attn_scratch, s->params.n_threads, &st);
}

static struct kv_score_in score_in(const struct kvf_session *s, int l, int g, int keep) {
    const size_t hi = (size_t)l * s->kv.n_head_kv + g;
    return (struct kv_score_in){
        .p = &s->policy, .h = &s->kv.heads[hi], .head_dim = s->kv.head_dim, .keep = keep,
        .win_attn = s->c_win ? s->c_win + (size_t)g * s->params.n_ctx : NULL,
        .win_cross = s->c_win2 ? s->c_win2 + (size_t)g * s->params.n_ctx : NULL, .scratch = s->c_tmp, .iscratch = s->c_into,
        .seed = s->policy.seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(l * 4099 + g + 1)),
    };
}

/* The preset's own rule (the score stage) for one head; rules chosen per
 * layer (elastic, prefixkv) read s->c_layer, scored once for the layer. */
static void score_head(const struct kvf_session *s, const struct kv_score_in *in, float *score) {
    switch (in->p->method) {
    case KV_FULL: break;
    case KV_STREAMING: kv_score_streaming(in, score); break;
    case KV_H2O: kv_score_h2o(in, score); break;
    case KV_SNAPKV:
    case KV_PYRAMIDKV: kv_score_snapkv(in, score); break;
    case KV_ROCO: kv_score_roco(in, score); break;
    case KV_KEYDIFF: kv_score_keydiff(in, score); break;
    case KV_KNORM: kv_score_knorm(in, score); break;
    case KV_RANDOM:
    case KV_IMGRAND: kv_score_random(in, score); break;
    case KV_LOOKM: kv_score_lookm(in, score); break;
    case KV_CSP: kv_score_csp(in, score); break;
    case KV_BLOCKWISE:
        if (in->p->evict == KV_SNAPKV) kv_score_snapkv(in, score);
        else kv_score_keydiff(in, score);
        break;
    case KV_LIGHTKV:
    case KV_FASTV:
    case KV_TOME: break; /* their work is done inside the decoder (reduce stage) */
    case KV_ELASTIC:
    case KV_PREFIXKV: memcpy(score, s->c_layer, sizeof(float) * (size_t)in->h->n); break;
    case KV_METHOD_COUNT: break;
    }
}

/* Entries layer l keeps n_past tokens in: the budget stage. */
static int layer_target(const struct kvf_session *s, int l) {
    if (!s->have_ratio) return kv_policy_layer_keep(&s->policy, s->n_past, l, s->model->hp.n_layer);
    const int k = (int)floor(s->layer_ratio[l] * s->n_past + 0.5);
    return KVF_MAX(1, KVF_MIN(k, s->n_past));
}

/* PrefixKV online: the layer ratios searched on the prompt itself. */
static enum kvf_status prefix_search(struct kvf_session *s) {
    const int L = s->model->hp.n_layer, n = s->kv.heads[0].n;
    float *imp = malloc(sizeof(float) * (size_t)L * KVF_MAX(n, 1));
    int *keep = malloc(sizeof(int) * (size_t)L);
    enum kvf_status st = imp && keep ? KVF_OK : err_set(KVF_ERR_NOMEM, "prefixkv: out of memory");
    for (int l = 0; st == KVF_OK && l < L; l++) {
        if (s->kv.heads[(size_t)l * s->kv.n_head_kv].n != n)
            st = err_set(KVF_ERR_UNSUPPORTED, "prefixkv: layers hold different entry counts; search before any eviction");
        else
            kv_score_layer(&s->kv, l, 0, false, imp + (size_t)l * n);
    }
    double p;
    if (st == KVF_OK && n > 0)
        st = kv_prefix_budgets(imp, L, n, (long)L * kv_policy_keep_count(&s->policy, n), 5.0, keep, s->layer_gini, &p);
    for (int l = 0; st == KVF_OK && l < L; l++) s->layer_ratio[l] = n > 0 ? (double)keep[l] / n : 1.0;
    s->have_ratio = st == KVF_OK;
    free(imp);
    free(keep);
    return st;
}

/* Room for `add` more records. */
static enum kvf_status merge_reserve(struct merge_log *log, int add) {
    if (log->n + add > log->cap) {
        const int cap = KVF_MAX(log->n + add, log->cap * 2);
        struct kvf_kv_merge *m = realloc(log->m, sizeof *m * (size_t)cap);
        if (!m) return err_set(KVF_ERR_NOMEM, "out of memory recording merges");
        log->m = m, log->cap = cap;
    }
    return KVF_OK;
}

enum kvf_status session_merge_note(struct kvf_session *s, int l, int32_t from, int32_t into) {
    for (int g = 0; s->merges && g < s->kv.n_head_kv; g++) {
        struct merge_log *log = &s->merges[(size_t)l * s->kv.n_head_kv + g];
        const enum kvf_status st = merge_reserve(log, 1);
        if (st != KVF_OK) return st;
        log->m[log->n++] = (struct kvf_kv_merge){from, into};
    }
    return KVF_OK;
}

static enum kvf_status merge_record(struct merge_log *log, const struct kv_head *h, const int *keep, int n_keep,
                                    const int *into, const char *is_kept) {
    const enum kvf_status st = merge_reserve(log, h->n - n_keep);
    if (st != KVF_OK) return st;
    for (int j = 0; j < h->n; j++)
        if (!is_kept[j]) log->m[log->n++] = (struct kvf_kv_merge){h->tag[j].pos, h->tag[keep[into[j]]].pos};
    return KVF_OK;
}

/* One head down to the entries in s->c_idx[0..n_keep): merged into them
 * first when the policy merges (and recorded), then compacted. */
static enum kvf_status head_evict(struct kvf_session *s, int l, int g, int n_keep, bool merge) {
    struct kv_head *h = kv_cache_head(&s->kv, l, g);
    if (merge && s->policy.merge != KV_MERGE_NONE) {
        enum kvf_status st = kv_merge_head(&s->policy, h, s->kv.head_dim, s->c_idx, n_keep, s->c_into);
        /* c_score is free now: it marks the kept entries for the record. */
        char *is_kept = (char *)s->c_score;
        memset(is_kept, 0, (size_t)h->n);
        for (int c = 0; c < n_keep; c++) is_kept[s->c_idx[c]] = 1;
        if (st == KVF_OK) st = merge_record(&s->merges[(size_t)l * s->kv.n_head_kv + g], h, s->c_idx, n_keep, s->c_into, is_kept);
        if (st != KVF_OK) return st;
    }
    return kv_cache_keep(&s->kv, l, g, s->c_idx, n_keep);
}

/* Brings every head over its layer's budget for n_seen tokens down to it
 * (mode: see enum evict_mode). */
static enum kvf_status evict_to_budget(struct kvf_session *s, enum evict_mode mode) {
    const struct hparams *hp = &s->model->hp;
    const int H = hp->n_head_kv;
    /* Block eviction scores with the evictor's own window. */
    struct kv_policy bp = s->policy;
    if (mode == EVICT_BLOCK) bp.method = bp.evict, bp.window = bp.block_window;
    enum kvf_status st = mode == EVICT_COMPRESS && bp.alloc == KV_ALLOC_PREFIX && bp.online && !s->have_ratio
                             ? prefix_search(s) : KVF_OK;
    for (int l = 0; st == KVF_OK && l < hp->n_layer; l++) {
        const int target = mode == EVICT_BLOCK ? bp.block_budget : layer_target(s, l);
        bool over = false;
        for (int g = 0; g < H; g++) over |= s->kv.heads[(size_t)l * H + g].n > target;
        if (!over) continue;
        const bool csp = bp.method == KV_CSP;
        if (mode != EVICT_DECODE && s->c_win &&
            (bp.method == KV_SNAPKV || bp.method == KV_PYRAMIDKV || csp || (bp.method == KV_BLOCKWISE && bp.evict == KV_SNAPKV))) {
            const int obs = bp.window > 0 ? bp.window : (int)floor(target * bp.recent + 0.5);
            st = window_attention(s, l, obs, csp, mode == EVICT_BLOCK);
        }
        if (mode == EVICT_COMPRESS && kv_policy_per_layer(&bp)) kv_score_layer(&s->kv, l, bp.sinks, true, s->c_layer);
        for (int g = 0; st == KVF_OK && g < H; g++) {
            const struct kv_head *h = &s->kv.heads[(size_t)l * H + g];
            if (h->n <= target) continue;
            struct kv_score_in in = score_in(s, l, g, target);
            in.p = &bp;
            if (mode == EVICT_DECODE) kv_decode_score(&in, s->n0[(size_t)l * H + g], s->c_score);
            else score_head(s, &in, s->c_score);
            const int n_keep = kv_select(h->n, s->c_score, target, s->c_idx);
            if (n_keep < h->n) st = head_evict(s, l, g, n_keep, mode == EVICT_COMPRESS);
        }
    }
    return st;
}

enum kvf_status kvf_session_compress(struct kvf_session *s) {
    if (!s) return err_set(KVF_ERR_INVALID_ARG, "compress: NULL session");
    if (s->policy.method == KV_FULL) return KVF_OK;
    const enum kvf_status st = evict_to_budget(s, EVICT_COMPRESS);
    for (size_t i = 0; i < (size_t)s->kv.n_layer * s->kv.n_head_kv; i++) s->n0[i] = s->kv.heads[i].n;
    s->compressed = true;
    s->decode_steps = 0;
    return st;
}

/* The decode stage, after each decoded token. */
static enum kvf_status decode_maintain(struct kvf_session *s) {
    switch (s->policy.decode) {
    case KV_DECODE_GROW: return KVF_OK;
    case KV_DECODE_RECOMPRESS: return ++s->decode_steps % s->policy.every ? KVF_OK : evict_to_budget(s, EVICT_COMPRESS);
    default: return evict_to_budget(s, EVICT_DECODE);
    }
}

enum kvf_status kvf_session_decode(struct kvf_session *s, int32_t token) {
    enum kvf_status st = kvf_session_prefill(s, &token, 1, NULL);
    return st == KVF_OK && s->compressed ? decode_maintain(s) : st;
}

const float *kvf_session_logits(const struct kvf_session *s) { return s->has_logits ? s->logits : NULL; }
int kvf_session_n_past(const struct kvf_session *s) { return s->n_past; }
size_t kvf_session_kv_bytes(const struct kvf_session *s) { return s->kv.bytes; }
size_t kvf_session_kv_peak_bytes(const struct kvf_session *s) { return s->kv.peak_bytes; }
int kvf_session_kv_peak_entries(const struct kvf_session *s) { return s->kv.peak_entries; }
const struct kvf_tag *kvf_session_tags(const struct kvf_session *s) { return s->tags; }

const struct kvf_kv_merge *kvf_session_kv_merges(const struct kvf_session *s, int layer, int head, int *n) {
    *n = 0;
    if (!s->merges || layer < 0 || layer >= s->kv.n_layer || head < 0 || head >= s->kv.n_head_kv) return NULL;
    const struct merge_log *log = &s->merges[(size_t)layer * s->kv.n_head_kv + head];
    *n = log->n;
    return log->n ? log->m : NULL;
}

bool kvf_session_kv_layer_budget(const struct kvf_session *s, int layer, double *ratio, double *gini) {
    if (!s->have_ratio || layer < 0 || layer >= s->kv.n_layer) return false;
    *ratio = s->layer_ratio[layer];
    *gini = s->policy.online ? s->layer_gini[layer] : NAN;
    return true;
}

const struct kvf_tag *kvf_session_kv_tags(const struct kvf_session *s, int layer, int head, int *n) {
    *n = 0;
    if (layer < 0 || layer >= s->kv.n_layer || head < 0 || head >= s->kv.n_head_kv) return NULL;
    const struct kv_head *h = &s->kv.heads[(size_t)layer * s->kv.n_head_kv + head];
    *n = h->n;
    return h->tag;
}
