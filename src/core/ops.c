#include "core/ops.h"
#include "core/vec.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* Below this many rows of x a matrix product is a stream of dot products
 * over the quantised weights; above it, packed tiles go through the integer
 * kernels (quant_gemm_tiles) where the CPU has them for the type, else
 * dequantised tiles through BLAS. */
#define MATMUL_BLAS_MIN_ROWS 32
/* The least a thread's chunk of a decoding product reads. In chunks of 32
 * rows (11 KiB), SmolLM2's 576-row products took as long on two threads of
 * AMD Zen 4 as on one; in halves the model decodes 1.3x faster there. */
#define MATMUL_CHUNK_BYTES (128u << 10)
/* Weight rows dequantised per BLAS call. */
#define MATMUL_TILE_ROWS 256

size_t ops_matmul_scratch_bytes(int64_t cols, int n_tok, int n_threads) {
    /* The dot path's batch form is at most 4 bytes a value (F32 is the
     * widest activation type; interleaved weights' rows take n + 12 n / 32
     * rounded to 64, or Q8_K's 292 bytes per 256 values, which is less from
     * 32 values up); the BLAS path's threads each dequantise a tile of
     * weight rows; the integer path (from as many rows as BLAS)
     * holds the quantised rows and a packed tile a thread (Q6_K's forms are
     * the larger). */
    const int rows = n_tok >= MATMUL_BLAS_MIN_ROWS ? KVF_MAX(n_tok, MATMUL_TILE_ROWS * n_threads) : n_tok;
    const size_t int_bytes = n_tok < MATMUL_BLAS_MIN_ROWS ? 0
                             : (size_t)n_tok * quant_gemm_act_bytes(DT_Q6_K, cols) +
                                   (size_t)n_threads * quant_gemm_tile_bytes(DT_Q6_K, cols);
    return KVF_MAX((size_t)KVF_MAX(rows, 1) * (size_t)cols * sizeof(float), int_bytes);
}

static void matmul_dot(const struct weight *w, const float *x, int n_tok, float *y, void *scratch,
                       int n_threads) {
    uint8_t *xb = scratch;
    if (w->ilv)
        quant_ilv_act(w->type, x, w->cols, n_tok, xb);
    else
        quant_quantize_batch(w->type, x, w->cols, n_tok, xb);
    const int64_t rows = w->rows;
    /* Chunks taken as threads come free (each row is computed whole by one
     * thread, so the results do not depend on who takes what): a thread that
     * loses its core to another process delays the product by one chunk,
     * not by its whole share. Up to 8 a thread, but none under
     * MATMUL_CHUNK_BYTES unless that leaves a thread without one: each chunk
     * is a new stream for the prefetchers to find. Whole 16-row tiles, as
     * interleaved weights need, shared out evenly (chunk c takes tiles
     * [c T / n, (c + 1) T / n)), and never more chunks than tiles. */
    const int64_t n_want = KVF_MIN(8 * (int64_t)n_threads, (int64_t)(rows * w->row_bytes / MATMUL_CHUNK_BYTES));
    const int64_t tiles = (rows + 15) / 16, n_chunks = KVF_MIN(tiles, KVF_MAX((int64_t)n_threads, n_want));
    #pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1)
    for (int64_t c = 0; c < n_chunks; c++) {
        const int64_t r0 = c * tiles / n_chunks * 16, nr = KVF_MIN((c + 1) * tiles / n_chunks * 16, rows) - r0;
        const uint8_t *wr = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
        quant_prefetch_set(!w->no_prefetch);
        if (w->ilv)
            quant_gemm_ilv(w->type, w->cols, wr, (int)(nr / QUANT_ILV_ROWS), xb, n_tok, y + r0, (size_t)rows);
        else
            quant_gemm_rows_at(w->rows_level ? (enum simd_level)(w->rows_level - 1) : simd_get(), w->type, w->cols,
                               wr, w->row_bytes, (int)nr, xb, n_tok, y + r0, (size_t)rows);
        quant_prefetch_set(true); /* the thread's other work as before */
    }
}

/* Our threads split the weight rows into tiles and each calls a one-thread
 * sgemm: mixing OpenMP workers with BLAS's own thread pool made two threads
 * slower than one (idle OpenMP workers spin on the cores BLAS needs). */
static void matmul_blas(const struct weight *w, const float *x, int n_tok, float *y, void *scratch,
                        int n_threads) {
    openblas_set_num_threads(1);
    /* Smaller tiles for a matrix of fewer rows than a tile a thread (a key
     * or value projection), so that every thread has one. */
    const int64_t per_thread = (w->rows + n_threads - 1) / n_threads;
    const int64_t tile_rows = KVF_MIN(MATMUL_TILE_ROWS, (per_thread + 15) / 16 * 16);
    const int64_t n_tiles = (w->rows + tile_rows - 1) / tile_rows;
    #pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1)
    for (int64_t t = 0; t < n_tiles; t++) {
        const int64_t r0 = t * tile_rows, nr = KVF_MIN(tile_rows, w->rows - r0);
        const float *tile = (const float *)((const uint8_t *)w->data + (size_t)r0 * w->row_bytes);
        if (w->type != DT_F32) {
            float *buf = (float *)scratch + (size_t)omp_get_thread_num() * MATMUL_TILE_ROWS * w->cols;
            if (w->ilv)
                quant_ilv_dequant(w->type, w->cols, w->data, r0, (int)nr, buf);
            else
                for (int64_t r = 0; r < nr; r++)
                    quant_dequant_row(w->type, (const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes,
                                      buf + r * w->cols, w->cols);
            tile = buf;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_tok, (int)nr, (int)w->cols, 1.0f, x,
                    (int)w->cols, tile, (int)w->cols, 0.0f, y + r0, (int)w->rows);
    }
}

/* Each thread packs a tile of 16 weight rows at a time (quant_gemm_tiles) and
 * multiplies it with every row of x, quantised once for all tiles. */
static void matmul_int(const struct weight *w, const float *x, int n_tok, float *y, void *scratch,
                       int n_threads) {
    const size_t ab = quant_gemm_act_bytes(w->type, w->cols), tb = quant_gemm_tile_bytes(w->type, w->cols);
    uint8_t *act = scratch, *tiles = act + (size_t)n_tok * ab;
    const int64_t n_tiles = (w->rows + QUANT_TILE_ROWS - 1) / QUANT_TILE_ROWS;
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int r = 0; r < n_tok; r++)
            quant_gemm_act(w->type, x + (size_t)r * w->cols, w->cols, 1, act + (size_t)r * ab);
        uint8_t *tile = tiles + (size_t)omp_get_thread_num() * tb;
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_tiles; t++) {
            const int64_t r0 = t * QUANT_TILE_ROWS;
            const int nw = (int)KVF_MIN(QUANT_TILE_ROWS, w->rows - r0);
            const uint8_t *wr = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
            if (w->ilv)
                quant_gemm_pack_ilv(w->type, w->cols, wr, tile);
            else
                quant_gemm_pack(w->type, w->cols, wr, w->row_bytes, nw, tile);
            quant_gemm_tiles(w->type, w->cols, tile, nw, act, n_tok, y + r0, (size_t)w->rows);
        }
    }
}

void ops_matmul(const struct weight *w, const float *x, int n_tok, float *y, void *scratch,
                int n_threads) {
    if (n_tok >= MATMUL_BLAS_MIN_ROWS && quant_gemm_has(w->type) && quant_gemm_tile_bytes(w->type, w->cols) != 0)
        matmul_int(w, x, n_tok, y, scratch, n_threads);
    else if (n_tok >= MATMUL_BLAS_MIN_ROWS)
        matmul_blas(w, x, n_tok, y, scratch, n_threads);
    else
        matmul_dot(w, x, n_tok, y, scratch, n_threads);
}

void ops_get_row(const struct weight *w, int64_t row, float *out) {
    if (w->ilv)
        quant_ilv_dequant(w->type, w->cols, w->data, row, 1, out);
    else
        quant_dequant_row(w->type, (const uint8_t *)w->data + (size_t)row * w->row_bytes, out, w->cols);
}

void ops_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    /* Eight partial sums: one chain of dependent double adds cost 4% of
     * Gemma 3's prefill (it has four norms a layer plus one per head). */
    double part[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) part[k] += (double)x[i + k] * x[i + k];
    double ss = 0.0;
    for (; i < n; i++) ss += (double)x[i] * x[i];
    for (int k = 0; k < 8; k++) ss += part[k];
    const float s = 1.0f / sqrtf((float)(ss / n) + eps);
    for (i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

void ops_rope_rotate(float *x, int n_head, int head_dim, const float *cs, const float *sn, enum kvf_rope_style style) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_head; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            const int a = style == KVF_ROPE_NEOX ? i : 2 * i;
            const int b = style == KVF_ROPE_NEOX ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * cs[i] - x1 * sn[i];
            v[b] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

/* transformers' _compute_llama3_parameters: long wavelengths (over
 * orig_ctx / low_freq_factor) divided by factor, short ones (under
 * orig_ctx / high_freq_factor) kept, those between interpolated. */
static double rope_llama3(double inv, const struct rope_scaling *sc) {
    const double pi = 3.14159265358979323846, wavelen = 2 * pi / inv;
    const double low_wavelen = sc->orig_ctx / sc->low_freq_factor, high_wavelen = sc->orig_ctx / sc->high_freq_factor;
    if (wavelen > low_wavelen) return inv / sc->factor;
    if (wavelen < high_wavelen) return inv;
    const double smooth = (sc->orig_ctx / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
    return (1 - smooth) * inv / sc->factor + smooth * inv;
}

/* YaRN's pair index where a frequency turns `rotations` times over the
 * original context (transformers' find_correction_dim). */
static double yarn_dim(double rotations, int head_dim, double base, int orig_ctx) {
    const double pi = 3.14159265358979323846;
    return head_dim * log(orig_ctx / (rotations * 2 * pi)) / (2 * log(base));
}

/* transformers' _compute_yarn_parameters: pairs that turn more than
 * beta_fast times over the original context keep their frequency, those
 * turning fewer than beta_slow times are divided by factor, a linear ramp
 * between. Returns the attention factor. */
static float rope_yarn(double *inv_freq, int head_dim, double base, const struct rope_scaling *sc) {
    double low = yarn_dim(sc->beta_fast, head_dim, base, sc->orig_ctx);
    double high = yarn_dim(sc->beta_slow, head_dim, base, sc->orig_ctx);
    if (!sc->no_truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = fmax(low, 0);
    high = fmin(high, head_dim - 1);
    if (low == high) high += 0.001;
    for (int i = 0; i < head_dim / 2; i++) {
        const double ramp = fmin(fmax((i - low) / (high - low), 0), 1), extrapolate = 1 - ramp;
        inv_freq[i] = inv_freq[i] / sc->factor * (1 - extrapolate) + inv_freq[i] * extrapolate;
    }
    if (sc->attn_factor > 0) return sc->attn_factor;
    return sc->factor <= 1 ? 1.0f : (float)(0.1 * log(sc->factor) + 1.0);
}

float ops_rope_freqs(double *inv_freq, int head_dim, float base, const struct rope_scaling *sc,
                     const float *freq_factors) {
    float mscale = 1.0f;
    for (int i = 0; i < head_dim / 2; i++) inv_freq[i] = pow(base, -2.0 * i / head_dim);
    if (sc && sc->type == ROPE_SCALING_YARN) mscale = rope_yarn(inv_freq, head_dim, base, sc);
    for (int i = 0; i < head_dim / 2; i++) {
        if (sc && sc->type == ROPE_SCALING_LINEAR) inv_freq[i] /= sc->factor;
        if (sc && sc->type == ROPE_SCALING_LLAMA3) inv_freq[i] = rope_llama3(inv_freq[i], sc);
        if (freq_factors) inv_freq[i] /= freq_factors[i];
    }
    return mscale;
}

void ops_rope_axes(float *q, int n_q_heads, float *k, int n_k_heads, int head_dim, const int32_t pos[3],
                   const uint8_t *axis, const double *inv_freq, float mscale, enum kvf_rope_style style) {
    const int half = head_dim / 2;
    float cs[ROPE_MAX_PAIRS], sn[ROPE_MAX_PAIRS]; /* head_dim <= 1024 is checked at load */
    for (int i = 0; i < half; i++) {
        const double theta = pos[axis ? axis[i] : 0] * inv_freq[i];
        cs[i] = (float)cos(theta) * mscale;
        sn[i] = (float)sin(theta) * mscale;
    }
    ops_rope_rotate(q, n_q_heads, head_dim, cs, sn, style);
    if (k) ops_rope_rotate(k, n_k_heads, head_dim, cs, sn, style);
}

void ops_rope(float *q, int n_q_heads, float *k, int n_k_heads, int head_dim, int pos, const double *inv_freq,
              float mscale, enum kvf_rope_style style) {
    const int32_t p[3] = {pos, pos, pos};
    ops_rope_axes(q, n_q_heads, k, n_k_heads, head_dim, p, NULL, inv_freq, mscale, style);
}

void ops_rope_axes_fill(uint8_t *axis, int pairs, const int sections[3], bool interleaved) {
    for (int i = 0; i < pairs; i++) {
        if (interleaved)
            axis[i] = i % 3 == 1 && i < 3 * sections[1] ? 1 : i % 3 == 2 && i < 3 * sections[2] ? 2 : 0;
        else
            axis[i] = i < sections[0] ? 0 : i < sections[0] + sections[1] ? 1 : 2;
    }
}

void ops_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    const float inv = (float)(1.0 / sqrt(var / n + eps)), mu = (float)mean;
    for (int i = 0; i < n; i++) out[i] = (x[i] - mu) * inv * w[i] + b[i];
}

void ops_add_bias(float *y, const struct weight *b, int n, int dim) {
    if (!b->data) return;
    const float *bv = b->data;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < dim; i++) y[(size_t)t * dim + i] += bv[i];
}

void ops_add(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

void ops_gelu_erf(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

void ops_gelu_quick(float *x, int64_t n) { vec_sigmoid_mul(x, NULL, n, 1.702f, 0.0f); }

void ops_silu_mul(float *g, const float *u, int64_t n) { vec_sigmoid_mul(g, u, n, 1.0f, 0.0f); }

void ops_gelu_tanh_mul(float *g, const float *u, int64_t n) {
    /* 0.5 x (1 + tanh(c (x + 0.044715 x^3))) = x sigmoid(2c (x + 0.044715 x^3)),
     * c = sqrt(2/pi): one exp, and no cancellation in 1 + tanh for x << 0. */
    const float c2 = 2 * 0.7978845608028654f;
    vec_sigmoid_mul(g, u, n, c2, c2 * 0.044715f);
}

float ops_softmax_sum(float *x, int n, double *sum_out) {
    const float mx = vec_max(x, n);
    *sum_out = 0.0;
    if (mx == -INFINITY) {
        memset(x, 0, sizeof(float) * n);
        return mx;
    }
    const double sum = vec_exp_sum(x, n, mx);
    vec_scale(x, (float)(1.0 / sum), n);
    *sum_out = sum;
    return mx;
}

float ops_softmax(float *x, int n) {
    double sum;
    return ops_softmax_sum(x, n, &sum);
}
