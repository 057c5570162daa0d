/* Threshold eviction (src/kv/policy/threshold.c): what a head keeps against
 * a direct reading of the rule, and the specs it refuses. */
#include "policy_fixture.h"

static void test_keep_count(void **st) {
    (void)st;
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("knorm+budget=threshold:tau=0.5,last=2", &p), KVF_OK);
    assert_int_equal(p.alloc, KV_ALLOC_THRESHOLD);
    float s[10] = {0.9f, 0.1f, 0.5f, 0.6f, NAN, 0.49f, -3, 0.7f, 0.0f, 0.0f};
    /* 0.9, 0.5, 0.6, 0.7 clear 0.5 (NaN does not); the last 2 are kept whatever they score */
    assert_int_equal(kv_threshold_keep(&p, s, 10), 6);
    assert_true(isinf(s[8]) && isinf(s[9]) && s[7] == 0.7f);
    /* floor and ceil bound the share: 6 of 10 between 0.7 and 0.9 -> 7; between 0.1 and 0.3 -> 3 */
    assert_int_equal(kv_policy_parse("knorm+budget=threshold:tau=0.5,last=2,floor=0.7,ceil=0.9", &p), KVF_OK);
    assert_int_equal(kv_threshold_keep(&p, s, 10), 7);
    assert_int_equal(kv_policy_parse("knorm+budget=threshold:tau=0.5,last=2,floor=0.1,ceil=0.3", &p), KVF_OK);
    assert_int_equal(kv_threshold_keep(&p, s, 10), 3);
    /* the defaults: tau 0, the last 128 kept, no bounds */
    assert_int_equal(kv_policy_parse("keydiff+budget=threshold", &p), KVF_OK);
    assert_true(p.tau == 0 && p.last == 128 && p.head_floor == 0 && p.head_ceil == 1);
}

/* K-norm under a threshold keeps exactly the keys whose norm is at most
 * -tau, and the last ones. */
static void test_kept_set(void **st) {
    (void)st;
    const int n = 40, d = 8, last = 5;
    struct kv_cache c;
    make_head(&c, n, d, 9);
    const float *k = kv_cache_head(&c, 0, 0)->k;
    double norm[40], sorted[40];
    for (int j = 0; j < n; j++) {
        double nn = 0;
        for (int e = 0; e < d; e++) nn += (double)k[j * d + e] * k[j * d + e];
        norm[j] = sorted[j] = sqrt(nn);
    }
    for (int i = 0; i < n; i++) /* the median norm as the threshold */
        for (int j = i + 1; j < n; j++)
            if (sorted[j] < sorted[i]) {
                const double t = sorted[i];
                sorted[i] = sorted[j], sorted[j] = t;
            }
    const double tau = -(sorted[n / 2] + sorted[n / 2 - 1]) / 2;
    char spec[128];
    snprintf(spec, sizeof spec, "knorm+budget=threshold:tau=%.9g,last=%d", tau, last);
    struct kv_policy p;
    assert_int_equal(kv_policy_parse(spec, &p), KVF_OK);
    int want[40], n_want = 0;
    for (int j = 0; j < n; j++)
        if (-norm[j] >= p.tau || j >= n - last) want[n_want++] = j;
    float score[40], tmp[40];
    int idx[40];
    struct kv_head *h = kv_cache_head(&c, 0, 0);
    const struct kv_score_in in = {.p = &p, .h = h, .head_dim = d, .keep = n, .scratch = tmp};
    kv_rule_of(p.method)->score(&in, score);
    const int keep = kv_threshold_keep(&p, score, n);
    assert_int_equal(kv_select_keep(&c, 0, 0, score, keep, idx), KVF_OK);
    assert_int_equal(h->n, n_want);
    assert_true(n_want > last && n_want < n);
    for (int i = 0; i < n_want; i++) assert_int_equal(h->tag[i].pos, want[i]);
    kv_cache_free(&c);
}

static void test_refused(void **st) {
    (void)st;
    struct kv_policy p;
    const char *bad[] = {
        "keydiff:budget=0.3+budget=threshold",          /* a budget to ignore */
        "keydiff+budget=threshold:floor=0.5,ceil=0.4",  /* bounds crossed */
        "h2o+budget=threshold",                         /* h2o's decode stage keeps a budget */
        "keydiff+budget=threshold+decode=window",       /* so does any decode stage but recompress */
        "csp+budget=threshold",                         /* no per-entry ranking */
        "full+budget=threshold",                        /* nothing scored */
        "keydiff+budget=threshold:tau=x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (kv_policy_parse(bad[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad[i]);
    assert_int_equal(kv_policy_parse("keydiff+budget=threshold:tau=-0.1+decode=recompress:every=16", &p), KVF_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_count),
        cmocka_unit_test(test_kept_set),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
