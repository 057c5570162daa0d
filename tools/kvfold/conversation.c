/* kvfold chat: a conversation on a terminal (or from a pipe) whose KV cache
 * lives across turns: each message appends only what the chat template adds
 * to the conversation the cache holds, the policy (--kv) compresses the
 * cache after each message and keeps it within budget while decoding, so a
 * long conversation holds a bounded cache. Lines starting with '/' are
 * commands (/help lists them); a line ending in '\' goes on on the next.
 * (Not chat.c: tests/unit/test_chat.c, the chat templates' test, would be
 * built with that file.) */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void chat_defaults(struct args *a) { sampling_defaults(a, -1); }

static int chat_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        OPT_NO_REPACK,
        { "--prompt", "-p", OPT_STR, &a->prompt, 0, 0, "TEXT", "the first message (then the conversation goes on)" },
        OPT_SYSTEM,
        OPTS_ESCAPE,
        { "--chat-template", NULL, OPT_STR, &a->chat_template, 0, 0, "NAME",
          "llama2, vicuna, chatml or gemma (default: the model's)" },
        OPTS_SAMPLING,
        OPT_THREADS,
        { "--ctx-size", "-c", OPT_INT, &a->ctx, 0, 1 << 24, "N",
          "positions the conversation may reach (default: the model's context, at most 8192)" },
        OPT_BATCH,
        OPTS_VISION,
        { "--max-image-mpix", NULL, OPT_FLOAT, &a->max_image_mpix, 0.000001, 1e4, "M",
          "reject images over M megapixels (default 64)" },
        OPT_VIDEO_FPS,
        { "--kv", NULL, OPT_STR, &a->kv, 0, 0, "SPEC",
          "KV cache policy, applied after each prompt and while decoding, "
          "e.g. snapkv:budget=0.2+decode=h2o (see kvfold policies)" },
        OPTS_KV_STORAGE,
        { "--session", NULL, OPT_STR, &a->session_file, 0, 0, "FILE",
          "go on with the conversation saved in FILE "
          "when it exists (its messages, cache and policy), and save the conversation there at the end" },
        OPT_NO_PROGRESS,
    };
    OPTS_RETURN(out, t);
}

#define CHAT_HELP                                                                                                    \
    "/image PATH  attach an image to the next message (a vision model: LLaVA GGUF with --mmproj)\n"                  \
    "/video DIR   attach a video, a directory of frames in name order (--video-fps: their rate)\n"                  \
    "/kv          what the KV cache holds: positions seen, entries kept per layer, bytes\n"                          \
    "/save FILE   save the conversation: its messages, compressed cache and policy (a session file)\n"           \
    "/load FILE   go on with a saved conversation instead of this one (same model)\n"                              \
    "/reset       forget the conversation (the system message stays)\n"                                             \
    "/exit        end (also /quit, or end of input: Ctrl-D)\n"                                                       \
    "Ctrl-C stops a reply; at the prompt it ends the conversation (exit status 130).\n"

/* One conversation. msgs[i].content is owned (malloc'd); roles are static.
 * /reset keeps the first n_keep messages (the system message, if any). */
struct chat {
    const struct args *a;
    struct kvf_model *m;
    struct kvf_model_info info;
    struct kvf_session *s;
    struct kvf_sampler *smp;
    struct kvf_chat_message *msgs;
    int n_msgs, cap_msgs, n_keep;
    struct media_set pending; /* /image: for the next message */
    int n_turns, n_prompt, n_gen;
    double prefill_ms, decode_ms;
};

static void chat_forget(struct chat *c) {
    const int keep = MIN(c->n_keep, c->n_msgs);
    for (int i = keep; i < c->n_msgs; i++)
        free((char *)c->msgs[i].content);
    c->n_msgs = keep;
}

static void chat_free(struct chat *c) {
    for (int i = 0; i < c->n_msgs; i++)
        free((char *)c->msgs[i].content);
    free(c->msgs);
    media_set_free(&c->pending);
    kvf_sampler_free(c->smp);
    kvf_session_free(c->s);
    kvf_model_free(c->m);
}

/* Appends a message; takes content (freed on failure). */
static bool chat_push(struct chat *c, const char *role, char *content) {
    if (content && c->n_msgs == c->cap_msgs) {
        const int cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        struct kvf_chat_message *m = realloc(c->msgs, (size_t)cap * sizeof *m);
        if (m) {
            c->msgs = m;
            c->cap_msgs = cap;
        }
    }
    if (!content || c->n_msgs == c->cap_msgs) {
        free(content);
        return false;
    }
    c->msgs[c->n_msgs++] = (struct kvf_chat_message){ role, content };
    return true;
}

static void chat_pop(struct chat *c) { free((char *)c->msgs[--c->n_msgs].content); }

static int chat_open(struct chat *c) {
    const struct args *a = c->a;
    int rc = load_model(a, &c->m);
    if (rc)
        return rc;
    kvf_model_get_info(c->m, &c->info);
    const struct kvf_session_params sp = session_params(a, a->ctx);
    if ((rc = open_session(c->m, &sp, "chat: cannot create the session", &c->s)) || (rc = sampler_open(a, &c->smp)))
        return rc;
    if (a->system && !chat_push(c, "system", strdup(a->system)))
        return fail(KVF_ERR_NOMEM, "chat");
    c->n_keep = c->n_msgs;
    /* Fails here, not at the first message, when the model has no template. */
    char *probe = NULL;
    rc = chat_text(a, c->m, c->msgs, c->n_msgs, true, &probe);
    free(probe);
    return rc;
}

/* Forgets the conversation (the system message stays), with a fresh
 * sampler: its repeat-penalty history held the old conversation. */
static int chat_restart(struct chat *c) {
    struct kvf_sampler *fresh = NULL;
    const int rc = sampler_open(c->a, &fresh);
    if (rc)
        return rc;
    kvf_sampler_free(c->smp);
    c->smp = fresh;
    chat_forget(c);
    kvf_session_reset(c->s);
    media_set_free(&c->pending);
    return 0;
}

/* A marker and a newline for each pending image and video, then the text. */
static char *user_content(const struct chat *c, const char *text) {
    const size_t mk = strlen(KVF_MARKER_IMAGE) + 1, len = strlen(text);
    char *out = malloc((size_t)c->pending.n * mk + len + 1); /* "<video>" is no longer */
    if (!out)
        return NULL;
    size_t o = 0;
    for (int i = 0; i < c->pending.n; i++)
        if (media_marker(&c->pending, i))
            o += (size_t)sprintf(out + o, "%s\n", media_marker(&c->pending, i));
    memcpy(out + o, text, len + 1);
    return out;
}

/* A prompt, decoded tokens aside, that the turn could not take: said on
 * stderr, the conversation goes on without the message. */
static int turn_refused(struct chat *c, enum kvf_status st, const char *why) {
    chat_pop(c);
    if (st == KVF_ERR_NOMEM)
        return fail(st, "chat");
    if (why)
        print_error("chat: %s", why);
    else
        fail(st, "chat: the message");
    return 0;
}

/* reply_generate leaves the token it stopped on undecoded: it goes into the
 * cache now, which then holds the whole reply. */
static int turn_close(struct chat *c, const struct reply *r) {
    if (r->last < 0 || kvf_session_n_past(c->s) >= kvf_session_n_ctx(c->s))
        return 0;
    const double t0 = now_ms();
    const enum kvf_status st = kvf_session_decode(c->s, r->last);
    c->decode_ms += now_ms() - t0;
    return st == KVF_OK ? 0 : fail(st, "chat: decode");
}

/* One exchange: the user's message through the model, the reply streamed. */
static int chat_turn(struct chat *c, const char *text) {
    const struct args *a = c->a;
    char *fmt = NULL;
    if (!chat_push(c, "user", user_content(c, text)))
        return fail(KVF_ERR_NOMEM, "chat");
    int rc = chat_next_text(a, c->m, c->msgs, c->n_msgs, &fmt);
    if (rc) {
        chat_pop(c);
        return rc;
    }
    struct kvf_prompt *pr = NULL;
    enum kvf_status st = kvf_prompt_init(c->m, fmt, (const struct kvf_media *const *)c->pending.items,
                                         c->pending.n, kvf_session_n_past(c->s) == 0, true, &pr);
    const int n_past = kvf_session_n_past(c->s), n_ctx = kvf_session_n_ctx(c->s);
    char why[160];
    const char *refusal = NULL; /* NULL: the library's message */
    if (st == KVF_OK && kvf_prompt_n_tokens(pr) == 0) {
        refusal = "the message adds no tokens";
        st = KVF_ERR_INVALID_ARG;
    } else if (st == KVF_OK && kvf_prompt_n_tokens(pr) >= n_ctx - n_past) {
        snprintf(why, sizeof why, "the conversation is full (%d of %d positions, the message needs %d): /reset to "
                 "start over, or a larger -c", n_past, n_ctx, kvf_prompt_n_tokens(pr));
        refusal = why;
        st = KVF_ERR_CONTEXT;
    }
    if (st != KVF_OK) {
        kvf_prompt_free(pr);
        free(fmt);
        return turn_refused(c, st, refusal);
    }
    bool stopped;
    double t0 = now_ms();
    rc = prompt_prefill(c->s, pr, 0, a, "chat: prompt", &stopped);
    if (!rc && !stopped) /* the repeat penalty's history: what the cache holds */
        sampler_accept_prompt(c->smp, pr);
    c->prefill_ms += now_ms() - t0;
    c->n_prompt += kvf_session_n_past(c->s) - n_past;
    kvf_prompt_free(pr);
    media_set_free(&c->pending);
    struct reply r = { 0 };
    if (!rc && stopped) {
        /* Ctrl-C in the prompt: as if the message had not been sent -- unless
         * sliding-window layers freed what going back needs (--swa-full). */
        interrupt_clear();
        st = kvf_session_truncate(c->s, n_past);
        if (st == KVF_ERR_UNSUPPORTED) {
            rc = chat_restart(c);
            if (!rc)
                print_error("chat: interrupted: the model's sliding-window layers had freed what taking the message "
                            "back needs, so the conversation starts over (--swa-full keeps them)");
        } else {
            rc = turn_refused(c, st, "interrupted: the message was not sent");
        }
    } else if (!rc && (st = kvf_session_compress(c->s)) != KVF_OK) {
        rc = fail(st, "chat: kv compression");
    } else if (!rc && !(rc = reply_generate(c->s, c->m, c->smp, a, true, "chat", &r))) {
        putchar('\n');
        fflush(stdout);
        c->n_gen += r.n_gen;
        c->decode_ms += r.decode_ms;
        c->n_turns++;
        if (!strcmp(r.stop, "interrupted")) {
            interrupt_clear();
            fputs("kvfold: chat: reply interrupted\n", stderr);
        } else if (!strcmp(r.stop, "context")) {
            fprintf(stderr, "kvfold: chat: the conversation reached its %d positions: /reset to start over\n", n_ctx);
        }
        rc = turn_close(c, &r);
        if (!rc && !chat_push(c, "assistant", strdup(r.text.s ? r.text.s : "")))
            rc = fail(KVF_ERR_NOMEM, "chat");
    }
    free(r.text.s);
    free(fmt);
    return rc;
}

/* /kv: positions seen, entries kept (mean per kv head, each layer), bytes. */
static void print_kv(const struct chat *c) {
    const size_t bytes = kvf_session_kv_bytes(c->s), full = kvf_session_kv_full_bytes(c->s);
    printf("kv: %s, %s; %d positions seen of %d; %.2f MiB of %.2f MiB a full cache would hold (%.1f%%); "
           "peak %.2f MiB\nentries per kv head, layer 0..%d:",
           kvf_session_kv_spec(c->s)[0] ? kvf_session_kv_spec(c->s) : "full",
           c->a->kv_types, kvf_session_n_past(c->s), kvf_session_n_ctx(c->s), bytes / MIB,
           full / MIB, full ? 100.0 * (double)bytes / (double)full : 100.0, kvf_session_kv_peak_bytes(c->s) / MIB,
           c->info.n_layer - 1);
    for (int l = 0; l < c->info.n_layer; l++) {
        long kept = 0;
        for (int g = 0; g < c->info.n_head_kv; g++) {
            int n;
            kvf_session_kv_tags(c->s, l, g, &n);
            kept += n;
        }
        printf(" %.0f", (double)kept / c->info.n_head_kv);
    }
    putchar('\n');
    fflush(stdout);
}

/* /save: the messages go into the session's note as {"kvfold_chat": 1,
 * "messages": [{"role", "content"}, ...]}, then the session to path. */
static int chat_save(struct chat *c, const char *path) {
    cJSON *o = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(o, "messages");
    bool ok = o && msgs && cJSON_AddNumberToObject(o, "kvfold_chat", 1);
    for (int i = 0; ok && i < c->n_msgs; i++) {
        cJSON *x = cJSON_CreateObject();
        ok = x && cJSON_AddItemToArray(msgs, x) && cJSON_AddStringToObject(x, "role", c->msgs[i].role) &&
             cJSON_AddStringToObject(x, "content", c->msgs[i].content);
    }
    char *note = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!note) return fail(KVF_ERR_NOMEM, "chat: /save");
    enum kvf_status st = kvf_session_set_note(c->s, note);
    free(note);
    if (st == KVF_OK) st = kvf_session_save(c->s, path);
    if (st != KVF_OK) return fail(st, "chat: save");
    return 0;
}

/* The static role name of a saved message's role; NULL for another. */
static const char *chat_role(const char *role) {
    static const char *const roles[] = {"system", "user", "assistant"};
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (!strcmp(role, roles[i])) return roles[i];
    return NULL;
}

/* /load: the conversation saved in path replaces this one (its messages,
 * cache and policy; a fresh sampler that has seen its tokens). Errors are
 * printed and leave this one as it was. */
static int chat_load(struct chat *c, const char *path) {
    struct kvf_session *s = NULL;
    enum kvf_status st = kvf_session_load(c->m, path, c->a->threads, c->a->ctx, &s);
    if (st != KVF_OK) return fail(st, "chat: load");
    const char *note = kvf_session_note(s);
    cJSON *o = json_parse(note, strlen(note), NULL); /* "" when the session has none */
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    struct chat next = {.a = c->a, .s = s};
    bool ok = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "kvfold_chat")) && cJSON_IsArray(msgs);
    const cJSON *x;
    cJSON_ArrayForEach(x, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(x, "role"),
                    *content = cJSON_GetObjectItemCaseSensitive(x, "content");
        const char *r = cJSON_IsString(role) ? chat_role(role->valuestring) : NULL;
        ok = ok && r && cJSON_IsString(content) && chat_push(&next, r, strdup(content->valuestring));
    }
    cJSON_Delete(o);
    struct kvf_sampler *smp = NULL;
    int rc = ok ? sampler_open(c->a, &smp) : 0;
    if (!ok || rc) {
        chat_free(&next);
        if (!ok) print_error("chat: load: '%s' is a session file, not a kvfold chat's (no messages in its note)", path);
        return rc;
    }
    for (int i = 0; i < kvf_session_n_past(s); i++) /* the repeat penalty's history: what the cache holds */
        if (kvf_session_tokens(s)[i] >= 0) kvf_sampler_accept(smp, kvf_session_tokens(s)[i]);
    for (int i = 0; i < c->n_msgs; i++)
        free((char *)c->msgs[i].content);
    free(c->msgs);
    kvf_session_free(c->s);
    kvf_sampler_free(c->smp);
    media_set_free(&c->pending);
    c->s = s, c->smp = smp, c->msgs = next.msgs, c->n_msgs = next.n_msgs, c->cap_msgs = next.cap_msgs;
    c->n_keep = c->n_msgs && !strcmp(c->msgs[0].role, "system");
    return 0;
}

/* A '/' line; returns 1 to end the conversation, 0 to go on, else -exit code. */
static int chat_slash(struct chat *c, const char *line) {
    const size_t n = strcspn(line, " \t");
    const char *arg = line + n + strspn(line + n, " \t");
#define IS(word) (n == strlen(word) && strncmp(line, word, n) == 0)
    if (IS("/exit") || IS("/quit"))
        return 1;
    if (IS("/help")) {
        fputs(CHAT_HELP, stdout);
    } else if (IS("/kv")) {
        print_kv(c);
    } else if (IS("/reset")) {
        if (chat_restart(c) != 0)
            return -EXIT_RUNTIME;
        puts("(the conversation is forgotten)");
    } else if (IS("/save") || IS("/load")) {
        const bool save = IS("/save");
        if (!*arg)
            print_error("chat: %s needs a FILE", save ? "/save" : "/load");
        else if (save ? chat_save(c, arg) == 0 : chat_load(c, arg) == 0)
            printf("(%s %s: %d messages, %d positions, kv %s)\n", save ? "saved to" : "loaded from", arg, c->n_msgs,
                   kvf_session_n_past(c->s), kvf_session_kv_spec(c->s)[0] ? kvf_session_kv_spec(c->s) : "full");
    } else if (IS("/image")) {
        if (!*arg)
            print_error("chat: /image needs a PATH");
        else if (!c->info.has_vision)
            print_error("chat: this model has no vision tower (a LLaVA GGUF needs --mmproj FILE)");
        else if (media_image_file(c->a, c->m, arg, &c->pending) == 0)
            printf("(%s: attached to the next message)\n", arg);
    } else if (IS("/video")) {
        if (!*arg)
            print_error("chat: /video needs a DIR of frames");
        else if (!c->info.has_vision)
            print_error("chat: this model has no vision tower (a LLaVA GGUF needs --mmproj FILE)");
        else {
            const int before = c->pending.n; /* a video fails whole */
            if (media_video_dir(c->a, c->m, arg, &c->pending) == 0) printf("(%s: attached to the next message)\n", arg);
            else media_set_truncate(&c->pending, before);
        }
    } else {
        print_error("chat: unknown command '%.*s' (/help lists them)", (int)n, line);
    }
#undef IS
    fflush(stdout);
    return 0;
}

/* The next line of input, '\'-continued lines joined; NULL at the end of
 * input or on Ctrl-C. */
static char *read_message(bool tty) {
    struct strbuf b = { 0 };
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) {
            fputs(b.n ? ". " : "> ", stdout);
            fflush(stdout);
        }
        errno = 0;
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0 || interrupted()) {
            free(line);
            if (!interrupted())
                return b.s; /* the end of input ends a pending continuation */
            free(b.s);
            return NULL;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        const bool more = len > 0 && line[len - 1] == '\\';
        if (more)
            line[--len] = '\n';
        if (!strbuf_put(&b, line, (size_t)len) || !more) {
            free(line);
            return b.s ? b.s : strdup("");
        }
    }
}

int chat_run(const struct args *a) {
    if (a->chat_template) {
        int32_t n;
        if (kvf_chat_apply(NULL, a->chat_template, NULL, 0, false, NULL, 0, &n) != KVF_ERR_BUFFER) {
            print_error("chat: %s", kvf_last_error());
            return EXIT_USAGE;
        }
    }
    if (a->n_predict == 0) {
        print_error("chat: -n must be -1 (until the end of each reply or of the context) or at least 1");
        return EXIT_USAGE;
    }
    struct chat c = { .a = a };
    char *first = NULL;
    size_t first_len;
    int rc = (a->prompt || a->file) ? input_text("chat", a, &first, &first_len) : 0;
    if (!rc)
        rc = chat_open(&c);
    /* --session: a conversation saved there goes on (a bad file ends the command; a missing one starts anew) */
    if (!rc && a->session_file && access(a->session_file, F_OK) == 0) {
        rc = chat_load(&c, a->session_file) ? EXIT_INPUT : 0;
        if (!rc)
            fprintf(stderr, "kvfold: chat: %s: %d messages, %d positions\n", a->session_file, c.n_msgs,
                    kvf_session_n_past(c.s));
    }
    bool aware = false;
    if (!rc && a->kv && kvf_kv_policy_question_aware(a->kv, &aware) == KVF_OK && aware)
        fprintf(stderr, "kvfold: chat: note: --kv %s is question-aware: it compresses each message before the next "
                        "question exists, keeping what that message's end points at, so a detail asked for later "
                        "may be gone (keydiff is question-agnostic: kvfold policies)\n", a->kv);
    const bool tty = isatty(STDIN_FILENO);
    if (!rc && tty)
        fprintf(stderr, "kvfold chat: %s, kv %s, %d positions at most. /help lists the commands.\n", c.info.name,
                a->kv ? a->kv : "full", kvf_session_n_ctx(c.s));
    if (!rc && first)
        rc = chat_turn(&c, first);
    free(first);
    while (!rc) {
        char *msg = read_message(tty);
        if (!msg)
            break;
        int r = 0;
        if (msg[0] == '/')
            r = chat_slash(&c, msg);
        else if (msg[0])
            rc = chat_turn(&c, msg);
        free(msg);
        if (r < 0)
            rc = -r;
        if (r == 1)
            break;
    }
    const bool quit = !rc && interrupted(); /* Ctrl-C at the prompt */
    if (!rc && a->session_file && chat_save(&c, a->session_file))
        rc = EXIT_INPUT;
    if (!rc)
        fprintf(stderr,
                "kvfold: chat: %d turns; prompts %d tokens (%.1f tok/s); replies %d tokens (%.1f tok/s); kv %.2f MiB, "
                "peak %.2f MiB; peak rss %.1f MiB\n",
                c.n_turns, c.n_prompt, c.prefill_ms > 0 ? c.n_prompt * 1e3 / c.prefill_ms : 0, c.n_gen,
                c.decode_ms > 0 ? c.n_gen * 1e3 / c.decode_ms : 0, kvf_session_kv_bytes(c.s) / MIB,
                kvf_session_kv_peak_bytes(c.s) / MIB, kvf_peak_rss_bytes() / MIB);
    chat_free(&c);
    return quit ? EXIT_INTERRUPTED : rc;
}

const struct command chat_command = {
    .name = "chat",
    .summary = "A conversation on the terminal (or from a pipe) with the chat template, streaming replies.",
    .usage = "-m FILE [--mmproj FILE] [--kv SPEC] [-sys TEXT] [options]",
    .details = "Each line is a message (a line ending in \\ goes on on the next); the KV cache lives across turns\n"
               "and --kv compresses it after each message and keeps it within budget while decoding, so a\n"
               "long conversation holds a bounded cache. Replies stream to stdout; commands:\n" CHAT_HELP
               "kvfold generate -cnv runs this command.",
    .run = chat_run,
    .defaults = chat_defaults,
    .opts = chat_opts,
};
