/* What the kvfold command's source files share. The CLI uses libkvfold's
 * public API only (kvfold.h); what it needs beyond it lives here:
 *   cli.c    errors and exit codes, the option tables and their parsing, help
 *            and usage text, files, the clock, JSON output, model and
 *            session opening, KV cache statistics as JSON;
 *   input.c  what goes into the model: text, chat templates, tokens, media
 *            (images, frames, videos, pseudo-images) and prompts;
 *   reply.c  the generation loop generate and chat share.
 * Each command is one file (info.c, tokenize.c, generate.c, ...) defining a
 * struct command; main.c holds the table of them. The server is in serve/,
 * the evaluation lab (eval, its benchmarks and metrics, charts, profile) in
 * lab/. */
#ifndef KVF_CLI_H
#define KVF_CLI_H

#include "kvfold.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { EXIT_USAGE = 1, EXIT_INPUT = 2, EXIT_RUNTIME = 3 };
#define MIB (1024.0 * 1024.0)
#ifndef MIN
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#endif
#ifndef MAX
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#endif
#define COUNT_OF(x) (sizeof(x) / sizeof *(x))

/* ------------------------------------------------------------ options -- */

/* OPT_MEDIA: repeatable; appends (kind = lo, value) to args.media in command-line order.
 * OPT_LIST: repeatable; appends the value to a struct str_list. */
enum opt_kind { OPT_FLAG, OPT_INT, OPT_FLOAT, OPT_U64, OPT_STR, OPT_MEDIA, OPT_LIST };
#define STR_LIST_MAX 32
struct str_list { const char *v[STR_LIST_MAX]; int n; };

enum media_kind { MEDIA_IMAGE, MEDIA_FRAME, MEDIA_VIDEO_DIR, MEDIA_PSEUDO };
#define MEDIA_ARGS_MAX 256

struct opt {
    const char *lng;     /* "--top-k"; aliases may follow, space-separated: "--kv-type -ctk" (llama.cpp's names) */
    const char *shrt;    /* "-k" or NULL                    */
    enum opt_kind kind;
    void *dst;           /* bool, int, float, uint64_t or const char * */
    double lo, hi;       /* accepted range of OPT_INT / OPT_FLOAT */
    const char *metavar;
    const char *help;
};

/* kvfold serve's own options (serve/); the server reads the shared ones
 * (--kv, --parallel, --ctx-size, --threads ...) from struct args. */
struct serve_options {
    const char *host, *api_key, *api_key_file, *media_dir, *kv_memory, *max_body, *alias;
    const char *slot_save_path;   /* where /slots/ID?action=save|restore files live, */
    const char *slot_save_max;    /* ... and how many bytes of conversations' files it may hold */
    int port, queue, max_images, cache_sessions, timeout, threads_http;
};

/* kvfold eval's own options (lab/). */
struct eval_options {
    const char *budgets, *depths, *segments, *data, *out_dir, *plots, *kept_map, *needle, *grid, *tasks;
    int n_samples, seg_words;
    bool resume;
    const char *question;         /* "with" (in the prompt compressed) or "after" (appended after) */
    const char *words, *haystack; /* ruler: the word list, the essay haystack's text, */
    const char *dump_samples;     /* ... and where its samples are written */
    int questions;                /* ruler: questions asked of each NIAH context */
    bool turns;                   /* ruler: ... one after another in one conversation */
};

/* kvfold calibrate's own options. */
struct calibrate_options {
    struct str_list corpus;       /* every --corpus FILE */
    int samples, test, span, per_span;
    float alpha;
};

/* Every option of every subcommand; each subcommand's table points into it. */
struct args {
    const char *model, *prompt, *file, *chat_template, *system, *mmproj, *kv, *dump_kv, *samples, *output;
    const char *kv_type, *type_k, *type_v;   /* --kv-type, -ctk, -ctv as given */
    enum kvf_kv_type type_k_id, type_v_id;   /* ... and parsed (command_main checks them) */
    char kv_types[16];                       /* how tools print them: "f16", or "q8_0/q4_0" (keys/values) */
    bool swa_full;                /* --swa-full */
    bool no_repack;               /* --no-repack */
    bool ignore_eos;              /* --ignore-eos */
    bool json, bos, special, chat, dump_tags, no_warmup, no_progress, no_escape, escape, conversation;
    bool bandwidth, explain;      /* bench --bandwidth, --explain */
    int n_predict, top_k, threads, ctx, batch, n_prompt_bench, reps, chunks, n_images, depth, parallel;
    float temp, top_p, min_p, pseudo_noise, max_image_mpix, budget, repeat_penalty;
    float video_fps;              /* --video-fps; 0: 2 */
    int repeat_last_n;
    int image_min_tokens, image_max_tokens; /* --image-min-tokens / --image-max-tokens; 0: the model's */
    struct str_list stops;        /* every -r / --stop */
    uint64_t seed;
    struct { enum media_kind kind; const char *value; } media[MEDIA_ARGS_MAX];
    int n_media;
    const char *eval_mode;        /* consistency, needle or milebench (the word after "eval") */
    struct str_list kvs;          /* every --kv (eval, bench) */
    struct eval_options eval;
    struct calibrate_options cal;
    const char *session_file;     /* kvfold chat, generate: --session FILE */
    struct serve_options serve;   /* --parallel is above, shared with bench */
    const char *bench_lists[4], *bench_format; /* kvfold bench: -p -n -t -d as given (comma lists), -o */
};

#define OPT_MAX 48

struct command {
    const char *name, *summary, *usage, *details;
    int (*run)(const struct args *a);
    void (*defaults)(struct args *a);
    int (*opts)(struct args *a, struct opt *out); /* fills out[OPT_MAX], returns the count */
    bool no_model;   /* runs without -m */
    bool takes_mode; /* a word before the options: kvfold eval needle -m ... */
};

/* The commands (one file each), in the order --help lists them. */
extern const struct command info_command, tokenize_command, generate_command, chat_command, perplexity_command,
    bench_command, profile_command, calibrate_command, eval_command, policies_command, serve_command;

#define OPT_MODEL { "--model", "-m", OPT_STR, &a->model, 0, 0, "FILE", "model: .gguf file or Hugging Face directory" }
#define OPT_NO_REPACK { "--no-repack", "-nr", OPT_FLAG, &a->no_repack, 0, 0, NULL, \
    "keep every weight in the file's memory map (the interleaved form the AVX-512 VNNI kernels read is not " \
    "a candidate when kernels are chosen at load; bench --explain tells the choice)" }
#define OPT_JSON { "--json", NULL, OPT_FLAG, &a->json, 0, 0, NULL, "print one JSON object on stdout" }
/* llama.cpp's escape processing of -p, -sys and -r text (on by default). */
#define OPTS_ESCAPE \
    { "--escape", "-e", OPT_FLAG, &a->escape, 0, 0, NULL, \
      "turn \\n \\r \\t \\\\ \\\" \\' \\xHH in -p, -sys and -r into what they name (default)" }, \
    { "--no-escape", NULL, OPT_FLAG, &a->no_escape, 0, 0, NULL, "take -p, -sys and -r text literally" }
#define OPT_NO_PROGRESS { "--no-progress", NULL, OPT_FLAG, &a->no_progress, 0, 0, NULL, \
    "no updating progress line on a terminal: a line every few seconds at most, as in a pipe" }
#define OPT_THREADS { "--threads", "-t", OPT_INT, &a->threads, 0, 1024, "N", "threads (default 0: all cores)" }
/* How the KV cache stores entries: their type, and whether sliding-window layers keep all. */
#define OPTS_KV_STORAGE \
    { "--kv-type", NULL, OPT_STR, &a->kv_type, 0, 0, "TYPE", \
    "how the KV cache stores keys and values: f16 (default), f32, q8_0, q4_0 or q4_0h (q4_0 of " \
    "Hadamard-rotated blocks); keys also q4_0s (q4_0h of keys smoothed per channel)" }, \
    { "--cache-type-k -ctk", NULL, OPT_STR, &a->type_k, 0, 0, "TYPE", "the keys' type alone (over --kv-type)" }, \
    { "--cache-type-v -ctv", NULL, OPT_STR, &a->type_v, 0, 0, "TYPE", "the values' type alone (over --kv-type)" }, \
    { "--swa-full", NULL, OPT_FLAG, &a->swa_full, 0, 0, NULL, "sliding-window layers (Gemma 3) keep every entry, " \
      "not only their window (more memory; a conversation can then go back to any earlier position)" }
#define OPT_BATCH { "--batch", "-b", OPT_INT, &a->batch, 1, 1 << 20, "N", "prompt tokens per forward pass" }
#define OPT_PROMPT { "--prompt", "-p", OPT_STR, &a->prompt, 0, 0, "TEXT", "input text" }
#define OPT_FILE { "--file", "-f", OPT_STR, &a->file, 0, 0, "FILE", "read the input text from FILE (- for stdin)" }
#define OPT_SYSTEM { "--system --system-prompt", "-sys", OPT_STR, &a->system, 0, 0, "TEXT", \
    "system message (implies --chat)" }
/* The vision tower: its file, and (llama.cpp's names) the tokens a Qwen2-VL / Qwen2.5-VL or Idefics3 image may
 * become. */
#define OPTS_VISION \
    { "--mmproj", NULL, OPT_STR, &a->mmproj, 0, 0, "FILE", \
      "vision projector GGUF (llama.cpp mmproj) for a GGUF decoder" }, \
    { "--image-min-tokens", NULL, OPT_INT, &a->image_min_tokens, 0, 1 << 20, "N", \
      "Qwen2-VL / Qwen2.5-VL: an image becomes at least N tokens (default: the model's)" }, \
    { "--image-max-tokens", NULL, OPT_INT, &a->image_max_tokens, 0, 1 << 20, "N", \
      "Qwen2-VL / Qwen2.5-VL: an image becomes at most N tokens (default: the model's); Idefics3 / SmolVLM: " \
      "an image whose tiles would take more is read whole, as its global image alone" }
#define OPT_PSEUDO_NOISE { "--pseudo-noise", NULL, OPT_FLOAT, &a->pseudo_noise, 0, 100, "S", \
    "Gaussian noise on pseudo-images, x embedding RMS (default 0)" }
#define OPT_VIDEO_FPS { "--video-fps", NULL, OPT_FLOAT, &a->video_fps, 0.001, 1000, "F", \
    "frames a second the video frames were taken at (Qwen2.5-VL's time positions; default 2, " \
    "the rate Qwen's pipeline samples at)" }
/* Multimodal input, shared by generate and bench. */
#define OPTS_MEDIA \
    OPTS_VISION, \
    { "--image", NULL, OPT_MEDIA, a->media, MEDIA_IMAGE, 0, "FILE", \
      "image for the next <image> marker (repeatable)" }, \
    { "--frame", NULL, OPT_MEDIA, a->media, MEDIA_FRAME, 0, "FILE", \
      "video frame; consecutive frames fill one <video> marker" }, \
    { "--video", NULL, OPT_MEDIA, a->media, MEDIA_VIDEO_DIR, 0, "DIR", \
      "video as a directory of frame images (name order)" }, \
    OPT_VIDEO_FPS, \
    { "--pseudo-image", NULL, OPT_MEDIA, a->media, MEDIA_PSEUDO, 0, "FILE:RxC", \
      "synthetic RxC image segment from the words of FILE (for text models)" }, \
    OPT_PSEUDO_NOISE, \
    { "--max-image-mpix", NULL, OPT_FLOAT, &a->max_image_mpix, 0.000001, 1e4, "M", \
      "reject images over M megapixels (default 64)" }

/* An option's first name (lng may list aliases after it), for "%.*s". */
#define NAME1(lng) (int)strcspn(lng, " "), lng

/* The option tables point into a struct args, so they are built per call:
 * copies src[0..n) to dst and returns n. */
int opts_set(struct opt *dst, const struct opt *src, size_t n);
#define OPTS_RETURN(out, t) return opts_set(out, t, COUNT_OF(t))
/* Parses argv (after the command word) into a fresh struct args, checks
 * --kv and --kv-type, and runs the command; returns the exit code. */
int command_main(const struct command *c, int argc, char **argv);

/* --------------------------------------------- Ctrl-C and progress -- */

/* command_main installs a SIGINT handler before running a command: the
 * first Ctrl-C only sets a flag, which long commands read at their safe
 * points (between tokens, chunks, tests, samples) to stop and finish
 * normally, with their timings, JSON and files for what was done; a second
 * Ctrl-C exits at once with status 130. */
bool interrupted(void);
/* Forgets a Ctrl-C once handled (chat: a stopped reply), so that the next
 * one stops again rather than quits. */
void interrupt_clear(void);

/* KVFOLD_PAUSE_AT=LABEL:N, a test's hook that makes interruption tests
 * independent of the machine's speed: the process stops itself (SIGSTOP)
 * once, the first time the work LABEL (a progress label such as "bench" or
 * "perplexity", or "reply": tokens generated) reaches N units done, at a
 * point right before its next Ctrl-C check. The test waits for the stop,
 * sends SIGINT, then SIGCONT; the hook returns once the SIGINT handler has
 * run (10 s at most). Without the variable it does nothing. */
void pause_point(const char *label, long done);

/* One long task's progress on stderr, never stdout: on a terminal a single
 * updating line (done/total, rate, time left), drawn at the first update
 * and redrawn at most 10 times a second; in a pipe, or with --no-progress,
 * a line every 5 s at most. progress_update is a pause_point. */
struct progress {
    const char *label, *unit;  /* "prefill", "tok" */
    long total;                /* <= 0: unknown */
    double t0, last;           /* now_ms() at the start and at the last line */
    bool tty, drawn;           /* drawn: a line is on the terminal now */
    bool shown;                /* a line was drawn at all (the first update always is, on a terminal) */
};
void progress_init(struct progress *p, const char *label, const char *unit, long total, const struct args *a);
/* done so far; detail (optional): what is running now, e.g. "snapkv:budget=0.2". */
void progress_update(struct progress *p, long done, const char *detail);
/* Clears the terminal line (the command's own report follows). */
void progress_end(struct progress *p);

/* -------------------------------------------------------------- errors -- */

/* "kvfold: error: ..." on stderr, one line. */
void print_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int exit_code(enum kvf_status st);
/* Exit status of a command that stopped early on Ctrl-C but finished its
 * report (the shell's 128 + SIGINT). */
#define EXIT_INTERRUPTED 130
/* Prints "what: status: last error" and returns the exit code for st. */
int fail(enum kvf_status st, const char *what);
/* fail() for a call whose arguments all come from command-line values (a
 * --kv spec, a grid size): one the library refuses (KVF_ERR_INVALID_ARG,
 * e.g. fastv:k past the model's layers) is a usage error, as when the
 * option parser refuses it. */
int fail_option(enum kvf_status st, const char *what);

/* ------------------------------------------------- files, clock, JSON -- */

/* Reads a whole regular file of at most READ_FILE_MAX bytes (prompts,
 * JSON); *out is NUL-terminated and owned by the caller. */
#define READ_FILE_MAX ((size_t)256 << 20)
int read_file(const char *path, char **out, size_t *len);
/* read_file for text that goes to the tokenizer: a NUL byte is refused
 * (the text would end there for some readers and not for others). "-"
 * reads standard input (a pipe or a terminal too). */
int read_text_file(const char *path, char **out, size_t *len);
/* An output file named by FLAG, opened before the work starts so that a
 * bad path fails at once rather than after the generation: 0, or an error
 * line naming the flag, the path and the reason and EXIT_INPUT. */
int out_open(const char *flag, const char *path, FILE **f);
/* Writes text and a newline to f and closes it (f may be NULL after a
 * failed out_open: nothing is done); 0 or an error line and EXIT_INPUT. */
int out_write(const char *flag, const char *path, FILE *f, const char *text);
/* The text given by -p or -f (exactly one of them); -f - reads stdin. */
int input_text(const char *cmd, const struct args *a, char **text, size_t *len);
/* Milliseconds on a monotonic clock (only differences mean anything). */
double now_ms(void);
/* Whether path names a directory / a regular file (links followed). */
bool path_is_dir(const char *path);
bool path_is_file(const char *path);
/* Prints a cJSON object on stdout and frees it. */
int print_json(cJSON *obj);
/* cJSON's allocations go through json_parse's count from here on (main
 * calls it once; other parses are not counted). */
void json_hooks_init(void);
/* text[0..len) parsed by cJSON, which may allocate at most
 * JSON_BYTES_PER_BYTE x len + JSON_BYTES_EXTRA bytes for it (the parse
 * stops there), or NULL: *too_big (may be NULL) says whether that was the
 * reason. cJSON asks 64 bytes a value (about 80 with the allocator's
 * share), 32 times the text of `[0,0,...]`; real request bodies, tasks and
 * result lines are mostly strings, which take their own length. */
#define JSON_BYTES_PER_BYTE 8
#define JSON_BYTES_EXTRA ((size_t)1 << 20)
cJSON *json_parse(const char *text, size_t len, bool *too_big);
/* The bytes json_parse lets cJSON allocate for len bytes of text. */
size_t json_parse_limit(size_t len);
/* A float option as the user wrote it (0.7, not 0.699999988) in JSON. */
double f32_json(float x);
/* A copy of s[0..n) that is valid UTF-8 without NULs. */
char *utf8_sanitize(const char *s, size_t n);

/* -------------------------------------------------- models, sessions -- */

int load_model(const struct args *a, struct kvf_model **model);
/* Session parameters from the options every command shares (--batch,
 * --threads, --kv, --kv-type) for n_ctx positions. */
struct kvf_session_params session_params(const struct args *a, int n_ctx);
/* kvf_session_init, failures printed as "what: ...". */
int open_session(const struct kvf_model *m, const struct kvf_session_params *sp, const char *what,
                 struct kvf_session **out);
/* KV entries per layer, the positions each (layer, head) holds, the merges
 * done, and the per-layer budgets (NULL when not searched), as JSON. */
cJSON *kv_per_layer_json(const struct kvf_session *s, const struct kvf_model_info *info);
/* Adds bytes_full (what a full cache holds for the prompt), bytes_kept and
 * their ratio to a kv object. */
void kv_kept_json(cJSON *kv, size_t full, size_t kept);
cJSON *kv_positions_json(const struct kvf_session *s, const struct kvf_model_info *info);
/* The cache's types: key (a->kv_types: "f16", or "q8_0/q4_0" for keys/values), "type_k", "type_v". */
void kv_types_json(cJSON *o, const char *key, const struct args *a);
cJSON *kv_merges_json(const struct kvf_session *s, const struct kvf_model_info *info);
cJSON *kv_layer_budgets_json(const struct kvf_session *s, const struct kvf_model_info *info);

/* ---------------------------------------------------- input (input.c) -- */

/* The media of one command line, in order, ready for kvf_prompt_init. */
struct media_set {
    struct kvf_media **items;
    int n, cap;
    int n_encoded;       /* images and frames through the vision tower */
    double encode_ms;    /* their total encoding time */
};

/* A growing string. */
struct strbuf {
    char *s;
    size_t n, cap;
};

bool strbuf_put(struct strbuf *b, const char *s, size_t n);
/* Tokenizes into a malloc'd array; *n receives the count. */
int tokenize_text(const struct kvf_model *m, const char *text, size_t len, bool bos, bool special, int32_t **out,
                  int32_t *n);
/* Text of one token (render_special false); returns the byte count or -1.
 * *buf grows as needed. */
int32_t token_piece(const struct kvf_model *m, int32_t tok, char **buf, int32_t *cap);
bool wants_chat(const struct args *a);
/* The chat template to apply: --chat-template, else vicuna for a vision
 * model whose file names none, else NULL (the model's own). */
const char *chat_template_for(const struct args *a, const struct kvf_model *m);
/* --max-image-mpix in pixels (0: the library's default). */
int64_t image_max_pixels(const struct args *a);
/* The prompt as the model sees it: raw, or wrapped in a chat template. */
int build_prompt(const struct args *a, const struct kvf_model *m, const char *text, char **out);
/* msgs in the chat template of chat_template_for(a, m), with the assistant's
 * prefix after them when add_assistant; *out malloc'd. */
int chat_text(const struct args *a, const struct kvf_model *m, const struct kvf_chat_message *msgs, int n,
                bool add_assistant, char **out);

/* The text the newest message (msgs[n - 1]) adds to a cache that holds the
 * conversation before it: all of it formatted when no reply is in it yet;
 * else the markup the template closes the last reply (msgs[n - 2]) with,
 * then what the template writes after the closed conversation. The cache
 * holds each reply as generated, so a template that trims or rewrites a
 * reply's text never makes it go in twice. msgs[n - 2].content is swapped
 * and put back; *out malloc'd. */
int chat_next_text(const struct args *a, const struct kvf_model *m, struct kvf_chat_message *msgs, int n, char **out);

void media_set_free(struct media_set *ms);
/* Frees the items past the first n. */
void media_set_truncate(struct media_set *ms, int n);
/* Takes md (freed on failure). */
int media_push(struct media_set *ms, struct kvf_media *md);
/* An image through the vision tower, appended to ms; label names it in errors. */
int media_encode(const struct args *a, const struct kvf_model *m, const struct kvf_image *img, const char *label,
                 struct media_set *ms);
/* An image file through the vision tower, appended to ms (videos: media_video_dir, media_build). */
int media_image_file(const struct args *a, const struct kvf_model *m, const char *path, struct media_set *ms);
/* A video as a directory of frames, in name order (frame_0001.png, ...),
 * through kvf_media_encode_video, appended to ms. */
int media_video_dir(const struct args *a, const struct kvf_model *m, const char *dir, struct media_set *ms);
/* The marker each item of ms fills: "<image>", or "<video>" for a video's
 * first item (NULL for its others). */
const char *media_marker(const struct media_set *ms, int i);
/* Every --image / --frame / --video / --pseudo-image, in command-line order. */
int media_build(const struct args *a, const struct kvf_model *m, struct media_set *ms);
/* The media of one line of a samples file ([{"image"|"frame"|"pseudo": PATH}],
 * relative paths against dir), appended to ms; errors name cmd and line. */
int samples_media(const char *cmd, const struct args *a, const struct kvf_model *m, const cJSON *list, const char *dir,
                  int line, struct media_set *ms);
/* The prompt with its markers filled by the media. */
int prompt_make(const struct kvf_model *m, const char *text, const struct media_set *ms, bool special,
                struct kvf_prompt **out);

/* ------------------------ generation (reply.c: generate and chat) -- */

/* The sampling options of generate and chat, with llama.cpp's names. */
#define OPTS_SAMPLING \
    { "--n-predict", "-n", OPT_INT, &a->n_predict, -1, 1 << 24, "N", \
      "tokens to generate at most; -1: until the end of generation or of the context" }, \
    { "--temp", NULL, OPT_FLOAT, &a->temp, 0, 100, "T", "temperature; 0 = greedy (default 0)" }, \
    { "--top-k", NULL, OPT_INT, &a->top_k, 0, 1 << 30, "K", "keep the K most likely tokens, 0 = off (default 40)" }, \
    { "--top-p", NULL, OPT_FLOAT, &a->top_p, 0, 1, "P", "nucleus sampling, 1 = off (default 0.95)" }, \
    { "--min-p", NULL, OPT_FLOAT, &a->min_p, 0, 1, "P", "drop tokens below P x the best, 0 = off (default 0.05)" }, \
    { "--seed", NULL, OPT_U64, &a->seed, 0, 0, "S", "random seed (default 42)" }, \
    { "--repeat-penalty", NULL, OPT_FLOAT, &a->repeat_penalty, 0, 100, "R", \
      "divide the logits of tokens among the last --repeat-last-n by R (default 1: off)" }, \
    { "--repeat-last-n", NULL, OPT_INT, &a->repeat_last_n, 0, 1 << 20, "N", \
      "tokens the repeat penalty looks back (default 64)" }, \
    { "--ignore-eos", NULL, OPT_FLAG, &a->ignore_eos, 0, 0, NULL, \
      "go on past the model's end-of-generation tokens (sampled as any other)" }, \
    { "--reverse-prompt --stop", "-r", OPT_LIST, &a->stops, 0, 0, "TEXT", \
      "stop once the text generated ends with TEXT (repeatable; the text keeps it)" }

/* Defaults of OPTS_SAMPLING (greedy, -n n_predict). */
void sampling_defaults(struct args *a, int n_predict);
/* The sampler of OPTS_SAMPLING. */
int sampler_open(const struct args *a, struct kvf_sampler **out);
/* pr through the session in parts of one forward pass, from its position
 * first (> 0: the session holds the positions before it, kept by
 * kvf_session_truncate), with progress on stderr (label: "prompt"); stops
 * early when interrupted() (*stopped set; the positions in so far stay).
 * Policies that need the whole prompt in one pass run it in one call, from
 * the start. */
int prompt_prefill(struct kvf_session *s, const struct kvf_prompt *pr, int first, const struct args *a,
                   const char *what, bool *stopped);
/* One reply: sampled, streamed to stdout when stream, each token but the
 * last decoded into the session. */
struct reply {
    struct strbuf text;   /* what was generated */
    int n_gen, n_decoded;
    double decode_ms;
    const char *stop;     /* eog, length, context, stop (an -r text) or interrupted */
    int32_t last;         /* the token it stopped on, not decoded (-1: none, at eog or interrupted) */
};
int reply_generate(struct kvf_session *s, const struct kvf_model *m, struct kvf_sampler *smp, const struct args *a,
                   bool stream, const char *what, struct reply *r);
/* kvf_sampler_accept of a prompt's token ids. */
void sampler_accept_prompt(struct kvf_sampler *smp, const struct kvf_prompt *pr);

/* ------------------------------------------------ chat (conversation.c) -- */

/* kvfold chat, also run by generate -cnv. */
int chat_run(const struct args *a);

/* ------------------------------------------------------------ scoring -- */

/* -log softmax(row)[target] (perplexity.c). */
double token_nll(const float *row, int n_vocab, int32_t target);

/* Memory read bandwidth with `threads` threads, GB/s (0: could not
 * measure); bandwidth.c. */
double mem_read_gbps(int threads);

#endif
