/* Writes the tiny random-weight models the integration tests run (GGUF in
 * every weight type kvfold reads, and Hugging Face directories), each with a
 * 300-token byte-level BPE tokenizer. Same seeds, same bytes, every run.
 *
 * usage: make_fixture OUTDIR
 *
 * A model's weights are generated once in Hugging Face layout (rows = output
 * features) and then stored both ways, applying the transformations of
 * llama.cpp's converter for GGUF (Llama Q/K rows permuted for interleaved
 * RoPE, Gemma norms stored as w + 1). So llama-f32.gguf and llama-st/ hold the
 * same model and must give the same logits, as must gemma3-f32.gguf and
 * gemma3-st/ (tests/ref/compare_logits.py --same-as checks it).
 *
 * The tiny LLaVA is stored three ways: llava-f32.gguf + llava-mmproj-f32.gguf
 * (llama.cpp's legacy llava layout: the last CLIP layer dropped, HF's fc1
 * stored as ffn_down), llava-st/ (transformers < 4.52 names) and
 * llava-st-new/ (>= 4.52 names). llava-mmproj-f16.gguf holds the same vision
 * weights in F16 with exact GELU and the newer ffn naming;
 * llava-mmproj-badproj.gguf projects to a width the decoder does not have. */
#include "core/quant.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/hf_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define N_VOCAB 300
#define N_SPECIAL 2  /* <s> = 0, </s> = 1; byte b is token N_SPECIAL + b */
/* The tiny Gemma 3 vision model's vocabulary adds Gemma 3's image tokens. */
static const char *const image_tokens[] = {"<start_of_image>", "<end_of_image>", "<image_soft_token>"};
#define N_VOCAB_IMAGE (N_VOCAB + 3)

/* Merges of the tokenizer, by rank; "Ġ" is the GPT-2 form of a space. Each
 * side is a byte or an earlier merge, and there are exactly enough to fill
 * N_VOCAB. */
static const char *const bpe_merges[] = {
    "Ġ t", "h e", "Ġ a", "i n", "Ġt he", "e r", "o n", "Ġ s", "r e", "a t", "e n", "Ġ o", "o r", "Ġ w",
    "i s", "Ġ c", "a n", "Ġ f", "e s", "Ġ b", "i t", "Ġ p", "a l", "Ġ m", "a r", "Ġ i", "Ġ d", "o u",
    "Ġa n", "Ġan d", "Ġ h", "Ġo f", "n g", "i ng", "l l", "Ġi s", "Ġ T", "T he", "Ġ l", "l e", "Ġt o",
    "Ġ n",
};
#define N_MERGES ((int)(sizeof bpe_merges / sizeof bpe_merges[0]))
_Static_assert(N_SPECIAL + 256 + N_MERGES == N_VOCAB, "the merges must fill the vocabulary");

/* Random numbers: rng_splitmix64 and rng_gauss from core/common.h. */

/* -------------------------------------------------------------- models -- */

enum family { FAM_LLAMA, FAM_QWEN2, FAM_GEMMA3, FAM_QWEN3 };
static const char *const family_name[] = {"llama", "qwen2", "gemma3", "qwen3"};

struct spec {
    enum family fam;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    int sliding_window;       /* gemma3: local layers see i - j < sliding_window */
    float rope_base, eps;
    bool tied;
    uint64_t seed;
    int n_vocab;              /* 0: N_VOCAB */
};

static int spec_vocab(const struct spec *sp) { return sp->n_vocab ? sp->n_vocab : N_VOCAB; }

/* One weight in Hugging Face layout: [rows, cols] (1-D: rows = 1). */
struct tensor {
    char hf[96], gg[64];      /* names in both conventions */
    int64_t rows, cols;
    bool is_2d;
    int conv;                 /* > 0: a conv kernel [rows, 3, conv, conv]; cols = 3 * conv^2 */
    float *data;              /* owned (write_llava_hf's joined copy borrows); rows * cols values */
};

struct model {
    struct spec sp;
    struct tensor *t;
    int n;
};

static struct tensor *model_add(struct model *m, const char *hf, const char *gg, int64_t rows, int64_t cols,
                                bool is_2d) {
    struct tensor *t = &m->t[m->n++];
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    snprintf(t->gg, sizeof t->gg, "%s", gg);
    t->rows = rows;
    t->cols = cols;
    t->is_2d = is_2d;
    t->conv = 0;
    t->data = malloc((size_t)(rows * cols) * sizeof(float));
    if (!t->data) {
        fprintf(stderr, "make_fixture: out of memory\n");
        exit(1);
    }
    return t;
}

/* Matrices ~ N(0, 1/cols) keep activations O(1) through the layers. */
static void fill_matrix(struct tensor *t, uint64_t *rng) {
    double sd = 1.0 / sqrt((double)t->cols);
    for (int64_t i = 0; i < t->rows * t->cols; i++) t->data[i] = (float)(sd * rng_gauss(rng));
}

/* Norm weights stay near 1 but vary enough that a skipped norm shows. For
 * Gemma the HF checkpoint holds w - 1 because its RMSNorm scales by (1 + w). */
static void fill_norm(struct tensor *t, uint64_t *rng, bool plus_one_form) {
    for (int64_t i = 0; i < t->cols; i++) t->data[i] = (float)((plus_one_form ? 0.0 : 1.0) + 0.1 * rng_gauss(rng));
}

/* Biases of the size of x*W (O(1)) so that a dropped bias shows. */
static void fill_bias(struct tensor *t, uint64_t *rng) {
    for (int64_t i = 0; i < t->cols; i++) t->data[i] = (float)(0.5 * rng_gauss(rng));
}

static void model_build(struct model *m, const struct spec *sp) {
    memset(m, 0, sizeof *m);
    m->sp = *sp;
    m->t = calloc((size_t)(4 + 16 * sp->n_layer), sizeof *m->t);
    if (!m->t) {
        fprintf(stderr, "make_fixture: out of memory\n");
        exit(1);
    }
    uint64_t rng = sp->seed;
    bool gemma = sp->fam == FAM_GEMMA3;
    int64_t E = sp->n_embd, F = sp->n_ff, Q = (int64_t)sp->n_head * sp->head_dim,
            KV = (int64_t)sp->n_head_kv * sp->head_dim;

    /* Embeddings about as large as a layer's output (Gemma's are scaled by
     * sqrt(n_embd) on input), so that the layers, not the token's own tied
     * embedding, decide the logits. */
    const int64_t V = spec_vocab(sp);
    struct tensor *t = model_add(m, "model.embed_tokens.weight", "token_embd.weight", V, E, true);
    double embd_sd = gemma ? 2.0 / sqrt((double)E) : 0.5;
    for (int64_t i = 0; i < V * E; i++) t->data[i] = (float)(embd_sd * rng_gauss(&rng));
    char hf[96], gg[64];
    for (int il = 0; il < sp->n_layer; il++) {
#define ADD(hfname, ggname, rows, cols, is_2d) \
    (snprintf(hf, sizeof hf, "model.layers.%d.%s", il, hfname), \
     snprintf(gg, sizeof gg, "blk.%d.%s", il, ggname), model_add(m, hf, gg, rows, cols, is_2d))
        fill_norm(ADD("input_layernorm.weight", "attn_norm.weight", 1, E, false), &rng, gemma);
        fill_matrix(ADD("self_attn.q_proj.weight", "attn_q.weight", Q, E, true), &rng);
        fill_matrix(ADD("self_attn.k_proj.weight", "attn_k.weight", KV, E, true), &rng);
        fill_matrix(ADD("self_attn.v_proj.weight", "attn_v.weight", KV, E, true), &rng);
        if (sp->fam == FAM_QWEN2) {
            fill_bias(ADD("self_attn.q_proj.bias", "attn_q.bias", 1, Q, false), &rng);
            fill_bias(ADD("self_attn.k_proj.bias", "attn_k.bias", 1, KV, false), &rng);
            fill_bias(ADD("self_attn.v_proj.bias", "attn_v.bias", 1, KV, false), &rng);
        }
        if (gemma || sp->fam == FAM_QWEN3) {
            fill_norm(ADD("self_attn.q_norm.weight", "attn_q_norm.weight", 1, sp->head_dim, false), &rng, gemma);
            fill_norm(ADD("self_attn.k_norm.weight", "attn_k_norm.weight", 1, sp->head_dim, false), &rng, gemma);
        }
        fill_matrix(ADD("self_attn.o_proj.weight", "attn_output.weight", E, Q, true), &rng);
        if (gemma) {
            fill_norm(ADD("post_attention_layernorm.weight", "post_attention_norm.weight", 1, E, false), &rng, true);
            fill_norm(ADD("pre_feedforward_layernorm.weight", "ffn_norm.weight", 1, E, false), &rng, true);
        } else {
            fill_norm(ADD("post_attention_layernorm.weight", "ffn_norm.weight", 1, E, false), &rng, false);
        }
        fill_matrix(ADD("mlp.gate_proj.weight", "ffn_gate.weight", F, E, true), &rng);
        fill_matrix(ADD("mlp.up_proj.weight", "ffn_up.weight", F, E, true), &rng);
        fill_matrix(ADD("mlp.down_proj.weight", "ffn_down.weight", E, F, true), &rng);
        if (gemma)
            fill_norm(ADD("post_feedforward_layernorm.weight", "post_ffw_norm.weight", 1, E, false), &rng, true);
#undef ADD
    }
    fill_norm(model_add(m, "model.norm.weight", "output_norm.weight", 1, E, false), &rng, gemma);
    if (!sp->tied) fill_matrix(model_add(m, "lm_head.weight", "output.weight", V, E, true), &rng);
}

static void model_free(struct model *m) {
    for (int i = 0; i < m->n; i++) free(m->t[i].data);
    free(m->t);
}

/* ----------------------------------------------------------- tokenizer -- */

/* GPT-2's byte-to-unicode map: printable bytes stand for themselves, the
 * others for U+0100 + n in byte order. Writes the UTF-8 form of byte b. */
static void byte_token(int b, char out[3]) {
    int cp;
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = b;
    } else {
        int n = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

struct vocab {
    int n;                       /* N_VOCAB, or N_VOCAB_IMAGE with Gemma 3's image tokens */
    char text[N_VOCAB_IMAGE][24];
    int32_t type[N_VOCAB_IMAGE]; /* GGUF token types: 1 normal, 3 control */
};

static void vocab_build(struct vocab *v, bool image_tokens_too) {
    v->n = image_tokens_too ? N_VOCAB_IMAGE : N_VOCAB;
    for (int i = N_VOCAB; i < v->n; i++) {
        snprintf(v->text[i], sizeof v->text[i], "%s", image_tokens[i - N_VOCAB]);
        v->type[i] = 3;
    }
    snprintf(v->text[0], sizeof v->text[0], "<s>");
    snprintf(v->text[1], sizeof v->text[1], "</s>");
    v->type[0] = v->type[1] = 3;
    for (int b = 0; b < 256; b++) {
        byte_token(b, v->text[N_SPECIAL + b]);
        v->type[N_SPECIAL + b] = 1;
    }
    for (int i = 0; i < N_MERGES; i++) {
        int id = N_SPECIAL + 256 + i, o = 0;
        for (const char *p = bpe_merges[i]; *p; p++)
            if (*p != ' ') v->text[id][o++] = *p;
        v->text[id][o] = 0;
        v->type[id] = 1;
    }
}

static void gguf_add_tokenizer(struct gguf_writer *w, const struct vocab *v) {
    const char *tokens[N_VOCAB_IMAGE];
    for (int i = 0; i < v->n; i++) tokens[i] = v->text[i];
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, v->type, v->n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", bpe_merges, N_MERGES);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
}

/* --------------------------------------------------------------- files -- */

static int fail(const char *what, const char *path) {
    fprintf(stderr, "make_fixture: %s %s: %s\n", what, path, kvf_last_error());
    return 1;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "make_fixture: cannot write %s: %s\n", path, strerror(errno));
        if (f) fclose(f);
        return 1;
    }
    return 0;
}

static int write_json(const char *path, cJSON *root) {
    char *text = cJSON_Print(root);
    int rc = text ? write_text(path, text) : 1;
    free(text);
    cJSON_Delete(root);
    return rc;
}

/* llama.cpp's converter reorders each Llama Q/K head from halves (NeoX) to
 * interleaved pairs: GGUF row 2i+j of a head is HF row j*head_dim/2 + i. */
static void permute_rows(const struct tensor *t, int head_dim, float *dst) {
    int64_t n_head = t->rows / head_dim, half = head_dim / 2;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int j = 0; j < 2; j++)
                memcpy(dst + (h * head_dim + 2 * i + j) * t->cols, t->data + (h * head_dim + j * half + i) * t->cols,
                       (size_t)t->cols * sizeof(float));
}

static int write_gguf(const struct model *m, const struct vocab *v, enum dtype type, const char *path) {
    const struct spec *sp = &m->sp;
    const char *arch = family_name[sp->fam];
    struct gguf_writer *w = gguf_writer_init();
    if (!w) return fail("out of memory for", path);
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "general.name", "kvfold fixture");
    gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)sp->n_ctx);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)sp->n_embd);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)sp->n_layer);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)sp->n_ff);
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)sp->n_head);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)sp->n_head_kv);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), sp->eps);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), sp->rope_base);
    if (sp->fam == FAM_GEMMA3 || sp->fam == FAM_QWEN3) { /* as the real files: no rope.dimension_count */
        gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)sp->head_dim);
        gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)sp->head_dim);
        if (sp->fam == FAM_GEMMA3)
            gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)sp->sliding_window);
    } else {
        gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)sp->head_dim);
    }
#undef KEY
    gguf_add_tokenizer(w, v);

    for (int i = 0; i < m->n; i++) {
        const struct tensor *t = &m->t[i];
        int64_t n = t->rows * t->cols;
        float *vals = malloc((size_t)n * sizeof(float));
        enum dtype tt = t->is_2d ? type : DT_F32;
        size_t row_bytes = dtype_row_bytes(tt, t->cols);
        void *q = malloc(row_bytes * (size_t)t->rows);
        if (!vals || !q || !row_bytes) {
            fprintf(stderr, "make_fixture: %s: cannot store %s as type %d\n", path, t->gg, (int)tt);
            free(vals), free(q), gguf_writer_free(w);
            return 1;
        }
        bool qk = strstr(t->gg, "attn_q.weight") || strstr(t->gg, "attn_k.weight");
        if (sp->fam == FAM_LLAMA && qk) permute_rows(t, sp->head_dim, vals);
        else memcpy(vals, t->data, (size_t)n * sizeof(float));
        if (sp->fam == FAM_GEMMA3 && strstr(t->gg, "norm.weight"))
            for (int64_t k = 0; k < n; k++) vals[k] += 1.0f;
        for (int64_t r = 0; r < t->rows; r++) {
            void *dst = (uint8_t *)q + (size_t)r * row_bytes;
            quant_quantize_row(tt, vals + r * t->cols, dst, t->cols);
        }
        int64_t ne[2] = {t->cols, t->rows};
        gguf_writer_add_tensor(w, t->gg, tt, t->is_2d ? 2 : 1, ne, q);
        free(vals);
        free(q);
    }
    enum kvf_status st = gguf_writer_write(w, path);
    gguf_writer_free(w);
    return st ? fail("cannot write", path) : 0;
}

static cJSON *hf_config_json(const struct spec *sp) {
    static const char *const archs[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Gemma3ForCausalLM",
                                        "Qwen3ForCausalLM"};
    static const char *const types[] = {"llama", "qwen2", "gemma3_text", "qwen3"};
    cJSON *c = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(archs[sp->fam]));
    cJSON_AddStringToObject(c, "model_type", types[sp->fam]);
    cJSON_AddNumberToObject(c, "hidden_size", sp->n_embd);
    cJSON_AddNumberToObject(c, "intermediate_size", sp->n_ff);
    cJSON_AddNumberToObject(c, "num_hidden_layers", sp->n_layer);
    cJSON_AddNumberToObject(c, "num_attention_heads", sp->n_head);
    cJSON_AddNumberToObject(c, "num_key_value_heads", sp->n_head_kv);
    cJSON_AddNumberToObject(c, "head_dim", sp->head_dim);
    cJSON_AddNumberToObject(c, "vocab_size", spec_vocab(sp));
    cJSON_AddNumberToObject(c, "max_position_embeddings", sp->n_ctx);
    cJSON_AddNumberToObject(c, "rms_norm_eps", sp->eps);
    cJSON_AddNumberToObject(c, "rope_theta", sp->rope_base);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", sp->tied);
    cJSON_AddNumberToObject(c, "bos_token_id", 0);
    cJSON_AddNumberToObject(c, "eos_token_id", 1);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    if (sp->fam == FAM_GEMMA3) {
        cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
        cJSON_AddNumberToObject(c, "query_pre_attn_scalar", sp->head_dim);
        cJSON_AddNumberToObject(c, "sliding_window", sp->sliding_window);
        cJSON_AddNumberToObject(c, "sliding_window_pattern", 6);
        cJSON_AddNumberToObject(c, "rope_local_base_freq", 10000);
        cJSON_AddNullToObject(c, "rope_scaling");
        cJSON_AddNullToObject(c, "final_logit_softcapping");
        cJSON_AddNullToObject(c, "attn_logit_softcapping");
        cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
        for (int il = 0; il < sp->n_layer; il++)
            cJSON_AddItemToArray(lt, cJSON_CreateString((il + 1) % 6 == 0 ? "full_attention" : "sliding_attention"));
    } else {
        cJSON_AddStringToObject(c, "hidden_act", "silu");
        if (sp->fam == FAM_QWEN2 || sp->fam == FAM_QWEN3) cJSON_AddBoolToObject(c, "use_sliding_window", false);
        if (sp->fam != FAM_QWEN2) cJSON_AddBoolToObject(c, "attention_bias", false);
    }
    return c;
}

static cJSON *tokenizer_json(const struct vocab *v) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (int i = 0; i < v->n; i++) {
        if (i == N_SPECIAL) i = N_VOCAB; /* the specials: <s>, </s> and the image tokens */
        if (i >= v->n) break;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", i);
        cJSON_AddStringToObject(a, "content", v->text[i]);
        cJSON_AddBoolToObject(a, "single_word", false);
        cJSON_AddBoolToObject(a, "lstrip", false);
        cJSON_AddBoolToObject(a, "rstrip", false);
        cJSON_AddBoolToObject(a, "normalized", false);
        cJSON_AddBoolToObject(a, "special", true);
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNullToObject(root, "normalizer");
    const char *parts[] = {"pre_tokenizer", "post_processor", "decoder"};
    for (int i = 0; i < 3; i++) {
        cJSON *p = cJSON_AddObjectToObject(root, parts[i]);
        cJSON_AddStringToObject(p, "type", "ByteLevel");
        cJSON_AddBoolToObject(p, "add_prefix_space", false);
        cJSON_AddBoolToObject(p, "trim_offsets", true);
        cJSON_AddBoolToObject(p, "use_regex", true);
    }
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(model, "end_of_word_suffix", "");
    cJSON_AddBoolToObject(model, "fuse_unk", false);
    cJSON_AddBoolToObject(model, "byte_fallback", false);
    cJSON_AddBoolToObject(model, "ignore_merges", false);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < v->n; i++) cJSON_AddNumberToObject(vocab, v->text[i], i);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < N_MERGES; i++) cJSON_AddItemToArray(merges, cJSON_CreateString(bpe_merges[i]));
    return root;
}

static cJSON *tokenizer_config_json(void) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddBoolToObject(c, "add_bos_token", true);
    cJSON_AddBoolToObject(c, "add_eos_token", false);
    cJSON_AddStringToObject(c, "bos_token", "<s>");
    cJSON_AddStringToObject(c, "eos_token", "</s>");
    cJSON_AddStringToObject(c, "tokenizer_class", "PreTrainedTokenizerFast");
    return c;
}

/* Writes a Hugging Face directory: config.json (and preprocessor_config.json
 * when given; both consumed), tokenizer files and the tensors of m as `type`
 * (DT_F32 or DT_BF16) in n_shards files (> 1: with
 * model.safetensors.index.json). */
static int write_hf_dir(const char *dir, cJSON *config, cJSON *preproc, const struct vocab *v, const struct model *m,
                        enum dtype type, int n_shards) {
    char path[1024];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "make_fixture: cannot create %s: %s\n", dir, strerror(errno));
        cJSON_Delete(config);
        cJSON_Delete(preproc);
        return 1;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    int bad = write_json(path, config);
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    if (preproc) bad |= write_json(path, preproc);
    if (bad) return 1;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (write_json(path, tokenizer_json(v))) return 1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (write_json(path, tokenizer_config_json())) return 1;

    struct st_tensor *st = calloc((size_t)m->n, sizeof *st);
    void **bufs = calloc((size_t)m->n, sizeof *bufs);
    int rc = !st || !bufs;
    size_t esize = type == DT_BF16 ? 2 : 4;
    for (int i = 0; !rc && i < m->n; i++) {
        const struct tensor *t = &m->t[i];
        size_t n = (size_t)(t->rows * t->cols);
        st[i].name = (char *)t->hf;
        st[i].type = type;
        if (t->conv) {
            st[i].n_dims = 4;
            st[i].shape[0] = t->rows;
            st[i].shape[1] = 3;
            st[i].shape[2] = st[i].shape[3] = t->conv;
        } else {
            st[i].n_dims = t->is_2d ? 2 : 1;
            st[i].shape[0] = t->is_2d ? t->rows : t->cols;
            st[i].shape[1] = t->cols;
        }
        st[i].nbytes = n * esize;
        if (type == DT_F32) {
            st[i].data = t->data;
            continue;
        }
        uint16_t *b = bufs[i] = malloc(n * 2);
        if (!b) rc = 1;
        for (size_t k = 0; b && k < n; k++) b[k] = f32_to_bf16(t->data[k]);
        st[i].data = b;
    }
    if (rc) fprintf(stderr, "make_fixture: out of memory\n");

    cJSON *index = n_shards > 1 ? cJSON_CreateObject() : NULL;
    cJSON *wmap = NULL;
    if (index) {
        size_t total = 0;
        for (int i = 0; i < m->n; i++) total += st ? st[i].nbytes : 0;
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(index, "metadata"), "total_size", (double)total);
        wmap = cJSON_AddObjectToObject(index, "weight_map");
    }
    for (int s = 0; !rc && s < n_shards; s++) {
        int i0 = m->n * s / n_shards, i1 = m->n * (s + 1) / n_shards;
        char name[64];
        if (n_shards > 1) snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        else snprintf(name, sizeof name, "model.safetensors");
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (st_write(path, st + i0, i1 - i0) != KVF_OK) rc = fail("cannot write", path);
        for (int i = i0; wmap && i < i1; i++) cJSON_AddStringToObject(wmap, st[i].name, name);
    }
    if (index && !rc) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        rc = write_json(path, index);
    } else {
        cJSON_Delete(index);
    }
    for (int i = 0; bufs && i < m->n; i++) free(bufs[i]);
    free(bufs);
    free(st);
    return rc;
}

static int write_hf(const struct model *m, const struct vocab *v, enum dtype type, int n_shards, const char *dir) {
    return write_hf_dir(dir, hf_config_json(&m->sp), NULL, v, m, type, n_shards);
}

/* --------------------------------------------------------------- llava -- */

/* The vision tower and projector of the tiny LLaVA (CLIP, MLP) or the tiny
 * Gemma 3 (SigLIP: no class token or pre-LN; pooling projector). */
struct vspec {
    int image_size, patch_size, n_embd, n_ff, n_head;
    int n_layer;    /* all of HF's layers; LLaVA reads the second-to-last one's output */
    int n_out;      /* projector width: the decoder's n_embd */
    double eps;
    uint64_t seed;
    int pool;       /* > 0: SigLIP with Gemma 3's projector pooling pool x pool patches */
};

/* config.json's image_token_index, the id transformers expects at image
 * positions of input_ids: the token of byte 0, which no prompt contains. */
#define IMAGE_TOKEN_ID N_SPECIAL

static const double clip_mean[3] = {0.48145466, 0.4578275, 0.40821073};
static const double clip_std[3] = {0.26862954, 0.26130258, 0.27577711};

/* dst = a + b; the fixture's names are fixed, so a name that does not fit is a bug here. */
static void name_join(char *dst, size_t n, const char *a, const char *b) {
    if ((size_t)snprintf(dst, n, "%s%s", a, b) >= n) {
        fprintf(stderr, "make_fixture: name %s%s too long\n", a, b);
        exit(1);
    }
}

static void fill_gauss(struct tensor *t, uint64_t *rng, double mean, double sd) {
    for (int64_t i = 0; i < t->rows * t->cols; i++) t->data[i] = (float)(mean + sd * rng_gauss(rng));
}

static struct tensor *vision_layer_add(struct model *m, int il, const char *hf, const char *gg, int64_t rows,
                                       int64_t cols, bool is_2d) {
    char hn[96], gn[64];
    if ((size_t)snprintf(hn, sizeof hn, "vision_tower.vision_model.encoder.layers.%d.%s", il, hf) >= sizeof hn ||
        (size_t)snprintf(gn, sizeof gn, "v.blk.%d.%s", il, gg) >= sizeof gn) {
        fprintf(stderr, "make_fixture: name of layer %d %s too long\n", il, hf);
        exit(1);
    }
    return model_add(m, hn, gn, rows, cols, is_2d);
}

/* HF names in the transformers < 4.52 layout of LlavaForConditionalGeneration;
 * GGUF names in llama.cpp's legacy llava layout (HF's fc1 stored as ffn_down,
 * fc2 as ffn_up; post_layernorm not stored, LLaVA never applies it). */
static void vision_build(struct model *m, const struct vspec *vs) {
    memset(m, 0, sizeof *m);
    m->t = calloc((size_t)(11 + 16 * vs->n_layer), sizeof *m->t);
    if (!m->t) {
        fprintf(stderr, "make_fixture: out of memory\n");
        exit(1);
    }
    uint64_t rng = vs->seed;
    const int64_t H = vs->n_embd, F = vs->n_ff, E = vs->n_out, grid = vs->image_size / vs->patch_size;
    char hf[96];
#define VADD(hfname, ggname, rows, cols, is_2d) \
    (name_join(hf, sizeof hf, "vision_tower.vision_model.", hfname), model_add(m, hf, ggname, rows, cols, is_2d))
    /* Class and position embeddings of the size of a patch embedding, so
     * that dropping or misplacing either shows after the pre-LN. */
    const bool siglip = vs->pool > 0;
    if (!siglip) fill_gauss(VADD("embeddings.class_embedding", "v.class_embd", 1, H, false), &rng, 0.0, 0.5);
    struct tensor *t = VADD("embeddings.patch_embedding.weight", "v.patch_embd.weight", H,
                            3 * (int64_t)vs->patch_size * vs->patch_size, true);
    t->conv = vs->patch_size;
    fill_matrix(t, &rng);
    if (siglip) fill_bias(VADD("embeddings.patch_embedding.bias", "v.patch_embd.bias", 1, H, false), &rng);
    fill_gauss(VADD("embeddings.position_embedding.weight", "v.position_embd.weight", grid * grid + !siglip, H, true),
               &rng, 0.0, 0.5);
    if (!siglip) {
        fill_gauss(VADD("pre_layrnorm.weight", "v.pre_ln.weight", 1, H, false), &rng, 1.0, 0.1);
        fill_gauss(VADD("pre_layrnorm.bias", "v.pre_ln.bias", 1, H, false), &rng, 0.0, 0.1);
    }
    for (int il = 0; il < vs->n_layer; il++) {
#define LADD(hfname, ggname, rows, cols, is_2d) vision_layer_add(m, il, hfname, ggname, rows, cols, is_2d)
        fill_gauss(LADD("layer_norm1.weight", "ln1.weight", 1, H, false), &rng, 1.0, 0.1);
        fill_gauss(LADD("layer_norm1.bias", "ln1.bias", 1, H, false), &rng, 0.0, 0.1);
        static const char *const proj[4][2] = {{"q_proj", "attn_q"}, {"k_proj", "attn_k"}, {"v_proj", "attn_v"},
                                               {"out_proj", "attn_out"}};
        for (int k = 0; k < 4; k++) {
            char hp[48], gp[32];
            snprintf(hp, sizeof hp, "self_attn.%s.weight", proj[k][0]);
            snprintf(gp, sizeof gp, "%s.weight", proj[k][1]);
            fill_matrix(LADD(hp, gp, H, H, true), &rng);
            snprintf(hp, sizeof hp, "self_attn.%s.bias", proj[k][0]);
            snprintf(gp, sizeof gp, "%s.bias", proj[k][1]);
            fill_bias(LADD(hp, gp, 1, H, false), &rng);
        }
        fill_gauss(LADD("layer_norm2.weight", "ln2.weight", 1, H, false), &rng, 1.0, 0.1);
        fill_gauss(LADD("layer_norm2.bias", "ln2.bias", 1, H, false), &rng, 0.0, 0.1);
        fill_matrix(LADD("mlp.fc1.weight", "ffn_down.weight", F, H, true), &rng);
        fill_bias(LADD("mlp.fc1.bias", "ffn_down.bias", 1, F, false), &rng);
        fill_matrix(LADD("mlp.fc2.weight", "ffn_up.weight", H, F, true), &rng);
        fill_bias(LADD("mlp.fc2.bias", "ffn_up.bias", 1, H, false), &rng);
#undef LADD
    }
    /* LLaVA's mmproj files drop the post-LN (never applied); SigLIP's ends the tower. */
    fill_gauss(VADD("post_layernorm.weight", siglip ? "v.post_ln.weight" : "", 1, H, false), &rng, 1.0, 0.1);
    fill_gauss(VADD("post_layernorm.bias", siglip ? "v.post_ln.bias" : "", 1, H, false), &rng, 0.0, 0.1);
#undef VADD
    if (siglip) {
        /* HF keeps (x P) with P [H][E] and the norm as w for (1 + w). */
        fill_gauss(model_add(m, "multi_modal_projector.mm_soft_emb_norm.weight", "mm.soft_emb_norm.weight", 1, H,
                             false), &rng, 0.0, 0.1);
        struct tensor *pj = model_add(m, "multi_modal_projector.mm_input_projection_weight",
                                      "mm.input_projection.weight", H, E, true);
        fill_gauss(pj, &rng, 0.0, 1.0 / sqrt((double)H));
        return;
    }
    fill_matrix(model_add(m, "multi_modal_projector.linear_1.weight", "mm.0.weight", E, H, true), &rng);
    fill_bias(model_add(m, "multi_modal_projector.linear_1.bias", "mm.0.bias", 1, E, false), &rng);
    fill_matrix(model_add(m, "multi_modal_projector.linear_2.weight", "mm.2.weight", E, E, true), &rng);
    fill_bias(model_add(m, "multi_modal_projector.linear_2.bias", "mm.2.bias", 1, E, false), &rng);
}

/* Newer llama.cpp converters name HF's fc1 ffn_up and fc2 ffn_down. */
static void ffn_name_swap(const char *in, char *out, size_t n) {
    const char *d = strstr(in, "ffn_down"), *u = strstr(in, "ffn_up");
    if (d) snprintf(out, n, "%.*sffn_up%s", (int)(d - in), in, d + strlen("ffn_down"));
    else if (u) snprintf(out, n, "%.*sffn_down%s", (int)(u - in), in, u + strlen("ffn_up"));
    else snprintf(out, n, "%s", in);
}

/* A llama.cpp llava mmproj file: every layer but the last (the one LLaVA's
 * feature layer -2 never reaches), 2-D and conv weights as `type`. */
static int write_mmproj(const struct model *m, const struct vspec *vs, enum dtype type, bool use_gelu, bool new_names,
                        const char *path) {
    struct gguf_writer *w = gguf_writer_init();
    if (!w) return fail("out of memory for", path);
    const bool siglip = vs->pool > 0;
    const int n_keep = siglip ? vs->n_layer : vs->n_layer - 1;
    float mean[3], sd[3];
    for (int c = 0; c < 3; c++)
        mean[c] = siglip ? 0.5f : (float)clip_mean[c], sd[c] = siglip ? 0.5f : (float)clip_std[c];
    gguf_writer_set_str(w, "general.architecture", "clip");
    gguf_writer_set_str(w, "general.name", "kvfold fixture");
    gguf_writer_set_str(w, "general.description", siglip ? "image encoder for Gemma 3" : "image encoder for LLaVA");
    gguf_writer_set_u32(w, "general.file_type", type == DT_F16 ? 1 : 0);
    gguf_writer_set_bool(w, "clip.has_text_encoder", false);
    gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
    if (siglip) {
        gguf_writer_set_str(w, "clip.projector_type", "gemma3");
        /* As llama.cpp's converter: written only when it is not Gemma 3's 4. */
        if (vs->pool != 4) gguf_writer_set_u32(w, "clip.vision.projector.scale_factor", (uint32_t)vs->pool);
    } else {
        gguf_writer_set_bool(w, "clip.has_llava_projector", true);
        gguf_writer_set_str(w, "clip.projector_type", "mlp");
    }
    gguf_writer_set_u32(w, "clip.vision.image_size", (uint32_t)vs->image_size);
    gguf_writer_set_u32(w, "clip.vision.patch_size", (uint32_t)vs->patch_size);
    gguf_writer_set_u32(w, "clip.vision.embedding_length", (uint32_t)vs->n_embd);
    gguf_writer_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)vs->n_ff);
    /* CLIP's own text-image projection width: present in real files, unused by LLaVA. */
    gguf_writer_set_u32(w, "clip.vision.projection_dim", 768);
    gguf_writer_set_u32(w, "clip.vision.attention.head_count", (uint32_t)vs->n_head);
    gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", (float)vs->eps);
    gguf_writer_set_u32(w, "clip.vision.block_count", (uint32_t)n_keep);
    gguf_writer_set_arr(w, "clip.vision.image_mean", GGUF_F32, mean, 3);
    gguf_writer_set_arr(w, "clip.vision.image_std", GGUF_F32, sd, 3);
    gguf_writer_set_bool(w, "clip.use_gelu", use_gelu);

    for (int i = 0; i < m->n; i++) {
        const struct tensor *t = &m->t[i];
        int il;
        if (!t->gg[0] || (sscanf(t->gg, "v.blk.%d.", &il) == 1 && il >= n_keep)) continue;
        char name[64];
        if (new_names) ffn_name_swap(t->gg, name, sizeof name);
        else snprintf(name, sizeof name, "%s", t->gg);
        const enum dtype tt = t->is_2d ? type : DT_F32;
        const size_t row_bytes = dtype_row_bytes(tt, t->cols);
        void *q = malloc(row_bytes * (size_t)t->rows);
        if (!q || !row_bytes) {
            fprintf(stderr, "make_fixture: %s: cannot store %s as type %d\n", path, name, (int)tt);
            free(q), gguf_writer_free(w);
            return 1;
        }
        /* The converter stores Gemma 3's projector norm as w + 1. */
        const float add = strstr(name, "soft_emb_norm") ? 1.0f : 0.0f;
        float *row = malloc(sizeof(float) * (size_t)t->cols);
        for (int64_t r = 0; row && r < t->rows; r++) {
            for (int64_t c = 0; c < t->cols; c++) row[c] = t->data[r * t->cols + c] + add;
            quant_quantize_row(tt, row, (uint8_t *)q + (size_t)r * row_bytes, t->cols);
        }
        if (!row) {
            free(q), gguf_writer_free(w);
            return fail("out of memory for", path);
        }
        free(row);
        if (t->conv) { /* ne = [kx, ky, channel, out]: the bytes of HF's [out, 3, ky, kx] */
            const int64_t ne[4] = {t->conv, t->conv, 3, t->rows};
            gguf_writer_add_tensor(w, name, tt, 4, ne, q);
        } else {
            const int64_t ne[2] = {t->cols, t->rows};
            gguf_writer_add_tensor(w, name, tt, t->is_2d ? 2 : 1, ne, q);
        }
        free(q);
    }
    enum kvf_status st = gguf_writer_write(w, path);
    gguf_writer_free(w);
    return st ? fail("cannot write", path) : 0;
}

static cJSON *float3_json(const double v[3]) {
    cJSON *a = cJSON_CreateArray();
    for (int c = 0; c < 3; c++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[c]));
    return a;
}

/* config.json's vision_config (added to c) with the keys both towers share. */
static cJSON *vision_config_json(cJSON *c, const struct vspec *vs, const char *model_type, const char *act) {
    cJSON *v = cJSON_AddObjectToObject(c, "vision_config");
    cJSON_AddStringToObject(v, "model_type", model_type);
    cJSON_AddNumberToObject(v, "hidden_size", vs->n_embd);
    cJSON_AddNumberToObject(v, "intermediate_size", vs->n_ff);
    cJSON_AddNumberToObject(v, "num_attention_heads", vs->n_head);
    cJSON_AddNumberToObject(v, "num_hidden_layers", vs->n_layer);
    cJSON_AddNumberToObject(v, "num_channels", 3);
    cJSON_AddNumberToObject(v, "image_size", vs->image_size);
    cJSON_AddNumberToObject(v, "patch_size", vs->patch_size);
    cJSON_AddStringToObject(v, "hidden_act", act);
    cJSON_AddNumberToObject(v, "layer_norm_eps", vs->eps);
    return v;
}

static cJSON *llava_config_json(const struct spec *sp, const struct vspec *vs) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "architectures"),
                         cJSON_CreateString("LlavaForConditionalGeneration"));
    cJSON_AddStringToObject(c, "model_type", "llava");
    cJSON_AddNumberToObject(c, "ignore_index", -100);
    cJSON_AddNumberToObject(c, "image_token_index", IMAGE_TOKEN_ID);
    const int grid = vs->image_size / vs->patch_size;
    cJSON_AddNumberToObject(c, "image_seq_length", grid * grid);
    cJSON_AddStringToObject(c, "projector_hidden_act", "gelu");
    cJSON_AddNumberToObject(c, "vision_feature_layer", -2);
    cJSON_AddStringToObject(c, "vision_feature_select_strategy", "default");
    cJSON_AddBoolToObject(c, "tie_word_embeddings", sp->tied);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    cJSON_AddItemToObject(c, "text_config", hf_config_json(sp));
    cJSON *v = vision_config_json(c, vs, "clip_vision_model", "quick_gelu");
    cJSON_AddNumberToObject(v, "projection_dim", 768);
    return c;
}

static cJSON *clip_preprocessor_json(const struct vspec *vs) {
    cJSON *c = cJSON_CreateObject();
    cJSON *crop = cJSON_AddObjectToObject(c, "crop_size");
    cJSON_AddNumberToObject(crop, "height", vs->image_size);
    cJSON_AddNumberToObject(crop, "width", vs->image_size);
    cJSON_AddBoolToObject(c, "do_center_crop", true);
    cJSON_AddBoolToObject(c, "do_convert_rgb", true);
    cJSON_AddBoolToObject(c, "do_normalize", true);
    cJSON_AddBoolToObject(c, "do_rescale", true);
    cJSON_AddBoolToObject(c, "do_resize", true);
    cJSON_AddItemToObject(c, "image_mean", float3_json(clip_mean));
    cJSON_AddStringToObject(c, "image_processor_type", "CLIPImageProcessor");
    cJSON_AddItemToObject(c, "image_std", float3_json(clip_std));
    cJSON_AddStringToObject(c, "processor_class", "LlavaProcessor");
    cJSON_AddNumberToObject(c, "resample", 3); /* PIL.Image.BICUBIC */
    cJSON_AddNumberToObject(c, "rescale_factor", 1.0 / 255.0);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(c, "size"), "shortest_edge", vs->image_size);
    return c;
}

/* Gemma3ForConditionalGeneration's config: SigLIP, and the pooled tokens
 * delimited by <start_of_image> / <end_of_image> (ids N_VOCAB, N_VOCAB + 1),
 * <image_soft_token> (N_VOCAB + 2) at image positions of input_ids. */
static cJSON *gemma3v_config_json(const struct spec *sp, const struct vspec *vs) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "architectures"),
                         cJSON_CreateString("Gemma3ForConditionalGeneration"));
    cJSON_AddStringToObject(c, "model_type", "gemma3");
    const int side = vs->image_size / vs->patch_size / vs->pool;
    cJSON_AddNumberToObject(c, "mm_tokens_per_image", side * side);
    cJSON_AddNumberToObject(c, "boi_token_index", N_VOCAB);
    cJSON_AddNumberToObject(c, "eoi_token_index", N_VOCAB + 1);
    cJSON_AddNumberToObject(c, "image_token_index", N_VOCAB + 2);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", sp->tied);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    cJSON_AddItemToObject(c, "text_config", hf_config_json(sp));
    cJSON_AddBoolToObject(vision_config_json(c, vs, "siglip_vision_model", "gelu_pytorch_tanh"), "vision_use_head",
                          false);
    return c;
}

static cJSON *gemma3v_preprocessor_json(const struct vspec *vs) {
    static const double half[3] = {0.5, 0.5, 0.5};
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "image_processor_type", "Gemma3ImageProcessor");
    cJSON_AddStringToObject(c, "processor_class", "Gemma3Processor");
    cJSON_AddBoolToObject(c, "do_convert_rgb", true);
    cJSON_AddBoolToObject(c, "do_normalize", true);
    cJSON_AddBoolToObject(c, "do_rescale", true);
    cJSON_AddBoolToObject(c, "do_resize", true);
    cJSON_AddBoolToObject(c, "do_pan_and_scan", false);
    cJSON_AddItemToObject(c, "image_mean", float3_json(half));
    cJSON_AddItemToObject(c, "image_std", float3_json(half));
    cJSON_AddNumberToObject(c, "resample", 2); /* PIL.Image.BILINEAR */
    cJSON_AddNumberToObject(c, "rescale_factor", 1.0 / 255.0);
    cJSON *size = cJSON_AddObjectToObject(c, "size");
    cJSON_AddNumberToObject(size, "height", vs->image_size);
    cJSON_AddNumberToObject(size, "width", vs->image_size);
    return c;
}

/* Decoder and vision tower as one *ForConditionalGeneration checkpoint:
 * language_model.model.* / language_model.lm_head / vision_tower.* /
 * multi_modal_projector.* (transformers < 4.52) or, with new_layout,
 * model.language_model.* / lm_head / model.vision_tower.* /
 * model.multi_modal_projector.*. LLaVA's config, or Gemma 3's when the
 * tower is SigLIP. */
static int write_vlm_hf(const struct model *dec, const struct model *vis, const struct vspec *vs,
                        const struct vocab *v, bool new_layout, const char *dir) {
    struct model all = {.sp = dec->sp, .n = dec->n + vis->n};
    all.t = calloc((size_t)all.n, sizeof *all.t);
    if (!all.t) {
        fprintf(stderr, "make_fixture: out of memory\n");
        return 1;
    }
    for (int i = 0; i < dec->n; i++) {
        const struct tensor *s = &dec->t[i];
        struct tensor *d = &all.t[i];
        *d = *s; /* shares the data */
        if (!new_layout) name_join(d->hf, sizeof d->hf, "language_model.", s->hf);
        else if (!strncmp(s->hf, "model.", 6)) name_join(d->hf, sizeof d->hf, "model.language_model.", s->hf + 6);
    }
    for (int i = 0; i < vis->n; i++) {
        const struct tensor *s = &vis->t[i];
        struct tensor *d = &all.t[dec->n + i];
        *d = *s;
        if (new_layout) name_join(d->hf, sizeof d->hf, "model.", s->hf);
    }
    const bool gemma = vs->pool > 0;
    int rc = write_hf_dir(dir, gemma ? gemma3v_config_json(&dec->sp, vs) : llava_config_json(&dec->sp, vs),
                          gemma ? gemma3v_preprocessor_json(vs) : clip_preprocessor_json(vs), v, &all, DT_F32, 1);
    free(all.t);
    return rc;
}

/* ---------------------------------------------------------------- main -- */

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_fixture OUTDIR\n");
        return 2;
    }
    const char *out = argv[1];
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "make_fixture: cannot create %s: %s\n", out, strerror(errno));
        return 1;
    }
    struct vocab *v = calloc(1, sizeof *v), *vi = calloc(1, sizeof *vi);
    if (!v || !vi) return 1;
    vocab_build(v, false);
    vocab_build(vi, true);

    /* Small dims: GQA 4:2, head_dim 16. K-quant blocks need rows of 256. */
    const struct spec llama = {FAM_LLAMA, 2, 64, 4, 2, 16, 128, 256, 0, 10000.0f, 1e-5f, false, 1, 0};
    const struct spec llama_k = {FAM_LLAMA, 2, 256, 4, 2, 64, 512, 256, 0, 10000.0f, 1e-5f, false, 2, 0};
    const struct spec qwen2 = {FAM_QWEN2, 2, 64, 4, 2, 16, 96, 256, 0, 1000000.0f, 1e-6f, true, 3, 0};
    /* Qwen3: head_dim 32 != n_embd / n_head, as in the real files. */
    const struct spec qwen3 = {FAM_QWEN3, 2, 64, 4, 2, 32, 96, 256, 0, 1000000.0f, 1e-6f, true, 9, 0};
    /* Gemma: 6 layers (5 local + 1 global), head_dim 32 != n_embd / n_head,
     * window 4 so that it bites on a 12-token prompt. */
    const struct spec gemma3 = {FAM_GEMMA3, 6, 64, 4, 2, 32, 128, 256, 4, 1000000.0f, 1e-6f, true, 4, 0};

    static const struct { const char *name; enum dtype type; bool k; } gguf_types[] = {
        {"f32", DT_F32, false},   {"f16", DT_F16, false},   {"bf16", DT_BF16, false}, {"q8_0", DT_Q8_0, false},
        {"q4_0", DT_Q4_0, false}, {"q4_1", DT_Q4_1, false}, {"q5_0", DT_Q5_0, false}, {"q5_1", DT_Q5_1, false},
        {"q4_k", DT_Q4_K, true},  {"q5_k", DT_Q5_K, true},  {"q6_k", DT_Q6_K, true},
    };
    struct model m, mk;
    model_build(&m, &llama);
    model_build(&mk, &llama_k);
    int rc = 0;
    char path[1024];
    for (size_t i = 0; !rc && i < sizeof gguf_types / sizeof gguf_types[0]; i++) {
        snprintf(path, sizeof path, "%s/llama-%s.gguf", out, gguf_types[i].name);
        rc = write_gguf(gguf_types[i].k ? &mk : &m, v, gguf_types[i].type, path);
    }
    snprintf(path, sizeof path, "%s/llama-st", out);
    rc = rc || write_hf(&m, v, DT_F32, 1, path);
    snprintf(path, sizeof path, "%s/llama-st-bf16", out);
    rc = rc || write_hf(&m, v, DT_BF16, 1, path);
    snprintf(path, sizeof path, "%s/llama-st-sharded", out);
    rc = rc || write_hf(&m, v, DT_F32, 2, path);
    model_free(&m);
    model_free(&mk);

    model_build(&m, &qwen2);
    snprintf(path, sizeof path, "%s/qwen2-f32.gguf", out);
    rc = rc || write_gguf(&m, v, DT_F32, path);
    snprintf(path, sizeof path, "%s/qwen2-st", out);
    rc = rc || write_hf(&m, v, DT_F32, 1, path);
    model_free(&m);

    model_build(&m, &qwen3);
    snprintf(path, sizeof path, "%s/qwen3-f32.gguf", out);
    rc = rc || write_gguf(&m, v, DT_F32, path);
    snprintf(path, sizeof path, "%s/qwen3-st", out);
    rc = rc || write_hf(&m, v, DT_F32, 1, path);
    model_free(&m);

    model_build(&m, &gemma3);
    snprintf(path, sizeof path, "%s/gemma3-f32.gguf", out);
    rc = rc || write_gguf(&m, v, DT_F32, path);
    snprintf(path, sizeof path, "%s/gemma3-st", out);
    rc = rc || write_hf(&m, v, DT_F32, 1, path);
    model_free(&m);

    /* LLaVA: a Llama decoder with room for 16 images of 64 tokens; CLIP on a
     * 32x32 image in 4x4 patches (8x8 grid + CLS), 3 layers of which LLaVA
     * runs 2. The bad projector maps to 80 != the decoder's 64. */
    const struct spec llava = {FAM_LLAMA, 2, 64, 4, 2, 16, 128, 4096, 0, 10000.0f, 1e-5f, false, 5, 0};
    const struct vspec clip = {.image_size = 32, .patch_size = 4, .n_embd = 48, .n_ff = 96, .n_head = 4,
                               .n_layer = 3, .n_out = 64, .eps = 1e-5, .seed = 6};
    struct vspec clip_bad = clip;
    clip_bad.n_out = 80;
    struct model vm;
    model_build(&m, &llava);
    vision_build(&vm, &clip);
    snprintf(path, sizeof path, "%s/llava-f32.gguf", out);
    rc = rc || write_gguf(&m, v, DT_F32, path);
    snprintf(path, sizeof path, "%s/llava-mmproj-f32.gguf", out);
    rc = rc || write_mmproj(&vm, &clip, DT_F32, false, false, path);
    snprintf(path, sizeof path, "%s/llava-mmproj-f16.gguf", out);
    rc = rc || write_mmproj(&vm, &clip, DT_F16, true, true, path);
    snprintf(path, sizeof path, "%s/llava-st", out);
    rc = rc || write_vlm_hf(&m, &vm, &clip, v, false, path);
    snprintf(path, sizeof path, "%s/llava-st-new", out);
    rc = rc || write_vlm_hf(&m, &vm, &clip, v, true, path);
    model_free(&vm);
    vision_build(&vm, &clip_bad);
    snprintf(path, sizeof path, "%s/llava-mmproj-badproj.gguf", out);
    rc = rc || write_mmproj(&vm, &clip_bad, DT_F32, false, false, path);
    model_free(&vm);
    model_free(&m);

    /* Gemma 3 with vision: the Gemma decoder above (window 4, shorter than
     * an image's 16 tokens, so that the window and an image's bidirectional
     * attention meet) with the image tokens in its vocabulary; SigLIP on a
     * 32x32 image in 4x4 patches (8x8 grid) pooled 2x2 into 4x4 = 16 tokens. */
    struct spec gemma3v = gemma3;
    gemma3v.n_ctx = 4096;
    gemma3v.seed = 7;
    gemma3v.n_vocab = N_VOCAB_IMAGE;
    const struct vspec siglip = {.image_size = 32, .patch_size = 4, .n_embd = 48, .n_ff = 96, .n_head = 4,
                                 .n_layer = 2, .n_out = 64, .eps = 1e-6, .seed = 8, .pool = 2};
    model_build(&m, &gemma3v);
    vision_build(&vm, &siglip);
    snprintf(path, sizeof path, "%s/gemma3v-f32.gguf", out);
    rc = rc || write_gguf(&m, vi, DT_F32, path);
    snprintf(path, sizeof path, "%s/gemma3v-mmproj-f32.gguf", out);
    rc = rc || write_mmproj(&vm, &siglip, DT_F32, true, true, path);
    snprintf(path, sizeof path, "%s/gemma3v-st", out);
    rc = rc || write_vlm_hf(&m, &vm, &siglip, vi, true, path);
    model_free(&vm);
    model_free(&m);
    free(v);
    free(vi);
    return rc;
}
