/* A whole file as a NUL-terminated string (NULL when it cannot be read),
 * shared by the test tools that take text prompts from files. */
#ifndef KVF_TEST_READ_TEXT_H
#define KVF_TEST_READ_TEXT_H

#include <stdio.h>
#include <stdlib.h>

static inline char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) buf = (free(buf), NULL);
    if (buf) buf[len] = '\0';
    fclose(f);
    return buf;
}

#endif
