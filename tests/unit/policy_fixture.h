/* What the tests of the KV policy rules share (test_kv_policy.c and a
 * test_rule_<name>.c beside each rule of src/kv/policy/): small heads of
 * random keys, the naive top-k, a rule run and its kept positions
 * checked. */
#ifndef KVF_TEST_POLICY_FIXTURE_H
#define KVF_TEST_POLICY_FIXTURE_H

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

static inline float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A head of n entries with random keys and alternating text/image tags. */
static inline void make_head(struct kv_cache *c, int n, int d, unsigned seed) {
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
static inline void naive_top(const double *x, int n, int keep, int *out) {
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
static inline void check_kept(struct kv_cache *c, const struct kv_policy *p, const float *win, int keep,
                              const int *want, int n_want) {
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

#endif
