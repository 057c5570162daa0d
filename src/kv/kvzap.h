/* KVzap's scorer (Jegou and Jeblick, NVIDIA 2026, arXiv:2601.07891): per
 * layer, a linear map from the layer's attention input (the hidden state
 * after the layer's input norm, as the attention projections read it) to a
 * score for each kv head, fitted to KVzip+'s log scores by `kvfold
 * calibrate` (session/kvzap_fit.c). An entry is scored once, as it is
 * written; the rule kvzap (kv/policy/kvzap.c) ranks by that score.
 *
 * The file is a GGUF of its own (read as untrusted input, as model files
 * are): keys kvzap.version, kvzap.layers, kvzap.embd, kvzap.heads_kv,
 * kvzap.model.digest (the model's, as session files name it), kvzap.crc32
 * (of the weights' and the biases' bytes), and the fit's record
 * (kvzap.samples, kvzap.rows, kvzap.alpha, kvzap.span, kvzap.r2 and
 * kvzap.spearman per layer); tensors kvzap.weight F32 [layers][heads_kv][embd]
 * and kvzap.bias F32 [layers][heads_kv]. */
#ifndef KVF_KV_KVZAP_H
#define KVF_KV_KVZAP_H

#include "core/common.h"
#include "core/ops.h"
#include "kv/stat.h"

#define KVZAP_VERSION 1

struct kv_zap {
    int n_layer, n_embd, n_head_kv;
    uint32_t digest;  /* the model's it was fitted on */
    uint32_t crc;     /* CRC-32 of w's and b's bytes (set by kv_zap_load, kv_zap_save): its identity */
    float *w;         /* [n_layer][n_head_kv][n_embd], owned */
    float *b;         /* [n_layer][n_head_kv], owned */
    struct weight *layer; /* [n_layer] each layer's w as an F32 weight of n_head_kv rows (ops_matmul), owned */
    /* The fit's record (written by the calibration, read back for `kvfold info`-like reports). */
    int samples, span;
    int64_t rows;
    float alpha;
    float *r2, *spearman; /* [n_layer] held-out fit per layer (NaN: not measured), owned */
};

/* An empty scorer of the given shape, every weight 0. */
enum kvf_status kv_zap_init(struct kv_zap *z, int n_layer, int n_embd, int n_head_kv, uint32_t digest);
void kv_zap_free(struct kv_zap *z);
/* Reads a scorer file for a model of n_layer layers, n_embd widths and
 * n_head_kv kv heads whose digest is `digest`: KVF_ERR_FORMAT for a file
 * that is not one (or damaged: shapes, checksum, values that are not
 * finite), KVF_ERR_INVALID_ARG for one fitted on another model. */
enum kvf_status kv_zap_load(const char *path, int n_layer, int n_embd, int n_head_kv, uint32_t digest,
                            struct kv_zap *out);
/* The same from a buffer (tests, fuzzing). */
enum kvf_status kv_zap_load_buffer(const void *buf, size_t size, int n_layer, int n_embd, int n_head_kv,
                                   uint32_t digest, struct kv_zap *out);
enum kvf_status kv_zap_save(struct kv_zap *z, const char *path);
/* Whether two scorers score alike (the same shape and weights). */
bool kv_zap_same(const struct kv_zap *a, const struct kv_zap *b);
/* dst gets a copy of src (an empty src: an empty dst). */
enum kvf_status kv_zap_copy(struct kv_zap *dst, const struct kv_zap *src);
/* Layer l's scores of n rows x ([n][n_embd]) into out [n][n_head_kv]: the
 * product of z->layer[l] (ops_matmul, as the decoder runs it, on one
 * thread here), plus the biases. */
enum kvf_status kv_zap_score(const struct kv_zap *z, int l, const float *x, int n, float *out);

/* A ridge regression of H targets on E inputs, gathered pair by pair in
 * double precision and solved in closed form: scikit-learn's Ridge (the
 * data centred, so the intercept is not penalised): w = (Xc^T Xc + alpha
 * I)^-1 Xc^T yc, b = mean y - w . mean x. */
struct kv_ridge {
    int E, H;
    int64_t n;
    double *sxx, *sx, *sy, *sxy; /* [E][E] (upper triangle), [E], [H], [E][H] */
    double *xd;                  /* [rows][E] work space for kv_ridge_add */
    int rows;
};
enum kvf_status kv_ridge_init(struct kv_ridge *r, int E, int H);
void kv_ridge_free(struct kv_ridge *r);
/* Adds n pairs: x [n][E], y [n][H]. */
enum kvf_status kv_ridge_add(struct kv_ridge *r, const float *x, const float *y, int n);
/* w [H][E], b [H]; KVF_ERR_INTERNAL when the system is not positive definite. */
enum kvf_status kv_ridge_solve(const struct kv_ridge *r, double alpha, float *w, float *b);

/* The fit's statistics over n pairs (y: the targets, f: the fit's):
 * R^2 = 1 - sum (y - f)^2 / sum (y - mean y)^2 (NaN when y is constant),
 * and Spearman's rank correlation (ties take their mean rank; NaN when
 * either is constant). work: [2n] floats, iwork: [n] ints. */
double kv_zap_r2(const float *y, const float *f, int64_t n);
double kv_zap_spearman(const float *y, const float *f, int64_t n, float *work, int *iwork);

/* The rule kvzap's statistic: the scorer the policy names (or the one
 * beside the model), writing each entry's score (kv/stat.h). */
extern const struct kv_stat_ops kv_stat_zap;

#endif
