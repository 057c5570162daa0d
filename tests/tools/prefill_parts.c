/* kvf_session_prefill_prompt_part: a prompt given in parts is the prompt
 * given whole.
 *
 *   prefill_parts MODEL MMPROJ
 *
 * On the tiny LLaVA, Gemma 3 or Qwen fixture (two images, and a video where
 * the model reads them: kv_state.h), with passes of 8 rows
 * (an image whose tokens attend to each other: one pass), the prompt
 * prefilled in parts asked for 5 positions at a time — each runs on to the
 * end of the whole prompt's pass, cutting through both images — must leave
 * the same positions, tags, cache bytes, kept entries and logits as
 * kvf_session_prefill_prompt, before and after compression and through
 * three decode steps, for the policies that take parts (block-wise
 * included). Policies that need the whole prompt, and parts out of order,
 * are refused. */
#include "kv_state.h"

#include <math.h>

#define PART 5

static const char *const specs[] = {
    "full", "snapkv:budget=0.3", "h2o:budget=0.3+decode=h2o", "lookm:budget=0.3", "elastic:budget=0.3",
    "blockwise:budget=48,block=16", "blockwise:budget=48,block=image", "blockwise:budget=64,block=20",
};

static struct kvf_session *session_new(const struct kvf_model *m, const struct kvf_prompt *pr, const char *spec) {
    struct kvf_session_params sp = fixture_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr) + 4;
    sp.n_batch = 8;
    sp.kv_spec = spec;
    sp.kv_swa_full = true; /* windowed layers (Gemma 3) keep what a truncated session goes back to */
    struct kvf_session *s = NULL;
    if (kvf_session_init(m, &sp, &s) != KVF_OK) fprintf(stderr, "prefill_parts: %s: %s\n", spec, kvf_last_error());
    return s;
}

static int check_spec(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                      const char *spec) {
    struct kvf_session *whole = session_new(m, pr, spec), *parts = session_new(m, pr, spec);
    const int n = kvf_prompt_n_tokens(pr);
    enum kvf_status st = whole && parts ? kvf_session_prefill_prompt(whole, pr, NULL) : KVF_ERR_INTERNAL;
    for (int first = 0; first < n && st == KVF_OK; first = kvf_session_n_past(parts))
        st = kvf_session_prefill_prompt_part(parts, pr, first, first + PART < n ? PART : n - first);
    int bad = st != KVF_OK || memcmp(kvf_session_tags(whole), kvf_session_tags(parts), sizeof(struct kvf_tag) * n) ||
              same_state(whole, parts, mi, spec, "after the prompt");
    if (!bad) st = kvf_session_compress(whole);
    if (!bad && st == KVF_OK) st = kvf_session_compress(parts);
    bad |= st != KVF_OK || same_state(whole, parts, mi, spec, "after compression");
    for (int t = 0; !bad && t < 3; t++) {
        const int32_t tok = argmax(kvf_session_logits(whole), mi->n_vocab);
        st = kvf_session_decode(whole, tok);
        if (st == KVF_OK) st = kvf_session_decode(parts, tok);
        bad |= st != KVF_OK || same_state(whole, parts, mi, spec, "after a decode step");
    }
    if (st != KVF_OK) fprintf(stderr, "%s: %s\n", spec, kvf_last_error());
    printf("%-40s %s\n", spec, bad ? "FAIL" : "ok");
    kvf_session_free(whole);
    kvf_session_free(parts);
    return bad;
}

/* The same top token, and no logit further from the other than 0.3 of the
 * largest logit's magnitude (the 4-bit keys' error on the fixture's random
 * weights: tests/integration/kv_type.cmake). */
static bool logits_close(const float *a, const float *b, int n) {
    int ta = 0, tb = 0;
    float top = 0, worst = 0;
    for (int i = 0; i < n; i++) {
        ta = a[i] > a[ta] ? i : ta, tb = b[i] > b[tb] ? i : tb;
        top = fmaxf(top, fabsf(a[i])), worst = fmaxf(worst, fabsf(a[i] - b[i]));
    }
    return ta == tb && worst <= 0.3f * top;
}

/* A conversation going on from a truncated session: the prompt's first
 * image segment is shared with an earlier turn that went on differently
 * (another question, 3 decoded tokens); truncated to the end of that
 * segment (its storage fitted to what is left), the session takes the rest
 * of the prompt in parts and must equal a fresh session given the whole
 * prompt (full cache: bit for bit; with smoothed keys, q4_0s, close: each
 * head keeps the smoothing its first keys gave, and the turn's first keys
 * went past the cut). Under a compressing policy a truncated session holds
 * no entry past the cut and fewer bytes. */
static int check_truncate(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                          const struct kvf_prompt *other) {
    struct kvf_session *turn = session_new(m, pr, "full"), *fresh = session_new(m, pr, "full");
    struct kvf_session *cmp = session_new(m, pr, "snapkv:budget=0.5");
    int cut = 0; /* the first position after the first image */
    while (kvf_prompt_tags(pr)[cut].modality == KVF_MOD_TEXT) cut++;
    while (kvf_prompt_tags(pr)[cut].modality != KVF_MOD_TEXT) cut++;
    enum kvf_status st = turn && fresh && cmp ? kvf_session_prefill_prompt(turn, other, NULL) : KVF_ERR_INTERNAL;
    for (int t = 0; t < 3 && st == KVF_OK; t++) st = kvf_session_decode(turn, 1 + t);
    if (st == KVF_OK) st = kvf_session_truncate(turn, cut);
    /* storage fitted to the entries left (a server reserves for what comes
     * next only), and the peak read since this point starts from it */
    const size_t peak = kvf_session_kv_peak_bytes(turn);
    kvf_session_kv_peak_reset(turn);
    const bool cleared = kvf_session_logits(turn) == NULL && kvf_session_n_past(turn) == cut &&
                         kvf_session_kv_bytes(turn) == kvf_session_kv_full_bytes(turn) &&
                         kvf_session_kv_peak_bytes(turn) == kvf_session_kv_bytes(turn) &&
                         peak > kvf_session_kv_bytes(turn);
    const int n_pr = kvf_prompt_n_tokens(pr);
    for (int first = cut; st == KVF_OK && first < n_pr; first = kvf_session_n_past(turn))
        st = kvf_session_prefill_prompt_part(turn, pr, first, first + PART < n_pr ? PART : n_pr - first);
    if (st == KVF_OK) st = kvf_session_prefill_prompt(fresh, pr, NULL);
    /* compress (the full cache: sized to what it holds) before comparing
     * bytes, which otherwise hold each session's own growth slack */
    if (st == KVF_OK) st = kvf_session_compress(turn);
    if (st == KVF_OK) st = kvf_session_compress(fresh);
    int bad = st != KVF_OK || !cleared || kvf_session_kv_bytes(turn) != kvf_session_kv_bytes(fresh);
    if (!bad && fixture_params().type_k == KVF_KV_Q4_0S)
        bad = !logits_close(kvf_session_logits(turn), kvf_session_logits(fresh), mi->n_vocab);
    else if (!bad)
        bad = memcmp(kvf_session_logits(turn), kvf_session_logits(fresh), sizeof(float) * (size_t)mi->n_vocab) != 0;
    for (int l = 0; !bad && l < mi->n_layer; l++)
        for (int g = 0; g < mi->n_head_kv; g++) {
            int na, nb;
            const struct kvf_tag *ta = kvf_session_kv_tags(turn, l, g, &na),
                                 *tb = kvf_session_kv_tags(fresh, l, g, &nb);
            bad |= na != nb || memcmp(ta, tb, sizeof *ta * (size_t)na);
        }
    /* compressed, then cut */
    if (!bad && (kvf_session_prefill_prompt(cmp, pr, NULL) != KVF_OK || kvf_session_compress(cmp) != KVF_OK)) bad = 1;
    const size_t before = bad ? 0 : kvf_session_kv_bytes(cmp);
    bad |= bad || kvf_session_truncate(cmp, cut) != KVF_OK || kvf_session_kv_bytes(cmp) >= before ||
           kvf_session_truncate(cmp, cut + 1) != KVF_ERR_INVALID_ARG;
    for (int l = 0; !bad && l < mi->n_layer; l++)
        for (int g = 0; g < mi->n_head_kv; g++) {
            int n;
            const struct kvf_tag *t = kvf_session_kv_tags(cmp, l, g, &n);
            for (int j = 0; j < n; j++) bad |= t[j].pos >= cut;
        }
    if (st != KVF_OK) fprintf(stderr, "truncate: %s\n", kvf_last_error());
    printf("%-40s %s\n", "a turn going on from a truncated session", bad ? "FAIL" : "ok");
    kvf_session_free(turn);
    kvf_session_free(fresh);
    kvf_session_free(cmp);
    return bad;
}

/* Refusals, with nothing run. */
static int check_refusals(const struct kvf_model *m, const struct kvf_prompt *pr) {
    struct kvf_session *reduce = session_new(m, pr, "lightkv"), *plain = session_new(m, pr, "full");
    int bad = !reduce || !plain || kvf_session_prefill_prompt_part(reduce, pr, 0, PART) != KVF_ERR_UNSUPPORTED ||
              kvf_session_n_past(reduce) != 0;
    bad |= bad || kvf_session_prefill_prompt_part(plain, pr, PART, PART) != KVF_ERR_INVALID_ARG; /* not from 0 */
    bad |= bad || kvf_session_prefill_prompt_part(plain, pr, 0, PART) != KVF_OK;
    bad |= bad || kvf_session_prefill_prompt_part(plain, pr, 2 * PART, PART) != KVF_ERR_INVALID_ARG; /* a gap */
    bad |= bad || kvf_session_prefill_prompt_part(plain, pr, PART, kvf_prompt_n_tokens(pr)) != KVF_ERR_INVALID_ARG;
    const int in = kvf_session_n_past(plain);
    bad |= bad || in < PART;
    /* a token decoded between parts moved the session: the next part is refused */
    bad |= bad || kvf_session_decode(plain, 1) != KVF_OK ||
           kvf_session_prefill_prompt_part(plain, pr, in, PART) != KVF_ERR_INVALID_ARG;
    printf("%-40s %s\n", "refusals (reduce stage, order, range)", bad ? "FAIL" : "ok");
    kvf_session_free(reduce);
    kvf_session_free(plain);
    return bad;
}

int main(int argc, char **argv) {
    struct kvf_model *m = NULL;
    struct kvf_model_info mi;
    struct kvf_media *media[FIXTURE_MEDIA];
    struct kvf_prompt *pr = NULL;
    if (fixture_open("prefill_parts", argc, argv, &m, &mi, media, &pr)) return 2;
    int rc = 0;
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) rc |= check_spec(m, &mi, pr, specs[i]);
    char zap_path[32], zap[96]; /* KVzap: each part's entries scored as they are written */
    rc |= fixture_kvzap(m, zap_path, zap, sizeof zap) || check_spec(m, &mi, pr, zap);
    unlink(zap_path);
    rc |= check_refusals(m, pr);
    /* an earlier turn: the same first image and text, then another question */
    struct kvf_prompt *other = NULL;
    if (kvf_prompt_init(m, "USER: Here are two pictures. <image> The first one shows a field of colours. Is it red?",
                        (const struct kvf_media *const *)media, 1, true, false, &other) != KVF_OK) {
        fprintf(stderr, "prefill_parts: %s\n", kvf_last_error());
        rc = 1;
    } else {
        rc |= check_truncate(m, &mi, pr, other);
    }
    kvf_prompt_free(other);
    printf("%s\n", rc ? "FAIL" : "ok: a prompt in parts is the prompt whole");
    kvf_prompt_free(pr);
    fixture_media_free(media);
    kvf_model_free(m);
    return rc;
}
