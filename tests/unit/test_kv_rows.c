/* The KV cache's row kernels (quant_kv_dot, quant_kv_axpy: F32, F16,
 * Q8_0, Q4_0 and Q4_0H rows against plain float32) on every SIMD level this CPU runs,
 * against a naive double computation on the rows as the scalar reference
 * decodes them; the scalar kernels too. Lengths cover the SIMD tails of
 * fp16 rows and the block types' rows of one to eight blocks. Q4_0H's
 * rotation of x (or of the axpy's sum) rounds once more: 1e-5 of the
 * magnitude where the others have 1e-6. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static float rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    const float u = (float)(rng >> 40) * 0x1p-24f * 2.0f - 1.0f;
    return (rng & 63) == 0 ? u * 30.0f : u; /* the odd outlier, as keys have */
}

static const enum dtype kv_types[] = {DT_F32, DT_F16, DT_Q8_0, DT_Q4_0, DT_Q4_0H};
#define N_KV_TYPES (sizeof kv_types / sizeof *kv_types)

/* Checks both kernels, dispatched (at the current level) or scalar (ref),
 * on one row of n values. */
static void check_row(enum dtype t, int n, bool ref) {
    float *w = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n), *wd = malloc(sizeof(float) * n);
    float *y = malloc(sizeof(float) * n), *y0 = malloc(sizeof(float) * n);
    uint8_t *row = malloc(dtype_row_bytes(t, n));
    for (int i = 0; i < n; i++) w[i] = rnd(), x[i] = rnd(), y0[i] = y[i] = rnd();
    quant_quantize_row(t, w, row, n);
    quant_dequant_row_ref(t, row, wd, n);
    double dot = 0, mag = 0;
    for (int i = 0; i < n; i++) dot += (double)wd[i] * x[i], mag += fabs((double)wd[i] * x[i]);
    const float got = ref ? quant_kv_dot_ref(t, n, row, x) : quant_kv_dot(t, n, row, x);
    const double tol = t == DT_Q4_0H ? 1e-5 : 1e-6;
    if (fabs(got - dot) > tol * mag + 1e-30)
        fail_msg("%s dot, n=%d%s: %.9g vs naive %.9g", dtype_get(t)->name, n, ref ? " (scalar)" : "", got, dot);
    const float a = -0.37f;
    if (ref) quant_kv_axpy_ref(t, y, a, row, n);
    else quant_kv_axpy(t, y, a, row, n);
    for (int i = 0; i < n; i++) {
        const double want = y0[i] + (double)a * wd[i];
        if (fabs(y[i] - want) > tol * (fabs(y0[i]) + fabs(a * wd[i])))
            fail_msg("%s axpy, n=%d%s, i=%d: %.9g vs naive %.9g", dtype_get(t)->name, n, ref ? " (scalar)" : "", i,
                     y[i], want);
    }
    free(w), free(x), free(wd), free(y), free(y0), free(row);
}

static void check_all(bool ref) {
    for (size_t k = 0; k < N_KV_TYPES; k++) {
        const enum dtype t = kv_types[k];
        const int step = dtype_get(t)->block;
        for (int n = step; n <= (step > 1 ? 256 : 70); n += step) check_row(t, n, ref);
    }
}

static void test_levels(void **st) {
    (void)st;
    const enum simd_level top = simd_detect();
    for (int lv = SIMD_SCALAR; lv <= (int)top; lv++) {
        simd_set((enum simd_level)lv);
        assert_int_equal(simd_get(), lv);
        check_all(false);
    }
    simd_set(top);
}

static void test_scalar_reference(void **st) {
    (void)st;
    check_all(true);
}

/* H x for a block of 32, H the Sylvester-Hadamard matrix over sqrt(32):
 * H[i][j] = (-1)^popcount(i & j) / sqrt(32), in double. */
static void hadamard_naive(const float *x, double *out) {
    for (int i = 0; i < 32; i++) {
        double s = 0;
        for (int j = 0; j < 32; j++) s += (__builtin_popcount(i & j) & 1 ? -1.0 : 1.0) * x[j];
        out[i] = s / sqrt(32.0);
    }
}

/* Q4_0H is Q4_0 of the rotated block, rotated back: against a naive
 * rotation of x, Q4_0, and a naive rotation back (to the float rounding of
 * the rotations). And the reason it exists: on blocks with one value 30
 * times the others (as keys have), its error is well below Q4_0's. */
static void test_q4_0h(void **st) {
    (void)st;
    double err_plain = 0, err_rot = 0;
    for (int k = 0; k < 200; k++) {
        float x[32], r[32], rq[32], got[32], plain[32];
        double rd[32], back[32], norm = 0;
        uint8_t q[18];
        for (int i = 0; i < 32; i++) x[i] = rnd();
        x[k % 32] = 30.0f * (k % 2 ? 1.0f : -1.0f);
        for (int i = 0; i < 32; i++) norm += (double)x[i] * x[i];
        quant_quantize_row(DT_Q4_0H, x, q, 32);
        quant_dequant_row_ref(DT_Q4_0H, q, got, 32);
        hadamard_naive(x, rd);
        for (int i = 0; i < 32; i++) r[i] = (float)rd[i];
        quant_quantize_row(DT_Q4_0, r, q, 32);
        quant_dequant_row_ref(DT_Q4_0, q, rq, 32);
        hadamard_naive(rq, back);
        for (int i = 0; i < 32; i++)
            if (fabs(got[i] - back[i]) > 1e-5 * sqrt(norm))
                fail_msg("q4_0h block %d, value %d: %.9g, rotated Q4_0 rotated back %.9g", k, i, got[i], back[i]);
        quant_quantize_row(DT_Q4_0, x, q, 32);
        quant_dequant_row_ref(DT_Q4_0, q, plain, 32);
        for (int i = 0; i < 32; i++)
            if (i != k % 32)
                err_plain += (plain[i] - x[i]) * (plain[i] - x[i]), err_rot += (got[i] - x[i]) * (got[i] - x[i]);
    }
    print_message("squared error of the values beside an outlier: q4_0 %.4g, q4_0h %.4g\n", err_plain, err_rot);
    assert_true(err_rot < 0.5 * err_plain);
}

/* Types without a row kernel give 0 and leave y alone. */
static void test_other_types(void **st) {
    (void)st;
    uint8_t row[64] = {0};
    float x[32], y[32];
    for (int i = 0; i < 32; i++) x[i] = 1.0f, y[i] = 2.0f;
    assert_true(quant_kv_dot(DT_Q4_1, 32, row, x) == 0.0f);
    quant_kv_axpy(DT_Q4_1, y, 1.0f, row, 32);
    quant_kv_axpy(DT_COUNT, y, 1.0f, row, 32);
    for (int i = 0; i < 32; i++) assert_true(y[i] == 2.0f);
}

/* quant_kv_scores and quant_kv_mix over runs of n rows and nx query
 * vectors give the row-by-row calls' bits at every level: head sizes with
 * and without SIMD tails (and past the 128 values the SIMD forms keep in
 * registers), runs from 0 rows through partial 16-row groups to past the
 * AVX-512 kernels' runs of about 16 KiB (rb 128: 128 rows), 1 to 7 queries
 * with strides wider than a row, weights with zeros (skipped); the axpys
 * also by 16- and 32-column slices of the rows (ldr wider than a slice). */
static void test_runs(void **st) {
    (void)st;
    const enum simd_level top = simd_detect();
    static const int dims[] = {20, 32, 36, 40, 64, 96, 128, 160, 256, 288}; /* 20, 36: AVX2 tails too */
    static const int lens[] = {0, 1, 5, 15, 16, 17, 33, 129, 300};
    enum { N_MAX = 300, NX_MAX = 7 }; /* 5 to 7: two passes of queries */
    for (int lv = SIMD_SCALAR; lv <= (int)top; lv++) {
        simd_set((enum simd_level)lv);
        for (size_t k = 0; k < N_KV_TYPES; k++)
            for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
                const enum dtype t = kv_types[k];
                const int d = dims[di], ldx = d + 3, ldo = N_MAX + 5;
                if (d % dtype_get(t)->block) /* the block types' rows are whole 32-value blocks */
                    continue;
                const size_t rb = dtype_row_bytes(t, d);
                uint8_t *rows = malloc(rb * N_MAX);
                float *v = malloc(sizeof(float) * d), *x = malloc(sizeof(float) * ldx * NX_MAX);
                float *y1 = malloc(sizeof(float) * ldx * NX_MAX), *y2 = malloc(sizeof(float) * ldx * NX_MAX);
                float *y3 = malloc(sizeof(float) * ldx * NX_MAX);
                float *w = malloc(sizeof(float) * ldo * NX_MAX);
                float *o1 = malloc(sizeof(float) * ldo * NX_MAX), *o2 = malloc(sizeof(float) * ldo * NX_MAX);
                double vmax = 0; /* the largest value stored */
                for (int j = 0; j < N_MAX; j++) {
                    for (int i = 0; i < d; i++) v[i] = rnd();
                    quant_quantize_row(t, v, rows + j * rb, d);
                    quant_dequant_row_ref(t, rows + j * rb, v, d);
                    for (int i = 0; i < d; i++) vmax = fmax(vmax, fabs(v[i]));
                }
                for (int i = 0; i < ldo * NX_MAX; i++) w[i] = i % 3 == 1 ? 0.0f : rnd();
                for (int i = 0; i < ldx * NX_MAX; i++) x[i] = rnd(), y1[i] = y2[i] = y3[i] = rnd();
                for (int nx = 1; nx <= NX_MAX; nx++)
                    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                        const int n = lens[li];
                        quant_kv_scores(t, d, rows, n, x, ldx, nx, 0.125f, o1, ldo);
                        quant_kv_mix(t, y1, ldx, w, ldo, nx, rows, rb, n, d);
                        /* Slices of the rows, ldr = rb: 16 columns (32, a block, for the block
                         * types) for the first queries, 32 for the last. */
                        const int cut = dtype_get(t)->block > 1 || nx == NX_MAX ? 32 : 16;
                        for (int c0 = 0; c0 < d; c0 += cut)
                            quant_kv_mix(t, y3 + c0, ldx, w, ldo, nx, rows + dtype_row_bytes(t, c0), rb, n,
                                         d - c0 < cut ? d - c0 : cut);
                        for (int q = 0; q < nx; q++) {
                            for (int j = 0; j < n; j++) {
                                o2[q * ldo + j] = quant_kv_dot(t, d, rows + j * rb, x + q * ldx) * 0.125f;
                                if (w[q * ldo + j] != 0.0f)
                                    quant_kv_axpy(t, y2 + q * ldx, w[q * ldo + j], rows + j * rb, d);
                            }
                            assert_memory_equal(o1 + q * ldo, o2 + q * ldo, sizeof(float) * n);
                            assert_memory_equal(y3 + q * ldx, y1 + q * ldx, sizeof(float) * ldx);
                            if (t != DT_Q4_0H) {
                                assert_memory_equal(y1 + q * ldx, y2 + q * ldx, sizeof(float) * ldx); /* padding kept */
                                continue;
                            }
                            /* Q4_0H rotates the run's sum once, the rows one by one each: within
                             * float rounding of the terms' sizes (each |w| times the largest value),
                             * and then the same again for the next run */
                            double wsum = 0;
                            for (int j = 0; j < n; j++) wsum += fabs(w[q * ldo + j]);
                            for (int i = 0; i < ldx; i++)
                                if (fabs(y1[q * ldx + i] - y2[q * ldx + i]) >
                                    1e-6 * (wsum * vmax + fabs(y2[q * ldx + i])))
                                    fail_msg("q4_0h mix, d=%d n=%d q=%d i=%d: %.9g vs %.9g", d, n, q, i,
                                             y1[q * ldx + i], y2[q * ldx + i]);
                            memcpy(y2 + q * ldx, y1 + q * ldx, sizeof(float) * ldx);
                        }
                    }
                free(rows), free(v), free(x), free(y1), free(y2), free(y3), free(w), free(o1), free(o2);
            }
    }
    simd_set(top);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_scalar_reference),
        cmocka_unit_test(test_other_types),
        cmocka_unit_test(test_q4_0h),
        cmocka_unit_test(test_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
