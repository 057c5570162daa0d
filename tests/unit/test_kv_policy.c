/* KV policies: spec parsing, budgets, the rule registry and which rules
 * need the question. Each rule's own test is test_rule_<name>.c beside
 * this file (helpers in policy_fixture.h). */
#include "policy_fixture.h"

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
        /* h2o decodes with its own rule, which a global budget or a threshold does not keep: keydiff there */
        const bool own = !strcmp(info.name, "global") || !strcmp(info.name, "threshold");
        if (strcmp(info.stage, "preset"))
            snprintf(spec, sizeof spec, "%s+%s=%s", own ? "keydiff" : "h2o", info.stage, info.name);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_keep_count),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_question_aware),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
