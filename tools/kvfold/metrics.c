/* ROUGE-L by the longest common subsequence of tokens, two DP rows. */
#include "metrics.h"

#include <ctype.h>
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

bool metrics_contains(const char *output, const char *answer) {
    const size_t n = strlen(answer);
    for (const char *p = output; *p; p++)
        if (strncasecmp(p, answer, n) == 0) return true;
    return n == 0;
}
