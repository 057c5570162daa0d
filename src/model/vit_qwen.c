/* Qwen2.5-VL's vision tower and patch merger (transformers'
 * Qwen2_5_VisionTransformerPretrainedModel).
 *
 *   image -> smart_resize to multiples of 28 within [min, max] pixels,
 *   Pillow's bicubic resize, CLIP normalisation -> 14 x 14 patches taken
 *   2 x 2 merge unit by merge unit -> patch embedding (the 3-D convolution
 *   over an image that is both frames of its kernel: one product with the
 *   frames' sum) -> units reordered window by window
 *   (windows of window / 28 x window / 28 units) -> n_layer x (x +=
 *   proj(attn(RMSNorm1(x))) with 2-D rotary positions, within a window or,
 *   in the full-attention layers, over the whole image; x += down(silu(
 *   gate(n)) * up(n)), n = RMSNorm2(x)) -> merger: RMSNorm, each unit's 4
 *   rows as one, linear -> GELU -> linear -> units back in raster order.
 * A token per 2 x 2 unit: a (H / 28) x (W / 28) grid.
 *
 * A video is encoded a temporal patch (2 frames) at a time: the frames are
 * resized as the video processor does (torchvision's bicubic, within the
 * video's pixel bounds) and the kernel's frames see one frame each; every
 * temporal patch attends within itself, as transformers' cu_seqlens make
 * it, so each is one encoding like an image's.
 *
 * Qwen2-VL's tower (vision_model.qwen2) is the same but for LayerNorms with
 * biases (in the blocks and the merger), x += fc2(quick_gelu(fc1(n))) as
 * its MLP, and no windows: every layer attends over the whole image. */
#include "model/vit.h"

#include "core/ops.h"
#include "io/gguf.h"

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

/* The tower's sizes, from config.json or the mmproj keys. */
static enum kvf_status qvit_alloc(struct kvf_model *m, const char *what, const struct vision_model *t) {
    const int H = t->n_embd, F = t->n_ff, L = t->n_layer;
    if (H <= 0 || H > QVIT_MAX_DIM || F <= 0 || F > QVIT_MAX_DIM || t->n_head <= 0 || H % t->n_head != 0 ||
        (H / t->n_head) % 4 != 0 || L <= 0 || L > QVIT_MAX_LAYERS || t->patch_size <= 0 || t->patch_size > 64 ||
        t->merge <= 0 || t->merge > 8 || t->t_patch <= 0 || t->t_patch > 8 || t->window <= 0 ||
        t->window % (t->patch_size * t->merge) != 0 || !(t->eps > 0.0f && t->eps < 1.0f) ||
        !(t->rope_theta > 1.0f && isfinite(t->rope_theta)) || t->min_pixels < 1 || t->min_pixels > t->max_pixels ||
        t->video_min_pixels < 1 || t->video_min_pixels > t->video_max_pixels ||
        !(t->tokens_per_second >= 0.0f && t->tokens_per_second <= 1e4f))
        return err_set(KVF_ERR_FORMAT, "%s: Qwen2.5-VL vision sizes out of range (width %d, ff %d, heads %d, layers "
                       "%d, patch %d, merge %d, window %d, frames a patch %d, tokens a second %g, pixels %lld..%lld, "
                       "video pixels %lld..%lld; head width a multiple of 4)", what, H, F, t->n_head, L, t->patch_size,
                       t->merge, t->window, t->t_patch, (double)t->tokens_per_second, (long long)t->min_pixels,
                       (long long)t->max_pixels, (long long)t->video_min_pixels, (long long)t->video_max_pixels);
    for (int c = 0; c < 3; c++)
        if (!(t->std[c] > 0.0f) || !isfinite(t->mean[c]))
            return err_set(KVF_ERR_FORMAT, "%s: image mean/std out of range", what);
    struct vision_model *v = malloc(sizeof *v);
    if (!v) return err_set(KVF_ERR_NOMEM, "out of memory");
    *v = *t;
    m->vision = v; /* freed with the model, whatever happens below */
    v->qlayers = calloc((size_t)L, sizeof *v->qlayers);
    v->full = calloc((size_t)L, sizeof *v->full);
    if (!v->qlayers || !v->full) return err_set(KVF_ERR_NOMEM, "out of memory");
    return KVF_OK;
}

/* The patch kernel [H][3][T][p][p] (from k0 alone, or from k0 and k1, the
 * mmproj's two frames [H][3][p][p]) in F32 twice: as it is, for videos,
 * whose frames differ (v->patch_t), and as its frames' sum [H][3][p][p]
 * for images, which are every frame at once, so one product does
 * (v->patch). */
static enum kvf_status bind_patch(struct kvf_model *m, const struct tensor_src *src, struct vision_model *v,
                                  const char *k0, const char *k1) {
    const int64_t H = v->n_embd, pp = (int64_t)v->patch_size * v->patch_size, T = v->t_patch, n = 3 * T * pp;
    if (k1 && T != 2)
        return err_set(KVF_ERR_FORMAT, "an mmproj patch kernel of two frames for %d-frame patches", (int)T);
    struct weight w0, w1 = {0};
    /* [H][3][T][p][p], its inner dimensions folded to four (weights.c) */
    enum kvf_status st = weight_bind_nd(m, src, &w0, k0, H, k1 ? 3 * pp : n, 4, true);
    if (st == KVF_OK && k1) st = weight_bind_nd(m, src, &w1, k1, H, 3 * pp, 4, true);
    if (st != KVF_OK) return st;
    /* The model owns full and sum from here (model_keep frees on failure). */
    float *full = malloc(sizeof(float) * (size_t)(H * n)), *sum = NULL;
    if ((st = model_keep(m, full)) != KVF_OK) return st;
    if ((st = model_keep(m, sum = calloc((size_t)(H * 3 * pp), sizeof *sum))) != KVF_OK) return st;
    float *row = malloc(sizeof(float) * (size_t)n);
    if (!full || !sum || !row) {
        free(row);
        return err_set(KVF_ERR_NOMEM, "out of memory for the patch kernel");
    }
    for (int64_t h = 0; h < H; h++) {
        float *f = full + h * n, *d = sum + h * 3 * pp;
        if (k1) { /* frames apart: (t, c, i) -> (c, t, i) */
            ops_get_row(&w0, h, row);
            ops_get_row(&w1, h, row + 3 * pp);
            for (int64_t t = 0; t < 2; t++)
                for (int64_t c = 0; c < 3; c++)
                    memcpy(f + (c * 2 + t) * pp, row + (t * 3 + c) * pp, sizeof(float) * (size_t)pp);
        } else {
            ops_get_row(&w0, h, f);
        }
        for (int64_t c = 0; c < 3; c++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t i = 0; i < pp; i++) d[c * pp + i] += f[(c * T + t) * pp + i];
    }
    free(row);
    v->patch = (struct weight){DT_F32, H, 3 * pp, sizeof(float) * (size_t)(3 * pp), sum, false};
    v->patch_t = (struct weight){DT_F32, H, n, sizeof(float) * (size_t)n, full, false};
    return KVF_OK;
}

/* Tensor names of one container; %d: layer. qkv: HF's fused projection
 * (NULL: q, k, v apart, as llama.cpp splits it). */
struct qvit_names {
    const char *patch0, *patch1;
    const char *norm1, *norm2, *qkv, *qkv_b, *q, *q_b, *k, *k_b, *v, *v_b, *o, *o_b;
    const char *gate, *gate_b, *up, *up_b, *down, *down_b;
    const char *merge_norm, *merge0, *merge0_b, *merge2, *merge2_b;
    /* Qwen2-VL: the LayerNorms' biases; fc1 / fc2 are in up / down */
    const char *norm1_b, *norm2_b, *merge_norm_b;
};

static const struct qvit_names names_hf = {
    "patch_embed.proj.weight", NULL, "blocks.%d.norm1.weight", "blocks.%d.norm2.weight",
    "blocks.%d.attn.qkv.weight", "blocks.%d.attn.qkv.bias", NULL, NULL, NULL, NULL, NULL, NULL,
    "blocks.%d.attn.proj.weight", "blocks.%d.attn.proj.bias",
    "blocks.%d.mlp.gate_proj.weight", "blocks.%d.mlp.gate_proj.bias", "blocks.%d.mlp.up_proj.weight",
    "blocks.%d.mlp.up_proj.bias", "blocks.%d.mlp.down_proj.weight", "blocks.%d.mlp.down_proj.bias",
    "merger.ln_q.weight", "merger.mlp.0.weight", "merger.mlp.0.bias", "merger.mlp.2.weight", "merger.mlp.2.bias",
    NULL, NULL, NULL,
};

static const struct qvit_names names_hf_qwen2 = {
    "patch_embed.proj.weight", NULL, "blocks.%d.norm1.weight", "blocks.%d.norm2.weight",
    "blocks.%d.attn.qkv.weight", "blocks.%d.attn.qkv.bias", NULL, NULL, NULL, NULL, NULL, NULL,
    "blocks.%d.attn.proj.weight", "blocks.%d.attn.proj.bias", NULL, NULL,
    "blocks.%d.mlp.fc1.weight", "blocks.%d.mlp.fc1.bias", "blocks.%d.mlp.fc2.weight", "blocks.%d.mlp.fc2.bias",
    "merger.ln_q.weight", "merger.mlp.0.weight", "merger.mlp.0.bias", "merger.mlp.2.weight", "merger.mlp.2.bias",
    "blocks.%d.norm1.bias", "blocks.%d.norm2.bias", "merger.ln_q.bias",
};

/* llama.cpp's converter: the 3-D kernel split by frame, qkv split. */
static const struct qvit_names names_mmproj = {
    "v.patch_embd.weight", "v.patch_embd.weight.1", "v.blk.%d.ln1.weight", "v.blk.%d.ln2.weight", NULL, NULL,
    "v.blk.%d.attn_q.weight", "v.blk.%d.attn_q.bias", "v.blk.%d.attn_k.weight", "v.blk.%d.attn_k.bias",
    "v.blk.%d.attn_v.weight", "v.blk.%d.attn_v.bias", "v.blk.%d.attn_out.weight", "v.blk.%d.attn_out.bias",
    "v.blk.%d.ffn_gate.weight", "v.blk.%d.ffn_gate.bias", "v.blk.%d.ffn_up.weight", "v.blk.%d.ffn_up.bias",
    "v.blk.%d.ffn_down.weight", "v.blk.%d.ffn_down.bias",
    "v.post_ln.weight", "mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias", NULL, NULL, NULL,
};

static const struct qvit_names names_mmproj_qwen2 = {
    "v.patch_embd.weight", "v.patch_embd.weight.1", "v.blk.%d.ln1.weight", "v.blk.%d.ln2.weight", NULL, NULL,
    "v.blk.%d.attn_q.weight", "v.blk.%d.attn_q.bias", "v.blk.%d.attn_k.weight", "v.blk.%d.attn_k.bias",
    "v.blk.%d.attn_v.weight", "v.blk.%d.attn_v.bias", "v.blk.%d.attn_out.weight", "v.blk.%d.attn_out.bias",
    NULL, NULL, "v.blk.%d.ffn_up.weight", "v.blk.%d.ffn_up.bias", "v.blk.%d.ffn_down.weight",
    "v.blk.%d.ffn_down.bias", "v.post_ln.weight", "mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias",
    "v.blk.%d.ln1.bias", "v.blk.%d.ln2.bias", "v.post_ln.bias",
};

/* Rows [i * rows, (i + 1) * rows) of w as a weight of their own. */
static struct weight rows_of(const struct weight *w, int64_t rows, int i) {
    return (struct weight){w->type, rows, w->cols, w->row_bytes,
                           (const uint8_t *)w->data + (size_t)i * rows * w->row_bytes, w->ilv};
}

static enum kvf_status bind_tower(struct kvf_model *m, const struct tensor_src *src, const char *p,
                                  const struct qvit_names *nm) {
    struct vision_model *v = m->vision;
    const int64_t H = v->n_embd, F = v->n_ff, M = H * v->merge * v->merge, E = m->hp.n_embd;
    char n[192], n1[192];
    enum kvf_status st = bind_patch(m, src, v, qname(n, sizeof n, p, nm->patch0, 0),
                                    nm->patch1 ? qname(n1, sizeof n1, p, nm->patch1, 0) : NULL);
    if (st != KVF_OK) return st;
    for (int l = 0; l < v->n_layer; l++) {
        struct qvit_layer *q = &v->qlayers[l];
#define W(field, fmt, rows, cols) weight_bind(m, src, &q->field, qname(n, sizeof n, p, fmt, l), rows, cols, true)
#define V(field, fmt, len) weight_bind_vec(m, src, &q->field, qname(n, sizeof n, p, fmt, l), len, true, 0)
        if (nm->qkv) {
            struct weight qkv, qkv_b;
            if ((st = weight_bind(m, src, &qkv, qname(n, sizeof n, p, nm->qkv, l), 3 * H, H, true)) ||
                (st = weight_bind_vec(m, src, &qkv_b, qname(n, sizeof n, p, nm->qkv_b, l), 3 * H, true, 0)))
                return st;
            for (int i = 0; i < 3; i++) {
                q->w[i] = rows_of(&qkv, H, i);
                q->b[i] = (struct weight){ DT_F32, 1, H, sizeof(float) * (size_t)H, (const float *)qkv_b.data + i * H,
                                           false };
            }
        } else if ((st = W(w[0], nm->q, H, H)) || (st = V(b[0], nm->q_b, H)) || (st = W(w[1], nm->k, H, H)) ||
                   (st = V(b[1], nm->k_b, H)) || (st = W(w[2], nm->v, H, H)) || (st = V(b[2], nm->v_b, H))) {
            return st;
        }
        if ((st = V(norm1, nm->norm1, H)) || (st = V(norm2, nm->norm2, H)) || (st = W(proj, nm->o, H, H)) ||
            (st = V(proj_b, nm->o_b, H)) || (st = W(up, nm->up, F, H)) || (st = V(up_b, nm->up_b, F)) ||
            (st = W(down, nm->down, H, F)) || (st = V(down_b, nm->down_b, H)))
            return st;
        if (v->qwen2 ? (st = V(norm1_b, nm->norm1_b, H)) || (st = V(norm2_b, nm->norm2_b, H))
                     : (st = W(gate, nm->gate, F, H)) || (st = V(gate_b, nm->gate_b, F)))
            return st;
#undef W
#undef V
    }
    if ((v->qwen2 && (st = weight_bind_vec(m, src, &v->merge_norm_b, qname(n, sizeof n, p, nm->merge_norm_b, 0), H,
                                           true, 0))) ||
        (st = weight_bind_vec(m, src, &v->merge_norm, qname(n, sizeof n, p, nm->merge_norm, 0), H, true, 0)) ||
        (st = weight_bind(m, src, &v->merge0, qname(n, sizeof n, p, nm->merge0, 0), M, M, true)) ||
        (st = weight_bind_vec(m, src, &v->merge0_b, qname(n, sizeof n, p, nm->merge0_b, 0), M, true, 0)))
        return st;
    if ((st = weight_bind(m, src, &v->merge2, qname(n, sizeof n, p, nm->merge2, 0), E, M, true)) ||
        (st = weight_bind_vec(m, src, &v->merge2_b, qname(n, sizeof n, p, nm->merge2_b, 0), E, true, 0))) {
        if (st != KVF_ERR_SHAPE) return st;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kvf_last_error());
        return err_set(st, "the merger does not map to the decoder's embedding width %lld: %s", (long long)E, msg);
    }
    v->n_out = (int)E;
    return KVF_OK;
}

enum kvf_status qvit_load_hf(struct kvf_model *m, const char *dir, const struct tensor_src *src,
                             const struct hf_vision_config *cfg) {
    static const char *const prefixes[] = {"visual.", "model.visual."};
    char n[192];
    const char *p = NULL;
    for (int i = 0; i < 2; i++)
        if (tensor_exists(src, qname(n, sizeof n, prefixes[i], names_hf.patch0, 0))) p = prefixes[i];
    if (!p) return err_set(KVF_ERR_FORMAT, "%s: config.json describes a Qwen2-VL / Qwen2.5-VL vision tower but no "
                           "'visual.patch_embed.proj.weight' tensor was found", dir);
    const char *act = cfg->qwen2vl ? "quick_gelu" : "silu";
    if (strcmp(cfg->hidden_act, act) != 0)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: vision hidden_act '%s' (%s)", dir, cfg->hidden_act, act);
    struct vision_model t = {
        .patch_size = cfg->patch_size, .n_embd = cfg->hidden_size, .n_head = cfg->num_attention_heads,
        .n_ff = cfg->intermediate_size, .n_layer = cfg->num_hidden_layers, .eps = cfg->layer_norm_eps,
        .proj = VIT_PROJ_QWEN25VL, .merge = cfg->spatial_merge_size, .t_patch = cfg->temporal_patch_size,
        .window = cfg->window_size, .min_pixels = cfg->min_pixels, .max_pixels = cfg->max_pixels,
        .video_min_pixels = cfg->video_min_pixels, .video_max_pixels = cfg->video_max_pixels,
        .tokens_per_second = cfg->qwen2vl ? 0.0f : (float)cfg->tokens_per_second, .rope_theta = cfg->rope_theta,
        .qwen2 = cfg->qwen2vl,
    };
    memcpy(t.mean, cfg->image_mean, sizeof t.mean);
    memcpy(t.std, cfg->image_std, sizeof t.std);
    snprintf(t.source, sizeof t.source, "safetensors");
    enum kvf_status st = qvit_alloc(m, dir, &t);
    if (st != KVF_OK) return st;
    for (int l = 0; l < t.n_layer; l++) m->vision->full[l] = cfg->full_attention[l];
    return bind_tower(m, src, p, cfg->qwen2vl ? &names_hf_qwen2 : &names_hf);
}

enum kvf_status qvit_load_mmproj(struct kvf_model *m, const char *path, bool qwen2) {
    const struct gguf_file *f = m->mmproj;
    /* llama.cpp's defaults for what the file does not say: images of 8 to
     * 4096 tokens (its set_limit_image_tokens for Qwen2-VL / 2.5-VL), 112-pixel
     * windows, ViT rotary base 10000; for videos (llama.cpp has none),
     * Qwen2VLVideoProcessor's bounds and the released Qwen2.5-VL models' 2
     * tokens a second. */
    struct vision_model t = {.patch_size = 14, .eps = 1e-6f, .proj = VIT_PROJ_QWEN25VL, .merge = 2, .t_patch = 2,
                             .window = 112,
                             .video_min_pixels = 128 * 28 * 28, .video_max_pixels = 768 * 28 * 28,
                             .tokens_per_second = qwen2 ? 0.0f : 2.0f,
                             .rope_theta = 10000.0f, .mean = {0.48145466f, 0.4578275f, 0.40821073f},
                             .std = {0.26862954f, 0.26130258f, 0.27577711f}, .qwen2 = qwen2};
    int pattern = 0;
    enum kvf_status st;
    if ((st = mmproj_u32(f, "clip.vision.patch_size", &t.patch_size, true)) ||
        (st = mmproj_u32(f, "clip.vision.embedding_length", &t.n_embd, true)) ||
        (st = mmproj_u32(f, "clip.vision.feed_forward_length", &t.n_ff, true)) ||
        (st = mmproj_u32(f, "clip.vision.attention.head_count", &t.n_head, true)) ||
        (st = mmproj_u32(f, "clip.vision.block_count", &t.n_layer, true)) ||
        (st = mmproj_u32(f, "clip.vision.n_wa_pattern", &pattern, !qwen2)) ||
        (st = mmproj_u32(f, "clip.vision.spatial_merge_size", &t.merge, false)))
        return st;
    if ((st = mmproj_float3(f, "clip.vision.image_mean", t.mean)) ||
        (st = mmproj_float3(f, "clip.vision.image_std", t.std)))
        return st;
    /* Newer converters may write the image processor's bounds; a side the
     * file leaves out takes llama.cpp's, but never past the other. */
    int min_px = 0, max_px = 0;
    if ((st = mmproj_u32(f, "clip.vision.image_min_pixels", &min_px, false)) ||
        (st = mmproj_u32(f, "clip.vision.image_max_pixels", &max_px, false)))
        return st;
    if (t.patch_size <= 0 || t.patch_size > 64 || t.merge <= 0 || t.merge > 8)
        return err_set(KVF_ERR_FORMAT, "%s: patch size %d, merge %d", path, t.patch_size, t.merge);
    const int64_t area = (int64_t)t.patch_size * t.merge * t.patch_size * t.merge;
    t.min_pixels = min_px > 0 ? min_px : max_px > 0 ? KVF_MIN(8 * area, (int64_t)max_px) : 8 * area;
    t.max_pixels = max_px > 0 ? max_px : KVF_MAX(4096 * area, t.min_pixels);
    gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &t.eps);
    if (!qwen2 && pattern <= 0) return err_set(KVF_ERR_FORMAT, "%s: clip.vision.n_wa_pattern %d", path, pattern);
    snprintf(t.source, sizeof t.source, "mmproj");
    if ((st = qvit_alloc(m, path, &t)) != KVF_OK) return st;
    /* Every n_wa_pattern-th layer attends over the whole image (Qwen2-VL: all). */
    for (int l = 0; l < t.n_layer; l++) m->vision->full[l] = qwen2 || (l + 1) % pattern == 0;
    const struct tensor_src src = {.gguf = f};
    return bind_tower(m, &src, "", qwen2 ? &names_mmproj_qwen2 : &names_mmproj);
}

enum kvf_status vision_limit_tokens(struct vision_model *v, int min_tokens, int max_tokens) {
    if (v->proj == VIT_PROJ_IDEFICS3) v->max_tokens = max_tokens;
    if (v->proj != VIT_PROJ_QWEN25VL) return KVF_OK;
    const int64_t area = (int64_t)v->patch_size * v->merge * v->patch_size * v->merge;
    const int64_t lo = min_tokens ? min_tokens * area : v->min_pixels;
    const int64_t hi = max_tokens ? max_tokens * area : v->max_pixels;
    if (lo > hi)
        return err_set(KVF_ERR_INVALID_ARG, "image tokens: the fewest, %lld%s, exceed the most, %lld%s (set both)",
                       (long long)(lo / area), min_tokens ? "" : " (the model's)", (long long)(hi / area),
                       max_tokens ? "" : " (the model's)");
    v->min_pixels = lo;
    v->max_pixels = hi;
    return KVF_OK;
}

bool qvit_grid(const struct vision_model *v, int h, int w, bool video, int *rows, int *cols) {
    const int unit = v->patch_size * v->merge;
    int rh, rw;
    if (!image_smart_resize(h, w, unit, video ? v->video_min_pixels : v->min_pixels,
                            video ? v->video_max_pixels : v->max_pixels, &rh, &rw))
        return false;
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

/* Scratch of one encoding, n rows (patches) of T frames (1: an image). */
struct qvit_buf {
    float *pix;            /* [T][3][rh][rw] */
    float *patches;        /* [n][3 T p p] */
    float *ff, *ff2;       /* [n][F]; the merger's [nu][4H] twice */
    float *cs, *sn;        /* [n][hd / 2] rotary cosines and sines */
    struct vit_rows r;
};

static void buf_free(struct qvit_buf *b) {
    free(b->pix), free(b->patches), free(b->ff), free(b->ff2), free(b->cs), free(b->sn);
    vit_rows_free(&b->r);
}

static enum kvf_status buf_init(struct qvit_buf *b, const struct vision_model *v, const struct qvit_plan *p, int rh,
                                int rw, int T, int nt) {
    const size_t n = (size_t)p->n, H = (size_t)v->n_embd, F = (size_t)v->n_ff, hd = H / (size_t)v->n_head;
    const size_t plen = 3 * (size_t)T * v->patch_size * v->patch_size, M = H * v->merge * v->merge;
    const size_t wide = KVF_MAX(F, M);
    memset(b, 0, sizeof *b);
    b->pix = malloc(sizeof(float) * 3 * (size_t)T * rh * rw);
    b->patches = malloc(sizeof(float) * n * plen);
    b->ff = malloc(sizeof(float) * n * wide);
    b->ff2 = malloc(sizeof(float) * n * wide);
    b->cs = malloc(sizeof(float) * n * hd / 2);
    b->sn = malloc(sizeof(float) * n * hd / 2);
    if (!b->pix || !b->patches || !b->ff || !b->ff2 || !b->cs || !b->sn ||
        !vit_rows_init(&b->r, v, p->n, KVF_MAX(KVF_MAX(wide, plen), H), nt)) {
        buf_free(b);
        return err_set(KVF_ERR_NOMEM, "out of memory for the vision encoder (%d patches)", p->n);
    }
    return KVF_OK;
}

/* Patch rows in window order, each patch's values (channel, frame, y, x)
 * of T frames (an image: T = 1, for the summed kernel; bind_patch); and
 * each row's rotary angles: pairs [0, hd/4) turn with the patch's row,
 * [hd/4, hd/2) with its column, both at theta^(-4j / hd) (transformers'
 * axial 2-D rotary). */
static void patchify(const struct vision_model *v, const struct qvit_plan *p, int rw, int T, struct qvit_buf *b) {
    const int P = v->patch_size, m = v->merge, hd = v->n_embd / v->n_head, q4 = hd / 4;
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
                               b->pix + ((size_t)t * 3 + c) * plane + ((size_t)py * P + y) * rw + (size_t)px * P,
                               sizeof(float) * P);
            float *cs = b->cs + (size_t)row * hd / 2, *sn = b->sn + (size_t)row * hd / 2;
            for (int j = 0; j < q4; j++) {
                const double f = pow(v->rope_theta, -4.0 * j / hd);
                cs[j] = (float)cos(py * f), sn[j] = (float)sin(py * f);
                cs[q4 + j] = (float)cos(px * f), sn[q4 + j] = (float)sin(px * f);
            }
        }
    }
}

/* out = RMSNorm(x) with w for n rows (Qwen2-VL: LayerNorm with w and bias). */
static void norm_rows(const struct vision_model *v, float *out, const float *x, const struct weight *w,
                      const struct weight *bias, int n) {
    const int H = v->n_embd;
    for (int t = 0; t < n; t++) {
        if (v->qwen2) ops_layernorm(out + (size_t)t * H, x + (size_t)t * H, w->data, bias->data, H, v->eps);
        else ops_rmsnorm(out + (size_t)t * H, x + (size_t)t * H, w->data, H, v->eps);
    }
}

/* x += proj(attention(RMSNorm1(x))): every row sees the rows of its window
 * (or, full, all rows), keys and queries turned by their patch's angles. */
static enum kvf_status qvit_attention(const struct vision_model *v, const struct qvit_layer *L,
                                      const struct qvit_plan *p, bool full, struct qvit_buf *b, int nt) {
    const int n = p->n, H = v->n_embd, nh = v->n_head, hd = H / nh;
    norm_rows(v, b->r.xn, b->r.x, &L->norm1, &L->norm1_b, n);
    vision_qkv(L->w, L->b, &b->r, n, nt);
    for (int t = 0; t < n; t++) {
        const float *cs = b->cs + (size_t)t * hd / 2, *sn = b->sn + (size_t)t * hd / 2;
        ops_rope_rotate(b->r.q + (size_t)t * H, nh, hd, cs, sn, KVF_ROPE_NEOX);
        ops_rope_rotate(b->r.k + (size_t)t * H, nh, hd, cs, sn, KVF_ROPE_NEOX);
    }
    const int all[2] = {0, n};
    const enum kvf_status st = vision_attend(v, &b->r, n, full ? all : p->win, full ? 1 : p->n_win, nt);
    if (st != KVF_OK)
        return st;
    ops_matmul(&L->proj, b->r.att, n, b->r.xn, b->r.mm, nt);
    ops_add_bias(b->r.xn, &L->proj_b, n, H);
    ops_add(b->r.x, b->r.xn, (size_t)n * H);
    return KVF_OK;
}

/* x += down(silu(gate(n)) * up(n)), n = RMSNorm2(x), with biases (Qwen2-VL:
 * x += fc2(quick_gelu(fc1(n))), n = LayerNorm2(x)). */
static void qvit_mlp(const struct vision_model *v, const struct qvit_layer *L, int n, struct qvit_buf *b, int nt) {
    const int H = v->n_embd, F = v->n_ff;
    norm_rows(v, b->r.xn, b->r.x, &L->norm2, &L->norm2_b, n);
    ops_matmul(&L->up, b->r.xn, n, b->ff, b->r.mm, nt);
    ops_add_bias(b->ff, &L->up_b, n, F);
    float *h = b->ff;
    if (v->qwen2) {
        ops_gelu_quick(h, (int64_t)n * F);
    } else {
        h = b->ff2;
        ops_matmul(&L->gate, b->r.xn, n, h, b->r.mm, nt);
        ops_add_bias(h, &L->gate_b, n, F);
        ops_silu_mul(h, b->ff, (int64_t)n * F);
    }
    ops_matmul(&L->down, h, n, b->r.xn, b->r.mm, nt);
    ops_add_bias(b->r.xn, &L->down_b, n, H);
    ops_add(b->r.x, b->r.xn, (size_t)n * H);
}

enum kvf_status qvit_encode(const struct vision_model *v, const struct kvf_image *const *frames, bool video, int nt,
                            float *out) {
    const int unit = v->patch_size * v->merge, T = video ? v->t_patch : 1;
    const struct kvf_image *img = frames[0];
    int rows, cols;
    if (!qvit_grid(v, img->h, img->w, video, &rows, &cols))
        return err_set(KVF_ERR_INVALID_ARG, "a %dx%d %s has no Qwen2.5-VL size (aspect ratio over 200?)", img->w,
                       img->h, video ? "video frame" : "image");
    const int rh = rows * unit, rw = cols * unit;
    struct qvit_plan p;
    struct qvit_buf b;
    enum kvf_status st = plan_make(v, rh, rw, &p);
    if (st != KVF_OK) return st;
    if ((st = buf_init(&b, v, &p, rh, rw, T, nt)) != KVF_OK) {
        plan_free(&p);
        return st;
    }
    for (int t = 0; t < T && st == KVF_OK; t++)
        st = image_preprocess_resize(frames[t], rw, rh, video ? IMAGE_TV_BICUBIC : IMAGE_BICUBIC, v->mean, v->std,
                                     b.pix + (size_t)t * 3 * rh * rw);
    if (st == KVF_OK) {
        patchify(v, &p, rw, T, &b);
        ops_matmul(video ? &v->patch_t : &v->patch, b.patches, p.n, b.r.x, b.r.mm, nt);
        for (int l = 0; l < v->n_layer && st == KVF_OK; l++) {
            if ((st = qvit_attention(v, &v->qlayers[l], &p, v->full[l], &b, nt)) == KVF_OK)
                qvit_mlp(v, &v->qlayers[l], p.n, &b, nt);
        }
    }
    if (st == KVF_OK) {
        const int H = v->n_embd, mm = v->merge * v->merge, M = H * mm, E = v->n_out;
        /* The merger: a unit's rows are consecutive, so [n][H] is [nu][4H]. */
        norm_rows(v, b.r.xn, b.r.x, &v->merge_norm, &v->merge_norm_b, p.n);
        ops_matmul(&v->merge0, b.r.xn, p.nu, b.ff, b.r.mm, nt);
        ops_add_bias(b.ff, &v->merge0_b, p.nu, M);
        ops_gelu_erf(b.ff, (int64_t)p.nu * M);
        ops_matmul(&v->merge2, b.ff, p.nu, b.ff2, b.r.mm, nt);
        ops_add_bias(b.ff2, &v->merge2_b, p.nu, E);
        for (int k = 0; k < p.nu; k++)
            memcpy(out + (size_t)p.unit_of[k] * E, b.ff2 + (size_t)k * E, sizeof(float) * (size_t)E);
    }
    buf_free(&b);
    plan_free(&p);
    return st;
}
