/* Model loading: hyper-parameters and weights from a GGUF file or a Hugging
 * Face safetensors directory, every tensor checked against the shape the
 * architecture requires before use. */
#include "model/model.h"
#include "model/vit.h"
#include "model/weights.h"

#include "core/sys.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "tok/chat.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Limits that keep every later size computation far from overflow. */
#define MAX_DIM (1 << 20)
#define MAX_LAYERS 1024
#define MAX_HEAD_DIM 1024
/* The widest a layer may be against n_embd (n_ff, n_head x head_dim). A
 * batch holds such a width a token, backed only by width x n_embd weights:
 * without this, a file of a few megabytes (n_embd 1, n_ff 2^20) asks for
 * gigabytes of buffers. Real decoders stay within 8 x (Gemma 7B's and Gemma
 * 2 27B's n_ff; Qwen3-0.6B's queries are 2 x, Gemma 3 270M's n_ff 3.2 x and
 * queries 1.6 x); 64 leaves tiny test models room too. */
#define MAX_WIDTH_RATIO 64

struct kvf_model_params kvf_model_default_params(void) {
    struct kvf_model_params p = {.n_threads = 0, .mmproj = NULL, .vocab_only = false, .repack = true};
    return p;
}

static const char *arch_str(enum arch a) {
    switch (a) {
    case ARCH_LLAMA: return "llama";
    case ARCH_QWEN2: return "qwen2";
    case ARCH_GEMMA3: return "gemma3";
    case ARCH_QWEN3: return "qwen3";
    }
    return "?";
}

static enum kvf_status arch_parse(const char *s, enum arch *out) {
    if (!strcmp(s, "llama")) *out = ARCH_LLAMA;
    else if (!strcmp(s, "qwen2") || !strcmp(s, "qwen2vl")) *out = ARCH_QWEN2; /* qwen2vl: Qwen2 + M-RoPE */
    else if (!strcmp(s, "gemma3")) *out = ARCH_GEMMA3;
    else if (!strcmp(s, "qwen3") || !strcmp(s, "qwen3vl")) *out = ARCH_QWEN3; /* qwen3vl: + interleaved M-RoPE */
    else return err_set(KVF_ERR_UNSUPPORTED, "unknown architecture '%s' (supported: llama, qwen2, qwen2vl, gemma3, "
                        "qwen3, qwen3vl)", s);
    return KVF_OK;
}

/* Defaults that depend on the family, then a sanity check of the numbers. */
static enum kvf_status hparams_finish(struct hparams *hp) {
    if (hp->n_layer <= 0 || hp->n_layer > MAX_LAYERS || hp->n_embd <= 0 || hp->n_embd > MAX_DIM ||
        hp->n_head <= 0 || hp->n_head > MAX_DIM || hp->n_head_kv <= 0 || hp->n_ff <= 0 ||
        hp->n_ff > MAX_DIM || hp->n_vocab <= 0 || hp->n_vocab > (1 << 24))
        return err_set(KVF_ERR_FORMAT,
                       "hyper-parameters out of range (layers %d, embd %d, heads %d/%d, ff %d, vocab %d)", hp->n_layer,
                       hp->n_embd, hp->n_head, hp->n_head_kv, hp->n_ff, hp->n_vocab);
    if (hp->n_head % hp->n_head_kv != 0)
        return err_set(KVF_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d", hp->n_head,
                       hp->n_head_kv);
    if (hp->head_dim <= 0) {
        if (hp->n_embd % hp->n_head)
            return err_set(KVF_ERR_FORMAT, "embedding %d not divisible by %d heads", hp->n_embd, hp->n_head);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    if (hp->head_dim > MAX_HEAD_DIM || hp->head_dim % 2)
        return err_set(KVF_ERR_UNSUPPORTED, "head dimension %d (must be even and <= %d)", hp->head_dim, MAX_HEAD_DIM);
    /* The keys' and values' width, n_head_kv x head_dim, is no more than
     * the queries': n_head_kv divides n_head. */
    if ((int64_t)hp->n_ff > (int64_t)MAX_WIDTH_RATIO * hp->n_embd)
        return err_set(KVF_ERR_FORMAT, "feed-forward width %d (feed_forward_length / intermediate_size) is more than "
                       "%d x the embedding width %d", hp->n_ff, MAX_WIDTH_RATIO, hp->n_embd);
    if ((int64_t)hp->n_head * hp->head_dim > (int64_t)MAX_WIDTH_RATIO * hp->n_embd)
        return err_set(KVF_ERR_FORMAT, "query width %d heads x %d (head_count x key_length / head_dim) is more than "
                       "%d x the embedding width %d", hp->n_head, hp->head_dim, MAX_WIDTH_RATIO, hp->n_embd);
    if (!(hp->norm_eps > 0.0f && hp->norm_eps < 1.0f))
        return err_set(KVF_ERR_FORMAT, "rms epsilon %g out of range", hp->norm_eps);
    if (!(hp->rope_base > 1.0f && isfinite(hp->rope_base)) || !isfinite(hp->rope_base_local))
        return err_set(KVF_ERR_FORMAT, "rope base %g out of range", hp->rope_base);
    if (hp->n_ctx_train <= 0) hp->n_ctx_train = 2048;
    if (hp->sliding_window < 0) return err_set(KVF_ERR_FORMAT, "negative sliding window");
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = hp->arch == ARCH_GEMMA3 ? sqrtf((float)hp->n_embd) : 1.0f;
    if (hp->rope_base_local <= 0.0f) hp->rope_base_local = hp->rope_base;
    const struct rope_scaling *sc = &hp->rope_scaling;
    if (sc->type != ROPE_SCALING_NONE &&
        (!(sc->factor > 0 && sc->factor < 1e6f) ||
         (sc->type == ROPE_SCALING_LLAMA3 && !(sc->orig_ctx > 0 && sc->low_freq_factor > 0 &&
                                               sc->high_freq_factor > sc->low_freq_factor)) ||
         (sc->type == ROPE_SCALING_YARN && !(sc->orig_ctx > 0 && sc->beta_fast > 0 && sc->beta_slow > 0 &&
                                             sc->attn_factor >= 0 && sc->attn_factor < 1e6f))))
        return err_set(KVF_ERR_FORMAT, "RoPE scaling parameters out of range (factor %g, original context %d, "
                       "frequency factors %g..%g, beta %g/%g, attention factor %g)", sc->factor, sc->orig_ctx,
                       sc->low_freq_factor, sc->high_freq_factor, sc->beta_fast, sc->beta_slow, sc->attn_factor);
    const int pairs = hp->mrope[0] + hp->mrope[1] + hp->mrope[2];
    if (hp->mrope_interleaved && !pairs) return err_set(KVF_ERR_FORMAT, "interleaved M-RoPE without its sections");
    if (hp->n_deepstack < 0 || hp->n_deepstack > hp->n_layer)
        return err_set(KVF_ERR_FORMAT, "%d DeepStack layers in a decoder of %d", hp->n_deepstack, hp->n_layer);
    if (pairs && pairs != hp->head_dim / 2)
        return err_set(KVF_ERR_FORMAT, "M-RoPE sections cover %d rotary pairs, the heads have %d", pairs,
                       hp->head_dim / 2);
    return KVF_OK;
}

/* Tensor names of one container convention. Layer names are formats taking
 * the prefix (HF LLaVA nests the decoder under language_model) and the layer. */
struct names {
    const char *embd, *out_norm; /* formats taking the prefix */
    const char *fmt[17];
};
enum { N_ATTN_NORM, N_Q, N_K, N_V, N_O, N_BQ, N_BK, N_BV, N_QN, N_KN, N_POST_ATTN, N_FFN_NORM, N_POST_FFN,
       N_GATE, N_UP, N_DOWN, N_GEMMA_FFN_NORM };

static const struct names names_gguf = {
    "%stoken_embd.weight", "%soutput_norm.weight",
    {"%sblk.%d.attn_norm.weight", "%sblk.%d.attn_q.weight", "%sblk.%d.attn_k.weight", "%sblk.%d.attn_v.weight",
     "%sblk.%d.attn_output.weight", "%sblk.%d.attn_q.bias", "%sblk.%d.attn_k.bias", "%sblk.%d.attn_v.bias",
     "%sblk.%d.attn_q_norm.weight", "%sblk.%d.attn_k_norm.weight", "%sblk.%d.post_attention_norm.weight",
     "%sblk.%d.ffn_norm.weight", "%sblk.%d.post_ffw_norm.weight", "%sblk.%d.ffn_gate.weight", "%sblk.%d.ffn_up.weight",
     "%sblk.%d.ffn_down.weight", "%sblk.%d.ffn_norm.weight"}};

/* HF names; Gemma 3 calls the pre-FFN norm pre_feedforward_layernorm and uses
 * post_attention_layernorm after attention (Llama uses it before the FFN). */
static const struct names names_hf = {
    "%sembed_tokens.weight", "%snorm.weight",
    {"%slayers.%d.input_layernorm.weight", "%slayers.%d.self_attn.q_proj.weight",
     "%slayers.%d.self_attn.k_proj.weight", "%slayers.%d.self_attn.v_proj.weight",
     "%slayers.%d.self_attn.o_proj.weight", "%slayers.%d.self_attn.q_proj.bias",
     "%slayers.%d.self_attn.k_proj.bias", "%slayers.%d.self_attn.v_proj.bias",
     "%slayers.%d.self_attn.q_norm.weight", "%slayers.%d.self_attn.k_norm.weight",
     "%slayers.%d.post_attention_layernorm.weight", "%slayers.%d.post_attention_layernorm.weight",
     "%slayers.%d.post_feedforward_layernorm.weight", "%slayers.%d.mlp.gate_proj.weight",
     "%slayers.%d.mlp.up_proj.weight", "%slayers.%d.mlp.down_proj.weight",
     "%slayers.%d.pre_feedforward_layernorm.weight"}};

struct layout {
    const struct names *nm;
    const char *prefix;  /* in front of every decoder name */
    const char *output;  /* the output head's full name */
};

static const char *lname(char *buf, size_t n, const struct layout *lo, int which, int layer) {
    snprintf(buf, n, lo->nm->fmt[which], lo->prefix, layer);
    return buf;
}

static enum kvf_status bind_all(struct kvf_model *m, const struct tensor_src *src, const struct layout *lo, bool hf) {
    const struct hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim, KD = (int64_t)hp->n_head_kv * hp->head_dim;
    const bool gemma = hp->arch == ARCH_GEMMA3;
    /* HF Gemma norms scale by (1 + w); llama.cpp's converter stored w + 1. */
    const float nadd = gemma && hf ? 1.0f : 0.0f;
    enum kvf_status st;
    char b[192];
    snprintf(b, sizeof b, lo->nm->embd, lo->prefix);
    if ((st = weight_bind(m, src, &m->tok_embd, b, V, E, true))) return st;
    snprintf(b, sizeof b, lo->nm->out_norm, lo->prefix);
    if ((st = weight_bind_vec(m, src, &m->output_norm, b, E, true, nadd)) ||
        (st = weight_bind(m, src, &m->output, lo->output, V, E, false)))
        return st;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return err_set(KVF_ERR_NOMEM, "out of memory");
    for (int l = 0; l < hp->n_layer; l++) {
        struct layer_weights *L = &m->layers[l];
        const bool bias = hp->arch == ARCH_QWEN2;
        if ((st = weight_bind_vec(m, src, &L->attn_norm, lname(b, sizeof b, lo, N_ATTN_NORM, l), E, true, nadd)) ||
            (st = weight_bind(m, src, &L->wq, lname(b, sizeof b, lo, N_Q, l), QD, E, true)) ||
            (st = weight_bind(m, src, &L->wk, lname(b, sizeof b, lo, N_K, l), KD, E, true)) ||
            (st = weight_bind(m, src, &L->wv, lname(b, sizeof b, lo, N_V, l), KD, E, true)) ||
            (st = weight_bind(m, src, &L->wo, lname(b, sizeof b, lo, N_O, l), E, QD, true)) ||
            (st = weight_bind_vec(m, src, &L->bq, lname(b, sizeof b, lo, N_BQ, l), QD, bias, 0)) ||
            (st = weight_bind_vec(m, src, &L->bk, lname(b, sizeof b, lo, N_BK, l), KD, bias, 0)) ||
            (st = weight_bind_vec(m, src, &L->bv, lname(b, sizeof b, lo, N_BV, l), KD, bias, 0)) ||
            (st = weight_bind(m, src, &L->w_gate, lname(b, sizeof b, lo, N_GATE, l), F, E, true)) ||
            (st = weight_bind(m, src, &L->w_up, lname(b, sizeof b, lo, N_UP, l), F, E, true)) ||
            (st = weight_bind(m, src, &L->w_down, lname(b, sizeof b, lo, N_DOWN, l), E, F, true)))
            return st;
        /* Gemma 3 and Qwen3: RMSNorm of each head's query and key before RoPE. */
        if ((gemma || hp->arch == ARCH_QWEN3) &&
            ((st = weight_bind_vec(m, src, &L->q_norm, lname(b, sizeof b, lo, N_QN, l), hp->head_dim, true, nadd)) ||
             (st = weight_bind_vec(m, src, &L->k_norm, lname(b, sizeof b, lo, N_KN, l), hp->head_dim, true, nadd))))
            return st;
        if (gemma) {
            if ((st = weight_bind_vec(m, src, &L->post_attn_norm, lname(b, sizeof b, lo, N_POST_ATTN, l), E, true,
                                      nadd)) ||
                (st = weight_bind_vec(m, src, &L->ffn_norm, lname(b, sizeof b, lo, N_GEMMA_FFN_NORM, l), E, true,
                                      nadd)) ||
                (st = weight_bind_vec(m, src, &L->post_ffn_norm, lname(b, sizeof b, lo, N_POST_FFN, l), E, true, nadd)))
                return st;
            /* Five sliding-window layers, then one global (llama.cpp's swa pattern 6). */
            L->is_local = hp->sliding_window > 0 && (l + 1) % hp->swa_pattern != 0;
        } else if ((st = weight_bind_vec(m, src, &L->ffn_norm, lname(b, sizeof b, lo, N_FFN_NORM, l), E, true, 0))) {
            return st;
        }
    }
    return KVF_OK;
}

/* ------------------------------------------------------------- loaders -- */

static enum kvf_status gguf_int(const struct gguf_file *f, const char *arch, const char *key, int *out,
                                bool required) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    uint32_t v;
    if (!gguf_get_u32(f, k, &v)) {
        if (required) return err_set(KVF_ERR_FORMAT, "missing or ill-typed metadata '%s'", k);
        return KVF_OK;
    }
    if (v > (uint32_t)INT32_MAX) return err_set(KVF_ERR_FORMAT, "metadata '%s' = %u out of range", k, v);
    *out = (int)v;
    return KVF_OK;
}

static void gguf_float(const struct gguf_file *f, const char *arch, const char *key, float *out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    gguf_get_f32(f, k, out);
}

/* A scalar key's value as a number (integers, floats, booleans); false when
 * absent or not a scalar number. */
static bool gguf_number(const struct gguf_file *f, const char *key, double *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return false;
    switch (kv->val.type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64: *out = (double)kv->val.u; return true;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: *out = (double)kv->val.i; return true;
    case GGUF_F32: case GGUF_F64: *out = kv->val.f; return true;
    case GGUF_BOOL: *out = kv->val.b; return true;
    default: return false;
    }
}

/* The RoPE scaling of llama.cpp's keys: rope.scaling.type (absent: linear,
 * as llama.cpp reads it, which a factor of 1 or none makes no scaling),
 * rope.scaling.factor (or the older rope.scale_linear) and YaRN's original
 * context and ramp. Llama 3's scaling comes as the rope_freqs.weight tensor
 * instead (load_gguf). What kvfold does not implement is refused by name. */
static enum kvf_status gguf_rope_scaling(const struct gguf_file *f, const char *a, struct rope_scaling *sc) {
    char k[128];
    snprintf(k, sizeof k, "%s.rope.scaling.type", a);
    const char *type = gguf_get_str(f, k);
    if (gguf_find(f, k) && !type) return err_set(KVF_ERR_FORMAT, "'%s' is not a string", k);
    double factor = 0, v;
    snprintf(k, sizeof k, "%s.rope.scaling.factor", a);
    if (!gguf_number(f, k, &factor)) {
        snprintf(k, sizeof k, "%s.rope.scale_linear", a);
        gguf_number(f, k, &factor);
    }
    *sc = (struct rope_scaling){.type = ROPE_SCALING_NONE};
    if (!type || !strcmp(type, "linear"))
        sc->type = factor != 0 && factor != 1 ? ROPE_SCALING_LINEAR : ROPE_SCALING_NONE;
    else if (!strcmp(type, "yarn")) sc->type = ROPE_SCALING_YARN;
    else if (strcmp(type, "none") != 0)
        return err_set(KVF_ERR_UNSUPPORTED, "%s.rope.scaling.type = '%.32s': not implemented (linear, yarn and "
                       "llama3's rope_freqs.weight are)", a, type);
    if (sc->type == ROPE_SCALING_NONE) return KVF_OK;
    if (!(factor > 0 && factor < 1e6))
        return err_set(KVF_ERR_FORMAT, "%s.rope.scaling.factor = %g out of range", a, factor);
    sc->factor = (float)factor;
    if (sc->type != ROPE_SCALING_YARN) return KVF_OK;
    snprintf(k, sizeof k, "%s.rope.scaling.original_context_length", a);
    if (!gguf_number(f, k, &v) || !(v >= 1 && v <= INT32_MAX))
        return err_set(KVF_ERR_FORMAT, "YaRN needs '%s' (a positive integer)", k);
    sc->orig_ctx = (int)v;
    sc->beta_fast = 32; /* llama.cpp's and transformers' defaults */
    sc->beta_slow = 1;
    /* yarn_attn_factor: transformers' attention_factor, as the converter
     * copies it (llama.cpp itself reads it for a few other architectures) */
    static const char *const yarn_keys[3] = {"yarn_beta_fast", "yarn_beta_slow", "yarn_attn_factor"};
    float *const dst[3] = {&sc->beta_fast, &sc->beta_slow, &sc->attn_factor};
    for (int i = 0; i < 3; i++) {
        snprintf(k, sizeof k, "%s.rope.scaling.%s", a, yarn_keys[i]);
        if (!gguf_find(f, k)) continue;
        if (!gguf_number(f, k, &v) || !(v > 0 && v < 1e6))
            return err_set(KVF_ERR_FORMAT, "'%s' is not a positive number", k);
        *dst[i] = (float)v;
    }
    return KVF_OK;
}

/* llama.cpp's keys of the three architectures that change the arithmetic
 * and that kvfold does not implement: refused (by name) unless absent or
 * at their neutral value, rather than run without. */
static const struct { const char *key; double neutral, also; } gguf_unimplemented[] = {
    {"attention.logit_softcapping", 0, 0}, {"final_logit_softcapping", 0, 0}, {"attention.scale", 0, 0},
    {"embedding_scale", 0, 1},  {"residual_scale", 0, 1}, {"logit_scale", 0, 1}, /* llama.cpp: 0 is unset */
    {"attention.clamp_kqv", 0, 0}, {"attention.max_alibi_bias", 0, 0}, {"expert_count", 0, 0},
    {"expert_used_count", 0, 0}, {"attention.q_lora_rank", 0, 0}, {"attention.kv_lora_rank", 0, 0},
    {"use_parallel_residual", 0, 0}, {"rope.scaling.attn_factor", 1, 1}, {"rope.scaling.yarn_ext_factor", 1, 1},
    {"rope.scaling.yarn_log_multiplier", 0, 0}, {"attention.causal", 1, 1},
};

static enum kvf_status gguf_keys_check(const struct gguf_file *f, const char *a, const struct hparams *hp) {
    char k[128];
    double v;
    for (size_t i = 0; i < sizeof gguf_unimplemented / sizeof *gguf_unimplemented; i++) {
        snprintf(k, sizeof k, "%s.%s", a, gguf_unimplemented[i].key);
        if (gguf_find(f, k) &&
            !(gguf_number(f, k, &v) && (v == gguf_unimplemented[i].neutral || v == gguf_unimplemented[i].also)))
            return err_set(KVF_ERR_UNSUPPORTED, "'%s' is set: kvfold does not implement it", k);
    }
    /* LayerNorm instead of RMSNorm */
    snprintf(k, sizeof k, "%s.attention.layer_norm_epsilon", a);
    if (gguf_find(f, k)) return err_set(KVF_ERR_UNSUPPORTED, "'%s' is set: kvfold's %s uses RMSNorm", k, a);
    /* values kvfold takes as given by the architecture (where it has the
     * key at all: applies): they must agree */
    const struct { const char *key; double want; bool applies; } fixed[] = {
        {"attention.value_length", hp->head_dim, true},
        {"vocab_size", hp->n_vocab, true},
        {"attention.sliding_window_pattern", hp->swa_pattern, hp->arch == ARCH_GEMMA3},
        {"rope.freq_base_swa", hp->rope_base_local, hp->arch == ARCH_GEMMA3},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        snprintf(k, sizeof k, "%s.%s", a, fixed[i].key);
        if (gguf_find(f, k) && !fixed[i].applies)
            return err_set(KVF_ERR_UNSUPPORTED, "'%s' is set: kvfold's %s has no such setting", k, a);
        if (gguf_find(f, k) && !(gguf_number(f, k, &v) && v == fixed[i].want))
            return err_set(KVF_ERR_UNSUPPORTED, "'%s' is not %g, which kvfold's %s takes", k, fixed[i].want, a);
    }
    return KVF_OK;
}

/* Every tensor of the file was bound, or is one known to be unused there
 * (a vision tower stored beside its decoder, read from an mmproj): a tensor
 * the architecture does not know (a bias, a norm of another variant) would
 * otherwise be left out without a word. */
static enum kvf_status gguf_tensors_check(const struct gguf_file *f, const bool *bound, const char *a) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name.s;
        if (bound[i] || !strncmp(name, "v.", 2) || !strncmp(name, "mm.", 3)) continue;
        return err_set(KVF_ERR_UNSUPPORTED, "tensor '%s' is not one kvfold's %s decoder uses (refused rather than "
                       "run without it)", name, a);
    }
    return KVF_OK;
}

/* The RoPE frequencies of the global and the local layers. */
static void rope_tables(struct kvf_model *m, const float *freq_factors) {
    const struct hparams *hp = &m->hp;
    m->rope_mscale[0] = ops_rope_freqs(m->rope_freq[0], hp->head_dim, hp->rope_base, &hp->rope_scaling, freq_factors);
    m->rope_mscale[1] = ops_rope_freqs(m->rope_freq[1], hp->head_dim, hp->rope_base_local, NULL, NULL);
    ops_rope_axes_fill(m->rope_axis, hp->head_dim / 2, hp->mrope, hp->mrope_interleaved);
}

static enum kvf_status load_gguf(struct kvf_model *m, const char *path) {
    enum kvf_status st = gguf_open(path, &m->gguf);
    if (st != KVF_OK) return st;
    const struct gguf_file *f = m->gguf;
    const char *a = gguf_get_str(f, "general.architecture");
    if (!a) return err_set(KVF_ERR_FORMAT, "%s: no general.architecture (or not a string without NUL bytes)", path);
    struct hparams *hp = &m->hp;
    if ((st = arch_parse(a, &hp->arch))) return st;
    hp->norm_eps = 1e-5f;
    hp->rope_base = 10000.0f;
    hp->swa_pattern = 6;
    if ((st = gguf_int(f, a, "block_count", &hp->n_layer, true)) ||
        (st = gguf_int(f, a, "embedding_length", &hp->n_embd, true)) ||
        (st = gguf_int(f, a, "feed_forward_length", &hp->n_ff, true)) ||
        (st = gguf_int(f, a, "attention.head_count", &hp->n_head, true)) ||
        (st = gguf_int(f, a, "context_length", &hp->n_ctx_train, false)) ||
        (st = gguf_int(f, a, "attention.key_length", &hp->head_dim, false)) ||
        (st = gguf_int(f, a, "attention.sliding_window", &hp->sliding_window, false)) ||
        (st = gguf_int(f, a, "n_deepstack_layers", &hp->n_deepstack, false)))
        return st;
    hp->mrope_interleaved = !strcmp(a, "qwen3vl");
    hp->n_head_kv = hp->n_head;
    if ((st = gguf_int(f, a, "attention.head_count_kv", &hp->n_head_kv, false))) return st;
    gguf_float(f, a, "attention.layer_norm_rms_epsilon", &hp->norm_eps);
    gguf_float(f, a, "rope.freq_base", &hp->rope_base);
    /* llama.cpp's converter permutes Llama's Q/K rows for interleaved RoPE. */
    hp->rope_style = hp->arch == ARCH_LLAMA ? KVF_ROPE_NORM : KVF_ROPE_NEOX;
    if (hp->arch == ARCH_GEMMA3) hp->rope_base_local = 10000.0f; /* fixed by the architecture */
    else hp->sliding_window = 0;
    int rope_dims = 0;
    if ((st = gguf_int(f, a, "rope.dimension_count", &rope_dims, false))) return st;
    /* Qwen2-VL's M-RoPE: rotary pairs on time, height, width (and a fourth, 0). */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", a);
    if (gguf_find(f, key)) {
        const struct gguf_value *ds = gguf_get_arr(f, key, GGUF_I32);
        if (!ds || ds->arr.n < 3 || ds->arr.n > 4)
            return err_set(KVF_ERR_FORMAT, "'%s' must be 3 or 4 int32 values", key);
        const int32_t *d = ds->arr.data;
        for (int i = 0; i < 3; i++) {
            if (d[i] < 0 || d[i] > 4096) return err_set(KVF_ERR_FORMAT, "'%s' holds %d", key, d[i]);
            hp->mrope[i] = d[i];
        }
        if (ds->arr.n == 4 && d[3] != 0)
            return err_set(KVF_ERR_UNSUPPORTED, "'%s': a fourth M-RoPE section (%d pairs) is not supported", key, d[3]);
    }
    const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te || te->n_dims != 2) return err_set(KVF_ERR_FORMAT, "missing or malformed tensor 'token_embd.weight'");
    if (te->ne[1] > INT32_MAX) return err_set(KVF_ERR_FORMAT, "vocabulary too large");
    hp->n_vocab = (int)te->ne[1];
    if ((st = gguf_rope_scaling(f, a, &hp->rope_scaling)) || (st = hparams_finish(hp)) ||
        (st = gguf_keys_check(f, a, hp)))
        return st;
    /* Gemma 3 27B's query_pre_attn_scalar is n_embd / n_head, not head_dim,
     * and its GGUF carries no key for it: llama.cpp knows it by the depth. */
    if (hp->arch == ARCH_GEMMA3 && hp->n_layer == 62) hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    if (rope_dims && rope_dims != hp->head_dim)
        return err_set(KVF_ERR_UNSUPPORTED, "%s.rope.dimension_count = %d: partial rotary embedding (of %d dims) is "
                       "not implemented", a, rope_dims, hp->head_dim);
    if ((st = tok_load_gguf(f, &m->tok))) return st;
    const char *name = gguf_get_str(f, "general.name");
    snprintf(m->name, sizeof m->name, "%s", name ? name : path);
    snprintf(m->source, sizeof m->source, "gguf");
    bool *bound = calloc((size_t)f->n_tensors + 1, sizeof *bound);
    if (!bound) return err_set(KVF_ERR_NOMEM, "out of memory");
    const struct tensor_src src = {.gguf = f, .bound = bound};
    const struct layout lo = {&names_gguf, "", "output.weight"};
    /* Llama 3's RoPE scaling: each pair's frequency divided by its factor. */
    struct weight freq_factors = {0};
    if (!(st = bind_all(m, &src, &lo, false)) &&
        !(st = weight_bind_vec(m, &src, &freq_factors, "rope_freqs.weight", hp->head_dim / 2, false, 0)))
        st = gguf_tensors_check(f, bound, a);
    free(bound);
    const float *ff = freq_factors.data;
    for (int i = 0; st == KVF_OK && ff && i < hp->head_dim / 2; i++)
        if (!(ff[i] > 0 && isfinite(ff[i])))
            st = err_set(KVF_ERR_FORMAT, "rope_freqs.weight[%d] is not a positive number", i);
    if (st == KVF_OK) rope_tables(m, ff);
    m->rope_freqs_given = ff != NULL;
    return st;
}

static enum kvf_status load_hf(struct kvf_model *m, const char *dir) {
    struct hf_config cfg;
    enum kvf_status st = hf_config_load(dir, &cfg);
    if (st != KVF_OK) return st;
    struct hparams *hp = &m->hp;
    if ((st = arch_parse(cfg.arch, &hp->arch))) return st;
    hp->n_layer = cfg.num_hidden_layers;
    hp->n_embd = cfg.hidden_size;
    hp->n_ff = cfg.intermediate_size;
    hp->n_head = cfg.num_attention_heads;
    hp->n_head_kv = cfg.num_key_value_heads;
    hp->head_dim = cfg.head_dim;
    hp->n_vocab = cfg.vocab_size;
    hp->n_ctx_train = cfg.max_position_embeddings;
    hp->norm_eps = cfg.rms_norm_eps;
    hp->rope_base = cfg.rope_theta;
    hp->rope_base_local = cfg.rope_local_base_freq;
    hp->rope_style = KVF_ROPE_NEOX; /* HF checkpoints are not permuted */
    hp->sliding_window = hp->arch == ARCH_GEMMA3 ? cfg.sliding_window : 0;
    hp->swa_pattern = cfg.sliding_window_pattern > 0 ? cfg.sliding_window_pattern : 6;
    memcpy(hp->mrope, cfg.mrope_section, sizeof hp->mrope);
    hp->mrope_interleaved = cfg.mrope_interleaved;
    hp->rope_scaling = cfg.rope_scaling;
    if ((st = hparams_finish(hp))) return st;
    if (hp->arch == ARCH_GEMMA3 && cfg.query_pre_attn_scalar > 0.0f)
        hp->attn_scale = 1.0f / sqrtf(cfg.query_pre_attn_scalar);
    if ((st = st_open(dir, &m->st)) || (st = tok_load_hf(dir, &m->tok))) return st;
    const char *base = strrchr(dir, '/');
    snprintf(m->name, sizeof m->name, "%s", base && base[1] ? base + 1 : dir);
    snprintf(m->source, sizeof m->source, "safetensors");
    /* LLaVA directories nest the decoder: language_model.model.* (transformers
     * < 4.52) or model.language_model.* (later); Idefics3 and SmolVLM in
     * model.text_model.*. */
    const struct tensor_src src = {.st = m->st};
    static const struct layout layouts[] = {
        {&names_hf, "model.", "lm_head.weight"},
        {&names_hf, "language_model.model.", "language_model.lm_head.weight"},
        {&names_hf, "model.language_model.", "lm_head.weight"},
        {&names_hf, "model.text_model.", "lm_head.weight"},
    };
    const struct layout *lo = &layouts[0];
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        char b[96];
        snprintf(b, sizeof b, names_hf.embd, layouts[i].prefix);
        if (tensor_exists(&src, b)) lo = &layouts[i];
    }
    if ((st = bind_all(m, &src, lo, true))) return st;
    rope_tables(m, NULL);
    return vision_load_hf(m, dir, &src);
}

/* vocab_only: the tokenizer, and whatever hyper-parameters the files give
 * (any architecture, no checks: nothing runs on them). */
static enum kvf_status load_vocab(struct kvf_model *m, const char *path, bool dir) {
    struct hparams *hp = &m->hp;
    const char *base = strrchr(path, '/'), *name = NULL, *arch = "";
    enum kvf_status st;
    struct hf_config cfg;
    if (dir) {
        if ((st = tok_load_hf(path, &m->tok))) return st;
        if (hf_config_load(path, &cfg) == KVF_OK) {
            arch = cfg.arch;
            *hp = (struct hparams){.n_layer = cfg.num_hidden_layers, .n_embd = cfg.hidden_size,
                                   .n_ff = cfg.intermediate_size, .n_head = cfg.num_attention_heads,
                                   .n_head_kv = cfg.num_key_value_heads, .head_dim = cfg.head_dim,
                                   .n_ctx_train = cfg.max_position_embeddings, .norm_eps = cfg.rms_norm_eps,
                                   .rope_base = cfg.rope_theta, .rope_base_local = cfg.rope_local_base_freq,
                                   .rope_style = KVF_ROPE_NEOX};
        }
        err_clear(); /* config.json is optional here */
        name = base && base[1] ? base + 1 : path;
    } else {
        if ((st = gguf_open(path, &m->gguf)) || (st = tok_load_gguf(m->gguf, &m->tok))) return st;
        const struct gguf_file *f = m->gguf;
        const char *a = gguf_get_str(f, "general.architecture");
        if (a) {
            arch = a;
            static const char *const keys[] = {"block_count", "embedding_length", "feed_forward_length",
                                               "attention.head_count", "attention.head_count_kv",
                                               "attention.key_length", "context_length"};
            int *const dst[] = {&hp->n_layer, &hp->n_embd, &hp->n_ff, &hp->n_head, &hp->n_head_kv, &hp->head_dim,
                                &hp->n_ctx_train};
            for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) gguf_int(f, a, keys[i], dst[i], false);
            gguf_float(f, a, "attention.layer_norm_rms_epsilon", &hp->norm_eps);
            gguf_float(f, a, "rope.freq_base", &hp->rope_base);
            err_clear();
        }
        name = gguf_get_str(f, "general.name");
        if (!name) name = path;
    }
    hp->n_vocab = tok_n_vocab(m->tok);
    snprintf(m->arch_name, sizeof m->arch_name, "%s", arch);
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->source, sizeof m->source, "%s", dir ? "safetensors" : "gguf");
    m->vocab_only = true;
    return KVF_OK;
}

enum kvf_status model_require_weights(const struct kvf_model *m, const char *what) {
    if (m && m->vocab_only)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: the model was loaded with vocab_only (tokenizer only, no weights)",
                       what);
    return KVF_OK;
}

/* "q4_1:30 f32:61": how many tensors of each stored type. */
static void describe_types(struct kvf_model *m) {
    int count[DT_COUNT] = {0};
    const struct weight *w[] = {&m->tok_embd, &m->output};
    for (int i = 0; i < 2; i++)
        if (i == 0 || m->output.data != m->tok_embd.data) count[w[i]->type]++;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct layer_weights *L = &m->layers[l];
        const struct weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof lw / sizeof *lw; i++) count[lw[i]->type]++;
    }
    size_t off = 0;
    m->weight_types[0] = '\0';
    for (int t = 0; t < DT_COUNT; t++)
        if (count[t] && off < sizeof m->weight_types)
            off += snprintf(m->weight_types + off, sizeof m->weight_types - off, "%s%s:%d", off ? " " : "",
                            dtype_get(t)->name, count[t]);
}

enum kvf_status kvf_model_load(const char *path, const struct kvf_model_params *params, struct kvf_model **out) {
    *out = NULL;
    if (!path) return err_set(KVF_ERR_INVALID_ARG, "no model path");
    struct kvf_model_params p = params ? *params : kvf_model_default_params();
    if (p.image_min_tokens < 0 || p.image_max_tokens < 0 || p.image_min_tokens > KVF_IMAGE_MAX_TOKENS ||
        p.image_max_tokens > KVF_IMAGE_MAX_TOKENS)
        return err_set(KVF_ERR_INVALID_ARG, "image tokens %d..%d: each in 0..%d (0: the model's own)",
                       p.image_min_tokens, p.image_max_tokens, KVF_IMAGE_MAX_TOKENS);
    struct stat sb;
    if (stat(path, &sb) != 0) return err_set(KVF_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct kvf_model *m = calloc(1, sizeof *m);
    if (!m) return err_set(KVF_ERR_NOMEM, "out of memory");
    const size_t len = strlen(path);
    if (S_ISDIR(sb.st_mode))
        snprintf(m->zap_path, sizeof m->zap_path, "%s/model.kvzap", path);
    else if (len > 5 && !strcmp(path + len - 5, ".gguf"))
        snprintf(m->zap_path, sizeof m->zap_path, "%.*s.kvzap", (int)(len - 5), path);
    else
        snprintf(m->zap_path, sizeof m->zap_path, "%s.kvzap", path);
    if (p.vocab_only) {
        enum kvf_status st = load_vocab(m, path, S_ISDIR(sb.st_mode));
        if (st != KVF_OK) kvf_model_free(m);
        else *out = m;
        return st;
    }
    enum kvf_status st = S_ISDIR(sb.st_mode) ? load_hf(m, path) : load_gguf(m, path);
    if (st == KVF_OK) st = model_kernels_choose(m, p.repack);
    if (st == KVF_OK && p.mmproj) {
        if (m->vision)
            st = err_set(KVF_ERR_INVALID_ARG, "'%s' carries its own vision tower; no mmproj file is needed", path);
        else
            st = vision_load_mmproj(m, p.mmproj);
    }
    if (st == KVF_OK && m->vision) st = vision_attach(m);
    if (!m->vision) m->hp.n_deepstack = 0; /* nothing makes the features without a tower */
    if (st == KVF_OK && m->vision) st = vision_limit_tokens(m->vision, p.image_min_tokens, p.image_max_tokens);
    if (st != KVF_OK) {
        kvf_model_free(m);
        return st;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%s", arch_str(m->hp.arch));
    describe_types(m);
    m->n_threads = p.n_threads > 0 ? p.n_threads : omp_get_num_procs();
    *out = m;
    return KVF_OK;
}

void kvf_model_free(struct kvf_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    tok_free(m->tok);
    vision_free(m->vision);
    if (m->gguf) gguf_close(m->gguf);
    if (m->mmproj) gguf_close(m->mmproj);
    if (m->st) st_close(m->st);
    free(m);
}

void kvf_model_get_info(const struct kvf_model *m, struct kvf_model_info *info) {
    const struct hparams *hp = &m->hp;
    const char *chat = chat_detect(tok_chat_template(m->tok));
    *info = (struct kvf_model_info){
        .arch = m->arch_name, .name = m->name, .source = m->source,
        .n_layer = hp->n_layer, .n_embd = hp->n_embd, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim, .n_ff = hp->n_ff, .n_vocab = hp->n_vocab, .n_ctx_train = hp->n_ctx_train,
        .sliding_window = hp->sliding_window, .rope_base = hp->rope_base, .rope_base_local = hp->rope_base_local,
        .norm_eps = hp->norm_eps, .rope_style = hp->rope_style, .n_params = m->n_params,
        .weight_bytes = m->weight_bytes, .weight_types = m->weight_types, .tokenizer = tok_kind(m->tok),
        .chat_template_name = chat ? chat : "none", .bos = tok_bos(m->tok), .eos = tok_eos(m->tok),
        .decode_bytes = m->decode_bytes, .kernels = m->kernels,
    };
    if (m->vision) vision_fill_info(m->vision, info);
    info->image_bidirectional = m->hp.image_bidirectional;
    memcpy(info->rope_sections, m->hp.mrope, sizeof info->rope_sections);
    static const char *const scalings[] = {"none", "linear", "llama3", "yarn"};
    info->rope_scaling = m->rope_freqs_given ? "rope_freqs" : scalings[m->hp.rope_scaling.type];
    info->rope_scaling_factor = m->hp.rope_scaling.type != ROPE_SCALING_NONE ? m->hp.rope_scaling.factor : 1.0f;
}

enum kvf_status kvf_tokenize(const struct kvf_model *m, const char *text, size_t len, int32_t *tokens, int32_t n_max,
                             bool add_bos, bool parse_special, int32_t *n_tokens) {
    if (!m || !n_tokens || (!text && len > 0) || n_max < 0 || (!tokens && n_max > 0))
        return err_set(KVF_ERR_INVALID_ARG, "kvf_tokenize: bad arguments");
    /* so that the id count fits in int32_t */
    if (len >= (size_t)INT32_MAX)
        return err_set(KVF_ERR_INVALID_ARG, "kvf_tokenize: %zu bytes of text is too long", len);
    const int32_t r = tok_encode(m->tok, text, len, tokens, n_max, add_bos, parse_special);
    if (r == INT32_MIN) return KVF_ERR_NOMEM; /* the arguments are checked: out of memory (message set) */
    *n_tokens = r < 0 ? -r : r;
    return r < 0 ? err_set(KVF_ERR_BUFFER, "kvf_tokenize: %d ids do not fit in %d", -r, n_max) : KVF_OK;
}

enum kvf_status kvf_token_to_piece(const struct kvf_model *m, int32_t token, char *buf, int32_t len,
                                   bool render_special, int32_t *n_bytes) {
    if (!m || !n_bytes || len < 0 || (!buf && len > 0))
        return err_set(KVF_ERR_INVALID_ARG, "kvf_token_to_piece: bad arguments");
    if (token < 0 || token >= tok_n_vocab(m->tok))
        return err_set(KVF_ERR_INVALID_ARG, "token id %d out of range [0, %d)", token, tok_n_vocab(m->tok));
    const int32_t r = tok_piece(m->tok, token, buf, len, render_special);
    *n_bytes = r < 0 ? -r : r;
    return r < 0 ? err_set(KVF_ERR_BUFFER, "kvf_token_to_piece: %d bytes do not fit in %d", -r, len) : KVF_OK;
}

bool kvf_token_is_eog(const struct kvf_model *m, int32_t token) { return tok_is_eog(m->tok, token); }

enum kvf_status kvf_chat_apply(const struct kvf_model *model, const char *name,
                               const struct kvf_chat_message *msgs, int n_msgs,
                               bool add_assistant_prefix, char *buf, int32_t len, int32_t *n_chars) {
    if (!n_chars) return err_set(KVF_ERR_INVALID_ARG, "kvf_chat_apply: no n_chars");
    if (!name) {
        if (!model) return err_set(KVF_ERR_INVALID_ARG, "kvf_chat_apply: no template name and no model");
        const char *tmpl = tok_chat_template(model_tokenizer(model));
        name = chat_detect(tmpl);
        if (!name)
            return err_set(KVF_ERR_UNSUPPORTED, "%s",
                           tmpl ? "the model's chat template is not one of the built-in templates"
                                : "the model has no chat template");
    }
    const int32_t r = chat_format(name, msgs, n_msgs, add_assistant_prefix, buf, len);
    if (r == INT32_MIN) return KVF_ERR_INVALID_ARG; /* chat_format set the message */
    *n_chars = r < 0 ? -r : r;
    return r < 0 ? err_set(KVF_ERR_BUFFER, "kvf_chat_apply: %d bytes do not fit in %d", -r, len) : KVF_OK;
}
