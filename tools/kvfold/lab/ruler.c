/* RULER's synthetic tasks (Hsieh et al., 2024, arXiv:2404.06654), generated
 * here as NVIDIA/RULER's scripts/data/synthetic/ files write them (templates,
 * needles, haystacks, task settings of its synthetic.yaml) and scored as its
 * evaluate.py scores them (string_match_all: the share of the expected
 * strings found in the answer, case-insensitive). Where this differs:
 *  - keys are pairs of dictionary words (--words, a word per line; default
 *    /usr/share/dict/words, Debian's wamerican) where RULER pairs
 *    wonderwords' adjectives and nouns; cwe draws from the same list;
 *  - the "essay" haystack is --haystack FILE's words (RULER: Paul Graham's
 *    essays, not fetched here), or sentences made up from a small
 *    vocabulary when it is not given; sentences are split at . ! ? before
 *    a space, not by nltk;
 *  - lengths count the prompt in the model's chat template.
 * No QA tasks: their data (SQuAD, HotpotQA) cannot be fetched here. */
#include "eval.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum task_kind { NIAH, VT, CWE, FWE };
enum hay { NOISE, ESSAY, NEEDLES };
enum item { WORDS, NUMBERS, UUIDS };

struct ruler_task {
    const char *name;
    enum task_kind kind;
    enum hay hay;
    enum item key, value;
    int n_keys, n_values, n_queries;
};

/* synthetic.yaml's tasks (niah_multiquery asks 4 of its 4 keys). */
static const struct ruler_task TASKS[] = {
    {"niah_single_1", NIAH, NOISE, WORDS, NUMBERS, 1, 1, 1},
    {"niah_single_2", NIAH, ESSAY, WORDS, NUMBERS, 1, 1, 1},
    {"niah_single_3", NIAH, ESSAY, WORDS, UUIDS, 1, 1, 1},
    {"niah_multikey_1", NIAH, ESSAY, WORDS, NUMBERS, 4, 1, 1},
    {"niah_multikey_2", NIAH, NEEDLES, WORDS, NUMBERS, 1, 1, 1},
    {"niah_multikey_3", NIAH, NEEDLES, UUIDS, UUIDS, 1, 1, 1},
    {"niah_multivalue", NIAH, ESSAY, WORDS, NUMBERS, 1, 4, 1},
    {"niah_multiquery", NIAH, ESSAY, WORDS, NUMBERS, 4, 1, 4},
    {"vt", VT, NOISE, 0, 0, 0, 0, 0},
    {"cwe", CWE, 0, 0, 0, 0, 0, 0},
    {"fwe", FWE, 0, 0, 0, 0, 0, 0},
};
#define N_TASKS ((int)(sizeof TASKS / sizeof *TASKS))

static const char NOISE_TEXT[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
static const char *const ITEM_NAME[] = {"words", "numbers", "uuids"};

const char *ruler_task_name(const struct ruler_task *t) { return t->name; }

int ruler_tasks(const char *list, const struct ruler_task **out, int *n) {
    *n = 0;
    if (!list) {
        for (int i = 0; i < N_TASKS; i++) out[(*n)++] = &TASKS[i];
        return 0;
    }
    for (const char *c = list; *c;) {
        const size_t w = strcspn(c, ",");
        int i = 0;
        while (i < N_TASKS && (strlen(TASKS[i].name) != w || strncmp(TASKS[i].name, c, w))) i++;
        if (i == N_TASKS || *n == N_TASKS) {
            print_error("eval ruler: --tasks: no task '%.*s' (RULER's synthetic tasks: niah_single_1, niah_single_2, "
                        "niah_single_3, niah_multikey_1, niah_multikey_2, niah_multikey_3, niah_multivalue, "
                        "niah_multiquery, vt, cwe, fwe)", (int)w, c);
            return EXIT_USAGE;
        }
        out[(*n)++] = &TASKS[i];
        c += w + (c[w] == ',');
    }
    return 0;
}

/* ------------------------------------------------------------ sources -- */

/* The word list and the essay: the files' text, and pointers into it. */
struct ruler_data {
    char *words_buf, *essay_buf;
    char **w, **essay; /* the words kept; the essay's words (NULL: made-up sentences) */
    int n, n_essay;
};

/* Splits buf in place at whitespace into words; keeps those keep() accepts. */
static int split_words(char *buf, bool (*keep)(const char *), char ***out, int *n) {
    int cap = 0;
    *n = 0;
    for (char *w = strtok(buf, " \t\r\n"); w; w = strtok(NULL, " \t\r\n")) {
        if (keep && !keep(w)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 4096;
            char **p = realloc(*out, sizeof *p * (size_t)cap);
            if (!p) return fail(KVF_ERR_NOMEM, "eval ruler");
            *out = p;
        }
        (*out)[(*n)++] = w;
    }
    return 0;
}

/* Plain lowercase words of 3-12 letters (no names, no possessives). */
static bool plain_word(const char *w) {
    const size_t n = strlen(w);
    bool ok = n >= 3 && n <= 12;
    for (size_t i = 0; ok && i < n; i++) ok = w[i] >= 'a' && w[i] <= 'z';
    return ok;
}

int ruler_data_open(const struct args *a, struct ruler_data **out) {
    struct ruler_data *d = calloc(1, sizeof *d);
    const char *words = a->eval.words ? a->eval.words : "/usr/share/dict/words";
    size_t len;
    int rc = d ? 0 : fail(KVF_ERR_NOMEM, "eval ruler");
    if (!rc && !a->eval.words && !path_is_file(words)) {
        print_error("eval ruler: %s is absent: give --words FILE (a word per line; Debian's wamerican installs it)",
                    words);
        rc = EXIT_INPUT;
    }
    if (!rc) rc = read_text_file(words, &d->words_buf, &len);
    if (!rc) rc = split_words(d->words_buf, plain_word, &d->w, &d->n);
    if (!rc && d->n < 1000) {
        print_error("eval ruler: --words '%s': %d plain lowercase words, want at least 1000", words, d->n);
        rc = EXIT_INPUT;
    }
    if (!rc && a->eval.haystack) rc = read_text_file(a->eval.haystack, &d->essay_buf, &len);
    if (!rc && a->eval.haystack) rc = split_words(d->essay_buf, NULL, &d->essay, &d->n_essay);
    if (!rc && a->eval.haystack && d->n_essay < 100) {
        print_error("eval ruler: --haystack '%s': %d words, want at least 100", a->eval.haystack, d->n_essay);
        rc = EXIT_INPUT;
    }
    if (rc) ruler_data_free(d);
    else *out = d;
    return rc;
}

void ruler_data_free(struct ruler_data *d) {
    if (!d) return;
    free(d->w);
    free(d->essay);
    free(d->words_buf);
    free(d->essay_buf);
    free(d);
}

/* xorshift64*: the sample's own stream. */
static uint64_t rnd(uint64_t *s) {
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
static int rnd_below(uint64_t *s, int n) { return (int)(rnd(s) % (uint64_t)n); }

static void shuffle_ints(uint64_t *s, int *x, int n) {
    for (int i = n - 1; i > 0; i--) {
        const int j = rnd_below(s, i + 1), t = x[i];
        x[i] = x[j], x[j] = t;
    }
}

/* A key, a value or a haystack line's item: two words joined by '-', a
 * 7-digit number, a version-4 UUID. */
static void item(uint64_t *s, const struct ruler_data *w, enum item kind, char *out, size_t cap) {
    if (kind == WORDS) {
        snprintf(out, cap, "%s-%s", w->w[rnd_below(s, w->n)], w->w[rnd_below(s, w->n)]);
    } else if (kind == NUMBERS) {
        snprintf(out, cap, "%d", 1000000 + rnd_below(s, 9000000));
    } else {
        const uint64_t a = rnd(s), b = rnd(s);
        snprintf(out, cap, "%08x-%04x-4%03x-%04x-%012llx", (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffff,
                 (unsigned)a & 0xfff, (unsigned)(0x8000 | ((b >> 48) & 0x3fff)),
                 (unsigned long long)(b & 0xffffffffffffull));
    }
}

static bool put(struct strbuf *b, const char *s) { return strbuf_put(b, s, strlen(s)); }

/* A text of `words` whitespace-separated words of the essay (the file's,
 * repeated as needed; or made-up sentences), split into sentences. */
static bool essay_sentences(const struct ruler_data *d, uint64_t *s, int words, struct strbuf *text, int **at, int *n) {
    bool ok = true;
    if (d->essay) {
        for (int i = 0; ok && i < words; i++) ok = put(text, i ? " " : "") && put(text, d->essay[i % d->n_essay]);
    } else {
        ok = haystack_text(s, words, text);
    }
    /* sentence starts: after ". ", "! ", "? " */
    int cap = 64;
    *at = malloc(sizeof **at * (size_t)cap);
    *n = 0;
    ok = ok && *at;
    if (ok && text->n) (*at)[(*n)++] = 0;
    for (size_t i = 0; ok && i + 1 < text->n; i++) {
        if (!strchr(".!?", text->s[i]) || text->s[i + 1] != ' ') continue;
        if (*n == cap) {
            int *p = realloc(*at, sizeof *p * (size_t)(cap *= 2));
            if (!(ok = p != NULL)) break;
            *at = p;
        }
        (*at)[(*n)++] = (int)i + 2;
    }
    return ok;
}

/* ---------------------------------------------------------------- NIAH -- */

/* RULER's 40 insertion depths: round(linspace(0, 100, 40)). */
static int depth_at(int i) { return (int)floor(i * 100.0 / 39.0 + 0.5); }

/* A question after the first: its text, the answer's start, the expected
 * strings a line each. */
struct ruler_q {
    struct strbuf text, prefix, answers;
};

/* What a generator writes: the prompt's text (its question from
 * question_at), the answer's start (RULER's answer prefix), the expected
 * strings a line each; NIAH, asked more than once, the questions after the
 * first. */
struct ruler_out {
    struct strbuf text, prefix, answers;
    size_t question_at;
    struct ruler_q more[RULER_MAX_QUESTIONS - 1];
    int n_more;
};

/* The questions a NIAH task can ask of one context, n_queries keys each. */
static int niah_questions(const struct ruler_task *t, int want) {
    return MIN(want, RULER_MAX_QUESTIONS / t->n_queries);
}

/* A NIAH sample asking nq questions (niah_questions), each of its own
 * n_queries keys: the context holds max(n_keys, nq n_queries) keys. */
static bool niah_text(const struct ruler_task *t, const struct ruler_data *src, uint64_t seed, int size, int nq,
                      struct ruler_out *o) {
    uint64_t s = seed;
    enum { MAXN = RULER_MAX_QUESTIONS };
    char keys[MAXN][64], values[MAXN][MAXN][64], needles[MAXN * MAXN][256];
    const char *vname = ITEM_NAME[t->value];
    const int n_keys = MAX(t->n_keys, nq * t->n_queries);
    int n_needles = 0;
    for (int k = 0; k < n_keys; k++) {
        item(&s, src, t->key, keys[k], sizeof keys[k]);
        for (int v = 0; v < t->n_values; v++) {
            item(&s, src, t->value, values[k][v], sizeof values[k][v]);
            snprintf(needles[n_needles++], sizeof needles[0], "One of the special magic %s for %s is: %s.", vname,
                     keys[k], values[k][v]);
        }
    }
    int order[MAXN * MAXN];
    for (int i = 0; i < n_needles; i++) order[i] = i;
    shuffle_ints(&s, order, n_needles);
    struct strbuf ctx = {0};
    bool ok = true;
    if (t->hay == ESSAY) {
        struct strbuf text = {0};
        int *sent = NULL, n_sent = 0, depths[40], pos[MAXN * MAXN];
        ok = essay_sentences(src, &s, size, &text, &sent, &n_sent);
        for (int i = 0; i < 40; i++) depths[i] = i;
        shuffle_ints(&s, depths, 40);
        for (int i = 0; i < n_needles; i++) pos[i] = (int)(n_sent * (depth_at(depths[i]) / 100.0));
        for (int i = 1; i < n_needles; i++) /* sorted */
            for (int j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
                const int x = pos[j];
                pos[j] = pos[j - 1], pos[j - 1] = x;
            }
        /* the sentences between insertion points, each run followed by a needle, joined by spaces */
        int last = 0;
        for (int i = 0; ok && i <= n_needles; i++) {
            const int next = i < n_needles ? pos[i] : n_sent;
            const size_t from = last < n_sent ? (size_t)sent[last] : text.n,
                         to = next < n_sent ? (size_t)sent[next] : text.n;
            size_t len = to - from;
            while (len > 0 && text.s[from + len - 1] == ' ') len--;
            ok = (ctx.n == 0 || put(&ctx, " ")) && strbuf_put(&ctx, text.s + from, len);
            if (ok && i < n_needles) ok = put(&ctx, " ") && put(&ctx, needles[order[i]]);
            last = next;
        }
        free(sent);
        free(text.s);
    } else {
        /* noise or distractor needles, a line each; the needles inserted at random lines */
        const int lines = size + n_needles;
        char *is_needle = calloc((size_t)lines, 1);
        ok = is_needle != NULL;
        for (int i = 0; ok && i < n_needles;) {
            const int at = rnd_below(&s, lines);
            if (!is_needle[at]) is_needle[at] = 1, i++;
        }
        for (int i = 0, k = 0; ok && i < lines; i++) {
            char line[256];
            if (is_needle[i]) {
                snprintf(line, sizeof line, "%s", needles[order[k++]]);
            } else if (t->hay == NOISE) {
                snprintf(line, sizeof line, "%s", NOISE_TEXT);
            } else {
                char dk[64], dv[64];
                item(&s, src, t->key, dk, sizeof dk);
                item(&s, src, t->value, dv, sizeof dv);
                snprintf(line, sizeof line, "One of the special magic %s for %s is: %s.", vname, dk, dv);
            }
            ok = (i == 0 || put(&ctx, "\n")) && put(&ctx, line);
        }
        free(is_needle);
    }
    /* one needle asked: the template in the singular, as RULER rewrites it */
    const bool one = t->n_queries * t->n_values == 1;
    char v1[16];
    snprintf(v1, sizeof v1, "%.*s", (int)strlen(vname) - (one ? 1 : 0), vname);
    char head[256];
    snprintf(head, sizeof head, "%s special magic %s %s hidden within the following text. Make sure to memorize it. "
             "I will quiz you about the %s afterwards.\n", one ? "A" : "Some", v1, one ? "is" : "are", v1);
    ok = ok && put(&o->text, head) && strbuf_put(&o->text, ctx.s ? ctx.s : "", ctx.n);
    o->question_at = o->text.n;
    free(ctx.s);
    /* question j: n_queries of the keys, "a, b, and c" */
    int pick[MAXN];
    for (int i = 0; i < n_keys; i++) pick[i] = i;
    shuffle_ints(&s, pick, n_keys);
    for (int j = 0; ok && j < nq; j++) {
        struct strbuf *text = j ? &o->more[j - 1].text : &o->text, *prefix = j ? &o->more[j - 1].prefix : &o->prefix,
                      *answers = j ? &o->more[j - 1].answers : &o->answers;
        char query[4 * MAXN * 64] = "", question[512], pre[512];
        for (int q = 0; q < t->n_queries; q++) {
            const int key = pick[j * t->n_queries + q];
            const size_t n = strlen(query);
            snprintf(query + n, sizeof query - n, "%s%s",
                     q == 0                      ? ""
                         : q == t->n_queries - 1 ? ", and "
                                                 : ", ",
                     keys[key]);
            for (int v = 0; ok && v < t->n_values; v++)
                ok = put(answers, answers->n ? "\n" : "") && put(answers, values[key][v]);
        }
        snprintf(question, sizeof question, "\nWhat %s special magic %s for %s mentioned in the provided text?",
                 one ? "is the" : "are all the", v1, query);
        snprintf(pre, sizeof pre, " The special magic %s for %s mentioned in the provided text %s", v1, query,
                 one ? "is" : "are");
        ok = ok && put(text, question) && put(prefix, pre);
        o->n_more = j;
    }
    return ok;
}

/* ------------------------------------------------- variable tracking -- */

/* Five-letter (the worked example: three-letter) upper-case names. */
static void var_name(uint64_t *s, int len, char *out) {
    for (int i = 0; i < len; i++) out[i] = (char)('A' + rnd_below(s, 26));
    out[len] = '\0';
}

#define VT_HOPS 4

/* One chain of VT_HOPS hops among `size` noise lines: "VAR A = 12345",
 * "VAR B = VAR A ", ... in order at random lines; its names into names[]
 * and its value into value. */
static bool vt_context(uint64_t *s, int size, int name_len, const char *fixed_value, char names[][8], char *value,
                       struct strbuf *ctx) {
    for (int i = 0; i <= VT_HOPS; i++) {
        bool dup;
        do {
            var_name(s, name_len, names[i]);
            dup = false;
            for (int j = 0; j < i; j++) dup |= !strcmp(names[i], names[j]);
        } while (dup);
    }
    if (fixed_value) snprintf(value, 8, "%s", fixed_value);
    else snprintf(value, 8, "%d", 10000 + rnd_below(s, 89999));
    const int lines = size + VT_HOPS + 1;
    char *is_var = calloc((size_t)lines, 1);
    bool ok = is_var != NULL;
    for (int i = 0; ok && i <= VT_HOPS;) {
        const int at = rnd_below(s, lines);
        if (!is_var[at]) is_var[at] = 1, i++;
    }
    for (int i = 0, h = 0; ok && i < lines; i++) {
        char line[128];
        if (!is_var[i]) snprintf(line, sizeof line, "%s", NOISE_TEXT);
        else if (h == 0) snprintf(line, sizeof line, "VAR %s = %s", names[h++], value);
        else snprintf(line, sizeof line, "VAR %s = VAR %s ", names[h], names[h - 1]), h++;
        ok = (i == 0 || put(ctx, "\n")) && put(ctx, line);
    }
    free(is_var);
    return ok;
}

static bool vt_text(uint64_t seed, int size, int ctx_size, struct ruler_out *o) {
    uint64_t s = seed;
    static const char head[] =
        "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
    char names[VT_HOPS + 1][8], value[8], ex_names[VT_HOPS + 1][8], ex_value[8], line[256];
    /* RULER's worked example first: a short chain (about 500 tokens of noise, 3-letter names; less
     * below 4096 tokens, where RULER is not run) with its answer, names and value drawn afresh */
    struct strbuf ex = {0}, ctx = {0};
    const int ex_lines = ctx_size >= 4096 ? 20 : ctx_size / 200 + 1;
    bool ok = vt_context(&s, ex_lines, 3, NULL, ex_names, ex_value, &ex) &&
              vt_context(&s, size, 5, NULL, names, value, &ctx);
    ok = ok && put(&o->text, head) && strbuf_put(&o->text, ex.s, ex.n);
    snprintf(line, sizeof line, "\nQuestion: Find all variables that are assigned the value %s in the text above. "
             "Answer: According to the chain(s) of variable assignment in the text above, %d variables are assigned "
             "the value %s, they are: ", ex_value, VT_HOPS + 1, ex_value);
    ok = ok && put(&o->text, line);
    for (int i = 0; ok && i <= VT_HOPS; i++) ok = put(&o->text, i ? " " : "") && put(&o->text, ex_names[i]);
    ok = ok && put(&o->text, "\n") && put(&o->text, head) && strbuf_put(&o->text, ctx.s, ctx.n);
    o->question_at = o->text.n;
    snprintf(line, sizeof line, "\nQuestion: Find all variables that are assigned the value %s in the text above.",
             value);
    ok = ok && put(&o->text, line);
    snprintf(line, sizeof line, " Answer: According to the chain(s) of variable assignment in the text above, %d "
             "variables are assigned the value %s, they are: ", VT_HOPS + 1, value);
    ok = ok && put(&o->prefix, line);
    for (int i = 0; ok && i <= VT_HOPS; i++) ok = put(&o->answers, i ? "\n" : "") && put(&o->answers, names[i]);
    free(ex.s);
    free(ctx.s);
    return ok;
}

/* ------------------------------------------------ common words (cwe) -- */

/* A numbered list of `n` distinct words, the first `n_common` repeated
 * `common` times and the others `rare` times, shuffled; the common ones
 * into common[] (indices into the word list). */
static bool cwe_list(uint64_t *s, const struct ruler_data *d, int n, int n_common, int common, int rare, int *picked,
                     struct strbuf *b) {
    for (int i = 0; i < n; i++) {
        bool dup;
        do {
            picked[i] = rnd_below(s, d->n);
            dup = false;
            for (int j = 0; j < i; j++) dup |= picked[j] == picked[i];
        } while (dup);
    }
    const int total = n_common * common + (n - n_common) * rare;
    int *list = malloc(sizeof *list * (size_t)total), k = 0;
    if (!list) return false;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < (i < n_common ? common : rare); r++) list[k++] = picked[i];
    shuffle_ints(s, list, total);
    bool ok = true;
    for (int i = 0; ok && i < total; i++) {
        char num[16];
        snprintf(num, sizeof num, "%s%d. ", i ? " " : "", i + 1);
        ok = put(b, num) && put(b, d->w[list[i]]);
    }
    free(list);
    return ok;
}

static bool cwe_text(const struct ruler_data *d, uint64_t seed, int size, int ctx_size, struct ruler_out *o) {
    uint64_t s = seed;
    enum { N_CW = 10 };
    static const char head[] = "Below is a numbered list of words. In these words, some appear more often than "
                               "others. Memorize the ones that appear most often.\n";
    static const char question[] = "\nQuestion: What are the 10 most common words in the above list?";
    static const char prefix[] = " Answer: The top 10 words that appear most often in the list are:";
    /* RULER's settings: below 4096 tokens a one-shot example of 20 words (3 and 1 repeats) and
     * common words 6 times; else 40 words (10 and 3) and 30 times, the others 3 times */
    const bool small = ctx_size < 4096;
    int ex[40], *picked = malloc(sizeof *picked * (size_t)(size > N_CW ? size : N_CW));
    bool ok = picked && put(&o->text, head);
    ok = ok && cwe_list(&s, d, small ? 20 : 40, N_CW, small ? 3 : 10, small ? 1 : 3, ex, &o->text);
    ok = ok && put(&o->text, question) && put(&o->text, prefix);
    for (int i = 0; ok && i < N_CW; i++) {
        char num[16];
        snprintf(num, sizeof num, " %d. ", i + 1);
        ok = put(&o->text, num) && put(&o->text, d->w[ex[i]]);
    }
    ok = ok && put(&o->text, "\n") && put(&o->text, head);
    ok = ok && cwe_list(&s, d, size > N_CW ? size : N_CW, N_CW, small ? 6 : 30, small ? 1 : 3, picked, &o->text);
    o->question_at = o->text.n;
    ok = ok && put(&o->text, question) && put(&o->prefix, prefix);
    for (int i = 0; ok && i < N_CW; i++) ok = put(&o->answers, i ? "\n" : "") && put(&o->answers, d->w[picked[i]]);
    free(picked);
    return ok;
}

/* -------------------------------------------- frequent words (fwe) -- */

static bool fwe_text(uint64_t seed, int size, int ctx_size, int n_gen, struct ruler_out *o) {
    uint64_t s = seed;
    const double alpha = 2.0, zeta2 = 3.14159265358979323846 * 3.14159265358979323846 / 6.0;
    /* a vocabulary of 6-letter coded words, (length - generated) / 50 of them; rank 1 is "..." (noise) */
    const int vocab = (ctx_size - n_gen) / 50 > 4 ? (ctx_size - n_gen) / 50 : 4;
    char (*v)[8] = malloc(sizeof *v * (size_t)vocab);
    if (!v) return false;
    snprintf(v[0], sizeof v[0], "...");
    for (int i = 1; i < vocab; i++) {
        bool dup;
        do {
            for (int c = 0; c < 6; c++) v[i][c] = (char)('a' + rnd_below(&s, 26));
            v[i][6] = '\0';
            dup = false;
            for (int j = 1; j < i; j++) dup |= !strcmp(v[i], v[j]);
        } while (dup);
    }
    /* rank k appears int(size k^-alpha / zeta(alpha)) times */
    int total = 0;
    for (int k = 1; k <= vocab; k++) total += (int)(size * pow(k, -alpha) / zeta2);
    int *list = malloc(sizeof *list * (size_t)(total + 1)), n = 0;
    bool ok = list != NULL;
    for (int k = 1; ok && k <= vocab; k++)
        for (int r = 0; r < (int)(size * pow(k, -alpha) / zeta2); r++) list[n++] = k - 1;
    if (ok) shuffle_ints(&s, list, n);
    ok = ok && put(&o->text, "Read the following coded text and track the frequency of each coded word. Find the "
                             "three most frequently appeared coded words. ");
    for (int i = 0; ok && i < n; i++) ok = put(&o->text, i ? " " : "") && put(&o->text, v[list[i]]);
    o->question_at = o->text.n;
    ok = ok && put(&o->text, "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the "
                             "three most frequently appeared words in the above coded text?");
    ok = ok && put(&o->prefix, " Answer: According to the coded text above, the three most frequently appeared words "
                               "are:");
    for (int i = 1; ok && i <= 3; i++) ok = put(&o->answers, i > 1 ? "\n" : "") && put(&o->answers, v[i]);
    free(list);
    free(v);
    return ok;
}

/* ----------------------------------------------------------- samples -- */

static void out_free(struct ruler_out *o) {
    free(o->text.s), free(o->prefix.s), free(o->answers.s);
    for (int j = 0; j < RULER_MAX_QUESTIONS - 1; j++)
        free(o->more[j].text.s), free(o->more[j].prefix.s), free(o->more[j].answers.s);
    *o = (struct ruler_out){0};
}

static bool generate(const struct ruler_task *t, const struct ruler_data *d, uint64_t seed, int size, int ctx_size,
                     int n_gen, int nq, struct ruler_out *o) {
    out_free(o);
    switch (t->kind) {
    case NIAH: return niah_text(t, d, seed, size, niah_questions(t, nq), o);
    case VT: return vt_text(seed, size, ctx_size, o);
    case CWE: return cwe_text(d, seed, size, ctx_size, o);
    case FWE: return fwe_text(seed, size, ctx_size, n_gen, o);
    }
    return false;
}

/* Tokens of the sample as the model sees it, asked question q (its text
 * [question_at, end) and prefix): the prompt in its chat template with the
 * answer's start, tokenized as eval runs it (with --question after, the
 * context and the rest apart). */
static int question_tokens(const struct args *a, const struct kvf_model *m, const char *sample, size_t question_at,
                           const char *prefix, int *n) {
    const struct args ca = eval_chat_args(a, m);
    char *text = NULL;
    int rc = build_prompt(&ca, m, sample, &text);
    char *all = NULL;
    if (!rc && !(all = malloc(strlen(text) + strlen(prefix) + 1))) rc = fail(KVF_ERR_NOMEM, "eval ruler");
    size_t cut = 0;
    if (!rc) {
        strcpy(all, text);
        strcat(all, prefix);
        cut = strlen(all);
        const char *q = sample + question_at;
        for (const char *p = strstr(all, q); p && !strcmp(a->eval.question, "after"); p = strstr(p + 1, q))
            cut = (size_t)(p - all);
    }
    int32_t *ids = NULL, n1 = 0, n2 = 0;
    if (!rc) rc = tokenize_text(m, all, cut, true, ca.chat, &ids, &n1);
    free(ids);
    ids = NULL;
    if (!rc && all[cut]) rc = tokenize_text(m, all + cut, strlen(all + cut), false, ca.chat, &ids, &n2);
    free(ids);
    free(all);
    free(text);
    *n = n1 + n2;
    return rc;
}

/* Tokens of the sample with its longest question. */
static int sample_tokens(const struct args *a, const struct kvf_model *m, const struct ruler_out *o, int *n) {
    int rc = question_tokens(a, m, o->text.s, o->question_at, o->prefix.s, n);
    struct strbuf b = {0};
    for (int j = 0; !rc && j < o->n_more; j++) {
        int nj = 0;
        b.n = 0;
        if (!strbuf_put(&b, o->text.s, o->question_at) || !strbuf_put(&b, o->more[j].text.s, o->more[j].text.n))
            rc = fail(KVF_ERR_NOMEM, "eval ruler");
        if (!rc) rc = question_tokens(a, m, b.s, o->question_at, o->more[j].prefix.s, &nj);
        *n = MAX(*n, nj);
    }
    free(b.s);
    return rc;
}

/* The haystack's unit: noise or distractor lines, essay words, vt noise
 * lines, cwe's distinct words, fwe's words; RULER's first guess. */
static int unit_guess(const struct ruler_task *t, int ctx_size) {
    switch (t->kind) {
    case NIAH: return t->hay == ESSAY ? ctx_size / 2 : ctx_size / 40;
    case VT: return ctx_size / 40;
    case CWE: return ctx_size / 80;
    case FWE: return ctx_size / 2;
    }
    return 16;
}

int ruler_sample(const struct args *a, const struct kvf_model *m, const struct ruler_data *d,
                 const struct ruler_task *t, int k, int ctx_size, int n_gen, struct sample *out) {
    *out = (struct sample){.depth = NAN, .ruler = t->name};
    uint64_t seed = a->seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull * (uint64_t)(k + 1);
    for (const char *c = t->name; *c; c++) seed = (seed ^ (uint8_t)*c) * 0x100000001b3ull;
    seed |= 1;
    /* the largest haystack whose sample and answer fit ctx_size, by bisection as RULER searches it */
    struct ruler_out o = {0};
    int lo = 1, hi = 2 * unit_guess(t, ctx_size) + 16, best = 0, rc = 0, n = 0;
    while (!rc) { /* an upper bound that does not fit */
        if (!generate(t, d, seed, hi, ctx_size, n_gen, a->eval.questions, &o)) rc = fail(KVF_ERR_NOMEM, "eval ruler");
        if (!rc) rc = sample_tokens(a, m, &o, &n);
        if (rc || n + n_gen > ctx_size) break;
        lo = hi + 1, hi *= 2;
        if (hi > (1 << 24)) break;
    }
    while (!rc && lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        if (!generate(t, d, seed, mid, ctx_size, n_gen, a->eval.questions, &o)) rc = fail(KVF_ERR_NOMEM, "eval ruler");
        if (!rc) rc = sample_tokens(a, m, &o, &n);
        if (!rc && n + n_gen <= ctx_size) best = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if (!rc && best == 0) {
        print_error("eval ruler: %s: even the shortest sample (%d tokens with the answer) is over --ctx-size %d",
                    t->name, n + n_gen, ctx_size);
        rc = EXIT_USAGE;
    }
    if (!rc && !generate(t, d, seed, best, ctx_size, n_gen, a->eval.questions, &o))
        rc = fail(KVF_ERR_NOMEM, "eval ruler");
    if (!rc && o.n_more && !(out->more = calloc((size_t)o.n_more, sizeof *out->more)))
        rc = fail(KVF_ERR_NOMEM, "eval ruler");
    if (!rc) {
        out->text = o.text.s, out->question_at = o.question_at, out->answer = o.answers.s,
        out->answer_prefix = o.prefix.s;
        for (int j = 0; j < o.n_more; j++)
            out->more[j] = (struct sample_question){o.more[j].text.s, o.more[j].prefix.s, o.more[j].answers.s};
        out->n_more = o.n_more;
        o = (struct ruler_out){0};
    }
    out_free(&o);
    return rc;
}

/* A RULER sample's question as a JSON line: the context, the question,
 * the answer's start and the expected strings apart, as kvpress's RULER data
 * holds them. */
static int ruler_dump_one(FILE *f, const char *path, const struct sample *smp, const char *question,
                          const char *prefix, const char *answer) {
    cJSON *o = cJSON_CreateObject(), *answers = cJSON_AddArrayToObject(o, "answers");
    char *context = strndup(smp->text, smp->question_at);
    bool ok = o && answers && context && cJSON_AddStringToObject(o, "task", smp->ruler) &&
              cJSON_AddStringToObject(o, "context", context) && cJSON_AddStringToObject(o, "question", question) &&
              cJSON_AddStringToObject(o, "answer_prefix", prefix);
    for (const char *c = answer; ok && *c;) {
        const size_t w = strcspn(c, "\n");
        char *one = strndup(c, w);
        ok = one && cJSON_AddItemToArray(answers, cJSON_CreateString(one));
        free(one);
        c += w + (c[w] == '\n');
    }
    char *line = ok ? cJSON_PrintUnformatted(o) : NULL;
    int rc = line ? 0 : fail(KVF_ERR_NOMEM, "eval ruler");
    if (line && (fprintf(f, "%s\n", line) < 0 || fflush(f) != 0)) {
        print_error("eval ruler: cannot write '%s': %s", path, strerror(errno));
        rc = EXIT_INPUT;
    }
    free(line);
    free(context);
    cJSON_Delete(o);
    return rc;
}

/* A line per question (kvpress's rows that share a context). */
int ruler_dump(FILE *f, const char *path, const struct sample *smp) {
    int rc = ruler_dump_one(f, path, smp, smp->text + smp->question_at, smp->answer_prefix, smp->answer);
    for (int j = 0; !rc && j < smp->n_more; j++)
        rc = ruler_dump_one(f, path, smp, smp->more[j].text, smp->more[j].prefix, smp->more[j].answer);
    return rc;
}
