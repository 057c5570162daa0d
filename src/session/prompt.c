/* Media (encoded images, video frames, pseudo-images) and multimodal
 * prompts: text with markers split into token runs and media segments, every
 * position tagged {modality, image / frame index, grid cell}. */
#include "session/prompt.h"

#include "model/model.h"

#include "core/ops.h"
#include "core/sys.h"
#include "model/vit.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MEDIA_MAX_SIDE 4096
#define MEDIA_MAX_TOKENS (1 << 20)
#define VIDEO_MAX_FRAMES (1 << 24) /* time positions stay exact in float (qwen_video_item) */

const char *kvf_modality_str(enum kvf_modality m) {
    switch (m) {
    case KVF_MOD_TEXT: return "text";
    case KVF_MOD_IMAGE: return "image";
    case KVF_MOD_VIDEO: return "video";
    }
    return "?";
}

void kvf_media_free(struct kvf_media *md) {
    if (!md) return;
    free(md->embd);
    free(md->deepstack);
    free(md);
}

int kvf_media_n_tokens(const struct kvf_media *md) { return md->n_tokens; }
bool kvf_media_is_synthetic(const struct kvf_media *md) { return md->synthetic; }
enum kvf_modality kvf_media_modality(const struct kvf_media *md) { return md->modality; }
int kvf_media_video_index(const struct kvf_media *md) { return md->slice; }
double kvf_media_encode_ms(const struct kvf_media *md) { return md->encode_ms; }

static enum kvf_status media_alloc(const struct kvf_model *m, int rows, int cols, int extra,
                                   enum kvf_modality mod, struct kvf_media **out) {
    *out = NULL;
    enum kvf_status st = model_require_weights(m, "media");
    if (st != KVF_OK) return st;
    if (mod != KVF_MOD_IMAGE && mod != KVF_MOD_VIDEO)
        return err_set(KVF_ERR_INVALID_ARG, "media modality must be image or video");
    if (rows <= 0 || cols <= 0 || rows > MEDIA_MAX_SIDE || cols > MEDIA_MAX_SIDE ||
        (int64_t)rows * cols + extra > MEDIA_MAX_TOKENS)
        return err_set(KVF_ERR_INVALID_ARG, "media grid %dx%d out of range (sides 1..%d, at most %d tokens)", rows,
                       cols, MEDIA_MAX_SIDE, MEDIA_MAX_TOKENS);
    struct kvf_media *md = calloc(1, sizeof *md);
    if (!md) return err_set(KVF_ERR_NOMEM, "out of memory");
    md->rows = rows;
    md->cols = cols;
    md->n_tokens = rows * cols + extra;
    md->n_embd = m->hp.n_embd;
    md->modality = mod;
    md->slice = -1;
    md->t_sec = -1.0;
    md->embd = malloc(sizeof(float) * (size_t)md->n_tokens * md->n_embd);
    if (!md->embd) {
        free(md);
        return err_set(KVF_ERR_NOMEM, "out of memory for %d media embeddings", rows * cols + extra);
    }
    *out = md;
    return KVF_OK;
}

/* Room for the DeepStack features a tower makes beside its tokens
 * (Qwen3-VL's; none for other towers). */
static enum kvf_status media_deepstack(const struct kvf_model *m, struct kvf_media *md) {
    md->n_deepstack = m->hp.n_deepstack;
    if (md->n_deepstack == 0) return KVF_OK;
    md->deepstack = malloc(sizeof(float) * (size_t)md->n_tokens * md->n_deepstack * md->n_embd);
    return md->deepstack ? KVF_OK : err_set(KVF_ERR_NOMEM, "out of memory for %d tokens' DeepStack features",
                                            md->n_tokens);
}

/* Item k of a Qwen-VL video of n_frames frames: its t_patch frames, the
 * video's frames first .. last (past the end the last repeats). */
static enum kvf_status qwen_video_item(const struct kvf_model *m, const struct kvf_image *const *patch, int k,
                                       int first, int last, int n_frames, double fps, int nt,
                                       struct kvf_media **out) {
    const struct vision_model *v = m->vision;
    const int T = v->t_patch;
    int rows, cols;
    if (!qvit_grid(v, patch[0]->h, patch[0]->w, n_frames, &rows, &cols))
        return err_set(KVF_ERR_INVALID_ARG, "a video of %d %dx%d frames has no Qwen-VL size (aspect ratio over 200, "
                       "or fewer frames than %d?)", n_frames, patch[0]->w, patch[0]->h, T);
    /* transformers' get_vision_position_ids, in float as there: k x
     * tokens_per_second x T / fps, truncated (Qwen2-VL: k; Qwen3-VL: 0,
     * each item placed as an image after its timestamp). */
    const bool stamped = v->qfamily == QVIT_QWEN3;
    const float step = v->tokens_per_second > 0.0f ? v->tokens_per_second * (float)(T / fps) : stamped ? 0.0f : 1.0f;
    const float t_pos = (float)k * step;
    if (!(t_pos < (float)(1 << 24)))
        return err_set(KVF_ERR_INVALID_ARG, "video at %g frames a second: time position %g out of range", fps, t_pos);
    struct kvf_media *md;
    enum kvf_status st = media_alloc(m, rows, cols, 0, KVF_MOD_VIDEO, &md);
    if (st != KVF_OK) return st;
    const double t0 = sys_time_ms();
    if ((st = media_deepstack(m, md)) != KVF_OK ||
        (st = qvit_encode(v, patch, n_frames, nt, md->embd, md->deepstack))) {
        kvf_media_free(md);
        return st;
    }
    md->encode_ms = sys_time_ms() - t0;
    md->t_pos = (int)t_pos;
    /* Qwen3VLProcessor's timestamp: the mean of the patch's first and last
     * frames' times. */
    md->t_sec = stamped ? ((first + 0.0) / fps + (last + 0.0) / fps) / 2 : -1.0;
    *out = md;
    return KVF_OK;
}

static bool vision_is_qwen(const struct vision_model *v) { return v->proj == VIT_PROJ_QWEN25VL; }

enum kvf_status kvf_media_encode_image(const struct kvf_model *m, const struct kvf_image *img,
                                       enum kvf_modality mod, int n_threads, struct kvf_media **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    *out = NULL;
    if (!m || !img) return err_set(KVF_ERR_INVALID_ARG, "encode_image: NULL argument");
    if (model_require_weights(m, "encode_image") != KVF_OK) return KVF_ERR_UNSUPPORTED;
    const struct vision_model *v = m->vision;
    if (!v) return err_set(KVF_ERR_UNSUPPORTED, "the model has no vision tower (give an mmproj file)");
    /* A frame alone has no place in time, nor a partner for its temporal patch. */
    if (mod == KVF_MOD_VIDEO && vision_is_qwen(v))
        return err_set(KVF_ERR_INVALID_ARG, "Qwen2-VL / Qwen2.5-VL encode video frames two at a time: give the "
                       "video's frames to kvf_media_encode_video");
    const int nt = n_threads > 0 ? n_threads : m->n_threads;
    struct kvf_media *md;
    int rows, cols, tile_rows, tile_cols;
    bool cls;
    enum kvf_status st = vision_grid(v, img, &rows, &cols, &cls);
    if (st == KVF_OK) st = vision_tiles(v, img, &tile_rows, &tile_cols);
    /* Past the first grid: Idefics3's further sub-images, or a class token. */
    const int64_t extra = (int64_t)tile_rows * tile_cols * rows * cols + (cls ? 1 : 0);
    if (st == KVF_OK) st = media_alloc(m, rows, cols, (int)KVF_MIN(extra, MEDIA_MAX_TOKENS), mod, &md);
    if (st != KVF_OK) return st;
    md->tile_rows = tile_rows;
    md->tile_cols = tile_cols;
    const double t0 = sys_time_ms();
    if ((st = media_deepstack(m, md)) == KVF_OK) st = vision_encode(v, img, nt, md->embd, md->deepstack);
    if (st != KVF_OK) {
        kvf_media_free(md);
        return st;
    }
    md->encode_ms = sys_time_ms() - t0;
    *out = md;
    return KVF_OK;
}

enum kvf_status kvf_media_encode_video(const struct kvf_model *m, const struct kvf_image *const *frames,
                                       int n_frames, int first_frame, double fps, int n_threads,
                                       struct kvf_media **out, int *n_out) {
    if (!out || !n_out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    *n_out = 0;
    if (!m || !frames || n_frames <= 0) return err_set(KVF_ERR_INVALID_ARG, "encode_video: no frames");
    if (!(fps > 0.0 && fps <= 1e6)) return err_set(KVF_ERR_INVALID_ARG, "video frame rate %g out of (0, 1e6]", fps);
    for (int i = 0; i < n_frames; i++)
        if (!frames[i]) return err_set(KVF_ERR_INVALID_ARG, "encode_video: frame %d is NULL", i);
    if (model_require_weights(m, "encode_video") != KVF_OK) return KVF_ERR_UNSUPPORTED;
    const struct vision_model *v = m->vision;
    if (!v) return err_set(KVF_ERR_UNSUPPORTED, "the model has no vision tower (give an mmproj file)");
    if (v->proj == VIT_PROJ_GEMMA3 || v->proj == VIT_PROJ_IDEFICS3)
        return err_set(KVF_ERR_UNSUPPORTED, "%s reads images only, not videos",
                       v->proj == VIT_PROJ_GEMMA3 ? "Gemma 3" : "Idefics3 / SmolVLM");
    const int nt = n_threads > 0 ? n_threads : m->n_threads;
    const bool qwen = vision_is_qwen(v);
    const int T = qwen ? v->t_patch : 1, n_items = n_frames / T + (n_frames % T != 0);
    if (first_frame < 0 || first_frame % T != 0 || first_frame > VIDEO_MAX_FRAMES)
        return err_set(KVF_ERR_INVALID_ARG, "video: first frame %d is not a multiple of %d in 0..%d", first_frame, T,
                       VIDEO_MAX_FRAMES);
    /* Its processor sizes a video's frames by all of them together. */
    if (qwen && v->qfamily == QVIT_QWEN3 && first_frame > 0)
        return err_set(KVF_ERR_INVALID_ARG, "video: Qwen3-VL sizes a video's frames by all of them: give the whole "
                       "video in one call (first frame %d)", first_frame);
    for (int i = 1; qwen && i < n_frames; i++)
        if (frames[i]->w != frames[0]->w || frames[i]->h != frames[0]->h)
            return err_set(KVF_ERR_INVALID_ARG,
                           "video frame %d is %dx%d, frame 0 %dx%d: a video's frames share one size", i,
                           frames[i]->w, frames[i]->h, frames[0]->w, frames[0]->h);
    enum kvf_status st = KVF_OK;
    for (int k = 0; k < n_items && st == KVF_OK; k++) {
        const int index = first_frame / T + k;
        if (qwen) {
            /* The last frame stands in for those past the end (the video processor's padding). */
            const struct kvf_image *patch[8]; /* t_patch <= 8 (qvit_alloc) */
            for (int t = 0; t < T; t++) patch[t] = frames[KVF_MIN(k * T + t, n_frames - 1)];
            st = qwen_video_item(m, patch, index, first_frame + k * T, first_frame + KVF_MIN(k * T + T, n_frames) - 1,
                                 n_frames, fps, nt, &out[k]);
        } else {
            st = kvf_media_encode_image(m, frames[k], KVF_MOD_VIDEO, nt, &out[k]);
        }
        if (st == KVF_OK) out[k]->slice = index, (*n_out)++;
    }
    if (st != KVF_OK) {
        for (int k = 0; k < *n_out; k++) kvf_media_free(out[k]), out[k] = NULL;
        *n_out = 0;
    }
    return st;
}

enum kvf_status kvf_media_pseudo_image(const struct kvf_model *m, const char *text, int rows, int cols, float noise,
                                       uint64_t seed, struct kvf_media **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    *out = NULL;
    if (!m || !text) return err_set(KVF_ERR_INVALID_ARG, "pseudo_image: NULL argument");
    if (!(noise >= 0.0f && noise <= 100.0f))
        return err_set(KVF_ERR_INVALID_ARG, "pseudo-image noise %g out of [0, 100]", noise);
    struct kvf_media *md;
    enum kvf_status st = media_alloc(m, rows, cols, 0, KVF_MOD_IMAGE, &md);
    if (st != KVF_OK) return st;
    const size_t len = strlen(text);
    const int n_max = (int)KVF_MIN(len + 1, (size_t)MEDIA_MAX_TOKENS);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_max);
    int32_t n_ids = 0;
    if (ids && kvf_tokenize(m, text, len, ids, n_max, false, false, &n_ids) != KVF_OK) n_ids = 0;
    if (!ids || n_ids <= 0) {
        free(ids);
        kvf_media_free(md);
        return ids ? err_set(KVF_ERR_INVALID_ARG, "pseudo-image: the text has no tokens")
                   : err_set(KVF_ERR_NOMEM, "out of memory");
    }
    /* The words in order, repeated to fill the grid, as the embedding layer outputs them. */
    const int E = md->n_embd;
    double sq = 0.0;
    for (int t = 0; t < md->n_tokens; t++) {
        float *row = md->embd + (size_t)t * E;
        ops_get_row(&m->tok_embd, ids[t % n_ids], row);
        for (int i = 0; i < E; i++) {
            row[i] *= m->hp.embd_scale;
            sq += (double)row[i] * row[i];
        }
    }
    free(ids);
    const double sigma = noise * sqrt(sq / ((double)md->n_tokens * E));
    uint64_t rng = seed;
    if (sigma > 0.0)
        for (size_t i = 0; i < (size_t)md->n_tokens * E; i++) md->embd[i] += (float)(sigma * rng_gauss(&rng));
    md->synthetic = true;
    *out = md;
    return KVF_OK;
}

enum kvf_status kvf_media_from_embd(const struct kvf_model *m, const float *embd, int rows, int cols,
                                    enum kvf_modality mod, struct kvf_media **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    *out = NULL;
    if (!m || !embd) return err_set(KVF_ERR_INVALID_ARG, "media_from_embd: NULL argument");
    struct kvf_media *md;
    enum kvf_status st = media_alloc(m, rows, cols, 0, mod, &md);
    if (st != KVF_OK) return st;
    memcpy(md->embd, embd, sizeof(float) * (size_t)md->n_tokens * md->n_embd);
    *out = md;
    return KVF_OK;
}

/* --------------------------------------------------------------- prompt -- */

void kvf_prompt_free(struct kvf_prompt *p) {
    if (!p) return;
    free(p->ids);
    free(p->tags);
    free(p->segs);
    free(p->rope);
    free(p);
}

int kvf_prompt_n_tokens(const struct kvf_prompt *p) { return p->n; }
const struct kvf_tag *kvf_prompt_tags(const struct kvf_prompt *p) { return p->tags; }
int32_t kvf_prompt_token(const struct kvf_prompt *p, int i) { return i >= 0 && i < p->n ? p->ids[i] : -1; }
bool kvf_prompt_is_synthetic(const struct kvf_prompt *p) { return p->synthetic; }

/* Grows the position arrays for `extra` more positions and one more segment. */
static enum kvf_status prompt_grow(struct kvf_prompt *p, int extra, int *cap) {
    struct prompt_seg *sg = realloc(p->segs, sizeof *sg * (size_t)(p->n_segs + 1));
    if (!sg) return err_set(KVF_ERR_NOMEM, "out of memory");
    p->segs = sg;
    if (p->n + extra <= *cap) return KVF_OK;
    if (extra > INT32_MAX / 2 - p->n) return err_set(KVF_ERR_CONTEXT, "prompt too long");
    const int c = KVF_MAX(p->n + extra, *cap * 2);
    int32_t *ids = realloc(p->ids, sizeof *ids * (size_t)c);
    if (ids) p->ids = ids;
    struct kvf_tag *tags = ids ? realloc(p->tags, sizeof *tags * (size_t)c) : NULL;
    if (!tags) return err_set(KVF_ERR_NOMEM, "out of memory");
    p->tags = tags;
    *cap = c;
    return KVF_OK;
}

static enum kvf_status prompt_add_text(struct kvf_prompt *p, const struct kvf_model *m, const char *text, size_t len,
                                       bool add_bos, bool parse_special, int *cap) {
    /* With no room the tokenizer reports the ids needed. */
    int32_t need = 0, got = 0;
    enum kvf_status st = kvf_tokenize(m, text, len, NULL, 0, add_bos, parse_special, &need);
    if (st == KVF_OK) return KVF_OK; /* no ids */
    if (st != KVF_ERR_BUFFER) return st;
    if ((st = prompt_grow(p, need, cap)) != KVF_OK) return st;
    if ((st = kvf_tokenize(m, text, len, p->ids + p->n, need, add_bos, parse_special, &got)) != KVF_OK) return st;
    if (got != need) return err_set(KVF_ERR_INTERNAL, "tokenizer returned %d of %d ids", got, need);
    for (int i = 0; i < got; i++)
        p->tags[p->n + i] =
            (struct kvf_tag){ .pos = p->n + i, .modality = KVF_MOD_TEXT, .media = -1, .row = -1, .col = -1 };
    p->segs[p->n_segs++] = (struct prompt_seg){p->n, got, NULL, 0, 0};
    p->n += got;
    return KVF_OK;
}

/* Rows [first, first + n) of md, media item `index` of the prompt; each
 * row tagged with its cell of its grid (Idefics3: of its sub-image's). */
static enum kvf_status prompt_add_media(struct kvf_prompt *p, const struct kvf_model *m, const struct kvf_media *md,
                                        int index, int first, int n, int *cap) {
    if (md->n_embd != m->hp.n_embd || (md->deepstack && md->n_deepstack != m->hp.n_deepstack))
        return err_set(KVF_ERR_SHAPE, "media of width %d (%d DeepStack layers) given to a model of width %d (%d)",
                       md->n_embd, md->deepstack ? md->n_deepstack : 0, m->hp.n_embd, m->hp.n_deepstack);
    enum kvf_status st = prompt_grow(p, n, cap);
    if (st != KVF_OK) return st;
    const int cells = md->rows * md->cols;
    const int lead = md->tile_rows ? 0 : md->n_tokens - cells; /* a class token has no grid cell */
    for (int t = 0; t < n; t++) {
        const int g = (first + t - lead) % cells;
        p->ids[p->n + t] = -1;
        p->tags[p->n + t] = (struct kvf_tag){.pos = p->n + t, .modality = (int16_t)md->modality,
                                             .media = (int16_t)KVF_MIN(index, INT16_MAX),
                                             .row = (int16_t)(g < 0 ? -1 : g / md->cols),
                                             .col = (int16_t)(g < 0 ? -1 : g % md->cols)};
    }
    p->segs[p->n_segs++] = (struct prompt_seg){p->n, n, md, 1, first};
    p->n += n;
    p->synthetic |= md->synthetic;
    return KVF_OK;
}

/* An image as Idefics3's processor writes it (get_image_prompt_string):
 * each tile as "<fake_token_around_image><row_R_col_C>" + its tokens, a
 * "\n" after each row of tiles, then "\n<fake_token_around_image><global-img>"
 * + the global image's tokens + "<fake_token_around_image>"; without tiles
 * the global image alone. The text between the tokens is the processor's
 * own, tokenized as special tokens split it. */
static enum kvf_status prompt_add_idefics3(struct kvf_prompt *p, const struct kvf_model *m, const struct kvf_media *md,
                                           int index, int *cap) {
    const int per = md->rows * md->cols, n_tiles = md->tile_rows * md->tile_cols;
    enum kvf_status st = KVF_OK;
    char text[96];
    for (int k = 0; k <= n_tiles && st == KVF_OK; k++) {
        const int r = k / KVF_MAX(md->tile_cols, 1), c = k % KVF_MAX(md->tile_cols, 1);
        if (k == n_tiles)
            snprintf(text, sizeof text, "%s<fake_token_around_image><global-img>", n_tiles ? "\n\n" : "");
        else
            snprintf(text, sizeof text, "%s<fake_token_around_image><row_%d_col_%d>", r > 0 && c == 0 ? "\n" : "",
                     r + 1, c + 1);
        if ((st = prompt_add_text(p, m, text, strlen(text), false, true, cap)) == KVF_OK)
            st = prompt_add_media(p, m, md, index, k * per, per, cap);
    }
    static const char end[] = "<fake_token_around_image>";
    return st == KVF_OK ? prompt_add_text(p, m, end, strlen(end), false, true, cap) : st;
}

/* A special token (Gemma 3's image delimiters) at the end of the prompt,
 * part of the text segment before it when there is one. */
static enum kvf_status prompt_add_token(struct kvf_prompt *p, int32_t id, int *cap) {
    enum kvf_status st = prompt_grow(p, 1, cap);
    if (st != KVF_OK) return st;
    p->ids[p->n] = id;
    p->tags[p->n] = (struct kvf_tag){.pos = p->n, .modality = KVF_MOD_TEXT, .media = -1, .row = -1, .col = -1};
    struct prompt_seg *last = p->n_segs > 0 ? &p->segs[p->n_segs - 1] : NULL;
    if (last && !last->media && last->start + last->n == p->n) last->n++;
    else p->segs[p->n_segs++] = (struct prompt_seg){p->n, 1, NULL, 0, 0};
    p->n++;
    return KVF_OK;
}

/* Text between markers with what the processor writes around the media
 * joined to it before tokenizing: Gemma3Processor makes each image
 * "\n\n<start_of_image>" + its tokens + "<end_of_image>\n\n", so the text
 * before a marker gains "\n\n" and the text after it starts with "\n\n";
 * Qwen3VLProcessor writes a video's first timestamp right after the text
 * before it. Tokenized piece by piece, as the special tokens split it. */
static enum kvf_status prompt_add_wrapped(struct kvf_prompt *p, const struct kvf_model *m, const char *prefix,
                                          const char *text, size_t len, const char *suffix, bool add_bos,
                                          bool parse_special, int *cap) {
    const size_t a = strlen(prefix), b = strlen(suffix);
    char *buf = malloc(a + len + b + 1);
    if (!buf) return err_set(KVF_ERR_NOMEM, "out of memory");
    memcpy(buf, prefix, a);
    memcpy(buf + a, text, len);
    memcpy(buf + a + len, suffix, b);
    buf[a + len + b] = 0;
    const enum kvf_status st = prompt_add_text(p, m, buf, a + len + b, add_bos, parse_special, cap);
    free(buf);
    return st;
}

/* Qwen3VLProcessor's timestamp of a video item (prompt.h: t_sec). */
static void video_stamp(const struct kvf_media *md, char *buf, size_t n) {
    snprintf(buf, n, "<%.1f seconds>", md->t_sec);
}

/* Next marker at or after s: its start, or NULL. */
static const char *marker_next(const char *s, bool *video) {
    const char *i = strstr(s, KVF_MARKER_IMAGE), *v = strstr(s, KVF_MARKER_VIDEO);
    *video = v && (!i || v < i);
    return *video ? v : i;
}

static enum kvf_status prompt_build(struct kvf_prompt *p, const struct kvf_model *m, const char *text,
                                    const struct kvf_media *const *media, int n_media, bool add_bos,
                                    bool parse_special) {
    int cap = 0, used = 0, n_images = 0, n_markers = 0;
    enum kvf_status st;
    const char *s = text;
    bool first = true;
    /* Gemma 3 and Qwen2.5-VL delimit each image with tokens of their own. */
    const int32_t boi = m->vision ? m->vision->boi : -1, eoi = m->vision ? m->vision->eoi : -1;
    const bool newlines = m->vision && m->vision->boi_newlines;
    const bool idefics3 = m->vision && m->vision->proj == VIT_PROJ_IDEFICS3;
    for (;;) {
        bool video;
        const char *mk = marker_next(s, &video);
        const size_t len = mk ? (size_t)(mk - s) : strlen(s);
        /* A video whose items carry timestamps (Qwen3-VL) has one before each item. */
        const bool stamped = mk && video && used < n_media && media[used] && media[used]->t_sec >= 0;
        char stamp[64] = "";
        if (stamped) video_stamp(media[used], stamp, sizeof stamp);
        st = prompt_add_wrapped(p, m, newlines && !first ? "\n\n" : "", s, len,
                                newlines && mk ? "\n\n" : stamp, add_bos && first, parse_special, &cap);
        if (st != KVF_OK) return st;
        first = false;
        if (!mk) break;
        n_markers++;
        if (video && m->vision && !vision_is_qwen(m->vision) && (boi >= 0 || idefics3))
            return err_set(KVF_ERR_UNSUPPORTED, "marker %d is %s, but this vision model reads images only", n_markers,
                           KVF_MARKER_VIDEO);
        if (video) {
            /* The video's items: consecutive frames, up to the next video's
             * first; between delimiters together, or each between its own
             * after its timestamp (the first already written). */
            if (!stamped && boi >= 0 && (st = prompt_add_token(p, boi, &cap))) return st;
            const int first_seg = p->n_segs;
            int frames = 0;
            while (used < n_media && media[used] && media[used]->modality == KVF_MOD_VIDEO &&
                   (frames == 0 || media[used]->slice != 0)) {
                if (stamped && frames > 0) {
                    video_stamp(media[used], stamp, sizeof stamp);
                    if ((st = prompt_add_text(p, m, stamp, strlen(stamp), false, parse_special, &cap))) return st;
                }
                if ((stamped && boi >= 0 && (st = prompt_add_token(p, boi, &cap))) ||
                    (st = prompt_add_media(p, m, media[used], frames++, 0, media[used]->n_tokens, &cap)) ||
                    (stamped && eoi >= 0 && (st = prompt_add_token(p, eoi, &cap))))
                    return st;
                if (!stamped) p->segs[p->n_segs - 1].run = 0; /* prompt_rope takes the video from its first segment */
                used++;
            }
            if (frames == 0)
                return err_set(KVF_ERR_INVALID_ARG, "marker %d is %s but media item %d is not a video frame", n_markers,
                               KVF_MARKER_VIDEO, used);
            if (!stamped) {
                p->segs[first_seg].run = frames;
                if (eoi >= 0 && (st = prompt_add_token(p, eoi, &cap))) return st;
            }
        } else {
            if (used >= n_media)
                return err_set(KVF_ERR_INVALID_ARG, "the prompt has more markers than the %d media items given",
                               n_media);
            if (!media[used] || media[used]->modality != KVF_MOD_IMAGE)
                return err_set(KVF_ERR_INVALID_ARG, "marker %d is %s but media item %d is a video frame (use %s)",
                               n_markers, KVF_MARKER_IMAGE, used, KVF_MARKER_VIDEO);
            const struct kvf_media *md = media[used++];
            if (idefics3) st = prompt_add_idefics3(p, m, md, n_images++, &cap);
            else if ((boi < 0 || (st = prompt_add_token(p, boi, &cap)) == KVF_OK) &&
                     (st = prompt_add_media(p, m, md, n_images++, 0, md->n_tokens, &cap)) == KVF_OK && eoi >= 0)
                st = prompt_add_token(p, eoi, &cap);
            if (st != KVF_OK) return st;
        }
        s = mk + (video ? strlen(KVF_MARKER_VIDEO) : strlen(KVF_MARKER_IMAGE));
    }
    if (used != n_media)
        return err_set(KVF_ERR_INVALID_ARG, "%d media items given but the prompt's %d markers take %d", n_media,
                       n_markers, used);
    return KVF_OK;
}

/* M-RoPE positions of every position (prompt.h: kvf_prompt.rope), as
 * transformers' get_rope_index for Qwen2-VL, Qwen2.5-VL and Qwen3-VL lays
 * them out (Qwen3-VL's video items each an image of their own, after their
 * timestamps). */
static enum kvf_status prompt_rope(struct kvf_prompt *p) {
    p->rope = malloc(sizeof *p->rope * (size_t)KVF_MAX(p->n, 1));
    if (!p->rope) return err_set(KVF_ERR_NOMEM, "out of memory");
    int32_t cur = 0;
    for (int g = 0; g < p->n_segs;) {
        const struct prompt_seg *sg = &p->segs[g];
        struct mrope_pos *r = p->rope + sg->start;
        if (!sg->media) {
            for (int t = 0; t < sg->n; t++, cur++) r[t] = (struct mrope_pos){{cur, cur, cur}, cur + 1};
            g++;
            continue;
        }
        /* An image, or a video's items (run segments in a row): text after
         * them goes on one past the largest position they took, as Qwen's
         * get_rope_index has it. (transformers 5 goes on from the start plus
         * the grid's longer side, which is the same but for videos whose
         * time positions outgrow their grid.) */
        int32_t end = cur + 1;
        const int run = KVF_MAX(sg->run, 1);
        for (int i = g; i < g + run; i++) {
            const struct kvf_media *md = p->segs[i].media;
            const int lead = md->n_tokens - md->rows * md->cols; /* a class token: the grid's first cell */
            struct mrope_pos *ri = p->rope + p->segs[i].start;
            for (int t = 0; t < p->segs[i].n; t++) {
                const int cell = KVF_MAX(t - lead, 0);
                ri[t] = (struct mrope_pos){{cur + md->t_pos, cur + cell / md->cols, cur + cell % md->cols}, 0};
                end = KVF_MAX(end, KVF_MAX(ri[t].pos[0], KVF_MAX(ri[t].pos[1], ri[t].pos[2])) + 1);
            }
        }
        for (int i = g; i < g + run; i++)
            for (int t = 0; t < p->segs[i].n; t++) p->rope[p->segs[i].start + t].next = end;
        cur = end;
        g += run;
    }
    return KVF_OK;
}

enum kvf_status kvf_prompt_init(const struct kvf_model *m, const char *text, const struct kvf_media *const *media,
                                int n_media, bool add_bos, bool parse_special, struct kvf_prompt **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    *out = NULL;
    if (!m || !text || n_media < 0 || (n_media > 0 && !media))
        return err_set(KVF_ERR_INVALID_ARG, "prompt_init: bad arguments");
    struct kvf_prompt *p = calloc(1, sizeof *p);
    if (!p) return err_set(KVF_ERR_NOMEM, "out of memory");
    enum kvf_status st = prompt_build(p, m, text, media, n_media, add_bos, parse_special);
    const int *mr = m->hp.mrope;
    if (st == KVF_OK && mr[0] + mr[1] + mr[2] > 0) st = prompt_rope(p);
    if (st != KVF_OK) {
        kvf_prompt_free(p);
        return st;
    }
    *out = p;
    return KVF_OK;
}
