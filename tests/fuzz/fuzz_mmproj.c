/* A vision projector GGUF (mmproj) beside a fixed tiny decoder (Gemma 3's,
 * whose vocabulary has the image delimiters, when the file names the gemma3
 * projector; else LLaVA's): kvf_model_load, then fuzz_exercise_model (which
 * encodes a small picture when the projector is accepted). */
#include "fuzz.h"

#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char llava[FUZZ_PATH_MAX], gemma3[FUZZ_PATH_MAX];
    if (!llava[0]) fuzz_fixture_path("llava-f32.gguf", llava), fuzz_fixture_path("gemma3v-f32.gguf", gemma3);
    const char *base = memmem(data, size, "gemma3", 6) ? gemma3 : llava;
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
