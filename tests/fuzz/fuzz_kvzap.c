/* A KVzap scorer file (kv/kvzap.h: a GGUF of its own), read for the tiny
 * Gemma 3 fixture as `--kv kvzap:scorer=FILE` reads one; a scorer that
 * loads scores a row of every layer and kv head. */
#include "fuzz.h"

#include "kv/kvzap.h"
#include "model/model.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const struct kvf_model *m;
    if (!m) m = fuzz_fixed_model("gemma3-f32.gguf", NULL, false);
    const struct hparams *hp = &m->hp;
    struct kv_zap z;
    if (kv_zap_load_buffer(data, size, hp->n_layer, hp->n_embd, hp->n_head_kv, m->digest, &z) != KVF_OK) return 0;
    float *x = calloc((size_t)hp->n_embd, sizeof(float)), *out = calloc((size_t)hp->n_head_kv, sizeof(float));
    for (int l = 0; x && out && l < hp->n_layer; l++) kv_zap_score(&z, l, x, 1, out);
    free(x);
    free(out);
    kv_zap_free(&z);
    return 0;
}
