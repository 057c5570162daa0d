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
 * Qwen2-VL's tower (QVIT_QWEN2) is the same but for LayerNorms with
 * biases (in the blocks and the merger), x += fc2(quick_gelu(fc1(n))) as
 * its MLP, and no windows: every layer attends over the whole image.
 *
 * Qwen3-VL's (QVIT_QWEN3, transformers' Qwen3VLVisionModel) is Qwen2-VL's
 * with 16-pixel patches, a bias on the patch kernel, tanh GELU in the MLP,
 * and learned positions: a square grid of them, bilinearly interpolated
 * (corners aligned) to the image's patch grid and added to the patch
 * embeddings. After some layers a DeepStack merger (LayerNorm over a
 * unit's 4 rows as one, linear -> GELU -> linear) turns the rows into
 * features of the image's tokens that the decoder adds to its hidden
 * states after its first layers (model/decoder.c). */
#include "model/vit.h"

#include "core/ops.h"
#include "io/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QVIT_MAX_DIM (1 << 16)
#define QVIT_MAX_LAYERS 256
/* An encoding holds n_ff values a patch and the decoder's width a merge
 * unit, which only weights of that width x n_embd back: each is held to
 * this many times n_embd, as the decoder's widths are (model.c). Real
 * towers: n_ff 2.7 x to 4 x (Qwen2.5-VL 3420 / 1280, Qwen3-VL 4304 /
 * 1152), decoders up to 6.4 x (Qwen2.5-VL-72B, 8192). */
#define QVIT_MAX_RATIO 64
/* The most pixels an image or a video is scaled to: an encoding takes 36
 * bytes a pixel or more whatever the weights (the pixels, the patches, the
 * patch embedding's input), and min_pixels scales every image up to it.
 * The released processors' bounds are 12845056 (Qwen2-VL, Qwen2.5-VL),
 * 16777216 (Qwen3-VL images) and 25165824 (Qwen3-VL videos, all frames);
 * this is the library's default limit on a decoded image. And as many
 * patches as that makes of 14 x 14 (Qwen2.5-VL's), the smallest real
 * patch: every row of the encoding costs 40 n_embd bytes or more, whatever
 * the patch size. */
#define QVIT_MAX_PIXELS ((int64_t)KVF_IMAGE_MAX_PIXELS_DEFAULT)
#define QVIT_MAX_PATCHES (QVIT_MAX_PIXELS / (14 * 14))

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
        return err_set(KVF_ERR_FORMAT, "%s: Qwen-VL vision sizes out of range (width %d, ff %d, heads %d, layers "
                       "%d, patch %d, merge %d, window %d, frames a patch %d, tokens a second %g, pixels %lld..%lld, "
                       "video pixels %lld..%lld; head width a multiple of 4)", what, H, F, t->n_head, L, t->patch_size,
                       t->merge, t->window, t->t_patch, (double)t->tokens_per_second, (long long)t->min_pixels,
                       (long long)t->max_pixels, (long long)t->video_min_pixels, (long long)t->video_max_pixels);
    if (F > (int64_t)QVIT_MAX_RATIO * H)
        return err_set(KVF_ERR_FORMAT, "%s: vision feed-forward width %d (feed_forward_length / intermediate_size) is "
                       "more than %d x the vision width %d", what, F, QVIT_MAX_RATIO, H);
    if (m->hp.n_embd > (int64_t)QVIT_MAX_RATIO * H)
        return err_set(KVF_ERR_FORMAT, "%s: the decoder's embedding width %d, the merger's output, is more than %d x "
                       "the vision width %d", what, m->hp.n_embd, QVIT_MAX_RATIO, H);
    const int64_t most = KVF_MAX(t->max_pixels, t->video_max_pixels), pp = (int64_t)t->patch_size * t->patch_size;
    if (most > QVIT_MAX_PIXELS || most / pp > QVIT_MAX_PATCHES)
        return err_set(KVF_ERR_FORMAT, "%s: images of up to %lld pixels, videos of %lld (min_pixels / max_pixels, "
                       "size.shortest_edge / longest_edge, clip.vision.image_min_pixels / image_max_pixels): more "
                       "than %lld pixels, or %lld patches of %d x %d", what, (long long)t->max_pixels,
                       (long long)t->video_max_pixels, (long long)QVIT_MAX_PIXELS, (long long)QVIT_MAX_PATCHES,
                       t->patch_size, t->patch_size);
    for (int c = 0; c < 3; c++)
        if (!(t->std[c] > 0.0f) || !isfinite(t->mean[c]))
            return err_set(KVF_ERR_FORMAT, "%s: image mean/std out of range", what);
    if (t->qfamily == QVIT_QWEN3 && (t->n_pos <= 0 || t->n_pos > QVIT_MAX_DIM * 16 ||
                                     (int)sqrt((double)t->n_pos) * (int)sqrt((double)t->n_pos) != t->n_pos))
        return err_set(KVF_ERR_FORMAT, "%s: %d learned positions do not form a square grid", what, t->n_pos);
    if (t->n_deepstack < 0 || t->n_deepstack > L)
        return err_set(KVF_ERR_FORMAT, "%s: %d DeepStack layers in a tower of %d", what, t->n_deepstack, L);
    struct vision_model *v = malloc(sizeof *v);
    if (!v) return err_set(KVF_ERR_NOMEM, "out of memory");
    *v = *t;
    m->vision = v; /* freed with the model, whatever happens below */
    v->qlayers = calloc((size_t)L, sizeof *v->qlayers);
    v->full = calloc((size_t)L, sizeof *v->full);
    v->deepstack = calloc((size_t)KVF_MAX(v->n_deepstack, 1), sizeof *v->deepstack);
    if (!v->qlayers || !v->full || !v->deepstack) return err_set(KVF_ERR_NOMEM, "out of memory");
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
    v->patch = (struct weight){.type = DT_F32, .rows = H, .cols = 3 * pp,
                               .row_bytes = sizeof(float) * (size_t)(3 * pp), .data = sum};
    v->patch_t = (struct weight){.type = DT_F32, .rows = H, .cols = n, .row_bytes = sizeof(float) * (size_t)n,
                                 .data = full};
    return KVF_OK;
}

/* Tensor names of one container; %d: layer. qkv: a fused projection
 * (NULL: q, k, v apart, as llama.cpp splits Qwen2.5-VL's). Qwen3-VL's
 * DeepStack mergers (ds_*) are numbered by their place in the list in a
 * directory and by the layer they read in an mmproj (ds_by_layer). */
struct qvit_names {
    const char *patch0, *patch1, *patch_b, *pos;
    const char *norm1, *norm2, *qkv, *qkv_b, *q, *q_b, *k, *k_b, *v, *v_b, *o, *o_b;
    const char *gate, *gate_b, *up, *up_b, *down, *down_b;
    const char *merge_norm, *merge0, *merge0_b, *merge2, *merge2_b;
    /* Qwen2-VL, Qwen3-VL: the LayerNorms' biases; fc1 / fc2 are in up / down */
    const char *norm1_b, *norm2_b, *merge_norm_b;
    const char *ds_norm, *ds_norm_b, *ds_fc1, *ds_fc1_b, *ds_fc2, *ds_fc2_b;
    bool ds_by_layer;
};

/* Qwen2.5-VL's and Qwen2-VL's blocks share their names but for the MLP
 * (gate / up / down, fc1 / fc2) and the norms' biases. */
#define HF_QWEN_BLOCKS                                                                                              \
    .patch0 = "patch_embed.proj.weight", .norm1 = "blocks.%d.norm1.weight", .norm2 = "blocks.%d.norm2.weight",      \
    .qkv = "blocks.%d.attn.qkv.weight", .qkv_b = "blocks.%d.attn.qkv.bias", .o = "blocks.%d.attn.proj.weight",     \
    .o_b = "blocks.%d.attn.proj.bias", .merge_norm = "merger.ln_q.weight", .merge0 = "merger.mlp.0.weight",         \
    .merge0_b = "merger.mlp.0.bias", .merge2 = "merger.mlp.2.weight", .merge2_b = "merger.mlp.2.bias"

static const struct qvit_names names_hf = {
    HF_QWEN_BLOCKS,
    .gate = "blocks.%d.mlp.gate_proj.weight", .gate_b = "blocks.%d.mlp.gate_proj.bias",
    .up = "blocks.%d.mlp.up_proj.weight", .up_b = "blocks.%d.mlp.up_proj.bias",
    .down = "blocks.%d.mlp.down_proj.weight", .down_b = "blocks.%d.mlp.down_proj.bias",
};

static const struct qvit_names names_hf_qwen2 = {
    HF_QWEN_BLOCKS,
    .up = "blocks.%d.mlp.fc1.weight", .up_b = "blocks.%d.mlp.fc1.bias",
    .down = "blocks.%d.mlp.fc2.weight", .down_b = "blocks.%d.mlp.fc2.bias",
    .norm1_b = "blocks.%d.norm1.bias", .norm2_b = "blocks.%d.norm2.bias", .merge_norm_b = "merger.ln_q.bias",
};

static const struct qvit_names names_hf_qwen3 = {
    .patch0 = "patch_embed.proj.weight", .patch_b = "patch_embed.proj.bias", .pos = "pos_embed.weight",
    .norm1 = "blocks.%d.norm1.weight", .norm1_b = "blocks.%d.norm1.bias",
    .norm2 = "blocks.%d.norm2.weight", .norm2_b = "blocks.%d.norm2.bias",
    .qkv = "blocks.%d.attn.qkv.weight", .qkv_b = "blocks.%d.attn.qkv.bias",
    .o = "blocks.%d.attn.proj.weight", .o_b = "blocks.%d.attn.proj.bias",
    .up = "blocks.%d.mlp.linear_fc1.weight", .up_b = "blocks.%d.mlp.linear_fc1.bias",
    .down = "blocks.%d.mlp.linear_fc2.weight", .down_b = "blocks.%d.mlp.linear_fc2.bias",
    .merge_norm = "merger.norm.weight", .merge_norm_b = "merger.norm.bias",
    .merge0 = "merger.linear_fc1.weight", .merge0_b = "merger.linear_fc1.bias",
    .merge2 = "merger.linear_fc2.weight", .merge2_b = "merger.linear_fc2.bias",
    .ds_norm = "deepstack_merger_list.%d.norm.weight", .ds_norm_b = "deepstack_merger_list.%d.norm.bias",
    .ds_fc1 = "deepstack_merger_list.%d.linear_fc1.weight", .ds_fc1_b = "deepstack_merger_list.%d.linear_fc1.bias",
    .ds_fc2 = "deepstack_merger_list.%d.linear_fc2.weight", .ds_fc2_b = "deepstack_merger_list.%d.linear_fc2.bias",
};

/* llama.cpp's converter: the 3-D kernel split by frame, qkv split (but
 * Qwen3-VL's), the merger as v.post_ln / mm.0 / mm.2. */
#define MMPROJ_QWEN_BLOCKS                                                                                          \
    .patch0 = "v.patch_embd.weight", .patch1 = "v.patch_embd.weight.1", .norm1 = "v.blk.%d.ln1.weight",             \
    .norm2 = "v.blk.%d.ln2.weight", .o = "v.blk.%d.attn_out.weight", .o_b = "v.blk.%d.attn_out.bias",               \
    .up = "v.blk.%d.ffn_up.weight", .up_b = "v.blk.%d.ffn_up.bias", .down = "v.blk.%d.ffn_down.weight",            \
    .down_b = "v.blk.%d.ffn_down.bias", .merge_norm = "v.post_ln.weight", .merge0 = "mm.0.weight",                  \
    .merge0_b = "mm.0.bias", .merge2 = "mm.2.weight", .merge2_b = "mm.2.bias"
#define MMPROJ_QKV_APART                                                                                            \
    .q = "v.blk.%d.attn_q.weight", .q_b = "v.blk.%d.attn_q.bias", .k = "v.blk.%d.attn_k.weight",                    \
    .k_b = "v.blk.%d.attn_k.bias", .v = "v.blk.%d.attn_v.weight", .v_b = "v.blk.%d.attn_v.bias"
#define MMPROJ_LN_BIASES                                                                                            \
    .norm1_b = "v.blk.%d.ln1.bias", .norm2_b = "v.blk.%d.ln2.bias", .merge_norm_b = "v.post_ln.bias"

static const struct qvit_names names_mmproj = {
    MMPROJ_QWEN_BLOCKS, MMPROJ_QKV_APART,
    .gate = "v.blk.%d.ffn_gate.weight", .gate_b = "v.blk.%d.ffn_gate.bias",
};

static const struct qvit_names names_mmproj_qwen2 = {MMPROJ_QWEN_BLOCKS, MMPROJ_QKV_APART, MMPROJ_LN_BIASES};

static const struct qvit_names names_mmproj_qwen3 = {
    MMPROJ_QWEN_BLOCKS, MMPROJ_LN_BIASES,
    .patch_b = "v.patch_embd.bias", .pos = "v.position_embd.weight",
    .qkv = "v.blk.%d.attn_qkv.weight", .qkv_b = "v.blk.%d.attn_qkv.bias",
    .ds_norm = "v.deepstack.%d.norm.weight", .ds_norm_b = "v.deepstack.%d.norm.bias",
    .ds_fc1 = "v.deepstack.%d.fc1.weight", .ds_fc1_b = "v.deepstack.%d.fc1.bias",
    .ds_fc2 = "v.deepstack.%d.fc2.weight", .ds_fc2_b = "v.deepstack.%d.fc2.bias", .ds_by_layer = true,
};

/* Rows [i * rows, (i + 1) * rows) of w as a weight of their own. */
static struct weight rows_of(const struct weight *w, int64_t rows, int i) {
    struct weight r = *w;
    r.rows = rows;
    r.data = (const uint8_t *)w->data + (size_t)i * rows * w->row_bytes;
    return r;
}

/* Qwen3-VL's DeepStack mergers, into the decoder's width E. */
static enum kvf_status bind_deepstack(struct kvf_model *m, const struct tensor_src *src, const char *p,
                                      const struct qvit_names *nm) {
    struct vision_model *v = m->vision;
    const int64_t M = (int64_t)v->n_embd * v->merge * v->merge, E = m->hp.n_embd;
    char n[192];
    enum kvf_status st = KVF_OK;
    for (int i = 0; i < v->n_deepstack && st == KVF_OK; i++) {
        struct qvit_deepstack *d = &v->deepstack[i];
        const int k = nm->ds_by_layer ? d->layer : i;
        if ((st = weight_bind_vec(m, src, &d->norm, qname(n, sizeof n, p, nm->ds_norm, k), M, true, 0)) ||
            (st = weight_bind_vec(m, src, &d->norm_b, qname(n, sizeof n, p, nm->ds_norm_b, k), M, true, 0)) ||
            (st = weight_bind(m, src, &d->fc1, qname(n, sizeof n, p, nm->ds_fc1, k), M, M, true)) ||
            (st = weight_bind_vec(m, src, &d->fc1_b, qname(n, sizeof n, p, nm->ds_fc1_b, k), M, true, 0)) ||
            (st = weight_bind(m, src, &d->fc2, qname(n, sizeof n, p, nm->ds_fc2, k), E, M, true)))
            return st;
        st = weight_bind_vec(m, src, &d->fc2_b, qname(n, sizeof n, p, nm->ds_fc2_b, k), E, true, 0);
    }
    return st;
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
                q->b[i] = (struct weight){.type = DT_F32, .rows = 1, .cols = H, .row_bytes = sizeof(float) * (size_t)H,
                                          .data = (const float *)qkv_b.data + i * H};
            }
        } else if ((st = W(w[0], nm->q, H, H)) || (st = V(b[0], nm->q_b, H)) || (st = W(w[1], nm->k, H, H)) ||
                   (st = V(b[1], nm->k_b, H)) || (st = W(w[2], nm->v, H, H)) || (st = V(b[2], nm->v_b, H))) {
            return st;
        }
        if ((st = V(norm1, nm->norm1, H)) || (st = V(norm2, nm->norm2, H)) || (st = W(proj, nm->o, H, H)) ||
            (st = V(proj_b, nm->o_b, H)) || (st = W(up, nm->up, F, H)) || (st = V(up_b, nm->up_b, F)) ||
            (st = W(down, nm->down, H, F)) || (st = V(down_b, nm->down_b, H)))
            return st;
        if (v->qfamily != QVIT_QWEN25 ? (st = V(norm1_b, nm->norm1_b, H)) || (st = V(norm2_b, nm->norm2_b, H))
                                      : (st = W(gate, nm->gate, F, H)) || (st = V(gate_b, nm->gate_b, F)))
            return st;
#undef W
#undef V
    }
    if ((st = bind_deepstack(m, src, p, nm)) != KVF_OK) return st;
    if (nm->patch_b && (st = weight_bind_vec(m, src, &v->patch_b, qname(n, sizeof n, p, nm->patch_b, 0), H, true, 0)))
        return st;
    if (nm->pos && (st = weight_bind(m, src, &v->pos, qname(n, sizeof n, p, nm->pos, 0), v->n_pos, H, true)))
        return st;
    if ((v->qfamily != QVIT_QWEN25 &&
         (st = weight_bind_vec(m, src, &v->merge_norm_b, qname(n, sizeof n, p, nm->merge_norm_b, 0), H, true, 0))) ||
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
    if (!p) return err_set(KVF_ERR_FORMAT, "%s: config.json describes a Qwen-VL vision tower but no "
                           "'visual.patch_embed.proj.weight' tensor was found", dir);
    const enum qvit_family fam = cfg->qwen3vl ? QVIT_QWEN3 : cfg->qwen2vl ? QVIT_QWEN2 : QVIT_QWEN25;
    static const char *const acts[] = {[QVIT_QWEN25] = "silu", [QVIT_QWEN2] = "quick_gelu",
                                       [QVIT_QWEN3] = "gelu_pytorch_tanh"};
    if (strcmp(cfg->hidden_act, acts[fam]) != 0)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: vision hidden_act '%s' (%s)", dir, cfg->hidden_act, acts[fam]);
    struct vision_model t = {
        .patch_size = cfg->patch_size, .n_embd = cfg->hidden_size, .n_head = cfg->num_attention_heads,
        .n_ff = cfg->intermediate_size, .n_layer = cfg->num_hidden_layers, .eps = cfg->layer_norm_eps,
        .proj = VIT_PROJ_QWEN25VL, .merge = cfg->spatial_merge_size, .t_patch = cfg->temporal_patch_size,
        .window = cfg->window_size, .min_pixels = cfg->min_pixels, .max_pixels = cfg->max_pixels,
        .video_min_pixels = cfg->video_min_pixels, .video_max_pixels = cfg->video_max_pixels,
        .tokens_per_second = fam == QVIT_QWEN25 ? (float)cfg->tokens_per_second : 0.0f,
        .rope_theta = cfg->rope_theta, .qfamily = fam, .act = fam == QVIT_QWEN3 ? VIT_GELU_TANH : VIT_GELU_QUICK,
        .n_pos = cfg->num_position_embeddings, .n_deepstack = cfg->n_deepstack,
        .video_cap_tokens = cfg->video_cap ? cfg->video_max_tokens : 0,
    };
    memcpy(t.mean, cfg->image_mean, sizeof t.mean);
    memcpy(t.std, cfg->image_std, sizeof t.std);
    snprintf(t.source, sizeof t.source, "safetensors");
    enum kvf_status st = qvit_alloc(m, dir, &t);
    if (st != KVF_OK) return st;
    for (int l = 0; l < t.n_layer; l++) m->vision->full[l] = cfg->full_attention[l];
    for (int i = 0; i < t.n_deepstack; i++) m->vision->deepstack[i].layer = cfg->deepstack[i];
    static const struct qvit_names *const names[] = {[QVIT_QWEN25] = &names_hf, [QVIT_QWEN2] = &names_hf_qwen2,
                                                     [QVIT_QWEN3] = &names_hf_qwen3};
    return bind_tower(m, src, p, names[fam]);
}

/* Qwen3-VL's clip.vision.is_deepstack_layers: a flag per layer; the layers
 * set (read by DeepStack mergers, in order) into layers[], their count
 * into t->n_deepstack. */
static enum kvf_status mmproj_deepstack(const struct gguf_file *f, const char *path, struct vision_model *t,
                                        int layers[QVIT_MAX_LAYERS]) {
    const char *key = "clip.vision.is_deepstack_layers";
    if (!gguf_find(f, key)) return KVF_OK;
    const struct gguf_value *a = gguf_get_arr(f, key, GGUF_BOOL);
    if (!a || t->n_layer <= 0 || t->n_layer > QVIT_MAX_LAYERS || a->arr.n != (uint64_t)t->n_layer)
        return err_set(KVF_ERR_FORMAT, "%s: '%s' must be %d booleans, one a layer", path, key, t->n_layer);
    for (int l = 0; l < t->n_layer; l++)
        if (((const int8_t *)a->arr.data)[l]) layers[t->n_deepstack++] = l;
    return KVF_OK;
}

enum kvf_status qvit_load_mmproj(struct kvf_model *m, const char *path, enum qvit_family family) {
    const struct gguf_file *f = m->mmproj;
    const bool qwen25 = family == QVIT_QWEN25, qwen3 = family == QVIT_QWEN3;
    /* llama.cpp's defaults for what the file does not say: images of 8 to
     * 4096 tokens (its set_limit_image_tokens for the Qwen-VL towers),
     * 112-pixel windows, ViT rotary base 10000; for videos (llama.cpp has
     * none), the video processors' bounds (Qwen3VLVideoProcessor's for all
     * frames together) and the released Qwen2.5-VL models' 2 tokens a
     * second. */
    const int64_t video_unit = qwen3 ? 32 * 32 : 28 * 28;
    struct vision_model t = {.patch_size = 14, .eps = 1e-6f, .proj = VIT_PROJ_QWEN25VL, .merge = 2, .t_patch = 2,
                             .window = 112,
                             .video_min_pixels = 128 * video_unit, .video_max_pixels = 768 * video_unit,
                             .tokens_per_second = qwen25 ? 2.0f : 0.0f,
                             .rope_theta = 10000.0f, .mean = {0.48145466f, 0.4578275f, 0.40821073f},
                             .std = {0.26862954f, 0.26130258f, 0.27577711f}, .qfamily = family,
                             .act = qwen3 ? VIT_GELU_TANH : VIT_GELU_QUICK};
    int pattern = 0;
    enum kvf_status st;
    if ((st = mmproj_u32(f, "clip.vision.patch_size", &t.patch_size, true)) ||
        (st = mmproj_u32(f, "clip.vision.embedding_length", &t.n_embd, true)) ||
        (st = mmproj_u32(f, "clip.vision.feed_forward_length", &t.n_ff, true)) ||
        (st = mmproj_u32(f, "clip.vision.attention.head_count", &t.n_head, true)) ||
        (st = mmproj_u32(f, "clip.vision.block_count", &t.n_layer, true)) ||
        (st = mmproj_u32(f, "clip.vision.n_wa_pattern", &pattern, qwen25)) ||
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
    /* llama.cpp's 4096 tokens, within the ceiling (4096 units of 8 x 8
     * patches of 64 x 64 would be 2^30 pixels); a min_pixels past it is
     * refused. */
    t.max_pixels = max_px > 0 ? max_px : KVF_MAX(KVF_MIN(4096 * area, QVIT_MAX_PIXELS), t.min_pixels);
    gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &t.eps);
    if (qwen25 && pattern <= 0) return err_set(KVF_ERR_FORMAT, "%s: clip.vision.n_wa_pattern %d", path, pattern);
    if (!qwen25) t.window = t.patch_size * t.merge; /* unused: every layer full */
    const struct tensor_src src = {.gguf = f};
    int ds_layers[QVIT_MAX_LAYERS];
    if (qwen3) {
        int64_t ne[4];
        int nd;
        if (!tensor_shape(&src, names_mmproj_qwen3.pos, ne, &nd) || nd != 2 || ne[1] > INT32_MAX)
            return err_set(KVF_ERR_FORMAT, "%s: missing or malformed '%s'", path, names_mmproj_qwen3.pos);
        t.n_pos = (int)ne[1];
        if ((st = mmproj_deepstack(f, path, &t, ds_layers)) != KVF_OK) return st;
    }
    snprintf(t.source, sizeof t.source, "mmproj");
    if ((st = qvit_alloc(m, path, &t)) != KVF_OK) return st;
    /* Every n_wa_pattern-th layer attends over the whole image (Qwen2-VL, Qwen3-VL: all). */
    for (int l = 0; l < t.n_layer; l++) m->vision->full[l] = !qwen25 || (l + 1) % pattern == 0;
    for (int i = 0; i < t.n_deepstack; i++) m->vision->deepstack[i].layer = ds_layers[i];
    static const struct qvit_names *const names[] = {[QVIT_QWEN25] = &names_mmproj, [QVIT_QWEN2] = &names_mmproj_qwen2,
                                                     [QVIT_QWEN3] = &names_mmproj_qwen3};
    return bind_tower(m, &src, "", names[family]);
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

bool qvit_grid(const struct vision_model *v, int h, int w, int video_frames, int *rows, int *cols) {
    const int unit = v->patch_size * v->merge;
    int rh, rw;
    if (video_frames && v->qfamily == QVIT_QWEN3) {
        /* Qwen3-VL's video processor bounds a video's frames all together,
         * with its cap: each frame's share at most cap tokens (but 1.05 x
         * the lower bound), integers as Python computes them. */
        int64_t max_px = v->video_max_pixels;
        if (v->video_cap_tokens > 0) {
            const int64_t share = KVF_MIN((int64_t)v->video_cap_tokens * unit * unit, max_px / video_frames);
            max_px = KVF_MAX(share, (int64_t)((double)v->video_min_pixels * 1.05)) * video_frames;
        }
        if (!image_smart_resize_video(video_frames, v->t_patch, h, w, unit, v->video_min_pixels, max_px, &rh, &rw))
            return false;
    } else if (!image_smart_resize(h, w, unit, video_frames ? v->video_min_pixels : v->min_pixels,
                                   video_frames ? v->video_max_pixels : v->max_pixels, &rh, &rw)) {
        return false;
    }
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
    b->ff2 = malloc(sizeof(float) * KVF_MAX(n * wide, (size_t)p->nu * v->n_out));
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

/* out = RMSNorm(x) with w for n rows of dim (Qwen2-VL, Qwen3-VL:
 * LayerNorm with w and bias). */
static void norm_rows(const struct vision_model *v, float *out, const float *x, const struct weight *w,
                      const struct weight *bias, int n, int dim) {
    for (int t = 0; t < n; t++) {
        if (v->qfamily != QVIT_QWEN25)
            ops_layernorm(out + (size_t)t * dim, x + (size_t)t * dim, w->data, bias->data, dim, v->eps);
        else
            ops_rmsnorm(out + (size_t)t * dim, x + (size_t)t * dim, w->data, dim, v->eps);
    }
}

/* x += proj(attention(RMSNorm1(x))): every row sees the rows of its window
 * (or, full, all rows), keys and queries turned by their patch's angles. */
static enum kvf_status qvit_attention(const struct vision_model *v, const struct qvit_layer *L,
                                      const struct qvit_plan *p, bool full, struct qvit_buf *b, int nt) {
    const int n = p->n, H = v->n_embd, nh = v->n_head, hd = H / nh;
    norm_rows(v, b->r.xn, b->r.x, &L->norm1, &L->norm1_b, n, H);
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
 * x += fc2(quick_gelu(fc1(n))), n = LayerNorm2(x); Qwen3-VL the same with
 * tanh GELU). */
static void qvit_mlp(const struct vision_model *v, const struct qvit_layer *L, int n, struct qvit_buf *b, int nt) {
    const int H = v->n_embd, F = v->n_ff;
    norm_rows(v, b->r.xn, b->r.x, &L->norm2, &L->norm2_b, n, H);
    ops_matmul(&L->up, b->r.xn, n, b->ff, b->r.mm, nt);
    ops_add_bias(b->ff, &L->up_b, n, F);
    float *h = b->ff;
    if (v->qfamily == QVIT_QWEN3) {
        ops_gelu_tanh_mul(h, NULL, (int64_t)n * F);
    } else if (v->qfamily == QVIT_QWEN2) {
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

/* Qwen3-VL's learned positions added to the rows: the S x S grid
 * interpolated to the patch grid as torch's bilinear interpolation with
 * aligned corners (patch row r at r (S - 1) / (gh - 1) of the grid). */
static enum kvf_status add_positions(const struct vision_model *v, const struct qvit_plan *p, struct qvit_buf *b) {
    const int S = (int)sqrt((double)v->n_pos), H = v->n_embd, m = v->merge;
    float *corner = malloc(sizeof(float) * 4 * (size_t)H);
    if (!corner) return err_set(KVF_ERR_NOMEM, "out of memory");
    for (int k = 0; k < p->nu; k++)
        for (int i = 0; i < m * m; i++) {
            const int py = p->unit_of[k] / p->uw * m + i / m, px = p->unit_of[k] % p->uw * m + i % m;
            const float sy = (float)py * (float)(S - 1) / (float)KVF_MAX(p->gh - 1, 1);
            const float sx = (float)px * (float)(S - 1) / (float)KVF_MAX(p->gw - 1, 1);
            const int y0 = (int)sy, x0 = (int)sx, y1 = KVF_MIN(y0 + 1, S - 1), x1 = KVF_MIN(x0 + 1, S - 1);
            const float dy = sy - (float)y0, dx = sx - (float)x0;
            const float w[4] = {(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx};
            const int at[4] = {y0 * S + x0, y0 * S + x1, y1 * S + x0, y1 * S + x1};
            float *x = b->r.x + ((size_t)k * m * m + i) * H;
            for (int c = 0; c < 4; c++) ops_get_row(&v->pos, at[c], corner + (size_t)c * H);
            for (int e = 0; e < H; e++)
                x[e] += w[0] * corner[e] + w[1] * corner[H + e] + w[2] * corner[2 * H + e] + w[3] * corner[3 * H + e];
        }
    free(corner);
    return KVF_OK;
}

/* A merger's MLP over the units' rows in (nu of them, [nu][4H], normed):
 * linear -> GELU -> linear into the decoder's width, each unit's result
 * written to out + its raster index x stride. */
static void merger_mlp(const struct vision_model *v, const struct qvit_plan *p, const float *in,
                       const struct weight *fc1, const struct weight *fc1_b, const struct weight *fc2,
                       const struct weight *fc2_b, float *out, size_t stride, struct qvit_buf *b, int nt) {
    const int M = v->n_embd * v->merge * v->merge, E = v->n_out;
    ops_matmul(fc1, in, p->nu, b->ff, b->r.mm, nt);
    ops_add_bias(b->ff, fc1_b, p->nu, M);
    ops_gelu_erf(b->ff, (int64_t)p->nu * M);
    ops_matmul(fc2, b->ff, p->nu, b->ff2, b->r.mm, nt);
    ops_add_bias(b->ff2, fc2_b, p->nu, E);
    for (int k = 0; k < p->nu; k++)
        memcpy(out + (size_t)p->unit_of[k] * stride, b->ff2 + (size_t)k * E, sizeof(float) * (size_t)E);
}

enum kvf_status qvit_encode(const struct vision_model *v, const struct kvf_image *const *frames, int video_frames,
                            int nt, float *out, float *ds) {
    const bool video = video_frames > 0;
    const int unit = v->patch_size * v->merge, T = video ? v->t_patch : 1;
    const struct kvf_image *img = frames[0];
    int rows, cols;
    if (!qvit_grid(v, img->h, img->w, video_frames, &rows, &cols))
        return err_set(KVF_ERR_INVALID_ARG, "a %dx%d %s has no Qwen-VL size (aspect ratio over 200?)", img->w,
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
    const int H = v->n_embd, M = H * v->merge * v->merge, E = v->n_out;
    if (st == KVF_OK) {
        patchify(v, &p, rw, T, &b);
        ops_matmul(video ? &v->patch_t : &v->patch, b.patches, p.n, b.r.x, b.r.mm, nt);
        ops_add_bias(b.r.x, &v->patch_b, p.n, H);
        if (v->pos.data) st = add_positions(v, &p, &b);
    }
    for (int l = 0, next_ds = 0; l < v->n_layer && st == KVF_OK; l++) {
        if ((st = qvit_attention(v, &v->qlayers[l], &p, v->full[l], &b, nt)) != KVF_OK) break;
        qvit_mlp(v, &v->qlayers[l], p.n, &b, nt);
        if (next_ds < v->n_deepstack && v->deepstack[next_ds].layer == l) {
            /* A unit's rows are consecutive, so [n][H] is [nu][4H]. */
            const struct qvit_deepstack *d = &v->deepstack[next_ds];
            norm_rows(v, b.r.xn, b.r.x, &d->norm, &d->norm_b, p.nu, M);
            merger_mlp(v, &p, b.r.xn, &d->fc1, &d->fc1_b, &d->fc2, &d->fc2_b, ds + (size_t)next_ds * E,
                       (size_t)v->n_deepstack * E, &b, nt);
            next_ds++;
        }
    }
    if (st == KVF_OK) {
        norm_rows(v, b.r.xn, b.r.x, &v->merge_norm, &v->merge_norm_b, p.n, H);
        merger_mlp(v, &p, b.r.xn, &v->merge0, &v->merge0_b, &v->merge2, &v->merge2_b, out, (size_t)E, &b, nt);
    }
    buf_free(&b);
    plan_free(&p);
    return st;
}
