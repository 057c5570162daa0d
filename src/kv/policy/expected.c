/* Expected Attention (Devoto et al., 2025; kvpress's ExpectedAttentionPress):
 * the attention an entry can expect from the queries still to come, which
 * need not be the question at the end of the prompt. Queries before RoPE
 * are modelled as Gaussian, from the mean mu and covariance S of those the
 * session has run (kv/qstat.h: every position past the sinks); the next
 * `future` positions' rotations are averaged into one matrix R, so a future
 * query is ~ N(R mu, R S R^T). For q ~ N(m, C), E[exp(s q.k)] =
 * exp(s m.k + s^2/2 k^T C k), s being the model's attention scale
 * (1/sqrt(head_dim) in kvpress). Per query head those logits are softmaxed
 * over the entries past the sinks, averaged over the heads sharing the kv
 * head, and weighted by the value's norm (what an entry adds to the
 * output); the first `sinks` entries are always kept. */
#include "kv/policy.h"

#include "core/ops.h"
#include "kv/qstat.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

static void kv_score_expected(const struct kv_score_in *in, float *score) {
    const int n = in->h->n, d = in->head_dim, half = d / 2, sinks = KVF_MIN(in->p->sinks, n);
    const enum kvf_rope_style style = (enum kvf_rope_style)in->rope_style;
    /* Work space: keys K [n][d], K R S R^T [n][d], two d x d matrices. */
    float *K = in->rows, *KC = K + (size_t)n * d, *A = KC + (size_t)n * d, *B = A + (size_t)d * d;
    float *acc = in->scratch, cs[512], sn[512], mu[1024], row[1024]; /* head_dim <= 1024 is checked at load */
    for (int i = 0; i < half; i++) {
        double c = 0.0, s = 0.0;
        for (int t = 0; t < in->p->future; t++) {
            const double th = (double)(in->next_pos + t) * in->rope_freq[i];
            c += cos(th), s += sin(th);
        }
        cs[i] = (float)(c / in->p->future * in->rope_mscale);
        sn[i] = (float)(s / in->p->future * in->rope_mscale);
    }
    for (int j = 0; j < n; j++) kv_head_key_row(in->h, d, j, K + (size_t)j * d);
    memset(acc, 0, sizeof(float) * (size_t)n);
    const double s1 = in->attn_scale, s2 = 0.5 * in->attn_scale * in->attn_scale;
    for (int r = 0; r < in->group; r++) {
        if (!kv_qstat_moments(in->stat, in->layer, in->q_head + r, mu, A)) continue;
        /* R mu; R S R^T: each row of S rotated (S R^T), transposed, rotated again. */
        ops_rope_rotate(mu, 1, d, cs, sn, style);
        ops_rope_rotate(A, d, d, cs, sn, style);
        for (int a = 0; a < d; a++)
            for (int b = 0; b < d; b++) B[(size_t)b * d + a] = A[(size_t)a * d + b];
        ops_rope_rotate(B, d, d, cs, sn, style);
        if (n > sinks)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n - sinks, d, d, 1.0f, K + (size_t)sinks * d, d,
                        B, d, 0.0f, KC + (size_t)sinks * d, d);
        double mx = -INFINITY, sum = 0.0;
        for (int j = sinks; j < n; j++) {
            const float *k = K + (size_t)j * d, *kc = KC + (size_t)j * d;
            double m = 0.0, quad = 0.0;
            for (int e = 0; e < d; e++) m += (double)mu[e] * k[e], quad += (double)kc[e] * k[e];
            score[j] = (float)(s1 * m + s2 * quad);
            mx = fmax(mx, score[j]);
        }
        for (int j = sinks; j < n; j++) sum += exp((double)score[j] - mx);
        for (int j = sinks; j < n; j++) acc[j] += (float)(exp((double)score[j] - mx) / sum / in->group);
    }
    for (int j = 0; j < n; j++) {
        if (j < sinks) {
            score[j] = INFINITY;
            continue;
        }
        kv_head_value_row(in->h, d, j, row);
        double vn = 0.0;
        for (int e = 0; e < d; e++) vn += (double)row[e] * row[e];
        score[j] = (float)(acc[j] * sqrt(vn));
    }
}

/* The score's work space: K, K R S R^T and two d x d matrices. */
static size_t expected_rows(int n, int d) { return (2 * (size_t)n + 2 * (size_t)d) * (size_t)d; }

const struct kv_rule kv_rule_expected = {
    .stage = "preset",
    .name = "expected",
    .summary = "attention expected from the next `future` queries (Gaussian queries, averaged RoPE), times the value "
               "norm",
    .paper = "Expected Attention: KV Cache Compression by Estimating Attention from Future Queries Distribution "
             "(Devoto et al., 2025, arXiv:2510.00636); kvpress's ExpectedAttentionPress",
    .keys = "budget sinks future",
    .shown = "budget=0.2,sinks=4,future=512",
    .defaults = {.method = KV_EXPECTED, .budget = 0.2, .future = 512, KV_STAGE_DEFAULTS},
    .stat = &kv_stat_qstat,
    .rows = expected_rows,
    .score = kv_score_expected,
};
