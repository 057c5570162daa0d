/* Vision towers and projectors (model/vit.h).
 *
 * LLaVA-1.5: pixels [3][S][S] -> patches [grid^2][3*p*p] -> patch embedding
 * (a convolution with stride p is a matrix product) -> [CLS; patches] +
 * learned position embeddings -> pre-LN -> n_layer x (x += attn(LN1(x));
 * x += fc2(act(fc1(LN2(x))))) -> [post-LN when the file has one] -> drop
 * CLS -> linear_1 -> GELU -> linear_2 -> decoder embeddings.
 *
 * Gemma 3: the same layers in SigLIP's form (no class token, no pre-LN, the
 * tanh GELU), all of them, then post-LN -> average pooling of the grid in
 * pool x pool cells -> RMSNorm with (1 + w) -> x P with P [n_embd][n_out]
 * (transformers' Gemma3MultiModalProjector).
 *
 * Idefics3 / SmolVLM: SigLIP again, on each sub-image the processor makes
 * of an image (tiles, then the whole), with transformers' NaViT position
 * rows -> post-LN -> pixel shuffle (each pool x pool block of patches one
 * row) -> one linear map without bias (Idefics3Connector).
 *
 * LLaVA reads the second-to-last layer's output: llama.cpp's converter stores
 * only the layers up to it (clip.vision.block_count = 23 of 24), while a
 * Hugging Face directory stores all of them and config.json names the
 * feature layer. */
#include "model/vit.h"

#include "attn/attn.h"
#include "core/ops.h"
#include "io/gguf.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIT_MAX_DIM (1 << 16)
#define VIT_MAX_LAYERS 256
#define VIT_MAX_IMAGE 4096
/* Each of an image's n_pos rows holds, in the encoder's scratch
 * (vit_buf_init), n_ff, the patch's 3 p^2 values, the decoder's width and
 * Idefics3's pool^2 x n_embd shuffled row, while the file need only hold
 * the n_pos x n_embd position embedding: so each is held to this many
 * times n_embd, as the decoder's widths are (model.c), and the grid to
 * 4 x Gemma 3's 64 (896 / 14; LLaVA-1.5's is 24, SmolVLM's 32). Real
 * towers are far inside: n_ff 4 x (CLIP ViT-L 4096 / 1024, SigLIP 4304 /
 * 1152), decoders up to 7 x (LLaVA's Yi-34B, 7168 over 1024), 3 p^2 under
 * 1 x, pool^2 16; the unit tests' tiny towers 3 p^2 18 x (588 / 32). */
#define VIT_MAX_RATIO 64
#define VIT_MAX_GRID 256

void vision_free(struct vision_model *v) {
    if (!v) return;
    free(v->navit);
    free(v->layers);
    free(v->qlayers);
    free(v->full);
    free(v->deepstack);
    free(v);
}

/* Ranges that keep every size computation of the encoder far from overflow
 * and its scratch in proportion to the file's weights; n_out: the decoder's
 * width, the projector's output. */
static enum kvf_status vision_check(const struct vision_model *v, int n_out, const char *what) {
    if (v->image_size <= 0 || v->image_size > VIT_MAX_IMAGE || v->patch_size <= 0 ||
        v->image_size % v->patch_size != 0)
        return err_set(KVF_ERR_FORMAT, "%s: image size %d is not a positive multiple of patch size %d (max %d)", what,
                       v->image_size, v->patch_size, VIT_MAX_IMAGE);
    if (v->image_size / v->patch_size > VIT_MAX_GRID)
        return err_set(KVF_ERR_FORMAT, "%s: image size %d over patch size %d is a grid of %d patches a side (max %d)",
                       what, v->image_size, v->patch_size, v->image_size / v->patch_size, VIT_MAX_GRID);
    if (v->n_embd <= 0 || v->n_embd > VIT_MAX_DIM || v->n_ff <= 0 || v->n_ff > VIT_MAX_DIM || v->n_head <= 0 ||
        v->n_embd % v->n_head != 0)
        return err_set(KVF_ERR_FORMAT, "%s: vision widths out of range (embd %d, ff %d, heads %d)", what, v->n_embd,
                       v->n_ff, v->n_head);
    const int64_t most = (int64_t)VIT_MAX_RATIO * v->n_embd;
    if (v->n_ff > most)
        return err_set(KVF_ERR_FORMAT, "%s: vision feed-forward width %d (feed_forward_length / intermediate_size) is "
                       "more than %d x the vision width %d", what, v->n_ff, VIT_MAX_RATIO, v->n_embd);
    if (3 * (int64_t)v->patch_size * v->patch_size > most)
        return err_set(KVF_ERR_FORMAT, "%s: a patch of %d x %d pixels (%lld values) is more than %d x the vision "
                       "width %d", what, v->patch_size, v->patch_size, 3 * (long long)v->patch_size * v->patch_size,
                       VIT_MAX_RATIO, v->n_embd);
    if (n_out > most)
        return err_set(KVF_ERR_FORMAT, "%s: the decoder's embedding width %d, the projector's output, is more than %d "
                       "x the vision width %d", what, n_out, VIT_MAX_RATIO, v->n_embd);
    if (v->n_layer <= 0 || v->n_layer > VIT_MAX_LAYERS)
        return err_set(KVF_ERR_FORMAT, "%s: %d vision layers to run (1..%d)", what, v->n_layer, VIT_MAX_LAYERS);
    if (!(v->eps > 0.0f && v->eps < 1.0f)) return err_set(KVF_ERR_FORMAT, "%s: layer-norm epsilon %g", what, v->eps);
    if ((v->proj == VIT_PROJ_GEMMA3 || v->proj == VIT_PROJ_IDEFICS3) &&
        (v->pool <= 0 || (v->image_size / v->patch_size) % v->pool != 0))
        return err_set(KVF_ERR_FORMAT, "%s: pooling kernel / pixel-shuffle factor %d does not divide the %d-patch grid",
                       what, v->pool, v->image_size / v->patch_size);
    if (v->proj == VIT_PROJ_IDEFICS3 && v->pool * v->pool > VIT_MAX_RATIO)
        return err_set(KVF_ERR_FORMAT, "%s: pixel-shuffle factor %d makes rows of %d x the vision width (max %d)", what,
                       v->pool, v->pool * v->pool, VIT_MAX_RATIO);
    if (v->proj == VIT_PROJ_IDEFICS3 && (v->longest <= 0 || v->longest > VIT_MAX_IMAGE))
        return err_set(KVF_ERR_FORMAT, "%s: the processor's longest edge %d is outside 1..%d", what, v->longest,
                       VIT_MAX_IMAGE);
    for (int c = 0; c < 3; c++)
        if (!(v->std[c] > 0.0f) || !isfinite(v->mean[c]))
            return err_set(KVF_ERR_FORMAT, "%s: image mean/std out of range", what);
    return KVF_OK;
}

/* Idefics3VisionEmbeddings' position of patch i of a side of n (a whole
 * tile): transformers buckets i * (1 / n), in float, between the
 * boundaries torch.arange(1 / n, 1, 1 / n), which are not k / n: x86
 * PyTorch computes them 8 at a time, each from a float base plus a
 * multiple of the step in double, for as many as 16 a turn cover, then one
 * by one in double. For some n (25, 29, ...) a row of the table is read
 * twice and the next never. (The clamp to 1 - 1e-6 never binds for n <= 4096.) */
static int navit_position(int i, int n) {
    const double step = 1.0 / n;
    const int count = (int)ceil((1.0 - step) / step), vec = count / 16 * 16;
    const float x = (float)i * (1.0f / (float)n);
    int pos = 0;
    for (int j = 0; j < count; j++) {
        const float base = (float)(step + step * (j / 8 * 8));
        const float b = j < vec ? (float)((double)base + (j % 8) * step) : (float)(step + step * j);
        pos += b <= x;
    }
    return pos;
}

static enum kvf_status vision_alloc(const struct vision_model *tmpl, struct vision_model **out) {
    struct vision_model *v = malloc(sizeof *v);
    if (!v) return err_set(KVF_ERR_NOMEM, "out of memory");
    *v = *tmpl;
    v->grid = v->image_size / v->patch_size;
    v->n_pos = v->grid * v->grid + (v->has_cls ? 1 : 0);
    const bool pooled = v->proj == VIT_PROJ_GEMMA3 || v->proj == VIT_PROJ_IDEFICS3;
    v->tok_grid = pooled ? v->grid / v->pool : v->grid;
    v->layers = calloc((size_t)v->n_layer, sizeof *v->layers);
    v->navit = v->proj == VIT_PROJ_IDEFICS3 ? malloc(sizeof *v->navit * (size_t)v->grid) : NULL;
    if (!v->layers || (v->proj == VIT_PROJ_IDEFICS3 && !v->navit)) {
        vision_free(v);
        return err_set(KVF_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; v->navit && i < v->grid; i++) v->navit[i] = navit_position(i, v->grid);
    *out = v;
    return KVF_OK;
}

/* Names of one container convention; %d = layer. */
struct vit_names {
    const char *patch, *patch_b, *cls, *pos, *pre_w, *pre_b, *post_w, *post_b;
    const char *ln1_w, *ln1_b, *ln2_w, *ln2_b, *q, *bq, *k, *bk, *v, *bv, *o, *bo;
    const char *fc1, *fc1_b, *fc2, *fc2_b;
    const char *mm0, *mm0_b, *mm2, *mm2_b;
    const char *mm_norm, *mm_proj; /* Gemma 3's projector */
    const char *mm_fc;             /* Idefics3's */
};

static const struct vit_names names_mmproj = {
    "v.patch_embd.weight", "v.patch_embd.bias", "v.class_embd", "v.position_embd.weight",
    "v.pre_ln.weight", "v.pre_ln.bias", "v.post_ln.weight", "v.post_ln.bias",
    "v.blk.%d.ln1.weight", "v.blk.%d.ln1.bias", "v.blk.%d.ln2.weight", "v.blk.%d.ln2.bias",
    "v.blk.%d.attn_q.weight", "v.blk.%d.attn_q.bias", "v.blk.%d.attn_k.weight", "v.blk.%d.attn_k.bias",
    "v.blk.%d.attn_v.weight", "v.blk.%d.attn_v.bias", "v.blk.%d.attn_out.weight", "v.blk.%d.attn_out.bias",
    /* fc1 / fc2: chosen per file in bind_layers (llama.cpp's legacy quirk) */
    NULL, NULL, NULL, NULL,
    "mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias",
    "mm.soft_emb_norm.weight", "mm.input_projection.weight", "mm.model.fc.weight",
};

/* Hugging Face names below the vision tower / projector prefixes. */
static const struct vit_names names_hf = {
    "embeddings.patch_embedding.weight", "embeddings.patch_embedding.bias", "embeddings.class_embedding",
    "embeddings.position_embedding.weight", "pre_layrnorm.weight", "pre_layrnorm.bias", "post_layernorm.weight",
    "post_layernorm.bias",
    "encoder.layers.%d.layer_norm1.weight", "encoder.layers.%d.layer_norm1.bias",
    "encoder.layers.%d.layer_norm2.weight", "encoder.layers.%d.layer_norm2.bias",
    "encoder.layers.%d.self_attn.q_proj.weight", "encoder.layers.%d.self_attn.q_proj.bias",
    "encoder.layers.%d.self_attn.k_proj.weight", "encoder.layers.%d.self_attn.k_proj.bias",
    "encoder.layers.%d.self_attn.v_proj.weight", "encoder.layers.%d.self_attn.v_proj.bias",
    "encoder.layers.%d.self_attn.out_proj.weight", "encoder.layers.%d.self_attn.out_proj.bias",
    "encoder.layers.%d.mlp.fc1.weight", "encoder.layers.%d.mlp.fc1.bias",
    "encoder.layers.%d.mlp.fc2.weight", "encoder.layers.%d.mlp.fc2.bias",
    "linear_1.weight", "linear_1.bias", "linear_2.weight", "linear_2.bias",
    "mm_soft_emb_norm.weight", "mm_input_projection_weight", "modality_projection.proj.weight",
};

/* name = prefix + fmt (with the layer number when fmt has %d). */
static const char *vname(char *buf, size_t n, const char *prefix, const char *fmt, int layer) {
    const int k = snprintf(buf, n, "%s", prefix);
    snprintf(buf + k, n - (size_t)k, fmt, layer);
    return buf;
}

/* Whether the post-layernorm is read: LLaVA's feature layer never reaches
 * HF's, some mmproj files hold one for the layers they keep, SigLIP's ends
 * the tower. */
enum post_ln { POST_NONE, POST_OPTIONAL, POST_REQUIRED };

struct vit_binder {
    struct kvf_model *m;
    const struct tensor_src *src;
    const char *vprefix, *pprefix; /* vision tower, projector */
    const struct vit_names *nm;
    enum post_ln post;
    bool proj_bias;                /* the MLP projector's biases */
    float norm_add;                /* added to Gemma 3's projector norm: 1 for HF's (1 + w) form */
};

/* Gemma 3's projection: the file's [n_embd][n_out] (x P) as an F32 copy
 * [n_out][n_embd], the layout ops_matmul multiplies by. */
static enum kvf_status bind_transposed(const struct vit_binder *b, struct weight *w, const char *name, int64_t rows,
                                       int64_t cols) {
    struct weight stored;
    enum kvf_status st = weight_bind(b->m, b->src, &stored, name, rows, cols, true);
    if (st != KVF_OK) return st;
    float *t = malloc(sizeof(float) * (size_t)rows * (size_t)cols), *row = malloc(sizeof(float) * (size_t)cols);
    if (!t || !row) {
        free(t), free(row);
        return err_set(KVF_ERR_NOMEM, "out of memory transposing '%s'", name);
    }
    for (int64_t r = 0; r < rows; r++) {
        ops_get_row(&stored, r, row);
        for (int64_t c = 0; c < cols; c++) t[c * rows + r] = row[c];
    }
    free(row);
    if ((st = model_keep(b->m, t)) != KVF_OK) return st;
    *w = (struct weight){.type = DT_F32, .rows = cols, .cols = rows, .row_bytes = sizeof(float) * (size_t)rows,
                         .data = t};
    return KVF_OK;
}

static enum kvf_status bind_projector(const struct vit_binder *b, struct vision_model *v) {
    struct kvf_model *m = b->m;
    const struct tensor_src *src = b->src;
    const struct vit_names *nm = b->nm;
    const int64_t H = v->n_embd, E = m->hp.n_embd;
    char n[192];
    enum kvf_status st;
    if (v->proj == VIT_PROJ_GEMMA3) {
        int64_t ne[4];
        int nd;
        /* The norm's width is the tower's; the projection's the decoder's. */
        if ((st = weight_bind_vec(m, src, &v->mm_norm, vname(n, sizeof n, b->pprefix, nm->mm_norm, 0), H, true,
                                  b->norm_add)))
            return st;
        vname(n, sizeof n, b->pprefix, nm->mm_proj, 0);
        if (!tensor_shape(src, n, ne, &nd)) return err_set(KVF_ERR_FORMAT, "missing projector tensor '%s'", n);
        if (nd != 2 || ne[1] != H || ne[0] != E)
            return err_set(KVF_ERR_SHAPE, "the projector does not map the vision width %lld to the decoder's "
                           "embedding width %lld: '%s' is [%lld, %lld]", (long long)H, (long long)E, n,
                           (long long)ne[1], (long long)ne[0]);
        if ((st = bind_transposed(b, &v->mm_proj, n, H, E))) return st;
        v->n_out = (int)E;
        return KVF_OK;
    }
    /* The projector must land in the decoder's embedding space: Idefics3's
     * one map from the pixel-shuffled rows, LLaVA's two layers. */
    if (v->proj == VIT_PROJ_IDEFICS3)
        st = weight_bind(m, src, &v->mm0, vname(n, sizeof n, b->pprefix, nm->mm_fc, 0), E, H * v->pool * v->pool,
                         true);
    else if (!(st = weight_bind(m, src, &v->mm0, vname(n, sizeof n, b->pprefix, nm->mm0, 0), E, H, false)) &&
             !(st = v->mm0.data ? KVF_OK : err_set(KVF_ERR_FORMAT, "missing projector tensor '%s'", n)) &&
             !(st = weight_bind_vec(m, src, &v->mm0_b, vname(n, sizeof n, b->pprefix, nm->mm0_b, 0), E,
                                    b->proj_bias, 0)) &&
             !(st = weight_bind(m, src, &v->mm2, vname(n, sizeof n, b->pprefix, nm->mm2, 0), E, E, true)))
        st = weight_bind_vec(m, src, &v->mm2_b, vname(n, sizeof n, b->pprefix, nm->mm2_b, 0), E, b->proj_bias, 0);
    if (st != KVF_OK) {
        if (st != KVF_ERR_SHAPE) return st;
        /* Say what the shapes mean, keeping the binder's message (copied:
         * err_set writes into the buffer kvf_last_error returns). */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kvf_last_error());
        return err_set(st, "the projector does not map the vision width %lld to the decoder's embedding width %lld: "
                       "%s", (long long)H, (long long)E, msg);
    }
    v->n_out = (int)E;
    return KVF_OK;
}

static enum kvf_status bind_layers(const struct vit_binder *b, struct vision_model *v) {
    struct kvf_model *m = b->m;
    const struct tensor_src *src = b->src;
    const struct vit_names *nm = b->nm;
    const int64_t H = v->n_embd, F = v->n_ff;
    char n[192];
    enum kvf_status st;
    if ((st = weight_bind_nd(m, src, &v->patch, vname(n, sizeof n, b->vprefix, nm->patch, 0), H,
                             3 * (int64_t)v->patch_size * v->patch_size, 4, true)) ||
        (st = weight_bind_vec(m, src, &v->patch_b, vname(n, sizeof n, b->vprefix, nm->patch_b, 0), H, false, 0)) ||
        (st = weight_bind(m, src, &v->pos, vname(n, sizeof n, b->vprefix, nm->pos, 0), v->n_pos, H, true)))
        return st;
    if (v->has_cls &&
        ((st = weight_bind_vec(m, src, &v->cls, vname(n, sizeof n, b->vprefix, nm->cls, 0), H, true, 0)) ||
         (st = weight_bind_vec(m, src, &v->pre_w, vname(n, sizeof n, b->vprefix, nm->pre_w, 0), H, true, 0)) ||
         (st = weight_bind_vec(m, src, &v->pre_b, vname(n, sizeof n, b->vprefix, nm->pre_b, 0), H, true, 0))))
        return st;
    if (b->post != POST_NONE &&
        ((st = weight_bind_vec(m, src, &v->post_w, vname(n, sizeof n, b->vprefix, nm->post_w, 0), H,
                               b->post == POST_REQUIRED, 0)) ||
         (st = weight_bind_vec(m, src, &v->post_b, vname(n, sizeof n, b->vprefix, nm->post_b, 0), H,
                               v->post_w.data != NULL, 0))))
        return st;
    for (int l = 0; l < v->n_layer; l++) {
        struct vit_layer *L = &v->layers[l];
        const char *fc1 = nm->fc1, *fc1_b = nm->fc1_b, *fc2 = nm->fc2, *fc2_b = nm->fc2_b;
        if (!fc1) {
            /* llama.cpp's llava converter stored HF's fc1 as ffn_down and fc2
             * as ffn_up; newer converters name them the other way round. The
             * shapes tell which: fc1 maps n_embd to n_ff. */
            int64_t ne[4];
            int nd;
            const bool legacy = H == F ||
                !tensor_shape(src, vname(n, sizeof n, "", "v.blk.%d.ffn_up.weight", l), ne, &nd) || nd != 2 ||
                ne[0] != H || ne[1] != F;
            fc1 = legacy ? "v.blk.%d.ffn_down.weight" : "v.blk.%d.ffn_up.weight";
            fc1_b = legacy ? "v.blk.%d.ffn_down.bias" : "v.blk.%d.ffn_up.bias";
            fc2 = legacy ? "v.blk.%d.ffn_up.weight" : "v.blk.%d.ffn_down.weight";
            fc2_b = legacy ? "v.blk.%d.ffn_up.bias" : "v.blk.%d.ffn_down.bias";
        }
        const char *p = b->vprefix;
        if ((st = weight_bind_vec(m, src, &L->ln1_w, vname(n, sizeof n, p, nm->ln1_w, l), H, true, 0)) ||
            (st = weight_bind_vec(m, src, &L->ln1_b, vname(n, sizeof n, p, nm->ln1_b, l), H, true, 0)) ||
            (st = weight_bind_vec(m, src, &L->ln2_w, vname(n, sizeof n, p, nm->ln2_w, l), H, true, 0)) ||
            (st = weight_bind_vec(m, src, &L->ln2_b, vname(n, sizeof n, p, nm->ln2_b, l), H, true, 0)) ||
            (st = weight_bind(m, src, &L->w[0], vname(n, sizeof n, p, nm->q, l), H, H, true)) ||
            (st = weight_bind_vec(m, src, &L->b[0], vname(n, sizeof n, p, nm->bq, l), H, true, 0)) ||
            (st = weight_bind(m, src, &L->w[1], vname(n, sizeof n, p, nm->k, l), H, H, true)) ||
            (st = weight_bind_vec(m, src, &L->b[1], vname(n, sizeof n, p, nm->bk, l), H, true, 0)) ||
            (st = weight_bind(m, src, &L->w[2], vname(n, sizeof n, p, nm->v, l), H, H, true)) ||
            (st = weight_bind_vec(m, src, &L->b[2], vname(n, sizeof n, p, nm->bv, l), H, true, 0)) ||
            (st = weight_bind(m, src, &L->wo, vname(n, sizeof n, p, nm->o, l), H, H, true)) ||
            (st = weight_bind_vec(m, src, &L->bo, vname(n, sizeof n, p, nm->bo, l), H, true, 0)) ||
            (st = weight_bind(m, src, &L->fc1, vname(n, sizeof n, p, fc1, l), F, H, true)) ||
            (st = weight_bind_vec(m, src, &L->fc1_b, vname(n, sizeof n, p, fc1_b, l), F, true, 0)) ||
            (st = weight_bind(m, src, &L->fc2, vname(n, sizeof n, p, fc2, l), H, F, true)) ||
            (st = weight_bind_vec(m, src, &L->fc2_b, vname(n, sizeof n, p, fc2_b, l), H, true, 0)))
            return st;
    }
    return bind_projector(b, v);
}

enum kvf_status mmproj_u32(const struct gguf_file *f, const char *key, int *out, bool required) {
    uint32_t u;
    if (!gguf_get_u32(f, key, &u)) {
        if (required) return err_set(KVF_ERR_FORMAT, "mmproj: missing or ill-typed '%s'", key);
        return KVF_OK;
    }
    if (u > (uint32_t)INT32_MAX) return err_set(KVF_ERR_FORMAT, "mmproj: '%s' = %u out of range", key, u);
    *out = (int)u;
    return KVF_OK;
}

enum kvf_status mmproj_float3(const struct gguf_file *f, const char *key, float out[3]) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return KVF_OK; /* keep CLIP's */
    const struct gguf_value *a = gguf_get_arr(f, key, GGUF_F32);
    if (!a || a->arr.n != 3) return err_set(KVF_ERR_FORMAT, "mmproj: '%s' must be 3 f32 values", key);
    memcpy(out, a->arr.data, 3 * sizeof(float));
    return KVF_OK;
}

static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
static const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
static const float half[3] = {0.5f, 0.5f, 0.5f}; /* transformers' IMAGENET_STANDARD mean and std */

enum kvf_status vision_load_mmproj(struct kvf_model *m, const char *path) {
    enum kvf_status st = gguf_open(path, &m->mmproj);
    if (st != KVF_OK) return st;
    const struct gguf_file *f = m->mmproj;
    const char *arch = gguf_get_str(f, "general.architecture");
    if (!arch || strcmp(arch, "clip") != 0)
        return err_set(KVF_ERR_FORMAT, "%s: not a vision projector (general.architecture '%s', expected 'clip')", path,
                       arch ? arch : "(none)");
    bool flag;
    if (gguf_get_bool(f, "clip.has_vision_encoder", &flag) && !flag)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: the file has no vision encoder", path);
    const char *proj = gguf_get_str(f, "clip.projector_type");
    static const struct {
        const char *name;
        enum qvit_family family;
    } qwen[] = {{"qwen2.5vl", QVIT_QWEN25}, {"qwen2vl_merger", QVIT_QWEN2}, {"qwen3vl_merger", QVIT_QWEN3}};
    for (size_t i = 0; proj && i < sizeof qwen / sizeof *qwen; i++)
        if (!strcmp(proj, qwen[i].name)) return qvit_load_mmproj(m, path, qwen[i].family);
    const bool gemma3 = proj && !strcmp(proj, "gemma3"), idefics3 = proj && !strcmp(proj, "idefics3");
    const bool siglip = gemma3 || idefics3;
    if (!siglip && (proj ? strcmp(proj, "mlp") != 0 : !(gguf_get_bool(f, "clip.has_llava_projector", &flag) && flag)))
        return err_set(KVF_ERR_UNSUPPORTED, "%s: projector type '%s' is not supported (LLaVA's 'mlp', 'gemma3', "
                       "'idefics3', 'qwen2.5vl', 'qwen2vl_merger', 'qwen3vl_merger')", path,
                       proj ? proj : "(none)");
    /* Idefics3: the processor's defaults (tiles, Lanczos) where the file
     * has no key, and its longest side at 4 tiles (every SmolVLM and
     * Idefics3 processor's) unless it names clip.vision.preproc_image_size. */
    struct vision_model t = {.eps = siglip ? 1e-6f : 1e-5f, .has_cls = !siglip, .pool = idefics3 ? 2 : 4,
                             .proj = gemma3 ? VIT_PROJ_GEMMA3 : idefics3 ? VIT_PROJ_IDEFICS3 : VIT_PROJ_MLP,
                             .split = true, .resample = IMAGE_LANCZOS};
    memcpy(t.mean, idefics3 ? half : clip_mean, sizeof t.mean);
    memcpy(t.std, idefics3 ? half : clip_std, sizeof t.std);
    if ((st = mmproj_u32(f, "clip.vision.image_size", &t.image_size, true)) ||
        (st = mmproj_u32(f, "clip.vision.patch_size", &t.patch_size, true)) ||
        (st = mmproj_u32(f, "clip.vision.embedding_length", &t.n_embd, true)) ||
        (st = mmproj_u32(f, "clip.vision.feed_forward_length", &t.n_ff, true)) ||
        (st = mmproj_u32(f, "clip.vision.attention.head_count", &t.n_head, true)) ||
        (st = mmproj_u32(f, "clip.vision.block_count", &t.n_layer, true)) ||
        /* llama.cpp's converter writes it only when it is not Gemma 3's 4. */
        (st = mmproj_u32(f, "clip.vision.projector.scale_factor", &t.pool, false)) ||
        (st = mmproj_float3(f, "clip.vision.image_mean", t.mean)) ||
        (st = mmproj_float3(f, "clip.vision.image_std", t.std)))
        return st;
    if (idefics3) {
        t.longest = t.image_size <= VIT_MAX_IMAGE ? 4 * t.image_size : 0; /* too large: refused by vision_check */
        if ((st = mmproj_u32(f, "clip.vision.preproc_image_size", &t.longest, false))) return st;
    }
    gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &t.eps);
    bool gelu = false;
    gguf_get_bool(f, "clip.use_gelu", &gelu);
    /* SigLIP's GELU is the tanh form (gelu_pytorch_tanh), CLIP's use_gelu the erf one. */
    t.act = siglip ? VIT_GELU_TANH : gelu ? VIT_GELU_ERF : VIT_GELU_QUICK;
    snprintf(t.source, sizeof t.source, "mmproj");
    if ((st = vision_check(&t, m->hp.n_embd, path)) || (st = vision_alloc(&t, &m->vision))) return st;
    const struct tensor_src src = {.gguf = f};
    /* The converter stores Gemma 3's projector norm as w + 1. */
    const struct vit_binder b = {m, &src, "", "", &names_mmproj, siglip ? POST_REQUIRED : POST_OPTIONAL, true, 0.0f};
    return bind_layers(&b, m->vision);
}

enum kvf_status vision_load_hf(struct kvf_model *m, const char *dir, const struct tensor_src *src) {
    /* LLaVA and Gemma 3 (transformers < 4.52 and later), Idefics3 / SmolVLM. */
    static const char *const vprefixes[] = {"vision_tower.vision_model.", "model.vision_tower.vision_model.",
                                            "model.vision_model."};
    static const char *const pprefixes[] = {"multi_modal_projector.", "model.multi_modal_projector.",
                                            "model.connector."};
    int which = -1;
    char n[192];
    for (int i = 0; i < 3; i++)
        if (tensor_exists(src, vname(n, sizeof n, vprefixes[i], names_hf.patch, 0))) which = i;
    struct hf_vision_config cfg;
    enum kvf_status st = hf_vision_config_load(dir, &cfg);
    if (st != KVF_OK) return st;
    if (cfg.qwen25vl || cfg.qwen2vl || cfg.qwen3vl) return qvit_load_hf(m, dir, src, &cfg);
    if (which < 0) {
        if (cfg.present) return err_set(KVF_ERR_FORMAT, "%s: config.json describes a vision tower but no '%s' tensor "
                                        "was found", dir, vname(n, sizeof n, vprefixes[0], names_hf.patch, 0));
        return KVF_OK;
    }
    struct vision_model t = {
        .image_size = cfg.image_size, .patch_size = cfg.patch_size, .n_embd = cfg.hidden_size,
        .n_head = cfg.num_attention_heads, .n_ff = cfg.intermediate_size, .eps = cfg.layer_norm_eps,
        .has_cls = !cfg.gemma3 && !cfg.idefics3,
        .proj = cfg.gemma3 ? VIT_PROJ_GEMMA3 : cfg.idefics3 ? VIT_PROJ_IDEFICS3 : VIT_PROJ_MLP,
    };
    memcpy(t.mean, cfg.image_mean, sizeof t.mean);
    memcpy(t.std, cfg.image_std, sizeof t.std);
    if (!strcmp(cfg.hidden_act, "quick_gelu")) t.act = VIT_GELU_QUICK;
    else if (!strcmp(cfg.hidden_act, "gelu")) t.act = VIT_GELU_ERF;
    else if (!strcmp(cfg.hidden_act, "gelu_pytorch_tanh")) t.act = VIT_GELU_TANH;
    else return err_set(KVF_ERR_UNSUPPORTED, "%s: vision hidden_act '%s' (quick_gelu, gelu or gelu_pytorch_tanh)", dir,
                        cfg.hidden_act);
    const int L = cfg.num_hidden_layers;
    if (cfg.gemma3) {
        /* tokens_per_side = sqrt(mm_tokens_per_image); kernel = grid / tokens_per_side. */
        const int side = (int)lround(sqrt((double)KVF_MAX(cfg.mm_tokens_per_image, 0)));
        const int grid = cfg.patch_size > 0 ? cfg.image_size / cfg.patch_size : 0;
        if (side <= 0 || side * side != cfg.mm_tokens_per_image || grid % side != 0)
            return err_set(KVF_ERR_FORMAT, "%s: mm_tokens_per_image %d is not the square of a divisor of the %d-patch "
                           "grid", dir, cfg.mm_tokens_per_image, grid);
        t.pool = grid / side;
        t.n_layer = L;
    } else if (cfg.idefics3) {
        /* The tiles are what the tower was made for: its positions cover one. */
        if (cfg.tile != cfg.image_size)
            return err_set(KVF_ERR_UNSUPPORTED, "%s: the processor's tiles (max_image_size %d) are not the vision "
                           "tower's image_size %d", dir, cfg.tile, cfg.image_size);
        static const enum image_filter filters[4] = {[1] = IMAGE_LANCZOS, [2] = IMAGE_BILINEAR, [3] = IMAGE_BICUBIC};
        if (cfg.resample < 1 || cfg.resample > 3)
            return err_set(KVF_ERR_UNSUPPORTED, "%s: resample %d (Lanczos 1, bilinear 2 or bicubic 3)", dir,
                           cfg.resample);
        t.resample = filters[cfg.resample];
        t.pool = cfg.scale_factor;
        t.longest = cfg.longest_edge;
        t.split = cfg.split;
        t.n_layer = L;
    } else {
        if (strcmp(cfg.projector_act, "gelu") != 0)
            return err_set(KVF_ERR_UNSUPPORTED, "%s: projector_hidden_act '%s' (gelu)", dir, cfg.projector_act);
        if (!strcmp(cfg.select_strategy, "full")) t.keep_cls = true;
        else if (strcmp(cfg.select_strategy, "default") != 0)
            return err_set(KVF_ERR_UNSUPPORTED, "%s: vision_feature_select_strategy '%s'", dir, cfg.select_strategy);
        /* hidden_states holds the embeddings and then each layer's output. */
        t.n_layer = cfg.feature_layer < 0 ? L + 1 + cfg.feature_layer : cfg.feature_layer;
    }
    if (L <= 0 || t.n_layer <= 0 || t.n_layer > L)
        return err_set(KVF_ERR_FORMAT, "%s: vision_feature_layer %d outside 1..%d layers", dir, cfg.feature_layer, L);
    snprintf(t.source, sizeof t.source, "safetensors");
    if ((st = vision_check(&t, m->hp.n_embd, dir)) || (st = vision_alloc(&t, &m->vision))) return st;
    const struct vit_binder b = {m, src, vprefixes[which], pprefixes[which], &names_hf,
                                 cfg.gemma3 || cfg.idefics3 ? POST_REQUIRED : POST_NONE, cfg.projector_bias, 1.0f};
    return bind_layers(&b, m->vision);
}

static int32_t token_find(const struct tokenizer *t, const char *text) {
    for (int32_t id = 0; id < tok_n_vocab(t); id++) {
        const char *s = tok_text(t, id);
        if (s && !strcmp(s, text)) return id;
    }
    return -1;
}

enum kvf_status vision_attach(struct kvf_model *m) {
    struct vision_model *v = m->vision;
    v->boi = v->eoi = -1;
    if (v->proj == VIT_PROJ_QWEN25VL) {
        /* The decoder adds as many DeepStack features as the tower makes
         * (a GGUF decoder says how many it takes: n_deepstack_layers). */
        if (m->gguf && m->hp.n_deepstack != v->n_deepstack)
            return err_set(KVF_ERR_SHAPE, "the decoder takes %d DeepStack features, the vision tower makes %d",
                           m->hp.n_deepstack, v->n_deepstack);
        if (v->n_deepstack > m->hp.n_layer)
            return err_set(KVF_ERR_SHAPE, "%d DeepStack features for a decoder of %d layers", v->n_deepstack,
                           m->hp.n_layer);
        m->hp.n_deepstack = v->n_deepstack;
        /* The Qwen-VL chat templates write <|vision_start|><|image_pad|><|vision_end|>. */
        v->boi = token_find(m->tok, "<|vision_start|>");
        v->eoi = token_find(m->tok, "<|vision_end|>");
        if (v->boi < 0 || v->eoi < 0)
            return err_set(KVF_ERR_FORMAT, "a Qwen2.5-VL vision tower needs <|vision_start|> and <|vision_end|> in "
                           "the vocabulary");
        return KVF_OK;
    }
    if (v->proj == VIT_PROJ_IDEFICS3) {
        /* The processor writes each sub-image after these (session/prompt.c:
         * prompt_add_idefics3), as llama.cpp's mtmd looks them up. */
        if (token_find(m->tok, "<fake_token_around_image>") < 0 || token_find(m->tok, "<global-img>") < 0)
            return err_set(KVF_ERR_FORMAT, "an Idefics3 / SmolVLM vision tower needs <fake_token_around_image> and "
                           "<global-img> in the vocabulary");
        return KVF_OK;
    }
    if (v->proj != VIT_PROJ_GEMMA3) return KVF_OK;
    /* Gemma3Processor writes each image as "\n\n<start_of_image>" + its
     * tokens + "<end_of_image>\n\n", and the decoder lets the tokens of an
     * image attend to each other (token_type_ids). */
    v->boi = token_find(m->tok, "<start_of_image>");
    v->eoi = token_find(m->tok, "<end_of_image>");
    if (v->boi < 0 || v->eoi < 0)
        return err_set(KVF_ERR_FORMAT, "a Gemma 3 vision tower needs <start_of_image> and <end_of_image> in the "
                       "vocabulary");
    v->boi_newlines = true;
    m->hp.image_bidirectional = true;
    return KVF_OK;
}

void vision_fill_info(const struct vision_model *v, struct kvf_model_info *info) {
    info->has_vision = true;
    info->vision_source = v->source;
    static const char *const towers[] = {"CLIP ViT", "SigLIP", "Qwen2.5-VL ViT", "SigLIP"};
    static const char *const qwen[] = {[QVIT_QWEN25] = "Qwen2.5-VL ViT", [QVIT_QWEN2] = "Qwen2-VL ViT",
                                       [QVIT_QWEN3] = "Qwen3-VL ViT"};
    info->vision_tower = v->proj == VIT_PROJ_QWEN25VL ? qwen[v->qfamily] : towers[v->proj];
    static const char *const projectors[] = {"mlp", "gemma3", "merger", "idefics3"};
    info->vision_projector = projectors[v->proj];
    info->vision_image_size = v->image_size;
    info->vision_patch_size = v->patch_size;
    info->vision_n_layer = v->n_layer;
    info->vision_n_embd = v->n_embd;
    info->vision_n_head = v->n_head;
    info->vision_n_ff = v->n_ff;
    /* Qwen2.5-VL: the most an image can become (its size decides);
     * Idefics3 split: as many tiles a side as the longest side holds, and
     * the global image, unless max_tokens leaves it alone. */
    const int unit = v->patch_size * v->merge, grid = v->tok_grid * v->tok_grid;
    const int side = v->split ? (v->longest + v->image_size - 1) / v->image_size : 0;
    int most = (side > 1 ? side * side + 1 : 1) * grid;
    if (v->max_tokens > 0) most = KVF_MIN(most, KVF_MAX(v->max_tokens, grid));
    info->image_tokens = v->proj == VIT_PROJ_QWEN25VL ? (int)(v->max_pixels / ((int64_t)unit * unit))
                                                      : most + (v->keep_cls ? 1 : 0);
    info->image_grid = v->proj == VIT_PROJ_QWEN25VL || most > grid ? 0 : v->tok_grid;
    info->video_frames_per_item = v->proj == VIT_PROJ_QWEN25VL ? v->t_patch
                                  : v->proj == VIT_PROJ_GEMMA3 || v->proj == VIT_PROJ_IDEFICS3 ? 0 : 1;
}

/* ------------------------------------------------------------- forward -- */

void vit_rows_free(struct vit_rows *r) {
    free(r->x), free(r->xn), free(r->att), free(r->q), free(r->k), free(r->v), free(r->kh), free(r->vh);
    free(r->heads), free(r->attn_scratch), free(r->mm);
    memset(r, 0, sizeof *r);
}

bool vit_rows_init(struct vit_rows *r, const struct vision_model *v, int n, size_t cols, int nt) {
    const size_t rows = sizeof(float) * (size_t)n * (size_t)v->n_embd;
    float **bufs[8] = {&r->x, &r->xn, &r->att, &r->q, &r->k, &r->v, &r->kh, &r->vh};
    bool ok = true;
    for (int i = 0; i < 8; i++) ok &= (*bufs[i] = malloc(rows)) != NULL;
    r->heads = malloc(sizeof *r->heads * (size_t)v->n_head);
    r->attn_scratch = malloc(attn_scratch_bytes(n, nt));
    r->mm = malloc(ops_matmul_scratch_bytes((int64_t)cols, n, nt));
    if (ok && r->heads && r->attn_scratch && r->mm) return true;
    vit_rows_free(r);
    return false;
}

/* Scratch of one encoding; n = n_pos rows. */
struct vit_buf {
    float *pix;        /* [3][S][S] pixels, then [grid^2][3*p*p] patch rows */
    float *ff;         /* [n][max(n_ff, n_out)] */
    struct vit_rows r;
};

static void vit_buf_free(struct vit_buf *b) {
    free(b->pix), free(b->ff);
    vit_rows_free(&b->r);
}

static enum kvf_status vit_buf_init(struct vit_buf *b, const struct vision_model *v, int nt) {
    const size_t n = (size_t)v->n_pos, S = (size_t)v->image_size;
    const size_t patch = 3 * (size_t)v->patch_size * v->patch_size;
    const size_t shuffled = v->proj == VIT_PROJ_IDEFICS3 ? (size_t)v->n_embd * v->pool * v->pool : 0;
    const size_t widest =
        KVF_MAX(KVF_MAX(KVF_MAX((size_t)v->n_embd, (size_t)v->n_ff), KVF_MAX(patch, (size_t)v->n_out)), shuffled);
    memset(b, 0, sizeof *b);
    b->pix = malloc(sizeof(float) * (3 * S * S + (size_t)v->grid * v->grid * patch));
    b->ff = malloc(sizeof(float) * n * KVF_MAX((size_t)v->n_ff, (size_t)v->n_out));
    if (!b->pix || !b->ff || !vit_rows_init(&b->r, v, v->n_pos, widest, nt)) {
        vit_buf_free(b);
        return err_set(KVF_ERR_NOMEM, "out of memory for the vision encoder");
    }
    return KVF_OK;
}

static void layernorm_rows(float *out, const float *x, const struct weight *w, const struct weight *bias, int n,
                           int dim, float eps) {
    for (int t = 0; t < n; t++)
        ops_layernorm(out + (size_t)t * dim, x + (size_t)t * dim, w->data, bias->data, dim, eps);
}

void vision_qkv(const struct weight w[3], const struct weight bias[3], struct vit_rows *r, int n, int nt) {
    float *out[3] = {r->q, r->k, r->v};
    for (int i = 0; i < 3; i++) {
        ops_matmul(&w[i], r->xn, n, out[i], r->mm, nt);
        ops_add_bias(out[i], &bias[i], n, (int)w[i].rows);
    }
}

enum kvf_status vision_attend(const struct vision_model *v, struct vit_rows *r, int n, const int *seg, int n_seg,
                              int nt) {
    const int H = v->n_embd, nh = v->n_head, hd = H / nh;
    const float *q = r->q, *k = r->k, *val = r->v;
    float *kh = r->kh, *vh = r->vh, *out = r->att;
    struct kv_head *heads = r->heads;
    /* The attention kernel reads keys and values head by head. */
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < n; t++) {
            memcpy(kh + ((size_t)h * n + t) * hd, k + (size_t)t * H + (size_t)h * hd, sizeof(float) * (size_t)hd);
            memcpy(vh + ((size_t)h * n + t) * hd, val + (size_t)t * H + (size_t)h * hd, sizeof(float) * (size_t)hd);
        }
    const struct attn_params ap = {.n_head = nh, .n_head_kv = nh, .head_dim = hd,
                                   .scale = 1.0f / sqrtf((float)hd), .bidirectional = true};
    enum kvf_status st = KVF_OK;
    for (int s = 0; s < n_seg && st == KVF_OK; s++) {
        const int r0 = seg[s], r1 = seg[s + 1];
        for (int h = 0; h < nh; h++)
            heads[h] = (struct kv_head){.k = kh + ((size_t)h * n + r0) * hd, .v = vh + ((size_t)h * n + r0) * hd,
                                        .tag = NULL, .n = r1 - r0, .cap = r1 - r0};
        st = attn_forward(&ap, q + (size_t)r0 * H, NULL, r1 - r0, heads, out + (size_t)r0 * H, r->attn_scratch, nt,
                          NULL);
    }
    return st;
}

/* x += attention(LN1(x)): every patch attends to every patch. */
static enum kvf_status vit_attention(const struct vision_model *v, const struct vit_layer *L, struct vit_buf *b,
                                     int nt) {
    const int n = v->n_pos, H = v->n_embd;
    layernorm_rows(b->r.xn, b->r.x, &L->ln1_w, &L->ln1_b, n, H, v->eps);
    vision_qkv(L->w, L->b, &b->r, n, nt);
    const int all[2] = {0, n};
    const enum kvf_status st = vision_attend(v, &b->r, n, all, 1, nt);
    if (st != KVF_OK)
        return st;
    ops_matmul(&L->wo, b->r.att, n, b->r.xn, b->r.mm, nt);
    ops_add_bias(b->r.xn, &L->bo, n, H);
    ops_add(b->r.x, b->r.xn, (size_t)n * H);
    return KVF_OK;
}

/* x += fc2(act(fc1(LN2(x)))). */
static void vit_mlp(const struct vision_model *v, const struct vit_layer *L, struct vit_buf *b, int nt) {
    const int n = v->n_pos, H = v->n_embd, F = v->n_ff;
    layernorm_rows(b->r.xn, b->r.x, &L->ln2_w, &L->ln2_b, n, H, v->eps);
    ops_matmul(&L->fc1, b->r.xn, n, b->ff, b->r.mm, nt);
    ops_add_bias(b->ff, &L->fc1_b, n, F);
    switch (v->act) {
    case VIT_GELU_QUICK: ops_gelu_quick(b->ff, (int64_t)n * F); break;
    case VIT_GELU_ERF: ops_gelu_erf(b->ff, (int64_t)n * F); break;
    case VIT_GELU_TANH: ops_gelu_tanh_mul(b->ff, NULL, (int64_t)n * F); break;
    }
    ops_matmul(&L->fc2, b->ff, n, b->r.xn, b->r.mm, nt);
    ops_add_bias(b->r.xn, &L->fc2_b, n, H);
    ops_add(b->r.x, b->r.xn, (size_t)n * H);
}

/* Rows [CLS;] patch 0 .. grid^2-1 of class/patch embeddings plus positions. */
static void vit_embed(const struct vision_model *v, struct vit_buf *b, int nt) {
    const int p = v->patch_size, S = v->image_size, G = v->grid, H = v->n_embd;
    const int np = G * G, plen = 3 * p * p;
    /* Patches as rows in the kernel's (channel, y, x) order, after the CHW pixels. */
    float *patches = b->pix + (size_t)3 * S * S;
    float *pix = b->pix;
    for (int gy = 0; gy < G; gy++)
        for (int gx = 0; gx < G; gx++) {
            float *row = patches + (size_t)(gy * G + gx) * plen;
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < p; y++)
                    memcpy(row + (size_t)(c * p + y) * p,
                           pix + ((size_t)c * S + (size_t)gy * p + y) * S + (size_t)gx * p, sizeof(float) * p);
        }
    float *px = b->r.x + (v->has_cls ? H : 0);
    ops_matmul(&v->patch, patches, np, px, b->r.mm, nt);
    ops_add_bias(px, &v->patch_b, np, H);
    if (v->has_cls) memcpy(b->r.x, v->cls.data, sizeof(float) * H);
    for (int t = 0; t < v->n_pos; t++) {
        /* Idefics3: the table's row of transformers' bucketed coordinates. */
        const int row = v->navit ? v->navit[t / G] * G + v->navit[t % G] : t;
        ops_get_row(&v->pos, row, b->r.xn);
        ops_add(b->r.x + (size_t)t * H, b->r.xn, H);
    }
}

/* Gemma 3's projector: the patch grid averaged in pool x pool cells (row by
 * row of cells), RMSNorm with (1 + w), then x P; out [tok_grid^2][n_out]. */
static void project_gemma3(const struct vision_model *v, struct vit_buf *b, int nt, float *out) {
    const int H = v->n_embd, G = v->grid, k = v->pool, T = v->tok_grid;
    const float inv = 1.0f / (float)(k * k);
    for (int ty = 0; ty < T; ty++)
        for (int tx = 0; tx < T; tx++) {
            float *cell = b->r.xn + (size_t)(ty * T + tx) * H;
            memset(cell, 0, sizeof(float) * H);
            for (int y = 0; y < k; y++)
                for (int x = 0; x < k; x++) ops_add(cell, b->r.x + (size_t)((ty * k + y) * G + tx * k + x) * H, H);
            for (int i = 0; i < H; i++) cell[i] *= inv;
            ops_rmsnorm(cell, cell, v->mm_norm.data, H, v->eps);
        }
    ops_matmul(&v->mm_proj, b->r.xn, T * T, out, b->r.mm, nt);
}

/* Idefics3's connector: transformers' pixel_shuffle makes token (ty, tx)
 * of the pool x pool block of patches at (ty, tx), its rows one after the
 * other, each row's patches in order; then mm0. out [tok_grid^2][n_out]. */
static void project_idefics3(const struct vision_model *v, struct vit_buf *b, int nt, float *out) {
    const int H = v->n_embd, G = v->grid, s = v->pool, T = v->tok_grid;
    float *cat = b->r.xn; /* [T^2][s^2 H]: the same G^2 H floats as x */
    for (int ty = 0; ty < T; ty++)
        for (int tx = 0; tx < T; tx++)
            for (int dy = 0; dy < s; dy++)
                memcpy(cat + ((size_t)(ty * T + tx) * s + dy) * s * H,
                       b->r.x + ((size_t)(ty * s + dy) * G + tx * s) * H, sizeof(float) * (size_t)s * H);
    ops_matmul(&v->mm0, cat, T * T, out, b->r.mm, nt);
}

/* LLaVA's projector on the kept rows: linear_1 -> GELU -> linear_2. */
static void project_mlp(const struct vision_model *v, struct vit_buf *b, int nt, float *out) {
    const int H = v->n_embd, first = v->keep_cls ? 0 : 1, nk = v->n_pos - first, E = v->n_out;
    ops_matmul(&v->mm0, b->r.x + (size_t)first * H, nk, b->ff, b->r.mm, nt);
    ops_add_bias(b->ff, &v->mm0_b, nk, E);
    ops_gelu_erf(b->ff, (int64_t)nk * E);
    ops_matmul(&v->mm2, b->ff, nk, out, b->r.mm, nt);
    ops_add_bias(out, &v->mm2_b, nk, E);
}

enum kvf_status vision_grid(const struct vision_model *v, const struct kvf_image *img, int *rows, int *cols,
                            bool *cls) {
    *cls = v->keep_cls;
    if (v->proj != VIT_PROJ_QWEN25VL) {
        *rows = *cols = v->tok_grid;
        return KVF_OK;
    }
    if (!img || !qvit_grid(v, img->h, img->w, 0, rows, cols))
        return err_set(KVF_ERR_INVALID_ARG, "a %dx%d image has no Qwen2.5-VL size (aspect ratio over 200?)",
                       img ? img->w : 0, img ? img->h : 0);
    return KVF_OK;
}

enum kvf_status vision_tiles(const struct vision_model *v, const struct kvf_image *img, int *rows, int *cols) {
    *rows = *cols = 0;
    if (v->proj != VIT_PROJ_IDEFICS3) return KVF_OK;
    if (!img || !image_idefics3_tiles(img->h, img->w, v->longest, v->image_size, v->split, rows, cols))
        return err_set(KVF_ERR_INVALID_ARG, "a %dx%d image has no Idefics3 tiling", img ? img->w : 0,
                       img ? img->h : 0);
    const int64_t n = ((int64_t)*rows * *cols + 1) * v->tok_grid * v->tok_grid;
    if (v->max_tokens > 0 && n > v->max_tokens) *rows = *cols = 0;
    return KVF_OK;
}

/* The tower on the pixels in b->pix: embeddings, layers, post-layernorm,
 * then the projector into out [tok_grid^2 (+ 1)][n_out]. */
static enum kvf_status vit_forward(const struct vision_model *v, struct vit_buf *b, int nt, float *out) {
    const int H = v->n_embd, n = v->n_pos;
    enum kvf_status st = KVF_OK;
    vit_embed(v, b, nt);
    if (v->has_cls) layernorm_rows(b->r.x, b->r.x, &v->pre_w, &v->pre_b, n, H, v->eps);
    for (int l = 0; l < v->n_layer && st == KVF_OK; l++) {
        if ((st = vit_attention(v, &v->layers[l], b, nt)) == KVF_OK)
            vit_mlp(v, &v->layers[l], b, nt);
    }
    if (st != KVF_OK) return st;
    if (v->post_w.data) layernorm_rows(b->r.x, b->r.x, &v->post_w, &v->post_b, n, H, v->eps);
    if (v->proj == VIT_PROJ_GEMMA3) project_gemma3(v, b, nt, out);
    else if (v->proj == VIT_PROJ_IDEFICS3) project_idefics3(v, b, nt, out);
    else project_mlp(v, b, nt, out);
    return KVF_OK;
}

/* Idefics3: every sub-image of img (vision_tiles) through the tower. */
static enum kvf_status idefics3_encode(const struct vision_model *v, const struct kvf_image *img, int nt, float *out,
                                       struct vit_buf *b) {
    int rows, cols;
    enum kvf_status st = vision_tiles(v, img, &rows, &cols);
    if (st != KVF_OK) return st;
    const int n_sub = rows * cols + 1;
    const size_t plane = (size_t)3 * v->image_size * v->image_size;
    const size_t per = (size_t)v->tok_grid * v->tok_grid * v->n_out;
    float *pix = malloc(sizeof(float) * plane * (size_t)n_sub);
    if (!pix) return err_set(KVF_ERR_NOMEM, "out of memory for %d sub-images", n_sub);
    st = image_preprocess_idefics3(img, v->longest, v->image_size, rows > 0, v->resample, v->mean, v->std, pix);
    for (int k = 0; k < n_sub && st == KVF_OK; k++) {
        memcpy(b->pix, pix + (size_t)k * plane, sizeof(float) * plane);
        st = vit_forward(v, b, nt, out + (size_t)k * per);
    }
    free(pix);
    return st;
}

enum kvf_status vision_encode(const struct vision_model *v, const struct kvf_image *img, int nt, float *out,
                              float *ds) {
    if (v->proj == VIT_PROJ_QWEN25VL) return qvit_encode(v, &img, 0, nt, out, ds);
    struct vit_buf b;
    enum kvf_status st = vit_buf_init(&b, v, nt);
    if (st != KVF_OK) return st;
    if (v->proj == VIT_PROJ_IDEFICS3) {
        st = idefics3_encode(v, img, nt, out, &b);
    } else {
        st = v->proj == VIT_PROJ_GEMMA3
            ? image_preprocess_resize(img, v->image_size, v->image_size, IMAGE_BILINEAR, v->mean, v->std, b.pix)
            : image_preprocess_llava(img, v->image_size, v->mean, v->std, b.pix);
        if (st == KVF_OK) st = vit_forward(v, &b, nt, out);
    }
    vit_buf_free(&b);
    return st;
}
