/* Expected Attention's query statistics (src/kv/qstat.c, src/kv/policy/expected.c)
 * and the hooks that gather a rule's own statistic (src/kv/stat.c). */
#include "policy_fixture.h"

#include "kv/qstat.h"

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

/* A byte buffer for kv_stat_io. */
struct membuf {
    unsigned char b[8192];
    size_t n, at;
};
static void mem_put(void *ctx, const void *x, size_t n) {
    struct membuf *m = ctx;
    assert_true(m->n + n <= sizeof m->b);
    memcpy(m->b + m->n, x, n);
    m->n += n;
}
static bool mem_get(void *ctx, void *x, size_t n) {
    struct membuf *m = ctx;
    if (n > m->n - m->at) return false;
    memcpy(x, m->b + m->at, n);
    m->at += n;
    return true;
}

/* The set of a session's rule statistics: the scoring rule's first, each
 * statistic once when every rule's is gathered too; the rows shown to it
 * by kv_stats_queries; a fork refusing a source gathered from another
 * position, and taking one that agrees; a session file's bytes back, a
 * cut or a negative count refused. */
static void test_stats(void **state) {
    (void)state;
    enum { L = 2, H = 2, D = 4, N = 6 };
    const struct kv_rule *rule = kv_rule_of(KV_EXPECTED);
    assert_ptr_equal(rule->stat, &kv_stat_qstat);
    const struct kv_stat_in in = {.n_layer = L, .n_head = H, .n_head_kv = 1, .head_dim = D, .sinks = 1};
    struct kv_stats a, b, none, late;
    assert_int_equal(kv_stats_init(&a, rule->stat, true, &in, NULL), KVF_OK);
    assert_int_equal(a.n, 1);
    assert_int_equal(kv_stats_init(&none, NULL, false, &in, NULL), KVF_OK);
    assert_int_equal(none.n, 0);
    assert_null(kv_stats_get(&none, &kv_stat_qstat));
    float q[N][H * D];
    int32_t pos[N];
    for (int t = 0; t < N; t++) {
        pos[t] = t;
        for (int e = 0; e < H * D; e++) q[t][e] = (float)(t * 7 + e % 5) / 3.0f;
    }
    assert_int_equal(kv_stats_queries(&a, 1, q[0], pos, N), KVF_OK);
    const struct kv_qstat *qa = kv_stats_get(&a, &kv_stat_qstat);
    assert_int_equal(qa->n[1], N - 1); /* position 0 is a sink */
    /* a copy (like) carries what was gathered */
    assert_int_equal(kv_stats_init(&b, rule->stat, false, &in, &a), KVF_OK);
    assert_int_equal(((const struct kv_qstat *)kv_stats_get(&b, &kv_stat_qstat))->n[1], N - 1);
    /* a fork: gathered from position 1 on, not from 3 */
    const struct kv_stat_in in3 = {.n_layer = L, .n_head = H, .n_head_kv = 1, .head_dim = D, .sinks = 3};
    assert_int_equal(kv_stats_init(&late, rule->stat, false, &in3, NULL), KVF_OK);
    assert_int_equal(kv_stats_take(&late, &a, "expected:sinks=3"), KVF_ERR_UNSUPPORTED);
    assert_int_equal(kv_stats_take(&late, &none, "expected:sinks=3"), KVF_ERR_UNSUPPORTED);
    kv_stats_clear(&b);
    assert_int_equal(((const struct kv_qstat *)kv_stats_get(&b, &kv_stat_qstat))->n[1], 0);
    assert_int_equal(kv_stats_take(&b, &a, "expected"), KVF_OK);
    assert_int_equal(((const struct kv_qstat *)kv_stats_get(&b, &kv_stat_qstat))->n[1], N - 1);
    /* session files */
    static struct membuf m;
    const struct kv_stat_io io = {.put = mem_put, .get = mem_get, .ctx = &m};
    kv_stat_qstat.save(kv_stats_get(&a, &kv_stat_qstat), &io);
    kv_stats_clear(&b);
    assert_int_equal(kv_stat_qstat.load(kv_stats_get(&b, &kv_stat_qstat), &io), KVF_OK);
    assert_int_equal(m.at, m.n);
    const struct kv_qstat *qb = kv_stats_get(&b, &kv_stat_qstat);
    assert_memory_equal(qa->sq, qb->sq, sizeof(double) * L * H * D * D);
    m.at = 0, m.n -= 8;
    assert_int_equal(kv_stat_qstat.load(kv_stats_get(&b, &kv_stat_qstat), &io), KVF_ERR_FORMAT);
    m.at = 0, m.n += 8;
    const long negative = -1;
    memcpy(m.b, &negative, sizeof negative);
    assert_int_equal(kv_stat_qstat.load(kv_stats_get(&b, &kv_stat_qstat), &io), KVF_ERR_FORMAT);
    kv_stats_free(&a);
    kv_stats_free(&b);
    kv_stats_free(&late);
    kv_stats_free(&none);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qstat),
        cmocka_unit_test(test_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
