/* A statistic a rule gathers for itself while the model runs, declared on
 * its descriptor (kv_rule.stat) and run by the session and the decoder
 * without naming the rule: Expected Attention's query moments (qstat.c),
 * KVzap's scores written with each entry (kvzap.c). The session makes the
 * scoring rule's statistic (and, asked to gather for every policy, each one
 * marked `everywhere`), the decoder shows each layer's rows to it, copies,
 * forks and session files carry it, and the rule's score reads it back
 * (kv_score_in.stat). Statistics every rule shares and the attention
 * kernel computes (the window queries, the attention sums) stay need-bits
 * (KV_NEEDS_*). */
#ifndef KVF_KV_STAT_H
#define KVF_KV_STAT_H

#include "core/ops.h"
#include "kv/cache.h"

/* What a statistic is sized and found by. */
struct kv_stat_in {
    int n_layer, n_head, n_head_kv, head_dim, n_embd;
    int sinks;          /* the policy's always-kept first entries */
    uint32_t digest;    /* the model's identity (as session files name it) */
    const char *scorer; /* a file the policy names (kv_policy.scorer; "": none) */
    const char *beside; /* the file beside the model a rule reads when the policy names none
                             (kvf_kvzap_default_path) */
};

/* Layer `layer`'s call of n rows, just appended at the end of each of its
 * kv heads. */
struct kv_stat_rows {
    int layer, n;
    const float *x; /* their attention inputs (after the input norm) [n][n_embd] */
    struct kv_cache *kv;
    /* The decoder's matrix product on the pass's threads: out[t][r] = w row r . x row t for
     * n <= batch rows; work: [batch][work_cols] floats free for the call. */
    void (*matmul)(const void *ctx, const struct weight *w, const float *x, int n, float *out);
    const void *ctx;
    float *work;
    int batch, work_cols;
};

/* A session file's bytes, through the writer's or the reader's cursor. */
struct kv_stat_io {
    void (*put)(void *ctx, const void *x, size_t n);
    bool (*get)(void *ctx, void *x, size_t n); /* false: the file ends first */
    void *ctx;
};

struct kv_stat_ops {
    const char *name; /* named in errors: "query statistics" */
    bool everywhere;  /* also gathered by a session that gathers for every policy (kv_gather):
                            it needs nothing but the model */
    bool prior;       /* entries carry a score column (kv_head.prior) that `written` fills */
    enum kvf_status (*init)(void **st, const struct kv_stat_in *in);
    /* A copy of src (a session's copy: no file read again). */
    enum kvf_status (*dup)(void **st, const void *src);
    void (*free)(void *st);
    void (*clear)(void *st); /* a new prompt; NULL: nothing to clear */
    /* Whether a session that gathered src can be ranked as if it had
     * gathered st (a fork), and st takes what src gathered (take NULL:
     * nothing to take, what was gathered is in the entries). */
    bool (*agrees)(const void *st, const void *src);
    void (*take)(void *st, const void *src);
    /* The decoder's calls: queries before RoPE [n][n_head*head_dim] at
     * positions pos (not in trial runs, kv/qstat.h); entries written (every
     * pass). Either may be NULL. */
    enum kvf_status (*queries)(void *st, int layer, const float *q, const int32_t *pos, int n);
    enum kvf_status (*written)(const void *st, const struct kv_stat_rows *r);
    /* Session files: its bytes out, and back in with every value checked. */
    void (*save)(const void *st, const struct kv_stat_io *io);
    enum kvf_status (*load)(void *st, const struct kv_stat_io *io);
};

/* The statistics a session gathers: the scoring rule's first, then those
 * of every policy when asked (kv_gather), each once. */
#define KV_STATS_MAX 8
struct kv_stats {
    int n;
    const struct kv_stat_ops *ops[KV_STATS_MAX];
    void *st[KV_STATS_MAX];
};

/* own: the scoring rule's (NULL: none); every: the `everywhere` ones of
 * every preset's rule too.
 * like (NULL, or a set made for the same policy): copied from it instead of
 * made anew. */
enum kvf_status kv_stats_init(struct kv_stats *s, const struct kv_stat_ops *own, bool every,
                              const struct kv_stat_in *in, const struct kv_stats *like);
void kv_stats_free(struct kv_stats *s);
void kv_stats_clear(struct kv_stats *s);
/* The state of the statistic `ops` (NULL: not gathered). */
void *kv_stats_get(const struct kv_stats *s, const struct kv_stat_ops *ops);
bool kv_stats_prior(const struct kv_stats *s);
enum kvf_status kv_stats_queries(const struct kv_stats *s, int layer, const float *q, const int32_t *pos, int n);
enum kvf_status kv_stats_written(const struct kv_stats *s, const struct kv_stat_rows *r);
/* A fork: each statistic of dst agrees with src's and takes it, else
 * KVF_ERR_UNSUPPORTED naming it and the spec. */
enum kvf_status kv_stats_take(struct kv_stats *dst, const struct kv_stats *src, const char *spec);

#endif
