/* Internal view of a loaded model: hyper-parameters, weights (pointing into
 * memory-mapped files) and the tokenizer. Weights are read-only and shared by
 * every session. */
#ifndef KVF_MODEL_H
#define KVF_MODEL_H

#include "core/common.h"
#include "core/ops.h"
#include "core/quant.h"
#include "tok/tokenizer.h"

enum arch { ARCH_LLAMA, ARCH_QWEN2, ARCH_GEMMA3, ARCH_QWEN3 };

struct layer_weights {
    struct weight attn_norm, wq, wk, wv, wo;   /* wq: [n_head*head_dim, n_embd] ... */
    struct weight bq, bk, bv;                  /* qwen2 only (rows=1)               */
    struct weight q_norm, k_norm;              /* gemma3: [head_dim]                */
    struct weight post_attn_norm, ffn_norm, post_ffn_norm;
    struct weight w_gate, w_up, w_down;        /* gate/up: [n_ff, n_embd]; down: [n_embd, n_ff] */
    bool is_local;                             /* sliding-window layer (gemma3)     */
};

struct hparams {
    enum arch arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    int sliding_window;        /* tokens; 0 = none */
    int swa_pattern;           /* gemma3: every swa_pattern-th layer is global */
    float rope_base, rope_base_local, norm_eps;
    float attn_scale;          /* multiplies q.k (1/sqrt(head_dim) unless the model says otherwise) */
    enum kvf_rope_style rope_style;
    bool norm_plus_one;        /* gemma checkpoints store w with RMSNorm scaling (1 + w) */
    float embd_scale;          /* gemma: sqrt(n_embd); else 1 */
    bool image_bidirectional;  /* an image's tokens see each other (Gemma 3's vision models) */
    int mrope[3];              /* Qwen2-VL's M-RoPE: rotary pairs taking the time, height and width
                                  positions of a row (model/decoder.h: fwd_scratch.rpos); 0 0 0: none */
    int n_deepstack;           /* Qwen3-VL: vision rows gain DeepStack features after layers 0 .. n_deepstack - 1 */
    bool mrope_interleaved;    /* Qwen3-VL: the sections' pairs interleaved (ops_rope_axes_fill) */
    struct rope_scaling rope_scaling; /* of the global layers (Gemma 3's local ones have none) */
};

struct vision_model; /* model/vit.h */

struct kvf_model {
    struct hparams hp;
    /* RoPE's inverse frequencies [global, local layers][head_dim / 2] and
     * the factor of their cos and sin (ops_rope_freqs), set at load. */
    double rope_freq[2][ROPE_MAX_PAIRS];
    float rope_mscale[2];
    bool rope_freqs_given;     /* a GGUF's rope_freqs.weight went into rope_freq[0] */
    uint8_t rope_axis[ROPE_MAX_PAIRS]; /* M-RoPE: the position (time, height, width) each pair turns by */
    struct weight tok_embd;    /* [n_vocab, n_embd] */
    struct weight output_norm;
    struct weight output;      /* [n_vocab, n_embd]; == tok_embd when tied */
    struct layer_weights *layers;
    struct tokenizer *tok;
    struct vision_model *vision; /* NULL for a text-only model */
    int n_threads;
    /* Owned storage: the mapped files and names for kvf_model_info. */
    struct gguf_file *gguf, *mmproj;
    struct st_set *st;
    char name[256], arch_name[32], source[16], weight_types[256], tok_kind[64];
    /* The decoding kernel chosen for each weight type and why, e.g.
     * "q4_K: rows-avx512 (measured at load ...: ilv-avx512 21.3 GB/s, ...)". */
    char kernels[2048];
    int64_t decode_bytes;      /* kvf_model_info.decode_bytes */
    int64_t n_params, weight_bytes;
    /* CRC-32 of the decoder's tensors as bound (name, type, shape, in order):
     * the identity a session file names (the vision tower's are not in it). */
    uint32_t digest;
    /* The KVzap scorer file (kv/kvzap.h) read when a spec names none: a
     * GGUF file's name with .kvzap for .gguf, a directory's model.kvzap. */
    char zap_path[4096];
    bool vocab_only;           /* kvf_model_params.vocab_only: no weights, layers NULL */
    void **owned;              /* float copies of vectors (norms, biases), interleaved matrices */
    int n_owned, cap_owned;
};

/* Chooses each decoding weight type's kernel for this CPU (model/kernels.c):
 * its matrices interleaved, or tagged with the rows kernel that measured
 * fastest. repack false: the file's layout only. */
enum kvf_status model_kernels_choose(struct kvf_model *m, bool repack);

/* KVF_ERR_UNSUPPORTED (message naming `what`) for a vocab_only model. */
enum kvf_status model_require_weights(const struct kvf_model *m, const char *what);

static inline const struct tokenizer *model_tokenizer(const struct kvf_model *m) { return m->tok; }

#endif
