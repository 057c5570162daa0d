/* ROUGE-L F1 against hand-computed values and a naive full-table LCS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lab/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_rouge_hand(void **st) {
    (void)st;
    /* LCS("the cat sat on the mat", "the cat lay on a mat") = the cat on mat: 4 of 6 and 6 */
    assert_true(fabs(metrics_rouge_l_f1("the cat sat on the mat", "the cat lay on a mat") - 4.0 / 6.0) < 1e-12);
    /* rouge_score's tokeniser: case and punctuation do not count */
    assert_true(fabs(metrics_rouge_l_f1("The Cat, sat!", "the cat sat") - 1.0) < 1e-12);
    /* p = 2/3, r = 2/4: F = 2pr/(p+r) = 4/7 */
    assert_true(fabs(metrics_rouge_l_f1("a b c", "a x b y") - 4.0 / 7.0) < 1e-12);
    assert_true(metrics_rouge_l_f1("", "a") == 0.0 && metrics_rouge_l_f1("a", "") == 0.0);
    assert_true(metrics_rouge_l_f1("...", "!!") == 0.0);
    assert_true(metrics_rouge_l_f1("x y", "a b") == 0.0);
}

/* The whole (n+1) x (m+1) table, on single-letter tokens. */
static int lcs_naive(const char *a, const char *b) {
    const int n = (int)strlen(a), m = (int)strlen(b);
    int *t = calloc((size_t)(n + 1) * (m + 1), sizeof *t);
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++)
            t[i * (m + 1) + j] = a[i - 1] == b[j - 1] ? t[(i - 1) * (m + 1) + j - 1] + 1
                                 : t[(i - 1) * (m + 1) + j] > t[i * (m + 1) + j - 1] ? t[(i - 1) * (m + 1) + j]
                                                                                   : t[i * (m + 1) + j - 1];
    const int r = t[n * (m + 1) + m];
    free(t);
    return r;
}

static void test_rouge_random(void **st) {
    (void)st;
    unsigned x = 12345;
    for (int k = 0; k < 500; k++) {
        char a[40], b[40], wa[120], wb[120];
        const int n = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 30,
                  m = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 30;
        for (int i = 0; i < n; i++) a[i] = (char)('a' + ((x = x * 1103515245u + 12345u) >> 16) % 4);
        for (int i = 0; i < m; i++) b[i] = (char)('a' + ((x = x * 1103515245u + 12345u) >> 16) % 4);
        a[n] = b[m] = '\0';
        int o = 0;
        for (int i = 0; i < n; i++) o += sprintf(wa + o, "%c ", a[i]);
        o = 0;
        for (int i = 0; i < m; i++) o += sprintf(wb + o, "%c-", b[i]);
        const double l = lcs_naive(a, b), want = l > 0 ? 2 * (l / n) * (l / m) / (l / n + l / m) : 0;
        assert_true(fabs(metrics_rouge_l_f1(wa, wb) - want) < 1e-12);
    }
}

static void test_contains(void **st) {
    (void)st;
    assert_true(metrics_contains("The password is 04213.", "04213"));
    assert_true(metrics_contains("PASSWORD", "password"));
    assert_false(metrics_contains("The number is 0421", "04213"));
    assert_false(metrics_contains("", "1"));
    /* RULER's string_match_all: the share of the expected strings found, case ignored */
    assert_true(metrics_match_all("Values: 111, 222 and 333.", "111\n222\n333\n444") == 0.75);
    assert_true(metrics_match_all("JZXMT mdirs", "jzxmt\nMDIRS") == 1.0);
    assert_true(metrics_match_all("nothing here", "a1b2") == 0.0);
    assert_true(metrics_match_all("anything", "") == 0.0);
    assert_true(metrics_match_all("", "x") == 0.0);
}

/* MileBench's rules worked by hand (tests/ref/milebench_ref.py runs
 * thousands more against Python and the rouge package). */
static void expect_normalised(const char *in, const char *want) {
    char *got = metrics_mb_normalise(in);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_milebench(void **st) {
    (void)st;
    expect_normalised("Hello, World.", "hello world");       /* ", " touches a space: dropped */
    expect_normalised("a-b", "a b");                         /* away from spaces: a space */
    expect_normalised("1,000 apples; (2) pears!", "1000 apples 2 pears"); /* digit,digit: all dropped */
    expect_normalised("3.14 is pi.", "3.14 is pi");           /* a period before a digit stays */
    expect_normalised(" 'Quoted'\n", "quoted");
    /* the package's sets: LCS "the cat the" counts {the, cat}: r = 2/5, p = 2/3 */
    assert_true(fabs(metrics_mb_rouge_l("the cat the cat sat", "the cat sat on the mat") - 0.49999999531250006) <
                1e-15);
    const char *const opts[] = {"red", "blue"};
    char out[16];
    metrics_mb_choice("b blue", opts, 2, out, sizeof out);
    assert_string_equal(out, "B");
    metrics_mb_choice("", opts, 2, out, sizeof out);
    assert_string_equal(out, "C"); /* MileBench's answer for an empty output */
    metrics_mb_choice("the answer is b", opts, 2, out, sizeof out);
    assert_string_equal(out, "AB"); /* every letter of an option: the 'a' of "answer" too */
    assert_true(metrics_mb_score(MB_RULE_CHOICE, "B. Blue!", "blue", opts, 2) == 1.0);
    assert_true(metrics_mb_score(MB_RULE_CHOICE, "Red", "blue", opts, 2) == 0.0);
    assert_true(metrics_mb_score(MB_RULE_CHOICE, "Red", "green", opts, 2) == -1.0); /* not an option */
    assert_true(metrics_mb_score(MB_RULE_NEEDLE, "The password is 4213.", "4213", NULL, 0) == 1.0);
    assert_true(metrics_mb_score(MB_RULE_NEEDLE, "The password is 42134.", "4213", NULL, 0) == 0.0);
    assert_true(metrics_mb_score(MB_RULE_CONTAINS, "The password is 42134.", "4213", NULL, 0) == 1.0);
    assert_true(metrics_mb_score(MB_RULE_ROUGE, "", "a cat", NULL, 0) == 0.0);
    assert_true(metrics_mb_score(MB_RULE_ROUGE, "a cat", "...", NULL, 0) == -1.0); /* empty ground truth */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rouge_hand), cmocka_unit_test(test_rouge_random), cmocka_unit_test(test_contains),
        cmocka_unit_test(test_milebench),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
