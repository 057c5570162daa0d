/* kvf_session_fork: one prefill, many policies, each bit for bit what a
 * prefill of its own gives; kvf_session_copy: a session copied at any point
 * goes on as the session itself does.
 *
 *   kv_fork MODEL MMPROJ
 *
 * On the tiny LLaVA fixture (two real images through its vision tower, text
 * around them), every policy that works after the prompt — every preset
 * and stage option the forks support — runs twice: in a session of its own
 * (prefill, compress, greedy decoding) and as a fork of one gathering
 * session (kv_gather) prefilled once. The KV bytes before and after
 * compression, the peak, every head's kept tags, the merges, the searched
 * layer budgets and the logits after compression and after every decode
 * step must be identical. Forks that would differ must be refused:
 * a compressed source, reduce and schedule stages, a source that did not
 * gather the attention sums or the query statistics, or too few of the
 * last queries. Every policy, the reduce and schedule stages too, is also
 * copied after the prompt, after compression and after two decode steps:
 * each copy (its note too) must then match the session through the steps
 * left, and decode on once the session is freed. */
#include "kv_state.h"

#define N_DECODE 5
#define GATHER 48 /* queries the source keeps: over snapkv's 32, under csp's default window */

static const char *const specs[] = {
    "full", "streaming:budget=0.3", "h2o:budget=0.3", "snapkv:budget=0.3", "pyramidkv:budget=0.3", "roco:budget=0.3",
    "keydiff:budget=0.3", "knorm:budget=0.3", "random:budget=0.3", "imgrand:budget=0.3", "lookm:budget=0.3",
    "lookm:budget=0.3,merge=avg,text_prior=0", "elastic:budget=0.3", "prefixkv:budget=0.3", "csp:budget=0.1",
    "csp:budget=0.1,decode_softmax=1", "snapkv:budget=0.2+decode=h2o", "h2o:budget=0.3+budget=pyramid",
    "keydiff:budget=0.25+decode=recompress:every=2", "streaming:budget=24+decode=window",
    "snapkv:budget=0.2+budget=adaptive+decode=h2o", "lookm:budget=0.3+budget=adaptive:floor=0",
    "expected:budget=0.3", "expected:budget=0.3,future=8+decode=recompress:every=2", "kvzip:budget=0.3",
    "kvzip:budget=0.3,chunk=16", "keydiff:budget=0.3+budget=global",
};

/* spec on its own against (fork_spec, budget) forked from src: 0 when
 * identical. */
static int check_fork(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                      const struct kvf_session *src, const char *spec, const char *fork_spec, double budget) {
    struct kvf_session_params sp = fixture_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr) + N_DECODE + 1;
    sp.kv_spec = spec;
    sp.kv_swa_full = true; /* as the source: its peak is the prompt's, not that of freeing as it goes */
    struct kvf_session *own = NULL, *fork = NULL;
    enum kvf_status st = kvf_session_init(m, &sp, &own);
    if (st == KVF_OK) st = kvf_session_prefill_prompt(own, pr, NULL);
    if (st == KVF_OK) st = kvf_session_fork(src, fork_spec, budget, &fork);
    int bad = st != KVF_OK || same_state(own, fork, mi, spec, "after the prompt");
    if (!bad) st = kvf_session_compress(own);
    if (!bad && st == KVF_OK) st = kvf_session_compress(fork);
    bad |= st != KVF_OK || same_state(own, fork, mi, spec, "after compression");
    for (int t = 0; !bad && t < N_DECODE; t++) {
        const int32_t tok = argmax(kvf_session_logits(own), mi->n_vocab);
        st = kvf_session_decode(own, tok);
        if (st == KVF_OK) st = kvf_session_decode(fork, tok);
        char when[32];
        snprintf(when, sizeof when, "at decode step %d", t + 1);
        bad |= st != KVF_OK || same_state(own, fork, mi, spec, when);
    }
    if (st != KVF_OK) fprintf(stderr, "%s: %s\n", spec, kvf_last_error());
    if (budget > 0) printf("%s with budget %g = ", fork_spec, budget);
    printf("%-48s %s  kv %zu -> %zu bytes\n", spec, bad ? "FAIL" : "ok  ", kvf_session_kv_peak_bytes(own),
           kvf_session_kv_bytes(own));
    kvf_session_free(own);
    kvf_session_free(fork);
    return bad;
}

static int check_spec(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                      const struct kvf_session *src, const char *spec) {
    return check_fork(m, mi, pr, src, spec, spec, 0);
}

/* A fork that must be refused with KVF_ERR_UNSUPPORTED. */
static int check_refused(const struct kvf_session *src, const char *spec, const char *why) {
    struct kvf_session *f = NULL;
    const enum kvf_status st = kvf_session_fork(src, spec, 0, &f);
    const int bad = st != KVF_ERR_UNSUPPORTED || f != NULL;
    printf("%-48s %s  refused: %s (%s)\n", spec, bad ? "FAIL" : "ok  ", why,
           st == KVF_OK ? "accepted" : kvf_last_error());
    kvf_session_free(f);
    return bad;
}

/* A session prefilled with the prompt: spec, gathering `gather`. */
static struct kvf_session *prefilled(const struct kvf_model *m, const struct kvf_prompt *pr, const char *spec,
                                     int gather) {
    struct kvf_session_params sp = fixture_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr) + N_DECODE + 1;
    sp.kv_spec = spec;
    sp.kv_gather = gather;
    sp.kv_swa_full = true;
    return fixture_prefilled("kv_fork", m, pr, &sp);
}

/* spec's session and its copies (after the prompt, after compression, after
 * two decode steps), each step applied to all of them: 0 when every copy
 * matches the session throughout. */
static int check_copy(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                      const char *spec) {
    struct kvf_session *own = prefilled(m, pr, spec, 0), *copy[3] = {0};
    int n = 0, bad = !own || kvf_session_set_note(own, spec) != KVF_OK;
    enum kvf_status st = KVF_OK;
    for (int step = -2; !bad && step < N_DECODE; step++) {
        if (step == -2 || step == -1 || step == 2) { /* the prompt in; compressed; two tokens decoded */
            st = kvf_session_copy(own, &copy[n++]);
            bad |= st != KVF_OK || same_state(own, copy[n - 1], mi, spec, "copied") ||
                   strcmp(kvf_session_note(copy[n - 1]), spec) != 0;
        }
        if (bad || step == N_DECODE - 1) break;
        const int32_t tok = step < 0 ? 0 : argmax(kvf_session_logits(own), mi->n_vocab);
        st = step == -2 ? kvf_session_compress(own) : kvf_session_decode(own, tok);
        for (int c = 0; c < n && st == KVF_OK; c++)
            st = step == -2 ? kvf_session_compress(copy[c]) : kvf_session_decode(copy[c], tok);
        char when[48];
        snprintf(when, sizeof when, step == -2 ? "after compression" : "at decode step %d", step + 2);
        for (int c = 0; c < n && !bad; c++) bad |= st != KVF_OK || same_state(own, copy[c], mi, spec, when);
    }
    kvf_session_free(own); /* the copies own what they hold */
    for (int c = 0; c < n && !bad && st == KVF_OK; c++) st = kvf_session_decode(copy[c], 0);
    bad |= st != KVF_OK;
    if (st != KVF_OK) fprintf(stderr, "%s: %s\n", spec, kvf_last_error());
    printf("copy of %-40s %s\n", spec, bad ? "FAIL" : "ok");
    for (int c = 0; c < n; c++) kvf_session_free(copy[c]);
    return bad;
}

int main(int argc, char **argv) {
    struct kvf_model *m = NULL;
    struct kvf_model_info mi;
    struct kvf_media *media[FIXTURE_MEDIA];
    struct kvf_prompt *pr = NULL;
    if (fixture_open("kv_fork", argc, argv, &m, &mi, media, &pr)) return 2;
    const int np = kvf_prompt_n_tokens(pr);
    /* the source: full cache, gathering everything; forking leaves it as it was */
    struct kvf_session *src = prefilled(m, pr, "full", np), *src2 = prefilled(m, pr, "h2o:budget=0.5", GATHER);
    struct kvf_session *plain = prefilled(m, pr, "full", 0), *done = prefilled(m, pr, "snapkv:budget=0.5", 0);
    int rc = !src || !src2 || !plain || !done || kvf_session_compress(done) != KVF_OK;
    for (size_t i = 0; !rc && i < sizeof specs / sizeof *specs; i++) rc |= check_spec(m, &mi, pr, src, specs[i]);
    /* a gathering source under a policy of its own, keeping only GATHER queries */
    rc |= !rc && check_spec(m, &mi, pr, src2, "snapkv:budget=0.3");
    rc |= !rc && check_spec(m, &mi, pr, src2, "lookm:budget=0.3");
    /* the budget given apart (kvf_session_fork's kv_budget) is the spec's budget=X */
    rc |= !rc && check_fork(m, &mi, pr, src, "snapkv:budget=0.3", "snapkv", 0.3);
    rc |= !rc && check_fork(m, &mi, pr, src, "h2o:budget=0.4", "h2o:budget=0.9", 0.4);
    rc |= !rc && check_fork(m, &mi, pr, src, "lookm:merge=avg,budget=12+decode=h2o", "lookm:merge=avg+decode=h2o", 12);
    if (!rc) {
        rc |= check_refused(done, "h2o:budget=0.3", "the source is compressed");
        rc |= check_refused(src, "lightkv", "a reduce stage");
        rc |= check_refused(src, "fastv:k=1", "a reduce stage");
        rc |= check_refused(src, "snapkv:budget=0.3+reduce=tome", "a reduce stage");
        rc |= check_refused(src, "blockwise:budget=64,block=32", "a schedule stage");
        rc |= check_refused(src, "h2o:budget=0.3+schedule=blocks:budget=64,block=32", "a schedule stage");
        rc |= check_refused(plain, "h2o:budget=0.3", "no attention sums gathered");
        rc |= check_refused(plain, "snapkv:budget=0.3", "no queries kept");
        rc |= check_refused(plain, "expected:budget=0.3", "no query statistics gathered");
        rc |= check_refused(src, "expected:budget=0.3,sinks=2", "statistics from position 4 on, not 2");
        rc |= check_refused(src2, "snapkv:budget=0.3,window=64", "64 queries wanted, 48 kept");
        rc |= check_refused(src2, "csp:budget=0.9", "csp's window is its recent entries");
    }
    static const char *const staged[] = { "lightkv", "fastv:k=1", "snapkv:budget=0.3+reduce=tome",
                                          "blockwise:budget=64,block=32",
                                          "h2o:budget=0.3+schedule=blocks:budget=64,block=32" };
    /* KVzap: written scores travel with a copy; a fork needs a source that wrote them with the same scorer */
    char zap_path[32], zap[96];
    rc |= !rc && fixture_kvzap(m, zap_path, zap, sizeof zap);
    struct kvf_session *srcz = rc ? NULL : prefilled(m, pr, zap, 0);
    rc |= !rc && (!srcz || check_spec(m, &mi, pr, srcz, zap));
    rc |= !rc && check_refused(src, zap, "no scores written");
    rc |= !rc && check_copy(m, &mi, pr, zap);
    kvf_session_free(srcz);
    unlink(zap_path);
    for (size_t i = 0; !rc && i < sizeof specs / sizeof *specs; i++) rc |= check_copy(m, &mi, pr, specs[i]);
    for (size_t i = 0; !rc && i < sizeof staged / sizeof *staged; i++) rc |= check_copy(m, &mi, pr, staged[i]);
    printf("%s\n", rc ? "FAIL" : "ok: every fork equals a prefill of its own, every copy its session");
    kvf_session_free(src);
    kvf_session_free(src2);
    kvf_session_free(plain);
    kvf_session_free(done);
    kvf_prompt_free(pr);
    fixture_media_free(media);
    kvf_model_free(m);
    return rc;
}
