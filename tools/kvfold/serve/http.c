/* kvfold serve: an OpenAI-compatible HTTP server (libmicrohttpd's epoll
 * event loop on --threads-http threads) in which many sessions share one KV
 * memory budget. This file speaks HTTP and JSON: it checks a request, has
 * its body turned into a serve_job (request.c), queues it for the
 * scheduler (sched.c) and answers from what the job becomes — one
 * JSON object, or server-sent events while it generates. No HTTP thread
 * waits for the model: a connection whose answer is not ready is suspended
 * (parked) and resumed by the scheduler when its job moves, so an idle or
 * slow connection costs a socket, never a thread, and /health and /metrics
 * are answered however busy the slots and the queue are. */
#include "serve.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

/* ------------------------------------------------------------ responses -- */

struct request;
struct route {
    const char *path, *method;
    enum MHD_Result (*handle)(struct MHD_Connection *c, struct request *r); /* once the body is in */
    bool open;                                                           /* answered without --api-key */
};

/* One HTTP request, from its first header to its log line. */
struct request {
    struct server *srv;
    char method[16], path[128];
    struct strbuf body;
    bool too_big, slow;
    int status;
    double t0;
    const struct route *route; /* NULL: refused at the first call */
    struct serve_job *job;
};

static enum MHD_Result respond(struct MHD_Connection *c, struct request *r, int status, const char *type,
                               char *body, size_t n, int retry_after) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    r->status = status;
    pthread_mutex_lock(&r->srv->mu);
    r->srv->by_status[status]++;
    pthread_mutex_unlock(&r->srv->mu);
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* The text of o, which is freed. */
static char *json_text(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static enum MHD_Result respond_json(struct MHD_Connection *c, struct request *r, int status, cJSON *o) {
    char *s = json_text(o);
    return s ? respond(c, r, status, "application/json", s, strlen(s), 0) : MHD_NO;
}

static cJSON *error_json(int status, const char *code, const char *msg) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", status == 401  ? "authentication_error"
                                       : status >= 500 ? "server_error"
                                                       : "invalid_request_error");
    cJSON_AddStringToObject(e, "code", code);
    return o;
}

static enum MHD_Result respond_error(struct MHD_Connection *c, struct request *r, int status, const char *code,
                                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static enum MHD_Result respond_error(struct MHD_Connection *c, struct request *r, int status, const char *code,
                                     const char *fmt, ...) {
    char msg[SERVE_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *s = json_text(error_json(status, code, msg));
    return s ? respond(c, r, status, "application/json", s, strlen(s), status == 503 ? 1 : 0) : MHD_NO;
}

/* ------------------------------------------------------------- waiting -- */

/* Suspends the connection until job_wake (lock held; called from its own
 * handler or content reader, the only places libmicrohttpd allows it). A
 * suspended connection neither times out nor notices a hang-up: the
 * scheduler watches its socket instead (job_client_gone). */
static void job_park(struct serve_job *j, struct MHD_Connection *c) {
    j->conn = c;
    j->parked = true;
    MHD_suspend_connection(c);
}

void job_wake(struct serve_job *j) {
    if (j->parked) {
        j->parked = false;
        MHD_resume_connection(j->conn);
    }
}

bool job_client_gone(const struct serve_job *j) {
    char ch;
    return j->parked && j->fd >= 0 && recv(j->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ------------------------------------------------------------ answers -- */

static void usage_json(cJSON *o, const struct serve_job *j) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_gen);
    /* OpenAI's field: prompt positions an earlier turn's cache held */
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", j->n_reused);
}

/* The kvfold extension: what the policy kept (as generate --json says it). */
static cJSON *kv_json(const struct server *srv, const struct serve_job *j) {
    cJSON *kv = cJSON_CreateObject();
    const char *policy = j->kv ? j->kv : srv->a->kv;
    cJSON_AddStringToObject(kv, "policy", policy ? policy : "full");
    kv_types_json(kv, "type", srv->a);
    cJSON_AddNumberToObject(kv, "bytes", (double)j->kv_bytes);
    kv_kept_json(kv, j->kv_full, j->kv_kept);
    cJSON_AddNumberToObject(kv, "peak_bytes", (double)j->kv_peak);
    cJSON_AddNumberToObject(kv, "n_past", j->n_past);
    return kv;
}

/* The head every answer and chunk starts with. */
static cJSON *answer_json(const struct server *srv, const struct serve_job *j, const char *object) {
    char id[32];
    snprintf(id, sizeof id, "%s-%d", j->chat ? "chatcmpl" : "cmpl", j->id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", srv->model_id);
    return o;
}

/* A choice holding text[0..n) (sanitized), as a message, delta or text. */
static cJSON *choice_json(const struct serve_job *j, const char *text, size_t n, const char *key, const char *finish,
                          bool role) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *clean = text ? utf8_sanitize(text, n) : NULL;
    if (j->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, key);
        if (role)
            cJSON_AddStringToObject(m, "role", "assistant");
        if (clean)
            cJSON_AddStringToObject(m, "content", clean);
    } else {
        cJSON_AddStringToObject(c, "text", clean ? clean : "");
        cJSON_AddNullToObject(c, "logprobs");
    }
    free(clean);
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

static enum MHD_Result answer_whole(struct MHD_Connection *c, struct request *r, struct serve_job *j) {
    cJSON *o = answer_json(r->srv, j, j->chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToArray(choices, choice_json(j, j->out.s ? j->out.s : "", j->out.n, "message", j->finish, true));
    usage_json(o, j);
    cJSON_AddItemToObject(o, "kv", kv_json(r->srv, j));
    return respond_json(c, r, 200, o);
}

/* Server-sent events of one streaming job; the reader's own reference. */
struct stream {
    struct server *srv;
    struct serve_job *job;
    struct MHD_Connection *conn;
    struct strbuf buf;    /* events not yet written */
    size_t off, sent;     /* bytes of buf written; of job->out turned into events */
    bool began, ended;
};

static void sse_put(struct stream *st, cJSON *o) {
    char *s = json_text(o);
    if (s && strbuf_put(&st->buf, "data: ", 6) && strbuf_put(&st->buf, s, strlen(s)))
        strbuf_put(&st->buf, "\n\n", 2);
    free(s);
}

/* The events for what the job did since the last call (lock held). */
static void sse_events(struct stream *st) {
    const struct server *srv = st->srv;
    const struct serve_job *j = st->job;
    const char *object = j->chat ? "chat.completion.chunk" : "text_completion";
    if (!st->began && j->chat) {
        cJSON *o = answer_json(srv, j, object);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), choice_json(j, "", 0, "delta", NULL, true));
        sse_put(st, o);
    }
    st->began = true;
    const size_t upto = j->state == JOB_DONE ? j->out.n : j->ready;
    if (upto > st->sent && !j->status) {
        cJSON *o = answer_json(srv, j, object);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"),
                             choice_json(j, j->out.s + st->sent, upto - st->sent, "delta", NULL, false));
        sse_put(st, o);
        st->sent = upto;
    }
    if (j->state != JOB_DONE)
        return;
    if (j->status) {
        sse_put(st, error_json(j->status, j->err_code, j->err));
    } else {
        cJSON *o = answer_json(srv, j, object);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), choice_json(j, NULL, 0, "delta", j->finish, false));
        cJSON_AddItemToObject(o, "kv", kv_json(srv, j));
        sse_put(st, o);
        if (j->include_usage) {
            o = answer_json(srv, j, object);
            cJSON_AddArrayToObject(o, "choices");
            usage_json(o, j);
            sse_put(st, o);
        }
    }
    strbuf_put(&st->buf, "data: [DONE]\n\n", 14);
    st->ended = true;
}

/* Sends the events ready; with none, parks the connection until the job
 * moves (returning 0 then is libmicrohttpd's way to say "not yet"). */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    struct stream *st = cls;
    (void)pos;
    if (st->off == st->buf.n) {
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        st->buf.n = st->off = 0;
        pthread_mutex_lock(&st->srv->mu);
        const bool gone = st->job->cancelled;
        if (!gone)
            sse_events(st);
        if (!gone && st->buf.n == 0 && !st->ended)
            job_park(st->job, st->conn);
        pthread_mutex_unlock(&st->srv->mu);
        if (gone || (st->ended && st->buf.n == 0)) /* the last events found no memory */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (st->buf.n == 0)
            return 0;
    }
    const size_t n = MIN(max, st->buf.n - st->off);
    memcpy(buf, st->buf.s + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) {
    struct stream *st = cls;
    pthread_mutex_lock(&st->srv->mu);
    if (st->job->state != JOB_DONE) { /* the client left mid-stream */
        st->job->cancelled = true;
        pthread_cond_signal(&st->srv->wake);
    }
    job_unref(st->job);
    pthread_mutex_unlock(&st->srv->mu);
    free(st->buf.s);
    free(st);
}

static enum MHD_Result answer_stream(struct MHD_Connection *c, struct request *r, struct serve_job *j) {
    struct stream *st = calloc(1, sizeof *st);
    if (!st)
        return respond_error(c, r, 500, "server_error", "out of memory");
    st->srv = r->srv;
    st->job = j;
    st->conn = c;
    pthread_mutex_lock(&r->srv->mu);
    j->refs++;
    pthread_mutex_unlock(&r->srv->mu);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, st, sse_free);
    if (!resp) {
        sse_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    r->status = 200;
    pthread_mutex_lock(&r->srv->mu);
    r->srv->by_status[200]++;
    pthread_mutex_unlock(&r->srv->mu);
    const enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* A completion's body read into a job and queued; false when answered
 * already (refused: *answer). */
static bool completion_submit(struct MHD_Connection *c, struct request *r, bool chat, enum MHD_Result *answer) {
    struct server *srv = r->srv;
    if (r->too_big) {
        *answer =
            respond_error(c, r, 413, "body_too_large", "the body is over %s (--max-body)", srv->a->serve.max_body);
        return false;
    }
    struct serve_job *j = calloc(1, sizeof *j);
    if (!j) {
        *answer = respond_error(c, r, 500, "server_error", "out of memory");
        return false;
    }
    j->refs = 1;
    j->chat = chat;
    j->sampling = kvf_sampler_default_params();
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    r->job = j;
    pthread_mutex_lock(&srv->mu);
    srv->n_answering++;
    j->id = ++srv->next_id;
    j->sampling.seed += (uint64_t)j->id; /* without a seed, requests draw differently */
    pthread_mutex_unlock(&srv->mu);
    struct serve_error e = {0};
    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Session-Id");
    if (sid && (!sid[0] || strlen(sid) > SERVE_CONV_MAX)) {
        *answer = respond_error(c, r, 400, "invalid_request", "X-Session-Id must be 1 to %d bytes", SERVE_CONV_MAX);
        return false;
    }
    if (!serve_job_parse(srv, r->body.s, r->body.n, chat, j, &e)) {
        *answer = respond_error(c, r, e.status, e.code, "%s", e.msg);
        return false;
    }
    if (sid)
        j->has_conv = true, j->conv = serve_conv_hash(sid);
    if (j->has_conv && srv->a->serve.slot_save_path)
        conv_restore(srv, j);
    pthread_mutex_lock(&srv->mu);
    const bool queued = sched_submit(srv, j);
    pthread_mutex_unlock(&srv->mu);
    if (!queued)
        *answer = respond_error(c, r, j->status, j->err_code, "%s", j->err);
    return queued;
}

/* POST /v1/chat/completions and /v1/completions: called once the body is
 * in, and again each time the parked connection is resumed, until the job
 * has an answer: a stream's once it left the queue (its admission errors
 * are HTTP statuses), a whole answer's once it ended. */
static enum MHD_Result handle_completion(struct MHD_Connection *c, struct request *r, bool chat) {
    struct server *srv = r->srv;
    enum MHD_Result answer = MHD_NO;
    if (!r->job && !completion_submit(c, r, chat, &answer))
        return answer;
    struct serve_job *j = r->job;
    pthread_mutex_lock(&srv->mu);
    const bool ready = j->state == JOB_DONE || (j->stream && j->state != JOB_QUEUED);
    if (!ready && !j->cancelled)
        job_park(j, c);
    const bool gone = j->cancelled;
    const int status = j->status;
    pthread_mutex_unlock(&srv->mu);
    if (gone)
        return MHD_NO; /* the client is gone: close */
    if (!ready)
        return MHD_YES;
    if (status)
        return respond_error(c, r, status, j->err_code, "%s", j->err);
    return j->stream ? answer_stream(c, r, j) : answer_whole(c, r, j);
}

/* ---------------------------------------------------------- endpoints -- */

static enum MHD_Result handle_models(struct MHD_Connection *c, struct request *r) {
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    cJSON_AddStringToObject(m, "id", r->srv->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "kvfold");
    return respond_json(c, r, 200, o);
}

/* One /slots entry: what every state shows (ids and counts, never a
 * request's text). */
static cJSON *slot_json(const struct server *srv, int id, const char *state, const char *kv, int tokens_seen,
                        int entries, size_t bytes, size_t reserved) {
    const char *policy = kv ? kv : srv->a->kv;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", id);
    cJSON_AddStringToObject(o, "state", state);
    cJSON_AddStringToObject(o, "policy", policy ? policy : "full");
    cJSON_AddNumberToObject(o, "tokens_seen", tokens_seen);
    cJSON_AddNumberToObject(o, "kv_entries", entries);
    cJSON_AddNumberToObject(o, "kv_bytes", (double)bytes);
    cJSON_AddNumberToObject(o, "kv_reserved_bytes", (double)reserved);
    return o;
}

/* Every session the scheduler holds: running (decoding), filling (its
 * prompt going in by parts), queued (in queue order) and idle (cached for a
 * next turn, oldest first: the first freed). */
static enum MHD_Result handle_slots(struct MHD_Connection *c, struct request *r) {
    struct server *srv = r->srv;
    cJSON *arr = cJSON_CreateArray();
    pthread_mutex_lock(&srv->mu);
    for (int i = 0; i < srv->n_active; i++) {
        const struct serve_job *j = srv->active[i];
        cJSON *o = slot_json(srv, j->id, "running", j->kv, j->n_past, j->kv_entries, j->kv_bytes, j->reserved);
        cJSON_AddNumberToObject(o, "n_prompt", j->n_prompt);
        cJSON_AddNumberToObject(o, "n_cached", j->n_reused);
        cJSON_AddNumberToObject(o, "n_gen", j->n_gen);
        cJSON_AddNumberToObject(o, "n_ctx", j->n_ctx);
        cJSON_AddItemToArray(arr, o);
    }
    const struct serve_job *f = srv->filling;
    if (f) { /* tokens_seen: the prompt's positions in so far, of n_prompt */
        cJSON *o = slot_json(srv, f->id, "filling", f->kv, f->n_past, f->kv_entries, f->kv_bytes, f->reserved);
        cJSON_AddNumberToObject(o, "n_prompt", f->n_prompt);
        cJSON_AddNumberToObject(o, "n_cached", f->n_reused);
        cJSON_AddNumberToObject(o, "n_ctx", f->n_ctx);
        cJSON_AddItemToArray(arr, o);
    }
    int pos = 0;
    for (const struct serve_job *j = srv->head; j; j = j->next) {
        /* Nothing reserved yet; the head, once tokenized, may wait for
         * kv_needed_bytes to fit (n_prompt 0: not tokenized yet). */
        cJSON *o = slot_json(srv, j->id, "queued", j->kv, 0, 0, 0, 0);
        cJSON_AddNumberToObject(o, "queue_position", ++pos);
        cJSON_AddNumberToObject(o, "n_prompt", j->n_prompt);
        cJSON_AddNumberToObject(o, "kv_needed_bytes", (double)j->reserved);
        cJSON_AddItemToArray(arr, o);
    }
    for (int i = 0; i < srv->n_idle; i++) { /* a cached session's bytes stay reserved */
        const struct serve_idle *ci = &srv->idle[i];
        cJSON_AddItemToArray(arr, slot_json(srv, ci->id, "idle", ci->kv, ci->n, ci->entries, ci->bytes, ci->bytes));
    }
    pthread_mutex_unlock(&srv->mu);
    return respond_json(c, r, 200, arr);
}

/* A slot file's name: 1 to 255 of [A-Za-z0-9._-], not starting with '.',
 * so that it names a file of --slot-save-path and nothing outside it. */
static bool slot_name_ok(const char *s) {
    const size_t n = strlen(s);
    if (n == 0 || n > 255 || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-')) return false;
    return true;
}

/* POST /slots/ID?action=save|restore|erase (llama-server's slot files):
 * save writes idle session ID (cached by --cache-sessions) to
 * --slot-save-path/FILENAME; restore reads such a file into a new idle
 * session, which the next turn of its conversation continues (the id it
 * gets is answered: ids are the server's, ID is not used); erase drops idle
 * session ID. The file is written from a copy taken under the lock, and
 * read before the lock is taken. */
static enum MHD_Result handle_slot_action(struct MHD_Connection *c, struct request *r) {
    struct server *srv = r->srv;
    const char *action = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action"), *digits = r->path + 7;
    char *end;
    const long id = strtol(digits, &end, 10);
    if (!isdigit((unsigned char)digits[0]) || *end || id > INT_MAX)
        return respond_error(c, r, 404, "not_found", "no endpoint %s (slots are /slots/ID with a number)", r->path);
    const bool save = action && !strcmp(action, "save"), restore = action && !strcmp(action, "restore");
    if (!save && !restore && !(action && !strcmp(action, "erase")))
        return respond_error(c, r, 400, "invalid_request", "action must be save, restore or erase");
    struct serve_error e = {0};
    int n = 0;
    if (!save && !restore) {
        pthread_mutex_lock(&srv->mu);
        const bool ok = sched_slot_erase(srv, (int)id, &n, &e);
        pthread_mutex_unlock(&srv->mu);
        if (!ok) return respond_error(c, r, e.status, e.code, "%s", e.msg);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id_slot", (double)id);
        cJSON_AddNumberToObject(o, "n_erased", n);
        return respond_json(c, r, 200, o);
    }
    if (!srv->a->serve.slot_save_path)
        return respond_error(c, r, 501, "not_supported",
                             "slot files are off: start the server with --slot-save-path DIR");
    cJSON *body = json_parse(r->body.s, r->body.n, NULL);
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(body, "filename");
    char path[4096], name[256];
    const bool named = cJSON_IsString(fn) && slot_name_ok(fn->valuestring);
    if (named) snprintf(name, sizeof name, "%s", fn->valuestring);
    cJSON_Delete(body);
    if (!named)
        return respond_error(c, r, 400, "invalid_request", "the body must be {\"filename\": NAME}, NAME 1 to 255 of "
                             "A-Z a-z 0-9 . _ - not starting with '.'");
    snprintf(path, sizeof path, "%s/%s", srv->a->serve.slot_save_path, name);
    const double t0 = now_ms();
    struct kvf_session *s = NULL;
    cJSON *o = cJSON_CreateObject();
    if (save) {
        pthread_mutex_lock(&srv->mu);
        const bool ok = sched_slot_copy(srv, (int)id, &s, &n, &e);
        pthread_mutex_unlock(&srv->mu);
        const size_t bytes = ok ? kvf_session_save_size(s) : 0;
        const enum kvf_status st = ok ? kvf_session_save(s, path) : KVF_OK;
        kvf_session_free(s);
        if (!ok || st != KVF_OK) {
            cJSON_Delete(o);
            return ok ? respond_error(c, r, 500, "server_error", "%s", kvf_last_error())
                      : respond_error(c, r, e.status, e.code, "%s", e.msg);
        }
        pthread_mutex_lock(&srv->mu);
        srv->slot_saves++, srv->slot_bytes_written += bytes;
        pthread_mutex_unlock(&srv->mu);
        cJSON_AddNumberToObject(o, "id_slot", (double)id);
        cJSON_AddStringToObject(o, "filename", name);
        cJSON_AddNumberToObject(o, "n_saved", n);
        cJSON_AddNumberToObject(o, "n_written", (double)bytes);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "timings"), "save_ms", now_ms() - t0);
        return respond_json(c, r, 200, o);
    }
    struct stat sb; /* a file of DIR itself, not a link out of it */
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        cJSON_Delete(o);
        return respond_error(c, r, 404, "not_found", "no slot file '%s' in --slot-save-path", name);
    }
    enum kvf_status st = kvf_session_load(srv->m, path, srv->a->threads, srv->a->ctx, &s);
    if (st != KVF_OK) {
        cJSON_Delete(o);
        return respond_error(c, r, st == KVF_ERR_NOMEM ? 500 : 400, "invalid_request", "slot file '%s': %s", name,
                             kvf_last_error());
    }
    int new_id = 0;
    n = kvf_session_n_past(s);
    pthread_mutex_lock(&srv->mu);
    const bool ok = sched_slot_adopt(srv, s, NULL, &new_id, &e);
    const double ms = now_ms() - t0;
    if (ok) srv->slot_restores++, srv->slot_bytes_read += (uint64_t)sb.st_size, srv->slot_restore_ms += ms;
    pthread_mutex_unlock(&srv->mu);
    if (!ok) {
        kvf_session_free(s);
        cJSON_Delete(o);
        return respond_error(c, r, e.status, e.code, "slot file '%s': %s", name, e.msg);
    }
    cJSON_AddNumberToObject(o, "id_slot", new_id);
    cJSON_AddStringToObject(o, "filename", name);
    cJSON_AddNumberToObject(o, "n_restored", n);
    cJSON_AddNumberToObject(o, "n_read", (double)sb.st_size);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "timings"), "restore_ms", ms);
    return respond_json(c, r, 200, o);
}

static void metric(struct strbuf *b, const char *name, const char *type, const char *help, double v) {
    char line[512];
    const int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.0f\n", name, help, name, type, name, v);
    strbuf_put(b, line, (size_t)n);
}

static enum MHD_Result handle_metrics(struct MHD_Connection *c, struct request *r) {
    struct server *srv = r->srv;
    struct strbuf b = {0};
    char line[128];
    pthread_mutex_lock(&srv->mu);
    static const char head[] = "# HELP kvfold_requests_total HTTP requests answered, by status\n"
                               "# TYPE kvfold_requests_total counter\n";
    strbuf_put(&b, head, sizeof head - 1);
    for (int s = 100; s < (int)COUNT_OF(srv->by_status); s++)
        if (srv->by_status[s]) {
            const int n = snprintf(line, sizeof line, "kvfold_requests_total{status=\"%d\"} %llu\n", s,
                                   (unsigned long long)srv->by_status[s]);
            strbuf_put(&b, line, (size_t)n);
        }
    metric(&b, "kvfold_prompt_tokens_total", "counter", "prompt tokens prefilled (cached positions are not)",
           (double)srv->prompt_tokens);
    metric(&b, "kvfold_generated_tokens_total", "counter", "tokens generated", (double)srv->gen_tokens);
    metric(&b, "kvfold_sessions_active", "gauge", "sessions generating", srv->n_active);
    metric(&b, "kvfold_sessions_queued", "gauge", "requests waiting for admission", srv->n_queued);
    metric(&b, "kvfold_kv_bytes_in_use", "gauge", "KV cache bytes the sessions hold (running, filling, cached)",
           (double)srv->in_use);
    metric(&b, "kvfold_kv_bytes_peak", "gauge", "most KV bytes in use at once", (double)srv->peak_in_use);
    metric(&b, "kvfold_kv_bytes_reserved", "gauge", "KV bytes reserved by admitted sessions", (double)srv->reserved);
    metric(&b, "kvfold_kv_bytes_budget", "gauge", "--kv-memory", (double)srv->budget);
    metric(&b, "kvfold_kv_bytes_per_position", "gauge", "KV bytes one position may cost", (double)srv->pos_bytes);
    metric(&b, "kvfold_kv_bytes_per_session", "gauge", "KV bytes a session's cache takes whatever its length",
           (double)srv->head_bytes);
    metric(&b, "kvfold_compressions_total", "counter", "KV compressions run", (double)srv->compressions);
    metric(&b, "kvfold_scheduler_turns_total", "counter",
           "scheduler turns (each: a request admitted, a prompt part, a decode step of every running session)",
           (double)srv->turns_total);
    metric(&b, "kvfold_sessions_cached", "gauge", "finished sessions kept for a next turn", srv->n_idle);
    metric(&b, "kvfold_slot_saves_total", "counter", "cached sessions saved to slot files", (double)srv->slot_saves);
    metric(&b, "kvfold_slot_restores_total", "counter", "slot files restored as cached sessions",
           (double)srv->slot_restores);
    metric(&b, "kvfold_slot_bytes_written_total", "counter", "bytes of slot files written",
           (double)srv->slot_bytes_written);
    metric(&b, "kvfold_slot_bytes_read_total", "counter", "bytes of slot files restored", (double)srv->slot_bytes_read);
    metric(&b, "kvfold_slot_restore_ms_total", "counter", "milliseconds the restores took", srv->slot_restore_ms);
    metric(&b, "kvfold_conversations_written_total", "counter", "conversations' sessions written to --slot-save-path",
           (double)srv->spills);
    metric(&b, "kvfold_conversations_restored_total", "counter",
           "conversations read back from --slot-save-path (this server did not hold them)",
           (double)srv->spill_restores);
    metric(&b, "kvfold_prompt_tokens_reused_total", "counter",
           "prompt positions taken from cached sessions instead of prefilled", (double)srv->reused_tokens);
    metric(&b, "kvfold_kv_reservation_overruns_total", "counter",
           "sessions seen holding more KV bytes than they reserved (0 unless the admission rule is broken)",
           (double)srv->overruns);
    static const char pol[] = "# HELP kvfold_sessions_total sessions started, by KV policy preset\n"
                              "# TYPE kvfold_sessions_total counter\n";
    strbuf_put(&b, pol, sizeof pol - 1);
    for (int i = 0; i < (int)COUNT_OF(srv->by_policy); i++) {
        struct kvf_kv_policy_info pi;
        if (srv->by_policy[i] && kvf_kv_policy_get(i, &pi) == KVF_OK) {
            const int n = snprintf(line, sizeof line, "kvfold_sessions_total{policy=\"%s\"} %llu\n", pi.name,
                                   (unsigned long long)srv->by_policy[i]);
            strbuf_put(&b, line, (size_t)n);
        }
    }
    pthread_mutex_unlock(&srv->mu);
    if (!b.s)
        return MHD_NO;
    return respond(c, r, 200, "text/plain; version=0.0.4", b.s, b.n, 0);
}

static enum MHD_Result handle_health(struct MHD_Connection *c, struct request *r) {
    return respond(c, r, 200, "application/json", strdup("{\"status\":\"ok\"}"), 15, 0);
}

static enum MHD_Result handle_chat(struct MHD_Connection *c, struct request *r) {
    return handle_completion(c, r, true);
}

static enum MHD_Result handle_text(struct MHD_Connection *c, struct request *r) {
    return handle_completion(c, r, false);
}

static const struct route routes[] = {
    { "/health", "GET", handle_health, true }, { "/v1/models", "GET", handle_models, false },
    { "/metrics", "GET", handle_metrics, false }, { "/slots", "GET", handle_slots, false },
    { "/v1/chat/completions", "POST", handle_chat, false }, { "/v1/completions", "POST", handle_text, false },
    { "/slots/", "POST", handle_slot_action, false }, /* and the slot's id: a prefix */
};

/* Compares in a time that depends on the key's length only. */
static bool key_matches(const char *given, const char *key) {
    const size_t gl = strlen(given), kl = strlen(key);
    unsigned diff = gl != kl;
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

/* The route of the request, or an answer refusing it (auth, path, method, size). */
static const struct route *route_check(struct MHD_Connection *c, struct request *r, enum MHD_Result *answer) {
    const struct route *rt = NULL;
    for (size_t i = 0; i < COUNT_OF(routes) && !rt; i++) {
        const size_t n = strlen(routes[i].path);
        if (routes[i].path[n - 1] == '/' ? strncmp(r->path, routes[i].path, n) == 0 && r->path[n]
                                         : strcmp(r->path, routes[i].path) == 0)
            rt = &routes[i];
    }
    const char *key = r->srv->a->serve.api_key;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (key && (!rt || !rt->open) && !(auth && strncmp(auth, "Bearer ", 7) == 0 && key_matches(auth + 7, key)))
        *answer = respond_error(c, r, 401, "invalid_api_key", "a valid 'Authorization: Bearer KEY' is required");
    else if (!rt)
        *answer = respond_error(c, r, 404, "not_found", "no endpoint %s", r->path);
    else if (strcmp(r->method, rt->method) != 0)
        *answer = respond_error(c, r, 405, "method_not_allowed", "%s takes %s", rt->path, rt->method);
    else if (len && strtoull(len, NULL, 10) > r->srv->max_body)
        *answer =
            respond_error(c, r, 413, "body_too_large", "the body is over %s (--max-body)", r->srv->a->serve.max_body);
    else
        return rt;
    return NULL;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    struct server *srv = cls;
    struct request *r = *con_cls;
    (void)version;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->srv = srv;
        r->t0 = now_ms();
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        *con_cls = r;
        enum MHD_Result answer = MHD_YES;
        r->route = route_check(c, r, &answer);
        return r->route ? MHD_YES : answer;
    }
    if (*upload_size) {
        /* A body trickled in byte by byte would hold its connection for
         * ever: the whole body gets --timeout seconds from the headers on. */
        if (now_ms() - r->t0 > 1e3 * srv->a->serve.timeout) {
            r->slow = true;
            return MHD_NO;
        }
        r->too_big = r->too_big || r->body.n + *upload_size > srv->max_body;
        if (r->route && !r->too_big && !strbuf_put(&r->body, upload, *upload_size))
            return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    return r->route ? r->route->handle(c, r) : MHD_YES; /* refused at the first call */
}

/* One log line per request, when it is over. */
static void request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    struct server *srv = cls;
    struct request *r = *con_cls;
    (void)c;
    if (!r)
        return;
    int n_prompt = 0, n_gen = 0;
    size_t kv = 0;
    if (r->job)
        conv_spill(srv, r->job);
    pthread_mutex_lock(&srv->mu);
    if (r->job) {
        if (r->job->state != JOB_DONE) {
            r->job->cancelled = true;
            pthread_cond_signal(&srv->wake);
        }
        srv->n_answering--;
        r->job->conn = NULL; /* the socket closes after this call: nothing may look at it */
        r->job->fd = -1;
        r->job->parked = false;
        n_prompt = r->job->n_prompt;
        n_gen = r->job->n_gen;
        kv = r->job->state == JOB_DONE ? r->job->kv_peak : r->job->kv_bytes;
        job_unref(r->job);
    }
    pthread_mutex_unlock(&srv->mu);
    fprintf(stderr, "kvfold: serve: %s %s %d prompt=%d gen=%d kv=%zu %.1fms%s\n", r->method, r->path, r->status,
            n_prompt, n_gen, kv, now_ms() - r->t0,
            r->slow                                          ? " (cut: the body took over --timeout)"
                : toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? ""
                                                             : " (cut)");
    free(r->body.s);
    free(r);
    *con_cls = NULL;
}

/* ------------------------------------------------------------ listening -- */

/* --host and --port as a socket address; false when --host is not an address. */
static bool host_addr(const struct args *a, struct sockaddr_storage *ss, unsigned *flags) {
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    memset(ss, 0, sizeof *ss);
    if (inet_pton(AF_INET, a->serve.host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)a->serve.port);
    } else if (inet_pton(AF_INET6, a->serve.host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)a->serve.port);
        *flags |= MHD_USE_IPv6;
    } else {
        return false;
    }
    return true;
}

bool http_host_ok(const struct args *a) {
    struct sockaddr_storage ss;
    unsigned flags = 0;
    return host_addr(a, &ss, &flags);
}

/* The connections the server takes at once: as many as the process may
 * open files, less a few for the model's files and the scheduler (the soft
 * limit is raised to the hard one first). Idle connections cost a socket
 * and a little memory each, no thread, so the limit is the system's. */
static unsigned connection_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024 - 64;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = MIN(rl.rlim_max, (rlim_t)1 << 20);
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return (unsigned)MAX(MIN(rl.rlim_cur, (rlim_t)1 << 20), (rlim_t)128) - 64;
}

struct MHD_Daemon *http_start(struct server *srv) {
    const struct args *a = srv->a;
    struct sockaddr_storage ss;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    host_addr(a, &ss, &flags);
    srv->max_conns = connection_limit();
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)a->serve.port, NULL, NULL, handle, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, request_done, srv, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)a->serve.timeout,
        MHD_OPTION_CONNECTION_LIMIT, srv->max_conns, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)a->serve.threads_http,
        MHD_OPTION_END);
    if (!d)
        print_error("serve: cannot listen on %s port %d: %s", a->serve.host, a->serve.port, strerror(errno));
    return d;
}
