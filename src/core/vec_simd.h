/* The float-vector kernels (core/vec.h) written once for any vector width,
 * as ggml writes its SIMD mappings: vec_avx2.c and vec_avx512.c include
 * this body under their ISA's mapping of the names below (simd_avx2.h,
 * simd_avx512.h) and the tile sizes (no include guard: one inclusion per
 * file). What the levels must share, they share here: the
 * order of every product and sum, so each level gives the scalar
 * reference's bits (tile_scores, tile_mix, vec_max, vec_scale) or the same
 * exp polynomial (vec_sigmoid_mul, vec_exp_sum).
 *
 * The mapping, for a vector `vf` of VW floats and its lane mask `vmask`:
 *   V_ZERO() V_SET1(x) V_LOAD(p) V_STORE(p, v) V_ADD V_SUB V_MUL V_DIV V_MIN
 *   V_MAX V_FMA(a, b, c) = a b + c   V_FNMA(a, b, c) = c - a b
 *   v_mask(left)         the lanes below left (clamped to 0..VW)
 *   V_LOADM(m, p)        masked load, other lanes 0; V_STOREM(p, m, v)
 *   v_load_fill(m, p, f) masked load, other lanes f
 *   v_round(x)           to the nearest integer (ties to even)
 *   v_scale2k(p, k)      p 2^k for integral k in [-126, 127]
 *   v_zero_under(x, e)   e, 0 where x < EXP_MIN
 *   v_hmax(v)            the largest lane (no lane is NaN)
 *   vd, VD_ZERO(), VD_ADD, vd_lo(v), vd_hi(v), vd_sum(d): doubles holding
 *                        the low and the high half of a vf, and their sum
 *   SCORES_R, SCORES_C   query rows and key panels a scores tile holds
 *   MIX_R                output rows a mix tile holds */

/* ---- prompt attention (tile_scores, tile_mix) ------------------------ */

#define PANEL_VECS (TILE_PANEL / VW)

/* Scores of R query rows against C panels (TILE_PANEL C keys) in R x C
 * PANEL_VECS registers: per key value one load a vector of the panels and
 * one broadcast a row. R and C are constants at every call, so acc[][]
 * lives in registers. */
static inline __attribute__((always_inline)) void scores_tile(int R, int C, int64_t d, const float *q, size_t ldq,
                                                              const float *pan, float scale, float *out, size_t ldo,
                                                              int n) {
    vf acc[SCORES_R][SCORES_C * PANEL_VECS];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < C * PANEL_VECS; c++)
            acc[r][c] = V_ZERO();
    for (int64_t k = 0; k < d; k++) {
        vf b[SCORES_C * PANEL_VECS];
        #pragma GCC unroll 8
        for (int c = 0; c < C * PANEL_VECS; c++)
            b[c] = V_LOAD(pan + (size_t)(c / PANEL_VECS) * TILE_PANEL * d + k * TILE_PANEL + VW * (c % PANEL_VECS));
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const vf a = V_SET1(q[r * ldq + k]);
            #pragma GCC unroll 8
            for (int c = 0; c < C * PANEL_VECS; c++)
                acc[r][c] = V_FMA(a, b[c], acc[r][c]);
        }
    }
    const vf s = V_SET1(scale);
    #pragma GCC unroll 8
    for (int c = 0; c < C * PANEL_VECS; c++) {
        const int at = TILE_PANEL * (c / PANEL_VECS) + VW * (c % PANEL_VECS);
        const vmask m = v_mask(n - at);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            V_STOREM(out + r * ldo + at, m, V_MUL(acc[r][c], s));
    }
}

/* SCORES_C panels at a time (two: 8 KiB at d = 64) stay in L1 while every
 * row group of the block reads them. (24 AVX-512 accumulators, for three
 * panels or 12 rows, made GCC spill them.) */
static void scores_f32(int64_t d, const float *q, size_t ldq, int nq, const float *panels, int n, float scale,
                       float *out, size_t ldo) {
    for (int p = 0; p * TILE_PANEL < n; p += SCORES_C) {
        const float *pan = panels + (size_t)p * TILE_PANEL * d;
        const int left = n - TILE_PANEL * p;
        const bool wide = SCORES_C > 1 && left > TILE_PANEL;
#define SCORES(R)                                                                                                 \
    (wide ? scores_tile(R, SCORES_C, d, q + i * ldq, ldq, pan, scale, out + i * ldo + TILE_PANEL * p, ldo, left) \
          : scores_tile(R, 1, d, q + i * ldq, ldq, pan, scale, out + i * ldo + TILE_PANEL * p, ldo, left))
        size_t i = 0;
        for (; i + SCORES_R <= (size_t)nq; i += SCORES_R)
            SCORES(SCORES_R);
        for (; SCORES_R > 4 && i + 4 <= (size_t)nq; i += 4)
            SCORES(4);
        for (; i < (size_t)nq; i++)
            SCORES(1);
#undef SCORES
    }
}

/* R rows of the output, V vectors (up to 4 VW values) of each, over n keys
 * (mix_f32 below): per key V loads of the value row and one broadcast
 * weight a row. */
static inline __attribute__((always_inline)) void mix_tile(int R, int V, const float *w, size_t ldw, const float *v,
                                                           int64_t d, int n, float *y, size_t ldy, int64_t left,
                                                           bool first) {
    vf acc[MIX_R][4];
    vmask m[4];
    #pragma GCC unroll 8
    for (int c = 0; c < V; c++)
        m[c] = v_mask(left - VW * c);
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            acc[r][c] = first ? V_ZERO() : V_LOADM(m[c], y + r * ldy + VW * c);
    for (int j = 0; j < n; j++) {
        vf b[4];
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            b[c] = V_LOADM(m[c], v + (size_t)j * d + VW * c);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const vf a = V_SET1(w[r * ldw + j]);
            #pragma GCC unroll 8
            for (int c = 0; c < V; c++)
                acc[r][c] = V_FMA(a, b[c], acc[r][c]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            V_STOREM(y + r * ldy + VW * c, m[c], acc[r][c]);
}

/* Columns in runs of up to 4 VW values, keys in runs of MIX_KEYS (16 KiB of
 * values at d = 64, read from L1 by every row group), MIX_R rows a tile,
 * then one. With n = 0 it still runs once: y = 0. */
#define MIX_KEYS 64
#define MIX_ARGS w + i * ldw + j0, ldw, v + (size_t)j0 * d + c0, d, nj, y + i * ldy + c0, ldy, left, !j0
#define MIX_TILE(R)                                                                                               \
    (V == 4   ? mix_tile(R, 4, MIX_ARGS)                                                                          \
     : V == 3 ? mix_tile(R, 3, MIX_ARGS)                                                                          \
     : V == 2 ? mix_tile(R, 2, MIX_ARGS)                                                                          \
              : mix_tile(R, 1, MIX_ARGS))
static void mix_f32(int64_t d, const float *w, size_t ldw, int nq, const float *v, int n, float *y, size_t ldy) {
    for (int64_t c0 = 0; c0 < d; c0 += 4 * VW) {
        const int64_t left = d - c0;
        const int V = left >= 4 * VW ? 4 : (int)((left + VW - 1) / VW);
        for (int j0 = 0; j0 == 0 || j0 < n; j0 += MIX_KEYS) {
            const int nj = n - j0 < MIX_KEYS ? n - j0 : MIX_KEYS;
            size_t i = 0;
            for (; i + MIX_R <= (size_t)nq; i += MIX_R)
                MIX_TILE(MIX_R);
            for (; i < (size_t)nq; i++)
                MIX_TILE(1);
        }
    }
}
#undef MIX_TILE
#undef MIX_ARGS

/* ---- activations and softmax ----------------------------------------- */

/* e^x by EXP_POLY (quant_impl.h): NaN stays NaN (min and max return their
 * second operand when one is NaN), under EXP_MIN gives 0. */
static inline vf v_exp(vf x) {
    const vf c = V_MAX(V_SET1(EXP_MIN), V_MIN(V_SET1(EXP_MAX), x));
    const vf k = v_round(V_MUL(c, V_SET1(EXP_LOG2E)));
    const vf r = V_FNMA(k, V_SET1(EXP_LN2_LO), V_FNMA(k, V_SET1(EXP_LN2_HI), c));
    vf p = V_FMA(V_SET1(EXP_POLY_5), r, V_SET1(EXP_POLY_4));
    p = V_FMA(p, r, V_SET1(EXP_POLY_3));
    p = V_FMA(p, r, V_SET1(EXP_POLY_2));
    p = V_FMA(p, r, V_SET1(EXP_POLY_1));
    p = V_FMA(p, r, V_SET1(EXP_POLY_0));
    p = V_ADD(V_FMA(V_MUL(p, r), r, r), V_SET1(1.0f));
    return v_zero_under(x, v_scale2k(p, k));
}

/* A run's last vector is loaded and stored under a mask: every element goes
 * through the same code whatever the length of the call. */
static void sigmoid_mul(float *g, const float *u, int64_t n, float a, float b) {
    const vf va = V_SET1(a), vb = V_SET1(b), one = V_SET1(1.0f);
    for (int64_t i = 0; i < n; i += VW) {
        const bool full = n - i >= VW;
        const vmask m = v_mask(n - i);
        const vf x = full ? V_LOAD(g + i) : V_LOADM(m, g + i);
        const vf z = b != 0 ? V_MUL(x, V_FMA(V_MUL(vb, x), x, va)) : V_MUL(va, x);
        vf y = V_DIV(x, V_ADD(one, v_exp(V_SUB(V_ZERO(), z))));
        if (u) y = V_MUL(y, full ? V_LOAD(u + i) : V_LOADM(m, u + i));
        if (full) V_STORE(g + i, y);
        else V_STOREM(g + i, m, y);
    }
}

/* max(x, acc) takes acc where x is NaN, so NaN never wins. */
static float max_f32(const float *x, int64_t n) {
    vf acc = V_SET1(-INFINITY);
    for (int64_t i = 0; i < n; i += VW)
        acc = V_MAX(n - i >= VW ? V_LOAD(x + i) : v_load_fill(v_mask(n - i), x + i, -INFINITY), acc);
    return v_hmax(acc);
}

static void scale_f32(float *x, float a, int64_t n) {
    const vf va = V_SET1(a);
    int64_t i = 0;
    for (; i + VW <= n; i += VW)
        V_STORE(x + i, V_MUL(V_LOAD(x + i), va));
    if (i < n) {
        const vmask m = v_mask(n - i);
        V_STOREM(x + i, m, V_MUL(V_LOADM(m, x + i), va));
    }
}

/* Lanes past the end load -inf: their exp is 0. */
static double exp_sum(float *x, int64_t n, float m) {
    const vf vm = V_SET1(m);
    vd lo = VD_ZERO(), hi = VD_ZERO();
    for (int64_t i = 0; i < n; i += VW) {
        const bool full = n - i >= VW;
        const vmask t = v_mask(n - i);
        const vf e = v_exp(V_SUB(full ? V_LOAD(x + i) : v_load_fill(t, x + i, -INFINITY), vm));
        if (full) V_STORE(x + i, e);
        else V_STOREM(x + i, t, e);
        lo = VD_ADD(lo, vd_lo(e));
        hi = VD_ADD(hi, vd_hi(e));
    }
    return vd_sum(VD_ADD(lo, hi));
}

/* The entries of a level's kernel table this body fills. */
static void vec_kernels_set(struct quant_kernels *k) {
    k->sigmoid_mul = sigmoid_mul;
    k->exp_sum = exp_sum;
    k->scores_f32 = scores_f32;
    k->mix_f32 = mix_f32;
    k->max_f32 = max_f32;
    k->scale_f32 = scale_f32;
}

#undef PANEL_VECS
