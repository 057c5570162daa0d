/* Loads an image and runs a vision family's preprocessing, writing the
 * result as float32 [3][H][W] (CHW, little-endian):
 *   dump_preproc IMAGE SIZE OUT.bin           LLaVA-1.5 (CLIP mean / std, SIZE x SIZE),
 *                                             for tests/ref/image_ref.py against Pillow;
 *   dump_preproc --gemma3 IMAGE SIZE OUT.bin  Gemma 3 (stretched, bilinear, 0.5 / 0.5);
 *   dump_preproc --qwen25vl MIN MAX IMAGE OUT.bin
 *                                             Qwen2.5-VL (smart_resize to multiples of 28
 *                                             within MIN..MAX pixels, bicubic, CLIP's);
 *                                             prints "H W";
 *   dump_preproc --qwen25vl-video MIN MAX FRAME OUT.bin
 *                                             the same for a video frame (torchvision's
 *                                             bicubic and normalisation);
 *   dump_preproc --qwen3vl MIN MAX IMAGE OUT.bin
 *                                             Qwen3-VL's image (multiples of 32, 0.5 / 0.5)
 *   dump_preproc --idefics3 LONGEST TILE SPLIT IMAGE OUT.bin
 *                                             Idefics3 / SmolVLM (Lanczos, 0.5 / 0.5): the
 *                                             tiles (SPLIT 1) and the global image,
 *                                             [n][3][TILE][TILE]; prints "ROWS COLS"
 * the last five for tests/ref/hf_*_check.py against transformers. */
#include "io/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const float half[3] = {0.5f, 0.5f, 0.5f};

static int write_out(const char *path, const float *out, size_t n) {
    /* The library runs on little-endian x86-64 only, so native order is LE. */
    FILE *f = fopen(path, "wb");
    const size_t wrote = f ? fwrite(out, sizeof *out, n, f) : 0;
    if (!f || fclose(f) != 0 || wrote != n) {
        fprintf(stderr, "dump_preproc: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static int idefics3(int argc, char **argv) {
    const long longest = argc == 7 ? strtol(argv[2], NULL, 10) : 0, tile = argc == 7 ? strtol(argv[3], NULL, 10) : 0;
    if (argc != 7 || longest <= 0 || longest > 4096 || tile <= 0 || tile > 4096) {
        fprintf(stderr, "usage: dump_preproc --idefics3 LONGEST TILE SPLIT IMAGE OUT.bin\n");
        return 2;
    }
    const bool split = !strcmp(argv[4], "1");
    struct kvf_image *img;
    int rows, cols;
    if (kvf_image_load(argv[5], 0, &img) != KVF_OK) {
        fprintf(stderr, "dump_preproc: %s\n", kvf_last_error());
        return 1;
    }
    /* The sides are within 1..4096 (checked above), so every image has a tiling. */
    image_idefics3_tiles(kvf_image_height(img), kvf_image_width(img), (int)longest, (int)tile, split, &rows, &cols);
    const size_t n = (size_t)(rows * cols + 1) * 3 * (size_t)tile * (size_t)tile;
    float *out = malloc(n * sizeof *out);
    enum kvf_status st = out ? image_preprocess_idefics3(img, (int)longest, (int)tile, split, IMAGE_LANCZOS, half,
                                                         half, out)
                             : KVF_ERR_NOMEM;
    kvf_image_free(img);
    int rc = st != KVF_OK;
    if (rc) fprintf(stderr, "dump_preproc: %s\n", kvf_last_error());
    else rc = write_out(argv[6], out, n);
    if (!rc) printf("%d %d\n", rows, cols);
    free(out);
    return rc;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 && !strncmp(argv[1], "--", 2) ? argv[1] : "";
    const bool gemma3 = !strcmp(mode, "--gemma3"), video = !strcmp(mode, "--qwen25vl-video");
    const bool qwen3 = !strcmp(mode, "--qwen3vl"), qwen = video || qwen3 || !strcmp(mode, "--qwen25vl");
    if (!strcmp(mode, "--idefics3")) return idefics3(argc, argv);
    const char *image = NULL, *out_path = NULL, *size_arg = "0";
    long min_px = 0, max_px = 0;
    if (!*mode && argc == 4) image = argv[1], size_arg = argv[2], out_path = argv[3];
    else if (gemma3 && argc == 5) image = argv[2], size_arg = argv[3], out_path = argv[4];
    else if (qwen && argc == 6)
        min_px = strtol(argv[2], NULL, 10), max_px = strtol(argv[3], NULL, 10), image = argv[4], out_path = argv[5];
    if (!image) {
        fprintf(stderr, "usage: dump_preproc [--gemma3] IMAGE SIZE OUT.bin\n"
                        "       dump_preproc --qwen25vl[-video] | --qwen3vl MIN MAX IMAGE OUT.bin\n"
                        "       dump_preproc --idefics3 LONGEST TILE SPLIT IMAGE OUT.bin\n");
        return 2;
    }
    char *end;
    const long size = strtol(size_arg, &end, 10);
    if (*end || (!qwen && (size <= 0 || size > 4096))) {
        fprintf(stderr, "dump_preproc: bad SIZE %s\n", size_arg);
        return 2;
    }
    static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    const float *mean = gemma3 || qwen3 ? half : clip_mean, *std = gemma3 || qwen3 ? half : clip_std;
    struct kvf_image *img;
    enum kvf_status st = kvf_image_load(image, 0, &img);
    if (st) {
        fprintf(stderr, "dump_preproc: %s\n", kvf_last_error());
        return 1;
    }
    int w = (int)size, h = (int)size;
    if (qwen && !image_smart_resize(kvf_image_height(img), kvf_image_width(img), qwen3 ? 32 : 28, min_px,
                                       max_px, &h, &w)) {
        kvf_image_free(img);
        fprintf(stderr, "dump_preproc: no Qwen2.5-VL size for this image\n");
        return 1;
    }
    const size_t n = (size_t)3 * w * h;
    float *out = malloc(n * sizeof *out);
    if (!out) {
        kvf_image_free(img);
        fprintf(stderr, "dump_preproc: out of memory\n");
        return 1;
    }
    st = gemma3 ? image_preprocess_resize(img, w, h, IMAGE_BILINEAR, mean, std, out)
         : qwen ? image_preprocess_resize(img, w, h, video ? IMAGE_TV_BICUBIC : IMAGE_BICUBIC, mean, std, out)
                : image_preprocess_llava(img, w, mean, std, out);
    if (qwen && !st) printf("%d %d\n", h, w);
    kvf_image_free(img);
    int rc = 0;
    if (st) {
        fprintf(stderr, "dump_preproc: %s\n", kvf_last_error());
        rc = 1;
    } else {
        rc = write_out(out_path, out, n);
    }
    free(out);
    return rc;
}
