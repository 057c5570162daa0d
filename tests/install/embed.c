/* A program embedding an installed kvfold through its public header only,
 * built by tests/install/install_test.sh against the shared and the static
 * library (pkg-config). Usage: embed [MODEL...]; each model that exists is
 * loaded, prompted and decoded greedily for a few tokens; a missing one is
 * reported as skipped. Exits 1 on the first failed check. */
#include <kvfold.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int n_checks;

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        n_checks++;                                                                         \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "embed: %s:%d: check failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, kvf_last_error());                                     \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static void run_model(const char *path) {
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 2;
    struct kvf_model *model = NULL;
    CHECK(kvf_model_load(path, &mp, &model) == KVF_OK && model != NULL);

    struct kvf_model_info info;
    kvf_model_get_info(model, &info);
    CHECK(info.arch != NULL && info.arch[0] != '\0');
    CHECK(info.n_layer > 0 && info.n_embd > 0 && info.n_vocab > 0 && info.n_params > 0);
    printf("embed: %s: %s, %d layers, %d vocab, %lld weights\n", path, info.arch, info.n_layer,
           info.n_vocab, (long long)info.n_params);

    const char *text = "The capital of France is";
    int32_t tokens[64];
    int32_t n = 0;
    CHECK(kvf_tokenize(model, text, strlen(text), tokens, 64, true, false, &n) == KVF_OK);
    CHECK(n > 1 && n <= 64);
    for (int i = 0; i < n; i++)
        CHECK(tokens[i] >= 0 && tokens[i] < info.n_vocab);

    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = 128;
    struct kvf_session *session = NULL;
    CHECK(kvf_session_init(model, &sp, &session) == KVF_OK && session != NULL);
    CHECK(kvf_session_prefill(session, tokens, n, NULL) == KVF_OK);
    CHECK(kvf_session_n_past(session) == n);

    struct kvf_sampler_params smp = kvf_sampler_default_params();
    smp.temp = 0; /* greedy */
    struct kvf_sampler *sampler = NULL;
    CHECK(kvf_sampler_init(&smp, &sampler) == KVF_OK && sampler != NULL);
    printf("embed: %s", text);
    for (int step = 0; step < 4; step++) {
        const float *logits = kvf_session_logits(session);
        CHECK(logits != NULL);
        for (int i = 0; i < info.n_vocab; i++)
            CHECK(isfinite(logits[i]));
        int32_t tok = -1;
        CHECK(kvf_sampler_sample(sampler, logits, info.n_vocab, &tok) == KVF_OK);
        CHECK(tok >= 0 && tok < info.n_vocab);
        char piece[128];
        int32_t len = 0;
        CHECK(kvf_token_to_piece(model, tok, piece, sizeof piece, false, &len) == KVF_OK);
        for (int32_t i = 0; i < len && i < (int32_t)sizeof piece; i++) {
            const unsigned char c = (unsigned char)piece[i];
            if (c >= 0x20 && c < 0x7f)
                putchar(c);
            else
                printf("\\x%02x", c);
        }
        CHECK(kvf_session_decode(session, tok) == KVF_OK);
    }
    printf("\n");
    CHECK(kvf_session_n_past(session) == n + 4);
    CHECK(kvf_session_kv_bytes(session) > 0);

    kvf_sampler_free(sampler);
    kvf_session_free(session);
    kvf_model_free(model);
}

int main(int argc, char **argv) {
    CHECK(strcmp(kvf_status_str(KVF_OK), "ok") == 0);
    CHECK(strcmp(kvf_status_str(KVF_ERR_IO), "i/o error") == 0);
    const char *simd = kvf_simd_level();
    CHECK(simd != NULL && (strcmp(simd, "scalar") == 0 || strcmp(simd, "avx2") == 0 ||
                           strcmp(simd, "avx512") == 0));
    CHECK(kvf_kv_policy_count() > 0);
    CHECK(kvf_kv_policy_check("snapkv:budget=0.2") == KVF_OK);
    CHECK(kvf_kv_policy_check("no-such-policy") != KVF_OK && kvf_last_error()[0] != '\0');

    /* A failing load reports an error and returns no model. */
    struct kvf_model *model = NULL;
    CHECK(kvf_model_load("/nonexistent/kvfold-embed.gguf", NULL, &model) == KVF_ERR_IO);
    CHECK(model == NULL && strstr(kvf_last_error(), "kvfold-embed.gguf") != NULL);
    printf("embed: kvfold %s, simd %s\n", KVF_VERSION_STRING, simd);

    int n_run = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            printf("embed: skipped %s (not present)\n", argv[i]);
            continue;
        }
        run_model(argv[i]);
        n_run++;
    }
    printf("embed: ok (%d checks, %d model(s) run)\n", n_checks, n_run);
    return 0;
}
