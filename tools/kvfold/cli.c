/* The kvfold command's shared machinery (see cli.h): errors, options, help,
 * files, the clock, JSON output, models and sessions. Unlike the library,
 * the CLI may print; it exits only from main. */
#include "cli.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

/* --------------------------------------------- Ctrl-C and progress -- */

static volatile sig_atomic_t sigint_count;

static void on_sigint(int sig) {
    (void)sig;
    static const char msg[] = "\nkvfold: interrupted: finishing what is running (Ctrl-C again to quit now)\n";
    if (sigint_count++)
        _exit(130);
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing to do about it in a handler */ }
}

static void interrupt_install(void) {
    struct sigaction sa = { .sa_handler = on_sigint };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

bool interrupted(void) { return sigint_count > 0; }
void interrupt_clear(void) { sigint_count = 0; }

void pause_point(const char *label, long done) {
    static bool paused;
    const char *want = getenv("KVFOLD_PAUSE_AT"), *colon = want ? strrchr(want, ':') : NULL;
    if (paused || !colon || (size_t)(colon - want) != strlen(label) || strncmp(want, label, strlen(label)) != 0 ||
        done < atol(colon + 1))
        return;
    paused = true;
    fflush(stdout);
    fflush(stderr);
    raise(SIGSTOP);
    /* The test's SIGINT arrived while every thread was stopped, so no thread
     * took it then; after SIGCONT any thread (an OpenMP or BLAS worker) may
     * run the handler, a moment after this one checks. Wait for it (bounded,
     * should a test continue without one) so the stop point is exact. */
    for (int ms = 0; ms < 10000 && !interrupted(); ms++)
        nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
}

void progress_init(struct progress *p, const char *label, const char *unit, long total, const struct args *a) {
    *p = (struct progress){ .label = label, .unit = unit, .total = total, .t0 = now_ms() };
    p->last = p->t0;
    p->tty = !a->no_progress && isatty(STDERR_FILENO);
}

/* "1:05" or "2:03:10" */
static void fmt_duration(char *out, size_t cap, double s) {
    const long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, cap, "%ld:%02ld", t / 60, t % 60);
}

void progress_update(struct progress *p, long done, const char *detail) {
    pause_point(p->label, done);
    const double now = now_ms();
    /* A terminal sees the first update at once, however short the work. */
    if (now - p->last < (p->tty ? 100.0 : 5000.0) && !(p->tty && !p->shown))
        return;
    p->last = now;
    const double secs = (now - p->t0) / 1e3, rate = secs > 0 ? done / secs : 0;
    char left[32] = "?", el[32];
    fmt_duration(el, sizeof el, secs);
    if (p->total > 0 && rate > 0)
        fmt_duration(left, sizeof left, (double)(p->total - done) / rate);
    char line[256];
    if (p->total > 0)
        snprintf(line, sizeof line, "kvfold: %s: %ld/%ld %s (%.0f%%), %.1f %s/s, %s elapsed, %s left%s%s", p->label,
                 done, p->total, p->unit, 100.0 * done / p->total, rate, p->unit, el, left, detail ? ": " : "",
                 detail ? detail : "");
    else
        snprintf(line, sizeof line, "kvfold: %s: %ld %s, %.1f %s/s, %s elapsed%s%s", p->label, done, p->unit, rate,
                 p->unit, el, detail ? ": " : "", detail ? detail : "");
    /* \r and erase-to-end redraw the one line on a terminal */
    fprintf(stderr, p->tty ? "\r%s\033[K" : "%s\n", line);
    fflush(stderr);
    p->drawn = p->shown = true;
}

void progress_end(struct progress *p) {
    if (p->tty && p->drawn)
        fputs("\r\033[K", stderr);
    p->drawn = false;
}

/* -------------------------------------------------------------- errors -- */

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

int fail(enum kvf_status st, const char *what) {
    const char *msg = kvf_last_error();
    if (msg[0])
        print_error("%s: %s: %s", what, kvf_status_str(st), msg);
    else
        print_error("%s: %s", what, kvf_status_str(st));
    return exit_code(st);
}

int fail_option(enum kvf_status st, const char *what) {
    const int rc = fail(st, what);
    return st == KVF_ERR_INVALID_ARG ? EXIT_USAGE : rc;
}

/* ------------------------------------------------------------ options -- */

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
        const int n1 = (int)strcspn(opts[i].lng, " ");
        snprintf(left, sizeof left, "%s%s%.*s%s%s", opts[i].shrt ? opts[i].shrt : "", opts[i].shrt ? ", " : "    ",
                 n1, opts[i].lng, opts[i].metavar ? " " : "", opts[i].metavar ? opts[i].metavar : "");
        fprintf(f, "  %-24s %s\n", left, opts[i].help);
        if (opts[i].lng[n1])
            fprintf(f, "  %-24s (also%s)\n", "", opts[i].lng + n1);
    }
    fprintf(f, "  %-24s %s\n", "-h, --help", "show this help");
    fprintf(f, "  %-24s %s\n", "    --version", "print the version and the commit built from");
}

/* Whether arg[0..name_len) is one of the space-separated names in list. */
static bool name_in(const char *list, const char *arg, size_t name_len) {
    for (const char *w = list; w && *w;) {
        const size_t n = strcspn(w, " ");
        if (n == name_len && strncmp(w, arg, n) == 0)
            return true;
        w += n + (w[n] == ' ');
    }
    return false;
}

static const struct opt *find_opt(const struct opt *opts, int n, const char *arg, size_t name_len) {
    for (int k = 0; k < n; k++)
        if (name_in(opts[k].lng, arg, name_len) || name_in(opts[k].shrt, arg, name_len))
            return &opts[k];
    return NULL;
}

/* Stores the value v of option o; returns -1 to go on, else the exit code. */
static int store_value(const struct command *c, struct args *a, const struct opt *o, const char *v) {
    if (o->kind == OPT_STR) {
        *(const char **)o->dst = v;
    } else if (o->kind == OPT_LIST) {
        struct str_list *l = o->dst;
        if (l->n == STR_LIST_MAX) {
            print_error("%s: more than %d %.*s options", c->name, STR_LIST_MAX, NAME1(o->lng));
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
            print_error("%s: option '%.*s': '%s' is not an unsigned 64-bit integer", c->name, NAME1(o->lng), v);
        else
            print_error("%s: option '%.*s': '%s' is not %s in [%g, %g]", c->name, NAME1(o->lng), v,
                        o->kind == OPT_INT ? "an integer" : "a number", o->lo, o->hi);
        return EXIT_USAGE;
    }
    return -1;
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
        if (strcmp(arg, "--version") == 0) {
            printf("%s\n", kvf_build_info());
            return 0;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            print_error("%s: unexpected argument '%s' (see kvfold %s --help)", c->name, arg, c->name);
            return EXIT_USAGE;
        }
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const struct opt *o = find_opt(opts, n_opts, arg, name_len);
        if (!o) {
            print_error("%s: unknown option '%.*s' (see kvfold %s --help)", c->name, (int)name_len, arg, c->name);
            return EXIT_USAGE;
        }
        if (o->kind == OPT_FLAG) {
            if (eq) {
                print_error("%s: option '%.*s' takes no value", c->name, NAME1(o->lng));
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
        const int rc = store_value(c, a, o, v);
        if (rc >= 0)
            return rc;
    }
    if (!a->model && !c->no_model) {
        print_error("%s: missing -m FILE (see kvfold %s --help)", c->name, c->name);
        return EXIT_USAGE;
    }
    return -1;
}

/* llama.cpp's escapes, in place (the text only shrinks): \\n \\r \\t \\\\ \\'
 * \\" and \\xHH; anything else, and \\x00, stays as written. */
static void escapes_process(char *s) {
    char *o = s;
    for (const char *i = s; *i; i++) {
        if (*i != '\\' || !i[1]) {
            *o++ = *i;
            continue;
        }
        const char c = i[1];
        const char *hex = "0123456789abcdef";
        const char *h1 = c == 'x' && i[2] ? strchr(hex, tolower((unsigned char)i[2])) : NULL;
        const char *h2 = h1 && i[3] ? strchr(hex, tolower((unsigned char)i[3])) : NULL;
        if (c == 'n' || c == 'r' || c == 't' || c == '\\' || c == '\'' || c == '"') {
            *o++ = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
            i++;
        } else if (h2 && (h1 != hex || h2 != hex)) {
            *o++ = (char)((h1 - hex) * 16 + (h2 - hex));
            i += 3;
        } else {
            *o++ = *i;
        }
    }
    *o = '\0';
}

int command_main(const struct command *c, int argc, char **argv) {
    const struct kvf_session_params dp = kvf_session_default_params();
    struct args a = {.type_k_id = dp.type_k, .type_v_id = dp.type_v};
    if (c->defaults)
        c->defaults(&a);
    const bool mode = c->takes_mode && argc > 0 && argv[0][0] != '-';
    if (mode)
        a.eval_mode = argv[0];
    int rc = parse_args(c, &a, argc - mode, argv + mode);
    if (rc < 0 && a.kv && kvf_kv_policy_check(a.kv) != KVF_OK) {
        print_error("%s: --kv: %s (see kvfold policies)", c->name, kvf_last_error());
        rc = EXIT_USAGE;
    }
    /* --kv-type sets both; -ctk and -ctv (llama.cpp's) each one, over it */
    const struct { const char *opt, *v; enum kvf_kv_type *k, *v2; } types[] = {
        {"--kv-type", a.kv_type, &a.type_k_id, &a.type_v_id},
        {"--cache-type-k", a.type_k, &a.type_k_id, NULL},
        {"--cache-type-v", a.type_v, &a.type_v_id, NULL},
    };
    for (int i = 0; rc < 0 && i < 3; i++) {
        if (!types[i].v) continue;
        if (kvf_kv_type_parse(types[i].v, types[i].k) != KVF_OK) {
            print_error("%s: %s: %s", c->name, types[i].opt, kvf_last_error());
            rc = EXIT_USAGE;
        } else if (types[i].v2) {
            *types[i].v2 = *types[i].k;
        }
    }
    if (a.type_k_id == a.type_v_id)
        snprintf(a.kv_types, sizeof a.kv_types, "%s", kvf_kv_type_name(a.type_k_id));
    else
        snprintf(a.kv_types, sizeof a.kv_types, "%s/%s", kvf_kv_type_name(a.type_k_id), kvf_kv_type_name(a.type_v_id));
    if (rc >= 0)
        return rc;
    if (!a.no_escape) {
        /* Each of these points into argv, whose strings are the program's to change. */
        if (a.prompt) escapes_process((char *)a.prompt);
        if (a.system) escapes_process((char *)a.system);
        for (int i = 0; i < a.stops.n; i++)
            escapes_process((char *)a.stops.v[i]);
    }
    interrupt_install();
    return c->run(&a);
}

/* --------------------------------------------------------------- files -- */

/* The rest of f, at most READ_FILE_MAX bytes, NUL-terminated; closes f
 * unless it is stdin. */
static int read_stream(FILE *f, const char *name, char **out, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    bool over = false;
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        if (n > READ_FILE_MAX) { /* it grew while being read, or a pipe */
            over = true;
            break;
        }
        char *nb = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (!nb)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    const bool err = ferror(f);
    if (f != stdin)
        fclose(f);
    if (!buf) {
        print_error("'%s': out of memory", name);
        return EXIT_RUNTIME;
    }
    if (err || over) {
        free(buf);
        if (over) print_error("'%s' is over the %zu MiB limit on files read whole", name, READ_FILE_MAX >> 20);
        else print_error("cannot read '%s'", name);
        return EXIT_INPUT;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int read_file(const char *path, char **out, size_t *len) {
    /* Non-blocking open: a FIFO would otherwise wait here for a writer. */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        print_error("cannot open '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return EXIT_INPUT;
    }
    const int fl = fcntl(fd, F_GETFL);
    FILE *f = S_ISREG(sb.st_mode) && (size_t)sb.st_size <= READ_FILE_MAX && fl >= 0 &&
                      fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (!S_ISREG(sb.st_mode)) print_error("'%s' is not a regular file", path);
        else if ((size_t)sb.st_size > READ_FILE_MAX)
            print_error("'%s' is %lld bytes, over the %zu MiB limit on files read whole", path,
                        (long long)sb.st_size, READ_FILE_MAX >> 20);
        else print_error("cannot open '%s': %s", path, strerror(errno));
        close(fd);
        return EXIT_INPUT;
    }
    return read_stream(f, path, out, len);
}

int read_text_file(const char *path, char **out, size_t *len) {
    /* "-": standard input, which may be a pipe or a terminal */
    const int rc = strcmp(path, "-") == 0 ? read_stream(stdin, "<stdin>", out, len) : read_file(path, out, len);
    const char *nul = rc ? NULL : memchr(*out, '\0', *len);
    if (nul) {
        print_error("'%s': a NUL byte at offset %zu; a prompt file must be text", path, (size_t)(nul - *out));
        free(*out);
        *out = NULL;
        return EXIT_INPUT;
    }
    return rc;
}

int out_open(const char *flag, const char *path, FILE **f) {
    if (!(*f = fopen(path, "w"))) {
        print_error("%s %s: cannot open for writing: %s", flag, path, strerror(errno));
        return EXIT_INPUT;
    }
    return 0;
}

int out_write(const char *flag, const char *path, FILE *f, const char *text) {
    if (!f) return 0;
    errno = 0;
    const bool ok = text && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    const int err = errno;
    if (fclose(f) != 0 || !ok) {
        const int why = err ? err : errno;
        print_error("%s %s: cannot write: %s", flag, path, why ? strerror(why) : "out of memory");
        return EXIT_INPUT;
    }
    return 0;
}

int input_text(const char *cmd, const struct args *a, char **text, size_t *len) {
    if (!!a->prompt == !!a->file) {
        print_error("%s: give exactly one of -p TEXT and -f FILE", cmd);
        return EXIT_USAGE;
    }
    if (a->file)
        return read_text_file(a->file, text, len);
    *len = strlen(a->prompt);
    *text = malloc(*len + 1);
    if (!*text) {
        print_error("out of memory");
        return EXIT_RUNTIME;
    }
    memcpy(*text, a->prompt, *len + 1);
    return 0;
}

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

bool path_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool path_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ---------------------------------------------------------------- JSON -- */

/* What cJSON may still allocate in json_parse on this thread (serve parses
 * on its connection threads); SIZE_MAX outside it. */
static _Thread_local size_t json_left = SIZE_MAX;
static _Thread_local bool json_refused;

static void *json_malloc(size_t n) {
    if (json_left != SIZE_MAX) {
        if (n > json_left) {
            json_refused = true;
            return NULL;
        }
        json_left -= n;
    }
    return malloc(n);
}

void json_hooks_init(void) {
    cJSON_Hooks hooks = {json_malloc, free};
    cJSON_InitHooks(&hooks);
}

size_t json_parse_limit(size_t len) {
    if (len > (SIZE_MAX - 2 * JSON_BYTES_EXTRA) / JSON_BYTES_PER_BYTE) return SIZE_MAX - 1;
    return JSON_BYTES_PER_BYTE * len + JSON_BYTES_EXTRA;
}

cJSON *json_parse(const char *text, size_t len, bool *too_big) {
    json_refused = false;
    json_left = json_parse_limit(len);
    cJSON *o = cJSON_ParseWithLength(text ? text : "", text ? len : 0);
    json_left = SIZE_MAX;
    if (too_big) *too_big = !o && json_refused;
    return o;
}

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

double f32_json(float x) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", x);
    return strtod(b, NULL);
}

/* Invalid bytes and NUL become U+FFFD, so that JSON consumers can parse the
 * text: generation can stop in the middle of a multi-byte character. */
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

/* ---------------------------------------------------- models, sessions -- */

int load_model(const struct args *a, struct kvf_model **model) {
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = a->threads;
    mp.mmproj = a->mmproj;
    mp.image_min_tokens = a->image_min_tokens;
    mp.image_max_tokens = a->image_max_tokens;
    mp.repack = !a->no_repack;
    enum kvf_status st = kvf_model_load(a->model, &mp, model);
    if (st != KVF_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot load '%s'", a->model);
        return fail(st, what);
    }
    return 0;
}

struct kvf_session_params session_params(const struct args *a, int n_ctx) {
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = a->batch > 0 ? a->batch : sp.n_batch;
    sp.n_threads = a->threads;
    sp.kv_spec = a->kv;
    sp.type_k = a->type_k_id;
    sp.type_v = a->type_v_id;
    sp.kv_swa_full = a->swa_full;
    return sp;
}

int open_session(const struct kvf_model *m, const struct kvf_session_params *sp, const char *what,
                 struct kvf_session **out) {
    const enum kvf_status st = kvf_session_init(m, sp, out);
    return st == KVF_OK ? 0 : fail_option(st, what);
}

/* ------------------------------------------------------ KV cache JSON -- */

void kv_types_json(cJSON *o, const char *key, const struct args *a) {
    cJSON_AddStringToObject(o, key, a->kv_types);
    cJSON_AddStringToObject(o, "type_k", kvf_kv_type_name(a->type_k_id));
    cJSON_AddStringToObject(o, "type_v", kvf_kv_type_name(a->type_v_id));
}

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
void kv_kept_json(cJSON *kv, size_t full, size_t kept) {
    cJSON_AddNumberToObject(kv, "bytes_full", (double)full);
    cJSON_AddNumberToObject(kv, "bytes_kept", (double)kept);
    cJSON_AddNumberToObject(kv, "ratio", full ? (double)kept / (double)full : 1.0);
}

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
