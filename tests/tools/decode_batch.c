/* kvf_session_decode_batch: many sessions decoded together, each bit for
 * bit what kvf_session_decode gives it alone.
 *
 *   decode_batch MODEL MMPROJ
 *
 * On the tiny LLaVA fixture (two images and a 3-frame video through its
 * vision tower; Qwen2.5-VL / Qwen2-VL and Gemma 3 by their tests), every
 * policy — presets, stage options, decode stages, the reduce stages, the
 * full cache — is prefilled and compressed twice; one copy then decodes on
 * its own, the others all together in one kvf_session_decode_batch call per
 * step (each with its own greedy token, so the batch holds sessions at
 * different lengths on different paths). After every step the bytes, the
 * peak, every head's kept tags, the merges and the logits must be equal.
 * The same sessions decoded three times over (3 x n rows, past the 32 rows
 * where the weight products go to BLAS) must stay within a small relative
 * difference, which is printed. Arguments are checked before any work. */
#include "kv_state.h"

#include <math.h>

#define N_DECODE 6

static const char *specs[] = {
    "full", "streaming:budget=0.3", "h2o:budget=0.3", "snapkv:budget=0.3", "pyramidkv:budget=0.3", "roco:budget=0.3",
    "keydiff:budget=0.3", "knorm:budget=0.3", "random:budget=0.3", "imgrand:budget=0.3", "lookm:budget=0.3",
    "elastic:budget=0.3", "prefixkv:budget=0.3", "csp:budget=0.1,decode_softmax=1", "snapkv:budget=0.2+decode=h2o",
    "keydiff:budget=0.25+decode=recompress:every=2", "streaming:budget=24+decode=window",
    "snapkv:budget=0.2+budget=adaptive+decode=h2o", "blockwise:budget=64,block=32", "lightkv", "fastv:k=1",
    "snapkv:budget=0.3+reduce=tome", "kvzap" /* its scorer, fitted at the start (main) */,
};
#define N_SPECS ((int)(sizeof specs / sizeof *specs))

static struct kvf_session *compressed(const struct kvf_model *m, const struct kvf_prompt *pr, const char *spec) {
    struct kvf_session_params sp = fixture_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr) + N_DECODE + 1;
    sp.kv_spec = spec;
    struct kvf_session *s = NULL;
    if (kvf_session_init(m, &sp, &s) != KVF_OK || kvf_session_prefill_prompt(s, pr, NULL) != KVF_OK ||
        kvf_session_compress(s) != KVF_OK) {
        fprintf(stderr, "decode_batch: %s: %s\n", spec, kvf_last_error());
        kvf_session_free(s);
        return NULL;
    }
    return s;
}

/* Bad arguments are refused before anything changes. */
static int check_refusals(struct kvf_session *a, struct kvf_session *b, const struct kvf_model_info *mi) {
    struct kvf_session *twice[2] = {a, a}, *with_null[2] = {a, NULL}, *pair[2] = {a, b};
    const int32_t ok_tok[2] = {1, 1}, bad_tok[2] = {1, mi->n_vocab};
    const int n_past = kvf_session_n_past(a);
    int bad = kvf_session_decode_batch(twice, ok_tok, 2) != KVF_ERR_INVALID_ARG;
    bad |= kvf_session_decode_batch(with_null, ok_tok, 2) != KVF_ERR_INVALID_ARG;
    bad |= kvf_session_decode_batch(pair, bad_tok, 2) != KVF_ERR_INVALID_ARG;
    bad |= kvf_session_decode_batch(pair, ok_tok, 0) != KVF_ERR_INVALID_ARG;
    bad |= kvf_session_decode_batch(NULL, ok_tok, 2) != KVF_ERR_INVALID_ARG;
    bad |= kvf_session_n_past(a) != n_past;
    printf("%-48s %s\n", "bad arguments refused", bad ? "FAIL" : "ok");
    return bad;
}

/* A session at the end of its context: KVF_ERR_CONTEXT, nothing run. */
static int check_full(const struct kvf_model *m, const struct kvf_prompt *pr, struct kvf_session *other) {
    struct kvf_session_params sp = fixture_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr);
    struct kvf_session *s = NULL;
    int bad = kvf_session_init(m, &sp, &s) != KVF_OK || kvf_session_prefill_prompt(s, pr, NULL) != KVF_OK;
    struct kvf_session *pair[2] = {other, s};
    const int32_t tok[2] = {1, 1};
    const int n_past = kvf_session_n_past(other);
    bad |= bad || kvf_session_decode_batch(pair, tok, 2) != KVF_ERR_CONTEXT || kvf_session_n_past(other) != n_past;
    printf("%-48s %s\n", "a full session refused (KVF_ERR_CONTEXT)", bad ? "FAIL" : "ok");
    kvf_session_free(s);
    return bad;
}

/* Three copies of every spec decoded together (3 x N_SPECS rows, through
 * BLAS) against one decoding alone: the largest relative difference of the
 * logits after the first step. */
static int check_blas_rows(const struct kvf_model *m, const struct kvf_prompt *pr, const struct kvf_model_info *mi) {
    enum { COPIES = 3 };
    struct kvf_session *ss[COPIES * N_SPECS] = {NULL}, *alone[N_SPECS] = {NULL};
    int32_t tok[COPIES * N_SPECS];
    int bad = 0;
    for (int i = 0; i < COPIES * N_SPECS && !bad; i++) bad = !(ss[i] = compressed(m, pr, specs[i % N_SPECS]));
    for (int i = 0; i < N_SPECS && !bad; i++) bad = !(alone[i] = compressed(m, pr, specs[i]));
    for (int i = 0; i < COPIES * N_SPECS && !bad; i++) tok[i] = argmax(kvf_session_logits(ss[i]), mi->n_vocab);
    bad = bad || kvf_session_decode_batch(ss, tok, COPIES * N_SPECS) != KVF_OK;
    double worst = 0;
    for (int i = 0; i < N_SPECS && !bad; i++) {
        bad = kvf_session_decode(alone[i], tok[i]) != KVF_OK;
        const float *a = kvf_session_logits(alone[i]);
        double norm = 0;
        for (int v = 0; v < mi->n_vocab; v++) norm = fmax(norm, fabs(a[v]));
        for (int c = 0; c < COPIES && !bad; c++) {
            const float *b = kvf_session_logits(ss[c * N_SPECS + i]);
            for (int v = 0; v < mi->n_vocab; v++) worst = fmax(worst, fabs((double)a[v] - b[v]) / fmax(norm, 1e-30));
        }
    }
    bad |= !(worst < 1e-4);
    printf("%d rows through BLAS%*s %s  largest difference %.2e of the largest logit\n", COPIES * N_SPECS, 30, "",
           bad ? "FAIL" : "ok", worst);
    for (int i = 0; i < COPIES * N_SPECS; i++) kvf_session_free(ss[i]);
    for (int i = 0; i < N_SPECS; i++) kvf_session_free(alone[i]);
    return bad;
}

int main(int argc, char **argv) {
    struct kvf_model *m = NULL;
    struct kvf_model_info mi;
    struct kvf_media *media[FIXTURE_MEDIA];
    struct kvf_prompt *pr = NULL;
    if (fixture_open("decode_batch", argc, argv, &m, &mi, media, &pr)) return 2;
    char zap_path[32], zap[96];
    if (fixture_kvzap(m, zap_path, zap, sizeof zap)) return 2;
    specs[N_SPECS - 1] = zap;
    struct kvf_session *alone[N_SPECS] = {NULL}, *together[N_SPECS] = {NULL};
    int rc = 0;
    for (int i = 0; i < N_SPECS && !rc; i++)
        rc = !(alone[i] = compressed(m, pr, specs[i])) || !(together[i] = compressed(m, pr, specs[i]));
    for (int t = 0; t < N_DECODE && !rc; t++) {
        int32_t tok[N_SPECS];
        for (int i = 0; i < N_SPECS && !rc; i++) {
            tok[i] = argmax(kvf_session_logits(alone[i]), mi.n_vocab);
            rc = kvf_session_decode(alone[i], tok[i]) != KVF_OK;
        }
        rc = rc || kvf_session_decode_batch(together, tok, N_SPECS) != KVF_OK;
        if (rc) fprintf(stderr, "decode_batch: step %d: %s\n", t + 1, kvf_last_error());
        char when[32];
        snprintf(when, sizeof when, "at decode step %d", t + 1);
        for (int i = 0; i < N_SPECS && !rc; i++) rc |= same_state(alone[i], together[i], &mi, specs[i], when);
    }
    printf("%-48s %s\n", "23 policies decoded together, 6 steps", rc ? "FAIL" : "ok  (bit for bit)");
    if (!rc) rc |= check_refusals(together[0], together[1], &mi);
    if (!rc) rc |= check_full(m, pr, together[0]);
    if (!rc) rc |= check_blas_rows(m, pr, &mi);
    printf("%s\n", rc ? "FAIL" : "ok: batched decoding equals decoding alone");
    for (int i = 0; i < N_SPECS; i++) {
        kvf_session_free(alone[i]);
        kvf_session_free(together[i]);
    }
    kvf_prompt_free(pr);
    fixture_media_free(media);
    kvf_model_free(m);
    unlink(zap_path);
    return rc;
}
