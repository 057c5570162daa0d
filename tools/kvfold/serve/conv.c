/* kvfold serve's conversations kept on disk (--slot-save-path): a
 * conversation's session written to conv-HEX.kvfs after each turn, read
 * back when this server does not hold it (after a restart, or on another
 * replica sharing the folder), the oldest files going past
 * --slot-save-max. Called from the HTTP threads, outside the lock but for
 * the moments noted. */
#include "serve.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A conversation's file in --slot-save-path. */
static void conv_path(const struct server *srv, uint64_t conv, char *path, size_t cap) {
    snprintf(path, cap, "%s/conv-%016llx.kvfs", srv->a->serve.slot_save_path, (unsigned long long)conv);
}

/* A conversation this server does not hold, read back from its file (written
 * by this server before a restart, or by another replica) as a cached
 * session, so that the scheduler continues it as its own. A file that
 * cannot be used is said in the log and left: the request then starts anew. */
void conv_restore(struct server *srv, const struct serve_job *j) {
    pthread_mutex_lock(&srv->mu);
    const bool cached = sched_conv_cached(srv, j);
    pthread_mutex_unlock(&srv->mu);
    char path[4096];
    conv_path(srv, j->conv, path, sizeof path);
    struct stat sb;
    if (cached || lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return;
    const double t0 = now_ms();
    struct kvf_session *s = NULL;
    struct serve_error e = {0};
    int id = 0;
    bool ok = kvf_session_load(srv->m, path, srv->a->threads, srv->a->ctx, &s) == KVF_OK;
    if (!ok)
        snprintf(e.msg, sizeof e.msg, "%s", kvf_last_error());
    pthread_mutex_lock(&srv->mu);
    ok = ok && !sched_conv_cached(srv, j) && sched_slot_adopt(srv, s, j, &id, &e);
    if (ok)
        srv->spill_restores++, srv->slot_bytes_read += (uint64_t)sb.st_size, srv->slot_restore_ms += now_ms() - t0;
    pthread_mutex_unlock(&srv->mu);
    if (!ok) {
        kvf_session_free(s);
        if (e.msg[0])
            fprintf(stderr, "kvfold: serve: %s not restored: %s\n", path, e.msg);
    }
}

/* The conversations' files beyond --slot-save-max go, the oldest first. */
static void conv_trim(const struct server *srv) {
    DIR *d = srv->slot_max ? opendir(srv->a->serve.slot_save_path) : NULL;
    if (!d)
        return;
    struct conv_file { char name[64]; struct timespec mtime; size_t size; } *files = NULL;
    size_t n = 0, cap = 0, total = 0;
    for (struct dirent *de; (de = readdir(d));) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", srv->a->serve.slot_save_path, de->d_name);
        if (strncmp(de->d_name, "conv-", 5) || strlen(de->d_name) >= sizeof files->name || lstat(path, &sb) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            struct conv_file *f = realloc(files, sizeof *f * (cap = cap ? 2 * cap : 64));
            if (!f)
                break;
            files = f;
        }
        snprintf(files[n].name, sizeof files[n].name, "%s", de->d_name);
        files[n].mtime = sb.st_mtim, files[n].size = (size_t)sb.st_size;
        total += files[n++].size;
    }
    closedir(d);
    while (total > srv->slot_max && n > 0) {
        size_t old = 0;
        for (size_t i = 1; i < n; i++)
            if (files[i].mtime.tv_sec < files[old].mtime.tv_sec ||
                (files[i].mtime.tv_sec == files[old].mtime.tv_sec && files[i].mtime.tv_nsec < files[old].mtime.tv_nsec))
                old = i;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", srv->a->serve.slot_save_path, files[old].name);
        remove(path);
        total -= files[old].size;
        files[old] = files[--n];
    }
    free(files);
}

/* The session a conversation's turn left in the cache, written to its file
 * once the answer is out (a copy: the scheduler goes on meanwhile). */
void conv_spill(struct server *srv, struct serve_job *j) {
    pthread_mutex_lock(&srv->mu);
    struct kvf_session *s = j->spill;
    j->spill = NULL;
    pthread_mutex_unlock(&srv->mu);
    if (!s)
        return;
    char path[4096];
    conv_path(srv, j->conv, path, sizeof path);
    const size_t bytes = kvf_session_save_size(s);
    if (kvf_session_save(s, path) != KVF_OK) {
        fprintf(stderr, "kvfold: serve: %s not written: %s\n", path, kvf_last_error());
    } else {
        pthread_mutex_lock(&srv->mu);
        srv->spills++, srv->slot_bytes_written += bytes;
        pthread_mutex_unlock(&srv->mu);
        conv_trim(srv);
    }
    kvf_session_free(s);
}
