/* One KV cache row of a 32-value block type (Q8_0, Q4_0; t a constant)
 * against plain float32, written once for any vector width: quant_simd.h
 * includes this body, under the mapping of simd_avx2.h or simd_avx512.h,
 * once quant_avx2.c or quant_avx512.c has defined
 *   q32_codes(t, b, k)   values VW k .. VW k + VW - 1 of the block at b as
 *                        floats, its codes (the scale not applied)
 * No include guard: one inclusion per file. */

/* The row against nq queries y + q ldy (nq a constant), in lanes: each
 * block's codes, unpacked once for all of them, . y (a product, then fmas
 * in order), times the block's scale. */
static inline __attribute__((always_inline)) void dot_q32_lanes_n(enum dtype t, int64_t n, const void *w,
                                                                  const float *y, size_t ldy, int nq, vf *out) {
    const size_t bb = t == DT_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
    _Pragma("GCC unroll 8") for (int q = 0; q < nq; q++) out[q] = V_ZERO();
    for (int64_t i = 0; i < n / 32; i++) {
        const uint8_t *b = (const uint8_t *)w + i * bb;
        vf codes[32 / VW];
        _Pragma("GCC unroll 4") for (int k = 0; k < 32 / VW; k++) codes[k] = q32_codes(t, b, k);
        const vf sc = V_SET1(quant_q32_scale(t, b));
        _Pragma("GCC unroll 8") for (int q = 0; q < nq; q++) {
            const float *yq = y + q * ldy + 32 * i;
            vf s = V_MUL(codes[0], V_LOAD(yq));
            _Pragma("GCC unroll 4") for (int k = 1; k < 32 / VW; k++) s = V_FMA(codes[k], V_LOAD(yq + VW * k), s);
            out[q] = V_FMA(sc, s, out[q]);
        }
    }
}

static inline __attribute__((always_inline)) vf dot_q32_lanes(enum dtype t, int64_t n, const void *w, const float *y) {
    vf acc;
    dot_q32_lanes_n(t, n, w, y, 0, 1, &acc);
    return acc;
}

/* y += a * the row: each value the fmadd of a times its block's scale and
 * its code, as axpys_kv gives it (quant_kv_scale). */
static inline __attribute__((always_inline)) void axpy_q32_row(enum dtype t, float *y, float a, const void *x,
                                                              int64_t n) {
    const size_t bb = t == DT_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const uint8_t *b = (const uint8_t *)x + i * bb;
        const vf ad = V_SET1(a * quant_q32_scale(t, b));
        _Pragma("GCC unroll 4") for (int k = 0; k < 32 / VW; k++)
            V_STORE(y + VW * k, V_FMA(ad, q32_codes(t, b, k), V_LOAD(y + VW * k)));
    }
}
