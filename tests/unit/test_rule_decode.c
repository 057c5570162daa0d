/* The decode stage's rules (src/kv/policy/decode.c). */
#include "policy_fixture.h"

/* A decode stage's scores for a head n0 entries long after compression. */
static void decode_score(struct kv_score_in *in, int n0, float *score) {
    in->n0 = n0;
    kv_decode_rule(in->p->decode)->score(in, score);
}

/* Decode stage rules on one head, and that a few evictions (the linear
 * scan) choose what the full sort chooses. */
static void test_decode_rules(void **st) {
    (void)st;
    const int n = 30, target = 27;
    struct kv_policy p;
    struct kv_cache c;
    float score[30], tmp[30];
    int idx[30];
    /* window: sinks, then the newest. */
    kv_policy_parse("snapkv+decode=window:sinks=2", &p);
    make_head(&c, n, 8, 1);
    struct kv_head *h = kv_cache_head(&c, 0, 0);
    struct kv_score_in in = {.p = &p, .h = h, .head_dim = 8, .keep = target, .scratch = tmp};
    decode_score(&in, 20, score);
    assert_int_equal(kv_select_keep(&c, 0, 0, score, target, idx), KVF_OK);
    assert_int_equal(h->n, target);
    assert_int_equal(h->tag[0].pos, 0);
    assert_int_equal(h->tag[1].pos, 1);
    assert_int_equal(h->tag[2].pos, 5);
    kv_cache_free(&c);
    /* fixed-distance: n0 = 20, distance 4 -> entries 16, 17, 18 go. */
    kv_policy_parse("snapkv+decode=fixed-distance:distance=4", &p);
    make_head(&c, n, 8, 1);
    h = kv_cache_head(&c, 0, 0);
    in.h = h;
    decode_score(&in, 20, score);
    assert_int_equal(kv_select_keep(&c, 0, 0, score, target, idx), KVF_OK);
    for (int i = 0; i < target; i++) assert_int_equal(h->tag[i].pos, i < 16 ? i : i + 3);
    kv_cache_free(&c);
    /* h2o: the smallest sums outside the recent share (0.5 x 27 -> 14). */
    kv_policy_parse("snapkv+decode=h2o", &p);
    for (int evict = 1; evict <= 12; evict++) { /* scan (<= 8) and sort paths */
        make_head(&c, n, 8, 1);
        h = kv_cache_head(&c, 0, 0);
        in.h = h;
        in.keep = n - evict;
        unsigned s = 5;
        double x[30];
        for (int j = 0; j < n; j++) {
            h->acc[j * KV_ACC_N + KV_ACC_SUM] = (float)(int)(fabsf(frand(&s)) * 6); /* many ties */
            x[j] = j >= n - (int)floor(in.keep * 0.5 + 0.5) ? 1e30 : h->acc[j * KV_ACC_N + KV_ACC_SUM];
        }
        int want[30];
        naive_top(x, n, n - evict, want);
        decode_score(&in, 0, score);
        assert_int_equal(kv_select_keep(&c, 0, 0, score, n - evict, idx), KVF_OK);
        assert_int_equal(h->n, n - evict);
        for (int i = 0; i < n - evict; i++)
            if (h->tag[i].pos != want[i])
                fail_msg("evict %d: entry %d is %d, want %d", evict, i, h->tag[i].pos, want[i]);
        kv_cache_free(&c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
