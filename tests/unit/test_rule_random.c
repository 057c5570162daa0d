/* The random rules (src/kv/policy/random.c). */
#include "policy_fixture.h"

static void test_imgrand(void **st) {
    (void)st;
    struct kv_cache c;
    make_head(&c, 40, 8, 6); /* modality alternates in runs of 5: 20 text, 20 image */
    struct kv_policy p;
    kv_policy_parse("imgrand:budget=26", &p);
    struct kv_head *h = kv_cache_head(&c, 0, 0);
    float score[40];
    int idx[40];
    const struct kv_score_in in = {.p = &p, .h = h, .head_dim = 8, .seed = 11};
    kv_rule_of(p.method)->score(&in, score); /* imgrand through its descriptor */
    assert_int_equal(kv_select_keep(&c, 0, 0, score, 26, idx), KVF_OK);
    int text = 0, image = 0;
    for (int i = 0; i < h->n; i++) *(h->tag[i].modality == KVF_MOD_TEXT ? &text : &image) += 1;
    assert_int_equal(text, 20); /* every text entry survives */
    assert_int_equal(image, 6);
    for (int i = 1; i < h->n; i++) assert_true(h->tag[i].pos > h->tag[i - 1].pos);
    kv_cache_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_imgrand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
