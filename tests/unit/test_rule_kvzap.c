/* KVzap (src/kv/kvzap.c, src/kv/policy/kvzap.c): the ridge regression and
 * the fit's statistics against naive references, the scorer file read
 * back and refused when damaged or fitted on another model, the scores it
 * writes, the written scores travelling with their entries, and the rule. */
#include "policy_fixture.h"

#include "io/gguf.h"
#include "kv/kvzap.h"

#include <unistd.h>

/* Solves the n x n system a x = b (a row-major, destroyed) by Gaussian
 * elimination with partial pivoting. */
static void naive_solve(double *a, double *b, int n) {
    for (int c = 0; c < n; c++) {
        int piv = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[piv * n + c])) piv = r;
        for (int k = 0; k < n; k++) {
            const double t = a[c * n + k];
            a[c * n + k] = a[piv * n + k], a[piv * n + k] = t;
        }
        const double t = b[c];
        b[c] = b[piv], b[piv] = t;
        for (int r = c + 1; r < n; r++) {
            const double f = a[r * n + c] / a[c * n + c];
            for (int k = c; k < n; k++) a[r * n + k] -= f * a[c * n + k];
            b[r] -= f * b[c];
        }
    }
    for (int c = n - 1; c >= 0; c--) {
        for (int k = c + 1; k < n; k++) b[c] -= a[c * n + k] * b[k];
        b[c] /= a[c * n + c];
    }
}

/* The ridge regression against its definition on the centred data, the
 * pairs added in uneven batches; and a noiseless linear map recovered. */
static void test_ridge(void **st) {
    (void)st;
    enum { E = 5, H = 2, N = 37 };
    unsigned seed = 11;
    float x[N * E], y[N * H], w[H * E], b[H];
    for (int i = 0; i < N * E; i++) x[i] = 3.0f * frand(&seed) + (i % E == 1 ? 4.0f : 0.0f);
    for (int i = 0; i < N * H; i++) y[i] = frand(&seed) + 2.0f;
    const double alpha = 0.7;
    struct kv_ridge r;
    assert_int_equal(kv_ridge_init(&r, E, H), KVF_OK);
    assert_int_equal(kv_ridge_add(&r, x, y, 10), KVF_OK);
    assert_int_equal(kv_ridge_add(&r, x + 10 * E, y + 10 * H, 1), KVF_OK);
    assert_int_equal(kv_ridge_add(&r, x + 11 * E, y + 11 * H, N - 11), KVF_OK);
    assert_int_equal(kv_ridge_solve(&r, alpha, w, b), KVF_OK);
    double mx[E] = { 0 }, my[H] = { 0 };
    for (int i = 0; i < N; i++) {
        for (int e = 0; e < E; e++) mx[e] += x[i * E + e] / (double)N;
        for (int g = 0; g < H; g++) my[g] += y[i * H + g] / (double)N;
    }
    for (int g = 0; g < H; g++) {
        double a[E * E] = { 0 }, c[E] = { 0 };
        for (int i = 0; i < N; i++)
            for (int e = 0; e < E; e++) {
                c[e] += (x[i * E + e] - mx[e]) * (y[i * H + g] - my[g]);
                for (int k = 0; k < E; k++) a[e * E + k] += (x[i * E + e] - mx[e]) * (x[i * E + k] - mx[k]);
            }
        for (int e = 0; e < E; e++) a[e * E + e] += alpha;
        naive_solve(a, c, E);
        double bias = my[g];
        for (int e = 0; e < E; e++) {
            assert_true(fabs(w[g * E + e] - c[e]) <= 1e-5 * fmax(1.0, fabs(c[e])));
            bias -= c[e] * mx[e];
        }
        assert_true(fabs(b[g] - bias) <= 1e-5 * fmax(1.0, fabs(bias)));
    }
    kv_ridge_free(&r);

    /* y = W x + b exactly, a tiny penalty: W and b come back */
    const float W[H * E] = { 1, -2, 0.5f, 0, 3, -1, 0, 0, 2, 0.25f }, B[H] = { -4, 0.5f };
    for (int i = 0; i < N; i++)
        for (int g = 0; g < H; g++) {
            double v = B[g];
            for (int e = 0; e < E; e++) v += W[g * E + e] * x[i * E + e];
            y[i * H + g] = (float)v;
        }
    assert_int_equal(kv_ridge_init(&r, E, H), KVF_OK);
    assert_int_equal(kv_ridge_add(&r, x, y, N), KVF_OK);
    assert_int_equal(kv_ridge_solve(&r, 1e-9, w, b), KVF_OK);
    for (int i = 0; i < H * E; i++) assert_true(fabs(w[i] - W[i]) < 1e-3);
    for (int g = 0; g < H; g++) assert_true(fabs(b[g] - B[g]) < 1e-3);
    kv_ridge_free(&r);
    /* no data: nothing to solve */
    assert_int_equal(kv_ridge_init(&r, E, H), KVF_OK);
    assert_int_equal(kv_ridge_solve(&r, 1.0, w, b), KVF_ERR_INTERNAL);
    kv_ridge_free(&r);
}

/* Ranks by counting (ties: their mean rank). */
static double naive_rank(const float *v, int n, int i) {
    int below = 0, equal = 0;
    for (int j = 0; j < n; j++) below += v[j] < v[i], equal += v[j] == v[i];
    return below + (equal + 1) / 2.0;
}

static double naive_pearson(const double *a, const double *b, int n) {
    double ma = 0, mb = 0, ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ma += a[i] / n, mb += b[i] / n;
    for (int i = 0; i < n; i++)
        ab += (a[i] - ma) * (b[i] - mb), aa += (a[i] - ma) * (a[i] - ma), bb += (b[i] - mb) * (b[i] - mb);
    return ab / sqrt(aa * bb);
}

static void test_statistics(void **st) {
    (void)st;
    enum { N = 41 };
    unsigned seed = 3;
    float y[N], f[N], work[2 * N];
    int iwork[N];
    for (int i = 0; i < N; i++) y[i] = roundf(4 * frand(&seed)), f[i] = y[i] + 0.5f * frand(&seed); /* y has ties */
    f[7] = f[8];
    double ry[N], rf[N], res = 0, tot = 0, my = 0;
    for (int i = 0; i < N; i++) ry[i] = naive_rank(y, N, i), rf[i] = naive_rank(f, N, i), my += y[i] / (double)N;
    for (int i = 0; i < N; i++) res += (y[i] - f[i]) * (double)(y[i] - f[i]), tot += (y[i] - my) * (y[i] - my);
    assert_true(fabs(kv_zap_r2(y, f, N) - (1 - res / tot)) < 1e-9);
    assert_true(fabs(kv_zap_spearman(y, f, N, work, iwork) - naive_pearson(ry, rf, N)) < 1e-6);
    /* a perfect fit, a reversed order, constants */
    float up[5] = { 1, 2, 3, 4, 5 }, down[5] = { 9, 7, 5, 3, 1 }, flat[5] = { 2, 2, 2, 2, 2 };
    assert_true(kv_zap_r2(up, up, 5) == 1.0);
    assert_true(fabs(kv_zap_spearman(up, down, 5, work, iwork) + 1.0) < 1e-12);
    assert_true(isnan(kv_zap_r2(flat, up, 5)) && isnan(kv_zap_spearman(up, flat, 5, work, iwork)));
}

static void zap_fill(struct kv_zap *z, unsigned seed) {
    for (int i = 0; i < z->n_layer * z->n_head_kv * z->n_embd; i++) z->w[i] = frand(&seed);
    for (int i = 0; i < z->n_layer * z->n_head_kv; i++) z->b[i] = frand(&seed) - 3.0f;
    z->samples = 5, z->span = 64, z->rows = 320, z->alpha = 1.0f;
    for (int l = 0; l < z->n_layer; l++) z->r2[l] = 0.5f + 0.01f * l, z->spearman[l] = 0.7f;
}

static size_t file_read(const char *path, unsigned char **out) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n);
    assert_int_equal(fread(*out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return (size_t)n;
}

/* Saved and read back the same; refused for another model, damage,
 * truncation, values that are not finite and another version. */
static void test_scorer_file(void **st) {
    (void)st;
    enum { L = 3, E = 8, H = 2 };
    const uint32_t digest = 0x1234abcd;
    char path[] = "/tmp/kvzap_test_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct kv_zap z, back;
    assert_int_equal(kv_zap_init(&z, L, E, H, digest), KVF_OK);
    zap_fill(&z, 21);
    assert_int_equal(kv_zap_save(&z, path), KVF_OK);
    assert_int_equal(kv_zap_load(path, L, E, H, digest, &back), KVF_OK);
    assert_memory_equal(back.w, z.w, sizeof(float) * L * H * E);
    assert_memory_equal(back.b, z.b, sizeof(float) * L * H);
    assert_memory_equal(back.r2, z.r2, sizeof(float) * L);
    assert_true(back.samples == 5 && back.span == 64 && back.rows == 320 && back.alpha == 1.0f);
    kv_zap_free(&back);
    assert_int_equal(kv_zap_load(path, L, E, H, digest + 1, &back), KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "another model"));
    assert_int_equal(kv_zap_load(path, L + 1, E, H, digest, &back), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_zap_load(path, L, E, H + 1, digest, &back), KVF_ERR_INVALID_ARG);
    assert_null(back.w);

    unsigned char *buf;
    const size_t n = file_read(path, &buf);
    /* a weight's bits changed: the checksum; the file cut anywhere: its own format */
    buf[n - 4 * (L * H) - 9] ^= 0x10;
    assert_int_equal(kv_zap_load_buffer(buf, n, L, E, H, digest, &back), KVF_ERR_FORMAT);
    assert_non_null(strstr(kvf_last_error(), "checksum"));
    buf[n - 4 * (L * H) - 9] ^= 0x10;
    assert_int_equal(kv_zap_load_buffer(buf, n, L, E, H, digest, &back), KVF_OK);
    kv_zap_free(&back);
    for (size_t cut = 0; cut + 32 < n; cut += 7) /* the last 32 bytes may be the data's alignment padding */
        if (kv_zap_load_buffer(buf, cut, L, E, H, digest, &back) == KVF_OK) fail_msg("cut at %zu of %zu loads", cut, n);
    free(buf);
    /* a weight that is not a number, checksummed as it is */
    z.w[5] = NAN;
    assert_int_equal(kv_zap_save(&z, path), KVF_OK);
    assert_int_equal(kv_zap_load(path, L, E, H, digest, &back), KVF_ERR_FORMAT);
    assert_non_null(strstr(kvf_last_error(), "not finite"));
    /* a model file is not a scorer file; another version is refused by name */
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "llama");
    assert_int_equal(gguf_writer_write(w, path), KVF_OK);
    gguf_writer_free(w);
    assert_int_equal(kv_zap_load(path, L, E, H, digest, &back), KVF_ERR_FORMAT);
    w = gguf_writer_init();
    gguf_writer_set_u32(w, "kvzap.version", KVZAP_VERSION + 1);
    assert_int_equal(gguf_writer_write(w, path), KVF_OK);
    gguf_writer_free(w);
    assert_int_equal(kv_zap_load(path, L, E, H, digest, &back), KVF_ERR_UNSUPPORTED);
    assert_int_equal(kv_zap_load("/nonexistent/x.kvzap", L, E, H, digest, &back), KVF_ERR_IO);
    kv_zap_free(&z);
    unlink(path);
}

/* Scores of rows against naive dot products. */
static void test_score(void **st) {
    (void)st;
    enum { L = 2, E = 7, H = 3, N = 5 };
    struct kv_zap z;
    assert_int_equal(kv_zap_init(&z, L, E, H, 0), KVF_OK);
    zap_fill(&z, 4);
    unsigned seed = 8;
    float x[N * E], out[N * H];
    for (int i = 0; i < N * E; i++) x[i] = frand(&seed);
    for (int l = 0; l < L; l++) {
        assert_int_equal(kv_zap_score(&z, l, x, N, out), KVF_OK);
        for (int g = 0; g < H; g++)
            for (int t = 0; t < N; t++) {
                double v = z.b[l * H + g];
                for (int e = 0; e < E; e++) v += (double)z.w[(l * H + g) * E + e] * x[t * E + e];
                assert_true(fabs(out[t * H + g] - v) < 1e-5);
            }
    }
    kv_zap_free(&z);
}

/* The written scores move with their entries (keep, drop, copy) and count
 * in the bytes; the rule keeps the sinks and the best scores, a score that
 * is not a number last. */
static void test_rule(void **st) {
    (void)st;
    enum { N = 12, D = 8 };
    struct kv_cache c, d;
    assert_int_equal(kv_cache_init(&c, 1, 1, D, false), KVF_OK);
    const size_t before = kv_cache_layer_bytes_for(&c, N);
    c.has_prior = true;
    assert_int_equal(kv_cache_layer_bytes_for(&c, N), before + N * sizeof(float));
    float k[N * D] = { 0 }, v[N * D] = { 0 };
    struct kvf_tag t[N] = { 0 };
    for (int i = 0; i < N; i++) t[i].pos = i;
    assert_int_equal(kv_cache_reserve(&c, 0, N), KVF_OK);
    kv_cache_append(&c, 0, k, v, t, N);
    struct kv_head *h = kv_cache_head(&c, 0, 0);
    const float prior[N] = { 9, -1, 5, 2, NAN, 7, -3, 4, 0, 1, 8, 3 };
    memcpy(h->prior, prior, sizeof prior);
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("kvzap:budget=5,sinks=2", &p), KVF_OK);
    assert_true(p.alloc == KV_ALLOC_UNIFORM && kv_policy_scorer(&p)->stat == &kv_stat_zap);
    float score[N], tmp[N];
    int idx[N];
    const struct kv_score_in in = { .p = &p, .h = h, .head_dim = D, .keep = 5, .scratch = tmp };
    kv_policy_scorer(&p)->score(&in, score);
    assert_true(isinf(score[0]) && isinf(score[1]) && score[4] == -INFINITY && score[2] == 5);
    assert_int_equal(kv_select_keep(&c, 0, 0, score, 5, idx), KVF_OK); /* sinks 0, 1; then 10 (8), 5 (7), 2 (5) */
    const int want[5] = { 0, 1, 2, 5, 10 };
    for (int i = 0; i < 5; i++) {
        assert_int_equal(h->tag[i].pos, want[i]);
        assert_true(h->prior[i] == prior[want[i]]);
    }
    assert_int_equal(kv_cache_drop_front(&c, 0, 0, 1), KVF_OK);
    assert_true(h->prior[0] == -1 && h->prior[3] == 8);
    assert_int_equal(kv_cache_init(&d, 1, 1, D, false), KVF_OK);
    d.has_prior = true;
    assert_int_equal(kv_cache_copy(&d, &c), KVF_OK);
    assert_memory_equal(kv_cache_head(&d, 0, 0)->prior, h->prior, sizeof(float) * 4);
    assert_int_equal(d.bytes, c.bytes);
    kv_cache_free(&c);
    kv_cache_free(&d);
    /* a file the spec names; the scorer's key is kvzap's alone */
    assert_int_equal(kv_policy_parse("kvzap:scorer=/tmp/a.kvzap+budget=threshold:tau=-4", &p), KVF_OK);
    assert_string_equal(p.scorer, "/tmp/a.kvzap");
    assert_int_equal(kv_policy_parse("keydiff:scorer=/tmp/a.kvzap", &p), KVF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ridge), cmocka_unit_test(test_statistics), cmocka_unit_test(test_scorer_file),
        cmocka_unit_test(test_score), cmocka_unit_test(test_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
