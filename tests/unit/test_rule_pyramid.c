/* PyramidKV's budget stage (src/kv/policy/pyramid.c): the layers' budgets. */
#include "policy_fixture.h"

/* PyramidKV's layer budgets, worked by hand: N = 2247, C = 449, W = 32 ->
 * C-W = 417, min = 20, max = 814, step = (814-20)/29 = 27. */
static void test_pyramid(void **st) {
    (void)st;
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("pyramidkv:budget=0.2", &p), KVF_OK);
    assert_int_equal(kv_policy_keep_count(&p, 2247), 449);
    assert_int_equal(kv_policy_layer_keep(&p, 2247, 0, 30), 814 + 32);
    assert_int_equal(kv_policy_layer_keep(&p, 2247, 1, 30), 814 - 27 + 32);
    assert_int_equal(kv_policy_layer_keep(&p, 2247, 29, 30), 814 - 29 * 27 + 32);
    int total = 0;
    for (int l = 0; l < 30; l++) total += kv_policy_layer_keep(&p, 2247, l, 30);
    assert_true(abs(total - 30 * 449) <= 30 * 30); /* the pyramid spends about the uniform total */
    assert_int_equal(kv_pyramid_keep(&p, 800, 449, 0, 30), 449); /* N < 2(C-W): uniform */
    assert_int_equal(kv_pyramid_keep(&p, 2247, 449, 0, 1), 449);  /* one layer: uniform */
    kv_policy_parse("snapkv:budget=0.2", &p);
    assert_int_equal(kv_policy_layer_keep(&p, 2247, 0, 30), 449);
    assert_int_equal(kv_policy_parse("pyramidkv:beta=0", &p), KVF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pyramid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
