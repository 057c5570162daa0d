/* Policy registry, spec parsing and top-k selection. */
#include "kv/policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A preset, or one option of a stage ("decode=h2o"): what `kvfold
 * policies` lists and what a spec item may name. */
struct option {
    const char *stage;  /* "preset", "budget" or "decode" */
    const char *name, *summary, *paper;
    const char *keys;   /* accepted keys, space-separated */
    const char *shown;  /* the defaults below, as `kvfold policies` prints them */
    struct kv_policy defaults; /* presets: the whole policy; stages: the values of `keys` */
};

/* Stage defaults every preset starts from. */
/* (alloc and decode default to uniform and grow: the zero values) */
#define STAGES .sinks = 4, .beta = 20, .distance = 25, .every = 32

static const struct option presets[KV_METHOD_COUNT] = {
    [KV_FULL] = {"preset", "full", "keep every entry (the reference)", "-", "", "", {.method = KV_FULL, .budget = 1.0, STAGES}},
    [KV_STREAMING] = {"preset", "streaming", "attention sinks + the most recent entries, also while decoding",
                      "StreamingLLM (Xiao et al., 2023)", "budget sinks", "budget=0.2,sinks=4 +decode=window",
                      {.method = KV_STREAMING, .budget = 0.2, STAGES, .decode = KV_DECODE_WINDOW}},
    [KV_H2O] = {"preset", "h2o", "heavy hitters (attention summed over every query so far) + the most recent "
                "entries; one eviction per decode step", "H2O (Zhang et al., 2023)", "budget recent",
                "budget=0.2,recent=0.5 +decode=h2o",
                {.method = KV_H2O, .budget = 0.2, .recent = 0.5, STAGES, .decode = KV_DECODE_H2O}},
    [KV_SNAPKV] = {"preset", "snapkv", "attention of the last `window` prompt queries, average-pooled; window kept",
                   "SnapKV (Li et al., 2024)", "budget window kernel", "budget=0.2,window=32,kernel=5",
                   {.method = KV_SNAPKV, .budget = 0.2, .window = 32, .kernel = 5, STAGES}},
    [KV_PYRAMIDKV] = {"preset", "pyramidkv", "SnapKV scores with more entries in lower layers (a linear pyramid)",
                      "PyramidKV (Cai et al., 2024)", "budget window kernel beta",
                      "budget=0.2,window=32,kernel=5 +budget=pyramid:beta=20",
                      {.method = KV_PYRAMIDKV, .budget = 0.2, .window = 32, .kernel = 5, STAGES,
                       .alloc = KV_ALLOC_PYRAMID}},
    [KV_ROCO] = {"preset", "roco", "smallest mean attention received, among entries whose attention varies least",
                 "RoCo (Ren & Zhu, 2024)", "budget recent sinks", "budget=0.2,recent=0.3,sinks=4",
                 {.method = KV_ROCO, .budget = 0.2, .recent = 0.3, STAGES}},
    [KV_KEYDIFF] = {"preset", "keydiff", "keys least similar (cosine) to the mean normalised key",
                    "KeyDiff (Park et al., 2025)", "budget", "budget=0.2", {.method = KV_KEYDIFF, .budget = 0.2, STAGES}},
    [KV_KNORM] = {"preset", "knorm", "keys of smallest L2 norm", "kvpress knorm (Devoto et al., 2024)", "budget",
                  "budget=0.2", {.method = KV_KNORM, .budget = 0.2, STAGES}},
    [KV_RANDOM] = {"preset", "random", "a uniform random subset (seeded)", "baseline", "budget seed",
                   "budget=0.2,seed=1", {.method = KV_RANDOM, .budget = 0.2, .seed = 1, STAGES}},
    [KV_IMGRAND] = {"preset", "imgrand", "every non-image entry; image entries dropped at random (seeded)",
                    "baseline", "budget seed", "budget=0.2,seed=1", {.method = KV_IMGRAND, .budget = 0.2, .seed = 1, STAGES}},
    [KV_LOOKM] = {"preset", "lookm", "text kept, recent kept, image entries by attention received; evicted entries "
                  "merged into the most similar kept key (merge=none|avg|pivotal|weighted)",
                  "LOOK-M (Wan et al., 2024; paper 000)", "budget recent important merge text_prior",
                  "budget=0.2,recent=0.5,merge=pivotal,text_prior=1",
                  {.method = KV_LOOKM, .budget = 0.2, .recent = 0.5, .merge = KV_MERGE_PIVOTAL, .text_prior = true, STAGES}},
    [KV_ELASTIC] = {"preset", "elastic", "attention received (mean over heads), one kept set per layer, the first "
                    "`sinks` entries and the last one kept; evicted entries merged into the kept entry nearest in "
                    "position", "Elastic Cache (Liu et al., 2024)", "budget sinks distance",
                    "budget=0.2,sinks=4 +decode=fixed-distance:distance=25",
                    {.method = KV_ELASTIC, .budget = 0.2, .merge = KV_MERGE_POSITION, STAGES, .decode = KV_DECODE_FIXED}},
    [KV_PREFIXKV] = {"preset", "prefixkv", "per-layer budgets from the layers' cumulative priority curves (binary "
                     "search), one kept set per layer, the first `sinks` entries and the last one kept; profile=FILE (kvfold "
                     "profile) or online=1",
                     "PrefixKV (Wang et al., 2024; paper 001)", "budget profile online sinks distance",
                     "budget=0.2,online=1,sinks=4 +budget=prefix +decode=fixed-distance:distance=25",
                     {.method = KV_PREFIXKV, .budget = 0.2, .online = true, .alloc = KV_ALLOC_PREFIX, STAGES,
                      .decode = KV_DECODE_FIXED}},
    [KV_CSP] = {"preset", "csp", "top entries by same-modality and by cross-modality n-softmax attention of the "
                "observation window (window=0: as many queries as recent entries), their union, the recent window",
                "Cross-Self Pruning (Pei et al., 2024; paper 004)", "budget recent important cross_ratio n window decode_softmax",
                "budget=0.2,recent=0.5,cross_ratio=0.5,n=1,window=0,decode_softmax=0",
                {.method = KV_CSP, .budget = 0.2, .recent = 0.5, .cross_ratio = 0.5, .nsm_n = 1.0, STAGES}},
    [KV_BLOCKWISE] = {"preset", "blockwise", "the prompt in blocks (block=N tokens, or block=image: one per image or "
                      "frame), evicted back to budget M entries after each, so the cache never exceeds M + block; "
                      "evict=snapkv (window of the last tokens seen, or with question=1 of the question run alone "
                      "first) or keydiff",
                      "Block-wise prefill under a fixed budget (paper 002)", "budget block evict first window kernel question",
                      "budget=1024,block=256,evict=snapkv,first=0,window=32,kernel=5,question=0",
                      {.method = KV_BLOCKWISE, .budget = 1024, .blocks = true, .block = 256, .evict = KV_SNAPKV,
                       .window = 32, .kernel = 5, STAGES}},
    [KV_LIGHTKV] = {"preset", "lightkv", "after layers 12, 18 and 24 each image's tokens merge in 4x4, 2x2, then 1x1 "
                    "windows of its grid (bipartite matching on hidden-state cosine, weighted by the attention text "
                    "pays them), so later layers see and cache fewer; the default layers are for 32 layers and are "
                    "scaled to the model's depth (round(l * layers / 32))",
                    "LightKV (paper 003)", "layers windows ratio", "layers=12,18,24,windows=4,2,1,ratio=0.5",
                    {.method = KV_LIGHTKV, .budget = 1.0, .reduce = KV_REDUCE_LIGHTKV, .reduce_ratio = 0.5, STAGES}},
    [KV_FASTV] = {"preset", "fastv", "after layer k - 1 the share r of image tokens the last prompt token attended "
                  "to least is dropped; layers k on neither compute nor cache them",
                  "FastV (Chen et al., 2024)", "k r", "k=2,r=0.5",
                  {.method = KV_FASTV, .budget = 1.0, .reduce = KV_REDUCE_FASTV, .n_stages = 1, .stage_layer = {2},
                   .reduce_ratio = 0.5, STAGES}},
    [KV_TOME] = {"preset", "tome", "after layers 12, 18 and 24 (scaled to the model's depth as lightkv's) up to "
                 "`ratio` of each image's tokens merge: bipartite matching on keys averaged over heads, "
                 "size-weighted means",
                 "ToMe (Bolya et al., 2023), as paper 003's ToMe (P)", "layers ratio", "layers=12,18,24,ratio=0.5",
                 {.method = KV_TOME, .budget = 1.0, .reduce = KV_REDUCE_TOME, .reduce_ratio = 0.5, STAGES}},
};

static const struct option allocs[KV_ALLOC_COUNT] = {
    [KV_ALLOC_UNIFORM] = {"budget", "uniform", "every layer keeps the same share", "-", "", "", {.alloc = KV_ALLOC_UNIFORM}},
    [KV_ALLOC_PYRAMID] = {"budget", "pyramid", "a linear pyramid: lower layers keep more", "PyramidKV (Cai et al., 2024)",
                          "beta", "beta=20", {.alloc = KV_ALLOC_PYRAMID, .beta = 20}},
    [KV_ALLOC_PREFIX] = {"budget", "prefix", "per-layer ratios where every layer keeps the same share of its attention "
                         "(binary search), online or from profile=FILE", "PrefixKV (Wang et al., 2024; paper 001)",
                         "profile online", "online=1", {.alloc = KV_ALLOC_PREFIX, .online = true}},
};

static const struct option decodes[KV_DECODE_COUNT] = {
    [KV_DECODE_GROW] = {"decode", "grow", "decoded tokens are all kept (the cache grows)", "-", "", "",
                        {.decode = KV_DECODE_GROW}},
    [KV_DECODE_WINDOW] = {"decode", "window", "over budget: evict the oldest entry after the sinks",
                          "StreamingLLM (Xiao et al., 2023)", "sinks", "sinks=4", {.decode = KV_DECODE_WINDOW, .sinks = 4}},
    [KV_DECODE_H2O] = {"decode", "h2o", "over budget: evict the entry with the least attention so far, outside "
                       "the recent share", "H2O (Zhang et al., 2023)", "recent", "recent=0.5",
                       {.decode = KV_DECODE_H2O, .recent = 0.5}},
    [KV_DECODE_FIXED] = {"decode", "fixed-distance", "over budget: evict the entry `distance` before the end of "
                         "the compressed prompt", "Elastic Cache (Liu et al., 2024)", "distance", "distance=25",
                         {.decode = KV_DECODE_FIXED, .distance = 25}},
    [KV_DECODE_RECOMPRESS] = {"decode", "recompress", "every `every` steps, rerun the preset's rule down to budget",
                              "kvpress DecodingPress", "every", "every=32", {.decode = KV_DECODE_RECOMPRESS, .every = 32}},
};

static const struct option reduces[KV_REDUCE_COUNT] = {
    [KV_REDUCE_NONE] = {"reduce", "none", "every vision token goes through every layer", "-", "", "", {.reduce = KV_REDUCE_NONE}},
    [KV_REDUCE_LIGHTKV] = {"reduce", "lightkv", "as the lightkv preset", "LightKV (paper 003)", "layers windows ratio",
                           "layers=12,18,24,windows=4,2,1,ratio=0.5", {.reduce = KV_REDUCE_LIGHTKV, .reduce_ratio = 0.5}},
    [KV_REDUCE_FASTV] = {"reduce", "fastv", "as the fastv preset", "FastV (Chen et al., 2024)", "k r", "k=2,r=0.5",
                         {.reduce = KV_REDUCE_FASTV, .n_stages = 1, .stage_layer = {2}, .reduce_ratio = 0.5}},
    [KV_REDUCE_TOME] = {"reduce", "tome", "as the tome preset", "ToMe (Bolya et al., 2023)", "layers ratio",
                        "layers=12,18,24,ratio=0.5", {.reduce = KV_REDUCE_TOME, .reduce_ratio = 0.5}},
};

static const struct option schedules[KV_SCHEDULE_COUNT] = {
    [KV_SCHEDULE_BULK] = {"schedule", "bulk", "the prompt in batches, evicted once it is all in", "-", "", "", {.blocks = false}},
    [KV_SCHEDULE_BLOCKS] = {"schedule", "blocks", "as the blockwise preset: evicted back to budget M entries (snapkv or "
                            "keydiff) after every block; the preset's own rule applies once the prompt is in",
                            "Block-wise prefill under a fixed budget (paper 002)", "budget block evict first window question",
                            "budget=1024,block=256,evict=snapkv,first=0,window=32,question=0",
                            {.blocks = true, .budget = 1024, .block = 256, .evict = KV_SNAPKV, .window = 32}},
};

/* Presets first, then each stage's options. */
static const struct option *option_at(int i) {
    if (i < KV_METHOD_COUNT) return &presets[i];
    if ((i -= KV_METHOD_COUNT) < KV_REDUCE_COUNT) return &reduces[i];
    if ((i -= KV_REDUCE_COUNT) < KV_SCHEDULE_COUNT) return &schedules[i];
    if ((i -= KV_SCHEDULE_COUNT) < KV_ALLOC_COUNT) return &allocs[i];
    if ((i -= KV_ALLOC_COUNT) < KV_DECODE_COUNT) return &decodes[i];
    return NULL;
}

int kvf_kv_policy_count(void) { return KV_METHOD_COUNT + KV_REDUCE_COUNT + KV_SCHEDULE_COUNT + KV_ALLOC_COUNT + KV_DECODE_COUNT; }

enum kvf_status kvf_kv_policy_get(int i, struct kvf_kv_policy_info *info) {
    const struct option *o = i >= 0 ? option_at(i) : NULL;
    if (!o || !info) return err_set(KVF_ERR_INVALID_ARG, "no policy %d", i);
    *info = (struct kvf_kv_policy_info){o->stage, o->name, o->summary, o->paper, o->keys, o->shown};
    return KVF_OK;
}

#define POLICY_NAMES "full, streaming, h2o, snapkv, pyramidkv, roco, keydiff, knorm, random, imgrand, lookm, elastic, " \
                     "prefixkv, csp, blockwise, lightkv, fastv, tome"
#define STAGE_ITEMS "reduce=none|lightkv|fastv|tome, schedule=bulk|blocks, budget=uniform|pyramid|prefix, " \
                    "decode=grow|window|h2o|fixed-distance|recompress"

static bool parse_num(const char *v, double lo, double hi, double *out) {
    char *end;
    const double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi) return false;
    *out = x;
    return true;
}

static bool has_key(const char *keys, const char *key) {
    char k[40], all[128];
    snprintf(k, sizeof k, " %s ", key);
    snprintf(all, sizeof all, " %s ", keys);
    return strstr(all, k) != NULL;
}

/* Sets key=val for option o (a preset or a stage option named `what`). */
static enum kvf_status set_key(const struct option *o, const char *what, struct kv_policy *p, const char *key,
                               const char *val) {
    if (!key[0] || !has_key(o->keys, key))
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': unknown key '%s' (valid: %s)", what, key,
                       o->keys[0] ? o->keys : "none");
    double x;
    if (!strcmp(key, "budget")) {
        /* A ratio in (0, 1], or a whole number of entries. */
        if (!parse_num(val, 1e-6, 1e9, &x) || (x > 1.0 && x != floor(x)))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': budget '%s' is neither a ratio in (0, 1] nor a "
                           "whole number of entries", what, val);
        p->budget = x, p->shares |= 4;
    } else if (!strcmp(key, "recent") || !strcmp(key, "important")) {
        if (!parse_num(val, 0.0, 1.0, &x))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s '%s' is not a share in [0, 1]", what, key, val);
        if (key[0] == 'r') p->recent = x, p->shares |= 1;
        else p->important = x, p->shares |= 2;
    } else if (!strcmp(key, "merge")) {
        static const char *const names[] = {"none", "avg", "pivotal", "weighted"};
        int m = -1;
        for (int i = 0; i < 4; i++)
            if (!strcmp(val, names[i])) m = i;
        if (m < 0) return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': merge '%s' (valid: none, avg, pivotal, weighted)", what, val);
        p->merge = (enum kv_merge)m;
    } else if (!strcmp(key, "text_prior") || !strcmp(key, "online") || !strcmp(key, "decode_softmax") ||
               !strcmp(key, "question")) {
        if (strcmp(val, "0") && strcmp(val, "1"))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s '%s' must be 0 or 1", what, key, val);
        *(key[0] == 't' ? &p->text_prior : key[0] == 'o' ? &p->online : key[0] == 'q' ? &p->question
                                                                                        : &p->decode_softmax) = val[0] == '1';
    } else if (!strcmp(key, "layers") || !strcmp(key, "windows")) {
        /* A list: 12,18,24 (layers strictly increasing). */
        const bool layers = key[0] == 'l';
        int *dst = layers ? p->stage_layer : p->stage_window, n = 0;
        for (const char *c = val; *c;) {
            char *end;
            const long v = strtol(c, &end, 10);
            if (end == c || (*end && *end != ',') || v < 1 || v > 4096 || n == KV_REDUCE_MAX ||
                (layers && n > 0 && v <= dst[n - 1]))
                return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s '%s' must be up to %d %s integers >= 1", what,
                               key, val, KV_REDUCE_MAX, layers ? "increasing" : "");
            dst[n++] = (int)v;
            c = *end ? end + 1 : end;
        }
        if (n == 0) return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s is empty", what, key);
        *(layers ? &p->n_stages : &p->n_windows) = n;
    } else if (!strcmp(key, "k")) {
        if (!parse_num(val, 1, 4096, &x) || x != floor(x))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': k '%s' must be a layer count >= 1", what, val);
        p->n_stages = 1, p->stage_layer[0] = (int)x;
    } else if (!strcmp(key, "r") || !strcmp(key, "ratio")) {
        if (!parse_num(val, 0.0, 1.0, &x))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s '%s' is not a share in [0, 1]", what, key, val);
        p->reduce_ratio = x;
    } else if (!strcmp(key, "evict")) {
        if (strcmp(val, "snapkv") && strcmp(val, "keydiff"))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': evict '%s' (valid: snapkv, keydiff)", what, val);
        p->evict = val[0] == 's' ? KV_SNAPKV : KV_KEYDIFF;
    } else if (!strcmp(key, "block") && (!strcmp(val, "image") || !strcmp(val, "frame"))) {
        p->block = 0;
    } else if (!strcmp(key, "cross_ratio")) {
        if (!parse_num(val, 0.0, 1.0, &x))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': cross_ratio '%s' is not a share in [0, 1]", what, val);
        p->cross_ratio = x;
    } else if (!strcmp(key, "n")) {
        if (!parse_num(val, 0.0, 1e6, &x))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': n '%s' is not a number in [0, 1e6]", what, val);
        p->nsm_n = x;
    } else if (!strcmp(key, "profile")) {
        if (!val[0] || strlen(val) >= sizeof p->profile)
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': profile path empty or too long", what);
        snprintf(p->profile, sizeof p->profile, "%s", val);
        p->online = false;
    } else if (!strcmp(key, "seed")) {
        if (!parse_num(val, 0, 9007199254740992.0, &x) || x != floor(x))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': seed '%s' is not a non-negative integer", what, val);
        p->seed = (uint64_t)x;
    } else {
        const bool kernel = !strcmp(key, "kernel");
        const bool positive = kernel || !strcmp(key, "beta") || !strcmp(key, "every") || !strcmp(key, "block");
        if (!parse_num(val, positive ? 1 : 0, 1 << 20, &x) || x != floor(x) || (kernel && fmod(x, 2.0) != 1.0))
            return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s '%s' must be %s", what, key, val,
                           kernel ? "an odd integer >= 1" : !strcmp(key, "block") ? "an integer >= 1, image or frame"
                           : positive ? "an integer >= 1" : "a non-negative integer");
        int *field = !strcmp(key, "sinks") ? &p->sinks : !strcmp(key, "window") ? &p->window
                     : !strcmp(key, "beta") ? &p->beta : !strcmp(key, "distance") ? &p->distance
                     : !strcmp(key, "every") ? &p->every : !strcmp(key, "block") ? &p->block
                     : !strcmp(key, "first") ? &p->first : &p->kernel;
        *field = (int)x;
    }
    return KVF_OK;
}

/* Applies "k=v,k=v" (args, modified in place) for option o. */
static enum kvf_status set_keys(const struct option *o, const char *what, struct kv_policy *p, char *args) {
    for (char *kv = args, *next; kv && *kv; kv = next) {
        /* A piece without '=' continues the previous value's list. */
        next = kv;
        do {
            next = strchr(next, ',');
            if (next) next++;
        } while (next && strcspn(next, "=") >= strcspn(next, ","));
        if (next) next[-1] = '\0';
        char *eq = strchr(kv, '=');
        if (!eq) return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': '%s' is not key=value", what, kv);
        *eq = '\0';
        enum kvf_status st = set_key(o, what, p, kv, eq + 1);
        if (st != KVF_OK) return st;
    }
    return KVF_OK;
}

/* One "+stage=option[:keys]" item; the option's defaults fill the keys the
 * preset does not have (decode=h2o's recent share under snapkv). The
 * schedule stage's budget and window are its own (block_budget,
 * block_window), not the preset's. */
static enum kvf_status parse_stage(char *item, const struct option *preset, struct kv_policy *p) {
    char *args = strchr(item, ':');
    if (args) *args++ = '\0';
    char *eq = strchr(item, '=');
    if (!eq) return err_set(KVF_ERR_INVALID_ARG, "kv policy: '%s' after '+' is not a stage (valid: " STAGE_ITEMS ")", item);
    *eq++ = '\0';
    const struct option *table = NULL;
    int n = 0;
    const char *valid = "";
    if (!strcmp(item, "budget"))
        table = allocs, n = KV_ALLOC_COUNT, valid = "uniform, pyramid, prefix; a budget size goes in the preset: snapkv:budget=0.2";
    else if (!strcmp(item, "decode")) table = decodes, n = KV_DECODE_COUNT, valid = "grow, window, h2o, fixed-distance, recompress";
    else if (!strcmp(item, "reduce")) table = reduces, n = KV_REDUCE_COUNT, valid = "none, lightkv, fastv, tome";
    else if (!strcmp(item, "schedule")) table = schedules, n = KV_SCHEDULE_COUNT, valid = "bulk, blocks";
    else return err_set(KVF_ERR_INVALID_ARG, "kv policy: unknown stage '%s' (valid: " STAGE_ITEMS ")", item);
    for (int i = 0; i < n; i++) {
        if (strcmp(eq, table[i].name)) continue;
        const struct kv_policy *d = &table[i].defaults;
        char what[64];
        snprintf(what, sizeof what, "%s=%s", item, eq);
        if (table == schedules) {
            struct kv_policy t = *d;
            const enum kvf_status st = set_keys(&table[i], what, &t, args);
            if (st != KVF_OK) return st;
            p->blocks = t.blocks, p->block = t.block, p->first = t.first, p->evict = t.evict, p->question = t.question;
            p->block_budget = t.budget > 1.0 ? (int)t.budget : 0, p->block_window = t.window;
            if (!has_key(preset->keys, "kernel")) p->kernel = 5;
            return KVF_OK;
        }
        if (table == reduces) {
            p->reduce = d->reduce, p->n_stages = d->n_stages, p->n_windows = 0, p->reduce_ratio = d->reduce_ratio;
            memcpy(p->stage_layer, d->stage_layer, sizeof p->stage_layer);
        } else if (table == allocs) {
            p->alloc = d->alloc;
        } else {
            p->decode = d->decode;
        }
        if (has_key(table[i].keys, "recent") && !has_key(preset->keys, "recent")) p->recent = d->recent;
        if (table == allocs && d->alloc == KV_ALLOC_PREFIX && !has_key(preset->keys, "online"))
            p->online = d->online, p->profile[0] = '\0';
        return set_keys(&table[i], what, p, args);
    }
    return err_set(KVF_ERR_INVALID_ARG, "kv policy: %s stage has no option '%s' (valid: %s)", item, eq, valid);
}

enum kvf_status kv_policy_parse(const char *spec, struct kv_policy *out) {
    if (!spec || !spec[0]) {
        *out = presets[KV_FULL].defaults;
        return KVF_OK;
    }
    char buf[256];
    if (strlen(spec) >= sizeof buf) return err_set(KVF_ERR_INVALID_ARG, "kv policy spec too long");
    snprintf(buf, sizeof buf, "%s", spec);
    char *rest = strchr(buf, '+');
    if (rest) *rest++ = '\0';
    char *args = strchr(buf, ':');
    if (args) *args++ = '\0';
    const struct option *pr = NULL;
    for (int i = 0; i < KV_METHOD_COUNT; i++)
        if (!strcmp(buf, presets[i].name)) pr = &presets[i];
    if (!pr) return err_set(KVF_ERR_INVALID_ARG, "unknown kv policy '%s' (valid: " POLICY_NAMES
                            "; stages follow with +: " STAGE_ITEMS ")", buf);
    struct kv_policy p = pr->defaults;
    enum kvf_status st = set_keys(pr, pr->name, &p, args);
    for (char *item = rest, *next; st == KVF_OK && item; item = next) {
        next = strchr(item, '+');
        if (next) *next++ = '\0';
        st = parse_stage(item, pr, &p);
    }
    if (st == KVF_OK && p.method == KV_FULL && p.decode != KV_DECODE_GROW)
        st = err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': full keeps every entry, so it has no decode stage", spec);
    /* Recent and important shares of the budget: one gives the other. */
    const int shares = p.shares & 3;
    if (st == KVF_OK && shares == 3 && p.recent + p.important <= 0)
        st = err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': recent and important shares are both 0", spec);
    if (st == KVF_OK && shares == 3) p.recent /= p.recent + p.important;
    else if (st == KVF_OK && shares == 2) p.recent = 1.0 - p.important;
    if (st == KVF_OK && p.alloc == KV_ALLOC_PREFIX && p.online == (p.profile[0] != '\0'))
        st = err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': PrefixKV's layer budgets need either profile=FILE or online=1", spec);
    if (p.method == KV_BLOCKWISE) p.block_budget = p.budget > 1.0 ? (int)p.budget : 0, p.block_window = p.window;
    if (st == KVF_OK && p.blocks && p.block_budget <= 0)
        st = err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': block-wise prefill needs a budget in entries (budget=1024), "
                     "not a ratio: the prompt's length is not known while it runs", spec);
    if (st == KVF_OK && p.question && (!p.blocks || p.evict != KV_SNAPKV))
        st = err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': question=1 gives block-wise SnapKV eviction its queries; "
                     "it needs evict=snapkv", spec);
    if (st == KVF_OK && p.reduce != KV_REDUCE_NONE && p.blocks)
        st = err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': a reduce stage runs on the whole prompt in one pass "
                     "(the text after an image weighs its tokens), so it does not compose with block-wise prefill", spec);
    if (st == KVF_OK && p.reduce == KV_REDUCE_LIGHTKV && (p.n_stages ? p.n_stages : 3) != (p.n_windows ? p.n_windows : 3))
        st = err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': lightkv needs one window size per layer (layers=12,18,24,"
                     "windows=4,2,1)", spec);
    if (st == KVF_OK && p.alloc == KV_ALLOC_PREFIX && !kv_policy_needs_acc(&p))
        st = err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': budget=prefix searches attention curves; use it with "
                     "prefixkv, elastic, h2o or lookm", spec);
    if (st != KVF_OK) return st;
    *out = p;
    return KVF_OK;
}

enum kvf_status kvf_kv_policy_check(const char *spec) {
    struct kv_policy p;
    return kv_policy_parse(spec, &p);
}

int kv_policy_keep_count(const struct kv_policy *p, int n) {
    if (p->method == KV_FULL) return n;
    /* A ratio applies to the tokens seen so far, so 1.0 never evicts. */
    const double k = p->budget <= 1.0 ? floor(p->budget * n + 0.5) : p->budget;
    return k >= n ? n : (int)k;
}

int kv_policy_layer_keep(const struct kv_policy *p, int n, int layer, int n_layer) {
    const int keep = kv_policy_keep_count(p, n);
    return p->alloc == KV_ALLOC_PYRAMID ? kv_pyramid_keep(p, n, keep, layer, n_layer) : keep;
}

/* Order: higher score first; ties: earlier entry first. */
static int by_score(const void *a, const void *b, void *arg) {
    const float *score = arg;
    const int i = *(const int *)a, j = *(const int *)b;
    if (score[i] != score[j]) return score[i] > score[j] ? -1 : 1;
    return i - j;
}
static int by_index(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Evicting a few entries (a decode step) is a few linear scans, not a sort. */
#define SELECT_SCAN_MAX 8

int kv_select(int n, const float *score, int keep, int *out) {
    int always = 0;
    for (int j = 0; j < n; j++) always += score[j] == INFINITY;
    keep = always > keep ? always : keep;
    if (keep >= n) {
        for (int j = 0; j < n; j++) out[j] = j;
        return n;
    }
    if (n - keep <= SELECT_SCAN_MAX) {
        /* The worst entry is the lowest score, the later one on ties. */
        int evict[SELECT_SCAN_MAX], ne = 0;
        for (; ne < n - keep; ne++) {
            int worst = -1;
            for (int j = 0; j < n; j++) {
                bool taken = false;
                for (int e = 0; e < ne; e++) taken |= evict[e] == j;
                if (!taken && (worst < 0 || score[j] <= score[worst])) worst = j;
            }
            evict[ne] = worst;
        }
        int o = 0;
        for (int j = 0; j < n; j++) {
            bool gone = false;
            for (int e = 0; e < ne; e++) gone |= evict[e] == j;
            if (!gone) out[o++] = j;
        }
        return keep;
    }
    for (int j = 0; j < n; j++) out[j] = j;
    qsort_r(out, (size_t)n, sizeof *out, by_score, (void *)score);
    qsort(out, (size_t)keep, sizeof *out, by_index);
    return keep;
}

enum kvf_status kv_select_keep(struct kv_cache *c, int layer, int head, const float *score, int keep, int *scratch) {
    const int n = kv_cache_head(c, layer, head)->n;
    const int kept = kv_select(n, score, keep, scratch);
    return kept == n ? KVF_OK : kv_cache_keep(c, layer, head, scratch, kept);
}

int kv_reduce_stages(const struct kv_policy *p, int n_layer, int *layer, int *window) {
    static const int def_layer[3] = {12, 18, 24}, def_window[3] = {4, 2, 1};
    if (p->reduce == KV_REDUCE_NONE) return 0;
    int n = 0;
    if (p->n_stages > 0) {
        for (; n < p->n_stages; n++) {
            if (p->stage_layer[n] >= n_layer) {
                err_set(KVF_ERR_INVALID_ARG, "kv policy: a reduce step after layer %d needs a later layer; the model "
                        "has %d", p->stage_layer[n], n_layer);
                return -1;
            }
            layer[n] = p->stage_layer[n];
            window[n] = p->n_windows ? p->stage_window[n] : def_window[n % 3];
        }
        return n;
    }
    for (int i = 0; i < 3 && n_layer > 1; i++) {
        const int l = KVF_MAX(1, KVF_MIN(n_layer - 1, (int)floor(def_layer[i] * (double)n_layer / 32.0 + 0.5)));
        if (n > 0 && layer[n - 1] >= l) continue;
        layer[n] = l;
        window[n++] = p->n_windows ? p->stage_window[i] : def_window[i];
    }
    return n;
}
