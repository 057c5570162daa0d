/* Helpers of the fuzz harnesses (fuzz.h). */
#include "fuzz.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Model loads take the fixed kernel rule (model/kernels.c), before main
 * (libFuzzer's or replay.c's): a kernel chosen by timing would let the same
 * input take another path, and measuring would write the user's cache. */
__attribute__((constructor)) static void fuzz_fixed_kernels(void) { setenv("KVFOLD_KERNELS", "fixed", 0); }

void fuzz_fixture_path(const char *name, char *path) {
    const char *dir = getenv("KVF_FUZZ_FIXTURES");
    snprintf(path, FUZZ_PATH_MAX, "%s/%s", dir && *dir ? dir : KVF_FUZZ_FIXTURES, name);
}

const struct kvf_model *fuzz_fixed_model(const char *name, const char *mmproj, bool vocab_only) {
    char path[FUZZ_PATH_MAX], proj[FUZZ_PATH_MAX];
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 1, mp.vocab_only = vocab_only;
    fuzz_fixture_path(name, path);
    if (mmproj) fuzz_fixture_path(mmproj, proj), mp.mmproj = proj;
    struct kvf_model *m = NULL;
    if (kvf_model_load(path, &mp, &m) != KVF_OK) {
        fprintf(stderr, "fuzz: cannot load the fixture '%s' (%s); run make_fixture into its folder\n", path,
                kvf_last_error());
        abort();
    }
    return m;
}

int fuzz_memfd(const uint8_t *data, size_t size, char path[64]) {
    const int fd = memfd_create("kvf-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    for (size_t done = 0; done < size;) {
        const ssize_t w = write(fd, data + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

static char scratch[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag;
    return ftw->level > 0 ? remove(path) : 0; /* the folder itself stays */
}

static void scratch_remove(void) {
    nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    rmdir(scratch);
}

const char *fuzz_scratch_dir(void) {
    if (!scratch[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%.40s/kvf-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(scratch)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(scratch_remove);
    }
    nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return scratch;
}

bool fuzz_name_ok(const uint8_t *s, size_t n) {
    if (n == 0 || n > FUZZ_NAME_MAX || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') && !(s[i] >= '0' && s[i] <= '9') &&
            !(s[i] && strchr("._-", s[i])))
            return false;
    return true;
}

bool fuzz_write_file(const char *dir, const char *name, const void *data, size_t size) {
    char path[FUZZ_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

/* The sum goes to a volatile so that the reads are not optimised away. */
static volatile unsigned cache_sum;

void fuzz_read_cache(const struct kvf_session *s, const struct kvf_model_info *info) {
    unsigned sum = 0;
    for (int l = 0; l < info->n_layer; l++) {
        double ratio, gini;
        sum += kvf_session_kv_layer_budget(s, l, &ratio, &gini);
        for (int h = 0; h < info->n_head_kv; h++) {
            int n = 0;
            const struct kvf_tag *tags = kvf_session_kv_tags(s, l, h, &n);
            for (int i = 0; tags && i < n; i++) sum += (unsigned)tags[i].pos;
            const struct kvf_kv_merge *merges = kvf_session_kv_merges(s, l, h, &n);
            for (int i = 0; merges && i < n; i++) sum += (unsigned)(merges[i].from ^ merges[i].into);
        }
    }
    cache_sum += sum;
}

int32_t fuzz_argmax(const float *logits, int n) {
    int32_t best = 0;
    if (!logits) return best; /* a session without logits (a loaded one may have none) decodes token 0 */
    for (int32_t t = 1; t < n; t++)
        if (logits[t] > logits[best]) best = t;
    return best;
}

/* A small picture with some structure (a gradient and a square), made once. */
static const struct kvf_image *picture(void) {
    static struct kvf_image *img;
    if (!img) {
        enum { W = 12, H = 9 };
        uint8_t rgb[W * H * 3];
        for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)(i * 7 + (i / (W * 3) > 3 ? 100 : 0));
        if (kvf_image_from_rgb(W, H, rgb, &img) != KVF_OK) abort();
    }
    return img;
}

static void exercise_text(const struct kvf_model *m, const struct kvf_model_info *info) {
    static const struct kvf_chat_message chat[] = {{"system", "Be brief."}, {"user", "Hello there"}};
    char buf[512];
    int32_t n_chars;
    kvf_chat_apply(m, NULL, chat, 2, true, buf, sizeof buf, &n_chars);
    int32_t ids[16], n = 0;
    if (kvf_tokenize(m, "The cat sat on", 14, ids, 16, true, false, &n) != KVF_OK || n == 0) return;
    for (int i = 0; i < n; i++) kvf_token_to_piece(m, ids[i], buf, sizeof buf, true, &n_chars);
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = 32, sp.n_batch = 4, sp.n_threads = 1;
    struct kvf_session *s = NULL;
    if (kvf_session_init(m, &sp, &s) == KVF_OK && kvf_session_prefill(s, ids, n, NULL) == KVF_OK) {
        kvf_session_decode(s, fuzz_argmax(kvf_session_logits(s), info->n_vocab));
    }
    kvf_session_free(s);
}

void fuzz_exercise_model(const struct kvf_model *m) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    exercise_text(m, &info);
    if (info.has_vision) {
        struct kvf_media *md = NULL;
        kvf_media_encode_image(m, picture(), KVF_MOD_IMAGE, 1, &md);
        kvf_media_free(md);
    }
}
