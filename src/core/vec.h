/* Kernels on plain float vectors, each with scalar, AVX2 and AVX-512 forms
 * chosen at run time as the quantised ones are (core/quant.h): the two
 * products of prompt attention on tiles of keys, the activations, and the
 * pieces of a softmax. */
#ifndef KVF_CORE_VEC_H
#define KVF_CORE_VEC_H

#include <stddef.h>
#include <stdint.h>

/* Prompt attention's two products on f32 rows (attn/attention.c), a block
 * of queries against a run of keys. BLAS packs both operands on every call,
 * which for a block of 32 queries is as much copying as multiplying; here
 * the keys are packed once per head and the values are read in place.
 * Keys are kept in panels of TILE_PANEL rows stored value-major,
 * panel p = [d][TILE_PANEL] at p * TILE_PANEL * d: one vector holds one
 * value of 16 keys, against a broadcast query value.
 * tile_pack: rows j0 .. j1 - 1, at k (row j at k + (j - j0) d),
 * into their panels; the last panel's columns past j1 are zeroed (rows
 * before j0 kept).
 * tile_scores: out[i * ldo + j] = scale * sum_c q[i * ldq + c] k_j[c]
 * for i < nq and j < n, keys from the panel at `panels` on.
 * tile_mix: y[i * ldy + c] = sum_j w[i * ldw + j] v[j * d + c] for
 * i < nq, c < d, j < n (y overwritten).
 * A score is one fmaf chain in c from 0, then times the scale; an output
 * value one fmaf chain in j from 0, in key order. So every level gives the
 * same bits. (The scalar level calls fmaf: on a CPU without FMA, libm's.) */
#define TILE_PANEL 16
void tile_pack(int64_t d, const float *k, int j0, int j1, float *panels);
void tile_scores(int64_t d, const float *q, size_t ldq, int nq, const float *panels, int n, float scale,
                 float *out, size_t ldo);
void tile_mix(int64_t d, const float *w, size_t ldw, int nq, const float *v, int n, float *y, size_t ldy);
void tile_scores_ref(int64_t d, const float *q, size_t ldq, int nq, const float *panels, int n, float scale,
                     float *out, size_t ldo);
void tile_mix_ref(int64_t d, const float *w, size_t ldw, int nq, const float *v, int n, float *y, size_t ldy);
/* g[i] = g[i] * sigmoid(z) * u[i] with z = a g[i] + b g[i]^3 (b = 0: a g[i]);
 * u NULL: no factor. SiLU is (1, 0), quick GELU (1.702, 0), the tanh GELU
 * (2 sqrt(2/pi), 2 sqrt(2/pi) 0.044715), as 0.5 (1 + tanh(y)) = sigmoid(2y).
 * The SIMD levels compute exp with a polynomial within 2 ulp of expf. */
void vec_sigmoid_mul(float *g, const float *u, int64_t n, float a, float b);
/* x[i] = exp(x[i] - m) (-inf and anything under expf's range -> 0); returns
 * their sum, added in double. */
double vec_exp_sum(float *x, int64_t n, float m);
/* The largest of x[0..n), NaN ignored (-inf when there is none); and
 * x[i] *= a. Exact, so every level gives the same bits. */
float vec_max(const float *x, int64_t n);
void vec_scale(float *x, float a, int64_t n);

#endif
