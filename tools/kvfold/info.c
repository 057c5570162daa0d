/* kvfold info: a model's architecture, sizes, weight types, tokenizer and
 * chat template. */
#include "cli.h"

#include <unistd.h>

static int info_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL, OPT_NO_REPACK, OPT_JSON, OPT_THREADS,
        OPTS_VISION,
    };
    OPTS_RETURN(out, t);
}

/* The KV types a position's bytes are listed for: each type for keys and
 * values alike, 8-bit keys and smoothed 4-bit keys with rotated 4-bit
 * values (the smoothing's per-head vectors come on top). */
static const enum kvf_kv_type pos_types[][2] = {{KVF_KV_F32, KVF_KV_F32},   {KVF_KV_F16, KVF_KV_F16},
                                                {KVF_KV_Q8_0, KVF_KV_Q8_0}, {KVF_KV_Q8_0, KVF_KV_Q4_0H},
                                                {KVF_KV_Q4_0S, KVF_KV_Q4_0H}, {KVF_KV_Q4_0H, KVF_KV_Q4_0H},
                                                {KVF_KV_Q4_0, KVF_KV_Q4_0}};
#define N_POS_TYPES ((int)(sizeof pos_types / sizeof pos_types[0]))

/* "f16" or "q8_0/q4_0h" and the bytes of a position in those types (and
 * of the cache whatever its length); false where the model's heads cannot
 * take them. */
static bool pos_bytes(const struct kvf_model *m, int i, char name[32], size_t *bytes, size_t *per_cache) {
    const enum kvf_kv_type k = pos_types[i][0], v = pos_types[i][1];
    if (k == v) snprintf(name, 32, "%s", kvf_kv_type_name(k));
    else snprintf(name, 32, "%s/%s", kvf_kv_type_name(k), kvf_kv_type_name(v));
    return kvf_kv_position_bytes(m, k, v, bytes, per_cache) == KVF_OK;
}

static cJSON *info_json(const struct kvf_model *m, const char *file, const struct kvf_model_info *in) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", file);
    cJSON_AddStringToObject(o, "name", in->name);
    cJSON_AddStringToObject(o, "arch", in->arch);
    cJSON_AddStringToObject(o, "source", in->source);
    cJSON_AddNumberToObject(o, "n_layer", in->n_layer);
    cJSON_AddNumberToObject(o, "n_embd", in->n_embd);
    cJSON_AddNumberToObject(o, "n_head", in->n_head);
    cJSON_AddNumberToObject(o, "n_head_kv", in->n_head_kv);
    cJSON_AddNumberToObject(o, "head_dim", in->head_dim);
    cJSON_AddNumberToObject(o, "n_ff", in->n_ff);
    cJSON_AddNumberToObject(o, "n_vocab", in->n_vocab);
    cJSON_AddNumberToObject(o, "n_ctx_train", in->n_ctx_train);
    cJSON_AddNumberToObject(o, "sliding_window", in->sliding_window);
    cJSON_AddNumberToObject(o, "rope_base", in->rope_base);
    cJSON_AddNumberToObject(o, "rope_base_local", in->rope_base_local);
    cJSON_AddStringToObject(o, "rope_style", in->rope_style == KVF_ROPE_NEOX ? "neox" : "norm");
    cJSON_AddStringToObject(o, "rope_scaling", in->rope_scaling ? in->rope_scaling : "none");
    cJSON_AddNumberToObject(o, "rope_scaling_factor", in->rope_scaling_factor);
    if (in->rope_sections[0] + in->rope_sections[1] + in->rope_sections[2] > 0)
        cJSON_AddItemToObject(o, "rope_sections", cJSON_CreateIntArray(in->rope_sections, 3));
    cJSON_AddNumberToObject(o, "norm_eps", in->norm_eps);
    cJSON_AddNumberToObject(o, "n_params", (double)in->n_params);
    cJSON_AddNumberToObject(o, "weight_bytes", (double)in->weight_bytes);
    cJSON_AddStringToObject(o, "weight_types", in->weight_types);
    cJSON_AddNumberToObject(o, "decode_bytes", (double)in->decode_bytes);
    cJSON_AddStringToObject(o, "kernels", in->kernels);
    const char *zap = kvf_kvzap_default_path(m);
    if (access(zap, F_OK) == 0) cJSON_AddStringToObject(o, "kvzap_scorer", zap);
    else cJSON_AddNullToObject(o, "kvzap_scorer");
    cJSON *kb = cJSON_AddObjectToObject(o, "kv_bytes_per_position");
    for (int i = 0; i < N_POS_TYPES; i++) {
        char name[32];
        size_t b, c;
        if (pos_bytes(m, i, name, &b, &c)) cJSON_AddNumberToObject(kb, name, (double)b);
    }
    cJSON_AddStringToObject(o, "tokenizer", in->tokenizer);
    cJSON_AddStringToObject(o, "chat_template", in->chat_template_name);
    cJSON_AddNumberToObject(o, "bos", in->bos);
    cJSON_AddNumberToObject(o, "eos", in->eos);
    cJSON_AddStringToObject(o, "simd", kvf_simd_level());
    cJSON_AddStringToObject(o, "build", kvf_build_info());
    if (in->has_vision) {
        cJSON *v = cJSON_AddObjectToObject(o, "vision");
        cJSON_AddStringToObject(v, "source", in->vision_source);
        cJSON_AddStringToObject(v, "tower", in->vision_tower);
        cJSON_AddStringToObject(v, "projector", in->vision_projector);
        cJSON_AddNumberToObject(v, "image_size", in->vision_image_size);
        cJSON_AddNumberToObject(v, "patch_size", in->vision_patch_size);
        cJSON_AddNumberToObject(v, "n_layer", in->vision_n_layer);
        cJSON_AddNumberToObject(v, "n_embd", in->vision_n_embd);
        cJSON_AddNumberToObject(v, "n_head", in->vision_n_head);
        cJSON_AddNumberToObject(v, "n_ff", in->vision_n_ff);
        cJSON_AddNumberToObject(v, "image_tokens", in->image_tokens);
        cJSON_AddNumberToObject(v, "image_grid", in->image_grid);
        cJSON_AddNumberToObject(v, "video_frames_per_item", in->video_frames_per_item);
    }
    return o;
}

static void info_print(const struct kvf_model *m, const char *file, const struct kvf_model_info *in) {
    printf("file            %s\n", file);
    printf("name            %s\n", in->name);
    printf("architecture    %s (%s)\n", in->arch, in->source);
    printf("layers          %d\n", in->n_layer);
    printf("embedding       %d\n", in->n_embd);
    printf("heads           %d (kv heads %d, head dim %d)\n", in->n_head, in->n_head_kv, in->head_dim);
    printf("feed-forward    %d\n", in->n_ff);
    printf("vocabulary      %d\n", in->n_vocab);
    printf("train context   %d\n", in->n_ctx_train);
    if (in->sliding_window > 0)
        printf("sliding window  %d (local rope base %g)\n", in->sliding_window, in->rope_base_local);
    else
        printf("sliding window  none\n");
    printf("rope            base %g, %s", in->rope_base, in->rope_style == KVF_ROPE_NEOX ? "neox" : "norm");
    if (in->rope_sections[0] + in->rope_sections[1] + in->rope_sections[2] > 0)
        printf(", M-RoPE pairs %d/%d/%d (time/height/width)", in->rope_sections[0], in->rope_sections[1],
               in->rope_sections[2]);
    if (in->rope_scaling && strcmp(in->rope_scaling, "none") != 0) {
        printf(", scaling %s", in->rope_scaling);
        if (in->rope_scaling_factor != 1.0f) printf(" x%g", in->rope_scaling_factor);
        if (in->sliding_window > 0) printf(" (global layers)");
    }
    putchar('\n');
    printf("norm eps        %g\n", in->norm_eps);
    printf("parameters      %.1f M\n", (double)in->n_params / 1e6);
    printf("weights         %.1f MiB (%s)\n", (double)in->weight_bytes / MIB, in->weight_types);
    printf("tokenizer       %s (bos %d, eos %d)\n", in->tokenizer, in->bos, in->eos);
    printf("chat template   %s\n", in->chat_template_name);
    printf("simd            %s\n", kvf_simd_level());
    if (in->decode_bytes > 0) {
        printf("decoding        %.1f MiB of weights streamed a token\n", (double)in->decode_bytes / MIB);
        printf("kernels         %s\n", in->kernels);
    }
    printf("kv cache        bytes a position (keys, values, tags; -ctk/-ctv):");
    for (int i = 0; i < N_POS_TYPES; i++) {
        char name[32];
        size_t b, c;
        if (!pos_bytes(m, i, name, &b, &c)) continue;
        printf("%s %s %zu", i ? "," : "", name, b);
        if (c) printf(" (+ %zu a cache)", c);
    }
    printf("%s\n", in->sliding_window > 0 ? " (sliding-window layers hold only their window)" : "");
    const char *zap = kvf_kvzap_default_path(m);
    if (access(zap, F_OK) == 0) printf("kvzap scorer    %s\n", zap);
    else printf("kvzap scorer    none (%s; `kvfold calibrate` fits one for --kv kvzap)\n", zap);
    printf("build           %s\n", kvf_build_info());
    if (in->has_vision && in->image_grid > 0)
        printf("vision          %s: %s, %d layers of width %d (%d heads, ff %d), image %d, patch %d, "
               "projector %s -> %d tokens (%dx%d grid)\n", in->vision_source, in->vision_tower, in->vision_n_layer,
               in->vision_n_embd, in->vision_n_head, in->vision_n_ff, in->vision_image_size, in->vision_patch_size,
               in->vision_projector, in->image_tokens, in->image_grid, in->image_grid);
    else if (in->has_vision && !strcmp(in->vision_projector, "idefics3"))
        printf("vision          %s: %s, %d layers of width %d (%d heads, ff %d), tiles of %d and the whole image, "
               "patch %d, projector %s -> up to %d tokens\n", in->vision_source, in->vision_tower, in->vision_n_layer,
               in->vision_n_embd, in->vision_n_head, in->vision_n_ff, in->vision_image_size, in->vision_patch_size,
               in->vision_projector, in->image_tokens);
    else if (in->has_vision)
        printf("vision          %s: %s, %d layers of width %d (%d heads, ff %d), the image's own size, patch %d, "
               "projector %s -> up to %d tokens\n", in->vision_source, in->vision_tower, in->vision_n_layer,
               in->vision_n_embd, in->vision_n_head, in->vision_n_ff, in->vision_patch_size, in->vision_projector,
               in->image_tokens);
    if (in->video_frames_per_item > 1)
        printf("video           %d frames a temporal patch (--video, --frame)\n", in->video_frames_per_item);
    else if (in->video_frames_per_item == 1)
        printf("video           each frame encoded as an image (--video, --frame)\n");
    else if (in->has_vision)
        printf("video           none (images only)\n");
}

static int cmd_info(const struct args *a) {
    struct kvf_model *m = NULL;
    int rc = load_model(a, &m);
    if (rc)
        return rc;
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    if (a->json)
        rc = print_json(info_json(m, a->model, &in));
    else
        info_print(m, a->model, &in);
    kvf_model_free(m);
    return rc;
}

const struct command info_command = {
    .name = "info",
    .summary = "Print a model's architecture, sizes, weight types, tokenizer and chat template.",
    .usage = "-m FILE [--json]",
    .run = cmd_info,
    .opts = info_opts,
};
