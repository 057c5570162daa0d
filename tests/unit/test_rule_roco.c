/* RoCo (src/kv/policy/roco.c). */
#include "policy_fixture.h"

/* RoCo: the last 10 and the largest standard deviations (recent x keep in
 * all) are protected; the rest compete by mean attention. */
static void test_roco(void **st) {
    (void)st;
    const int n = 60, keep = 20;
    struct kv_cache c;
    make_head(&c, n, 8, 13);
    struct kv_head *h = kv_cache_head(&c, 0, 0);
    unsigned s = 77;
    double sd[60], mean[60];
    for (int j = 0; j < n; j++) {
        float *a = h->acc + j * KV_ACC_N;
        a[KV_ACC_COUNT] = (float)(n - j);
        a[KV_ACC_SUM] = fabsf(frand(&s)) * a[KV_ACC_COUNT] * 0.1f;
        mean[j] = a[KV_ACC_SUM] / a[KV_ACC_COUNT];
        a[KV_ACC_SQ] = (float)(a[KV_ACC_COUNT] * (mean[j] * mean[j] + 0.01 * fabsf(frand(&s))));
        const double v = a[KV_ACC_SQ] / a[KV_ACC_COUNT] - mean[j] * mean[j];
        sd[j] = j >= n - 10 || j < 4 ? 1e30 : sqrt(v > 0 ? v : 0);
    }
    /* Naive: the 4 sinks and the last 10 are protected, then the largest
     * deviations up to 18 (0.9 x 20) in all; the rest are kept by mean. */
    int prot[60], want[60], nw = 0;
    naive_top(sd, n, 18, prot);
    char is_prot[60] = {0};
    for (int i = 0; i < 18; i++) is_prot[prot[i]] = 1;
    int n_prot = 0;
    for (int j = 0; j < n; j++) n_prot += is_prot[j];
    double m2[60];
    for (int j = 0; j < n; j++) m2[j] = is_prot[j] ? 1e30 : mean[j];
    naive_top(m2, n, keep > n_prot ? keep : n_prot, want);
    nw = keep > n_prot ? keep : n_prot;
    struct kv_policy p;
    kv_policy_parse("roco:budget=20,recent=0.9", &p);
    check_kept(&c, &p, NULL, keep, want, nw);
    kv_cache_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roco),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
