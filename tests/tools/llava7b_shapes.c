/* Loads LLaVA-1.5-7B with its real shapes, written as sparse files: the
 * tensors' bytes are holes (zeros, no disk space), so this checks every name,
 * shape, type and offset the loaders require of the files people download —
 * llava-v1.5-7b.Q4_K_M.gguf + mmproj-model-f16.gguf (llama.cpp) and the
 * llava-hf/llava-1.5-7b-hf directory — without 7 GB of weights.
 *
 * usage: llava7b_shapes TMPDIR TOKENIZER_JSON
 *   TOKENIZER_JSON: any tokenizer.json the HF loader reads (its vocabulary
 *   does not matter here). Exit 0 when both layouts load with the expected
 *   hyper-parameters; the files are removed afterwards. */
#include "io/gguf.h"
#include "io/safetensors.h"
#include "kvfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { E = 4096, F = 11008, L = 32, V = 32000, V_HF = 32064, VE = 1024, VF = 4096, VL = 24, NPOS = 577 };

static int failures;

static void expect(bool ok, const char *what, long long got, long long want) {
    if (ok) return;
    fprintf(stderr, "llava7b_shapes: %s = %lld, want %lld\n", what, got, want);
    failures++;
}
#define EXPECT_EQ(what, got, want) expect((long long)(got) == (long long)(want), what, (long long)(got), (long long)(want))

static void add(struct gguf_writer *w, const char *name, enum dtype t, int64_t ne0, int64_t ne1) {
    const int64_t ne[2] = {ne0, ne1};
    gguf_writer_add_tensor(w, name, t, ne1 > 1 ? 2 : 1, ne, NULL);
}

/* llava-v1.5-7b.Q4_K_M.gguf: Q4_K matrices, Q6_K for output and ffn_down. */
static int write_decoder(const char *path) {
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "general.name", "LLaMA v2 (llava-v1.5-7b shapes)");
    gguf_writer_set_u32(w, "llama.context_length", 4096);
    gguf_writer_set_u32(w, "llama.embedding_length", E);
    gguf_writer_set_u32(w, "llama.block_count", L);
    gguf_writer_set_u32(w, "llama.feed_forward_length", F);
    gguf_writer_set_u32(w, "llama.rope.dimension_count", 128);
    gguf_writer_set_u32(w, "llama.attention.head_count", 32);
    gguf_writer_set_u32(w, "llama.attention.head_count_kv", 32);
    gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    /* A 32000-piece SentencePiece vocabulary of Llama 2's layout. */
    char **tok = malloc(sizeof *tok * V);
    float *scores = malloc(sizeof *scores * V);
    int32_t *types = malloc(sizeof *types * V);
    for (int i = 0; i < V; i++) {
        tok[i] = malloc(16);
        if (i < 3) snprintf(tok[i], 16, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 3 + 256) snprintf(tok[i], 16, "<0x%02X>", i - 3);
        else snprintf(tok[i], 16, "\xe2\x96\x81t%d", i);
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 3 + 256 ? 6 : 1;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, V);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores, V);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, V);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    add(w, "token_embd.weight", DT_Q4_K, E, V);
    add(w, "output_norm.weight", DT_F32, E, 1);
    add(w, "output.weight", DT_Q6_K, E, V);
    char n[64];
    static const char *const sq[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
    for (int l = 0; l < L; l++) {
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l), add(w, n, DT_F32, E, 1);
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l), add(w, n, DT_F32, E, 1);
        for (int k = 0; k < 4; k++) snprintf(n, sizeof n, "blk.%d.%s.weight", l, sq[k]), add(w, n, DT_Q4_K, E, E);
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", l), add(w, n, DT_Q4_K, E, F);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", l), add(w, n, DT_Q4_K, E, F);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l), add(w, n, DT_Q6_K, F, E);
    }
    const enum kvf_status st = gguf_writer_write(w, path);
    gguf_writer_free(w);
    for (int i = 0; i < V; i++) free(tok[i]);
    free(tok);
    free(scores);
    free(types);
    return st == KVF_OK ? 0 : (fprintf(stderr, "llava7b_shapes: %s\n", kvf_last_error()), 1);
}

/* mmproj-model-f16.gguf of llava-v1.5-7b (legacy converter: 23 of 24 ViT
 * layers, HF fc1 stored as ffn_down). */
static int write_mmproj(const char *path) {
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_set_str(w, "general.architecture", "clip");
    gguf_writer_set_bool(w, "clip.has_text_encoder", false);
    gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
    gguf_writer_set_bool(w, "clip.has_llava_projector", true);
    gguf_writer_set_str(w, "clip.projector_type", "mlp");
    gguf_writer_set_bool(w, "clip.use_gelu", false);
    gguf_writer_set_u32(w, "clip.vision.image_size", 336);
    gguf_writer_set_u32(w, "clip.vision.patch_size", 14);
    gguf_writer_set_u32(w, "clip.vision.embedding_length", VE);
    gguf_writer_set_u32(w, "clip.vision.feed_forward_length", VF);
    gguf_writer_set_u32(w, "clip.vision.projection_dim", 768);
    gguf_writer_set_u32(w, "clip.vision.attention.head_count", 16);
    gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-5f);
    gguf_writer_set_u32(w, "clip.vision.block_count", VL - 1);
    const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f}, std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    gguf_writer_set_arr(w, "clip.vision.image_mean", GGUF_F32, mean, 3);
    gguf_writer_set_arr(w, "clip.vision.image_std", GGUF_F32, std, 3);
    add(w, "v.class_embd", DT_F32, VE, 1);
    const int64_t pe[4] = {14, 14, 3, VE};
    gguf_writer_add_tensor(w, "v.patch_embd.weight", DT_F16, 4, pe, NULL);
    add(w, "v.position_embd.weight", DT_F16, VE, NPOS);
    add(w, "v.pre_ln.weight", DT_F32, VE, 1);
    add(w, "v.pre_ln.bias", DT_F32, VE, 1);
    char n[64];
    static const char *const sq[] = {"attn_q", "attn_k", "attn_v", "attn_out"};
    for (int l = 0; l < VL - 1; l++) {
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "v.blk.%d.%s.weight", l, sq[k]), add(w, n, DT_F16, VE, VE);
            snprintf(n, sizeof n, "v.blk.%d.%s.bias", l, sq[k]), add(w, n, DT_F32, VE, 1);
        }
        for (int k = 1; k <= 2; k++) {
            snprintf(n, sizeof n, "v.blk.%d.ln%d.weight", l, k), add(w, n, DT_F32, VE, 1);
            snprintf(n, sizeof n, "v.blk.%d.ln%d.bias", l, k), add(w, n, DT_F32, VE, 1);
        }
        snprintf(n, sizeof n, "v.blk.%d.ffn_down.weight", l), add(w, n, DT_F16, VE, VF);
        snprintf(n, sizeof n, "v.blk.%d.ffn_down.bias", l), add(w, n, DT_F32, VF, 1);
        snprintf(n, sizeof n, "v.blk.%d.ffn_up.weight", l), add(w, n, DT_F16, VF, VE);
        snprintf(n, sizeof n, "v.blk.%d.ffn_up.bias", l), add(w, n, DT_F32, VE, 1);
    }
    add(w, "mm.0.weight", DT_F16, VE, E);
    add(w, "mm.0.bias", DT_F32, E, 1);
    add(w, "mm.2.weight", DT_F16, E, E);
    add(w, "mm.2.bias", DT_F32, E, 1);
    const enum kvf_status st = gguf_writer_write(w, path);
    gguf_writer_free(w);
    return st == KVF_OK ? 0 : (fprintf(stderr, "llava7b_shapes: %s\n", kvf_last_error()), 1);
}

/* ------------------------------------------------- llava-hf directory -- */

struct st_list {
    struct st_tensor t[1024];
    char names[1024][128];
    int n;
};

static void st_add(struct st_list *s, const char *name, int n_dims, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    struct st_tensor *t = &s->t[s->n];
    snprintf(s->names[s->n], sizeof s->names[0], "%s", name);
    const int64_t d[4] = {d0, d1, d2, d3};
    *t = (struct st_tensor){.name = s->names[s->n], .type = DT_F16, .n_dims = n_dims, .data = NULL};
    size_t nb = 2;
    for (int i = 0; i < n_dims; i++) t->shape[i] = d[i], nb *= (size_t)d[i];
    t->nbytes = nb;
    s->n++;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) return fprintf(stderr, "llava7b_shapes: cannot write %s\n", path), 1;
    return 0;
}

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int rc = !a || !b;
    char buf[65536];
    for (size_t k; !rc && (k = fread(buf, 1, sizeof buf, a)) > 0;) rc = fwrite(buf, 1, k, b) != k;
    if (a) fclose(a);
    if (b && fclose(b) != 0) rc = 1;
    if (rc) fprintf(stderr, "llava7b_shapes: cannot copy %s to %s\n", from, to);
    return rc;
}

/* The config.json of llava-hf/llava-1.5-7b-hf (text and vision configs
 * completed by transformers' defaults). */
static const char *const hf_config =
    "{\"architectures\":[\"LlavaForConditionalGeneration\"],\"ignore_index\":-100,\"image_token_index\":32000,"
    "\"model_type\":\"llava\",\"pad_token_id\":32001,\"projector_hidden_act\":\"gelu\","
    "\"text_config\":{\"_name_or_path\":\"lmsys/vicuna-7b-v1.5\",\"architectures\":[\"LlamaForCausalLM\"],"
    "\"max_position_embeddings\":4096,\"model_type\":\"llama\",\"rms_norm_eps\":1e-05,\"torch_dtype\":\"float16\","
    "\"vocab_size\":32064},\"tie_word_embeddings\":false,\"torch_dtype\":\"float16\","
    "\"transformers_version\":\"4.36.0.dev0\",\"vision_config\":{\"hidden_size\":1024,\"image_size\":336,"
    "\"intermediate_size\":4096,\"model_type\":\"clip_vision_model\",\"num_attention_heads\":16,"
    "\"num_hidden_layers\":24,\"patch_size\":14,\"projection_dim\":768,\"vocab_size\":32000},"
    "\"vision_feature_layer\":-2,\"vision_feature_select_strategy\":\"default\",\"vocab_size\":32064}\n";

static int write_hf(const char *dir, const char *tokenizer_json) {
    static struct st_list s;
    s.n = 0;
    char n[128], p[1100];
    st_add(&s, "language_model.model.embed_tokens.weight", 2, V_HF, E, 0, 0);
    st_add(&s, "language_model.model.norm.weight", 1, E, 0, 0, 0);
    st_add(&s, "language_model.lm_head.weight", 2, V_HF, E, 0, 0);
    static const char *const sq[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    for (int l = 0; l < L; l++) {
        const char *pre = "language_model.model.layers";
        snprintf(n, sizeof n, "%s.%d.input_layernorm.weight", pre, l), st_add(&s, n, 1, E, 0, 0, 0);
        snprintf(n, sizeof n, "%s.%d.post_attention_layernorm.weight", pre, l), st_add(&s, n, 1, E, 0, 0, 0);
        for (int k = 0; k < 4; k++) snprintf(n, sizeof n, "%s.%d.self_attn.%s.weight", pre, l, sq[k]), st_add(&s, n, 2, E, E, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.gate_proj.weight", pre, l), st_add(&s, n, 2, F, E, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.up_proj.weight", pre, l), st_add(&s, n, 2, F, E, 0, 0);
        snprintf(n, sizeof n, "%s.%d.mlp.down_proj.weight", pre, l), st_add(&s, n, 2, E, F, 0, 0);
    }
    const char *vp = "vision_tower.vision_model";
    snprintf(n, sizeof n, "%s.embeddings.class_embedding", vp), st_add(&s, n, 1, VE, 0, 0, 0);
    snprintf(n, sizeof n, "%s.embeddings.patch_embedding.weight", vp), st_add(&s, n, 4, VE, 3, 14, 14);
    snprintf(n, sizeof n, "%s.embeddings.position_embedding.weight", vp), st_add(&s, n, 2, NPOS, VE, 0, 0);
    snprintf(n, sizeof n, "%s.pre_layrnorm.weight", vp), st_add(&s, n, 1, VE, 0, 0, 0);
    snprintf(n, sizeof n, "%s.pre_layrnorm.bias", vp), st_add(&s, n, 1, VE, 0, 0, 0);
    snprintf(n, sizeof n, "%s.post_layernorm.weight", vp), st_add(&s, n, 1, VE, 0, 0, 0);
    snprintf(n, sizeof n, "%s.post_layernorm.bias", vp), st_add(&s, n, 1, VE, 0, 0, 0);
    static const char *const vq[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int l = 0; l < VL; l++) {
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "%s.encoder.layers.%d.self_attn.%s.weight", vp, l, vq[k]), st_add(&s, n, 2, VE, VE, 0, 0);
            snprintf(n, sizeof n, "%s.encoder.layers.%d.self_attn.%s.bias", vp, l, vq[k]), st_add(&s, n, 1, VE, 0, 0, 0);
        }
        for (int k = 1; k <= 2; k++) {
            snprintf(n, sizeof n, "%s.encoder.layers.%d.layer_norm%d.weight", vp, l, k), st_add(&s, n, 1, VE, 0, 0, 0);
            snprintf(n, sizeof n, "%s.encoder.layers.%d.layer_norm%d.bias", vp, l, k), st_add(&s, n, 1, VE, 0, 0, 0);
        }
        snprintf(n, sizeof n, "%s.encoder.layers.%d.mlp.fc1.weight", vp, l), st_add(&s, n, 2, VF, VE, 0, 0);
        snprintf(n, sizeof n, "%s.encoder.layers.%d.mlp.fc1.bias", vp, l), st_add(&s, n, 1, VF, 0, 0, 0);
        snprintf(n, sizeof n, "%s.encoder.layers.%d.mlp.fc2.weight", vp, l), st_add(&s, n, 2, VE, VF, 0, 0);
        snprintf(n, sizeof n, "%s.encoder.layers.%d.mlp.fc2.bias", vp, l), st_add(&s, n, 1, VE, 0, 0, 0);
    }
    st_add(&s, "multi_modal_projector.linear_1.weight", 2, E, VE, 0, 0);
    st_add(&s, "multi_modal_projector.linear_1.bias", 1, E, 0, 0, 0);
    st_add(&s, "multi_modal_projector.linear_2.weight", 2, E, E, 0, 0);
    st_add(&s, "multi_modal_projector.linear_2.bias", 1, E, 0, 0, 0);
    if (mkdir(dir, 0755) != 0 && access(dir, F_OK) != 0) return fprintf(stderr, "llava7b_shapes: mkdir %s\n", dir), 1;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (st_write(p, s.t, s.n) != KVF_OK) return fprintf(stderr, "llava7b_shapes: %s\n", kvf_last_error()), 1;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (write_text(p, hf_config)) return 1;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    return copy_file(tokenizer_json, p);
}

/* What both layouts must report. */
static void check_info(const struct kvf_model *m, int n_vocab, const char *source) {
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    printf("%s: %s, %d layers of %d, vocab %d, %.2f B params; vision %s, %d of %d layers of width %d, %d tokens (%dx%d)\n",
           source, in.arch, in.n_layer, in.n_embd, in.n_vocab, (double)in.n_params / 1e9, in.vision_source,
           in.vision_n_layer, VL, in.vision_n_embd, in.image_tokens, in.image_grid, in.image_grid);
    EXPECT_EQ("n_layer", in.n_layer, L);
    EXPECT_EQ("n_embd", in.n_embd, E);
    EXPECT_EQ("n_head", in.n_head, 32);
    EXPECT_EQ("n_head_kv", in.n_head_kv, 32);
    EXPECT_EQ("n_ff", in.n_ff, F);
    EXPECT_EQ("n_vocab", in.n_vocab, n_vocab);
    EXPECT_EQ("has_vision", in.has_vision, 1);
    EXPECT_EQ("vision_n_layer", in.vision_n_layer, VL - 1);
    EXPECT_EQ("vision_n_embd", in.vision_n_embd, VE);
    EXPECT_EQ("vision_n_head", in.vision_n_head, 16);
    EXPECT_EQ("vision_n_ff", in.vision_n_ff, VF);
    EXPECT_EQ("vision_image_size", in.vision_image_size, 336);
    EXPECT_EQ("vision_patch_size", in.vision_patch_size, 14);
    EXPECT_EQ("image_tokens", in.image_tokens, 576);
    EXPECT_EQ("image_grid", in.image_grid, 24);
    /* 6.74 B (Llama-2-7B) + 0.30 B (CLIP ViT-L up to layer 23) + 0.02 B (projector). */
    expect(in.n_params > 6.9e9 && in.n_params < 7.2e9, "n_params", in.n_params, 7060000000LL);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: llava7b_shapes TMPDIR TOKENIZER_JSON\n");
        return 2;
    }
    char dec[1024], mmp[1024], dir[1024], p[1100];
    mkdir(argv[1], 0755);
    snprintf(dec, sizeof dec, "%s/llava-v1.5-7b-shapes.gguf", argv[1]);
    snprintf(mmp, sizeof mmp, "%s/mmproj-7b-shapes.gguf", argv[1]);
    snprintf(dir, sizeof dir, "%s/llava-1.5-7b-hf-shapes", argv[1]);
    if (write_decoder(dec) || write_mmproj(mmp) || write_hf(dir, argv[2])) return 1;
    struct stat sb;
    if (stat(dec, &sb) == 0)
        printf("decoder GGUF: %.2f GB apparent, %.1f MB on disk\n", sb.st_size / 1e9, sb.st_blocks * 512 / 1e6);

    struct kvf_model_params mp = kvf_model_default_params();
    mp.mmproj = mmp;
    struct kvf_model *m = NULL;
    if (kvf_model_load(dec, &mp, &m) != KVF_OK) {
        fprintf(stderr, "llava7b_shapes: GGUF + mmproj: %s\n", kvf_last_error());
        failures++;
    } else {
        check_info(m, V, "gguf+mmproj");
        kvf_model_free(m);
    }
    if (kvf_model_load(dir, NULL, &m) != KVF_OK) {
        fprintf(stderr, "llava7b_shapes: llava-hf directory: %s\n", kvf_last_error());
        failures++;
    } else {
        check_info(m, V_HF, "llava-hf");
        kvf_model_free(m);
    }
    remove(dec);
    remove(mmp);
    snprintf(p, sizeof p, "%s/model.safetensors", dir), remove(p);
    snprintf(p, sizeof p, "%s/config.json", dir), remove(p);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir), remove(p);
    rmdir(dir);
    if (failures) return 1;
    printf("ok\n");
    return 0;
}
