/* What kvfold reads of a Hugging Face model directory's configuration:
 * config.json's decoder fields per family (Llama, Qwen2, Gemma 3, their
 * defaults from transformers' configuration classes), the vision part of
 * LLaVA, Gemma 3, Qwen2-VL, Qwen2.5-VL and Idefics3 / SmolVLM configs, and
 * preprocessor_config.json (model/hf_config.c). */
#ifndef KVF_MODEL_HF_CONFIG_H
#define KVF_MODEL_HF_CONFIG_H

#include "core/ops.h"

/* The fields of config.json that kvfold uses (text decoder part; for
 * LLaVA-style configs, text_config is read). Missing optional fields take
 * the Hugging Face defaults. */
struct hf_config {
    char arch[32];             /* "llama", "qwen2", "gemma3" (model_type)     */
    int hidden_size, intermediate_size, num_hidden_layers;
    int num_attention_heads, num_key_value_heads, head_dim;
    int vocab_size, max_position_embeddings, sliding_window, sliding_window_pattern;
    float rms_norm_eps, rope_theta, rope_local_base_freq, query_pre_attn_scalar;
    bool tie_word_embeddings, attention_bias;
    int bos_token_id, eos_token_id; /* -1 when absent */
    int mrope_section[3];      /* Qwen2-VL's M-RoPE: rotary frequency pairs for time, height, width; 0 0 0: none */
    bool mrope_interleaved;    /* Qwen3-VL: the sections' pairs interleaved (ops_rope_axes_fill) */
    struct rope_scaling rope_scaling; /* rope_scaling / rope_parameters (Gemma 3: its full-attention layers') */
};
enum kvf_status hf_config_load(const char *path, struct hf_config *cfg);

/* The vision part of a LLaVA, Gemma 3, Qwen2-VL, Qwen2.5-VL or Idefics3 config.json
 * (vision_config and the top-level vision_feature_* / projector /
 * mm_tokens_per_image keys, with transformers' defaults) and what kvfold
 * reads of preprocessor_config.json: the normalisation (CLIP's, or 0.5 for
 * Gemma 3, when absent) and Qwen's pixel bounds. */
#define HF_MAX_DEEPSTACK 16
struct hf_vision_config {
    bool present;              /* the config describes a vision tower */
    bool gemma3;               /* model_type "gemma3": SigLIP and Gemma 3's pooling projector */
    bool qwen25vl;             /* model_type "qwen2_5_vl": Qwen2.5-VL's windowed ViT and patch merger */
    bool qwen2vl;              /* model_type "qwen2_vl": Qwen2-VL's (LayerNorm, quick-GELU MLP, no windows);
                                  the fields below as for qwen25vl */
    bool qwen3vl;              /* model_type "qwen3_vl": Qwen3-VL's (LayerNorm, GELU MLP, no windows, learned
                                  positions, DeepStack); the fields below as for qwen25vl */
    bool idefics3;             /* model_type "idefics3" or "smolvlm": SigLIP, the pixel shuffle, one linear map */
    int mm_tokens_per_image;   /* gemma3: tokens an image becomes (a square number) */
    int hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
    int image_size, patch_size;
    float layer_norm_eps;
    char hidden_act[32];       /* "quick_gelu", "gelu", ...            */
    int feature_layer;         /* vision_feature_layer (index into hidden_states) */
    char select_strategy[32];  /* "default" (drop CLS) or "full"       */
    char projector_act[32];
    bool projector_bias;
    float image_mean[3], image_std[3];
    /* qwen25vl: */
    int spatial_merge_size, temporal_patch_size, window_size, out_hidden_size;
    float rope_theta;
    bool full_attention[256];  /* fullatt_block_indexes: layers with full attention (the others windowed) */
    int64_t min_pixels, max_pixels; /* preprocessor size.shortest_edge / longest_edge (pixels) */
    int64_t video_min_pixels, video_max_pixels; /* the video processor's */
    bool video_cap;            /* qwen3vl: cap_pixels_per_frame, a cap on each frame's share of the bounds */
    int video_max_tokens;      /* qwen3vl: max_video_tokens, the cap's tokens a frame */
    int tokens_per_second;     /* qwen25vl: M-RoPE time steps a second of video spans */
    int num_position_embeddings; /* qwen3vl: learned positions, a square grid of them */
    int n_deepstack;           /* qwen3vl: deepstack_visual_indexes, the layers DeepStack mergers read */
    int deepstack[HF_MAX_DEEPSTACK];
    /* idefics3: config.json's scale_factor; the processor's size.longest_edge, max_image_size.longest_edge,
     * do_image_splitting and resample (PIL's number: 1 Lanczos, 2 bilinear, 3 bicubic) */
    int scale_factor, longest_edge, tile;
    bool split;
    int resample;
};
enum kvf_status hf_vision_config_load(const char *dir, struct hf_vision_config *cfg);

#endif
