/* What kvfold serve's files share: main.c is the command (options, start,
 * signals, stop), http.c speaks HTTP and JSON (libmicrohttpd's epoll event
 * loop on a few threads, which never wait for the model: a connection
 * whose answer is not ready is suspended, "parked", and resumed by the
 * scheduler; each route a handler), request.c turns a request body into a
 * serve_job, conv.c keeps conversations on disk, the scheduler (sched.h:
 * sched.c, admit.c, budget.c, idle.c, output.c) runs the model on one
 * thread of its own. The HTTP
 * side and the scheduler meet under the server's lock, and the job is freed
 * by whichever side lets go of it last (refs). */
#ifndef KVF_SERVE_H
#define KVF_SERVE_H

#include "../cli.h"

#include <pthread.h>

struct MHD_Connection;
struct MHD_Daemon;

#define SERVE_STOP_MAX 4
#define SERVE_ERR_MAX 512

enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

/* An image of a request as it came: its file's bytes, from a data URL or
 * read from a file under --media-dir when the request was (so the file
 * checked is the file used: nothing looks its path up again). It is decoded
 * only when its job is prepared, so that queued requests hold compressed
 * bytes, not pixels (a 200 KB PNG can decode to 192 MiB); a request's
 * images hold at most --max-body bytes. */
struct serve_image {
    unsigned char *data;
    size_t n;
};

struct serve_job {
    /* Set by the HTTP side before the job is queued, read-only afterwards. */
    int id;
    bool chat, stream, include_usage;
    bool ignore_eos;          /* llama-server's extension: generate max_tokens whatever the model says */
    char *text;               /* the prompt as the model sees it, with <image> markers */
    bool special;             /* parse control-token text (the chat template's markup) */
    struct serve_image *images;
    int n_images;
    int max_tokens;           /* 0: the rest of the context */
    struct kvf_sampler_params sampling;
    char *stops[SERVE_STOP_MAX];
    int n_stops;
    char *kv;                 /* the request's policy; NULL: the server's --kv */
    bool has_conv;            /* the conversation's key: OpenAI's "user", or the X-Session-Id header */
    uint64_t conv;            /* ... hashed (FNV-1a 64): its --slot-save-path file is conv-HEX.kvfs */
    /* Under the server's lock. */
    int fd;                   /* the client's socket, watched for a hang-up while parked; -1 once it closed */
    struct MHD_Connection *conn; /* its connection, NULL once closed */
    bool parked;              /* conn is suspended until the job moves (job_wake) */
    int refs;
    enum job_state state;
    bool cancelled;
    int status;               /* HTTP status of a failure (0: none) */
    const char *err_code;
    char err[SERVE_ERR_MAX];
    struct strbuf out;        /* generated text (stop sequences cut off) */
    size_t ready;             /* bytes of out that can be sent: no stop sequence or UTF-8 character cut */
    const char *finish;       /* "stop" or "length" */
    int n_prompt, n_gen, n_past;
    int kv_entries;           /* entries its cache holds, all layers and kv heads (/slots) */
    size_t kv_bytes, kv_full, kv_kept, kv_peak, reserved;
    struct serve_job *next;   /* the queue */
    /* The scheduler's alone. */
    struct kvf_session *s;
    struct kvf_sampler *smp;
    struct kvf_prompt *pr;
    struct media_set media;
    int32_t tok;              /* sampled and sent, not yet decoded */
    int n_ctx;
    int part_next;            /* prompt positions prefilled so far */
    bool prepared;
    int64_t *keys;            /* [n_ctx] what the cache holds, position by position (prompt_keys) */
    int n_keys;
    int n_reused;             /* prompt positions a cached session of an earlier turn held (under the lock) */
    struct kvf_session *spill; /* a copy of its session as cached, for the HTTP side to write (under the lock) */
};

/* A finished conversation's session, kept for its next turn
 * (--cache-sessions) inside the KV budget. */
struct serve_idle {
    int id;                   /* the request whose session it was (/slots) */
    struct kvf_session *s;
    int64_t *keys;            /* [n] what its cache holds, position by position */
    int n;
    char *kv;                 /* its policy; NULL: the server's */
    size_t bytes;             /* its KV bytes, reserved while it waits */
    int entries;              /* the entries its cache holds (/slots) */
    bool has_conv;            /* its conversation's key (serve_job.conv) */
    uint64_t conv;
};

struct server {
    const struct args *a;
    struct kvf_model *m;
    struct kvf_model_info info;
    const char *model_id;     /* the model file's base name */
    int n_ctx;                /* --ctx-size, or the model's */
    size_t budget;            /* --kv-memory in bytes */
    size_t max_body;          /* --max-body in bytes */
    unsigned max_conns;       /* connections at once (libmicrohttpd's limit) */
    size_t pos_bytes;         /* KV bytes one position costs at most (all layers, heads, statistics) */
    size_t head_bytes;        /* ... and a session's cache whatever its length (q4_0s keys' smoothing) */
    pthread_mutex_t mu;
    pthread_cond_t wake;      /* the scheduler's: work arrived, a job was cancelled, stop */
    pthread_t thread;
    struct serve_job *head, *tail;
    int n_queued;
    struct serve_job **active;
    int n_active;
    struct serve_job *filling; /* admitted (from the moment it leaves the queue), its prompt going in a part
                                * per turn (one at a time) */
    struct serve_idle *idle;  /* [--cache-sessions], oldest first */
    int n_idle;
    bool stopping;
    bool gated;               /* KVFOLD_SERVE_TURNS: one turn per byte of its FIFO (sched.c) */
    long turns;               /* turns granted and not taken */
    pthread_t gate;           /* the thread reading that FIFO, when has_gate */
    bool has_gate;
    size_t reserved, in_use, peak_in_use;
    /* /metrics */
    uint64_t by_status[600];
    uint64_t prompt_tokens, gen_tokens, compressions;
    uint64_t turns_total;     /* the scheduler's turns: an admission, a prompt part, a decode step */
    uint64_t by_policy[64];   /* sessions started, by preset (kvf_kv_policy_get's index; "full" included) */
    uint64_t reused_tokens;   /* prompt positions taken from cached sessions (once used) */
    uint64_t overruns;        /* sessions seen over their reservation (budget_account; never, unless a bug) */
    uint64_t slot_saves, slot_restores, slot_bytes_written, slot_bytes_read;
    uint64_t spills, spill_restores; /* conversations written to / read from --slot-save-path */
    size_t slot_max;          /* --slot-save-max in bytes (0: no limit) */
    double slot_restore_ms;   /* the restores' time, summed */
    int next_id;
    int n_answering;          /* requests with a job, until their connection is done (a graceful stop waits) */
};

/* A failure to report: its HTTP status, OpenAI error code and message;
 * found while reading a request, or by the scheduler without the lock and
 * reported under it. */
struct serve_error {
    int status;
    const char *code;
    char msg[SERVE_ERR_MAX];
};
/* Fills e; returns false, for `return serve_error_set(...)`. */
bool serve_error_set(struct serve_error *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A request body of n bytes (chat: /v1/chat/completions, else
 * /v1/completions) read into j: prompt text, images (not yet decoded),
 * sampling, limits, stops, kv (request.c). j->sampling holds the
 * defaults beforehand. False with e filled when the request is refused;
 * what was read so far stays in j either way, for serve_job_request_free. */
bool serve_job_parse(const struct server *srv, const char *body, size_t n, bool chat, struct serve_job *j,
                     struct serve_error *e);
/* A conversation's key (OpenAI's "user", the X-Session-Id header) as the
 * 64 bits that name its file: FNV-1a 64 of its bytes. */
#define SERVE_CONV_MAX 256
uint64_t serve_conv_hash(const char *key);
/* Frees what serve_job_parse put in j, not j itself. */
void serve_job_request_free(struct serve_job *j);

/* The scheduler (sched.h): its thread (sched.c), the reservation rule
 * (budget.c), the slot files (idle.c, called from the HTTP threads). */
int sched_start(struct server *srv);
/* Queues a job (taking a reference); false when the queue is full or the
 * server stops (job->status says which). Under the lock. */
bool sched_submit(struct server *srv, struct serve_job *job);
/* Fails every queued and running job, joins the thread, frees the sessions. */
void sched_stop(struct server *srv);
/* The KV bytes a request of n positions may reach, at most. */
size_t sched_reserve_bytes(const struct server *srv, int n);
/* Slot files (POST /slots/ID?action=save|restore|erase), under the lock:
 * a copy of idle session id with its position keys in its note (*n: its
 * positions), to save without the lock; a loaded session made an idle one
 * (taken; *id its new id; of conv's conversation when given), the oldest
 * going while there is no room; idle
 * session id dropped (*n: its positions). False with e filled otherwise. */
bool sched_slot_copy(struct server *srv, int id, struct kvf_session **out, int *n, struct serve_error *e);
bool sched_slot_adopt(struct server *srv, struct kvf_session *s, const struct serve_job *conv, int *id,
                      struct serve_error *e);
/* Whether a cached session of the job's conversation is there (under the lock). */
bool sched_conv_cached(const struct server *srv, const struct serve_job *j);
bool sched_slot_erase(struct server *srv, int id, int *n, struct serve_error *e);
/* Drops a reference; the last one frees the job. Under the lock. */
void job_unref(struct serve_job *job);
/* The job moved (started, has text, ended): its parked connection, if
 * any, is resumed to send what it can (http.c; under the lock). */
void job_wake(struct serve_job *job);
/* Whether the client of a parked job hung up (http.c; under the lock). */
bool job_client_gone(const struct serve_job *job);
/* A conversation's session read back from --slot-save-path as a cached
 * session, when this server holds none for it (a file that cannot be used
 * is logged and left); the session its turn left (j->spill) written there
 * once the answer is out (conv.c; without the lock). */
void conv_restore(struct server *srv, const struct serve_job *j);
void conv_spill(struct server *srv, struct serve_job *j);
/* Listening on --host and --port with the request handlers (NULL, said,
 * when it cannot); whether --host is an IPv4 or IPv6 address (http.c). */
struct MHD_Daemon *http_start(struct server *srv);
bool http_host_ok(const struct args *a);
/* Ends a job with an error (under the lock). */
void job_fail(struct serve_job *job, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
