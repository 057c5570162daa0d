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

/* The rows a head stores (keys or values), decoded by the scalar reference
 * kernels: [n][d] floats, to be freed. */
static float *decoded(const struct kv_head *h, const void *rows, enum dtype type, int d) {
    float *f = malloc(sizeof(float) * ((size_t)h->n * d + 1));
    if (h->n > 0) /* an empty head has no rows (NULL) */
        quant_dequant_row_ref(type, rows, f, (int64_t)h->n * d);
    for (int j = 0; rows == h->k && h->smooth && j < h->n; j++) /* smoothed keys: scaled and shifted back */
        for (int c = 0; c < d; c++) f[(size_t)j * d + c] = f[(size_t)j * d + c] * h->smooth[d + c] + h->smooth[c];
    return f;
}

/* out[i][h] = sum_j softmax_j(q_i.k_j*scale masked) v_j, all in double,
 * on the keys and values as stored (decoded when not float32). */
static void naive(const struct attn_params *p, const float *q, const int32_t *qpos, int n_q,
                  const struct kv_head *kv, double *out) {
    const int d = p->head_dim, group = p->n_head / p->n_head_kv;
    for (int i = 0; i < n_q; i++)
        for (int h = 0; h < p->n_head; h++) {
            const struct kv_head *g = &kv[h / group];
            float *gk = decoded(g, g->k, g->type_k, d), *gv = decoded(g, g->v, g->type_v, d);
            double *s = calloc((size_t)g->n + 1, sizeof *s), mx = -INFINITY, sum = 0;
            for (int j = 0; j < g->n; j++) {
                const int32_t kp = g->tag[j].pos;
                const bool vis = p->bidirectional || (kp <= qpos[i] && (p->window == 0 || qpos[i] - kp < p->window));
                if (!vis) { s[j] = -INFINITY; continue; }
                double dot = 0;
                for (int c = 0; c < d; c++)
                    dot += (double)q[(size_t)i * p->n_head * d + h * d + c] * gk[(size_t)j * d + c];
                s[j] = dot * p->scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < g->n; j++) { s[j] = s[j] == -INFINITY ? 0 : exp(s[j] - mx); sum += s[j]; }
            sum += p->nsm_n * exp(-mx); /* n-softmax: exp(x_j) / (n + sum_k exp(x_k)) */
            for (int c = 0; c < d; c++) {
                double acc = 0;
                for (int j = 0; j < g->n; j++) acc += s[j] / sum * gv[(size_t)j * d + c];
                out[(size_t)i * p->n_head * d + h * d + c] = acc;
            }
            free(s), free(gk), free(gv);
        }
}

static float g_nsm_n; /* the attn_params.nsm_n check_mode runs with */
static bool g_thin;   /* check_mode keeps every third entry of kv head 0 and none of the last (compressed heads) */
static int g_type_v = -1; /* >= 0: check_mode's and check_stats_typed's values take this type, keys theirs */
static bool g_max_weighted; /* check_stats_typed: MAX weighted per query and per (query head, entry), KVzip+ */

static void check_mode(int n_head, int n_head_kv, int d, int n_ctx, int n_q, int window, int threads,
                       bool bidirectional, enum kvf_kv_type type) {
    unsigned seed = 1234u + n_head * 7 + n_q;
    struct kv_cache c;
    assert_int_equal(kv_cache_init(&c, 1, n_head_kv, d, false), KVF_OK);
    assert_int_equal(kv_cache_set_type(&c, type, g_type_v >= 0 ? (enum kvf_kv_type)g_type_v : type), KVF_OK);
    const int KD = n_head_kv * d;
    float *k = malloc(sizeof(float) * n_ctx * KD), *v = malloc(sizeof(float) * n_ctx * KD);
    int32_t *pos = malloc(sizeof(int32_t) * n_ctx);
    struct kvf_tag *tags = calloc(n_ctx, sizeof *tags);
    for (int i = 0; i < n_ctx * KD; i++) { k[i] = frand(&seed); v[i] = frand(&seed); }
    for (int i = 0; i < n_ctx; i++) pos[i] = tags[i].pos = i;
    assert_int_equal(kv_cache_reserve(&c, 0, n_ctx), KVF_OK);
    kv_cache_append(&c, 0, k, v, tags, n_ctx);
    assert_int_equal(kv_cache_head(&c, 0, n_head_kv - 1)->tag[n_ctx - 1].pos, n_ctx - 1);
    if (g_thin) {
        int *keep = malloc(sizeof(int) * n_ctx), n_keep = 0;
        for (int j = 0; j < n_ctx; j += 3) keep[n_keep++] = j;
        assert_int_equal(kv_cache_keep(&c, 0, 0, keep, n_keep), KVF_OK);
        assert_int_equal(kv_cache_keep(&c, 0, n_head_kv - 1, NULL, 0), KVF_OK);
        free(keep);
    }

    const int QD = n_head * d;
    float *q = malloc(sizeof(float) * n_q * QD), *out = malloc(sizeof(float) * n_q * QD);
    double *ref = malloc(sizeof(double) * n_q * QD);
    for (int i = 0; i < n_q * QD; i++) q[i] = 2.0f * frand(&seed);
    const int32_t *qpos = pos + (n_ctx - n_q); /* the last n_q tokens, as in prefill */
    struct attn_params p = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = d, .scale = 1.0f / sqrtf((float)d),
                            .window = window, .bidirectional = bidirectional, .nsm_n = g_nsm_n};
    float *scratch = malloc(attn_scratch_bytes(n_ctx, threads)), *one = malloc(sizeof(float) * n_q * QD);
    assert_int_equal(attn_forward(&p, q, qpos, n_q, kv_cache_head(&c, 0, 0), out, scratch, threads, NULL), KVF_OK);
    naive(&p, q, qpos, n_q, kv_cache_head(&c, 0, 0), ref);
    double maxerr = 0;
    for (int i = 0; i < n_q * QD; i++) /* a NaN counts as the largest error (fmax would skip it) */
        maxerr = fabs(out[i] - ref[i]) <= maxerr ? maxerr : isnan(out[i]) ? INFINITY : fabs(out[i] - ref[i]);
    assert_true(maxerr < 1e-5);
    /* The same bits on one thread: how the threads share the heads, or one
     * head's entries and columns (decoding), changes no arithmetic. */
    assert_int_equal(attn_forward(&p, q, qpos, n_q, kv_cache_head(&c, 0, 0), one, scratch, 1, NULL), KVF_OK);
    assert_memory_equal(out, one, sizeof(float) * n_q * QD);
    free(k); free(v); free(pos); free(tags); free(q); free(out); free(ref); free(scratch); free(one);
    kv_cache_free(&c);
}

static void check(int n_head, int n_head_kv, int d, int n_ctx, int n_q, int window, int threads) {
    check_mode(n_head, n_head_kv, d, n_ctx, n_q, window, threads, false, KVF_KV_F32);
}

static void test_mha(void **st) { (void)st; check(4, 4, 16, 70, 70, 0, 1); }
static void test_gqa(void **st) { (void)st; check(6, 2, 8, 100, 65, 0, 2); check(4, 1, 256, 100, 60, 0, 2); }
static void test_decode_row(void **st) {
    (void)st;
    check(4, 1, 32, 50, 1, 0, 2);
    /* Past ATTN_CHUNK entries: the heads of a group take the columns a chunk at a time. */
    check(6, 2, 16, 600, 2, 0, 2);
    check(4, 1, 16, 700, 1, 300, 1);
    /* Kv heads the threads do not divide: each head's entries, rows and
     * output columns shared among them (past a chunk, windowed, 1-3 queries). */
    check(9, 3, 64, 700, 1, 0, 2);
    check(4, 1, 72, 650, 2, 300, 2);
    check(6, 2, 16, 600, 3, 0, 3);
    check(8, 8, 16, 90, 1, 0, 3);
    check(32, 1, 16, 100, 2, 0, 2); /* score rows fill the scratch */
    check(66, 1, 16, 100, 1, 0, 2); /* past it: a head a task */
    check(48, 1, 16, 100, 1, 0, 2); /* a group wider than a task's rows */
    check_mode(4, 2, 16, 40, 2, 0, 3, true, KVF_KV_F32); /* bidirectional */
    /* Heads of different lengths, one empty (after per-head compression). */
    g_thin = true;
    check(9, 3, 32, 500, 1, 0, 2);
    check(9, 3, 32, 500, 2, 40, 2);
    check_mode(9, 3, 64, 500, 1, 0, 2, false, KVF_KV_Q8_0);
    g_thin = false;
}
static void test_window(void **st) {
    (void)st;
    check(4, 2, 16, 90, 90, 7, 2);
    check(2, 1, 16, 40, 1, 5, 1);
    check(2, 1, 72, 150, 75, 37, 2); /* vector tails of head_dim and keys; windows starting mid-panel */
}

/* A windowed layer's outputs do not depend on whether the entries out of
 * every query's window are still stored (the session frees them): the same
 * bits with all 150 entries and with the first 37 gone, so that the block
 * products see the visible keys at another offset from a panel's start. */
static void test_window_freed(void **st) {
    (void)st;
    const int d = 64, n = 150, gone = 37, n_q = 40, window = 60;
    unsigned seed = 99u;
    float *k = malloc(sizeof(float) * n * d), *v = malloc(sizeof(float) * n * d);
    float *q = malloc(sizeof(float) * n_q * 2 * d), *out[2];
    struct kvf_tag *tags = calloc(n, sizeof *tags);
    int32_t *pos = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n * d; i++) k[i] = frand(&seed), v[i] = frand(&seed);
    for (int i = 0; i < n_q * 2 * d; i++) q[i] = 2.0f * frand(&seed);
    for (int i = 0; i < n; i++) pos[i] = tags[i].pos = i;
    const struct attn_params p = {.n_head = 2, .n_head_kv = 1, .head_dim = d, .scale = 0.125f, .window = window};
    float *scratch = malloc(attn_scratch_bytes(n, 2));
    for (int t = 0; t < 2; t++) {
        const int first = t ? gone : 0; /* no query sees below n - n_q - window + 1 = 51 */
        struct kv_cache c;
        assert_int_equal(kv_cache_init(&c, 1, 1, d, false), KVF_OK);
        assert_int_equal(kv_cache_reserve(&c, 0, n - first), KVF_OK);
        kv_cache_append(&c, 0, k + (size_t)first * d, v + (size_t)first * d, tags + first, n - first);
        out[t] = malloc(sizeof(float) * n_q * 2 * d);
        assert_int_equal(attn_forward(&p, q, pos + n - n_q, n_q, kv_cache_head(&c, 0, 0), out[t], scratch, 2, NULL),
                         KVF_OK);
        kv_cache_free(&c);
    }
    assert_memory_equal(out[0], out[1], sizeof(float) * n_q * 2 * d);
    free(k); free(v); free(q); free(tags); free(pos); free(scratch); free(out[0]); free(out[1]);
}

/* CSP's n-softmax in the output (eq. 7), decode rows and blocks, with n
 * large enough to matter: the naive reference divides by n + sum exp. */
static void test_nsoftmax(void **st) {
    (void)st;
    for (int t = 0; t < 2; t++) {
        g_nsm_n = t ? 4.0f : 1.0f;
        check(4, 2, 16, 50, 1, 0, 2);
        check(4, 2, 16, 60, 40, 0, 1);
        check(4, 1, 16, 300, 1, 0, 2); /* one kv head shared by two threads */
        check_mode(4, 2, 32, 45, 9, 0, 2, false, KVF_KV_F16);
    }
    g_nsm_n = 0.0f;
}

/* Vision encoders: every query sees every key, the first ones included. */
static void test_bidirectional(void **st) {
    (void)st;
    check_mode(4, 4, 12, 65, 65, 0, 2, true, KVF_KV_F32);
    check_mode(3, 3, 8, 40, 40, 0, 1, true, KVF_KV_F32);
}

/* Every statistic against the full attention matrix in double: A[h][i][j]
 * (softmax and n-softmax), folded into kv heads as the mean of their query
 * heads. */
static void check_stats_typed(int n_head, int n_head_kv, int d, int n_ctx, int n_q, int window, int threads,
                              enum kvf_kv_type type) {
    unsigned seed = 99u + n_head * 3 + n_q;
    struct kv_cache c;
    assert_int_equal(kv_cache_init(&c, 1, n_head_kv, d, false), KVF_OK);
    assert_int_equal(kv_cache_set_type(&c, type, g_type_v >= 0 ? (enum kvf_kv_type)g_type_v : type), KVF_OK);
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
    float *qs = malloc(sizeof(float) * n_q), *es = malloc(sizeof(float) * n_head * stride);
    for (int i = 0; i < n_q; i++) qs[i] = 0.5f + frand(&seed) * frand(&seed);
    for (int i = 0; i < n_head * stride; i++) es[i] = 1.0f + frand(&seed);
    if (g_max_weighted) st.max_qscale = qs, st.max_escale = es;
    for (int a = 0; a < ATTN_STAT_N; a++) st.a[a] = arrays + (size_t)a * n_head_kv * stride;
    const struct attn_params p = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = d,
                                  .scale = 1.0f / sqrtf((float)d), .window = window};
    float *scratch = malloc(attn_scratch_bytes(n_ctx, threads));
    assert_int_equal(attn_forward(&p, q, qpos, n_q, kv_cache_head(&c, 0, 0), out, scratch, threads, &st), KVF_OK);
    if (n_q < 4) { /* decoding: the same bits on one thread (attn_forward) */
        float *one = calloc((size_t)ATTN_STAT_N * n_head_kv * stride, sizeof(float));
        struct attn_stats st1 = st;
        for (int a = 0; a < ATTN_STAT_N; a++) st1.a[a] = one + (size_t)a * n_head_kv * stride;
        assert_int_equal(attn_forward(&p, q, qpos, n_q, kv_cache_head(&c, 0, 0), out, scratch, 1, &st1), KVF_OK);
        assert_memory_equal(one, arrays, sizeof(float) * (size_t)ATTN_STAT_N * n_head_kv * stride);
        free(one);
    }

    double *ref = calloc((size_t)ATTN_STAT_N * n_head_kv * stride, sizeof(double)), *x = calloc(n_ctx, sizeof(double));
    for (int h = 0; h < n_head; h++) {
        const int g = h / group;
        const struct kv_head *kh = kv_cache_head(&c, 0, g);
        float *kf = decoded(kh, kh->k, kh->type_k, d);
        for (int i = 0; i < n_q; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n_ctx; j++) {
                const bool vis = pos[j] <= qpos[i] && (window == 0 || qpos[i] - pos[j] < window);
                double dot = 0;
                for (int e = 0; e < d; e++) dot += (double)q[(size_t)i * QD + h * d + e] * kf[(size_t)j * d + e];
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
                /* over queries and the group's heads */
                const double mw = g_max_weighted ? (double)qs[i] * es[(size_t)h * stride + j] : 1.0;
                r[ATTN_STAT_MAX * A] = fmax(r[ATTN_STAT_MAX * A], a * mw);
                if (i >= n_q - W) {
                    r[ATTN_STAT_WIN * A] += w * a;
                    r[ATTN_STAT_WIN_NSM * A] += w * nsm;
                    r[(tags[j].modality == qtag[i].modality ? ATTN_STAT_WIN_NSM_SELF : ATTN_STAT_WIN_NSM_CROSS) * A] +=
                        w * nsm;
                }
            }
        }
        free(kf);
    }
    for (size_t e = 0; e < (size_t)ATTN_STAT_N * n_head_kv * stride; e++)
        if (!(fabs(arrays[e] - ref[e]) <= 1e-4 * fmax(1.0, fabs(ref[e])))) /* NaN fails too */
            fail_msg("statistic %zu (array %zu): %g vs naive %g", e, e / ((size_t)n_head_kv * stride), arrays[e],
                     ref[e]);
    free(k); free(v); free(tags); free(pos); free(q); free(out); free(arrays); free(scratch); free(ref); free(x);
    free(qs); free(es);
    kv_cache_free(&c);
}

static void check_stats(int n_head, int n_head_kv, int d, int n_ctx, int n_q, int window, int threads) {
    check_stats_typed(n_head, n_head_kv, d, n_ctx, n_q, window, threads, KVF_KV_F32);
}

static void test_stats_mha(void **st) { (void)st; check_stats(4, 4, 16, 70, 70, 0, 2); }
static void test_stats_gqa(void **st) {
    (void)st;
    check_stats(6, 2, 8, 100, 65, 0, 2);
    check_stats(4, 1, 8, 45, 45, 0, 1);
}
static void test_stats_decode(void **st) {
    (void)st;
    check_stats(4, 2, 16, 50, 1, 0, 2);
    check_stats(4, 2, 16, 60, 3, 0, 1);
    check_stats(6, 2, 8, 600, 3, 0, 2);
    check_stats(4, 1, 8, 650, 1, 290, 1);
    check_stats(6, 3, 16, 600, 1, 0, 2);
    check_stats(4, 1, 8, 650, 2, 290, 3);
}
static void test_stats_window(void **st) { (void)st; check_stats(4, 2, 16, 90, 40, 7, 2); }
/* KVzip+'s MAX (attn.h max_qscale, max_escale): each query's weights and
 * each query head's entries scaled before the maximum, in prefill and
 * decoding blocks, split over threads or not. */
static void test_stats_max_weighted(void **st) {
    (void)st;
    g_max_weighted = true;
    check_stats(6, 2, 8, 100, 65, 0, 2);
    check_stats(4, 4, 16, 70, 70, 0, 1);
    check_stats(6, 3, 16, 600, 1, 0, 2);
    check_stats(4, 2, 16, 60, 3, 0, 1);
    g_max_weighted = false;
}

/* The same call gives the same statistics bit for bit, however the
 * threads happened to share the blocks (kept sets must not drift between
 * runs, and kvf_session_fork relies on it). */
static void test_stats_repeatable(void **st) {
    (void)st;
    enum { H = 4, HKV = 2, D = 16, N = 300, THREADS = 4, RUNS = 40 };
    unsigned seed = 5;
    struct kv_cache c;
    assert_int_equal(kv_cache_init(&c, 1, HKV, D, false), KVF_OK);
    float *k = malloc(sizeof(float) * N * HKV * D), *v = malloc(sizeof(float) * N * HKV * D);
    float *q = malloc(sizeof(float) * N * H * D), *out = malloc(sizeof(float) * N * H * D);
    struct kvf_tag *tags = calloc(N, sizeof *tags);
    int32_t *pos = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N * HKV * D; i++) k[i] = frand(&seed), v[i] = frand(&seed);
    for (int i = 0; i < N * H * D; i++) q[i] = 3.0f * frand(&seed);
    for (int i = 0; i < N; i++) pos[i] = tags[i].pos = i;
    assert_int_equal(kv_cache_reserve(&c, 0, N), KVF_OK);
    kv_cache_append(&c, 0, k, v, tags, N);
    const struct attn_params p = {.n_head = H, .n_head_kv = HKV, .head_dim = D, .scale = 0.25f};
    float *scratch = malloc(attn_scratch_bytes(N, THREADS)), *first = calloc(2 * HKV * N, sizeof(float)),
          *sums = calloc(2 * HKV * N, sizeof(float));
    for (int r = 0; r < RUNS; r++) {
        memset(sums, 0, sizeof(float) * 2 * HKV * N);
        struct attn_stats sa = {.stride = N};
        sa.a[ATTN_STAT_SUM] = sums, sa.a[ATTN_STAT_SQ] = sums + HKV * N;
        assert_int_equal(attn_forward(&p, q, pos, N, kv_cache_head(&c, 0, 0), out, scratch, THREADS, &sa), KVF_OK);
        if (r == 0) memcpy(first, sums, sizeof(float) * 2 * HKV * N);
        else assert_memory_equal(first, sums, sizeof(float) * 2 * HKV * N);
    }
    free(k); free(v); free(q); free(out); free(tags); free(pos); free(scratch); free(first); free(sums);
    kv_cache_free(&c);
}

static void test_cache_bytes(void **st) {
    (void)st;
    struct kv_cache c;
    assert_int_equal(kv_cache_init(&c, 2, 3, 8, false), KVF_OK);
    assert_int_equal(c.bytes, 0);
    assert_int_equal(kv_cache_reserve(&c, 1, 20), KVF_OK);
    size_t expect = 0;
    for (int g = 0; g < 3; g++)
        expect += (size_t)kv_cache_head(&c, 1, g)->cap * (2 * 8 * sizeof(float) + sizeof(struct kvf_tag));
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
    for (int i = 0; i < n; i++)
        tags[i] =
            (struct kvf_tag){ .pos = 100 + i, .modality = (int16_t)(i % 2), .media = 3, .row = (int16_t)i, .col = 1 };
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
            assert_true(((const float *)h->k)[i * d + e] == k[(size_t)keep[i] * H * d + d + e]);
            assert_true(((const float *)h->v)[i * d + e] == v[(size_t)keep[i] * H * d + d + e]);
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

/* F16, Q8_0, Q4_0, Q4_0H and Q4_0S caches, keys and values alike and not: the same
 * kernel against the naive computation on the keys and values as stored,
 * on every SIMD level (the decode path reads rows in place with the typed
 * kernels; blocks of >= 4 queries use the block products on float32
 * copies; 65 queries make blocks of 32, 32 and 1, so one call takes both
 * paths). */
static const struct { enum kvf_kv_type k; int v; } typed[] = {
    {KVF_KV_F16, -1}, {KVF_KV_Q8_0, -1}, {KVF_KV_Q4_0, -1}, {KVF_KV_Q4_0H, -1}, {KVF_KV_Q8_0, KVF_KV_Q4_0},
    {KVF_KV_F32, KVF_KV_Q4_0}, {KVF_KV_Q4_0H, KVF_KV_Q8_0}, {KVF_KV_Q4_0S, KVF_KV_Q4_0H}, {KVF_KV_Q4_0S, KVF_KV_F16},
};
#define N_TYPED ((int)(sizeof typed / sizeof *typed))

static void test_typed_attention(void **st) {
    (void)st;
    const enum simd_level top = simd_get();
    for (int lv = SIMD_SCALAR; lv <= (int)top; lv++) {
        simd_set((enum simd_level)lv);
        for (int t = 0; t < N_TYPED; t++) {
            g_type_v = typed[t].v;
            check_mode(4, 4, 32, 70, 70, 0, 1, false, typed[t].k);   /* MHA, blocked */
            check_mode(6, 2, 64, 100, 65, 0, 2, false, typed[t].k);  /* GQA, blocked + decode row */
            check_mode(4, 1, 32, 50, 1, 0, 2, false, typed[t].k);    /* decode */
            check_mode(4, 2, 32, 60, 3, 0, 1, false, typed[t].k);    /* a block below the block products' size */
            check_mode(4, 2, 32, 90, 90, 7, 2, false, typed[t].k);   /* sliding window */
            check_mode(2, 1, 32, 40, 1, 5, 1, false, typed[t].k);
            check_mode(6, 3, 64, 300, 2, 0, 2, false, typed[t].k);   /* decode, heads shared among threads */
        }
        g_type_v = -1;
        /* fp16 rows of a width with a SIMD tail */
        check_mode(4, 2, 12, 45, 45, 0, 2, false, KVF_KV_F16);
        check_mode(4, 2, 20, 45, 1, 0, 1, false, KVF_KV_F16);
        check_mode(3, 1, 20, 45, 1, 0, 2, false, KVF_KV_F16);
    }
    simd_set(top);
}

static void test_typed_stats(void **st) {
    (void)st;
    for (int t = 0; t < N_TYPED; t++) {
        g_type_v = typed[t].v;
        check_stats_typed(4, 4, 32, 70, 70, 0, 2, typed[t].k);
        check_stats_typed(6, 2, 32, 100, 65, 0, 2, typed[t].k);
        check_stats_typed(4, 2, 64, 50, 1, 0, 2, typed[t].k);
        check_stats_typed(4, 2, 32, 60, 3, 0, 1, typed[t].k);
        check_stats_typed(4, 2, 32, 90, 40, 7, 2, typed[t].k);
        check_stats_typed(6, 3, 64, 300, 1, 0, 2, typed[t].k);
    }
    g_type_v = -1;
}

/* A cache's types of keys and values. */
struct kv_pair {
    enum kvf_kv_type k, v;
};

static enum dtype dtype_of(enum kvf_kv_type t) {
    return t == KVF_KV_F32 ? DT_F32 : t == KVF_KV_F16 ? DT_F16 : t == KVF_KV_Q8_0 ? DT_Q8_0
         : t == KVF_KV_Q4_0 ? DT_Q4_0 : DT_Q4_0H; /* Q4_0S: Q4_0H rows of smoothed keys */
}

/* Bytes per entry of a cache: key and value rows, tag, statistics. */
static size_t entry_bytes(struct kv_pair t, int d, bool acc) {
    return dtype_row_bytes(dtype_of(t.k), d) + dtype_row_bytes(dtype_of(t.v), d) + sizeof(struct kvf_tag) +
           (acc ? KV_ACC_N * sizeof(float) : 0);
}

/* How far a stored value may be from x, m the largest magnitude of its
 * block of 32: fp16 rounding; half a step of the block's scale for Q8_0
 * (m / 127); a whole one for Q4_0 (m / 8: the largest magnitude becomes
 * code -8, so a value of the other sign near it clamps at 7). Q4_0H's
 * error is Q4_0's on the rotated block, whose values are at most its norm
 * (<= sqrt(32) m), rotated back: at most sqrt(32) such steps in norm, so 4m
 * (test_kv_rows checks it against an independent rotation). */
static double stored_tol(enum kvf_kv_type t, double x, double m) {
    return t == KVF_KV_F32    ? 0
         : t == KVF_KV_F16    ? fabs(x) / 2048 + 1e-7
         : t == KVF_KV_Q8_0   ? m / 127 * 0.5001
         : t == KVF_KV_Q4_0   ? m / 8 * 1.0001
                              : 4.0001 * m;
}

/* Every storage type, alike for keys and values and not: rows are stored
 * converted, eviction moves the stored bytes unchanged, and the bytes
 * counted are those allocated at the types' row sizes (tags and statistics
 * included). */
static void test_cache_types(void **st) {
    (void)st;
    const int d = 64, n = 40, H = 2;
    float k[40 * 2 * 64], v[40 * 2 * 64];
    struct kvf_tag tags[40];
    unsigned seed = 7;
    for (int i = 0; i < n * H * d; i++) { k[i] = 3.0f * frand(&seed); v[i] = frand(&seed) * 0.01f; }
    for (int i = 0; i < n; i++) tags[i] = (struct kvf_tag){.pos = 10 + i, .row = (int16_t)i};
    const struct kv_pair all[] = {{KVF_KV_F32, KVF_KV_F32}, {KVF_KV_F16, KVF_KV_F16}, {KVF_KV_Q8_0, KVF_KV_Q8_0},
                                  {KVF_KV_Q4_0, KVF_KV_Q4_0}, {KVF_KV_Q8_0, KVF_KV_Q4_0}, {KVF_KV_F16, KVF_KV_Q8_0},
                                  {KVF_KV_Q4_0H, KVF_KV_Q4_0H}};
    enum { N_PAIRS = sizeof all / sizeof *all };
    size_t bytes[N_PAIRS];
    for (int t = 0; t < N_PAIRS; t++) {
        const enum dtype dk = dtype_of(all[t].k), dv = dtype_of(all[t].v);
        const size_t kr = dtype_row_bytes(dk, d), vr = dtype_row_bytes(dv, d);
        struct kv_cache c;
        assert_int_equal(kv_cache_init(&c, 1, H, d, true), KVF_OK);
        assert_int_equal(kv_cache_set_type(&c, all[t].k, all[t].v), KVF_OK);
        assert_int_equal(c.k_row, kr);
        assert_int_equal(c.v_row, vr);
        assert_int_equal(kv_cache_reserve(&c, 0, n), KVF_OK);
        kv_cache_append(&c, 0, k, v, tags, n);
        const struct kv_head *h = kv_cache_head(&c, 0, 1);
        assert_int_equal(h->type_k, dk);
        assert_int_equal(h->type_v, dv);
        assert_int_equal(c.bytes, (size_t)(kv_cache_head(&c, 0, 0)->cap + h->cap) * entry_bytes(all[t], d, true));
        bytes[t] = c.bytes;
        /* What is stored is the input, converted. */
        for (int j = 0; j < n; j++) {
            float kr_[64], vr_[64];
            kv_head_key_row(h, d, j, kr_);
            kv_head_value_row(h, d, j, vr_);
            for (int b = 0; b < d; b += 32) {
                const float *ks = k + (size_t)j * H * d + d + b, *vs = v + (size_t)j * H * d + d + b;
                float kmax = 0, vmax = 0;
                for (int e = 0; e < 32; e++) kmax = fmaxf(kmax, fabsf(ks[e])), vmax = fmaxf(vmax, fabsf(vs[e]));
                for (int e = 0; e < 32; e++)
                    if (fabs(kr_[b + e] - ks[e]) > stored_tol(all[t].k, ks[e], kmax) ||
                        fabs(vr_[b + e] - vs[e]) > stored_tol(all[t].v, vs[e], vmax))
                        fail_msg("%s/%s entry %d dim %d: %g/%g stored as %g/%g", kvf_kv_type_name(all[t].k),
                                 kvf_kv_type_name(all[t].v), j, b + e, ks[e], vs[e], kr_[b + e], vr_[b + e]);
            }
        }
        /* Eviction moves the stored rows as they are. */
        const int keep[] = {0, 3, 4, 17, 38, 39};
        uint8_t *before = malloc((kr + vr) * 6);
        for (int i = 0; i < 6; i++) {
            memcpy(before + i * (kr + vr), (const uint8_t *)h->k + keep[i] * kr, kr);
            memcpy(before + i * (kr + vr) + kr, (const uint8_t *)h->v + keep[i] * vr, vr);
            kv_cache_head(&c, 0, 1)->acc[keep[i] * KV_ACC_N + KV_ACC_SUM] = (float)keep[i];
        }
        assert_int_equal(kv_cache_keep(&c, 0, 1, keep, 6), KVF_OK);
        assert_int_equal(h->n, 6);
        assert_int_equal(h->cap, 6);
        for (int i = 0; i < 6; i++) {
            assert_memory_equal((const uint8_t *)h->k + i * kr, before + i * (kr + vr), kr);
            assert_memory_equal((const uint8_t *)h->v + i * vr, before + i * (kr + vr) + kr, vr);
            assert_int_equal(h->tag[i].pos, 10 + keep[i]);
            assert_true(h->acc[i * KV_ACC_N + KV_ACC_SUM] == (float)keep[i]);
        }
        free(before);
        assert_int_equal(c.bytes, (size_t)(kv_cache_head(&c, 0, 0)->cap + 6) * entry_bytes(all[t], d, true));
        /* A merge's write: stored in the types, read back as that conversion. */
        float nk[64], nv[64], rk[64], rv[64], qk[64], qv[64];
        for (int e = 0; e < d; e++) nk[e] = 0.5f - e * 0.01f, nv[e] = e * 0.25f;
        kv_head_set_row(kv_cache_head(&c, 0, 1), d, 2, nk, nv);
        kv_head_key_row(h, d, 2, rk);
        kv_head_value_row(h, d, 2, rv);
        uint8_t enc[256];
        quant_quantize_row(dk, nk, enc, d);
        quant_dequant_row_ref(dk, enc, qk, d);
        quant_quantize_row(dv, nv, enc, d);
        quant_dequant_row_ref(dv, enc, qv, d);
        assert_memory_equal(rk, qk, sizeof rk);
        assert_memory_equal(rv, qv, sizeof rv);
        assert_int_equal(h->tag[2].pos, 10 + keep[2]);
        assert_int_equal(kv_cache_keep(&c, 0, 1, NULL, 0), KVF_OK);
        assert_int_equal(c.bytes, (size_t)kv_cache_head(&c, 0, 0)->cap * entry_bytes(all[t], d, true));
        /* Clearing keeps the types for the next prompt. */
        kv_cache_clear(&c);
        assert_int_equal(c.bytes, 0);
        assert_int_equal(kv_cache_head(&c, 0, 1)->type_k, dk);
        assert_int_equal(kv_cache_head(&c, 0, 1)->type_v, dv);
        kv_cache_free(&c);
    }
    /* Same capacities, so the ratios are those of the entry sizes (f16: 16 + 256 + 12 against 16 + 512 + 12). */
    for (int t = 1; t < N_PAIRS; t++)
        assert_int_equal(bytes[t] * entry_bytes(all[0], d, true), bytes[0] * entry_bytes(all[t], d, true));
}

/* Keys with a channel far off the others (as Qwen2.5's): each head's shift
 * and scale are its keys' mean and the square root of their largest
 * distance from it; a key reads back as Q4_0H of the smoothed key, scaled
 * and shifted back, the same bits as that computed here; the channels
 * beside the outlier come back far closer than plain Q4_0H leaves them. A
 * head filled a key at a time takes its statistics again as it doubles,
 * to 64 keys; copies carry them; their bytes are counted and returned. */
static void test_smooth_keys(void **st) {
    (void)st;
    enum { D = 64, H = 2, N = 100 };
    static float k[N * H * D], v[N * H * D];
    struct kvf_tag tags[N];
    unsigned seed = 11;
    for (int i = 0; i < N * H * D; i++) k[i] = frand(&seed), v[i] = frand(&seed);
    for (int t = 0; t < N; t++) k[(size_t)t * H * D + D + 5] = 60.0f + 4.0f * frand(&seed); /* head 1's channel 5 */
    for (int i = 0; i < N; i++) tags[i] = (struct kvf_tag){.pos = i};
    struct kv_cache c, plain;
    assert_int_equal(kv_cache_init(&c, 1, H, D, false), KVF_OK);
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_Q4_0S, KVF_KV_F16), KVF_OK);
    assert_int_equal(kv_cache_init(&plain, 1, H, D, false), KVF_OK);
    assert_int_equal(kv_cache_set_type(&plain, KVF_KV_Q4_0H, KVF_KV_F16), KVF_OK);
    assert_int_equal(kv_cache_reserve(&c, 0, N), KVF_OK);
    assert_int_equal(kv_cache_reserve(&plain, 0, N), KVF_OK);
    kv_cache_append(&c, 0, k, v, tags, N);
    kv_cache_append(&plain, 0, k, v, tags, N);
    const struct kv_head *h = kv_cache_head(&c, 0, 1), *hp = kv_cache_head(&plain, 0, 1);
    assert_int_equal(h->smooth_rows, N);
    /* the statistics, computed apart */
    float mu[D], lam[D], widest = 0;
    for (int i = 0; i < D; i++) {
        double sum = 0;
        for (int t = 0; t < N; t++) sum += k[(size_t)t * H * D + D + i];
        mu[i] = (float)(sum / N), lam[i] = 0;
        for (int t = 0; t < N; t++) lam[i] = fmaxf(lam[i], fabsf(k[(size_t)t * H * D + D + i] - mu[i]));
        widest = fmaxf(widest, lam[i]);
    }
    for (int i = 0; i < D; i++) lam[i] = sqrtf(fmaxf(lam[i], 1e-3f * widest));
    assert_memory_equal(h->smooth, mu, sizeof mu);
    assert_memory_equal(h->smooth + D, lam, sizeof lam);
    double err_s = 0, err_p = 0;
    for (int t = 0; t < N; t++) {
        const float *x = k + (size_t)t * H * D + D;
        float xs[D], want[D], got[D], other[D];
        uint8_t enc[64];
        for (int i = 0; i < D; i++) xs[i] = (x[i] - mu[i]) / lam[i];
        quant_quantize_row(DT_Q4_0H, xs, enc, D);
        quant_dequant_row_ref(DT_Q4_0H, enc, want, D);
        for (int i = 0; i < D; i++) want[i] = want[i] * lam[i] + mu[i];
        kv_head_key_row(h, D, t, got);
        assert_memory_equal(got, want, sizeof got);
        kv_head_key_row(hp, D, t, other);
        for (int i = 0; i < 32; i++)
            if (i != 5) err_s = fmax(err_s, fabs(got[i] - x[i])), err_p = fmax(err_p, fabs(other[i] - x[i]));
    }
    assert_true(err_s < 0.25 && err_s * 4 < err_p);
    /* the storage: rows, tags and the two vectors of each head */
    const size_t entry = dtype_row_bytes(DT_Q4_0H, D) + dtype_row_bytes(DT_F16, D) + sizeof(struct kvf_tag);
    assert_int_equal(c.bytes, (size_t)2 * N * entry + 2 * 2 * D * sizeof(float));
    /* a copy carries them */
    struct kv_cache cp;
    assert_int_equal(kv_cache_init(&cp, 1, H, D, false), KVF_OK);
    assert_int_equal(kv_cache_set_type(&cp, KVF_KV_Q4_0S, KVF_KV_F16), KVF_OK);
    assert_int_equal(kv_cache_copy(&cp, &c), KVF_OK);
    assert_memory_equal(kv_cache_head(&cp, 0, 1)->smooth, h->smooth, 2 * D * sizeof(float));
    assert_int_equal(kv_cache_head(&cp, 0, 1)->smooth_rows, N);
    assert_int_equal(cp.bytes, c.bytes);
    kv_cache_free(&cp);
    /* emptied, the head returns them; filled a key at a time, it takes them at 1, 2, 4, ..., 64 keys */
    assert_int_equal(kv_cache_keep(&c, 0, 1, NULL, 0), KVF_OK);
    assert_int_equal(c.bytes, (size_t)N * entry + 2 * D * sizeof(float));
    assert_null(kv_cache_head(&c, 0, 1)->smooth);
    kv_cache_free(&c);
    assert_int_equal(kv_cache_init(&c, 1, H, D, false), KVF_OK);
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_Q4_0S, KVF_KV_F16), KVF_OK);
    h = kv_cache_head(&c, 0, 1);
    int taken = 0;
    for (int t = 0; t < N; t++) {
        assert_int_equal(kv_cache_reserve(&c, 0, 1), KVF_OK);
        const int before = h->smooth_rows;
        kv_cache_append(&c, 0, k + (size_t)t * H * D, v + (size_t)t * H * D, tags + t, 1);
        taken += h->smooth_rows != before;
    }
    assert_int_equal(h->smooth_rows, 64);
    assert_int_equal(taken, 7);
    for (int t = 0; t < N; t++) {
        float got[D];
        kv_head_key_row(h, D, t, got);
        for (int i = 0; i < D; i++) assert_true(fabs(got[i] - k[(size_t)t * H * D + D + i]) < (i == 5 ? 2.0 : 0.5));
    }
    kv_cache_free(&c);
    kv_cache_free(&plain);
}

static void test_cache_type_errors(void **st) {
    (void)st;
    struct kv_cache c;
    assert_int_equal(kv_cache_init(&c, 1, 1, 48, false), KVF_OK);
    /* 48 is not a multiple of 32: refused for keys or values alone, and nothing changes */
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_Q8_0, KVF_KV_F16), KVF_ERR_UNSUPPORTED);
    assert_non_null(strstr(kvf_last_error(), "multiple of 32"));
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_F16, KVF_KV_Q4_0), KVF_ERR_UNSUPPORTED);
    assert_non_null(strstr(kvf_last_error(), "q4_0"));
    assert_int_equal(kv_cache_set_type(&c, (enum kvf_kv_type)6, KVF_KV_F16), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_F16, (enum kvf_kv_type)-1), KVF_ERR_INVALID_ARG);
    assert_int_equal(c.type_k, DT_F32);
    assert_int_equal(c.type_v, DT_F32);
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_F16, KVF_KV_F32), KVF_OK);
    assert_int_equal(c.k_row, 96);
    assert_int_equal(c.v_row, 192);
    assert_int_equal(kv_cache_reserve(&c, 0, 1), KVF_OK);
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_F32, KVF_KV_F32), KVF_ERR_INTERNAL); /* storage allocated */
    kv_cache_free(&c);

    enum kvf_kv_type t;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(kvf_kv_type_parse(kvf_kv_type_name((enum kvf_kv_type)i), &t), KVF_OK);
        assert_int_equal(t, i);
    }
    assert_null(kvf_kv_type_name((enum kvf_kv_type)6));
    assert_int_equal(kvf_kv_type_parse("q8", &t), KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "f32, f16, q8_0, q4_0, q4_0h, q4_0s"));
    /* smoothing is per channel, for keys: values are refused it */
    assert_int_equal(kv_cache_init(&c, 1, 1, 64, false), KVF_OK);
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_Q4_0S, KVF_KV_Q4_0S), KVF_ERR_UNSUPPORTED);
    assert_non_null(strstr(kvf_last_error(), "for keys"));
    assert_int_equal(kv_cache_set_type(&c, KVF_KV_Q4_0S, KVF_KV_Q4_0H), KVF_OK);
    assert_true(c.smooth_k && c.type_k == DT_Q4_0H);
    kv_cache_free(&c);
    assert_int_equal(kvf_kv_type_parse(NULL, &t), KVF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mha),
        cmocka_unit_test(test_gqa),
        cmocka_unit_test(test_decode_row),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_window_freed),
        cmocka_unit_test(test_nsoftmax),
        cmocka_unit_test(test_bidirectional),
        cmocka_unit_test(test_stats_mha),
        cmocka_unit_test(test_stats_gqa),
        cmocka_unit_test(test_stats_decode),
        cmocka_unit_test(test_stats_window),
        cmocka_unit_test(test_stats_max_weighted),
        cmocka_unit_test(test_stats_repeatable),
        cmocka_unit_test(test_cache_bytes),
        cmocka_unit_test(test_cache_keep),
        cmocka_unit_test(test_typed_attention),
        cmocka_unit_test(test_typed_stats),
        cmocka_unit_test(test_cache_types),
        cmocka_unit_test(test_smooth_keys),
        cmocka_unit_test(test_cache_type_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
