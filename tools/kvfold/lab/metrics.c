/* Answer metrics: ROUGE-L by the longest common subsequence of tokens (two
 * DP rows), and MileBench's own scoring rules. */
#include "metrics.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lowercased copy with separators as NULs; tokens are its non-empty runs. */
struct tokens {
    char *buf;
    const char **t;
    int n;
};

static bool tokenise(const char *s, struct tokens *out) {
    const size_t len = strlen(s);
    out->n = 0;
    out->buf = malloc(len + 1);
    out->t = malloc(sizeof *out->t * (len / 2 + 1));
    if (!out->buf || !out->t) return false;
    for (size_t i = 0; i <= len; i++) {
        const int c = tolower((unsigned char)s[i]);
        out->buf[i] = (char)((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ? c : 0);
        if (out->buf[i] && (i == 0 || !out->buf[i - 1])) out->t[out->n++] = out->buf + i;
    }
    return true;
}

double metrics_rouge_l_f1(const char *candidate, const char *reference) {
    struct tokens a = {0}, b = {0};
    int *row = NULL;
    double f = 0.0;
    if (tokenise(candidate, &a) && tokenise(reference, &b) && a.n > 0 && b.n > 0 &&
        (row = calloc((size_t)b.n + 1, sizeof *row))) {
        for (int i = 1; i <= a.n; i++) {
            int diag = 0; /* row[j - 1] of the previous i */
            for (int j = 1; j <= b.n; j++) {
                const int up = row[j];
                row[j] = !strcmp(a.t[i - 1], b.t[j - 1]) ? diag + 1 : (row[j - 1] > up ? row[j - 1] : up);
                diag = up;
            }
        }
        const double lcs = row[b.n], p = lcs / a.n, r = lcs / b.n;
        f = lcs > 0 ? 2 * p * r / (p + r) : 0.0;
    }
    free(row);
    free(a.buf), free(a.t), free(b.buf), free(b.t);
    return f;
}

/* Whether output contains answer[0..n), ignoring ASCII case. */
static bool contains_n(const char *output, const char *answer, size_t n) {
    for (const char *p = output; *p; p++)
        if (strncasecmp(p, answer, n) == 0) return true;
    return n == 0;
}

bool metrics_contains(const char *output, const char *answer) { return contains_n(output, answer, strlen(answer)); }

double metrics_match_all(const char *output, const char *answers) {
    int n = 0, found = 0;
    for (const char *c = answers; *c; n++) {
        const size_t w = strcspn(c, "\n");
        found += w > 0 && contains_n(output, c, w);
        c += w + (c[w] == '\n');
    }
    return n ? (double)found / n : 0.0;
}

/* ------------------------------------------------ MileBench's scoring -- */

/* What Python's str.split() and str.strip() take for whitespace (ASCII). */
static bool py_space(unsigned char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* str.strip(chars) in place (chars NULL: whitespace); returns the start. */
static char *py_strip(char *s, const char *chars) {
    size_t n = strlen(s);
#define STRIPPED(c) (chars ? strchr(chars, (c)) != NULL && (c) != '\0' : py_space((unsigned char)(c)))
    while (n > 0 && STRIPPED(s[n - 1])) n--;
    s[n] = '\0';
    while (*s && STRIPPED(*s)) s++;
#undef STRIPPED
    return s;
}

char *metrics_mb_normalise(const char *in) {
    static const char punct[] = ";/[]\"{}()=+\\_-><@`,?!"; /* in Eval.punct's order */
    char *buf = strdup(in), *out = malloc(strlen(in) + 1);
    if (!buf || !out) {
        free(buf), free(out);
        return NULL;
    }
    for (char *c = buf; *c; c++)
        if (*c == '\n' || *c == '\t') *c = ' ';
    const char *s = py_strip(buf, NULL);
    bool digit_comma = false; /* the text has (\d)(,)(\d) somewhere */
    for (const char *c = s; c[0] && c[1] && c[2] && !digit_comma; c++)
        digit_comma = isdigit((unsigned char)c[0]) && c[1] == ',' && isdigit((unsigned char)c[2]);
    strcpy(out, s);
    for (const char *q = punct; *q; q++) {
        const char p = *q, after[3] = {p, ' ', 0}, before[3] = {' ', p, 0};
        /* the choice looks at the text before any replacement */
        const bool drop = strstr(s, after) || strstr(s, before) || digit_comma;
        size_t o = 0;
        for (const char *c = out; *c; c++) {
            if (*c != p) out[o++] = *c;
            else if (!drop) out[o++] = ' ';
        }
        out[o] = '\0';
    }
    /* periodStrip.sub("", text, re.UNICODE): the flag lands on `count`, so
     * at most 32 periods not followed by a digit go */
    size_t o = 0;
    int removed = 0;
    for (const char *c = out; *c; c++) {
        if (*c == '.' && removed < 32 && !isdigit((unsigned char)c[1])) {
            removed++;
            continue;
        }
        out[o++] = *c;
    }
    out[o] = '\0';
    char *t = py_strip(py_strip(py_strip(out, "'"), "\""), NULL);
    for (char *c = t; *c; c++) *c = (char)((unsigned char)*c < 128 ? tolower((unsigned char)*c) : *c);
    memmove(out, t, strlen(t) + 1);
    free(buf);
    return out;
}

/* Words of a text: [" ".join(x.split()) for x in text.split(".") if x],
 * each then split at " " (an all-blank sentence gives one empty word). */
struct sentences {
    char *buf;
    const char **w; /* words */
    int *first;     /* [n + 1]: sentence i is words first[i] .. first[i + 1] */
    int n, n_words;
};

static bool sentences_split(const char *text, struct sentences *s) {
    const size_t len = strlen(text);
    s->buf = malloc(len + 1);
    s->w = malloc(sizeof *s->w * (len + 2));
    s->first = malloc(sizeof *s->first * (len + 2));
    s->n = s->n_words = 0;
    if (!s->buf || !s->w || !s->first) return false;
    memcpy(s->buf, text, len + 1);
    for (char *p = s->buf, *end; p <= s->buf + len; p = end + 1) {
        end = strchr(p, '.');
        if (!end) end = s->buf + len;
        if (end == p) continue; /* an empty piece is no sentence */
        *end = '\0';
        s->first[s->n++] = s->n_words;
        bool any = false;
        for (char *c = p; *c;) {
            while (*c && py_space((unsigned char)*c)) *c++ = '\0';
            if (!*c) break;
            s->w[s->n_words++] = c, any = true;
            while (*c && !py_space((unsigned char)*c)) c++;
        }
        if (!any) s->w[s->n_words++] = ""; /* "".split(" ") == [""] */
    }
    s->first[s->n] = s->n_words;
    return true;
}

static void sentences_free(struct sentences *s) {
    free(s->buf), free(s->w), free(s->first);
}

/* Adds w to the set (a list of distinct strings); false when it was there. */
static bool set_add(const char **set, int *n, const char *w) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(set[i], w)) return false;
    set[(*n)++] = w;
    return true;
}

double metrics_mb_rouge_l(const char *hyp, const char *ref) {
    struct sentences h = {0}, r = {0};
    int *table = NULL;
    const char **set = NULL;
    double f = 0.0;
    if (!sentences_split(hyp, &h) || !sentences_split(ref, &r) || h.n == 0 || r.n == 0 ||
        !(set = malloc(sizeof *set * (size_t)(h.n_words + r.n_words + 1))))
        goto done;
    /* three sets in turn in the same storage: distinct words of ref, of
     * hyp, then the union of the LCS words */
    int m = 0, n = 0, llcs = 0;
    for (int i = 0; i < r.n_words; i++) set_add(set, &m, r.w[i]);
    for (int i = 0; i < h.n_words; i++) set_add(set, &n, h.w[i]);
    table = malloc(sizeof *table * (size_t)(r.n_words + 1) * (h.n_words + 1));
    if (!table) goto done;
    for (int a = 0; a < r.n; a++)
        for (int b = 0; b < h.n; b++) {
            const char **x = r.w + r.first[a], **y = h.w + h.first[b];
            const int nx = r.first[a + 1] - r.first[a], ny = h.first[b + 1] - h.first[b], W = ny + 1;
            for (int i = 0; i <= nx; i++)
                for (int j = 0; j <= ny; j++)
                    table[i * W + j] = i == 0 || j == 0 ? 0
                                       : !strcmp(x[i - 1], y[j - 1]) ? table[(i - 1) * W + j - 1] + 1
                                       : table[(i - 1) * W + j] > table[i * W + j - 1] ? table[(i - 1) * W + j]
                                                                                 : table[i * W + j - 1];
            /* the package's _recon_lcs walk: up only when strictly better */
            for (int i = nx, j = ny; i > 0 && j > 0;) {
                if (!strcmp(x[i - 1], y[j - 1])) set_add(set, &llcs, x[--i]), j--;
                else if (table[(i - 1) * W + j] > table[i * W + j - 1]) i--;
                else j--;
            }
        }
    const double rr = (double)llcs / m, p = (double)llcs / n;
    f = 2.0 * (p * rr / (p + rr + 1e-8));
done:
    free(table);
    free(set);
    sentences_free(&h);
    sentences_free(&r);
    return f;
}

/* Regex metacharacters MileBench escapes in an option before matching. */
static bool mb_special(char c) {
    return c && strchr("\\.^$*+?{}[]|()", c) != NULL;
}

/* s with spaces removed (and, with escape, each metacharacter after a
 * backslash), in a new string. */
static char *mb_squeeze(const char *s, bool escape) {
    char *o = malloc(2 * strlen(s) + 1), *p = o;
    if (!o) return NULL;
    for (; *s; s++) {
        if (*s == ' ') continue;
        if (escape && mb_special(*s)) *p++ = '\\';
        *p++ = *s;
    }
    *p = '\0';
    return o;
}

/* re.search(alt[0]|alt[1]|..., text) for literal alternatives: the leftmost
 * position where one matches, the first listed winning there. */
static int first_match(const char *text, char *const *alt, int n) {
    for (const char *t = text;; t++) {
        for (int k = 0; k < n; k++)
            if (alt[k] && !strncmp(t, alt[k], strlen(alt[k]))) return k;
        if (!*t) return -1;
    }
}

void metrics_mb_choice(const char *text, const char *const *choices, int n, char *out, size_t cap) {
    out[0] = '\0';
    if (cap < 2) return;
    if (!*text) {
        snprintf(out, cap, "C");
        return;
    }
    char **alt = calloc((size_t)n + 1, sizeof *alt);
    char *bare = mb_squeeze(text, false);
    bool done = false;
    /* 1. "<letter> <option>", normalised again as a whole */
    for (int k = 0; alt && k < n; k++) {
        char *lv = malloc(strlen(choices[k]) + 3);
        if (lv) sprintf(lv, "%c %s", 'A' + k, choices[k]);
        alt[k] = lv ? metrics_mb_normalise(lv) : NULL;
        free(lv);
    }
    int k = alt ? first_match(text, alt, n) : -1;
    if (k >= 0) {
        snprintf(out, cap, "%c", toupper((unsigned char)alt[k][0]));
        done = true;
    }
    for (int j = 0; alt && j < n; j++) free(alt[j]), alt[j] = NULL;
    /* 2. the option alone, spaces removed on both sides; it counts only
     *    when the matched text equals an option's escaped form */
    if (!done && alt && bare) {
        for (int j = 0; j < n; j++) {
            char *v = metrics_mb_normalise(choices[j]);
            alt[j] = v ? mb_squeeze(v, false) : NULL;
            free(v);
        }
        k = first_match(bare, alt, n);
        if (k >= 0) {
            char *m = strdup(alt[k]);
            const char *ms = m ? py_strip(m, NULL) : "";
            for (int j = 0; j < n && !done; j++) {
                char *v = metrics_mb_normalise(choices[j]), *e = v ? mb_squeeze(v, true) : NULL;
                if (e && !strcmp(ms, e)) snprintf(out, cap, "%c", 'A' + j), done = true;
                free(v), free(e);
            }
            free(m);
        }
        for (int j = 0; j < n; j++) free(alt[j]);
    }
    /* 3. a lone letter; 4. every character that is a letter of an option */
    const size_t len = strlen(text);
    if (!done && len == 1 && toupper((unsigned char)text[0]) >= 'A' && toupper((unsigned char)text[0]) < 'A' + n) {
        snprintf(out, cap, "%c", toupper((unsigned char)text[0]));
        done = true;
    }
    for (size_t i = 0, o = 0; !done && i < len && o + 1 < cap; i++) {
        const int u = (unsigned char)text[i] < 128 ? toupper((unsigned char)text[i]) : -1;
        if (u >= 'A' && u < 'A' + n) out[o++] = (char)u, out[o] = '\0';
    }
    free(alt);
    free(bare);
}

double metrics_mb_score(enum metrics_mb_rule rule, const char *pred, const char *gt, const char *const *choices,
                        int n_choices) {
    char *p = metrics_mb_normalise(pred), *g = metrics_mb_normalise(gt);
    double score = -1.0;
    if (!p || !g) goto done;
    switch (rule) {
    case MB_RULE_NEEDLE: /* gt in pred.split() */
        score = 0.0;
        for (char *w = strtok(p, " \t\n\v\f\r\x1c\x1d\x1e\x1f"); w; w = strtok(NULL, " \t\n\v\f\r\x1c\x1d\x1e\x1f"))
            if (!strcmp(w, g)) score = 1.0;
        break;
    case MB_RULE_CONTAINS: score = strstr(p, g) ? 1.0 : 0.0; break;
    case MB_RULE_ROUGE:
        if (*g) score = *p ? metrics_mb_rouge_l(p, g) : 0.0;
        break;
    case MB_RULE_CHOICE: {
        char **c = calloc((size_t)n_choices + 1, sizeof *c);
        int truth = -1;
        bool ok = c != NULL;
        for (int k = 0; ok && k < n_choices; k++) ok = (c[k] = metrics_mb_normalise(choices[k])) != NULL;
        for (int k = n_choices - 1; ok && k >= 0; k--) truth = strcmp(c[k], g) ? truth : k;
        if (ok && truth >= 0) {
            char picked[128];
            metrics_mb_choice(p, (const char *const *)c, n_choices, picked, sizeof picked);
            score = picked[0] == 'A' + truth && picked[1] == '\0' ? 1.0 : 0.0;
        }
        for (int k = 0; c && k < n_choices; k++) free(c[k]);
        free(c);
        break;
    }
    }
done:
    free(p), free(g);
    return score;
}
