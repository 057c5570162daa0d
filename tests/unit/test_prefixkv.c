/* PrefixKV's layer budgets on hand-made importance curves: the threshold
 * found by the binary search, the exact total after scaling (also where no
 * threshold meets the budget), and the Gini coefficient of each curve. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kv/policy.h"

#include <math.h>
#include <stdlib.h>

/* Layer 0 concentrated (one entry holds 0.91), layer 1 uniform: keeping 10 of
 * 20 entries leaves layer 0 one entry and layer 1 nine (p ~ 0.9: the
 * threshold at which both keep the same share of their information). */
static void test_concentrated_vs_uniform(void **st) {
    (void)st;
    float imp[2][10];
    for (int j = 0; j < 10; j++) imp[0][j] = j == 3 ? 0.91f : 0.01f, imp[1][j] = 1.0f;
    int keep[2];
    double gini[2], p;
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, NULL, NULL, 10, 0.5, keep, gini, &p), KVF_OK);
    assert_int_equal(keep[0], 1);
    assert_int_equal(keep[1], 9);
    assert_true(p > 0.8 && p <= 0.91);
    assert_true(fabs(gini[1]) < 1e-9);             /* uniform */
    /* Concentrated: 2 x (sum of the curve's trapezoids)/n - 1, by hand. */
    double area = 0, prev = 0;
    for (int k = 1; k <= 10; k++) {
        const double c = (0.91 + 0.01 * (k - 1)) / 1.0;
        area += (prev + c) / 2, prev = c;
    }
    assert_true(fabs(gini[0] - (2 * area / 10 - 1)) < 1e-6);
    assert_true(gini[0] > 0.7);
}

/* Two identical step curves: every p gives both layers the same size, so an
 * odd total is never met by the search; scaling still spends it exactly. */
static void test_no_exact_threshold(void **st) {
    (void)st;
    float imp[2][8];
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < 8; j++) imp[l][j] = (float)(8 - j);
    for (long total = 2; total <= 16; total++) {
        int keep[2];
        double p;
        assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 8, NULL, NULL, total, 0.5, keep, NULL, &p), KVF_OK);
        assert_int_equal(keep[0] + keep[1], total);
        assert_true(abs(keep[0] - keep[1]) <= 1);
    }
}

/* The tolerance stops the search early: with tol 5 the first p whose total
 * is within 5 entries is taken, and the result still sums exactly. */
static void test_tolerance_and_bounds(void **st) {
    (void)st;
    enum { L = 4, N = 100 };
    static float imp[L][N];
    for (int l = 0; l < L; l++)
        for (int j = 0; j < N; j++) imp[l][j] = powf((float)(j + 1), -(float)(l + 1) * 0.7f); /* steeper per layer */
    int keep[L];
    double p;
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, NULL, 80, 5.0, keep, NULL, &p), KVF_OK);
    int sum = 0;
    for (int l = 0; l < L; l++) sum += keep[l], assert_true(keep[l] >= 1 && keep[l] <= N);
    assert_int_equal(sum, 80);
    assert_true(keep[0] > keep[1] && keep[1] > keep[2] && keep[2] >= keep[3]); /* flatter layers keep more */
    /* Every layer whole, and every layer one entry. */
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, NULL, L * N, 0.5, keep, NULL, &p), KVF_OK);
    for (int l = 0; l < L; l++) assert_int_equal(keep[l], N);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, NULL, L, 0.5, keep, NULL, &p), KVF_OK);
    for (int l = 0; l < L; l++) assert_int_equal(keep[l], 1);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, NULL, L - 1, 0.5, keep, NULL, &p), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, NULL, L * N + 1, 0.5, keep, NULL, &p),
                     KVF_ERR_INVALID_ARG);
    /* A floor: the steep layers, searched to a few entries, are raised to it and the flat one pays;
     * the total stays exact; a floor over the even share is refused, as is one below 1. */
    const int f15[L] = {15, 15, 15, 15}, f20[L] = {20, 20, 20, 20}, f21[L] = {21, 21, 21, 21}, f0[L] = {0, 1, 1, 1};
    int plain[L];
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, NULL, 80, 0.5, plain, NULL, &p), KVF_OK);
    assert_true(plain[3] < 15);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, f15, 80, 0.5, keep, NULL, &p), KVF_OK);
    sum = 0;
    for (int l = 0; l < L; l++) sum += keep[l], assert_true(keep[l] >= 15 && keep[l] <= N);
    assert_int_equal(sum, 80);
    assert_true(keep[3] == 15 && keep[0] < plain[0]);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, f20, 80, 0.5, keep, NULL, &p), KVF_OK);
    for (int l = 0; l < L; l++) assert_int_equal(keep[l], 20);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, f21, 80, 0.5, keep, NULL, &p), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, f0, 80, 0.5, keep, NULL, &p), KVF_ERR_INVALID_ARG);
    /* A layer with no importance at all counts as uniform. */
    for (int j = 0; j < N; j++) imp[1][j] = 0.0f;
    assert_int_equal(kv_prefix_budgets(&imp[0][0], L, N, NULL, NULL, 80, 0.5, keep, NULL, &p), KVF_OK);
    assert_true(keep[1] >= keep[0]);
}

/* Layers of different lengths (a sliding-window layer holds its window):
 * equal uniform curves share the total in proportion to the lengths, no
 * layer gets more than it holds, each layer keeps its own floor, and a
 * floor over a layer's length is refused. */
static void test_layer_lengths(void **st) {
    (void)st;
    float imp[2][10];
    for (int j = 0; j < 10; j++) imp[0][j] = imp[1][j] = 1.0f;
    const int lens[2] = {10, 4}, f54[2] = {5, 4};
    int keep[2];
    double p;
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, lens, NULL, 7, 0.5, keep, NULL, &p), KVF_OK);
    assert_int_equal(keep[0], 5);
    assert_int_equal(keep[1], 2);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, lens, NULL, 14, 0.5, keep, NULL, &p), KVF_OK);
    assert_int_equal(keep[0], 10);
    assert_int_equal(keep[1], 4);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, lens, NULL, 15, 0.5, keep, NULL, &p), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, lens, f54, 9, 0.5, keep, NULL, &p), KVF_OK);
    assert_int_equal(keep[0], 5);
    assert_int_equal(keep[1], 4);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, lens, f54, 8, 0.5, keep, NULL, &p), KVF_ERR_INVALID_ARG);
    const int f55[2] = {5, 5}, f81[2] = {8, 1};
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, lens, f55, 12, 0.5, keep, NULL, &p), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, lens, f81, 10, 0.5, keep, NULL, &p), KVF_OK);
    assert_true(keep[0] >= 8 && keep[1] >= 1 && keep[0] + keep[1] == 10);
    const int bad[2] = {10, 0}, over[2] = {11, 4};
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, bad, NULL, 5, 0.5, keep, NULL, &p), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_prefix_budgets(&imp[0][0], 2, 10, over, NULL, 5, 0.5, keep, NULL, &p), KVF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concentrated_vs_uniform),
        cmocka_unit_test(test_no_exact_threshold),
        cmocka_unit_test(test_tolerance_and_bounds),
        cmocka_unit_test(test_layer_lengths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
