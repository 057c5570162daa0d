/* Which decoding kernel each weight type runs on, chosen for the CPU at
 * hand. A decoding step streams every weight matrix once, so its speed is
 * the rate at which a kernel turns weight bytes into products, and which
 * kernel is fastest is a property of the CPU, not of the instructions it
 * reports: on AMD Zen 4 (AVX-512 executed in two 256-bit halves) the VNNI
 * kernels on interleaved weights decoded the 1.5B at 26 tok/s where the
 * AVX-512 rows kernels on the file's layout gave 30 and the AVX2 ones 29,
 * the reverse of the Intel Xeon's order; and the software prefetch that
 * gained the Xeon a third of its decoding cost Zen 4 some of it. So each
 * type's candidates, each kernel with its prefetch and without, are timed
 * at load on the model's own matrices, on all the cores, and the fastest
 * is kept, whatever thread count sessions use (results must not depend on
 * it).
 *
 * The choice is written to kernels.tsv in the user's cache directory
 * ($KVFOLD_CACHE_DIR, else $XDG_CACHE_HOME/kvfold, else ~/.cache/kvfold),
 * keyed by CPU, build, type, row length and the candidates, and read back
 * by later loads: they cost nothing, and every process on the machine makes
 * the same choice (the candidates' results differ in the last bits, so two
 * processes that chose differently would not give the same logits). The
 * file is read and appended under an flock, so that processes started
 * together measure once; where there is no usable file the fixed rule below
 * holds rather than a measurement of this process alone.
 * KVFOLD_KERNELS, a comma list: `measure` measures again (and appends the
 * new choice: the last line for a key wins); `scalar` makes the scalar rows
 * kernel a candidate too, so that the measuring and the cache can be
 * checked on a CPU with one SIMD candidate (a scalar kernel never wins
 * beside a SIMD one); `fixed` skips all of it: interleaved where the CPU
 * has the kernel, else the rows kernel of the level in use (the rule
 * before this file). */
#include "model/model.h"
#include "model/weights.h"

#include "core/ops.h"
#include "core/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The sample a candidate is timed on: the type's matrices in the order a
 * step reads them, until twice the last-level cache (so that it streams
 * from memory, as decoding does) within these bounds. */
#define SAMPLE_MIN (64u << 20)
#define SAMPLE_MAX (256u << 20)
#define ROUNDS 3

/* Decoding's matrices, in the order a step reads them (the output head
 * last); the embedding is read a row at a time and never multiplied, unless
 * tied, when it is the output head. */
static int decode_weights(struct kvf_model *m, struct weight **out, int cap) {
    int n = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        struct layer_weights *L = &m->layers[l];
        struct weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof *ws && n < cap; i++)
            if (ws[i]->data) out[n++] = ws[i];
    }
    if (n < cap) out[n++] = m->output.data == m->tok_embd.data ? &m->tok_embd : &m->output;
    return n;
}

/* Decoding's products (and the K types' prompt tiles, split from the same
 * form) run on matrices interleaved by 16 rows where that was chosen: each
 * is repacked into memory the model owns, and the pages it was read from
 * are handed back to the OS as it goes, so that a large matrix (Gemma 3's
 * 178 MB embedding) is not held twice at its end. That needs w->data in a
 * read-only file mapping, which is where both loaders' tensors lie
 * (gguf_open, st_open): dropped pages would be read again from the file,
 * never lost. Without the memory for a copy, the matrix stays as it is. */
#define INTERLEAVE_ROWS 4096
static bool can_interleave(const struct weight *w) {
    return w->data && !w->ilv && w->rows % QUANT_ILV_ROWS == 0 && quant_ilv_has(w->type) &&
           quant_ilv_act_bytes(w->type, w->cols) != 0;
}

static void *interleaved_copy(const struct weight *w, bool release) {
    const size_t bytes = (size_t)w->rows * w->row_bytes;
    uint8_t *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) return NULL;
    for (int64_t r = 0; r < w->rows; r += INTERLEAVE_ROWS) {
        const int64_t nr = KVF_MIN(INTERLEAVE_ROWS, w->rows - r);
        const size_t off = (size_t)r * w->row_bytes, len = (size_t)nr * w->row_bytes;
        /* The kernel zeroes the fresh pages: on every thread, as packing
         * runs (one thread took as long as the packing). */
        #pragma omp parallel
        {
            const size_t part = (len / (size_t)omp_get_num_threads() + 4095) / 4096 * 4096;
            const size_t a = KVF_MIN(len, (size_t)omp_get_thread_num() * part);
            sys_prefault(p + off + a, KVF_MIN(part, len - a));
        }
        quant_ilv_pack(w->type, w->cols, (const uint8_t *)w->data + off, nr, p + off);
        if (release) sys_release_pages((const uint8_t *)w->data + off, len);
    }
    if (release) sys_release_pages(w->data, bytes);
    return p;
}

static enum kvf_status weight_interleave(struct kvf_model *m, struct weight *w) {
    if (!can_interleave(w)) return KVF_OK;
    void *p = interleaved_copy(w, true);
    if (!p) return KVF_OK;
    const enum kvf_status st = model_keep(m, p);
    if (st == KVF_OK) {
        w->data = p;
        w->ilv = true;
    }
    return st;
}

/* A candidate: interleaved at the level in use, or the rows kernel of a
 * SIMD level; each SIMD one with its software prefetch and without
 * (quant_prefetch_set): which keeps more reads in flight is the CPU's (the
 * Xeon's decoding gained a third from it, Zen 4's lost 2-7%). */
struct cand {
    bool ilv, no_prefetch;
    enum simd_level level;
    double gbps; /* weight bytes a second over the sample; 0: not timed */
};

#define CAND_MAX 8

static const char *cand_name(const struct cand *c, char *buf, size_t n) {
    snprintf(buf, n, "%s-%s%s", c->ilv ? "ilv" : "rows", simd_name(c->level), c->no_prefetch ? "-nopf" : "");
    return buf;
}

/* tiles: some matrix of the type is in whole 16-row tiles, as
 * interleaving needs. */
static int cand_list(enum dtype type, bool tiles, bool repack, bool scalar, struct cand *out) {
    int n = 0;
    if (repack && tiles && quant_ilv_has(type))
        out[n++] = (struct cand){.ilv = true, .level = simd_get()};
    for (int lv = simd_get(); lv > SIMD_SCALAR; lv--)
        if (quant_rows_level_has(type, (enum simd_level)lv))
            out[n++] = (struct cand){.ilv = false, .level = (enum simd_level)lv};
    for (int k = 0, simd = n; k < simd; k++) {
        out[n] = out[k];
        out[n++].no_prefetch = true;
    }
    if (n == 0 || scalar) {
        const enum simd_level level = n == 0 ? simd_get() : SIMD_SCALAR;
        out[n++] = (struct cand){.ilv = false, .level = level};
    }
    return n;
}

/* Reads every line of buf, on all the threads, so that what was cached
 * before is gone. */
static void cache_evict(const uint8_t *buf, size_t len, int n_threads) {
    uint64_t sum = 0;
    #pragma omp parallel for num_threads(n_threads) reduction(+ : sum)
    for (size_t i = 0; i < len; i += 64) sum += buf[i];
    __asm__ volatile("" : : "r"(sum));
}

/* Each candidate's GB/s over the sample (`bytes` of weights): its fastest
 * of ROUNDS passes, the candidates in turn so that a slow moment of the
 * machine falls on all of them, after one untimed pass each (page faults,
 * caches). A sample smaller than `stream` bytes (twice the last-level
 * cache, within SAMPLE_MIN..SAMPLE_MAX) would be read back from the cache
 * on the second pass, where a step reads it from memory: each pass then
 * starts after reading that much of other memory. Timed in-cache, SmolLM2's 30 MB Q8_0 output head
 * chose the AVX2 rows kernel, which decodes it at 13 GB/s on one thread
 * of AMD Zen 4, where the interleaved one reaches 17. */
static enum kvf_status time_candidates(struct weight *const *sample, int ns, struct cand *c, int nc, int n_threads,
                                       size_t bytes, size_t stream) {
    struct weight *copies = calloc((size_t)ns * (size_t)nc, sizeof *copies);
    int64_t cols = 0, rows = 0;
    for (int i = 0; i < ns; i++) cols = KVF_MAX(cols, sample[i]->cols), rows = KVF_MAX(rows, sample[i]->rows);
    float *x = malloc((size_t)cols * sizeof *x), *y = malloc((size_t)rows * sizeof *y);
    void *scratch = malloc(ops_matmul_scratch_bytes(cols, 1, n_threads));
    /* Without the memory for it, timed as before, from what the cache holds. */
    const size_t evict = bytes < stream ? stream : 0;
    uint8_t *other = evict ? malloc(evict) : NULL;
    enum kvf_status st = copies && x && y && scratch ? KVF_OK : err_set(KVF_ERR_NOMEM, "out of memory");
    if (other) memset(other, 0x5a, evict); /* written: untouched pages would all read the one zero page */
    for (int64_t j = 0; j < cols && st == KVF_OK; j++) x[j] = (float)((j * 7919) % 257) / 128.0f - 1.0f;
    for (int k = 0; k < nc && st == KVF_OK; k++)
        for (int i = 0; i < ns && st == KVF_OK; i++) {
            struct weight *w = &copies[k * ns + i];
            *w = *sample[i];
            w->rows_level = c[k].ilv ? 0 : (uint8_t)(c[k].level + 1);
            if (c[k].ilv && !(w->data = interleaved_copy(sample[i], false)))
                st = err_set(KVF_ERR_NOMEM, "out of memory");
            w->ilv = c[k].ilv;
            w->no_prefetch = c[k].no_prefetch;
        }
    double best[CAND_MAX];
    for (int k = 0; k < nc; k++) best[k] = 1e30;
    for (int round = 0; round <= ROUNDS && st == KVF_OK; round++)
        for (int k = 0; k < nc; k++) {
            if (other) cache_evict(other, evict, n_threads);
            const double t0 = sys_time_ms();
            for (int i = 0; i < ns; i++) ops_matmul(&copies[k * ns + i], x, 1, y, scratch, n_threads);
            const double dt = sys_time_ms() - t0;
            if (round > 0) best[k] = KVF_MIN(best[k], dt);
        }
    for (int k = 0; k < nc && st == KVF_OK; k++) c[k].gbps = (double)bytes / (best[k] * 1e6);
    for (int k = 0; copies && k < nc; k++)
        for (int i = 0; c[k].ilv && i < ns; i++) free((void *)copies[k * ns + i].data);
    free(copies), free(x), free(y), free(scratch), free(other);
    return st;
}

/* ---- the cache file ---------------------------------------------------- */

/* At most this much of kernels.tsv is read: a line is under 300 bytes, so
 * it holds thousands of choices; a larger file is not this program's. */
#define CACHE_MAX (1 << 20)

static char *cache_path(void) {
    const char *dir = getenv("KVFOLD_CACHE_DIR");
    char buf[4096];
    if (dir && *dir) {
        snprintf(buf, sizeof buf, "%s", dir);
    } else if ((dir = getenv("XDG_CACHE_HOME")) && *dir) {
        snprintf(buf, sizeof buf, "%s/kvfold", dir);
    } else if ((dir = getenv("HOME")) && *dir) {
        snprintf(buf, sizeof buf, "%s/.cache", dir);
        mkdir(buf, 0755);
        snprintf(buf, sizeof buf, "%s/.cache/kvfold", dir);
    } else {
        return NULL;
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return NULL;
    return sys_path_join(buf, "kernels.tsv");
}

/* The cache, opened for reading and appending under an exclusive lock, or
 * -1: it must be a regular file of this user (not a link, a FIFO or a
 * device, which could hang or redirect the writes) within CACHE_MAX. */
static int cache_open(void) {
    char *path = cache_path();
    if (!path) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    free(path);
    struct stat sb;
    if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid())) {
        close(fd);
        return -1;
    }
    int rc = -1;
    while (fd >= 0 && (rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {}
    if (fd >= 0 && rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The file's bytes (at most CACHE_MAX, NUL-terminated; *n without it), or
 * NULL. */
static char *cache_read(int fd, size_t *n) {
    char *buf = malloc(CACHE_MAX + 1);
    *n = 0;
    if (!buf || lseek(fd, 0, SEEK_SET) != 0) {
        free(buf);
        return NULL;
    }
    for (ssize_t got; *n < CACHE_MAX && (got = read(fd, buf + *n, CACHE_MAX - *n)) > 0;) *n += (size_t)got;
    buf[*n] = '\0';
    return buf;
}

/* One line a choice: cpu, build, type, row length, the candidates (the
 * choice is only among them: a --no-repack run's must not stand for a
 * default one's), then the chosen candidate's name and every candidate's
 * "name=GB/s". */
static void cache_key(char *key, size_t n, enum dtype type, int64_t cols, const struct cand *c, int nc) {
    char cpu[160], nm[32];
    cpu_identity(cpu, sizeof cpu);
    size_t off = (size_t)snprintf(key, n, "%s\t%s\t%s\t%lld\t", cpu, kvf_build_info(), dtype_get(type)->name,
                                  (long long)cols);
    for (int k = 0; k < nc && off < n; k++)
        off += (size_t)snprintf(key + off, n - off, "%s%s", k ? "," : "", cand_name(&c[k], nm, sizeof nm));
    if (off < n) snprintf(key + off, n - off, "\t");
}

/* The candidate named by the last line for key in the file's bytes, or
 * -1. The bytes are untrusted: lines are split on '\n' by length (a NUL
 * inside one ends nothing), an unknown name or a line cut short is a miss. */
static int cache_find(const char *buf, size_t len, const char *key, const struct cand *c, int nc) {
    const size_t kl = strlen(key);
    int found = -1;
    for (const char *line = buf, *end = buf + len; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl) break; /* a last line without its end was cut short */
        if ((size_t)(nl - line) > kl && memcmp(line, key, kl) == 0) {
            const char *name = line + kl;
            size_t n = 0;
            while (name + n < nl && name[n] != '\t') n++;
            char nm[32];
            for (int k = 0; k < nc; k++)
                if (strlen(cand_name(&c[k], nm, sizeof nm)) == n && memcmp(name, nm, n) == 0) found = k;
        }
        line = nl + 1;
    }
    return found;
}

static void cache_add(int fd, const char *buf, size_t len, const char *key, const struct cand *c, int nc,
                      int chosen) {
    char line[1024], nm[32];
    /* a line after one cut short starts on its own */
    size_t off = (size_t)snprintf(line, sizeof line, "%s%s%s", len && buf[len - 1] != '\n' ? "\n" : "", key,
                                  cand_name(&c[chosen], nm, sizeof nm));
    for (int k = 0; k < nc && off < sizeof line; k++)
        off += (size_t)snprintf(line + off, sizeof line - off, "\t%s=%.2f", cand_name(&c[k], nm, sizeof nm),
                                c[k].gbps);
    if (off + 1 >= sizeof line || lseek(fd, 0, SEEK_END) < 0) return;
    line[off++] = '\n';
    for (size_t done = 0; done < off;) {
        const ssize_t w = write(fd, line + done, off - done);
        if (w <= 0) return;
        done += (size_t)w;
    }
}

/* ---- the choice -------------------------------------------------------- */

/* Whether the comma list `mode` (KVFOLD_KERNELS, may be NULL) has `word`. */
static bool mode_has(const char *mode, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = mode; p && *p; p += strcspn(p, ","), p += *p == ',')
        if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

static void describe(struct kvf_model *m, enum dtype type, const struct cand *c, int nc, int chosen,
                     const char *how) {
    size_t off = strlen(m->kernels);
    char nm[32];
    if (off >= sizeof m->kernels - 1) return;
    off += (size_t)snprintf(m->kernels + off, sizeof m->kernels - off, "%s%s: %s (%s", off ? "; " : "",
                            dtype_get(type)->name, cand_name(&c[chosen], nm, sizeof nm), how);
    for (int k = 0; k < nc && off < sizeof m->kernels; k++)
        if (c[k].gbps > 0)
            off += (size_t)snprintf(m->kernels + off, sizeof m->kernels - off, "%s%s %.1f GB/s",
                                    k ? ", " : ": ", cand_name(&c[k], nm, sizeof nm), c[k].gbps);
    if (off < sizeof m->kernels) snprintf(m->kernels + off, sizeof m->kernels - off, ")");
}

/* The candidate to use for `type`: the cached one, else measured (and
 * cached), else the first: where there is nothing to choose, with
 * KVFOLD_KERNELS=fixed, without a cache file (each process would measure
 * alone, and could choose otherwise than the last), or without the memory
 * to measure. Measured on the type's matrices that every candidate can run
 * (whole 16-row tiles where interleaving is one), each cut to what the
 * sample still wants, at all the cores: the choice is the machine's, the
 * same for every thread count, so that results do not depend on -t. */
static void choose(struct kvf_model *m, struct weight **ws, int nw, enum dtype type, struct cand *c, int nc,
                   const char *mode, int *chosen) {
    const bool fixed = mode_has(mode, "fixed"), remeasure = mode_has(mode, "measure");
    *chosen = 0;
    if (nc == 1 || fixed) {
        describe(m, type, c, nc, 0, nc == 1 ? "the only one" : "KVFOLD_KERNELS=fixed");
        return;
    }
    bool ilv = false;
    for (int k = 0; k < nc; k++) ilv = ilv || c[k].ilv;
    int64_t cols = 0;
    for (int i = 0; i < nw; i++)
        if (ws[i]->type == type) cols = KVF_MAX(cols, ws[i]->cols);
    char key[512];
    cache_key(key, sizeof key, type, cols, c, nc);
    const int fd = cache_open();
    size_t len = 0;
    char *buf = fd >= 0 ? cache_read(fd, &len) : NULL;
    const int hit = buf && !remeasure ? cache_find(buf, len, key, c, nc) : -1;
    if (hit >= 0 || !buf) {
        *chosen = KVF_MAX(hit, 0);
        describe(m, type, c, nc, *chosen, hit >= 0 ? "chosen before on this CPU" : "no cache file to keep a choice in");
        free(buf);
        if (fd >= 0) close(fd);
        return;
    }
    const long cache_l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const size_t want = KVF_MIN((size_t)SAMPLE_MAX, KVF_MAX((size_t)SAMPLE_MIN, 2 * (size_t)KVF_MAX(cache_l3, 0L)));
    struct weight sample[512];
    struct weight *views[512];
    int ns = 0;
    size_t bytes = 0;
    for (int i = 0; i < nw && ns < 512 && bytes < want; i++) {
        const struct weight *w = ws[i];
        if (w->type != type || w->ilv || (ilv && w->rows % QUANT_ILV_ROWS != 0)) continue;
        sample[ns] = *w;
        const int64_t rows = (int64_t)((want - bytes) / w->row_bytes) / QUANT_ILV_ROWS * QUANT_ILV_ROWS;
        sample[ns].rows = KVF_MIN(w->rows, KVF_MAX(QUANT_ILV_ROWS, rows));
        bytes += (size_t)sample[ns].rows * w->row_bytes;
        views[ns] = &sample[ns];
        ns++;
    }
    const int n_threads = omp_get_num_procs();
    if (ns == 0 || time_candidates(views, ns, c, nc, n_threads, bytes, want) != KVF_OK) {
        describe(m, type, c, nc, 0, ns == 0 ? "nothing to time" : "no memory to time them");
    } else {
        for (int k = 1; k < nc; k++)
            if (c[k].gbps > c[*chosen].gbps) *chosen = k;
        char how[64];
        snprintf(how, sizeof how, "measured at load on %.0f MiB, %d thread%s", (double)bytes / (1 << 20), n_threads,
                 n_threads == 1 ? "" : "s");
        describe(m, type, c, nc, *chosen, how);
        cache_add(fd, buf, len, key, c, nc, *chosen);
    }
    free(buf);
    close(fd);
}

enum kvf_status model_kernels_choose(struct kvf_model *m, bool repack) {
    m->kernels[0] = '\0';
    const int cap = 7 * m->hp.n_layer + 1;
    struct weight **ws = malloc((size_t)cap * sizeof *ws);
    if (!ws) return err_set(KVF_ERR_NOMEM, "out of memory");
    const bool tied = m->output.data == m->tok_embd.data;
    const int nw = decode_weights(m, ws, cap);
    m->decode_bytes = 0;
    for (int i = 0; i < nw; i++) m->decode_bytes += (int64_t)(ws[i]->rows * (int64_t)ws[i]->row_bytes);
    enum kvf_status st = KVF_OK;
    bool done[DT_COUNT] = {false};
    const char *mode = getenv("KVFOLD_KERNELS");
    for (int i = 0; i < nw && st == KVF_OK; i++) {
        const enum dtype type = ws[i]->type;
        if (done[type]) continue;
        done[type] = true;
        struct cand c[CAND_MAX];
        /* interleaved where any matrix of the type is in whole tiles; the others stay as they are */
        bool tiles = false;
        for (int j = 0; j < nw; j++) tiles = tiles || (ws[j]->type == type && ws[j]->rows % QUANT_ILV_ROWS == 0);
        const int nc = cand_list(type, tiles, repack, mode_has(mode, "scalar"), c);
        int k = 0;
        choose(m, ws, nw, type, c, nc, mode, &k);
        for (int j = 0; j < nw && st == KVF_OK; j++) {
            if (ws[j]->type != type) continue;
            if (c[k].ilv) st = weight_interleave(m, ws[j]);
            if (!ws[j]->ilv) ws[j]->rows_level = (uint8_t)((c[k].ilv ? simd_get() : c[k].level) + 1);
            ws[j]->no_prefetch = c[k].no_prefetch;
        }
    }
    if (tied) m->output = m->tok_embd;
    free(ws);
    return st;
}
