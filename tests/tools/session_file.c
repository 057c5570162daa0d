/* Session files (kvf_session_save / kvf_session_load): a loaded session goes
 * on as the saved one does, and a damaged file is refused.
 *
 *   session_file MODEL MMPROJ [OTHER_MODEL]
 *
 * On a vision fixture's prompt (two images, text around them), every policy
 * below is prefilled with sliding-window layers freeing what falls out of
 * their window, compressed and decoded two steps, then saved (to a buffer;
 * the first also to a file) and loaded; the loaded session and the original
 * decode five more tokens, and bytes, peak, kept tags, merges, layer budgets
 * and logits must be identical after loading and after every step. A
 * session is also saved straight after its prompt and compressed after
 * loading. Then the file is damaged: cut short (the first 512 lengths, then
 * every 97th), bits flipped (a checksum error), words overwritten with the
 * checksum made right again (the reader's own checks: any status but a crash
 * or a hang, and a session that loads must decode), another model's
 * (UNSUPPORTED, OTHER_MODEL), and a session mid-prompt is not saved.
 * Sizes: a session of the largest context takes memory for what it holds
 * under every policy, and a file naming a context over the model's trained
 * one loads only where the caller allows it. */
#include "kv_state.h"

#include <malloc.h>
#include <unistd.h>
#include <zlib.h>

#define N_DECODE 5

static const char *const specs[] = {
    "full",
    "snapkv:budget=0.3",
    "snapkv:budget=0.2+decode=h2o",
    "lookm:budget=0.3",
    "elastic:budget=0.3",
    "snapkv:budget=0.2+budget=adaptive+decode=h2o",
    "streaming:budget=24+decode=window",
    "prefixkv:budget=0.3",
    "csp:budget=0.1",
    "expected:budget=0.3",
    "kvzip:budget=0.3,chunk=16",
    "keydiff:budget=0.25+decode=recompress:every=3",
    "lightkv",
    "h2o:budget=0.3+schedule=blocks:budget=64,block=32",
};

static struct kvf_session *prefilled(const struct kvf_model *m, const struct kvf_prompt *pr, const char *spec,
                                     enum kvf_kv_type type_k, enum kvf_kv_type type_v) {
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr) + N_DECODE + 4;
    sp.kv_spec = spec;
    sp.type_k = type_k;
    sp.type_v = type_v;
    return fixture_prefilled("session_file", m, pr, &sp);
}

/* src saved to a buffer (*buf, *size: the caller frees) and loaded. */
static struct kvf_session *round_trip(const struct kvf_model *m, const struct kvf_session *src, uint8_t **buf,
                                      size_t *size) {
    *size = kvf_session_save_size(src);
    *buf = malloc(*size ? *size : 1);
    struct kvf_session *s = NULL;
    if (!*buf || !*size || kvf_session_save_buffer(src, *buf, *size) != KVF_OK ||
        kvf_session_load_buffer(m, *buf, *size, 2, 0, &s) != KVF_OK)
        fprintf(stderr, "round trip: %s\n", kvf_last_error());
    return s;
}

/* What same_state leaves out: every position's token id and tag, the note,
 * the policy's spec. */
static int same_history(const struct kvf_session *a, const struct kvf_session *b, const char *spec) {
    const int n = kvf_session_n_past(a);
    const int bad = n != kvf_session_n_past(b) || strcmp(kvf_session_note(a), kvf_session_note(b)) ||
                    strcmp(kvf_session_kv_spec(a), spec) || strcmp(kvf_session_kv_spec(b), spec) ||
                    (n && (memcmp(kvf_session_tokens(a), kvf_session_tokens(b), sizeof(int32_t) * (size_t)n) ||
                           memcmp(kvf_session_tags(a), kvf_session_tags(b), sizeof(struct kvf_tag) * (size_t)n)));
    if (bad) fprintf(stderr, "%s: token ids, tags, note or spec differ after loading\n", spec);
    return bad;
}

/* own and the sessions of others decode the same tokens, compared after each. */
static int decode_all(const struct kvf_model_info *mi, struct kvf_session *own, struct kvf_session **others, int n,
                      const char *spec, int steps, const char *when) {
    int bad = 0;
    for (int t = 0; !bad && t < steps; t++) {
        const int32_t tok = argmax(kvf_session_logits(own), mi->n_vocab);
        enum kvf_status st = kvf_session_decode(own, tok);
        for (int i = 0; i < n && st == KVF_OK; i++) st = kvf_session_decode(others[i], tok);
        char at[96];
        snprintf(at, sizeof at, "%s, decode step %d", when, t + 1);
        for (int i = 0; i < n && !bad; i++) bad |= st != KVF_OK || same_state(own, others[i], mi, spec, at);
    }
    return bad;
}

/* One session saved after its prompt (then compressed on both sides), and
 * after compression and two steps (to path when given); each loaded one
 * decodes with the original. */
static int check_spec(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                      const char *spec, enum kvf_kv_type type_k, enum kvf_kv_type type_v, const char *path,
                      size_t *file_size) {
    struct kvf_session *own = prefilled(m, pr, spec, type_k, type_v), *loaded[2] = {0};
    uint8_t *buf = NULL;
    size_t size = 0;
    int bad = !own || kvf_session_set_note(own, spec) != KVF_OK;
    if (!bad) {
        loaded[0] = round_trip(m, own, &buf, &size);
        free(buf);
        bad = !loaded[0] || same_state(own, loaded[0], mi, spec, "loaded after the prompt") ||
              same_history(own, loaded[0], spec);
        enum kvf_status st = bad ? KVF_OK : kvf_session_compress(own);
        if (st == KVF_OK && !bad) st = kvf_session_compress(loaded[0]);
        bad |= st != KVF_OK || same_state(own, loaded[0], mi, spec, "compressed after loading");
    }
    if (!bad) bad = decode_all(mi, own, loaded, 1, spec, 2, "loaded after the prompt");
    if (!bad && path) { /* through a file */
        bad = kvf_session_save(own, path) != KVF_OK || kvf_session_load(m, path, 2, 0, &loaded[1]) != KVF_OK;
        if (bad) fprintf(stderr, "%s: %s: %s\n", spec, path, kvf_last_error());
        *file_size = kvf_session_save_size(own);
    } else if (!bad) {
        loaded[1] = round_trip(m, own, &buf, &size);
        free(buf);
        bad = !loaded[1];
    }
    bad |=
        bad || same_state(own, loaded[1], mi, spec, "loaded after compression") || same_history(own, loaded[1], spec);
    if (!bad) bad = decode_all(mi, own, loaded, 2, spec, N_DECODE, "loaded after compression");
    printf("%-52s %-4s %-4s %s  %zu bytes saved\n", spec, kvf_kv_type_name(type_k), kvf_kv_type_name(type_v),
           bad ? "FAIL" : "ok  ",
           own ? kvf_session_save_size(own) : (size_t)0);
    kvf_session_free(own);
    kvf_session_free(loaded[0]);
    kvf_session_free(loaded[1]);
    return bad;
}

static uint32_t lcg(uint32_t *x) { return *x = *x * 1664525u + 1013904223u; }

/* Loads a damaged copy: want is the status it must get, or -1 for any;
 * a session that loads must decode. */
static int load_damaged(const struct kvf_model *m, const struct kvf_model_info *mi, const uint8_t *data, size_t n,
                        int want, const char *what) {
    struct kvf_session *s = NULL;
    const enum kvf_status st = kvf_session_load_buffer(m, data, n, 1, 0, &s);
    int bad = want >= 0 && (int)st != want;
    if (st == KVF_OK) {
        bad |= !s || (kvf_session_n_past(s) < kvf_session_n_ctx(s) &&
                      kvf_session_decode(s, argmax(kvf_session_logits(s), mi->n_vocab)) > KVF_ERR_NOMEM);
    } else {
        bad |= s != NULL || !kvf_last_error()[0];
    }
    if (bad) fprintf(stderr, "damaged (%s): status %s (%s)\n", what, kvf_status_str(st), kvf_last_error());
    kvf_session_free(s);
    return bad;
}

static void fix_crc(uint8_t *d, size_t n) {
    const uint32_t crc = (uint32_t)crc32_z(0, d, n - 4);
    memcpy(d + n - 4, &crc, 4);
}

static int check_damage(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr) {
    struct kvf_session *s = prefilled(m, pr, "lookm:budget=0.3+decode=h2o", KVF_KV_F32, KVF_KV_F32);
    if (!s || kvf_session_compress(s) != KVF_OK || kvf_session_decode(s, 1) != KVF_OK) return 1;
    const size_t n = kvf_session_save_size(s);
    uint8_t *good = malloc(n), *d = malloc(n);
    int bad = !good || !d || kvf_session_save_buffer(s, good, n) != KVF_OK;
    /* KVF_ERR_BUFFER below the size */
    bad |= !bad && kvf_session_save_buffer(s, d, n - 1) != KVF_ERR_BUFFER;
    int cuts = 0, flips = 0, words = 0;
    for (size_t len = 0; !bad && len < n; len += len < 512 ? 1 : 97, cuts++)
        bad |= load_damaged(m, mi, good, len, KVF_ERR_FORMAT, "cut short");
    uint32_t x = 12345;
    for (; !bad && flips < 200; flips++) {
        memcpy(d, good, n);
        d[lcg(&x) % n] ^= (uint8_t)(1u << (lcg(&x) % 8));
        bad |= load_damaged(m, mi, d, n, KVF_ERR_FORMAT, "a bit flipped");
    }
    static const uint32_t extreme[] = {0, 1, 0xffffffffu, 0x7fffffffu, 0x80000000u, 0x10000u, 0xfffffff0u};
    for (; !bad && words < 2000; words++) {
        memcpy(d, good, n);
        const size_t at = 8 + lcg(&x) % (n - 12);
        const uint32_t v = words % 2 ? extreme[lcg(&x) % (sizeof extreme / sizeof *extreme)] : lcg(&x);
        memcpy(d + at, &v, 4);
        fix_crc(d, n);
        bad |= load_damaged(m, mi, d, n, -1, "a word overwritten");
    }
    printf("damaged files: %d cut short, %d with a bit flipped, %d with a word overwritten: %s\n", cuts, flips, words,
           bad ? "FAIL" : "ok");
    free(good);
    free(d);
    kvf_session_free(s);
    return bad;
}

/* A version 1 file (one type for keys and values: no type_v after type_k)
 * loads as the session it describes, values in the keys' type; and a
 * version beyond 2 is refused. Made from a version 2 file of an F16
 * session. */
static int check_version1(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr) {
    struct kvf_session *s = prefilled(m, pr, "snapkv:budget=0.5", KVF_KV_F16, KVF_KV_F16), *l = NULL;
    if (!s || kvf_session_compress(s) != KVF_OK) return 1;
    const size_t n = kvf_session_save_size(s);
    uint8_t *v2 = malloc(n), *v1 = malloc(n);
    int bad = !v2 || !v1 || kvf_session_save_buffer(s, v2, n) != KVF_OK;
    if (!bad) {
        int32_t arch_len;
        memcpy(&arch_len, v2 + 12, 4);
        /* magic, version, architecture, 6 dimensions, digest, then n_ctx, n_batch, type_k, type_v */
        const size_t type_v = 16 + (size_t)arch_len + 24 + 4 + 12;
        memcpy(v1, v2, type_v);
        memcpy(v1 + type_v, v2 + type_v + 4, n - type_v - 4);
        v1[8] = 1;
        fix_crc(v1, n - 4);
        bad = kvf_session_load_buffer(m, v1, n - 4, 1, 0, &l) != KVF_OK ||
              kvf_session_kv_bytes(l) != kvf_session_kv_bytes(s) || same_state(s, l, mi, "v1", "a version 1 file");
        kvf_session_free(l);
        l = NULL;
        /* version 2 is version 3 without q4_0s (whose heads add their smoothing) */
        v2[8] = 2;
        fix_crc(v2, n);
        bad |= kvf_session_load_buffer(m, v2, n, 1, 0, &l) != KVF_OK || same_state(s, l, mi, "v2", "a version 2 file");
        kvf_session_free(l);
        l = NULL;
        v2[8] = 4;
        fix_crc(v2, n);
        bad |= kvf_session_load_buffer(m, v2, n, 1, 0, &l) != KVF_ERR_UNSUPPORTED || l;
    }
    printf("versions 1 and 2 load, version 4 is refused: %s\n", bad ? "FAIL" : "ok");
    free(v1);
    free(v2);
    kvf_session_free(s);
    return bad;
}

/* Bytes malloc has handed out and not taken back (every arena, and the
 * blocks it mapped on their own: where a buffer for a whole context would
 * land, touched or not). */
static size_t heap_bytes(void) {
    const struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* Every policy in a session of 2^24 positions holding a prompt of a few
 * hundred: its buffers follow the positions and entries it has (a buffer
 * for the whole context would be gigabytes); and a saved session whose
 * context is over the model's trained one. */
static int check_context(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr) {
    int bad = 0;
    size_t most = 0;
    const char *most_spec = "";
    for (size_t i = 0; !bad && i < sizeof specs / sizeof *specs; i++) {
        struct kvf_session_params sp = kvf_session_default_params();
        sp.n_ctx = 1 << 24, sp.kv_spec = specs[i], sp.type_k = sp.type_v = KVF_KV_F32;
        const size_t before = heap_bytes();
        struct kvf_session *s = fixture_prefilled("session_file", m, pr, &sp);
        bad |= !s || kvf_session_compress(s) != KVF_OK || kvf_session_decode(s, 1) != KVF_OK;
        const size_t held = heap_bytes() - before;
        if (held > most) most = held, most_spec = specs[i];
        if (held > (64u << 20)) {
            fprintf(stderr, "%s: a session of %d positions holding %d takes %zu MB\n", specs[i], sp.n_ctx,
                    kvf_session_n_past(s), held >> 20);
            bad = 1;
        }
        kvf_session_free(s);
    }
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = 4 * mi->n_ctx_train;
    struct kvf_session *s = fixture_prefilled("session_file", m, pr, &sp), *l = NULL;
    const size_t n = s ? kvf_session_save_size(s) : 0;
    uint8_t *buf = n ? malloc(n) : NULL;
    bad |= !buf || kvf_session_save_buffer(s, buf, n) != KVF_OK;
    bad |= !bad && (kvf_session_load_buffer(m, buf, n, 1, 0, &l) != KVF_ERR_CONTEXT || l);
    bad |= !bad && (kvf_session_load_buffer(m, buf, n, 1, 2 * mi->n_ctx_train, &l) != KVF_ERR_CONTEXT || l);
    bad |= !bad && (kvf_session_load_buffer(m, buf, n, 1, sp.n_ctx, &l) != KVF_OK || kvf_session_n_ctx(l) != sp.n_ctx);
    printf("sizes: every policy in a context of 2^24 takes what it holds (at most %.1f MB, %s), a file over the "
           "trained context loads where allowed: %s\n", (double)most / (1 << 20), most_spec, bad ? "FAIL" : "ok");
    kvf_session_free(l);
    kvf_session_free(s);
    free(buf);
    return bad;
}

int main(int argc, char **argv) {
    struct kvf_model *m = NULL;
    struct kvf_model_info mi;
    struct kvf_media *media[FIXTURE_MEDIA];
    struct kvf_prompt *pr = NULL;
    if (argc < 3 || fixture_open("session_file", 3, argv, &m, &mi, media, &pr)) return 2; /* argv[3]: another model */
    char path[4096];
    snprintf(path, sizeof path, "%s/session_file.%d.kvfs", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    size_t file_size = 0;
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof specs / sizeof *specs; i++)
        rc |= check_spec(m, &mi, pr, specs[i], KVF_KV_F32, KVF_KV_F32, i == 0 ? path : NULL, &file_size);
    rc |= !rc && check_spec(m, &mi, pr, "snapkv:budget=0.3+decode=h2o", KVF_KV_F16, KVF_KV_F16, NULL, NULL);
    /* KVzap's written scores saved and loaded with their entries (its threshold stage too) */
    char zap_path[32], zap[96], zap_tau[128];
    rc |= !rc && fixture_kvzap(m, zap_path, zap, sizeof zap);
    snprintf(zap_tau, sizeof zap_tau, "kvzap:scorer=%s+budget=threshold:tau=-8,last=4", zap_path);
    rc |= !rc && check_spec(m, &mi, pr, zap, KVF_KV_F16, KVF_KV_F16, NULL, NULL);
    rc |= !rc && check_spec(m, &mi, pr, zap_tau, KVF_KV_F16, KVF_KV_F16, NULL, NULL);
    unlink(zap_path);
    if (!rc && mi.head_dim % 32 == 0) {
        rc |= check_spec(m, &mi, pr, "lookm:budget=0.3", KVF_KV_Q8_0, KVF_KV_Q8_0, NULL, NULL);
        rc |= !rc && check_spec(m, &mi, pr, "keydiff:budget=0.3+decode=h2o", KVF_KV_Q8_0, KVF_KV_Q4_0, NULL, NULL);
        rc |= !rc && check_spec(m, &mi, pr, "kvzip:budget=0.3", KVF_KV_Q4_0, KVF_KV_Q4_0, NULL, NULL);
        rc |= !rc && check_spec(m, &mi, pr, "lookm:budget=0.3+decode=h2o", KVF_KV_Q4_0H, KVF_KV_Q4_0H, NULL, NULL);
        rc |= !rc && check_spec(m, &mi, pr, "snapkv:budget=0.3+decode=h2o", KVF_KV_Q4_0S, KVF_KV_Q4_0H, NULL, NULL);
    }
    /* the file is the buffer, written whole */
    FILE *f = fopen(path, "rb");
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (f) fclose(f);
    remove(path);
    if (!rc && (size_t)len != file_size) {
        fprintf(stderr, "the file holds %ld bytes, the session %zu\n", len, file_size);
        rc = 1;
    }
    if (!rc) rc = check_damage(m, &mi, pr);
    if (!rc) rc = check_context(m, &mi, pr);
    if (!rc) rc = check_version1(m, &mi, pr);
    struct kvf_session *s = prefilled(m, pr, "full", KVF_KV_F32, KVF_KV_F32), *l = NULL;
    rc |= !s;
    /* another model's file (the third argument's) */
    struct kvf_model *other = NULL;
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 1;
    if (!rc && argc > 3) {
        const size_t n = kvf_session_save_size(s);
        uint8_t *buf = malloc(n);
        rc |= !buf || kvf_session_save_buffer(s, buf, n) != KVF_OK || kvf_model_load(argv[3], &mp, &other) != KVF_OK;
        rc |= !rc && (kvf_session_load_buffer(other, buf, n, 1, 0, &l) != KVF_ERR_UNSUPPORTED || l);
        printf("another model's session: %s (%s)\n", rc ? "FAIL" : "ok", kvf_last_error());
        free(buf);
        kvf_model_free(other);
    }
    if (!rc) {
        static const uint8_t junk[64] = "GGUF not a session";
        rc |= kvf_session_load_buffer(m, junk, sizeof junk, 1, 0, &l) != KVF_ERR_FORMAT || l;
        rc |= kvf_session_load(m, "/nonexistent/session.kvfs", 1, 0, &l) != KVF_ERR_IO || l;
        rc |= kvf_session_save(s, "/nonexistent/dir/session.kvfs") != KVF_ERR_IO;
        rc |= kvf_session_save_size(NULL) != 0;
        /* mid-prompt: not saved */
        struct kvf_session *part = NULL;
        struct kvf_session_params sp = kvf_session_default_params();
        sp.n_ctx = kvf_prompt_n_tokens(pr) + 8;
        if (kvf_session_init(m, &sp, &part) == KVF_OK && kvf_session_prefill_prompt_part(part, pr, 0, 3) == KVF_OK &&
            kvf_session_n_past(part) < kvf_prompt_n_tokens(pr))
            rc |= kvf_session_save_size(part) != 0 || kvf_session_save(part, path) != KVF_ERR_UNSUPPORTED;
        kvf_session_free(part);
        printf("refusals (not a session, no file, no folder, mid-prompt): %s\n", rc ? "FAIL" : "ok");
    }
    kvf_session_free(s);
    printf("%s\n", rc ? "FAIL" : "ok: every loaded session goes on as the saved one, every damaged file refused");
    kvf_prompt_free(pr);
    fixture_media_free(media);
    kvf_model_free(m);
    return rc;
}
