/* Vision towers and their projectors into the decoder's embedding space:
 *   LLaVA-1.5:   CLIP ViT (class token, pre-layernorm, learned positions)
 *                and a 2-layer MLP;
 *   Gemma 3:     SigLIP (no class token, no pre-layernorm, post-layernorm)
 *                and Gemma 3's projector (average pooling of the patch grid,
 *                RMSNorm, one linear map);
 *   Idefics3 / SmolVLM: SigLIP on tiles of the image and on the whole of it
 *                (each a sub-image), the pixel shuffle (s x s patches into
 *                one token) and one linear map;
 *   Qwen2.5-VL:  a ViT at the image's own resolution (2-D rotary positions,
 *                window attention but in a few layers, SwiGLU) and its
 *                patch merger (2 x 2 patches into one token), in
 *                model/vit_qwen.c; Qwen2-VL's and Qwen3-VL's towers there
 *                too (Qwen3-VL: learned positions as well, and DeepStack
 *                mergers whose features the decoder adds after its first
 *                layers). */
#ifndef KVF_VIT_H
#define KVF_VIT_H

#include "io/image.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/hf_config.h"
#include "model/weights.h"

struct vit_layer {
    struct weight ln1_w, ln1_b, ln2_w, ln2_b;  /* [n_embd]                      */
    struct weight w[3], wo;                    /* q, k, v, out: [n_embd][n_embd] */
    struct weight b[3], bo;                    /* [n_embd]                      */
    struct weight fc1, fc2, fc1_b, fc2_b;      /* fc1: [n_ff][n_embd]; fc2: [n_embd][n_ff] */
};

enum vit_act { VIT_GELU_QUICK, VIT_GELU_ERF, VIT_GELU_TANH };  /* x*sigmoid(1.702x), erf GELU, tanh GELU */
enum vit_proj { VIT_PROJ_MLP, VIT_PROJ_GEMMA3, VIT_PROJ_QWEN25VL, VIT_PROJ_IDEFICS3 };
/* The Qwen towers (proj VIT_PROJ_QWEN25VL): Qwen2.5-VL's RMSNorms, SwiGLU
 * and windows; Qwen2-VL's LayerNorms and quick-GELU MLP, no windows;
 * Qwen3-VL's LayerNorms and tanh-GELU MLP, no windows, a patch bias,
 * learned positions and DeepStack mergers. */
enum qvit_family { QVIT_QWEN25, QVIT_QWEN2, QVIT_QWEN3 };

/* A Qwen2.5-VL ViT layer (Qwen2-VL: LayerNorms with biases, and fc1 / fc2
 * in up / down with no gate). */
struct qvit_layer {
    struct weight norm1, norm2;                /* RMSNorm [n_embd]                    */
    struct weight norm1_b, norm2_b;            /* Qwen2-VL: LayerNorm biases [n_embd] */
    struct weight w[3], b[3];                  /* q, k, v: [n_embd][n_embd], [n_embd] (views into HF's fused
                                                  qkv) */
    struct weight proj, proj_b;                /* [n_embd][n_embd]                    */
    struct weight gate, gate_b, up, up_b;      /* [n_ff][n_embd]; Qwen2-VL: no gate  */
    struct weight down, down_b;                /* [n_embd][n_ff]                      */
};

/* A Qwen3-VL DeepStack merger: block `layer`'s output, each 2 x 2 unit's
 * rows as one, LayerNorm, linear -> GELU -> linear into the decoder's width. */
struct qvit_deepstack {
    int layer;
    struct weight norm, norm_b;                /* [4 n_embd]                          */
    struct weight fc1, fc1_b, fc2, fc2_b;      /* [4 n_embd][4 n_embd], [n_out][4 n_embd] */
};

struct vision_model {
    int image_size, patch_size, grid;          /* grid = image_size / patch_size */
    int n_embd, n_head, n_ff, n_layer;         /* n_layer: layers run (the feature layer) */
    int n_pos;                                 /* grid^2 (+ 1 with a class token) */
    int n_out;                                 /* projector output = decoder n_embd */
    int pool;                                  /* gemma3: average-pooling kernel and stride over the grid;
                                                  idefics3: the pixel shuffle's factor */
    int tok_grid;                              /* side of the output token grid: grid, or grid / pool */
    float eps;
    enum vit_act act;
    enum vit_proj proj;
    bool has_cls;                              /* CLIP: class token and pre-layernorm */
    bool keep_cls;                             /* "full" feature strategy       */
    float mean[3], std[3];
    char source[16];                           /* "mmproj" or "safetensors"     */
    struct weight patch;                       /* [n_embd][3*patch*patch] (c, y, x); Qwen2.5-VL: the sum
                                                  of its kernel's frames, which see the same image (F32) */
    struct weight patch_t;                     /* Qwen2.5-VL: the kernel frame by frame for videos,
                                                  [n_embd][3*t_patch*patch*patch] (c, t, y, x) F32 */
    struct weight patch_b;                     /* optional [n_embd]             */
    struct weight cls;                         /* CLIP: [n_embd]                */
    struct weight pos;                         /* [n_pos][n_embd]; Qwen3-VL: a square grid of them,
                                                  interpolated to the image's patch grid */
    struct weight pre_w, pre_b, post_w, post_b;/* pre: CLIP; post: SigLIP, some mmproj files */
    struct vit_layer *layers;                  /* [n_layer]                     */
    struct weight mm0, mm0_b, mm2, mm2_b;      /* mlp: [n_out][n_embd], [n_out][n_out];
                                                  idefics3: mm0 [n_out][n_embd * pool^2], no bias */
    struct weight mm_norm;                     /* gemma3: RMSNorm scale, (1 + w) applied, [n_embd] */
    struct weight mm_proj;                     /* gemma3: [n_out][n_embd] F32, transposed from the file's
                                                  [n_embd][n_out] */
    int32_t boi, eoi;                          /* tokens around an image: gemma3's <start_of_image>,
                                                  <end_of_image>; qwen's <|vision_start|>, <|vision_end|>;
                                                  else -1 */
    bool boi_newlines;                         /* gemma3: "\n\n" before boi and after eoi */
    /* Idefics3 (proj VIT_PROJ_IDEFICS3; image_size: a tile's side, the
     * processor's max_image_size): */
    int longest;                               /* the image's longer side is resized to this first */
    bool split;                                /* tiles of image_size, then the whole (else the whole alone) */
    enum image_filter resample;                /* the processor's filter (Lanczos) */
    int max_tokens;                            /* --image-max-tokens (0: none): an image whose tiles and
                                                  global image would take more is read as the global
                                                  image alone (transformers' do_image_splitting false) */
    int *navit;                                /* [grid] the position-embedding row of each patch row or column
                                                  (model/vit.c: navit_position), owned */
    /* Qwen2.5-VL (proj VIT_PROJ_QWEN25VL; image_size: unused, the image's own): */
    int merge, t_patch, window;                /* 2 x 2 merge, 2 frames a patch, windows of 112 px */
    int64_t min_pixels, max_pixels;            /* the image is resized to within these */
    int64_t video_min_pixels, video_max_pixels;/* and a video's frames to within these (Qwen3-VL: all of its
                                                  frames together) */
    int video_cap_tokens;                      /* Qwen3-VL: tokens a frame may take at most (the video
                                                  processor's cap_pixels_per_frame); 0: no cap */
    float tokens_per_second;                   /* Qwen2.5-VL: M-RoPE time steps a second of video spans
                                                  (Qwen2-VL: 0, one step per temporal patch; Qwen3-VL: 0,
                                                  time is in the timestamps written before each patch) */
    float rope_theta;
    bool *full;                                /* [n_layer] full attention, else windowed */
    struct qvit_layer *qlayers;                /* [n_layer] */
    struct weight merge_norm, merge_norm_b;    /* RMSNorm [n_embd]; Qwen2-VL: a LayerNorm, with its bias */
    enum qvit_family qfamily;
    struct weight merge0, merge0_b, merge2, merge2_b; /* [4 n_embd][4 n_embd], [n_out][4 n_embd] */
    int n_deepstack;                           /* Qwen3-VL: DeepStack mergers, by layer */
    struct qvit_deepstack *deepstack;          /* [n_deepstack] */
};

/* The token grid img becomes (rows x cols) and whether a class token
 * leads it: fixed, or from the image's size (Qwen2.5-VL). */
enum kvf_status vision_grid(const struct vision_model *v, const struct kvf_image *img, int *rows, int *cols,
                            bool *cls);

/* Idefics3: the tiles img is cut into, rows x cols before its global image
 * (0 x 0: the global image alone; kvf_media.tile_rows / tile_cols); every
 * other tower: 0 x 0. */
enum kvf_status vision_tiles(const struct vision_model *v, const struct kvf_image *img, int *rows, int *cols);

/* Encodes one image: out [rows * cols (+ 1)][n_out] of vision_grid,
 * row-major in grid order (row by row; the class token first when kept);
 * Idefics3: one such grid per sub-image, the tiles row by row and then the
 * global image, [(tile rows * tile cols + 1) * rows * cols][n_out]; and ds
 * [rows * cols][n_deepstack][n_out] in the same order (Qwen3-VL's
 * DeepStack; NULL for other towers). */
enum kvf_status vision_encode(const struct vision_model *v, const struct kvf_image *img, int n_threads, float *out,
                              float *ds);
/* The Qwen towers (model/vit_qwen.c): their loaders from a Hugging Face
 * directory (cfg: its config.json) and from llama.cpp's mmproj (already
 * open as m->mmproj, projector type qwen2.5vl, qwen2vl_merger or
 * qwen3vl_merger), their grid and their forward pass. */
enum kvf_status qvit_load_hf(struct kvf_model *m, const char *dir, const struct tensor_src *src,
                             const struct hf_vision_config *cfg);
enum kvf_status qvit_load_mmproj(struct kvf_model *m, const char *path, enum qvit_family family);

/* mmproj metadata: a u32 key as an int (absent: *out kept, an error when
 * required), and an array of 3 f32 (absent: out kept). */
struct gguf_file;
struct kv_head;
/* The rows a tower's layers work on and its attention's scratch (both
 * towers), for n rows. */
struct vit_rows {
    float *x, *xn, *att;   /* [n][n_embd] residual stream, its normed / projected copy, attention output */
    float *q, *k, *v;      /* [n][n_embd] */
    float *kh, *vh;        /* [n_head][n][head_dim]: keys and values head by head */
    struct kv_head *heads; /* [n_head] views of kh / vh for the attention kernel */
    float *attn_scratch;
    void *mm;              /* ops_matmul's scratch for products of up to `cols` columns */
};
/* false (all freed) when out of memory. */
bool vit_rows_init(struct vit_rows *r, const struct vision_model *v, int n, size_t cols, int nt);
void vit_rows_free(struct vit_rows *r);
/* r->q, k, v = r->xn w[i]^T + b[i] for n rows. */
void vision_qkv(const struct weight w[3], const struct weight bias[3], struct vit_rows *r, int n, int nt);
/* r->att = attention of r->q, k, v (after any rotary turn), every row
 * seeing the rows of its segment [seg[s], seg[s + 1]) (s < n_seg).
 * KVF_ERR_NOMEM when the attention's working rows cannot be allocated. */
enum kvf_status vision_attend(const struct vision_model *v, struct vit_rows *r, int n, const int *seg, int n_seg,
                              int nt);
enum kvf_status mmproj_u32(const struct gguf_file *f, const char *key, int *out, bool required);
enum kvf_status mmproj_float3(const struct gguf_file *f, const char *key, float out[3]);
/* The token grid of an image (video_frames 0), or of a video of
 * video_frames frames of h x w. */
bool qvit_grid(const struct vision_model *v, int h, int w, int video_frames, int *rows, int *cols);
/* Encodes an image (video_frames 0: frames[0] alone) or one temporal patch
 * of a video of video_frames frames (t_patch frames of one size,
 * preprocessed as the video processor does) into out [rows * cols][n_out]
 * of qvit_grid, and (Qwen3-VL) its DeepStack features into
 * ds [rows * cols][n_deepstack][n_out]. */
enum kvf_status qvit_encode(const struct vision_model *v, const struct kvf_image *const *frames, int video_frames,
                            int n_threads, float *out, float *ds);
void vision_fill_info(const struct vision_model *v, struct kvf_model_info *info);

/* Vision towers (model/vit.c): from a llama.cpp mmproj GGUF, or from the
 * vision_tower of a Hugging Face LLaVA directory (a no-op when it has none). */
enum kvf_status vision_load_mmproj(struct kvf_model *m, const char *path);
enum kvf_status vision_load_hf(struct kvf_model *m, const char *dir, const struct tensor_src *src);
void vision_free(struct vision_model *v);
/* What the loaded tower asks of the decoder and the prompt: Gemma 3's
 * bidirectional image attention and the tokens around each image. */
enum kvf_status vision_attach(struct kvf_model *m);
/* kvf_model_params' image_min_tokens / image_max_tokens (0: kept; each
 * within 0..KVF_IMAGE_MAX_TOKENS) on a tower whose images keep their own
 * size, and Idefics3's image_max_tokens (vision_model.max_tokens); others
 * ignore them. */
#define KVF_IMAGE_MAX_TOKENS (1 << 20)
enum kvf_status vision_limit_tokens(struct vision_model *v, int min_tokens, int max_tokens);

#endif
