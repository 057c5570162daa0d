/* Expected Attention's query statistics (src/kv/qstat.c, src/kv/policy/expected.c). */
#include "policy_fixture.h"

/* Query statistics (Expected Attention) against the naive mean and
 * population covariance, over rows pushed in two calls, the rows before
 * `first` left out. */
static void test_qstat(void **state) {
    (void)state;
    enum { L = 2, H = 3, D = 8, N = 40, FIRST = 4 };
    struct kv_qstat qs;
    assert_int_equal(kv_qstat_init(&qs, L, H, D, FIRST), KVF_OK);
    static float q[N][H * D];
    int32_t pos[N];
    unsigned seed = 7;
    for (int t = 0; t < N; t++) {
        pos[t] = t;
        for (int e = 0; e < H * D; e++) {
            seed = seed * 1103515245u + 12345u;
            q[t][e] = 20.0f + (float)((seed >> 8) % 1000) / 100.0f; /* a large mean beside the spread */
        }
    }
    float mean[D], cov[D * D];
    assert_false(kv_qstat_moments(&qs, 1, 0, mean, cov));
    assert_int_equal(kv_qstat_push(&qs, 1, q[0], pos, 17), KVF_OK);
    assert_int_equal(kv_qstat_push(&qs, 1, q[17], pos + 17, N - 17), KVF_OK);
    assert_false(kv_qstat_moments(&qs, 0, 0, mean, cov));
    for (int h = 0; h < H; h++) {
        assert_true(kv_qstat_moments(&qs, 1, h, mean, cov));
        double mu[D] = {0};
        for (int t = FIRST; t < N; t++)
            for (int e = 0; e < D; e++) mu[e] += q[t][h * D + e] / (N - FIRST);
        for (int a = 0; a < D; a++) {
            assert_true(fabs(mean[a] - mu[a]) < 1e-4);
            for (int b = 0; b < D; b++) {
                double c = 0;
                for (int t = FIRST; t < N; t++) c += (q[t][h * D + a] - mu[a]) * (q[t][h * D + b] - mu[b]);
                c /= N - FIRST;
                if (!(fabs(cov[a * D + b] - c) < 1e-4 * fmax(1.0, fabs(c))))
                    fail_msg("cov[%d][%d] %g vs %g", a, b, cov[a * D + b], c);
            }
        }
    }
    struct kv_qstat copy;
    assert_int_equal(kv_qstat_init(&copy, L, H, D, FIRST), KVF_OK);
    kv_qstat_copy(&copy, &qs);
    float mean2[D], cov2[D * D];
    assert_true(kv_qstat_moments(&copy, 1, 2, mean2, cov2) && kv_qstat_moments(&qs, 1, 2, mean, cov));
    assert_memory_equal(mean, mean2, sizeof mean);
    assert_memory_equal(cov, cov2, sizeof cov);
    kv_qstat_clear(&qs);
    assert_false(kv_qstat_moments(&qs, 1, 0, mean, cov));
    kv_qstat_free(&qs);
    kv_qstat_free(&copy);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qstat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
