/* Hugging Face configuration files read into kvfold's terms
 * (model/hf_config.h): every field checked for its type and range, absent
 * ones taking transformers' defaults, and the keys of features kvfold does
 * not implement refused by name rather than ignored. */
#include "model/hf_config.h"

#include "core/sys.h"
#include "io/json.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Hugging Face defaults of each family's configuration class
 * (LlamaConfig, Qwen2Config, Gemma3TextConfig, Qwen3Config). */
struct hf_family {
    const char *arch;
    int vocab, hidden, inter, layers, heads, max_pos;
    int head_dim;             /* 0: hidden / heads */
    float eps, theta;
    bool tie;
};

static const struct hf_family hf_llama = {
    .arch = "llama", .vocab = 32000, .hidden = 4096, .inter = 11008, .layers = 32, .heads = 32,
    .max_pos = 2048, .head_dim = 0, .eps = 1e-6f, .theta = 10000.0f, .tie = false};
/* The Llama text config Idefics3Config and SmolVLMConfig make: rms_norm_eps 1e-5. */
static const struct hf_family hf_llama_idefics3 = {
    .arch = "llama", .vocab = 32000, .hidden = 4096, .inter = 11008, .layers = 32, .heads = 32,
    .max_pos = 2048, .head_dim = 0, .eps = 1e-5f, .theta = 10000.0f, .tie = false};
static const struct hf_family hf_qwen2 = {
    .arch = "qwen2", .vocab = 151936, .hidden = 4096, .inter = 22016, .layers = 32, .heads = 32,
    .max_pos = 32768, .head_dim = 0, .eps = 1e-6f, .theta = 10000.0f, .tie = false};
static const struct hf_family hf_qwen3 = {
    .arch = "qwen3", .vocab = 151936, .hidden = 4096, .inter = 22016, .layers = 32, .heads = 32,
    .max_pos = 32768, .head_dim = 128, .eps = 1e-6f, .theta = 10000.0f, .tie = false};
/* Qwen3VLTextConfig: Qwen3 with M-RoPE, always interleaved. */
static const struct hf_family hf_qwen3vl = {
    .arch = "qwen3", .vocab = 151936, .hidden = 4096, .inter = 22016, .layers = 32, .heads = 32,
    .max_pos = 128000, .head_dim = 128, .eps = 1e-6f, .theta = 500000.0f, .tie = false};
static const struct hf_family hf_gemma3 = {
    .arch = "gemma3", .vocab = 262208, .hidden = 2304, .inter = 9216, .layers = 26, .heads = 8,
    .max_pos = 131072, .head_dim = 256, .eps = 1e-6f, .theta = 1e6f, .tie = true};

/* Where fields are looked up: the text config, then (for a few fields that
 * multimodal configs keep at the top level) its parent. Missing required
 * fields are errors unless defaults_ok (LLaVA-1.5 text configs omit them). */
struct hf_src {
    const char *path;
    const cJSON *obj, *parent;
    bool defaults_ok;
};

static const cJSON *hf_get(const struct hf_src *c, const char *key, bool parent_too) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);
    if ((!v || cJSON_IsNull(v)) && parent_too && c->parent)
        v = cJSON_GetObjectItemCaseSensitive(c->parent, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static enum kvf_status hf_int(const struct hf_src *c, const char *key, bool required, bool parent_too,
                              int def, int *out) {
    const cJSON *v = hf_get(c, key, parent_too);
    if (!v) {
        if (required && !c->defaults_ok)
            return err_set(KVF_ERR_FORMAT, "%s: missing \"%s\"", c->path, key);
        *out = def;
        return KVF_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < INT32_MIN || v->valuedouble > INT32_MAX)
        return err_set(KVF_ERR_FORMAT, "%s: \"%s\" must be an integer", c->path, key);
    *out = (int)v->valuedouble;
    return KVF_OK;
}

static enum kvf_status hf_float(const struct hf_src *c, const char *key, float def, float *out) {
    const cJSON *v = hf_get(c, key, false);
    if (!v) {
        *out = def;
        return KVF_OK;
    }
    if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) <= FLT_MAX))
        return err_set(KVF_ERR_FORMAT, "%s: \"%s\" must be a finite number", c->path, key);
    *out = (float)v->valuedouble;
    return KVF_OK;
}

static enum kvf_status hf_bool(const struct hf_src *c, const char *key, bool parent_too, bool def,
                               bool *out) {
    const cJSON *v = hf_get(c, key, parent_too);
    if (!v) {
        *out = def;
        return KVF_OK;
    }
    if (!cJSON_IsBool(v)) return err_set(KVF_ERR_FORMAT, "%s: \"%s\" must be true or false", c->path, key);
    *out = cJSON_IsTrue(v);
    return KVF_OK;
}

/* Token ids may be an int or a list of ints (the first is used). */
static enum kvf_status hf_token(const struct hf_src *c, const char *key, int *out) {
    const cJSON *v = hf_get(c, key, true);
    *out = -1;
    if (v && cJSON_IsArray(v)) {
        v = v->child;
        if (!v) return KVF_OK;
    }
    if (!v) return KVF_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > INT32_MAX)
        return err_set(KVF_ERR_FORMAT, "%s: \"%s\" must be a non-negative integer or a list of them",
                       c->path, key);
    *out = (int)v->valuedouble;
    return KVF_OK;
}

/* M-RoPE's mrope_section: three non-negative pair counts (time, height,
 * width) within one block of RoPE parameters. */
static enum kvf_status hf_mrope(const struct hf_src *c, const cJSON *b, int out[3]) {
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(b, "mrope_section");
    if (!ms) return KVF_OK;
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) != 3)
        return err_set(KVF_ERR_FORMAT, "%s: mrope_section must be 3 integers", c->path);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, ms) {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble > 4096)
            return err_set(KVF_ERR_FORMAT, "%s: mrope_section must be 3 integers in [0, 4096]", c->path);
        out[i++] = (int)v->valuedouble;
    }
    return KVF_OK;
}

/* A number of a block of RoPE parameters; *out untouched when absent and
 * not required. */
static enum kvf_status hf_rope_num(const struct hf_src *c, const cJSON *b, const char *key, bool required,
                                   double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return err_set(KVF_ERR_FORMAT, "%s: RoPE parameters need \"%s\"", c->path, key);
        return KVF_OK;
    }
    if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) <= FLT_MAX))
        return err_set(KVF_ERR_FORMAT, "%s: RoPE parameter \"%s\" must be a finite number", c->path, key);
    *out = v->valuedouble;
    return KVF_OK;
}

/* partial_rotary_factor (at the top level or in a block of RoPE
 * parameters): only 1, every dimension rotated, is implemented. */
static enum kvf_status hf_partial_rotary(const struct hf_src *c, const cJSON *obj) {
    double partial = 1;
    const enum kvf_status st = hf_rope_num(c, obj, "partial_rotary_factor", false, &partial);
    if (st == KVF_OK && partial != 1)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g: partial rotary embedding is not "
                       "implemented", c->path, partial);
    return st;
}

/* YaRN's attention factor as transformers infers it when the config gives
 * none but DeepSeek's mscale pair: the ratio of the two (else 0, which
 * ops_rope_freqs takes as 0.1 ln(factor) + 1). */
static double yarn_mscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0; }

/* The scaling of one block of RoPE parameters, as transformers'
 * modeling_rope_utils computes it (default, linear, llama3, yarn; Qwen2-VL's
 * mrope is the default split into sections). max_pos: the config's
 * max_position_embeddings, YaRN's original context when the block has none. */
static enum kvf_status hf_rope_scaling(const struct hf_src *c, const cJSON *b, int max_pos, struct rope_scaling *sc) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(b, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
    if (type && !t) return err_set(KVF_ERR_FORMAT, "%s: rope_type must be a string", c->path);
    double factor = 0, orig = max_pos;
    enum kvf_status st = hf_partial_rotary(c, b);
    *sc = (struct rope_scaling){.type = ROPE_SCALING_NONE};
    if (st != KVF_OK || !t || !strcmp(t, "default") || !strcmp(t, "mrope")) return st;
    if (!strcmp(t, "linear")) sc->type = ROPE_SCALING_LINEAR;
    else if (!strcmp(t, "llama3")) sc->type = ROPE_SCALING_LLAMA3;
    else if (!strcmp(t, "yarn")) sc->type = ROPE_SCALING_YARN;
    else return err_set(KVF_ERR_UNSUPPORTED, "%s: RoPE scaling '%.32s' is not implemented (linear, llama3 and yarn "
                        "are)", c->path, t);
    /* absent original_max_position_embeddings: max_position_embeddings, as
     * transformers' standardisation fills it */
    if ((st = hf_rope_num(c, b, "factor", sc->type != ROPE_SCALING_YARN, &factor)) ||
        (st = hf_rope_num(c, b, "original_max_position_embeddings", false, &orig)))
        return st;
    if (factor == 0 && orig > 0) factor = max_pos / orig; /* YaRN without a factor (DeepSeek-V3) */
    sc->factor = (float)factor;
    sc->orig_ctx = orig >= 1 && orig <= INT32_MAX ? (int)orig : 0;
    if (sc->type == ROPE_SCALING_LLAMA3) {
        double lo = 0, hi = 0;
        if ((st = hf_rope_num(c, b, "low_freq_factor", true, &lo)) ||
            (st = hf_rope_num(c, b, "high_freq_factor", true, &hi)))
            return st;
        sc->low_freq_factor = (float)lo;
        sc->high_freq_factor = (float)hi;
    } else if (sc->type == ROPE_SCALING_YARN) {
        double fast = 0, slow = 0, attn = 0, ms = 0, ms_all = 0;
        if ((st = hf_rope_num(c, b, "beta_fast", false, &fast)) ||
            (st = hf_rope_num(c, b, "beta_slow", false, &slow)) ||
            (st = hf_rope_num(c, b, "attention_factor", false, &attn)) ||
            (st = hf_rope_num(c, b, "mscale", false, &ms)) ||
            (st = hf_rope_num(c, b, "mscale_all_dim", false, &ms_all)))
            return st;
        sc->beta_fast = fast ? (float)fast : 32; /* transformers: `or 32`, `or 1` */
        sc->beta_slow = slow ? (float)slow : 1;
        const cJSON *given = cJSON_GetObjectItemCaseSensitive(b, "attention_factor");
        if ((!given || cJSON_IsNull(given)) && ms && ms_all)
            attn = yarn_mscale(factor, ms) / yarn_mscale(factor, ms_all);
        sc->attn_factor = (float)attn;
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(b, "truncate");
        if (tr && !cJSON_IsBool(tr)) return err_set(KVF_ERR_FORMAT, "%s: \"truncate\" must be true or false", c->path);
        sc->no_truncate = tr && cJSON_IsFalse(tr);
    }
    return KVF_OK;
}

/* Older transformers write rope_scaling, newer ones rope_parameters (per
 * layer type for Gemma 3). The scaling of the global layers goes to *sc;
 * Gemma 3's sliding layers have none (a scaling there is refused).
 * theta/local_theta are updated when rope_parameters carries them. */
static enum kvf_status hf_rope(const struct hf_src *c, int max_pos, struct rope_scaling *sc, float *theta,
                               float *local_theta, int mrope[3]) {
    const cJSON *rs = hf_get(c, "rope_scaling", false);
    const cJSON *rp = hf_get(c, "rope_parameters", false);
    /* As transformers standardises them: rope_scaling, when given, wins
     * (read last); a model of one layer type then ignores rope_parameters
     * whole, Gemma 3 lays it over its full-attention block. */
    const cJSON *blocks[3] = {NULL, NULL, rs};
    float *targets[3] = {theta, local_theta, NULL};
    if (rp) {
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
        if (cJSON_IsObject(full)) { /* per-layer-type parameters (Gemma 3) */
            blocks[0] = full;
            blocks[1] = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
        } else if (!rs || (cJSON_IsObject(rs) && !rs->child)) {
            blocks[0] = rp;
        }
    }
    *sc = (struct rope_scaling){.type = ROPE_SCALING_NONE};
    for (int i = 0; i < 3; i++) {
        const cJSON *b = blocks[i];
        if (!b) continue;
        if (!cJSON_IsObject(b))
            return err_set(KVF_ERR_FORMAT, "%s: RoPE parameters must be an object", c->path);
        struct rope_scaling got;
        enum kvf_status st = hf_rope_scaling(c, b, max_pos, &got);
        if (st != KVF_OK) return st;
        if (i == 1 && got.type != ROPE_SCALING_NONE)
            return err_set(KVF_ERR_UNSUPPORTED, "%s: RoPE scaling of the sliding-window layers is not implemented",
                           c->path);
        if (got.type != ROPE_SCALING_NONE) *sc = got;
        if ((st = hf_mrope(c, b, mrope)) != KVF_OK) return st;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "rope_theta");
        if (t && targets[i]) {
            if (!cJSON_IsNumber(t) || !(fabs(t->valuedouble) <= FLT_MAX))
                return err_set(KVF_ERR_FORMAT, "%s: rope_theta must be a number", c->path);
            *targets[i] = (float)t->valuedouble;
        }
    }
    return KVF_OK;
}

/* Checks "layer_types" (newer transformers) against the attention layout:
 * with pattern > 0 layer i is global when (i + 1) % pattern == 0; with
 * pattern 0 every layer is alike, windowed when sliding_window > 0. */
static enum kvf_status hf_layer_types(const struct hf_src *c, int n_layers, int sliding_window,
                                      int *pattern) {
    const cJSON *lt = hf_get(c, "layer_types", false);
    if (!lt) return KVF_OK;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n_layers)
        return err_set(KVF_ERR_FORMAT, "%s: \"layer_types\" must list the %d layers", c->path, n_layers);
    int i = 0, first_global = -1;
    const cJSON *v;
    cJSON_ArrayForEach(v, lt) {
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "full_attention") != 0 &&
                                   strcmp(v->valuestring, "sliding_attention") != 0))
            return err_set(KVF_ERR_UNSUPPORTED, "%s: layer_types[%d] is not full or sliding attention",
                           c->path, i);
        if (first_global < 0 && strcmp(v->valuestring, "full_attention") == 0) first_global = i;
        i++;
    }
    /* The first global layer fixes the period (models shorter than one
     * period have none and keep the configured one). */
    if (*pattern > 0 && first_global >= 0) *pattern = first_global + 1;
    i = 0;
    cJSON_ArrayForEach(v, lt) {
        bool global = *pattern > 0 ? (i + 1) % *pattern == 0 : sliding_window == 0;
        if (global != (strcmp(v->valuestring, "full_attention") == 0))
            return err_set(KVF_ERR_UNSUPPORTED,
                           "%s: layer_types does not follow a supported local/global layout", c->path);
        i++;
    }
    return KVF_OK;
}

/* Keys of the families' configs that change the arithmetic and that
 * kvfold does not implement: refused unless absent, null or neutral. */
static enum kvf_status hf_unimplemented(const struct hf_src *c, bool gemma) {
    static const char *const zero[] = {"attn_logit_softcapping", "final_logit_softcapping", "logit_scale"};
    for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) {
        const cJSON *v = hf_get(c, zero[i], false);
        if (v && !(cJSON_IsNumber(v) && v->valuedouble == 0))
            return err_set(KVF_ERR_UNSUPPORTED, "%s: \"%s\" is set: kvfold does not implement it", c->path, zero[i]);
    }
    enum kvf_status st = hf_partial_rotary(c, c->obj);
    const cJSON *mlp_bias = hf_get(c, "mlp_bias", false);
    if (st == KVF_OK && mlp_bias && !cJSON_IsFalse(mlp_bias))
        return err_set(KVF_ERR_UNSUPPORTED, "%s: \"mlp_bias\" is set: kvfold does not implement it", c->path);
    /* The activation each family's decoder computes */
    const char *key = gemma ? "hidden_activation" : "hidden_act", *want = gemma ? "gelu_pytorch_tanh" : "silu";
    const cJSON *act = hf_get(c, key, false);
    if (st == KVF_OK && act && !(cJSON_IsString(act) && !strcmp(act->valuestring, want)))
        return err_set(KVF_ERR_UNSUPPORTED, "%s: \"%s\" is not \"%s\", the activation kvfold's decoder computes",
                       c->path, key, want);
    return st;
}

static enum kvf_status hf_fill(const struct hf_src *c, const struct hf_family *fam, const char *model_type,
                               struct hf_config *cfg) {
    enum kvf_status st;
    bool gemma = fam == &hf_gemma3, qwen = fam == &hf_qwen2 || fam == &hf_qwen3 || fam == &hf_qwen3vl;
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->arch, sizeof cfg->arch, "%s", fam->arch);

#define TRY(x) do { if ((st = (x)) != KVF_OK) return st; } while (0)
    TRY(hf_int(c, "hidden_size", true, false, fam->hidden, &cfg->hidden_size));
    TRY(hf_int(c, "intermediate_size", true, false, fam->inter, &cfg->intermediate_size));
    TRY(hf_int(c, "num_hidden_layers", true, false, fam->layers, &cfg->num_hidden_layers));
    TRY(hf_int(c, "num_attention_heads", true, false, fam->heads, &cfg->num_attention_heads));
    TRY(hf_int(c, "vocab_size", true, true, fam->vocab, &cfg->vocab_size));
    TRY(hf_int(c, "num_key_value_heads", false, false, cfg->num_attention_heads, &cfg->num_key_value_heads));
    TRY(hf_int(c, "max_position_embeddings", false, false, fam->max_pos, &cfg->max_position_embeddings));

    const char *sizes[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                           "vocab_size", "num_key_value_heads", "max_position_embeddings"};
    const int vals[] = {cfg->hidden_size, cfg->intermediate_size, cfg->num_hidden_layers,
                        cfg->num_attention_heads, cfg->vocab_size, cfg->num_key_value_heads,
                        cfg->max_position_embeddings};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (vals[i] <= 0)
            return err_set(KVF_ERR_FORMAT, "%s: %s = %d must be positive", c->path, sizes[i], vals[i]);

    bool has_head_dim = hf_get(c, "head_dim", false) != NULL;
    TRY(hf_int(c, "head_dim", false, false, fam->head_dim, &cfg->head_dim));
    if (!has_head_dim && fam->head_dim == 0) {
        if (cfg->hidden_size % cfg->num_attention_heads != 0)
            return err_set(KVF_ERR_FORMAT, "%s: %d attention heads do not divide hidden_size %d", c->path,
                           cfg->num_attention_heads, cfg->hidden_size);
        cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
    }
    if (cfg->head_dim <= 0)
        return err_set(KVF_ERR_FORMAT, "%s: head_dim = %d must be positive", c->path, cfg->head_dim);
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return err_set(KVF_ERR_FORMAT, "%s: %d key/value heads do not divide %d attention heads", c->path,
                       cfg->num_key_value_heads, cfg->num_attention_heads);

    TRY(hf_float(c, "rms_norm_eps", fam->eps, &cfg->rms_norm_eps));
    TRY(hf_float(c, "rope_theta", fam->theta, &cfg->rope_theta));
    /* Non-Gemma families use one RoPE base and scale scores by 1/sqrt(head_dim);
     * filling the Gemma fields that way lets the decoder treat all alike. */
    cfg->rope_local_base_freq = gemma ? 10000.0f : cfg->rope_theta;
    cfg->query_pre_attn_scalar = gemma ? 256.0f : (float)cfg->head_dim;
    if (gemma) {
        TRY(hf_float(c, "rope_local_base_freq", cfg->rope_local_base_freq, &cfg->rope_local_base_freq));
        TRY(hf_float(c, "query_pre_attn_scalar", cfg->query_pre_attn_scalar, &cfg->query_pre_attn_scalar));
    }
    TRY(hf_rope(c, cfg->max_position_embeddings, &cfg->rope_scaling, &cfg->rope_theta,
                gemma ? &cfg->rope_local_base_freq : NULL, cfg->mrope_section));
    if (fam == &hf_qwen3vl) {
        /* transformers ignores mrope_interleaved: Qwen3-VL always interleaves. */
        cfg->mrope_interleaved = true;
        if (!cfg->mrope_section[0] && !cfg->mrope_section[1] && !cfg->mrope_section[2])
            memcpy(cfg->mrope_section, (const int[3]){24, 20, 20}, sizeof cfg->mrope_section);
    }
    TRY(hf_unimplemented(c, gemma));
    if (!(cfg->rms_norm_eps > 0) || !(cfg->rope_theta > 0) || !(cfg->rope_local_base_freq > 0) ||
        !(cfg->query_pre_attn_scalar > 0))
        return err_set(KVF_ERR_FORMAT,
                       "%s: rms_norm_eps, rope bases and query_pre_attn_scalar must be positive", c->path);

    /* sliding_window 0 means none; pattern 0 means every layer has the same
     * attention (windowed when sliding_window > 0, as in Mistral). */
    if (gemma) {
        TRY(hf_int(c, "sliding_window", false, false, 4096, &cfg->sliding_window));
        /* transformers >= 4.53 writes it with a leading underscore. */
        const char *key = hf_get(c, "sliding_window_pattern", false) ? "sliding_window_pattern"
                                                                      : "_sliding_window_pattern";
        TRY(hf_int(c, key, false, false, 6, &cfg->sliding_window_pattern));
        if (cfg->sliding_window_pattern <= 0)
            return err_set(KVF_ERR_FORMAT, "%s: sliding_window_pattern must be positive", c->path);
    } else if (strcmp(model_type, "mistral") == 0) {
        TRY(hf_int(c, "sliding_window", false, false, 0, &cfg->sliding_window));
    } else if (qwen) {
        bool use_sw;
        TRY(hf_bool(c, "use_sliding_window", false, false, &use_sw));
        if (use_sw)
            return err_set(KVF_ERR_UNSUPPORTED, "%s: Qwen's use_sliding_window is not supported", c->path);
    }
    if (cfg->sliding_window < 0)
        return err_set(KVF_ERR_FORMAT, "%s: sliding_window must not be negative", c->path);
    TRY(hf_layer_types(c, cfg->num_hidden_layers, cfg->sliding_window, &cfg->sliding_window_pattern));

    TRY(hf_bool(c, "tie_word_embeddings", true, fam->tie, &cfg->tie_word_embeddings));
    /* Qwen2 always has q/k/v biases; its config has no switch for them. */
    if (fam == &hf_qwen2) cfg->attention_bias = true;
    else TRY(hf_bool(c, "attention_bias", false, false, &cfg->attention_bias));
    /* Elsewhere the switch adds biases to q, k, v and the output projection,
     * which kvfold's decoder does not have: refused rather than ignored. */
    if (fam != &hf_qwen2 && cfg->attention_bias)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: \"attention_bias\" is set: kvfold does not implement it", c->path);
    TRY(hf_token(c, "bos_token_id", &cfg->bos_token_id));
    TRY(hf_token(c, "eos_token_id", &cfg->eos_token_id));
#undef TRY
    return KVF_OK;
}

static const struct hf_family *hf_family_of(const char *model_type) {
    if (!strcmp(model_type, "llama") || !strcmp(model_type, "mistral")) return &hf_llama;
    if (!strcmp(model_type, "qwen2") || !strcmp(model_type, "qwen2_vl_text") || !strcmp(model_type, "qwen2_5_vl_text"))
        return &hf_qwen2;
    if (!strcmp(model_type, "gemma3_text")) return &hf_gemma3;
    if (!strcmp(model_type, "qwen3")) return &hf_qwen3;
    if (!strcmp(model_type, "qwen3_vl_text")) return &hf_qwen3vl;
    return NULL;
}

enum kvf_status hf_config_load(const char *path, struct hf_config *cfg) {
    if (!path || !cfg) return err_set(KVF_ERR_INVALID_ARG, "hf_config_load: NULL argument");
    char *file = sys_path_is_dir(path) ? sys_path_join(path, "config.json") : strdup(path);
    if (!file) return err_set(KVF_ERR_NOMEM, "out of memory");
    cJSON *root = NULL;
    enum kvf_status st = json_load_object(file, &root);
    if (st) goto done;
    struct hf_src src = {file, root, NULL, false};
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt)) {
        st = err_set(KVF_ERR_FORMAT, "%s: missing or non-string \"model_type\"", file);
        goto done;
    }
    const char *model_type = mt->valuestring;
    /* Multimodal configs nest the decoder's config in text_config; transformers
     * fills it with the text class defaults, so missing fields are fine there. */
    const bool idefics3 = !strcmp(model_type, "idefics3") || !strcmp(model_type, "smolvlm");
    const char *nested_default = !strcmp(model_type, "llava") || idefics3 ? "llama"
                                 : !strcmp(model_type, "gemma3") ? "gemma3_text"
                                 : !strcmp(model_type, "qwen2_vl") ? "qwen2_vl_text"
                                 : !strcmp(model_type, "qwen2_5_vl") ? "qwen2_5_vl_text"
                                 : !strcmp(model_type, "qwen3_vl") ? "qwen3_vl_text" : NULL;
    /* Qwen2-VL configs as first published keep the decoder's keys at the top. */
    const bool top_level = nested_default && !strncmp(model_type, "qwen2", 5) &&
                           !cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (top_level) model_type = nested_default;
    else if (nested_default) {
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (tc && !cJSON_IsObject(tc)) {
            st = err_set(KVF_ERR_FORMAT, "%s: \"text_config\" is not an object", file);
            goto done;
        }
        const cJSON *tmt = tc ? cJSON_GetObjectItemCaseSensitive(tc, "model_type") : NULL;
        if (tmt && !cJSON_IsString(tmt)) {
            st = err_set(KVF_ERR_FORMAT, "%s: text_config.model_type is not a string", file);
            goto done;
        }
        model_type = tmt ? tmt->valuestring : nested_default;
        src = (struct hf_src){file, tc, root, true};
    }
    const struct hf_family *fam = hf_family_of(model_type);
    if (!fam) {
        st = err_set(KVF_ERR_UNSUPPORTED,
                     "%s: model_type '%.64s' is not supported (llama, mistral, qwen2, qwen3, gemma3_text, "
                     "gemma3, llava, qwen2_vl, qwen2_5_vl, qwen3_vl, idefics3, smolvlm)", file, model_type);
        goto done;
    }
    if (idefics3 && fam == &hf_llama) fam = &hf_llama_idefics3;
    st = hf_fill(&src, fam, model_type, cfg);
done:
    cJSON_Delete(root);
    free(file);
    return st;
}

/* ------------------- vision_config (LLaVA, Gemma 3, Qwen2-VL, Qwen2.5-VL) -- */

static enum kvf_status hf_str(const struct hf_src *c, const char *key, const char *def, char *out, size_t n) {
    const cJSON *v = hf_get(c, key, false);
    if (v && !cJSON_IsString(v)) return err_set(KVF_ERR_FORMAT, "%s: \"%s\" must be a string", c->path, key);
    snprintf(out, n, "%s", v ? v->valuestring : def);
    return KVF_OK;
}

static enum kvf_status hf_float3(const struct hf_src *c, const char *key, const float def[3], float out[3]) {
    const cJSON *v = hf_get(c, key, false);
    memcpy(out, def, 3 * sizeof(float));
    if (!v) return KVF_OK;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3)
        return err_set(KVF_ERR_FORMAT, "%s: \"%s\" must be an array of 3 numbers", c->path, key);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsNumber(e) || !(fabs(e->valuedouble) <= FLT_MAX))
            return err_set(KVF_ERR_FORMAT, "%s: \"%s\" must hold finite numbers", c->path, key);
        out[i++] = (float)e->valuedouble;
    }
    return KVF_OK;
}

/* Qwen2-VL's image processor bounds: min_pixels / max_pixels, or (newer
 * transformers) size.shortest_edge / size.longest_edge, in pixels. */
static enum kvf_status hf_pixels(const struct hf_src *p, int64_t *min, int64_t *max) {
    const cJSON *size = hf_get(p, "size", false);
    const struct hf_src sz = {p->path, cJSON_IsObject(size) ? size : NULL, NULL, true};
    const char *keys[2][2] = {{"min_pixels", "shortest_edge"}, {"max_pixels", "longest_edge"}};
    int64_t *out[2] = {min, max};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = hf_get(p, keys[k][0], false);
        if (!v && sz.obj) v = hf_get(&sz, keys[k][1], false);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e9 || v->valuedouble != floor(v->valuedouble))
            return err_set(KVF_ERR_FORMAT, "%s: %s must be a pixel count in 1..1e9", p->path, keys[k][0]);
        *out[k] = (int64_t)v->valuedouble;
    }
    if (*min > *max) return err_set(KVF_ERR_FORMAT, "%s: min_pixels %lld over max_pixels %lld", p->path,
                                    (long long)*min, (long long)*max);
    return KVF_OK;
}

/* The longest_edge of one of the processor's size dicts (size, max_image_size). */
static enum kvf_status hf_longest_edge(const struct hf_src *p, const char *key, int def, int *out) {
    const cJSON *d = hf_get(p, key, false);
    if (d && !cJSON_IsObject(d)) return err_set(KVF_ERR_FORMAT, "%s: \"%s\" must be an object", p->path, key);
    const struct hf_src sz = {p->path, d, NULL, true};
    enum kvf_status st = d ? hf_int(&sz, "longest_edge", false, false, def, out) : KVF_OK;
    if (!d) *out = def;
    if (st == KVF_OK && (*out <= 0 || *out > 4096))
        st = err_set(KVF_ERR_UNSUPPORTED, "%s: %s.longest_edge %d (1..4096)", p->path, key, *out);
    return st;
}

/* Idefics3ImageProcessor's (SmolVLMImageProcessor's) settings, with their
 * class defaults; the steps kvfold always runs must not be switched off. */
static enum kvf_status hf_idefics3_processor(const struct hf_src *p, struct hf_vision_config *cfg) {
    static const char *const steps[] = {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"};
    enum kvf_status st = KVF_OK;
    for (size_t i = 0; i < sizeof steps / sizeof *steps && st == KVF_OK; i++) {
        bool on;
        if ((st = hf_bool(p, steps[i], false, true, &on)) == KVF_OK && !on)
            st = err_set(KVF_ERR_UNSUPPORTED, "%s: \"%s\" is false: kvfold always runs that step", p->path, steps[i]);
    }
    float rescale;
    if (st || (st = hf_float(p, "rescale_factor", 1.0f / 255.0f, &rescale)) ||
        (st = hf_bool(p, "do_image_splitting", false, true, &cfg->split)) ||
        (st = hf_int(p, "resample", false, false, 1, &cfg->resample)) ||
        (st = hf_longest_edge(p, "size", 4 * 364, &cfg->longest_edge)) ||
        (st = hf_longest_edge(p, "max_image_size", 364, &cfg->tile)))
        return st;
    if (fabsf(rescale - 1.0f / 255.0f) > 1e-9f)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: rescale_factor %g (kvfold scales by 1/255)", p->path, rescale);
    return KVF_OK;
}

/* CLIP's normalisation, the default of LLaVA's and Qwen's processors. */
static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
static const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};

/* What Qwen2-VL's and Qwen2.5-VL's vision configs share, with
 * transformers' defaults, and their image processor's class defaults. */
static enum kvf_status hf_qwen_vision(const struct hf_src *v, struct hf_vision_config *cfg) {
    memcpy(cfg->image_mean, clip_mean, sizeof clip_mean);
    memcpy(cfg->image_std, clip_std, sizeof clip_std);
    cfg->layer_norm_eps = 1e-6f;
    cfg->rope_theta = 10000.0f;
    cfg->min_pixels = 56 * 56;
    cfg->max_pixels = 28 * 28 * 1280;
    enum kvf_status st;
    if ((st = hf_int(v, "depth", false, false, 32, &cfg->num_hidden_layers)) ||
        (st = hf_int(v, "num_heads", false, false, 16, &cfg->num_attention_heads)) ||
        (st = hf_int(v, "patch_size", false, false, 14, &cfg->patch_size)) ||
        (st = hf_int(v, "spatial_merge_size", false, false, 2, &cfg->spatial_merge_size)))
        return st;
    return hf_int(v, "temporal_patch_size", false, false, 2, &cfg->temporal_patch_size);
}

/* Qwen2-VL's and Qwen3-VL's towers: every layer attends over the whole
 * image (the window, a merge unit, is never used). */
static void hf_qwen_no_windows(struct hf_vision_config *cfg) {
    cfg->window_size = cfg->patch_size * cfg->spatial_merge_size;
    for (int l = 0; l < 256; l++) cfg->full_attention[l] = true;
}

/* deepstack_visual_indexes (default 8, 16, 24): distinct layers in
 * ascending order, each within the tower. */
static enum kvf_status hf_deepstack(const struct hf_src *v, struct hf_vision_config *cfg) {
    const cJSON *a = hf_get(v, "deepstack_visual_indexes", false);
    if (!a) {
        static const int def[] = {8, 16, 24};
        cfg->n_deepstack = 3;
        memcpy(cfg->deepstack, def, sizeof def);
    } else {
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > HF_MAX_DEEPSTACK)
            return err_set(KVF_ERR_FORMAT, "%s: deepstack_visual_indexes must be a list of at most %d layers", v->path,
                           HF_MAX_DEEPSTACK);
        cfg->n_deepstack = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                e->valuedouble > 4096)
                return err_set(KVF_ERR_FORMAT, "%s: deepstack_visual_indexes holds a non-layer", v->path);
            cfg->deepstack[cfg->n_deepstack++] = (int)e->valuedouble;
        }
    }
    for (int i = 0; i < cfg->n_deepstack; i++)
        if (cfg->deepstack[i] >= cfg->num_hidden_layers || (i > 0 && cfg->deepstack[i] <= cfg->deepstack[i - 1]))
            return err_set(KVF_ERR_FORMAT, "%s: deepstack_visual_indexes must rise through the tower's %d layers",
                           v->path, cfg->num_hidden_layers);
    return KVF_OK;
}

/* The video processor's pixel bounds, where transformers' video processor
 * loading finds them: processor_config.json's "video_processor", else
 * video_preprocessor_config.json, else preprocessor_config.json (the image
 * processor's file, whose bounds then hold for videos too); absent,
 * Qwen2VLVideoProcessor's own (per frame), or Qwen3VLVideoProcessor's (for
 * all frames together). */
static enum kvf_status hf_video_pixels(const char *dir, struct hf_vision_config *cfg) {
    static const char *const files[] = {"processor_config.json", "video_preprocessor_config.json",
                                        "preprocessor_config.json"};
    const int64_t unit = cfg->qwen3vl ? 32 * 32 : 28 * 28;
    cfg->video_min_pixels = 128 * unit;
    cfg->video_max_pixels = 768 * unit;
    cfg->video_max_tokens = 768;
    for (int i = 0; i < 3; i++) {
        char *path = sys_path_join(dir, files[i]);
        if (!path) return err_set(KVF_ERR_NOMEM, "out of memory");
        cJSON *root = NULL;
        const bool exists = access(path, F_OK) == 0;
        enum kvf_status st = exists ? json_load_object(path, &root) : KVF_OK;
        const cJSON *obj = i > 0 ? root : cJSON_GetObjectItemCaseSensitive(root, "video_processor");
        const bool found = st == KVF_OK && cJSON_IsObject(obj);
        if (found) {
            const struct hf_src p = {path, obj, NULL, true};
            st = hf_pixels(&p, &cfg->video_min_pixels, &cfg->video_max_pixels);
            /* Qwen3VLVideoProcessor's per-frame cap (null: off) */
            const cJSON *cap = hf_get(&p, "cap_pixels_per_frame", false);
            if (!st && cfg->qwen3vl && cap && !cJSON_IsNull(cap))
                st = hf_bool(&p, "cap_pixels_per_frame", false, false, &cfg->video_cap);
            if (!st && cfg->qwen3vl)
                st = hf_int(&p, "max_video_tokens", false, false, cfg->video_max_tokens, &cfg->video_max_tokens);
            if (!st && (cfg->video_max_tokens <= 0 || cfg->video_max_tokens > (1 << 20)))
                st = err_set(KVF_ERR_FORMAT, "%s: max_video_tokens %d out of range", path, cfg->video_max_tokens);
        }
        cJSON_Delete(root);
        free(path);
        if (found || st != KVF_OK) return st;
    }
    return KVF_OK;
}

enum kvf_status hf_vision_config_load(const char *dir, struct hf_vision_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    char *file = sys_path_join(dir, "config.json");
    if (!file) return err_set(KVF_ERR_NOMEM, "out of memory");
    cJSON *root = NULL;
    enum kvf_status st = json_load_object(file, &root);
    if (st) goto done;
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(root, "vision_config");
    if (vc && !cJSON_IsObject(vc)) {
        st = err_set(KVF_ERR_FORMAT, "%s: \"vision_config\" is not an object", file);
        goto done;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    cfg->gemma3 = cJSON_IsString(mt) && !strcmp(mt->valuestring, "gemma3");
    cfg->qwen25vl = cJSON_IsString(mt) && !strcmp(mt->valuestring, "qwen2_5_vl");
    cfg->qwen2vl = cJSON_IsString(mt) && !strcmp(mt->valuestring, "qwen2_vl");
    cfg->qwen3vl = cJSON_IsString(mt) && !strcmp(mt->valuestring, "qwen3_vl");
    cfg->idefics3 = cJSON_IsString(mt) && (!strcmp(mt->valuestring, "idefics3") || !strcmp(mt->valuestring, "smolvlm"));
    const bool qwen = cfg->qwen2vl || cfg->qwen25vl || cfg->qwen3vl;
    cfg->present = vc || (cJSON_IsString(mt) && !strcmp(mt->valuestring, "llava")) || cfg->gemma3 || qwen ||
                   cfg->idefics3;
    if (!cfg->present) goto done;
    struct hf_src v = {file, vc ? vc : root, NULL, true}, top = {file, root, NULL, true};
    if (qwen && (st = hf_qwen_vision(&v, cfg))) goto done;
    if (cfg->qwen3vl) {
        /* Qwen3VLVisionConfig; its image processor is Qwen2-VL's, whose
         * class defaults the checkpoints override in preprocessor_config.json. */
        if ((st = hf_int(&v, "depth", false, false, 27, &cfg->num_hidden_layers)) ||
            (st = hf_int(&v, "patch_size", false, false, 16, &cfg->patch_size)) ||
            (st = hf_int(&v, "hidden_size", false, false, 1152, &cfg->hidden_size)) ||
            (st = hf_int(&v, "intermediate_size", false, false, 4304, &cfg->intermediate_size)) ||
            (st = hf_int(&v, "out_hidden_size", false, false, 3584, &cfg->out_hidden_size)) ||
            (st = hf_int(&v, "num_position_embeddings", false, false, 2304, &cfg->num_position_embeddings)) ||
            (st = hf_str(&v, "hidden_act", "gelu_pytorch_tanh", cfg->hidden_act, sizeof cfg->hidden_act)) ||
            (st = hf_deepstack(&v, cfg)))
            goto done;
        hf_qwen_no_windows(cfg);
        goto preprocessor;
    }
    if (cfg->qwen2vl) {
        /* Qwen2VLVisionConfig: embed_dim is the tower's width, hidden_size the decoder's. */
        int ratio = 4;
        if ((st = hf_int(&v, "embed_dim", false, false, 1280, &cfg->hidden_size)) ||
            (st = hf_int(&v, "mlp_ratio", false, false, 4, &ratio)) ||
            (st = hf_int(&v, "hidden_size", false, false, 3584, &cfg->out_hidden_size)) ||
            (st = hf_str(&v, "hidden_act", "quick_gelu", cfg->hidden_act, sizeof cfg->hidden_act)))
            goto done;
        if (ratio <= 0 || ratio > 64 || cfg->hidden_size > (1 << 20)) {
            st = err_set(KVF_ERR_FORMAT, "%s: vision mlp_ratio %d out of range", file, ratio);
            goto done;
        }
        cfg->intermediate_size = cfg->hidden_size * ratio;
        hf_qwen_no_windows(cfg);
        goto preprocessor;
    }
    if (cfg->qwen25vl) {
        if ((st = hf_int(&v, "hidden_size", false, false, 1280, &cfg->hidden_size)) ||
            (st = hf_int(&v, "intermediate_size", false, false, 3420, &cfg->intermediate_size)) ||
            (st = hf_int(&v, "window_size", false, false, 112, &cfg->window_size)) ||
            (st = hf_int(&v, "out_hidden_size", false, false, 3584, &cfg->out_hidden_size)) ||
            (st = hf_int(&v, "tokens_per_second", false, false, 4, &cfg->tokens_per_second)) ||
            (st = hf_str(&v, "hidden_act", "silu", cfg->hidden_act, sizeof cfg->hidden_act)))
            goto done;
        const cJSON *rp = hf_get(&v, "rope_parameters", false), *th = cJSON_IsObject(rp) ?
            cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") : NULL;
        if (cJSON_IsNumber(th) && th->valuedouble > 0 && th->valuedouble <= FLT_MAX)
            cfg->rope_theta = (float)th->valuedouble;
        const cJSON *fa = hf_get(&v, "fullatt_block_indexes", false);
        static const int def_full[] = {7, 15, 23, 31};
        if (!fa) {
            for (size_t i = 0; i < sizeof def_full / sizeof *def_full; i++) cfg->full_attention[def_full[i]] = true;
        } else if (!cJSON_IsArray(fa)) {
            st = err_set(KVF_ERR_FORMAT, "%s: fullatt_block_indexes must be a list of layers", file);
            goto done;
        } else {
            const cJSON *e;
            cJSON_ArrayForEach(e, fa) {
                if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= 256 ||
                    e->valuedouble != floor(e->valuedouble)) {
                    st = err_set(KVF_ERR_FORMAT, "%s: fullatt_block_indexes holds a layer outside 0..255", file);
                    goto done;
                }
                cfg->full_attention[(int)e->valuedouble] = true;
            }
        }
        cfg->feature_layer = -1;
        goto preprocessor;
    }
    if (cfg->gemma3 || cfg->idefics3) {
        /* SigLIP: Gemma3Config's so400m at 896 px, Idefics3VisionConfig's
         * (SmolVLMVisionConfig's, the same) at 224 px, unless told; the
         * processors' 0.5 normalisation. The whole tower runs
         * (last_hidden_state). */
        static const float half[3] = {0.5f, 0.5f, 0.5f};
        const bool g = cfg->gemma3;
        memcpy(cfg->image_mean, half, sizeof half);
        memcpy(cfg->image_std, half, sizeof half);
        if ((st = hf_int(&v, "hidden_size", false, false, 1152, &cfg->hidden_size)) ||
            (st = hf_int(&v, "intermediate_size", false, false, g ? 4304 : 3072, &cfg->intermediate_size)) ||
            (st = hf_int(&v, "num_hidden_layers", false, false, g ? 27 : 12, &cfg->num_hidden_layers)) ||
            (st = hf_int(&v, "num_attention_heads", false, false, 16, &cfg->num_attention_heads)) ||
            (st = hf_int(&v, "image_size", false, false, g ? 896 : 224, &cfg->image_size)) ||
            (st = hf_int(&v, "patch_size", false, false, g ? 14 : 32, &cfg->patch_size)) ||
            (st = hf_float(&v, "layer_norm_eps", 1e-6f, &cfg->layer_norm_eps)) ||
            (st = hf_str(&v, "hidden_act", "gelu_pytorch_tanh", cfg->hidden_act, sizeof cfg->hidden_act)) ||
            (st = g ? hf_int(&top, "mm_tokens_per_image", false, false, 256, &cfg->mm_tokens_per_image)
                    : hf_int(&top, "scale_factor", false, false, 2, &cfg->scale_factor)))
            goto done;
        cfg->feature_layer = -1;
        goto preprocessor;
    }
    /* LlavaConfig builds CLIP ViT-L/14-336 when vision_config is absent; a
     * given dict is completed with CLIPVisionConfig's defaults. */
    const bool vit_l = vc == NULL;
    const cJSON *fl = hf_get(&top, "vision_feature_layer", false);
    if (fl && !cJSON_IsNumber(fl)) {
        st = err_set(KVF_ERR_UNSUPPORTED,
                     "%s: vision_feature_layer must be one integer (several layers are not supported)", file);
        goto done;
    }
    if ((st = hf_int(&v, "hidden_size", false, false, vit_l ? 1024 : 768, &cfg->hidden_size)) ||
        (st = hf_int(&v, "intermediate_size", false, false, vit_l ? 4096 : 3072, &cfg->intermediate_size)) ||
        (st = hf_int(&v, "num_hidden_layers", false, false, vit_l ? 24 : 12, &cfg->num_hidden_layers)) ||
        (st = hf_int(&v, "num_attention_heads", false, false, vit_l ? 16 : 12, &cfg->num_attention_heads)) ||
        (st = hf_int(&v, "image_size", false, false, vit_l ? 336 : 224, &cfg->image_size)) ||
        (st = hf_int(&v, "patch_size", false, false, vit_l ? 14 : 32, &cfg->patch_size)) ||
        (st = hf_float(&v, "layer_norm_eps", 1e-5f, &cfg->layer_norm_eps)) ||
        (st = hf_str(&v, "hidden_act", "quick_gelu", cfg->hidden_act, sizeof cfg->hidden_act)) ||
        (st = hf_int(&top, "vision_feature_layer", false, false, -2, &cfg->feature_layer)) ||
        (st = hf_str(&top, "vision_feature_select_strategy", "default", cfg->select_strategy,
                     sizeof cfg->select_strategy)) ||
        (st = hf_str(&top, "projector_hidden_act", "gelu", cfg->projector_act, sizeof cfg->projector_act)))
        goto done;
    const cJSON *pb = hf_get(&top, "multimodal_projector_bias", false);
    cfg->projector_bias = !pb || cJSON_IsTrue(pb);
    memcpy(cfg->image_mean, clip_mean, sizeof clip_mean);
    memcpy(cfg->image_std, clip_std, sizeof clip_std);
preprocessor:;
    /* The image processor's normalisation lives in preprocessor_config.json. */
    const float def_mean[3] = {cfg->image_mean[0], cfg->image_mean[1], cfg->image_mean[2]};
    const float def_std[3] = {cfg->image_std[0], cfg->image_std[1], cfg->image_std[2]};
    char *pre = sys_path_join(dir, "preprocessor_config.json");
    if (!pre) {
        st = err_set(KVF_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (access(pre, F_OK) == 0) {
        cJSON *proot = NULL;
        st = json_load_object(pre, &proot);
        if (!st) {
            struct hf_src p = {pre, proot, NULL, true};
            if (!(st = hf_float3(&p, "image_mean", def_mean, cfg->image_mean)))
                st = hf_float3(&p, "image_std", def_std, cfg->image_std);
            if (!st && qwen) st = hf_pixels(&p, &cfg->min_pixels, &cfg->max_pixels);
            if (!st && cfg->idefics3) st = hf_idefics3_processor(&p, cfg);
        }
        cJSON_Delete(proot);
    } else if (cfg->idefics3) {
        st = hf_idefics3_processor(&(struct hf_src){pre, NULL, NULL, true}, cfg);
    }
    free(pre);
    if (!st && qwen) st = hf_video_pixels(dir, cfg);
done:
    cJSON_Delete(root);
    free(file);
    return st;
}
