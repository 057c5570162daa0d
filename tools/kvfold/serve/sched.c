/* kvfold serve's scheduler: the one thread that runs the model. Each turn
 * of its loop admits at most one queued request (admit.c: media encoding,
 * prompt, prefill in parts, compression, first token) and then runs one
 * decode step for every running session together
 * (kvf_session_decode_batch), so a long prompt delays the others' next
 * token by one prefill part, not by a whole generation. Here: the jobs'
 * lives, the decode step, the thread and its test gate. */
#include "sched.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ----------------------------------------------------------------- jobs -- */

static void job_release_model_state(struct serve_job *j) {
    kvf_prompt_free(j->pr);
    j->pr = NULL;
    media_set_free(&j->media);
    kvf_sampler_free(j->smp);
    j->smp = NULL;
    kvf_session_free(j->s);
    j->s = NULL;
}

void job_unref(struct serve_job *j) {
    if (!j || --j->refs > 0)
        return;
    job_release_model_state(j);
    serve_job_request_free(j);
    kvf_session_free(j->spill);
    free(j->keys);
    free(j->out.s);
    free(j);
}

void job_fail(struct serve_job *j, int status, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof j->err, fmt, ap);
    va_end(ap);
    j->status = status;
    j->err_code = code;
    j->state = JOB_DONE;
    job_wake(j);
}

/* The session's KV statistics for /slots and the response, and its end:
 * the session and its reservation are given back. */
void job_end(struct server *srv, struct serve_job *j, const char *finish) {
    if (j->s) {
        j->kv_bytes = kvf_session_kv_bytes(j->s);
        j->kv_peak = MAX(j->kv_peak, kvf_session_kv_peak_bytes(j->s));
        j->n_past = kvf_session_n_past(j->s);
        j->kv_entries = budget_entries(srv, j->s);
    }
    srv->reserved -= j->reserved;
    j->reserved = 0;
    /* A conversation that ended well keeps its session for its next turn;
     * its bytes, no more than it had reserved, stay reserved. */
    if (finish && !j->cancelled && j->s && srv->a->serve.cache_sessions > 0 && j->n_keys == kvf_session_n_past(j->s)) {
        idle_push(srv, j);
        /* --slot-save-path: a conversation's session also goes to disk (a copy the HTTP side writes), so that
         * it outlives the cache, the process and this replica */
        if (j->has_conv && srv->a->serve.slot_save_path && srv->n_idle > 0 && srv->idle[srv->n_idle - 1].id == j->id)
            idle_spill(&srv->idle[srv->n_idle - 1], j);
    }
    job_release_model_state(j);
    j->finish = finish;
    j->ready = j->out.n;
    j->state = JOB_DONE;
    job_wake(j);
    pthread_cond_broadcast(&srv->wake); /* memory came back: the queue's head may fit now */
}

/* A sampled token: the end, or its text appended. False when the job ended. */
bool job_take_token(struct server *srv, struct serve_job *j, int32_t tok, char **piece, int32_t *cap) {
    if (!j->ignore_eos && kvf_token_is_eog(srv->m, tok)) {
        job_end(srv, j, "stop");
        return false;
    }
    const int32_t np = token_piece(srv->m, tok, piece, cap);
    const size_t before = j->out.n;
    if (np < 0 || !strbuf_put(&j->out, *piece, (size_t)np)) {
        job_end(srv, j, "length");
        job_fail(j, 500, "server_error", "out of memory for the generated text");
        return false;
    }
    j->n_gen++;
    srv->gen_tokens++;
    const long hit = output_stop(j, before);
    if (hit >= 0) {
        j->out.n = (size_t)hit;
        job_end(srv, j, "stop");
        return false;
    }
    if (j->n_prompt + j->n_gen >= j->n_ctx) {
        job_end(srv, j, "length");
        return false;
    }
    j->tok = tok;
    j->ready = MAX(j->ready, output_ready(j));
    if (j->stream) /* a whole answer waits for the end (job_end) */
        job_wake(j);
    return true;
}

/* What /slots shows of the job's session, copied under the lock. */
void job_progress(const struct server *srv, struct serve_job *j) {
    j->n_past = kvf_session_n_past(j->s);
    j->kv_bytes = kvf_session_kv_bytes(j->s);
    j->kv_entries = budget_entries(srv, j->s);
}

void queue_pop(struct server *srv) {
    srv->head = srv->head->next;
    if (!srv->head)
        srv->tail = NULL;
    srv->n_queued--;
}

/* ------------------------------------------------------------- decoding -- */

/* Ends the running jobs for which keep() is false. */
static void sched_drop(struct server *srv, bool (*keep)(const struct serve_job *)) {
    int n = 0;
    for (int i = 0; i < srv->n_active; i++) {
        struct serve_job *j = srv->active[i];
        if (keep(j)) {
            srv->active[n++] = j;
        } else {
            if (j->state != JOB_DONE)
                job_end(srv, j, "length");
            job_unref(j);
        }
    }
    srv->n_active = n;
}

static bool job_live(const struct serve_job *j) { return !j->cancelled && j->state != JOB_DONE; }

/* Queued jobs whose client went away leave the queue. */
static void queue_reap(struct server *srv) {
    struct serve_job **p = &srv->head, *last = NULL;
    while (*p) {
        struct serve_job *j = *p;
        if (j->cancelled) {
            *p = j->next;
            srv->n_queued--;
            job_fail(j, 499, "cancelled", "the client went away");
            job_unref(j);
        } else {
            last = j;
            p = &j->next;
        }
    }
    srv->tail = last;
}

/* One token for every running session: decode the last sampled tokens
 * together, then sample each. Called with the lock held. */
static void sched_step(struct server *srv, struct kvf_session **ss, int32_t *toks, char **piece, int32_t *cap) {
    const int n = srv->n_active;
    for (int i = 0; i < n; i++) {
        ss[i] = srv->active[i]->s;
        toks[i] = srv->active[i]->tok;
    }
    pthread_mutex_unlock(&srv->mu);
    enum kvf_status st = kvf_session_decode_batch(ss, toks, n);
    char err[SERVE_ERR_MAX] = "";
    if (st != KVF_OK)
        snprintf(err, sizeof err, "decode: %s: %s", kvf_status_str(st), kvf_last_error());
    for (int i = 0; i < n && st == KVF_OK; i++) {
        struct serve_job *j = srv->active[i]; /* only this thread changes the list */
        if (j->n_keys < j->n_ctx) /* the token just decoded is in the cache now */
            j->keys[j->n_keys++] = toks[i];
        if (kvf_sampler_sample(j->smp, kvf_session_logits(ss[i]), srv->info.n_vocab, &toks[i]) != KVF_OK)
            toks[i] = -1;
    }
    pthread_mutex_lock(&srv->mu);
    budget_account(srv); /* while every session of the step is still there */
    for (int i = 0; i < n; i++) {
        struct serve_job *j = srv->active[i];
        job_progress(srv, j);
        if (st != KVF_OK || toks[i] < 0) {
            job_end(srv, j, NULL);
            job_fail(j, 500, "server_error", "%s", err[0] ? err : "sampler: out of memory");
        } else if (!j->cancelled) {
            job_take_token(srv, j, toks[i], piece, cap);
        }
    }
    sched_drop(srv, job_live);
}

static bool job_never(const struct serve_job *j) {
    (void)j;
    return false;
}

/* Parked jobs whose client hung up are cancelled, every 200 ms at most: a
 * suspended connection does not notice (http.c). */
static void sched_watch(struct server *srv, double *next) {
    const double now = now_ms();
    if (now < *next)
        return;
    *next = now + 200;
    for (struct serve_job *j = srv->head; j; j = j->next)
        j->cancelled |= job_client_gone(j);
    if (srv->filling)
        srv->filling->cancelled |= job_client_gone(srv->filling);
    for (int i = 0; i < srv->n_active; i++)
        srv->active[i]->cancelled |= job_client_gone(srv->active[i]);
}

/* Waits for a signal of srv->wake, or 200 ms when clients are to be watched. */
static void sched_wait(struct server *srv, bool watch) {
    if (!watch) {
        pthread_cond_wait(&srv->wake, &srv->mu);
        return;
    }
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 200 * 1000 * 1000;
    t.tv_sec += t.tv_nsec / 1000000000;
    t.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&srv->wake, &srv->mu, &t);
}

static void *sched_main(void *arg) {
    struct server *srv = arg;
    const int p = srv->a->parallel;
    struct kvf_session **ss = malloc((size_t)p * sizeof *ss);
    int32_t *toks = malloc((size_t)p * sizeof *toks), piece_cap = 0;
    char *piece = NULL;
    double next_watch = 0;
    pthread_mutex_lock(&srv->mu);
    while (!srv->stopping && ss && toks) {
        sched_watch(srv, &next_watch);
        const bool work = srv->head || srv->filling || srv->n_active > 0;
        if (!work || (srv->gated && srv->turns == 0)) {
            sched_wait(srv, work);
            continue;
        }
        srv->turns -= srv->gated;
        sched_drop(srv, job_live);
        queue_reap(srv);
        const bool moved = sched_admit(srv), filled = sched_fill(srv, &piece, &piece_cap);
        if (srv->n_active > 0)
            sched_step(srv, ss, toks, &piece, &piece_cap);
        else if (!moved && !filled)
            sched_wait(srv, true);
        budget_account(srv);
        srv->turns_total++;
    }
    /* Stopping (or out of memory at the start): nobody waits forever, and
     * nothing is queued from now on. */
    srv->stopping = true;
    for (int i = 0; i < srv->n_active; i++)
        if (srv->active[i]->state != JOB_DONE) {
            job_end(srv, srv->active[i], NULL);
            job_fail(srv->active[i], 503, "shutting_down", "the server is shutting down");
        }
    sched_drop(srv, job_never);
    if (srv->filling) {
        job_end(srv, srv->filling, NULL);
        job_fail(srv->filling, 503, "shutting_down", "the server is shutting down");
        job_unref(srv->filling);
        srv->filling = NULL;
    }
    while (srv->head) {
        struct serve_job *j = srv->head;
        queue_pop(srv);
        job_fail(j, 503, "shutting_down", "the server is shutting down");
        job_unref(j);
    }
    while (srv->n_idle > 0)
        idle_drop(srv, srv->n_idle - 1);
    budget_account(srv);
    pthread_mutex_unlock(&srv->mu);
    free(piece);
    free(ss);
    free(toks);
    return NULL;
}

/* ---------------------------------------------------------- the thread -- */

/* KVFOLD_SERVE_TURNS=FIFO, a test's hook that makes the server's tests
 * independent of the machine's speed: while it is set, the scheduler takes
 * one turn (a queued request admitted, a prompt part, a decode step) per
 * byte written to FIFO, and runs freely once its writer closes it. A test
 * holds the server at a known point, looks at /slots or /metrics, or opens
 * more connections, then lets it go on. sched_stop cancels the thread
 * (blocked in open or read, both cancellation points). */
static void gate_close(void *fd) { close(*(int *)fd); }

static void *gate_main(void *arg) {
    struct server *srv = arg;
    int fd = open(getenv("KVFOLD_SERVE_TURNS"), O_RDONLY); /* waits for the writer */
    if (fd >= 0) {
        pthread_cleanup_push(gate_close, &fd);
        char buf[64];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
            pthread_mutex_lock(&srv->mu);
            srv->turns += MAX(n, 0);
            pthread_cond_signal(&srv->wake);
            pthread_mutex_unlock(&srv->mu);
        }
        pthread_cleanup_pop(1);
    }
    pthread_mutex_lock(&srv->mu);
    srv->gated = false;
    pthread_cond_signal(&srv->wake);
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

int sched_start(struct server *srv) {
    int rc = budget_measure(srv);
    if (rc)
        return rc;
    int32_t pass = 0; /* every slot can hold a whole context, and the default rule's pass over it */
    enum kvf_status st = kvf_kv_compress_positions(srv->m, srv->a->kv, srv->n_ctx, &pass);
    if (st != KVF_OK)
        return fail_option(st, "serve: --kv");
    if (srv->budget == 0)
        srv->budget = sched_reserve_bytes(srv, srv->n_ctx + pass) * (size_t)srv->a->parallel;
    srv->active = calloc((size_t)srv->a->parallel, sizeof *srv->active);
    srv->idle = calloc((size_t)srv->a->serve.cache_sessions + 1, sizeof *srv->idle);
    srv->gated = getenv("KVFOLD_SERVE_TURNS") != NULL;
    if (!srv->active || !srv->idle || pthread_create(&srv->thread, NULL, sched_main, srv) != 0) {
        print_error("serve: cannot start the scheduler thread");
        return EXIT_RUNTIME;
    }
    if (srv->gated && pthread_create(&srv->gate, NULL, gate_main, srv) != 0) {
        print_error("serve: cannot start the KVFOLD_SERVE_TURNS thread");
        sched_stop(srv);
        return EXIT_RUNTIME;
    }
    srv->has_gate = srv->gated;
    return 0;
}

bool sched_submit(struct server *srv, struct serve_job *j) {
    if (srv->stopping) {
        j->status = 503;
        j->err_code = "shutting_down";
        snprintf(j->err, sizeof j->err, "the server is shutting down");
        return false;
    }
    /* --queue counts the requests that wait for a slot: those a free slot
     * takes at the scheduler's next turn do not. */
    if (srv->n_queued >= srv->a->serve.queue + MAX(0, srv->a->parallel - srv->n_active - (srv->filling != NULL))) {
        j->status = 503;
        j->err_code = "queue_full";
        snprintf(j->err, sizeof j->err, "%d requests are waiting already (--queue); retry later", srv->n_queued);
        return false;
    }
    j->refs++;
    j->state = JOB_QUEUED;
    if (srv->tail)
        srv->tail->next = j;
    else
        srv->head = j;
    srv->tail = j;
    srv->n_queued++;
    pthread_cond_signal(&srv->wake);
    return true;
}

void sched_stop(struct server *srv) {
    pthread_mutex_lock(&srv->mu);
    srv->stopping = true;
    pthread_cond_signal(&srv->wake);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->thread, NULL);
    if (srv->has_gate) {
        pthread_cancel(srv->gate);
        pthread_join(srv->gate, NULL);
        srv->has_gate = false;
    }
    free(srv->active);
    free(srv->idle);
    srv->active = NULL;
    srv->idle = NULL;
}
