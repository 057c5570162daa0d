/* The pre-tokenizers of llama.cpp's llama-vocab.cpp (tokenizer.ggml.pre),
 * run with PCRE2 in UTF + UCP mode. Each regex of a chain splits every piece
 * from the previous one further; the text between matches is kept as pieces
 * too, and an empty match is a split point (as in llama.cpp's
 * unicode_regex_split).
 *
 * llama.cpp does not run every regex literally, and where it differs we
 * follow llama.cpp:
 *  - gpt2's and llama3's regexes (exact strings) and kimi-k2's and afmoe's
 *    trigger regexes run hand-written loops; the regexes below spell what
 *    those loops do.
 *  - the others run in std::regex on a "collapsed" text, each non-ASCII code
 *    point replaced by one byte per category (letter, number, punctuation,
 *    mark, symbol, other) and \p{..} by that byte plus the ASCII members:
 *    \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all become "any letter", and
 *    the ASCII members of \p{S} lack '~'. Where that matters the regex below
 *    is rewritten, with a comment.
 *  - \s is Unicode White_Space everywhere (llama.cpp's table, or the
 *    collapse to \v); PCRE2's UCP \s also takes U+180E, so pretok_init
 *    spells it \p{White_Space}. \d, \w and \b are ASCII (std::regex in the
 *    C locale) and $ is the end of the text only (ECMAScript).
 *  - invalid UTF-8 is decoded leniently and each byte it cannot decode
 *    becomes U+FFFD before splitting (unicode_cpts_from_utf8). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok/tok_impl.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp writes the contractions as [sS] etc. instead of (?i:'s|...),
 * which in Unicode mode would also match the long s (U+017F). */
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* The whitespace alternatives most regexes since llama3 end with. */
#define WS_TAIL "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* unicode_cpt_is_han: CJK ideographs, extensions A-F and compatibility
 * ideographs (not the Unicode Han script, which also has radicals, 々 etc.). */
#define HAN "[\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2EBEF}" \
            "\\x{F900}-\\x{FAFF}\\x{2F800}-\\x{2FA1F}]"

/* llama.cpp's gpt2 regex has no final \s+, but its loop splits a lone
 * whitespace character before a non-space off as that alternative would. */
static const char re_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char re_llama3[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
static const char re_qwen2[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
static const char re_qwen35[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" WS_TAIL;
static const char re_minicpm5[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
static const char re_seed_coder[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|" WS_TAIL;
static const char re_ufakzeka[] = "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
static const char re_bailingmoe[] =
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char re_exaone_moe[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char re_jais2[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|"
    "\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
/* tekken's and gpt-4o's tokenizer.json regexes split words by case
 * ([\p{Lu}..]*[\p{Ll}..]+); llama.cpp rewrote them to tell only ASCII case
 * apart and dropped \p{M}, and that rewrite is what runs. */
#define UPPER "(?:(?=\\p{L})[^a-z])"
#define LOWER "(?:(?=\\p{L})[^A-Z])"
static const char re_tekken[] = "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*|"
                                "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL;
static const char re_gpt4o[] = "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+" CONTRACTIONS "?|"
                               "[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*" CONTRACTIONS "?|\\p{N}{1,3}|"
                               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL;
static const char re_granite_multi[] =
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?=[\\p{L}\\p{M}])[^a-z])*(?:(?=[\\p{L}\\p{M}])[^A-Z])+" CONTRACTIONS "?|"
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?=[\\p{L}\\p{M}])[^a-z])+(?:(?=[\\p{L}\\p{M}])[^A-Z])*" CONTRACTIONS "?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL;
/* youtu and tiny_aya keep \p{Lu}.. in llama.cpp's spelling, which the
 * collapse turns into "any letter": [\p{Lu}..\p{M}]*[\p{Ll}..\p{M}]+ and its
 * mirror both become [\p{L}\p{M}]+. */
static const char re_youtu[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+" CONTRACTIONS "?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL;
static const char re_tiny_aya[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+" CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL;
/* \d{1,3}(?=(?:\d{3})*\b) with ASCII \d and \b; after the digits \b is
 * "no ASCII word character next". */
static const char re_tiny_aya_digits[] = "[0-9]{1,3}(?=(?:[0-9]{3})*(?![0-9A-Za-z_]))";
static const char re_youtu_cjk[] =
    "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+";
/* deepseek-v3's and afmoe's \p{S} lacks '~' (see the top), so '~' may lead
 * a word and is not a symbol. */
static const char re_deepseek3[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|(?:~|[^\\r\\n\\p{L}\\p{P}\\p{S}])?[\\p{L}\\p{M}]+|"
    " ?(?:(?!~)[\\p{P}\\p{S}])+[\\r\\n]*|" WS_TAIL;
static const char re_spark[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|(?:~|[^\\r\\n\\p{L}\\p{P}\\p{S}])?[\\p{L}\\p{M}]+|"
    " ?(?:(?!~)[\\p{P}\\p{S}])+|[\\r\\n]|\\s+(?!\\S)|\\s+";
/* kimi-k2's loop: Han runs, then words of other letters of any case (it
 * ignores the case classes and \p{M} of tokenization_kimi.py's regex). */
static const char re_kimi_k2[] =
    HAN "+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!" HAN ")\\p{L})+" CONTRACTIONS "?|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
/* afmoe's digit loop cuts runs into groups of three with the remainder
 * first, and glues the text before a run onto its first group; the last
 * alternative takes a tail without digits in one step instead of failing
 * from each of its positions. */
static const char re_afmoe_digits[] = "\\P{N}*(?:\\p{N}{3}|\\p{N}{1,2})(?=(?:\\p{N}{3})*(?!\\p{N}))|\\P{N}+";
static const char re_afmoe_cjk[] = "[一-鿿㐀-䶿\\x{F900}-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-"
                                   "힯ᄀ-ᇿ]+";
static const char re_deepseek_latin[] =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-"
    "ὗὙὛὝὟ-\\x{1F7D}"
    "ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮ"
    "ⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲"
    "𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
/* These run in std::regex on the text with non-ASCII whitespace turned into
 * \v, so U+3000 and the spaces inside ࠀ-一 are not in their classes. */
static const char re_deepseek_punct[] = "\\s?(?:(?!\\s)[!-/:-~！-／：-～‘-‟　-。])+";
static const char re_deepseek_cjk[] = "(?:(?!\\s)[一-龥ࠀ-一가-퟿])+";
static const char re_bloom[] = " ?[^(\\s|.,!?…。，、।۔،)]+";
static const char re_default_punct[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char re_falcon_punct[] = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
static const char re_digit3[] = "[0-9][0-9][0-9]";
static const char re_digit[] = "\\p{N}";
static const char re_digits[] = "\\p{N}+";
static const char re_digits3[] = "\\p{N}{1,3}";
static const char re_cjk_kana[] = "[一-龥぀-ゟ゠-ヿ]+";
static const char re_crlf[] = "[\\r\\n]";
static const char re_lines[] = "[^\\n]+|[\\n]+";
static const char re_superbpe_digits[] = "(?=(?:[0-9]{3})+(?![0-9]))";

/* The tokenizer.json spellings of the single-regex rules (the Split regex). */
static const char hf_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
#define HF_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
static const char hf_llama3[] =
    HF_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
static const char hf_qwen2[] =
    HF_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL;
static const char hf_qwen35[] =
    HF_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" WS_TAIL;
#define HF_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define HF_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
static const char hf_tekken[] = "[^\\r\\n\\p{L}\\p{N}]?" HF_UPPER "*" HF_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" HF_UPPER "+"
                                HF_LOWER "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL;
static const char hf_gpt4o[] = "[^\\r\\n\\p{L}\\p{N}]?" HF_UPPER "*" HF_LOWER "+" HF_CONTRACTIONS "?|"
                               "[^\\r\\n\\p{L}\\p{N}]?" HF_UPPER "+" HF_LOWER "*" HF_CONTRACTIONS "?|\\p{N}{1,3}|"
                               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL;

/* Rows in llama.cpp's order of pre-types; the first name of a row is the
 * one HF-loaded tokenizers report. "gpt2" is kvfold's own name (fixtures,
 * tokenizer.json); llama.cpp writes "gpt-2". add_bos is llama.cpp's default
 * before tokenizer.ggml.add_bos_token. */
const struct tok_pre tok_pre_table[] = {
    { "default", { re_default_punct, re_gpt2, re_digits, re_digit3 }, NULL, false, false, NULL },
    { "gpt2|gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|mpt|olmo|jais|"
      "trillion|granite-docling|exaone4", { re_gpt2 }, hf_gpt2, false, false, NULL },
    { "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", { re_llama3 }, hf_llama3,
      true, true, NULL },
    { "dbrx|smaug-bpe|chatglm-bpe|glm4", { re_llama3 }, NULL, false, false, NULL },
    { "jais-2", { re_jais2 }, NULL, false, false, NULL },
    { "deepseek-llm", { re_crlf, re_deepseek_latin, re_deepseek_punct, "\\s+$", re_deepseek_cjk, re_digits }, NULL,
      false, false, NULL },
    { "deepseek-v3|hunyuan-dense|joyai-llm|hy_v4", { re_digits3, re_cjk_kana, re_deepseek3 }, NULL, false, false,
      NULL },
    { "spark2_5", { re_digits3, re_cjk_kana, re_spark, re_digit }, NULL, false, false, NULL },
    { "youtu", { re_youtu_cjk, re_youtu }, NULL, true, false, NULL },
    { "deepseek-coder", { re_crlf, "\\s?\\p{L}+", "\\s?\\p{P}+", re_deepseek_cjk, re_digit }, NULL, false, false,
      NULL },
    { "falcon", { re_falcon_punct, re_gpt2, re_digit3 }, NULL, false, false, NULL },
    { "starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2", { re_digit, re_gpt2 }, re_digit,
      false, false, NULL },
    { "qwen2|deepseek-r1-qwen|kormo|f2llmv2|megrez|stablelm2|hunyuan|solar-open|grok-2", { re_qwen2 }, hf_qwen2,
      false, false, NULL },
    { "qwen35", { re_qwen35 }, hf_qwen35, false, false, NULL },
    { "poro-chat|bloom|gpt3-finnish", { re_bloom }, NULL, false, false, NULL },
    { "viking", { re_bloom, re_digit }, NULL, false, false, NULL },
    { "tekken", { re_tekken }, hf_tekken, true, true, NULL },
    { "chameleon", { "<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", re_digit,
                     "[\\p{P}!-/:-@\\[-`{-~]", re_gpt2 }, NULL, false, true, NULL },
    { "gpt-4o|llama4|kanana2|talkie|minimax-m2", { re_gpt4o }, hf_gpt4o, false, false, NULL },
    { "granite-embed-multi-97m", { re_granite_multi }, NULL, true, false, NULL },
    { "tiny_aya|cohere2moe", { re_tiny_aya_digits, re_tiny_aya }, NULL, false, false, NULL },
    { "kimi-k2", { re_kimi_k2 }, NULL, false, false, NULL },
    { "superbpe", { re_digits, re_superbpe_digits }, NULL, false, false, NULL },
    { "bailingmoe|bailingmoe2|llada-moe", { re_bailingmoe }, NULL, false, false, NULL },
    { "seed-coder", { re_seed_coder }, NULL, false, false, NULL },
    { "ufakzeka", { re_ufakzeka }, NULL, false, false, NULL },
    { "afmoe", { re_afmoe_digits, re_afmoe_cjk, re_deepseek3 }, NULL, false, false, NULL },
    { "laguna", { re_lines, re_qwen2 }, NULL, false, false, NULL },
    { "exaone-moe", { re_exaone_moe }, NULL, false, false, NULL },
    { "minicpm5", { re_digits3, re_minicpm5 }, NULL, true, false, NULL },
    { "gemma4|granite-embed-multi-311m|sarvam-moe", { NULL }, NULL, false, false,
      "SentencePiece-style BPE: spaces become U+2581 and merges run on raw UTF-8, not byte-level characters" },
    { "whitespace", { NULL }, NULL, false, false,
      "words split at whitespace, which is dropped, and merged on raw UTF-8, not byte-level characters" },
    { "jina-v1-en|jina-v2-code|roberta-bpe", { NULL }, NULL, false, false,
      "encoder tokenizer that appends a separator token (add_sep)" },
};
const size_t tok_pre_count = sizeof tok_pre_table / sizeof tok_pre_table[0];

static bool names_have(const char *names, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = names; *p; p += strcspn(p, "|"), p += *p == '|') {
        if (strcspn(p, "|") == n && strncmp(p, name, n) == 0) {
            return true;
        }
    }
    return false;
}

enum kvf_status tok_pre_from_name(const char *name, const struct tok_pre **out) {
    for (size_t i = 0; i < tok_pre_count; i++) {
        const struct tok_pre *r = &tok_pre_table[i];
        if (!names_have(r->names, name)) {
            continue;
        }
        if (r->unsupported) {
            return err_set(KVF_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%.64s' not supported: %s", name,
                           r->unsupported);
        }
        *out = r;
        return KVF_OK;
    }
    char list[1536];
    size_t n = 0;
    for (size_t i = 0; i < tok_pre_count && n < sizeof list; i++) {
        if (!tok_pre_table[i].unsupported) {
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? " " : "", tok_pre_table[i].names);
        }
    }
    for (char *bar = strchr(list, '|'); bar; bar = strchr(bar, '|')) {
        *bar = ' ';
    }
    return err_set(KVF_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%.64s' unknown (known: %s)", name, list);
}

const struct tok_pre *tok_pre_from_hf(const char *regex) {
    for (size_t i = 0; i < tok_pre_count; i++) {
        if (tok_pre_table[i].hf && strcmp(tok_pre_table[i].hf, regex) == 0) {
            return &tok_pre_table[i];
        }
    }
    return NULL;
}

struct pretok {
    int n;
    pcre2_code *re[PRETOK_MAX];
};

/* The regex with \s and \S as Unicode White_Space (see the top); NULL when
 * out of memory. Escaped pairs are copied whole, so "\\s" stays a backslash
 * and an s. */
static char *pretok_spell(const char *re) {
    static const char ws[] = "\\p{White_Space}";
    char *out = malloc(strlen(re) * (sizeof ws - 1) + 1);
    if (!out) {
        return NULL;
    }
    char *o = out;
    for (const char *p = re; *p; p++) {
        if (p[0] == '\\' && (p[1] == 's' || p[1] == 'S')) {
            memcpy(o, ws, sizeof ws - 1);
            o[1] = p[1] == 's' ? 'p' : 'P';
            o += sizeof ws - 1;
            p++;
        } else if (p[0] == '\\' && p[1]) {
            *o++ = *p++;
            *o++ = *p;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

enum kvf_status pretok_init(const struct tok_pre *pre, struct pretok **out) {
    struct pretok *p = calloc(1, sizeof *p);
    if (!p) {
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory");
    }
    for (int i = 0; i < PRETOK_MAX && pre->re[i]; i++) {
        char *spelt = pretok_spell(pre->re[i]);
        if (!spelt) {
            pretok_free(p);
            return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory");
        }
        int code;
        PCRE2_SIZE at;
        /* pretok_split hands PCRE2 valid UTF-8 only; MATCH_INVALID_UTF spares
         * the check of the whole subject on every call. DOLLAR_ENDONLY is
         * ECMAScript's $. */
        p->re[i] = pcre2_compile((PCRE2_SPTR)spelt, PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &code, &at,
                                 NULL);
        free(spelt);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(code, msg, sizeof msg);
            pretok_free(p);
            return err_set(KVF_ERR_INTERNAL, "tokenizer: regex %d of '%.40s' at %zu: %s", i, pre->names, (size_t)at,
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

/* The code point llama.cpp's lenient decoder reads at s (overlong forms
 * pass) and its length; 0 when it reads none there, and for code points
 * UTF-8 cannot hold (surrogates, above U+10FFFF: llama.cpp keeps the first
 * and fails on the second; we replace both). */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    const size_t len = tok_utf8_len(s[0]);
    if ((s[0] & 0xC0) == 0x80 || s[0] >= 0xF8 || len > n) {
        return 0;
    }
    uint32_t c = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
        c = c << 6 | (s[i] & 0x3F);
    }
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) {
        return 0;
    }
    *cp = c;
    return len;
}

static size_t utf8_encode(uint32_t c, char *out) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | c >> 18);
    out[1] = (char)(0x80 | (c >> 12 & 0x3F));
    out[2] = (char)(0x80 | (c >> 6 & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* The text as llama.cpp splits it: every code point re-encoded, U+FFFD for
 * each byte it cannot decode. *fixed is NULL when that is the text itself;
 * false when out of memory. */
static bool utf8_sanitise(const char *text, size_t len, char **fixed, size_t *fixed_len) {
    *fixed = NULL;
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    uint32_t c;
    char buf[4];
    while (i < len) {
        const size_t k = utf8_decode(s + i, len - i, &c);
        if (k == 0 || utf8_encode(c, buf) != k) {
            break;
        }
        i += k;
    }
    if (i == len) {
        return true;
    }
    char *o = malloc(3 * len); /* U+FFFD, the longest replacement, is 3 bytes */
    if (!o) {
        return false;
    }
    memcpy(o, text, i);
    size_t n = i;
    while (i < len) {
        const size_t k = utf8_decode(s + i, len - i, &c);
        n += utf8_encode(k ? c : 0xFFFD, o + n);
        i += k ? k : 1;
    }
    *fixed = o;
    *fixed_len = n;
    return true;
}

struct split_ctx {
    const struct pretok *p;
    pcre2_match_data *md[PRETOK_MAX];
    const char *text;
    bool (*fn)(void *ud, const char *piece, size_t len);
    void *ud;
};

static bool split_level(struct split_ctx *c, int level, size_t off, size_t len) {
    if (level == c->p->n) {
        return c->fn(c->ud, c->text + off, len);
    }
    /* The piece is the whole subject, so lookaheads stop at its end. */
    const PCRE2_SPTR subj = (PCRE2_SPTR)c->text + off;
    size_t start = 0, prev = 0;
    uint32_t opts = 0;
    while (start < len) {
        int rc = pcre2_match(c->p->re[level], subj, len, start, opts, c->md[level], NULL);
        if (rc < 0) {
            break; /* no further match (or a match limit): the rest is one piece */
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md[level]);
        const size_t ms = ov[0], me = ov[1];
        if (ms > prev && !split_level(c, level + 1, off + prev, ms - prev)) {
            return false;
        }
        if (me > ms && !split_level(c, level + 1, off + ms, me - ms)) {
            return false;
        }
        prev = start = me;
        /* After an empty match the next one must not be empty at the same
         * place (std::regex_iterator), or the loop would not move on. */
        opts = me == ms ? PCRE2_NOTEMPTY_ATSTART : 0;
    }
    return prev >= len || split_level(c, level + 1, off + prev, len - prev);
}

bool pretok_split(const struct pretok *p, const char *text, size_t len,
                  bool (*fn)(void *ud, const char *piece, size_t len), void *ud) {
    char *fixed;
    size_t fixed_len;
    if (!utf8_sanitise(text, len, &fixed, &fixed_len)) {
        return false;
    }
    struct split_ctx c = { .p = p, .text = fixed ? fixed : text, .fn = fn, .ud = ud };
    bool ok = true;
    for (int i = 0; i < p->n; i++) {
        c.md[i] = pcre2_match_data_create_from_pattern(p->re[i], NULL);
        ok = ok && c.md[i];
    }
    ok = ok && split_level(&c, 0, 0, fixed ? fixed_len : len);
    for (int i = 0; i < p->n; i++) {
        pcre2_match_data_free(c.md[i]);
    }
    free(fixed);
    return ok;
}
