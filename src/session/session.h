/* Internal layout of a session: what one conversation owns. Each part owns
 * its memory and has its own init/free; the decoder is handed the parts it
 * needs for a pass (model/decoder.h). */
#ifndef KVF_SESSION_H
#define KVF_SESSION_H

#include "kv/cache.h"
#include "kv/merge_log.h"
#include "kv/policy.h"
#include "kv/qwin.h"
#include "kv/reduce.h"
#include "model/decoder.h"
#include "model/model.h"

/* Compression scratch and state (session/compress.c); the scratch for cap
 * entries a head (compress_reserve grows it with the session's positions):
 * scores, indices, work space, the window queries' attention
 * [n_head_kv][cap] (csp: same-modality in win, cross-modality in win2),
 * their output [win_rows][n_head*head_dim] and tags [win_rows], win_rows
 * being the query windows' rows. */
struct compress_state {
    int cap, win_rows;
    /* score, idx: [cap], or [n_head_kv][cap] under budget=adaptive,
     * whose heads are ranked together, or [n_layer][n_head_kv][cap] under
     * budget=global, where every head of every layer is; head_n, head_keep:
     * [n_layer][n_head_kv] (adaptive uses the first n_head_kv) the heads'
     * sizes and kept counts. */
    float *score, *tmp, *win, *win2, *out, *layer;
    int *idx, *into, *head_n, *head_keep;
    /* A rule's pass (KVzip's reconstruction): [n_layer][n_head_kv][recon_stride]
     * the most attention each entry received from a query of its runs,
     * from session_rule_pass until the compression that reads it. */
    float *recon;
    size_t recon_stride;
    /* Expected Attention's work space [2 cap + 2 head_dim][head_dim]. */
    float *rows;
    struct kvf_tag *qtag;
    /* [n_layer][n_head_kv] head sizes right after kvf_session_compress (the
     * decode stage's fixed-distance rule counts from there). */
    int *n0;
    bool compressed;
    int decode_steps;
    /* Per-layer budgets as shares of the tokens seen (budget=prefix), and the
     * Gini coefficient of each layer's priority curve when searched. */
    double *layer_ratio, *layer_gini;
    bool have_ratio;
};

struct kvf_session {
    const struct kvf_model *model;
    struct kvf_session_params params; /* resolved: n_ctx, n_batch, n_threads > 0; kv_spec NULL */
    struct kv_policy policy;
    char *spec;                       /* the kv_spec the policy was parsed from ("": full), owned */
    char *note;                       /* kvf_session_set_note's text, owned; NULL: none */
    int n_past;                       /* positions processed so far */
    float *logits;                    /* [n_vocab] after the last token */
    bool has_logits;
    /* What the buffers are sized for, grown as the session grows (up to
     * n_ctx), so that a context it never fills takes no memory: room
     * positions (tags and token ids below), keys entries a head (the
     * attention scratch and statistics, the reduce stage's sums, the
     * compression scratch: a compressed cache needs them for what it holds,
     * not for the positions seen); the query windows hold their own. */
    int room, keys;
    struct kvf_tag *tags;             /* [room] tag of every position so far ([n_past] used) */
    int32_t *toks;                    /* [room] the token id at each position (-1: an embedding row),
                                         which KVzip's reconstruction repeats */
    /* M-RoPE models (model.h: mrope): [room] the rope position a text
     * token after each position takes, and the rope position of the prompt
     * being prefilled at its relative 0 (kvf_prompt.rope); NULL otherwise. */
    int32_t *rope_next;
    int32_t prompt_rope0;

    struct kv_cache kv;
    struct decoder_tap *tap;          /* what KVzap's calibration reads of each pass (NULL: nothing) */
    struct fwd_scratch fw;
    /* The latest queries of every layer (policies scored by the prompt's
     * last queries); qprox: block-wise question=1's proxies, the question's
     * queries from a trial run of it alone, while `probing`. */
    struct kv_qwin qwin, qprox;
    bool probing;
    /* The statistics rules gather for themselves (kv/stat.h): the scoring
     * rule's, and with kv_gather every policy's that needs nothing but the
     * model. */
    struct kv_stats stats;
    struct reduce_state rd;
    struct compress_state cs;
    struct kv_merge_log merges;
    /* The last position a sliding-window layer freed as out of its window
     * (-1: none): the session cannot go back below swa_lost + window. */
    int swa_lost;
    /* A prompt being prefilled in parts: its positions before part_next
     * are in, after the part_base positions before it (part_of NULL: none). */
    const struct kvf_prompt *part_of;
    int part_next, part_base;
};

/* What brings the cache back within budget: the preset's rule and merge
 * after the prompt (compress), the decode stage's rule while generating,
 * or the schedule stage's evictor after each block of the prompt. */
enum evict_mode { EVICT_COMPRESS, EVICT_DECODE, EVICT_BLOCK };

/* The rope position the next text token takes. */
static inline int32_t session_next_rope(const struct kvf_session *s) {
    return s->rope_next && s->n_past > 0 ? s->rope_next[s->n_past - 1] : s->n_past;
}

/* The entries layer l can still attend to, of the n_past positions seen:
 * a sliding-window layer sees at most window - 1 of them (unless it keeps
 * all, kv_swa_full). The budget stage counts these. */
int session_layer_seen(const struct kvf_session *s, int l);
/* Frees the entries of head (l, g) of a sliding-window layer that no later
 * query can see (positions <= n_past - window), but the newest `slack` of
 * them, when more than 2 x slack are there (slack 0: all); *dropped
 * (optional) gets how many went, from the front of the head. */
enum kvf_status session_swa_drop(struct kvf_session *s, int l, int g, int slack, int *dropped);

/* The longest note a session keeps (kvf_session_set_note). */
#define SESSION_NOTE_MAX (16u << 20)

/* Room for a pass of n rows after n_past: its row buffers, the tags, n
 * more entries in every head, n more rows in the query windows;
 * KVF_ERR_CONTEXT when they do not fit in n_ctx. */
enum kvf_status session_reserve(struct kvf_session *s, int n);
/* Room for n_pos positions and heads of n_keys entries (compress_reserve
 * sized to the query windows' rows too). */
enum kvf_status session_room(struct kvf_session *s, int n_pos, int n_keys);
/* A session of resolved params p under policy (parsed from spec), empty;
 * like (may be NULL): a session of the same policy whose rule statistics
 * are copied (a copy of a session: no scorer file read again), else made
 * anew. */
enum kvf_status session_new(const struct kvf_model *m, const struct kvf_session_params *p,
                            const struct kv_policy *policy, const char *spec, const struct kvf_session *like,
                            struct kvf_session **out);
/* kvf_session_init's checks and parse; load_profile: PrefixKV's profile
 * file is read (a session file carries the ratios instead). */
enum kvf_status session_create(const struct kvf_model *m, const struct kvf_session_params *params, bool load_profile,
                               struct kvf_session **out);

/* The model's chat template around one user message: buf[cap] gets the
 * text before the user's (BOS aside), *after points (into buf) at the text
 * after it, the assistant's turn; without a template, "" and "\n". */
enum kvf_status session_user_template(const struct kvf_model *m, char *buf, int cap, const char **after);
/* A scoring rule's pass over the context (KVzip's reconstruction), its
 * maxima left in cs.recon for the compression (session.c). */
enum kvf_status session_rule_pass(struct kvf_session *s, const struct kv_pass_ops *pass);

/* session/compress.c */
enum kvf_status compress_init(struct compress_state *c, const struct kvf_session *s);
/* The scratch grown to heads of n entries and to the query window's rows. */
enum kvf_status compress_reserve(struct compress_state *c, const struct kvf_session *s, int n);
void compress_free(struct compress_state *c);
void compress_reset(struct compress_state *c, const struct kv_policy *p);
/* dst (compress_init'ed for the same session shape and policy) gets the
 * state src carries between calls: whether it compressed, the decode
 * steps since, the head sizes then and the layer budgets. */
void compress_copy(struct compress_state *dst, const struct compress_state *src, int n_layer, int n_head_kv);
/* PrefixKV's layer ratios made by `kvfold profile` (profile=FILE,
 * kv_prefix_load_profile) become the session's. */
enum kvf_status compress_load_profile(struct kvf_session *s, const char *path);
/* Brings every head over its layer's budget for the tokens seen down to it. */
enum kvf_status session_evict(struct kvf_session *s, enum evict_mode mode);

#endif
