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

struct kvf_prompt {
    int n;                      /* positions */
    int32_t *ids;               /* [n]; -1 where media sits */
    struct kvf_tag *tags;       /* [n]; pos counted from 0 */
    struct prompt_seg *segs;
    int n_segs;
    bool synthetic;
};

#endif
