/* The reduce-stage rules of kv/reduce.h (groups, bipartite soft matching,
 * LightKV, ToMe, FastV, reduce_apply) against a brute-force reference
 * written from the header alone: the full |A| x |B| cosine matrix in double,
 * windows found by walking the image grid, rankings by insertion sort,
 * merged rows straight from x_b' = (w_b x_b + sum w_a x_a) / (w_b + sum w_a).
 * Random data is redrawn whenever two similarities the outcome hinges on lie
 * closer than float rounding can be trusted to order; exact ties come only
 * from duplicated rows, so only the tie rules decide them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kv/reduce.h"

/* Similarities closer than this (but not equal) make a case ambiguous: the
 * code under test computes them in float. */
#define NEAR 1e-5

/* ------------------------------------------------------------ helpers -- */

static uint64_t seed;

static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uniform(void) { return (double)(next_u64() >> 11) * 0x1p-53; }
static float rndf(void) { return (float)(uniform() * 2.0 - 1.0); }
static int rndi(int n) { return (int)(next_u64() % (uint64_t)n); }

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

static void fill(float *v, int count) {
    for (int i = 0; i < count; i++) v[i] = rndf();
}

static struct kvf_tag text_tag(int pos) {
    return (struct kvf_tag){.pos = pos, .modality = KVF_MOD_TEXT, .media = -1, .row = -1, .col = -1};
}

static void add_text(struct kvf_tag *tag, int *n, int count) {
    for (int i = 0; i < count; i++, (*n)++) tag[*n] = text_tag(*n);
}

/* A rows x cols grid laid out row-major, cells with skip[r * cols + c] left
 * out (skip may be NULL). */
static void add_grid(struct kvf_tag *tag, int *n, int modality, int media, int rows, int cols, const bool *skip) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            if (skip && skip[r * cols + c]) continue;
            tag[*n] = (struct kvf_tag){.pos = *n, .modality = (int16_t)modality, .media = (int16_t)media,
                                       .row = (int16_t)r, .col = (int16_t)c};
            (*n)++;
        }
}

static void identity(int *into, int n) {
    for (int i = 0; i < n; i++) into[i] = i;
}

static void expect_into(const int *got, const int *want, int n, const char *what) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("%s: into[%d] = %d, reference %d", what, i, got[i], want[i]);
}

/* ---------------------------------------------------------- reference -- */

static double cosine(const float *a, const float *b, int dim) {
    double ab = 0, aa = 0, bb = 0;
    for (int d = 0; d < dim; d++) ab += (double)a[d] * b[d], aa += (double)a[d] * a[d], bb += (double)b[d] * b[d];
    return ab / (sqrt(aa) * sqrt(bb));
}

/* ToMe's matching by brute force: writes into[a] = b for the merged pairs.
 * Returns false when the outcome hinges on two similarities nearer than NEAR
 * that are not exactly equal. */
static bool ref_bipartite(const float *feat, int dim, const int *rows, int m, double ratio, int *into) {
    const int na = (m + 1) / 2, nb = m / 2;
    double *sim = xmalloc(sizeof(double) * (size_t)(na * nb + 1));
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            sim[i * nb + j] = cosine(feat + (size_t)rows[2 * i] * dim, feat + (size_t)rows[2 * j + 1] * dim, dim);
    int *best = xmalloc(sizeof(int) * (size_t)(na + 1)), *order = xmalloc(sizeof(int) * (size_t)(na + 1));
    double *bsim = xmalloc(sizeof(double) * (size_t)(na + 1));
    for (int i = 0; i < na; i++) {
        best[i] = -1, bsim[i] = -INFINITY;
        for (int j = 0; j < nb; j++)
            if (sim[i * nb + j] > bsim[i]) best[i] = j, bsim[i] = sim[i * nb + j];
    }
    /* Insertion sort by similarity, descending; being stable it keeps the
     * earlier A first among equals. */
    for (int i = 0; i < na; i++) {
        int k = i;
        while (k > 0 && bsim[order[k - 1]] < bsim[i]) order[k] = order[k - 1], k--;
        order[k] = i;
    }
    int r = (int)floor(ratio * m);
    if (r > m / 2) r = m / 2;
    bool clear = true;
    if (r > 0 && r < na) {
        const double in = bsim[order[r - 1]], out = bsim[order[r]];
        if (in != out && in - out < NEAR) clear = false;
    }
    for (int k = 0; k < r; k++) {
        const int a = order[k];
        for (int j = 0; j < nb; j++) {
            const double s = sim[a * nb + j];
            if (j != best[a] && s != bsim[a] && bsim[a] - s < NEAR) clear = false;
        }
        into[rows[2 * a]] = rows[2 * best[a] + 1];
    }
    free(sim), free(best), free(order), free(bsim);
    return clear;
}

/* LightKV by walking the grid: each window's rows are the group rows whose
 * cells fall in it, gathered in row-major cell order (the sequence order of
 * the test layouts). */
static bool ref_lightkv(const float *x, int dim, const struct kvf_tag *tag, const struct reduce_group *g, int w,
                        double ratio, int *into) {
    if (g->n < 8 * w * w) return true;
    int *at = xmalloc(sizeof(int) * (size_t)(g->rows * g->cols)), *list = xmalloc(sizeof(int) * (size_t)g->n);
    for (int k = 0; k < g->rows * g->cols; k++) at[k] = -1;
    for (int i = g->first; i < g->first + g->n; i++) at[tag[i].row * g->cols + tag[i].col] = i;
    bool clear = true;
    for (int wr = 0; wr < w; wr++)
        for (int wc = 0; wc < w; wc++) {
            int m = 0;
            for (int r = 0; r < g->rows; r++)
                for (int c = 0; c < g->cols; c++)
                    if (r * w / g->rows == wr && c * w / g->cols == wc && at[r * g->cols + c] >= 0)
                        list[m++] = at[r * g->cols + c];
            clear &= ref_bipartite(x, dim, list, m, ratio, into);
        }
    free(at), free(list);
    return clear;
}

/* reduce_apply from the formula, into fresh arrays; returns the rows left. */
static int ref_apply(const float *x, int dim, const float *w, const struct kvf_tag *tag, const int32_t *pos,
                     const int *into, int n, double *x_out, double *w_out, struct kvf_tag *tag_out,
                     int32_t *pos_out) {
    int left = 0;
    for (int b = 0; b < n; b++) {
        if (into[b] != b) continue;
        double den = w ? w[b] : 1.0;
        int count = 0;
        for (int d = 0; d < dim; d++) x_out[(size_t)left * dim + d] = 0;
        for (int a = 0; a < n; a++) {
            if (into[a] != b) continue;
            if (a != b) den += w ? w[a] : 1.0;
            count++;
        }
        for (int a = 0; a < n; a++) {
            if (into[a] != b) continue;
            const double wa = den == 0 ? 1.0 / count : (w ? w[a] : 1.0) / den;
            for (int d = 0; d < dim; d++) x_out[(size_t)left * dim + d] += wa * x[(size_t)a * dim + d];
        }
        w_out[left] = den, tag_out[left] = tag[b], pos_out[left] = pos[b];
        left++;
    }
    return left;
}

static bool same_tag(struct kvf_tag a, struct kvf_tag b) {
    return a.pos == b.pos && a.modality == b.modality && a.media == b.media && a.row == b.row && a.col == b.col;
}

/* Rows of out [want][dim] against the reference's, within 1e-5. */
static void expect_rows(const char *what, const float *out, const double *ref, int want, int dim, bool weighted) {
    for (int i = 0; i < want; i++)
        for (int d = 0; d < dim; d++) {
            const double r = ref[(size_t)i * dim + d];
            if (!(fabs(out[(size_t)i * dim + d] - r) <= 1e-5 * fmax(fabs(r), 1.0)))
                fail_msg("apply%s: %s[%d][%d] = %.9g, want %.9g", weighted ? "" : " (unit weights)", what, i, d,
                         out[(size_t)i * dim + d], r);
        }
}

/* Runs reduce_apply on copies and checks every output against ref_apply,
 * with rows of 3 extra values (DeepStack's features) beside x that must
 * merge and move as x does; the results are left in x, w, tag, pos;
 * returns the rows left. */
static int check_apply(float *x, int dim, float *w, struct kvf_tag *tag, int32_t *pos, const int *into, int n) {
    enum { XD = 3 };
    double *x_ref = xmalloc(sizeof(double) * (size_t)(n * dim)), *w_ref = xmalloc(sizeof(double) * (size_t)n);
    double *e_ref = xmalloc(sizeof(double) * (size_t)(n * XD)), *w_unused = xmalloc(sizeof(double) * (size_t)n);
    float *extra = xmalloc(sizeof(float) * (size_t)(n * XD));
    for (int i = 0; i < n * XD; i++) extra[i] = (float)((i * 37 % 11) - 5) * 0.5f;
    struct kvf_tag *tag_ref = xmalloc(sizeof(struct kvf_tag) * (size_t)n), *tag_unused = xmalloc(sizeof *tag * n);
    int32_t *pos_ref = xmalloc(sizeof(int32_t) * (size_t)n), *pos_unused = xmalloc(sizeof(int32_t) * (size_t)n);
    const int want = ref_apply(x, dim, w, tag, pos, into, n, x_ref, w_ref, tag_ref, pos_ref);
    ref_apply(extra, XD, w, tag, pos, into, n, e_ref, w_unused, tag_unused, pos_unused);
    float *scratch = xmalloc(sizeof(float) * (size_t)(2 * n));
    const struct reduce_rows rows = {.x = x, .dim = dim, .extra = extra, .extra_dim = XD, .tag = tag, .pos = pos};
    const int got = reduce_apply(&rows, w, into, n, scratch);
    free(scratch);
    assert_int_equal(got, want);
    for (int i = 0; i < want; i++) {
        if (!same_tag(tag[i], tag_ref[i]))
            fail_msg("apply: tag %d is pos %d (%d,%d), want pos %d (%d,%d)", i, tag[i].pos, tag[i].row, tag[i].col,
                     tag_ref[i].pos, tag_ref[i].row, tag_ref[i].col);
        assert_int_equal(pos[i], pos_ref[i]);
        if (w && !(fabs(w[i] - w_ref[i]) <= 1e-5 * fmax(fabs(w_ref[i]), 1.0))) /* NaN fails too */
            fail_msg("apply: w[%d] = %.9g, want %.9g", i, w[i], w_ref[i]);
    }
    expect_rows("x", x, x_ref, want, dim, w != NULL);
    expect_rows("extra", extra, e_ref, want, XD, w != NULL);
    free(x_ref), free(w_ref), free(e_ref), free(w_unused), free(extra);
    free(tag_ref), free(tag_unused), free(pos_ref), free(pos_unused);
    return got;
}

/* ------------------------------------------------------------- groups -- */

static void expect_group(const struct reduce_group *g, int first, int n, int rows, int cols, int modality,
                         int media) {
    assert_int_equal(g->first, first);
    assert_int_equal(g->n, n);
    assert_int_equal(g->rows, rows);
    assert_int_equal(g->cols, cols);
    assert_int_equal(g->modality, modality);
    assert_int_equal(g->media, media);
}

static void test_groups(void **state) {
    (void)state;
    struct kvf_tag tag[64];
    int n = 0;
    add_text(tag, &n, 3);
    add_grid(tag, &n, KVF_MOD_IMAGE, 0, 2, 3, NULL);  /* 3..8 */
    add_grid(tag, &n, KVF_MOD_IMAGE, 1, 3, 2, NULL);  /* 9..14, right behind image 0 */
    add_text(tag, &n, 2);                              /* 15, 16 */
    add_grid(tag, &n, KVF_MOD_VIDEO, 0, 2, 2, NULL);  /* 17..20 */
    add_grid(tag, &n, KVF_MOD_VIDEO, 1, 2, 2, NULL);  /* 21..24 */
    add_text(tag, &n, 1);                              /* 25 */
    const bool sparse[15] = { true, false, true,  true, true, true, true, true,
                              true, false, false, true, true, true, true };
    add_grid(tag, &n, KVF_MOD_IMAGE, 2, 3, 5, sparse); /* 26..28: cells (0,1), (1,4), (2,0) */
    add_grid(tag, &n, KVF_MOD_IMAGE, 3, 2, 2, NULL);  /* 29..32 */
    add_grid(tag, &n, KVF_MOD_VIDEO, 0, 2, 2, NULL);  /* 33..36: another video's frame 0, right behind */
    add_text(tag, &n, 1);                              /* 37 */
    assert_int_equal(n, 38);

    struct reduce_group *g = xmalloc(sizeof *g * (size_t)n);
    assert_int_equal(reduce_groups(tag, n, g), 7);
    expect_group(&g[0], 3, 6, 2, 3, KVF_MOD_IMAGE, 0);
    expect_group(&g[1], 9, 6, 3, 2, KVF_MOD_IMAGE, 1);
    expect_group(&g[2], 17, 4, 2, 2, KVF_MOD_VIDEO, 0);
    expect_group(&g[3], 21, 4, 2, 2, KVF_MOD_VIDEO, 1);
    expect_group(&g[4], 26, 3, 3, 5, KVF_MOD_IMAGE, 2);
    expect_group(&g[5], 29, 4, 2, 2, KVF_MOD_IMAGE, 3);
    expect_group(&g[6], 33, 4, 2, 2, KVF_MOD_VIDEO, 0);

    /* Image 0 loses its first two rows and its last, image 1 and image 3
     * every row, video frame 0 all but its first row, image 2 all but its
     * last, and a text row goes too. */
    bool gone[38] = {false};
    const int removed[] = {3, 4, 8, 9, 10, 11, 12, 13, 14, 18, 19, 20, 25, 26, 27, 29, 30, 31, 32};
    for (size_t k = 0; k < sizeof removed / sizeof *removed; k++) gone[removed[k]] = true;
    int new_index[38], left = 0;
    for (int i = 0; i < n; i++) {
        new_index[i] = gone[i] ? -1 : left;
        if (!gone[i]) tag[left++] = tag[i];
    }
    reduce_groups_update(tag, left, g, 7);
    expect_group(&g[0], new_index[5], 3, 2, 3, KVF_MOD_IMAGE, 0);
    assert_int_equal(g[1].n, 0);
    expect_group(&g[2], new_index[17], 1, 2, 2, KVF_MOD_VIDEO, 0);
    expect_group(&g[3], new_index[21], 4, 2, 2, KVF_MOD_VIDEO, 1);
    expect_group(&g[4], new_index[28], 1, 3, 5, KVF_MOD_IMAGE, 2);
    assert_int_equal(g[5].n, 0);
    expect_group(&g[6], new_index[33], 4, 2, 2, KVF_MOD_VIDEO, 0);
    /* the vanished groups keep their grids and identities too */
    assert_true(g[1].rows == 3 && g[1].cols == 2 && g[1].modality == KVF_MOD_IMAGE && g[1].media == 1);
    assert_true(g[5].rows == 2 && g[5].cols == 2 && g[5].modality == KVF_MOD_IMAGE && g[5].media == 3);
    free(g);

    /* No vision at all, and an image filling the whole pass. */
    struct reduce_group one[6];
    n = 0;
    add_text(tag, &n, 5);
    assert_int_equal(reduce_groups(tag, n, one), 0);
    n = 0;
    add_grid(tag, &n, KVF_MOD_IMAGE, 4, 2, 3, NULL);
    assert_int_equal(reduce_groups(tag, n, one), 1);
    expect_group(&one[0], 0, 6, 2, 3, KVF_MOD_IMAGE, 4);
}

/* Two videos, two frames each, text between them: when the first video's
 * frame 1 vanishes, the second video's frame 0 (same modality and media as
 * the first's frame 0, but a run of its own past the text) is still its own
 * group's run. */
static void test_groups_update_vanished_frame(void **state) {
    (void)state;
    struct kvf_tag tag[24];
    int n = 0;
    add_text(tag, &n, 1);
    add_grid(tag, &n, KVF_MOD_VIDEO, 0, 2, 2, NULL); /* 1..4 */
    add_grid(tag, &n, KVF_MOD_VIDEO, 1, 2, 2, NULL); /* 5..8 */
    add_text(tag, &n, 2);                             /* 9, 10 */
    add_grid(tag, &n, KVF_MOD_VIDEO, 0, 2, 2, NULL); /* 11..14 */
    add_grid(tag, &n, KVF_MOD_VIDEO, 1, 2, 2, NULL); /* 15..18 */
    add_text(tag, &n, 1);                             /* 19 */
    struct reduce_group g[20];
    assert_int_equal(reduce_groups(tag, n, g), 4);
    memmove(tag + 5, tag + 9, sizeof *tag * (size_t)(n - 9)); /* frame 1 of the first video gone */
    n -= 4;
    reduce_groups_update(tag, n, g, 4);
    expect_group(&g[0], 1, 4, 2, 2, KVF_MOD_VIDEO, 0);
    assert_int_equal(g[1].n, 0);
    expect_group(&g[2], 7, 4, 2, 2, KVF_MOD_VIDEO, 0);
    expect_group(&g[3], 11, 4, 2, 2, KVF_MOD_VIDEO, 1);
}

/* ---------------------------------------------------------- bipartite -- */

/* Copies rows[from]'s features to rows[to]; with from and to of one parity
 * the two sit on the same side, so every similarity through them ties
 * exactly in any arithmetic. */
static void duplicate(float *feat, int dim, const int *rows, int from, int to) {
    memcpy(feat + (size_t)rows[to] * dim, feat + (size_t)rows[from] * dim, sizeof(float) * (size_t)dim);
}

static void run_bipartite(int m, double ratio, int dim, bool ties) {
    const int total = 2 * m + 3;
    float *feat = xmalloc(sizeof(float) * (size_t)(total * dim)), *scratch = xmalloc(sizeof(float) * (size_t)(3 * m));
    int *rows = xmalloc(sizeof(int) * (size_t)m), *got = xmalloc(sizeof(int) * (size_t)total);
    int *want = xmalloc(sizeof(int) * (size_t)total);
    for (int attempt = 0;; attempt++) {
        assert_true(attempt < 100);
        /* rows: an increasing subset of [0, total), with gaps */
        for (int i = 0, at = 0, slack = total - m; i < m; i++) {
            if (slack > 0 && rndi(3) == 0) at++, slack--;
            rows[i] = at++;
        }
        fill(feat, total * dim);
        if (ties && m >= 4) {
            for (int k = 0; k < 1 + m / 6; k++) {
                const int from = rndi(m), to = rndi(m);
                if ((from - to) % 2 == 0 && from != to) duplicate(feat, dim, rows, from, to);
            }
            if (m >= 5) duplicate(feat, dim, rows, 0, 2), duplicate(feat, dim, rows, 1, 3);
        }
        for (int i = 0; i < total; i++) want[i] = got[i] = -100 - i; /* untouched unless merged */
        if (ref_bipartite(feat, dim, rows, m, ratio, want)) break;
    }
    reduce_bipartite(feat, dim, rows, m, ratio, got, scratch);
    for (int i = 0; i < total; i++)
        if (got[i] != want[i])
            fail_msg("bipartite m=%d ratio=%g dim=%d%s: into[%d] = %d, reference %d", m, ratio, dim,
                     ties ? " (ties)" : "", i, got[i], want[i]);
    free(feat), free(scratch), free(rows), free(got), free(want);
}

static void test_bipartite_random(void **state) {
    (void)state;
    static const double ratios[] = {0, 0.25, 0.5, 0.9, 1.0};
    seed = 0x1234;
    for (int m = 1; m <= 40; m++)
        for (size_t k = 0; k < sizeof ratios / sizeof *ratios; k++) {
            run_bipartite(m, ratios[k], m % 3 == 0 ? 3 : 8, false);
            run_bipartite(m, ratios[k], 5, true);
        }
}

/* Crafted ties: rows 2 and 6 (A) are identical and closest to rows 3 and 5
 * (B), also identical; every other row points elsewhere. Integer features
 * keep every similarity through them exact. */
static void test_bipartite_ties(void **state) {
    (void)state;
    enum { M = 10, DIM = 6 };
    float feat[M * DIM] = {0};
    int rows[M], into[M], want[M];
    float scratch[3 * M];
    for (int i = 0; i < M; i++) rows[i] = i;
    seed = 77;
    for (int i = 0; i < M; i++)
        for (int d = 2; d < DIM; d++) feat[i * DIM + d] = (float)(1 + rndi(5));
    for (int i = 0; i < M; i++) feat[i * DIM + 1] = (float)(i == 3 || i == 5 ? 0 : 8 - i % 4);
    for (int d = 0; d < DIM; d++) {
        feat[2 * DIM + d] = feat[6 * DIM + d] = d == 0 ? 40.0f : 1.0f;
        feat[3 * DIM + d] = feat[5 * DIM + d] = d == 0 ? 40.0f : 0.0f;
    }
    static const double ratios[] = {0.15, 0.25, 0.35, 0.5, 1.0};
    for (size_t k = 0; k < sizeof ratios / sizeof *ratios; k++) {
        for (int i = 0; i < M; i++) into[i] = want[i] = i;
        assert_true(ref_bipartite(feat, DIM, rows, M, ratios[k], want));
        assert_int_equal(want[2], 3); /* the reference itself: the earlier A first, the earlier B wins */
        assert_int_equal(want[6], k == 0 ? 6 : 3);
        reduce_bipartite(feat, DIM, rows, M, ratios[k], into, scratch);
        expect_into(into, want, M, "bipartite, crafted ties");
    }

    /* All rows equal: every A's best B is the first, the first r A merge. */
    for (int i = 0; i < M * DIM; i++) feat[i] = 1.0f;
    for (int i = 0; i < M; i++) into[i] = i;
    reduce_bipartite(feat, DIM, rows, M, 0.35, into, scratch);
    const int all_equal[M] = {1, 1, 1, 3, 1, 5, 6, 7, 8, 9};
    expect_into(into, all_equal, M, "bipartite, equal rows");
}

/* ------------------------------------------------------------ LightKV -- */

/* text before, one image group (cells with skip[] left out), text after */
static int lightkv_layout(struct kvf_tag *tag, int rows, int cols, const bool *skip, struct reduce_group *g) {
    int n = 0;
    add_text(tag, &n, 4);
    const int first = n;
    add_grid(tag, &n, KVF_MOD_IMAGE, 0, rows, cols, skip);
    *g = (struct reduce_group){.first = first, .n = n - first, .rows = rows, .cols = cols,
                               .modality = KVF_MOD_IMAGE, .media = 0};
    add_text(tag, &n, 3);
    return n;
}

static void run_lightkv(int rows, int cols, int w, double ratio, int n_skip) {
    enum { DIM = 8 };
    struct kvf_tag *tag = xmalloc(sizeof *tag * (size_t)(rows * cols + 7));
    bool *skip = xmalloc(sizeof(bool) * (size_t)(rows * cols));
    memset(skip, 0, sizeof(bool) * (size_t)(rows * cols));
    for (int k = 0; k < n_skip;) {
        const int cell = rndi(rows * cols);
        if (!skip[cell]) skip[cell] = true, k++;
    }
    struct reduce_group g;
    const int n = lightkv_layout(tag, rows, cols, skip, &g);
    float *x = xmalloc(sizeof(float) * (size_t)(n * DIM)), *scratch = xmalloc(sizeof(float) * (size_t)(4 * g.n));
    int *got = xmalloc(sizeof(int) * (size_t)n), *want = xmalloc(sizeof(int) * (size_t)n);
    for (int attempt = 0;; attempt++) {
        assert_true(attempt < 100);
        fill(x, n * DIM);
        identity(want, n);
        if (ref_lightkv(x, DIM, tag, &g, w, ratio, want)) break;
    }
    identity(got, n);
    reduce_lightkv(x, DIM, tag, &g, w, ratio, got, scratch);
    int merged = 0;
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i])
            fail_msg("lightkv %dx%d (%d rows) w=%d ratio=%g: into[%d] = %d, reference %d", rows, cols, g.n, w, ratio,
                     i, got[i], want[i]);
        merged += want[i] != i;
    }
    if (g.n < 8 * w * w) assert_int_equal(merged, 0);
    else assert_true(ratio < 0.1 || merged > 0); /* the reference is not vacuous */
    free(tag), free(skip), free(x), free(scratch), free(got), free(want);
}

static void test_lightkv_windows(void **state) {
    (void)state;
    static const int grids[][2] = {{8, 8}, {12, 12}, {24, 24}, {10, 14}};
    static const int windows[] = {4, 3, 2, 1};
    static const double ratios[] = {0.5, 0.3};
    seed = 0xabcdef;
    for (size_t gi = 0; gi < sizeof grids / sizeof *grids; gi++)
        for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++)
            for (size_t ri = 0; ri < sizeof ratios / sizeof *ratios; ri++)
                run_lightkv(grids[gi][0], grids[gi][1], windows[wi], ratios[ri], 0);
    /* The skip rule counts the rows the group has now, not its grid: 12x12
     * with 16 rows gone has 128 = 8 * 4^2 (merged), with 17 gone 127 (not). */
    run_lightkv(12, 12, 4, 0.5, 16);
    run_lightkv(12, 12, 4, 0.5, 17);
    run_lightkv(24, 24, 2, 0.5, 200);
    run_lightkv(24, 24, 4, 0.3, 40);
}

/* Paper 003, Eq. 9 with rho = 0.5: three stages (windows 4, 2, 1) halve a
 * 24x24 image each time, 576 -> 288 -> 144 -> 72; every stage is checked
 * against the reference on the state the code under test produced. */
static bool lightkv_stages(void) {
    enum { DIM = 8, ROWS = 24, COLS = 24 };
    struct kvf_tag tag[ROWS * COLS + 7], orig[ROWS * COLS + 7];
    struct reduce_group g;
    int n = lightkv_layout(tag, ROWS, COLS, NULL, &g);
    const int n0 = n, n_text = n - g.n;
    memcpy(orig, tag, sizeof tag);
    float *x = xmalloc(sizeof(float) * (size_t)(n * DIM)), *w = xmalloc(sizeof(float) * (size_t)n);
    int32_t *pos = xmalloc(sizeof(int32_t) * (size_t)n);
    int *got = xmalloc(sizeof(int) * (size_t)n), *want = xmalloc(sizeof(int) * (size_t)n);
    float *scratch = xmalloc(sizeof(float) * (size_t)(4 * n));
    fill(x, n * DIM);
    double w_total = 0, xw_total[DIM] = {0};
    for (int i = 0; i < n; i++) {
        w[i] = (float)(0.1 + 0.9 * uniform()), pos[i] = 1000 + 3 * i;
        w_total += w[i];
        for (int d = 0; d < DIM; d++) xw_total[d] += (double)w[i] * x[i * DIM + d];
    }
    static const int windows[3] = {4, 2, 1}, expect[3] = {288, 144, 72};
    bool clear = true;
    for (int s = 0; s < 3 && clear; s++) {
        identity(want, n);
        clear = ref_lightkv(x, DIM, tag, &g, windows[s], 0.5, want);
        if (!clear) break;
        identity(got, n);
        reduce_lightkv(x, DIM, tag, &g, windows[s], 0.5, got, scratch);
        for (int i = 0; i < n; i++)
            if (got[i] != want[i])
                fail_msg("lightkv stage w=%d (%d rows): into[%d] = %d, reference %d", windows[s], g.n, i, got[i],
                         want[i]);
        n = check_apply(x, DIM, w, tag, pos, got, n);
        reduce_groups_update(tag, n, &g, 1);
        assert_int_equal(g.n, expect[s]);
        assert_int_equal(n, n_text + expect[s]);
        assert_int_equal(g.rows, ROWS);
        assert_int_equal(g.cols, COLS);
        /* survivors keep their original tags, in increasing pos order, and
         * the weights and weighted sums are conserved by merging */
        double w_now = 0, xw_now[DIM] = {0};
        for (int i = 0; i < n; i++) {
            assert_true(tag[i].pos >= 0 && tag[i].pos < n0);
            assert_true(same_tag(tag[i], orig[tag[i].pos]));
            if (i > 0) assert_true(tag[i].pos > tag[i - 1].pos);
            assert_int_equal(pos[i], 1000 + 3 * tag[i].pos);
            w_now += w[i];
            for (int d = 0; d < DIM; d++) xw_now[d] += (double)w[i] * x[i * DIM + d];
        }
        assert_true(fabs(w_now - w_total) < 1e-4 * w_total);
        for (int d = 0; d < DIM; d++) assert_true(fabs(xw_now[d] - xw_total[d]) < 1e-3);
    }
    free(x), free(w), free(pos), free(got), free(want), free(scratch);
    return clear;
}

static void test_lightkv_stages(void **state) {
    (void)state;
    seed = 0x5eed;
    for (int attempt = 0; !lightkv_stages(); attempt++) assert_true(attempt < 20);
}

/* --------------------------------------------------------------- ToMe -- */

static void test_tome(void **state) {
    (void)state;
    enum { DIM = 6 };
    static const double ratios[] = {0.5, 0.2};
    seed = 0x70e;
    for (int round = 0; round < 12; round++) {
        const int count = 30 + rndi(35), first = 1 + rndi(6), n = first + count + 3;
        const struct reduce_group g = {.first = first, .n = count, .rows = 1, .cols = count,
                                       .modality = round % 3 ? KVF_MOD_IMAGE : KVF_MOD_VIDEO, .media = round % 4};
        float *metric = xmalloc(sizeof(float) * (size_t)(n * DIM)),
              *scratch = xmalloc(sizeof(float) * (size_t)(4 * count));
        int *rows = xmalloc(sizeof(int) * (size_t)count), *got = xmalloc(sizeof(int) * (size_t)n);
        int *want = xmalloc(sizeof(int) * (size_t)n);
        for (int i = 0; i < count; i++) rows[i] = first + i;
        const double ratio = ratios[round % 2];
        for (int attempt = 0;; attempt++) {
            assert_true(attempt < 100);
            fill(metric, n * DIM);
            if (round % 4 == 3) /* exact ties on both sides */
                for (int k = 0; k < 4; k++)
                    duplicate(metric, DIM, rows, 2 * k, 2 * k + 8), duplicate(metric, DIM, rows, 1, 2 * k + 9);
            identity(want, n);
            if (ref_bipartite(metric, DIM, rows, count, ratio, want)) break;
        }
        identity(got, n);
        reduce_tome(metric, DIM, &g, ratio, got, scratch);
        for (int i = 0; i < n; i++)
            if (got[i] != want[i])
                fail_msg("tome first=%d n=%d ratio=%g: into[%d] = %d, reference %d", first, count, ratio, i, got[i],
                         want[i]);
        free(metric), free(scratch), free(rows), free(got), free(want);
    }
}

/* -------------------------------------------------------------- FastV -- */

static void test_fastv(void **state) {
    (void)state;
    static const double ratios[] = {0, 0.25, 0.5, 1.0};
    static const float levels[] = {0.125f, 0.25f, 0.5f, 0.75f};
    seed = 0xfa57;
    for (int round = 0; round < 16; round++) {
        const int n = round == 0 ? 6 : 1 + rndi(48);
        struct kvf_tag *tag = xmalloc(sizeof *tag * (size_t)n);
        float *score = xmalloc(sizeof(float) * (size_t)n), *scratch = xmalloc(sizeof(float) * (size_t)(2 * n));
        int *got = xmalloc(sizeof(int) * (size_t)n), *want = xmalloc(sizeof(int) * (size_t)n);
        int *cand = xmalloc(sizeof(int) * (size_t)n);
        for (int i = 0; i < n; i++) {
            const int kind = round == 0 ? 0 : rndi(3); /* round 0: text only */
            tag[i] = kind ? (struct kvf_tag){.pos = i, .modality = (int16_t)kind, .media = 0, .row = 0,
                                            .col = (int16_t)i}
                          : text_tag(i);
            score[i] = levels[rndi(4)]; /* few values: many ties */
        }
        for (size_t k = 0; k < sizeof ratios / sizeof *ratios; k++) {
            const double ratio = ratios[k];
            /* reference: non-text rows by (score ascending, later row first) */
            int v = 0;
            for (int i = 0; i < n; i++) {
                if (tag[i].modality == KVF_MOD_TEXT) continue;
                int at = v++;
                while (at > 0 && score[cand[at - 1]] >= score[i]) {
                    cand[at] = cand[at - 1];
                    at--;
                }
                cand[at] = i;
            }
            const int drop = v - (int)floor(v * (1.0 - ratio) + 0.5);
            identity(want, n);
            for (int k2 = 0; k2 < drop; k2++) want[cand[k2]] = -1;
            identity(got, n);
            reduce_fastv(score, tag, n, ratio, got, scratch);
            int dropped = 0;
            for (int i = 0; i < n; i++) {
                if (got[i] != want[i])
                    fail_msg("fastv n=%d v=%d ratio=%g: into[%d] = %d, reference %d", n, v, ratio, i, got[i], want[i]);
                if (tag[i].modality == KVF_MOD_TEXT) assert_int_equal(got[i], i);
                dropped += got[i] == -1;
            }
            assert_int_equal(dropped, drop);
            if (ratio == 0) assert_int_equal(dropped, 0);
            if (ratio == 1.0) assert_int_equal(dropped, v);
        }
        free(tag), free(score), free(scratch), free(got), free(want), free(cand);
    }
}

/* -------------------------------------------------------------- apply -- */

/* A random into[] map: about half the rows kept, a third of the rest dropped,
 * the others merged into a kept row. */
static void random_map(int *into, int n) {
    int *kept = xmalloc(sizeof(int) * (size_t)n), n_kept = 0;
    for (int i = 0; i < n; i++) {
        into[i] = rndi(2) ? i : -2;
        if (into[i] == i) kept[n_kept++] = i;
    }
    for (int i = 0; i < n; i++)
        if (into[i] == -2) into[i] = n_kept == 0 || rndi(3) == 0 ? -1 : kept[rndi(n_kept)];
    free(kept);
}

static void test_apply_random(void **state) {
    (void)state;
    enum { DIM = 5 };
    static const int sizes[] = {1, 2, 7, 33, 64};
    seed = 0xa991;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int round = 0; round < 6; round++) {
            const int n = sizes[si];
            const bool weighted = round % 2 == 0;
            float *x = xmalloc(sizeof(float) * (size_t)(n * DIM)), *w = xmalloc(sizeof(float) * (size_t)n);
            struct kvf_tag *tag = xmalloc(sizeof *tag * (size_t)n);
            int32_t *pos = xmalloc(sizeof(int32_t) * (size_t)n);
            int *into = xmalloc(sizeof(int) * (size_t)n);
            fill(x, n * DIM);
            for (int i = 0; i < n; i++) {
                w[i] = (float)(0.05 + 2 * uniform());
                tag[i] = (struct kvf_tag){.pos = 10 + i, .modality = (int16_t)rndi(3), .media = (int16_t)rndi(4),
                                          .row = (int16_t)rndi(9), .col = (int16_t)i};
                pos[i] = 500 - 7 * i;
            }
            random_map(into, n);
            if (weighted && round == 2) /* a target whose group weighs nothing: the plain mean */
                for (int i = 0; i < n; i++)
                    if (into[i] >= 0 && into[into[i]] == into[i] && into[i] % 2 == 0) w[i] = 0;
            check_apply(x, DIM, weighted ? w : NULL, tag, pos, into, n);
            free(x), free(w), free(tag), free(pos), free(into);
        }
}

static void test_apply_fixed(void **state) {
    (void)state;
    enum { N = 7, DIM = 2 };
    float x[N * DIM] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    float w[N] = {0, 0, 1, 3, 0, 5, 2};
    struct kvf_tag tag[N];
    int32_t pos[N];
    float scratch[2 * N];
    for (int i = 0; i < N; i++) tag[i] = text_tag(i), pos[i] = 40 + i;
    /* 1 -> 0 (weights 0 + 0: plain mean), 3 -> 2 (1 and 3), 4 kept alone at
     * weight 0, 5 dropped, 6 kept */
    const int into[N] = {0, 0, 2, 2, 4, -1, 6};
    const struct reduce_rows rows = {.x = x, .dim = DIM, .tag = tag, .pos = pos};
    assert_int_equal(reduce_apply(&rows, w, into, N, scratch), 4);
    const float want_x[4 * DIM] = {2, 3, 6.5f, 7.5f, 9, 10, 13, 14}, want_w[4] = {0, 4, 0, 2};
    const int want_pos[4] = {40, 42, 44, 46};
    for (int i = 0; i < 4; i++) {
        assert_true(fabsf(w[i] - want_w[i]) <= 1e-5f * fmaxf(want_w[i], 1));
        assert_int_equal(pos[i], want_pos[i]);
        assert_int_equal(tag[i].pos, want_pos[i] - 40);
        for (int d = 0; d < DIM; d++)
            if (!(fabsf(x[i * DIM + d] - want_x[i * DIM + d]) <= 1e-5f * fabsf(want_x[i * DIM + d])))
                fail_msg("apply fixed: x[%d][%d] = %.9g, want %.9g", i, d, x[i * DIM + d], want_x[i * DIM + d]);
    }

    /* unit weights: plain means */
    float y[N * DIM] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    for (int i = 0; i < N; i++) tag[i] = text_tag(i), pos[i] = i;
    const int into2[N] = {-1, 2, 2, 2, 4, 4, 6};
    assert_int_equal(
        reduce_apply(&(struct reduce_rows){.x = y, .dim = DIM, .tag = tag, .pos = pos}, NULL, into2, N, scratch), 3);
    const float want_y[3 * DIM] = {5, 6, 10, 11, 13, 14};
    for (int i = 0; i < 3 * DIM; i++) assert_true(fabsf(y[i] - want_y[i]) <= 1e-5f * want_y[i]);
    assert_int_equal(pos[0], 2);
    assert_int_equal(pos[1], 4);
    assert_int_equal(pos[2], 6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups),         cmocka_unit_test(test_groups_update_vanished_frame),
        cmocka_unit_test(test_bipartite_random), cmocka_unit_test(test_bipartite_ties),
        cmocka_unit_test(test_lightkv_windows), cmocka_unit_test(test_lightkv_stages),
        cmocka_unit_test(test_tome),           cmocka_unit_test(test_fastv),
        cmocka_unit_test(test_apply_random),   cmocka_unit_test(test_apply_fixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
