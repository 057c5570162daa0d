/* The rules that read the keys alone, KeyDiff and K-norm (src/kv/policy/keydiff.c,
 * knorm.c), against a naive computation in double. */
#include "policy_fixture.h"

static void test_key_rules(void **st) {
    (void)st;
    const int n = 33, d = 8, keep = 9;
    for (int rule = 0; rule < 2; rule++) {
        struct kv_cache c;
        make_head(&c, n, d, 4 + rule);
        const float *k = kv_cache_head(&c, 0, 0)->k;
        double x[33], anchor[8] = {0};
        for (int j = 0; j < n; j++) {
            double nn = 0;
            for (int e = 0; e < d; e++) nn += (double)k[j * d + e] * k[j * d + e];
            for (int e = 0; e < d; e++) anchor[e] += k[j * d + e] / sqrt(nn);
        }
        for (int j = 0; j < n; j++) {
            double nn = 0, dot = 0, an = 0;
            for (int e = 0; e < d; e++)
                nn += (double)k[j * d + e] * k[j * d + e], dot += k[j * d + e] * anchor[e], an += anchor[e] * anchor[e];
            x[j] = rule == 0 ? -dot / (sqrt(nn) * sqrt(an)) : -sqrt(nn);
        }
        int want[33];
        naive_top(x, n, keep, want);
        struct kv_policy p;
        kv_policy_parse(rule == 0 ? "keydiff:budget=9" : "knorm:budget=9", &p);
        check_kept(&c, &p, NULL, keep, want, keep);
        kv_cache_free(&c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
