/*
 * kvfold.h — the public C API of kvfold, an inference engine for (vision-)
 * language models whose KV cache is compressed while the model runs.
 *
 * Conventions
 *  - Every fallible call returns enum kvf_status; KVF_OK is 0. On failure a
 *    one-line message for the calling thread is available from kvf_last_error().
 *  - A kvf_model holds shared, read-only weights (memory-mapped; on CPUs
 *    with AVX-512 VNNI the decoder's Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K
 *    matrices may be copied into an interleaved form at load, where that
 *    measured faster, unless kvf_model_params.repack is false, so two models
 *    loaded from one file need not share those pages). Any number of kvf_session objects may
 *    use one model; a session owns its KV cache, logits and scratch and must
 *    be used from one thread at a time.
 *  - Objects returned through an `out` pointer are owned by the caller and
 *    released with the matching *_free function (which accepts NULL).
 *  - The library never exits or prints; only the CLI decides that.
 *  - Calls that fill a caller's buffer (kvf_tokenize, kvf_token_to_piece,
 *    kvf_chat_apply) report through an out pointer how much they wrote; when
 *    the buffer is too small they return KVF_ERR_BUFFER and report the size
 *    the buffer needs instead, so a second call with that size succeeds.
 *  - Pointers returned by the library (tags, logits, strings) are borrowed:
 *    each declaration says until when they stay valid.
 *
 * Usage (error handling shortened to `check`):
 *
 *   struct kvf_model *m;
 *   struct kvf_model_params mp = kvf_model_default_params();
 *   check(kvf_model_load("model.gguf", &mp, &m));
 *   struct kvf_model_info info;
 *   kvf_model_get_info(m, &info);
 *   int32_t ids[512], n;               // KVF_ERR_BUFFER (n: ids needed) if more
 *   check(kvf_tokenize(m, text, strlen(text), ids, 512, true, false, &n));
 *
 *   struct kvf_session *s;
 *   struct kvf_session_params sp = kvf_session_default_params();
 *   sp.kv_spec = "snapkv";             // keep 20% of the prompt's KV entries
 *   sp.kv_budget = 0.2;                // (or say it in the spec: "snapkv:budget=0.2")
 *   check(kvf_session_init(m, &sp, &s));
 *   check(kvf_session_prefill(s, ids, n, NULL));   // the prompt
 *   check(kvf_session_compress(s));                // evict down to the budget
 *
 *   struct kvf_sampler *smp;
 *   struct kvf_sampler_params spp = kvf_sampler_default_params();
 *   check(kvf_sampler_init(&spp, &smp));
 *   for (int i = 0; i < 64; i++) {
 *       int32_t tok;
 *       check(kvf_sampler_sample(smp, kvf_session_logits(s), info.n_vocab, &tok));
 *       if (kvf_token_is_eog(m, tok)) break;
 *       char piece[64]; int32_t len;
 *       if (kvf_token_to_piece(m, tok, piece, sizeof piece, false, &len) == KVF_OK)
 *           fwrite(piece, 1, (size_t)len, stdout);
 *       check(kvf_session_decode(s, tok));         // the cache stays within budget
 *   }
 *   kvf_sampler_free(smp); kvf_session_free(s); kvf_model_free(m);
 */
#ifndef KVFOLD_H
#define KVFOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* KVF_API marks the symbols a shared build exports (the library is built
 * with -fvisibility=hidden and KVF_BUILD defined; users define nothing). */
#if defined(_WIN32) && defined(KVF_SHARED)
#  ifdef KVF_BUILD
#    define KVF_API __declspec(dllexport)
#  else
#    define KVF_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define KVF_API __attribute__((visibility("default")))
#else
#  define KVF_API
#endif

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
    KVF_ERR_BUFFER,        /* the output buffer is too small; the size needed is reported */
};

/* A static string naming st ("out of memory"). */
KVF_API const char *kvf_status_str(enum kvf_status st);
/* Message of the last failure on this thread ("" if none). The string is
 * thread-local storage of the library: its content is valid until the next
 * failing kvfold call on the same thread (copy it to keep it). */
KVF_API const char *kvf_last_error(void);

/* ---------------------------------------------------------------- model -- */

struct kvf_model; /* opaque: weights, hyper-parameters, tokenizer */

struct kvf_model_params {
    int n_threads;          /* threads used by sessions by default (<= 0: all cores) */
    const char *mmproj;     /* optional: a llama.cpp vision projector GGUF ("mmproj",
                               general.architecture = clip) for a GGUF decoder; a
                               Hugging Face LLaVA directory carries its own vision tower */
    bool vocab_only;        /* load only the tokenizer, the chat template and the
                               hyper-parameters the files give (no weights are mapped or
                               bound): enough for kvf_tokenize, kvf_token_to_piece,
                               kvf_chat_apply, kvf_prompt_init without media and
                               kvf_model_get_info. Any architecture is accepted (e.g. the
                               vocabulary-only GGUF files of llama.cpp, or a directory with
                               just tokenizer.json); kvf_session_init and kvf_media_* refuse
                               such a model with KVF_ERR_UNSUPPORTED. */
    /* Qwen2-VL / Qwen2.5-VL: the fewest and most tokens an image (not a
     * video frame) may become (llama.cpp's --image-min-tokens /
     * --image-max-tokens: the image's size is scaled into them), each in
     * 0..2^20; 0: the model's own bound (a directory's processor config; an
     * mmproj's clip.vision.image_min/max_pixels, else llama.cpp's 8 and 4096
     * tokens). KVF_ERR_INVALID_ARG when out of range or when the fewest
     * exceeds the most; models without such a tower ignore them, as
     * llama.cpp does. Idefics3 / SmolVLM: an image whose tiles and global
     * image would take more than image_max_tokens is read as its global
     * image alone (transformers' do_image_splitting false; llama.cpp's
     * single-image reading at image_max_tokens = one image's tokens). */
    int image_min_tokens, image_max_tokens;
    /* Decoding kernels are chosen at load for the CPU at hand: for each
     * weight type, its candidates (on CPUs with AVX-512 VNNI, the matrices
     * copied into an interleaved form; the rows kernels of each SIMD level
     * on the file's layout) are timed on the model's own matrices on all
     * the cores and the fastest kept, the same for every thread count
     * (kvf_model_info.kernels says which and why). The choice is cached in
     * kernels.tsv under $KVFOLD_CACHE_DIR, else $XDG_CACHE_HOME/kvfold,
     * else ~/.cache/kvfold, so later loads on the CPU cost nothing and agree
     * (the candidates' results differ in the last bits; without a usable
     * cache file nothing is timed); KVFOLD_KERNELS=measure times again,
     * KVFOLD_KERNELS=fixed skips it (interleaved wherever the CPU can). The interleaved copy
     * (llama.cpp's weight repacking) costs about a second per GB at load and
     * the pages two processes could otherwise share. repack false (default
     * true; --no-repack): no interleaved candidate, every weight stays in
     * the file's memory map. */
    bool repack;
};
KVF_API struct kvf_model_params kvf_model_default_params(void);

/* path: a .gguf file, or a Hugging Face directory (config.json,
 * model.safetensors or model.safetensors.index.json, tokenizer.json).
 * params NULL: kvf_model_default_params(). */
KVF_API enum kvf_status kvf_model_load(const char *path, const struct kvf_model_params *params,
                               struct kvf_model **out);
KVF_API void kvf_model_free(struct kvf_model *model);

enum kvf_rope_style { KVF_ROPE_NORM = 0 /* interleaved pairs */, KVF_ROPE_NEOX = 1 /* halves */ };

struct kvf_model_info {
    const char *arch;        /* "llama", "qwen2", "gemma3" (vocab_only: as the file says) */
    const char *name;        /* general.name or the directory name              */
    const char *source;      /* "gguf" or "safetensors"                         */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    int sliding_window;      /* 0 when every layer is global                    */
    float rope_base, rope_base_local, norm_eps;
    enum kvf_rope_style rope_style;
    int rope_sections[3];    /* M-RoPE (Qwen2-VL; Qwen3-VL interleaves them): rotary pairs on time, height,
                                width; 0 0 0: plain */
    const char *rope_scaling; /* of the global layers: "none", "linear", "llama3", "yarn", or "rope_freqs"
                               * (a GGUF's per-pair divisors, how llama.cpp stores Llama 3.1's) */
    float rope_scaling_factor; /* linear, llama3, yarn: the context's stretch; else 1 */
    /* vocab_only: the hyper-parameters the files give, 0 for the others;
     * n_vocab is the tokenizer's; no weights (n_params 0, weight_types ""). */
    int64_t n_params;        /* number of weights                                */
    int64_t weight_bytes;    /* bytes of weights as stored                       */
    const char *weight_types;/* e.g. "q4_1:30 q6_K:1 f32:61" (tensor counts)     */
    const char *tokenizer;   /* "spm" or "bpe:<pre>"                            */
    const char *chat_template_name; /* recognised template: "llama2", "vicuna", "chatml", "gemma", "none" */
    int32_t bos, eos;        /* -1 when absent                                    */
    /* Vision tower (zero / NULL when the model has none). */
    bool has_vision;
    const char *vision_source;  /* "mmproj" or "safetensors"                      */
    const char *vision_tower;   /* "CLIP ViT" (LLaVA), "SigLIP" (Gemma 3, Idefics3), "Qwen2.5-VL ViT",
                                   "Qwen2-VL ViT", "Qwen3-VL ViT" */
    const char *vision_projector; /* "mlp" (LLaVA), "gemma3" (pooling, norm, linear),
                                     "merger" (Qwen2.5-VL: 2 x 2 patches a token),
                                     "idefics3" (pixel shuffle, linear)              */
    int vision_image_size, vision_patch_size, vision_n_layer, vision_n_embd, vision_n_head;
    int vision_n_ff;
    int image_tokens;        /* embeddings one image becomes (e.g. 576); the most, when
                                the image's size decides (Qwen2.5-VL, Idefics3's tiles) */
    int image_grid;          /* image_tokens = image_grid^2 (CLS dropped); 0 when the
                                image's size decides                              */
    bool image_bidirectional;/* an image's tokens attend to each other (Gemma 3): each image is
                                prefilled in one pass, whatever n_batch or the block size */
    int video_frames_per_item; /* frames of a video each media item holds: 2 (Qwen2-VL,
                                  Qwen2.5-VL, Qwen3-VL: temporal patches), 1 (LLaVA: frames as images),
                                  0 (no videos: Gemma 3, no vision tower) */
    /* Decoding (vocab_only: 0 and ""). */
    int64_t decode_bytes;    /* weight bytes one decoding step streams: every matrix but an
                                embedding of its own (read a row a token); decoding's share of
                                the memory bandwidth is decode_bytes x tokens/s over it */
    const char *kernels;     /* each weight type's decoding kernel and why, chosen at load for
                                this CPU, e.g. "q4_K: rows-avx2 (measured at load on 64 MiB, 2
                                threads: ilv-avx512 21.0 GB/s, rows-avx512 24.1 GB/s, ...)" */
};
/* The strings are owned by the model: valid until kvf_model_free. */
KVF_API void kvf_model_get_info(const struct kvf_model *model, struct kvf_model_info *info);

/* ------------------------------------------------------------ tokenizer -- */

/* Tokenizes text[0..len) into tokens[0..n_max) (tokens may be NULL when
 * n_max is 0); *n_tokens gets the number of ids written. KVF_ERR_BUFFER when
 * n_max is too small: nothing usable is written and *n_tokens gets the number
 * needed. add_bos: start with BOS when the model's tokenizer adds one.
 * parse_special: turn the text of control tokens (e.g. "<|im_start|>") into
 * their ids. */
KVF_API enum kvf_status kvf_tokenize(const struct kvf_model *model, const char *text, size_t len,
                                     int32_t *tokens, int32_t n_max, bool add_bos, bool parse_special,
                                     int32_t *n_tokens);
/* The bytes a token stands for when printed (special tokens: empty unless
 * render_special) into buf[0..len); *n_bytes gets the byte count (never
 * NUL-terminated). KVF_ERR_BUFFER when len is too small (*n_bytes: the bytes
 * needed); KVF_ERR_INVALID_ARG for a token outside the vocabulary. */
KVF_API enum kvf_status kvf_token_to_piece(const struct kvf_model *model, int32_t token, char *buf,
                                           int32_t len, bool render_special, int32_t *n_bytes);
KVF_API bool kvf_token_is_eog(const struct kvf_model *model, int32_t token);

/* Chat templates. name: "llama2" (Llama-2 chat), "vicuna" (Vicuna v1.1 /
 * LLaVA-1.5), "chatml", "gemma", or NULL for the one recognised from
 * tokenizer.chat_template (model may be NULL when name is given). Writes the
 * conversation, NUL-terminated, into buf[0..len); *n_chars gets its length
 * (NUL excluded). KVF_ERR_BUFFER when len is too small: *n_chars gets the
 * bytes needed, NUL included. An unknown name or a bad message:
 * KVF_ERR_INVALID_ARG; no name and a template not recognised:
 * KVF_ERR_UNSUPPORTED. */
struct kvf_chat_message { const char *role; const char *content; };
KVF_API enum kvf_status kvf_chat_apply(const struct kvf_model *model, const char *name,
                                       const struct kvf_chat_message *msgs, int n_msgs,
                                       bool add_assistant_prefix, char *buf, int32_t len, int32_t *n_chars);
/* Comma-separated list of template names accepted by kvf_chat_apply (a
 * static string). */
KVF_API const char *kvf_chat_templates(void);

/* --------------------------------------------------------------- images -- */

/* A decoded image: 8-bit RGB, row-major, w x h. */
struct kvf_image;

/* Largest image (in pixels) the loaders accept unless told otherwise. */
#define KVF_IMAGE_MAX_PIXELS_DEFAULT (64 * 1024 * 1024)

/* PNG, JPEG, GIF (first frame), WebP (still) and binary PPM/PGM, converted
 * to RGB as Pillow's convert("RGB") does (grey replicated, alpha dropped,
 * palettes applied). max_pixels <= 0 means KVF_IMAGE_MAX_PIXELS_DEFAULT;
 * larger images are rejected from their header, before any pixel buffer
 * exists, and the memory one decode takes is bounded by a small multiple of
 * the pixel count (at most 11 bytes per pixel, for a progressive CMYK JPEG).
 * Safe on untrusted bytes. */
KVF_API enum kvf_status kvf_image_load(const char *path, int64_t max_pixels, struct kvf_image **out);
KVF_API enum kvf_status kvf_image_load_memory(const void *data, size_t size, int64_t max_pixels,
                                      struct kvf_image **out);
/* Copies w*h*3 bytes of RGB. */
KVF_API enum kvf_status kvf_image_from_rgb(int w, int h, const uint8_t *rgb, struct kvf_image **out);
KVF_API void kvf_image_free(struct kvf_image *image);
KVF_API int kvf_image_width(const struct kvf_image *image);
KVF_API int kvf_image_height(const struct kvf_image *image);
/* The pixels, [h][w][3]; valid until kvf_image_free. */
KVF_API const uint8_t *kvf_image_rgb(const struct kvf_image *image);

/* ---------------------------------------------------------------- media -- */

/* Token tags: every position of a prompt, and every KV entry, carries one. */
enum kvf_modality { KVF_MOD_TEXT = 0, KVF_MOD_IMAGE = 1, KVF_MOD_VIDEO = 2 };
struct kvf_tag {
    int32_t pos;       /* true sequence position                                   */
    int16_t modality;  /* enum kvf_modality                                        */
    int16_t media;     /* image: index among the prompt's images; video: frame index
                          within its video (Qwen: temporal patch of 2 frames); text: -1 */
    int16_t row, col;  /* grid coordinates inside the image or frame; text: -1     */
};
KVF_API const char *kvf_modality_str(enum kvf_modality m); /* "text", "image", "video" (static) */

/* A segment of embeddings that replaces one marker of a prompt: an encoded
 * image or video frame, or a synthetic ("pseudo") image. */
struct kvf_media;

/* Runs the model's vision tower (preprocessing, ViT, projector) on an image.
 * modality: KVF_MOD_IMAGE, or KVF_MOD_VIDEO for a frame of a video that
 * LLaVA encodes frame by frame (Qwen2-VL and Qwen2.5-VL refuse it with
 * KVF_ERR_INVALID_ARG: their frames go two at a time through
 * kvf_media_encode_video). n_threads <= 0: the model's default.
 * KVF_ERR_UNSUPPORTED without a vision tower. */
KVF_API enum kvf_status kvf_media_encode_image(const struct kvf_model *model, const struct kvf_image *image,
                                       enum kvf_modality modality, int n_threads, struct kvf_media **out);
/* Encodes a video: its frames in order, taken at fps frames a second
 * (0 < fps <= 1e6; Qwen2.5-VL's M-RoPE time positions depend on it).
 * Qwen2-VL and Qwen2.5-VL encode two frames at a time into one item, as
 * their video processor does (the frames all of one size; the last
 * repeated when the count is odd), and give an item after a video one past
 * the largest position the video took (Qwen's rule; transformers 5 differs
 * once the time positions reach the grid's longer side); Qwen3-VL too,
 * its frames sized by its processor's bounds on all n_frames together (so
 * a video comes in one call, first_frame 0), and each item placed in a
 * prompt after its "<t seconds>" timestamp; LLaVA encodes
 * each frame as an image; Gemma 3 reads no videos (KVF_ERR_UNSUPPORTED):
 * kvf_model_info.video_frames_per_item says which. A long video can be
 * given a few frames at a time: first_frame is the index of frames[0] in
 * the video (0 starts a video); every call but the last then holds a
 * multiple of video_frames_per_item frames, all of the first call's size.
 * n_threads <= 0: the model's default. out: room for n_frames items, each
 * the caller's to free; *n_out: how many were made (none on error). */
KVF_API enum kvf_status kvf_media_encode_video(const struct kvf_model *model, const struct kvf_image *const *frames,
                                       int n_frames, int first_frame, double fps, int n_threads,
                                       struct kvf_media **out, int *n_out);
/* Pseudo-vision for text models: a stand-in for an encoded image, so that
 * multimodal KV policies can be exercised with a text-only decoder. The
 * words of `text` are tokenized (no BOS, no special tokens) and their input
 * embeddings (the rows of the model's token-embedding table, scaled as the
 * model's embedding layer scales them) fill a rows x cols grid in row-major
 * order, the ids repeated from the first when the text runs out. Gaussian
 * noise of standard deviation noise x (the RMS of the embeddings placed) is
 * added to every value, drawn from a generator seeded with `seed`
 * (noise 0: none). The segment is tagged as an image (row, col of each
 * cell) and flagged synthetic (kvf_media_is_synthetic);
 * docs/METHODS.md §6 says why. */
KVF_API enum kvf_status kvf_media_pseudo_image(const struct kvf_model *model, const char *text, int rows, int cols,
                                       float noise, uint64_t seed, struct kvf_media **out);
/* Caller-made embeddings [rows*cols][n_embd] (copied), row-major over the
 * grid; in a prompt they behave as kvf_session_prefill_embd of the same
 * rows with the same tags, plus what the model's prompt layout adds to an
 * image (Gemma 3's and Qwen2.5-VL's delimiters, M-RoPE positions). A
 * KVF_MOD_VIDEO item made so has video index -1 and time position 0: it
 * goes on the video before it. */
KVF_API enum kvf_status kvf_media_from_embd(const struct kvf_model *model, const float *embd, int rows, int cols,
                                    enum kvf_modality modality, struct kvf_media **out);
KVF_API void kvf_media_free(struct kvf_media *media);
KVF_API int kvf_media_n_tokens(const struct kvf_media *media);
KVF_API bool kvf_media_is_synthetic(const struct kvf_media *media);
KVF_API enum kvf_modality kvf_media_modality(const struct kvf_media *media);
/* The item's index in its video, as kvf_media_encode_video made it (0: a
 * video's first); -1 for other media. */
KVF_API int kvf_media_video_index(const struct kvf_media *media);
/* Wall time spent encoding (ms; 0 for pseudo and caller-made media). */
KVF_API double kvf_media_encode_ms(const struct kvf_media *media);

/* --------------------------------------------------------------- prompt -- */

/* A tokenized multimodal prompt: text with markers, each marker replaced by
 * media. "<image>" takes the next media item (image or pseudo-image);
 * "<video>" takes the next run of consecutive KVF_MOD_VIDEO items (one video,
 * frame indices 0..; it ends before the next item whose
 * kvf_media_video_index is 0). The number of markers must match the media given. */
struct kvf_prompt;

#define KVF_MARKER_IMAGE "<image>"
#define KVF_MARKER_VIDEO "<video>"

/* media: borrowed; must outlive the prompt. */
KVF_API enum kvf_status kvf_prompt_init(const struct kvf_model *model, const char *text,
                                const struct kvf_media *const *media, int n_media, bool add_bos,
                                bool parse_special, struct kvf_prompt **out);
KVF_API void kvf_prompt_free(struct kvf_prompt *prompt);
KVF_API int kvf_prompt_n_tokens(const struct kvf_prompt *prompt);
/* Tags of the prompt's positions, [kvf_prompt_n_tokens], pos counted from 0
 * (they shift by the session's n_past when the prompt is evaluated). Valid
 * until kvf_prompt_free. */
KVF_API const struct kvf_tag *kvf_prompt_tags(const struct kvf_prompt *prompt);
/* Token id at position i, or -1 where the position holds media. */
KVF_API int32_t kvf_prompt_token(const struct kvf_prompt *prompt, int i);
/* True when any media item is synthetic (pseudo-vision). */
KVF_API bool kvf_prompt_is_synthetic(const struct kvf_prompt *prompt);

/* -------------------------------------------------------------- session -- */

struct kvf_session; /* opaque: KV cache, logits, scratch */

/* How the KV cache stores keys or values. Q8_0 and Q4_0 (as in GGML: blocks
 * of 32 values sharing one fp16 scale, 8-bit or 4-bit codes: 8.5 and 4.5
 * bits a value) need a head dimension that is a multiple of 32. Q4_0H is
 * Q4_0 of blocks rotated by the 32-point Hadamard transform (kvfold's own):
 * a value many times the rest of its block (keys have such channels) no
 * longer takes the block's 16 levels for itself. Q4_0S, for keys only, is
 * Q4_0H of keys smoothed channel by channel (kvfold's own, after QServe's
 * SmoothAttention and KIVI's per-channel keys): each (layer, kv head) takes
 * a shift and a scale per channel from the first keys it caches -- the
 * mean, and the square root of the largest distance from it -- so that a
 * channel far larger than the rest (Qwen2.5's) no longer decides the
 * levels of its block; two floats a channel per head on top of the rows. */
enum kvf_kv_type { KVF_KV_F32, KVF_KV_F16, KVF_KV_Q8_0, KVF_KV_Q4_0, KVF_KV_Q4_0H, KVF_KV_Q4_0S };
/* "f32", "f16", "q8_0", "q4_0", "q4_0h", "q4_0s" (static); NULL for a value outside the enum. */
KVF_API const char *kvf_kv_type_name(enum kvf_kv_type type);
/* The type of that name; otherwise KVF_ERR_INVALID_ARG with a message
 * listing the valid names. */
KVF_API enum kvf_status kvf_kv_type_parse(const char *name, enum kvf_kv_type *out);

struct kvf_session_params {
    int n_ctx;       /* maximum number of positions; <= 0: the model's training context (capped at 8192) */
    int n_batch;     /* prompt tokens processed per forward pass (>= 1)          */
    int n_threads;   /* <= 0: the model's default                                */
    const char *kv_spec; /* KV cache policy, e.g. "snapkv:budget=0.2"; NULL or "" = full
                            (applied by kvf_session_compress; see kvf_kv_policy_get) */
    enum kvf_kv_type type_k; /* storage of cached keys (default KVF_KV_F16, as llama.cpp's) */
    enum kvf_kv_type type_v; /* storage of cached values (default KVF_KV_F16) */
    int kv_gather;   /* > 0: whatever kv_spec needs, also gather what every policy scores with
                        (the attention each entry receives, the last kv_gather queries of every
                        layer, the queries' mean and covariance per head: head_dim^2 doubles per
                        layer and head), so that kvf_session_fork can apply any policy to this
                        prefill */
    double kv_budget; /* > 0: replaces the budget of kv_spec's preset -- a share in (0, 1] of the
                         tokens seen, or a whole number of entries -- as if the spec said
                         budget=X (the preset must take a budget key); 0: the spec's own */
    bool kv_swa_full; /* keep every entry of sliding-window layers (llama.cpp's --swa-full). By
                         default such a layer frees the entries that fell out of its window (a
                         few dozen at a time), its budget counts only what it can still see, and
                         kvf_session_truncate refuses positions whose window lost entries */
};
KVF_API struct kvf_session_params kvf_session_default_params(void);

/* params NULL: kvf_session_default_params(). KVF_ERR_INVALID_ARG for a bad
 * kv_spec or kv_budget; KVF_ERR_UNSUPPORTED for a vocab_only model. */
KVF_API enum kvf_status kvf_session_init(const struct kvf_model *model, const struct kvf_session_params *params,
                                 struct kvf_session **out);
KVF_API void kvf_session_free(struct kvf_session *session);
/* Forgets every cached position. */
KVF_API void kvf_session_reset(struct kvf_session *session);
/* Forgets the positions from n on (0 <= n <= n_past): their entries leave
 * the cache (the memory is returned: storage is fitted to the entries
 * left, as kvf_session_compress leaves it) and n_past becomes n, so that a
 * conversation can go on from what it shares with an earlier turn (a
 * server's prompt cache): kvf_session_prefill_prompt_part(session, prompt,
 * n, ...) then takes the prompt's positions from n, the first n being the
 * session's. A compressed session keeps the entries it kept of those
 * positions (merges from later positions stay folded in). No logits until
 * the next token. KVF_ERR_UNSUPPORTED when a sliding-window layer has freed
 * an entry that position n would see (kvf_session_params.kv_swa_full): the
 * session is unchanged, and only a reset and a new prefill go back there. */
KVF_API enum kvf_status kvf_session_truncate(struct kvf_session *session, int n);

/* Appends tokens to the context and runs them through the model in batches.
 * all_logits (optional): receives n x n_vocab floats, row i = logits after
 * token i. The logits after the last token are always kept in the session. */
KVF_API enum kvf_status kvf_session_prefill(struct kvf_session *session, const int32_t *tokens, int n,
                                    float *all_logits);
/* Appends a multimodal prompt (token ids and media embeddings, tagged).
 * all_logits (optional): kvf_prompt_n_tokens x n_vocab floats. With a reduce
 * stage in the policy (lightkv, fastv, tome) the whole prompt is one forward
 * pass, so its text can weigh the images before it; once that pass has merged
 * or dropped rows, all_logits is refused (KVF_ERR_UNSUPPORTED): those
 * positions have no logits. */
/* kvf_session_prefill_prompt in parts: positions [first, first + n) of the
 * prompt, the parts in order from first = 0 (each first = the prompt's
 * positions already in), so that a server can interleave a long prompt with
 * other sessions' decoding. A part runs on to the end of the forward pass
 * the whole prompt makes there (at most n_batch - 1 more positions; read
 * how far it got from kvf_session_n_past), so the parts run the very passes
 * of kvf_session_prefill_prompt and give its cache and logits bit for bit.
 * KVF_ERR_UNSUPPORTED for policies that need the whole prompt in one pass
 * (a reduce stage, block-wise question=1); KVF_ERR_INVALID_ARG for a part
 * out of order. A first part may also start at first = kvf_session_n_past
 * after kvf_session_truncate(session, first): the prompt's positions before
 * first are then taken to be the session's. */
KVF_API enum kvf_status kvf_session_prefill_prompt_part(struct kvf_session *session, const struct kvf_prompt *prompt,
                                                        int first, int n);
KVF_API enum kvf_status kvf_session_prefill_prompt(struct kvf_session *session, const struct kvf_prompt *prompt,
                                           float *all_logits);
/* Appends rows of input embeddings [n][n_embd] with their tags (the pos
 * field is ignored: positions continue at n_past). tags NULL: text. On an
 * M-RoPE model (kvf_model_info.rope_sections) the rows take text's rope
 * positions; images need a kvf_prompt, which lays out their 3-D ones. */
KVF_API enum kvf_status kvf_session_prefill_embd(struct kvf_session *session, const float *embd,
                                         const struct kvf_tag *tags, int n, float *all_logits);
/* Tags of every position processed so far, [kvf_session_n_past]. Valid
 * until the session next changes (prefill, decode, compress, reset, free). */
KVF_API const struct kvf_tag *kvf_session_tags(const struct kvf_session *session);
/* The token id at every position processed so far (-1: a media row),
 * [kvf_session_n_past], e.g. to find what a new prompt shares with a loaded
 * session. Valid as kvf_session_tags. */
KVF_API const int32_t *kvf_session_tokens(const struct kvf_session *session);
/* An application's note kept with the session: text (at most 16 MiB) that
 * kvf_session_copy copies and session files carry (kvfold chat keeps its
 * messages there). text NULL: none. kvf_session_note: "" when none. */
KVF_API enum kvf_status kvf_session_set_note(struct kvf_session *session, const char *text);
/* The KV policy the session was made with ("" for the full cache): the
 * kv_spec given, or the one a session file held. Valid while it lives. */
KVF_API const char *kvf_session_kv_spec(const struct kvf_session *session);
KVF_API const char *kvf_session_note(const struct kvf_session *session);
/* Tags of the entries cached for (layer, kv head), in cache order; *n gets
 * their count. NULL for an index out of range. Valid until the session next
 * changes (prefill, decode, compress, reset, free). */
KVF_API const struct kvf_tag *kvf_session_kv_tags(const struct kvf_session *session, int layer, int head, int *n);
/* What a merging policy folded where: for one (layer, kv head), every
 * evicted entry's true position and the true position of the kept entry it
 * was merged into (lookm, elastic), or of the row a reduce step merged it
 * into before this layer, so that it never reached this layer's cache
 * (lightkv, tome), in the order they happened. NULL and *n = 0 when nothing
 * was merged. Valid until the session next changes (prefill, decode,
 * compress, reset, free). */
struct kvf_kv_merge {
    int32_t from, into;
};
KVF_API const struct kvf_kv_merge *kvf_session_kv_merges(const struct kvf_session *session, int layer, int head,
                                                         int *n);
/* A layer's budget as a share of the tokens seen and the Gini coefficient
 * of its priority curve (0: attention spread evenly, near 1: on a few
 * entries), where the policy searched them (prefixkv, budget=prefix);
 * false (and nothing written) otherwise. */
KVF_API bool kvf_session_kv_layer_budget(const struct kvf_session *session, int layer, double *ratio, double *gini);

/* A new session in the state src's would have had under the KV policy
 * kv_spec with kv_budget (as in kvf_session_params: > 0 replaces the spec's
 * budget, 0 keeps it; src's own kv_spec and kv_budget are not inherited; its
 * other parameters are): the same cache, tags, logits and statistics, not
 * yet compressed — so that policies can be compared on
 * one prefill, each fork compressing and decoding its own way, with results
 * equal bit for bit to a prefill of their own. KVF_ERR_UNSUPPORTED when
 * they would not be: src already compressed, either policy prefilling
 * differently (a reduce or schedule stage, question=1), or src lacking a
 * statistic kv_spec scores with (see kv_gather). */
KVF_API enum kvf_status kvf_session_fork(const struct kvf_session *src, const char *kv_spec, double kv_budget,
                                         struct kvf_session **out);

/* A new session in src's state, whatever it is: the same policy and
 * parameters, cache (compressed or not), tags, logits, statistics, decode
 * stage's state and KV peak, so that both go on alike — decoding the same
 * tokens in each gives the same logits and cache, bit for bit. One context
 * compressed once can so take several next messages (a question each,
 * kvpress's questions=; a server's slot kept while another goes on from
 * it). The copy owns its memory: src is unchanged and either may be freed
 * first. A prompt being prefilled in parts continues in the copy with the
 * same kvf_prompt, which must outlive both. */
KVF_API enum kvf_status kvf_session_copy(const struct kvf_session *src, struct kvf_session **out);

/* Session files (docs/SESSION_FILE.md): a session's whole state — the
 * model's identity, its parameters and policy, the positions seen with
 * their tags and token ids, the logits, every head's kept entries in their
 * storage type, and what the policy carries between calls (statistics,
 * query windows, merge records, layer budgets) — so that a conversation
 * outlives its process or moves to another machine: continuing a loaded
 * session gives the logits and cache continuing the original gives, bit for
 * bit. Refused while a prompt is being prefilled in parts. A file is read
 * as untrusted: KVF_ERR_FORMAT for one cut short, corrupt (CRC-32) or
 * inconsistent, KVF_ERR_UNSUPPORTED for another model's (both named) or
 * another version's. */
/* Bytes kvf_session_save_buffer writes (0 for a NULL session or one that
 * cannot be saved). */
KVF_API size_t kvf_session_save_size(const struct kvf_session *session);
/* Writes the session into dst[0..size); KVF_ERR_BUFFER when size is below
 * kvf_session_save_size. */
KVF_API enum kvf_status kvf_session_save_buffer(const struct kvf_session *session, void *dst, size_t size);
/* Writes the session to path atomically (a temporary file renamed over it:
 * a reader sees the old file or the new one, never a part). */
KVF_API enum kvf_status kvf_session_save(const struct kvf_session *session, const char *path);
/* A new session from a saved one, on the model it was saved from (the
 * same decoder tensors: any mmproj), with n_threads threads (<= 0: the
 * model's default); the rest is the saved session's. A file whose context
 * is over both the model's trained context and n_ctx_max (<= 0: none) is
 * refused with KVF_ERR_CONTEXT before anything is allocated — the caller's
 * n_ctx_max is what its own sessions may take, as a -c beyond the trained
 * context. Memory follows what the file holds, not the context it names. */
KVF_API enum kvf_status kvf_session_load_buffer(const struct kvf_model *model, const void *src, size_t size,
                                                int n_threads, int n_ctx_max, struct kvf_session **out);
KVF_API enum kvf_status kvf_session_load(const struct kvf_model *model, const char *path, int n_threads,
                                         int n_ctx_max, struct kvf_session **out);

/* Applies the session's KV policy to the cache now (after the prompt):
 * every (layer, kv head) keeps the entries its rule scores best, evicted
 * entries are freed, and every head's storage is sized to what it holds
 * (for the full cache too). The buffers the prompt's passes needed
 * (n_batch rows) are freed as well; a later prefill allocates them again.
 * From then on each kvf_session_decode keeps the cache within budget by
 * the policy's decode stage (the budget applies to the tokens seen so
 * far). May be called again (it compresses to the budget). Under kvzip
 * the model first repeats the context through the cache (about one more
 * prefill of it; the cache holds the context and one chunk of the
 * repetition meanwhile, counted in the peak, possibly past n_ctx); the
 * logits stay the prompt's. */
KVF_API enum kvf_status kvf_session_compress(struct kvf_session *session);

/* Appends one token (a prefill of length 1). After a failure other than
 * KVF_ERR_INVALID_ARG or KVF_ERR_CONTEXT (checked before any work), the
 * session must be reset. */
KVF_API enum kvf_status kvf_session_decode(struct kvf_session *session, int32_t token);
/* kvf_session_decode of tokens[i] in sessions[i] for n sessions of one model
 * at once (a server's decode step): the weight products run once over the
 * n rows, each session attends to its own cache and applies its own decode
 * stage. The sessions must be distinct and not used by another thread
 * meanwhile. Each session's logits are those kvf_session_decode gives
 * (bit for bit while n < 16, where both read the weights through the same
 * dot products; with more rows the products may go through BLAS or the
 * integer prompt kernels and round differently). Checks every argument and context before any work
 * (KVF_ERR_INVALID_ARG, KVF_ERR_CONTEXT); after another failure every
 * session must be reset. */
KVF_API enum kvf_status kvf_session_decode_batch(struct kvf_session *const *sessions, const int32_t *tokens, int n);
/* n_vocab logits after the last token processed; NULL before the first.
 * Valid until the session next changes (prefill, decode, reset, free). */
KVF_API const float *kvf_session_logits(const struct kvf_session *session);
KVF_API int kvf_session_n_past(const struct kvf_session *session);
/* The positions the session can hold (n_ctx as resolved: the model's
 * training context, capped, where the params said <= 0). */
KVF_API int kvf_session_n_ctx(const struct kvf_session *session);
/* Bytes of KV cache currently allocated (all layers: keys, values, tags and
 * per-entry statistics), and the most allocated at any moment since the
 * session started or was reset (prefill included). */
KVF_API size_t kvf_session_kv_bytes(const struct kvf_session *session);
KVF_API size_t kvf_session_kv_peak_bytes(const struct kvf_session *session);
/* The peak starts again from the bytes allocated now: a caller that sums
 * several sessions' memory reads each one's peak since its last look (a
 * prompt's full cache before its compression, inside one call). */
KVF_API void kvf_session_kv_peak_reset(struct kvf_session *session);
/* Bytes a full cache of this session's storage type holds for the positions
 * seen: kvf_session_n_past entries in every (layer, kv head) -- in a
 * sliding-window layer the entries its window still sees, unless
 * kv_swa_full -- with their tags and the statistics this session keeps,
 * sized exactly. Right after
 * kvf_session_compress (which returns the storage appends left unused) the
 * share a policy keeps is kvf_session_kv_bytes over this, whether it
 * evicted after the prompt or never cached some positions (block-wise
 * prefill, reduce stages); for the full cache it is 1. */
KVF_API size_t kvf_session_kv_full_bytes(const struct kvf_session *session);
/* Bytes one position takes in a full cache of model m with keys stored as
 * type_k and values as type_v: a key row, a value row and an entry's tag
 * in every (layer, kv head) -- what kvf_session_kv_full_bytes grows by per
 * position for the full cache, per-entry statistics aside; a
 * sliding-window layer stops holding a position once its window has
 * passed it. per_cache (may be NULL): what such a cache holds whatever
 * its length (Q4_0S keys' shift and scale in every head; else 0).
 * KVF_ERR_INVALID_ARG for an unknown type, KVF_ERR_UNSUPPORTED for a type
 * the model's head dimension cannot take. */
KVF_API enum kvf_status kvf_kv_position_bytes(const struct kvf_model *m, enum kvf_kv_type type_k,
                                              enum kvf_kv_type type_v, size_t *per_position, size_t *per_cache);
/* The positions a cache of n_context positions holds beyond them while
 * kv_spec's compression runs: KVzip's reconstruction repeats the context
 * after it, a chunk (its key "chunk") at a time, each pass removed after
 * it; 0 for a rule without such a pass. What a server reserves for a
 * request is the context's positions and these. KVF_ERR_INVALID_ARG for a
 * bad spec (as kvf_kv_policy_check). */
KVF_API enum kvf_status kvf_kv_compress_positions(const struct kvf_model *m, const char *kv_spec, int32_t n_context,
                                                  int32_t *n_extra);
/* The most entries any one (layer, kv head) has held at any moment since the
 * session started or was reset: under block-wise prefill at most the block
 * budget plus the largest block. */
KVF_API int kvf_session_kv_peak_entries(const struct kvf_session *session);

/* What kvf_session_params.kv_spec accepts: presets ("snapkv:budget=0.2"),
 * each optionally followed by stage options ("+decode=h2o:recent=0.5"). */
struct kvf_kv_policy_info {
    /* Every string is static (valid for the life of the process). */
    const char *stage;     /* "preset", or the stage an option belongs to: "budget", "decode" */
    const char *name, *summary, *paper;
    const char *keys;      /* accepted keys, space-separated          */
    const char *defaults;  /* "budget=0.2,window=32,kernel=5"          */
    bool question_aware;   /* scores with the prompt's last queries (kvf_kv_policy_question_aware); a
                              stage option: makes a policy so */
};
KVF_API int kvf_kv_policy_count(void);
KVF_API enum kvf_status kvf_kv_policy_get(int i, struct kvf_kv_policy_info *info);
/* Whether spec's policy scores entries with the prompt's last queries
 * (SnapKV's observation window, PyramidKV, CSP, block-wise eviction by
 * SnapKV, FastV, LightKV): it keeps what the end of the prompt points at,
 * so the question must be in the prompt when it compresses. A chat
 * compresses after each message, before the next question exists; there a
 * question-agnostic rule (kvzip, expected, keydiff, knorm, streaming, h2o...) does not depend
 * on it. */
KVF_API enum kvf_status kvf_kv_policy_question_aware(const char *spec, bool *aware);
/* Checks a kv_spec without a session: KVF_OK, or an error whose message
 * lists what is valid. */
KVF_API enum kvf_status kvf_kv_policy_check(const char *spec);
/* kvf_kv_policy_check of spec with its preset's budget replaced by budget,
 * as kvf_session_params.kv_budget does (budget 0: spec's own). */
KVF_API enum kvf_status kvf_kv_policy_check_budget(const char *spec, double budget);

/* ---------------------------------------------------------------- kvzap -- */

/* KVzap's scorer (the policy kvzap) fitted for model m on the caller's
 * text, written to `path` (a GGUF file that names the model's digest):
 * spans of `span` tokens are drawn from texts[0..n_texts) (each a
 * NUL-terminated UTF-8 text), each prefilled as a user's message and then
 * repeated after it as KVzip does; for `per_span` positions of a span,
 * each layer's attention input is paired with KVzip+'s log score of the
 * position's entry in every kv head, and one ridge regression per layer
 * (scikit-learn's Ridge, penalty alpha, intercept not penalised) is fitted
 * on `samples` spans, then measured on `test` other spans (spans overlap
 * none of those). */
struct kvf_kvzap_params {
    int samples;   /* spans fitted on (default 256) */
    int test;      /* held-out spans measured on (default 8; 0: none) */
    int span;      /* tokens a span (default 512) */
    int per_span;  /* positions of a span paired (default 256; at most span) */
    double alpha;  /* ridge penalty (default 1) */
    uint64_t seed; /* draws the spans and their positions (default 0) */
    int n_threads; /* 0: the model's */
    /* Called after each span with the spans done and in all (fit, then
     * test); returning false stops: the fit then uses the spans done, and
     * the test is skipped. May be NULL. */
    bool (*progress)(int done, int total, void *user);
    void *user;
};
#define KVF_KVZAP_MAX_LAYERS 1024
/* What a calibration measured. r2: held-out R^2 of each layer's fit
 * (averaged over its kv heads, as scikit-learn's r2_score), spearman: the
 * rank correlation of its scores with KVzip+'s (the same average); NaN
 * without a test. */
struct kvf_kvzap_report {
    int n_layer, samples, test; /* the spans fitted on and measured on */
    int64_t rows;               /* pairs fitted per layer (the most of any layer: a sliding-window layer
                                   keeps only the positions its repetition saw) */
    float r2[KVF_KVZAP_MAX_LAYERS], spearman[KVF_KVZAP_MAX_LAYERS];
};
KVF_API struct kvf_kvzap_params kvf_kvzap_default_params(void);
/* KVF_ERR_INVALID_ARG for parameters out of range or a corpus without a
 * text of span tokens (or too few for the spans asked for); report may be
 * NULL. */
KVF_API enum kvf_status kvf_kvzap_calibrate(const struct kvf_model *m, const char *const *texts, int n_texts,
                                            const struct kvf_kvzap_params *params, const char *path,
                                            struct kvf_kvzap_report *report);
/* The scorer file KVzap reads for model m when its spec names none (a
 * GGUF file's name with .kvzap for .gguf; a directory's model.kvzap): a
 * string valid while m is. */
KVF_API const char *kvf_kvzap_default_path(const struct kvf_model *m);

/* -------------------------------------------------------------- sampler -- */

struct kvf_sampler; /* opaque: parameters + RNG state */

struct kvf_sampler_params {
    float temp;      /* <= 0: greedy (argmax)                       */
    int top_k;       /* <= 0: off                                   */
    float top_p;     /* >= 1: off                                   */
    float min_p;     /* <= 0: off                                   */
    uint64_t seed;
    /* llama.cpp's repeat penalty: each distinct token among the last
     * penalty_last_n given to kvf_sampler_accept has its logit divided by
     * penalty_repeat (multiplied, when negative) before sampling, greedy
     * included. penalty_repeat <= 0 or 1, or penalty_last_n <= 0: off. */
    float penalty_repeat;
    int penalty_last_n;
};
KVF_API struct kvf_sampler_params kvf_sampler_default_params(void);
KVF_API enum kvf_status kvf_sampler_init(const struct kvf_sampler_params *params, struct kvf_sampler **out);
KVF_API void kvf_sampler_free(struct kvf_sampler *sampler);
/* Draws a token id from logits[0..n_vocab) into *token. KVF_ERR_INVALID_ARG
 * for NULL pointers or n_vocab <= 0; KVF_ERR_NOMEM when the candidate list
 * cannot be allocated. */
KVF_API enum kvf_status kvf_sampler_sample(struct kvf_sampler *sampler, const float *logits, int n_vocab,
                                           int32_t *token);
/* Records a token of the context (the prompt's and each one generated), for
 * the repeat penalty; nothing to do when it is off. */
KVF_API void kvf_sampler_accept(struct kvf_sampler *sampler, int32_t token);

/* ---------------------------------------------------------------- misc -- */

/* "kvfold 0.1.0 (git 1a2b3c4d5e6f)": the version and the commit the library
 * was built from ("-dirty" when the sources had local changes, "unknown"
 * outside a git checkout), for results files. A static string. */
KVF_API const char *kvf_build_info(void);
/* Name of the SIMD level chosen at run time: "avx512", "avx2" or "scalar" (static). */
KVF_API const char *kvf_simd_level(void);
/* Peak resident set size of this process in bytes (0 if unknown). */
KVF_API size_t kvf_peak_rss_bytes(void);

#ifdef __cplusplus
}
#endif
#endif /* KVFOLD_H */
