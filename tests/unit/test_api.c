/* The public API end to end on a small real model (SmolLM2-135M, skipped
 * when absent): caller-made embeddings (kvf_session_prefill_embd,
 * kvf_media_from_embd), vocab-only models, the budget override
 * (kv_budget), and the statuses of the calls that fill buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kvfold.h"
/* Only to build the embedding rows a caller would have computed. */
#include "core/ops.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SMOL KVF_MODELS_DIR "/smollm2-135m-instruct-q4_1.gguf"
#define GPT2_VOCAB KVF_SHARED_DIR "/testdata/tokenizer/ggml-vocab-gpt-2.gguf"
#define TEXT "The quick brown fox jumps over the lazy dog, and the dog sleeps on."

static struct kvf_model *model;

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int setup(void **state) {
    (void)state;
    if (!exists(SMOL))
        return 0;
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 2;
    return kvf_model_load(SMOL, &mp, &model) == KVF_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    kvf_model_free(model);
    return 0;
}

static void need_model(void) {
    if (!model) {
        print_message("skipped: %s not present (scripts/models.sh)\n", SMOL);
        skip();
    }
}

static struct kvf_model_info info(void) {
    struct kvf_model_info in;
    kvf_model_get_info(model, &in);
    return in;
}

/* The ids of text (BOS as the model says); *n gets their count. */
static int32_t *tokens(const char *text, bool bos, int32_t *n) {
    int32_t need = 0;
    assert_int_equal(kvf_tokenize(model, text, strlen(text), NULL, 0, bos, false, &need), KVF_ERR_BUFFER);
    int32_t *ids = malloc(sizeof *ids * (size_t)need);
    assert_non_null(ids);
    assert_int_equal(kvf_tokenize(model, text, strlen(text), ids, need, bos, false, n), KVF_OK);
    assert_int_equal(*n, need);
    return ids;
}

/* The input embeddings of ids, as the model's embedding layer makes them. */
static float *embeddings(const int32_t *ids, int n) {
    const int E = model->hp.n_embd;
    float *e = malloc(sizeof *e * (size_t)n * E);
    assert_non_null(e);
    for (int t = 0; t < n; t++) {
        ops_get_row(&model->tok_embd, ids[t], e + (size_t)t * E);
        for (int i = 0; i < E; i++) e[(size_t)t * E + i] *= model->hp.embd_scale;
    }
    return e;
}

static struct kvf_session *session(const char *spec, double budget, int n_ctx) {
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 2;
    sp.kv_spec = spec;
    sp.kv_budget = budget;
    struct kvf_session *s = NULL;
    assert_int_equal(kvf_session_init(model, &sp, &s), KVF_OK);
    return s;
}

static void assert_close(const float *a, const float *b, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    if (worst > 1e-4 * fmax(scale, 1.0))
        fail_msg("logits differ by %g (largest %g)", worst, scale);
}

/* The token embeddings of a prompt, prefilled as embeddings, give the
 * logits of the tokens. */
static void test_prefill_embd_matches_tokens(void **state) {
    (void)state;
    need_model();
    const int V = info().n_vocab;
    int32_t n;
    int32_t *ids = tokens(TEXT, true, &n);
    float *embd = embeddings(ids, n);
    float *la = malloc(sizeof *la * (size_t)n * V), *lb = malloc(sizeof *lb * (size_t)n * V);
    assert_true(la && lb);
    struct kvf_session *a = session(NULL, 0, n + 1), *b = session(NULL, 0, n + 1);
    assert_int_equal(kvf_session_prefill(a, ids, n, la), KVF_OK);
    assert_int_equal(kvf_session_prefill_embd(b, embd, NULL, n, lb), KVF_OK);
    assert_close(la, lb, (size_t)n * V);
    assert_close(kvf_session_logits(a), kvf_session_logits(b), (size_t)V);
    /* tags NULL: text, positions 0.. */
    assert_int_equal(kvf_session_n_past(b), n);
    assert_int_equal(kvf_session_n_ctx(b), n + 1);
    struct kvf_session *d = session(NULL, 0, 0); /* <= 0: the training context, capped */
    assert_int_equal(kvf_session_n_ctx(d), info().n_ctx_train < 8192 ? info().n_ctx_train : 8192);
    kvf_session_free(d);
    const struct kvf_tag *t = kvf_session_tags(b);
    for (int i = 0; i < n; i++) {
        assert_int_equal(t[i].pos, i);
        assert_int_equal(t[i].modality, KVF_MOD_TEXT);
    }
    /* and bad arguments are refused */
    assert_int_equal(kvf_session_prefill_embd(b, NULL, NULL, 1, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_session_prefill_embd(b, embd, NULL, -1, NULL), KVF_ERR_INVALID_ARG);
    kvf_session_free(a);
    kvf_session_free(b);
    free(la), free(lb), free(embd), free(ids);
}

/* Caller-made media in a prompt is exactly kvf_session_prefill_embd of the
 * same rows with the prompt's tags. */
static void test_from_embd_media_equals_prefill_embd(void **state) {
    (void)state;
    need_model();
    const int V = info().n_vocab, R = 2, C = 3;
    int32_t n_words;
    int32_t *words = tokens("red green blue cyan magenta yellow", false, &n_words);
    assert_true(n_words >= R * C);
    float *embd = embeddings(words, R * C);
    struct kvf_media *md = NULL;
    assert_int_equal(kvf_media_from_embd(model, embd, R, C, KVF_MOD_IMAGE, &md), KVF_OK);
    assert_int_equal(kvf_media_n_tokens(md), R * C);
    assert_int_equal(kvf_media_modality(md), KVF_MOD_IMAGE);
    assert_false(kvf_media_is_synthetic(md));
    assert_true(kvf_media_encode_ms(md) == 0.0);
    struct kvf_prompt *pr = NULL;
    const struct kvf_media *const list[] = { md };
    assert_int_equal(kvf_prompt_init(model, "Colours: " KVF_MARKER_IMAGE " Name them.", list, 1, true, false, &pr),
                     KVF_OK);
    assert_false(kvf_prompt_is_synthetic(pr));
    const int n = kvf_prompt_n_tokens(pr);
    const struct kvf_tag *pt = kvf_prompt_tags(pr);

    struct kvf_session *a = session(NULL, 0, n), *b = session(NULL, 0, n);
    assert_int_equal(kvf_session_prefill_prompt(a, pr, NULL), KVF_OK);
    /* b: the prompt's text runs as tokens, its image as embeddings with its tags */
    for (int i = 0; i < n;) {
        int k = i;
        const bool text = kvf_prompt_token(pr, i) >= 0;
        while (k < n && (kvf_prompt_token(pr, k) >= 0) == text) k++;
        if (text) {
            int32_t *ids = malloc(sizeof *ids * (size_t)(k - i));
            for (int j = i; j < k; j++) ids[j - i] = kvf_prompt_token(pr, j);
            assert_int_equal(kvf_session_prefill(b, ids, k - i, NULL), KVF_OK);
            free(ids);
        } else {
            assert_int_equal(k - i, R * C);
            assert_int_equal(kvf_session_prefill_embd(b, embd, pt + i, k - i, NULL), KVF_OK);
        }
        i = k;
    }
    assert_close(kvf_session_logits(a), kvf_session_logits(b), (size_t)V);
    const struct kvf_tag *ta = kvf_session_tags(a), *tb = kvf_session_tags(b);
    for (int i = 0; i < n; i++) {
        assert_int_equal(ta[i].pos, tb[i].pos);
        assert_int_equal(ta[i].modality, tb[i].modality);
        assert_int_equal(ta[i].row, tb[i].row);
        assert_int_equal(ta[i].col, tb[i].col);
    }
    assert_string_equal(kvf_modality_str(ta[kvf_prompt_n_tokens(pr) - 1].modality), "text");
    kvf_session_free(a);
    kvf_session_free(b);
    kvf_prompt_free(pr);
    kvf_media_free(md);
    free(embd), free(words);
}

/* Tokenizer, chat template and hyper-parameters, no weights. */
static void test_vocab_only(void **state) {
    (void)state;
    need_model();
    struct kvf_model_params mp = kvf_model_default_params();
    mp.vocab_only = true;
    struct kvf_model *v = NULL;
    assert_int_equal(kvf_model_load(SMOL, &mp, &v), KVF_OK);
    struct kvf_model_info vi, fi = info();
    kvf_model_get_info(v, &vi);
    assert_string_equal(vi.arch, fi.arch);
    assert_string_equal(vi.tokenizer, fi.tokenizer);
    assert_string_equal(vi.chat_template_name, fi.chat_template_name);
    assert_int_equal(vi.n_vocab, fi.n_vocab);
    assert_int_equal(vi.n_layer, fi.n_layer);
    assert_int_equal(vi.n_embd, fi.n_embd);
    assert_int_equal(vi.bos, fi.bos);
    assert_true(vi.n_params == 0 && vi.weight_bytes == 0);
    /* the same ids as the full model */
    int32_t n, nv;
    int32_t *ids = tokens(TEXT, true, &n), vids[64];
    assert_int_equal(kvf_tokenize(v, TEXT, strlen(TEXT), vids, 64, true, false, &nv), KVF_OK);
    assert_int_equal(nv, n);
    assert_memory_equal(ids, vids, sizeof *ids * (size_t)n);
    /* nothing that needs weights */
    struct kvf_session *s = NULL;
    assert_int_equal(kvf_session_init(v, NULL, &s), KVF_ERR_UNSUPPORTED);
    assert_null(s);
    assert_non_null(strstr(kvf_last_error(), "vocab_only"));
    struct kvf_media *md = NULL;
    float row[1024] = { 0 };
    assert_true(vi.n_embd <= 1024);
    assert_int_equal(kvf_media_from_embd(v, row, 1, 1, KVF_MOD_IMAGE, &md), KVF_ERR_UNSUPPORTED);
    assert_int_equal(kvf_media_pseudo_image(v, "words", 1, 1, 0, 1, &md), KVF_ERR_UNSUPPORTED);
    assert_null(md);
    kvf_model_free(v);
    free(ids);
    /* any architecture: llama.cpp's GPT-2 vocabulary file (no tensors) */
    if (exists(GPT2_VOCAB)) {
        assert_int_not_equal(kvf_model_load(GPT2_VOCAB, NULL, &v), KVF_OK);
        assert_int_equal(kvf_model_load(GPT2_VOCAB, &mp, &v), KVF_OK);
        kvf_model_get_info(v, &vi);
        assert_string_equal(vi.arch, "gpt2");
        assert_int_equal(vi.n_vocab, 50257);
        assert_int_equal(kvf_tokenize(v, "Hello world", 11, vids, 64, false, false, &nv), KVF_OK);
        assert_int_equal(nv, 2);
        kvf_model_free(v);
    }
}

/* Calls that fill a buffer: KVF_ERR_BUFFER with the size needed. */
static void test_buffer_statuses(void **state) {
    (void)state;
    need_model();
    int32_t n = 0, ids[2];
    assert_int_equal(kvf_tokenize(model, TEXT, strlen(TEXT), ids, 2, false, false, &n), KVF_ERR_BUFFER);
    assert_true(n > 2);
    assert_int_equal(kvf_tokenize(model, TEXT, strlen(TEXT), NULL, 5, false, false, &n), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_tokenize(model, "", 0, ids, 2, false, false, &n), KVF_OK);
    assert_int_equal(n, 0);
    int32_t *all = tokens(" fox", false, &n);
    char buf[16];
    int32_t len = -1;
    assert_int_equal(kvf_token_to_piece(model, all[0], buf, 1, false, &len), KVF_ERR_BUFFER);
    assert_true(len > 1);
    assert_int_equal(kvf_token_to_piece(model, all[0], buf, sizeof buf, false, &len), KVF_OK);
    assert_true(len > 1 && buf[0] == ' ');
    assert_int_equal(kvf_token_to_piece(model, info().n_vocab, buf, sizeof buf, false, &len), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_token_to_piece(model, -1, buf, sizeof buf, false, &len), KVF_ERR_INVALID_ARG);
    assert_string_equal(kvf_status_str(KVF_ERR_BUFFER), "buffer too small");
    assert_true(kvf_token_is_eog(model, info().eos));
    assert_false(kvf_token_is_eog(model, all[0]));
    /* the model's own chat template, by detection */
    const struct kvf_chat_message msg = { "user", "Hi" };
    int32_t need = 0, got = 0;
    assert_int_equal(kvf_chat_apply(model, NULL, &msg, 1, true, NULL, 0, &need), KVF_ERR_BUFFER);
    char *chat = malloc((size_t)need);
    assert_int_equal(kvf_chat_apply(model, NULL, &msg, 1, true, chat, need, &got), KVF_OK);
    assert_int_equal(got, need - 1);
    assert_non_null(strstr(chat, "<|im_start|>user\nHi"));
    free(chat);
    free(all);
    assert_true(kvf_peak_rss_bytes() > 0);
}

/* kv_budget replaces the preset's budget as if the spec said budget=X. */
static void test_kv_budget(void **state) {
    (void)state;
    assert_int_equal(kvf_kv_policy_check("snapkv:budget=0.3"), KVF_OK);
    assert_int_equal(kvf_kv_policy_check_budget("snapkv", 0.3), KVF_OK);
    assert_int_equal(kvf_kv_policy_check_budget("snapkv:budget=0.9+decode=h2o", 0.3), KVF_OK);
    assert_int_equal(kvf_kv_policy_check_budget("blockwise:block=32", 64), KVF_OK);
    assert_int_equal(kvf_kv_policy_check_budget("snapkv", 0), KVF_OK);
    assert_int_equal(kvf_kv_policy_check_budget("snapkv:budget=x", 0.3), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kv_policy_check_budget("snapkv", -0.1), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kv_policy_check_budget("snapkv", NAN), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kv_policy_check_budget("snapkv", 2.5), KVF_ERR_INVALID_ARG); /* neither share nor count */
    assert_int_equal(kvf_kv_policy_check_budget("blockwise", 0.5), KVF_ERR_INVALID_ARG); /* entries only */
    assert_int_equal(kvf_kv_policy_check_budget("lightkv", 0.5), KVF_ERR_INVALID_ARG); /* no budget key */
    assert_non_null(strstr(kvf_last_error(), "takes no budget"));
    assert_int_equal(kvf_kv_policy_check_budget(NULL, 0.5), KVF_ERR_INVALID_ARG);  /* full */
    need_model();
    int32_t n;
    int32_t *ids = tokens(TEXT " " TEXT, true, &n);
    /* (spec, kv_budget) against the spec that says the budget */
    const struct { const char *spec; double budget; const char *same; } cases[] = {
        { "snapkv", 0.25, "snapkv:budget=0.25" },
        { "h2o:budget=0.9", 0.4, "h2o:budget=0.4" },
        { "lookm:merge=avg+decode=h2o", 12, "lookm:merge=avg,budget=12+decode=h2o" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct kvf_session *a = session(cases[c].spec, cases[c].budget, n + 4), *b = session(cases[c].same, 0, n + 4);
        for (int k = 0; k < 2; k++) {
            struct kvf_session *s = k ? b : a;
            assert_int_equal(kvf_session_prefill(s, ids, n, NULL), KVF_OK);
            assert_int_equal(kvf_session_compress(s), KVF_OK);
            /* right after compression: what is kept, within what a full cache holds */
            assert_true(kvf_session_kv_bytes(s) <= kvf_session_kv_full_bytes(s));
            assert_int_equal(kvf_session_decode(s, ids[1]), KVF_OK);
        }
        assert_int_equal(kvf_session_kv_bytes(a), kvf_session_kv_bytes(b));
        /* a full cache of n + 1 positions in every layer and head, against what is kept */
        const struct kvf_model_info in = info();
        const size_t heads = (size_t)(n + 1) * in.n_layer * in.n_head_kv, full = kvf_session_kv_full_bytes(a);
        /* f16 (the default type) key and value, and the tag */
        const size_t entry = 2 * (size_t)in.head_dim * sizeof(uint16_t) + sizeof(struct kvf_tag);
        assert_int_equal(full % heads, 0);
        assert_true(full / heads == entry || full / heads == entry + 3 * sizeof(float)); /* + attention sums */
        int na, nb;
        const struct kvf_tag *ta = kvf_session_kv_tags(a, 0, 0, &na), *tb = kvf_session_kv_tags(b, 0, 0, &nb);
        assert_int_equal(na, nb);
        assert_true(na < n); /* evicted */
        for (int i = 0; i < na; i++) assert_int_equal(ta[i].pos, tb[i].pos);
        assert_memory_equal(kvf_session_logits(a), kvf_session_logits(b), sizeof(float) * (size_t)info().n_vocab);
        kvf_session_free(a);
        kvf_session_free(b);
    }
    free(ids);
}

/* A position's bytes by type, from llama.cpp's block sizes, against what a
 * full cache of those types holds for n positions. */
static void test_kv_position_bytes(void **state) {
    (void)state;
    need_model();
    const struct kvf_model_info in = info();
    const size_t d = (size_t)in.head_dim, heads = (size_t)in.n_layer * in.n_head_kv;
    const size_t row[] = {[KVF_KV_F32] = 4 * d, [KVF_KV_F16] = 2 * d, [KVF_KV_Q8_0] = d / 32 * 34,
                          [KVF_KV_Q4_0] = d / 32 * 18, [KVF_KV_Q4_0H] = d / 32 * 18, [KVF_KV_Q4_0S] = d / 32 * 18};
    const enum kvf_kv_type pairs[][2] = {{KVF_KV_F32, KVF_KV_F32}, {KVF_KV_F16, KVF_KV_F16},
                                         {KVF_KV_Q8_0, KVF_KV_Q4_0H}, {KVF_KV_Q4_0, KVF_KV_Q4_0},
                                         {KVF_KV_Q4_0S, KVF_KV_Q4_0H}};
    int32_t n;
    int32_t *ids = tokens(TEXT, true, &n);
    for (size_t c = 0; c < sizeof pairs / sizeof *pairs; c++) {
        size_t pos = 0;
        size_t per_cache = 7;
        assert_int_equal(kvf_kv_position_bytes(model, pairs[c][0], pairs[c][1], &pos, &per_cache), KVF_OK);
        assert_int_equal(pos, heads * (row[pairs[c][0]] + row[pairs[c][1]] + sizeof(struct kvf_tag)));
        /* smoothed keys: a shift and a scale a channel in every head */
        assert_int_equal(per_cache, pairs[c][0] == KVF_KV_Q4_0S ? heads * 2 * d * sizeof(float) : 0);
        struct kvf_session_params sp = kvf_session_default_params();
        sp.n_ctx = n + 1, sp.n_threads = 2, sp.type_k = pairs[c][0], sp.type_v = pairs[c][1];
        struct kvf_session *s = NULL;
        assert_int_equal(kvf_session_init(model, &sp, &s), KVF_OK);
        assert_int_equal(kvf_session_prefill(s, ids, n, NULL), KVF_OK);
        assert_int_equal(kvf_session_compress(s), KVF_OK);
        assert_int_equal(kvf_session_kv_full_bytes(s), (size_t)n * pos + per_cache);
        assert_int_equal(kvf_session_kv_bytes(s), (size_t)n * pos + per_cache);
        kvf_session_free(s);
    }
    size_t pos = 7;
    assert_int_equal(kvf_kv_position_bytes(model, (enum kvf_kv_type)99, KVF_KV_F16, &pos, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kv_position_bytes(NULL, KVF_KV_F16, KVF_KV_F16, &pos, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kv_position_bytes(model, KVF_KV_Q4_0H, KVF_KV_Q4_0S, &pos, NULL), KVF_ERR_UNSUPPORTED);
    assert_int_equal(pos, 7);
    free(ids);
}

/* KVzip's reconstruction holds more than the context while it compresses
 * (each pass is its instruction and a chunk of the context), never more
 * than kvf_kv_compress_positions says; a rule without a pass holds nothing
 * more. */
static void test_kv_compress_positions(void **state) {
    (void)state;
    need_model();
    int32_t n;
    int32_t *ids = tokens(TEXT, true, &n);
    int32_t extra = -1, whole = -1, small = -1;
    assert_int_equal(kvf_kv_compress_positions(model, "snapkv:budget=0.5", n, &extra), KVF_OK);
    assert_int_equal(extra, 0);
    assert_int_equal(kvf_kv_compress_positions(model, NULL, n, &extra), KVF_OK);
    assert_int_equal(extra, 0);
    assert_int_equal(kvf_kv_compress_positions(model, "kvzip", n, &whole), KVF_OK);
    assert_int_equal(kvf_kv_compress_positions(model, "kvzip:chunk=8", n, &small), KVF_OK);
    const char *specs[] = {"kvzip:budget=0.5", "kvzip:budget=0.5,chunk=8"};
    for (size_t c = 0; c < sizeof specs / sizeof *specs; c++) {
        assert_int_equal(kvf_kv_compress_positions(model, specs[c], n, &extra), KVF_OK);
        struct kvf_session_params sp = kvf_session_default_params();
        sp.n_ctx = n + 1, sp.n_threads = 2, sp.kv_spec = specs[c];
        struct kvf_session *s = NULL;
        assert_int_equal(kvf_session_init(model, &sp, &s), KVF_OK);
        assert_int_equal(kvf_session_prefill(s, ids, n, NULL), KVF_OK);
        assert_int_equal(kvf_session_compress(s), KVF_OK);
        const int peak = kvf_session_kv_peak_entries(s);
        assert_true(peak > n + (c ? 8 : n - 1) && peak <= n + extra);
        kvf_session_free(s);
    }
    assert_true(n > 8 && small > 8 && small < whole);
    extra = 7;
    assert_int_equal(kvf_kv_compress_positions(model, "kvzip:budget=2x", n, &extra), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kv_compress_positions(NULL, "kvzip", n, &extra), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kv_compress_positions(model, "kvzip", -1, &extra), KVF_ERR_INVALID_ARG);
    free(ids);
}

/* The build is named in every results file: the version, then the commit. */
/* kvf_kvzap_calibrate: a fit written where asked and read back by the
 * kvzap rule; its parameters, corpus and stop refused or honoured; the
 * model's own scorer path. */
static bool stop_after_two(int done, int total, void *user) {
    (void)total;
    *(int *)user = done;
    return done < 2;
}

static void test_kvzap_calibrate(void **state) {
    (void)state;
    need_model();
    const char *zap = kvf_kvzap_default_path(model);
    assert_non_null(strstr(zap, "smollm2-135m-instruct-q4_1.kvzap"));
    char path[] = "/tmp/test_api_kvzap_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *texts[2] = {TEXT " " TEXT " " TEXT " " TEXT " " TEXT " " TEXT, "too short"};
    struct kvf_kvzap_params p = kvf_kvzap_default_params();
    assert_true(p.samples == 256 && p.test == 8 && p.span == 512 && p.per_span == 256 && p.alpha == 1.0);
    p.samples = 4, p.test = 1, p.span = 16, p.per_span = 8, p.n_threads = 2;
    int calls = 0;
    p.progress = stop_after_two, p.user = &calls;
    struct kvf_kvzap_report rep;
    assert_int_equal(kvf_kvzap_calibrate(model, texts, 2, &p, path, &rep), KVF_OK);
    assert_true(calls == 2 && rep.samples == 2 && rep.test == 0 && rep.rows == 16 && rep.n_layer == 30);
    assert_true(isnan(rep.r2[0]) && isnan(rep.spearman[29]));
    p.progress = NULL;
    assert_int_equal(kvf_kvzap_calibrate(model, texts, 2, &p, path, &rep), KVF_OK);
    assert_true(rep.samples == 4 && rep.test == 1 && !isnan(rep.spearman[0]));
    char spec[128];
    snprintf(spec, sizeof spec, "kvzap:budget=0.5,scorer=%s", path);
    struct kvf_session_params sp = kvf_session_default_params();
    sp.kv_spec = spec, sp.n_threads = 2;
    struct kvf_session *s = NULL;
    int32_t n;
    int32_t *ids = tokens(TEXT, true, &n);
    assert_int_equal(kvf_session_init(model, &sp, &s), KVF_OK);
    assert_int_equal(kvf_session_prefill(s, ids, n, NULL), KVF_OK);
    assert_int_equal(kvf_session_compress(s), KVF_OK);
    int kept;
    kvf_session_kv_tags(s, 0, 0, &kept);
    assert_true(kept > 0 && kept < n);
    kvf_session_free(s);
    free(ids);
    /* refused: parameters out of range, a corpus without a span, no model or path */
    struct kvf_kvzap_params bad = p;
    bad.span = 8;
    assert_int_equal(kvf_kvzap_calibrate(model, texts, 2, &bad, path, NULL), KVF_ERR_INVALID_ARG);
    bad = p, bad.per_span = 17;
    assert_int_equal(kvf_kvzap_calibrate(model, texts, 2, &bad, path, NULL), KVF_ERR_INVALID_ARG);
    bad = p, bad.alpha = 0;
    assert_int_equal(kvf_kvzap_calibrate(model, texts, 2, &bad, path, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kvzap_calibrate(model, texts + 1, 1, &p, path, NULL), KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "no text of the corpus"));
    assert_int_equal(kvf_kvzap_calibrate(NULL, texts, 2, &p, path, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kvzap_calibrate(model, texts, 2, &p, NULL, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kvzap_calibrate(model, texts, 0, &p, path, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_kvzap_calibrate(model, texts, 2, &p, "/nonexistent/dir/x.kvzap", NULL), KVF_ERR_IO);
    unlink(path);
}

static void test_build_info(void **state) {
    (void)state;
    const char *b = kvf_build_info();
    assert_non_null(b);
    assert_int_equal(strncmp(b, "kvfold " KVF_VERSION_STRING " (git ", strlen("kvfold " KVF_VERSION_STRING " (git ")),
                     0);
    assert_int_equal(b[strlen(b) - 1], ')');
    assert_ptr_equal(b, kvf_build_info()); /* static */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_info),
        cmocka_unit_test(test_prefill_embd_matches_tokens),
        cmocka_unit_test(test_from_embd_media_equals_prefill_embd),
        cmocka_unit_test(test_vocab_only),
        cmocka_unit_test(test_buffer_statuses),
        cmocka_unit_test(test_kv_budget),
        cmocka_unit_test(test_kv_position_bytes),
        cmocka_unit_test(test_kv_compress_positions),
        cmocka_unit_test(test_kvzap_calibrate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
