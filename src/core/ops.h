/* Dense building blocks of the forward pass: matrix products against stored
 * (possibly quantised) weights, normalisation, RoPE, activations. */
#ifndef KVF_OPS_H
#define KVF_OPS_H

#include "core/common.h"
#include "core/quant.h"

/* A 2-D weight: `rows` rows of `cols` values, row-major, stored as `type`
 * (rows = output features, cols = input features). 1-D weights have rows=1.
 * ilv: interleaved by 16 rows (quant_ilv_pack; same bytes, and a slice of
 * whole tiles is still data + first_row * row_bytes). */
struct weight {
    enum dtype type;
    int64_t rows, cols;
    size_t row_bytes;
    const void *data;
    bool ilv;
    /* The decoding kernel, where not interleaved: 0 the rows kernel of the
     * SIMD level in use, else 1 + the level whose rows kernel measured
     * fastest for this type on this CPU (model/kernels.c). no_prefetch:
     * its decoding kernel leaves the reads ahead to the hardware
     * (quant_prefetch_set), measured faster so. */
    uint8_t rows_level;
    bool no_prefetch;
};

/* Bytes of scratch ops_matmul needs for n_tok rows of `cols` inputs. */
size_t ops_matmul_scratch_bytes(int64_t cols, int n_tok, int n_threads);
/* y[t][r] = sum_c W[r][c] x[t][c]   x: [n_tok][W.cols], y: [n_tok][W.rows].
 * Few rows: activations are quantised to the weight's vec-dot type and each
 * weight row is streamed once for all rows of x (the decode path). Many rows
 * (the prefill path): the K types' packed integer products where the CPU has
 * them (quant_gemm_tiles), else weight tiles dequantised and multiplied with BLAS. */
void ops_matmul(const struct weight *w, const float *x, int n_tok, float *y, void *scratch,
                int n_threads);
/* One row of the (possibly quantised) matrix, as floats (embedding lookup). */
void ops_get_row(const struct weight *w, int64_t row, float *out);

/* out = x / rms(x) * w   over n values; out may alias x. */
void ops_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* RoPE scaling as a model's files give it (llama.cpp's rope.scaling.* and
 * rope_freqs.weight, transformers' rope_parameters). */
enum rope_scaling_type { ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_LLAMA3, ROPE_SCALING_YARN };
struct rope_scaling {
    enum rope_scaling_type type;
    float factor;                            /* how many times the context is stretched (LINEAR, LLAMA3, YARN) */
    int orig_ctx;                            /* LLAMA3, YARN: the context the model was trained with */
    float low_freq_factor, high_freq_factor; /* LLAMA3 */
    float beta_fast, beta_slow;              /* YARN: the ramp's ends in rotations (transformers: 32, 1) */
    float attn_factor;                       /* YARN: cos and sin are scaled by it; 0: 0.1 ln(factor) + 1 */
    bool no_truncate;                        /* YARN: the ramp's ends not rounded to whole pairs */
};
#define ROPE_MAX_PAIRS 512 /* head_dim <= 1024 */
/* inv_freq[i] for the head_dim / 2 rotary pairs: base^(-2i/head_dim),
 * scaled as sc says (NULL: none) and divided by freq_factors[i] when given
 * (llama.cpp's rope_freqs.weight). Returns the factor cos and sin are
 * multiplied by (1 but for YaRN). As transformers computes them, in double. */
float ops_rope_freqs(double *inv_freq, int head_dim, float base, const struct rope_scaling *sc,
                     const float *freq_factors);
/* Rotates the query heads q[n_q_heads][head_dim] and key heads
 * k[n_k_heads][head_dim] (k may be NULL) of one token at position pos, with
 * the angles computed once for both. Style NORM rotates pairs (2i, 2i+1),
 * NEOX pairs (i, i + head_dim/2); theta_i = pos * inv_freq[i] (ops_rope_freqs),
 * cos and sin scaled by mscale. */
void ops_rope(float *q, int n_q_heads, float *k, int n_k_heads, int head_dim, int pos, const double *inv_freq,
              float mscale, enum kvf_rope_style style);
/* Rotates the heads x[n_head][head_dim] by the angles of each rotary pair
 * i < head_dim / 2 (cs, sn: their cosines and sines): pairs (i, i + half)
 * for NEOX, (2i, 2i + 1) for NORM. */
void ops_rope_rotate(float *x, int n_head, int head_dim, const float *cs, const float *sn, enum kvf_rope_style style);
/* ops_rope with a position per rotary pair: pair i turns by pos[axis[i]]
 * (M-RoPE's time, height and width: ops_rope_axes_fill). */
void ops_rope_axes(float *q, int n_q_heads, float *k, int n_k_heads, int head_dim, const int32_t pos[3],
                   const uint8_t *axis, const double *inv_freq, float mscale, enum kvf_rope_style style);
/* axis[0 .. pairs) of M-RoPE with sections[3] pairs on time, height and
 * width: in blocks (Qwen2-VL, Qwen2.5-VL: the first sections[0] pairs on
 * time, the next sections[1] on height, the rest on width) or interleaved
 * (Qwen3-VL: pair i on height when i % 3 == 1 and i < 3 sections[1], on
 * width when i % 3 == 2 and i < 3 sections[2], else on time). */
void ops_rope_axes_fill(uint8_t *axis, int pairs, const int sections[3], bool interleaved);
/* out = (x - mean) / sqrt(var + eps) * w + b   over n values; out may alias x. */
void ops_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps);
/* y[t][i] += b[i] for t < n rows of dim values (b: a vector weight; no-op when absent). */
void ops_add_bias(float *y, const struct weight *b, int n, int dim);
void ops_add(float *x, const float *y, size_t n);             /* x += y               */
void ops_gelu_erf(float *x, int64_t n);                       /* exact (erf) GELU     */
void ops_gelu_quick(float *x, int64_t n);                     /* x * sigmoid(1.702 x) */
void ops_silu_mul(float *g, const float *u, int64_t n);      /* g = silu(g) * u      */
void ops_gelu_tanh_mul(float *g, const float *u, int64_t n); /* g = gelu_tanh(g) * u (u NULL: * 1) */
/* In-place softmax of n values; -INFINITY entries get 0. Returns max. */
float ops_softmax(float *x, int n);
/* The same, also giving sum_j exp(x_j - max) (0 when every entry is -INFINITY). */
float ops_softmax_sum(float *x, int n, double *sum);

#endif
