/* kvfold serve's KV memory rule (docs/ARCHITECTURE.md §10): a request is
 * admitted only when the bytes reserved for the running and cached sessions
 * plus its own reservation fit --kv-memory, and a session's KV bytes never
 * exceed its reservation, so their sum never exceeds the budget. Here: what
 * a position costs, what a request reserves before and after compression,
 * and the accounting that checks the rule after every piece of work. */
#include "sched.h"

size_t sched_reserve_bytes(const struct server *srv, int n) {
    /* A head's storage grows by 1/8 of itself, at least to 16 entries
     * (kvf_session_kv_bytes counts what is allocated): with at most n
     * positions it never holds storage for more than n + n/8 of them. */
    return srv->pos_bytes * (size_t)MAX(n + n / 8, 16) + srv->head_bytes;
}

/* The entries a session's cache holds, over all layers and kv heads (for
 * /slots; the session is the scheduler's). */
int budget_entries(const struct server *srv, const struct kvf_session *s) {
    int sum = 0;
    for (int l = 0; l < srv->info.n_layer; l++)
        for (int g = 0; g < srv->info.n_head_kv; g++) {
            int n = 0;
            kvf_session_kv_tags(s, l, g, &n);
            sum += n;
        }
    return sum;
}

/* After compression every head's storage is what it holds
 * (kvf_session_compress sizes it so), at most `most` entries; from then on
 * a head only grows by the tokens still to come, to storage for at most
 * n + n/8 of its n entries (sched_reserve_bytes). So no head exceeds the
 * fullest head's bound, and the session stays within that many positions'
 * reservation: what it holds now is inside the bound, not added to it. */
size_t budget_after_compress(const struct server *srv, const struct serve_job *j) {
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

/* A session's part of budget_account: its bytes now and its peak since the
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
void budget_account(struct server *srv) {
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

/* The KV bytes of one position, measured on a session that gathers every
 * statistic a policy can keep per entry (kv_gather), so no policy's costs
 * more, less what its cache holds whatever its length (q4_0s keys'
 * smoothing: kvf_kv_position_bytes). */
int budget_measure(struct server *srv) {
    size_t rows; /* the rows and tags alone; the session below adds the statistics */
    enum kvf_status st = kvf_kv_position_bytes(srv->m, srv->a->type_k_id, srv->a->type_v_id, &rows, &srv->head_bytes);
    if (st != KVF_OK)
        return fail_option(st, "serve: cannot create a session");
    struct kvf_session_params sp = session_params(srv->a, 2);
    sp.kv_spec = NULL;
    sp.kv_gather = 1;
    struct kvf_session *s;
    int rc = open_session(srv->m, &sp, "serve: cannot create a session", &s);
    if (rc)
        return rc;
    const int32_t tok = srv->info.bos >= 0 ? srv->info.bos : 0;
    st = kvf_session_prefill(s, &tok, 1, NULL);
    srv->pos_bytes = kvf_session_kv_full_bytes(s) - srv->head_bytes;
    kvf_session_free(s);
    return st == KVF_OK ? 0 : fail(st, "serve: a first prefill");
}
