/* The decoder forward pass (model/decoder.c) and the buffers it runs in.
 * The decoder owns nothing: a session hands it its parts (cache, query
 * window, reduce state, merge log) in a struct decoder for each pass. */
#ifndef KVF_MODEL_DECODER_H
#define KVF_MODEL_DECODER_H

#include "kv/cache.h"
#include "kv/stat.h"
#include "kv/merge_log.h"
#include "kv/qwin.h"
#include "kv/reduce.h"
#include "model/model.h"

/* Buffers for one forward pass of up to rows_cap rows (R below): a batch of
 * n_batch tokens, or a whole prompt when a reduce stage runs it in one pass.
 * gate, up and the matmul scratch hold B = min(R, n_batch) rows: the
 * decoder feeds them a batch at a time. The row buffers are grown by
 * fwd_reserve and may be given back between passes (fwd_release_rows: a
 * decoding session needs one row, not its prompt's batch); attn_scratch
 * and acc_tmp, for the keys a layer holds, grow with them (fwd_reserve_keys)
 * and stay. */
struct fwd_scratch {
    int rows_cap, n_batch, n_threads;
    float *x, *xn;           /* [R][n_embd] residual stream, normed copy */
    float *q, *k, *v, *att;  /* [R][n_head*head_dim], [R][n_head_kv*head_dim] x2, [R][n_head*head_dim] */
    float *gate, *up;        /* [B][n_ff] */
    int32_t *pos;            /* [R] true positions of the pass's rows */
    int32_t *qlast;          /* [R] the last position each row sees (model.h: image_bidirectional) */
    int32_t (*rpos)[3];      /* [R] M-RoPE positions (time, height, width) of the rows (model.h: mrope) */
    struct kvf_tag *btag;    /* [R] tags of the pass's rows */
    float *ds;               /* [R][n_deepstack][n_embd] DeepStack features added to the rows after the first
                                layers (model.h: n_deepstack; zero for text); NULL without */
    void *mm_scratch;        /* ops_matmul scratch for B rows */
    float *attn_scratch;     /* attn_forward scratch for keys_cap keys */
    int keys_cap;
    bool acc;                /* whether acc_tmp is kept */
    float *acc_tmp;          /* [KV_ACC_N][n_head_kv][keys_cap] zeros: one layer's statistics before they are
                                added to the entries' running sums; NULL when the cache keeps none */
};

/* Empty buffers (fwd_reserve, fwd_reserve_keys allocate) for passes fed
 * n_batch rows at a time; acc: acc_tmp is kept. */
void fwd_init(struct fwd_scratch *f, int n_batch, int n_threads, bool acc);
/* Grows the row buffers to `rows` rows. */
enum kvf_status fwd_reserve(struct fwd_scratch *f, const struct kvf_model *m, int rows);
/* Grows attn_scratch and acc_tmp to n_kv keys: as a session's positions
 * grow, or past its context (KVzip's reconstruction). */
enum kvf_status fwd_reserve_keys(struct fwd_scratch *f, const struct kvf_model *m, int n_kv);
void fwd_release_rows(struct fwd_scratch *f);
void fwd_free(struct fwd_scratch *f);

/* What one pass reads and writes (borrowed from a session). */
struct decoder {
    const struct kvf_model *model;
    struct fwd_scratch *fw;
    struct kv_cache *kv;          /* each layer's keys and values are appended */
    struct kv_qwin *qwin;         /* each layer's queries pushed when kv_qwin_on */
    float *recon;                 /* [n_layer][n_head_kv][recon_stride]: the most attention each entry
                                     gets from a query of the pass (ATTN_STAT_MAX) folded in (NULL: none) */
    size_t recon_stride;
    struct reduce_state *rd;      /* steps run after their layers (n_steps 0: none) */
    struct kv_merge_log *merges;  /* rows a reduce step merged are recorded here */
    bool gather;                  /* add the pass's attention to the entries' statistics (kv->has_acc) and
                                     its queries to the rules' (kv_stat_ops.queries) */
    const struct kv_stats *stats; /* the rules' own statistics, shown each layer's rows (NULL: none) */
    struct decoder_tap *tap;      /* KVzap's calibration; NULL: none */
    float nsm_n;                  /* > 0: n-softmax weights in attention (CSP once compressed) */
};

/* What KVzap's calibration (session/kvzap_fit.c) reads of a pass: each
 * layer's attention input of the rows at the positions it keeps, copied to
 * x [n_layer][x_rows][n_embd] at row x_slot[position] (positions below
 * x_cap; -1: not kept; x NULL: nothing copied); and with gram set (and the
 * decoder's recon), the MAX statistic weighted as KVzip+ weighs it (attn.h
 * max_qscale, max_escale), |W_o^h v_j| from the Gram matrices gram
 * [n_layer][n_head][head_dim][head_dim] of W_o's columns for head h, over
 * the queries at positions run_end - q_span .. run_end - 1 only (the
 * repeated text, not the instruction before it; run_end: set by the pass
 * for each run). The work space is for statistics of up to `entries`
 * entries a head and `rows` rows a call: qscale [rows], escale
 * [n_head][entries], vrows and vg [entries][head_dim]. */
struct decoder_tap {
    float *x;
    const int *x_slot;
    int x_cap, x_rows;
    const float *gram;
    int32_t run_end;
    int q_span;
    int entries, rows;
    float *qscale, *escale, *vrows, *vg;
};

/* Fills rows [at, at + n) of the pass: token ids (tokens, already checked)
 * or input embeddings (embd [n][n_embd]) with their DeepStack features (ds
 * [n][n_deepstack][n_embd]; NULL: none), with tags[0..n) (NULL: text) and
 * positions pos0 + t. */
void decoder_input(struct fwd_scratch *f, const struct kvf_model *m, int at, const int32_t *tokens, const float *embd,
                   const float *ds, const struct kvf_tag *tags, int32_t pos0, int n);
/* Runs the pass's n rows (n <= rows_cap) through the model, appends their
 * keys/values to the cache (fewer of them in the layers after a reduce
 * step) and writes logits: every row into all_logits ([n][n_vocab]) when
 * given, the last row into logits ([n_vocab]). */
enum kvf_status decoder_forward(const struct decoder *d, int n, float *all_logits, float *logits);
/* One row for each of n decoders (sessions of one model), each already in
 * row 0 of its own scratch (decoder_input): the weight products run once
 * over the n rows in the batch scratch b (rows_cap, n_batch >= n), each
 * row attends to its own session's cache; logits [n][n_vocab]. Decode
 * rows are text, which no reduce step touches, so none runs. */
enum kvf_status decoder_forward_rows(const struct decoder *ds, int n, struct fwd_scratch *b, float *logits);

#endif
