/* KV cache policies: a spec string parsed into the stages of
 * docs/METHODS.md §3, and the steps that apply them to the cache. A spec is
 * a preset ("snapkv:budget=0.2,window=32") — which fixes the score rule and
 * the defaults of the other stages — optionally followed by stage options
 * ("+budget=pyramid:beta=20", "+decode=h2o:recent=0.5"). Each rule lives in
 * its own file under src/kv/policy/ with its descriptor (struct kv_rule);
 * adding one is that file plus a line in kv/rules.def. */
#ifndef KVF_KV_POLICY_H
#define KVF_KV_POLICY_H

#include "kv/cache.h"
#include "kv/stat.h"

/* Presets, one per line of kv/rules.def: KV_FULL, KV_STREAMING, ... */
enum kv_method {
#define KV_RULE(ID, name) KV_##ID,
#include "kv/rules.def"
    KV_METHOD_COUNT
};
/* Budget stage: how the entries are spread over the layers (prefix:
 * PrefixKV's searched per-layer ratios, online or from a profile), over
 * the kv heads of a layer (adaptive: Ada-KV's, by score), or over every
 * head of every layer (global: KVzip's, by score); or no budget at all
 * (threshold: every entry whose score clears tau, kvpress's ThresholdPress). */
enum kv_alloc {
#define KV_BUDGET_RULE(ID, name) KV_ALLOC_##ID,
#include "kv/rules.def"
    KV_ALLOC_COUNT
};
/* Merge stage: where evicted entries go (src/kv/policy/merge.c). */
enum kv_merge { KV_MERGE_NONE, KV_MERGE_AVG, KV_MERGE_PIVOTAL, KV_MERGE_WEIGHTED, KV_MERGE_POSITION };
/* LOOK-M's text prior: none; text before images within the budget (text
 * competes by score when it alone exceeds it); every text entry kept even
 * past the budget (the authors' released code). */
enum kv_text_prior { KV_TEXT_NONE, KV_TEXT_FIRST, KV_TEXT_ALL };
/* Decode stage: how the cache is kept within budget while generating. */
enum kv_decode {
#define KV_DECODE_RULE(ID, name) KV_DECODE_##ID,
#include "kv/rules.def"
    KV_DECODE_COUNT
};
/* Reduce stage: vision tokens merged or dropped inside the decoder during
 * prefill (src/kv/reduce.h); its rules are the KV_REDUCE_RULE lines of
 * kv/rules.def. */
enum kv_reduce {
    KV_REDUCE_NONE,
#define KV_REDUCE_RULE(ID, name) KV_REDUCE_##ID,
#include "kv/rules.def"
    KV_REDUCE_COUNT
};
/* Pool stage: any rule's scores smoothed over neighbouring entries. */
enum kv_pool {
#define KV_POOL_RULE(ID, name) KV_POOL_##ID,
#include "kv/rules.def"
    KV_POOL_COUNT
};
/* Schedule stage: the prompt in one pass, or in blocks under a fixed budget. */
enum kv_schedule { KV_SCHEDULE_BULK, KV_SCHEDULE_BLOCKS, KV_SCHEDULE_COUNT };
#define KV_REDUCE_MAX 8 /* reduce steps in one prefill */

/* The keys a spec may set, each declared once with its type and range in
 * the key table (src/kv/policy.c); a rule lists the ones it accepts. */
enum kv_key {
    KV_KEY_BUDGET, KV_KEY_SINKS, KV_KEY_RECENT, KV_KEY_IMPORTANT, KV_KEY_WINDOW, KV_KEY_KERNEL, KV_KEY_SEED,
    KV_KEY_BETA, KV_KEY_DISTANCE, KV_KEY_EVERY, KV_KEY_MERGE, KV_KEY_TEXT_PRIOR, KV_KEY_CROSS_RATIO, KV_KEY_N,
    KV_KEY_DECODE_SOFTMAX, KV_KEY_BLOCK, KV_KEY_FIRST, KV_KEY_EVICT, KV_KEY_QUESTION, KV_KEY_LAYERS, KV_KEY_WINDOWS,
    KV_KEY_K, KV_KEY_R, KV_KEY_RATIO, KV_KEY_ONLINE, KV_KEY_PROFILE, KV_KEY_PROTECT, KV_KEY_WIDTH, KV_KEY_FLOOR,
    KV_KEY_FUTURE, KV_KEY_CHUNK, KV_KEY_TAU, KV_KEY_CEIL, KV_KEY_LAST, KV_KEY_SCORER,
    KV_KEY_COUNT /* <= 64: kv_policy.given */
};

struct kv_policy {
    enum kv_method method;
    double budget;      /* <= 1: a ratio of the tokens seen; > 1: a count of entries per head */
    int sinks;          /* streaming, decode=window: first entries always kept             */
    int protect;        /* elastic, prefixkv: last entries always kept (the question, the chat
                           template's assistant prefix), within the layer's budget: at most
                           keep - sinks of them, at least the last                         */
    double recent;      /* h2o, roco, decode=h2o: share of the kept entries protected as recent
                           (roco: protected by the spread of their attention)             */
    int window;         /* snapkv: observation window (last queries of the prompt)        */
    int kernel;         /* snapkv: average-pooling width (odd)                            */
    uint64_t seed;      /* random, imgrand                                                */
    enum kv_alloc alloc;
    int beta;           /* alloc=pyramid: the top layer keeps (budget - window) / beta     */
    double head_floor;  /* alloc=adaptive: share of the even per-head budget every kv head keeps;
                           alloc=threshold: share of its entries every kv head keeps */
    double head_ceil;   /* alloc=threshold: share of its entries a kv head keeps at most      */
    double tau;         /* alloc=threshold: the score an entry must reach to stay            */
    int last;           /* alloc=threshold: the last entries of every head always kept       */
    enum kv_decode decode;
    int distance;       /* decode=fixed-distance: the evicted index is this far from the end
                           of the compressed prompt                                        */
    int every;          /* decode=recompress: decode steps between compressions           */
    enum kv_merge merge;
    enum kv_pool pool;  /* +pool=avg: scores averaged over `width` (odd) neighbouring entries */
    int width;
    double important;   /* lookm: the important share (recent = 1 - important when alone) */
    uint64_t given;     /* bit k set: the spec gave key k (enum kv_key)                    */
    int text_prior;     /* lookm: enum kv_text_prior                                     */
    double cross_ratio; /* csp: share of the non-recent budget chosen by cross-modal attention */
    double nsm_n;       /* csp: the n of the n-softmax exp(x_j) / (n + sum_k exp(x_k))      */
    bool decode_softmax; /* csp: n-softmax also inside attention once compressed (eq. 7)  */
    /* Schedule stage (blockwise, +schedule=blocks): the prompt runs in
     * blocks and after each one the cache is evicted back to block_budget,
     * so it never holds more than block_budget + block entries; the
     * preset's own rule and budget apply once the prompt is in. */
    bool blocks;
    int block;          /* tokens per block; 0: one block per media segment (image, frame)
                           and text in runs of the batch size                           */
    int first;          /* no eviction before this many tokens (the paper's one-pass start;
                           0: the block budget)                                         */
    enum kv_method evict; /* the evictor: KV_SNAPKV (query-aware) or KV_KEYDIFF         */
    int block_budget;   /* entries per head kept after each block                      */
    int block_window;   /* evict=snapkv: the last queries seen that score the entries  */
    bool question;      /* evict=snapkv: the prompt's last text segment (the question) runs
                           alone first; its queries score every block                   */
    /* Reduce stage: after stage_layer[i] layers (a count: 12 = after the
     * 12th) vision tokens are merged (lightkv, in stage_window[i]^2 windows;
     * tome) or dropped (fastv). n_stages 0: the defaults for 32 layers,
     * scaled to the model's depth (kv_reduce_stages). */
    enum kv_reduce reduce;
    int n_stages;
    int stage_layer[KV_REDUCE_MAX], stage_window[KV_REDUCE_MAX];
    int n_windows;      /* lightkv: windows given (0: 4,2,1)                          */
    double reduce_ratio; /* lightkv, tome: share of a window's (image's) tokens merged per
                            step; fastv: share of the image tokens dropped              */
    int future;         /* expected: the next positions whose queries are expected         */
    int chunk;          /* kvzip: context tokens repeated per reconstruction pass          */
    bool online;        /* prefixkv: search the layer ratios on the prompt itself         */
    char profile[256];  /* prefixkv: JSON file of profiled layer ratios (kvfold profile)  */
    char scorer[256];   /* kvzap: the scorer file (kvfold calibrate; "": the model's, kvf_model zap_path) */
};

/* One head's scores: higher is kept first; INFINITY marks entries that are
 * always kept (sinks, the observation window, recent entries, text under
 * imgrand). */
struct kv_score_in {
    const struct kv_policy *p;
    const struct kv_head *h;
    int head_dim;
    int keep;              /* entries the head keeps (h2o splits them)         */
    const float *win_attn; /* KV_NEEDS_WINDOW: attention of the window queries [h->n];
                              with KV_NEEDS_CROSS their n-softmax attention from the same modality */
    const float *win_cross; /* KV_NEEDS_CROSS: ... and from the other modality [h->n] */
    const float *win_layer; /* KV_NEEDS_WINDOW: every kv head's win_attn, [n_head_kv][win_stride] */
    int n_head_kv, win_stride;
    const float *layer_score; /* KV_NEEDS_LAYER: the layer's importance [h->n] (kv_score_layer) */
    const float *recon;    /* the rule's pass (kv_rule.pass): the most attention each entry received
                              from a query of its runs [h->n] (KVzip: the context's reconstruction) */
    const void *stat;      /* the rule's own statistic (kv_rule.stat), as its ops made it */
    /* Where the head is (layer; query heads g x group ...) and where the next
     * queries will be: the layer's RoPE (inv_freq [head_dim/2], mscale,
     * style) at position next_pos on; attn_scale multiplies q.k. */
    int layer, q_head, group; /* q_head: the kv head's first query head, of `group` */
    const double *rope_freq;
    float rope_mscale, attn_scale;
    int rope_style;        /* enum kvf_rope_style */
    int32_t next_pos;
    float *rows;           /* kv_rule.rows(h->n, head_dim) floats of work space             */
    int n0;                /* the head's size right after the last compression (decode stage) */
    uint64_t seed;         /* per (layer, head) stream for the random rules    */
    float *scratch;        /* [h->n] work space                                 */
    int *iscratch;         /* [h->n] work space                                 */
};
typedef void (*kv_score_fn)(const struct kv_score_in *in, float *score);

/* What a rule's score reads of what the engine gathers for every rule
 * while the prompt runs (a statistic of the rule's own is kv_rule.stat). */
#define KV_NEEDS_WINDOW 1u  /* the last queries of each layer (kv/qwin.h) and their attention */
#define KV_NEEDS_CROSS 2u   /* that attention as n-softmax, split by the query's modality (csp) */
#define KV_NEEDS_ACC 4u     /* the attention each entry received over every query (KV_ACC_*) */
#define KV_NEEDS_LAYER 8u   /* one kept set per layer, scored by kv_score_layer */
#define KV_NEEDS_EVICTOR 16u /* scores with the schedule stage's evictor (blockwise) */
#define KV_NEEDS_LAST_ROW 128u /* reduce: the attention the pass's last row pays each row at the step's
                                  layer (struct reduce_view's last_attn) */
#define KV_NEEDS_QUESTION 256u /* reduce: weighs the image by the text after it, so by the question
                                  when it ends the prompt (kvf_kv_policy_info's question_aware) */

/* A rule's pass over the context before it scores (KVzip's reconstruction,
 * read back as kv_score_in.recon): runs of tokens the rule writes, which the
 * session feeds the model after the context one at a time, removing each
 * run's entries after it and keeping for every entry the most attention
 * any query of any run paid it (session.c session_rule_pass). */
struct tokenizer;
struct kv_pass_in {
    const struct kv_policy *p;
    const struct tokenizer *tok;
    const int32_t *text;   /* [n_text] the context's text tokens (BOS and media rows left out) */
    int n_text;
    const char *turn;      /* what the chat template puts after a user's text ("\n" without one) */
};
struct kv_pass_ops {
    /* The most tokens one run takes, for a context of n_text tokens (what a
     * server reserves beside the context: kvf_kv_compress_positions). */
    int (*most)(const struct kv_policy *p, int n_text, const char *turn);
    /* Run k (0, 1, ...) into ids[0..cap): *n tokens; *n = 0 once there are no more. */
    enum kvf_status (*run)(const struct kv_pass_in *in, int k, int32_t *ids, int cap, int *n);
};

/* The budget stage's work, on each of its options (kv_rule.budget). */
enum kv_rank {
    KV_RANK_HEAD,  /* each kv head to its layer's target (or its own count: head_keep) */
    KV_RANK_LAYER, /* a layer's kv heads ranked together, to the layer's total */
    KV_RANK_MODEL, /* every kv head of every layer ranked together, to the model's total */
};
struct kv_budget_ops {
    /* What one ranking spans when the prompt is compressed and while
     * decoding (block-wise eviction holds every head to the block budget). */
    enum kv_rank rank;
    /* A head's target in layer `layer` of n_layer, keep being the even
     * share of the n entries it sees (NULL: keep). */
    int (*layer_keep)(const struct kv_policy *p, int n, int keep, int layer, int n_layer);
    /* KV_RANK_HEAD: a head's own count of n from its scores, which it may
     * change (NULL: the target; set, every head is scored). */
    int (*head_keep)(const struct kv_policy *p, float *score, int n);
    /* KV_RANK_LAYER, KV_RANK_MODEL: the `total` best entries of n_head heads
     * holding n[g] each (kv_heads_select's arguments). */
    int (*select)(const struct kv_policy *p, int n_head, const int *n, float *score, long total, int *out, int *count,
                  int *scratch);
    /* Layer shares searched on the cache before anything is evicted
     * (kv_prefix_search's arguments; NULL: none). */
    enum kvf_status (*shares)(const struct kv_cache *kv, const struct kv_policy *p, const int *seen, const int *sinks,
                              double *ratio, double *gini);
    /* What it does with each head's ranking, for refusing a rule that
     * ranks no entries on one scale ("shares a layer's budget among its kv
     * heads by their scores"; NULL: it needs no ranking). */
    const char *ranking;
};

/* A rule's descriptor: a preset (one per src/kv/policy/ file, listed in
 * kv/rules.def) or an option of a stage ("decode=h2o"). Parsing, `kvfold
 * policies` (kvf_kv_policy_get), the session and the fork checks read these. */
struct kv_rule {
    const char *stage;    /* "preset", "budget", "decode", "reduce" or "schedule" */
    const char *name, *summary, *paper;
    const char *keys;     /* the keys it accepts (names from the key table), space-separated */
    const char *shown;    /* its defaults as a spec fragment, as `kvfold policies` prints them;
                             a preset's parses back to `defaults` (tested) */
    struct kv_policy defaults; /* preset: the whole policy; stage option: the values it sets */
    unsigned needs;       /* KV_NEEDS_* */
    kv_score_fn score;    /* presets: the score stage; NULL keeps every entry (full, the reduce presets) */
    size_t (*rows)(int n, int head_dim); /* floats of work space its score needs for a head of n
                                            (kv_score_in.rows); NULL: none */
    const struct kv_pass_ops *pass; /* a pass over the context before scoring; NULL: none */
    const struct kv_stat_ops *stat; /* a statistic of its own, gathered as the model runs; NULL: none */
    /* Stage options' work (NULL: the stage's default, doing nothing). */
    const struct kv_budget_ops *budget; /* budget */
    /* pool: a head's n scores smoothed (tmp: [n]) */
    void (*smooth)(const struct kv_policy *p, float *score, int n, float *tmp);
    /* decode: whether the cache goes back within budget after this decoded
     * token (*steps: the tokens since the last compression, the rule's to
     * count); `score` then ranks the entries of each head over its target,
     * or, NULL, the preset's own rule compresses again */
    bool (*due)(const struct kv_policy *p, int *steps);
    /* any stage option: why it does not compose with the rest of p (NULL: it does) */
    const char *(*check)(const struct kv_policy *p);
};

/* The stage defaults every preset starts from (alloc, decode, reduce and
 * schedule default to uniform, grow, none and bulk: the zero values). */
#define KV_STAGE_DEFAULTS .sinks = 4, .beta = 20, .distance = 25, .every = 32

/* The presets, defined in their files (kv_rule_<name>), indexed by enum kv_method. */
#define KV_RULE(ID, name) extern const struct kv_rule kv_rule_##name;
#define KV_REDUCE_RULE(ID, name) extern const struct kv_rule kv_rule_reduce_##name;
#define KV_BUDGET_RULE(ID, name) extern const struct kv_rule kv_rule_budget_##name;
#define KV_POOL_RULE(ID, name) extern const struct kv_rule kv_rule_pool_##name;
#define KV_DECODE_RULE(ID, name) extern const struct kv_rule kv_rule_decode_##name;
#include "kv/rules.def"
extern const struct kv_rule kv_rule_schedule_blocks;

const struct kv_rule *kv_rule_of(enum kv_method m);
/* The budget, pool and decode stages' option k. */
const struct kv_rule *kv_budget_rule(enum kv_alloc k);
const struct kv_rule *kv_pool_rule(enum kv_pool k);
const struct kv_rule *kv_decode_rule(enum kv_decode k);
/* The reduce stage's option k ("none" for KV_REDUCE_NONE or out of range). */
const struct kv_rule *kv_reduce_rule(enum kv_reduce k);
/* The rule that scores the entries of a policy: its preset's, or the
 * schedule stage's evictor for a preset that scores with it (blockwise). */
static inline const struct kv_rule *kv_policy_scorer(const struct kv_policy *p) {
    const struct kv_rule *r = kv_rule_of(p->method);
    return r->needs & KV_NEEDS_EVICTOR ? kv_rule_of(p->evict) : r;
}

/* Parses a spec; on failure the message lists what is valid. */
enum kvf_status kv_policy_parse(const char *spec, struct kv_policy *out);
/* The same with the preset's budget replaced by `budget` (> 0; 0: the
 * spec's own), as if the spec said budget=X: the preset must take one. */
enum kvf_status kv_policy_parse_budget(const char *spec, double budget, struct kv_policy *out);
static inline bool kv_policy_given(const struct kv_policy *p, enum kv_key k) { return p->given >> k & 1u; }
/* Entries a head keeps, n_seen tokens in, under the policy's budget. */
int kv_policy_keep_count(const struct kv_policy *p, int n_seen);
/* The same in layer `layer` of n_layer, after the budget allocation
 * (uniform, or PyramidKV's pyramid, src/kv/policy/pyramid.c). */
int kv_policy_layer_keep(const struct kv_policy *p, int n_seen, int layer, int n_layer);
int kv_pyramid_keep(const struct kv_policy *p, int n, int keep, int layer, int n_layer);
/* Whether compression needs the last `window` queries of each layer: for
 * the scoring rule, or for the schedule stage's evictor. */
static inline bool kv_policy_needs_window(const struct kv_policy *p) {
    return (kv_policy_scorer(p)->needs & KV_NEEDS_WINDOW) ||
           (p->blocks && (kv_rule_of(p->evict)->needs & KV_NEEDS_WINDOW));
}
/* Whether cache entries carry the attention they received (KV_ACC_*): for
 * the scoring rule or the decode stage's. */
static inline bool kv_policy_needs_acc(const struct kv_policy *p) {
    return ((kv_policy_scorer(p)->needs | kv_decode_rule(p->decode)->needs) & KV_NEEDS_ACC) != 0;
}
/* Whether one kept set is chosen per layer, shared by its kv heads. */
static inline bool kv_policy_per_layer(const struct kv_policy *p) {
    return (kv_policy_scorer(p)->needs & KV_NEEDS_LAYER) != 0;
}

/* Score rules other rule files reuse (each rule's own is its descriptor's). */
void kv_score_streaming(const struct kv_score_in *in, float *score);
void kv_score_h2o(const struct kv_score_in *in, float *score);
void kv_score_snapkv(const struct kv_score_in *in, float *score);
/* Elastic Cache and PrefixKV: every head of a layer takes the layer's score. */
void kv_score_from_layer(const struct kv_score_in *in, float *score);

/* The `keep` best-scored entries of a head of n (ties: the earlier entry):
 * their indices, ascending, into out[] (room for n), and their count;
 * entries scored INFINITY are kept even when they alone exceed `keep` (the
 * real count is what the cache then holds). */
int kv_select(int n, const float *score, int keep, int *out);
/* Budget stage adaptive (src/kv/policy/adakv.c): the n_head heads of a
 * layer, holding n[g] entries, keep n_head x per_head entries between them.
 * score: the heads' scores one after the other (sum n[g]; the safeguard
 * overwrites some with INFINITY); out: room for sum n[g], receives each
 * head's kept indices (ascending, local to the head), head after head,
 * count[g] of them; scratch: max n[g] ints. Returns the entries kept. */
int kv_adaptive_select(int n_head, const int *n, float *score, int per_head, double floor_share, int *out, int *count,
                       int *scratch);
/* The heads ranked as one list (higher score first, ties: the earlier
 * head, then the earlier entry): the `total` best entries of n_head heads
 * (score, out, count as kv_adaptive_select's; entries scored INFINITY kept
 * past total). Budget stages adaptive (the heads of a layer) and global
 * (every head of every layer). Returns the entries kept. */
int kv_heads_select(int n_head, const int *n, const float *score, long total, int *out, int *count);
/* Threshold eviction (src/kv/policy/threshold.c): the entries one head of
 * n keeps under p's threshold stage, its last p->last scores made
 * INFINITY (kept) first; for kv_select. */
int kv_threshold_keep(const struct kv_policy *p, float *score, int n);
/* kv_select, then compacts the head to the kept entries. scratch: h->n ints. */
enum kvf_status kv_select_keep(struct kv_cache *c, int layer, int head, const float *score, int keep, int *scratch);
/* Layer importance (PrefixKV, Elastic Cache): the attention each entry
 * received over every query, averaged over the layer's kv heads (whose
 * entries are the same positions). The first `sinks` entries and the last
 * `protect` always stay (the authors' start_size and protect_size). */
void kv_score_layer(const struct kv_cache *c, int layer, int sinks, int protect, float *score);
/* Merge stage: folds the entries of a head not in keep[0..n_keep) into kept
 * ones (rows changed in place; compact afterwards). into: [h->n] the index
 * in keep[] each entry went to (kept entries: their own). */
enum kvf_status kv_merge_head(const struct kv_policy *p, struct kv_head *h, int head_dim, const int *keep, int n_keep,
                              int *into);

/* Pool stage (src/kv/policy/pool.c): each finite score of a head of n
 * becomes the sum of the finite scores within width / 2 entries of it,
 * divided by width (zero padding at the ends, as SnapKV's pooling);
 * entries scored +-INFINITY keep their score and count as 0 for their
 * neighbours. tmp: [n]. */
void kv_pool_scores(float *score, int n, int width, float *tmp);

/* PrefixKV's layer budgets (src/kv/policy/prefixkv.c). imp: [n_layer][n]
 * importance of each entry of each layer (>= 0), of which layer l has
 * lens[l] <= n (lens NULL: all n; a sliding-window layer holds fewer).
 * Binary search for the threshold p (returned in *p_out) at which the
 * layers' shortest prefixes reaching p add up to `total` within `tol`
 * entries (or the iterations run out), then scaled so that
 * keep[0..n_layer) (each in [floors[l], lens[l]]; floors NULL: 1, else each
 * in [1, lens[l]]) sums to total exactly (which those ranges must allow).
 * gini (optional): [n_layer] Gini coefficient of each layer's priority
 * curve (0: uniform importance, near 1: concentrated). */
enum kvf_status kv_prefix_budgets(const float *imp, int n_layer, int n, const int *lens, const int *floors, long total,
                                  double tol, int *keep, double *gini, double *p_out);
/* PrefixKV online (budget=prefix:online=1): the layer ratios searched on
 * the cache itself, before any eviction (its kv heads hold the same
 * entries). Layer l is searched over the entries it sees, its last seen[l]
 * (a sliding-window layer: its window), never below what its rule always
 * keeps (sinks[l] + p->protect for a per-layer rule); the total is the
 * layers' even shares (kv_policy_keep_count). ratio[l]: the share of
 * seen[l] layer l keeps (1 when a layer sees nothing); gini as
 * kv_prefix_budgets'. */
enum kvf_status kv_prefix_search(const struct kv_cache *kv, const struct kv_policy *p, const int *seen,
                                 const int *sinks, double *ratio, double *gini);
/* PrefixKV offline (profile=FILE): the layer ratios `kvfold profile`
 * wrote, {"model", "n_layer", "budget", "ratios": [n_layer shares in
 * (0, 1]], ...}, into ratio[n_layer]. The spec's budget must be the
 * profile's; p->budget becomes it (taken when the spec gave none). */
enum kvf_status kv_prefix_load_profile(const char *path, int n_layer, struct kv_policy *p, double *ratio);

#endif
