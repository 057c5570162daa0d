/* Sampler: greedy cases, truncation stages against a reference computed here
 * from the definitions, empirical distributions, determinism, edge inputs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kvfold.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct kvf_sampler *make(float temp, int top_k, float top_p, float min_p, uint64_t seed) {
    struct kvf_sampler_params p = { .temp = temp, .top_k = top_k, .top_p = top_p, .min_p = min_p, .seed = seed };
    struct kvf_sampler *s = NULL;
    assert_int_equal(kvf_sampler_init(&p, &s), KVF_OK);
    assert_non_null(s);
    return s;
}

/* kvf_sampler_sample's token, or -1 when it fails. */
static int32_t draw(struct kvf_sampler *s, const float *logits, int n_vocab) {
    int32_t t = -1;
    return kvf_sampler_sample(s, logits, n_vocab, &t) == KVF_OK ? t : -1;
}

/* Draws n tokens and counts them per id. */
static void histogram(struct kvf_sampler *s, const float *logits, int n_vocab, int n, int *counts) {
    memset(counts, 0, sizeof(int) * (size_t)n_vocab);
    for (int i = 0; i < n; i++) {
        int32_t t = draw(s, logits, n_vocab);
        assert_true(t >= 0 && t < n_vocab);
        counts[t]++;
    }
}

/* Pearson chi-square of counts against probabilities expect[] (zeros must
 * not be drawn). */
static double chi_square(const int *counts, const double *expect, int k, int n) {
    double chi = 0;
    for (int i = 0; i < k; i++) {
        if (expect[i] == 0) {
            assert_int_equal(counts[i], 0);
            continue;
        }
        double e = expect[i] * n;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

static void softmax(const float *l, int n, float temp, double *out) {
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, l[i] / temp);
    for (int i = 0; i < n; i++)
        sum += out[i] = exp(l[i] / temp - m);
    for (int i = 0; i < n; i++)
        out[i] /= sum;
}

/* Chi-square critical value for 3 degrees of freedom at p = 0.001; with a
 * fixed seed the test is deterministic, the bound only has to be fair. */
#define CHI2_3DOF_999 16.27

static void test_greedy_is_argmax(void **state) {
    (void)state;
    float l[6] = { 0.1f, 2.5f, -1.0f, 2.5f, 0.0f, 1.0f };
    struct kvf_sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1);
    for (int i = 0; i < 10; i++)
        assert_int_equal(draw(s, l, 6), 1); /* first of the tied maxima */
    kvf_sampler_free(s);
    s = make(-1.0f, 40, 0.9f, 0.1f, 1);
    l[5] = 9.0f;
    assert_int_equal(draw(s, l, 6), 5);
    kvf_sampler_free(s);
}

/* The first largest logit (NaN skipped, 0 when none is above -inf), by a
 * plain scan, on lengths around the SIMD widths and a vocabulary's, with
 * ties, NaNs and infinities. */
static int32_t naive_argmax(const float *l, int n) {
    int32_t best = 0;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++)
        if (l[i] > bv) bv = l[i], best = i;
    return best;
}

static void test_greedy_against_a_scan(void **state) {
    (void)state;
    static const int lens[] = {1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 100, 1000, 49153};
    float *l = malloc(sizeof(float) * 49153);
    assert_non_null(l);
    struct kvf_sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1);
    uint32_t r = 12345;
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++)
        for (int trial = 0; trial < 8; trial++) {
            const int n = lens[k];
            for (int i = 0; i < n; i++) {
                r = r * 1664525u + 1013904223u;
                l[i] = (float)(r >> 20) / 256.0f; /* coarse: ties are common */
                if (trial % 4 == 1 && r % 5 == 0) l[i] = NAN;
                if (trial % 4 == 2) l[i] = r % 3 ? -INFINITY : NAN; /* nothing above -inf */
                if (trial % 4 == 3 && i == n / 2) l[i] = INFINITY;
            }
            assert_int_equal(draw(s, l, n), naive_argmax(l, n));
        }
    kvf_sampler_free(s);
    free(l);
}

static void test_top_k1_and_tiny_top_p_are_argmax(void **state) {
    (void)state;
    float l[5] = { 1.0f, 1.2f, 0.9f, 1.1f, 1.19f };
    struct kvf_sampler *a = make(5.0f, 1, 1.0f, 0.0f, 7);
    struct kvf_sampler *b = make(5.0f, 0, 1e-6f, 0.0f, 7);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(draw(a, l, 5), 1);
        assert_int_equal(draw(b, l, 5), 1);
    }
    kvf_sampler_free(a);
    kvf_sampler_free(b);
}

static void test_distribution_matches_softmax(void **state) {
    (void)state;
    const float l[4] = { 1.0f, 0.5f, -0.3f, 0.2f };
    const int n = 20000;
    int counts[4];
    double expect[4];
    const float temps[3] = { 1.0f, 0.5f, 2.0f };
    for (int t = 0; t < 3; t++) {
        struct kvf_sampler *s = make(temps[t], 0, 1.0f, 0.0f, 1234 + t);
        histogram(s, l, 4, n, counts);
        softmax(l, 4, temps[t], expect);
        assert_true(chi_square(counts, expect, 4, n) < CHI2_3DOF_999);
        for (int i = 0; i < 4; i++)
            assert_true(fabs((double)counts[i] / n - expect[i]) < 0.02);
        kvf_sampler_free(s);
    }
}

/* Probabilities 0.5, 0.3, 0.15, 0.05 (temp 1): each stage's survivors are
 * known by hand and must be drawn in renormalised proportion. */
static void test_truncation_stages(void **state) {
    (void)state;
    const float l[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) };
    const int n = 20000;
    int counts[4];
    struct {
        int top_k;
        float top_p, min_p;
        double expect[4];
    } cases[] = {
        { 2, 1.0f, 0.0f, { 0.625, 0.375, 0, 0 } },          /* top-k 2            */
        { 0, 0.7f, 0.0f, { 0.625, 0.375, 0, 0 } },          /* 0.5 < 0.7 <= 0.8   */
        { 0, 0.85f, 0.0f, { 0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0 } },
        { 0, 1.0f, 0.25f, { 0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0 } }, /* >= 0.125 */
        { 3, 0.9f, 0.4f, { 0.625, 0.375, 0, 0 } },          /* min-p 0.4: >= 0.2  */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct kvf_sampler *s = make(1.0f, cases[c].top_k, cases[c].top_p, cases[c].min_p, 99 + c);
        histogram(s, l, 4, n, counts);
        assert_true(chi_square(counts, cases[c].expect, 4, n) < CHI2_3DOF_999);
        kvf_sampler_free(s);
    }
}

/* A large vocabulary with top-p alone goes through the partial selection;
 * the drawn ids must be exactly the nucleus of a full sort. */
static int cmp_desc_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

static void test_large_vocab_nucleus(void **state) {
    (void)state;
    enum { V = 5000 };
    static float l[V];
    static double pr[V], sorted[V];
    static int counts[V];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < V; i++) { /* xorshift: fixed pseudo-random logits */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        l[i] = (float)((x >> 11) * 0x1.0p-53) * 6.0f;
    }
    softmax(l, V, 1.0f, pr);
    memcpy(sorted, pr, sizeof pr);
    qsort(sorted, V, sizeof sorted[0], cmp_desc_double);
    const double top_p = 0.5;
    double cum = 0, cut = 0;
    int m = 0;
    while (cum < top_p)
        cum += sorted[m], cut = sorted[m++];
    assert_true(m > 256); /* the nucleus needs more than the first selection round */
    struct kvf_sampler *s = make(1.0f, 0, (float)top_p, 0.0f, 5);
    histogram(s, l, V, 4000, counts);
    int distinct = 0;
    for (int i = 0; i < V; i++) {
        if (counts[i]) {
            assert_true(pr[i] >= cut);
            distinct++;
        }
    }
    assert_true(distinct > m / 2);
    kvf_sampler_free(s);
}

static void test_same_seed_same_sequence(void **state) {
    (void)state;
    float l[50];
    for (int i = 0; i < 50; i++)
        l[i] = sinf((float)i) * 2.0f;
    struct kvf_sampler *a = make(0.9f, 20, 0.95f, 0.02f, 2024);
    struct kvf_sampler *b = make(0.9f, 20, 0.95f, 0.02f, 2024);
    struct kvf_sampler *c = make(0.9f, 20, 0.95f, 0.02f, 2025);
    int differ = 0;
    for (int i = 0; i < 500; i++) {
        int32_t ta = draw(a, l, 50);
        assert_int_equal(ta, draw(b, l, 50));
        differ += ta != draw(c, l, 50);
    }
    assert_true(differ > 0);
    kvf_sampler_free(a);
    kvf_sampler_free(b);
    kvf_sampler_free(c);
}

static void test_edge_inputs(void **state) {
    (void)state;
    struct kvf_sampler *s = make(1.0f, 0, 1.0f, 0.0f, 3);
    float one[1] = { -3.0f };
    assert_int_equal(draw(s, one, 1), 0);
    /* -inf logits are never drawn */
    float l[4] = { -INFINITY, 0.0f, -INFINITY, 0.0f };
    int counts[4];
    histogram(s, l, 4, 2000, counts);
    assert_int_equal(counts[0] + counts[2], 0);
    assert_true(counts[1] > 800 && counts[3] > 800);
    /* all -inf: still a valid id */
    float ninf[3] = { -INFINITY, -INFINITY, -INFINITY };
    assert_int_equal(draw(s, ninf, 3), 0);
    /* NaN never wins and is never drawn */
    float nan4[4] = { NAN, 1.0f, NAN, 1.0f };
    histogram(s, nan4, 4, 1000, counts);
    assert_int_equal(counts[0] + counts[2], 0);
    /* all equal: uniform */
    float eq[4] = { 0.5f, 0.5f, 0.5f, 0.5f };
    double u[4] = { 0.25, 0.25, 0.25, 0.25 };
    histogram(s, eq, 4, 20000, counts);
    assert_true(chi_square(counts, u, 4, 20000) < CHI2_3DOF_999);
    /* +inf takes all the mass */
    float pinf[3] = { 1.0f, INFINITY, 2.0f };
    assert_int_equal(draw(s, pinf, 3), 1);
    /* bad arguments */
    int32_t t = 7;
    assert_int_equal(kvf_sampler_sample(s, NULL, 3, &t), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_sampler_sample(s, eq, 0, &t), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_sampler_sample(s, eq, 4, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(t, 7); /* untouched on failure */
    kvf_sampler_free(s);

    struct kvf_sampler_params p = kvf_sampler_default_params();
    p.top_p = NAN;
    struct kvf_sampler *bad = (struct kvf_sampler *)&p;
    assert_int_equal(kvf_sampler_init(&p, &bad), KVF_ERR_INVALID_ARG);
    assert_null(bad);
    assert_int_equal(kvf_sampler_init(NULL, NULL), KVF_ERR_INVALID_ARG);
    kvf_sampler_free(NULL);
}

/* llama.cpp's rule on a greedy sampler: a penalised token's positive logit
 * is divided by the penalty, a negative one multiplied; each distinct token
 * once; only the last penalty_last_n accepted tokens count; the caller's
 * logits stay as they were. */
static void test_repeat_penalty(void **state) {
    (void)state;
    struct kvf_sampler_params p = { .temp = 0, .penalty_repeat = 2.0f, .penalty_last_n = 2 };
    struct kvf_sampler *s = NULL;
    assert_int_equal(kvf_sampler_init(&p, &s), KVF_OK);
    const float l[4] = { 2.0f, 1.5f, -1.0f, -0.5f };
    assert_int_equal(draw(s, l, 4), 0);
    kvf_sampler_accept(s, 0); /* 2.0 -> 1.0 */
    assert_int_equal(draw(s, l, 4), 1);
    assert_true(l[0] == 2.0f);
    kvf_sampler_accept(s, 1); /* 1.5 -> 0.75 */
    assert_int_equal(draw(s, l, 4), 0);
    kvf_sampler_accept(s, 1); /* the window holds 1, 1: token 0 is free again */
    assert_int_equal(draw(s, l, 4), 0);
    const float once[2] = { 1.0f, 3.0f }, neg[2] = { -1.0f, -0.6f };
    assert_int_equal(draw(s, once, 2), 1); /* 3.0 -> 1.5: once, though accepted twice */
    assert_int_equal(draw(s, neg, 2), 0);  /* -0.6 -> -1.2 */
    kvf_sampler_accept(s, 1000); /* past the vocabulary: ignored when sampling */
    assert_int_equal(draw(s, neg, 2), 0);
    kvf_sampler_free(s);

    /* penalty 1 is off */
    p.penalty_repeat = 1.0f;
    assert_int_equal(kvf_sampler_init(&p, &s), KVF_OK);
    kvf_sampler_accept(s, 0);
    assert_int_equal(draw(s, l, 4), 0);
    kvf_sampler_free(s);
    kvf_sampler_accept(NULL, 0);
    p.penalty_repeat = NAN;
    assert_int_equal(kvf_sampler_init(&p, &s), KVF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_argmax),
        cmocka_unit_test(test_greedy_against_a_scan),
        cmocka_unit_test(test_top_k1_and_tiny_top_p_are_argmax),
        cmocka_unit_test(test_distribution_matches_softmax),
        cmocka_unit_test(test_truncation_stages),
        cmocka_unit_test(test_large_vocab_nucleus),
        cmocka_unit_test(test_same_seed_same_sequence),
        cmocka_unit_test(test_edge_inputs),
        cmocka_unit_test(test_repeat_penalty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
