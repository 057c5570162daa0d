/* kvfold serve's admission: the queue's head prepared (images through the
 * vision tower, the prompt and its reservation), given a session (a cached
 * one of its conversation when one matches) once its reservation fits the
 * KV budget, then its prompt in parts, one per scheduler turn, compressed
 * once it is all in, and its first token. */
#include "sched.h"

#include <stdlib.h>
#include <string.h>

/* A library failure: the caller's fault (400) unless memory or the library failed. */
static bool error_kvf(struct serve_error *e, enum kvf_status st, const char *what) {
    const bool ours = st == KVF_ERR_NOMEM || st == KVF_ERR_INTERNAL;
    return serve_error_set(e, ours ? 500 : 400, ours ? "server_error" : "invalid_request", "%s: %s: %s", what,
                     kvf_status_str(st), kvf_last_error());
}

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
    /* A rule's pass over the prompt (KVzip's reconstruction) holds its positions in the cache while it compresses. */
    int32_t pass = 0;
    if (ok && (st = kvf_kv_compress_positions(srv->m, j->kv ? j->kv : srv->a->kv, n, &pass)) != KVF_OK)
        ok = error_kvf(e, st, "kv");
    const size_t need = sched_reserve_bytes(srv, MAX(n_ctx, n + pass));
    if (ok && need > srv->budget)
        ok = serve_error_set(e, 413, "kv_memory_exceeded",
                             "the request may need %zu bytes of KV cache (%d prompt + %d new tokens, or %d positions "
                             "of its KV rule's pass over the prompt; %zu bytes per position, storage growth "
                             "included) and --kv-memory is %zu bytes: shorten the prompt or lower max_tokens", need,
                             n, n_ctx - n, pass, srv->pos_bytes, srv->budget);
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
    if (*kv_full > srv->pos_bytes * (size_t)kvf_session_n_past(j->s) + srv->head_bytes)
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

/* The queue's head, prepared and given its session when its reservation
 * fits and no other prompt is going in; true when the queue moved. Called
 * with the lock held; drops it for the work. */
bool sched_admit(struct server *srv) {
    struct serve_job *j = srv->head;
    if (!j || srv->filling || srv->n_active + 1 > srv->a->parallel)
        return false;
    struct serve_error e = {0};
    bool ok = true;
    if (!j->prepared) {
        struct job_plan plan = {0};
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
         * starts from what it holds now (budget_account). */
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
bool sched_fill(struct server *srv, char **piece, int32_t *cap) {
    struct serve_job *j = srv->filling;
    if (!j)
        return false;
    struct serve_error e = {0};
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
        budget_account(srv); /* before the reservation shrinks to the compressed cache's */
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
        const size_t r = budget_after_compress(srv, j);
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
