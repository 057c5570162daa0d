/* Vision-language model loading.
 *
 * LLaVA-1.5-7B with its real shapes, written as sparse files whose matrices
 * are holes (no disk space, never read): llava-v1.5-7b.Q4_K_M.gguf +
 * mmproj-model-f16.gguf as llama.cpp ships them, and the
 * llava-hf/llava-1.5-7b-hf directory (three shards). Every name, shape, type
 * and offset the loaders check is exercised without 7 GB of weights. The
 * same for Gemma-3-4B-it as llama.cpp ships it (gemma-3-4b-it-Q4_K_M.gguf +
 * mmproj-model-f16.gguf: SigLIP so400m at 896 px, 256 pooled tokens).
 *
 * Then tiny files with real data: a vision tower that loads and encodes (both
 * of llama.cpp's fc1/fc2 namings give the same logits), and mmproj files
 * broken one way each, which must fail with a clear status and never crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/quant.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "kvfold.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers -- */

static char tmp_dir[512];

/* The sparse files' matrices are holes: repacking them at load would read
 * and copy gigabytes of zeros, so every load here keeps the memory map. */
static struct kvf_model_params shape_params(void) {
    struct kvf_model_params p = kvf_model_default_params();
    p.repack = false;
    return p;
}
static struct kvf_model_params np; /* shape_params(), for loads without other parameters */

static int group_setup(void **state) {
    (void)state;
    np = shape_params();
    snprintf(tmp_dir, sizeof tmp_dir, "%s/llava_shapes_XXXXXX", KVF_TEST_TMP);
    return mkdtemp(tmp_dir) ? 0 : -1;
}

/* Removes what is inside dir (files and nested directories). */
static void tree_clean(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            tree_clean(p);
            rmdir(p);
        } else {
            unlink(p);
        }
    }
    closedir(d);
}

/* Each test starts from an empty directory, even after a failed one: a
 * failed 7B test must not leave 4 GB (apparent) files behind. */
static int test_teardown(void **state) {
    (void)state;
    tree_clean(tmp_dir);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    tree_clean(tmp_dir);
    rmdir(tmp_dir);
    return 0;
}

/* Rotates through a few buffers so that several results can be used together. */
static const char *tmp_path(const char *name) {
    static char p[8][1024];
    static int next;
    char *r = p[next++ % 8];
    snprintf(r, sizeof p[0], "%s/%s", tmp_dir, name);
    return r;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

#define assert_ok(expr)                                                                                            \
    do {                                                                                                           \
        const enum kvf_status st_ = (expr);                                                                        \
        if (st_ != KVF_OK) print_error("%s: %s\n", #expr, kvf_last_error());                                      \
        assert_int_equal(st_, KVF_OK);                                                                             \
    } while (0)

/* Bytes the file really occupies on disk, and its apparent size. */
static void file_sizes(const char *path, double *disk, double *apparent) {
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    *disk = (double)sb.st_blocks * 512.0;
    *apparent = (double)sb.st_size;
}

/* Deterministic values: each tensor's come from its own seed, so that two
 * files storing one tensor under different names hold the same numbers. */
static uint64_t seed_of(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static float rng_uniform(uint64_t *s) { /* splitmix64 -> [-1, 1) */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* -------------------------------------------------------- GGUF writing -- */

/* Adds a tensor with ne[0] = row length. Matrices of a sparse file are holes;
 * vectors always hold data (norms must be finite and are small). Values:
 * vectors 1 +- 0.1, matrices +- 0.1, drawn from seed_of(key). */
static void gguf_add(struct gguf_writer *w, const char *name, const char *key, enum dtype type, int n_dims,
                     int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, bool holes) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    if (holes && n_dims > 1) {
        gguf_writer_add_tensor(w, name, type, n_dims, ne, NULL);
        return;
    }
    assert_true(type == DT_F32 || type == DT_F16);
    const size_t n = (size_t)(ne0 * ne1 * ne2 * ne3);
    void *data = malloc(n * (type == DT_F32 ? 4 : 2));
    assert_non_null(data);
    uint64_t s = seed_of(key ? key : name);
    for (size_t i = 0; i < n; i++) {
        const float v = (n_dims == 1 ? 1.0f : 0.0f) + 0.1f * rng_uniform(&s);
        if (type == DT_F32) ((float *)data)[i] = v;
        else ((uint16_t *)data)[i] = f32_to_fp16(v);
    }
    gguf_writer_add_tensor(w, name, type, n_dims, ne, data);
    free(data);
}

static void gguf_add2(struct gguf_writer *w, const char *name, enum dtype type, int64_t ne0, int64_t ne1,
                      bool holes) {
    gguf_add(w, name, NULL, type, ne1 > 1 ? 2 : 1, ne0, ne1, 1, 1, holes);
}

/* blk.<layer>.<suffix> */
static void blk_add(struct gguf_writer *w, int layer, const char *suffix, enum dtype type, int64_t ne0, int64_t ne1,
                    bool holes) {
    char n[96];
    snprintf(n, sizeof n, "blk.%d.%s", layer, suffix);
    gguf_add2(w, n, type, ne0, ne1, holes);
}

/* Llama's SentencePiece layout: <unk> <s> </s>, the 256 byte pieces, words. */
static void spm_piece(int i, char *buf, size_t n) {
    if (i < 3) snprintf(buf, n, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
    else if (i < 3 + 256) snprintf(buf, n, "<0x%02X>", i - 3);
    else snprintf(buf, n, "\xe2\x96\x81tok%d", i);
}

struct dec_spec {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab;
    enum dtype mat, down, out; /* token_embd and attention / gate / up: mat */
    bool holes;
    bool qwen2vl;              /* llama.cpp's qwen2vl: Qwen2 (q/k/v biases) with M-RoPE sections 16/24/24,
                                  <|vision_start|> / <|vision_end|> at Qwen's ids; else llama */
    int head_dim;              /* attention.key_length; 0: n_embd / n_head, the key left out */
};

/* llava-v1.5-7b.Q4_K_M.gguf (Vicuna-7B v1.5 = Llama-2-7B shapes). */
static const struct dec_spec dec_7b = {32, 4096, 11008, 32, 32, 32000, DT_Q4_K, DT_Q6_K, DT_Q6_K, true, false, 0};
static const struct dec_spec dec_tiny = {2, 64, 128, 4, 2, 300, DT_F32, DT_F32, DT_F32, false, false, 0};
/* ggml-org's Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf (Qwen2.5-7B shapes, arch qwen2vl). */
static const struct dec_spec dec_qwen7b = {28, 3584, 18944, 28, 4, 152064, DT_Q4_K, DT_Q6_K, DT_Q6_K, true, true,
                                           0};

static void write_decoder(const char *path, const struct dec_spec *d) {
    struct gguf_writer *w = gguf_writer_init();
    assert_non_null(w);
    const char *arch = d->qwen2vl ? "qwen2vl" : "llama";
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "general.name", d->qwen2vl ? "Qwen2.5 VL 7B Instruct" : "LLaMA v2");
    gguf_writer_set_u32(w, KEY("context_length"), 4096);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)d->n_embd);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)d->n_layer);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)d->n_ff);
    const int hd = d->head_dim ? d->head_dim : d->n_embd / d->n_head;
    gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)hd);
    if (d->head_dim) {
        gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)hd);
        gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)hd);
    }
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)d->n_head);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)d->n_head_kv);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), 10000.0f);
    if (d->qwen2vl) {
        static const int32_t sections[4] = {16, 24, 24, 0};
        gguf_writer_set_arr(w, KEY("rope.dimension_sections"), GGUF_I32, sections, 4);
    }
#undef KEY
    gguf_writer_set_u32(w, "general.file_type", 15); /* MOSTLY_Q4_K_M */

    const int V = d->n_vocab;
    char *text = malloc((size_t)V * 24);
    const char **tok = malloc(sizeof *tok * (size_t)V);
    float *scores = malloc(sizeof *scores * (size_t)V);
    int32_t *types = malloc(sizeof *types * (size_t)V);
    assert_true(text && tok && scores && types);
    for (int i = 0; i < V; i++) {
        spm_piece(i, text + (size_t)i * 24, 24);
        tok[i] = text + (size_t)i * 24;
        scores[i] = i < 3 + 256 ? 0.0f : -(float)(i - 259);
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 3 + 256 ? 6 : 1; /* unknown, control, byte, normal */
        if (d->qwen2vl && (i == 151652 || i == 151653)) {
            snprintf(text + (size_t)i * 24, 24, "%s", i == 151652 ? "<|vision_start|>" : "<|vision_end|>");
            types[i] = 3;
        }
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)V);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores, (uint64_t)V);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, (uint64_t)V);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    free(text);
    free(tok);
    free(scores);
    free(types);

    const int64_t E = d->n_embd, F = d->n_ff, QD = (int64_t)d->n_head * hd, KD = (int64_t)d->n_head_kv * hd;
    gguf_add2(w, "token_embd.weight", d->mat, E, V, d->holes);
    gguf_add2(w, "output_norm.weight", DT_F32, E, 1, d->holes);
    gguf_add2(w, "output.weight", d->out, E, V, d->holes);
    for (int l = 0; l < d->n_layer; l++) {
        blk_add(w, l, "attn_norm.weight", DT_F32, E, 1, d->holes);
        blk_add(w, l, "attn_q.weight", d->mat, E, QD, d->holes);
        blk_add(w, l, "attn_k.weight", d->mat, E, KD, d->holes);
        blk_add(w, l, "attn_v.weight", d->mat, E, KD, d->holes);
        if (d->qwen2vl) {
            blk_add(w, l, "attn_q.bias", DT_F32, QD, 1, d->holes);
            blk_add(w, l, "attn_k.bias", DT_F32, KD, 1, d->holes);
            blk_add(w, l, "attn_v.bias", DT_F32, KD, 1, d->holes);
        }
        blk_add(w, l, "attn_output.weight", d->mat, QD, E, d->holes);
        blk_add(w, l, "ffn_norm.weight", DT_F32, E, 1, d->holes);
        blk_add(w, l, "ffn_gate.weight", d->mat, E, F, d->holes);
        blk_add(w, l, "ffn_up.weight", d->mat, E, F, d->holes);
        blk_add(w, l, "ffn_down.weight", d->down, F, E, d->holes);
    }
    assert_ok(gguf_writer_write(w, path));
    gguf_writer_free(w);
}

/* A llama.cpp llava vision projector ("mmproj"), optionally broken. */
struct mm_spec {
    const char *arch, *proj_type;
    bool has_encoder;
    int image_size, patch_size, n_embd, n_ff, n_head;
    int n_layer;        /* clip.vision.block_count */
    int n_layer_file;   /* layers whose tensors are written */
    int proj_in;        /* mm.0 row length (the vision width when right) */
    int proj_mid;       /* mm.0 rows = mm.2 row length */
    int proj_out;       /* mm.2 rows (the decoder width when right) */
    int pos_rows;       /* 0: grid^2 + 1 */
    int mean_len;       /* values of clip.vision.image_mean */
    bool new_ffn_names; /* fc1 stored as ffn_up (newer converters), else as ffn_down */
    const char *omit;   /* a tensor left out */
    enum dtype mat;
    bool holes;
    int pool;           /* clip.vision.projector.scale_factor; 0: left out */
};

/* mmproj-model-f16.gguf of llava-v1.5-7b: CLIP ViT-L/14-336 up to layer 23
 * of 24 (the feature layer), F16 matrices, F32 vectors. */
static const struct mm_spec mm_7b = {"clip", "mlp", true, 336, 14, 1024, 4096, 16, 23, 23, 1024, 4096, 4096, 0, 3,
                                     false, NULL, DT_F16, true, 0};
/* 28 / 14: a 2 x 2 grid. */
static const struct mm_spec mm_tiny = {"clip", "mlp", true, 28, 14, 32, 48, 2, 2, 2, 32, 64, 64, 0, 3,
                                       false, NULL, DT_F32, false, 0};

static void mm_add(struct gguf_writer *w, const struct mm_spec *s, const char *name, const char *key,
                   enum dtype type, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    if (s->omit && !strcmp(s->omit, name)) return;
    gguf_add(w, name, key, type, n_dims, ne0, ne1, ne2, ne3, s->holes);
}

static void write_mmproj(const char *path, const struct mm_spec *s) {
    struct gguf_writer *w = gguf_writer_init();
    assert_non_null(w);
    gguf_writer_set_str(w, "general.architecture", s->arch);
    gguf_writer_set_str(w, "general.description", "image encoder for LLaVA");
    gguf_writer_set_u32(w, "general.file_type", 1);
    gguf_writer_set_bool(w, "clip.has_text_encoder", false);
    gguf_writer_set_bool(w, "clip.has_vision_encoder", s->has_encoder);
    if (s->proj_type) gguf_writer_set_str(w, "clip.projector_type", s->proj_type);
    gguf_writer_set_bool(w, "clip.has_llava_projector", s->proj_type != NULL);
    gguf_writer_set_bool(w, "clip.use_gelu", false);
    gguf_writer_set_u32(w, "clip.vision.image_size", (uint32_t)s->image_size);
    gguf_writer_set_u32(w, "clip.vision.patch_size", (uint32_t)s->patch_size);
    gguf_writer_set_u32(w, "clip.vision.embedding_length", (uint32_t)s->n_embd);
    gguf_writer_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)s->n_ff);
    gguf_writer_set_u32(w, "clip.vision.projection_dim", 768);
    gguf_writer_set_u32(w, "clip.vision.attention.head_count", (uint32_t)s->n_head);
    gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-5f);
    gguf_writer_set_u32(w, "clip.vision.block_count", (uint32_t)s->n_layer);
    if (s->pool) gguf_writer_set_u32(w, "clip.vision.projector.scale_factor", (uint32_t)s->pool);
    static const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    gguf_writer_set_arr(w, "clip.vision.image_mean", GGUF_F32, mean, (uint64_t)s->mean_len);
    gguf_writer_set_arr(w, "clip.vision.image_std", GGUF_F32, std, 3);

    const int64_t H = s->n_embd, F = s->n_ff, p = s->patch_size, g = s->patch_size ? s->image_size / p : 0;
    const int64_t npos = s->pos_rows ? s->pos_rows : g * g + 1;
    mm_add(w, s, "mm.0.weight", NULL, s->mat, 2, s->proj_in, s->proj_mid, 1, 1);
    mm_add(w, s, "mm.0.bias", NULL, DT_F32, 1, s->proj_mid, 1, 1, 1);
    mm_add(w, s, "mm.2.weight", NULL, s->mat, 2, s->proj_mid, s->proj_out, 1, 1);
    mm_add(w, s, "mm.2.bias", NULL, DT_F32, 1, s->proj_out, 1, 1, 1);
    mm_add(w, s, "v.class_embd", NULL, DT_F32, 1, H, 1, 1, 1);
    if (p > 0) mm_add(w, s, "v.patch_embd.weight", NULL, s->mat, 4, p, p, 3, H);
    mm_add(w, s, "v.position_embd.weight", NULL, s->mat, 2, H, npos, 1, 1);
    mm_add(w, s, "v.pre_ln.weight", NULL, DT_F32, 1, H, 1, 1, 1);
    mm_add(w, s, "v.pre_ln.bias", NULL, DT_F32, 1, H, 1, 1, 1);
    char n[96], k[96];
    static const char *const att[] = {"attn_q", "attn_k", "attn_v", "attn_out"};
    /* fc1 maps H to F; the legacy converter named it ffn_down. */
    const char *fc1 = s->new_ffn_names ? "ffn_up" : "ffn_down", *fc2 = s->new_ffn_names ? "ffn_down" : "ffn_up";
    for (int l = 0; l < s->n_layer_file; l++) {
#define NAME(fmt, ...) (snprintf(n, sizeof n, fmt, __VA_ARGS__), n)
#define KEY(fmt, ...) (snprintf(k, sizeof k, fmt, __VA_ARGS__), k)
        for (int a = 0; a < 4; a++) {
            mm_add(w, s, NAME("v.blk.%d.%s.weight", l, att[a]), NULL, s->mat, 2, H, H, 1, 1);
            mm_add(w, s, NAME("v.blk.%d.%s.bias", l, att[a]), NULL, DT_F32, 1, H, 1, 1, 1);
        }
        for (int ln = 1; ln <= 2; ln++) {
            mm_add(w, s, NAME("v.blk.%d.ln%d.weight", l, ln), NULL, DT_F32, 1, H, 1, 1, 1);
            mm_add(w, s, NAME("v.blk.%d.ln%d.bias", l, ln), NULL, DT_F32, 1, H, 1, 1, 1);
        }
        mm_add(w, s, NAME("v.blk.%d.%s.weight", l, fc1), KEY("v.blk.%d.fc1.weight", l), s->mat, 2, H, F, 1, 1);
        mm_add(w, s, NAME("v.blk.%d.%s.bias", l, fc1), KEY("v.blk.%d.fc1.bias", l), DT_F32, 1, F, 1, 1, 1);
        mm_add(w, s, NAME("v.blk.%d.%s.weight", l, fc2), KEY("v.blk.%d.fc2.weight", l), s->mat, 2, F, H, 1, 1);
        mm_add(w, s, NAME("v.blk.%d.%s.bias", l, fc2), KEY("v.blk.%d.fc2.bias", l), DT_F32, 1, H, 1, 1, 1);
#undef NAME
#undef KEY
    }
    assert_ok(gguf_writer_write(w, path));
    gguf_writer_free(w);
}

/* ---------------------------------------------- Hugging Face directory -- */

struct st_list {
    struct st_tensor *t;
    int n, cap;
};

/* Appends an F16 tensor of the given row-major shape (data: a hole). */
static void st_push(struct st_list *s, const char *name, int n_dims, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->t = realloc(s->t, sizeof *s->t * (size_t)s->cap);
        assert_non_null(s->t);
    }
    const int64_t d[4] = {d0, d1, d2, d3};
    struct st_tensor *t = &s->t[s->n++];
    *t = (struct st_tensor){.name = strdup(name), .type = DT_F16, .n_dims = n_dims, .data = NULL};
    assert_non_null(t->name);
    size_t nb = 2;
    for (int i = 0; i < n_dims; i++) t->shape[i] = d[i], nb *= (size_t)d[i];
    t->nbytes = nb;
}

static void st_list_free(struct st_list *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i].name);
    free(s->t);
}

/* Names of transformers < 4.52 (language_model.model.*, vision_tower.*,
 * multi_modal_projector.*); n_vision_layers: all the tower's layers. */
static void hf_tensors(struct st_list *s, const struct dec_spec *d, int n_vocab, const struct mm_spec *v,
                       int n_vision_layers) {
    const int64_t E = d->n_embd, F = d->n_ff, KD = (int64_t)d->n_head_kv * (E / d->n_head);
    char n[160];
    st_push(s, "language_model.model.embed_tokens.weight", 2, n_vocab, E, 0, 0);
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    for (int l = 0; l < d->n_layer; l++) {
        const char *pre = "language_model.model.layers";
        snprintf(n, sizeof n, "%s.%d.input_layernorm.weight", pre, l), st_push(s, n, 1, E, 0, 0, 0);
        for (int k = 0; k < 4; k++)
            snprintf(n, sizeof n, "%s.%d.self_attn.%s.weight", pre, l, proj[k]),
                st_push(s, n, 2, k == 1 || k == 2 ? KD : E, E, 0, 0);
        snprintf(n, sizeof n, "%s.%d.post_attention_layernorm.weight", pre, l), st_push(s, n, 1, E, 0, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.gate_proj.weight", pre, l), st_push(s, n, 2, F, E, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.up_proj.weight", pre, l), st_push(s, n, 2, F, E, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.down_proj.weight", pre, l), st_push(s, n, 2, E, F, 0, 0);
    }
    st_push(s, "language_model.model.norm.weight", 1, E, 0, 0, 0);
    st_push(s, "language_model.lm_head.weight", 2, n_vocab, E, 0, 0);

    const int64_t H = v->n_embd, VF = v->n_ff, p = v->patch_size, g = v->image_size / p;
    const char *vp = "vision_tower.vision_model";
    snprintf(n, sizeof n, "%s.embeddings.class_embedding", vp), st_push(s, n, 1, H, 0, 0, 0);
    snprintf(n, sizeof n, "%s.embeddings.patch_embedding.weight", vp), st_push(s, n, 4, H, 3, p, p);
    snprintf(n, sizeof n, "%s.embeddings.position_embedding.weight", vp), st_push(s, n, 2, g * g + 1, H, 0, 0);
    snprintf(n, sizeof n, "%s.pre_layrnorm.weight", vp), st_push(s, n, 1, H, 0, 0, 0);
    snprintf(n, sizeof n, "%s.pre_layrnorm.bias", vp), st_push(s, n, 1, H, 0, 0, 0);
    static const char *const vproj[] = {"k_proj", "v_proj", "q_proj", "out_proj"};
    for (int l = 0; l < n_vision_layers; l++) {
        const char *pre = "vision_tower.vision_model.encoder.layers";
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "%s.%d.self_attn.%s.weight", pre, l, vproj[k]), st_push(s, n, 2, H, H, 0, 0);
            snprintf(n, sizeof n, "%s.%d.self_attn.%s.bias", pre, l, vproj[k]), st_push(s, n, 1, H, 0, 0, 0);
        }
        for (int k = 1; k <= 2; k++) {
            snprintf(n, sizeof n, "%s.%d.layer_norm%d.weight", pre, l, k), st_push(s, n, 1, H, 0, 0, 0);
            snprintf(n, sizeof n, "%s.%d.layer_norm%d.bias", pre, l, k), st_push(s, n, 1, H, 0, 0, 0);
        }
        snprintf(n, sizeof n, "%s.%d.mlp.fc1.weight", pre, l), st_push(s, n, 2, VF, H, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.fc1.bias", pre, l), st_push(s, n, 1, VF, 0, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.fc2.weight", pre, l), st_push(s, n, 2, H, VF, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.fc2.bias", pre, l), st_push(s, n, 1, H, 0, 0, 0);
    }
    snprintf(n, sizeof n, "%s.post_layernorm.weight", vp), st_push(s, n, 1, H, 0, 0, 0);
    snprintf(n, sizeof n, "%s.post_layernorm.bias", vp), st_push(s, n, 1, H, 0, 0, 0);
    st_push(s, "multi_modal_projector.linear_1.weight", 2, E, H, 0, 0);
    st_push(s, "multi_modal_projector.linear_1.bias", 1, E, 0, 0, 0);
    st_push(s, "multi_modal_projector.linear_2.weight", 2, E, E, 0, 0);
    st_push(s, "multi_modal_projector.linear_2.bias", 1, E, 0, 0, 0);
}

/* A tokenizer.json of Llama's kind as transformers converts it (BPE with
 * byte_fallback, "▁" for spaces): n_vocab pieces plus the added tokens
 * right after them (LLaVA's <image> and <pad> when added is NULL). */
static void write_tokenizer_json_added(const char *path, int n_vocab, const char *const *added) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fprintf(f, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
    static const char *const special[] = {"<unk>", "<s>", "</s>"};
    static const char *const llava[] = {"<image>", "<pad>", NULL};
    for (int i = 0; i < 3; i++)
        fprintf(f, "{\"id\":%d,\"content\":\"%s\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                   "\"normalized\":false,\"special\":true},", i, special[i]);
    if (!added) added = llava;
    for (int i = 0; added[i]; i++)
        fprintf(f, "{\"id\":%d,\"content\":\"%s\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                   "\"normalized\":false,\"special\":true}%s", n_vocab + i, added[i], added[i + 1] ? "," : "],");
    fprintf(f, "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":"
               "\"\xe2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":"
               "\"\xe2\x96\x81\"}]},\"pre_tokenizer\":null,\"post_processor\":null,");
    fprintf(f, "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
               "\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
               "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},");
    fprintf(f, "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"continuing_subword_prefix\":"
               "null,\"end_of_word_suffix\":null,\"fuse_unk\":true,\"byte_fallback\":true,\"vocab\":{");
    char piece[32];
    for (int i = 0; i < n_vocab; i++) {
        spm_piece(i, piece, sizeof piece);
        fprintf(f, "%s\"%s\":%d", i ? "," : "", piece, i);
    }
    fprintf(f, "},\"merges\":[]}}");
    assert_int_equal(fclose(f), 0);
}

static void write_tokenizer_json(const char *path, int n_vocab) { write_tokenizer_json_added(path, n_vocab, NULL); }

static const char *const tokenizer_config_json =
    "{\"add_bos_token\":true,\"add_eos_token\":false,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\","
    "\"pad_token\":\"<pad>\",\"unk_token\":\"<unk>\",\"padding_side\":\"left\","
    "\"processor_class\":\"LlavaProcessor\",\"tokenizer_class\":\"LlamaTokenizer\"}";

/* llava-hf/llava-1.5-7b-hf's files. */
static const char *const config_7b =
    "{\"architectures\":[\"LlavaForConditionalGeneration\"],\"model_type\":\"llava\",\"ignore_index\":-100,"
    "\"image_token_index\":32000,\"projector_hidden_act\":\"gelu\",\"vision_feature_layer\":-2,"
    "\"vision_feature_select_strategy\":\"default\",\"text_config\":{\"_name_or_path\":\"lmsys/vicuna-7b-v1.5\","
    "\"architectures\":[\"LlamaForCausalLM\"],\"max_position_embeddings\":4096,\"model_type\":\"llama\","
    "\"rms_norm_eps\":1e-05,\"torch_dtype\":\"float16\",\"vocab_size\":32064},\"vision_config\":{"
    "\"hidden_size\":1024,\"image_size\":336,\"intermediate_size\":4096,\"model_type\":\"clip_vision_model\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":24,\"patch_size\":14,\"projection_dim\":768,"
    "\"vocab_size\":32000},\"torch_dtype\":\"float16\"}";

static const char *const preprocessor_7b =
    "{\"crop_size\":{\"height\":336,\"width\":336},\"do_center_crop\":true,\"do_convert_rgb\":true,"
    "\"do_normalize\":true,\"do_rescale\":true,\"do_resize\":true,\"image_mean\":[0.48145466,0.4578275,"
    "0.40821073],\"image_processor_type\":\"CLIPImageProcessor\",\"image_std\":[0.26862954,0.26130258,"
    "0.27577711],\"processor_class\":\"LlavaProcessor\",\"resample\":3,\"rescale_factor\":0.00392156862745098,"
    "\"size\":{\"shortest_edge\":336}}";

/* Writes the tensors as model.safetensors, or as n_shards shards of
 * contiguous runs with model.safetensors.index.json. */
static void write_safetensors(const char *dir, const struct st_list *s, int n_shards) {
    char p[1100];
    if (n_shards <= 1) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        assert_ok(st_write(p, s->t, s->n));
        return;
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *idx = fopen(p, "wb");
    assert_non_null(idx);
    double total = 0;
    for (int i = 0; i < s->n; i++) total += (double)s->t[i].nbytes;
    fprintf(idx, "{\"metadata\":{\"total_size\":%.0f},\"weight_map\":{", total);
    const int per = (s->n + n_shards - 1) / n_shards;
    for (int k = 0; k < n_shards; k++) {
        const int a = k * per, b = a + per < s->n ? a + per : s->n;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        snprintf(p, sizeof p, "%s/%s", dir, name);
        assert_ok(st_write(p, s->t + a, b - a));
        for (int i = a; i < b; i++) fprintf(idx, "%s\"%s\":\"%s\"", i ? "," : "", s->t[i].name, name);
    }
    fprintf(idx, "}}");
    assert_int_equal(fclose(idx), 0);
}

static void write_hf_dir(const char *dir, const struct dec_spec *d, int n_vocab, const struct mm_spec *v,
                         int n_vision_layers, const char *config, const char *preproc, int n_shards) {
    assert_int_equal(mkdir(dir, 0755), 0);
    struct st_list s = {0};
    hf_tensors(&s, d, n_vocab, v, n_vision_layers);
    write_safetensors(dir, &s, n_shards);
    st_list_free(&s);
    char p[1100];
    snprintf(p, sizeof p, "%s/config.json", dir), write_text(p, config);
    if (preproc) snprintf(p, sizeof p, "%s/preprocessor_config.json", dir), write_text(p, preproc);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir), write_text(p, tokenizer_config_json);
    /* The tokenizer's pieces stop at the SentencePiece vocabulary; the
     * embedding table is padded past <image> and <pad>. */
    snprintf(p, sizeof p, "%s/tokenizer.json", dir), write_tokenizer_json(p, d->n_vocab);
}

/* Sums the sizes of the files in dir. */
static void dir_sizes(const char *dir, double *disk, double *apparent) {
    *disk = *apparent = 0;
    DIR *dd = opendir(dir);
    assert_non_null(dd);
    struct dirent *e;
    char p[1024];
    while ((e = readdir(dd)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        double a, b;
        file_sizes(p, &a, &b);
        *disk += a;
        *apparent += b;
    }
    closedir(dd);
}

/* ------------------------------------------------- LLaVA-1.5-7B shapes -- */

enum { E7 = 4096, F7 = 11008, L7 = 32, VE7 = 1024, VF7 = 4096 };

/* Weights a loaded LLaVA-1.5-7B binds, counted from the architecture:
 * Llama-2-7B, CLIP ViT-L/14-336 up to its 23rd layer (no post-LN: LLaVA reads
 * hidden_states[-2]), the 2-layer projector. */
static int64_t llava7b_params(int64_t n_vocab) {
    const int64_t E = E7, F = F7, H = VE7, VF = VF7;
    const int64_t dec = 2 * n_vocab * E + E + L7 * (2 * E + 4 * E * E + 3 * E * F);
    const int64_t vis = H * 3 * 14 * 14 + H + 577 * H + 2 * H + 23 * (4 * (H * H + H) + 4 * H + 2 * H * VF + VF + H);
    const int64_t proj = H * E + E + E * E + E;
    return dec + vis + proj;
}

static void check_7b_info(const struct kvf_model *m, int n_vocab, bool gguf) {
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    print_message("    %s: %s, %d layers x %d, vocab %d, %lld params (%.3f B), %.2f GB of weights (%s); vision %s: "
                  "%d layers x %d, %d tokens (%dx%d)\n",
                  in.source, in.arch, in.n_layer, in.n_embd, in.n_vocab, (long long)in.n_params,
                  (double)in.n_params / 1e9, (double)in.weight_bytes / 1e9, in.weight_types, in.vision_source,
                  in.vision_n_layer, in.vision_n_embd, in.image_tokens, in.image_grid, in.image_grid);
    assert_string_equal(in.arch, "llama");
    assert_string_equal(in.source, gguf ? "gguf" : "safetensors");
    assert_int_equal(in.n_layer, 32);
    assert_int_equal(in.n_embd, 4096);
    assert_int_equal(in.n_head, 32);
    assert_int_equal(in.n_head_kv, 32);
    assert_int_equal(in.head_dim, 128);
    assert_int_equal(in.n_ff, 11008);
    assert_int_equal(in.n_vocab, n_vocab);
    assert_int_equal(in.n_ctx_train, 4096);
    assert_int_equal(in.sliding_window, 0);
    assert_float_equal(in.rope_base, 10000.0f, 0.0f);
    assert_float_equal(in.norm_eps, 1e-5f, 1e-12f);
    assert_int_equal(in.rope_style, gguf ? KVF_ROPE_NORM : KVF_ROPE_NEOX);
    assert_string_equal(in.tokenizer, "spm");
    assert_int_equal(in.bos, 1);
    assert_int_equal(in.eos, 2);

    assert_true(in.has_vision);
    assert_string_equal(in.vision_source, gguf ? "mmproj" : "safetensors");
    assert_int_equal(in.vision_n_layer, 23);
    assert_int_equal(in.vision_n_embd, 1024);
    assert_int_equal(in.vision_n_head, 16);
    assert_int_equal(in.vision_n_ff, 4096);
    assert_int_equal(in.vision_image_size, 336);
    assert_int_equal(in.vision_patch_size, 14);
    assert_int_equal(in.image_tokens, 576);
    assert_int_equal(in.image_grid, 24);

    /* 6.74 B (Llama-2-7B) + 0.29 B (ViT-L to layer 23) + 0.02 B (projector). */
    assert_true(in.n_params > 7.0e9 && in.n_params < 7.1e9);
    assert_int_equal(in.n_params, llava7b_params(n_vocab));
    if (gguf) {
        /* Q4_K: 144 bytes per 256 values; Q6_K: 210. Vision: F16 matrices
         * (2 bytes), F32 vectors (4). */
        const int64_t E = E7, F = F7, V = n_vocab, H = VE7, VF = VF7;
        const int64_t q4 = 144 * (V * E + L7 * (4 * E * E + 2 * E * F)) / 256;
        const int64_t q6 = 210 * (V * E + L7 * F * E) / 256;
        const int64_t norms = 4 * E * (1 + 2 * L7);
        const int64_t vis16 = 2 * (H * 588 + 577 * H + 23 * (4 * H * H + 2 * H * VF) + H * E + E * E);
        const int64_t vis32 = 4 * (H + 2 * H + 23 * (4 * H + 4 * H + VF + H) + 2 * E);
        assert_int_equal(in.weight_bytes, q4 + q6 + norms + vis16 + vis32);
        assert_string_equal(in.weight_types, "q4_K:193 q6_K:33");
    } else {
        assert_int_equal(in.weight_bytes, 2 * in.n_params);
        assert_string_equal(in.weight_types, "f16:226");
    }
}

static void test_llava7b_gguf_mmproj(void **state) {
    (void)state;
    const char *dec = tmp_path("llava-v1.5-7b.Q4_K_M.gguf"), *mmp = tmp_path("mmproj-model-f16.gguf");
    write_decoder(dec, &dec_7b);
    write_mmproj(mmp, &mm_7b);
    double disk, size, mdisk, msize;
    file_sizes(dec, &disk, &size);
    file_sizes(mmp, &mdisk, &msize);
    print_message("    decoder GGUF %.3f GB apparent, %.2f MB on disk; mmproj %.3f GB apparent, %.2f MB on disk\n",
                  size / 1e9, disk / 1e6, msize / 1e9, mdisk / 1e6);
    /* 4.20 GB (the published file, 4.08 GB, mixes Q4_K and Q6_K in attn_v
     * and ffn_down layer by layer); the mmproj 624 MB as published. */
    assert_true(size > 4.15e9 && size < 4.25e9);
    assert_true(msize > 0.6e9 && msize < 0.65e9);
    assert_true(disk < 4e6 && mdisk < 2e6);

    struct kvf_model_params mp = shape_params();
    mp.mmproj = mmp;
    struct kvf_model *m = NULL;
    assert_ok(kvf_model_load(dec, &mp, &m));
    check_7b_info(m, 32000, true);
    kvf_model_free(m);

    /* Without the projector: the same decoder, text only. */
    assert_ok(kvf_model_load(dec, &np, &m));
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    assert_false(in.has_vision);
    assert_null(in.vision_source);
    assert_int_equal(in.image_tokens, 0);
    assert_int_equal(in.n_params, 2 * 32000LL * E7 + E7 + L7 * (2LL * E7 + 4LL * E7 * E7 + 3LL * E7 * F7));
    kvf_model_free(m);
}

/* Prints the sizes of a sparse decoder + mmproj pair, checks them against
 * [lo, hi] and [mlo, mhi] bytes (apparent), and loads the pair. */
static struct kvf_model *load_sized(const char *dec, const char *mmp, double lo, double hi, double mlo, double mhi) {
    double disk, size, mdisk, msize;
    file_sizes(dec, &disk, &size);
    file_sizes(mmp, &mdisk, &msize);
    print_message("    decoder GGUF %.3f GB apparent, %.2f MB on disk; mmproj %.3f GB apparent, %.2f MB on disk\n",
                  size / 1e9, disk / 1e6, msize / 1e9, mdisk / 1e6);
    assert_true(size > lo && size < hi);
    assert_true(msize > mlo && msize < mhi);
    assert_true(disk < 16e6 && mdisk < 8e6);
    struct kvf_model_params mp = shape_params();
    mp.mmproj = mmp;
    struct kvf_model *m = NULL;
    assert_ok(kvf_model_load(dec, &mp, &m));
    return m;
}

/* ------------------------------------------------------ Gemma-3-4B -- */

/* Gemma 3 4B: 34 layers of 2560, 8 query / 4 kv heads of 256, window 1024,
 * a 262208-token vocabulary with the image delimiters at their real ids. */
enum { G4_L = 34, G4_E = 2560, G4_F = 10240, G4_HD = 256, G4_NH = 8, G4_NKV = 4, G4_V = 262208,
       G4_BOI = 255999, G4_EOI = 256000, G4_SOFT = 262144 };
/* SigLIP so400m/14 at 896 px: 27 layers of 1152, ff 4304, 16 heads. */
enum { S4_L = 27, S4_H = 1152, S4_F = 4304, S4_P = 14, S4_S = 896, S4_G = S4_S / S4_P };

static void write_gemma3_4b(const char *path) {
    struct gguf_writer *w = gguf_writer_init();
    assert_non_null(w);
    gguf_writer_set_str(w, "general.architecture", "gemma3");
    gguf_writer_set_str(w, "general.name", "Gemma 3 4b It");
    gguf_writer_set_u32(w, "gemma3.context_length", 131072);
    gguf_writer_set_u32(w, "gemma3.embedding_length", G4_E);
    gguf_writer_set_u32(w, "gemma3.block_count", G4_L);
    gguf_writer_set_u32(w, "gemma3.feed_forward_length", G4_F);
    gguf_writer_set_u32(w, "gemma3.attention.head_count", G4_NH);
    gguf_writer_set_u32(w, "gemma3.attention.head_count_kv", G4_NKV);
    gguf_writer_set_u32(w, "gemma3.attention.key_length", G4_HD);
    gguf_writer_set_u32(w, "gemma3.attention.value_length", G4_HD);
    gguf_writer_set_u32(w, "gemma3.attention.sliding_window", 1024);
    gguf_writer_set_f32(w, "gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_writer_set_f32(w, "gemma3.rope.freq_base", 1000000.0f);
    char *text = malloc((size_t)G4_V * 24);
    const char **tok = malloc(sizeof *tok * (size_t)G4_V);
    float *scores = malloc(sizeof *scores * (size_t)G4_V);
    int32_t *types = malloc(sizeof *types * (size_t)G4_V);
    assert_true(text && tok && scores && types);
    for (int i = 0; i < G4_V; i++) {
        char *t = text + (size_t)i * 24;
        /* <pad> <eos> <bos> <unk>, then the byte pieces, then words */
        if (i < 4) snprintf(t, 24, "%s", (const char *[]){"<pad>", "<eos>", "<bos>", "<unk>"}[i]);
        else if (i < 4 + 256) snprintf(t, 24, "<0x%02X>", i - 4);
        else if (i == G4_BOI || i == G4_EOI || i == G4_SOFT)
            snprintf(t, 24, "%s",
                     i == G4_BOI       ? "<start_of_image>"
                         : i == G4_EOI ? "<end_of_image>"
                                       : "<image_soft_token>");
        else snprintf(t, 24, "\xe2\x96\x81tok%d", i);
        tok[i] = t;
        scores[i] = i < 4 + 256 ? 0.0f : -(float)(i - 260);
        types[i] = i == 3 ? 2 : i < 4 || i == G4_BOI || i == G4_EOI || i == G4_SOFT ? 3 : i < 4 + 256 ? 6 : 1;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, G4_V);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores, G4_V);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, G4_V);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 3);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false); /* Gemma's SentencePiece has none */
    free(text);
    free(tok);
    free(scores);
    free(types);
    const int64_t E = G4_E, F = G4_F, Q = G4_NH * G4_HD, KV = G4_NKV * G4_HD;
    gguf_add2(w, "token_embd.weight", DT_Q6_K, E, G4_V, true);
    gguf_add2(w, "output_norm.weight", DT_F32, E, 1, true);
    for (int l = 0; l < G4_L; l++) {
        static const char *const norms[] = {"attn_norm.weight", "post_attention_norm.weight", "ffn_norm.weight",
                                            "post_ffw_norm.weight"};
        for (int k = 0; k < 4; k++) blk_add(w, l, norms[k], DT_F32, E, 1, true);
        blk_add(w, l, "attn_q_norm.weight", DT_F32, G4_HD, 1, true);
        blk_add(w, l, "attn_k_norm.weight", DT_F32, G4_HD, 1, true);
        blk_add(w, l, "attn_q.weight", DT_Q4_K, E, Q, true);
        blk_add(w, l, "attn_k.weight", DT_Q4_K, E, KV, true);
        blk_add(w, l, "attn_v.weight", DT_Q6_K, E, KV, true);
        blk_add(w, l, "attn_output.weight", DT_Q4_K, Q, E, true);
        blk_add(w, l, "ffn_gate.weight", DT_Q4_K, E, F, true);
        blk_add(w, l, "ffn_up.weight", DT_Q4_K, E, F, true);
        blk_add(w, l, "ffn_down.weight", DT_Q6_K, F, E, true);
    }
    assert_ok(gguf_writer_write(w, path));
    gguf_writer_free(w);
}

/* llama.cpp's Gemma 3 mmproj: every SigLIP layer, post-LN, the pooling
 * projector's norm (w + 1) and x P projection (F16, ne = [proj_out, vision];
 * proj_out is the decoder's width when right); pool > 0 writes
 * clip.vision.projector.scale_factor. */
static void write_gemma3_mmproj(const char *path, int proj_out, int pool) {
    struct gguf_writer *w = gguf_writer_init();
    assert_non_null(w);
    gguf_writer_set_str(w, "general.architecture", "clip");
    gguf_writer_set_u32(w, "general.file_type", 1);
    gguf_writer_set_bool(w, "clip.has_text_encoder", false);
    gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
    gguf_writer_set_str(w, "clip.projector_type", "gemma3");
    gguf_writer_set_bool(w, "clip.use_gelu", true);
    gguf_writer_set_u32(w, "clip.vision.image_size", S4_S);
    gguf_writer_set_u32(w, "clip.vision.patch_size", S4_P);
    gguf_writer_set_u32(w, "clip.vision.embedding_length", S4_H);
    gguf_writer_set_u32(w, "clip.vision.feed_forward_length", S4_F);
    gguf_writer_set_u32(w, "clip.vision.projection_dim", G4_E);
    gguf_writer_set_u32(w, "clip.vision.attention.head_count", 16);
    gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    gguf_writer_set_u32(w, "clip.vision.block_count", S4_L);
    static const float half[3] = {0.5f, 0.5f, 0.5f};
    gguf_writer_set_arr(w, "clip.vision.image_mean", GGUF_F32, half, 3);
    gguf_writer_set_arr(w, "clip.vision.image_std", GGUF_F32, half, 3);
    if (pool > 0) gguf_writer_set_u32(w, "clip.vision.projector.scale_factor", (uint32_t)pool);
    const int64_t H = S4_H, F = S4_F;
    gguf_add(w, "v.patch_embd.weight", NULL, DT_F16, 4, S4_P, S4_P, 3, H, true);
    gguf_add2(w, "v.patch_embd.bias", DT_F32, H, 1, true);
    gguf_add2(w, "v.position_embd.weight", DT_F16, H, S4_G * S4_G, true);
    char n[96];
    static const char *const att[] = {"attn_q", "attn_k", "attn_v", "attn_out"};
    for (int l = 0; l < S4_L; l++) {
        for (int a = 0; a < 4; a++) {
            snprintf(n, sizeof n, "v.blk.%d.%s.weight", l, att[a]);
            gguf_add2(w, n, DT_F16, H, H, true);
            snprintf(n, sizeof n, "v.blk.%d.%s.bias", l, att[a]);
            gguf_add2(w, n, DT_F32, H, 1, true);
        }
        for (int ln = 1; ln <= 2; ln++) {
            snprintf(n, sizeof n, "v.blk.%d.ln%d.weight", l, ln);
            gguf_add2(w, n, DT_F32, H, 1, true);
            snprintf(n, sizeof n, "v.blk.%d.ln%d.bias", l, ln);
            gguf_add2(w, n, DT_F32, H, 1, true);
        }
        snprintf(n, sizeof n, "v.blk.%d.ffn_up.weight", l);
        gguf_add2(w, n, DT_F16, H, F, true);
        snprintf(n, sizeof n, "v.blk.%d.ffn_up.bias", l);
        gguf_add2(w, n, DT_F32, F, 1, true);
        snprintf(n, sizeof n, "v.blk.%d.ffn_down.weight", l);
        gguf_add2(w, n, DT_F16, F, H, true);
        snprintf(n, sizeof n, "v.blk.%d.ffn_down.bias", l);
        gguf_add2(w, n, DT_F32, H, 1, true);
    }
    gguf_add2(w, "v.post_ln.weight", DT_F32, H, 1, true);
    gguf_add2(w, "v.post_ln.bias", DT_F32, H, 1, true);
    gguf_add2(w, "mm.soft_emb_norm.weight", DT_F32, H, 1, true);
    gguf_add2(w, "mm.input_projection.weight", DT_F16, proj_out, H, true);
    assert_ok(gguf_writer_write(w, path));
    gguf_writer_free(w);
}

static void test_gemma3_4b_gguf_mmproj(void **state) {
    (void)state;
    const char *dec = tmp_path("gemma-3-4b-it-Q4_K_M.gguf"), *mmp = tmp_path("mmproj-gemma3-4b-f16.gguf");
    write_gemma3_4b(dec);
    write_gemma3_mmproj(mmp, G4_E, 0);
    /* The published files: 2.49 GB and 851 MB. */
    struct kvf_model_params mp = shape_params();
    mp.mmproj = mmp;
    struct kvf_model *m = load_sized(dec, mmp, 2.3e9, 2.7e9, 0.80e9, 0.86e9);
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    print_message("    %s, %d layers x %d, vocab %d, %.3f B params; vision %s %s, %d layers x %d, projector %s, "
                  "%d tokens (%dx%d)\n", in.arch, in.n_layer, in.n_embd, in.n_vocab, (double)in.n_params / 1e9,
                  in.vision_source, in.vision_tower, in.vision_n_layer, in.vision_n_embd, in.vision_projector,
                  in.image_tokens, in.image_grid, in.image_grid);
    assert_string_equal(in.arch, "gemma3");
    assert_int_equal(in.n_layer, G4_L);
    assert_int_equal(in.head_dim, G4_HD);
    assert_int_equal(in.sliding_window, 1024);
    assert_true(in.has_vision);
    assert_string_equal(in.vision_tower, "SigLIP");
    assert_string_equal(in.vision_projector, "gemma3");
    assert_int_equal(in.vision_n_layer, S4_L);
    assert_int_equal(in.vision_n_embd, S4_H);
    assert_int_equal(in.vision_n_ff, S4_F);
    assert_int_equal(in.vision_image_size, S4_S);
    assert_int_equal(in.image_tokens, 256); /* 64 x 64 patches pooled 4 x 4 */
    assert_int_equal(in.image_grid, 16);
    assert_true(in.image_bidirectional);
    assert_int_equal(in.video_frames_per_item, 0); /* Gemma 3 reads no videos */
    /* 3.88 B (decoder, tied output) + 0.42 B (SigLIP so400m) + 2.9 M (projector). */
    const int64_t E = G4_E, H = S4_H;
    const int64_t dec_p = (int64_t)G4_V * E + E +
        G4_L * (4 * E + 2 * G4_HD + E * (G4_NH * G4_HD) * 2 + 2 * E * (G4_NKV * G4_HD) + 3 * E * G4_F);
    const int64_t vis_p = H * 3 * S4_P * S4_P + H + (int64_t)S4_G * S4_G * H +
                          S4_L * (4 * (H * H + H) + 4 * H + 2 * H * S4_F + S4_F + H) + 2 * H;
    assert_int_equal(in.n_params, dec_p + vis_p + H + H * E);

    /* An image in a prompt: "\n\n<start_of_image>", its 256 embeddings,
     * "<end_of_image>\n\n" (Gemma3Processor's layout). */
    float *embd = calloc((size_t)256 * G4_E, sizeof *embd);
    assert_non_null(embd);
    struct kvf_media *md = NULL;
    assert_ok(kvf_media_from_embd(m, embd, 16, 16, KVF_MOD_IMAGE, &md));
    free(embd);
    struct kvf_prompt *p = NULL;
    const struct kvf_media *media[1] = {md};
    assert_ok(kvf_prompt_init(m, "<image>", media, 1, true, false, &p));
    /* <bos> \n \n <boi> 256 x image <eoi> \n \n (byte pieces for the newlines) */
    assert_int_equal(kvf_prompt_n_tokens(p), 1 + 2 + 1 + 256 + 1 + 2);
    assert_int_equal(kvf_prompt_token(p, 0), 2);
    assert_int_equal(kvf_prompt_token(p, 1), 4 + '\n');
    assert_int_equal(kvf_prompt_token(p, 3), G4_BOI);
    assert_int_equal(kvf_prompt_token(p, 4), -1);
    assert_int_equal(kvf_prompt_token(p, 4 + 256), G4_EOI);
    assert_int_equal(kvf_prompt_token(p, 4 + 256 + 2), 4 + '\n');
    /* Video frames have no place in Gemma 3's prompt. */
    struct kvf_prompt *pv = NULL;
    assert_int_equal(kvf_prompt_init(m, "<video>", media, 1, true, false, &pv), KVF_ERR_UNSUPPORTED);
    kvf_prompt_free(p);
    kvf_media_free(md);
    kvf_model_free(m);

    /* A projector to another width, and a pooling that does not divide the
     * 64-patch grid: clear errors. */
    struct { int proj_out, pool; enum kvf_status want; } bad[] = {{2048, 0, KVF_ERR_SHAPE}, {G4_E, 5, KVF_ERR_FORMAT},
                                                                   {G4_E, 65, KVF_ERR_FORMAT}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_gemma3_mmproj(mmp, bad[i].proj_out, bad[i].pool);
        m = NULL;
        const enum kvf_status st = kvf_model_load(dec, &mp, &m);
        print_message("    projector to %d, pooling %d -> %s: %s\n", bad[i].proj_out, bad[i].pool, kvf_status_str(st),
                      kvf_last_error());
        assert_int_equal(st, bad[i].want);
        assert_null(m);
    }
}

/* ----------------------------------------------------- Qwen2.5-VL-7B -- */

/* Qwen/Qwen2.5-VL-7B-Instruct as published: config.json with the decoder's
 * keys at the top and rope_scaling's mrope sections, tensors named
 * model.layers.* / visual.* (transformers < 4.52), the 3-D patch kernel. */
enum { Q7_L = 28, Q7_E = 3584, Q7_F = 18944, Q7_NH = 28, Q7_NKV = 4, Q7_V = 152064, Q7_TOK = 151643,
       QV_L = 32, QV_H = 1280, QV_F = 3420 };

static const char *const config_qwen7b =
    "{\"architectures\":[\"Qwen2_5_VLForConditionalGeneration\"],\"model_type\":\"qwen2_5_vl\","
    "\"attention_dropout\":0.0,\"bos_token_id\":151643,\"eos_token_id\":151645,\"hidden_act\":\"silu\","
    "\"hidden_size\":3584,\"image_token_id\":151655,\"initializer_range\":0.02,\"intermediate_size\":18944,"
    "\"max_position_embeddings\":128000,\"max_window_layers\":28,\"num_attention_heads\":28,"
    "\"num_hidden_layers\":28,\"num_key_value_heads\":4,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,"
    "\"sliding_window\":32768,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
    "\"use_cache\":true,\"use_sliding_window\":false,\"video_token_id\":151656,\"vision_config\":{"
    "\"depth\":32,\"hidden_act\":\"silu\",\"hidden_size\":1280,\"intermediate_size\":3420,\"num_heads\":16,"
    "\"in_chans\":3,\"out_hidden_size\":3584,\"patch_size\":14,\"spatial_merge_size\":2,"
    "\"spatial_patch_size\":14,\"window_size\":112,\"fullatt_block_indexes\":[7,15,23,31],"
    "\"tokens_per_second\":2,\"temporal_patch_size\":2},\"rope_scaling\":{\"type\":\"mrope\","
    "\"mrope_section\":[16,24,24]},\"vision_start_token_id\":151652,\"vision_end_token_id\":151653,"
    "\"vision_token_id\":151654,\"vocab_size\":152064}";
static const char *const preprocessor_qwen7b =
    "{\"min_pixels\":3136,\"max_pixels\":12845056,\"patch_size\":14,\"temporal_patch_size\":2,\"merge_size\":2,"
    "\"image_mean\":[0.48145466,0.4578275,0.40821073],\"image_std\":[0.26862954,0.26130258,0.27577711],"
    "\"image_processor_type\":\"Qwen2VLImageProcessor\",\"processor_class\":\"Qwen2_5_VLProcessor\"}";

static void test_qwen25vl_7b_hf(void **state) {
    (void)state;
    const char *dir = tmp_path("Qwen2.5-VL-7B-Instruct");
    assert_int_equal(mkdir(dir, 0755), 0);
    struct st_list s = {0};
    char n[160];
    const int64_t E = Q7_E, F = Q7_F, KD = (int64_t)Q7_NKV * (E / Q7_NH), H = QV_H, VF = QV_F;
    st_push(&s, "model.embed_tokens.weight", 2, Q7_V, E, 0, 0);
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    for (int l = 0; l < Q7_L; l++) {
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l), st_push(&s, n, 1, E, 0, 0, 0);
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s.weight", l, proj[k]);
            st_push(&s, n, 2, k == 1 || k == 2 ? KD : E, E, 0, 0);
            if (k < 3) snprintf(n, sizeof n, "model.layers.%d.self_attn.%s.bias", l, proj[k]),
                           st_push(&s, n, 1, k == 0 ? E : KD, 0, 0, 0);
        }
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l), st_push(&s, n, 1, E, 0, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate_proj.weight", l), st_push(&s, n, 2, F, E, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.mlp.up_proj.weight", l), st_push(&s, n, 2, F, E, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj.weight", l), st_push(&s, n, 2, E, F, 0, 0);
    }
    st_push(&s, "model.norm.weight", 1, E, 0, 0, 0);
    st_push(&s, "lm_head.weight", 2, Q7_V, E, 0, 0);
    st_push(&s, "visual.patch_embed.proj.weight", 4, H, 3, 2, 14); /* [H][3][2][14][14]: the 5th below */
    s.t[s.n - 1].n_dims = 5, s.t[s.n - 1].shape[4] = 14, s.t[s.n - 1].nbytes *= 14;
    for (int l = 0; l < QV_L; l++) {
        const char *b = "visual.blocks";
        snprintf(n, sizeof n, "%s.%d.norm1.weight", b, l), st_push(&s, n, 1, H, 0, 0, 0);
        snprintf(n, sizeof n, "%s.%d.norm2.weight", b, l), st_push(&s, n, 1, H, 0, 0, 0);
        snprintf(n, sizeof n, "%s.%d.attn.qkv.weight", b, l), st_push(&s, n, 2, 3 * H, H, 0, 0);
        snprintf(n, sizeof n, "%s.%d.attn.qkv.bias", b, l), st_push(&s, n, 1, 3 * H, 0, 0, 0);
        snprintf(n, sizeof n, "%s.%d.attn.proj.weight", b, l), st_push(&s, n, 2, H, H, 0, 0);
        snprintf(n, sizeof n, "%s.%d.attn.proj.bias", b, l), st_push(&s, n, 1, H, 0, 0, 0);
        static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "%s.%d.mlp.%s.weight", b, l, mlp[k]),
                st_push(&s, n, 2, k < 2 ? VF : H, k < 2 ? H : VF, 0, 0);
            snprintf(n, sizeof n, "%s.%d.mlp.%s.bias", b, l, mlp[k]), st_push(&s, n, 1, k < 2 ? VF : H, 0, 0, 0);
        }
    }
    st_push(&s, "visual.merger.ln_q.weight", 1, H, 0, 0, 0);
    st_push(&s, "visual.merger.mlp.0.weight", 2, 4 * H, 4 * H, 0, 0);
    st_push(&s, "visual.merger.mlp.0.bias", 1, 4 * H, 0, 0, 0);
    st_push(&s, "visual.merger.mlp.2.weight", 2, E, 4 * H, 0, 0);
    st_push(&s, "visual.merger.mlp.2.bias", 1, E, 0, 0, 0);
    write_safetensors(dir, &s, 5);
    st_list_free(&s);
    char p[1100];
    snprintf(p, sizeof p, "%s/config.json", dir), write_text(p, config_qwen7b);
    snprintf(p, sizeof p, "%s/preprocessor_config.json", dir), write_text(p, preprocessor_qwen7b);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir), write_text(p, tokenizer_config_json);
    /* The tokens from 151643 on, as Qwen's tokenizer has them. */
    static const char *const added[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                                        "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                                        "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                                        "<|image_pad|>", "<|video_pad|>", NULL};
    snprintf(p, sizeof p, "%s/tokenizer.json", dir), write_tokenizer_json_added(p, Q7_TOK, added);
    double disk, size;
    dir_sizes(dir, &disk, &size);
    print_message("    %.2f GB apparent, %.2f MB on disk\n", size / 1e9, disk / 1e6);
    /* 16.6 GB as published in BF16; F16 here, the same size. */
    assert_true(size > 16.4e9 && size < 16.8e9);

    struct kvf_model *m = NULL;
    assert_ok(kvf_model_load(dir, &np, &m));
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    print_message(
        "    %s, %d layers x %d (heads %d/%d), vocab %d, %.3f B params, M-RoPE %d/%d/%d; vision %s, %d layers "
        "x %d, projector %s, up to %d tokens\n",
        in.arch, in.n_layer, in.n_embd, in.n_head, in.n_head_kv, in.n_vocab, (double)in.n_params / 1e9,
        in.rope_sections[0], in.rope_sections[1], in.rope_sections[2], in.vision_tower, in.vision_n_layer,
        in.vision_n_embd, in.vision_projector, in.image_tokens);
    assert_string_equal(in.arch, "qwen2");
    assert_int_equal(in.n_layer, Q7_L);
    assert_int_equal(in.n_head_kv, Q7_NKV);
    assert_int_equal(in.rope_sections[0], 16);
    assert_int_equal(in.rope_sections[1], 24);
    assert_int_equal(in.rope_sections[2], 24);
    assert_string_equal(in.vision_tower, "Qwen2.5-VL ViT");
    assert_string_equal(in.vision_projector, "merger");
    assert_int_equal(in.vision_n_layer, QV_L);
    assert_int_equal(in.image_tokens, 12845056 / (28 * 28)); /* 16384 at max_pixels */
    assert_int_equal(in.image_grid, 0);
    assert_int_equal(in.video_frames_per_item, 2);
    /* 7.07 B (decoder) + 0.68 B (ViT and merger) */
    const int64_t dec_p = 2 * (int64_t)Q7_V * E + E + Q7_L * (2 * E + 2 * E * E + 2 * E * KD + E + 2 * KD + 3 * E * F);
    const int64_t vis_p = H * 3 * 2 * 14 * 14 + QV_L * (2 * H + 3 * H * H + 3 * H + H * H + H + 2 * (H * VF + VF) +
                          VF * H + H) + H + 16 * H * H + 4 * H + E * 4 * H + E;
    assert_int_equal(in.n_params, dec_p + vis_p);

    /* A 1000 x 600 picture: smart_resize to 1008 x 588, 36 x 21 merge units. */
    float *embd = calloc((size_t)21 * 36 * Q7_E, sizeof *embd);
    assert_non_null(embd);
    struct kvf_media *md = NULL;
    assert_ok(kvf_media_from_embd(m, embd, 21, 36, KVF_MOD_IMAGE, &md));
    free(embd);
    struct kvf_prompt *pr = NULL;
    const struct kvf_media *media[1] = {md};
    assert_ok(kvf_prompt_init(m, "<image>", media, 1, true, false, &pr));
    /* <s> <|vision_start|> 756 x image <|vision_end|> */
    assert_int_equal(kvf_prompt_n_tokens(pr), 1 + 1 + 21 * 36 + 1);
    assert_int_equal(kvf_prompt_token(pr, 1), Q7_TOK + 9);
    assert_int_equal(kvf_prompt_token(pr, 2 + 21 * 36), Q7_TOK + 10);
    kvf_prompt_free(pr);
    kvf_media_free(md);
    kvf_model_free(m);

    /* A processor that would scale every image to 10^8 pixels (min_pixels)
     * is refused at load: past 64 Mi pixels, an encoding's scratch alone
     * is gigabytes whatever the weights. */
    snprintf(p, sizeof p, "%s/preprocessor_config.json", dir);
    write_text(p, "{\"min_pixels\":100000000,\"max_pixels\":100000000,\"patch_size\":14,\"merge_size\":2}");
    m = (struct kvf_model *)1;
    assert_int_equal(kvf_model_load(dir, &np, &m), KVF_ERR_FORMAT);
    assert_null(m);
    print_message("    max_pixels 1e8 -> %s\n", kvf_last_error());
    assert_non_null(strstr(kvf_last_error(), "100000000 pixels"));
}

/* Its mmproj as llama.cpp's converter writes it: the patch kernel split by
 * frame, q/k/v apart, the merger as v.post_ln / mm.0 / mm.2, every 8th
 * layer full (n_wa_pattern); F16 matrices; min_px / max_px:
 * clip.vision.image_min/max_pixels, 0: absent. */
static void write_qwen7b_mmproj(const char *path, uint32_t min_px, uint32_t max_px) {
    struct gguf_writer *w = gguf_writer_init();
    assert_non_null(w);
    gguf_writer_set_str(w, "general.architecture", "clip");
    gguf_writer_set_u32(w, "general.file_type", 1);
    gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
    gguf_writer_set_str(w, "clip.projector_type", "qwen2.5vl");
    gguf_writer_set_bool(w, "clip.use_silu", true);
    gguf_writer_set_u32(w, "clip.vision.image_size", 560);
    gguf_writer_set_u32(w, "clip.vision.patch_size", 14);
    gguf_writer_set_u32(w, "clip.vision.embedding_length", QV_H);
    gguf_writer_set_u32(w, "clip.vision.feed_forward_length", QV_F);
    gguf_writer_set_u32(w, "clip.vision.projection_dim", Q7_E);
    gguf_writer_set_u32(w, "clip.vision.attention.head_count", 16);
    gguf_writer_set_u32(w, "clip.vision.block_count", QV_L);
    gguf_writer_set_u32(w, "clip.vision.n_wa_pattern", 8);
    gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    if (min_px) gguf_writer_set_u32(w, "clip.vision.image_min_pixels", min_px);
    if (max_px) gguf_writer_set_u32(w, "clip.vision.image_max_pixels", max_px);
    const int64_t H = QV_H, F = QV_F, E = Q7_E;
    gguf_add(w, "v.patch_embd.weight", NULL, DT_F16, 4, 14, 14, 3, H, true);
    gguf_add(w, "v.patch_embd.weight.1", NULL, DT_F16, 4, 14, 14, 3, H, true);
    char n[96];
    static const char *const mats[][2] = {{"attn_q", "H"}, {"attn_k", "H"}, {"attn_v", "H"}, {"attn_out", "H"},
                                          {"ffn_gate", "F"}, {"ffn_up", "F"}, {"ffn_down", "D"}};
    for (int l = 0; l < QV_L; l++) {
        for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++) {
            const int64_t in = mats[k][1][0] == 'D' ? F : H, out = mats[k][1][0] == 'F' ? F : H;
            snprintf(n, sizeof n, "v.blk.%d.%s.weight", l, mats[k][0]), gguf_add2(w, n, DT_F16, in, out, true);
            snprintf(n, sizeof n, "v.blk.%d.%s.bias", l, mats[k][0]), gguf_add2(w, n, DT_F32, out, 1, true);
        }
        snprintf(n, sizeof n, "v.blk.%d.ln1.weight", l), gguf_add2(w, n, DT_F32, H, 1, true);
        snprintf(n, sizeof n, "v.blk.%d.ln2.weight", l), gguf_add2(w, n, DT_F32, H, 1, true);
    }
    gguf_add2(w, "v.post_ln.weight", DT_F32, H, 1, true);
    gguf_add2(w, "mm.0.weight", DT_F16, 4 * H, 4 * H, true);
    gguf_add2(w, "mm.0.bias", DT_F32, 4 * H, 1, true);
    gguf_add2(w, "mm.2.weight", DT_F16, 4 * H, E, true);
    gguf_add2(w, "mm.2.bias", DT_F32, E, 1, true);
    assert_ok(gguf_writer_write(w, path));
    gguf_writer_free(w);
}

static void test_qwen25vl_7b_gguf_mmproj(void **state) {
    (void)state;
    const char *dec = tmp_path("Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf"), *mmp = tmp_path("mmproj-Qwen2.5-VL-7B-f16.gguf");
    write_decoder(dec, &dec_qwen7b);
    write_qwen7b_mmproj(mmp, 0, 0);
    /* Published: 4.68 GB (its Q4_K_M mixes Q4_K and Q6_K layer by layer; here
     * attn_v and ffn_down are all Q6_K) and 1.35 GB. */
    struct kvf_model *m = load_sized(dec, mmp, 4.6e9, 5.0e9, 1.3e9, 1.4e9);
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    print_message("    %s, %d layers x %d, %.3f B params, M-RoPE %d/%d/%d; vision %s %s, %d layers x %d, up to %d "
                  "tokens\n", in.arch, in.n_layer, in.n_embd, (double)in.n_params / 1e9, in.rope_sections[0],
                  in.rope_sections[1], in.rope_sections[2], in.vision_source, in.vision_tower, in.vision_n_layer,
                  in.vision_n_embd, in.image_tokens);
    assert_string_equal(in.arch, "qwen2");
    assert_int_equal(in.rope_sections[0], 16);
    assert_int_equal(in.rope_sections[2], 24);
    assert_string_equal(in.vision_tower, "Qwen2.5-VL ViT");
    assert_int_equal(in.vision_n_layer, QV_L);
    assert_int_equal(in.image_tokens, 4096); /* llama.cpp's default bound */
    kvf_model_free(m);
    /* llama.cpp's --image-min-tokens / --image-max-tokens */
    struct kvf_model_params mp = shape_params();
    mp.mmproj = mmp;
    mp.image_max_tokens = 1024;
    assert_ok(kvf_model_load(dec, &mp, &m));
    kvf_model_get_info(m, &in);
    assert_int_equal(in.image_tokens, 1024);
    /* The HF directory's count (test_qwen25vl_7b_hf): the kernel's two
     * frames count in both. */
    const int64_t E = Q7_E, F = Q7_F, KD = (int64_t)Q7_NKV * (E / Q7_NH), H = QV_H, VF = QV_F;
    const int64_t dec_p = 2 * (int64_t)Q7_V * E + E + Q7_L * (2 * E + 2 * E * E + 2 * E * KD + E + 2 * KD + 3 * E * F);
    const int64_t vis_p = H * 3 * 2 * 14 * 14 + QV_L * (2 * H + 3 * H * H + 3 * H + H * H + H + 2 * (H * VF + VF) +
                          VF * H + H) + H + 16 * H * H + 4 * H + E * 4 * H + E;
    assert_int_equal(in.n_params, dec_p + vis_p);
    kvf_model_free(m);
    /* Bounds that cannot hold. */
    mp.image_min_tokens = 2048;
    m = (struct kvf_model *)1;
    assert_int_equal(kvf_model_load(dec, &mp, &m), KVF_ERR_INVALID_ARG);
    assert_null(m);
    mp.image_min_tokens = -1;
    assert_int_equal(kvf_model_load(dec, &mp, &m), KVF_ERR_INVALID_ARG);
    /* The file's own bounds (newer converters), one side of them alone. */
    const char *keyed = tmp_path("qwen7b-mmproj-keyed.gguf");
    /* 64 Mi pixels, the most accepted: 85598 merge units. */
    const int64_t px[][3] = {{100 * 784, 2000 * 784, 2000}, {0, 4 * 784, 4}, {5000 * 784, 0, 5000},
                             {0, 1 << 26, (1 << 26) / 784}};
    for (int k = 0; k < 4; k++) {
        write_qwen7b_mmproj(keyed, (uint32_t)px[k][0], (uint32_t)px[k][1]);
        struct kvf_model_params kp = shape_params();
        kp.mmproj = keyed;
        assert_ok(kvf_model_load(dec, &kp, &m));
        kvf_model_get_info(m, &in);
        assert_int_equal(in.image_tokens, (int)px[k][2]);
        kvf_model_free(m);
    }
    /* Past it, as the largest bound or as the smallest (which every image is
     * scaled up to). */
    const uint32_t over[][2] = {{0, (1u << 26) + 784}, {(1u << 26) + 784, 0}, {0, INT32_MAX}};
    for (int k = 0; k < 3; k++) {
        write_qwen7b_mmproj(keyed, over[k][0], over[k][1]);
        struct kvf_model_params kp = shape_params();
        kp.mmproj = keyed;
        m = (struct kvf_model *)1;
        assert_int_equal(kvf_model_load(dec, &kp, &m), KVF_ERR_FORMAT);
        assert_null(m);
        print_message("    pixels %u..%u -> %s\n", over[k][0], over[k][1], kvf_last_error());
        assert_non_null(strstr(kvf_last_error(), "more than 67108864 pixels"));
    }
}

static void test_llava7b_hf(void **state) {
    (void)state;
    const char *dir = tmp_path("llava-1.5-7b-hf");
    write_hf_dir(dir, &dec_7b, 32064, &mm_7b, 24, config_7b, preprocessor_7b, 3);
    double disk, size;
    dir_sizes(dir, &disk, &size);
    print_message("    llava-hf directory %.3f GB apparent, %.2f MB on disk\n", size / 1e9, disk / 1e6);
    /* The published shards: 14.1 GB of F16. */
    assert_true(size > 14.0e9 && size < 14.2e9);
    assert_true(disk < 4e6);

    struct kvf_model *m = NULL;
    assert_ok(kvf_model_load(dir, &np, &m));
    check_7b_info(m, 32064, false);
    /* image_token_index 32000 lies past the SentencePiece pieces but inside
     * the padded embedding table. */
    int32_t ids[4], n_ids = 0;
    assert_int_equal(kvf_tokenize(m, "<image>", 7, ids, 4, false, true, &n_ids), KVF_OK);
    assert_int_equal(n_ids, 1);
    assert_int_equal(ids[0], 32000);
    kvf_model_free(m);

    /* The directory carries its own tower: an mmproj as well is a mistake. */
    const char *mmp = tmp_path("mmproj-model-f16.gguf");
    write_mmproj(mmp, &mm_7b);
    struct kvf_model_params mp = shape_params();
    mp.mmproj = mmp;
    m = (struct kvf_model *)1;
    assert_int_equal(kvf_model_load(dir, &mp, &m), KVF_ERR_INVALID_ARG);
    assert_null(m);
}

/* --------------------------------------------- tiny files, real data -- */

static struct kvf_image *test_image(void) {
    enum { W = 40, H = 30 };
    static uint8_t rgb[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)(i * 37 + i / 97);
    struct kvf_image *img = NULL;
    assert_ok(kvf_image_from_rgb(W, H, rgb, &img));
    return img;
}

/* The tiny decoder with this mmproj, on 2 threads. */
static struct kvf_model *tiny_load(const char *dec, const char *mmp) {
    struct kvf_model_params mp = shape_params();
    mp.mmproj = mmp;
    mp.n_threads = 2;
    struct kvf_model *m = NULL;
    assert_ok(kvf_model_load(dec, &mp, &m));
    return m;
}

/* Logits after "<s> <image>" through the tiny decoder with this mmproj. */
static void tiny_logits(const char *dec, const char *mmp, float *logits, int n_vocab) {
    struct kvf_model *m = tiny_load(dec, mmp);
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    assert_true(in.has_vision);
    assert_string_equal(in.vision_source, "mmproj");
    assert_int_equal(in.vision_n_layer, 2);
    assert_int_equal(in.vision_n_embd, 32);
    assert_int_equal(in.vision_n_ff, 48);
    assert_int_equal(in.image_grid, 2);
    assert_int_equal(in.image_tokens, 4);

    struct kvf_image *img = test_image();
    struct kvf_media *md = NULL;
    assert_ok(kvf_media_encode_image(m, img, KVF_MOD_IMAGE, 0, &md));
    assert_int_equal(kvf_media_n_tokens(md), 4);
    assert_int_equal(kvf_media_modality(md), KVF_MOD_IMAGE);
    assert_false(kvf_media_is_synthetic(md));
    const struct kvf_media *list[1] = {md};
    struct kvf_prompt *p = NULL;
    assert_ok(kvf_prompt_init(m, KVF_MARKER_IMAGE, list, 1, true, false, &p));
    assert_int_equal(kvf_prompt_n_tokens(p), 5);
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = 16;
    struct kvf_session *s = NULL;
    assert_ok(kvf_session_init(m, &sp, &s));
    assert_ok(kvf_session_prefill_prompt(s, p, NULL));
    const float *lg = kvf_session_logits(s);
    assert_non_null(lg);
    for (int i = 0; i < n_vocab; i++) assert_true(isfinite(lg[i]));
    memcpy(logits, lg, sizeof(float) * (size_t)n_vocab);
    kvf_session_free(s);
    kvf_prompt_free(p);
    kvf_media_free(md);
    kvf_image_free(img);
    kvf_model_free(m);
}

/* llama.cpp's legacy converter stored HF's fc1 as ffn_down, newer ones as
 * ffn_up: the same weights under either naming give the same logits. */
static void test_tiny_encode(void **state) {
    (void)state;
    const char *dec = tmp_path("tiny.gguf"), *legacy = tmp_path("mmproj-legacy.gguf");
    const char *renamed = tmp_path("mmproj-new.gguf");
    write_decoder(dec, &dec_tiny);
    write_mmproj(legacy, &mm_tiny);
    struct mm_spec s = mm_tiny;
    s.new_ffn_names = true;
    write_mmproj(renamed, &s);
    const int V = dec_tiny.n_vocab;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    assert_true(a && b);
    tiny_logits(dec, legacy, a, V);
    tiny_logits(dec, renamed, b, V);
    assert_memory_equal(a, b, sizeof(float) * (size_t)V);
    free(a);
    free(b);
}

/* Videos through the tiny LLaVA: a frame an item, each video's items
 * numbered from 0 so that consecutive videos fill one marker each, and
 * given a few frames at a time (first_frame) numbered on. */
static void test_tiny_video(void **state) {
    (void)state;
    const char *dec = tmp_path("tiny.gguf"), *mmp = tmp_path("mmproj.gguf");
    write_decoder(dec, &dec_tiny);
    write_mmproj(mmp, &mm_tiny);
    struct kvf_model *m = tiny_load(dec, mmp);
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    assert_int_equal(in.video_frames_per_item, 1);
    struct kvf_image *img = test_image();
    const struct kvf_image *frames[3] = {img, img, img};
    struct kvf_media *md[5] = {0};
    int n = -1, n2 = -1;
    assert_ok(kvf_media_encode_video(m, frames, 3, 0, 2.0, 0, md, &n));
    assert_int_equal(n, 3);
    assert_ok(kvf_media_encode_video(m, frames, 2, 0, 2.0, 0, md + 3, &n2));
    assert_int_equal(n2, 2);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(kvf_media_modality(md[i]), KVF_MOD_VIDEO);
        assert_int_equal(kvf_media_video_index(md[i]), i < 3 ? i : i - 3);
        assert_int_equal(kvf_media_n_tokens(md[i]), 4);
    }
    struct kvf_prompt *p = NULL;
    assert_ok(kvf_prompt_init(m, KVF_MARKER_VIDEO KVF_MARKER_VIDEO, (const struct kvf_media *const *)md, 5, true,
                              false, &p));
    assert_int_equal(kvf_prompt_n_tokens(p), 1 + 5 * 4);
    const struct kvf_tag *tags = kvf_prompt_tags(p);
    assert_int_equal(tags[1 + 3 * 4].media, 0); /* the second video's first frame */
    assert_int_equal(tags[1 + 4 * 4].media, 1);
    kvf_prompt_free(p);
    p = (struct kvf_prompt *)1;
    assert_int_equal(kvf_prompt_init(m, KVF_MARKER_VIDEO, (const struct kvf_media *const *)md, 5, true, false, &p),
                     KVF_ERR_INVALID_ARG); /* one marker, two videos */
    assert_null(p);
    struct kvf_media *more[2] = {0};
    assert_ok(kvf_media_encode_video(m, frames, 2, 3, 2.0, 0, more, &n));
    assert_int_equal(kvf_media_video_index(more[0]), 3);
    assert_int_equal(kvf_media_video_index(more[1]), 4);
    for (int i = 0; i < 2; i++) kvf_media_free(more[i]);
    assert_int_equal(kvf_media_encode_video(m, frames, 3, 0, 0.0, 0, more, &n), KVF_ERR_INVALID_ARG);
    assert_int_equal(n, 0);
    assert_int_equal(kvf_media_encode_video(m, frames, 3, -1, 2.0, 0, more, &n), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_media_encode_video(m, frames, 0, 0, 2.0, 0, more, &n), KVF_ERR_INVALID_ARG);
    const struct kvf_image *holes[2] = {img, NULL};
    assert_int_equal(kvf_media_encode_video(m, holes, 2, 0, 2.0, 0, more, &n), KVF_ERR_INVALID_ARG);
    for (int i = 0; i < 5; i++) kvf_media_free(md[i]);
    kvf_model_free(m);
    /* A text model has no tower to encode with. */
    assert_ok(kvf_model_load(dec, &np, &m));
    assert_int_equal(kvf_media_encode_video(m, frames, 3, 0, 2.0, 0, more, &n), KVF_ERR_UNSUPPORTED);
    assert_int_equal(n, 0);
    kvf_model_free(m);
    kvf_image_free(img);
}

/* Loads dec (with mmproj, if given): expects status want and a message
 * holding `needle` (if given). */
static void expect_load_error(const char *dec, const char *mmproj, enum kvf_status want, const char *needle) {
    struct kvf_model_params mp = shape_params();
    mp.mmproj = mmproj;
    struct kvf_model *m = (struct kvf_model *)1;
    const enum kvf_status st = kvf_model_load(dec, &mp, &m);
    const char *file = strrchr(mmproj ? mmproj : dec, '/');
    print_message("    %-22s -> %s: %s\n", file ? file + 1 : dec, kvf_status_str(st), kvf_last_error());
    assert_int_equal(st, want);
    assert_null(m);
    if (needle && !strstr(kvf_last_error(), needle)) fail_msg("message '%s' lacks '%s'", kvf_last_error(), needle);
}

/* Loads the tiny decoder with an mmproj written from spec, as expect_load_error. */
static void expect_mmproj_error(const char *dec, const struct mm_spec *spec, const char *file, enum kvf_status want,
                                const char *needle) {
    const char *path = tmp_path(file);
    write_mmproj(path, spec);
    expect_load_error(dec, path, want, needle);
}

static void test_bad_mmproj(void **state) {
    (void)state;
    char dec[1024]; /* outlives tmp_path's rotation */
    snprintf(dec, sizeof dec, "%s", tmp_path("tiny.gguf"));
    write_decoder(dec, &dec_tiny);
    struct mm_spec s;

    /* A projector made for a wider decoder (as LLaVA-13B's, 5120, on a 7B). */
    s = mm_tiny, s.proj_mid = 80, s.proj_out = 80;
    expect_mmproj_error(dec, &s, "proj-width.gguf", KVF_ERR_SHAPE, "projector");
    /* Only the second layer's output is off. */
    s = mm_tiny, s.proj_out = 80;
    expect_mmproj_error(dec, &s, "proj-out.gguf", KVF_ERR_SHAPE, "mm.2.weight");
    /* The projector's input is not the vision width. */
    s = mm_tiny, s.proj_in = 40;
    expect_mmproj_error(dec, &s, "proj-in.gguf", KVF_ERR_SHAPE, "projector");

    s = mm_tiny, s.arch = "llama";
    expect_mmproj_error(dec, &s, "arch-llama.gguf", KVF_ERR_FORMAT, "clip");
    s = mm_tiny, s.proj_type = "ldp";
    expect_mmproj_error(dec, &s, "proj-ldp.gguf", KVF_ERR_UNSUPPORTED, "ldp");
    s = mm_tiny, s.proj_type = NULL; /* nor clip.has_llava_projector */
    expect_mmproj_error(dec, &s, "proj-none.gguf", KVF_ERR_UNSUPPORTED, NULL);
    s = mm_tiny, s.has_encoder = false;
    expect_mmproj_error(dec, &s, "no-encoder.gguf", KVF_ERR_UNSUPPORTED, NULL);

    s = mm_tiny, s.omit = "v.blk.0.attn_q.weight";
    expect_mmproj_error(dec, &s, "no-attn-q.gguf", KVF_ERR_FORMAT, "v.blk.0.attn_q.weight");
    s = mm_tiny, s.omit = "mm.2.bias";
    expect_mmproj_error(dec, &s, "no-mm2-bias.gguf", KVF_ERR_FORMAT, "mm.2.bias");
    s = mm_tiny, s.omit = "v.class_embd";
    expect_mmproj_error(dec, &s, "no-cls.gguf", KVF_ERR_FORMAT, "v.class_embd");
    /* block_count names a layer the file does not hold. */
    s = mm_tiny, s.n_layer = 3;
    expect_mmproj_error(dec, &s, "short-layers.gguf", KVF_ERR_FORMAT, "v.blk.2.");

    s = mm_tiny, s.image_size = 30;
    expect_mmproj_error(dec, &s, "image-30.gguf", KVF_ERR_FORMAT, "patch");
    s = mm_tiny, s.patch_size = 0;
    expect_mmproj_error(dec, &s, "patch-0.gguf", KVF_ERR_FORMAT, "patch");
    s = mm_tiny, s.image_size = 300 * 14, s.pos_rows = 5; /* past the largest accepted (4096) */
    expect_mmproj_error(dec, &s, "image-huge.gguf", KVF_ERR_FORMAT, NULL);
    s = mm_tiny, s.n_head = 3;
    expect_mmproj_error(dec, &s, "heads-3.gguf", KVF_ERR_FORMAT, NULL);
    s = mm_tiny, s.n_layer = 0, s.n_layer_file = 0;
    expect_mmproj_error(dec, &s, "layers-0.gguf", KVF_ERR_FORMAT, NULL);
    s = mm_tiny, s.mean_len = 2;
    expect_mmproj_error(dec, &s, "mean-2.gguf", KVF_ERR_FORMAT, "image_mean");
    /* 2 x 2 patches need 5 positions (with CLS). */
    s = mm_tiny, s.pos_rows = 4;
    expect_mmproj_error(dec, &s, "pos-4.gguf", KVF_ERR_SHAPE, "v.position_embd.weight");

    struct kvf_model_params mp = shape_params();
    struct kvf_model *m = (struct kvf_model *)1;
    mp.mmproj = tmp_path("absent.gguf");
    assert_int_equal(kvf_model_load(dec, &mp, &m), KVF_ERR_IO);
    assert_null(m);
    mp.mmproj = tmp_dir; /* a directory */
    assert_int_not_equal(kvf_model_load(dec, &mp, &m), KVF_OK);
    assert_null(m);
}

/* A Qwen2-VL mmproj of keys alone (one layer, one head): its sizes are
 * refused before any tensor is looked up. min_px / max_px: 0, absent. */
static void write_qwen_keys(const char *path, int H, int F, int patch, int merge, uint32_t min_px, uint32_t max_px) {
    struct gguf_writer *w = gguf_writer_init();
    assert_non_null(w);
    gguf_writer_set_str(w, "general.architecture", "clip");
    gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
    gguf_writer_set_str(w, "clip.projector_type", "qwen2vl_merger");
    gguf_writer_set_u32(w, "clip.vision.patch_size", (uint32_t)patch);
    gguf_writer_set_u32(w, "clip.vision.spatial_merge_size", (uint32_t)merge);
    gguf_writer_set_u32(w, "clip.vision.embedding_length", (uint32_t)H);
    gguf_writer_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)F);
    gguf_writer_set_u32(w, "clip.vision.attention.head_count", 1);
    gguf_writer_set_u32(w, "clip.vision.block_count", 1);
    if (min_px) gguf_writer_set_u32(w, "clip.vision.image_min_pixels", min_px);
    if (max_px) gguf_writer_set_u32(w, "clip.vision.image_max_pixels", max_px);
    assert_ok(gguf_writer_write(w, path));
    gguf_writer_free(w);
}

/* Widths that size buffers but that no weight of the file backs: a few
 * megabytes of tensors must not make a load or an image cost gigabytes.
 * Each is held to 64 x the embedding width it goes with (and the pixels of
 * a Qwen-VL image to 64 Mi); the limit itself loads. */
static void test_hostile_widths(void **state) {
    (void)state;
    char dec[1024], wide[1024], path[1024]; /* outlive tmp_path's rotation */
    snprintf(dec, sizeof dec, "%s", tmp_path("tiny.gguf"));
    write_decoder(dec, &dec_tiny);
    snprintf(wide, sizeof wide, "%s", tmp_path("wide.gguf"));
    const struct dec_spec dec_wide = {1, 512, 1024, 4, 2, 300, DT_F32, DT_F32, DT_F32, true, false, 0};
    write_decoder(wide, &dec_wide);

    /* Decoders: n_ff and 4 heads of 1024 at 64 x n_embd 64 load. */
    struct dec_spec d = dec_tiny;
    d.n_layer = 1, d.n_ff = 64 * 64, d.head_dim = 1024, d.holes = true;
    snprintf(path, sizeof path, "%s", tmp_path("dec-edge.gguf"));
    write_decoder(path, &d);
    struct kvf_model *m = NULL;
    assert_ok(kvf_model_load(path, &np, &m));
    kvf_model_free(m);
    d.n_ff = 64 * 64 + 2;
    write_decoder(path, &d);
    expect_load_error(path, NULL, KVF_ERR_FORMAT, "feed-forward width 4098");
    d.n_ff = 128, d.n_head = 8, d.head_dim = 520; /* 4160 */
    write_decoder(path, &d);
    expect_load_error(path, NULL, KVF_ERR_FORMAT, "query width 8 heads x 520");
    /* The audit's: n_embd 1, n_ff 2^20 (12 MB of weights, 4 GiB of buffers a batch). */
    d = (struct dec_spec){1, 1, 1 << 20, 1, 1, 300, DT_F32, DT_F32, DT_F32, true, false, 2};
    write_decoder(path, &d);
    expect_load_error(path, NULL, KVF_ERR_FORMAT, "feed-forward width 1048576");

    /* CLIP: a vision width of 2 with n_ff 64 x 2 loads (3 x 6 x 6 = 108
     * values a patch, under a decoder 32 x as wide). */
    struct mm_spec s = mm_tiny;
    s.image_size = 12, s.patch_size = 6, s.n_embd = 2, s.n_head = 1, s.n_ff = 128, s.proj_in = 2;
    snprintf(path, sizeof path, "%s", tmp_path("vit-edge.gguf"));
    write_mmproj(path, &s);
    struct kvf_model_params mp = shape_params();
    mp.mmproj = path;
    assert_ok(kvf_model_load(dec, &mp, &m));
    kvf_model_free(m);
    expect_load_error(wide, path, KVF_ERR_FORMAT, "decoder's embedding width 512");
    /* The audit's 2 MB mmproj: 4096-pixel images in 64 x 64 patches of
     * width 1, n_ff 65536 (2.5 GB an image). */
    s = mm_tiny, s.image_size = 4096, s.patch_size = 64, s.n_embd = 1, s.n_head = 1, s.n_ff = 65536, s.proj_in = 1;
    s.holes = true;
    expect_mmproj_error(dec, &s, "vit-ff.gguf", KVF_ERR_FORMAT, "feed-forward width 65536");
    s = mm_tiny, s.image_size = 112, s.patch_size = 56; /* 9408 values a patch for 32 wide */
    expect_mmproj_error(dec, &s, "vit-patch.gguf", KVF_ERR_FORMAT, "patch of 56 x 56");
    s = mm_tiny, s.image_size = 4096, s.patch_size = 8, s.pos_rows = 5;
    expect_mmproj_error(dec, &s, "vit-grid.gguf", KVF_ERR_FORMAT, "grid of 512");
    s = mm_tiny, s.proj_type = "idefics3", s.image_size = 126, s.pool = 9; /* rows of 81 x 32 */
    expect_mmproj_error(dec, &s, "vit-shuffle.gguf", KVF_ERR_FORMAT, "pixel-shuffle factor 9");

    /* Qwen-VL towers. */
    snprintf(path, sizeof path, "%s", tmp_path("qvit.gguf"));
    write_qwen_keys(path, 16, 16 * 64 + 4, 14, 2, 0, 0);
    expect_load_error(dec, path, KVF_ERR_FORMAT, "feed-forward width 1028");
    write_qwen_keys(path, 4, 8, 14, 2, 0, 0);
    expect_load_error(wide, path, KVF_ERR_FORMAT, "decoder's embedding width 512");
    /* The audit's: 64-pixel patches merged 8 x 8 scaled to 2^31 - 1 pixels,
     * or to 2^27 by min_pixels alone. */
    write_qwen_keys(path, 64, 128, 64, 8, 0, INT32_MAX);
    expect_load_error(dec, path, KVF_ERR_FORMAT, "2147483647 pixels");
    write_qwen_keys(path, 64, 128, 14, 2, 1u << 27, 0);
    expect_load_error(dec, path, KVF_ERR_FORMAT, "134217728 pixels");
    /* 4 Mi pixels in 2 x 2 patches: a million rows to encode. */
    write_qwen_keys(path, 64, 128, 2, 1, 0, 1u << 22);
    expect_load_error(dec, path, KVF_ERR_FORMAT, "patches of 2 x 2");
}

/* Every prefix of a good mmproj file is rejected, none read out of bounds. */
static void test_truncated_mmproj(void **state) {
    (void)state;
    const char *dec = tmp_path("tiny.gguf"), *good = tmp_path("good.gguf"), *cut = tmp_path("cut.gguf");
    write_decoder(dec, &dec_tiny);
    write_mmproj(good, &mm_tiny);
    FILE *f = fopen(good, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    const long size = ftell(f);
    assert_true(size > 0);
    uint8_t *bytes = malloc((size_t)size);
    assert_non_null(bytes);
    rewind(f);
    assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);

    struct kvf_model_params mp = shape_params();
    mp.mmproj = cut;
    struct kvf_model *m = NULL;
    int n_cuts = 0;
    /* Half first (the brief case), then cuts across the header and data. */
    for (long k = -1; k < 80; k++) {
        const long len = k < 0 ? size / 2 : k < 48 ? k * 53 : size - 1 - (k - 48) * (size / 40);
        if (len < 0 || len >= size) continue;
        f = fopen(cut, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bytes, 1, (size_t)len, f), (size_t)len);
        assert_int_equal(fclose(f), 0);
        m = (struct kvf_model *)1;
        const enum kvf_status st = kvf_model_load(dec, &mp, &m);
        if (st == KVF_OK) fail_msg("mmproj cut to %ld of %ld bytes was accepted", len, size);
        assert_true(st == KVF_ERR_FORMAT || st == KVF_ERR_IO);
        assert_null(m);
        n_cuts++;
    }
    print_message("    %d cuts of a %ld-byte mmproj rejected\n", n_cuts, size);
    free(bytes);
    mp.mmproj = good;
    assert_ok(kvf_model_load(dec, &mp, &m));
    kvf_model_free(m);
}

static void test_text_only(void **state) {
    (void)state;
    const char *dec = tmp_path("tiny.gguf");
    write_decoder(dec, &dec_tiny);
    struct kvf_model *m = NULL;
    assert_ok(kvf_model_load(dec, &np, &m));
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    assert_false(in.has_vision);
    assert_null(in.vision_source);
    assert_int_equal(in.image_tokens, 0);
    assert_int_equal(in.image_grid, 0);
    struct kvf_image *img = test_image();
    struct kvf_media *md = (struct kvf_media *)1;
    assert_int_equal(kvf_media_encode_image(m, img, KVF_MOD_IMAGE, 0, &md), KVF_ERR_UNSUPPORTED);
    assert_null(md);
    kvf_image_free(img);
    kvf_model_free(m);
}

/* A tiny llava-hf directory: its tower is read from the safetensors, and
 * an mmproj on top of it is refused. */
static void test_tiny_hf(void **state) {
    (void)state;
    const char *dir = tmp_path("llava-tiny-hf");
    static const char config[] =
        "{\"architectures\":[\"LlavaForConditionalGeneration\"],\"model_type\":\"llava\","
        "\"image_token_index\":300,\"projector_hidden_act\":\"gelu\",\"vision_feature_layer\":-2,"
        "\"vision_feature_select_strategy\":\"default\",\"text_config\":{\"model_type\":\"llama\","
        "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"max_position_embeddings\":256,\"rms_norm_eps\":1e-05,\"vocab_size\":320},"
        "\"vision_config\":{\"model_type\":\"clip_vision_model\",\"hidden_size\":32,\"intermediate_size\":48,"
        "\"num_attention_heads\":2,\"num_hidden_layers\":3,\"image_size\":28,\"patch_size\":14,"
        "\"projection_dim\":16}}";
    write_hf_dir(dir, &dec_tiny, 320, &mm_tiny, 3, config, NULL, 1);
    struct kvf_model *m = NULL;
    assert_ok(kvf_model_load(dir, &np, &m));
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    assert_int_equal(in.n_vocab, 320);
    assert_true(in.has_vision);
    assert_string_equal(in.vision_source, "safetensors");
    assert_int_equal(in.vision_n_layer, 2);
    assert_int_equal(in.image_tokens, 4);
    kvf_model_free(m);

    const char *mmp = tmp_path("mmproj.gguf");
    write_mmproj(mmp, &mm_tiny);
    struct kvf_model_params mp = shape_params();
    mp.mmproj = mmp;
    m = (struct kvf_model *)1;
    assert_int_equal(kvf_model_load(dir, &mp, &m), KVF_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(kvf_last_error(), "vision tower"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_llava7b_gguf_mmproj, test_teardown),
        cmocka_unit_test_teardown(test_llava7b_hf, test_teardown),
        cmocka_unit_test_teardown(test_gemma3_4b_gguf_mmproj, test_teardown),
        cmocka_unit_test_teardown(test_qwen25vl_7b_hf, test_teardown),
        cmocka_unit_test_teardown(test_qwen25vl_7b_gguf_mmproj, test_teardown),
        cmocka_unit_test_teardown(test_tiny_encode, test_teardown),
        cmocka_unit_test_teardown(test_tiny_video, test_teardown),
        cmocka_unit_test_teardown(test_bad_mmproj, test_teardown),
        cmocka_unit_test_teardown(test_hostile_widths, test_teardown),
        cmocka_unit_test_teardown(test_truncated_mmproj, test_teardown),
        cmocka_unit_test_teardown(test_text_only, test_teardown),
        cmocka_unit_test_teardown(test_tiny_hf, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
