/* Chat templates: exact strings for each template with one to three turns,
 * system messages, buffer sizes, and detection from Jinja template text. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kvfold.h"
#include "tok/chat.h"

#include <string.h>

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* llama.cpp's test conversation (tests/test-chat-template.cpp): a system
 * message, three questions, padded answer text to show trimming rules. */
static const struct kvf_chat_message conv[] = {
    { "system", "You are a helpful assistant" },
    { "user", "Hello" },
    { "assistant", "Hi there" },
    { "user", "Who are you" },
    { "assistant", "   I am an assistant   " },
    { "user", "Another question" },
};

static void expect(const char *name, const struct kvf_chat_message *m, int n, bool add, const char *want) {
    char buf[2048];
    int32_t r = -1;
    const enum kvf_status st = kvf_chat_apply(NULL, name, m, n, add, buf, (int32_t)sizeof buf, &r);
    if (st != KVF_OK || strcmp(buf, want) != 0)
        print_error("template %s, %d messages:\n got: [%s]\nwant: [%s]\n", name, n, st == KVF_OK ? buf : "(error)",
                    want);
    assert_int_equal(st, KVF_OK);
    assert_int_equal(r, (int32_t)strlen(want));
    assert_string_equal(buf, want);
}

static void test_chatml(void **state) {
    (void)state;
    expect("chatml", conv + 1, 1, true, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    expect("chatml", conv + 1, 1, false, "<|im_start|>user\nHello<|im_end|>\n");
    expect("chatml", conv, N(conv), true,
           "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
           "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
           "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
           "<|im_start|>assistant\n");
    const struct kvf_chat_message tool[] = { { "tool", "42" } };
    expect("chatml", tool, 1, false, "<|im_start|>tool\n42<|im_end|>\n");
}

static void test_gemma(void **state) {
    (void)state;
    expect("gemma", conv + 1, 1, true, "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n");
    expect("gemma", conv, 2, true,
           "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\n");
    /* Same text as llama.cpp's expected gemma output. */
    expect("gemma", conv, N(conv), true,
           "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
           "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
           "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n");
    /* system with no user turn after it: kept as a user turn */
    const struct kvf_chat_message only_sys[] = { { "system", "Be brief." }, { "system", " Be kind. " } };
    expect("gemma", only_sys, 2, true,
           "<start_of_turn>user\nBe brief.\n\nBe kind.<end_of_turn>\n<start_of_turn>model\n");
}

static void test_llama2(void **state) {
    (void)state;
    expect("llama2", conv + 1, 1, true, "[INST] Hello [/INST]");
    expect("llama2", conv, 2, true, "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]");
    expect("llama2", conv, 4, true,
           "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are "
           "you [/INST]");
    expect("llama2", conv, N(conv), false,
           "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are "
           "you [/INST] I am an assistant </s><s>[INST] Another question [/INST]");
    expect("llama2", conv, 5, true,
           "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are "
           "you [/INST] I am an assistant </s>");
    /* system only: the prefix closes the instruction */
    expect("llama2", conv, 1, true, "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n [/INST]");
}

static void test_vicuna(void **state) {
    (void)state;
    expect("vicuna", conv + 1, 1, true,
           "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
           "detailed, and polite answers to the user's questions. USER: Hello ASSISTANT:");
    expect("vicuna", conv, 2, true, "You are a helpful assistant USER: Hello ASSISTANT:");
    expect("vicuna", conv, N(conv), true,
           "You are a helpful assistant USER: Hello ASSISTANT: Hi there</s>USER: Who are you ASSISTANT:    I am an "
           "assistant   </s>USER: Another question ASSISTANT:");
    const struct kvf_chat_message no_sys[] = { { "system", "" }, { "user", "<image>\nWhat is shown?" } };
    expect("vicuna", no_sys, 2, true, "USER: <image>\nWhat is shown? ASSISTANT:");
}

static void test_buffer_sizes(void **state) {
    (void)state;
    const char *want = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
    const int32_t n = (int32_t)strlen(want);
    char buf[128];
    int32_t r = 0;
    /* too small: KVF_ERR_BUFFER and the bytes needed, NUL included */
    assert_int_equal(kvf_chat_apply(NULL, "chatml", conv + 1, 1, true, NULL, 0, &r), KVF_ERR_BUFFER);
    assert_int_equal(r, n + 1);
    memset(buf, 'X', sizeof buf);
    assert_int_equal(kvf_chat_apply(NULL, "chatml", conv + 1, 1, true, buf, n, &r), KVF_ERR_BUFFER);
    assert_int_equal(r, n + 1);
    assert_int_equal(buf[n], 'X'); /* nothing written past len */
    memset(buf, 'X', sizeof buf);
    assert_int_equal(kvf_chat_apply(NULL, "chatml", conv + 1, 1, true, buf, 10, &r), KVF_ERR_BUFFER);
    assert_int_equal(r, n + 1);
    assert_int_equal(buf[10], 'X');
    memset(buf, 'X', sizeof buf);
    assert_int_equal(kvf_chat_apply(NULL, "chatml", conv + 1, 1, true, buf, n + 1, &r), KVF_OK);
    assert_int_equal(r, n);
    assert_string_equal(buf, want);
    assert_int_equal(buf[n + 1], 'X');
    /* no messages: just the prefix */
    assert_int_equal(kvf_chat_apply(NULL, "gemma", NULL, 0, true, buf, sizeof buf, &r), KVF_OK);
    assert_int_equal(r, 21);
    assert_string_equal(buf, "<start_of_turn>model\n");
}

static void test_bad_arguments(void **state) {
    (void)state;
    char buf[64];
    int32_t r;
    assert_int_equal(kvf_chat_apply(NULL, "zephyr", conv, 2, true, buf, sizeof buf, &r), KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "zephyr"));
    assert_int_equal(kvf_chat_apply(NULL, NULL, conv, 2, true, buf, sizeof buf, &r), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_chat_apply(NULL, "chatml", NULL, 2, true, buf, sizeof buf, &r), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_chat_apply(NULL, "chatml", conv, -1, true, buf, sizeof buf, &r), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_chat_apply(NULL, "chatml", conv, 2, true, buf, sizeof buf, NULL), KVF_ERR_INVALID_ARG);
    const struct kvf_chat_message bad[] = { { "user", NULL } };
    assert_int_equal(kvf_chat_apply(NULL, "chatml", bad, 1, true, buf, sizeof buf, &r), KVF_ERR_INVALID_ARG);
    const struct kvf_chat_message tool[] = { { "tool", "x" } };
    assert_int_equal(kvf_chat_apply(NULL, "gemma", tool, 1, true, buf, sizeof buf, &r), KVF_ERR_INVALID_ARG);
    assert_string_equal(kvf_chat_templates(), "llama2,vicuna,chatml,gemma");
}

static void test_detect(void **state) {
    (void)state;
    /* Excerpts of the real templates (SmolLM2, Gemma 3, Llama-2-chat, Vicuna). */
    assert_string_equal(chat_detect("{% for message in messages %}{% if loop.first and messages[0]['role'] != "
                                    "'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant' }}"),
                        "chatml");
    assert_string_equal(chat_detect("{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{{ "
                                    "'<start_of_turn>' + role + '\\n' }}"),
                        "gemma");
    assert_string_equal(chat_detect("{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
                                    "message['content'] | trim + ' [/INST]' }}"),
                        "llama2");
    assert_string_equal(chat_detect("{% if message['role'] == 'user' %}{{ 'USER: ' + message['content'] + ' ' }}"
                                    "{% elif message['role'] == 'assistant' %}{{ 'ASSISTANT: ' }}"),
                        "vicuna");
    assert_string_equal(chat_detect("gemma"), "gemma");
    assert_string_equal(chat_detect("vicuna"), "vicuna");
    assert_null(chat_detect("{{ messages | tojson }}"));
    assert_null(chat_detect("USER: only one marker"));
    assert_null(chat_detect(""));
    assert_null(chat_detect(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chatml),     cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_llama2),     cmocka_unit_test(test_vicuna),
        cmocka_unit_test(test_buffer_sizes), cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
