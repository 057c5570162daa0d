/* A GGUF model file: kvf_model_load, then fuzz_exercise_model (chat
 * template, tokenizer, a forward pass of a few tokens and one decode step). */
#include "fuzz.h"

#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    const int fd = fuzz_memfd(data, size, path);
    if (fd < 0) return 0;
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 1;
    struct kvf_model *m = NULL;
    if (kvf_model_load(path, &mp, &m) == KVF_OK) fuzz_exercise_model(m);
    kvf_model_free(m);
    close(fd);
    return 0;
}
