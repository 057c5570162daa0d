/* Decoding attention's runs of KV rows against a group's query heads
 * (quant_kv_scores, quant_kv_mix), written once for any vector width:
 * quant_avx2.c and quant_avx512.c include this body under their mapping
 * (simd_avx2.h, simd_avx512.h; the names are listed in vec_simd.h) after
 * defining what depends on the ISA's blocks:
 *   kv_dot_lanes(t, row, x, d)        one row of type t against x, in lanes,
 *                                     as the one-row dot_f32x[t] sums them
 *   kv_values(t, row, c, left, m)     values c .. c + VW - 1 of a row (the
 *                                     first `left`, under mask m); Q8_0 and
 *                                     Q4_0 their codes, the scale going into
 *                                     the axpy's factor (quant_kv_factor)
 *   V_REDUCE_ROWS(v)                  the sums of VW vectors' lanes, lane r
 *                                     that of v[r], each by the one-row
 *                                     form's tree
 * No include guard: one inclusion per file. */

/* out[q * ldo + j] = scale * (row j . x[q * ldx ..]) for nx queries, each
 * the bits of dot_f32x[t] * scale (same lanes, the same tree). */
static inline __attribute__((always_inline)) void dots_kv(enum dtype t, int64_t d, const void *rows, int n,
                                                          const float *x, size_t ldx, int nx, float scale,
                                                          float *out, size_t ldo) {
    if (n <= 0 || d <= 0)
        return;
    const size_t rb = dtype_row_bytes(t, d);
    const int run = quant_kv_run_rows(rb, VW);
    const vf vs = V_SET1(scale);
    for (int j0 = 0; j0 < n; j0 += run)
        for (int q = 0; q < nx; q++)
            for (int j = j0; j < n && j < j0 + run; j += VW) {
                const int m = n - j < VW ? n - j : VW;
                const uint8_t *r0 = (const uint8_t *)rows + (size_t)j * rb;
                vf v[VW];
                _Pragma("GCC unroll 16") for (int r = 0; r < VW; r++)
                    v[r] = r < m ? kv_dot_lanes(t, r0 + r * rb, x + q * ldx, d) : V_ZERO();
                V_STOREM(out + q * ldo + j, v_mask(m), V_MUL(V_REDUCE_ROWS(v), vs));
            }
}

/* y[q * ldy ..] += w[q * ldw + j] * row j (rows ldr bytes apart) for ny
 * queries, rows with w != 0 in j order, each element the fmadd the type's
 * axpy gives it; y stays in up to 8 registers (8 VW values) across a run of
 * rows. */
static inline __attribute__((always_inline)) void axpys_kv(enum dtype t, float *y, size_t ldy, const float *w,
                                                           size_t ldw, int ny, const void *rows, size_t ldr, int n,
                                                           int64_t d) {
    if (n <= 0 || d <= 0)
        return;
    /* A slice narrower than a cache line still reads a line a row. */
    const size_t sb = dtype_row_bytes(t, d);
    const int run = quant_kv_run_rows(sb < 64 ? 64 : sb, VW);
    for (int j0 = 0; j0 < n; j0 += run)
        for (int q = 0; q < ny; q++)
            for (int64_t c = 0; c < d; c += 8 * VW) {
                float *yq = y + q * ldy + c;
                const float *wq = w + q * ldw;
                vmask m[8];
                vf acc[8];
                int nr = 0; /* registers in use: no address past the row's end is formed */
                _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
                    const int64_t left = d - c - VW * r;
                    m[r] = v_mask(left);
                    acc[r] = V_ZERO();
                    if (left > 0) {
                        acc[r] = V_LOADM(m[r], yq + VW * r);
                        nr = r + 1;
                    }
                }
                for (int j = j0; j < n && j < j0 + run; j++) {
                    if (wq[j] == 0.0f)
                        continue;
                    const uint8_t *row = (const uint8_t *)rows + (size_t)j * ldr;
                    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)
                        if (r < nr)
                            acc[r] = V_FMA(V_SET1(quant_kv_factor(t, row, c + VW * r, wq[j])),
                                           kv_values(t, row, c + VW * r, d - c - VW * r, m[r]), acc[r]);
                }
                _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)
                    if (r < nr)
                        V_STOREM(yq + VW * r, m[r], acc[r]);
            }
}
