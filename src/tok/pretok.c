/* Pre-tokenizer regexes of llama.cpp's llama-vocab.cpp, run with PCRE2 in
 * UTF + UCP mode so that \p{L}, \p{N} and \s follow Unicode. Each regex of a
 * chain splits every piece from the previous one further; the text between
 * matches is kept as pieces too (as llama.cpp's unicode_regex_split does). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok/tok_impl.h"

#include <pcre2.h>
#include <stdlib.h>

#define PRETOK_MAX 2

struct pretok {
    int n;
    pcre2_code *re[PRETOK_MAX];
};

/* llama.cpp writes the contractions as [sS] etc. instead of (?i:'s|...),
 * which in Unicode mode would also match the long s (U+017F). */
static const char pat_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char pat_llama3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char pat_qwen2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char pat_digit[] = "\\p{N}";

enum kvf_status pretok_init(enum tok_pre pre, struct pretok **out) {
    const char *pats[PRETOK_MAX] = { 0 };
    int n = 1;
    switch (pre) {
    case TOK_PRE_GPT2: pats[0] = pat_gpt2; break;
    case TOK_PRE_LLAMA3: pats[0] = pat_llama3; break;
    case TOK_PRE_QWEN2: pats[0] = pat_qwen2; break;
    case TOK_PRE_STARCODER: pats[0] = pat_digit; pats[1] = pat_gpt2; n = 2; break;
    }
    struct pretok *p = calloc(1, sizeof *p);
    if (!p) {
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory");
    }
    for (int i = 0; i < n; i++) {
        int code;
        PCRE2_SIZE at;
        /* MATCH_INVALID_UTF: invalid UTF-8 in the input never matches and is
         * left as its own piece instead of failing the whole match. */
        p->re[i] = pcre2_compile((PCRE2_SPTR)pats[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(code, msg, sizeof msg);
            pretok_free(p);
            return err_set(KVF_ERR_INTERNAL, "tokenizer: regex error at %zu: %s", (size_t)at,
                           (const char *)msg);
        }
        p->n = i + 1;
        /* JIT is an optimisation only: without it pcre2_match interprets. */
        (void)pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE);
    }
    *out = p;
    return KVF_OK;
}

void pretok_free(struct pretok *p) {
    if (!p) {
        return;
    }
    for (int i = 0; i < p->n; i++) {
        pcre2_code_free(p->re[i]);
    }
    free(p);
}

struct split_ctx {
    const struct pretok *p;
    pcre2_match_data *md[PRETOK_MAX];
    const char *text;
    bool (*fn)(void *ud, size_t off, size_t len);
    void *ud;
};

static bool split_level(struct split_ctx *c, int level, size_t off, size_t len) {
    if (level == c->p->n) {
        return c->fn(c->ud, off, len);
    }
    /* The piece is the whole subject, so lookaheads stop at its end. */
    const PCRE2_SPTR subj = (PCRE2_SPTR)c->text + off;
    size_t start = 0, prev = 0;
    while (start < len) {
        int rc = pcre2_match(c->p->re[level], subj, len, start, 0, c->md[level], NULL);
        if (rc < 0) {
            break; /* no further match (or a match limit): the rest is one piece */
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md[level]);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {
            start = ms + KVF_MIN(tok_utf8_len(subj[ms]), len - ms);
            continue;
        }
        if (ms > prev && !split_level(c, level + 1, off + prev, ms - prev)) {
            return false;
        }
        if (!split_level(c, level + 1, off + ms, me - ms)) {
            return false;
        }
        prev = start = me;
    }
    return prev >= len || split_level(c, level + 1, off + prev, len - prev);
}

bool pretok_split(const struct pretok *p, const char *text, size_t len,
                  bool (*fn)(void *ud, size_t off, size_t len), void *ud) {
    struct split_ctx c = { .p = p, .text = text, .fn = fn, .ud = ud };
    bool ok = true;
    for (int i = 0; i < p->n; i++) {
        c.md[i] = pcre2_match_data_create_from_pattern(p->re[i], NULL);
        ok = ok && c.md[i];
    }
    ok = ok && split_level(&c, 0, 0, len);
    for (int i = 0; i < p->n; i++) {
        pcre2_match_data_free(c.md[i]);
    }
    return ok;
}
