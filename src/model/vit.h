/* The vision tower of LLaVA-style models: CLIP ViT (pre-layernorm, learned
 * position embeddings, class token) followed by the 2-layer MLP projector
 * into the decoder's embedding space. */
#ifndef KVF_VIT_H
#define KVF_VIT_H

#include "io/image.h"
#include "model/model.h"

struct vit_layer {
    struct weight ln1_w, ln1_b, ln2_w, ln2_b;  /* [n_embd]                      */
    struct weight wq, wk, wv, wo;              /* [n_embd][n_embd]              */
    struct weight bq, bk, bv, bo;              /* [n_embd]                      */
    struct weight fc1, fc2, fc1_b, fc2_b;      /* fc1: [n_ff][n_embd]; fc2: [n_embd][n_ff] */
};

struct vision_model {
    int image_size, patch_size, grid;          /* grid = image_size / patch_size */
    int n_embd, n_head, n_ff, n_layer;         /* n_layer: layers run (the feature layer) */
    int n_pos;                                 /* grid^2 + 1 (class token)      */
    int n_out;                                 /* projector output = decoder n_embd */
    float eps;
    bool quick_gelu;                           /* CLIP's x*sigmoid(1.702x), else erf GELU */
    bool keep_cls;                             /* "full" feature strategy       */
    float mean[3], std[3];
    char source[16];                           /* "mmproj" or "safetensors"     */
    struct weight patch;                       /* [n_embd][3*patch*patch] (c, y, x) */
    struct weight patch_b;                     /* optional [n_embd]             */
    struct weight cls;                         /* [n_embd]                      */
    struct weight pos;                         /* [n_pos][n_embd]               */
    struct weight pre_w, pre_b, post_w, post_b;/* post: optional (some mmproj files) */
    struct vit_layer *layers;                  /* [n_layer]                     */
    struct weight mm0, mm0_b, mm2, mm2_b;      /* [n_out][n_embd], [n_out][n_out] */
};

/* Embeddings one image becomes. */
static inline int vision_n_tokens(const struct vision_model *v) { return v->grid * v->grid + (v->keep_cls ? 1 : 0); }

/* Encodes one image: out [vision_n_tokens][n_out], row-major in grid order
 * (row by row; the class token first when kept). */
enum kvf_status vision_encode(const struct vision_model *v, const struct kvf_image *img, int n_threads, float *out);
void vision_fill_info(const struct vision_model *v, struct kvf_model_info *info);

#endif
