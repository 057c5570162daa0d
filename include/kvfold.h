/*
 * kvfold.h — the public C API of kvfold, an inference engine for (vision-)
 * language models whose KV cache is compressed while the model runs.
 *
 * Conventions
 *  - Every fallible call returns enum kvf_status; KVF_OK is 0. On failure a
 *    one-line message for the calling thread is available from kvf_last_error().
 *  - A kvf_model holds shared, read-only weights (memory-mapped). Any number
 *    of kvf_session objects may use one model; a session owns its KV cache,
 *    logits and scratch and must be used from one thread at a time.
 *  - Objects returned through an `out` pointer are owned by the caller and
 *    released with the matching *_free function (which accepts NULL).
 *  - The library never exits or prints; only the CLI decides that.
 */
#ifndef KVFOLD_H
#define KVFOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVF_VERSION_STRING "0.1.0"

enum kvf_status {
    KVF_OK = 0,
    KVF_ERR_INVALID_ARG,   /* a caller passed a value out of range           */
    KVF_ERR_IO,            /* a file could not be opened, read or mapped     */
    KVF_ERR_FORMAT,        /* a file is malformed, truncated or hostile      */
    KVF_ERR_UNSUPPORTED,   /* well-formed but not supported (arch, type...)  */
    KVF_ERR_SHAPE,         /* a tensor's shape disagrees with the model      */
    KVF_ERR_CONTEXT,       /* the tokens do not fit in the session context   */
    KVF_ERR_NOMEM,         /* an allocation failed                           */
    KVF_ERR_INTERNAL,
};

const char *kvf_status_str(enum kvf_status st);
/* Message of the last failure on this thread ("" if none). Valid until the
 * next failing kvfold call on the same thread. */
const char *kvf_last_error(void);

/* ---------------------------------------------------------------- model -- */

struct kvf_model; /* opaque: weights, hyper-parameters, tokenizer */

struct kvf_model_params {
    int n_threads;          /* threads used by sessions by default (<= 0: all cores) */
};
struct kvf_model_params kvf_model_default_params(void);

/* path: a .gguf file, or a Hugging Face directory (config.json,
 * model.safetensors or model.safetensors.index.json, tokenizer.json). */
enum kvf_status kvf_model_load(const char *path, const struct kvf_model_params *params,
                               struct kvf_model **out);
void kvf_model_free(struct kvf_model *model);

enum kvf_rope_style { KVF_ROPE_NORM = 0 /* interleaved pairs */, KVF_ROPE_NEOX = 1 /* halves */ };

struct kvf_model_info {
    const char *arch;        /* "llama", "qwen2", "gemma3"                      */
    const char *name;        /* general.name or the directory name              */
    const char *source;      /* "gguf" or "safetensors"                         */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    int sliding_window;      /* 0 when every layer is global                    */
    float rope_base, rope_base_local, norm_eps;
    enum kvf_rope_style rope_style;
    int64_t n_params;        /* number of weights                                */
    int64_t weight_bytes;    /* bytes of weights as stored                       */
    const char *weight_types;/* e.g. "q4_1:30 q6_K:1 f32:61" (tensor counts)     */
    const char *tokenizer;   /* "spm" or "bpe:<pre>"                            */
    const char *chat_template_name; /* recognised template: "llama2", "vicuna", "chatml", "gemma", "none" */
    int32_t bos, eos;        /* -1 when absent                                    */
};
/* The strings stay owned by the model. */
void kvf_model_get_info(const struct kvf_model *model, struct kvf_model_info *info);

/* ------------------------------------------------------------ tokenizer -- */

/* Tokenizes text[0..len). Writes at most n_max ids; returns the number of ids,
 * or -(required) when n_max is too small. parse_special: turn the text of
 * control tokens (e.g. "<|im_start|>") into their ids. */
int32_t kvf_tokenize(const struct kvf_model *model, const char *text, size_t len,
                     int32_t *tokens, int32_t n_max, bool add_bos, bool parse_special);
/* The bytes a token stands for when printed (special tokens: empty unless
 * render_special). Returns the byte count, or -(required) if len is too small;
 * never NUL-terminates. */
int32_t kvf_token_to_piece(const struct kvf_model *model, int32_t token, char *buf,
                           int32_t len, bool render_special);
bool kvf_token_is_eog(const struct kvf_model *model, int32_t token);

/* Chat templates. name: "llama2" (Llama-2 chat), "vicuna" (Vicuna v1.1 /
 * LLaVA-1.5), "chatml", "gemma", or NULL for the one recognised from
 * tokenizer.chat_template. Returns the length written (NUL-terminated), or
 * -(bytes required, NUL included) if buf is too small; an unknown name or a
 * model whose template is not recognised returns INT32_MIN. */
struct kvf_chat_message { const char *role; const char *content; };
int32_t kvf_chat_apply(const struct kvf_model *model, const char *name,
                       const struct kvf_chat_message *msgs, int n_msgs,
                       bool add_assistant_prefix, char *buf, int32_t len);
/* Comma-separated list of template names accepted by kvf_chat_apply. */
const char *kvf_chat_templates(void);

/* -------------------------------------------------------------- session -- */

struct kvf_session; /* opaque: KV cache, logits, scratch */

struct kvf_session_params {
    int n_ctx;       /* maximum number of positions; <= 0: the model's training context (capped at 8192) */
    int n_batch;     /* prompt tokens processed per forward pass (>= 1)          */
    int n_threads;   /* <= 0: the model's default                                */
};
struct kvf_session_params kvf_session_default_params(void);

enum kvf_status kvf_session_init(const struct kvf_model *model, const struct kvf_session_params *params,
                                 struct kvf_session **out);
void kvf_session_free(struct kvf_session *session);
/* Forgets every cached position. */
void kvf_session_reset(struct kvf_session *session);

/* Appends tokens to the context and runs them through the model in batches.
 * all_logits (optional): receives n x n_vocab floats, row i = logits after
 * token i. The logits after the last token are always kept in the session. */
enum kvf_status kvf_session_prefill(struct kvf_session *session, const int32_t *tokens, int n,
                                    float *all_logits);
/* Appends one token (a prefill of length 1). After a failure other than
 * KVF_ERR_INVALID_ARG or KVF_ERR_CONTEXT (checked before any work), the
 * session must be reset. */
enum kvf_status kvf_session_decode(struct kvf_session *session, int32_t token);
/* n_vocab logits after the last token processed; NULL before the first. */
const float *kvf_session_logits(const struct kvf_session *session);
int kvf_session_n_past(const struct kvf_session *session);
/* Bytes of KV cache currently allocated (all layers, keys and values). */
size_t kvf_session_kv_bytes(const struct kvf_session *session);

/* -------------------------------------------------------------- sampler -- */

struct kvf_sampler; /* opaque: parameters + RNG state */

struct kvf_sampler_params {
    float temp;      /* <= 0: greedy (argmax)                       */
    int top_k;       /* <= 0: off                                   */
    float top_p;     /* >= 1: off                                   */
    float min_p;     /* <= 0: off                                   */
    uint64_t seed;
};
struct kvf_sampler_params kvf_sampler_default_params(void);
enum kvf_status kvf_sampler_init(const struct kvf_sampler_params *params, struct kvf_sampler **out);
void kvf_sampler_free(struct kvf_sampler *sampler);
/* Returns the chosen token id, or -1 on bad arguments. */
int32_t kvf_sampler_sample(struct kvf_sampler *sampler, const float *logits, int n_vocab);

/* ---------------------------------------------------------------- misc -- */

/* Name of the SIMD level chosen at run time: "avx512", "avx2" or "scalar". */
const char *kvf_simd_level(void);
/* Peak resident set size of this process in bytes (0 if unknown). */
size_t kvf_peak_rss_bytes(void);

#ifdef __cplusplus
}
#endif
#endif /* KVFOLD_H */
