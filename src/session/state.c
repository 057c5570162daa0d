/* Session files: a session's whole state in one buffer (or file), so that a
 * conversation outlives its process and moves between machines; the format
 * is docs/SESSION_FILE.md. A file is untrusted input: every count is checked
 * against the model and the session's context before anything is read or
 * allocated for it, and the parts are checked against each other (positions
 * in range and in order, entries of a head within its storage), so that a
 * loaded session holds nothing a session of its own could not. */
#include "session/session.h"

#include "core/sys.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "session files are little-endian: write and read them field by field on this host"
#endif
_Static_assert(sizeof(long) == 8, "query statistics' counts are written as 64-bit integers");

static const char MAGIC[8] = {'K', 'V', 'F', 'S', 'E', 'S', 'S', 0};
/* Version 3 adds q4_0s keys and each head's smoothing of them; version 2
 * stores the types of keys and values apart; version 1, one type for both.
 * All three load. */
#define STATE_VERSION 3
#define SPEC_MAX 4096

/* ------------------------------------------------------------- writing -- */

/* A writer: with p NULL it only counts (the size pass). */
struct wr {
    uint8_t *p;
    size_t n;
};

static void put(struct wr *w, const void *x, size_t n) {
    if (w->p && n) memcpy(w->p + w->n, x, n);
    w->n += n;
}
static void put_i32(struct wr *w, int32_t x) { put(w, &x, sizeof x); }
static void io_put(void *w, const void *x, size_t n) { put(w, x, n); }

/* The rules' own statistics: those about the entries (their written
 * scores) just before the cache, the others after the logits. */
static void stats_write(struct wr *w, const struct kv_stats *s, bool entries) {
    const struct kv_stat_io io = {.put = io_put, .ctx = w};
    for (int i = 0; i < s->n; i++)
        if (s->ops[i]->prior == entries) s->ops[i]->save(s->st[i], &io);
}
static void put_u8(struct wr *w, bool x) {
    const uint8_t b = x;
    put(w, &b, 1);
}

/* The state, in the order of docs/SESSION_FILE.md (the CRC excepted). */
static void state_write(const struct kvf_session *s, struct wr *w) {
    const struct kvf_model *m = s->model;
    const struct hparams *hp = &m->hp;
    const int L = hp->n_layer, H = s->kv.n_head_kv, np = s->n_past;
    put(w, MAGIC, sizeof MAGIC);
    put_i32(w, STATE_VERSION);
    /* the model */
    const int32_t arch_len = (int32_t)strlen(m->arch_name);
    put_i32(w, arch_len);
    put(w, m->arch_name, (size_t)arch_len);
    const int32_t dims[6] = {L, hp->n_embd, hp->n_head, H, hp->head_dim, hp->n_vocab};
    put(w, dims, sizeof dims);
    put(w, &m->digest, sizeof m->digest);
    /* the parameters and the policy */
    const int32_t params[5] = {s->params.n_ctx, s->params.n_batch, (int32_t)s->params.type_k,
                               (int32_t)s->params.type_v, s->params.kv_gather};
    put(w, params, sizeof params);
    put_u8(w, s->params.kv_swa_full);
    put(w, &s->params.kv_budget, sizeof(double));
    const int32_t spec_len = (int32_t)strlen(s->spec), note_len = s->note ? (int32_t)strlen(s->note) : -1;
    put_i32(w, spec_len);
    put(w, s->spec, (size_t)spec_len);
    put_i32(w, note_len);
    if (s->note) put(w, s->note, (size_t)note_len);
    /* positions */
    const int32_t at[4] = {np, s->swa_lost, s->prompt_rope0, s->has_logits};
    put(w, at, sizeof at);
    put(w, s->tags, sizeof *s->tags * (size_t)np);
    put(w, s->toks, sizeof *s->toks * (size_t)np);
    if (s->rope_next) put(w, s->rope_next, sizeof *s->rope_next * (size_t)np);
    put(w, s->logits, sizeof(float) * (size_t)hp->n_vocab);
    /* the rules' own statistics (which ones follows from the policy and kv_gather) */
    stats_write(w, &s->stats, false);
    /* the query window (its capacity follows from the policy) */
    for (int l = 0; kv_qwin_on(&s->qwin) && l < L; l++) {
        put_i32(w, s->qwin.n[l]);
        put(w, kv_qwin_q(&s->qwin, l), sizeof(float) * (size_t)s->qwin.n[l] * s->qwin.qd);
        put(w, kv_qwin_pos(&s->qwin, l), sizeof(int32_t) * (size_t)s->qwin.n[l]);
    }
    /* the compression state (its arrays exist for evicting policies) */
    const struct compress_state *cs = &s->cs;
    put_u8(w, cs->compressed);
    put_i32(w, cs->decode_steps);
    put_u8(w, cs->have_ratio);
    if (cs->n0) { /* each meaningful once set (compressed, have_ratio), zeros before */
        for (size_t i = 0; i < (size_t)L * H; i++) put_i32(w, cs->compressed ? cs->n0[i] : 0);
        for (int l = 0; l < L; l++) put(w, cs->have_ratio ? &cs->layer_ratio[l] : &(double){0}, sizeof(double));
        for (int l = 0; l < L; l++) put(w, cs->have_ratio ? &cs->layer_gini[l] : &(double){0}, sizeof(double));
    }
    /* merge records (kept for evicting policies) */
    for (size_t i = 0; s->merges.heads && i < (size_t)L * H; i++) {
        put_i32(w, s->merges.heads[i].n);
        put(w, s->merges.heads[i].m, sizeof *s->merges.heads[i].m * (size_t)s->merges.heads[i].n);
    }
    stats_write(w, &s->stats, true);
    /* the cache, head by head, in its storage type */
    for (size_t i = 0; i < (size_t)L * H; i++) {
        const struct kv_head *h = &s->kv.heads[i];
        put_i32(w, h->n);
        put_i32(w, h->cap);
        put(w, h->k, s->kv.k_row * (size_t)h->n);
        if (s->kv.smooth_k && h->cap > 0) {
            put_i32(w, h->smooth_rows);
            put(w, h->smooth, 2 * sizeof(float) * (size_t)hp->head_dim);
        }
        put(w, h->v, s->kv.v_row * (size_t)h->n);
        put(w, h->tag, sizeof *h->tag * (size_t)h->n);
        if (s->kv.has_acc) put(w, h->acc, sizeof(float) * KV_ACC_N * (size_t)h->n);
        if (s->kv.has_prior) put(w, h->prior, sizeof(float) * (size_t)h->n);
    }
    const uint64_t peak = s->kv.peak_bytes;
    put(w, &peak, sizeof peak);
    put_i32(w, s->kv.peak_entries);
}

/* Sessions in the middle of a prompt hold a caller's prompt: not saved. */
static enum kvf_status save_check(const struct kvf_session *s) {
    if (!s) return err_set(KVF_ERR_INVALID_ARG, "session save: NULL session");
    if (s->part_of) return err_set(KVF_ERR_UNSUPPORTED, "session save: a prompt is being prefilled in parts");
    return KVF_OK;
}

size_t kvf_session_save_size(const struct kvf_session *s) {
    if (save_check(s) != KVF_OK) return 0;
    struct wr w = {0};
    state_write(s, &w);
    return w.n + sizeof(uint32_t);
}

enum kvf_status kvf_session_save_buffer(const struct kvf_session *s, void *dst, size_t size) {
    enum kvf_status st = save_check(s);
    if (st != KVF_OK) return st;
    const size_t need = kvf_session_save_size(s);
    if (!dst || size < need)
        return err_set(KVF_ERR_BUFFER, "session save: %zu bytes needed, %zu given", need, dst ? size : 0);
    struct wr w = {dst, 0};
    state_write(s, &w);
    const uint32_t crc = (uint32_t)crc32_z(0, dst, w.n);
    put(&w, &crc, sizeof crc);
    return KVF_OK;
}

enum kvf_status kvf_session_save(const struct kvf_session *s, const char *path) {
    enum kvf_status st = save_check(s);
    if (st != KVF_OK) return st;
    if (!path) return err_set(KVF_ERR_INVALID_ARG, "session save: no path");
    const size_t n = kvf_session_save_size(s);
    void *buf = malloc(n);
    if (!buf) return err_set(KVF_ERR_NOMEM, "session save: out of memory for %zu bytes", n);
    st = kvf_session_save_buffer(s, buf, n);
    /* atomically: a reader sees the old file or the whole new one */
    char *tmp = st == KVF_OK ? malloc(strlen(path) + 32) : NULL;
    if (st == KVF_OK && !tmp) st = err_set(KVF_ERR_NOMEM, "session save: out of memory");
    FILE *f = NULL;
    if (st == KVF_OK) {
        sprintf(tmp, "%s.tmp.%ld", path, (long)getpid());
        if (!(f = fopen(tmp, "wb")))
            st = err_set(KVF_ERR_IO, "session save: cannot create '%s': %s", tmp, strerror(errno));
    }
    if (f) {
        const bool ok = fwrite(buf, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
        const int err = errno;
        if (fclose(f) != 0 || !ok) st = err_set(KVF_ERR_IO, "session save: cannot write '%s': %s", tmp, strerror(err));
        else if (rename(tmp, path) != 0)
            st = err_set(KVF_ERR_IO, "session save: cannot rename to '%s': %s", path, strerror(errno));
        if (st != KVF_OK) remove(tmp);
    }
    free(tmp);
    free(buf);
    return st;
}

/* ------------------------------------------------------------- reading -- */

/* A reader over the buffer; the first shortfall is remembered. */
struct rd {
    const uint8_t *p;
    size_t n, at;
    bool short_read;
};

/* n bytes, or NULL (and short_read) when fewer are left. */
static const void *take(struct rd *r, size_t n) {
    if (r->short_read || n > r->n - r->at) {
        r->short_read = true;
        return NULL;
    }
    const void *x = r->p + r->at;
    r->at += n;
    return x;
}
/* count items of `size` bytes: size x count is checked to be there before
 * the product could overflow or anything be allocated for it. */
static const void *take_n(struct rd *r, size_t size, int64_t count) {
    if (count < 0 || (count > 0 && (size_t)count > (r->n - r->at) / size)) {
        r->short_read = true;
        return NULL;
    }
    return take(r, size * (size_t)count);
}
static bool get(struct rd *r, void *x, size_t n) {
    const void *p = take(r, n);
    if (p && n) memcpy(x, p, n); /* n 0: x may be NULL (nothing allocated for nothing) */
    return p != NULL;
}
static bool io_get(void *r, void *x, size_t n) { return get(r, x, n); }
static int32_t get_i32(struct rd *r) {
    int32_t x = 0;
    get(r, &x, sizeof x);
    return x;
}
static bool get_u8(struct rd *r) {
    uint8_t b = 0;
    get(r, &b, 1);
    return b != 0;
}

static enum kvf_status bad(const char *what) { return err_set(KVF_ERR_FORMAT, "session file: %s", what); }

/* The model part: this model, or an error naming both. */
static enum kvf_status read_model(struct rd *r, const struct kvf_model *m) {
    char arch[64] = "";
    const int32_t arch_len = get_i32(r);
    if (arch_len < 0 || arch_len >= (int32_t)sizeof arch) return bad("the architecture's name is out of range");
    get(r, arch, (size_t)arch_len);
    int32_t dims[6] = {0};
    uint32_t digest = 0;
    get(r, dims, sizeof dims);
    get(r, &digest, sizeof digest);
    if (r->short_read) return bad("truncated in its header");
    const struct hparams *hp = &m->hp;
    const int32_t want[6] = {hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_vocab};
    if (strcmp(arch, m->arch_name) || memcmp(dims, want, sizeof dims) || digest != m->digest)
        return err_set(
            KVF_ERR_UNSUPPORTED,
            "session file: made with another model (%s, %d layers of %d, %d heads, "
            "%d kv heads of %d, %d tokens, tensors %08x); this is %s (%d layers of %d, %d heads, %d kv heads "
            "of %d, %d tokens, tensors %08x)",
            arch, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], digest, m->arch_name, want[0], want[1], want[2],
            want[3], want[4], want[5], m->digest);
    return KVF_OK;
}

/* A head's smoothing (kv_head.smooth): finite shifts, finite positive
 * scales, a count of the entries they came from. */
static bool smooth_ok(const float *smooth, int d, int32_t rows) {
    for (int i = 0; i < d; i++) {
        float mu, lam;
        memcpy(&mu, smooth + i, sizeof mu); /* the file's bytes are not aligned */
        memcpy(&lam, smooth + d + i, sizeof lam);
        if (!isfinite(mu) || !isfinite(lam) || !(lam > 0)) return false;
    }
    return rows >= 0 && rows <= 1 << 30;
}

/* The session the file describes, empty: its parameters and policy. */
static enum kvf_status read_session(struct rd *r, uint32_t version, const struct kvf_model *m, int n_threads,
                                    int n_ctx_max, struct kvf_session **out) {
    /* n_ctx, n_batch, type_k, type_v, kv_gather; version 1 has no type_v */
    int32_t params[5] = {0};
    if (version == 1) {
        get(r, params, 3 * sizeof *params);
        params[3] = params[2];
        params[4] = get_i32(r);
    } else {
        get(r, params, sizeof params);
    }
    const bool swa_full = get_u8(r);
    double budget = 0;
    get(r, &budget, sizeof budget);
    const int32_t spec_len = get_i32(r);
    if (r->short_read) return bad("truncated in its parameters");
    if (spec_len < 0 || spec_len > SPEC_MAX) return bad("the policy's spec is out of range");
    char spec[SPEC_MAX + 1];
    if (!get(r, spec, (size_t)spec_len)) return bad("truncated in its policy");
    spec[spec_len] = '\0';
    if (memchr(spec, '\0', (size_t)spec_len)) return bad("the policy's spec holds a NUL");
    /* the session's own checks: n_ctx, n_batch, the types, kv_gather, the spec and budget */
    if (params[0] <= 0) return bad("its context is not positive");
    if (params[0] > KVF_MAX(m->hp.n_ctx_train, n_ctx_max))
        return n_ctx_max > m->hp.n_ctx_train
            ? err_set(KVF_ERR_CONTEXT, "session file: a context of %d positions, over the %d allowed", params[0],
                      n_ctx_max)
            : err_set(KVF_ERR_CONTEXT, "session file: a context of %d positions, over the model's trained %d (a "
                      "larger context, -c, allows it)", params[0], m->hp.n_ctx_train);
    struct kvf_session_params p = kvf_session_default_params();
    p.n_ctx = params[0], p.n_batch = params[1], p.kv_gather = params[4];
    p.type_k = (enum kvf_kv_type)params[2], p.type_v = (enum kvf_kv_type)params[3];
    p.kv_swa_full = swa_full, p.kv_budget = budget, p.kv_spec = spec, p.n_threads = n_threads;
    /* version 1 knew f32, f16 and q8_0; version 2 up to q4_0h */
    const enum kvf_kv_type last = version == 1 ? KVF_KV_Q8_0 : version == 2 ? KVF_KV_Q4_0H : KVF_KV_Q4_0S;
    if (p.type_k < KVF_KV_F32 || p.type_k > last || p.type_v < KVF_KV_F32 || p.type_v > last)
        return bad("its cache type is unknown");
    const int32_t note_len = get_i32(r);
    if (r->short_read) return bad("truncated in its note");
    if (note_len < -1 || note_len > (int32_t)SESSION_NOTE_MAX) return bad("its note is out of range");
    const char *note = note_len >= 0 ? take(r, (size_t)note_len) : NULL;
    if (note_len >= 0 && (!note || memchr(note, '\0', (size_t)note_len)))
        return bad("its note is cut short or holds a NUL");
    const enum kvf_status st = session_create(m, &p, false, out);
    if (st != KVF_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", kvf_last_error());
        return err_set(st == KVF_ERR_INVALID_ARG ? KVF_ERR_FORMAT : st, "session file: its session: %s", why);
    }
    /* what session_create resolved must be what was saved */
    if ((*out)->params.n_ctx != params[0] || (*out)->params.n_batch != params[1] ||
        (*out)->params.kv_gather != params[4])
        return bad("its context, batch or gathering are not those of a session");
    if (note && !((*out)->note = strndup(note, (size_t)note_len)))
        return err_set(KVF_ERR_NOMEM, "session file: out of memory");
    return KVF_OK;
}

static bool tag_ok(const struct kvf_tag *t, int32_t n_past) {
    return t->pos >= 0 && t->pos < n_past && t->modality >= KVF_MOD_TEXT && t->modality <= KVF_MOD_VIDEO &&
           t->media >= -1 && t->row >= -1 && t->col >= -1;
}

/* Everything after the parameters into s (fresh from read_session). */
/* stats_write's parts back, each statistic checking its values. */
static enum kvf_status stats_read(struct rd *r, const struct kv_stats *s, bool entries) {
    const struct kv_stat_io io = {.get = io_get, .ctx = r};
    enum kvf_status st = KVF_OK;
    for (int i = 0; st == KVF_OK && i < s->n; i++)
        if (s->ops[i]->prior == entries) st = s->ops[i]->load(s->st[i], &io);
    return st;
}

static enum kvf_status read_state(struct rd *r, struct kvf_session *s) {
    const struct hparams *hp = &s->model->hp;
    const int L = hp->n_layer, H = s->kv.n_head_kv, n_ctx = s->params.n_ctx;
    int32_t at[4] = {0};
    if (!get(r, at, sizeof at)) return bad("truncated in its positions");
    const int32_t np = at[0];
    if (np < 0 || np > n_ctx) return bad("more positions than its context");
    if (at[1] < -1 || at[1] >= np || at[3] < 0 || at[3] > 1) return bad("its window or logits flags are out of range");
    enum kvf_status st = KVF_OK;
    /* memory for the positions only once the file holds them */
    const bool mrope = hp->mrope[0] + hp->mrope[1] + hp->mrope[2] > 0;
    const size_t per_pos = sizeof *s->tags + sizeof *s->toks + (mrope ? sizeof *s->rope_next : 0);
    if ((size_t)np > (r->n - r->at) / per_pos) return bad("truncated in its positions");
    if ((st = session_room(s, np, 0)) != KVF_OK) return st;
    if (!get(r, s->tags, sizeof *s->tags * (size_t)np) || !get(r, s->toks, sizeof *s->toks * (size_t)np) ||
        (s->rope_next && !get(r, s->rope_next, sizeof *s->rope_next * (size_t)np)) ||
        !get(r, s->logits, sizeof(float) * (size_t)hp->n_vocab))
        return bad("truncated in its positions");
    for (int i = 0; i < np; i++)
        if (!tag_ok(&s->tags[i], np) || s->toks[i] < -1 || s->toks[i] >= hp->n_vocab)
            return bad("a position's tag or token is out of range");
    s->n_past = np, s->swa_lost = at[1], s->prompt_rope0 = at[2], s->has_logits = at[3];
    if ((st = stats_read(r, &s->stats, false)) != KVF_OK) return st;
    for (int l = 0; kv_qwin_on(&s->qwin) && l < L; l++) {
        const int32_t n = get_i32(r);
        if (n < 0 || n > s->qwin.cap || n > np) return bad("a query window holds more than it can");
        /* fields are not aligned in the file: read where they land, then checked */
        const void *q = take_n(r, sizeof(float) * (size_t)s->qwin.qd, n), *pos = take_n(r, sizeof(int32_t), n);
        if (!q || !pos) return bad("truncated in its query windows");
        if (n == 0) continue;
        if ((st = kv_qwin_reserve_layer(&s->qwin, l, n)) != KVF_OK) return st;
        s->qwin.n[l] = n;
        memcpy(s->qwin.q[l], q, sizeof(float) * (size_t)n * s->qwin.qd);
        memcpy(s->qwin.pos[l], pos, sizeof(int32_t) * (size_t)n);
        for (int i = 0; i < n; i++)
            if (kv_qwin_pos(&s->qwin, l)[i] < 0 || kv_qwin_pos(&s->qwin, l)[i] >= np)
                return bad("a query window's position is out of range");
    }
    struct compress_state *cs = &s->cs;
    cs->compressed = get_u8(r);
    cs->decode_steps = get_i32(r);
    cs->have_ratio = get_u8(r);
    if (cs->n0 &&
        (!get(r, cs->n0, sizeof *cs->n0 * (size_t)L * H) || !get(r, cs->layer_ratio, sizeof(double) * (size_t)L) ||
         !get(r, cs->layer_gini, sizeof(double) * (size_t)L)))
        return bad("truncated in its compression state");
    if (r->short_read) return bad("truncated in its compression state");
    if (cs->decode_steps < 0) return bad("a negative count of decode steps");
    const bool shares = kv_budget_rule(s->policy.alloc)->budget->shares;
    if (cs->have_ratio && (!cs->layer_ratio || !shares)) return bad("layer budgets for a policy that has none");
    /* a profile's shares are read with the session: a file carries them */
    if (!cs->have_ratio && shares && s->policy.profile[0]) return bad("no layer budgets for a profile's policy");
    for (size_t i = 0; cs->n0 && i < (size_t)L * H; i++)
        if (cs->n0[i] < 0 || cs->n0[i] > n_ctx) return bad("a head's size after compression is out of range");
    for (int l = 0; cs->n0 && l < L; l++)
        if (!(cs->layer_ratio[l] >= 0 && cs->layer_ratio[l] <= 1)) return bad("a layer's budget is out of range");
    for (int l = 0; s->merges.heads && l < L; l++)
        for (int g = 0; g < H; g++) {
            const int32_t n = get_i32(r);
            if (n < 0 || n > np) return bad("more merge records than positions");
            const void *x = take_n(r, sizeof(struct kvf_kv_merge), n);
            if (!x) return bad("truncated in its merge records");
            struct kv_merge_list *ml = kv_merge_log_head(&s->merges, l, g);
            if ((st = kv_merge_list_reserve(ml, n)) != KVF_OK) return st;
            if (n) memcpy(ml->m, x, sizeof *ml->m * (size_t)n);
            ml->n = n;
            for (int i = 0; i < n; i++)
                if (ml->m[i].from < 0 || ml->m[i].from >= np || ml->m[i].into < 0 || ml->m[i].into >= np)
                    return bad("a merge record's position is out of range");
        }
    if ((st = stats_read(r, &s->stats, true)) != KVF_OK) return st;
    int most = 0;
    for (int l = 0; l < L; l++)
        for (int g = 0; g < H; g++) {
            const int32_t n = get_i32(r), cap = get_i32(r);
            /* a head holds at most the positions seen, in storage the cache's own rule leaves (growth by an
             * eighth, shrinking past a quarter and 16: kv/cache.c), so what is allocated is what is read */
            if (r->short_read) return bad("truncated in its cache");
            if (n < 0 || n > np || cap < n || cap > n + n / 4 + 16) return bad("a head's size is out of range");
            const void *k = take_n(r, s->kv.k_row, n);
            const bool smoothed = s->kv.smooth_k && cap > 0;
            const int32_t smooth_rows = smoothed ? get_i32(r) : 0;
            const float *smooth = smoothed ? take_n(r, 2 * sizeof(float), s->kv.head_dim) : NULL;
            const void *v = take_n(r, s->kv.v_row, n), *tag = take_n(r, sizeof(struct kvf_tag), n);
            const void *acc = s->kv.has_acc ? take_n(r, sizeof(float) * KV_ACC_N, n) : NULL;
            const void *prior = s->kv.has_prior ? take_n(r, sizeof(float), n) : NULL;
            if (!k || !v || !tag || (s->kv.has_acc && !acc) || (s->kv.has_prior && !prior) || (smoothed && !smooth))
                return bad("truncated in its cache");
            if (smoothed && !smooth_ok(smooth, s->kv.head_dim, smooth_rows))
                return bad("a head's smoothing of its keys is out of range");
            st = kv_cache_fill(&s->kv, l, g, n, cap, k, v, tag, acc, prior, smooth, smooth_rows);
            if (st != KVF_OK) return st;
            const struct kvf_tag *t = kv_cache_head(&s->kv, l, g)->tag;
            for (int i = 0; i < n; i++)
                if (!tag_ok(&t[i], np) || (i > 0 && t[i].pos <= t[i - 1].pos))
                    return bad("a cached entry's position is out of range or order");
            most = KVF_MAX(most, n);
        }
    if ((st = session_room(s, np, most)) != KVF_OK) return st;
    uint64_t peak = 0;
    get(r, &peak, sizeof peak);
    const int32_t peak_entries = get_i32(r);
    if (r->short_read) return bad("truncated at its end");
    /* statistics only (KVzip's repetition may have gone past n_ctx) */
    if (peak < s->kv.bytes || peak > (uint64_t)1 << 48 || peak_entries < most)
        return bad("its peak is below what it holds or out of range");
    s->kv.peak_bytes = (size_t)peak;
    s->kv.peak_entries = peak_entries;
    if (r->at != r->n) return bad("bytes after its end");
    return KVF_OK;
}

enum kvf_status kvf_session_load_buffer(const struct kvf_model *m, const void *src, size_t size, int n_threads,
                                        int n_ctx_max, struct kvf_session **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "session load: no output");
    *out = NULL;
    if (!m || (!src && size)) return err_set(KVF_ERR_INVALID_ARG, "session load: no model or no data");
    if (model_require_weights(m, "session") != KVF_OK) return KVF_ERR_UNSUPPORTED;
    if (size < sizeof MAGIC + 2 * sizeof(uint32_t) || memcmp(src, MAGIC, sizeof MAGIC))
        return bad("not a kvfold session (no KVFSESS header)");
    uint32_t crc, version;
    memcpy(&crc, (const uint8_t *)src + size - sizeof crc, sizeof crc);
    memcpy(&version, (const uint8_t *)src + sizeof MAGIC, sizeof version);
    if ((uint32_t)crc32_z(0, src, size - sizeof crc) != crc)
        return bad("its checksum does not match (corrupt or cut short)");
    if (version < 1 || version > STATE_VERSION)
        return err_set(KVF_ERR_UNSUPPORTED, "session file: version %u; this kvfold reads versions 1 to %d", version,
                       STATE_VERSION);
    struct rd r = {src, size - sizeof crc, sizeof MAGIC + sizeof version, false};
    enum kvf_status st = read_model(&r, m);
    struct kvf_session *s = NULL;
    if (st == KVF_OK) st = read_session(&r, version, m, n_threads, n_ctx_max, &s);
    if (st == KVF_OK) st = read_state(&r, s);
    if (st != KVF_OK) {
        kvf_session_free(s);
        return st;
    }
    *out = s;
    return KVF_OK;
}

enum kvf_status kvf_session_load(const struct kvf_model *m, const char *path, int n_threads, int n_ctx_max,
                                 struct kvf_session **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "session load: no output");
    *out = NULL;
    if (!path) return err_set(KVF_ERR_INVALID_ARG, "session load: no path");
    char *buf = NULL;
    size_t len = 0;
    enum kvf_status st = sys_read_file(path, SIZE_MAX, "a session file", &buf, &len);
    if (st == KVF_OK) st = kvf_session_load_buffer(m, buf, len, n_threads, n_ctx_max, out);
    free(buf);
    return st;
}
