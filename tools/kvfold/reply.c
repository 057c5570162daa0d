/* The generation loop `kvfold generate` and `kvfold chat` share: the
 * sampler from the options, a prompt through the session in parts (with
 * progress and Ctrl-C), and one reply sampled, streamed and decoded. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void sampling_defaults(struct args *a, int n_predict) {
    const struct kvf_sampler_params sp = kvf_sampler_default_params();
    a->n_predict = n_predict;
    a->temp = 0.0f; /* greedy: the same prompt always gives the same text */
    a->top_k = sp.top_k;
    a->top_p = sp.top_p;
    a->min_p = sp.min_p;
    a->seed = sp.seed;
    a->repeat_penalty = sp.penalty_repeat;
    a->repeat_last_n = sp.penalty_last_n;
    a->batch = kvf_session_default_params().n_batch;
}

int sampler_open(const struct args *a, struct kvf_sampler **out) {
    const struct kvf_sampler_params p = {
        .temp = a->temp, .top_k = a->top_k, .top_p = a->top_p, .min_p = a->min_p, .seed = a->seed,
        .penalty_repeat = a->repeat_penalty, .penalty_last_n = a->repeat_last_n,
    };
    const enum kvf_status st = kvf_sampler_init(&p, out);
    return st == KVF_OK ? 0 : fail_option(st, "sampler");
}

void sampler_accept_prompt(struct kvf_sampler *smp, const struct kvf_prompt *pr) {
    for (int i = 0; i < kvf_prompt_n_tokens(pr); i++)
        if (kvf_prompt_token(pr, i) >= 0) /* media rows have no id */
            kvf_sampler_accept(smp, kvf_prompt_token(pr, i));
}

int prompt_prefill(struct kvf_session *s, const struct kvf_prompt *pr, int first, const struct args *a,
                   const char *what, bool *stopped) {
    const int n = kvf_prompt_n_tokens(pr);
    int base = kvf_session_n_past(s) - first;
    *stopped = false;
    /* n = 1: each part runs to the end of one of the whole prompt's passes */
    enum kvf_status st = kvf_session_prefill_prompt_part(s, pr, first, 1);
    if (st == KVF_ERR_UNSUPPORTED && first > 0) { /* a policy that takes the prompt whole: from the start */
        kvf_session_reset(s);
        base = first = 0;
        st = kvf_session_prefill_prompt_part(s, pr, 0, 1);
    }
    if (st == KVF_ERR_UNSUPPORTED)
        st = kvf_session_prefill_prompt(s, pr, NULL);
    struct progress p;
    progress_init(&p, "prompt", "tok", n, a);
    for (int done; st == KVF_OK && (done = kvf_session_n_past(s) - base) < n;) {
        progress_update(&p, done, NULL);
        if (interrupted()) {
            *stopped = true;
            break;
        }
        st = kvf_session_prefill_prompt_part(s, pr, done, 1);
    }
    progress_end(&p);
    return st == KVF_OK ? 0 : fail(st, what);
}

/* Whether the text ends with one of the -r texts. */
static bool ends_with_stop(const struct args *a, const struct strbuf *t) {
    for (int i = 0; i < a->stops.n; i++) {
        const size_t len = strlen(a->stops.v[i]);
        if (len && t->n >= len && memcmp(t->s + t->n - len, a->stops.v[i], len) == 0)
            return true;
    }
    return false;
}

int reply_generate(struct kvf_session *s, const struct kvf_model *m, struct kvf_sampler *smp, const struct args *a,
                   bool stream, const char *what, struct reply *r) {
    char *piece = NULL;
    int32_t piece_cap = 0;
    int rc = 0;
    enum kvf_status st;
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    r->stop = "length";
    r->last = -1;
    for (;;) {
        int32_t tok;
        pause_point("reply", r->n_gen);
        if (interrupted()) {
            r->stop = "interrupted";
            break;
        }
        if ((st = kvf_sampler_sample(smp, kvf_session_logits(s), info.n_vocab, &tok)) != KVF_OK) {
            rc = fail(st, what);
            break;
        }
        if (!a->ignore_eos && kvf_token_is_eog(m, tok)) {
            r->stop = "eog";
            break;
        }
        kvf_sampler_accept(smp, tok);
        r->last = tok;
        const int32_t np = token_piece(m, tok, &piece, &piece_cap);
        if (np < 0 || !strbuf_put(&r->text, piece, (size_t)np)) {
            rc = fail(KVF_ERR_NOMEM, what);
            break;
        }
        if (stream) {
            fwrite(piece, 1, (size_t)np, stdout);
            fflush(stdout);
        }
        ++r->n_gen;
        if (ends_with_stop(a, &r->text)) {
            r->stop = "stop";
            break;
        }
        if (r->n_gen == a->n_predict)
            break;
        if (kvf_session_n_past(s) >= kvf_session_n_ctx(s)) {
            r->stop = "context";
            break;
        }
        const double t0 = now_ms();
        if ((st = kvf_session_decode(s, tok)) != KVF_OK) {
            rc = fail(st, what);
            break;
        }
        r->decode_ms += now_ms() - t0;
        r->n_decoded++;
        r->last = -1;
    }
    free(piece);
    return rc;
}
