/* Tokenizer: llama.cpp's reference vectors (SPM and GPT-2 BPE), real models
 * against ids from Hugging Face `tokenizers` (tests/ref/tokenizer_ref.py),
 * round trips, special-token parsing, tokenizer.json loading, hostile
 * metadata, and speed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "io/gguf.h"
#include <cjson/cJSON.h>
#include "tok/tok_impl.h" /* tok_find, to derive merges */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define VOCAB_DIR KVF_SHARED_DIR "/testdata/tokenizer"

/* ------------------------------------------------------------- helpers -- */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void model_path(char *out, size_t n, const char *file) {
    snprintf(out, n, "%s/%s", KVF_MODELS_DIR, file);
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Opens a GGUF and loads its tokenizer; false (after a skip message) when
 * the file is absent. */
static bool load(const char *path, struct gguf_file **g, struct tokenizer **t) {
    if (!exists(path)) {
        print_message("skipped: %s not present\n", path);
        return false;
    }
    assert_int_equal(gguf_open(path, g), KVF_OK);
    enum kvf_status st = tok_load_gguf(*g, t);
    if (st != KVF_OK) {
        print_message("tok_load_gguf(%s): %s\n", path, kvf_last_error());
    }
    assert_int_equal(st, KVF_OK);
    return true;
}

static int32_t encode(const struct tokenizer *t, const char *s, size_t len, int32_t **ids,
                      bool add_bos, bool parse_special) {
    int32_t n = tok_encode(t, s, len, NULL, 0, add_bos, parse_special);
    assert_true(n <= 0);
    n = -n;
    *ids = malloc(sizeof(int32_t) * (size_t)(n + 1));
    assert_non_null(*ids);
    assert_int_equal(tok_encode(t, s, len, *ids, n, add_bos, parse_special), n);
    return n;
}

/* Concatenated pieces of ids; caller frees. */
static char *decode_ex(const struct tokenizer *t, const int32_t *ids, int32_t n, size_t *len,
                       bool render_special) {
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (int32_t i = 0; i < n; i++) {
        int32_t k = tok_piece(t, ids[i], out + used, (int32_t)(cap - used), render_special);
        if (k < 0) {
            cap = (cap + (size_t)-k) * 2;
            out = realloc(out, cap);
            assert_non_null(out);
            k = tok_piece(t, ids[i], out + used, (int32_t)(cap - used), render_special);
        }
        assert_true(k >= 0);
        used += (size_t)k;
    }
    *len = used;
    return out;
}

static char *decode(const struct tokenizer *t, const int32_t *ids, int32_t n, size_t *len) {
    return decode_ex(t, ids, n, len, false);
}

static void print_ids(const char *what, const int32_t *ids, int32_t n) {
    print_message("%s:", what);
    for (int32_t i = 0; i < n; i++) {
        print_message(" %d", ids[i]);
    }
    print_message("\n");
}

/* ------------------------------------------- llama.cpp vocab test files -- */

/* Every case of X.gguf.inp against the ids of X.gguf.out; also the round
 * trip decode(encode(s)) == prefix + s for each case. */
static void run_cases(const struct tokenizer *t, const char *name, const char *prefix) {
    char ipath[512], opath[512];
    snprintf(ipath, sizeof ipath, "%s/%s.inp", VOCAB_DIR, name);
    snprintf(opath, sizeof opath, "%s/%s.out", VOCAB_DIR, name);
    size_t ilen, olen;
    char *inp = read_all(ipath, &ilen), *outp = read_all(opath, &olen);
    assert_non_null(inp);
    assert_non_null(outp);

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t seplen = sizeof sep - 1;
    char *ic = inp, *oc = outp;
    int n_cases = 0, n_ids = 0;
    while (ic < inp + ilen) {
        char *end = memmem(ic, (size_t)(inp + ilen - ic), sep, seplen);
        size_t clen = end ? (size_t)(end - ic) : (size_t)(inp + ilen - ic);
        char *oend = strchr(oc, '\n');
        assert_non_null(oend);
        *oend = '\0';
        int32_t want[1024];
        int nw = 0;
        for (char *p = oc; *p;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p) {
                break;
            }
            assert_true(nw < 1024);
            want[nw++] = (int32_t)v;
            p = q;
        }
        int32_t *ids;
        int32_t n = encode(t, ic, clen, &ids, false, false);
        bool same = n == nw && memcmp(ids, want, sizeof(int32_t) * (size_t)n) == 0;
        if (!same) {
            print_message("%s case %d '%.*s'\n", name, n_cases, (int)clen, ic);
            print_ids("  want", want, nw);
            print_ids("  got ", ids, n);
        }
        assert_true(same);

        size_t dlen;
        char *dec = decode(t, ids, n, &dlen);
        size_t plen = clen > 0 ? strlen(prefix) : 0;
        assert_int_equal(dlen, plen + clen);
        assert_memory_equal(dec, prefix, plen);
        assert_memory_equal(dec + plen, ic, clen);
        free(dec);
        free(ids);

        n_cases++;
        n_ids += n;
        *oend = '\n';
        oc = oend + 1;
        if (!end) {
            break;
        }
        ic = end + seplen;
    }
    assert_true(oc >= outp + olen); /* as many .out lines as cases */
    print_message("%s (%s): %d cases (%d ids) match llama.cpp\n", name, tok_kind(t), n_cases,
                  n_ids);
    assert_true(n_cases >= 40);
    free(inp);
    free(outp);
}

/* Loads VOCAB_DIR/name, or skips the test when the vectors are absent. */
static void load_vocab(const char *name, struct gguf_file **g, struct tokenizer **t) {
    char path[512], ipath[520];
    snprintf(path, sizeof path, "%s/%s", VOCAB_DIR, name);
    snprintf(ipath, sizeof ipath, "%s.inp", path);
    if (!exists(ipath) || !load(path, g, t)) {
        print_message("skipped: tokenizer test vectors not present in %s\n", VOCAB_DIR);
        skip();
    }
}

static void run_vocab_file(const char *name, const char *prefix, const char *kind) {
    struct gguf_file *g;
    struct tokenizer *t;
    load_vocab(name, &g, &t);
    assert_string_equal(tok_kind(t), kind);
    run_cases(t, name, prefix);
    tok_free(t);
    gguf_close(g);
}

static void test_vocab_llama_spm(void **state) {
    (void)state;
    run_vocab_file("ggml-vocab-llama-spm.gguf", " ", "spm");
}

static void test_vocab_gpt2(void **state) {
    (void)state;
    run_vocab_file("ggml-vocab-gpt-2.gguf", "", "bpe:gpt-2");
}

/* ---------------------------------------------------------- real models -- */

/* Expected ids printed by tests/ref/tokenizer_ref.py (Hugging Face
 * `tokenizers` 0.23.3 rebuilt from each GGUF's vocabulary, merges or scores,
 * and token types; see the script for how). Encoded without BOS; the cases
 * with chat markers are encoded with parse_special. */
struct ref_case { const char *text; int32_t ids[32]; int n; };

static const struct ref_case smollm_ref[] = {
    { "Hello world! This is a test.", { 19556, 905, 17, 669, 314, 253, 1028, 30 }, 8 },
    { "int main(void) {\n    return 0;\n}\n",
      { 591, 1085, 24, 32439, 25, 1662, 472, 1003, 216, 32, 43, 198, 109, 198 },
      14 },
    { "12345 and 3.14159", { 33, 34, 35, 36, 37, 284, 216, 35, 30, 33, 36, 33, 37, 41 }, 14 },
    { "h\303\251llo \344\270\226\347\225\214 \360\237\231\202",
      { 88, 2756, 31394, 216, 7906, 240, 178, 239, 230, 47526 },
      10 },
    { "a  b   c    d", { 81, 216, 278, 256, 265, 333, 287 }, 7 },
    { "line1\nline2\n\n\nline3\r\n", { 1311, 33, 198, 1311, 34, 1116, 198, 1311, 35, 2738 }, 10 },
    { "I'm sure you'll LOVE it, won't you? 'S 'T",
      { 57, 5248, 2090, 346, 3060, 16887, 18525, 357, 28, 3763, 982, 346, 47, 637, 67, 637, 68 },
      17 },
    { "   leading and trailing   ", { 256, 2899, 284, 35079, 333 }, 5 },
    { "The quick brown fox: \303\234n\303\257c\303\266d\303\251 \342\200\224 \342\200\234quotes\342\200\235 "
      "\342\200\246",
      { 504, 2365, 6354, 16438, 42, 5549, 246, 94, 25972, 83, 7466, 84, 2756, 1841, 619, 385, 2346, 573, 5548 },
      19 },
    { "\ttabs\tand\302\240nbsp", { 197, 100, 7366, 197, 397, 15442, 94, 32093 }, 8 },
    { "<|im_start|>user\nHi<|im_end|>\n", { 1, 4093, 198, 26843, 2, 198 }, 6 },
};
static const struct ref_case gemma_ref[] = {
    { "Hello world! This is a test.", { 9259, 1902, 236888, 1174, 563, 496, 1594, 236761 }, 8 },
    { "int main(void) {\n    return 0;\n}\n",
      { 720, 1689, 236769, 4117, 236768, 642, 107, 140, 2060, 236743, 236771, 236793, 107, 236783, 107 },
      15 },
    { "12345 and 3.14159",
      { 236770, 236778, 236800, 236812, 236810, 532, 236743, 236800, 236761, 236770, 236812, 236770, 236810, 236819 },
      14 },
    { "h\303\251llo \344\270\226\347\225\214 \360\237\231\202", { 236754, 7869, 844, 84679, 57235 }, 5 },
    { "a  b   c    d", { 236746, 138, 236763, 139, 236755, 140, 236753 }, 7 },
    { "line1\nline2\n\n\nline3\r\n", { 1257, 236770, 107, 1257, 236778, 109, 1257, 236800, 251, 107 }, 10 },
    { "I'm sure you'll LOVE it, won't you? 'S 'T",
      { 236777, 236789, 236757, 2889, 611, 236789, 859, 55398, 625, 236764, 2810, 236789, 236745, 611, 236881, 756,
        236773, 756, 236774 },
      19 },
    { "   leading and trailing   ", { 139, 26016, 532, 45330, 139 }, 5 },
    { "The quick brown fox: \303\234n\303\257c\303\266d\303\251 \342\200\224 \342\200\234quotes\342\200\235 "
      "\342\200\246",
      { 818, 3823, 8864, 37423, 236787, 15356, 236749, 238527, 236755, 55515, 236859, 2192, 999, 52231, 236919, 7881 },
      16 },
    { "\ttabs\tand\302\240nbsp", { 255968, 39218, 255968, 624, 432, 398, 11539 }, 7 },
    { "<start_of_turn>user\nHi<end_of_turn>\n", { 105, 2364, 107, 10979, 106, 107 }, 6 },
};

static void check_refs(const struct tokenizer *t, const struct ref_case *refs, size_t n_refs,
                       const char *name) {
    for (size_t i = 0; i < n_refs; i++) {
        const struct ref_case *r = &refs[i];
        bool special = strstr(r->text, "<|im_") || strstr(r->text, "_of_turn>");
        int32_t *ids;
        int32_t n = encode(t, r->text, strlen(r->text), &ids, false, special);
        bool same = n == r->n && memcmp(ids, r->ids, sizeof(int32_t) * (size_t)n) == 0;
        if (!same) {
            print_message("%s: '%s'\n", name, r->text);
            print_ids("  want", r->ids, r->n);
            print_ids("  got ", ids, n);
        }
        assert_true(same);
        /* Round trip; neither model adds a space prefix. */
        size_t dlen;
        char *dec = decode_ex(t, ids, n, &dlen, special);
        assert_int_equal(dlen, strlen(r->text));
        assert_memory_equal(dec, r->text, dlen);
        free(dec);
        free(ids);
    }
    print_message("%s: %zu strings match Hugging Face tokenizers\n", name, n_refs);
}

static void test_smollm2(void **state) {
    (void)state;
    char path[1024];
    model_path(path, sizeof path, "smollm2-135m-instruct-q4_1.gguf");
    struct gguf_file *g;
    struct tokenizer *t;
    if (!load(path, &g, &t)) {
        skip();
    }
    assert_string_equal(tok_kind(t), "bpe:smollm");
    assert_int_equal(tok_n_vocab(t), 49152);
    assert_int_equal(tok_bos(t), 1);
    assert_int_equal(tok_eos(t), 2);
    assert_true(tok_is_eog(t, 2));  /* <|im_end|> */
    assert_true(tok_is_eog(t, 0));  /* <|endoftext|> */
    assert_false(tok_is_eog(t, 1));
    assert_false(tok_is_eog(t, 198));
    assert_string_equal(tok_text(t, 1), "<|im_start|>");
    assert_null(tok_text(t, 49152));
    assert_non_null(tok_chat_template(t));
    assert_non_null(strstr(tok_chat_template(t), "<|im_start|>"));
    check_refs(t, smollm_ref, sizeof smollm_ref / sizeof smollm_ref[0], "smollm2");

    /* parse_special: the marker is one id; without it, plain text. */
    int32_t ids[64];
    assert_int_equal(tok_encode(t, "<|im_start|>user", 16, ids, 64, false, true), 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 4093);
    int32_t n = tok_encode(t, "<|im_start|>user", 16, ids, 64, false, false);
    assert_true(n > 2);
    for (int32_t i = 0; i < n; i++) {
        assert_true(ids[i] != 1);
    }
    size_t dlen;
    char *dec = decode(t, ids, n, &dlen);
    assert_int_equal(dlen, 16);
    assert_memory_equal(dec, "<|im_start|>user", 16);
    free(dec);
    /* Control tokens print only when asked to. */
    char buf[32];
    assert_int_equal(tok_piece(t, 1, buf, sizeof buf, false), 0);
    assert_int_equal(tok_piece(t, 1, buf, sizeof buf, true), 12);
    assert_memory_equal(buf, "<|im_start|>", 12);
    /* add_bos_token is false for SmolLM2: a BOS request adds nothing. */
    assert_int_equal(tok_encode(t, "Hi", 2, ids, 64, true, false), 1);
    assert_int_equal(ids[0], 26843);
    tok_free(t);
    gguf_close(g);
}

static void test_gemma3(void **state) {
    (void)state;
    char path[1024];
    model_path(path, sizeof path, "gemma3-270m-q4_k_m.gguf");
    struct gguf_file *g;
    struct tokenizer *t;
    if (!load(path, &g, &t)) {
        skip();
    }
    assert_string_equal(tok_kind(t), "spm");
    assert_int_equal(tok_n_vocab(t), 262144);
    assert_int_equal(tok_bos(t), 2);
    assert_int_equal(tok_eos(t), 1);
    assert_true(tok_is_eog(t, 1));
    assert_true(tok_is_eog(t, 106)); /* <end_of_turn> */
    assert_false(tok_is_eog(t, 105));
    check_refs(t, gemma_ref, sizeof gemma_ref / sizeof gemma_ref[0], "gemma3");
    /* add_space_prefix is false: "Hello" is not "▁Hello"; BOS comes first. */
    int32_t ids[8];
    assert_int_equal(tok_encode(t, "Hello", 5, ids, 8, true, false), 2);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 9259);
    tok_free(t);
    gguf_close(g);
}

/* ------------------------------------------------------ tokenizer.json -- */

static void write_json(const char *dir, const char *name, cJSON *j) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = cJSON_PrintUnformatted(j);
    assert_non_null(text);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
    free(text);
    cJSON_Delete(j);
}

static void make_dir(const char *dir) {
    mkdir(dir, 0755);
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    remove(path);
}

static cJSON *added_token(int id, const char *content, bool special) {
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddBoolToObject(a, "special", special);
    return a;
}

static cJSON *vocab_object(const struct tokenizer *t) {
    cJSON *v = cJSON_CreateObject();
    for (int32_t i = 0; i < tok_n_vocab(t); i++) {
        cJSON_AddNumberToObject(v, tok_text(t, i), i);
    }
    return v;
}

/* The GPT-2 vocabulary as a byte-level tokenizer.json (merges alternately
 * as "a b" strings and [a, b] pairs); must give llama.cpp's ids. */
static void test_hf_gpt2(void **state) {
    (void)state;
    struct gguf_file *g;
    struct tokenizer *ref;
    load_vocab("ggml-vocab-gpt-2.gguf", &g, &ref);
    const struct gguf_value *merges = gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_STR);
    assert_non_null(merges);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", vocab_object(ref));
    cJSON *ms = cJSON_AddArrayToObject(model, "merges");
    const struct gguf_str *m = merges->arr.data;
    for (uint64_t i = 0; i < merges->arr.n; i++) {
        if (i % 2 == 0) {
            cJSON_AddItemToArray(ms, cJSON_CreateString(m[i].s));
            continue;
        }
        char left[256];
        const char *sp = strchr(m[i].s + 1, ' ');
        assert_true(sp && (size_t)(sp - m[i].s) < sizeof left);
        memcpy(left, m[i].s, (size_t)(sp - m[i].s));
        left[sp - m[i].s] = '\0';
        const char *pair[2] = { left, sp + 1 };
        cJSON_AddItemToArray(ms, cJSON_CreateStringArray(pair, 2));
    }
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "use_regex", true);
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddItemToArray(added, added_token(50256, "<|endoftext|>", true));
    const char *dir = KVF_TEST_TMP "/tok_hf_gpt2";
    make_dir(dir);
    write_json(dir, "tokenizer.json", root);
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "bos_token", "<|endoftext|>");
    cJSON_AddItemToObject(cfg, "eos_token", added_token(50256, "<|endoftext|>", true));
    cJSON_AddStringToObject(cfg, "chat_template", "{{ messages }}");
    write_json(dir, "tokenizer_config.json", cfg);

    struct tokenizer *t;
    enum kvf_status st = tok_load_hf(dir, &t);
    if (st != KVF_OK) {
        print_message("tok_load_hf: %s\n", kvf_last_error());
    }
    assert_int_equal(st, KVF_OK);
    assert_string_equal(tok_kind(t), "bpe:gpt2");
    assert_int_equal(tok_n_vocab(t), 50257);
    assert_int_equal(tok_bos(t), 50256);
    assert_int_equal(tok_eos(t), 50256);
    assert_true(tok_is_eog(t, 50256));
    assert_string_equal(tok_chat_template(t), "{{ messages }}");
    run_cases(t, "ggml-vocab-gpt-2.gguf", "");
    tok_free(t);
    tok_free(ref);
    gguf_close(g);
}

struct spm_merge { float score; int32_t id, l, r; };

static int spm_merge_cmp(const void *a, const void *b) {
    const struct spm_merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->l != y->l) return x->l < y->l ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

/* The llama SentencePiece vocabulary converted the way transformers does
 * (BPE + byte_fallback, merges = every split of a piece into two pieces,
 * ordered by the piece's score); must give llama.cpp's SPM ids. */
static void test_hf_spm(void **state) {
    (void)state;
    struct gguf_file *g;
    struct tokenizer *ref;
    load_vocab("ggml-vocab-llama-spm.gguf", &g, &ref);
    const struct gguf_value *scores = gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_F32);
    const struct gguf_value *types = gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_I32);
    assert_non_null(scores);
    assert_non_null(types);
    size_t n_m = 0, cap = 1 << 16;
    struct spm_merge *mv = malloc(cap * sizeof *mv);
    assert_non_null(mv);
    for (int32_t i = 0; i < tok_n_vocab(ref); i++) {
        int32_t type;
        float score;
        memcpy(&type, (const char *)types->arr.data + 4 * (size_t)i, 4);
        memcpy(&score, (const char *)scores->arr.data + 4 * (size_t)i, 4);
        const char *s = tok_text(ref, i);
        size_t len = strlen(s);
        for (size_t k = 1; type == 1 && k < len; k++) {
            if (((uint8_t)s[k] & 0xC0) == 0x80) {
                continue; /* not a character boundary */
            }
            int32_t l = tok_find(ref, s, k), r = tok_find(ref, s + k, len - k);
            if (l < 0 || r < 0) {
                continue;
            }
            if (n_m == cap) {
                cap *= 2;
                mv = realloc(mv, cap * sizeof *mv);
                assert_non_null(mv);
            }
            mv[n_m++] = (struct spm_merge){ score, i, l, r };
        }
    }
    qsort(mv, n_m, sizeof *mv, spm_merge_cmp);

    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddBoolToObject(model, "byte_fallback", true);
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON_AddItemToObject(model, "vocab", vocab_object(ref));
    cJSON *ms = cJSON_AddArrayToObject(model, "merges");
    for (size_t i = 0; i < n_m; i++) {
        const char *pair[2] = { tok_text(ref, mv[i].l), tok_text(ref, mv[i].r) };
        cJSON_AddItemToArray(ms, cJSON_CreateStringArray(pair, 2));
    }
    free(mv);
    cJSON *norm = cJSON_AddObjectToObject(root, "normalizer");
    cJSON_AddStringToObject(norm, "type", "Sequence");
    cJSON *ns = cJSON_AddArrayToObject(norm, "normalizers");
    cJSON *prep = cJSON_CreateObject(), *repl = cJSON_CreateObject();
    cJSON_AddStringToObject(prep, "type", "Prepend");
    cJSON_AddStringToObject(prep, "prepend", "\u2581");
    cJSON_AddStringToObject(repl, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(repl, "pattern"), "String", " ");
    cJSON_AddStringToObject(repl, "content", "\u2581");
    cJSON_AddItemToArray(ns, prep);
    cJSON_AddItemToArray(ns, repl);
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddItemToArray(added, added_token(0, "<unk>", true));
    cJSON_AddItemToArray(added, added_token(1, "<s>", true));
    cJSON_AddItemToArray(added, added_token(2, "</s>", true));
    const char *dir = KVF_TEST_TMP "/tok_hf_spm";
    make_dir(dir);
    write_json(dir, "tokenizer.json", root);
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "bos_token", "<s>");
    cJSON_AddStringToObject(cfg, "eos_token", "</s>");
    cJSON_AddBoolToObject(cfg, "add_bos_token", true);
    write_json(dir, "tokenizer_config.json", cfg);

    struct tokenizer *t;
    enum kvf_status st = tok_load_hf(dir, &t);
    if (st != KVF_OK) {
        print_message("tok_load_hf: %s\n", kvf_last_error());
    }
    assert_int_equal(st, KVF_OK);
    assert_string_equal(tok_kind(t), "spm");
    assert_int_equal(tok_bos(t), 1);
    assert_int_equal(tok_eos(t), 2);
    assert_null(tok_chat_template(t));
    print_message("%zu merges derived from the scores\n", n_m);
    run_cases(t, "ggml-vocab-llama-spm.gguf", " ");
    int32_t ids[4];
    assert_int_equal(tok_encode(t, "", 0, ids, 4, true, false), 1);
    assert_int_equal(ids[0], 1);
    tok_free(t);
    tok_free(ref);
    gguf_close(g);
}

/* ---------------------------------------------------- hostile metadata -- */

enum variant {
    V_OK, V_SPM_OK, V_TYPES_SHORT, V_SCORES_LONG, V_TYPES_F32, V_MERGE_UNKNOWN, V_MERGE_NOSEP,
    V_MERGE_NO_RESULT, V_NO_MERGES, V_EMPTY, V_NO_TOKENS, V_BOS_RANGE, V_EOS_NEGATIVE,
    V_PRE_UNKNOWN, V_MODEL_UNKNOWN, V_DUPLICATE,
};

/* A tiny vocabulary GGUF, broken as the variant says, loaded. */
static enum kvf_status load_variant(enum variant v, struct gguf_file **g, struct tokenizer **t) {
    static const char *const toks[] = { "a", "b", "ab", "<|endoftext|>", "\xc4\xa0",
                                        "\xc4\xa0\x61\x62" /* "Ġab" */, "a" };
    static const int32_t types[] = { 1, 1, 1, 3, 1, 1, 1 };
    static const float scores[] = { -1, -2, -0.5f, 0, -3, -0.25f, -1, 0 };
    const char *merges[] = { "a b", "\xc4\xa0 ab" };
    bool spm = v == V_SPM_OK || v == V_SCORES_LONG;
    uint64_t n = v == V_EMPTY ? 0 : v == V_DUPLICATE ? 7 : 6;
    struct gguf_writer *w = gguf_writer_init();
    assert_non_null(w);
    gguf_writer_set_str(w, "tokenizer.ggml.model",
                        v == V_MODEL_UNKNOWN ? "bert" : spm ? "llama" : "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", v == V_PRE_UNKNOWN ? "martian" : "gpt2");
    if (v != V_NO_TOKENS) {
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, n);
    }
    if (v == V_TYPES_F32) {
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_F32, scores, n);
    } else {
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types,
                            v == V_TYPES_SHORT ? n - 1 : n);
    }
    if (spm) {
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores,
                            v == V_SCORES_LONG ? n + 1 : n);
    }
    if (v == V_MERGE_UNKNOWN) merges[1] = "a zz";
    if (v == V_MERGE_NOSEP) merges[1] = "ab";
    if (v == V_MERGE_NO_RESULT) merges[1] = "b a";
    if (v != V_NO_MERGES) {
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 2);
    }
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v == V_BOS_RANGE ? 6 : 3);
    gguf_writer_set_i32(w, "tokenizer.ggml.eos_token_id", v == V_EOS_NEGATIVE ? -2 : 3);
    const char *path = KVF_TEST_TMP "/tok_variant.gguf";
    assert_int_equal(gguf_writer_write(w, path), KVF_OK);
    gguf_writer_free(w);
    assert_int_equal(gguf_open(path, g), KVF_OK);
    *t = (struct tokenizer *)(uintptr_t)1; /* must be cleared on failure */
    enum kvf_status st = tok_load_gguf(*g, t);
    if (st != KVF_OK) {
        assert_null(*t);
        assert_true(kvf_last_error()[0] != '\0');
    }
    return st;
}

static void test_hostile_gguf(void **state) {
    (void)state;
    struct gguf_file *g;
    struct tokenizer *t;
    assert_int_equal(load_variant(V_OK, &g, &t), KVF_OK);
    int32_t ids[8];
    assert_int_equal(tok_encode(t, "abab", 4, ids, 8, false, false), 2);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 2);
    assert_int_equal(tok_encode(t, " ab", 3, ids, 8, false, false), 1); /* "Ġab" */
    assert_int_equal(ids[0], 5);
    assert_int_equal(tok_encode(t, " b", 2, ids, 8, false, false), 2); /* no "Ġ b" merge */
    assert_int_equal(ids[0], 4);
    assert_int_equal(ids[1], 1);
    assert_int_equal(tok_encode(t, "ba", 2, ids, 8, false, false), 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 0);
    /* A byte with no token is dropped (no <unk> in this vocabulary). */
    assert_int_equal(tok_encode(t, "a\x01", 2, ids, 8, false, false), 1);
    /* The control token is parsed only on request. */
    assert_int_equal(tok_encode(t, "<|endoftext|>", 13, ids, 8, false, true), 1);
    assert_int_equal(ids[0], 3);
    assert_true(tok_is_eog(t, 3));
    tok_free(t);
    gguf_close(g);

    assert_int_equal(load_variant(V_SPM_OK, &g, &t), KVF_OK);
    assert_string_equal(tok_kind(t), "spm");
    tok_free(t);
    gguf_close(g);

    static const struct { enum variant v; enum kvf_status st; } bad[] = {
        { V_TYPES_SHORT, KVF_ERR_FORMAT },   { V_SCORES_LONG, KVF_ERR_FORMAT },
        { V_TYPES_F32, KVF_ERR_FORMAT },     { V_MERGE_UNKNOWN, KVF_ERR_FORMAT },
        { V_MERGE_NOSEP, KVF_ERR_FORMAT },   { V_MERGE_NO_RESULT, KVF_ERR_FORMAT },
        { V_NO_MERGES, KVF_ERR_FORMAT },     { V_EMPTY, KVF_ERR_FORMAT },
        { V_NO_TOKENS, KVF_ERR_FORMAT },     { V_BOS_RANGE, KVF_ERR_FORMAT },
        { V_EOS_NEGATIVE, KVF_ERR_FORMAT },  { V_PRE_UNKNOWN, KVF_ERR_UNSUPPORTED },
        { V_MODEL_UNKNOWN, KVF_ERR_UNSUPPORTED }, { V_DUPLICATE, KVF_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        enum kvf_status st = load_variant(bad[i].v, &g, &t);
        if (st != bad[i].st) {
            print_message("variant %d: status %d (%s)\n", bad[i].v, st, kvf_last_error());
        }
        assert_int_equal(st, bad[i].st);
        gguf_close(g);
    }
}

static enum kvf_status load_json(const char *json) {
    const char *dir = KVF_TEST_TMP "/tok_hf_bad";
    make_dir(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    struct tokenizer *t = (struct tokenizer *)(uintptr_t)1;
    enum kvf_status st = tok_load_hf(dir, &t);
    if (st == KVF_OK) {
        tok_free(t);
    } else {
        assert_null(t);
        assert_true(kvf_last_error()[0] != '\0');
    }
    return st;
}

static void test_hostile_json(void **state) {
    (void)state;
#define BPE_JSON(vocab, merges) \
    "{\"model\":{\"type\":\"BPE\",\"vocab\":" vocab ",\"merges\":" merges "}," \
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}"
    assert_int_equal(load_json(BPE_JSON("{\"a\":0,\"b\":1,\"ab\":2}", "[\"a b\"]")), KVF_OK);
    assert_int_equal(load_json(BPE_JSON("{\"a\":0,\"b\":1,\"ab\":2}", "[[\"a\",\"b\"]]")), KVF_OK);
    assert_int_equal(load_json("{\"model\":"), KVF_ERR_FORMAT);
    assert_int_equal(load_json("{\"model\":{\"type\":\"Unigram\"}}"), KVF_ERR_UNSUPPORTED);
    assert_int_equal(load_json(BPE_JSON("{\"a\":0,\"b\":1}", "[\"a c\"]")), KVF_ERR_FORMAT);
    assert_int_equal(load_json(BPE_JSON("{\"a\":0,\"b\":1}", "[\"a b\"]")), KVF_ERR_FORMAT);
    assert_int_equal(load_json(BPE_JSON("{\"a\":0,\"b\":1}", "[7]")), KVF_ERR_FORMAT);
    assert_int_equal(load_json(BPE_JSON("{\"a\":0,\"b\":5}", "[]")), KVF_ERR_FORMAT);
    assert_int_equal(load_json(BPE_JSON("{\"a\":0,\"b\":0}", "[]")), KVF_ERR_FORMAT);
    assert_int_equal(load_json(BPE_JSON("{\"a\":-1}", "[]")), KVF_ERR_FORMAT);
    assert_int_equal(load_json(BPE_JSON("{\"a\":1e12}", "[]")), KVF_ERR_FORMAT);
    assert_int_equal(load_json(BPE_JSON("{}", "[]")), KVF_ERR_FORMAT);
    assert_int_equal(load_json(BPE_JSON("[]", "[]")), KVF_ERR_FORMAT);
#undef BPE_JSON
    struct tokenizer *t;
    assert_int_equal(tok_load_hf(KVF_TEST_TMP "/no_such_dir", &t), KVF_ERR_IO);
    assert_null(t);
}

/* ------------------------------------------------------------ contracts -- */

static void test_contracts(void **state) {
    (void)state;
    struct gguf_file *g;
    struct tokenizer *t;
    load_vocab("ggml-vocab-gpt-2.gguf", &g, &t);
    int32_t ids[4];
    /* Too small: -(required), nothing written past n_max. */
    ids[1] = 12345;
    assert_int_equal(tok_encode(t, "Hello world", 11, ids, 1, false, false), -2);
    assert_int_equal(ids[1], 12345);
    assert_int_equal(tok_encode(t, "Hello world", 11, ids, 2, false, false), 2);
    assert_int_equal(tok_encode(t, "", 0, ids, 0, false, false), 0);
    assert_int_equal(tok_encode(t, NULL, 3, ids, 4, false, false), INT32_MIN);
    /* GPT-2's add_bos_token defaults to false. */
    assert_int_equal(tok_encode(t, "Hi", 2, ids, 4, true, false), 1);
    char buf[8];
    int32_t id = ids[0];
    assert_int_equal(tok_piece(t, id, buf, 1, false), -2);
    assert_int_equal(tok_piece(t, id, buf, 2, false), 2);
    assert_memory_equal(buf, "Hi", 2);
    assert_int_equal(tok_piece(t, -1, buf, 8, false), 0);
    assert_int_equal(tok_piece(t, 50257, buf, 8, false), 0);
    /* The end-of-text token is control-like: printed only when rendered. */
    assert_int_equal(tok_piece(t, 50256, buf, 8, false), 0);
    assert_true(tok_is_eog(t, 50256));
    assert_false(tok_is_eog(t, -1));
    assert_false(tok_is_eog(t, 50257));
    tok_free(t);
    gguf_close(g);
}

/* ------------------------------------------------------ pre-tokenizers -- */

/* Every name of the table resolves to its own row; the refused ones say
 * which and why. */
static void test_pre_names(void **state) {
    (void)state;
    size_t n_names = 0, n_ok = 0;
    for (size_t i = 0; i < tok_pre_count; i++) {
        const struct tok_pre *row = &tok_pre_table[i];
        assert_true(row->unsupported || row->re[0]);
        for (const char *p = row->names; *p;) {
            char name[64];
            const size_t n = strcspn(p, "|");
            assert_true(n > 0 && n < sizeof name);
            memcpy(name, p, n);
            name[n] = '\0';
            const struct tok_pre *got = NULL;
            const enum kvf_status st = tok_pre_from_name(name, &got);
            if (row->unsupported) {
                assert_int_equal(st, KVF_ERR_UNSUPPORTED);
                assert_non_null(strstr(kvf_last_error(), name));
                assert_non_null(strstr(kvf_last_error(), row->unsupported));
            } else {
                assert_int_equal(st, KVF_OK);
                assert_ptr_equal(got, row);
                struct pretok *pt;
                assert_int_equal(pretok_init(got, &pt), KVF_OK);
                pretok_free(pt);
                n_ok++;
            }
            n_names++;
            p += n + (p[n] == '|');
        }
    }
    assert_true(n_ok >= 80 && n_names > n_ok);
    static const char *const required[] = {
        "gpt2", "llama3", "llama-bpe", "qwen2", "smollm", "starcoder", "refact", "mpt", "falcon", "deepseek-llm",
        "deepseek-coder", "dbrx", "command-r", "olmo", "gpt-4o", "tekken", "deepseek-v3", "jais", "chatglm-bpe",
        "viking", "poro-chat", "bloom", "gpt3-finnish", "exaone", "chameleon", "minerva-7b", "codeshell",
        "bailingmoe", "seed-coder", "llama4", "superbpe", "trillion", "kimi-k2", "hunyuan", "default",
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const struct tok_pre *got;
        assert_int_equal(tok_pre_from_name(required[i], &got), KVF_OK);
    }
    const struct tok_pre *got;
    assert_int_equal(tok_pre_from_name("martian", &got), KVF_ERR_UNSUPPORTED);
    assert_non_null(strstr(kvf_last_error(), "'martian' unknown"));
    assert_non_null(strstr(kvf_last_error(), " tekken "));
    assert_non_null(strstr(kvf_last_error(), " minicpm5)"));
    assert_null(strstr(kvf_last_error(), "gemma4"));
    /* A prefix or a suffix of a name is not the name. */
    assert_int_equal(tok_pre_from_name("llama", &got), KVF_ERR_UNSUPPORTED);
    assert_int_equal(tok_pre_from_name("gpt-2x", &got), KVF_ERR_UNSUPPORTED);
    assert_int_equal(tok_pre_from_name("", &got), KVF_ERR_UNSUPPORTED);
}

struct pieces { char buf[256]; size_t n; };

static bool piece_join(void *ud, const char *piece, size_t len) {
    struct pieces *p = ud;
    assert_true(p->n + len + 2 < sizeof p->buf);
    memcpy(p->buf + p->n, piece, len);
    p->n += len;
    p->buf[p->n++] = '|';
    p->buf[p->n] = '\0';
    return true;
}

/* A few cuts written out by hand, for builds without the Python reference
 * (tests/ref/pretok_ref.py has the full set). */
static void test_pre_split(void **state) {
    (void)state;
    static const struct { const char *name, *text, *want; } cases[] = {
        { "gpt2", "Hello world's 1234  x\t\ty ", "Hello| world|'s| 1234| | x|\t|\t|y| |" },
        { "llama3", "I'M 1234567\n\n  ok!\r\n", "I|'M| |123|456|7|\n\n| | ok|!\r\n|" },
        { "qwen2", "ab12", "ab|1|2|" },
        { "smollm", "x 42", "x| |4|2|" },
        /* The text before a run of digits goes with its first group. */
        { "afmoe", "ab 12345", "ab| |12|345|" },
        /* Empty matches split: three digits from the end. */
        { "superbpe", "v1234567 ok", "v|1|234|567| ok|" },
        /* An undecodable byte is U+FFFD, a symbol joining its neighbours. */
        { "gpt2", "a\xff!b", "a|\xef\xbf\xbd!|b|" },
        /* An overlong '/' is '/'. */
        { "gpt2", "a\xc0\xaf", "a|/|" },
        /* '~' is no symbol for deepseek-v3 (llama.cpp's collapse). */
        { "deepseek-v3", "x~~!", "x|~~|!|" },
        { "tekken", "iPhone", "i|Phone|" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct tok_pre *pre;
        struct pretok *pt;
        assert_int_equal(tok_pre_from_name(cases[i].name, &pre), KVF_OK);
        assert_int_equal(pretok_init(pre, &pt), KVF_OK);
        struct pieces got = { .n = 0 };
        got.buf[0] = '\0';
        assert_true(pretok_split(pt, cases[i].text, strlen(cases[i].text), piece_join, &got));
        if (strcmp(got.buf, cases[i].want) != 0) {
            print_message("%s '%s': got '%s', want '%s'\n", cases[i].name, cases[i].text, got.buf, cases[i].want);
        }
        assert_string_equal(got.buf, cases[i].want);
        pretok_free(pt);
    }
}

/* ---------------------------------------------------------------- speed -- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ~1 MB of mixed text (prose, code, digits, Unicode, runs of spaces). */
static char *big_text(size_t *len) {
    size_t cap = 1 << 20, n = 0;
    char *s = malloc(cap + 256);
    assert_non_null(s);
    for (size_t i = 0; n < cap; i++) {
        const char *p = smollm_ref[i % (sizeof smollm_ref / sizeof smollm_ref[0] - 1)].text;
        size_t k = strlen(p);
        memcpy(s + n, p, k);
        n += k;
        s[n++] = i % 7 ? ' ' : '\n';
    }
    *len = n;
    return s;
}

static double encode_secs(const struct tokenizer *t, const char *text, size_t len, int32_t *n) {
    int32_t *ids;
    const double t0 = now_s();
    *n = encode(t, text, len, &ids, false, false);
    const double dt = now_s() - t0;
    free(ids);
    return dt;
}

/* Encoding grows linearly with the text: the whole ~1 MB takes at most 24
 * times what its first eighth takes (8 when linear, 64 when quadratic: a
 * pre-tokenizer split or a merge loop that rescans), whatever the
 * machine's speed or a sanitizer's slowdown. */
static void time_encode(const struct tokenizer *t, const char *name, const char *text,
                        size_t len) {
    size_t eighth = len / 8;
    while (eighth < len && text[eighth] != ' ' && text[eighth] != '\n') eighth++;
    int32_t n_part, n;
    const double part = encode_secs(t, text, eighth, &n_part), whole = encode_secs(t, text, len, &n);
    print_message("%s: %zu bytes -> %d tokens in %.3f s, the first %zu in %.3f s (encode runs twice: sizing + ids)\n",
                  name, len, n, whole, eighth, part);
    assert_true(whole < 24.0 * part + 0.05);
    assert_true(n > (int32_t)(len / 16));
}

static void test_speed(void **state) {
    (void)state;
    const char *files[] = { "ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf" };
    struct gguf_file *gv[2];
    struct tokenizer *tv[2];
    load_vocab(files[0], &gv[0], &tv[0]); /* skips where the vectors are absent, before the text is made */
    load_vocab(files[1], &gv[1], &tv[1]);
    size_t len;
    char *text = big_text(&len);
    for (size_t i = 0; i < 2; i++) {
        time_encode(tv[i], files[i], text, len);
        tok_free(tv[i]);
        gguf_close(gv[i]);
    }
    const char *models[] = { "smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf" };
    for (size_t i = 0; i < 2; i++) {
        char path[1024];
        model_path(path, sizeof path, models[i]);
        struct gguf_file *g;
        struct tokenizer *t;
        if (load(path, &g, &t)) {
            time_encode(t, models[i], text, len);
            tok_free(t);
            gguf_close(g);
        }
    }
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_llama_spm),
        cmocka_unit_test(test_vocab_gpt2),
        cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_hf_gpt2),
        cmocka_unit_test(test_hf_spm),
        cmocka_unit_test(test_hostile_gguf),
        cmocka_unit_test(test_hostile_json),
        cmocka_unit_test(test_contracts),
        cmocka_unit_test(test_pre_names),
        cmocka_unit_test(test_pre_split),
        cmocka_unit_test(test_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
