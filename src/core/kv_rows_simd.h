/* Decoding attention's runs of KV rows against a group's query heads
 * (quant_kv_scores, quant_kv_mix), written once for any vector width:
 * quant_simd.h includes this body (under the mapping of simd_avx2.h or
 * simd_avx512.h; the names are listed in vec_simd.h) after defining
 *   kv_dot_lanes(t, row, x, d)        one row of type t against x, in lanes,
 *                                     as the one-row dot_f32x[t] sums them
 *   kv_values(t, row, c, left, m)     values c .. c + VW - 1 of a row (the
 *                                     first `left`, under mask m); Q8_0 and
 *                                     Q4_0 their codes, the scale going into
 *                                     the axpy's factor (quant_kv_scale)
 *   dot_q32_lanes_n                   q32_rows_simd.h's, included before
 * and quant_avx2.c / quant_avx512.c, before that, what is the ISA's:
 *   V_REDUCE_ROWS(v)                  the sums of VW vectors' lanes, lane r
 *                                     that of v[r], each by the one-row
 *                                     form's tree
 *   KV_MIX_VECS                       vectors of columns an axpys pass holds
 *                                     per query
 *   KV_MIX_QN, KV_DOT_QN              queries a pass of axpys_kv, dots_kv
 *                                     takes at most (<= KV_QN)
 * No include guard: one inclusion per file. */

/* Queries one pass over a run of rows takes, each row's values converted
 * once for all of them (f16 widened, Q8_0 / Q4_0 codes unpacked): decoding
 * converted every row once per query head, and that, not memory, was its
 * time (Qwen2.5-1.5B, 6 query heads a kv head, q4_0 or f16 cache: 0.87 ms
 * a layer at 4096 entries on two Zen 3 cores, 5 GB/s). */
#define KV_QN 6

/* One row of type t against nq (<= KV_QN) queries x + q ldx, in lanes,
 * each query's lanes the bits kv_dot_lanes gives it alone (the one-row
 * forms' accumulators and order; f32 has nothing to convert). t and nq are
 * constants at every call. */
static inline __attribute__((always_inline)) void kv_dot_lanes_n(enum dtype t, const uint8_t *row, const float *x,
                                                                 size_t ldx, int nq, int64_t d, vf out[KV_QN]) {
    if (t == DT_F32) {
        _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++) out[q] = kv_dot_lanes(t, row, x + q * ldx, d);
        return;
    }
    if (t == DT_F16) { /* dot_f16_lanes: two sums over alternate vectors, the tail into the first */
        vf s0[KV_QN], s1[KV_QN];
        _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++) s0[q] = s1[q] = V_ZERO();
        int64_t c = 0;
        for (; c + 2 * VW <= d; c += 2 * VW) {
            const vf a0 = kv_values(t, row, c, VW, v_mask(VW)), a1 = kv_values(t, row, c + VW, VW, v_mask(VW));
            _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++) {
                s0[q] = V_FMA(a0, V_LOAD(x + q * ldx + c), s0[q]);
                s1[q] = V_FMA(a1, V_LOAD(x + q * ldx + c + VW), s1[q]);
            }
        }
        for (; c < d; c += VW) {
            const vmask m = v_mask(d - c);
            const vf a = kv_values(t, row, c, d - c, m);
            _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++) s0[q] = V_FMA(a, V_LOADM(m, x + q * ldx + c), s0[q]);
        }
        _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++) out[q] = V_ADD(s0[q], s1[q]);
        return;
    }
    dot_q32_lanes_n(t, d, row, x, ldx, nq, out);
}

/* Rows [j0, je) against nq queries (a constant): out[q * ldo + j] =
 * scale * (row j . x[q * ldx ..]), VW rows' lanes summed at a time. */
static inline __attribute__((always_inline)) void dots_kv_pass(enum dtype t, int64_t d, const uint8_t *rows,
                                                               size_t rb, int j0, int je, const float *x, size_t ldx,
                                                               int nq, vf scale, float *out, size_t ldo) {
    for (int j = j0; j < je; j += VW) {
        const int m = je - j < VW ? je - j : VW;
        vf v[KV_QN][VW], lanes[KV_QN];
        _Pragma("GCC unroll 16") for (int r = 0; r < VW; r++) {
            if (r < m)
                kv_dot_lanes_n(t, rows + (size_t)(j + r) * rb, x, ldx, nq, d, lanes);
            _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++) v[q][r] = r < m ? lanes[q] : V_ZERO();
        }
        _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++)
            V_STOREM(out + q * ldo + j, v_mask(m), V_MUL(V_REDUCE_ROWS(v[q]), scale));
    }
}

/* Passes of up to most (<= KV_QN) queries, as even as they go (6 heads,
 * 4 at most: 3 and 3). */
static inline int kv_pass_queries(int nx, int most) {
    const int passes = (nx + most - 1) / most;
    return (nx + passes - 1) / passes;
}

/* out[q * ldo + j] = scale * (row j . x[q * ldx ..]) for nx queries, each
 * the bits of dot_f32x[t] * scale (same lanes, the same tree). */
static inline __attribute__((always_inline)) void dots_kv(enum dtype t, int64_t d, const void *rows, int n,
                                                          const float *x, size_t ldx, int nx, float scale,
                                                          float *out, size_t ldo) {
    if (n <= 0 || d <= 0 || nx <= 0)
        return;
    const size_t rb = dtype_row_bytes(t, d);
    const int run = quant_kv_run_rows(rb, VW), per = kv_pass_queries(nx, KV_DOT_QN);
    const vf vs = V_SET1(scale);
    for (int j0 = 0; j0 < n; j0 += run) {
        const int je = n - j0 < run ? n : j0 + run;
        for (int q0 = 0; q0 < nx; q0 += per) {
            const float *xq = x + q0 * ldx;
            float *oq = out + q0 * ldo;
            switch (nx - q0 < per ? nx - q0 : per) {
            case 1: dots_kv_pass(t, d, rows, rb, j0, je, xq, ldx, 1, vs, oq, ldo); break;
            case 2: dots_kv_pass(t, d, rows, rb, j0, je, xq, ldx, 2, vs, oq, ldo); break;
            case 3: dots_kv_pass(t, d, rows, rb, j0, je, xq, ldx, 3, vs, oq, ldo); break;
            case 4: dots_kv_pass(t, d, rows, rb, j0, je, xq, ldx, 4, vs, oq, ldo); break;
            case 5: dots_kv_pass(t, d, rows, rb, j0, je, xq, ldx, 5, vs, oq, ldo); break;
            default: dots_kv_pass(t, d, rows, rb, j0, je, xq, ldx, 6, vs, oq, ldo); break;
            }
        }
    }
}

/* Columns [c, c + min(cols, KV_MIX_VECS VW)) of nq queries' outputs over
 * rows [j0, je): the sums stay in registers across the rows, and each row's
 * values are converted once for all the queries. Bit q of live[j - j0]:
 * query q's weight of row j is not 0. nq and, but at a row's end, cols are
 * constants at every call. */
static inline __attribute__((always_inline)) void axpys_kv_pass(enum dtype t, float *y, size_t ldy, const float *w,
                                                                size_t ldw, int nq, const uint8_t *live,
                                                                const uint8_t *rows, size_t ldr, int j0, int je,
                                                                int64_t c, int64_t cols) {
    vmask m[KV_MIX_VECS];
    vf acc[KV_QN][KV_MIX_VECS];
    int nr = 0; /* registers in use: no address past the row's end is formed */
    _Pragma("GCC unroll 8") for (int r = 0; r < KV_MIX_VECS; r++) {
        const int64_t left = cols - VW * r;
        m[r] = v_mask(left);
        _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++)
            acc[q][r] = left > 0 ? V_LOADM(m[r], y + q * ldy + c + VW * r) : V_ZERO();
        nr = left > 0 ? r + 1 : nr;
    }
    for (int j = j0; j < je; j++) {
        const unsigned lm = live[j - j0];
        if (!lm)
            continue;
        const uint8_t *row = rows + (size_t)j * ldr;
        vf val[KV_MIX_VECS];
        float sc[KV_MIX_VECS];
        _Pragma("GCC unroll 8") for (int r = 0; r < KV_MIX_VECS; r++) {
            val[r] = r < nr ? kv_values(t, row, c + VW * r, cols - VW * r, m[r]) : V_ZERO();
            /* a slice starts at a multiple of 16 columns: only a vector at a multiple of 32 starts a block */
            sc[r] = r >= nr ? 0.0f : r == 0 || (VW * r) % 32 == 0 ? quant_kv_scale(t, row, c + VW * r) : sc[r - 1];
        }
        const bool all = lm == (1u << nq) - 1; /* the usual row: no test a query */
        _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++) {
            if (!all && !(lm >> q & 1))
                continue;
            const float wq = w[q * ldw + j];
            vf f = V_ZERO();
            _Pragma("GCC unroll 8") for (int r = 0; r < KV_MIX_VECS; r++)
                if (r < nr) {
                    f = r == 0 || (VW * r) % 32 == 0 ? V_SET1(wq * sc[r]) : f;
                    acc[q][r] = V_FMA(f, val[r], acc[q][r]);
                }
        }
    }
    _Pragma("GCC unroll 6") for (int q = 0; q < nq; q++)
        _Pragma("GCC unroll 8") for (int r = 0; r < KV_MIX_VECS; r++)
            if (r < nr)
                V_STOREM(y + q * ldy + c + VW * r, m[r], acc[q][r]);
}

/* The longest run axpys_kv takes: quant_kv_run_rows of a 64-byte slice. */
#define KV_RUN_MAX (16384 / 64)

/* y[q * ldy ..] += w[q * ldw + j] * row j (rows ldr bytes apart) for ny
 * queries, rows with w != 0 in j order, each element the fmadd the type's
 * axpy gives it. */
static inline __attribute__((always_inline)) void axpys_kv(enum dtype t, float *y, size_t ldy, const float *w,
                                                           size_t ldw, int ny, const void *rows, size_t ldr, int n,
                                                           int64_t d) {
    if (n <= 0 || d <= 0 || ny <= 0)
        return;
    /* A slice narrower than a cache line still reads a line a row. */
    const size_t sb = dtype_row_bytes(t, d);
    const int run = quant_kv_run_rows(sb < 64 ? 64 : sb, VW), per = kv_pass_queries(ny, KV_MIX_QN);
    for (int j0 = 0; j0 < n; j0 += run) {
        const int je = n - j0 < run ? n : j0 + run;
        for (int q0 = 0; q0 < ny; q0 += per) {
            const int nq = ny - q0 < per ? ny - q0 : per;
            float *yq = y + q0 * ldy;
            const float *wq = w + q0 * ldw;
            uint8_t live[KV_RUN_MAX]; /* tested once a row, not once a column slice */
            for (int j = j0; j < je; j++) {
                unsigned lm = 0;
                for (int q = 0; q < nq; q++) lm |= (unsigned)(wq[q * ldw + j] != 0.0f) << q;
                live[j - j0] = (uint8_t)lm;
            }
            /* Whole slices with the width a constant: no test a row of where the row ends. */
            const int64_t sw = KV_MIX_VECS * VW;
#define AXPYS_PASS(k) (d - c >= sw ? axpys_kv_pass(t, yq, ldy, wq, ldw, k, live, rows, ldr, j0, je, c, sw) \
                                   : axpys_kv_pass(t, yq, ldy, wq, ldw, k, live, rows, ldr, j0, je, c, d - c))
            for (int64_t c = 0; c < d; c += sw)
                switch (nq) {
                case 1: AXPYS_PASS(1); break;
                case 2: AXPYS_PASS(2); break;
                case 3: AXPYS_PASS(3); break;
                case 4: AXPYS_PASS(4); break;
                case 5: AXPYS_PASS(5); break;
                default: AXPYS_PASS(6); break;
                }
#undef AXPYS_PASS
        }
    }
}
