/* Decoded images and the vision families' preprocessing (LLaVA-1.5, Gemma 3). */
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
/* Gemma 3's preprocessing (Gemma3ImageProcessor, pan-and-scan off): resize
 * to size x size whatever the aspect ratio, with Pillow's bilinear filter;
 * scale and normalise as above. Output as above. */
enum kvf_status image_preprocess_stretch(const struct kvf_image *img, int size, const float mean[3],
                                         const float std[3], float *out);

#endif
