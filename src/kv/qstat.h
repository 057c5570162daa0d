/* Query statistics: for every layer and query head, the count, sum and sum
 * of outer products of the queries before RoPE that the session has run
 * (every position from `first` on, since the last reset), from which
 * Expected Attention (src/kv/policy/expected.c) takes their mean and
 * covariance. O(n_layer x n_head x head_dim^2) doubles, whatever the
 * context length: 44 MB for a 1.5B Qwen2 (28 layers, 12 heads of 128). */
#ifndef KVF_KV_QSTAT_H
#define KVF_KV_QSTAT_H

#include "core/common.h"
#include "kv/stat.h"

struct kv_qstat {
    double *sum;  /* [n_layer][n_head][d] */
    double *sq;   /* [n_layer][n_head][d][d] sum of q q^T: its upper triangle (row <= column) */
    long *n;      /* [n_layer] queries counted (each counts in every head) */
    int n_layer, n_head, d;
    int first;    /* positions below this are not counted (attention sinks: outliers) */
};

/* n_layer 0: off (nothing allocated, nothing counted). */
enum kvf_status kv_qstat_init(struct kv_qstat *s, int n_layer, int n_head, int d, int first);
void kv_qstat_free(struct kv_qstat *s);
void kv_qstat_clear(struct kv_qstat *s);
static inline bool kv_qstat_on(const struct kv_qstat *s) { return s->n_layer > 0; }
/* Counts the rows of q [n][n_head*d] (before RoPE) at positions pos [n]
 * that are >= first into layer l. */
enum kvf_status kv_qstat_push(struct kv_qstat *s, int l, const float *q, const int32_t *pos, int n);
/* dst (same shape, from kv_qstat_init) gets src's statistics. */
void kv_qstat_copy(struct kv_qstat *dst, const struct kv_qstat *src);
/* Layer l, head h: the mean [d] and covariance [d][d] (population: over n,
 * full matrix) of the queries counted, computed in double; false (nothing
 * written) when none. */
bool kv_qstat_moments(const struct kv_qstat *s, int l, int h, float *mean, float *cov);

/* Expected Attention's statistic, gathered too for every policy (kv/stat.h). */
extern const struct kv_stat_ops kv_stat_qstat;

#endif
