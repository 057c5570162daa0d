/* H2O (src/kv/policy/h2o.c): the recent entries and the heavy hitters. */
#include "policy_fixture.h"

/* H2O: the last recent x keep entries, then the largest attention sums. */
static void test_h2o(void **st) {
    (void)st;
    const int n = 50, keep = 10;
    struct kv_cache c;
    make_head(&c, n, 8, 9);
    unsigned s = 21;
    float sum[50];
    double x[50];
    for (int j = 0; j < n; j++) x[j] = sum[j] = fabsf(frand(&s)) * 3.0f;
    int want[50];
    naive_top(x, n - 5, keep - 5, want); /* recent=0.5 of 10: the last 5 are kept anyway */
    for (int i = 0; i < 5; i++) want[5 + i] = n - 5 + i;
    struct kv_policy p;
    kv_policy_parse("h2o:budget=10,recent=0.5", &p);
    check_kept(&c, &p, sum, keep, want, keep);
    kv_cache_free(&c);
    assert_int_equal(kv_policy_parse("h2o:recent=1.5", &p), KVF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h2o),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
