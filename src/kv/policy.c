/* The policy registry: the key table, spec parsing against the rules'
 * descriptors, budgets and top-k selection. A spec is a preset
 * ("snapkv:budget=0.2,window=32") — which fixes the score rule and the
 * defaults of the other stages — optionally followed by stage options
 * ("+budget=pyramid:beta=20", "+decode=h2o:recent=0.5"). Each rule and its
 * descriptor live in one file under src/kv/policy/; docs/METHODS.md states
 * them. */
#include "kv/policy.h"
#include "kv/reduce.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ registry -- */

static const struct kv_rule *const presets[KV_METHOD_COUNT] = {
#define KV_RULE(ID, name) [KV_##ID] = &kv_rule_##name,
#include "kv/rules.def"
};

const struct kv_rule kv_rule_full = {
    .stage = "preset",
    .name = "full",
    .summary = "keep every entry (the reference)",
    .paper = "-",
    .keys = "",
    .shown = "",
    .defaults = {.method = KV_FULL, .budget = 1.0, KV_STAGE_DEFAULTS},
};

/* The options that are the absence of a stage's work. */
static const struct kv_budget_ops uniform_ops = {.rank = KV_RANK_HEAD};
const struct kv_rule kv_rule_budget_uniform = {
    .stage = "budget",
    .name = "uniform",
    .summary = "every layer keeps the same share",
    .paper = "-",
    .keys = "",
    .shown = "",
    .defaults = {.alloc = KV_ALLOC_UNIFORM},
    .budget = &uniform_ops,
};
static const struct kv_rule reduce_none = {
    .stage = "reduce",
    .name = "none",
    .summary = "every vision token goes through every layer",
    .paper = "-",
    .keys = "",
    .shown = "",
    .defaults = {.reduce = KV_REDUCE_NONE},
};
static const struct kv_rule schedule_bulk = {
    .stage = "schedule",
    .name = "bulk",
    .summary = "the prompt in batches, evicted once it is all in",
    .paper = "-",
    .keys = "",
    .shown = "",
    .defaults = {.blocks = false},
};

/* Each stage's options, indexed by the stage's enum. */
static const struct kv_rule *const budget_options[KV_ALLOC_COUNT] = {
#define KV_BUDGET_RULE(ID, name) [KV_ALLOC_##ID] = &kv_rule_budget_##name,
#include "kv/rules.def"
};
static const struct kv_rule *const reduce_options[KV_REDUCE_COUNT] = {
    [KV_REDUCE_NONE] = &reduce_none,
#define KV_REDUCE_RULE(ID, name) [KV_REDUCE_##ID] = &kv_rule_reduce_##name,
#include "kv/rules.def"
};
static const struct kv_rule *const schedule_options[KV_SCHEDULE_COUNT] = {&schedule_bulk, &kv_rule_schedule_blocks};
const struct kv_rule kv_rule_pool_none = {
    .stage = "pool",
    .name = "none",
    .summary = "each rule's own scores",
    .paper = "-",
    .keys = "",
    .shown = "",
    .defaults = {.pool = KV_POOL_NONE},
};
static const struct kv_rule *const pool_options[KV_POOL_COUNT] = {
#define KV_POOL_RULE(ID, name) [KV_POOL_##ID] = &kv_rule_pool_##name,
#include "kv/rules.def"
};
static const struct kv_rule *const decode_options[KV_DECODE_COUNT] = {
#define KV_DECODE_RULE(ID, name) [KV_DECODE_##ID] = &kv_rule_decode_##name,
#include "kv/rules.def"
};

/* The stages that may follow a preset after '+', in the order `kvfold
 * policies` lists their options. */
enum stage_id { STAGE_REDUCE, STAGE_SCHEDULE, STAGE_BUDGET, STAGE_POOL, STAGE_DECODE, STAGE_COUNT };
static const struct {
    const char *name;
    const struct kv_rule *const *options;
    int n;
    const char *hint; /* added to the list of valid options */
} stages[STAGE_COUNT] = {
    [STAGE_REDUCE] = {"reduce", reduce_options, KV_REDUCE_COUNT, ""},
    [STAGE_SCHEDULE] = {"schedule", schedule_options, KV_SCHEDULE_COUNT, ""},
    [STAGE_BUDGET] = {"budget", budget_options, KV_ALLOC_COUNT,
                      "; a budget size goes in the preset: snapkv:budget=0.2"},
    [STAGE_POOL] = {"pool", pool_options, KV_POOL_COUNT, ""},
    [STAGE_DECODE] = {"decode", decode_options, KV_DECODE_COUNT, ""},
};

const struct kv_rule *kv_rule_of(enum kv_method m) {
    return (unsigned)m < KV_METHOD_COUNT ? presets[m] : presets[KV_FULL];
}

const struct kv_rule *kv_budget_rule(enum kv_alloc k) {
    return (unsigned)k < KV_ALLOC_COUNT ? budget_options[k] : &kv_rule_budget_uniform;
}

const struct kv_rule *kv_pool_rule(enum kv_pool k) {
    return (unsigned)k < KV_POOL_COUNT ? pool_options[k] : &kv_rule_pool_none;
}

const struct kv_rule *kv_decode_rule(enum kv_decode k) {
    return (unsigned)k < KV_DECODE_COUNT ? decode_options[k] : &kv_rule_decode_grow;
}

const struct kv_rule *kv_reduce_rule(enum kv_reduce k) {
    return (unsigned)k < KV_REDUCE_COUNT ? reduce_options[k] : &reduce_none;
}

/* Presets first, then each stage's options. */
static const struct kv_rule *rule_at(int i) {
    if (i < KV_METHOD_COUNT) return presets[i];
    i -= KV_METHOD_COUNT;
    for (int g = 0; g < STAGE_COUNT; i -= stages[g++].n)
        if (i < stages[g].n) return stages[g].options[i];
    return NULL;
}

int kvf_kv_policy_count(void) {
    int n = KV_METHOD_COUNT;
    for (int g = 0; g < STAGE_COUNT; g++) n += stages[g].n;
    return n;
}

/* Whether a policy scores with the prompt's last queries, the question when
 * it ends the prompt: SnapKV's window (its own, PyramidKV's, CSP's,
 * block-wise eviction's), FastV's last-token attention, LightKV's weighting
 * by the text's attention. Compressed before the question exists (a chat's
 * next message, kvpress's protocol), such a rule keeps what the end of the
 * context points at instead. */
static bool policy_question_aware(const struct kv_policy *p) {
    return kv_policy_needs_window(p) || (kv_reduce_rule(p->reduce)->needs & KV_NEEDS_QUESTION);
}

enum kvf_status kvf_kv_policy_get(int i, struct kvf_kv_policy_info *info) {
    const struct kv_rule *r = i >= 0 ? rule_at(i) : NULL;
    if (!r || !info) return err_set(KVF_ERR_INVALID_ARG, "no policy %d", i);
    /* a stage option's defaults set only its own values: the others are a
     * full cache's, so this says what the option adds */
    *info = (struct kvf_kv_policy_info){r->stage, r->name, r->summary, r->paper, r->keys, r->shown,
                                        policy_question_aware(&r->defaults)};
    return KVF_OK;
}

enum kvf_status kvf_kv_policy_question_aware(const char *spec, bool *aware) {
    if (!aware) return err_set(KVF_ERR_INVALID_ARG, "kvf_kv_policy_question_aware: NULL result");
    struct kv_policy p;
    const enum kvf_status st = kv_policy_parse(spec, &p);
    *aware = st == KVF_OK && policy_question_aware(&p);
    return st;
}

/* "a, b, c" of the names of n rules into buf. */
static const char *rule_names(const struct kv_rule *const *rules, int n, const char *sep, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? sep : "", rules[i]->name);
    return buf;
}

/* "reduce=none|lightkv|..., schedule=..." for messages. */
static const char *stage_items(char *buf, size_t cap) {
    size_t len = 0;
    for (int g = 0; g < STAGE_COUNT && len < cap; g++) {
        char names[160];
        len += (size_t)snprintf(buf + len, cap - len, "%s%s=%s", g ? ", " : "", stages[g].name,
                                rule_names(stages[g].options, stages[g].n, "|", names, sizeof names));
    }
    return buf;
}

/* ----------------------------------------------------------- key table -- */

enum key_type {
    KEY_BUDGET,  /* a ratio in (0, 1] or a whole number of entries (double) */
    KEY_SHARE,   /* a number in [0, 1] (double)                             */
    KEY_NUM,     /* a number in [lo, hi] (double)                           */
    KEY_INT,     /* an integer in [lo, hi] (int)                            */
    KEY_ODD,     /* an odd integer in [lo, hi] (int)                        */
    KEY_BLOCK,   /* an integer in [lo, hi], or image / frame: 0 (int)       */
    KEY_SEED,    /* a non-negative integer below 2^53 (uint64_t)            */
    KEY_BOOL,    /* 0 or 1 (bool)                                           */
    KEY_MERGE,   /* none, avg, pivotal, weighted (enum kv_merge)            */
    KEY_TEXT,    /* 0, 1, all (enum kv_text_prior)                          */
    KEY_EVICTOR, /* a preset that can evict blocks: snapkv, keydiff (enum kv_method) */
    KEY_LAYERS,  /* a list of increasing integers in [lo, hi] (int[], count) */
    KEY_LIST,    /* a list of integers in [lo, hi] (int[], count)            */
    KEY_LAYER,   /* one integer in [lo, hi]: a list of one (int[], count)    */
    KEY_PATH,    /* a file path (char[])                                     */
};

struct key_def {
    const char *name;
    enum key_type type;
    size_t at;       /* offsetof the field in struct kv_policy */
    size_t count_at; /* list types: offsetof the count field  */
    double lo, hi;
};

_Static_assert(KV_KEY_COUNT <= 64, "kv_policy.given holds a bit per key");
#define AT(field) offsetof(struct kv_policy, field)
static const struct key_def keys[KV_KEY_COUNT] = {
    [KV_KEY_BUDGET] = {"budget", KEY_BUDGET, AT(budget), 0, 1e-6, 1e9},
    [KV_KEY_SINKS] = {"sinks", KEY_INT, AT(sinks), 0, 0, 1 << 20},
    [KV_KEY_RECENT] = {"recent", KEY_SHARE, AT(recent), 0, 0, 1},
    [KV_KEY_IMPORTANT] = {"important", KEY_SHARE, AT(important), 0, 0, 1},
    [KV_KEY_WINDOW] = {"window", KEY_INT, AT(window), 0, 0, 1 << 20},
    [KV_KEY_KERNEL] = {"kernel", KEY_ODD, AT(kernel), 0, 1, 1 << 20},
    [KV_KEY_SEED] = {"seed", KEY_SEED, AT(seed), 0, 0, 9007199254740992.0},
    [KV_KEY_BETA] = {"beta", KEY_INT, AT(beta), 0, 1, 1 << 20},
    [KV_KEY_DISTANCE] = {"distance", KEY_INT, AT(distance), 0, 0, 1 << 20},
    [KV_KEY_EVERY] = {"every", KEY_INT, AT(every), 0, 1, 1 << 20},
    [KV_KEY_MERGE] = {"merge", KEY_MERGE, AT(merge), 0, 0, 0},
    [KV_KEY_TEXT_PRIOR] = {"text_prior", KEY_TEXT, AT(text_prior), 0, 0, 0},
    [KV_KEY_CROSS_RATIO] = {"cross_ratio", KEY_SHARE, AT(cross_ratio), 0, 0, 1},
    [KV_KEY_N] = {"n", KEY_NUM, AT(nsm_n), 0, 0, 1e6},
    [KV_KEY_DECODE_SOFTMAX] = {"decode_softmax", KEY_BOOL, AT(decode_softmax), 0, 0, 1},
    [KV_KEY_BLOCK] = {"block", KEY_BLOCK, AT(block), 0, 1, 1 << 20},
    [KV_KEY_FIRST] = {"first", KEY_INT, AT(first), 0, 0, 1 << 20},
    [KV_KEY_EVICT] = {"evict", KEY_EVICTOR, AT(evict), 0, 0, 0},
    [KV_KEY_QUESTION] = {"question", KEY_BOOL, AT(question), 0, 0, 1},
    [KV_KEY_LAYERS] = {"layers", KEY_LAYERS, AT(stage_layer), AT(n_stages), 1, 4096},
    [KV_KEY_WINDOWS] = {"windows", KEY_LIST, AT(stage_window), AT(n_windows), 1, 4096},
    [KV_KEY_K] = {"k", KEY_LAYER, AT(stage_layer), AT(n_stages), 1, 4096},
    [KV_KEY_R] = {"r", KEY_SHARE, AT(reduce_ratio), 0, 0, 1},
    [KV_KEY_RATIO] = {"ratio", KEY_SHARE, AT(reduce_ratio), 0, 0, 1},
    [KV_KEY_ONLINE] = {"online", KEY_BOOL, AT(online), 0, 0, 1},
    [KV_KEY_PROFILE] = {"profile", KEY_PATH, AT(profile), 0, 0, 0},
    [KV_KEY_PROTECT] = {"protect", KEY_INT, AT(protect), 0, 0, 1 << 20},
    [KV_KEY_WIDTH] = {"width", KEY_ODD, AT(width), 0, 1, 1 << 20},
    [KV_KEY_FLOOR] = {"floor", KEY_SHARE, AT(head_floor), 0, 0, 1},
    [KV_KEY_FUTURE] = {"future", KEY_INT, AT(future), 0, 1, 1 << 20},
    [KV_KEY_CHUNK] = {"chunk", KEY_INT, AT(chunk), 0, 1, 1 << 20},
    [KV_KEY_TAU] = {"tau", KEY_NUM, AT(tau), 0, -1e30, 1e30},
    [KV_KEY_CEIL] = {"ceil", KEY_SHARE, AT(head_ceil), 0, 0, 1},
    [KV_KEY_LAST] = {"last", KEY_INT, AT(last), 0, 0, 1 << 20},
    [KV_KEY_SCORER] = {"scorer", KEY_PATH, AT(scorer), 0, 0, 0},
};
#undef AT

static bool parse_num(const char *v, double lo, double hi, double *out) {
    char *end;
    const double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi) return false;
    *out = x;
    return true;
}

/* Whether the space-separated list `names` holds `name` exactly. */
static bool has_name(const char *names, const char *name) {
    const size_t len = strlen(name);
    for (const char *c = names; *c;) {
        const size_t w = strcspn(c, " ");
        if (w == len && !strncmp(c, name, len)) return true;
        c += w;
        c += strspn(c, " ");
    }
    return false;
}

/* A list of integers "12,18,24" in [d->lo, d->hi] into dst[KV_REDUCE_MAX];
 * its length, or -1. */
static int parse_ints(const struct key_def *d, const char *val, int *dst) {
    int n = 0;
    for (const char *c = val; *c;) {
        char *end;
        const long v = strtol(c, &end, 10);
        if (end == c || (*end && *end != ',') || v < d->lo || v > d->hi || n == KV_REDUCE_MAX ||
            (d->type == KEY_LAYERS && n > 0 && v <= dst[n - 1]))
            return -1;
        dst[n++] = (int)v;
        c = *end ? end + 1 : end;
    }
    return n;
}

/* What a key's value must be, for messages. */
static const char *key_expects(const struct key_def *d, char *buf, size_t cap) {
    switch (d->type) {
    case KEY_BUDGET: return "a ratio in (0, 1] or a whole number of entries";
    case KEY_SHARE: return "a share in [0, 1]";
    case KEY_NUM: snprintf(buf, cap, "a number in [%g, %g]", d->lo, d->hi); return buf;
    case KEY_INT: return d->lo > 0 ? "an integer >= 1" : "a non-negative integer";
    case KEY_ODD: return "an odd integer >= 1";
    case KEY_BLOCK: return "an integer >= 1, image or frame";
    case KEY_SEED: return "a non-negative integer";
    case KEY_BOOL: return "0 or 1";
    case KEY_MERGE: return "one of none, avg, pivotal, weighted";
    case KEY_TEXT: return "0, 1 (text first, within the budget) or all (every text entry, past the budget)";
    case KEY_EVICTOR: return "one of snapkv, keydiff";
    case KEY_LAYERS: snprintf(buf, cap, "up to %d increasing integers >= 1", KV_REDUCE_MAX); return buf;
    case KEY_LIST: snprintf(buf, cap, "up to %d integers >= 1", KV_REDUCE_MAX); return buf;
    case KEY_LAYER: return "a layer count >= 1";
    case KEY_PATH: return "a file path";
    }
    return "";
}

/* Sets key=val for rule r (a preset or a stage option named `what`). */
static enum kvf_status set_key(const struct kv_rule *r, const char *what, struct kv_policy *p, const char *key,
                               const char *val) {
    int id = 0;
    while (id < KV_KEY_COUNT && strcmp(keys[id].name, key)) id++;
    if (!key[0] || id == KV_KEY_COUNT || !has_name(r->keys, key))
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': unknown key '%s' (valid: %s)", what, key,
                       r->keys[0] ? r->keys : "none");
    const struct key_def *d = &keys[id];
    char *field = (char *)p + d->at;
    double x = 0.0;
    bool ok = true;
    switch (d->type) {
    case KEY_BUDGET: ok = parse_num(val, d->lo, d->hi, &x) && (x <= 1.0 || x == floor(x)); break;
    case KEY_SHARE:
    case KEY_NUM: ok = parse_num(val, d->lo, d->hi, &x); break;
    case KEY_BLOCK:
        if (!strcmp(val, "image") || !strcmp(val, "frame")) break; /* one block per media segment: 0 */
        /* fall through */
    case KEY_INT:
    case KEY_ODD:
    case KEY_SEED:
        ok = parse_num(val, d->lo, d->hi, &x) && x == floor(x) && (d->type != KEY_ODD || fmod(x, 2.0) == 1.0);
        break;
    case KEY_BOOL: ok = !strcmp(val, "0") || !strcmp(val, "1"), x = val[0] == '1'; break;
    case KEY_MERGE: {
        static const char *const names[] = {"none", "avg", "pivotal", "weighted"};
        ok = false;
        for (int i = 0; i < 4; i++)
            if (!strcmp(val, names[i])) ok = true, x = i;
        break;
    }
    case KEY_TEXT:
        ok = !strcmp(val, "0") || !strcmp(val, "1") || !strcmp(val, "all");
        x = val[0] == 'a' ? KV_TEXT_ALL : val[0] == '1' ? KV_TEXT_FIRST : KV_TEXT_NONE;
        break;
    case KEY_EVICTOR:
        ok = !strcmp(val, "snapkv") || !strcmp(val, "keydiff");
        x = val[0] == 's' ? KV_SNAPKV : KV_KEYDIFF;
        break;
    case KEY_LAYERS:
    case KEY_LIST:
    case KEY_LAYER: {
        int v[KV_REDUCE_MAX];
        const int n = parse_ints(d, val, v);
        ok = n >= 1 && (d->type != KEY_LAYER || n == 1);
        if (ok) memcpy(field, v, sizeof(int) * (size_t)n), *(int *)((char *)p + d->count_at) = n;
        break;
    }
    case KEY_PATH:
        ok = val[0] && strlen(val) < sizeof p->profile;
        if (ok) snprintf(field, sizeof p->profile, "%s", val);
        break;
    }
    if (!ok) {
        char buf[64];
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s '%s' must be %s", what, key, val,
                       key_expects(d, buf, sizeof buf));
    }
    switch (d->type) {
    case KEY_BUDGET:
    case KEY_SHARE:
    case KEY_NUM: *(double *)field = x; break;
    case KEY_INT:
    case KEY_ODD:
    case KEY_BLOCK: *(int *)field = (int)x; break;
    case KEY_SEED: *(uint64_t *)field = (uint64_t)x; break;
    case KEY_BOOL: *(bool *)field = x != 0.0; break;
    case KEY_MERGE: *(enum kv_merge *)field = (enum kv_merge)x; break;
    case KEY_TEXT: *(int *)field = (int)x; break;
    case KEY_EVICTOR: *(enum kv_method *)field = (enum kv_method)x; break;
    default: break;
    }
    p->given |= (uint64_t)1 << id;
    return KVF_OK;
}

/* Applies "k=v,k=v" (args, modified in place) for rule r. */
static enum kvf_status set_keys(const struct kv_rule *r, const char *what, struct kv_policy *p, char *args) {
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
        enum kvf_status st = set_key(r, what, p, kv, eq + 1);
        if (st != KVF_OK) return st;
    }
    return KVF_OK;
}

/* -------------------------------------------------------------- parsing -- */

/* One "+stage=option[:keys]" item; the option's defaults fill the keys the
 * preset does not have (decode=h2o's recent share under snapkv). The
 * schedule stage's budget and window are its own (block_budget,
 * block_window), not the preset's. */
static enum kvf_status parse_stage(char *item, const struct kv_rule *preset, struct kv_policy *p) {
    char *args = strchr(item, ':');
    if (args) *args++ = '\0';
    char *eq = strchr(item, '=');
    char items[512];
    if (!eq)
        return err_set(KVF_ERR_INVALID_ARG, "kv policy: '%s' after '+' is not a stage (valid: %s)", item,
                       stage_items(items, sizeof items));
    *eq++ = '\0';
    int g = 0;
    while (g < STAGE_COUNT && strcmp(item, stages[g].name)) g++;
    if (g == STAGE_COUNT)
        return err_set(KVF_ERR_INVALID_ARG, "kv policy: unknown stage '%s' (valid: %s)", item,
                       stage_items(items, sizeof items));
    const struct kv_rule *o = NULL;
    for (int i = 0; i < stages[g].n && !o; i++)
        if (!strcmp(eq, stages[g].options[i]->name)) o = stages[g].options[i];
    if (!o) {
        char names[160];
        return err_set(KVF_ERR_INVALID_ARG, "kv policy: %s stage has no option '%s' (valid: %s%s)", item, eq,
                       rule_names(stages[g].options, stages[g].n, ", ", names, sizeof names), stages[g].hint);
    }
    char what[64];
    snprintf(what, sizeof what, "%s=%s", item, eq);
    const struct kv_policy *d = &o->defaults;
    switch ((enum stage_id)g) {
    case STAGE_SCHEDULE: {
        struct kv_policy t = *d;
        const enum kvf_status st = set_keys(o, what, &t, args);
        if (st != KVF_OK) return st;
        p->blocks = t.blocks, p->block = t.block, p->first = t.first, p->evict = t.evict, p->question = t.question;
        p->block_budget = t.budget > 1.0 ? (int)t.budget : 0, p->block_window = t.window;
        if (!has_name(preset->keys, "kernel")) p->kernel = 5;
        return KVF_OK;
    }
    case STAGE_REDUCE:
        p->reduce = d->reduce, p->n_stages = d->n_stages, p->n_windows = 0, p->reduce_ratio = d->reduce_ratio;
        memcpy(p->stage_layer, d->stage_layer, sizeof p->stage_layer);
        break;
    case STAGE_BUDGET:
        p->alloc = d->alloc, p->head_floor = d->head_floor;
        p->head_ceil = d->head_ceil, p->tau = d->tau, p->last = d->last;
        if (d->alloc == KV_ALLOC_PREFIX && !has_name(preset->keys, "online"))
            p->online = d->online, p->profile[0] = '\0';
        break;
    case STAGE_POOL: p->pool = d->pool, p->width = d->width; break;
    case STAGE_DECODE: p->decode = d->decode; break;
    case STAGE_COUNT: break;
    }
    if (has_name(o->keys, "recent") && !has_name(preset->keys, "recent")) p->recent = d->recent;
    return set_keys(o, what, p, args);
}

/* The preset's args (modified in place), then budget (> 0) as if given last. */
static enum kvf_status parse_preset(const struct kv_rule *pr, char *args, double budget, struct kv_policy *p) {
    *p = pr->defaults;
    enum kvf_status st = set_keys(pr, pr->name, p, args);
    if (st != KVF_OK || budget <= 0) return st;
    if (!has_name(pr->keys, "budget"))
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s' takes no budget (its keys: %s)", pr->name,
                       pr->keys[0] ? pr->keys : "none");
    char val[32];
    snprintf(val, sizeof val, "%.17g", budget);
    return set_key(pr, pr->name, p, "budget", val);
}

/* The rules no single key can check: shares that give each other, stages
 * that need or exclude one another. */
static enum kvf_status policy_check(const char *spec, struct kv_policy *p) {
    if (p->method == KV_FULL && p->decode != KV_DECODE_GROW)
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': full keeps every entry, so it has no decode stage", spec);
    /* Recent and important shares of the budget: one gives the other. */
    const bool recent = kv_policy_given(p, KV_KEY_RECENT), important = kv_policy_given(p, KV_KEY_IMPORTANT);
    if (recent && important && p->recent + p->important <= 0)
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': recent and important shares are both 0", spec);
    if (recent && important) p->recent /= p->recent + p->important;
    else if (important) p->recent = 1.0 - p->important;
    /* A profile replaces the online search unless online=1 was asked too. */
    if (kv_policy_given(p, KV_KEY_PROFILE) && !kv_policy_given(p, KV_KEY_ONLINE)) p->online = false;
    if (kv_rule_of(p->method)->needs & KV_NEEDS_EVICTOR)
        p->block_budget = p->budget > 1.0 ? (int)p->budget : 0, p->block_window = p->window;
    if (p->blocks && p->block_budget <= 0)
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': block-wise prefill needs a budget in entries "
                       "(budget=1024), not a ratio: the prompt's length is not known while it runs", spec);
    if (p->question && (!p->blocks || p->evict != KV_SNAPKV))
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': question=1 gives block-wise SnapKV eviction its "
                       "queries; it needs evict=snapkv", spec);
    if (p->reduce != KV_REDUCE_NONE && p->blocks)
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': a reduce stage runs on the whole prompt in one pass "
                       "(the text after an image weighs its tokens), so it does not compose with block-wise "
                       "prefill", spec);
    const struct kv_reduce_ops *reduce = kv_reduce_ops_of(p->reduce);
    const struct kv_rule *budget = kv_budget_rule(p->alloc);
    const char *clash = reduce && reduce->check ? reduce->check(p) : NULL;
    if (!clash && budget->check) clash = budget->check(p);
    if (clash) return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': %s", spec, clash);
    /* Heads share by score: a rule must rank each head's entries on one scale. */
    const struct kv_rule *scorer = kv_policy_scorer(p);
    const char *why = p->method == KV_FULL || !scorer->score ? "this preset scores no entries"
                      : kv_policy_per_layer(p)              ? "this preset keeps one set per layer"
                      : scorer->needs & KV_NEEDS_CROSS      ? "csp chooses inside its rule, leaving no ranking"
                                                            : NULL;
    if (budget->budget->ranking && why)
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': budget=%s %s; %s", spec, budget->name,
                       budget->budget->ranking, why);
    if (scorer->pass && (p->blocks || p->reduce != KV_REDUCE_NONE || p->decode != KV_DECODE_GROW))
        return err_set(KVF_ERR_INVALID_ARG, "kv policy '%s': kvzip repeats the whole context once it is in, and "
                       "scores nothing else; it does not compose with block-wise prefill, a reduce stage or a "
                       "decode stage", spec);
    return KVF_OK;
}

enum kvf_status kv_policy_parse_budget(const char *spec, double budget, struct kv_policy *out) {
    if (!(budget >= 0)) return err_set(KVF_ERR_INVALID_ARG, "kv budget %g is negative", budget);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec && spec[0] ? spec : "full");
    if (spec && strlen(spec) >= sizeof buf) return err_set(KVF_ERR_INVALID_ARG, "kv policy spec too long");
    char *rest = strchr(buf, '+');
    if (rest) *rest++ = '\0';
    char *args = strchr(buf, ':');
    if (args) *args++ = '\0';
    const struct kv_rule *pr = NULL;
    for (int i = 0; i < KV_METHOD_COUNT && !pr; i++)
        if (!strcmp(buf, presets[i]->name)) pr = presets[i];
    if (!pr) {
        char names[512], items[512];
        return err_set(KVF_ERR_INVALID_ARG, "unknown kv policy '%s' (valid: %s; stages follow with +: %s)", buf,
                       rule_names(presets, KV_METHOD_COUNT, ", ", names, sizeof names),
                       stage_items(items, sizeof items));
    }
    struct kv_policy p;
    enum kvf_status st = parse_preset(pr, args, budget, &p);
    for (char *item = rest, *next; st == KVF_OK && item; item = next) {
        next = strchr(item, '+');
        if (next) *next++ = '\0';
        st = parse_stage(item, pr, &p);
    }
    if (st == KVF_OK) st = policy_check(spec && spec[0] ? spec : "full", &p);
    if (st == KVF_OK) *out = p;
    return st;
}

enum kvf_status kv_policy_parse(const char *spec, struct kv_policy *out) {
    return kv_policy_parse_budget(spec, 0, out);
}

enum kvf_status kvf_kv_policy_check(const char *spec) {
    struct kv_policy p;
    return kv_policy_parse(spec, &p);
}

enum kvf_status kvf_kv_policy_check_budget(const char *spec, double budget) {
    struct kv_policy p;
    return kv_policy_parse_budget(spec, budget, &p);
}

/* ------------------------------------------------------------- budgets -- */

int kv_policy_keep_count(const struct kv_policy *p, int n) {
    if (p->method == KV_FULL) return n;
    /* A ratio applies to the tokens seen so far, so 1.0 never evicts. */
    const double k = p->budget <= 1.0 ? floor(p->budget * n + 0.5) : p->budget;
    return k >= n ? n : (int)k;
}

int kv_policy_layer_keep(const struct kv_policy *p, int n, int layer, int n_layer) {
    const int keep = kv_policy_keep_count(p, n);
    const struct kv_budget_ops *b = kv_budget_rule(p->alloc)->budget;
    return b->layer_keep ? b->layer_keep(p, n, keep, layer, n_layer) : keep;
}

/* ----------------------------------------------------------- selection -- */

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

int kv_heads_select(int n_head, const int *n, const float *score, long total, int *out, int *count) {
    long all = 0;
    for (int g = 0; g < n_head; g++) all += n[g];
    const int kept = kv_select((int)all, score, (int)KVF_MIN(total, all), out);
    /* out is ascending, so each head's kept entries are one run of it. */
    int o = 0;
    long base = 0;
    for (int g = 0; g < n_head; base += n[g++]) {
        count[g] = 0;
        for (; o < kept && out[o] < base + n[g]; o++, count[g]++) out[o] -= (int)base;
    }
    return kept;
}
