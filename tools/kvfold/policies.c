/* kvfold policies: the KV cache policies --kv accepts, and which to use when. */
#include "cli.h"

#include <string.h>

/* When each preset pays off and what it costs beyond the eviction itself,
 * from the measurements in docs/RESULTS.md (needles: "text / image"
 * accuracy of Qwen2.5-Coder-1.5B, where the full cache finds every one) and
 * docs/PERFORMANCE.md (costs). The library's registry says what a rule does;
 * this says what it was measured to be good for, which is the CLI's to
 * tell. The cli_kv test fails on a preset without a line. */
static const struct {
    const char *name, *when;
} guides[] = {
    {"full", "the reference: nothing is evicted, and every preset at budget=1.0 answers exactly as it does; "
             "compare against it (kvfold eval)."},
    {"streaming", "a hard memory bound with no statistics at all, for long conversations where only recent text "
                  "matters; it forgets the middle of the prompt (1.5B needles 0.60 / 0.80 at 0.5, 0.00 / 0.40 at "
                  "0.2)."},
    {"h2o", "continuing or summarising the whole prompt: the full cache's answer stays within 7-8% perplexity at "
            "0.2 on the 1.5B; but a detail asked for after a long prompt is lost (text needles 0 even at 0.5; "
            "image needles kept down to 0.1). Gathers attention sums over every prompt query (about 6% of the "
            "prefill) and evicts one entry per decoded token."},
    {"snapkv", "a question after a long context: keeps every 1.5B needle, text and image, at 0.2 (0.60 / 0.60 at "
               "0.1); weaker for open continuation (perplexity +13% at 0.2, +80% at 0.05). Cheap: scores with the "
               "last 32 prompt queries (about 1% of the prefill), so the question must end the prompt."},
    {"pyramidkv", "as snapkv with more entries in lower layers: equal to it at 0.2 on the 1.5B, worse at 0.1 (0.00 / "
                  "0.40 against 0.60 / 0.60); prefer snapkv."},
    {"roco", "as h2o (summed attention: image needles kept, text needles lost from 0.5 on); the best rule at 0.5 "
             "for continuation on Gemma 3 270M. Gathers attention sums and their variance."},
    {"keydiff", "the most robust needle finder measured: 1.5B 1.00 / 1.00 at 0.2, 0.80 / 1.00 at 0.1, 0.60 / 0.60 at "
                "0.05, and the best evictor for SmolLM2's needles too. Reads keys only (no attention statistics), so "
                "the question may come anywhere, or after compression."},
    {"knorm", "a statistics-free baseline (key norms only): as snapkv on 1.5B needles down to 0.2, then falls off "
              "(0.40 / 0.40 at 0.1); on SmolLM2 its perplexity at 0.05 is 8.27 against snapkv's 5.76."},
    {"expected", "scores without the question, from the statistics of the queries so far (kvpress's "
                 "ExpectedAttentionPress, the same entries kept): on the 1.5B's text needles it keeps none at 0.2 or "
                 "0.1, with the question before or after compression, and 1 of 5 at 0.5; kvpress's press lost the same "
                 "records. Holds the queries' covariance per head (44 MB for the 1.5B)."},
    {"kvzip", "a cache compressed before its question exists (a chat, a server's cached sessions, kvpress's "
              "protocol): keeps every 1.5B text needle at 0.2 and 0.1 whether the question comes before or after "
              "compression. Costs about one more prefill of the context when it compresses (the model repeats it), "
              "the cache peaking at the context plus one chunk of the repetition meanwhile."},
    {"kvzap", "kvzip's use (a cache compressed before its question exists) at the price of one prefill: KVzip's "
              "scores predicted from each layer's input as entries are written, no second pass (36 ms of "
              "compression against kvzip's 44 s on the 1.5B's 4K contexts). Needs the model's scorer, fitted once "
              "by `kvfold calibrate -m MODEL --corpus FILE...` (MODEL.kvzap beside the model, or scorer=FILE). "
              "Best with a threshold: kvzap+budget=threshold:tau=-3 answered 0.75 of RULER's 16 questions at 0.16 "
              "of the bytes on the 1.5B (kvzip at 0.2: 0.80); under budget=0.2, 0.69."},
    {"tova", "as snapkv with a window of one query averaged over every head of a layer (kvpress's TOVAPress, the "
             "same entries kept): question-aware, so the question must end the prompt; it loses what the question "
             "asks when the question comes after (RULER in docs/RESULTS.md)."},
    {"random", "a floor to measure other rules against, not for use (1.5B needles 0.00 / 0.80 at 0.2)."},
    {"imgrand", "a baseline for image-heavy prompts: every text entry stays (every text needle, no image needle), "
                "so it keeps far more than the budget (38.8 of 81.3 MiB at 0.05 on the 1.5B)."},
    {"lookm", "multimodal prompts whose text carries the task (describe, continue): the lowest perplexity of all at "
              "0.05 on the 1.5B (within 19% of the full cache); but it evicts image entries first and scores as h2o "
              "(needles 0.00 / 0.40 at 0.2). Merging costs about 3% of the prefill; text_prior=all keeps every text "
              "entry past the budget."},
    {"elastic", "as h2o for continuation (within 7-8% perplexity at 0.2 on the 1.5B) and, with prefixkv, the best at "
                "keeping image needles at 0.05 (0.80); text needles lost. One kept set per layer, evicted entries "
                "merged into their neighbours; its decode rule keeps the cache at budget while generating."},
    {"prefixkv", "as elastic at 0.2 (ties h2o for continuation on the 1.5B); the layer budgets are searched per "
                 "prompt (online=1) or profiled once on samples (kvfold profile, profile=FILE). Its budgets break "
                 "down at 0.05 (perplexity 9.9 against 2.0 on the 1.5B): use 0.2 and above."},
    {"csp", "images and text with a question: csp:window=32+pool=avg keeps every 1.5B needle at 0.2; the paper's "
            "default window (window=0, as many queries as recent entries) loses text needles (0.00 / 0.40) and costs "
            "about 12% of the prefill. Good for continuation at 0.05 (after lookm and h2o)."},
    {"blockwise", "when the prefill's peak memory is the limit (many images, long video): the cache never exceeds "
                  "budget + one block (peak 30 of 91 MiB on the 1.5B). Use question=1 (the question runs first and "
                  "scores every block): 2/2 text and 2/2 image needles, against 0/2 and 1/2 without."},
    {"lightkv", "image-heavy prompts where prefill time matters: about 25% faster and 23% less KV on the 1.5B, text "
                "untouched (every text needle), but detail written into an image is merged away (0/2 image "
                "needles). No budget; the prompt runs in one pass (activations sized by the prompt)."},
    {"fastv", "as lightkv, dropping instead of merging: the fastest prefill (about 30% faster on the 1.5B), 1/2 image "
              "needles. No budget; one pass."},
    {"tome", "the token-merging baseline for lightkv (keys only, no guidance by the prompt): the same savings, 0/2 "
             "image needles. No budget; one pass."},
};

static const char *guide_of(const char *name) {
    for (size_t i = 0; i < COUNT_OF(guides); i++)
        if (!strcmp(guides[i].name, name)) return guides[i].when;
    return "";
}

/* "  LABEL  text" with the text wrapped at word boundaries to `width`
 * columns and continued under itself: the summaries and guides are a
 * paragraph each. */
static void print_wrapped(const char *label, const char *text) {
    enum { INDENT = 18, WIDTH = 100 };
    printf("  %-*s", INDENT - 2, label);
    int col = INDENT;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ' ');
        const int len = end ? (int)(end - p) : (int)strlen(p);
        if (!len) break;
        if (col > INDENT && col + 1 + len > WIDTH) {
            printf("\n%*s", INDENT, "");
            col = INDENT;
        } else if (col > INDENT) {
            putchar(' ');
            col++;
        }
        printf("%.*s", len, p);
        col += len;
        p += len;
    }
    putchar('\n');
}

#define QUESTION_AWARE "question-aware: scores with the prompt's last queries, so the question must end the " \
    "prompt it compresses (not a chat's next message: kvfold eval --question after measures that)"
#define QUESTION_AGNOSTIC "question-agnostic: its scores do not depend on where the question is"

static int policies_opts(struct args *a, struct opt *out) {
    const struct opt t[] = { OPT_JSON };
    OPTS_RETURN(out, t);
}

static cJSON *policy_json(const struct kvf_kv_policy_info *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "stage", p->stage);
    cJSON_AddStringToObject(o, "name", p->name);
    cJSON_AddStringToObject(o, "summary", p->summary);
    cJSON_AddStringToObject(o, "paper", p->paper);
    cJSON_AddStringToObject(o, "keys", p->keys);
    cJSON_AddStringToObject(o, "defaults", p->defaults);
    cJSON_AddStringToObject(o, "when", strcmp(p->stage, "preset") ? "" : guide_of(p->name));
    cJSON_AddBoolToObject(o, "question_aware", p->question_aware);
    return o;
}

static int cmd_policies(const struct args *a) {
    cJSON *arr = a->json ? cJSON_CreateArray() : NULL;
    const char *stage = "";
    for (int i = 0; i < kvf_kv_policy_count(); i++) {
        struct kvf_kv_policy_info p;
        kvf_kv_policy_get(i, &p);
        if (a->json) {
            cJSON_AddItemToArray(arr, policy_json(&p));
            continue;
        }
        const bool preset = !strcmp(p.stage, "preset");
        if (strcmp(stage, p.stage))
            printf(preset ? "presets (--kv NAME[:key=value,...]):\n"
                          : "\n%s stage (append +%s=OPTION[:key=value,...]):\n", p.stage, p.stage);
        stage = p.stage;
        print_wrapped(p.name, p.summary);
        char line[1024];
        snprintf(line, sizeof line, "defaults: %s", p.defaults[0] ? p.defaults : "(no parameters)");
        print_wrapped("", line);
        if (preset) {
            snprintf(line, sizeof line, "use: %s", guide_of(p.name));
            print_wrapped("", line);
            print_wrapped("", p.question_aware ? QUESTION_AWARE : QUESTION_AGNOSTIC);
        } else if (p.question_aware) {
            print_wrapped("", QUESTION_AWARE);
        }
        if (strcmp(p.paper, "-")) {
            snprintf(line, sizeof line, "paper: %s", p.paper);
            print_wrapped("", line);
        }
    }
    if (!a->json)
        printf("\nbudget: the share of the tokens seen that each (layer, kv head) keeps (0.2; 1.0 never evicts),\n"
               "  or a count of entries per head (1024).\n"
               "kvpress: compression_ratio is the share removed, budget the share kept:\n"
               "  budget = 1 - compression_ratio (SnapKVPress(compression_ratio=0.8) is --kv snapkv:budget=0.2).\n"
               "example: --kv snapkv:budget=0.2+decode=h2o (the stage syntax: kvfold policies --help)\n"
               "use: measured in docs/RESULTS.md on Qwen2.5-Coder-1.5B (\"the 1.5B\") unless another model is\n"
               "  named; \"text / image\" is the accuracy on needles hidden in text and in (synthetic) image\n"
               "  segments; the rules themselves: docs/METHODS.md.\n"
               "question-aware rules compress for the question at the end of the prompt; kvfold chat and a\n"
               "  server's cached sessions compress before the next question exists, where keydiff is the\n"
               "  question-agnostic rule that kept the most (docs/RESULTS.md).\n");
    return a->json ? print_json(arr) : 0;
}

const struct command policies_command = {
    .name = "policies",
    .summary = "List the KV cache policies --kv accepts: parameters, defaults, when to use each, papers.",
    .usage = "[--json]",
    .details =
        "Every (layer, kv head) keeps the entries its rule scores best once the prompt is in;\n"
        "evicted entries are freed. A spec is a preset, then stage options, each after a '+':\n"
        "\n"
        "  --kv PRESET[:key=value,...][+STAGE=OPTION[:key=value,...]]...\n"
        "\n"
        "  PRESET      the scoring rule and the defaults of every stage (snapkv, h2o, lookm, ...).\n"
        "  budget=     most presets' size: a share of the tokens seen (0.2 keeps a fifth; 1.0 never\n"
        "              evicts) or a count of entries per (layer, kv head) (1024).\n"
        "  +reduce=    merge or drop image tokens inside the decoder during the prefill (lightkv,\n"
        "              fastv, tome); the prompt then runs in one pass.\n"
        "  +schedule=  blocks: prefill in blocks under a fixed budget (its own budget=, block=, ...),\n"
        "              then the preset's rule once the prompt is in.\n"
        "  +budget=    how the entries are spread over layers and heads (uniform, pyramid, prefix,\n"
        "              adaptive); the size itself stays in the preset: snapkv:budget=0.2+budget=pyramid.\n"
        "  +pool=      avg: each score averaged over neighbouring entries, as SnapKV pools.\n"
        "  +decode=    how the cache stays within budget while generating (grow, window, h2o,\n"
        "              fixed-distance, recompress); streaming, h2o, elastic and prefixkv bring their\n"
        "              own, the others grow.\n"
        "\n"
        "List values take the commas up to the next key=: lightkv:layers=12,18,24,ratio=0.5. Examples:\n"
        "  --kv snapkv:budget=0.2+decode=h2o\n"
        "  --kv \"h2o:budget=0.1+schedule=blocks:budget=1024,block=image,question=1\"\n"
        "  --kv csp:budget=0.2,window=32+pool=avg          --kv snapkv:budget=0.1+budget=adaptive\n"
        "\n"
        "kvpress users: kvpress's compression_ratio is the share removed, kvfold's budget the share\n"
        "kept: budget = 1 - compression_ratio (SnapKVPress(compression_ratio=0.8) is snapkv:budget=0.2).\n"
        "The list says for each preset when it pays off (\"use:\", measured in docs/RESULTS.md) and\n"
        "the paper it comes from.",
    .run = cmd_policies,
    .opts = policies_opts,
    .no_model = true,
};
