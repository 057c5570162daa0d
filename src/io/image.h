/* Decoded images and the vision families' preprocessing (LLaVA-1.5, Gemma 3,
 * Qwen2-VL and Qwen2.5-VL images and video frames, Idefics3 / SmolVLM). */
#ifndef KVF_IMAGE_H
#define KVF_IMAGE_H

#include "core/common.h"

struct kvf_image {
    int w, h;
    uint8_t *rgb; /* [h][w][3], owned */
};

/* LLaVA-1.5's preprocessing of one image into out [3][size][size] (CHW):
 * pad to a square of the longer side with the colour int(255 * mean), the
 * image centred as PIL's paste puts it; resize to size x size with Pillow's
 * bicubic filter (its exact fixed-point arithmetic); scale to [0, 1];
 * normalise per channel with mean and std. */
enum kvf_status image_preprocess_llava(const struct kvf_image *img, int size, const float mean[3],
                                       const float std[3], float *out);
/* Pillow's resampling filters (their exact fixed-point arithmetic), and
 * torchvision's antialiased bicubic resize of uint8 images, which
 * transformers' video processors use: Pillow's filter with int16 weights
 * of the precision their largest allows, the horizontal pass always first. */
enum image_filter { IMAGE_BILINEAR, IMAGE_BICUBIC, IMAGE_TV_BICUBIC, IMAGE_LANCZOS };

/* Resize to ow x oh whatever the aspect ratio with filter f (Pillow 13's
 * order of the passes), scale and normalise as above into out [3][oh][ow]:
 * Gemma3ImageProcessor (896 x 896, bilinear, pan-and-scan off),
 * Qwen2VLImageProcessorPil (image_smart_resize's size, bicubic) and
 * Qwen2VLVideoProcessor's frames (IMAGE_TV_BICUBIC, whose normalisation is
 * torchvision's, canvas_to_pixels). */
enum kvf_status image_preprocess_resize(const struct kvf_image *img, int ow, int oh, enum image_filter f,
                                        const float mean[3], const float std[3], float *out);

/* Pillow's Image.resize of img to ow x oh with filter f (not
 * IMAGE_TV_BICUBIC), 8-bit to 8-bit: *out is a new image (the caller frees
 * it), a copy when the size is img's. */
enum kvf_status image_resize(const struct kvf_image *img, int ow, int oh, enum image_filter f, struct kvf_image **out);

/* Idefics3ImageProcessor's (and SmolVLM's, the same) view of an h x w
 * image: resized so that its longer side is `longest` (the shorter one even,
 * both within 4096), then, when split, to multiples of `tile` (each side
 * rounded up) and cut into rows x cols tiles of tile x tile, row by row,
 * followed by the whole resized to tile x tile (the global image); when the
 * multiples are one tile, or without splitting, the global image alone
 * (rows = cols = 0). false when longest or tile is outside 1..4096. */
bool image_idefics3_tiles(int h, int w, int longest, int tile, bool split, int *rows, int *cols);
/* Those views, each resized with filter f (Pillow's, on 8-bit images, as
 * the processor chains them), scaled to [0, 1] and normalised, into out
 * [rows * cols + 1][3][tile][tile] (rows, cols of image_idefics3_tiles). */
enum kvf_status image_preprocess_idefics3(const struct kvf_image *img, int longest, int tile, bool split,
                                          enum image_filter f, const float mean[3], const float std[3], float *out);

/* Qwen2-VL's smart_resize: the size nearest h x w whose sides are
 * multiples of factor and whose area is within [min_pixels, max_pixels];
 * false when the aspect ratio exceeds 200 or a side would leave 1..4096. */
bool image_smart_resize(int h, int w, int factor, int64_t min_pixels, int64_t max_pixels, int *rh, int *rw);
/* Qwen3-VL's video smart_resize: the same for n_frames frames of h x w
 * taken t_factor at a time, the bounds on all frames' pixels together
 * (frames rounded to a multiple of t_factor), sides under factor first
 * scaled up to it; false also for fewer frames than t_factor. */
bool image_smart_resize_video(int n_frames, int t_factor, int h, int w, int factor, int64_t min_pixels,
                              int64_t max_pixels, int *rh, int *rw);

#endif
