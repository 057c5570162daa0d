/* A vision projector GGUF (mmproj) beside the fixed tiny LLaVA decoder:
 * kvf_model_load, then fuzz_exercise_model (which encodes a small picture
 * when the projector is accepted). */
#include "fuzz.h"

#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char base[FUZZ_PATH_MAX];
    if (!base[0]) fuzz_fixture_path("llava-f32.gguf", base);
    char path[64];
    const int fd = fuzz_memfd(data, size, path);
    if (fd < 0) return 0;
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 1, mp.mmproj = path;
    struct kvf_model *m = NULL;
    if (kvf_model_load(base, &mp, &m) == KVF_OK) fuzz_exercise_model(m);
    kvf_model_free(m);
    close(fd);
    return 0;
}
