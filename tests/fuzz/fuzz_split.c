/* fuzz_split.h: unpacking one fuzz input into the files of a directory. */
#include "fuzz_split.h"
#include "fuzz.h"

#include <string.h>

static const uint8_t *next_mark(const uint8_t *p, const uint8_t *end) {
    const uint8_t *m = memmem(p, (size_t)(end - p), FUZZ_SPLIT_MARK, FUZZ_SPLIT_MARK_LEN);
    return m ? m : end;
}

bool fuzz_split_write(const uint8_t *data, size_t size, const char *dir) {
    const uint8_t *end = data + size;
    for (const uint8_t *p = next_mark(data, end); p < end;) {
        const uint8_t *name = p + FUZZ_SPLIT_MARK_LEN;
        const uint8_t *nl = memchr(name, '\n', (size_t)(end - name));
        if (!nl) break;
        const uint8_t *content = nl + 1, *stop = next_mark(content, end);
        if (fuzz_name_ok(name, (size_t)(nl - name))) {
            char fname[FUZZ_NAME_MAX + 1];
            memcpy(fname, name, (size_t)(nl - name));
            fname[nl - name] = '\0';
            if (!fuzz_write_file(dir, fname, content, (size_t)(stop - content))) return false;
        }
        p = stop;
    }
    return true;
}
