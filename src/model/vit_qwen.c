/* Qwen2.5-VL's vision tower and patch merger (transformers'
 * Qwen2_5_VisionTransformerPretrainedModel).
 *
 *   image -> smart_resize to multiples of 28 within [min, max] pixels,
 *   Pillow's bicubic resize, CLIP normalisation -> 14 x 14 patches taken
 *   2 x 2 merge unit by merge unit (each patch's 3 x 14 x 14 values twice:
 *   an image is a video of two equal frames) -> patch embedding (the 3-D
 *   convolution, a matrix product) -> units reordered window by window
 *   (windows of window / 28 x window / 28 units) -> n_layer x (x +=
 *   proj(attn(RMSNorm1(x))) with 2-D rotary positions, within a window or,
 *   in the full-attention layers, over the whole image; x += down(silu(
 *   gate(n)) * up(n)), n = RMSNorm2(x)) -> merger: RMSNorm, each unit's 4
 *   rows as one, linear -> GELU -> linear -> units back in raster order.
 * A token per 2 x 2 unit: a (H / 28) x (W / 28) grid. */
#include "model/vit.h"

#include "attn/attn.h"
#include "core/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QVIT_MAX_DIM (1 << 16)
#define QVIT_MAX_LAYERS 256

static const char *qname(char *buf, size_t n, const char *prefix, const char *fmt, int layer) {
    const int k = snprintf(buf, n, "%s", prefix);
    snprintf(buf + k, n - (size_t)k, fmt, layer);
    return buf;
}

enum kvf_status qvit_load_hf(struct kvf_model *m, const char *dir, const struct tensor_src *src,
                             const struct hf_vision_config *cfg) {
    static const char *const prefixes[] = {"visual.", "model.visual."};
    char n[192];
    const char *p = NULL;
    for (int i = 0; i < 2; i++)
        if (tensor_exists(src, qname(n, sizeof n, prefixes[i], "patch_embed.proj.weight", 0))) p = prefixes[i];
    if (!p) return err_set(KVF_ERR_FORMAT, "%s: config.json describes Qwen2.5-VL's vision tower but no "
                           "'visual.patch_embed.proj.weight' tensor was found", dir);
    const int H = cfg->hidden_size, F = cfg->intermediate_size, L = cfg->num_hidden_layers;
    if (H <= 0 || H > QVIT_MAX_DIM || F <= 0 || F > QVIT_MAX_DIM || cfg->num_attention_heads <= 0 ||
        H % cfg->num_attention_heads != 0 || (H / cfg->num_attention_heads) % 4 != 0 || L <= 0 ||
        L > QVIT_MAX_LAYERS || cfg->patch_size <= 0 || cfg->patch_size > 64 || cfg->spatial_merge_size <= 0 ||
        cfg->spatial_merge_size > 8 || cfg->temporal_patch_size <= 0 || cfg->temporal_patch_size > 8 ||
        cfg->window_size <= 0 || cfg->window_size % (cfg->patch_size * cfg->spatial_merge_size) != 0)
        return err_set(KVF_ERR_FORMAT, "%s: Qwen2.5-VL vision sizes out of range (width %d, ff %d, heads %d, layers "
                       "%d, patch %d, merge %d, window %d; head width a multiple of 4)", dir, H, F,
                       cfg->num_attention_heads, L, cfg->patch_size, cfg->spatial_merge_size, cfg->window_size);
    if (strcmp(cfg->hidden_act, "silu") != 0)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: vision hidden_act '%s' (silu)", dir, cfg->hidden_act);
    for (int c = 0; c < 3; c++)
        if (!(cfg->image_std[c] > 0.0f) || !isfinite(cfg->image_mean[c]))
            return err_set(KVF_ERR_FORMAT, "%s: image mean/std out of range", dir);
    struct vision_model *v = calloc(1, sizeof *v);
    if (!v) return err_set(KVF_ERR_NOMEM, "out of memory");
    m->vision = v; /* freed with the model, whatever happens below */
    *v = (struct vision_model){
        .patch_size = cfg->patch_size, .n_embd = H, .n_head = cfg->num_attention_heads, .n_ff = F, .n_layer = L,
        .eps = cfg->layer_norm_eps, .act = VIT_GELU_ERF, .proj = VIT_PROJ_QWEN25VL, .merge = cfg->spatial_merge_size,
        .t_patch = cfg->temporal_patch_size, .window = cfg->window_size, .min_pixels = cfg->min_pixels,
        .max_pixels = cfg->max_pixels, .rope_theta = cfg->rope_theta,
    };
    memcpy(v->mean, cfg->image_mean, sizeof v->mean);
    memcpy(v->std, cfg->image_std, sizeof v->std);
    snprintf(v->source, sizeof v->source, "safetensors");
    v->qlayers = calloc((size_t)L, sizeof *v->qlayers);
    v->full = calloc((size_t)L, sizeof *v->full);
    if (!v->qlayers || !v->full) return err_set(KVF_ERR_NOMEM, "out of memory");
    for (int l = 0; l < L; l++) v->full[l] = cfg->full_attention[l];

    const int64_t patch = 3 * (int64_t)v->t_patch * v->patch_size * v->patch_size, M = (int64_t)H * v->merge * v->merge;
    const int64_t E = m->hp.n_embd;
    enum kvf_status st;
    /* [H][3][t_patch][p][p], its inner dimensions folded to four (model.c) */
    if ((st = weight_bind_nd(m, src, &v->patch, qname(n, sizeof n, p, "patch_embed.proj.weight", 0), H, patch, 4,
                             true)))
        return st;
    for (int l = 0; l < L; l++) {
        struct qvit_layer *q = &v->qlayers[l];
#define W(field, fmt, rows, cols) weight_bind(m, src, &q->field, qname(n, sizeof n, p, fmt, l), rows, cols, true)
#define V(field, fmt, len) weight_bind_vec(m, src, &q->field, qname(n, sizeof n, p, fmt, l), len, true, 0)
        if ((st = V(norm1, "blocks.%d.norm1.weight", H)) || (st = V(norm2, "blocks.%d.norm2.weight", H)) ||
            (st = W(qkv, "blocks.%d.attn.qkv.weight", 3 * (int64_t)H, H)) ||
            (st = V(qkv_b, "blocks.%d.attn.qkv.bias", 3 * (int64_t)H)) ||
            (st = W(proj, "blocks.%d.attn.proj.weight", H, H)) || (st = V(proj_b, "blocks.%d.attn.proj.bias", H)) ||
            (st = W(gate, "blocks.%d.mlp.gate_proj.weight", F, H)) ||
            (st = V(gate_b, "blocks.%d.mlp.gate_proj.bias", F)) ||
            (st = W(up, "blocks.%d.mlp.up_proj.weight", F, H)) || (st = V(up_b, "blocks.%d.mlp.up_proj.bias", F)) ||
            (st = W(down, "blocks.%d.mlp.down_proj.weight", H, F)) ||
            (st = V(down_b, "blocks.%d.mlp.down_proj.bias", H)))
            return st;
#undef W
#undef V
    }
    if ((st = weight_bind_vec(m, src, &v->merge_norm, qname(n, sizeof n, p, "merger.ln_q.weight", 0), H, true, 0)) ||
        (st = weight_bind(m, src, &v->merge0, qname(n, sizeof n, p, "merger.mlp.0.weight", 0), M, M, true)) ||
        (st = weight_bind_vec(m, src, &v->merge0_b, qname(n, sizeof n, p, "merger.mlp.0.bias", 0), M, true, 0)))
        return st;
    if ((st = weight_bind(m, src, &v->merge2, qname(n, sizeof n, p, "merger.mlp.2.weight", 0), E, M, true)) ||
        (st = weight_bind_vec(m, src, &v->merge2_b, qname(n, sizeof n, p, "merger.mlp.2.bias", 0), E, true, 0))) {
        if (st != KVF_ERR_SHAPE) return st;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kvf_last_error());
        return err_set(st, "the merger does not map to the decoder's embedding width %lld: %s", (long long)E, msg);
    }
    v->n_out = (int)E;
    v->image_size = 0; /* the image's own */
    return KVF_OK;
}

bool qvit_grid(const struct vision_model *v, int h, int w, int *rows, int *cols) {
    const int unit = v->patch_size * v->merge;
    int rh, rw;
    if (!image_smart_resize(h, w, unit, v->min_pixels, v->max_pixels, &rh, &rw)) return false;
    *rows = rh / unit;
    *cols = rw / unit;
    return true;
}

/* ------------------------------------------------------------- forward -- */

/* One image's layout: n patch rows in window order, nu = n / merge^2 units. */
struct qvit_plan {
    int gh, gw;            /* patch grid */
    int uh, uw;            /* unit grid (tokens) */
    int n, nu;
    int *unit_of;          /* [nu] window order -> raster unit index */
    int *win;              /* [n_win + 1] window boundaries, in rows */
    int n_win;
};

static void plan_free(struct qvit_plan *p) {
    free(p->unit_of);
    free(p->win);
}

/* transformers' get_vision_window_index: windows of ws x ws units tile the
 * unit grid from the top left (the last ones cut short), taken row of
 * windows by row of windows; inside one, units row by row. */
static enum kvf_status plan_make(const struct vision_model *v, int rh, int rw, struct qvit_plan *p) {
    memset(p, 0, sizeof *p);
    p->gh = rh / v->patch_size, p->gw = rw / v->patch_size;
    p->uh = p->gh / v->merge, p->uw = p->gw / v->merge;
    p->nu = p->uh * p->uw;
    p->n = p->nu * v->merge * v->merge;
    const int ws = v->window / (v->patch_size * v->merge);
    const int wh = (p->uh + ws - 1) / ws, ww = (p->uw + ws - 1) / ws;
    p->unit_of = malloc(sizeof *p->unit_of * (size_t)p->nu);
    p->win = malloc(sizeof *p->win * ((size_t)wh * ww + 1));
    if (!p->unit_of || !p->win) {
        plan_free(p);
        return err_set(KVF_ERR_NOMEM, "out of memory for a %dx%d image's windows", rw, rh);
    }
    int k = 0;
    p->win[0] = 0;
    for (int a = 0; a < wh; a++)
        for (int b = 0; b < ww; b++) {
            for (int y = a * ws; y < KVF_MIN((a + 1) * ws, p->uh); y++)
                for (int x = b * ws; x < KVF_MIN((b + 1) * ws, p->uw); x++) p->unit_of[k++] = y * p->uw + x;
            p->win[++p->n_win] = k * v->merge * v->merge;
        }
    return KVF_OK;
}

/* Scratch of one encoding, n rows (patches). */
struct qvit_buf {
    float *pix;            /* [3][rh][rw] */
    float *patches;        /* [n][3 t_patch p p] */
    float *x, *xn, *att;   /* [n][H] */
    float *qkv;            /* [n][3H] */
    float *kh, *vh;        /* [heads][n][hd] */
    float *ff, *ff2;       /* [n][F]; the merger's [nu][4H] twice */
    float *cs, *sn;        /* [n][hd / 2] rotary cosines and sines */
    struct kv_head *heads; /* [heads] */
    float *attn_scratch;
    void *mm;
};

static void buf_free(struct qvit_buf *b) {
    free(b->pix), free(b->patches), free(b->x), free(b->xn), free(b->att), free(b->qkv), free(b->kh), free(b->vh);
    free(b->ff), free(b->ff2), free(b->cs), free(b->sn), free(b->heads), free(b->attn_scratch), free(b->mm);
}

static enum kvf_status buf_init(struct qvit_buf *b, const struct vision_model *v, const struct qvit_plan *p, int rh,
                                int rw, int nt) {
    const size_t n = (size_t)p->n, H = (size_t)v->n_embd, F = (size_t)v->n_ff, hd = H / (size_t)v->n_head;
    const size_t plen = 3 * (size_t)v->t_patch * v->patch_size * v->patch_size, M = H * v->merge * v->merge;
    const size_t wide = KVF_MAX(F, M);
    memset(b, 0, sizeof *b);
    b->pix = malloc(sizeof(float) * 3 * (size_t)rh * rw);
    b->patches = malloc(sizeof(float) * n * plen);
    b->x = malloc(sizeof(float) * n * H);
    b->xn = malloc(sizeof(float) * n * H);
    b->att = malloc(sizeof(float) * n * H);
    b->qkv = malloc(sizeof(float) * n * 3 * H);
    b->kh = malloc(sizeof(float) * n * H);
    b->vh = malloc(sizeof(float) * n * H);
    b->ff = malloc(sizeof(float) * n * wide);
    b->ff2 = malloc(sizeof(float) * n * wide);
    b->cs = malloc(sizeof(float) * n * hd / 2);
    b->sn = malloc(sizeof(float) * n * hd / 2);
    b->heads = malloc(sizeof *b->heads * (size_t)v->n_head);
    b->attn_scratch = malloc(attn_scratch_bytes(p->n, nt));
    b->mm = malloc(ops_matmul_scratch_bytes((int64_t)KVF_MAX(KVF_MAX(wide, plen), H), p->n, nt));
    if (!b->pix || !b->patches || !b->x || !b->xn || !b->att || !b->qkv || !b->kh || !b->vh || !b->ff || !b->ff2 ||
        !b->cs || !b->sn || !b->heads || !b->attn_scratch || !b->mm) {
        buf_free(b);
        return err_set(KVF_ERR_NOMEM, "out of memory for the vision encoder (%d patches)", p->n);
    }
    return KVF_OK;
}

/* Patch rows in window order, each patch's values (channel, frame, y, x)
 * with the image as both frames; and each row's rotary angles: pairs
 * [0, hd/4) turn with the patch's row, [hd/4, hd/2) with its column, both
 * at theta^(-4j / hd) (transformers' axial 2-D rotary). */
static void patchify(const struct vision_model *v, const struct qvit_plan *p, int rw, struct qvit_buf *b) {
    const int P = v->patch_size, m = v->merge, T = v->t_patch, hd = v->n_embd / v->n_head, q4 = hd / 4;
    const size_t plen = 3 * (size_t)T * P * P, plane = (size_t)p->gh * P * rw;
    for (int k = 0; k < p->nu; k++) {
        const int uy = p->unit_of[k] / p->uw, ux = p->unit_of[k] % p->uw;
        for (int i = 0; i < m * m; i++) {
            const int py = uy * m + i / m, px = ux * m + i % m, row = k * m * m + i;
            float *dst = b->patches + (size_t)row * plen;
            for (int c = 0; c < 3; c++)
                for (int t = 0; t < T; t++)
                    for (int y = 0; y < P; y++)
                        memcpy(dst + (((size_t)c * T + t) * P + y) * P,
                               b->pix + c * plane + ((size_t)py * P + y) * rw + (size_t)px * P, sizeof(float) * P);
            float *cs = b->cs + (size_t)row * hd / 2, *sn = b->sn + (size_t)row * hd / 2;
            for (int j = 0; j < q4; j++) {
                const double f = pow(v->rope_theta, -4.0 * j / hd);
                cs[j] = (float)cos(py * f), sn[j] = (float)sin(py * f);
                cs[q4 + j] = (float)cos(px * f), sn[q4 + j] = (float)sin(px * f);
            }
        }
    }
}

/* x += proj(attention(RMSNorm1(x))): every row sees the rows of its window
 * (or, full, all rows), keys and queries turned by their patch's angles. */
static void qvit_attention(const struct vision_model *v, const struct qvit_layer *L, const struct qvit_plan *p,
                           bool full, struct qvit_buf *b, int nt) {
    const int n = p->n, H = v->n_embd, nh = v->n_head, hd = H / nh;
    for (int t = 0; t < n; t++) ops_rmsnorm(b->xn + (size_t)t * H, b->x + (size_t)t * H, L->norm1.data, H, v->eps);
    ops_matmul(&L->qkv, b->xn, n, b->qkv, b->mm, nt);
    ops_add_bias(b->qkv, &L->qkv_b, n, 3 * H);
    for (int t = 0; t < n; t++) {
        float *r = b->qkv + (size_t)t * 3 * H;
        const float *cs = b->cs + (size_t)t * hd / 2, *sn = b->sn + (size_t)t * hd / 2;
        ops_rope_rotate(r, nh, hd, cs, sn, KVF_ROPE_NEOX);     /* q */
        ops_rope_rotate(r + H, nh, hd, cs, sn, KVF_ROPE_NEOX); /* k */
        memcpy(b->xn + (size_t)t * H, r, sizeof(float) * (size_t)H); /* q, packed for the kernel */
        for (int h = 0; h < nh; h++) {
            memcpy(b->kh + ((size_t)h * n + t) * hd, r + H + (size_t)h * hd, sizeof(float) * (size_t)hd);
            memcpy(b->vh + ((size_t)h * n + t) * hd, r + 2 * H + (size_t)h * hd, sizeof(float) * (size_t)hd);
        }
    }
    const struct attn_params ap = {.n_head = nh, .n_head_kv = nh, .head_dim = hd,
                                   .scale = 1.0f / sqrtf((float)hd), .bidirectional = true};
    const int n_seg = full ? 1 : p->n_win;
    for (int s = 0; s < n_seg; s++) {
        const int r0 = full ? 0 : p->win[s], r1 = full ? n : p->win[s + 1];
        for (int h = 0; h < nh; h++)
            b->heads[h] = (struct kv_head){.k = b->kh + ((size_t)h * n + r0) * hd, .v = b->vh + ((size_t)h * n + r0) * hd,
                                           .tag = NULL, .n = r1 - r0, .cap = r1 - r0};
        attn_forward(&ap, b->xn + (size_t)r0 * H, NULL, r1 - r0, b->heads, b->att + (size_t)r0 * H, b->attn_scratch,
                     nt, NULL); /* no statistics: cannot fail */
    }
    ops_matmul(&L->proj, b->att, n, b->xn, b->mm, nt);
    ops_add_bias(b->xn, &L->proj_b, n, H);
    ops_add(b->x, b->xn, (size_t)n * H);
}

/* x += down(silu(gate(n)) * up(n)), n = RMSNorm2(x), with biases. */
static void qvit_mlp(const struct vision_model *v, const struct qvit_layer *L, int n, struct qvit_buf *b, int nt) {
    const int H = v->n_embd, F = v->n_ff;
    for (int t = 0; t < n; t++) ops_rmsnorm(b->xn + (size_t)t * H, b->x + (size_t)t * H, L->norm2.data, H, v->eps);
    ops_matmul(&L->gate, b->xn, n, b->ff, b->mm, nt);
    ops_add_bias(b->ff, &L->gate_b, n, F);
    ops_matmul(&L->up, b->xn, n, b->ff2, b->mm, nt);
    ops_add_bias(b->ff2, &L->up_b, n, F);
    ops_silu_mul(b->ff, b->ff2, (int64_t)n * F);
    ops_matmul(&L->down, b->ff, n, b->xn, b->mm, nt);
    ops_add_bias(b->xn, &L->down_b, n, H);
    ops_add(b->x, b->xn, (size_t)n * H);
}

enum kvf_status qvit_encode(const struct vision_model *v, const struct kvf_image *img, int nt, float *out) {
    const int unit = v->patch_size * v->merge;
    int rows, cols;
    if (!img || !qvit_grid(v, img->h, img->w, &rows, &cols))
        return err_set(KVF_ERR_INVALID_ARG, "a %dx%d image has no Qwen2.5-VL size (aspect ratio over 200?)",
                       img ? img->w : 0, img ? img->h : 0);
    const int rh = rows * unit, rw = cols * unit;
    struct qvit_plan p;
    struct qvit_buf b;
    enum kvf_status st = plan_make(v, rh, rw, &p);
    if (st != KVF_OK) return st;
    if ((st = buf_init(&b, v, &p, rh, rw, nt)) != KVF_OK) {
        plan_free(&p);
        return st;
    }
    st = image_preprocess_resize(img, rw, rh, IMAGE_BICUBIC, v->mean, v->std, b.pix);
    if (st == KVF_OK) {
        const int H = v->n_embd, mm = v->merge * v->merge, M = H * mm, E = v->n_out;
        patchify(v, &p, rw, &b);
        ops_matmul(&v->patch, b.patches, p.n, b.x, b.mm, nt);
        for (int l = 0; l < v->n_layer; l++) {
            qvit_attention(v, &v->qlayers[l], &p, v->full[l], &b, nt);
            qvit_mlp(v, &v->qlayers[l], p.n, &b, nt);
        }
        /* The merger: a unit's rows are consecutive, so [n][H] is [nu][4H]. */
        for (int t = 0; t < p.n; t++)
            ops_rmsnorm(b.xn + (size_t)t * H, b.x + (size_t)t * H, v->merge_norm.data, H, v->eps);
        ops_matmul(&v->merge0, b.xn, p.nu, b.ff, b.mm, nt);
        ops_add_bias(b.ff, &v->merge0_b, p.nu, M);
        ops_gelu_erf(b.ff, (int64_t)p.nu * M);
        ops_matmul(&v->merge2, b.ff, p.nu, b.ff2, b.mm, nt);
        ops_add_bias(b.ff2, &v->merge2_b, p.nu, E);
        for (int k = 0; k < p.nu; k++)
            memcpy(out + (size_t)p.unit_of[k] * E, b.ff2 + (size_t)k * E, sizeof(float) * (size_t)E);
    }
    buf_free(&b);
    plan_free(&p);
    return st;
}
