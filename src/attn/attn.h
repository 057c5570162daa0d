/* Attention computed row-block by row-block: a block of queries against all
 * cached keys of a head, with scratch of block x n_kv floats — never the
 * N x N matrix. (The compression work extends this kernel with statistics.) */
#ifndef KVF_ATTN_H
#define KVF_ATTN_H

#include "kv/cache.h"

#define ATTN_BLOCK 32 /* queries per row block */

struct attn_params {
    int n_head, n_head_kv, head_dim;
    float scale;   /* multiplies q.k */
    int window;    /* sliding window in positions (query sees pos > qpos - window); 0 = none */
    bool bidirectional; /* every query sees every key (vision encoders); qpos unused */
    const int32_t *qlast; /* [n_q] optional: query i sees keys up to position qlast[i] >= qpos[i] (the
                             end of its image when an image's tokens attend to each other, Gemma 3);
                             the window still counts from qpos[i] */
    float nsm_n;   /* > 0: the output weights are the n-softmax exp(x_j) / (n + sum_k exp(x_k))
                      (CSP eq. 7, after pruning); 0: softmax */
};

/* Statistics gathered while a block's softmax rows are in hand (docs/METHODS.md
 * §2), so that no method needs the N x N matrix. Every array is
 * [n_head_kv][stride] floats indexed by cache entry and is added to; NULL
 * arrays are not computed. GQA: a kv head's value is the mean over the query
 * heads that share it. */
enum { ATTN_STAT_SUM, ATTN_STAT_SQ, ATTN_STAT_COUNT, ATTN_STAT_TEXT, ATTN_STAT_IMAGE, ATTN_STAT_VIDEO,
       ATTN_STAT_WIN, ATTN_STAT_WIN_NSM, ATTN_STAT_WIN_NSM_SELF, ATTN_STAT_WIN_NSM_CROSS, ATTN_STAT_MAX, ATTN_STAT_N };
struct attn_stats {
    int stride;                  /* >= the entry count of every head                      */
    float *a[ATTN_STAT_N];       /* SUM:   sum_i A[i,j] over every query (H2O, LOOK-M...)
                                    SQ:    sum_i A[i,j]^2; COUNT: queries that saw j (RoCo)
                                    TEXT / IMAGE / VIDEO: SUM split by the query's modality
                                    WIN:   SUM over the window queries only (SnapKV, CSP)
                                    WIN_NSM: WIN with n-softmax exp(x_j) / (n + sum_k exp(x_k))
                                    WIN_NSM_SELF / CROSS: WIN_NSM split by whether entry j has
                                    the query's modality (CSP; both or neither)
                                    MAX:   max_i of A[i,j] over every query and every query head
                                           of the kv head (KVzip; not a mean, and folded into the
                                           caller's array by max, not added) */
    /* MAX weighted (KVzip+, arXiv:2601.07891): query i's weight of entry j in
     * query head h times max_qscale[i] (1 / |x_i|, the query's attention
     * input) and max_escale[h][j] (|W_o^h v_j|, what the entry's value adds
     * to the output); both or neither */
    const float *max_qscale;     /* [n_q]                                                  */
    const float *max_escale;     /* [n_head][stride]                                       */
    const struct kvf_tag *qtag;  /* [n_q] query tags: needed for TEXT / IMAGE / VIDEO, SELF / CROSS */
    int win_first;               /* queries i >= win_first of the call form the window    */
    float nsm_n;                 /* n of the n-softmax                                    */
};

/* Bytes of scratch attn_forward needs for n_kv keys and n_threads threads. */
size_t attn_scratch_bytes(int n_kv, int n_threads);
/* q:   [n_q][n_head*head_dim] after RoPE; qpos: [n_q] true positions, ascending.
 * kv:  the layer's heads (kv_cache_head(cache, layer, 0 .. n_head_kv-1)).
 * out: [n_q][n_head*head_dim]. Query head h reads kv head h / (n_head/n_head_kv).
 * Causal: key j is visible to query i when tag[j].pos <= qpos[i] (qlast[i] when
 * given) and inside the window. */
/* Rows may be stored as any cache type (kv->type_k, kv->type_v). Small
 * blocks (decode) read them in place; larger ones use the keys packed for
 * the block products (and float32 copies of values not stored as F32),
 * allocated here
 * (O(threads x entries x head_dim)).
 * stats (optional): accumulated as described above; its per-thread partial
 * sums are allocated here too (O(threads x heads x entries)).
 * KVF_ERR_NOMEM when an allocation fails, with or without stats. The
 * outputs are the same bits on any number of threads, and so are the
 * statistics of a call of fewer than 4 queries (decoding). */
enum kvf_status attn_forward(const struct attn_params *p, const float *q, const int32_t *qpos, int n_q,
                             const struct kv_head *kv, float *out, float *scratch, int n_threads,
                             const struct attn_stats *stats);

#endif
