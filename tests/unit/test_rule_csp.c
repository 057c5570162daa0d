/* Cross-Self Pruning (src/kv/policy/csp.c). */
#include "policy_fixture.h"

/* CSP: the top by cross, the top by self (outside the recent window), the
 * union filled up from the combined ranking, and the recent window. */
static void test_csp(void **st) {
    (void)st;
    const int n = 40, keep = 16;
    struct kv_cache c;
    make_head(&c, n, 8, 3);
    struct kv_head *h = kv_cache_head(&c, 0, 0);
    float self[40], cross[40], score[40], tmp[40];
    int iscr[40], idx[40];
    unsigned sd = 17;
    /* Lists that overlap: a few entries are on top of both. */
    for (int j = 0; j < n; j++) {
        self[j] = fabsf(frand(&sd));
        cross[j] = j % 7 == 0 ? 2.0f + self[j] : fabsf(frand(&sd));
    }
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("csp:budget=16,recent=0.25,cross_ratio=0.5", &p), KVF_OK);
    const struct kv_score_in in = {.p = &p, .h = h, .head_dim = 8, .keep = keep, .win_attn = self, .win_cross = cross,
                                   .scratch = tmp, .iscratch = iscr};
    kv_rule_of(KV_CSP)->score(&in, score);
    /* Naive: recent 4, k = 12: 6 by cross, 6 by self, union, fill by sum. */
    const int body = n - 4;
    char chosen[40] = {0};
    double x[40];
    int top[40];
    for (int j = 0; j < body; j++) x[j] = cross[j];
    naive_top(x, body, 6, top);
    for (int i = 0; i < 6; i++) chosen[top[i]] = 1;
    for (int j = 0; j < body; j++) x[j] = self[j];
    naive_top(x, body, 6, top);
    for (int i = 0; i < 6; i++) chosen[top[i]] = 1;
    int got = 0;
    for (int j = 0; j < body; j++) got += chosen[j];
    assert_true(got < 12); /* the lists overlapped, so slots were freed */
    for (int j = 0; j < body; j++) x[j] = chosen[j] ? 1e30 : (double)self[j] + cross[j];
    naive_top(x, body, 12, top);
    int want[40], nw = 0;
    for (int i = 0; i < 12; i++) want[nw++] = top[i];
    for (int j = body; j < n; j++) want[nw++] = j;
    assert_int_equal(kv_select_keep(&c, 0, 0, score, keep, idx), KVF_OK);
    assert_int_equal(h->n, keep);
    for (int i = 0; i < keep; i++)
        if (h->tag[i].pos != want[i]) fail_msg("csp: kept %d is %d, want %d", i, h->tag[i].pos, want[i]);
    kv_cache_free(&c);
    assert_int_equal(kv_policy_parse("csp:cross_ratio=1.5", &p), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_policy_parse("csp:n=2,decode_softmax=1,window=0", &p), KVF_OK);
    assert_true(p.nsm_n == 2.0 && p.decode_softmax && p.window == 0 && kv_policy_needs_window(&p));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
