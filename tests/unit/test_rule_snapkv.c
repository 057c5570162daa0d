/* SnapKV (src/kv/policy/snapkv.c): the window's attention, pooled, against a naive computation. */
#include "policy_fixture.h"

static void test_snapkv(void **st) {
    (void)st;
    const int n = 40, W = 6, K = 5, keep = 15;
    struct kv_cache c;
    make_head(&c, n, 8, 2);
    unsigned s = 3;
    float win[40];
    for (int j = 0; j < n; j++) win[j] = fabsf(frand(&s));
    /* Naive: avg_pool1d(kernel 5, padding 2, count_include_pad) over the
     * entries before the window; the window is kept. */
    double pooled[40];
    for (int j = 0; j < n - W; j++) {
        double a = 0;
        for (int t = j - K / 2; t <= j + K / 2; t++) a += t >= 0 && t < n - W ? win[t] : 0.0;
        pooled[j] = a / K;
    }
    int want[40];
    naive_top(pooled, n - W, keep - W, want);
    for (int i = 0; i < W; i++) want[keep - W + i] = n - W + i;
    struct kv_policy p;
    kv_policy_parse("snapkv:budget=15,window=6,kernel=5", &p);
    check_kept(&c, &p, win, keep, want, keep);
    kv_cache_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapkv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
