#include "attn/attn.h"

#include "core/ops.h"
#include "core/vec.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

size_t attn_scratch_bytes(int n_kv, int n_threads) {
    return (size_t)n_threads * ATTN_BLOCK * (size_t)KVF_MAX(n_kv, 1) * sizeof(float);
}

/* First entry with pos > p - window. */
static int visible_begin(const struct kv_head *h, int32_t p, int window) {
    return window > 0 ? kv_head_count_upto(h, p - window) : 0;
}

/* A thread's partial statistics: [requested arrays][n_head_kv][len]; slot[k]
 * is where statistic k sits among the requested ones. */
struct stats_part {
    const struct attn_stats *st;
    float *buf;
    int n_head_kv, len;
    const int *slot;
};

static float *part_array(const struct stats_part *sp, int k, int g) {
    return sp->buf + ((size_t)sp->slot[k] * sp->n_head_kv + g) * sp->len;
}

/* The statistics' loops are vectorised (omp simd: -O2 alone leaves loops
 * of unknown length scalar); every lane does the scalar operations, so the
 * sums keep their bits. */
static void add_row(float *a, const float *r, int n, float w) {
    #pragma omp simd
    for (int j = 0; j < n; j++) a[j] += w * r[j];
}

/* Adds query i's softmax row in query head hh to its kv head g's partial
 * sums: r[0..n) are the weights of the visible entries jb..jb+n; w =
 * 1/group averages the query heads sharing g. nsm: the row's n-softmax /
 * softmax ratio, S / (S + n e^-max). ktag: the entries' tags. */
static void stats_row(const struct stats_part *sp, int hh, int group, int i, const float *r, int jb, int n, float nsm,
                      const struct kvf_tag *ktag) {
    const struct attn_stats *st = sp->st;
    const int g = hh / group;
    const float w = 1.0f / group;
    if (st->a[ATTN_STAT_SUM]) add_row(part_array(sp, ATTN_STAT_SUM, g) + jb, r, n, w);
    if (st->a[ATTN_STAT_SQ]) {
        float *a = part_array(sp, ATTN_STAT_SQ, g) + jb;
        #pragma omp simd
        for (int j = 0; j < n; j++) a[j] += w * r[j] * r[j];
    }
    if (st->a[ATTN_STAT_COUNT]) {
        float *a = part_array(sp, ATTN_STAT_COUNT, g) + jb;
        #pragma omp simd
        for (int j = 0; j < n; j++) a[j] += w;
    }
    const int mod = st->qtag ? ATTN_STAT_TEXT + st->qtag[i].modality : -1;
    if (mod >= 0 && st->a[mod]) add_row(part_array(sp, mod, g) + jb, r, n, w);
    if (st->a[ATTN_STAT_MAX] && !st->max_escale) {
        float *a = part_array(sp, ATTN_STAT_MAX, g) + jb;
        #pragma omp simd
        for (int j = 0; j < n; j++) a[j] = r[j] > a[j] ? r[j] : a[j];
    } else if (st->a[ATTN_STAT_MAX]) {
        float *a = part_array(sp, ATTN_STAT_MAX, g) + jb;
        const float qs = st->max_qscale[i], *es = st->max_escale + (size_t)hh * st->stride + jb;
        #pragma omp simd
        for (int j = 0; j < n; j++) {
            const float x = r[j] * qs * es[j];
            a[j] = x > a[j] ? x : a[j];
        }
    }
    if (i < st->win_first) return;
    if (st->a[ATTN_STAT_WIN]) add_row(part_array(sp, ATTN_STAT_WIN, g) + jb, r, n, w);
    if (st->a[ATTN_STAT_WIN_NSM]) add_row(part_array(sp, ATTN_STAT_WIN_NSM, g) + jb, r, n, w * nsm);
    if (st->a[ATTN_STAT_WIN_NSM_SELF] && st->a[ATTN_STAT_WIN_NSM_CROSS]) {
        float *self = part_array(sp, ATTN_STAT_WIN_NSM_SELF, g) + jb;
        float *cross = part_array(sp, ATTN_STAT_WIN_NSM_CROSS, g) + jb;
        for (int j = 0; j < n; j++)
            (ktag[jb + j].modality == st->qtag[i].modality ? self : cross)[j] += w * nsm * r[j];
    }
}

/* Below this many queries in a block, scores and outputs are dot products
 * and axpys on the stored rows (any type); from it on, the two products of
 * tile_scores / tile_mix on f32 rows (decode is one query per
 * head, where a block kernel costs more than it saves). */
#define ATTN_BLOCK_MIN_ROWS 4

/* A thread's packed keys (and float32 values stored in another type) of the
 * leading rows of one kv head, for the block products. A head's blocks come
 * in order of growing visible length and query heads sharing a kv head are
 * adjacent, so each row is packed about once per thread and kv head, not
 * once per block (BLAS packed both operands on every call: for a block of
 * 32 queries as much copying as multiplying). */
struct head_pack {
    const struct kv_head *h; /* whose rows are held; NULL: none */
    int n;                   /* rows [0, n) are held */
    float *kp;               /* [n_kv_max / TILE_PANEL rounded up][head_dim][TILE_PANEL] key panels */
    float *v;                /* [n_kv_max][head_dim], values not stored as F32 only */
    float *stage;            /* [TILE_PANEL][head_dim]: keys not stored as F32 on their way into panels */
};

static void head_pack_fill(struct head_pack *r, const struct kv_head *h, int d, int n) {
    if (r->h != h) r->h = h, r->n = 0;
    if (n <= r->n) return;
    /* Rows are whole blocks of their type, so a run of rows is one row of m * d values. */
    if (h->type_v != DT_F32)
        quant_dequant_row(h->type_v, (const uint8_t *)h->v + r->n * dtype_row_bytes(h->type_v, d),
                          r->v + (size_t)r->n * d, (int64_t)(n - r->n) * d);
    if (h->type_k == DT_F32) {
        tile_pack(d, (const float *)h->k + (size_t)r->n * d, r->n, n, r->kp);
    } else {
        const size_t rb = dtype_row_bytes(h->type_k, d);
        for (int j = r->n; j < n; j += TILE_PANEL) {
            const int m = KVF_MIN(TILE_PANEL, n - j);
            quant_dequant_row(h->type_k, (const uint8_t *)h->k + j * rb, r->stage, (int64_t)m * d);
            kv_head_unsmooth(h, d, r->stage, m);
            tile_pack(d, r->stage, j, j + m, r->kp);
        }
    }
    r->n = n;
}

/* Columns taken at a time by the queries of a block in the dot-product
 * path: a chunk of key (or value) rows stays in L2 while each query reads
 * it. Within a chunk the kernels (quant_kv_scores, quant_kv_mix) take
 * every query head sharing the kv head at once, reading a row from memory
 * once per kv head instead of once per query head (Gemma 3 270M at a 4096
 * depth: 4 query heads a kv head, and attention streamed 156 MB a token). */
#define ATTN_CHUNK 256

/* One block of queries [i0, i1) of query heads [h0, h1), which share kv
 * head h: the entries it reads and where its scores go (blk_row). */
struct blk {
    const struct attn_params *p;
    const float *q; /* the call's queries and outputs, [n_q][n_head * head_dim] */
    float *out;
    const struct kv_head *h;
    int i0, i1, h0, h1;
    /* Columns [j0, jend): keys past every row's last visible position are
     * masked for the whole block, and so are keys out of its first query's
     * window (a windowed layer's block costs its window, not the context).
     * The block products start at a panel (the columns before jv are
     * computed and weigh nothing) and read values from jv on. */
    int j0, jv, jend;
    bool blocked;                       /* the block products; else dot products and axpys */
    int jb[ATTN_BLOCK], je[ATTN_BLOCK]; /* query i0 + k sees entries [jb[k], je[k]) */
    float *s;                           /* score rows, lds floats apart, column 0 = entry j0 */
    size_t lds;
};

static void blk_init(struct blk *b, const struct attn_params *p, const float *q, const int32_t *qpos, float *out,
                     int i0, int i1, int h0, int h1, const struct kv_head *h) {
    const int nb = i1 - i0;
    const int32_t *qlast = p->qlast ? p->qlast : qpos; /* NULL when bidirectional */
    int32_t last = 0;
    for (int i = i0; qlast && i < i1; i++) last = KVF_MAX(last, qlast[i]);
    *b = (struct blk){.p = p, .q = q, .out = out, .h = h, .i0 = i0, .i1 = i1, .h0 = h0, .h1 = h1};
    b->jend = p->bidirectional ? h->n : kv_head_count_upto(h, last);
    b->jv = p->bidirectional ? 0 : KVF_MIN(b->jend, visible_begin(h, qpos[i0], p->window));
    b->blocked = nb >= ATTN_BLOCK_MIN_ROWS && b->jend > b->jv;
    b->j0 = b->blocked ? b->jv - b->jv % TILE_PANEL : b->jv;
    /* Positions ascend within a call (attn_forward); nb <= ATTN_BLOCK. */
    for (int k = 0; k < nb; k++) {
        b->jb[k] = p->bidirectional ? 0
                                    : KVF_MIN(b->jend, KVF_MAX(b->j0, visible_begin(h, qpos[i0 + k], p->window)));
        b->je[k] = p->bidirectional ? b->jend
                                    : KVF_MIN(b->jend, KVF_MAX(b->jb[k], kv_head_count_upto(h, qlast[i0 + k])));
    }
}

static float *blk_row(const struct blk *b, int hh, int i) {
    return b->s + ((size_t)(hh - b->h0) * (size_t)(b->i1 - b->i0) + (size_t)(i - b->i0)) * b->lds;
}

static const float *blk_q(const struct blk *b, int hh, int i) {
    return b->q + (size_t)i * b->p->n_head * b->p->head_dim + (size_t)hh * b->p->head_dim;
}

static float *blk_out(const struct blk *b, int hh, int i) {
    return b->out + (size_t)i * b->p->n_head * b->p->head_dim + (size_t)hh * b->p->head_dim;
}

/* The dot-product path's scores of entries [lo, hi), ATTN_CHUNK at a time.
 * Against smoothed keys the kernels take the queries scaled channel by
 * channel, and each score gets back the query's product with the shift:
 * the same scores as against the keys kv_head_key_row gives. */
static void blk_dots(const struct blk *b, int lo, int hi) {
    const int d = b->p->head_dim, ng = b->h1 - b->h0;
    const size_t rb = dtype_row_bytes(b->h->type_k, d), ldo = (size_t)(b->i1 - b->i0) * b->lds;
    float qs[QUANT_ROT_MAX], shift[QUANT_ROT_MAX / 32];
    const int step = b->h->smooth ? QUANT_ROT_MAX / d : ng; /* query heads a kernel call takes */
    for (int c = lo; c < hi; c += ATTN_CHUNK)
        for (int i = b->i0; i < b->i1; i++) {
            const int a = KVF_MAX(b->jb[i - b->i0], c), e = KVF_MIN(KVF_MIN(b->je[i - b->i0], c + ATTN_CHUNK), hi);
            for (int h0 = b->h0; a < e && h0 < b->h1; h0 += step) {
                const int nh = KVF_MIN(step, b->h1 - h0);
                const float *q = blk_q(b, h0, i);
                float *out = blk_row(b, h0, i) + (a - b->j0);
                for (int k = 0; b->h->smooth && k < nh; k++)
                    shift[k] = b->p->scale * kv_head_smooth_query(b->h, d, q + k * d, qs + k * d);
                quant_kv_scores(b->h->type_k, d, (const uint8_t *)b->h->k + a * rb, e - a, b->h->smooth ? qs : q, d,
                                nh, b->p->scale, out, ldo);
                for (int k = 0; b->h->smooth && k < nh; k++)
                    for (int j = 0; j < e - a; j++) out[(size_t)k * ldo + j] += shift[k];
            }
        }
}

/* Head hh's row of query i: softmaxed over exactly the entries the query
 * sees, so that its numbers do not depend on entries it cannot see (a
 * sliding-window layer gives the same weights whether or not it has freed
 * what fell out of its window); the statistics are taken from it. The
 * block products read the row's other columns, zeroed; the dot-product
 * path adds to the output, zeroed. */
static void blk_weights(const struct blk *b, int hh, int i, const struct stats_part *sp) {
    const struct attn_params *p = b->p;
    const int b0 = b->jb[i - b->i0], n = b->je[i - b->i0] - b0;
    float *row = blk_row(b, hh, i), *r = row + (b0 - b->j0); /* the weights of entries [b0, b0 + n) */
    if (b->blocked) {
        memset(row, 0, sizeof(float) * (size_t)(b0 - b->j0));
        memset(r + n, 0, sizeof(float) * (size_t)(b->jend - b0 - n));
    } else {
        memset(blk_out(b, hh, i), 0, sizeof(float) * p->head_dim);
    }
    if (n == 0)
        return;
    double sum;
    const float mx = ops_softmax_sum(r, n, &sum);
    /* n-softmax exp(x)/(n + sum exp(x)) = softmax * S / (S + n e^-max), S = sum exp(x - max). */
    if (sp) {
        const int group = p->n_head / p->n_head_kv;
        const float nsm = (float)(sum / (sum + sp->st->nsm_n * exp(-(double)mx)));
        stats_row(sp, hh, group, i, r, b0, n, nsm, b->h->tag);
    }
    if (p->nsm_n > 0) {
        const float nsm = (float)(sum / (sum + p->nsm_n * exp(-(double)mx)));
        vec_scale(r, nsm, n);
    }
}

/* The dot-product path's output columns [c0, c1) (whole blocks of the
 * cache type): axpys of the value rows, ATTN_CHUNK entries at a time, each
 * column's sum in entry order whatever the columns taken. */
static void blk_axpys(const struct blk *b, int c0, int c1) {
    const int d = b->p->head_dim;
    const size_t rb = dtype_row_bytes(b->h->type_v, d), ldw = (size_t)(b->i1 - b->i0) * b->lds;
    const uint8_t *vr = (const uint8_t *)b->h->v + dtype_row_bytes(b->h->type_v, c0);
    for (int c = b->j0; c < b->jend; c += ATTN_CHUNK)
        for (int i = b->i0; i < b->i1; i++) {
            const int a = KVF_MAX(b->jb[i - b->i0], c), e = KVF_MIN(b->je[i - b->i0], c + ATTN_CHUNK);
            if (a < e)
                quant_kv_mix(b->h->type_v, blk_out(b, b->h0, i) + c0, (size_t)d, blk_row(b, b->h0, i) + (a - b->j0),
                             ldw, b->h1 - b->h0, vr + a * rb, rb, e - a, c1 - c0);
        }
}

/* One block of queries against kv head h: scores = scale * Q K^T over the
 * columns some query of the block sees, softmaxed row by row (blk_weights),
 * then O = S V. Blocks of ATTN_BLOCK_MIN_ROWS queries or more take one head
 * (h1 = h0 + 1) and the two block products (tile_scores,
 * tile_mix); smaller ones take dot products and axpys on the stored
 * rows, every head of the group in one call. s: scratch for the rows. */
static void attn_block(const struct attn_params *p, const float *q, const int32_t *qpos, int i0, int i1, int h0,
                       int h1, const struct kv_head *h, float *out, float *s, struct head_pack *pack,
                       const struct stats_part *sp) {
    const int d = p->head_dim, qstride = p->n_head * d, nb = i1 - i0;
    struct blk b;
    blk_init(&b, p, q, qpos, out, i0, i1, h0, h1, h);
    b.s = s, b.lds = (size_t)(b.jend - b.j0);
    const float *V = h->v;
    if (b.blocked) {
        head_pack_fill(pack, h, d, b.jend);
        if (h->type_v != DT_F32)
            V = pack->v;
        tile_scores(d, blk_q(&b, h0, i0), qstride, nb, pack->kp + (size_t)b.j0 * d, (int)b.lds, p->scale, s,
                    b.lds);
    } else {
        blk_dots(&b, b.j0, b.jend);
    }
    for (int hh = h0; hh < h1; hh++)
        for (int i = i0; i < i1; i++) blk_weights(&b, hh, i, sp);
    if (b.blocked)
        tile_mix(d, s + (b.jv - b.j0), b.lds, nb, V + (size_t)b.jv * d, b.jend - b.jv, blk_out(&b, h0, i0),
                 qstride);
    else
        blk_axpys(&b, 0, d);
}

/* Thread th's part [lo, hi) of kv head g's entries [0, jend - j0) of its
 * block (columns: its output columns [0, head_dim)), when those of every
 * head, cut in units of `unit`, are shared among the threads in equal runs. */
static bool blk_share(const struct blk *blk, int n_head_kv, bool columns, int unit, int g, int th, int n_threads,
                      int *lo, int *hi) {
    int64_t total = 0, off = 0, mine = 0;
    int len = 0;
    for (int k = 0; k < n_head_kv; k++) {
        const int n = columns ? blk[k].p->head_dim : blk[k].jend - blk[k].j0;
        const int64_t units = (n + unit - 1) / unit;
        off += k < g ? units : 0;
        if (k == g)
            len = n, mine = units;
        total += units;
    }
    const int64_t a = total * th / n_threads, e = total * (th + 1) / n_threads;
    *lo = (int)(KVF_MAX(a, off) - off) * unit;
    *hi = (int)KVF_MIN((int64_t)len, (KVF_MIN(e, off + mine) - off) * unit);
    return *lo < *hi;
}

/* Entries a unit of the scores step, and the least columns one of the
 * outputs (a Q8_0 block is 32). */
#define SPLIT_ENTRIES 16
#define SPLIT_COLUMNS 16

/* Decoding when the kv heads do not share out evenly among the threads
 * (Gemma 3 270M's one, SmolLM2's three on two): every thread takes an equal
 * part of each step, the steps apart by barriers, over blk[g] for each kv
 * head g (dot-product blocks of all the call's queries and the group's
 * heads): the scores of all heads' entries; the rows' softmaxes
 * (blk_weights); the outputs' columns. Every score, weight, statistic and
 * output element is computed as in attn_block, so the result is the same
 * bits on any number of threads. Called by every thread of the team. */
static void attn_split(const struct blk *blk, int th, int n_threads, const struct stats_part *sp) {
    const struct attn_params *p = blk[0].p;
    const int n_head_kv = p->n_head_kv, nb = blk[0].i1 - blk[0].i0, group = p->n_head / p->n_head_kv;
    const int cols = KVF_MAX(SPLIT_COLUMNS, dtype_get(blk[0].h->type_v)->block);
    int lo, hi;
    for (int g = 0; g < n_head_kv; g++)
        if (blk_share(blk, n_head_kv, false, SPLIT_ENTRIES, g, th, n_threads, &lo, &hi))
            blk_dots(&blk[g], blk[g].j0 + lo, blk[g].j0 + hi);
    #pragma omp barrier
    /* With statistics, whole kv heads: a head's partial sums then sit in one
     * thread's array, added in the one-thread order (attn_forward folds the
     * others' zeros), so they too keep their bits on any number of threads. */
    const int per = sp ? group * nb : 1, units = p->n_head * nb / per;
    for (int r = units * th / n_threads * per; r < units * (th + 1) / n_threads * per; r++)
        blk_weights(&blk[r / nb / group], r / nb, blk[0].i0 + r % nb, sp);
    #pragma omp barrier
    for (int g = 0; g < n_head_kv; g++)
        if (blk_share(blk, n_head_kv, true, cols, g, th, n_threads, &lo, &hi))
            blk_axpys(&blk[g], lo, hi);
}

enum kvf_status attn_forward(const struct attn_params *p, const float *q, const int32_t *qpos, int n_q,
                             const struct kv_head *kv, float *out, float *scratch, int n_threads,
                             const struct attn_stats *stats) {
    const int group = p->n_head / p->n_head_kv;
    const int n_blocks = (n_q + ATTN_BLOCK - 1) / ATTN_BLOCK;
    /* Small blocks (decoding) take every query head of a kv head at once
     * (attn_block), as many rows as a thread's scratch holds. */
    const int heads = n_q < ATTN_BLOCK_MIN_ROWS && group * n_q <= ATTN_BLOCK ? group : 1;
    const int n_tasks = p->n_head / heads * n_blocks;
    int n_kv_max = 1;
    for (int g = 0; g < p->n_head_kv; g++) n_kv_max = KVF_MAX(n_kv_max, kv[g].n);
    if (stats && stats->stride < n_kv_max)
        return err_set(KVF_ERR_INTERNAL, "attention statistics of stride %d for %d entries", stats->stride, n_kv_max);
    /* Decoding with a number of kv heads the threads do not divide (fewer
     * than the threads included) shares every head among the threads
     * (attn_split), its score rows in the whole scratch. */
    struct blk *split = NULL;
    if (n_q > 0 && n_q < ATTN_BLOCK_MIN_ROWS && p->n_head_kv % n_threads != 0 &&
        (size_t)p->n_head * n_q <= (size_t)n_threads * ATTN_BLOCK) {
        if (!(split = malloc(sizeof *split * p->n_head_kv)))
            return err_set(KVF_ERR_NOMEM, "out of memory for attention");
        for (int g = 0; g < p->n_head_kv; g++) {
            blk_init(&split[g], p, q, qpos, out, 0, n_q, g * group, (g + 1) * group, &kv[g]);
            split[g].s = scratch + (size_t)g * group * n_q * n_kv_max, split[g].lds = (size_t)n_kv_max;
        }
    }

    /* Threads add into private partial sums (blocks of one head run on
     * several threads), folded into the caller's arrays at the end; only the
     * requested statistics, over the entries there are. */
    int slot[ATTN_STAT_N], n_req = 0;
    for (int k = 0; stats && k < ATTN_STAT_N; k++) slot[k] = stats->a[k] ? n_req++ : -1;
    float *parts = NULL;
    const size_t part_len = (size_t)n_req * p->n_head_kv * (size_t)n_kv_max;
    if (stats && !(parts = calloc((size_t)n_threads * part_len + 1, sizeof(float)))) {
        free(split);
        return err_set(KVF_ERR_NOMEM, "out of memory for attention statistics");
    }
    /* Packed keys (and float32 values stored in another type) for the block
     * products: O(threads x entries x head_dim), allocated only when a block
     * will use them; 64-byte aligned, so that every panel load is. */
    float *rows = NULL;
    const size_t pan_len = ((size_t)n_kv_max + TILE_PANEL - 1) / TILE_PANEL * TILE_PANEL * p->head_dim;
    const size_t copy_len = kv[0].type_k != DT_F32 || kv[0].type_v != DT_F32
                              ? ((size_t)n_kv_max + TILE_PANEL) * p->head_dim : 0;
    const size_t rows_len = (pan_len + copy_len + 15) / 16 * 16;
    if (n_q >= ATTN_BLOCK_MIN_ROWS &&
        !(rows = aligned_alloc(64, (size_t)n_threads * rows_len * sizeof(float)))) {
        free(parts);
        free(split);
        return err_set(KVF_ERR_NOMEM, "out of memory for attention rows (%d entries)", n_kv_max);
    }

    #pragma omp parallel num_threads(n_threads)
    {
        const int th = omp_get_thread_num();
        /* NULL + an offset is undefined behaviour: decoding allocates nothing. */
        float *mine = rows ? rows + (size_t)th * rows_len : NULL;
        const bool staged = mine && copy_len;
        struct head_pack pack = {NULL, 0, mine, staged ? mine + pan_len : NULL,
                                 staged ? mine + pan_len + (size_t)n_kv_max * p->head_dim : NULL};
        float *s = scratch + (size_t)th * ATTN_BLOCK * n_kv_max;
        /* No statistics: parts is NULL. */
        const struct stats_part sp = {stats, parts ? parts + (size_t)th * part_len : NULL, p->n_head_kv, n_kv_max,
                                      slot};
#define ATTN_TASK(t) \
    attn_block(p, q, qpos, ((t) % n_blocks) * ATTN_BLOCK, KVF_MIN(n_q, ((t) % n_blocks + 1) * ATTN_BLOCK), \
               (t) / n_blocks * heads, ((t) / n_blocks + 1) * heads, &kv[(t) / n_blocks * heads / group], out, s, \
               &pack, stats ? &sp : NULL)
        /* A thread's partial sums hold the tasks it ran: a fixed share of
         * them keeps the statistics the same from run to run (a dynamic one
         * rounds them differently each time). */
        if (split) { /* by the team OpenMP gave (one thread when nested) */
            attn_split(split, th, omp_get_num_threads(), stats ? &sp : NULL);
        } else if (stats) {
            #pragma omp for schedule(static, 1)
            for (int t = 0; t < n_tasks; t++) ATTN_TASK(t);
        } else {
            #pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < n_tasks; t++) ATTN_TASK(t);
        }
#undef ATTN_TASK
    }
    for (int k = 0; stats && k < ATTN_STAT_N; k++) {
        if (!stats->a[k]) continue;
        for (int th = 0; th < n_threads; th++) {
            const struct stats_part sp = {stats, parts + (size_t)th * part_len, p->n_head_kv, n_kv_max, slot};
            for (int g = 0; g < p->n_head_kv; g++) {
                const float *src = part_array(&sp, k, g);
                float *dst = stats->a[k] + (size_t)g * stats->stride;
                if (k == ATTN_STAT_MAX) {
                    for (int j = 0; j < kv[g].n; j++) dst[j] = src[j] > dst[j] ? src[j] : dst[j];
                    continue;
                }
                #pragma omp simd
                for (int j = 0; j < kv[g].n; j++) dst[j] += src[j];
            }
        }
    }
    free(parts);
    free(rows);
    free(split);
    return KVF_OK;
}
