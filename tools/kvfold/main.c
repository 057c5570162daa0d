/* kvfold — the command-line front end of libkvfold.
 *
 *   kvfold info       -m FILE [--json]
 *   kvfold tokenize   -m FILE (-p TEXT | -f FILE) [--bos] [--special]
 *   kvfold generate   -m FILE (-p TEXT | -f FILE) [-n N] [sampling] [--chat] [--json]
 *   kvfold perplexity -m FILE -f TEXTFILE [--ctx N] [--json]
 *   kvfold bench      -m FILE [-p N] [-n N] [-r REPS] [--json]
 *
 * Exit codes: 0 ok, 1 usage error, 2 bad input (files, formats, context),
 * 3 runtime failure. Errors are one line on stderr: "kvfold: error: ...".
 * Unlike the library, this file may print and exit. */
#include "kvfold.h"
#include "core/sys.h"
#include "io/gguf.h"
#include "tok/tokenizer.h"
#include "cli.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

void print_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kvfold: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int exit_code(enum kvf_status st) {
    switch (st) {
    case KVF_OK: return 0;
    case KVF_ERR_NOMEM:
    case KVF_ERR_INTERNAL: return EXIT_RUNTIME;
    default: return EXIT_INPUT;
    }
}

/* Prints "what: status: last error" and returns the exit code for st. */
int fail(enum kvf_status st, const char *what) {
    const char *msg = kvf_last_error();
    if (msg[0])
        print_error("%s: %s: %s", what, kvf_status_str(st), msg);
    else
        print_error("%s: %s", what, kvf_status_str(st));
    return exit_code(st);
}

/* ------------------------------------------------------------ options -- */

/* The option tables point into a struct args, so they are built per call. */
int opts_set(struct opt *dst, const struct opt *src, size_t n) {
    assert(n <= OPT_MAX);
    memcpy(dst, src, n * sizeof *src);
    return (int)n;
}

static bool parse_number(const struct opt *o, const char *v) {
    char *end = NULL;
    errno = 0;
    if (o->kind == OPT_INT) {
        long x = strtol(v, &end, 10);
        if (end == v || *end || errno || x < o->lo || x > o->hi)
            return false;
        *(int *)o->dst = (int)x;
    } else if (o->kind == OPT_FLOAT) {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x) || x < o->lo || x > o->hi)
            return false;
        *(float *)o->dst = (float)x;
    } else {
        while (*v == ' ' || *v == '\t')
            v++;
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == '-' || end == v || *end || errno)
            return false;
        *(uint64_t *)o->dst = x;
    }
    return true;
}

static void print_help(const struct command *c, const struct opt *opts, int n, FILE *f) {
    fprintf(f, "usage: kvfold %s %s\n\n%s\n", c->name, c->usage, c->summary);
    if (c->details)
        fprintf(f, "\n%s\n", c->details);
    fputs("\noptions:\n", f);
    for (int i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", opts[i].shrt ? opts[i].shrt : "", opts[i].shrt ? ", " : "    ",
                 opts[i].lng, opts[i].metavar ? " " : "", opts[i].metavar ? opts[i].metavar : "");
        fprintf(f, "  %-24s %s\n", left, opts[i].help);
    }
    fprintf(f, "  %-24s %s\n", "-h, --help", "show this help");
}

/* Returns -1 to go on, else the exit code (0 after --help). */
static int parse_args(const struct command *c, struct args *a, int argc, char **argv) {
    struct opt opts[OPT_MAX];
    const int n_opts = c->opts(a, opts);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            print_help(c, opts, n_opts, stdout);
            return 0;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            print_error("%s: unexpected argument '%s' (see kvfold %s --help)", c->name, arg, c->name);
            return EXIT_USAGE;
        }
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const struct opt *o = NULL;
        for (int k = 0; k < n_opts && !o; k++) {
            const char *names[2] = { opts[k].lng, opts[k].shrt };
            for (int j = 0; j < 2; j++)
                if (names[j] && strlen(names[j]) == name_len && strncmp(names[j], arg, name_len) == 0)
                    o = &opts[k];
        }
        if (!o) {
            print_error("%s: unknown option '%.*s' (see kvfold %s --help)", c->name, (int)name_len, arg, c->name);
            return EXIT_USAGE;
        }
        if (o->kind == OPT_FLAG) {
            if (eq) {
                print_error("%s: option '%s' takes no value", c->name, o->lng);
                return EXIT_USAGE;
            }
            *(bool *)o->dst = true;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            print_error("%s: option '%s' needs a value (%s)", c->name, arg, o->metavar);
            return EXIT_USAGE;
        }
        if (o->kind == OPT_STR) {
            *(const char **)o->dst = v;
        } else if (o->kind == OPT_LIST) {
            struct str_list *l = o->dst;
            if (l->n == STR_LIST_MAX) {
                print_error("%s: more than %d %s options", c->name, STR_LIST_MAX, o->lng);
                return EXIT_USAGE;
            }
            l->v[l->n++] = v;
        } else if (o->kind == OPT_MEDIA) {
            if (a->n_media == MEDIA_ARGS_MAX) {
                print_error("%s: more than %d media options", c->name, MEDIA_ARGS_MAX);
                return EXIT_USAGE;
            }
            a->media[a->n_media].kind = (enum media_kind)o->lo;
            a->media[a->n_media++].value = v;
        } else if (!parse_number(o, v)) {
            if (o->kind == OPT_U64)
                print_error("%s: option '%s': '%s' is not an unsigned 64-bit integer", c->name, o->lng, v);
            else
                print_error("%s: option '%s': '%s' is not %s in [%g, %g]", c->name, o->lng, v,
                            o->kind == OPT_INT ? "an integer" : "a number", o->lo, o->hi);
            return EXIT_USAGE;
        }
    }
    if (!a->model && !c->no_model) {
        print_error("%s: missing -m FILE (see kvfold %s --help)", c->name, c->name);
        return EXIT_USAGE;
    }
    return -1;
}

/* ------------------------------------------------------------- helpers -- */

/* Reads a whole file; *out is NUL-terminated and owned by the caller. */
int read_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_error("cannot open '%s': %s", path, strerror(errno));
        return EXIT_INPUT;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *nb = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (!nb)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf) {
        print_error("'%s': out of memory", path);
        return EXIT_RUNTIME;
    }
    if (err) {
        free(buf);
        print_error("cannot read '%s'", path);
        return EXIT_INPUT;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* The text given by -p or -f (exactly one of them). */
static int input_text(const char *cmd, const struct args *a, char **text, size_t *len) {
    if (!!a->prompt == !!a->file) {
        print_error("%s: give exactly one of -p TEXT and -f FILE", cmd);
        return EXIT_USAGE;
    }
    if (a->file)
        return read_file(a->file, text, len);
    *len = strlen(a->prompt);
    *text = malloc(*len + 1);
    if (!*text) {
        print_error("out of memory");
        return EXIT_RUNTIME;
    }
    memcpy(*text, a->prompt, *len + 1);
    return 0;
}

int load_model(const struct args *a, struct kvf_model **model) {
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = a->threads;
    mp.mmproj = a->mmproj;
    enum kvf_status st = kvf_model_load(a->model, &mp, model);
    if (st != KVF_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot load '%s'", a->model);
        return fail(st, what);
    }
    return 0;
}

/* ---------------------------------------------------------------- media -- */

void media_set_free(struct media_set *ms) {
    for (int i = 0; i < ms->n; i++)
        kvf_media_free(ms->items[i]);
    free(ms->items);
    memset(ms, 0, sizeof *ms);
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

static int64_t max_pixels(const struct args *a) {
    return a->max_image_mpix > 0 ? (int64_t)((double)a->max_image_mpix * 1e6) : 0;
}

static int media_encode(const struct args *a, const struct kvf_model *m, const struct kvf_image *img,
                        enum kvf_modality mod, const char *label, struct media_set *ms) {
    struct kvf_media *md;
    enum kvf_status st = kvf_media_encode_image(m, img, mod, a->threads, &md);
    if (st != KVF_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot encode '%s'", label);
        return fail(st, what);
    }
    return media_push(ms, md);
}

int media_image_file(const struct args *a, const struct kvf_model *m, const char *path,
                            enum kvf_modality mod, struct media_set *ms) {
    struct kvf_image *img;
    enum kvf_status st = kvf_image_load(path, max_pixels(a), &img);
    if (st != KVF_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot read image '%s'", path);
        return fail(st, what);
    }
    int rc = media_encode(a, m, img, mod, path, ms);
    kvf_image_free(img);
    return rc;
}

static int name_cmp(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static bool is_image_name(const char *n) {
    static const char *const ext[] = { ".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm", ".tga", ".gif" };
    const char *dot = strrchr(n, '.');
    for (size_t i = 0; dot && i < sizeof ext / sizeof *ext; i++)
        if (strcasecmp(dot, ext[i]) == 0)
            return true;
    return false;
}

/* A video as a directory of frames, in name order (frame_0001.png, ...). */
static int media_video_dir(const struct args *a, const struct kvf_model *m, const char *dir, struct media_set *ms) {
    DIR *d = opendir(dir);
    if (!d) {
        print_error("cannot open video directory '%s': %s", dir, strerror(errno));
        return EXIT_INPUT;
    }
    char **names = NULL;
    int n = 0, cap = 0, rc = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!is_image_name(e->d_name))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn) { rc = fail(KVF_ERR_NOMEM, "video"); break; }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) { rc = fail(KVF_ERR_NOMEM, "video"); break; }
        n++;
    }
    closedir(d);
    if (!rc && n == 0) {
        print_error("video directory '%s' holds no frame images (png, jpg, bmp, ppm, pgm)", dir);
        rc = EXIT_INPUT;
    }
    if (!rc)
        qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 0; !rc && i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        rc = media_image_file(a, m, path, KVF_MOD_VIDEO, ms);
    }
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
        return fail(st, "--pseudo-image");
    return media_push(ms, md);
}

/* Every --image / --frame / --video / --pseudo-image, in command-line order. */
static int media_build(const struct args *a, const struct kvf_model *m, struct media_set *ms) {
    int rc = 0;
    for (int i = 0; !rc && i < a->n_media; i++) {
        const char *v = a->media[i].value;
        switch (a->media[i].kind) {
        case MEDIA_IMAGE: rc = media_image_file(a, m, v, KVF_MOD_IMAGE, ms); break;
        case MEDIA_FRAME: rc = media_image_file(a, m, v, KVF_MOD_VIDEO, ms); break;
        case MEDIA_VIDEO_DIR: rc = media_video_dir(a, m, v, ms); break;
        case MEDIA_PSEUDO: rc = media_pseudo(a, m, v, i, ms); break;
        }
    }
    return rc;
}

/* The prompt with its markers filled by the media. */
int prompt_make(const struct kvf_model *m, const char *text, const struct media_set *ms, bool special,
                       struct kvf_prompt **out) {
    enum kvf_status st = kvf_prompt_init(m, text, (const struct kvf_media *const *)ms->items, ms->n, true, special, out);
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

int tokenize(const struct kvf_model *m, const char *text, size_t len, bool bos, bool special,
                    int32_t **out, int32_t *n) {
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
        int32_t r = kvf_tokenize(m, text, len, ids, cap, bos, special);
        if (r >= 0) {
            *out = ids;
            *n = r;
            return 0;
        }
        free(ids);
        cap = -r;
    }
    print_error("tokenizer: inconsistent token counts");
    return EXIT_RUNTIME;
}

bool strbuf_put(struct strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = KVF_MAX(b->cap * 2, b->n + n + 64);
        char *p = realloc(b->s, cap);
        if (!p)
            return false;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return true;
}

/* Text of one token; returns the byte count or -1. *buf grows as needed. */
int32_t token_piece(const struct kvf_model *m, int32_t tok, char **buf, int32_t *cap) {
    int32_t r = kvf_token_to_piece(m, tok, *buf, *cap, false);
    if (r < 0) {
        char *nb = realloc(*buf, (size_t)-r);
        if (!nb)
            return -1;
        *buf = nb;
        *cap = -r;
        r = kvf_token_to_piece(m, tok, *buf, *cap, false);
    }
    return r;
}

/* A copy of s[0..n) that is valid UTF-8 without NULs (invalid bytes and NUL
 * become U+FFFD), so that JSON consumers can parse it: generation can stop
 * in the middle of a multi-byte character. */
char *utf8_sanitize(const char *s, size_t n) {
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = c != 0 && len > 0 && i + len <= n;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (size_t k = 1; ok && k < len; k++) {
            ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
            cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3f);
        }
        /* reject overlong forms, surrogates and values past U+10FFFF */
        if (ok && len > 1)
            ok = cp >= (len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u) && cp <= 0x10ffff &&
                 (cp < 0xd800 || cp > 0xdfff);
        if (ok) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

/* Prints a cJSON object on stdout and frees it. */
int print_json(cJSON *obj) {
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!s) {
        print_error("out of memory while writing JSON");
        return EXIT_RUNTIME;
    }
    puts(s);
    free(s);
    return 0;
}

/* A float option as the user wrote it (0.7, not 0.699999988) in JSON. */
static double f32_json(float x) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", x);
    return strtod(b, NULL);
}

static double mean_of(const double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    return n ? s / n : 0;
}

/* Sample standard deviation (0 for fewer than two values). */
static double std_of(const double *x, int n) {
    if (n < 2)
        return 0;
    double m = mean_of(x, n), s = 0;
    for (int i = 0; i < n; i++)
        s += (x[i] - m) * (x[i] - m);
    return sqrt(s / (n - 1));
}

/* ---------------------------------------------------------------- info -- */

static int info_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL, OPT_JSON, OPT_THREADS,
        { "--mmproj", NULL, OPT_STR, &a->mmproj, 0, 0, "FILE", "vision projector GGUF (llama.cpp mmproj)" },
    };
    return opts_set(out, t, sizeof t / sizeof t[0]);
}

static int cmd_info(const struct args *a) {
    struct kvf_model *m = NULL;
    int rc = load_model(a, &m);
    if (rc)
        return rc;
    struct kvf_model_info in;
    kvf_model_get_info(m, &in);
    const char *rope = in.rope_style == KVF_ROPE_NEOX ? "neox" : "norm";
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", a->model);
        cJSON_AddStringToObject(o, "name", in.name);
        cJSON_AddStringToObject(o, "arch", in.arch);
        cJSON_AddStringToObject(o, "source", in.source);
        cJSON_AddNumberToObject(o, "n_layer", in.n_layer);
        cJSON_AddNumberToObject(o, "n_embd", in.n_embd);
        cJSON_AddNumberToObject(o, "n_head", in.n_head);
        cJSON_AddNumberToObject(o, "n_head_kv", in.n_head_kv);
        cJSON_AddNumberToObject(o, "head_dim", in.head_dim);
        cJSON_AddNumberToObject(o, "n_ff", in.n_ff);
        cJSON_AddNumberToObject(o, "n_vocab", in.n_vocab);
        cJSON_AddNumberToObject(o, "n_ctx_train", in.n_ctx_train);
        cJSON_AddNumberToObject(o, "sliding_window", in.sliding_window);
        cJSON_AddNumberToObject(o, "rope_base", in.rope_base);
        cJSON_AddNumberToObject(o, "rope_base_local", in.rope_base_local);
        cJSON_AddStringToObject(o, "rope_style", rope);
        cJSON_AddNumberToObject(o, "norm_eps", in.norm_eps);
        cJSON_AddNumberToObject(o, "n_params", (double)in.n_params);
        cJSON_AddNumberToObject(o, "weight_bytes", (double)in.weight_bytes);
        cJSON_AddStringToObject(o, "weight_types", in.weight_types);
        cJSON_AddStringToObject(o, "tokenizer", in.tokenizer);
        cJSON_AddStringToObject(o, "chat_template", in.chat_template_name);
        cJSON_AddNumberToObject(o, "bos", in.bos);
        cJSON_AddNumberToObject(o, "eos", in.eos);
        cJSON_AddStringToObject(o, "simd", kvf_simd_level());
        if (in.has_vision) {
            cJSON *v = cJSON_AddObjectToObject(o, "vision");
            cJSON_AddStringToObject(v, "source", in.vision_source);
            cJSON_AddNumberToObject(v, "image_size", in.vision_image_size);
            cJSON_AddNumberToObject(v, "patch_size", in.vision_patch_size);
            cJSON_AddNumberToObject(v, "n_layer", in.vision_n_layer);
            cJSON_AddNumberToObject(v, "n_embd", in.vision_n_embd);
            cJSON_AddNumberToObject(v, "n_head", in.vision_n_head);
            cJSON_AddNumberToObject(v, "n_ff", in.vision_n_ff);
            cJSON_AddNumberToObject(v, "image_tokens", in.image_tokens);
            cJSON_AddNumberToObject(v, "image_grid", in.image_grid);
        }
        rc = print_json(o);
    } else {
        printf("file            %s\n", a->model);
        printf("name            %s\n", in.name);
        printf("architecture    %s (%s)\n", in.arch, in.source);
        printf("layers          %d\n", in.n_layer);
        printf("embedding       %d\n", in.n_embd);
        printf("heads           %d (kv heads %d, head dim %d)\n", in.n_head, in.n_head_kv, in.head_dim);
        printf("feed-forward    %d\n", in.n_ff);
        printf("vocabulary      %d\n", in.n_vocab);
        printf("train context   %d\n", in.n_ctx_train);
        if (in.sliding_window > 0)
            printf("sliding window  %d (local rope base %g)\n", in.sliding_window, in.rope_base_local);
        else
            printf("sliding window  none\n");
        printf("rope            base %g, %s\n", in.rope_base, rope);
        printf("norm eps        %g\n", in.norm_eps);
        printf("parameters      %.1f M\n", (double)in.n_params / 1e6);
        printf("weights         %.1f MiB (%s)\n", (double)in.weight_bytes / MIB, in.weight_types);
        printf("tokenizer       %s (bos %d, eos %d)\n", in.tokenizer, in.bos, in.eos);
        printf("chat template   %s\n", in.chat_template_name);
        printf("simd            %s\n", kvf_simd_level());
        if (in.has_vision)
            printf("vision          %s: CLIP ViT, %d layers of width %d (%d heads, ff %d), image %d, patch %d "
                   "-> %d tokens (%dx%d grid)\n", in.vision_source, in.vision_n_layer, in.vision_n_embd,
                   in.vision_n_head, in.vision_n_ff, in.vision_image_size, in.vision_patch_size, in.image_tokens,
                   in.image_grid, in.image_grid);
    }
    kvf_model_free(m);
    return rc;
}

/* ------------------------------------------------------------ tokenize -- */

static int tokenize_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL, OPT_PROMPT, OPT_FILE,
        { "--bos", NULL, OPT_FLAG, &a->bos, 0, 0, NULL, "start with BOS when the model's tokenizer adds one" },
        { "--special", NULL, OPT_FLAG, &a->special, 0, 0, NULL, "turn special-token text (<|im_start|>...) into ids" },
    };
    return opts_set(out, t, sizeof t / sizeof t[0]);
}

/* Only the vocabulary is loaded (no weights), so vocab-only GGUF files and
 * directories holding just tokenizer.json work too. */
static enum kvf_status load_tokenizer(const char *path, struct gguf_file **gf, struct tokenizer **tok) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return err_set(KVF_ERR_IO, "%s", strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return tok_load_hf(path, tok);
    enum kvf_status st = gguf_open(path, gf);
    return st == KVF_OK ? tok_load_gguf(*gf, tok) : st;
}

static int cmd_tokenize(const struct args *a) {
    char *text = NULL;
    size_t len = 0;
    int rc = input_text("tokenize", a, &text, &len);
    if (rc)
        return rc;
    struct gguf_file *gf = NULL;
    struct tokenizer *tok = NULL;
    enum kvf_status st = load_tokenizer(a->model, &gf, &tok);
    if (st != KVF_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot load the tokenizer of '%s'", a->model);
        rc = fail(st, what);
    } else if (len > INT32_MAX / 2) {
        print_error("input of %zu bytes is too long", len);
        rc = EXIT_INPUT;
    } else {
        int32_t cap = (int32_t)len + 16, n = -1;
        int32_t *ids = NULL;
        for (int tries = 0; tries < 2 && n < 0; tries++) {
            free(ids);
            ids = malloc((size_t)cap * sizeof *ids);
            n = ids ? tok_encode(tok, text, len, ids, cap, a->bos, a->special) : INT32_MIN;
            if (n < 0 && n != INT32_MIN)
                cap = -n;
        }
        if (n < 0) {
            rc = fail(KVF_ERR_NOMEM, "tokenize");
        } else {
            for (int32_t i = 0; i < n; i++)
                printf(i ? " %d" : "%d", ids[i]);
            putchar('\n');
        }
        free(ids);
    }
    tok_free(tok);
    gguf_close(gf);
    free(text);
    return rc;
}

/* ------------------------------------------------------------ generate -- */

static void generate_defaults(struct args *a) {
    struct kvf_sampler_params sp = kvf_sampler_default_params();
    a->n_predict = 128;
    a->temp = 0.0f; /* greedy: the same prompt always gives the same text */
    a->top_k = sp.top_k;
    a->top_p = sp.top_p;
    a->min_p = sp.min_p;
    a->seed = sp.seed;
    a->batch = kvf_session_default_params().n_batch;
}

static int generate_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL, OPT_PROMPT, OPT_FILE,
        { "--n-predict", "-n", OPT_INT, &a->n_predict, 1, 1 << 24, "N", "tokens to generate at most (default 128)" },
        { "--temp", NULL, OPT_FLOAT, &a->temp, 0, 100, "T", "temperature; 0 = greedy (default 0)" },
        { "--top-k", NULL, OPT_INT, &a->top_k, 0, 1 << 30, "K", "keep the K most likely tokens, 0 = off (default 40)" },
        { "--top-p", NULL, OPT_FLOAT, &a->top_p, 0, 1, "P", "nucleus sampling, 1 = off (default 0.95)" },
        { "--min-p", NULL, OPT_FLOAT, &a->min_p, 0, 1, "P", "drop tokens below P x the best, 0 = off (default 0.05)" },
        { "--seed", NULL, OPT_U64, &a->seed, 0, 0, "S", "random seed (default 42)" },
        OPT_THREADS,
        { "--ctx-size", "-c", OPT_INT, &a->ctx, 0, 1 << 24, "N", "context size (default 0: prompt + n)" },
        OPT_BATCH,
        { "--chat", NULL, OPT_FLAG, &a->chat, 0, 0, NULL, "wrap the prompt in the model's chat template" },
        { "--chat-template", NULL, OPT_STR, &a->chat_template, 0, 0, "NAME",
          "llama2, vicuna, chatml or gemma (implies --chat)" },
        { "--system", NULL, OPT_STR, &a->system, 0, 0, "TEXT", "system message (implies --chat)" },
        { "--special", NULL, OPT_FLAG, &a->special, 0, 0, NULL, "parse special-token text in a raw prompt" },
        OPTS_MEDIA,
        { "--dump-tags", NULL, OPT_FLAG, &a->dump_tags, 0, 0, NULL, "print every prompt position's tag" },
        { "--dump-kv", NULL, OPT_STR, &a->dump_kv, 0, 0, "FILE", "write the positions each layer and kv head holds, after compression and at the end, as JSON" },
        { "--kv", NULL, OPT_STR, &a->kv, 0, 0, "SPEC", "KV cache policy after the prompt, e.g. snapkv:budget=0.2 "
          "(see kvfold policies)" },
        OPT_KV_TYPE,
        OPT_JSON,
    };
    return opts_set(out, t, sizeof t / sizeof t[0]);
}

bool wants_chat(const struct args *a) { return a->chat || a->chat_template || a->system; }

/* The prompt as the model sees it: raw, or wrapped in a chat template. */
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
    /* LLaVA GGUF files rarely carry a template; LLaVA-1.5 speaks Vicuna. */
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    const char *name = a->chat_template;
    if (!name && info.has_vision && strcmp(info.chat_template_name, "none") == 0)
        name = "vicuna";
    int32_t r = kvf_chat_apply(m, name, msgs, n, true, NULL, 0);
    if (r == INT32_MIN) { /* only without a name: cmd_generate checked it */
        print_error("generate: no chat template recognised (%s); pass --chat-template NAME (one of %s)",
                    kvf_last_error(), kvf_chat_templates());
        return EXIT_INPUT;
    }
    int32_t need = r < 0 ? -r : r + 1;
    *out = malloc((size_t)need);
    if (!*out || kvf_chat_apply(m, name, msgs, n, true, *out, need) < 0) {
        free(*out);
        print_error("generate: out of memory for the chat text");
        return EXIT_RUNTIME;
    }
    return 0;
}

/* One line per position: pos, modality, image/frame index, grid row and
 * column, and the token (id and text) for text positions. */
static void print_tags(const struct kvf_model *m, const struct kvf_prompt *pr) {
    const struct kvf_tag *t = kvf_prompt_tags(pr);
    printf("# pos modality media row col token\n");
    for (int i = 0; i < kvf_prompt_n_tokens(pr); i++) {
        const int32_t id = kvf_prompt_token(pr, i);
        printf("%d %s %d %d %d", t[i].pos, kvf_modality_str(t[i].modality), t[i].media, t[i].row, t[i].col);
        if (id >= 0) {
            char buf[64];
            int32_t n = kvf_token_to_piece(m, id, buf, sizeof buf, true);
            printf(" %d \"", id);
            for (int k = 0; k < (n < 0 ? 0 : n); k++) {
                const unsigned char ch = (unsigned char)buf[k];
                if (ch == '\n') fputs("\\n", stdout);
                else if (ch == '"' || ch == '\\') printf("\\%c", ch);
                else if (ch < 0x20) printf("\\x%02x", ch);
                else putchar(ch);
            }
            putchar('"');
        }
        putchar('\n');
    }
}

/* [[pos, "modality", media, row, col, token], ...] */
/* Per layer, per kv head: the true positions the cache holds. */
cJSON *kv_positions_json(const struct kvf_session *s, const struct kvf_model_info *info) {
    cJSON *layers = cJSON_CreateArray();
    for (int l = 0; l < info->n_layer; l++) {
        cJSON *heads = cJSON_CreateArray();
        for (int g = 0; g < info->n_head_kv; g++) {
            int n;
            const struct kvf_tag *t = kvf_session_kv_tags(s, l, g, &n);
            cJSON *pos = cJSON_CreateArray();
            for (int i = 0; i < n; i++)
                cJSON_AddItemToArray(pos, cJSON_CreateNumber(t[i].pos));
            cJSON_AddItemToArray(heads, pos);
        }
        cJSON_AddItemToArray(layers, heads);
    }
    return layers;
}

/* Per layer, per kv head: [evicted position, position it was merged into]. */
cJSON *kv_merges_json(const struct kvf_session *s, const struct kvf_model_info *info) {
    cJSON *layers = cJSON_CreateArray();
    for (int l = 0; l < info->n_layer; l++) {
        cJSON *heads = cJSON_CreateArray();
        for (int g = 0; g < info->n_head_kv; g++) {
            int n;
            const struct kvf_kv_merge *mg = kvf_session_kv_merges(s, l, g, &n);
            cJSON *pairs = cJSON_CreateArray();
            for (int i = 0; i < n; i++) {
                const int pair[2] = { mg[i].from, mg[i].into };
                cJSON_AddItemToArray(pairs, cJSON_CreateIntArray(pair, 2));
            }
            cJSON_AddItemToArray(heads, pairs);
        }
        cJSON_AddItemToArray(layers, heads);
    }
    return layers;
}

/* The searched per-layer budgets (prefixkv): [{ratio, gini}], or NULL. */
cJSON *kv_layer_budgets_json(const struct kvf_session *s, const struct kvf_model_info *info) {
    double ratio, gini;
    if (!kvf_session_kv_layer_budget(s, 0, &ratio, &gini))
        return NULL;
    cJSON *arr = cJSON_CreateArray();
    for (int l = 0; l < info->n_layer && kvf_session_kv_layer_budget(s, l, &ratio, &gini); l++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "ratio", ratio);
        if (isfinite(gini))
            cJSON_AddNumberToObject(o, "gini", gini);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* Mean entries per kv head, per layer. */
cJSON *kv_per_layer_json(const struct kvf_session *s, const struct kvf_model_info *info) {
    cJSON *pl = cJSON_CreateArray();
    for (int l = 0; l < info->n_layer; l++) {
        int kept = 0;
        for (int g = 0; g < info->n_head_kv; g++) {
            int n;
            kvf_session_kv_tags(s, l, g, &n);
            kept += n;
        }
        cJSON_AddItemToArray(pl, cJSON_CreateNumber((double)kept / info->n_head_kv));
    }
    return pl;
}

static cJSON *tags_json(const struct kvf_prompt *pr) {
    cJSON *arr = cJSON_CreateArray();
    const struct kvf_tag *t = kvf_prompt_tags(pr);
    for (int i = 0; i < kvf_prompt_n_tokens(pr); i++) {
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t[i].pos));
        cJSON_AddItemToArray(e, cJSON_CreateString(kvf_modality_str(t[i].modality)));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t[i].media));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t[i].row));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t[i].col));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(kvf_prompt_token(pr, i)));
        cJSON_AddItemToArray(arr, e);
    }
    return arr;
}

static int cmd_generate(const struct args *a) {
    /* Reject an unknown template name before spending time on the model:
     * an empty conversation fails only for a name that does not exist. */
    if (a->chat_template && kvf_chat_apply(NULL, a->chat_template, NULL, 0, false, NULL, 0) == INT32_MIN) {
        print_error("generate: %s", kvf_last_error());
        return EXIT_USAGE;
    }
    char *text = NULL, *prompt = NULL;
    size_t len = 0;
    int rc = input_text("generate", a, &text, &len);
    if (rc)
        return rc;
    struct kvf_model *m = NULL;
    struct kvf_session *s = NULL;
    struct kvf_sampler *smp = NULL;
    int32_t n_prompt = 0;
    char *piece = NULL;
    int32_t piece_cap = 0;
    struct strbuf out = { 0 };
    struct media_set media = { 0 };
    struct kvf_prompt *pr = NULL;
    cJSON *per_layer = NULL, *dump = NULL;
    enum kvf_status st;

    if ((rc = load_model(a, &m)) || (rc = build_prompt(a, m, text, &prompt)) || (rc = media_build(a, m, &media)))
        goto done;
    /* BOS as the model's tokenizer says; chat markup is control-token text. */
    if ((rc = prompt_make(m, prompt, &media, wants_chat(a) || a->special, &pr)))
        goto done;
    n_prompt = kvf_prompt_n_tokens(pr);
    if (a->dump_tags && !a->json)
        print_tags(m, pr);
    if (kvf_prompt_is_synthetic(pr))
        fprintf(stderr, "kvfold: note: the prompt holds synthetic (pseudo-image) segments; results are synthetic\n");
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = a->ctx > 0 ? a->ctx : n_prompt + a->n_predict;
    sp.n_batch = a->batch;
    sp.n_threads = a->threads;
    sp.kv_spec = a->kv;
    sp.kv_type = a->kv_type_id;
    if ((st = kvf_session_init(m, &sp, &s)) != KVF_OK) {
        rc = fail(st, "generate: cannot create the session");
        goto done;
    }
    struct kvf_sampler_params smpp = {
        .temp = a->temp, .top_k = a->top_k, .top_p = a->top_p, .min_p = a->min_p, .seed = a->seed,
    };
    if ((st = kvf_sampler_init(&smpp, &smp)) != KVF_OK) {
        rc = fail(st, "generate: sampler");
        goto done;
    }
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);

    double t0 = sys_time_ms();
    if ((st = kvf_session_prefill_prompt(s, pr, NULL)) != KVF_OK) {
        rc = fail(st, "generate: prompt");
        goto done;
    }
    const double prefill_ms = sys_time_ms() - t0;
    const size_t kv_full = kvf_session_kv_bytes(s);
    t0 = sys_time_ms();
    if ((st = kvf_session_compress(s)) != KVF_OK) {
        rc = fail(st, "generate: kv compression");
        goto done;
    }
    const double compress_ms = sys_time_ms() - t0;
    const size_t kv_kept = kvf_session_kv_bytes(s);
    per_layer = kv_per_layer_json(s, &info);
    if (a->dump_kv) {
        dump = cJSON_CreateObject();
        cJSON_AddStringToObject(dump, "policy", a->kv ? a->kv : "full");
        cJSON_AddNumberToObject(dump, "n_prompt", n_prompt);
        cJSON_AddItemToObject(dump, "compressed", kv_positions_json(s, &info));
        cJSON_AddItemToObject(dump, "merged", kv_merges_json(s, &info));
    }
    double decode_ms = 0;
    int n_gen = 0, n_decoded = 0;
    const char *stop = "length";
    for (;;) {
        int32_t tok = kvf_sampler_sample(smp, kvf_session_logits(s), info.n_vocab);
        if (tok < 0) {
            rc = fail(KVF_ERR_INTERNAL, "generate: sampler");
            goto done;
        }
        if (kvf_token_is_eog(m, tok)) {
            stop = "eog";
            break;
        }
        int32_t np = token_piece(m, tok, &piece, &piece_cap);
        if (np < 0 || (a->json && !strbuf_put(&out, piece, (size_t)np))) {
            rc = fail(KVF_ERR_NOMEM, "generate");
            goto done;
        }
        if (!a->json) {
            fwrite(piece, 1, (size_t)np, stdout);
            fflush(stdout);
        }
        if (++n_gen == a->n_predict)
            break;
        if (kvf_session_n_past(s) >= sp.n_ctx) {
            stop = "context";
            break;
        }
        double t1 = sys_time_ms();
        if ((st = kvf_session_decode(s, tok)) != KVF_OK) {
            rc = fail(st, "generate: decode");
            goto done;
        }
        decode_ms += sys_time_ms() - t1;
        n_decoded++;
    }
    const double ms_per_tok = n_decoded ? decode_ms / n_decoded : 0;
    const size_t kv_bytes = kvf_session_kv_bytes(s), rss = kvf_peak_rss_bytes();
    if (dump) {
        cJSON_AddNumberToObject(dump, "n_past", kvf_session_n_past(s));
        cJSON_AddItemToObject(dump, "final", kv_positions_json(s, &info));
        char *txt = cJSON_PrintUnformatted(dump);
        FILE *f = txt ? fopen(a->dump_kv, "w") : NULL;
        const bool ok = f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF;
        if ((f && fclose(f) != 0) || !ok) {
            free(txt);
            rc = fail(KVF_ERR_IO, "generate: cannot write --dump-kv");
            goto done;
        }
        free(txt);
    }
    if (a->json) {
        char *clean = utf8_sanitize(out.s ? out.s : "", out.n);
        if (!clean) {
            rc = fail(KVF_ERR_NOMEM, "generate");
            goto done;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", clean);
        free(clean);
        cJSON_AddStringToObject(o, "model", info.name);
        cJSON_AddNumberToObject(o, "n_prompt", n_prompt);
        cJSON_AddNumberToObject(o, "n_media", media.n);
        cJSON_AddBoolToObject(o, "synthetic", kvf_prompt_is_synthetic(pr));
        cJSON_AddNumberToObject(o, "n_gen", n_gen);
        cJSON_AddStringToObject(o, "stop", stop);
        cJSON *t = cJSON_AddObjectToObject(o, "timings");
        cJSON_AddNumberToObject(t, "vision_encode_ms", media.encode_ms);
        cJSON_AddNumberToObject(t, "prefill_ms", prefill_ms);
        cJSON_AddNumberToObject(t, "prefill_tok_per_s", prefill_ms > 0 ? n_prompt * 1e3 / prefill_ms : 0);
        cJSON_AddNumberToObject(t, "decode_ms", decode_ms);
        cJSON_AddNumberToObject(t, "decode_ms_per_token", ms_per_tok);
        cJSON_AddNumberToObject(t, "decode_tok_per_s", ms_per_tok > 0 ? 1e3 / ms_per_tok : 0);
        cJSON_AddNumberToObject(t, "compress_ms", compress_ms);
        cJSON *kv = cJSON_AddObjectToObject(o, "kv");
        cJSON_AddStringToObject(kv, "policy", a->kv ? a->kv : "full");
        cJSON_AddStringToObject(kv, "type", kvf_kv_type_name(a->kv_type_id));
        cJSON_AddNumberToObject(kv, "bytes", (double)kv_bytes);
        cJSON_AddNumberToObject(kv, "bytes_full", (double)kv_full);
        cJSON_AddNumberToObject(kv, "bytes_kept", (double)kv_kept);
        cJSON_AddNumberToObject(kv, "ratio", kv_full ? (double)kv_kept / (double)kv_full : 1.0);
        cJSON_AddNumberToObject(kv, "peak_bytes", (double)kvf_session_kv_peak_bytes(s));
        cJSON_AddNumberToObject(kv, "peak_entries", kvf_session_kv_peak_entries(s));
        cJSON_AddItemToObject(kv, "per_layer", per_layer);
        per_layer = NULL;
        cJSON_AddItemToObject(kv, "per_layer_final", kv_per_layer_json(s, &info));
        cJSON *budgets = kv_layer_budgets_json(s, &info);
        if (budgets)
            cJSON_AddItemToObject(kv, "layer_budgets", budgets);
        cJSON_AddNumberToObject(kv, "n_ctx", sp.n_ctx);
        cJSON_AddNumberToObject(kv, "n_past", kvf_session_n_past(s));
        cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rss);
        cJSON *sa = cJSON_AddObjectToObject(o, "sampler");
        cJSON_AddNumberToObject(sa, "temp", f32_json(a->temp));
        cJSON_AddNumberToObject(sa, "top_k", a->top_k);
        cJSON_AddNumberToObject(sa, "top_p", f32_json(a->top_p));
        cJSON_AddNumberToObject(sa, "min_p", f32_json(a->min_p));
        cJSON_AddNumberToObject(sa, "seed", (double)a->seed);
        if (a->dump_tags)
            cJSON_AddItemToObject(o, "tags", tags_json(pr));
        rc = print_json(o);
    } else {
        putchar('\n');
        fflush(stdout);
        fprintf(stderr,
                "kvfold: prompt %d tokens in %.1f ms (%.1f tok/s); generated %d tokens, %.2f ms/token "
                "(%.1f tok/s); stop %s; kv %.2f MiB; peak rss %.1f MiB\n",
                n_prompt, prefill_ms, prefill_ms > 0 ? n_prompt * 1e3 / prefill_ms : 0, n_gen, ms_per_tok,
                ms_per_tok > 0 ? 1e3 / ms_per_tok : 0, stop, kv_bytes / MIB, rss / MIB);
    }
done:
    cJSON_Delete(per_layer);
    cJSON_Delete(dump);
    free(out.s);
    free(piece);
    kvf_prompt_free(pr);
    media_set_free(&media);
    kvf_sampler_free(smp);
    kvf_session_free(s);
    kvf_model_free(m);
    free(prompt);
    free(text);
    return rc;
}

/* ---------------------------------------------------------- perplexity -- */

static void perplexity_defaults(struct args *a) {
    a->ctx = 512;
    a->batch = kvf_session_default_params().n_batch;
}

static int perplexity_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL, OPT_FILE,
        { "--ctx", "-c", OPT_INT, &a->ctx, 4, 1 << 20, "N", "tokens per chunk (default 512)" },
        { "--chunks", NULL, OPT_INT, &a->chunks, 0, 1 << 20, "N", "score only the first N chunks, 0 = all (default)" },
        { "--kv", NULL, OPT_STR, &a->kv, 0, 0, "SPEC", "KV policy: each chunk's first half is compressed by it, then "
          "the second half is scored token by token (decode stage active)" },
        OPT_KV_TYPE, OPT_BATCH, OPT_THREADS, OPT_JSON,
    };
    return opts_set(out, t, sizeof t / sizeof t[0]);
}

/* -log softmax(row)[target], in double. */
double token_nll(const float *row, int n_vocab, int32_t target) {
    float max = row[0];
    for (int i = 1; i < n_vocab; i++)
        max = row[i] > max ? row[i] : max;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)row[i] - max);
    return log(sum) + max - row[target];
}

/* Memory for the logits of one scoring pass: vocabularies of 256k tokens
 * make a full chunk's logits (ctx x n_vocab floats) too big to keep. */
#define PPL_LOGITS_BYTES (64u << 20)

static int cmd_perplexity(const struct args *a) {
    if (!a->file) {
        print_error("perplexity: missing -f TEXTFILE");
        return EXIT_USAGE;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = read_file(a->file, &text, &len);
    if (rc)
        return rc;
    struct kvf_model *m = NULL;
    struct kvf_session *s = NULL;
    int32_t *ids = NULL, n_tok = 0, probe[4];
    float *logits = NULL;
    double *running = NULL;
    enum kvf_status st;
    if ((rc = load_model(a, &m)) || (rc = tokenize(m, text, len, true, false, &ids, &n_tok)))
        goto done;
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    /* As llama.cpp: every chunk starts with BOS when the model uses one,
     * written over the chunk's first token. */
    const bool use_bos = kvf_tokenize(m, "", 0, probe, 4, true, false) == 1 && info.bos >= 0;
    int ctx = a->ctx, n_chunks = n_tok / ctx, first = ctx / 2;
    if (a->chunks > 0)
        n_chunks = KVF_MIN(n_chunks, a->chunks);
    bool short_text = n_chunks == 0;
    if (short_text) {
        if (n_tok < 2) {
            print_error("perplexity: '%s' has %d tokens; at least 2 are needed", a->file, n_tok);
            rc = EXIT_INPUT;
            goto done;
        }
        ctx = n_tok, n_chunks = 1, first = 1;
        if (!a->json)
            printf("text has %d tokens, fewer than --ctx %d: scoring it as one chunk, all but the first "
                   "token\n", n_tok, a->ctx);
    }
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = ctx;
    sp.n_batch = a->batch;
    sp.n_threads = a->threads;
    sp.kv_spec = a->kv;
    sp.kv_type = a->kv_type_id;
    if ((st = kvf_session_init(m, &sp, &s)) != KVF_OK) {
        rc = fail(st, "perplexity: cannot create the session");
        goto done;
    }
    const int rows = (int)KVF_MAX(1, KVF_MIN((size_t)a->batch, PPL_LOGITS_BYTES / ((size_t)info.n_vocab * 4)));
    logits = malloc((size_t)rows * (size_t)info.n_vocab * sizeof *logits);
    running = malloc((size_t)n_chunks * sizeof *running);
    if (!logits || !running) {
        rc = fail(KVF_ERR_NOMEM, "perplexity");
        goto done;
    }
    double nll = 0, nll2 = 0, t_total = 0;
    long count = 0;
    for (int c = 0; c < n_chunks; c++) {
        int32_t *tok = ids + (size_t)c * ctx;
        const int32_t saved = tok[0];
        if (use_bos && !short_text)
            tok[0] = info.bos;
        kvf_session_reset(s);
        double t0 = sys_time_ms();
        if (a->kv) {
            /* The first half is the prompt, compressed; each later token is
             * decoded against the compressed cache, as in generation. */
            if ((st = kvf_session_prefill(s, tok, first, NULL)) != KVF_OK || (st = kvf_session_compress(s)) != KVF_OK)
                goto chunk_failed;
            for (int p = first;; p++) {
                const double v = token_nll(kvf_session_logits(s), info.n_vocab, tok[p]);
                nll += v;
                nll2 += v * v;
                count++;
                if (p == ctx - 1)
                    break;
                if ((st = kvf_session_decode(s, tok[p])) != KVF_OK)
                    goto chunk_failed;
            }
        }
        /* Logits are needed after tokens first-1 .. ctx-2 (they predict
         * tokens first .. ctx-1); the tokens before need none. */
        if (!a->kv && first > 1 && (st = kvf_session_prefill(s, tok, first - 1, NULL)) != KVF_OK)
            goto chunk_failed;
        for (int p = first - 1; !a->kv && p < ctx - 1; p += rows) {
            int n = KVF_MIN(rows, ctx - 1 - p);
            if ((st = kvf_session_prefill(s, tok + p, n, logits)) != KVF_OK)
                goto chunk_failed;
            for (int i = 0; i < n; i++) {
                double v = token_nll(logits + (size_t)i * info.n_vocab, info.n_vocab, tok[p + i + 1]);
                nll += v;
                nll2 += v * v;
                count++;
            }
        }
        t_total += sys_time_ms() - t0;
        tok[0] = saved;
        running[c] = exp(nll / count);
        if (!a->json) {
            printf("[%d/%d] %.4f\n", c + 1, n_chunks, running[c]);
            fflush(stdout);
        }
    }
    /* llama.cpp's estimate: the error of the mean NLL, carried through exp. */
    const double mean = nll / count, var = nll2 / count - mean * mean;
    const double ppl = exp(mean), err = count > 1 && var > 0 ? ppl * sqrt(var / (count - 1)) : 0;
    const double tps = t_total > 0 ? (double)n_chunks * (ctx - 1) * 1e3 / t_total : 0;
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", info.name);
        cJSON_AddStringToObject(o, "file", a->file);
        cJSON_AddNumberToObject(o, "ppl", ppl);
        cJSON_AddNumberToObject(o, "ppl_stderr", err);
        cJSON_AddNumberToObject(o, "n_tokens", n_tok);
        cJSON_AddNumberToObject(o, "n_scored", (double)count);
        cJSON_AddNumberToObject(o, "n_chunks", n_chunks);
        cJSON_AddNumberToObject(o, "ctx", ctx);
        cJSON_AddStringToObject(o, "kv", a->kv ? a->kv : "full");
        cJSON_AddStringToObject(o, "kv_type", kvf_kv_type_name(a->kv_type_id));
        cJSON_AddBoolToObject(o, "short_text", short_text);
        cJSON_AddItemToObject(o, "running_ppl", cJSON_CreateDoubleArray(running, n_chunks));
        cJSON_AddNumberToObject(o, "tok_per_s", tps);
        cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)kvf_peak_rss_bytes());
        rc = print_json(o);
    } else {
        printf("PPL = %.4f +/- %.4f (%ld tokens scored in %d chunk%s of %d; %.1f tok/s)\n", ppl, err, count,
               n_chunks, n_chunks == 1 ? "" : "s", ctx, tps);
    }
    goto done;
chunk_failed:
    rc = fail(st, "perplexity: forward pass");
done:
    free(running);
    free(logits);
    free(ids);
    kvf_session_free(s);
    kvf_model_free(m);
    free(text);
    return rc;
}

/* --------------------------------------------------------------- bench -- */

static void bench_defaults(struct args *a) {
    a->n_prompt_bench = 512;
    a->n_predict = 128;
    a->reps = 3;
    a->batch = kvf_session_default_params().n_batch;
}

static int bench_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        { "--n-prompt", "-p", OPT_INT, &a->n_prompt_bench, 0, 1 << 20, "N", "prefill test length, 0 = skip (default 512)" },
        { "--n-gen", "-n", OPT_INT, &a->n_predict, 0, 1 << 20, "N", "decode test length, 0 = skip (default 128)" },
        { "--repetitions", "-r", OPT_INT, &a->reps, 1, 1000, "N", "timed runs of each test (default 3)" },
        { "--no-warmup", NULL, OPT_FLAG, &a->no_warmup, 0, 0, NULL, "skip the untimed first run of each test" },
        { "--depth", "-d", OPT_INT, &a->depth, 0, 1 << 24, "N", "decode after a prefilled (and, with --kv, compressed) context of N tokens (default: -p with --kv, else 0)" },
        OPT_BATCH, OPT_THREADS, OPT_JSON, OPTS_MEDIA,
        { "--images", NULL, OPT_INT, &a->n_images, 0, 4096, "N", "add N synthetic 640x480 images (needs a vision tower)" },
        { "--kv", NULL, OPT_STR, &a->kv, 0, 0, "SPEC", "KV policy: tgN then decodes after a -p prompt compressed by it" },
        OPT_KV_TYPE,
    };
    return opts_set(out, t, sizeof t / sizeof t[0]);
}

struct bench_result {
    char name[32];
    int n_tokens;
    double mean, std;   /* tokens per second */
    size_t kv_bytes;    /* after the test   */
    size_t kv_peak;     /* the most allocated during the test, prefill included */
    double prefill_ms;  /* tg after a compressed prompt: mean prefill time of that prompt */
    double compress_ms; /*   and mean kvf_session_compress time, */
    size_t kv_full, kv_kept; /* KV bytes before and after compressing it, */
    cJSON *per_layer;   /*   entries per kv head of each layer after it (owned) */
};

/* Runs one test (prefill of n tokens, or n single-token decodes) reps + 1
 * times; the first run warms caches and is not timed (unless !warmup). Decodes follow a
 * prefilled and compressed context of n_ctx_pre tokens (0: an empty cache),
 * so that policies can be compared at the same prompt length. */
static enum kvf_status bench_run(struct kvf_session *s, const struct kvf_model_info *info, const int32_t *tok, int n,
                                 bool decode, int n_ctx_pre, int reps, bool warmup, struct bench_result *r) {
    double tps[1000], compress = 0, prefill = 0;
    for (int rep = warmup ? 0 : 1; rep <= reps; rep++) {
        kvf_session_reset(s);
        enum kvf_status st = KVF_OK;
        if (decode && n_ctx_pre > 0) {
            double t0 = sys_time_ms();
            st = kvf_session_prefill(s, tok, n_ctx_pre, NULL);
            if (rep > 0)
                prefill += sys_time_ms() - t0;
            r->kv_full = kvf_session_kv_bytes(s);
            t0 = sys_time_ms();
            if (st == KVF_OK)
                st = kvf_session_compress(s);
            if (rep > 0)
                compress += sys_time_ms() - t0;
            r->kv_kept = kvf_session_kv_bytes(s);
            if (!r->per_layer)
                r->per_layer = kv_per_layer_json(s, info);
        }
        double t0 = sys_time_ms();
        if (decode) {
            for (int i = 0; i < n && st == KVF_OK; i++)
                st = kvf_session_decode(s, tok[n_ctx_pre + i]);
        } else if (st == KVF_OK) {
            st = kvf_session_prefill(s, tok, n, NULL);
        }
        if (st != KVF_OK)
            return st;
        double ms = sys_time_ms() - t0;
        if (rep > 0)
            tps[rep - 1] = ms > 0 ? n * 1e3 / ms : 0;
    }
    if (decode && n_ctx_pre > 0)
        snprintf(r->name, sizeof r->name, "tg%d@%d", n, n_ctx_pre);
    else
        snprintf(r->name, sizeof r->name, "%s%d", decode ? "tg" : "pp", n);
    r->n_tokens = n;
    r->mean = mean_of(tps, reps);
    r->std = std_of(tps, reps);
    r->kv_bytes = kvf_session_kv_bytes(s);
    r->kv_peak = kvf_session_kv_peak_bytes(s);
    r->prefill_ms = prefill / reps;
    r->compress_ms = compress / reps;
    return KVF_OK;
}

/* Multimodal test: vision encoding per image, then time to first token
 * (encoding + prefill of the whole prompt) and the KV bytes it leaves. */
struct bench_mm {
    int n_media, n_encoded, n_tokens;
    bool synthetic;
    double encode_ms_per_image, prefill_ms, compress_ms, ttft_ms;
    size_t kv_bytes, kv_peak; /* after the prompt (compressed with --kv); the most held during it */
};

/* Seeded RGB noise: what an image holds does not change the work done. */
static int bench_images(const struct args *a, const struct kvf_model *m, struct media_set *ms) {
    enum { W = 640, H = 480 };
    uint8_t *rgb = malloc((size_t)W * H * 3);
    if (!rgb)
        return fail(KVF_ERR_NOMEM, "bench");
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int rc = 0;
    for (int i = 0; !rc && i < a->n_images; i++) {
        for (size_t k = 0; k < (size_t)W * H * 3; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            rgb[k] = (uint8_t)(x >> 56);
        }
        struct kvf_image *img;
        enum kvf_status st = kvf_image_from_rgb(W, H, rgb, &img);
        if (st != KVF_OK) {
            rc = fail(st, "bench");
            break;
        }
        rc = media_encode(a, m, img, KVF_MOD_IMAGE, "synthetic image", ms);
        kvf_image_free(img);
    }
    free(rgb);
    return rc;
}

/* "<image>\n" per image, "<video>\n" per run of frames, then a question. */
static char *bench_mm_text(const struct media_set *ms) {
    char *t = malloc((size_t)ms->n * 9 + 64);
    if (!t)
        return NULL;
    size_t o = 0;
    for (int i = 0; i < ms->n; i++) {
        const bool frame = kvf_media_modality(ms->items[i]) == KVF_MOD_VIDEO;
        if (frame && i > 0 && kvf_media_modality(ms->items[i - 1]) == KVF_MOD_VIDEO)
            continue;
        o += (size_t)sprintf(t + o, "%s\n", frame ? KVF_MARKER_VIDEO : KVF_MARKER_IMAGE);
    }
    sprintf(t + o, "Describe what you see.");
    return t;
}

static int bench_media(const struct args *a, const struct kvf_model *m, const struct kvf_session_params *base,
                       struct bench_mm *r) {
    struct media_set ms = { 0 };
    struct kvf_prompt *pr = NULL;
    struct kvf_session *s = NULL;
    char *text = NULL;
    int rc = media_build(a, m, &ms);
    if (!rc)
        rc = bench_images(a, m, &ms);
    if (rc)
        goto done;
    if (!(text = bench_mm_text(&ms))) {
        rc = fail(KVF_ERR_NOMEM, "bench");
        goto done;
    }
    if ((rc = prompt_make(m, text, &ms, false, &pr)))
        goto done;
    struct kvf_session_params sp = *base;
    sp.n_ctx = kvf_prompt_n_tokens(pr);
    enum kvf_status st = kvf_session_init(m, &sp, &s);
    double best = 0, compress = 0;
    for (int rep = a->no_warmup ? 1 : 0; st == KVF_OK && rep <= a->reps; rep++) {
        kvf_session_reset(s);
        const double t0 = sys_time_ms();
        st = kvf_session_prefill_prompt(s, pr, NULL);
        const double t1 = sys_time_ms();
        if (st == KVF_OK)
            st = kvf_session_compress(s);
        const double ms_run = t1 - t0, ms_compress = sys_time_ms() - t1;
        if (rep == 1 || (rep > 1 && ms_run + ms_compress < best + compress))
            best = ms_run, compress = ms_compress;
    }
    if (st != KVF_OK) {
        rc = fail(st, "bench: multimodal prompt");
        goto done;
    }
    *r = (struct bench_mm){
        .n_media = ms.n, .n_encoded = ms.n_encoded, .n_tokens = kvf_prompt_n_tokens(pr),
        .synthetic = kvf_prompt_is_synthetic(pr),
        .encode_ms_per_image = ms.n_encoded ? ms.encode_ms / ms.n_encoded : 0, .prefill_ms = best,
        .compress_ms = compress, .ttft_ms = ms.encode_ms + best + compress, .kv_bytes = kvf_session_kv_bytes(s),
        .kv_peak = kvf_session_kv_peak_bytes(s),
    };
done:
    kvf_session_free(s);
    kvf_prompt_free(pr);
    free(text);
    media_set_free(&ms);
    return rc;
}

static int cmd_bench(const struct args *a) {
    const bool mm = a->n_media > 0 || a->n_images > 0;
    if (a->n_prompt_bench == 0 && a->n_predict == 0 && !mm) {
        print_error("bench: nothing to run (-p 0 and -n 0)");
        return EXIT_USAGE;
    }
    struct kvf_model *m = NULL;
    struct kvf_session *s = NULL;
    int32_t *tok = NULL;
    struct bench_result res[2] = { 0 };
    int n_res = 0;
    int rc = load_model(a, &m);
    if (rc)
        return rc;
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    /* Decoding follows a context of --depth tokens, by default (with --kv)
     * the compressed -p prompt. */
    const int n_pre = a->depth > 0 ? a->depth : a->kv ? a->n_prompt_bench : 0;
    const int n_max = KVF_MAX(KVF_MAX(a->n_prompt_bench, n_pre + a->n_predict), 1);
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = n_max;
    sp.kv_spec = a->kv;
    sp.kv_type = a->kv_type_id;
    sp.n_batch = a->batch;
    sp.n_threads = a->threads;
    enum kvf_status st = kvf_session_init(m, &sp, &s);
    if (st != KVF_OK) {
        rc = fail(st, "bench: cannot create the session");
        goto done;
    }
    /* Random ids, as llama-bench: content does not change the work done. */
    tok = malloc((size_t)n_max * sizeof *tok);
    if (!tok) {
        rc = fail(KVF_ERR_NOMEM, "bench");
        goto done;
    }
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < n_max; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)info.n_vocab);
    }
    struct bench_mm mmr = { 0 };
    if (mm && (rc = bench_media(a, m, &sp, &mmr)))
        goto done;
    if (a->n_prompt_bench > 0 && (st = bench_run(s, &info, tok, a->n_prompt_bench, false, 0, a->reps, !a->no_warmup, &res[n_res++])))
        goto failed;
    if (a->n_predict > 0 && (st = bench_run(s, &info, tok, a->n_predict, true, n_pre, a->reps, !a->no_warmup, &res[n_res++])))
        goto failed;
    const size_t rss = kvf_peak_rss_bytes();
    if (a->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", info.name);
        cJSON_AddStringToObject(o, "arch", info.arch);
        cJSON_AddNumberToObject(o, "n_params", (double)info.n_params);
        cJSON_AddNumberToObject(o, "weight_bytes", (double)info.weight_bytes);
        cJSON_AddStringToObject(o, "weight_types", info.weight_types);
        cJSON_AddNumberToObject(o, "n_threads", a->threads);
        cJSON_AddNumberToObject(o, "n_batch", a->batch);
        cJSON_AddStringToObject(o, "simd", kvf_simd_level());
        cJSON_AddNumberToObject(o, "repetitions", a->reps);
        cJSON_AddStringToObject(o, "kv", a->kv ? a->kv : "full");
        cJSON_AddStringToObject(o, "kv_type", kvf_kv_type_name(a->kv_type_id));
        cJSON *tests = cJSON_AddArrayToObject(o, "tests");
        for (int i = 0; i < n_res; i++) {
            cJSON *t = cJSON_CreateObject();
            cJSON_AddStringToObject(t, "name", res[i].name);
            cJSON_AddNumberToObject(t, "n_tokens", res[i].n_tokens);
            cJSON_AddNumberToObject(t, "tok_per_s", res[i].mean);
            cJSON_AddNumberToObject(t, "tok_per_s_std", res[i].std);
            cJSON_AddNumberToObject(t, "kv_bytes", (double)res[i].kv_bytes);
            cJSON_AddNumberToObject(t, "kv_peak_bytes", (double)res[i].kv_peak);
            if (res[i].name[0] == 't') {
                cJSON_AddNumberToObject(t, "decode_ms_per_token", res[i].mean > 0 ? 1e3 / res[i].mean : 0);
                cJSON_AddNumberToObject(t, "prefill_ms", res[i].prefill_ms);
                cJSON_AddNumberToObject(t, "compress_ms", res[i].compress_ms);
            }
            if (res[i].per_layer) { /* the context the decode test followed */
                cJSON *kv = cJSON_AddObjectToObject(t, "kv");
                cJSON_AddStringToObject(kv, "policy", a->kv ? a->kv : "full");
                cJSON_AddNumberToObject(kv, "bytes_full", (double)res[i].kv_full);
                cJSON_AddNumberToObject(kv, "bytes_kept", (double)res[i].kv_kept);
                cJSON_AddNumberToObject(kv, "ratio", res[i].kv_full ? (double)res[i].kv_kept / (double)res[i].kv_full : 1.0);
                cJSON_AddNumberToObject(kv, "peak_bytes", (double)res[i].kv_peak);
                cJSON_AddItemToObject(kv, "per_layer", res[i].per_layer);
                res[i].per_layer = NULL;
            }
            if (res[i].name[0] == 't')
                cJSON_AddNumberToObject(t, "weight_bytes_per_s", (double)info.weight_bytes * res[i].mean);
            cJSON_AddItemToArray(tests, t);
        }
        if (mm) {
            cJSON *t = cJSON_AddObjectToObject(o, "multimodal");
            cJSON_AddNumberToObject(t, "n_media", mmr.n_media);
            cJSON_AddNumberToObject(t, "n_encoded", mmr.n_encoded);
            cJSON_AddBoolToObject(t, "synthetic", mmr.synthetic);
            cJSON_AddNumberToObject(t, "n_tokens", mmr.n_tokens);
            cJSON_AddNumberToObject(t, "encode_ms_per_image", mmr.encode_ms_per_image);
            cJSON_AddNumberToObject(t, "prefill_ms", mmr.prefill_ms);
            cJSON_AddNumberToObject(t, "compress_ms", mmr.compress_ms);
            cJSON_AddNumberToObject(t, "ttft_ms", mmr.ttft_ms);
            cJSON_AddNumberToObject(t, "kv_bytes", (double)mmr.kv_bytes);
            cJSON_AddNumberToObject(t, "kv_peak_bytes", (double)mmr.kv_peak);
        }
        cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rss);
        rc = print_json(o);
    } else {
        printf("model %s (%s, %.1f M params, %.1f MiB of weights), %s, batch %d, kv %s, %d repetitions\n", info.name,
               info.arch, (double)info.n_params / 1e6, (double)info.weight_bytes / MIB, kvf_simd_level(),
               a->batch, kvf_kv_type_name(a->kv_type_id), a->reps);
        for (int i = 0; i < n_res; i++) {
            printf("%-8s %10.2f ± %-8.2f tok/s   kv %8.2f MiB", res[i].name, res[i].mean, res[i].std,
                   res[i].kv_bytes / MIB);
            if (res[i].name[0] == 't')
                printf("   weights %.2f GB/s   %.3f ms/token", (double)info.weight_bytes * res[i].mean / 1e9,
                       res[i].mean > 0 ? 1e3 / res[i].mean : 0);
            if (res[i].compress_ms > 0)
                printf("   compress %.2f ms (%.1f%% of the %.0f ms prefill)", res[i].compress_ms,
                       res[i].prefill_ms > 0 ? 100 * res[i].compress_ms / res[i].prefill_ms : 0, res[i].prefill_ms);
            putchar('\n');
        }
        if (mm)
            printf("mm       %d media (%d encoded%s), %d tokens: encode %.2f ms/image, prefill %.2f ms, "
                   "compress %.2f ms, ttft %.2f ms, kv %.2f MiB (peak %.2f MiB)\n", mmr.n_media, mmr.n_encoded,
                   mmr.synthetic ? ", synthetic" : "", mmr.n_tokens, mmr.encode_ms_per_image, mmr.prefill_ms,
                   mmr.compress_ms, mmr.ttft_ms, mmr.kv_bytes / MIB, mmr.kv_peak / MIB);
        printf("peak rss %.1f MiB\n", rss / MIB);
    }
    goto done;
failed:
    rc = fail(st, "bench");
done:
    for (int i = 0; i < n_res; i++)
        cJSON_Delete(res[i].per_layer);
    free(tok);
    kvf_session_free(s);
    kvf_model_free(m);
    return rc;
}

/* ------------------------------------------------------------- profile -- */

static void profile_defaults(struct args *a) {
    a->budget = 0.2f;
    a->batch = kvf_session_default_params().n_batch;
}

static int profile_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        { "--mmproj", NULL, OPT_STR, &a->mmproj, 0, 0, "FILE", "vision projector GGUF (llama.cpp mmproj) for a GGUF decoder" },
        { "--samples", NULL, OPT_STR, &a->samples, 0, 0, "FILE", "sample prompts: one JSON object per line, "
          "{\"prompt\": TEXT, \"media\": [{\"image\"|\"frame\"|\"pseudo\": PATH}, ...]}, paths relative to FILE" },
        { "--budget", NULL, OPT_FLOAT, &a->budget, 0.001, 1, "R", "share of the KV cache kept (default 0.2)" },
        { "--output", "-o", OPT_STR, &a->output, 0, 0, "FILE", "where to write the profile (JSON)" },
        { "--pseudo-noise", NULL, OPT_FLOAT, &a->pseudo_noise, 0, 100, "S", "Gaussian noise on pseudo-images, x embedding RMS (default 0)" },
        OPT_BATCH, OPT_THREADS, OPT_JSON,
    };
    return opts_set(out, t, sizeof t / sizeof t[0]);
}

/* One sample line's media, in marker order; paths relative to dir. */
int samples_media(const char *cmd, const struct args *a, const struct kvf_model *m, const cJSON *list, const char *dir,
                  int line, struct media_set *ms) {
    const cJSON *it;
    int rc = 0, i = 0;
    cJSON_ArrayForEach(it, list) {
        const cJSON *v = it->child;
        if (!cJSON_IsObject(it) || !v || v->next || !cJSON_IsString(v)) {
            print_error("%s: samples line %d: media item %d is not {\"image\"|\"frame\"|\"pseudo\": PATH}", cmd, line, i);
            return EXIT_INPUT;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s%s", v->valuestring[0] == '/' ? "" : dir, v->valuestring);
        if (!strcmp(v->string, "image")) rc = media_image_file(a, m, path, KVF_MOD_IMAGE, ms);
        else if (!strcmp(v->string, "frame")) rc = media_image_file(a, m, path, KVF_MOD_VIDEO, ms);
        else if (!strcmp(v->string, "pseudo")) rc = media_pseudo(a, m, path, i, ms);
        else {
            print_error("%s: samples line %d: unknown media kind '%s' (image, frame, pseudo)", cmd, line, v->string);
            return EXIT_INPUT;
        }
        if (rc)
            return rc;
        i++;
    }
    return 0;
}

/* PrefixKV's offline estimation: the per-layer budgets searched on each
 * sample (prefixkv online), averaged, written for prefixkv:profile=FILE. */
static int cmd_profile(const struct args *a) {
    if (!a->samples || !a->output) {
        print_error("profile: --samples FILE and -o FILE are required");
        return EXIT_USAGE;
    }
    char *text = NULL, spec[64], dir[4096];
    size_t len = 0;
    int rc = read_file(a->samples, &text, &len);
    if (rc)
        return rc;
    const char *slash = strrchr(a->samples, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - a->samples + 1) : 0, a->samples);
    snprintf(spec, sizeof spec, "prefixkv:budget=%.6g,online=1", (double)a->budget);
    struct kvf_model *m = NULL;
    struct kvf_model_info info;
    double *ratio = NULL, *gini = NULL;
    cJSON *per_sample = cJSON_CreateArray();
    int n = 0, line = 0;
    if ((rc = load_model(a, &m)))
        goto done;
    kvf_model_get_info(m, &info);
    ratio = calloc((size_t)info.n_layer, sizeof *ratio);
    gini = calloc((size_t)info.n_layer, sizeof *gini);
    if (!ratio || !gini) {
        rc = fail(KVF_ERR_NOMEM, "profile");
        goto done;
    }
    for (char *ln = text, *next; ln && *ln && !rc; ln = next) {
        next = strchr(ln, '\n');
        if (next)
            *next++ = '\0';
        line++;
        if (!ln[strspn(ln, " \t\r")])
            continue;
        cJSON *o = cJSON_Parse(ln);
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
        const cJSON *media = cJSON_GetObjectItemCaseSensitive(o, "media");
        struct media_set ms = { 0 };
        struct kvf_prompt *pr = NULL;
        struct kvf_session *s = NULL;
        if (!cJSON_IsString(pt) || (media && !cJSON_IsArray(media))) {
            print_error("profile: %s line %d: expected {\"prompt\": TEXT, \"media\": [...]}", a->samples, line);
            rc = EXIT_INPUT;
        }
        if (!rc)
            rc = samples_media("profile", a, m, media, dir, line, &ms);
        if (!rc)
            rc = prompt_make(m, pt->valuestring, &ms, false, &pr);
        struct kvf_session_params sp = kvf_session_default_params();
        sp.n_ctx = pr ? kvf_prompt_n_tokens(pr) : 0;
        sp.n_batch = a->batch;
        sp.n_threads = a->threads;
        sp.kv_spec = spec;
        enum kvf_status st = KVF_OK;
        if (!rc && ((st = kvf_session_init(m, &sp, &s)) != KVF_OK || (st = kvf_session_prefill_prompt(s, pr, NULL)) != KVF_OK ||
                    (st = kvf_session_compress(s)) != KVF_OK))
            rc = fail(st, "profile: sample");
        if (!rc) {
            cJSON *rs = cJSON_CreateArray();
            for (int l = 0; l < info.n_layer; l++) {
                double r, g;
                kvf_session_kv_layer_budget(s, l, &r, &g);
                ratio[l] += r;
                gini[l] += g;
                cJSON_AddItemToArray(rs, cJSON_CreateNumber(r));
            }
            cJSON_AddItemToArray(per_sample, rs);
            n++;
            if (!a->json)
                fprintf(stderr, "kvfold: sample %d (line %d): %d positions\n", n, line, kvf_prompt_n_tokens(pr));
        }
        kvf_session_free(s);
        kvf_prompt_free(pr);
        media_set_free(&ms);
        cJSON_Delete(o);
    }
    if (!rc && n == 0) {
        print_error("profile: '%s' holds no samples", a->samples);
        rc = EXIT_INPUT;
    }
    if (rc)
        goto done;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "model", info.name);
    cJSON_AddStringToObject(out, "arch", info.arch);
    cJSON_AddNumberToObject(out, "n_layer", info.n_layer);
    cJSON_AddNumberToObject(out, "budget", f32_json(a->budget));
    cJSON_AddNumberToObject(out, "samples", n);
    cJSON *jr = cJSON_AddArrayToObject(out, "ratios"), *jg = cJSON_AddArrayToObject(out, "gini");
    for (int l = 0; l < info.n_layer; l++) {
        cJSON_AddItemToArray(jr, cJSON_CreateNumber(ratio[l] / n));
        cJSON_AddItemToArray(jg, cJSON_CreateNumber(gini[l] / n));
    }
    cJSON_AddItemToObject(out, "per_sample", per_sample);
    per_sample = NULL;
    char *txt = cJSON_Print(out);
    FILE *f = txt ? fopen(a->output, "w") : NULL;
    const bool ok = f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF;
    if ((f && fclose(f) != 0) || !ok)
        rc = fail(KVF_ERR_IO, "profile: cannot write the output file");
    if (!rc && a->json)
        rc = print_json(out);
    else {
        if (!rc) {
            printf("layer  ratio   gini   (budget %.3g, %d sample%s) -> %s\n", (double)a->budget, n, n == 1 ? "" : "s", a->output);
            for (int l = 0; l < info.n_layer; l++)
                printf("%5d  %.3f   %.3f\n", l, ratio[l] / n, gini[l] / n);
        }
        cJSON_Delete(out);
    }
    free(txt);
done:
    cJSON_Delete(per_sample);
    free(ratio);
    free(gini);
    kvf_model_free(m);
    free(text);
    return rc;
}

/* ------------------------------------------------------------ policies -- */

static int policies_opts(struct args *a, struct opt *out) {
    const struct opt t[] = { OPT_JSON };
    return opts_set(out, t, sizeof t / sizeof t[0]);
}

static int cmd_policies(const struct args *a) {
    cJSON *arr = a->json ? cJSON_CreateArray() : NULL;
    const char *stage = "";
    for (int i = 0; i < kvf_kv_policy_count(); i++) {
        struct kvf_kv_policy_info p;
        kvf_kv_policy_get(i, &p);
        if (!a->json) {
            const bool preset = !strcmp(p.stage, "preset");
            if (strcmp(stage, p.stage))
                printf(preset ? "presets (--kv NAME[:key=value,...]):\n"
                              : "\n%s stage (append +%s=OPTION[:key=value,...]):\n", p.stage, p.stage);
            stage = p.stage;
            printf("  %-15s %s\n  %-15s defaults: %s\n  %-15s from: %s\n", p.name, p.summary, "",
                   p.defaults[0] ? p.defaults : "(no parameters)", "", p.paper);
            continue;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "stage", p.stage);
        cJSON_AddStringToObject(o, "name", p.name);
        cJSON_AddStringToObject(o, "summary", p.summary);
        cJSON_AddStringToObject(o, "paper", p.paper);
        cJSON_AddStringToObject(o, "keys", p.keys);
        cJSON_AddStringToObject(o, "defaults", p.defaults);
        cJSON_AddItemToArray(arr, o);
    }
    if (!a->json)
        printf("\nbudget: a ratio of the tokens seen (0.2; 1.0 never evicts) or a count per head (1024).\n"
               "example: --kv snapkv:budget=0.2+decode=h2o\n");
    return a->json ? print_json(arr) : 0;
}

/* ---------------------------------------------------------------- main -- */

static const struct command commands[] = {
    { "info", "Print a model's architecture, sizes, weight types, tokenizer and chat template.", "-m FILE [--json]",
      NULL, cmd_info, NULL, info_opts, false },
    { "tokenize", "Print the token ids of a text on one line, space separated.",
      "-m FILE (-p TEXT | -f FILE) [--bos] [--special]",
      "Only the vocabulary is loaded, so vocab-only GGUF files work. No BOS/EOS is added\n"
      "unless --bos, and special-token text is plain text unless --special.",
      cmd_tokenize, NULL, tokenize_opts, false },
    { "generate", "Generate text from a prompt, streaming it to stdout; timings go to stderr.",
      "-m FILE (-p TEXT | -f FILE) [options]",
      "Decoding is greedy by default (--temp 0), so runs are reproducible; with --temp > 0 the\n"
      "sampler applies temperature, then top-k, top-p and min-p, and draws with --seed.\n"
      "Generation stops at an end-of-generation token or after -n tokens. --json prints one\n"
      "object (text, n_prompt, n_gen, stop, timings, kv, peak_rss_bytes) instead of streaming.",
      cmd_generate, generate_defaults, generate_opts, false },
    { "perplexity", "Perplexity of a text file, llama.cpp's method.", "-m FILE -f TEXTFILE [options]",
      "The text is split into chunks of --ctx tokens (BOS first when the model uses one); the\n"
      "second half of each chunk is scored. A text shorter than one chunk is scored as a\n"
      "single chunk, all but its first token. Prints the running PPL per chunk and the final\n"
      "PPL with its standard error.",
      cmd_perplexity, perplexity_defaults, perplexity_opts, false },
    { "bench", "Prefill and decode speed, like llama-bench.", "-m FILE [-p N] [-n N] [-r REPS] [options]",
      "ppN prefills N random tokens at once; tgN decodes N tokens one at a time. Each runs\n"
      "once untimed, then -r times; reported as mean ± std tokens/s, with the KV cache size,\n"
      "peak resident memory, and for tg the weight bytes read per second.",
      cmd_bench, bench_defaults, bench_opts, false },
    { "profile", "Search PrefixKV's per-layer KV budgets on sample prompts and write them to a file.",
      "-m FILE --samples FILE --budget R -o FILE [options]",
      "Each sample runs with prefixkv online (a binary search for the retention threshold at\n"
      "which the layers' budgets add up to R); the per-layer ratios averaged over the samples\n"
      "are written as JSON, with the Gini coefficient of each layer's priority curve, for\n"
      "--kv prefixkv:profile=FILE.",
      cmd_profile, profile_defaults, profile_opts, false },
    { "eval", "Compare KV policies: consistency with the full cache, needle in a haystack, MileBench.",
      "consistency|needle|milebench -m FILE [--kv SPEC]... [--budgets LIST] [options]",
      "consistency: the full cache's greedy output is the reference; each policy and budget gets the\n"
      "perplexity of that output (teacher-forced, compression active) and the ROUGE-L F1 of its own\n"
      "greedy output. needle: a password hidden at --depths among --segments text and image\n"
      "segments; correct when the answer contains it. Without --data, consistency and needle\n"
      "make their own data from --seed. milebench: MileBench's tasks from --data DIR (NAME/NAME.json\n"
      "and NAME/images/, as downloaded), prompts built and cut to --ctx as MileBench does for\n"
      "LLaVA, scored by its own rules (accuracy or ROUGE-L); needs a vision model. Each --kv runs\n"
      "at every budget of --budgets (presets without a budget run once); the full cache always\n"
      "runs. Prints a markdown summary (--json: one JSON line per run and sample instead); --out\n"
      "DIR adds summary.md, summary.csv and results.jsonl, --plots DIR SVG charts, --kept-map DIR\n"
      "per-layer maps of the image entries kept, merged and evicted.",
      cmd_eval, eval_defaults, eval_opts, false },
    { "policies", "List the KV cache policies --kv accepts, with their parameters and defaults.", "[--json]",
      "Every (layer, kv head) keeps the entries its rule scores best once the prompt is in;\n"
      "evicted entries are freed. Syntax: --kv NAME[:key=value,...].",
      cmd_policies, NULL, policies_opts, true },
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void print_usage(FILE *f) {
    fprintf(f, "kvfold %s — language-model inference with a compressed KV cache\n\n"
               "usage: kvfold COMMAND [options]   (kvfold COMMAND --help for details)\n\ncommands:\n",
            KVF_VERSION_STRING);
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fputs("\nexit status: 0 ok, 1 usage error, 2 bad input (file, format, context), 3 runtime failure\n", f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_error("no command given (see kvfold --help)");
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("kvfold %s\n", KVF_VERSION_STRING);
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++) {
        const struct command *c = &commands[i];
        if (strcmp(argv[1], c->name) != 0)
            continue;
        struct args a = { 0 };
        if (c->defaults)
            c->defaults(&a);
        /* eval takes its mode first: kvfold eval needle -m ... */
        const bool mode = c->run == cmd_eval && argc > 2 && argv[2][0] != '-';
        if (mode)
            a.eval_mode = argv[2];
        int rc = parse_args(c, &a, argc - 2 - mode, argv + 2 + mode);
        if (rc < 0 && a.kv && kvf_kv_policy_check(a.kv) != KVF_OK) {
            print_error("%s: --kv: %s (see kvfold policies)", c->name, kvf_last_error());
            rc = EXIT_USAGE;
        }
        if (rc < 0 && a.kv_type && kvf_kv_type_parse(a.kv_type, &a.kv_type_id) != KVF_OK) {
            print_error("%s: --kv-type: %s", c->name, kvf_last_error());
            rc = EXIT_USAGE;
        }
        return rc >= 0 ? rc : c->run(&a);
    }
    print_error("unknown command '%s' (commands: info, tokenize, generate, perplexity, bench, profile, eval, policies; "
                "see kvfold --help)",
                argv[1]);
    return EXIT_USAGE;
}
