/* PrefixKV (Wang et al., 2024, section 3.3; docs/METHODS.md §5.2.3): layers differ in how
 * concentrated their attention is, so each layer keeps the shortest prefix
 * of its priority sequence (entries by importance, descending) whose
 * cumulative normalised importance reaches one threshold p shared by all
 * layers; p is found by binary search so that the layer sizes add up to the
 * budget (Algorithm 1), then the sizes are scaled to the budget exactly. */
#include "core/sys.h"
#include "io/json.h"
#include "kv/policy.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_MAX_ITERS 64

void kv_score_layer(const struct kv_cache *c, int layer, int sinks, int protect, float *score) {
    const struct kv_head *h = &c->heads[(size_t)layer * c->n_head_kv];
    const int n = h[0].n;
    for (int j = 0; j < n; j++) {
        double s = 0.0;
        for (int g = 0; g < c->n_head_kv; g++) s += h[g].acc[(size_t)j * KV_ACC_N + KV_ACC_SUM];
        score[j] = j < sinks || j >= n - protect ? INFINITY : (float)(s / c->n_head_kv);
    }
}

static int by_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Smallest k in [1, n] with cum[k-1] >= p (cum: non-decreasing, cum[n-1] = 1). */
static int prefix_len(const double *cum, int n, double p) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (cum[mid] >= p) hi = mid; else lo = mid + 1;
    }
    return lo + 1;
}

enum kvf_status kv_prefix_budgets(const float *imp, int n_layer, int n, const int *lens, const int *floors, long total,
                                  double tol, int *keep, double *gini, double *p_out) {
#define LEN(l) (lens ? lens[l] : n)
#define FLOOR(l) (floors ? floors[l] : 1)
    long most = 0, least = 0;
    for (int l = 0; l < n_layer; l++) {
        if (LEN(l) < 1 || LEN(l) > n)
            return err_set(KVF_ERR_INVALID_ARG, "prefixkv: layer %d has %d entries (of at most %d)", l, LEN(l), n);
        if (FLOOR(l) < 1 || FLOOR(l) > LEN(l))
            return err_set(KVF_ERR_INVALID_ARG, "prefixkv: layer %d's floor of %d is not in [1, %d]", l, FLOOR(l),
                           LEN(l));
        most += LEN(l), least += FLOOR(l);
    }
    if (n_layer <= 0 || total < n_layer || total > most)
        return err_set(KVF_ERR_INVALID_ARG, "prefixkv: %ld entries cannot be spread over %d layers of %ld in all",
                       total, n_layer, most);
    if (least > total)
        return err_set(KVF_ERR_INVALID_ARG, "prefixkv: the layers' floors (%ld entries) exceed %ld", least, total);
    /* cum[l][k]: the share of layer l's importance in its k+1 most important entries. */
    double *cum = malloc(sizeof(double) * (size_t)n_layer * n);
    if (!cum) return err_set(KVF_ERR_NOMEM, "prefixkv: out of memory for %d x %d priorities", n_layer, n);
    for (int l = 0; l < n_layer; l++) {
        const int m = LEN(l);
        double *c = cum + (size_t)l * n, sum = 0.0;
        for (int j = 0; j < m; j++) sum += c[j] = imp[(size_t)l * n + j] > 0 ? imp[(size_t)l * n + j] : 0.0;
        qsort(c, (size_t)m, sizeof *c, by_desc);
        double run = 0.0;
        for (int j = 0; j < m; j++) c[j] = sum > 0 ? (run += c[j]) / sum : (double)(j + 1) / m; /* no signal: uniform */
        c[m - 1] = 1.0;
        if (gini) { /* twice the area between the priority curve and the diagonal */
            double area = 0.0, prev = 0.0;
            for (int j = 0; j < m; j++) area += (prev + c[j]) / 2.0, prev = c[j];
            gini[l] = 2.0 * area / m - 1.0;
        }
    }
    double lo = 0.0, hi = 1.0, p = 0.5;
    long sum = 0;
    for (int it = 0; it < PREFIX_MAX_ITERS; it++) {
        p = (lo + hi) / 2.0;
        sum = 0;
        for (int l = 0; l < n_layer; l++) sum += keep[l] = prefix_len(cum + (size_t)l * n, LEN(l), p);
        const double delta = (double)(sum - total);
        if (fabs(delta) < tol) break;
        if (delta < 0) lo = p; else hi = p;
    }
    free(cum);
    if (p_out) *p_out = p;
    /* Scale to the budget exactly: largest remainders first, each layer in [its floor, its length]. */
    double *rem = malloc(sizeof(double) * (size_t)n_layer);
    if (!rem) return err_set(KVF_ERR_NOMEM, "prefixkv: out of memory");
    long got = 0;
    for (int l = 0; l < n_layer; l++) {
        const double x = (double)keep[l] * (double)total / (double)sum;
        keep[l] = KVF_MIN(LEN(l), KVF_MAX(FLOOR(l), (int)floor(x)));
        rem[l] = x - keep[l];
        got += keep[l];
    }
    while (got != total) {
        int best = -1;
        for (int l = 0; l < n_layer; l++) {
            const bool room = got < total ? keep[l] < LEN(l) : keep[l] > FLOOR(l);
            if (room && (best < 0 || (got < total ? rem[l] > rem[best] : rem[l] < rem[best]))) best = l;
        }
        keep[best] += got < total ? 1 : -1;
        rem[best] += got < total ? -1.0 : 1.0;
        got += got < total ? 1 : -1;
    }
    free(rem);
    return KVF_OK;
#undef LEN
#undef FLOOR
}

enum kvf_status kv_prefix_search(const struct kv_cache *kv, const struct kv_policy *p, const int *seen,
                                 const int *sinks, double *ratio, double *gini) {
    const int L = kv->n_layer, H = kv->n_head_kv;
    int n = 1;
    for (int l = 0; l < L; l++) n = KVF_MAX(n, kv->heads[(size_t)l * H].n);
    float *imp = malloc(sizeof(float) * (size_t)L * n);
    int *keep = malloc(sizeof(int) * (size_t)L * 3), *lens = keep + L, *floors = keep + 2 * L;
    enum kvf_status st = imp && keep ? KVF_OK : err_set(KVF_ERR_NOMEM, "prefixkv: out of memory");
    long total = 0;
    int empty = 0;
    for (int l = 0; st == KVF_OK && l < L; l++) {
        const int held = kv->heads[(size_t)l * H].n;
        for (int g = 1; g < H; g++)
            if (kv->heads[(size_t)l * H + g].n != held)
                st = err_set(KVF_ERR_UNSUPPORTED,
                             "prefixkv: heads hold different entry counts; search before any eviction");
        /* A windowed layer's last entries are what it still sees. */
        lens[l] = KVF_MIN(held, seen[l]);
        empty += lens[l] == 0;
        if (st != KVF_OK || lens[l] == 0) continue;
        float *row = imp + (size_t)l * n;
        kv_score_layer(kv, l, 0, 0, row);
        memmove(row, row + (held - lens[l]), sizeof *row * (size_t)lens[l]);
        const int even = kv_policy_keep_count(p, lens[l]);
        total += even;
        /* No layer is searched below what its rule always keeps (its sinks and the protected tail of
         * the layer score): it would hold them anyway, past the total, and keep nothing else. */
        floors[l] = kv_policy_per_layer(p) ? KVF_MAX(1, KVF_MIN(even, sinks[l] + p->protect)) : 1;
    }
    /* A budget that rounds to fewer entries than the layers' floors (a prompt
     * of a few tokens) keeps the floors, the least the search can spread,
     * and kv.ratio says so. */
    long least = 0;
    for (int l = 0; st == KVF_OK && !empty && l < L; l++) least += floors[l];
    total = KVF_MAX(total, least);
    double thr;
    if (st == KVF_OK && !empty) st = kv_prefix_budgets(imp, L, n, lens, floors, total, 5.0, keep, gini, &thr);
    /* A share of what the layer sees (a reduce stage leaves later layers fewer entries than positions). */
    for (int l = 0; st == KVF_OK && l < L; l++) ratio[l] = empty ? 1.0 : (double)keep[l] / seen[l];
    free(imp);
    free(keep);
    return st;
}

enum kvf_status kv_prefix_load_profile(const char *path, int n_layer, struct kv_policy *p, double *ratio) {
    char *buf;
    size_t len;
    enum kvf_status st = sys_read_file(path, (size_t)16 << 20, "a PrefixKV profile", &buf, &len);
    if (st != KVF_OK) return st;
    cJSON *o = NULL;
    st = json_parse_text(path, buf, len, &o);
    free(buf);
    if (st != KVF_OK) return st;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "ratios");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(o, "n_layer"),
                *b = cJSON_GetObjectItemCaseSensitive(o, "budget");
    if (!cJSON_IsArray(r) || !cJSON_IsNumber(nl) || !cJSON_IsNumber(b))
        st = err_set(KVF_ERR_FORMAT, "prefixkv profile '%s': not a profile (JSON with n_layer, budget, ratios)", path);
    else if (nl->valuedouble != n_layer || cJSON_GetArraySize(r) != n_layer)
        st = err_set(KVF_ERR_SHAPE, "prefixkv profile '%s' is for %g layers, the model has %d", path, nl->valuedouble,
                     n_layer);
    else if (kv_policy_given(p, KV_KEY_BUDGET) && fabs(b->valuedouble - p->budget) > 1e-9)
        st = err_set(KVF_ERR_INVALID_ARG, "prefixkv profile '%s' was made for budget %g, the spec asks %g", path,
                     b->valuedouble, p->budget);
    for (int l = 0; st == KVF_OK && l < n_layer; l++) {
        const cJSON *x = cJSON_GetArrayItem(r, l);
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0 && x->valuedouble <= 1))
            st = err_set(KVF_ERR_FORMAT, "prefixkv profile '%s': ratio %d is not in (0, 1]", path, l);
        else
            ratio[l] = x->valuedouble;
    }
    if (st == KVF_OK) p->budget = b->valuedouble;
    cJSON_Delete(o);
    return st;
}

void kv_score_from_layer(const struct kv_score_in *in, float *score) {
    memcpy(score, in->layer_score, sizeof(float) * (size_t)in->h->n);
}

const struct kv_rule kv_rule_prefixkv = {
    .stage = "preset",
    .name = "prefixkv",
    .summary = "per-layer budgets from the layers' cumulative priority curves (binary search), one kept set per "
               "layer, the first `sinks` and the last `protect` entries kept (protect=1: the authors' code); "
               "profile=FILE (kvfold profile) or online=1. Summed attention, as h2o: weak at keeping a detail of a "
               "long prompt for a later question",
    .paper = "PrefixKV: Adaptive Prefix KV Cache is What Vision Instruction-Following Models Need for Efficient "
             "Generation (Wang et al., NeurIPS 2025, arXiv:2412.03409)",
    .keys = "budget profile online sinks protect distance",
    .shown = "budget=0.2,online=1,sinks=4,protect=32 +budget=prefix +decode=fixed-distance:distance=25",
    .defaults = {.method = KV_PREFIXKV, .budget = 0.2, .online = true, .alloc = KV_ALLOC_PREFIX, KV_STAGE_DEFAULTS,
                 .protect = 32, .decode = KV_DECODE_FIXED},
    .needs = KV_NEEDS_ACC | KV_NEEDS_LAYER,
    .score = kv_score_from_layer,
};

/* The layer shares need attention curves, and either a search or a profile. */
static const char *prefix_check(const struct kv_policy *p) {
    if (p->online == (p->profile[0] != '\0')) return "PrefixKV's layer budgets need either profile=FILE or online=1";
    if (!kv_policy_needs_acc(p))
        return "budget=prefix searches attention curves; use it with prefixkv, elastic, h2o or lookm";
    return NULL;
}

/* The shares come from the search (online) or the profile, read with the
 * session (kv_prefix_load_profile). */
static const struct kv_budget_ops prefix_ops = {.rank = KV_RANK_HEAD, .shares = kv_prefix_search};

const struct kv_rule kv_rule_budget_prefix = {
    .stage = "budget",
    .name = "prefix",
    .summary = "per-layer ratios where every layer keeps the same share of its attention (binary search), online or "
               "from profile=FILE",
    .paper = "PrefixKV: Adaptive Prefix KV Cache is What Vision Instruction-Following Models Need for Efficient "
             "Generation (Wang et al., NeurIPS 2025, arXiv:2412.03409)",
    .keys = "profile online",
    .shown = "online=1",
    .defaults = {.alloc = KV_ALLOC_PREFIX, .online = true},
    .budget = &prefix_ops,
    .check = prefix_check,
};
