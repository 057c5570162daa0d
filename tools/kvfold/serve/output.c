/* kvfold serve's output cutting: where a stop string ends a reply, and how
 * much of the text so far can be sent (never the start of a stop string
 * that the next token may complete, nor a UTF-8 character cut short). */
#include "sched.h"

/* Bytes at the end of s[0..n) that may begin one of the stop strings. */
static size_t stop_hold(const struct serve_job *j, const char *s, size_t n) {
    size_t hold = 0;
    for (int i = 0; i < j->n_stops; i++) {
        const size_t len = strlen(j->stops[i]);
        for (size_t k = MIN(len - 1, n); k > hold; k--)
            if (memcmp(s + n - k, j->stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* n moved back to the start of a UTF-8 character cut at the end of s[0..n). */
static size_t utf8_boundary(const char *s, size_t n) {
    for (size_t back = 1; back <= MIN(n, 3); back++) {
        const unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back */
        const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        return len > back ? n - back : n;
    }
    return n;
}

/* The earliest match of a stop string that ends after `from`, or -1. */
long output_stop(const struct serve_job *j, size_t from) {
    long best = -1;
    for (int i = 0; i < j->n_stops; i++) {
        const size_t len = strlen(j->stops[i]);
        const size_t start = from >= len ? from - len + 1 : 0;
        const char *hit = start < j->out.n ? memmem(j->out.s + start, j->out.n - start, j->stops[i], len) : NULL;
        if (hit && (best < 0 || hit - j->out.s < best))
            best = hit - j->out.s;
    }
    return best;
}

size_t output_ready(const struct serve_job *j) {
    return utf8_boundary(j->out.s, j->out.n - stop_hold(j, j->out.s, j->out.n));
}
