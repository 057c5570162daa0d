/* KV policies: spec parsing, budgets, and every scoring rule and the
 * selection against naive computations on small heads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kv/policy.h"
#include "kv/reduce.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void test_parse(void **st) {
    (void)st;
    struct kv_policy p;
    assert_int_equal(kv_policy_parse(NULL, &p), KVF_OK);
    assert_int_equal(p.method, KV_FULL);
    assert_int_equal(kv_policy_parse("snapkv", &p), KVF_OK);
    assert_int_equal(p.method, KV_SNAPKV);
    assert_true(p.budget == 0.2 && p.window == 32 && p.kernel == 5);
    assert_int_equal(kv_policy_parse("snapkv:budget=1024,window=16,kernel=7", &p), KVF_OK);
    assert_true(p.budget == 1024 && p.window == 16 && p.kernel == 7);
    assert_int_equal(kv_policy_parse("streaming:sinks=2,budget=0.5", &p), KVF_OK);
    assert_true(p.sinks == 2 && p.budget == 0.5);
    assert_int_equal(kv_policy_parse("random:seed=7", &p), KVF_OK);
    assert_true(p.seed == 7);
    const char *bad[] = {"nosuch", "snapkv:window", "snapkv:bogus=1", "snapkv:budget=0", "snapkv:budget=1.5",
                         "snapkv:budget=-3", "snapkv:kernel=4", "snapkv:window=x", "full:budget=0.5",
                         "keydiff:sinks=3", "random:seed=-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (kv_policy_parse(bad[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad[i]);
        assert_true(strlen(kvf_last_error()) > 0);
    }
    assert_int_equal(kv_policy_parse("nosuch", &p), KVF_ERR_INVALID_ARG);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kvf_last_error());
    for (int i = 0; i < kvf_kv_policy_count(); i++) { /* the message lists every valid name */
        struct kvf_kv_policy_info info;
        kvf_kv_policy_get(i, &info);
        if (!strstr(msg, info.name)) fail_msg("'%s' is missing from: %s", info.name, msg);
    }
    assert_int_equal(kvf_kv_policy_get(kvf_kv_policy_count(), &(struct kvf_kv_policy_info){0}), KVF_ERR_INVALID_ARG);
    /* LOOK-M's recent and important shares; PrefixKV's budget source. */
    assert_int_equal(kv_policy_parse("lookm", &p), KVF_OK);
    assert_true(p.method == KV_LOOKM && p.recent == 0.5 && p.merge == KV_MERGE_PIVOTAL && p.text_prior);
    assert_int_equal(kv_policy_parse("lookm:important=0.75,merge=avg,text_prior=0", &p), KVF_OK);
    assert_true(fabs(p.recent - 0.25) < 1e-12 && p.merge == KV_MERGE_AVG && !p.text_prior);
    assert_int_equal(kv_policy_parse("lookm:recent=0.1,important=0.3,merge=weighted", &p), KVF_OK);
    assert_true(fabs(p.recent - 0.25) < 1e-12 && p.merge == KV_MERGE_WEIGHTED);
    assert_int_equal(kv_policy_parse("lookm:budget=0.3,important=0.3", &p), KVF_OK); /* with a budget too */
    assert_true(fabs(p.recent - 0.7) < 1e-12 && p.budget == 0.3);
    assert_int_equal(kv_policy_parse("prefixkv:budget=0.1", &p), KVF_OK);
    assert_true(p.alloc == KV_ALLOC_PREFIX && p.online && p.decode == KV_DECODE_FIXED && kv_policy_per_layer(&p));
    assert_int_equal(kv_policy_parse("prefixkv:profile=x.json", &p), KVF_OK);
    assert_true(!p.online && !strcmp(p.profile, "x.json"));
    assert_int_equal(kv_policy_parse("elastic", &p), KVF_OK);
    assert_true(p.merge == KV_MERGE_POSITION && p.decode == KV_DECODE_FIXED && kv_policy_needs_acc(&p));
    const char *bad_m[] = {"lookm:merge=sum", "lookm:text_prior=2", "lookm:recent=0,important=0", "prefixkv:online=0",
                           "prefixkv:profile=x.json,online=1", "knorm+budget=prefix", "snapkv:merge=avg"};
    for (size_t i = 0; i < sizeof bad_m / sizeof *bad_m; i++)
        if (kv_policy_parse(bad_m[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad_m[i]);
    /* Block-wise prefill. */
    assert_int_equal(kv_policy_parse("blockwise", &p), KVF_OK);
    assert_true(p.blocks && p.budget == 1024 && p.block == 256 && p.evict == KV_SNAPKV && kv_policy_needs_window(&p));
    assert_int_equal(kv_policy_parse("blockwise:budget=512,block=image,evict=keydiff,first=2048+decode=h2o", &p),
                     KVF_OK);
    assert_true(p.block == 0 && p.evict == KV_KEYDIFF && p.first == 2048 && p.decode == KV_DECODE_H2O &&
                !kv_policy_needs_window(&p));
    assert_int_equal(kv_policy_parse("blockwise:budget=512,question=1", &p), KVF_OK);
    assert_true(p.question && p.block_budget == 512 && p.block_window == 32);
    /* The schedule stage keeps its budget and window apart from the preset's. */
    assert_int_equal(kv_policy_parse("snapkv:budget=0.1,window=8+schedule=blocks:budget=300,block=image,window=16", &p),
                     KVF_OK);
    assert_true(p.blocks && p.budget == 0.1 && p.window == 8 && p.block_budget == 300 && p.block_window == 16 &&
                p.block == 0 && p.evict == KV_SNAPKV && p.kernel == 5);
    assert_int_equal(kv_policy_parse("h2o+schedule=blocks:evict=keydiff", &p), KVF_OK);
    assert_true(p.blocks && p.budget == 0.2 && p.block_budget == 1024 && p.evict == KV_KEYDIFF &&
                p.decode == KV_DECODE_H2O);
    /* Reduce stage: lists after a key continue over commas. */
    assert_int_equal(kv_policy_parse("lightkv:layers=3,5,9,windows=3,2,1,ratio=0.25", &p), KVF_OK);
    assert_true(p.reduce == KV_REDUCE_LIGHTKV && p.n_stages == 3 && p.stage_layer[2] == 9 && p.n_windows == 3 &&
                p.stage_window[0] == 3 && p.reduce_ratio == 0.25 && p.budget == 1.0);
    assert_int_equal(kv_policy_parse("fastv:k=3,r=0.75", &p), KVF_OK);
    assert_true(p.reduce == KV_REDUCE_FASTV && p.n_stages == 1 && p.stage_layer[0] == 3 && p.reduce_ratio == 0.75);
    assert_int_equal(kv_policy_parse("snapkv:budget=0.1+reduce=tome:ratio=0.3", &p), KVF_OK);
    assert_true(p.method == KV_SNAPKV && p.reduce == KV_REDUCE_TOME && p.n_stages == 0 && p.reduce_ratio == 0.3);
    int lay[KV_REDUCE_MAX], win[KV_REDUCE_MAX];
    assert_int_equal(kv_policy_parse("lightkv", &p), KVF_OK);
    assert_int_equal(kv_reduce_stages(&p, 32, lay, win), 3);
    assert_true(lay[0] == 12 && lay[1] == 18 && lay[2] == 24 && win[0] == 4 && win[1] == 2 && win[2] == 1);
    assert_int_equal(kv_reduce_stages(&p, 30, lay, win), 3); /* scaled: 11.25, 16.9, 22.5 */
    assert_true(lay[0] == 11 && lay[1] == 17 && lay[2] == 23);
    assert_int_equal(kv_reduce_stages(&p, 2, lay, win), 1); /* all three fall after layer 1: the first stays */
    assert_true(lay[0] == 1 && win[0] == 4);
    assert_int_equal(kv_reduce_stages(&p, 1, lay, win), 0);
    assert_int_equal(kv_policy_parse("fastv", &p), KVF_OK);
    assert_int_equal(kv_reduce_stages(&p, 30, lay, win), 1); /* FastV's K is not scaled */
    assert_true(lay[0] == 2);
    assert_int_equal(kv_policy_parse("lightkv:layers=4,40,windows=2,1", &p), KVF_OK);
    assert_int_equal(kv_reduce_stages(&p, 30, lay, win), -1);
    assert_non_null(strstr(kvf_last_error(), "40"));
    const char *bad_r[] = { "lightkv:layers=12,18",
                            "lightkv:windows=2,1",
                            "lightkv:layers=5,5,9",
                            "lightkv:layers=0,4,8",
                            "lightkv:layers=4,x,8",
                            "lightkv:ratio=1.5",
                            "fastv:k=0",
                            "fastv:r=-0.1",
                            "tome:windows=2",
                            "lightkv+schedule=blocks",
                            "blockwise+reduce=fastv",
                            "snapkv:question=1",
                            "blockwise:evict=keydiff,question=1",
                            "h2o+schedule=blocks:budget=0.5",
                            "lightkv:layers=",
                            "h2o+schedule=blocks:kernel=3",
                            "h2o+schedule=blocks:question=1,evict=keydiff",
                            "kvzip+decode=h2o",
                            "kvzip+decode=recompress",
                            "kvzip+schedule=blocks:budget=64",
                            "kvzip+reduce=fastv",
                            "keydiff+budget=global+decode=window",
                            "elastic+budget=global",
                            "csp+budget=global",
                            "full+budget=global",
                            "expected:future=0",
                            "kvzip:chunk=0",
                            "expected:chunk=8",
                            "kvzip:future=8" };
    for (size_t i = 0; i < sizeof bad_r / sizeof *bad_r; i++)
        if (kv_policy_parse(bad_r[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad_r[i]);
    /* Stages after '+'. */
    assert_int_equal(kv_policy_parse("snapkv:budget=0.1+decode=h2o:recent=0.25+budget=pyramid:beta=4", &p), KVF_OK);
    assert_true(p.method == KV_SNAPKV && p.budget == 0.1 && p.decode == KV_DECODE_H2O && p.recent == 0.25 &&
                p.alloc == KV_ALLOC_PYRAMID && p.beta == 4);
    assert_int_equal(kv_policy_parse("keydiff+decode=fixed-distance:distance=7", &p), KVF_OK);
    assert_true(p.decode == KV_DECODE_FIXED && p.distance == 7);
    assert_int_equal(kv_policy_parse("knorm+decode=recompress:every=5", &p), KVF_OK);
    assert_true(p.decode == KV_DECODE_RECOMPRESS && p.every == 5);
    assert_int_equal(kv_policy_parse("h2o", &p), KVF_OK);
    assert_true(p.decode == KV_DECODE_H2O && kv_policy_needs_acc(&p));
    assert_int_equal(kv_policy_parse("h2o+decode=grow", &p), KVF_OK);
    assert_true(p.decode == KV_DECODE_GROW);
    assert_int_equal(kv_policy_parse("streaming", &p), KVF_OK);
    assert_true(p.decode == KV_DECODE_WINDOW && !kv_policy_needs_acc(&p));
    assert_int_equal(kv_policy_parse("pyramidkv", &p), KVF_OK);
    assert_true(p.alloc == KV_ALLOC_PYRAMID && p.beta == 20);
    const char *bad_stage[] = {"snapkv+", "snapkv+decode", "snapkv+decode=slide", "snapkv+reduce=fast",
                               "snapkv+budget=0.3", "snapkv+decode=h2o:every=3", "snapkv+decode=recompress:every=0",
                               "full+decode=h2o", "decode=h2o", "snapkv+decode=window:sinks=x"};
    for (size_t i = 0; i < sizeof bad_stage / sizeof *bad_stage; i++) {
        if (kv_policy_parse(bad_stage[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad_stage[i]);
        assert_true(strlen(kvf_last_error()) > 0);
    }
    for (int i = 0; i < kvf_kv_policy_count(); i++) { /* every listed preset and stage option parses */
        struct kvf_kv_policy_info info;
        assert_int_equal(kvf_kv_policy_get(i, &info), KVF_OK);
        char spec[96];
        /* h2o decodes with its own rule, which a global budget does not keep: keydiff there */
        if (strcmp(info.stage, "preset"))
            snprintf(spec, sizeof spec, "%s+%s=%s", strcmp(info.name, "global") ? "h2o" : "keydiff", info.stage,
                     info.name);
        else snprintf(spec, sizeof spec, "%s", info.name);
        assert_int_equal(kv_policy_parse(spec, &p), KVF_OK);
    }
}

static void test_keep_count(void **st) {
    (void)st;
    struct kv_policy p;
    kv_policy_parse("snapkv:budget=0.2", &p);
    assert_int_equal(kv_policy_keep_count(&p, 100), 20);
    assert_int_equal(kv_policy_keep_count(&p, 7), 1);    /* 1.4 rounds to 1 */
    kv_policy_parse("snapkv:budget=64", &p);
    assert_int_equal(kv_policy_keep_count(&p, 100), 64);
    assert_int_equal(kv_policy_keep_count(&p, 40), 40);  /* never more than there is */
    kv_policy_parse("snapkv:budget=1", &p);
    assert_int_equal(kv_policy_keep_count(&p, 100), 100);
}

/* A head of n entries with random keys and alternating text/image tags. */
static void make_head(struct kv_cache *c, int n, int d, unsigned seed) {
    assert_int_equal(kv_cache_init(c, 1, 1, d, true), KVF_OK);
    float *k = malloc(sizeof(float) * n * d), *v = malloc(sizeof(float) * n * d);
    struct kvf_tag *t = calloc(n, sizeof *t);
    for (int i = 0; i < n * d; i++) k[i] = frand(&seed) + (i % d == 0 ? 0.5f : 0.0f), v[i] = frand(&seed);
    for (int i = 0; i < n; i++) t[i] = (struct kvf_tag){.pos = i, .modality = (int16_t)((i / 5) % 2), .media = -1};
    assert_int_equal(kv_cache_reserve(c, 0, n), KVF_OK);
    kv_cache_append(c, 0, k, v, t, n);
    free(k), free(v), free(t);
}

/* Indices of the `keep` largest of x (ties: earlier first), ascending. */
static void naive_top(const double *x, int n, int keep, int *out) {
    char *taken = calloc(n, 1);
    for (int r = 0; r < keep; r++) {
        int best = -1;
        for (int j = 0; j < n; j++)
            if (!taken[j] && (best < 0 || x[j] > x[best])) best = j;
        taken[best] = 1;
    }
    for (int j = 0, o = 0; j < n; j++)
        if (taken[j]) out[o++] = j;
    free(taken);
}

/* Runs a rule, keeps `keep` and checks that positions want[0..n_want) survive. */
static void check_kept(struct kv_cache *c, const struct kv_policy *p, const float *win, int keep, const int *want,
                       int n_want) {
    struct kv_head *h = kv_cache_head(c, 0, 0);
    const int n = h->n;
    float *score = malloc(sizeof(float) * n), *tmp = malloc(sizeof(float) * n);
    int *idx = malloc(sizeof(int) * n);
    const struct kv_score_in in = {.p = p, .h = h, .head_dim = c->head_dim, .keep = keep, .win_attn = win,
                                   .seed = 5, .scratch = tmp};
    if (p->method == KV_H2O) /* the attention sums live next to the entries */
        for (int j = 0; j < n; j++) h->acc[j * KV_ACC_N + KV_ACC_SUM] = win[j];
    kv_rule_of(p->method)->score(&in, score);
    assert_int_equal(kv_select_keep(c, 0, 0, score, keep, idx), KVF_OK);
    assert_int_equal(h->n, n_want);
    for (int i = 0; i < n_want; i++)
        if (h->tag[i].pos != want[i]) fail_msg("kept entry %d is position %d, want %d", i, h->tag[i].pos, want[i]);
    free(score), free(tmp), free(idx);
}

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

static void test_snapkv(void **st) {
    (void)st;
    const int n = 40, W = 6, K = 5, keep = 15;
    struct kv_cache c;
    make_head(&c, n, 8, 2);
    unsigned s = 3;
    float win[40];
    for (int j = 0; j < n; j++) win[j] = fabsf(frand(&s));
    /* Naive: avg_pool1d(kernel 5, padding 2, count_include_pad) over the
     * entries before the window; the window is kept. */
    double pooled[40];
    for (int j = 0; j < n - W; j++) {
        double a = 0;
        for (int t = j - K / 2; t <= j + K / 2; t++) a += t >= 0 && t < n - W ? win[t] : 0.0;
        pooled[j] = a / K;
    }
    int want[40];
    naive_top(pooled, n - W, keep - W, want);
    for (int i = 0; i < W; i++) want[keep - W + i] = n - W + i;
    struct kv_policy p;
    kv_policy_parse("snapkv:budget=15,window=6,kernel=5", &p);
    check_kept(&c, &p, win, keep, want, keep);
    kv_cache_free(&c);
}

/* PyramidKV's layer budgets, worked by hand: N = 2247, C = 449, W = 32 ->
 * C-W = 417, min = 20, max = 814, step = (814-20)/29 = 27. */
static void test_pyramid(void **st) {
    (void)st;
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("pyramidkv:budget=0.2", &p), KVF_OK);
    assert_int_equal(kv_policy_keep_count(&p, 2247), 449);
    assert_int_equal(kv_policy_layer_keep(&p, 2247, 0, 30), 814 + 32);
    assert_int_equal(kv_policy_layer_keep(&p, 2247, 1, 30), 814 - 27 + 32);
    assert_int_equal(kv_policy_layer_keep(&p, 2247, 29, 30), 814 - 29 * 27 + 32);
    int total = 0;
    for (int l = 0; l < 30; l++) total += kv_policy_layer_keep(&p, 2247, l, 30);
    assert_true(abs(total - 30 * 449) <= 30 * 30); /* the pyramid spends about the uniform total */
    assert_int_equal(kv_pyramid_keep(&p, 800, 449, 0, 30), 449); /* N < 2(C-W): uniform */
    assert_int_equal(kv_pyramid_keep(&p, 2247, 449, 0, 1), 449);  /* one layer: uniform */
    kv_policy_parse("snapkv:budget=0.2", &p);
    assert_int_equal(kv_policy_layer_keep(&p, 2247, 0, 30), 449);
    assert_int_equal(kv_policy_parse("pyramidkv:beta=0", &p), KVF_ERR_INVALID_ARG);
}

/* H2O: the last recent x keep entries, then the largest attention sums. */
static void test_h2o(void **st) {
    (void)st;
    const int n = 50, keep = 10;
    struct kv_cache c;
    make_head(&c, n, 8, 9);
    unsigned s = 21;
    float sum[50];
    double x[50];
    for (int j = 0; j < n; j++) x[j] = sum[j] = fabsf(frand(&s)) * 3.0f;
    int want[50];
    naive_top(x, n - 5, keep - 5, want); /* recent=0.5 of 10: the last 5 are kept anyway */
    for (int i = 0; i < 5; i++) want[5 + i] = n - 5 + i;
    struct kv_policy p;
    kv_policy_parse("h2o:budget=10,recent=0.5", &p);
    check_kept(&c, &p, sum, keep, want, keep);
    kv_cache_free(&c);
    assert_int_equal(kv_policy_parse("h2o:recent=1.5", &p), KVF_ERR_INVALID_ARG);
}

static void test_key_rules(void **st) {
    (void)st;
    const int n = 33, d = 8, keep = 9;
    for (int rule = 0; rule < 2; rule++) {
        struct kv_cache c;
        make_head(&c, n, d, 4 + rule);
        const float *k = kv_cache_head(&c, 0, 0)->k;
        double x[33], anchor[8] = {0};
        for (int j = 0; j < n; j++) {
            double nn = 0;
            for (int e = 0; e < d; e++) nn += (double)k[j * d + e] * k[j * d + e];
            for (int e = 0; e < d; e++) anchor[e] += k[j * d + e] / sqrt(nn);
        }
        for (int j = 0; j < n; j++) {
            double nn = 0, dot = 0, an = 0;
            for (int e = 0; e < d; e++)
                nn += (double)k[j * d + e] * k[j * d + e], dot += k[j * d + e] * anchor[e], an += anchor[e] * anchor[e];
            x[j] = rule == 0 ? -dot / (sqrt(nn) * sqrt(an)) : -sqrt(nn);
        }
        int want[33];
        naive_top(x, n, keep, want);
        struct kv_policy p;
        kv_policy_parse(rule == 0 ? "keydiff:budget=9" : "knorm:budget=9", &p);
        check_kept(&c, &p, NULL, keep, want, keep);
        kv_cache_free(&c);
    }
}

/* Two policies alike in every field a rule reads (not in which keys a spec gave). */
static bool policy_same(const struct kv_policy *a, const struct kv_policy *b) {
    return a->method == b->method && a->budget == b->budget && a->sinks == b->sinks && a->recent == b->recent &&
           a->window == b->window && a->kernel == b->kernel && a->seed == b->seed && a->alloc == b->alloc &&
           a->beta == b->beta && a->decode == b->decode && a->distance == b->distance && a->every == b->every &&
           a->merge == b->merge && a->important == b->important && a->text_prior == b->text_prior &&
           a->cross_ratio == b->cross_ratio && a->nsm_n == b->nsm_n && a->decode_softmax == b->decode_softmax &&
           a->blocks == b->blocks && a->block == b->block && a->first == b->first && a->evict == b->evict &&
           a->block_budget == b->block_budget && a->block_window == b->block_window && a->question == b->question &&
           a->reduce == b->reduce && a->reduce_ratio == b->reduce_ratio && a->online == b->online &&
           a->future == b->future && a->chunk == b->chunk && a->head_floor == b->head_floor &&
           !strcmp(a->profile, b->profile);
}

/* The registry: what `kvfold policies` shows as a preset's defaults parses
 * back to the preset itself; every listed key is declared; keys match
 * exactly. */
static void test_registry(void **st) {
    (void)st;
    for (int m = 0; m < KV_METHOD_COUNT; m++) {
        const struct kv_rule *r = kv_rule_of((enum kv_method)m);
        assert_int_equal(r->defaults.method, m);
        assert_string_equal(r->stage, "preset");
        struct kv_policy bare, shown;
        assert_int_equal(kv_policy_parse(r->name, &bare), KVF_OK);
        if (bare.reduce != KV_REDUCE_NONE) continue; /* shown layers are the 32-layer defaults, scaled when unset */
        char spec[512];
        size_t n = (size_t)snprintf(spec, sizeof spec, "%s%s", r->name, r->shown[0] && r->shown[0] != '+' ? ":" : "");
        for (const char *c = r->shown; *c; c++)
            if (*c != ' ') spec[n++] = *c;
        spec[n] = '\0';
        if (kv_policy_parse(spec, &shown) != KVF_OK) fail_msg("'%s': %s", spec, kvf_last_error());
        if (!policy_same(&bare, &shown)) fail_msg("'%s' shows defaults other than its own", spec);
    }
    struct kv_policy p;
    for (int i = 0; i < kvf_kv_policy_count(); i++) { /* each listed key is one the parser knows */
        struct kvf_kv_policy_info info;
        assert_int_equal(kvf_kv_policy_get(i, &info), KVF_OK);
        char keys[128];
        snprintf(keys, sizeof keys, "%s", info.keys);
        for (char *k = strtok(keys, " "); k; k = strtok(NULL, " ")) {
            char spec[256];
            snprintf(spec, sizeof spec, !strcmp(info.stage, "preset") ? "%s:%s=" : "snapkv+%s=%s:%s=",
                     !strcmp(info.stage, "preset") ? info.name : info.stage,
                     !strcmp(info.stage, "preset") ? k : info.name, k);
            assert_int_equal(kv_policy_parse(spec, &p), KVF_ERR_INVALID_ARG);
            if (strstr(kvf_last_error(), "unknown key")) fail_msg("%s: %s", spec, kvf_last_error());
        }
    }
    const char *inexact[] = { "snapkv:budget=0.2,window kernel=0",
                              "snapkv:windows=3",
                              "snapkv:kern=3",
                              "h2o:recent_=0.1",
                              "fastv:k=2,ratio=0.5",
                              "snapkv:budget=0.2+decode=h2o:sinks=2" };
    for (size_t i = 0; i < sizeof inexact / sizeof *inexact; i++) {
        if (kv_policy_parse(inexact[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", inexact[i]);
        assert_non_null(strstr(kvf_last_error(), "unknown key"));
    }
    /* A budget given apart from the spec, as eval sweeps them. */
    assert_int_equal(kv_policy_parse_budget("lookm:merge=avg+decode=h2o", 0.05, &p), KVF_OK);
    assert_true(p.budget == 0.05 && p.merge == KV_MERGE_AVG && p.decode == KV_DECODE_H2O);
    assert_int_equal(kv_policy_parse_budget("snapkv:budget=0.5", 300, &p), KVF_OK);
    assert_true(p.budget == 300);
    assert_int_equal(kv_policy_parse_budget("fastv", 0.2, &p), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_policy_parse_budget("snapkv", 1.5, &p), KVF_ERR_INVALID_ARG);
}

/* The pool stage against a direct sum: finite scores averaged over width
 * neighbours (zero padding, infinite neighbours count 0), infinite ones kept. */
static void test_pool(void **st) {
    (void)st;
    unsigned seed = 7;
    for (int n = 1; n <= 40; n += 13)
        for (int width = 1; width <= 7; width += 2) {
            float score[40], want[40], tmp[40];
            for (int j = 0; j < n; j++) score[j] = j % 9 == 4 ? INFINITY : j % 11 == 6 ? -INFINITY : frand(&seed);
            for (int j = 0; j < n; j++) {
                double sum = 0;
                for (int t = j - width / 2; t <= j + width / 2; t++)
                    if (t >= 0 && t < n && isfinite(score[t])) sum += score[t];
                want[j] = isfinite(score[j]) ? (float)(sum / width) : score[j];
            }
            kv_pool_scores(score, n, width, tmp);
            for (int j = 0; j < n; j++)
                if (!(score[j] == want[j] || fabsf(score[j] - want[j]) < 1e-6f))
                    fail_msg("n %d width %d entry %d: %g, want %g", n, width, j, score[j], want[j]);
        }
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("h2o:budget=0.3+pool=avg", &p), KVF_OK);
    assert_true(p.pool == KV_POOL_AVG && p.width == 5 && p.method == KV_H2O && p.budget == 0.3);
    assert_int_equal(kv_policy_parse("csp+pool=avg:width=3+decode=h2o", &p), KVF_OK);
    assert_true(p.pool == KV_POOL_AVG && p.width == 3 && p.decode == KV_DECODE_H2O);
    const char *bad[] = {"h2o+pool=avg:width=4", "h2o+pool=max", "h2o+pool=avg:kernel=3", "h2o+pool=avg:width=0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (kv_policy_parse(bad[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad[i]);
}

/* Ada-KV's head-wise budgets against a direct reading of the rule: each
 * head's best floor(floor x per_head) entries first, then the best of the
 * rest over the whole layer, one at a time (ties: lower head, then earlier
 * entry), until the layer holds n_head x per_head. */
static void test_adaptive(void **st) {
    (void)st;
    unsigned seed = 11;
    for (int trial = 0; trial < 300; trial++) {
        const int H = 1 + trial % 4, per = 1 + trial % 9;
        const double floor_share = (trial % 5) / 4.0;
        int n[4], total = 0;
        float score[4 * 24], orig[4 * 24];
        for (int g = 0; g < H; g++) n[g] = 1 + (int)((frand(&seed) + 1.0f) * 11.0f), total += n[g];
        for (int j = 0; j < total; j++) {
            const float r = frand(&seed);
            /* coarse values make ties; a few entries are always kept */
            orig[j] = score[j] = r > 0.9f ? INFINITY : trial % 3 == 0 ? floorf(r * 4.0f) : r;
        }
        char want[4 * 24] = {0};
        const int safe = (int)floor(floor_share * per);
        int held = 0;
        for (int g = 0, base = 0; g < H; base += n[g++])
            for (int k = 0; k < n[g]; k++) { /* the head's safe best, or its infinite ones */
                int best = -1;
                for (int j = base; j < base + n[g]; j++)
                    if (!want[j] && (best < 0 || orig[j] > orig[best])) best = j;
                if (k < safe || orig[best] == INFINITY) want[best] = 1, held++;
            }
        while (held < H * per && held < total) {
            int best = -1;
            for (int j = 0; j < total; j++)
                if (!want[j] && (best < 0 || orig[j] > orig[best])) best = j;
            want[best] = 1, held++;
        }
        int out[4 * 24], count[4], scratch[24];
        const int kept = kv_adaptive_select(H, n, score, per, floor_share, out, count, scratch);
        assert_int_equal(kept, held);
        for (int g = 0, o = 0, base = 0; g < H; base += n[g++]) {
            int c = 0;
            for (int j = base; j < base + n[g]; j++) c += want[j];
            if (count[g] != c) fail_msg("trial %d head %d: keeps %d, the rule %d", trial, g, count[g], c);
            for (int k = 0; k < count[g]; k++, o++) {
                assert_true(want[base + out[o]]);
                if (k > 0) assert_true(out[o] > out[o - 1]);
            }
        }
    }
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("snapkv:budget=0.2+budget=adaptive", &p), KVF_OK);
    assert_true(p.alloc == KV_ALLOC_ADAPTIVE && p.head_floor == 0.2);
    assert_int_equal(kv_policy_parse("h2o+budget=adaptive:floor=0.5+decode=h2o", &p), KVF_OK);
    assert_true(p.alloc == KV_ALLOC_ADAPTIVE && p.head_floor == 0.5 && p.decode == KV_DECODE_H2O);
    const char *bad[] = {"snapkv+budget=adaptive:floor=1.5", "snapkv+budget=adaptive:beta=3", "full+budget=adaptive",
                         "elastic+budget=adaptive", "prefixkv+budget=adaptive", "csp+budget=adaptive",
                         "lightkv+budget=adaptive"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (kv_policy_parse(bad[i], &p) != KVF_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad[i]);
}

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

/* Decode stage rules on one head, and that a few evictions (the linear
 * scan) choose what the full sort chooses. */
static void test_decode_rules(void **st) {
    (void)st;
    const int n = 30, target = 27;
    struct kv_policy p;
    struct kv_cache c;
    float score[30], tmp[30];
    int idx[30];
    /* window: sinks, then the newest. */
    kv_policy_parse("snapkv+decode=window:sinks=2", &p);
    make_head(&c, n, 8, 1);
    struct kv_head *h = kv_cache_head(&c, 0, 0);
    struct kv_score_in in = {.p = &p, .h = h, .head_dim = 8, .keep = target, .scratch = tmp};
    kv_decode_score(&in, 20, score);
    assert_int_equal(kv_select_keep(&c, 0, 0, score, target, idx), KVF_OK);
    assert_int_equal(h->n, target);
    assert_int_equal(h->tag[0].pos, 0);
    assert_int_equal(h->tag[1].pos, 1);
    assert_int_equal(h->tag[2].pos, 5);
    kv_cache_free(&c);
    /* fixed-distance: n0 = 20, distance 4 -> entries 16, 17, 18 go. */
    kv_policy_parse("snapkv+decode=fixed-distance:distance=4", &p);
    make_head(&c, n, 8, 1);
    h = kv_cache_head(&c, 0, 0);
    in.h = h;
    kv_decode_score(&in, 20, score);
    assert_int_equal(kv_select_keep(&c, 0, 0, score, target, idx), KVF_OK);
    for (int i = 0; i < target; i++) assert_int_equal(h->tag[i].pos, i < 16 ? i : i + 3);
    kv_cache_free(&c);
    /* h2o: the smallest sums outside the recent share (0.5 x 27 -> 14). */
    kv_policy_parse("snapkv+decode=h2o", &p);
    for (int evict = 1; evict <= 12; evict++) { /* scan (<= 8) and sort paths */
        make_head(&c, n, 8, 1);
        h = kv_cache_head(&c, 0, 0);
        in.h = h;
        in.keep = n - evict;
        unsigned s = 5;
        double x[30];
        for (int j = 0; j < n; j++) {
            h->acc[j * KV_ACC_N + KV_ACC_SUM] = (float)(int)(fabsf(frand(&s)) * 6); /* many ties */
            x[j] = j >= n - (int)floor(in.keep * 0.5 + 0.5) ? 1e30 : h->acc[j * KV_ACC_N + KV_ACC_SUM];
        }
        int want[30];
        naive_top(x, n, n - evict, want);
        kv_decode_score(&in, 0, score);
        assert_int_equal(kv_select_keep(&c, 0, 0, score, n - evict, idx), KVF_OK);
        assert_int_equal(h->n, n - evict);
        for (int i = 0; i < n - evict; i++)
            if (h->tag[i].pos != want[i])
                fail_msg("evict %d: entry %d is %d, want %d", evict, i, h->tag[i].pos, want[i]);
        kv_cache_free(&c);
    }
}

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

/* CSP: the top by cross, the top by self (outside the recent window), the
 * union filled up from the combined ranking, and the recent window. */
static void test_csp(void **st) {
    (void)st;
    const int n = 40, keep = 16;
    struct kv_cache c;
    make_head(&c, n, 8, 3);
    struct kv_head *h = kv_cache_head(&c, 0, 0);
    float self[40], cross[40], score[40], tmp[40];
    int iscr[40], idx[40];
    unsigned sd = 17;
    /* Lists that overlap: a few entries are on top of both. */
    for (int j = 0; j < n; j++) {
        self[j] = fabsf(frand(&sd));
        cross[j] = j % 7 == 0 ? 2.0f + self[j] : fabsf(frand(&sd));
    }
    struct kv_policy p;
    assert_int_equal(kv_policy_parse("csp:budget=16,recent=0.25,cross_ratio=0.5", &p), KVF_OK);
    const struct kv_score_in in = {.p = &p, .h = h, .head_dim = 8, .keep = keep, .win_attn = self, .win_cross = cross,
                                   .scratch = tmp, .iscratch = iscr};
    kv_score_csp(&in, score);
    /* Naive: recent 4, k = 12: 6 by cross, 6 by self, union, fill by sum. */
    const int body = n - 4;
    char chosen[40] = {0};
    double x[40];
    int top[40];
    for (int j = 0; j < body; j++) x[j] = cross[j];
    naive_top(x, body, 6, top);
    for (int i = 0; i < 6; i++) chosen[top[i]] = 1;
    for (int j = 0; j < body; j++) x[j] = self[j];
    naive_top(x, body, 6, top);
    for (int i = 0; i < 6; i++) chosen[top[i]] = 1;
    int got = 0;
    for (int j = 0; j < body; j++) got += chosen[j];
    assert_true(got < 12); /* the lists overlapped, so slots were freed */
    for (int j = 0; j < body; j++) x[j] = chosen[j] ? 1e30 : (double)self[j] + cross[j];
    naive_top(x, body, 12, top);
    int want[40], nw = 0;
    for (int i = 0; i < 12; i++) want[nw++] = top[i];
    for (int j = body; j < n; j++) want[nw++] = j;
    assert_int_equal(kv_select_keep(&c, 0, 0, score, keep, idx), KVF_OK);
    assert_int_equal(h->n, keep);
    for (int i = 0; i < keep; i++)
        if (h->tag[i].pos != want[i]) fail_msg("csp: kept %d is %d, want %d", i, h->tag[i].pos, want[i]);
    kv_cache_free(&c);
    assert_int_equal(kv_policy_parse("csp:cross_ratio=1.5", &p), KVF_ERR_INVALID_ARG);
    assert_int_equal(kv_policy_parse("csp:n=2,decode_softmax=1,window=0", &p), KVF_OK);
    assert_true(p.nsm_n == 2.0 && p.decode_softmax && p.window == 0 && kv_policy_needs_window(&p));
}

/* Which policies score with the prompt's last queries (the question when it
 * ends the prompt), and so must see it before they compress. */
static void test_question_aware(void **state) {
    (void)state;
    static const struct { const char *spec; bool aware; } cases[] = {
        {"snapkv", true}, {"pyramidkv", true}, {"csp", true}, {"blockwise", true}, {"fastv", true},
        {"lightkv", true}, {"keydiff", false}, {"knorm", false}, {"streaming", false}, {"h2o", false},
        {"lookm", false}, {"full", false}, {"tome", false}, {"blockwise:evict=keydiff", false},
        {"keydiff+reduce=fastv", true}, {"h2o+schedule=blocks", true}, {"snapkv:budget=0.1+decode=h2o", true},
        {"expected", false}, {"kvzip", false}, {"snapkv+budget=global", true}, {"tova", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool aware = !cases[i].aware;
        assert_int_equal(kvf_kv_policy_question_aware(cases[i].spec, &aware), KVF_OK);
        if (aware != cases[i].aware) fail_msg("%s: question-aware %d", cases[i].spec, aware);
    }
    bool aware = true;
    assert_int_equal(kvf_kv_policy_question_aware("nosuch", &aware), KVF_ERR_INVALID_ARG);
    assert_false(aware);
    assert_int_equal(kvf_kv_policy_question_aware("snapkv", NULL), KVF_ERR_INVALID_ARG);
    /* the registry says the same of each preset, and of the stage options that make a policy so */
    for (int i = 0; i < kvf_kv_policy_count(); i++) {
        struct kvf_kv_policy_info info;
        assert_int_equal(kvf_kv_policy_get(i, &info), KVF_OK);
        if (!strcmp(info.stage, "preset")) {
            assert_int_equal(kvf_kv_policy_question_aware(info.name, &aware), KVF_OK);
            if (aware != info.question_aware) fail_msg("%s: the registry says %d", info.name, info.question_aware);
        } else if (!strcmp(info.name, "fastv") || !strcmp(info.name, "lightkv") || !strcmp(info.name, "blocks")) {
            if (!info.question_aware) fail_msg("+%s=%s is question-aware", info.stage, info.name);
        } else if (info.question_aware) {
            fail_msg("+%s=%s makes no policy question-aware", info.stage, info.name);
        }
    }
}

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
        cmocka_unit_test(test_parse),    cmocka_unit_test(test_keep_count), cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_snapkv),   cmocka_unit_test(test_h2o),        cmocka_unit_test(test_key_rules),
        cmocka_unit_test(test_pyramid),
        cmocka_unit_test(test_registry),   cmocka_unit_test(test_question_aware),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_adaptive),
        cmocka_unit_test(test_imgrand),  cmocka_unit_test(test_roco),       cmocka_unit_test(test_decode_rules),
        cmocka_unit_test(test_merge),    cmocka_unit_test(test_csp),        cmocka_unit_test(test_qstat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
