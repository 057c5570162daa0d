/* Writes the seed corpora of the fuzz harnesses from the fixtures of
 * tests/tools/make_fixture, one folder per harness (OUTDIR/<kind>/).
 * Images other than PPM/PGM come from make_image_seeds.py (Pillow).
 *
 * usage: make_seeds FIXTURES OUTDIR */
#include "fuzz_split.h"
#include "kvfold.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *fixtures, *out;

/* The whole of a file (NULL when it cannot be read). */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n)
        *len = (size_t)n;
    else free(buf), buf = NULL;
    if (f) fclose(f);
    return buf;
}

static FILE *seed_open(const char *kind, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out, kind);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", out, kind, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    return f;
}

static void seed(const char *kind, const char *name, const void *data, size_t len) {
    FILE *f = seed_open(kind, name);
    if (fwrite(data, 1, len, f) != len || fclose(f)) {
        fprintf(stderr, "make_seeds: cannot write %s/%s\n", kind, name);
        exit(1);
    }
}

static void seed_fixture(const char *kind, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", fixtures, name);
    size_t len;
    char *data = slurp(path, &len);
    if (!data) {
        fprintf(stderr, "make_seeds: cannot read the fixture %s\n", path);
        exit(1);
    }
    seed(kind, name, data, len);
    free(data);
}

static int name_cmp(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* A fixture directory packed as fuzz_split.h says (files in name order). */
static void seed_dir(const char *name) {
    char dir[4096], path[8192];
    snprintf(dir, sizeof dir, "%s/%s", fixtures, name);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "make_seeds: cannot open the fixture %s\n", dir);
        exit(1);
    }
    char *names[32];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 32;)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    FILE *f = seed_open("safetensors", name);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len;
        char *data = slurp(path, &len);
        if (!data || fwrite(FUZZ_SPLIT_MARK, 1, FUZZ_SPLIT_MARK_LEN, f) != FUZZ_SPLIT_MARK_LEN ||
            fprintf(f, "%s\n", names[i]) < 0 || fwrite(data, 1, len, f) != len) {
            fprintf(stderr, "make_seeds: cannot pack %s\n", path);
            exit(1);
        }
        free(data);
        free(names[i]);
    }
    fclose(f);
}

static void seed_text(const char *kind, const char *name, const char *text) {
    seed(kind, name, text, strlen(text));
}

/* Every preset with its defaults, every stage option on snapkv, and a few
 * budgets given apart. */
static void kvspec_seeds(void) {
    for (int i = 0; i < kvf_kv_policy_count(); i++) {
        struct kvf_kv_policy_info p;
        if (kvf_kv_policy_get(i, &p) != KVF_OK) continue;
        char spec[512], name[64];
        const char *colon = *p.defaults ? ":" : "";
        if (!strcmp(p.stage, "preset")) snprintf(spec, sizeof spec, "%s%s%s", p.name, colon, p.defaults);
        else snprintf(spec, sizeof spec, "snapkv+%s=%s%s%s", p.stage, p.name, colon, p.defaults);
        /* the defaults put a space before each stage, for reading; a spec has none */
        for (char *r = spec, *w = spec;; r++)
            if (*r != ' ' && !(*w++ = *r)) break;
        snprintf(name, sizeof name, "%s-%s", p.stage, p.name);
        seed_text("kvspec", name, spec);
    }
    seed_text("kvspec", "budget-ratio", "snapkv\n0.1");
    seed_text("kvspec", "budget-count", "h2o:recent=0.3\n12");
    seed_text("kvspec", "budget-blockwise", "blockwise:block=image,question=1\n16");
    /* the reduce stages' layers within the fixture's 6 */
    seed_text("kvspec", "small-lightkv", "lightkv:layers=1,3,4,windows=2,2,1,ratio=0.5");
    seed_text("kvspec", "small-tome", "snapkv+reduce=tome:layers=2,4,ratio=0.3");
}

/* Tasks in MileBench's layout, one per scoring rule (the first line names the task). */
/* Sessions of the tiny Gemma 3 under policies with each kind of state,
 * saved after a prompt with a pseudo-image, compression and two steps; the
 * flag byte asks the harness to keep the CRC as it is. */
static void session_seeds(void) {
    static const char *const specs[] = {"full", "snapkv:budget=0.3+decode=h2o", "lookm:budget=0.3",
                                        "expected:budget=0.3", "streaming:budget=12+decode=window",
                                        "prefixkv:budget=0.3", "snapkv:budget=0.3+budget=adaptive"};
    char path[4096];
    snprintf(path, sizeof path, "%s/gemma3-f32.gguf", fixtures);
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 1;
    struct kvf_model *m = NULL;
    struct kvf_media *pseudo = NULL;
    struct kvf_prompt *pr = NULL;
    if (kvf_model_load(path, &mp, &m) != KVF_OK ||
        kvf_media_pseudo_image(m, "a red square", 3, 4, 0.1f, 7, &pseudo) != KVF_OK ||
        kvf_prompt_init(m, "Look at <image> and say what the colour is.", (const struct kvf_media *const *)&pseudo, 1,
                        true, false, &pr) != KVF_OK) {
        fprintf(stderr, "make_seeds: session seeds: %s\n", kvf_last_error());
        exit(1);
    }
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        /* the cache types in turn, keys and values alike and not */
        static const enum kvf_kv_type types[][2] = {{KVF_KV_F16, KVF_KV_F16}, {KVF_KV_Q8_0, KVF_KV_Q4_0},
                                                    {KVF_KV_Q4_0H, KVF_KV_Q4_0H}, {KVF_KV_F32, KVF_KV_F16},
                                                    {KVF_KV_Q4_0S, KVF_KV_Q4_0H}};
        struct kvf_session_params sp = kvf_session_default_params();
        sp.n_ctx = 48, sp.n_batch = 8, sp.kv_spec = specs[i];
        sp.type_k = types[i % 5][0], sp.type_v = types[i % 5][1];
        struct kvf_session *s = NULL;
        uint8_t *buf = NULL;
        size_t n = 0;
        if (kvf_session_init(m, &sp, &s) != KVF_OK || kvf_session_prefill_prompt(s, pr, NULL) != KVF_OK ||
            kvf_session_compress(s) != KVF_OK || kvf_session_decode(s, 1) != KVF_OK ||
            kvf_session_decode(s, 2) != KVF_OK || !(n = kvf_session_save_size(s)) || !(buf = malloc(n + 1)) ||
            kvf_session_save_buffer(s, buf + 1, n) != KVF_OK) {
            fprintf(stderr, "make_seeds: session %s: %s\n", specs[i], kvf_last_error());
            exit(1);
        }
        buf[0] = 0;
        char name[32];
        snprintf(name, sizeof name, "session-%zu", i);
        seed("session", name, buf, n + 1);
        free(buf);
        kvf_session_free(s);
    }
    kvf_prompt_free(pr);
    kvf_media_free(pseudo);
    kvf_model_free(m);
}

static void milebench_seeds(void) {
    seed_text("milebench", "open-ended",
              "ALFRED\n{\"meta_data\": {\"task_instruction\": [\"Describe the steps.\", \"Say what happens.\"], "
              "\"question_type\": \"open-ended\"}, \"data\": [{\"sample_id\": 7, \"task_instruction_id\": 1, "
              "\"image_quantity_level\": \"Few\", \"task_instance\": {\"context\": \"First {image#1} then "
              "{image#2}, what next?\", \"images_path\": [\"a.png\", \"a.png\"]}, \"response\": \"the cat sits\"}]}");
    seed_text("milebench", "multi-choice",
              "MMCoQA\n{\"metadata\": {\"task_instruction\": \"Pick one.\", \"question_type\": \"multi-choice\"}, "
              "\"data\": [{\"sample_id\": \"s1\", \"task_instance\": {\"context\": \"Which colour is {image#1}?\", "
              "\"images_path\": [\"a.png\"], \"choice_list\": [\"red\", \"blue\", \"green\"]}, \"response\": \"red\"}, "
              "{\"sample_id\": 2.5, \"task_instance\": {\"context\": \"{table#1}{image#2} twice\", \"images_path\": "
              "[\"a.png\", \"a.png\"], \"choice_list\": [\"yes\", \"no\"]}, \"response\": \"no\"}]}");
    seed_text("milebench", "gpr",
              "GPR1200\n{\"meta_data\": {\"task_instruction\": [\"Find the match.\"], \"question_type\": "
              "\"multi-choice\"}, \"data\": [{\"task_instruction_id\": 0, \"task_instance\": {\"context\": "
              "\"{image#1}\", \"images_path\": [\"a.png\"], \"choice_list\": [\"a\", \"b\"]}, \"response\": \"b\"}]}");
    seed_text("milebench", "needle",
              "TextNeedleInAHaystack\n{\"meta_data\": {\"task_instruction\": [\"Find the password.\"], "
              "\"question_type\": \"open-ended\"}, \"data\": [{\"task_instruction_id\": 0, \"task_instance\": "
              "{\"context\": \"long text {image#1} the password is 1234. What is it?\", \"images_path\": [\"a.png\"]}, "
              "\"response\": 1234}]}");
}

static void tokenizer_seeds(void) {
#define TEXT(s) {s, sizeof s - 1} /* the NUL bytes inside count */
    static const struct { const char *s; size_t len; } texts[] = {
        TEXT("\x00The cat sat on the mat."),
        TEXT("\x01Hello, world!  Tabs\tand\nnew lines\r\n"),
        TEXT("\x06<s>The answer</s> is<s> 42\0user says hi\0and the assistant answers"),
        TEXT("\x03h\xc3\xa9llo w\xc3\xb6rld \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82"),
        TEXT("\x05invalid \xff\xfe\xc3 utf-8 \xed\xa0\x80 and overlong \xc0\xaf"),
        TEXT("\x07<|im_start|>user\nhi<|im_end|>\n<start_of_turn>model\n[INST] x [/INST]"),
    };
#undef TEXT
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char name[16];
        snprintf(name, sizeof name, "text-%zu", i);
        seed("tokenizer", name, texts[i].s, texts[i].len);
    }
}

/* Requests to kvfold serve: fuzz_serve's flags byte (bit 0: chat, bit 1: the
 * vision tower, bit 2: --media-dir the fixtures' folder, bits 3-5: the chat
 * template), then the body. The parser accepts the first six and file-url;
 * each of the others is refused for one reason. */
static void serve_seeds(void) {
#define PNG "\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR42mM8ISfHwMDAxMDAwMDAAAAN" \
            "BAEIf62CUQAAAABJRU5ErkJggg==\""
#define USER(content) "{\"messages\": [{\"role\": \"user\", \"content\": " content "}]}"
#define REQ(name, s) {name, s, sizeof s - 1} /* the flags byte may be 0 */
    static const struct { const char *name, *s; size_t len; } reqs[] = {
        REQ("chat", "\x09{\"model\": \"llava-f32.gguf\", \"messages\": [{\"role\": \"system\", \"content\": "
                    "\"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hello there\"}], \"max_tokens\": 8, "
                    "\"temperature\": 0.7, \"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.05, \"seed\": 42, \"n\": 1}"),
        REQ("chat-image", "\x03{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                          "\"What is this?\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": " PNG "}}]}], "
                          "\"stream\": true, \"stream_options\": {\"include_usage\": true}}"),
        REQ("chat-turns-chatml", "\x1b{\"messages\": [{\"role\": \"developer\", \"content\": \"Answer in one word.\"}, "
                                 "{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": " PNG
                                 "}, {\"type\": \"text\", \"text\": \"Colour?\"}]}, {\"role\": \"assistant\", "
                                 "\"content\": \"Red.\"}, {\"role\": \"user\", \"content\": \"Sure?\"}], "
                                 "\"ignore_eos\": true, \"max_completion_tokens\": 4, \"model\": null}"),
        REQ("chat-gemma", "\x21" USER("\"<start_of_turn>model\\n\\u00e9t\\u00e9 \\ud83d\\ude42\"")),
        REQ("completion", "\x00{\"prompt\": \"The cat sat on\", \"max_tokens\": 4, \"stop\": [\"\\n\", \".\"], "
                          "\"temperature\": 0, \"stream\": false}"),
        REQ("completion-kv", "\x02{\"prompt\": \"Once upon a time\", \"kv\": \"snapkv:budget=0.2\", \"stop\": \"END\", "
                             "\"stream\": true, \"stream_options\": null, \"seed\": 0}"),
        REQ("bad-json", "\x01{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}"),
        REQ("bad-type", "\x00{\"prompt\": \"x\", \"temperature\": \"hot\"}"),
        REQ("bad-prompt", "\x00{\"prompt\": [1, 2, 3]}"),
        REQ("bad-base64", "\x03" USER("[{\"type\": \"image_url\", \"image_url\": {\"url\": "
                                      "\"data:image/png;base64,iVBO@@@@\"}}]")),
        REQ("bad-role", "\x01{\"messages\": [{\"role\": \"tool\", \"content\": \"42\"}]}"),
        REQ("bad-stop", "\x00{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}"),
        REQ("bad-kv", "\x00{\"prompt\": \"x\", \"kv\": \"nosuch:budget=0.2\"}"),
        REQ("bad-model", "\x00{\"model\": \"gpt-4o\", \"prompt\": \"x\"}"),
        REQ("bad-stream-options", "\x01{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                                  "\"stream_options\": [true]}"),
        REQ("image-without-vision", "\x01" USER("[{\"type\": \"image_url\", \"image_url\": " PNG "}]")),
        REQ("file-url-without-media-dir", "\x03" USER("[{\"type\": \"image_url\", \"image_url\": "
                                                      "\"file:///etc/hostname\"}]")),
        REQ("file-url-outside", "\x07" USER("[{\"type\": \"image_url\", \"image_url\": "
                                            "{\"url\": \"file:///etc/hostname\"}}]")),
    };
#undef REQ
#undef USER
#undef PNG
    for (size_t i = 0; i < sizeof reqs / sizeof *reqs; i++) seed("serve", reqs[i].name, reqs[i].s, reqs[i].len);
    /* a file under --media-dir: accepted, though no image */
    char req[8192];
    snprintf(req, sizeof req, "\x07{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", "
             "\"image_url\": {\"url\": \"file://%s/llava-f32.gguf\"}}]}]}", fixtures);
    seed_text("serve", "file-url", req);
}

/* Images the harness reads without any encoder: binary and ASCII PPM/PGM. */
static void image_seeds(void) {
    unsigned char ppm[15 + 4 * 3 * 3];
    const int head = snprintf((char *)ppm, sizeof ppm, "P6\n4 3\n255\n");
    for (int i = 0; i < 4 * 3 * 3; i++) ppm[head + i] = (unsigned char)(i * 21);
    seed("image", "rgb.ppm", ppm, (size_t)head + 4 * 3 * 3);
    seed_text("image", "grey.pgm", "P2\n3 2\n15\n0 5 10\n15 3 7\n");
}

/* A KVzap scorer fitted for the tiny Gemma 3 (kvf_kvzap_calibrate) on a
 * few spans of a fixed text. */
static void kvzap_seeds(void) {
    static const char text[] =
        "The river runs past the mill and under the old stone bridge, where the children of the village throw "
        "bread to the ducks every morning before school. In the afternoon the miller counts his sacks of flour.";
    char path[4096], name[4200];
    snprintf(path, sizeof path, "%s/gemma3-f32.gguf", fixtures);
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = 1;
    struct kvf_model *m = NULL;
    struct kvf_kvzap_params p = kvf_kvzap_default_params();
    p.samples = 3, p.test = 1, p.span = 16, p.per_span = 8;
    const char *texts[1] = {text};
    snprintf(name, sizeof name, "%s/kvzap", out);
    mkdir(name, 0755);
    snprintf(name, sizeof name, "%s/kvzap/fitted.kvzap", out);
    if (kvf_model_load(path, &mp, &m) != KVF_OK || kvf_kvzap_calibrate(m, texts, 1, &p, name, NULL) != KVF_OK) {
        fprintf(stderr, "make_seeds: kvzap seeds: %s\n", kvf_last_error());
        exit(1);
    }
    kvf_model_free(m);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_seeds FIXTURES OUTDIR\n");
        return 1;
    }
    fixtures = argv[1], out = argv[2];
    mkdir(out, 0755);
    static const char *const gguf[] = {"llama-q4_0.gguf", "llama-q8_0.gguf", "llama-f16.gguf", "qwen2-f32.gguf",
                                       "gemma3-f32.gguf"};
    for (size_t i = 0; i < sizeof gguf / sizeof *gguf; i++) seed_fixture("gguf", gguf[i]);
    static const char *const mmproj[] = {"llava-mmproj-f32.gguf", "llava-mmproj-f16.gguf",
                                         "llava-mmproj-badproj.gguf", "gemma3v-mmproj-f32.gguf"};
    for (size_t i = 0; i < sizeof mmproj / sizeof *mmproj; i++) seed_fixture("mmproj", mmproj[i]);
    static const char *const dirs[] = {"llama-st-bf16", "llama-st-sharded", "qwen2-st", "gemma3-st", "llava-st",
                                       "llava-st-new", "gemma3v-st"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) seed_dir(dirs[i]);
    kvspec_seeds();
    milebench_seeds();
    tokenizer_seeds();
    image_seeds();
    serve_seeds();
    session_seeds();
    kvzap_seeds();
    return 0;
}
