/* kvfold serve's idle sessions (--cache-sessions): a conversation's
 * session kept after its turn, inside the KV budget, for its next turn to
 * go on from; and the slot files of /slots/ID?action=save|restore|erase
 * and --slot-save-path, which copy them out and bring them back. */
#include "sched.h"

#include <stdlib.h>
#include <string.h>

void idle_drop(struct server *srv, int i) {
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
void idle_push(struct server *srv, struct serve_job *j) {
    char *kv = j->kv ? strdup(j->kv) : NULL;
    if (j->kv && !kv)
        return;
    if (srv->n_idle == srv->a->serve.cache_sessions)
        idle_drop(srv, 0);
    struct serve_idle *c = &srv->idle[srv->n_idle++];
    *c = (struct serve_idle){ .id = j->id, .s = j->s, .keys = j->keys, .n = j->n_keys, .kv = kv,
                              .bytes = kvf_session_kv_bytes(j->s), .entries = budget_entries(srv, j->s),
                              .has_conv = j->has_conv, .conv = j->conv };
    srv->reserved += c->bytes;
    j->s = NULL;
    j->keys = NULL;
    j->n_keys = 0;
}

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
void idle_spill(const struct serve_idle *c, struct serve_job *j) {
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
    if (srv->a->serve.cache_sessions <= 0)
        return serve_error_set(e, 400, "invalid_request",
                               "--cache-sessions is 0: a restored session has nowhere to wait");
    if (kvf_session_n_ctx(s) != srv->n_ctx)
        return serve_error_set(e, 400, "invalid_request", "the session was saved with a context of %d positions; this "
                               "server's is %d (--ctx-size)", kvf_session_n_ctx(s), srv->n_ctx);
    /* the admission rule's bytes per position must hold for it (another --kv-type's would not) */
    if (kvf_session_kv_full_bytes(s) > (size_t)kvf_session_n_past(s) * srv->pos_bytes + srv->head_bytes)
        return serve_error_set(e, 400, "invalid_request", "the session's positions cost more than this server's %zu "
                               "bytes each (saved with another --kv-type)", srv->pos_bytes);
    const char *note = kvf_session_note(s);
    cJSON *o = json_parse(note, strlen(note), NULL); /* "" when the session has none */
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
    while (srv->n_idle > 0 && (srv->n_idle == srv->a->serve.cache_sessions || srv->reserved + bytes > srv->budget))
        idle_drop(srv, 0);
    if (srv->reserved + bytes > srv->budget) {
        free(keys);
        free(kv);
        return serve_error_set(e, 507, "kv_memory_exceeded", "the session's %zu KV bytes do not fit beside the %zu "
                               "running sessions reserve (--kv-memory %zu)", bytes, srv->reserved, srv->budget);
    }
    *id = ++srv->next_id;
    srv->idle[srv->n_idle++] = (struct serve_idle){ .id = *id, .s = s, .keys = keys, .n = n, .kv = kv, .bytes = bytes,
                                                    .entries = budget_entries(srv, s),
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
int idle_match(const struct server *srv, const struct serve_job *j, int *k) {
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
