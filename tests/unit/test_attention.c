/* Row-blocked attention against a naive full-matrix computation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "attn/attn.h"
#include "kv/cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* out[i][h] = sum_j softmax_j(q_i.k_j*scale masked) v_j, all in double. */
static void naive(const struct attn_params *p, const float *q, const int32_t *qpos, int n_q,
                  const struct kv_head *kv, double *out) {
    const int d = p->head_dim, group = p->n_head / p->n_head_kv;
    for (int i = 0; i < n_q; i++)
        for (int h = 0; h < p->n_head; h++) {
            const struct kv_head *g = &kv[h / group];
            double *s = calloc(g->n, sizeof *s), mx = -INFINITY, sum = 0;
            for (int j = 0; j < g->n; j++) {
                const int32_t kp = g->tag[j].pos;
                const bool vis = p->bidirectional || (kp <= qpos[i] && (p->window == 0 || qpos[i] - kp < p->window));
                if (!vis) { s[j] = -INFINITY; continue; }
                double dot = 0;
                for (int c = 0; c < d; c++) dot += (double)q[(size_t)i * p->n_head * d + h * d + c] * g->k[(size_t)j * d + c];
                s[j] = dot * p->scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < g->n; j++) { s[j] = s[j] == -INFINITY ? 0 : exp(s[j] - mx); sum += s[j]; }
            for (int c = 0; c < d; c++) {
                double acc = 0;
                for (int j = 0; j < g->n; j++) acc += s[j] / sum * g->v[(size_t)j * d + c];
                out[(size_t)i * p->n_head * d + h * d + c] = acc;
            }
            free(s);
        }
}

static void check_mode(int n_head, int n_head_kv, int d, int n_ctx, int n_q, int window, int threads,
                       bool bidirectional) {
    unsigned seed = 1234u + n_head * 7 + n_q;
    struct kv_cache c;
    assert_int_equal(kv_cache_init(&c, 1, n_head_kv, d, false), KVF_OK);
    const int KD = n_head_kv * d;
    float *k = malloc(sizeof(float) * n_ctx * KD), *v = malloc(sizeof(float) * n_ctx * KD);
    int32_t *pos = malloc(sizeof(int32_t) * n_ctx);
    struct kvf_tag *tags = calloc(n_ctx, sizeof *tags);
    for (int i = 0; i < n_ctx * KD; i++) { k[i] = frand(&seed); v[i] = frand(&seed); }
    for (int i = 0; i < n_ctx; i++) pos[i] = tags[i].pos = i;
    assert_int_equal(kv_cache_reserve(&c, 0, n_ctx), KVF_OK);
    kv_cache_append(&c, 0, k, v, tags, n_ctx);
    assert_int_equal(kv_cache_head(&c, 0, n_head_kv - 1)->tag[n_ctx - 1].pos, n_ctx - 1);

    const int QD = n_head * d;
    float *q = malloc(sizeof(float) * n_q * QD), *out = malloc(sizeof(float) * n_q * QD);
    double *ref = malloc(sizeof(double) * n_q * QD);
    for (int i = 0; i < n_q * QD; i++) q[i] = 2.0f * frand(&seed);
    const int32_t *qpos = pos + (n_ctx - n_q); /* the last n_q tokens, as in prefill */
    struct attn_params p = {n_head, n_head_kv, d, 1.0f / sqrtf((float)d), window, bidirectional};
    float *scratch = malloc(attn_scratch_bytes(n_ctx, threads));
    assert_int_equal(attn_forward(&p, q, qpos, n_q, kv_cache_head(&c, 0, 0), out, scratch, threads, NULL), KVF_OK);
    naive(&p, q, qpos, n_q, kv_cache_head(&c, 0, 0), ref);
    double maxerr = 0;
    for (int i = 0; i < n_q * QD; i++) maxerr = fmax(maxerr, fabs(out[i] - ref[i]));
    assert_true(maxerr < 1e-5);
    free(k); free(v); free(pos); free(tags); free(q); free(out); free(ref); free(scratch);
    kv_cache_free(&c);
}

static void check(int n_head, int n_head_kv, int d, int n_ctx, int n_q, int window, int threads) {
    check_mode(n_head, n_head_kv, d, n_ctx, n_q, window, threads, false);
}

static void test_mha(void **st) { (void)st; check(4, 4, 16, 70, 70, 0, 1); }
static void test_gqa(void **st) { (void)st; check(6, 2, 8, 100, 65, 0, 2); }
static void test_decode_row(void **st) { (void)st; check(4, 1, 32, 50, 1, 0, 2); }
static void test_window(void **st) { (void)st; check(4, 2, 16, 90, 90, 7, 2); check(2, 1, 16, 40, 1, 5, 1); }

/* Vision encoders: every query sees every key, the first ones included. */
static void test_bidirectional(void **st) { (void)st; check_mode(4, 4, 12, 65, 65, 0, 2, true); check_mode(3, 3, 8, 40, 40, 0, 1, true); }

/* Every statistic against the full attention matrix in double: A[h][i][j]
 * (softmax and n-softmax), folded into kv heads as the mean of their query
 * heads. */
static void check_stats(int n_head, int n_head_kv, int d, int n_ctx, int n_q, int window, int threads) {
    unsigned seed = 99u + n_head * 3 + n_q;
    struct kv_cache c;
    assert_int_equal(kv_cache_init(&c, 1, n_head_kv, d, false), KVF_OK);
    const int KD = n_head_kv * d, QD = n_head * d, group = n_head / n_head_kv, W = 5;
    float *k = malloc(sizeof(float) * n_ctx * KD), *v = malloc(sizeof(float) * n_ctx * KD);
    struct kvf_tag *tags = calloc(n_ctx, sizeof *tags);
    int32_t *pos = malloc(sizeof(int32_t) * n_ctx);
    for (int i = 0; i < n_ctx * KD; i++) { k[i] = frand(&seed); v[i] = frand(&seed); }
    for (int i = 0; i < n_ctx; i++) {
        pos[i] = tags[i].pos = i;
        tags[i].modality = (int16_t)((i / 7) % 3); /* runs of text, image and video */
    }
    assert_int_equal(kv_cache_reserve(&c, 0, n_ctx), KVF_OK);
    kv_cache_append(&c, 0, k, v, tags, n_ctx);
    float *q = malloc(sizeof(float) * n_q * QD), *out = malloc(sizeof(float) * n_q * QD);
    for (int i = 0; i < n_q * QD; i++) q[i] = 2.0f * frand(&seed);
    const int32_t *qpos = pos + (n_ctx - n_q);
    const struct kvf_tag *qtag = tags + (n_ctx - n_q);
    const int stride = n_ctx + 3;
    float *arrays = calloc((size_t)ATTN_STAT_N * n_head_kv * stride, sizeof(float));
    struct attn_stats st = {.stride = stride, .qtag = qtag, .win_first = n_q - W, .nsm_n = 1.0f};
    for (int a = 0; a < ATTN_STAT_N; a++) st.a[a] = arrays + (size_t)a * n_head_kv * stride;
    const struct attn_params p = {n_head, n_head_kv, d, 1.0f / sqrtf((float)d), window, false};
    float *scratch = malloc(attn_scratch_bytes(n_ctx, threads));
    assert_int_equal(attn_forward(&p, q, qpos, n_q, kv_cache_head(&c, 0, 0), out, scratch, threads, &st), KVF_OK);

    double *ref = calloc((size_t)ATTN_STAT_N * n_head_kv * stride, sizeof(double)), *x = calloc(n_ctx, sizeof(double));
    for (int h = 0; h < n_head; h++) {
        const int g = h / group;
        const struct kv_head *kh = kv_cache_head(&c, 0, g);
        for (int i = 0; i < n_q; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n_ctx; j++) {
                const bool vis = pos[j] <= qpos[i] && (window == 0 || qpos[i] - pos[j] < window);
                double dot = 0;
                for (int e = 0; e < d; e++) dot += (double)q[(size_t)i * QD + h * d + e] * kh->k[(size_t)j * d + e];
                x[j] = vis ? dot * p.scale : -INFINITY;
                mx = fmax(mx, x[j]);
            }
            for (int j = 0; j < n_ctx; j++) sum += x[j] == -INFINITY ? 0 : exp(x[j]);
            for (int j = 0; j < n_ctx; j++) {
                if (x[j] == -INFINITY) continue;
                const double a = exp(x[j]) / sum, nsm = exp(x[j]) / (1.0 + sum), w = 1.0 / group;
                double *r = ref + (size_t)g * stride + j;
                const size_t A = (size_t)n_head_kv * stride;
                r[ATTN_STAT_SUM * A] += w * a;
                r[ATTN_STAT_SQ * A] += w * a * a;
                r[ATTN_STAT_COUNT * A] += w;
                r[(ATTN_STAT_TEXT + qtag[i].modality) * A] += w * a;
                if (i >= n_q - W) {
                    r[ATTN_STAT_WIN * A] += w * a;
                    r[ATTN_STAT_WIN_NSM * A] += w * nsm;
                }
            }
        }
    }
    for (size_t e = 0; e < (size_t)ATTN_STAT_N * n_head_kv * stride; e++)
        if (fabs(arrays[e] - ref[e]) > 1e-4 * fmax(1.0, fabs(ref[e])))
            fail_msg("statistic %zu (array %zu): %g vs naive %g", e, e / ((size_t)n_head_kv * stride), arrays[e], ref[e]);
    free(k); free(v); free(tags); free(pos); free(q); free(out); free(arrays); free(scratch); free(ref); free(x);
    kv_cache_free(&c);
}

static void test_stats_mha(void **st) { (void)st; check_stats(4, 4, 16, 70, 70, 0, 2); }
static void test_stats_gqa(void **st) { (void)st; check_stats(6, 2, 8, 100, 65, 0, 2); check_stats(4, 1, 8, 45, 45, 0, 1); }
static void test_stats_decode(void **st) { (void)st; check_stats(4, 2, 16, 50, 1, 0, 2); check_stats(4, 2, 16, 60, 3, 0, 1); }
static void test_stats_window(void **st) { (void)st; check_stats(4, 2, 16, 90, 40, 7, 2); }

static void test_cache_bytes(void **st) {
    (void)st;
    struct kv_cache c;
    assert_int_equal(kv_cache_init(&c, 2, 3, 8, false), KVF_OK);
    assert_int_equal(c.bytes, 0);
    assert_int_equal(kv_cache_reserve(&c, 1, 20), KVF_OK);
    size_t expect = 0;
    for (int g = 0; g < 3; g++) expect += (size_t)kv_cache_head(&c, 1, g)->cap * (2 * 8 * sizeof(float) + sizeof(struct kvf_tag));
    assert_int_equal(c.bytes, expect);
    assert_true(kv_cache_head(&c, 1, 0)->cap >= 20);
    kv_cache_clear(&c);
    assert_int_equal(c.bytes, 0);
    kv_cache_free(&c);
}

/* Eviction compacts and frees: the kept entries (data and tags) move to the
 * front in order and the allocation shrinks to exactly what is kept. */
static void test_cache_keep(void **st) {
    (void)st;
    struct kv_cache c;
    const int d = 8, n = 40, H = 2;
    assert_int_equal(kv_cache_init(&c, 1, H, d, false), KVF_OK);
    float k[40 * 2 * 8], v[40 * 2 * 8];
    struct kvf_tag tags[40];
    for (int i = 0; i < n * H * d; i++) { k[i] = (float)i; v[i] = -(float)i; }
    for (int i = 0; i < n; i++) tags[i] = (struct kvf_tag){.pos = 100 + i, .modality = (int16_t)(i % 2), .media = 3, .row = (int16_t)i, .col = 1};
    assert_int_equal(kv_cache_reserve(&c, 0, n), KVF_OK);
    kv_cache_append(&c, 0, k, v, tags, n);
    const int keep[] = {0, 3, 4, 17, 39};
    assert_int_equal(kv_cache_keep(&c, 0, 1, keep, 5), KVF_OK);
    const struct kv_head *h = kv_cache_head(&c, 0, 1);
    assert_int_equal(h->n, 5);
    assert_int_equal(h->cap, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(h->tag[i].pos, 100 + keep[i]);
        assert_int_equal(h->tag[i].row, keep[i]);
        for (int e = 0; e < d; e++) {
            assert_true(h->k[i * d + e] == k[(size_t)keep[i] * H * d + d + e]);
            assert_true(h->v[i * d + e] == v[(size_t)keep[i] * H * d + d + e]);
        }
    }
    const size_t entry = 2 * d * sizeof(float) + sizeof(struct kvf_tag);
    assert_int_equal(c.bytes, (size_t)(kv_cache_head(&c, 0, 0)->cap + 5) * entry);
    const int bad[] = {3, 2};
    assert_int_equal(kv_cache_keep(&c, 0, 1, bad, 2), KVF_ERR_INTERNAL);
    assert_int_equal(kv_cache_keep(&c, 0, 0, NULL, 0), KVF_OK);
    assert_int_equal(c.bytes, 5 * entry);
    kv_cache_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mha), cmocka_unit_test(test_gqa), cmocka_unit_test(test_decode_row),
        cmocka_unit_test(test_window), cmocka_unit_test(test_bidirectional), cmocka_unit_test(test_stats_mha), cmocka_unit_test(test_stats_gqa),
        cmocka_unit_test(test_stats_decode), cmocka_unit_test(test_stats_window), cmocka_unit_test(test_cache_bytes),
        cmocka_unit_test(test_cache_keep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
