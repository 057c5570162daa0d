/* Loading a Hugging Face tokenizer.json (+ tokenizer_config.json). Two
 * layouts of model.type "BPE" are understood:
 *  - byte-level BPE (a ByteLevel pre-tokenizer/decoder): our BPE, with the
 *    pre-tokenizer recognised from the Split regex;
 *  - SentencePiece converted to BPE (byte_fallback, "▁" for spaces): our SPM,
 *    with score = -rank of the first merge that produces a token, so that
 *    "best score first" is "lowest rank first". Tokens that no merge produces
 *    get -INFINITY and are never formed by merging. */
#include "tok/tok_impl.h"
#include "core/sys.h"
#include "io/json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_MAX_FILE ((size_t)256 << 20) /* real tokenizer.json files: up to ~35 MB */

static cJSON *parse_file(const char *dir, const char *name, bool required, enum kvf_status *st) {
    *st = KVF_OK;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        *st = err_set(KVF_ERR_INVALID_ARG, "tokenizer: path too long");
        return NULL;
    }
    if (!required && !sys_path_is_file(path)) {
        return NULL;
    }
    size_t len;
    char *text;
    if ((*st = sys_read_file(path, HF_MAX_FILE, "a tokenizer file", &text, &len)) != KVF_OK) {
        return NULL;
    }
    cJSON *j = NULL;
    *st = json_parse_text(path, text, len, &j);
    free(text);
    return j;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Some object in the tree (normalizer, pre_tokenizer, decoder and their
 * nested sequences) whose "type" is type; NULL if none. */
static const cJSON *find_type(const cJSON *j, const char *type) {
    if (!j) {
        return NULL;
    }
    if (cJSON_IsObject(j)) {
        const char *ty = str_of(j, "type");
        if (ty && strcmp(ty, type) == 0) {
            return j;
        }
    }
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
        for (const cJSON *c = j->child; c; c = c->next) {
            const cJSON *r = find_type(c, type);
            if (r) {
                return r;
            }
        }
    }
    return NULL;
}

/* Recognises the pre-tokenizer from the Split regexes (the last one known
 * wins); gpt2 otherwise (a bare ByteLevel with use_regex applies the GPT-2
 * regex). The name is the rule's first. */
static enum kvf_status recognise_pre(const cJSON *pre, const struct tok_pre **out) {
    *out = NULL;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    const cJSON *one = pre;
    for (const cJSON *p = cJSON_IsArray(list) ? list->child : one; p;
         p = cJSON_IsArray(list) ? p->next : NULL) {
        const char *ty = str_of(p, "type");
        const char *re = str_of(cJSON_GetObjectItemCaseSensitive(p, "pattern"), "Regex");
        const struct tok_pre *known = ty && strcmp(ty, "Split") == 0 && re ? tok_pre_from_hf(re) : NULL;
        if (known) {
            *out = known;
        }
    }
    return *out ? KVF_OK : tok_pre_from_name("gpt2", out);
}

/* bos_token / eos_token: a string or {"content": ...}. */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsString(v) ? v->valuestring : str_of(v, "content");
}

struct hf {
    const cJSON *vocab, *merges, *added;
};

/* Id of a token text in vocab or added_tokens, -1 if neither. */
static int32_t hf_id(const struct hf *h, const char *text) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->vocab, text);
    if (cJSON_IsNumber(v)) {
        return (int32_t)v->valuedouble;
    }
    for (const cJSON *a = h->added ? h->added->child : NULL; a; a = a->next) {
        const char *c = str_of(a, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (c && cJSON_IsNumber(id) && strcmp(c, text) == 0) {
            return (int32_t)id->valuedouble;
        }
    }
    return -1;
}

static bool is_byte_token(const char *s) {
    return strlen(s) == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>';
}

/* The two sides of merge i: "a b" (split at the first space after the first
 * character) or ["a", "b"]. */
static bool merge_sides(const cJSON *m, const char **a, size_t *alen, const char **b,
                        size_t *blen) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring;
        const char *sp = s[0] ? strchr(s + 1, ' ') : NULL;
        if (!sp) {
            return false;
        }
        *a = s;
        *alen = (size_t)(sp - s);
        *b = sp + 1;
        *blen = strlen(sp + 1);
        return true;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring;
        *alen = strlen(*a);
        *b = m->child->next->valuestring;
        *blen = strlen(*b);
        return true;
    }
    return false;
}

static enum kvf_status load_hf(const cJSON *root, const cJSON *cfg, struct tokenizer **out) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *mtype = str_of(model, "type");
    if (!mtype || strcmp(mtype, "BPE") != 0) {
        return err_set(KVF_ERR_UNSUPPORTED,
                       "tokenizer.json: model type '%.32s' not supported (BPE)",
                       mtype ? mtype : "?");
    }
    struct hf h = {
        cJSON_GetObjectItemCaseSensitive(model, "vocab"),
        cJSON_GetObjectItemCaseSensitive(model, "merges"),
        cJSON_GetObjectItemCaseSensitive(root, "added_tokens"),
    };
    if (!cJSON_IsObject(h.vocab) || !cJSON_IsArray(h.merges) ||
        (h.added && !cJSON_IsArray(h.added) && !cJSON_IsNull(h.added))) {
        return err_set(KVF_ERR_FORMAT, "tokenizer.json: model.vocab / model.merges missing");
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    bool byte_level = find_type(pre, "ByteLevel") || find_type(dec, "ByteLevel");
    bool byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    const cJSON *meta = find_type(pre, "Metaspace");
    const cJSON *repl = find_type(norm, "Replace");
    const char *repl_to = str_of(repl, "content");
    bool spm_like = byte_fallback || meta || (repl_to && strcmp(repl_to, "\xE2\x96\x81") == 0);
    if (!byte_level && !spm_like) {
        return err_set(KVF_ERR_UNSUPPORTED,
                       "tokenizer.json: BPE without ByteLevel or SentencePiece-style spaces");
    }
    enum tok_algo algo = byte_level ? TOK_ALGO_BPE : TOK_ALGO_SPM;

    /* Size the vocabulary: ids must be 0..n-1, each once. */
    int64_t max_id = -1, count = 0;
    size_t text_bytes = 0;
    for (const cJSON *v = h.vocab->child; v; v = v->next, count++) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= INT32_MAX - 1 ||
            v->valuedouble != (double)(int64_t)v->valuedouble) {
            return err_set(KVF_ERR_FORMAT, "tokenizer.json: bad id for token '%.64s'", v->string);
        }
        max_id = KVF_MAX(max_id, (int64_t)v->valuedouble);
        text_bytes += strlen(v->string);
    }
    for (const cJSON *a = h.added ? h.added->child : NULL; a; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const char *c = str_of(a, "content");
        if (!c || !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= INT32_MAX - 1) {
            return err_set(KVF_ERR_FORMAT, "tokenizer.json: bad added token");
        }
        max_id = KVF_MAX(max_id, (int64_t)id->valuedouble);
        text_bytes += strlen(c);
        count++;
    }
    if (max_id < 0 || max_id >= count) {
        return err_set(KVF_ERR_FORMAT, "tokenizer.json: %lld tokens but ids up to %lld",
                       (long long)count, (long long)max_id);
    }
    struct tokenizer *t;
    enum kvf_status st = tok_alloc(algo, max_id + 1, text_bytes, &t);
    if (st != KVF_OK) {
        return st;
    }
    *out = t;

    const char *unk_text = str_of(model, "unk_token");
    float base = algo == TOK_ALGO_SPM ? -INFINITY : 0.0f;
    for (const cJSON *v = h.vocab->child; v; v = v->next) {
        int type = TOK_NORMAL;
        if (algo == TOK_ALGO_SPM && is_byte_token(v->string)) {
            type = TOK_BYTE;
        } else if (unk_text && strcmp(unk_text, v->string) == 0) {
            type = TOK_UNKNOWN;
        }
        st = tok_set_token(t, (int32_t)v->valuedouble, v->string, strlen(v->string), base, type);
        if (st != KVF_OK) {
            return st;
        }
    }
    for (const cJSON *a = h.added ? h.added->child : NULL; a; a = a->next) {
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(a, "id")->valuedouble;
        const char *c = str_of(a, "content");
        int type = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special")) ? TOK_CONTROL
                                                                               : TOK_USER_DEFINED;
        if (t->vocab[id].text) {
            /* Usually also in the vocab: the added entry only sets the type. */
            if (strcmp(t->vocab[id].text, c) != 0) {
                return err_set(KVF_ERR_FORMAT, "tokenizer.json: added token %d '%.64s' clashes "
                               "with the vocab", id, c);
            }
            t->vocab[id].type = (uint8_t)type;
            continue;
        }
        if ((st = tok_set_token(t, id, c, strlen(c), base, type)) != KVF_OK) {
            return st;
        }
    }

    if (algo == TOK_ALGO_BPE) {
        if ((st = recognise_pre(pre, &t->pre)) != KVF_OK) {
            return st;
        }
        const cJSON *im = cJSON_GetObjectItemCaseSensitive(model, "ignore_merges");
        t->ignore_merges = cJSON_IsBool(im) ? cJSON_IsTrue(im) : t->pre->ignore_merges;
        t->add_bos = t->pre->add_bos;
        snprintf(t->kind, sizeof t->kind, "bpe:%.*s", (int)strcspn(t->pre->names, "|"), t->pre->names);
    } else {
        const cJSON *prepend = find_type(norm, "Prepend");
        const char *scheme = str_of(meta, "prepend_scheme");
        t->add_space_prefix =
            (prepend && str_of(prepend, "prepend") &&
             strcmp(str_of(prepend, "prepend"), "\xE2\x96\x81") == 0) ||
            (meta && (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "add_prefix_space")) ||
                      (scheme && strcmp(scheme, "never") != 0)));
        t->add_bos = true;
        snprintf(t->kind, sizeof t->kind, "spm");
    }

    t->unk = unk_text ? hf_id(&h, unk_text) : -1;
    if (cfg) {
        const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
        t->bos = bos ? hf_id(&h, bos) : -1;
        t->eos = eos ? hf_id(&h, eos) : -1;
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
        if (cJSON_IsBool(ab)) {
            t->add_bos = cJSON_IsTrue(ab);
        }
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        const char *tmpl = cJSON_IsString(ct) ? ct->valuestring : NULL;
        /* A list of named templates: take "default", else the first. */
        for (const cJSON *e = cJSON_IsArray(ct) ? ct->child : NULL; e && !tmpl; e = e->next) {
            const char *name = str_of(e, "name");
            if (name && strcmp(name, "default") == 0) {
                tmpl = str_of(e, "template");
            }
        }
        if (!tmpl && cJSON_IsArray(ct) && ct->child) {
            tmpl = str_of(ct->child, "template");
        }
        if (tmpl && !(t->chat_template = strdup(tmpl))) {
            return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory");
        }
    }

    if ((st = tok_finish(t)) != KVF_OK) {
        return st;
    }
    int32_t rank = 0;
    for (const cJSON *m = h.merges->child; m; m = m->next, rank++) {
        const char *a, *b;
        size_t alen, blen;
        if (rank == INT32_MAX || !merge_sides(m, &a, &alen, &b, &blen)) {
            return err_set(KVF_ERR_FORMAT, "tokenizer.json: bad merge %d", rank);
        }
        int32_t res;
        if ((st = tok_merge_add(t, a, alen, b, blen, rank, &res)) != KVF_OK) {
            return st;
        }
        if (isinf(t->vocab[res].score)) {
            t->vocab[res].score = -(float)rank;
        }
    }
    if (algo == TOK_ALGO_SPM) {
        /* SPM merges by score; the pair table has done its checking. */
        free(t->merges.slots);
        t->merges = (struct tok_merge_map){ 0 };
    }
    return KVF_OK;
}

enum kvf_status tok_load_hf(const char *dir, struct tokenizer **out) {
    if (!dir || !out) {
        return err_set(KVF_ERR_INVALID_ARG, "tok_load_hf: NULL argument");
    }
    *out = NULL;
    enum kvf_status st;
    cJSON *root = parse_file(dir, "tokenizer.json", true, &st);
    if (!root) {
        return st;
    }
    cJSON *cfg = parse_file(dir, "tokenizer_config.json", false, &st);
    struct tokenizer *t = NULL;
    if (st == KVF_OK) {
        st = load_hf(root, cfg, &t);
    }
    cJSON_Delete(cfg);
    cJSON_Delete(root);
    if (st != KVF_OK) {
        tok_free(t);
        return st;
    }
    *out = t;
    return KVF_OK;
}
