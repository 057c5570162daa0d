/* An image file: kvf_image_load_memory under a pixel limit, every pixel
 * read, then a fixed tiny vision tower on it: LLaVA's (preprocessing:
 * square padding, bicubic resize, normalisation; then the ViT and
 * projector) or, for every other input, Gemma 3's (bilinear resize of
 * either pass order; SigLIP and the pooling projector). */
#include "fuzz.h"

/* 4 Mpixel: far above what the tiny tower needs, small enough that one
 * input stays within libFuzzer's memory limit whatever its shape. */
#define MAX_PIXELS (4 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const struct kvf_model *llava, *gemma3;
    if (!llava) {
        llava = fuzz_fixed_model("llava-f32.gguf", "llava-mmproj-f32.gguf", false);
        gemma3 = fuzz_fixed_model("gemma3v-f32.gguf", "gemma3v-mmproj-f32.gguf", false);
    }
    struct kvf_image *img = NULL;
    if (kvf_image_load_memory(data, size, MAX_PIXELS, &img) != KVF_OK) return 0;
    const int w = kvf_image_width(img), h = kvf_image_height(img);
    if (w <= 0 || h <= 0 || (int64_t)w * h > MAX_PIXELS) __builtin_trap(); /* the limit was not honoured */
    /* a read of every byte, so that ASan sees a buffer shorter than w x h x 3 */
    const uint8_t *rgb = kvf_image_rgb(img);
    unsigned sum = 0;
    for (size_t i = 0; i < (size_t)w * (size_t)h * 3; i++) sum += rgb[i];
    struct kvf_media *md = NULL;
    const struct kvf_model *m = sum & 2 ? gemma3 : llava;
    if (kvf_media_encode_image(m, img, sum & 1 ? KVF_MOD_VIDEO : KVF_MOD_IMAGE, 1, &md) == KVF_OK &&
        kvf_media_n_tokens(md) <= 0)
        __builtin_trap();
    kvf_media_free(md);
    kvf_image_free(img);
    return 0;
}
