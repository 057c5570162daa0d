/* Dense ops against naive references: every matmul path (dot products,
 * BLAS, the K types' integer products, interleaved weights) for every
 * weight type, RMSNorm, both RoPE styles, activations, softmax. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "core/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Quantises a random [rows][cols] matrix to `type`; returns the weight and
 * its dequantised floats (the values the kernel really multiplies). */
static struct weight make_weight(enum dtype type, int rows, int cols, float **deq, unsigned *seed) {
    const size_t rb = dtype_row_bytes(type, cols);
    uint8_t *data = malloc(rb * rows);
    float *src = malloc(sizeof(float) * cols);
    *deq = malloc(sizeof(float) * rows * cols);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) src[c] = frand(seed);
        quant_quantize_row(type, src, data + r * rb, cols);
        quant_dequant_row_ref(type, data + r * rb, *deq + (size_t)r * cols, cols);
    }
    free(src);
    return (struct weight){.type = type, .rows = rows, .cols = cols, .row_bytes = rb, .data = data};
}

/* The weight interleaved by 16 rows (quant_ilv_pack), as models hold it
 * where the CPU has the kernel; ops_get_row still gives its rows. */
static void interleave(struct weight *w, const float *deq) {
    void *p = malloc((size_t)w->rows * w->row_bytes);
    quant_ilv_pack(w->type, w->cols, w->data, w->rows, p);
    free((void *)w->data);
    w->data = p;
    w->ilv = true;
    float *row = malloc(sizeof(float) * w->cols);
    for (int64_t r = 0; r < w->rows; r++) {
        ops_get_row(w, r, row);
        assert_memory_equal(row, deq + r * w->cols, sizeof(float) * w->cols);
    }
    free(row);
}

static void matmul_case(enum dtype type, int n_tok, bool ilv) {
    unsigned seed = 99u + type * 31u + n_tok;
    const int rows = ilv ? 48 : 40, cols = 512;
    float *deq;
    struct weight w = make_weight(type, rows, cols, &deq, &seed);
    if (ilv)
        interleave(&w, deq);
    float *x = malloc(sizeof(float) * n_tok * cols), *y = malloc(sizeof(float) * n_tok * rows);
    for (int i = 0; i < n_tok * cols; i++) x[i] = frand(&seed);
    void *scratch = malloc(ops_matmul_scratch_bytes(cols, n_tok, 2));
    ops_matmul(&w, x, n_tok, y, scratch, 2);
    /* The dot and integer paths quantise activations to 8 bits (|x| <= 1:
     * step <= 1/127 per value), so they are checked against the exact
     * product within that rounding; the BLAS path multiplies floats and
     * must be exact. */
    const bool q8 = (n_tok < 32 || quant_gemm_has(type)) && dtype_get(type)->vec_dot != DT_F32;
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int c = 0; c < cols; c++) {
                ref += (double)deq[(size_t)r * cols + c] * x[(size_t)t * cols + c];
                mag += fabs((double)deq[(size_t)r * cols + c]);
            }
            const double tol = q8 ? mag / 127.0 : 1e-4 * (1 + mag);
            if (fabs(y[(size_t)t * rows + r] - ref) > tol)
                fail_msg("%s n_tok=%d row %d: %g vs %g", dtype_get(type)->name, n_tok, r, y[(size_t)t * rows + r], ref);
        }
    free((void *)w.data); free(deq); free(x); free(y); free(scratch);
}

static void test_matmul_all_types(void **st) {
    (void)st;
    const enum dtype types[] = { DT_F32,  DT_F16,  DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1,
                                 DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        matmul_case(types[i], 1, false);
        matmul_case(types[i], 5, false);
        matmul_case(types[i], 40, false);
        if (quant_ilv_type(types[i]))
            for (int n_tok = 1; n_tok <= 40; n_tok += 13)
                matmul_case(types[i], n_tok, true);
    }
    /* Where the K types took the integer path above, their BLAS path too
     * (interleaved weights dequantised from their stored blocks). */
    if (quant_gemm_has(DT_Q4_K)) {
        simd_set(SIMD_AVX2);
        for (enum dtype t = DT_Q4_K; t <= DT_Q6_K; t++) {
            matmul_case(t, 40, false);
            matmul_case(t, 40, true);
        }
        simd_set(simd_detect());
    }
}

/* A decoding product is cut into chunks by bytes and thread count
 * (ops.c, MATMUL_CHUNK_BYTES): whatever the cut, every row is computed
 * once, whole, by one thread, so any thread count gives the same bits.
 * Q8_0 rows of 512 values are 544 bytes: 576 rows (306 KiB) are cut into 2
 * chunks on one or two threads, one a thread up to 16; 2000 rows (1.1 MB)
 * into 8 up to 8 threads; 573 rows leave a last tile short. Outputs start
 * as NaN, so a row no chunk computed is seen. */
static void test_matmul_threads(void **st) {
    (void)st;
    const int shapes[] = {576, 2000, 573}, threads[] = {1, 2, 3, 5, 9, 16};
    for (int ilv = 0; ilv <= 1; ilv++)
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
            for (int n_tok = 1; n_tok <= 3; n_tok += 2) {
                unsigned seed = 7u + (unsigned)n_tok;
                const int rows = shapes[k], cols = 512;
                if (ilv && (rows % 16 || !quant_ilv_has(DT_Q8_0))) continue;
                float *deq;
                struct weight w = make_weight(DT_Q8_0, rows, cols, &deq, &seed);
                if (ilv) interleave(&w, deq);
                float *x = malloc(sizeof(float) * n_tok * cols), *y1 = malloc(sizeof(float) * n_tok * rows),
                      *y = malloc(sizeof(float) * n_tok * rows);
                for (int i = 0; i < n_tok * cols; i++) x[i] = frand(&seed);
                void *scratch = malloc(ops_matmul_scratch_bytes(cols, n_tok, 16));
                memset(y1, 0xff, sizeof(float) * n_tok * rows);
                ops_matmul(&w, x, n_tok, y1, scratch, 1);
                for (int i = 0; i < n_tok * rows; i++)
                    if (isnan(y1[i])) fail_msg("rows %d: output %d not written", rows, i);
                for (size_t t = 1; t < sizeof threads / sizeof *threads; t++) {
                    memset(y, 0xff, sizeof(float) * n_tok * rows);
                    ops_matmul(&w, x, n_tok, y, scratch, threads[t]);
                    assert_memory_equal(y, y1, sizeof(float) * n_tok * rows);
                }
                free((void *)w.data), free(deq), free(x), free(y1), free(y), free(scratch);
            }
}

static void test_rmsnorm(void **st) {
    (void)st;
    float x[7] = {1, -2, 3, 0.5f, 0, 4, -1}, w[7] = {1, 2, 0.5f, 1, 1, -1, 3}, out[7];
    double ss = 0;
    for (int i = 0; i < 7; i++) ss += x[i] * x[i];
    const double r = 1.0 / sqrt(ss / 7 + 1e-5);
    ops_rmsnorm(out, x, w, 7, 1e-5f);
    for (int i = 0; i < 7; i++) assert_float_equal(out[i], x[i] * r * w[i], 1e-5);
}

static void test_rope(void **st) {
    (void)st;
    const int d = 8, pos = 5;
    const float base = 10000.0f;
    double freq[4];
    assert_float_equal(ops_rope_freqs(freq, d, base, NULL, NULL), 1.0f, 0);
    float a[16], b[16];
    for (int i = 0; i < 16; i++) a[i] = b[i] = (float)(i + 1) * 0.25f;
    ops_rope(a, 2, NULL, 0, d, pos, freq, 1.0f, KVF_ROPE_NORM);
    ops_rope(b, 1, b + d, 1, d, pos, freq, 1.0f, KVF_ROPE_NEOX);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < d / 2; i++) {
            const double th = pos * pow(base, -2.0 * i / d), c = cos(th), s = sin(th);
            const double x0 = (h * d + 2 * i + 1) * 0.25, x1 = (h * d + 2 * i + 2) * 0.25;
            assert_float_equal(a[h * d + 2 * i], x0 * c - x1 * s, 1e-5);
            assert_float_equal(a[h * d + 2 * i + 1], x0 * s + x1 * c, 1e-5);
            const double y0 = (h * d + i + 1) * 0.25, y1 = (h * d + i + d / 2 + 1) * 0.25;
            assert_float_equal(b[h * d + i], y0 * c - y1 * s, 1e-5);
            assert_float_equal(b[h * d + i + d / 2], y0 * s + y1 * c, 1e-5);
        }
    float z[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ops_rope(z, 1, NULL, 0, 8, 0, freq, 1.0f, KVF_ROPE_NEOX); /* position 0 is the identity */
    for (int i = 0; i < 8; i++) assert_float_equal(z[i], i + 1, 0);
    /* mscale multiplies the rotation: position 0 then scales every value */
    ops_rope(z, 1, NULL, 0, 8, 0, freq, 2.0f, KVF_ROPE_NEOX);
    for (int i = 0; i < 8; i++) assert_float_equal(z[i], 2 * (i + 1), 0);
}

/* M-RoPE's pair layouts, written out for 16 pairs with sections 5/6/5
 * (blocks) and 6/5/5 (interleaved, transformers' apply_interleaved_mrope:
 * height takes the pairs 1, 4, .. below 15, width 2, 5, .. below 15), and
 * each pair turned by its axis's position. */
static void test_rope_axes(void **st) {
    (void)st;
    static const uint8_t blocks[16] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2};
    static const uint8_t inter[16] = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0};
    uint8_t axis[16];
    ops_rope_axes_fill(axis, 16, (const int[3]){5, 6, 5}, false);
    assert_memory_equal(axis, blocks, 16);
    ops_rope_axes_fill(axis, 16, (const int[3]){6, 5, 5}, true);
    assert_memory_equal(axis, inter, 16);
    /* sections that cover fewer pairs leave the rest on time */
    ops_rope_axes_fill(axis, 16, (const int[3]){10, 2, 1}, true);
    for (int i = 0; i < 16; i++) assert_int_equal(axis[i], i == 1 || i == 4 ? 1 : i == 2 ? 2 : 0);
    const int d = 32;
    double freq[16];
    ops_rope_freqs(freq, d, 10000.0f, NULL, NULL);
    const int32_t pos[3] = {7, 3, 11};
    float x[32];
    for (int i = 0; i < d; i++) x[i] = (float)(i + 1) * 0.125f;
    ops_rope_axes(x, 1, NULL, 0, d, pos, inter, freq, 1.0f, KVF_ROPE_NEOX);
    for (int i = 0; i < d / 2; i++) {
        const double th = pos[inter[i]] * freq[i], y0 = (i + 1) * 0.125, y1 = (i + d / 2 + 1) * 0.125;
        assert_float_equal(x[i], y0 * cos(th) - y1 * sin(th), 1e-5);
        assert_float_equal(x[i + d / 2], y0 * sin(th) + y1 * cos(th), 1e-5);
    }
}

/* The scalings' frequencies, worked out by hand from transformers'
 * modeling_rope_utils for head_dim 8, base 10000 (plain: 1, 0.1, 0.01,
 * 0.001). */
static void test_rope_freqs(void **st) {
    (void)st;
    double f[4], plain[4];
    const float base = 10000.0f;
    ops_rope_freqs(plain, 8, base, NULL, NULL);
    for (int i = 0; i < 4; i++) assert_float_equal(plain[i], pow(10.0, -i), 1e-12);
    /* linear: every frequency divided by the factor */
    struct rope_scaling sc = {.type = ROPE_SCALING_LINEAR, .factor = 4};
    assert_float_equal(ops_rope_freqs(f, 8, base, &sc, NULL), 1.0f, 0);
    for (int i = 0; i < 4; i++) assert_float_equal(f[i], plain[i] / 4, 1e-15);
    /* llama3, original context 64, factors 1 and 4: wavelengths under 16
     * (2 pi, pair 0) kept, over 64 (628, 6283: pairs 2, 3) divided by 8,
     * pair 1's (62.8) interpolated with smooth = (64 / 62.83 - 1) / 3 */
    sc = (struct rope_scaling){.type = ROPE_SCALING_LLAMA3, .factor = 8, .orig_ctx = 64, .low_freq_factor = 1,
                               .high_freq_factor = 4};
    ops_rope_freqs(f, 8, base, &sc, NULL);
    const double pi = 3.14159265358979323846, smooth = (64 / (2 * pi / 0.1) - 1) / 3;
    assert_float_equal(f[0], 1.0, 1e-12);
    assert_float_equal(f[1], (1 - smooth) * 0.1 / 8 + smooth * 0.1, 1e-12);
    assert_float_equal(f[2], 0.01 / 8, 1e-15);
    assert_float_equal(f[3], 0.001 / 8, 1e-15);
    /* YaRN, original context 64, factor 4, betas 32 and 1: the ramp runs
     * from pair floor(-0.497) -> 0 to pair ceil(1.008) = 2, so pair 0 keeps
     * its frequency, pair 1 takes half of each, pairs 2 and 3 are divided
     * by 4; cos and sin by 0.1 ln 4 + 1 */
    sc = (struct rope_scaling){.type = ROPE_SCALING_YARN, .factor = 4, .orig_ctx = 64, .beta_fast = 32,
                               .beta_slow = 1};
    assert_float_equal(ops_rope_freqs(f, 8, base, &sc, NULL), 0.1 * log(4.0) + 1, 1e-6);
    assert_float_equal(f[0], 1.0, 1e-12);
    assert_float_equal(f[1], 0.1 * (0.5 / 4 + 0.5), 1e-12);
    assert_float_equal(f[2], 0.01 / 4, 1e-15);
    assert_float_equal(f[3], 0.001 / 4, 1e-15);
    sc.attn_factor = 0.5f; /* given: taken as it is */
    assert_float_equal(ops_rope_freqs(f, 8, base, &sc, NULL), 0.5, 0);
    /* llama.cpp's rope_freqs.weight divides each pair's frequency */
    const float factors[4] = {1, 2, 4, 8};
    ops_rope_freqs(f, 8, base, NULL, factors);
    for (int i = 0; i < 4; i++) assert_float_equal(f[i], plain[i] / factors[i], 1e-15);
}

static void test_activations(void **st) {
    (void)st;
    float g[4] = {-3, -0.5f, 0.7f, 2.5f}, u[4] = {1, 2, -1, 0.5f}, h[4];
    memcpy(h, g, sizeof g);
    ops_silu_mul(g, u, 4);
    ops_gelu_tanh_mul(h, u, 4);
    const double xs[4] = {-3, -0.5, 0.7, 2.5};
    for (int i = 0; i < 4; i++) {
        const double x = xs[i];
        assert_float_equal(g[i], x / (1 + exp(-x)) * u[i], 1e-6);
        /* erf-GELU differs from the tanh form by < 1e-3 on this range */
        assert_float_equal(h[i], 0.5 * x * (1 + erf(x / sqrt(2))) * u[i], 2e-3);
    }
}

static void test_softmax(void **st) {
    (void)st;
    float x[4] = {1, 2, -INFINITY, 3};
    ops_softmax(x, 4);
    const double z = exp(-2) + exp(-1) + 1;
    assert_float_equal(x[0], exp(-2) / z, 1e-6);
    assert_float_equal(x[2], 0, 0);
    assert_float_equal(x[3], 1 / z, 1e-6);
    float m[2] = {-INFINITY, -INFINITY};
    ops_softmax(m, 2);
    assert_float_equal(m[0] + m[1], 0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_all_types), cmocka_unit_test(test_matmul_threads),
        cmocka_unit_test(test_rmsnorm),          cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_axes),        cmocka_unit_test(test_rope_freqs),
        cmocka_unit_test(test_activations),      cmocka_unit_test(test_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
