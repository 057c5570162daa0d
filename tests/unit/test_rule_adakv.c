/* Ada-KV's head-wise budgets (src/kv/policy/adakv.c). */
#include "policy_fixture.h"

/* Ada-KV's head-wise budgets against a direct reading of the rule: each
 * head's best floor(floor x per_head) entries first, then the best of the
 * rest over the whole layer, one at a time (ties: lower head, then earlier
 * entry), until the layer holds n_head x per_head. */
static void test_adaptive(void **st) {
    (void)st;
    unsigned seed = 11;
    for (int trial = 0; trial < 300; trial++) {
        const int H = 1 + trial % 4, per = 1 + trial % 9;
        const double floor_share = (trial % 5) / 4.0;
        int n[4], total = 0;
        float score[4 * 24], orig[4 * 24];
        for (int g = 0; g < H; g++) n[g] = 1 + (int)((frand(&seed) + 1.0f) * 11.0f), total += n[g];
        for (int j = 0; j < total; j++) {
            const float r = frand(&seed);
            /* coarse values make ties; a few entries are always kept */
            orig[j] = score[j] = r > 0.9f ? INFINITY : trial % 3 == 0 ? floorf(r * 4.0f) : r;
        }
        char want[4 * 24] = {0};
        const int safe = (int)floor(floor_share * per);
        int held = 0;
        for (int g = 0, base = 0; g < H; base += n[g++])
            for (int k = 0; k < n[g]; k++) { /* the head's safe best, or its infinite ones */
                int best = -1;
                for (int j = base; j < base + n[g]; j++)
                    if (!want[j] && (best < 0 || orig[j] > orig[best])) best = j;
                if (k < safe || orig[best] == INFINITY) want[best] = 1, held++;
            }
        while (held < H * per && held < total) {
            int best = -1;
            for (int j = 0; j < total; j++)
                if (!want[j] && (best < 0 || orig[j] > orig[best])) best = j;
            want[best] = 1, held++;
        }
        int out[4 * 24], count[4], scratch[24];
        const int kept = kv_adaptive_select(H, n, score, per, floor_share, out, count, scratch);
        assert_int_equal(kept, held);
        for (int g = 0, o = 0, base = 0; g < H; base += n[g++]) {
            int c = 0;
            for (int j = base; j < base + n[g]; j++) c += want[j];
            if (count[g] != c) fail_msg("trial %d head %d: keeps %d, the rule %d", trial, g, count[g], c);
            for (int k = 0; k < count[g]; k++, o++) {
                assert_true(want[base + out[o]]);
                if (k > 0) assert_true(out[o] > out[o - 1]);
            }
        }
    }
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("snapkv:budget=0.2+budget=adaptive", &p), KVF_OK);
    assert_true(p.alloc == KV_ALLOC_ADAPTIVE && p.head_floor == 0.2);
    assert_int_equal(kv_policy_parse("h2o+budget=adaptive:floor=0.5+decode=h2o", &p), KVF_OK);
    assert_true(p.alloc == KV_ALLOC_ADAPTIVE && p.head_floor == 0.5 && p.decode == KV_DECODE_H2O);
    const char *bad[] = {"snapkv+budget=adaptive:floor=1.5", "snapkv+budget=adaptive:beta=3", "full+budget=adaptive",
                         "elastic+budget=adaptive", "prefixkv+budget=adaptive", "csp+budget=adaptive",
                         "lightkv+budget=adaptive"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (kv_policy_parse(bad[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adaptive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
