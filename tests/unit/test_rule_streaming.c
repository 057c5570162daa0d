/* StreamingLLM (src/kv/policy/streaming.c): the sinks and the most recent entries. */
#include "policy_fixture.h"

static void test_streaming(void **st) {
    (void)st;
    struct kv_cache c;
    make_head(&c, 30, 8, 1);
    struct kv_policy p;
    kv_policy_parse("streaming:sinks=4,budget=10", &p);
    const int want[] = {0, 1, 2, 3, 24, 25, 26, 27, 28, 29};
    check_kept(&c, &p, NULL, 10, want, 10);
    kv_cache_free(&c);
    /* Always-kept entries win over the budget: 6 sinks with a budget of 3. */
    make_head(&c, 30, 8, 1);
    kv_policy_parse("streaming:sinks=6,budget=3", &p);
    const int sinks[] = {0, 1, 2, 3, 4, 5};
    check_kept(&c, &p, NULL, 3, sinks, 6);
    kv_cache_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streaming),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
