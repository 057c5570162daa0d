/* A request to kvfold serve. The first byte picks the endpoint and the
 * server: bit 0 /v1/chat/completions (else /v1/completions), bit 1 the tiny
 * LLaVA with its vision tower (else the same decoder without one), bit 2
 * --media-dir the fixtures' folder, bits 3-5 --chat-template (templates[],
 * modulo). The rest is the body, read by serve_job_parse
 * (tools/kvfold/serve/request.c) as the HTTP side reads it. An accepted job then
 * goes through the cheap part of what the scheduler does with it first: its
 * text tokenized, its images decoded under the server's pixel limit (not
 * through the vision tower: fuzz_image does that). No HTTP, no threads. */
#include "fuzz.h"
#include "serve/serve.h"

#include <stdlib.h>
#include <string.h>

/* --max-image-mpix: 4 Mpixel, as fuzz_image, so that one input stays within
 * libFuzzer's memory limit whatever its shape (serve's default is 64). */
#define MAX_IMAGE_MPIX 4.0f

static const char *const templates[] = {NULL, "llama2", "vicuna", "chatml", "gemma"};

/* What the scheduler's prompt starts from: the text tokenized as the job
 * says (special: the chat template's markup), every id in the vocabulary. */
static void tokenize(const struct server *srv, const struct serve_job *j) {
    const size_t len = strlen(j->text);
    int32_t n = 0;
    if (kvf_tokenize(srv->m, j->text, len, NULL, 0, true, j->special, &n) != KVF_ERR_BUFFER) return;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (ids && kvf_tokenize(srv->m, j->text, len, ids, n, true, j->special, &n) == KVF_OK)
        for (int32_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= srv->info.n_vocab) __builtin_trap();
    free(ids);
}

/* Each image as the scheduler decodes it (job_encode_images). */
static void decode_images(const struct server *srv, const struct serve_job *j) {
    const int64_t max = image_max_pixels(srv->a);
    for (int i = 0; i < j->n_images; i++) {
        const struct serve_image *im = &j->images[i];
        struct kvf_image *img = NULL;
        const enum kvf_status st = kvf_image_load_memory(im->data, im->n, max, &img);
        if (st == KVF_OK && (int64_t)kvf_image_width(img) * kvf_image_height(img) > max)
            __builtin_trap(); /* the limit was not honoured */
        kvf_image_free(img);
    }
}

/* What an accepted job promises the scheduler, and a refusal the client. */
static void check(const struct server *srv, const struct serve_job *j, bool ok, const struct serve_error *e) {
    if (!ok) {
        if (e->status < 400 || e->status > 599 || !e->code || !e->msg[0]) __builtin_trap();
        return;
    }
    if (!j->text || j->n_images > srv->a->serve.max_images || (j->n_images && !srv->info.has_vision) ||
        j->n_stops > SERVE_STOP_MAX || j->max_tokens < 0)
        __builtin_trap();
    for (int i = 0; i < j->n_stops; i++)
        if (!j->stops[i][0]) __builtin_trap();
    for (int i = 0; i < j->n_images; i++)
        if (!j->images[i].data || j->images[i].n > srv->max_body) __builtin_trap(); /* read, within --max-body */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct kvf_model *models[2]; /* [vision]; read only, but struct server's field is not const */
    static char media_dir[FUZZ_PATH_MAX];
    if (!models[0]) {
        json_hooks_init(); /* as main() does: the parse under its allocation budget */
        models[0] = (struct kvf_model *)fuzz_fixed_model("llava-f32.gguf", NULL, false);
        models[1] = (struct kvf_model *)fuzz_fixed_model("llava-f32.gguf", "llava-mmproj-f32.gguf", false);
        fuzz_fixture_path("", media_dir);
    }
    if (size == 0) return 0;
    const unsigned flags = data[0];
    const bool chat = flags & 1;
    /* serve's defaults (serve_defaults) where the parser reads them */
    const struct args a = {.model = "llava-f32.gguf",
                           .chat_template = templates[(flags >> 3) % 5],
                           .serve = {.media_dir = flags & 4 ? media_dir : NULL, .max_body = "64MiB", .max_images = 8},
                           .max_image_mpix = MAX_IMAGE_MPIX,
                           .threads = 1};
    struct server srv = {.a = &a, .m = models[flags >> 1 & 1], .model_id = a.model, .max_body = (size_t)64 << 20};
    kvf_model_get_info(srv.m, &srv.info);
    /* the body as the HTTP side holds it (a strbuf, NUL after its bytes) */
    struct strbuf body = {0};
    if (size > 1 && !strbuf_put(&body, (const char *)data + 1, size - 1)) return 0;
    struct serve_job j = {.chat = chat, .sampling = kvf_sampler_default_params()};
    struct serve_error e = {0};
    const bool ok = serve_job_parse(&srv, body.s, body.n, chat, &j, &e);
    check(&srv, &j, ok, &e);
    if (ok) {
        tokenize(&srv, &j);
        decode_images(&srv, &j);
    }
    serve_job_request_free(&j);
    free(body.s);
    return 0;
}
