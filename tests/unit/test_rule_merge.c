/* The merge stage (src/kv/policy/merge.c) against a naive computation in double. */
#include "policy_fixture.h"

/* Merge stage against a naive computation in double: the assignment
 * (cosine of keys, or nearest position) and each formula of LOOK-M /
 * Elastic Cache on small vectors. */
static void test_merge(void **st) {
    (void)st;
    const int n = 23, d = 8, keep[] = {0, 4, 5, 11, 19, 22}, nk = 6;
    const enum kv_merge kinds[] = {KV_MERGE_AVG, KV_MERGE_PIVOTAL, KV_MERGE_WEIGHTED, KV_MERGE_POSITION};
    for (int t = 0; t < 4; t++) {
        struct kv_cache c;
        make_head(&c, n, d, 31 + t);
        struct kv_head *h = kv_cache_head(&c, 0, 0);
        const float *hk = h->k, *hv = h->v; /* a float32 cache */
        double k0[23][8], v0[23][8];
        for (int j = 0; j < n; j++)
            for (int e = 0; e < d; e++) k0[j][e] = hk[j * d + e], v0[j][e] = hv[j * d + e];
        /* Naive assignment. */
        int into[23];
        double sim[23];
        char kept[23] = {0};
        for (int c2 = 0; c2 < nk; c2++) kept[keep[c2]] = 1;
        for (int j = 0; j < n; j++) {
            if (kept[j]) continue;
            int best = -1;
            double bs = -2;
            for (int c2 = 0; c2 < nk; c2++) {
                const int q = keep[c2];
                double dot = 0, na = 0, nb = 0;
                for (int e = 0; e < d; e++)
                    dot += k0[j][e] * k0[q][e], na += k0[j][e] * k0[j][e], nb += k0[q][e] * k0[q][e];
                const double cs = dot / sqrt(na * nb);
                const int dist = abs(j - q), bdist = best < 0 ? 1 << 30 : abs(j - keep[best]);
                if (kinds[t] == KV_MERGE_POSITION ? dist < bdist : cs > bs) best = c2, bs = cs;
            }
            into[j] = best, sim[j] = bs;
        }
        double want_k[6][8] = {{0}}, want_v[6][8] = {{0}}, cnt[6] = {0};
        for (int j = 0; j < n; j++) {
            if (kept[j]) continue;
            const int c2 = into[j], q = keep[c2];
            for (int e = 0; e < d; e++) {
                const double w = kinds[t] == KV_MERGE_WEIGHTED ? sim[j] : 1.0;
                want_k[c2][e] += kinds[t] == KV_MERGE_PIVOTAL ? (k0[j][e] + k0[q][e]) / 2 : w * k0[j][e];
                want_v[c2][e] += kinds[t] == KV_MERGE_PIVOTAL ? (v0[j][e] + v0[q][e]) / 2 : w * v0[j][e];
            }
            cnt[c2] += 1;
        }
        struct kv_policy p = {.merge = kinds[t]};
        int got_into[23];
        assert_int_equal(kv_merge_head(&p, h, d, keep, nk, got_into), KVF_OK);
        for (int j = 0; j < n; j++)
            if (!kept[j] && got_into[j] != into[j])
                fail_msg("merge %d: entry %d went to %d, want %d", t, j, got_into[j], into[j]);
        for (int c2 = 0; c2 < nk; c2++)
            for (int e = 0; e < d; e++) {
                const int q = keep[c2];
                const double wk = (k0[q][e] + want_k[c2][e]) / (1 + cnt[c2]),
                             wv = (v0[q][e] + want_v[c2][e]) / (1 + cnt[c2]);
                assert_true(fabs(hk[q * d + e] - wk) < 1e-5 && fabs(hv[q * d + e] - wv) < 1e-5);
            }
        for (int j = 0; j < n; j++) /* evicted rows are left alone (compaction drops them) */
            if (!kept[j]) assert_true(hk[j * d] == (float)k0[j][0]);
        kv_cache_free(&c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
