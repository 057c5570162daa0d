/* The pool stage (src/kv/policy/pool.c) against a direct sum. */
#include "policy_fixture.h"

/* The pool stage against a direct sum: finite scores averaged over width
 * neighbours (zero padding, infinite neighbours count 0), infinite ones kept. */
static void test_pool(void **st) {
    (void)st;
    unsigned seed = 7;
    for (int n = 1; n <= 40; n += 13)
        for (int width = 1; width <= 7; width += 2) {
            float score[40], want[40], tmp[40];
            for (int j = 0; j < n; j++) score[j] = j % 9 == 4 ? INFINITY : j % 11 == 6 ? -INFINITY : frand(&seed);
            for (int j = 0; j < n; j++) {
                double sum = 0;
                for (int t = j - width / 2; t <= j + width / 2; t++)
                    if (t >= 0 && t < n && isfinite(score[t])) sum += score[t];
                want[j] = isfinite(score[j]) ? (float)(sum / width) : score[j];
            }
            kv_pool_scores(score, n, width, tmp);
            for (int j = 0; j < n; j++)
                if (!(score[j] == want[j] || fabsf(score[j] - want[j]) < 1e-6f))
                    fail_msg("n %d width %d entry %d: %g, want %g", n, width, j, score[j], want[j]);
        }
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("h2o:budget=0.3+pool=avg", &p), KVF_OK);
    assert_true(p.pool == KV_POOL_AVG && p.width == 5 && p.method == KV_H2O && p.budget == 0.3);
    assert_int_equal(kv_policy_parse("csp+pool=avg:width=3+decode=h2o", &p), KVF_OK);
    assert_true(p.pool == KV_POOL_AVG && p.width == 3 && p.decode == KV_DECODE_H2O);
    const char *bad[] = {"h2o+pool=avg:width=4", "h2o+pool=max", "h2o+pool=avg:kernel=3", "h2o+pool=avg:width=0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (kv_policy_parse(bad[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
