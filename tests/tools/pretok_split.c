/* The pre-tokenizer pieces kvfold cuts, for tests/ref/pretok_ref.py.
 *
 *   pretok_split --list     every tokenizer.ggml.pre name, a tab, and "ok"
 *                           or the reason kvfold does not run it
 *   pretok_split NAME       per line of stdin, a text in hex: one line of
 *                           its pieces in hex, separated by spaces
 *
 * Hex keeps newlines, NULs and invalid UTF-8 out of the line structure. */
#include "tok/tok_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool piece_print(void *ud, const char *piece, size_t len) {
    bool *first = ud;
    printf("%s", *first ? "" : " ");
    *first = false;
    for (size_t i = 0; i < len; i++) {
        printf("%02x", (unsigned char)piece[i]);
    }
    return true;
}

static int names_list(void) {
    for (size_t i = 0; i < tok_pre_count; i++) {
        const char *p = tok_pre_table[i].names;
        while (*p) {
            const int n = (int)strcspn(p, "|");
            printf("%.*s\t%s\n", n, p, tok_pre_table[i].unsupported ? tok_pre_table[i].unsupported : "ok");
            p += n + (p[n] == '|');
        }
    }
    return 0;
}

/* The bytes of a hex line, in place; -1 if it is not hex. */
static long hex_decode(char *line) {
    const size_t n = strcspn(line, "\r\n");
    if (n % 2) {
        return -1;
    }
    for (size_t i = 0; i < n; i += 2) {
        unsigned v;
        if (sscanf(line + i, "%2x", &v) != 1) {
            return -1;
        }
        line[i / 2] = (char)v;
    }
    return (long)(n / 2);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: pretok_split --list | NAME < hex lines\n");
        return 2;
    }
    if (strcmp(argv[1], "--list") == 0) {
        return names_list();
    }
    const struct tok_pre *pre;
    struct pretok *p;
    if (tok_pre_from_name(argv[1], &pre) != KVF_OK || pretok_init(pre, &p) != KVF_OK) {
        fprintf(stderr, "pretok_split: %s\n", kvf_last_error());
        return 1;
    }
    static char line[1 << 16];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, stdin)) {
        const long n = hex_decode(line);
        bool first = true;
        if (n < 0 || !pretok_split(p, line, (size_t)n, piece_print, &first)) {
            fprintf(stderr, "pretok_split: bad line or out of memory\n");
            rc = 1;
        }
        printf("\n");
    }
    pretok_free(p);
    return rc;
}
