/* A session file: the first byte's bit 0 says whether the harness makes the
 * CRC-32 at the end right (so that mutations reach the reader's own checks
 * instead of stopping at the checksum), the rest is the file. It is loaded
 * (kvf_session_load_buffer) on the tiny Gemma 3 fixture (6 layers, a sliding
 * window); a session that loads has every cached tag and merge record read,
 * is saved again, and decodes a few steps. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static void exercise(struct kvf_session *s, const struct kvf_model_info *info) {
    fuzz_read_cache(s, info);
    const size_t n = kvf_session_save_size(s);
    void *again = n ? malloc(n) : NULL;
    if (again) kvf_session_save_buffer(s, again, n); /* the writer over what the reader let in (ASan watches) */
    free(again);
    for (int i = 0; i < 3 && kvf_session_n_past(s) < kvf_session_n_ctx(s); i++)
        if (kvf_session_decode(s, fuzz_argmax(kvf_session_logits(s), info->n_vocab)) != KVF_OK) break;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const struct kvf_model *m;
    static struct kvf_model_info info;
    if (!m) {
        m = fuzz_fixed_model("gemma3-f32.gguf", NULL, false);
        kvf_model_get_info(m, &info);
    }
    if (size < 1) return 0;
    const size_t n = size - 1;
    uint8_t *file = malloc(n ? n : 1);
    if (!file) return 0;
    memcpy(file, data + 1, n);
    if ((data[0] & 1) && n >= 4) {
        const uint32_t crc = (uint32_t)crc32_z(0, file, n - 4);
        memcpy(file + n - 4, &crc, 4);
    }
    struct kvf_session *s = NULL;
    if (kvf_session_load_buffer(m, file, n, 1, 0, &s) == KVF_OK) exercise(s, &info);
    kvf_session_free(s);
    free(file);
    return 0;
}
