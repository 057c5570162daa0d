/* What goes into the model (see cli.h): text and chat templates, tokens,
 * media (images, frames, video directories, pseudo-images) and prompts. */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------- text, tokens -- */

bool strbuf_put(struct strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = MAX(b->cap * 2, b->n + n + 64);
        char *p = realloc(b->s, cap);
        if (!p)
            return false;
        b->s = p;
        b->cap = cap;
    }
    if (n) /* s may be NULL then (an empty piece) */
        memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return true;
}

int tokenize_text(const struct kvf_model *m, const char *text, size_t len, bool bos, bool special, int32_t **out,
                  int32_t *n) {
    if (len > INT32_MAX / 2) {
        print_error("input of %zu bytes is too long", len);
        return EXIT_INPUT;
    }
    int32_t cap = (int32_t)len + 16;
    for (int tries = 0; tries < 2; tries++) {
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) {
            print_error("out of memory for %d tokens", cap);
            return EXIT_RUNTIME;
        }
        int32_t got = 0;
        const enum kvf_status st = kvf_tokenize(m, text, len, ids, cap, bos, special, &got);
        if (st == KVF_OK) {
            *out = ids;
            *n = got;
            return 0;
        }
        free(ids);
        if (st != KVF_ERR_BUFFER)
            return fail(st, "tokenize");
        cap = got;
    }
    print_error("tokenizer: inconsistent token counts");
    return EXIT_RUNTIME;
}

int32_t token_piece(const struct kvf_model *m, int32_t tok, char **buf, int32_t *cap) {
    int32_t n = 0;
    enum kvf_status st = kvf_token_to_piece(m, tok, *buf, *cap, false, &n);
    if (st == KVF_ERR_BUFFER) {
        char *nb = realloc(*buf, (size_t)n);
        if (!nb)
            return -1;
        *buf = nb;
        *cap = n;
        st = kvf_token_to_piece(m, tok, *buf, *cap, false, &n);
    }
    return st == KVF_OK ? n : -1;
}

bool wants_chat(const struct args *a) { return a->chat || a->chat_template || a->system; }

const char *chat_template_for(const struct args *a, const struct kvf_model *m) {
    /* LLaVA GGUF files rarely carry a template; LLaVA-1.5 speaks Vicuna. */
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    if (!a->chat_template && info.has_vision && strcmp(info.chat_template_name, "none") == 0)
        return "vicuna";
    return a->chat_template;
}

int chat_text(const struct args *a, const struct kvf_model *m, const struct kvf_chat_message *msgs, int n,
                bool add_assistant, char **out) {
    const char *name = chat_template_for(a, m);
    /* No buffer: the size needed (an unknown name fails only without one:
     * the commands check --chat-template first). */
    int32_t need = 0;
    if (kvf_chat_apply(m, name, msgs, n, add_assistant, NULL, 0, &need) != KVF_ERR_BUFFER) {
        print_error("no chat template recognised (%s); pass --chat-template NAME (one of %s)", kvf_last_error(),
                    kvf_chat_templates());
        return EXIT_INPUT;
    }
    int32_t len;
    *out = malloc((size_t)need);
    if (!*out || kvf_chat_apply(m, name, msgs, n, add_assistant, *out, need, &len) != KVF_OK) {
        free(*out);
        *out = NULL;
        print_error("out of memory for the chat text");
        return EXIT_RUNTIME;
    }
    return 0;
}

/* Stands for the last reply when formatting, to find what the template
 * writes after a reply. */
#define REPLY_MARK "KVFOLD_REPLY_MARK"

int chat_next_text(const struct args *a, const struct kvf_model *m, struct kvf_chat_message *msgs, int n, char **out) {
    if (n < 2 || strcmp(msgs[n - 2].role, "assistant") != 0)
        return chat_text(a, m, msgs, n, true, out);
    char *closed = NULL, *marked = NULL, *full = NULL;
    struct kvf_chat_message *last = &msgs[n - 2];
    const char *reply = last->content;
    int rc = chat_text(a, m, msgs, n - 1, false, &closed);
    last->content = REPLY_MARK;
    if (!rc)
        rc = chat_text(a, m, msgs, n - 1, false, &marked);
    last->content = reply;
    if (!rc)
        rc = chat_text(a, m, msgs, n, true, &full);
    if (!rc) {
        /* templates write the conversation so far the same way before a new message */
        size_t k = 0;
        while (closed[k] && closed[k] == full[k])
            k++;
        const char *mark = strstr(marked, REPLY_MARK);
        const char *after = mark ? mark + strlen(REPLY_MARK) : "";
        const size_t na = strlen(after), nf = strlen(full + k);
        if ((*out = malloc(na + nf + 1))) {
            memcpy(*out, after, na);
            memcpy(*out + na, full + k, nf + 1);
        } else {
            rc = fail(KVF_ERR_NOMEM, "chat");
        }
    }
    free(closed);
    free(marked);
    free(full);
    return rc;
}

int build_prompt(const struct args *a, const struct kvf_model *m, const char *text, char **out) {
    if (!wants_chat(a)) {
        *out = strdup(text);
        return *out ? 0 : EXIT_RUNTIME;
    }
    struct kvf_chat_message msgs[2];
    int n = 0;
    if (a->system)
        msgs[n++] = (struct kvf_chat_message){ "system", a->system };
    msgs[n++] = (struct kvf_chat_message){ "user", text };
    return chat_text(a, m, msgs, n, true, out);
}

/* ---------------------------------------------------------------- media -- */

void media_set_free(struct media_set *ms) {
    for (int i = 0; i < ms->n; i++)
        kvf_media_free(ms->items[i]);
    free(ms->items);
    memset(ms, 0, sizeof *ms);
}

void media_set_truncate(struct media_set *ms, int n) {
    for (; ms->n > n; ms->n--)
        kvf_media_free(ms->items[ms->n - 1]);
}

int media_push(struct media_set *ms, struct kvf_media *md) {
    if (ms->n == ms->cap) {
        int cap = ms->cap ? 2 * ms->cap : 8;
        struct kvf_media **it = realloc(ms->items, (size_t)cap * sizeof *it);
        if (!it) {
            kvf_media_free(md);
            return fail(KVF_ERR_NOMEM, "media");
        }
        ms->items = it;
        ms->cap = cap;
    }
    ms->items[ms->n++] = md;
    if (!kvf_media_is_synthetic(md)) {
        ms->n_encoded++;
        ms->encode_ms += kvf_media_encode_ms(md);
    }
    return 0;
}

int64_t image_max_pixels(const struct args *a) {
    return a->max_image_mpix > 0 ? (int64_t)((double)a->max_image_mpix * 1e6) : 0;
}

int media_encode(const struct args *a, const struct kvf_model *m, const struct kvf_image *img, const char *label,
                 struct media_set *ms) {
    struct kvf_media *md;
    enum kvf_status st = kvf_media_encode_image(m, img, KVF_MOD_IMAGE, a->threads, &md);
    if (st != KVF_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot encode '%s'", label);
        return fail(st, what);
    }
    return media_push(ms, md);
}

int media_image_file(const struct args *a, const struct kvf_model *m, const char *path, struct media_set *ms) {
    struct kvf_image *img;
    enum kvf_status st = kvf_image_load(path, image_max_pixels(a), &img);
    if (st != KVF_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot read image '%s'", path);
        return fail(st, what);
    }
    int rc = media_encode(a, m, img, path, ms);
    kvf_image_free(img);
    return rc;
}

static int name_cmp(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static bool is_image_name(const char *n) {
    static const char *const ext[] = { ".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm", ".tga", ".gif" };
    const char *dot = strrchr(n, '.');
    for (size_t i = 0; dot && i < COUNT_OF(ext); i++)
        if (strcasecmp(dot, ext[i]) == 0)
            return true;
    return false;
}

/* The image files of dir, sorted by name; *n gets their count. */
static int frame_names(const char *dir, char ***out, int *n) {
    DIR *d = opendir(dir);
    if (!d) {
        print_error("cannot open video directory '%s': %s", dir, strerror(errno));
        return EXIT_INPUT;
    }
    char **names = NULL;
    int cap = 0, rc = 0;
    *n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!is_image_name(e->d_name))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn) { rc = fail(KVF_ERR_NOMEM, "video"); break; }
            names = nn;
        }
        if (!(names[*n] = strdup(e->d_name))) { rc = fail(KVF_ERR_NOMEM, "video"); break; }
        (*n)++;
    }
    closedir(d);
    if (!rc && *n == 0) {
        print_error("video directory '%s' holds no frame images (png, jpg, bmp, ppm, pgm)", dir);
        rc = EXIT_INPUT;
    }
    if (!rc)
        qsort(names, (size_t)*n, sizeof *names, name_cmp);
    *out = names;
    return rc;
}

/* One video's frame files, in order, through kvf_media_encode_video,
 * appended to ms: read and encoded a few at a time, so that a long video
 * is never in memory whole. */
static int media_video(const struct args *a, const struct kvf_model *m, char *const *paths, int n,
                       struct media_set *ms) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    enum { CHUNK = 8 }; /* frames in memory at once, at most */
    const int per = MAX(info.video_frames_per_item, 1), chunk = per * MAX(CHUNK / per, 1); /* whole items */
    struct kvf_image *img[CHUNK];
    struct kvf_media *md[CHUNK];
    int rc = 0;
    for (int f0 = 0; f0 < n && !rc; f0 += chunk) {
        const int k = MIN(chunk, n - f0);
        int loaded = 0, made = 0;
        for (; loaded < k && !rc; loaded++) {
            const enum kvf_status st = kvf_image_load(paths[f0 + loaded], image_max_pixels(a), &img[loaded]);
            if (st != KVF_OK) {
                char what[512];
                snprintf(what, sizeof what, "cannot read video frame '%s'", paths[f0 + loaded]);
                rc = fail(st, what);
            }
        }
        if (!rc) {
            const enum kvf_status st = kvf_media_encode_video(m, (const struct kvf_image *const *)img, k, f0,
                                                              a->video_fps > 0 ? a->video_fps : 2.0, a->threads,
                                                              md, &made);
            if (st != KVF_OK) {
                char what[512];
                snprintf(what, sizeof what, "cannot encode the video of '%s'", paths[0]);
                rc = fail(st, what);
            }
        }
        for (int i = 0; i < loaded; i++) kvf_image_free(img[i]); /* a failed load left NULL */
        for (int i = 0; i < made; i++)
            if (rc) kvf_media_free(md[i]);
            else rc = media_push(ms, md[i]);
    }
    return rc;
}

int media_video_dir(const struct args *a, const struct kvf_model *m, const char *dir, struct media_set *ms) {
    char **names = NULL;
    int n = 0, rc = frame_names(dir, &names, &n);
    for (int i = 0; !rc && i < n; i++) {
        char *path = malloc(strlen(dir) + strlen(names[i]) + 2);
        if (!path) {
            rc = fail(KVF_ERR_NOMEM, "video");
            break;
        }
        sprintf(path, "%s/%s", dir, names[i]);
        free(names[i]);
        names[i] = path;
    }
    if (!rc) rc = media_video(a, m, names, n, ms);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* FILE:RxC -> a synthetic RxC segment from the words of FILE. */
static int media_pseudo(const struct args *a, const struct kvf_model *m, const char *spec, int index,
                        struct media_set *ms) {
    const char *colon = strrchr(spec, ':');
    int r = 0, c = 0;
    char tail;
    if (!colon || colon == spec || sscanf(colon + 1, "%dx%d%c", &r, &c, &tail) != 2 || r <= 0 || c <= 0) {
        print_error("--pseudo-image '%s': expected FILE:RxC (for example words.txt:24x24)", spec);
        return EXIT_USAGE;
    }
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)(colon - spec), spec);
    char *text;
    size_t len;
    int rc = read_file(path, &text, &len);
    if (rc)
        return rc;
    struct kvf_media *md;
    enum kvf_status st = kvf_media_pseudo_image(m, text, r, c, a->pseudo_noise, a->seed + (uint64_t)index, &md);
    free(text);
    if (st != KVF_OK)
        return fail_option(st, "--pseudo-image");
    return media_push(ms, md);
}

const char *media_marker(const struct media_set *ms, int i) {
    if (kvf_media_modality(ms->items[i]) != KVF_MOD_VIDEO) return KVF_MARKER_IMAGE;
    const bool goes_on = i > 0 && kvf_media_modality(ms->items[i - 1]) == KVF_MOD_VIDEO &&
                         kvf_media_video_index(ms->items[i]) != 0;
    return goes_on ? NULL : KVF_MARKER_VIDEO;
}

int media_build(const struct args *a, const struct kvf_model *m, struct media_set *ms) {
    int rc = 0;
    for (int i = 0; !rc && i < a->n_media; i++) {
        const char *v = a->media[i].value;
        switch (a->media[i].kind) {
        case MEDIA_IMAGE: rc = media_image_file(a, m, v, ms); break;
        case MEDIA_FRAME: { /* consecutive frames: one video */
            char *paths[MEDIA_ARGS_MAX];
            int n = 0;
            for (; i + n < a->n_media && a->media[i + n].kind == MEDIA_FRAME; n++)
                paths[n] = (char *)a->media[i + n].value;
            rc = media_video(a, m, paths, n, ms);
            i += n - 1;
            break;
        }
        case MEDIA_VIDEO_DIR: rc = media_video_dir(a, m, v, ms); break;
        case MEDIA_PSEUDO: rc = media_pseudo(a, m, v, i, ms); break;
        }
    }
    return rc;
}

/* The media item it of a samples line: its kind and path (dir prepended
 * to a relative one) into path; false (an error printed) when malformed. */
static bool sample_item(const char *cmd, const cJSON *it, const char *dir, int line, int i, char *path, size_t n,
                        const char **kind) {
    const cJSON *v = it->child;
    if (!cJSON_IsObject(it) || !v || v->next || !cJSON_IsString(v)) {
        print_error("%s: samples line %d: media item %d is not {\"image\"|\"frame\"|\"pseudo\": PATH}", cmd, line, i);
        return false;
    }
    if (strcmp(v->string, "image") && strcmp(v->string, "frame") && strcmp(v->string, "pseudo")) {
        print_error("%s: samples line %d: unknown media kind '%s' (image, frame, pseudo)", cmd, line, v->string);
        return false;
    }
    snprintf(path, n, "%s%s", v->valuestring[0] == '/' ? "" : dir, v->valuestring);
    *kind = v->string;
    return true;
}

int samples_media(const char *cmd, const struct args *a, const struct kvf_model *m, const cJSON *list, const char *dir,
                  int line, struct media_set *ms) {
    const int n = cJSON_GetArraySize(list);
    char **frames = calloc((size_t)MAX(n, 1), sizeof *frames); /* the run of frames being gathered */
    int rc = frames ? 0 : fail(KVF_ERR_NOMEM, "samples"), n_frames = 0;
    for (int i = 0; i <= n && !rc; i++) {
        char path[4096];
        const char *kind = "";
        if (i < n && !sample_item(cmd, cJSON_GetArrayItem(list, i), dir, line, i, path, sizeof path, &kind)) {
            rc = EXIT_INPUT;
            break;
        }
        if (!strcmp(kind, "frame")) { /* consecutive frames: one video */
            if (!(frames[n_frames++] = strdup(path))) rc = fail(KVF_ERR_NOMEM, "samples");
            continue;
        }
        if (n_frames) rc = media_video(a, m, frames, n_frames, ms);
        for (; n_frames > 0; n_frames--) free(frames[n_frames - 1]);
        if (rc || i == n) break;
        rc = !strcmp(kind, "image") ? media_image_file(a, m, path, ms) : media_pseudo(a, m, path, i, ms);
    }
    for (int i = 0; i < n_frames; i++) free(frames[i]);
    free(frames);
    return rc;
}

/* --------------------------------------------------------------- prompt -- */

int prompt_make(const struct kvf_model *m, const char *text, const struct media_set *ms, bool special,
                struct kvf_prompt **out) {
    enum kvf_status st =
        kvf_prompt_init(m, text, (const struct kvf_media *const *)ms->items, ms->n, true, special, out);
    if (st != KVF_OK)
        return fail(st, "prompt");
    if (kvf_prompt_n_tokens(*out) == 0) {
        kvf_prompt_free(*out);
        *out = NULL;
        print_error("the prompt has no tokens");
        return EXIT_INPUT;
    }
    return 0;
}
