/* Loads an image and runs LLaVA-1.5's preprocessing with CLIP's mean and
 * std (or, with --gemma3, Gemma 3's: stretched, bilinear, mean = std =
 * 0.5), writing the result as float32 [3][SIZE][SIZE] (CHW, little-endian)
 * for tests/ref/image_ref.py to compare with Pillow and
 * tests/ref/hf_gemma3_check.py with transformers.
 *
 * usage: dump_preproc [--gemma3] IMAGE SIZE OUT.bin */
#include "io/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const bool gemma3 = argc == 5 && !strcmp(argv[1], "--gemma3");
    if (gemma3) argc--, argv++;
    if (argc != 4) {
        fprintf(stderr, "usage: dump_preproc [--gemma3] IMAGE SIZE OUT.bin\n");
        return 2;
    }
    char *end;
    const long size = strtol(argv[2], &end, 10);
    if (*end || size <= 0 || size > 4096) {
        fprintf(stderr, "dump_preproc: bad SIZE %s\n", argv[2]);
        return 2;
    }
    static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    static const float half[3] = {0.5f, 0.5f, 0.5f};
    const float *mean = gemma3 ? half : clip_mean, *std = gemma3 ? half : clip_std;
    struct kvf_image *img;
    enum kvf_status st = kvf_image_load(argv[1], 0, &img);
    if (st) {
        fprintf(stderr, "dump_preproc: %s\n", kvf_last_error());
        return 1;
    }
    const size_t n = (size_t)3 * size * size;
    float *out = malloc(n * sizeof *out);
    if (!out) {
        kvf_image_free(img);
        fprintf(stderr, "dump_preproc: out of memory\n");
        return 1;
    }
    st = gemma3 ? image_preprocess_stretch(img, (int)size, mean, std, out)
                : image_preprocess_llava(img, (int)size, mean, std, out);
    kvf_image_free(img);
    int rc = 0;
    if (st) {
        fprintf(stderr, "dump_preproc: %s\n", kvf_last_error());
        rc = 1;
    } else {
        /* The library runs on little-endian x86-64 only, so native order is LE. */
        FILE *f = fopen(argv[3], "wb");
        const size_t w = f ? fwrite(out, sizeof *out, n, f) : 0;
        if (!f || fclose(f) != 0 || w != n) {
            fprintf(stderr, "dump_preproc: cannot write %s\n", argv[3]);
            rc = 1;
        }
    }
    free(out);
    return rc;
}
