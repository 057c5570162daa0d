/* KVzip (Kim et al., 2025): an entry matters as much as the model needs it
 * to reproduce the context. After the prompt, the session feeds the model
 * "Repeat the previous context exactly." and then the context itself,
 * teacher-forced through the cache in chunks of `chunk` tokens (each run's
 * own entries removed after it: the rule's pass, session.c session_rule_pass);
 * an entry's score is the most attention any query of any run, in any
 * query head of its kv head, paid it. The question plays no part, so the compressed
 * cache serves whatever is asked next. The first `sinks` entries are
 * always kept; the scores of every head of every layer are ranked together
 * (+budget=global, the paper's non-uniform budgets), so heads and layers
 * that reconstruction hardly reads give their room to those it reads. */
#include "kv/policy.h"

#include "tok/tokenizer.h"

#include <math.h>
#include <string.h>

static void kv_score_kvzip(const struct kv_score_in *in, float *score) {
    for (int j = 0; j < in->h->n; j++) score[j] = j < in->p->sinks ? INFINITY : in->recon[j];
}

/* The runs, as kvpress words them: the context's text tokens in chunks of
 * `chunk`, each after an instruction and the chat template's turn to the
 * assistant:
 *   "\n\nRepeat the previous context exactly." <turn> chunk 1
 *   "\n\nRepeat the part of the previous context exactly, starting with"
 *     <the previous chunk's last OVERLAP tokens> <turn> chunk k */
#define OVERLAP 8

/* The instruction, the overlap and the turn take fewer tokens than bytes. */
static int kvzip_most(const struct kv_policy *p, int n_text, const char *turn) {
    return 128 + OVERLAP + (int)strlen(turn) + KVF_MIN(p->chunk, n_text);
}

/* The ids of text (special tokens parsed when special) appended to ids[*n..cap). */
static enum kvf_status put_text(const struct tokenizer *tok, const char *text, bool special, int32_t *ids, int cap,
                                int *n) {
    const int32_t got = tok_encode(tok, text, strlen(text), ids + *n, cap - *n, false, special);
    if (got == INT32_MIN) return KVF_ERR_NOMEM;
    if (got < 0) return err_set(KVF_ERR_BUFFER, "kvzip: %d ids do not fit in %d", -got, cap - *n);
    *n += got;
    return KVF_OK;
}

static enum kvf_status kvzip_run(const struct kv_pass_in *in, int k, int32_t *ids, int cap, int *n) {
    const int chunk = in->p->chunk, a = k * chunk;
    *n = 0;
    if (a >= in->n_text) return KVF_OK;
    enum kvf_status st;
    if (a == 0) {
        st = put_text(in->tok, "\n\nRepeat the previous context exactly.", false, ids, cap, n);
    } else {
        st = put_text(in->tok, "\n\nRepeat the part of the previous context exactly, starting with", false, ids, cap,
                      n);
        const int o = KVF_MIN(OVERLAP, a);
        memcpy(ids + *n, in->text + a - o, sizeof *ids * (size_t)o);
        *n += o;
    }
    if (st == KVF_OK) st = put_text(in->tok, in->turn, true, ids, cap, n);
    const int m = KVF_MIN(chunk, in->n_text - a);
    if (st == KVF_OK && *n + m > cap) st = err_set(KVF_ERR_INTERNAL, "kvzip: a run of %d tokens", *n + m);
    if (st != KVF_OK) return st;
    memcpy(ids + *n, in->text + a, sizeof *ids * (size_t)m);
    *n += m;
    return KVF_OK;
}

static const struct kv_pass_ops kvzip_pass = {.most = kvzip_most, .run = kvzip_run};

const struct kv_rule kv_rule_kvzip = {
    .stage = "preset",
    .name = "kvzip",
    .summary = "the most attention an entry gets while the model repeats the context (query-agnostic); heads ranked "
               "together",
    .paper = "KVzip: Query-Agnostic KV Cache Compression with Context Reconstruction (Kim et al., NeurIPS 2025, "
             "arXiv:2505.23416); kvpress's KVzipPress",
    .keys = "budget sinks chunk",
    .shown = "budget=0.2,sinks=4,chunk=2048 +budget=global",
    .defaults = {.method = KV_KVZIP, .budget = 0.2, .chunk = 2048, KV_STAGE_DEFAULTS, .alloc = KV_ALLOC_GLOBAL},
    .score = kv_score_kvzip,
    .pass = &kvzip_pass,
};

static int global_select(const struct kv_policy *p, int n_head, const int *n, float *score, long total, int *out,
                         int *count, int *scratch) {
    (void)p, (void)scratch;
    return kv_heads_select(n_head, n, score, total, out, count);
}

/* The decode stages keep each layer within its own share. */
static const char *global_check(const struct kv_policy *p) {
    return p->decode != KV_DECODE_GROW && p->decode != KV_DECODE_RECOMPRESS
               ? "budget=global gives layers different shares, which only decode=grow or decode=recompress keep"
               : NULL;
}

static const struct kv_budget_ops global_ops = {
    .rank = KV_RANK_MODEL,
    .select = global_select,
    .ranking = "shares the model's budget among every kv head by their scores",
};

const struct kv_rule kv_rule_budget_global = {
    .stage = "budget",
    .name = "global",
    .summary = "every kv head of every layer shares the model's budget by score (no floor); heads and layers hold "
               "different entry counts",
    .paper = "KVzip (Kim et al., NeurIPS 2025, arXiv:2505.23416), kvpress's KVzipPress with layerwise=False",
    .keys = "",
    .shown = "",
    .defaults = {.alloc = KV_ALLOC_GLOBAL},
    .budget = &global_ops,
    .check = global_check,
};
