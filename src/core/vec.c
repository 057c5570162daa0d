/* Kernels on plain float vectors (core/vec.h): the scalar references, the
 * packing of attention's key tiles, and the calls into the level in use
 * (the SIMD forms are in vec_avx2.c and vec_avx512.c). */
#include "vec.h"

#include "quant_impl.h"

#include <math.h>

static inline const struct quant_kernels *k(void) { return quant_kernels_active(); }

void tile_scores_ref(int64_t d, const float *q, size_t ldq, int nq, const float *panels, int n, float scale,
                     float *out, size_t ldo) {
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < n; j++) {
            const float *pj = panels + (size_t)(j / TILE_PANEL) * TILE_PANEL * d + j % TILE_PANEL;
            float acc = 0;
            for (int64_t c = 0; c < d; c++)
                acc = fmaf(q[i * ldq + c], pj[c * TILE_PANEL], acc);
            out[i * ldo + j] = acc * scale;
        }
}

/* Key by key, so that the value rows are read in order; each y[c] is still
 * one chain in j. */
void tile_mix_ref(int64_t d, const float *w, size_t ldw, int nq, const float *v, int n, float *y, size_t ldy) {
    for (int i = 0; i < nq; i++) {
        float *yi = y + i * ldy;
        for (int64_t c = 0; c < d; c++)
            yi[c] = 0;
        for (int j = 0; j < n; j++)
            for (int64_t c = 0; c < d; c++)
                yi[c] = fmaf(w[i * ldw + j], v[(size_t)j * d + c], yi[c]);
    }
}

static void sigmoid_mul_ref(float *g, const float *u, int64_t n, float a, float b) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i], z = b != 0 ? x * (a + b * x * x) : a * x;
        g[i] = x / (1.0f + expf(-z)) * (u ? u[i] : 1.0f);
    }
}

static float max_f32_ref(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static void scale_f32_ref(float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] *= a;
}

static double exp_sum_ref(float *x, int64_t n, float m) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = x[i] == -INFINITY ? 0.0f : expf(x[i] - m);
        sum += x[i];
    }
    return sum;
}

void vec_kernels_scalar(struct quant_kernels *t) {
    t->sigmoid_mul = sigmoid_mul_ref;
    t->exp_sum = exp_sum_ref;
    t->scores_f32 = tile_scores_ref;
    t->mix_f32 = tile_mix_ref;
    t->max_f32 = max_f32_ref;
    t->scale_f32 = scale_f32_ref;
}

void tile_pack(int64_t d, const float *k, int j0, int j1, float *panels) {
    for (int j = j0; j < j1; j++) {
        float *pj = panels + (size_t)(j / TILE_PANEL) * TILE_PANEL * d + j % TILE_PANEL;
        for (int64_t c = 0; c < d; c++)
            pj[c * TILE_PANEL] = k[(size_t)(j - j0) * d + c];
    }
    for (int j = j1; j % TILE_PANEL != 0; j++) {
        float *pj = panels + (size_t)(j / TILE_PANEL) * TILE_PANEL * d + j % TILE_PANEL;
        for (int64_t c = 0; c < d; c++)
            pj[c * TILE_PANEL] = 0;
    }
}

void tile_scores(int64_t d, const float *q, size_t ldq, int nq, const float *panels, int n, float scale,
                 float *out, size_t ldo) {
    k()->scores_f32(d, q, ldq, nq, panels, n, scale, out, ldo);
}

void tile_mix(int64_t d, const float *w, size_t ldw, int nq, const float *v, int n, float *y, size_t ldy) {
    k()->mix_f32(d, w, ldw, nq, v, n, y, ldy);
}

void vec_sigmoid_mul(float *g, const float *u, int64_t n, float a, float b) {
    k()->sigmoid_mul(g, u, n, a, b);
}

double vec_exp_sum(float *x, int64_t n, float m) { return k()->exp_sum(x, n, m); }
float vec_max(const float *x, int64_t n) { return k()->max_f32(x, n); }
void vec_scale(float *x, float a, int64_t n) { k()->scale_f32(x, a, n); }
