/* KVzap's calibration (kvf_kvzap_calibrate), as kvpress's kvzap/train.py
 * and data.py make their linear scorer, on the user's machine and text:
 *
 *   1. A span of the corpus is prefilled as a user's message (the chat
 *      template's text before it, then the span), each layer's attention
 *      input (the hidden state after its input norm, what the scorer will
 *      read) copied aside by position (struct decoder_tap).
 *   2. KVzip's repetition runs after it (session_rule_pass with kvzip's
 *      runs, one chunk: the whole context), its MAX statistic weighted as
 *      KVzip+ is: each query's attention row divided by the norm of its
 *      attention input, each entry's weight in query head h multiplied by
 *      |W_o^h v| (model/decoder.c tap_plus), the most over the queries and
 *      the query heads of the kv head; the target is its log.
 *   3. per_span positions of the span (drawn) pair their inputs with their
 *      targets; each layer's ridge regression (kv/kvzap.h struct kv_ridge:
 *      scikit-learn's Ridge, solved in closed form) gathers them, and after
 *      the last span is solved.
 *   4. Held-out spans are scored by the fit: R^2 and the rank correlation
 *      per kv head, averaged over a layer's heads. */
#include "core/ops.h"
#include "kv/kvzap.h"
#include "session/session.h"
#include "tok/tokenizer.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kvf_kvzap_params kvf_kvzap_default_params(void) {
    return (struct kvf_kvzap_params){ .samples = 256, .test = 8, .span = 512, .per_span = 256, .alpha = 1.0 };
}

const char *kvf_kvzap_default_path(const struct kvf_model *m) { return m ? m->zap_path : ""; }

/* A span: tokens [start, start + span) of text `text`. */
struct span {
    int text, start;
};

/* What a calibration holds (L layers, E widths, H kv heads, P positions a span). */
struct fit {
    const struct kvf_model *m;
    const struct kvf_kvzap_params *p;
    struct kvf_session *s;
    int L, E, H, P;
    int32_t *ids; /* [n_prefix + span] the prompt of a span */
    int n_prefix; /* the template's tokens before the span (BOS included) */
    struct decoder_tap tap;
    float *gram;            /* [L][n_head][head_dim][head_dim] */
    int *pick;              /* [span] positions of the span, the first P drawn */
    float *x, *y, *yp;      /* [P][E], [P][H], [P][H]: one layer's pairs of a span, the fit's scores */
    int *slot;              /* [n_prefix + span] a position's row among the P (-1: not drawn) */
    struct kv_ridge *ridge; /* [L] */
    uint64_t rng;
};

/* Gram matrices G_h = A_h^T A_h of W_o's columns for query head h (A_h:
 * [n_embd][head_dim]), so that |W_o^h v|^2 = v^T G_h v. */
static enum kvf_status fit_gram(struct fit *f) {
    const struct hparams *hp = &f->m->hp;
    const int hd = hp->head_dim, QD = hp->n_head * hd, E = hp->n_embd;
    float *w = malloc(sizeof(float) * (size_t)E * QD);
    if (!w) return err_set(KVF_ERR_NOMEM, "calibrate: out of memory for W_o");
    for (int l = 0; l < f->L; l++) {
        const struct weight *wo = &f->m->layers[l].wo;
        for (int r = 0; r < E; r++) ops_get_row(wo, r, w + (size_t)r * QD);
        for (int h = 0; h < hp->n_head; h++)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hd, hd, E, 1.0f, w + (size_t)h * hd, QD,
                        w + (size_t)h * hd, QD, 0.0f, f->gram + ((size_t)l * hp->n_head + h) * hd * hd, hd);
    }
    free(w);
    return KVF_OK;
}

/* Runs one span: draws its P positions into pick, then prefills it (their
 * inputs copied to tap.x) and runs KVzip's repetition (KVzip+'s maxima
 * left in the session's cs.recon). */
static enum kvf_status fit_span(struct fit *f, const int32_t *toks) {
    const int span = f->p->span, n = f->n_prefix + span;
    for (int i = 0; i < span; i++) f->pick[i] = f->n_prefix + i;
    for (int i = 0; i < f->P; i++) { /* a partial Fisher-Yates shuffle */
        const int j = i + (int)(rng_splitmix64(&f->rng) % (uint64_t)(span - i)), t = f->pick[i];
        f->pick[i] = f->pick[j], f->pick[j] = t;
    }
    for (int i = 0; i < n; i++) f->slot[i] = -1;
    for (int i = 0; i < f->P; i++) f->slot[f->pick[i]] = i;
    memcpy(f->ids + f->n_prefix, toks, sizeof(int32_t) * (size_t)span);
    kvf_session_reset(f->s);
    f->tap.gram = NULL;
    enum kvf_status st = kvf_session_prefill(f->s, f->ids, n, NULL);
    f->tap.gram = f->gram;
    if (st == KVF_OK) st = session_rule_pass(f->s, kv_rule_kvzip.pass);
    return st;
}

/* What a span's repetition left (its maxima) is freed. */
static void fit_span_done(struct fit *f) {
    free(f->s->cs.recon);
    f->s->cs.recon = NULL;
}

/* Layer l's pairs of the span just run into f->x, f->y; their count. A
 * position some kv head's repetition never saw (its maximum 0: a
 * sliding-window layer's entry out of every repeated query's window, or a
 * weight that underflowed) has no log score and is left out (kvpress's
 * would be -inf). */
static int fit_pairs(struct fit *f, int l) {
    const struct compress_state *cs = &f->s->cs;
    int m = 0;
    for (int i = 0; i < f->P; i++) {
        const int pos = f->pick[i];
        bool seen = true;
        for (int g = 0; g < f->H; g++) {
            const float r = cs->recon[((size_t)l * f->H + g) * cs->recon_stride + pos];
            seen &= r > 0;
            f->y[(size_t)m * f->H + g] = logf(r);
        }
        if (!seen) continue;
        memcpy(f->x + (size_t)m * f->E, f->tap.x + ((size_t)l * f->tap.x_rows + i) * f->E, sizeof(float) * f->E);
        m++;
    }
    return m;
}

static enum kvf_status fit_gather(struct fit *f) {
    enum kvf_status st = KVF_OK;
    for (int l = 0; st == KVF_OK && l < f->L; l++) st = kv_ridge_add(&f->ridge[l], f->x, f->y, fit_pairs(f, l));
    return st;
}

/* Each layer's regression solved into z. A layer whose repetition saw none
 * of the drawn positions (a sliding window shorter than the distance from
 * a position to its repetition) has nothing to fit: its scorer stays 0, so
 * its entries tie. */
static enum kvf_status fit_solve(struct fit *f, struct kv_zap *z) {
    enum kvf_status st = KVF_OK;
    for (int l = 0; st == KVF_OK && l < f->L; l++) {
        if (f->ridge[l].n == 0) continue;
        st = kv_ridge_solve(&f->ridge[l], f->p->alpha, z->w + (size_t)l * f->H * f->E, z->b + (size_t)l * f->H);
        if (st != KVF_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", kvf_last_error());
            err_set(st, "calibrate: layer %d: %s (try a larger alpha)", l, why);
        }
    }
    return st;
}

/* The corpus tokenized, and spans drawn from it. */
struct corpus {
    int n;
    int32_t **toks;
    int *len;
    int64_t starts; /* the spans it holds: the sum over texts of len - span + 1 */
};

static void corpus_free(struct corpus *c) {
    for (int i = 0; c->toks && i < c->n; i++) free(c->toks[i]);
    free(c->toks);
    free(c->len);
}

static enum kvf_status corpus_init(struct corpus *c, const struct tokenizer *tok, const char *const *texts, int n,
                                   int span) {
    *c = (struct corpus){ .n = n, .toks = calloc((size_t)n, sizeof *c->toks), .len = calloc((size_t)n, sizeof(int)) };
    if (!c->toks || !c->len) return err_set(KVF_ERR_NOMEM, "calibrate: out of memory");
    for (int i = 0; i < n; i++) {
        if (!texts[i]) return err_set(KVF_ERR_INVALID_ARG, "calibrate: text %d is NULL", i);
        const size_t bytes = strlen(texts[i]);
        /* No tokenizer makes more tokens than bytes plus a few specials. */
        if (bytes > (size_t)INT32_MAX / 2) return err_set(KVF_ERR_INVALID_ARG, "calibrate: text %d is too long", i);
        if (!(c->toks[i] = malloc(sizeof(int32_t) * (bytes + 8))))
            return err_set(KVF_ERR_NOMEM, "calibrate: out of memory");
        const int32_t got = tok_encode(tok, texts[i], bytes, c->toks[i], (int32_t)bytes + 8, false, false);
        if (got < 0)
            return got == INT32_MIN ? KVF_ERR_NOMEM : err_set(KVF_ERR_INTERNAL, "calibrate: tokens of text %d", i);
        c->len[i] = got;
        if (got >= span) c->starts += got - span + 1;
    }
    return KVF_OK;
}

static struct span corpus_draw(const struct corpus *c, int span, uint64_t *rng) {
    int64_t u = (int64_t)(rng_splitmix64(rng) % (uint64_t)c->starts);
    int t = 0;
    for (; t < c->n; t++) {
        const int64_t here = c->len[t] >= span ? c->len[t] - span + 1 : 0;
        if (u < here) break;
        u -= here;
    }
    return (struct span){ t, (int)u };
}

static bool spans_overlap(struct span a, struct span b, int span) {
    return a.text == b.text && a.start < b.start + span && b.start < a.start + span;
}

/* The chat template's text before a user's message (BOS first when the
 * model adds one) into f->ids; the user's text is the span. */
static enum kvf_status fit_prefix(struct fit *f) {
    char buf[1024];
    const char *after;
    const enum kvf_status st = session_user_template(f->m, buf, sizeof buf, &after);
    if (st != KVF_OK) return st;
    const int32_t got = tok_encode(f->m->tok, buf, strlen(buf), f->ids, 256, true, true);
    if (got < 0) return err_set(KVF_ERR_INTERNAL, "calibrate: the chat template's prefix takes over 256 tokens");
    f->n_prefix = got;
    return KVF_OK;
}

/* R^2 and the rank correlation of each layer's held-out scores: yt, yp
 * [L][H][cap] (KVzip+'s and the fit's), n[l] of them in layer l. */
static void fit_report(const struct fit *f, const float *yt, const float *yp, int64_t cap, const int64_t *n,
                       struct kv_zap *z) {
    float *work = malloc(sizeof(float) * (size_t)cap * 2);
    int *iwork = malloc(sizeof(int) * (size_t)cap);
    for (int l = 0; l < f->L; l++) {
        double r2 = 0, rho = 0;
        for (int g = 0; g < f->H; g++) {
            const size_t at = ((size_t)l * f->H + g) * cap;
            r2 += n[l] > 1 ? kv_zap_r2(yt + at, yp + at, n[l]) : NAN;
            rho += work && iwork && n[l] > 1 ? kv_zap_spearman(yt + at, yp + at, n[l], work, iwork) : NAN;
        }
        z->r2[l] = (float)(r2 / f->H), z->spearman[l] = (float)(rho / f->H);
    }
    free(work);
    free(iwork);
}

static void fit_free(struct fit *f) {
    kvf_session_free(f->s);
    free(f->ids);
    free(f->tap.x);
    free(f->tap.qscale);
    free(f->tap.escale);
    free(f->tap.vrows);
    free(f->tap.vg);
    free(f->gram);
    free(f->pick);
    free(f->slot);
    free(f->x);
    free(f->y);
    free(f->yp);
    for (int l = 0; f->ridge && l < f->L; l++) kv_ridge_free(&f->ridge[l]);
    free(f->ridge);
}

static enum kvf_status params_check(const struct kvf_model *m, const char *const *texts, int n_texts,
                                    const struct kvf_kvzap_params *p, const char *path) {
    if (!m || !texts || n_texts <= 0 || !path || !p)
        return err_set(KVF_ERR_INVALID_ARG, "calibrate: a NULL model, path or parameters, or no text");
    if (model_require_weights(m, "calibrate") != KVF_OK) return KVF_ERR_UNSUPPORTED;
    if (p->samples < 1 || p->samples > 1000000 || p->test < 0 || p->test > 100000)
        return err_set(KVF_ERR_INVALID_ARG, "calibrate: %d spans to fit on (1..1000000) and %d to test (0..100000)",
                       p->samples, p->test);
    if (p->span < 16 || p->span > KVF_MIN(65536, m->hp.n_ctx_train / 2))
        return err_set(KVF_ERR_INVALID_ARG,
                       "calibrate: a span of %d tokens (16..%d: the context and its "
                       "repetition fit in the model's trained context)",
                       p->span, KVF_MIN(65536, m->hp.n_ctx_train / 2));
    if (p->per_span < 1 || p->per_span > p->span)
        return err_set(KVF_ERR_INVALID_ARG, "calibrate: %d positions a span (1..%d)", p->per_span, p->span);
    if ((int64_t)p->samples * p->per_span > INT32_MAX)
        return err_set(KVF_ERR_INVALID_ARG, "calibrate: %d spans of %d positions: over 2^31 pairs", p->samples,
                       p->per_span);
    if (!(p->alpha > 0) || !isfinite(p->alpha))
        return err_set(KVF_ERR_INVALID_ARG, "calibrate: alpha %g (a positive number)", p->alpha);
    if (m->hp.n_layer > KVF_KVZAP_MAX_LAYERS)
        return err_set(KVF_ERR_UNSUPPORTED, "calibrate: %d layers (at most %d)", m->hp.n_layer, KVF_KVZAP_MAX_LAYERS);
    if (p->n_threads < 0 || p->n_threads > 1024)
        return err_set(KVF_ERR_INVALID_ARG, "calibrate: n_threads %d out of range", p->n_threads);
    return KVF_OK;
}

static enum kvf_status fit_init(struct fit *f, const struct kvf_model *m, const struct kvf_kvzap_params *p) {
    const struct hparams *hp = &m->hp;
    *f = (struct fit){
        .m = m, .p = p, .L = hp->n_layer, .E = hp->n_embd, .H = hp->n_head_kv, .P = p->per_span, .rng = p->seed
    };
    const size_t L = (size_t)f->L, E = (size_t)f->E, H = (size_t)f->H, P = (size_t)f->P, hd = (size_t)hp->head_dim;
    f->ids = malloc(sizeof(int32_t) * ((size_t)p->span + 256));
    enum kvf_status st = f->ids ? fit_prefix(f) : err_set(KVF_ERR_NOMEM, "calibrate: out of memory");
    if (st != KVF_OK) return st;
    const int n_ctx = f->n_prefix + p->span;
    char spec[64];
    snprintf(spec, sizeof spec, "kvzip:chunk=%d", n_ctx); /* the whole context repeated in one run */
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = n_ctx, sp.kv_spec = spec, sp.n_threads = p->n_threads;
    sp.kv_swa_full = true; /* entry j stays at index j, and the repetition reads what its windows see */
    if ((st = kvf_session_init(m, &sp, &f->s)) != KVF_OK) return st;
    /* The repetition: the context again after an instruction and the template's turn (kvzip.c's most). */
    f->tap.entries = 2 * n_ctx + 1024;
    f->tap.rows = f->s->params.n_batch;
    f->tap.x_cap = n_ctx, f->tap.x_rows = f->P, f->tap.q_span = p->span;
    f->tap.x = malloc(sizeof(float) * L * P * E);
    f->slot = malloc(sizeof(int) * (size_t)n_ctx);
    f->tap.x_slot = f->slot;
    f->tap.qscale = malloc(sizeof(float) * (size_t)f->tap.rows);
    f->tap.escale = malloc(sizeof(float) * (size_t)hp->n_head * (size_t)f->tap.entries);
    f->tap.vrows = malloc(sizeof(float) * (size_t)f->tap.entries * hd);
    f->tap.vg = malloc(sizeof(float) * (size_t)f->tap.entries * hd);
    f->gram = malloc(sizeof(float) * L * (size_t)hp->n_head * hd * hd);
    f->pick = malloc(sizeof(int) * (size_t)p->span);
    f->x = malloc(sizeof(float) * P * E);
    f->y = malloc(sizeof(float) * P * H);
    f->yp = malloc(sizeof(float) * P * H);
    f->ridge = calloc(L, sizeof *f->ridge);
    if (!f->tap.x || !f->slot || !f->tap.qscale || !f->tap.escale || !f->tap.vrows || !f->tap.vg || !f->gram ||
        !f->pick || !f->x || !f->y || !f->yp || !f->ridge)
        return err_set(KVF_ERR_NOMEM, "calibrate: out of memory");
    for (size_t l = 0; l < L; l++)
        if ((st = kv_ridge_init(&f->ridge[l], f->E, f->H)) != KVF_OK) return st;
    f->s->tap = &f->tap;
    return fit_gram(f);
}

enum kvf_status kvf_kvzap_calibrate(const struct kvf_model *m, const char *const *texts, int n_texts,
                                    const struct kvf_kvzap_params *params, const char *path,
                                    struct kvf_kvzap_report *report) {
    const struct kvf_kvzap_params p = params ? *params : kvf_kvzap_default_params();
    enum kvf_status st = params_check(m, texts, n_texts, &p, path);
    if (st != KVF_OK) return st;
    struct corpus c = { 0 };
    struct fit f = { 0 };
    struct kv_zap z = { 0 };
    struct span *spans = malloc(sizeof *spans * ((size_t)p.samples + p.test));
    const int64_t test_rows = (int64_t)p.test * p.per_span;
    float *yt = malloc(sizeof(float) * (size_t)KVF_MAX(1, test_rows) * m->hp.n_layer * m->hp.n_head_kv);
    float *yp = malloc(sizeof(float) * (size_t)KVF_MAX(1, test_rows) * m->hp.n_layer * m->hp.n_head_kv);
    int64_t *tn = calloc((size_t)m->hp.n_layer, sizeof *tn);
    if ((st = corpus_init(&c, m->tok, texts, n_texts, p.span)) == KVF_OK) st = fit_init(&f, m, &p);
    if (st == KVF_OK && (!spans || !yt || !yp || !tn)) st = err_set(KVF_ERR_NOMEM, "calibrate: out of memory");
    if (st == KVF_OK && c.starts == 0)
        st = err_set(KVF_ERR_INVALID_ARG, "calibrate: no text of the corpus holds a span of %d tokens", p.span);
    if (st == KVF_OK) st = kv_zap_init(&z, f.L, f.E, f.H, m->digest);
    /* The held-out spans first; the spans fitted on overlap none of them. */
    for (int i = 0; st == KVF_OK && i < p.samples + p.test; i++) {
        int tries = 0;
        for (bool clash = true; clash && st == KVF_OK; tries++) {
            spans[i] = corpus_draw(&c, p.span, &f.rng);
            clash = false;
            for (int j = 0; i >= p.test && j < p.test; j++) clash |= spans_overlap(spans[i], spans[j], p.span);
            if (clash && tries == 1000)
                st = err_set(KVF_ERR_INVALID_ARG,
                             "calibrate: the corpus is too small to hold %d test spans of %d "
                             "tokens apart from the others",
                             p.test, p.span);
        }
    }
    const int total = p.samples + p.test;
    int done = 0;
    bool stop = false;
    for (int i = p.test; st == KVF_OK && !stop && i < total; i++) {
        if ((st = fit_span(&f, c.toks[spans[i].text] + spans[i].start)) == KVF_OK) st = fit_gather(&f);
        fit_span_done(&f);
        done++;
        stop = p.progress && !p.progress(done, total, p.user);
    }
    const int fitted = done;
    if (st == KVF_OK) st = fit_solve(&f, &z);
    for (int i = 0; st == KVF_OK && !stop && i < p.test; i++) {
        st = fit_span(&f, c.toks[spans[i].text] + spans[i].start);
        for (int l = 0; st == KVF_OK && l < f.L; l++) {
            const int got = fit_pairs(&f, l);
            if (got && (st = kv_zap_score(&z, l, f.x, got, f.yp)) != KVF_OK) break;
            for (int g = 0; g < f.H; g++) {
                const size_t at = ((size_t)l * f.H + g) * test_rows + tn[l];
                for (int r = 0; r < got; r++)
                    yt[at + r] = f.y[(size_t)r * f.H + g], yp[at + r] = f.yp[(size_t)r * f.H + g];
            }
            tn[l] += got;
        }
        fit_span_done(&f);
        done++;
        stop = p.progress && !p.progress(done, total, p.user);
    }
    const bool tested = st == KVF_OK && done == total && p.test > 0;
    if (tested) fit_report(&f, yt, yp, test_rows, tn, &z);
    if (st == KVF_OK) {
        int64_t rows = 0; /* the most pairs of any layer (a sliding-window layer may see fewer) */
        for (int l = 0; l < f.L; l++) rows = KVF_MAX(rows, f.ridge[l].n);
        z.samples = fitted, z.span = p.span, z.rows = rows;
        z.alpha = (float)p.alpha;
        st = kv_zap_save(&z, path);
    }
    if (st == KVF_OK && report) {
        *report = (struct kvf_kvzap_report){
            .n_layer = z.n_layer, .samples = z.samples, .rows = z.rows, .test = tested ? p.test : 0
        };
        for (int l = 0; l < z.n_layer; l++) report->r2[l] = z.r2[l], report->spearman[l] = z.spearman[l];
    }
    free(tn);
    kv_zap_free(&z);
    fit_free(&f);
    corpus_free(&c);
    free(spans);
    free(yt);
    free(yp);
    return st;
}
