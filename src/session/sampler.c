/* Token sampler: the repeat penalty, then greedy, or temperature -> top-k ->
 * top-p -> min-p -> a draw from a seeded xoshiro256** generator. Temperature is applied first, so the
 * top-p and min-p cut-offs act on the distribution that is actually sampled.
 * The same seed and logits always give the same tokens. */
#include "core/common.h"
#include "core/vec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    int32_t id;
    double p; /* unnormalised probability exp(logit/temp - max) */
};

struct kvf_sampler {
    struct kvf_sampler_params params;
    uint64_t rng[4];      /* xoshiro256** state               */
    struct cand *cands;   /* scratch, cap entries, grown on demand */
    int cap;
    int32_t *hist;        /* the last penalty_last_n accepted tokens, a ring; NULL when the penalty is off */
    int hist_n, hist_at;  /* tokens in it, and where the next goes */
    float *pen;           /* scratch: penalised logits, pen_cap entries */
    uint32_t *seen;       /* [pen_cap]: the call that last penalised each token */
    uint32_t calls;
    int pen_cap;
};

struct kvf_sampler_params kvf_sampler_default_params(void) {
    /* llama.cpp's defaults for the truncation stages. */
    return (struct kvf_sampler_params){
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 42,
        .penalty_repeat = 1.0f, .penalty_last_n = 64,
    };
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

enum kvf_status kvf_sampler_init(const struct kvf_sampler_params *params, struct kvf_sampler **out) {
    if (!out)
        return err_set(KVF_ERR_INVALID_ARG, "kvf_sampler_init: out is NULL");
    *out = NULL;
    struct kvf_sampler_params p = params ? *params : kvf_sampler_default_params();
    if (isnan(p.temp) || isnan(p.top_p) || isnan(p.min_p) || !isfinite(p.penalty_repeat))
        return err_set(KVF_ERR_INVALID_ARG, "sampler: temp, top_p, min_p and penalty_repeat must be numbers");
    if (p.penalty_last_n > (1 << 20))
        return err_set(KVF_ERR_INVALID_ARG, "sampler: penalty_last_n %d over 2^20", p.penalty_last_n);
    const bool penalty = p.penalty_repeat > 0 && p.penalty_repeat != 1 && p.penalty_last_n > 0;
    struct kvf_sampler *s = calloc(1, sizeof *s);
    if (!s || (penalty && !(s->hist = malloc((size_t)p.penalty_last_n * sizeof *s->hist)))) {
        free(s);
        return err_set(KVF_ERR_NOMEM, "sampler: out of memory");
    }
    s->params = p;
    /* splitmix64 spreads any seed (including 0) over a non-zero state. */
    uint64_t x = p.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = rng_splitmix64(&x);
    *out = s;
    return KVF_OK;
}

void kvf_sampler_free(struct kvf_sampler *sampler) {
    if (!sampler)
        return;
    free(sampler->cands);
    free(sampler->hist);
    free(sampler->pen);
    free(sampler->seen);
    free(sampler);
}

void kvf_sampler_accept(struct kvf_sampler *s, int32_t token) {
    if (!s || !s->hist)
        return;
    s->hist[s->hist_at] = token;
    s->hist_at = (s->hist_at + 1) % s->params.penalty_last_n;
    s->hist_n = KVF_MIN(s->hist_n + 1, s->params.penalty_last_n);
}

/* logits with the repeat penalty applied (a copy in s->pen), or logits
 * itself when no token is penalised; NULL when out of memory. */
static const float *penalise(struct kvf_sampler *s, const float *logits, int n_vocab) {
    if (!s->hist_n)
        return logits;
    if (s->pen_cap < n_vocab) {
        float *p = realloc(s->pen, (size_t)n_vocab * sizeof *p);
        uint32_t *seen = p ? calloc((size_t)n_vocab, sizeof *seen) : NULL;
        if (p)
            s->pen = p;
        if (!seen)
            return NULL;
        free(s->seen);
        s->seen = seen;
        s->pen_cap = n_vocab;
        s->calls = 0;
    }
    if (++s->calls == 0) { /* the stamps wrapped: clear them */
        memset(s->seen, 0, (size_t)s->pen_cap * sizeof *s->seen);
        s->calls = 1;
    }
    memcpy(s->pen, logits, (size_t)n_vocab * sizeof *logits);
    const float r = s->params.penalty_repeat;
    for (int i = 0; i < s->hist_n; i++) {
        const int32_t t = s->hist[i];
        /* each distinct token once, as llama.cpp does */
        if (t >= 0 && t < n_vocab && s->seen[t] != s->calls) {
            s->seen[t] = s->calls;
            s->pen[t] = s->pen[t] <= 0 ? s->pen[t] * r : s->pen[t] / r;
        }
    }
    return s->pen;
}

/* First index of the largest logit; NaN never wins, and an all -inf/NaN row
 * gives 0 so the caller always gets a valid id. */
/* The first index of the largest logit (NaN ignored; 0 when none is above
 * -inf): the SIMD maximum, then the first place it occurs, so that greedy
 * decoding pays a few microseconds a token, not a branch per logit. */
static int32_t argmax(const float *logits, int n) {
    const float mx = vec_max(logits, n);
    if (mx == -INFINITY) return 0;
    int32_t i = 0;
    while (logits[i] != mx) i++;
    return i;
}

static int cand_cmp_desc(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id; /* ties: lower id first, for determinism */
}

static inline bool cand_before(const struct cand *a, const struct cand *b) {
    return cand_cmp_desc(a, b) < 0;
}

static inline void cand_swap(struct cand *a, struct cand *b) {
    struct cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorders c[0..n) so that c[0..k) are the k most probable candidates, sorted.
 * Quickselect then a sort of the prefix: O(n + k log k), which matters for
 * 256k-token vocabularies where a full sort per token would cost more than
 * the forward pass of a small model. */
static void select_top(struct cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        /* median of three as pivot, moved to hi */
        int mid = lo + (hi - lo) / 2;
        if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[hi], &c[lo])) cand_swap(&c[hi], &c[lo]);
        if (cand_before(&c[mid], &c[hi])) cand_swap(&c[mid], &c[hi]);
        struct cand pivot = c[hi];
        int store = lo;
        for (int i = lo; i < hi; i++)
            if (cand_before(&c[i], &pivot))
                cand_swap(&c[i], &c[store++]);
        cand_swap(&c[store], &c[hi]);
        if (store == k - 1 || store == k)
            break;
        if (store < k)
            lo = store + 1;
        else
            hi = store - 1;
    }
    qsort(c, (size_t)k, sizeof *c, cand_cmp_desc);
}

/* The token of kvf_sampler_sample, or -1 (message set) on bad arguments and
 * -2 when out of memory. */
static int32_t sample(struct kvf_sampler *s, const float *logits, int n_vocab) {
    if (!s || !logits || n_vocab <= 0) {
        err_set(KVF_ERR_INVALID_ARG, "kvf_sampler_sample: bad arguments (n_vocab %d)", n_vocab);
        return -1;
    }
    const struct kvf_sampler_params *p = &s->params;
    if (!(logits = penalise(s, logits, n_vocab))) {
        err_set(KVF_ERR_NOMEM, "sampler: out of memory for %d logits", n_vocab);
        return -2;
    }
    int32_t best = argmax(logits, n_vocab);
    /* Greedy cases, and a +inf logit (which would take all the mass). */
    if (p->temp <= 0 || p->top_k == 1 || n_vocab == 1 || isinf(logits[best]) || isnan(logits[best]))
        return best;

    if (s->cap < n_vocab) {
        struct cand *c = realloc(s->cands, (size_t)n_vocab * sizeof *c);
        if (!c) {
            err_set(KVF_ERR_NOMEM, "sampler: out of memory for %d candidates", n_vocab);
            return -2;
        }
        s->cands = c;
        s->cap = n_vocab;
    }
    struct cand *c = s->cands;
    const float max = logits[best] / p->temp;
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (!(logits[i] > -INFINITY)) /* -inf and NaN have no mass */
            continue;
        c[n++] = (struct cand){ .id = i, .p = exp((double)(logits[i] / p->temp) - max) };
    }
    /* n >= 1: logits[best] is finite here. */
    bool sorted = false;
    if (p->top_k > 0 && p->top_k < n) {
        select_top(c, n, p->top_k);
        n = p->top_k;
        sorted = true;
    }
    if (p->top_p < 1) {
        double total = 0;
        for (int i = 0; i < n; i++)
            total += c[i].p;
        const double target = (double)p->top_p * total;
        /* Sort only as much of the tail as the nucleus needs: most of a
         * peaked distribution's mass sits in its first few hundred tokens. */
        int k = 0, m = 0;
        double cum = 0;
        for (;;) {
            int want = sorted ? n : KVF_MIN(n, k == 0 ? 256 : k * 4);
            if (!sorted && want > k)
                select_top(c + k, n - k, want - k);
            for (; m < want; m++) {
                cum += c[m].p;
                if (cum >= target) {
                    m++;
                    goto nucleus_done;
                }
            }
            k = want;
            if (k == n)
                break; /* rounding: everything is in the nucleus */
        }
    nucleus_done:
        n = KVF_MAX(m, 1);
    }
    if (p->min_p > 0) {
        double pmax = 0;
        for (int i = 0; i < n; i++)
            pmax = KVF_MAX(pmax, c[i].p);
        const double cut = (double)p->min_p * pmax;
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].p >= cut)
                c[m++] = c[i];
        n = m; /* the maximum always survives */
    }
    double total = 0;
    for (int i = 0; i < n; i++)
        total += c[i].p;
    double u = rng_uniform(s->rng) * total;
    for (int i = 0; i < n; i++) {
        u -= c[i].p;
        if (u < 0)
            return c[i].id;
    }
    return c[n - 1].id; /* u landed on the rounding slack of the last bucket */
}

enum kvf_status kvf_sampler_sample(struct kvf_sampler *s, const float *logits, int n_vocab, int32_t *token) {
    if (!token) return err_set(KVF_ERR_INVALID_ARG, "kvf_sampler_sample: no token pointer");
    const int32_t t = sample(s, logits, n_vocab);
    if (t < 0) return t == -1 ? KVF_ERR_INVALID_ARG : KVF_ERR_NOMEM;
    *token = t;
    return KVF_OK;
}
