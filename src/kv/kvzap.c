#include "kv/kvzap.h"

#include "core/quant.h"
#include "io/gguf.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

enum kvf_status kv_zap_init(struct kv_zap *z, int n_layer, int n_embd, int n_head_kv, uint32_t digest) {
    *z = (struct kv_zap){ .n_layer = n_layer, .n_embd = n_embd, .n_head_kv = n_head_kv, .digest = digest };
    const size_t heads = (size_t)n_layer * n_head_kv;
    z->w = calloc(heads * n_embd, sizeof(float));
    z->b = calloc(heads, sizeof(float));
    z->r2 = malloc(sizeof(float) * (size_t)n_layer);
    z->spearman = malloc(sizeof(float) * (size_t)n_layer);
    z->layer = calloc((size_t)n_layer, sizeof *z->layer);
    if (!z->w || !z->b || !z->r2 || !z->spearman || !z->layer) {
        kv_zap_free(z);
        return err_set(KVF_ERR_NOMEM, "out of memory for a KVzap scorer");
    }
    for (int l = 0; l < n_layer; l++) {
        z->r2[l] = z->spearman[l] = NAN;
        z->layer[l] = (struct weight){.type = DT_F32, .rows = n_head_kv, .cols = n_embd,
                                      .row_bytes = sizeof(float) * (size_t)n_embd,
                                      .data = z->w + (size_t)l * n_head_kv * n_embd};
    }
    return KVF_OK;
}

void kv_zap_free(struct kv_zap *z) {
    free(z->w);
    free(z->b);
    free(z->r2);
    free(z->spearman);
    free(z->layer);
    memset(z, 0, sizeof *z);
}

static uint32_t zap_crc(const struct kv_zap *z) {
    const size_t heads = (size_t)z->n_layer * z->n_head_kv;
    uLong c = crc32_z(0L, (const Bytef *)z->w, heads * z->n_embd * sizeof(float));
    return (uint32_t)crc32_z(c, (const Bytef *)z->b, heads * sizeof(float));
}

static enum kvf_status bad(const char *why) { return err_set(KVF_ERR_FORMAT, "KVzap scorer file: %s", why); }

/* A tensor of F32 values of exactly the given shape, or NULL. */
static const float *tensor_f32(const struct gguf_file *f, const char *name, int n_dims, const int64_t *ne) {
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t || t->type != DT_F32 || t->n_dims != n_dims || !t->data) return NULL;
    for (int i = 0; i < n_dims; i++)
        if (t->ne[i] != ne[i]) return NULL;
    return t->data;
}

/* A per-layer F32 array of the fit's record into out[n] (NaN when absent). */
static void record_arr(const struct gguf_file *f, const char *key, int n, float *out) {
    const struct gguf_value *a = gguf_get_arr(f, key, GGUF_F32);
    for (int l = 0; l < n; l++) {
        float x = NAN;
        if (a && a->arr.n == (uint64_t)n) memcpy(&x, (const float *)a->arr.data + l, sizeof x);
        out[l] = x;
    }
}

static enum kvf_status zap_read(struct gguf_file *f, int n_layer, int n_embd, int n_head_kv, uint32_t digest,
                                struct kv_zap *out) {
    uint32_t version, layers, embd, heads, file_digest, crc;
    if (!gguf_get_u32(f, "kvzap.version", &version)) return bad("no kvzap.version (not a scorer file)");
    if (version != KVZAP_VERSION)
        return err_set(KVF_ERR_UNSUPPORTED, "KVzap scorer file: version %u (this build reads %d)", version,
                       KVZAP_VERSION);
    if (!gguf_get_u32(f, "kvzap.layers", &layers) || !gguf_get_u32(f, "kvzap.embd", &embd) ||
        !gguf_get_u32(f, "kvzap.heads_kv", &heads) || !gguf_get_u32(f, "kvzap.model.digest", &file_digest) ||
        !gguf_get_u32(f, "kvzap.crc32", &crc))
        return bad("a shape, the model's digest or the checksum is missing");
    if (layers != (uint32_t)n_layer || embd != (uint32_t)n_embd || heads != (uint32_t)n_head_kv ||
        file_digest != digest)
        return err_set(KVF_ERR_INVALID_ARG,
                       "KVzap scorer file: fitted on another model (%u layers, width %u, %u kv heads, digest %08x; "
                       "this one: %d, %d, %d, %08x); make one with `kvfold calibrate`",
                       layers, embd, heads, file_digest, n_layer, n_embd, n_head_kv, digest);
    const int64_t wne[3] = { n_embd, n_head_kv, n_layer }, bne[2] = { n_head_kv, n_layer };
    const float *w = tensor_f32(f, "kvzap.weight", 3, wne), *b = tensor_f32(f, "kvzap.bias", 2, bne);
    if (!w || !b) return bad("kvzap.weight or kvzap.bias is missing or of the wrong type or shape");
    enum kvf_status st = kv_zap_init(out, n_layer, n_embd, n_head_kv, digest);
    if (st != KVF_OK) return st;
    const size_t nh = (size_t)n_layer * n_head_kv;
    memcpy(out->w, w, sizeof(float) * nh * n_embd);
    memcpy(out->b, b, sizeof(float) * nh);
    out->crc = zap_crc(out);
    st = out->crc != crc ? bad("the checksum of its weights does not match (damaged)") : KVF_OK;
    for (size_t i = 0; st == KVF_OK && i < nh * n_embd; i++)
        if (!isfinite(out->w[i])) st = bad("a weight is not finite");
    for (size_t i = 0; st == KVF_OK && i < nh; i++)
        if (!isfinite(out->b[i])) st = bad("a bias is not finite");
    if (st != KVF_OK) {
        kv_zap_free(out);
        return st;
    }
    uint32_t u;
    int64_t rows;
    float alpha;
    out->samples = gguf_get_u32(f, "kvzap.samples", &u) ? (int)KVF_MIN(u, (uint32_t)INT32_MAX) : 0;
    out->span = gguf_get_u32(f, "kvzap.span", &u) ? (int)KVF_MIN(u, (uint32_t)INT32_MAX) : 0;
    out->rows = gguf_get_i64(f, "kvzap.rows", &rows) ? rows : 0;
    out->alpha = gguf_get_f32(f, "kvzap.alpha", &alpha) ? alpha : NAN;
    record_arr(f, "kvzap.r2", n_layer, out->r2);
    record_arr(f, "kvzap.spearman", n_layer, out->spearman);
    return KVF_OK;
}

enum kvf_status kv_zap_load(const char *path, int n_layer, int n_embd, int n_head_kv, uint32_t digest,
                            struct kv_zap *out) {
    memset(out, 0, sizeof *out);
    struct gguf_file *f = NULL;
    enum kvf_status st = gguf_open(path, &f);
    if (st != KVF_OK) return st;
    st = zap_read(f, n_layer, n_embd, n_head_kv, digest, out);
    gguf_close(f);
    return st;
}

enum kvf_status kv_zap_load_buffer(const void *buf, size_t size, int n_layer, int n_embd, int n_head_kv,
                                   uint32_t digest, struct kv_zap *out) {
    memset(out, 0, sizeof *out);
    struct gguf_file *f = NULL;
    enum kvf_status st = gguf_open_buffer(buf, size, &f);
    if (st != KVF_OK) return st;
    st = zap_read(f, n_layer, n_embd, n_head_kv, digest, out);
    gguf_close(f);
    return st;
}

enum kvf_status kv_zap_save(struct kv_zap *z, const char *path) {
    z->crc = zap_crc(z);
    struct gguf_writer *w = gguf_writer_init();
    if (!w) return err_set(KVF_ERR_NOMEM, "out of memory");
    gguf_writer_set_str(w, "general.type", "kvzap");
    gguf_writer_set_u32(w, "kvzap.version", KVZAP_VERSION);
    gguf_writer_set_u32(w, "kvzap.layers", (uint32_t)z->n_layer);
    gguf_writer_set_u32(w, "kvzap.embd", (uint32_t)z->n_embd);
    gguf_writer_set_u32(w, "kvzap.heads_kv", (uint32_t)z->n_head_kv);
    gguf_writer_set_u32(w, "kvzap.model.digest", z->digest);
    gguf_writer_set_u32(w, "kvzap.crc32", z->crc);
    gguf_writer_set_u32(w, "kvzap.samples", (uint32_t)z->samples);
    gguf_writer_set_u32(w, "kvzap.span", (uint32_t)z->span);
    gguf_writer_set_u32(w, "kvzap.rows", (uint32_t)KVF_MIN(z->rows, (int64_t)UINT32_MAX));
    gguf_writer_set_f32(w, "kvzap.alpha", z->alpha);
    gguf_writer_set_arr(w, "kvzap.r2", GGUF_F32, z->r2, (uint64_t)z->n_layer);
    gguf_writer_set_arr(w, "kvzap.spearman", GGUF_F32, z->spearman, (uint64_t)z->n_layer);
    const int64_t wne[3] = { z->n_embd, z->n_head_kv, z->n_layer }, bne[2] = { z->n_head_kv, z->n_layer };
    gguf_writer_add_tensor(w, "kvzap.weight", DT_F32, 3, wne, z->w);
    gguf_writer_add_tensor(w, "kvzap.bias", DT_F32, 2, bne, z->b);
    const enum kvf_status st = gguf_writer_write(w, path);
    gguf_writer_free(w);
    return st;
}

bool kv_zap_same(const struct kv_zap *a, const struct kv_zap *b) {
    const size_t heads = (size_t)a->n_layer * a->n_head_kv;
    return a->n_layer == b->n_layer && a->n_embd == b->n_embd && a->n_head_kv == b->n_head_kv &&
        (heads == 0 ||
         (!memcmp(a->w, b->w, sizeof(float) * heads * a->n_embd) && !memcmp(a->b, b->b, sizeof(float) * heads)));
}

enum kvf_status kv_zap_copy(struct kv_zap *dst, const struct kv_zap *src) {
    memset(dst, 0, sizeof *dst);
    if (src->n_layer == 0) return KVF_OK;
    enum kvf_status st = kv_zap_init(dst, src->n_layer, src->n_embd, src->n_head_kv, src->digest);
    if (st != KVF_OK) return st;
    const size_t heads = (size_t)src->n_layer * src->n_head_kv;
    memcpy(dst->w, src->w, sizeof(float) * heads * src->n_embd);
    memcpy(dst->b, src->b, sizeof(float) * heads);
    memcpy(dst->r2, src->r2, sizeof(float) * (size_t)src->n_layer);
    memcpy(dst->spearman, src->spearman, sizeof(float) * (size_t)src->n_layer);
    dst->crc = src->crc, dst->samples = src->samples, dst->span = src->span, dst->rows = src->rows;
    dst->alpha = src->alpha;
    return KVF_OK;
}

enum kvf_status kv_zap_score(const struct kv_zap *z, int l, const float *x, int n, float *out) {
    void *scratch = malloc(ops_matmul_scratch_bytes(z->n_embd, n, 1));
    if (!scratch) return err_set(KVF_ERR_NOMEM, "out of memory for KVzap's scores");
    ops_matmul(&z->layer[l], x, n, out, scratch, 1);
    free(scratch);
    for (int t = 0; t < n; t++)
        for (int g = 0; g < z->n_head_kv; g++) out[(size_t)t * z->n_head_kv + g] += z->b[(size_t)l * z->n_head_kv + g];
    return KVF_OK;
}

double kv_zap_r2(const float *y, const float *f, int64_t n) {
    double mean = 0, res = 0, tot = 0;
    for (int64_t i = 0; i < n; i++) mean += y[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) res += ((double)y[i] - f[i]) * ((double)y[i] - f[i]);
    for (int64_t i = 0; i < n; i++) tot += ((double)y[i] - mean) * ((double)y[i] - mean);
    return tot > 0 ? 1.0 - res / tot : NAN;
}

static int by_value(const void *a, const void *b, void *v) {
    const float x = ((const float *)v)[*(const int *)a], y = ((const float *)v)[*(const int *)b];
    return (x > y) - (x < y);
}

/* The ranks (1-based, ties their mean) of v[0..n) into r; idx: [n]. */
static void ranks(const float *v, int64_t n, float *r, int *idx) {
    for (int64_t i = 0; i < n; i++) idx[i] = (int)i;
    qsort_r(idx, (size_t)n, sizeof *idx, by_value, (void *)v);
    for (int64_t i = 0, e; i < n; i = e) {
        for (e = i + 1; e < n && v[idx[e]] == v[idx[i]];) e++;
        for (int64_t k = i; k < e; k++) r[idx[k]] = (float)((double)(i + 1 + e) / 2.0);
    }
}

double kv_zap_spearman(const float *y, const float *f, int64_t n, float *work, int *iwork) {
    float *ry = work, *rf = work + n;
    ranks(y, n, ry, iwork);
    ranks(f, n, rf, iwork);
    double my = 0, mf = 0, sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < n; i++) my += ry[i], mf += rf[i];
    my /= (double)n, mf /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        sxy += (ry[i] - my) * (rf[i] - mf);
        sxx += (ry[i] - my) * (ry[i] - my);
        syy += (rf[i] - mf) * (rf[i] - mf);
    }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

/* LAPACK (in OpenBLAS, which Debian's libopenblas ships; it has no header
 * for it): solves A X = B for a symmetric positive definite A. */
extern void dposv_(const char *uplo, const int *n, const int *nrhs, double *a, const int *lda, double *b,
                   const int *ldb, int *info);

enum kvf_status kv_ridge_init(struct kv_ridge *r, int E, int H) {
    *r = (struct kv_ridge){ .E = E, .H = H };
    r->sxx = calloc((size_t)E * E, sizeof(double));
    r->sx = calloc((size_t)E, sizeof(double));
    r->sy = calloc((size_t)H, sizeof(double));
    r->sxy = calloc((size_t)E * H, sizeof(double));
    if (r->sxx && r->sx && r->sy && r->sxy) return KVF_OK;
    kv_ridge_free(r);
    return err_set(KVF_ERR_NOMEM, "out of memory for a regression of %d inputs (%zu MB)", E,
                   (size_t)E * E * sizeof(double) >> 20);
}

void kv_ridge_free(struct kv_ridge *r) {
    free(r->sxx);
    free(r->sx);
    free(r->sy);
    free(r->sxy);
    free(r->xd);
    memset(r, 0, sizeof *r);
}

enum kvf_status kv_ridge_add(struct kv_ridge *r, const float *x, const float *y, int n) {
    const int E = r->E, H = r->H;
    if (n > r->rows) {
        double *xd = realloc(r->xd, sizeof(double) * (size_t)n * E);
        if (!xd) return err_set(KVF_ERR_NOMEM, "out of memory for a regression's rows");
        r->xd = xd, r->rows = n;
    }
    for (size_t i = 0; i < (size_t)n * E; i++) r->xd[i] = x[i];
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, E, n, 1.0, r->xd, E, 1.0, r->sxx, E);
    for (int i = 0; i < n; i++) {
        const double *xi = r->xd + (size_t)i * E;
        for (int e = 0; e < E; e++) r->sx[e] += xi[e];
        for (int g = 0; g < H; g++) {
            const double yg = y[(size_t)i * H + g];
            r->sy[g] += yg;
            for (int e = 0; e < E; e++) r->sxy[(size_t)e * H + g] += xi[e] * yg;
        }
    }
    r->n += n;
    return KVF_OK;
}

enum kvf_status kv_ridge_solve(const struct kv_ridge *r, double alpha, float *w, float *b) {
    const int E = r->E, H = r->H;
    const double n = (double)r->n;
    if (r->n == 0) return err_set(KVF_ERR_INTERNAL, "a regression without data");
    double *a = malloc(sizeof(double) * (size_t)E * E), *c = malloc(sizeof(double) * (size_t)E * H);
    enum kvf_status st = a && c ? KVF_OK : err_set(KVF_ERR_NOMEM, "out of memory for a regression");
    if (st == KVF_OK) {
        /* Centred: X^T X - n mu mu^T + alpha I, and X^T y - n mu ybar^T (c column-major: [H][E]). */
        for (int i = 0; i < E; i++)
            for (int j = i; j < E; j++)
                a[(size_t)i * E + j] = a[(size_t)j * E + i] =
                    r->sxx[(size_t)i * E + j] - r->sx[i] * r->sx[j] / n + (i == j ? alpha : 0.0);
        for (int g = 0; g < H; g++)
            for (int e = 0; e < E; e++) c[(size_t)g * E + e] = r->sxy[(size_t)e * H + g] - r->sx[e] * r->sy[g] / n;
        int info = 0;
        dposv_("U", &E, &H, a, &E, c, &E, &info);
        if (info != 0) st = err_set(KVF_ERR_INTERNAL, "a regression that could not be solved (LAPACK info %d)", info);
    }
    for (int g = 0; st == KVF_OK && g < H; g++) {
        double dot = 0;
        for (int e = 0; e < E; e++) {
            w[(size_t)g * E + e] = (float)c[(size_t)g * E + e];
            dot += c[(size_t)g * E + e] * r->sx[e] / n;
        }
        b[g] = (float)(r->sy[g] / n - dot);
    }
    free(a);
    free(c);
    return st;
}

/* As the rule kvzap's statistic (kv/stat.h): the scorer, which writes each
 * entry's score (kv_head.prior) as the decoder appends it, in the prompt,
 * in a rule's pass and while decoding. */
static enum kvf_status stat_init(void **st, const struct kv_stat_in *in) {
    const char *path = in->scorer && in->scorer[0] ? in->scorer : in->beside;
    if (!path || access(path, F_OK) != 0)
        return err_set(KVF_ERR_IO,
                       "kvzap: no scorer file '%s'; make one with `kvfold calibrate -m MODEL --corpus "
                       "FILE...` (or name one: kvzap:scorer=FILE)",
                       path ? path : "");
    struct kv_zap *z = malloc(sizeof *z);
    if (!z) return err_set(KVF_ERR_NOMEM, "out of memory for a KVzap scorer");
    const enum kvf_status e = kv_zap_load(path, in->n_layer, in->n_embd, in->n_head_kv, in->digest, z);
    if (e != KVF_OK) free(z);
    else *st = z;
    return e;
}

static enum kvf_status stat_dup(void **st, const void *src) {
    struct kv_zap *z = malloc(sizeof *z);
    if (!z) return err_set(KVF_ERR_NOMEM, "out of memory for a KVzap scorer");
    const enum kvf_status e = kv_zap_copy(z, src);
    if (e != KVF_OK) free(z);
    else *st = z;
    return e;
}

static void stat_free(void *st) {
    if (st) kv_zap_free(st);
    free(st);
}

/* The entries carry the scores: a fork keeps them when its scorer is the one that wrote them. */
static bool stat_agrees(const void *st, const void *src) { return kv_zap_same(st, src); }

/* The scorer's product into the call's work space, a batch at a time (the
 * weights' own kernel on the pass's threads), plus the biases. */
static enum kvf_status stat_written(const void *st, const struct kv_stat_rows *r) {
    const struct kv_zap *z = st;
    const int H = z->n_head_kv, l = r->layer;
    if (H > r->work_cols)
        return err_set(KVF_ERR_UNSUPPORTED, "kvzap: %d kv heads over %d columns of work space", H, r->work_cols);
    for (int i = 0; i < r->n; i += r->batch) {
        const int nb = KVF_MIN(r->batch, r->n - i);
        r->matmul(r->ctx, &z->layer[l], r->x + (size_t)i * z->n_embd, nb, r->work);
        for (int g = 0; g < H; g++) {
            struct kv_head *h = kv_cache_head(r->kv, l, g);
            float *prior = h->prior + h->n - r->n + i;
            for (int t = 0; t < nb; t++) prior[t] = r->work[(size_t)t * H + g] + z->b[(size_t)l * H + g];
        }
    }
    return KVF_OK;
}

static void stat_save(const void *st, const struct kv_stat_io *io) {
    const struct kv_zap *z = st;
    io->put(io->ctx, &z->crc, sizeof z->crc);
}

static enum kvf_status stat_load(void *st, const struct kv_stat_io *io) {
    const struct kv_zap *z = st;
    uint32_t crc;
    if (!io->get(io->ctx, &crc, sizeof crc)) return err_set(KVF_ERR_FORMAT, "session file: truncated in its scorer");
    if (crc != z->crc)
        return err_set(KVF_ERR_UNSUPPORTED,
                       "session file: its entries were scored by another KVzap scorer (%08x) than "
                       "the one its spec names now (%08x)",
                       crc, z->crc);
    return KVF_OK;
}

const struct kv_stat_ops kv_stat_zap = {
    .name = "the scores KVzap's scorer wrote as the prompt ran",
    .prior = true,
    .init = stat_init,
    .dup = stat_dup,
    .free = stat_free,
    .agrees = stat_agrees,
    .written = stat_written,
    .save = stat_save,
    .load = stat_load,
};
