/* kvfold serve's requests: a request body (JSON) becomes a serve_job or a
 * serve_error. Apart from http.c's HTTP, so that the fuzz harness
 * (tests/fuzz/fuzz_serve.c) runs it without libmicrohttpd or threads. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SERVE_MSG_MAX 64 /* messages in one chat request */

bool serve_error_set(struct serve_error *e, int status, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->status = status;
    e->code = code;
    return false;
}

static int b64_value(int ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

/* Standard base64 (padding optional); false on any other byte. */
static bool b64_decode(const char *s, size_t n, unsigned char **out, size_t *len) {
    while (n > 0 && s[n - 1] == '=')
        n--;
    unsigned char *buf = malloc(n / 4 * 3 + 3);
    if (!buf || n % 4 == 1) {
        free(buf);
        return false;
    }
    size_t o = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        const int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(buf);
            return false;
        }
        acc = acc << 6 | (uint32_t)v;
        if (i % 4 == 3) {
            buf[o++] = (unsigned char)(acc >> 16);
            buf[o++] = (unsigned char)(acc >> 8);
            buf[o++] = (unsigned char)acc;
        }
    }
    if (n % 4 == 2)
        buf[o++] = (unsigned char)(acc >> 4);
    else if (n % 4 == 3) {
        buf[o++] = (unsigned char)(acc >> 10);
        buf[o++] = (unsigned char)(acc >> 2);
    }
    *out = buf;
    *len = o;
    return true;
}

/* Where the system says the file open as fd is (a path without links);
 * false where it does not say. */
static bool fd_path(int fd, char path[PATH_MAX]) {
#ifdef F_GETPATH
    return fcntl(fd, F_GETPATH, path) != -1;
#else
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, path, PATH_MAX - 1);
    if (n <= 0 || n >= PATH_MAX - 1)
        return false;
    path[n] = '\0';
    return true;
#endif
}

/* Whether real (a path without links) is under the folder dir: the
 * folder's own real path ends in '/' (only "/" does) or the next character
 * of real is one. */
static bool path_under(const char *dir, const char *real) {
    char root[PATH_MAX];
    if (!realpath(dir, root))
        return false;
    const size_t n = strlen(root);
    return strncmp(real, root, n) == 0 && (root[n - 1] == '/' || real[n] == '/');
}

/* A file:// URL's file under --media-dir, read now, so that nothing looks
 * its path up again when the job is prepared. nth: the image's number (1,
 * 2, ...) for messages; room: the bytes the request's images may still
 * hold (--max-body in all). */
static bool image_from_file(const struct server *srv, const char *url, int nth, size_t room,
                            struct serve_image *img, struct serve_error *e) {
    const char *dir = srv->a->serve.media_dir, *path = url + 7;
    char real[PATH_MAX], seen[PATH_MAX];
    struct stat ps, fs;
    if (!dir)
        return serve_error_set(e, 400, "invalid_image_url", "file:// URLs are refused (the server has no --media-dir)");
    /* The path first, so that nothing out of the folder is ever opened. */
    if (!realpath(path, real) || !path_under(dir, real))
        return serve_error_set(e, 400, "invalid_image_url", "%s: not a file under --media-dir", url);
    if (stat(real, &ps) != 0 || !S_ISREG(ps.st_mode))
        return serve_error_set(e, 400, "invalid_image", "image %d: not a readable image: %s: not a regular file",
                               nth, real);
    /* Then the open file: where the system says it is (else where real
     * leads now) is under the folder and names this very file (device and
     * inode), so a link swapped in between cannot pass another file off as
     * the one checked; the bytes read are the open file's. O_NONBLOCK: a
     * FIFO swapped in does not hold the open. */
    const int fd = open(real, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return serve_error_set(e, 400, "invalid_image", "image %d: not a readable image: %s: cannot open: %s", nth,
                               real, strerror(errno));
    bool ok = fstat(fd, &fs) == 0 && (fd_path(fd, seen) || realpath(real, seen)) && path_under(dir, seen) &&
              stat(seen, &ps) == 0 && ps.st_dev == fs.st_dev && ps.st_ino == fs.st_ino;
    if (!ok)
        serve_error_set(e, 400, "invalid_image_url", "%s: not a file under --media-dir", url);
    else if (!S_ISREG(fs.st_mode))
        ok = serve_error_set(e, 400, "invalid_image", "image %d: not a readable image: %s: not a regular file",
                             nth, real);
    else if (fs.st_size < 0 || (uint64_t)fs.st_size > room)
        ok = serve_error_set(e, 413, "image_too_large",
                             "image %d: %s is %lld bytes; a request's images may hold %zu bytes in all (--max-body)",
                             nth, real, (long long)fs.st_size, srv->max_body);
    else if (!(img->data = malloc((size_t)fs.st_size + 1))) /* + 1: an empty file too */
        ok = serve_error_set(e, 500, "server_error", "out of memory");
    while (ok && img->n < (size_t)fs.st_size) { /* a file that shrank meanwhile ends early */
        const ssize_t got = read(fd, img->data + img->n, (size_t)fs.st_size - img->n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            ok = serve_error_set(e, 400, "invalid_image", "image %d: not a readable image: %s: %s", nth, real,
                                 strerror(errno));
        else if (got == 0)
            break;
        else
            img->n += (size_t)got;
    }
    close(fd);
    if (!ok) { /* the job holds only the images it took */
        free(img->data);
        *img = (struct serve_image){0};
    }
    return ok;
}

/* An image_url: a data:image/...;base64, URL, or file:// under --media-dir
 * (its bytes, decoded later, when its job is prepared). nth and room as
 * image_from_file's. */
static bool image_from_url(const struct server *srv, const char *url, int nth, size_t room,
                           struct serve_image *img, struct serve_error *e) {
    if (strncmp(url, "data:", 5) == 0) {
        const char *comma = strchr(url, ',');
        if (!comma || strncmp(url + 5, "image/", 6) != 0 || comma - url < 12 || strncmp(comma - 7, ";base64", 7))
            return serve_error_set(e, 400, "invalid_image_url", "a data URL must be data:image/TYPE;base64,DATA");
        if (!b64_decode(comma + 1, strlen(comma + 1), &img->data, &img->n))
            return serve_error_set(e, 400, "invalid_image_url", "the data URL's base64 is malformed");
    } else if (strncmp(url, "file://", 7) == 0) {
        return image_from_file(srv, url, nth, room, img, e);
    } else {
        return serve_error_set(e, 400, "invalid_image_url",
                   "image URLs must be data:image/...;base64 or file:// under --media-dir");
    }
    return true;
}

/* Media go in as image_url parts only: a marker in a request's text would
 * take an image that is not there, or one meant for another marker, so it
 * is refused here rather than when the job's prompt is built. */
static bool text_ok(const char *t, struct serve_error *e) {
    if (strstr(t, KVF_MARKER_IMAGE) || strstr(t, KVF_MARKER_VIDEO))
        return serve_error_set(e, 400, "invalid_content",
                "text may not contain %s or %s (the media markers); send images as image_url parts",
                KVF_MARKER_IMAGE, KVF_MARKER_VIDEO);
    return true;
}

/* A message's content: a string, or parts (text; image_url, which becomes
 * an <image> marker and an image of the job). */
static bool content_text(const struct server *srv, const cJSON *content, struct serve_job *j, struct strbuf *b,
                         struct serve_error *e) {
    if (cJSON_IsString(content))
        return text_ok(content->valuestring, e) &&
               (strbuf_put(b, content->valuestring, strlen(content->valuestring)) ||
                serve_error_set(e, 500, "server_error", "out of memory"));
    if (!cJSON_IsArray(content))
        return serve_error_set(e, 400, "invalid_type", "a message's content must be a string or an array of parts");
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "type"));
        if (type && strcmp(type, "text") == 0) {
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "text"));
            if (!t)
                return serve_error_set(e, 400, "invalid_type", "a text part needs a string 'text'");
            if (!text_ok(t, e))
                return false;
            if (!strbuf_put(b, t, strlen(t)))
                return serve_error_set(e, 500, "server_error", "out of memory");
            continue;
        }
        if (!type || strcmp(type, "image_url") != 0)
            return serve_error_set(e, 400, "invalid_type", "content parts are {type: text} or {type: image_url}");
        const cJSON *iu = cJSON_GetObjectItemCaseSensitive(part, "image_url");
        const char *url = cJSON_IsString(iu) ? iu->valuestring
                                             : cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(iu, "url"));
        if (!url)
            return serve_error_set(e, 400, "invalid_type", "an image_url part needs image_url.url");
        if (!srv->info.has_vision)
            return serve_error_set(e, 400, "invalid_request",
                    "the model has no vision tower (start the server with --mmproj)");
        if (j->n_images >= srv->a->serve.max_images)
            return serve_error_set(e, 400, "too_many_images", "more than %d images (--max-images)",
                                   srv->a->serve.max_images);
        size_t held = 0; /* the bytes of the request's images so far */
        for (int i = 0; i < j->n_images; i++)
            held += j->images[i].n;
        if (!image_from_url(srv, url, j->n_images + 1, srv->max_body - MIN(held, srv->max_body),
                            &j->images[j->n_images], e))
            return false;
        j->n_images++;
        if (!strbuf_put(b, KVF_MARKER_IMAGE "\n", strlen(KVF_MARKER_IMAGE "\n")))
            return serve_error_set(e, 500, "server_error", "out of memory");
    }
    return true;
}

/* The messages through the chat template. */
static bool chat_prompt(const struct server *srv, const cJSON *msgs, struct serve_job *j, struct serve_error *e) {
    static const char *const roles[] = { "system", "user", "assistant", "developer" };
    const int n = cJSON_GetArraySize(msgs);
    if (!cJSON_IsArray(msgs) || n == 0 || n > SERVE_MSG_MAX)
        return serve_error_set(e, 400, "invalid_messages",
                "'messages' must be an array of 1 to %d messages", SERVE_MSG_MAX);
    struct kvf_chat_message cm[SERVE_MSG_MAX];
    struct strbuf texts[SERVE_MSG_MAX] = {{0}};
    bool ok = (j->images = calloc((size_t)srv->a->serve.max_images + 1, sizeof *j->images)) != NULL ||
              serve_error_set(e, 500, "server_error", "out of memory");
    for (int i = 0; ok && i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(msgs, i);
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
        size_t r = 0;
        while (role && r < COUNT_OF(roles) && strcmp(role, roles[r]) != 0)
            r++;
        if (!role || r == COUNT_OF(roles)) {
            ok = serve_error_set(e, 400, "invalid_role",
                    "message %d: role must be system, developer, user or assistant", i);
            break;
        }
        /* Templates know "system"; OpenAI's newer name for it is "developer". */
        cm[i].role = r == 3 ? "system" : roles[r];
        ok = content_text(srv, cJSON_GetObjectItemCaseSensitive(m, "content"), j, &texts[i], e) &&
             (texts[i].s || strbuf_put(&texts[i], "", 0) || serve_error_set(e, 500, "server_error", "out of memory"));
        cm[i].content = texts[i].s;
    }
    const char *name = chat_template_for(srv->a, srv->m);
    int32_t need = 0, len;
    if (ok && kvf_chat_apply(srv->m, name, cm, n, true, NULL, 0, &need) != KVF_ERR_BUFFER)
        ok = serve_error_set(e, 400, "invalid_messages", "chat template: %s", kvf_last_error());
    if (ok && (!(j->text = malloc((size_t)need)) || kvf_chat_apply(srv->m, name, cm, n, true, j->text, need, &len)))
        ok = serve_error_set(e, 500, "server_error", "out of memory for the chat text");
    for (int i = 0; i < n && i < SERVE_MSG_MAX; i++)
        free(texts[i].s);
    return ok;
}

/* An integer field in [lo, hi]; absent: true and *out untouched. */
static bool field_int(const cJSON *o, const char *name, double lo, double hi, double *out, struct serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return serve_error_set(e, 400, "invalid_value", "'%s' must be an integer in [%.0f, %.0f]", name, lo, hi);
    *out = v->valuedouble;
    return true;
}

static bool field_num(const cJSON *o, const char *name, double lo, double hi, float *out, struct serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi)
        return serve_error_set(e, 400, "invalid_value", "'%s' must be a number in [%g, %g]", name, lo, hi);
    *out = (float)v->valuedouble;
    return true;
}

static bool field_bool(const cJSON *o, const char *name, bool *out, struct serve_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsBool(v))
        return serve_error_set(e, 400, "invalid_type", "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return true;
}

static bool stops_parse(const cJSON *v, struct serve_job *j, struct serve_error *e) {
    const cJSON *s;
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsString(v) && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) <= SERVE_STOP_MAX))
        return serve_error_set(e, 400, "invalid_stop",
                "'stop' must be a string or an array of at most %d strings", SERVE_STOP_MAX);
    for (s = cJSON_IsString(v) ? v : v->child; s; s = cJSON_IsString(v) ? NULL : s->next) {
        if (!cJSON_IsString(s) || !s->valuestring[0])
            return serve_error_set(e, 400, "invalid_stop", "stop sequences must be non-empty strings");
        if (!(j->stops[j->n_stops++] = strdup(s->valuestring)))
            return serve_error_set(e, 500, "server_error", "out of memory");
    }
    return true;
}

/* The fields both endpoints share (model, sampling, limits, stream, kv). */
static bool common_parse(const cJSON *o, struct serve_job *j, struct serve_error *e) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    /* Any name is the one model, as llama-server answers: client code is
     * often written for another server's model names (--alias names ours). */
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return serve_error_set(e, 400, "invalid_type", "'model' must be a string");
    double max_tokens = 0, seed = (double)j->sampling.seed, n = 1;
    j->sampling.temp = 1.0f;  /* OpenAI's defaults: temperature 1, nucleus off */
    j->sampling.top_p = 1.0f;
    j->sampling.top_k = 0;
    j->sampling.min_p = 0.0f;
    double top_k = 0;
    if (!field_int(o, "max_tokens", 1, 1 << 24, &max_tokens, e) ||
        !field_int(o, "max_completion_tokens", 1, 1 << 24, &max_tokens, e) ||
        !field_int(o, "seed", 0, 9007199254740991.0, &seed, e) || !field_int(o, "n", 1, 1, &n, e) ||
        !field_num(o, "temperature", 0, 2, &j->sampling.temp, e) ||
        !field_num(o, "top_p", 0, 1, &j->sampling.top_p, e) || !field_int(o, "top_k", 0, 1 << 30, &top_k, e) ||
        !field_num(o, "min_p", 0, 1, &j->sampling.min_p, e) || !field_bool(o, "stream", &j->stream, e) ||
        !field_bool(o, "ignore_eos", &j->ignore_eos, e) ||
        !stops_parse(cJSON_GetObjectItemCaseSensitive(o, "stop"), j, e))
        return false;
    j->max_tokens = (int)max_tokens;
    j->sampling.seed = (uint64_t)seed;
    j->sampling.top_k = (int)top_k;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (so && !cJSON_IsNull(so) && !cJSON_IsObject(so))
        return serve_error_set(e, 400, "invalid_type", "'stream_options' must be an object");
    if (so && !field_bool(so, "include_usage", &j->include_usage, e))
        return false;
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(o, "user");
    if (user && !cJSON_IsNull(user)) {
        if (!cJSON_IsString(user) || !user->valuestring[0] || strlen(user->valuestring) > SERVE_CONV_MAX)
            return serve_error_set(e, 400, "invalid_type", "'user' must be a string of 1 to %d bytes", SERVE_CONV_MAX);
        j->has_conv = true;
        j->conv = serve_conv_hash(user->valuestring);
    }
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(o, "kv");
    if (kv && !cJSON_IsNull(kv)) {
        if (!cJSON_IsString(kv))
            return serve_error_set(e, 400, "invalid_kv", "'kv' must be a policy string such as \"snapkv:budget=0.2\"");
        if (kvf_kv_policy_check(kv->valuestring) != KVF_OK)
            return serve_error_set(e, 400, "invalid_kv", "kv: %s", kvf_last_error());
        /* the keys that name a file: a client must not make the server read its files (kvzap without
         * scorer= reads the model's own, beside it) */
        if (strstr(kv->valuestring, "profile=") || strstr(kv->valuestring, "scorer="))
            return serve_error_set(e, 400, "invalid_kv", "kv: a request cannot name a file of the server "
                                   "(profile=, scorer=); give the server its files with --kv");
        if (!(j->kv = strdup(kv->valuestring)))
            return serve_error_set(e, 500, "server_error", "out of memory");
    }
    return true;
}

uint64_t serve_conv_hash(const char *key) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

bool serve_job_parse(const struct server *srv, const char *body, size_t n, bool chat, struct serve_job *j,
                     struct serve_error *e) {
    bool too_big;
    cJSON *o = json_parse(body, n, &too_big);
    bool ok;
    if (too_big) {
        ok = serve_error_set(e, 413, "body_too_large", "the body's JSON would take over %zu bytes to hold",
                             json_parse_limit(n));
    } else if (!cJSON_IsObject(o)) {
        ok = serve_error_set(e, 400, "invalid_json", "the body must be a JSON object");
    } else if (!(ok = common_parse(o, j, e))) {
    } else if (chat) {
        j->special = true; /* the template's markup is control-token text */
        ok = chat_prompt(srv, cJSON_GetObjectItemCaseSensitive(o, "messages"), j, e);
    } else {
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "prompt"));
        ok = !p ? serve_error_set(e, 400, "invalid_prompt", "'prompt' must be a string")
                : text_ok(p, e) && ((j->text = strdup(p)) != NULL ||
                                    serve_error_set(e, 500, "server_error", "out of memory"));
    }
    cJSON_Delete(o);
    return ok;
}

void serve_job_request_free(struct serve_job *j) {
    for (int i = 0; j->images && i < j->n_images; i++)
        free(j->images[i].data);
    free(j->images);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    free(j->kv);
    free(j->text);
}
