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
};

/* Bytes of scratch attn_forward needs for n_kv keys and n_threads threads. */
size_t attn_scratch_bytes(int n_kv, int n_threads);
/* q:   [n_q][n_head*head_dim] after RoPE; qpos: [n_q] true positions.
 * kv:  the layer's heads (kv_cache_head(cache, layer, 0 .. n_head_kv-1)).
 * out: [n_q][n_head*head_dim]. Query head h reads kv head h / (n_head/n_head_kv).
 * Causal: key j is visible to query i when tag[j].pos <= qpos[i] (and inside the window). */
void attn_forward(const struct attn_params *p, const float *q, const int32_t *qpos, int n_q,
                  const struct kv_head *kv, float *out, float *scratch, int n_threads);

#endif
