/* kvf_session_prefill_prompt_part: a prompt given in parts is the prompt
 * given whole.
 *
 *   prefill_parts MODEL MMPROJ
 *
 * On the tiny LLaVA fixture (two images), with one row per forward pass in
 * both sessions (n_batch 1, so that batch boundaries cannot differ), the
 * prompt prefilled in parts of 5 positions — cutting through both images —
 * must leave the same positions, tags, cache bytes, kept entries and logits
 * as kvf_session_prefill_prompt, before and after compression and through
 * three decode steps, for the policies that take parts (block-wise
 * included). Policies that need the whole prompt, and parts out of order,
 * are refused. */
#include "kv_state.h"

#define PART 5

static const char *const specs[] = {
    "full", "snapkv:budget=0.3", "h2o:budget=0.3+decode=h2o", "blockwise:budget=48,block=16",
    "blockwise:budget=48,block=image",
};

static struct kvf_session *session_new(const struct kvf_model *m, const struct kvf_prompt *pr, const char *spec) {
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr) + 4;
    sp.n_batch = 1;
    sp.kv_spec = spec;
    struct kvf_session *s = NULL;
    if (kvf_session_init(m, &sp, &s) != KVF_OK) fprintf(stderr, "prefill_parts: %s: %s\n", spec, kvf_last_error());
    return s;
}

static int check_spec(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                      const char *spec) {
    struct kvf_session *whole = session_new(m, pr, spec), *parts = session_new(m, pr, spec);
    const int n = kvf_prompt_n_tokens(pr);
    enum kvf_status st = whole && parts ? kvf_session_prefill_prompt(whole, pr, NULL) : KVF_ERR_INTERNAL;
    for (int first = 0; first < n && st == KVF_OK; first += PART)
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

/* Refusals, with nothing run. */
static int check_refusals(const struct kvf_model *m, const struct kvf_prompt *pr) {
    struct kvf_session *reduce = session_new(m, pr, "lightkv"), *plain = session_new(m, pr, "full");
    int bad = !reduce || !plain || kvf_session_prefill_prompt_part(reduce, pr, 0, PART) != KVF_ERR_UNSUPPORTED ||
              kvf_session_n_past(reduce) != 0;
    bad |= bad || kvf_session_prefill_prompt_part(plain, pr, PART, PART) != KVF_ERR_INVALID_ARG; /* not from 0 */
    bad |= bad || kvf_session_prefill_prompt_part(plain, pr, 0, PART) != KVF_OK;
    bad |= bad || kvf_session_prefill_prompt_part(plain, pr, 2 * PART, PART) != KVF_ERR_INVALID_ARG; /* a gap */
    bad |= bad || kvf_session_prefill_prompt_part(plain, pr, PART, kvf_prompt_n_tokens(pr)) != KVF_ERR_INVALID_ARG;
    bad |= bad || kvf_session_n_past(plain) != PART;
    printf("%-40s %s\n", "refusals (reduce stage, order, range)", bad ? "FAIL" : "ok");
    kvf_session_free(reduce);
    kvf_session_free(plain);
    return bad;
}

int main(int argc, char **argv) {
    struct kvf_model *m = NULL;
    struct kvf_model_info mi;
    struct kvf_media *media[2];
    struct kvf_prompt *pr = NULL;
    if (fixture_open("prefill_parts", argc, argv, &m, &mi, media, &pr)) return 2;
    int rc = 0;
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) rc |= check_spec(m, &mi, pr, specs[i]);
    rc |= check_refusals(m, pr);
    printf("%s\n", rc ? "FAIL" : "ok: a prompt in parts is the prompt whole");
    kvf_prompt_free(pr);
    for (int k = 0; k < 2; k++) kvf_media_free(media[k]);
    kvf_model_free(m);
    return rc;
}
