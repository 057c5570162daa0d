/* Internal layout of media segments and multimodal prompts. */
#ifndef KVF_PROMPT_H
#define KVF_PROMPT_H

#include "core/common.h"

struct kvf_media {
    float *embd;                /* [n_tokens][n_embd], owned */
    int n_tokens, n_embd;
    int rows, cols;             /* grid; n_tokens = rows*cols (+1 when a class token leads) */
    enum kvf_modality modality;
    bool synthetic;
    double encode_ms;
};

/* A prompt is a list of segments: a run of token ids, or one media item. */
struct prompt_seg {
    int start, n;               /* positions [start, start + n) of the prompt */
    const struct kvf_media *media; /* NULL: ids[start .. start + n) */
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
     * column; after it, text goes on from its start plus the longer side
     * of its grid). */
    struct mrope_pos *rope;
};

#endif
