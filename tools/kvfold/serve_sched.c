/* kvfold serve's scheduler: the one thread that runs the model. Each turn
 * of its loop admits at most one queued request (media encoding, prompt,
 * prefill, compression, first token) and then runs one decode step for every
 * running session together (kvf_session_decode_batch), so a long prompt
 * delays the others' next token by one prefill, not by a whole generation.
 *
 * The KV memory rule (docs/ARCHITECTURE.md §10): a request is admitted only
 * when the bytes reserved for the running sessions plus its own reservation
 * fit --kv-memory, and a session's KV bytes never exceed its reservation, so
 * their sum never exceeds the budget. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A library failure: the caller's fault (400) unless memory or the library failed. */
static bool error_kvf(struct serve_error *e, enum kvf_status st, const char *what) {
    const bool ours = st == KVF_ERR_NOMEM || st == KVF_ERR_INTERNAL;
    return serve_error_set(e, ours ? 500 : 400, ours ? "server_error" : "invalid_request", "%s: %s: %s", what,
                     kvf_status_str(st), kvf_last_error());
}

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

size_t sched_reserve_bytes(const struct server *srv, int n) {
    /* A head's storage grows by 1/8 of itself, at least to 16 entries
     * (kvf_session_kv_bytes counts what is allocated): with at most n
     * positions it never holds storage for more than n + n/8 of them. */
    return srv->pos_bytes * (size_t)MAX(n + n / 8, 16);
}

/* The entries a session's cache holds, over all layers and kv heads (for
 * /slots; the session is the scheduler's). */
static int session_entries(const struct server *srv, const struct kvf_session *s) {
    int sum = 0;
    for (int l = 0; l < srv->info.n_layer; l++)
        for (int g = 0; g < srv->info.n_head_kv; g++) {
            int n = 0;
            kvf_session_kv_tags(s, l, g, &n);
            sum += n;
        }
    return sum;
}

/* ------------------------------------------------------ cached sessions -- */

static void idle_drop(struct server *srv, int i) {
    struct serve_idle *c = &srv->idle[i];
    kvf_session_free(c->s);
    free(c->keys);
    free(c->kv);
    srv->reserved -= c->bytes;
    memmove(c, c + 1, sizeof *c * (size_t)(srv->n_idle - i - 1));
    srv->n_idle--;
}

/* The job's session and keys become a cached session (the oldest goes when
 * there are --cache-sessions already). */
static void idle_push(struct server *srv, struct serve_job *j) {
    char *kv = j->kv ? strdup(j->kv) : NULL;
    if (j->kv && !kv)
        return;
    if (srv->n_idle == srv->a->cache_sessions)
        idle_drop(srv, 0);
    struct serve_idle *c = &srv->idle[srv->n_idle++];
    *c = (struct serve_idle){ .id = j->id, .s = j->s, .keys = j->keys, .n = j->n_keys, .kv = kv,
                              .bytes = kvf_session_kv_bytes(j->s), .entries = session_entries(srv, j->s),
                              .has_conv = j->has_conv, .conv = j->conv };
    srv->reserved += c->bytes;
    j->s = NULL;
    j->keys = NULL;
    j->n_keys = 0;
}

/* ------------------------------------------------ slot files (/slots/ID) -- */

static int idle_find(const struct server *srv, int id) {
    for (int i = 0; i < srv->n_idle; i++)
        if (srv->idle[i].id == id) return i;
    return -1;
}

/* A cached session's file note: {"kvfold_serve": 1, "keys": HEX}, its
 * positions' keys as 16 hex digits each (JSON numbers lose 64-bit keys). */
static char *slot_note(const struct serve_idle *c) {
    char *hex = malloc((size_t)c->n * 16 + 1);
    for (int i = 0; hex && i < c->n; i++) snprintf(hex + (size_t)i * 16, 17, "%016llx", (unsigned long long)c->keys[i]);
    cJSON *o = hex ? cJSON_CreateObject() : NULL;
    if (hex) hex[(size_t)c->n * 16] = '\0';
    char *note = o && cJSON_AddNumberToObject(o, "kvfold_serve", 1) && cJSON_AddStringToObject(o, "keys", hex)
                     ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    free(hex);
    return note;
}

/* j->spill: a copy of cached session c with its keys in its note (none when
 * memory runs short: the conversation is then only cached). */
static void slot_spill_copy(const struct serve_idle *c, struct serve_job *j) {
    char *note = slot_note(c);
    if (note && kvf_session_copy(c->s, &j->spill) == KVF_OK && kvf_session_set_note(j->spill, note) != KVF_OK) {
        kvf_session_free(j->spill);
        j->spill = NULL;
    }
    free(note);
}

bool sched_conv_cached(const struct server *srv, const struct serve_job *j) {
    for (int i = 0; j->has_conv && i < srv->n_idle; i++)
        if (srv->idle[i].has_conv && srv->idle[i].conv == j->conv) return true;
    return false;
}

bool sched_slot_copy(struct server *srv, int id, struct kvf_session **out, int *n, struct serve_error *e) {
    const int i = idle_find(srv, id);
    if (i < 0) return serve_error_set(e, 404, "not_found", "no idle session %d: only sessions cached for a next turn "
                                      "(--cache-sessions; /slots shows them as idle) are saved", id);
    char *note = slot_note(&srv->idle[i]);
    enum kvf_status st = note ? kvf_session_copy(srv->idle[i].s, out) : KVF_ERR_NOMEM;
    if (st == KVF_OK) st = kvf_session_set_note(*out, note);
    free(note);
    if (st != KVF_OK) {
        kvf_session_free(*out);
        *out = NULL;
        return serve_error_set(e, 500, "server_error", "cannot copy session %d: %s", id, kvf_status_str(st));
    }
    *n = srv->idle[i].n;
    return true;
}

bool sched_slot_adopt(struct server *srv, struct kvf_session *s, const struct serve_job *conv, int *id,
                      struct serve_error *e) {
    if (srv->a->cache_sessions <= 0)
        return serve_error_set(e, 400, "invalid_request", "--cache-sessions is 0: a restored session has nowhere to wait");
    if (kvf_session_n_ctx(s) != srv->n_ctx)
        return serve_error_set(e, 400, "invalid_request", "the session was saved with a context of %d positions; this "
                               "server's is %d (--ctx-size)", kvf_session_n_ctx(s), srv->n_ctx);
    /* the admission rule's bytes per position must hold for it (another --kv-type's would not) */
    if (kvf_session_kv_full_bytes(s) > (size_t)kvf_session_n_past(s) * srv->pos_bytes)
        return serve_error_set(e, 400, "invalid_request", "the session's positions cost more than this server's %zu "
                               "bytes each (saved with another --kv-type)", srv->pos_bytes);
    cJSON *o = cJSON_Parse(kvf_session_note(s));
    const cJSON *hex = cJSON_GetObjectItemCaseSensitive(o, "keys");
    const int n = kvf_session_n_past(s);
    bool ok = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "kvfold_serve")) && cJSON_IsString(hex) &&
              strlen(hex->valuestring) == (size_t)n * 16;
    int64_t *keys = ok ? malloc(sizeof *keys * (size_t)(n ? n : 1)) : NULL;
    for (int i = 0; keys && i < n && ok; i++) {
        char digits[17], *end;
        memcpy(digits, hex->valuestring + (size_t)i * 16, 16);
        digits[16] = '\0';
        keys[i] = (int64_t)strtoull(digits, &end, 16);
        ok = *end == '\0' && (keys[i] >= 0 ? keys[i] == kvf_session_tokens(s)[i] : kvf_session_tokens(s)[i] < 0);
    }
    cJSON_Delete(o);
    const char *spec = kvf_session_kv_spec(s), *dflt = srv->a->kv ? srv->a->kv : "";
    char *kv = ok && keys && strcmp(spec, dflt) ? strdup(spec) : NULL;
    const size_t bytes = kvf_session_kv_bytes(s);
    if (!ok || !keys || (strcmp(spec, dflt) && !kv)) {
        free(keys);
        free(kv);
        return ok ? serve_error_set(e, 500, "server_error", "out of memory")
                  : serve_error_set(e, 400, "invalid_request", "the file is a session, not a kvfold serve slot's "
                                    "(no position keys matching its tokens in its note)");
    }
    /* room: the oldest cached sessions go first, as for a new request */
    while (srv->n_idle > 0 && (srv->n_idle == srv->a->cache_sessions || srv->reserved + bytes > srv->budget))
        idle_drop(srv, 0);
    if (srv->reserved + bytes > srv->budget) {
        free(keys);
        free(kv);
        return serve_error_set(e, 507, "kv_memory_exceeded", "the session's %zu KV bytes do not fit beside the %zu "
                               "running sessions reserve (--kv-memory %zu)", bytes, srv->reserved, srv->budget);
    }
    *id = ++srv->next_id;
    srv->idle[srv->n_idle++] = (struct serve_idle){ .id = *id, .s = s, .keys = keys, .n = n, .kv = kv, .bytes = bytes,
                                                    .entries = session_entries(srv, s),
                                                    .has_conv = conv && conv->has_conv, .conv = conv ? conv->conv : 0 };
    srv->reserved += bytes;
    pthread_cond_broadcast(&srv->wake);
    return true;
}

bool sched_slot_erase(struct server *srv, int id, int *n, struct serve_error *e) {
    const int i = idle_find(srv, id);
    if (i < 0) return serve_error_set(e, 404, "not_found", "no idle session %d", id);
    *n = srv->idle[i].n;
    idle_drop(srv, i);
    pthread_cond_broadcast(&srv->wake); /* memory came back */
    return true;
}

/* The cached session of the same policy sharing the longest start with the
 * job's prompt, when the prompt goes on from it: at least half of what it
 * holds and 16 positions (a chat template's opening alone would waste a
 * cached conversation), one short of the prompt at most (a part remains to
 * give logits); -1 when none. *k: the positions shared. */
static int idle_match(const struct server *srv, const struct serve_job *j, int *k) {
    int best = -1;
    *k = 0;
    for (int i = 0; i < srv->n_idle; i++) {
        const struct serve_idle *c = &srv->idle[i];
        if ((c->kv == NULL) != (j->kv == NULL) || (c->kv && strcmp(c->kv, j->kv)))
            continue;
        const int lim = MIN(c->n, j->n_prompt - 1);
        int n = 0;
        while (n < lim && c->keys[n] == j->keys[n])
            n++;
        if (n > *k && n >= 16 && 2 * n >= c->n) {
            *k = n;
            best = i;
        }
    }
    return best;
}

/* The session's KV statistics for /slots and the response, and its end:
 * the session and its reservation are given back. */
static void job_end(struct server *srv, struct serve_job *j, const char *finish) {
    if (j->s) {
        j->kv_bytes = kvf_session_kv_bytes(j->s);
        j->kv_peak = MAX(j->kv_peak, kvf_session_kv_peak_bytes(j->s));
        j->n_past = kvf_session_n_past(j->s);
        j->kv_entries = session_entries(srv, j->s);
    }
    srv->reserved -= j->reserved;
    j->reserved = 0;
    /* A conversation that ended well keeps its session for its next turn;
     * its bytes, no more than it had reserved, stay reserved. */
    if (finish && !j->cancelled && j->s && srv->a->cache_sessions > 0 && j->n_keys == kvf_session_n_past(j->s)) {
        idle_push(srv, j);
        /* --slot-save-path: a conversation's session also goes to disk (a copy the HTTP side writes), so that
         * it outlives the cache, the process and this replica */
        if (j->has_conv && srv->a->slot_save_path && srv->n_idle > 0 && srv->idle[srv->n_idle - 1].id == j->id)
            slot_spill_copy(&srv->idle[srv->n_idle - 1], j);
    }
    job_release_model_state(j);
    j->finish = finish;
    j->ready = j->out.n;
    j->state = JOB_DONE;
    job_wake(j);
    pthread_cond_broadcast(&srv->wake); /* memory came back: the queue's head may fit now */
}

/* Bytes at the end of s[0..n) that may begin one of the stop strings. */
static size_t stop_hold(const struct serve_job *j, const char *s, size_t n) {
    size_t hold = 0;
    for (int i = 0; i < j->n_stops; i++) {
        const size_t len = strlen(j->stops[i]);
        for (size_t k = MIN(len - 1, n); k > hold; k--)
            if (memcmp(s + n - k, j->stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* n moved back to the start of a UTF-8 character cut at the end of s[0..n). */
static size_t utf8_boundary(const char *s, size_t n) {
    for (size_t back = 1; back <= MIN(n, 3); back++) {
        const unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back */
        const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        return len > back ? n - back : n;
    }
    return n;
}

/* The earliest match of a stop string that ends after `from`, or -1. */
static long stop_find(const struct serve_job *j, size_t from) {
    long best = -1;
    for (int i = 0; i < j->n_stops; i++) {
        const size_t len = strlen(j->stops[i]);
        const size_t start = from >= len ? from - len + 1 : 0;
        const char *hit = start < j->out.n ? memmem(j->out.s + start, j->out.n - start, j->stops[i], len) : NULL;
        if (hit && (best < 0 || hit - j->out.s < best))
            best = hit - j->out.s;
    }
    return best;
}

/* A sampled token: the end, or its text appended. False when the job ended. */
static bool job_take_token(struct server *srv, struct serve_job *j, int32_t tok, char **piece, int32_t *cap) {
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
    const long hit = stop_find(j, before);
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
    j->ready = MAX(j->ready, utf8_boundary(j->out.s, j->out.n - stop_hold(j, j->out.s, j->out.n)));
    if (j->stream) /* a whole answer waits for the end (job_end) */
        job_wake(j);
    return true;
}

static void sched_account(struct server *srv);

/* ------------------------------------------------------------ admission -- */

/* What job_prepare finds, stored in the job under the lock. */
struct job_plan {
    int n_prompt, n_ctx;
    size_t reserved;
};

/* FNV-1a of an image's size and pixels: what identifies it in a cached
 * session's keys. */
static uint64_t pixels_hash(const struct kvf_image *img) {
    const int w = kvf_image_width(img), h = kvf_image_height(img);
    const uint8_t *p = kvf_image_rgb(img);
    uint64_t x = 1469598103934665603ull ^ ((uint64_t)w << 32 | (uint32_t)h);
    for (size_t i = 0; i < (size_t)w * h * 3; i++)
        x = (x ^ p[i]) * 1099511628211ull;
    return x;
}

/* The images decoded and through the vision tower; hash[i]: image i's. */
static bool job_encode_images(struct server *srv, struct serve_job *j, uint64_t *hash, struct serve_error *e) {
    const struct args *a = srv->a;
    for (int i = 0; i < j->n_images; i++) {
        const struct serve_image *im = &j->images[i];
        struct kvf_image *img;
        struct kvf_media *md;
        enum kvf_status st = kvf_image_load_memory(im->data, im->n, image_max_pixels(a), &img);
        if (st != KVF_OK)
            return serve_error_set(e, 400, "invalid_image", "image %d: not a readable image: %s", i + 1,
                                   kvf_last_error());
        hash[i] = pixels_hash(img);
        st = kvf_media_encode_image(srv->m, img, KVF_MOD_IMAGE, a->threads, &md);
        kvf_image_free(img);
        if (st != KVF_OK)
            return error_kvf(e, st, "image");
        if (media_push(&j->media, md))
            return serve_error_set(e, 500, "server_error", "out of memory for the media");
    }
    return true;
}

/* A position's key in a cached session: its token id, or for an image's
 * positions a negative number from the image's hash (the same image at the
 * same place matches). */
static int64_t prompt_key(const struct kvf_prompt *pr, int i, const uint64_t *hash) {
    const int32_t id = kvf_prompt_token(pr, i);
    return id >= 0 ? id : -1 - (int64_t)(hash[kvf_prompt_tags(pr)[i].media] >> 2);
}

/* Media through the vision tower and the prompt tokenized: the reservation
 * (without the lock: the job's shared fields are left alone). */
static bool job_prepare(struct server *srv, struct serve_job *j, struct job_plan *plan, struct serve_error *e) {
    uint64_t *hash = calloc((size_t)j->n_images + 1, sizeof *hash);
    bool ok = hash ? job_encode_images(srv, j, hash, e) : serve_error_set(e, 500, "server_error", "out of memory");
    enum kvf_status st = KVF_OK;
    if (ok && (st = kvf_prompt_init(srv->m, j->text, (const struct kvf_media *const *)j->media.items, j->media.n,
                                    true, j->special, &j->pr)) != KVF_OK)
        ok = error_kvf(e, st, "prompt");
    const int n = ok ? kvf_prompt_n_tokens(j->pr) : 0;
    if (ok && n == 0)
        ok = serve_error_set(e, 400, "invalid_request", "the prompt has no tokens");
    if (ok && n >= srv->n_ctx)
        ok = serve_error_set(e, 400, "context_length_exceeded",
                             "the prompt is %d tokens; the context holds %d (--ctx-size), one more is needed to "
                             "generate", n, srv->n_ctx);
    const int room = srv->n_ctx - n, n_ctx = n + (j->max_tokens > 0 ? MIN(j->max_tokens, room) : room);
    const size_t need = sched_reserve_bytes(srv, n_ctx);
    if (ok && need > srv->budget)
        ok = serve_error_set(e, 413, "kv_memory_exceeded",
                             "the request may need %zu bytes of KV cache (%d prompt + %d new tokens, %zu bytes per "
                             "position, storage growth included) and --kv-memory is %zu bytes: shorten the prompt "
                             "or lower max_tokens", need, n, n_ctx - n, srv->pos_bytes, srv->budget);
    if (ok && !(j->keys = malloc(sizeof *j->keys * (size_t)n_ctx)))
        ok = serve_error_set(e, 500, "server_error", "out of memory");
    for (int i = 0; ok && i < n; i++)
        j->keys[i] = prompt_key(j->pr, i, hash);
    j->n_keys = ok ? n : 0;
    free(hash);
    if (ok)
        *plan = (struct job_plan){ .n_prompt = n, .n_ctx = n_ctx, .reserved = need };
    return ok;
}

/* After compression every head's storage is what it holds
 * (kvf_session_compress sizes it so), at most `most` entries; from then on
 * a head only grows by the tokens still to come, to storage for at most
 * n + n/8 of its n entries (sched_reserve_bytes). So no head exceeds the
 * fullest head's bound, and the session stays within that many positions'
 * reservation: what it holds now is inside the bound, not added to it. */
static size_t job_reserve_after_compress(const struct server *srv, const struct serve_job *j) {
    int most = 0;
    for (int l = 0; l < srv->info.n_layer; l++)
        for (int g = 0; g < srv->info.n_head_kv; g++) {
            int n = 0;
            kvf_session_kv_tags(j->s, l, g, &n);
            most = MAX(most, n);
        }
    const int rest = j->n_ctx - kvf_session_n_past(j->s);
    return MIN(j->reserved, sched_reserve_bytes(srv, most + rest));
}

/* The session and sampler of an admitted job (without the lock). *reused:
 * the prompt positions a cached session holds for it (j->n_reused), 0 when
 * it had to start over. */
static bool job_open(struct server *srv, struct serve_job *j, int *reused, struct serve_error *e) {
    /* Sessions hold the whole context, so that a next turn can go on in
     * them; memory grows with what they hold, within the reservation. */
    struct kvf_session_params sp = session_params(srv->a, srv->n_ctx);
    if (j->kv)
        sp.kv_spec = j->kv;
    enum kvf_status st = KVF_OK;
    *reused = j->n_reused;
    j->part_next = 0;
    if (j->s) { /* a cached session: its positions from n_reused on go */
        st = kvf_session_truncate(j->s, j->n_reused);
        j->part_next = j->n_reused;
        if (st == KVF_ERR_UNSUPPORTED) {
            /* The session cannot go back to n_reused: its sliding-window
             * layers already freed entries that the positions after it
             * would see. The whole prompt goes in again, from position 0
             * (as llama.cpp's server does), and nothing counts as cached. */
            kvf_session_reset(j->s);
            j->part_next = 0;
            *reused = 0;
            st = KVF_OK;
        }
    } else {
        st = kvf_session_init(srv->m, &sp, &j->s);
    }
    if (st != KVF_OK)
        return error_kvf(e, st, "kv");
    if ((st = kvf_sampler_init(&j->sampling, &j->smp)) != KVF_OK)
        return error_kvf(e, st, "sampler");
    return true;
}

/* One part of the prompt (--batch-size positions), so that a long prompt
 * does not stop the running sessions for its whole prefill; the whole
 * prompt at once for policies that need it in one pass, from position 0
 * (*restarted: a cached session's positions were not used). Then, once it
 * is all in, compression and the first token (without the lock: the bytes
 * the full cache held go to *kv_full). *done says whether it was the last
 * part. */
static bool job_fill(struct server *srv, struct serve_job *j, int32_t *tok, bool *done, bool *restarted,
                     size_t *kv_full, struct serve_error *e) {
    const int n = kvf_prompt_n_tokens(j->pr), part = MIN(srv->a->batch, n - j->part_next);
    enum kvf_status st = kvf_session_prefill_prompt_part(j->s, j->pr, j->part_next, part);
    if (st == KVF_ERR_UNSUPPORTED) {
        *restarted = j->part_next > 0;
        kvf_session_reset(j->s);
        st = kvf_session_prefill_prompt(j->s, j->pr, NULL);
    }
    if (st != KVF_OK)
        return error_kvf(e, st, "prefill");
    j->part_next = kvf_session_n_past(j->s);
    *done = j->part_next >= n;
    if (!*done)
        return true;
    *kv_full = kvf_session_kv_full_bytes(j->s);
    if (*kv_full > srv->pos_bytes * (size_t)kvf_session_n_past(j->s))
        fprintf(stderr, "kvfold: serve: warning: a position costs %zu bytes, over the %zu the KV budget assumes\n",
                *kv_full / (size_t)kvf_session_n_past(j->s), srv->pos_bytes);
    if ((st = kvf_session_compress(j->s)) != KVF_OK)
        return error_kvf(e, st, "kv compression");
    if ((st = kvf_sampler_sample(j->smp, kvf_session_logits(j->s), srv->info.n_vocab, tok)) != KVF_OK)
        return error_kvf(e, st, "sampler");
    /* The prompt's media are in the cache now. */
    kvf_prompt_free(j->pr);
    j->pr = NULL;
    media_set_free(&j->media);
    return true;
}

/* What /slots shows of the job's session, copied under the lock. */
static void job_progress(const struct server *srv, struct serve_job *j) {
    j->n_past = kvf_session_n_past(j->s);
    j->kv_bytes = kvf_session_kv_bytes(j->s);
    j->kv_entries = session_entries(srv, j->s);
}

static void queue_pop(struct server *srv) {
    srv->head = srv->head->next;
    if (!srv->head)
        srv->tail = NULL;
    srv->n_queued--;
}

/* The queue's head, prepared and given its session when its reservation
 * fits and no other prompt is going in; true when the queue moved. Called
 * with the lock held; drops it for the work. */
static bool sched_admit(struct server *srv) {
    struct serve_job *j = srv->head;
    if (!j || srv->filling || srv->n_active + 1 > srv->a->parallel)
        return false;
    struct serve_error e = { 0 };
    bool ok = true;
    if (!j->prepared) {
        struct job_plan plan = { 0 };
        pthread_mutex_unlock(&srv->mu);
        ok = job_prepare(srv, j, &plan, &e);
        pthread_mutex_lock(&srv->mu);
        if (ok) {
            j->n_prompt = plan.n_prompt;
            j->n_ctx = plan.n_ctx;
            j->reserved = plan.reserved;
            j->prepared = true;
        }
    }
    /* A cached session of the conversation is taken (its reservation
     * becomes part of the job's); other cached ones go, oldest first, while
     * the job does not fit. Until job_open truncates it, the session holds
     * what it held, which may be more than the job reserves: the larger of
     * the two is reserved until then. */
    int k = 0, hit = ok ? idle_match(srv, j, &k) : -1;
    const size_t held = hit >= 0 ? srv->idle[hit].bytes : 0, hold = MAX(j->reserved, held);
    while (ok && srv->reserved - held + hold > srv->budget && srv->n_idle > (hit >= 0)) {
        const int victim = hit == 0 ? 1 : 0;
        idle_drop(srv, victim);
        hit -= victim < hit;
    }
    if (ok && srv->reserved - held + hold > srv->budget)
        return false; /* until a running session gives memory back */
    queue_pop(srv);
    if (ok && hit >= 0) {
        j->s = srv->idle[hit].s;
        srv->idle[hit].s = NULL;
        j->n_reused = k;
        idle_drop(srv, hit);
    }
    if (ok) {
        /* filling from now on (/slots shows it), though its session opens
         * without the lock */
        srv->reserved += hold;
        srv->filling = j;
        int reused = 0;
        pthread_mutex_unlock(&srv->mu);
        ok = job_open(srv, j, &reused, &e); /* truncated: storage for the shared positions only */
        pthread_mutex_lock(&srv->mu);
        srv->reserved -= hold - j->reserved;
        j->n_reused = reused; /* 0 when the cached session started over */
    }
    if (ok) {
        /* A cached session's peak was an earlier request's: this one's
         * starts from what it holds now (sched_account). */
        kvf_session_kv_peak_reset(j->s);
        job_progress(srv, j);
    } else {
        srv->filling = NULL;
        job_end(srv, j, NULL);
        job_fail(j, e.status, e.code, "%s", e.msg);
        job_unref(j);
    }
    return true;
}

/* The preset a spec starts with, as kvf_kv_policy_get's index (a label of
 * bounded cardinality for /metrics, unlike the spec itself). */
static int policy_index(const char *spec) {
    const size_t len = spec ? strcspn(spec, ":+") : 0;
    struct kvf_kv_policy_info pi;
    for (int i = 0; i < kvf_kv_policy_count() && i < 64; i++)
        if (kvf_kv_policy_get(i, &pi) == KVF_OK && !strcmp(pi.stage, "preset") &&
            (len ? strlen(pi.name) == len && !strncmp(pi.name, spec, len) : !strcmp(pi.name, "full")))
            return i;
    return 0;
}

/* A part of the filling job's prompt; once it is all in, the job runs.
 * true when work was done. Called with the lock held; drops it for the work. */
static bool sched_fill(struct server *srv, char **piece, int32_t *cap) {
    struct serve_job *j = srv->filling;
    if (!j)
        return false;
    struct serve_error e = { 0 };
    int32_t tok = 0;
    size_t kv_full = 0;
    bool done = false, restarted = false, ok = !j->cancelled;
    if (ok) {
        pthread_mutex_unlock(&srv->mu);
        ok = job_fill(srv, j, &tok, &done, &restarted, &kv_full, &e);
        pthread_mutex_lock(&srv->mu);
        if (restarted)
            j->n_reused = 0;
        job_progress(srv, j);
        sched_account(srv); /* before the reservation shrinks to the compressed cache's */
    }
    if (ok && !done && !j->cancelled)
        return true;
    srv->filling = NULL;
    if (!ok || j->cancelled) {
        job_end(srv, j, NULL);
        if (j->cancelled)
            job_fail(j, 499, "cancelled", "the client went away");
        else
            job_fail(j, e.status, e.code, "%s", e.msg);
    } else {
        j->kv_full = kv_full;
        j->kv_kept = j->kv_bytes; /* job_progress read it after the compression */
        const size_t r = job_reserve_after_compress(srv, j);
        srv->reserved -= j->reserved - r;
        j->reserved = r;
        srv->compressions++;
        srv->by_policy[policy_index(j->kv ? j->kv : srv->a->kv)]++;
        srv->prompt_tokens += (uint64_t)(j->n_prompt - j->n_reused);
        srv->reused_tokens += (uint64_t)j->n_reused; /* counted once used */
        j->state = JOB_RUNNING;
        if (job_take_token(srv, j, tok, piece, cap)) {
            srv->active[srv->n_active++] = j;
            return true;
        }
    }
    job_unref(j);
    return true;
}

/* ------------------------------------------------------------- decoding -- */

/* A session's part of sched_account: its bytes now and its peak since the
 * last look, which must stay within its reservation. */
static void session_account(struct server *srv, struct serve_job *j, size_t *now, size_t *peak) {
    const size_t bytes = kvf_session_kv_bytes(j->s), top = kvf_session_kv_peak_bytes(j->s);
    kvf_session_kv_peak_reset(j->s);
    *now += bytes;
    *peak += top;
    j->kv_peak = MAX(j->kv_peak, top);
    if (top > j->reserved) {
        srv->overruns++;
        fprintf(stderr, "kvfold: serve: warning: request %d held %zu KV bytes, over the %zu it reserved\n", j->id, top,
                j->reserved);
    }
}

/* The KV bytes the sessions hold now (the running ones, the filling one
 * and the cached ones, whose memory is held as much as a running
 * session's), and the most they held at once since the last call: each
 * session's peak since then, summed. Called after every piece of work on
 * a session, so a peak inside it (a prompt's full cache before its
 * compression) is seen. The sum is exact after a prompt part, where the
 * other sessions stood still; after a batched decode step, where each
 * grew by a token, it bounds the true peak, and equals it unless a decode
 * stage shrank one cache while another grew. Under the lock; the sessions
 * are this thread's. */
static void sched_account(struct server *srv) {
    size_t now = 0, peak = 0;
    if (srv->filling && srv->filling->s)
        session_account(srv, srv->filling, &now, &peak);
    /* A job that ended and is not yet off the list has no session: its
     * bytes went back, or to the cached one counted below. */
    for (int i = 0; i < srv->n_active; i++)
        if (srv->active[i]->s)
            session_account(srv, srv->active[i], &now, &peak);
    for (int i = 0; i < srv->n_idle; i++) {
        now += srv->idle[i].bytes;
        peak += srv->idle[i].bytes;
    }
    srv->in_use = now;
    srv->peak_in_use = MAX(srv->peak_in_use, peak);
}

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
    sched_account(srv); /* while every session of the step is still there */
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
 * suspended connection does not notice (serve.c). */
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
        sched_account(srv);
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
    sched_account(srv);
    pthread_mutex_unlock(&srv->mu);
    free(piece);
    free(ss);
    free(toks);
    return NULL;
}

/* ---------------------------------------------------------- the thread -- */

/* The KV bytes of one position, measured on a session that gathers every
 * statistic a policy can keep per entry (kv_gather), so no policy's costs
 * more. */
static int sched_measure(struct server *srv) {
    struct kvf_session_params sp = session_params(srv->a, 2);
    sp.kv_spec = NULL;
    sp.kv_gather = 1;
    struct kvf_session *s;
    int rc = open_session(srv->m, &sp, "serve: cannot create a session", &s);
    if (rc)
        return rc;
    const int32_t tok = srv->info.bos >= 0 ? srv->info.bos : 0;
    const enum kvf_status st = kvf_session_prefill(s, &tok, 1, NULL);
    srv->pos_bytes = kvf_session_kv_full_bytes(s);
    kvf_session_free(s);
    return st == KVF_OK ? 0 : fail(st, "serve: a first prefill");
}

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
    int rc = sched_measure(srv);
    if (rc)
        return rc;
    if (srv->budget == 0) /* every slot can hold a whole context */
        srv->budget = sched_reserve_bytes(srv, srv->n_ctx) * (size_t)srv->a->parallel;
    srv->active = calloc((size_t)srv->a->parallel, sizeof *srv->active);
    srv->idle = calloc((size_t)srv->a->cache_sessions + 1, sizeof *srv->idle);
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
    if (srv->n_queued >= srv->a->queue + MAX(0, srv->a->parallel - srv->n_active - (srv->filling != NULL))) {
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
