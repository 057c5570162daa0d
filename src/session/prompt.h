/* Internal layout of media segments and multimodal prompts. */
#ifndef KVF_PROMPT_H
#define KVF_PROMPT_H

#include "core/common.h"

struct kvf_media {
    float *embd;                /* [n_tokens][n_embd], owned */
    float *deepstack;           /* [n_tokens][n_deepstack][n_embd], owned: Qwen3-VL's DeepStack features
                                   (model.h: n_deepstack); NULL: none (other towers, pseudo-images) */
    int n_tokens, n_embd, n_deepstack;
    int rows, cols;             /* grid; n_tokens = rows*cols (+1 when a class token leads) */
    enum kvf_modality modality;
    bool synthetic;
    double encode_ms;
    int slice;                  /* kvf_media_encode_video: index in its video (0 starts one); else -1 */
    int t_pos;                  /* M-RoPE: time position within its video (Qwen2.5-VL: the temporal
                                   patch's start in seconds x tokens_per_second); else 0 */
    double t_sec;               /* Qwen3-VL's video items: the timestamp the prompt writes before the item
                                   ("<t seconds>"); else -1 */
    int tile_rows, tile_cols;   /* Idefics3: the image's tiles (model/vit.h: vision_tiles), each a rows x cols
                                   grid of embd, row by row, before its global image's; n_tokens =
                                   (tile_rows * tile_cols + 1) * rows * cols. Else 0 0 */
};

/* A prompt is a list of segments: a run of token ids, or one media item. */
struct prompt_seg {
    int start, n;               /* positions [start, start + n) of the prompt */
    const struct kvf_media *media; /* NULL: ids[start .. start + n) */
    int run;                    /* media: segments of its image (1) or video from here on,
                                   0 past a video's first */
    int first;                  /* media: its rows [first, first + n) of media->embd (Idefics3: a sub-image) */
};

/* A position's M-RoPE positions (time, height, width) and the rope position
 * a text token after it takes. */
struct mrope_pos {
    int32_t pos[3];
    int32_t next;
};

struct kvf_prompt {
    int n;                      /* positions */
    int32_t *ids;               /* [n]; -1 where media sits */
    struct kvf_tag *tags;       /* [n]; pos counted from 0 */
    struct prompt_seg *segs;
    int n_segs;
    bool synthetic;
    /* [n]; M-RoPE models only (model.h: mrope), else NULL: each position's
     * time, height and width rope positions counted from the prompt's first
     * (Qwen2-VL's get_rope_index: text advances all three by one; an
     * image's tokens share its start in time and add their grid row and
     * column; a video's items share its start and add their time
     * position; after either, text goes on one past the largest position
     * they took). */
    struct mrope_pos *rope;
};

#endif
