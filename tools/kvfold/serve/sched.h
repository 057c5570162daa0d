/* What the scheduler's files share (serve.h has what the HTTP side calls):
 *   sched.c   the jobs' lives, the decode step, the thread;
 *   admit.c   the queue's head prepared, admitted and its prompt filled in;
 *   budget.c  the KV memory rule: reservations and their accounting;
 *   idle.c    cached sessions between turns, and the slot files;
 *   output.c  where stop strings cut a reply, what of it can be sent.
 * All of it runs on the scheduler thread, but for the cached sessions'
 * functions, which the slot requests call from the HTTP threads too; the
 * ones that change the server's lists and reservations (job_end, the idle_*
 * functions, budget_account) need the server's lock. */
#ifndef KVF_SERVE_SCHED_H
#define KVF_SERVE_SCHED_H

#include "serve.h"

/* ------------------------------------------------------------- sched.c -- */

/* The session's statistics kept for /slots and the answer, its
 * reservation given back (the session cached for a next turn when the
 * conversation ended well), the job done (finish NULL: failed; job_fail
 * follows). Under the lock. */
void job_end(struct server *srv, struct serve_job *j, const char *finish);
/* A sampled token: the end, or its text appended. False when the job ended. */
bool job_take_token(struct server *srv, struct serve_job *j, int32_t tok, char **piece, int32_t *cap);
/* What /slots shows of the job's session, copied under the lock. */
void job_progress(const struct server *srv, struct serve_job *j);
void queue_pop(struct server *srv);

/* ------------------------------------------------------------- admit.c -- */

/* The queue's head, prepared and given its session when its reservation
 * fits and no other prompt is going in; true when the queue moved. */
bool sched_admit(struct server *srv);
/* A part of the filling job's prompt; once it is all in, the job runs.
 * True when work was done. */
bool sched_fill(struct server *srv, char **piece, int32_t *cap);

/* ------------------------------------------------------------ budget.c -- */

/* The entries a session's cache holds, over all layers and kv heads. */
int budget_entries(const struct server *srv, const struct kvf_session *s);
/* A compressed job's reservation: its fullest head's bound for the rest
 * of its context, no more than it reserved. */
size_t budget_after_compress(const struct server *srv, const struct serve_job *j);
/* The KV bytes the sessions hold now and at most since the last call
 * (srv->in_use, srv->peak_in_use), each session checked against its
 * reservation. Under the lock. */
void budget_account(struct server *srv);
/* srv->pos_bytes and srv->head_bytes: the KV bytes of one position, and
 * those of a session's cache whatever its length, for any policy. */
int budget_measure(struct server *srv);

/* -------------------------------------------------------------- idle.c -- */

/* Cached session i goes (its reservation with it). Under the lock. */
void idle_drop(struct server *srv, int i);
/* The job's session and keys become a cached session. Under the lock. */
void idle_push(struct server *srv, struct serve_job *j);
/* The cached session the job's prompt goes on from, or -1; *k: the
 * positions shared. */
int idle_match(const struct server *srv, const struct serve_job *j, int *k);
/* j->spill: a copy of cached session c for --slot-save-path. */
void idle_spill(const struct serve_idle *c, struct serve_job *j);

/* ------------------------------------------------------------ output.c -- */

/* The earliest match of a stop string in the job's text that ends after
 * byte `from`, or -1. */
long output_stop(const struct serve_job *j, size_t from);
/* The bytes of the job's text that can be sent now. */
size_t output_ready(const struct serve_job *j);

#endif
