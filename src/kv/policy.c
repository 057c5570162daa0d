/* Policy registry, spec parsing and top-k selection. */
#include "kv/policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct preset {
    const char *name, *summary, *paper;
    const char *keys;   /* accepted keys, space-separated */
    const char *shown;  /* the defaults below, as `kvfold policies` prints them */
    struct kv_policy defaults;
};

static const struct preset presets[KV_METHOD_COUNT] = {
    [KV_FULL] = {"full", "keep every entry (the reference)", "-", "", "", {.method = KV_FULL, .budget = 1.0}},
    [KV_STREAMING] = {"streaming", "attention sinks + the most recent entries", "StreamingLLM (Xiao et al., 2023)",
                      "budget sinks", "budget=0.2,sinks=4", {.method = KV_STREAMING, .budget = 0.2, .sinks = 4}},
    [KV_H2O] = {"h2o", "heavy hitters (attention summed over every prompt query) + the most recent entries",
                "H2O (Zhang et al., 2023); prompt scores only so far", "budget recent", "budget=0.2,recent=0.5",
                {.method = KV_H2O, .budget = 0.2, .recent = 0.5}},
    [KV_SNAPKV] = {"snapkv", "attention of the last `window` prompt queries, average-pooled; window kept",
                   "SnapKV (Li et al., 2024)", "budget window kernel", "budget=0.2,window=32,kernel=5",
                   {.method = KV_SNAPKV, .budget = 0.2, .window = 32, .kernel = 5}},
    [KV_PYRAMIDKV] = {"pyramidkv", "SnapKV scores with more entries in lower layers (a linear pyramid)",
                      "PyramidKV (Cai et al., 2024)", "budget window kernel beta",
                      "budget=0.2,window=32,kernel=5,beta=20",
                      {.method = KV_PYRAMIDKV, .budget = 0.2, .window = 32, .kernel = 5, .beta = 20}},
    [KV_KEYDIFF] = {"keydiff", "keys least similar (cosine) to the mean normalised key", "KeyDiff (Park et al., 2025)",
                    "budget", "budget=0.2", {.method = KV_KEYDIFF, .budget = 0.2}},
    [KV_KNORM] = {"knorm", "keys of smallest L2 norm", "kvpress knorm (Devoto et al., 2024)", "budget", "budget=0.2",
                  {.method = KV_KNORM, .budget = 0.2}},
    [KV_RANDOM] = {"random", "a uniform random subset (seeded)", "baseline", "budget seed", "budget=0.2,seed=1",
                   {.method = KV_RANDOM, .budget = 0.2, .seed = 1}},
    [KV_IMGRAND] = {"imgrand", "every non-image entry; image entries dropped at random (seeded)", "baseline",
                    "budget seed", "budget=0.2,seed=1", {.method = KV_IMGRAND, .budget = 0.2, .seed = 1}},
};

int kvf_kv_policy_count(void) { return KV_METHOD_COUNT; }

enum kvf_status kvf_kv_policy_get(int i, struct kvf_kv_policy_info *info) {
    if (i < 0 || i >= KV_METHOD_COUNT || !info) return err_set(KVF_ERR_INVALID_ARG, "no policy %d", i);
    const struct preset *p = &presets[i];
    *info = (struct kvf_kv_policy_info){p->name, p->summary, p->paper, p->keys, p->shown};
    return KVF_OK;
}

#define POLICY_NAMES "full, streaming, h2o, snapkv, pyramidkv, keydiff, knorm, random, imgrand"

static bool parse_num(const char *v, double lo, double hi, double *out) {
    char *end;
    const double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi) return false;
    *out = x;
    return true;
}

static enum kvf_status set_key(const struct preset *pr, struct kv_policy *p, const char *key, const char *val) {
    char k[40];
    snprintf(k, sizeof k, " %s ", key);
    char keys[128];
    snprintf(keys, sizeof keys, " %s ", pr->keys);
    if (!key[0] || !strstr(keys, k))
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': unknown key '%s' (valid: %s)", pr->name, key,
                       pr->keys[0] ? pr->keys : "none");
    double x;
    if (!strcmp(key, "budget")) {
        /* A ratio in (0, 1], or a whole number of entries. */
        if (!parse_num(val, 1e-6, 1e9, &x) || (x > 1.0 && x != floor(x)))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': budget '%s' is neither a ratio in (0, 1] nor a "
                           "whole number of entries", pr->name, val);
        p->budget = x;
    } else if (!strcmp(key, "recent")) {
        if (!parse_num(val, 0.0, 1.0, &x))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': recent '%s' is not a share in [0, 1]", pr->name, val);
        p->recent = x;
    } else if (!strcmp(key, "seed")) {
        if (!parse_num(val, 0, 9007199254740992.0, &x) || x != floor(x))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': seed '%s' is not a non-negative integer", pr->name, val);
        p->seed = (uint64_t)x;
    } else {
        const bool kernel = !strcmp(key, "kernel"), beta = !strcmp(key, "beta");
        if (!parse_num(val, kernel || beta ? 1 : 0, 1 << 20, &x) || x != floor(x) || (kernel && fmod(x, 2.0) != 1.0))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s '%s' must be %s", pr->name, key, val,
                           kernel ? "an odd integer >= 1" : beta ? "an integer >= 1" : "a non-negative integer");
        if (!strcmp(key, "sinks")) p->sinks = (int)x;
        else if (!strcmp(key, "window")) p->window = (int)x;
        else if (beta) p->beta = (int)x;
        else p->kernel = (int)x;
    }
    return KVF_OK;
}

enum kvf_status kv_policy_parse(const char *spec, struct kv_policy *out) {
    if (!spec || !spec[0]) {
        *out = presets[KV_FULL].defaults;
        return KVF_OK;
    }
    if (strchr(spec, '+'))
        return err_set(KVF_ERR_UNSUPPORTED, "kv policy '%s': composing stages with '+' is not supported yet", spec);
    char buf[256];
    if (strlen(spec) >= sizeof buf) return err_set(KVF_ERR_INVALID_ARG, "kv policy spec too long");
    snprintf(buf, sizeof buf, "%s", spec);
    char *args = strchr(buf, ':');
    if (args) *args++ = '\0';
    const struct preset *pr = NULL;
    for (int i = 0; i < KV_METHOD_COUNT; i++)
        if (!strcmp(buf, presets[i].name)) pr = &presets[i];
    if (!pr) return err_set(KVF_ERR_INVALID_ARG, "unknown kv policy '%s' (valid: " POLICY_NAMES ")", buf);
    struct kv_policy p = pr->defaults;
    for (char *kv = args, *next; kv && *kv; kv = next) {
        next = strchr(kv, ',');
        if (next) *next++ = '\0';
        char *eq = strchr(kv, '=');
        if (!eq) return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': '%s' is not key=value", pr->name, kv);
        *eq = '\0';
        enum kvf_status st = set_key(pr, &p, kv, eq + 1);
        if (st != KVF_OK) return st;
    }
    *out = p;
    return KVF_OK;
}

enum kvf_status kvf_kv_policy_check(const char *spec) {
    struct kv_policy p;
    return kv_policy_parse(spec, &p);
}

int kv_policy_keep_count(const struct kv_policy *p, int n) {
    if (p->method == KV_FULL) return n;
    const double k = p->budget <= 1.0 ? floor(p->budget * n + 0.5) : p->budget;
    return k >= n ? n : (int)k;
}

int kv_policy_layer_keep(const struct kv_policy *p, int n, int layer, int n_layer) {
    const int keep = kv_policy_keep_count(p, n);
    return p->method == KV_PYRAMIDKV ? kv_pyramid_keep(p, n, keep, layer, n_layer) : keep;
}

/* Order: higher score first; ties: earlier entry first. */
static int by_score(const void *a, const void *b, void *arg) {
    const float *score = arg;
    const int i = *(const int *)a, j = *(const int *)b;
    if (score[i] != score[j]) return score[i] > score[j] ? -1 : 1;
    return i - j;
}
static int by_index(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

enum kvf_status kv_select_keep(struct kv_cache *c, int layer, int head, const float *score, int keep, int *scratch) {
    const int n = kv_cache_head(c, layer, head)->n;
    int always = 0;
    for (int j = 0; j < n; j++) always += score[j] == INFINITY;
    keep = always > keep ? always : keep;
    if (keep >= n) return KVF_OK;
    for (int j = 0; j < n; j++) scratch[j] = j;
    qsort_r(scratch, (size_t)n, sizeof *scratch, by_score, (void *)score);
    qsort(scratch, (size_t)keep, sizeof *scratch, by_index);
    return kv_cache_keep(c, layer, head, scratch, keep);
}
