/* A Hugging Face model directory: the input is split into files (see
 * fuzz_split.h), written to a scratch folder, loaded with kvf_model_load,
 * then fuzz_exercise_model. */
#include "fuzz.h"
#include "fuzz_split.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_scratch_dir();
    if (!fuzz_split_write(data, size, dir)) return 0;
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 1;
    struct kvf_model *m = NULL;
    if (kvf_model_load(dir, &mp, &m) == KVF_OK) fuzz_exercise_model(m);
    kvf_model_free(m);
    return 0;
}
