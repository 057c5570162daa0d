/* Runs token ids through a model with the public API and writes the logits
 * after every token as n x n_vocab float32, little-endian, row-major.
 *
 * usage: dump_logits [options] MODEL OUT ID...
 *   --decode OUT2   also reset the session, prefill the first --split ids and
 *                   decode the rest one at a time, writing those n rows to OUT2
 *                   (they must equal the prefill rows)
 *   --split K       ids prefilled before decoding starts (default 0)
 *   --batch N       session n_batch (default: the library's)
 *   --threads N     threads (default: the library's)
 *   --prompt TEXT   instead of ids: a multimodal prompt whose <image> markers
 *                   take the --image files in order (model + --mmproj, or a
 *                   LLaVA directory); writes a row per position and prints
 *                   "n_tokens N" and "ids ..." (-1 where an image embedding
 *                   sits), after checking that every KV entry's tag equals
 *                   the prompt's tag for its position
 *   --kv SPEC       with --prompt: session kv_spec (a reduce stage removes
 *                   rows, so only the last position's logits exist): writes
 *                   that one row, skips the tag check and prints
 *                   "layer_entries N0 N1 ..." (entries of kv head 0 per
 *                   layer) and "layer_pos L P..." (their true positions)
 *   --mmproj FILE   vision projector for a GGUF decoder
 *   --image FILE    (repeatable) image for the next marker
 *   --frame FILE    (repeatable) a video frame: a run of them is one video
 *                   (kvf_media_encode_video) for the next <video> marker
 *   --fps F         the videos' frame rate (default 2)
 *   --image-min-tokens N, --image-max-tokens N
 *                   kvf_model_params' bounds on a Qwen image's tokens
 * Prints "n_vocab N" on stdout. */
#include "kvfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int write_rows(const char *path, const float *rows, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    /* The library runs on little-endian x86-64 only, so native order is LE. */
    size_t w = fwrite(rows, sizeof(float), n, f);
    if (fclose(f) != 0 || w != n) {
        fprintf(stderr, "dump_logits: write to %s failed\n", path);
        return 1;
    }
    return 0;
}

static int fail(const char *what, enum kvf_status st) {
    fprintf(stderr, "dump_logits: %s: %s: %s\n", what, kvf_status_str(st), kvf_last_error());
    return 1;
}

static int usage(void) {
    fprintf(stderr, "usage: dump_logits [--decode OUT2] [--split K] [--batch N] [--threads N] MODEL OUT ID...\n"
                    "       dump_logits [--mmproj F] [--image F | --frame F]... [--fps F] [--kv SPEC]\n"
                    "                   --prompt TEXT MODEL OUT\n");
    return 2;
}

#define MAX_IMAGES 16

/* An --image, or a frame of a video (a run of --frame). */
struct media_arg {
    const char *path;
    bool frame;
};

/* Every head of every layer holds one entry per position with its tag (a
 * sliding-window layer: of the last positions, having freed what fell out
 * of its window). */
static int check_kv_tags(const struct kvf_session *s, const struct kvf_model_info *info, const struct kvf_prompt *p) {
    const struct kvf_tag *want = kvf_prompt_tags(p);
    const int total = kvf_prompt_n_tokens(p);
    for (int l = 0; l < info->n_layer; l++)
        for (int h = 0; h < info->n_head_kv; h++) {
            int n;
            const struct kvf_tag *t = kvf_session_kv_tags(s, l, h, &n);
            const bool windowed = info->sliding_window > 0 && n >= info->sliding_window;
            if (n > total || (n < total && !windowed) ||
                memcmp(t, want + (total - n), (size_t)n * sizeof *t) != 0) {
                fprintf(stderr, "dump_logits: KV tags of layer %d head %d differ from the prompt's\n", l, h);
                return 1;
            }
        }
    return memcmp(kvf_session_tags(s), want, (size_t)kvf_prompt_n_tokens(p) * sizeof *want) != 0;
}

/* What each layer cached (all kv heads hold the same rows), for a reference
 * to check which rows a reduce stage removed. */
static void print_kv_layers(const struct kvf_session *s, int n_layer) {
    int n;
    printf("layer_entries");
    for (int l = 0; l < n_layer; l++) {
        kvf_session_kv_tags(s, l, 0, &n);
        printf(" %d", n);
    }
    printf("\n");
    for (int l = 0; l < n_layer; l++) {
        const struct kvf_tag *t = kvf_session_kv_tags(s, l, 0, &n);
        printf("layer_pos %d", l);
        for (int i = 0; i < n; i++) printf(" %d", t[i].pos);
        printf("\n");
    }
}

/* Encodes args [0, n) into media (at most MAX_IMAGES items): images one by
 * one, each run of frames as one video. */
static int encode_media(struct kvf_model *model, const struct media_arg *args, int n, double fps, int n_threads,
                        struct kvf_media **media, int *n_media) {
    struct kvf_image *img[MAX_IMAGES] = {0};
    enum kvf_status st = KVF_OK;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if ((st = kvf_image_load(args[i].path, 0, &img[i]))) rc = fail(args[i].path, st);
    for (int i = 0; i < n && !rc;) {
        int run = 1, made = 1;
        if (!args[i].frame) {
            st = kvf_media_encode_image(model, img[i], KVF_MOD_IMAGE, n_threads, &media[*n_media]);
        } else {
            while (i + run < n && args[i + run].frame) run++;
            st = kvf_media_encode_video(model, (const struct kvf_image *const *)img + i, run, 0, fps, n_threads,
                                        &media[*n_media], &made);
        }
        if (st) rc = fail("encode", st);
        else *n_media += made, i += run;
    }
    for (int i = 0; i < n; i++) kvf_image_free(img[i]);
    return rc;
}

static int run_prompt(struct kvf_model *model, const char *out, const char *text, const struct media_arg *args,
                      int n_args, double fps, const char *kv, int n_batch, int n_threads) {
    struct kvf_media *media[MAX_IMAGES] = {0};
    int n_images = 0;
    struct kvf_prompt *p = NULL;
    struct kvf_session *s = NULL;
    float *rows = NULL;
    int rc = encode_media(model, args, n_args, fps, n_threads, media, &n_images);
    enum kvf_status st;
    if (rc) goto done;
    rc = 1;
    if ((st = kvf_prompt_init(model, text, (const struct kvf_media *const *)media, n_images, true, false, &p))) {
        rc = fail("prompt", st);
        goto done;
    }
    struct kvf_model_info info;
    kvf_model_get_info(model, &info);
    const int n = kvf_prompt_n_tokens(p);
    struct kvf_session_params sp = kvf_session_default_params();
    /* the references attend in F32; each cache type is compared with F32 in kv_type */
    sp.type_k = sp.type_v = KVF_KV_F32;
    sp.n_ctx = n;
    sp.kv_spec = kv;
    if (n_batch > 0) sp.n_batch = n_batch;
    if (n_threads > 0) sp.n_threads = n_threads;
    if ((st = kvf_session_init(model, &sp, &s))) {
        rc = fail("session", st);
        goto done;
    }
    const size_t V = (size_t)info.n_vocab, n_rows = kv ? 1 : (size_t)n;
    if (!(rows = malloc(n_rows * V * sizeof *rows))) goto done;
    if ((st = kvf_session_prefill_prompt(s, p, kv ? NULL : rows))) {
        rc = fail("prefill", st);
        goto done;
    }
    if (kv) {
        const float *last = kvf_session_logits(s);
        if (!last) {
            fprintf(stderr, "dump_logits: no logits after prefill\n");
            goto done;
        }
        memcpy(rows, last, V * sizeof *rows);
    } else if (check_kv_tags(s, &info, p)) {
        goto done;
    }
    if (write_rows(out, rows, n_rows * V)) goto done;
    printf("n_vocab %d\nn_tokens %d\nids", info.n_vocab, n);
    for (int i = 0; i < n; i++) printf(" %d", kvf_prompt_token(p, i));
    printf("\n");
    if (kv) print_kv_layers(s, info.n_layer);
    rc = 0;
done:
    free(rows);
    kvf_session_free(s);
    kvf_prompt_free(p);
    for (int i = 0; i < n_images; i++) kvf_media_free(media[i]);
    return rc;
}

int main(int argc, char **argv) {
    const char *decode_out = NULL, *mmproj = NULL, *prompt = NULL, *kv = NULL;
    struct media_arg images[MAX_IMAGES];
    int split = 0, n_batch = 0, n_threads = 0, n_images = 0;
    double fps = 2.0;
    int min_tokens = 0, max_tokens = 0;
    int a = 1;
    for (; a + 1 < argc && strncmp(argv[a], "--", 2) == 0; a += 2) {
        if (!strcmp(argv[a], "--decode")) decode_out = argv[a + 1];
        else if (!strcmp(argv[a], "--mmproj")) mmproj = argv[a + 1];
        else if (!strcmp(argv[a], "--prompt")) prompt = argv[a + 1];
        else if (!strcmp(argv[a], "--kv")) kv = argv[a + 1];
        else if ((!strcmp(argv[a], "--image") || !strcmp(argv[a], "--frame")) && n_images < MAX_IMAGES)
            images[n_images++] = (struct media_arg){argv[a + 1], argv[a][2] == 'f'}; /* --frame */
        else if (!strcmp(argv[a], "--fps")) fps = atof(argv[a + 1]);
        else if (!strcmp(argv[a], "--image-min-tokens")) min_tokens = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--image-max-tokens")) max_tokens = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--split")) split = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--batch")) n_batch = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--threads")) n_threads = atoi(argv[a + 1]);
        else return usage();
    }
    if (prompt) {
        if (argc - a != 2) return usage();
        struct kvf_model_params mp = kvf_model_default_params();
        if (n_threads > 0) mp.n_threads = n_threads;
        mp.mmproj = mmproj;
        mp.image_min_tokens = min_tokens;
        mp.image_max_tokens = max_tokens;
        struct kvf_model *model = NULL;
        enum kvf_status st = kvf_model_load(argv[a], &mp, &model);
        if (st) return fail(argv[a], st);
        const int rc = run_prompt(model, argv[a + 1], prompt, images, n_images, fps, kv, n_batch, n_threads);
        kvf_model_free(model);
        return rc;
    }
    if (argc - a < 3 || kv) return usage();
    const char *model_path = argv[a], *out = argv[a + 1];
    int n = argc - a - 2;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return 1;
    for (int i = 0; i < n; i++) {
        char *end;
        long v = strtol(argv[a + 2 + i], &end, 10);
        if (*end || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "dump_logits: bad token id '%s'\n", argv[a + 2 + i]);
            free(ids);
            return 2;
        }
        ids[i] = (int32_t)v;
    }
    if (split < 0 || split > n) {
        fprintf(stderr, "dump_logits: --split %d is not in [0, %d]\n", split, n);
        free(ids);
        return 2;
    }

    struct kvf_model_params mp = kvf_model_default_params();
    if (n_threads > 0) mp.n_threads = n_threads;
    struct kvf_model *model = NULL;
    struct kvf_session *s = NULL;
    float *rows = NULL;
    int rc = 1;
    enum kvf_status st = kvf_model_load(model_path, &mp, &model);
    if (st) {
        rc = fail(model_path, st);
        goto done;
    }
    struct kvf_model_info info;
    kvf_model_get_info(model, &info);
    struct kvf_session_params sp = kvf_session_default_params();
    sp.type_k = sp.type_v = KVF_KV_F32; /* as above */
    sp.n_ctx = n;
    if (n_batch > 0) sp.n_batch = n_batch;
    if (n_threads > 0) sp.n_threads = n_threads;
    if ((st = kvf_session_init(model, &sp, &s))) {
        rc = fail("session", st);
        goto done;
    }
    size_t V = (size_t)info.n_vocab;
    rows = malloc((size_t)n * V * sizeof *rows);
    if (!rows) goto done;
    if ((st = kvf_session_prefill(s, ids, n, rows))) {
        rc = fail("prefill", st);
        goto done;
    }
    if (write_rows(out, rows, (size_t)n * V)) goto done;

    if (decode_out) {
        memset(rows, 0, (size_t)n * V * sizeof *rows);
        kvf_session_reset(s);
        if (split > 0 && (st = kvf_session_prefill(s, ids, split, rows))) {
            rc = fail("prefill", st);
            goto done;
        }
        for (int i = split; i < n; i++) {
            if ((st = kvf_session_decode(s, ids[i]))) {
                rc = fail("decode", st);
                goto done;
            }
            const float *l = kvf_session_logits(s);
            if (!l) {
                fprintf(stderr, "dump_logits: no logits after decode\n");
                goto done;
            }
            memcpy(rows + (size_t)i * V, l, V * sizeof *rows);
        }
        if (kvf_session_n_past(s) != n) {
            fprintf(stderr, "dump_logits: n_past %d after %d tokens\n", kvf_session_n_past(s), n);
            goto done;
        }
        if (write_rows(decode_out, rows, (size_t)n * V)) goto done;
    }
    printf("n_vocab %d\n", info.n_vocab);
    rc = 0;
done:
    free(rows);
    free(ids);
    kvf_session_free(s);
    kvf_model_free(model);
    return rc;
}
