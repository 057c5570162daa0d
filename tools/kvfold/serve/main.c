/* kvfold serve's command: its options, their checks, and the process's
 * life: the scheduler and the HTTP daemon started, the stop signals waited
 * for, the answers in flight let out, everything stopped in order. */
#include "serve.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void serve_defaults(struct args *a) {
    a->serve.host = "127.0.0.1";
    a->serve.port = 8080;
    a->parallel = 4;
    a->serve.queue = 64;
    a->ctx = 4096;
    a->serve.max_body = "64MiB";
    a->serve.max_images = 8;
    a->serve.timeout = 60;
    a->serve.threads_http = 4;
    a->batch = kvf_session_default_params().n_batch;
}

static int serve_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        OPT_NO_REPACK,
        OPTS_VISION,
        { "--host", NULL, OPT_STR, &a->serve.host, 0, 0, "ADDR", "address to listen on (default 127.0.0.1)" },
        { "--port", NULL, OPT_INT, &a->serve.port, 0, 65535, "N", "TCP port; 0 picks a free one (default 8080)" },
        { "--parallel", "-np", OPT_INT, &a->parallel, 1, 256, "N", "sessions generating at once (default 4)" },
        { "--queue", NULL, OPT_INT, &a->serve.queue, 0, 1 << 16, "N",
          "requests waiting at most; more get 503 (default 64)" },
        { "--cache-sessions", NULL, OPT_INT, &a->serve.cache_sessions, 0, 1 << 12, "N",
          "keep up to N finished sessions for the next turn of their conversation (default 0)" },
        { "--kv", NULL, OPT_STR, &a->kv, 0, 0, "SPEC", "KV cache policy of requests without a \"kv\" field" },
        OPTS_KV_STORAGE,
        { "--kv-memory", NULL, OPT_STR, &a->serve.kv_memory, 0, 0, "SIZE",
          "KV cache bytes all sessions together may use, e.g. 512MiB (default: --parallel full contexts, "
          "with --kv's pass over a prompt)" },
        { "--ctx-size", "-c", OPT_INT, &a->ctx, 16, 1 << 20, "N", "positions per session at most (default 4096)" },
        { "--chat-template", NULL, OPT_STR, &a->chat_template, 0, 0, "NAME", "llama2, vicuna, chatml or gemma" },
        { "--alias", "-a", OPT_STR, &a->serve.alias, 0, 0, "NAME",
          "the model's name in /v1/models and in answers (default: the file's name); requests may name any" },
        { "--timeout", "-to", OPT_INT, &a->serve.timeout, 1, 86400, "N",
          "seconds a connection may stay silent, and a request's body may take to arrive (default 60)" },
        { "--threads-http", NULL, OPT_INT, &a->serve.threads_http, 1, 64, "N",
          "threads answering HTTP (default 4); the model runs on its own thread (-t)" },
        { "--api-key", NULL, OPT_STR, &a->serve.api_key, 0, 0, "KEY",
          "require 'Authorization: Bearer KEY' (not on /health)" },
        { "--api-key-file", NULL, OPT_STR, &a->serve.api_key_file, 0, 0, "FILE", "--api-key read from FILE" },
        { "--media-dir", NULL, OPT_STR, &a->serve.media_dir, 0, 0, "DIR", "allow file:// image URLs under DIR" },
        { "--slot-save-path", NULL, OPT_STR, &a->serve.slot_save_path, 0, 0, "DIR",
          "POST /slots/ID?action=save|restore "
          "with {\"filename\": NAME} keeps cached sessions in DIR/NAME (session files), as llama-server; a "
          "conversation with a key (\"user\", or the X-Session-Id header) is also written to DIR after each turn "
          "and read back from there when this server does not hold it (replicas sharing DIR)" },
        { "--slot-save-max", NULL, OPT_STR, &a->serve.slot_save_max, 0, 0, "SIZE",
          "the most bytes conversations' files "
          "take in --slot-save-path, the oldest removed first (default: no limit)" },
        { "--max-body", NULL, OPT_STR, &a->serve.max_body, 0, 0, "SIZE",
          "largest request body, and the most bytes a request's images hold, files included (default 64MiB)" },
        { "--max-images", NULL, OPT_INT, &a->serve.max_images, 0, 1024, "N", "images per request at most (default 8)" },
        { "--max-image-mpix", NULL, OPT_FLOAT, &a->max_image_mpix, 0.000001, 1e4, "M",
          "reject images over M megapixels (default 64)" },
        OPT_THREADS,
        OPT_BATCH,
    };
    OPTS_RETURN(out, t);
}

/* "512MiB", "2GiB", "64M" (binary multiples), "1GB" (decimal), "1000". */
static bool size_parse(const char *s, size_t *out) {
    static const struct { const char *unit; double mult; } units[] = {
        { "", 1 }, { "B", 1 }, { "K", 1024.0 }, { "KiB", 1024.0 }, { "KB", 1e3 }, { "M", MIB }, { "MiB", MIB },
        { "MB", 1e6 }, { "G", MIB * 1024 }, { "GiB", MIB * 1024 }, { "GB", 1e9 },
    };
    char *end;
    errno = 0;
    const double x = strtod(s, &end);
    if (end == s || errno || !isfinite(x) || x <= 0)
        return false;
    for (size_t i = 0; i < COUNT_OF(units); i++)
        if (strcmp(end, units[i].unit) == 0 && x * units[i].mult < 0x1p62) {
            *out = (size_t)(x * units[i].mult);
            return *out > 0;
        }
    return false;
}

/* --api-key-file's first line. */
static int api_key_read(struct args *a, char **owned) {
    size_t n;
    int rc = read_file(a->serve.api_key_file, owned, &n);
    if (rc)
        return rc;
    while (n > 0 && isspace((unsigned char)(*owned)[n - 1]))
        (*owned)[--n] = '\0';
    if (n == 0 || strchr(*owned, '\n')) {
        print_error("serve: --api-key-file %s: want one line holding the key", a->serve.api_key_file);
        return EXIT_USAGE;
    }
    a->serve.api_key = *owned;
    return 0;
}

/* Checks the options that are not plain numbers. */
static int serve_check(struct args *a, struct server *srv, char **key) {
    int32_t n;
    if (a->serve.kv_memory && !size_parse(a->serve.kv_memory, &srv->budget)) {
        print_error("serve: --kv-memory '%s': want a size such as 512MiB or 2GiB", a->serve.kv_memory);
        return EXIT_USAGE;
    }
    if (!size_parse(a->serve.max_body, &srv->max_body)) {
        print_error("serve: --max-body '%s': want a size such as 64MiB", a->serve.max_body);
        return EXIT_USAGE;
    }
    if (a->serve.api_key && !a->serve.api_key[0]) {
        print_error("serve: --api-key is empty: give a key, or no --api-key for a server without one");
        return EXIT_USAGE;
    }
    if (a->serve.alias && !a->serve.alias[0]) {
        print_error("serve: --alias is empty");
        return EXIT_USAGE;
    }
    if (a->serve.api_key && a->serve.api_key_file) {
        print_error("serve: give one of --api-key and --api-key-file");
        return EXIT_USAGE;
    }
    if (!http_host_ok(a)) {
        print_error("serve: --host '%s' is not an IPv4 or IPv6 address", a->serve.host);
        return EXIT_USAGE;
    }
    if (a->serve.media_dir && !path_is_dir(a->serve.media_dir)) {
        print_error("serve: --media-dir %s: not a directory", a->serve.media_dir);
        return EXIT_USAGE;
    }
    if (a->serve.slot_save_path && !path_is_dir(a->serve.slot_save_path)) {
        print_error("serve: --slot-save-path %s: not a directory", a->serve.slot_save_path);
        return EXIT_USAGE;
    }
    if (a->serve.slot_save_max && (!a->serve.slot_save_path || !size_parse(a->serve.slot_save_max, &srv->slot_max))) {
        print_error("serve: --slot-save-max '%s': want a size such as 512MiB or 2GiB, with --slot-save-path",
                    a->serve.slot_save_max);
        return EXIT_USAGE;
    }
    if (a->chat_template && kvf_chat_apply(NULL, a->chat_template, NULL, 0, false, NULL, 0, &n) != KVF_ERR_BUFFER) {
        print_error("serve: %s", kvf_last_error());
        return EXIT_USAGE;
    }
    return a->serve.api_key_file ? api_key_read(a, key) : 0;
}

/* Requests with a job whose answer is not yet all sent. */
static int serve_answering(struct server *srv) {
    pthread_mutex_lock(&srv->mu);
    const int n = srv->n_answering;
    pthread_mutex_unlock(&srv->mu);
    return n;
}

/* SIGINT and SIGTERM are process-directed: the kernel may hand them to any
 * thread that does not block them, including the OpenBLAS and OpenMP
 * workers the libraries started before serve_run could block anything. A
 * handler (not sigwait's default action, which kills the process wherever
 * it lands) writes the signal to a pipe the main thread reads. */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig) {
    const int saved = errno;
    const unsigned char c = (unsigned char)sig;
    const ssize_t n = write(stop_pipe[1], &c, 1); /* a signal handler can do nothing about a failure */
    (void)n;
    errno = saved;
}

/* The signal that stops the server (SIGINT or SIGTERM), once one came. */
static int stop_signal_wait(void) {
    unsigned char c = 0;
    while (read(stop_pipe[0], &c, 1) < 0 && errno == EINTR) {}
    return c;
}

static int serve_run(struct server *srv) {
    /* The server's own threads (started below, inheriting the mask) never
     * take SIGINT, SIGTERM or SIGPIPE; the main thread takes the first two
     * once they run, through on_stop_signal. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    if (pipe2(stop_pipe, O_CLOEXEC) != 0) {
        print_error("serve: pipe: %s", strerror(errno));
        return EXIT_RUNTIME;
    }
    const struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int rc = sched_start(srv);
    if (rc)
        return rc;
    struct MHD_Daemon *d = http_start(srv);
    if (d) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr, "kvfold: serve: listening on http://%s:%u (model %s, parallel %d, queue %d, ctx %d, "
                        "kv-memory %zu bytes, %zu bytes per position, %u connections, timeout %d s)\n",
                srv->a->serve.host, di ? di->port : 0, srv->model_id, srv->a->parallel, srv->a->serve.queue, srv->n_ctx,
                srv->budget, srv->pos_bytes, srv->max_conns, srv->a->serve.timeout);
        bool aware = false;
        if (srv->a->serve.cache_sessions > 0 && srv->a->kv &&
            kvf_kv_policy_question_aware(srv->a->kv, &aware) == KVF_OK && aware)
            fprintf(stderr, "kvfold: serve: note: --kv %s is question-aware: a cached session was compressed before "
                            "its conversation's next question existed, so a detail asked for later may be gone "
                            "(keydiff is question-agnostic: kvfold policies)\n", srv->a->kv);
        sigdelset(&sigs, SIGPIPE);
        pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
        const int sig = stop_signal_wait();
        fprintf(stderr, "kvfold: serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    sched_stop(srv); /* every waiting request is answered, then the connections close */
    if (d) {
        /* The answers just made go out before the connections close (5 s
         * at most). New requests meanwhile get 503 (sched_submit). No
         * MHD_quiesce_daemon: with a thread pool, 0.9.75's workers can race
         * it to take the listening socket out of their epoll sets, and the
         * loser aborts the process. */
        for (int i = 0; i < 500 && serve_answering(srv); i++)
            nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
        MHD_stop_daemon(d);
    }
    return d ? 0 : EXIT_RUNTIME;
}

static int cmd_serve(const struct args *given) {
    struct args a = *given;
    struct server srv = { .a = &a };
    char *key = NULL;
    int rc = serve_check(&a, &srv, &key);
    if (!rc)
        rc = load_model(&a, &srv.m);
    if (!rc) {
        kvf_model_get_info(srv.m, &srv.info);
        const char *slash = strrchr(a.model, '/');
        srv.model_id = a.serve.alias ? a.serve.alias : slash && slash[1] ? slash + 1 : a.model;
        srv.n_ctx = a.ctx;
        pthread_mutex_init(&srv.mu, NULL);
        pthread_cond_init(&srv.wake, NULL);
        rc = serve_run(&srv);
        pthread_cond_destroy(&srv.wake);
        pthread_mutex_destroy(&srv.mu);
    }
    kvf_model_free(srv.m);
    free(key);
    return rc;
}

const struct command serve_command = {
    .name = "serve",
    .summary = "Serve the model over HTTP with OpenAI's API; sessions share one KV memory budget.",
    .usage = "-m FILE [--mmproj FILE] [--host ADDR] [--port N] [--parallel N] [--kv-memory SIZE] [options]",
    .details = "Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, /health, /metrics\n"
               "(Prometheus text), /slots, POST /slots/ID?action=save|restore|erase (--slot-save-path). A request\n"
               "may name its KV policy in a \"kv\" field (as --kv).\n"
               "A request is admitted when the KV bytes it may reach fit --kv-memory beside those of the running\n"
               "sessions, so their sum never exceeds it (README, Serving). SIGINT or SIGTERM stop the server.",
    .run = cmd_serve,
    .defaults = serve_defaults,
    .opts = serve_opts,
};
