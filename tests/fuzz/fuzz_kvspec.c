/* A KV cache policy: the input is a --kv spec, optionally followed by '\n'
 * and a budget (read by strtod, as kv_budget; absent: 0). The spec is
 * checked (kvf_kv_policy_check_budget); an accepted one runs on the tiny
 * Gemma 3 fixture (6 layers, so that the reduce stages' default layers fit;
 * a sliding window): a prompt with a pseudo-image is prefilled, forked,
 * compressed and decoded. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#define N_CTX 64

/* Compression, then a few greedy steps: a failed step ends the run (the
 * session may need a reset after one). */
static void compress_decode(struct kvf_session *s, const struct kvf_model_info *info) {
    if (kvf_session_compress(s) != KVF_OK) return;
    fuzz_read_cache(s, info);
    for (int i = 0; i < 4 && kvf_session_n_past(s) < N_CTX; i++)
        if (kvf_session_decode(s, fuzz_argmax(kvf_session_logits(s), info->n_vocab)) != KVF_OK) return;
    fuzz_read_cache(s, info);
}

static void run_session(const char *spec, double budget) {
    static const struct kvf_model *m;
    static struct kvf_prompt *prompt;
    static struct kvf_model_info info;
    static struct kvf_media *pseudo;
    if (!m) {
        m = fuzz_fixed_model("gemma3-f32.gguf", NULL, false);
        kvf_model_get_info(m, &info);
        if (kvf_media_pseudo_image(m, "a red square on grey", 3, 4, 0.1f, 7, &pseudo) != KVF_OK ||
            kvf_prompt_init(m, "Look at <image> and say what the colour is.", (const struct kvf_media *const *)&pseudo,
                            1, true, false, &prompt) != KVF_OK)
            abort();
    }
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = N_CTX, sp.n_batch = 8, sp.n_threads = 1, sp.kv_spec = spec, sp.kv_budget = budget, sp.kv_gather = 4;
    struct kvf_session *s = NULL;
    if (kvf_session_init(m, &sp, &s) == KVF_OK && kvf_session_prefill_prompt(s, prompt, NULL) == KVF_OK) {
        struct kvf_session *f = NULL;
        if (kvf_session_fork(s, spec, budget, &f) == KVF_OK) compress_decode(f, &info);
        kvf_session_free(f);
        compress_decode(s, &info);
    }
    kvf_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *nl = strchr(text, '\n');
    double budget = 0;
    if (nl) *nl = '\0', budget = strtod(nl + 1, NULL);
    if (kvf_kv_policy_check_budget(text, budget) == KVF_OK) run_session(text, budget);
    free(text);
    return 0;
}
